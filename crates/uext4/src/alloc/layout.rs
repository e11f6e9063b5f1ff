//! Which blocks of a group hold filesystem metadata, for groups whose
//! block bitmap was never written (BLOCK_UNINIT): their bitmap is "all
//! metadata used, everything else free", computed here without I/O.

use crate::format::features::incompat;
use crate::volume::{group_has_super, Volume};

/// Blocks taken by the superblock backup and descriptor copies at the
/// start of group `g` (the kernel's ext4_num_base_meta_blocks).
pub fn base_meta_blocks(vol: &Volume, g: u64) -> u64 {
    let sb = &vol.sb;
    let has_super = group_has_super(sb, g);
    let per_block = vol.block_size as u64 / u64::from(sb.desc_size);
    let gdt_blocks = sb.group_count().div_ceil(per_block);
    let meta_bg = sb.features.has_incompat(incompat::META_BG);
    if !meta_bg || g < u64::from(sb.first_meta_bg) * per_block {
        if !has_super {
            return 0;
        }
        let gdt = if meta_bg { u64::from(sb.first_meta_bg) } else { gdt_blocks };
        1 + gdt + u64::from(sb.reserved_gdt_blocks)
    } else {
        // meta_bg: descriptor copies in the first, second and last group
        // of each meta group.
        let idx = g % per_block;
        let gdt = u64::from(idx == 0 || idx == 1 || idx == per_block - 1);
        u64::from(has_super) + gdt
    }
}

/// Block count of group `g` (the last group may be short).
pub fn group_blocks(vol: &Volume, g: u64) -> u32 {
    let start = vol.group_first_block(g);
    let end = (start + u64::from(vol.sb.blocks_per_group)).min(vol.sb.blocks_count);
    end.saturating_sub(start) as u32
}

/// log2 of the blocks per cluster (0 without bigalloc).
pub fn cluster_bits(vol: &Volume) -> u32 {
    vol.sb.log_cluster_size.saturating_sub(vol.sb.log_block_size)
}

/// Allocation units (clusters with bigalloc, else blocks) of group `g`:
/// the bits of its block bitmap.
pub fn group_units(vol: &Volume, g: u64) -> u32 {
    let bits = cluster_bits(vol);
    group_blocks(vol, g).div_ceil(1 << bits)
}

/// The in-use ranges (group-relative start, length, in units: clusters
/// with bigalloc) of an uninitialised group: base metadata plus every
/// group's bitmaps and inode table that happen to lie inside it (with
/// flex_bg they usually live elsewhere). `meta` holds those bitmaps and
/// tables as sorted, merged (start, length) ranges ([`group_metadata`]):
/// a binary search finds the group's, however many groups there are.
pub fn uninit_used_ranges(vol: &Volume, g: u64, meta: &[(u64, u64)]) -> Vec<(u32, u32)> {
    let start = vol.group_first_block(g);
    let nblocks = u64::from(group_blocks(vol, g));
    let bits = cluster_bits(vol);
    let mut out = Vec::new();
    let base = base_meta_blocks(vol, g).min(nblocks);
    if base > 0 {
        out.push((0, (base.div_ceil(1 << bits)) as u32));
    }
    let end = start + nblocks;
    let first = meta.partition_point(|&(s, l)| s + l <= start);
    for &(b, n) in &meta[first..] {
        if b >= end {
            break;
        }
        let (lo, hi) = (b.max(start), (b + n).min(end));
        if lo < hi {
            let (ulo, uhi) = ((lo - start) >> bits, (hi - start - 1) >> bits);
            out.push((ulo as u32, (uhi - ulo + 1) as u32));
        }
    }
    out
}

/// Every group's block bitmap, inode bitmap and inode table as sorted,
/// merged (start, length) ranges (built once, at open).
pub fn group_metadata(vol: &Volume) -> Vec<(u64, u64)> {
    let itable = vol.inode_table_blocks();
    let mut v = Vec::with_capacity(vol.groups.len() * 3);
    for gd in &vol.groups {
        v.push((gd.block_bitmap, 1));
        v.push((gd.inode_bitmap, 1));
        v.push((gd.inode_table, itable));
    }
    merge_ranges(v)
}

/// Sorts `v` and merges overlapping or touching ranges.
pub fn merge_ranges(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (s, l) in v {
        match merged.last_mut() {
            Some((ps, pl)) if *ps + *pl >= s => *pl = (*pl).max(s + l - *ps),
            _ => merged.push((s, l)),
        }
    }
    merged
}
