//! Adding an entry through an htree index: into the leaf the name hashes
//! to, splitting a full leaf, splitting a full index node into its parent,
//! or adding a level under the root when the whole path is full.

use super::grow::append_block;
use super::leaf::{find_slot, insert_at, Ctx, Item, Slot};
use super::probe::{probe, Frame, Probe};
use super::split::{choose_split, halves};
use crate::dir::htree::bad_dx;
use crate::dir::name_hash;
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::FileBlock;
use crate::format::dx::{self, DxEntry};
use crate::format::inode::Inode;

/// Rewrites the index block of frame `f` to hold `entries` (and, for the
/// root, `root_info`: hash version and levels), in the transaction's copy
/// of the block (the directory's lock is held: it is the block probed).
fn write_frame(ctx: &Ctx, f: &Frame, entries: &[DxEntry], root_info: Option<(u8, u8)>) -> Result<()> {
    let (off, limit) = (f.node.entries_offset, f.node.limit);
    ctx.tx.modify(f.pblk, |b| {
        if let Some((hash_version, levels)) = root_info {
            dx::write_root_info(b, hash_version, levels);
        }
        dx::write_entries(b, off, limit, entries)?;
        if ctx.csum {
            dx::set_checksum(b, off, ctx.seed);
        }
        Ok(())
    })
}

/// A new interior node holding `entries`, written to `pblk`.
fn write_new_node(ctx: &Ctx, pblk: u64, entries: &[DxEntry]) -> Result<()> {
    let mut b = vec![0u8; ctx.bs];
    dx::write_node_header(&mut b);
    dx::write_entries(&mut b, dx::NODE_ENTRIES_OFFSET, dx::node_limit(ctx.bs, ctx.csum), entries)?;
    if ctx.csum {
        dx::set_checksum(&mut b, dx::NODE_ENTRIES_OFFSET, ctx.seed);
    }
    ctx.put_new(pblk, &b)
}

/// Most restarts one insertion can need: each fixes one full index level.
const MAX_RESTARTS: usize = 8;

pub(super) fn dx_add(ctx: &Ctx, dir: &mut Inode, mut item: Item) -> Result<()> {
    let need = item.size();
    for _ in 0..MAX_RESTARTS {
        let p = probe(ctx.vol(), dir, &item.name)?;
        item.hash = p.hash;
        let bottom = p.frames.len() - 1;
        let leaf = p.frames[bottom].entries()[p.frames[bottom].pos].block;
        let hole = || {
            let lblk = u64::from(leaf);
            bad_dx(Location::FileBlock { ino: dir.ino, lblk }, CorruptKind::Hole { lblk })
        };
        // The common case, a leaf with room, changes it in place; the
        // copy below is for a split.
        let pblk = ctx.leaf_block(dir, FileBlock::from(leaf))?.ok_or_else(hole)?;
        if ctx.insert_in_place(pblk, &item)? {
            return Ok(());
        }
        let (pblk, mut b) = ctx.read_leaf(dir, FileBlock::from(leaf))?.ok_or_else(hole)?;
        let v = ctx.slots(&b, pblk)?;
        if let Some(i) = find_slot(&v, &b, &item.name, need)? {
            insert_at(ctx, &mut b, v[i], &item);
            ctx.finish_leaf(&mut b);
            return ctx.put(pblk, &b);
        }
        if !p.frames[bottom].full() {
            return split_leaf(ctx, dir, &p, pblk, &b, &v, item);
        }
        // The leaf's index block is full: find the highest full level.
        let mut k = bottom;
        while k > 0 && p.frames[k - 1].full() {
            k -= 1;
        }
        if k == 0 {
            if p.frames.len() >= p.max_levels {
                return Err(Error::NoSpace(format!("directory {} index is full", dir.ino)));
            }
            add_level(ctx, dir, &p)?;
        } else {
            split_node(ctx, dir, &p.frames, k)?;
        }
    }
    Err(bad_dx(Location::Inode(dir.ino), CorruptKind::Changed { what: "htree index (it did not settle)" }))
}

/// Moves the root's entries into a new node under a one-entry root.
fn add_level(ctx: &Ctx, dir: &mut Inode, p: &Probe) -> Result<()> {
    let (l, pblk) = append_block(ctx, dir)?;
    let levels = p.frames.len() as u8;
    let root = &p.frames[0];
    write_new_node(ctx, pblk, root.entries())?;
    write_frame(ctx, root, &[DxEntry { hash: 0, block: l }], Some((p.hash_version_raw, levels)))
}

/// Splits the full node `frames[k]` in two; its parent (which has room)
/// gains an entry for the upper half.
fn split_node(ctx: &Ctx, dir: &mut Inode, frames: &[Frame], k: usize) -> Result<()> {
    let n = frames[k].entries().len();
    if n < 2 {
        let kind = CorruptKind::OutOfRange { field: "count (full node)", value: n as u64 };
        return Err(bad_dx(Location::inode_block(dir.ino, frames[k].pblk), kind));
    }
    let (l, pblk) = append_block(ctx, dir)?;
    let (lower, upper) = frames[k].entries().split_at(n / 2);
    write_new_node(ctx, pblk, upper)?;
    write_frame(ctx, &frames[k], lower, None)?;
    let parent = &frames[k - 1];
    let mut entries = parent.entries().to_vec();
    entries.insert(parent.pos + 1, DxEntry { hash: upper[0].hash, block: l });
    write_frame(ctx, parent, &entries, None)
}

/// Splits a full leaf by hash into itself and a new block, adds the new
/// entry to the right half and indexes the new block.
fn split_leaf(ctx: &Ctx, dir: &mut Inode, p: &Probe, pblk: u64, b: &[u8], v: &[Slot], item: Item) -> Result<()> {
    let mut items: Vec<Item> = v
        .iter()
        .filter(|s| s.ino != 0)
        .map(|s| Item {
            hash: name_hash(ctx.vol(), dir, s.name(b), p.version).major,
            ino: s.ino,
            file_type: if ctx.ft { b[s.off + 7] } else { 0 },
            name: s.name(b).to_vec(),
        })
        .collect();
    items.sort_by_key(|i| i.hash);
    let frame = p
        .frames
        .last()
        .ok_or_else(|| bad_dx(Location::Inode(dir.ino), CorruptKind::Empty { what: "htree index path" }))?;
    if items.len() < 2 {
        let kind = CorruptKind::OutOfRange { field: "entries (full leaf)", value: items.len() as u64 };
        return Err(Error::corruption(Structure::DirEntry, Location::inode_block(dir.ino, pblk), kind));
    }
    let (s, continued) = choose_split(&items, &item, ctx.space()).ok_or_else(|| {
        let kind = CorruptKind::Malformed { what: "leaf (it cannot be split)" };
        Error::corruption(Structure::DirEntry, Location::inode_block(dir.ino, pblk), kind)
    })?;
    // The split hash must fall inside the leaf's hash range, or the index
    // would go out of order (a misplaced entry in a corrupt leaf).
    let hash2 = items[s].hash | u32::from(continued);
    let lo = frame.entries()[frame.pos].hash;
    let hi = frame.entries().get(frame.pos + 1).map_or(u32::MAX, |e| e.hash);
    if hash2 < lo || hash2 > hi {
        let kind = CorruptKind::OutsideRange {
            what: "leaf hash",
            value: u64::from(hash2),
            start: u64::from(lo),
            end: u64::from(hi) + 1,
        };
        return Err(bad_dx(Location::inode_block(dir.ino, frame.pblk), kind));
    }
    let (left, (_, right)) = halves(items, s, item);
    let left = ctx.build_leaf(&left)?;
    let right = ctx.build_leaf(&right)?;
    let (l2, p2) = append_block(ctx, dir)?;
    ctx.put_new(p2, &right)?;
    ctx.put(pblk, &left)?;
    let mut entries = frame.entries().to_vec();
    entries.insert(frame.pos + 1, DxEntry { hash: hash2, block: l2 });
    write_frame(ctx, frame, &entries, None)
}
