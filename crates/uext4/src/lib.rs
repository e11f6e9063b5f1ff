//! uext4: a user-space, ext4-compatible filesystem engine.
//!
//! Layers, bottom to top (each calls only the ones below it):
//!
//! - [`format`]: on-disk structures and checksums; pure, no I/O.
//! - [`device`]: block devices (image file, raw device, memory).
//! - [`cache`]: the sharded metadata buffer cache.
//! - [`volume`]: superblock + group descriptors + cache of an open image.
//! - [`inode`]: inode tables and block mapping (extent trees, block maps).
//! - [`dir`]: directory entries, linear and htree lookup.
//! - [`xattr`]: extended attributes.
//! - [`fs`]: the public [`Filesystem`] API.
//!
//! The journal, the block allocator, the concurrent data path and the FUSE
//! front end are later layers (see docs/ARCHITECTURE.md).

#![forbid(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod alloc;
pub mod cache;
pub mod counter;
pub mod data;
pub mod device;
pub mod dir;
pub mod error;
pub mod format;
pub mod fs;
pub mod inode;
pub mod journal;
pub mod lock_order;
pub mod locks;
pub mod mkfs;
pub mod txn;
pub mod volume;
pub mod xattr;

pub use device::{BlockDevice, FileDevice, MemoryDevice};
pub use dir::DirEntry;
pub use error::{CorruptKind, Corruption, Error, Location, Result, Structure};
pub use format::block_number::{FileBlock, PhysicalBlock};
pub use format::inode::{FileType, Timestamp};
pub use fs::{Filesystem, MountOptions, Stat, StatFs};
