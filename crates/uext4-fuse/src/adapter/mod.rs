//! The adapter: one [`crate::dispatch::Filesystem`] method per FUSE request, each a
//! thin call into the library.
//!
//! No state of our own besides the configuration (the kernel's lookup
//! counts are the library's: [`uext4::inode_api::FsCore::kernel_ref`]): file handles encode
//! what the adapter must remember about an open file in their bits (see
//! [`files::FH_DIRECT`], [`files::FH_COUNTED`]), names and attributes
//! come straight from the library, so nothing here needs a lock.
//! Permission checks are the kernel's (`default_permissions`, with
//! FUSE_POSIX_ACL the ACLs too), as for ext4 in the kernel; what the
//! kernel leaves to the filesystem is done here or in the library: the
//! owner, mode and inherited ACLs of new inodes (the library's `*_as`
//! methods with the caller's [`uext4::inode_api::Cred`]), the set-id bits a write
//! or truncate removes (FUSE_HANDLE_KILLPRIV_V2), hiding `trusted.`
//! attributes from non-root callers, and `access(2)` for kernels that ask.
//!
//! This module owns the adapter's state and what every request uses (the
//! read-only check, the error path and `errors=`), and the one
//! `impl Filesystem`: a thin method per request calling the
//! inherent `do_*` method that serves it, kept by request family in
//! [`init`] (what the session asks of the kernel), [`entries`] (lookup
//! and the requests that add, remove or move names), [`files`] (open
//! files and their data), [`attrs`] (attributes, extended attributes,
//! access, statfs) and [`dirs`] (reading directories).

use crate::conv::errno;
use crate::dispatch::Filesystem as FuseFilesystem;
use crate::kernel_config::KernelConfig;
use crate::notify::Notifier;
use crate::proto::request::{
    Access, Bmap, CopyFileRange, Create, Fallocate, Flush, Forget, Fsync, GetAttr, GetXattr, Ioctl, Link, ListXattr,
    Lookup, Lseek, Mkdir, Mknod, Open, Opendir, Read, Readdir, Readlink, Release, Releasedir, RemoveXattr, Rename,
    Rmdir, SetAttr, SetXattr, Statfs, Statx, Symlink, Syncfs, Tmpfile, Unlink, Write,
};
use crate::proto::types::{Errno, Generation, INodeNo, Request, WriteFlags};
use crate::reply::{
    ReplyAttr, ReplyBmap, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyStatx, ReplyWrite, ReplyXattr,
};
use crate::{KernelFeatures, MountConfig, OnError};
use log::{debug, error, warn};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use uext4::{Error, Filesystem, Stat};

/// Root's requests may allocate the blocks reserved for root and pass
/// quota limits, as CAP_SYS_RESOURCE lets a process do on ext4 (FUSE
/// passes no capabilities: uid 0 stands for it). Held by the requests
/// that allocate blocks or inodes, for as long as they run.
fn sys_resource(req: &Request) -> uext4::inode_api::SysResourceScope {
    uext4::inode_api::sys_resource(req.uid() == 0)
}

mod attrs;
mod dirs;
mod entries;
mod files;
mod init;
pub(crate) use init::{negotiate, MAX_BACKGROUND};
mod ioctl;
pub use ioctl::UEXT4_IOC_SYNC;

/// The FUSE adapter over a shared [`uext4::Filesystem`]: what
/// [`crate::Mount::new`] builds and serves, one library call per request.
/// Programs mount through [`crate::Mount`] and need not make one
/// themselves.
#[derive(Debug)]
pub struct Uext4Fuse {
    fs: Arc<Filesystem>,
    features: KernelFeatures,
    read_only: bool,
    on_error: OnError,
    /// Set by the first filesystem error under `errors=remount-ro`.
    errored: Arc<AtomicBool>,
    /// Set by FS_IOC_SHUTDOWN: every change fails with EIO.
    down: Arc<AtomicBool>,
    /// Writeback-error cursor of each counted open, by file handle
    /// (Linux's `file->f_wb_err`).
    wb_cursors: Arc<Mutex<HashMap<u64, u64>>>,
    next_fh: Arc<AtomicU64>,
    /// The session's notifier, set once the session exists: attribute
    /// changes the kernel does not expect (set-id bits a write removed)
    /// are pushed out of its cache through it.
    inval: Arc<std::sync::OnceLock<Notifier>>,
    /// With `transport=uring`: INIT asks for FUSE_OVER_IO_URING.
    pub(crate) want_uring: bool,
    /// Opens the kernel caches, by inode (`store_writes`).
    cached_opens: Arc<files::CachedOpens>,
    /// The library's [`uext4::FsCore::detected_errors`] that `errors=`
    /// has been applied to.
    errors_seen: Arc<AtomicU64>,
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
            errored: Arc::new(AtomicBool::new(false)),
            down: Arc::new(AtomicBool::new(false)),
            wb_cursors: Arc::new(Mutex::new(HashMap::new())),
            next_fh: Arc::new(AtomicU64::new(1)),
            inval: Arc::new(std::sync::OnceLock::new()),
            want_uring: false,
            cached_opens: Arc::new(files::CachedOpens::new()),
            errors_seen: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Shares `slot` as the place of the session's notifier (filled by
    /// the mount once the session exists).
    pub(crate) fn with_inval(mut self, slot: Arc<std::sync::OnceLock<Notifier>>) -> Uext4Fuse {
        self.inval = slot;
        self
    }

    /// Sends a reply once the kernel dropped `inval`'s pages (at once
    /// without a notifier: no session yet).
    pub(crate) fn inval_then(&self, inval: crate::notify::PageInval, done: crate::notify::Done) {
        let Some(n) = self.inval.get() else { return done() };
        // A whole-file invalidation (the file's last open without
        // O_DIRECT is closed): once done, the kernel holds none of its pages.
        let after: Option<crate::notify::Done> = (inval.len == 0).then(|| {
            let (opens, ino) = (self.cached_opens.clone(), inval.ino as u32);
            Box::new(move || opens.dropped_all(ino)) as crate::notify::Done
        });
        n.inval_then(inval, done, after);
    }

    /// Drops the kernel's cached attributes of `ino` (not its pages).
    fn inval_attrs(&self, ino: u32) {
        if let Some(n) = self.inval.get() {
            if let Err(e) = n.inval_inode(INodeNo(u64::from(ino)), -1, 0) {
                debug!("invalidating the attributes of inode {ino}: {e}");
            }
        }
    }

    /// Ok if changes are allowed: a read-write mount that has not met a
    /// filesystem error under `errors=remount-ro`.
    fn writable(&self) -> Result<(), Errno> {
        self.apply_detected_errors();
        if self.down.load(Ordering::Acquire) {
            return Err(Errno::EIO);
        }
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
    /// (as ext4_error does) and handled as `errors=` says. `ino` is the
    /// inode of the operation (0 for none: a sync of everything, FITRIM),
    /// recorded when the error names none itself, as the kernel's
    /// ext4_error_inode records the inode it was working on (the
    /// directory of a lookup that met a bad directory block).
    fn fail(&self, op: &str, ino: u32, e: Error) -> Errno {
        if matches!(e, Error::Corrupt { .. } | Error::Checksum { .. } | Error::Io(_)) && !self.read_only {
            // A dead disk refuses this too; the error is logged below anyway.
            if let Err(re) = self.fs.record_error(&e, ino, op) {
                debug!("{op}: recording the error in the superblock: {re}");
            }
        }
        match e {
            Error::Corrupt { .. } | Error::Checksum { .. } | Error::Io(_) => self.on_fs_error(op, &e),
            Error::NotExt4(_) => warn!("{op}: {e}"),
            _ => debug!("{op}: {e}"),
        }
        errno(&e)
    }

    /// Applies `errors=` to a filesystem error (already recorded in the
    /// superblock).
    fn on_fs_error(&self, op: &str, e: &dyn std::fmt::Display) {
        match self.on_error {
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
        }
    }

    /// Applies `errors=` to the errors the library met and worked around
    /// since the last change (a corrupt inode group it stopped allocating
    /// from; the superblock records them). Checked before each change: an
    /// atomic load when there is nothing new.
    fn apply_detected_errors(&self) {
        let n = self.fs.detected_errors();
        if n > self.errors_seen.load(Ordering::Acquire) && self.errors_seen.fetch_max(n, Ordering::AcqRel) < n {
            self.on_fs_error(
                "inode allocation",
                &"an inode bitmap called a live inode free (see the superblock's error record)",
            );
        }
    }

    /// FS_IOC_SHUTDOWN: the library goes down (journal aborted, left for
    /// the next open to recover) and this mount refuses every change with
    /// EIO from now on, as ext4 after a shutdown. A read-only mount only
    /// stops accepting changes, which it never did.
    fn shut_down(&self, mode: uext4::inode_api::ShutdownMode) -> Result<(), Errno> {
        if self.down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        if self.read_only {
            return Ok(());
        }
        match self.fs.shutdown_now(mode) {
            Ok(()) => {
                warn!("shut down ({mode:?}): no further changes; the journal is left for recovery");
                Ok(())
            }
            // No journal: the writes already made stand, later ones are
            // refused here.
            Err(Error::Unsupported(why)) => {
                warn!("shut down ({mode:?}): {why}; refusing further changes");
                Ok(())
            }
            Err(e) => Err(self.fail("shutdown", 0, e)),
        }
    }

    fn stat(&self, op: &str, ino: u32) -> Result<Stat, Errno> {
        self.fs.stat(ino).map_err(|e| self.fail(op, ino, e))
    }

    /// Counts the reference the kernel takes on the node of `ino` with
    /// the reply being built (the protocol's lookup count, kept by the
    /// library: [`uext4::inode_api::FsCore::kernel_ref`]). Not the root's: the
    /// kernel holds the root for the whole mount and never forgets it.
    /// True if the kernel held the node already (see
    /// [`uext4::inode_api::FsCore::kernel_ref`]; the root always).
    fn hand_out(&self, ino: u32) -> bool {
        ino == crate::conv::EXT4_ROOT || self.fs.kernel_ref(ino)
    }

    /// Drops `n` of the kernel's references to `ino` (see
    /// [`Self::hand_out`]); the last one of an unlinked inode deletes it.
    fn forget_ino(&self, ino: u32, n: u64) {
        if ino == crate::conv::EXT4_ROOT {
            return;
        }
        if let Err(e) = self.fs.kernel_forget(ino, n) {
            // No reply to carry it: logged, and handled as `errors=` says.
            let _ = self.fail("forget", ino, e);
        }
        if !self.fs.kernel_holds(ino) {
            // The kernel evicted its inode, and its pages with it.
            self.cached_opens.forgotten(ino);
        }
        if self.fs.memory_released() {
            trim_heap();
        }
    }

    fn generation(st: &Stat) -> Generation {
        Generation(u64::from(st.generation))
    }
}

/// Returns the allocator's free memory to the system once the kernel's
/// FORGETs have released a lot of per-node state (after `drop_caches` or
/// memory pressure evicted a walked tree): glibc keeps freed memory in its
/// heap, so the daemon's RSS would otherwise stay at its peak.
fn trim_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim has no preconditions; it only returns free
    // pages of the heap to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

impl FuseFilesystem for Uext4Fuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        self.do_init(config)
    }

    /// A panic while serving a request is an internal inconsistency, as
    /// an ext4_error in the kernel: recorded in the superblock as an I/O
    /// error (the caller was answered EIO) and handled as `errors=` says:
    /// by default no more changes (remount-ro), so that the mount does not
    /// go on writing over whatever the panic left half-done.
    fn panicked(&self, _req: &Request, op: &str, message: &str) {
        let e = Error::Io(std::io::Error::other(format!("internal error: a panic while serving it ({message})")));
        let _ = self.fail(op, 0, e);
    }

    fn lookup(&self, _req: &Request, lookup: &Lookup<'_>, reply: ReplyEntry) {
        self.do_lookup(lookup, reply);
    }

    /// The kernel dropped `nlookup` references to the node (FORGET, and
    /// each node of a BATCH_FORGET): counted down in the library, whose
    /// last one deletes an unlinked inode nobody has open.
    fn forget(&self, _req: &Request, forget: &Forget) {
        if let Ok(ino) = crate::conv::from_fuse(forget.ino) {
            self.forget_ino(ino, forget.nlookup);
        }
    }

    fn getattr(&self, _req: &Request, getattr: &GetAttr, reply: ReplyAttr) {
        self.do_getattr(getattr, reply);
    }

    /// FUSE_STATX: the attributes with the creation time (the kernel asks
    /// when a caller wants btime, `statx(2)` with STATX_BTIME).
    fn statx(&self, _req: &Request, statx: &Statx, reply: ReplyStatx) {
        self.do_statx(statx, reply);
    }

    fn setattr(&self, req: &Request, attr: &SetAttr, reply: ReplyAttr) {
        let _cap = sys_resource(req);
        self.do_setattr(req, attr, reply);
    }

    fn readlink(&self, _req: &Request, readlink: &Readlink, reply: ReplyData) {
        self.do_readlink(readlink, reply);
    }

    fn mknod(&self, req: &Request, mknod: &Mknod<'_>, reply: ReplyEntry) {
        let _cap = sys_resource(req);
        self.do_mknod(req, mknod, reply);
    }

    fn mkdir(&self, req: &Request, mkdir: &Mkdir<'_>, reply: ReplyEntry) {
        let _cap = sys_resource(req);
        self.do_mkdir(req, mkdir, reply);
    }

    fn unlink(&self, _req: &Request, unlink: &Unlink<'_>, reply: ReplyEmpty) {
        self.do_unlink(unlink, reply);
    }

    fn rmdir(&self, _req: &Request, rmdir: &Rmdir<'_>, reply: ReplyEmpty) {
        self.do_rmdir(rmdir, reply);
    }

    fn symlink(&self, req: &Request, symlink: &Symlink<'_>, reply: ReplyEntry) {
        let _cap = sys_resource(req);
        self.do_symlink(req, symlink, reply);
    }

    fn rename(&self, req: &Request, rename: &Rename<'_>, reply: ReplyEmpty) {
        let _cap = sys_resource(req);
        self.do_rename(req, rename, reply);
    }

    fn link(&self, req: &Request, link: &Link<'_>, reply: ReplyEntry) {
        let _cap = sys_resource(req);
        self.do_link(link, reply);
    }

    fn open(&self, _req: &Request, open: &Open, reply: ReplyOpen) {
        self.do_open(open, reply);
    }

    fn read(&self, _req: &Request, read: &Read, reply: ReplyData) {
        self.do_read(read, reply);
    }

    fn write(&self, req: &Request, write: &Write<'_>, reply: ReplyWrite) {
        // The kernel's writeback of its page cache (writeback_cache)
        // comes as uid 0 whoever wrote: no privilege for it.
        let _cap =
            uext4::inode_api::sys_resource(req.uid() == 0 && !write.write_flags.contains(WriteFlags::FUSE_WRITE_CACHE));
        self.do_write(req, write, reply);
    }

    /// Nothing to do at close: every write the kernel sent is in the
    /// library already (durability is fsync's job, as on ext4), and POSIX
    /// locks are the kernel's (no FUSE_POSIX_LOCKS), so no lock owner's
    /// locks need dropping here. ENOSYS tells the kernel so once for the
    /// connection (it stops sending FLUSH): with the writeback cache it
    /// would otherwise send one at every close of a written file, whatever
    /// FOPEN_NOFLUSH says, after writing the file's dirty pages back
    /// (which it still does). Write-back errors reach the closing caller
    /// through those WRITE replies.
    fn flush(&self, _req: &Request, _flush: &Flush, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    fn release(&self, _req: &Request, release: &Release, reply: ReplyEmpty) {
        self.do_release(release, reply);
    }

    fn fsync(&self, _req: &Request, fsync: &Fsync, reply: ReplyEmpty) {
        self.do_fsync(fsync, reply);
    }

    fn opendir(&self, _req: &Request, opendir: &Opendir, reply: ReplyOpen) {
        self.do_opendir(opendir, reply);
    }

    fn readdir(&self, _req: &Request, readdir: &Readdir, reply: ReplyDirectory) {
        self.do_readdir(readdir, reply);
    }

    fn readdirplus(&self, _req: &Request, readdir: &Readdir, reply: ReplyDirectoryPlus) {
        self.do_readdirplus(readdir, reply);
    }

    fn releasedir(&self, _req: &Request, _releasedir: &Releasedir, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, fsync: &Fsync, reply: ReplyEmpty) {
        self.do_fsyncdir(fsync, reply);
    }

    fn statfs(&self, _req: &Request, _statfs: &Statfs, reply: ReplyStatfs) {
        self.do_statfs(reply);
    }

    fn setxattr(&self, req: &Request, xattr: &SetXattr<'_>, reply: ReplyEmpty) {
        let _cap = sys_resource(req);
        self.do_setxattr(req, xattr, reply);
    }

    fn getxattr(&self, req: &Request, xattr: &GetXattr<'_>, reply: ReplyXattr) {
        self.do_getxattr(req, xattr, reply);
    }

    fn listxattr(&self, req: &Request, xattr: &ListXattr, reply: ReplyXattr) {
        self.do_listxattr(req, xattr, reply);
    }

    fn removexattr(&self, _req: &Request, xattr: &RemoveXattr<'_>, reply: ReplyEmpty) {
        self.do_removexattr(xattr, reply);
    }

    fn access(&self, req: &Request, access: &Access, reply: ReplyEmpty) {
        self.do_access(req, access, reply);
    }

    fn create(&self, req: &Request, create: &Create<'_>, reply: ReplyCreate) {
        let _cap = sys_resource(req);
        self.do_create(req, create, reply);
    }

    /// `open(dir, O_TMPFILE)`: an unnamed file (see [`Uext4Fuse::do_tmpfile`]).
    fn tmpfile(&self, req: &Request, tmpfile: &Tmpfile, reply: ReplyCreate) {
        self.do_tmpfile(req, tmpfile, reply);
    }

    fn fallocate(&self, req: &Request, fallocate: &Fallocate, reply: ReplyEmpty) {
        let _cap = sys_resource(req);
        tri!(reply, self.kill_privs(req, fallocate.ino, "fallocate"));
        self.do_fallocate(fallocate, reply);
    }

    fn lseek(&self, _req: &Request, lseek: &Lseek, reply: ReplyLseek) {
        self.do_lseek(lseek, reply);
    }

    /// Copies inside the engine ([`uext4::inode_api::FsCore::copy_file_range`]);
    /// the kernel checked the ranges and flushes and drops its cached
    /// pages of the destination around the request.
    fn copy_file_range(&self, req: &Request, copy: &CopyFileRange, reply: ReplyWrite) {
        let _cap = sys_resource(req);
        self.do_copy_file_range(copy, reply);
    }

    /// The inode flag ioctls, the project ioctls (FS_IOC_FSGETXATTR,
    /// FS_IOC_FSSETXATTR), FS_IOC_GETVERSION, FITRIM and FS_IOC_SHUTDOWN
    /// (see [`ioctl`]); ENOTTY for the others, as for an unknown request.
    fn ioctl(&self, req: &Request, ioctl: &Ioctl<'_>, reply: ReplyIoctl) {
        let _cap = sys_resource(req);
        self.do_ioctl(req, ioctl, reply);
    }

    /// FUSE_SYNCFS: this kernel sends it only for virtiofs (fs/fuse/inode.c,
    /// fuse_sync_fs), but a kernel that does gets what syncfs(2) promises.
    fn syncfs(&self, _req: &Request, _syncfs: &Syncfs, reply: ReplyEmpty) {
        tri!(reply, self.sync_all("syncfs"));
        reply.ok();
    }

    /// Only used by fuseblk mounts.
    fn bmap(&self, _req: &Request, _bmap: &Bmap, reply: ReplyBmap) {
        reply.error(Errno::ENOSYS);
    }
}
