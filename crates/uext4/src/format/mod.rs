//! On-disk format of ext4: pure encode/decode of every structure, and the
//! checksums that protect them.
//!
//! Nothing in this module performs I/O: each codec takes bytes that a caller
//! read and returns a typed value or a typed error. Parsers check lengths and
//! ranges before they index, so no byte pattern can make them panic; the
//! fuzz target and the corruption tests rely on that.
//!
//! Public for inspection tools and tests that read or build images byte by
//! byte (`uext4 info` decodes the superblock and descriptors with it). To
//! read and write files, use [`Filesystem`](crate::Filesystem) instead:
//! these codecs follow the ext4 format, but their Rust signatures may change
//! more often than the crate root's.

pub mod block_number;
pub mod bytes;
pub mod casefold;
pub mod checksum;
pub mod dir_hash;
pub mod dirent;
pub mod dx;
pub mod extent;
pub mod features;
pub mod file_type;
pub mod group_desc;
pub mod inode;
pub mod journal;
pub mod mmp;
pub mod orphan_file;
pub mod quota;
pub mod superblock;
pub mod timestamp;
pub mod xattr;
