//! The allocating write path: writes that need blocks mapped (holes,
//! growth past the end of the file) and the writeback of delayed
//! allocations, in chunks of bounded journal handles; and shrinking.

use super::namespace::ftype;
use crate::alloc::flags as aflags;
use crate::error::{Error, Result};
use crate::format::block_number::{FileBlock, PhysicalBlock};
use crate::format::inode::{FileType, Inode, Timestamp, FL_EXTENTS};
use crate::fs::FsCore;
use crate::inode::extent_write as ew;
use crate::inode::{self, MapKind};
use crate::txn::Tx;

/// Blocks allocated and written per journal handle by a large write.
const WRITE_CHUNK_BLOCKS: u64 = 8192;

/// Who calls the allocating write path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteMode {
    /// A direct write: mtime and ctime are set.
    Direct,
    /// Writeback of dirty folios: times were set by the writes; the
    /// blocks reserved for the data may be allocated; `size_hint` is the
    /// file's in-memory size (for the allocator's goal and flags).
    Writeback { size_hint: u64 },
}

/// A size every file of every ext4 may reach: below the smallest
/// [`crate::format::superblock::Superblock::max_file_size`] (block-mapped
/// files with 1 KiB blocks, 16.06 GiB; see the test below).
const ALWAYS_WRITABLE: u64 = 16 << 30;

impl FsCore {
    /// EFBIG unless `offset + len` stays within the largest size of an
    /// extent-mapped (`extents`) or block-mapped file.
    pub(crate) fn check_offset(&self, offset: u64, len: u64, extents: bool) -> Result<()> {
        let end = offset.checked_add(len).ok_or_else(|| Error::FileTooBig("offset overflows".into()))?;
        let max = self.vol.sb.max_file_size(extents);
        if end > max {
            return Err(Error::FileTooBig(format!("offset {end} beyond the largest file ({max} bytes)")));
        }
        Ok(())
    }

    /// How much of a write of `len` bytes at `offset` fits below the
    /// largest file size: as the kernel's generic_write_checks, a write
    /// that starts below it is cut short there, one that starts at or past
    /// it fails with EFBIG. The limit is inode `ino`'s: smaller for a
    /// block-mapped file than for an extent-mapped one.
    pub(crate) fn write_limit(&self, ino: u32, offset: u64, len: usize) -> Result<usize> {
        let sb = &self.vol.sb;
        // Below both limits no inode is needed. Every file may reach
        // 16 GiB (the smallest limit: block-mapped with 1 KiB blocks,
        // just above it), which spares most writes the computation.
        let end = offset.saturating_add(len as u64);
        let small = end <= ALWAYS_WRITABLE || end <= sb.max_file_size(false).min(sb.max_file_size(true));
        let max = if small { u64::MAX } else { sb.max_file_size(self.load(ino)?.flags & FL_EXTENTS != 0) };
        if len == 0 {
            return Ok(0);
        }
        if offset >= max {
            return Err(Error::FileTooBig(format!("offset {offset} at or beyond the largest file ({max} bytes)")));
        }
        Ok(usize::try_from(max - offset).map_or(len, |room| len.min(room)))
    }

    /// Frees the blocks past `size` (as many as the handle's credits
    /// allow: false when some are left) and zeroes the tail of the last
    /// block.
    pub(in crate::fs) fn shrink(&self, tx: &Tx, i: &mut Inode, size: u64) -> Result<bool> {
        if i.has_inline_data() {
            // i_block holds data, not a map (see inode::indirect_write).
            return Err(Error::Unsupported("truncating files with inline data".into()));
        }
        let bs = self.vol.block_size as u64;
        let keep = FileBlock(size.div_ceil(bs));
        let done = self.free_blocks_bounded(tx, i, keep)?;
        let within = size % bs;
        if within != 0 {
            if let MapKind::Mapped(p) = inode::map_block(&self.vol, i, FileBlock::of_byte(size, bs))?.kind {
                let zeros = vec![0u8; (bs - within) as usize];
                self.vol.device().write_at(&zeros, p.byte_offset(bs) + within)?;
            }
        }
        Ok(done)
    }

    /// Writes `data` at `offset` through the page cache (buffered: the
    /// data is in dirty folios when this returns, its blocks reserved;
    /// writeback allocates them and writes it, see fs/writeback.rs).
    pub fn write(&self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        self.write_synced(ino, offset, data, false)
    }

    /// [`FsCore::write`] made durable before it returns when `sync` (the
    /// caller's O_SYNC or O_DSYNC), as it always is for a `chattr +S`
    /// file and on a `sync` mount: the data written back and the
    /// transaction that last changed the inode committed, as by
    /// [`FsCore::fsync`] (which does what fdatasync needs and more).
    pub fn write_synced(&self, ino: u32, offset: u64, data: &[u8], sync: bool) -> Result<usize> {
        let data = &data[..self.write_limit(ino, offset, data.len())?];
        self.check_not_aborted()?;
        // One lookup of the inode's data-path state for the whole write.
        let st = self.rw()?.data.inode(ino);
        let sync = self.check_write_flags(Some(&st), ino, offset)? || sync || self.sync_writes();
        let n = self.write_retrying(offset, data, true, |o, d| self.write_buffered(&st, ino, o, d))?;
        if sync {
            // O_SYNC, chattr +S or a sync mount: the write is durable
            // before it returns (the kernel's generic_write_sync).
            self.fsync(ino)?;
            return Ok(n);
        }
        // The write is done; a writeback error is reported by fsync.
        let _ = self.balance_dirty(ino);
        Ok(n)
    }

    /// The allocating write path, with the inode's I/O lock held
    /// exclusively and its direct I/O drained (direct writes that
    /// allocate, and writeback).
    ///
    /// The mapping lock is held (exclusively) per chunk, across the
    /// allocation and the data writes: buffered readers hold no I/O lock
    /// and must never walk a half-changed tree or read new blocks before
    /// their data is there. (Allocating unwritten extents first and
    /// writing outside the lock is the kernel's better way; to do.)
    /// The range is checked by the public entry points.
    pub(crate) fn write_locked(&self, ino: u32, offset: u64, data: &[u8], mode: WriteMode) -> Result<usize> {
        let (writeback, hint) = match mode {
            WriteMode::Direct => (false, 0),
            WriteMode::Writeback { size_hint } => (true, size_hint),
        };
        let st = self.rw()?.data.inode(ino);
        let mut i = self.load(ino)?;
        match ftype(&i)? {
            FileType::Regular => {}
            FileType::Directory => return Err(Error::IsDir(format!("inode {ino}"))),
            _ => return Err(Error::Invalid(format!("write to inode {ino}, not a regular file"))),
        }
        if i.has_inline_data() {
            return Err(Error::Unsupported("writing files with inline data".into()));
        }
        if data.is_empty() {
            return Ok(0);
        }
        let bs = self.vol.block_size as u64;
        let end = offset + data.len() as u64;
        let mut pos = offset;
        while pos < end {
            let chunk_end = end.min((pos / bs + WRITE_CHUNK_BLOCKS) * bs);
            let tx = self.begin_tx(256, writeback)?;
            let _m = st.map.write();
            let chunk = &data[(pos - offset) as usize..(chunk_end - offset) as usize];
            let written = self.write_chunk(&tx, &mut i, pos, chunk, hint);
            if let Err((done, e, consistent)) = written {
                // The runs before the failing one landed: a short write.
                // Blocks this chunk mapped past the new EOF hold data no
                // size covers: unmap them (the kernel's truncate of a
                // failed write). The inode is written in any case: the
                // chunk may have changed its extent root.
                let landed = pos + done;
                if landed > pos && landed > i.size {
                    i.size = landed;
                }
                if landed > pos && !writeback {
                    let now = Timestamp::now();
                    i.mtime = now;
                    i.ctime = now;
                }
                let eof = FileBlock(i.size.div_ceil(bs));
                let end_blk = FileBlock(chunk_end.div_ceil(bs));
                if end_blk > eof {
                    ew::remove_range(&tx, &mut i, eof.max(FileBlock::of_byte(pos, bs)), end_blk)?;
                }
                tx.write_inode(&mut i)?;
                self.note_tid(&tx, &[ino]);
                if !consistent {
                    // The failing run stopped half-way through a metadata
                    // change: only ENOSPC stops cleanly there, anything
                    // else must not commit (see `Tx`).
                    tx.settle_unless_broken(Some(&e));
                }
                return if landed > offset { Ok((landed - offset) as usize) } else { Err(e) };
            }
            // The handle's credits may have ended the chunk early: the
            // rest goes on in the next handle.
            let chunk_end = pos + written.unwrap_or(0);
            if chunk_end > i.size {
                i.size = chunk_end;
            }
            if !writeback {
                // Writeback's data was timestamped when it was written.
                let now = Timestamp::now();
                i.mtime = now;
                i.ctime = now;
            }
            tx.write_inode(&mut i)?;
            self.note_tid(&tx, &[ino]);
            pos = chunk_end;
        }
        Ok(data.len())
    }

    /// Writes `data` at `offset` run by run, as far as the handle's
    /// credits allow (at least the first run): returns how many bytes of
    /// `data` were written. On an error, returns how many bytes landed
    /// (the runs before the failing one) with it.
    fn write_chunk(
        &self,
        tx: &Tx,
        i: &mut Inode,
        offset: u64,
        data: &[u8],
        hint: u64,
    ) -> std::result::Result<u64, (u64, Error, bool)> {
        let bs = self.vol.block_size as u64;
        let last = FileBlock::of_byte(offset + data.len() as u64 - 1, bs);
        let mut lblk = FileBlock::of_byte(offset, bs);
        while lblk <= last {
            let done = lblk.byte_offset(bs).max(offset) - offset;
            if done > 0 && tx.handle.credits_left() < ew::alloc_step_credits(i) {
                return Ok(done);
            }
            lblk += self.write_run(tx, i, offset, data, lblk, last, hint).map_err(|(e, ok)| (done, e, ok))?;
        }
        Ok(data.len() as u64)
    }

    /// Writes the run of blocks starting at `lblk` (up to `last`) that one
    /// mapping covers (a hole: as much of it as the handle's credits
    /// allocate); returns its length in blocks. `hint` is the size
    /// the file is known to reach (writeback's in-memory size), or 0.
    ///
    /// An error comes with whether the run left the file consistent: a
    /// failed data write changes no metadata (blocks it had just
    /// allocated are unmapped again, so they never show stale contents),
    /// so the operation can end there and report it, as a failed
    /// writeback does on Linux, without aborting the journal.
    #[allow(clippy::too_many_arguments)]
    fn write_run(
        &self,
        tx: &Tx,
        i: &mut Inode,
        offset: u64,
        data: &[u8],
        lblk: FileBlock,
        last: FileBlock,
        hint: u64,
    ) -> std::result::Result<u64, (Error, bool)> {
        let bs = self.vol.block_size as u64;
        let dev = self.vol.device();
        let clean = |e: Error| (e, true);
        let m = inode::map_block(&self.vol, i, lblk).map_err(clean)?;
        let n = m.len.min(last - lblk + 1);
        let run_start = lblk.byte_offset(bs).max(offset);
        let run_end = (lblk + n).byte_offset(bs).min(offset + data.len() as u64);
        let src = &data[(run_start - offset) as usize..(run_end - offset) as usize];
        match m.kind {
            MapKind::Mapped(p) => {
                dev.write_at(src, p.byte_offset(bs) + (run_start - lblk.byte_offset(bs)))
                    .map_err(|e| clean(e.into()))?;
            }
            MapKind::Unwritten(p) => {
                write_padded(dev.as_ref(), p, lblk, n, bs, run_start, src).map_err(clean)?;
                ew::mark_written(tx, i, lblk, n).map_err(|e| (e, false))?;
            }
            MapKind::Hole => {
                let size_hint = i.size.max(offset + data.len() as u64).max(hint);
                let flags = if size_hint > 16 * bs { aflags::STREAM } else { aflags::SMALL_FILE };
                let runs = match ew::allocate_range(tx, i, lblk, n, false, flags, size_hint) {
                    Ok(runs) => runs,
                    Err(e) => {
                        // Blocks mapped before the failure hold whatever
                        // they held before: zero them (the hole's contents).
                        self.zero_partial(i, lblk.byte_offset(bs), (lblk + n).byte_offset(bs))
                            .map_err(|e| (e, false))?;
                        return Err((e, false));
                    }
                };
                let mapped_end = runs.iter().map(|&(rl, _, rn)| rl + rn).max().unwrap_or(lblk);
                let mut covered = 0;
                for (rl, rp, rn) in runs {
                    let rs = rl.byte_offset(bs).max(run_start);
                    let re = (rl + rn).byte_offset(bs).min(run_end);
                    let part = &data[(rs - offset) as usize..(re - offset) as usize];
                    if let Err(e) = write_padded(dev.as_ref(), rp, rl, rn, bs, rs, part) {
                        // Give the hole back rather than map blocks whose
                        // old contents anyone could then read.
                        let undone = ew::remove_range(tx, i, lblk, mapped_end).is_ok();
                        return Err((e, undone));
                    }
                    covered = rl + rn - lblk;
                }
                if covered == 0 {
                    return Err(clean(Error::Invalid(format!("inode {}: allocation mapped nothing", i.ino))));
                }
                return Ok(covered.min(n));
            }
        }
        Ok(n)
    }
}

/// Writes `src` (which starts at byte `start` of the file) into the new or
/// unwritten blocks `lblk..lblk+n` at physical `p..`, zero-filling the
/// parts of those blocks `src` does not cover.
fn write_padded(
    dev: &dyn crate::device::BlockDevice,
    p: PhysicalBlock,
    lblk: FileBlock,
    n: u64,
    bs: u64,
    start: u64,
    src: &[u8],
) -> Result<()> {
    let run0 = lblk.byte_offset(bs);
    let head = start - run0;
    let tail = (n * bs).saturating_sub(head + src.len() as u64);
    if head == 0 && tail == 0 {
        dev.write_at(src, p.byte_offset(bs))?;
        return Ok(());
    }
    // Zero only the partial blocks at the edges; whole blocks come from src.
    let covered_first = head / bs;
    let covered_last = (head + src.len() as u64).div_ceil(bs);
    let mut buf = vec![0u8; ((covered_last - covered_first) * bs) as usize];
    let off = (head - covered_first * bs) as usize;
    buf[off..off + src.len()].copy_from_slice(src);
    dev.write_at(&buf, (p + covered_first).byte_offset(bs))?;
    // Blocks of the run wholly outside src (allocation rounding) are zeroed.
    if covered_first > 0 {
        dev.write_at(&vec![0u8; (covered_first * bs) as usize], p.byte_offset(bs))?;
    }
    if covered_last < n {
        dev.write_at(&vec![0u8; ((n - covered_last) * bs) as usize], (p + covered_last).byte_offset(bs))?;
    }
    Ok(())
}
