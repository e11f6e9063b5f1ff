//! Helpers shared by the FUSE end-to-end tests: tools, the skip rule,
//! running commands, unmounting while the mount is busy.
#![allow(dead_code)]

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn tool(name: &str) -> Command {
    let mut c = Command::new(name);
    let path = std::env::var("PATH").unwrap_or_default();
    c.env("PATH", format!("{path}:/usr/local/sbin:/usr/sbin:/sbin"));
    c
}

pub fn have(name: &str) -> bool {
    tool("sh").arg("-c").arg(format!("command -v {name}")).stdout(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Why the FUSE tests cannot run here, if they cannot.
pub fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (mounting needs CAP_SYS_ADMIN)".into());
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

/// Runs a command and asserts it succeeded.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
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
    let want = mnt.as_os_str().as_bytes();
    fs::read("/proc/self/mountinfo")
        .unwrap_or_default()
        .split(|&c| c == b'\n')
        .any(|l| l.split(|&c| c == b' ').nth(4) == Some(want))
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
