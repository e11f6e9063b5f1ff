//! The multiblock allocator (mballoc).
//!
//! Every block the filesystem allocates comes from here: file data,
//! extent-tree and directory blocks, xattr blocks. The design follows the
//! kernel's fs/ext4/mballoc.c (read, not copied) and the improvements of
//! seed 004:
//!
//! - per-group buddy state ([`buddy::Buddy`]) built lazily from the block
//!   bitmap, or from the layout for BLOCK_UNINIT groups (no I/O);
//! - group lists by largest free order (CR0) and by average fragment size
//!   order (CR1, CR1.5) ([`lists::OrderLists`]);
//! - the criteria CR0 -> CR1 -> CR1.5 -> CR2 -> CR3 ([`criteria`]);
//! - request normalisation, per-inode and locality-group preallocation
//!   ([`prealloc`]);
//! - bitmap prefetch that also initialises BLOCK_UNINIT groups;
//! - frees that can be deferred until the freeing transaction commits
//!   ([`free`]);
//! - per-criterion statistics and a free-extent histogram ([`stats`]);
//! - a memory budget for loaded groups ([`AllocConfig::loaded_budget_bytes`],
//!   64 MiB by default, set by `MountOptions::alloc_cache_bytes`): beyond
//!   it clean groups are unloaded (a second-chance clock over the loaded
//!   groups) and loaded again from their cached bitmap when needed, as the
//!   kernel's page cache reclaims bitmap pages;
//! - scans that skip groups and flex groups by their free counters
//!   ([`group::FreeTotals`]), so that a nearly full filesystem's groups
//!   are not loaded to find out they cannot fit.
//!
//! # Bigalloc
//!
//! With bigalloc the bitmaps, the buddy and the group free counts are in
//! clusters (2^n blocks), as on disk; inside this module a group-relative
//! position or length is in these *units* (a cluster, or a block without
//! bigalloc). The public interface stays in blocks: a data request for
//! logical block `l` gets blocks starting at `l`'s offset inside a fresh
//! cluster (the kernel's rule that a block's logical and physical offsets
//! in their clusters agree), a metadata request gets a whole cluster, and
//! [`Allocator::free`] frees every cluster its block range touches (the
//! callers decide which clusters no block of the file still needs).
//! The superblock's free count stays in blocks, as the kernel writes it.
//!
//! # Locking
//!
//! Lock order (outer first); no path takes them in another order:
//!
//! 1. `flush_lock` (Mutex): serializes writers of shared metadata blocks
//!    (descriptor blocks, superblock) during [`Allocator::flush`]; held
//!    across device writes, which is its purpose; never on the allocation
//!    path.
//! 2. a preallocation lock (per-inode shard or locality group, Mutex);
//! 3. one group's load lock (Mutex), only while the group is not loaded
//!    yet: held across the read of its bitmap (see
//!    `Allocator::ensure_loaded`);
//! 4. one group's state lock (Mutex): never two groups at once (checked
//!    in debug builds, with the inode allocator's group locks, by
//!    [`crate::lock_order`]);
//! 5. one order list lock (RwLock): taken exclusively only while a group
//!    lock is held (to move the group between lists); taken shared for a
//!    lookup with *no* group lock held, and released before any group lock
//!    is taken.
//! 6. the pending-free list and the loaded-group queue (Mutexes),
//!    innermost; never both at once.
//!
//! No allocator-wide lock is taken on the allocation path: threads working
//! in different groups never contend. A bitmap load reads the device
//! under that group's load lock alone, so a group is read once and its
//! other loaders wait for that read instead of repeating it.

pub mod buddy;
pub mod criteria;
pub mod delalloc;
pub mod fixture;
mod free;
pub mod group;
pub mod inodes;
pub mod layout;
pub mod lists;
pub mod prealloc;
mod report;
pub mod stats;

use crate::error::{Error, Result};
use crate::format::block_number::{FileBlock, PhysicalBlock};
use crate::format::group_desc::{block_bitmap_checksum, GroupDesc, BG_BLOCK_UNINIT};
use crate::format::superblock::{Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use crate::volume::Volume;
use free::PendingFree;
use group::{GroupState, LoadKind};
use lists::OrderLists;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

pub use criteria::ScanLimits;
pub use prealloc::PreallocConfig;
pub use stats::{AllocStats, Criterion, FreeExtentHistogram};

/// log2 of the groups per flex group: s_log_groups_per_flex with flex_bg,
/// else 0 (every group is its own flex group).
pub fn flex_bits(sb: &Superblock) -> u32 {
    if sb.features.has_incompat(crate::format::features::incompat::FLEX_BG) {
        u32::from(sb.log_groups_per_flex).min(31)
    } else {
        0
    }
}

/// Request flags.
pub mod flags {
    /// Filesystem metadata (extent, directory, xattr blocks): never
    /// normalised or preallocated.
    pub const METADATA: u32 = 0x1;
    /// Hint: a small file; use the shared locality-group preallocation.
    pub const SMALL_FILE: u32 = 0x2;
    /// Hint: a streaming (growing) file; use per-inode preallocation.
    pub const STREAM: u32 = 0x4;
    /// Exactly `len` contiguous blocks, or ENOSPC.
    pub const EXACT_LEN: u32 = 0x8;
    /// Do not preallocate beyond the request.
    pub const NO_PREALLOC: u32 = 0x10;
}

/// A request for blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllocRequest {
    /// Owning inode (0 for none): keys the per-inode preallocation.
    pub inode: u32,
    /// Logical block in the file the allocation is for.
    pub logical: FileBlock,
    /// Preferred physical block (e.g. right after the file's previous
    /// extent, or the inode's group for a new file); 0 = no preference.
    pub goal: PhysicalBlock,
    /// Blocks wanted.
    pub len: u32,
    /// Fewest blocks acceptable (1 if 0); `len` with [`flags::EXACT_LEN`].
    pub min_len: u32,
    /// Size the file will have in bytes (drives normalisation).
    pub file_size: u64,
    /// [`flags`] bits.
    pub flags: u32,
}

/// Blocks handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// First physical block.
    pub start: PhysicalBlock,
    /// Number of blocks (between the request's minimum and its length;
    /// with bigalloc, up to the end of the last cluster taken).
    pub len: u32,
    /// Which criterion found them.
    pub criterion: Criterion,
}

/// Tunables and the seed's before/after switches.
#[derive(Debug, Clone)]
pub struct AllocConfig {
    /// Use CR1.5 when CR1 fails (seed 004, "Problem 3"). Off = before.
    pub cr1_5: bool,
    /// Prefetch also initialises BLOCK_UNINIT groups (seed 004,
    /// "Problem 1"). Off = before: such groups stay unloaded until a
    /// linear scan reaches them.
    pub prefetch_uninit: bool,
    /// During CR1, skip free extents shorter than the goal (seed 004,
    /// "Problem 2"). Off = before.
    pub skip_small_extents: bool,
    /// Groups loaded per prefetch batch (the kernel's mb_prefetch).
    pub prefetch_batch: u32,
    /// Extent scan limits (mb_max_to_scan / mb_min_to_scan).
    pub limits: ScanLimits,
    /// Smallest order for which CR0 is tried (mb_order2_req).
    pub order2_req: u32,
    /// How far CR1.5 may trim the goal, in orders (mb_best_avail_max_trim_order).
    pub best_avail_max_trim_order: u32,
    /// Preallocation tunables.
    pub prealloc: PreallocConfig,
    /// Memory the loaded groups (bitmap and buddy) may take, in bytes
    /// (0: no limit). Beyond it, clean groups are unloaded (see
    /// `Allocator::evict`), as the kernel's page cache reclaims bitmap
    /// pages; a group is loaded again from its bitmap when needed.
    pub loaded_budget_bytes: u64,
    /// Groups CR2 may load per request (those whose counters say they may
    /// hold the goal length); past it, CR2 looks at loaded groups only and
    /// CR3 finishes the search. On a nearly full, fragmented filesystem
    /// every group's counter may pass while none holds the goal: without
    /// this, one request would load every bitmap.
    pub cr2_load_budget: u32,
}

/// Default [`AllocConfig::loaded_budget_bytes`]: 64 MiB, about 5,000
/// groups of 4 KiB blocks (the block groups of 680 GiB).
pub const DEFAULT_LOADED_BUDGET: u64 = 64 << 20;

impl Default for AllocConfig {
    fn default() -> Self {
        AllocConfig {
            cr1_5: true,
            prefetch_uninit: true,
            skip_small_extents: true,
            prefetch_batch: 32,
            limits: ScanLimits::default(),
            order2_req: 2,
            best_avail_max_trim_order: 3,
            prealloc: PreallocConfig::default(),
            loaded_budget_bytes: DEFAULT_LOADED_BUDGET,
            cr2_load_budget: 64,
        }
    }
}

/// A group's buddy summary, one per group from
/// [`group_summaries`](crate::diagnostics::group_summaries): what `uext4
/// mbstats` prints to show how a group's free space is fragmented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSummary {
    /// Group number.
    pub group: u32,
    /// Free blocks (allocatable view).
    pub free: u32,
    /// Maximal free runs.
    pub fragments: u32,
    /// Free buddy chunks per order.
    pub counters: Vec<u32>,
    /// Largest order with a free chunk.
    pub largest_free_order: Option<u32>,
    /// Order of the average free run.
    pub avg_fragment_order: Option<u32>,
    /// Bitmap and descriptor disagree (never allocated from).
    pub corrupt: bool,
}

/// One group as the allocator sees it.
#[derive(Debug)]
pub(crate) struct Group {
    pub state: Mutex<Option<GroupState>>,
    /// Serialises the group's loaders (see [`Allocator::ensure_loaded`]).
    load: Mutex<()>,
    /// Set once `state` is `Some`; lets scans skip unloaded groups
    /// without locking.
    pub loaded: AtomicBool,
    /// Free blocks in the buddy view, updated under the lock; read
    /// without it as a hint when choosing groups.
    pub free_hint: AtomicU32,
    /// The group was unloaded once: the descriptor read at open is stale,
    /// the next load reads the current one from the cache.
    evicted: AtomicBool,
    /// Used since the eviction clock last passed (second chance).
    referenced: AtomicBool,
    /// The group's number (names it in lock-order reports).
    no: u64,
}

impl Group {
    /// Takes the group's state lock (checked against the lock order:
    /// one group lock at a time, block and inode groups alike).
    pub fn lock(&self) -> crate::locks::Ordered<parking_lot::MutexGuard<'_, Option<GroupState>>> {
        crate::locks::ordered(crate::lock_order::Class::Group, self.no, || self.state.lock())
    }

    /// Takes the group's load lock (held across the bitmap read; see
    /// [`crate::locks`], order 7).
    fn lock_load(&self) -> crate::locks::Ordered<parking_lot::MutexGuard<'_, ()>> {
        crate::locks::ordered(crate::lock_order::Class::GroupLoad, self.no, || self.load.lock())
    }
}

/// Queued groups one eviction call looks at, at most.
const EVICT_SCAN: u32 = 256;

/// Fewest groups kept loaded whatever the budget: an allocation works in a
/// few groups at once (the goal's, a prefetch batch, its candidates).
const MIN_LOADED: u64 = 64;

/// The multiblock allocator of one filesystem.
#[derive(Debug)]
pub struct Allocator {
    vol: Arc<Volume>,
    cfg: AllocConfig,
    groups: Vec<Group>,
    lfo: OrderLists,
    afo: OrderLists,
    prealloc: prealloc::Preallocs,
    pending: Mutex<Vec<PendingFree>>,
    counters: stats::Counters,
    prefetch_cursor: AtomicU64,
    loaded_groups: AtomicU64,
    /// Loaded groups in load order: the eviction clock's queue.
    loaded_queue: Mutex<std::collections::VecDeque<u32>>,
    /// Most groups loaded at once ([`AllocConfig::loaded_budget_bytes`]
    /// over the memory of one group; u64::MAX without a budget).
    max_loaded: u64,
    system_zone: Vec<(u64, u64)>,
    /// Every group's bitmaps and inode table, sorted and merged (what an
    /// uninitialised group's bitmap is built from).
    meta_zone: Vec<(u64, u64)>,
    /// Free units in total and per flex group (unloaded groups count
    /// their descriptor's figure).
    totals: Arc<group::FreeTotals>,
    flush_lock: Mutex<()>,
    /// log2 of the blocks per cluster (0 without bigalloc).
    cbits: u32,
    /// Allocation units (clusters) per group.
    upg: u32,
}

impl Allocator {
    /// An allocator over `vol`. Groups are loaded lazily (and by prefetch).
    pub fn new(vol: Arc<Volume>, cfg: AllocConfig) -> Result<Allocator> {
        let cbits = vol.sb.log_cluster_size.saturating_sub(vol.sb.log_block_size);
        let upg = vol.sb.blocks_per_group >> cbits;
        let ngroups = vol.groups.len();
        let max_order = buddy::order_of(upg.max(1));
        let groups = (0..ngroups)
            .map(|g| Group {
                no: g as u64,
                state: Mutex::new(None),
                load: Mutex::new(()),
                loaded: AtomicBool::new(false),
                free_hint: AtomicU32::new(0),
                evicted: AtomicBool::new(false),
                referenced: AtomicBool::new(false),
            })
            .collect();
        let meta_zone = layout::group_metadata(&vol);
        let system_zone = Self::system_zone(&vol, &meta_zone)?;
        let totals = Arc::new(group::FreeTotals::new(
            vol.groups.iter().map(|gd| gd.free_blocks_count),
            ngroups,
            flex_bits(&vol.sb),
        ));
        // A loaded group holds its bitmap block, the buddy's bitmaps (about
        // two bits per unit) and a few small vectors.
        let group_bytes = vol.block_size as u64 + u64::from(upg) / 4 + 256;
        let max_loaded = match cfg.loaded_budget_bytes {
            0 => u64::MAX,
            b => (b / group_bytes).max(MIN_LOADED),
        };
        Ok(Allocator {
            loaded_queue: Mutex::new(std::collections::VecDeque::new()),
            max_loaded,
            prealloc: prealloc::Preallocs::new(cfg.prealloc.clone()),
            vol,
            cfg,
            groups,
            lfo: OrderLists::new(max_order),
            afo: OrderLists::new(max_order),
            pending: Mutex::new(Vec::new()),
            counters: stats::Counters::default(),
            prefetch_cursor: AtomicU64::new(0),
            loaded_groups: AtomicU64::new(0),
            system_zone,
            meta_zone,
            totals,
            flush_lock: Mutex::new(()),
            cbits,
            upg,
        })
    }

    /// Every range of fixed metadata: superblock and descriptor copies,
    /// bitmaps and inode tables (`meta`), the journal. Sorted and merged.
    fn system_zone(vol: &Volume, meta: &[(u64, u64)]) -> Result<Vec<(u64, u64)>> {
        let mut v = meta.to_vec();
        for g in 0..vol.groups.len() as u64 {
            let base = layout::base_meta_blocks(vol, g);
            if base > 0 {
                v.push((vol.group_first_block(g), base));
            }
        }
        if vol.sb.journal_inum != 0 {
            let j = crate::inode::read_inode(vol, vol.sb.journal_inum)?;
            for m in crate::inode::extents(vol, &j)? {
                if let crate::inode::MapKind::Mapped(p) | crate::inode::MapKind::Unwritten(p) = m.kind {
                    v.push((p.get(), m.len));
                }
            }
        }
        Ok(layout::merge_ranges(v))
    }

    /// True if any block of `start..start+len` is fixed metadata.
    pub fn in_system_zone(&self, start: PhysicalBlock, len: u64) -> bool {
        let start = start.get();
        let i = self.system_zone.partition_point(|&(s, _)| s < start + len);
        i > 0 && {
            let (s, l) = self.system_zone[i - 1];
            s + l > start
        }
    }

    /// The volume.
    #[cfg(test)]
    pub fn volume(&self) -> &Arc<Volume> {
        &self.vol
    }

    /// Number of groups.
    pub fn group_count(&self) -> u32 {
        self.groups.len() as u32
    }

    /// Blocks per allocation unit (a cluster; 1 without bigalloc).
    pub fn cluster_ratio(&self) -> u64 {
        1 << self.cbits
    }

    /// Group of `block` and the unit (cluster) it lies in, group-relative.
    fn group_of(&self, block: PhysicalBlock) -> (u32, u32) {
        let first = u64::from(self.vol.sb.first_data_block);
        let bpg = u64::from(self.vol.sb.blocks_per_group);
        let b = block.get().max(first) - first;
        (((b / bpg) as u32).min(self.group_count() - 1), ((b % bpg) >> self.cbits) as u32)
    }

    /// First block of group-relative unit `rel` of group `g`.
    fn block_of(&self, g: u32, rel: u32) -> PhysicalBlock {
        PhysicalBlock(self.vol.group_first_block(u64::from(g))) + (u64::from(rel) << self.cbits)
    }

    /// Loads group `g` if needed. Returns true if this call loaded it.
    ///
    /// One loader at a time: the bitmap is verified against the
    /// descriptor read at open, which holds only until the group's first
    /// allocation changes the cached bitmap, so a second loader must not
    /// read it after the first has installed the group.
    pub(crate) fn ensure_loaded(&self, g: u32) -> Result<bool> {
        let grp = &self.groups[g as usize];
        grp.referenced.store(true, Relaxed);
        if grp.loaded.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(false);
        }
        {
            let _loader = grp.lock_load();
            if grp.loaded.load(std::sync::atomic::Ordering::Acquire) {
                return Ok(false);
            }
            // A group unloaded before has changed since open: its
            // descriptor is the cached (journaled) one, which agrees with
            // the cached bitmap (both are installed under the group's
            // lock, see `with_group_bitmap`, and a group is unloaded only
            // when its state is in them).
            let gd = if grp.evicted.load(Relaxed) { self.current_desc(g)? } else { self.vol.groups[g as usize] };
            let (mut state, kind, steps) = group::load(&self.vol, u64::from(g), &gd, &self.meta_zone)?;
            self.counters.group_steps.fetch_add(steps, Relaxed);
            if !state.corrupt && self.metadata_marked_free(g, &state) {
                // Like the kernel's "overlap fs metadata" check: a bitmap that
                // calls fixed metadata free is not trusted for allocation.
                state.corrupt = true;
            }
            let mut slot = grp.lock();
            if state.corrupt {
                self.counters.corrupt_groups.fetch_add(1, Relaxed);
            }
            self.counters.buddy_generations.fetch_add(1, Relaxed);
            if kind == LoadKind::Uninit {
                self.counters.uninit_inits.fetch_add(1, Relaxed);
            }
            // The group's counter was its descriptor's figure (or, after
            // an eviction, the count it had then): the bitmap's from now on.
            self.totals.set(g, state.disk_free);
            state.totals = Some((self.totals.clone(), g));
            *slot = Some(state);
            if let Some(st) = slot.as_mut() {
                self.relist(g, st);
            }
            // Queued before anyone can change it: a flush finds every
            // dirty group in the queue (the queue lock is innermost).
            self.loaded_queue.lock().push_back(g);
            grp.loaded.store(true, std::sync::atomic::Ordering::Release);
            self.loaded_groups.fetch_add(1, Relaxed);
        }
        // No lock held here: eviction takes other groups' locks.
        if self.loaded_groups.load(Relaxed) > self.max_loaded {
            // Not `g`: its caller is about to use it (and would load it
            // again, and again, when every other loaded group is pinned).
            self.evict(g);
        }
        Ok(true)
    }

    /// Group `g`'s descriptor as it is now (the cached descriptor block,
    /// with every change installed by the running transaction).
    fn current_desc(&self, g: u32) -> Result<GroupDesc> {
        let sb = &self.vol.sb;
        let ds = usize::from(sb.desc_size);
        let per_block = self.vol.block_size / ds;
        let blk = self.vol.desc_block_location(u64::from(g) / per_block as u64);
        let off = (g as usize % per_block) * ds;
        let buf = self.vol.block(blk)?;
        GroupDesc::parse(sb, g, &buf.data()[off..off + ds], blk)
    }

    /// Locks group `g` loaded: loads it if needed, and again if it was
    /// unloaded between the load and the lock.
    fn lock_loaded(&self, g: u32) -> Result<crate::locks::Ordered<parking_lot::MutexGuard<'_, Option<GroupState>>>> {
        loop {
            self.ensure_loaded(g)?;
            let slot = self.groups[g as usize].lock();
            if slot.is_some() {
                return Ok(slot);
            }
        }
    }

    /// Unloads clean groups, oldest loaded first, until the loaded groups
    /// are within the budget again (the kernel's reclaim of bitmap pages).
    ///
    /// A group is unloaded only when nothing in memory is ahead of the
    /// cache: its bitmap is not dirty (the journal or a flush has it), and
    /// its buddy reserves nothing the bitmap does not (no preallocation,
    /// no free waiting for its commit, no reservation between the buddy
    /// and the bitmap update of an allocation in progress: buddy free ==
    /// disk free), and it is not corrupt (kept, so that it stays skipped).
    /// A group used since the clock last passed gets a second chance;
    /// `keep_group` (the one just loaded) is not unloaded.
    /// Each call looks at a bounded number of groups, so when most loaded
    /// groups are pinned the budget is exceeded rather than scanned for.
    pub(crate) fn evict(&self, keep_group: u32) {
        // A flush copies dirty bitmaps and writes them after releasing the
        // group locks: nothing is unloaded meanwhile (no wait: the flush
        // lock is outermost).
        let Some(_no_flush) = self.flush_lock.try_lock() else { return };
        let mut looked = 0;
        while self.loaded_groups.load(Relaxed) > self.max_loaded && looked < EVICT_SCAN {
            looked += 1;
            let Some(g) = self.loaded_queue.lock().pop_front() else { return };
            let grp = &self.groups[g as usize];
            if g == keep_group || grp.referenced.swap(false, Relaxed) {
                self.loaded_queue.lock().push_back(g);
                continue;
            }
            let _loader = grp.lock_load();
            let mut slot = grp.lock();
            let keep = match slot.as_ref() {
                None => continue, // already unloaded: not queued any more
                Some(st) => st.dirty || st.corrupt || st.buddy.free() != st.disk_free,
            };
            if keep {
                drop(slot);
                self.loaded_queue.lock().push_back(g);
                continue;
            }
            if let Some(st) = slot.take() {
                self.lfo.update(g, st.lfo, None);
                self.afo.update(g, st.afo, None);
            }
            grp.free_hint.store(0, Relaxed);
            grp.evicted.store(true, Relaxed);
            grp.loaded.store(false, std::sync::atomic::Ordering::Release);
            self.loaded_groups.fetch_sub(1, Relaxed);
            self.counters.evictions.fetch_add(1, Relaxed);
        }
    }

    /// Groups loaded now.
    pub fn loaded_group_count(&self) -> u64 {
        self.loaded_groups.load(Relaxed)
    }

    /// Most groups kept loaded (see [`AllocConfig::loaded_budget_bytes`]).
    #[cfg(test)]
    pub fn max_loaded_groups(&self) -> u64 {
        self.max_loaded
    }

    /// True if the group's bitmap shows any fixed-metadata block as free.
    fn metadata_marked_free(&self, g: u32, st: &GroupState) -> bool {
        let start = self.vol.group_first_block(u64::from(g));
        let end = start + (u64::from(st.buddy.len()) << self.cbits);
        let first = self.system_zone.partition_point(|&(s, l)| s + l <= start);
        for &(s, l) in &self.system_zone[first..] {
            if s >= end {
                break;
            }
            let (a, b) = (s.max(start), (s + l).min(end));
            let (ua, ub) = ((a - start) >> self.cbits, (b - start - 1) >> self.cbits);
            if a < b && !st.buddy.is_used_range(ua as u32, (ub - ua + 1) as u32) {
                return true;
            }
        }
        false
    }

    /// Puts a group on the lists its state calls for (group lock held).
    pub(crate) fn relist(&self, g: u32, st: &mut GroupState) {
        let (lfo, afo) = st.list_orders();
        self.lfo.update(g, st.lfo, lfo);
        self.afo.update(g, st.afo, afo);
        st.lfo = lfo;
        st.afo = afo;
        let free = if st.corrupt { 0 } else { st.buddy.free() };
        self.groups[g as usize].free_hint.store(free, Relaxed);
    }

    /// Loads up to `prefetch_batch` not-yet-loaded groups, continuing where
    /// the previous prefetch stopped. BLOCK_UNINIT groups are initialised
    /// too unless the `prefetch_uninit` switch is off.
    pub(crate) fn prefetch(&self) -> Result<()> {
        let n = self.group_count() as u64;
        // Prefetch fills memory ahead of need: never past the budget (it
        // would only push out groups in use), and not once all is loaded.
        let loaded = self.loaded_groups.load(Relaxed);
        if loaded >= n || loaded + u64::from(self.cfg.prefetch_batch) > self.max_loaded {
            return Ok(());
        }
        let start = self.prefetch_cursor.fetch_add(u64::from(self.cfg.prefetch_batch), Relaxed);
        for i in 0..u64::from(self.cfg.prefetch_batch).min(n) {
            let g = ((start + i) % n) as u32;
            self.counters.group_steps.fetch_add(1, Relaxed);
            // A full group has nothing to offer (the kernel's prefetch
            // skips groups without free clusters too).
            if self.groups[g as usize].loaded.load(Relaxed) || self.totals.group(g) == 0 {
                continue;
            }
            let uninit = group::is_uninit(&self.vol, u64::from(g));
            if uninit && !self.cfg.prefetch_uninit {
                continue;
            }
            if self.ensure_loaded(g)? {
                self.counters.prefetch_groups.fetch_add(1, Relaxed);
                if !uninit {
                    self.counters.prefetch_ios.fetch_add(1, Relaxed);
                }
            }
        }
        Ok(())
    }

    /// Loads every group (for statistics over the whole filesystem).
    pub fn load_all(&self) -> Result<()> {
        for g in 0..self.group_count() {
            self.ensure_loaded(g)?;
        }
        Ok(())
    }

    /// Allocates blocks for `req`.
    ///
    /// With bigalloc, whole clusters are taken: the blocks handed out
    /// start at `req.logical`'s offset in its cluster (0 for tree and
    /// xattr blocks) and run to the end of the last cluster (the caller
    /// gives back whole clusters it does not use).
    pub fn allocate(&self, req: &AllocRequest) -> Result<Allocation> {
        if req.len == 0 {
            return Err(Error::Invalid("allocation of 0 blocks".into()));
        }
        if self.cbits == 0 {
            return self.allocate_units(req);
        }
        let r = self.cluster_ratio();
        // Tree and xattr blocks ask with logical 0: a cluster's start.
        let off = req.logical.get() % r;
        let min_len = if req.flags & flags::EXACT_LEN != 0 { req.len } else { req.min_len.clamp(1, req.len) };
        let units = |n: u32| u32::try_from((off + u64::from(n)).div_ceil(r)).unwrap_or(u32::MAX);
        // Preallocation keeps logical-to-physical maps in blocks: not used
        // with clusters (the request is still one contiguous run).
        let creq = AllocRequest {
            len: units(req.len),
            min_len: units(min_len),
            goal: PhysicalBlock(req.goal.get().div_ceil(r) * r),
            flags: (req.flags | flags::NO_PREALLOC) & !flags::EXACT_LEN,
            ..*req
        };
        let a = self.allocate_units(&creq)?;
        let len = (u64::from(a.len) * r - off).min(u64::from(u32::MAX)) as u32;
        Ok(Allocation { start: a.start + off, len, criterion: a.criterion })
    }

    /// [`Allocator::allocate`] in allocation units (clusters).
    fn allocate_units(&self, req: &AllocRequest) -> Result<Allocation> {
        let mut req = *req;
        if req.flags & flags::EXACT_LEN != 0 {
            req.min_len = req.len;
        }
        req.min_len = req.min_len.clamp(1, req.len);
        // A single allocation never spans groups.
        let bpg = self.upg;
        req.len = req.len.min(bpg);
        req.min_len = req.min_len.min(req.len);
        self.counters.requests.fetch_add(1, Relaxed);
        let mut result = self.allocate_inner(&req);
        if matches!(result, Err(Error::NoSpace(_))) && self.prealloc.any() {
            // Free blocks may all sit in preallocations (other inodes',
            // the locality groups'): give them back and try once more, as
            // the kernel's ext4_mb_discard_preallocations_should_retry.
            self.discard_all_prealloc();
            result = self.allocate_inner(&req);
        }
        match &result {
            Ok(a) => {
                self.counters.hits[a.criterion.index()].fetch_add(1, Relaxed);
                self.counters.blocks_allocated.fetch_add(u64::from(a.len) << self.cbits, Relaxed);
            }
            Err(Error::NoSpace(_)) => {
                self.counters.enospc.fetch_add(1, Relaxed);
            }
            Err(_) => {}
        }
        result
    }

    fn allocate_inner(&self, req: &AllocRequest) -> Result<Allocation> {
        let data = req.flags & flags::METADATA == 0;
        let may_prealloc = data && req.flags & (flags::NO_PREALLOC | flags::EXACT_LEN) == 0;
        if may_prealloc {
            if let Some(a) = self.prealloc.use_existing(self, req)? {
                return Ok(a);
            }
        }
        let plan = if may_prealloc {
            prealloc::normalize(&self.cfg.prealloc, req, self.vol.block_size as u64, self.vol.sb.blocks_per_group)
        } else {
            prealloc::Plan::exact(req)
        };
        let found = criteria::regular(self, req.goal, plan.goal_len, req.min_len)?;
        let (g, rel, flen, criterion) = found;
        // `take` and the allocation's length are in units here; `allocate`
        // turns them into blocks.
        let take = flen.min(req.len);
        {
            let mut slot = self.groups[g as usize].lock();
            if let Some(st) = slot.as_mut() {
                st.disk_mark_used(rel, take);
            }
        }
        if flen > take {
            self.prealloc.create(self, req, &plan, g, rel + take, flen - take);
        }
        Ok(Allocation { start: self.block_of(g, rel), len: take, criterion })
    }

    /// Counts one journaled change of a group-descriptor block
    /// ([`AllocStats::desc_writes`]).
    pub(crate) fn note_desc_write(&self) {
        self.counters.desc_writes.fetch_add(1, Relaxed);
    }

    /// Runs `f(bitmap, free)` on group `g`'s on-disk view under the
    /// group's lock (the journal copies it into the transaction).
    pub fn with_group_bitmap<R>(&self, g: u32, f: impl FnOnce(&[u8], u32) -> R) -> Result<R> {
        let mut slot = self.lock_loaded(g)?;
        let st = slot.as_mut().ok_or_else(|| Error::Invalid("group not loaded".into()))?;
        // The journal now owns writing it; flush() need not.
        st.dirty = false;
        st.uninit = false;
        Ok(f(&st.disk, st.disk_free))
    }

    /// Free blocks of group `g` (a lock-free hint; with bigalloc its free
    /// clusters times the blocks per cluster).
    pub fn group_free_hint(&self, g: u32) -> u32 {
        let Some(grp) = self.groups.get(g as usize) else { return 0 };
        let units = if grp.loaded.load(Relaxed) { grp.free_hint.load(Relaxed) } else { self.totals.group(g) };
        units.saturating_mul(1 << self.cbits)
    }

    /// Free blocks of flex group `f` (a lock-free counter, O(1)).
    pub fn flex_free_blocks(&self, f: u32) -> u64 {
        self.totals.flex(f) << self.cbits
    }

    /// Returns inode `ino`'s unused preallocated blocks (on close or truncate).
    pub fn discard_inode_prealloc(&self, ino: u32) {
        self.prealloc.discard_inode(self, ino);
    }

    /// How many preallocations inode `ino` holds (at most
    /// [`prealloc::INODE_MAX_PAS`]).
    #[cfg(test)]
    pub fn inode_preallocs(&self, ino: u32) -> usize {
        self.prealloc.inode_count(ino)
    }

    /// Returns every unused preallocated block (on unmount).
    pub fn discard_all_prealloc(&self) {
        self.prealloc.discard_all(self);
    }

    /// Gives back `len` reserved (preallocated) blocks to the free pool.
    pub(crate) fn unreserve(&self, g: u32, rel: u32, len: u32) {
        let mut slot = self.groups[g as usize].lock();
        if let Some(st) = slot.as_mut() {
            st.buddy.mark_free(rel, len);
            self.relist(g, st);
        }
        self.counters.prealloc_discarded_blocks.fetch_add(u64::from(len), Relaxed);
    }

    /// Writes every changed bitmap, its descriptor (free count, flags,
    /// checksums) and the superblock's free count to the device.
    ///
    /// Not crash-safe by itself: the journal makes these writes atomic.
    pub fn flush(&self) -> Result<()> {
        if self.vol.device().read_only() {
            return Err(Error::ReadOnly("the device is read-only".into()));
        }
        let _serial = self.flush_lock.lock();
        let sb = &self.vol.sb;
        let ds = usize::from(sb.desc_size);
        let per_block = self.vol.block_size / ds;
        // (group, bitmap bytes, free) of dirty groups.
        let mut dirty = Vec::new();
        // Dirty groups are loaded groups (one is unloaded only when clean,
        // and not while this runs: see `evict`): the queue, not every group.
        let mut loaded: Vec<u32> = self.loaded_queue.lock().iter().copied().collect();
        loaded.sort_unstable();
        for g in loaded {
            let mut slot = self.groups[g as usize].lock();
            if let Some(st) = slot.as_mut().filter(|st| st.dirty) {
                st.dirty = false;
                st.uninit = false;
                dirty.push((g, st.disk.clone(), st.disk_free));
            }
        }
        let mut gdt: std::collections::BTreeMap<u64, Vec<u8>> = std::collections::BTreeMap::new();
        for (g, bitmap, free) in &dirty {
            self.vol.cache.write(self.vol.groups[*g as usize].block_bitmap, bitmap)?;
            let idx = *g as u64 / per_block as u64;
            let blk = self.vol.desc_block_location(idx);
            let raw = match gdt.entry(blk) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => e.insert(self.vol.block(blk)?.data().to_vec()),
            };
            let off = (*g as usize % per_block) * ds;
            // The descriptor as it is now, not as read at open: only the
            // block fields are this allocator's to change.
            let mut gd = GroupDesc::parse(sb, *g, &raw[off..off + ds], blk)?;
            gd.free_blocks_count = *free;
            gd.flags &= !BG_BLOCK_UNINIT;
            gd.block_bitmap_csum = block_bitmap_checksum(sb, bitmap);
            gd.encode(sb, *g, &mut raw[off..off + ds]);
        }
        for (blk, raw) in &gdt {
            self.vol.cache.write(*blk, raw)?;
        }
        let mut raw = [0u8; SUPERBLOCK_SIZE];
        self.vol.device().read_at(&mut raw, SUPERBLOCK_OFFSET)?;
        let mut cur = Superblock::parse(&raw)?;
        let free_inodes = cur.free_inodes_count;
        cur.set_free_counts(self.free_blocks(), free_inodes);
        self.vol.device().write_at(cur.raw(), SUPERBLOCK_OFFSET)?;
        self.vol.device().flush()?;
        Ok(())
    }
}
