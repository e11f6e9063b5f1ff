//! Allocator statistics (the kernel's mb_stats) and the free-extent
//! histogram (what e2freefrag reports).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The allocation criteria, in the order they are tried: the index of
/// the per-criterion counters of [`AllocStats`], for telling how hard
/// the allocator had to search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Criterion {
    /// The goal block itself was free for the goal length.
    Goal,
    /// Served from a preallocation (inode or locality group).
    Prealloc,
    /// CR0: power-of-two request from the largest-free-order lists.
    Cr0,
    /// CR1: goal length, group chosen from the average-fragment lists.
    Cr1,
    /// CR1.5: goal trimmed to the best length the lists say exists.
    Cr1_5,
    /// CR2: goal length, linear scan of groups.
    Cr2,
    /// CR3: anything free.
    Cr3,
}

impl Criterion {
    /// The criteria that scan groups, in order.
    pub const SCANNING: [Criterion; 5] =
        [Criterion::Cr0, Criterion::Cr1, Criterion::Cr1_5, Criterion::Cr2, Criterion::Cr3];

    /// Index into per-criterion counters.
    pub fn index(self) -> usize {
        match self {
            Criterion::Goal => 0,
            Criterion::Prealloc => 1,
            Criterion::Cr0 => 2,
            Criterion::Cr1 => 3,
            Criterion::Cr1_5 => 4,
            Criterion::Cr2 => 5,
            Criterion::Cr3 => 6,
        }
    }

    /// Name as the kernel prints it.
    pub fn name(self) -> &'static str {
        match self {
            Criterion::Goal => "goal",
            Criterion::Prealloc => "prealloc",
            Criterion::Cr0 => "cr_p2_aligned (CR0)",
            Criterion::Cr1 => "cr_goal_fast (CR1)",
            Criterion::Cr1_5 => "cr_best_avail (CR1.5)",
            Criterion::Cr2 => "cr_goal_slow (CR2)",
            Criterion::Cr3 => "cr_any_free (CR3)",
        }
    }

    /// Every criterion, in counter order.
    pub const ALL: [Criterion; 7] = [
        Criterion::Goal,
        Criterion::Prealloc,
        Criterion::Cr0,
        Criterion::Cr1,
        Criterion::Cr1_5,
        Criterion::Cr2,
        Criterion::Cr3,
    ];
}

/// Live counters, updated with relaxed atomics (they are statistics).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub requests: AtomicU64,
    pub blocks_allocated: AtomicU64,
    pub blocks_freed: AtomicU64,
    pub hits: [AtomicU64; 7],
    pub failures: [AtomicU64; 7],
    pub extents_scanned: [AtomicU64; 7],
    pub groups_scanned: [AtomicU64; 7],
    pub goal_len_hits: AtomicU64,
    pub group_steps: AtomicU64,
    pub enospc: AtomicU64,
    pub buddy_generations: AtomicU64,
    pub prefetch_groups: AtomicU64,
    pub prefetch_ios: AtomicU64,
    pub uninit_inits: AtomicU64,
    pub prealloc_created: AtomicU64,
    pub prealloc_discarded_blocks: AtomicU64,
    pub corrupt_groups: AtomicU64,
    pub evictions: AtomicU64,
    pub desc_writes: AtomicU64,
}

/// A snapshot of the allocator's counters (the kernel's mb_stats), from
/// [`FsCore::alloc_stats`](crate::FsCore::alloc_stats): subtract two
/// snapshots to see what a workload cost the block allocator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Allocation requests.
    pub requests: u64,
    /// Blocks handed out.
    pub blocks_allocated: u64,
    /// Blocks freed.
    pub blocks_freed: u64,
    /// Requests satisfied by each criterion (indexed by [`Criterion::index`]).
    pub hits: [u64; 7],
    /// Times each scanning criterion was tried and found nothing.
    pub failures: [u64; 7],
    /// Free extents examined by each criterion.
    pub extents_scanned: [u64; 7],
    /// Groups examined by each criterion.
    pub groups_scanned: [u64; 7],
    /// Allocations that got the full goal length.
    pub goal_len_hits: u64,
    /// Group-indexed steps the allocation path took: groups a criterion
    /// or the goal looked at, groups prefetch considered, metadata ranges
    /// an uninitialised group's bitmap was built from. Per request it
    /// must not grow with the number of groups (the common path reads
    /// lists and counters, not every group).
    pub group_steps: u64,
    /// Requests that failed with ENOSPC.
    pub enospc: u64,
    /// Buddy structures built (groups loaded).
    pub buddy_generations: u64,
    /// Groups loaded by prefetch.
    pub prefetch_groups: u64,
    /// Bitmap reads issued by prefetch.
    pub prefetch_ios: u64,
    /// BLOCK_UNINIT groups initialised from the layout (no I/O).
    pub uninit_inits: u64,
    /// Preallocations created.
    pub prealloc_created: u64,
    /// Preallocated blocks returned unused.
    pub prealloc_discarded_blocks: u64,
    /// Groups skipped because bitmap and descriptor disagree.
    pub corrupt_groups: u64,
    /// Clean groups unloaded to keep the loaded groups within the budget
    /// (`MountOptions::alloc_cache_bytes`).
    pub evictions: u64,
    /// Groups loaded now (bitmap and buddy in memory).
    pub loaded_groups: u64,
    /// Changes of a group-descriptor block journaled for block and inode
    /// bitmap updates (each a copy of the block): one per deletion whose
    /// block and inode groups share a descriptor block, not one each.
    pub desc_writes: u64,
}

impl Counters {
    pub fn snapshot(&self) -> AllocStats {
        let arr = |a: &[AtomicU64; 7]| std::array::from_fn(|i| a[i].load(Relaxed));
        AllocStats {
            requests: self.requests.load(Relaxed),
            blocks_allocated: self.blocks_allocated.load(Relaxed),
            blocks_freed: self.blocks_freed.load(Relaxed),
            hits: arr(&self.hits),
            failures: arr(&self.failures),
            extents_scanned: arr(&self.extents_scanned),
            groups_scanned: arr(&self.groups_scanned),
            goal_len_hits: self.goal_len_hits.load(Relaxed),
            group_steps: self.group_steps.load(Relaxed),
            enospc: self.enospc.load(Relaxed),
            buddy_generations: self.buddy_generations.load(Relaxed),
            prefetch_groups: self.prefetch_groups.load(Relaxed),
            prefetch_ios: self.prefetch_ios.load(Relaxed),
            uninit_inits: self.uninit_inits.load(Relaxed),
            prealloc_created: self.prealloc_created.load(Relaxed),
            prealloc_discarded_blocks: self.prealloc_discarded_blocks.load(Relaxed),
            corrupt_groups: self.corrupt_groups.load(Relaxed),
            evictions: self.evictions.load(Relaxed),
            loaded_groups: 0,
            desc_writes: self.desc_writes.load(Relaxed),
        }
    }
}

/// Free-space fragmentation, as e2freefrag reports it: free extents are
/// maximal runs of free blocks over the whole filesystem (they may cross
/// group boundaries), bucketed by power-of-two length.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FreeExtentHistogram {
    /// Block size in bytes.
    pub block_size: u32,
    /// Blocks in the filesystem.
    pub total_blocks: u64,
    /// Free blocks.
    pub free_blocks: u64,
    /// Number of free extents.
    pub extents: u64,
    /// Shortest free extent in blocks (0 if none).
    pub min_extent: u64,
    /// Longest free extent in blocks.
    pub max_extent: u64,
    /// Per bucket k (extents of 2^k..2^(k+1) blocks): (extents, blocks).
    pub buckets: Vec<(u64, u64)>,
}

impl FreeExtentHistogram {
    /// Adds one free extent of `len` blocks.
    pub fn add(&mut self, len: u64) {
        if len == 0 {
            return;
        }
        let k = 63 - len.leading_zeros() as usize;
        if self.buckets.len() <= k {
            self.buckets.resize(k + 1, (0, 0));
        }
        self.buckets[k].0 += 1;
        self.buckets[k].1 += len;
        self.extents += 1;
        self.free_blocks += len;
        self.max_extent = self.max_extent.max(len);
        self.min_extent = if self.min_extent == 0 { len } else { self.min_extent.min(len) };
    }

    /// Average free extent length in blocks.
    pub fn avg_extent(&self) -> f64 {
        if self.extents == 0 {
            0.0
        } else {
            self.free_blocks as f64 / self.extents as f64
        }
    }
}
