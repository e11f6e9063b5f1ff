//! The user-space page cache: per-file folios of 4 KiB to 2 MiB, a global
//! memory budget with CLOCK eviction, and readahead state.
//!
//! # Locking (see also crate::locks)
//!
//! - `FileCache::folios` (RwLock over a BTreeMap keyed by first page
//!   index): held only to look up, insert or remove folios, never across a
//!   copy or I/O.
//! - [`Folio::state`] (the folio lock, a Mutex): held while the folio's
//!   bytes are filled, copied out or copied in, and while writeback sends
//!   them to the device, so a write that lies in one folio is atomic for
//!   every reader. An operation that covers several folios locks them in
//!   increasing index order, which is also what makes an aligned 8 KiB
//!   write atomic when it spans two 4 KiB folios.
//!   [`Folio::lock`] is checked against that order and the rest of
//!   [`crate::locks`]'s (inside the I/O lock, outside the invalidate lock
//!   and the handle) by [`crate::lock_order`] in debug builds.
//! - [`FileCache`]'s dirty index (a Mutex over a set) and the eviction
//!   queues (one Mutex per shard) are touched only when a folio is
//!   created, first dirtied, cleaned or evicted, never on a hit.
//!
//! # Dirty folios and delayed allocation
//!
//! A buffered write copies into folios and marks their blocks dirty;
//! blocks are allocated when writeback sends them to the device. Each
//! dirty folio records which of its blocks are dirty (so holes between
//! writes stay holes) and how many blocks it has *reserved*
//! for the unallocated ones among them, so the space a write was
//! promised exists at writeback (ext4's `ext4_da_reserve_space`). The
//! counters ([`CacheAccount`]; the reservations in its
//! [`crate::alloc::delalloc::DelallocSpace`], which transactions consult
//! too) are kept exact by the folio itself: what a dirty folio holds is
//! given back when it is cleaned or dropped.
//! Eviction never takes a dirty folio.

use super::folio_mem::FolioBuf;
use crate::alloc::delalloc::DelallocSpace;
use crate::format::block_number::{FileBlock, PhysicalBlock};
use parking_lot::{Mutex, MutexGuard, RwLock};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// A run of allocated blocks under a folio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRun {
    /// First logical block.
    pub lblk: FileBlock,
    /// First physical block.
    pub pblk: PhysicalBlock,
    /// Number of blocks.
    pub len: u64,
    /// Written (false: an unwritten, preallocated extent).
    pub written: bool,
}

impl BlockRun {
    /// The logical block just past the run.
    pub fn end(&self) -> FileBlock {
        self.lblk + self.len
    }

    /// True if the run maps logical block `l`.
    pub fn contains(&self, l: FileBlock) -> bool {
        self.lblk <= l && l < self.end()
    }

    /// Device byte offset of file byte `pos` (which the run must map).
    pub fn device_offset(&self, pos: u64, block_size: u64) -> u64 {
        self.pblk.byte_offset(block_size) + (pos - self.lblk.byte_offset(block_size))
    }
}

/// True if written runs cover every block of `[first, end)`.
pub fn all_written(runs: &[BlockRun], first: FileBlock, end: FileBlock) -> bool {
    let mut pos = first;
    for r in runs.iter().filter(|r| r.written) {
        if r.contains(pos) {
            pos = r.end();
        }
    }
    pos >= end
}

/// Memory and space the cache holds, shared by every folio.
#[derive(Debug, Default)]
pub struct CacheAccount {
    used: AtomicUsize,
    dirty: AtomicUsize,
    /// Blocks reserved for dirty, not yet allocated data (the allocator
    /// layer's account, which transactions consult too).
    delalloc: DelallocSpace,
}

/// Bytes in a page, the unit of folio sizes and indexes.
pub const PAGE_SIZE: u64 = 4096;
// One-page folios take one slot of the folio memory pool each.
const _: () = assert!(PAGE_SIZE as usize == super::folio_mem::SLOT);
/// Largest folio order (2^9 pages = 2 MiB).
pub const MAX_ORDER: u32 = 9;
const EVICT_SHARDS: usize = 16;

/// The budget shared by every file's folios.
#[derive(Debug)]
pub struct PageCache {
    budget: usize,
    acct: Arc<CacheAccount>,
    peak: AtomicUsize,
    queues: Vec<Mutex<VecDeque<Weak<Folio>>>>,
    next_queue: AtomicUsize,
}

/// One folio: `pages` pages starting at page `index`, naturally aligned.
#[derive(Debug)]
pub struct Folio {
    /// First page index in the file.
    pub index: u64,
    /// Number of pages (a power of two).
    pub pages: u64,
    acct: Arc<CacheAccount>,
    referenced: AtomicBool,
    /// Taken out of its file's cache (truncate, direct write, eviction):
    /// its bytes may be stale and new lookups do not find it. An atomic,
    /// not under the folio lock, so invalidation never waits for a folio
    /// lock (readers hold folio locks while they wait for the
    /// invalidate lock that truncate holds).
    pub removed: AtomicBool,
    file: Weak<FileCache>,
    /// The folio lock and what it guards.
    pub state: Mutex<FolioState>,
}

/// A locked folio ([`Folio::lock`]), checked against the lock order in
/// debug builds.
pub type FolioGuard<'a> = crate::locks::Ordered<MutexGuard<'a, FolioState>>;

/// What the folio lock guards.
#[derive(Debug, Default)]
pub struct FolioState {
    /// The bytes (empty until filled): a recycled slot for one-page
    /// folios (see `folio_mem`).
    pub data: FolioBuf,
    /// `data` holds the file's current contents.
    pub uptodate: bool,
    /// The allocated blocks under the folio when it was filled or last
    /// written back. Whatever frees or moves blocks (truncate, punch)
    /// removes the folio first, so an allocated run stays allocated while
    /// the folio is cached (a hole may have been filled since: that only
    /// over-reserves).
    pub runs: Vec<BlockRun>,
    /// The folio's blocks not yet written back.
    pub dirty: DirtyBlocks,
    /// Blocks reserved for the unallocated blocks among `dirty`.
    pub reserved: u64,
}

/// Which blocks of a folio are dirty: bit `i` for the folio's `i`-th
/// block (no words while clean), and how many bytes they hold.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DirtyBlocks {
    bits: Vec<u64>,
    bytes: u64,
}

impl DirtyBlocks {
    /// No block dirty.
    pub fn is_clean(&self) -> bool {
        self.bits.is_empty()
    }

    /// Block `i` is dirty.
    pub fn get(&self, i: u64) -> bool {
        self.bits.get((i / 64) as usize).is_some_and(|w| w >> (i % 64) & 1 == 1)
    }

    /// Bytes of the dirty blocks.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Marks blocks `[first, end)` of `bs` bytes dirty; returns the bytes
    /// that were not dirty before.
    pub fn set(&mut self, first: u64, end: u64, bs: u64) -> u64 {
        let words = end.div_ceil(64) as usize;
        if self.bits.len() < words {
            self.bits.resize(words, 0);
        }
        let mut added = 0;
        for i in first..end {
            let w = &mut self.bits[(i / 64) as usize];
            if *w >> (i % 64) & 1 == 0 {
                *w |= 1 << (i % 64);
                added += bs;
            }
        }
        self.bytes += added;
        added
    }

    /// The maximal runs of dirty blocks, as `[start, end)`, in order.
    pub fn runs(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for i in (0..self.bits.len() as u64 * 64).filter(|&i| self.get(i)) {
            match out.last_mut() {
                Some((_, e)) if *e == i => *e += 1,
                _ => out.push((i, i + 1)),
            }
        }
        out
    }

    /// Marks every block clean; returns the bytes that were dirty.
    fn clear(&mut self) -> u64 {
        self.bits = Vec::new();
        std::mem::take(&mut self.bytes)
    }
}

impl Folio {
    /// Byte offset of the folio in the file.
    pub fn start(&self) -> u64 {
        self.index * PAGE_SIZE
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.pages * PAGE_SIZE
    }

    /// Locks the folio and marks it recently used.
    pub fn lock(&self) -> FolioGuard<'_> {
        self.referenced.store(true, Ordering::Relaxed);
        crate::locks::ordered(crate::lock_order::Class::Folio, self.index, || self.state.lock())
    }
}

impl Drop for Folio {
    fn drop(&mut self) {
        let len = self.len();
        self.acct.used.fetch_sub(len as usize, Ordering::Relaxed);
        let st = self.state.get_mut();
        if !st.dirty.is_clean() {
            // Dropped dirty: the file was deleted (its data is not wanted).
            let bytes = st.dirty.bytes();
            self.acct.dirty.fetch_sub(bytes as usize, Ordering::Relaxed);
            self.acct.delalloc.release(st.reserved);
            if let Some(file) = self.file.upgrade() {
                file.dirty_bytes.fetch_sub(bytes, Ordering::AcqRel);
                file.reserved.fetch_sub(st.reserved, Ordering::AcqRel);
            }
        }
    }
}

/// One file's folios and readahead state.
#[derive(Debug, Default)]
pub struct FileCache {
    folios: RwLock<BTreeMap<u64, Arc<Folio>>>,
    /// Bumped by every change of the file's blocks that bypasses the
    /// folios (direct writes, truncate, punch): a folio filled from the
    /// device across such a change is not kept.
    pub generation: AtomicU64,
    /// Where the last read ended (sequential detection).
    last_read_end: AtomicU64,
    /// Folio order readahead uses next.
    ra_order: AtomicU64,
    /// First page indexes of the dirty folios (may name folios removed
    /// since; writeback skips those).
    dirty_index: Mutex<std::collections::BTreeSet<u64>>,
    /// Bytes of dirty folios.
    dirty_bytes: AtomicU64,
    /// Blocks reserved by the dirty folios.
    reserved: AtomicU64,
    /// The file's size in memory when buffered writes extended it past
    /// the on-disk `i_size` (0: the on-disk size holds). Writeback
    /// brings `i_size` up to it (ext4's `i_size` vs `i_disksize`).
    pending_size: AtomicU64,
}

impl FileCache {
    /// The folio holding page `page`, if cached.
    pub fn find(&self, page: u64) -> Option<Arc<Folio>> {
        let m = self.folios.read();
        let (_, f) = m.range(..=page).next_back()?;
        (page < f.index + f.pages).then(|| f.clone())
    }

    /// Folios overlapping pages `[first, last]`, in order.
    pub fn find_range(&self, first: u64, last: u64) -> Vec<Arc<Folio>> {
        let m = self.folios.read();
        let mut out: Vec<Arc<Folio>> = Vec::new();
        if let Some((_, f)) = m.range(..first).next_back() {
            if f.index + f.pages > first {
                out.push(f.clone());
            }
        }
        out.extend(m.range(first..=last).map(|(_, f)| f.clone()));
        out
    }

    /// Removes every folio overlapping bytes `[from, to)` and bumps the
    /// generation. Readers holding such a folio finish with it; new
    /// lookups go to the device.
    ///
    /// When no folio overlaps the range nothing is bumped: a fill that
    /// could see the old bytes must have inserted its folio before this
    /// check (insertion and the check are ordered by the map's lock), and
    /// a folio inserted after it reads the device after the change.
    pub fn invalidate(&self, from: u64, to: u64) {
        if to <= from {
            return;
        }
        let (first, last) = (from / PAGE_SIZE, (to - 1) / PAGE_SIZE);
        if self.find_range(first, last).is_empty() {
            // The common case on the direct-I/O path: nothing cached, no
            // shared counter written, no exclusive lock of the map taken.
            return;
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        let victims: Vec<Arc<Folio>> = {
            let mut m = self.folios.write();
            let keys: Vec<u64> = {
                let mut k: Vec<u64> = m.range(first..=last).map(|(k, _)| *k).collect();
                if let Some((&k0, f)) = m.range(..first).next_back() {
                    if f.index + f.pages > first {
                        k.push(k0);
                    }
                }
                k
            };
            keys.iter().filter_map(|k| m.remove(k)).collect()
        };
        for f in victims {
            f.removed.store(true, Ordering::Release);
        }
    }

    /// Removes every folio, dirty ones included (file deleted), and
    /// forgets the in-memory size.
    pub fn invalidate_all(&self) {
        // As `invalidate` of everything, in one step: the whole map is
        // taken (no list of keys, no search per folio: every deletion of
        // a cached file comes here).
        if !self.folios.read().is_empty() {
            self.generation.fetch_add(1, Ordering::AcqRel);
            let victims = std::mem::take(&mut *self.folios.write());
            for f in victims.values() {
                f.removed.store(true, Ordering::Release);
            }
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.pending_size.store(0, Ordering::Release);
        self.dirty_index.lock().clear();
    }

    /// Copies a direct write's bytes into the cached, uptodate folios of
    /// its range (after the device write, under the shared I/O lock);
    /// folios not uptodate are left alone: a fill reads the device, which
    /// holds the bytes already. Dirty state is kept, so a buffered write
    /// racing with the direct one is neither lost nor torn: whichever
    /// took the folio lock last is what the folio (and, after writeback,
    /// the device) holds.
    ///
    /// The folios it changes become dirty (their blocks are allocated, so
    /// nothing is reserved): an in-place writeback running at the same
    /// time (under the shared I/O lock too) may have put a folio's older
    /// bytes on the device after the direct write; writing the folio
    /// again makes the device match it. Returns true if the file had no
    /// dirty folio before (it must join the dirty list).
    pub fn write_through(&self, offset: u64, data: &[u8], bs: u64) -> bool {
        if data.is_empty() {
            return false;
        }
        let end = offset + data.len() as u64;
        let mut first_dirty = false;
        for f in self.find_range(offset / PAGE_SIZE, (end - 1) / PAGE_SIZE) {
            let mut g = f.lock();
            if !g.uptodate || f.removed.load(Ordering::Acquire) {
                continue;
            }
            let (a, b) = (offset.max(f.start()), end.min(f.start() + f.len()));
            g.data[(a - f.start()) as usize..(b - f.start()) as usize]
                .copy_from_slice(&data[(a - offset) as usize..(b - offset) as usize]);
            let base = f.start() / bs;
            let reserved = g.reserved;
            first_dirty |= self.set_dirty(&f, &mut g, a / bs - base, b.div_ceil(bs) - base, bs, reserved);
        }
        first_dirty
    }

    /// Marks blocks `[first, end)` (counted from the folio's first block,
    /// `bs` bytes each) of locked folio `f` dirty, with `reserved` blocks
    /// reserved for it in all (the caller reserved the increase). Returns
    /// true if the file had no dirty block before (it must join the dirty
    /// list). Rewriting dirty blocks touches no shared counter.
    #[allow(clippy::too_many_arguments)]
    pub fn set_dirty(&self, f: &Folio, st: &mut FolioState, first: u64, end: u64, bs: u64, reserved: u64) -> bool {
        let was_clean = st.dirty.is_clean();
        let added = st.dirty.set(first, end, bs);
        let mut first_dirty = false;
        if added > 0 {
            f.acct.dirty.fetch_add(added as usize, Ordering::Relaxed);
            first_dirty = self.dirty_bytes.fetch_add(added, Ordering::AcqRel) == 0;
        }
        if was_clean && !st.dirty.is_clean() {
            self.dirty_index.lock().insert(f.index);
        }
        let extra = reserved.saturating_sub(st.reserved);
        if extra > 0 {
            self.reserved.fetch_add(extra, Ordering::AcqRel);
            st.reserved += extra;
        }
        first_dirty
    }

    /// Marks locked folio `f` clean after writeback, giving back its
    /// reservation (its blocks are allocated now).
    pub fn set_clean(&self, f: &Folio, st: &mut FolioState) {
        if st.dirty.is_clean() {
            return;
        }
        let bytes = st.dirty.clear();
        f.acct.dirty.fetch_sub(bytes as usize, Ordering::Relaxed);
        f.acct.delalloc.release(st.reserved);
        self.dirty_bytes.fetch_sub(bytes, Ordering::AcqRel);
        self.reserved.fetch_sub(st.reserved, Ordering::AcqRel);
        st.reserved = 0;
        self.dirty_index.lock().remove(&f.index);
    }

    /// Up to `max_bytes` of dirty folios, in file order, starting with the
    /// first dirty one at or after page `from`; stale index entries are
    /// dropped.
    pub fn dirty_batch(&self, from: u64, max_bytes: u64) -> Vec<Arc<Folio>> {
        let keys: Vec<u64> = self.dirty_index.lock().range(from..).copied().collect();
        let mut out: Vec<Arc<Folio>> = Vec::new();
        let mut bytes = 0;
        let mut stale = Vec::new();
        {
            let m = self.folios.read();
            for k in keys {
                match m.get(&k) {
                    Some(f) => {
                        out.push(f.clone());
                        bytes += f.len();
                        if bytes >= max_bytes {
                            break;
                        }
                    }
                    None => stale.push(k),
                }
            }
        }
        if !stale.is_empty() {
            let mut d = self.dirty_index.lock();
            for k in stale {
                d.remove(&k);
            }
        }
        out
    }

    /// True if some folio of the file is dirty (or was, until dropped).
    pub fn is_dirty(&self) -> bool {
        self.dirty_bytes.load(Ordering::Acquire) != 0 || self.pending_size() != 0
    }

    /// Blocks reserved by this file's dirty folios (counted in
    /// `st_blocks`, as ext4 counts delayed-allocation blocks).
    pub fn reserved_blocks(&self) -> u64 {
        self.reserved.load(Ordering::Acquire)
    }

    /// The in-memory size past the on-disk `i_size` (0 if none).
    pub fn pending_size(&self) -> u64 {
        self.pending_size.load(Ordering::Acquire)
    }

    /// Raises the in-memory size to `size` (I/O lock held exclusively).
    pub fn raise_size(&self, size: u64) {
        self.pending_size.fetch_max(size, Ordering::AcqRel);
    }

    /// Forgets the in-memory size once the on-disk size reached it.
    pub fn settle_size(&self, disk_size: u64) {
        let _ = self.pending_size.fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| (p <= disk_size).then_some(0));
    }

    /// Number of cached folios.
    #[cfg(test)]
    pub fn folio_count(&self) -> usize {
        self.folios.read().len()
    }

    /// The folio order a read at `off` of `len` bytes should create: grows
    /// (up to 2 MiB) while reads are sequential, like readahead windows.
    pub fn read_order(&self, off: u64, len: u64) -> u32 {
        let prev_end = self.last_read_end.swap(off + len, Ordering::Relaxed);
        let want = order_for(len);
        let order = if prev_end == off && off != 0 {
            let o = (self.ra_order.load(Ordering::Relaxed) + 1).min(u64::from(MAX_ORDER));
            self.ra_order.store(o, Ordering::Relaxed);
            (o as u32).max(want)
        } else {
            self.ra_order.store(u64::from(want), Ordering::Relaxed);
            want
        };
        order.min(MAX_ORDER)
    }
}

/// Smallest order whose folio holds `len` bytes (capped at 2 MiB).
pub fn order_for(len: u64) -> u32 {
    let pages = len.div_ceil(PAGE_SIZE).max(1);
    (pages.next_power_of_two().trailing_zeros()).min(MAX_ORDER)
}

impl PageCache {
    /// A cache of at most `budget` bytes of folios.
    pub fn new(budget: usize) -> PageCache {
        PageCache {
            budget: budget.max(4 << 20),
            acct: Arc::new(CacheAccount::default()),
            peak: AtomicUsize::new(0),
            queues: (0..EVICT_SHARDS).map(|_| Mutex::new(VecDeque::new())).collect(),
            next_queue: AtomicUsize::new(0),
        }
    }

    /// The default budget: an eighth of the machine's memory, at least
    /// 64 MiB and at most 4 GiB.
    pub fn default_budget() -> usize {
        let total = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("MemTotal:"))?.to_string();
                line.split_whitespace().nth(1)?.parse::<usize>().ok()
            })
            .map_or(1 << 30, |kib| kib * 1024);
        (total / 8).clamp(64 << 20, 4 << 30)
    }

    /// Bytes held by folios now.
    pub fn used(&self) -> usize {
        self.acct.used.load(Ordering::Relaxed)
    }

    /// Bytes of dirty folios now.
    pub fn dirty(&self) -> usize {
        self.acct.dirty.load(Ordering::Relaxed)
    }

    /// The blocks reserved for dirty data (and claimed by allocations
    /// that must leave them alone).
    pub fn delalloc(&self) -> &DelallocSpace {
        &self.acct.delalloc
    }

    /// Most bytes ever held at once.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// The budget.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// The folio covering page `page` of `file`, created (not uptodate)
    /// with `order` if none is cached. A new folio is naturally aligned
    /// and shrunk, down to `min_order` (a folio holds whole blocks),
    /// until it overlaps no cached folio and does not pass `max_page`
    /// (the last page worth caching). Returns the folio and whether it
    /// was created.
    pub fn get_or_create(
        &self,
        file: &Arc<FileCache>,
        page: u64,
        order: u32,
        min_order: u32,
        max_page: u64,
    ) -> (Arc<Folio>, bool) {
        if let Some(f) = file.find(page) {
            return (f, false);
        }
        let mut order = order.clamp(min_order, MAX_ORDER.max(min_order));
        let folio = {
            let mut m = file.folios.write();
            if let Some((_, f)) = m.range(..=page).next_back() {
                if page < f.index + f.pages {
                    return (f.clone(), false);
                }
            }
            loop {
                let pages = 1u64 << order;
                let index = page & !(pages - 1);
                let overlaps = m.range(index..index + pages).next().is_some()
                    || m.range(..index).next_back().is_some_and(|(_, f)| f.index + f.pages > index);
                if order <= min_order || (!overlaps && index + pages - 1 <= max_page.max(page)) {
                    break;
                }
                order -= 1;
            }
            let pages = 1u64 << order;
            let index = page & !(pages - 1);
            let f = Arc::new(Folio {
                index,
                pages,
                acct: self.acct.clone(),
                referenced: AtomicBool::new(true),
                removed: AtomicBool::new(false),
                file: Arc::downgrade(file),
                state: Mutex::new(FolioState::default()),
            });
            m.insert(index, f.clone());
            f
        };
        let now = self.acct.used.fetch_add(folio.len() as usize, Ordering::Relaxed) + folio.len() as usize;
        self.peak.fetch_max(now, Ordering::Relaxed);
        let q = self.next_queue.fetch_add(1, Ordering::Relaxed) % EVICT_SHARDS;
        self.queues[q].lock().push_back(Arc::downgrade(&folio));
        if now > self.budget {
            self.evict(q);
        }
        (folio, true)
    }

    /// CLOCK over the eviction queues, starting at `q`, until the cache
    /// is back under its budget or a bounded number of folios were seen.
    /// Only unlocked, clean folios are taken (a locked one is in use; a
    /// dirty one waits for writeback).
    fn evict(&self, q: usize) {
        let mut budget_scan = 4 * 1024;
        let mut shard = q;
        while self.used() > self.budget && budget_scan > 0 {
            budget_scan -= 1;
            let cand = self.queues[shard].lock().pop_front();
            shard = (shard + 1) % EVICT_SHARDS;
            let Some(weak) = cand else { continue };
            let Some(f) = weak.upgrade() else { continue };
            // In use: held by someone besides the file's map and us (a
            // reader or writer between its lookup and its lock).
            if Arc::strong_count(&f) > 2 {
                self.queues[shard].lock().push_back(weak);
                continue;
            }
            if f.referenced.swap(false, Ordering::Relaxed) {
                self.queues[shard].lock().push_back(weak);
                continue;
            }
            let Some(mut st) = f.state.try_lock() else {
                self.queues[shard].lock().push_back(weak);
                continue;
            };
            if !st.dirty.is_clean() {
                drop(st);
                self.queues[shard].lock().push_back(weak);
                continue;
            }
            // Out of the map before the folio lock is released: whoever
            // locks it next and finds it removed finds a new folio (or
            // none) on its next lookup. The map lock is a leaf: nobody
            // takes a folio lock while holding it.
            f.removed.store(true, Ordering::Release);
            if let Some(file) = f.file.upgrade() {
                let mut m = file.folios.write();
                if m.get(&f.index).is_some_and(|g| Arc::ptr_eq(g, &f)) {
                    m.remove(&f.index);
                }
            }
            st.uptodate = false;
            st.data = FolioBuf::default();
            drop(st);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folios_align_and_do_not_overlap() {
        let pc = PageCache::new(64 << 20);
        let file = Arc::new(FileCache::default());
        let (a, new) = pc.get_or_create(&file, 5, 0, 0, u64::MAX);
        assert!(new);
        assert_eq!((a.index, a.pages), (5, 1));
        // An order-3 folio at page 2 would cover 0..8 and overlap page 5:
        // it shrinks to order 2 (pages 0..4).
        let (b, _) = pc.get_or_create(&file, 2, 3, 0, u64::MAX);
        assert_eq!((b.index, b.pages), (0, 4));
        let (c, new) = pc.get_or_create(&file, 3, 0, 0, u64::MAX);
        assert!(!new && Arc::ptr_eq(&b, &c));
        let (d, _) = pc.get_or_create(&file, 16, 9, 0, 20);
        assert_eq!((d.index, d.pages), (16, 4), "clipped by max_page");
        assert_eq!(file.find_range(0, 100).len(), 3);
        file.invalidate(3 * PAGE_SIZE, 3 * PAGE_SIZE + 1);
        assert!(file.find(2).is_none() && file.find(0).is_none() && file.find(5).is_some());
        assert!(b.removed.load(Ordering::Relaxed));
    }

    #[test]
    fn dirty_blocks_runs() {
        let mut d = DirtyBlocks::default();
        assert!(d.is_clean() && d.runs().is_empty());
        assert_eq!(d.set(0, 3, 1024), 3072);
        d.set(4, 5, 1024);
        d.set(63, 66, 1024);
        assert_eq!(d.set(2, 6, 1024), 2048, "blocks 3 and 5 are new");
        assert_eq!(d.runs(), vec![(0, 6), (63, 66)]);
        assert_eq!(d.bytes(), 9 * 1024);
        assert!(d.get(64) && !d.get(6) && !d.get(1000));
    }

    #[test]
    fn dirty_folios_are_not_evicted() {
        let pc = PageCache::new(4 << 20);
        let file = Arc::new(FileCache::default());
        let (keep, _) = pc.get_or_create(&file, 0, 0, 0, u64::MAX);
        {
            let mut st = keep.lock();
            st.data = vec![7; PAGE_SIZE as usize].into();
            st.uptodate = true;
            assert!(pc.delalloc().reserve_space(1, 0, || 1) && !pc.delalloc().reserve_space(1, 0, || 1));
            file.set_dirty(&keep, &mut st, 0, 1, PAGE_SIZE, 1);
        }
        let keep_index = keep.index;
        drop(keep);
        for p in 1..5_000u64 {
            let (f, _) = pc.get_or_create(&file, p, 0, 0, u64::MAX);
            let mut st = f.lock();
            st.data = vec![0; PAGE_SIZE as usize].into();
            st.uptodate = true;
        }
        let f = file.find(keep_index).expect("the dirty folio is still cached");
        assert_eq!(f.lock().data[0], 7);
        assert_eq!((pc.dirty(), pc.delalloc().reserved_blocks()), (PAGE_SIZE as usize, 1));
        file.invalidate_all();
        drop(f);
        assert_eq!((pc.dirty(), pc.delalloc().reserved_blocks()), (0, 0), "a dropped dirty folio gives all back");
    }

    /// Issue 12 defect 12: eviction marked a folio removed and unlocked it
    /// before taking it out of the file's map, so a writer could lock it,
    /// see it removed, look it up again and find the same folio (16 times,
    /// then EIO). The evictor is stopped inside its map update (this
    /// thread holds the map shared): the folio must still be locked then.
    #[test]
    fn evicted_folio_leaves_the_map_before_its_lock_is_released() {
        let pc = Arc::new(PageCache::new(4 << 20));
        let file = Arc::new(FileCache::default());
        let (f, _) = pc.get_or_create(&file, 0, 0, 0, u64::MAX);
        {
            let mut st = f.lock();
            st.data = vec![1; PAGE_SIZE as usize].into();
            st.uptodate = true;
        }
        f.referenced.store(false, Ordering::Relaxed);
        let weak = Arc::downgrade(&f);
        drop(f);
        // Over budget, so that eviction takes the folio.
        pc.acct.used.fetch_add(pc.budget, Ordering::Relaxed);
        let map = file.folios.read();
        let evictor = {
            let pc = pc.clone();
            std::thread::spawn(move || pc.evict(0))
        };
        // A writer waiting for the map lock keeps new readers out: the
        // evictor is then inside its map update.
        while file.folios.try_read().is_some() {
            std::thread::yield_now();
        }
        let f = map.get(&0).cloned().expect("still in the map");
        assert!(weak.upgrade().is_some_and(|w| w.removed.load(Ordering::Acquire)));
        assert!(f.state.try_lock().is_none(), "an evicted folio is unlocked while still in the file's map");
        drop(map);
        evictor.join().unwrap();
        assert!(file.find(0).is_none());
        drop(f);
        pc.acct.used.fetch_sub(pc.budget, Ordering::Relaxed);
    }

    #[test]
    fn budget_is_kept() {
        let pc = PageCache::new(4 << 20);
        let file = Arc::new(FileCache::default());
        for p in 0..10_000u64 {
            let (f, _) = pc.get_or_create(&file, p, 0, 0, u64::MAX);
            let mut st = f.lock();
            st.data = vec![0; PAGE_SIZE as usize].into();
            st.uptodate = true;
        }
        assert!(pc.used() <= pc.budget() + PAGE_SIZE as usize, "{} > {}", pc.used(), pc.budget());
        assert!(file.folio_count() < 10_000);
    }

    #[test]
    fn sequential_reads_grow_the_order() {
        let file = FileCache::default();
        assert_eq!(file.read_order(0, 4096), 0);
        let mut off = 4096;
        let mut last = 0;
        for _ in 0..12 {
            last = file.read_order(off, 4096);
            off += 4096;
        }
        assert_eq!(last, MAX_ORDER);
        assert_eq!(file.read_order(1 << 30, 8192), 1, "random read resets");
    }
}
