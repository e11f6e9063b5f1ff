//! Journal control of a filesystem opened read-write: the journal writer,
//! the periodic commit, which transaction last changed each inode (what
//! an fsync must wait for), and the MMP claim whose loss stops all
//! changes.
//!
//! Everything else reaches the journal through this subsystem: it starts
//! handles ([`Transactions::start_handle`]), commits
//! ([`Transactions::commit`], [`Transactions::commit_upto`],
//! [`Transactions::sync`]) and says whether the journal aborted. Without
//! a journal, handles write through and a commit is a device flush.

use super::superblock::{
    mark_journal_clean, mark_mounted, mark_unjournaled_clean, save_error_direct, write_super_counts,
};
use crate::alloc::inodes::InodeAllocator;
use crate::alloc::Allocator;
use crate::error::{Error, Result};
use crate::int_hash::IntMap;
use crate::journal::{Handle, Journal, JournalWriter};
use crate::lock_order::{self, Class, Held};
use crate::volume::Volume;
use parking_lot::{Condvar, Mutex};
use std::sync::{Arc, Weak};
use std::time::Duration;

const DIRTY_SHARDS: usize = 64;
/// Entries of a shard of [`Transactions::note_dirty`]'s table before the
/// first sweep of the committed ones.
const DIRTY_SWEEP_MIN: usize = 1024;

/// One shard of the inodes changed in transactions that may not be
/// committed yet: inode -> the last such transaction.
#[derive(Debug)]
struct DirtyShard {
    map: IntMap<u32, u64>,
    /// The size past which the next addition first drops the entries of
    /// committed transactions.
    sweep_at: usize,
    /// Entries those sweeps looked at (for tests: the work must stay
    /// proportional to what is added).
    swept: usize,
}

impl Default for DirtyShard {
    fn default() -> Self {
        DirtyShard { map: IntMap::default(), sweep_at: DIRTY_SWEEP_MIN, swept: 0 }
    }
}

/// The journal writer and what goes with it.
pub(crate) struct Transactions {
    /// None on a filesystem without a journal (handles write through).
    journal: Option<Arc<JournalWriter>>,
    committer: Mutex<Option<Committer>>,
    /// Transaction that last changed each inode (fsync commits only
    /// when that one has not committed yet).
    dirty: Vec<Mutex<DirtyShard>>,
    /// Operations may use the blocks reserved for root.
    use_reserved: bool,
    /// The claim on an `mmp` filesystem (marked clean at shutdown).
    mmp: Mutex<Option<super::mmp::MmpGuard>>,
    /// Set when another node took the MMP block over: changes are refused.
    mmp_lost: Option<Arc<std::sync::OnceLock<String>>>,
    /// The superblock said "clean" at mount (without a journal, the
    /// unmount marks it clean only then).
    mounted_clean: bool,
}

impl std::fmt::Debug for Transactions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transactions").field("journal", &self.journal.is_some()).finish_non_exhaustive()
    }
}

/// The periodic-commit thread (jbd2's kjournald2 timer).
struct Committer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Committer {
    fn drop(&mut self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Transactions {
    /// Opens the journal of `vol` (recovery already done), marks the
    /// superblock in use (mounted at `now`), and starts the journal writer and its periodic
    /// commit every `commit_interval`.
    pub(crate) fn start(
        vol: &Arc<Volume>,
        alloc: &Arc<Allocator>,
        ialloc: &Arc<InodeAllocator>,
        commit_interval: Duration,
        use_reserved: bool,
        mmp: Option<super::mmp::MmpGuard>,
        now: u32,
    ) -> Result<Transactions> {
        let log = Journal::open(vol)?;
        let mounted_clean = mark_mounted(vol, log.is_some(), now)?;
        // The log goes live (journal superblock s_start != 0) only once
        // the superblock says it needs recovery: a crash in between
        // leaves an empty log to "recover", never a live log the
        // superblock does not mention (which e2fsck would have to fix).
        let journal = match log {
            Some(j) => Some(JournalWriter::start(vol.device().clone(), vol.cache.clone(), j)?),
            None => None,
        };
        let mut committer = None;
        if let Some(j) = &journal {
            let (a, ia, v) = (Arc::downgrade(alloc), Arc::downgrade(ialloc), Arc::downgrade(vol));
            let a2 = Arc::downgrade(alloc);
            j.set_hooks(
                Box::new(move |h: &Handle| {
                    let (Some(a), Some(ia), Some(v)) = (a.upgrade(), ia.upgrade(), v.upgrade()) else {
                        return Ok(());
                    };
                    write_super_counts(&v, h, a.free_blocks(), ia.free_inodes())
                }),
                Box::new(move |tid| {
                    if let Some(a) = a2.upgrade() {
                        a.commit_frees(tid);
                    }
                }),
            );
            let v2 = Arc::downgrade(vol);
            j.set_abort_hook(Box::new(move |why| {
                // ext4_abort: the error goes in the superblock, written
                // directly since the journal will write nothing more. A
                // dead disk may refuse this too; the abort stands anyway.
                // A shutdown is asked for, not an error (ext4's -ESHUTDOWN).
                if why.starts_with(SHUTDOWN_WHY) {
                    return;
                }
                if let Some(v) = v2.upgrade() {
                    let e = Error::Io(std::io::Error::other(why.to_string()));
                    let _ = save_error_direct(&v, &e, 0, 0, "jbd2_journal_abort");
                }
            }));
            committer = Some(spawn_committer(Arc::downgrade(j), commit_interval));
        }
        Ok(Transactions {
            journal,
            committer: Mutex::new(committer),
            dirty: (0..DIRTY_SHARDS).map(|_| Mutex::new(DirtyShard::default())).collect(),
            use_reserved,
            mmp_lost: mmp.as_ref().map(|m| m.lost()),
            mmp: Mutex::new(mmp),
            mounted_clean,
        })
    }

    /// Journal control for fast-commit replay on a journaled filesystem
    /// whose journal still needs recovery: no journal writer, handles
    /// write through (the kernel's replay writes in place too), the
    /// superblock not marked mounted.
    pub(crate) fn unjournaled() -> Transactions {
        Transactions {
            journal: None,
            committer: Mutex::new(None),
            dirty: (0..DIRTY_SHARDS).map(|_| Mutex::new(DirtyShard::default())).collect(),
            use_reserved: true,
            mmp_lost: None,
            mmp: Mutex::new(None),
            mounted_clean: true,
        }
    }

    /// Operations may allocate the blocks reserved for root and pass
    /// quota limits: all of them (`use_reserved`), or this thread's
    /// while it holds a [`super::SysResourceScope`].
    pub(crate) fn use_reserved(&self) -> bool {
        self.use_reserved || super::caller::has_sys_resource()
    }

    /// Starts a handle for about `credits` metadata blocks, with its place
    /// in the lock order. Refused once another node took the MMP block.
    pub(crate) fn start_handle(&self, vol: &Volume, credits: usize) -> Result<(Held, Handle)> {
        // Checked before waiting: a handle may wait for a commit.
        let order = lock_order::acquire(Class::Handle, 0);
        let handle = match &self.journal {
            // After FS_IOC_SHUTDOWN every change fails with EIO, as on ext4
            // (an abort for an error answers EROFS).
            Some(j) if j.aborted().is_some_and(|w| w.starts_with(SHUTDOWN_WHY)) => {
                return Err(Error::Io(std::io::Error::from_raw_os_error(libc::EIO)));
            }
            Some(j) => j.start_handle(credits)?,
            None => Handle::direct(vol.cache.clone()),
        };
        Ok((order, handle))
    }

    /// Fails (EROFS) once another node took the MMP block over.
    pub(crate) fn check_mmp(&self) -> Result<()> {
        if let Some(why) = self.mmp_lost.as_ref().and_then(|l| l.get()) {
            return Err(Error::ReadOnly(why.clone()));
        }
        Ok(())
    }

    /// Aborts the journal (see [`SHUTDOWN_WHY`]); false without one.
    pub(crate) fn abort(&self, why: &str) -> bool {
        match &self.journal {
            Some(j) => {
                j.abort(why);
                true
            }
            None => false,
        }
    }

    /// Why the journal aborted, if it did.
    pub(crate) fn aborted(&self) -> Option<String> {
        self.journal.as_ref().and_then(|j| j.aborted())
    }

    /// Runs `f` in a handle of one credit and commits at once (ext4's
    /// flush_stashed_error_work); None without a working journal.
    pub(crate) fn change_and_commit(&self, f: impl FnOnce(&Handle) -> Result<()>) -> Option<Result<()>> {
        let j = self.journal.as_ref().filter(|j| j.aborted().is_none())?;
        Some((|| {
            let h = j.start_handle(1)?;
            f(&h)?;
            drop(h);
            j.commit()
        })())
    }

    /// Records that `inos` were changed in transaction `tid`.
    pub(crate) fn note_dirty(&self, inos: &[u32], tid: u64) {
        if tid == 0 {
            return;
        }
        let committed = self.journal.as_ref().map_or(0, |j| j.committed_tid());
        for &ino in inos.iter().filter(|&&i| i != 0) {
            let mut s = self.dirty[ino as usize % DIRTY_SHARDS].lock();
            if s.map.len() > s.sweep_at {
                s.swept += s.map.len();
                s.map.retain(|_, t| *t > committed);
                // The next sweep waits for as many additions as entries
                // stayed: when most are of the running transaction (a
                // hundred thousand creates between two commits), sweeping
                // at every addition would cost the whole shard each.
                s.sweep_at = (2 * s.map.len()).max(DIRTY_SWEEP_MIN);
            }
            s.map.insert(ino, tid);
        }
    }

    /// The transaction that last changed `ino`, if it may be uncommitted.
    pub(crate) fn dirty_tid(&self, ino: u32) -> Option<u64> {
        let committed = self.journal.as_ref()?.committed_tid();
        self.dirty[ino as usize % DIRTY_SHARDS].lock().map.get(&ino).copied().filter(|&t| t > committed)
    }

    /// Commits the running transaction and waits for it (a device flush
    /// without a journal).
    pub(crate) fn commit(&self, vol: &Volume) -> Result<()> {
        match &self.journal {
            Some(j) => j.commit(),
            None => Ok(vol.device().flush()?),
        }
    }

    /// Commits transaction `tid` if it has not been committed yet.
    pub(crate) fn commit_upto(&self, vol: &Volume, tid: u64) -> Result<()> {
        match &self.journal {
            Some(j) => j.commit_upto(tid),
            None => Ok(vol.device().flush()?),
        }
    }

    /// Commits and checkpoints, so the image is complete without its
    /// journal.
    pub(crate) fn sync(&self, vol: &Volume) -> Result<()> {
        match &self.journal {
            Some(j) => j.sync(),
            None => Ok(vol.device().flush()?),
        }
    }

    /// Stops the periodic commit, empties the log and marks the
    /// filesystem clean (then releases the MMP claim).
    ///
    /// `orphans_empty`: the orphan file holds no entry (its "present"
    /// flag is cleared with the clean mark).
    pub(crate) fn shutdown(
        &self,
        vol: &Volume,
        alloc: &Allocator,
        ialloc: &InodeAllocator,
        orphans_empty: bool,
    ) -> Result<()> {
        *self.committer.lock() = None;
        alloc.discard_all_prealloc();
        match &self.journal {
            Some(j) => {
                j.shutdown()?;
                mark_journal_clean(vol, orphans_empty)?;
            }
            None => {
                let h = Handle::direct(vol.cache.clone());
                write_super_counts(vol, &h, alloc.free_blocks(), ialloc.free_inodes())?;
                mark_unjournaled_clean(vol, orphans_empty, self.mounted_clean)?;
            }
        }
        vol.device().flush()?;
        // Clean only once everything else is on disk: another node may
        // take the filesystem the moment it sees this.
        if let Some(m) = self.mmp.lock().take() {
            m.stop()?;
        }
        Ok(())
    }
}

/// How the abort of a shutdown (FS_IOC_SHUTDOWN) begins: the abort hook
/// records no filesystem error for it.
pub(crate) const SHUTDOWN_WHY: &str = "the filesystem was shut down";

fn spawn_committer(j: Weak<JournalWriter>, every: Duration) -> Committer {
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let s2 = stop.clone();
    let thread = std::thread::Builder::new()
        .name("uext4-commit".into())
        .spawn(move || loop {
            {
                let mut stopped = s2.0.lock();
                if !*stopped {
                    s2.1.wait_for(&mut stopped, every);
                }
                if *stopped {
                    return;
                }
            }
            let Some(j) = j.upgrade() else { return };
            if j.running_tid().is_some() {
                // An error aborts the journal; operations report it.
                let _ = j.commit();
            }
        })
        .ok();
    Committer { stop, thread }
}

#[cfg(test)]
mod dirty_tests {
    use super::*;

    /// Inodes changed in one transaction that does not commit (no journal
    /// here: nothing ever commits) are all kept, and adding n of them to
    /// one shard looks at O(n) entries in all, not O(n) per addition.
    #[test]
    fn noting_many_inodes_of_one_transaction_costs_constant_per_inode() {
        let t = Transactions::unjournaled();
        let n = 20 * DIRTY_SWEEP_MIN;
        for i in 1..=n as u32 {
            t.note_dirty(&[i * DIRTY_SHARDS as u32], 7);
        }
        let s = t.dirty[0].lock();
        assert_eq!(s.map.len(), n);
        assert!(s.swept <= 4 * n, "{} entries swept to add {n}", s.swept);
    }
}
