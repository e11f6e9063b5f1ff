//! The inode layer: reading inodes from the inode tables and mapping a
//! file's logical blocks to physical blocks (extent trees, or the block
//! maps of ext2/ext3-style files); changing extent trees is
//! [`extent_write`]'s, changing block maps [`indirect_write`]'s.
//!
//! Logical positions cross this layer's interfaces as [`FileBlock`]s
//! (64-bit: a hole past the format's 2^32 limit runs to `u64::MAX`) and
//! physical ones as [`PhysicalBlock`]s; see [`crate::format::block_number`]
//! for why the logical type is wider than the one extents store.

mod extent_tree;
pub mod extent_write;
mod indirect;
pub mod indirect_write;
pub mod inline;
pub mod map_write;

pub(crate) use extent_tree::parsed_node as parsed_extent_node;
pub(crate) use extent_tree::seed_parsed as seed_parsed_extent_node;
pub(crate) use extent_tree::verify_cached as verify_extent_block;

use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::{FileBlock, PhysicalBlock};
use crate::format::inode::Inode;
use crate::volume::Volume;

/// What a run of logical blocks maps to, in the [`Mapping`]s
/// [`FsCore::extents`](crate::FsCore::extents) returns: match on it to
/// tell data from holes and preallocated (unwritten) space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapKind {
    /// Written data at the physical block.
    Mapped(PhysicalBlock),
    /// Allocated but unwritten (reads as zeros) at the physical block.
    Unwritten(PhysicalBlock),
    /// Not allocated (reads as zeros).
    Hole,
}

/// A run of `len` logical blocks starting at `lblk` with one kind, as
/// [`FsCore::extents`](crate::FsCore::extents) lists a file's block map
/// (in blocks; [`FsCore::fiemap`](crate::FsCore::fiemap) gives bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    /// First logical block.
    pub lblk: FileBlock,
    /// Number of blocks in the run (at least 1).
    pub len: u64,
    /// Where they are.
    pub kind: MapKind,
}

impl Mapping {
    /// The logical block just past the run (saturating: a hole past the
    /// format's limit runs to `u64::MAX`).
    pub fn end(&self) -> FileBlock {
        self.lblk.saturating_add(self.len)
    }
}

/// Largest logical block number + 1 an ext4 file can address.
pub const MAX_LBLK: FileBlock = FileBlock(1 << 32);

/// Reads inode `ino` from its inode table.
pub fn read_inode(vol: &Volume, ino: u32) -> Result<Inode> {
    let sb = &vol.sb;
    if ino == 0 || ino > sb.inodes_count {
        return Err(Error::BadInode(u64::from(ino)));
    }
    let idx = ino - 1;
    let group = (idx / sb.inodes_per_group) as usize;
    let within = u64::from(idx % sb.inodes_per_group) * u64::from(sb.inode_size);
    let gd = vol.groups.get(group).ok_or(Error::BadInode(u64::from(ino)))?;
    let bs = vol.block_size as u64;
    let block = gd.inode_table + within / bs;
    let off = (within % bs) as usize;
    let buf = vol.block(block)?;
    let raw = buf.data().get(off..off + usize::from(sb.inode_size)).ok_or_else(|| {
        Error::corruption(
            Structure::Inode,
            Location::InodeBlock { ino, block },
            CorruptKind::CrossesEnd { what: "inode record" },
        )
    })?;
    // Its record's checksum is computed once per cached version of the
    // table block (see `Buffer::is_verified`), not at each of the dozen
    // reads one create makes of its inode and its directory's.
    let slot = off / usize::from(sb.inode_size);
    if buf.slot_verified(slot) {
        return Inode::parse_verified(sb, ino, raw, block);
    }
    let i = Inode::parse(sb, ino, raw, block)?;
    buf.set_slot_verified(slot);
    Ok(i)
}

/// Maps logical block `lblk` of `inode`: returns the run that starts at
/// `lblk` (possibly a hole) and extends as far as one lookup can tell.
pub fn map_block(vol: &Volume, inode: &Inode, lblk: FileBlock) -> Result<Mapping> {
    if lblk >= MAX_LBLK {
        // Nothing is addressable past the format's limit: one hole to the
        // end, so a walk over a corrupt, huge i_size ends in one step.
        return Ok(Mapping { lblk, len: u64::MAX - lblk.get(), kind: MapKind::Hole });
    }
    if inode.has_inline_data() {
        // `i_block` holds data, not a map: reading it as one could free or
        // overwrite blocks that belong to others. Callers handle inline
        // inodes before they map anything (see [`inline`]).
        return Err(Error::Invalid(format!("inode {} keeps its data inline: it has no block map", inode.ino)));
    }
    if inode.uses_extents() {
        extent_tree::map(vol, inode, lblk)
    } else {
        indirect::map(vol, inode, lblk)
    }
}

/// Every mapped run of the file in logical order (used by `stat`-like
/// reporting and tests). Holes are omitted.
pub fn extents(vol: &Volume, inode: &Inode) -> Result<Vec<Mapping>> {
    let bs = vol.block_size as u64;
    let end = FileBlock(inode.size.div_ceil(bs)).min(MAX_LBLK);
    let mut out = Vec::new();
    let mut lblk = FileBlock(0);
    while lblk < end {
        let m = map_block(vol, inode, lblk)?;
        if m.kind != MapKind::Hole {
            out.push(m);
        }
        lblk = m.lblk.saturating_add(m.len.max(1));
    }
    Ok(out)
}
