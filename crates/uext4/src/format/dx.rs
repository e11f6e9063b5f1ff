//! htree (dx) index blocks: the root in directory block 0 and interior
//! nodes, each a count/limit header followed by (hash, block) entries.

use super::bytes::{le16, le32, put_le16, put_le32, u8_at};
use super::checksum::crc32c;
use crate::error::{CorruptKind, Error, Location, Result, Structure};

/// Offset of the dx_root_info in block 0 (after the fake "." and "..").
pub const ROOT_INFO_OFFSET: usize = 0x18;
/// Offset of the count/limit header in the root.
pub const ROOT_ENTRIES_OFFSET: usize = 0x20;
/// Offset of the count/limit header in an interior node (after a fake entry).
pub const NODE_ENTRIES_OFFSET: usize = 0x8;
/// Size of one (hash, block) entry.
pub const DX_ENTRY_SIZE: usize = 8;
/// Size of the metadata_csum tail of a dx block.
pub const DX_TAIL_SIZE: usize = 8;

/// One index entry: names hashing at or above `hash` live under `block`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DxEntry {
    /// Lowest hash of the subtree (0 for the first entry).
    pub hash: u32,
    /// Logical directory block of the child.
    pub block: u32,
}

/// Root information.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DxRootInfo {
    /// Hash version of this directory.
    pub hash_version: u8,
    /// Levels of interior nodes below the root (0 = root points at leaves).
    pub indirect_levels: u8,
}

/// A parsed dx block (root or node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DxNode {
    /// Offset of the count/limit header.
    pub entries_offset: usize,
    /// Entry capacity.
    pub limit: u16,
    /// Entries, in hash order; the first has hash 0.
    pub entries: Vec<DxEntry>,
}

/// Parses the root block's info.
pub fn parse_root_info(b: &[u8], block: u64) -> Result<DxRootInfo> {
    if b.len() < ROOT_ENTRIES_OFFSET + DX_ENTRY_SIZE {
        return Err(Error::corruption(
            Structure::DxNode,
            Location::from_block(block),
            CorruptKind::TooShort { len: b.len(), need: ROOT_ENTRIES_OFFSET + DX_ENTRY_SIZE },
        ));
    }
    let info_len = u8_at(b, ROOT_INFO_OFFSET + 5);
    if info_len != 8 {
        return Err(Error::corruption(
            Structure::DxNode,
            Location::from_block(block),
            CorruptKind::Mismatch { field: "info_length", value: u64::from(info_len), expected: 8 },
        ));
    }
    if u8_at(b, ROOT_INFO_OFFSET + 7) != 0 {
        return Err(Error::corruption(
            Structure::DxNode,
            Location::from_block(block),
            CorruptKind::OutOfRange { field: "unused_flags", value: u64::from(u8_at(b, ROOT_INFO_OFFSET + 7)) },
        ));
    }
    Ok(DxRootInfo { hash_version: u8_at(b, ROOT_INFO_OFFSET + 4), indirect_levels: u8_at(b, ROOT_INFO_OFFSET + 6) })
}

/// Parses the entries of a root (`is_root`) or interior node. `csum` says
/// whether a dx tail must fit after `limit` entries.
pub fn parse_node(b: &[u8], is_root: bool, csum: bool, block: u64) -> Result<DxNode> {
    let off = if is_root { ROOT_ENTRIES_OFFSET } else { NODE_ENTRIES_OFFSET };
    let bad = |kind| Error::corruption(Structure::DxNode, Location::from_block(block), kind);
    let limit = le16(b, off);
    let count = le16(b, off + 2);
    let room = b.len().saturating_sub(off + if csum { DX_TAIL_SIZE } else { 0 }) / DX_ENTRY_SIZE;
    if usize::from(limit) != room {
        return Err(bad(CorruptKind::Mismatch { field: "limit", value: u64::from(limit), expected: room as u64 }));
    }
    if count == 0 || count > limit {
        return Err(bad(CorruptKind::OutsideRange {
            what: "count",
            value: u64::from(count),
            start: 1,
            end: u64::from(limit) + 1,
        }));
    }
    let mut entries = Vec::with_capacity(usize::from(count));
    for i in 0..usize::from(count) {
        let e = off + i * DX_ENTRY_SIZE;
        let hash = if i == 0 { 0 } else { le32(b, e) };
        let entry = DxEntry { hash, block: le32(b, e + 4) };
        if let Some(prev) = entries.last() {
            let prev: &DxEntry = prev;
            if entry.hash < prev.hash {
                return Err(bad(CorruptKind::OutOfOrder { what: "dx hashes", at: i as u64 }));
            }
        }
        entries.push(entry);
    }
    Ok(DxNode { entries_offset: off, limit, entries })
}

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
        return Err(Error::Checksum { structure: Structure::DxNode, block, stored, computed: c });
    }
    Ok(())
}

/// True if a directory block looks like an interior dx node: one fake
/// empty entry spanning the whole block.
pub fn is_node_block(b: &[u8]) -> bool {
    le32(b, 0) == 0 && super::dirent::rec_len_from_disk(le16(b, 4), b.len()) == b.len() && u8_at(b, 6) == 0
}

/// Entry capacity of a dx block of `block_size` bytes whose entries start
/// at `entries_offset` (room for the dx tail kept when `csum`).
fn limit_for(block_size: usize, entries_offset: usize, csum: bool) -> u16 {
    let room = block_size.saturating_sub(entries_offset + if csum { DX_TAIL_SIZE } else { 0 }) / DX_ENTRY_SIZE;
    room.min(usize::from(u16::MAX)) as u16
}

/// Entry capacity of the root block.
pub fn root_limit(block_size: usize, csum: bool) -> u16 {
    limit_for(block_size, ROOT_ENTRIES_OFFSET, csum)
}

/// Entry capacity of an interior node.
pub fn node_limit(block_size: usize, csum: bool) -> u16 {
    limit_for(block_size, NODE_ENTRIES_OFFSET, csum)
}

/// Writes the dx_root_info of block 0 (the fake "." and ".." entries are
/// the caller's): reserved word, hash version, info length 8, levels.
pub fn write_root_info(b: &mut [u8], hash_version: u8, indirect_levels: u8) {
    let o = ROOT_INFO_OFFSET;
    if b.len() < ROOT_ENTRIES_OFFSET {
        return;
    }
    b[o..o + 4].fill(0);
    b[o + 4] = hash_version;
    b[o + 5] = 8;
    b[o + 6] = indirect_levels;
    b[o + 7] = 0;
}

/// Writes the fake entry that starts an interior node: an unused entry
/// spanning the whole block.
pub fn write_node_header(b: &mut [u8]) {
    let bs = b.len();
    b[..NODE_ENTRIES_OFFSET.min(bs)].fill(0);
    put_le16(b, 4, super::dirent::rec_len_to_disk(bs, bs));
}

/// Writes a count/limit header at `entries_offset` followed by `entries`
/// (the first entry's hash is not stored: its slot holds count and
/// limit); unused slots up to `limit` are zeroed. Fails if the entries do
/// not fit.
pub fn write_entries(b: &mut [u8], entries_offset: usize, limit: u16, entries: &[DxEntry]) -> Result<()> {
    let end = entries_offset + usize::from(limit) * DX_ENTRY_SIZE;
    if entries.is_empty() || entries.len() > usize::from(limit) || end > b.len() {
        return Err(Error::Invalid(format!("{} dx entries do not fit limit {limit}", entries.len())));
    }
    b[entries_offset..end].fill(0);
    put_le16(b, entries_offset, limit);
    put_le16(b, entries_offset + 2, entries.len() as u16);
    for (i, e) in entries.iter().enumerate() {
        let o = entries_offset + i * DX_ENTRY_SIZE;
        if i > 0 {
            put_le32(b, o, e.hash);
        }
        put_le32(b, o + 4, e.block);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_parse_round_trip() {
        for (bs, csum) in [(1024usize, true), (1024, false), (4096, true), (65536, true)] {
            let mut b = vec![0u8; bs];
            write_node_header(&mut b);
            assert!(is_node_block(&b));
            let limit = node_limit(bs, csum);
            let entries: Vec<DxEntry> =
                (0..5u32).map(|i| DxEntry { hash: if i == 0 { 0 } else { i * 100 + 1 }, block: i + 1 }).collect();
            write_entries(&mut b, NODE_ENTRIES_OFFSET, limit, &entries).unwrap();
            if csum {
                set_checksum(&mut b, NODE_ENTRIES_OFFSET, 0x1234);
            }
            let n = parse_node(&b, false, csum, 7).unwrap();
            assert_eq!(n.entries, entries);
            assert_eq!(n.limit, limit);
            if csum {
                verify_checksum(&b, &n, 0x1234, 7).unwrap();
                assert!(verify_checksum(&b, &n, 0x1235, 7).is_err());
            }
            let mut r = vec![0u8; bs];
            write_root_info(&mut r, 1, 1);
            write_entries(&mut r, ROOT_ENTRIES_OFFSET, root_limit(bs, csum), &entries[..2]).unwrap();
            let info = parse_root_info(&r, 0).unwrap();
            assert_eq!((info.hash_version, info.indirect_levels), (1, 1));
            assert_eq!(parse_node(&r, true, csum, 0).unwrap().entries, entries[..2].to_vec());
            assert!(write_entries(&mut r, ROOT_ENTRIES_OFFSET, 1, &entries).is_err());
        }
    }
}
