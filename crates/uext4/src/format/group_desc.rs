//! Block group descriptors (32 or 64 bytes each) and bitmap checksums.

use super::bytes::{le16, le32, lo_hi, put_le16, put_le32};
use super::checksum::{crc16, crc32c};
use super::superblock::Superblock;
use crate::error::{CorruptKind, Error, Location, Result, Structure};

/// `bg_flags`: inode table and bitmap not initialised.
pub const BG_INODE_UNINIT: u16 = 0x1;
/// `bg_flags`: block bitmap not initialised (computed from the layout).
pub const BG_BLOCK_UNINIT: u16 = 0x2;
/// `bg_flags`: inode table zeroed.
pub const BG_INODE_ZEROED: u16 = 0x4;

const CSUM_OFFSET: usize = 0x1E;

/// One parsed group descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupDesc {
    /// Block bitmap location.
    pub block_bitmap: u64,
    /// Inode bitmap location.
    pub inode_bitmap: u64,
    /// First block of the inode table.
    pub inode_table: u64,
    /// Free blocks (clusters) in the group.
    pub free_blocks_count: u32,
    /// Free inodes in the group.
    pub free_inodes_count: u32,
    /// Directories in the group.
    pub used_dirs_count: u32,
    /// `BG_*` flags.
    pub flags: u16,
    /// Snapshot exclude bitmap.
    pub exclude_bitmap: u64,
    /// crc32c of the block bitmap (low 16 bits, high 16 with 64-byte descriptors).
    pub block_bitmap_csum: u32,
    /// crc32c of the inode bitmap.
    pub inode_bitmap_csum: u32,
    /// Unused inodes at the end of the inode table.
    pub itable_unused: u32,
    /// Stored descriptor checksum.
    pub checksum: u16,
}

impl GroupDesc {
    /// Parses the descriptor of group `group` from `b` (`desc_size` bytes)
    /// and verifies its checksum. `block` is where it was read, for errors.
    pub fn parse(sb: &Superblock, group: u32, b: &[u8], block: u64) -> Result<Self> {
        let ds = usize::from(sb.desc_size);
        if b.len() < ds {
            return Err(Error::corruption(
                Structure::GroupDesc,
                Location::GroupBlock { group, block },
                CorruptKind::TooShort { len: b.len(), need: ds },
            ));
        }
        let b = &b[..ds];
        let wide = ds >= 64;
        let hi32 = |off: usize| if wide { le32(b, off) } else { 0 };
        let hi16 = |off: usize| if wide { u32::from(le16(b, off)) } else { 0 };
        let gd = GroupDesc {
            block_bitmap: lo_hi(le32(b, 0x0), hi32(0x20)),
            inode_bitmap: lo_hi(le32(b, 0x4), hi32(0x24)),
            inode_table: lo_hi(le32(b, 0x8), hi32(0x28)),
            free_blocks_count: u32::from(le16(b, 0xC)) | (hi16(0x2C) << 16),
            free_inodes_count: u32::from(le16(b, 0xE)) | (hi16(0x2E) << 16),
            used_dirs_count: u32::from(le16(b, 0x10)) | (hi16(0x30) << 16),
            flags: le16(b, 0x12),
            exclude_bitmap: lo_hi(le32(b, 0x14), hi32(0x34)),
            block_bitmap_csum: u32::from(le16(b, 0x18)) | (hi16(0x38) << 16),
            inode_bitmap_csum: u32::from(le16(b, 0x1A)) | (hi16(0x3A) << 16),
            itable_unused: u32::from(le16(b, 0x1C)) | (hi16(0x32) << 16),
            checksum: le16(b, CSUM_OFFSET),
        };
        if let Some(computed) = desc_checksum(sb, group, b) {
            if computed != gd.checksum {
                return Err(Error::Checksum {
                    structure: Structure::GroupDesc,
                    block,
                    ino: 0,
                    stored: u32::from(gd.checksum),
                    computed: u32::from(computed),
                });
            }
        }
        Ok(gd)
    }

    /// Encodes every field into `raw` (one descriptor, `desc_size` bytes)
    /// and sets its checksum. Fields the descriptor size cannot hold keep
    /// only their low halves, as on disk.
    pub fn encode(&self, sb: &Superblock, group: u32, raw: &mut [u8]) {
        let ds = usize::from(sb.desc_size).min(raw.len());
        let b = &mut raw[..ds];
        let wide = ds >= 64;
        put_le32(b, 0x0, self.block_bitmap as u32);
        put_le32(b, 0x4, self.inode_bitmap as u32);
        put_le32(b, 0x8, self.inode_table as u32);
        put_le16(b, 0xC, self.free_blocks_count as u16);
        put_le16(b, 0xE, self.free_inodes_count as u16);
        put_le16(b, 0x10, self.used_dirs_count as u16);
        put_le16(b, 0x12, self.flags);
        put_le32(b, 0x14, self.exclude_bitmap as u32);
        put_le16(b, 0x18, self.block_bitmap_csum as u16);
        put_le16(b, 0x1A, self.inode_bitmap_csum as u16);
        put_le16(b, 0x1C, self.itable_unused as u16);
        if wide {
            put_le32(b, 0x20, (self.block_bitmap >> 32) as u32);
            put_le32(b, 0x24, (self.inode_bitmap >> 32) as u32);
            put_le32(b, 0x28, (self.inode_table >> 32) as u32);
            put_le16(b, 0x2C, (self.free_blocks_count >> 16) as u16);
            put_le16(b, 0x2E, (self.free_inodes_count >> 16) as u16);
            put_le16(b, 0x30, (self.used_dirs_count >> 16) as u16);
            put_le16(b, 0x32, (self.itable_unused >> 16) as u16);
            put_le32(b, 0x34, (self.exclude_bitmap >> 32) as u32);
            put_le16(b, 0x38, (self.block_bitmap_csum >> 16) as u16);
            put_le16(b, 0x3A, (self.inode_bitmap_csum >> 16) as u16);
        }
        let csum = desc_checksum(sb, group, b).unwrap_or(0);
        put_le16(b, CSUM_OFFSET, csum);
    }

    /// True if `flag` (a `BG_*` constant) is set and the checksum feature
    /// that gives the flags meaning is on (without a checksum the kernel
    /// ignores the uninit flags).
    pub fn has_flag(&self, sb: &Superblock, flag: u16) -> bool {
        (sb.has_metadata_csum() || sb.has_gdt_csum()) && self.flags & flag != 0
    }
}

/// The checksum a descriptor should carry, or `None` when the filesystem
/// has no descriptor checksums. `b` is the raw descriptor.
pub fn desc_checksum(sb: &Superblock, group: u32, b: &[u8]) -> Option<u16> {
    let ds = usize::from(sb.desc_size).min(b.len());
    let before = &b[..CSUM_OFFSET.min(ds)];
    let after = b.get(CSUM_OFFSET + 2..ds).unwrap_or(&[]);
    if sb.has_metadata_csum() {
        let mut c = crc32c(sb.csum_seed(), &group.to_le_bytes());
        c = crc32c(c, before);
        c = crc32c(c, &[0, 0]);
        c = crc32c(c, after);
        Some((c & 0xFFFF) as u16)
    } else if sb.has_gdt_csum() {
        let mut c = crc16(!0, &sb.uuid);
        c = crc16(c, &group.to_le_bytes());
        c = crc16(c, before);
        if ds > 32 {
            c = crc16(c, after);
        }
        Some(c)
    } else {
        None
    }
}

/// Verifies a block bitmap against its descriptor (metadata_csum only).
/// `bitmap` is the whole bitmap block; the checksum covers
/// clusters_per_group bits.
pub fn verify_block_bitmap(sb: &Superblock, gd: &GroupDesc, bitmap: &[u8], block: u64) -> Result<()> {
    let n = (sb.clusters_per_group as usize / 8).min(bitmap.len());
    verify_bitmap(sb, gd.block_bitmap_csum, &bitmap[..n], block)
}

/// Verifies an inode bitmap against its descriptor (metadata_csum only).
pub fn verify_inode_bitmap(sb: &Superblock, gd: &GroupDesc, bitmap: &[u8], block: u64) -> Result<()> {
    let n = (sb.inodes_per_group as usize / 8).min(bitmap.len());
    verify_bitmap(sb, gd.inode_bitmap_csum, &bitmap[..n], block)
}

/// The checksum a block bitmap should carry in its descriptor
/// (metadata_csum; 0 otherwise).
pub fn block_bitmap_checksum(sb: &Superblock, bitmap: &[u8]) -> u32 {
    if !sb.has_metadata_csum() {
        return 0;
    }
    let n = (sb.clusters_per_group as usize / 8).min(bitmap.len());
    crc32c(sb.csum_seed(), &bitmap[..n])
}

fn verify_bitmap(sb: &Superblock, stored: u32, data: &[u8], block: u64) -> Result<()> {
    if !sb.has_metadata_csum() {
        return Ok(());
    }
    let mut computed = crc32c(sb.csum_seed(), data);
    let mut stored = stored;
    if sb.desc_size < 64 {
        computed &= 0xFFFF;
        stored &= 0xFFFF;
    }
    if computed != stored {
        return Err(Error::Checksum { structure: Structure::Bitmap, block, ino: 0, stored, computed });
    }
    Ok(())
}
