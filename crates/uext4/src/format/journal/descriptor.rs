//! Descriptor blocks: an array of block tags, one per data block that
//! follows in the log, closed by a checksum tail (csum v2/v3); the tag
//! flags, the data block checksums stored in the tags, and the escaping of
//! data blocks that start with the jbd2 magic.

use super::bytes::{be16, be32, put_be16, put_be32};
use super::features::JournalFeatures;
use super::header::{blocktype, BlockHeader, HEADER_SIZE, JBD2_MAGIC};
use super::tail::set_tail_checksum;
use crate::error::{Error, Result};
use crate::format::checksum::crc32c;

/// Size of the UUID that follows a tag without [`tag_flag::SAME_UUID`].
pub const TAG_UUID_SIZE: usize = 16;

/// Descriptor tag flags (`t_flags`).
pub mod tag_flag {
    /// The data block's first 4 bytes were the jbd2 magic and were zeroed
    /// in the log; replay puts the magic back.
    pub const ESCAPE: u16 = 0x1;
    /// No UUID follows this tag (it is the same as the previous one).
    pub const SAME_UUID: u16 = 0x2;
    /// The block was deleted by the transaction (unused).
    pub const DELETED: u16 = 0x4;
    /// The last tag of the descriptor block.
    pub const LAST_TAG: u16 = 0x8;
}

/// One descriptor tag: where a logged block goes home.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockTag {
    /// Filesystem block the logged copy belongs to (high 32 bits only with
    /// the 64bit feature).
    pub block: u64,
    /// [`tag_flag`] bits.
    pub flags: u16,
    /// Data block checksum: 32 bits with csum v3, 16 bits with csum v2
    /// (the low half of the crc), otherwise whatever the field holds.
    pub checksum: u32,
    /// The UUID following the tag (present when [`tag_flag::SAME_UUID`] is
    /// clear and it fits in the block).
    pub uuid: Option<[u8; 16]>,
}

impl BlockTag {
    /// True if the block was escaped in the log.
    pub fn escaped(&self) -> bool {
        self.flags & tag_flag::ESCAPE != 0
    }
    /// True if this is the last tag of its descriptor.
    pub fn is_last(&self) -> bool {
        self.flags & tag_flag::LAST_TAG != 0
    }
}

/// Reads the tags of a descriptor block the way the kernel's `count_tags`
/// and replay loop walk them: from byte 12, while a whole tag fits before
/// the checksum tail, skipping the 16-byte UUID after tags without
/// SAME_UUID, up to and including the first tag with LAST_TAG. The block
/// header is not checked here. At most `block.len() / tag_bytes` tags.
pub fn parse_tags(block: &[u8], features: &JournalFeatures) -> Vec<BlockTag> {
    let tag_bytes = features.tag_bytes();
    let limit = block.len().saturating_sub(features.tail_bytes());
    let mut out = Vec::new();
    let mut off = HEADER_SIZE;
    while off + tag_bytes <= limit {
        let t = &block[off..off + tag_bytes];
        let flags = be16(t, 6);
        let mut blocknr = u64::from(be32(t, 0));
        if features.has_64bit() {
            blocknr |= u64::from(be32(t, 8)) << 32;
        }
        let checksum = if features.csum_v3() { be32(t, 12) } else { u32::from(be16(t, 4)) };
        off += tag_bytes;
        let mut uuid = None;
        if flags & tag_flag::SAME_UUID == 0 {
            if let Some(u) = block.get(off..off + TAG_UUID_SIZE) {
                let mut a = [0u8; 16];
                a.copy_from_slice(u);
                uuid = Some(a);
            }
            off += TAG_UUID_SIZE;
        }
        out.push(BlockTag { block: blocknr, flags, checksum, uuid });
        if flags & tag_flag::LAST_TAG != 0 {
            break;
        }
    }
    out
}

/// How many tags fit in one descriptor block when the first carries a UUID
/// and the others SAME_UUID (what the kernel's commit writes).
pub fn descriptor_capacity(block_size: usize, features: &JournalFeatures) -> usize {
    let room = block_size.saturating_sub(HEADER_SIZE + features.tail_bytes() + TAG_UUID_SIZE);
    room / features.tag_bytes()
}

/// Encodes a descriptor block into `buf` (one journal block, zeroed first):
/// header, the tags in order with their flags as given (a UUID, zero if
/// `uuid` is `None`, after every tag without SAME_UUID), and the tail
/// checksum with csum v2/v3. Block numbers need the 64bit feature above
/// 2^32. The caller sets LAST_TAG on the last tag.
pub fn encode_descriptor(
    buf: &mut [u8],
    sequence: u32,
    tags: &[BlockTag],
    features: &JournalFeatures,
    csum_seed: u32,
) -> Result<()> {
    let tag_bytes = features.tag_bytes();
    let limit = buf.len().checked_sub(features.tail_bytes()).ok_or_else(|| Error::Invalid("block too small".into()))?;
    buf.fill(0);
    BlockHeader::new(blocktype::DESCRIPTOR, sequence).encode(buf);
    let mut off = HEADER_SIZE;
    for tag in tags {
        let need = tag_bytes + if tag.flags & tag_flag::SAME_UUID == 0 { TAG_UUID_SIZE } else { 0 };
        if off + need > limit {
            return Err(Error::Invalid(format!("{} tags do not fit in a descriptor block", tags.len())));
        }
        if !features.has_64bit() && tag.block > u64::from(u32::MAX) {
            return Err(Error::Invalid(format!("block {} needs the journal 64bit feature", tag.block)));
        }
        let t = &mut buf[off..off + tag_bytes];
        put_be32(t, 0, tag.block as u32);
        if features.csum_v3() {
            put_be32(t, 4, u32::from(tag.flags));
            put_be32(t, 12, tag.checksum);
        } else {
            put_be16(t, 4, tag.checksum as u16);
            put_be16(t, 6, tag.flags);
        }
        if features.has_64bit() {
            put_be32(t, 8, (tag.block >> 32) as u32);
        }
        off += tag_bytes;
        if tag.flags & tag_flag::SAME_UUID == 0 {
            buf[off..off + TAG_UUID_SIZE].copy_from_slice(&tag.uuid.unwrap_or([0; 16]));
            off += TAG_UUID_SIZE;
        }
    }
    if features.csum_v2or3() {
        set_tail_checksum(csum_seed, buf);
    }
    Ok(())
}

/// The full crc32c of a logged data block: `crc32c(crc32c(seed, be32
/// sequence), data)`, computed over the block as it is in the log (after
/// escaping).
pub fn data_block_checksum(csum_seed: u32, sequence: u32, data: &[u8]) -> u32 {
    let c = crc32c(csum_seed, &sequence.to_be_bytes());
    crc32c(c, data)
}

/// The value a tag stores for `data` (32 bits with csum v3, the low 16
/// with csum v2, 0 without checksums).
pub fn tag_checksum_value(features: &JournalFeatures, csum_seed: u32, sequence: u32, data: &[u8]) -> u32 {
    if features.csum_v3() {
        data_block_checksum(csum_seed, sequence, data)
    } else if features.csum_v2() {
        data_block_checksum(csum_seed, sequence, data) & 0xFFFF
    } else {
        0
    }
}

/// True if the tag's checksum matches `data` (always true without csum
/// v2/v3).
pub fn verify_tag_checksum(
    features: &JournalFeatures,
    tag: &BlockTag,
    csum_seed: u32,
    sequence: u32,
    data: &[u8],
) -> bool {
    !features.csum_v2or3() || tag.checksum == tag_checksum_value(features, csum_seed, sequence, data)
}

/// Escapes a data block for the log: if it starts with the jbd2 magic, the
/// first 4 bytes are zeroed and true is returned (the tag then needs
/// [`tag_flag::ESCAPE`]).
pub fn escape_block(data: &mut [u8]) -> bool {
    if be32(data, 0) == JBD2_MAGIC {
        data[..4].fill(0);
        true
    } else {
        false
    }
}

/// Undoes [`escape_block`]: puts the magic back.
pub fn unescape_block(data: &mut [u8]) {
    put_be32(data, 0, JBD2_MAGIC);
}

#[cfg(test)]
mod tests {
    use crate::format::journal::test_util::*;
    use crate::format::journal::*;

    #[test]
    fn descriptor_round_trip_in_every_format() {
        let seed = journal_csum_seed(&[3; 16]);
        for f in all_formats() {
            for bs in [1024usize, 4096] {
                let cap = descriptor_capacity(bs, &f);
                let big = if f.has_64bit() { 1u64 << 40 } else { 0 };
                let mut tags: Vec<BlockTag> = (0..cap)
                    .map(|i| BlockTag {
                        block: big + 1000 + i as u64,
                        flags: if i == 0 { tag_flag::ESCAPE } else { tag_flag::SAME_UUID },
                        checksum: if f.csum_v3() {
                            0x1234_5678 + i as u32
                        } else if f.csum_v2() {
                            0xBEEF
                        } else {
                            0
                        },
                        uuid: if i == 0 { Some([9; 16]) } else { None },
                    })
                    .collect();
                tags.last_mut().unwrap().flags |= tag_flag::LAST_TAG;
                let mut buf = vec![0u8; bs];
                encode_descriptor(&mut buf, 42, &tags, &f, seed).unwrap();
                let h = BlockHeader::parse(&buf).unwrap();
                assert_eq!((h.blocktype, h.sequence), (blocktype::DESCRIPTOR, 42));
                assert_eq!(parse_tags(&buf, &f), tags, "{f:?} {bs}");
                if f.csum_v2or3() {
                    assert!(verify_tail_checksum(seed, &buf));
                    buf[20] ^= 1;
                    assert!(!verify_tail_checksum(seed, &buf));
                }
                // One tag more does not fit.
                let mut more = tags.clone();
                more.push(BlockTag { block: 1, flags: tag_flag::SAME_UUID, checksum: 0, uuid: None });
                assert!(encode_descriptor(&mut buf, 42, &more, &f, seed).is_err());
            }
        }
    }

    #[test]
    fn parse_tags_without_last_tag_stops_at_the_block_end() {
        let f = feats(0, V3_64);
        let mut buf = vec![0u8; 1024];
        BlockHeader::new(blocktype::DESCRIPTOR, 1).encode(&mut buf);
        // All-zero tags: no SAME_UUID, so each takes 16 + 16 bytes.
        let tags = parse_tags(&buf, &f);
        assert_eq!(tags.len(), (1024 - 12 - 4) / 32 + usize::from((1024 - 12 - 4) % 32 >= 16));
        assert!(parse_tags(&buf[..10], &f).is_empty());
    }

    #[test]
    fn data_tag_checksums() {
        let seed = journal_csum_seed(&[1; 16]);
        let data = vec![0x5Au8; 4096];
        let full = data_block_checksum(seed, 77, &data);
        let v3 = feats(0, feature::INCOMPAT_CSUM_V3);
        let v2 = feats(0, feature::INCOMPAT_CSUM_V2);
        let tag = |c| BlockTag { block: 1, flags: 0, checksum: c, uuid: None };
        assert!(verify_tag_checksum(&v3, &tag(full), seed, 77, &data));
        assert!(!verify_tag_checksum(&v3, &tag(full), seed, 78, &data));
        assert!(verify_tag_checksum(&v2, &tag(full & 0xFFFF), seed, 77, &data));
        assert!(!verify_tag_checksum(&v2, &tag(full), seed, 77, &data) || full <= 0xFFFF);
        assert!(verify_tag_checksum(&feats(0, 0), &tag(0), seed, 77, &data));
    }

    #[test]
    fn escape_round_trip() {
        let mut d = vec![0u8; 1024];
        d[..4].copy_from_slice(&JBD2_MAGIC.to_be_bytes());
        d[4] = 7;
        let orig = d.clone();
        assert!(escape_block(&mut d));
        assert_eq!(&d[..5], &[0, 0, 0, 0, 7]);
        unescape_block(&mut d);
        assert_eq!(d, orig);
        let mut plain = vec![1u8; 16];
        assert!(!escape_block(&mut plain));
    }
}
