//! Block number newtypes for the codecs: a logical block of a file and a
//! physical block of the filesystem are both integers on disk, and mixing
//! them up (mapping a logical block as if it were physical) is a silent
//! data-corruption bug. The extent codecs carry them as distinct types;
//! `u64::from` (or `.0`) turns them back into numbers at the boundary.

use std::fmt;

/// A logical block number inside a file, as extents store it (32 bits:
/// `ee_block`, `ei_block`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LogicalBlock(pub u32);

/// A physical block number of the filesystem (48 bits in extents:
/// `ee_start`, `ei_leaf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PhysicalBlock(pub u64);

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

impl fmt::Display for PhysicalBlock {
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
}
