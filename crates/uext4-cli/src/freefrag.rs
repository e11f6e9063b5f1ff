//! `uext4 freefrag`: free-space fragmentation in the format of e2freefrag.

use crate::util::{fs_err, print_json, CliResult};
use std::io::Write;
use std::path::Path;
use uext4::Filesystem;

/// A size in KiB with the unit e2freefrag would use (K, M, G, T).
fn unit(kib: u64) -> (u64, char) {
    let mut v = kib;
    let mut u = 0;
    while v >= 1024 && u < 3 {
        v /= 1024;
        u += 1;
    }
    (v, ['K', 'M', 'G', 'T'][u])
}

/// Prints the report for `fs` (named `image`).
pub fn run(fs: &Filesystem, image: &Path, out: &mut impl Write) -> CliResult {
    let h = fs.free_extent_histogram().map_err(|e| fs_err("block bitmaps", e))?;
    let bs = u64::from(h.block_size);
    let kib = |blocks: u64| blocks * bs / 1024;
    writeln!(out, "Device: {}", image.display())?;
    writeln!(out, "Blocksize: {} bytes", h.block_size)?;
    writeln!(out, "Total blocks: {}", h.total_blocks)?;
    let pct = if h.total_blocks == 0 { 0.0 } else { h.free_blocks as f64 * 100.0 / h.total_blocks as f64 };
    writeln!(out, "Free blocks: {} ({:.1}%)", h.free_blocks, pct)?;
    writeln!(out)?;
    writeln!(out, "Min. free extent: {} KB ", kib(h.min_extent))?;
    writeln!(out, "Max. free extent: {} KB", kib(h.max_extent))?;
    let avg = kib(h.free_blocks).checked_div(h.extents).unwrap_or(0);
    writeln!(out, "Avg. free extent: {avg} KB")?;
    writeln!(out, "Num. free extent: {}", h.extents)?;
    writeln!(out)?;
    writeln!(out, "HISTOGRAM OF FREE EXTENT SIZES:")?;
    writeln!(out, "Extent Size Range :  Free extents   Free Blocks  Percent")?;
    for (k, &(n, blocks)) in h.buckets.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let (lo, lu) = unit(kib(1 << k));
        let (hi, hu) = unit(kib(2 << k));
        let p = blocks as f64 * 100.0 / h.free_blocks.max(1) as f64;
        writeln!(out, "{lo:>5}{lu}...{hi:>5}{hu}-  :  {n:>12}  {blocks:>12}  {p:>6.2}%")?;
    }
    Ok(())
}

/// `freefrag --json`: the report's numbers, sizes in blocks and KiB.
#[derive(serde::Serialize)]
struct FreefragJson {
    device: String,
    block_size: u32,
    total_blocks: u64,
    free_blocks: u64,
    free_percent: f64,
    min_free_extent_kb: u64,
    max_free_extent_kb: u64,
    avg_free_extent_kb: u64,
    free_extents: u64,
    /// Only the non-empty buckets, smallest first, as in the text report.
    histogram: Vec<BucketJson>,
}

/// One histogram row: free extents of `min_blocks` to below `max_blocks` blocks.
#[derive(serde::Serialize)]
struct BucketJson {
    min_blocks: u64,
    max_blocks: u64,
    min_kb: u64,
    max_kb: u64,
    free_extents: u64,
    free_blocks: u64,
    percent: f64,
}

/// Prints the report for `fs` (named `image`) as one JSON document.
pub fn run_json(fs: &Filesystem, image: &Path, out: &mut impl Write) -> CliResult {
    let h = fs.free_extent_histogram().map_err(|e| fs_err("block bitmaps", e))?;
    let bs = u64::from(h.block_size);
    let kib = |blocks: u64| blocks * bs / 1024;
    let pct = |part: u64, whole: u64| if whole == 0 { 0.0 } else { part as f64 * 100.0 / whole as f64 };
    let histogram = h
        .buckets
        .iter()
        .enumerate()
        .filter(|(_, &(n, _))| n != 0)
        .map(|(k, &(n, blocks))| BucketJson {
            min_blocks: 1 << k,
            max_blocks: 2 << k,
            min_kb: kib(1 << k),
            max_kb: kib(2 << k),
            free_extents: n,
            free_blocks: blocks,
            percent: pct(blocks, h.free_blocks),
        })
        .collect();
    let report = FreefragJson {
        device: image.display().to_string(),
        block_size: h.block_size,
        total_blocks: h.total_blocks,
        free_blocks: h.free_blocks,
        free_percent: pct(h.free_blocks, h.total_blocks),
        min_free_extent_kb: kib(h.min_extent),
        max_free_extent_kb: kib(h.max_extent),
        avg_free_extent_kb: kib(h.free_blocks).checked_div(h.extents).unwrap_or(0),
        free_extents: h.extents,
        histogram,
    };
    print_json(&report, out)
}
