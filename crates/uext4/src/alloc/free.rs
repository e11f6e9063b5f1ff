//! Freeing blocks: at once, or reserved until the freeing transaction
//! commits (so that no data is written into them before the free is
//! durable); and claiming blocks another writer chose (fast-commit
//! replay).

use super::Allocator;
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::PhysicalBlock;
use std::sync::atomic::Ordering::Relaxed;

/// A block freed in a transaction that has not committed: free on disk,
/// still reserved in the buddy until `commit_frees` releases it.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingFree {
    tid: u64,
    group: u32,
    start: u32,
    len: u32,
}

impl Allocator {
    /// Frees `start..start+len` (with bigalloc: every cluster the range
    /// touches). With `after_commit = Some(tid)`, the blocks
    /// are free on disk at once but stay reserved until
    /// [`Allocator::commit_frees`] is called with a tid >= `tid`, so data
    /// cannot be written into them before the freeing transaction commits.
    pub fn free(&self, start: PhysicalBlock, len: u64, after_commit: Option<u64>) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        // The number as the error reports name it.
        let block = start.get();
        let end = block.checked_add(len).filter(|&e| e <= self.vol.sb.blocks_count);
        // The block numbers come from the image (extents, xattr blocks): a
        // bad one is corruption (EUCLEAN, `errors=` applies), not EINVAL.
        if block < u64::from(self.vol.sb.first_data_block) || end.is_none() {
            let kind = CorruptKind::OutsideFilesystem { what: "blocks to free", block, len };
            return Err(Error::corruption(Structure::Bitmap, Location::from_block(block), kind));
        }
        if self.in_system_zone(start, len) {
            let kind = CorruptKind::OverlapsMetadata { block, len };
            return Err(Error::corruption(Structure::Bitmap, Location::from_block(block), kind));
        }
        // In units (clusters) from here on: `b` and `end` count units.
        let first = u64::from(self.vol.sb.first_data_block);
        let (start, end) = ((block - first) >> self.cbits, (block - first + len - 1) >> self.cbits);
        let end = end + 1;
        let upg = u64::from(self.upg);
        // Every group is checked before any is changed: a free that fails
        // in its second group must not have freed the first in memory.
        let mut b = start;
        while b < end {
            let (g, rel) = ((b / upg) as u32, (b % upg) as u32);
            let n = ((upg - u64::from(rel)).min(end - b)) as u32;
            let slot = self.lock_loaded(g)?;
            let st = slot.as_ref().ok_or_else(|| Error::Invalid("group not loaded".into()))?;
            if !st.disk_all_used(rel, n) || !st.buddy.is_used_range(rel, n) {
                let fb = first + (b << self.cbits);
                let kind = CorruptKind::DoubleFree { what: "blocks", first: fb, count: u64::from(n) << self.cbits };
                return Err(Error::corruption(Structure::Bitmap, Location::from_block(fb), kind));
            }
            b += u64::from(n);
        }
        // Split at group boundaries.
        let mut b = start;
        while b < end {
            let (g, rel) = ((b / upg) as u32, (b % upg) as u32);
            let n = ((upg - u64::from(rel)).min(end - b)) as u32;
            let mut slot = self.lock_loaded(g)?;
            let st = slot.as_mut().ok_or_else(|| Error::Invalid("group not loaded".into()))?;
            if !st.disk_all_used(rel, n) || !st.buddy.is_used_range(rel, n) {
                // Only a racing double free (a corrupt image) gets here.
                let fb = first + (b << self.cbits);
                let kind = CorruptKind::DoubleFree { what: "blocks", first: fb, count: u64::from(n) << self.cbits };
                return Err(Error::corruption(Structure::Bitmap, Location::from_block(fb), kind));
            }
            st.disk_mark_free(rel, n);
            match after_commit {
                Some(tid) => self.pending.lock().push(PendingFree { tid, group: g, start: rel, len: n }),
                None => {
                    st.buddy.mark_free(rel, n);
                    self.relist(g, st);
                }
            }
            drop(slot);
            self.counters.blocks_freed.fetch_add(u64::from(n) << self.cbits, Relaxed);
            b += u64::from(n);
        }
        Ok(())
    }

    /// Marks `start..start+len` in use wherever it is free (blocks already
    /// in use stay as they are) and returns the runs it newly marked. For
    /// fast-commit replay, which maps blocks the kernel chose (the
    /// kernel's ext4_mb_mark_bb); nothing else may hold a reservation on
    /// them then (no preallocation, no pending free).
    pub fn claim(&self, start: PhysicalBlock, len: u64) -> Result<Vec<(PhysicalBlock, u64)>> {
        let block = start.get();
        if block < u64::from(self.vol.sb.first_data_block)
            || block.checked_add(len).is_none_or(|e| e > self.vol.sb.blocks_count)
            || self.in_system_zone(start, len)
        {
            let kind = CorruptKind::OutsideFilesystem { what: "blocks to mark in use", block, len };
            return Err(Error::corruption(Structure::Bitmap, Location::from_block(block), kind));
        }
        let mut out: Vec<(PhysicalBlock, u64)> = Vec::new();
        let end = start + len;
        let mut b = start;
        while b < end {
            let (g, rel) = self.group_of(b);
            let n = ((u64::from(self.vol.sb.blocks_per_group) - u64::from(rel)).min(end - b)) as u32;
            let mut slot = self.lock_loaded(g)?;
            let st = slot.as_mut().ok_or_else(|| Error::Invalid("group not loaded".into()))?;
            for i in rel..rel + n {
                if st.disk_all_used(i, 1) {
                    continue;
                }
                // A block free on disk may still be reserved in the buddy
                // (a preallocation): it is ours now either way.
                if !st.buddy.is_used(i) {
                    st.buddy.mark_used(i, 1);
                }
                st.disk_mark_used(i, 1);
                let p = self.block_of(g, i);
                match out.last_mut() {
                    Some((s, l)) if *s + *l == p => *l += 1,
                    _ => out.push((p, 1)),
                }
            }
            self.relist(g, st);
            drop(slot);
            b += u64::from(n);
        }
        Ok(out)
    }

    /// True if blocks freed by a transaction that has not committed yet
    /// are waiting (a commit would make them allocatable).
    pub fn has_pending_frees(&self) -> bool {
        !self.pending.lock().is_empty()
    }

    /// Releases the reservations of blocks freed by transactions up to and
    /// including `tid` (called once that transaction has committed).
    pub fn commit_frees(&self, tid: u64) {
        let ready: Vec<PendingFree> = {
            let mut p = self.pending.lock();
            let (ready, keep) = p.drain(..).partition(|f| f.tid <= tid);
            *p = keep;
            ready
        };
        for f in ready {
            let mut slot = self.groups[f.group as usize].lock();
            if let Some(st) = slot.as_mut() {
                st.buddy.mark_free(f.start, f.len);
                self.relist(f.group, st);
            }
        }
    }
}
