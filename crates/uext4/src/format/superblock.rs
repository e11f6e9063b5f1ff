//! The ext4 superblock (1024 bytes at byte offset 1024 of the device).

use super::bytes::{le16, le32, le64, lo_hi, u8_at};
use super::checksum::crc32c;
use super::features::{incompat, ro_compat, Features};
use crate::error::{CorruptKind, Error, Location, Result, Structure};

/// Size of the on-disk superblock.
pub const SUPERBLOCK_SIZE: usize = 1024;
/// Byte offset of the primary superblock on the device.
pub const SUPERBLOCK_OFFSET: u64 = 1024;
/// The ext2/3/4 magic number.
pub const EXT4_MAGIC: u16 = 0xEF53;
/// Offset of `s_checksum`, the last field: the crc covers everything before.
const CHECKSUM_OFFSET: usize = 0x3FC;

/// `s_flags` bit: directory hashes use unsigned chars.
pub const FLAG_UNSIGNED_HASH: u32 = 0x2;
/// `s_state` bit: cleanly unmounted.
pub const STATE_VALID: u16 = 0x1;
/// `s_state` bit: errors detected.
pub const STATE_ERROR: u16 = 0x2;
/// `s_state` bit: orphans being recovered.
pub const STATE_ORPHAN: u16 = 0x4;

/// The names of the `s_first_error_errcode` / `s_last_error_errcode`
/// values, indexed by code: the kernel's `EXT4_ERR_*` (fs/ext4/ext4.h),
/// spelled as e2fsprogs' `e2p_errcode2str` prints them (0: none
/// recorded). One table for the writer ([`errno_to_errcode`]) and every
/// reader, so the two cannot drift apart.
pub const ERRCODE_NAMES: [&str; 18] = [
    "",
    "UNKNOWN",
    "EIO",
    "ENOMEM",
    "EFSBADCRC",
    "EFSCORRUPTED",
    "ENOSPC",
    "ENOKEY",
    "EROFS",
    "EFBIG",
    "EEXIST",
    "ERANGE",
    "EOVERFLOW",
    "EBUSY",
    "ENOTDIR",
    "ENOTEMPTY",
    "ESHUTDOWN",
    "EFAULT",
];

/// The name of error code `code` as dumpe2fs prints it
/// (`UNKNOWN_ERRCODE_<n>` past the table, "" for 0).
pub fn errcode_name(code: u8) -> String {
    match ERRCODE_NAMES.get(usize::from(code)) {
        Some(n) => (*n).to_string(),
        None => format!("UNKNOWN_ERRCODE_{code}"),
    }
}

/// The code the kernel records for errno `errno` (ext4_errno_to_code).
/// EFSBADCRC and EFSCORRUPTED are EBADMSG and EUCLEAN in Linux; 0 counts
/// as corruption (an ext4_error without an errno); anything not in the
/// table is `EXT4_ERR_UNKNOWN` (1).
pub fn errno_to_errcode(errno: i32) -> u8 {
    let name = match errno {
        libc::EIO => "EIO",
        libc::ENOMEM => "ENOMEM",
        libc::EBADMSG => "EFSBADCRC",
        0 | libc::EUCLEAN => "EFSCORRUPTED",
        libc::ENOSPC => "ENOSPC",
        libc::ENOKEY => "ENOKEY",
        libc::EROFS => "EROFS",
        libc::EFBIG => "EFBIG",
        libc::EEXIST => "EEXIST",
        libc::ERANGE => "ERANGE",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EBUSY => "EBUSY",
        libc::ENOTDIR => "ENOTDIR",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ESHUTDOWN => "ESHUTDOWN",
        libc::EFAULT => "EFAULT",
        _ => "UNKNOWN",
    };
    ERRCODE_NAMES.iter().position(|n| *n == name).map_or(1, |i| i as u8)
}

/// A parsed, validated superblock.
///
/// The raw bytes are kept so that later writers update fields in place and
/// never lose fields this version does not interpret.
#[derive(Clone)]
pub struct Superblock {
    raw: Box<[u8; SUPERBLOCK_SIZE]>,
    /// Total inodes.
    pub inodes_count: u32,
    /// Total blocks (64-bit when the 64bit feature is on).
    pub blocks_count: u64,
    /// Blocks reserved for the superuser.
    pub r_blocks_count: u64,
    /// Free blocks as last recorded in the superblock (a hint; groups are authoritative).
    pub free_blocks_count: u64,
    /// Free inodes as last recorded in the superblock.
    pub free_inodes_count: u32,
    /// First data block: 1 for 1 KiB blocks, 0 otherwise.
    pub first_data_block: u32,
    /// log2(block size) - 10.
    pub log_block_size: u32,
    /// log2(cluster size) - 10 (bigalloc).
    pub log_cluster_size: u32,
    /// Blocks per group.
    pub blocks_per_group: u32,
    /// Clusters per group.
    pub clusters_per_group: u32,
    /// Inodes per group.
    pub inodes_per_group: u32,
    /// Last mount time.
    pub mtime: u64,
    /// Last write time.
    pub wtime: u64,
    /// Mounts since last check.
    pub mnt_count: u16,
    /// Mounts allowed before a check.
    pub max_mnt_count: i16,
    /// State flags (`STATE_*`).
    pub state: u16,
    /// Behaviour on errors (1 continue, 2 remount-ro, 3 panic).
    pub errors: u16,
    /// Minor revision level.
    pub minor_rev_level: u16,
    /// Time of last check.
    pub lastcheck: u64,
    /// Maximum time between checks.
    pub checkinterval: u32,
    /// Creator OS.
    pub creator_os: u32,
    /// Revision level (0 = original, 1 = dynamic).
    pub rev_level: u32,
    /// Default uid for reserved blocks.
    pub def_resuid: u16,
    /// Default gid for reserved blocks.
    pub def_resgid: u16,
    /// First non-reserved inode.
    pub first_ino: u32,
    /// Inode record size.
    pub inode_size: u16,
    /// Feature words.
    pub features: Features,
    /// Volume UUID.
    pub uuid: [u8; 16],
    /// Volume label.
    pub volume_name: [u8; 16],
    /// Directory where last mounted.
    pub last_mounted: [u8; 64],
    /// Reserved GDT blocks for online resize.
    pub reserved_gdt_blocks: u16,
    /// Journal UUID (external journal).
    pub journal_uuid: [u8; 16],
    /// Journal inode number.
    pub journal_inum: u32,
    /// External journal device number.
    pub journal_dev: u32,
    /// Head of the orphan inode list.
    pub last_orphan: u32,
    /// htree hash seed.
    pub hash_seed: [u32; 4],
    /// Default hash version for new directories.
    pub def_hash_version: u8,
    /// Group descriptor size (32 unless 64bit).
    pub desc_size: u16,
    /// Default mount options.
    pub default_mount_opts: u32,
    /// First meta block group (meta_bg).
    pub first_meta_bg: u32,
    /// Filesystem creation time.
    pub mkfs_time: u64,
    /// Backup of the journal inode's i_block and size.
    pub jnl_blocks: [u32; 17],
    /// Minimum extra inode size all inodes have.
    pub min_extra_isize: u16,
    /// Extra inode size new inodes should have.
    pub want_extra_isize: u16,
    /// Miscellaneous flags (`FLAG_*`).
    pub flags: u32,
    /// RAID stride.
    pub raid_stride: u16,
    /// MMP update interval.
    pub mmp_interval: u16,
    /// MMP block.
    pub mmp_block: u64,
    /// RAID stripe width.
    pub raid_stripe_width: u32,
    /// log2(groups per flex group).
    pub log_groups_per_flex: u8,
    /// Metadata checksum algorithm (1 = crc32c).
    pub checksum_type: u8,
    /// KiB written over the filesystem's lifetime.
    pub kbytes_written: u64,
    /// Number of errors seen.
    pub error_count: u32,
    /// User quota inode.
    pub usr_quota_inum: u32,
    /// Group quota inode.
    pub grp_quota_inum: u32,
    /// Project quota inode.
    pub prj_quota_inum: u32,
    /// Overhead blocks (0 = compute).
    pub overhead_blocks: u32,
    /// Backup groups (sparse_super2).
    pub backup_bgs: [u32; 2],
    /// lost+found inode (0 = look it up).
    pub lpf_ino: u32,
    /// Checksum seed stored on disk (metadata_csum_seed).
    pub checksum_seed: u32,
    /// Orphan file inode (orphan_file).
    pub orphan_file_inum: u32,
    /// Stored superblock checksum.
    pub checksum: u32,
}

impl std::fmt::Debug for Superblock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Superblock")
            .field("blocks_count", &self.blocks_count)
            .field("inodes_count", &self.inodes_count)
            .field("block_size", &self.block_size())
            .field("features", &self.features)
            .finish_non_exhaustive()
    }
}

fn time(lo: u32, hi: u8) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

/// A superblock field `field` holding `value`, which is out of range.
fn bad(field: &'static str, value: impl Into<u64>) -> Error {
    Error::corruption(Structure::Superblock, Location::Block(0), CorruptKind::OutOfRange { field, value: value.into() })
}

/// A superblock field `field` holding `value` where the geometry implies
/// `expected`.
fn mismatch(field: &'static str, value: impl Into<u64>, expected: u64) -> Error {
    Error::corruption(
        Structure::Superblock,
        Location::Block(0),
        CorruptKind::Mismatch { field, value: value.into(), expected },
    )
}

impl Superblock {
    /// Parses and validates a superblock. `bytes` must be the 1024 bytes read
    /// at [`SUPERBLOCK_OFFSET`]. Geometry that would make later arithmetic
    /// overflow or index out of range is rejected here, once.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let raw: [u8; SUPERBLOCK_SIZE] = bytes
            .get(..SUPERBLOCK_SIZE)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| Error::NotExt4("image too small for a superblock".into()))?;
        let b = &raw[..];
        if le16(b, 0x38) != EXT4_MAGIC {
            return Err(Error::NotExt4(format!("bad magic {:#06x}", le16(b, 0x38))));
        }
        let features = Features { compat: le32(b, 0x5C), incompat: le32(b, 0x60), ro_compat: le32(b, 0x64) };
        let is64 = features.has_incompat(incompat::BIT64);
        let arr = |off: usize, n: usize| -> Vec<u8> { b[off..off + n].to_vec() };
        let uuid: [u8; 16] = arr(0x68, 16).try_into().unwrap_or([0; 16]);
        let volume_name: [u8; 16] = arr(0x78, 16).try_into().unwrap_or([0; 16]);
        let last_mounted: [u8; 64] = arr(0x88, 64).try_into().unwrap_or([0; 64]);
        let journal_uuid: [u8; 16] = arr(0xD0, 16).try_into().unwrap_or([0; 16]);
        let mut jnl_blocks = [0u32; 17];
        for (i, v) in jnl_blocks.iter_mut().enumerate() {
            *v = le32(b, 0x10C + 4 * i);
        }
        let rev_level = le32(b, 0x4C);
        let sb = Superblock {
            inodes_count: le32(b, 0x0),
            blocks_count: lo_hi(le32(b, 0x4), if is64 { le32(b, 0x150) } else { 0 }),
            r_blocks_count: lo_hi(le32(b, 0x8), if is64 { le32(b, 0x154) } else { 0 }),
            free_blocks_count: lo_hi(le32(b, 0xC), if is64 { le32(b, 0x158) } else { 0 }),
            free_inodes_count: le32(b, 0x10),
            first_data_block: le32(b, 0x14),
            log_block_size: le32(b, 0x18),
            log_cluster_size: le32(b, 0x1C),
            blocks_per_group: le32(b, 0x20),
            clusters_per_group: le32(b, 0x24),
            inodes_per_group: le32(b, 0x28),
            mtime: time(le32(b, 0x2C), u8_at(b, 0x275)),
            wtime: time(le32(b, 0x30), u8_at(b, 0x274)),
            mnt_count: le16(b, 0x34),
            max_mnt_count: le16(b, 0x36) as i16,
            state: le16(b, 0x3A),
            errors: le16(b, 0x3C),
            minor_rev_level: le16(b, 0x3E),
            lastcheck: time(le32(b, 0x40), u8_at(b, 0x277)),
            checkinterval: le32(b, 0x44),
            creator_os: le32(b, 0x48),
            rev_level,
            def_resuid: le16(b, 0x50),
            def_resgid: le16(b, 0x52),
            first_ino: if rev_level == 0 { 11 } else { le32(b, 0x54) },
            inode_size: if rev_level == 0 { 128 } else { le16(b, 0x58) },
            features,
            uuid,
            volume_name,
            last_mounted,
            reserved_gdt_blocks: le16(b, 0xCE),
            journal_uuid,
            journal_inum: le32(b, 0xE0),
            journal_dev: le32(b, 0xE4),
            last_orphan: le32(b, 0xE8),
            hash_seed: [le32(b, 0xEC), le32(b, 0xF0), le32(b, 0xF4), le32(b, 0xF8)],
            def_hash_version: u8_at(b, 0xFC),
            desc_size: if is64 { le16(b, 0xFE) } else { 32 },
            default_mount_opts: le32(b, 0x100),
            first_meta_bg: le32(b, 0x104),
            mkfs_time: time(le32(b, 0x108), u8_at(b, 0x276)),
            jnl_blocks,
            min_extra_isize: le16(b, 0x15C),
            want_extra_isize: le16(b, 0x15E),
            flags: le32(b, 0x160),
            raid_stride: le16(b, 0x164),
            mmp_interval: le16(b, 0x166),
            mmp_block: le64(b, 0x168),
            raid_stripe_width: le32(b, 0x170),
            log_groups_per_flex: u8_at(b, 0x174),
            checksum_type: u8_at(b, 0x175),
            kbytes_written: le64(b, 0x178),
            error_count: le32(b, 0x194),
            usr_quota_inum: le32(b, 0x240),
            grp_quota_inum: le32(b, 0x244),
            overhead_blocks: le32(b, 0x248),
            backup_bgs: [le32(b, 0x24C), le32(b, 0x250)],
            lpf_ino: le32(b, 0x268),
            prj_quota_inum: le32(b, 0x26C),
            checksum_seed: le32(b, 0x270),
            orphan_file_inum: le32(b, 0x280),
            checksum: le32(b, CHECKSUM_OFFSET),
            raw: Box::new(raw),
        };
        sb.validate()?;
        Ok(sb)
    }

    fn validate(&self) -> Result<()> {
        if self.has_metadata_csum() {
            if self.checksum_type != 1 {
                return Err(bad("s_checksum_type", self.checksum_type));
            }
            let computed = crc32c(!0, &self.raw[..CHECKSUM_OFFSET]);
            if computed != self.checksum {
                return Err(Error::Checksum {
                    structure: Structure::Superblock,
                    block: 0,
                    ino: 0,
                    stored: self.checksum,
                    computed,
                });
            }
        }
        if self.log_block_size > 6 {
            return Err(bad("s_log_block_size", self.log_block_size));
        }
        let bs = self.block_size();
        let bigalloc = self.features.has_ro_compat(ro_compat::BIGALLOC);
        // mke2fs puts the first data block at 0 for bigalloc even with
        // 1 KiB blocks; otherwise 1 KiB blocks start at block 1.
        let first_ok = self.first_data_block == u32::from(bs == 1024) || (bigalloc && self.first_data_block == 0);
        if !first_ok {
            return Err(mismatch("s_first_data_block", self.first_data_block, u64::from(bs == 1024)));
        }
        if bigalloc {
            if self.log_cluster_size < self.log_block_size || self.log_cluster_size > 16 + self.log_block_size {
                return Err(bad("s_log_cluster_size", self.log_cluster_size));
            }
            if self.clusters_per_group == 0 || u64::from(self.clusters_per_group) > 8 * u64::from(bs) {
                return Err(bad("s_clusters_per_group", self.clusters_per_group));
            }
            let ratio = self.log_cluster_size - self.log_block_size;
            if u64::from(self.blocks_per_group) != u64::from(self.clusters_per_group) << ratio {
                return Err(mismatch(
                    "s_blocks_per_group",
                    self.blocks_per_group,
                    u64::from(self.clusters_per_group) << ratio,
                ));
            }
        } else if self.log_cluster_size != self.log_block_size {
            // The kernel refuses this too ("fragment/cluster size != block size").
            return Err(mismatch("s_log_cluster_size", self.log_cluster_size, u64::from(self.log_block_size)));
        } else if self.blocks_per_group == 0 || u64::from(self.blocks_per_group) > 8 * u64::from(bs) {
            return Err(bad("s_blocks_per_group", self.blocks_per_group));
        }
        if self.inodes_per_group == 0 || u64::from(self.inodes_per_group) > 8 * u64::from(bs) {
            return Err(bad("s_inodes_per_group", self.inodes_per_group));
        }
        let isz = u32::from(self.inode_size);
        if isz < 128 || !isz.is_power_of_two() || isz > bs {
            return Err(bad("s_inode_size", isz));
        }
        if self.rev_level > 0 && (self.first_ino < 11 || self.first_ino > self.inodes_count) {
            return Err(bad("s_first_ino", self.first_ino));
        }
        if self.features.has_incompat(incompat::BIT64) {
            let ds = u32::from(self.desc_size);
            if !(64..=1024).contains(&ds) || !ds.is_power_of_two() {
                return Err(bad("s_desc_size", ds));
            }
        }
        if self.blocks_count <= u64::from(self.first_data_block) {
            return Err(bad("s_blocks_count", self.blocks_count));
        }
        // The kernel refuses block counts beyond 2^48 blocks in practice;
        // also keeps byte offsets within u64.
        if self.blocks_count >= 1u64 << 48 {
            return Err(bad("s_blocks_count", self.blocks_count));
        }
        let groups = self.group_count();
        if groups == 0 || groups > u64::from(u32::MAX) {
            return Err(bad("group count", groups));
        }
        if u64::from(self.inodes_count) != groups * u64::from(self.inodes_per_group) {
            return Err(mismatch("s_inodes_count", self.inodes_count, groups * u64::from(self.inodes_per_group)));
        }
        if self.log_groups_per_flex > 31 {
            return Err(bad("s_log_groups_per_flex", self.log_groups_per_flex));
        }
        Ok(())
    }

    /// Sets the free block and inode counts, in the parsed fields and the
    /// raw bytes, and recomputes the checksum.
    pub fn set_free_counts(&mut self, free_blocks: u64, free_inodes: u32) {
        use super::bytes::put_le32;
        self.free_blocks_count = free_blocks;
        self.free_inodes_count = free_inodes;
        put_le32(&mut self.raw[..], 0xC, free_blocks as u32);
        if self.features.has_incompat(incompat::BIT64) {
            put_le32(&mut self.raw[..], 0x158, (free_blocks >> 32) as u32);
        }
        put_le32(&mut self.raw[..], 0x10, free_inodes);
        self.update_checksum();
    }

    /// Sets `s_block_group_nr` (which group a backup copy lives in) and
    /// recomputes the checksum.
    pub fn set_block_group_nr(&mut self, g: u16) {
        super::bytes::put_le16(&mut self.raw[..], 0x5A, g);
        self.update_checksum();
    }

    /// Sets the last mount time (`s_mtime`, `s_mtime_hi`), in seconds.
    pub fn set_mount_time(&mut self, sec: u64) {
        super::bytes::put_le32(&mut self.raw[..], 0x2C, sec as u32);
        self.raw[0x275] = (sec >> 32) as u8;
        self.mtime = sec;
    }

    /// Counts one more mount (`s_mnt_count`, wrapping as the kernel's
    /// le16_add_cpu does).
    pub fn bump_mount_count(&mut self) {
        self.mnt_count = self.mnt_count.wrapping_add(1);
        super::bytes::put_le16(&mut self.raw[..], 0x34, self.mnt_count);
    }

    /// Sets `s_state` (`STATE_*` bits).
    pub fn set_state(&mut self, state: u16) {
        self.state = state;
        super::bytes::put_le16(&mut self.raw[..], 0x3A, state);
    }

    /// Sets or clears INCOMPAT_RECOVER: the journal holds transactions to
    /// replay (set while mounted, cleared once the log is empty).
    pub fn set_needs_recovery(&mut self, on: bool) {
        if on {
            self.features.incompat |= incompat::RECOVER;
        } else {
            self.features.incompat &= !incompat::RECOVER;
        }
        super::bytes::put_le32(&mut self.raw[..], 0x60, self.features.incompat);
    }

    /// Sets or clears RO_COMPAT_ORPHAN_PRESENT: the orphan file may hold
    /// entries (set at a read-write mount, cleared at a clean unmount
    /// that leaves the orphan file empty, as the kernel does).
    pub fn set_orphan_present(&mut self, on: bool) {
        if on {
            self.features.ro_compat |= ro_compat::ORPHAN_PRESENT;
        } else {
            self.features.ro_compat &= !ro_compat::ORPHAN_PRESENT;
        }
        super::bytes::put_le32(&mut self.raw[..], 0x64, self.features.ro_compat);
    }

    /// Sets `s_last_orphan`, the head of the orphan-inode list.
    pub fn set_last_orphan(&mut self, ino: u32) {
        self.last_orphan = ino;
        super::bytes::put_le32(&mut self.raw[..], 0xE8, ino);
    }

    /// Sets `s_last_orphan` in `raw`, the bytes of a superblock already
    /// checked (the copy in its block, as a transaction changes it), and
    /// recomputes `s_checksum` if `metadata_csum`: one field changed
    /// without parsing the whole superblock (the orphan list's head
    /// changes with every file unlinked while open).
    pub fn patch_last_orphan(raw: &mut [u8], metadata_csum: bool, ino: u32) {
        if raw.len() < SUPERBLOCK_SIZE {
            return;
        }
        super::bytes::put_le32(raw, 0xE8, ino);
        if metadata_csum {
            let c = crc32c(!0, &raw[..CHECKSUM_OFFSET]);
            super::bytes::put_le32(raw, CHECKSUM_OFFSET, c);
        }
    }

    /// Records an error as ext4's `__save_error_info` does: the "errors"
    /// state bit, one more `s_error_count`, and the time (`now`, seconds),
    /// inode, block, function name (cut to 32 bytes), line and error code
    /// (`EXT4_ERR_*`) as the last error, and as the first one too if none
    /// was recorded yet.
    pub fn record_error(&mut self, now: u64, errcode: u8, ino: u32, block: u64, func: &str, line: u32) {
        use super::bytes::{le32, put_le32};
        self.set_state(self.state | STATE_ERROR);
        self.error_count = le32(&self.raw[..], 0x194).saturating_add(1);
        put_le32(&mut self.raw[..], 0x194, self.error_count);
        // (time, time_hi, ino, block, func, line, errcode) offsets.
        const FIRST: (usize, usize, usize, usize, usize, usize, usize) =
            (0x198, 0x278, 0x19C, 0x1A0, 0x1A8, 0x1C8, 0x27A);
        const LAST: (usize, usize, usize, usize, usize, usize, usize) =
            (0x1CC, 0x279, 0x1D0, 0x1D8, 0x1E0, 0x1D4, 0x27B);
        let first_time = u64::from(le32(&self.raw[..], FIRST.0)) | (u64::from(self.raw[FIRST.1]) << 32);
        let raw = &mut self.raw[..];
        let mut put = |(t, thi, i, b, f, l, c): (usize, usize, usize, usize, usize, usize, usize)| {
            put_le32(raw, t, now as u32);
            raw[thi] = (now >> 32) as u8;
            put_le32(raw, i, ino);
            raw[b..b + 8].copy_from_slice(&block.to_le_bytes());
            let mut name = [0u8; 32];
            let n = func.len().min(32);
            name[..n].copy_from_slice(&func.as_bytes()[..n]);
            raw[f..f + 32].copy_from_slice(&name);
            put_le32(raw, l, line);
            raw[c] = errcode;
        };
        if first_time == 0 {
            put(FIRST);
        }
        put(LAST);
    }

    /// The 1024 bytes to write, with `s_checksum` computed (metadata_csum).
    pub fn encode(&mut self) -> &[u8; SUPERBLOCK_SIZE] {
        self.update_checksum();
        &self.raw
    }

    /// Recomputes `s_checksum` over the raw bytes (metadata_csum only).
    pub fn update_checksum(&mut self) {
        if self.has_metadata_csum() {
            let c = crc32c(!0, &self.raw[..CHECKSUM_OFFSET]);
            super::bytes::put_le32(&mut self.raw[..], CHECKSUM_OFFSET, c);
            self.checksum = c;
        }
    }

    /// The raw 1024 bytes as read.
    pub fn raw(&self) -> &[u8; SUPERBLOCK_SIZE] {
        &self.raw
    }

    /// Filename encoding of casefolded directories (`s_encoding`; 1 is
    /// UTF-8 12.1), meaningful with the casefold feature.
    pub fn encoding(&self) -> u16 {
        le16(&self.raw[..], 0x27C)
    }

    /// Encoding flags (`s_encoding_flags`; 0x1: strict mode).
    pub fn encoding_flags(&self) -> u16 {
        le16(&self.raw[..], 0x27E)
    }

    /// Block size in bytes (1 KiB to 64 KiB).
    pub fn block_size(&self) -> u32 {
        1024 << self.log_block_size
    }

    /// Cluster size in bytes: the allocation unit (the block size without
    /// bigalloc).
    pub fn cluster_size(&self) -> u64 {
        1024 << self.log_cluster_size.max(self.log_block_size)
    }

    /// Number of block groups.
    pub fn group_count(&self) -> u64 {
        let data = self.blocks_count - u64::from(self.first_data_block);
        data.div_ceil(u64::from(self.blocks_per_group))
    }

    /// True when metadata_csum is on.
    pub fn has_metadata_csum(&self) -> bool {
        self.features.has_ro_compat(ro_compat::METADATA_CSUM)
    }

    /// True when the older group-descriptor checksum (uninit_bg) is on.
    pub fn has_gdt_csum(&self) -> bool {
        self.features.has_ro_compat(ro_compat::GDT_CSUM)
    }

    /// The seed all metadata_csum checksums start from.
    pub fn csum_seed(&self) -> u32 {
        if self.features.has_incompat(incompat::CSUM_SEED) {
            self.checksum_seed
        } else {
            crc32c(!0, &self.uuid)
        }
    }

    /// Volume label as text (lossy UTF-8, up to the first NUL).
    pub fn label(&self) -> String {
        cstr(&self.volume_name)
    }

    /// Last mount point as text.
    pub fn last_mounted_str(&self) -> String {
        cstr(&self.last_mounted)
    }

    /// True if the journal has transactions that were never replayed.
    pub fn needs_recovery(&self) -> bool {
        self.features.has_incompat(incompat::RECOVER)
    }

    /// The largest size in bytes a file may have: the kernel's
    /// `ext4_max_size` for extent-mapped files (`extents`) and
    /// `ext4_max_bitmap_size` for block-mapped ones. The kernel refuses
    /// ("bad i_size value") any inode larger than this, so writes,
    /// truncates and fallocates past it answer EFBIG.
    pub fn max_file_size(&self, extents: bool) -> u64 {
        let bits = 10 + u64::from(self.log_block_size.min(6));
        let huge = self.features.has_ro_compat(ro_compat::HUGE_FILE);
        // What i_blocks can count: 2^32 - 1 sectors without huge_file,
        // 2^48 - 1 blocks (EXT4_HUGE_FILE_FL) with it.
        let upper_blocks = if huge { (1u64 << 48) - 1 } else { ((1u64 << 32) - 1) >> (bits - 9) };
        let blocks = if extents {
            // ee_block is 32 bits and one extent must be able to cover the
            // last block, so the last logical block is 2^32 - 2.
            ((1u64 << 32) - 1).min(if huge { u64::MAX } else { upper_blocks })
        } else {
            bitmap_max_blocks(bits, upper_blocks)
        };
        // MAX_LFS_FILESIZE on 64-bit kernels.
        blocks.checked_shl(bits as u32).filter(|&b| b <= i64::MAX as u64).unwrap_or(i64::MAX as u64)
    }
}

/// Largest size in blocks of a block-mapped file whose data and indirect
/// blocks together fit in `upper` blocks of i_blocks (ext4_max_bitmap_size).
fn bitmap_max_blocks(bits: u64, upper: u64) -> u64 {
    const NDIR: u64 = 12;
    let ppb = 1u64 << (bits - 2);
    let tree = NDIR + ppb + ppb * ppb + ppb * ppb * ppb;
    let tree_meta = 1 + (1 + ppb) + (1 + ppb + ppb * ppb);
    if tree + tree_meta <= upper {
        return tree;
    }
    // i_blocks is the limit: take away the indirect blocks needed to map
    // `upper` data blocks.
    let mut rest = upper - NDIR - ppb;
    let mut meta = 1;
    if rest < ppb * ppb {
        meta += 1 + rest.div_ceil(ppb);
        return upper - meta;
    }
    meta += 1 + ppb;
    rest -= ppb * ppb;
    meta += 1 + rest.div_ceil(ppb) + rest.div_ceil(ppb * ppb);
    upper - meta
}

/// True if group `g` holds a superblock backup under sparse_super:
/// groups 0 and 1 and the powers of 3, 5 and 7.
pub fn sparse_super_group(g: u64) -> bool {
    if g <= 1 {
        return true;
    }
    if g.is_multiple_of(2) {
        return false;
    }
    [3u64, 5, 7].iter().any(|&base| {
        let mut p = base;
        while p < g {
            p = p.saturating_mul(base);
        }
        p == g
    })
}

/// Text up to the first NUL byte, lossily decoded.
pub fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// The superblock of a fresh 8 MiB image from `uext4 mkfs`'s defaults,
/// for tests that need a real one.
#[cfg(test)]
pub(crate) fn mkfs_superblock() -> Superblock {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("sb.img");
    crate::mkfs::mkfs_file(&img, &crate::mkfs::MkfsOptions { size: 8 << 20, ..Default::default() }).unwrap();
    let bytes = std::fs::read(&img).unwrap();
    let at = SUPERBLOCK_OFFSET as usize;
    Superblock::parse(&bytes[at..at + SUPERBLOCK_SIZE]).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_are_the_kernels() {
        // fs/ext4/ext4.h: EXT4_ERR_UNKNOWN 1, EIO 2, ENOMEM 3, EFSBADCRC 4,
        // EFSCORRUPTED 5, ... EFAULT 17.
        let kernel = [
            (libc::EIO, 2),
            (libc::ENOMEM, 3),
            (libc::EBADMSG, 4),
            (libc::EUCLEAN, 5),
            (0, 5),
            (libc::ENOSPC, 6),
            (libc::ENOKEY, 7),
            (libc::EROFS, 8),
            (libc::EFBIG, 9),
            (libc::EEXIST, 10),
            (libc::ERANGE, 11),
            (libc::EOVERFLOW, 12),
            (libc::EBUSY, 13),
            (libc::ENOTDIR, 14),
            (libc::ENOTEMPTY, 15),
            (libc::ESHUTDOWN, 16),
            (libc::EFAULT, 17),
            (libc::ENOENT, 1),
        ];
        for (errno, code) in kernel {
            assert_eq!(errno_to_errcode(errno), code, "errno {errno}");
        }
        assert_eq!(errcode_name(4), "EFSBADCRC");
        assert_eq!(errcode_name(5), "EFSCORRUPTED");
        assert_eq!(errcode_name(1), "UNKNOWN");
        assert_eq!(errcode_name(18), "UNKNOWN_ERRCODE_18");
    }

    #[test]
    fn rejects_garbage() {
        assert!(matches!(Superblock::parse(&[0u8; 1024]), Err(Error::NotExt4(_))));
        assert!(matches!(Superblock::parse(&[0u8; 10]), Err(Error::NotExt4(_))));
        let mut b = [0xffu8; 1024];
        b[0x38] = 0x53;
        b[0x39] = 0xEF;
        assert!(Superblock::parse(&b).is_err());
    }

    /// Every file of every block size may grow to 16 GiB: the write path
    /// (fs/write.rs, ALWAYS_WRITABLE) skips the limits below that.
    #[test]
    fn every_file_may_reach_16_gib() {
        let mut sb = mkfs_superblock();
        for huge in [false, true] {
            if huge {
                sb.features.ro_compat |= ro_compat::HUGE_FILE;
            } else {
                sb.features.ro_compat &= !ro_compat::HUGE_FILE;
            }
            for log in 0..=6 {
                sb.log_block_size = log;
                for extents in [false, true] {
                    let max = sb.max_file_size(extents);
                    assert!(max >= 16 << 30, "{} KiB blocks, huge {huge}, extents {extents}: {max}", 1 << log);
                }
            }
        }
    }

    /// The setters change their fields and nothing else; the encoding
    /// carries a checksum the parser accepts.
    #[test]
    fn setters_and_encode() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("sb.img");
        let opts = crate::mkfs::MkfsOptions { size: 8 << 20, ..Default::default() };
        crate::mkfs::mkfs_file(&img, &opts).unwrap();
        let bytes = std::fs::read(&img).unwrap();
        let orig = &bytes[SUPERBLOCK_OFFSET as usize..SUPERBLOCK_OFFSET as usize + SUPERBLOCK_SIZE];
        let mut sb = Superblock::parse(orig).unwrap();
        assert!(sb.has_metadata_csum());
        assert_eq!(&sb.encode()[..], orig, "encoding an unchanged superblock changes nothing");

        sb.set_mount_time(1_700_000_000);
        sb.bump_mount_count();
        sb.set_needs_recovery(true);
        sb.set_last_orphan(12);
        sb.set_state(sb.state & !STATE_VALID);
        sb.record_error(1_700_000_001, 4, 12, 99, "first_function_name_longer_than_32_bytes", 7);
        sb.record_error(1_700_000_002, 1, 13, 100, "second", 8);
        let again = Superblock::parse(&sb.encode()[..]).unwrap();
        assert_eq!(again.mtime, 1_700_000_000);
        assert_eq!(again.mnt_count, Superblock::parse(orig).unwrap().mnt_count + 1);
        assert!(again.needs_recovery());
        assert_eq!(again.last_orphan, 12);
        assert_eq!(again.state, STATE_ERROR, "not clean, with errors");
        assert_eq!(again.error_count, 2);
        let raw = again.raw();
        assert_eq!(&raw[0x1A8..0x1C8], b"first_function_name_longer_than_", "first error: cut to 32 bytes");
        assert_eq!(super::super::bytes::le32(&raw[..], 0x198), 1_700_000_001, "first error time kept");
        assert_eq!(super::super::bytes::le32(&raw[..], 0x1CC), 1_700_000_002, "last error time");
        assert_eq!(super::super::bytes::le32(&raw[..], 0x1D0), 13);
        assert_eq!(raw[0x27A], 4);
        assert_eq!(raw[0x27B], 1);
        // Everything outside the fields set is as it was.
        let changed =
            [0x2C..0x30, 0x34..0x36, 0x3A..0x3C, 0x60..0x64, 0xE8..0xEC, 0x194..0x200, 0x275..0x27C, 0x3FC..0x400];
        for (i, (a, b)) in orig.iter().zip(raw.iter()).enumerate() {
            if !changed.iter().any(|r| r.contains(&i)) {
                assert_eq!(a, b, "byte {i:#x} changed");
            }
        }
        sb.set_needs_recovery(false);
        assert!(!Superblock::parse(&sb.encode()[..]).unwrap().needs_recovery());
    }
}
