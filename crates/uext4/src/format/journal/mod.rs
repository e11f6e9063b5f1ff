//! The jbd2 journal's on-disk format (pure codecs, no I/O).
//!
//! Everything in jbd2 is **big-endian**, unlike the rest of ext4. Every
//! journal block that is not a data block starts with a 12-byte header
//! (magic, block type, transaction id). The structures:
//!
//! - the journal superblock (v1 or v2, 1024 bytes at journal block 0),
//!   protected (csum v2/v3) by `crc32c(~0, sb with s_checksum zeroed)`;
//! - descriptor blocks: an array of block tags, one per data block that
//!   follows in the log (tag layout depends on the 64bit, csum v2 and
//!   csum v3 features, see [`JournalFeatures::tag_bytes`]), closed by a
//!   checksum tail (csum v2/v3);
//! - commit blocks, closing a transaction (commit time; a crc32 over the
//!   transaction's blocks with the old COMPAT_CHECKSUM feature, or a crc32c
//!   of the commit block itself with csum v2/v3);
//! - revoke blocks: block numbers whose earlier log copies must not be
//!   replayed, closed by a checksum tail (csum v2/v3);
//! - the fast-commit area's tags (little-endian, ext4's own format), in
//!   the blocks after the log when the fast-commit feature is on.
//!
//! All checksums except the superblock's start from the journal seed,
//! `crc32c(~0, s_uuid)`. Data blocks are checksummed in their descriptor tag:
//! `crc32c(crc32c(seed, be32 tid), data)` (all 32 bits with csum v3, the low
//! 16 with csum v2).
//!
//! Parsers check lengths before indexing and counts before trusting them;
//! encoders are used by tests and by the journal writer.

//!
//! One structure per file; everything is re-exported here, so users name
//! `format::journal::CommitBlock` and need not know the file layout.

pub mod bytes;
pub mod checksum;
pub mod commit;
pub mod descriptor;
pub mod fast_commit;
pub mod features;
pub mod header;
pub mod revoke;
pub mod superblock;
pub mod tail;

pub use bytes::*;
pub use checksum::*;
pub use commit::*;
pub use descriptor::*;
pub use fast_commit::*;
pub use features::*;
pub use header::*;
pub use revoke::*;
pub use superblock::*;
pub use tail::*;

use crate::error::{CorruptKind, Error, Location, Structure};

/// A corrupt journal structure. The codecs do not know which block they
/// were given: the journal code adds it ([`Error::at_block`]).
fn bad(kind: CorruptKind) -> Error {
    Error::corruption(Structure::Journal, Location::Unknown, kind)
}

/// Feature sets and a sample superblock shared by the codecs' unit tests.
#[cfg(test)]
mod test_util {
    use super::*;

    pub(super) fn feats(compat: u32, incompat: u32) -> JournalFeatures {
        JournalFeatures { compat, incompat, ro_compat: 0 }
    }

    pub(super) const V3_64: u32 = feature::INCOMPAT_CSUM_V3 | feature::INCOMPAT_64BIT | feature::INCOMPAT_REVOKE;

    pub(super) fn sample_sb(features: JournalFeatures) -> JournalSuperblock {
        let mut sb = JournalSuperblock::new_v2(4096, 2048, 1, 7, features, [7; 16]);
        sb.start = 5;
        sb.errno = -5;
        sb.num_fc_blocks = 0;
        sb.head = 9;
        sb
    }

    pub(super) fn all_formats() -> Vec<JournalFeatures> {
        use super::feature::*;
        vec![
            feats(0, 0),
            feats(0, INCOMPAT_64BIT),
            feats(COMPAT_CHECKSUM, 0),
            feats(0, INCOMPAT_CSUM_V2),
            feats(0, INCOMPAT_CSUM_V2 | INCOMPAT_64BIT),
            feats(0, INCOMPAT_CSUM_V3),
            feats(0, INCOMPAT_CSUM_V3 | INCOMPAT_64BIT),
        ]
    }
}

#[cfg(test)]
mod tests {
    use crate::format::journal::test_util::*;
    use crate::format::journal::*;

    #[test]
    fn parsers_survive_garbage() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for len in [0usize, 1, 11, 12, 59, 60, 1024, 4096] {
            for _ in 0..50 {
                let buf: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                for f in all_formats() {
                    let _ = parse_tags(&buf, &f);
                    let _ = RevokeBlock::parse(&buf, &f);
                    let _ = verify_commit_checksum(&f, 1, &buf);
                }
                let _ = CommitBlock::parse(&buf);
                let _ = JournalSuperblock::parse(&buf);
                let _ = verify_tail_checksum(1, &buf);
                let _ = commit_partial_checksum(1, &buf);
            }
        }
    }
}
