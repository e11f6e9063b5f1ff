//! The regular allocator: the goal block, then the criteria in order.
//!
//! - Goal: the free run at the goal block, if it holds the goal length.
//! - CR0 (power-of-two aligned): for a power-of-two goal, a group from the
//!   largest-free-order lists, and a buddy chunk of that order in it.
//! - CR1 (goal length, fast): a group from the average-fragment lists whose
//!   average fragment is at least the goal; its scan skips shorter free
//!   extents (they cannot satisfy the goal).
//! - CR1.5 (best available): the goal trimmed order by order, at most
//!   `best_avail_max_trim_order` orders and never below the request's
//!   minimum, each time looking at the list of exactly that order.
//! - CR2 (goal length, slow): every group in turn, loading as needed.
//! - CR3 (any free): the first group with a run of at least the minimum.
//!
//! Groups are chosen without their lock (lists, hints), then locked and
//! re-checked: another thread may have taken the space meanwhile.

use super::buddy::{order_of, Buddy};
use super::stats::Criterion;
use super::Allocator;
use crate::error::{Error, Result};
use crate::format::block_number::PhysicalBlock;
use std::sync::atomic::Ordering::Relaxed;

/// Limits on how many free extents one group scan examines
/// (the kernel's mb_max_to_scan and mb_min_to_scan).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanLimits {
    /// Stop after this many extents and use the best found.
    pub max_to_scan: u32,
    /// Once an extent of the goal length is known, look at least at this
    /// many before settling for it.
    pub min_to_scan: u32,
}

impl Default for ScanLimits {
    fn default() -> Self {
        ScanLimits { max_to_scan: 200, min_to_scan: 10 }
    }
}

/// Candidate groups copied out of a list per lookup.
const CANDIDATES: usize = 16;

/// The best free extent of a group for a goal length: an exact fit wins
/// at once; otherwise the smallest extent that covers the goal, or, while
/// none does, the largest seen (the kernel's ext4_mb_measure_extent).
/// Returns (start, len, extents examined).
pub fn complex_scan(b: &Buddy, goal_len: u32, skip_small: bool, limits: ScanLimits) -> (Option<(u32, u32)>, u64) {
    let mut best: Option<(u32, u32)> = None;
    let mut found = 0u32;
    let mut scanned = 0u64;
    let mut pos = 0;
    while let Some((s, l)) = b.next_free_run(pos) {
        pos = s + l;
        if skip_small && l < goal_len {
            continue;
        }
        scanned += 1;
        found += 1;
        if l == goal_len {
            return (Some((s, l)), scanned);
        }
        best = match best {
            None => Some((s, l)),
            Some((_, bl)) if bl < goal_len && l > bl => Some((s, l)),
            Some((_, bl)) if bl >= goal_len && l >= goal_len && l < bl => Some((s, l)),
            keep => keep,
        };
        if found >= limits.max_to_scan {
            break;
        }
        if best.is_some_and(|(_, bl)| bl >= goal_len) && found >= limits.min_to_scan {
            break;
        }
    }
    (best, scanned)
}

/// (group, group-relative start, length, criterion) of a reservation made
/// in the buddy view; the caller marks the used part on disk.
pub type Found = (u32, u32, u32, Criterion);

thread_local! {
    static SPREAD: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A per-thread starting group for requests without a goal, so that
/// threads spread over the disk instead of all contending on group 0.
fn spread_group(n: u32) -> u32 {
    SPREAD.with(|c| {
        if c.get() == 0 {
            let id = format!("{:?}", std::thread::current().id());
            let h = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
            c.set(h | 1);
        }
        (c.get() % u64::from(n.max(1))) as u32
    })
}

/// Scans group `g` for `goal_len` blocks, accepting `accept_len` or more;
/// reserves min(found, goal_len) blocks in the buddy.
fn try_group(a: &Allocator, g: u32, goal_len: u32, accept_len: u32, cr: Criterion, skip: bool) -> Option<Found> {
    let grp = &a.groups[g as usize];
    a.counters.group_steps.fetch_add(1, Relaxed);
    if grp.free_hint.load(Relaxed) < accept_len {
        return None;
    }
    a.counters.groups_scanned[cr.index()].fetch_add(1, Relaxed);
    let mut slot = grp.lock();
    let st = slot.as_mut()?;
    if st.corrupt || st.buddy.free() < accept_len {
        return None;
    }
    let (best, scanned) = complex_scan(&st.buddy, goal_len, skip, a.cfg.limits);
    a.counters.extents_scanned[cr.index()].fetch_add(scanned, Relaxed);
    let (s, l) = best.filter(|&(_, l)| l >= accept_len)?;
    let take = l.min(goal_len);
    st.buddy.mark_used(s, take);
    a.relist(g, st);
    Some((g, s, take, cr))
}

/// Finds and reserves (in the buddy view) between `min_len` and `goal_len`
/// blocks near `goal`.
pub(crate) fn regular(a: &Allocator, goal: PhysicalBlock, goal_len: u32, min_len: u32) -> Result<Found> {
    let ngroups = a.group_count();
    let (gg, goff) = if goal == PhysicalBlock(0) { (spread_group(ngroups), 0) } else { a.group_of(goal) };
    let max_order = a.lfo.max_order();
    let note = |found: Found| {
        if found.2 >= goal_len {
            a.counters.goal_len_hits.fetch_add(1, Relaxed);
        }
        Ok(found)
    };

    // The goal itself.
    if goal != PhysicalBlock(0) {
        a.counters.group_steps.fetch_add(1, Relaxed);
        a.ensure_loaded(gg)?;
        let mut slot = a.groups[gg as usize].lock();
        if let Some(st) = slot.as_mut().filter(|st| !st.corrupt) {
            if let Some((s, l)) = st.buddy.free_run_at(goff) {
                if s + l - goff >= goal_len {
                    st.buddy.mark_used(goff, goal_len);
                    a.relist(gg, st);
                    return note((gg, goff, goal_len, Criterion::Goal));
                }
            }
        }
    }
    // The goal's group, scanned for the goal length before anything is
    // prefetched (the kernel's regular allocator starts at the goal's
    // group too): a new directory's or file's first block, whose goal is
    // the start of its flex group (metadata), lands there without
    // building the 32 buddies of a prefetch batch on every request of a
    // large filesystem whose groups are mostly not loaded yet.
    if goal != PhysicalBlock(0) {
        if let Some(f) = try_group(a, gg, goal_len, goal_len, Criterion::Cr1, a.cfg.skip_small_extents) {
            return note(f);
        }
    }
    a.prefetch()?;
    let order = order_of(goal_len);

    // CR0: power-of-two goal, buddy chunk of that order.
    if goal_len.is_power_of_two() && order >= a.cfg.order2_req {
        for o in order..=max_order {
            for g in a.lfo.candidates(o, gg, CANDIDATES) {
                a.counters.group_steps.fetch_add(1, Relaxed);
                a.counters.groups_scanned[Criterion::Cr0.index()].fetch_add(1, Relaxed);
                let mut slot = a.groups[g as usize].lock();
                let Some(st) = slot.as_mut().filter(|st| !st.corrupt) else { continue };
                a.counters.extents_scanned[Criterion::Cr0.index()].fetch_add(1, Relaxed);
                if let Some(s) = st.buddy.find_chunk(order) {
                    st.buddy.mark_used(s, goal_len);
                    a.relist(g, st);
                    return note((g, s, goal_len, Criterion::Cr0));
                }
            }
        }
        a.counters.failures[Criterion::Cr0.index()].fetch_add(1, Relaxed);
    }

    // CR1: groups whose average free fragment covers the goal.
    for o in order..=max_order {
        for g in a.afo.candidates(o, gg, CANDIDATES) {
            if let Some(f) = try_group(a, g, goal_len, goal_len, Criterion::Cr1, a.cfg.skip_small_extents) {
                return note(f);
            }
        }
    }
    a.counters.failures[Criterion::Cr1.index()].fetch_add(1, Relaxed);

    // CR1.5: trim the goal to what the lists say exists.
    if a.cfg.cr1_5 {
        let mut min_order = order.saturating_sub(a.cfg.best_avail_max_trim_order);
        if (1u32 << min_order) < min_len {
            min_order = order_of(min_len) + u32::from(!min_len.is_power_of_two());
        }
        for i in (min_order..=order).rev() {
            let trimmed = (1u32 << i).min(goal_len);
            if trimmed == goal_len && i == order && goal_len.is_power_of_two() {
                continue; // exactly what CR1 already tried
            }
            if a.afo.is_empty(i) {
                continue;
            }
            for g in a.afo.candidates(i, gg, CANDIDATES) {
                let accept = trimmed.max(min_len);
                if let Some(f) = try_group(a, g, trimmed, accept, Criterion::Cr1_5, a.cfg.skip_small_extents) {
                    return note(f);
                }
            }
        }
        a.counters.failures[Criterion::Cr1_5.index()].fetch_add(1, Relaxed);
    }

    // CR2: every group in turn whose counters say it may hold the goal
    // length, loading at most `cr2_load_budget` of them.
    let mut budget = a.cfg.cr2_load_budget;
    let found = linear(a, gg, goal_len, |g| {
        if !a.groups[g as usize].loaded.load(Relaxed) {
            if budget == 0 {
                return Ok(None);
            }
            if a.ensure_loaded(g)? {
                budget -= 1;
            }
        }
        Ok(try_group(a, g, goal_len, goal_len, Criterion::Cr2, false))
    })?;
    if let Some(f) = found {
        return note(f);
    }
    a.counters.failures[Criterion::Cr2.index()].fetch_add(1, Relaxed);

    // CR3: the first group with a run of at least the minimum, loading
    // what its counters say may have one (with a minimum of one block
    // that is the first group whose counter is not zero).
    let found = linear(a, gg, min_len, |g| {
        a.ensure_loaded(g)?;
        Ok(try_group(a, g, goal_len, min_len, Criterion::Cr3, false))
    })?;
    if let Some(f) = found {
        return note(f);
    }
    a.counters.failures[Criterion::Cr3.index()].fetch_add(1, Relaxed);
    Err(no_space(a, min_len))
}

/// The linear scans of CR2 and CR3: from `gg` through every group and
/// around, calling `visit` on each group whose on-disk free counter is at
/// least `need`, until it finds something. Flex groups whose free total is
/// below `need` are passed over whole, groups whose own counter is below
/// it without a look at their bitmap: a nearly full filesystem costs a
/// walk over counters, never a load of groups that cannot fit (the
/// kernel's ext4_mb_good_group_nolock reads the same counters).
fn linear(
    a: &Allocator,
    gg: u32,
    need: u32,
    mut visit: impl FnMut(u32) -> Result<Option<Found>>,
) -> Result<Option<Found>> {
    let n = a.group_count();
    let fb = a.totals.flex_bits();
    let mut i = 0;
    while i < n {
        let g = (gg + i) % n;
        a.counters.group_steps.fetch_add(1, Relaxed);
        if a.totals.flex(g >> fb) < u64::from(need) {
            // To the next flex group (or the wrap to group 0).
            let next = (((g >> fb) + 1) << fb).min(n);
            i += next - g;
            continue;
        }
        i += 1;
        if a.totals.group(g) < need {
            continue;
        }
        if let Some(f) = visit(g)? {
            return Ok(Some(f));
        }
    }
    Ok(None)
}

/// The error of a search that found no run of `min_len` blocks. When
/// groups skipped as corrupt (a bitmap that disagrees with its descriptor
/// or calls metadata free) hold such a run, the space is there but not
/// trusted, and the message says so: ENOSPC still (as the kernel answers,
/// and so that callers waiting for pending frees still retry), naming the
/// corrupt groups and what e2fsck would give back. Only on this failure
/// path, after every group was tried, are the groups counted again.
fn no_space(a: &Allocator, min_len: u32) -> Error {
    let (mut groups, mut free, mut first) = (0u64, 0u64, None);
    // Corrupt groups stay loaded (never evicted) and never heal: without
    // one ever loaded, a full filesystem's ENOSPC costs no walk.
    let any_corrupt = a.counters.corrupt_groups.load(Relaxed) > 0;
    for g in (0..a.group_count()).filter(|_| any_corrupt) {
        let slot = a.groups[g as usize].lock();
        if let Some(st) = slot.as_ref().filter(|st| st.corrupt && st.buddy.free() >= min_len) {
            groups += 1;
            free += u64::from(st.buddy.free());
            first.get_or_insert(g);
        }
    }
    match first {
        None => Error::NoSpace(format!("no run of {min_len} free blocks")),
        Some(g) => Error::NoSpace(format!(
            "no run of {min_len} free blocks outside {groups} block group(s) skipped as corrupt (the first is group \
             {g}: its bitmap disagrees with its descriptor or marks metadata free), which hold {free} free \
             block(s) uext4 will not use; run e2fsck"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group with many 3-block runs and one 40-block run.
    fn group() -> Buddy {
        let mut bm = vec![0xFFu8; 128];
        let mut free = |s: u32, n: u32| {
            for i in s..s + n {
                bm[(i / 8) as usize] &= !(1 << (i % 8));
            }
        };
        for k in 0..100 {
            free(k * 5, 3);
        }
        free(600, 40);
        Buddy::from_bitmap(&bm, 1024)
    }

    #[test]
    fn skipping_small_extents_scans_fewer() {
        let b = group();
        let limits = ScanLimits::default();
        let (with_skip, scanned_skip) = complex_scan(&b, 16, true, limits);
        let (without, scanned_all) = complex_scan(&b, 16, false, limits);
        assert_eq!(with_skip, Some((600, 40)));
        assert_eq!(scanned_skip, 1);
        // Without skipping, the scan wades through every small run first.
        assert_eq!(scanned_all, 101);
        assert_eq!(without, Some((600, 40)));
        let tight = ScanLimits { max_to_scan: 50, min_to_scan: 10 };
        assert_eq!(complex_scan(&b, 16, false, tight), (Some((0, 3)), 50), "gives up at max_to_scan");
        assert_eq!(complex_scan(&b, 16, true, tight), (Some((600, 40)), 1));
    }

    #[test]
    fn exact_fit_wins_and_smallest_cover_is_kept() {
        let mut bm = vec![0xFFu8; 128];
        for (s, n) in [(0u32, 30u32), (100, 20), (200, 16), (300, 50)] {
            for i in s..s + n {
                bm[(i / 8) as usize] &= !(1 << (i % 8));
            }
        }
        let b = Buddy::from_bitmap(&bm, 1024);
        assert_eq!(complex_scan(&b, 16, false, ScanLimits::default()).0, Some((200, 16)));
        let lim = ScanLimits { max_to_scan: 200, min_to_scan: 1 };
        assert_eq!(complex_scan(&b, 10, false, lim).0, Some((0, 30)), "settles once min_to_scan is met");
        let lim = ScanLimits { max_to_scan: 200, min_to_scan: 10 };
        assert_eq!(complex_scan(&b, 10, false, lim).0, Some((200, 16)), "smallest run covering the goal");
        assert_eq!(complex_scan(&b, 64, false, lim).0, Some((300, 50)), "largest while none covers");
    }
}
