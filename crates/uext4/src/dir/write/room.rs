//! The duplicate-name check of a new entry, which finds on the way where
//! the entry goes: a create walks the leaf it inserts into once, not once
//! to refuse a name that exists and again to find room.
//!
//! The answer holds while the caller keeps the directory's lock (taken
//! exclusively before the check, released after the insert): nothing else
//! changes the directory's blocks meanwhile, so the slot found is still
//! free and the name still absent when the entry is written. A lookup
//! that finds no entry ([`search`], under the lock shared) makes the same
//! answer on its way; a create that follows may use it instead of its own
//! search only if no exclusive hold of the lock ended in between
//! ([`crate::locks::IoStamp`]: then the directory is as the lookup saw
//! it, and the search would answer the same). The insert
//! checks that the slot is as found all the same, as [`super::remove_found`]
//! does, so that a block changed behind the lock (a corrupt image in
//! which it belongs to something else too) is an error, not a silent edit.

use super::find::Loc;
use super::leaf::{insert_entry, room_for, Ctx, Slot};
use super::probe::probe;
use super::Found;
use crate::dir::{block, htree, is_htree, NameKey};
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::FileBlock;
use crate::format::bytes::{le16, le32};
use crate::format::dirent::{self, rec_len_for, rec_len_from_disk, DIRENT_HEADER, TAIL_SIZE};
use crate::format::features::incompat;
use crate::format::file_type::FileType;
use crate::format::inode::{Inode, FL_INDEX};
use crate::txn::Tx;
use crate::volume::Volume;

/// Where [`find_room`] found room for a new entry (`None`: it found none
/// it could use, or the directory is one it leaves to
/// [`super::add_entry`]'s own search: inline, damaged, full).
#[derive(Debug)]
pub struct Room(Option<Spot>);

#[cfg(test)]
impl Room {
    /// No room found: the insert searches on its own.
    pub(crate) fn unknown() -> Room {
        Room(None)
    }
}

#[derive(Debug, Clone, Copy)]
struct Spot {
    pblk: u64,
    slot: Slot,
}

/// What a walk of a leaf (of a directory) found.
enum Scan<S, E> {
    /// A live entry that matches the name: its dirent type and where it
    /// is (`E`: in the leaf, its slot and the one before it).
    Exists(Option<FileType>, E),
    /// No such entry; the first slot with room, if any was looked for.
    Absent(Option<S>),
}

/// What [`search`] found.
#[derive(Debug)]
pub enum Search {
    /// The entry [`crate::dir::lookup`] finds: its inode, its dirent type
    /// and, when the walk went through the directory's blocks (not after
    /// a fallback), where it is: what [`super::remove_found`] removes with
    /// no search of its own while the answer holds (see the module's
    /// comment: the same rule as for a create's room).
    Found(u32, Option<FileType>, Option<Found>),
    /// No entry: where [`add_entry_at`] puts one, as [`find_room`] answers.
    Absent(Room),
}

fn exists(name: &[u8]) -> Error {
    Error::Exists(String::from_utf8_lossy(name).into_owned())
}

/// EEXIST if `name` (or, in a casefolded directory, a name that folds to
/// the same string) is in directory `dir`, as [`crate::dir::lookup`]
/// would find it; else where [`add_entry_at`] puts it. "." and ".."
/// always exist. The caller holds the directory's lock exclusively, and
/// keeps it until [`add_entry_at`] has used the answer.
pub fn find_room(vol: &Volume, dir: &Inode, name: &[u8]) -> Result<Room> {
    if name == b"." || name == b".." {
        return Err(exists(name));
    }
    match search(vol, dir, name)? {
        Search::Found(..) => Err(exists(name)),
        Search::Absent(room) => Ok(room),
    }
}

/// Looks `name` (a valid name, not "." or "..") up in directory `dir`:
/// the entry [`crate::dir::lookup`] finds, or, if there is none, what
/// [`find_room`] answers, in one walk. The caller holds the directory's
/// lock (shared is enough for the answer; see the module's comment for
/// when a create may use it).
pub fn search(vol: &Volume, dir: &Inode, name: &[u8]) -> Result<Search> {
    if !dir.has_inline_data() && super::check_dir(vol, dir).is_ok() {
        let key = NameKey::new(vol, dir, name)?;
        let need = rec_len_for(name.len());
        let walked =
            if is_htree(vol, dir) { walk_index(vol, dir, &key, need) } else { walk_linear(vol, dir, &key, need) };
        match walked {
            Ok(Scan::Exists(ft, loc)) => return Ok(Search::Found(loc.ino(), ft, Some(Found::at(loc)))),
            Ok(Scan::Absent(spot)) => return Ok(Search::Absent(Room(spot))),
            // A damaged block or index: the lookup's answer, with its
            // fallbacks (an index abandoned for a scan of the leaves),
            // decides, and the insert searches on its own.
            Err(Error::Corrupt(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(match crate::dir::lookup(vol, dir, name)? {
        Some((ino, ft)) => Search::Found(ino, ft, None),
        None => Search::Absent(Room(None)),
    })
}

/// Walks leaf `b` once: a live entry matching `key` (with the entry
/// before it), else (when `need` is given) the first slot with room for
/// `need` bytes, the one [`Ctx::insert_in_place`] would take.
fn scan(
    vol: &Volume,
    b: &block::DirBlock,
    key: &NameKey<'_>,
    need: Option<usize>,
) -> Result<Scan<Slot, (Option<Slot>, Slot)>> {
    let data = b.buf.data();
    let csum = vol.has_csum();
    // What Ctx::check_leaf requires of a block an entry is inserted into.
    let bad = |kind| Err(Error::corruption(Structure::DirEntry, Location::from_block(b.block), kind));
    if data.len() != vol.block_size {
        let (value, expected) = (data.len() as u64, vol.block_size as u64);
        return bad(CorruptKind::Mismatch { field: "block length", value, expected });
    }
    if csum && !dirent::has_tail(data) {
        return bad(CorruptKind::MissingChecksumTail);
    }
    let space = data.len() - if csum { TAIL_SIZE } else { 0 };
    let ft = vol.sb.features.has_incompat(incompat::FILETYPE);
    let (mut found, mut room, mut prev) = (None, None, None);
    dirent::walk_leaf(&data[..space], ft, b.block, |e| {
        if found.is_some() {
            return;
        }
        let s = Slot::from(&e);
        if e.inode != 0 && key.matches(e.name) {
            found = Some((FileType::from_dirent(e.file_type), (prev, s)));
            return;
        }
        if let Some(need) = need.filter(|_| room.is_none()) {
            if room_for(&s, need) {
                room = Some(s);
            }
        }
        prev = Some(s);
    })?;
    Ok(match found {
        Some((ft, at)) => Scan::Exists(ft, at),
        None => Scan::Absent(room),
    })
}

/// The walk of an indexed directory: the leaf the name hashes to (where
/// [`super::index`]'s insert goes), then the leaves that continue its
/// hash, as [`crate::dir::lookup`] searches them; room only in the first.
fn walk_index(vol: &Volume, dir: &Inode, key: &NameKey<'_>, need: usize) -> Result<Scan<Spot, Loc>> {
    let p = probe(vol, dir, key.name())?;
    let nblocks = dir.size / vol.block_size as u64;
    let mut path: htree::Path = p.frames.into_iter().map(|f| (f.node, f.pos)).collect();
    let (node, pos) = &path[path.len() - 1];
    let mut leaf = node.entries[*pos].block;
    let mut spot = None;
    let mut first = true;
    loop {
        if let Ok(b) = block::read(vol, dir, FileBlock::from(leaf), false)? {
            match scan(vol, &b, key, Some(need).filter(|_| first))? {
                Scan::Exists(ft, (prev, slot)) => return Ok(Scan::Exists(ft, Loc { pblk: b.block, slot, prev })),
                Scan::Absent(slot) => {
                    if first {
                        spot = slot.map(|slot| Spot { pblk: b.block, slot });
                    }
                }
            }
        }
        first = false;
        // Equal hashes may continue into the next leaf (its index entry
        // then has the low bit set).
        match htree::next_leaf(vol, dir, &mut path, vol.has_csum(), nblocks)? {
            Some((h, next)) if h & !1 == p.hash => leaf = next,
            _ => return Ok(Scan::Absent(spot)),
        }
    }
}

/// The walk of a linear directory: every block, room in the first block
/// that has it (where [`super::linear`]'s insert goes).
fn walk_linear(vol: &Volume, dir: &Inode, key: &NameKey<'_>, need: usize) -> Result<Scan<Spot, Loc>> {
    let nblocks = FileBlock::of_byte(dir.size, vol.block_size as u64);
    let mut lblk = FileBlock(0);
    let mut spot = None;
    while lblk < nblocks {
        match block::read(vol, dir, lblk, false)? {
            Ok(b) => {
                match scan(vol, &b, key, Some(need).filter(|_| spot.is_none()))? {
                    Scan::Exists(ft, (prev, slot)) => return Ok(Scan::Exists(ft, Loc { pblk: b.block, slot, prev })),
                    Scan::Absent(slot) => {
                        if spot.is_none() {
                            spot = slot.map(|slot| Spot { pblk: b.block, slot });
                        }
                    }
                }
                lblk += 1;
            }
            // Holes (sparse directories) are skipped in one step.
            Err(skip) => lblk = lblk.saturating_add(skip),
        }
    }
    Ok(Scan::Absent(spot))
}

/// Adds entry `name` -> `ino` where [`find_room`] found room for it (the
/// directory's lock held since), or, when it found none, as
/// [`super::add_entry`] does. The caller writes `dir` back.
pub fn add_entry_at(tx: &Tx, dir: &mut Inode, name: &[u8], ino: u32, file_type: u8, room: Room) -> Result<()> {
    let Some(Spot { pblk, slot }) = room.0 else {
        return super::add_entry(tx, dir, name, ino, file_type);
    };
    super::check_new(tx.vol, name, ino)?;
    super::check_dir(tx.vol, dir)?;
    super::check_encoding(tx.vol, dir, name)?;
    if !is_htree(tx.vol, dir) {
        // As linear_add: entries may land in what was an index root's "..".
        dir.flags &= !FL_INDEX;
    }
    let ctx = Ctx::new(tx, dir);
    ctx.change_leaf(
        pblk,
        |b| {
            ctx.check_leaf(b, pblk)?;
            if !unmoved(b, ctx.space(), ctx.ft, slot) {
                return Err(super::moved(pblk));
            }
            Ok(Some(()))
        },
        |(), b| insert_entry(&ctx, b, slot, ino, file_type, name),
    )?;
    Ok(())
}

/// The entry at `s.off` of `b` (entries in `b[..space]`; `ft`: the
/// filetype feature's one-byte name length) is still `s`.
fn unmoved(b: &[u8], space: usize, ft: bool, s: Slot) -> bool {
    s.off + DIRENT_HEADER <= space
        && s.off + s.rec_len <= space
        && le32(b, s.off) == s.ino
        && rec_len_from_disk(le16(b, s.off + 4), space) == s.rec_len
        && s.name_len == if ft { usize::from(b[s.off + 6]) } else { usize::from(le16(b, s.off + 6)) }
}
