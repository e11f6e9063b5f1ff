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
