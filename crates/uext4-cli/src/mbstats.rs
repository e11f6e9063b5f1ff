//! `uext4 mbstats`: the allocator's view of an image: per-group buddy
//! summaries (like /proc/fs/ext4/DEV/mb_groups) and the mb_stats counters.

use crate::util::{fs_err, print_json, CliResult};
use std::io::Write;
use uext4::diagnostics::group_summaries;
use uext4::inode_api::stats::{AllocStats, Criterion};
use uext4::Filesystem;

/// Prints the counters of one allocator.
pub fn print_stats(s: &AllocStats, out: &mut impl Write) -> CliResult {
    writeln!(out, "mballoc:")?;
    writeln!(out, "\treqs: {}", s.requests)?;
    writeln!(out, "\tblocks_allocated: {}", s.blocks_allocated)?;
    writeln!(out, "\tblocks_freed: {}", s.blocks_freed)?;
    writeln!(out, "\tgoal_len_hits: {}", s.goal_len_hits)?;
    writeln!(out, "\tenospc: {}", s.enospc)?;
    writeln!(out, "\tbuddies_generated: {}", s.buddy_generations)?;
    writeln!(out, "\tuninit_groups_initialised: {}", s.uninit_inits)?;
    writeln!(out, "\tprefetched_groups: {}", s.prefetch_groups)?;
    writeln!(out, "\tprefetch_bitmap_reads: {}", s.prefetch_ios)?;
    writeln!(out, "\tpreallocations_created: {}", s.prealloc_created)?;
    writeln!(out, "\tpreallocated_blocks_discarded: {}", s.prealloc_discarded_blocks)?;
    writeln!(out, "\tgroups_skipped_corrupt: {}", s.corrupt_groups)?;
    for c in Criterion::ALL {
        let i = c.index();
        writeln!(out, "\t{}:", c.name())?;
        writeln!(out, "\t\thits: {}", s.hits[i])?;
        if Criterion::SCANNING.contains(&c) {
            writeln!(out, "\t\tfailed: {}", s.failures[i])?;
            writeln!(out, "\t\tgroups_considered: {}", s.groups_scanned[i])?;
            writeln!(out, "\t\textents_scanned: {}", s.extents_scanned[i])?;
        }
    }
    Ok(())
}

/// Prints every group's buddy summary, then the counters.
pub fn run(fs: &Filesystem, out: &mut impl Write) -> CliResult {
    let groups = group_summaries(fs).map_err(|e| fs_err("block bitmaps", e))?;
    let max = groups.first().map_or(0, |g| g.counters.len());
    write!(out, "#group: free  frags [")?;
    for k in 0..max {
        write!(out, " 2^{k:<2}")?;
    }
    writeln!(out, " ]  lfo afo")?;
    for s in &groups {
        let g = s.group;
        write!(out, "#{g:<5}: {:<5} {:<5} [", s.free, s.fragments)?;
        for c in &s.counters {
            write!(out, " {c:<4}")?;
        }
        let o = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
        writeln!(
            out,
            " ]  {:>3} {:>3}{}",
            o(s.largest_free_order),
            o(s.avg_fragment_order),
            if s.corrupt { " CORRUPT" } else { "" }
        )?;
    }
    writeln!(out)?;
    print_stats(&fs.alloc_stats().map_err(|e| fs_err("allocator", e))?, out)
}

/// `mbstats --json`: every group's buddy summary and the counters.
#[derive(serde::Serialize)]
struct MbstatsJson {
    groups: Vec<GroupJson>,
    stats: StatsJson,
}

/// One group's line of the table.
#[derive(serde::Serialize)]
struct GroupJson {
    group: u32,
    free: u32,
    fragments: u32,
    /// Free buddy chunks of order 0, 1, 2, ... (2^k blocks each).
    counters: Vec<u32>,
    largest_free_order: Option<u32>,
    avg_fragment_order: Option<u32>,
    corrupt: bool,
}

/// The counters, under the names of the text output.
#[derive(serde::Serialize)]
struct StatsJson {
    reqs: u64,
    blocks_allocated: u64,
    blocks_freed: u64,
    goal_len_hits: u64,
    enospc: u64,
    buddies_generated: u64,
    uninit_groups_initialised: u64,
    prefetched_groups: u64,
    prefetch_bitmap_reads: u64,
    preallocations_created: u64,
    preallocated_blocks_discarded: u64,
    groups_skipped_corrupt: u64,
    /// Per allocation criterion, in the order the allocator tries them.
    criteria: Vec<CriterionJson>,
}

/// One criterion's counters; the scan counters only for scanning criteria.
#[derive(serde::Serialize)]
struct CriterionJson {
    name: &'static str,
    hits: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    failed: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    groups_considered: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    extents_scanned: Option<u64>,
}

fn stats_json(s: &AllocStats) -> StatsJson {
    let criteria = Criterion::ALL
        .iter()
        .map(|&c| {
            let i = c.index();
            let scan = |v: &[u64; 7]| Criterion::SCANNING.contains(&c).then_some(v[i]);
            CriterionJson {
                name: c.name(),
                hits: s.hits[i],
                failed: scan(&s.failures),
                groups_considered: scan(&s.groups_scanned),
                extents_scanned: scan(&s.extents_scanned),
            }
        })
        .collect();
    StatsJson {
        reqs: s.requests,
        blocks_allocated: s.blocks_allocated,
        blocks_freed: s.blocks_freed,
        goal_len_hits: s.goal_len_hits,
        enospc: s.enospc,
        buddies_generated: s.buddy_generations,
        uninit_groups_initialised: s.uninit_inits,
        prefetched_groups: s.prefetch_groups,
        prefetch_bitmap_reads: s.prefetch_ios,
        preallocations_created: s.prealloc_created,
        preallocated_blocks_discarded: s.prealloc_discarded_blocks,
        groups_skipped_corrupt: s.corrupt_groups,
        criteria,
    }
}

/// Prints every group's buddy summary and the counters as one JSON document.
pub fn run_json(fs: &Filesystem, out: &mut impl Write) -> CliResult {
    let groups = group_summaries(fs)
        .map_err(|e| fs_err("block bitmaps", e))?
        .into_iter()
        .map(|s| GroupJson {
            group: s.group,
            free: s.free,
            fragments: s.fragments,
            counters: s.counters,
            largest_free_order: s.largest_free_order,
            avg_fragment_order: s.avg_fragment_order,
            corrupt: s.corrupt,
        })
        .collect();
    let stats = fs.alloc_stats().map_err(|e| fs_err("allocator", e))?;
    print_json(&MbstatsJson { groups, stats: stats_json(&stats) }, out)
}
