//! The walk through an htree index from the root to the leaf a name hashes
//! to, keeping a copy of every index block on the way (the frames an
//! insertion edits), with loops and out-of-range blocks reported.

use super::leaf::Ctx;
use crate::dir::block;
use crate::dir::htree::{self, bad_dx};
use crate::dir::name_hash;
use crate::error::{CorruptKind, Location, Result};
use crate::format::block_number::FileBlock;
use crate::format::dir_hash::HashVersion;
use crate::format::dx::{self, DxEntry};
use crate::format::inode::Inode;

/// One index block on the path from the root to a leaf.
#[derive(Debug)]
pub(super) struct Frame {
    pub(super) pblk: u64,
    pub(super) data: Vec<u8>,
    pub(super) entries_offset: usize,
    pub(super) limit: u16,
    pub(super) entries: Vec<DxEntry>,
    /// The entry followed.
    pub(super) pos: usize,
}

impl Frame {
    pub(super) fn full(&self) -> bool {
        self.entries.len() >= usize::from(self.limit)
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

/// Walks the index from the root to the leaf `name` hashes to.
pub(super) fn probe(ctx: &Ctx, dir: &Inode, name: &[u8]) -> Result<Probe> {
    let vol = ctx.vol();
    let nblocks = dir.size / ctx.bs as u64;
    let htree::Root { block: root, info, version } = htree::read_root(vol, dir)?;
    let data = root.buf.data().to_vec();
    let hash = name_hash(vol, dir, name, version).major;
    let node = dx::parse_node(&data, true, ctx.csum, root.block)?;
    let mut seen = vec![0u32];
    let mut cur = Frame {
        pblk: root.block,
        data,
        entries_offset: node.entries_offset,
        limit: node.limit,
        entries: node.entries,
        pos: 0,
    };
    drop(root);
    let mut frames = Vec::new();
    loop {
        cur.pos = cur.entries.partition_point(|e| e.hash <= hash).max(1) - 1;
        let child = cur.entries[cur.pos].block;
        if u64::from(child) >= nblocks || seen.contains(&child) {
            let at = Location::inode_block(dir.ino, cur.pblk);
            if seen.contains(&child) {
                return Err(bad_dx(at, CorruptKind::Loop { what: "htree index", at: u64::from(child) }));
            }
            let what = "dx entry block";
            return Err(bad_dx(
                at,
                CorruptKind::OutsideRange { what, value: u64::from(child), start: 0, end: nblocks },
            ));
        }
        seen.push(child);
        frames.push(cur);
        if frames.len() > usize::from(info.indirect_levels) {
            break;
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
        let data = b.buf.data().to_vec();
        let node = dx::parse_node(&data, false, ctx.csum, b.block)?;
        cur = Frame {
            pblk: b.block,
            data,
            entries_offset: node.entries_offset,
            limit: node.limit,
            entries: node.entries,
            pos: 0,
        };
    }
    Ok(Probe { frames, hash, version, hash_version_raw: info.hash_version, max_levels: htree::max_levels(vol) })
}
