//! A new directory's first block ("." and ".."), re-pointing "..", and
//! the emptiness test: the parts of a directory that stay fixed while
//! entries come and go.

use super::check_dir;
use super::leaf::{copy_block, Ctx, Slot};
use crate::dir::{block, is_htree, linear_readdir};
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::{FileBlock, PhysicalBlock};
use crate::format::bytes::put_le32;
use crate::format::dirent::{self, rec_len_for};
use crate::format::dx;
use crate::format::inode::{Inode, FL_INDEX};
use crate::txn::Tx;
use crate::volume::Volume;

/// Directory entry file type of a directory (for "." and "..").
const FT_DIR: u8 = 2;

/// Writes the first block of a new directory into `block` (allocated and
/// mapped at logical block 0 by the caller): "." -> the directory, ".." ->
/// `parent`, and the checksum tail with metadata_csum. Sets `dir.size` to
/// one block.
pub fn init_dir_block(tx: &Tx, dir: &mut Inode, block: PhysicalBlock, parent: u32) -> Result<()> {
    if parent == 0 || parent > tx.vol.sb.inodes_count {
        return Err(Error::Invalid(format!("parent inode {parent}")));
    }
    let ctx = Ctx::new(tx, dir);
    let mut b = vec![0u8; ctx.bs];
    let dot = rec_len_for(1);
    ctx.write_entry(&mut b, 0, dir.ino, dot, b".", FT_DIR);
    ctx.write_entry(&mut b, dot, parent, ctx.space() - dot, b"..", FT_DIR);
    ctx.finish_leaf(&mut b);
    tx.init(block.get(), |d| copy_block(d, &b, block.get()))?;
    dir.size = ctx.bs as u64;
    dir.flags &= !FL_INDEX;
    Ok(())
}

/// Points ".." of directory `dir` at `parent` (a directory renamed to a
/// new parent), wherever the directory keeps it: as [`set_dotdot`], and
/// in the inode of an inline directory (then the caller writes `dir`
/// back, as it does after a rename anyway).
pub fn set_parent(tx: &Tx, dir: &mut Inode, parent: u32) -> Result<()> {
    if parent == 0 || parent > tx.vol.sb.inodes_count {
        return Err(Error::Invalid(format!("parent inode {parent}")));
    }
    if super::is_inline(dir)? {
        crate::inode::inline::set_parent(dir, parent);
        return Ok(());
    }
    set_dotdot(tx, dir, parent)
}

/// Points ".." of directory `dir` at `parent` (a directory renamed to a new
/// parent). Works on linear first blocks and htree roots (inline
/// directories: [`set_parent`]).
pub fn set_dotdot(tx: &Tx, dir: &Inode, parent: u32) -> Result<()> {
    if parent == 0 || parent > tx.vol.sb.inodes_count {
        return Err(Error::Invalid(format!("parent inode {parent}")));
    }
    check_dir(tx.vol, dir)?;
    let ctx = Ctx::new(tx, dir);
    let htree = is_htree(tx.vol, dir);
    let blk = block::read(tx.vol, dir, FileBlock(0), htree)?.map_err(|_| {
        Error::corruption(
            Structure::DirEntry,
            Location::FileBlock { ino: dir.ino, lblk: 0 },
            CorruptKind::Hole { lblk: 0 },
        )
    })?;
    let pblk = blk.block;
    let mut b = blk.buf.data().to_vec();
    drop(blk);
    let dotdot = if htree {
        // The root is "." plus a ".." whose record covers the index.
        let v = dirent::parse_leaf(&b, ctx.ft, pblk)?;
        check_dots(&v.iter().map(Slot::from).collect::<Vec<_>>(), &b, pblk)?;
        v[1].offset
    } else {
        let v = ctx.slots(&b, pblk)?;
        check_dots(&v, &b, pblk)?;
        v[1].off
    };
    put_le32(&mut b, dotdot, parent);
    if htree {
        if ctx.csum {
            let node = dx::parse_node(&b, true, true, pblk)?;
            dx::set_checksum(&mut b, node.entries_offset, ctx.seed);
        }
    } else {
        ctx.finish_leaf(&mut b);
    }
    ctx.put(pblk, &b)
}

/// True if the directory holds nothing but "." and "..".
pub fn is_empty(vol: &Volume, dir: &Inode) -> Result<bool> {
    // Any third live entry, or any live entry other than the dots, means
    // the directory is in use.
    let v = linear_readdir(vol, dir, 0, 3)?;
    Ok(v.len() <= 2 && v.iter().all(|e| e.name == b"." || e.name == b".."))
}

/// Checks that the first two entries are "." and "..".
pub(super) fn check_dots(v: &[Slot], b: &[u8], pblk: u64) -> Result<()> {
    if v.len() < 2 || v[0].name(b) != b"." || v[1].name(b) != b".." {
        let kind = CorruptKind::Missing { what: "\".\" and \"..\" as the first entries" };
        return Err(Error::corruption(Structure::DirEntry, Location::from_block(pblk), kind));
    }
    Ok(())
}
