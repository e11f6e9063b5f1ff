//! Changing an extent tree: insert (allocate), convert unwritten to
//! written, remove ranges; leaves split and the tree grows a level when a
//! node overflows, empty nodes are freed and a root with a single small
//! child pulls it back up (shrink). The public entry points also serve
//! block-mapped (ext2/ext3) files, handing them to
//! [`super::indirect_write`], so the data path calls one interface.
//!
//! Invariants kept (those `e2fsck` checks): every non-root node has at
//! least one entry; an index entry's key equals the first logical block of
//! its subtree; extents are sorted, do not overlap and are at most 32768
//! blocks long (32767 when unwritten); every non-root node carries its
//! crc32c tail.
//!
//! Locking: the caller holds whatever excludes other changers of this
//! inode's tree: the inode's I/O lock exclusively, or its mapping lock
//! exclusively under a shared I/O lock (unwritten-to-written conversion at
//! direct-I/O completion; see [`crate::locks`]). Every block change goes
//! through the [`Tx`], so readers walking the tree through the cache see
//! each node either before or after a change, never torn.

use crate::alloc::AllocRequest;
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::{FileBlock, LogicalBlock, PhysicalBlock};
use crate::format::bytes::le16;
use crate::format::extent::{
    encode_index, encode_leaf, parse_node, set_block_checksum, Extent, ExtentHeader, ExtentIndex, ExtentNode,
    ENTRY_SIZE, EXTENT_MAGIC, MAX_DEPTH, MAX_INIT_LEN,
};
use crate::format::inode::{Inode, FL_EXTENTS, I_BLOCK_SIZE, S_IFDIR, S_IFMT};
use crate::txn::{FreeKind, Tx};

use super::MAX_LBLK;

mod alloc;
mod shift;
pub use super::map_write::{Run, FINISH_RESERVE};
pub use alloc::{alloc_step_credits, allocate_range, map_run};
pub use shift::{shift_bounded, Shift};

/// Longest unwritten extent (the top value of `ee_len` marks "unwritten").
const MAX_UNWRITTEN_LEN: u64 = MAX_INIT_LEN as u64 - 1;
/// Entries in the root node inside `i_block`.
const ROOT_CAPACITY: usize = (I_BLOCK_SIZE - ENTRY_SIZE) / ENTRY_SIZE;

/// Makes `inode`'s `i_block` an empty extent root and sets the extents flag.
pub fn init_root(inode: &mut Inode) {
    inode.flags |= FL_EXTENTS;
    inode.block = [0; I_BLOCK_SIZE];
    inode.block[0..2].copy_from_slice(&EXTENT_MAGIC.to_le_bytes());
    inode.block[4..6].copy_from_slice(&(ROOT_CAPACITY as u16).to_le_bytes());
}

/// Makes `inode`'s `i_block` an empty map of the kind new files get on
/// this filesystem: an extent root with the `extent` feature, else an
/// empty block map (the kernel's ext4_new_inode: block-mapped files on
/// ext2/ext3 images, even when the ext4 driver mounts them).
pub fn init_map(sb: &crate::format::superblock::Superblock, inode: &mut Inode) {
    if sb.features.has_incompat(crate::format::features::incompat::EXTENTS) {
        init_root(inode);
    } else {
        super::indirect_write::init_map(inode);
    }
}

/// One node on the path from the root to a leaf.
#[derive(Debug, Clone)]
struct Level {
    /// Physical block of the node; 0 for the root in `i_block`.
    block: PhysicalBlock,
    /// Height above the leaves.
    depth: u16,
    node: Node,
    /// Index of the entry followed to the next level (interior nodes).
    pos: usize,
}

#[derive(Debug, Clone)]
enum Node {
    Index(Vec<ExtentIndex>),
    Leaf(Vec<Extent>),
}

impl Node {
    fn len(&self) -> usize {
        match self {
            Node::Index(v) => v.len(),
            Node::Leaf(v) => v.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// First logical block the node covers (its key in the parent).
    fn first_key(&self) -> Option<u32> {
        match self {
            Node::Index(v) => v.first().map(|e| e.block.0),
            Node::Leaf(v) => v.first().map(|e| e.block.0),
        }
    }

    /// Encodes the node at height `depth` into `b` (see [`encode_index`]
    /// and [`encode_leaf`]).
    fn encode(&self, depth: u16, b: &mut [u8]) -> Result<()> {
        match self {
            Node::Index(v) => encode_index(depth, v, b),
            Node::Leaf(v) => encode_leaf(v, b),
        }
    }

    /// Splits off everything from entry `at` on.
    fn split_off(&mut self, at: usize) -> Node {
        match self {
            Node::Index(v) => Node::Index(v.split_off(at)),
            Node::Leaf(v) => Node::Leaf(v.split_off(at)),
        }
    }
}

/// Everything one tree change needs.
struct Ctx<'t, 'a> {
    tx: &'t Tx<'a>,
    seed: Option<u32>,
    bs: usize,
    /// Blocks per cluster (bigalloc; 1 without).
    ratio: u64,
}

impl Ctx<'_, '_> {
    fn new<'t, 'a>(tx: &'t Tx<'a>, inode: &Inode) -> Result<Ctx<'t, 'a>> {
        if !inode.uses_extents() {
            return Err(Error::Unsupported(format!("inode {}: changing a block-mapped (non-extent) file", inode.ino)));
        }
        let vol = tx.vol;
        Ok(Ctx {
            tx,
            seed: vol.has_csum().then(|| vol.inode_csum_seed(inode.ino, inode.generation)),
            bs: vol.block_size,
            ratio: tx.alloc.cluster_ratio(),
        })
    }

    /// `i_blocks` sectors of one allocation unit (a cluster with bigalloc:
    /// the kernel counts every cluster a file owns in full).
    fn unit_sectors(&self) -> u64 {
        self.ratio * self.bs as u64 / 512
    }

    fn block_capacity(&self) -> usize {
        (self.bs - ENTRY_SIZE - 4) / ENTRY_SIZE
    }

    fn capacity(&self, level: usize) -> usize {
        if level == 0 {
            ROOT_CAPACITY
        } else {
            self.block_capacity()
        }
    }

    /// Reads and checks the child node at `block`, expected at `depth`.
    fn read_node(&self, block: PhysicalBlock, depth: u16, ino: u32) -> Result<Node> {
        let vol = self.tx.vol;
        let block = block.get();
        if !vol.valid_range(block, 1) {
            return Err(Error::corruption(
                Structure::Extent,
                Location::InodeBlock { ino, block },
                CorruptKind::OutsideFilesystem { what: "extent index", block, len: 1 },
            ));
        }
        let buf = vol.block(block)?;
        if let Some(seed) = self.seed {
            crate::inode::verify_extent_block(&buf, seed, block)?;
        }
        // The parse the lookups made of this version (or one they reuse).
        let n = crate::inode::parsed_extent_node(vol, &buf, block)?;
        if n.header().depth != depth {
            return Err(Error::corruption(
                Structure::Extent,
                Location::InodeBlock { ino, block },
                CorruptKind::Mismatch {
                    field: "eh_depth",
                    value: u64::from(n.header().depth),
                    expected: u64::from(depth),
                },
            ));
        }
        Ok(match &*n {
            ExtentNode::Index(_, v) => Node::Index(v.clone()),
            ExtentNode::Leaf(_, v) => Node::Leaf(v.clone()),
        })
    }

    /// The path from the root to the leaf that holds (or would hold) `lblk`.
    fn find_path(&self, inode: &Inode, lblk: FileBlock) -> Result<Vec<Level>> {
        if inode.has_inline_data() {
            // Inline bytes can look like an extent header (a directory
            // whose parent is inode 0xF30A): never edit them as a tree.
            return Err(Error::Invalid(format!("inode {} keeps its data inline: it has no extent tree", inode.ino)));
        }
        let root = parse_node(&inode.block, 0)?;
        let mut depth = root.header().depth;
        let mut node = match root {
            ExtentNode::Index(_, v) => Node::Index(v),
            ExtentNode::Leaf(_, v) => Node::Leaf(v),
        };
        let mut path = Vec::with_capacity(usize::from(depth) + 1);
        let mut block = PhysicalBlock(0);
        loop {
            match &node {
                Node::Leaf(_) => {
                    path.push(Level { block, depth, node, pos: 0 });
                    return Ok(path);
                }
                Node::Index(v) => {
                    if v.is_empty() || depth == 0 {
                        return Err(Error::corruption(
                            Structure::Extent,
                            Location::inode_block(inode.ino, block.get()),
                            CorruptKind::Empty { what: "extent index node" },
                        ));
                    }
                    let pos = v.partition_point(|e| FileBlock::from(e.block) <= lblk).saturating_sub(1);
                    let child = v[pos].leaf;
                    let next = self.read_node(child, depth - 1, inode.ino)?;
                    path.push(Level { block, depth, node, pos });
                    node = next;
                    block = child;
                    depth -= 1;
                }
            }
        }
    }

    /// Allocates one tree block near `goal`.
    fn alloc_node_block(&self, inode: &mut Inode, goal: PhysicalBlock) -> Result<PhysicalBlock> {
        let b = self.tx.alloc_metadata_block(inode.ino, goal)?;
        inode.blocks_512 += self.unit_sectors();
        Ok(b)
    }

    /// A tree block: one set aside in `spare`, else a new one near `goal`.
    fn spare_or_alloc(
        &self,
        inode: &mut Inode,
        goal: PhysicalBlock,
        spare: &mut Vec<PhysicalBlock>,
    ) -> Result<PhysicalBlock> {
        match spare.pop() {
            Some(b) => Ok(b),
            None => self.alloc_node_block(inode, goal),
        }
    }

    fn free_node_block(&self, inode: &mut Inode, block: PhysicalBlock) -> Result<()> {
        let left = inode.blocks_less(self.unit_sectors())?;
        self.tx.free_blocks(block, 1, FreeKind::Metadata)?;
        inode.blocks_512 = left;
        Ok(())
    }

    /// Writes level `l` (not the root) and points its parent's entry for
    /// it at its first key. Returns the parent's entries, the position of
    /// that entry, and whether its key changed (or the entry is missing):
    /// if not, nothing above needs rewriting.
    fn write_under_parent<'p>(
        &self,
        inode: &mut Inode,
        path: &'p mut [Level],
        l: usize,
    ) -> Result<(&'p mut Vec<ExtentIndex>, usize, bool)> {
        self.write_level(inode, &path[l])?;
        let key = path[l].node.first_key().unwrap_or(0);
        let parent = &mut path[l - 1];
        let pos = parent.pos;
        let Node::Index(v) = &mut parent.node else {
            return Err(Error::corruption(
                Structure::Extent,
                Location::Inode(inode.ino),
                CorruptKind::WrongType { expected: "extent index node", found: 0 },
            ));
        };
        let changed = match v.get_mut(pos) {
            Some(e) if e.block.0 == key => false,
            Some(e) => {
                e.block = LogicalBlock(key);
                true
            }
            None => true,
        };
        Ok((v, pos, changed))
    }

    /// Writes a node: into `i_block` for the root, else into its block.
    fn write_level(&self, inode: &mut Inode, lv: &Level) -> Result<()> {
        if lv.block == PhysicalBlock(0) {
            return lv.node.encode(lv.depth, &mut inode.block);
        }
        let seed = self.seed;
        let mut header = None;
        // The node is encoded whole (header, entries, zeros, tail), new
        // block or not: nothing of the current version is needed.
        let buf = self.tx.rewrite(lv.block.get(), |b| {
            lv.node.encode(lv.depth, b)?;
            if let Some(seed) = seed {
                set_block_checksum(b, seed);
            }
            header = Some(ExtentHeader { entries: lv.node.len() as u16, max: le16(b, 4), depth: lv.depth });
            Ok(())
        })?;
        if let Some(h) = header {
            let node = match &lv.node {
                Node::Index(v) => ExtentNode::Index(h, v.clone()),
                Node::Leaf(v) => ExtentNode::Leaf(h, v.clone()),
            };
            crate::inode::seed_parsed_extent_node(self.tx.vol, &buf, node, seed);
        }
        Ok(())
    }

    /// Writes `path[l]` after its entries changed, and everything above it
    /// that changes in turn: splits overflowing nodes (growing the tree at
    /// the root), frees emptied ones, keeps parents' keys equal to their
    /// children's first blocks, and finally shrinks the root.
    ///
    /// Every block the splits need is allocated before anything is
    /// written (as the kernel's ext4_ext_split does), so ENOSPC leaves
    /// the tree as it was, never a node written whose new sibling or
    /// parent entry is missing.
    fn settle(&self, inode: &mut Inode, path: &mut Vec<Level>, l: usize, goal: PhysicalBlock) -> Result<()> {
        let mut spare = Vec::new();
        for _ in 0..self.blocks_needed(path, l) {
            match self.alloc_node_block(inode, goal) {
                Ok(b) => spare.push(b),
                Err(e) => {
                    for b in spare {
                        self.free_node_block(inode, b)?;
                    }
                    return Err(e);
                }
            }
        }
        spare.reverse();
        let r = self.settle_with(inode, path, l, goal, &mut spare);
        for b in spare {
            self.free_node_block(inode, b)?;
        }
        r
    }

    /// How many new blocks settling `path[l]` takes at most: a split of
    /// each overflowing node up the path, and one to grow the root.
    fn blocks_needed(&self, path: &[Level], l: usize) -> usize {
        let mut need = 0;
        let mut n = path[l].node.len();
        let mut k = l;
        loop {
            if k == 0 {
                return need + usize::from(n > ROOT_CAPACITY);
            }
            let cap = self.capacity(k);
            if n <= cap {
                return need;
            }
            let extra = n.div_ceil(cap) - 1;
            need += extra;
            n = path[k - 1].node.len() + extra;
            k -= 1;
        }
    }

    fn settle_with(
        &self,
        inode: &mut Inode,
        path: &mut Vec<Level>,
        mut l: usize,
        goal: PhysicalBlock,
        spare: &mut Vec<PhysicalBlock>,
    ) -> Result<()> {
        loop {
            let n = path[l].node.len();
            if l == 0 {
                if n <= ROOT_CAPACITY {
                    self.write_level(inode, &path[0])?;
                    return self.shrink(inode);
                }
                // Grow: the root's entries move into a new block below it.
                if path[0].depth >= MAX_DEPTH {
                    return Err(Error::NoSpace(format!("inode {}: extent tree at its maximum depth", inode.ino)));
                }
                let blk = self.spare_or_alloc(inode, goal, spare)?;
                let root = &mut path[0];
                let entries = std::mem::replace(&mut root.node, Node::Index(Vec::new()));
                let key = entries.first_key().unwrap_or(0);
                let child = Level { block: blk, depth: root.depth, node: entries, pos: root.pos };
                root.node = Node::Index(vec![ExtentIndex { block: LogicalBlock(key), leaf: blk }]);
                root.depth += 1;
                root.pos = 0;
                // The new child is written (and split) as the next step.
                path.insert(1, child);
                l = 1;
                continue;
            }
            if n == 0 {
                // An emptied node goes, and its entry in the parent.
                let blk = path[l].block;
                self.free_node_block(inode, blk)?;
                let parent = &mut path[l - 1];
                if let Node::Index(v) = &mut parent.node {
                    if parent.pos < v.len() {
                        v.remove(parent.pos);
                    }
                }
                path.truncate(l);
                l -= 1;
                if l == 0 && path[0].node.is_empty() {
                    // The whole tree is empty: back to an empty leaf root.
                    path[0].node = Node::Leaf(Vec::new());
                    path[0].depth = 0;
                }
                continue;
            }
            let cap = self.capacity(l);
            if n <= cap {
                let (_, _, key_changed) = self.write_under_parent(inode, path, l)?;
                if !key_changed {
                    return self.write_root_if(inode, path, l - 1);
                }
                l -= 1;
                continue;
            }
            // Split into nodes of at most `cap` entries. The rightmost
            // node of the tree is filled completely (appends stay dense);
            // elsewhere the entries are shared out evenly.
            let rightmost = path[..l].iter().all(|p| p.pos + 1 >= p.node.len());
            let chunks = n.div_ceil(cap);
            let per = if rightmost { cap } else { n.div_ceil(chunks) };
            let mut rest = path[l].node.split_off(per);
            let mut new_entries = Vec::new();
            while !rest.is_empty() {
                let tail = rest.split_off(per.min(rest.len()));
                let blk = self.spare_or_alloc(inode, goal, spare)?;
                let lv = Level { block: blk, depth: path[l].depth, node: rest, pos: 0 };
                self.write_level(inode, &lv)?;
                new_entries.push(ExtentIndex { block: LogicalBlock(lv.node.first_key().unwrap_or(0)), leaf: blk });
                rest = tail;
            }
            let (v, pos, _) = self.write_under_parent(inode, path, l)?;
            let at = (pos + 1).min(v.len());
            v.splice(at..at, new_entries);
            path.truncate(l);
            l -= 1;
        }
    }

    /// Writes `path[l]` when it is the root (non-root nodes above a
    /// settled level did not change).
    fn write_root_if(&self, inode: &mut Inode, path: &[Level], l: usize) -> Result<()> {
        if l == 0 {
            self.write_level(inode, &path[0])?;
            return self.shrink(inode);
        }
        Ok(())
    }

    /// While the root is an index with one child whose entries fit in the
    /// root, the child moves up into the inode and its block is freed.
    fn shrink(&self, inode: &mut Inode) -> Result<()> {
        loop {
            let ExtentNode::Index(h, v) = parse_node(&inode.block, 0)? else { return Ok(()) };
            if v.len() != 1 {
                return Ok(());
            }
            let child = v[0].leaf;
            let node = self.read_node(child, h.depth - 1, inode.ino)?;
            if node.len() > ROOT_CAPACITY {
                return Ok(());
            }
            let lv = Level { block: PhysicalBlock(0), depth: h.depth - 1, node, pos: 0 };
            self.write_level(inode, &lv)?;
            self.free_node_block(inode, child)?;
        }
    }
}

/// End (exclusive) of the logical range the leaf at the end of `path` is
/// responsible for: the key of the next subtree on the way down.
fn leaf_end(path: &[Level]) -> FileBlock {
    let mut hi = MAX_LBLK;
    for lv in &path[..path.len() - 1] {
        if let Node::Index(v) = &lv.node {
            if let Some(next) = v.get(lv.pos + 1) {
                hi = hi.min(FileBlock::from(next.block));
            }
        }
    }
    hi
}

fn ext_end(e: &Extent) -> FileBlock {
    FileBlock::from(e.block) + u64::from(e.len)
}

fn max_len(unwritten: bool) -> u64 {
    if unwritten {
        MAX_UNWRITTEN_LEN
    } else {
        u64::from(MAX_INIT_LEN)
    }
}

/// Appends `(lblk, pblk, len, unwritten)` to `out`, merging with the last
/// extent when contiguous in both spaces, and cutting at the maximum
/// extent length. A block past what an extent can store is refused (the
/// callers clamp to [`MAX_LBLK`] first; this is the checked narrowing).
fn push_run(
    out: &mut Vec<Extent>,
    mut lblk: FileBlock,
    mut pblk: PhysicalBlock,
    mut len: u64,
    unwritten: bool,
) -> Result<()> {
    while len > 0 {
        if let Some(last) = out.last_mut() {
            let room = max_len(unwritten).saturating_sub(u64::from(last.len));
            if last.unwritten == unwritten
                && ext_end(last) == lblk
                && last.start + u64::from(last.len) == pblk
                && room > 0
            {
                let n = room.min(len);
                last.len += n as u16;
                lblk += n;
                pblk += n;
                len -= n;
                continue;
            }
        }
        let n = max_len(unwritten).min(len);
        let block = lblk
            .to_logical()
            .ok_or_else(|| Error::FileTooBig(format!("logical block {lblk} beyond what an extent can map")))?;
        out.push(Extent { block, len: n as u16, start: pblk, unwritten });
        lblk += n;
        pblk += n;
        len -= n;
    }
    Ok(())
}

/// Physical blocks to free: (first block, count).
type FreeRange = (PhysicalBlock, u64);

/// A run for a leaf: (logical start, physical start, length, unwritten).
type Piece = (FileBlock, PhysicalBlock, u64, bool);

/// What to do with the part of each extent inside the range.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Edit {
    /// Drop it and free its blocks.
    Remove,
    /// Mark it written.
    MarkWritten,
}

/// Rebuilds a leaf's extents with `edit` applied to `[a, b)`, plus the
/// runs in `insert` (which must lie in holes), merging neighbours.
/// Returns the physical ranges to free.
///
/// Only the window of extents the edit and the inserts reach, widened by
/// one extent on each side (the neighbours a new run may merge with), is
/// rebuilt; the rest is copied as it is. A leaf holds up to 340 extents,
/// and a random write into a fragmented unwritten file converts one of
/// them: rebuilding, sorting and re-merging the whole leaf was most of
/// the conversion's CPU.
fn edit_leaf(
    v: &[Extent],
    a: FileBlock,
    b: FileBlock,
    edit: Option<Edit>,
    insert: &[Piece],
) -> Result<(Vec<Extent>, Vec<FreeRange>)> {
    let mut reach = edit.map(|_| (a, b));
    for &(l, _, n, _) in insert {
        let (lo, hi) = reach.unwrap_or((l, l + n));
        reach = Some((lo.min(l), hi.max(l + n)));
    }
    let Some((lo_key, hi_key)) = reach else { return Ok((v.to_vec(), Vec::new())) };
    // Extents are sorted and disjoint, so both predicates are monotone.
    let lo = v.partition_point(|e| ext_end(e) < lo_key).saturating_sub(1);
    let hi = (v.partition_point(|e| FileBlock::from(e.block) <= hi_key) + 1).min(v.len()).max(lo);
    let (mid, frees) = rebuild(&v[lo..hi], a, b, edit, insert)?;
    let mut out = Vec::with_capacity(lo + mid.len() + (v.len() - hi));
    out.extend_from_slice(&v[..lo]);
    out.extend_from_slice(&mid);
    out.extend_from_slice(&v[hi..]);
    Ok((out, frees))
}

/// [`edit_leaf`] over the extents `v` of its window: every extent split
/// at `[a, b)`, the inserts added, all sorted and merged again.
fn rebuild(
    v: &[Extent],
    a: FileBlock,
    b: FileBlock,
    edit: Option<Edit>,
    insert: &[Piece],
) -> Result<(Vec<Extent>, Vec<FreeRange>)> {
    let mut pieces: Vec<Piece> = Vec::with_capacity(v.len() + insert.len() + 2);
    let mut frees = Vec::new();
    for e in v {
        let (s, end) = (FileBlock::from(e.block), ext_end(e));
        let (is, ie) = (s.max(a), end.min(b));
        if edit.is_none() || is >= ie {
            pieces.push((s, e.start, end - s, e.unwritten));
            continue;
        }
        if s < is {
            pieces.push((s, e.start, is - s, e.unwritten));
        }
        match edit {
            Some(Edit::Remove) => frees.push((e.start + (is - s), ie - is)),
            Some(Edit::MarkWritten) => pieces.push((is, e.start + (is - s), ie - is, false)),
            None => {}
        }
        if ie < end {
            pieces.push((ie, e.start + (ie - s), end - ie, e.unwritten));
        }
    }
    pieces.extend_from_slice(insert);
    pieces.sort_by_key(|p| p.0);
    let mut out = Vec::with_capacity(pieces.len());
    for (l, p, n, u) in pieces {
        push_run(&mut out, l, p, n, u)?;
    }
    Ok((out, frees))
}

/// Credits one change of a leaf can take besides the bitmaps of the data
/// it frees, in a tree whose root is at `depth`: every node on the path
/// rewritten or freed (its bitmap and descriptor) with its parent, a
/// split or a new level on the way (the new block, its bitmap and
/// descriptor), the root shrinking, the inode (ext4's
/// ext4_ext_calc_credits_for_single_extent, rounded up).
pub fn tree_change_credits(depth: u16) -> usize {
    6 * (usize::from(depth) + 2) + 4
}

/// The end of the part of `[a, b)` whose removal from leaf `v` fits in
/// `budget` credits: a bitmap and a descriptor block per group its data
/// lies in. An extent may be cut at a group boundary; `a` when not even
/// the first group's part fits.
fn bounded_end(vol: &crate::volume::Volume, v: &[Extent], a: FileBlock, b: FileBlock, budget: usize) -> FileBlock {
    let bpg = u64::from(vol.sb.blocks_per_group.max(1));
    let first = u64::from(vol.sb.first_data_block);
    let mut groups: Vec<u64> = Vec::new();
    let mut need = 0;
    for e in v {
        let (s, end) = (FileBlock::from(e.block), ext_end(e));
        let (is, ie) = (s.max(a), end.min(b));
        let mut l = is;
        while l < ie {
            let p = (e.start + (l - s)).get();
            let g = p.saturating_sub(first) / bpg;
            // Logical end of this extent's part in group g.
            let seg_end = ie.min(l + ((g + 1) * bpg + first).saturating_sub(p).max(1));
            if !groups.contains(&g) {
                need += 2;
                if need > budget {
                    return l;
                }
                groups.push(g);
            }
            l = seg_end;
        }
    }
    b
}

/// Applies `edit` to `[from, to)` leaf by leaf. When `bounded`, stops
/// before a step that might not fit in the handle's credits left and
/// says so (false); the tree is consistent after every step.
fn edit_range(tx: &Tx, inode: &mut Inode, from: FileBlock, to: FileBlock, edit: Edit, bounded: bool) -> Result<bool> {
    let ctx = Ctx::new(tx, inode)?;
    // Directory blocks and an EA inode's value blocks are journaled
    // metadata: revoke them when freed.
    let journaled = inode.mode & S_IFMT == S_IFDIR || inode.flags & crate::format::inode::FL_EA_INODE != 0;
    let kind = if journaled { FreeKind::Metadata } else { FreeKind::Data };
    let to = to.min(MAX_LBLK);
    let mut cursor = from;
    while cursor < to {
        let mut path = ctx.find_path(inode, cursor)?;
        let hi = leaf_end(&path);
        let leaf = path.len() - 1;
        let Node::Leaf(v) = &path[leaf].node else {
            return Err(Error::corruption(
                Structure::Extent,
                Location::inode_block(inode.ino, path[leaf].block.get()),
                CorruptKind::WrongType { expected: "extent leaf", found: u64::from(path[leaf].depth) },
            ));
        };
        let (a, mut b) = (cursor, to.min(hi));
        // The first extent ending after `a` (sorted and disjoint).
        let first = v.partition_point(|e| ext_end(e) <= a);
        let touches = v.get(first).is_some_and(|e| FileBlock::from(e.block) < b);
        if touches && bounded {
            let budget = tx.handle.credits_left().saturating_sub(tree_change_credits(path[0].depth) + FINISH_RESERVE);
            b = bounded_end(tx.vol, v, a, b, budget);
            if b == a {
                return Ok(false);
            }
        }
        if touches {
            let goal = v.first().map_or(PhysicalBlock(0), |e| e.start);
            let removed = if ctx.ratio > 1 && edit == Edit::Remove { removed_runs(v, a, b) } else { Vec::new() };
            let (out, frees) = edit_leaf(v, a, b, Some(edit), &[])?;
            path[leaf].node = Node::Leaf(out);
            // The tree first: if it cannot change (no block for a split),
            // the blocks it still maps must stay allocated.
            ctx.settle(inode, &mut path, leaf, goal)?;
            if ctx.ratio > 1 {
                free_clusters(&ctx, inode, &removed, kind)?;
            } else {
                for (p, n) in frees {
                    let left = inode.blocks_less(n * (ctx.bs as u64 / 512))?;
                    tx.free_blocks(p, n, kind)?;
                    inode.blocks_512 = left;
                }
            }
            if b < to.min(hi) {
                // Cut short by the credits the step might have needed:
                // look again with what it really took. A step whose
                // bitmaps, descriptors and nodes the transaction already
                // holds costs nothing; returning here would end a handle
                // that used no credit (which its callers rightly take for
                // a removal that cannot fit in any handle) and make a
                // fragmented file's deletion take a handle per few dozen
                // extents. The next step stops at `b == a` when nothing
                // more fits.
                cursor = b;
                continue;
            }
        }
        if hi <= cursor {
            break;
        }
        cursor = hi;
    }
    Ok(true)
}

/// The mapped runs (logical, physical, length) of leaf `v` inside
/// `[a, b)`: what removing that range unmaps.
fn removed_runs(v: &[Extent], a: FileBlock, b: FileBlock) -> Vec<Run> {
    v.iter()
        .filter_map(|e| {
            let (s, end) = (FileBlock::from(e.block), ext_end(e));
            let (is, ie) = (s.max(a), end.min(b));
            (is < ie).then(|| (is, e.start + (is - s), ie - is))
        })
        .collect()
}

/// With bigalloc: the first block of the physical cluster some block of
/// logical cluster `lc` is mapped into, if any (the kernel's implied
/// cluster: a file's logical cluster lives in one physical cluster, at
/// the same offsets).
fn mapped_cluster(ctx: &Ctx, inode: &Inode, lc: u64) -> Result<Option<PhysicalBlock>> {
    let r = ctx.ratio;
    let (mut l, end) = (FileBlock(lc * r), FileBlock(lc * r + r));
    while l < end {
        let m = super::map_block(ctx.tx.vol, inode, l)?;
        if let super::MapKind::Mapped(p) | super::MapKind::Unwritten(p) = m.kind {
            return Ok(Some(PhysicalBlock(p.get() / r * r)));
        }
        l += m.len.max(1);
    }
    Ok(None)
}

/// With bigalloc: frees the clusters of the unmapped `runs` that no block
/// of the file maps any more (the tree already changed), each once, and
/// takes them off `i_blocks` (the kernel's partial-cluster accounting: a
/// cluster at a run's edge stays while the rest of its logical cluster is
/// mapped).
fn free_clusters(ctx: &Ctx, inode: &mut Inode, runs: &[Run], kind: FreeKind) -> Result<()> {
    let r = ctx.ratio;
    let mut clusters = std::collections::BTreeSet::new();
    for &(l, p, n) in runs {
        let (first, last) = (p.get() / r, (p.get() + n - 1) / r);
        for c in first..=last {
            let whole = (c > first || p.get() % r == 0) && (c < last || (p.get() + n) % r == 0);
            if !whole {
                // The logical cluster of the run's blocks in cluster c.
                let pb = p.get().max(c * r);
                let lc = (l + (pb - p.get())).get() / r;
                if mapped_cluster(ctx, inode, lc)?.is_some() {
                    continue;
                }
            }
            clusters.insert(c);
        }
    }
    // Contiguous clusters are freed together.
    let mut it = clusters.into_iter().peekable();
    while let Some(c) = it.next() {
        let mut k = 1;
        while it.peek() == Some(&(c + k)) {
            it.next();
            k += 1;
        }
        let left = inode.blocks_less(k * ctx.unit_sectors())?;
        ctx.tx.free_blocks(PhysicalBlock(c * r), k * r, kind)?;
        inode.blocks_512 = left;
    }
    Ok(())
}

/// Removes the mappings of logical blocks `[from, to)` (`to` may be
/// `FileBlock(u64::MAX)`: to the end), freeing their blocks, all in this handle: for
/// ranges known to be small. Large ones (truncate, delete) go through
/// [`remove_range_bounded`] in a loop of handles.
pub fn remove_range(tx: &Tx, inode: &mut Inode, from: FileBlock, to: FileBlock) -> Result<()> {
    if !inode.uses_extents() {
        return super::indirect_write::remove_range(tx, inode, from, to, false).map(|_| ());
    }
    edit_range(tx, inode, from, to, Edit::Remove, false).map(|_| ())
}

/// Removes the mappings of `[from, to)` as far as the handle's credits
/// allow: true when the range is empty, false when the caller must go on
/// in a new handle (the inode written first; the tree and the inode are
/// consistent after every step, as ext4_ext_remove_space's restarts).
pub fn remove_range_bounded(tx: &Tx, inode: &mut Inode, from: FileBlock, to: FileBlock) -> Result<bool> {
    if !inode.uses_extents() {
        return super::indirect_write::remove_range(tx, inode, from, to, true);
    }
    edit_range(tx, inode, from, to, Edit::Remove, true)
}

/// Marks the unwritten extents inside `[lblk, lblk + n)` written (the data
/// has reached the device), splitting extents at the range's edges.
pub fn mark_written(tx: &Tx, inode: &mut Inode, lblk: FileBlock, n: u64) -> Result<()> {
    edit_range(tx, inode, lblk, lblk.saturating_add(n), Edit::MarkWritten, false).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(block: u32, len: u16, start: u64, unwritten: bool) -> Extent {
        Extent { block: LogicalBlock(block), len, start: PhysicalBlock(start), unwritten }
    }

    /// `edit_leaf` over the logical range `[a, b)`.
    fn edit(v: &[Extent], a: u64, b: u64, e: Option<Edit>) -> (Vec<Extent>, Vec<FreeRange>) {
        edit_leaf(v, FileBlock(a), FileBlock(b), e, &[]).unwrap()
    }

    #[test]
    fn edit_splits_and_merges() {
        let v = [ext(0, 10, 100, true)];
        let (out, frees) = edit(&v, 3, 5, Some(Edit::MarkWritten));
        assert!(frees.is_empty());
        assert_eq!(out, vec![ext(0, 3, 100, true), ext(3, 2, 103, false), ext(5, 5, 105, true)]);
        let (out, _) = edit(&out, 0, 3, Some(Edit::MarkWritten));
        assert_eq!(out, vec![ext(0, 5, 100, false), ext(5, 5, 105, true)]);
        let (out, frees) = edit(&out, 2, 7, Some(Edit::Remove));
        assert_eq!(frees, vec![(PhysicalBlock(102), 3), (PhysicalBlock(105), 2)]);
        assert_eq!(out, vec![ext(0, 2, 100, false), ext(7, 3, 107, true)]);
        let run = (FileBlock(2), PhysicalBlock(102), 5, false);
        let (out, _) = edit_leaf(&out, FileBlock(0), FileBlock(0), None, &[run]).unwrap();
        assert_eq!(out, vec![ext(0, 7, 100, false), ext(7, 3, 107, true)]);
    }

    #[test]
    fn long_runs_are_cut_at_the_extent_limit() {
        let mut out = Vec::new();
        push_run(&mut out, FileBlock(0), PhysicalBlock(1000), 70000, false).unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].len, 32768);
        let mut out = Vec::new();
        push_run(&mut out, FileBlock(0), PhysicalBlock(1000), 32768, true).unwrap();
        assert_eq!(out.iter().map(|e| e.len).collect::<Vec<_>>(), vec![32767, 1]);
    }

    #[test]
    fn a_run_past_what_an_extent_maps_is_refused() {
        let mut out = Vec::new();
        let r = push_run(&mut out, FileBlock(1 << 32), PhysicalBlock(1000), 1, false);
        assert!(matches!(r, Err(Error::FileTooBig(_))), "{r:?}");
        assert!(out.is_empty());
    }
}
