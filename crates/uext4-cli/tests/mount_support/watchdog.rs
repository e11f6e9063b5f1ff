//! A whole-test watchdog for mount tests that could deadlock.
//!
//! A deadlock through FUSE does not fail a test by itself: every thread
//! that touches the mount waits in the kernel for an answer that never
//! comes (D state), including the test's own thread, its setup writes and
//! the threads it spawned, and the test binary never exits. [`Watchdog`]
//! covers the whole test, from the moment it is armed until it drops: once
//! its limit passes it
//! 1. aborts the mount's FUSE connection (`/sys/fs/fuse/connections/N/abort`,
//!    mounting fusectl if needed): every request in flight and every later
//!    one fails with ENOTCONN, so the waiting threads return;
//! 2. lazily unmounts the mount point and kills (SIGKILL) every daemon
//!    serving the image: a daemon stuck in its own deadlock would
//!    otherwise keep the image locked after the test;
//! 3. lets the test fail by itself (the threads that return see errors; the
//!    watchdog's drop panics if nothing else did) and, if the test has not
//!    returned within [`GRACE`] of the abort (its thread waits on something
//!    the abort cannot end), ends the test process with a message: a hang
//!    becomes a failure within `limit + GRACE`, never a CI timeout.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a test has to return after its connection was aborted.
pub const GRACE: Duration = Duration::from_secs(10);

/// Exit status of a test process the watchdog ended (the test harness's
/// own status for failed tests).
pub const EXIT_HUNG: i32 = 101;

/// See the module documentation; armed by [`Watchdog::arm`], disarmed
/// when it drops.
pub struct Watchdog {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    /// Set when the watchdog drops (the test returned or is unwinding).
    done: Mutex<bool>,
    wake: Condvar,
    /// What the watchdog did, once it fired.
    fired: Mutex<Option<String>>,
}

impl Watchdog {
    /// Watches the test named `what` that mounts `img` at `mnt` for
    /// `limit`.
    pub fn arm(what: &str, mnt: &Path, img: &Path, limit: Duration) -> Watchdog {
        let shared = Arc::new(Shared { done: Mutex::new(false), wake: Condvar::new(), fired: Mutex::new(None) });
        let (s, what, mnt, img) = (shared.clone(), what.to_string(), mnt.to_path_buf(), img.to_path_buf());
        let thread = std::thread::Builder::new()
            .name("mount-test-watchdog".into())
            .spawn(move || {
                if s.wait_done(limit) {
                    return;
                }
                let report = format!("{what}: not finished after {limit:?} (a deadlock?): {}", fire(&mnt, &img));
                eprintln!("watchdog: {report}");
                *s.fired.lock().unwrap_or_else(|e| e.into_inner()) = Some(report.clone());
                if !s.wait_done(GRACE) {
                    eprintln!("watchdog: {what}: the test did not return within {GRACE:?} of the abort; exiting");
                    std::process::exit(EXIT_HUNG);
                }
            })
            .expect("spawn the watchdog");
        Watchdog { shared, thread: Some(thread) }
    }

    /// What the watchdog did, if it fired.
    pub fn fired(&self) -> Option<String> {
        self.shared.fired.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Shared {
    /// Waits up to `limit` for the watchdog to drop; true if it did.
    fn wait_done(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        while !*done {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else { return false };
            done = self.wake.wait_timeout(done, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        true
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        *self.shared.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(report) = self.fired() {
            if !std::thread::panicking() {
                panic!("{report}");
            }
        }
    }
}

/// Aborts the connection of the mount at `mnt`, unmounts it lazily and
/// kills the daemons of `img`; says what it did.
fn fire(mnt: &Path, img: &Path) -> String {
    let abort = match connection_of(mnt) {
        Some(conn) => {
            let dir = "/sys/fs/fuse/connections";
            if !Path::new(&format!("{dir}/{conn}")).exists() {
                let _ = super::tool("mount").args(["-t", "fusectl", "fusectl", dir]).status();
            }
            let abort = format!("{dir}/{conn}/abort");
            match fs::write(&abort, "1") {
                Ok(()) => format!("aborted the connection ({abort})"),
                Err(e) => format!("could not abort the connection ({abort}: {e})"),
            }
        }
        None => format!("{} was not mounted", mnt.display()),
    };
    let _ = super::tool("umount").arg("-l").arg(mnt).status();
    let killed = daemons_of(img);
    for &pid in &killed {
        // SAFETY: kill(2) with a pid read from /proc and a valid signal;
        // a process that has exited meanwhile makes it fail harmlessly.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    format!("{abort}, unmounted, killed daemon pids {killed:?}")
}

/// The FUSE connection number of the mount at `mnt` (its device minor),
/// from /proc/self/mountinfo: a stat of the mount point would be a
/// request to the daemon, which may be stuck.
pub fn connection_of(mnt: &Path) -> Option<String> {
    let line = super::mountinfo_line(mnt)?;
    let dev = line.split(|&c| c == b' ').nth(2)?;
    Some(String::from_utf8_lossy(dev.split(|&c| c == b':').nth(1)?).into_owned())
}

/// The processes (other than this one) whose command line names `img`:
/// the `uext4 mount` daemon of the test's image (a forked daemon keeps its
/// parent's arguments).
pub fn daemons_of(img: &Path) -> Vec<libc::pid_t> {
    let me = std::process::id() as libc::pid_t;
    let Ok(procs) = fs::read_dir("/proc") else { return Vec::new() };
    procs
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            let cmdline = fs::read(PathBuf::from(format!("/proc/{pid}/cmdline"))).unwrap_or_default();
            let mut args = cmdline.split(|&b| b == 0).map(OsStr::from_bytes);
            args.clone().any(|a| a == "mount") && args.any(|a| Path::new(a) == img)
        })
        .collect()
}
