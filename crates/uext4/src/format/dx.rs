//! htree (dx) index blocks: the root in directory block 0 and interior
//! nodes, each a count/limit header followed by (hash, block) entries.

use super::bytes::{le16, le32, u8_at};
use super::checksum::crc32c;
use crate::error::{Error, Result, Structure};

/// Offset of the dx_root_info in block 0 (after the fake "." and "..").
const ROOT_INFO_OFFSET: usize = 0x18;
/// Offset of the count/limit header in the root.
const ROOT_ENTRIES_OFFSET: usize = 0x20;
/// Offset of the count/limit header in an interior node (after a fake entry).
const NODE_ENTRIES_OFFSET: usize = 0x8;
/// Size of one (hash, block) entry.
const DX_ENTRY_SIZE: usize = 8;
/// Size of the metadata_csum tail of a dx block.
const DX_TAIL_SIZE: usize = 8;

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
        return Err(Error::corrupt(Structure::DxNode, block, "root block too small"));
    }
    let info_len = u8_at(b, ROOT_INFO_OFFSET + 5);
    if info_len != 8 {
        return Err(Error::corrupt(Structure::DxNode, block, format!("root info length {info_len}")));
    }
    if u8_at(b, ROOT_INFO_OFFSET + 7) != 0 {
        return Err(Error::corrupt(Structure::DxNode, block, "unknown root flags"));
    }
    Ok(DxRootInfo { hash_version: u8_at(b, ROOT_INFO_OFFSET + 4), indirect_levels: u8_at(b, ROOT_INFO_OFFSET + 6) })
}

/// Parses the entries of a root (`is_root`) or interior node. `csum` says
/// whether a dx tail must fit after `limit` entries.
pub fn parse_node(b: &[u8], is_root: bool, csum: bool, block: u64) -> Result<DxNode> {
    let off = if is_root { ROOT_ENTRIES_OFFSET } else { NODE_ENTRIES_OFFSET };
    let bad = |d: String| Error::corrupt(Structure::DxNode, block, d);
    let limit = le16(b, off);
    let count = le16(b, off + 2);
    let room = b.len().saturating_sub(off + if csum { DX_TAIL_SIZE } else { 0 }) / DX_ENTRY_SIZE;
    if usize::from(limit) != room {
        return Err(bad(format!("limit {limit} does not match block capacity {room}")));
    }
    if count == 0 || count > limit {
        return Err(bad(format!("count {count} invalid (limit {limit})")));
    }
    let mut entries = Vec::with_capacity(usize::from(count));
    for i in 0..usize::from(count) {
        let e = off + i * DX_ENTRY_SIZE;
        let hash = if i == 0 { 0 } else { le32(b, e) };
        let entry = DxEntry { hash, block: le32(b, e + 4) };
        if let Some(prev) = entries.last() {
            let prev: &DxEntry = prev;
            if entry.hash < prev.hash {
                return Err(bad(format!("hashes out of order at entry {i}")));
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
        return Err(Error::corrupt(Structure::DxNode, block, "no room for checksum tail"));
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
