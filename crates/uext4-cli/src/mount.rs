//! `uext4 mount IMAGE MOUNTPOINT [-o OPTIONS] [--foreground]`: serves an
//! image through FUSE (the `uext4-fuse` crate) until it is unmounted.
//!
//! Life of a mount:
//! 1. The options are parsed and the paths checked in the calling process.
//! 2. Unless `--foreground`: fork, `setsid`, fork again (the daemon is no
//!    session leader and never gets a terminal), stdio to /dev/null, cwd
//!    `/`. The first process waits on a pipe until the daemon reports that
//!    the mount is up (exit 0) or why it failed (the message on its stderr,
//!    exit 1), so `uext4 mount` behaves like mount(8).
//! 3. SIGINT, SIGTERM and SIGHUP are blocked in every thread and waited
//!    for by one thread, which unmounts (lazily if the mount is busy).
//! 4. The image is locked (`flock`: exclusive read-write, shared
//!    read-only), opened with the library, mounted, and served.
//! 5. Once the kernel lets go (`umount`, `fusermount3 -u`, a signal), the
//!    library's `Filesystem::unmount` commits, checkpoints and clears
//!    `needs_recovery`; only then does the process exit and the lock go,
//!    so a waiter can take the lock to know the image is clean.
//!
//! It also serves as a mount helper (see [`helper_main`]): as
//! `mount.fuse.uext4` (mount(8) runs `/sbin/mount.fuse.uext4 IMAGE MNT -o
//! OPTS` for `mount -t fuse.uext4 IMAGE MNT`), and in the form
//! `uext4 IMAGE MNT -o OPTS` that fuse3's `mount.fuse3` runs for
//! `mount -t fuse.uext4` when no such helper exists.

use crate::util::{eprint_line, unescape_mount_field, CliError, CliResult};
use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use uext4::{DataPathConfig, LockPolicy};
use uext4::{Filesystem, MountOptions};
use uext4_fuse::{MountConfig, Unmounted};

/// What `-o` asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MountOpts {
    /// `ro`.
    pub read_only: bool,
    /// `commit=SECONDS`.
    pub commit: Option<Duration>,
    /// `allow_other` (true) or `noallow_other` (false); neither: on when
    /// root mounts ([`MountOpts::allows_other`]).
    pub allow_other: Option<bool>,
    /// `lock_policy=`, `dio_unwritten_no_handle=`, `dio_unaligned_concurrent=`.
    pub data: DataPathConfig,
    /// `threads=N`.
    pub threads: Option<usize>,
    /// The FUSE features (`max_write=`, `direct_writes`, `writeback_cache`,
    /// timeouts, ...): see [`uext4_fuse::KernelFeatures`].
    pub kernel: uext4_fuse::KernelFeatures,
    /// `debug` (implies foreground, and `log=debug`).
    pub debug: bool,
    /// `log=error|warn|info|debug`: how much the daemon reports.
    pub log_level: Option<uext4_fuse::LevelFilter>,
    /// `logfile=PATH`: where a background daemon reports (else syslog).
    pub log_file: Option<PathBuf>,
    /// Generic mount flags passed to the kernel (`noexec`, `noatime`, ...).
    pub kernel_flags: Vec<String>,
    /// `fsname=`: the source shown in /proc/mounts (default: the image).
    pub fsname: Option<String>,
    /// `cache=SIZE`: the page-cache budget (default: the library's).
    pub cache_bytes: Option<u64>,
    /// `errors=continue|remount-ro|panic` (default remount-ro).
    pub errors: uext4_fuse::OnError,
    /// `transport=auto|uring|dev`.
    pub transport: uext4_fuse::Transport,
    /// `relatime` (default), `strictatime`, `noatime` (`atime`: relatime
    /// again): when reads update access times, decided by the engine
    /// (the kernel leaves atime of FUSE files to the daemon).
    pub atime: uext4::AtimeMode,
    /// `[no]lazytime`: pending access times wait up to 24 hours (else the
    /// commit interval) unless the inode changes or is synced first.
    pub lazytime: bool,
    /// `[no]diratime`: whether directory listings update access times.
    pub nodiratime: bool,
    /// `norecovery`/`noload`: with `ro`, the journal is not replayed.
    pub norecovery: bool,
    /// Run as mount(8)'s helper, which behaves as mount(8) does with
    /// the kernel's ext4: what opening the image noticed (a journal
    /// replayed, orphans finished) goes to the daemon's log, not to the
    /// caller's stderr (the kernel tells only its log; scripts compare
    /// mount's output), and an image that is mounted already is mounted
    /// again at the new place (a bind mount of the first: one
    /// filesystem, as a block device mounted twice shares its superblock).
    pub as_helper: bool,
}

impl MountOpts {
    /// Whether other users than the mounting one may use the mount: as
    /// asked, else when root mounts. A filesystem root mounts is a system
    /// filesystem, used by everyone, as ext4 is; the kernel checks every
    /// access against the files' permissions (default_permissions), so
    /// letting others in gives them what ext4 would, no more. Others'
    /// mounts stay private unless asked (the kernel allows it them only
    /// with user_allow_other in /etc/fuse.conf).
    pub fn allows_other(&self) -> bool {
        // SAFETY: geteuid has no preconditions.
        self.allow_other.unwrap_or_else(|| unsafe { libc::geteuid() } == 0)
    }
}

/// Options mount(8), fstab and mount.fuse3 pass that mean nothing here.
const IGNORED: &[&str] =
    &["defaults", "auto", "noauto", "user", "nouser", "users", "_netdev", "nofail", "default_permissions"];

fn on_off(key: &str, v: &str) -> Result<bool, String> {
    match v {
        "on" | "1" | "yes" => Ok(true),
        "off" | "0" | "no" => Ok(false),
        _ => Err(format!("{key}={v}: expected on or off")),
    }
}

/// Parses `-o` values (each a comma-separated list; later ones win).
pub fn parse_options(lists: &[String]) -> Result<MountOpts, String> {
    let mut o = MountOpts::default();
    let mut unknown = Vec::new();
    for opt in lists.iter().flat_map(|l| l.split(',')).map(str::trim).filter(|s| !s.is_empty()) {
        let (key, val) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        };
        match (key, val) {
            ("ro", None) => o.read_only = true,
            ("rw", None) => o.read_only = false,
            ("allow_other", None) => o.allow_other = Some(true),
            ("noallow_other", None) => o.allow_other = Some(false),
            ("debug", None) => o.debug = true,
            ("log", Some(v)) => {
                o.log_level = Some(match v {
                    "error" => uext4_fuse::LevelFilter::Error,
                    "warn" => uext4_fuse::LevelFilter::Warn,
                    "info" => uext4_fuse::LevelFilter::Info,
                    "debug" => uext4_fuse::LevelFilter::Debug,
                    _ => return Err(format!("log={v}: expected error, warn, info or debug")),
                })
            }
            ("logfile", Some(v)) if !v.is_empty() => o.log_file = Some(PathBuf::from(v)),
            ("commit", Some(v)) => {
                let s: u64 = v.parse().map_err(|_| format!("commit={v}: expected a number of seconds"))?;
                // As ext4: 0 means the default.
                o.commit = (s > 0).then(|| Duration::from_secs(s.min(24 * 3600)));
            }
            ("threads", Some(v)) => match v.parse::<usize>() {
                Ok(n) if (1..=256).contains(&n) => o.threads = Some(n),
                _ => return Err(format!("threads={v}: expected a number from 1 to 256")),
            },
            ("lock_policy", Some(v)) => o.data.lock_policy = v.parse::<LockPolicy>()?,
            ("dio_unwritten_no_handle", Some(v)) => o.data.dio_unwritten_no_handle = on_off(key, v)?,
            ("dio_unaligned_concurrent", Some(v)) => o.data.dio_unaligned_concurrent = on_off(key, v)?,
            ("auto_da_alloc", None) => o.data.auto_da_alloc = true,
            ("noauto_da_alloc", None) => o.data.auto_da_alloc = false,
            ("fsname", Some(v)) => o.fsname = Some(v.to_string()),
            ("cache", Some(v)) => {
                o.cache_bytes = Some(crate::util::parse_size(v).map_err(|e| format!("cache={v}: {e}"))?)
            }
            // The only journaling mode, and checksums whenever the journal
            // has the feature: accepted as ext4 accepts them.
            ("data", Some("ordered")) | ("journal_checksum", None) => {}
            ("data", Some(v)) => return Err(format!("data={v}: only data=ordered is supported")),
            ("errors", Some(v)) => o.errors = v.parse()?,
            ("transport", Some(v)) => o.transport = v.parse()?,
            ("relatime" | "strictatime", None) => o.atime = key.parse()?,
            ("lazytime", None) => o.lazytime = true,
            ("nolazytime", None) => o.lazytime = false,
            ("norecovery" | "noload", None) => o.norecovery = true,
            ("nodiratime", None) => o.nodiratime = true,
            ("diratime", None) => o.nodiratime = false,
            (k, v) if o.kernel.set(k, v)? => {}
            // mount.fuse3 may add the subtype; it is always uext4.
            ("subtype", Some(_)) => {}
            (k, None) if uext4_fuse::KERNEL_FLAGS.contains(&k) => {
                // The engine decides atimes; the kernel still gets the
                // flag (it shows in /proc/mounts).
                match k {
                    "noatime" => o.atime = uext4::AtimeMode::Noatime,
                    "atime" => o.atime = uext4::AtimeMode::Relatime,
                    _ => {}
                }
                // As mount(8): of `suid` and `nosuid` (and the other
                // pairs) the last one given wins.
                let opposite = match k {
                    "sync" => "async".to_string(),
                    "async" => "sync".to_string(),
                    _ => k.strip_prefix("no").map_or_else(|| format!("no{k}"), str::to_string),
                };
                o.kernel_flags.retain(|f| *f != opposite && f != k);
                o.kernel_flags.push(k.to_string())
            }
            (k, None) if IGNORED.contains(&k) => {}
            (k, _) if k.starts_with("x-") || k == "comment" => {}
            _ => unknown.push(opt.to_string()),
        }
    }
    if !unknown.is_empty() {
        return Err(format!(
            "unknown mount option{} {} (known: ro, rw, commit=SECONDS, [no]allow_other, lock_policy=seeds|exclusive, \
             dio_unwritten_no_handle=on|off, dio_unaligned_concurrent=on|off, [no]auto_da_alloc, threads=N, debug, log=LEVEL, logfile=PATH, \
             cache=SIZE, data=ordered, journal_checksum, errors=continue|remount-ro|panic, transport=auto|uring|dev, \
             relatime|strictatime|noatime, [no]lazytime, [no]diratime, norecovery, {})",
            if unknown.len() > 1 { "s" } else { "" },
            unknown.join(", "),
            uext4_fuse::FEATURE_OPTIONS
        ));
    }
    if o.atime == uext4::AtimeMode::Strictatime {
        // Reads the kernel serves from its page cache never reach the
        // daemon, so no atime changes then: drop the cached pages at
        // every open, so that each open's reads reach it at least once.
        o.kernel.kernel_cache = false;
    }
    Ok(o)
}

/// How the serving process reports the outcome of mounting.
enum Notify {
    /// Messages go to our own stderr.
    Foreground,
    /// The daemon writes `W`arnings, then `OK` or an `E`rror, one per
    /// line, to the pipe the waiting parent reads.
    Pipe(File),
}

impl Notify {
    fn warn(&mut self, msg: &str) {
        match self {
            Notify::Foreground => eprint_line(&format!("warning: {msg}")),
            Notify::Pipe(p) => {
                let _ = writeln!(p, "W {}", one_line(msg));
            }
        }
    }

    fn ready(self) {
        if let Notify::Pipe(mut p) = self {
            let _ = writeln!(p, "OK");
        }
    }

    /// Reports a failure before the mount was up; in a daemon, the parent
    /// prints it, so it is not returned again.
    fn fail(self, e: CliError) -> CliError {
        match (self, e) {
            (Notify::Pipe(mut p), CliError::Msg(m)) => {
                let _ = writeln!(p, "E {}", one_line(&m));
                CliError::Msg(String::new())
            }
            (_, e) => e,
        }
    }
}

fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

/// `uext4 mount`.
pub fn run(image: &Path, mountpoint: &Path, options: &[String], foreground: bool) -> CliResult {
    let opts = parse_options(options).map_err(CliError::Msg)?;
    run_parsed(image, mountpoint, opts, foreground)
}

fn run_parsed(image: &Path, mountpoint: &Path, opts: MountOpts, foreground: bool) -> CliResult {
    let image = image.canonicalize().map_err(|e| CliError::Msg(format!("{}: {e}", image.display())))?;
    if image.is_dir() {
        return Err(CliError::Msg(format!("{}: is a directory, not an image", image.display())));
    }
    let mnt = mountpoint.canonicalize().map_err(|e| CliError::Msg(format!("{}: {e}", mountpoint.display())))?;
    if !mnt.is_dir() {
        return Err(CliError::Msg(format!("{}: the mount point is not a directory", mnt.display())));
    }
    if !Path::new("/dev/fuse").exists() {
        return Err(CliError::msg("/dev/fuse does not exist (load the fuse module: modprobe fuse)"));
    }
    if opts.as_helper {
        if let Some(first) = mounted_at(&image) {
            return bind_again(&first, &mnt, opts.read_only);
        }
    }
    let foreground = foreground || opts.debug;
    let notify = start_daemon(&opts, foreground)?;
    serve(&image, &mnt, &opts, notify)
}

/// Opens the log (before forking, so that a bad path is reported here),
/// forks the daemon unless `foreground`, and starts logging there.
fn start_daemon(opts: &MountOpts, foreground: bool) -> CliResult<Notify> {
    let level = if opts.debug {
        uext4_fuse::LevelFilter::Debug
    } else {
        opts.log_level.unwrap_or(uext4_fuse::LevelFilter::Warn)
    };
    let log_file = match &opts.log_file {
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| CliError::Msg(format!("logfile={}: {e}", p.display())))?,
        ),
        None => None,
    };
    let target = match log_file {
        Some(f) => uext4_fuse::LogTarget::File(f),
        None if foreground => uext4_fuse::LogTarget::Stderr,
        // The daemon's stdio goes to /dev/null once the mount is up.
        None => uext4_fuse::LogTarget::Syslog,
    };
    let notify = if foreground { Notify::Foreground } else { Notify::Pipe(daemonize()?) };
    uext4_fuse::init_log(level, target);
    Ok(notify)
}

/// `uext4 mount-null MOUNTPOINT`: the null backend
/// ([`uext4_fuse::null::NullFs`]) served as `uext4 mount` serves an image
/// (the same options, daemon, signals and unmount), keeping at most
/// `data_cap` bytes of file data (default: a quarter of the RAM).
pub fn run_null(mountpoint: &Path, options: &[String], foreground: bool, data_cap: Option<u64>) -> CliResult {
    let opts = parse_options(options).map_err(CliError::Msg)?;
    let mnt = mountpoint.canonicalize().map_err(|e| CliError::Msg(format!("{}: {e}", mountpoint.display())))?;
    if !mnt.is_dir() {
        return Err(CliError::Msg(format!("{}: the mount point is not a directory", mnt.display())));
    }
    if !Path::new("/dev/fuse").exists() {
        return Err(CliError::msg("/dev/fuse does not exist (load the fuse module: modprobe fuse)"));
    }
    let foreground = foreground || opts.debug;
    let mut notify = start_daemon(&opts, foreground)?;
    ensure_stdio();
    let sigset = block_stop_signals();
    let cfg = mount_config(&opts, "uext4-null".to_string());
    let cap = data_cap.unwrap_or_else(uext4_fuse::null::default_data_cap);
    let fs = uext4_fuse::null::NullFs::new(&cfg, cap);
    let mount = match uext4_fuse::Mount::new_null(fs, &mnt, &cfg) {
        Ok(m) => m,
        Err(e) => return Err(notify.fail(CliError::Msg(format!("mount the null backend on {}: {e}", mnt.display())))),
    };
    if let Err(e) = stop_on_signals(mount.unmounter(), sigset, matches!(notify, Notify::Foreground)) {
        notify.warn(&format!("no signal thread ({e}): stop with umount {}", mnt.display()));
    }
    notify.ready();
    mount.run().map_err(|e| CliError::Msg(format!("{}: serving requests: {e}", mnt.display())))
}

/// The FUSE session's configuration for `opts` (`name`: the source shown
/// when `fsname=` does not say).
fn mount_config(opts: &MountOpts, name: String) -> MountConfig {
    MountConfig {
        read_only: opts.read_only,
        allow_other: opts.allows_other(),
        threads: opts.threads,
        kernel: opts.kernel.clone(),
        fsname: opts.fsname.clone().unwrap_or(name),
        kernel_flags: opts.kernel_flags.clone(),
        errors: opts.errors,
        transport: opts.transport,
    }
}

/// Starts the thread that waits for SIGINT, SIGTERM or SIGHUP (`sigset`,
/// blocked in every thread) and unmounts (lazily if busy) when one comes.
fn stop_on_signals(unmounter: uext4_fuse::Unmounter, sigset: libc::sigset_t, verbose: bool) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("uext4-signals".into())
        .spawn(move || loop {
            let mut sig = 0;
            // SAFETY: `sigset` is an initialised set; `sig` a valid out pointer.
            if unsafe { libc::sigwait(&sigset, &mut sig) } != 0 {
                continue;
            }
            match unmounter.unmount() {
                Ok(Unmounted::Lazily) if verbose => eprint_line(&format!(
                    "{}: busy; detached, the image is closed when the last file in it is closed",
                    unmounter.path().display()
                )),
                Ok(_) => {}
                Err(e) if verbose => eprint_line(&format!("unmount {}: {e}", unmounter.path().display())),
                Err(_) => continue,
            }
            return;
        })
        .map(drop)
}

/// Forks the daemon. Returns in the daemon (the write end of the status
/// pipe); the calling process waits for the status and exits.
fn daemonize() -> CliResult<File> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(CliError::Msg(format!("pipe: {}", std::io::Error::last_os_error())));
    }
    // SAFETY: pipe2 succeeded, so both are open descriptors owned by
    // nothing else; each File takes sole ownership of one.
    let (rd, wr) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    // SAFETY: the process is single-threaded here (no library or FUSE
    // thread has been started), so the child may run arbitrary code.
    match unsafe { libc::fork() } {
        -1 => Err(CliError::Msg(format!("fork: {}", std::io::Error::last_os_error()))),
        0 => {
            drop(rd);
            // SAFETY: setsid and fork have no memory-safety preconditions;
            // the process is still single-threaded. _exit ends the
            // intermediate process without running destructors or atexit
            // handlers twice.
            unsafe {
                libc::setsid();
                match libc::fork() {
                    -1 => libc::_exit(1),
                    0 => {}
                    _ => libc::_exit(0),
                }
            }
            detach_stdio();
            let _ = std::env::set_current_dir("/");
            Ok(wr)
        }
        child => {
            drop(wr);
            let mut status = 0;
            // SAFETY: waits for our own child (the intermediate process,
            // which exits at once); `status` is a valid out pointer.
            // Retried when a signal (a stop and continue) interrupts it.
            while unsafe { libc::waitpid(child, &mut status, 0) } == -1
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {}
            std::process::exit(wait_for_daemon(rd));
        }
    }
}

/// In the calling process: prints what the daemon reports, returns the
/// exit status.
fn wait_for_daemon(mut rd: File) -> i32 {
    let mut s = String::new();
    let _ = rd.read_to_string(&mut s);
    let mut code = None;
    for line in s.lines() {
        if let Some(w) = line.strip_prefix("W ") {
            eprint_line(&format!("warning: {w}"));
        } else if let Some(e) = line.strip_prefix("E ") {
            eprint_line(e);
            code = Some(1);
        } else if line == "OK" {
            code = code.or(Some(0));
        }
    }
    code.unwrap_or_else(|| {
        eprint_line("the mount daemon exited before mounting");
        1
    })
}

/// Points stdin, stdout and stderr at /dev/null.
fn detach_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors, which this
            // process owns; `null` stays open during the calls.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}

/// Makes sure descriptors 0..2 are open, so the /dev/fuse descriptor never
/// lands on one of them (a daemon writing to stderr would write to it).
fn ensure_stdio() {
    for fd in 0..3 {
        // SAFETY: F_GETFD only queries the descriptor.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
                // SAFETY: `fd` is closed, so dup2 takes nothing from anyone.
                unsafe { libc::dup2(null.as_raw_fd(), fd) };
            }
        }
    }
}

/// Blocks the stop signals in this thread and every thread it starts
/// later; returns the set to wait for.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a sigset_t we own;
    // pthread_sigmask only reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// How long a mount waits for the lock of an image that no mount shows:
/// a daemon whose unmount returned is still writing the image back.
const UNMOUNT_WAIT: Duration = Duration::from_secs(30);

/// Takes the image's lock: exclusive for a read-write mount, shared for
/// a read-only one. Held until the process exits.
///
/// `umount` of a FUSE mount returns once the kernel has let go, before
/// the daemon has committed and closed the image (the kernel sends no
/// DESTROY it would wait for), so `umount; mount` of the same image, as
/// scripts and fstests do, finds the lock still held. While the image is
/// not the source of a mount, the previous daemon is finishing: wait for
/// it (up to [`UNMOUNT_WAIT`]); a mounted image fails at once.
fn lock_image(image: &Path, exclusive: bool) -> CliResult<File> {
    let f = File::open(image).map_err(|e| CliError::Msg(format!("{}: {e}", image.display())))?;
    let op = if exclusive { libc::LOCK_EX } else { libc::LOCK_SH };
    let deadline = std::time::Instant::now() + UNMOUNT_WAIT;
    // SAFETY: flock on a descriptor we own.
    while unsafe { libc::flock(f.as_raw_fd(), op | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK)
            && std::time::Instant::now() < deadline
            && !is_mount_source(image)
        {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        return Err(CliError::Msg(if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            format!("{}: the image is in use by another uext4 process (already mounted?)", image.display())
        } else {
            format!("{}: lock: {e}", image.display())
        }));
    }
    Ok(f)
}

/// The mounts in /proc/self/mounts whose source is `image` (as given or
/// canonical; a uext4 mount's default fsname is the image path): their
/// mount points and types.
fn mounts_of(image: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(mounts) = std::fs::read("/proc/self/mounts") else {
        return Vec::new();
    };
    let canonical = image.canonicalize().ok();
    let names: Vec<&[u8]> =
        [Some(image), canonical.as_deref()].into_iter().flatten().map(|p| p.as_os_str().as_bytes()).collect();
    let mut found = Vec::new();
    for line in mounts.split(|&b| b == b'\n') {
        let mut fields = line.split(|&b| b == b' ');
        let (Some(source), Some(target), Some(ty)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        if names.contains(&unescape_mount_field(source).as_slice()) {
            let target = PathBuf::from(std::ffi::OsStr::from_bytes(&unescape_mount_field(target)));
            found.push((target, ty.to_vec()));
        }
    }
    found
}

/// `image` is the source of a mount.
fn is_mount_source(image: &Path) -> bool {
    !mounts_of(image).is_empty()
}

/// Where `image` is mounted by uext4, if it is.
fn mounted_at(image: &Path) -> Option<PathBuf> {
    mounts_of(image).into_iter().find(|(_, ty)| ty == b"fuse.uext4").map(|(t, _)| t)
}

/// Mounts the filesystem mounted at `first` at `mnt` too (a bind mount;
/// read-only if asked).
fn bind_again(first: &Path, mnt: &Path, read_only: bool) -> CliResult {
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| CliError::Msg(format!("{}: NUL in path", p.display())))
    };
    let (src, dst) = (c(first)?, c(mnt)?);
    let fail = |what: &str| {
        CliError::Msg(format!(
            "mount {} on {} ({what}): {}",
            first.display(),
            mnt.display(),
            std::io::Error::last_os_error()
        ))
    };
    // SAFETY: both are valid NUL-terminated paths; no type or data.
    if unsafe { libc::mount(src.as_ptr(), dst.as_ptr(), std::ptr::null(), libc::MS_BIND, std::ptr::null()) } != 0 {
        return Err(fail("bind"));
    }
    if read_only {
        let flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY;
        // SAFETY: as above; a remount of the bind mount just made.
        if unsafe { libc::mount(std::ptr::null(), dst.as_ptr(), std::ptr::null(), flags, std::ptr::null()) } != 0 {
            let e = fail("read-only");
            // SAFETY: unmounts what this function mounted.
            unsafe { libc::umount2(dst.as_ptr(), libc::MNT_DETACH) };
            return Err(e);
        }
    }
    Ok(())
}

/// Opens the image; in test builds a test may ask for a device that dies
/// on demand (`uext4_fuse::test_hooks`, absent from release builds).
fn open_fs(image: &Path, open: MountOptions) -> uext4::Result<Filesystem> {
    match uext4_fuse::test_hooks::faulty_device(image, open.write) {
        Some(dev) => Filesystem::open_device(dev?, open),
        None => Filesystem::open_with(image, open),
    }
}

fn serve(image: &Path, mnt: &Path, opts: &MountOpts, mut notify: Notify) -> CliResult {
    ensure_stdio();
    let sigset = block_stop_signals();
    let name = image.display().to_string();
    let _lock = match lock_image(image, !opts.read_only) {
        Ok(l) => l,
        Err(e) => return Err(notify.fail(e)),
    };
    let mut open = MountOptions {
        write: !opts.read_only,
        data: opts.data,
        atime: opts.atime,
        lazytime: opts.lazytime,
        nodiratime: opts.nodiratime,
        norecovery: opts.norecovery,
        // The kernel keeps these flags too, but FUSE leaves what they
        // promise (durable on return) to the daemon.
        sync: opts.kernel_flags.iter().any(|f| f == "sync"),
        dirsync: opts.kernel_flags.iter().any(|f| f == "dirsync"),
        ..MountOptions::default()
    };
    if let Some(c) = opts.commit {
        open.commit_interval = c;
    }
    if let Some(b) = opts.cache_bytes {
        open.cache_bytes = usize::try_from(b).unwrap_or(usize::MAX);
    }
    // A root that is no directory: the kernel refuses such a mount (a
    // read-only open does not check it, for inspection's sake).
    let fs = match open_fs(image, open).and_then(|fs| fs.check_root().map(|()| fs)) {
        Ok(fs) => Arc::new(fs),
        Err(e) => {
            let m = match e {
                uext4::Error::Io(io) => format!("{name}: {io}"),
                other => format!("{name}: {other}"),
            };
            return Err(notify.fail(CliError::Msg(m)));
        }
    };
    for n in fs.notices() {
        if opts.as_helper {
            log::warn!("{name}: {n}");
        } else {
            notify.warn(&format!("{name}: {n}"));
        }
    }
    let cfg = mount_config(opts, name.clone());
    let mount = match uext4_fuse::Mount::new(fs.clone(), mnt, &cfg) {
        Ok(m) => m,
        Err(e) => {
            // Nothing was served: close the library cleanly.
            let unmounted = finish(fs, &name);
            let m = format!("mount {} on {}: {e}", name, mnt.display());
            let m = match unmounted {
                Err(CliError::Msg(u)) => format!("{m} (and {u})"),
                _ => m,
            };
            return Err(notify.fail(CliError::Msg(m)));
        }
    };
    if let Err(e) = stop_on_signals(mount.unmounter(), sigset, matches!(notify, Notify::Foreground)) {
        notify.warn(&format!("no signal thread ({e}): stop with umount {}", mnt.display()));
    }
    notify.ready();
    let served = mount.run();
    let closed = finish(fs, &name);
    served.map_err(|e| CliError::Msg(format!("{}: serving requests: {e}", mnt.display())))?;
    closed
}

/// The library's clean unmount, once the FUSE session has let go of it.
fn finish(fs: Arc<Filesystem>, name: &str) -> CliResult {
    match Arc::try_unwrap(fs) {
        Ok(mut fs) => {
            let r = fs.unmount().map_err(|e| CliError::Msg(format!("{name}: unmount: {e}")));
            if r.is_ok() {
                // Cleanly closed: everything is on the image, and the
                // process exits next. Freeing its caches one allocation at
                // a time (the metadata blocks, the per-inode state of a
                // walked tree: millions of them) would only delay the exit
                // the unmount waits for, by seconds after a large walk;
                // the OS takes the memory back at once. (The library's
                // Drop frees as usual for in-process users.)
                std::mem::forget(fs);
            }
            r
        }
        // A FUSE worker still holds it (it panicked): dropping the last
        // reference unmounts on a best-effort basis.
        Err(_) => {
            Err(CliError::Msg(format!("{name}: still in use at exit; the journal will be replayed at next mount")))
        }
    }
}

/// Runs as a mount helper when invoked as one; `None` otherwise.
///
/// - `argv[0]` `mount.fuse.uext4` or `mount.uext4` (a symlink to this
///   binary): `IMAGE MNT [-o OPTS] [-t TYPE] [-n] [-s] [-v] [-f]`, as
///   mount(8) calls helpers.
/// - `uext4 IMAGE MNT [-o OPTS]` where IMAGE is an existing file or device
///   that is not a subcommand name and MNT an existing directory: what
///   fuse3's mount.fuse3 runs for `mount -t fuse.uext4 IMAGE MNT`.
pub fn helper_main(is_subcommand: impl Fn(&str) -> bool) -> Option<ExitCode> {
    let args: Vec<OsString> = std::env::args_os().collect();
    let argv0 = Path::new(args.first()?).file_name()?.to_str()?.to_string();
    let as_helper = matches!(argv0.as_str(), "mount.fuse.uext4" | "mount.fuse3.uext4" | "mount.uext4");
    if !as_helper {
        let first = args.get(1)?;
        let second = args.get(2)?;
        let not_a_command = match first.to_str() {
            Some(s) => !is_subcommand(s) && !s.starts_with('-'),
            None => true,
        };
        let looks_like_mount =
            not_a_command && Path::new(first).exists() && !Path::new(first).is_dir() && Path::new(second).is_dir();
        if !looks_like_mount {
            return None;
        }
    }
    let mut positional = Vec::new();
    let mut options = Vec::new();
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("-o") => match it.next().and_then(|v| v.to_str()) {
                Some(v) => options.push(v.to_string()),
                None => return Some(helper_fail("-o needs a value")),
            },
            Some(s) if s.starts_with("-o") && s.len() > 2 => options.push(s[2..].to_string()),
            // The type (fuse.uext4), no mtab, sloppy, verbose: nothing to do.
            Some("-t") => {
                it.next();
            }
            Some("-n" | "-s" | "-v") => {}
            // Fake mount: do everything but the mount.
            Some("-f") => return Some(ExitCode::SUCCESS),
            Some(s) if s.starts_with('-') && s.len() > 1 => {
                return Some(helper_fail(&format!("unknown helper argument {s}")));
            }
            _ => positional.push(a.clone()),
        }
    }
    let [source, target] = positional.as_slice() else {
        return Some(helper_fail("usage: mount.fuse.uext4 IMAGE MOUNTPOINT [-o OPTIONS]"));
    };
    // The `uext4#IMAGE` spelling of `mount -t fuse`.
    let source = match source.as_bytes().strip_prefix(b"uext4#") {
        Some(rest) => PathBuf::from(std::ffi::OsStr::from_bytes(rest)),
        None => PathBuf::from(source),
    };
    let mut opts = match parse_options(&options) {
        Ok(o) => o,
        Err(m) => return Some(helper_fail(&m)),
    };
    opts.as_helper = true;
    Some(match run_parsed(&source, Path::new(target), opts, false) {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Msg(m)) => helper_fail(&m),
        Err(CliError::BrokenPipe) => ExitCode::FAILURE,
    })
}

fn helper_fail(m: &str) -> ExitCode {
    if !m.is_empty() {
        eprint_line(m);
    }
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<MountOpts, String> {
        parse_options(&[s.to_string()])
    }

    #[test]
    fn options_parse() {
        let o = parse("ro,commit=2,allow_other,threads=3,writeback_cache,debug,noatime").unwrap();
        assert!(
            o.read_only
                && o.allow_other == Some(true)
                && o.kernel.writeback_cache
                && !o.kernel.direct_writes
                && o.debug
        );
        assert_eq!(o.commit, Some(Duration::from_secs(2)));
        assert_eq!(o.threads, Some(3));
        assert_eq!(o.kernel_flags, vec!["noatime".to_string()]);
        assert_eq!(o.atime, uext4::AtimeMode::Noatime);
        let o = parse("strictatime,lazytime").unwrap();
        assert_eq!((o.atime, o.lazytime, o.kernel.kernel_cache), (uext4::AtimeMode::Strictatime, true, false));
        let o = parse("noatime,relatime,nolazytime").unwrap();
        assert_eq!((o.atime, o.lazytime, o.kernel.kernel_cache), (uext4::AtimeMode::Relatime, false, true));
        assert_eq!(parse("").unwrap().atime, uext4::AtimeMode::Relatime);
        let o = parse_options(&["ro".into(), "rw,lock_policy=exclusive,dio_unwritten_no_handle=off".into()]).unwrap();
        assert!(!o.read_only);
        assert_eq!(o.data.lock_policy, LockPolicy::Exclusive);
        assert!(!o.data.dio_unwritten_no_handle && o.data.dio_unaligned_concurrent);
        assert!(!parse("dio_unaligned_concurrent=off").unwrap().data.dio_unaligned_concurrent);
        assert!(parse("rw").unwrap().data.auto_da_alloc);
        let o = parse("log=info,logfile=/var/log/uext4.log").unwrap();
        assert_eq!((o.log_level, o.log_file), (Some(uext4_fuse::LevelFilter::Info), Some("/var/log/uext4.log".into())));
        assert!(parse("log=loud").unwrap_err().contains("log=loud"));
        assert!(!parse("noauto_da_alloc").unwrap().data.auto_da_alloc);
        assert_eq!(parse("commit=0").unwrap().commit, None);
        assert_eq!(parse("defaults,x-systemd.automount,nofail,,dev,suid").unwrap().kernel_flags.len(), 2);
        // The last of a pair wins, as with mount(8) (`-o suid -o nosuid`).
        let o = parse_options(&["suid,dev,sync".into(), "nosuid,async,dev".into()]).unwrap();
        assert_eq!(o.kernel_flags, ["nosuid", "async", "dev"]);
        assert!(parse("ro,noload").unwrap().norecovery);
        assert!(parse("nodiratime").unwrap().nodiratime && !parse("nodiratime,diratime").unwrap().nodiratime);
    }

    #[test]
    fn mount_sources_unescape() {
        assert_eq!(unescape_mount_field(br"/tmp/a\040b\134c"), b"/tmp/a b\\c");
        assert_eq!(unescape_mount_field(br"/x\04"), br"/x\04");
    }

    #[test]
    fn bad_options_are_named() {
        let e = parse("rw,bogus,frob=1").unwrap_err();
        assert!(e.contains("bogus") && e.contains("frob=1") && e.starts_with("unknown mount options"), "{e}");
        assert!(parse("threads=0").unwrap_err().contains("threads=0"));
        assert!(parse("commit=x").unwrap_err().contains("commit=x"));
        assert!(parse("lock_policy=fast").unwrap_err().contains("fast"));
        assert!(parse("dio_unaligned_concurrent=maybe").unwrap_err().contains("maybe"));
        assert!(parse("data=writeback").unwrap_err().contains("data=ordered"));
        assert_eq!(parse("errors=panic").unwrap().errors, uext4_fuse::OnError::Stop);
        assert_eq!(parse("errors=continue").unwrap().errors, uext4_fuse::OnError::Continue);
        assert!(parse("errors=frob").unwrap_err().contains("remount-ro"));
    }

    #[test]
    fn ext4_options_and_cache_size() {
        let o = parse("data=ordered,journal_checksum,errors=remount-ro,cache=64M,direct_io").unwrap();
        assert_eq!(o.cache_bytes, Some(64 << 20));
        assert!(o.kernel.direct_io);
        assert!(parse("cache=lots").is_err());
    }

    #[test]
    fn transport_option() {
        assert_eq!(parse("rw").unwrap().transport, uext4_fuse::Transport::Auto);
        assert_eq!(parse("transport=dev").unwrap().transport, uext4_fuse::Transport::Dev);
        assert_eq!(parse("transport=uring").unwrap().transport, uext4_fuse::Transport::Uring);
        assert_eq!(parse("transport=uring,transport=dev").unwrap().transport, uext4_fuse::Transport::Dev);
        assert!(parse("transport=tcp").unwrap_err().contains("transport=tcp"));
    }
}
