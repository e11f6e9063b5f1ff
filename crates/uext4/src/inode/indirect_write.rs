//! Changing the block maps of files without extents (ext2/ext3 style):
//! mapping new blocks into holes (indirect blocks allocated as needed,
//! near the file's previous block as the kernel's ext4_find_goal does)
//! and removing ranges (data and now-empty indirect blocks freed, as
//! ext4_ind_truncate / ext4_free_branches).
//!
//! The map is 12 direct pointers in `i_block`, then one single, one
//! double and one triple indirect tree (slots 12, 13, 14). Indirect
//! blocks are metadata: every change goes through the [`Tx`] (journaled
//! on ext3, written in place on ext2). New indirect blocks are written
//! whole before the pointer that links them in (ext4_alloc_branch, then
//! ext4_splice_branch), so a reader walking the map never meets a
//! half-built branch. `i_blocks` counts data and indirect blocks.
//!
//! Block-mapped files have no unwritten state: nothing here maps
//! preallocated blocks (fallocate only punches holes in these files, as
//! ext4 does).
//!
//! Locking: as [`super::extent_write`] (the caller excludes other
//! changers of this inode's map).

use super::map_write::{Run, FINISH_RESERVE};
use crate::alloc::AllocRequest;
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::{FileBlock, PhysicalBlock};
use crate::format::bytes::le32;
use crate::format::inode::{Inode, FL_EXTENTS, I_BLOCK_SIZE, S_IFDIR, S_IFMT};
use crate::txn::{FreeKind, Tx};

/// Direct pointers in `i_block`.
const DIRECT: u64 = 12;

/// Block pointers are 32 bits: a block-mapped file's blocks (data and
/// indirect) lie below 2^32 (the kernel's EXT4_MAX_BLOCK_FILE_PHYS).
const MAX_PHYS: u64 = 1 << 32;

/// Credits one allocation step can take: up to three new indirect
/// blocks (each written, its bitmap and descriptor), the pointer that
/// links them (a block or the inode), the data's bitmap and descriptor,
/// the inode.
const ALLOC_STEP_CREDITS: usize = 3 * 3 + 1 + 2 + 1 + 3;

/// Credits a bounded removal keeps for the indirect blocks above the
/// data it frees (each rewritten or freed with its bitmap and
/// descriptor) besides [`FINISH_RESERVE`].
const CHAIN_RESERVE: usize = 3 * 4 + 1;

/// Makes `inode`'s `i_block` an empty block map (no extents flag).
pub fn init_map(inode: &mut Inode) {
    inode.flags &= !FL_EXTENTS;
    inode.block = [0; I_BLOCK_SIZE];
}

/// Credits one step of [`allocate_range`] can take.
pub fn alloc_step_credits() -> usize {
    ALLOC_STEP_CREDITS
}

/// Where a logical block's pointer sits: `depth` indirect levels (0: a
/// direct pointer) and the pointer's index at each level, from the slot
/// in `i_block` (`idx[0]`) down to the data pointer (`idx[depth]`).
#[derive(Debug, Clone, Copy)]
struct Path {
    depth: usize,
    idx: [usize; 4],
}

/// The path of `lblk` (the kernel's ext4_block_to_path); None past what
/// the triple indirect tree maps.
fn path_of(lblk: u64, per: u64) -> Option<Path> {
    if lblk < DIRECT {
        return Some(Path { depth: 0, idx: [lblk as usize, 0, 0, 0] });
    }
    let mut rel = lblk - DIRECT;
    let mut span = per;
    for depth in 1..=3usize {
        if rel < span {
            let mut idx = [11 + depth, 0, 0, 0];
            let mut s = span;
            for slot in idx.iter_mut().take(depth + 1).skip(1) {
                s /= per;
                *slot = (rel / s) as usize;
                rel %= s;
            }
            return Some(Path { depth, idx });
        }
        rel -= span;
        span = span.saturating_mul(per);
    }
    None
}

fn slot(inode: &Inode, i: usize) -> u64 {
    u64::from(le32(&inode.block, i * 4))
}

fn set_slot(inode: &mut Inode, i: usize, v: u64) {
    inode.block[i * 4..i * 4 + 4].copy_from_slice(&(v as u32).to_le_bytes());
}

fn bad(ino: u32, block: u64, kind: CorruptKind) -> Error {
    Error::corruption(Structure::IndirectBlock, Location::inode_block(ino, block), kind)
}

/// Everything one map change needs.
struct W<'t, 'a> {
    tx: &'t Tx<'a>,
    ino: u32,
    /// Pointers per indirect block.
    per: u64,
    /// 512-byte sectors per block (`i_blocks` units).
    sectors: u64,
}

impl W<'_, '_> {
    fn new<'t, 'a>(tx: &'t Tx<'a>, inode: &Inode) -> Result<W<'t, 'a>> {
        if inode.uses_extents() {
            return Err(Error::Invalid(format!("inode {}: block-map change on an extent-mapped file", inode.ino)));
        }
        if inode.has_inline_data() {
            // Its i_block holds data: changing it as a map would corrupt it.
            return Err(Error::Unsupported(format!("inode {}: changing the blocks of inline data", inode.ino)));
        }
        let bs = tx.vol.block_size as u64;
        Ok(W { tx, ino: inode.ino, per: bs / 4, sectors: bs / 512 })
    }

    /// Checks a pointer found at `at` (0: the inode) before following it.
    fn check(&self, ptr: u64, at: u64, what: &'static str) -> Result<()> {
        if !self.tx.vol.valid_range(ptr, 1) {
            return Err(bad(self.ino, at, CorruptKind::OutsideFilesystem { what, block: ptr, len: 1 }));
        }
        Ok(())
    }

    /// The pointers of indirect block `block`.
    fn read_ptrs(&self, block: u64, at: u64) -> Result<Vec<u32>> {
        self.check(block, at, "indirect pointer")?;
        let buf = self.tx.vol.block(block)?;
        Ok(buf.data().chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// Writes `ptrs` as the whole of indirect block `block` (`fresh`: a
    /// new block, its old contents unread).
    fn write_ptrs(&self, block: u64, ptrs: &[u32], fresh: bool) -> Result<()> {
        let f = |b: &mut [u8]| {
            for (c, p) in b.chunks_exact_mut(4).zip(ptrs) {
                c.copy_from_slice(&p.to_le_bytes());
            }
            Ok(())
        };
        if fresh {
            self.tx.init(block, f)
        } else {
            self.tx.modify(block, f)
        }
    }

    /// Blocks the map can address (triple indirect and `i_blocks` limits).
    fn max_blocks(&self) -> u64 {
        let vol = self.tx.vol;
        (vol.sb.max_file_size(false) / vol.block_size as u64).min(super::MAX_LBLK.get())
    }

    /// Where new blocks for `lblk` should go (ext4_find_goal): after the
    /// nearest mapped block to its left in the same pointer block, else
    /// just after that indirect block, else after the file's previous
    /// block, else in the inode's group.
    fn goal(&self, inode: &Inode, p: &Path, leaf: Option<(u64, &[u32])>, lblk: u64) -> Result<PhysicalBlock> {
        let i = p.idx[p.depth];
        let left = |get: &dyn Fn(usize) -> u64| (0..i).rev().map(|j| (j, get(j))).find(|&(_, q)| q != 0);
        let found = match leaf {
            Some((_, ptrs)) => left(&|j| u64::from(ptrs[j])),
            None if p.depth == 0 => left(&|j| slot(inode, j)),
            None => None,
        };
        if let Some((j, q)) = found {
            return Ok(PhysicalBlock(q + (i - j) as u64));
        }
        if let Some((block, _)) = leaf {
            return Ok(PhysicalBlock(block + 1));
        }
        if lblk > 0 {
            if let super::MapKind::Mapped(q) = super::map_block(self.tx.vol, inode, FileBlock(lblk - 1))?.kind {
                return Ok(q + 1);
            }
        }
        Ok(self.tx.inode_goal(inode.ino))
    }

    /// Maps up to `max_n` blocks of the hole at `lblk` (as many as one
    /// pointer block holds and one allocation gives): allocates the
    /// missing indirect blocks on the way and the data after them.
    fn alloc_in_leaf(&self, inode: &mut Inode, lblk: u64, max_n: u64, flags: u32, hint: u64) -> Result<Run> {
        let tx = self.tx;
        let p = path_of(lblk, self.per)
            .ok_or_else(|| Error::FileTooBig(format!("inode {}: block {lblk} beyond the block map", self.ino)))?;
        let room = if p.depth == 0 { DIRECT - lblk } else { self.per - p.idx[p.depth] as u64 };
        let n = max_n.min(room).max(1);
        // The indirect blocks that exist on the path: chain[l] at level l.
        let mut chain = [0u64; 4];
        let mut have = 0;
        let mut ptr = if p.depth > 0 { slot(inode, p.idx[0]) } else { 0 };
        let mut at = 0;
        let mut leaf_ptrs = None;
        for l in 1..=p.depth {
            if ptr == 0 {
                break;
            }
            let ptrs = self.read_ptrs(ptr, at)?;
            chain[l] = ptr;
            have = l;
            at = ptr;
            if l == p.depth {
                leaf_ptrs = Some(ptrs);
            } else {
                ptr = u64::from(ptrs[p.idx[l]]);
            }
        }
        let leaf = leaf_ptrs.as_deref().map(|v| (chain[p.depth], v));
        // The map said hole: the pointers of [lblk, lblk + n) are zero
        // (n is within both the hole and this pointer block).
        let mut goal = self.goal(inode, &p, leaf, lblk)?;
        let mut fresh = Vec::with_capacity(p.depth - have);
        let undo = |fresh: &[PhysicalBlock]| {
            for &b in fresh {
                let _ = tx.free_blocks(b, 1, FreeKind::Metadata);
            }
        };
        let too_high = || Error::NoSpace(format!("inode {}: no block below 2^32 for a block-mapped file", self.ino));
        goal = goal.min(PhysicalBlock(MAX_PHYS - 1));
        for _ in have..p.depth {
            match tx.alloc_metadata_block(self.ino, goal) {
                Ok(b) if b.get() < MAX_PHYS => {
                    fresh.push(b);
                    goal = b + 1;
                }
                Ok(b) => {
                    fresh.push(b);
                    undo(&fresh);
                    return Err(too_high());
                }
                Err(e) => {
                    undo(&fresh);
                    return Err(e);
                }
            }
        }
        let req = AllocRequest {
            inode: self.ino,
            logical: FileBlock(lblk),
            goal,
            len: n as u32,
            min_len: 1,
            file_size: hint,
            flags,
        };
        let a = match tx.alloc_blocks(&req) {
            Ok(a) => a,
            Err(e) => {
                undo(&fresh);
                return Err(e);
            }
        };
        // Only the part below 2^32 is usable (none: ENOSPC, as for the
        // kernel, whose allocator never hands such a file higher blocks).
        let got = u64::from(a.len).min(n).min(MAX_PHYS.saturating_sub(a.start.get()));
        if got == 0 {
            let _ = tx.free_blocks(a.start, u64::from(a.len), FreeKind::Data);
            undo(&fresh);
            return Err(too_high());
        }
        if u64::from(a.len) > got {
            tx.free_blocks(a.start + got, u64::from(a.len) - got, FreeKind::Data)?;
        }
        let first = p.idx[p.depth];
        let data = |ptrs: &mut [u32]| {
            for k in 0..got as usize {
                ptrs[first + k] = (a.start.get() + k as u64) as u32;
            }
        };
        // The new branch, bottom up, then the pointer that links it.
        let per = self.per as usize;
        for (k, &b) in fresh.iter().enumerate().rev() {
            let level = have + 1 + k;
            let mut ptrs = vec![0u32; per];
            if level == p.depth {
                data(&mut ptrs);
            } else {
                ptrs[p.idx[level]] = fresh[k + 1].get() as u32;
            }
            self.write_ptrs(b.get(), &ptrs, true)?;
        }
        match (fresh.first(), have) {
            (Some(&top), 0) => set_slot(inode, p.idx[0], top.get()),
            (Some(&top), l) => {
                let mut ptrs = self.read_ptrs(chain[l], 0)?;
                ptrs[p.idx[l]] = top.get() as u32;
                self.write_ptrs(chain[l], &ptrs, false)?;
            }
            (None, 0) => {
                for k in 0..got {
                    set_slot(inode, first + k as usize, a.start.get() + k);
                }
            }
            (None, l) => {
                let mut ptrs = leaf_ptrs.unwrap_or_default();
                data(&mut ptrs);
                self.write_ptrs(chain[l], &ptrs, false)?;
            }
        }
        inode.blocks_512 += (fresh.len() as u64 + got) * self.sectors;
        Ok((FileBlock(lblk), a.start, got))
    }

    /// The group of block `b` (for counting the bitmaps a free touches).
    fn group(&self, b: u64) -> u64 {
        let sb = &self.tx.vol.sb;
        b.saturating_sub(u64::from(sb.first_data_block)) / u64::from(sb.blocks_per_group.max(1))
    }

    /// Credits a bounded removal may still spend on data bitmaps.
    fn budget(&self, bounded: bool) -> usize {
        if bounded {
            self.tx.handle.credits_left().saturating_sub(CHAIN_RESERVE + FINISH_RESERVE)
        } else {
            usize::MAX
        }
    }

    /// Clears the data pointers `[a, b)` of `ptrs` as far as `budget`
    /// allows (two credits per group freed from); returns where it
    /// stopped (`b` when done) and the runs of blocks to free.
    fn free_data(
        &self,
        ptrs: &mut [u32],
        a: usize,
        b: usize,
        at: u64,
        budget: usize,
    ) -> Result<(usize, Vec<(u64, u64)>)> {
        let mut groups: Vec<u64> = Vec::new();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut stop = b;
        for (j, ptr) in ptrs.iter_mut().enumerate().take(b).skip(a) {
            let q = u64::from(*ptr);
            if q == 0 {
                continue;
            }
            self.check(q, at, "data pointer")?;
            let g = self.group(q);
            if !groups.contains(&g) {
                if 2 * (groups.len() + 1) > budget {
                    stop = j;
                    break;
                }
                groups.push(g);
            }
            match runs.last_mut() {
                Some((s, n)) if *s + *n == q => *n += 1,
                _ => runs.push((q, 1)),
            }
            *ptr = 0;
        }
        Ok((stop, runs))
    }

    /// Frees the freed runs' blocks and takes them off `i_blocks`.
    fn release(&self, inode: &mut Inode, runs: &[(u64, u64)], kind: FreeKind) -> Result<()> {
        for &(s, n) in runs {
            let left = inode.blocks_less(n * self.sectors)?;
            self.tx.free_blocks(PhysicalBlock(s), n, kind)?;
            inode.blocks_512 = left;
        }
        Ok(())
    }

    /// Removes `[a, b)` (relative to the subtree) from the subtree of
    /// indirect block `block` at `level` (1: its pointers are data).
    /// Returns (done, empty): whether the whole range went (false: the
    /// credits ran out), and whether the block now holds no pointer (the
    /// caller then frees it and clears its pointer).
    #[allow(clippy::too_many_arguments)]
    fn remove_sub(
        &self,
        inode: &mut Inode,
        block: u64,
        at: u64,
        level: u32,
        a: u64,
        b: u64,
        kind: FreeKind,
        bounded: bool,
    ) -> Result<(bool, bool)> {
        let old = self.read_ptrs(block, at)?;
        let mut ptrs = old.clone();
        let mut done = true;
        let mut freed = Vec::new();
        if level == 1 {
            let (stop, runs) = self.free_data(&mut ptrs, a as usize, b as usize, block, self.budget(bounded))?;
            done = stop == b as usize;
            freed = runs;
        } else {
            let span = self.per.pow(level - 1);
            for j in a / span..=(b - 1) / span {
                let q = u64::from(ptrs[j as usize]);
                if q == 0 {
                    continue;
                }
                let (ca, cb) = (a.max(j * span) - j * span, b.min((j + 1) * span) - j * span);
                let (d, empty) = self.remove_sub(inode, q, block, level - 1, ca, cb, kind, bounded)?;
                if empty {
                    // Freed at once: the next child's budget sees its credits.
                    ptrs[j as usize] = 0;
                    self.release(inode, &[(q, 1)], FreeKind::Metadata)?;
                }
                if !d {
                    done = false;
                    break;
                }
            }
        }
        let empty = ptrs.iter().all(|&p| p == 0);
        // An emptied block is freed by the caller, unwritten.
        if !empty && ptrs != old {
            self.write_ptrs(block, &ptrs, false)?;
        }
        self.release(inode, &freed, kind)?;
        Ok((done, empty))
    }

    /// Removes the mappings of `[from, to)`; false when the credits ran
    /// out first (bounded only).
    fn remove(&self, inode: &mut Inode, from: u64, to: u64, bounded: bool) -> Result<bool> {
        // Directory blocks are journaled metadata: revoke them when freed.
        let kind = if inode.mode & S_IFMT == S_IFDIR { FreeKind::Metadata } else { FreeKind::Data };
        if from < DIRECT && from < to {
            let mut ptrs: Vec<u32> = (0..DIRECT as usize).map(|j| slot(inode, j) as u32).collect();
            let b = to.min(DIRECT) as usize;
            let (stop, runs) = self.free_data(&mut ptrs, from as usize, b, 0, self.budget(bounded))?;
            for (j, &p) in ptrs.iter().enumerate() {
                set_slot(inode, j, u64::from(p));
            }
            self.release(inode, &runs, kind)?;
            if stop < b {
                return Ok(false);
            }
        }
        let (mut base, mut span) = (DIRECT, self.per);
        for depth in 1..=3u32 {
            let (a, b) = (from.max(base), to.min(base.saturating_add(span)));
            let root = slot(inode, 11 + depth as usize);
            if a < b && root != 0 {
                let (done, empty) = self.remove_sub(inode, root, 0, depth, a - base, b - base, kind, bounded)?;
                if empty {
                    set_slot(inode, 11 + depth as usize, 0);
                    self.release(inode, &[(root, 1)], FreeKind::Metadata)?;
                }
                if !done {
                    return Ok(false);
                }
            }
            base = base.saturating_add(span);
            span = span.saturating_mul(self.per);
        }
        Ok(true)
    }
}

/// Allocates blocks for every hole in `[lblk, lblk + n)` and maps them;
/// see [`super::extent_write::allocate_range`] (same contract, no
/// unwritten state: the caller writes the data before anyone reads it).
pub fn allocate_range(
    tx: &Tx,
    inode: &mut Inode,
    lblk: FileBlock,
    n: u64,
    flags: u32,
    size_hint: u64,
) -> Result<Vec<Run>> {
    let w = W::new(tx, inode)?;
    let end = lblk.checked_add(n).filter(|e| e.get() <= w.max_blocks()).ok_or_else(|| {
        Error::FileTooBig(format!("inode {}: blocks {lblk}+{n} beyond the largest block-mapped file", inode.ino))
    })?;
    let mut runs = Vec::new();
    let mut cur = lblk;
    while cur < end {
        let m = super::map_block(tx.vol, inode, cur)?;
        let len = m.len.min(end - cur);
        if m.kind != super::MapKind::Hole {
            cur += len;
            continue;
        }
        let mut hole = (cur, len);
        while hole.1 > 0 {
            if !runs.is_empty() && tx.handle.credits_left() < ALLOC_STEP_CREDITS {
                return Ok(runs);
            }
            let run = w.alloc_in_leaf(inode, hole.0.get(), hole.1, flags, size_hint)?;
            runs.push(run);
            hole = (hole.0 + run.2, hole.1 - run.2);
        }
        cur += len;
    }
    Ok(runs)
}

/// Removes the mappings of `[from, to)` (`to` may be `u64::MAX`),
/// freeing data and emptied indirect blocks; when `bounded`, stops when
/// the handle's credits might not cover more (false: go on in a new
/// handle; the map and `i_blocks` are consistent after every step).
pub fn remove_range(tx: &Tx, inode: &mut Inode, from: FileBlock, to: FileBlock, bounded: bool) -> Result<bool> {
    let w = W::new(tx, inode)?;
    let per = w.per;
    let top = DIRECT + per + per * per + per * per * per;
    w.remove(inode, from.get(), to.get().min(top), bounded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_cross_the_tree_boundaries() {
        let per = 256;
        let p = path_of(11, per).unwrap();
        assert_eq!((p.depth, p.idx[0]), (0, 11));
        let p = path_of(12, per).unwrap();
        assert_eq!((p.depth, p.idx[0], p.idx[1]), (1, 12, 0));
        let p = path_of(12 + 255, per).unwrap();
        assert_eq!((p.depth, p.idx[1]), (1, 255));
        let p = path_of(12 + 256, per).unwrap();
        assert_eq!((p.depth, p.idx[0], p.idx[1], p.idx[2]), (2, 13, 0, 0));
        let p = path_of(12 + 256 + 256 * 256 - 1, per).unwrap();
        assert_eq!((p.depth, p.idx[1], p.idx[2]), (2, 255, 255));
        let p = path_of(12 + 256 + 256 * 256 + 257, per).unwrap();
        assert_eq!((p.depth, p.idx[0], p.idx[1], p.idx[2], p.idx[3]), (3, 14, 0, 1, 1));
        assert!(path_of(12 + 256 + 256 * 256 + 256 * 256 * 256, per).is_none());
    }
}
