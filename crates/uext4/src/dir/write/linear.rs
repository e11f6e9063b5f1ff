//! Linear directories: a new entry goes in the first block with room, else
//! in a new block; a full one-block directory on a dir_index filesystem
//! becomes an htree instead.

use super::dots::check_dots;
use super::grow::append_block;
use super::leaf::{find_slot, insert_at, Ctx, Item, Slot};
use super::split::{choose_split, halves};
use crate::dir::block;
use crate::dir::htree::hash_version;
use crate::dir::name_hash;
use crate::error::Result;
use crate::format::block_number::FileBlock;
use crate::format::bytes::le32;
use crate::format::dir_hash::HashVersion;
use crate::format::dirent::rec_len_for;
use crate::format::dx::{self, DxEntry};
use crate::format::features::compat;
use crate::format::inode::{Inode, FL_INDEX};

pub(super) fn linear_add(ctx: &Ctx, dir: &mut Inode, mut item: Item, fallback: bool) -> Result<()> {
    // Entries may land in what was the index root's ".." record.
    dir.flags &= !FL_INDEX;
    let need = item.size();
    let nblocks = FileBlock::of_byte(dir.size, ctx.bs as u64);
    let mut lblk = FileBlock(0);
    while lblk < nblocks {
        // Holes (sparse directories) are skipped in one step.
        let (pblk, buf) = match block::read(ctx.vol(), dir, lblk, false)? {
            Ok(blk) => (blk.block, blk.buf),
            Err(skip) => {
                lblk = lblk.saturating_add(skip);
                continue;
            }
        };
        lblk += 1;
        if ctx.insert_in_place(pblk, &item)? {
            return Ok(());
        }
        // No room: nothing was installed, `buf` is still the block (the
        // directory's I/O lock is held exclusively).
        let mut b = buf.data().to_vec();
        let v = ctx.slots(&b, pblk)?;
        if let Some(i) = find_slot(&v, &b, &item.name, need)? {
            insert_at(ctx, &mut b, v[i], &item);
            ctx.finish_leaf(&mut b);
            return ctx.put(pblk, &b);
        }
        if nblocks == FileBlock(1) && !fallback && ctx.vol().sb.features.has_compat(compat::DIR_INDEX) {
            // The kernel only accepts the signed names 0..=2 in a root
            // (the unsigned flavour comes from the superblock flag).
            let raw = ctx.vol().sb.def_hash_version;
            if let Some(version) = hash_version(ctx.vol(), raw).filter(|_| raw <= 2) {
                item.hash = name_hash(ctx.vol(), dir, &item.name, version).major;
                return make_indexed(ctx, dir, pblk, &b, &v, item, version);
            }
        }
    }
    let (_, pblk) = append_block(ctx, dir)?;
    let b = ctx.build_leaf([&item])?;
    ctx.put_new(pblk, &b)
}

/// Turns a full one-block directory into an htree: the entries after ".."
/// move to two new leaves split by hash (the new entry joins its half),
/// and block 0 becomes the index root.
fn make_indexed(
    ctx: &Ctx,
    dir: &mut Inode,
    pblk0: u64,
    b0: &[u8],
    v: &[Slot],
    item: Item,
    version: HashVersion,
) -> Result<()> {
    check_dots(v, b0, pblk0)?;
    let dot_ft = if ctx.ft { b0[v[0].off + 7] } else { 0 };
    let dotdot_ft = if ctx.ft { b0[v[1].off + 7] } else { 0 };
    let mut items: Vec<Item> = v[2..]
        .iter()
        .filter(|s| s.ino != 0)
        .map(|s| Item {
            hash: name_hash(ctx.vol(), dir, s.name(b0), version).major,
            ino: s.ino,
            file_type: if ctx.ft { b0[s.off + 7] } else { 0 },
            name: s.name(b0).to_vec(),
        })
        .collect();
    items.sort_by_key(|i| i.hash);
    let split = if items.len() >= 2 { choose_split(&items, &item, ctx.space()) } else { None };
    let (l1, p1) = append_block(ctx, dir)?;
    let mut entries = vec![DxEntry { hash: 0, block: l1 }];
    match split {
        Some((s, continued)) => {
            let (l2, p2) = append_block(ctx, dir)?;
            let (left, right) = halves(items, s, item);
            ctx.put_new(p1, &ctx.build_leaf(&left)?)?;
            ctx.put_new(p2, &ctx.build_leaf(&right.1)?)?;
            entries.push(DxEntry { hash: right.0 | u32::from(continued), block: l2 });
        }
        None => {
            items.push(item);
            ctx.put_new(p1, &ctx.build_leaf(&items)?)?;
        }
    }
    let mut root = vec![0u8; ctx.bs];
    let dot = rec_len_for(1);
    ctx.write_entry(&mut root, 0, le32(b0, v[0].off), dot, b".", dot_ft);
    ctx.write_entry(&mut root, dot, le32(b0, v[1].off), ctx.bs - dot, b"..", dotdot_ft);
    dx::write_root_info(&mut root, ctx.vol().sb.def_hash_version, 0);
    dx::write_entries(&mut root, dx::ROOT_ENTRIES_OFFSET, dx::root_limit(ctx.bs, ctx.csum), &entries)?;
    if ctx.csum {
        dx::set_checksum(&mut root, dx::ROOT_ENTRIES_OFFSET, ctx.seed);
    }
    ctx.put(pblk0, &root)?;
    dir.flags |= FL_INDEX;
    Ok(())
}
