//! The FUSE front end of uext4: serves a [`uext4::Filesystem`] to the
//! kernel through `/dev/fuse`.
//!
//! This crate is the only code of the project that knows about FUSE. The
//! adapter ([`Uext4Fuse`]) maps every request to one library call and
//! every library error through [`uext4::Error::errno`]; it keeps no lock of
//! its own (the library's `Filesystem` is `Send + Sync` and is shared
//! through an [`Arc`]), so the session's worker threads, each reading its
//! own cloned `/dev/fuse` descriptor, run requests in parallel.
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! use std::sync::{Arc, Mutex};
//! let fs = uext4::Filesystem::open_rw("disk.img").map_err(std::io::Error::other)?;
//! let fs = Arc::new(fs);
//! let mount = uext4_fuse::Mount::new(fs.clone(), "/mnt".as_ref(), &uext4_fuse::MountConfig::default())?;
//! let unmounter = mount.unmounter(); // give it to a signal handler
//! mount.run()?;                      // until `umount /mnt`
//! drop(unmounter);
//! let mut fs = Arc::try_unwrap(fs).expect("the session is over");
//! fs.unmount().map_err(std::io::Error::other)?;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

/// Replies with the error and returns from the method on `Err` (the
/// request handlers of the adapter and of the null backend; defined
/// before their modules, so that it is in scope in them).
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

mod adapter;
mod conv;
mod dirty_limit;
mod dispatch;
mod features;
pub mod fusermount;
mod kernel_config;
mod logging;
mod mount_sys;
mod mountinfo;
mod notify;
pub mod null;
pub mod proto;
mod reply;
mod session;
mod slow;
pub mod test_hooks;
mod uring;

pub use adapter::{Uext4Fuse, UEXT4_IOC_SYNC};
pub use features::{KernelFeatures, Readdirplus, MAX_WRITE_LIMIT, OPTIONS as FEATURE_OPTIONS};
pub use log::LevelFilter;
pub use logging::{init_log, LogTarget};
pub use uring::{unavailable_reason as uring_unavailable_reason, Transport, ENABLE_PARAM as URING_ENABLE_PARAM};

use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Mount flags passed to the kernel as they are (mount(8)'s generic
/// options). `nodev` and `nosuid` are the default, as for every FUSE mount.
/// A command-line front end checks `-o` options against it to tell these
/// from the daemon's own before filling [`MountConfig::kernel_flags`].
pub const KERNEL_FLAGS: &[&str] =
    &["dev", "nodev", "suid", "nosuid", "exec", "noexec", "atime", "noatime", "sync", "async", "dirsync"];

/// How to mount: passed to [`Mount::new`] (and [`Mount::new_null`]).
/// `MountConfig::default()` is what `uext4 mount IMAGE DIR` does without
/// options; set the fields the mount's `-o` options name.
#[derive(Debug, Clone)]
pub struct MountConfig {
    /// Mount read-only (the kernel refuses writes with EROFS). The
    /// filesystem should then be opened read-only too.
    pub read_only: bool,
    /// Let other users than the mounting one use the mount (`allow_other`).
    /// Permissions are checked by the kernel (`default_permissions`).
    pub allow_other: bool,
    /// Threads serving requests (`threads=N`): on `/dev/fuse` the
    /// workers, each with its own descriptor (default
    /// [`default_threads`]); on io_uring the pool that serves the slow
    /// requests of every queue (syncs, fallocate, copy_file_range, large
    /// reads and writes, reads that miss the cache; default 2), the
    /// queues themselves being one thread per CPU, as the kernel's
    /// protocol fixes. `None`: each transport's default.
    pub threads: Option<usize>,
    /// The FUSE features negotiated with the kernel and answered at open.
    pub kernel: KernelFeatures,
    /// Shown as the mount's source in /proc/mounts (the image path).
    pub fsname: String,
    /// Generic mount flags from [`KERNEL_FLAGS`]. `sync` and `dirsync`
    /// here set only the kernel's flags (with `sync` it puts O_DSYNC on
    /// every WRITE, which the adapter honours); the namespace changes they
    /// promise to make durable are the engine's: open the filesystem with
    /// `uext4::MountOptions::sync` / `dirsync` too, as `uext4 mount` does.
    pub kernel_flags: Vec<String>,
    /// What a filesystem error (corrupt or badly checksummed metadata)
    /// does, as ext4's `errors=`.
    pub errors: OnError,
    /// How requests reach the daemon (`transport=auto|uring|dev`).
    pub transport: Transport,
}

/// ext4's `errors=` behaviours, for an error that shows the filesystem
/// itself is inconsistent (corrupt or badly checksummed metadata). A
/// journal failure always stops writing, whatever this says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnError {
    /// Report the error to the operation and go on (`errors=continue`).
    Continue,
    /// Refuse every later change with EROFS (`errors=remount-ro`).
    #[default]
    RemountRo,
    /// Stop the daemon at once, without unmounting cleanly, so the image
    /// keeps its journal for recovery (`errors=panic`; the kernel would
    /// panic the machine).
    Stop,
}

impl std::str::FromStr for OnError {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "continue" => Ok(OnError::Continue),
            "remount-ro" => Ok(OnError::RemountRo),
            "panic" => Ok(OnError::Stop),
            v => Err(format!("errors={v}: expected continue, remount-ro or panic")),
        }
    }
}

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            read_only: false,
            allow_other: false,
            threads: None,
            kernel: KernelFeatures::default(),
            fsname: "uext4".into(),
            kernel_flags: Vec::new(),
            errors: OnError::default(),
            transport: Transport::default(),
        }
    }
}

/// `/dev/fuse` worker threads by default: one per CPU, at least 4
/// (requests block on the device) and at most 16. What
/// [`MountConfig::threads`] `None` means on `/dev/fuse`; call it to show
/// the number a mount will use.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(4, |n| n.get()).clamp(4, 16)
}

/// What the transports need of a request handler besides its requests:
/// the uext4 adapter ([`Uext4Fuse`]) and the null backend
/// ([`null::NullFs`], the protocol's ceiling) are both served through the
/// same handshake, dispatcher, transports and threads.
pub(crate) trait Backend: dispatch::Filesystem + Send + Sync + 'static {
    /// INIT is to ask for FUSE_OVER_IO_URING (the rings are ready).
    fn set_want_uring(&mut self, on: bool);
    /// A small READ served on the io_uring queue thread that received it
    /// when it needs no waiting (`None`: hand it to the pool, which
    /// serves it through [`dispatch::Filesystem::read`]). The default
    /// never does.
    fn read_fast(&self, read: &proto::request::Read, buf: &mut [u8]) -> Option<Result<usize, proto::types::Errno>> {
        let _ = (read, buf);
        None
    }
    /// Sends a reply that must wait until the kernel dropped `inval`'s
    /// pages (`done` sends it): on a thread that serves no request, never
    /// on the caller's (see [`notify::Notifier::inval_then`]). The default
    /// sends it at once.
    fn after_inval(&self, inval: notify::PageInval, done: notify::Done) {
        let _ = inval;
        done();
    }
}

impl Backend for Uext4Fuse {
    fn set_want_uring(&mut self, on: bool) {
        self.want_uring = on;
    }
    fn read_fast(&self, read: &proto::request::Read, buf: &mut [u8]) -> Option<Result<usize, proto::types::Errno>> {
        // The adapter's own (inherent) method: the page cache alone.
        Uext4Fuse::read_fast(self, read, buf)
    }
    fn after_inval(&self, inval: notify::PageInval, done: notify::Done) {
        self.inval_then(inval, done);
    }
}

/// The handler a [`Mount`] serves.
enum Served {
    Ext4(Arc<Uext4Fuse>),
    Null(Arc<null::NullFs>),
}

/// A mounted filesystem whose requests are not served yet: [`Mount::run`]
/// serves them until the mount goes away.
pub struct Mount {
    adapter: Served,
    dev: Arc<OwnedFd>,
    /// Workers read clones of `dev` (not when `fusermount3` mounted:
    /// cloning opens /dev/fuse again, which is what we may not do).
    clone_fd: bool,
    threads: usize,
    negotiated: session::Negotiated,
    unmounter: Unmounter,
    /// The io_uring transport's threads, when it runs.
    uring: Option<uring::Running>,
    /// Unmounts when the session ends while the mount is still there.
    _auto_unmount: AutoUnmount,
}

impl std::fmt::Debug for Mount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mount").field("mountpoint", &self.unmounter.shown).finish_non_exhaustive()
    }
}

/// The mount a session made, until someone unmounts it: taken by
/// [`Unmounter::unmount`], else unmounted when the [`Mount`] is dropped
/// (after [`Mount::run`], or without it), as libfuse does at the end of
/// its session: a connection aborted through /sys/fs/fuse/connections
/// leaves its mount behind.
#[derive(Debug)]
struct AutoUnmount {
    handle: Arc<Mutex<Option<Arc<CString>>>>,
    shown: PathBuf,
}

impl Drop for AutoUnmount {
    fn drop(&mut self) {
        let taken = self.handle.lock().map(|mut h| h.take()).unwrap_or(None);
        if let Some(path) = taken {
            mount_sys::unmount_quietly(&path, &self.shown);
        }
    }
}

impl Mount {
    /// Mounts `fs` on `mountpoint` (mount(2) and the INIT handshake; as
    /// an ordinary user through the setuid `fusermount3`, see
    /// [`fusermount`]).
    pub fn new(fs: Arc<uext4::Filesystem>, mountpoint: &Path, cfg: &MountConfig) -> io::Result<Mount> {
        // The adapter's notifier, known once the connection exists.
        let inval = Arc::new(std::sync::OnceLock::new());
        let adapter = Uext4Fuse::new(fs, cfg).with_inval(inval.clone());
        Self::start(adapter, inval, mountpoint, cfg, Served::Ext4)
    }

    /// Mounts the null backend ([`null::NullFs`]: an in-memory tree and
    /// no engine) on `mountpoint` through the same handshake, options,
    /// transports and threads as [`Mount::new`]: the ceiling the FUSE
    /// protocol and its transports set for uext4 on each workload.
    pub fn new_null(fs: null::NullFs, mountpoint: &Path, cfg: &MountConfig) -> io::Result<Mount> {
        Self::start(fs, Arc::new(std::sync::OnceLock::new()), mountpoint, cfg, Served::Null)
    }

    /// The mount and handshake of every backend: `inval` is filled with
    /// the session's notifier once the connection exists, `wrap` makes
    /// the backend the mount's.
    fn start<F: Backend>(
        mut adapter: F,
        inval: Arc<std::sync::OnceLock<notify::Notifier>>,
        mountpoint: &Path,
        cfg: &MountConfig,
        wrap: fn(Arc<F>) -> Served,
    ) -> io::Result<Mount> {
        let mountpoint = mountpoint.canonicalize()?;
        let path = Arc::new(
            CString::new(mountpoint.as_os_str().as_bytes())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mountpoint path contains NUL"))?,
        );
        // The io_uring transport is asked for at INIT only when its rings
        // could be made first (see the uring module).
        let prepared = match cfg.transport {
            Transport::Dev => None,
            // A NOTIFY_STORE waits for the kernel's lock on each page it
            // stores, which a reader holds while its READ waits to be
            // served; on io_uring that READ can be queued behind the
            // storing WRITE on the same queue thread (a deadlock), while
            // /dev/fuse has other workers to serve it.
            Transport::Uring | Transport::Auto if cfg.kernel.store_writes => {
                let m = "store_writes needs the /dev/fuse transport (its page stores could wait for READs \
                         queued behind them on an io_uring queue); using /dev/fuse";
                if cfg.transport == Transport::Uring {
                    log::warn!("transport=uring: {m}");
                } else {
                    log::info!("transport=auto: {m}");
                }
                None
            }
            Transport::Auto => match uring::unavailable_reason() {
                Some(why) => {
                    log::info!("transport=auto: {why}; using /dev/fuse");
                    None
                }
                None => uring::prepare(cfg.threads.unwrap_or(uring::POOL_THREADS))
                    .map_err(|e| log::warn!("transport=auto: cannot set up the rings ({e}); using /dev/fuse"))
                    .ok(),
            },
            Transport::Uring => match uring::unavailable_reason() {
                Some(why) => {
                    log::warn!("transport=uring: {why}; using /dev/fuse");
                    None
                }
                None => match uring::prepare(cfg.threads.unwrap_or(uring::POOL_THREADS)) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        log::warn!("transport=uring: cannot set up the rings ({e}); using /dev/fuse");
                        None
                    }
                },
            },
        };
        let spec = mount_sys::MountSpec {
            fsname: cfg.fsname.clone(),
            read_only: cfg.read_only,
            allow_other: cfg.allow_other,
            kernel_flags: cfg.kernel_flags.clone(),
        };
        log::info!("mounting {}", mountpoint.display());
        let (dev, via_helper) = mount_sys::mount(&mountpoint, &spec)?;
        let handle = Arc::new(Mutex::new(Some(path.clone())));
        // From here on a failure unmounts again (the guard's drop).
        let auto_unmount = AutoUnmount { handle: handle.clone(), shown: mountpoint.clone() };
        let dev = Arc::new(dev);
        adapter.set_want_uring(prepared.is_some());
        let mut negotiated = session::handshake(&dev, &mut adapter)?;
        // SAFETY: geteuid has no preconditions.
        negotiated.owner = (!cfg.allow_other).then(|| unsafe { libc::geteuid() });
        negotiated.writes_notify = cfg.kernel.store_writes;
        let _ = inval.set(notify::Notifier::new(dev.clone()));
        if negotiated.granted.contains(proto::types::InitFlags::FUSE_WRITEBACK_CACHE) && !cfg.kernel.strict_dirty_limit
        {
            match dirty_limit::relax(&mountpoint) {
                Ok(()) => log::info!("writeback_cache: the mount's dirty pages count against the global dirty limits"),
                Err(e) => log::info!(
                    "writeback_cache: keeping the kernel's strict dirty limit of FUSE mounts ({e}): \
                     buffered writes beyond about 1% of the dirty threshold wait for writeback"
                ),
            }
        }
        let adapter = Arc::new(adapter);
        let granted = negotiated.granted.contains(proto::types::InitFlags::FUSE_OVER_IO_URING);
        let uring = match prepared {
            Some(p) if granted => match uring::start(p, &dev, adapter.clone(), negotiated, &mountpoint) {
                Ok(r) => Some(r),
                Err(e) => {
                    log::warn!("transport=uring: {e}; using /dev/fuse");
                    None
                }
            },
            Some(_) => {
                log::warn!("transport=uring: the kernel did not offer FUSE_OVER_IO_URING at INIT; using /dev/fuse");
                None
            }
            None => None,
        };
        // Under io_uring too: FORGET and INTERRUPT come through /dev/fuse,
        // and so does everything if the kernel refuses the ring later.
        let threads = cfg.threads.unwrap_or_else(default_threads).max(1);
        if uring.is_none() {
            log::info!("transport: /dev/fuse, {threads} workers");
        }
        Ok(Mount {
            adapter: wrap(adapter),
            dev,
            clone_fd: !via_helper,
            threads,
            negotiated,
            uring,
            unmounter: Unmounter { handle, path, shown: mountpoint },
            _auto_unmount: auto_unmount,
        })
    }

    /// Something that unmounts this mount from another thread (a signal
    /// handler thread), which makes [`Mount::run`] return.
    pub fn unmounter(&self) -> Unmounter {
        self.unmounter.clone()
    }

    /// Serves requests until the filesystem is unmounted (`umount`,
    /// `fusermount3 -u`, [`Unmounter::unmount`]) or the connection is
    /// aborted. The library's filesystem is not unmounted here: the caller
    /// does that once this returns (the adapter's reference is gone then).
    pub fn run(self) -> io::Result<()> {
        let r = match &self.adapter {
            Served::Ext4(a) => session::run(a.clone(), self.dev.clone(), self.clone_fd, self.threads, self.negotiated),
            Served::Null(a) => session::run(a.clone(), self.dev.clone(), self.clone_fd, self.threads, self.negotiated),
        };
        // The kernel has torn the ring down with the connection; the queue
        // threads end, dropping their adapters.
        if let Some(u) = self.uring {
            u.join();
        }
        r
    }
}

/// Unmounts a mount point (see [`Mount::unmounter`]): hand it to the
/// thread that handles SIGINT/SIGTERM, so that a signal ends
/// [`Mount::run`] with a clean unmount instead of killing the daemon with
/// its journal dirty.
#[derive(Debug, Clone)]
pub struct Unmounter {
    /// The mount's auto-unmount handle, taken once unmounted here.
    handle: Arc<Mutex<Option<Arc<CString>>>>,
    path: Arc<CString>,
    shown: PathBuf,
}

/// What [`Unmounter::unmount`] did: match on it to tell the user whether
/// the mount is gone now or will go when its last file is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmounted {
    /// Unmounted.
    Now,
    /// The mount was busy: it was detached (`umount -l`) and goes away,
    /// ending the session, when the last file in it is closed.
    Lazily,
    /// It was not mounted (any more).
    NotMounted,
}

impl Unmounter {
    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// umount(2); if the mount is busy, a lazy unmount (MNT_DETACH). As an
    /// ordinary user (EPERM) through `fusermount3 -u`, as the mount was
    /// made.
    pub fn unmount(&self) -> io::Result<Unmounted> {
        let done = match umount2(&self.path, 0) {
            Ok(()) => Unmounted::Now,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                umount2(&self.path, libc::MNT_DETACH)?;
                Unmounted::Lazily
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Unmounted::NotMounted,
            // Not privileged: the setuid helper unmounts what it mounted.
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                let p = self.shown.as_os_str();
                if fusermount::unmount(p, false)? {
                    Unmounted::Now
                } else if fusermount::unmount(p, true)? {
                    Unmounted::Lazily
                } else {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        };
        // Nothing left for the end of the session to unmount.
        if let Ok(mut h) = self.handle.lock() {
            h.take();
        }
        Ok(done)
    }
}

fn umount2(path: &CString, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: `path` is a valid NUL-terminated string that outlives the
    // call; umount2 does not keep the pointer.
    let r = unsafe { libc::umount2(path.as_ptr(), flags) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
