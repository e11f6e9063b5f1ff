//! The 12-byte header that starts every journal metadata block, and the
//! block types it names.

use super::bad;
use super::bytes::{be32, put_be32};
use crate::error::CorruptKind;
use crate::error::Result;

/// The jbd2 magic number, first word of every journal metadata block.
pub const JBD2_MAGIC: u32 = 0xC03B_3998;

/// Size of the common block header.
pub const HEADER_SIZE: usize = 12;

/// Journal block types (`h_blocktype`).
pub mod blocktype {
    /// A descriptor block: tags for the data blocks that follow.
    pub const DESCRIPTOR: u32 = 1;
    /// A commit block: the end of a transaction.
    pub const COMMIT: u32 = 2;
    /// Journal superblock, version 1.
    pub const SUPERBLOCK_V1: u32 = 3;
    /// Journal superblock, version 2.
    pub const SUPERBLOCK_V2: u32 = 4;
    /// A revoke block.
    pub const REVOKE: u32 = 5;
}

/// The 12-byte header of every journal metadata block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    /// Should be [`JBD2_MAGIC`].
    pub magic: u32,
    /// One of [`blocktype`].
    pub blocktype: u32,
    /// Transaction id.
    pub sequence: u32,
}

impl BlockHeader {
    /// A header with the jbd2 magic.
    pub fn new(blocktype: u32, sequence: u32) -> BlockHeader {
        BlockHeader { magic: JBD2_MAGIC, blocktype, sequence }
    }

    /// Reads the header; `None` if `b` is shorter than a header.
    pub fn parse(b: &[u8]) -> Option<BlockHeader> {
        if b.len() < HEADER_SIZE {
            return None;
        }
        Some(BlockHeader { magic: be32(b, 0), blocktype: be32(b, 4), sequence: be32(b, 8) })
    }

    /// True if the magic is jbd2's.
    pub fn is_journal_block(&self) -> bool {
        self.magic == JBD2_MAGIC
    }

    /// Writes the header at the start of `b`.
    pub fn encode(&self, b: &mut [u8]) {
        put_be32(b, 0, self.magic);
        put_be32(b, 4, self.blocktype);
        put_be32(b, 8, self.sequence);
    }
}

pub(super) fn expect_header(b: &[u8], blocktype: u32, what: &'static str) -> Result<BlockHeader> {
    let h = BlockHeader::parse(b).ok_or_else(|| bad(CorruptKind::TooShort { len: b.len(), need: HEADER_SIZE }))?;
    if !h.is_journal_block() {
        return Err(bad(CorruptKind::BadMagic { found: u64::from(h.magic) }));
    }
    if h.blocktype != blocktype {
        return Err(bad(CorruptKind::WrongType { expected: what, found: u64::from(h.blocktype) }));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use crate::format::journal::*;

    #[test]
    fn header_round_trip() {
        let mut b = [0u8; 12];
        let h = BlockHeader::new(blocktype::REVOKE, 0xdead_beef);
        h.encode(&mut b);
        assert_eq!(b[..4], [0xC0, 0x3B, 0x39, 0x98]);
        assert_eq!(BlockHeader::parse(&b), Some(h));
        assert_eq!(BlockHeader::parse(&b[..11]), None);
    }
}
