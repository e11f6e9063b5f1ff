//! `uext4 bench`: built-in benchmarks (measurements, never tests).
//!
//! `bench alloc` reproduces seed 004's experiment in process: many threads
//! each allocate "files" of a fixed size on a fragmented in-memory image,
//! once with CR1.5 and once without, reporting allocations per second,
//! extents scanned, per-criterion hits and the free-extent histogram after.

use crate::mbstats::print_stats;
use crate::util::{fs_err, CliError, CliResult};
use std::io::Write;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use uext4::device::{BlockDevice, MemoryDevice};
use uext4::diagnostics::AllocatorBench;
use uext4::inode_api::stats::{AllocStats, Criterion};
use uext4::{FileBlock, PhysicalBlock};

/// Parameters of `bench alloc`.
#[derive(Debug, Clone)]
pub struct AllocBench {
    /// Image size in MiB.
    pub image_mib: u64,
    /// Block size in bytes.
    pub block_size: u32,
    /// Size of each file in KiB.
    pub file_kib: u64,
    /// Files per run (split over the threads).
    pub files: u64,
    /// Thread counts to run.
    pub threads: Vec<usize>,
    /// Free run length of the fragmentation pattern, in KiB.
    pub free_kib: u64,
    /// Used gap between free runs, in KiB.
    pub used_kib: u64,
    /// Print JSON instead of a table.
    pub json: bool,
    /// Print the full counters of each run.
    pub verbose: bool,
}

struct RunResult {
    threads: usize,
    cr1_5: bool,
    secs: f64,
    files: u64,
    extents: u64,
    stats: AllocStats,
    avg_free_kib: f64,
    free_extents: u64,
}

/// The per-criterion hit counters `bench alloc` reports, in
/// [`Criterion::ALL`] order: the JSON key and the table column of each.
const HIT_COLUMNS: [(Criterion, &str, &str); 7] = [
    (Criterion::Goal, "goal", "goal"),
    (Criterion::Prealloc, "prealloc", "pa"),
    (Criterion::Cr0, "cr0", "CR0"),
    (Criterion::Cr1, "cr1", "CR1"),
    (Criterion::Cr1_5, "cr1_5", "CR1.5"),
    (Criterion::Cr2, "cr2", "CR2"),
    (Criterion::Cr3, "cr3", "CR3"),
];

/// Builds the fragmented base image in memory and returns its bytes.
fn base_image(p: &AllocBench) -> CliResult<Vec<u8>> {
    let dir = std::env::temp_dir().join(format!("uext4-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let img = dir.join("base.img");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", &p.block_size.to_string(), "-O", "^has_journal"])
        .arg(&img)
        .arg(format!("{}M", p.image_mib))
        .output()
        .map_err(|e| CliError::msg(format!("mkfs.ext4: {e} (install e2fsprogs)")))?;
    if !out.status.success() {
        return Err(CliError::msg(format!("mkfs.ext4 failed: {}", String::from_utf8_lossy(&out.stderr).trim())));
    }
    let bytes = std::fs::read(&img)?;
    let _ = std::fs::remove_dir_all(&dir);
    let dev = Arc::new(MemoryDevice::from_bytes(&bytes));
    let a = AllocatorBench::open(dev.clone() as Arc<dyn BlockDevice>, true).map_err(|e| fs_err("allocator", e))?;
    let kib_blocks = |k: u64| ((k * 1024) / u64::from(p.block_size)).max(1) as u32;
    a.fragment(kib_blocks(p.free_kib), kib_blocks(p.used_kib)).map_err(|e| fs_err("fragment", e))?;
    a.flush().map_err(|e| fs_err("flush", e))?;
    Ok(dev.to_vec())
}

fn one_run(p: &AllocBench, base: &[u8], threads: usize, cr1_5: bool) -> CliResult<RunResult> {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::from_bytes(base));
    let a = AllocatorBench::open(dev, cr1_5).map_err(|e| fs_err("allocator", e))?;
    let bs = u64::from(p.block_size);
    let file_blocks = ((p.file_kib * 1024).div_ceil(bs)) as u32;
    let per_thread = p.files / threads as u64;
    let extents = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (a, extents, done) = (&a, &extents, &done);
            s.spawn(move || {
                for f in 0..per_thread {
                    let ino = 100_000 + (t as u64 * per_thread + f) as u32;
                    let mut logical = FileBlock(0);
                    let mut goal = PhysicalBlock(0);
                    // Like delalloc writeback: the whole file at once, in as
                    // many extents as the allocator returns.
                    while logical < FileBlock(u64::from(file_blocks)) {
                        let left = file_blocks - logical.get() as u32;
                        match a.allocate(ino, logical, goal, left, p.file_kib * 1024) {
                            Ok((start, len)) => {
                                logical += u64::from(len);
                                goal = start + u64::from(len);
                                extents.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(_) => return,
                        }
                    }
                    a.discard_inode_prealloc(ino);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let secs = start.elapsed().as_secs_f64();
    let h = a.free_extent_histogram().map_err(|e| fs_err("histogram", e))?;
    Ok(RunResult {
        threads,
        cr1_5,
        secs,
        files: done.load(Ordering::Relaxed),
        extents: extents.load(Ordering::Relaxed),
        stats: a.stats(),
        avg_free_kib: h.avg_extent() * bs as f64 / 1024.0,
        free_extents: h.extents,
    })
}

/// Runs `bench alloc` and prints the results.
pub fn run_alloc(p: &AllocBench, out: &mut impl Write) -> CliResult {
    let base = base_image(p)?;
    let mut results = Vec::new();
    for &threads in &p.threads {
        for cr1_5 in [true, false] {
            let r = one_run(p, &base, threads.max(1), cr1_5)?;
            if p.verbose {
                writeln!(out, "== threads {threads}, cr1.5 {} ==", if cr1_5 { "on" } else { "off" })?;
                print_stats(&r.stats, out)?;
            }
            results.push(r);
        }
    }
    let total_scanned = |s: &AllocStats| s.extents_scanned.iter().sum::<u64>();
    // One list of the hit counters for both outputs, so the JSON keys and
    // the table's columns cannot drift apart.
    let hits = |s: &AllocStats, field: fn(&str, u64) -> String| {
        HIT_COLUMNS.iter().map(|&(c, key, _)| field(key, s.hits[c.index()])).collect::<Vec<_>>()
    };
    if p.json {
        let rows: Vec<String> = results
            .iter()
            .map(|r| {
                format!(
                    "{{\"threads\":{},\"cr1_5\":{},\"files\":{},\"secs\":{:.4},\"files_per_sec\":{:.1},\
                     \"extents\":{},\"extents_scanned\":{},\"hits\":{{{}}},\"free_extents_after\":{},\
                     \"avg_free_extent_kib_after\":{:.1}}}",
                    r.threads,
                    r.cr1_5,
                    r.files,
                    r.secs,
                    r.files as f64 / r.secs,
                    r.extents,
                    total_scanned(&r.stats),
                    hits(&r.stats, |key, n| format!("\"{key}\":{n}")).join(","),
                    r.free_extents,
                    r.avg_free_kib
                )
            })
            .collect();
        writeln!(out, "[{}]", rows.join(","))?;
        return Ok(());
    }
    writeln!(
        out,
        "bench alloc: {} MiB image, {} B blocks, free space in {} KiB runs between {} KiB used, {} files of {} KiB",
        p.image_mib, p.block_size, p.free_kib, p.used_kib, p.files, p.file_kib
    )?;
    let heads: Vec<&str> = HIT_COLUMNS.iter().map(|&(_, _, head)| head).collect();
    writeln!(
        out,
        "| threads | CR1.5 | files/s | extents/file | extents scanned | {} | free extents after | avg free after |",
        heads.join(" | ")
    )?;
    writeln!(out, "|{}", "---|".repeat(7 + HIT_COLUMNS.len()))?;
    for r in &results {
        writeln!(
            out,
            "| {} | {} | {:.0} | {:.2} | {} | {} | {} | {:.0} KiB |",
            r.threads,
            if r.cr1_5 { "on" } else { "off" },
            r.files as f64 / r.secs,
            r.extents as f64 / r.files.max(1) as f64,
            total_scanned(&r.stats),
            hits(&r.stats, |_, n| n.to_string()).join(" | "),
            r.free_extents,
            r.avg_free_kib
        )?;
    }
    Ok(())
}
