//! fallocate(2): preallocation, punching holes, zeroing ranges.

use super::namespace::{flags, ftype};
use crate::alloc::flags as aflags;
use crate::error::{Error, Result};
use crate::format::block_number::FileBlock;
use crate::format::inode::{FileType, Inode, Timestamp, FL_EXTENTS};
use crate::fs::FsCore;
use crate::inode::extent_write as ew;
use crate::inode::{self, MapKind};
use crate::txn::Tx;

/// fallocate(2) modes.
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
}

impl FsCore {
    /// fallocate(2).
    pub fn fallocate(&self, ino: u32, mode: FallocMode, offset: u64, len: u64) -> Result<()> {
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
