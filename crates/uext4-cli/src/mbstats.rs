//! `uext4 mbstats`: the allocator's view of an image: per-group buddy
//! summaries (like /proc/fs/ext4/DEV/mb_groups) and the mb_stats counters.

use crate::util::{fs_err, CliResult};
use std::io::Write;
use uext4::alloc::{AllocStats, Allocator, Criterion};
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
    let a: &Allocator = fs.allocator().map_err(|e| fs_err("allocator", e))?;
    a.load_all().map_err(|e| fs_err("block bitmaps", e))?;
    let max = a.group_summary(0).map_or(0, |g| g.counters.len());
    write!(out, "#group: free  frags [")?;
    for k in 0..max {
        write!(out, " 2^{k:<2}")?;
    }
    writeln!(out, " ]  lfo afo")?;
    for g in 0..a.group_count() {
        let Some(s) = a.group_summary(g) else { continue };
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
    print_stats(&a.stats(), out)
}
