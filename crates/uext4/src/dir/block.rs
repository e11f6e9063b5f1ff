//! Reading one directory block and checking it.

use super::NameKey;
use crate::cache::{Buffer, Check};
use crate::error::Result;
use crate::format::block_number::FileBlock;
use crate::format::dirent;
use crate::format::dx::{self, DxNode};
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
                let is_root = lblk == FileBlock(0);
                if is_root {
                    dx::parse_root_info(data, pblk)?;
                }
                // Parsed once per version: the walk that follows finds
                // the same node in the cache.
                let node = dx_node(vol, &buf, pblk, is_root, true);
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

/// Tag of [`dx_node`]'s values among [`crate::cache::BufferCache::derived`]'s.
const DX_NODE_KIND: u64 = 0x6478_6e6f_6465_0000;

/// The index entries of `buf` (physical block `pblk`, an htree root when
/// `is_root`, else an interior node; `csum`: room kept for the dx tail),
/// parsed once per version of the block and kept beside it in the buffer
/// cache ([`crate::cache::BufferCache::derived`]): every lookup, insert
/// and remove walks the same few index blocks, which change only when a
/// leaf or node splits. A change installs a new version (buffers are
/// immutable), and the cache knows a version by identity, so a node
/// parsed from an older version is never returned for a newer one. A
/// block that fails to parse is not remembered (each walk reports it).
pub(crate) fn dx_node(vol: &Volume, buf: &Arc<Buffer>, pblk: u64, is_root: bool, csum: bool) -> Result<Arc<DxNode>> {
    let kind = DX_NODE_KIND | u64::from(is_root) | u64::from(csum) << 1;
    vol.cache.derived(buf, kind, |b| dx::parse_node(b.data(), is_root, csum, pblk))
}

impl DirBlock {
    /// This block's index entries ([`dx_node`]).
    pub(crate) fn dx_node(&self, vol: &Volume, is_root: bool, csum: bool) -> Result<Arc<DxNode>> {
        dx_node(vol, &self.buf, self.block, is_root, csum)
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
