//! `uext4 bench tree`: the engine's share of `tar x` and `rm -rf`
//! through the mount, without FUSE (a measurement, never a test).
//!
//! Each thread replays, through the inode-level calls the FUSE adapter
//! makes, the requests the kernel sends for one file of a tar extract
//! into a tree of its own (`--dirs` directories per thread):
//! LOOKUP (a miss), CREATE (create, the kernel's reference, the open),
//! WRITE (`--size` bytes), GETXATTR `security.capability` (a miss),
//! SETATTR three times (owner, mode, times), GETATTR of the directory,
//! RELEASE; then what `rm -rf` sends: LOOKUP, GETATTR, UNLINK, FORGET of
//! both references, and per directory RMDIR and FORGET. It prints the
//! mean microseconds per file of each call (wall clock, so under load
//! they include waits for the CPU), the calling threads' CPU time per
//! file, and per file the journal handles, metadata cache lookups and
//! misses, leaf walks (derived builds), inode allocator work and group
//! descriptor block changes. The
//! image is a sparse file in `--dir` (uext4's mkfs), checked with
//! `e2fsck -fn` when installed, and deleted.

use crate::util::{fs_err, CliError, CliResult};
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;
use uext4::device::{BlockDevice, FileDevice};
use uext4::inode_api::{Cred, SetAttr};
use uext4::mkfs::{format_device, MkfsOptions};
use uext4::MountOptions;
use uext4::{Filesystem, Timestamp};

/// Parameters of `bench tree`.
#[derive(Debug, Clone)]
pub struct TreeBench {
    /// Files per thread.
    pub files: u64,
    /// Threads (each in a tree of its own).
    pub threads: usize,
    /// Directories per thread.
    pub dirs: u64,
    /// Bytes written to each file.
    pub size: usize,
    /// Image size in MiB.
    pub image_mib: u64,
    /// Where the image goes.
    pub dir: PathBuf,
}

/// The calls of one file, in the order of [`EXTRACT`] and [`REMOVE`].
const EXTRACT: [&str; 10] = [
    "lookup-miss",
    "create",
    "write",
    "getxattr",
    "setattr-owner",
    "setattr-mode",
    "setattr-times",
    "getattr-dir",
    "release",
    "total",
];
const REMOVE: [&str; 6] = ["lookup", "getattr", "unlink", "forget", "rmdir+forget", "total"];

/// A thread's CPU time so far, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Per-thread sums: nanoseconds per call and CPU nanoseconds.
#[derive(Default, Clone)]
struct Sums {
    ns: Vec<u64>,
    cpu: u64,
}

/// Counters of the engine read before and after a phase.
#[derive(Clone, Copy, Default)]
struct Counters {
    handles: u64,
    hits: u64,
    misses: u64,
    derived: u64,
    ialloc_examined: u64,
    group_journals: u64,
    group_journals_shared: u64,
    desc_writes: u64,
}

fn counters(fs: &Filesystem) -> Counters {
    let c = fs.cache_stats();
    let ia = fs.inode_alloc_stats().unwrap_or_default();
    Counters {
        handles: fs.io_stats().handles,
        hits: c.hits,
        misses: c.misses,
        derived: c.derived_builds,
        ialloc_examined: ia.groups_examined,
        group_journals: ia.group_journals,
        group_journals_shared: ia.group_journals_shared,
        desc_writes: fs.alloc_stats().map_or(0, |s| s.desc_writes),
    }
}

fn timed<T>(ns: &mut u64, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    *ns += t.elapsed().as_nanos() as u64;
    r
}

fn err(what: &str, e: uext4::Error) -> CliError {
    fs_err(what, e)
}

/// One thread's extract: `files` files spread over `dirs`.
fn extract(fs: &Filesystem, dirs: &[u32], files: u64, data: &[u8]) -> CliResult<Sums> {
    let mut s = Sums { ns: vec![0; EXTRACT.len()], cpu: 0 };
    let cred = Cred::root();
    let c0 = thread_cpu_ns();
    let t0 = Instant::now();
    for n in 0..files {
        let dir = dirs[(n % dirs.len() as u64) as usize];
        let name = format!("file-{n:07}");
        let name = name.as_bytes();
        match timed(&mut s.ns[0], || fs.lookup(dir, name)) {
            Err(uext4::Error::NotFound(_)) => {}
            Ok(_) => return Err(CliError::msg("lookup found a name not created yet")),
            Err(e) => return Err(err("lookup", e)),
        }
        let ino = timed(&mut s.ns[1], || {
            let st = fs.create_as(dir, name, 0o644, 0o022, &cred)?;
            fs.kernel_ref(st.ino);
            fs.open_inode(st.ino)?;
            Ok(st.ino)
        })
        .map_err(|e| err("create", e))?;
        timed(&mut s.ns[2], || fs.inodes().write(ino, 0, data)).map_err(|e| err("write", e))?;
        match timed(&mut s.ns[3], || fs.get_xattr(ino, "security.capability")) {
            Err(uext4::Error::NoAttr(_)) => {}
            Ok(_) => return Err(CliError::msg("a new file has security.capability")),
            Err(e) => return Err(err("getxattr", e)),
        }
        let owner = SetAttr { uid: Some(0), gid: Some(0), ..Default::default() };
        timed(&mut s.ns[4], || fs.setattr_as(ino, owner, &cred)).map_err(|e| err("setattr", e))?;
        let mode = SetAttr { mode: Some(0o644), ..Default::default() };
        timed(&mut s.ns[5], || fs.setattr_as(ino, mode, &cred)).map_err(|e| err("setattr", e))?;
        let t = Timestamp { sec: 1_700_000_000, nsec: 0 };
        let times = SetAttr { atime: Some(t), mtime: Some(t), ..Default::default() };
        timed(&mut s.ns[6], || fs.setattr_as(ino, times, &cred)).map_err(|e| err("setattr", e))?;
        timed(&mut s.ns[7], || fs.stat(dir)).map_err(|e| err("getattr", e))?;
        timed(&mut s.ns[8], || fs.close_inode(ino)).map_err(|e| err("release", e))?;
    }
    s.ns[EXTRACT.len() - 1] = t0.elapsed().as_nanos() as u64;
    s.cpu = thread_cpu_ns() - c0;
    Ok(s)
}

/// One thread's `rm -rf` of what [`extract`] made, then its directories.
fn remove(fs: &Filesystem, top: u32, dirs: &[u32], files: u64) -> CliResult<Sums> {
    let mut s = Sums { ns: vec![0; REMOVE.len()], cpu: 0 };
    let c0 = thread_cpu_ns();
    let t0 = Instant::now();
    for n in 0..files {
        let dir = dirs[(n % dirs.len() as u64) as usize];
        let name = format!("file-{n:07}");
        let name = name.as_bytes();
        let ino = timed(&mut s.ns[0], || {
            let ino = fs.lookup(dir, name)?;
            fs.kernel_ref(ino);
            Ok(ino)
        })
        .map_err(|e| err("lookup", e))?;
        timed(&mut s.ns[1], || fs.stat(ino)).map_err(|e| err("getattr", e))?;
        timed(&mut s.ns[2], || fs.unlink(dir, name)).map_err(|e| err("unlink", e))?;
        // The create's reference and the lookup's.
        timed(&mut s.ns[3], || fs.kernel_forget(ino, 2)).map_err(|e| err("forget", e))?;
    }
    for (k, &d) in dirs.iter().enumerate() {
        timed(&mut s.ns[4], || {
            fs.rmdir(top, format!("d{k}").as_bytes())?;
            fs.kernel_forget(d, 1)
        })
        .map_err(|e| err("rmdir", e))?;
    }
    s.ns[REMOVE.len() - 1] = t0.elapsed().as_nanos() as u64;
    s.cpu = thread_cpu_ns() - c0;
    Ok(s)
}

fn run_phase<F>(threads: usize, f: F) -> CliResult<(Vec<Sums>, f64)>
where
    F: Fn(usize) -> CliResult<Sums> + Sync,
{
    let t = Instant::now();
    let out: Vec<CliResult<Sums>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|k| {
                s.spawn({
                    let f = &f;
                    move || f(k)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(CliError::msg("a bench thread panicked")))).collect()
    });
    let secs = t.elapsed().as_secs_f64();
    Ok((out.into_iter().collect::<CliResult<Vec<_>>>()?, secs))
}

fn report(
    out: &mut impl Write,
    phase: &str,
    names: &[&str],
    sums: &[Sums],
    secs: f64,
    files: u64,
    (c0, c1): (Counters, Counters),
) -> CliResult {
    let f = files.max(1) as f64;
    let per = |v: u64| v as f64 / f;
    let mut cells = Vec::new();
    for (k, n) in names.iter().enumerate() {
        let ns: u64 = sums.iter().map(|s| s.ns[k]).sum();
        cells.push(format!("{n} {:.1}", ns as f64 / 1000.0 / f));
    }
    let cpu: u64 = sums.iter().map(|s| s.cpu).sum();
    writeln!(out, "{phase}: {files} files in {secs:.2} s, {:.0} files/s", f / secs)?;
    writeln!(out, "  us/file (wall, summed over threads): {}", cells.join(", "))?;
    writeln!(
        out,
        "  per file: CPU {:.1} us, handles {:.2}, cache lookups {:.1} (misses {:.2}), leaf walks {:.2}, inode groups examined {:.2}, inode group journals {:.2} (shared {:.2}), descriptor writes {:.2}",
        cpu as f64 / 1000.0 / f,
        per(c1.handles - c0.handles),
        per(c1.hits - c0.hits + c1.misses - c0.misses),
        per(c1.misses - c0.misses),
        per(c1.derived - c0.derived),
        per(c1.ialloc_examined - c0.ialloc_examined),
        per(c1.group_journals - c0.group_journals),
        per(c1.group_journals_shared - c0.group_journals_shared),
        per(c1.desc_writes - c0.desc_writes),
    )?;
    Ok(())
}

/// Runs `bench tree` and prints the results.
pub fn run_tree(p: &TreeBench, out: &mut impl Write) -> CliResult {
    let threads = p.threads.max(1);
    let dirs_per = p.dirs.max(1);
    std::fs::create_dir_all(&p.dir)?;
    let img = p.dir.join(format!("uext4-bench-tree-{}.img", std::process::id()));
    let size = p.image_mib << 20;
    {
        let f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(&img)?;
        f.set_len(size)?;
    }
    let result = (|| -> CliResult {
        let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(&img, true)?);
        let opts = MkfsOptions { size, block_size: Some(4096), ..Default::default() };
        format_device(dev.as_ref(), &opts, true).map_err(|e| fs_err("mkfs", e))?;
        let mut fs = Filesystem::open_device(dev, MountOptions { write: true, ..Default::default() })
            .map_err(|e| fs_err("open", e))?;
        let mut trees = Vec::new();
        for t in 0..threads {
            let top = fs.mkdir(fs.root(), format!("t{t}").as_bytes(), 0o755, 0, 0).map_err(|e| err("mkdir", e))?.ino;
            let mut dirs = Vec::new();
            for k in 0..dirs_per {
                let d = fs.mkdir(top, format!("d{k}").as_bytes(), 0o755, 0, 0).map_err(|e| err("mkdir", e))?.ino;
                fs.kernel_ref(d);
                dirs.push(d);
            }
            trees.push((top, dirs));
        }
        fs.commit().map_err(|e| err("commit", e))?;
        let data = vec![0x5au8; p.size];
        let total = p.files * threads as u64;
        writeln!(
            out,
            "bench tree: {threads} thread(s), {} files each in {dirs_per} directories, {} bytes per file",
            p.files, p.size
        )?;
        let c0 = counters(&fs);
        let (sums, secs) = run_phase(threads, |t| extract(&fs, &trees[t].1, p.files, &data))?;
        let c1 = counters(&fs);
        report(out, "extract", &EXTRACT, &sums, secs, total, (c0, c1))?;
        fs.commit().map_err(|e| err("commit", e))?;
        let c0 = counters(&fs);
        let (sums, secs) = run_phase(threads, |t| remove(&fs, trees[t].0, &trees[t].1, p.files))?;
        let c1 = counters(&fs);
        report(out, "rm -rf", &REMOVE, &sums, secs, total, (c0, c1))?;
        fs.unmount().map_err(|e| err("unmount", e))?;
        Ok(())
    })();
    let checked = result.and_then(|()| match Command::new("e2fsck").arg("-fn").arg(&img).output() {
        Ok(o) if !o.status.success() => {
            Err(CliError::msg(format!("e2fsck -fn found problems: {}", String::from_utf8_lossy(&o.stdout).trim())))
        }
        Ok(_) => Ok(writeln!(out, "image: e2fsck -fn clean")?),
        // Not installed: nothing to check with.
        Err(_) => Ok(()),
    });
    let _ = std::fs::remove_file(&img);
    checked
}
