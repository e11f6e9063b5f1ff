//! The inode-level API: operations by inode number, for front ends.
//!
//! Use this module when you serve a filesystem to something that speaks
//! in inode numbers rather than paths: a FUSE daemon (`uext4-fuse` is
//! built on it), an NFS-style exporter, or a tool that needs directory
//! cookies, `fiemap`, quotas, project ids or the ext4 inode flags. Most
//! programs want the `std::fs`-like API at the crate root instead
//! ([`Filesystem`](crate::Filesystem), [`File`](crate::File), ...).
//!
//! [`FsCore`] holds the operations; a [`Filesystem`](crate::Filesystem)
//! derefs to it (or see [`Filesystem::inodes`](crate::Filesystem::inodes)).
//! This module also re-exports every type those operations take or
//! return, so a front end imports from one place:
//!
//! ```
//! use uext4::inode_api::{FsCore, SetAttr};
//! # fn touch(fs: &FsCore, ino: u32) -> uext4::Result<()> {
//! let now = uext4::Timestamp::now();
//! fs.setattr(ino, SetAttr { atime: Some(now), mtime: Some(now), ..Default::default() })?;
//! # Ok(()) }
//! ```
//!
//! The engine's internals (allocator, journal, transactions, caches,
//! locks) are not reachable from here on purpose: everything below
//! [`FsCore`] may change between releases.

pub use crate::dir::{DirBatch, DirEntry, DirEntryRef};
pub use crate::fs::fiemap::{FiemapExtent, FIEMAP_EXTENT_LAST, FIEMAP_EXTENT_MERGED, FIEMAP_EXTENT_UNWRITTEN};
pub use crate::fs::ops::flags;
pub use crate::fs::quota_ops::ProjectAttr;
pub use crate::fs::{sys_resource, Cred, FallocMode, FsCore, RenameFlags, SetAttr, ShutdownMode, SysResourceScope};
pub use crate::fs::{XattrSetMode, LINK_MAX};
pub use crate::inode::{MapKind, Mapping};
pub use crate::quota::{QuotaEntry, QuotaLimits};

/// Counters of the engine's subsystems, for inspection tools (`uext4
/// mbstats`, `uext4 freefrag`, `bench`): what
/// [`FsCore::alloc_stats`], [`FsCore::free_extent_histogram`],
/// [`FsCore::inode_alloc_stats`], [`FsCore::cache_stats`] and
/// [`FsCore::io_stats`] return. Their fields report; none of them steers
/// the engine.
pub mod stats {
    pub use crate::alloc::inodes::InodeAllocStats;
    pub use crate::alloc::{AllocStats, Criterion, FreeExtentHistogram};
    pub use crate::cache::CacheStats;
    pub use crate::data::IoStatsSnapshot;
}
