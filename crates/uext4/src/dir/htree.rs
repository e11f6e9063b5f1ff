//! Hash-indexed lookup and hash-order listing, and the index walk that
//! insertions in [`super::write`] share: reading and checking the root
//! ([`read_root`]) and stepping to the next leaf in hash order
//! ([`next_leaf`]).
//!
//! The walk reads exactly `indirect_levels + 1` index blocks on the way
//! down (the level count is checked against the kernel's limits), so a
//! corrupt index that points back at itself cannot loop: it is parsed as
//! the wrong kind of block and rejected.

use super::block::{self, DirBlock};
use super::leaf::{self, Leaf, Order, Slot};
use super::{DirEntryRef, NameKey};
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::FileBlock;
use crate::format::dir_hash::HashVersion;
use crate::format::dx::{self, DxNode, DxRootInfo};
use crate::format::features::incompat;
use crate::format::inode::{FileType, Inode};
use crate::format::superblock::FLAG_UNSIGNED_HASH;
use crate::volume::Volume;
use std::sync::Arc;

/// The path through an index: each level's node (parsed, cached beside
/// its block) and the position taken, root first.
pub(super) type Path = Vec<(Arc<DxNode>, usize)>;

/// The index of one directory, walked down to a leaf.
struct Walk {
    /// Each level's entries and the position taken, root first.
    path: Path,
    /// The leaf block reached.
    leaf: u32,
    version: HashVersion,
    csum: bool,
    nblocks: u64,
}

impl Walk {
    /// Walks from the root to the leaf whose hash range holds the hash
    /// that `hash` computes with the index's hash version.
    fn down(vol: &Volume, dir: &Inode, hash: impl FnOnce(HashVersion) -> u32) -> Result<Walk> {
        let csum = vol.has_csum();
        let nblocks = dir.size.div_ceil(vol.block_size as u64);
        let Root { block: root, info, version } = read_root(vol, dir)?;
        let hash = hash(version);

        // Descend, remembering each level's entries and position so that
        // a walk can continue to the next leaf in hash order.
        let mut path: Path = Vec::new();
        let mut node = root.dx_node(vol, true, csum)?;
        let mut node_block = root.block;
        let leaf = loop {
            let pos = node.entries.partition_point(|e| e.hash <= hash).max(1) - 1;
            let child = node.entries[pos].block;
            if u64::from(child) >= nblocks || child == 0 {
                return Err(bad_child(dir, node_block, child, nblocks));
            }
            path.push((node, pos));
            if path.len() > usize::from(info.indirect_levels) {
                break child;
            }
            let b = block::read(vol, dir, FileBlock::from(child), true)?.map_err(|_| hole(dir, u64::from(child)))?;
            if !b.is_dx {
                let kind = CorruptKind::WrongType { expected: "htree index node", found: 0 };
                return Err(bad_dx(Location::inode_block(dir.ino, b.block), kind));
            }
            node = b.dx_node(vol, false, csum)?;
            node_block = b.block;
        };
        Ok(Walk { path, leaf, version, csum, nblocks })
    }

    /// Moves to the next leaf in hash order; returns the hash it starts
    /// with (its low bit set if it continues a collision), or `None` at
    /// the end of the index.
    fn next(&mut self, vol: &Volume, dir: &Inode) -> Result<Option<u32>> {
        Ok(next_leaf(vol, dir, &mut self.path, self.csum, self.nblocks)?.map(|(hash, block)| {
            self.leaf = block;
            hash
        }))
    }
}

/// Looks `name` up through the index.
pub(super) fn lookup(vol: &Volume, dir: &Inode, name: &NameKey<'_>) -> Result<Option<(u32, Option<FileType>)>> {
    let ft = vol.sb.features.has_incompat(incompat::FILETYPE);
    let mut hash = 0;
    let mut walk = Walk::down(vol, dir, |v| {
        hash = name.hash(vol, dir, v).major;
        hash
    })?;
    loop {
        if let Ok(b) = block::read(vol, dir, FileBlock::from(walk.leaf), true)? {
            if let Some(found) = b.find(ft, name)? {
                return Ok(Some(found));
            }
        }
        // Continue into the next leaf only if it starts with the same hash
        // (marked by the low "collision" bit).
        match walk.next(vol, dir)? {
            Some(next_hash) if next_hash & !1 == hash => {}
            _ => return Ok(None),
        }
    }
}

/// Set in every hash-order readdir cookie, so that a cookie tells which
/// kind it is (byte positions of linear listings never reach it). Cookies
/// stay below 2^63: the kernel keeps directory positions in a signed
/// `loff_t`, and lseek(2) (seekdir) refuses negative ones.
pub const COOKIE_TAG: u64 = 1 << 62;

/// Set (without [`COOKIE_TAG`]) in the byte-position cookies of a
/// hash-indexed directory listed in block order because its index is
/// unusable, so that they are told apart from positions a caller seeks
/// to, which are hash positions there (as the kernel's `pos2maj_hash`).
/// Directory files never reach 2^61 bytes.
pub const LINEAR_TAG: u64 = 1 << 61;

/// Bits of a position that hold the minor hash (its top 30 bits).
const MINOR_BITS: u32 = 30;

/// The hash position of an entry, as the kernel's hash2pos: the major
/// hash (whose low bit is always clear) above the minor hash. Both are
/// shortened by their low bits so that a position fits in 61 bits and
/// the position after the largest one is still below [`COOKIE_TAG`].
/// Positions only ever name a hash, never a place in a block or an
/// ordinal among equals, so removing an entry cannot shift another's.
pub(super) fn pos_of(major: u32, minor: u32) -> u64 {
    (u64::from(major >> 1) << MINOR_BITS) | u64::from(minor >> 2)
}

/// The index of the first entry of `leaf` at hash position `pos` or
/// later (hash order). Here rather than on [`Leaf`]: positions are the
/// index's notion, and leaf.rs stays below htree.rs.
fn first_at_pos(leaf: &Leaf, pos: u64) -> usize {
    leaf.slots.partition_point(|s| pos_of(s.major, s.minor) < pos)
}

/// The cookie that resumes a listing at position `pos`.
fn cookie_at(pos: u64) -> u64 {
    COOKIE_TAG | pos
}

/// The position a hash cookie resumes at.
fn position(cookie: u64) -> u64 {
    cookie & (COOKIE_TAG - 1)
}

/// The major hash of position `pos`.
fn major_of(pos: u64) -> u32 {
    ((pos >> MINOR_BITS) as u32) << 1
}

/// What a hash-order listing gathered: the first entries at or after its
/// start position, in hash order, from the leaves they are in, and the
/// position up to which they are all the entries there are.
pub(super) struct Gathered {
    /// The leaves read, each with its block (whose bytes hold the names).
    leaves: Vec<(DirBlock, Arc<Leaf>)>,
    /// Up to `max + 1` entries (the one after the last listed names its
    /// cookie), each with the index of its leaf in `leaves`, in hash order.
    found: Vec<(Slot, usize)>,
    /// The position the listing started at.
    start: u64,
    /// Every entry at a position in `start..limit` is in `found` (or
    /// comes after the `max + 1` of them found).
    limit: u64,
}

impl Gathered {
    fn new(start: u64) -> Gathered {
        Gathered { leaves: Vec::new(), found: Vec::new(), start, limit: u64::MAX }
    }

    /// Takes the entries of `leaf` (read from `block`) at `start` or
    /// later, keeping the first `keep` entries in hash order. Leaves come
    /// in index order, so entries are appended in order but for a leaf
    /// that continues a hash collision (its entries may sort among the
    /// previous leaf's).
    fn add(&mut self, block: DirBlock, leaf: Arc<Leaf>, keep: usize) {
        let i = self.leaves.len();
        let first = first_at_pos(&leaf, self.start);
        let end = leaf.slots.len().min(first.saturating_add(keep));
        let new = &leaf.slots[first..end];
        let in_order = match (self.found.last(), new.first()) {
            (Some((a, ai)), Some(b)) => {
                let (ad, bd) = (self.leaves[*ai].0.buf.data(), block.buf.data());
                (a.major, a.minor, a.name(ad)) <= (b.major, b.minor, b.name(bd))
            }
            _ => true,
        };
        self.found.extend(new.iter().map(|s| (*s, i)));
        self.leaves.push((block, leaf));
        if !in_order {
            let leaves = &self.leaves;
            let key = |&(s, l): &(Slot, usize)| (s.major, s.minor, s.name(leaves[l].0.buf.data()));
            self.found.sort_by(|a, b| key(a).cmp(&key(b)));
        }
        self.found.truncate(keep);
    }

    /// How many entries found lie below major hash `below`.
    fn below(&self, below: u32) -> usize {
        self.found.partition_point(|(s, _)| s.major < below)
    }

    /// Lists up to `max` of the entries found, in hash order.
    ///
    /// As the kernel's ext4_dx_readdir, an entry's `next_cookie` is the
    /// position of the entry after it, so a listing resumes with every
    /// entry that hashes there: entries sharing a position are listed
    /// again rather than skipped (the kernel keeps per-open-file state to
    /// avoid even that; FUSE cookies carry none). Only when more than
    /// `max` entries share one position (61 bits of hash alike) does a
    /// listing skip the rest of them, rather than return the same batch
    /// forever.
    pub(super) fn emit(&self, max: usize, f: &mut dyn FnMut(DirEntryRef<'_>)) {
        emit(&self.found, self.start, self.limit, max, &|l| self.leaves[l].0.buf.data(), f);
    }
}

/// [`Gathered::emit`] of `found` (entries in hash order, each with the
/// index of its block, whose bytes `data` gives), listed from position
/// `from`, every entry below `limit` being there.
fn emit<'d>(
    found: &[(Slot, usize)],
    from: u64,
    limit: u64,
    max: usize,
    data: &dyn Fn(usize) -> &'d [u8],
    f: &mut dyn FnMut(DirEntryRef<'_>),
) {
    let found = &found[..found.partition_point(|(s, _)| pos_of(s.major, s.minor) < limit)];
    let n = found.len().min(max);
    for (i, (s, l)) in found.iter().take(n).enumerate() {
        let pos = pos_of(s.major, s.minor);
        let mut next = match found.get(i + 1) {
            Some((t, _)) => pos_of(t.major, t.minor),
            None if limit == u64::MAX => pos + 1,
            None => limit,
        };
        if i + 1 == n && next == from {
            next = from + 1;
        }
        f(DirEntryRef {
            ino: s.ino,
            name: s.name(data(*l)),
            file_type: FileType::from_dirent(s.ft),
            next_cookie: cookie_at(next),
        });
    }
}

/// The hash order of `dir`'s entries with `version` (the dots left out
/// when `dots`).
fn hash_order(vol: &Volume, dir: &Inode, version: HashVersion, dots: bool) -> Order {
    Order::Hash { version, casefold: super::is_casefolded(vol, dir), dots }
}

/// Gathers a one-block directory that has no index in hash order (as the
/// kernel lists it on dir_index filesystems, see `is_dx_dir`), so that its
/// cookies stay valid when it becomes an htree. The dots are the caller's.
pub(super) fn gather_block(vol: &Volume, dir: &Inode, version: HashVersion, from: u64, max: usize) -> Result<Gathered> {
    let mut g = Gathered::new(position(from));
    if let Ok(b) = block::read(vol, dir, FileBlock(0), false)? {
        let leaf = leaf::entries(vol, dir, &b, hash_order(vol, dir, version, true))?;
        g.add(b, leaf, max.saturating_add(1));
    }
    Ok(g)
}

/// Gathers up to `max` entries of a hash-indexed directory in hash order,
/// from hash cookie `from` (see [`cookie_at`]; "." and ".." are the
/// caller's), to list with [`Gathered::emit`].
///
/// Each entry's `next_cookie` names the entry after it by hash, not by
/// place: entries that move to another leaf when a leaf splits keep their
/// place in the listing (see [`Gathered::emit`] for entries sharing a
/// hash). A call reads the leaves that hold its entries, each listed in
/// hash order once per version of the block ([`leaf::entries`]), and
/// costs a search plus the entries it returns.
pub(super) fn gather(vol: &Volume, dir: &Inode, from: u64, max: usize) -> Result<Gathered> {
    let start = position(from);
    let mut walk = Walk::down(vol, dir, |_| major_of(start))?;
    let order = hash_order(vol, dir, walk.version, false);
    let keep = max.saturating_add(1);
    // Entries with a major hash at least `start`, gathered leaf by leaf
    // until `max` of them lie below the next leaf's first hash (entries of
    // later leaves all hash at or above it).
    let mut g = Gathered::new(start);
    g.limit = loop {
        if let Ok(b) = block::read(vol, dir, FileBlock::from(walk.leaf), true)? {
            let leaf = leaf::entries(vol, dir, &b, order)?;
            g.add(b, leaf, keep);
        }
        match walk.next(vol, dir)? {
            None => break u64::MAX,
            Some(next) => {
                let below = next & !1;
                if g.below(below) >= max {
                    break pos_of(below, 0);
                }
            }
        }
    };
    Ok(g)
}

/// A corrupt-index error of kind `kind` at `at`.
pub(super) fn bad_dx(at: Location, kind: CorruptKind) -> Error {
    Error::corruption(Structure::DxNode, at, kind)
}

/// An index entry of `dir` (in physical block `block`, 0 if unknown)
/// points at `child`, which is the root (block 0) or past the directory's
/// `nblocks` blocks.
pub(super) fn bad_child(dir: &Inode, block: u64, child: u32, nblocks: u64) -> Error {
    let kind = CorruptKind::OutsideRange { what: "dx entry block", value: u64::from(child), start: 1, end: nblocks };
    bad_dx(Location::inode_block(dir.ino, block), kind)
}

/// Logical block `lblk` of `dir`, which its index needs, is a hole.
pub(super) fn hole(dir: &Inode, lblk: u64) -> Error {
    bad_dx(Location::FileBlock { ino: dir.ino, lblk }, CorruptKind::Hole { lblk })
}

/// The hash version a directory with on-disk version `raw` uses (the
/// unsigned variant when the superblock says the hash is unsigned), or
/// `None` for a version this engine does not know.
pub(super) fn hash_version(vol: &Volume, raw: u8) -> Option<HashVersion> {
    let v = HashVersion::from_disk(raw)?;
    Some(if vol.sb.flags & FLAG_UNSIGNED_HASH != 0 { v.to_unsigned() } else { v })
}

/// Most index levels (root included) the filesystem allows: the kernel's
/// limit of two, three with large_dir.
pub(super) fn max_levels(vol: &Volume) -> usize {
    if vol.sb.features.has_incompat(incompat::LARGEDIR) {
        3
    } else {
        2
    }
}

/// A directory's index root, read and checked: where every walk starts.
pub(super) struct Root {
    /// The root block (logical block 0).
    pub block: DirBlock,
    /// Its header: hash version and depth, within [`max_levels`].
    pub info: DxRootInfo,
    /// The hash function the index orders its entries by.
    pub version: HashVersion,
}

/// Reads directory `dir`'s index root and checks its depth and hash
/// version.
pub(super) fn read_root(vol: &Volume, dir: &Inode) -> Result<Root> {
    let root = block::read(vol, dir, FileBlock(0), true)?.map_err(|_| hole(dir, 0))?;
    let info = dx::parse_root_info(root.buf.data(), root.block)?;
    let at = Location::inode_block(dir.ino, root.block);
    let max = max_levels(vol);
    if usize::from(info.indirect_levels) >= max {
        let kind = CorruptKind::TooDeep { what: "htree", depth: u64::from(info.indirect_levels), max: max as u64 - 1 };
        return Err(bad_dx(at, kind));
    }
    let version = hash_version(vol, info.hash_version).ok_or_else(|| {
        bad_dx(at, CorruptKind::OutOfRange { field: "hash_version", value: u64::from(info.hash_version) })
    })?;
    Ok(Root { block: root, info, version })
}

/// Advances `path` (each index level's entries and the position taken,
/// root first) to the next leaf in hash order; returns the hash that leaf
/// starts with (its low bit set if it continues a collision) and its
/// logical block, or `None` at the end of the index. Index blocks are
/// checked against `nblocks`, the directory's length in blocks.
pub(super) fn next_leaf(
    vol: &Volume,
    dir: &Inode,
    path: &mut Path,
    csum: bool,
    nblocks: u64,
) -> Result<Option<(u32, u32)>> {
    // Find the deepest level that has a next entry.
    let mut level = path.len();
    loop {
        if level == 0 {
            return Ok(None);
        }
        level -= 1;
        let (node, pos) = &mut path[level];
        if *pos + 1 < node.entries.len() {
            *pos += 1;
            break;
        }
    }
    let start_hash = path[level].0.entries[path[level].1].hash;
    // Walk down the first entries back to leaf depth.
    let depth = path.len();
    path.truncate(level + 1);
    while path.len() < depth {
        let (node, pos) = &path[path.len() - 1];
        let child = node.entries[*pos].block;
        // Block 0 is the root: an index pointing back at it is corrupt.
        if child == 0 || u64::from(child) >= nblocks {
            return Err(bad_child(dir, 0, child, nblocks));
        }
        let b = block::read(vol, dir, FileBlock::from(child), true)?.map_err(|_| hole(dir, u64::from(child)))?;
        path.push((b.dx_node(vol, false, csum)?, 0));
    }
    let (node, pos) = &path[path.len() - 1];
    Ok(Some((start_hash, node.entries[*pos].block)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_round_trip_and_stay_positive() {
        for (major, minor) in [(0, 0), (2, 5), (0x8000_0000, 1), (0xffff_fffc, 0x7fff_fffe), (0xffff_fffe, !0)] {
            let p = pos_of(major, minor);
            for c in [cookie_at(p), cookie_at(p + 1)] {
                assert!(c & COOKIE_TAG != 0 && c < 1 << 63, "{c:#x}");
            }
            assert_eq!(position(cookie_at(p)), p);
            assert_eq!(major_of(p), major);
        }
        // Hash order is cookie order.
        assert!(cookie_at(pos_of(4, !0)) < cookie_at(pos_of(6, 0)));
        assert!(cookie_at(pos_of(6, 4)) < cookie_at(pos_of(6, 8)));
    }

    /// Slots for one-letter names at `at` (major, minor) in a fake block
    /// that holds each letter at offset 8 past its slot's offset.
    fn slots(at: &[(u32, u32, u8)]) -> (Vec<u8>, Vec<(Slot, usize)>) {
        let mut data = Vec::new();
        let mut found = Vec::new();
        for &(major, minor, name) in at {
            let off = data.len() as u32;
            data.extend_from_slice(&[0; 8]);
            data.push(name);
            let s = Slot { major, minor, ino: 12, off, next: off + 12, name_len: 1, ft: 0 };
            found.push((s, 0));
        }
        (data, found)
    }

    fn list(found: &(Vec<u8>, Vec<(Slot, usize)>), from: u64, limit: u64, max: usize) -> Vec<(u8, u64)> {
        let mut out = Vec::new();
        emit(&found.1, from, limit, max, &|_| &found.0, &mut |e| out.push((e.name[0], e.next_cookie)));
        out
    }

    #[test]
    fn emit_resumes_at_the_next_hash_and_always_progresses() {
        let found = slots(&[(4, 0, b'a'), (4, 8, b'b'), (4, 8, b'c'), (6, 0, b'd')]);
        let all = list(&found, 0, u64::MAX, 10);
        let names: Vec<u8> = all.iter().map(|e| e.0).collect();
        assert_eq!(names, b"abcd");
        // After "b" comes "c" at the same position: resuming there lists
        // "b" again (a duplicate, never a skip).
        assert_eq!(position(all[1].1), pos_of(4, 8));
        let rest = |from| {
            let i = found.1.partition_point(|(s, _)| pos_of(s.major, s.minor) < from);
            (found.0.clone(), found.1[i..].to_vec())
        };
        let again = list(&rest(position(all[1].1)), position(all[1].1), u64::MAX, 10);
        assert_eq!(again.len(), 3);
        // One at a time through the equal pair still ends.
        let mut from = 0;
        let mut seen = 0;
        loop {
            let b = list(&rest(from), from, u64::MAX, 1);
            let Some(e) = b.last() else { break };
            assert!(position(e.1) > from || seen == 0);
            from = position(e.1);
            seen += 1;
            assert!(seen < 10);
        }
        // A limit: the last entry below it resumes at the limit.
        let part = list(&found, 0, pos_of(6, 0), 10);
        assert_eq!(part.len(), 3);
        assert_eq!(position(part[2].1), pos_of(6, 0));
    }
}
