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
//!   replayed, closed by a checksum tail (csum v2/v3).
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
pub mod features;
pub mod header;
pub mod revoke;
pub mod superblock;
pub mod tail;

pub use bytes::*;
pub use checksum::*;
pub use commit::*;
pub use descriptor::*;
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

#[cfg(test)]
mod tests;
