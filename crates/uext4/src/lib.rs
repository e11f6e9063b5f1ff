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
//! [`inode_api`] gathers it with every type its methods take or return.
//!
//! # What is public
//!
//! The facade, at the crate root:
//!
//! - [`Filesystem`], [`File`], [`OpenOptions`], [`Metadata`], [`DirEntry`],
//!   [`ReadDir`], [`Permissions`], [`FileTimes`]: the `std::fs`-like API.
//! - [`MountOptions`] (with [`AtimeMode`], [`DataPathConfig`],
//!   [`LockPolicy`]), [`Stat`], [`StatFs`]: opening and inspecting.
//! - [`Error`], [`Result`] and the corruption types [`Corruption`],
//!   [`CorruptKind`], [`Location`], [`Structure`].
//! - [`BlockDevice`] and its implementations ([`FileDevice`],
//!   [`MemoryDevice`], and in [`device`] the overlay, recording and
//!   fault-injecting devices tests build on).
//! - [`FileType`], [`Timestamp`], [`FileBlock`], [`PhysicalBlock`].
//!
//! And documented modules:
//!
//! - [`mkfs`]: creating a new filesystem.
//! - [`inode_api`]: operations by inode number, for front ends.
//! - [`diagnostics`]: the block allocator's per-group view and a
//!   stand-alone allocator for benchmarks (its counters are in
//!   [`inode_api::stats`]).
//! - [`format`](mod@format): the on-disk format codecs (superblock, group
//!   descriptors, inodes, extents, directory entries, journal blocks,
//!   checksums). Pure functions over byte slices, no I/O; public for
//!   inspection tools (`uext4 info`, `stat`) and tests that build or
//!   check images byte by byte. They follow the ext4 format, which does not
//!   change, but their Rust signatures are less stable than the facade's.
//!
//! Everything else (the allocator, journal, transactions, buffer and page
//! caches, inode locks, directory and xattr code) is private to the crate:
//! docs/ARCHITECTURE.md describes those layers and which may call which.
//! `docs/API.md` says how the public surface is kept from changing by
//! accident.

#![forbid(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]
// A public item whose type cannot be named from outside is a leak of an
// internal type through the facade: warn (and fail clippy -D warnings).
#![warn(unnameable_types)]

// Lets the tests that moved into the crate (#[cfg(test)] modules that
// reach internals) keep the `uext4::...` paths they had as integration
// tests, so they stay the same files.
#[cfg(test)]
extern crate self as uext4;

pub(crate) mod alloc;
pub(crate) mod cache;
pub(crate) mod counter;
pub(crate) mod data;
pub mod device;
pub mod diagnostics;
pub(crate) mod dir;
pub(crate) mod error;
pub mod format;
pub(crate) mod fs;
pub(crate) mod inode;
pub mod inode_api;
mod int_hash;
pub(crate) mod journal;
pub(crate) mod lock_order;
pub(crate) mod locks;
pub mod mkfs;
pub(crate) mod quota;
pub(crate) mod std_api;
#[cfg(test)]
mod tests;
pub(crate) mod txn;
pub(crate) mod volume;
pub(crate) mod xattr;

pub use data::{DataPathConfig, LockPolicy};
pub use device::{BlockDevice, FileDevice, MemoryDevice};
pub use error::{CorruptKind, Corruption, Error, Location, Result, Structure};
pub use format::block_number::{FileBlock, PhysicalBlock};
pub use format::inode::{FileType, Timestamp};
pub use fs::{AtimeMode, Filesystem, FsCore, MountOptions, Stat, StatFs};
pub use std_api::{DirEntry, File, FileTimes, Metadata, OpenOptions, Permissions, ReadDir};
