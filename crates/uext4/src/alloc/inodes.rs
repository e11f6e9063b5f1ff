//! The inode allocator: per-group inode bitmaps in memory, group choice
//! like the kernel's ialloc.c (Orlov spreading for top-level directories,
//! near the parent for everything else).
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
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

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
}

/// Inode allocation state of a filesystem opened read-write.
#[derive(Debug)]
pub struct InodeAllocator {
    vol: Arc<Volume>,
    groups: Vec<Mutex<Option<IGroup>>>,
    /// One load lock per group: serialises its loaders (see `load`).
    loading: Vec<Mutex<()>>,
    /// Free inodes per group (a hint readable without the lock).
    free_hint: Vec<AtomicU32>,
    dirs_hint: Vec<AtomicU32>,
    total_free: AtomicU64,
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
}

impl InodeAllocator {
    /// Builds the allocator from the descriptors (bitmaps load lazily).
    pub fn new(vol: Arc<Volume>) -> InodeAllocator {
        let n = vol.groups.len();
        let free_hint: Vec<AtomicU32> = vol.groups.iter().map(|g| AtomicU32::new(g.free_inodes_count)).collect();
        let total = vol.groups.iter().map(|g| u64::from(g.free_inodes_count)).sum();
        InodeAllocator {
            dirs_hint: vol.groups.iter().map(|g| AtomicU32::new(g.used_dirs_count)).collect(),
            groups: (0..n).map(|_| Mutex::new(None)).collect(),
            loading: (0..n).map(|_| Mutex::new(())).collect(),
            free_hint,
            total_free: AtomicU64::new(total),
            rotor: AtomicU32::new(0),
            corrupt: (0..n).map(|_| AtomicBool::new(false)).collect(),
            corrupt_groups: AtomicU32::new(0),
            reports: Mutex::new(Vec::new()),
            vol,
        }
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
        if self.lock_group(g).is_some() {
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
        let used: u32 = (0..ipg).map(|i| u32::from(bitmap[i / 8] >> (i % 8) & 1)).sum();
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
        let mut slot = self.lock_group(g);
        *slot = Some(IGroup { bitmap, free, dirs: gd.used_dirs_count });
        if free != gd.free_inodes_count {
            self.free_hint[g as usize].store(free, Relaxed);
            self.total_free.fetch_add(u64::from(free), Relaxed);
            self.total_free.fetch_sub(u64::from(gd.free_inodes_count), Relaxed);
        }
        Ok(())
    }

    /// Runs `f(bitmap, free, used_dirs)` on group `g`'s state under its lock.
    pub fn with_group<R>(&self, g: u32, f: impl FnOnce(&[u8], u32, u32) -> R) -> Result<R> {
        self.load(g)?;
        let slot = self.lock_group(g);
        let st = slot.as_ref().ok_or_else(|| Error::Invalid("inode group not loaded".into()))?;
        Ok(f(&st.bitmap, st.free, st.dirs))
    }

    /// Allocates an inode for a child of `parent`.
    pub fn allocate(&self, balloc: &Allocator, parent: u32, is_dir: bool) -> Result<u32> {
        let sb = &self.vol.sb;
        let ngroups = self.groups.len() as u32;
        let ipg = sb.inodes_per_group;
        let parent_group = parent.saturating_sub(1) / ipg % ngroups.max(1);
        let order = self.group_order(balloc, parent, parent_group, is_dir);
        for g in order {
            if self.free_hint[g as usize].load(Relaxed) == 0 || self.corrupt[g as usize].load(Relaxed) {
                continue;
            }
            match self.load(g) {
                Ok(()) => {}
                // A bitmap that fails its checksum or disagrees with its
                // descriptor: the kernel's find_group_* go on to the next
                // group once ext4_read_inode_bitmap has marked it corrupt.
                Err(e @ (Error::Corrupt(_) | Error::Checksum { .. })) => {
                    self.mark_corrupt(g, e);
                    continue;
                }
                Err(e) => return Err(e),
            }
            let mut slot = self.lock_group(g);
            let Some(st) = slot.as_mut() else { continue };
            let first = if g == 0 { sb.first_ino.max(1) - 1 } else { 0 };
            let Some(i) = first_zero_bit(&st.bitmap, first, ipg) else {
                continue;
            };
            st.bitmap[(i / 8) as usize] |= 1 << (i % 8);
            st.free -= 1;
            if is_dir {
                st.dirs += 1;
                self.dirs_hint[g as usize].store(st.dirs, Relaxed);
            }
            self.free_hint[g as usize].store(st.free, Relaxed);
            self.total_free.fetch_sub(1, Relaxed);
            return Ok(g * ipg + i + 1);
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

    /// Groups to try, best first.
    fn group_order(&self, balloc: &Allocator, parent: u32, pg: u32, is_dir: bool) -> Vec<u32> {
        let n = self.groups.len() as u32;
        let mut order = Vec::with_capacity(n as usize);
        if is_dir && (parent == crate::format::inode::ROOT_INO || n == 1) {
            // Orlov: spread top-level directories over groups with at
            // least average free inodes and blocks, fewest directories
            // first, starting from a rotor.
            let avg_inodes = self.total_free.load(Relaxed) / u64::from(n);
            let avg_blocks = balloc.free_blocks() / u64::from(n);
            let start = self.rotor.fetch_add(1, Relaxed) % n;
            let mut best: Option<(u32, u32)> = None;
            for k in 0..n {
                let g = (start + k) % n;
                let fi = u64::from(self.free_hint[g as usize].load(Relaxed));
                let fb = u64::from(balloc.group_free_hint(g));
                if fi < avg_inodes.max(1) || fb < avg_blocks {
                    continue;
                }
                let d = self.dirs_hint[g as usize].load(Relaxed);
                if best.is_none_or(|(_, bd)| d < bd) {
                    best = Some((g, d));
                }
            }
            if let Some((g, _)) = best {
                order.push(g);
            }
        } else {
            // Near the parent: its group if it has room for both inodes
            // and blocks, then onwards.
            let fb = balloc.group_free_hint(pg);
            if fb > 0 || !is_dir {
                order.push(pg);
            }
        }
        for k in 0..n {
            let g = (pg + k) % n;
            if !order.contains(&g) {
                order.push(g);
            }
        }
        order
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
        let byte = &mut st.bitmap[(i / 8) as usize];
        if *byte >> (i % 8) & 1 != 0 {
            return Ok(false);
        }
        *byte |= 1 << (i % 8);
        st.free -= 1;
        if is_dir {
            st.dirs += 1;
            self.dirs_hint[g as usize].store(st.dirs, Relaxed);
        }
        self.free_hint[g as usize].store(st.free, Relaxed);
        self.total_free.fetch_sub(1, Relaxed);
        Ok(true)
    }

    /// Frees inode `ino` (a directory if `is_dir`).
    pub fn release(&self, ino: u32, is_dir: bool) -> Result<()> {
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
        st.free += 1;
        if is_dir {
            st.dirs = dirs;
            self.dirs_hint[g as usize].store(st.dirs, Relaxed);
        }
        self.free_hint[g as usize].store(st.free, Relaxed);
        self.total_free.fetch_add(1, Relaxed);
        Ok(())
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
