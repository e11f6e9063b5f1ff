//! Direct I/O: reads and writes that go straight between the caller's
//! buffer and the device, with the locking of ext4's iomap direct-I/O
//! path (seeds 000, 002 and 003).
//!
//! A write first looks at the range under the *shared* I/O lock and the
//! mapping lock ([`crate::data::plan_direct_write`]):
//! - all blocks written -> write them in place, no handle (seed 000; also
//!   sub-block writes, seed 003, since nothing needs zeroing);
//! - all blocks allocated, some unwritten, block-aligned -> write the
//!   data, then convert the unwritten part in a transaction (seed 002);
//!   until that conversion the extents still read as zeros, so no reader
//!   sees the blocks' old contents;
//! - otherwise drop the shared lock, take it exclusively, drain in-flight
//!   direct I/O and use the allocating write path (handle, mballoc, size
//!   update in the same transaction as the mapping; data on the device
//!   before that transaction can commit, so a crash never exposes stale
//!   blocks and no orphan entry is needed).
//!
//! Page cache: a shared-lock write copies its bytes into the uptodate
//! cached folios of its range after the device write and marks them
//! dirty (so they stay coherent, keep their other bytes, and an in-place
//! writeback racing with the write cannot leave older bytes on the
//! device for good); the exclusive path writes
//! the file's dirty folios back first and invalidates the range after.
//! A direct read overlays the uptodate cached folios of its range on
//! what it read from the device, holding their locks, so it sees dirty
//! data and never a torn buffered write.
//!
//! Timestamps: the shared-lock paths update mtime/ctime lazily, at most
//! once per second per inode, in a handle of their own (ext4 does the
//! same through `file_modified` with coarse-grained time).

use super::FsCore;
use crate::data::FileIo;
use crate::data::{plan_direct_write, DirectPlan, IoStats, LockPolicy};
use crate::error::{Error, Result};
use crate::format::block_number::FileBlock;
use crate::format::inode::{FileType, Inode, Timestamp};
use crate::inode::{self as inode_layer, extent_write as ew, MapKind, Mapping};
use std::sync::atomic::Ordering;

impl FsCore {
    /// The blocks of `[off, off + len)` as runs (`len > 0`).
    pub(super) fn map_range(&self, i: &Inode, off: u64, len: u64) -> Result<Vec<Mapping>> {
        let bs = self.vol.block_size as u64;
        let (first, last) = (FileBlock::of_byte(off, bs), FileBlock::of_byte(off + len - 1, bs));
        let mut out = Vec::with_capacity(1);
        let mut lblk = first;
        while lblk <= last {
            let m = inode_layer::map_block(&self.vol, i, lblk)?;
            lblk = m.lblk + m.len.max(1);
            out.push(m);
        }
        Ok(out)
    }

    /// Inode `ino`, checked to be a regular, extent-mapped file.
    pub(super) fn regular(&self, ino: u32) -> Result<Inode> {
        let i = self.inode(ino)?;
        match i.file_type()? {
            FileType::Regular => Ok(i),
            FileType::Directory => Err(Error::IsDir(format!("inode {ino}"))),
            _ => Err(Error::Invalid(format!("inode {ino} is not a regular file"))),
        }
    }

    /// Writes `data` at `offset` with direct I/O (`O_DIRECT`). Returns the
    /// bytes written (short only when the disk fills part-way).
    pub fn write_direct(&self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        self.write_direct_synced(ino, offset, data, false)
    }

    /// [`FsCore::write_direct`] made durable before it returns when
    /// `sync` (O_SYNC or O_DSYNC; see [`FsCore::write_synced`]).
    pub fn write_direct_synced(&self, ino: u32, offset: u64, data: &[u8], sync: bool) -> Result<usize> {
        let data = &data[..self.write_limit(ino, offset, data.len())?];
        // After a journal abort nothing reaches the device, not even an
        // overwrite that needs no handle.
        self.check_not_aborted()?;
        // One lookup of the inode's data-path state for the whole write.
        let st = self.rw()?.data.inode(ino);
        let sync = self.check_write_flags(Some(&st), ino, offset)? || sync || self.sync_writes();
        let r = self.write_retrying(offset, data, true, |o, d| self.write_direct_once(&st, ino, o, d));
        let r = match r {
            // O_SYNC, chattr +S or a sync mount: the allocation and size
            // commit with the write.
            Ok(n) if sync => self.fsync(ino).map(|()| n),
            r => r,
        };
        // Part of the data may be on the device even on failure: the
        // next flush decides whether it is durable.
        if let Some(rw) = self.live() {
            rw.data.errors().note_written(ino);
        }
        r
    }

    fn write_direct_once(&self, st: &std::sync::Arc<FileIo>, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        let rw = self.rw()?;
        if data.is_empty() {
            self.regular(ino)?;
            return Ok(0);
        }
        self.uninline(ino)?;
        let stats = &rw.data.stats();
        let cfg = *rw.data.config();
        let bs = self.vol.block_size as u64;
        let len = data.len() as u64;
        if cfg.lock_policy == LockPolicy::Seeds {
            let shared = st.io.read();
            let (plan, maps) = {
                let _m = st.map.read();
                let i = self.regular(ino)?;
                let maps = if offset + len <= i.size { self.map_range(&i, offset, len)? } else { Vec::new() };
                (plan_direct_write(&cfg, &maps, offset, len, i.size, bs), maps)
            };
            match plan {
                DirectPlan::Overwrite => {
                    let _dio = st.dio_begin();
                    self.dio_write_runs(&maps, offset, data)?;
                    if st.data.pages.write_through(offset, data, bs) {
                        self.note_inode_dirty(ino);
                    }
                    IoStats::bump(&stats.dio_write_shared);
                    IoStats::bump(&stats.dio_overwrite_no_handle);
                    if !offset.is_multiple_of(bs) || !(offset + len).is_multiple_of(bs) {
                        IoStats::bump(&stats.dio_unaligned_shared);
                    }
                    self.lazy_times(st, ino)?;
                    drop(shared);
                    return Ok(data.len());
                }
                DirectPlan::Unwritten => {
                    let _dio = st.dio_begin();
                    let maps = if cfg.dio_unwritten_no_handle {
                        IoStats::bump(&stats.dio_unwritten_no_handle);
                        maps
                    } else {
                        // Before seed 002: a handle maps the range at
                        // submission, under the mapping lock.
                        IoStats::bump(&stats.dio_unwritten_with_handle);
                        let _tx = self.begin(8)?;
                        let _m = st.map.write();
                        let i = self.regular(ino)?;
                        self.map_range(&i, offset, len)?
                    };
                    IoStats::bump(&stats.dio_write_shared);
                    self.dio_write_runs(&maps, offset, data)?;
                    self.convert_at_completion(st, ino, &maps, offset, len)?;
                    if st.data.pages.write_through(offset, data, bs) {
                        self.note_inode_dirty(ino);
                    }
                    self.lazy_times(st, ino)?;
                    drop(shared);
                    return Ok(data.len());
                }
                DirectPlan::Exclusive => drop(shared),
            }
        }
        // Exclusive: nothing else writes this file and no direct I/O is
        // in flight (lock_exclusive drains it).
        let _l = rw.data.locks().lock_exclusive(&[], &[ino]);
        IoStats::bump(&stats.dio_write_exclusive);
        if st.data.pages.is_dirty() {
            // Buffered data goes to its blocks first (the kernel's
            // filemap_write_and_wait_range), so that the size and the
            // map below are the file's.
            self.writeback_locked(st, ino)?;
        }
        let i = self.regular(ino)?;
        self.check_live(&i)?;
        let end = offset + len;
        if end <= i.size {
            let maps = self.map_range(&i, offset, len)?;
            let seeds = crate::data::DataPathConfig { lock_policy: LockPolicy::Seeds, ..cfg };
            let plan = plan_direct_write(&seeds, &maps, offset, len, i.size, bs);
            if plan == DirectPlan::Overwrite
                || (plan == DirectPlan::Unwritten && offset.is_multiple_of(bs) && end.is_multiple_of(bs))
            {
                // Only reachable with LockPolicy::Exclusive: the old way,
                // a handle to map the blocks, then the same I/O.
                drop(self.begin(8)?);
                self.dio_write_runs(&maps, offset, data)?;
                if plan == DirectPlan::Unwritten {
                    self.convert_at_completion(st, ino, &maps, offset, len)?;
                }
                st.data.pages.invalidate(offset, end);
                self.touch_times(ino)?;
                return Ok(data.len());
            }
        }
        let r = self.write_locked(ino, offset, data, super::write::WriteMode::Direct);
        st.data.pages.invalidate(offset, end);
        r
    }

    /// Writes `data` (which starts at file offset `offset`) to the blocks
    /// `maps` say hold it. Every block must be mapped.
    fn dio_write_runs(&self, maps: &[Mapping], offset: u64, data: &[u8]) -> Result<()> {
        let bs = self.vol.block_size as u64;
        let end = offset + data.len() as u64;
        let dev = self.vol.device();
        for m in maps {
            let p = match m.kind {
                MapKind::Mapped(p) | MapKind::Unwritten(p) => p,
                MapKind::Hole => return Err(Error::Invalid("direct write into a hole".into())),
            };
            let s = m.lblk.byte_offset(bs).max(offset);
            let e = m.end().byte_offset(bs).min(end);
            if s >= e {
                continue;
            }
            dev.write_at(
                &data[(s - offset) as usize..(e - offset) as usize],
                p.byte_offset(bs) + (s - m.lblk.byte_offset(bs)),
            )?;
        }
        Ok(())
    }

    /// Marks the unwritten runs among `maps` written, in one transaction
    /// under the exclusive mapping lock (the I/O lock stays shared:
    /// concurrent writers convert their own ranges one after another).
    ///
    /// Only the blocks of `[offset, offset + len)` (block-aligned) are
    /// converted: the runs in `maps` may extend past the write.
    fn convert_at_completion(&self, st: &FileIo, ino: u32, maps: &[Mapping], offset: u64, len: u64) -> Result<()> {
        let bs = self.vol.block_size as u64;
        let (first, end) = (FileBlock::of_byte(offset, bs), FileBlock((offset + len).div_ceil(bs)));
        let todo: Vec<(FileBlock, u64)> = maps
            .iter()
            .filter(|m| matches!(m.kind, MapKind::Unwritten(_)))
            .map(|m| (m.lblk.max(first), m.end().min(end)))
            .filter(|(s, e)| s < e)
            .map(|(s, e)| (s, e - s))
            .collect();
        if todo.is_empty() {
            return Ok(());
        }
        let rw = self.rw()?;
        let mut runs = todo.into_iter().peekable();
        while runs.peek().is_some() {
            // Each run's conversion is one bounded tree change; many runs
            // (a write across a fragmented preallocation) take several
            // handles, each leaving the tree consistent.
            let tx = self.begin(32)?;
            let _m = st.map.write();
            let mut i = self.regular(ino)?;
            let mut first = true;
            while let Some(&(lblk, n)) = runs.peek() {
                if !first && tx.handle.credits_left() < ew::alloc_step_credits(&i) {
                    break;
                }
                ew::mark_written(&tx, &mut i, lblk, n)?;
                runs.next();
                first = false;
            }
            tx.write_inode(&mut i)?;
            tx.settle();
            rw.txns.note_dirty(&[ino], tx.tid());
        }
        IoStats::bump(&rw.data.stats().dio_conversions);
        Ok(())
    }

    /// mtime/ctime after a shared-lock write: at most once per second.
    pub(super) fn lazy_times(&self, st: &FileIo, ino: u32) -> Result<()> {
        // A load first: the common case writes nothing to the shared
        // line, and reads only the coarse clock (a tick behind at worst:
        // the update then comes with a write a few milliseconds later).
        if st.data.time_sec.load(Ordering::Relaxed) == Timestamp::now_coarse().sec {
            return Ok(());
        }
        let now = Timestamp::now();
        if st.data.time_sec.load(Ordering::Relaxed) == now.sec
            || st.data.time_sec.swap(now.sec, Ordering::Relaxed) == now.sec
        {
            return Ok(());
        }
        let rw = self.rw()?;
        IoStats::bump(&rw.data.stats().time_updates);
        let tx = self.begin(2)?;
        let _m = st.map.write();
        let mut i = self.regular(ino)?;
        i.mtime = now;
        i.ctime = now;
        Self::take_atime(st, &mut i);
        tx.write_inode(&mut i)?;
        tx.settle();
        rw.txns.note_dirty(&[ino], tx.tid());
        Ok(())
    }

    /// mtime/ctime now (caller holds the I/O lock exclusively).
    fn touch_times(&self, ino: u32) -> Result<()> {
        let rw = self.rw()?;
        let tx = self.begin(2)?;
        let mut i = self.regular(ino)?;
        let now = Timestamp::now();
        i.mtime = now;
        i.ctime = now;
        if let Some(st) = rw.data.peek(ino) {
            Self::take_atime(&st, &mut i);
        }
        tx.write_inode(&mut i)?;
        tx.settle();
        rw.txns.note_dirty(&[ino], tx.tid());
        Ok(())
    }

    /// Reads with direct I/O: the shared I/O lock (so truncate and punch
    /// cannot free the blocks mid-read), the mapping looked up under the
    /// mapping lock, then device reads holding only the I/O lock; holes
    /// and unwritten extents read as zeros; short at EOF.
    pub fn read_direct(&self, ino: u32, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let Ok(rw) = self.rw() else {
            // Read-only open: nothing changes the file underneath.
            return self.read(ino, offset, buf);
        };
        IoStats::bump(&rw.data.stats().dio_reads);
        self.read_shared(ino, offset, buf)
    }

    /// The body of a read on a writable filesystem (see `read_direct`).
    pub(crate) fn read_shared(&self, ino: u32, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let rw = self.rw()?;
        if let Some(n) = self.read_if_inline(ino, offset, buf)? {
            return Ok(n);
        }
        let st = rw.data.inode(ino);
        let _shared = st.io.read();
        let _dio = st.dio_begin();
        let (total, maps) = {
            let pending = st.data.pages.pending_size();
            let _m = st.map.read();
            let i = self.regular(ino)?;
            // The atime is decided before the read, as the kernel's
            // file_accessed after it: no lock either way.
            self.note_access(&st, &super::atime::AccessTimes::of(&i));
            let size = i.size.max(pending);
            if offset >= size || buf.is_empty() {
                return Ok(0);
            }
            let total = (size - offset).min(buf.len() as u64);
            (total, self.map_range(&i, offset, total)?)
        };
        let bs = self.vol.block_size as u64;
        let end = offset + total;
        // Buffered writes land in folios (under the shared I/O lock, for
        // those inside one folio): hold the locks of the cached folios of
        // the range while reading, and take the uptodate ones' bytes over
        // the device's, so a direct read sees dirty data, and a buffered
        // write whole or not at all.
        use crate::data::page_cache::PAGE_SIZE;
        let folios = st.data.pages.find_range(offset / PAGE_SIZE, (end - 1) / PAGE_SIZE);
        let held: Vec<_> = folios.iter().map(|f| f.lock()).collect();
        for m in &maps {
            let s = m.lblk.byte_offset(bs).max(offset);
            let e = m.end().byte_offset(bs).min(end);
            if s >= e {
                continue;
            }
            let dst = &mut buf[(s - offset) as usize..(e - offset) as usize];
            match m.kind {
                MapKind::Mapped(p) => {
                    self.vol.device().read_at(dst, p.byte_offset(bs) + (s - m.lblk.byte_offset(bs)))?
                }
                MapKind::Unwritten(_) | MapKind::Hole => dst.fill(0),
            }
        }
        for (f, g) in folios.iter().zip(held.iter()) {
            let (a, b) = (offset.max(f.start()), end.min(f.start() + f.len()));
            if g.uptodate && !f.removed.load(Ordering::Acquire) && a < b {
                buf[(a - offset) as usize..(b - offset) as usize]
                    .copy_from_slice(&g.data[(a - f.start()) as usize..(b - f.start()) as usize]);
            }
        }
        Ok(total as usize)
    }
}
