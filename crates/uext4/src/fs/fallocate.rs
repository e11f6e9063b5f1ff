//! fallocate(2): preallocation, punching holes, zeroing ranges, and
//! collapsing or inserting a range (the extents after it move, as ext4's
//! ext4_collapse_range and ext4_insert_range).

use super::namespace::{flags, ftype};
use crate::alloc::flags as aflags;
use crate::error::{Error, Result};
use crate::format::block_number::FileBlock;
use crate::format::inode::{FileType, Inode, Timestamp, FL_EXTENTS};
use crate::fs::FsCore;
use crate::inode::extent_write as ew;
use crate::inode::{self, MapKind};
use crate::txn::Tx;

/// fallocate(2) modes: what [`FsCore::fallocate`](crate::FsCore::fallocate)
/// does to the range it is given. Front ends map the `FALLOC_FL_*` flags
/// they receive onto one of these (combinations without a variant are
/// not supported).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallocMode {
    /// Allocate (unwritten) and extend the size.
    Allocate,
    /// Allocate without changing the size.
    KeepSize,
    /// Deallocate the range (size unchanged).
    PunchHole,
    /// Make the range read as zeros (allocated, unwritten).
    ZeroRange,
    /// Remove the range: what follows moves down, the size shrinks by
    /// its length (FALLOC_FL_COLLAPSE_RANGE). Offset and length must be
    /// multiples of the cluster size (the block size without bigalloc)
    /// and the range must end before the end of the file (else EINVAL);
    /// EOPNOTSUPP on a block-mapped file.
    CollapseRange,
    /// Insert a hole of the range's length at its offset: what follows
    /// moves up, the size grows by the length (FALLOC_FL_INSERT_RANGE).
    /// Alignment as [`FallocMode::CollapseRange`]; the offset must lie
    /// before the end of the file (else EINVAL), the new size within the
    /// largest file (else EFBIG).
    InsertRange,
}

impl FsCore {
    /// fallocate(2). On a `sync` mount the change is durable on return
    /// (ext4's IS_SYNC handles of punch, collapse and insert).
    pub fn fallocate(&self, ino: u32, mode: FallocMode, offset: u64, len: u64) -> Result<()> {
        self.attrs_synced(ino, self.fallocate_inner(ino, mode, offset, len))
    }

    fn fallocate_inner(&self, ino: u32, mode: FallocMode, offset: u64, len: u64) -> Result<()> {
        if matches!(mode, FallocMode::CollapseRange | FallocMode::InsertRange) {
            return self.shift_range(ino, mode == FallocMode::InsertRange, offset, len);
        }
        if mode == FallocMode::PunchHole {
            return self.fallocate_once(ino, mode, offset, len);
        }
        // Allocating again fills only what is still a hole: safe to repeat.
        self.retry_nospc(|| self.fallocate_once(ino, mode, offset, len))
    }

    fn fallocate_once(&self, ino: u32, mode: FallocMode, offset: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Err(Error::Invalid("fallocate of length 0".into()));
        }
        // Block-mapped files only have holes punched (checked below).
        self.check_offset(offset, len, true)?;
        let rw = self.rw()?;
        let _l = rw.data.locks().lock_exclusive(&[], &[ino]);
        self.uninline_locked(ino)?;
        let st = rw.data.inode(ino);
        if st.data.pages.is_dirty() {
            // fallocate works on the blocks: dirty data goes to them first.
            self.writeback_locked(&st, ino)?;
        }
        let mut i = self.load(ino)?;
        self.check_live(&i)?;
        // vfs_fallocate: nothing on an immutable file; on an append-only
        // one only allocation (no punch or zeroing).
        flags::check_mutable(&i)?;
        if !matches!(mode, FallocMode::Allocate | FallocMode::KeepSize) {
            flags::check_unpinned(&i)?;
        }
        if ftype(&i)? != FileType::Regular {
            return Err(Error::Invalid(format!("fallocate on inode {ino}, not a regular file")));
        }
        // As ext4_fallocate: block-mapped files have no unwritten state,
        // so only punching a hole works on them.
        if i.flags & FL_EXTENTS == 0 && mode != FallocMode::PunchHole {
            return Err(Error::Unsupported(
                "fallocate other than punch hole on block-mapped (non-extent) files".into(),
            ));
        }
        let end = offset + len;
        // Punch and zero free blocks: no folio fill may read them meanwhile.
        let frees = matches!(mode, FallocMode::PunchHole | FallocMode::ZeroRange);
        let _inv = frees.then(|| st.invalidate.write());
        if frees {
            let _m = st.map.write();
            st.data.pages.invalidate(offset, end);
        }
        let bs = self.vol.block_size as u64;
        // Whole blocks inside a punched or zeroed range go; partial edges
        // are zeroed.
        let (b0, b1) = (FileBlock(offset.div_ceil(bs)), FileBlock::of_byte(end, bs));
        if frees {
            if b0 > b1 {
                // Strictly inside one block.
                self.zero_partial(&i, offset, end)?;
            } else {
                self.zero_partial(&i, offset, b0.byte_offset(bs))?;
                self.zero_partial(&i, b1.byte_offset(bs), end)?;
            }
        }
        // Each phase runs in as many bounded handles as it needs; the
        // file is consistent (and its size unchanged) between them. On an
        // error (ENOSPC part-way) what was done stays, as in Linux; the
        // inode is written in any case (its extent root may have changed).
        let alloc = |tx: &Tx, i: &mut Inode, from: FileBlock, to: FileBlock, hint: u64| -> Result<bool> {
            ew::allocate_range(tx, i, from, to - from, true, aflags::STREAM, hint)?;
            Ok(tx.handle.credits_left() >= ew::alloc_step_credits(i))
        };
        match mode {
            FallocMode::Allocate | FallocMode::KeepSize => {
                self.in_bounded_handles(&st, &mut i, |tx, i| {
                    alloc(tx, i, FileBlock::of_byte(offset, bs), FileBlock(end.div_ceil(bs)), end)
                })?;
            }
            FallocMode::PunchHole | FallocMode::ZeroRange if b1 > b0 => {
                self.in_bounded_handles(&st, &mut i, |tx, i| ew::remove_range_bounded(tx, i, b0, b1))?;
                if mode == FallocMode::ZeroRange {
                    let hint = i.size.max(end);
                    self.in_bounded_handles(&st, &mut i, |tx, i| alloc(tx, i, b0, b1, hint))?;
                }
            }
            FallocMode::CollapseRange | FallocMode::InsertRange => {
                return Err(Error::Invalid("collapse and insert range move extents (shift_range)".into()));
            }
            _ => {}
        }
        let grows = matches!(mode, FallocMode::Allocate | FallocMode::ZeroRange) && end > i.size;
        let tx = self.begin(1)?;
        let _m = st.map.write();
        if grows {
            i.size = end;
        }
        let now = Timestamp::now();
        i.ctime = now;
        i.mtime = now;
        tx.write_inode(&mut i)?;
        self.note_tid(&tx, &[ino]);
        Ok(())
    }

    /// FALLOC_FL_COLLAPSE_RANGE (`insert` false) and
    /// FALLOC_FL_INSERT_RANGE, as ext4: the checks of ext4_collapse_range
    /// and ext4_insert_range in their order, the file's dirty data written
    /// back and its cached pages from `offset` on dropped (the kernel's
    /// filemap_write_and_wait_range and truncate_pagecache), then bounded
    /// handles: a collapse unmaps the range, moves the extents after it
    /// down and shrinks the size last; an insert grows the size first and
    /// moves the extents up, highest first. Between handles the image is
    /// consistent (a crash leaves some extents moved, as in ext4, whose
    /// shift restarts its handle too).
    fn shift_range(&self, ino: u32, insert: bool, offset: u64, len: u64) -> Result<()> {
        let what = if insert { "insert range" } else { "collapse range" };
        if len == 0 {
            return Err(Error::Invalid(format!("{what} of length 0")));
        }
        let bs = self.vol.block_size as u64;
        let unit = self.vol.sb.cluster_size().max(bs);
        if !offset.is_multiple_of(unit) || !len.is_multiple_of(unit) {
            return Err(Error::Invalid(format!("{what}: offset {offset} or length {len} not a multiple of {unit}")));
        }
        self.check_offset(offset, len, true)?;
        let rw = self.rw()?;
        let _l = rw.data.locks().lock_exclusive(&[], &[ino]);
        self.uninline_locked(ino)?;
        let st = rw.data.inode(ino);
        if st.data.pages.is_dirty() {
            self.writeback_locked(&st, ino)?;
        }
        let mut i = self.load(ino)?;
        self.check_live(&i)?;
        flags::check_mutable(&i)?;
        flags::check_unpinned(&i)?;
        if ftype(&i)? != FileType::Regular {
            return Err(Error::Invalid(format!("{what} on inode {ino}, not a regular file")));
        }
        let end = offset + len;
        if !insert && end >= i.size {
            return Err(Error::Invalid(format!("collapse range [{offset}, {end}) reaches the end of the file")));
        }
        if insert {
            if offset >= i.size {
                return Err(Error::Invalid(format!("insert range at {offset}, at or past the end of the file")));
            }
            let max = self.vol.sb.max_file_size(true);
            if len > max.saturating_sub(i.size) {
                return Err(Error::FileTooBig(format!("insert range of {len} bytes past the largest file")));
            }
        }
        if i.flags & FL_EXTENTS == 0 {
            return Err(Error::Unsupported(format!("{what} on a block-mapped (non-extent) file")));
        }
        // Every cached page from the offset on moves or goes: none may be
        // filled from the blocks while they move.
        let _inv = st.invalidate.write();
        {
            let _m = st.map.write();
            st.data.pages.invalidate(offset, u64::MAX);
        }
        let (b0, n) = (FileBlock(offset / bs), len / bs);
        let now = Timestamp::now();
        if insert {
            let tx = self.begin(1)?;
            let _m = st.map.write();
            i.size += len;
            i.ctime = now;
            i.mtime = now;
            tx.write_inode(&mut i)?;
            self.note_tid(&tx, &[ino]);
        } else {
            self.in_bounded_handles(&st, &mut i, |tx, i| ew::remove_range_bounded(tx, i, b0, b0 + n))?;
        }
        let mut shift = ew::Shift::new(if insert { b0 } else { b0 + n }, n, !insert);
        self.in_bounded_handles(&st, &mut i, |tx, i| ew::shift_bounded(tx, i, &mut shift))?;
        if !insert {
            let tx = self.begin(1)?;
            let _m = st.map.write();
            i.size -= len;
            i.ctime = now;
            i.mtime = now;
            tx.write_inode(&mut i)?;
            self.note_tid(&tx, &[ino]);
        }
        Ok(())
    }

    /// Runs `step` in handles of 256 credits, with the mapping lock, until
    /// it says it is done; the inode is written at the end of each handle
    /// (also when the step fails).
    fn in_bounded_handles(
        &self,
        st: &crate::data::FileIo,
        i: &mut Inode,
        mut step: impl FnMut(&Tx, &mut Inode) -> Result<bool>,
    ) -> Result<()> {
        loop {
            let tx = self.begin(256)?;
            let _m = st.map.write();
            let r = step(&tx, i);
            tx.write_inode(i)?;
            self.note_tid(&tx, &[i.ino]);
            // ENOSPC part-way leaves a consistent file (what was done
            // stays, as in Linux); any other failure aborts (see `Tx`).
            tx.settle_unless_broken(r.as_ref().err());
            match r {
                Ok(true) => return Ok(()),
                Ok(false) if tx.handle.credits_left() == tx.handle.credits() => {
                    return Err(Error::Invalid(format!("inode {}: a step does not fit in a handle", i.ino)));
                }
                Ok(false) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes zeros over the written blocks of `[from, to)` (partial-block
    /// edges of a punch or zero range).
    pub(in crate::fs) fn zero_partial(&self, i: &Inode, from: u64, to: u64) -> Result<()> {
        let bs = self.vol.block_size as u64;
        let mut pos = from;
        while pos < to {
            let lblk = FileBlock::of_byte(pos, bs);
            let m = inode::map_block(&self.vol, i, lblk)?;
            let run_end = (lblk + m.len).byte_offset(bs).min(to);
            if let MapKind::Mapped(p) = m.kind {
                let zeros = vec![0u8; (run_end - pos) as usize];
                self.vol.device().write_at(&zeros, p.byte_offset(bs) + (pos - lblk.byte_offset(bs)))?;
            }
            pos = run_end;
        }
        Ok(())
    }
}
