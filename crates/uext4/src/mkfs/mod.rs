//! Creating a fresh ext4 filesystem (`uext4 mkfs`), without mke2fs.
//!
//! The result has upstream mke2fs's (e2fsprogs 1.47) default ext4
//! feature set, orphan_file and metadata_csum_seed included, except
//! `resize_inode` (no blocks are reserved for online growth unless `-O
//! resize_inode` asks; the kernel and e2fsck accept that, see
//! docs/COMPATIBILITY.md); [`MkfsFeatures`]
//! adds or drops features as `mke2fs -O` does. The orphan file is inode
//! 12, sized as mke2fs sizes it, each block an empty slot array with a
//! sealed tail. Layout follows
//! mke2fs: sparse superblock backups, 64-byte descriptors, flex groups of
//! 16 whose bitmaps and inode tables sit together at the start of each
//! flex group, a contiguous journal near the middle of the disk, a root
//! directory and a 16 KiB lost+found. Groups that hold nothing but a
//! superblock backup are marked BLOCK_UNINIT, groups without used inodes
//! INODE_UNINIT, as mke2fs does.
//!
//! [`MkfsFeatures::for_type`] gives mke2fs's ext3 and ext2 sets: files
//! block-mapped (the special files' indirect blocks laid out by
//! `blockmap`), no uninit_bg, so that every group is initialised. With
//! bigalloc, bitmaps and group counts are in clusters and every file
//! takes whole clusters of its own.

mod blockmap;
mod finish;
mod layout;
mod options;
mod profile;
mod write;

pub use finish::reset_mount_traces;
pub use layout::{default_orphan_blocks, Layout};
pub use options::{parse_uuid, MkfsFeatures, MkfsOptions};
pub use profile::{Mke2fsProfile, SizeDefaults};
pub use write::{format_device, time_uuid};

use crate::device::FileDevice;
use crate::error::{Error, Result};
use std::path::Path;

/// Creates (or truncates) the image file `path` of `opts.size` bytes and
/// writes a fresh filesystem into it: the library's `mke2fs`, for tests
/// and image builders that need an empty ext4 to fill through
/// [`Filesystem::open_rw`](crate::Filesystem::open_rw).
pub fn mkfs_file(path: impl AsRef<Path>, opts: &MkfsOptions) -> Result<Layout> {
    let path = path.as_ref();
    if let Ok(m) = std::fs::metadata(path) {
        if !m.is_file() {
            return Err(Error::Invalid(format!("{}: not a regular file", path.display())));
        }
    }
    let f = std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(path)?;
    // A fresh sparse file reads as zeros: inode tables and the journal
    // need no explicit zeroing.
    f.set_len(opts.size)?;
    drop(f);
    let dev = FileDevice::open(path, true)?;
    format_device(&dev, opts, true)
}
