//! The count/limit header and the (hash, block) entries of a dx root or
//! interior node.

use super::layout::{DX_ENTRY_SIZE, DX_TAIL_SIZE, NODE_ENTRIES_OFFSET, ROOT_ENTRIES_OFFSET};
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::bytes::{le16, le32, put_le16, put_le32};

/// One index entry: names hashing at or above `hash` live under `block`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DxEntry {
    /// Lowest hash of the subtree (0 for the first entry).
    pub hash: u32,
    /// Logical directory block of the child.
    pub block: u32,
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
