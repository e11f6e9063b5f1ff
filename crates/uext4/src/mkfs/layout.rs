//! Where everything goes: geometry and block placement of a new
//! filesystem, computed without I/O.

use super::options::MkfsOptions;
use crate::error::{Error, Result};
use crate::format::quota::{self as fq, Dqblk, QuotaType};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most clusters (blocks) a group may have: the descriptors' 16-bit free
/// counts (e2fsprogs' EXT2_MAX_CLUSTERS_PER_GROUP).
const MAX_CLUSTERS_PER_GROUP: u32 = (1 << 16) - 8;
/// Groups per flex group (with flex_bg).
pub const FLEX_SIZE: u32 = 16;
/// Descriptor size with the 64bit feature.
pub const DESC_SIZE: u32 = 64;
/// The orphan file's inode (the first free one after lost+found, as
/// mke2fs allocates it).
pub const ORPHAN_INO: u32 = 12;
/// First non-reserved inode.
pub const FIRST_INO: u32 = 11;
/// lost+found's inode.
pub const LPF_INO: u32 = 11;

/// Metadata locations of one group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupMeta {
    /// Block bitmap.
    pub block_bitmap: u64,
    /// Inode bitmap.
    pub inode_bitmap: u64,
    /// First inode table block.
    pub inode_table: u64,
}

/// The computed layout of a new filesystem (where each group's metadata,
/// the journal and the inode tables go), returned by
/// [`mkfs_file`](crate::mkfs::mkfs_file) and [`Layout::compute`]: inspect
/// it to know what `mkfs` made without reading the image back.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Block size.
    pub block_size: u32,
    /// Blocks in the filesystem.
    pub blocks_count: u64,
    /// First data block (1 for 1 KiB blocks).
    pub first_data_block: u32,
    /// Blocks per group.
    pub blocks_per_group: u32,
    /// Blocks per cluster (1 without bigalloc): bitmaps, group free
    /// counts and file allocations are in clusters.
    pub cluster_ratio: u32,
    /// With bigalloc: the clusters mkfs's metadata and journal take
    /// (`s_overhead_clusters`, as mke2fs records it); else 0.
    pub overhead_clusters: u64,
    /// When files are block-mapped: the runs holding the journal's data
    /// and indirect blocks together, in mke2fs's order ([`Self::journal`]
    /// lists the data blocks alone); empty otherwise.
    pub journal_region: Vec<(u64, u32)>,
    /// Groups.
    pub groups: u32,
    /// Inodes per group.
    pub inodes_per_group: u32,
    /// Inode record size.
    pub inode_size: u16,
    /// Inode table blocks per group.
    pub itable_blocks: u32,
    /// Descriptor blocks.
    pub gdt_blocks: u32,
    /// Descriptor blocks reserved after them for online growth
    /// (`s_reserved_gdt_blocks`; 0 without resize_inode).
    pub reserved_gdt: u32,
    /// The resize inode's double indirect block (0 without resize_inode).
    pub resize_dind: u64,
    /// Descriptor size (64 with 64bit, else 32).
    pub desc_size: u32,
    /// Groups per flex group (1 without flex_bg).
    pub flex_size: u32,
    /// Per-group metadata.
    pub(crate) meta: Vec<GroupMeta>,
    /// Journal runs (start, len) in logical order; empty without a journal.
    /// With fast_commit they include the fast-commit area (its last
    /// [`Self::fc_blocks`] blocks).
    pub journal: Vec<(u64, u32)>,
    /// Blocks of the journal's fast-commit area (0 without fast_commit).
    pub fc_blocks: u32,
    /// Extent leaf block for a journal with more than 4 runs.
    pub journal_leaf: Option<u64>,
    /// Root directory's block.
    pub root_block: u64,
    /// lost+found's blocks (contiguous).
    pub lpf: (u64, u32),
    /// The orphan file's blocks (contiguous; length 0 without orphan_file;
    /// block-mapped, its indirect blocks follow in the same region, see
    /// [`Self::region_len`]).
    pub orphan: (u64, u32),
    /// The orphan file's inode: 12, or the next one when a
    /// project quota file takes 12 (mke2fs makes that first).
    pub orphan_ino: u32,
    /// The quota files by [`QuotaType::index`]: inode, first block and
    /// length in blocks (contiguous).
    pub quota: [Option<(u32, u64, u32)>; 3],
    /// The quota files' contents.
    quota_data: [Vec<u8>; 3],
    /// The MMP block (0 without mmp).
    pub mmp_block: u64,
    /// Inodes in use: 1 up to this one (all in group 0).
    pub used_inodes: u32,
    /// Files are block-mapped (no extent feature).
    pub block_mapped: bool,
    /// Used blocks as disjoint, non-adjacent runs: start -> end
    /// (exclusive). Metadata is a few runs per flex group, so everything
    /// computed from it costs per group, not per block of the device.
    used: BTreeMap<u64, u64>,
    probes: Probes,
}

/// Lookups into [`Layout`]'s map of used runs, and runs visited: the
/// layout's work, which tests check grows with the groups, not with the
/// blocks of the device.
#[derive(Debug, Default)]
struct Probes(AtomicU64);

impl Probes {
    fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
}

impl Clone for Probes {
    fn clone(&self) -> Self {
        Probes(AtomicU64::new(self.0.load(Ordering::Relaxed)))
    }
}

fn has_super(g: u32) -> bool {
    crate::format::superblock::sparse_super_group(u64::from(g))
}

/// mke2fs's reserved descriptor blocks (e2fsprogs' calc_reserved_gdt_blocks):
/// enough for the filesystem to grow 1024 times (up to 2^32 blocks), at
/// most one indirect block's worth.
fn reserved_gdt_blocks(blocks: u64, first: u32, bpg: u32, bs: u32, desc_size: u32, gdt_blocks: u32) -> u32 {
    let max_blocks: u64 = if blocks < 0xFFFF_FFFF / 1024 { blocks * 1024 } else { 0xFFFF_FFFF };
    let groups = (max_blocks - u64::from(first)).div_ceil(u64::from(bpg));
    let need = groups.div_ceil(u64::from(bs / desc_size)).saturating_sub(u64::from(gdt_blocks));
    need.min(u64::from(bs / 4)) as u32
}

/// mke2fs's default orphan file size for a filesystem of `blocks`
/// blocks (e2fsprogs' ext2fs_default_orphan_file_blocks): 32 blocks
/// below 128Ki blocks, 1/4096 of the blocks below 2Mi, else 512.
pub fn default_orphan_blocks(blocks: u64) -> u32 {
    match blocks {
        0..131072 => 32,
        131072..2097152 => (blocks / 4096) as u32,
        _ => 512,
    }
}

/// mke2fs's default journal size for a filesystem of `blocks` blocks.
pub fn default_journal_blocks(blocks: u64) -> u32 {
    match blocks {
        0..2048 => 0,
        2048..32768 => 1024,
        32768..262144 => 4096,
        262144..524288 => 8192,
        524288..4194304 => 16384,
        4194304..8388608 => 32768,
        8388608..16777216 => 65536,
        16777216..33554432 => 131072,
        _ => 262144,
    }
}

impl Layout {
    /// The contents of the quota file of type `ty` (empty if none).
    pub fn quota_file(&self, ty: QuotaType) -> &[u8] {
        &self.quota_data[ty.index()]
    }

    /// True if group `g` carries a superblock backup.
    pub fn has_super(&self, g: u32) -> bool {
        has_super(g)
    }

    /// First block of group `g`.
    pub fn group_start(&self, g: u32) -> u64 {
        u64::from(self.first_data_block) + u64::from(g) * u64::from(self.blocks_per_group)
    }

    /// Blocks in group `g`.
    pub fn group_len(&self, g: u32) -> u32 {
        let s = self.group_start(g);
        (self.blocks_count.min(s + u64::from(self.blocks_per_group)) - s) as u32
    }

    /// Blocks a file of `n` data blocks takes: with indirect blocks when
    /// files are block-mapped, whole clusters with bigalloc.
    pub fn region_len(&self, n: u64) -> u64 {
        let n = if self.block_mapped { n + super::blockmap::meta_blocks(n, self.block_size) } else { n };
        n.next_multiple_of(u64::from(self.cluster_ratio))
    }

    /// The 512-byte sectors (`i_blocks`) of a file of `n` data blocks laid
    /// out by [`Self::region_len`].
    pub fn sectors(&self, n: u64) -> u64 {
        self.region_len(n) * u64::from(self.block_size) / 512
    }

    /// Blocks at the start of group `g` taken by superblock + descriptors.
    pub fn super_blocks(&self, g: u32) -> u32 {
        if has_super(g) {
            1 + self.gdt_blocks + self.reserved_gdt
        } else {
            0
        }
    }

    /// Lookups into the map of used blocks and runs visited so far
    /// (computing the layout included): a measure of the layout's work,
    /// proportional to the groups and the runs of metadata, never to the
    /// blocks of the device.
    pub fn probes(&self) -> u64 {
        self.probes.0.load(Ordering::Relaxed)
    }

    /// Runs of used blocks (metadata, special files, journal), kept
    /// merged: about one per flex group plus the superblock backups.
    pub fn used_runs(&self) -> usize {
        self.used.len()
    }

    /// True if `b` is in use.
    pub fn is_used(&self, b: u64) -> bool {
        self.probes.add(1);
        self.used.range(..=b).next_back().is_some_and(|(_, &end)| end > b)
    }

    /// Marks `start..start + len` used, merging it with the runs it
    /// overlaps or touches so that the map stays a set of disjoint,
    /// non-adjacent runs (one per metadata cluster of a flex group,
    /// whatever the device size).
    fn mark(&mut self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        let (mut s, mut e) = (start, start + len);
        self.probes.add(1);
        if let Some((&ps, &pe)) = self.used.range(..=s).next_back() {
            if pe >= s {
                s = ps;
                e = e.max(pe);
            }
        }
        while let Some((&ns, &ne)) = self.used.range(s..).next() {
            if ns > e {
                break;
            }
            e = e.max(ne);
            self.used.remove(&ns);
            self.probes.add(1);
        }
        self.used.insert(s, e);
    }

    /// First used block at or after `b` (`blocks_count` if none): the end
    /// of the free run starting at a free `b`.
    fn next_used(&self, b: u64) -> u64 {
        if self.is_used(b) {
            return b;
        }
        self.probes.add(1);
        self.used.range(b..).next().map_or(self.blocks_count, |(&s, _)| s.min(self.blocks_count))
    }

    /// True if any block of `start..end` is in use.
    fn any_used(&self, start: u64, end: u64) -> bool {
        start < end && self.next_used(start) < end
    }

    /// First run of `len` free blocks at or after `from`: jumps from run
    /// to run of used blocks, never block by block.
    fn find_free(&self, from: u64, len: u64) -> Option<u64> {
        let mut b = from.max(u64::from(self.first_data_block));
        while b < self.blocks_count {
            self.probes.add(1);
            if let Some((_, &end)) = self.used.range(..=b).next_back().filter(|(_, &end)| end > b) {
                b = end;
                continue;
            }
            let gap_end = self.next_used(b);
            if gap_end - b >= len {
                return Some(b);
            }
            b = gap_end;
        }
        None
    }

    fn take(&mut self, from: u64, len: u64, what: &str) -> Result<u64> {
        let s = self.find_free(from, len).ok_or_else(|| Error::NoSpace(format!("no room for {what}")))?;
        self.mark(s, len);
        Ok(s)
    }

    /// Takes the region of a file of `n` data blocks ([`Self::region_len`]):
    /// with bigalloc in clusters no other block uses, as a cluster
    /// belongs to one file only.
    fn take_file(&mut self, from: u64, n: u64, what: &str) -> Result<u64> {
        let len = self.region_len(n);
        let r = u64::from(self.cluster_ratio);
        let mut at = from.next_multiple_of(r);
        loop {
            let s = self.find_free(at, len).ok_or_else(|| Error::NoSpace(format!("no room for {what}")))?;
            let s = s.next_multiple_of(r);
            if s + len <= self.blocks_count && !self.any_used(s, s + len) {
                self.mark(s, len);
                return Ok(s);
            }
            at = s + r;
        }
    }

    /// True if cluster `c` holds a used block.
    pub fn cluster_used(&self, c: u64) -> bool {
        let r = u64::from(self.cluster_ratio);
        self.any_used(c * r, (c * r + r).min(self.blocks_count))
    }

    /// Clusters in group `g`.
    pub fn group_clusters(&self, g: u32) -> u32 {
        self.group_len(g).div_ceil(self.cluster_ratio)
    }

    /// The used clusters of blocks `start..end`, as disjoint runs of
    /// cluster numbers (first, count) in order: computed from the runs of
    /// used blocks, so the cost is the number of runs, not of clusters.
    fn used_cluster_runs(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let r = u64::from(self.cluster_ratio);
        let mut runs: Vec<(u64, u64)> = Vec::new();
        if start >= end {
            return runs;
        }
        // The run holding `start`, if any, then those starting inside.
        let first = self.used.range(..=start).next_back().filter(|(_, &e)| e > start).map(|(&s, &e)| (s, e));
        let rest = self.used.range(start + 1..end).map(|(&s, &e)| (s, e));
        self.probes.add(1);
        for (s, e) in first.into_iter().chain(rest) {
            self.probes.add(1);
            let (s, e) = (s.max(start), e.min(end));
            if s >= e {
                continue;
            }
            let (c0, c1) = (s / r, (e - 1) / r + 1);
            match runs.last_mut() {
                // Two block runs may share a cluster (bigalloc).
                Some((rs, rn)) if *rs + *rn >= c0 => *rn = (*rn).max(c1 - *rs),
                _ => runs.push((c0, c1 - c0)),
            }
        }
        runs
    }

    fn used_clusters(&self) -> u64 {
        self.used_cluster_runs(0, self.blocks_count).iter().map(|r| r.1).sum()
    }

    /// The used clusters (blocks without bigalloc) of group `g`, as runs
    /// (first, count) of cluster indexes within the group: its bitmap's
    /// set bits.
    pub fn used_runs_in_group(&self, g: u32) -> Vec<(u32, u32)> {
        let start = self.group_start(g);
        let first_cluster = start / u64::from(self.cluster_ratio);
        self.used_cluster_runs(start, start + u64::from(self.group_len(g)))
            .into_iter()
            .map(|(c, n)| ((c - first_cluster) as u32, n as u32))
            .collect()
    }

    /// Used clusters (blocks without bigalloc) of group `g` (for its
    /// bitmap and free count).
    pub fn used_in_group(&self, g: u32) -> u32 {
        self.used_runs_in_group(g).iter().map(|r| r.1).sum()
    }

    /// Computes the layout for `opts` without writing anything: to learn
    /// what [`mkfs_file`](crate::mkfs::mkfs_file) would make (group count,
    /// journal size), or that `opts` is refused, before creating a file.
    pub fn compute(opts: &MkfsOptions) -> Result<Layout> {
        let defaults = opts.size_defaults();
        let bs = opts.effective_block_size();
        if opts.reserved_percent > 50 {
            return Err(Error::Invalid(format!("reserved blocks percentage {} (at most 50)", opts.reserved_percent)));
        }
        if !(1024..=65536).contains(&bs) || !bs.is_power_of_two() {
            return Err(Error::Invalid(format!("block size {bs}")));
        }
        let isz = opts.inode_size.unwrap_or(defaults.inode_size);
        if isz < 128 || !isz.is_power_of_two() || u32::from(isz) > bs {
            return Err(Error::Invalid(format!("inode size {isz}")));
        }
        let feat = opts.features;
        feat.check()?;
        let cluster = match (feat.bigalloc, opts.cluster_size) {
            (false, None) => bs,
            (false, Some(_)) => {
                return Err(Error::Invalid("a cluster size (-C) needs the bigalloc feature (-O bigalloc)".into()))
            }
            // mke2fs's default: 16 blocks.
            (true, c) => c.unwrap_or(16 * bs),
        };
        if feat.bigalloc && (!cluster.is_power_of_two() || cluster < 2 * bs || cluster / bs > 1 << 15) {
            return Err(Error::Invalid(format!(
                "cluster size {cluster}: a power of two from twice the block size ({bs}) to 32768 blocks"
            )));
        }
        let cratio = cluster / bs;
        let mut ratio = opts.inode_ratio.unwrap_or(defaults.inode_ratio);
        if ratio < u64::from(bs).min(1024) {
            return Err(Error::Invalid(format!("inode ratio {ratio}")));
        }
        if opts.inode_ratio.is_none() {
            // As mke2fs: no more inodes than clusters (blocks) by default.
            ratio = ratio.max(u64::from(cluster)).max(u64::from(bs));
        }
        // With bigalloc group 0 starts at block 0 whatever the block size
        // (clusters are aligned to it), as mke2fs and the kernel expect.
        let first = u32::from(bs == 1024 && !feat.bigalloc);
        // A bitmap block's bits, but at most 65528 per group (the 16-bit
        // descriptor counts), as mke2fs: 64 KiB blocks need the cap.
        let bpg = (8 * bs).min(MAX_CLUSTERS_PER_GROUP) * cratio;
        if feat.inline_data && isz < 256 {
            return Err(Error::Invalid(format!("{isz}-byte inodes are too small for inline_data (at least 256)")));
        }
        if feat.project && isz < 256 {
            return Err(Error::Invalid(format!("{isz}-byte inodes are too small for project quota (at least 256)")));
        }
        if opts.encoding_flags != 0 && !feat.casefold {
            return Err(Error::Invalid("encoding_flags needs casefold (-O casefold or -E encoding=utf8)".into()));
        }
        // Whole clusters only.
        let mut blocks = opts.size / u64::from(cluster) * u64::from(cratio);
        if blocks >= 1 << 48 {
            return Err(Error::Invalid("filesystem too large".into()));
        }
        if !feat.bit64 && blocks >= 1 << 32 {
            return Err(Error::Invalid(format!("{blocks} blocks need the 64bit feature")));
        }
        let desc_size = if feat.bit64 { DESC_SIZE } else { 32 };
        let flex_size = if feat.flex_bg { FLEX_SIZE } else { 1 };
        let inodes_per_block = bs / u32::from(isz);
        // e2fsprogs' EXT2_MAX_INODES_PER_GROUP bounds the bitmap's bits.
        let max_ipg = (8 * bs).min((1 << 16) - inodes_per_block);
        let (groups, ipg, gdt_blocks, reserved_gdt) = loop {
            if blocks < u64::from(first) + 64 {
                return Err(Error::Invalid(format!("{} bytes is too small for a filesystem", opts.size)));
            }
            let groups = (blocks - u64::from(first)).div_ceil(u64::from(bpg));
            if groups > u64::from(u32::MAX) {
                return Err(Error::Invalid("too many groups".into()));
            }
            let groups = groups as u32;
            let target = opts.inodes.unwrap_or(blocks * u64::from(bs) / ratio).max(u64::from(FIRST_INO) + 5);
            let per_group = target.div_ceil(u64::from(groups));
            if opts.inodes.is_some() && per_group > u64::from(max_ipg) {
                return Err(Error::Invalid(format!(
                    "{target} inodes: at most {} fit in {groups} groups of {bs}-byte blocks",
                    u64::from(max_ipg) * u64::from(groups)
                )));
            }
            let mut ipg = per_group.min(u64::from(max_ipg)) as u32;
            ipg = ipg.div_ceil(inodes_per_block) * inodes_per_block;
            // Then a multiple of 8, rounding down as e2fsprogs'
            // ext2fs_initialize does (the last table block may then be
            // partly unused).
            ipg = ipg / 8 * 8;
            ipg = ipg.min(max_ipg).max(16);
            let gdt_blocks = (u64::from(groups) * u64::from(desc_size)).div_ceil(u64::from(bs)) as u32;
            let reserved =
                if feat.resize_inode { reserved_gdt_blocks(blocks, first, bpg, bs, desc_size, gdt_blocks) } else { 0 };
            let last = blocks - u64::from(first) - u64::from(groups - 1) * u64::from(bpg);
            let itable = u64::from(ipg) * u64::from(isz) / u64::from(bs);
            let overhead = if has_super(groups - 1) { 1 + u64::from(gdt_blocks + reserved) } else { 0 } + 2 + itable;
            // Like mke2fs: drop a last group too small to be useful.
            if groups > 1 && last < overhead + 50 {
                blocks -= last;
                continue;
            }
            break (groups, ipg, gdt_blocks, reserved);
        };
        if reserved_gdt > 0 && blocks >= 1 << 32 {
            return Err(Error::Invalid(format!(
                "resize_inode maps 32-bit block numbers: {blocks} blocks are too many (add -O ^resize_inode)"
            )));
        }
        let itable_blocks = ipg * u32::from(isz) / bs;
        let mut l = Layout {
            block_size: bs,
            blocks_count: blocks,
            first_data_block: first,
            blocks_per_group: bpg,
            cluster_ratio: cratio,
            overhead_clusters: 0,
            journal_region: Vec::new(),
            block_mapped: !feat.extent,
            groups,
            inodes_per_group: ipg,
            inode_size: isz,
            itable_blocks,
            gdt_blocks,
            reserved_gdt,
            resize_dind: 0,
            desc_size,
            flex_size,
            meta: Vec::with_capacity(groups as usize),
            journal: Vec::new(),
            journal_leaf: None,
            fc_blocks: 0,
            root_block: 0,
            lpf: (0, 0),
            orphan: (0, 0),
            orphan_ino: 0,
            quota: [None; 3],
            quota_data: Default::default(),
            used_inodes: FIRST_INO,
            mmp_block: 0,
            used: BTreeMap::new(),
            probes: Probes::default(),
        };
        // Block 0 holds the boot sector (and, with 4 KiB blocks, the
        // superblock): never free.
        l.mark(0, 1);
        for g in 0..groups {
            let s = l.super_start(g);
            let n = u64::from(l.super_blocks(g));
            l.mark(s, n);
        }
        // Flex groups: all block bitmaps, then inode bitmaps, then inode
        // tables, packed at the start of the flex group's first group.
        let mut meta = vec![GroupMeta { block_bitmap: 0, inode_bitmap: 0, inode_table: 0 }; groups as usize];
        // Without flex_bg each group is its own "flex group": its metadata
        // sits at its own start, as the format requires then.
        for leader in (0..groups).step_by(flex_size as usize) {
            let members = leader..(leader + flex_size).min(groups);
            let from = l.group_start(leader);
            for g in members.clone() {
                meta[g as usize].block_bitmap = l.take(from, 1, "block bitmaps")?;
            }
            for g in members.clone() {
                meta[g as usize].inode_bitmap = l.take(from, 1, "inode bitmaps")?;
            }
            for g in members {
                meta[g as usize].inode_table = l.take(from, u64::from(itable_blocks), "inode tables")?;
            }
        }
        l.meta = meta;
        let meta_clusters = l.used_clusters();
        l.root_block = l.take_file(l.group_start(0), 1, "the root directory")?;
        let mut lpf_len = (16384 / bs).max(2);
        if l.block_mapped || feat.bigalloc {
            // mke2fs's: at most the 12 direct blocks (the ext4 layout
            // uext4 made before keeps its 16 KiB).
            lpf_len = lpf_len.min(12);
        }
        l.lpf = (l.take_file(l.group_start(0), u64::from(lpf_len), "lost+found")?, lpf_len);
        if reserved_gdt > 0 {
            // mke2fs's goal for it: past the first group's tables.
            let goal = u64::from(3 + reserved_gdt + gdt_blocks + itable_blocks);
            l.resize_dind = l.take_file(goal, 1, "the resize inode")?;
        }
        let jblocks =
            if feat.has_journal { opts.journal_blocks.unwrap_or_else(|| default_journal_blocks(blocks)) } else { 0 };
        // Quota files, with the usage of the root and lost+found (all the
        // inodes a quota file counts): inodes 3 and 4, the project one the
        // first free inode, as mke2fs allocates them.
        let files = opts.quota_files();
        let mut next_ino = ORPHAN_INO;
        let (uid, gid) = opts.root_ids();
        let root_space = l.sectors(1) * 512;
        let lpf_space = l.sectors(u64::from(lpf_len)) * 512;
        for ty in QuotaType::ALL {
            if !files[ty.index()] {
                continue;
            }
            let ids = match ty {
                QuotaType::User => [uid, 0],
                QuotaType::Group => [gid, 0],
                QuotaType::Project => [0, 0],
            };
            let mut usage: Vec<Dqblk> = Vec::new();
            for (id, space) in [(ids[0], root_space), (ids[1], lpf_space)] {
                match usage.iter_mut().find(|d| d.id == id) {
                    Some(d) => {
                        d.curinodes += 1;
                        d.curspace += space;
                    }
                    None => usage.push(Dqblk { id, curinodes: 1, curspace: space, ..Default::default() }),
                }
            }
            usage.sort_by_key(|d| d.id);
            let data = fq::build_file(ty, &usage);
            let n = data.len().div_ceil(bs as usize) as u32;
            let ino = match ty {
                QuotaType::User => 3,
                QuotaType::Group => 4,
                QuotaType::Project => {
                    next_ino += 1;
                    next_ino - 1
                }
            };
            let what = format!("the {} quota file", ty.name());
            l.quota[ty.index()] = Some((ino, l.take_file(l.group_start(0), u64::from(n), &what)?, n));
            l.quota_data[ty.index()] = data;
        }
        if feat.mmp {
            l.mmp_block = l.take_file(l.group_start(0), 1, "the MMP block")?;
        }
        // A journal of 0 blocks (asked, or the default of a tiny
        // filesystem) means no journal, hence no orphan file.
        if feat.orphan_file && jblocks > 0 {
            let n = default_orphan_blocks(blocks);
            l.orphan = (l.take_file(l.group_start(0), u64::from(n), "the orphan file")?, n);
            l.orphan_ino = next_ino;
            next_ino += 1;
        }
        if u64::from(next_ino - 1) > u64::from(ipg) {
            return Err(Error::Invalid(format!("{ipg} inodes per group leave no room for the special files")));
        }
        l.used_inodes = next_ino - 1;
        if jblocks > 0 {
            if jblocks < 1024 {
                return Err(Error::Invalid(format!("journal of {jblocks} blocks is too small (minimum 1024)")));
            }
            if feat.fast_commit {
                // mke2fs: a 64th of the default journal, whatever -J size= says.
                l.fc_blocks = default_journal_blocks(blocks) / 64;
            }
            let before = l.used_clusters();
            l.place_journal(jblocks + l.fc_blocks)?;
            if feat.bigalloc {
                l.overhead_clusters = l.used_clusters() - before;
            }
        }
        if feat.bigalloc {
            l.overhead_clusters += meta_clusters;
        }
        Ok(l)
    }

    /// First block of group `g`'s superblock (copy) and descriptors: the
    /// primary superblock sits at byte 1024 whatever the block size.
    pub fn super_start(&self, g: u32) -> u64 {
        if g == 0 {
            crate::format::superblock::SUPERBLOCK_OFFSET / u64::from(self.block_size)
        } else {
            self.group_start(g)
        }
    }

    /// Places the journal near the middle of the disk (block-mapped: from
    /// the start), as mke2fs does, in as few runs as free space allows
    /// (each at most 32768 blocks, the longest extent).
    fn place_journal(&mut self, jblocks: u32) -> Result<()> {
        let r = u64::from(self.cluster_ratio);
        // mke2fs puts a block-mapped journal in the first free blocks (after
        // lost+found), an extent-mapped one near the middle of the disk.
        let goal_group = if self.block_mapped { 0 } else { self.groups / 2 };
        let goal = self.group_start(goal_group).next_multiple_of(r);
        // Block-mapped: the indirect blocks go in the same runs; bigalloc:
        // whole clusters of their own.
        let mut left = self.region_len(u64::from(jblocks));
        let mut runs = Vec::new();
        let mut from = goal;
        let mut wrapped = false;
        while left > 0 {
            // Longest free run from `from` (up to the extent limit).
            let Some(s) = self.find_free(from, 1) else {
                if wrapped {
                    return Err(Error::NoSpace("no room for the journal".into()));
                }
                wrapped = true;
                from = 0;
                continue;
            };
            let s = s.next_multiple_of(r);
            let e = if s < self.blocks_count { self.next_used(s).min(s + left.min(32768)) } else { s };
            // Whole clusters only (left is a multiple of the ratio).
            let e = s + (e - s) / r * r;
            if e == s {
                from = s + r;
                continue;
            }
            self.mark(s, e - s);
            runs.push((s, (e - s) as u32));
            left -= e - s;
            from = e;
        }
        if self.block_mapped {
            let map = super::blockmap::build(&runs, u64::from(jblocks), self.block_size)?;
            self.journal = map.data;
            self.journal_region = runs;
            return Ok(());
        }
        if runs.len() > 4 {
            let cap = (self.block_size as usize - 12 - 4) / 12;
            if runs.len() > cap {
                return Err(Error::NoSpace("journal too fragmented".into()));
            }
            self.journal_leaf = Some(self.take_file(goal.saturating_sub(r), 1, "the journal's extent block")?);
        }
        // With bigalloc the last cluster's tail is allocated, not mapped.
        let mut excess = self.region_len(u64::from(jblocks)) - u64::from(jblocks);
        while excess > 0 {
            let Some(last) = runs.last_mut() else { break };
            let cut = excess.min(u64::from(last.1));
            last.1 -= cut as u32;
            excess -= cut;
            if last.1 == 0 {
                runs.pop();
            }
        }
        self.journal = runs;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_layouts() {
        let l = Layout::compute(&MkfsOptions { size: 64 << 20, ..Default::default() }).unwrap();
        assert_eq!((l.block_size, l.groups, l.first_data_block), (1024, 8, 1));
        assert_eq!(l.journal.iter().map(|r| r.1).sum::<u32>(), 4096);
        for m in &l.meta {
            assert!(l.is_used(m.block_bitmap) && l.is_used(m.inode_table));
        }
        let l = Layout::compute(&MkfsOptions { size: 8 << 30, ..Default::default() }).unwrap();
        assert_eq!((l.block_size, l.groups), (4096, 64));
        assert_eq!(l.journal.iter().map(|r| r.1).sum::<u32>(), 16384);
        assert!(Layout::compute(&MkfsOptions { size: 10_000, ..Default::default() }).is_err());
    }
}
