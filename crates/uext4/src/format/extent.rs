//! Extent tree nodes: header, index entries and leaf extents.
//!
//! The root node lives in the inode's 60-byte `i_block` (up to 4 entries);
//! deeper nodes fill whole blocks and end with a crc32c tail when
//! metadata_csum is on.

use super::block_number::{LogicalBlock, PhysicalBlock};
use super::bytes::{le16, le32, lo_hi, put_le16, put_le32};
use super::checksum::crc32c;
use crate::error::{CorruptKind, Error, Location, Result, Structure};

/// Extent header magic.
pub const EXTENT_MAGIC: u16 = 0xF30A;
/// Size of the header and of each entry.
pub const ENTRY_SIZE: usize = 12;
/// Longest initialised extent; longer `ee_len` values mark unwritten extents.
pub const MAX_INIT_LEN: u16 = 32768;
/// Deepest tree the kernel allows.
pub const MAX_DEPTH: u16 = 5;

/// A node header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtentHeader {
    /// Valid entries following the header.
    pub entries: u16,
    /// Capacity of the node.
    pub max: u16,
    /// 0 for a leaf, else the height above the leaves.
    pub depth: u16,
}

/// An interior entry: the subtree starting at logical block `block`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtentIndex {
    /// First logical block covered.
    pub block: LogicalBlock,
    /// Physical block of the child node.
    pub leaf: PhysicalBlock,
}

/// A leaf entry: `len` logical blocks from `block` map to `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// First logical block.
    pub block: LogicalBlock,
    /// Number of blocks (1..=32768).
    pub len: u16,
    /// First physical block.
    pub start: PhysicalBlock,
    /// True if allocated but not yet written (reads as zeros).
    pub unwritten: bool,
}

/// A decoded node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtentNode {
    /// An interior node.
    Index(ExtentHeader, Vec<ExtentIndex>),
    /// A leaf node.
    Leaf(ExtentHeader, Vec<Extent>),
}

impl ExtentNode {
    /// The node's header.
    pub fn header(&self) -> &ExtentHeader {
        match self {
            ExtentNode::Index(h, _) | ExtentNode::Leaf(h, _) => h,
        }
    }
}

/// Parses a node from `b` (the 60-byte root or a whole block). `block` is
/// its physical location (0 for the root), used in errors. Entries are
/// checked for order so that lookups may binary-search them.
pub fn parse_node(b: &[u8], block: u64) -> Result<ExtentNode> {
    let bad = |kind| Error::corruption(Structure::Extent, Location::from_block(block), kind);
    if b.len() < ENTRY_SIZE {
        return Err(bad(CorruptKind::TooShort { len: b.len(), need: ENTRY_SIZE }));
    }
    if le16(b, 0) != EXTENT_MAGIC {
        return Err(bad(CorruptKind::BadMagic { found: u64::from(le16(b, 0)) }));
    }
    let h = ExtentHeader { entries: le16(b, 2), max: le16(b, 4), depth: le16(b, 6) };
    let capacity = (b.len() - ENTRY_SIZE) / ENTRY_SIZE;
    if usize::from(h.max) > capacity || h.max == 0 {
        return Err(bad(CorruptKind::OutsideRange {
            what: "eh_max",
            value: u64::from(h.max),
            start: 1,
            end: capacity as u64 + 1,
        }));
    }
    if h.entries > h.max {
        return Err(bad(CorruptKind::OutsideRange {
            what: "eh_entries",
            value: u64::from(h.entries),
            start: 0,
            end: u64::from(h.max) + 1,
        }));
    }
    if h.depth > MAX_DEPTH {
        return Err(bad(CorruptKind::TooDeep {
            what: "extent tree",
            depth: u64::from(h.depth),
            max: u64::from(MAX_DEPTH),
        }));
    }
    let entry = |i: usize| &b[ENTRY_SIZE * (i + 1)..ENTRY_SIZE * (i + 2)];
    if h.depth > 0 {
        let mut v = Vec::with_capacity(usize::from(h.entries));
        for i in 0..usize::from(h.entries) {
            let e = entry(i);
            let idx = ExtentIndex {
                block: LogicalBlock(le32(e, 0)),
                leaf: PhysicalBlock(lo_hi(le32(e, 4), u32::from(le16(e, 8)))),
            };
            if let Some(prev) = v.last() {
                let prev: &ExtentIndex = prev;
                if idx.block <= prev.block {
                    return Err(bad(CorruptKind::OutOfOrder {
                        what: "extent index entries",
                        at: u64::from(idx.block),
                    }));
                }
            }
            v.push(idx);
        }
        Ok(ExtentNode::Index(h, v))
    } else {
        let mut v: Vec<Extent> = Vec::with_capacity(usize::from(h.entries));
        for i in 0..usize::from(h.entries) {
            let e = entry(i);
            let raw_len = le16(e, 4);
            let (len, unwritten) =
                if raw_len > MAX_INIT_LEN { (raw_len - MAX_INIT_LEN, true) } else { (raw_len, false) };
            let ext = Extent {
                block: LogicalBlock(le32(e, 0)),
                len,
                start: PhysicalBlock(lo_hi(le32(e, 8), u32::from(le16(e, 6)))),
                unwritten,
            };
            if len == 0 {
                return Err(bad(CorruptKind::OutOfRange { field: "ee_len", value: 0 }));
            }
            if u64::from(ext.block) + u64::from(len) > 1 << 32 {
                return Err(bad(CorruptKind::OutOfRange {
                    field: "ee_block + ee_len",
                    value: u64::from(ext.block) + u64::from(len),
                }));
            }
            if let Some(prev) = v.last() {
                if u64::from(ext.block) < u64::from(prev.block) + u64::from(prev.len) {
                    return Err(bad(CorruptKind::Overlap { at: u64::from(ext.block) }));
                }
            }
            v.push(ext);
        }
        Ok(ExtentNode::Leaf(h, v))
    }
}

/// Byte offset of the checksum tail in an extent block with capacity `max`.
pub fn tail_offset(max: u16) -> usize {
    ENTRY_SIZE * (usize::from(max) + 1)
}

/// Verifies the crc32c tail of a non-root extent block. `inode_seed` is the
/// per-inode seed (crc32c of the inode number and generation).
pub fn verify_block_checksum(b: &[u8], inode_seed: u32, block: u64) -> Result<()> {
    let off = tail_offset(le16(b, 4));
    if off + 4 > b.len() {
        return Err(Error::corruption(
            Structure::Extent,
            Location::from_block(block),
            CorruptKind::MissingChecksumTail,
        ));
    }
    let stored = le32(b, off);
    let computed = crc32c(inode_seed, &b[..off]);
    if stored != computed {
        return Err(Error::Checksum { structure: Structure::Extent, block, ino: 0, stored, computed });
    }
    Ok(())
}

/// Encodes a node into `b` (the 60-byte root or a whole block): header
/// with capacity for `b`, then the entries. Entries beyond the capacity
/// are an error.
pub fn encode_node(node: &ExtentNode, b: &mut [u8]) -> Result<()> {
    match node {
        ExtentNode::Index(h, v) => encode_index(h.depth, v, b),
        ExtentNode::Leaf(_, v) => encode_leaf(v, b),
    }
}

/// Encodes an interior node at height `depth` with entries `v` into `b`,
/// as [`encode_node`] does; for writers that keep the entries apart from
/// a header.
pub fn encode_index(depth: u16, v: &[ExtentIndex], b: &mut [u8]) -> Result<()> {
    encode_header(depth, v.len(), b)?;
    for (i, e) in v.iter().enumerate() {
        let o = ENTRY_SIZE * (i + 1);
        put_le32(b, o, e.block.0);
        put_le32(b, o + 4, e.leaf.0 as u32);
        put_le16(b, o + 8, (e.leaf.0 >> 32) as u16);
    }
    Ok(())
}

/// Encodes a leaf with extents `v` into `b`, as [`encode_node`] does.
pub fn encode_leaf(v: &[Extent], b: &mut [u8]) -> Result<()> {
    encode_header(0, v.len(), b)?;
    for (i, e) in v.iter().enumerate() {
        let o = ENTRY_SIZE * (i + 1);
        let len = if e.unwritten { e.len + MAX_INIT_LEN } else { e.len };
        put_le32(b, o, e.block.0);
        put_le16(b, o + 4, len);
        put_le16(b, o + 6, (e.start.0 >> 32) as u16);
        put_le32(b, o + 8, e.start.0 as u32);
    }
    Ok(())
}

/// Zeroes `b` and writes a header for `n` entries at `depth`, with the
/// capacity `b` allows; an error if `n` exceeds it.
fn encode_header(depth: u16, n: usize, b: &mut [u8]) -> Result<()> {
    let capacity = (b.len().saturating_sub(ENTRY_SIZE)) / ENTRY_SIZE;
    // Blocks keep room for the checksum tail after `max` entries.
    let max = if b.len() > 60 { (b.len() - ENTRY_SIZE - 4) / ENTRY_SIZE } else { capacity };
    if n > max {
        return Err(Error::Invalid(format!("{n} extent entries exceed node capacity {max}")));
    }
    b.fill(0);
    put_le16(b, 0, EXTENT_MAGIC);
    put_le16(b, 2, n as u16);
    put_le16(b, 4, max as u16);
    put_le16(b, 6, depth);
    Ok(())
}

/// Sets the crc32c tail of a non-root extent block.
pub fn set_block_checksum(b: &mut [u8], inode_seed: u32) {
    let off = tail_offset(le16(b, 4));
    if off + 4 <= b.len() {
        let c = crc32c(inode_seed, &b[..off]);
        put_le32(b, off, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(entries: &[[u32; 3]], depth: u16) -> Vec<u8> {
        let mut b = vec![0u8; 60];
        b[0..2].copy_from_slice(&EXTENT_MAGIC.to_le_bytes());
        b[2..4].copy_from_slice(&(entries.len() as u16).to_le_bytes());
        b[4..6].copy_from_slice(&4u16.to_le_bytes());
        b[6..8].copy_from_slice(&depth.to_le_bytes());
        for (i, e) in entries.iter().enumerate() {
            let o = 12 * (i + 1);
            b[o..o + 4].copy_from_slice(&e[0].to_le_bytes());
            if depth == 0 {
                b[o + 4..o + 6].copy_from_slice(&(e[1] as u16).to_le_bytes());
                b[o + 8..o + 12].copy_from_slice(&e[2].to_le_bytes());
            } else {
                b[o + 4..o + 8].copy_from_slice(&e[2].to_le_bytes());
            }
        }
        b
    }

    #[test]
    fn parses_leaf_and_unwritten() {
        let b = node(&[[0, 10, 100], [10, 32768 + 5, 200]], 0);
        let ExtentNode::Leaf(h, v) = parse_node(&b, 0).unwrap() else { panic!("not a leaf") };
        assert_eq!(h.entries, 2);
        assert_eq!(v[1], Extent { block: LogicalBlock(10), len: 5, start: PhysicalBlock(200), unwritten: true });
    }

    #[test]
    fn rejects_bad_nodes() {
        assert!(parse_node(&node(&[[10, 5, 1], [12, 5, 2]], 0), 0).is_err(), "overlap");
        assert!(parse_node(&node(&[[10, 0, 1]], 0), 0).is_err(), "zero length");
        assert!(parse_node(&node(&[[10, 0, 1], [10, 0, 2]], 1), 0).is_err(), "index order");
        let mut b = node(&[], 0);
        b[4] = 200;
        assert!(parse_node(&b, 0).is_err(), "max too big");
        assert!(parse_node(&node(&[], 6), 0).is_err(), "depth");
        assert!(parse_node(&[0u8; 5], 0).is_err(), "short");
    }
}
