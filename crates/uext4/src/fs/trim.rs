//! FITRIM: discarding the free space of the filesystem, so that a sparse
//! image file gives it back (holes punched in the image) as a thin
//! device would (ext4_trim_fs).

use super::FsCore;
use crate::error::{Error, Result};

impl FsCore {
    /// Discards every run of free blocks of at least `min_len` bytes in
    /// the byte range `start..start + len` of the filesystem (FITRIM's
    /// `struct fstrim_range`) and returns the bytes discarded.
    ///
    /// The running transaction is committed first, so the blocks of files
    /// just deleted count as free. A run is discarded under its group's
    /// allocator lock, never while anything may be allocated in it.
    /// EINVAL as ext4: `start` past the end, `len` under one block, or
    /// `min_len` over a block group; EOPNOTSUPP when the device cannot
    /// discard (a raw block device).
    pub fn trim(&self, start: u64, len: u64, min_len: u64) -> Result<u64> {
        self.rw()?;
        let sb = &self.vol.sb;
        let bs = self.vol.block_size as u64;
        let cluster = bs << sb.log_cluster_size.saturating_sub(sb.log_block_size);
        let units_per_group = u64::from(sb.blocks_per_group) * bs / cluster;
        let min_units = min_len.div_ceil(cluster).max(1);
        let first = start / bs;
        if min_units > units_per_group || first >= sb.blocks_count || len < bs {
            return Err(Error::Invalid("FITRIM range".into()));
        }
        self.commit_journal()?;
        let dev = self.vol.device();
        let end = first.saturating_add(len / bs);
        let alloc = self.allocator()?;
        let blocks =
            alloc.for_each_trimmable(first, end, min_units as u32, |b, n| match dev.discard(b * bs, n * bs) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::Unsupported => Err(Error::Unsupported(e.to_string())),
                Err(e) => Err(Error::Io(e)),
            })?;
        Ok(blocks * bs)
    }
}
