//! What the two block-map writers share: the runs they map and the
//! credits a bounded removal leaves to its caller. [`super::extent_write`]
//! dispatches block-mapped files to [`super::indirect_write`], so the
//! contract both keep lives here, below both, rather than in the
//! dispatcher that the block-map writer would then import back.

use crate::format::block_number::{FileBlock, PhysicalBlock};

/// A newly mapped run: (logical block, physical block, length).
pub type Run = (FileBlock, PhysicalBlock, u64);

/// Credits a bounded removal leaves for its caller to finish in the same
/// handle: the inode, the orphan list (superblock, previous orphan or
/// orphan-file block: one either way), the inode's bitmap and
/// descriptor, its xattr block with that block's bitmap and descriptor.
pub const FINISH_RESERVE: usize = 16;
