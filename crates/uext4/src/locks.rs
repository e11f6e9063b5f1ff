//! Lock types, the per-inode lock table, and the one place that states
//! the lock order.
//!
//! The table ([`InodeLocks`]) holds each inode's locks and in-flight
//! direct-I/O count together with a state of its user's choosing (the
//! data path keeps its folios there, [`crate::data::FileData`]), so one
//! hash lookup finds both; this module knows nothing of that state.
//!
//! # Lock order (outer first)
//!
//! 1. The rename lock (fs-wide mutex, `NamespaceState::lock_rename` in
//!    `fs/namespace`): only renames that move an entry
//!    between two directories, as the VFS's `s_vfs_rename_mutex`; it keeps
//!    the tree's shape (which directory is an ancestor of which) as the
//!    rename checked it, before any inode lock, until it is done.
//! 2. Inode I/O locks ([`InodeIo::io`], the kernel's `i_rwsem`) of
//!    directories and other files alike, several always in increasing
//!    inode number ([`InodeLocks::lock_exclusive`]). An operation finds
//!    the inodes it must lock (a rename's or unlink's victims) by lookups
//!    under each directory's lock *shared*, locks them all, then looks
//!    again and starts over if a name changed meanwhile. What the VFS
//!    refuses (a directory moved into its own subtree, a rename over an
//!    ancestor of the source, a hard link to a directory, unlink of "."
//!    or "..") is refused before any inode lock. Number order is safe for
//!    a parent and its child because only renames between directories
//!    change which is which, and they hold `rename_lock`.
//!    Directory readers (lookup, readdir, path walks, the rename's
//!    ancestor walk) hold the directory's lock shared, one at a time, so
//!    they never see a change half done (a block turned into an htree
//!    root before the inode says so, a leaf split, a new block).
//!    Exclusive holders that change a file's blocks first wait for the
//!    inode's in-flight direct I/O to drain ([`InodeIo::dio_wait`], the
//!    kernel's `inode_dio_wait`).
//! 3. Folio locks ([`crate::data::page_cache::Folio::lock`]) come after
//!    the I/O lock (buffered readers take none), several of one file in
//!    increasing index order; then the invalidate lock
//!    ([`InodeIo::invalidate`]) of that file: shared by a folio fill
//!    (inside the folio lock), exclusive (with no folio lock held) by
//!    truncate and punch, before their handle. Writeback holds the I/O
//!    lock exclusively and the locks of the folios it writes, then
//!    starts a handle (4) for the allocation: the same order as any
//!    allocating write.
//! 4. A journal handle ([`crate::journal::Handle`]): started only after
//!    every inode lock the operation needs is held, and never while
//!    holding another handle (a handle waits for a commit, which waits for
//!    all handles to stop).
//! 5. The mapping lock ([`InodeIo::map`], the kernel's `i_data_sem`) of
//!    one inode: shared for extent lookups on the data path, exclusive
//!    while the extent tree and the inode record change under a *shared*
//!    I/O lock (unwritten-to-written conversion at direct-I/O completion,
//!    lazy time updates). Taken inside the handle, as ext4 takes
//!    `i_data_sem` inside `journal_start`: a thread holding it never waits
//!    for a commit.
//! 6. The orphan-list mutex (`OpenFiles::lock_orphans` in
//!    `fs/open_files.rs`), only around a change of the orphan chain or
//!    of the orphan file's slots. Then the quota mutex
//!    ([`crate::quota::Quotas`]), around a change of usage and of the
//!    quota files (which may allocate: group locks come after it).
//! 7. An allocator group's load lock, then allocator group locks
//!    ([`crate::alloc`]: block and inode groups), one of each at a time.
//!    The load lock is taken only while the group is not loaded yet, and
//!    held across the read of its bitmap: the group's first loader reads
//!    and installs, later ones wait for that and find it loaded (the
//!    kernel loads a buddy under the group's `alloc_sem` the same way). A
//!    second reader could not do better than wait: once the first has
//!    installed the group and allocated from it, the bitmap block in the
//!    cache is newer than the descriptor read at open, and verifying one
//!    against the other would report corruption that is not there.
//!    Between the two, an inode group's journaling lock, held while its
//!    bitmap and descriptor are journaled from a copy taken under the
//!    group lock (so that the group lock itself is held only for the
//!    copy: `InodeAllocator::journal_group`).
//! 8. Buffer-cache stripe locks ([`crate::cache::BufferCache::lock_block`]),
//!    one at a time.
//! 9. The journal's state lock, then cache shard locks (innermost, short).
//!    Also innermost: a slot of the names lookups found absent
//!    (`fs/namespace/absent.rs`), taken under a directory's I/O lock for
//!    a compare and a copy, nothing taken inside it.
//!
//! Checked: in debug builds every acquisition of 1-8 and of the journal
//! state lock is checked against this order by [`crate::lock_order`] (a
//! panic naming both locks on a violation); nothing is checked in release
//! builds. Not checked: try-locks (they never wait: eviction's folio
//! try-lock), the cache shard locks and absent-name slots (innermost), the allocator's internal
//! locks other than the group locks (see [`crate::alloc`]), and that
//! several folio locks belong to one file.
//!
//! Why: 1-3 are the VFS rules, so that the FUSE front end (which issues
//! operations in any order) and library users cannot deadlock; 4 is jbd2's rule that
//! `i_rwsem` is taken outside `journal_start`; 5 follows ext4; 6-9 are
//! leaf locks held for a few hundred nanoseconds and never across device
//! I/O (except a group's load lock across its first bitmap read, above,
//! and a stripe lock across the read of a block being changed that was
//! not cached, see the cache).
//!
//! Device I/O of file data is never done under the mapping lock: the
//! direct-I/O paths look the blocks up under it, drop it, write, and take
//! it again (exclusively, in a handle) only to convert unwritten extents.
//! They keep the I/O lock (shared) across the device write, which is what
//! keeps truncate and punch (exclusive) from freeing those blocks under
//! them.
//!
//! Metadata readers see immutable, consistent block versions
//! (copy-on-write cache), but a directory change spans several blocks
//! and the inode: directory readers hold its I/O lock shared (above).
//! `stat` takes no lock (one inode record is one block version).
//! Direct reads take the I/O lock shared; buffered reads take none (the
//! folio locks and, for a fill, the invalidate lock order them with
//! writers, truncate and punch).

use crate::int_hash::IntMap;
use crate::lock_order::{self, Class, Held};
use parking_lot::{
    ArcRwLockReadGuard, ArcRwLockWriteGuard, Condvar, Mutex, RawRwLock, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

const SHARDS: usize = 64;

/// A reader-writer lock of one inode whose acquisitions are checked
/// against the lock order (see [`crate::lock_order`]; debug builds), in
/// an allocation of its own so that a guard can own a reference to it
/// (the I/O lock, [`IoLock`]). It guards the count of its exclusive
/// holds that ended ([`IoStamp`]): exclusive holds are taken only by
/// [`InodeLocks::lock_exclusive`], whose [`Locked`] raises the count.
#[derive(Debug)]
pub struct OrderedLock {
    class: Class,
    ino: u32,
    lock: Arc<RwLock<u64>>,
}

/// A guard of an [`OrderedLock`]: the lock and its record in the
/// lock-order checker are released together on drop.
#[derive(Debug)]
pub struct Ordered<G> {
    _guard: G,
    _held: Held,
}

impl<G: std::ops::Deref> std::ops::Deref for Ordered<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self._guard
    }
}

impl<G: std::ops::DerefMut> std::ops::DerefMut for Ordered<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self._guard
    }
}

impl<G> Ordered<G> {
    /// The underlying guard (to wait on a condition variable with it: the
    /// lock stays recorded as held meanwhile, which is what the waiter
    /// holds when it wakes).
    pub fn guard_mut(&mut self) -> &mut G {
        &mut self._guard
    }
}

/// Takes a lock with `lock` after recording it in the lock-order checker
/// as `(class, key)` (see [`lock_order::acquire`]): for the locks of the
/// order that are plain mutexes (folio, orphan-list, allocator group,
/// buffer-cache stripe, journal state). In release builds this is
/// `lock()` itself.
#[inline]
pub fn ordered<G>(class: Class, key: u64, lock: impl FnOnce() -> G) -> Ordered<G> {
    let held = lock_order::acquire(class, key);
    Ordered { _guard: lock(), _held: held }
}

impl OrderedLock {
    fn new(class: Class, ino: u32) -> Self {
        OrderedLock { class, ino, lock: Arc::default() }
    }

    /// Locks shared.
    pub fn read(&self) -> Ordered<RwLockReadGuard<'_, u64>> {
        let held = lock_order::acquire(self.class, self.ino.into());
        Ordered { _guard: self.lock.read(), _held: held }
    }

    /// Locks shared, with a guard that owns a reference to the lock.
    pub fn read_arc(&self) -> Ordered<ArcRwLockReadGuard<RawRwLock, u64>> {
        let held = lock_order::acquire(self.class, self.ino.into());
        Ordered { _guard: self.lock.read_arc(), _held: held }
    }

    /// Locks exclusively, with a guard that owns a reference to the lock:
    /// only for [`InodeLocks::lock_exclusive`], which counts the hold.
    fn write_arc(&self) -> Ordered<ArcRwLockWriteGuard<RawRwLock, u64>> {
        let held = lock_order::acquire(self.class, self.ino.into());
        Ordered { _guard: self.lock.write_arc(), _held: held }
    }

    /// True if a guard that owns a reference to the lock is alive.
    fn has_arc_guards(&self) -> bool {
        Arc::strong_count(&self.lock) > 1
    }
}

/// A lock of the order like [`OrderedLock`], kept inline (no allocation of
/// its own) because it is only ever taken with borrowed guards: the
/// mapping and invalidate locks, one allocation fewer each per inode
/// state made (every new file makes one).
#[derive(Debug)]
pub struct InlineLock {
    class: Class,
    ino: u32,
    lock: RwLock<()>,
}

impl InlineLock {
    fn new(class: Class, ino: u32) -> Self {
        InlineLock { class, ino, lock: RwLock::new(()) }
    }

    /// Locks shared.
    pub fn read(&self) -> Ordered<RwLockReadGuard<'_, ()>> {
        let held = lock_order::acquire(self.class, self.ino.into());
        Ordered { _guard: self.lock.read(), _held: held }
    }

    /// Locks exclusively.
    pub fn write(&self) -> Ordered<RwLockWriteGuard<'_, ()>> {
        let held = lock_order::acquire(self.class, self.ino.into());
        Ordered { _guard: self.lock.write(), _held: held }
    }
}

/// The I/O lock itself (`i_rwsem`): exclusive for any change of the
/// inode, its directory entries or its data layout; shared for reads
/// (directory lookups and listings included) and the data path's
/// overwrites. It guards the count of its exclusive holds that ended
/// ([`IoStamp`]).
pub type IoLock = OrderedLock;

/// Where an inode's I/O lock stood when a holder looked: which lock (the
/// table may drop the state of an inode nobody holds and make it anew,
/// its count at 0 again) and how many exclusive holds of it had ended.
/// Two stamps are [`IoStamp::same`] only if no exclusive hold ended in
/// between, and nothing changes an inode or a directory's entries but an
/// exclusive holder: what a reader decided under the shared lock about a
/// directory (a name is absent, its entry would go here) still holds for
/// an exclusive holder whose stamp is the same (the rule of
/// CONCURRENCY.md: re-validated after the lock is taken again).
#[derive(Debug, Clone)]
pub struct IoStamp {
    /// The lock. Weak: a stamp keeps the allocation (so no other lock can
    /// have its address while the stamp lives) but not the table entry.
    lock: Weak<RwLock<u64>>,
    ended: u64,
}

impl IoStamp {
    /// True if `self` and `other` are stamps of the same lock with the
    /// same count of ended exclusive holds.
    pub fn same(&self, other: &IoStamp) -> bool {
        Weak::ptr_eq(&self.lock, &other.lock) && self.ended == other.ended
    }
}

impl Ordered<ArcRwLockReadGuard<RawRwLock, u64>> {
    /// The stamp of the I/O lock this shared guard holds.
    pub fn stamp(&self) -> IoStamp {
        IoStamp { lock: Arc::downgrade(ArcRwLockReadGuard::rwlock(&self._guard)), ended: *self._guard }
    }
}

/// What a user of the lock table keeps per inode besides the locks (the
/// data path keeps its cached folios there: [`crate::data::FileData`]),
/// so that one hash lookup finds both. This module knows nothing of it
/// but whether an entry nobody holds must stay.
pub trait InodeState: Default + Send + Sync {
    /// True while the entry must stay in the table although nobody holds
    /// it (dirty data lives until written back).
    fn pinned(&self) -> bool {
        false
    }
}

impl InodeState for () {}

/// The in-memory, per-inode state: the locks, the in-flight direct-I/O
/// count, and the user's state `X`. Created on demand, dropped when
/// nobody holds it.
#[derive(Debug)]
pub struct InodeIo<X = ()> {
    /// `i_rwsem`.
    pub io: IoLock,
    /// `i_data_sem`: the extent tree and the inode record under a shared
    /// I/O lock (see the lock order above).
    pub map: InlineLock,
    /// Direct I/Os submitted and not completed.
    dio: AtomicUsize,
    dio_done: (Mutex<()>, Condvar),
    /// The kernel's `invalidate_lock`: shared while a folio is filled
    /// from the device (buffered readers hold no I/O lock), exclusive
    /// while blocks are freed or moved (truncate, punch, zero range), so a
    /// fill never reads a block that is being freed.
    pub invalidate: InlineLock,
    /// The lock table user's state of this inode.
    pub data: X,
}

impl<X: Default> InodeIo<X> {
    /// The state of inode `ino`, nobody holding it.
    pub fn new(ino: u32) -> InodeIo<X> {
        InodeIo {
            io: OrderedLock::new(Class::Io, ino),
            map: InlineLock::new(Class::Map, ino),
            dio: AtomicUsize::new(0),
            dio_done: Default::default(),
            invalidate: InlineLock::new(Class::Invalidate, ino),
            data: X::default(),
        }
    }

    /// Counts a direct I/O in flight until the guard drops.
    pub fn dio_begin(&self) -> DioGuard<'_, X> {
        self.dio.fetch_add(1, Ordering::AcqRel);
        DioGuard(self)
    }

    /// Waits until no direct I/O is in flight (`inode_dio_wait`). Called
    /// with the I/O lock held exclusively, so no new one can start.
    pub fn dio_wait(&self) {
        let mut g = self.dio_done.0.lock();
        while self.dio.load(Ordering::Acquire) != 0 {
            self.dio_done.1.wait(&mut g);
        }
    }
}

/// One in-flight direct I/O (see [`InodeIo::dio_begin`]).
#[derive(Debug)]
pub struct DioGuard<'a, X = ()>(&'a InodeIo<X>);

impl<X> Drop for DioGuard<'_, X> {
    fn drop(&mut self) {
        if self.0.dio.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Taking the mutex orders this with a waiter's check.
            let _g = self.0.dio_done.0.lock();
            self.0.dio_done.1.notify_all();
        }
    }
}

/// Inode I/O state, created on demand and dropped when nobody holds it.
#[derive(Debug)]
pub struct InodeLocks<X = ()> {
    /// Read-locked to find an entry (directory readers of one directory
    /// then do not queue behind each other), write-locked to add one.
    shards: Vec<RwLock<IntMap<u32, Arc<InodeIo<X>>>>>,
    /// Per shard, the size at which adding an entry first drops the
    /// entries nobody holds (changed under the shard's write lock).
    sweep_at: Vec<AtomicUsize>,
    /// Entries looked at by those sweeps (a counter for tests).
    swept: AtomicUsize,
}

/// The smallest shard that is swept (64 shards: a quarter of a million
/// entries before anything is dropped).
const SWEEP_MIN: usize = 4096;

impl<X> Default for InodeLocks<X> {
    fn default() -> Self {
        InodeLocks {
            shards: (0..SHARDS).map(|_| RwLock::new(IntMap::default())).collect(),
            sweep_at: (0..SHARDS).map(|_| AtomicUsize::new(SWEEP_MIN)).collect(),
            swept: AtomicUsize::new(0),
        }
    }
}

/// Exclusive I/O locks on several inodes, released on drop (each
/// counted then as one more ended exclusive hold: [`IoStamp`]).
pub struct Locked {
    guards: Vec<(u32, Ordered<ArcRwLockWriteGuard<RawRwLock, u64>>)>,
}

impl Locked {
    /// The stamp of `ino`'s I/O lock while this holds it, if it does:
    /// the same as a shared holder's since the last exclusive hold
    /// before this one ended.
    pub fn stamp(&self, ino: u32) -> Option<IoStamp> {
        let (_, g) = self.guards.iter().find(|(i, _)| *i == ino)?;
        Some(IoStamp { lock: Arc::downgrade(ArcRwLockWriteGuard::rwlock(&g._guard)), ended: *g._guard })
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        // Counted before the unlock: a shared holder that comes next sees
        // the new count, so its stamp differs from any taken before this
        // hold began.
        for (_, g) in &mut self.guards {
            **g = g.wrapping_add(1);
        }
    }
}

impl std::fmt::Debug for Locked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locked").field("count", &self.guards.len()).finish()
    }
}

impl<X: InodeState> InodeLocks<X> {
    /// The I/O state of inode `ino`.
    pub fn inode(&self, ino: u32) -> Arc<InodeIo<X>> {
        let k = ino as usize % SHARDS;
        let shard = &self.shards[k];
        if let Some(st) = shard.read().get(&ino) {
            return st.clone();
        }
        let mut m = shard.write();
        if m.len() > self.sweep_at[k].load(Ordering::Relaxed) {
            // Drop entries nobody holds (the map's own reference only),
            // unless their user pins them (dirty data lives until
            // written back).
            self.swept.fetch_add(m.len(), Ordering::Relaxed);
            m.retain(|_, l| Arc::strong_count(l) > 1 || l.io.has_arc_guards() || l.data.pinned());
            // The next sweep waits for as many additions as entries
            // stayed: when most are held (a million new files with dirty
            // data), sweeping at every addition would cost the whole
            // shard per new inode; this way a sweep costs O(1) per
            // addition, and the table holds at most twice what is held.
            self.sweep_at[k].store((2 * m.len()).max(SWEEP_MIN), Ordering::Relaxed);
        }
        m.entry(ino).or_insert_with(|| Arc::new(InodeIo::new(ino))).clone()
    }

    /// Entries the table's sweeps looked at so far (for tests: the work of
    /// dropping unheld state must stay proportional to what is added).
    #[cfg(test)]
    pub fn swept(&self) -> usize {
        self.swept.load(Ordering::Relaxed)
    }

    /// How many inodes the table holds state for (a look at every shard:
    /// for tests and diagnostics, not for a per-operation path).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().len()).sum()
    }

    /// The I/O state of inode `ino` if the table holds it (nothing is
    /// added).
    pub fn get(&self, ino: u32) -> Option<Arc<InodeIo<X>>> {
        self.shards[ino as usize % SHARDS].read().get(&ino).cloned()
    }

    /// Locks the inodes of `dirs` and `others` (directories and other
    /// files alike) exclusively in increasing inode number, the one order
    /// of inode I/O locks, waiting for the in-flight direct I/O of each;
    /// duplicates and 0 are skipped. The caller holds no inode lock yet.
    pub fn lock_exclusive(&self, dirs: &[u32], others: &[u32]) -> Locked {
        let mut all: Vec<u32> = dirs.iter().chain(others).copied().filter(|&i| i != 0).collect();
        all.sort_unstable();
        all.dedup();
        let mut guards = Vec::with_capacity(all.len());
        for ino in all {
            let st = self.inode(ino);
            guards.push((ino, st.io.write_arc()));
            st.dio_wait();
        }
        Locked { guards }
    }

    /// Locks `ino` shared (a reader of a directory: lookups, listings).
    pub fn lock_shared(&self, ino: u32) -> Ordered<ArcRwLockReadGuard<RawRwLock, u64>> {
        self.inode(ino).io.read_arc()
    }

    /// Locks `ino` shared if the table holds it; `None` (and nothing
    /// added) if it does not, which means nobody held its I/O lock when
    /// the table was looked at: an entry whose lock is held (or whose
    /// state someone holds) is never dropped from the table. For a reader
    /// that only needs to be ordered with a change under way, and would
    /// otherwise make state for every inode it passes (a LOOKUP of each
    /// file of a walked tree).
    pub fn lock_shared_if_held(&self, ino: u32) -> Option<Ordered<ArcRwLockReadGuard<RawRwLock, u64>>> {
        self.get(ino).map(|st| st.io.read_arc())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shard whose entries are all held is not swept at every new
    /// entry: adding n entries looks at O(n) entries in all, not
    /// O(n * shard size).
    #[test]
    fn sweeps_cost_constant_per_added_entry_when_everything_is_held() {
        let t = InodeLocks::<()>::default();
        let n = 3 * SWEEP_MIN;
        // One shard (inode numbers congruent modulo SHARDS), all held.
        let held: Vec<_> = (1..=n as u32).map(|i| t.inode(i * SHARDS as u32)).collect();
        assert_eq!(t.len(), n);
        assert!(t.swept() <= 4 * n, "{} entries swept to add {n}", t.swept());
        drop(held);
        // Nothing held any more: the next sweep drops them.
        for i in 1..=(2 * n) as u32 {
            drop(t.inode((n as u32 + i) * SHARDS as u32));
        }
        assert!(t.len() <= 2 * SWEEP_MIN + 1, "{} entries kept", t.len());
    }
}
