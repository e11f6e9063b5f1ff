//! The data path of inline-data inodes (inline_data feature; format in
//! [`crate::inode::inline`]).
//!
//! Design, the simplest that is correct with the page cache, delayed
//! allocation, writeback and direct I/O: **an inline inode never has
//! folios.** A read of an inline file (buffered or direct) copies from the
//! inode. A buffered write or a size change (setattr) whose result still
//! fits the inode is done in the inode, write-through, in its own handle,
//! under the I/O lock held exclusively (`system.data` grows or shrinks as
//! needed, up to what the inode body holds). Anything else — a buffered
//! write or truncate that does not fit, any direct write (as the kernel
//! does for direct I/O), fallocate — first converts the file to an
//! extent-mapped one, as the kernel's ext4_convert_inline_data does:
//! under the I/O lock held exclusively, in its own handle, a block is
//! allocated (when the file is not empty), the bytes written to it before
//! the handle ends (ordered), the flag and `system.data` cleared and an
//! extent root set; the operation then goes on through the ordinary path
//! (page cache, delayed allocation, writeback). uext4 never makes a file
//! inline (extent files are valid on inline_data filesystems: new files
//! start as extent files), so once converted a file stays so, and "this
//! file is not inline" stays true without a lock.
//!
//! Inline directories (new ones start inline, as the kernel's do) are
//! edited in place by [`crate::dir::write`], converted to a block when
//! full; inline symlinks are read as inline data and, like every symlink,
//! never rewritten.

use super::namespace::ftype;
use super::FsCore;
use crate::alloc::flags as aflags;
use crate::error::{Error, Result};
use crate::format::block_number::FileBlock;
use crate::format::features::incompat;
use crate::format::inode::{FileType, Timestamp};
use crate::inode::{extent_write as ew, inline};

impl FsCore {
    fn may_have_inline(&self) -> bool {
        self.vol.sb.features.has_incompat(incompat::INLINE_DATA)
    }

    /// Reads regular file `ino` from its inode if it is inline (None: it
    /// is not, read it through the blocks). A conversion racing with this
    /// read leaves the bytes unchanged, so either answer is right.
    pub(super) fn read_if_inline(&self, ino: u32, offset: u64, buf: &mut [u8]) -> Result<Option<usize>> {
        if !self.may_have_inline() {
            return Ok(None);
        }
        let i = self.regular(ino)?;
        if !i.has_inline_data() {
            return Ok(None);
        }
        let n = inline::read_at(&i, offset, buf)?;
        self.note_access_ino(&i);
        Ok(Some(n))
    }

    /// A buffered write to an inline file: in the inode when the result
    /// fits it (`Some`: written, in its own handle, so it is as durable as
    /// any metadata change), else the file is converted to extents and
    /// `None` sends the write down the ordinary path. `None` at once for
    /// files that are not inline.
    pub(super) fn write_inline(&self, ino: u32, offset: u64, data: &[u8]) -> Result<Option<usize>> {
        if !self.may_have_inline() || !self.inode(ino)?.has_inline_data() {
            return Ok(None);
        }
        let rw = self.rw()?;
        let _l = rw.data.locks().lock_exclusive(&[], &[ino]);
        let i = self.load(ino)?;
        if !i.has_inline_data() || ftype(&i)? != FileType::Regular {
            return Ok(None);
        }
        self.check_live(&i)?;
        let mut changed = i.clone();
        match inline::write_at(&mut changed, offset, data) {
            Ok(()) => {}
            Err(Error::NoSpace(_)) => {
                self.uninline_locked(ino)?;
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
        let now = Timestamp::now();
        changed.mtime = now;
        changed.ctime = now;
        let st = rw.data.inode(ino);
        let tx = self.begin(8)?;
        let _m = st.map.write();
        tx.write_inode(&mut changed)?;
        self.note_tid(&tx, &[ino]);
        Ok(Some(data.len()))
    }

    /// Before a size change of `ino` to `size`: converts an inline file
    /// whose new size does not fit the inode (setattr then changes the
    /// size of what stays inline with [`inline::resize`]). I/O lock held
    /// exclusively.
    pub(super) fn prepare_inline_resize(&self, ino: u32, size: u64) -> Result<()> {
        if !self.may_have_inline() {
            return Ok(());
        }
        let i = self.load(ino)?;
        if !i.has_inline_data() {
            return Ok(());
        }
        match inline::resize(&mut i.clone(), size) {
            Err(Error::NoSpace(_)) => self.uninline_locked(ino),
            r => r,
        }
    }

    /// Converts regular file `ino` from inline data to an extent-mapped
    /// file if it is inline (see the module comment); takes the inode's
    /// I/O lock exclusively, so the caller must not hold it.
    pub(super) fn uninline(&self, ino: u32) -> Result<()> {
        if !self.may_have_inline() || !self.inode(ino)?.has_inline_data() {
            return Ok(());
        }
        let rw = self.rw()?;
        let _l = rw.data.locks().lock_exclusive(&[], &[ino]);
        self.uninline_locked(ino)
    }

    /// [`FsCore::uninline`] with the inode's I/O lock held exclusively.
    /// Other file types are left alone (their callers refuse them).
    pub(super) fn uninline_locked(&self, ino: u32) -> Result<()> {
        let mut i = self.load(ino)?;
        if !i.has_inline_data() || ftype(&i)? != FileType::Regular {
            return Ok(());
        }
        let rw = self.rw()?;
        let st = rw.data.inode(ino);
        let bs = self.vol.block_size as u64;
        let data = inline::bytes(&i)?;
        let tx = self.begin(64)?;
        let _m = st.map.write();
        inline::destroy(&mut i)?;
        ew::init_root(&mut i);
        let size = i.size;
        if size > 0 {
            let runs = match ew::allocate_range(&tx, &mut i, FileBlock(0), 1, false, aflags::SMALL_FILE, size) {
                Ok(runs) => runs,
                Err(e @ Error::NoSpace(_)) => {
                    // Nothing changed yet (the inode is not written).
                    tx.settle();
                    return Err(e);
                }
                Err(e) => return Err(e),
            };
            let Some(&(_, p, _)) = runs.first() else {
                return Err(Error::Invalid(format!("inode {ino}: no block for its inline data")));
            };
            let mut block = vec![0u8; bs as usize];
            let n = (size.min(bs) as usize).min(data.len());
            block[..n].copy_from_slice(&data[..n]);
            // Ordered: the data is on the device before the handle that
            // maps it ends.
            self.vol.device().write_at(&block, p.byte_offset(bs))?;
        }
        tx.write_inode(&mut i)?;
        self.note_tid(&tx, &[ino]);
        Ok(())
    }
}
