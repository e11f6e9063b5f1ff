//! The public filesystem API.
//!
//! [`Filesystem`] is `Send + Sync`: every method takes `&self`, and the
//! state under it (the volume geometry) is immutable after open, so any
//! number of threads call it at once. The only shared mutable structure is
//! the metadata cache, which is sharded (see [`crate::cache`]).

use crate::alloc::{AllocConfig, AllocStats, Allocator, FreeExtentHistogram};
use crate::device::{BlockDevice, FileDevice};
use crate::dir::{self, DirEntry};
use crate::error::{Error, Result, Structure};
use crate::format::dirent::NAME_MAX;
use crate::format::group_desc::GroupDesc;
use crate::format::inode::{FileType, Inode, Timestamp, ROOT_INO};
use crate::format::superblock::Superblock;
use crate::inode::{self, MapKind, Mapping};
use crate::volume::Volume;
use crate::xattr;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

mod buffered;
mod direct;
mod errors;
mod mmp;
pub mod ops;
mod orphan;
mod rw;
mod seek;
mod std_support;
mod writeback;
pub mod xattr_ops;

pub use ops::{FallocMode, RenameFlags, SetAttr, LINK_MAX};
pub use xattr_ops::XattrSetMode;

/// Symlinks followed while resolving one path before giving up (ELOOP),
/// the kernel's limit.
const MAX_SYMLINK_FOLLOWS: u32 = 40;
/// Longest symlink target (PATH_MAX).
const MAX_SYMLINK_LEN: u64 = 4096;

/// How to open a filesystem.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Metadata blocks the buffer cache keeps (default 16384).
    pub cache_blocks: usize,
    /// Open read-write (replays the journal onto the device first).
    pub write: bool,
    /// Interval of the periodic journal commit (default 5 s).
    pub commit_interval: Duration,
    /// Writes may use the blocks reserved for root (`s_r_blocks_count`),
    /// as a process with CAP_SYS_RESOURCE may (default false).
    pub use_reserved: bool,
    /// The data path's switches (the seeds' behaviour by default).
    pub data: crate::data::DataPathConfig,
    /// Page-cache budget in bytes (0: an eighth of RAM, 64 MiB to 4 GiB).
    pub cache_bytes: usize,
    /// How long a read-write open of an `mmp` filesystem watches an
    /// in-use MMP block before claiming it. None (the default): the
    /// kernel's `2 * interval + 1` s, at least 11 s. Shorter waits are for
    /// tests; they can miss a live node that updates less often.
    pub mmp_wait: Option<Duration>,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            cache_blocks: 16384,
            write: false,
            commit_interval: Duration::from_secs(5),
            use_reserved: false,
            data: crate::data::DataPathConfig::default(),
            cache_bytes: 0,
            mmp_wait: None,
        }
    }
}

/// Everything `stat(2)` reports, plus the ext4-specific fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// Inode number.
    pub ino: u32,
    /// File type.
    pub file_type: FileType,
    /// Full mode (type and permission bits).
    pub mode: u16,
    /// Hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Allocated 512-byte sectors (including the xattr block).
    pub blocks: u64,
    /// Preferred I/O size (the block size).
    pub blksize: u32,
    /// Device numbers (major, minor) of device nodes; (0, 0) otherwise.
    pub rdev: (u32, u32),
    /// Access time.
    pub atime: Timestamp,
    /// Modification time.
    pub mtime: Timestamp,
    /// Change time.
    pub ctime: Timestamp,
    /// Creation time, when the inode is large enough to record it.
    pub crtime: Option<Timestamp>,
    /// ext4 inode flags (`i_flags`).
    pub flags: u32,
    /// Generation number.
    pub generation: u32,
    /// Extended attribute block, 0 if none.
    pub file_acl: u64,
    /// Project id.
    pub projid: u32,
}

/// Filesystem-wide counters, as statfs(2) reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    /// Block size.
    pub block_size: u32,
    /// Total blocks.
    pub blocks: u64,
    /// Free blocks.
    pub free_blocks: u64,
    /// Free blocks available to unprivileged users.
    pub avail_blocks: u64,
    /// Total inodes.
    pub inodes: u64,
    /// Free inodes.
    pub free_inodes: u64,
    /// Longest name.
    pub name_max: u32,
}

/// An open ext4 filesystem: the owning handle.
///
/// Every operation is a method of [`FsCore`], reached through `Deref`;
/// the handle adds what only the owner does: unmounting, by
/// [`Filesystem::unmount`] or on drop. Background threads (writeback,
/// the periodic commit) hold weak references to the core, so they never
/// keep a filesystem alive past its unmount.
#[derive(Debug)]
pub struct Filesystem {
    core: Arc<FsCore>,
    /// Owner and umask of files the std-like API creates.
    new_files: crate::std_api::NewFileDefaults,
}

/// The state and operations of an open filesystem, shared by its handle
/// ([`Filesystem`]) and its background threads.
#[derive(Debug)]
pub struct FsCore {
    vol: Arc<Volume>,
    notices: Vec<String>,
    /// Built on first use: inspection commands that never allocate do not
    /// pay for it.
    alloc: OnceLock<Arc<Allocator>>,
    /// Present when opened read-write (see [`FsCore::live`]).
    rw_state: Option<rw::RwState>,
}

impl std::ops::Deref for Filesystem {
    type Target = FsCore;
    fn deref(&self) -> &FsCore {
        &self.core
    }
}

impl Filesystem {
    /// Opens an image file or block device read-only.
    pub fn open(path: impl AsRef<Path>) -> Result<Filesystem> {
        let dev = FileDevice::open(path, false)?;
        Filesystem::open_device(Arc::new(dev), MountOptions::default())
    }

    /// Opens an image file or block device read-write (journal replayed
    /// onto it first, if needed).
    pub fn open_rw(path: impl AsRef<Path>) -> Result<Filesystem> {
        let dev = FileDevice::open(path, true)?;
        Filesystem::open_device(Arc::new(dev), MountOptions { write: true, ..Default::default() })
    }

    /// Opens an image file or block device with `opts` (read-write when
    /// `opts.write`).
    pub fn open_with(path: impl AsRef<Path>, opts: MountOptions) -> Result<Filesystem> {
        let dev = FileDevice::open(path, opts.write)?;
        Filesystem::open_device(Arc::new(dev), opts)
    }

    /// Opens a filesystem on any device read-only.
    ///
    /// Refuses unknown INCOMPAT features (naming them). Unknown RO_COMPAT
    /// features are reported in [`Filesystem::notices`]. A journal that
    /// needs recovery is replayed into an in-memory overlay (the device is
    /// never written) and the notices say so; if the replay fails, the
    /// filesystem is opened un-replayed (as `-o ro,noload`) with a notice.
    pub fn open_device(dev: Arc<dyn BlockDevice>, opts: MountOptions) -> Result<Filesystem> {
        if opts.write {
            return Filesystem::open_device_rw(dev, opts);
        }
        let mut vol = Volume::open(dev.clone(), opts.cache_blocks)?;
        let mut notices = Vec::new();
        let ro = vol.sb.features.readonly_ro_compat();
        if !ro.is_empty() {
            notices.push(format!("read-only compatible feature(s) {} not supported for writing", ro.join(", ")));
        }
        if vol.sb.needs_recovery() {
            let replayed =
                crate::journal::replay_in_memory(dev).and_then(|(ov, r)| Ok((Volume::open(ov, opts.cache_blocks)?, r)));
            match replayed {
                Ok((replayed, r)) => {
                    vol = replayed;
                    notices.push(format!(
                        "the journal was replayed in memory ({} transaction(s)); the image file was not modified",
                        r.transactions
                    ));
                    notices.extend(r.warnings);
                }
                Err(e) => notices.push(format!(
                    "the journal needs recovery but replaying it failed ({e}); the image is opened without \
                     replay and may not show the most recent committed changes"
                )),
            }
        }
        let core = FsCore { vol: Arc::new(vol), notices, alloc: OnceLock::new(), rw_state: None };
        Ok(Filesystem { core: Arc::new(core), new_files: Default::default() })
    }

    fn open_device_rw(dev: Arc<dyn BlockDevice>, opts: MountOptions) -> Result<Filesystem> {
        if dev.read_only() {
            return Err(Error::ReadOnly("the device is read-only".into()));
        }
        let mut notices = Vec::new();
        let probe = Volume::open(dev.clone(), 64)?;
        rw::check_writable(&probe.sb)?;
        // Before anything is written (journal recovery included), as the
        // kernel's ext4_fill_super does.
        let mmp = mmp::claim(&dev, &probe.sb, opts.mmp_wait)?;
        if probe.sb.needs_recovery() {
            drop(probe);
            let r = crate::journal::recover(dev.clone())?;
            notices.push(format!("the journal was replayed ({} transaction(s))", r.transactions));
            notices.extend(r.warnings);
        } else {
            drop(probe);
        }
        // Every flush goes through the error tracker, so a failed one
        // reaches the files whose data it lost (fs/errors.rs).
        let errs = Arc::new(errors::WbErrors::default());
        let dev: Arc<dyn BlockDevice> = Arc::new(errors::TrackedDevice::new(dev, errs.clone()));
        let vol = Arc::new(Volume::open(dev, opts.cache_blocks)?);
        let alloc = Arc::new(Allocator::new(vol.clone(), AllocConfig::default())?);
        let rw = rw::RwState::start(
            &vol,
            &alloc,
            opts.commit_interval,
            opts.use_reserved,
            opts.data,
            opts.cache_bytes,
            mmp,
            errs,
        )?;
        let alloc_cell = OnceLock::new();
        let _ = alloc_cell.set(alloc);
        let mut core = FsCore { vol, notices, alloc: alloc_cell, rw_state: Some(rw) };
        let (deleted, truncated) = core.orphan_cleanup()?;
        if deleted + truncated > 0 {
            core.notices.push(format!("orphan list: {deleted} inode(s) deleted, {truncated} truncated"));
        }
        let core = Arc::new(core);
        core.start_writeback(Arc::downgrade(&core));
        Ok(Filesystem { core, new_files: Default::default() })
    }
}

impl FsCore {
    /// Warnings produced while opening (unsupported features, unreplayed journal).
    pub fn notices(&self) -> &[String] {
        &self.notices
    }

    /// The superblock.
    pub fn superblock(&self) -> &Superblock {
        &self.vol.sb
    }

    /// All group descriptors.
    pub fn group_descs(&self) -> &[GroupDesc] {
        &self.vol.groups
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> u32 {
        self.vol.block_size as u32
    }

    /// True unless opened read-write (and not yet unmounted).
    pub fn is_read_only(&self) -> bool {
        self.live().is_none()
    }

    /// The block allocator (created on first use with the default
    /// configuration).
    pub fn allocator(&self) -> Result<&Allocator> {
        if let Some(a) = self.alloc.get() {
            return Ok(a);
        }
        let a = Arc::new(Allocator::new(self.vol.clone(), AllocConfig::default())?);
        Ok(self.alloc.get_or_init(|| a))
    }

    /// The allocator's counters (mb_stats).
    pub fn alloc_stats(&self) -> Result<AllocStats> {
        Ok(self.allocator()?.stats())
    }

    /// Free-space fragmentation over the whole filesystem (reads every
    /// block bitmap, verifying its checksum).
    pub fn free_extent_histogram(&self) -> Result<FreeExtentHistogram> {
        self.allocator()?.free_extent_histogram()
    }

    /// The shared volume (superblock, descriptors, metadata cache).
    pub fn volume(&self) -> &Arc<Volume> {
        &self.vol
    }

    /// Metadata cache counters.
    pub fn cache_stats(&self) -> crate::cache::CacheStats {
        self.vol.cache.stats()
    }

    /// The root directory's inode number.
    pub fn root(&self) -> u32 {
        ROOT_INO
    }

    /// Reads an inode that a caller may use (rejects never-used and deleted ones).
    pub fn inode(&self, ino: u32) -> Result<Inode> {
        let i = inode::read_inode(&self.vol, ino)?;
        if i.mode == 0 && i.links_count == 0 {
            return Err(Error::corrupt(Structure::Inode, 0, format!("inode {ino} is not in use")));
        }
        Ok(i)
    }

    /// Looks `name` up in directory `dir`.
    pub fn lookup(&self, dir: u32, name: &[u8]) -> Result<u32> {
        let found = self.read_dir_with(dir, |d| dir::lookup(&self.vol, d, name))?;
        match found {
            Some((ino, _)) => Ok(ino),
            None => Err(Error::NotFound(String::from_utf8_lossy(name).into_owned())),
        }
    }

    /// Reads directory `ino` with `f`: when open read-write, under its
    /// I/O lock shared (as the VFS holds `i_rwsem` shared for lookups and
    /// listings), so that a change in progress (the first block turning
    /// into an htree root before the inode says so, a leaf split, a new
    /// block) is seen whole or not at all. The caller holds no inode lock.
    fn read_dir_with<T>(&self, ino: u32, f: impl FnOnce(&Inode) -> Result<T>) -> Result<T> {
        let _shared = self.live().map(|rw| rw.locks.lock_shared(ino));
        let d = self.inode(ino)?;
        if d.file_type()? != FileType::Directory {
            return Err(Error::NotDir(format!("inode {ino}")));
        }
        f(&d)
    }

    /// Resolves `path` (absolute, or relative to the root) to an inode,
    /// following symlinks in every component except the last.
    pub fn resolve(&self, path: impl AsRef<[u8]>) -> Result<u32> {
        let mut follows = 0;
        self.walk(ROOT_INO, path.as_ref(), false, &mut follows)
    }

    /// Like [`Filesystem::resolve`] but also follows a final symlink.
    pub fn resolve_follow(&self, path: impl AsRef<[u8]>) -> Result<u32> {
        let mut follows = 0;
        self.walk(ROOT_INO, path.as_ref(), true, &mut follows)
    }

    fn walk(&self, start: u32, path: &[u8], follow_last: bool, follows: &mut u32) -> Result<u32> {
        let shown = || String::from_utf8_lossy(path).into_owned();
        let mut cur = if path.first() == Some(&b'/') { ROOT_INO } else { start };
        let comps: Vec<&[u8]> = path.split(|&c| c == b'/').filter(|c| !c.is_empty() && *c != b".").collect();
        // A trailing slash (or "/.") demands a directory: the last
        // component's symlink is followed and the result must be a
        // directory, as in POSIX path resolution.
        let must_be_dir = path.ends_with(b"/") || path.ends_with(b"/.") || path == b".";
        let follow_last = follow_last || must_be_dir;
        for (i, comp) in comps.iter().enumerate() {
            if comp.len() > NAME_MAX {
                return Err(Error::NameTooLong(shown()));
            }
            let found = match self.read_dir_with(cur, |d| dir::lookup(&self.vol, d, comp)) {
                Err(Error::NotDir(_)) => return Err(Error::NotDir(shown())),
                r => r?,
            };
            let next = match found {
                Some((ino, _)) => ino,
                None => return Err(Error::NotFound(shown())),
            };
            let last = i + 1 == comps.len();
            let node = self.inode(next)?;
            if node.file_type()? == FileType::Symlink && (!last || follow_last) {
                *follows += 1;
                if *follows > MAX_SYMLINK_FOLLOWS {
                    return Err(Error::Loop(shown()));
                }
                let target = self.readlink_inode(&node)?;
                cur = self.walk(cur, &target, true, follows)?;
            } else {
                cur = next;
            }
        }
        if must_be_dir && self.inode(cur)?.file_type()? != FileType::Directory {
            return Err(Error::NotDir(shown()));
        }
        Ok(cur)
    }

    /// stat(2) of an inode.
    pub fn stat(&self, ino: u32) -> Result<Stat> {
        let mut i = self.inode(ino)?;
        let file_type = i.file_type()?;
        if let (Some(rw), FileType::Regular) = (self.live(), file_type) {
            // Buffered data not yet written back: the in-memory size, and
            // its reserved blocks counted as ext4 counts delayed ones.
            let st = rw.locks.inode(ino);
            i.size = i.size.max(st.pages.pending_size());
            i.blocks_512 += st.pages.reserved_blocks() * (self.vol.block_size as u64 / 512);
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
    pub fn readdir(&self, ino: u32, cookie: u64, max: usize) -> Result<Vec<DirEntry>> {
        self.read_dir_with(ino, |d| dir::readdir(&self.vol, d, cookie, max))
    }

    /// Every entry of directory `ino` (including "." and "..").
    pub fn read_dir_all(&self, ino: u32) -> Result<Vec<DirEntry>> {
        self.readdir(ino, 0, usize::MAX)
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

    /// Reads a whole regular file.
    pub fn read_all(&self, ino: u32) -> Result<Vec<u8>> {
        let i = self.inode(ino)?;
        if i.file_type()? != FileType::Regular {
            return Err(Error::Invalid(format!("inode {ino} is not a regular file")));
        }
        let size = match self.live() {
            Some(rw) => self.file_size(&rw.locks.inode(ino), ino)?,
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
        if offset >= i.size {
            return Ok(0);
        }
        let bs = self.vol.block_size as u64;
        let total = (i.size - offset).min(buf.len() as u64) as usize;
        let mut done = 0usize;
        while done < total {
            let pos = offset + done as u64;
            let lblk = pos / bs;
            let within = pos % bs;
            let m = inode::map_block(&self.vol, i, lblk)?;
            let run_bytes = m.len.saturating_mul(bs) - within;
            let n = run_bytes.min((total - done) as u64) as usize;
            let dst = &mut buf[done..done + n];
            match m.kind {
                MapKind::Mapped(p) => self.vol.device().read_at(dst, p * bs + within)?,
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
        match i.file_type()? {
            FileType::Regular | FileType::Directory => {}
            FileType::Symlink if !self.is_fast_symlink(&i) => {}
            _ => return Ok(Vec::new()),
        }
        inode::extents(&self.vol, &i)
    }

    /// A symlink whose target lives in `i_block` (no data block), by the
    /// kernel's test: no blocks besides an xattr block.
    fn is_fast_symlink(&self, i: &Inode) -> bool {
        // The xattr block occupies a whole cluster (bigalloc) in i_blocks.
        let cluster = 1u64 << (10 + self.vol.sb.log_cluster_size.max(self.vol.sb.log_block_size));
        let ea_sectors = if i.file_acl != 0 { cluster / 512 } else { 0 };
        i.size < i.block.len() as u64 && i.blocks_512.saturating_sub(ea_sectors) == 0
    }

    /// The target of symlink `ino`.
    pub fn readlink(&self, ino: u32) -> Result<Vec<u8>> {
        let i = self.inode(ino)?;
        if i.file_type()? != FileType::Symlink {
            return Err(Error::Invalid(format!("inode {ino} is not a symlink")));
        }
        self.readlink_inode(&i)
    }

    fn readlink_inode(&self, i: &Inode) -> Result<Vec<u8>> {
        if i.size == 0 || i.size > MAX_SYMLINK_LEN {
            return Err(Error::corrupt(Structure::Symlink, 0, format!("inode {}: target length {}", i.ino, i.size)));
        }
        if self.is_fast_symlink(i) {
            return Ok(i.block[..i.size as usize].to_vec());
        }
        let mut v = vec![0u8; i.size as usize];
        let n = self.read_inode_data(i, 0, &mut v)?;
        v.truncate(n);
        Ok(v)
    }

    /// Names of the extended attributes of `ino`.
    pub fn list_xattrs(&self, ino: u32) -> Result<Vec<Vec<u8>>> {
        let i = self.inode(ino)?;
        Ok(xattr::list(&self.vol, &i)?.into_iter().map(|e| e.name).collect())
    }

    /// The value of extended attribute `name` of `ino`.
    pub fn get_xattr(&self, ino: u32, name: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        let i = self.inode(ino)?;
        xattr::get(&self.vol, &i, name.as_ref())
    }

    /// statfs(2): sizes and free counts, summed from the group descriptors.
    pub fn statfs(&self) -> StatFs {
        let sb = &self.vol.sb;
        let (free_blocks, free_inodes) = match (self.live(), self.alloc.get()) {
            (Some(rw), Some(a)) => (a.free_blocks(), u64::from(rw.ialloc.free_inodes())),
            _ => (
                self.vol.groups.iter().map(|g| u64::from(g.free_blocks_count)).sum(),
                self.vol.groups.iter().map(|g| u64::from(g.free_inodes_count)).sum(),
            ),
        };
        let ratio = 1u64 << (sb.log_cluster_size.saturating_sub(sb.log_block_size));
        // Blocks reserved for buffered data are as good as used (ext4's
        // s_dirtyclusters_counter).
        let reserved = self.live().map_or(0, |rw| rw.pages.account().reserved_blocks());
        let free_blocks = free_blocks.saturating_sub(reserved) * ratio;
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
