//! Growing a directory: a new block mapped at its end (within the size
//! limit, with or without large_dir) and written as an empty leaf.

use super::leaf::Ctx;
use crate::alloc::flags as aflags;
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::FileBlock;
use crate::format::features::incompat;
use crate::format::inode::Inode;
use crate::inode::MAX_LBLK;

/// Maps a new block at the end of the directory, writes it as an empty
/// leaf and grows `dir.size`; returns (logical, physical) block.
pub(super) fn append_block(ctx: &Ctx, dir: &mut Inode) -> Result<(u32, u64)> {
    let bs = ctx.bs as u64;
    let lblk = FileBlock::of_byte(dir.size, bs);
    let largedir = ctx.vol().sb.features.has_incompat(incompat::LARGEDIR);
    let limit = if largedir { MAX_LBLK } else { FileBlock((1u64 << 32) / bs) };
    if lblk + 1 >= limit.min(MAX_LBLK) {
        return Err(Error::NoSpace(format!("directory {} has reached its maximum size", dir.ino)));
    }
    let pblk = grow(ctx, dir, lblk)?;
    let empty = ctx.build_leaf([])?;
    ctx.put_new(pblk, &empty)?;
    dir.size += bs;
    Ok((lblk.get() as u32, pblk))
}

/// Allocates and maps logical block `lblk` of the directory (a metadata
/// block, near the directory's other blocks; the extent tree grows as
/// needed, or the block map of a directory without extents).
fn grow(ctx: &Ctx, dir: &mut Inode, lblk: FileBlock) -> Result<u64> {
    let size = dir.size + ctx.bs as u64;
    let runs = crate::inode::extent_write::allocate_range(ctx.tx, dir, lblk, 1, false, aflags::METADATA, size)?;
    match runs.as_slice() {
        [(_, pblk, 1)] => Ok(pblk.get()),
        _ => {
            Err(Error::corruption(Structure::Extent, Location::Inode(dir.ino), CorruptKind::Overlap { at: lblk.get() }))
        }
    }
}
