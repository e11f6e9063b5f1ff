//! The walk through an htree index from the root to the leaf a name hashes
//! to, keeping every index block on the way (the frames an insertion
//! edits: each block's parsed entries, cached beside its buffer, not a
//! copy of its bytes), with loops and out-of-range blocks reported.

use crate::dir::block;
use crate::dir::htree::{self, bad_dx};
use crate::dir::name_hash;
use crate::error::{CorruptKind, Location, Result};
use crate::format::block_number::FileBlock;
use crate::format::dir_hash::HashVersion;
use crate::format::dx::{DxEntry, DxNode};
use crate::format::inode::Inode;
use crate::volume::Volume;
use std::sync::Arc;

/// One index block on the path from the root to a leaf.
#[derive(Debug)]
pub(super) struct Frame {
    pub(super) pblk: u64,
    /// The block's entries as probed (shared with the cache: a change
    /// edits a copy and installs a new version of the block).
    pub(super) node: Arc<DxNode>,
    /// The entry followed.
    pub(super) pos: usize,
}

impl Frame {
    pub(super) fn full(&self) -> bool {
        self.node.entries.len() >= usize::from(self.node.limit)
    }

    /// The block's entries.
    pub(super) fn entries(&self) -> &[DxEntry] {
        &self.node.entries
    }
}

/// The path to the leaf a hash belongs in.
#[derive(Debug)]
pub(super) struct Probe {
    pub(super) frames: Vec<Frame>,
    pub(super) hash: u32,
    pub(super) version: HashVersion,
    pub(super) hash_version_raw: u8,
    pub(super) max_levels: usize,
}

/// Walks the index from the root to the leaf `name` hashes to (reads
/// only: the duplicate-name check walks it before any handle exists).
pub(super) fn probe(vol: &Volume, dir: &Inode, name: &[u8]) -> Result<Probe> {
    let csum = vol.has_csum();
    let nblocks = dir.size / vol.block_size as u64;
    let htree::Root { block: root, info, version } = htree::read_root(vol, dir)?;
    let hash = name_hash(vol, dir, name, version).major;
    let mut seen = [0u32; 4];
    let mut nseen = 1;
    let mut cur = Frame { pblk: root.block, node: root.dx_node(vol, true, csum)?, pos: 0 };
    drop(root);
    let mut frames = Vec::with_capacity(usize::from(info.indirect_levels) + 1);
    loop {
        cur.pos = cur.node.entries.partition_point(|e| e.hash <= hash).max(1) - 1;
        let child = cur.node.entries[cur.pos].block;
        let looped = seen[..nseen].contains(&child);
        if u64::from(child) >= nblocks || looped {
            let at = Location::inode_block(dir.ino, cur.pblk);
            if looped {
                return Err(bad_dx(at, CorruptKind::Loop { what: "htree index", at: u64::from(child) }));
            }
            let what = "dx entry block";
            return Err(bad_dx(
                at,
                CorruptKind::OutsideRange { what, value: u64::from(child), start: 0, end: nblocks },
            ));
        }
        frames.push(cur);
        if frames.len() > usize::from(info.indirect_levels) {
            break;
        }
        // read_root bounds the levels (at most 3 with large_dir), so at
        // most 3 blocks are seen besides the root.
        if let Some(slot) = seen.get_mut(nseen) {
            *slot = child;
            nseen += 1;
        }
        let b = block::read(vol, dir, FileBlock::from(child), true)?.map_err(|_| {
            bad_dx(
                Location::FileBlock { ino: dir.ino, lblk: u64::from(child) },
                CorruptKind::Hole { lblk: u64::from(child) },
            )
        })?;
        if !b.is_dx {
            let kind = CorruptKind::WrongType { expected: "htree index node", found: 0 };
            return Err(bad_dx(Location::inode_block(dir.ino, b.block), kind));
        }
        cur = Frame { pblk: b.block, node: b.dx_node(vol, false, csum)?, pos: 0 };
    }
    Ok(Probe { frames, hash, version, hash_version_raw: info.hash_version, max_levels: htree::max_levels(vol) })
}
