//! The orphan file of a writable filesystem (COMPAT_ORPHAN_FILE): where
//! its blocks are, how many free slots each has, and which slot each
//! orphan took. Orphan add and remove (`fs/orphan.rs`) go here first and
//! fall back to the `s_last_orphan` chain when every slot is taken, as
//! the kernel's ext4_orphan_add does.
//!
//! The state lives inside the orphan-list mutex (`OpenFiles`), so every
//! slot change is serialized with the chain's and keeps the lock order
//! (class Orphan, then the block cache through the handle).

use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::FileBlock;
use crate::format::features::compat;
use crate::format::orphan_file as of;
use crate::inode::MapKind;
use crate::txn::Tx;
use crate::volume::Volume;
use std::collections::HashMap;

/// The orphan file's blocks and their free-slot counts.
#[derive(Debug)]
struct OrphanFile {
    /// Physical block of each block of the file, in file order.
    blocks: Vec<u64>,
    /// Free slots of each block (the kernel's ob_free_entries).
    free: Vec<usize>,
    /// The orphan file's checksum seed, with metadata_csum.
    seed: Option<u32>,
    /// Slots per block.
    per_block: usize,
}

/// The orphan-file state guarded by the orphan-list mutex.
#[derive(Debug, Default)]
pub(crate) struct OrphanSlots {
    /// None without the feature (or read-only).
    file: Option<OrphanFile>,
    /// The slot (block * per_block + index) of each orphan in the file.
    slot_of: HashMap<u32, usize>,
    /// The predecessor of each orphan this mount put on the
    /// `s_last_orphan` chain (0: the superblock points at it), so that
    /// taking one off costs one link update, not a walk of the chain
    /// (the kernel keeps its in-memory `s_orphan` list for the same
    /// reason). Orphans chained before the mount are not in it: their
    /// removal walks the chain.
    chain_prev: HashMap<u32, u32>,
    /// `s_last_orphan` as this mount's transactions left it, once read
    /// (None before): every change of it goes through this state, under
    /// its lock (see `fs/orphan.rs`), so the head is known without
    /// parsing the superblock at every orphan.
    pub(crate) head: Option<u32>,
}

fn bad(ino: u32, kind: CorruptKind) -> Error {
    Error::corruption(Structure::Inode, Location::Inode(ino), kind)
}

impl OrphanSlots {
    /// Reads the orphan file of `vol` if it has the feature: maps its
    /// blocks, checks their magic and checksums and counts free slots
    /// (the kernel's ext4_init_orphan_info; a bad block refuses the
    /// read-write open as it refuses the mount).
    pub(crate) fn load(vol: &Volume) -> Result<OrphanSlots> {
        let sb = &vol.sb;
        if !sb.features.has_compat(compat::ORPHAN_FILE) {
            return Ok(OrphanSlots::default());
        }
        let ino = sb.orphan_file_inum;
        let inode = crate::inode::read_inode(vol, ino)?;
        let bs = vol.block_size as u64;
        let n = inode.size / bs;
        let limit = u64::from(u32::MAX) / bs;
        if n > limit {
            return Err(bad(ino, CorruptKind::OutOfRange { field: "orphan file size", value: inode.size }));
        }
        let seed = sb.has_metadata_csum().then(|| vol.inode_csum_seed(ino, inode.generation));
        let per_block = of::slots_per_block(vol.block_size);
        let (mut blocks, mut free) = (Vec::new(), Vec::new());
        for l in 0..n {
            let m = crate::inode::map_block(vol, &inode, FileBlock(l))?;
            let MapKind::Mapped(p) = m.kind else {
                return Err(bad(ino, CorruptKind::Missing { what: "orphan file block" }));
            };
            let p = p.get();
            let buf = vol.block(p)?;
            if let Err(e) = of::verify(buf.data(), p, seed) {
                let kind = match e {
                    of::BlockError::BadMagic(found) => CorruptKind::BadMagic { found: u64::from(found) },
                    of::BlockError::BadChecksum(found, want) => CorruptKind::Mismatch {
                        field: "orphan block checksum",
                        value: found.into(),
                        expected: want.into(),
                    },
                    of::BlockError::TooShort => CorruptKind::TooShort { len: vol.block_size, need: 12 },
                };
                return Err(Error::corruption(Structure::Inode, Location::Block(p), kind));
            }
            free.push(per_block - of::entries(buf.data()).count());
            blocks.push(p);
        }
        Ok(OrphanSlots {
            file: Some(OrphanFile { blocks, free, seed, per_block }),
            slot_of: HashMap::new(),
            chain_prev: HashMap::new(),
            head: None,
        })
    }

    /// Notes that `ino` became the chain's head in front of `old_head`.
    pub(crate) fn chained(&mut self, ino: u32, old_head: u32) {
        self.chain_prev.insert(ino, 0);
        if let Some(p) = self.chain_prev.get_mut(&old_head) {
            *p = ino;
        }
    }

    /// Forgets chain member `ino`, whose link pointed at `next`: returns
    /// its predecessor (0: the superblock) if this mount chained it, and
    /// hands that predecessor to `next`.
    pub(crate) fn unchained(&mut self, ino: u32, next: u32) -> Option<u32> {
        let prev = self.chain_prev.remove(&ino)?;
        if let Some(p) = self.chain_prev.get_mut(&next) {
            *p = prev;
        }
        Some(prev)
    }

    /// True when no slot of the orphan file is taken.
    pub(crate) fn is_empty(&self) -> bool {
        self.file.as_ref().is_none_or(|f| f.free.iter().all(|&n| n == f.per_block))
    }

    /// Puts `ino` in a free slot through `tx`; false when the file is full
    /// (or absent): the caller uses the chain. The search starts at a
    /// block picked by the inode number, so that concurrent orphans
    /// spread over blocks as the kernel's per-CPU start does.
    pub(crate) fn add(&mut self, tx: &Tx, ino: u32) -> Result<bool> {
        if self.slot_of.contains_key(&ino) {
            return Ok(true);
        }
        let Some(f) = self.file.as_mut() else { return Ok(false) };
        let n = f.blocks.len();
        if n == 0 {
            return Ok(false);
        }
        let start = (ino as usize).wrapping_mul(13) % n;
        let Some(b) = (0..n).map(|k| (start + k) % n).find(|&b| f.free[b] > 0) else {
            return Ok(false);
        };
        let (p, seed) = (f.blocks[b], f.seed);
        let j = tx.modify_planned(
            p,
            |d| {
                of::free_slot(d).ok_or_else(|| {
                    Error::corruption(
                        Structure::Inode,
                        Location::Block(p),
                        CorruptKind::Mismatch { field: "orphan block free slots", value: 0, expected: 1 },
                    )
                })
            },
            |j, d| {
                of::set_slot(d, j, ino);
                of::seal(d, p, seed);
                j
            },
        )?;
        f.free[b] -= 1;
        self.slot_of.insert(ino, b * f.per_block + j);
        Ok(true)
    }

    /// Frees the slot of `ino` through `tx`; false when it holds none
    /// (it is on the chain, or on no list).
    pub(crate) fn remove(&mut self, tx: &Tx, ino: u32) -> Result<bool> {
        let Some(&idx) = self.slot_of.get(&ino) else { return Ok(false) };
        let Some(f) = self.file.as_mut() else { return Ok(false) };
        let (b, j) = (idx / f.per_block, idx % f.per_block);
        let (Some(&p), seed) = (f.blocks.get(b), f.seed) else { return Ok(false) };
        tx.modify_planned(
            p,
            |_| Ok(()),
            |(), d| {
                of::set_slot(d, j, 0);
                of::seal(d, p, seed);
            },
        )?;
        f.free[b] += 1;
        self.slot_of.remove(&ino);
        Ok(true)
    }

    /// The entries the file holds on disk as (inode, slot), read through
    /// the cache (recovery at open: they belong to no running operation).
    pub(crate) fn on_disk(&self, vol: &Volume) -> Result<Vec<(u32, usize)>> {
        let Some(f) = self.file.as_ref() else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        for (b, &p) in f.blocks.iter().enumerate() {
            let buf = vol.block(p)?;
            out.extend(of::entries(buf.data()).map(|(j, ino)| (ino, b * f.per_block + j)));
        }
        Ok(out)
    }

    /// Records that `ino` holds slot `idx` (found on disk at recovery), so
    /// that its removal frees that slot.
    pub(crate) fn adopt(&mut self, ino: u32, idx: usize) {
        self.slot_of.insert(ino, idx);
    }
}

/// The notice of a read-only open of `vol` that holds orphans (a crash
/// left them; a read-write open deletes or truncates them), if any.
pub(crate) fn pending_notice(vol: &Volume) -> Option<String> {
    let chain = vol.sb.last_orphan != 0;
    let in_file = match OrphanSlots::load(vol).and_then(|s| s.on_disk(vol)) {
        Ok(e) => e.len(),
        Err(e) => return Some(format!("the orphan file cannot be read ({e}); a read-write open will refuse it")),
    };
    if !chain && in_file == 0 {
        return None;
    }
    let chain = if chain { " and on the s_last_orphan chain" } else { "" };
    Some(format!(
        "orphan inodes pending ({in_file} in the orphan file{chain}): a read-write open deletes or truncates them"
    ))
}
