//! The checksum tail of descriptor and revoke blocks (csum v2/v3):
//! `crc32c(seed, block with the tail zeroed)` in the block's last 4 bytes.

use super::bytes::{be32, put_be32};
use crate::format::checksum::crc32c;

/// Size of the checksum tail of descriptor and revoke blocks (csum v2/v3).
pub const TAIL_SIZE: usize = 4;

/// crc32c(seed, block) with the last 4 bytes (the tail) taken as zero.
pub fn tail_checksum(seed: u32, block: &[u8]) -> u32 {
    let split = block.len().saturating_sub(TAIL_SIZE);
    let c = crc32c(seed, &block[..split]);
    crc32c(c, &[0u8; TAIL_SIZE][..block.len() - split])
}

/// The checksum stored in the tail of a descriptor or revoke block.
pub fn stored_tail_checksum(block: &[u8]) -> u32 {
    be32(block, block.len().saturating_sub(TAIL_SIZE))
}

/// True if the tail checksum of a descriptor or revoke block is right.
pub fn verify_tail_checksum(seed: u32, block: &[u8]) -> bool {
    block.len() >= TAIL_SIZE && stored_tail_checksum(block) == tail_checksum(seed, block)
}

/// Stores the tail checksum of a descriptor or revoke block.
pub fn set_tail_checksum(seed: u32, block: &mut [u8]) {
    let c = tail_checksum(seed, block);
    let off = block.len().saturating_sub(TAIL_SIZE);
    put_be32(block, off, c);
}
