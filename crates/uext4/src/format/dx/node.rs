//! An interior htree node: a fake empty directory entry spanning the
//! block, then the entries.

use super::layout::{limit_for, NODE_ENTRIES_OFFSET};
use crate::format::bytes::{le16, le32, put_le16, u8_at};

/// True if a directory block looks like an interior dx node: one fake
/// empty entry spanning the whole block.
pub fn is_node_block(b: &[u8]) -> bool {
    le32(b, 0) == 0 && crate::format::dirent::rec_len_from_disk(le16(b, 4), b.len()) == b.len() && u8_at(b, 6) == 0
}

/// Entry capacity of an interior node.
pub fn node_limit(block_size: usize, csum: bool) -> u16 {
    limit_for(block_size, NODE_ENTRIES_OFFSET, csum)
}

/// Writes the fake entry that starts an interior node: an unused entry
/// spanning the whole block.
pub fn write_node_header(b: &mut [u8]) {
    let bs = b.len();
    b[..NODE_ENTRIES_OFFSET.min(bs)].fill(0);
    put_le16(b, 4, crate::format::dirent::rec_len_to_disk(bs, bs));
}
