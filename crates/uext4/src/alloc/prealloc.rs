//! Request normalisation and preallocation.
//!
//! Like ext4, a data request is rounded up to a size that depends on how
//! large the file is becoming, and the part not used now is kept as a
//! preallocation:
//! - a growing file gets a per-inode preallocation mapped to the logical
//!   blocks that follow, so its next writes land contiguously;
//! - small files share a locality-group preallocation (one pool per group
//!   of threads, like the kernel's per-CPU pools), so many small files
//!   written by many threads are packed together instead of scattering.
//!
//! Preallocated blocks are reserved in the buddy view only; they reach the
//! on-disk bitmap when a request consumes them. Unused ones are returned
//! on close/truncate ([`Preallocs::discard_inode`]) and unmount.
//!
//! An inode's preallocations are kept sorted by logical start and never
//! overlap (a new one is trimmed to fit between its neighbours, as the
//! kernel's ext4_mb_pa_adjust_overlap does), so the one covering a block
//! is found in O(log n); an inode keeps at most [`INODE_MAX_PAS`] of them
//! (the kernel's mb_max_inode_prealloc): random writes into a huge file
//! leave one per write otherwise, and each would be searched and kept
//! reserved for as long as the file is open.
//!
//! Locks: a per-inode shard or a locality-group mutex, taken before any
//! group lock (see the lock order in the module above).

use super::{flags, AllocRequest, Allocation, Allocator, Criterion};
use crate::error::Result;
use crate::format::block_number::FileBlock;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};

/// Preallocation tunables (the kernel's mb_stream_req, mb_group_prealloc).
#[derive(Debug, Clone)]
pub struct PreallocConfig {
    /// Files smaller than this many blocks use the locality-group pool.
    pub stream_req: u32,
    /// Size of a locality-group preallocation, in blocks.
    pub group_prealloc: u32,
    /// Locality-group pools (threads are hashed onto them).
    pub lg_count: usize,
    /// Largest normalised request, in bytes.
    pub max_normalized: u64,
}

impl Default for PreallocConfig {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        PreallocConfig { stream_req: 16, group_prealloc: 512, lg_count: cpus.max(2), max_normalized: 8 << 20 }
    }
}

/// Where the surplus of a normalised request goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanKind {
    /// No surplus.
    Exact,
    /// Per-inode preallocation.
    Inode,
    /// Locality-group preallocation.
    Group,
}

/// A normalised request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Blocks to look for.
    pub goal_len: u32,
    /// Where the surplus goes.
    pub kind: PlanKind,
}

impl Plan {
    /// No normalisation.
    pub fn exact(req: &AllocRequest) -> Plan {
        Plan { goal_len: req.len, kind: PlanKind::Exact }
    }
}

fn uses_group_pool(cfg: &PreallocConfig, req: &AllocRequest, bs: u64) -> bool {
    if req.flags & flags::SMALL_FILE != 0 {
        return true;
    }
    if req.flags & flags::STREAM != 0 || req.inode == 0 {
        return false;
    }
    let end = (req.logical + u64::from(req.len)).byte_offset(bs);
    end.max(req.file_size) < u64::from(cfg.stream_req) * bs
}

/// Rounds a data request up (the kernel's ext4_mb_normalize_request, in
/// spirit): the file's size after this write picks a power-of-two window
/// from 16 KiB to 8 MiB; the request grows to the end of that window.
pub fn normalize(cfg: &PreallocConfig, req: &AllocRequest, bs: u64, bpg: u32) -> Plan {
    if uses_group_pool(cfg, req, bs) {
        let goal = req.len.max(cfg.group_prealloc).min(bpg);
        return Plan { goal_len: goal, kind: PlanKind::Group };
    }
    if req.inode == 0 {
        return Plan::exact(req);
    }
    let size = (req.logical + u64::from(req.len)).byte_offset(bs).max(req.file_size);
    // i_size comes from the disk: a damaged one may be near 2^64.
    let window = size.max(16 << 10).checked_next_power_of_two().unwrap_or(u64::MAX).min(cfg.max_normalized.max(bs));
    let window_blocks = (window / bs).max(1);
    // Large windows are aligned in the file, like the kernel's 2/4/8 MiB
    // cases; small ones start at the beginning of the file.
    let logical = req.logical.get();
    let start = if window >= 2 << 20 { logical / window_blocks * window_blocks } else { 0 };
    let end = (start + window_blocks).max(logical + u64::from(req.len));
    let goal = (end - logical).min(u64::from(bpg)).max(u64::from(req.len)) as u32;
    Plan { goal_len: goal, kind: if goal > req.len { PlanKind::Inode } else { PlanKind::Exact } }
}

#[derive(Debug, Clone, Copy)]
struct InodePa {
    lstart: FileBlock,
    group: u32,
    rel: u32,
    len: u32,
}

#[derive(Debug, Clone, Copy)]
struct GroupPa {
    group: u32,
    rel: u32,
    len: u32,
}

const INODE_SHARDS: usize = 64;
/// Preallocations one inode keeps at most; past it the ones farthest
/// from the newest go back (the kernel's default mb_max_inode_prealloc).
pub const INODE_MAX_PAS: usize = 512;

/// One inode's preallocations by logical start (disjoint ranges).
type InodePas = BTreeMap<u64, InodePa>;
/// Pools keep at most this many preallocations; the smallest goes first.
const LG_MAX_PAS: usize = 8;

/// The preallocation pools.
#[derive(Debug)]
pub struct Preallocs {
    cfg: PreallocConfig,
    inodes: Vec<Mutex<HashMap<u32, InodePas>>>,
    lgs: Vec<Mutex<Vec<GroupPa>>>,
}

thread_local! {
    static LG_SLOT: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

impl Preallocs {
    /// Empty pools.
    pub fn new(cfg: PreallocConfig) -> Preallocs {
        let lg = cfg.lg_count.max(1);
        Preallocs {
            cfg,
            inodes: (0..INODE_SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            lgs: (0..lg).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }

    fn shard(&self, ino: u32) -> &Mutex<HashMap<u32, InodePas>> {
        &self.inodes[ino as usize % INODE_SHARDS]
    }

    fn lg(&self) -> &Mutex<Vec<GroupPa>> {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let slot = LG_SLOT.with(|s| {
            if s.get() == usize::MAX {
                s.set(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
            }
            s.get()
        });
        &self.lgs[slot % self.lgs.len()]
    }

    /// Serves `req` from an existing preallocation, if one fits.
    pub(super) fn use_existing(&self, a: &Allocator, req: &AllocRequest) -> Result<Option<Allocation>> {
        let bs = a.vol.block_size as u64;
        if uses_group_pool(&self.cfg, req, bs) {
            let mut pool = self.lg().lock();
            let Some(i) = pool.iter().position(|p| p.len >= req.min_len) else { return Ok(None) };
            let pa = pool[i];
            let n = pa.len.min(req.len);
            mark_disk(a, pa.group, pa.rel, n);
            if pa.len == n {
                pool.remove(i);
            } else {
                pool[i] = GroupPa { group: pa.group, rel: pa.rel + n, len: pa.len - n };
            }
            return Ok(Some(Allocation {
                start: a.block_of(pa.group, pa.rel),
                len: n,
                criterion: Criterion::Prealloc,
            }));
        }
        if req.inode == 0 {
            return Ok(None);
        }
        let mut map = self.shard(req.inode).lock();
        let Some(pas) = map.get_mut(&req.inode) else { return Ok(None) };
        // Disjoint ranges: only the last one starting at or before the
        // block can cover it.
        let Some((&key, &pa)) = pas.range(..=req.logical.get()).next_back() else { return Ok(None) };
        if req.logical.get() >= pa.lstart.get() + u64::from(pa.len) {
            return Ok(None);
        }
        let off = (req.logical - pa.lstart) as u32;
        let n = (pa.len - off).min(req.len);
        if n < req.min_len {
            return Ok(None);
        }
        mark_disk(a, pa.group, pa.rel + off, n);
        pas.remove(&key);
        if off > 0 {
            pas.insert(key, InodePa { lstart: pa.lstart, group: pa.group, rel: pa.rel, len: off });
        }
        if off + n < pa.len {
            let lstart = req.logical + u64::from(n);
            pas.insert(lstart.get(), InodePa { lstart, group: pa.group, rel: pa.rel + off + n, len: pa.len - off - n });
        }
        if pas.is_empty() {
            map.remove(&req.inode);
        }
        Ok(Some(Allocation { start: a.block_of(pa.group, pa.rel + off), len: n, criterion: Criterion::Prealloc }))
    }

    /// Keeps the surplus `rel..rel+len` of group `g` of a normalised request.
    pub(super) fn create(&self, a: &Allocator, req: &AllocRequest, plan: &Plan, g: u32, rel: u32, len: u32) {
        a.counters.prealloc_created.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match plan.kind {
            PlanKind::Inode if req.inode != 0 => {
                // The request took its full length (a surplus exists only
                // then); the surplus maps the logical blocks that follow.
                let pa = InodePa { lstart: req.logical + u64::from(req.len), group: g, rel, len };
                let mut returned = Vec::new();
                {
                    let mut map = self.shard(req.inode).lock();
                    let pas = map.entry(req.inode).or_default();
                    let (kept, cut) = fit_between(pas, pa);
                    returned.extend(cut);
                    if let Some(pa) = kept {
                        pas.insert(pa.lstart.get(), pa);
                        while pas.len() > INODE_MAX_PAS {
                            // Away from where the file is being written now.
                            let now = pa.lstart.get();
                            let below = pas.keys().next().map_or(0, |&k| now.saturating_sub(k));
                            let above = pas.keys().next_back().map_or(0, |&k| k.saturating_sub(now));
                            let far = if below > above { pas.pop_first() } else { pas.pop_last() };
                            returned.extend(far.map(|(_, p)| p));
                        }
                    }
                    if pas.is_empty() {
                        map.remove(&req.inode);
                    }
                }
                for p in returned {
                    a.unreserve(p.group, p.rel, p.len);
                }
            }
            PlanKind::Group => {
                let mut pool = self.lg().lock();
                pool.push(GroupPa { group: g, rel, len });
                if pool.len() > LG_MAX_PAS {
                    let (i, _) = pool.iter().enumerate().min_by_key(|(_, p)| p.len).unwrap_or((0, &pool[0]));
                    let victim = pool.remove(i);
                    drop(pool);
                    a.unreserve(victim.group, victim.rel, victim.len);
                }
            }
            _ => a.unreserve(g, rel, len),
        }
    }

    /// Returns inode `ino`'s unused preallocations.
    pub fn discard_inode(&self, a: &Allocator, ino: u32) {
        let pas = self.shard(ino).lock().remove(&ino).unwrap_or_default();
        for p in pas.into_values() {
            a.unreserve(p.group, p.rel, p.len);
        }
    }

    /// How many preallocations inode `ino` holds.
    #[cfg(test)]
    pub fn inode_count(&self, ino: u32) -> usize {
        self.shard(ino).lock().get(&ino).map_or(0, BTreeMap::len)
    }

    /// True if any preallocation (per inode or locality group) is held.
    pub fn any(&self) -> bool {
        self.inodes.iter().any(|s| !s.lock().is_empty()) || self.lgs.iter().any(|l| !l.lock().is_empty())
    }

    /// Returns every unused preallocation.
    pub fn discard_all(&self, a: &Allocator) {
        for shard in &self.inodes {
            let all: Vec<InodePa> = shard.lock().drain().flat_map(|(_, v)| v.into_values()).collect();
            for p in all {
                a.unreserve(p.group, p.rel, p.len);
            }
        }
        for lg in &self.lgs {
            let all: Vec<GroupPa> = lg.lock().drain(..).collect();
            for p in all {
                a.unreserve(p.group, p.rel, p.len);
            }
        }
    }
}

/// Trims `pa` to the logical gap its neighbours in `pas` leave around its
/// start: returns what is kept (None if nothing is) and the physical
/// blocks cut off (to be unreserved by the caller).
fn fit_between(pas: &InodePas, pa: InodePa) -> (Option<InodePa>, Vec<InodePa>) {
    let (mut s, mut e) = (pa.lstart.get(), pa.lstart.get() + u64::from(pa.len));
    if let Some((_, p)) = pas.range(..=s).next_back() {
        s = s.max(p.lstart.get() + u64::from(p.len));
    }
    if let Some((&k, _)) = pas.range(pa.lstart.get()..).next() {
        e = e.min(k);
    }
    let at = |from: u64, to: u64| InodePa {
        lstart: FileBlock(from),
        group: pa.group,
        rel: pa.rel + (from - pa.lstart.get()) as u32,
        len: (to - from) as u32,
    };
    let end = pa.lstart.get() + u64::from(pa.len);
    if s >= e {
        return (None, vec![pa]);
    }
    let mut cut = Vec::new();
    if s > pa.lstart.get() {
        cut.push(at(pa.lstart.get(), s));
    }
    if e < end {
        cut.push(at(e, end));
    }
    (Some(at(s, e)), cut)
}

fn mark_disk(a: &Allocator, g: u32, rel: u32, n: u32) {
    let mut slot = a.groups[g as usize].lock();
    if let Some(st) = slot.as_mut() {
        st.disk_mark_used(rel, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the write-path fuzz slice: a damaged i_size near 2^64
    /// overflowed the window's rounding to a power of two.
    #[test]
    fn normalize_survives_a_huge_file_size() {
        let cfg = PreallocConfig::default();
        for file_size in [u64::MAX, 1 << 63, (1 << 63) + 1] {
            let req = AllocRequest { inode: 12, logical: FileBlock(7), len: 3, file_size, ..Default::default() };
            let plan = normalize(&cfg, &req, 1024, 8192);
            assert!(plan.goal_len >= 3 && plan.goal_len <= 8192, "{plan:?}");
        }
    }
}
