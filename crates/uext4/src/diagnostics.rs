//! The block allocator seen from outside, for inspection and benchmark
//! tools: `uext4 mbstats` (per-group buddy summaries, as the kernel's
//! `/proc/fs/ext4/DEV/mb_groups`) and `uext4 bench alloc` (the allocator
//! alone, on a fragmented in-memory image).
//!
//! Use it to look at or measure the allocator; nothing here changes a
//! filesystem's files. The allocator itself stays private: these wrappers
//! are the part of it that is a promise.

use std::sync::Arc;

use crate::alloc::{fixture, AllocConfig, AllocRequest, Allocator};
use crate::device::BlockDevice;
use crate::error::Result;
use crate::format::block_number::{FileBlock, PhysicalBlock};
use crate::fs::FsCore;
use crate::volume::Volume;

pub use crate::alloc::GroupSummary;
use crate::inode_api::stats::{AllocStats, FreeExtentHistogram};

/// Every group's buddy summary, in group order (reads every block
/// bitmap): what `uext4 mbstats` prints. O(groups); for inspection.
pub fn group_summaries(fs: &FsCore) -> Result<Vec<GroupSummary>> {
    let a = fs.allocator()?;
    a.load_all()?;
    Ok((0..a.group_count()).filter_map(|g| a.group_summary(g)).collect())
}

/// A block allocator on its own over a device holding an ext4 image
/// (no journal, no files): for measuring allocation policies
/// (`uext4 bench alloc`). Blocks it hands out are marked used in its
/// bitmaps only; [`AllocatorBench::flush`] writes those bitmaps.
#[derive(Debug)]
pub struct AllocatorBench {
    alloc: Allocator,
}

impl AllocatorBench {
    /// The allocator over `dev` with the default tunables, CR1.5 on or
    /// off (the experiment `bench alloc` runs both ways).
    pub fn open(dev: Arc<dyn BlockDevice>, cr1_5: bool) -> Result<AllocatorBench> {
        let vol = Arc::new(Volume::open(dev, 1 << 16)?);
        let cfg = AllocConfig { cr1_5, ..AllocConfig::default() };
        Ok(AllocatorBench { alloc: Allocator::new(vol, cfg)? })
    }

    /// Makes every group's free space a repeating pattern of `free_len`
    /// free blocks and `used_len` used ones, the fragmented filesystem
    /// of the benchmark; returns the blocks left allocated.
    pub fn fragment(&self, free_len: u32, used_len: u32) -> Result<u64> {
        fixture::fragment(&self.alloc, free_len, used_len)
    }

    /// Allocates up to `len` blocks for logical block `logical` of inode
    /// `inode` (a file that will be `file_size` bytes), near `goal`, as a
    /// delayed-allocation writeback does: returns the first block and how
    /// many were given (at least one).
    pub fn allocate(
        &self,
        inode: u32,
        logical: FileBlock,
        goal: PhysicalBlock,
        len: u32,
        file_size: u64,
    ) -> Result<(PhysicalBlock, u32)> {
        let req = AllocRequest { inode, logical, goal, len, min_len: 1, file_size, flags: 0 };
        let al = self.alloc.allocate(&req)?;
        Ok((al.start, al.len))
    }

    /// Drops the inode's preallocation (as closing a file does).
    pub fn discard_inode_prealloc(&self, inode: u32) {
        self.alloc.discard_inode_prealloc(inode)
    }

    /// Writes the changed block bitmaps and group descriptors to the device.
    pub fn flush(&self) -> Result<()> {
        self.alloc.flush()
    }

    /// The allocator's counters (mb_stats).
    pub fn stats(&self) -> AllocStats {
        self.alloc.stats()
    }

    /// Free-space fragmentation now.
    pub fn free_extent_histogram(&self) -> Result<FreeExtentHistogram> {
        self.alloc.free_extent_histogram()
    }
}
