//! Buffered I/O through the page cache (seed 001).
//!
//! - **Reads take no inode I/O lock.** They work in 64 KiB-aligned
//!   windows: every folio of the window is found or created, all are
//!   locked in index order, missing contents are filled from the device
//!   (under the invalidate lock, shared), and the bytes are copied out.
//! - **A write that lies inside one cached folio** whose blocks are all
//!   written and inside EOF takes the I/O lock *shared* and the folio
//!   lock, copies in and writes the bytes through to their blocks; no
//!   handle (lazy mtime aside).
//! - **Any other write** takes the I/O lock exclusively, creates (large
//!   enough: an aligned 8 KiB write gets one 8 KiB folio) and locks the
//!   folios of its range, writes through the allocating path, and updates
//!   the folios before unlocking them.
//!
//! Because a writer holds the locks of every folio of its range while the
//! bytes reach the device, and a reader fills and copies a window with
//! all its folios locked, a reader sees an aligned write of up to 64 KiB
//! either entirely or not at all; overlapping writes are serialized by
//! the folio locks (shared path) or the exclusive I/O lock.

use super::Filesystem;
use crate::data::page_cache::{order_for, BlockRun, Folio, FolioState, PAGE_SIZE};
use crate::data::{IoStats, LockPolicy};
use crate::error::Result;
use crate::inode::MapKind;
use crate::locks::InodeIo;
use parking_lot::MutexGuard;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Reads copy out of at most this many bytes of folios at once (aligned),
/// which bounds the locks one reader holds.
const READ_WINDOW: u64 = 64 << 10;
/// Exclusive writes go through the cache in pieces of this size (aligned).
const WRITE_PIECE: u64 = 1 << 20;

impl Filesystem {
    /// Finds or creates the folios covering bytes `[from, to)` in order.
    fn folios_for(&self, st: &InodeIo, from: u64, to: u64, order: u32, max_page: u64) -> Result<Vec<Arc<Folio>>> {
        let rw = self.rw()?;
        let (first, last) = (from / PAGE_SIZE, (to - 1) / PAGE_SIZE);
        let mut out = Vec::new();
        let mut page = first;
        while page <= last {
            let (f, _) = rw.pages.get_or_create(&st.pages, page, order, max_page.max(last));
            page = f.index + f.pages;
            out.push(f);
        }
        Ok(out)
    }

    /// Fills a locked folio from the device: blocks below EOF as mapped
    /// (holes and unwritten extents as zeros), zeros past EOF. It becomes
    /// uptodate only if nothing changed the file's blocks meanwhile.
    fn fill(&self, st: &InodeIo, ino: u32, f: &Folio, s: &mut FolioState) -> Result<()> {
        let _inv = st.invalidate.read();
        let gen = st.pages.generation.load(Ordering::Acquire);
        let bs = self.vol.block_size as u64;
        let (end, runs, mapped) = self.folio_runs(st, ino, f)?;
        s.data.clear();
        s.data.resize(f.len() as usize, 0);
        for &(l, p, n) in &runs {
            let a = (l * bs).max(f.start());
            let b = ((l + n) * bs).min(end);
            if a < b {
                let dst = &mut s.data[(a - f.start()) as usize..(b - f.start()) as usize];
                self.vol.device().read_at(dst, p * bs + (a - l * bs))?;
            }
        }
        let same = st.pages.generation.load(Ordering::Acquire) == gen;
        s.uptodate = same && !f.removed.load(Ordering::Acquire);
        s.mapped = s.uptodate && mapped;
        s.runs = runs;
        Ok(())
    }

    /// The written runs under folio `f` below EOF: (EOF within the
    /// folio's range, runs, whether every block below EOF is written).
    fn folio_runs(&self, st: &InodeIo, ino: u32, f: &Folio) -> Result<(u64, Vec<BlockRun>, bool)> {
        let bs = self.vol.block_size as u64;
        let _m = st.map.read();
        let i = self.regular(ino)?;
        let end = i.size.min(f.start() + f.len());
        let covered = i.size.saturating_sub(f.start()).min(f.len());
        let maps = if covered > 0 { self.map_range(&i, f.start(), covered)? } else { Vec::new() };
        let mut mapped = true;
        let mut runs = Vec::with_capacity(maps.len());
        for m in &maps {
            let a = (m.lblk * bs).max(f.start());
            let b = ((m.lblk + m.len) * bs).min(end);
            if a >= b {
                continue;
            }
            match m.kind {
                MapKind::Mapped(p) => {
                    let l0 = a / bs;
                    runs.push((l0, p + (l0 - m.lblk), b.div_ceil(bs) - l0));
                }
                MapKind::Unwritten(_) | MapKind::Hole => mapped = false,
            }
        }
        Ok((end, runs, mapped))
    }

    /// Buffered read (no inode I/O lock; see the module comment).
    pub(crate) fn read_buffered(&self, ino: u32, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let rw = self.rw()?;
        let st = rw.locks.inode(ino);
        let size = {
            let _m = st.map.read();
            self.regular(ino)?.size
        };
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let total = (size - offset).min(buf.len() as u64);
        let end = offset + total;
        let order = st.pages.read_order(offset, total);
        let max_page = (size - 1) / PAGE_SIZE;
        let mut pos = offset;
        while pos < end {
            let wend = end.min((pos / READ_WINDOW + 1) * READ_WINDOW);
            let folios = self.folios_for(&st, pos, wend, order, max_page)?;
            let mut guards: Vec<MutexGuard<'_, FolioState>> = folios.iter().map(|f| f.lock()).collect();
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
        Ok(total as usize)
    }

    /// Buffered write (see the module comment). Returns the bytes written
    /// (short only when the disk fills part-way). `Filesystem::write`
    /// has checked the range.
    pub(crate) fn write_buffered(&self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        let rw = self.rw()?;
        if data.is_empty() {
            self.regular(ino)?;
            return Ok(0);
        }
        let st = rw.locks.inode(ino);
        let len = data.len() as u64;
        let end = offset + len;
        if rw.data.lock_policy == LockPolicy::Seeds {
            let shared = st.io.read();
            if let Some(f) = st.pages.find(offset / PAGE_SIZE) {
                if end <= f.start() + f.len() && self.try_write_in_folio(&st, ino, &f, offset, data)? {
                    IoStats::bump(&rw.stats.buffered_write_shared);
                    self.lazy_times(&st, ino)?;
                    drop(shared);
                    return Ok(data.len());
                }
            }
            drop(shared);
        }
        let _l = rw.locks.lock_exclusive(&[], &[ino]);
        IoStats::bump(&rw.stats.buffered_write_exclusive);
        // In aligned pieces, so that a large write never holds (and pins
        // in the cache) more than a piece's folios at once.
        let mut pos = offset;
        while pos < end {
            let piece_end = end.min((pos / WRITE_PIECE + 1) * WRITE_PIECE);
            let piece = &data[(pos - offset) as usize..(piece_end - offset) as usize];
            let n = match self.write_piece(&st, ino, pos, piece) {
                Ok(n) => n,
                // The earlier pieces landed: a short write (POSIX).
                Err(_) if pos > offset => break,
                Err(e) => return Err(e),
            };
            pos += n as u64;
            if n < piece.len() {
                break;
            }
        }
        Ok((pos - offset) as usize)
    }

    /// One piece of an exclusive buffered write: its folios are created
    /// (large enough to hold an aligned write whole) and locked, the data
    /// goes through the allocating path, then into the folios.
    fn write_piece(&self, st: &InodeIo, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        let len = data.len() as u64;
        let end = offset + len;
        let size = self.regular(ino)?.size;
        let max_page = (size.max(end) - 1) / PAGE_SIZE;
        let folios = self.folios_for(st, offset, end, order_for(len), max_page)?;
        let mut guards: Vec<MutexGuard<'_, FolioState>> = folios.iter().map(|f| f.lock()).collect();
        let written = self.write_locked(ino, offset, data);
        // Update the folios before their locks go. After a complete write
        // an uptodate folio, or one the write covers whole, gets the new
        // bytes (and its runs looked up again: blocks may be new); any
        // other is left for the next reader to fill from the device, which
        // now holds whatever part of the write landed.
        let full = matches!(written, Ok(n) if n == data.len());
        for (f, g) in folios.iter().zip(guards.iter_mut()) {
            let whole = offset <= f.start() && f.start() + f.len() <= end;
            if !full || !(g.uptodate || whole) {
                g.uptodate = false;
                g.mapped = false;
                continue;
            }
            if !g.uptodate {
                g.data.clear();
                g.data.resize(f.len() as usize, 0);
            }
            let a = offset.max(f.start());
            let b = end.min(f.start() + f.len());
            g.data[(a - f.start()) as usize..(b - f.start()) as usize]
                .copy_from_slice(&data[(a - offset) as usize..(b - offset) as usize]);
            let (_, runs, mapped) = self.folio_runs(st, ino, f)?;
            g.uptodate = !f.removed.load(Ordering::Acquire);
            g.mapped = g.uptodate && mapped;
            g.runs = runs;
        }
        drop(guards);
        written
    }

    /// The shared-lock path: `data` at `offset` lies inside folio `f`.
    /// Returns false (nothing done) when the folio is not uptodate or not
    /// entirely written blocks, or the write reaches past EOF.
    fn try_write_in_folio(&self, st: &InodeIo, ino: u32, f: &Folio, offset: u64, data: &[u8]) -> Result<bool> {
        let end = offset + data.len() as u64;
        let size = {
            let _m = st.map.read();
            self.regular(ino)?.size
        };
        if end > size {
            return Ok(false);
        }
        let mut g = f.lock();
        if !g.uptodate || !g.mapped || f.removed.load(Ordering::Acquire) {
            return Ok(false);
        }
        let bs = self.vol.block_size as u64;
        // Every byte must lie in a recorded run (the folio may end at EOF).
        let covered = |a: u64, b: u64| {
            let mut pos = a;
            for &(l, _, n) in &g.runs {
                if l * bs <= pos && pos < (l + n) * bs {
                    pos = (l + n) * bs;
                }
            }
            pos >= b
        };
        if !covered(offset, end) {
            return Ok(false);
        }
        let at = (offset - f.start()) as usize;
        g.data[at..at + data.len()].copy_from_slice(data);
        for &(l, p, n) in &g.runs {
            let a = (l * bs).max(offset);
            let b = ((l + n) * bs).min(end);
            if a < b {
                self.vol
                    .device()
                    .write_at(&data[(a - offset) as usize..(b - offset) as usize], p * bs + (a - l * bs))?;
            }
        }
        Ok(true)
    }
}
