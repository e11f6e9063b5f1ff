//! Fast-commit replay: applying the tags of the journal's fast-commit
//! area to the filesystem, as the kernel's `ext4_fc_replay` does.
//!
//! Journal recovery (`journal/recovery.rs`) writes the full commits home,
//! scans the fast-commit area and calls [`replay`] before it empties the
//! journal. The replay runs the engine on the device without a journal
//! (handles write through, as the kernel's replay writes in place), so a
//! crash part-way leaves the journal whole and the next open replays
//! everything again: every handler looks at what is already there first
//! (an entry that exists is not added twice, a range mapped as the tag
//! says is left alone), so replaying twice gives the same result.
//!
//! The tags, in log order:
//! - INODE: the logged inode is copied over the on-disk one except its
//!   `i_block` (the extent tree is what ADD_RANGE/DEL_RANGE built; an
//!   inode without an extent tree there gets an empty one), as the kernel
//!   keeps it; inline-data and block-mapped inodes take the logged
//!   `i_block`. The inode is marked in use.
//! - ADD_RANGE: the logical range is mapped to the logged blocks; a part
//!   mapped elsewhere is unmapped first (its blocks freed), an unwritten
//!   part the tag calls written is converted.
//! - DEL_RANGE: the range is unmapped and its blocks freed.
//! - CREAT / LINK: the entry is added unless it is there; a new
//!   directory gets its "." and ".." block (directory blocks are not in
//!   fast commits), a new link counts. UNLINK: the entry is removed if it
//!   names the tag's inode; the inode loses a link and is deleted with
//!   its last one.
//!
//! Blocks: before the first tag, the blocks the touched inodes' trees map
//! now (a replay that crashed part-way may have mapped blocks the full
//! commits' bitmaps call free) and every ADD_RANGE's blocks (the kernel's
//! excluded regions: an extent-tree split or a new directory block must
//! not take a block a later tag maps) are marked in use, the latter again
//! after a tag frees some of them. At the end (the kernel's
//! `ext4_fc_set_bitmaps_and_counters`) every block of the trees of the
//! inodes the tags touched is marked in use, the region blocks nothing
//! maps are freed again, `i_blocks` (and a directory's size) is
//! recomputed, and the link counts of the directories that gained or
//! lost entries are recounted (the
//! kernel's replay leaves a parent's count wrong when a subdirectory is
//! created; e2fsck counts them). The descriptors are kept by the
//! allocators on the way, the superblock's free counts at the end.

use super::{FsCore, MountOptions};
use crate::alloc::{AllocConfig, Allocator};
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::block_number::{FileBlock, PhysicalBlock};
use crate::format::bytes::{le16, le32, put_le16};
use crate::format::dirent::file_type_of;
use crate::format::extent::{parse_node, ExtentNode, EXTENT_MAGIC, MAX_DEPTH};
use crate::format::features::ro_compat;
use crate::format::inode::{
    inode_checksum, FileType, Inode, FL_EXTENTS, FL_INLINE_DATA, I_BLOCK_SIZE, S_IFDIR, S_IFMT,
};
use crate::format::journal::{fc_tag, FcExtent, FcTag};
use crate::inode::extent_write as ew;
use crate::inode::{self, MapKind, MAX_LBLK};
use crate::journal::fast_commit::FcScan;
use crate::txn::{FreeKind, Tx};
use crate::volume::Volume;
use crate::{alloc::flags as aflags, dir};
use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

/// Physical runs: (first block, length).
type Runs = Vec<(u64, u64)>;

/// The blocks of an extent tree.
#[derive(Default)]
struct TreeBlocks {
    /// Index and leaf blocks (not the root in the inode).
    nodes: Vec<u64>,
    /// Data runs.
    data: Runs,
    /// One past the last logical block mapped.
    end: u64,
}

/// Most tags a replay reports one by one when it skips them.
const MAX_NOTES: usize = 8;
/// Offset of `i_block` in an inode record.
const I_BLOCK: usize = 0x28;
/// Offset of `i_flags`.
const I_FLAGS: usize = 0x20;
/// Most links a directory counts before dir_nlink's "1" (EXT4_LINK_MAX).
const DIR_LINK_MAX: u32 = 65000;

/// Replays the fast commits of `scan` onto the filesystem on `dev` (the
/// full commits are already home). Returns notices for the user.
pub(crate) fn replay(dev: Arc<dyn BlockDevice>, scan: &FcScan) -> Result<Vec<String>> {
    let opts = MountOptions::default();
    let vol = Arc::new(Volume::open(dev, opts.cache_blocks)?);
    // A read-only open of an image uext4 cannot write gets the full
    // commits only (a read-write open was refused before recovery).
    if let Err(e) = super::mount::check_writable(&vol.sb) {
        return Ok(vec![format!(
            "the journal holds {} fast commit(s) after the last full commit; they were not replayed ({e}), \
             so the most recent fsync'ed changes are not shown",
            scan.commits
        )]);
    }
    let alloc = Arc::new(Allocator::new(vol.clone(), AllocConfig::default())?);
    let rw = super::mount::Subsystems::start_for_replay(&vol)?;
    let cell = OnceLock::new();
    let _ = cell.set(alloc);
    let core = FsCore { vol, notices: Vec::new(), alloc: cell, subsystems: Some(rw), durability: Default::default() };
    let mut r = Replay {
        core: &core,
        regions: Vec::new(),
        claimed: Vec::new(),
        modified: BTreeSet::new(),
        dirs: BTreeSet::new(),
        skipped: Vec::new(),
    };
    r.claim_trees(scan)?;
    r.claim_regions(scan)?;
    let mut applied = 0usize;
    for tag in &scan.tags {
        match r.apply(tag) {
            Ok(true) => applied += 1,
            Ok(false) => r.skipped.push(format!("{}: nothing to apply it to", tag_name(tag))),
            // The device failing is not the tag's fault: stop, the journal
            // stays for the next try.
            Err(e @ Error::Io(_)) => return Err(e),
            // As the kernel: a tag that cannot be applied is passed over.
            Err(e) => r.skipped.push(format!("{}: {e}", tag_name(tag))),
        }
    }
    r.finish()?;
    let skipped = std::mem::take(&mut r.skipped);
    core.shutdown()?;
    let mut notes = vec![format!("{} fast commit(s) replayed ({applied} tag(s) applied)", scan.commits)];
    if !skipped.is_empty() {
        notes.push(format!("{} fast-commit tag(s) were passed over (as the kernel would):", skipped.len()));
        notes.extend(skipped.iter().take(MAX_NOTES).map(|s| format!("  {s}")));
    }
    Ok(notes)
}

fn tag_name(tag: &FcTag) -> String {
    match tag {
        FcTag::AddRange { ino, extent } => format!("ADD_RANGE inode {ino} block {}+{}", extent.lblk, extent.len),
        FcTag::DelRange { ino, lblk, len } => format!("DEL_RANGE inode {ino} block {lblk}+{len}"),
        FcTag::Dentry { kind, parent, ino, .. } => {
            let k = match *kind {
                fc_tag::CREAT => "CREAT",
                fc_tag::LINK => "LINK",
                _ => "UNLINK",
            };
            format!("{k} inode {ino} in directory {parent}")
        }
        FcTag::Inode { ino, .. } => format!("INODE {ino}"),
        other => format!("{other:?}"),
    }
}

struct Replay<'a> {
    core: &'a FsCore,
    /// The blocks ADD_RANGE tags map (merged, sorted): kept in use.
    regions: Vec<(u64, u64)>,
    /// Region blocks this replay marked in use (freed at the end unless
    /// a tree maps them).
    claimed: Vec<(u64, u64)>,
    /// Inodes the tags changed.
    modified: BTreeSet<u32>,
    /// Directories whose entries changed (link counts recounted).
    dirs: BTreeSet<u32>,
    skipped: Vec<String>,
}

impl<'a> Replay<'a> {
    fn vol(&self) -> &'a Volume {
        &self.core.vol
    }

    fn begin(&self) -> Result<Tx<'a>> {
        // Without a journal the credits bound nothing.
        self.core.begin(1)
    }

    /// Is `(pblk, len)` a range data may live in?
    fn data_range(&self, pblk: u64, len: u64) -> Result<bool> {
        Ok(len > 0
            && self.vol().valid_range(pblk, len)
            && !self.core.allocator()?.in_system_zone(PhysicalBlock(pblk), len))
    }

    /// Marks in use every block the trees of the tags' inodes map now.
    /// After a replay that crashed part-way, the full commits' bitmaps
    /// (written again) may call free a block that replay gave to one of
    /// these inodes; an allocation now must not take it.
    fn claim_trees(&mut self, scan: &FcScan) -> Result<()> {
        let mut inos = BTreeSet::new();
        for t in &scan.tags {
            match t {
                FcTag::Inode { ino, .. } | FcTag::AddRange { ino, .. } | FcTag::DelRange { ino, .. } => {
                    inos.insert(*ino);
                }
                FcTag::Dentry { parent, ino, .. } => {
                    inos.insert(*parent);
                    inos.insert(*ino);
                }
                _ => {}
            }
        }
        for ino in inos {
            let Some(i) = self.live_inode(ino) else { continue };
            if !i.uses_extents() || i.has_inline_data() || self.core.is_fast_symlink(&i) {
                continue;
            }
            // An unreadable tree is the tags' business (they may replace it).
            let Ok(t) = self.tree_blocks(&i) else { continue };
            let tx = self.begin()?;
            for (p, n) in t.nodes.into_iter().map(|b| (b, 1)).chain(t.data) {
                if self.data_range(p, n)? {
                    tx.claim_blocks(PhysicalBlock(p), n)?;
                }
            }
            tx.settle();
        }
        Ok(())
    }

    /// Marks every ADD_RANGE's blocks in use.
    fn claim_regions(&mut self, scan: &FcScan) -> Result<()> {
        let mut v: Vec<(u64, u64)> = Vec::new();
        for t in &scan.tags {
            if let FcTag::AddRange { extent: FcExtent { pblk, len, .. }, .. } = t {
                if self.data_range(*pblk, u64::from(*len))? {
                    v.push((*pblk, *pblk + u64::from(*len)));
                }
            }
        }
        v.sort_unstable();
        for (s, e) in v {
            match self.regions.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => self.regions.push((s, e)),
            }
        }
        let tx = self.begin()?;
        for &(s, e) in &self.regions.clone() {
            let got = tx.claim_blocks(PhysicalBlock(s), e - s)?;
            self.claimed.extend(got.into_iter().map(|(p, n)| (p.get(), n)));
        }
        tx.settle();
        Ok(())
    }

    /// Marks in use again the region blocks inside `(pblk, len)`, which a
    /// tag has just freed.
    fn reclaim(&mut self, tx: &Tx, pblk: u64, len: u64) -> Result<()> {
        let (a, b) = (pblk, pblk + len);
        let first = self.regions.partition_point(|r| r.1 <= a);
        let hits: Vec<(u64, u64)> =
            self.regions[first..].iter().take_while(|r| r.0 < b).map(|r| (r.0.max(a), r.1.min(b))).collect();
        for (s, e) in hits {
            let got = tx.claim_blocks(PhysicalBlock(s), e - s)?;
            self.claimed.extend(got.into_iter().map(|(p, n)| (p.get(), n)));
        }
        Ok(())
    }

    /// Applies one tag; false if there was nothing to apply it to.
    fn apply(&mut self, tag: &FcTag) -> Result<bool> {
        match tag {
            FcTag::Inode { ino, raw } => self.inode(*ino, raw),
            FcTag::AddRange { ino, extent } => self.add_range(*ino, extent),
            FcTag::DelRange { ino, lblk, len } => self.del_range(*ino, *lblk, *len),
            FcTag::Dentry { kind, parent, ino, name } if *kind == fc_tag::UNLINK => self.unlink(*parent, *ino, name),
            FcTag::Dentry { kind, parent, ino, name } => self.link(*kind == fc_tag::CREAT, *parent, *ino, name),
            FcTag::Head { .. } | FcTag::Pad | FcTag::Tail { .. } | FcTag::Invalid { .. } => Ok(true),
        }
    }

    /// An inode in use (mode set) with links, or None.
    fn live_inode(&self, ino: u32) -> Option<Inode> {
        if ino == 0 || ino > self.vol().sb.inodes_count {
            return None;
        }
        inode::read_inode(self.vol(), ino).ok().filter(|i| i.mode != 0 && i.links_count > 0)
    }

    /// Inode table block and offset of `ino`'s record.
    fn slot(&self, ino: u32) -> (u64, usize) {
        let sb = &self.vol().sb;
        let idx = ino - 1;
        let g = (idx / sb.inodes_per_group) as usize;
        let within = u64::from(idx % sb.inodes_per_group) * u64::from(sb.inode_size);
        let bs = self.vol().block_size as u64;
        (self.vol().groups[g].inode_table + within / bs, (within % bs) as usize)
    }

    fn inode(&mut self, ino: u32, raw: &[u8]) -> Result<bool> {
        let vol = self.vol();
        let sb = &vol.sb;
        if ino == 0 || ino > sb.inodes_count {
            return Ok(false);
        }
        let isz = usize::from(sb.inode_size);
        let (block, off) = self.slot(ino);
        let tx = self.begin()?;
        tx.modify(block, |b| {
            let rec = &mut b[off..off + isz];
            let old_iblock: Vec<u8> = rec[I_BLOCK..I_BLOCK + I_BLOCK_SIZE].to_vec();
            let n = raw.len().min(isz);
            rec[..n].copy_from_slice(&raw[..n]);
            let flags = le32(rec, I_FLAGS);
            if flags & FL_EXTENTS != 0 && flags & FL_INLINE_DATA == 0 {
                rec[I_BLOCK..I_BLOCK + I_BLOCK_SIZE].copy_from_slice(&old_iblock);
                if le16(rec, I_BLOCK) != EXTENT_MAGIC {
                    let mut empty = Inode::new_raw(sb, ino);
                    ew::init_root(&mut empty);
                    rec[I_BLOCK..I_BLOCK + I_BLOCK_SIZE].copy_from_slice(&empty.block);
                }
            }
            if sb.has_metadata_csum() {
                let c = inode_checksum(sb, ino, rec);
                put_le16(rec, 0x7C, c as u16);
                if isz > 128 && 128 + usize::from(le16(rec, 0x80)) >= 0x84 {
                    put_le16(rec, 0x82, (c >> 16) as u16);
                }
            }
            Ok(())
        })?;
        let mode = le16(raw, 0);
        if mode != 0 && le16(raw, 0x1A) > 0 {
            tx.claim_inode(ino, mode & S_IFMT == S_IFDIR)?;
        }
        tx.settle();
        self.modified.insert(ino);
        Ok(true)
    }

    fn add_range(&mut self, ino: u32, ext: &FcExtent) -> Result<bool> {
        let Some(mut i) = self.live_inode(ino).filter(|i| i.uses_extents() && !i.has_inline_data()) else {
            return Ok(false);
        };
        let len = u64::from(ext.len);
        if !self.data_range(ext.pblk, len)? {
            return Ok(false);
        }
        self.modified.insert(ino);
        let tx = self.begin()?;
        let (start, end) = (FileBlock(u64::from(ext.lblk)), FileBlock(u64::from(ext.lblk) + len));
        if end > MAX_LBLK {
            return Ok(false);
        }
        let mut cur = start;
        while cur < end {
            let m = inode::map_block(self.vol(), &i, cur)?;
            let n = m.len.max(1).min(end - cur);
            let want = PhysicalBlock(ext.pblk + (cur - start));
            match m.kind {
                MapKind::Mapped(p) if p == want && !ext.unwritten => {}
                MapKind::Unwritten(p) if p == want && ext.unwritten => {}
                MapKind::Unwritten(p) if p == want => ew::mark_written(&tx, &mut i, cur, n)?,
                MapKind::Hole => {
                    tx.claim_blocks(want, n)?;
                    ew::map_run(&tx, &mut i, cur, want, n, ext.unwritten)?;
                }
                MapKind::Mapped(p) | MapKind::Unwritten(p) => {
                    // Mapped elsewhere (freed and reallocated since the
                    // last full commit): the old blocks go. Marked in use
                    // first so that freeing them is never a double free.
                    tx.claim_blocks(p, n)?;
                    ew::remove_range(&tx, &mut i, cur, cur + n)?;
                    self.reclaim(&tx, p.get(), n)?;
                    tx.claim_blocks(want, n)?;
                    ew::map_run(&tx, &mut i, cur, want, n, ext.unwritten)?;
                }
            }
            cur += n;
        }
        tx.write_inode(&mut i)?;
        tx.settle();
        Ok(true)
    }

    fn del_range(&mut self, ino: u32, lblk: u32, len: u32) -> Result<bool> {
        let Some(mut i) = self.live_inode(ino).filter(|i| i.uses_extents() && !i.has_inline_data()) else {
            return Ok(false);
        };
        self.modified.insert(ino);
        let from = FileBlock(u64::from(lblk));
        let to = (from + u64::from(len)).min(MAX_LBLK);
        // What the range maps now (few runs: holes come back whole).
        let mut mapped = Vec::new();
        let mut cur = from;
        while cur < to {
            let m = inode::map_block(self.vol(), &i, cur)?;
            let n = m.len.max(1).min(to - cur);
            if let MapKind::Mapped(p) | MapKind::Unwritten(p) = m.kind {
                mapped.push((p, n));
            }
            cur += n;
        }
        let tx = self.begin()?;
        for &(p, n) in &mapped {
            tx.claim_blocks(p, n)?;
        }
        ew::remove_range(&tx, &mut i, from, to)?;
        for &(p, n) in &mapped {
            self.reclaim(&tx, p.get(), n)?;
        }
        tx.write_inode(&mut i)?;
        tx.settle();
        Ok(true)
    }

    fn link(&mut self, creat: bool, parent: u32, ino: u32, name: &[u8]) -> Result<bool> {
        let Some(mut child) = self.live_inode(ino) else { return Ok(false) };
        let Some(mut d) = self.live_inode(parent).filter(|d| d.mode & S_IFMT == S_IFDIR) else {
            return Ok(false);
        };
        let is_dir = child.mode & S_IFMT == S_IFDIR;
        let tx = self.begin()?;
        if creat {
            tx.claim_inode(ino, is_dir)?;
        }
        if creat && is_dir && child.uses_extents() && !child.has_inline_data() {
            // Directory blocks are not in fast commits: a new directory
            // gets its first block here (the kernel's ext4_init_new_dir).
            if inode::map_block(self.vol(), &child, FileBlock(0))?.kind == MapKind::Hole {
                let runs = ew::allocate_range(&tx, &mut child, FileBlock(0), 1, false, aflags::METADATA, 0)?;
                let Some(&(_, pblk, _)) = runs.first() else {
                    return Err(Error::NoSpace("no block for a replayed directory".into()));
                };
                dir::write::init_dir_block(&tx, &mut child, pblk, parent)?;
                tx.write_inode(&mut child)?;
            }
            self.modified.insert(ino);
            self.dirs.insert(ino);
        }
        let added = match dir::lookup(self.vol(), &d, name)? {
            Some(_) => false,
            None => {
                dir::write::add_entry(&tx, &mut d, name, ino, file_type_of(child.mode))?;
                tx.write_inode(&mut d)?;
                true
            }
        };
        if added && !creat {
            child.links_count = child.links_count.saturating_add(1);
            tx.write_inode(&mut child)?;
        }
        tx.settle();
        self.dirs.insert(parent);
        Ok(true)
    }

    fn unlink(&mut self, parent: u32, ino: u32, name: &[u8]) -> Result<bool> {
        let Some(mut d) = self.live_inode(parent).filter(|d| d.mode & S_IFMT == S_IFDIR) else {
            return Ok(false);
        };
        match dir::lookup(self.vol(), &d, name)? {
            Some((e, _)) if e == ino => {}
            _ => return Ok(false),
        }
        let tx = self.begin()?;
        dir::write::remove_entry(&tx, &mut d, name)?;
        tx.write_inode(&mut d)?;
        self.dirs.insert(parent);
        if let Some(mut child) = self.live_inode(ino) {
            let is_dir = child.mode & S_IFMT == S_IFDIR;
            child.links_count = if is_dir { 0 } else { child.links_count - 1 };
            if child.links_count == 0 {
                self.core.release_inode(&tx, &mut child)?;
                self.dirs.remove(&ino);
            } else {
                tx.write_inode(&mut child)?;
            }
        }
        tx.settle();
        Ok(true)
    }

    /// Every block of `i`'s extent tree.
    fn tree_blocks(&self, i: &Inode) -> Result<TreeBlocks> {
        let vol = self.vol();
        let mut t = TreeBlocks::default();
        let mut stack = vec![(parse_node(&i.block, 0)?, MAX_DEPTH + 1)];
        while let Some((node, limit)) = stack.pop() {
            match node {
                ExtentNode::Leaf(_, v) => {
                    for e in v.iter().filter(|e| e.len > 0) {
                        t.data.push((e.start.get(), u64::from(e.len)));
                        t.end = t.end.max(u64::from(e.block.0) + u64::from(e.len));
                    }
                }
                ExtentNode::Index(h, v) => {
                    if h.depth == 0 || h.depth >= limit {
                        continue;
                    }
                    for e in v {
                        let b = e.leaf.get();
                        if !vol.valid_range(b, 1) {
                            continue;
                        }
                        t.nodes.push(b);
                        let buf = vol.block(b)?;
                        stack.push((parse_node(buf.data(), b)?, h.depth));
                    }
                }
            }
        }
        Ok(t)
    }

    /// The kernel's final fix-up: bitmaps and block counts of the inodes
    /// the tags touched, region blocks nothing maps, directory links.
    fn finish(&mut self) -> Result<()> {
        let bs = self.vol().block_size as u64;
        // Blocks per cluster (1 without bigalloc).
        let ratio = (self.vol().sb.cluster_size() / bs).max(1);
        // Runs the trees map (a huge file is a few runs, not a set of
        // every block).
        let mut used: Runs = Vec::new();
        for &ino in &self.modified.clone() {
            let Some(mut i) = self.live_inode(ino) else { continue };
            let tx = self.begin()?;
            tx.claim_inode(ino, i.mode & S_IFMT == S_IFDIR)?;
            if i.uses_extents() && !i.has_inline_data() && !self.core.is_fast_symlink(&i) {
                let TreeBlocks { nodes, data, end } = match self.tree_blocks(&i) {
                    Ok(t) => t,
                    Err(e) => {
                        self.skipped.push(format!("inode {ino}: extent tree unreadable after replay: {e}"));
                        continue;
                    }
                };
                // i_blocks counts clusters (the unit the allocator gives
                // out and quota charges): each tree node and the xattr
                // block take one of their own, data the distinct clusters
                // its blocks fall in (runs may share one at their ends).
                // Without bigalloc a cluster is a block.
                let mut clusters = 0u64;
                for &b in &nodes {
                    if self.data_range(b, 1)? {
                        tx.claim_blocks(PhysicalBlock(b), 1)?;
                        used.push((b, 1));
                        clusters += 1;
                    }
                }
                let mut data_clusters: Runs = Vec::new();
                for &(p, n) in &data {
                    if self.data_range(p, n)? {
                        tx.claim_blocks(PhysicalBlock(p), n)?;
                        used.push((p, n));
                        let first = p / ratio;
                        data_clusters.push((first, (p + n - 1) / ratio + 1 - first));
                    }
                }
                data_clusters.sort_unstable();
                let mut end_seen = 0u64;
                for (c, n) in data_clusters {
                    // Only the part past the clusters counted already.
                    let from = c.max(end_seen);
                    if c + n > from {
                        clusters += c + n - from;
                    }
                    end_seen = end_seen.max(c + n);
                }
                clusters += u64::from(i.file_acl != 0);
                let blocks_512 = clusters * ratio * (bs / 512);
                // A directory is as long as its blocks (its logged size
                // counts the kernel's blocks, which the replay rebuilt).
                let is_dir = i.mode & S_IFMT == S_IFDIR;
                let size = if is_dir && end > 0 { end * bs } else { i.size };
                if i.blocks_512 != blocks_512 || i.size != size {
                    i.blocks_512 = blocks_512;
                    i.size = size;
                    tx.write_inode(&mut i)?;
                }
            }
            tx.settle();
        }
        // Region blocks marked for tags that mapped them nowhere in the
        // end (skipped tags, ranges deleted again). The bitmap marks
        // clusters: a block is in use when any block of its cluster is
        // (freeing it would free the cluster under the file that maps
        // the others).
        for r in used.iter_mut() {
            let first = r.0 / ratio * ratio;
            let end = (r.0 + r.1).div_ceil(ratio) * ratio;
            *r = (first, end - first);
        }
        used.sort_unstable();
        let mut merged: Runs = Vec::new();
        for (p, n) in used {
            match merged.last_mut() {
                Some(last) if p <= last.0 + last.1 => last.1 = last.1.max(p + n - last.0),
                _ => merged.push((p, n)),
            }
        }
        let in_use = |b: u64| {
            let i = merged.partition_point(|r| r.0 + r.1 <= b);
            merged.get(i).is_some_and(|r| r.0 <= b)
        };
        let tx = self.begin()?;
        for &(p, n) in &self.claimed {
            let mut b = p;
            while b < p + n {
                if in_use(b) || self.core.allocator()?.is_free_on_disk(PhysicalBlock(b)) {
                    b += 1;
                    continue;
                }
                let s = b;
                while b < p + n && !in_use(b) && !self.core.allocator()?.is_free_on_disk(PhysicalBlock(b)) {
                    b += 1;
                }
                tx.free_blocks(PhysicalBlock(s), b - s, FreeKind::Data)?;
            }
        }
        tx.settle();
        // The handle ends before the directories are read (lock order).
        drop(tx);
        let dir_nlink = self.vol().sb.features.has_ro_compat(ro_compat::DIR_NLINK);
        for &ino in &self.dirs {
            let Some(mut d) = self.live_inode(ino).filter(|d| d.mode & S_IFMT == S_IFDIR) else { continue };
            let entries = match self.core.read_dir_all(ino) {
                Ok(v) => v,
                Err(e) => {
                    self.skipped.push(format!("directory {ino}: link count not recounted: {e}"));
                    continue;
                }
            };
            let mut links = 2u32;
            for e in entries {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let sub = match e.file_type {
                    Some(t) => t == FileType::Directory,
                    None => self.live_inode(e.ino).is_some_and(|c| c.mode & S_IFMT == S_IFDIR),
                };
                links += u32::from(sub);
            }
            let links = if links >= DIR_LINK_MAX && dir_nlink { 1 } else { links.min(u32::from(u16::MAX)) } as u16;
            if d.links_count != links {
                let tx = self.begin()?;
                d.links_count = links;
                tx.write_inode(&mut d)?;
                tx.settle();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;
    use crate::format::inode::{Timestamp, ROOT_INO};
    use crate::mkfs::{format_device, MkfsOptions};
    use crate::Filesystem;

    const BS: u64 = 1024;

    fn fresh() -> Arc<dyn BlockDevice> {
        let dev = MemoryDevice::new(16 << 20);
        let opts = MkfsOptions { size: 16 << 20, block_size: Some(BS as u32), ..Default::default() };
        format_device(&dev, &opts, true).unwrap();
        Arc::new(dev)
    }

    /// The raw record of a new regular file `ino` of `size` bytes.
    fn raw_file(dev: &Arc<dyn BlockDevice>, ino: u32, size: u64, links: u16) -> Vec<u8> {
        let vol = Volume::open(dev.clone(), 64).unwrap();
        let mut i = Inode::new_raw(&vol.sb, ino);
        i.mode = 0o100644;
        i.size = size;
        i.links_count = links;
        i.generation = 77;
        i.mtime = Timestamp { sec: 1_700_000_000, nsec: 0 };
        ew::init_root(&mut i);
        // Garbage where the tree goes: the replay keeps the on-disk one.
        i.block[20] = 0xAB;
        i.encode(&vol.sb).unwrap().to_vec()
    }

    /// `e2fsck -fn` on the device's bytes, where e2fsprogs is installed.
    fn fsck_clean(dev: &Arc<dyn BlockDevice>) {
        let mut bytes = vec![0u8; dev.size() as usize];
        dev.read_at(&mut bytes, 0).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("img");
        std::fs::write(&img, &bytes).unwrap();
        let Ok(out) = std::process::Command::new("e2fsck").arg("-fn").arg(&img).output() else {
            eprintln!("SKIP: e2fsck not installed");
            return;
        };
        assert!(out.status.success(), "e2fsck -fn:\n{}", String::from_utf8_lossy(&out.stdout));
    }

    fn scan(tags: Vec<FcTag>) -> FcScan {
        FcScan { tags, commits: 1, blocks_read: 1 }
    }

    /// A free run of `n` blocks after the first half of the filesystem.
    fn free_run(dev: &Arc<dyn BlockDevice>, n: u64) -> u64 {
        let vol = Arc::new(Volume::open(dev.clone(), 64).unwrap());
        let a = Allocator::new(vol.clone(), AllocConfig::default()).unwrap();
        let mut b = vol.sb.blocks_count / 2;
        while !(b..b + n).all(|x| a.is_free_on_disk(PhysicalBlock(x))) {
            b += 1;
        }
        b
    }

    fn counts(dev: &Arc<dyn BlockDevice>) -> (u64, u32, u64, u32) {
        let vol = Volume::open(dev.clone(), 64).unwrap();
        let gb: u64 = vol.groups.iter().map(|g| u64::from(g.free_blocks_count)).sum();
        let gi: u32 = vol.groups.iter().map(|g| g.free_inodes_count).sum();
        (vol.sb.free_blocks_count, vol.sb.free_inodes_count, gb, gi)
    }

    #[test]
    fn create_map_link_unlink_and_replay_twice() {
        let dev = fresh();
        let (fb0, fi0, _, _) = counts(&dev);
        let p = free_run(&dev, 3);
        let data: Vec<u8> = (0..3 * BS as usize).map(|i| (i * 7 % 251) as u8).collect();
        dev.write_at(&data, p * BS).unwrap();
        let ino = 20;
        let raw = raw_file(&dev, ino, 3 * BS, 1);
        let tags = vec![
            FcTag::Head { features: 0, tid: 5 },
            FcTag::Inode { ino, raw: raw.clone() },
            FcTag::AddRange { ino, extent: FcExtent { lblk: 0, len: 3, unwritten: false, pblk: p } },
            FcTag::Dentry { kind: fc_tag::CREAT, parent: ROOT_INO, ino, name: b"new".to_vec() },
            FcTag::Dentry { kind: fc_tag::LINK, parent: ROOT_INO, ino, name: b"other".to_vec() },
            FcTag::Dentry { kind: fc_tag::UNLINK, parent: ROOT_INO, ino, name: b"other".to_vec() },
            FcTag::Inode { ino, raw },
            FcTag::Tail { tid: 5, crc: 0 },
        ];
        for round in 0..2 {
            let notes = replay(dev.clone(), &scan(tags.clone())).unwrap();
            assert!(notes[0].contains("replayed"), "{notes:?}");
            assert_eq!(notes.len(), 1, "round {round}: {notes:?}");
            let fs = Filesystem::open_device(dev.clone(), MountOptions::default()).unwrap();
            let i = fs.resolve("/new").unwrap();
            assert_eq!(i, ino);
            assert!(fs.resolve("/other").is_err());
            assert_eq!(fs.read_all(i).unwrap(), data);
            let st = fs.stat(i).unwrap();
            assert_eq!((st.nlink, st.blocks), (1, 3 * BS / 512), "round {round}");
            assert_eq!(counts(&dev), (fb0 - 3, fi0 - 1, fb0 - 3, fi0 - 1), "round {round}");
            fsck_clean(&dev);
        }
    }

    #[test]
    fn unwritten_then_written() {
        let dev = fresh();
        let p = free_run(&dev, 4);
        let ino = 22;
        let raw = raw_file(&dev, ino, 4 * BS, 1);
        let ext = |unwritten| FcExtent { lblk: 0, len: 4, unwritten, pblk: p };
        let tags = vec![
            FcTag::Inode { ino, raw: raw.clone() },
            FcTag::Dentry { kind: fc_tag::CREAT, parent: ROOT_INO, ino, name: b"u".to_vec() },
            FcTag::AddRange { ino, extent: ext(true) },
            FcTag::AddRange { ino, extent: FcExtent { lblk: 1, len: 2, unwritten: false, pblk: p + 1 } },
            FcTag::Inode { ino, raw },
        ];
        for _ in 0..2 {
            replay(dev.clone(), &scan(tags.clone())).unwrap();
            let vol = Volume::open(dev.clone(), 64).unwrap();
            let i = inode::read_inode(&vol, ino).unwrap();
            let kinds: Vec<(u64, u64, bool)> = inode::extents(&vol, &i)
                .unwrap()
                .iter()
                .map(|m| (m.lblk.get(), m.len, matches!(m.kind, MapKind::Unwritten(_))))
                .collect();
            assert_eq!(kinds, vec![(0, 1, true), (1, 2, false), (3, 1, true)]);
            assert_eq!(i.blocks_512, 4 * BS / 512);
            fsck_clean(&dev);
        }
    }

    #[test]
    fn delete_range_remap_and_skipped_tags() {
        let dev = fresh();
        let (fb0, _, _, _) = counts(&dev);
        let p = free_run(&dev, 8);
        let ino = 21;
        let tags = vec![
            FcTag::Inode { ino, raw: raw_file(&dev, ino, 4 * BS, 1) },
            FcTag::Dentry { kind: fc_tag::CREAT, parent: ROOT_INO, ino, name: b"f".to_vec() },
            FcTag::AddRange { ino, extent: FcExtent { lblk: 0, len: 4, unwritten: false, pblk: p } },
            // Blocks 2..4 move to p+6..p+8 (freed and reallocated).
            FcTag::AddRange { ino, extent: FcExtent { lblk: 2, len: 2, unwritten: false, pblk: p + 6 } },
            FcTag::DelRange { ino, lblk: 1, len: 1 },
            // An inode that does not exist and a block outside the
            // filesystem: passed over.
            FcTag::AddRange { ino: 999, extent: FcExtent { lblk: 0, len: 1, unwritten: false, pblk: p + 4 } },
            FcTag::AddRange { ino, extent: FcExtent { lblk: 9, len: 1, unwritten: false, pblk: 1 << 40 } },
        ];
        let notes = replay(dev.clone(), &scan(tags)).unwrap();
        assert!(notes.iter().any(|n| n.contains("passed over")), "{notes:?}");
        let fs = Filesystem::open_device(dev.clone(), MountOptions::default()).unwrap();
        let i = inode::read_inode(fs.volume(), ino).unwrap();
        let runs: Vec<(u64, u64)> = inode::extents(fs.volume(), &i)
            .unwrap()
            .iter()
            .map(|m| match m.kind {
                MapKind::Mapped(b) => (m.lblk.get(), b.get()),
                _ => panic!("{m:?}"),
            })
            .collect();
        assert_eq!(runs, vec![(0, p), (2, p + 6)]);
        assert_eq!(i.blocks_512, 3 * BS / 512);
        // p, p+6, p+7 in use; p+1..p+6 (deleted, moved, or only in a
        // skipped tag) free again.
        let (fb, _, gb, _) = counts(&dev);
        assert_eq!((fb, gb), (fb0 - 3, fb0 - 3));
        let a = fs.allocator().unwrap();
        for (b, free) in [(p, false), (p + 1, true), (p + 2, true), (p + 4, true), (p + 6, false), (p + 7, false)] {
            assert_eq!(a.is_free_on_disk(PhysicalBlock(b)), free, "block {b}");
        }
        drop(fs);
        fsck_clean(&dev);
    }
}
