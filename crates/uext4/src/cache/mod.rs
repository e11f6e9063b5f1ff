//! The metadata buffer cache: [`BufferCache`] owns the in-memory copy of
//! every filesystem metadata block in use.
//!
//! The metadata blocks of the filesystem proper (group descriptors,
//! block and inode bitmaps, inode tables, extent, directory and xattr
//! blocks) are read through this cache, and changed only through it (by
//! the journal's transactions, or [`BufferCache::write`] on its no-journal
//! path). Four kinds of block are not cached: file data, which goes
//! between the device and the caller or through the data path's own page
//! cache (`crate::data`); the primary superblock, read and written whole
//! at its fixed offset; the journal's log, which the journal reads and
//! writes itself; and the MMP block, which must be read from the device
//! every time to see another node's updates.
//!
//! Locking: the cache is split into shards by block number, each a
//! `RwLock<HashMap>`. A hit takes one shard's lock *shared* for a hash
//! lookup and an `Arc` clone, so readers on different (or the same) blocks
//! never exclude each other. A miss reads the device with no lock held,
//! then takes the shard's lock exclusively to insert; if another thread
//! inserted the same block meanwhile, its buffer wins and ours is dropped.
//! Eviction is CLOCK (second chance) within a shard, under the shard's
//! write lock. A buffer someone still holds (`Arc` count > 1: a running or
//! committing transaction, the checkpoint list) is never evicted, so a
//! block whose newest version is not yet on disk always stays cached.
//!
//! Buffers are immutable. A metadata change is copy-on-write
//! ([`BufferCache::lock_block`]): take the block's stripe lock, copy the
//! current version, change the copy and install it as the new version.
//! Readers holding the old `Arc` keep a consistent old version; the
//! journal gets its "frozen" copies for free (a committing transaction
//! simply keeps the versions it closed with). The stripe lock serializes
//! read-modify-write of one block (two inodes in one inode-table block,
//! two groups in one descriptor block); it is never held while another
//! block's stripe lock is taken.

use crate::counter::StripedCounter;
use crate::device::BlockDevice;
use crate::error::Result;
use crate::int_hash::IntMap;
use parking_lot::{Mutex, MutexGuard, RwLock};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

pub mod pool;

const SHARDS: usize = 64;
/// Stripe locks for copy-on-write modification.
const STRIPES: usize = 256;

/// One cached metadata block.
pub struct Buffer {
    block: u64,
    /// The bytes. Changed in place only through an [`Edit`], while no one
    /// but the cache and the running transaction holds this version.
    data: UnsafeCell<Box<[u8]>>,
    referenced: AtomicBool,
    /// Checks this version passed (see [`Buffer::is_verified`]).
    verified: AtomicU64,
    /// Inode records of this version whose checksum was verified, one bit
    /// per record slot (the first 64).
    verified_slots: AtomicU64,
    /// The tag of the running transaction whose block list holds this
    /// version ([`Buffer::set_owner`]), 0 if none: only that
    /// transaction's handles may change it in place. Written only under
    /// the block's stripe lock.
    owner: AtomicU64,
    /// An [`Edit`] is changing the bytes: [`BufferCache::get`] waits.
    editing: AtomicBool,
}

// SAFETY: the bytes behind the `UnsafeCell` are written only through an
// `Edit`, which exists only while this version is reachable by no other
// thread: the cache's map (whose readers wait while `editing` is set,
// set under the shard's write lock) and the running transaction's block
// list (read by nobody while one of its handles is running) hold the
// only references besides the editor's (see `BlockGuard::edit`).
// Everything else is atomics or immutable.
unsafe impl Sync for Buffer {}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer").field("block", &self.block).finish_non_exhaustive()
    }
}

impl Drop for Buffer {
    /// The version's memory goes back to the block pool ([`pool`]).
    fn drop(&mut self) {
        pool::give(std::mem::take(self.data.get_mut()));
    }
}

impl Buffer {
    fn new(block: u64, data: Box<[u8]>, referenced: bool) -> Buffer {
        Buffer {
            block,
            data: UnsafeCell::new(data),
            referenced: AtomicBool::new(referenced),
            verified: AtomicU64::new(0),
            verified_slots: AtomicU64::new(0),
            owner: AtomicU64::new(0),
            editing: AtomicBool::new(false),
        }
    }

    /// The block's bytes.
    pub fn data(&self) -> &[u8] {
        // SAFETY: whoever can call this holds a reference to this version,
        // and an `Edit` exists only while nobody but the editor does (see
        // `unsafe impl Sync`); the editor reads through the `Edit`.
        unsafe { &*self.data.get() }
    }

    /// Records that the running transaction tagged `tag` holds this
    /// version in its block list (0: none holds it any more). The caller
    /// holds the block's stripe lock ([`BufferCache::lock_block`]) and
    /// says 0 before the transaction drops its reference while it runs;
    /// the committer says 0 once the transaction is closed (no handle of
    /// it is left to change the version in place).
    pub(crate) fn set_owner(&self, tag: u64) {
        self.owner.store(tag, Ordering::Relaxed);
    }

    /// True once [`Buffer::set_verified`] recorded that this version
    /// passed `check` with checksum seed `seed`. A version's bytes never
    /// change, so a check it passed holds for as long as it is cached:
    /// like the kernel's buffer_verified, the checksum of a cached block
    /// is computed once, not at every lookup (a directory leaf, an extent
    /// block and an htree node are read several times by every create).
    /// One check is kept: a block read as two things, or for two owners
    /// (a corrupt image), is checked each time.
    pub fn is_verified(&self, check: Check, seed: u32) -> bool {
        self.verified.load(Ordering::Relaxed) == check.tag(seed)
    }

    /// Records that this version passed `check` with `seed` (see
    /// [`Buffer::is_verified`]).
    pub fn set_verified(&self, check: Check, seed: u32) {
        let tag = check.tag(seed);
        if self.verified.load(Ordering::Relaxed) != tag {
            self.verified.store(tag, Ordering::Relaxed);
        }
    }

    /// True once the inode record in slot `slot` of this inode-table
    /// block was verified ([`Buffer::set_slot_verified`]); always false
    /// past the 64th slot.
    pub fn slot_verified(&self, slot: usize) -> bool {
        slot < 64 && self.verified_slots.load(Ordering::Relaxed) & (1 << slot) != 0
    }

    /// Records that the inode record in slot `slot` passed its checks.
    pub fn set_slot_verified(&self, slot: usize) {
        if slot < 64 && !self.slot_verified(slot) {
            self.verified_slots.fetch_or(1 << slot, Ordering::Relaxed);
        }
    }
}

/// The checks of a block's contents that [`Buffer::is_verified`]
/// remembers (each with the checksum seed it used).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// A directory leaf block (entries and checksum tail).
    DirLeaf = 1,
    /// An htree root block's index.
    DxRoot = 2,
    /// An htree interior node's index.
    DxNode = 3,
    /// An extent tree block below the inode.
    ExtentBlock = 4,
}

impl Check {
    fn tag(self, seed: u32) -> u64 {
        (self as u64) << 32 | u64::from(seed)
    }
}

/// Hit and miss counters of the metadata block cache, returned by
/// [`FsCore::cache_stats`](crate::FsCore::cache_stats): compare two
/// snapshots to see how many metadata reads a workload missed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups answered from memory.
    pub hits: u64,
    /// Lookups that read the device.
    pub misses: u64,
    /// Buffers dropped to stay within capacity.
    pub evictions: u64,
    /// Values computed from a buffer version (`BufferCache::derived`):
    /// each a walk of one block (a directory block put in listing order).
    pub derived_builds: u64,
    /// Buffers held now (those a transaction or the journal's checkpoint
    /// list pins included, which may take it past its capacity).
    pub resident: u64,
}

/// Slots of the table of values derived from buffers
/// ([`BufferCache::derived`]).
pub const DERIVED_SLOTS: usize = 1024;

/// Slots a value may take in [`BufferCache::derived`]'s table (the table
/// is set-associative: a few hot values whose blocks hash alike, the
/// index blocks of one directory, must not keep displacing each other).
const DERIVED_WAYS: usize = 4;

/// One value of [`BufferCache::derived`]'s table and the buffer version
/// it was computed from.
struct DerivedValue {
    buf: std::sync::Weak<Buffer>,
    kind: u64,
    value: Arc<dyn std::any::Any + Send + Sync>,
}

/// [`BufferCache::derived`]'s table (one mutex per slot: held for a
/// pointer comparison and an `Arc` clone, never while building), and per
/// set the way the next new value displaces when none is free.
struct Derived {
    slots: Box<[Mutex<Option<DerivedValue>>]>,
    next_victim: Box<[std::sync::atomic::AtomicU8]>,
}

impl Default for Derived {
    fn default() -> Derived {
        Derived {
            slots: (0..DERIVED_SLOTS).map(|_| Mutex::new(None)).collect(),
            next_victim: (0..DERIVED_SLOTS / DERIVED_WAYS).map(|_| std::sync::atomic::AtomicU8::new(0)).collect(),
        }
    }
}

/// One shard of the cache: its buffers, and the size at which the next
/// eviction sweep runs.
#[derive(Default)]
struct Shard {
    map: IntMap<u64, Arc<Buffer>>,
    /// The shard's length that makes an insertion sweep it: its capacity,
    /// or more after a sweep that could not get below it (buffers in use
    /// are never dropped: a transaction or the checkpoint list may pin
    /// more blocks than the cache holds), so that the next sweep waits
    /// for a quarter as many insertions as buffers stayed and a sweep's
    /// cost is amortized over them, not paid at every miss.
    evict_at: usize,
}

/// A sharded, concurrent cache of metadata blocks.
pub struct BufferCache {
    dev: Arc<dyn BlockDevice>,
    block_size: usize,
    per_shard: usize,
    shards: Vec<RwLock<Shard>>,
    stripes: Vec<Mutex<()>>,
    hits: StripedCounter,
    misses: StripedCounter,
    evictions: StripedCounter,
    derived_builds: StripedCounter,
    derived: Derived,
}

impl std::fmt::Debug for BufferCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferCache").field("block_size", &self.block_size).finish_non_exhaustive()
    }
}

impl BufferCache {
    /// A cache over `dev` for blocks of `block_size` bytes, holding about
    /// `capacity` blocks.
    pub fn new(dev: Arc<dyn BlockDevice>, block_size: usize, capacity: usize) -> BufferCache {
        BufferCache {
            dev,
            block_size,
            per_shard: (capacity / SHARDS).max(4),
            shards: (0..SHARDS).map(|_| RwLock::new(Shard::default())).collect(),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            hits: StripedCounter::default(),
            misses: StripedCounter::default(),
            evictions: StripedCounter::default(),
            derived_builds: StripedCounter::default(),
            derived: Derived::default(),
        }
    }

    /// A value computed from one version of a block (a directory block's
    /// entries in listing order), built by `build` from `buf` the first
    /// time and reused while `buf` is the version asked about: the table
    /// remembers the version by identity (a weak reference, which keeps
    /// its allocation, and so its address, from being reused), so a new
    /// version of the block (buffers are immutable, a change installs a
    /// new one) never finds a value computed from an older one. `kind`
    /// tells apart the values of different builders over one block.
    ///
    /// Bounded: a small set-associative table ([`DERIVED_SLOTS`] values,
    /// a few ways per set), a new value taking the way of a value whose
    /// buffer version is gone, else displacing the set's ways in turn; it
    /// pins no buffer.
    pub fn derived<T: std::any::Any + Send + Sync>(
        &self,
        buf: &Arc<Buffer>,
        kind: u64,
        build: impl FnOnce(&Buffer) -> Result<T>,
    ) -> Result<Arc<T>> {
        let (set, ways) = self.derived_ways(buf, kind);
        let free = match Self::derived_find::<T>(ways, buf, kind) {
            Ok(v) => return Ok(v),
            Err(free) => free,
        };
        self.derived_builds.add(1);
        let v = Arc::new(build(buf)?);
        self.derived_put(set, ways, free, buf, kind, v.clone());
        Ok(v)
    }

    /// Records `value` as what [`BufferCache::derived`] with `kind` would
    /// build from `buf`, for a writer that made the version from that
    /// value (an extent node it encoded): the next reader finds it instead
    /// of decoding the block again. `value` must be exactly what the
    /// builder would return for `buf`'s bytes.
    pub(crate) fn seed_derived<T: std::any::Any + Send + Sync>(&self, buf: &Arc<Buffer>, kind: u64, value: Arc<T>) {
        let (set, ways) = self.derived_ways(buf, kind);
        if let Err(free) = Self::derived_find::<T>(ways, buf, kind) {
            self.derived_put(set, ways, free, buf, kind, value);
        }
    }

    /// The set of [`BufferCache::derived`]'s table `buf`'s `kind` goes to.
    fn derived_ways(&self, buf: &Buffer, kind: u64) -> (usize, &[Mutex<Option<DerivedValue>>]) {
        let sets = DERIVED_SLOTS / DERIVED_WAYS;
        let h = (buf.block ^ kind.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 48;
        let set = h as usize % sets;
        (set, &self.derived.slots[set * DERIVED_WAYS..(set + 1) * DERIVED_WAYS])
    }

    /// The value of `buf`'s `kind` in `ways`, else the way a new one may
    /// take without displacing a live value (an empty one, or one whose
    /// buffer version is gone: it can never be asked for again).
    fn derived_find<T: std::any::Any + Send + Sync>(
        ways: &[Mutex<Option<DerivedValue>>],
        buf: &Arc<Buffer>,
        kind: u64,
    ) -> std::result::Result<Arc<T>, Option<usize>> {
        let mut free = None;
        for (w, slot) in ways.iter().enumerate() {
            match &*slot.lock() {
                Some(d) if d.kind == kind && std::ptr::eq(d.buf.as_ptr(), Arc::as_ptr(buf)) => {
                    if let Ok(v) = d.value.clone().downcast::<T>() {
                        return Ok(v);
                    }
                    free = free.or(Some(w));
                }
                Some(d) if d.buf.strong_count() > 0 => {}
                _ => free = free.or(Some(w)),
            }
        }
        Err(free)
    }

    /// Stores `value` in way `free` of set `set`, or, with none free, in
    /// the set's next victim.
    fn derived_put(
        &self,
        set: usize,
        ways: &[Mutex<Option<DerivedValue>>],
        free: Option<usize>,
        buf: &Arc<Buffer>,
        kind: u64,
        value: Arc<dyn std::any::Any + Send + Sync>,
    ) {
        let w = free.unwrap_or_else(|| {
            usize::from(self.derived.next_victim[set].fetch_add(1, Ordering::Relaxed)) % DERIVED_WAYS
        });
        *ways[w].lock() = Some(DerivedValue { buf: Arc::downgrade(buf), kind, value });
    }

    /// The device under the cache.
    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }

    /// The block size.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    fn shard(&self, block: u64) -> &RwLock<Shard> {
        // Multiplicative hash so that runs of consecutive blocks (an inode
        // table) spread over all shards.
        let h = block.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
        &self.shards[h as usize % SHARDS]
    }

    /// Returns block `block`, reading it from the device on a miss.
    ///
    /// A version being changed in place ([`BlockGuard::edit`]) is waited
    /// for: the change is a few stores by a thread that takes no lock and
    /// reads no other block meanwhile, and the reader then gets the
    /// changed version, as if the change had been a new version installed
    /// just before.
    pub fn get(&self, block: u64) -> Result<Arc<Buffer>> {
        #[cfg(debug_assertions)]
        edit_scope::check_not_editing(block);
        self.get_inner(block)
    }

    fn get_inner(&self, block: u64) -> Result<Arc<Buffer>> {
        let shard = self.shard(block);
        let mut data = None;
        loop {
            match self.lookup(shard, block, data.is_some()) {
                Lookup::Hit(b) => return Ok(b),
                Lookup::Editing => edit_scope::wait_for_edit(shard, block)?,
                Lookup::Miss => {}
            }
            let Some(d) = data.take() else {
                self.misses.bump();
                let offset = block.checked_mul(self.block_size as u64).ok_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("block {block} out of range"))
                })?;
                let mut d = pool::zeroed(self.block_size);
                self.dev.read_at(&mut d, offset)?;
                data = Some(d);
                continue;
            };
            // Still a miss after the read: ours goes in, unless another
            // thread inserted the block meanwhile (its version wins).
            let buf = Arc::new(Buffer::new(block, d, false));
            let mut shard = shard.write();
            match shard.map.get(&block) {
                Some(existing) if existing.editing.load(Ordering::Acquire) => {
                    drop(shard);
                    edit_scope::wait_for_edit(self.shard(block), block)?;
                    continue;
                }
                Some(existing) => return Ok(existing.clone()),
                None => {}
            }
            self.make_room(&mut shard, block);
            shard.map.insert(block, buf.clone());
            return Ok(buf);
        }
    }

    /// One look in `shard` for `block` (a hit counts as one unless it
    /// completes a miss that read the device).
    fn lookup(&self, shard: &RwLock<Shard>, block: u64, after_read: bool) -> Lookup {
        let map = shard.read();
        let Some(b) = map.map.get(&block) else { return Lookup::Miss };
        // Acquire: the bytes of an edit that just ended are seen.
        if b.editing.load(Ordering::Acquire) {
            return Lookup::Editing;
        }
        // Only a store when the bit changes: hot buffers are read by
        // every core and must not bounce on a needless write.
        if !b.referenced.load(Ordering::Relaxed) {
            b.referenced.store(true, Ordering::Relaxed);
        }
        if !after_read {
            self.hits.bump();
        }
        Lookup::Hit(b.clone())
    }

    /// Writes `data` (a whole block) to the device and makes it the cached
    /// contents of `block`. Callers that read-modify-write a block shared
    /// by several users (a descriptor block) serialize among themselves.
    pub fn write(&self, block: u64, data: &[u8]) -> Result<()> {
        if data.len() != self.block_size {
            return Err(crate::error::Error::Invalid(format!("write of {} bytes to a block", data.len())));
        }
        let offset = block.checked_mul(self.block_size as u64).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("block {block} out of range"))
        })?;
        self.dev.write_at(data, offset)?;
        let buf = Arc::new(Buffer::new(block, data.into(), true));
        let mut shard = self.shard(block).write();
        self.make_room(&mut shard, block);
        shard.map.insert(block, buf);
        Ok(())
    }

    /// Locks `block` for a copy-on-write change (see the module docs).
    ///
    /// The caller must not lock another block while holding the guard
    /// (two blocks can share a stripe).
    pub fn lock_block(&self, block: u64) -> BlockGuard<'_> {
        let h = (block.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize % STRIPES;
        let lock = crate::locks::ordered(crate::lock_order::Class::Stripe, block, || self.stripes[h].lock());
        BlockGuard { cache: self, block, _lock: lock }
    }

    /// Makes `data` the cached version of `block`; returns it and the
    /// version it replaced, which the caller drops once it holds no lock
    /// (freeing a block's memory can wait on the allocator).
    fn install(&self, block: u64, data: Box<[u8]>) -> (Arc<Buffer>, Option<Arc<Buffer>>) {
        let buf = Arc::new(Buffer::new(block, data, true));
        let mut shard = self.shard(block).write();
        self.make_room(&mut shard, block);
        let old = shard.map.insert(block, buf.clone());
        drop(shard);
        (buf, old)
    }

    /// Drops `block` from the cache (a freed metadata block that may be
    /// reused for file data, which bypasses the cache).
    pub fn forget(&self, block: u64) {
        self.shard(block).write().map.remove(&block);
    }

    /// Sweeps `shard` if adding `block` would take it to its sweep size.
    fn make_room(&self, shard: &mut Shard, block: u64) {
        if shard.map.len() >= shard.evict_at.max(self.per_shard) && !shard.map.contains_key(&block) {
            self.evict(&mut shard.map);
            shard.evict_at = shard.map.len() + shard.map.len() / 4;
        }
    }

    /// CLOCK sweep: drop unreferenced buffers, clearing the bit of the
    /// others, until a quarter of the shard is free.
    fn evict(&self, map: &mut IntMap<u64, Arc<Buffer>>) {
        let target = self.per_shard - self.per_shard / 4;
        for _pass in 0..2 {
            map.retain(|_, b| b.referenced.swap(false, Ordering::Relaxed) || Arc::strong_count(b) > 1);
            if map.len() <= target {
                break;
            }
        }
        // Everything is hot or in use: drop arbitrary unused entries.
        if map.len() > target {
            let excess = map.len() - target;
            let victims: Vec<u64> =
                map.iter().filter(|(_, b)| Arc::strong_count(b) == 1).map(|(k, _)| *k).take(excess).collect();
            for k in victims {
                map.remove(&k);
            }
        }
        self.evictions.bump();
    }

    /// Hit, miss and eviction counters since creation.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.get(),
            misses: self.misses.get(),
            evictions: self.evictions.get(),
            derived_builds: self.derived_builds.get(),
            resident: self.shards.iter().map(|s| s.read().map.len() as u64).sum(),
        }
    }

    /// About how many blocks the cache holds when nothing pins them.
    pub fn capacity(&self) -> usize {
        self.per_shard * SHARDS
    }
}

/// What one look in a shard found.
enum Lookup {
    Hit(Arc<Buffer>),
    /// The version is being changed in place.
    Editing,
    Miss,
}

/// The thread's in-place change, if one is under way ([`Edit`]): its
/// closures must not read the cache (a reader waits for the change to
/// end, and this thread would wait for itself).
mod edit_scope {
    use super::{RwLock, Shard};
    use std::cell::Cell;
    use std::sync::atomic::Ordering;

    thread_local! {
        static EDITING: Cell<Option<u64>> = const { Cell::new(None) };
    }

    pub(super) fn enter(block: u64) {
        EDITING.with(|e| e.set(Some(block)));
    }

    pub(super) fn leave() {
        EDITING.with(|e| e.set(None));
    }

    fn editing() -> Option<u64> {
        EDITING.try_with(Cell::get).ok().flatten()
    }

    /// A read of the cache during an in-place change is a bug of the
    /// change's closure: found by any test that runs it, not only when
    /// another edit happens to be under way.
    #[cfg(debug_assertions)]
    pub(super) fn check_not_editing(block: u64) {
        if let Some(e) = editing() {
            panic!("block {block} read from the cache while block {e} is changed in place");
        }
    }

    /// Waits until `block`'s version in `shard` is no longer being
    /// changed in place. A thread that is itself changing a block gets
    /// an error instead (in release builds; debug ones panic earlier):
    /// waiting could be waiting for itself, or for a thread waiting for
    /// it.
    pub(super) fn wait_for_edit(shard: &RwLock<Shard>, block: u64) -> crate::error::Result<()> {
        if let Some(e) = editing() {
            return Err(crate::error::Error::Invalid(format!(
                "block {block} read from the cache while block {e} is changed in place"
            )));
        }
        // The edit is short and takes no lock: spin, then yield to the
        // editor (it may share this core).
        for i in 0u32.. {
            let busy = shard.read().map.get(&block).is_some_and(|b| b.editing.load(Ordering::Acquire));
            if !busy {
                return Ok(());
            }
            if i < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        Ok(())
    }
}

/// An in-place change of a block's current version ([`BlockGuard::edit`]):
/// readers of the block wait until it drops.
pub(crate) struct Edit<'g> {
    buf: Arc<Buffer>,
    /// Borrows the [`BlockGuard`]: the edit ends before the stripe lock.
    _guard: std::marker::PhantomData<&'g ()>,
}

impl Edit<'_> {
    /// The bytes as they are now.
    pub fn data(&self) -> &[u8] {
        self.buf.data()
    }

    /// Records that the bytes as changed pass `check` with `seed` (see
    /// [`Buffer::set_verified`]; the edit forgot the checks the version
    /// had passed before it).
    pub fn set_verified(&self, check: Check, seed: u32) {
        self.buf.set_verified(check, seed);
    }

    /// The bytes, to change.
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: nobody else can reach this version while the `Edit`
        // exists (`BlockGuard::edit` checked that only the cache's map and
        // the running transaction hold it, under the shard's write lock,
        // and set `editing`, which makes readers of the map wait); the
        // borrow of `self` keeps `data` and this apart.
        unsafe { &mut *self.buf.data.get() }
    }
}

impl Drop for Edit<'_> {
    fn drop(&mut self) {
        // Release: a reader that sees the flag clear sees the new bytes.
        self.buf.editing.store(false, Ordering::Release);
        edit_scope::leave();
    }
}

/// Exclusive right to change one block (see [`BufferCache::lock_block`]).
pub struct BlockGuard<'a> {
    cache: &'a BufferCache,
    block: u64,
    _lock: crate::locks::Ordered<MutexGuard<'a, ()>>,
}

impl BlockGuard<'_> {
    /// The block's current version (read from the device on a miss; the
    /// stripe lock is then held across the read, which only happens for a
    /// block being changed that is not cached).
    pub fn current(&self) -> Result<Arc<Buffer>> {
        // No wait and no check: only a holder of this stripe edits the block.
        self.cache.get_inner(self.block)
    }

    /// The block's current version to change in place, if transaction
    /// `tag` (non-zero) may: the version is cached, that running
    /// transaction holds it ([`Buffer::set_owner`]), and nobody else does
    /// (no reader, no value derived from it, no committing transaction or
    /// checkpoint list: a version is owned only while its transaction
    /// runs). Otherwise `None`, and the change must be made on a copy.
    ///
    /// The caller's transaction must stay running meanwhile (it holds a
    /// handle of it), and while the [`Edit`] lives the thread must not
    /// read the cache or wait for anything: readers of the block wait
    /// for it. Its checks ([`Buffer::is_verified`]) are forgotten.
    pub(crate) fn edit(&self, tag: u64) -> Option<Edit<'_>> {
        if tag == 0 {
            return None;
        }
        let shard = self.cache.shard(self.block).write();
        let buf = shard.map.get(&self.block)?;
        // The owner mark changes only under this block's stripe lock,
        // held here: the transaction's list holds this version. Then
        // exactly the map's and the list's references: readers take new
        // ones from the map only under the shard's read lock (excluded
        // here), the list is read only once the transaction is closed,
        // and a value derived from the version holds a weak one (it would
        // go stale).
        if buf.owner.load(Ordering::Relaxed) != tag || Arc::strong_count(buf) != 2 || Arc::weak_count(buf) != 0 {
            return None;
        }
        // Acquire: what readers that dropped their references read of the
        // bytes happens before the change (their drop is a release).
        std::sync::atomic::fence(Ordering::Acquire);
        buf.editing.store(true, Ordering::Relaxed);
        let buf = buf.clone();
        drop(shard);
        edit_scope::enter(self.block);
        buf.verified.store(0, Ordering::Relaxed);
        buf.verified_slots.store(0, Ordering::Relaxed);
        buf.referenced.store(true, Ordering::Relaxed);
        Some(Edit { buf, _guard: std::marker::PhantomData })
    }

    /// Installs `data` as the block's new version and returns it. Nothing
    /// is written to the device.
    pub fn install(&self, data: Box<[u8]>) -> Result<Arc<Buffer>> {
        Ok(self.install_replacing(data)?.0)
    }

    /// [`BlockGuard::install`], also returning the version replaced, for
    /// the caller to drop after the stripe lock.
    pub fn install_replacing(&self, data: Box<[u8]>) -> Result<(Arc<Buffer>, Option<Arc<Buffer>>)> {
        if data.len() != self.cache.block_size {
            return Err(crate::error::Error::Invalid(format!("install of {} bytes as a block", data.len())));
        }
        Ok(self.cache.install(self.block, data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;

    #[test]
    fn hits_misses_and_eviction_bound() {
        let dev = Arc::new(MemoryDevice::new(1024 * 1024));
        dev.write_at(&[7u8; 1024], 5 * 1024).unwrap();
        let c = BufferCache::new(dev, 1024, 256);
        assert_eq!(c.get(5).unwrap().data()[0], 7);
        assert_eq!(c.get(5).unwrap().data()[0], 7);
        assert_eq!(c.stats().hits, 1);
        for b in 0..1024 {
            c.get(b).unwrap();
        }
        let total: usize = c.shards.iter().map(|s| s.read().map.len()).sum();
        assert!(total <= 256 + SHARDS * 4, "cache grew to {total}");
        assert!(c.get(5000).is_err());
    }

    /// A derived value is the one computed from the version asked about:
    /// a change (a new version) rebuilds it, and values of other blocks
    /// that share its set stay (up to the set's ways).
    #[test]
    fn derived_values_follow_versions() {
        let dev = Arc::new(MemoryDevice::new(1 << 20));
        let c = BufferCache::new(dev, 1024, 256);
        let first = |b: &Buffer| -> Result<u8> { Ok(b.data()[0]) };
        let v1 = c.get(3).unwrap();
        assert_eq!(*c.derived(&v1, 1, first).unwrap(), 0);
        assert_eq!(*c.derived(&v1, 1, first).unwrap(), 0);
        assert_eq!(c.stats().derived_builds, 1);
        let g = c.lock_block(3);
        let v2 = g.install(vec![9u8; 1024].into_boxed_slice()).unwrap();
        drop(g);
        assert_eq!(*c.derived(&v2, 1, first).unwrap(), 9, "a stale value for a new version");
        // The old version, still held, still gets its own value.
        assert_eq!(*c.derived(&v1, 1, first).unwrap(), 0);
        // Values of many blocks, looked up in turn: each built once while
        // no set holds more than its ways.
        let bufs: Vec<_> = (10..14).map(|b| c.get(b).unwrap()).collect();
        let before = c.stats().derived_builds;
        for _ in 0..3 {
            for b in &bufs {
                c.derived(b, 7, first).unwrap();
            }
        }
        assert_eq!(c.stats().derived_builds - before, 4);
    }

    /// A value seeded for a version is what `derived` returns for it,
    /// with no build; a newer version still builds its own.
    #[test]
    fn seeded_values_are_found_without_a_build() {
        let dev = Arc::new(MemoryDevice::new(1 << 20));
        let c = BufferCache::new(dev, 1024, 256);
        let g = c.lock_block(4);
        let v1 = g.install(vec![5u8; 1024].into_boxed_slice()).unwrap();
        drop(g);
        c.seed_derived(&v1, 2, Arc::new(55u8));
        let first = |b: &Buffer| -> Result<u8> { Ok(b.data()[0]) };
        assert_eq!(*c.derived(&v1, 2, first).unwrap(), 55);
        assert_eq!(c.stats().derived_builds, 0);
        // Seeding again takes no second way of the set.
        c.seed_derived(&v1, 2, Arc::new(56u8));
        assert_eq!(*c.derived(&v1, 2, first).unwrap(), 55);
        let g = c.lock_block(4);
        let v2 = g.install(vec![6u8; 1024].into_boxed_slice()).unwrap();
        drop(g);
        assert_eq!(*c.derived(&v2, 2, first).unwrap(), 6);
        assert_eq!(c.stats().derived_builds, 1);
    }

    /// Buffers in use (held by a transaction or the checkpoint list) are
    /// never evicted; when they outnumber the cache's capacity, a sweep
    /// cannot make room, and must not run again at every miss (a sweep
    /// walks the whole shard: that made each miss cost the pinned count).
    #[test]
    fn pinned_buffers_do_not_make_every_miss_sweep() {
        let dev = Arc::new(MemoryDevice::new(8 << 20));
        let c = BufferCache::new(dev, 1024, 256);
        // 16 times the capacity, held.
        let pinned: Vec<_> = (0..4096).map(|b| c.get(b).unwrap()).collect();
        let before = c.stats();
        for b in 4096..6144 {
            c.get(b).unwrap();
        }
        let s = c.stats();
        let (misses, sweeps) = (s.misses - before.misses, s.evictions - before.evictions);
        assert_eq!(misses, 2048);
        assert!(sweeps * 8 <= misses, "{sweeps} sweeps for {misses} misses");
        // Unpinned buffers still go: once the pins are dropped, the shards
        // come back under their capacity at the next sweeps.
        drop(pinned);
        for b in 6144..8192 {
            c.get(b).unwrap();
        }
        let total: usize = c.shards.iter().map(|s| s.read().map.len()).sum();
        assert!(total <= 2 * 256 + SHARDS * 8, "cache holds {total} unpinned buffers");
    }
}
