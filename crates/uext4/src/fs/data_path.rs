//! The data path's state: the per-inode I/O state (locks, in-flight
//! direct I/O, cached folios), the page cache's budget and accounts, the
//! dirty-file list and background writeback, the I/O counters, the
//! switches in force, and the per-file writeback errors.
//!
//! The operations over this state (buffered and direct reads and
//! writes, writeback, seek) are in `fs/buffered.rs`, `fs/direct.rs`,
//! `fs/writeback.rs` and `fs/seek.rs`; the namespace operations use its
//! inode locks. Policy without I/O is in [`crate::data`].

use super::errors::WbErrors;
use super::writeback::Writeback;
use crate::data::page_cache::PageCache;
use crate::data::{DataPathConfig, IoStats};
use crate::data::{FileIo, FileLocks};
use std::sync::Arc;

/// The state of the data path of a filesystem opened read-write.
#[derive(Debug)]
pub(crate) struct DataPath {
    locks: FileLocks,
    pages: PageCache,
    writeback: Writeback,
    stats: IoStats,
    config: DataPathConfig,
    errors: Arc<WbErrors>,
    /// The access-time policy and the inodes whose new atime waits to be
    /// written (`fs/atime.rs`).
    pub(crate) atimes: super::atime::Atimes,
}

impl DataPath {
    /// The data path with `config`, a page cache of `cache_bytes` (0: the
    /// default budget), and `errors` (shared with the tracked device that
    /// reports failed flushes into it).
    pub(crate) fn new(config: DataPathConfig, cache_bytes: usize, errors: Arc<WbErrors>) -> DataPath {
        DataPath {
            locks: FileLocks::default(),
            pages: PageCache::new(if cache_bytes == 0 { PageCache::default_budget() } else { cache_bytes }),
            writeback: Writeback::default(),
            stats: IoStats::default(),
            config,
            errors,
            atimes: Default::default(),
        }
    }

    /// The I/O state of inode `ino` (one hash lookup).
    #[inline]
    pub(crate) fn inode(&self, ino: u32) -> Arc<FileIo> {
        self.locks.inode(ino)
    }

    /// The I/O state of inode `ino` if the table holds it (a pending
    /// atime keeps it there), without adding it.
    #[inline]
    pub(crate) fn peek(&self, ino: u32) -> Option<Arc<FileIo>> {
        self.locks.get(ino)
    }

    /// The inode lock table (the namespace locks several inodes in order).
    #[inline]
    pub(crate) fn locks(&self) -> &FileLocks {
        &self.locks
    }

    /// The page cache's budget, eviction and space accounts.
    #[inline]
    pub(crate) fn pages(&self) -> &PageCache {
        &self.pages
    }

    /// The dirty-file list and the background writeback thread.
    #[inline]
    pub(crate) fn writeback(&self) -> &Writeback {
        &self.writeback
    }

    /// Which paths the I/O took.
    #[inline]
    pub(crate) fn stats(&self) -> &IoStats {
        &self.stats
    }

    /// The switches in force.
    #[inline]
    pub(crate) fn config(&self) -> &DataPathConfig {
        &self.config
    }

    /// Per-file writeback errors and flush windows.
    #[inline]
    pub(crate) fn errors(&self) -> &WbErrors {
        &self.errors
    }
}
