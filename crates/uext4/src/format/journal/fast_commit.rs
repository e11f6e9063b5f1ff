//! The fast-commit area's tags (ext4 `fast_commit`, kernel 5.10+).
//!
//! Fast commits live in their own blocks at the end of the journal (after
//! the normal log, see [`super::JournalSuperblock::log_end`]). Unlike the
//! rest of jbd2 they are **little-endian**: they are ext4's, not jbd2's.
//! Each block is a sequence of tag-length-value records: a 4-byte header
//! (`fc_tag`, `fc_len`, both le16) followed by `fc_len` bytes of value. A
//! tag never spans blocks; a block's unused end is a PAD tag (or less than
//! a header's worth of bytes).
//!
//! One fast commit is: HEAD (first commit after a full one only), any
//! number of ADD_RANGE / DEL_RANGE / CREAT / LINK / UNLINK / INODE / PAD
//! tags, then TAIL, whose crc32c covers every tag since the previous tail
//! (or the head) up to the tail's own `fc_crc` field. Value lengths are
//! checked as the kernel's `ext4_fc_value_len_isvalid` does.
//!
//! Parsing is pure: [`parse_fc_tags`] never indexes past the block and
//! reports a tag it cannot accept as [`FcTag::Invalid`] (the scan decides
//! what that means).

use crate::format::bytes::{le16, le32, put_le16, put_le32};

/// Fast-commit tag numbers (`EXT4_FC_TAG_*`).
pub mod fc_tag {
    /// Blocks mapped into a file (an extent).
    pub const ADD_RANGE: u16 = 1;
    /// Logical blocks unmapped from a file.
    pub const DEL_RANGE: u16 = 2;
    /// A new file's directory entry.
    pub const CREAT: u16 = 3;
    /// A new hard link.
    pub const LINK: u16 = 4;
    /// A removed directory entry.
    pub const UNLINK: u16 = 5;
    /// The raw on-disk inode.
    pub const INODE: u16 = 6;
    /// Padding to the end of a block.
    pub const PAD: u16 = 7;
    /// End of one fast commit: its transaction id and crc.
    pub const TAIL: u16 = 8;
    /// Start of the fast-commit area: feature flags and transaction id.
    pub const HEAD: u16 = 9;
}

/// Size of a tag's header (`struct ext4_fc_tl`).
pub const FC_TL_SIZE: usize = 4;
/// Fast-commit features the kernel (and uext4's parser) know: none.
pub const FC_SUPPORTED_FEATURES: u32 = 0;
/// Longest name in a dentry tag (`EXT4_NAME_LEN`).
pub const FC_NAME_MAX: usize = 255;
/// Smallest raw inode in an INODE tag (`EXT4_GOOD_OLD_INODE_SIZE`).
pub const FC_INODE_MIN: usize = 128;
/// Offset of `fc_crc` in a TAIL value: the crc covers the tail up to it.
pub const FC_TAIL_CRC_OFFSET: usize = 4;

/// One extent as an ADD_RANGE tag stores it (`struct ext4_extent`, le).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FcExtent {
    /// First logical block.
    pub lblk: u32,
    /// Length in blocks (the raw `ee_len` decoded: unwritten flag removed).
    pub len: u16,
    /// The extent is unwritten (preallocated).
    pub unwritten: bool,
    /// First physical block.
    pub pblk: u64,
}

/// One decoded fast-commit tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FcTag {
    /// `HEAD`: the area's first tag.
    Head {
        /// `fc_features` (must be within [`FC_SUPPORTED_FEATURES`]).
        features: u32,
        /// Transaction the fast commits belong to.
        tid: u32,
    },
    /// `ADD_RANGE`: map `extent` into inode `ino`.
    AddRange {
        /// The inode.
        ino: u32,
        /// What is mapped.
        extent: FcExtent,
    },
    /// `DEL_RANGE`: unmap `len` blocks from `lblk` in inode `ino`.
    DelRange {
        /// The inode.
        ino: u32,
        /// First logical block.
        lblk: u32,
        /// Blocks.
        len: u32,
    },
    /// `CREAT` / `LINK` / `UNLINK` (`kind` says which): entry `name` for
    /// inode `ino` in directory `parent`.
    Dentry {
        /// [`fc_tag::CREAT`], [`fc_tag::LINK`] or [`fc_tag::UNLINK`].
        kind: u16,
        /// The directory.
        parent: u32,
        /// The inode the entry names.
        ino: u32,
        /// The entry's name (1..=255 bytes).
        name: Vec<u8>,
    },
    /// `INODE`: inode `ino` as it is on disk (128 bytes up to the inode size).
    Inode {
        /// The inode.
        ino: u32,
        /// Its raw bytes.
        raw: Vec<u8>,
    },
    /// `PAD`: nothing.
    Pad,
    /// `TAIL`: closes a fast commit.
    Tail {
        /// Transaction the fast commit belongs to.
        tid: u32,
        /// crc32c (seed 0) over the tags since the last tail, up to `fc_crc`.
        crc: u32,
    },
    /// A tag whose number is unknown or whose length is wrong for it (or
    /// runs past the block): the kernel's scan stops or fails there.
    Invalid {
        /// The tag number found.
        tag: u16,
        /// The value length found.
        len: u16,
    },
}

/// One tag of a block with where it is: `offset` of its header and the
/// whole record's bytes (header and value), which the crc covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FcRecord {
    /// Offset of the tag header in the block.
    pub offset: usize,
    /// The decoded tag.
    pub tag: FcTag,
    /// Header + value length (what the crc covers for all but TAIL).
    pub record_len: usize,
}

/// Is `len` a valid value length for `tag`, as the kernel checks it?
/// `inode_size` is the filesystem's inode size.
pub fn fc_value_len_valid(tag: u16, len: usize, inode_size: usize) -> bool {
    match tag {
        fc_tag::ADD_RANGE => len == 16,
        fc_tag::DEL_RANGE => len == 12,
        fc_tag::CREAT | fc_tag::LINK | fc_tag::UNLINK => len > 8 && len - 8 <= FC_NAME_MAX,
        fc_tag::INODE => len >= 4 + FC_INODE_MIN && len - 4 <= inode_size,
        fc_tag::PAD => true,
        fc_tag::TAIL => len >= 8,
        fc_tag::HEAD => len == 8,
        _ => false,
    }
}

/// Decodes the extent of an ADD_RANGE value (12 bytes, le).
fn parse_extent(v: &[u8]) -> FcExtent {
    let raw_len = le16(v, 4);
    // ee_len > 32768 means unwritten, of length ee_len - 32768 (the
    // kernel's ext4_ext_get_actual_len); exactly 32768 is an initialized
    // extent of 32768 blocks.
    let (len, unwritten) = if raw_len > 0x8000 { (raw_len - 0x8000, true) } else { (raw_len, false) };
    let pblk = (u64::from(le16(v, 6)) << 32) | u64::from(le32(v, 8));
    FcExtent { lblk: le32(v, 0), len, unwritten, pblk }
}

/// Decodes one tag whose value `v` has a length valid for `tag`.
fn decode(tag: u16, v: &[u8]) -> FcTag {
    match tag {
        fc_tag::HEAD => FcTag::Head { features: le32(v, 0), tid: le32(v, 4) },
        fc_tag::ADD_RANGE => FcTag::AddRange { ino: le32(v, 0), extent: parse_extent(&v[4..]) },
        fc_tag::DEL_RANGE => FcTag::DelRange { ino: le32(v, 0), lblk: le32(v, 4), len: le32(v, 8) },
        fc_tag::CREAT | fc_tag::LINK | fc_tag::UNLINK => {
            FcTag::Dentry { kind: tag, parent: le32(v, 0), ino: le32(v, 4), name: v[8..].to_vec() }
        }
        fc_tag::INODE => FcTag::Inode { ino: le32(v, 0), raw: v[4..].to_vec() },
        fc_tag::TAIL => FcTag::Tail { tid: le32(v, 0), crc: le32(v, FC_TAIL_CRC_OFFSET) },
        _ => FcTag::Pad,
    }
}

/// The tags of one fast-commit block, in order. Walks as the kernel does:
/// while a header fits, read it; a tag that is unknown, has a length wrong
/// for it or runs past the block ends the walk as [`FcTag::Invalid`].
pub fn parse_fc_tags(block: &[u8], inode_size: usize) -> Vec<FcRecord> {
    let mut out = Vec::new();
    let mut off = 0usize;
    while off + FC_TL_SIZE <= block.len() {
        let tag = le16(block, off);
        let len = usize::from(le16(block, off + 2));
        let val = off + FC_TL_SIZE;
        if len > block.len() - val || !fc_value_len_valid(tag, len, inode_size) {
            out.push(FcRecord { offset: off, tag: FcTag::Invalid { tag, len: len as u16 }, record_len: 0 });
            break;
        }
        out.push(FcRecord { offset: off, tag: decode(tag, &block[val..val + len]), record_len: FC_TL_SIZE + len });
        off = val + len;
    }
    out
}

/// Encodes one tag (header and value) — for tests and tools; the engine
/// does not write fast commits.
pub fn encode_fc_tag(tag: &FcTag) -> Vec<u8> {
    let (num, value): (u16, Vec<u8>) = match tag {
        FcTag::Head { features, tid } => (fc_tag::HEAD, [features.to_le_bytes(), tid.to_le_bytes()].concat()),
        FcTag::AddRange { ino, extent } => {
            let mut v = vec![0u8; 16];
            put_le32(&mut v, 0, *ino);
            put_le32(&mut v, 4, extent.lblk);
            let raw_len = if extent.unwritten { extent.len.saturating_add(0x8000) } else { extent.len };
            put_le16(&mut v, 8, raw_len);
            put_le16(&mut v, 10, (extent.pblk >> 32) as u16);
            put_le32(&mut v, 12, extent.pblk as u32);
            (fc_tag::ADD_RANGE, v)
        }
        FcTag::DelRange { ino, lblk, len } => {
            (fc_tag::DEL_RANGE, [ino.to_le_bytes(), lblk.to_le_bytes(), len.to_le_bytes()].concat())
        }
        FcTag::Dentry { kind, parent, ino, name } => {
            let mut v = [parent.to_le_bytes(), ino.to_le_bytes()].concat();
            v.extend_from_slice(name);
            (*kind, v)
        }
        FcTag::Inode { ino, raw } => {
            let mut v = ino.to_le_bytes().to_vec();
            v.extend_from_slice(raw);
            (fc_tag::INODE, v)
        }
        FcTag::Pad => (fc_tag::PAD, Vec::new()),
        FcTag::Tail { tid, crc } => (fc_tag::TAIL, [tid.to_le_bytes(), crc.to_le_bytes()].concat()),
        FcTag::Invalid { tag, len } => (*tag, vec![0u8; usize::from(*len)]),
    };
    let mut out = vec![0u8; FC_TL_SIZE];
    put_le16(&mut out, 0, num);
    put_le16(&mut out, 2, value.len() as u16);
    out.extend_from_slice(&value);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<FcTag> {
        vec![
            FcTag::Head { features: 0, tid: 77 },
            FcTag::AddRange { ino: 12, extent: FcExtent { lblk: 5, len: 3, unwritten: false, pblk: 0x1_0000_0042 } },
            FcTag::AddRange { ino: 12, extent: FcExtent { lblk: 9, len: 100, unwritten: true, pblk: 900 } },
            FcTag::DelRange { ino: 13, lblk: 0, len: 7 },
            FcTag::Dentry { kind: fc_tag::CREAT, parent: 2, ino: 14, name: b"new".to_vec() },
            FcTag::Dentry { kind: fc_tag::LINK, parent: 11, ino: 14, name: b"l".to_vec() },
            FcTag::Dentry { kind: fc_tag::UNLINK, parent: 2, ino: 15, name: vec![b'x'; 255] },
            FcTag::Inode { ino: 14, raw: (0..256).map(|i| i as u8).collect() },
            FcTag::Pad,
            FcTag::Tail { tid: 77, crc: 0xdead_beef },
        ]
    }

    #[test]
    fn tags_round_trip_in_one_block() {
        let mut block: Vec<u8> = samples().iter().flat_map(encode_fc_tag).collect();
        let used = block.len();
        block.resize(4096, 0);
        let recs = parse_fc_tags(&block, 256);
        let tags: Vec<FcTag> = recs.iter().map(|r| r.tag.clone()).collect();
        assert_eq!(&tags[..samples().len()], &samples()[..]);
        // The zeroed rest of the block is zero-length "tag 0": invalid.
        assert_eq!(recs.len(), samples().len() + 1);
        assert_eq!(recs.last().map(|r| r.offset), Some(used));
        assert!(matches!(recs.last().map(|r| &r.tag), Some(FcTag::Invalid { tag: 0, len: 0 })));
        let total: usize = recs.iter().map(|r| r.record_len).sum();
        assert_eq!(total, used);
    }

    #[test]
    fn value_lengths_checked_as_the_kernel_does() {
        assert!(fc_value_len_valid(fc_tag::ADD_RANGE, 16, 256));
        assert!(!fc_value_len_valid(fc_tag::ADD_RANGE, 15, 256));
        assert!(!fc_value_len_valid(fc_tag::CREAT, 8, 256));
        assert!(fc_value_len_valid(fc_tag::CREAT, 9, 256));
        assert!(!fc_value_len_valid(fc_tag::LINK, 8 + 256, 256));
        assert!(!fc_value_len_valid(fc_tag::INODE, 4 + 127, 256));
        assert!(fc_value_len_valid(fc_tag::INODE, 4 + 256, 256));
        assert!(!fc_value_len_valid(fc_tag::INODE, 4 + 257, 256));
        assert!(fc_value_len_valid(fc_tag::TAIL, 12, 256));
        assert!(!fc_value_len_valid(fc_tag::HEAD, 12, 256));
        assert!(!fc_value_len_valid(10, 0, 256));
    }

    #[test]
    fn a_tag_running_past_the_block_is_invalid() {
        let mut block = encode_fc_tag(&FcTag::Pad);
        block.extend_from_slice(&encode_fc_tag(&FcTag::DelRange { ino: 1, lblk: 2, len: 3 }));
        block.truncate(block.len() - 1);
        let recs = parse_fc_tags(&block, 256);
        assert_eq!(recs.len(), 2);
        assert!(matches!(recs[1].tag, FcTag::Invalid { tag: fc_tag::DEL_RANGE, len: 12 }));
    }

    #[test]
    fn garbage_never_panics() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for len in [0usize, 3, 4, 5, 64, 1024, 4096] {
            for _ in 0..200 {
                let b: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        // Small tag numbers and lengths, so real tags appear.
                        (x % 24) as u8
                    })
                    .collect();
                let _ = parse_fc_tags(&b, 256);
            }
        }
    }
}
