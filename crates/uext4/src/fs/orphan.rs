//! The orphan list: inodes unlinked while open, and truncates in
//! progress, chained from `s_last_orphan` through `i_dtime`. After a
//! crash the list says what to finish: delete the inodes with no links,
//! cut the others back to their `i_size` (the kernel's
//! ext4_orphan_cleanup).

use super::FsCore;
use crate::error::{Error, Result};
use crate::format::inode::{FileType, Inode, FL_EXTENTS};
use crate::format::superblock::{SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use crate::inode::extent_write as ew;
use crate::txn::Tx;

/// `s_last_orphan`.
const S_LAST_ORPHAN: usize = 0xE8;

/// Sets `s_last_orphan` through the transaction.
pub(crate) fn set_last_orphan(tx: &Tx, ino: u32) -> Result<()> {
    let bs = tx.vol.block_size as u64;
    let blk = SUPERBLOCK_OFFSET / bs;
    let off = (SUPERBLOCK_OFFSET % bs) as usize;
    let csum = tx.vol.sb.has_metadata_csum();
    tx.modify(blk, |b| {
        let raw = &mut b[off..off + SUPERBLOCK_SIZE];
        raw[S_LAST_ORPHAN..S_LAST_ORPHAN + 4].copy_from_slice(&ino.to_le_bytes());
        if csum {
            let c = crate::format::checksum::crc32c(!0, &raw[..0x3FC]);
            raw[0x3FC..0x400].copy_from_slice(&c.to_le_bytes());
        }
        Ok(())
    })
}

/// `s_last_orphan` as the transaction sees it.
fn last_orphan(tx: &Tx) -> Result<u32> {
    let bs = tx.vol.block_size as u64;
    let b = tx.vol.block(SUPERBLOCK_OFFSET / bs)?;
    let off = (SUPERBLOCK_OFFSET % bs) as usize + S_LAST_ORPHAN;
    let d = b.data();
    Ok(u32::from_le_bytes([d[off], d[off + 1], d[off + 2], d[off + 3]]))
}

impl FsCore {
    /// The last link of `i` is gone (its new count is already 0): delete
    /// it now, or, while it is open, put it on the orphan list so that a
    /// crash before the last close still frees it.
    pub(crate) fn drop_last_link(&self, tx: &Tx, i: &mut Inode) -> Result<()> {
        let rw = self.rw()?;
        if !rw.doom_if_open(i.ino) {
            return self.release_inode(tx, i);
        }
        // Its last close waits for the I/O lock the caller holds, so the
        // orphan entry is there before that close takes it off again.
        let _o = rw.orphan_lock.lock();
        i.dtime = last_orphan(tx)?;
        tx.write_inode_dtime(i)?;
        set_last_orphan(tx, i.ino)?;
        Ok(())
    }

    /// Takes inode `ino` off the orphan list.
    fn orphan_remove(&self, tx: &Tx, ino: u32) -> Result<()> {
        let rw = self.rw()?;
        let _o = rw.orphan_lock.lock();
        let next = crate::inode::read_inode(&self.vol, ino)?.dtime;
        let mut cur = last_orphan(tx)?;
        if cur == ino {
            return set_last_orphan(tx, next);
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
        Err(Error::corrupt(crate::error::Structure::Inode, 0, format!("inode {ino} missing from the orphan list")))
    }

    /// Notes an open file handle on `ino` (FUSE open, or a library user
    /// that keeps using an inode after it may be unlinked).
    pub fn open_inode(&self, ino: u32) -> Result<()> {
        self.rw()?.open_ref(ino);
        Ok(())
    }

    /// Drops an open handle of `ino`; the last close of an unlinked inode
    /// deletes it. The close of a file truncated to zero while open writes
    /// its delayed data back (auto_da_alloc, see
    /// [`crate::data::DataPathConfig::auto_da_alloc`]).
    pub fn close_inode(&self, ino: u32) -> Result<()> {
        let rw = self.rw()?;
        let closed = rw.close_ref(ino);
        if closed.alloc && !closed.delete {
            self.writeback_inode(ino)?;
        }
        if !closed.delete {
            return Ok(());
        }
        let _l = rw.locks.lock_exclusive(&[], &[ino]);
        // Decided again under the lock unlink dooms it under: another
        // close may have deleted it, or an open come in meanwhile.
        if !rw.take_doomed(ino) {
            return Ok(());
        }
        let tx = self.begin(64)?;
        self.orphan_remove(&tx, ino)?;
        let mut i = crate::inode::read_inode(&self.vol, ino)?;
        i.dtime = 0;
        self.release_inode(&tx, &mut i)
    }

    /// Processes the orphan list left by a crash (called at read-write
    /// open, before anything else runs). Returns how many inodes it
    /// deleted and truncated.
    pub(crate) fn orphan_cleanup(&self) -> Result<(u32, u32)> {
        let mut next = self.read_superblock()?.last_orphan;
        if next == 0 {
            return Ok((0, 0));
        }
        let (mut deleted, mut truncated) = (0, 0);
        let mut seen = std::collections::HashSet::new();
        let tx = self.begin(256)?;
        while next != 0 {
            if !seen.insert(next) || next > self.vol.sb.inodes_count || next < self.vol.sb.first_ino {
                return Err(Error::corrupt(
                    crate::error::Structure::Inode,
                    0,
                    format!("orphan list loops or points at inode {next}"),
                ));
            }
            let mut i = crate::inode::read_inode(&self.vol, next)?;
            let following = i.dtime;
            i.dtime = 0;
            if i.links_count == 0 {
                self.release_inode(&tx, &mut i)?;
                deleted += 1;
            } else {
                if i.file_type()? == FileType::Regular && i.flags & FL_EXTENTS != 0 {
                    let bs = self.vol.block_size as u64;
                    let keep = i.size.div_ceil(bs);
                    ew::remove_range(&tx, &mut i, keep, u64::MAX)?;
                }
                tx.write_inode(&mut i)?;
                truncated += 1;
            }
            next = following;
        }
        set_last_orphan(&tx, 0)?;
        drop(tx);
        self.commit()?;
        Ok((deleted, truncated))
    }
}
