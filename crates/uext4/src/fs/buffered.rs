//! Buffered I/O through the page cache (seed 001), with delayed
//! allocation.
//!
//! - **Reads take no inode I/O lock.** They work in 64 KiB-aligned
//!   windows: every folio of the window is found or created, all are
//!   locked in index order, missing contents are filled from the device
//!   (under the invalidate lock, shared), and the bytes are copied out.
//! - **A write that lies inside one cached, uptodate folio** and inside
//!   the file takes the I/O lock *shared* and the folio lock, copies in
//!   and marks the folio dirty; no handle (lazy mtime aside), no device
//!   I/O.
//! - **Any other write** takes the I/O lock exclusively, creates (large
//!   enough: an aligned 8 KiB write gets one 8 KiB folio) and locks the
//!   folios of its range, fills those it covers only in part, copies in
//!   and marks them dirty; a write past EOF raises the in-memory size.
//!
//! No write allocates: a dirty folio over a hole *reserves* blocks
//! (ENOSPC is reported by the write, never lost at writeback), and
//! writeback (fs/writeback.rs) allocates them in large runs. Because a
//! writer holds the locks of every folio of its range while it copies,
//! and a reader fills and copies a window with all its folios locked, a
//! reader sees an aligned write of up to 64 KiB either entirely or not at
//! all; overlapping writes are serialized by the folio locks (shared
//! path) or the exclusive I/O lock.

use super::atime::AccessTimes;
use super::FsCore;
use crate::data::page_cache::{order_for, BlockRun, Folio, FolioGuard, FolioState, PAGE_SIZE};
use crate::data::FileIo;
use crate::data::{IoStats, LockPolicy};
use crate::error::{Error, Result};
use crate::format::block_number::FileBlock;
use crate::inode::MapKind;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Reads copy out of at most this many bytes of folios at once (aligned),
/// which bounds the locks one reader holds.
const READ_WINDOW: u64 = 64 << 10;
/// Exclusive writes go through the cache in pieces of this size (aligned).
const WRITE_PIECE: u64 = 1 << 20;

impl FsCore {
    /// The smallest folio order that holds whole blocks.
    fn min_folio_order(&self) -> u32 {
        order_for(self.vol.block_size as u64)
    }

    /// Finds or creates the folios covering bytes `[from, to)` in order.
    fn folios_for(&self, st: &FileIo, from: u64, to: u64, order: u32, max_page: u64) -> Result<Vec<Arc<Folio>>> {
        let rw = self.rw()?;
        let (first, last) = (from / PAGE_SIZE, (to - 1) / PAGE_SIZE);
        let min_order = self.min_folio_order();
        let mut out = Vec::new();
        let mut page = first;
        while page <= last {
            let (f, _) = rw.data.pages().get_or_create(&st.data.pages, page, order, min_order, max_page.max(last));
            if f.index < page {
                // Folios taken earlier were dropped from the cache since
                // (truncate, punch, eviction) and a larger one now covers
                // their pages: keep only the current one, so the window's
                // folios never overlap and are locked in strictly
                // increasing index (the lock order).
                out.retain(|o: &Arc<Folio>| o.index + o.pages <= f.index);
            }
            page = f.index + f.pages;
            out.push(f);
        }
        Ok(out)
    }

    /// The size of file `ino` as readers and writers see it: the on-disk
    /// `i_size`, or the end of buffered writes past it that are not
    /// written back yet.
    pub(crate) fn file_size(&self, st: &FileIo, ino: u32) -> Result<u64> {
        // The in-memory size first: writeback raises i_size before it
        // clears the in-memory one, so one of the two is always current.
        let pending = st.data.pages.pending_size();
        let _m = st.map.read();
        Ok(self.regular(ino)?.size.max(pending))
    }

    /// Fills a locked folio from the device: written blocks below the
    /// on-disk EOF as mapped, zeros elsewhere (holes, unwritten extents,
    /// past EOF). It becomes uptodate only if nothing changed the file's
    /// blocks meanwhile.
    fn fill(&self, st: &FileIo, ino: u32, f: &Folio, s: &mut FolioState) -> Result<()> {
        let _inv = st.invalidate.read();
        let gen = st.data.pages.generation.load(Ordering::Acquire);
        let bs = self.vol.block_size as u64;
        let (end, runs) = self.folio_runs(st, ino, f)?;
        s.data.zero_to(f.len() as usize);
        for r in runs.iter().filter(|r| r.written) {
            let a = r.lblk.byte_offset(bs).max(f.start());
            let b = r.end().byte_offset(bs).min(end);
            if a < b {
                let dst = &mut s.data[(a - f.start()) as usize..(b - f.start()) as usize];
                self.vol.device().read_at(dst, r.device_offset(a, bs))?;
            }
        }
        let same = st.data.pages.generation.load(Ordering::Acquire) == gen;
        s.uptodate = same && !f.removed.load(Ordering::Acquire);
        s.runs = runs;
        Ok(())
    }

    /// The allocated runs under folio `f` (all of it, EOF or not) and the
    /// file's EOF clipped to the folio.
    ///
    /// The EOF is the in-memory size (the kernel's i_size), not the
    /// on-disk one (i_disksize): writeback writes and cleans blocks past
    /// the on-disk size before it raises that size, so a folio refilled in
    /// between must read them, or it would show (and a write would store)
    /// zeros inside the file.
    pub(super) fn folio_runs(&self, st: &FileIo, ino: u32, f: &Folio) -> Result<(u64, Vec<BlockRun>)> {
        let bs = self.vol.block_size as u64;
        // Before the inode, as in file_size: writeback raises the on-disk
        // size before it clears the in-memory one.
        let pending = st.data.pages.pending_size();
        let _m = st.map.read();
        let i = self.regular(ino)?;
        let end = i.size.max(pending).clamp(f.start(), f.start() + f.len());
        let maps = self.map_range(&i, f.start(), f.len())?;
        let mut runs = Vec::with_capacity(maps.len());
        for m in &maps {
            let (p, written) = match m.kind {
                MapKind::Mapped(p) => (p, true),
                MapKind::Unwritten(p) => (p, false),
                MapKind::Hole => continue,
            };
            let l0 = m.lblk.max(FileBlock::of_byte(f.start(), bs));
            let l1 = m.end().min(FileBlock((f.start() + f.len()).div_ceil(bs)));
            if l0 < l1 {
                runs.push(BlockRun { lblk: l0, pblk: p + (l0 - m.lblk), len: l1 - l0, written });
            }
        }
        Ok((end, runs))
    }

    /// Buffered read (no inode I/O lock; see the module comment).
    pub(crate) fn read_buffered(&self, ino: u32, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let rw = self.rw()?;
        if let Some(n) = self.read_if_inline(ino, offset, buf)? {
            return Ok(n);
        }
        let st = rw.data.inode(ino);
        // As file_size, keeping what the atime decision needs (a copy:
        // the parsed inode is dropped at once).
        let (size, times) = {
            let pending = st.data.pages.pending_size();
            let _m = st.map.read();
            let i = self.regular(ino)?;
            (i.size.max(pending), AccessTimes::of(&i))
        };
        if offset >= size || buf.is_empty() {
            self.note_access(&st, &times);
            return Ok(0);
        }
        let total = (size - offset).min(buf.len() as u64);
        let end = offset + total;
        let order = st.data.pages.read_order(offset, total);
        let max_page = (size - 1) / PAGE_SIZE;
        let mut pos = offset;
        while pos < end {
            let wend = end.min((pos / READ_WINDOW + 1) * READ_WINDOW);
            let folios = self.folios_for(&st, pos, wend, order, max_page)?;
            let mut guards: Vec<FolioGuard<'_>> = folios.iter().map(|f| f.lock()).collect();
            for (f, g) in folios.iter().zip(guards.iter_mut()) {
                if !g.uptodate {
                    self.fill(&st, ino, f, g)?;
                }
                let a = pos.max(f.start());
                let b = wend.min(f.start() + f.len());
                if a < b {
                    buf[(a - offset) as usize..(b - offset) as usize]
                        .copy_from_slice(&g.data[(a - f.start()) as usize..(b - f.start()) as usize]);
                }
            }
            drop(guards);
            pos = wend;
        }
        self.note_access(&st, &times);
        Ok(total as usize)
    }

    /// A buffered read served only from the page cache: `Ok(None)` (and
    /// nothing read or changed, not even the readahead state) when a page
    /// of the range is not cached and up to date, or when the filesystem
    /// is read-only (no page cache). Lets a caller that must not wait on
    /// the device (an io_uring queue thread) serve hits at once and hand
    /// misses to a thread that may wait. Inline files are read from the
    /// inode, as [`FsCore::read`] does.
    pub fn read_cached(&self, ino: u32, offset: u64, buf: &mut [u8]) -> Result<Option<usize>> {
        let Some(rw) = self.live() else { return Ok(None) };
        if let Some(n) = self.read_if_inline(ino, offset, buf)? {
            return Ok(Some(n));
        }
        let st = rw.data.inode(ino);
        let (size, times) = {
            let pending = st.data.pages.pending_size();
            let _m = st.map.read();
            let i = self.regular(ino)?;
            (i.size.max(pending), AccessTimes::of(&i))
        };
        if offset >= size || buf.is_empty() {
            self.note_access(&st, &times);
            return Ok(Some(0));
        }
        let total = (size - offset).min(buf.len() as u64);
        let end = offset + total;
        let folios = st.data.pages.find_range(offset / PAGE_SIZE, (end - 1) / PAGE_SIZE);
        // The folios must cover the range without a gap (they are in
        // increasing index and do not overlap: the lock order holds).
        let mut next = offset / PAGE_SIZE;
        for f in &folios {
            if f.index > next {
                return Ok(None);
            }
            next = next.max(f.index + f.pages);
        }
        if next <= (end - 1) / PAGE_SIZE {
            return Ok(None);
        }
        let guards: Vec<FolioGuard<'_>> = folios.iter().map(|f| f.lock()).collect();
        if guards.iter().any(|g| !g.uptodate) {
            return Ok(None);
        }
        for (f, g) in folios.iter().zip(guards.iter()) {
            let a = offset.max(f.start());
            let b = end.min(f.start() + f.len());
            if a < b {
                buf[(a - offset) as usize..(b - offset) as usize]
                    .copy_from_slice(&g.data[(a - f.start()) as usize..(b - f.start()) as usize]);
            }
        }
        drop(guards);
        // As the full read would have: keeps sequential readers' windows.
        st.data.pages.read_order(offset, total);
        self.note_access(&st, &times);
        Ok(Some(total as usize))
    }

    /// Buffered write (see the module comment). Returns the bytes written
    /// (short only when the disk fills part-way). `Filesystem::write`
    /// has checked the range.
    pub(crate) fn write_buffered(&self, st: &Arc<FileIo>, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        let rw = self.rw()?;
        if data.is_empty() {
            self.regular(ino)?;
            return Ok(0);
        }
        if let Some(n) = self.write_inline(ino, offset, data)? {
            return Ok(n);
        }
        let len = data.len() as u64;
        let end = offset + len;
        // Past the dirty limit the exclusive path writes back first (a
        // shared write could dirty a clean cached folio).
        if rw.data.config().lock_policy == LockPolicy::Seeds && !self.over_dirty_limit() {
            let shared = st.io.read();
            if let Some(f) = st.data.pages.find(offset / PAGE_SIZE) {
                // A deleted inode's folios are dropped under the exclusive
                // lock; a reader may have filled one since.
                if st.data.deleted.load(Ordering::Acquire) {
                    self.check_live(&self.regular(ino)?)?;
                }
                if end <= f.start() + f.len() && self.try_write_in_folio(st, ino, &f, offset, data)? {
                    IoStats::bump(&rw.data.stats().buffered_write_shared);
                    self.lazy_times(st, ino)?;
                    drop(shared);
                    return Ok(data.len());
                }
            }
            drop(shared);
        }
        let _l = rw.data.locks().lock_exclusive(&[], &[ino]);
        self.check_live(&self.regular(ino)?)?;
        IoStats::bump(&rw.data.stats().buffered_write_exclusive);
        // In aligned pieces, so that a large write never holds (and pins
        // in the cache) more than a piece's folios at once.
        let mut pos = offset;
        while pos < end {
            if self.over_dirty_limit() {
                // Dirty folios cannot be evicted, so a large write would
                // otherwise pin more than the cache's budget: write this
                // file back first. If that fails and the cache stays over
                // the limit (a persistent ENOSPC or EIO), the write fails
                // rather than grow memory without bound.
                // The error belongs to the file's earlier data as well:
                // its next fsync reports it (errseq), whatever this write
                // returns.
                let r = self.writeback_locked(st, ino);
                self.wb_result(ino, true, &r);
                if let Err(e) = r {
                    if self.over_dirty_limit() {
                        if pos > offset {
                            break;
                        }
                        return Err(e);
                    }
                }
            }
            let piece_end = end.min((pos / WRITE_PIECE + 1) * WRITE_PIECE);
            let piece = &data[(pos - offset) as usize..(piece_end - offset) as usize];
            let n = match self.write_piece(st, ino, pos, piece) {
                Ok(n) => n,
                Err(Error::NoSpace(_)) => 0,
                // The earlier pieces landed: a short write (POSIX).
                Err(_) if pos > offset => break,
                Err(e) => return Err(e),
            };
            pos += n as u64;
            if n < piece.len() {
                // No room to reserve blocks for the rest: write it through,
                // allocating now, as ext4 leaves delayed allocation when
                // space runs low; the last free blocks can be used.
                let rest = &data[(pos - offset) as usize..(piece_end - offset) as usize];
                let m = match self.write_through_locked(st, ino, pos, rest) {
                    Ok(m) => m,
                    Err(_) if pos > offset => break,
                    Err(e) => return Err(e),
                };
                pos += m as u64;
                if m < rest.len() {
                    break;
                }
            }
        }
        if pos > offset {
            self.lazy_times(st, ino)?;
        }
        Ok((pos - offset) as usize)
    }

    /// A buffered write without delayed allocation (I/O lock held
    /// exclusively): the file's dirty data is written back, then `data`
    /// goes through the allocating path and the cached folios of its
    /// range are dropped.
    fn write_through_locked(&self, st: &FileIo, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        let r = self.writeback_locked(st, ino);
        self.wb_result(ino, true, &r);
        r?;
        let r = self.write_locked(ino, offset, data, super::write::WriteMode::Direct);
        self.wb_result(ino, true, &Ok(()));
        st.data.pages.invalidate(offset, offset + data.len() as u64);
        r
    }

    /// One piece of an exclusive buffered write: its folios are created
    /// (large enough to hold an aligned write whole), locked, filled where
    /// the write covers them only in part, and dirtied. Stops short at the
    /// first folio whose blocks cannot be reserved.
    fn write_piece(&self, st: &FileIo, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        let len = data.len() as u64;
        let end = offset + len;
        let size = self.file_size(st, ino)?;
        let max_page = (size.max(end) - 1) / PAGE_SIZE;
        let mut folios = self.folios_for(st, offset, end, order_for(len), max_page)?;
        let mut guards: Vec<FolioGuard<'_>>;
        loop {
            guards = folios.iter().map(|f| f.lock()).collect();
            // Eviction may have taken a folio between its lookup and its
            // lock (never after: it skips locked folios); look again. It
            // takes a folio out of the map before unlocking it, so the
            // next lookup finds a new one: no retry limit is needed.
            if !folios.iter().any(|f| f.removed.load(Ordering::Acquire)) {
                break;
            }
            drop(guards);
            folios = self.folios_for(st, offset, end, order_for(len), max_page)?;
        }
        let mut done = offset;
        let mut failed = None;
        for (f, g) in folios.iter().zip(guards.iter_mut()) {
            if !g.uptodate {
                if let Err(e) = self.prepare_for_write(st, ino, f, g, offset, end) {
                    failed = Some(e);
                    break;
                }
            }
            let a = offset.max(f.start());
            let b = end.min(f.start() + f.len());
            if let Err(e) = self.dirty_range(st, ino, f, g, a, b) {
                failed = Some(e);
                break;
            }
            g.data[(a - f.start()) as usize..(b - f.start()) as usize]
                .copy_from_slice(&data[(a - offset) as usize..(b - offset) as usize]);
            done = b;
        }
        if done > offset && done > size {
            st.data.pages.raise_size(done);
        }
        drop(guards);
        match failed {
            Some(e) if done == offset => Err(e),
            _ => Ok((done - offset) as usize),
        }
    }

    /// Makes a locked folio that is not uptodate ready for a write of
    /// `[offset, end)`: zeros and its block map if the write covers it
    /// whole, else its contents from the device. Nothing but eviction
    /// (which skips locked folios) changes the file meanwhile: the caller
    /// holds the I/O lock exclusively.
    fn prepare_for_write(
        &self,
        st: &FileIo,
        ino: u32,
        f: &Folio,
        g: &mut FolioState,
        offset: u64,
        end: u64,
    ) -> Result<()> {
        if offset <= f.start() && f.start() + f.len() <= end {
            g.data.zero_to(f.len() as usize);
            g.runs = self.folio_runs(st, ino, f)?.1;
            g.uptodate = true;
        } else {
            self.fill(st, ino, f, g)?;
        }
        if g.uptodate && !f.removed.load(Ordering::Acquire) {
            Ok(())
        } else {
            Err(Error::Io(std::io::Error::other("page-cache folio removed during a write")))
        }
    }

    /// Marks the blocks of `[a, b)` (inside locked folio `f`) dirty,
    /// first reserving a block for each that becomes dirty and has none
    /// allocated (ENOSPC if there is no room).
    fn dirty_range(&self, st: &FileIo, ino: u32, f: &Folio, g: &mut FolioState, a: u64, b: u64) -> Result<()> {
        let bs = self.vol.block_size as u64;
        let base = f.start() / bs;
        let (first, end) = (a / bs - base, b.div_ceil(bs) - base);
        let allocated = |l: FileBlock| g.runs.iter().any(|r| r.contains(l));
        let mut new = (first..end).filter(|&i| !g.dirty.get(i) && !allocated(FileBlock(base + i))).count() as u64;
        let ratio = 1u64 << self.vol.sb.log_cluster_size.saturating_sub(self.vol.sb.log_block_size);
        if ratio > 1 && new > 0 {
            // Bigalloc: a whole cluster per logical cluster that gets its
            // first dirty block here and has no block in this folio that
            // reserved it already (dirty, not allocated). The kernel
            // reserves per cluster too. Blocks allocated in the cluster do
            // not count: a truncate may free their cluster before this
            // data is written back. A cluster wider than the folio may be
            // reserved more than once until writeback gives it back.
            let nblk = f.len() / bs;
            let owned = |c: u64| {
                (0..nblk).any(|j| (base + j) / ratio == c && g.dirty.get(j) && !allocated(FileBlock(base + j)))
            };
            let mut clusters: Vec<u64> = (first..end)
                .filter(|&i| !g.dirty.get(i) && !allocated(FileBlock(base + i)))
                .map(|i| (base + i) / ratio)
                .collect();
            clusters.dedup();
            new = clusters.into_iter().filter(|&c| !owned(c)).count() as u64 * ratio;
        }
        if new > 0 {
            // This file's data waiting for writeback counts too.
            self.check_buffered_quota(ino, (st.data.pages.reserved_blocks() + new) * bs)?;
            self.reserve_blocks(new)?;
        }
        if st.data.pages.set_dirty(f, g, first, end, bs, g.reserved + new) {
            self.note_inode_dirty(ino);
        }
        Ok(())
    }

    /// Reserves `n` blocks for delayed allocation: they must fit in the
    /// free blocks less root's reserve, what is reserved or claimed
    /// already and the pool kept for the extent blocks writeback may need
    /// ([`crate::txn::writeback_reserve`]).
    fn reserve_blocks(&self, n: u64) -> Result<()> {
        let rw = self.rw()?;
        let alloc = self.allocator()?;
        let sb = &self.vol.sb;
        let root = if rw.txns.use_reserved() { 0 } else { sb.r_blocks_count };
        let keep = root + crate::txn::writeback_reserve(sb);
        if rw.data.pages().delalloc().reserve_space(n, keep, || alloc.free_blocks()) {
            Ok(())
        } else {
            Err(Error::NoSpace("no room to reserve blocks for buffered data".into()))
        }
    }

    /// The shared-lock path: `data` at `offset` lies inside folio `f`.
    /// Returns false (nothing done) when the folio is not uptodate, the
    /// write reaches past EOF, or its blocks cannot be reserved (the
    /// exclusive path then reports the error).
    fn try_write_in_folio(&self, st: &FileIo, ino: u32, f: &Folio, offset: u64, data: &[u8]) -> Result<bool> {
        let end = offset + data.len() as u64;
        if end > self.file_size(st, ino)? {
            return Ok(false);
        }
        let mut g = f.lock();
        if !g.uptodate || f.removed.load(Ordering::Acquire) {
            return Ok(false);
        }
        match self.dirty_range(st, ino, f, &mut g, offset, end) {
            Ok(()) => {}
            Err(Error::NoSpace(_)) => return Ok(false),
            Err(e) => return Err(e),
        }
        let at = (offset - f.start()) as usize;
        g.data[at..at + data.len()].copy_from_slice(data);
        Ok(true)
    }
}
