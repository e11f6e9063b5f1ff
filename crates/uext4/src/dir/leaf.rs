//! A directory block's live entries in listing order, computed once per
//! version of the block and kept beside it in the buffer cache
//! ([`crate::cache::BufferCache::derived`]).
//!
//! A listing returns a page of entries per call and resumes from a cookie
//! (a byte position, or a hash position in hash-ordered listings). Without
//! this, every call would walk (and, in hash order, hash and sort) the
//! whole block to find the entries after its cookie: a block of E entries
//! listed in pages of P would cost E * E / P. With it, a call costs a
//! binary search and the entries it returns; the block is walked and
//! hashed once per version (a change installs a new version, which gets
//! its own listing, so a listing never sees stale entries).

use super::block::DirBlock;
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::dir_hash::HashVersion;
use crate::format::dirent::{self, DIRENT_HEADER};
use crate::format::inode::Inode;
use crate::volume::Volume;
use std::sync::Arc;

/// One live entry of a block: where it is, and its hash in hash order.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slot {
    /// Major hash (hash order; 0 in block order).
    pub major: u32,
    /// Minor hash (hash order; 0 in block order).
    pub minor: u32,
    /// Inode number (nonzero, at most the filesystem's inode count).
    pub ino: u32,
    /// Byte offset of the entry in its block.
    pub off: u32,
    /// Byte offset of the next record (`off` plus the record length).
    pub next: u32,
    /// Name length.
    pub name_len: u8,
    /// Dirent file type byte (0 without the filetype feature).
    pub ft: u8,
}

impl Slot {
    /// The entry's name in `data`, the bytes of the block it was found in
    /// (checked when the block was walked: the name lies in the block).
    pub fn name<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        let start = self.off as usize + DIRENT_HEADER;
        data.get(start..start + usize::from(self.name_len)).unwrap_or_default()
    }
}

/// The order a block is listed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Order {
    /// Block order (linear listings).
    Block,
    /// Hash order with this hash, casefolded or not; `dots` leaves out
    /// entries named "." and ".." (listed from the directory's first
    /// block by the caller).
    Hash { version: HashVersion, casefold: bool, dots: bool },
}

impl Order {
    /// The kind of derived value in the buffer cache.
    fn kind(self, is_dx: bool) -> u64 {
        // A tag of this module's values, then the parameters.
        let base = 0x6469_7200_0000_0000 | u64::from(is_dx);
        match self {
            Order::Block => base,
            Order::Hash { version, casefold, dots } => {
                base | 2 | u64::from(casefold) << 2 | u64::from(dots) << 3 | (version as u64) << 8
            }
        }
    }
}

/// A block's live entries, in block order or sorted by (major hash, minor
/// hash, name).
#[derive(Debug)]
pub(super) struct Leaf {
    /// The entries.
    pub slots: Box<[Slot]>,
}

impl Leaf {
    /// The index of the first entry at byte offset `off` of its block or
    /// later (block order).
    pub fn first_at_offset(&self, off: u64) -> usize {
        self.slots.partition_point(|s| u64::from(s.off) < off)
    }
}

/// The entries of `blk` (a block of directory `dir`) in `order`, from the
/// cache when this version of the block was listed in that order before.
/// Of an index block only "." and ".." count (the root's; an interior
/// node holds none). The whole block is checked as a leaf, and an entry
/// naming an inode past the filesystem's count makes it corrupt.
pub(super) fn entries(vol: &Volume, dir: &Inode, blk: &DirBlock, order: Order) -> Result<Arc<Leaf>> {
    vol.cache.derived(&blk.buf, order.kind(blk.is_dx), |buf| {
        let data = buf.data();
        let ft = super::filetype(vol);
        let mut slots = Vec::new();
        let mut n = 0usize;
        let mut bad = None;
        dirent::walk_leaf(data, ft, blk.block, |e| {
            let counted = !blk.is_dx || n < 2;
            n += 1;
            if !counted || e.inode == 0 {
                return;
            }
            if e.inode > vol.sb.inodes_count {
                bad.get_or_insert((e.offset, e.inode));
                return;
            }
            let (major, minor) = match order {
                Order::Block => (0, 0),
                Order::Hash { dots, .. } if dots && (e.name == b"." || e.name == b"..") => return,
                Order::Hash { version, .. } => {
                    let h = super::name_hash(vol, dir, e.name, version);
                    (h.major, h.minor)
                }
            };
            slots.push(Slot {
                major,
                minor,
                ino: e.inode,
                off: e.offset as u32,
                next: (e.offset + e.rec_len) as u32,
                name_len: e.name.len() as u8,
                ft: e.file_type,
            });
        })?;
        if let Some((offset, ino)) = bad {
            return Err(Error::corruption(
                Structure::DirEntry,
                Location::BlockOffset { block: blk.block, offset },
                CorruptKind::OutsideRange {
                    what: "inode",
                    value: u64::from(ino),
                    start: 0,
                    end: u64::from(vol.sb.inodes_count) + 1,
                },
            ));
        }
        if let Order::Hash { .. } = order {
            slots.sort_by(|a, b| (a.major, a.minor, a.name(data)).cmp(&(b.major, b.minor, b.name(data))));
        }
        Ok(Leaf { slots: slots.into_boxed_slice() })
    })
}
