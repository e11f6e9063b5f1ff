//! Durability: fsync of one file, commit and sync of all, and the
//! retries of an allocation that failed while freed blocks waited for a
//! commit.

use crate::error::{Error, Result};
use crate::fs::{FsCore, MountOptions};
use std::time::{Duration, Instant};

/// What must be durable when an operation returns: the `sync` and
/// `dirsync` mount options ([`MountOptions::sync`], [`MountOptions::dirsync`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Durability {
    /// Every write, and every change of attributes and extended
    /// attributes (MS_SYNCHRONOUS: the kernel's `IS_SYNC` of every inode).
    sync: bool,
    /// Every change of the namespace (`IS_DIRSYNC`; `sync` implies it).
    dirsync: bool,
}

impl Durability {
    pub(crate) fn of(opts: &MountOptions) -> Durability {
        Durability { sync: opts.sync, dirsync: opts.dirsync || opts.sync }
    }
}

impl FsCore {
    /// Whether every write is synchronous (the `sync` mount option): a
    /// front end may treat every write as one that waits for the device.
    pub fn sync_writes(&self) -> bool {
        self.durability.sync
    }

    /// After a namespace change that succeeded, on a `dirsync` or `sync`
    /// mount: commits the transaction that last changed any of `inos`
    /// (the directories changed; the change noted them, see `note_tid`),
    /// so that the change is durable when the call returns, as ext4's
    /// synchronous handle makes it. The change itself is kept whatever
    /// the commit says: its error is the caller's, as ext4 returns it.
    pub(crate) fn namespace_synced<T>(&self, inos: &[u32], r: Result<T>) -> Result<T> {
        if r.is_ok() && self.durability.dirsync {
            self.commit_last_change(inos)?;
        }
        r
    }

    /// As [`FsCore::namespace_synced`], for a change of attributes, inode
    /// flags, extended attributes or allocation (fallocate) of `ino`:
    /// durable on return on a `sync` mount.
    pub(crate) fn attrs_synced<T>(&self, ino: u32, r: Result<T>) -> Result<T> {
        if r.is_ok() && self.durability.sync {
            self.commit_last_change(&[ino])?;
        }
        r
    }

    /// Commits the transaction that last changed any of `inos`, unless it
    /// has committed already.
    fn commit_last_change(&self, inos: &[u32]) -> Result<()> {
        let rw = self.rw()?;
        match inos.iter().filter_map(|&i| rw.txns.dirty_tid(i)).max() {
            Some(tid) => self.commit_tid(tid),
            None => Ok(()),
        }
    }

    /// fsync(2)/fdatasync(2): writes back the file's dirty data, then
    /// commits the transaction that last changed `ino` unless it has
    /// committed already (a device flush otherwise).
    ///
    /// EIO at once, before any device I/O, once the journal has aborted.
    /// A writeback error of the file that happened earlier (in the
    /// background, or in a flush of other files' data) and that no fsync
    /// of `ino` has reported yet is reported now, once; see
    /// [`FsCore::fsync_file`] for per-open-file reporting.
    pub fn fsync(&self, ino: u32) -> Result<()> {
        let rw = self.rw()?;
        let r = self.fsync_inner(ino);
        if r.is_err() {
            // The caller got it: the same error is not reported twice.
            rw.data.errors().advance_anon(ino);
            return r;
        }
        rw.data.errors().check_and_advance(ino, None)
    }

    /// [`FsCore::fsync`] without the report of earlier errors.
    pub(crate) fn fsync_inner(&self, ino: u32) -> Result<()> {
        let rw = self.rw()?;
        self.check_not_aborted_io()?;
        if rw.data.inode(ino).data.pages.is_dirty() {
            self.writeback_inode(ino)?;
        }
        self.write_atime(ino)?;
        match rw.txns.dirty_tid(ino) {
            Some(tid) => self.commit_tid(tid),
            None => Ok(self.vol.device().flush()?),
        }
    }

    /// Writes back dirty data, then commits the running transaction (if
    /// any) and waits for it: after this returns, every completed
    /// operation survives a crash.
    pub fn commit(&self) -> Result<()> {
        // The metadata is committed even if some writeback failed: it
        // frees what the failed data may need (blocks freed by the
        // running transaction), and the error is still reported.
        let written = self.writeback_all().and(self.write_atimes(std::time::Duration::ZERO));
        self.commit_journal()?;
        written
    }

    /// Commits the running transaction without writing back dirty data.
    pub(crate) fn commit_journal(&self) -> Result<()> {
        self.rw()?.txns.commit(&self.vol)
    }

    /// Commits transaction `tid` if it has not been committed yet (fsync
    /// of a file last changed in `tid`).
    pub fn commit_tid(&self, tid: u64) -> Result<()> {
        self.rw()?.txns.commit_upto(&self.vol, tid)
    }

    /// sync(2): commits and checkpoints, so the image is complete without
    /// its journal.
    pub fn sync(&self) -> Result<()> {
        // As commit: a writeback error does not keep the metadata back.
        let written = self.writeback_all().and(self.write_atimes(std::time::Duration::ZERO));
        self.rw()?.txns.sync(&self.vol)?;
        written
    }

    /// Runs `op` again (at most 3 times) when it fails with ENOSPC while
    /// blocks freed by uncommitted transactions wait: a commit makes them
    /// allocatable (the kernel's `ext4_should_retry_alloc`), or while
    /// unlinked inodes that only the kernel still holds are about to be
    /// deleted by its FORGET (see [`FsCore::can_retry_alloc`]). For
    /// operations that leave nothing behind when they fail. Called with
    /// no lock held.
    pub(crate) fn retry_nospc<T>(&self, mut op: impl FnMut() -> Result<T>) -> Result<T> {
        let mut forgets = self.forget_wait();
        let mut r = op();
        for _ in 0..3 {
            if !matches!(r, Err(Error::NoSpace(_))) || !self.can_retry_alloc(forgets.as_mut()) {
                break;
            }
            r = op();
        }
        r
    }

    /// A write that comes back short or with ENOSPC goes on from where it
    /// stopped after a commit, as long as freed blocks are waiting for one
    /// (see [`FsCore::retry_nospc`]). `wait_forget`: the caller holds no
    /// lock, and may wait for the deletions of inodes the kernel is about
    /// to forget (not writeback, which holds the inode's I/O lock).
    pub(crate) fn write_retrying(
        &self,
        offset: u64,
        data: &[u8],
        wait_forget: bool,
        mut op: impl FnMut(u64, &[u8]) -> Result<usize>,
    ) -> Result<usize> {
        let mut forgets = if wait_forget { self.forget_wait() } else { None };
        let mut done = 0usize;
        let mut retries = 0;
        loop {
            let err = match op(offset + done as u64, &data[done..]) {
                Ok(n) => {
                    done += n;
                    if done == data.len() {
                        return Ok(done);
                    }
                    None // short: the disk filled part-way
                }
                Err(e) => Some(e),
            };
            let nospc = err.as_ref().is_none_or(|e| matches!(e, Error::NoSpace(_)));
            if !nospc || retries >= 3 || !self.can_retry_alloc(forgets.as_mut()) {
                return match err {
                    Some(e) if done == 0 => Err(e),
                    _ => Ok(done),
                };
            }
            retries += 1;
        }
    }

    /// The mark and the deadline of an allocation's wait for deletions
    /// (see [`FsCore::can_retry_alloc`]), taken before it first tries.
    fn forget_wait(&self) -> Option<ForgetWait> {
        let since = self.live()?.open.deletions();
        Some(ForgetWait { since, deadline: Instant::now() + FORGET_WAIT })
    }

    /// After an allocation failed with ENOSPC: commits if blocks freed by
    /// uncommitted transactions are waiting; true if that may have made
    /// space. Without such blocks, and with a `wait`, true as well if an
    /// unlinked inode was deleted since the allocation began, and
    /// otherwise it first waits (at most until the deadline) for the
    /// deletion of one that only the kernel's references kept: `rm`
    /// returns when the name is gone, but the inode is deleted at the
    /// kernel's FORGET, which comes asynchronously and may be served after
    /// the caller's next request, so that an allocation right after `rm`
    /// of a big file would find the disk still full (ext4 frees before
    /// unlink(2) returns).
    fn can_retry_alloc(&self, wait: Option<&mut ForgetWait>) -> bool {
        let mut pending = self.alloc.get().is_some_and(|a| a.has_pending_frees());
        if let (Some(w), Some(rw)) = (wait, self.live()) {
            // Moves the mark on in any case: a deletion that ended before
            // this commit is not waited for again.
            let deleted = if pending {
                rw.open.wait_deleted(&mut w.since, Instant::now())
            } else {
                rw.open.wait_deleted(&mut w.since, w.deadline)
            };
            pending |= deleted;
        }
        pending && self.commit_journal().is_ok()
    }
}

/// See [`FsCore::can_retry_alloc`].
struct ForgetWait {
    /// [`super::open_files::OpenFiles::deletions`] when last looked at.
    since: u64,
    /// When the allocation stops waiting.
    deadline: Instant,
}

/// How long an allocation that failed with ENOSPC waits in all for the
/// deletions of unlinked inodes the kernel is about to forget (bounded:
/// an `O_PATH` descriptor may hold one for ever).
const FORGET_WAIT: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    /// What is not synced is lost to a crash for no longer than on ext4:
    /// metadata commits every 5 s (`commit=5`), dirty data is written
    /// back once 30 s old (`dirty_expire_centisecs`), looked for every
    /// 5 s (`dirty_writeback_centisecs`), and committed by the next
    /// periodic commit.
    #[test]
    fn unsynced_windows_are_ext4s() {
        let o = MountOptions::default();
        assert_eq!(o.commit_interval, Duration::from_secs(5));
        assert_eq!(o.data.dirty_expire, Duration::from_secs(30));
        assert_eq!(o.data.writeback_interval, Duration::from_secs(5));
        assert!(!o.sync && !o.dirsync);
        let d = Durability::of(&MountOptions { sync: true, ..Default::default() });
        assert!(d.sync && d.dirsync, "sync implies dirsync");
    }
}
