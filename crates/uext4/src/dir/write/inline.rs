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
use super::leaf::Ctx;
use crate::error::{Error, Result};
use crate::format::bytes::put_le16;
use crate::format::dirent::{self, rec_len_for, rec_len_to_disk};
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

/// Moves the entries of inline directory `dir` into a new first block
/// and clears the inline state (flag and `system.data`), as
/// ext4_convert_inline_dir does: "." and ".." (12 bytes each) take the
/// place of the 4-byte parent number and the records follow unchanged,
/// `i_block`'s then `system.data`'s, so every entry keeps the position
/// listings gave it (see [`inline::DIR_POS_SHIFT`]) and a listing goes on
/// across the change; the last record reaches the end of the block.
fn convert(ctx: &Ctx, dir: &mut Inode) -> Result<()> {
    // Checked the way readers check them (records, inode numbers).
    let (parent, _) = inline::dir_entries(dir, ctx.ft)?;
    let raw = inline::bytes(dir)?;
    let body = &raw[inline::DOTDOT_SIZE..];
    let dots = rec_len_for(1) + rec_len_for(2);
    let end = dots + body.len();
    let space = ctx.space();
    if end > space {
        return Err(Error::NoSpace(format!("inline directory {} does not fit a block", dir.ino)));
    }
    let mut b = vec![0u8; ctx.bs];
    ctx.write_entry(&mut b, 0, dir.ino, rec_len_for(1), b".", FT_DIR);
    ctx.write_entry(&mut b, rec_len_for(1), parent, rec_len_for(2), b"..", FT_DIR);
    b[dots..end].copy_from_slice(body);
    let last = dirent::parse_leaf(&b[..end], ctx.ft, 0)?.last().map_or(dots, |r| r.offset);
    put_le16(&mut b, last + 4, rec_len_to_disk(space - last, ctx.bs));
    ctx.finish_leaf(&mut b);
    let mut converted = dir.clone();
    inline::destroy(&mut converted)?;
    ew::init_root(&mut converted);
    converted.size = 0;
    // On ENOSPC nothing was allocated and `dir` stays inline.
    let (_, pblk) = append_block(ctx, &mut converted)?;
    ctx.put(pblk, &b)?;
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
