//! Block maps of files without extents (ext2/ext3 style): 12 direct
//! pointers, then single, double and triple indirect blocks.

use super::{MapKind, Mapping};
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::{FileBlock, PhysicalBlock};
use crate::format::bytes::le32;
use crate::format::inode::Inode;
use crate::volume::Volume;

const DIRECT: u64 = 12;

/// Maps `lblk`; see [`super::map_block`].
pub fn map(vol: &Volume, inode: &Inode, lblk: FileBlock) -> Result<Mapping> {
    let lblk_n = lblk.get();
    let per = vol.block_size as u64 / 4;
    let root = |i: usize| u64::from(le32(&inode.block, i * 4));
    // Find which tree holds lblk, its root pointer, depth and offset within.
    let (ptr, depth, mut rel) = if lblk_n < DIRECT {
        (root(lblk_n as usize), 0u32, 0u64)
    } else {
        let mut rel = lblk_n - DIRECT;
        let mut span = per;
        let mut found = None;
        for depth in 1..=3u32 {
            if rel < span {
                found = Some((root(11 + depth as usize), depth, rel));
                break;
            }
            rel -= span;
            span = span.saturating_mul(per);
        }
        match found {
            Some(f) => f,
            // Past the triple-indirect range nothing is addressable.
            None => return Ok(Mapping { lblk, len: u64::MAX - lblk_n, kind: MapKind::Hole }),
        }
    };
    if depth == 0 {
        return leaf_run(vol, inode, lblk, ptr);
    }
    let mut block = ptr;
    for level in (0..depth).rev() {
        // Blocks covered by one pointer at this level.
        let span = per.pow(level);
        if block == 0 {
            // Hole: the rest of this subtree.
            let left = span * per - rel;
            return Ok(Mapping { lblk, len: left, kind: MapKind::Hole });
        }
        if !vol.valid_range(block, 1) {
            return Err(bad(inode, block, CorruptKind::OutsideFilesystem { what: "indirect pointer", block, len: 1 }));
        }
        let buf = vol.block(block)?;
        let idx = (rel / span) as usize;
        rel %= span;
        if level == 0 {
            // Last level: pointers are data blocks; extend the run while
            // they stay contiguous.
            let data = buf.data();
            let first = u64::from(le32(data, idx * 4));
            let mut n = 1u64;
            while (idx + n as usize) < per as usize {
                let next = u64::from(le32(data, (idx + n as usize) * 4));
                let contiguous = if first == 0 { next == 0 } else { next == first + n };
                if !contiguous {
                    break;
                }
                n += 1;
            }
            return finish(vol, inode, lblk, first, n, block);
        }
        block = u64::from(le32(buf.data(), idx * 4));
    }
    Err(bad(inode, 0, CorruptKind::TooDeep { what: "block map", depth: u64::from(depth), max: 3 }))
}

/// A run among the 12 direct pointers.
fn leaf_run(vol: &Volume, inode: &Inode, lblk: FileBlock, first: u64) -> Result<Mapping> {
    let mut n = 1u64;
    while lblk.get() + n < DIRECT {
        let next = u64::from(le32(&inode.block, ((lblk.get() + n) * 4) as usize));
        let contiguous = if first == 0 { next == 0 } else { next == first + n };
        if !contiguous {
            break;
        }
        n += 1;
    }
    finish(vol, inode, lblk, first, n, 0)
}

fn finish(vol: &Volume, inode: &Inode, lblk: FileBlock, first: u64, n: u64, block: u64) -> Result<Mapping> {
    if first == 0 {
        return Ok(Mapping { lblk, len: n, kind: MapKind::Hole });
    }
    if !vol.valid_range(first, n) {
        return Err(bad(inode, block, CorruptKind::OutsideFilesystem { what: "data pointer", block: first, len: n }));
    }
    Ok(Mapping { lblk, len: n, kind: MapKind::Mapped(PhysicalBlock(first)) })
}

/// A corrupt pointer of `inode`, found in indirect block `block` (0: in
/// the inode's own `i_block`).
fn bad(inode: &Inode, block: u64, kind: CorruptKind) -> Error {
    Error::corruption(Structure::IndirectBlock, Location::inode_block(inode.ino, block), kind)
}
