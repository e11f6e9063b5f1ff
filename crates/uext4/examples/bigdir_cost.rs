//! The engine's own cost per operation in one big directory (issue 24,
//! no FUSE): creates, lookups (hit and miss) and unlinks measured at
//! 100,000 and at 1,000,000 entries, then the removal of everything.
//!
//! ```text
//! cargo run --release -p uext4 --example bigdir_cost -- IMAGE [ENTRIES]
//! ```
//!
//! IMAGE is made here with `mkfs.ext4` (a sparse file; put it in
//! /dev/shm to keep the device out of the figures) and deleted at the
//! end. ENTRIES defaults to 1,000,000; `UEXT4_CACHE_BLOCKS` sets the
//! metadata cache's size. Per-operation figures are microseconds of wall
//! time and of the process's CPU time (all threads: the journal's commits
//! count), the latter robust on a loaded machine. The image is checked
//! with `e2fsck -fn` before it is deleted (unclean: exit status 1).
//! `tests/examples.rs` runs it on 3,000 entries.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;
use uext4::{Filesystem, MountOptions};

/// Entries added, looked up and removed per measured step.
const SAMPLE: u64 = 20_000;

fn name(i: u64) -> Vec<u8> {
    format!("entry-{i:08}").into_bytes()
}

/// A permutation of `0..n` picked by a fixed-seed LCG (reproducible).
fn shuffled(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut s = seed | 1;
    for i in (1..v.len()).rev() {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        v.swap(i, (s >> 33) as usize % (i + 1));
    }
    v
}

/// Wall time and CPU time of the whole process (every thread: the
/// journal's commits count) since a point.
#[derive(Clone, Copy)]
struct Clock {
    wall: Instant,
    cpu: f64,
}

fn cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

impl Clock {
    fn now() -> Clock {
        Clock { wall: Instant::now(), cpu: cpu_seconds() }
    }
}

/// "wall/cpu" microseconds per operation over `n` operations since `t`.
fn per_op(t: Clock, n: u64) -> String {
    let n = n as f64;
    format!("{:6.2}/{:6.2}", t.wall.elapsed().as_secs_f64() * 1e6 / n, (cpu_seconds() - t.cpu) * 1e6 / n)
}

/// Lookups of present and absent names, then unlinks and re-creates of
/// `SAMPLE` random entries, with the directory at `size` entries.
fn measure(fs: &Filesystem, dir: u32, size: u64) {
    let picks = shuffled(size, size);
    let sample = &picks[..SAMPLE.min(size) as usize];
    let t = Clock::now();
    for &i in sample {
        fs.lookup(dir, &name(i)).unwrap();
    }
    let hit = per_op(t, sample.len() as u64);
    let t = Clock::now();
    for &i in sample {
        assert!(fs.lookup(dir, &name(i + 100_000_000)).is_err());
    }
    let miss = per_op(t, sample.len() as u64);
    let t = Clock::now();
    for &i in sample {
        fs.unlink(dir, &name(i)).unwrap();
    }
    let unlink = per_op(t, sample.len() as u64);
    let t = Clock::now();
    for &i in sample {
        fs.create(dir, &name(i), 0o644, 0, 0).unwrap();
    }
    let create = per_op(t, sample.len() as u64);
    println!("at {size:>8} entries, us/op (wall/cpu): create {create}  lookup hit {hit}  miss {miss}  unlink {unlink}");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let img = Path::new(args.get(1).map(String::as_str).unwrap_or("/dev/shm/bigdir_cost.img"));
    let total: u64 = args.get(2).map_or(1_000_000, |s| s.parse().expect("ENTRIES"));
    // UEXT4_CACHE_BLOCKS: the metadata cache's size (default 16384
    // blocks; a million inodes fill 62,500 inode-table blocks).
    let cache_blocks = std::env::var("UEXT4_CACHE_BLOCKS").ok().and_then(|v| v.parse().ok());
    let clean = run(img, total, cache_blocks);
    let _ = std::fs::remove_file(img);
    if !clean {
        std::process::exit(1);
    }
}

/// Makes a fresh image at `img`, grows one directory to `total` entries
/// and removes them, printing the figures; true if `e2fsck -fn` finds
/// the image clean afterwards (the image is left for the caller).
pub fn run(img: &Path, total: u64, cache_blocks: Option<usize>) -> bool {
    let _ = std::fs::remove_file(img);
    std::fs::File::create(img).unwrap().set_len(16 << 30).unwrap();
    let inodes = (total + total / 10 + 1000).to_string();
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096", "-N", &inodes, "-O", "large_dir"])
        .args(["-E", "lazy_itable_init=1,lazy_journal_init=1"])
        .arg(img)
        .output()
        .expect("mkfs.ext4");
    assert!(out.status.success(), "mkfs.ext4: {}", String::from_utf8_lossy(&out.stderr));

    let dev = uext4::FileDevice::open(img, true).unwrap();
    let mut opts = MountOptions { write: true, ..Default::default() };
    if let Some(n) = cache_blocks {
        opts.cache_blocks = n;
    }
    let mut fs = Filesystem::open_device(Arc::new(dev), opts).unwrap();
    let dir = fs.mkdir(fs.root(), b"big", 0o755, 0, 0).unwrap().ino;

    let start = Clock::now();
    let mut t = Clock::now();
    for i in 0..total {
        fs.create(dir, &name(i), 0o644, 0, 0).unwrap();
        let done = i + 1;
        if done.is_multiple_of(100_000) || done == total {
            let n = if done.is_multiple_of(100_000) { 100_000 } else { done % 100_000 };
            println!("creates {:>8}..{done:<8} {} us/op (wall/cpu)", done - n, per_op(t, n));
            if done == 100_000 || done == total {
                measure(&fs, dir, done);
            }
            t = Clock::now();
        }
    }
    let t_rm = Clock::now();
    let mut t = Clock::now();
    for (k, i) in shuffled(total, 7).into_iter().enumerate() {
        fs.unlink(dir, &name(i)).unwrap();
        let done = k as u64 + 1;
        if done.is_multiple_of(100_000) {
            println!("unlinks {:>8}..{done:<8} {} us/op (wall/cpu)", done - 100_000, per_op(t, 100_000));
            t = Clock::now();
        }
    }
    println!("remove all: {:.2} s ({} us/op (wall/cpu))", t_rm.wall.elapsed().as_secs_f64(), per_op(t_rm, total));
    println!("total {:.1} s; buffer cache {:?}", start.wall.elapsed().as_secs_f64(), fs.cache_stats());
    fs.unmount().unwrap();
    drop(fs);
    let out = Command::new("e2fsck").args(["-fn"]).arg(img).output().expect("e2fsck");
    println!("e2fsck -fn: {}", if out.status.success() { "clean" } else { "NOT CLEAN" });
    if !out.status.success() {
        println!("{}", String::from_utf8_lossy(&out.stdout));
    }
    out.status.success()
}
