//! The public filesystem API and the engine behind it.
//!
//! [`Filesystem`] is the owning handle; every operation is a method of
//! [`FsCore`], reached through `Deref`, and takes `&self`, so any number
//! of threads call it at once (`Send + Sync`). `FsCore` is a thin facade:
//! it holds the volume (immutable geometry plus the sharded metadata
//! cache, see [`crate::cache`]), the block allocator, and, when opened
//! read-write, the subsystems that own the mutable state, each behind its
//! own methods (see `docs/ARCHITECTURE.md`, "The engine's subsystems"):
//! journal control (`transactions.rs`), open files and orphans
//! (`open_files.rs`), the namespace's state (`namespace/`), and the data
//! path's state (`data_path.rs`: inode locks, page cache, writeback).
//! The operations are grouped by job: `namespace/` (create, remove,
//! rename, setattr, path walks), `read.rs`, `buffered.rs`, `direct.rs`,
//! `write.rs` (the allocating path), `fallocate.rs`, `seek.rs`,
//! `writeback.rs`, `sync.rs`, `orphan.rs`, `xattr_ops.rs`; opening is
//! here, mounting read-write and unmounting in `mount.rs`, the
//! superblock's own writes (mount and clean marks, error record) in
//! `superblock.rs`.

use crate::alloc::{AllocConfig, AllocStats, Allocator, FreeExtentHistogram};
use crate::device::{BlockDevice, FileDevice};
use crate::error::{Error, Result};
use crate::format::group_desc::GroupDesc;
use crate::format::inode::ROOT_INO;
use crate::format::superblock::Superblock;
use crate::volume::Volume;
use std::path::Path;
use std::sync::{Arc, OnceLock};

mod atime;
mod buffered;
mod caller;
mod copy_range;
mod data_path;
mod direct;
mod errors;
mod fallocate;
mod fc_replay;
pub mod fiemap;
mod handles;
mod inline;
pub(crate) mod mmp;
mod mount;
mod namespace;
mod open_files;
pub mod ops;
mod orphan;
mod orphan_file;
pub mod quota_ops;
mod read;
mod seek;
mod shutdown;
mod std_support;
mod superblock;
mod sync;
mod transactions;
mod trim;
mod types;
mod write;
mod writeback;
pub mod xattr_ops;

pub use caller::{sys_resource, SysResourceScope};
pub use ops::{Cred, FallocMode, RenameFlags, SetAttr, LINK_MAX};
pub use shutdown::ShutdownMode;
pub use std_support::NewFileDefaults;
pub use types::{AtimeMode, MountOptions, Stat, StatFs};
pub use xattr_ops::XattrSetMode;

/// An open ext4 filesystem: the owning handle.
///
/// Every operation is a method of [`FsCore`], reached through `Deref`;
/// the handle adds what only the owner does: unmounting, by
/// [`Filesystem::unmount`] or on drop. Background threads (writeback,
/// the periodic commit) hold weak references to the core, so they never
/// keep a filesystem alive past its unmount.
#[derive(Debug)]
pub struct Filesystem {
    core: Arc<FsCore>,
    /// Owner and umask of files the std-like API creates.
    new_files: NewFileDefaults,
}

/// The state and operations of an open filesystem, shared by its handle
/// ([`Filesystem`]) and its background threads.
#[derive(Debug)]
pub struct FsCore {
    vol: Arc<Volume>,
    notices: Vec<String>,
    /// Built on first use: inspection commands that never allocate do not
    /// pay for it.
    alloc: OnceLock<Arc<Allocator>>,
    /// Present when opened read-write (see [`FsCore::live`]).
    subsystems: Option<mount::Subsystems>,
    /// What must be durable when an operation returns (`sync`, `dirsync`).
    durability: sync::Durability,
}

impl std::ops::Deref for Filesystem {
    type Target = FsCore;
    fn deref(&self) -> &FsCore {
        &self.core
    }
}

// The entry points of the facade: every way they fail is documented
// (clippy::missing_errors_doc), as for the std-like API.
#[warn(clippy::missing_errors_doc)]
impl Filesystem {
    /// Opens an image file or block device read-only: for inspecting or
    /// copying out of an image with no risk of changing it (a journal
    /// that needs recovery is replayed in memory only, see
    /// [`Filesystem::open_device`]). [`Filesystem::open_rw`] to change it.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the image cannot be opened or read;
    /// [`Error::NotExt4`] when it holds no ext2/3/4 superblock (bad magic,
    /// too small);
    /// [`Error::Unsupported`] for INCOMPAT features uext4 does not know
    /// (named in the message); [`Error::Corrupt`] or [`Error::Checksum`]
    /// when the superblock, descriptors or root are damaged.
    pub fn open(path: impl AsRef<Path>) -> Result<Filesystem> {
        let dev = FileDevice::open(path, false)?;
        Filesystem::open_device(Arc::new(dev), MountOptions::default())
    }

    /// Opens an image file or block device read-write (journal replayed
    /// onto it first, if needed).
    ///
    /// # Errors
    ///
    /// As [`Filesystem::open`], and for writing also: [`Error::ReadOnly`]
    /// for a read-only device or RO_COMPAT features uext4 cannot write;
    /// [`Error::Busy`] when multi-mount protection finds the image in use
    /// elsewhere; any error of replaying the journal onto the device.
    pub fn open_rw(path: impl AsRef<Path>) -> Result<Filesystem> {
        let dev = FileDevice::open(path, true)?;
        Filesystem::open_device(Arc::new(dev), MountOptions { write: true, ..Default::default() })
    }

    /// Opens an image file or block device with `opts` (read-write when
    /// `opts.write`).
    ///
    /// # Errors
    ///
    /// As [`Filesystem::open`], or [`Filesystem::open_rw`] when
    /// `opts.write`.
    pub fn open_with(path: impl AsRef<Path>, opts: MountOptions) -> Result<Filesystem> {
        let dev = FileDevice::open(path, opts.write)?;
        Filesystem::open_device(Arc::new(dev), opts)
    }

    /// Opens a filesystem on any device read-only.
    ///
    /// Refuses unknown INCOMPAT features (naming them). Unknown RO_COMPAT
    /// features are reported in [`FsCore::notices`]. A journal that
    /// needs recovery is replayed into an in-memory overlay (the device is
    /// never written) and the notices say so; if the replay fails, or
    /// with [`MountOptions::norecovery`], the filesystem is opened
    /// un-replayed (as `-o ro,noload`) with a notice.
    ///
    /// # Errors
    ///
    /// As [`Filesystem::open`], or [`Filesystem::open_rw`] when
    /// `opts.write`, with `dev`'s errors as [`Error::Io`].
    pub fn open_device(dev: Arc<dyn BlockDevice>, opts: MountOptions) -> Result<Filesystem> {
        if opts.write {
            return Filesystem::open_device_rw(dev, opts);
        }
        let mut vol = Volume::open(dev.clone(), opts.cache_blocks)?;
        let mut notices = Vec::new();
        let ro = vol.sb.features.readonly_ro_compat();
        if !ro.is_empty() {
            notices.push(format!("read-only compatible feature(s) {} not supported for writing", ro.join(", ")));
        }
        if vol.sb.needs_recovery() && opts.norecovery {
            notices.push(
                "the journal needs recovery; not replayed (norecovery): the most recent committed \
                          changes may be missing"
                    .into(),
            );
        } else if vol.sb.needs_recovery() {
            let replayed = crate::journal::replay_in_memory_replaying(dev, &mut fc_replay::replay)
                .and_then(|(ov, r)| Ok((Volume::open(ov, opts.cache_blocks)?, r)));
            match replayed {
                Ok((replayed, r)) => {
                    vol = replayed;
                    notices.push(format!(
                        "the journal was replayed in memory ({} transaction(s)); the image file was not modified",
                        r.transactions
                    ));
                    notices.extend(r.warnings);
                }
                Err(e) => notices.push(format!(
                    "the journal needs recovery but replaying it failed ({e}); the image is opened without \
                     replay and may not show the most recent committed changes"
                )),
            }
        }
        notices.extend(orphan_file::pending_notice(&vol));
        let core = FsCore {
            vol: Arc::new(vol),
            notices,
            alloc: OnceLock::new(),
            subsystems: None,
            durability: Default::default(),
        };
        Ok(Filesystem { core: Arc::new(core), new_files: Default::default() })
    }

    fn open_device_rw(dev: Arc<dyn BlockDevice>, opts: MountOptions) -> Result<Filesystem> {
        if dev.read_only() {
            return Err(Error::ReadOnly("the device is read-only".into()));
        }
        let mut notices = Vec::new();
        let probe = Volume::open(dev.clone(), 64)?;
        mount::check_writable(&probe.sb)?;
        // Before anything is written (journal recovery included), as the
        // kernel's ext4_fill_super does.
        let mmp = mmp::claim(&dev, &probe.sb, opts.mmp_wait)?;
        if probe.sb.needs_recovery() && opts.norecovery {
            return Err(Error::ReadOnly(
                "the journal needs recovery and norecovery was given: only a read-only open may skip it".into(),
            ));
        }
        if probe.sb.needs_recovery() {
            drop(probe);
            let r = crate::journal::recover_replaying(dev.clone(), &mut fc_replay::replay)?;
            notices.push(format!("the journal was replayed ({} transaction(s))", r.transactions));
            notices.extend(r.warnings);
        } else {
            drop(probe);
        }
        // Every flush goes through the error tracker, so a failed one
        // reaches the files whose data it lost (fs/errors.rs).
        let errs = Arc::new(errors::WbErrors::default());
        let dev: Arc<dyn BlockDevice> = Arc::new(errors::TrackedDevice::new(dev, errs.clone()));
        let vol = Arc::new(Volume::open(dev, opts.cache_blocks)?);
        mount::check_root(&vol)?;
        let mut acfg = AllocConfig::default();
        if opts.alloc_cache_bytes != 0 {
            acfg.loaded_budget_bytes = opts.alloc_cache_bytes;
        }
        let alloc = Arc::new(Allocator::new(vol.clone(), acfg)?);
        let mut rw = mount::Subsystems::start(
            &vol,
            &alloc,
            opts.commit_interval,
            opts.use_reserved,
            opts.data,
            opts.cache_bytes,
            mmp,
            errs,
        )?;
        rw.data.atimes = atime::Atimes::new(opts.atime, opts.lazytime, opts.commit_interval);
        rw.data.atimes.nodiratime = opts.nodiratime;
        let alloc_cell = OnceLock::new();
        let _ = alloc_cell.set(alloc);
        let durability = sync::Durability::of(&opts);
        let mut core = FsCore { vol, notices, alloc: alloc_cell, subsystems: Some(rw), durability };
        let (deleted, truncated) = core.orphan_cleanup()?;
        if deleted + truncated > 0 {
            core.notices.push(format!("orphan list: {deleted} inode(s) deleted, {truncated} truncated"));
        }
        let core = Arc::new(core);
        core.start_writeback(Arc::downgrade(&core));
        Ok(Filesystem { core, new_files: Default::default() })
    }
}

impl FsCore {
    /// Refuses a filesystem whose root inode is no usable directory (not a
    /// directory, no size or no blocks), as the kernel's mount does
    /// ("corrupt root inode, run e2fsck"): a corruption error naming it.
    /// A read-write open checks this itself; a read-only open does not,
    /// so that inspection (superblock, groups, free space, inodes by
    /// number) still works on such an image, and a front end that serves
    /// paths (a mount) calls this first.
    pub fn check_root(&self) -> Result<()> {
        mount::check_root(&self.vol)
    }

    /// Warnings produced while opening (unsupported features, unreplayed journal).
    pub fn notices(&self) -> &[String] {
        &self.notices
    }

    /// The superblock as the filesystem holds it now, for inspection
    /// tools that show its fields (`uext4 info`).
    pub fn superblock(&self) -> &Superblock {
        &self.vol.sb
    }

    /// All group descriptors as the filesystem holds them now, for
    /// inspection tools that show per-group counts.
    pub fn group_descs(&self) -> &[GroupDesc] {
        &self.vol.groups
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> u32 {
        self.vol.block_size as u32
    }

    /// True unless opened read-write (and not yet unmounted).
    pub fn is_read_only(&self) -> bool {
        self.live().is_none()
    }

    /// The block allocator (created on first use with the default
    /// configuration).
    pub(crate) fn allocator(&self) -> Result<&Allocator> {
        if let Some(a) = self.alloc.get() {
            return Ok(a);
        }
        let a = Arc::new(Allocator::new(self.vol.clone(), AllocConfig::default())?);
        Ok(self.alloc.get_or_init(|| a))
    }

    /// The allocator's counters (mb_stats): take one before and one after
    /// a workload to see what it cost the block allocator.
    pub fn alloc_stats(&self) -> Result<AllocStats> {
        Ok(self.allocator()?.stats())
    }

    /// The inode allocator's work counters (None when read-only).
    pub fn inode_alloc_stats(&self) -> Option<crate::alloc::inodes::InodeAllocStats> {
        self.live().map(|rw| rw.ialloc.stats())
    }

    /// Free-space fragmentation over the whole filesystem (reads every
    /// block bitmap, verifying its checksum).
    pub fn free_extent_histogram(&self) -> Result<FreeExtentHistogram> {
        self.allocator()?.free_extent_histogram()
    }

    /// The shared volume (superblock, descriptors, metadata cache).
    #[cfg(test)]
    pub(crate) fn volume(&self) -> &Arc<Volume> {
        &self.vol
    }

    /// Metadata cache counters: take one before and one after a workload
    /// to see its metadata cache misses.
    pub fn cache_stats(&self) -> crate::cache::CacheStats {
        self.vol.cache.stats()
    }

    /// The root directory's inode number: where inode-level walks start
    /// (path-based calls start there on their own).
    pub fn root(&self) -> u32 {
        ROOT_INO
    }
}
