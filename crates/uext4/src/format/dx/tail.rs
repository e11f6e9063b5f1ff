//! The metadata_csum tail of a dx block (`struct dx_tail`): a reserved
//! word and the crc32c of the header, the entries in use and the tail.

use super::entries::DxNode;
use super::layout::{DX_ENTRY_SIZE, DX_TAIL_SIZE};
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::bytes::{le16, le32, put_le32};
use crate::format::checksum::crc32c;

/// Verifies a dx block's checksum tail (metadata_csum only).
pub fn verify_checksum(b: &[u8], node: &DxNode, inode_seed: u32, block: u64) -> Result<()> {
    let count = node.entries.len();
    let tail = node.entries_offset + usize::from(node.limit) * DX_ENTRY_SIZE;
    if tail + DX_TAIL_SIZE > b.len() {
        return Err(Error::corruption(
            Structure::DxNode,
            Location::from_block(block),
            CorruptKind::MissingChecksumTail,
        ));
    }
    let covered = node.entries_offset + count * DX_ENTRY_SIZE;
    let mut c = crc32c(inode_seed, &b[..covered]);
    c = crc32c(c, &b[tail..tail + 4]);
    c = crc32c(c, &[0; 4]);
    let stored = le32(b, tail + 4);
    if stored != c {
        return Err(Error::Checksum { structure: Structure::DxNode, block, ino: 0, stored, computed: c });
    }
    Ok(())
}

/// Computes and stores a dx block's tail checksum (metadata_csum), for a
/// block whose count/limit header is at `entries_offset`.
pub fn set_checksum(b: &mut [u8], entries_offset: usize, inode_seed: u32) {
    let limit = usize::from(le16(b, entries_offset));
    let count = usize::from(le16(b, entries_offset + 2)).min(limit);
    let tail = entries_offset + limit * DX_ENTRY_SIZE;
    if tail + DX_TAIL_SIZE > b.len() {
        return;
    }
    b[tail..tail + 4].fill(0);
    let covered = entries_offset + count * DX_ENTRY_SIZE;
    let mut c = crc32c(inode_seed, &b[..covered]);
    c = crc32c(c, &b[tail..tail + 4]);
    c = crc32c(c, &[0; 4]);
    put_le32(b, tail + 4, c);
}
