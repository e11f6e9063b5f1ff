//! Hash-indexed lookup and hash-order listing.
//!
//! The walk reads exactly `indirect_levels + 1` index blocks on the way
//! down (the level count is checked against the kernel's limits), so a
//! corrupt index that points back at itself cannot loop: it is parsed as
//! the wrong kind of block and rejected.

use super::block;
use super::DirEntry;
use crate::error::{Error, Result, Structure};
use crate::format::dir_hash::{dx_hash, HashVersion};
use crate::format::dx::{self, DxEntry};
use crate::format::features::incompat;
use crate::format::inode::{FileType, Inode};
use crate::format::superblock::FLAG_UNSIGNED_HASH;
use crate::volume::Volume;

/// The index of one directory, walked down to a leaf.
struct Walk {
    /// Each level's entries and the position taken, root first.
    path: Vec<(Vec<DxEntry>, usize)>,
    /// The leaf block reached.
    leaf: u32,
    version: HashVersion,
    csum: bool,
    nblocks: u64,
}

impl Walk {
    /// Walks from the root to the leaf whose hash range holds `hash`
    /// (with `hash = None`, only reads the root's hash version).
    fn down(vol: &Volume, dir: &Inode, hash: impl FnOnce(HashVersion) -> u32) -> Result<Walk> {
        let bad = |block: u64, d: String| Error::corrupt(Structure::DxNode, block, d);
        let csum = vol.has_csum();
        let nblocks = dir.size.div_ceil(vol.block_size as u64);
        let root = block::read(vol, dir, 0, true)?.map_err(|_| bad(0, "htree root is a hole".into()))?;
        let info = dx::parse_root_info(root.buf.data(), root.block)?;
        let max_levels = if vol.sb.features.has_incompat(incompat::LARGEDIR) { 3 } else { 2 };
        if info.indirect_levels >= max_levels {
            return Err(bad(root.block, format!("{} index levels", info.indirect_levels)));
        }
        let mut version = HashVersion::from_disk(info.hash_version)
            .ok_or_else(|| bad(root.block, format!("unsupported hash version {}", info.hash_version)))?;
        if vol.sb.flags & FLAG_UNSIGNED_HASH != 0 {
            version = version.to_unsigned();
        }
        let hash = hash(version);

        // Descend, remembering each level's entries and position so that
        // a walk can continue to the next leaf in hash order.
        let mut path: Vec<(Vec<DxEntry>, usize)> = Vec::new();
        let mut node = dx::parse_node(root.buf.data(), true, csum, root.block)?;
        let mut node_block = root.block;
        let leaf = loop {
            let pos = node.entries.partition_point(|e| e.hash <= hash).max(1) - 1;
            let child = node.entries[pos].block;
            if u64::from(child) >= nblocks || child == 0 {
                return Err(bad(node_block, format!("index points at block {child} of {nblocks}")));
            }
            path.push((node.entries, pos));
            if path.len() > usize::from(info.indirect_levels) {
                break child;
            }
            let b = block::read(vol, dir, u64::from(child), true)?
                .map_err(|_| bad(node_block, format!("index block {child} is a hole")))?;
            if !b.is_dx {
                return Err(bad(b.block, "expected an index node".into()));
            }
            node = dx::parse_node(b.buf.data(), false, csum, b.block)?;
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
pub fn lookup(vol: &Volume, dir: &Inode, name: &[u8]) -> Result<Option<(u32, Option<FileType>)>> {
    let ft = vol.sb.features.has_incompat(incompat::FILETYPE);
    let mut hash = 0;
    let mut walk = Walk::down(vol, dir, |v| {
        hash = dx_hash(name, v, &vol.sb.hash_seed).major;
        hash
    })?;
    loop {
        if let Ok(b) = block::read(vol, dir, u64::from(walk.leaf), true)? {
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

/// Bits of a cookie that hold the ordinal.
const ORDINAL_BITS: u32 = 31;

/// The cookie of hash position (`major`, `ordinal`): the `ordinal`-th
/// entry, in (minor hash, name) order, of those whose major hash is
/// `major`. The low bit of a major hash is always clear, so its 31 bits
/// above it go in bits 31-61, beside a 31-bit ordinal; the largest major
/// hash is 0xfffffffc, so `major + 2` still fits.
fn cookie(major: u32, ordinal: u32) -> u64 {
    COOKIE_TAG | (u64::from(major >> 1) << ORDINAL_BITS) | u64::from(ordinal.min((1 << ORDINAL_BITS) - 1))
}

/// The (major hash, ordinal) of a hash cookie.
fn position(cookie: u64) -> (u32, u32) {
    let major = ((cookie >> ORDINAL_BITS) as u32 & 0x7fff_ffff) << 1;
    (major, (cookie & ((1 << ORDINAL_BITS) - 1)) as u32)
}

/// Reads up to `max` entries of a hash-indexed directory in hash order,
/// from hash cookie `from` (see [`cookie`]; "." and ".." are the caller's).
///
/// Each entry's `next_cookie` names the entry after it by hash, not by
/// place: entries that move to another leaf when a leaf splits keep their
/// place in the listing. Entries sharing a major hash are told apart by
/// their ordinal in (minor hash, name) order, so a listing never stops
/// inside such a group without a way to resume after the right member
/// (the kernel keeps that state per open file instead; FUSE has none).
pub fn readdir(vol: &Volume, dir: &Inode, from: u64, max: usize) -> Result<Vec<DirEntry>> {
    let ft = vol.sb.features.has_incompat(incompat::FILETYPE);
    let (start, skip) = position(from);
    let mut walk = Walk::down(vol, dir, |_| start)?;
    // Entries with a major hash at least `start`, gathered leaf by leaf
    // until `max` of them lie below the next leaf's first hash (entries of
    // later leaves all hash at or above it).
    let mut found: Vec<(u32, u32, DirEntry)> = Vec::new();
    let limit = loop {
        if let Ok(b) = block::read(vol, dir, u64::from(walk.leaf), true)? {
            for e in b.entries(ft)? {
                if e.inode == 0 {
                    continue;
                }
                let h = dx_hash(e.name, walk.version, &vol.sb.hash_seed);
                if h.major >= start {
                    found.push((h.major, h.minor, super::entry(vol, &e, b.block, 0)?));
                }
            }
        }
        match walk.next(vol, dir)? {
            None => break u64::MAX,
            Some(next) => {
                let below = u64::from(next & !1);
                if found.len() >= max && found.iter().filter(|f| u64::from(f.0) < below).count() >= max {
                    break below;
                }
            }
        }
    };
    found.retain(|f| u64::from(f.0) < limit);
    found.sort_by(|a, b| (a.0, a.1, &a.2.name).cmp(&(b.0, b.1, &b.2.name)));
    let majors: Vec<u32> = found.iter().map(|f| f.0).collect();
    let mut out = Vec::new();
    let mut ordinal = 0u32;
    for (i, (major, _, mut e)) in found.into_iter().enumerate() {
        ordinal = if i > 0 && majors[i - 1] == major { ordinal.saturating_add(1) } else { 0 };
        if major == start && ordinal < skip {
            continue;
        }
        if out.len() >= max {
            break;
        }
        let last_of_group = majors.get(i + 1).is_none_or(|&n| n != major);
        e.next_cookie = if last_of_group { cookie(major + 2, 0) } else { cookie(major, ordinal + 1) };
        out.push(e);
    }
    Ok(out)
}

/// Advances `path` to the next leaf in hash order; returns the hash that
/// leaf starts with and its block, or `None` at the end of the index.
fn next_leaf(
    vol: &Volume,
    dir: &Inode,
    path: &mut Vec<(Vec<DxEntry>, usize)>,
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
        let (entries, pos) = &mut path[level];
        if *pos + 1 < entries.len() {
            *pos += 1;
            break;
        }
    }
    let start_hash = path[level].0[path[level].1].hash;
    // Walk down the first entries back to leaf depth.
    let depth = path.len();
    path.truncate(level + 1);
    while path.len() < depth {
        let (entries, pos) = &path[path.len() - 1];
        let child = entries[*pos].block;
        if u64::from(child) >= nblocks {
            return Err(Error::corrupt(Structure::DxNode, 0, format!("index points at block {child}")));
        }
        let b = block::read(vol, dir, u64::from(child), true)?
            .map_err(|_| Error::corrupt(Structure::DxNode, 0, "index block is a hole"))?;
        let node = dx::parse_node(b.buf.data(), false, csum, b.block)?;
        path.push((node.entries, 0));
    }
    let (entries, pos) = &path[path.len() - 1];
    Ok(Some((start_hash, entries[*pos].block)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_round_trip_and_stay_positive() {
        for (major, ordinal) in [(0, 0), (2, 5), (0x8000_0000, 1), (0xffff_fffc, 0x7fff_fffe), (0xffff_fffe, 0)] {
            let c = cookie(major, ordinal);
            assert!(c & COOKIE_TAG != 0 && c < 1 << 63, "{c:#x}");
            assert_eq!(position(c), (major, ordinal));
        }
        // Hash order is cookie order.
        assert!(cookie(4, 0x7fff_ffff) < cookie(6, 0));
        assert!(cookie(0xffff_fffc, 0) < cookie(0xffff_fffc + 2, 0));
    }
}
