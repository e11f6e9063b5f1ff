//! The quota files' format (QFMT_VFS_V1, "vfsv1"): what the kernel's
//! quota_v2/quota_tree and e2fsprogs' quotaio_v2/quotaio_tree read and
//! write in the hidden quota inodes of a `quota` filesystem.
//!
//! A quota file is a sequence of 1 KiB quota blocks (independent of the
//! filesystem block size). Block 0 holds the header (magic per quota
//! type, version 1) and the info (grace times and the tree's free lists);
//! block 1 is the root of a 4-level radix tree indexed by the bytes of the
//! id, most significant first; the last level points to data blocks, each
//! a 16-byte header and 14 `v2r1_disk_dqblk` entries. A data block may be
//! shared by ids of different subtrees: a lookup scans it for the id.
//! Data blocks with a free entry are on a doubly linked list (the info's
//! `free_entry`), unused blocks on a singly linked one (`free_blk`).
//!
//! Pure codec: no I/O.

use super::bytes::{le16, le32, put_le16, put_le32};

/// Size of a quota block.
pub const QT_BLOCK_SIZE: usize = 1024;
/// The tree's root block.
pub const TREE_ROOT: u32 = 1;
/// Levels of the tree (the last one points to data blocks).
pub const TREE_DEPTH: usize = 4;
/// Bytes of a `v2r1_disk_dqblk` entry.
pub const DQBLK_SIZE: usize = 72;
/// Bytes of a data block's header (`qt_disk_dqdbheader`).
pub const DATA_HEADER_SIZE: usize = 16;
/// Entries per data block.
pub const ENTRIES_PER_BLOCK: usize = (QT_BLOCK_SIZE - DATA_HEADER_SIZE) / DQBLK_SIZE;
/// The format version this codec reads and writes (v2r1: 64-bit fields).
pub const VERSION: u32 = 1;
/// Offset of the info in block 0 (after the 8-byte header).
const INFO_OFF: usize = 8;
/// Units of the block limits on disk (`QUOTABLOCK_SIZE`).
pub const LIMIT_UNIT: u64 = 1024;

/// The three quota types, in the kernel's order (USRQUOTA, GRPQUOTA, PRJQUOTA).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaType {
    /// Per user (uid).
    User,
    /// Per group (gid).
    Group,
    /// Per project (i_projid).
    Project,
}

impl QuotaType {
    /// All types, in order.
    pub const ALL: [QuotaType; 3] = [QuotaType::User, QuotaType::Group, QuotaType::Project];

    /// The header magic of this type's file.
    pub fn magic(self) -> u32 {
        match self {
            QuotaType::User => 0xD9C0_1F11,
            QuotaType::Group => 0xD9C0_1927,
            QuotaType::Project => 0xD9C0_3F14,
        }
    }

    /// Index in [`QuotaType::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Lower-case name ("user", "group", "project").
    pub fn name(self) -> &'static str {
        match self {
            QuotaType::User => "user",
            QuotaType::Group => "group",
            QuotaType::Project => "project",
        }
    }
}

/// The info of block 0 (`v2_disk_dqinfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Info {
    /// Grace time for block soft limits, seconds.
    pub bgrace: u32,
    /// Grace time for inode soft limits, seconds.
    pub igrace: u32,
    /// Flags (`DQF_*`).
    pub flags: u32,
    /// Quota blocks in the file.
    pub blocks: u32,
    /// First unused block (0: none).
    pub free_blk: u32,
    /// First data block with a free entry (0: none).
    pub free_entry: u32,
}

/// Why block 0 is not a quota file header of the expected type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// The magic is not the type's.
    Magic(u32),
    /// The version is not [`VERSION`].
    Version(u32),
    /// The block is shorter than a quota block.
    Short,
}

/// Checks block 0's header for type `ty` and parses its info.
pub fn parse_header(ty: QuotaType, b: &[u8]) -> Result<Info, HeaderError> {
    if b.len() < QT_BLOCK_SIZE {
        return Err(HeaderError::Short);
    }
    let magic = le32(b, 0);
    if magic != ty.magic() {
        return Err(HeaderError::Magic(magic));
    }
    let version = le32(b, 4);
    if version != VERSION {
        return Err(HeaderError::Version(version));
    }
    let f = |i: usize| le32(b, INFO_OFF + 4 * i);
    Ok(Info { bgrace: f(0), igrace: f(1), flags: f(2), blocks: f(3), free_blk: f(4), free_entry: f(5) })
}

/// Writes the header of type `ty` and `info` into block 0 `b`.
pub fn encode_header(ty: QuotaType, info: &Info, b: &mut [u8]) {
    put_le32(b, 0, ty.magic());
    put_le32(b, 4, VERSION);
    for (i, v) in
        [info.bgrace, info.igrace, info.flags, info.blocks, info.free_blk, info.free_entry].into_iter().enumerate()
    {
        put_le32(b, INFO_OFF + 4 * i, v);
    }
}

/// The index of `id` in a tree block at `depth` (0 = root).
pub fn tree_index(id: u32, depth: usize) -> usize {
    ((id >> (8 * (TREE_DEPTH - 1 - depth.min(TREE_DEPTH - 1)))) & 0xFF) as usize
}

/// Reference `i` (0..256) of index block `b` (0: none).
pub fn index_ref(b: &[u8], i: usize) -> u32 {
    le32(b, 4 * (i & 0xFF))
}

/// Sets reference `i` of index block `b`.
pub fn set_index_ref(b: &mut [u8], i: usize, blk: u32) {
    put_le32(b, 4 * (i & 0xFF), blk);
}

/// A data block's header (`qt_disk_dqdbheader`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DataHeader {
    /// Next block on the free-entry (or free-block) list.
    pub next_free: u32,
    /// Previous block on the free-entry list.
    pub prev_free: u32,
    /// Entries in use.
    pub entries: u16,
}

impl DataHeader {
    /// Parses the header at the start of data block `b`.
    pub fn parse(b: &[u8]) -> DataHeader {
        DataHeader { next_free: le32(b, 0), prev_free: le32(b, 4), entries: le16(b, 8) }
    }

    /// Writes it at the start of `b` (padding zeroed).
    pub fn encode(&self, b: &mut [u8]) {
        put_le32(b, 0, self.next_free);
        put_le32(b, 4, self.prev_free);
        put_le16(b, 8, self.entries);
        put_le16(b, 10, 0);
        put_le32(b, 12, 0);
    }
}

/// Byte offset of entry `i` in a data block.
pub fn entry_offset(i: usize) -> usize {
    DATA_HEADER_SIZE + i * DQBLK_SIZE
}

/// One id's usage and limits (`v2r1_disk_dqblk`, with limits kept in
/// the on-disk 1 KiB units for the block limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dqblk {
    /// The uid, gid or project id.
    pub id: u32,
    /// Hard limit on inodes (0: none).
    pub ihardlimit: u64,
    /// Soft limit on inodes (0: none).
    pub isoftlimit: u64,
    /// Inodes in use.
    pub curinodes: u64,
    /// Hard limit on space, in 1 KiB units (0: none).
    pub bhardlimit: u64,
    /// Soft limit on space, in 1 KiB units (0: none).
    pub bsoftlimit: u64,
    /// Space in use, bytes.
    pub curspace: u64,
    /// When the block soft-limit grace ends (0: not over the soft limit).
    pub btime: u64,
    /// When the inode soft-limit grace ends.
    pub itime: u64,
}

impl Dqblk {
    /// Parses the entry `e` ([`DQBLK_SIZE`] bytes); None for an unused
    /// (all-zero) slot. An entry whose only non-zero field is `itime == 1`
    /// is a used entry with everything zero (the formats' escape).
    pub fn parse(e: &[u8]) -> Option<Dqblk> {
        if e.len() < DQBLK_SIZE || e[..DQBLK_SIZE].iter().all(|&x| x == 0) {
            return None;
        }
        let q = |off: usize| u64::from(le32(e, off)) | u64::from(le32(e, off + 4)) << 32;
        let mut d = Dqblk {
            id: le32(e, 0),
            ihardlimit: q(8),
            isoftlimit: q(16),
            curinodes: q(24),
            bhardlimit: q(32),
            bsoftlimit: q(40),
            curspace: q(48),
            btime: q(56),
            itime: q(64),
        };
        if d == (Dqblk { itime: 1, ..Default::default() }) {
            d.itime = 0;
        }
        Some(d)
    }

    /// Encodes into the entry slot `e` (an all-zero entry is written with
    /// `itime = 1`, so that it is not taken for a free slot).
    pub fn encode(&self, e: &mut [u8]) {
        let mut d = *self;
        if d == Dqblk::default() {
            d.itime = 1;
        }
        put_le32(e, 0, d.id);
        put_le32(e, 4, 0);
        for (i, v) in
            [d.ihardlimit, d.isoftlimit, d.curinodes, d.bhardlimit, d.bsoftlimit, d.curspace, d.btime, d.itime]
                .into_iter()
                .enumerate()
        {
            put_le32(e, 8 + 8 * i, v as u32);
            put_le32(e, 12 + 8 * i, (v >> 32) as u32);
        }
    }

    /// The space hard limit in bytes (0: none).
    pub fn space_hard_bytes(&self) -> u64 {
        self.bhardlimit.saturating_mul(LIMIT_UNIT)
    }

    /// The space soft limit in bytes (0: none).
    pub fn space_soft_bytes(&self) -> u64 {
        self.bsoftlimit.saturating_mul(LIMIT_UNIT)
    }
}

/// Finds the entry of `id` in data block `b`: its slot index.
pub fn find_entry(b: &[u8], id: u32) -> Option<usize> {
    (0..ENTRIES_PER_BLOCK).find(|&i| {
        let off = entry_offset(i);
        Dqblk::parse(&b[off..off + DQBLK_SIZE]).is_some_and(|d| d.id == id)
    })
}

/// The first unused slot of data block `b`.
pub fn free_slot(b: &[u8]) -> Option<usize> {
    (0..ENTRIES_PER_BLOCK).find(|&i| {
        let off = entry_offset(i);
        b[off..off + DQBLK_SIZE].iter().all(|&x| x == 0)
    })
}

/// The grace period a new quota file gets, for both space and inodes
/// (a week, as e2fsprogs' and the kernel's `MAX_DQ_TIME`/`MAX_IQ_TIME`).
pub const DEFAULT_GRACE: u32 = 7 * 24 * 3600;

/// A whole new quota file of type `ty` holding `entries` (distinct ids),
/// built as e2fsprogs' `quota_write_inode` builds it: the header, the
/// root, and for each entry in order the missing index blocks then a slot
/// in the first data block with a free entry (a new one, at the head of
/// the free-entry list, when none has room); blocks numbered in the order
/// they are taken. The result is a whole number of quota blocks.
pub fn build_file(ty: QuotaType, entries: &[Dqblk]) -> Vec<u8> {
    let mut blocks = vec![vec![0u8; QT_BLOCK_SIZE]; 2];
    let mut info = Info { bgrace: DEFAULT_GRACE, igrace: DEFAULT_GRACE, blocks: 2, ..Default::default() };
    for d in entries {
        let mut blk = TREE_ROOT as usize;
        for depth in 0..TREE_DEPTH {
            let i = tree_index(d.id, depth);
            let mut r = index_ref(&blocks[blk], i);
            if r == 0 {
                r = if depth + 1 < TREE_DEPTH || info.free_entry == 0 {
                    blocks.push(vec![0u8; QT_BLOCK_SIZE]);
                    info.blocks += 1;
                    let new = info.blocks - 1;
                    if depth + 1 == TREE_DEPTH {
                        // A new data block goes to the head of the free-entry list.
                        DataHeader { next_free: info.free_entry, ..Default::default() }
                            .encode(&mut blocks[new as usize]);
                        if info.free_entry != 0 {
                            put_le32(&mut blocks[info.free_entry as usize], 4, new);
                        }
                        info.free_entry = new;
                    }
                    new
                } else {
                    info.free_entry
                };
                set_index_ref(&mut blocks[blk], i, r);
            }
            blk = r as usize;
        }
        let data = &mut blocks[blk];
        let mut h = DataHeader::parse(data);
        if let Some(slot) = free_slot(data) {
            d.encode(&mut data[entry_offset(slot)..entry_offset(slot) + DQBLK_SIZE]);
            h.entries += 1;
        }
        if usize::from(h.entries) >= ENTRIES_PER_BLOCK && info.free_entry as usize == blk {
            // Full: off the free-entry list.
            info.free_entry = h.next_free;
            if h.next_free != 0 {
                put_le32(&mut blocks[h.next_free as usize], 4, 0);
            }
            h.next_free = 0;
            h.prev_free = 0;
        }
        h.encode(&mut blocks[blk]);
    }
    encode_header(ty, &info, &mut blocks[0]);
    blocks.concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_checks() {
        let mut b = vec![0u8; QT_BLOCK_SIZE];
        let info = Info { bgrace: 604800, igrace: 604800, flags: 0, blocks: 6, free_blk: 0, free_entry: 5 };
        encode_header(QuotaType::Group, &info, &mut b);
        assert_eq!(parse_header(QuotaType::Group, &b), Ok(info));
        assert_eq!(parse_header(QuotaType::User, &b), Err(HeaderError::Magic(QuotaType::Group.magic())));
        b[4] = 0;
        assert_eq!(parse_header(QuotaType::Group, &b), Err(HeaderError::Version(0)));
        assert_eq!(parse_header(QuotaType::Group, &b[..100]), Err(HeaderError::Short));
    }

    #[test]
    fn user_header_matches_mke2fs_bytes() {
        // The first bytes of a user quota file mke2fs wrote (1 KiB blocks).
        let mut b = vec![0u8; QT_BLOCK_SIZE];
        b[..24].copy_from_slice(&[
            0x11, 0x1f, 0xc0, 0xd9, 1, 0, 0, 0, 0x80, 0x3a, 9, 0, 0x80, 0x3a, 9, 0, 0, 0, 0, 0, 6, 0, 0, 0,
        ]);
        b[28] = 5;
        let info = parse_header(QuotaType::User, &b).unwrap();
        assert_eq!(info, Info { bgrace: 604800, igrace: 604800, flags: 0, blocks: 6, free_blk: 0, free_entry: 5 });
    }

    #[test]
    fn built_file_matches_mke2fs_bytes() {
        // mke2fs -E root_owner=1000:100: lost+found (uid 0, 12 KiB) and the
        // root (uid 1000, 1 KiB), one inode each.
        let e = |id, space| Dqblk { id, curinodes: 1, curspace: space, ..Default::default() };
        let f = build_file(QuotaType::User, &[e(0, 0x3000), e(1000, 0x400)]);
        assert_eq!(f.len(), 7 * QT_BLOCK_SIZE);
        let info = parse_header(QuotaType::User, &f).unwrap();
        assert_eq!(info, Info { bgrace: 604800, igrace: 604800, flags: 0, blocks: 7, free_blk: 0, free_entry: 5 });
        let blk = |n: usize| &f[n * QT_BLOCK_SIZE..(n + 1) * QT_BLOCK_SIZE];
        assert_eq!((index_ref(blk(1), 0), index_ref(blk(2), 0), index_ref(blk(3), 0)), (2, 3, 4));
        assert_eq!((index_ref(blk(3), 3), index_ref(blk(4), 0), index_ref(blk(6), 0xe8)), (6, 5, 5));
        assert_eq!(DataHeader::parse(blk(5)), DataHeader { next_free: 0, prev_free: 0, entries: 2 });
        assert_eq!(Dqblk::parse(&blk(5)[entry_offset(1)..entry_offset(2)]), Some(e(1000, 0x400)));
        // Fifteen ids fill one data block and start a second.
        let many: Vec<_> = (0..15).map(|i| e(i, 0)).collect();
        let f = build_file(QuotaType::Group, &many);
        let info = parse_header(QuotaType::Group, &f).unwrap();
        assert_eq!((info.blocks, info.free_entry), (7, 6));
        let blk = |n: usize| &f[n * QT_BLOCK_SIZE..(n + 1) * QT_BLOCK_SIZE];
        assert_eq!(DataHeader::parse(blk(5)).entries, ENTRIES_PER_BLOCK as u16);
        assert_eq!(DataHeader::parse(blk(6)), DataHeader { next_free: 0, prev_free: 0, entries: 1 });
    }

    #[test]
    fn dqblk_round_trip_and_zero_escape() {
        let d = Dqblk { id: 1000, curinodes: 3, curspace: 12288, bhardlimit: 100, ihardlimit: 7, ..Default::default() };
        let mut e = [0u8; DQBLK_SIZE];
        d.encode(&mut e);
        assert_eq!(Dqblk::parse(&e), Some(d));
        assert_eq!(d.space_hard_bytes(), 102400);
        // All zero (id 0, nothing used): stored with itime 1, read back as zero.
        let z = Dqblk::default();
        z.encode(&mut e);
        assert_eq!(u64::from(le32(&e, 64)), 1);
        assert_eq!(Dqblk::parse(&e), Some(z));
        assert_eq!(Dqblk::parse(&[0u8; DQBLK_SIZE]), None);
    }

    #[test]
    fn tree_indices_are_id_bytes_most_significant_first() {
        let id = 0x0102_03E8;
        assert_eq!((0..TREE_DEPTH).map(|d| tree_index(id, d)).collect::<Vec<_>>(), vec![1, 2, 3, 0xE8]);
        let mut b = vec![0u8; QT_BLOCK_SIZE];
        set_index_ref(&mut b, 0xE8, 9);
        assert_eq!(index_ref(&b, 0xE8), 9);
        assert_eq!(index_ref(&b, 0), 0);
    }

    #[test]
    fn data_block_slots() {
        assert_eq!(ENTRIES_PER_BLOCK, 14);
        let mut b = vec![0u8; QT_BLOCK_SIZE];
        DataHeader { next_free: 0, prev_free: 0, entries: 2 }.encode(&mut b);
        Dqblk { id: 0, ..Default::default() }.encode(&mut b[entry_offset(0)..entry_offset(1)]);
        Dqblk { id: 5, curinodes: 1, ..Default::default() }.encode(&mut b[entry_offset(1)..entry_offset(2)]);
        assert_eq!(find_entry(&b, 0), Some(0));
        assert_eq!(find_entry(&b, 5), Some(1));
        assert_eq!(find_entry(&b, 6), None);
        assert_eq!(free_slot(&b), Some(2));
        assert_eq!(DataHeader::parse(&b).entries, 2);
    }
}
