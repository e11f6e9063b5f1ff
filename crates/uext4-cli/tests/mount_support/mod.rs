//! Helpers shared by the FUSE end-to-end tests: tools, the skip rule,
//! running commands, unmounting while the mount is busy, and the fixture
//! of an image and its mount point.
#![allow(dead_code)]

use std::ffi::CString;
use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

// Finding and running tools is the same for every end-to-end test.
#[path = "../cli_support/mod.rs"]
mod cli_support;
pub mod watchdog;
#[allow(unused_imports)]
pub use watchdog::{daemons_of, Watchdog};

// Not every test file uses every one.
#[allow(unused_imports)]
pub use cli_support::{
    kernel_has_casefold, kernel_has_quota_v2, loop_mount_unavailable, require_loop_mount, run, tool, BIN,
};

/// Runs a shell command as uid/gid 65534 (nobody); true if it succeeded.
pub fn as_nobody(script: &str) -> bool {
    use std::os::unix::process::CommandExt;
    tool("sh")
        .arg("-c")
        .arg(script)
        .uid(65534)
        .gid(65534)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// How long a test may hold a [`Fixture`] before the fixture's own
/// [`Watchdog`] takes it for a deadlock (mount tests take seconds to a
/// few minutes; a hang would otherwise last until CI's timeout).
pub const FIXTURE_LIMIT: Duration = Duration::from_secs(900);

/// An image made by `uext4 mkfs` and a mount point in a temporary
/// directory; whatever is still mounted there is lazily unmounted, and a
/// foreground daemon killed, when it drops (failed tests). A watchdog
/// covers its whole life ([`FIXTURE_LIMIT`]; tests that could deadlock arm
/// a tighter one with [`Fixture::watchdog`]).
pub struct Fixture {
    /// The temporary directory holding both (and whatever else a test
    /// puts next to them).
    pub dir: TempDir,
    /// The image.
    pub img: PathBuf,
    /// The mount point (canonical, as /proc/self/mountinfo shows it).
    pub mnt: PathBuf,
    /// A daemon started in the foreground, if any.
    pub child: Option<Child>,
    /// Fails the test if it holds the fixture past [`FIXTURE_LIMIT`].
    _watchdog: Watchdog,
}

impl Fixture {
    /// A fresh image of `size` (e.g. "64M"), made with `uext4 mkfs` and
    /// `extra` arguments.
    pub fn with_mkfs_args(size: &str, extra: &[&str]) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        // Other users (the allow_other checks) must reach the mount point.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod tempdir");
        let img = dir.path().join("img");
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).expect("mkdir mnt");
        let mnt = mnt.canonicalize().expect("canonicalize");
        run(Command::new(BIN).arg("mkfs").arg(&img).arg("--size").arg(size).args(extra));
        Fixture::at(dir, img, mnt)
    }

    /// A fixture of an image `img` made otherwise and a mount point `mnt`
    /// (canonical), both in `dir`.
    pub fn at(dir: TempDir, img: PathBuf, mnt: PathBuf) -> Fixture {
        let _watchdog = Watchdog::arm("the test holding this fixture", &mnt, &img, FIXTURE_LIMIT);
        Fixture { dir, img, mnt, child: None, _watchdog }
    }

    /// `rel` inside the mount.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// `uext4 mount IMG MNT -o OPTS` (daemon): mounted when it returns.
    pub fn mount(&self, opts: &str) {
        run(Command::new(BIN).arg("mount").arg(&self.img).arg(&self.mnt).arg("-o").arg(with_transport(opts)));
        assert!(is_mounted(&self.mnt), "not mounted after uext4 mount returned");
    }

    /// `uext4 mount --foreground -o OPTS` (with UEXT4_TEST_TRANSPORT's
    /// transport) as a child process with `env` and `stderr`: mounted when
    /// it returns. Returns the daemon's pid.
    pub fn spawn_foreground(&mut self, opts: &str, stderr: Stdio, env: &[(&str, String)]) -> u32 {
        let child = Command::new(BIN)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .arg("mount")
            .arg(&self.img)
            .arg(&self.mnt)
            .arg("-o")
            .arg(with_transport(opts))
            .arg("--foreground")
            .stdin(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn uext4 mount");
        let pid = child.id();
        self.child = Some(child);
        let t0 = Instant::now();
        while !is_mounted(&self.mnt) {
            assert!(t0.elapsed() < Duration::from_secs(30), "foreground mount did not appear");
            std::thread::sleep(Duration::from_millis(20));
        }
        pid
    }

    /// Unmounts with `fusermount3 -u` (or `umount`) and waits for the
    /// daemon to finish the clean unmount of the image.
    pub fn unmount(&self) {
        if have("fusermount3") {
            unmount_retrying(tool("fusermount3").arg("-u").arg(&self.mnt));
        } else {
            unmount_retrying(tool("umount").arg(&self.mnt));
        }
        wait_image_free(&self.img);
        assert!(!is_mounted(&self.mnt));
    }

    /// A [`Watchdog`] over the rest of the test (until it drops): past
    /// `limit` it aborts this mount's connection, kills its daemon and
    /// fails the test named `what`. Declare it after the fixture, so that
    /// it drops first.
    pub fn watchdog(&self, what: &str, limit: Duration) -> Watchdog {
        Watchdog::arm(what, &self.mnt, &self.img, limit)
    }

    /// `dumpe2fs -h` of the image.
    pub fn dumpe2fs(&self) -> String {
        let out = run(tool("dumpe2fs").arg("-h").arg(&self.img));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The image was unmounted cleanly and e2fsck finds nothing.
    pub fn assert_clean(&self) {
        let d = self.dumpe2fs();
        let features = d.lines().find(|l| l.starts_with("Filesystem features:")).unwrap_or_default();
        assert!(!features.contains("needs_recovery"), "needs_recovery still set: {features}");
        assert!(d.lines().any(|l| l.starts_with("Filesystem state:") && l.contains("clean")), "{d}");
        run(tool("e2fsck").arg("-fn").arg(&self.img));
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if is_mounted(&self.mnt) {
            let _ = tool("umount").arg("-l").arg(&self.mnt).status();
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `opts` with `transport=T` added when UEXT4_TEST_TRANSPORT=T is set:
/// the same tests run on the io_uring transport
/// (`UEXT4_TEST_TRANSPORT=uring cargo test -p uext4-cli --test mount`).
pub fn with_transport(opts: &str) -> String {
    match std::env::var("UEXT4_TEST_TRANSPORT") {
        Ok(t) if !t.is_empty() && opts.is_empty() => format!("transport={t}"),
        Ok(t) if !t.is_empty() => format!("{opts},transport={t}"),
        _ => opts.to_string(),
    }
}

pub fn have(name: &str) -> bool {
    tool("sh").arg("-c").arg(format!("command -v {name}")).stdout(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// The `enable_uring` module parameter of FUSE over io_uring.
pub const URING_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Why the io_uring transport cannot be tried here, if it cannot: it
/// turns the module parameter on when it is off (it only allows daemons
/// that ask for the transport; it is left on).
pub fn uring_skip_reason() -> Option<String> {
    match std::fs::read_to_string(URING_PARAM) {
        Err(_) => Some(format!("{URING_PARAM} missing: the kernel lacks CONFIG_FUSE_IO_URING (Linux 6.14+)")),
        Ok(s) if s.trim() == "Y" => None,
        Ok(_) => match std::fs::write(URING_PARAM, "Y") {
            Ok(()) => None,
            Err(e) => Some(format!("FUSE io_uring is off and cannot be turned on ({URING_PARAM}: {e})")),
        },
    }
}

/// Why the FUSE tests cannot run here, if they cannot. Under
/// `UEXT4_TEST_TRANSPORT=uring` that includes a kernel without FUSE
/// io_uring (the daemon would fall back to /dev/fuse, which the other
/// pass tests already).
pub fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (mounting needs CAP_SYS_ADMIN)".into());
    }
    if std::env::var("UEXT4_TEST_TRANSPORT").is_ok_and(|t| t == "uring") {
        if let Some(r) = uring_skip_reason() {
            return Some(format!("UEXT4_TEST_TRANSPORT=uring: {r}"));
        }
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse does not exist".into());
    }
    for t in ["e2fsck", "dumpe2fs"] {
        if !have(t) {
            return Some(format!("{t} not found (install e2fsprogs)"));
        }
    }
    None
}

#[macro_export]
macro_rules! require_fuse {
    () => {
        if let Some(r) = $crate::mount_support::skip_reason() {
            println!("SKIP: {r}");
            return;
        }
    };
}

/// Runs an unmount command, retrying while the mount is busy (a child
/// process another test of this file spawns holds a copy of this test's
/// descriptors between its fork and its exec).
pub fn unmount_retrying(cmd: &mut Command) {
    for _ in 0..50 {
        let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        if out.status.success() {
            return;
        }
        if !String::from_utf8_lossy(&out.stderr).contains("busy") {
            panic!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    run(cmd);
}

pub fn is_mounted(mnt: &Path) -> bool {
    mountinfo_line(mnt).is_some()
}

/// The line of /proc/self/mountinfo whose mount point (field 5) is `mnt`
/// (the last one: a later mount over it hides the earlier).
pub fn mountinfo_line(mnt: &Path) -> Option<Vec<u8>> {
    let want = mnt.as_os_str().as_bytes();
    let info = fs::read("/proc/self/mountinfo").ok()?;
    info.split(|&c| c == b'\n').rfind(|l| l.split(|&c| c == b' ').nth(4) == Some(want)).map(<[u8]>::to_vec)
}

/// Waits until no process holds the image's lock: the daemon has
/// unmounted the library filesystem and exited.
pub fn wait_image_free(img: &Path) {
    let f = File::open(img).expect("open image");
    let t0 = Instant::now();
    loop {
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            // SAFETY: as above.
            unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the daemon did not release {}", img.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Free blocks and free inodes of the filesystem mounted at `mnt`.
pub fn free_counts(mnt: &Path) -> (u64, u64) {
    let s = statvfs(mnt);
    (s.f_bfree, s.f_ffree)
}

/// Free bytes of the filesystem mounted at `mnt`.
pub fn free_bytes(mnt: &Path) -> u64 {
    let s = statvfs(mnt);
    s.f_bfree * s.f_frsize
}

fn statvfs(mnt: &Path) -> libc::statvfs {
    let c = CString::new(mnt.as_os_str().as_bytes()).expect("path");
    // SAFETY: plain data, filled by statvfs.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid C string and a valid statvfs to fill.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0, "statvfs: {}", std::io::Error::last_os_error());
    s
}

/// Waits (up to a minute) until the filesystem at `mnt` has at least
/// `want` free bytes: a deleted file's blocks come back only when the
/// kernel's FORGET of its node has been served, which the kernel queues
/// asynchronously when it evicts the node.
pub fn wait_free_bytes(mnt: &Path, want: u64) {
    let t0 = Instant::now();
    loop {
        let now = free_bytes(mnt);
        if now >= want {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "blocks never came back: {now} bytes free, {want} expected");
        std::thread::sleep(Duration::from_millis(20));
    }
}
