//! Mounting read-write and unmounting: the checks that a filesystem may
//! be written, the subsystems of a writable filesystem, the superblock
//! writes made outside the journal (marked in use at mount, clean at
//! unmount), and the entry point of transactions.

use super::data_path::DataPath;
use super::namespace::NamespaceState;
use super::open_files::OpenFiles;
use super::transactions::Transactions;
use super::{Filesystem, FsCore};
use crate::alloc::inodes::InodeAllocator;
use crate::alloc::Allocator;
#[cfg(test)]
use crate::data::FileLocks;
use crate::data::{DataPathConfig, IoStats, IoStatsSnapshot};
use crate::error::{Error, Result};
use crate::format::features::RO_COMPAT_SUPPORTED;
use crate::format::superblock::{Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use crate::txn::Tx;
use crate::volume::Volume;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The subsystems of a filesystem opened read-write, each owning its
/// state behind its own methods.
pub(crate) struct Subsystems {
    /// Journal control: handles, commits, the dirty-transaction map.
    pub txns: Transactions,
    /// The inode allocator (the block allocator is [`FsCore::allocator`]).
    pub ialloc: Arc<InodeAllocator>,
    /// Open files and the orphan-list mutex.
    pub open: OpenFiles,
    /// The rename lock and inode generations.
    pub ns: NamespaceState,
    /// Inode locks, page cache, writeback, I/O counters and errors.
    pub data: DataPath,
    /// Disk quotas (None without the `quota` feature).
    pub quota: Option<crate::quota::Quotas>,
    /// Set by the unmount: the filesystem is read-only from then on.
    closed: AtomicBool,
}

impl std::fmt::Debug for Subsystems {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subsystems").field("txns", &self.txns).finish_non_exhaustive()
    }
}

/// Refuses a filesystem whose root inode is no usable directory, as the
/// kernel's `ext4_fill_super` does ("corrupt root inode, run e2fsck",
/// EFSCORRUPTED): not a directory, or with no size or no blocks. Every
/// path starts at the root, so a read-write open or a mount of such an
/// image could only fail each later access (EIO through a mount, with
/// nothing said why). See [`FsCore::check_root`].
pub(crate) fn check_root(vol: &Volume) -> Result<()> {
    use crate::error::{CorruptKind, Location, Structure};
    use crate::format::inode::{ROOT_INO, S_IFDIR, S_IFMT};
    let root = crate::inode::read_inode(vol, ROOT_INO)?;
    if root.mode & S_IFMT != S_IFDIR || root.size == 0 || root.blocks_512 == 0 {
        let kind = CorruptKind::BadRoot { mode: root.mode, size: root.size, blocks: root.blocks_512 };
        return Err(Error::corruption(Structure::Inode, Location::Inode(ROOT_INO), kind));
    }
    Ok(())
}

/// Refuses read-write access to features whose metadata uext4 would not
/// keep consistent.
pub(crate) fn check_writable(sb: &Superblock) -> Result<()> {
    let bad_ro = sb.features.ro_compat & !RO_COMPAT_SUPPORTED;
    if bad_ro != 0 {
        let names = sb.features.ro_compat_names(bad_ro);
        return Err(Error::ReadOnly(format!(
            "read-only compatible feature(s) {} cannot be written by uext4",
            names.join(", ")
        )));
    }
    Ok(())
}

fn read_sb(vol: &Volume) -> Result<Superblock> {
    let mut raw = [0u8; SUPERBLOCK_SIZE];
    vol.device().read_at(&mut raw, SUPERBLOCK_OFFSET)?;
    Superblock::parse(&raw)
}

impl Subsystems {
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
    ) -> Result<Subsystems> {
        check_writable(&vol.sb)?;
        // Before the superblock is marked in use: a bad orphan file
        // refuses the open as it refuses the kernel's mount.
        let orphans = super::orphan_file::OrphanSlots::load(vol)?;
        let quota = crate::quota::Quotas::load(vol)?;
        let ialloc = Arc::new(InodeAllocator::new(vol.clone()));
        let now = crate::format::inode::Timestamp::now().sec as u32;
        let txns = Transactions::start(vol, alloc, &ialloc, commit_interval, use_reserved, mmp, now)?;
        Ok(Subsystems {
            txns,
            ialloc,
            open: OpenFiles::new(orphans),
            ns: NamespaceState::new(),
            data: DataPath::new(data, cache_bytes, errs),
            quota,
            closed: AtomicBool::new(false),
        })
    }

    /// The subsystems of a fast-commit replay (`fs/fc_replay.rs`):
    /// writes go straight to the device, nothing is marked mounted.
    pub(crate) fn start_for_replay(vol: &Arc<Volume>) -> Result<Subsystems> {
        let orphans = super::orphan_file::OrphanSlots::load(vol)?;
        let d = super::MountOptions::default();
        Ok(Subsystems {
            txns: Transactions::unjournaled(),
            ialloc: Arc::new(InodeAllocator::new(vol.clone())),
            open: OpenFiles::new(orphans),
            ns: NamespaceState::new(),
            data: DataPath::new(d.data, d.cache_bytes, Arc::new(super::errors::WbErrors::default())),
            // Inode writes of the replay charge quota as any other (this
            // kernel cannot mount quota images, so no kernel-left fixture
            // checks it).
            quota: crate::quota::Quotas::load(vol)?,
            closed: AtomicBool::new(false),
        })
    }

    /// Flushes everything and marks the filesystem clean. Idempotent.
    fn shutdown(&self, vol: &Volume, alloc: &Allocator) -> Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let orphans_empty = self.open.lock_orphans().is_empty();
        self.txns.shutdown(vol, alloc, &self.ialloc, orphans_empty)
    }
}

impl FsCore {
    /// The subsystems of the read-write filesystem, or EROFS.
    pub(crate) fn rw(&self) -> Result<&Subsystems> {
        self.live().ok_or_else(|| Error::ReadOnly("the filesystem is open read-only".into()))
    }

    /// The read-write subsystems, unless opened read-only or unmounted.
    pub(crate) fn live(&self) -> Option<&Subsystems> {
        self.subsystems.as_ref().filter(|rw| !rw.closed.load(Ordering::Acquire))
    }

    /// Starts a transaction for an operation that dirties at most about
    /// `credits` metadata blocks. Take inode locks before this.
    ///
    /// Call [`Tx::settle`] once the operation has reached a consistent
    /// end (done, or failed after undoing its changes): a `Tx` that
    /// changed metadata and drops unsettled aborts the journal, so a half
    /// operation never commits.
    pub(crate) fn begin(&self, credits: usize) -> Result<Tx<'_>> {
        self.begin_tx(credits, false)
    }

    /// [`FsCore::begin`]; `writeback` transactions may allocate the
    /// blocks reserved for delayed allocation.
    pub(crate) fn begin_tx(&self, credits: usize, writeback: bool) -> Result<Tx<'_>> {
        let rw = self.rw()?;
        rw.txns.check_mmp()?;
        let alloc = self.allocator()?;
        IoStats::bump(&rw.data.stats().handles);
        let quota = rw.quota.as_ref().map(|q| q as &dyn crate::txn::QuotaAccount);
        let extra = if quota.is_some() { crate::quota::QUOTA_CREDITS } else { 0 };
        let (order, mut handle) = rw.txns.start_handle(&self.vol, credits + extra)?;
        handle.set_reserve(extra);
        Ok(Tx {
            vol: &self.vol,
            alloc,
            ialloc: &rw.ialloc,
            handle,
            use_reserved: rw.txns.use_reserved(),
            delalloc: Some(rw.data.pages().delalloc()),
            writeback,
            settled: Default::default(),
            order,
            quota,
            new_inodes: Default::default(),
            deferred: Default::default(),
        })
    }

    /// The inode locks (for the data path and the front ends).
    #[cfg(test)]
    pub(crate) fn inode_locks(&self) -> Result<&FileLocks> {
        Ok(self.rw()?.data.locks())
    }

    /// The data path's counters (all zero on a read-only filesystem).
    pub fn io_stats(&self) -> IoStatsSnapshot {
        self.live().map(|rw| rw.data.stats().snapshot()).unwrap_or_default()
    }

    /// Bytes the page cache holds now, at most, and its budget.
    pub fn page_cache_usage(&self) -> (usize, usize, usize) {
        self.live().map_or((0, 0, 0), |rw| {
            let p = rw.data.pages();
            (p.used(), p.peak(), p.budget())
        })
    }

    /// Bytes of dirty folios (buffered data not yet written back).
    pub fn dirty_bytes(&self) -> usize {
        self.live().map_or(0, |rw| rw.data.pages().dirty())
    }

    /// The data path's switches in force (what
    /// [`MountOptions::data`](crate::MountOptions::data) asked for), for
    /// benchmarks that label their results.
    pub fn data_path_config(&self) -> DataPathConfig {
        self.live().map(|rw| *rw.data.config()).unwrap_or_default()
    }

    /// Clean unmount of the core (see [`Filesystem::unmount`]).
    pub(crate) fn shutdown(&self) -> Result<()> {
        let Some(rw) = self.live() else { return Ok(()) };
        self.stop_writeback();
        // The kernel holds nothing any more; files unlinked while open
        // or referenced are deleted as at their last close.
        self.kernel_forget_all()?;
        for ino in rw.open.doomed() {
            rw.open.keep_one_ref(ino);
            self.close_inode(ino)?;
        }
        // A writeback error (the data stays lost in memory) is reported,
        // but the metadata is still committed and the log emptied.
        let written = self.writeback_all().and(self.write_atimes(std::time::Duration::ZERO));
        if let Some(a) = self.alloc.get() {
            rw.shutdown(&self.vol, a)?;
        }
        written
    }

    /// Re-reads the primary superblock from the device, as it is on disk
    /// rather than as the filesystem holds it: for tests that check what
    /// was written.
    pub fn read_superblock(&self) -> Result<Superblock> {
        read_sb(&self.vol)
    }
}

#[warn(clippy::missing_errors_doc)]
impl Filesystem {
    /// Clean unmount: dirty data written back, commit, checkpoint,
    /// `needs_recovery` cleared (or `s_state` valid without a journal).
    /// The filesystem stays readable but refuses further writes.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when writing back, committing or checkpointing fails
    /// (the journal is then left for recovery at the next open), or for a
    /// writeback error no fsync reported.
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
