//! The blocks of the orphan file (COMPAT_ORPHAN_FILE, kernel 5.15+).
//!
//! Each block of the inode named by `s_orphan_file_inum` is an array of
//! little-endian inode numbers (0 = free slot) followed by an 8-byte
//! tail: the magic `0x0b10ca04` and, with metadata_csum, a crc32c over
//! the block's physical number and the slot array, seeded with the
//! orphan file's inode checksum seed (fs seed, inode number,
//! generation), as the kernel's ext4_orphan_file_block_trigger
//! computes it. The slots replace the `s_last_orphan` chain: an orphan
//! is added by filling any free slot and removed by zeroing it, so
//! concurrent orphan changes touch different blocks.
//!
//! Pure codec: callers read and write the blocks.

use super::bytes::{le32, put_le32};
use super::checksum::crc32c;

/// `ob_magic` of every orphan-file block.
pub const ORPHAN_BLOCK_MAGIC: u32 = 0x0b10_ca04;

/// Bytes of the tail (magic and checksum) at the end of each block.
pub const TAIL_SIZE: usize = 8;

/// Inode-number slots in one block of `block_size` bytes.
pub fn slots_per_block(block_size: usize) -> usize {
    block_size.saturating_sub(TAIL_SIZE) / 4
}

/// Why an orphan-file block is rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockError {
    /// The block is shorter than a tail.
    TooShort,
    /// `ob_magic` is not [`ORPHAN_BLOCK_MAGIC`] (the value found).
    BadMagic(u32),
    /// `ob_checksum` does not match (found, computed).
    BadChecksum(u32, u32),
}

/// The checksum of orphan-file block `data` at physical block `pblk`;
/// `seed` is the orphan file's inode checksum seed.
pub fn block_checksum(data: &[u8], pblk: u64, seed: u32) -> u32 {
    let n = slots_per_block(data.len()) * 4;
    let c = crc32c(seed, &pblk.to_le_bytes());
    crc32c(c, &data[..n])
}

/// Checks the tail of `data` (its magic, and its checksum when `seed`
/// is given, i.e. with metadata_csum).
pub fn verify(data: &[u8], pblk: u64, seed: Option<u32>) -> Result<(), BlockError> {
    if data.len() < TAIL_SIZE + 4 {
        return Err(BlockError::TooShort);
    }
    let t = data.len() - TAIL_SIZE;
    let magic = le32(data, t);
    if magic != ORPHAN_BLOCK_MAGIC {
        return Err(BlockError::BadMagic(magic));
    }
    if let Some(seed) = seed {
        let (found, want) = (le32(data, t + 4), block_checksum(data, pblk, seed));
        if found != want {
            return Err(BlockError::BadChecksum(found, want));
        }
    }
    Ok(())
}

/// Writes the tail of `data`: the magic, and the checksum when `seed`
/// is given (after any slot change).
pub fn seal(data: &mut [u8], pblk: u64, seed: Option<u32>) {
    if data.len() < TAIL_SIZE + 4 {
        return;
    }
    let t = data.len() - TAIL_SIZE;
    put_le32(data, t, ORPHAN_BLOCK_MAGIC);
    if let Some(seed) = seed {
        let c = block_checksum(data, pblk, seed);
        put_le32(data, t + 4, c);
    }
}

/// The inode number in slot `j` of `data` (0 when free or out of range).
pub fn slot(data: &[u8], j: usize) -> u32 {
    if j < slots_per_block(data.len()) {
        le32(data, j * 4)
    } else {
        0
    }
}

/// Sets slot `j` of `data` to `ino` (0 frees it); false if `j` is out
/// of range. The caller seals the block afterwards.
pub fn set_slot(data: &mut [u8], j: usize, ino: u32) -> bool {
    if j >= slots_per_block(data.len()) {
        return false;
    }
    put_le32(data, j * 4, ino);
    true
}

/// The first free slot of `data`.
pub fn free_slot(data: &[u8]) -> Option<usize> {
    (0..slots_per_block(data.len())).find(|&j| slot(data, j) == 0)
}

/// The occupied slots of `data` as (slot, inode number).
pub fn entries(data: &[u8]) -> impl Iterator<Item = (usize, u32)> + '_ {
    (0..slots_per_block(data.len())).map(move |j| (j, slot(data, j))).filter(|&(_, ino)| ino != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sealed empty block verifies; filling and freeing a slot keeps it
    /// valid once resealed, and a stale checksum or a wrong block number
    /// is caught.
    #[test]
    fn seal_verify_and_slots() {
        let mut b = vec![0u8; 1024];
        assert_eq!(slots_per_block(1024), 254);
        seal(&mut b, 77, Some(0x1234_5678));
        assert_eq!(verify(&b, 77, Some(0x1234_5678)), Ok(()));
        assert_eq!(free_slot(&b), Some(0));
        assert!(set_slot(&mut b, 0, 12));
        assert!(set_slot(&mut b, 253, 99));
        assert!(!set_slot(&mut b, 254, 1), "the tail is not a slot");
        assert!(matches!(verify(&b, 77, Some(0x1234_5678)), Err(BlockError::BadChecksum(..))));
        seal(&mut b, 77, Some(0x1234_5678));
        assert_eq!(verify(&b, 77, Some(0x1234_5678)), Ok(()));
        assert!(matches!(verify(&b, 78, Some(0x1234_5678)), Err(BlockError::BadChecksum(..))));
        assert_eq!(verify(&b, 78, None), Ok(()), "no metadata_csum: the magic only");
        assert_eq!(free_slot(&b), Some(1));
        assert_eq!(entries(&b).collect::<Vec<_>>(), vec![(0, 12), (253, 99)]);
        assert_eq!(slot(&b, 253), 99);
        assert_eq!(slot(&b, 1000), 0);
        b[1016] ^= 1;
        assert!(matches!(verify(&b, 77, None), Err(BlockError::BadMagic(_))));
        assert_eq!(verify(&b[..8], 0, None), Err(BlockError::TooShort));
    }

    /// The checksum covers the block number then the slots only (not
    /// the tail), from the given seed.
    #[test]
    fn checksum_layout() {
        let mut b = vec![0u8; 4096];
        b[0] = 5;
        let want = crc32c(crc32c(7, &9u64.to_le_bytes()), &b[..4088]);
        assert_eq!(block_checksum(&b, 9, 7), want);
        b[4095] = 0xff;
        assert_eq!(block_checksum(&b, 9, 7), want);
    }

    /// A full block has no free slot.
    #[test]
    fn full_block() {
        let mut b = vec![0u8; 1024];
        for j in 0..slots_per_block(1024) {
            assert!(set_slot(&mut b, j, 11 + j as u32));
        }
        assert_eq!(free_slot(&b), None);
        assert_eq!(entries(&b).count(), 254);
    }
}
