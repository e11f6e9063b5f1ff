//! `uext4 freefrag`: free-space fragmentation in the format of e2freefrag.

use crate::util::{fs_err, print_json, CliResult};
use std::io::Write;
use std::path::Path;
use uext4::inode_api::stats::FreeExtentHistogram;
use uext4::Filesystem;

/// e2freefrag's histogram length (MAX_HIST in misc/e2freefrag.h): row i
/// counts free extents of 2^(i-1) to 2^i - 1 blocks, the last row every
/// longer one too.
const MAX_HIST: usize = 32;

/// The histogram in e2freefrag's rows: (extents, blocks) per row.
fn rows(h: &FreeExtentHistogram) -> [(u64, u64); MAX_HIST] {
    let mut rows = [(0u64, 0u64); MAX_HIST];
    for (k, &(n, blocks)) in h.buckets.iter().enumerate() {
        let r = &mut rows[(k + 1).min(MAX_HIST - 1)];
        r.0 += n;
        r.1 += blocks;
    }
    rows
}

/// The "START...END-" label of every row, made as e2freefrag makes it:
/// sizes in KiB, K until a row's *start* reaches 1024 of the unit, then
/// the next unit; so a row ends at `1024K-` and the next starts at
/// `1M`, and the last row ends at `max`.
fn labels(block_size: u32) -> Vec<String> {
    const UNITS: &[u8] = b"KMGTPEZY";
    let bits = block_size.trailing_zeros() as usize;
    let (mut unit, mut shift, mut start) = (0usize, 10usize, 0u64);
    let mut out = Vec::with_capacity(MAX_HIST);
    for i in 0..MAX_HIST {
        let end = 1u64 << (i + bits - shift);
        let u = char::from(UNITS[unit]);
        let end_str = if i == MAX_HIST - 1 { "max ".to_string() } else { format!("{end:>5}{u}-") };
        out.push(format!("{start:>5}{u}...{end_str:>7}"));
        start = end;
        if start == 1024 {
            start = 1;
            shift += 10;
            unit += 1;
        }
    }
    out
}

/// Min, max and average free extent in KiB, rounded as e2freefrag does
/// (the average in whole blocks first).
fn extent_kib(h: &FreeExtentHistogram) -> (u64, u64, u64) {
    let scale = u64::from(h.block_size >> 10);
    match h.free_blocks.checked_div(h.extents) {
        Some(avg) => (h.min_extent * scale, h.max_extent * scale, avg * scale),
        None => (0, 0, 0),
    }
}

/// Prints the report for `fs` (named `image`).
pub fn run(fs: &Filesystem, image: &Path, out: &mut impl Write) -> CliResult {
    let h = fs.free_extent_histogram().map_err(|e| fs_err("block bitmaps", e))?;
    writeln!(out, "Device: {}", image.display())?;
    writeln!(out, "Blocksize: {} bytes", h.block_size)?;
    writeln!(out, "Total blocks: {}", h.total_blocks)?;
    let pct = if h.total_blocks == 0 { 0.0 } else { h.free_blocks as f64 * 100.0 / h.total_blocks as f64 };
    writeln!(out, "Free blocks: {} ({:.1}%)", h.free_blocks, pct)?;
    writeln!(out)?;
    let (min, max, avg) = extent_kib(&h);
    writeln!(out, "Min. free extent: {min} KB ")?;
    writeln!(out, "Max. free extent: {max} KB")?;
    writeln!(out, "Avg. free extent: {avg} KB")?;
    writeln!(out, "Num. free extent: {}", h.extents)?;
    writeln!(out)?;
    writeln!(out, "HISTOGRAM OF FREE EXTENT SIZES:")?;
    writeln!(out, "Extent Size Range :  Free extents   Free Blocks  Percent")?;
    for ((n, blocks), label) in rows(&h).into_iter().zip(labels(h.block_size)) {
        if n == 0 {
            continue;
        }
        let p = blocks as f64 * 100.0 / h.free_blocks.max(1) as f64;
        writeln!(out, "{label}  :  {n:>12}  {blocks:>12}  {p:>6.2}%")?;
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
    // e2freefrag's rows: row i holds 2^(i-1) to 2^i - 1 blocks (the last
    // row: everything longer, its max_blocks the longest extent + 1).
    let histogram = rows(&h)
        .into_iter()
        .enumerate()
        .filter(|(_, (n, _))| *n != 0)
        .map(|(i, (n, blocks))| {
            let min_blocks = 1u64 << (i - 1);
            let max_blocks = if i == MAX_HIST - 1 { h.max_extent + 1 } else { 1u64 << i };
            BucketJson {
                min_blocks,
                max_blocks,
                min_kb: kib(min_blocks),
                max_kb: kib(max_blocks),
                free_extents: n,
                free_blocks: blocks,
                percent: pct(blocks, h.free_blocks),
            }
        })
        .collect();
    let (min_kb, max_kb, avg_kb) = extent_kib(&h);
    let report = FreefragJson {
        device: image.display().to_string(),
        block_size: h.block_size,
        total_blocks: h.total_blocks,
        free_blocks: h.free_blocks,
        free_percent: pct(h.free_blocks, h.total_blocks),
        min_free_extent_kb: min_kb,
        max_free_extent_kb: max_kb,
        avg_free_extent_kb: avg_kb,
        free_extents: h.extents,
        histogram,
    };
    print_json(&report, out)
}
