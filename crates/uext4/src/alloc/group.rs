//! One block group's allocator state and how it is loaded.
//!
//! A group keeps two views of its blocks:
//! - `disk`: the block bitmap as it will be written (blocks that belong
//!   to files or metadata);
//! - `buddy`: what the allocator may hand out, which additionally marks
//!   blocks held by preallocations and blocks freed in a transaction that
//!   has not committed yet (so they cannot be reused before the commit).
//!
//! Invariant: every block used in `disk` is used in `buddy`.

use super::buddy::Buddy;
use super::layout::{group_units, uninit_used_ranges};
use crate::error::Result;
use crate::format::group_desc::{verify_block_bitmap, GroupDesc, BG_BLOCK_UNINIT};
use crate::volume::Volume;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Free allocation units on disk, per group, in total and per flex group
/// (the kernel's bg_free_blocks_count in memory, s_freeclusters_counter
/// and flex_group free_clusters): what statfs, space reservations, Orlov
/// and the allocator's scans read, kept current by every change of a
/// group's count so that no reader sums over the groups and no scan loads
/// a group its counter says cannot fit. A group's counter is its
/// descriptor's figure until it is loaded, then its bitmap's, and stays
/// that after the group is evicted.
#[derive(Debug)]
pub struct FreeTotals {
    total: AtomicU64,
    flex: Vec<AtomicU64>,
    group: Vec<AtomicU32>,
    flex_bits: u32,
}

impl FreeTotals {
    /// Totals of `counts` (one per group), flex groups of 2^`flex_bits`.
    pub fn new(counts: impl Iterator<Item = u32>, ngroups: usize, flex_bits: u32) -> FreeTotals {
        let flex: Vec<AtomicU64> = (0..ngroups.div_ceil(1 << flex_bits)).map(|_| AtomicU64::new(0)).collect();
        let mut group = Vec::with_capacity(ngroups);
        let mut total = 0;
        for (g, c) in counts.enumerate() {
            total += u64::from(c);
            flex[g >> flex_bits].fetch_add(u64::from(c), Ordering::Relaxed);
            group.push(AtomicU32::new(c));
        }
        group.resize_with(ngroups, || AtomicU32::new(0));
        FreeTotals { total: AtomicU64::new(total), flex, group, flex_bits }
    }

    /// Adds `add` and takes `sub` from group `g`, its flex group and the
    /// total (callers serialise changes of one group: its lock).
    pub fn adjust(&self, g: u32, add: u32, sub: u32) {
        let f = &self.flex[(g >> self.flex_bits) as usize];
        let c = &self.group[g as usize];
        // Adds first: a reader never sees the counters wrap below zero.
        c.fetch_add(add, Ordering::Relaxed);
        f.fetch_add(u64::from(add), Ordering::Relaxed);
        self.total.fetch_add(u64::from(add), Ordering::Relaxed);
        c.fetch_sub(sub, Ordering::Relaxed);
        f.fetch_sub(u64::from(sub), Ordering::Relaxed);
        self.total.fetch_sub(u64::from(sub), Ordering::Relaxed);
    }

    /// Sets group `g`'s count to `free` (its bitmap's, at load).
    pub fn set(&self, g: u32, free: u32) {
        let old = self.group(g);
        self.adjust(g, free, old);
    }

    /// Free units in the filesystem.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    /// Free units in flex group `f` (0 past the last).
    pub fn flex(&self, f: u32) -> u64 {
        self.flex.get(f as usize).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Free units of group `g` on disk (0 past the last).
    pub fn group(&self, g: u32) -> u32 {
        self.group.get(g as usize).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// log2 of the groups per flex group.
    pub fn flex_bits(&self) -> u32 {
        self.flex_bits
    }
}

/// The loaded state of a group (behind the group's mutex).
#[derive(Debug)]
pub struct GroupState {
    /// Allocatable view (disk + reservations).
    pub buddy: Buddy,
    /// On-disk bitmap bytes (a whole block).
    pub disk: Vec<u8>,
    /// Free blocks according to `disk` (changed only by the `disk_mark_*`
    /// methods, which publish it).
    pub disk_free: u32,
    /// The allocator's totals this group's changes are counted in (None
    /// until the allocator installs the state), and the group's number:
    /// where `disk_free` is published for readers that take no lock.
    pub totals: Option<(Arc<FreeTotals>, u32)>,
    /// `disk` changed since the last flush.
    pub dirty: bool,
    /// The descriptor still says BLOCK_UNINIT.
    pub uninit: bool,
    /// Bitmap and descriptor disagreed at load: never allocate here.
    pub corrupt: bool,
    /// List this group is on in the largest-free-order lists.
    pub lfo: Option<u32>,
    /// List this group is on in the average-fragment-order lists.
    pub afo: Option<u32>,
}

/// How a group was loaded (for statistics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadKind {
    /// Bitmap read from the device.
    Read,
    /// BLOCK_UNINIT: computed from the layout, no I/O.
    Uninit,
}

/// True if group `g` is BLOCK_UNINIT on disk.
pub fn is_uninit(vol: &Volume, g: u64) -> bool {
    vol.groups.get(g as usize).is_some_and(|gd| gd.has_flag(&vol.sb, BG_BLOCK_UNINIT))
}

/// Builds group `g`'s state. Reads (and verifies) the bitmap unless the
/// group is BLOCK_UNINIT. Does not take any lock: the caller installs the
/// result under the group's mutex.
///
/// `meta` is every group's bitmaps and inode table, sorted and merged (the
/// allocator's index of them): an uninitialised group's used blocks are
/// found by a search in it, not by a walk over all descriptors.
/// Also returns the metadata ranges looked at (the allocator counts them).
///
/// `gd` is the group's descriptor as it is now: the one read at open for
/// a first load, the cached (journaled) one when an evicted group is
/// loaded again.
pub fn load(vol: &Volume, g: u64, gd: &GroupDesc, meta: &[(u64, u64)]) -> Result<(GroupState, LoadKind, u64)> {
    // Bits of the bitmap: clusters with bigalloc.
    let nblocks = group_units(vol, g);
    let bs = vol.block_size;
    let mut steps = 0;
    let (disk, kind) = if gd.has_flag(&vol.sb, BG_BLOCK_UNINIT) {
        let mut bm = vec![0u8; bs];
        // Bits past the group's end are set, as the kernel pads them.
        for i in nblocks..(bs as u32 * 8) {
            bm[(i / 8) as usize] |= 1 << (i % 8);
        }
        let ranges = uninit_used_ranges(vol, g, meta);
        steps = ranges.len() as u64;
        for (s, l) in ranges {
            for i in s..s + l {
                bm[(i / 8) as usize] |= 1 << (i % 8);
            }
        }
        (bm, LoadKind::Uninit)
    } else {
        let buf = vol.block(gd.block_bitmap)?;
        verify_block_bitmap(&vol.sb, gd, buf.data(), gd.block_bitmap)?;
        (buf.data().to_vec(), LoadKind::Read)
    };
    let buddy = Buddy::from_bitmap(&disk, nblocks);
    let disk_free = buddy.free();
    // The kernel refuses to allocate from a group whose bitmap and
    // descriptor disagree (EXT4_GROUP_INFO_BBITMAP_CORRUPT).
    let corrupt = kind == LoadKind::Read && disk_free != gd.free_blocks_count;
    Ok((
        GroupState {
            buddy,
            disk,
            disk_free,
            totals: None,
            dirty: false,
            uninit: kind == LoadKind::Uninit,
            corrupt,
            lfo: None,
            afo: None,
        },
        kind,
        steps,
    ))
}

impl GroupState {
    /// Marks `start..start+len` (group-relative) used on disk. The range
    /// must already be used in the buddy.
    pub fn disk_mark_used(&mut self, start: u32, len: u32) {
        for i in start..start + len {
            self.disk[(i / 8) as usize] |= 1 << (i % 8);
        }
        self.disk_free -= len;
        if let Some((t, g)) = &self.totals {
            t.adjust(*g, 0, len);
        }
        self.dirty = true;
    }

    /// True if every block of the range is used on disk.
    pub fn disk_all_used(&self, start: u32, len: u32) -> bool {
        (start..start + len).all(|i| self.disk.get((i / 8) as usize).is_some_and(|b| b >> (i % 8) & 1 != 0))
    }

    /// Marks `start..start+len` free on disk.
    pub fn disk_mark_free(&mut self, start: u32, len: u32) {
        for i in start..start + len {
            self.disk[(i / 8) as usize] &= !(1 << (i % 8));
        }
        self.disk_free += len;
        if let Some((t, g)) = &self.totals {
            t.adjust(*g, len, 0);
        }
        self.dirty = true;
    }

    /// The list orders this group belongs on now.
    pub fn list_orders(&self) -> (Option<u32>, Option<u32>) {
        if self.corrupt {
            return (None, None);
        }
        (self.buddy.largest_free_order(), self.buddy.avg_fragment_order())
    }
}
