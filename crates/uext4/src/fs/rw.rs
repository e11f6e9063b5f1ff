//! Read-write state of an open filesystem: journal start-up and clean
//! shutdown, the transaction entry point, the periodic commit.

use super::{Filesystem, FsCore};
use crate::alloc::inodes::InodeAllocator;
use crate::alloc::Allocator;
use crate::data::page_cache::PageCache;
use crate::data::{DataPathConfig, IoStats, IoStatsSnapshot};
use crate::error::{Error, Result};
use crate::format::features::{compat, ro_compat};
use crate::format::superblock::{Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use crate::journal::{Handle, Journal, JournalWriter};
use crate::locks::InodeLocks;
use crate::txn::Tx;
use crate::volume::Volume;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// `s_state` bit: cleanly unmounted.
const STATE_VALID: u16 = 0x1;

/// RO_COMPAT features uext4 can keep consistent while writing.
const WRITABLE_RO_COMPAT: u32 = ro_compat::SPARSE_SUPER
    | ro_compat::LARGE_FILE
    | ro_compat::HUGE_FILE
    | ro_compat::GDT_CSUM
    | ro_compat::DIR_NLINK
    | ro_compat::EXTRA_ISIZE
    | ro_compat::METADATA_CSUM;

/// Open handles per inode and what their closes must do.
#[derive(Default)]
struct OpenFiles {
    /// Open handles per inode.
    counts: HashMap<u32, u32>,
    /// Inodes unlinked while open: deleted at their last close.
    doomed: std::collections::HashSet<u32>,
    /// Inodes truncated to zero while open: written back at their next
    /// close (auto_da_alloc).
    alloc_on_close: std::collections::HashSet<u32>,
}

/// What a close must do (see [`RwState::close_ref`]).
pub(crate) struct Closed {
    /// It was the last handle of an unlinked inode: delete it.
    pub delete: bool,
    /// The file was truncated to zero while open: write it back.
    pub alloc: bool,
}

/// What a filesystem opened read-write has besides the read path.
pub(crate) struct RwState {
    pub journal: Option<Arc<JournalWriter>>,
    pub ialloc: Arc<InodeAllocator>,
    pub locks: InodeLocks,
    pub rename_lock: Mutex<()>,
    committer: Mutex<Option<Committer>>,
    closed: AtomicBool,
    /// Transaction that last changed each inode (fsync commits only
    /// when that one has not committed yet).
    dirty: Vec<Mutex<HashMap<u32, u64>>>,
    generation: AtomicU32,
    /// Operations may use the blocks reserved for root.
    pub use_reserved: bool,
    /// Open handles per inode and what their closes must do.
    open: Mutex<OpenFiles>,
    /// Serializes changes of the orphan list (taken inside inode locks
    /// and a handle, before any allocator or cache lock).
    pub orphan_lock: Mutex<()>,
    /// The data path's switches.
    pub data: DataPathConfig,
    /// Which paths the I/O took.
    pub stats: IoStats,
    /// The page cache's budget and eviction.
    pub pages: PageCache,
    /// Dirty files and the background writeback thread.
    pub wb: super::writeback::Writeback,
    /// The claim on an `mmp` filesystem (marked clean at shutdown).
    mmp: Mutex<Option<super::mmp::MmpGuard>>,
    /// Set when another node took the MMP block over: changes are refused.
    mmp_lost: Option<Arc<std::sync::OnceLock<String>>>,
    /// Per-file writeback errors and flush windows.
    pub errs: Arc<super::errors::WbErrors>,
}

const DIRTY_SHARDS: usize = 64;

impl std::fmt::Debug for RwState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwState").field("journal", &self.journal.is_some()).finish_non_exhaustive()
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

/// Refuses read-write access to features whose metadata uext4 would not
/// keep consistent.
pub(crate) fn check_writable(sb: &Superblock) -> Result<()> {
    let bad_ro = sb.features.ro_compat & !WRITABLE_RO_COMPAT;
    if bad_ro != 0 {
        let names = sb.features.ro_compat_names(bad_ro);
        return Err(Error::ReadOnly(format!(
            "read-only compatible feature(s) {} cannot be written by uext4",
            names.join(", ")
        )));
    }
    if !sb.features.has_incompat(crate::format::features::incompat::EXTENTS) {
        return Err(Error::ReadOnly("filesystems without the extent feature (ext2/ext3) are opened read-only".into()));
    }
    if sb.features.has_compat(compat::ORPHAN_FILE) {
        return Err(Error::ReadOnly("the orphan_file feature cannot be written by uext4".into()));
    }
    Ok(())
}

fn read_sb(vol: &Volume) -> Result<Superblock> {
    let mut raw = [0u8; SUPERBLOCK_SIZE];
    vol.device().read_at(&mut raw, SUPERBLOCK_OFFSET)?;
    Superblock::parse(&raw)
}

/// Writes the primary superblock outside the journal (at mount and
/// unmount, as the kernel's ext4_commit_super does) after `f` changes it.
pub(crate) fn write_sb_direct(vol: &Volume, f: impl FnOnce(&mut [u8])) -> Result<()> {
    let bs = vol.block_size as u64;
    let blk = SUPERBLOCK_OFFSET / bs;
    let off = (SUPERBLOCK_OFFSET % bs) as usize;
    let guard = vol.cache.lock_block(blk);
    let cur = guard.current()?;
    let mut data: Box<[u8]> = cur.data().into();
    let raw = &mut data[off..off + SUPERBLOCK_SIZE];
    f(raw);
    if vol.sb.has_metadata_csum() {
        let c = crate::format::checksum::crc32c(!0, &raw[..SB_CHECKSUM]);
        raw[SB_CHECKSUM..SB_CHECKSUM + 4].copy_from_slice(&c.to_le_bytes());
    }
    vol.device().write_at(&data[off..off + SUPERBLOCK_SIZE], SUPERBLOCK_OFFSET)?;
    vol.device().flush()?;
    guard.install(data)?;
    Ok(())
}

fn set_u16(b: &mut [u8], off: usize, f: impl FnOnce(u16) -> u16) {
    let v = u16::from_le_bytes([b[off], b[off + 1]]);
    b[off..off + 2].copy_from_slice(&f(v).to_le_bytes());
}

fn set_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Offsets in the superblock.
const S_MTIME: usize = 0x2C;
const SB_CHECKSUM: usize = 0x3FC;
const S_MNT_COUNT: usize = 0x34;
const S_STATE: usize = 0x3A;
const S_FEATURE_INCOMPAT: usize = 0x60;
/// INCOMPAT_RECOVER.
const RECOVER: u32 = 0x4;

impl RwState {
    /// Sets up writing on `vol` (recovery already done): allocators,
    /// journal, the superblock marked in use. (Each argument is a piece
    /// of the open's state handed over once; a struct for them would only
    /// be unpacked here.)
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        vol: &Arc<Volume>,
        alloc: &Arc<Allocator>,
        commit_interval: Duration,
        use_reserved: bool,
        data: DataPathConfig,
        cache_bytes: usize,
        mmp: Option<super::mmp::MmpGuard>,
        errs: Arc<super::errors::WbErrors>,
    ) -> Result<RwState> {
        check_writable(&vol.sb)?;
        let ialloc = Arc::new(InodeAllocator::new(vol.clone()));
        let log = Journal::open(vol)?;
        let has_journal = log.is_some();
        let now = crate::format::inode::Timestamp::now().sec as u32;
        write_sb_direct(vol, |b| {
            set_u32(b, S_MTIME, now);
            set_u16(b, S_MNT_COUNT, |c| c.wrapping_add(1));
            if has_journal {
                let inc =
                    u32::from_le_bytes(b[S_FEATURE_INCOMPAT..S_FEATURE_INCOMPAT + 4].try_into().unwrap_or([0; 4]));
                set_u32(b, S_FEATURE_INCOMPAT, inc | RECOVER);
            } else {
                set_u16(b, S_STATE, |s| s & !STATE_VALID);
            }
        })?;
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
            let (a, ia, v) = (Arc::downgrade(alloc), Arc::downgrade(&ialloc), Arc::downgrade(vol));
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
                if let Some(v) = v2.upgrade() {
                    let e = Error::Io(std::io::Error::other(why.to_string()));
                    let _ = write_sb_direct(&v, |raw| {
                        super::errors::save_error_info(raw, &e, 0, 0, "jbd2_journal_abort", 0)
                    });
                }
            }));
            committer = Some(spawn_committer(Arc::downgrade(j), commit_interval));
        }
        Ok(RwState {
            journal,
            ialloc,
            locks: InodeLocks::default(),
            rename_lock: Mutex::new(()),
            committer: Mutex::new(committer),
            closed: AtomicBool::new(false),
            dirty: (0..DIRTY_SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            generation: AtomicU32::new(now.wrapping_mul(2_654_435_761)),
            use_reserved,
            open: Mutex::new(OpenFiles::default()),
            orphan_lock: Mutex::new(()),
            data,
            stats: IoStats::default(),
            pages: PageCache::new(if cache_bytes == 0 { PageCache::default_budget() } else { cache_bytes }),
            wb: Default::default(),
            mmp_lost: mmp.as_ref().map(|m| m.lost()),
            mmp: Mutex::new(mmp),
            errs,
        })
    }

    /// Records that `inos` were changed in transaction `tid`.
    pub(crate) fn note_dirty(&self, inos: &[u32], tid: u64) {
        if tid == 0 {
            return;
        }
        let committed = self.journal.as_ref().map_or(0, |j| j.committed_tid());
        for &ino in inos.iter().filter(|&&i| i != 0) {
            let mut m = self.dirty[ino as usize % DIRTY_SHARDS].lock();
            if m.len() > 1024 {
                m.retain(|_, t| *t > committed);
            }
            m.insert(ino, tid);
        }
    }

    /// The transaction that last changed `ino`, if it may be uncommitted.
    pub(crate) fn dirty_tid(&self, ino: u32) -> Option<u64> {
        let committed = self.journal.as_ref()?.committed_tid();
        self.dirty[ino as usize % DIRTY_SHARDS].lock().get(&ino).copied().filter(|&t| t > committed)
    }

    /// Takes the rename lock (first in the lock order: the caller holds
    /// no inode lock).
    pub(crate) fn lock_rename(&self) -> (crate::lock_order::Held, parking_lot::MutexGuard<'_, ()>) {
        (crate::lock_order::acquire(crate::lock_order::Class::Rename, 0), self.rename_lock.lock())
    }

    /// Takes the orphan-list mutex (checked against the lock order).
    pub(crate) fn lock_orphans(&self) -> crate::locks::Ordered<parking_lot::MutexGuard<'_, ()>> {
        crate::locks::ordered(crate::lock_order::Class::Orphan, 0, || self.orphan_lock.lock())
    }

    /// True if `ino` has open handles.
    pub(crate) fn is_open(&self, ino: u32) -> bool {
        self.open.lock().counts.contains_key(&ino)
    }

    pub(crate) fn open_ref(&self, ino: u32) {
        *self.open.lock().counts.entry(ino).or_insert(0) += 1;
    }

    /// Drops one handle. Says whether it was the last one of an unlinked
    /// inode (to delete: confirmed under the inode lock by
    /// [`RwState::take_doomed`]), and whether the file was truncated to
    /// zero while open since the last close (to write back now:
    /// auto_da_alloc).
    pub(crate) fn close_ref(&self, ino: u32) -> Closed {
        let mut g = self.open.lock();
        let alloc = g.alloc_on_close.remove(&ino);
        let delete = match g.counts.get_mut(&ino) {
            Some(c) if *c > 1 => {
                *c -= 1;
                false
            }
            Some(_) => {
                g.counts.remove(&ino);
                g.doomed.contains(&ino)
            }
            None => false,
        };
        Closed { delete, alloc }
    }

    /// Marks `ino` (its last link gone, its I/O lock held) as unlinked
    /// while open if it is open, in the same critical section as the
    /// check, so that a close cannot slip between them: true if it is
    /// open (its last close deletes it), false if it is to be deleted now.
    pub(crate) fn doom_if_open(&self, ino: u32) -> bool {
        let mut g = self.open.lock();
        if g.counts.contains_key(&ino) {
            g.doomed.insert(ino);
            true
        } else {
            false
        }
    }

    /// The close-side decision, under the inode's I/O lock: true (and no
    /// longer doomed) if `ino` is doomed and not open again, so the
    /// caller deletes it; false if another close did, or it was reopened
    /// (its own last close deletes it).
    pub(crate) fn take_doomed(&self, ino: u32) -> bool {
        let mut g = self.open.lock();
        !g.counts.contains_key(&ino) && g.doomed.remove(&ino)
    }

    /// Notes that open file `ino` was truncated to zero: its next close
    /// writes its delayed data back (ext4's EXT4_STATE_DA_ALLOC_CLOSE).
    pub(crate) fn alloc_on_close(&self, ino: u32) {
        let mut g = self.open.lock();
        if g.counts.contains_key(&ino) {
            g.alloc_on_close.insert(ino);
        }
    }

    /// A generation number for a new inode.
    pub(crate) fn next_generation(&self) -> u32 {
        self.generation.fetch_add(0x9E37_79B9, Ordering::Relaxed)
    }

    /// Flushes everything and marks the filesystem clean. Idempotent.
    pub(crate) fn shutdown(&self, vol: &Volume, alloc: &Allocator) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        *self.committer.lock() = None;
        alloc.discard_all_prealloc();
        match &self.journal {
            Some(j) => {
                j.shutdown()?;
                write_sb_direct(vol, |b| {
                    let inc =
                        u32::from_le_bytes(b[S_FEATURE_INCOMPAT..S_FEATURE_INCOMPAT + 4].try_into().unwrap_or([0; 4]));
                    set_u32(b, S_FEATURE_INCOMPAT, inc & !RECOVER);
                })?;
            }
            None => {
                let h = Handle::direct(vol.cache.clone());
                write_super_counts(vol, &h, alloc.free_blocks(), self.ialloc.free_inodes())?;
                write_sb_direct(vol, |b| set_u16(b, S_STATE, |s| s | STATE_VALID))?;
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

/// Writes the free counts into the superblock block through `h`.
fn write_super_counts(vol: &Volume, h: &Handle, free_blocks: u64, free_inodes: u32) -> Result<()> {
    let bs = vol.block_size as u64;
    let blk = SUPERBLOCK_OFFSET / bs;
    let off = (SUPERBLOCK_OFFSET % bs) as usize;
    h.modify(blk, |b| {
        let mut sb = Superblock::parse(&b[off..off + SUPERBLOCK_SIZE])?;
        sb.set_free_counts(free_blocks, free_inodes);
        b[off..off + SUPERBLOCK_SIZE].copy_from_slice(sb.raw());
        Ok(())
    })
}

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

impl FsCore {
    pub(crate) fn rw(&self) -> Result<&RwState> {
        self.live().ok_or_else(|| Error::ReadOnly("the filesystem is open read-only".into()))
    }

    /// The read-write state, unless opened read-only or unmounted.
    pub(crate) fn live(&self) -> Option<&RwState> {
        self.rw_state.as_ref().filter(|rw| !rw.closed.load(Ordering::Acquire))
    }

    /// Starts a transaction for an operation that dirties at most about
    /// `credits` metadata blocks. Take inode locks before this.
    ///
    /// Call [`Tx::settle`] once the operation has reached a consistent
    /// end (done, or failed after undoing its changes): a `Tx` that
    /// changed metadata and drops unsettled aborts the journal, so a half
    /// operation never commits.
    pub fn begin(&self, credits: usize) -> Result<Tx<'_>> {
        self.begin_tx(credits, false)
    }

    /// [`FsCore::begin`]; `writeback` transactions may allocate the
    /// blocks reserved for delayed allocation.
    pub(crate) fn begin_tx(&self, credits: usize, writeback: bool) -> Result<Tx<'_>> {
        let rw = self.rw()?;
        if let Some(why) = rw.mmp_lost.as_ref().and_then(|l| l.get()) {
            return Err(Error::ReadOnly(why.clone()));
        }
        let alloc = self.allocator()?;
        IoStats::bump(&rw.stats.handles);
        // Checked before waiting: a handle may wait for a commit.
        let order = crate::lock_order::acquire(crate::lock_order::Class::Handle, 0);
        let handle = match &rw.journal {
            Some(j) => j.start_handle(credits)?,
            None => Handle::direct(self.vol.cache.clone()),
        };
        Ok(Tx {
            vol: &self.vol,
            alloc,
            ialloc: &rw.ialloc,
            handle,
            use_reserved: rw.use_reserved,
            delalloc: Some(rw.pages.account()),
            writeback,
            settled: Default::default(),
            order,
        })
    }

    /// The inode locks (for the data path and the front ends).
    pub fn inode_locks(&self) -> Result<&InodeLocks> {
        Ok(&self.rw()?.locks)
    }

    /// The data path's counters (all zero on a read-only filesystem).
    pub fn io_stats(&self) -> IoStatsSnapshot {
        self.live().map(|rw| rw.stats.snapshot()).unwrap_or_default()
    }

    /// Bytes the page cache holds now, at most, and its budget.
    pub fn page_cache_usage(&self) -> (usize, usize, usize) {
        self.live().map_or((0, 0, 0), |rw| (rw.pages.used(), rw.pages.peak(), rw.pages.budget()))
    }

    /// Bytes of dirty folios (buffered data not yet written back).
    pub fn dirty_bytes(&self) -> usize {
        self.live().map_or(0, |rw| rw.pages.dirty())
    }

    /// The data path's switches in force.
    pub fn data_path_config(&self) -> DataPathConfig {
        self.live().map(|rw| rw.data).unwrap_or_default()
    }

    /// Writes back dirty data, then commits the running transaction (if
    /// any) and waits for it: after this returns, every completed
    /// operation survives a crash.
    pub fn commit(&self) -> Result<()> {
        // The metadata is committed even if some writeback failed: it
        // frees what the failed data may need (blocks freed by the
        // running transaction), and the error is still reported.
        let written = self.writeback_all();
        self.commit_journal()?;
        written
    }

    /// Commits the running transaction without writing back dirty data.
    pub(crate) fn commit_journal(&self) -> Result<()> {
        match &self.rw()?.journal {
            Some(j) => j.commit(),
            None => Ok(self.vol.device().flush()?),
        }
    }

    /// Commits transaction `tid` if it has not been committed yet (fsync
    /// of a file last changed in `tid`).
    pub fn commit_tid(&self, tid: u64) -> Result<()> {
        match &self.rw()?.journal {
            Some(j) => j.commit_upto(tid),
            None => Ok(self.vol.device().flush()?),
        }
    }

    /// sync(2): commits and checkpoints, so the image is complete without
    /// its journal.
    pub fn sync(&self) -> Result<()> {
        // As commit: a writeback error does not keep the metadata back.
        let written = self.writeback_all();
        match &self.rw()?.journal {
            Some(j) => j.sync()?,
            None => self.vol.device().flush()?,
        }
        written
    }

    /// Clean unmount of the core (see [`Filesystem::unmount`]).
    pub(crate) fn shutdown(&self) -> Result<()> {
        let Some(rw) = self.live() else { return Ok(()) };
        self.stop_writeback();
        // Files unlinked while open are deleted as at their last close.
        let doomed: Vec<u32> = rw.open.lock().doomed.iter().copied().collect();
        for ino in doomed {
            rw.open.lock().counts.insert(ino, 1);
            self.close_inode(ino)?;
        }
        // A writeback error (the data stays lost in memory) is reported,
        // but the metadata is still committed and the log emptied.
        let written = self.writeback_all();
        if let Some(a) = self.alloc.get() {
            rw.shutdown(&self.vol, a)?;
        }
        written
    }

    /// Runs `op` again (at most 3 times) when it fails with ENOSPC while
    /// blocks freed by uncommitted transactions wait: a commit makes them
    /// allocatable (the kernel's `ext4_should_retry_alloc`). For operations
    /// that leave nothing behind when they fail. Called with no lock held.
    pub(crate) fn retry_nospc<T>(&self, mut op: impl FnMut() -> Result<T>) -> Result<T> {
        let mut r = op();
        for _ in 0..3 {
            if !matches!(r, Err(Error::NoSpace(_))) || !self.can_retry_alloc() {
                break;
            }
            r = op();
        }
        r
    }

    /// A write that comes back short or with ENOSPC goes on from where it
    /// stopped after a commit, as long as freed blocks are waiting for one
    /// (see [`Filesystem::retry_nospc`]).
    pub(crate) fn write_retrying(
        &self,
        offset: u64,
        data: &[u8],
        mut op: impl FnMut(u64, &[u8]) -> Result<usize>,
    ) -> Result<usize> {
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
            if !nospc || retries >= 3 || !self.can_retry_alloc() {
                return match err {
                    Some(e) if done == 0 => Err(e),
                    _ => Ok(done),
                };
            }
            retries += 1;
        }
    }

    /// Commits if blocks freed by uncommitted transactions are waiting;
    /// true if that may have made space.
    fn can_retry_alloc(&self) -> bool {
        let pending = self.alloc.get().is_some_and(|a| a.has_pending_frees());
        pending && self.commit_journal().is_ok()
    }

    /// Re-reads the primary superblock from the device (tests).
    pub fn read_superblock(&self) -> Result<Superblock> {
        read_sb(&self.vol)
    }
}

impl Filesystem {
    /// Clean unmount: dirty data written back, commit, checkpoint,
    /// `needs_recovery` cleared (or `s_state` valid without a journal).
    /// The filesystem stays readable but refuses further writes.
    pub fn unmount(&mut self) -> Result<()> {
        self.core.shutdown()
    }
}

impl Drop for Filesystem {
    fn drop(&mut self) {
        // A filesystem dropped without unmount() is unmounted cleanly on a
        // best-effort basis; errors leave the journal for recovery.
        let _ = self.unmount();
    }
}
