//! Helpers shared by the end-to-end tests of the `uext4` command (cli.rs,
//! cli_write.rs, and the FUSE tests through mount_support): finding and
//! running e2fsprogs, the skip rule, and running `uext4` itself. Every
//! tool runs with TZ=UTC, so times print the same everywhere.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::process::{Command, Output, Stdio};

/// The `uext4` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_uext4");

/// `name` with e2fsprogs' directories added to PATH (for users without
/// sbin in theirs) and TZ=UTC.
pub fn tool(name: &str) -> Command {
    let mut c = Command::new(name);
    let path = std::env::var("PATH").unwrap_or_default();
    c.env("PATH", format!("{path}:/usr/local/sbin:/usr/sbin:/sbin")).env("TZ", "UTC");
    c
}

/// True if `name` can be run (prints the skip reason otherwise).
pub fn have(name: &str) -> bool {
    let ok = tool(name).arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !ok {
        println!("SKIP: {name} not found (install e2fsprogs)");
    }
    ok
}

/// Runs uext4 with TZ=UTC.
pub fn uext4<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(BIN).args(args).env("TZ", "UTC").output().expect("run uext4")
}

/// Runs uext4, expects success without any stderr output, returns stdout.
pub fn ok<I, S>(args: I) -> Vec<u8>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let out = uext4(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "uext4 {args:?} failed ({:?}): {err}", out.status);
    assert!(err.is_empty(), "uext4 {args:?}: unexpected stderr: {err}");
    out.stdout
}

/// Runs a command and asserts it succeeded (its output shown if not).
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// [`run`] for a command built by value.
pub fn run_ok(mut c: Command) -> Output {
    run(&mut c)
}

/// Asserts that `out` is a failure with exit status 1 and exactly one
/// `uext4: ` line on stderr, and returns that line (what it must say is
/// the caller's check); `what` names the run in the messages.
pub fn one_error_line(what: &str, out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: stderr: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{what}: expected one error line, got: {err:?}");
    assert!(lines[0].starts_with("uext4: "), "{what}: no prefix: {err:?}");
    lines[0].to_string()
}

/// Why kernel loop mounts cannot be tried here, if they cannot: only a
/// missing facility counts (not root, no mount(8)/losetup/mkfs.ext4, no
/// loop devices, a kernel without ext4). Checked once per test binary,
/// with a real trial mount of an image made by mkfs.ext4.
///
/// # Panics
/// When every facility is there but the kernel refuses that image: such a
/// host cannot check uext4's images, and a skip would turn a refused uext4
/// image into a pass.
pub fn loop_mount_unavailable() -> Option<&'static str> {
    static VERDICT: std::sync::OnceLock<Option<&'static str>> = std::sync::OnceLock::new();
    *VERDICT.get_or_init(loop_mount_facility)
}

/// True when kernel loop mounts work here; prints `SKIP: <reason>`
/// (`what` names the part skipped) and returns false for a missing
/// facility. After it, a refused mount is a failure, never a skip.
pub fn require_loop_mount(what: &str) -> bool {
    match loop_mount_unavailable() {
        None => true,
        Some(why) => {
            println!("SKIP ({what}): kernel loop mount: {why}");
            false
        }
    }
}

/// True when this kernel's ext4 mounts casefold images (CONFIG_UNICODE:
/// ext4 then lists `casefold` in /sys/fs/ext4/features). Checked up
/// front, so that a refused casefold mount is never taken for a skip.
pub fn kernel_has_casefold() -> bool {
    std::path::Path::new("/sys/fs/ext4/features/casefold").exists()
}

/// True when this kernel's ext4 mounts quota images: ext4 needs
/// CONFIG_QUOTA and CONFIG_QFMT_V2 built in (fs/ext4/super.c tests
/// `defined(CONFIG_QFMT_V2)`, false for a module), so quota_v2's
/// `v2_read_file_info` must be in kallsyms without a `[module]` tag.
pub fn kernel_has_quota_v2() -> bool {
    std::path::Path::new("/proc/sys/fs/quota").is_dir()
        && std::fs::read_to_string("/proc/kallsyms").is_ok_and(|k| {
            k.lines().any(|l| {
                let mut f = l.split_whitespace().skip(2);
                f.next() == Some("v2_read_file_info") && f.next().is_none()
            })
        })
}

/// The check behind [`loop_mount_unavailable`].
fn loop_mount_facility() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root");
    }
    for (t, why) in [
        ("mount", "mount(8) not installed"),
        ("losetup", "losetup not installed"),
        ("mkfs.ext4", "mkfs.ext4 not installed"),
    ] {
        let found = tool("sh").arg("-c").arg(format!("command -v {t}")).output().is_ok_and(|o| o.status.success());
        if !found {
            return Some(why);
        }
    }
    if !std::path::Path::new("/dev/loop-control").exists() {
        return Some("no loop devices (/dev/loop-control missing)");
    }
    if !tool("losetup").arg("-f").output().is_ok_and(|o| o.status.success()) {
        return Some("no free loop device");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("trial.img");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    std::fs::File::create(&img).and_then(|f| f.set_len(16 << 20)).expect("trial image");
    run(tool("mkfs.ext4").args(["-q", "-F", "-t", "ext4"]).arg(&img));
    let out = tool("mount").args(["-o", "loop"]).arg(&img).arg(&mnt).output().expect("mount");
    if out.status.success() {
        run(tool("umount").arg(&mnt));
        return None;
    }
    let fss = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let module = std::path::Path::new("/lib/modules").join(release.trim()).join("kernel/fs/ext4");
    if !fss.split_whitespace().any(|f| f == "ext4") && !module.is_dir() {
        return Some("the kernel has no ext4");
    }
    panic!(
        "loop mounts should work here (root, mount(8), loop devices, ext4) but the kernel refused an image made \
         by mkfs.ext4: {}. Fix the test host; skipping would hide refused uext4 images.",
        String::from_utf8_lossy(&out.stderr).trim()
    )
}
