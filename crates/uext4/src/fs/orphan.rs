//! The orphan list: inodes unlinked while open, and truncates in
//! progress, in the orphan file's slots when the filesystem has one
//! (`fs/orphan_file.rs`) and otherwise, or when it is full, chained from
//! `s_last_orphan` through `i_dtime`. After a crash the list says what
//! to finish: delete the inodes with no links, cut the others back to
//! their `i_size` (the kernel's ext4_orphan_cleanup, chain first, then
//! the file).

use super::orphan_file::OrphanSlots;
use super::{FsCore, Stat};
use crate::error::{Error, Result};
use crate::format::block_number::FileBlock;
use crate::format::inode::{FileType, Inode, FL_EXTENTS};
use crate::format::superblock::{Superblock, SUPERBLOCK_SIZE};
use crate::inode::extent_write as ew;
use crate::txn::Tx;

/// Sets `s_last_orphan` through the transaction (the field and the
/// checksum patched in place), and remembers it in the orphan state `o`,
/// whose lock the caller holds.
fn set_last_orphan(tx: &Tx, o: &mut OrphanSlots, ino: u32) -> Result<()> {
    let (blk, off) = tx.vol.sb_location();
    let csum = tx.vol.sb.has_metadata_csum();
    // Planned: in place when the running transaction alone holds the
    // superblock's block (every deletion sets the field twice).
    tx.modify_planned(
        blk,
        |b| match b.len() >= off + SUPERBLOCK_SIZE {
            true => Ok(()),
            false => Err(Error::Invalid("superblock offset".into())),
        },
        |(), b| Superblock::patch_last_orphan(&mut b[off..off + SUPERBLOCK_SIZE], csum, ino),
    )?;
    o.head = Some(ino);
    Ok(())
}

/// `s_last_orphan` as the transactions see it: from the orphan state `o`
/// (its lock held) once known, else parsed from the superblock once.
fn last_orphan(tx: &Tx, o: &mut OrphanSlots) -> Result<u32> {
    if let Some(h) = o.head {
        return Ok(h);
    }
    let h = sb_last_orphan(tx)?;
    o.head = Some(h);
    Ok(h)
}

/// `s_last_orphan` parsed from the current superblock.
fn sb_last_orphan(tx: &Tx) -> Result<u32> {
    let b = tx.vol.block(tx.vol.sb_location().0)?;
    let (_, off) = tx.vol.sb_location();
    Ok(Superblock::parse(&b.data()[off..off + SUPERBLOCK_SIZE])?.last_orphan)
}

/// Credits of each handle that frees an orphan's blocks or a truncated
/// file's tail: the work goes on in as many such handles as it needs.
pub(crate) const TRUNCATE_CREDITS: usize = 128;

impl FsCore {
    /// The last link of `i` is gone (its new count is already 0): delete
    /// it now, or, while it is open, put it on the orphan list so that a
    /// crash before the last close still frees it.
    ///
    /// Returns true when the deletion did not fit in this handle's credits
    /// (a large or fragmented file): the inode is then on the orphan list
    /// and the caller must call [`FsCore::delete_orphan`] once its handle
    /// is stopped, still holding the inode's lock (ext4's evict runs the
    /// truncate in its own restarting handles the same way).
    #[must_use = "a deferred deletion must be finished with delete_orphan"]
    pub(crate) fn drop_last_link(&self, tx: &Tx, i: &mut Inode) -> Result<bool> {
        let rw = self.rw()?;
        // "Is it open" and "doom it" are one step (doom_if_open): a last
        // close in between would otherwise find it not doomed and delete
        // nothing.
        if !rw.open.doom_if_open(i.ino) {
            // Its cached data goes before its blocks do.
            rw.data.inode(i.ino).data.pages.invalidate_all();
            // The groups of its blocks and of its inode are journaled once
            // the inode is freed too: one change of their shared
            // descriptor block (Tx::batch_groups).
            let released = tx.batch_groups(|| {
                if self.free_blocks_bounded(tx, i, FileBlock(0))? && Self::drop_ea_refs_bounded(tx, i)? {
                    self.release_emptied_inode(tx, i)?;
                    return Ok(true);
                }
                Ok(false)
            })?;
            if released {
                return Ok(false);
            }
            self.orphan_add(tx, i)?;
            return Ok(true);
        }
        // Its last close waits for the I/O lock the caller holds, so the
        // orphan entry is there before that close takes it off again.
        self.orphan_add(tx, i)?;
        Ok(false)
    }

    /// Frees the blocks of `i` from logical block `keep` on as far as the
    /// handle's credits allow; true when none are left. Extent-mapped and
    /// block-mapped files alike; devices, fifos, sockets and fast
    /// symlinks have no map.
    pub(crate) fn free_blocks_bounded(&self, tx: &Tx, i: &mut Inode, keep: FileBlock) -> Result<bool> {
        if !self.has_block_map(i)? {
            return Ok(true);
        }
        let done = ew::remove_range_bounded(tx, i, keep, FileBlock(u64::MAX))?;
        if !done && tx.handle.credits_left() == tx.handle.credits() {
            return Err(Error::Invalid(format!(
                "inode {}: freeing one extent needs more than a handle of {} credits",
                i.ino,
                tx.handle.credits()
            )));
        }
        Ok(done)
    }

    /// Whether `i_block` of `i` maps blocks (an extent tree or a block
    /// map) rather than holding a device number, a fast symlink's target
    /// or inline data: what deleting or truncating it must free.
    pub(crate) fn has_block_map(&self, i: &Inode) -> Result<bool> {
        if i.has_inline_data() {
            return Ok(false);
        }
        if i.flags & FL_EXTENTS != 0 {
            return Ok(!self.is_fast_symlink(i));
        }
        Ok(match crate::fs::namespace::ftype(i)? {
            FileType::Regular | FileType::Directory => true,
            FileType::Symlink => !self.is_fast_symlink(i),
            _ => false,
        })
    }

    /// Drops the references a dying inode holds on EA inodes as far as
    /// the handle allows, leaving what [`FsCore::release_inode`] needs;
    /// true when none are left (see [`crate::xattr::write::drop_ea_refs`]).
    fn drop_ea_refs_bounded(tx: &Tx, i: &mut Inode) -> Result<bool> {
        crate::xattr::write::drop_ea_refs(tx, i, true, ew::FINISH_RESERVE)
    }

    /// Puts inode `i` on the orphan list: in a free slot of the orphan
    /// file (one block of the handle's credits), or, without one, at the
    /// head of the chain (its `i_dtime` links to the previous head; the
    /// superblock and the inode). Either costs the handle at most two
    /// blocks besides the inode.
    pub(crate) fn orphan_add(&self, tx: &Tx, i: &mut Inode) -> Result<()> {
        let mut o = self.rw()?.open.lock_orphans();
        if o.add(tx, i.ino)? {
            // The inode is written here on either path (the callers count
            // on it); its `i_dtime` stays as it is (no chain link).
            return tx.write_inode(i);
        }
        i.dtime = last_orphan(tx, &mut o)?;
        tx.write_inode_dtime(i)?;
        set_last_orphan(tx, &mut o, i.ino)?;
        o.chained(i.ino, i.dtime);
        Ok(())
    }

    /// Writes orphan `i`, keeping the orphan-list link its slot holds
    /// (another thread may have changed it by removing the next orphan).
    fn write_orphan_inode(&self, tx: &Tx, i: &mut Inode) -> Result<()> {
        let _o = self.rw()?.open.lock_orphans();
        i.dtime = crate::inode::read_inode(&self.vol, i.ino)?.dtime;
        tx.write_inode_dtime(i)
    }

    /// Deletes orphan `ino` (no links, on the orphan list, not open; its
    /// inode lock held or no other thread running): its blocks are freed
    /// in bounded handles, each leaving the inode on the list with fewer
    /// blocks, and the last one takes it off the list and frees it. A
    /// crash in between leaves an orphan that the next open deletes.
    pub(crate) fn delete_orphan(&self, ino: u32) -> Result<()> {
        self.rw()?.data.inode(ino).data.pages.invalidate_all();
        loop {
            let tx = self.begin(TRUNCATE_CREDITS)?;
            let mut i = crate::inode::read_inode(&self.vol, ino)?;
            // As in drop_last_link: the last step's block groups are
            // journaled with the inode's, one descriptor change for both.
            let released = tx.batch_groups(|| {
                if !(self.free_blocks_bounded(&tx, &mut i, FileBlock(0))? && Self::drop_ea_refs_bounded(&tx, &mut i)?) {
                    self.write_orphan_inode(&tx, &mut i)?;
                    return Ok(false);
                }
                self.orphan_remove(&tx, ino)?;
                i.dtime = 0;
                self.release_emptied_inode(&tx, &mut i)?;
                Ok(true)
            })?;
            tx.settle();
            if released {
                return Ok(());
            }
        }
    }

    /// Frees the blocks past `i_size` of inode `ino` (on the orphan list
    /// with links, as a truncate that did not fit in one handle left it)
    /// in bounded handles, then takes it off the list. `map` is taken
    /// for each step (after the handle: the data path's order). An
    /// unlinked open file (no links) stays on the list for its last close
    /// to delete (as ext4_truncate's orphan_del only with links).
    pub(crate) fn finish_truncate(&self, ino: u32, map: Option<&crate::locks::InlineLock>) -> Result<()> {
        let bs = self.vol.block_size as u64;
        loop {
            let tx = self.begin(TRUNCATE_CREDITS)?;
            let _m = map.map(|m| m.write());
            let mut i = crate::inode::read_inode(&self.vol, ino)?;
            let keep = FileBlock(i.size.div_ceil(bs));
            let done =
                if i.file_type()? == FileType::Regular { self.free_blocks_bounded(&tx, &mut i, keep)? } else { true };
            if done && i.links_count > 0 {
                self.orphan_remove(&tx, ino)?;
                i.dtime = 0;
                tx.write_inode_dtime(&mut i)?;
            } else {
                self.write_orphan_inode(&tx, &mut i)?;
            }
            tx.settle();
            if done {
                self.rw()?.txns.note_dirty(&[ino], tx.tid());
                return Ok(());
            }
        }
    }

    /// Takes inode `ino` off the orphan list (its orphan-file slot, or
    /// its link in the chain).
    pub(in crate::fs) fn orphan_remove(&self, tx: &Tx, ino: u32) -> Result<()> {
        let rw = self.rw()?;
        let mut o = rw.open.lock_orphans();
        if o.remove(tx, ino)? {
            return Ok(());
        }
        let next = crate::inode::read_inode(&self.vol, ino)?.dtime;
        // Chained by this mount: its predecessor is known (one update,
        // however long the chain: thousands of open O_TMPFILE or unlinked
        // files would otherwise make every last close walk them all).
        match o.unchained(ino, next) {
            Some(0) => return set_last_orphan(tx, &mut o, next),
            Some(prev) => return tx.set_inode_dtime(prev, next),
            None => {}
        }
        let mut cur = last_orphan(tx, &mut o)?;
        if cur == ino {
            return set_last_orphan(tx, &mut o, next);
        }
        for _ in 0..self.vol.sb.inodes_count {
            if cur == 0 {
                break;
            }
            let link = crate::inode::read_inode(&self.vol, cur)?.dtime;
            if link == ino {
                return tx.set_inode_dtime(cur, next);
            }
            cur = link;
        }
        Err(Error::corruption(
            crate::error::Structure::Inode,
            crate::error::Location::Inode(ino),
            crate::error::CorruptKind::Missing { what: "orphan list entry" },
        ))
    }

    /// Notes an open file handle on `ino` (FUSE open, or a library user
    /// that keeps using an inode after it may be unlinked).
    pub fn open_inode(&self, ino: u32) -> Result<()> {
        self.rw()?.open.open_ref(ino);
        Ok(())
    }

    /// Drops an open handle of `ino`; the last close of an unlinked inode
    /// deletes it. The close of a file truncated to zero while open writes
    /// its delayed data back (auto_da_alloc, see
    /// [`crate::data::DataPathConfig::auto_da_alloc`]).
    pub fn close_inode(&self, ino: u32) -> Result<()> {
        let rw = self.rw()?;
        let closed = rw.open.close_ref(ino);
        if closed.alloc && !closed.delete {
            self.writeback_inode(ino)?;
        }
        if !closed.delete {
            return Ok(());
        }
        self.delete_released(ino)
    }

    /// Deletes unlinked inode `ino` whose last handle or kernel reference
    /// was just dropped, unless decided otherwise under its lock.
    fn delete_released(&self, ino: u32) -> Result<()> {
        let rw = self.rw()?;
        let _l = rw.data.locks().lock_exclusive(&[], &[ino]);
        // Decided again under the lock unlink dooms it under: another
        // close or FORGET may have deleted it, or an open or a lookup
        // come in meanwhile.
        if !rw.open.take_doomed(ino) {
            return Ok(());
        }
        let r = self.delete_orphan(ino);
        // Wakes an allocation waiting for these blocks (fs/sync.rs).
        rw.open.deleted();
        r
    }

    /// Counts one more reference the FUSE kernel holds on `ino`: a reply
    /// that hands it the node (LOOKUP, CREATE, MKNOD, MKDIR, SYMLINK,
    /// LINK, TMPFILE, each READDIRPLUS entry) adds one, as the protocol's
    /// lookup count. While any is held, an unlinked `ino` stays on the
    /// orphan list, readable and writable through the kernel's node (an
    /// `O_PATH` descriptor reopened through /proc, a cached dentry), as
    /// ext4 keeps an unlinked inode until its last iput. Nothing to count
    /// on a read-only filesystem (nothing is unlinked there).
    ///
    /// True if the kernel held `ino` already (a revalidating LOOKUP): it
    /// cannot have been deleted since, so its attributes need no
    /// [`FsCore::stat_kept`] check (nor do a read-only filesystem's).
    pub fn kernel_ref(&self, ino: u32) -> bool {
        self.live().is_none_or(|rw| rw.open.kernel_ref(ino))
    }

    /// Drops `n` of the kernel's references to `ino` (FORGET,
    /// BATCH_FORGET): the last reference of an unlinked inode that is not
    /// open deletes it.
    pub fn kernel_forget(&self, ino: u32, n: u64) -> Result<()> {
        let Some(rw) = self.live() else { return Ok(()) };
        if rw.open.kernel_unref(ino, n) {
            self.delete_released(ino)?;
        }
        Ok(())
    }

    /// True while the kernel holds a reference to `ino` (its lookup
    /// count is not zero): after a FORGET, false means the kernel evicted
    /// its inode, and its cached pages with it. Always true on a
    /// read-only filesystem (nothing is counted there).
    pub fn kernel_holds(&self, ino: u32) -> bool {
        self.live().is_none_or(|rw| rw.open.kernel_refs(ino) > 0)
    }

    /// True (once per 4 MiB) when the kernel's FORGETs have shrunk the
    /// per-node reference counts enough that the front end should ask the
    /// allocator to return free memory to the system (glibc keeps what is
    /// freed inside its heap otherwise; a trim walks the heap, so it is
    /// asked for only this rarely).
    pub fn memory_released(&self) -> bool {
        self.live().is_some_and(|rw| rw.open.take_released())
    }

    /// Drops every reference of the kernel (its FUSE session ended) and
    /// deletes the unlinked inodes that only they kept.
    pub fn kernel_forget_all(&self) -> Result<()> {
        let Some(rw) = self.live() else { return Ok(()) };
        for ino in rw.open.kernel_unref_all() {
            self.delete_released(ino)?;
        }
        Ok(())
    }

    /// The attributes of `ino` for a reply handing its node to the kernel,
    /// taken after [`FsCore::kernel_ref`] counted that reference: an
    /// inode with no links that no reference or open kept (deleted before
    /// the reference was counted, its number perhaps free or reused) is
    /// gone (ENOENT), never handed out.
    pub fn stat_kept(&self, ino: u32) -> Result<Stat> {
        if let Some(rw) = self.live() {
            // Under the lock an unlink holds while it drops the last link
            // and decides: before it, the reference counted already makes
            // that unlink keep the inode; after it, the inode is kept or
            // gone. Without it, the inode could read as linked while an
            // unlink that did not see the reference deletes it. An inode
            // the lock table does not hold has no change under way (an
            // unlink holds the lock, which keeps it in the table), and any
            // unlink that starts later sees the reference: then no lock
            // is needed, and none is made (a walk looks up every file).
            let _s = rw.data.locks().lock_shared_if_held(ino);
            let i = crate::inode::read_inode(&self.vol, ino)?;
            if i.links_count == 0 && !rw.open.is_kept(ino) {
                return Err(Error::NotFound(format!("inode {ino} was deleted")));
            }
        }
        self.stat(ino)
    }

    /// Processes the orphan list left by a crash (called at read-write
    /// open, before anything else runs). Returns how many inodes it
    /// deleted and truncated.
    ///
    /// Each orphan is finished in its own bounded handles and taken off
    /// the list by the last of them (ext4_orphan_cleanup): however long
    /// the list and however large its files, no transaction outgrows the
    /// log, and a crash part-way leaves the rest of the list for the next
    /// open.
    pub(crate) fn orphan_cleanup(&self) -> Result<(u32, u32)> {
        let (mut deleted, mut truncated) = (0, 0);
        let mut seen = std::collections::HashSet::new();
        loop {
            let next = {
                let tx = self.begin(1)?;
                sb_last_orphan(&tx)?
            };
            if next == 0 {
                break;
            }
            if !seen.insert(next) || next > self.vol.sb.inodes_count || next < self.vol.sb.first_ino {
                return Err(Error::corruption(
                    crate::error::Structure::Inode,
                    crate::error::Location::Unknown,
                    crate::error::CorruptKind::Loop { what: "orphan list", at: u64::from(next) },
                ));
            }
            let i = crate::inode::read_inode(&self.vol, next)?;
            if i.links_count == 0 {
                self.delete_orphan(next)?;
                deleted += 1;
            } else {
                self.finish_truncate(next, None)?;
                truncated += 1;
            }
        }
        // Then the orphan file's slots, as the kernel does after the chain.
        let rw = self.rw()?;
        let entries = rw.open.lock_orphans().on_disk(&self.vol)?;
        for (ino, idx) in entries {
            rw.open.lock_orphans().adopt(ino, idx);
            let valid = ino >= self.vol.sb.first_ino && ino <= self.vol.sb.inodes_count && seen.insert(ino);
            let i = if valid { Some(crate::inode::read_inode(&self.vol, ino)?) } else { None };
            match i {
                // A slot naming no inode in use (a stale or repeated
                // entry) is only freed, as the kernel's cleanup skips it.
                Some(i) if i.mode != 0 && i.links_count == 0 => {
                    self.delete_orphan(ino)?;
                    deleted += 1;
                }
                Some(i) if i.mode != 0 => {
                    self.finish_truncate(ino, None)?;
                    truncated += 1;
                }
                _ => {
                    let tx = self.begin(1)?;
                    self.orphan_remove(&tx, ino)?;
                    tx.settle();
                }
            }
        }
        if deleted + truncated > 0 {
            self.commit()?;
        }
        Ok((deleted, truncated))
    }
}
