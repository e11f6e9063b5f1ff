//! `uext4 bench io`: the seeds' fio workloads, run in process against the
//! library (measurements, never tests).
//!
//! - W1 (seed 000): 4 KiB random read/write, direct, over 32 pre-written
//!   files, each thread picking a file at random per I/O.
//! - W2 (seed 001): 8 KiB buffered random reads and random writes on one
//!   file, half the threads reading, half writing.
//! - W3 (seed 002): 4 KiB direct writes into fallocated (unwritten)
//!   files, one per thread; `write` (sequential) and `randwrite` phases.
//! - W4 (seed 003): 2 KiB direct sequential overwrites of one shared file
//!   by every thread (unaligned on 4 KiB blocks).
//! - W5 (seed 004): small-file creation, as `bench/fio-compare.sh` does it
//!   through the mount: each thread creates 4 KiB files round robin in 16
//!   directories of its own (create, open count, one buffered write,
//!   close), the engine's own ceiling for the mount's files/s. No
//!   "before" switch: one run per thread count.
//!
//! Each workload runs with the default switches and with its seed's
//! "before" switch, for each thread count, on a fresh filesystem on the
//! memory device (or an image file with `--device file`).

use crate::util::{fs_err, CliError, CliResult};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uext4::device::{BlockDevice, FileDevice, MemoryDevice};
use uext4::inode_api::FallocMode;
use uext4::mkfs::{format_device, MkfsOptions};
use uext4::Filesystem;
use uext4::MountOptions;
use uext4::{inode_api::stats::IoStatsSnapshot, DataPathConfig, LockPolicy};

/// Parameters of `bench io`.
#[derive(Debug, Clone)]
pub struct IoBench {
    /// Workloads to run (w1..w5).
    pub workloads: Vec<String>,
    /// Thread counts; `0` means the seed's own job count.
    pub threads: Vec<usize>,
    /// Seconds per measured run.
    pub seconds: f64,
    /// `mem` or `file`.
    pub device: String,
    /// Directory for the image with `--device file`.
    pub dir: std::path::PathBuf,
    /// Print JSON lines instead of a table.
    pub json: bool,
}

/// One measured run.
#[derive(Debug, Clone)]
struct Row {
    workload: &'static str,
    phase: &'static str,
    switch: &'static str,
    threads: usize,
    read_ops: u64,
    write_ops: u64,
    secs: f64,
    bytes_per_op: u64,
    lat_p50_us: f64,
    lat_p99_us: f64,
    stats: IoStatsSnapshot,
    peak_cache: usize,
    rss_kib: u64,
}

/// The seed's job count for a workload.
fn seed_threads(w: &str) -> usize {
    match w {
        "w1" | "w3" => 16,
        "w2" | "w4" => 8,
        "w5" => 64,
        _ => 2,
    }
}

fn rss_peak_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// A fresh filesystem of `mib` MiB (4 KiB blocks) on the chosen device.
fn fresh_fs(p: &IoBench, mib: u64, data: DataPathConfig) -> CliResult<Filesystem> {
    let size = mib << 20;
    let dev: Arc<dyn BlockDevice> = if p.device == "file" {
        std::fs::create_dir_all(&p.dir)?;
        let path = p.dir.join("uext4-bench-io.img");
        let f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(&path)?;
        f.set_len(size)?;
        drop(f);
        Arc::new(FileDevice::open(&path, true)?)
    } else {
        Arc::new(MemoryDevice::new(size))
    };
    let opts = MkfsOptions { size, block_size: Some(4096), ..Default::default() };
    format_device(dev.as_ref(), &opts, true).map_err(|e| fs_err("mkfs", e))?;
    let open = MountOptions { write: true, data, cache_bytes: 256 << 20, ..Default::default() };
    Filesystem::open_device(dev, open).map_err(|e| fs_err("open", e))
}

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Per-thread result: ops done and sampled latencies (ns).
#[derive(Default)]
struct ThreadOut {
    reads: u64,
    writes: u64,
    lat: Vec<u64>,
}

/// Runs `threads` copies of `body(thread, rng, stop) -> ThreadOut` for
/// `secs` seconds.
fn run_threads<F>(threads: usize, secs: f64, body: F) -> (Vec<ThreadOut>, f64)
where
    F: Fn(usize, &mut Rng, &AtomicBool) -> ThreadOut + Send + Sync + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let body = Arc::new(body);
    let start = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let (stop, body) = (stop.clone(), body.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1).wrapping_mul(0x1234_5678_9ABC));
                body(t, &mut rng, &stop)
            })
        })
        .collect();
    // Until the time is up, or every thread has finished on its own.
    let deadline = start + Duration::from_secs_f64(secs);
    while Instant::now() < deadline && !hs.iter().all(|h| h.is_finished()) {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    let outs = hs.into_iter().map(|h| h.join().unwrap_or_default()).collect();
    (outs, start.elapsed().as_secs_f64())
}

/// Times one operation, keeping every 16th latency.
fn timed(out: &mut ThreadOut, f: impl FnOnce()) {
    let n = out.reads + out.writes;
    if n.is_multiple_of(16) {
        let t = Instant::now();
        f();
        out.lat.push(t.elapsed().as_nanos() as u64);
    } else {
        f();
    }
}

/// What a run was: workload, phase, switch, threads, bytes per op.
struct RunId {
    workload: &'static str,
    phase: &'static str,
    switch: &'static str,
    threads: usize,
    bytes_per_op: u64,
}

fn summarize(id: RunId, fs: &Filesystem, s0: IoStatsSnapshot, (outs, secs): (Vec<ThreadOut>, f64)) -> Row {
    let RunId { workload, phase, switch, threads, bytes_per_op } = id;
    let mut lat: Vec<u64> = outs.iter().flat_map(|o| o.lat.iter().copied()).collect();
    lat.sort_unstable();
    let pct = |q: f64| lat.get(((lat.len() as f64 - 1.0) * q) as usize).map_or(0.0, |&n| n as f64 / 1000.0);
    Row {
        workload,
        phase,
        switch,
        threads,
        read_ops: outs.iter().map(|o| o.reads).sum(),
        write_ops: outs.iter().map(|o| o.writes).sum(),
        secs,
        bytes_per_op,
        lat_p50_us: pct(0.5),
        lat_p99_us: pct(0.99),
        stats: fs.io_stats().since(&s0),
        peak_cache: fs.page_cache_usage().1,
        rss_kib: rss_peak_kib(),
    }
}

/// Creates `name` in the root directory and fills its `size` bytes with
/// `byte`, 1 MiB at a time, through the direct or the buffered path.
fn prefilled(fs: &Filesystem, name: &[u8], size: u64, byte: u8, direct: bool) -> CliResult<u32> {
    let ino = fs.create(fs.root(), name, 0o644, 0, 0).map_err(|e| fs_err("create", e))?.ino;
    let chunk = vec![byte; 1 << 20];
    for off in (0..size).step_by(chunk.len()) {
        let r = if direct { fs.write_direct(ino, off, &chunk) } else { fs.inodes().write(ino, off, &chunk) };
        r.map_err(|e| fs_err("prefill", e))?;
    }
    Ok(ino)
}

fn w1(p: &IoBench, threads: usize, data: DataPathConfig, switch: &'static str) -> CliResult<Row> {
    const FILES: u64 = 32;
    const FILE: u64 = 16 << 20;
    let fs = Arc::new(fresh_fs(p, 1024, data)?);
    let mut inos = Vec::new();
    for i in 0..FILES {
        inos.push(prefilled(&fs, format!("file1.0.{i}").as_bytes(), FILE, 0x5A, true)?);
    }
    fs.commit().map_err(|e| fs_err("commit", e))?;
    let s0 = fs.io_stats();
    let f2 = fs.clone();
    let r = run_threads(threads, p.seconds, move |_, rng, stop| {
        let mut out = ThreadOut::default();
        let mut buf = vec![0u8; 4096];
        while !stop.load(Ordering::Relaxed) {
            let ino = inos[rng.below(FILES) as usize];
            let off = rng.below(FILE / 4096) * 4096;
            if rng.below(2) == 0 {
                timed(&mut out, || {
                    let _ = f2.read_direct(ino, off, &mut buf);
                });
                out.reads += 1;
            } else {
                buf[0] = buf[0].wrapping_add(1);
                timed(&mut out, || {
                    let _ = f2.write_direct(ino, off, &buf);
                });
                out.writes += 1;
            }
        }
        out
    });
    Ok(summarize(RunId { workload: "W1", phase: "randrw", switch, threads, bytes_per_op: 4096 }, &fs, s0, r))
}

fn w2(p: &IoBench, threads: usize, data: DataPathConfig, switch: &'static str) -> CliResult<Row> {
    const FILE: u64 = 64 << 20;
    let fs = Arc::new(fresh_fs(p, 512, data)?);
    let ino = prefilled(&fs, b"w2", FILE, 0xA5, false)?;
    // Warm the cache as fio's layout pass and ramp time do.
    let mut warm = vec![0u8; 1 << 20];
    for off in (0..FILE).step_by(warm.len()) {
        fs.inodes().read(ino, off, &mut warm).map_err(|e| fs_err("warm", e))?;
    }
    fs.commit().map_err(|e| fs_err("commit", e))?;
    let s0 = fs.io_stats();
    let f2 = fs.clone();
    // `threads` readers and `threads` writers, as the seed's 8+8 jobs.
    let r = run_threads(threads * 2, p.seconds, move |t, rng, stop| {
        let mut out = ThreadOut::default();
        let mut buf = vec![t as u8; 8192];
        while !stop.load(Ordering::Relaxed) {
            let off = rng.below(FILE / 8192) * 8192;
            if t % 2 == 0 {
                timed(&mut out, || {
                    let _ = f2.inodes().read(ino, off, &mut buf);
                });
                out.reads += 1;
            } else {
                timed(&mut out, || {
                    let _ = f2.inodes().write(ino, off, &buf);
                });
                out.writes += 1;
            }
        }
        out
    });
    Ok(summarize(RunId { workload: "W2", phase: "randrw", switch, threads, bytes_per_op: 8192 }, &fs, s0, r))
}

fn w3(p: &IoBench, threads: usize, data: DataPathConfig, switch: &'static str, random: bool) -> CliResult<Row> {
    // Every write must land in unwritten space: each thread writes its
    // own fallocated file at most once per block (sequentially, or in a
    // random permutation), stopping early when the time is up.
    let file: u64 = 256 << 20;
    // Room for every file, plus the 5% reserved for root and metadata.
    let fs = Arc::new(fresh_fs(p, (file >> 20) * threads as u64 * 23 / 20 + 512, data)?);
    let root = fs.root();
    let mut inos = Vec::new();
    for t in 0..threads {
        let ino =
            fs.create(root, format!("unwritten.{t}").as_bytes(), 0o644, 0, 0).map_err(|e| fs_err("create", e))?.ino;
        fs.fallocate(ino, FallocMode::Allocate, 0, file).map_err(|e| fs_err("fallocate", e))?;
        inos.push(ino);
    }
    fs.commit().map_err(|e| fs_err("commit", e))?;
    let s0 = fs.io_stats();
    let f2 = fs.clone();
    let blocks = file / 4096; // a power of two
    let r = run_threads(threads, p.seconds, move |t, rng, stop| {
        let mut out = ThreadOut::default();
        let buf = vec![t as u8 | 1; 4096];
        // An odd stride modulo a power of two visits every block once.
        let stride = if random { (rng.below(blocks / 2) * 2 + 1) | 0x10001 } else { 1 };
        let mut b = rng.below(blocks);
        for _ in 0..blocks {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let off = b * 4096;
            b = (b + stride) % blocks;
            timed(&mut out, || {
                let _ = f2.write_direct(inos[t], off, &buf);
            });
            out.writes += 1;
        }
        out
    });
    let phase = if random { "randwrite" } else { "write" };
    Ok(summarize(RunId { workload: "W3", phase, switch, threads, bytes_per_op: 4096 }, &fs, s0, r))
}

fn w4(p: &IoBench, threads: usize, data: DataPathConfig, switch: &'static str) -> CliResult<Row> {
    const FILE: u64 = 256 << 20;
    let fs = Arc::new(fresh_fs(p, 512, data)?);
    let ino = prefilled(&fs, b"fio", FILE, 0x3C, true)?;
    fs.commit().map_err(|e| fs_err("commit", e))?;
    let s0 = fs.io_stats();
    let f2 = fs.clone();
    let r = run_threads(threads, p.seconds, move |t, _, stop| {
        let mut out = ThreadOut::default();
        let buf = vec![t as u8; 2048];
        // Every job writes the same file sequentially (fio's
        // --filename shared by --numjobs), from its own start.
        let mut off = (t as u64 * 2048 * 977) % FILE;
        while !stop.load(Ordering::Relaxed) {
            timed(&mut out, || {
                let _ = f2.write_direct(ino, off, &buf);
            });
            out.writes += 1;
            off = (off + 2048) % FILE;
        }
        out
    });
    Ok(summarize(RunId { workload: "W4", phase: "write", switch, threads, bytes_per_op: 2048 }, &fs, s0, r))
}

fn w5(p: &IoBench, threads: usize, data: DataPathConfig) -> CliResult<Row> {
    // 1 GiB: 65,536 inodes; each thread stops at its share of 60,000 files.
    let fs = Arc::new(fresh_fs(p, 1024, data)?);
    let cap = 60_000 / threads.max(1) as u64;
    let mut dirs = Vec::new();
    for t in 0..threads {
        let top = fs.mkdir(fs.root(), format!("p{t}").as_bytes(), 0o755, 0, 0).map_err(|e| fs_err("mkdir", e))?.ino;
        let mut mine = Vec::new();
        for k in 0..16 {
            mine.push(fs.mkdir(top, format!("d{k}").as_bytes(), 0o755, 0, 0).map_err(|e| fs_err("mkdir", e))?.ino);
        }
        dirs.push(mine);
    }
    fs.commit().map_err(|e| fs_err("commit", e))?;
    let s0 = fs.io_stats();
    let f2 = fs.clone();
    let r = run_threads(threads, p.seconds, move |t, _, stop| {
        let mut out = ThreadOut::default();
        let buf = vec![t as u8; 4096];
        let Some(mine) = dirs.get(t) else { return out };
        while out.writes < cap && !stop.load(Ordering::Relaxed) {
            let (dir, name) = (mine[(out.writes % 16) as usize], format!("f{}", out.writes));
            let mut failed = false;
            timed(&mut out, || {
                // What CREATE, WRITE and RELEASE do through the mount.
                let r = f2.create(dir, name.as_bytes(), 0o644, 0, 0).and_then(|st| {
                    f2.open_inode(st.ino)?;
                    f2.inodes().write(st.ino, 0, &buf)?;
                    f2.close_inode(st.ino)
                });
                failed = r.is_err();
            });
            if failed {
                break;
            }
            out.writes += 1;
        }
        out
    });
    Ok(summarize(RunId { workload: "W5", phase: "create", switch: "seeds", threads, bytes_per_op: 4096 }, &fs, s0, r))
}

/// Runs the chosen workloads and prints a table (or JSON lines).
pub fn run_io(p: &IoBench, out: &mut impl Write) -> CliResult {
    let seeds = DataPathConfig::default();
    let mut rows = Vec::new();
    for w in &p.workloads {
        if w == "w5" {
            for &t in &p.threads {
                let r = w5(p, if t == 0 { seed_threads(w) } else { t }, seeds)?;
                if p.json {
                    print_json(out, &r, &p.device)?;
                }
                rows.push(r);
            }
            continue;
        }
        let before = match w.as_str() {
            "w1" | "w2" => DataPathConfig { lock_policy: LockPolicy::Exclusive, ..seeds },
            "w3" => DataPathConfig { dio_unwritten_no_handle: false, ..seeds },
            "w4" => DataPathConfig { dio_unaligned_concurrent: false, ..seeds },
            other => return Err(CliError::msg(format!("unknown workload {other:?} (w1, w2, w3, w4, w5)"))),
        };
        let before_name = match w.as_str() {
            "w1" | "w2" => "lock_policy=exclusive",
            "w3" => "dio_unwritten_no_handle=off",
            _ => "dio_unaligned_concurrent=off",
        };
        for &t in &p.threads {
            let threads = if t == 0 { seed_threads(w) } else { t };
            for (cfg, name) in [(seeds, "seeds"), (before, before_name)] {
                let mut new_rows = match w.as_str() {
                    "w1" => vec![w1(p, threads, cfg, name)?],
                    "w2" => vec![w2(p, threads, cfg, name)?],
                    "w3" => vec![w3(p, threads, cfg, name, false)?, w3(p, threads, cfg, name, true)?],
                    _ => vec![w4(p, threads, cfg, name)?],
                };
                for r in &new_rows {
                    if p.json {
                        print_json(out, r, &p.device)?;
                    }
                }
                rows.append(&mut new_rows);
            }
        }
    }
    if !p.json {
        print_table(out, &rows, &p.device)?;
    }
    Ok(())
}

fn print_json(out: &mut impl Write, r: &Row, device: &str) -> CliResult {
    writeln!(
        out,
        "{{\"workload\":\"{}\",\"phase\":\"{}\",\"switch\":\"{}\",\"device\":\"{}\",\"threads\":{},\
         \"read_iops\":{:.0},\"write_iops\":{:.0},\"mib_s\":{:.1},\"lat_p50_us\":{:.1},\"lat_p99_us\":{:.1},\
         \"handles\":{},\"dio_overwrite_no_handle\":{},\"dio_unwritten_no_handle\":{},\"dio_conversions\":{},\
         \"dio_unaligned_shared\":{},\"dio_write_exclusive\":{},\"buffered_write_shared\":{},\
         \"buffered_write_exclusive\":{},\"peak_cache_mib\":{:.1},\"peak_rss_mib\":{:.1}}}",
        r.workload,
        r.phase,
        r.switch,
        device,
        r.threads,
        r.read_ops as f64 / r.secs,
        r.write_ops as f64 / r.secs,
        (r.read_ops + r.write_ops) as f64 * r.bytes_per_op as f64 / r.secs / 1048576.0,
        r.lat_p50_us,
        r.lat_p99_us,
        r.stats.handles,
        r.stats.dio_overwrite_no_handle,
        r.stats.dio_unwritten_no_handle,
        r.stats.dio_conversions,
        r.stats.dio_unaligned_shared,
        r.stats.dio_write_exclusive,
        r.stats.buffered_write_shared,
        r.stats.buffered_write_exclusive,
        r.peak_cache as f64 / 1048576.0,
        r.rss_kib as f64 / 1024.0,
    )?;
    Ok(())
}

fn print_table(out: &mut impl Write, rows: &[Row], device: &str) -> CliResult {
    writeln!(out, "bench io: device {device}, in process")?;
    writeln!(
        out,
        "| workload | phase | switch | threads | read IOPS | write IOPS | MiB/s | p50 us | p99 us | handles/op | fast-path ops | peak RSS MiB |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    for r in rows {
        let ops = (r.read_ops + r.write_ops).max(1);
        let s = &r.stats;
        let fast = match r.workload {
            "W1" => s.dio_overwrite_no_handle,
            "W2" => s.buffered_write_shared,
            "W3" => s.dio_unwritten_no_handle,
            _ => s.dio_unaligned_shared,
        };
        writeln!(
            out,
            "| {} | {} | {} | {} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.2} | {} | {:.0} |",
            r.workload,
            r.phase,
            r.switch,
            r.threads,
            r.read_ops as f64 / r.secs,
            r.write_ops as f64 / r.secs,
            ops as f64 * r.bytes_per_op as f64 / r.secs / 1048576.0,
            r.lat_p50_us,
            r.lat_p99_us,
            s.handles as f64 / ops as f64,
            fast,
            r.rss_kib as f64 / 1024.0,
        )?;
    }
    Ok(())
}
