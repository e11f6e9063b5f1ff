//! FS_IOC_FIEMAP's answer for a file: its extents in bytes, with the
//! kernel's flags, as `filefrag -v` prints them for ext4.
//!
//! Served by the library only: through a FUSE mount the VFS refuses
//! FIEMAP itself (`ioctl_fiemap` in fs/ioctl.c answers EOPNOTSUPP when
//! the inode has no `fiemap` operation, which FUSE inodes never have),
//! so `uext4 stat --extents` is the way to see it.

use crate::error::{Error, Result};
use crate::format::block_number::FileBlock;
use crate::format::inode::{FileType, FL_INLINE_DATA};
use crate::fs::FsCore;
use crate::inode::{self, MapKind, MAX_LBLK};

/// `fe_flags`: the last extent of the answer.
pub const FIEMAP_EXTENT_LAST: u32 = 0x1;
/// `fe_flags`: allocated, not written (reads as zeros).
pub const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;
/// `fe_flags`: a block-mapped file's run, not an on-disk extent.
pub const FIEMAP_EXTENT_MERGED: u32 = 0x1000;

/// One `struct fiemap_extent`: byte offsets and length, as
/// [`FsCore::fiemap`](crate::FsCore::fiemap) returns them for a front end
/// serving FS_IOC_FIEMAP or a tool that shows where a file lies on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FiemapExtent {
    /// Offset in the file.
    pub logical: u64,
    /// Offset on the device.
    pub physical: u64,
    /// Length.
    pub length: u64,
    /// `FIEMAP_EXTENT_*` flags.
    pub flags: u32,
}

impl FsCore {
    /// The extents of `ino` overlapping bytes `start..start + len`, as
    /// ext4 answers FS_IOC_FIEMAP: each on-disk extent, joined with the
    /// next when that one continues it on disk with the same state (a
    /// block-mapped file's contiguous runs, flagged MERGED), cut to the blocks of the
    /// range, preallocated ones past the end of the file included,
    /// unwritten ones flagged UNWRITTEN, the last one LAST. Buffered data
    /// is written back first (FIEMAP_FLAG_SYNC, always: data without
    /// blocks would otherwise show as delayed-allocation extents). Fast
    /// symlinks and device nodes have none; inline data is not reported
    /// (EOPNOTSUPP).
    pub fn fiemap(&self, ino: u32, start: u64, len: u64) -> Result<Vec<FiemapExtent>> {
        let i = self.inode(ino)?;
        match i.file_type()? {
            FileType::Regular | FileType::Directory => {}
            FileType::Symlink if !self.is_fast_symlink(&i) => {}
            _ => return Ok(Vec::new()),
        }
        if i.flags & FL_INLINE_DATA != 0 {
            return Err(Error::Unsupported("FIEMAP of inline data".into()));
        }
        if len == 0 {
            return Ok(Vec::new());
        }
        let i = if self.live().is_some() && i.file_type()? == FileType::Regular {
            self.writeback_inode(ino)?;
            self.inode(ino)?
        } else {
            i
        };
        let bs = self.vol.block_size as u64;
        let first = FileBlock(start / bs);
        let mut end = FileBlock(start.saturating_add(len - 1) / bs + 1).min(MAX_LBLK);
        if !i.uses_extents() {
            // A block map has nothing past the end of the file, and its
            // holes are walked a block at a time.
            end = end.min(FileBlock(i.size.div_ceil(bs)));
        }
        let merged = if i.uses_extents() { 0 } else { FIEMAP_EXTENT_MERGED };
        let mut out: Vec<FiemapExtent> = Vec::new();
        let mut lblk = first;
        while lblk < end {
            let m = inode::map_block(&self.vol, &i, lblk)?;
            let n = m.len.max(1).min(end.0 - lblk.0);
            let (p, flags) = match m.kind {
                MapKind::Hole => {
                    lblk = lblk.saturating_add(n);
                    continue;
                }
                MapKind::Mapped(p) => (p, merged),
                MapKind::Unwritten(p) => (p, merged | FIEMAP_EXTENT_UNWRITTEN),
            };
            let e = FiemapExtent { logical: lblk.0 * bs, physical: p.byte_offset(bs), length: n * bs, flags };
            lblk = lblk.saturating_add(n);
            match out.last_mut() {
                // ext4 answers from its extent status cache, which joins
                // neighbouring extents that continue each other on disk
                // (in one leaf, on a cold cache: always).
                Some(prev)
                    if prev.flags == e.flags
                        && prev.logical + prev.length == e.logical
                        && prev.physical + prev.length == e.physical =>
                {
                    prev.length += e.length;
                }
                _ => out.push(e),
            }
        }
        if let Some(last) = out.last_mut() {
            last.flags |= FIEMAP_EXTENT_LAST;
        }
        Ok(out)
    }
}
