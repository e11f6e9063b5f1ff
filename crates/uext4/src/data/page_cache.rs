//! The user-space page cache: per-file folios of 4 KiB to 2 MiB, a global
//! memory budget with CLOCK eviction, and readahead state.
//!
//! # Locking (see also crate::locks)
//!
//! - [`FileCache::folios`] (RwLock over a BTreeMap keyed by first page
//!   index): held only to look up, insert or remove folios, never across a
//!   copy or I/O.
//! - [`Folio::state`] (the folio lock, a Mutex): held while the folio's
//!   bytes are filled, copied out or copied in (and, in this write-through
//!   cache, while a write reaches the device), so a write that lies in one
//!   folio is atomic for every reader. An operation that covers several
//!   folios locks them in increasing index order, which is also what makes
//!   an aligned 8 KiB write atomic when it spans two 4 KiB folios.
//! - The eviction queues (one Mutex per shard) are touched only when a
//!   folio is created or evicted, never on a hit.
//!
//! The cache is write-through: a buffered write updates the folio and the
//! device before it returns, so folios are never dirty and eviction never
//! writes. (Delayed allocation with dirty folios and background writeback
//! is the next step of the data path.)

use parking_lot::{Mutex, MutexGuard, RwLock};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// A run of written blocks under a folio: (logical block, physical
/// block, number of blocks).
pub type BlockRun = (u64, u64, u64);

/// Bytes in a page, the unit of folio sizes and indexes.
pub const PAGE_SIZE: u64 = 4096;
/// Largest folio order (2^9 pages = 2 MiB).
pub const MAX_ORDER: u32 = 9;
const EVICT_SHARDS: usize = 16;

/// The budget shared by every file's folios.
#[derive(Debug)]
pub struct PageCache {
    budget: usize,
    used: Arc<AtomicUsize>,
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
    used: Arc<AtomicUsize>,
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

/// What the folio lock guards.
#[derive(Debug, Default)]
pub struct FolioState {
    /// The bytes (empty until filled).
    pub data: Vec<u8>,
    /// `data` holds the file's current contents.
    pub uptodate: bool,
    /// Every block under the folio (below EOF) was allocated and written
    /// when it was filled or last written: a shared-lock write may go
    /// straight in, to the blocks in `runs`.
    pub mapped: bool,
    /// (logical block, physical block, blocks) under the folio when
    /// `mapped`. Stable while the folio is cached: whatever moves or frees
    /// written blocks (truncate, punch) removes the folio first.
    pub runs: Vec<BlockRun>,
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

    /// Never true: a folio has at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Locks the folio and marks it recently used.
    pub fn lock(&self) -> MutexGuard<'_, FolioState> {
        self.referenced.store(true, Ordering::Relaxed);
        self.state.lock()
    }
}

impl Drop for Folio {
    fn drop(&mut self) {
        self.used.fetch_sub(self.len() as usize, Ordering::Relaxed);
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

    /// Removes every folio (file deleted).
    pub fn invalidate_all(&self) {
        self.invalidate(0, u64::MAX);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Number of cached folios.
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
            used: Arc::new(AtomicUsize::new(0)),
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
        self.used.load(Ordering::Relaxed)
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
    /// and shrunk until it overlaps no cached folio and does not pass
    /// `max_page` (the last page worth caching). Returns the folio and
    /// whether it was created.
    pub fn get_or_create(&self, file: &Arc<FileCache>, page: u64, order: u32, max_page: u64) -> (Arc<Folio>, bool) {
        if let Some(f) = file.find(page) {
            return (f, false);
        }
        let mut order = order.min(MAX_ORDER);
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
                if order == 0 || (!overlaps && index + pages - 1 <= max_page.max(page)) {
                    break;
                }
                order -= 1;
            }
            let pages = 1u64 << order;
            let index = page & !(pages - 1);
            let f = Arc::new(Folio {
                index,
                pages,
                used: self.used.clone(),
                referenced: AtomicBool::new(true),
                removed: AtomicBool::new(false),
                file: Arc::downgrade(file),
                state: Mutex::new(FolioState::default()),
            });
            m.insert(index, f.clone());
            f
        };
        let now = self.used.fetch_add(folio.len() as usize, Ordering::Relaxed) + folio.len() as usize;
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
    /// Only unlocked folios are taken (a locked one is in use).
    fn evict(&self, q: usize) {
        let mut budget_scan = 4 * 1024;
        let mut shard = q;
        while self.used() > self.budget && budget_scan > 0 {
            budget_scan -= 1;
            let cand = self.queues[shard].lock().pop_front();
            shard = (shard + 1) % EVICT_SHARDS;
            let Some(weak) = cand else { continue };
            let Some(f) = weak.upgrade() else { continue };
            if f.referenced.swap(false, Ordering::Relaxed) {
                self.queues[shard].lock().push_back(weak);
                continue;
            }
            let Some(mut st) = f.state.try_lock() else {
                self.queues[shard].lock().push_back(weak);
                continue;
            };
            f.removed.store(true, Ordering::Release);
            st.uptodate = false;
            st.data = Vec::new();
            drop(st);
            if let Some(file) = f.file.upgrade() {
                let mut m = file.folios.write();
                if m.get(&f.index).is_some_and(|g| Arc::ptr_eq(g, &f)) {
                    m.remove(&f.index);
                }
            }
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
        let (a, new) = pc.get_or_create(&file, 5, 0, u64::MAX);
        assert!(new);
        assert_eq!((a.index, a.pages), (5, 1));
        // An order-3 folio at page 2 would cover 0..8 and overlap page 5:
        // it shrinks to order 2 (pages 0..4).
        let (b, _) = pc.get_or_create(&file, 2, 3, u64::MAX);
        assert_eq!((b.index, b.pages), (0, 4));
        let (c, new) = pc.get_or_create(&file, 3, 0, u64::MAX);
        assert!(!new && Arc::ptr_eq(&b, &c));
        let (d, _) = pc.get_or_create(&file, 16, 9, 20);
        assert_eq!((d.index, d.pages), (16, 4), "clipped by max_page");
        assert_eq!(file.find_range(0, 100).len(), 3);
        file.invalidate(3 * PAGE_SIZE, 3 * PAGE_SIZE + 1);
        assert!(file.find(2).is_none() && file.find(0).is_none() && file.find(5).is_some());
        assert!(b.removed.load(Ordering::Relaxed));
    }

    #[test]
    fn budget_is_kept() {
        let pc = PageCache::new(4 << 20);
        let file = Arc::new(FileCache::default());
        for p in 0..10_000u64 {
            let (f, _) = pc.get_or_create(&file, p, 0, u64::MAX);
            let mut st = f.lock();
            st.data = vec![0; PAGE_SIZE as usize];
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
