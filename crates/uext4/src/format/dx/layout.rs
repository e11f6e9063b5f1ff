//! Where everything sits in a dx block: the offsets of the root's info
//! and of the count/limit header in a root and in an interior node, the
//! sizes of an entry and of the metadata_csum tail, and the entry
//! capacity they leave. The other files of `dx/` read these from here
//! and not from each other, so that none of them imports a sibling in a
//! circle (the layer order of docs/ARCHITECTURE.md).

/// Offset of the dx_root_info in block 0 (after the fake "." and "..").
pub const ROOT_INFO_OFFSET: usize = 0x18;
/// Offset of the count/limit header in the root.
pub const ROOT_ENTRIES_OFFSET: usize = 0x20;
/// Offset of the count/limit header in an interior node (after a fake entry).
pub const NODE_ENTRIES_OFFSET: usize = 0x8;
/// Size of one (hash, block) entry.
pub const DX_ENTRY_SIZE: usize = 8;
/// Size of the metadata_csum tail of a dx block.
pub const DX_TAIL_SIZE: usize = 8;

/// Entry capacity of a dx block of `block_size` bytes whose entries start
/// at `entries_offset` (room for the dx tail kept when `csum`).
pub(super) fn limit_for(block_size: usize, entries_offset: usize, csum: bool) -> u16 {
    let room = block_size.saturating_sub(entries_offset + if csum { DX_TAIL_SIZE } else { 0 }) / DX_ENTRY_SIZE;
    room.min(usize::from(u16::MAX)) as u16
}
