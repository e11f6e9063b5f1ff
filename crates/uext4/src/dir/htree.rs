//! Hash-indexed lookup.
//!
//! The walk reads exactly `indirect_levels + 1` index blocks on the way
//! down (the level count is checked against the kernel's limits), so a
//! corrupt index that points back at itself cannot loop: it is parsed as
//! the wrong kind of block and rejected.

use super::block;
use crate::error::{Error, Result, Structure};
use crate::format::dir_hash::{dx_hash, HashVersion};
use crate::format::dx::{self, DxEntry};
use crate::format::features::incompat;
use crate::format::inode::{FileType, Inode};
use crate::format::superblock::FLAG_UNSIGNED_HASH;
use crate::volume::Volume;

/// Looks `name` up through the index.
pub fn lookup(vol: &Volume, dir: &Inode, name: &[u8]) -> Result<Option<(u32, Option<FileType>)>> {
    let bad = |block: u64, d: String| Error::corrupt(Structure::DxNode, block, d);
    let csum = vol.has_csum();
    let ft = vol.sb.features.has_incompat(incompat::FILETYPE);
    let nblocks = dir.size.div_ceil(vol.block_size as u64);
    let root = block::read(vol, dir, 0, true)?.map_err(|_| bad(0, "htree root is a hole".into()))?;
    let info = dx::parse_root_info(root.buf.data(), root.block)?;
    let max_levels = if vol.sb.features.has_incompat(incompat::LARGEDIR) { 3 } else { 2 };
    if info.indirect_levels >= max_levels {
        return Err(bad(root.block, format!("{} index levels", info.indirect_levels)));
    }
    let mut version = HashVersion::from_disk(info.hash_version)
        .ok_or_else(|| bad(root.block, format!("unsupported hash version {}", info.hash_version)))?;
    if vol.sb.flags & FLAG_UNSIGNED_HASH != 0 {
        version = version.to_unsigned();
    }
    let hash = dx_hash(name, version, &vol.sb.hash_seed).major;

    // Descend, remembering each level's entries and position so that a
    // hash collision spanning leaves can continue to the next leaf.
    let mut path: Vec<(Vec<DxEntry>, usize)> = Vec::new();
    let mut node = dx::parse_node(root.buf.data(), true, csum, root.block)?;
    let mut node_block = root.block;
    let leaf = loop {
        let pos = node.entries.partition_point(|e| e.hash <= hash).max(1) - 1;
        let child = node.entries[pos].block;
        if u64::from(child) >= nblocks || child == 0 {
            return Err(bad(node_block, format!("index points at block {child} of {nblocks}")));
        }
        path.push((node.entries, pos));
        if path.len() > usize::from(info.indirect_levels) {
            break child;
        }
        let b = block::read(vol, dir, u64::from(child), true)?
            .map_err(|_| bad(node_block, format!("index block {child} is a hole")))?;
        if !b.is_dx {
            return Err(bad(b.block, "expected an index node".into()));
        }
        node = dx::parse_node(b.buf.data(), false, csum, b.block)?;
        node_block = b.block;
    };

    let mut leaf = leaf;
    loop {
        if let Ok(b) = block::read(vol, dir, u64::from(leaf), true)? {
            if let Some(found) = b.find(ft, name)? {
                return Ok(Some(found));
            }
        }
        // Continue into the next leaf only if it starts with the same hash
        // (marked by the low "collision" bit).
        match next_leaf(vol, dir, &mut path, csum, nblocks)? {
            Some((next_hash, next_block)) if next_hash & !1 == hash => leaf = next_block,
            _ => return Ok(None),
        }
    }
}

/// Advances `path` to the next leaf in hash order; returns the hash that
/// leaf starts with and its block, or `None` at the end of the index.
fn next_leaf(
    vol: &Volume,
    dir: &Inode,
    path: &mut Vec<(Vec<DxEntry>, usize)>,
    csum: bool,
    nblocks: u64,
) -> Result<Option<(u32, u32)>> {
    // Find the deepest level that has a next entry.
    let mut level = path.len();
    loop {
        if level == 0 {
            return Ok(None);
        }
        level -= 1;
        let (entries, pos) = &mut path[level];
        if *pos + 1 < entries.len() {
            *pos += 1;
            break;
        }
    }
    let start_hash = path[level].0[path[level].1].hash;
    // Walk down the first entries back to leaf depth.
    let depth = path.len();
    path.truncate(level + 1);
    while path.len() < depth {
        let (entries, pos) = &path[path.len() - 1];
        let child = entries[*pos].block;
        if u64::from(child) >= nblocks {
            return Err(Error::corrupt(Structure::DxNode, 0, format!("index points at block {child}")));
        }
        let b = block::read(vol, dir, u64::from(child), true)?
            .map_err(|_| Error::corrupt(Structure::DxNode, 0, "index block is a hole"))?;
        let node = dx::parse_node(b.buf.data(), false, csum, b.block)?;
        path.push((node.entries, 0));
    }
    let (entries, pos) = &path[path.len() - 1];
    Ok(Some((start_hash, entries[*pos].block)))
}
