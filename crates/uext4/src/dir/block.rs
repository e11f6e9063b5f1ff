//! Reading one directory block and checking it.

use super::NameKey;
use crate::cache::{Buffer, Check};
use crate::error::Result;
use crate::format::block_number::FileBlock;
use crate::format::dirent::{self, RawDirent};
use crate::format::dx;
use crate::format::inode::{FileType, Inode};
use crate::inode::{map_block, MapKind};
use crate::volume::Volume;
use std::sync::Arc;

/// A directory block, verified.
#[derive(Debug)]
pub struct DirBlock {
    /// Physical block number.
    pub block: u64,
    /// The block's bytes.
    pub buf: Arc<Buffer>,
    /// True if this is an htree index block (root or interior node).
    pub is_dx: bool,
}

/// Reads logical block `lblk` of directory `dir`. A hole (ext4 allows
/// sparse directories; they read as empty) gives `Ok(Err(n))`: the next
/// `n` blocks hold nothing, so callers skip them in one step instead of
/// probing a huge, corrupt size block by block. Checksums are verified: leaf tails for leaves, dx tails for
/// index blocks.
pub fn read(vol: &Volume, dir: &Inode, lblk: FileBlock, htree: bool) -> Result<Result<DirBlock, u64>> {
    let m = map_block(vol, dir, lblk)?;
    let pblk = match m.kind {
        MapKind::Mapped(p) => p.get(),
        MapKind::Unwritten(_) | MapKind::Hole => return Ok(Err(m.len.max(1))),
    };
    let buf = vol.block(pblk)?;
    let data = buf.data();
    let is_dx = htree && (lblk == FileBlock(0) || dx::is_node_block(data));
    if vol.has_csum() {
        let seed = vol.inode_csum_seed(dir.ino, dir.generation);
        let check = match (is_dx, lblk == FileBlock(0)) {
            (false, _) => Check::DirLeaf,
            (true, true) => Check::DxRoot,
            (true, false) => Check::DxNode,
        };
        if !buf.is_verified(check, seed) {
            if is_dx {
                let node = if lblk == FileBlock(0) {
                    dx::parse_root_info(data, pblk)?;
                    dx::parse_node(data, true, true, pblk)
                } else {
                    dx::parse_node(data, false, true, pblk)
                };
                // A block whose index cannot even be parsed is reported by
                // the htree walk; here we only check what we can (and
                // remember nothing).
                if let Ok(node) = node {
                    dx::verify_checksum(data, &node, seed, pblk)?;
                    buf.set_verified(check, seed);
                }
            } else {
                dirent::verify_leaf(data, seed, pblk)?;
                buf.set_verified(check, seed);
            }
        }
    }
    Ok(Ok(DirBlock { block: pblk, buf, is_dx }))
}

impl DirBlock {
    /// The entries of the block. For the htree root only "." and ".." are
    /// entries (the rest of the block is the index, hidden inside ".."'s
    /// record); interior nodes hold none.
    pub fn entries(&self, filetype: bool) -> Result<Vec<RawDirent<'_>>> {
        let mut v = dirent::parse_leaf(self.buf.data(), filetype, self.block)?;
        if self.is_dx {
            v.truncate(2);
        }
        Ok(v)
    }

    /// Finds the live entry that matches `name`.
    pub(crate) fn find(&self, filetype: bool, name: &NameKey<'_>) -> Result<Option<(u32, Option<FileType>)>> {
        // As `entries` (the whole block validated, only "." and ".." of
        // an index block), without collecting them.
        let (mut found, mut n) = (None, 0usize);
        dirent::walk_leaf(self.buf.data(), filetype, self.block, |e| {
            if found.is_none() && (!self.is_dx || n < 2) && e.inode != 0 && name.matches(e.name) {
                found = Some((e.inode, FileType::from_dirent(e.file_type)));
            }
            n += 1;
        })?;
        Ok(found)
    }
}
