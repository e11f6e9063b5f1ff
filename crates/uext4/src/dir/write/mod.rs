//! Directory writes: adding, removing and re-pointing entries, a new
//! directory's first block, "..", and the emptiness test.
//!
//! Linear directories take a new entry in the first block with room (the
//! slack after a live entry, or an unused slot), else in a new block. A
//! one-block directory that fills up on a dir_index filesystem becomes an
//! htree (a root in block 0 and two leaves), as the kernel does; larger
//! linear directories stay linear, as in the kernel.
//!
//! Indexed directories insert through the index. A full leaf is split in
//! two by hash, preferring a split point between different hashes so that
//! equal hashes stay in one leaf; when that is impossible the new index
//! entry carries the "continued" bit that makes lookups go on into the
//! next leaf. A full index node is split into two (its parent gains an
//! entry), and a full chain up to the root makes the tree one level deeper
//! (the root's entries move into a new node), up to the kernel's limit of
//! two index levels (three with large_dir).
//!
//! Every block is read through the verifying reader (checksums, entry
//! structure) and changed on a copy; the copy is installed whole through
//! the transaction with its checksum tail recomputed, so a corrupt block is
//! reported as a typed error before anything is written. New blocks are
//! written as valid empty leaves as soon as they are mapped, so the
//! directory stays well-formed even if a later step fails.
//!
//! The parts: `leaf` (the per-operation context and edits inside one
//! leaf block), `grow` (new blocks at the directory's end), `linear`
//! (adding to a linear directory and turning it into an htree), `split`
//! (where a full leaf splits by hash), `probe` (the walk from the index
//! root to a leaf), `index` (adding through the index: leaf, node and
//! root splits), `find` (locating the entry to remove or re-point) and
//! `dots` (a new directory's first block, "..", and the emptiness test).
//!
//! Casefolded directories hash names in their folded form and find the
//! entry to remove or re-point by a case-insensitive match (see
//! [`crate::dir`]); strict mode refuses new names that are not UTF-8.

mod dots;
mod find;
mod grow;
mod index;
mod inline;
mod leaf;
mod linear;
mod probe;
mod room;
mod split;

use crate::dir::{is_casefolded, is_htree, is_strict};
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::bytes::{put_le16, put_le32};
use crate::format::casefold;
use crate::format::dirent::{rec_len_to_disk, NAME_MAX};
use crate::format::inode::{Inode, FL_CASEFOLD, FL_ENCRYPT, S_IFDIR, S_IFMT};
use crate::txn::Tx;
use crate::volume::Volume;

#[cfg(test)]
pub use dots::set_dotdot;
pub use dots::{init_dir_block, is_empty, set_parent};
use find::find;
use index::dx_add;
use leaf::{Ctx, Item};
use linear::linear_add;
pub use room::{add_entry_at, find_room, search, Room, Search};

/// Adds entry `name` -> `ino` with dirent file type `file_type` (see
/// [`dirent::file_type_of`](crate::format::dirent::file_type_of)). The
/// caller has checked that the name does not exist, holds the directory's
/// lock, and writes `dir` back (its size, block count and flags may change).
///
/// Also when it fails with ENOSPC or EDQUOT: each step that grows the
/// directory leaves it whole (a one-block directory becoming an htree
/// takes two blocks, and when only the first could be had it stays a
/// linear directory with one more, empty, block; an htree gains a level
/// or a node before the leaf that still does not fit), so the blocks
/// already taken are the directory's, and `dir` says so only once it is
/// written back. Not writing it would leave them marked in use with
/// nothing referencing them.
pub fn add_entry(tx: &Tx, dir: &mut Inode, name: &[u8], ino: u32, file_type: u8) -> Result<()> {
    check_new(tx.vol, name, ino)?;
    if is_inline(dir)? && inline::add(tx, dir, name, ino, file_type)? {
        return Ok(());
    }
    check_dir(tx.vol, dir)?;
    check_encoding(tx.vol, dir, name)?;
    let ctx = Ctx::new(tx, dir);
    let item = Item { hash: 0, ino, file_type: ctx.file_type(file_type), name: name.to_vec() };
    let mut fallback = false;
    if is_htree(tx.vol, dir) {
        match dx_add(&ctx, dir, item.clone()) {
            // A structurally broken index (not a checksum failure) is
            // abandoned without metadata_csum, as the kernel does: the
            // leaves still hold every entry, so the directory is used as
            // a linear one from now on.
            Err(Error::Corrupt(c)) if c.structure == Structure::DxNode && !ctx.csum => fallback = true,
            r => return r,
        }
    }
    linear_add(&ctx, dir, item, fallback)
}

/// What every new entry must be: a valid name other than "." and ".."
/// (EEXIST), for an inode the filesystem has.
fn check_new(vol: &Volume, name: &[u8], ino: u32) -> Result<()> {
    check_name(name)?;
    if name == b"." || name == b".." {
        return Err(Error::Exists(String::from_utf8_lossy(name).into_owned()));
    }
    if ino == 0 || ino > vol.sb.inodes_count {
        return Err(Error::Invalid(format!("directory entry for inode {ino}")));
    }
    Ok(())
}

/// Removes entry `name` and returns the inode it pointed at. Its space
/// joins the previous entry of its block (the first entry of a block is
/// marked unused instead). Never removes "." or "..".
pub fn remove_entry(tx: &Tx, dir: &mut Inode, name: &[u8]) -> Result<u32> {
    let found = find_entry(tx, dir, name)?.ok_or_else(|| not_found(name))?;
    remove_found(tx, dir, name, found)
}

/// Where [`find_entry`] (or [`search`]) found a live entry: what
/// [`remove_found`] removes without searching the directory again.
#[derive(Debug)]
pub struct Found(FoundAt);

#[derive(Debug)]
enum FoundAt {
    /// In a block of the directory (the version its lock keeps current).
    Block(find::Loc),
    /// In an inline-data directory (removed by name: the search is a scan
    /// of the inode's own bytes).
    Inline(u32),
}

impl Found {
    fn at(loc: find::Loc) -> Found {
        Found(FoundAt::Block(loc))
    }

    /// The inode the entry names.
    pub fn ino(&self) -> u32 {
        match &self.0 {
            FoundAt::Block(loc) => loc.ino(),
            FoundAt::Inline(ino) => *ino,
        }
    }
}

/// Finds entry `name` to remove ("." and ".." never are): `None` if there
/// is none. The caller holds the directory's lock until it removes the
/// entry with [`remove_found`] (an unlink checks the name still names its
/// victim and removes it with one search of the directory, not two).
pub fn find_entry(tx: &Tx, dir: &Inode, name: &[u8]) -> Result<Option<Found>> {
    check_name(name)?;
    if name == b"." || name == b".." {
        return Err(Error::Invalid(format!("cannot remove {:?}", String::from_utf8_lossy(name))));
    }
    if is_inline(dir)? {
        return Ok(crate::dir::lookup(tx.vol, dir, name)?.map(|(ino, _)| Found(FoundAt::Inline(ino))));
    }
    check_dir(tx.vol, dir)?;
    Ok(find(&Ctx::new(tx, dir), dir, name)?.map(|loc| Found(FoundAt::Block(loc))))
}

/// Removes entry `name` that [`find_entry`] found as `found` in `dir`
/// (the directory's lock held since) and returns the inode it pointed at.
pub fn remove_found(tx: &Tx, dir: &mut Inode, name: &[u8], found: Found) -> Result<u32> {
    let loc = match found.0 {
        FoundAt::Inline(_) => return inline::remove(tx, dir, name),
        FoundAt::Block(loc) => loc,
    };
    let ctx = Ctx::new(tx, dir);
    // One copy of the block (the transaction's), edited where the walk
    // that found the entry left it.
    ctx.change_leaf(
        loc.pblk,
        |b| check_unmoved(b, &loc).map(Some),
        |(), b| {
            let s = loc.slot;
            match loc.prev {
                Some(prev) => {
                    put_le16(b, prev.off + 4, rec_len_to_disk(prev.rec_len + s.rec_len, ctx.bs));
                    b[s.off..s.off + s.rec_len].fill(0);
                }
                None => {
                    // The block's first entry: keep the record (its
                    // rec_len) but wipe inode, name length, type and name.
                    put_le32(b, s.off, 0);
                    b[s.off + 6..s.off + s.rec_len].fill(0);
                }
            }
        },
    )?;
    Ok(loc.ino())
}

/// The entry `loc` found is still where it was in `b`, the version being
/// changed (the directory's lock keeps it so; a mismatch is corruption
/// rather than a silent edit of the wrong record).
fn check_unmoved(b: &[u8], loc: &find::Loc) -> Result<()> {
    let s = loc.slot;
    let same = |s: leaf::Slot| {
        b.len() >= s.off + 8
            && crate::format::bytes::le32(b, s.off) == s.ino
            && crate::format::dirent::rec_len_from_disk(crate::format::bytes::le16(b, s.off + 4), b.len()) == s.rec_len
    };
    if same(s) && loc.prev.is_none_or(same) {
        Ok(())
    } else {
        Err(moved(loc.pblk))
    }
}

/// Points existing entry `name` at `ino` with `file_type` (rename over an
/// existing name); returns the inode it pointed at before.
pub fn replace_entry(tx: &Tx, dir: &mut Inode, name: &[u8], ino: u32, file_type: u8) -> Result<u32> {
    check_name(name)?;
    if name == b"." || name == b".." {
        return Err(Error::Invalid(format!("cannot replace {:?}", String::from_utf8_lossy(name))));
    }
    if ino == 0 || ino > tx.vol.sb.inodes_count {
        return Err(Error::Invalid(format!("directory entry for inode {ino}")));
    }
    if is_inline(dir)? {
        return inline::replace(tx, dir, name, ino, file_type);
    }
    check_dir(tx.vol, dir)?;
    let ctx = Ctx::new(tx, dir);
    let loc = find(&ctx, dir, name)?.ok_or_else(|| not_found(name))?;
    ctx.change_leaf(
        loc.pblk,
        |b| check_unmoved(b, &loc).map(Some),
        |(), b| {
            let off = loc.slot.off;
            put_le32(b, off, ino);
            if ctx.ft {
                b[off + 7] = ctx.file_type(file_type);
            }
        },
    )?;
    Ok(loc.ino())
}

/// A new name in a strict-mode casefolded directory must be UTF-8 (the
/// kernel's `utf8_validate` in `ext4_add_entry`): EINVAL otherwise.
pub fn check_encoding(vol: &Volume, dir: &Inode, name: &[u8]) -> Result<()> {
    if is_casefolded(vol, dir) && is_strict(vol) && !casefold::is_valid(name) {
        return Err(Error::Invalid(format!(
            "name {:?} is not valid UTF-8 (strict casefolded directory)",
            String::from_utf8_lossy(name)
        )));
    }
    Ok(())
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(Error::Invalid(format!("bad name {:?}", String::from_utf8_lossy(name))));
    }
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong(String::from_utf8_lossy(name).into_owned()));
    }
    Ok(())
}

/// True if `dir` is an inline directory (inline_data), which the caller
/// changes through [`mod@inline`]; errors as [`check_dir`] for what is no
/// directory or cannot be written.
fn is_inline(dir: &Inode) -> Result<bool> {
    if !dir.has_inline_data() {
        return Ok(false);
    }
    check_kind(dir)?;
    Ok(true)
}

fn check_kind(dir: &Inode) -> Result<()> {
    if dir.mode & S_IFMT != S_IFDIR {
        return Err(Error::NotDir(format!("inode {}", dir.ino)));
    }
    if dir.flags & FL_ENCRYPT != 0 {
        return Err(Error::Unsupported("writing encrypted directories".into()));
    }
    Ok(())
}

pub(super) fn check_dir(vol: &Volume, dir: &Inode) -> Result<()> {
    check_kind(dir)?;
    if dir.has_inline_data() {
        return Err(Error::Unsupported("block edits of an inline-data directory".into()));
    }
    if dir.flags & FL_CASEFOLD != 0 && !is_casefolded(vol, dir) {
        return Err(Error::Unsupported("writing a casefolded directory without the casefold feature".into()));
    }
    if !dir.size.is_multiple_of(vol.block_size as u64) {
        return Err(Error::corruption(
            Structure::Inode,
            Location::Inode(dir.ino),
            CorruptKind::OutOfRange { field: "i_size (not whole blocks)", value: dir.size },
        ));
    }
    Ok(())
}

fn not_found(name: &[u8]) -> Error {
    Error::NotFound(String::from_utf8_lossy(name).into_owned())
}

fn moved(pblk: u64) -> Error {
    Error::corruption(Structure::DirEntry, Location::from_block(pblk), CorruptKind::Changed { what: "directory entry" })
}
