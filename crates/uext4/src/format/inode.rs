//! The on-disk inode (128 bytes plus the extra fields of larger inodes).

use super::bytes::{le16, le32, lo_hi, put_le16, put_le32};
use super::checksum::crc32c;
use super::features::ro_compat;
use super::superblock::Superblock;
use crate::error::{CorruptKind, Error, Location, Result, Structure};

/// The first 128 bytes every inode has.
pub const GOOD_OLD_INODE_SIZE: usize = 128;
/// Bytes of `i_block` (extent root, block map, or fast symlink target).
pub const I_BLOCK_SIZE: usize = 60;

/// Root directory inode.
pub const ROOT_INO: u32 = 2;
/// Resize inode.
pub const RESIZE_INO: u32 = 7;
/// Journal inode.
pub const JOURNAL_INO: u32 = 8;

/// `i_flags`: inode uses an extent tree.
pub const FL_EXTENTS: u32 = 0x80000;
/// `i_flags`: directory is hash-indexed.
pub const FL_INDEX: u32 = 0x1000;
/// `i_flags`: i_blocks is in filesystem blocks, not sectors.
pub const FL_HUGE_FILE: u32 = 0x40000;
/// `i_flags`: data is stored inline in the inode.
pub const FL_INLINE_DATA: u32 = 0x1000_0000;
/// `i_flags`: the inode holds a large extended attribute value.
pub const FL_EA_INODE: u32 = 0x20_0000;
/// `i_flags`: encrypted.
pub const FL_ENCRYPT: u32 = 0x800;
/// `i_flags`: casefolded directory.
pub const FL_CASEFOLD: u32 = 0x4000_0000;
/// `i_flags`: new files in this directory take its project id (and new
/// directories this flag too).
pub const FL_PROJINHERIT: u32 = 0x2000_0000;
/// `i_flags`: fs-verity file.
pub const FL_VERITY: u32 = 0x10_0000;

pub use super::file_type::*;
pub use super::timestamp::Timestamp;

/// A parsed inode. Integer fields are already combined from their
/// low/high halves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inode {
    /// Inode number (not stored in the inode; filled in by the reader).
    pub ino: u32,
    /// Mode: type and permission bits.
    pub mode: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Access time.
    pub atime: Timestamp,
    /// Inode change time.
    pub ctime: Timestamp,
    /// Modification time.
    pub mtime: Timestamp,
    /// Creation time (only with large inodes).
    pub crtime: Option<Timestamp>,
    /// Deletion time.
    pub dtime: u32,
    /// Hard link count.
    pub links_count: u16,
    /// Allocated space in 512-byte sectors (already converted from
    /// filesystem blocks for huge files).
    pub blocks_512: u64,
    /// `i_flags`.
    pub flags: u32,
    /// Version (osd1 plus the high half when present).
    pub version: u64,
    /// Extent root, block map, or inline symlink target.
    pub block: [u8; I_BLOCK_SIZE],
    /// NFS generation number.
    pub generation: u32,
    /// Extended attribute block.
    pub file_acl: u64,
    /// Extra inode size beyond 128 bytes.
    pub extra_isize: u16,
    /// Project id.
    pub projid: u32,
    /// The raw inode record, for the in-inode xattr area.
    pub raw: Vec<u8>,
}

/// The checksum an inode record should carry.
///
/// Every inode read verifies it and every inode write sets it, several
/// times per namespace operation: the record is summed in four calls (the
/// checksum fields as zeros), not one per field.
pub fn inode_checksum(sb: &Superblock, ino: u32, raw: &[u8]) -> u32 {
    let mut seed = [0u8; 8];
    seed[..4].copy_from_slice(&ino.to_le_bytes());
    seed[4..].copy_from_slice(&raw[0x64..0x68]);
    let mut c = crc32c(sb.csum_seed(), &seed);
    let has_hi = raw.len() > GOOD_OLD_INODE_SIZE && GOOD_OLD_INODE_SIZE + usize::from(le16(raw, 0x80)) >= 0x84;
    c = crc32c(c, &raw[..0x7C]);
    if raw.len() > GOOD_OLD_INODE_SIZE {
        // i_checksum_lo (0x7C), i_osd2's last two bytes, i_extra_isize,
        // then i_checksum_hi (0x82) if the extra area covers it.
        let mut mid = [0u8; 8];
        mid[2..6].copy_from_slice(&raw[0x7E..0x82]);
        if !has_hi {
            mid[6..].copy_from_slice(&raw[0x82..0x84]);
        }
        c = crc32c(c, &mid);
        c = crc32c(c, &raw[0x84..]);
    } else {
        c = crc32c(c, &[0, 0]);
        c = crc32c(c, &raw[0x7E..]);
    }
    if has_hi {
        c
    } else {
        c & 0xFFFF
    }
}

impl Inode {
    /// `i_blocks` (512-byte units) less `sectors`, or a corruption error
    /// when the inode counts fewer than that (never clamped: see
    /// `sub_counter`).
    pub fn blocks_less(&self, sectors: u64) -> Result<u64> {
        crate::error::sub_counter(self.blocks_512, sectors, "i_blocks", Structure::Inode, Location::Inode(self.ino))
    }

    /// Parses inode `ino` from its record `raw` (exactly `inode_size`
    /// bytes) and verifies its checksum. `block` is the inode table block,
    /// for error messages.
    pub fn parse(sb: &Superblock, ino: u32, raw: &[u8], block: u64) -> Result<Inode> {
        Self::parse_inner(sb, ino, raw, block, true)
    }

    /// [`Inode::parse`] of a record whose checksum was verified already
    /// (an unchanged cached copy): every other check is made.
    pub fn parse_verified(sb: &Superblock, ino: u32, raw: &[u8], block: u64) -> Result<Inode> {
        Self::parse_inner(sb, ino, raw, block, false)
    }

    fn parse_inner(sb: &Superblock, ino: u32, raw: &[u8], block: u64, verify: bool) -> Result<Inode> {
        let isz = usize::from(sb.inode_size);
        if raw.len() < isz || isz < GOOD_OLD_INODE_SIZE {
            return Err(Error::corruption(
                Structure::Inode,
                Location::inode_block(ino, block),
                CorruptKind::TooShort { len: raw.len(), need: isz.max(GOOD_OLD_INODE_SIZE) },
            ));
        }
        let b = &raw[..isz];
        let extra_isize = if isz > GOOD_OLD_INODE_SIZE { le16(b, 0x80) } else { 0 };
        if isz > GOOD_OLD_INODE_SIZE
            && (GOOD_OLD_INODE_SIZE + usize::from(extra_isize) > isz || !extra_isize.is_multiple_of(4))
        {
            return Err(Error::corruption(
                Structure::Inode,
                Location::inode_block(ino, block),
                CorruptKind::OutOfRange { field: "i_extra_isize", value: u64::from(extra_isize) },
            ));
        }
        if verify && sb.has_metadata_csum() {
            let has_hi = GOOD_OLD_INODE_SIZE + usize::from(extra_isize) >= 0x84;
            let stored = u32::from(le16(b, 0x7C)) | if has_hi { u32::from(le16(b, 0x82)) << 16 } else { 0 };
            let computed = inode_checksum(sb, ino, b);
            // An all-zero record is an inode that was never initialised
            // (lazy itable init); the kernel accepts it.
            if stored != computed && b.iter().any(|&x| x != 0) {
                return Err(Error::Checksum { structure: Structure::Inode, block, ino, stored, computed });
            }
        }
        // A field in the extra area exists only if extra_isize covers it.
        let extra = |off: usize| -> Option<u32> {
            (GOOD_OLD_INODE_SIZE + usize::from(extra_isize) >= off + 4).then(|| le32(b, off))
        };
        let flags = le32(b, 0x20);
        let blocks_lo = u64::from(le32(b, 0x1C));
        let huge = sb.features.has_ro_compat(ro_compat::HUGE_FILE);
        let blocks_hi = if huge { u64::from(le16(b, 0x74)) } else { 0 };
        let mut blocks = blocks_lo | (blocks_hi << 32);
        if huge && flags & FL_HUGE_FILE != 0 {
            blocks = blocks.saturating_mul(u64::from(sb.block_size() / 512));
        }
        let mut block_arr = [0u8; I_BLOCK_SIZE];
        block_arr.copy_from_slice(&b[0x28..0x28 + I_BLOCK_SIZE]);
        Ok(Inode {
            ino,
            mode: le16(b, 0x0),
            uid: u32::from(le16(b, 0x2)) | (u32::from(le16(b, 0x78)) << 16),
            gid: u32::from(le16(b, 0x18)) | (u32::from(le16(b, 0x7A)) << 16),
            size: lo_hi(le32(b, 0x4), le32(b, 0x6C)),
            atime: Timestamp::decode(le32(b, 0x8), extra(0x8C)),
            ctime: Timestamp::decode(le32(b, 0xC), extra(0x84)),
            mtime: Timestamp::decode(le32(b, 0x10), extra(0x88)),
            crtime: extra(0x90).map(|s| Timestamp::decode(s, extra(0x94))),
            dtime: le32(b, 0x14),
            links_count: le16(b, 0x1A),
            blocks_512: blocks,
            flags,
            version: lo_hi(le32(b, 0x24), extra(0x98).unwrap_or(0)),
            block: block_arr,
            generation: le32(b, 0x64),
            file_acl: lo_hi(le32(b, 0x68), u32::from(le16(b, 0x76))),
            extra_isize,
            projid: extra(0x9C).unwrap_or(0),
            raw: b.to_vec(),
        })
    }

    /// A new, zeroed inode record of the filesystem's inode size with
    /// room for the extra fields this implementation writes.
    pub fn new_raw(sb: &Superblock, ino: u32) -> Inode {
        let isz = usize::from(sb.inode_size);
        let extra_isize = if isz > GOOD_OLD_INODE_SIZE {
            sb.want_extra_isize.clamp(32, (isz - GOOD_OLD_INODE_SIZE) as u16)
        } else {
            0
        };
        Inode {
            ino,
            mode: 0,
            uid: 0,
            gid: 0,
            size: 0,
            atime: Timestamp::default(),
            ctime: Timestamp::default(),
            mtime: Timestamp::default(),
            crtime: (extra_isize >= 24).then_some(Timestamp::default()),
            dtime: 0,
            links_count: 0,
            blocks_512: 0,
            flags: 0,
            version: 0,
            block: [0; I_BLOCK_SIZE],
            generation: 0,
            file_acl: 0,
            extra_isize,
            projid: 0,
            raw: vec![0; isz],
        }
    }

    /// Encodes the inode into its record (`raw`, which keeps fields this
    /// version does not interpret) and sets the checksum; returns the
    /// record. Fails if `blocks_512` cannot be represented.
    pub fn encode(&mut self, sb: &Superblock) -> Result<&[u8]> {
        let isz = usize::from(sb.inode_size);
        self.raw.resize(isz, 0);
        let huge = sb.features.has_ro_compat(ro_compat::HUGE_FILE);
        // i_blocks: 32 bits of sectors, 48 with huge_file, beyond that in
        // filesystem blocks with the HUGE_FILE flag.
        let limit = if huge { 1u64 << 48 } else { 1u64 << 32 };
        let (blocks, flags) = if self.blocks_512 < limit {
            (self.blocks_512, self.flags & !FL_HUGE_FILE)
        } else if huge && self.blocks_512 / u64::from(sb.block_size() / 512) < 1 << 48 {
            (self.blocks_512 / u64::from(sb.block_size() / 512), self.flags | FL_HUGE_FILE)
        } else {
            return Err(Error::Invalid(format!("inode {}: {} sectors do not fit i_blocks", self.ino, self.blocks_512)));
        };
        let extra_isize = self.extra_isize;
        let b = &mut self.raw[..];
        let fits = |off: usize| GOOD_OLD_INODE_SIZE + usize::from(extra_isize) >= off + 4;
        put_le16(b, 0x0, self.mode);
        put_le16(b, 0x2, self.uid as u16);
        put_le32(b, 0x4, self.size as u32);
        let (a, ax) = self.atime.encode();
        let (c, cx) = self.ctime.encode();
        let (m, mx) = self.mtime.encode();
        put_le32(b, 0x8, a);
        put_le32(b, 0xC, c);
        put_le32(b, 0x10, m);
        put_le32(b, 0x14, self.dtime);
        put_le16(b, 0x18, self.gid as u16);
        put_le16(b, 0x1A, self.links_count);
        put_le32(b, 0x1C, blocks as u32);
        put_le32(b, 0x20, flags);
        put_le32(b, 0x24, self.version as u32);
        b[0x28..0x28 + I_BLOCK_SIZE].copy_from_slice(&self.block);
        put_le32(b, 0x64, self.generation);
        put_le32(b, 0x68, self.file_acl as u32);
        put_le32(b, 0x6C, (self.size >> 32) as u32);
        put_le16(b, 0x74, if huge { (blocks >> 32) as u16 } else { 0 });
        put_le16(b, 0x76, (self.file_acl >> 32) as u16);
        put_le16(b, 0x78, (self.uid >> 16) as u16);
        put_le16(b, 0x7A, (self.gid >> 16) as u16);
        if isz > GOOD_OLD_INODE_SIZE {
            put_le16(b, 0x80, extra_isize);
            if fits(0x84) {
                put_le32(b, 0x84, cx);
            }
            if fits(0x88) {
                put_le32(b, 0x88, mx);
            }
            if fits(0x8C) {
                put_le32(b, 0x8C, ax);
            }
            if let (Some(cr), true) = (self.crtime, fits(0x90)) {
                let (s, x) = cr.encode();
                put_le32(b, 0x90, s);
                if fits(0x94) {
                    put_le32(b, 0x94, x);
                }
            }
            if fits(0x98) {
                put_le32(b, 0x98, (self.version >> 32) as u32);
            }
            if fits(0x9C) {
                put_le32(b, 0x9C, self.projid);
            }
        }
        self.flags = flags;
        if sb.has_metadata_csum() {
            let c = inode_checksum(sb, self.ino, &self.raw);
            let b = &mut self.raw[..];
            put_le16(b, 0x7C, c as u16);
            if isz > GOOD_OLD_INODE_SIZE && GOOD_OLD_INODE_SIZE + usize::from(extra_isize) >= 0x84 {
                put_le16(b, 0x82, (c >> 16) as u16);
            }
        }
        Ok(&self.raw)
    }

    /// The file type, or a corruption error for an invalid mode.
    pub fn file_type(&self) -> Result<FileType> {
        FileType::from_mode(self.mode).ok_or_else(|| {
            Error::corruption(
                Structure::Inode,
                Location::Inode(self.ino),
                CorruptKind::OutOfRange { field: "i_mode", value: u64::from(self.mode) },
            )
        })
    }

    /// Permission bits (including setuid/setgid/sticky).
    pub fn perm(&self) -> u16 {
        self.mode & 0o7777
    }

    /// True if the inode maps its data with an extent tree.
    pub fn uses_extents(&self) -> bool {
        self.flags & FL_EXTENTS != 0
    }

    /// True if the inode has inline data.
    pub fn has_inline_data(&self) -> bool {
        self.flags & FL_INLINE_DATA != 0
    }

    /// Device number of a character or block device node, as (major, minor).
    /// Old encoding in `i_block[0]`, new (huge) encoding in `i_block[1]`.
    pub fn device(&self) -> (u32, u32) {
        let old = le32(&self.block, 0);
        if old != 0 {
            ((old >> 8) & 0xFF, old & 0xFF)
        } else {
            let new = le32(&self.block, 4);
            ((new & 0xFFF00) >> 8, (new & 0xFF) | ((new >> 12) & 0xFFF00))
        }
    }

    /// The in-inode extended attribute area (after the extra fields), if
    /// the inode is large enough to have one.
    pub fn xattr_area(&self) -> &[u8] {
        let start = GOOD_OLD_INODE_SIZE + usize::from(self.extra_isize);
        self.raw.get(start..).unwrap_or(&[])
    }
}

#[cfg(test)]
mod checksum_tests {
    use super::*;

    /// The field-by-field definition (e2fsprogs' ext2fs_inode_csum).
    fn reference(sb: &Superblock, ino: u32, raw: &[u8]) -> u32 {
        let mut c = crc32c(sb.csum_seed(), &ino.to_le_bytes());
        c = crc32c(c, &le32(raw, 0x64).to_le_bytes());
        let has_hi = raw.len() > GOOD_OLD_INODE_SIZE && GOOD_OLD_INODE_SIZE + usize::from(le16(raw, 0x80)) >= 0x84;
        c = crc32c(c, &raw[..0x7C]);
        c = crc32c(c, &[0, 0]);
        if raw.len() > GOOD_OLD_INODE_SIZE {
            c = crc32c(c, &raw[0x7E..0x82]);
            c = crc32c(c, if has_hi { &[0, 0] } else { &raw[0x82..0x84] });
            c = crc32c(c, &raw[0x84..]);
        } else {
            c = crc32c(c, &raw[0x7E..]);
        }
        if has_hi {
            c
        } else {
            c & 0xFFFF
        }
    }

    #[test]
    fn matches_the_field_by_field_definition() {
        let sb = crate::format::superblock::mkfs_superblock();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for size in [128usize, 256, 512, 1024] {
            for extra in [0u16, 2, 4, 28, 32, 96] {
                let mut raw = vec![0u8; size];
                for b in raw.iter_mut() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *b = x as u8;
                }
                if size > GOOD_OLD_INODE_SIZE {
                    raw[0x80..0x82].copy_from_slice(&extra.to_le_bytes());
                }
                for ino in [1u32, 11, 0x1234_5678] {
                    assert_eq!(inode_checksum(&sb, ino, &raw), reference(&sb, ino, &raw), "size {size} extra {extra}");
                }
            }
        }
    }
}
