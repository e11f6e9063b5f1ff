//! The shared xattr block: a 32-byte header (magic, reference count,
//! block count, hash, checksum) followed by an entry table.

use super::entry::{entries_bytes, parse_raw_entries, write_table};
use super::{to_entries, RawXattr, XattrEntry, XATTR_MAGIC};
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::bytes::{le32, put_le32};
use crate::format::checksum::crc32c;

/// Size of the xattr block header.
pub const BLOCK_HEADER_SIZE: usize = 32;

/// Header of an xattr block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XattrBlockHeader {
    /// Number of inodes sharing this block.
    pub refcount: u32,
    /// Stored checksum.
    pub checksum: u32,
}

/// Parses an xattr block, verifying magic, block count and (with
/// metadata_csum, `csum_seed` given) its checksum.
pub fn parse_block(b: &[u8], block: u64, csum_seed: Option<u32>) -> Result<(XattrBlockHeader, Vec<XattrEntry>)> {
    let (hdr, raw) = parse_block_raw(b, block, csum_seed)?;
    Ok((hdr, to_entries(raw)))
}

/// Like [`parse_block`], with the entries in their stored form.
pub fn parse_block_raw(b: &[u8], block: u64, csum_seed: Option<u32>) -> Result<(XattrBlockHeader, Vec<RawXattr>)> {
    let bad = |kind| Error::corruption(Structure::Xattr, Location::Block(block), kind);
    if b.len() < BLOCK_HEADER_SIZE + 4 {
        return Err(bad(CorruptKind::TooShort { len: b.len(), need: BLOCK_HEADER_SIZE + 4 }));
    }
    if le32(b, 0) != XATTR_MAGIC {
        return Err(bad(CorruptKind::BadMagic { found: u64::from(le32(b, 0)) }));
    }
    if le32(b, 8) != 1 {
        return Err(bad(CorruptKind::Mismatch { field: "h_blocks", value: u64::from(le32(b, 8)), expected: 1 }));
    }
    let hdr = XattrBlockHeader { refcount: le32(b, 4), checksum: le32(b, 0x10) };
    if let Some(seed) = csum_seed {
        let computed = block_checksum(b, block, seed);
        if computed != hdr.checksum {
            return Err(Error::Checksum { structure: Structure::Xattr, block, ino: 0, stored: hdr.checksum, computed });
        }
    }
    let entries =
        parse_raw_entries(b, BLOCK_HEADER_SIZE, 0, Structure::Xattr, |offset| Location::BlockOffset { block, offset })?;
    Ok((hdr, entries))
}

/// The crc32c an xattr block at `block` should carry.
pub fn block_checksum(b: &[u8], block: u64, csum_seed: u32) -> u32 {
    let mut c = crc32c(csum_seed, &block.to_le_bytes());
    c = crc32c(c, &b[..0x10]);
    c = crc32c(c, &[0; 4]);
    crc32c(c, &b[0x14..])
}

/// `h_hash` of a block from its entries' hashes in stored order
/// (ext4_xattr_rehash). An entry without a hash makes it 0, which tells
/// the kernel never to share the block.
pub fn block_hash(hashes: impl IntoIterator<Item = u32>) -> u32 {
    let mut h = 0u32;
    for e in hashes {
        if e == 0 {
            return 0;
        }
        h = (h << 16) ^ (h >> 16) ^ e;
    }
    h
}

/// The padded value size from which the kernel puts a value in an EA
/// inode right away (EXT4_XATTR_MIN_LARGE_EA_SIZE: a block less its
/// header, one entry with a 3-byte name and the terminator).
pub fn min_large_value(block_size: usize) -> usize {
    block_size.saturating_sub(super::entry::entry_len(3) + BLOCK_HEADER_SIZE + 4)
}

/// Bytes of an xattr block that local values may not take when they
/// could go to EA inodes instead (EXT4_XATTR_BLOCK_RESERVE), so that one
/// long value does not leave no room for the names of others.
pub fn block_reserve(block_size: usize) -> usize {
    (block_size / 8).min(1024)
}

/// Bytes the local values of `entries` take (padded).
pub fn values_bytes(entries: &[RawXattr]) -> usize {
    entries.iter().map(|e| e.value.as_ref().map_or(0, |v| super::entry::value_len(v.len()))).sum()
}

/// True if `entries` fit in one xattr block of `block_size` bytes.
pub fn block_fits(block_size: usize, entries: &[RawXattr]) -> bool {
    BLOCK_HEADER_SIZE + entries_bytes(entries) + 4 <= block_size
}

/// Orders block entries as the kernel keeps them (xattr_find_entry with
/// `sorted`): by name index, then name length, then name bytes.
pub fn sort_block_entries(entries: &mut [RawXattr]) {
    entries.sort_by(|a, b| (a.index, a.name.len(), &a.name).cmp(&(b.index, b.name.len(), &b.name)));
}

/// The contents of an xattr block holding `entries` (sorted as the kernel
/// keeps them), with a reference count of 1, entry hashes and `h_hash`.
/// The checksum is left 0: it depends on the block number
/// ([`set_block_checksum`]).
pub fn encode_block(block_size: usize, entries: &[RawXattr]) -> Result<Vec<u8>> {
    if !block_fits(block_size, entries) {
        return Err(Error::NoSpace("extended attributes do not fit in one block".into()));
    }
    let mut sorted = entries.to_vec();
    sort_block_entries(&mut sorted);
    let mut b = vec![0u8; block_size];
    put_le32(&mut b, 0, XATTR_MAGIC);
    put_le32(&mut b, 4, 1);
    put_le32(&mut b, 8, 1);
    let hashes = write_table(&mut b, BLOCK_HEADER_SIZE, 0, &sorted)?;
    put_le32(&mut b, 0xC, block_hash(hashes));
    Ok(b)
}

/// Stores the metadata_csum checksum of the xattr block `b` at `block`.
pub fn set_block_checksum(b: &mut [u8], block: u64, csum_seed: u32) {
    if b.len() >= BLOCK_HEADER_SIZE {
        let c = block_checksum(b, block, csum_seed);
        put_le32(b, 0x10, c);
    }
}
