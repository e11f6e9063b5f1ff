//! Lock types, and the one place that states the lock order.
//!
//! # Lock order (outer first)
//!
//! 1. `rename_lock` (fs-wide mutex): only renames that move an entry
//!    between two directories, as the VFS's `s_vfs_rename_mutex`; it keeps
//!    the ancestor check of a directory move stable.
//! 2. Inode I/O locks ([`InodeLock::io`], the kernel's `i_rwsem`) of
//!    directories: a parent before its child; two unrelated directories
//!    in increasing inode number.
//! 3. Inode I/O locks of non-directories, in increasing inode number.
//! 4. A journal handle ([`crate::journal::Handle`]): started only after
//!    every inode lock the operation needs is held, and never while
//!    holding another handle (a handle waits for a commit, which waits for
//!    all handles to stop).
//! 5. The orphan-list mutex (`RwState::orphan_lock`), only around a change
//!    of the orphan chain.
//! 6. Allocator group locks ([`crate::alloc`]: block and inode groups),
//!    one at a time.
//! 7. Buffer-cache stripe locks ([`crate::cache::BufferCache::lock_block`]),
//!    one at a time.
//! 8. The journal's state lock, then cache shard locks (innermost, short).
//!
//! Why: 1-3 are the VFS rules, so that the FUSE front end (which issues
//! operations in any order) cannot deadlock; 4 is jbd2's rule that
//! `i_rwsem` is taken outside `journal_start`; 5-8 are leaf locks held
//! for a few hundred nanoseconds and never across device I/O (except a
//! stripe lock across the read of a block being changed that was not
//! cached, see the cache).
//!
//! Readers (lookup, stat, read, readdir) take no inode lock: every block
//! they see is an immutable, consistent version (copy-on-write cache).

use parking_lot::{ArcRwLockReadGuard, ArcRwLockWriteGuard, Mutex, RawRwLock, RwLock};
use std::collections::HashMap;
use std::sync::Arc;

const SHARDS: usize = 64;

/// An inode's I/O lock (`i_rwsem`): exclusive for any change of the
/// inode, its directory entries or its data layout; shared for the data
/// path's overwrites.
pub type InodeLock = Arc<RwLock<()>>;

/// Inode locks, created on demand and dropped when nobody holds them.
#[derive(Debug)]
pub struct InodeLocks {
    shards: Vec<Mutex<HashMap<u32, InodeLock>>>,
}

impl Default for InodeLocks {
    fn default() -> Self {
        InodeLocks { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect() }
    }
}

/// Exclusive I/O locks on several inodes, released on drop.
pub struct Locked {
    guards: Vec<ArcRwLockWriteGuard<RawRwLock, ()>>,
}

impl std::fmt::Debug for Locked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locked").field("count", &self.guards.len()).finish()
    }
}

impl InodeLocks {
    /// The lock of inode `ino`.
    pub fn get(&self, ino: u32) -> InodeLock {
        let mut m = self.shards[ino as usize % SHARDS].lock();
        if m.len() > 4096 {
            // Drop entries nobody holds (the map's own reference only).
            m.retain(|_, l| Arc::strong_count(l) > 1);
        }
        m.entry(ino).or_default().clone()
    }

    /// Locks `dirs` in the order given (the caller orders them: parent
    /// before child, else by inode number) and then `others` sorted by
    /// inode number, all exclusively; duplicates and 0 are skipped.
    pub fn lock_exclusive(&self, dirs: &[u32], others: &[u32]) -> Locked {
        let mut seen = Vec::new();
        let mut guards = Vec::new();
        let mut others: Vec<u32> = others.to_vec();
        others.sort_unstable();
        for &ino in dirs.iter().chain(others.iter()) {
            if ino == 0 || seen.contains(&ino) {
                continue;
            }
            seen.push(ino);
            guards.push(self.get(ino).write_arc());
        }
        Locked { guards }
    }

    /// Locks `ino` shared.
    pub fn lock_shared(&self, ino: u32) -> ArcRwLockReadGuard<RawRwLock, ()> {
        self.get(ino).read_arc()
    }
}
