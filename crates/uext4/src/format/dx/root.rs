//! The htree root in directory block 0: the fake "." and ".." entries,
//! then `dx_root_info` (hash version, info length, levels) and the entries.

use super::layout::{limit_for, DX_ENTRY_SIZE, ROOT_ENTRIES_OFFSET, ROOT_INFO_OFFSET};
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::bytes::u8_at;

/// Root information.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DxRootInfo {
    /// Hash version of this directory.
    pub hash_version: u8,
    /// Levels of interior nodes below the root (0 = root points at leaves).
    pub indirect_levels: u8,
}

/// Parses the root block's info.
pub fn parse_root_info(b: &[u8], block: u64) -> Result<DxRootInfo> {
    if b.len() < ROOT_ENTRIES_OFFSET + DX_ENTRY_SIZE {
        return Err(Error::corruption(
            Structure::DxNode,
            Location::from_block(block),
            CorruptKind::TooShort { len: b.len(), need: ROOT_ENTRIES_OFFSET + DX_ENTRY_SIZE },
        ));
    }
    let info_len = u8_at(b, ROOT_INFO_OFFSET + 5);
    if info_len != 8 {
        return Err(Error::corruption(
            Structure::DxNode,
            Location::from_block(block),
            CorruptKind::Mismatch { field: "info_length", value: u64::from(info_len), expected: 8 },
        ));
    }
    if u8_at(b, ROOT_INFO_OFFSET + 7) != 0 {
        return Err(Error::corruption(
            Structure::DxNode,
            Location::from_block(block),
            CorruptKind::OutOfRange { field: "unused_flags", value: u64::from(u8_at(b, ROOT_INFO_OFFSET + 7)) },
        ));
    }
    Ok(DxRootInfo { hash_version: u8_at(b, ROOT_INFO_OFFSET + 4), indirect_levels: u8_at(b, ROOT_INFO_OFFSET + 6) })
}

/// Entry capacity of the root block.
pub fn root_limit(block_size: usize, csum: bool) -> u16 {
    limit_for(block_size, ROOT_ENTRIES_OFFSET, csum)
}

/// Writes the dx_root_info of block 0 (the fake "." and ".." entries are
/// the caller's): reserved word, hash version, info length 8, levels.
pub fn write_root_info(b: &mut [u8], hash_version: u8, indirect_levels: u8) {
    let o = ROOT_INFO_OFFSET;
    if b.len() < ROOT_ENTRIES_OFFSET {
        return;
    }
    b[o..o + 4].fill(0);
    b[o + 4] = hash_version;
    b[o + 5] = 8;
    b[o + 6] = indirect_levels;
    b[o + 7] = 0;
}
