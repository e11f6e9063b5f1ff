//! What the allocator reports without changing anything: free space
//! (statfs, histograms, per-group summaries), the free runs FITRIM may
//! discard, and the consistency check the tests run.

// The allocator's own types and imports: this is a second impl block of
// `Allocator`, apart from the allocation and free paths.
use super::*;

impl Allocator {
    /// True if `block` is free in the on-disk view (loads its group).
    pub fn is_free_on_disk(&self, block: PhysicalBlock) -> bool {
        if !(u64::from(self.vol.sb.first_data_block)..self.vol.sb.blocks_count).contains(&block.get()) {
            return false;
        }
        let (g, rel) = self.group_of(block);
        let Ok(slot) = self.lock_loaded(g) else { return false };
        slot.as_ref().is_some_and(|st| st.disk[(rel / 8) as usize] >> (rel % 8) & 1 == 0)
    }

    /// FITRIM's walk over the blocks `start..end`: every run of at least
    /// `min_units` allocation units that is free both on disk and for
    /// allocation (so neither in use, reserved, nor freed by a
    /// transaction not yet committed) is handed to `discard` as (first
    /// block, blocks) while its group's lock is held, so that nothing is
    /// allocated there until the discard is done (ext4_trim_all_free's
    /// busy marking). Returns the blocks handed over.
    pub fn for_each_trimmable(
        &self,
        start: u64,
        end: u64,
        min_units: u32,
        mut discard: impl FnMut(u64, u64) -> Result<()>,
    ) -> Result<u64> {
        let first = u64::from(self.vol.sb.first_data_block);
        let end = end.min(self.vol.sb.blocks_count);
        let start = start.max(first);
        if start >= end {
            return Ok(0);
        }
        let (g0, _) = self.group_of(PhysicalBlock(start));
        let (g1, _) = self.group_of(PhysicalBlock(end - 1));
        let mut total = 0;
        for g in g0..=g1 {
            let slot = self.lock_loaded(g)?;
            let Some(st) = slot.as_ref().filter(|st| !st.corrupt) else { continue };
            let n = layout::group_units(&self.vol, u64::from(g));
            let disk_free = |i: u32| st.disk.get((i / 8) as usize).is_some_and(|b| b >> (i % 8) & 1 == 0);
            let mut from = 0;
            while let Some((a, len)) = st.buddy.next_free_run(from) {
                from = a + len;
                // Split where the on-disk view disagrees.
                let mut i = a;
                while i < (a + len).min(n) {
                    if !disk_free(i) {
                        i += 1;
                        continue;
                    }
                    let mut j = i;
                    while j < (a + len).min(n) && disk_free(j) {
                        j += 1;
                    }
                    let b0 = self.block_of(g, i).get().max(start);
                    let b1 = self.block_of(g, j).get().min(end);
                    let units = (b1.saturating_sub(b0)) >> self.cbits;
                    if b1 > b0 && units >= u64::from(min_units.max(1)) {
                        discard(b0, b1 - b0)?;
                        total += b1 - b0;
                    }
                    i = j;
                }
            }
        }
        Ok(total)
    }

    /// Free blocks on disk (what statfs reports); with bigalloc the free
    /// clusters times the blocks per cluster.
    ///
    /// A counter kept by every change of a group's on-disk count (and by
    /// a group's load, which replaces its descriptor's figure): every
    /// buffered write that reserves blocks asks, and a sum over the groups
    /// cost 122,880 steps per write on a 15 TiB filesystem.
    pub fn free_blocks(&self) -> u64 {
        self.totals.total() << self.cbits
    }

    /// The free blocks summed over the groups (what [`Allocator::free_blocks`]
    /// must agree with when nothing is changing; tests; O(groups)).
    #[cfg(test)]
    pub fn free_blocks_summed(&self) -> u64 {
        let units: u64 = (0..self.group_count())
            .map(|g| {
                let grp = &self.groups[g as usize];
                match grp.lock().as_ref() {
                    Some(st) => u64::from(st.disk_free),
                    // The count it had when it was unloaded.
                    None if grp.evicted.load(Relaxed) => u64::from(self.totals.group(g)),
                    None => u64::from(self.vol.groups[g as usize].free_blocks_count),
                }
            })
            .sum();
        units << self.cbits
    }

    /// Buddy summary of group `g` (None while it is not loaded): what the
    /// kernel shows in /proc/fs/ext4/DEV/mb_groups.
    pub fn group_summary(&self, g: u32) -> Option<GroupSummary> {
        let slot = self.groups.get(g as usize)?.lock();
        let st = slot.as_ref()?;
        Some(GroupSummary {
            group: g,
            free: st.buddy.free(),
            fragments: st.buddy.fragments(),
            counters: st.buddy.counters().to_vec(),
            largest_free_order: st.buddy.largest_free_order(),
            avg_fragment_order: st.buddy.avg_fragment_order(),
            corrupt: st.corrupt,
        })
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> AllocStats {
        AllocStats { loaded_groups: self.loaded_group_count(), ..self.counters.snapshot() }
    }

    /// The free-extent histogram over the on-disk bitmaps (loads every
    /// group). Free runs that continue across a group boundary count as
    /// one extent, as e2freefrag counts them.
    pub fn free_extent_histogram(&self) -> Result<FreeExtentHistogram> {
        let mut h = FreeExtentHistogram {
            block_size: self.vol.block_size as u32,
            total_blocks: self.vol.sb.blocks_count,
            ..Default::default()
        };
        let mut run = 0u64;
        for g in 0..self.group_count() {
            // One group at a time (it may be unloaded again afterwards:
            // the loaded groups stay within their budget).
            let slot = self.lock_loaded(g)?;
            let Some(st) = slot.as_ref() else { continue };
            let n = layout::group_units(&self.vol, u64::from(g));
            for i in 0..n {
                if st.disk[(i / 8) as usize] >> (i % 8) & 1 == 0 {
                    run += 1;
                } else if run > 0 {
                    h.add(run << self.cbits);
                    run = 0;
                }
            }
        }
        // Runs of clusters with bigalloc: reported in blocks.
        h.add(run << self.cbits);
        Ok(h)
    }

    /// Checks every loaded group's buddy against its bitmap, the disk
    /// view against the buddy view and the lists against the groups
    /// (tests; O(filesystem)).
    #[cfg(test)]
    pub fn check_consistency(&self) -> std::result::Result<(), String> {
        let (kept, summed) = (self.free_blocks(), self.free_blocks_summed());
        if kept != summed {
            return Err(format!("free block counter {kept}, groups sum to {summed}"));
        }
        let lfo = self.lfo.snapshot();
        let afo = self.afo.snapshot();
        for g in 0..self.group_count() {
            let slot = self.groups[g as usize].lock();
            let Some(st) = slot.as_ref() else { continue };
            st.buddy.check().map_err(|e| format!("group {g}: {e}"))?;
            let n = st.buddy.len();
            for i in 0..n {
                let on_disk = st.disk[(i / 8) as usize] >> (i % 8) & 1 != 0;
                if on_disk && !st.buddy.is_used(i) {
                    return Err(format!("group {g}: block {i} used on disk but free in the buddy"));
                }
            }
            let (want_lfo, want_afo) = st.list_orders();
            if st.lfo != want_lfo || st.afo != want_afo {
                return Err(format!("group {g}: list orders stale"));
            }
            for (k, l) in lfo.iter().enumerate() {
                if l.contains(&g) != (want_lfo == Some(k as u32)) {
                    return Err(format!("group {g}: largest-free-order list {k} membership wrong"));
                }
            }
            for (k, l) in afo.iter().enumerate() {
                if l.contains(&g) != (want_afo == Some(k as u32)) {
                    return Err(format!("group {g}: avg-fragment list {k} membership wrong"));
                }
            }
        }
        Ok(())
    }
}
