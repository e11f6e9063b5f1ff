//! Error ownership: per-file writeback errors (Linux's errseq), device
//! flush windows, and the superblock's error record (ext4_error; the
//! superblock write itself is `superblock.rs`'s).
//!
//! # Writeback errors
//! A failed writeback of a file, or a failed device flush while data of
//! the file was written and not yet covered by a successful flush, is
//! recorded on the file ([`WbErrors::record`]): a sequence number that
//! moves on at every error. Whoever syncs the file keeps a cursor (an open
//! file description's sample, [`crate::Filesystem::fsync_file`]; plain
//! [`crate::Filesystem::fsync`] uses one cursor per inode) and sees each
//! error once: every description that existed when the error happened
//! gets EIO from its next fsync, whoever ran the writeback or the flush
//! that failed. An error no cursor has seen yet is also reported to
//! descriptions opened after it (Linux since 4.16), so an error that
//! happens while the file is closed is not lost.
//!
//! # Flush windows
//! The filesystem's device is wrapped in a [`TrackedDevice`]: data paths
//! note each inode whose data they wrote ([`WbErrors::note_written`]),
//! and every flush takes the set noted so far (those writes completed
//! before the flush began, so it covers them). A flush that fails marks
//! every file of its set. Flushes are serialized so that a later
//! successful flush never reports a file whose data an earlier one lost.

use super::superblock::save_error_info;
use super::FsCore;
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::int_hash::{IntMap, IntSet};
use parking_lot::Mutex;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const SHARDS: usize = 16;

/// This thread's shard of [`WbErrors::unflushed`] (threads are spread
/// over the shards in the order they first write).
fn writer_shard() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    SHARD.with(|s| *s)
}

/// One file's writeback error state (Linux's `mapping->wb_err`).
#[derive(Debug, Clone)]
struct FileErr {
    /// Moves on at every error; 0 = none ever.
    seq: u64,
    /// errno of the latest error.
    errno: i32,
    /// What failed, for the message.
    what: String,
    /// Some cursor has reported `seq` (Linux's ERRSEQ_SEEN).
    seen: bool,
    /// The cursor of plain `fsync(ino)`.
    anon: u64,
}

/// One shard of [`WbErrors::unflushed`].
#[derive(Debug, Default)]
struct Shard {
    inodes: Mutex<IntSet<u32>>,
    /// How many `inodes` holds, changed under its lock: a deletion
    /// ([`WbErrors::forget`]) looks at this, not the lock, of each shard,
    /// and between flushes nearly all are empty.
    len: AtomicUsize,
}

/// Per-file writeback errors and the device's flush windows.
#[derive(Debug)]
pub(crate) struct WbErrors {
    /// Inodes whose data reached the device since the current flush
    /// window began.
    unflushed: Vec<Shard>,
    /// One flush at a time (see the module docs).
    flush_lock: Mutex<()>,
    files: Mutex<IntMap<u32, FileErr>>,
    /// Shard locks [`WbErrors::forget`] took (for tests).
    #[cfg(test)]
    forget_locks: AtomicUsize,
}

impl Default for WbErrors {
    fn default() -> Self {
        WbErrors {
            unflushed: (0..SHARDS).map(|_| Shard::default()).collect(),
            flush_lock: Mutex::new(()),
            files: Mutex::new(IntMap::default()),
            #[cfg(test)]
            forget_locks: AtomicUsize::new(0),
        }
    }
}

impl WbErrors {
    /// Data of `ino` has been written to the device (call after the write
    /// returns, whether it failed or not: part of it may have landed).
    pub(crate) fn note_written(&self, ino: u32) {
        // Sharded by thread, not by inode: threads writing one file (the
        // seeds' shared-lock direct overwrites) must not meet on one lock
        // for every write. A flush drains every shard.
        let shard = &self.unflushed[writer_shard()];
        let mut set = shard.inodes.lock();
        if set.insert(ino) {
            shard.len.store(set.len(), Ordering::Release);
        }
    }

    /// Records a writeback error on `ino`.
    pub(crate) fn record(&self, ino: u32, e: &Error) {
        let errno = if matches!(e, Error::NoSpace(_)) { libc::ENOSPC } else { libc::EIO };
        let mut m = self.files.lock();
        let f = m.entry(ino).or_insert(FileErr { seq: 0, errno, what: String::new(), seen: false, anon: 0 });
        f.seq += 1;
        f.errno = errno;
        f.what = e.to_string();
        f.seen = false;
    }

    /// A new cursor for `ino` (Linux's errseq_sample at open): errors
    /// before now are not reported to it, unless nobody has seen the
    /// latest one yet.
    pub(crate) fn sample(&self, ino: u32) -> u64 {
        match self.files.lock().get(&ino) {
            Some(f) if f.seen => f.seq,
            Some(f) => f.seq - 1,
            None => 0,
        }
    }

    /// Reports the error of `ino` newer than `cursor` once, moving the
    /// cursor on (Linux's file_check_and_advance_wb_err). `None` uses the
    /// inode's own cursor (plain fsync).
    pub(crate) fn check_and_advance(&self, ino: u32, cursor: Option<&mut u64>) -> Result<()> {
        let mut m = self.files.lock();
        let Some(f) = m.get_mut(&ino) else { return Ok(()) };
        let cur = match cursor {
            Some(c) => c,
            None => &mut f.anon,
        };
        if *cur >= f.seq {
            return Ok(());
        }
        *cur = f.seq;
        f.seen = true;
        let msg = format!("an earlier writeback of inode {ino} failed: {}", f.what);
        Err(if f.errno == libc::ENOSPC { Error::NoSpace(msg) } else { Error::Io(io::Error::other(msg)) })
    }

    /// Marks that the cursor of plain fsync has seen everything (a caller
    /// that got the error directly).
    pub(crate) fn advance_anon(&self, ino: u32) {
        if let Some(f) = self.files.lock().get_mut(&ino) {
            f.anon = f.seq;
            f.seen = true;
        }
    }

    /// Forgets a deleted inode (its number may be reused). Only shards
    /// holding some inode are locked: every deletion would otherwise take
    /// all of them. A shard read as empty had no entry of `ino` from a
    /// write that finished before this call (its count is set under the
    /// lock, after the insert); a write racing with the deletion may land
    /// either side, as it may with the lock.
    pub(crate) fn forget(&self, ino: u32) {
        self.files.lock().remove(&ino);
        for shard in &self.unflushed {
            if shard.len.load(Ordering::Acquire) == 0 {
                continue;
            }
            #[cfg(test)]
            self.forget_locks.fetch_add(1, Ordering::Relaxed);
            let mut set = shard.inodes.lock();
            if set.remove(&ino) {
                shard.len.store(set.len(), Ordering::Release);
            }
        }
    }

    /// Runs `flush` as the end of the current window: on failure every
    /// file written in the window gets the error.
    fn flush_window(&self, flush: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let _f = self.flush_lock.lock();
        let mut window = Vec::new();
        for s in &self.unflushed {
            let mut set = s.inodes.lock();
            window.extend(set.drain());
            s.len.store(0, Ordering::Release);
        }
        let r = flush();
        if let Err(e) = &r {
            let err = Error::Io(io::Error::other(format!("device flush failed: {e}")));
            for ino in window {
                self.record(ino, &err);
            }
        }
        r
    }
}

/// The device of a filesystem opened read-write: every flush goes
/// through [`WbErrors`] so a failed flush reaches the files it lost.
pub(crate) struct TrackedDevice {
    inner: Arc<dyn BlockDevice>,
    errs: Arc<WbErrors>,
}

impl TrackedDevice {
    pub(crate) fn new(inner: Arc<dyn BlockDevice>, errs: Arc<WbErrors>) -> TrackedDevice {
        TrackedDevice { inner, errs }
    }
}

impl BlockDevice for TrackedDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.errs.flush_window(|| self.inner.flush())
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_only(&self) -> bool {
        self.inner.read_only()
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.discard(offset, len)
    }
}

impl FsCore {
    /// Records a filesystem error in the superblock's error fields
    /// (`s_error_count`, `s_first_error_*`, `s_last_error_*`, and the
    /// "errors" state bit), as the kernel's `ext4_error` does, so that
    /// e2fsck, dumpe2fs and `uext4 info` show it. `func` names the
    /// operation; `ino` is the inode involved (0 if none), unless `e`
    /// names its own (corruption or a checksum failure in or under an
    /// inode, as the kernel's ext4_error_inode records it). Written
    /// through the journal while it works (so no later checkpoint writes
    /// an older superblock over it), else straight to the device.
    ///
    /// After a journal abort only corruption is recorded: the abort itself
    /// was (by the abort hook), and the EIO every later fsync answers is
    /// its echo, which must not cost device I/O each time.
    pub fn record_error(&self, e: &Error, ino: u32, func: &str) -> Result<()> {
        let rw = self.rw()?;
        let aborted = rw.txns.aborted().is_some();
        if aborted && !matches!(e, Error::Corrupt { .. } | Error::Checksum { .. }) {
            return Ok(());
        }
        let block = e.block().unwrap_or(0);
        // The inode the error names (a bad inode checksum met by a lookup
        // is the child's, not the directory's), else the caller's.
        let ino = e.ino().unwrap_or(ino);
        // Journaled, then committed at once (ext4's flush_stashed_error_work).
        let vol = &self.vol;
        let journaled = rw.txns.change_and_commit(|h| {
            h.modify(vol.sb_location().0, |b| {
                super::superblock::modify_sb_in_block(vol, b, |sb| save_error_info(sb, e, ino, block, func, 0))
            })
        });
        if let Some(r) = journaled {
            return r;
        }
        super::superblock::save_error_direct(&self.vol, e, ino, block, func)
    }

    /// Filesystem errors found and worked around without failing the
    /// operation that met them (so far: inode groups whose bitmap is
    /// corrupt, recorded in the superblock, their allocation moved to
    /// another group). A front end applies its `errors=` policy
    /// when this number grows, as it does for an operation's corruption
    /// error.
    pub fn detected_errors(&self) -> u64 {
        self.live().map_or(0, |rw| u64::from(rw.ialloc.corrupt_groups()))
    }

    /// The journal failed: every change is refused (EROFS) from now on.
    pub(crate) fn check_not_aborted(&self) -> Result<()> {
        if let Some(why) = self.rw()?.txns.aborted() {
            if why.starts_with(super::transactions::SHUTDOWN_WHY) {
                // FS_IOC_SHUTDOWN: EIO, as ext4 answers once shut down.
                return Err(Error::Io(io::Error::from_raw_os_error(libc::EIO)));
            }
            return Err(Error::ReadOnly(format!("the journal has aborted ({why}); no change is accepted")));
        }
        Ok(())
    }

    /// The journal failed: fsync and writeback answer EIO before any I/O.
    pub(crate) fn check_not_aborted_io(&self) -> Result<()> {
        if let Some(why) = self.rw()?.txns.aborted() {
            return Err(Error::Io(io::Error::other(format!("the journal has aborted: {why}"))));
        }
        Ok(())
    }

    /// A cursor over `ino`'s writeback errors for a new open file
    /// description (Linux's `f_wb_err`, sampled at open): pass it to
    /// [`FsCore::fsync_file`].
    pub fn wb_err_sample(&self, ino: u32) -> u64 {
        self.live().map_or(0, |rw| rw.data.errors().sample(ino))
    }

    /// fsync(2) through an open file description whose error cursor is
    /// `cursor` (from [`FsCore::wb_err_sample`]): as [`FsCore::fsync`],
    /// but each writeback error of the file is reported once to every
    /// description, whoever met it first.
    pub fn fsync_file(&self, ino: u32, cursor: &mut u64) -> Result<()> {
        let rw = self.rw()?;
        let r = self.fsync_inner(ino);
        let seen = rw.data.errors().check_and_advance(ino, Some(cursor));
        r.and(seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forget_locks_only_shards_that_hold_inodes_and_a_forgotten_inode_gets_no_flush_error() {
        let e = WbErrors::default();
        // Nothing written since the last flush: a deletion takes no shard lock.
        e.forget(9);
        assert_eq!(e.forget_locks.load(Ordering::Relaxed), 0);
        e.note_written(5);
        e.note_written(6);
        e.forget(7);
        assert_eq!(e.forget_locks.load(Ordering::Relaxed), 1, "only this thread's shard holds inodes");
        e.forget(5);
        // A failed flush marks what its window wrote, not the deleted inode
        // (whose number a new file may have by then).
        let r = e.flush_window(|| Err(io::Error::other("injected")));
        assert!(r.is_err());
        assert!(e.check_and_advance(5, None).is_ok(), "the deleted inode's entry went with it");
        assert!(e.check_and_advance(6, None).is_err(), "the file still written in the window gets the error");
        // The drain emptied every shard: no lock again.
        e.forget(6);
        assert_eq!(e.forget_locks.load(Ordering::Relaxed), 2);
    }
}
