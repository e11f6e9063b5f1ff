//! Lookups in an extent tree.
//!
//! The walk descends from the root in `i_block`, binary-searching each
//! node. Every child must have exactly its parent's depth minus one, which
//! bounds the walk at five levels and rules out cycles in corrupt images;
//! every physical range is checked against the filesystem size.

use super::{MapKind, Mapping, MAX_LBLK};
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::FileBlock;
use crate::format::extent::{parse_node, verify_block_checksum, ExtentNode};
use crate::format::inode::Inode;
use crate::volume::Volume;
use std::sync::Arc;

/// The buffer cache's tag for a parsed extent tree block
/// ([`crate::cache::BufferCache::derived`]): "ext" then 0.
const PARSED_NODE: u64 = 0x6578_7400_0000_0000;

/// Maps `lblk`; see [`super::map_block`].
pub fn map(vol: &Volume, inode: &Inode, lblk: FileBlock) -> Result<Mapping> {
    // The root lives in the inode (no Arc for it: most files and
    // directories have no other level).
    let root = parse_node(&inode.block, 0).map_err(|e| retag(e, inode.ino))?;
    let mut below: Option<Arc<ExtentNode>> = None;
    let mut node_block = 0u64;
    // Upper bound of the subtree we are in (start of the next sibling).
    let mut limit = MAX_LBLK;
    let seed = vol.has_csum().then(|| vol.inode_csum_seed(inode.ino, inode.generation));
    loop {
        let (next, child) = match below.as_deref().unwrap_or(&root) {
            ExtentNode::Index(h, idx) => {
                // Last index whose start is <= lblk.
                let pos = idx.partition_point(|e| FileBlock::from(e.block) <= lblk);
                if pos == 0 {
                    // lblk lies before the first subtree: a hole.
                    let end = idx.first().map_or(limit, |e| FileBlock::from(e.block)).min(limit);
                    return Ok(hole(lblk, end));
                }
                if let Some(next) = idx.get(pos) {
                    limit = limit.min(FileBlock::from(next.block));
                }
                let child = idx[pos - 1].leaf.get();
                if !vol.valid_range(child, 1) {
                    return Err(Error::corruption(
                        Structure::Extent,
                        Location::inode_block(inode.ino, node_block),
                        CorruptKind::OutsideFilesystem { what: "extent index", block: child, len: 1 },
                    ));
                }
                let buf = vol.block(child)?;
                if let Some(seed) = seed {
                    verify_cached(&buf, seed, child)?;
                }
                // Parsed once per cached version of the block: every
                // write and read of a large file walks the same upper
                // index blocks, and parsing a whole node (340 entries
                // with 4 KiB blocks) at each step was most of a lookup.
                let next = parsed_node(vol, &buf, child)?;
                if next.header().depth + 1 != h.depth {
                    return Err(Error::corruption(
                        Structure::Extent,
                        Location::InodeBlock { ino: inode.ino, block: child },
                        CorruptKind::Mismatch {
                            field: "eh_depth",
                            value: u64::from(next.header().depth),
                            expected: u64::from(h.depth.saturating_sub(1)),
                        },
                    ));
                }
                (next, child)
            }
            ExtentNode::Leaf(_, ext) => {
                let pos = ext.partition_point(|e| FileBlock::from(e.block) <= lblk);
                if pos > 0 {
                    let e = &ext[pos - 1];
                    let end = FileBlock::from(e.block) + u64::from(e.len);
                    if lblk < end {
                        if !vol.valid_range(e.start.get(), u64::from(e.len)) {
                            return Err(Error::corruption(
                                Structure::Extent,
                                Location::inode_block(inode.ino, node_block),
                                CorruptKind::OutsideFilesystem {
                                    what: "extent",
                                    block: e.start.get(),
                                    len: u64::from(e.len),
                                },
                            ));
                        }
                        let pblk = e.start + (lblk - FileBlock::from(e.block));
                        let kind = if e.unwritten { MapKind::Unwritten(pblk) } else { MapKind::Mapped(pblk) };
                        return Ok(Mapping { lblk, len: end.min(limit).max(lblk + 1) - lblk, kind });
                    }
                }
                let end = ext.get(pos).map_or(limit, |e| FileBlock::from(e.block)).min(limit);
                return Ok(hole(lblk, end));
            }
        };
        below = Some(next);
        node_block = child;
    }
}

/// The parsed form of extent block `block` (its cached version `buf`),
/// parsed once per version and shared by lookups and by the tree's
/// writer: a random write into a large unwritten extent reads the leaf
/// for the mapping and again for the conversion, and a full leaf is 340
/// entries to decode and check each time.
pub(crate) fn parsed_node(vol: &Volume, buf: &Arc<crate::cache::Buffer>, block: u64) -> Result<Arc<ExtentNode>> {
    vol.cache.derived(buf, PARSED_NODE, |b| parse_node(b.data(), block))
}

/// Records that `buf`, a version of extent block `block` just encoded
/// from `node` with its checksum set from `seed` (if any), passes its
/// checks and parses as `node`: the lookup and conversion that follow a
/// tree change then neither checksum nor decode the block again (a full
/// leaf is 340 entries; a random write into an unwritten file changes
/// its leaf at every conversion).
pub(crate) fn seed_parsed(vol: &Volume, buf: &Arc<crate::cache::Buffer>, node: ExtentNode, seed: Option<u32>) {
    debug_assert_eq!(parse_node(buf.data(), 0).ok().as_ref(), Some(&node), "seeded extent node");
    if let Some(seed) = seed {
        debug_assert!(verify_block_checksum(buf.data(), seed, 0).is_ok());
        buf.set_verified(crate::cache::Check::ExtentBlock, seed);
    }
    vol.cache.seed_derived(buf, PARSED_NODE, Arc::new(node));
}

fn hole(lblk: FileBlock, end: FileBlock) -> Mapping {
    Mapping { lblk, len: end.saturating_sub(lblk).max(1), kind: MapKind::Hole }
}

/// Root-node errors name the inode (whose record holds the root) rather
/// than block 0.
fn retag(e: Error, ino: u32) -> Error {
    match e {
        Error::Corrupt(mut c) => {
            c.location = Location::Inode(ino);
            Error::Corrupt(c)
        }
        other => other,
    }
}

/// Verifies the checksum of extent block `block` (a cached version,
/// `buf`) unless this version passed already (see
/// [`crate::cache::Buffer::is_verified`]).
pub(crate) fn verify_cached(buf: &crate::cache::Buffer, seed: u32, block: u64) -> Result<()> {
    use crate::cache::Check;
    if !buf.is_verified(Check::ExtentBlock, seed) {
        verify_block_checksum(buf.data(), seed, block)?;
        buf.set_verified(Check::ExtentBlock, seed);
    }
    Ok(())
}
