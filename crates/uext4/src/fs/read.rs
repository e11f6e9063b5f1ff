//! The read side of inodes: stat, directory listings, file data,
//! symlink targets, block maps and statfs.

use crate::device::BlockDevice;
use crate::dir::{self, DirBatch, DirEntry};
use crate::error::{Error, Result, Structure};
use crate::format::block_number::FileBlock;
use crate::format::dirent::NAME_MAX;
use crate::format::inode::{FileType, Inode};
use crate::fs::{FsCore, Stat, StatFs};
use crate::inode::{self, MapKind, Mapping};

/// Longest symlink target (PATH_MAX).
const MAX_SYMLINK_LEN: u64 = 4096;

impl FsCore {
    /// Reads an inode that a caller may use (rejects never-used and deleted ones).
    pub fn inode(&self, ino: u32) -> Result<Inode> {
        let i = inode::read_inode(&self.vol, ino)?;
        if i.mode == 0 && i.links_count == 0 {
            return Err(Error::corruption(
                Structure::Inode,
                crate::error::Location::Inode(ino),
                crate::error::CorruptKind::NotInUse,
            ));
        }
        Ok(i)
    }

    /// stat(2) of an inode, for code that holds inode numbers (from
    /// [`FsCore::lookup`], [`FsCore::readdir`], [`FsCore::resolve`]);
    /// path-based code calls [`Filesystem::metadata`](crate::Filesystem::metadata).
    pub fn stat(&self, ino: u32) -> Result<Stat> {
        self.stat_of(self.inode(ino)?)
    }

    /// stat(2) of inode `i` as an operation just wrote it (under the
    /// locks that made the change): what [`FsCore::stat`] would read back,
    /// without reading, parsing and verifying the record again.
    pub(crate) fn stat_of(&self, mut i: Inode) -> Result<Stat> {
        let ino = i.ino;
        let file_type = i.file_type()?;
        let pending_atime = match (self.live(), file_type) {
            // Buffered data not yet written back: the in-memory size, and
            // its reserved blocks counted as ext4 counts delayed ones. Only
            // an inode the data path holds state for can have any (dirty
            // data and a pending atime keep the state in its table, as do
            // the writers under way): a stat does not make state for an
            // inode that has none (a walk stats every file it passes).
            (Some(rw), FileType::Regular) => rw.data.peek(ino).and_then(|st| {
                i.size = i.size.max(st.data.pages.pending_size());
                i.blocks_512 += st.data.pages.reserved_blocks() * (self.vol.block_size as u64 / 512);
                st.data.atime.get()
            }),
            _ => self.pending_atime(ino),
        };
        if let Some(t) = pending_atime {
            // Read since the atime was last written (see fs/atime.rs).
            i.atime = t;
        }
        let rdev = match file_type {
            FileType::CharDevice | FileType::BlockDevice => i.device(),
            _ => (0, 0),
        };
        Ok(Stat {
            ino,
            file_type,
            mode: i.mode,
            nlink: u32::from(i.links_count),
            uid: i.uid,
            gid: i.gid,
            size: i.size,
            blocks: i.blocks_512,
            blksize: self.block_size(),
            rdev,
            atime: i.atime,
            mtime: i.mtime,
            ctime: i.ctime,
            crtime: i.crtime,
            flags: i.flags,
            generation: i.generation,
            file_acl: i.file_acl,
            projid: i.projid,
        })
    }

    /// Reads up to `max` entries of directory `ino` after `cookie`
    /// (0 = from the start). Pass the last entry's `next_cookie` to go on.
    /// A listing is an access: it may update the directory's atime (see
    /// [`crate::AtimeMode`]).
    pub fn readdir(&self, ino: u32, cookie: u64, max: usize) -> Result<Vec<DirEntry>> {
        self.read_dir_with(ino, |d| {
            let v = dir::readdir(&self.vol, d, cookie, max)?;
            self.note_access_ino(d);
            Ok(v)
        })
    }

    /// [`FsCore::readdir`] into `batch` (emptied first), whose buffers a
    /// caller listing page after page reuses: nothing is allocated per
    /// entry.
    pub fn readdir_into(&self, ino: u32, cookie: u64, max: usize, batch: &mut DirBatch) -> Result<()> {
        batch.clear();
        self.read_dir_with(ino, |d| {
            dir::readdir_with(&self.vol, d, cookie, max, &mut |e| batch.push(e))?;
            self.note_access_ino(d);
            Ok(())
        })
    }

    /// Every entry of directory `ino` (including "." and ".."). Not an
    /// access: the atime stays (the engine's own listings use it).
    pub fn read_dir_all(&self, ino: u32) -> Result<Vec<DirEntry>> {
        self.read_dir_with(ino, |d| dir::readdir(&self.vol, d, 0, usize::MAX))
    }

    /// Reads file data at `offset` into `buf`; returns the bytes read,
    /// short at end of file. Holes and unwritten extents read as zeros.
    pub fn read(&self, ino: u32, offset: u64, buf: &mut [u8]) -> Result<usize> {
        if self.live().is_some() {
            // Through the page cache, with no inode I/O lock.
            return self.read_buffered(ino, offset, buf);
        }
        let i = self.inode(ino)?;
        match i.file_type()? {
            FileType::Regular => {}
            FileType::Directory => return Err(Error::IsDir(format!("inode {ino}"))),
            _ => return Err(Error::Invalid(format!("inode {ino} is not a regular file"))),
        }
        self.read_inode_data(&i, offset, buf)
    }

    /// Reads a whole regular file by inode number into a new buffer: for
    /// files known to be small; [`FsCore::read`] reads a range into the
    /// caller's buffer.
    pub fn read_all(&self, ino: u32) -> Result<Vec<u8>> {
        let i = self.inode(ino)?;
        if i.file_type()? != FileType::Regular {
            return Err(Error::Invalid(format!("inode {ino} is not a regular file")));
        }
        let size = match self.live() {
            Some(rw) => self.file_size(&rw.data.inode(ino), ino)?,
            None => i.size,
        };
        let too_big = || Error::Invalid(format!("inode {ino}: {size} bytes do not fit in memory"));
        let len = usize::try_from(size).map_err(|_| too_big())?;
        let mut v = Vec::new();
        v.try_reserve_exact(len).map_err(|_| too_big())?;
        v.resize(len, 0);
        let n = if self.live().is_some() {
            self.read_buffered(ino, 0, &mut v)?
        } else {
            self.read_inode_data(&i, 0, &mut v)?
        };
        v.truncate(n);
        Ok(v)
    }

    fn read_inode_data(&self, i: &Inode, offset: u64, buf: &mut [u8]) -> Result<usize> {
        if i.has_inline_data() {
            return inode::inline::read_at(i, offset, buf);
        }
        if offset >= i.size {
            return Ok(0);
        }
        let bs = self.vol.block_size as u64;
        let total = (i.size - offset).min(buf.len() as u64) as usize;
        let mut done = 0usize;
        while done < total {
            let pos = offset + done as u64;
            let lblk = FileBlock::of_byte(pos, bs);
            let within = pos % bs;
            let m = inode::map_block(&self.vol, i, lblk)?;
            let run_bytes = m.len.saturating_mul(bs) - within;
            let n = run_bytes.min((total - done) as u64) as usize;
            let dst = &mut buf[done..done + n];
            match m.kind {
                MapKind::Mapped(p) => self.vol.device().read_at(dst, p.byte_offset(bs) + within)?,
                MapKind::Unwritten(_) | MapKind::Hole => dst.fill(0),
            }
            done += n;
        }
        Ok(total)
    }

    /// The mapped runs of a file, directory or slow symlink (for inspection
    /// and tests). Inodes whose `i_block` holds no block map (fast
    /// symlinks, device nodes, fifos, sockets) have none.
    pub fn extents(&self, ino: u32) -> Result<Vec<Mapping>> {
        let i = self.inode(ino)?;
        if i.has_inline_data() {
            return Ok(Vec::new());
        }
        match i.file_type()? {
            FileType::Regular | FileType::Directory => {}
            FileType::Symlink if !self.is_fast_symlink(&i) => {}
            _ => return Ok(Vec::new()),
        }
        inode::extents(&self.vol, &i)
    }

    /// A symlink whose target lives in `i_block` (no data block), by the
    /// kernel's test (`ext4_inode_is_fast_symlink`): with ea_inode, a
    /// symlink shorter than `i_block`; otherwise no blocks besides an
    /// xattr block, and not inline (an inline symlink is read as inline
    /// data, like a file).
    pub(in crate::fs) fn is_fast_symlink(&self, i: &Inode) -> bool {
        if self.vol.sb.features.has_incompat(crate::format::features::incompat::EA_INODE) {
            // The kernel's rule with ea_inode (2025, "ext4: check fast
            // symlink for ea_inode correctly"): an owner's i_blocks also
            // counts the blocks of its values' inodes, so a short symlink
            // with a large xattr has blocks and yet no block map. The size
            // decides, as in e2fsprogs' ext2fs_is_fast_symlink (the kernel
            // stores every target shorter than i_block there).
            let symlink = i.mode & crate::format::inode::S_IFMT == crate::format::inode::S_IFLNK;
            return symlink && i.size != 0 && i.size < i.block.len() as u64;
        }
        if i.has_inline_data() {
            return false;
        }
        // The xattr block occupies a whole cluster (bigalloc) in i_blocks.
        let cluster = 1u64 << (10 + self.vol.sb.log_cluster_size.max(self.vol.sb.log_block_size));
        let ea_sectors = if i.file_acl != 0 { cluster / 512 } else { 0 };
        i.size < i.block.len() as u64 && i.blocks_512.saturating_sub(ea_sectors) == 0
    }

    /// The target of symlink `ino`, as stored (never resolved); the
    /// path-based form is [`Filesystem::read_link`](crate::Filesystem::read_link).
    pub fn readlink(&self, ino: u32) -> Result<Vec<u8>> {
        let i = self.inode(ino)?;
        if i.file_type()? != FileType::Symlink {
            return Err(Error::Invalid(format!("inode {ino} is not a symlink")));
        }
        self.readlink_inode(&i)
    }

    pub(in crate::fs) fn readlink_inode(&self, i: &Inode) -> Result<Vec<u8>> {
        if i.size == 0 || i.size > MAX_SYMLINK_LEN {
            return Err(Error::corruption(
                Structure::Symlink,
                crate::error::Location::Inode(i.ino),
                crate::error::CorruptKind::OutOfRange { field: "i_size", value: i.size },
            ));
        }
        if self.is_fast_symlink(i) {
            return Ok(i.block[..i.size as usize].to_vec());
        }
        let mut v = vec![0u8; i.size as usize];
        let n = self.read_inode_data(i, 0, &mut v)?;
        v.truncate(n);
        Ok(v)
    }

    /// statfs(2): sizes and free counts (O(1): running totals, or on a
    /// read-only open the descriptors' sums taken at open).
    pub fn statfs(&self) -> StatFs {
        let sb = &self.vol.sb;
        let ratio = 1u64 << (sb.log_cluster_size.saturating_sub(sb.log_block_size));
        // The allocator counts blocks; descriptors count clusters.
        let (free_blocks, free_inodes) = match (self.live(), self.alloc.get()) {
            (Some(rw), Some(a)) => (a.free_blocks(), u64::from(rw.ialloc.free_inodes())),
            _ => {
                // Nothing changes the counts on a read-only open: the sums
                // taken at open, not a walk over every descriptor per call.
                let (blocks, inodes) = self.vol.descriptor_free_totals();
                (blocks * ratio, inodes)
            }
        };
        // Blocks reserved for buffered data are as good as used (ext4's
        // s_dirtyclusters_counter).
        let reserved = self.live().map_or(0, |rw| rw.data.pages().delalloc().reserved_blocks());
        let free_blocks = free_blocks.saturating_sub(reserved);
        StatFs {
            block_size: sb.block_size(),
            blocks: sb.blocks_count,
            free_blocks,
            avail_blocks: free_blocks.saturating_sub(sb.r_blocks_count),
            inodes: u64::from(sb.inodes_count),
            free_inodes,
            name_max: NAME_MAX as u32,
        }
    }
}
