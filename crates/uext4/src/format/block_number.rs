//! Block number newtypes: a logical block of a file (a position in the
//! file) and a physical block of the filesystem (a position on the
//! device) are both integers, and mixing them up (mapping a logical block
//! as if it were physical, freeing a file offset) is a silent
//! data-corruption bug. The engine carries them as distinct types from
//! the codecs up through the inode, allocator and transaction interfaces;
//! the numbers come out only where a block is read or written
//! ([`PhysicalBlock::get`]) or printed.
//!
//! Two logical types, on purpose:
//! - [`LogicalBlock`] (32 bits) is what an extent stores (`ee_block`,
//!   `ei_block`); only the extent codecs and the tree editor use it.
//! - [`FileBlock`] (64 bits) is a logical position as the engine computes
//!   it: from a byte offset (`offset / block_size` can exceed 2^32 for an
//!   `lseek` past what ext4 can map), as the end of a hole that runs "to
//!   the end of the file" (`u64::MAX`), or a corrupt, huge `i_size`
//!   divided by the block size. Widening keeps those edge cases ordinary
//!   arithmetic instead of wrapping or special values; the narrowing to
//!   [`LogicalBlock`] happens once, checked ([`FileBlock::to_logical`]),
//!   where the extent editor builds an extent (after refusing anything at
//!   or past 2^32, the format's limit).
//!
//! Arithmetic that keeps the meaning is provided (`block + n` is a block;
//! `a - b` between two blocks of one kind is a count of blocks); adding
//! two block numbers or mixing kinds does not compile.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A logical block number inside a file, as extents store it (32 bits:
/// `ee_block`, `ei_block`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LogicalBlock(pub u32);

/// A logical block number inside a file as the engine computes it (64
/// bits; see the module docs for why it is wider than [`LogicalBlock`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FileBlock(pub u64);

/// A physical block number of the filesystem (48 bits in extents:
/// `ee_start`, `ei_leaf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PhysicalBlock(pub u64);

impl FileBlock {
    /// The block holding byte `pos` of a file with `block_size`-byte blocks.
    pub fn of_byte(pos: u64, block_size: u64) -> FileBlock {
        FileBlock(pos / block_size)
    }

    /// The number.
    pub fn get(self) -> u64 {
        self.0
    }

    /// Byte offset in the file where this block starts.
    pub fn byte_offset(self, block_size: u64) -> u64 {
        self.0 * block_size
    }

    /// `self + n`, clamped at `u64::MAX` (ends of holes that run to the end).
    pub fn saturating_add(self, n: u64) -> FileBlock {
        FileBlock(self.0.saturating_add(n))
    }

    /// `self + n`, or `None` on overflow.
    pub fn checked_add(self, n: u64) -> Option<FileBlock> {
        self.0.checked_add(n).map(FileBlock)
    }

    /// Blocks from `earlier` to `self`, 0 when `earlier` is not earlier.
    pub fn saturating_sub(self, earlier: FileBlock) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// The 32-bit form extents store, or `None` past 2^32 - 1.
    pub fn to_logical(self) -> Option<LogicalBlock> {
        u32::try_from(self.0).ok().map(LogicalBlock)
    }
}

impl PhysicalBlock {
    /// The number, for the device and cache interfaces (which address
    /// blocks as plain `u64`s).
    pub fn get(self) -> u64 {
        self.0
    }

    /// Byte offset on the device where this block starts.
    pub fn byte_offset(self, block_size: u64) -> u64 {
        self.0 * block_size
    }

    /// `self - n`, clamped at block 0.
    pub fn saturating_sub(self, n: u64) -> PhysicalBlock {
        PhysicalBlock(self.0.saturating_sub(n))
    }
}

/// A 32-bit logical block as the format stores it outside extents (a
/// directory index's child block, for one).
impl From<u32> for FileBlock {
    fn from(b: u32) -> FileBlock {
        FileBlock(u64::from(b))
    }
}

impl From<FileBlock> for u64 {
    fn from(b: FileBlock) -> u64 {
        b.0
    }
}

impl From<LogicalBlock> for FileBlock {
    fn from(b: LogicalBlock) -> FileBlock {
        FileBlock(u64::from(b.0))
    }
}

/// Block arithmetic shared by the two 64-bit kinds: `block + n`,
/// `block += n`, `block - block` (a count).
macro_rules! block_arith {
    ($t:ident) => {
        impl Add<u64> for $t {
            type Output = $t;
            fn add(self, n: u64) -> $t {
                $t(self.0 + n)
            }
        }

        impl AddAssign<u64> for $t {
            fn add_assign(&mut self, n: u64) {
                self.0 += n;
            }
        }

        impl Sub for $t {
            type Output = u64;
            fn sub(self, earlier: $t) -> u64 {
                self.0 - earlier.0
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

block_arith!(FileBlock);
block_arith!(PhysicalBlock);

impl From<LogicalBlock> for u64 {
    fn from(b: LogicalBlock) -> u64 {
        u64::from(b.0)
    }
}

impl From<u32> for LogicalBlock {
    fn from(b: u32) -> LogicalBlock {
        LogicalBlock(b)
    }
}

impl From<PhysicalBlock> for u64 {
    fn from(b: PhysicalBlock) -> u64 {
        b.0
    }
}

impl From<u64> for PhysicalBlock {
    fn from(b: u64) -> PhysicalBlock {
        PhysicalBlock(b)
    }
}

impl fmt::Display for LogicalBlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_trip() {
        assert_eq!(u64::from(LogicalBlock::from(7u32)), 7);
        assert_eq!(u64::from(PhysicalBlock::from(1u64 << 40)), 1 << 40);
        assert!(LogicalBlock(1) < LogicalBlock(2));
        assert_eq!(PhysicalBlock(9).to_string(), "9");
    }

    #[test]
    fn arithmetic_keeps_the_kind() {
        let p = PhysicalBlock(100) + 5;
        assert_eq!(p, PhysicalBlock(105));
        assert_eq!(p - PhysicalBlock(100), 5);
        assert_eq!(p.byte_offset(4096), 105 * 4096);
        assert_eq!(FileBlock::of_byte(8191, 4096), FileBlock(1));
        assert_eq!(FileBlock(u64::MAX - 1).saturating_add(5), FileBlock(u64::MAX));
        assert_eq!(FileBlock(1 << 32).to_logical(), None);
        assert_eq!(FileBlock((1 << 32) - 1).to_logical(), Some(LogicalBlock(u32::MAX)));
        assert_eq!(FileBlock::from(LogicalBlock(7)), FileBlock(7));
    }
}
