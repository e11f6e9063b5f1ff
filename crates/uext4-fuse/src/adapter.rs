//! The adapter: one `fuser::Filesystem` method per FUSE request, each a
//! thin call into the library.
//!
//! No state of our own besides the configuration: file handles encode
//! what the adapter must remember about an open file in their bits (see
//! [`FH_DIRECT`], [`FH_COUNTED`]), names and attributes come straight from
//! the library, so nothing here needs a lock. Permission checks are the
//! kernel's (`default_permissions`), as for ext4 in the kernel; what the
//! kernel leaves to the filesystem is done here: the owner of new inodes
//! (the caller, with the group of a setgid directory), hiding `trusted.`
//! attributes from non-root callers, and `access(2)` for kernels that ask.

use crate::conv::{self, attr, errno, from_fuse, is_servable, kind, to_fuse};
use crate::{KernelFeatures, MountConfig, OnError, Readdirplus};
use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileHandle, FopenFlags, Generation, INodeNo, InitFlags, IoctlFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyBmap, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};
use log::{debug, error, info, warn};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use uext4::fs::{FallocMode, RenameFlags as LibRename, SetAttr, XattrSetMode};
use uext4::{Error, FileType, Filesystem, Stat, Timestamp};

/// File handle bit: the file was opened with O_DIRECT; its I/O goes to
/// the library's direct-I/O path.
const FH_DIRECT: u64 = 1;
/// File handle bit: the open was counted with `Filesystem::open_inode`
/// (read-write mounts), so release must call `close_inode`.
const FH_COUNTED: u64 = 2;
/// File handle bits above these two: a counted open's id, the key of its
/// writeback-error cursor (each open file description sees each
/// writeback error of its file once from fsync, as on Linux).
const FH_ID_SHIFT: u32 = 2;

/// Upper bound on the buffer of one read request, whatever it asks.
const MAX_READ: u32 = 16 << 20;
/// Directory entries fetched from the library per step of a readdir.
const READDIR_BATCH: usize = 128;
/// Longest name ext4 stores.
const NAME_MAX: usize = 255;

const S_ISGID: u16 = 0o2000;
const S_IFLNK: u16 = 0o120000;

/// fallocate(2) mode bits.
const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;
const FALLOC_FL_ZERO_RANGE: i32 = 0x10;

/// lseek(2) whence values FUSE forwards.
const SEEK_DATA: i32 = 3;
const SEEK_HOLE: i32 = 4;

/// Replies with the error and returns from the method on `Err`.
macro_rules! tri {
    ($reply:ident, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(errno) => {
                $reply.error(errno);
                return;
            }
        }
    };
}

/// The FUSE adapter over a shared [`uext4::Filesystem`].
#[derive(Debug)]
pub struct Uext4Fuse {
    fs: Arc<Filesystem>,
    features: KernelFeatures,
    read_only: bool,
    on_error: OnError,
    /// Set by the first filesystem error under `errors=remount-ro`.
    errored: AtomicBool,
    /// Writeback-error cursor of each counted open, by file handle
    /// (Linux's `file->f_wb_err`).
    wb_cursors: Mutex<HashMap<u64, u64>>,
    next_fh: AtomicU64,
}

impl Uext4Fuse {
    /// An adapter serving `fs` with the cache lifetimes and options of `cfg`.
    pub fn new(fs: Arc<Filesystem>, cfg: &MountConfig) -> Uext4Fuse {
        let read_only = cfg.read_only || fs.is_read_only();
        Uext4Fuse {
            fs,
            features: cfg.kernel.clone(),
            read_only,
            on_error: cfg.errors,
            errored: AtomicBool::new(false),
            wb_cursors: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        }
    }

    /// Ok if changes are allowed: a read-write mount that has not met a
    /// filesystem error under `errors=remount-ro`.
    fn writable(&self) -> Result<(), Errno> {
        if self.read_only || self.errored.load(Ordering::Acquire) {
            Err(Errno::EROFS)
        } else {
            Ok(())
        }
    }

    /// The errno for a library error, logged: corruption and device errors
    /// as warnings, the ordinary ones (ENOENT, EEXIST, ...) for `debug`.
    /// Corruption and device errors (EIO, which includes a journal abort)
    /// are filesystem errors: recorded in the superblock's error fields
    /// (as ext4_error does) and handled as `errors=` says.
    fn fail(&self, op: &str, e: Error) -> Errno {
        if matches!(e, Error::Corrupt { .. } | Error::Checksum { .. } | Error::Io(_)) && !self.read_only {
            // A dead disk refuses this too; the error is logged below anyway.
            if let Err(re) = self.fs.record_error(&e, 0, op) {
                debug!("{op}: recording the error in the superblock: {re}");
            }
        }
        match e {
            Error::Corrupt { .. } | Error::Checksum { .. } | Error::Io(_) => match self.on_error {
                OnError::Continue => warn!("{op}: {e} (errors=continue)"),
                OnError::RemountRo => {
                    if !self.errored.swap(true, Ordering::AcqRel) && !self.read_only {
                        error!("{op}: {e}: refusing all changes from now on (errors=remount-ro)");
                    } else {
                        warn!("{op}: {e}");
                    }
                }
                OnError::Stop => {
                    error!("{op}: {e}: stopping at once (errors=panic); the journal is left for recovery");
                    // No destructor runs: nothing more reaches the image.
                    std::process::exit(2);
                }
            },
            Error::NotExt4(_) => warn!("{op}: {e}"),
            _ => debug!("{op}: {e}"),
        }
        errno(&e)
    }

    fn stat(&self, op: &str, ino: u32) -> Result<Stat, Errno> {
        self.fs.stat(ino).map_err(|e| self.fail(op, e))
    }

    fn generation(st: &Stat) -> Generation {
        Generation(u64::from(st.generation))
    }

    fn entry(&self, reply: ReplyEntry, st: &Stat) {
        let f = &self.features;
        reply.entry_with_ttls(&f.attr_ttl, &f.entry_ttl, &attr(st), Self::generation(st));
    }

    /// The prologue of every request that changes the entry `name` of
    /// `parent`: a writable mount, then the parent's inode number and a
    /// name ext4 can store, in that order (the errno of the first check
    /// that fails is the reply).
    fn entry_change<'n>(&self, parent: INodeNo, name: &'n OsStr) -> Result<(u32, &'n [u8]), Errno> {
        self.writable()?;
        Ok((from_fuse(parent)?, name_ok(name)?))
    }

    /// [`Self::entry_change`] for a request that makes a new inode, with
    /// the new inode's mode, uid and gid (see [`Self::owner`]).
    fn entry_create<'n>(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &'n OsStr,
        mode: u16,
        is_dir: bool,
    ) -> Result<NewEntry<'n>, Errno> {
        let (parent, name) = self.entry_change(parent, name)?;
        let (mode, uid, gid) = self.owner(req, parent, mode, is_dir)?;
        Ok(NewEntry { parent, name, mode, uid, gid })
    }

    /// Mode, uid and gid of a new inode made by `req` in `parent`, as the
    /// kernel's inode_init_owner: the caller's ids, but the group of a
    /// setgid directory, whose subdirectories inherit the setgid bit. (The
    /// kernel applied the umask to `mode` already: no FUSE_DONT_MASK.)
    fn owner(&self, req: &Request, parent: u32, mode: u16, is_dir: bool) -> Result<(u16, u32, u32), Errno> {
        let p = self.stat("create", parent)?;
        let (mut mode, mut gid) = (mode, req.gid());
        if p.mode & S_ISGID != 0 {
            gid = p.gid;
            if is_dir {
                mode |= S_ISGID;
            }
        }
        Ok((mode, req.uid(), gid))
    }

    /// Counts an open handle (read-write mounts) and builds the handle and
    /// the open flags of the reply.
    fn open_handle(&self, ino: u32, flags: i32) -> (FileHandle, FopenFlags) {
        let direct = flags & libc::O_DIRECT != 0;
        let mut fh = if direct { FH_DIRECT } else { 0 };
        if !self.read_only {
            match self.fs.open_inode(ino) {
                Ok(()) => {
                    fh |= FH_COUNTED | (self.next_fh.fetch_add(1, Ordering::Relaxed) << FH_ID_SHIFT);
                    let sample = self.fs.wb_err_sample(ino);
                    self.wb_cursors.lock().unwrap_or_else(|p| p.into_inner()).insert(fh, sample);
                }
                Err(e) => debug!("open_inode({ino}): {e}"),
            }
        }
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY;
        // Nothing to do at close: every write reached the library already
        // (with the kernel's writeback cache the kernel ignores this flag
        // and writes its dirty pages back at close, as it must).
        let mut fopen = FopenFlags::FOPEN_NOFLUSH;
        let f = &self.features;
        if f.kernel_cache {
            // Every change of the data goes through this mount, so the
            // kernel's pages are current: no reason to drop them at open.
            fopen |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        if (direct && f.direct_odirect) || f.direct_io || (writes && f.direct_writes) {
            // The kernel sends the I/O of this open straight to us, as the
            // caller gave it, and lets writes to one file run in parallel
            // (the library locks what it needs); without FOPEN_DIRECT_IO
            // it serializes buffered writes to a file under its inode
            // lock. Buffered opens stay on the library's buffered path:
            // uext4's page cache serves them. The kernel writes back and
            // drops its cached pages of every range written this way, so
            // read-only opens, which keep the kernel's page cache, and
            // shared mappings (FUSE_DIRECT_IO_ALLOW_MMAP) see the data.
            fopen |= FopenFlags::FOPEN_DIRECT_IO;
            if f.parallel_direct_writes {
                fopen |= FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
            }
        }
        let access = if writes { "" } else { " (read-only)" };
        debug!("open {ino}{access}: {fopen:?}");
        (FileHandle(fh), fopen)
    }

    fn is_direct(fh: FileHandle, flags: OpenFlags) -> bool {
        fh.0 & FH_DIRECT != 0 || flags.0 & libc::O_DIRECT != 0
    }

    fn fsync_ino(&self, op: &str, ino: INodeNo) -> Result<(), Errno> {
        let ino = from_fuse(ino)?;
        if self.read_only {
            return self.stat(op, ino).map(|_| ());
        }
        self.fs.fsync(ino).map_err(|e| self.fail(op, e))
    }

    /// The file type of a directory entry, from the entry or the inode.
    fn entry_kind(&self, e: &uext4::dir::DirEntry) -> fuser::FileType {
        match e.file_type {
            Some(t) => kind(t),
            None => self.fs.stat(e.ino).map_or(fuser::FileType::RegularFile, |st| kind(st.file_type)),
        }
    }

    /// Fills a readdir reply from `cookie` on; `add` returns true when the
    /// reply is full (that entry was not added).
    fn fill_dir(&self, ino: u32, cookie: u64, mut add: impl FnMut(&uext4::dir::DirEntry) -> bool) -> Result<(), Errno> {
        let mut cookie = cookie;
        let mut added = 0usize;
        loop {
            let batch = match self.fs.readdir(ino, cookie, READDIR_BATCH) {
                Ok(b) => b,
                // Entries already added are returned; the next call from
                // their cookie reports the error.
                Err(e) if added > 0 => {
                    debug!("readdir({ino}) after {added} entries: {e}");
                    return Ok(());
                }
                Err(e) => return Err(self.fail("readdir", e)),
            };
            let n = batch.len();
            for e in &batch {
                if is_servable(e.ino) {
                    if add(e) {
                        return Ok(());
                    }
                    added += 1;
                } else {
                    warn!("readdir({ino}): entry {:?} points at inode {}", String::from_utf8_lossy(&e.name), e.ino);
                }
                cookie = e.next_cookie;
            }
            if n < READDIR_BATCH {
                return Ok(());
            }
        }
    }

    fn xattr_reply(reply: ReplyXattr, size: u32, data: &[u8]) {
        let Ok(len) = u32::try_from(data.len()) else {
            reply.error(Errno::E2BIG);
            return;
        };
        if size == 0 {
            reply.size(len);
        } else if len > size {
            reply.error(Errno::ERANGE);
        } else {
            reply.data(data);
        }
    }
}

fn time(t: TimeOrNow) -> Timestamp {
    match t {
        TimeOrNow::Now => Timestamp::now(),
        TimeOrNow::SpecificTime(s) => conv::timestamp(s),
    }
}

fn name_ok(name: &OsStr) -> Result<&[u8], Errno> {
    let b = name.as_bytes();
    if b.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(b)
}

/// Where a new inode goes and who owns it: what
/// [`Uext4Fuse::entry_create`] checked and worked out.
struct NewEntry<'n> {
    parent: u32,
    name: &'n [u8],
    mode: u16,
    uid: u32,
    gid: u32,
}

impl fuser::Filesystem for Uext4Fuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let f = &self.features;
        if let Err(max) = config.set_max_write(f.max_write) {
            info!("max_write {} refused, the kernel's limit is {max}", f.max_write);
            let _ = config.set_max_write(max);
        }
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        let mut want = InitFlags::FUSE_BIG_WRITES
            | InitFlags::FUSE_ASYNC_DIO
            | InitFlags::FUSE_CACHE_SYMLINKS
            // Shared mappings of files opened with FOPEN_DIRECT_IO (write
            // opens under `direct_writes`, O_DIRECT opens): without it
            // mmap(MAP_SHARED) of such a file fails with ENODEV.
            | InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP;
        for (on, flag) in [
            (f.parallel_dirops, InitFlags::FUSE_PARALLEL_DIROPS),
            (f.readdirplus != Readdirplus::Off, InitFlags::FUSE_DO_READDIRPLUS),
            (f.readdirplus == Readdirplus::Auto, InitFlags::FUSE_READDIRPLUS_AUTO),
            (f.writeback_cache, InitFlags::FUSE_WRITEBACK_CACHE),
        ] {
            if on {
                want |= flag;
            }
        }
        // FUSE_ASYNC_READ (several reads of a file in flight, readahead
        // beside the caller's read) is requested by fuser itself, always.
        let have = config.capabilities();
        for flag in want.iter() {
            if have.contains(flag) {
                let _ = config.add_capabilities(flag);
            } else {
                info!("the kernel does not offer {flag:?}");
            }
        }
        if f.writeback_cache && !have.contains(InitFlags::FUSE_WRITEBACK_CACHE) {
            warn!("writeback_cache requested but the kernel does not support it");
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let parent = tri!(reply, from_fuse(parent));
        let name = tri!(reply, name_ok(name));
        let ino = match self.fs.lookup(parent, name) {
            Ok(ino) => ino,
            Err(Error::NotFound(_)) if !self.features.negative_ttl.is_zero() => {
                // A negative entry (node id 0): the kernel remembers the
                // name is absent. Every create or rename of a name goes
                // through this mount, and the kernel replaces the entry
                // then, so it cannot hide a file.
                let mut a = attr(&placeholder(0, None));
                a.ino = INodeNo(0);
                reply.entry_with_ttls(&Duration::ZERO, &self.features.negative_ttl, &a, Generation(0));
                return;
            }
            Err(e) => {
                reply.error(self.fail("lookup", e));
                return;
            }
        };
        if !is_servable(ino) {
            warn!("lookup: {:?} in {parent} points at inode {ino}", String::from_utf8_lossy(name));
            reply.error(Errno::from_i32(libc::EUCLEAN));
            return;
        }
        let st = tri!(reply, self.stat("lookup", ino));
        self.entry(reply, &st);
    }

    /// Nothing to drop: the adapter keeps no per-inode state (open files
    /// are counted by the library until release).
    fn forget(&self, _req: &Request, _ino: INodeNo, _nlookup: u64) {}

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let ino = tri!(reply, from_fuse(ino));
        let st = tri!(reply, self.stat("getattr", ino));
        reply.attr(&self.features.attr_ttl, &attr(&st));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        tri!(reply, self.writable());
        let ino = tri!(reply, from_fuse(ino));
        let change = SetAttr {
            mode: mode.map(|m| (m & 0o7777) as u16),
            uid,
            gid,
            size,
            atime: atime.map(time),
            mtime: mtime.map(time),
        };
        let st = tri!(reply, self.fs.setattr(ino, change).map_err(|e| self.fail("setattr", e)));
        reply.attr(&self.features.attr_ttl, &attr(&st));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let ino = tri!(reply, from_fuse(ino));
        let target = tri!(reply, self.fs.readlink(ino).map_err(|e| self.fail("readlink", e)));
        reply.data(&target);
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let n = tri!(reply, self.entry_create(req, parent, name, (mode & 0xffff) as u16, false));
        let dev = conv::decode_dev(rdev);
        let st =
            tri!(reply, self.fs.mknod(n.parent, n.name, n.mode, dev, n.uid, n.gid).map_err(|e| self.fail("mknod", e)));
        self.entry(reply, &st);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        let n = tri!(reply, self.entry_create(req, parent, name, (mode & 0o7777) as u16, true));
        let st = tri!(reply, self.fs.mkdir(n.parent, n.name, n.mode, n.uid, n.gid).map_err(|e| self.fail("mkdir", e)));
        self.entry(reply, &st);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (parent, name) = tri!(reply, self.entry_change(parent, name));
        tri!(reply, self.fs.unlink(parent, name).map_err(|e| self.fail("unlink", e)));
        reply.ok();
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (parent, name) = tri!(reply, self.entry_change(parent, name));
        tri!(reply, self.fs.rmdir(parent, name).map_err(|e| self.fail("rmdir", e)));
        reply.ok();
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let n = tri!(reply, self.entry_create(req, parent, link_name, S_IFLNK | 0o777, false));
        let target = target.as_os_str().as_bytes();
        let st = tri!(
            reply,
            self.fs.inodes().symlink(n.parent, n.name, target, n.uid, n.gid).map_err(|e| self.fail("symlink", e))
        );
        self.entry(reply, &st);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (parent, name) = tri!(reply, self.entry_change(parent, name));
        let (newparent, newname) = tri!(reply, self.entry_change(newparent, newname));
        let known = RenameFlags::RENAME_NOREPLACE | RenameFlags::RENAME_EXCHANGE;
        if !known.contains(flags) {
            // RENAME_WHITEOUT (overlayfs) is not implemented by the library.
            reply.error(Errno::EINVAL);
            return;
        }
        let lib = LibRename {
            noreplace: flags.contains(RenameFlags::RENAME_NOREPLACE),
            exchange: flags.contains(RenameFlags::RENAME_EXCHANGE),
        };
        tri!(reply, self.fs.inodes().rename(parent, name, newparent, newname, lib).map_err(|e| self.fail("rename", e)));
        reply.ok();
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let (newparent, newname) = tri!(reply, self.entry_change(newparent, newname));
        let ino = tri!(reply, from_fuse(ino));
        let st = tri!(reply, self.fs.link(ino, newparent, newname).map_err(|e| self.fail("link", e)));
        self.entry(reply, &st);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let ino = tri!(reply, from_fuse(ino));
        let st = tri!(reply, self.stat("open", ino));
        if st.file_type == FileType::Directory {
            reply.error(Errno::EISDIR);
            return;
        }
        let (fh, fopen) = self.open_handle(ino, flags.0);
        reply.opened(fh, fopen);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let ino = tri!(reply, from_fuse(ino));
        let mut buf = vec![0u8; size.min(MAX_READ) as usize];
        let r = if Self::is_direct(fh, flags) {
            self.fs.read_direct(ino, offset, &mut buf)
        } else {
            self.fs.inodes().read(ino, offset, &mut buf)
        };
        let n = tri!(reply, r.map_err(|e| self.fail("read", e)));
        reply.data(buf.get(..n).unwrap_or(&buf));
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        tri!(reply, self.writable());
        let ino = tri!(reply, from_fuse(ino));
        let r = if Self::is_direct(fh, flags) {
            self.fs.write_direct(ino, offset, data)
        } else {
            self.fs.inodes().write(ino, offset, data)
        };
        let n = tri!(reply, r.map_err(|e| self.fail("write", e)));
        reply.written(u32::try_from(n).unwrap_or(u32::MAX));
    }

    /// Data is written through to the device by every write: nothing to
    /// flush at close (durability is fsync's job, as on ext4).
    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let ino = tri!(reply, from_fuse(ino));
        if fh.0 & FH_COUNTED != 0 {
            self.wb_cursors.lock().unwrap_or_else(|p| p.into_inner()).remove(&fh.0);
            // The last close of an unlinked file deletes it.
            tri!(reply, self.fs.close_inode(ino).map_err(|e| self.fail("release", e)));
        }
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let cursor = self.wb_cursors.lock().unwrap_or_else(|p| p.into_inner()).get(&fh.0).copied();
        if let (Some(mut c), false) = (cursor, self.read_only) {
            let ino = tri!(reply, from_fuse(ino));
            let r = self.fs.fsync_file(ino, &mut c);
            // Only this description's cursor moves.
            if let Some(v) = self.wb_cursors.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&fh.0) {
                *v = (*v).max(c);
            }
            tri!(reply, r.map_err(|e| self.fail("fsync", e)));
            reply.ok();
            return;
        }
        tri!(reply, self.fsync_ino("fsync", ino));
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let ino = tri!(reply, from_fuse(ino));
        let st = tri!(reply, self.stat("opendir", ino));
        if st.file_type != FileType::Directory {
            reply.error(Errno::ENOTDIR);
            return;
        }
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let ino = tri!(reply, from_fuse(ino));
        let r = self.fill_dir(ino, offset, |e| {
            let kind = self.entry_kind(e);
            reply.add(to_fuse(e.ino), e.next_cookie, kind, OsStr::from_bytes(&e.name))
        });
        tri!(reply, r);
        reply.ok();
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let ino = tri!(reply, from_fuse(ino));
        let zero = Duration::ZERO;
        let ttl = self.features.entry_and_attr_ttl();
        let r = self.fill_dir(ino, offset, |e| match self.fs.stat(e.ino) {
            Ok(st) => reply.add(
                to_fuse(e.ino),
                e.next_cookie,
                OsStr::from_bytes(&e.name),
                &ttl,
                &attr(&st),
                Self::generation(&st),
            ),
            Err(err) => {
                // List the name anyway (as readdir on ext4 does); with no
                // cache lifetime the kernel asks again and gets the error.
                debug!("readdirplus: stat of inode {}: {err}", e.ino);
                let mut a = attr(&placeholder(e.ino, e.file_type));
                a.kind = self.entry_kind(e);
                reply.add(to_fuse(e.ino), e.next_cookie, OsStr::from_bytes(&e.name), &zero, &a, Generation(0))
            }
        });
        tri!(reply, r);
        reply.ok();
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        tri!(reply, self.fsync_ino("fsyncdir", ino));
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.fs.statfs();
        reply.statfs(
            s.blocks,
            s.free_blocks,
            s.avail_blocks,
            s.inodes,
            s.free_inodes,
            s.block_size,
            s.name_max,
            s.block_size,
        );
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        tri!(reply, self.writable());
        let ino = tri!(reply, from_fuse(ino));
        if position != 0 {
            reply.error(Errno::EINVAL);
            return;
        }
        let mode = match flags & (libc::XATTR_CREATE | libc::XATTR_REPLACE) {
            0 => XattrSetMode::Any,
            libc::XATTR_CREATE => XattrSetMode::Create,
            libc::XATTR_REPLACE => XattrSetMode::Replace,
            _ => {
                reply.error(Errno::EINVAL);
                return;
            }
        };
        tri!(reply, self.fs.set_xattr(ino, name.as_bytes(), value, mode).map_err(|e| self.fail("setxattr", e)));
        reply.ok();
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let ino = tri!(reply, from_fuse(ino));
        let name = name.as_bytes();
        if !visible_xattr(req, name) {
            reply.error(Errno::NO_XATTR);
            return;
        }
        let value = tri!(reply, self.fs.get_xattr(ino, name).map_err(|e| self.fail("getxattr", e)));
        Self::xattr_reply(reply, size, &value);
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let ino = tri!(reply, from_fuse(ino));
        let names = tri!(reply, self.fs.list_xattrs(ino).map_err(|e| self.fail("listxattr", e)));
        let mut buf = Vec::new();
        for n in names.iter().filter(|n| visible_xattr(req, n)) {
            buf.extend_from_slice(n);
            buf.push(0);
        }
        Self::xattr_reply(reply, size, &buf);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        tri!(reply, self.writable());
        let ino = tri!(reply, from_fuse(ino));
        tri!(reply, self.fs.remove_xattr(ino, name.as_bytes()).map_err(|e| self.fail("removexattr", e)));
        reply.ok();
    }

    /// Only asked by kernels that do not check permissions themselves
    /// (the mount always has `default_permissions`): the mode bits, with
    /// root passing read and write checks.
    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let ino = tri!(reply, from_fuse(ino));
        let st = tri!(reply, self.stat("access", ino));
        if mask.contains(AccessFlags::W_OK) && self.writable().is_err() {
            reply.error(Errno::EROFS);
            return;
        }
        let want = (mask.bits() & 0o7) as u16;
        let ok = if req.uid() == 0 {
            !mask.contains(AccessFlags::X_OK) || st.file_type == FileType::Directory || st.mode & 0o111 != 0
        } else {
            let bits = if req.uid() == st.uid {
                st.mode >> 6
            } else if req.gid() == st.gid {
                st.mode >> 3
            } else {
                st.mode
            } & 0o7;
            bits & want == want
        };
        if ok {
            reply.ok();
        } else {
            reply.error(Errno::EACCES);
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let n = tri!(reply, self.entry_create(req, parent, name, (mode & 0o7777) as u16, false));
        let st =
            tri!(reply, self.fs.create(n.parent, n.name, n.mode, n.uid, n.gid).map_err(|e| self.fail("create", e)));
        let (fh, fopen) = self.open_handle(st.ino, flags);
        let ttl = self.features.entry_and_attr_ttl();
        reply.created(&ttl, &attr(&st), Self::generation(&st), fh, fopen);
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        tri!(reply, self.writable());
        let ino = tri!(reply, from_fuse(ino));
        let fs = &self.fs;
        let r = match mode {
            0 => fs.fallocate(ino, FallocMode::Allocate, offset, length),
            FALLOC_FL_KEEP_SIZE => fs.fallocate(ino, FallocMode::KeepSize, offset, length),
            m if m == FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE => {
                fs.fallocate(ino, FallocMode::PunchHole, offset, length)
            }
            FALLOC_FL_ZERO_RANGE => fs.fallocate(ino, FallocMode::ZeroRange, offset, length),
            m if m == FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE => {
                // Zero what lies inside the file, preallocate the rest
                // without growing it.
                let size = tri!(reply, self.stat("fallocate", ino)).size;
                let Some(end) = offset.checked_add(length) else {
                    reply.error(Errno::EFBIG);
                    return;
                };
                if offset >= size {
                    fs.fallocate(ino, FallocMode::KeepSize, offset, length)
                } else if end <= size {
                    fs.fallocate(ino, FallocMode::ZeroRange, offset, length)
                } else {
                    fs.fallocate(ino, FallocMode::ZeroRange, offset, size - offset)
                        .and_then(|()| fs.fallocate(ino, FallocMode::KeepSize, size, end - size))
                }
            }
            // Collapse, insert, unshare, a punch without KEEP_SIZE.
            _ => {
                reply.error(Errno::EOPNOTSUPP);
                return;
            }
        };
        tri!(reply, r.map_err(|e| self.fail("fallocate", e)));
        reply.ok();
    }

    fn lseek(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        let ino = tri!(reply, from_fuse(ino));
        let Ok(offset) = u64::try_from(offset) else {
            reply.error(Errno::ENXIO);
            return;
        };
        let r = match whence {
            SEEK_DATA => self.fs.seek_data(ino, offset),
            SEEK_HOLE => self.fs.seek_hole(ino, offset),
            // SEEK_SET/CUR/END are the kernel's.
            _ => {
                reply.error(Errno::EINVAL);
                return;
            }
        };
        match tri!(reply, r.map_err(|e| self.fail("lseek", e))) {
            Some(pos) => reply.offset(i64::try_from(pos).unwrap_or(i64::MAX)),
            None => reply.error(Errno::ENXIO),
        }
    }

    /// ENOSYS: the kernel stops asking and copies through the page cache.
    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        _fh_in: FileHandle,
        _offset_in: u64,
        _ino_out: INodeNo,
        _fh_out: FileHandle,
        _offset_out: u64,
        _len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        tri!(reply, self.writable());
        reply.error(Errno::ENOSYS);
    }

    /// No ioctls (FS_IOC_GETFLAGS and friends): ENOTTY, as for an unknown
    /// request.
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        reply.error(Errno::ENOTTY);
    }

    /// Only used by fuseblk mounts.
    fn bmap(&self, _req: &Request, _ino: INodeNo, _blocksize: u32, _idx: u64, reply: ReplyBmap) {
        reply.error(Errno::ENOSYS);
    }
}

/// `trusted.` attributes are for CAP_SYS_ADMIN (approximated by uid 0, as
/// FUSE gives no capabilities); `system.data` (inline data) is never
/// listed, as in ext4.
fn visible_xattr(req: &Request, name: &[u8]) -> bool {
    if name == b"system.data" {
        return false;
    }
    !name.starts_with(b"trusted.") || req.uid() == 0
}

/// Attributes for an entry whose inode cannot be read (listed anyway).
fn placeholder(ino: u32, t: Option<FileType>) -> Stat {
    let t = t.unwrap_or(FileType::Regular);
    let zero = Timestamp { sec: 0, nsec: 0 };
    Stat {
        ino,
        file_type: t,
        mode: 0,
        nlink: 1,
        uid: 0,
        gid: 0,
        size: 0,
        blocks: 0,
        blksize: 4096,
        rdev: (0, 0),
        atime: zero,
        mtime: zero,
        ctime: zero,
        crtime: None,
        flags: 0,
        generation: 0,
        file_acl: 0,
        projid: 0,
    }
}
