//! Changes to inline directories (inline_data: the entries live in
//! `i_block` and the `system.data` attribute, see [`crate::inode::inline`]).
//!
//! Removing and re-pointing an entry, and "..", are edited in place in the
//! inode. A new entry goes into a record with room, else into a new record
//! at the end of `system.data`, grown as far as the inode body allows
//! (the kernel's ext4_try_add_inline_entry); when even that does not fit,
//! the directory becomes a one-block directory first (the kernel's
//! ext4_convert_inline_dir) and the entry is added to that block the usual
//! way. The caller writes the inode in every case.

use super::grow::append_block;
use super::leaf::{Ctx, Item};
use crate::error::Result;
use crate::format::inode::Inode;
use crate::inode::{extent_write as ew, inline};
use crate::txn::Tx;

/// Dirent file type of a directory (for "." and "..").
const FT_DIR: u8 = 2;

/// Adds `name` in place; false when the directory is full (then it has
/// been converted to a block directory, and the caller adds it there).
pub(super) fn add(tx: &Tx, dir: &mut Inode, name: &[u8], ino: u32, file_type: u8) -> Result<bool> {
    let ctx = Ctx::new(tx, dir);
    if inline::add_entry(dir, ctx.ft, name, ino, ctx.file_type(file_type))? {
        return Ok(true);
    }
    convert(&ctx, dir)?;
    Ok(false)
}

/// Moves the entries of inline directory `dir` into a new first block:
/// "." and "..", then the entries in their order, and clears the inline
/// state (flag and `system.data`), as ext4_convert_inline_dir does.
fn convert(ctx: &Ctx, dir: &mut Inode) -> Result<()> {
    let (parent, entries) = inline::dir_entries(dir, ctx.ft)?;
    let mut items = vec![
        Item { hash: 0, ino: dir.ino, file_type: ctx.file_type(FT_DIR), name: b".".to_vec() },
        Item { hash: 0, ino: parent, file_type: ctx.file_type(FT_DIR), name: b"..".to_vec() },
    ];
    items.extend(entries.into_iter().map(|e| Item {
        hash: 0,
        ino: e.inode,
        file_type: ctx.file_type(e.file_type),
        name: e.name,
    }));
    // Built before anything changes: entries that cannot fit a block
    // (impossible for a sane inode) fail here with nothing written.
    let leaf = ctx.build_leaf(&items)?;
    let mut converted = dir.clone();
    inline::destroy(&mut converted)?;
    ew::init_root(&mut converted);
    converted.size = 0;
    // On ENOSPC nothing was allocated and `dir` stays inline.
    let (_, pblk) = append_block(ctx, &mut converted)?;
    ctx.put(pblk, &leaf)?;
    *dir = converted;
    Ok(())
}

/// Removes `name`; returns the inode it pointed at.
pub(super) fn remove(tx: &Tx, dir: &mut Inode, name: &[u8]) -> Result<u32> {
    let ft = Ctx::new(tx, dir).ft;
    inline::remove_entry(dir, ft, name)?.ok_or_else(|| super::not_found(name))
}

/// Points `name` at `ino`; returns the inode it pointed at before.
pub(super) fn replace(tx: &Tx, dir: &mut Inode, name: &[u8], ino: u32, file_type: u8) -> Result<u32> {
    let ctx = Ctx::new(tx, dir);
    inline::replace_entry(dir, ctx.ft, name, ino, ctx.file_type(file_type))?.ok_or_else(|| super::not_found(name))
}
