//! uext4: a user-space, ext4-compatible filesystem engine.
//!
//! uext4 opens real ext4 images (files or block devices) and reads and
//! writes them without the kernel: journaled metadata (jbd2), the
//! multiblock allocator, extents, htree directories, extended attributes,
//! a page cache with delayed allocation, direct I/O. What it writes passes
//! `e2fsck -fn` and mounts in Linux. The engine is `Send + Sync`: any
//! number of threads use one open filesystem at once.
//!
//! # The `std::fs`-like API
//!
//! Most programs (image builders, test harnesses, backup tools) use
//! [`Filesystem`] the way they use `std::fs`: path functions such as
//! [`Filesystem::metadata`], [`Filesystem::read_dir`],
//! [`Filesystem::create_dir_all`], [`Filesystem::rename`],
//! [`Filesystem::copy`], [`Filesystem::read`] and [`Filesystem::write`];
//! and [`File`]s opened with [`OpenOptions`], which implement `Read`,
//! `Write`, `Seek` and [`std::os::unix::fs::FileExt`]. Errors are
//! [`Error`]s that convert into `std::io::Error` with the errno the
//! kernel would give, so `?` works in `io::Result` code.
//!
//! ```
//! use std::io::{Read, Seek, SeekFrom, Write};
//! use uext4::mkfs::{mkfs_file, MkfsOptions};
//! use uext4::{Filesystem, OpenOptions};
//!
//! fn main() -> std::io::Result<()> {
//!     // A fresh 32 MiB image in a temporary file.
//!     let dir = tempfile::tempdir()?;
//!     let image = dir.path().join("disk.img");
//!     mkfs_file(&image, &MkfsOptions { size: 32 << 20, ..Default::default() })?;
//!
//!     let fs = Filesystem::open_rw(&image)?;
//!     fs.create_dir_all("/etc/app")?;
//!     fs.write("/etc/app/config", "verbose = true\n")?;
//!
//!     let mut log = fs.open_file("/etc/app/log", OpenOptions::new().append(true).read(true).create(true))?;
//!     log.write_all(b"started\n")?;
//!     log.sync_all()?; // durable, as fsync(2)
//!     log.seek(SeekFrom::Start(0))?;
//!     let mut text = String::new();
//!     log.read_to_string(&mut text)?;
//!     assert_eq!(text, "started\n");
//!
//!     let names: Vec<_> = fs.read_dir("/etc/app")?.map(|e| e.map(|e| e.file_name())).collect::<Result<_, _>>()?;
//!     assert_eq!(names.len(), 2);
//!     assert_eq!(fs.read_to_string("/etc/app/config")?, "verbose = true\n");
//!     assert_eq!(fs.metadata("/etc/app/missing").map_err(std::io::Error::from).unwrap_err().kind(),
//!                std::io::ErrorKind::NotFound);
//!
//!     drop(log);
//!     drop(fs); // unmounts: data written back, journal committed and emptied
//!     Ok(())
//! }
//! ```
//!
//! See `crates/uext4/examples/` for longer programs (copying a host tree
//! into an image, many threads, an append-only log).
//!
//! # The inode-level API
//!
//! Underneath, [`FsCore`] (reached with [`Filesystem::inodes`], or through
//! `Deref`) works on inode numbers: `lookup`, `create(parent, name, ..)`,
//! `read(ino, offset, buf)`, `write_direct`, `setattr`, `fsync_file`,
//! `open_inode`/`close_inode`, ... It is what the FUSE adapter
//! (`uext4-fuse`) uses, and what advanced users reach for when they need
//! inode numbers, directory cookies or the ext4-specific attributes.
//!
//! # Layers
//!
//! Roughly bottom to top (docs/ARCHITECTURE.md has which module may call
//! which, and the lock order):
//!
//! - [`format`](mod@format): on-disk structures and checksums; pure, no I/O.
//! - [`device`]: block devices (image file, raw device, memory).
//! - [`cache`]: the sharded metadata buffer cache.
//! - [`volume`]: superblock + group descriptors + cache of an open image.
//! - [`journal`]: jbd2: recovery, handles, commit, checkpoint, revoke.
//! - [`alloc`]: the multiblock allocator (mballoc) and the inode allocator's
//!   bitmaps.
//! - [`txn`]: the transaction context (journal handle + allocators) that
//!   metadata changes go through.
//! - [`inode`]: inode tables and block mapping (extent trees, block maps).
//! - [`dir`]: directory entries, linear and htree, lookup and changes.
//! - [`xattr`]: extended attributes (in-inode and block).
//! - [`locks`] and [`lock_order`]: the inode locks, the lock order and its
//!   debug-build checker.
//! - [`data`]: the data path's policy (direct-write plans, page-cache
//!   switches, counters); the page cache itself lives in `data`.
//! - [`fs`]: [`Filesystem`] and [`FsCore`]: open/mount, namespace
//!   operations, buffered and direct I/O, writeback, fsync, orphans.
//! - [`std_api`]: the `std::fs`-like API over [`FsCore`].
//! - [`mkfs`]: creating a new filesystem.
//!
//! [`counter`] holds the striped statistics counters the fast paths bump.

#![forbid(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

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
mod int_hash;
pub mod journal;
pub mod lock_order;
pub mod locks;
pub mod mkfs;
pub mod quota;
pub mod std_api;
pub mod txn;
pub mod volume;
pub mod xattr;

pub use device::{BlockDevice, FileDevice, MemoryDevice};
pub use error::{CorruptKind, Corruption, Error, Location, Result, Structure};
pub use format::block_number::{FileBlock, PhysicalBlock};
pub use format::inode::{FileType, Timestamp};
pub use fs::{AtimeMode, Filesystem, FsCore, MountOptions, Stat, StatFs};
pub use std_api::{DirEntry, File, FileTimes, Metadata, OpenOptions, Permissions, ReadDir};
