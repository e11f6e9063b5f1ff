//! `uext4 bench requests`: the cost of one FUSE round trip, apart from the
//! engine (a measurement, never a test).
//!
//! Two trivial operations, each of which costs exactly one request to the
//! daemon and next to no engine work, are repeated by 1, 2 and 8 threads
//! for a fixed time through a fresh `uext4 mount` (a child process of this
//! binary, so the daemon is the one users run):
//!
//! - `stat`: stat(2) of one file, mounted with `attr_timeout=0` so that
//!   every call is a GETATTR (the entry stays cached, so no LOOKUP);
//! - `read`: a 4 KiB pread(2) at offset 0 of a file whose blocks are in
//!   the daemon's cache, mounted with `direct_io` so that every call is a
//!   READ instead of a page-cache hit.
//!
//! The same operations run on the null backend (`null`: `uext4
//! mount-null`, uext4's own FUSE layer over an in-memory tree, with the
//! same options: the round trip with no engine behind it), on the kernel's own ext4 (a loop mount of the
//! same kind of image; there both are served from the kernel's caches, so
//! they show the floor a system call costs) and on fuse2fs (with the same
//! two options) when it is installed, so that the transport's share of a
//! request is visible. The image lives in /dev/shm where it exists.

use crate::util::{CliError, CliResult};
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Parameters of `bench requests`.
#[derive(Debug, Clone)]
pub struct ReqBench {
    /// What to measure: `uext4`, `null`, `kernel`, `fuse2fs`.
    pub targets: Vec<String>,
    /// Operations: `stat`, `read`.
    pub ops: Vec<String>,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// Seconds per measured run.
    pub seconds: f64,
    /// Extra `-o` options for `uext4 mount` (e.g. `transport=uring`).
    pub options: Option<String>,
    /// Where the image and the mount point go (default /dev/shm or the
    /// temporary directory).
    pub dir: Option<PathBuf>,
    /// Print JSON lines instead of a table.
    pub json: bool,
}

/// The file both operations use, and its size.
const FILE: &str = "bench-requests.dat";
const FILE_SIZE: usize = 1 << 20;

struct Row {
    target: String,
    op: String,
    threads: usize,
    ops: u64,
    secs: f64,
}

/// A mounted target: the mount point and, for FUSE, its daemon.
struct Mounted {
    mnt: PathBuf,
    img: PathBuf,
    daemon: Option<Child>,
    fuse: bool,
}

impl Mounted {
    fn unmount(mut self) -> CliResult {
        let done = umount(&self.mnt);
        if let Some(mut d) = self.daemon.take() {
            let _ = d.wait();
        } else if self.fuse {
            wait_unlocked(&self.img);
        }
        done
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // Only on an error path: a lazy unmount leaves nothing behind.
        if is_mounted(&self.mnt) {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
        if let Some(mut d) = self.daemon.take() {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

fn is_mounted(mnt: &Path) -> bool {
    let want = mnt.as_os_str().as_bytes();
    std::fs::read("/proc/self/mountinfo")
        .unwrap_or_default()
        .split(|&c| c == b'\n')
        .any(|l| l.split(|&c| c == b' ').nth(4) == Some(want))
}

fn umount(mnt: &Path) -> CliResult {
    for _ in 0..100 {
        let ok = Command::new("umount").arg(mnt).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
            || Command::new("fusermount3").arg("-u").arg(mnt).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
        if ok || !is_mounted(mnt) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(CliError::msg(format!("cannot unmount {}", mnt.display())))
}

/// Waits until the `uext4 mount` daemon has let go of the image (its lock).
fn wait_unlocked(img: &Path) {
    let Ok(f) = File::open(img) else { return };
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(60) {
        // SAFETY: flock on a descriptor this function owns.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_mounted(mnt: &Path, daemon: &mut Option<Child>, what: &str) -> CliResult {
    let t0 = Instant::now();
    while !is_mounted(mnt) {
        if let Some(d) = daemon.as_mut() {
            if let Ok(Some(st)) = d.try_wait() {
                return Err(CliError::msg(format!("{what} exited before mounting ({st})")));
            }
        }
        if t0.elapsed() > Duration::from_secs(30) {
            return Err(CliError::msg(format!("{what} did not mount within 30 s")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn run_ok(cmd: &mut Command, what: &str) -> CliResult {
    let out = cmd.output().map_err(|e| CliError::msg(format!("{what}: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(CliError::msg(format!("{what} failed: {}", String::from_utf8_lossy(&out.stderr).trim())))
    }
}

/// Makes a fresh image in `dir` and mounts it as `target` wants.
fn mount_target(target: &str, dir: &Path, p: &ReqBench) -> CliResult<Mounted> {
    let img = dir.join(format!("{target}.img"));
    let mnt = dir.join(format!("{target}.mnt"));
    std::fs::create_dir_all(&mnt)?;
    let mnt = mnt.canonicalize()?;
    let exe = std::env::current_exe()?;
    run_ok(Command::new(&exe).arg("mkfs").arg(&img).args(["--size", "64M"]), "uext4 mkfs")?;
    let (daemon, fuse) = match target {
        "uext4" => {
            let mut o = "attr_timeout=0,direct_io".to_string();
            if let Some(extra) = p.options.as_deref().filter(|s| !s.is_empty()) {
                o = format!("{o},{extra}");
            }
            run_ok(Command::new(&exe).arg("mount").arg(&img).arg(&mnt).arg("-o").arg(&o), "uext4 mount")?;
            (None, true)
        }
        "null" => {
            let mut o = "attr_timeout=0,direct_io".to_string();
            if let Some(extra) = p.options.as_deref().filter(|s| !s.is_empty()) {
                o = format!("{o},{extra}");
            }
            let child = Command::new(&exe)
                .arg("mount-null")
                .arg(&mnt)
                .arg("-o")
                .arg(&o)
                .arg("--foreground")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| CliError::msg(format!("uext4 mount-null: {e}")))?;
            (Some(child), true)
        }
        "fuse2fs" => {
            let child = Command::new("fuse2fs")
                .arg(&img)
                .arg(&mnt)
                .args(["-f", "-o", "attr_timeout=0,direct_io"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| CliError::msg(format!("fuse2fs: {e}")))?;
            (Some(child), true)
        }
        "kernel" => {
            run_ok(Command::new("mount").arg("-o").arg("loop").arg(&img).arg(&mnt), "mount -o loop")?;
            (None, false)
        }
        t => return Err(CliError::msg(format!("unknown target {t:?}: expected uext4, null, kernel or fuse2fs"))),
    };
    let mut m = Mounted { mnt, img, daemon, fuse };
    wait_mounted(&m.mnt, &mut m.daemon, target)?;
    let mut f = File::create(m.mnt.join(FILE))?;
    f.write_all(&vec![0x5a; FILE_SIZE])?;
    f.sync_all()?;
    Ok(m)
}

/// `threads` threads repeating `op` on `path` for `secs`.
fn measure(path: &Path, op: &str, threads: usize, secs: f64) -> CliResult<(u64, f64)> {
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let mut files = Vec::new();
    for _ in 0..threads {
        files.push(File::open(path)?);
    }
    // The first requests (the entry's LOOKUP, the page in the daemon's
    // cache) are not what is measured.
    std::fs::metadata(path)?;
    files[0].read_at(&mut [0u8; 4096], 0)?;
    let start = Instant::now();
    std::thread::scope(|s| {
        for f in &files {
            let (stop, total, failed) = (&stop, &total, &failed);
            s.spawn(move || {
                let mut buf = vec![0u8; 4096];
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let ok = if op == "stat" {
                        std::fs::metadata(path).is_ok()
                    } else {
                        f.read_at(&mut buf, 0).is_ok_and(|r| r == buf.len())
                    };
                    if !ok {
                        failed.store(true, Ordering::Relaxed);
                        break;
                    }
                    n += 1;
                }
                total.fetch_add(n, Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
    });
    let elapsed = start.elapsed().as_secs_f64();
    if failed.load(Ordering::Relaxed) {
        return Err(CliError::msg(format!("{op} of {} failed during the run", path.display())));
    }
    Ok((total.load(Ordering::Relaxed), elapsed))
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `bench requests` and prints the results.
pub fn run_requests(p: &ReqBench, out: &mut impl Write) -> CliResult {
    for op in &p.ops {
        if op != "stat" && op != "read" {
            return Err(CliError::msg(format!("unknown operation {op:?}: expected stat or read")));
        }
    }
    let base = p.dir.clone().unwrap_or_else(|| {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    });
    let dir = base.join(format!("uext4-bench-requests-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = run_in(p, &dir, out);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run_in(p: &ReqBench, dir: &Path, out: &mut impl Write) -> CliResult {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut rows = Vec::new();
    if !p.json {
        writeln!(out, "bench requests: {} s per run, image in {}", p.seconds, dir.display())?;
    }
    for target in &p.targets {
        let skip = match target.as_str() {
            "kernel" if !root => Some("a loop mount needs root"),
            "fuse2fs" if !have("fuse2fs") => Some("fuse2fs is not installed"),
            _ => None,
        };
        if let Some(why) = skip {
            if !p.json {
                writeln!(out, "{target}: skipped ({why})")?;
            }
            continue;
        }
        let m = mount_target(target, dir, p)?;
        let path = m.mnt.join(FILE);
        for op in &p.ops {
            for &threads in &p.threads {
                let (ops, secs) = measure(&path, op, threads.max(1), p.seconds)?;
                let row = Row { target: target.clone(), op: op.clone(), threads: threads.max(1), ops, secs };
                if p.json {
                    writeln!(
                        out,
                        "{{\"target\":\"{}\",\"op\":\"{}\",\"threads\":{},\"ops\":{},\"secs\":{:.4},\"ops_per_sec\":{:.1}}}",
                        row.target,
                        row.op,
                        row.threads,
                        row.ops,
                        row.secs,
                        row.ops as f64 / row.secs
                    )?;
                }
                rows.push(row);
            }
        }
        let img = m.img.clone();
        m.unmount()?;
        // What the target wrote must still be a clean ext4 image (the
        // null backend wrote none).
        if have("e2fsck") && target != "null" {
            run_ok(Command::new("e2fsck").arg("-fn").arg(&img), &format!("e2fsck -fn of the {target} image"))?;
            if !p.json {
                writeln!(out, "{target}: image e2fsck -fn clean after unmount")?;
            }
        }
        let _ = std::fs::remove_file(&img);
    }
    if p.json {
        return Ok(());
    }
    writeln!(out, "| target | op | threads | requests/s | µs per request per thread |")?;
    writeln!(out, "|---|---|---:|---:|---:|")?;
    for r in &rows {
        let rate = r.ops as f64 / r.secs;
        let us = if r.ops == 0 { 0.0 } else { r.secs * 1e6 * r.threads as f64 / r.ops as f64 };
        writeln!(out, "| {} | {} | {} | {:.0} | {:.1} |", r.target, r.op, r.threads, rate, us)?;
    }
    Ok(())
}
