//! The context every step of one directory write shares, and the edits
//! inside one leaf block: its entries by position, finding room for a new
//! entry, writing it, building a whole leaf, and installing a block
//! through the transaction with its checksum tail.

use crate::dir::block;
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::FileBlock;
use crate::format::bytes::put_le16;
use crate::format::dirent::{self, rec_len_for, rec_len_to_disk, DIRENT_HEADER, TAIL_SIZE};
use crate::format::features::incompat;
use crate::format::inode::Inode;
use crate::txn::Tx;
use crate::volume::Volume;

/// What every step of one operation needs.
pub(super) struct Ctx<'t, 'a> {
    pub(super) tx: &'t Tx<'a>,
    pub(super) bs: usize,
    pub(super) csum: bool,
    /// Per-directory checksum seed.
    pub(super) seed: u32,
    /// The filetype feature (name_len is one byte and a type byte follows).
    pub(super) ft: bool,
}

/// One entry of a leaf, by position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Slot {
    pub(super) off: usize,
    pub(super) ino: u32,
    pub(super) rec_len: usize,
    pub(super) name_len: usize,
}

impl From<&dirent::RawDirent<'_>> for Slot {
    fn from(e: &dirent::RawDirent<'_>) -> Slot {
        Slot { off: e.offset, ino: e.inode, rec_len: e.rec_len, name_len: e.name.len() }
    }
}

impl Slot {
    pub(super) fn name<'b>(&self, b: &'b [u8]) -> &'b [u8] {
        &b[self.off + DIRENT_HEADER..self.off + DIRENT_HEADER + self.name_len]
    }
}

/// A live entry being moved or added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Item {
    pub(super) hash: u32,
    pub(super) ino: u32,
    pub(super) file_type: u8,
    pub(super) name: Vec<u8>,
}

impl Item {
    pub(super) fn size(&self) -> usize {
        rec_len_for(self.name.len())
    }
}

impl<'t, 'a> Ctx<'t, 'a> {
    pub(super) fn new(tx: &'t Tx<'a>, dir: &Inode) -> Self {
        let vol = tx.vol;
        Ctx {
            tx,
            bs: vol.block_size,
            csum: vol.has_csum(),
            seed: vol.inode_csum_seed(dir.ino, dir.generation),
            ft: vol.sb.features.has_incompat(incompat::FILETYPE),
        }
    }

    pub(super) fn vol(&self) -> &'t Volume {
        self.tx.vol
    }

    /// Bytes of a leaf available to entries (the tail excluded).
    pub(super) fn space(&self) -> usize {
        self.bs - if self.csum { TAIL_SIZE } else { 0 }
    }

    /// The type byte to store (always 0 without the filetype feature).
    pub(super) fn file_type(&self, t: u8) -> u8 {
        if self.ft {
            t
        } else {
            0
        }
    }

    pub(super) fn write_entry(&self, b: &mut [u8], off: usize, ino: u32, rec_len: usize, name: &[u8], t: u8) {
        dirent::write_entry(b, off, ino, rec_len, name, self.file_type(t), self.ft);
    }

    /// The entries of a leaf block (tail excluded), validated.
    pub(super) fn slots(&self, b: &[u8], pblk: u64) -> Result<Vec<Slot>> {
        self.check_leaf(b, pblk)?;
        // One vector, sized for a typical leaf (a 4 KiB leaf of
        // 16-character names holds about 130 entries).
        let mut v = Vec::with_capacity(self.bs / 32);
        dirent::walk_leaf(&b[..self.space()], self.ft, pblk, |e| v.push(Slot::from(&e)))?;
        Ok(v)
    }

    /// The live entry of leaf `b` (block `pblk`, checked as [`Ctx::slots`]
    /// checks it) that matches `name`, with the entry before it, in one
    /// walk of the block and without collecting its entries.
    pub(super) fn find_entry(
        &self,
        b: &[u8],
        pblk: u64,
        name: &crate::dir::NameKey<'_>,
    ) -> Result<Option<(Option<Slot>, Slot)>> {
        self.check_leaf(b, pblk)?;
        let (mut prev, mut found) = (None, None);
        dirent::walk_leaf(&b[..self.space()], self.ft, pblk, |e| {
            if found.is_some() {
                return;
            }
            let s = Slot::from(&e);
            if s.ino != 0 && name.matches(e.name) {
                found = Some((prev, s));
            }
            prev = Some(s);
        })?;
        Ok(found)
    }

    /// Adds `item` to leaf block `pblk` if it has room for it: the block
    /// is changed in the journal's copy itself, in one walk of its
    /// entries (what `slots` and `find_slot` find, without the copies).
    /// False, and nothing changed, when it has no room.
    pub(super) fn insert_in_place(&self, pblk: u64, item: &Item) -> Result<bool> {
        let need = item.size();
        let done = self.change_leaf(
            pblk,
            |b| {
                self.check_leaf(b, pblk)?;
                // find_slot's answer: the first slot with room; a live
                // entry of the same name before it is EEXIST.
                let mut found: Result<Option<Slot>> = Ok(None);
                dirent::walk_leaf(&b[..self.space()], self.ft, pblk, |e| {
                    if matches!(found, Ok(None)) {
                        let s = Slot::from(&e);
                        found = fits(&s, e.name, &item.name, need).map(|room| room.then_some(s));
                    }
                })?;
                found
            },
            |s, b| insert_at(self, b, s, item),
        )?;
        Ok(done.is_some())
    }

    /// Changes leaf block `pblk` through the transaction: `plan` checks
    /// the block as it is and decides (`None`: no change), `apply` makes
    /// the change, which cannot fail, and the leaf's tail is finished
    /// ([`Ctx::finish_leaf`]). The block is changed in place when the
    /// running transaction alone holds it (a directory a transaction
    /// inserts into or removes from again and again), else in a new
    /// version; with metadata_csum either is marked verified, so the
    /// checksum just computed is not computed again by the next reader.
    pub(super) fn change_leaf<P, R>(
        &self,
        pblk: u64,
        plan: impl FnOnce(&[u8]) -> Result<Option<P>>,
        apply: impl FnOnce(P, &mut [u8]) -> R,
    ) -> Result<Option<R>> {
        let check = self.csum.then_some((crate::cache::Check::DirLeaf, self.seed));
        self.tx.modify_planned_if(pblk, check, plan, |p, b| {
            let r = apply(p, b);
            self.finish_leaf(b);
            r
        })
    }

    /// What `slots` requires of a leaf before walking it.
    pub(super) fn check_leaf(&self, b: &[u8], pblk: u64) -> Result<()> {
        if b.len() != self.bs {
            let kind = CorruptKind::Mismatch { field: "block length", value: b.len() as u64, expected: self.bs as u64 };
            return Err(Error::corruption(Structure::DirEntry, Location::from_block(pblk), kind));
        }
        if self.csum && !dirent::has_tail(b) {
            return Err(Error::corruption(
                Structure::DirEntry,
                Location::from_block(pblk),
                CorruptKind::MissingChecksumTail,
            ));
        }
        Ok(())
    }

    /// Writes the checksum tail of a leaf (metadata_csum).
    pub(super) fn finish_leaf(&self, b: &mut [u8]) {
        if self.csum {
            dirent::write_tail(b);
            dirent::set_leaf_checksum(b, self.seed);
        }
    }

    /// A complete leaf holding `items` (the last entry takes the rest of
    /// the space; no items gives one unused entry).
    pub(super) fn build_leaf<'i>(&self, items: impl IntoIterator<Item = &'i Item>) -> Result<Vec<u8>> {
        let mut b = vec![0u8; self.bs];
        let space = self.space();
        let items: Vec<&Item> = items.into_iter().collect();
        let used: usize = items.iter().map(|i| i.size()).sum();
        if used > space {
            return Err(Error::NoSpace(format!("{used} bytes of entries do not fit a {space}-byte leaf")));
        }
        if items.is_empty() {
            self.write_entry(&mut b, 0, 0, space, b"", 0);
        }
        let mut off = 0;
        for (i, it) in items.iter().enumerate() {
            let rec = if i + 1 == items.len() { space - off } else { it.size() };
            self.write_entry(&mut b, off, it.ino, rec, &it.name, it.file_type);
            off += rec;
        }
        self.finish_leaf(&mut b);
        Ok(b)
    }

    /// Installs new contents of an existing metadata block.
    pub(super) fn put(&self, pblk: u64, data: &[u8]) -> Result<()> {
        self.tx.modify(pblk, |b| copy_block(b, data, pblk))
    }

    /// Installs the contents of a newly mapped block.
    pub(super) fn put_new(&self, pblk: u64, data: &[u8]) -> Result<()> {
        self.tx.init(pblk, |b| copy_block(b, data, pblk))
    }

    /// The physical block of leaf `lblk` (verified), `None` for a hole.
    pub(super) fn leaf_block(&self, dir: &Inode, lblk: FileBlock) -> Result<Option<u64>> {
        Ok(block::read(self.vol(), dir, lblk, false)?.ok().map(|b| b.block))
    }

    /// Reads logical block `lblk` as a leaf (verified): physical block
    /// and a copy of the bytes; `None` for a hole.
    pub(super) fn read_leaf(&self, dir: &Inode, lblk: FileBlock) -> Result<Option<(u64, Vec<u8>)>> {
        Ok(match block::read(self.vol(), dir, lblk, false)? {
            Ok(b) => Some((b.block, b.buf.data().to_vec())),
            Err(_) => None,
        })
    }
}

pub(super) fn copy_block(dst: &mut [u8], src: &[u8], pblk: u64) -> Result<()> {
    if dst.len() != src.len() {
        let kind = CorruptKind::Mismatch { field: "block length", value: src.len() as u64, expected: dst.len() as u64 };
        return Err(Error::corruption(Structure::DirEntry, Location::from_block(pblk), kind));
    }
    dst.copy_from_slice(src);
    Ok(())
}

/// Finds room for an entry of `need` bytes: the index of an unused slot or
/// of a live entry with enough slack. A live entry named `name` is
/// `Error::Exists`.
pub(super) fn find_slot(v: &[Slot], b: &[u8], name: &[u8], need: usize) -> Result<Option<usize>> {
    for (i, s) in v.iter().enumerate() {
        if fits(s, s.name(b), name, need)? {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// Whether slot `s` (its entry named `s_name`) has room for an entry of
/// `need` bytes: all of it if unused, its slack if live. A live entry
/// named `name` is `Error::Exists`.
fn fits(s: &Slot, s_name: &[u8], name: &[u8], need: usize) -> Result<bool> {
    if s.ino != 0 && s_name == name {
        return Err(Error::Exists(String::from_utf8_lossy(name).into_owned()));
    }
    Ok(room_for(s, need))
}

/// Whether slot `s` has room for an entry of `need` bytes: all of it if
/// unused, its slack if live.
pub(super) fn room_for(s: &Slot, need: usize) -> bool {
    let used = if s.ino != 0 { rec_len_for(s.name_len) } else { 0 };
    s.rec_len.saturating_sub(used) >= need
}

/// Writes `item` into slot `s` (splitting a live entry's slack off).
pub(super) fn insert_at(ctx: &Ctx, b: &mut [u8], s: Slot, item: &Item) {
    insert_entry(ctx, b, s, item.ino, item.file_type, &item.name);
}

/// Writes entry `name` -> `ino` of type `t` into slot `s` (splitting a
/// live entry's slack off).
pub(super) fn insert_entry(ctx: &Ctx, b: &mut [u8], s: Slot, ino: u32, t: u8, name: &[u8]) {
    let (off, len) = if s.ino != 0 {
        let used = rec_len_for(s.name_len);
        put_le16(b, s.off + 4, rec_len_to_disk(used, ctx.bs));
        (s.off + used, s.rec_len - used)
    } else {
        (s.off, s.rec_len)
    };
    // Only the new record's own bytes: the slack after it is zero in
    // every block this engine wrote (removals zero what they free), and
    // what the kernel leaves in its slack is as valid after as before.
    b[off..off + rec_len_for(name.len()).min(len)].fill(0);
    ctx.write_entry(b, off, ino, len, name, t);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_and_slack() {
        let s =
            [Slot { off: 0, ino: 2, rec_len: 12, name_len: 1 }, Slot { off: 12, ino: 2, rec_len: 1000, name_len: 2 }];
        let mut b = vec![0u8; 1024];
        b[8] = b'.';
        b[20] = b'.';
        b[21] = b'.';
        assert_eq!(find_slot(&s, &b, b"x", 12).unwrap(), Some(1));
        assert_eq!(find_slot(&s, &b, b"x", 1000).unwrap(), None);
        assert!(matches!(find_slot(&s, &b, b"..", 12), Err(Error::Exists(_))));
    }
}
