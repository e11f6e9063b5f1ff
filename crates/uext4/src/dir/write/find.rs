//! Finding the entry to remove or re-point: through the index when there
//! is a usable one, else (or when it is structurally bad) by scanning the
//! leaves.

use super::leaf::{Ctx, Slot};
use super::probe::probe;
use crate::dir::htree;
use crate::dir::{block, is_htree, NameKey};
use crate::error::{Error, Result, Structure};
use crate::format::block_number::FileBlock;
use crate::format::inode::Inode;

/// Where a live entry is: its block, the entry and the one before it in
/// the block (the record that absorbs it when it is removed), found in
/// one walk of the block (the version the directory's lock keeps
/// current: the caller changes that version through the transaction).
#[derive(Debug)]
pub(super) struct Loc {
    pub(super) pblk: u64,
    pub(super) slot: Slot,
    pub(super) prev: Option<Slot>,
}

impl Loc {
    /// The inode the entry names.
    pub(super) fn ino(&self) -> u32 {
        self.slot.ino
    }
}

pub(super) fn find(ctx: &Ctx, dir: &Inode, name: &[u8]) -> Result<Option<Loc>> {
    let name = &NameKey::new(ctx.vol(), dir, name)?;
    if is_htree(ctx.vol(), dir) {
        match dx_find(ctx, dir, name) {
            // A structurally bad index: the leaves still hold every entry.
            Err(Error::Corrupt(c)) if c.structure == Structure::DxNode => {}
            r => return r,
        }
    }
    linear_find(ctx, dir, name)
}

fn find_in(ctx: &Ctx, pblk: u64, data: &[u8], name: &NameKey<'_>) -> Result<Option<Loc>> {
    Ok(ctx.find_entry(data, pblk, name)?.map(|(prev, slot)| Loc { pblk, slot, prev }))
}

fn linear_find(ctx: &Ctx, dir: &Inode, name: &NameKey<'_>) -> Result<Option<Loc>> {
    let htree = is_htree(ctx.vol(), dir);
    let nblocks = FileBlock::of_byte(dir.size, ctx.bs as u64);
    let mut lblk = FileBlock(0);
    while lblk < nblocks {
        match block::read(ctx.vol(), dir, lblk, htree)? {
            Ok(b) if !b.is_dx => {
                if let Some(loc) = find_in(ctx, b.block, b.buf.data(), name)? {
                    return Ok(Some(loc));
                }
                lblk += 1;
            }
            Ok(_) => lblk += 1,
            Err(skip) => lblk += skip,
        }
    }
    Ok(None)
}

fn dx_find(ctx: &Ctx, dir: &Inode, name: &NameKey<'_>) -> Result<Option<Loc>> {
    let p = probe(ctx.vol(), dir, name.name())?;
    let nblocks = dir.size / ctx.bs as u64;
    let mut path: htree::Path = p.frames.into_iter().map(|f| (f.node, f.pos)).collect();
    let (node, pos) = &path[path.len() - 1];
    let mut leaf = node.entries[*pos].block;
    loop {
        if let Ok(b) = block::read(ctx.vol(), dir, FileBlock::from(leaf), false)? {
            if let Some(loc) = find_in(ctx, b.block, b.buf.data(), name)? {
                return Ok(Some(loc));
            }
        }
        // Equal hashes may continue into the next leaf (its index entry
        // then has the low bit set).
        match htree::next_leaf(ctx.vol(), dir, &mut path, ctx.csum, nblocks)? {
            Some((h, next)) if h & !1 == p.hash => leaf = next,
            _ => return Ok(None),
        }
    }
}
