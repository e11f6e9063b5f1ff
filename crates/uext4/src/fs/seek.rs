//! `lseek(2)` with `SEEK_DATA` and `SEEK_HOLE`: where data and holes are,
//! read from the block map.
//!
//! As ext4 does for files without cached pages, written extents are data
//! and holes and unwritten (preallocated) extents are holes. The end of
//! the file counts as a hole, so `SEEK_HOLE` always finds one before
//! `i_size`, or at it.

use super::FsCore;
use crate::error::{Error, Result};
use crate::format::block_number::FileBlock;
use crate::format::inode::{FileType, Inode};
use crate::inode::{self, MapKind};

impl FsCore {
    /// `lseek(fd, offset, SEEK_DATA)` on regular file `ino`: the first
    /// offset at or after `offset` that holds written data. `None` means
    /// there is none before the end of the file (the caller's ENXIO).
    pub fn seek_data(&self, ino: u32, offset: u64) -> Result<Option<u64>> {
        self.seek_with(ino, offset, true)
    }

    /// `lseek(fd, offset, SEEK_HOLE)` on regular file `ino`: the first
    /// offset at or after `offset` in a hole, an unwritten extent or at
    /// the end of the file. `None` means `offset` is at or beyond the end
    /// of the file (the caller's ENXIO).
    pub fn seek_hole(&self, ino: u32, offset: u64) -> Result<Option<u64>> {
        self.seek_with(ino, offset, false)
    }

    fn seek_with(&self, ino: u32, offset: u64, data: bool) -> Result<Option<u64>> {
        match self.live() {
            Some(rw) => {
                if rw.data.inode(ino).data.pages.is_dirty() {
                    // Data and holes are read from the block map: buffered
                    // data goes to its blocks first.
                    self.writeback_inode(ino)?;
                }
                // Truncate and punch take the I/O lock exclusively and
                // change the map under the mapping lock: hold both shared.
                let st = rw.data.inode(ino);
                let _io = st.io.read();
                let _map = st.map.read();
                let i = self.seekable(ino)?;
                self.seek_map(&i, offset, data)
            }
            None => {
                let i = self.seekable(ino)?;
                self.seek_map(&i, offset, data)
            }
        }
    }

    fn seekable(&self, ino: u32) -> Result<Inode> {
        let i = self.inode(ino)?;
        match i.file_type()? {
            FileType::Regular => Ok(i),
            FileType::Directory => Err(Error::IsDir(format!("inode {ino}"))),
            _ => Err(Error::Invalid(format!("seek in inode {ino}, not a regular file"))),
        }
    }

    fn seek_map(&self, i: &Inode, offset: u64, data: bool) -> Result<Option<u64>> {
        let size = i.size;
        if offset >= size {
            return Ok(None);
        }
        if i.has_inline_data() {
            // All of an inline file is data.
            return Ok(Some(if data { offset } else { size }));
        }
        let bs = self.vol.block_size as u64;
        let mut pos = offset;
        while pos < size {
            let m = inode::map_block(&self.vol, i, FileBlock::of_byte(pos, bs))?;
            let is_data = matches!(m.kind, MapKind::Mapped(_));
            if is_data == data {
                return Ok(Some(pos));
            }
            // Each step moves past one run, so the walk ends.
            let next = m.lblk.saturating_add(m.len.max(1)).get().saturating_mul(bs);
            if next <= pos {
                break;
            }
            pos = next;
        }
        // Past the last run before EOF: no data; the end is a hole.
        Ok(if data { None } else { Some(size) })
    }
}
