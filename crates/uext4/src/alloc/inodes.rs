//! The inode allocator: per-group inode bitmaps in memory, group choice
//! like the kernel's ialloc.c (Orlov spreading for top-level directories,
//! near the parent for everything else).
//!
//! Cost: choosing a group reads counters kept in memory (per group, and
//! per flex group for free inodes and directories, like the kernel's
//! flex_groups array; the block allocator keeps free blocks per flex
//! group), so it does not grow with the filesystem: the parent's group and
//! flex group, then a quadratic hash probe (log2(groups) steps), and for
//! top-level directories a bounded window of flex groups. Only a nearly
//! full filesystem falls through to a linear scan, which skips whole flex
//! groups without free inodes and stops at the first fit.
//!
//! Locking: one mutex per group, never two at once; the totals are
//! atomics. Bitmaps are loaded lazily (INODE_UNINIT groups without I/O)
//! by one loader per group, under the group's load lock (see
//! [`crate::locks`], order 7) and not its state lock.

use super::Allocator;
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::checksum::crc32c;
use crate::format::features::compat;
use crate::format::group_desc::{verify_inode_bitmap, BG_INODE_UNINIT};
use crate::format::superblock::{Superblock, STATE_VALID};
use crate::volume::Volume;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};
use std::sync::Arc;

/// Flex groups Orlov compares for one top-level directory (the kernel
/// compares all of them; a window keeps the cost flat and, with the rotor
/// moving it on, still spreads directories over the disk).
const ORLOV_WINDOW: u32 = 64;

/// Counters of the inode allocator's work, from
/// [`FsCore::inode_alloc_stats`](crate::FsCore::inode_alloc_stats): for
/// tests and benchmarks that check how far inode allocation searched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InodeAllocStats {
    /// Inodes allocated.
    pub allocations: u64,
    /// Groups or flex groups whose counters a group choice read, and
    /// groups whose bitmap it searched: the work per allocation, which
    /// must not grow with the number of groups.
    pub groups_examined: u64,
    /// Allocations that fell through to the linear scan (nearly full).
    pub linear_scans: u64,
    /// Group states journaled (bitmap and descriptor).
    pub group_journals: u64,
    /// Allocations and frees whose group state another thread had
    /// journaled already in the same transaction (no journaling of
    /// their own).
    pub group_journals_shared: u64,
}

/// The checksum an inode bitmap carries in its descriptor (metadata_csum).
pub fn bitmap_checksum(sb: &Superblock, bitmap: &[u8]) -> u32 {
    if !sb.has_metadata_csum() {
        return 0;
    }
    let n = (sb.inodes_per_group as usize / 8).min(bitmap.len());
    crc32c(sb.csum_seed(), &bitmap[..n])
}

#[derive(Debug)]
struct IGroup {
    bitmap: Vec<u8>,
    free: u32,
    dirs: u32,
    /// One past the highest slot in use (0: none): the lowest
    /// `itable_unused` mark the bitmap allows.
    high: u32,
    /// Changes of the bitmap so far (in memory only).
    seq: u64,
    /// The transaction and `seq` of the last state journaled
    /// ([`InodeAllocator::journal_group`]).
    logged: Option<(u64, u64)>,
}

/// A copy of an inode group's state, taken under its lock, for the
/// caller of [`InodeAllocator::journal_group`] to journal.
#[derive(Debug)]
pub struct GroupSnapshot {
    /// The inode bitmap (`inodes_per_group` bits).
    pub bitmap: Vec<u8>,
    /// Free inodes.
    pub free: u32,
    /// Directories.
    pub dirs: u32,
    /// One past the highest slot in use (0: none).
    pub high: u32,
}

/// Inode allocation state of a filesystem opened read-write.
#[derive(Debug)]
pub struct InodeAllocator {
    vol: Arc<Volume>,
    groups: Vec<Mutex<Option<IGroup>>>,
    /// One load lock per group: serialises its loaders (see `load`).
    loading: Vec<Mutex<()>>,
    /// One journaling lock per group: serialises the journaling of its
    /// state (see `journal_group`), outside the group lock.
    journaling: Vec<Mutex<()>>,
    /// Groups whose state is in `groups` (read without the group lock).
    loaded: Vec<AtomicBool>,
    /// Free inodes per group (a hint readable without the lock).
    free_hint: Vec<AtomicU32>,
    dirs_hint: Vec<AtomicU32>,
    total_free: AtomicU64,
    /// Free inodes and directories per flex group (see `flex_bits`).
    flex_free: Vec<AtomicU64>,
    flex_dirs: Vec<AtomicU64>,
    /// log2 of the groups per flex group (0 without flex_bg).
    flex_bits: u32,
    /// Rotor for spreading top-level directories.
    rotor: AtomicU32,
    /// Groups whose bitmap called a live inode free
    /// ([`InodeAllocator::mark_corrupt`]): never allocated from again
    /// (the kernel's EXT4_GROUP_INFO_IBITMAP_CORRUPT).
    corrupt: Vec<AtomicBool>,
    /// How many groups were marked corrupt.
    corrupt_groups: AtomicU32,
    /// What marked them, for the filesystem to record as an error
    /// ([`InodeAllocator::take_reports`]).
    reports: Mutex<Vec<Error>>,
    allocations: AtomicU64,
    examined: AtomicU64,
    linear_scans: AtomicU64,
    group_journals: AtomicU64,
    group_journals_shared: AtomicU64,
}

impl InodeAllocator {
    /// Builds the allocator from the descriptors (bitmaps load lazily).
    pub fn new(vol: Arc<Volume>) -> InodeAllocator {
        let n = vol.groups.len();
        let free_hint: Vec<AtomicU32> = vol.groups.iter().map(|g| AtomicU32::new(g.free_inodes_count)).collect();
        let total = vol.groups.iter().map(|g| u64::from(g.free_inodes_count)).sum();
        let flex_bits = super::flex_bits(&vol.sb);
        let nflex = n.div_ceil(1 << flex_bits);
        let flex_free: Vec<AtomicU64> = (0..nflex).map(|_| AtomicU64::new(0)).collect();
        let flex_dirs: Vec<AtomicU64> = (0..nflex).map(|_| AtomicU64::new(0)).collect();
        for (g, gd) in vol.groups.iter().enumerate() {
            flex_free[g >> flex_bits].fetch_add(u64::from(gd.free_inodes_count), Relaxed);
            flex_dirs[g >> flex_bits].fetch_add(u64::from(gd.used_dirs_count), Relaxed);
        }
        InodeAllocator {
            dirs_hint: vol.groups.iter().map(|g| AtomicU32::new(g.used_dirs_count)).collect(),
            groups: (0..n).map(|_| Mutex::new(None)).collect(),
            loading: (0..n).map(|_| Mutex::new(())).collect(),
            journaling: (0..n).map(|_| Mutex::new(())).collect(),
            loaded: (0..n).map(|_| AtomicBool::new(false)).collect(),
            free_hint,
            total_free: AtomicU64::new(total),
            flex_free,
            flex_dirs,
            flex_bits,
            rotor: AtomicU32::new(0),
            corrupt: (0..n).map(|_| AtomicBool::new(false)).collect(),
            corrupt_groups: AtomicU32::new(0),
            reports: Mutex::new(Vec::new()),
            allocations: AtomicU64::new(0),
            examined: AtomicU64::new(0),
            linear_scans: AtomicU64::new(0),
            group_journals: AtomicU64::new(0),
            group_journals_shared: AtomicU64::new(0),
            vol,
        }
    }

    /// The allocator's work counters.
    pub fn stats(&self) -> InodeAllocStats {
        InodeAllocStats {
            allocations: self.allocations.load(Relaxed),
            groups_examined: self.examined.load(Relaxed),
            linear_scans: self.linear_scans.load(Relaxed),
            group_journals: self.group_journals.load(Relaxed),
            group_journals_shared: self.group_journals_shared.load(Relaxed),
        }
    }

    /// Group `g`'s free inodes went from `old` to `new` and its
    /// directories changed by `dirs` (+1, -1 or 0): the hints and the
    /// totals follow (group lock held).
    fn account(&self, g: u32, old: u32, new: u32, dirs: i32) {
        let f = (g >> self.flex_bits) as usize;
        self.free_hint[g as usize].store(new, Relaxed);
        if new >= old {
            self.flex_free[f].fetch_add(u64::from(new - old), Relaxed);
            self.total_free.fetch_add(u64::from(new - old), Relaxed);
        } else {
            self.flex_free[f].fetch_sub(u64::from(old - new), Relaxed);
            self.total_free.fetch_sub(u64::from(old - new), Relaxed);
        }
        match dirs {
            1 => {
                self.flex_dirs[f].fetch_add(1, Relaxed);
            }
            -1 => {
                self.flex_dirs[f].fetch_sub(1, Relaxed);
            }
            _ => {}
        }
    }

    /// Flex groups.
    fn flex_count(&self) -> u32 {
        self.flex_free.len() as u32
    }

    /// Groups `f`'s flex group holds.
    fn flex_members(&self, f: u32) -> std::ops::Range<u32> {
        let n = self.groups.len() as u32;
        let first = (f << self.flex_bits).min(n);
        first..(first + (1 << self.flex_bits)).min(n)
    }

    /// Free inodes in the filesystem.
    pub fn free_inodes(&self) -> u32 {
        self.total_free.load(Relaxed).min(u64::from(u32::MAX)) as u32
    }

    /// Takes group `g`'s lock (checked against the lock order: one
    /// group lock at a time, block and inode groups alike).
    fn lock_group(&self, g: u32) -> crate::locks::Ordered<parking_lot::MutexGuard<'_, Option<IGroup>>> {
        crate::locks::ordered(crate::lock_order::Class::Group, g.into(), || self.groups[g as usize].lock())
    }

    /// Loads group `g`'s bitmap if it is not loaded. One loader at a
    /// time: the bitmap is checked against the descriptor read at open,
    /// which holds only until the group's first allocation changes the
    /// cached bitmap, so no loader may read it after another installed
    /// the group.
    fn load(&self, g: u32) -> Result<()> {
        // Set once, after the state is installed, and never cleared: a
        // loaded group needs no lock to be known loaded.
        if self.loaded[g as usize].load(Acquire) {
            return Ok(());
        }
        let _loader =
            crate::locks::ordered(crate::lock_order::Class::GroupLoad, g.into(), || self.loading[g as usize].lock());
        if self.lock_group(g).is_some() {
            return Ok(());
        }
        let sb = &self.vol.sb;
        let ipg = sb.inodes_per_group as usize;
        let gd = &self.vol.groups[g as usize];
        let bitmap = if gd.has_flag(sb, BG_INODE_UNINIT) {
            vec![0u8; ipg.div_ceil(8)]
        } else {
            let buf = self.vol.block(gd.inode_bitmap)?;
            verify_inode_bitmap(sb, gd, buf.data(), gd.inode_bitmap)?;
            buf.data()[..ipg.div_ceil(8)].to_vec()
        };
        // Whole bytes by popcount, then the bits of a partial last byte
        // (its padding bits may be set on disk).
        let full = ipg / 8;
        let used: u32 = bitmap[..full].iter().map(|b| b.count_ones()).sum::<u32>()
            + (full * 8..ipg).map(|i| u32::from(bitmap[i / 8] >> (i % 8) & 1)).sum::<u32>();
        let free = sb.inodes_per_group - used;
        // Without a journal, a crash leaves bitmaps and descriptors
        // written in any order, and the image "not clean": there the
        // bitmap is the truth (the kernel's ialloc never compares the
        // two) and the descriptor takes its count at the group's next
        // change. Elsewhere a difference is corruption.
        let lagging = !sb.features.has_compat(compat::HAS_JOURNAL) && sb.state & STATE_VALID == 0;
        if free != gd.free_inodes_count && !lagging {
            return Err(Error::corruption(
                Structure::Bitmap,
                Location::GroupBlock { group: g, block: gd.inode_bitmap },
                CorruptKind::Mismatch {
                    field: "bg_free_inodes_count",
                    value: u64::from(gd.free_inodes_count),
                    expected: u64::from(free),
                },
            ));
        }
        // One past the highest set bit below inodes_per_group: the last
        // non-zero byte, then its highest bit (padding bits excluded).
        let mut used_bytes = bitmap.clone();
        if !ipg.is_multiple_of(8) {
            used_bytes[ipg / 8] &= (1u8 << (ipg % 8)) - 1;
        }
        let high = used_bytes[..ipg.div_ceil(8)]
            .iter()
            .rposition(|&b| b != 0)
            .map_or(0, |k| (k * 8) as u32 + 8 - used_bytes[k].leading_zeros());
        let mut slot = self.lock_group(g);
        *slot = Some(IGroup { bitmap, free, dirs: gd.used_dirs_count, high, seq: 0, logged: None });
        if free != gd.free_inodes_count {
            self.account(g, gd.free_inodes_count, free, 0);
        }
        self.loaded[g as usize].store(true, Release);
        Ok(())
    }

    /// Journals group `g`'s state through `journal` in transaction `tid`,
    /// unless a state journaled in `tid` already includes the caller's
    /// change, the one numbered `seq` (as [`InodeAllocator::allocate_seq`]
    /// and [`InodeAllocator::release`] return; `u64::MAX`: always
    /// journal): then nothing is done.
    ///
    /// The group lock is held only to copy the state; `journal` runs under
    /// the group's journaling lock, which orders the journalings of the
    /// group, so that a copy is never journaled after a newer one, and so
    /// that the bitmap and the descriptor a copy writes come from one
    /// state. Threads allocating in the group meanwhile take the group
    /// lock alone and are not held up by this journaling; each journals
    /// its own change before it writes its inode (a `journal` that zeroes
    /// inode slots free in its copy can therefore not zero an inode
    /// allocated after the copy: that inode's record is written only after
    /// its allocator got this lock in turn). Many threads creating in one
    /// group then share one journaling: those that waited for the lock
    /// find their change journaled by the thread before them.
    pub fn journal_group(
        &self,
        g: u32,
        tid: u64,
        seq: u64,
        journal: impl FnOnce(&GroupSnapshot) -> Result<()>,
    ) -> Result<()> {
        self.load(g)?;
        let _j = crate::locks::ordered(crate::lock_order::Class::GroupJournal, g.into(), || {
            self.journaling[g as usize].lock()
        });
        let (snap, seq) = {
            let slot = self.lock_group(g);
            let st = slot.as_ref().ok_or_else(|| Error::Invalid("inode group not loaded".into()))?;
            // Changes are numbered in the order they were made, so a
            // state numbered `seq` or later holds this one.
            if st.logged.is_some_and(|(t, s)| t == tid && s >= seq) {
                self.group_journals_shared.fetch_add(1, Relaxed);
                return Ok(());
            }
            let snap = GroupSnapshot { bitmap: st.bitmap.clone(), free: st.free, dirs: st.dirs, high: st.high };
            (snap, st.seq)
        };
        self.group_journals.fetch_add(1, Relaxed);
        journal(&snap)?;
        if let Some(st) = self.lock_group(g).as_mut() {
            st.logged = Some((tid, seq));
        }
        Ok(())
    }

    /// Allocates an inode for a child of `parent`, returning it with the
    /// group's change number of this allocation (for
    /// [`InodeAllocator::journal_group`]).
    pub fn allocate_seq(&self, balloc: &Allocator, parent: u32, is_dir: bool) -> Result<(u32, u64)> {
        let ngroups = self.groups.len() as u32;
        let ipg = self.vol.sb.inodes_per_group;
        let parent_group = parent.saturating_sub(1) / ipg % ngroups.max(1);
        self.allocations.fetch_add(1, Relaxed);
        let first = if is_dir && (parent == crate::format::inode::ROOT_INO || ngroups == 1) {
            self.find_group_orlov(balloc)
        } else {
            self.find_group_near(balloc, parent, parent_group, is_dir)
        };
        if let Some(g) = first {
            if let Some(got) = self.take(g, is_dir)? {
                return Ok(got);
            }
        }
        // Nothing chosen, or another thread took the chosen group's last
        // inode: the first group with one, from the parent's on.
        self.linear_scan_from(first.unwrap_or(parent_group), is_dir)
    }

    /// Takes the first free inode of group `g`, if it has one.
    fn take(&self, g: u32, is_dir: bool) -> Result<Option<(u32, u64)>> {
        if self.free_hint[g as usize].load(Relaxed) == 0 || self.corrupt[g as usize].load(Relaxed) {
            return Ok(None);
        }
        self.examined.fetch_add(1, Relaxed);
        match self.load(g) {
            Ok(()) => {}
            // A bitmap that fails its checksum or disagrees with its
            // descriptor: the kernel's find_group_* go on to the next
            // group once ext4_read_inode_bitmap has marked it corrupt.
            Err(e @ (Error::Corrupt(_) | Error::Checksum { .. })) => {
                self.mark_corrupt(g, e);
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
        let sb = &self.vol.sb;
        let ipg = sb.inodes_per_group;
        let mut slot = self.lock_group(g);
        let Some(st) = slot.as_mut() else { return Ok(None) };
        let first = if g == 0 { sb.first_ino.max(1) - 1 } else { 0 };
        let Some(i) = first_zero_bit(&st.bitmap, first, ipg) else {
            return Ok(None);
        };
        self.mark_used(g, st, i, is_dir);
        Ok(Some((g * ipg + i + 1, st.seq)))
    }

    /// Sets slot `i` of group `g` (its lock held: `st`) in use and counts
    /// it in the group's, the flex group's and the total counters.
    fn mark_used(&self, g: u32, st: &mut IGroup, i: u32, is_dir: bool) {
        st.bitmap[(i / 8) as usize] |= 1 << (i % 8);
        st.high = st.high.max(i + 1);
        st.seq += 1;
        let old = st.free;
        st.free -= 1;
        if is_dir {
            st.dirs += 1;
            self.dirs_hint[g as usize].store(st.dirs, Relaxed);
        }
        self.account(g, old, st.free, i32::from(is_dir));
    }

    /// Every group from `start` on, wrapping, skipping flex groups without
    /// free inodes: the nearly-full path (the kernel's last resort too).
    fn linear_scan_from(&self, start: u32, is_dir: bool) -> Result<(u32, u64)> {
        self.linear_scans.fetch_add(1, Relaxed);
        let n = self.groups.len() as u32;
        let mut k = 0;
        while k < n {
            let g = (start + k) % n;
            let f = g >> self.flex_bits;
            self.examined.fetch_add(1, Relaxed);
            if self.flex_free[f as usize].load(Relaxed) == 0 {
                // On to the next flex group (or the wrap to group 0).
                let next = self.flex_members(f).end.min(n);
                k += if next > g { next - g } else { 1 };
                continue;
            }
            if let Some(got) = self.take(g, is_dir)? {
                return Ok(got);
            }
            k += 1;
        }
        Err(Error::NoSpace("no free inodes".into()))
    }

    /// Group `g`'s bitmap called a slot free that the inode table says
    /// is a live inode: no inode is allocated from `g` again in this
    /// mount (the kernel's `ext4_mark_group_bitmap_corrupted` with
    /// EXT4_GROUP_INFO_IBITMAP_CORRUPT). The slot's bit stays set, which
    /// is the truth, so it is never handed out. `why` is kept for
    /// [`InodeAllocator::take_reports`]. True if `g` was not marked
    /// before.
    pub fn mark_corrupt(&self, g: u32, why: Error) -> bool {
        let first = self.corrupt.get(g as usize).is_some_and(|c| !c.swap(true, Relaxed));
        if first {
            self.corrupt_groups.fetch_add(1, Relaxed);
            self.reports.lock().push(why);
        }
        first
    }

    /// The corruption found since the last call (each group once), for
    /// the caller to record as ext4_error does.
    pub fn take_reports(&self) -> Vec<Error> {
        std::mem::take(&mut *self.reports.lock())
    }

    /// Groups marked corrupt so far ([`InodeAllocator::mark_corrupt`]).
    pub fn corrupt_groups(&self) -> u32 {
        self.corrupt_groups.load(Relaxed)
    }

    /// True if group `g` has free inodes (and free blocks if `blocks`)
    /// and was not marked corrupt.
    fn fits(&self, balloc: &Allocator, g: u32, blocks: bool) -> bool {
        self.examined.fetch_add(1, Relaxed);
        self.free_hint[g as usize].load(Relaxed) > 0
            && (!blocks || balloc.group_free_hint(g) > 0)
            && !self.corrupt[g as usize].load(Relaxed)
    }

    /// A group near the parent's (the kernel's find_group_other): the
    /// parent's group if it has room (a directory also wants free
    /// blocks), else a group of the parent's flex group, else a quadratic
    /// hash probe from a start that depends on the parent (files of one
    /// directory land together, those of its neighbours elsewhere).
    fn find_group_near(&self, balloc: &Allocator, parent: u32, pg: u32, is_dir: bool) -> Option<u32> {
        let n = self.groups.len() as u32;
        if self.fits(balloc, pg, is_dir) {
            return Some(pg);
        }
        let f = pg >> self.flex_bits;
        if self.flex_bits > 0 && self.flex_free[f as usize].load(Relaxed) > 0 {
            if let Some(g) = self.flex_members(f).find(|&g| self.fits(balloc, g, is_dir)) {
                return Some(g);
            }
        }
        let mut g = (u64::from(pg) + u64::from(parent)) % u64::from(n);
        let mut step = 1u64;
        while step < u64::from(n) {
            g = (g + step) % u64::from(n);
            if self.fits(balloc, g as u32, true) {
                return Some(g as u32);
            }
            step <<= 1;
        }
        None
    }

    /// Orlov for a top-level directory (the kernel's find_group_orlov):
    /// among a window of flex groups starting at a rotor, those with at
    /// least the average free inodes and free blocks, the one with the
    /// fewest directories; then its first group with a free inode.
    fn find_group_orlov(&self, balloc: &Allocator) -> Option<u32> {
        let nf = self.flex_count();
        let avg_inodes = (self.total_free.load(Relaxed) / u64::from(nf)).max(1);
        let avg_blocks = balloc.free_blocks() / u64::from(nf);
        let start = self.rotor.fetch_add(1, Relaxed) % nf;
        let window = nf.min(ORLOV_WINDOW);
        let mut best: Option<(u32, u64)> = None;
        for k in 0..window {
            let f = (start + k) % nf;
            self.examined.fetch_add(1, Relaxed);
            let fi = self.flex_free[f as usize].load(Relaxed);
            if fi < avg_inodes || balloc.flex_free_blocks(f) < avg_blocks {
                continue;
            }
            let d = self.flex_dirs[f as usize].load(Relaxed);
            if best.is_none_or(|(_, bd)| d < bd) {
                best = Some((f, d));
            }
        }
        // No flex group of the window is as good as the average: the
        // first with any free inode after it (the rest of the disk is
        // fuller, so this stops early unless inodes are nearly gone).
        let f = match best {
            Some((f, _)) => f,
            None => (window..nf).chain(0..window).map(|k| (start + k) % nf).find(|&f| {
                self.examined.fetch_add(1, Relaxed);
                self.flex_free[f as usize].load(Relaxed) > 0
            })?,
        };
        self.flex_members(f).find(|&g| self.fits(balloc, g, false))
    }

    /// Marks inode `ino` in use if it is free (fast-commit replay: an
    /// inode the kernel allocated); true if it was free.
    pub fn claim(&self, ino: u32, is_dir: bool) -> Result<bool> {
        let sb = &self.vol.sb;
        if ino == 0 || ino > sb.inodes_count {
            return Err(Error::BadInode(u64::from(ino)));
        }
        let ipg = sb.inodes_per_group;
        let (g, i) = ((ino - 1) / ipg, (ino - 1) % ipg);
        self.load(g)?;
        let mut slot = self.lock_group(g);
        let st = slot.as_mut().ok_or_else(|| Error::Invalid("inode group not loaded".into()))?;
        if st.bitmap[(i / 8) as usize] >> (i % 8) & 1 != 0 {
            return Ok(false);
        }
        self.mark_used(g, st, i, is_dir);
        Ok(true)
    }

    /// Frees inode `ino` (a directory if `is_dir`); returns the group's
    /// change number of this free (for [`InodeAllocator::journal_group`]).
    pub fn release(&self, ino: u32, is_dir: bool) -> Result<u64> {
        let sb = &self.vol.sb;
        if ino < sb.first_ino || ino > sb.inodes_count {
            return Err(Error::corruption(
                Structure::Inode,
                Location::Inode(ino),
                CorruptKind::OutsideRange {
                    what: "inode to free",
                    value: u64::from(ino),
                    start: u64::from(sb.first_ino),
                    end: u64::from(sb.inodes_count) + 1,
                },
            ));
        }
        let g = (ino - 1) / sb.inodes_per_group;
        let i = (ino - 1) % sb.inodes_per_group;
        self.load(g)?;
        let mut slot = self.lock_group(g);
        let st = slot.as_mut().ok_or_else(|| Error::Invalid("inode group not loaded".into()))?;
        if st.bitmap[(i / 8) as usize] >> (i % 8) & 1 == 0 {
            return Err(Error::corruption(
                Structure::Bitmap,
                Location::Group(g),
                CorruptKind::DoubleFree { what: "inode", first: u64::from(ino), count: 1 },
            ));
        }
        // bg_used_dirs_count below the directories being freed is corrupt
        // (not clamped); checked before the bitmap changes.
        let dirs = if is_dir {
            crate::error::sub_counter(st.dirs, 1, "bg_used_dirs_count", Structure::GroupDesc, Location::Group(g))?
        } else {
            st.dirs
        };
        st.bitmap[(i / 8) as usize] &= !(1 << (i % 8));
        // `high` stays: slots below it stay below the itable_unused mark.
        st.seq += 1;
        let old = st.free;
        st.free += 1;
        if is_dir {
            st.dirs = dirs;
            self.dirs_hint[g as usize].store(st.dirs, Relaxed);
        }
        self.account(g, old, st.free, -i32::from(is_dir));
        Ok(st.seq)
    }
}

/// The first clear bit of `bitmap` in `[from, to)`, skipping full 64-bit
/// words (a filling group would otherwise be scanned bit by bit).
fn first_zero_bit(bitmap: &[u8], from: u32, to: u32) -> Option<u32> {
    let mut i = from;
    while i < to {
        let byte = (i / 8) as usize;
        if i.is_multiple_of(64) && byte + 8 <= bitmap.len() && bitmap[byte..byte + 8] == [0xFF; 8] {
            i += 64;
            continue;
        }
        if i.is_multiple_of(8) && bitmap.get(byte) == Some(&0xFF) {
            i += 8;
            continue;
        }
        if bitmap.get(byte).is_some_and(|b| b >> (i % 8) & 1 == 0) {
            return Some(i);
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_zero_bit_skips_full_words() {
        let mut b = vec![0xFFu8; 64];
        assert_eq!(first_zero_bit(&b, 0, 512), None);
        b[40] = 0b1110_1111;
        assert_eq!(first_zero_bit(&b, 0, 512), Some(324));
        assert_eq!(first_zero_bit(&b, 325, 512), None);
        assert_eq!(first_zero_bit(&b, 0, 324), None);
        b[0] = 0xFE;
        assert_eq!(first_zero_bit(&b, 1, 512), Some(324));
        assert_eq!(first_zero_bit(&b, 0, 512), Some(0));
    }
}
