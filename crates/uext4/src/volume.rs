//! The opened volume: superblock, group descriptors and metadata cache.
//!
//! This is the shared context every layer above the format codecs works
//! with. It is immutable after open (read-only for now), so it is shared
//! between threads without locks; only the buffer cache inside has its own
//! (sharded) locking.

use crate::cache::{Buffer, BufferCache};
use crate::device::BlockDevice;
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::checksum::crc32c;
use crate::format::features::{compat, incompat, ro_compat};
use crate::format::group_desc::GroupDesc;
use crate::format::superblock::{Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use std::sync::Arc;

/// Superblock, descriptors and cache of an open filesystem.
#[derive(Debug)]
pub struct Volume {
    /// The superblock as read at open.
    pub sb: Superblock,
    /// One descriptor per group.
    pub groups: Vec<GroupDesc>,
    /// The metadata cache (owns the device).
    pub cache: Arc<BufferCache>,
    /// Block size in bytes.
    pub block_size: usize,
    csum_seed: u32,
    /// Free clusters and free inodes summed over the descriptors as read
    /// at open (see [`Volume::descriptor_free_totals`]).
    desc_totals: (u64, u64),
}

/// True if group `g` holds a superblock backup (and so a GDT copy).
pub fn group_has_super(sb: &Superblock, g: u64) -> bool {
    if g == 0 {
        return true;
    }
    if sb.features.has_compat(compat::SPARSE_SUPER2) {
        return g == u64::from(sb.backup_bgs[0]) || g == u64::from(sb.backup_bgs[1]);
    }
    if !sb.features.has_ro_compat(ro_compat::SPARSE_SUPER) {
        return true;
    }
    crate::format::superblock::sparse_super_group(g)
}

impl Volume {
    /// Reads and validates the superblock and all group descriptors.
    pub fn open(dev: Arc<dyn BlockDevice>, cache_blocks: usize) -> Result<Volume> {
        let mut raw = [0u8; SUPERBLOCK_SIZE];
        dev.read_at(&mut raw, SUPERBLOCK_OFFSET).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::NotExt4("image too small for a superblock".into())
            } else {
                Error::Io(e)
            }
        })?;
        let sb = Superblock::parse(&raw)?;
        let refused = sb.features.refused_incompat();
        if !refused.is_empty() {
            return Err(Error::Unsupported(format!("incompatible feature(s) {}", refused.join(", "))));
        }
        crate::format::casefold::check_encoding(&sb)?;
        let block_size = sb.block_size() as usize;
        let dev_blocks = dev.size() / block_size as u64;
        if sb.blocks_count > dev_blocks {
            return Err(Error::corruption(
                Structure::Superblock,
                Location::Unknown,
                CorruptKind::OutsideRange {
                    what: "s_blocks_count (the device's blocks)",
                    value: sb.blocks_count,
                    start: 0,
                    end: dev_blocks + 1,
                },
            ));
        }
        let csum_seed = sb.csum_seed();
        let cache = Arc::new(BufferCache::new(dev, block_size, cache_blocks));
        let mut vol = Volume { sb, groups: Vec::new(), cache, block_size, csum_seed, desc_totals: (0, 0) };
        vol.groups = vol.read_group_descs()?;
        // Summed once here, where every descriptor is read anyway: a
        // read-only statfs must not walk 122,880 descriptors per call.
        vol.desc_totals = vol
            .groups
            .iter()
            .fold((0, 0), |(b, i), gd| (b + u64::from(gd.free_blocks_count), i + u64::from(gd.free_inodes_count)));
        Ok(vol)
    }

    /// Free clusters and free inodes summed over the group descriptors as
    /// read at open (what a read-only statfs reports; O(1): summed once
    /// at open). A writable filesystem's allocators keep their own
    /// running totals.
    pub fn descriptor_free_totals(&self) -> (u64, u64) {
        self.desc_totals
    }

    /// Where the primary superblock lives: its block, and its byte
    /// offset in that block.
    pub fn sb_location(&self) -> (u64, usize) {
        let bs = self.block_size as u64;
        (SUPERBLOCK_OFFSET / bs, (SUPERBLOCK_OFFSET % bs) as usize)
    }

    /// Where the descriptor block `i` (0-based, in GDT order) lives.
    pub fn desc_block_location(&self, i: u64) -> u64 {
        let sb = &self.sb;
        // The descriptors follow the block holding the primary superblock
        // (block 1 with 1 KiB blocks, else block 0), even on 1 KiB-block
        // bigalloc filesystems whose first data block is 0.
        let (sb_block, _) = self.sb_location();
        if !sb.features.has_incompat(incompat::META_BG) || i < u64::from(sb.first_meta_bg) {
            return sb_block + 1 + i;
        }
        // meta_bg: the descriptors of meta group m (one GDT block's worth of
        // groups) sit in the first group of that meta group.
        let per_block = self.block_size as u64 / u64::from(sb.desc_size);
        let g = i * per_block;
        self.group_first_block(g) + u64::from(group_has_super(sb, g))
    }

    fn read_group_descs(&self) -> Result<Vec<GroupDesc>> {
        let sb = &self.sb;
        let count = sb.group_count();
        let ds = usize::from(sb.desc_size);
        let per_block = self.block_size / ds;
        let mut out = Vec::with_capacity(count as usize);
        let blocks = count.div_ceil(per_block as u64);
        for i in 0..blocks {
            let bno = self.desc_block_location(i);
            let buf = self.block(bno)?;
            for j in 0..per_block {
                let g = i * per_block as u64 + j as u64;
                if g >= count {
                    break;
                }
                let gd = GroupDesc::parse(sb, g as u32, &buf.data()[j * ds..(j + 1) * ds], bno)?;
                self.check_desc(g, &gd, bno)?;
                out.push(gd);
            }
        }
        Ok(out)
    }

    /// Like the kernel's ext4_check_descriptors: bitmaps and inode table
    /// must lie inside the filesystem (with flex_bg anywhere, otherwise in
    /// their own group).
    fn check_desc(&self, g: u64, gd: &GroupDesc, bno: u64) -> Result<()> {
        let sb = &self.sb;
        let itable_blocks = self.inode_table_blocks();
        let (lo, hi) = if sb.features.has_incompat(incompat::FLEX_BG) {
            (u64::from(sb.first_data_block), sb.blocks_count)
        } else {
            let s = self.group_first_block(g);
            (s, (s + u64::from(sb.blocks_per_group)).min(sb.blocks_count))
        };
        let ok = |b: u64, n: u64| b >= lo && b.checked_add(n).is_some_and(|e| e <= hi);
        if !ok(gd.block_bitmap, 1) || !ok(gd.inode_bitmap, 1) || !ok(gd.inode_table, itable_blocks) {
            // Name the first of the three that is outside.
            let (what, value) = if !ok(gd.block_bitmap, 1) {
                ("bg_block_bitmap", gd.block_bitmap)
            } else if !ok(gd.inode_bitmap, 1) {
                ("bg_inode_bitmap", gd.inode_bitmap)
            } else {
                ("bg_inode_table", gd.inode_table)
            };
            return Err(Error::corruption(
                Structure::GroupDesc,
                Location::GroupBlock { group: g as u32, block: bno },
                CorruptKind::OutsideRange { what, value, start: lo, end: hi },
            ));
        }
        Ok(())
    }

    /// Blocks each group's inode table occupies.
    pub fn inode_table_blocks(&self) -> u64 {
        (u64::from(self.sb.inodes_per_group) * u64::from(self.sb.inode_size)).div_ceil(self.block_size as u64)
    }

    /// First block of group `g`.
    pub fn group_first_block(&self, g: u64) -> u64 {
        u64::from(self.sb.first_data_block) + g * u64::from(self.sb.blocks_per_group)
    }

    /// Reads a metadata block through the cache, refusing blocks outside
    /// the filesystem (a corrupt pointer must not read past the image).
    pub fn block(&self, block: u64) -> Result<Arc<Buffer>> {
        if block >= self.sb.blocks_count {
            return Err(Error::corruption(
                Structure::Superblock,
                Location::Block(block),
                CorruptKind::OutsideFilesystem { what: "metadata block", block, len: 1 },
            ));
        }
        self.cache.get(block)
    }

    /// True if `start..start+len` is a valid run of data blocks.
    pub fn valid_range(&self, start: u64, len: u64) -> bool {
        start >= u64::from(self.sb.first_data_block)
            && start.checked_add(len).is_some_and(|e| e <= self.sb.blocks_count)
    }

    /// The filesystem-wide checksum seed.
    pub fn csum_seed(&self) -> u32 {
        self.csum_seed
    }

    /// The per-inode checksum seed (inode number and generation).
    pub fn inode_csum_seed(&self, ino: u32, generation: u32) -> u32 {
        // One call over both words: the same sum as one after the other.
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&ino.to_le_bytes());
        b[4..].copy_from_slice(&generation.to_le_bytes());
        crc32c(self.csum_seed, &b)
    }

    /// True when metadata_csum is on.
    pub fn has_csum(&self) -> bool {
        self.sb.has_metadata_csum()
    }

    /// The underlying device.
    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        self.cache.device()
    }
}
