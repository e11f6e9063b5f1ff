//! The arguments of the requests that carry more than a node and a name,
//! one typed value each, as [`super::decode`] builds them from the wire
//! and the `Filesystem` methods take them: a field the kernel adds is
//! decoded into its request's struct and read where it is used, with no
//! argument list in between to grow. Names and data borrow from the
//! request buffer.

use super::types::{FileHandle, INodeNo, LockOwner, OpenFlags, RenameFlags, TimeOrNow, WriteFlags};
use std::ffi::OsStr;
use std::time::SystemTime;

/// SETATTR (`fuse_setattr_in`): the attributes to change, each `None`
/// (its `FATTR_*` bit clear) left as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SetAttr {
    /// New permission bits (`chmod`), with the type bits the kernel sends.
    pub mode: Option<u32>,
    /// New owner (`chown`).
    pub uid: Option<u32>,
    /// New group (`chown`).
    pub gid: Option<u32>,
    /// New size (`truncate`).
    pub size: Option<u64>,
    /// New access time, given or the present (`utimensat`).
    pub atime: Option<TimeOrNow>,
    /// New modification time, given or the present (`utimensat`).
    pub mtime: Option<TimeOrNow>,
    /// New change time (the kernel sends it with writeback caching).
    pub ctime: Option<SystemTime>,
    /// The open file the change came through (`ftruncate`, `fchmod`).
    pub fh: Option<FileHandle>,
    /// Remove the set-id bits as a write by this caller would
    /// (`FATTR_KILL_SUIDGID`, FUSE_HANDLE_KILLPRIV_V2).
    pub kill_suidgid: bool,
}

/// READ (`fuse_read_in`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    /// The handle OPEN gave.
    pub fh: FileHandle,
    /// Where to read from.
    pub offset: u64,
    /// At most this many bytes (fewer only at the end of the file).
    pub size: u32,
    /// The open's flags.
    pub flags: OpenFlags,
    /// The caller's lock owner, when the kernel says (`FUSE_READ_LOCKOWNER`).
    pub lock_owner: Option<LockOwner>,
}

/// WRITE (`fuse_write_in` and its data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write<'a> {
    /// The handle OPEN gave.
    pub fh: FileHandle,
    /// Where to write.
    pub offset: u64,
    /// The bytes to write.
    pub data: &'a [u8],
    /// Where the write comes from (page cache) and what it asks for
    /// (`FUSE_WRITE_KILL_SUIDGID`).
    pub write_flags: WriteFlags,
    /// The open's flags (`O_DSYNC`, `O_APPEND`, ...).
    pub flags: OpenFlags,
    /// The caller's lock owner, when the kernel says (`FUSE_WRITE_LOCKOWNER`).
    pub lock_owner: Option<LockOwner>,
}

/// RELEASE (`fuse_release_in`): the last close of an open file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    /// The handle OPEN gave.
    pub fh: FileHandle,
    /// The open's flags.
    pub flags: OpenFlags,
    /// The lock owner of the closing file.
    pub lock_owner: Option<LockOwner>,
    /// Flush before releasing (`FUSE_RELEASE_FLUSH`: no FLUSH came).
    pub flush: bool,
}

/// MKNOD (`fuse_mknod_in` and the name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mknod<'a> {
    /// The new entry's name in the parent.
    pub name: &'a OsStr,
    /// Type and permission bits.
    pub mode: u32,
    /// The caller's umask (not yet applied to `mode`).
    pub umask: u32,
    /// Device number of a device node (kernel's 32-bit encoding).
    pub rdev: u32,
}

/// MKDIR (`fuse_mkdir_in` and the name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mkdir<'a> {
    /// The new directory's name in the parent.
    pub name: &'a OsStr,
    /// Permission bits.
    pub mode: u32,
    /// The caller's umask (not yet applied to `mode`).
    pub umask: u32,
}

/// RENAME and RENAME2 (`fuse_rename2_in` and both names); the source
/// directory is the request's node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rename<'a> {
    /// The entry's name in the source directory.
    pub name: &'a OsStr,
    /// The target directory.
    pub newparent: INodeNo,
    /// The entry's name in the target directory.
    pub newname: &'a OsStr,
    /// `renameat2(2)` flags (none for RENAME).
    pub flags: RenameFlags,
}

/// CREATE (`fuse_create_in` and the name): create and open a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Create<'a> {
    /// The new file's name in the parent.
    pub name: &'a OsStr,
    /// Type and permission bits.
    pub mode: u32,
    /// The caller's umask (not yet applied to `mode`).
    pub umask: u32,
    /// `open(2)` flags.
    pub flags: i32,
    /// `fuse_create_in.open_flags` (`FUSE_OPEN_KILL_SUIDGID`).
    pub open_flags: u32,
}

/// TMPFILE (`fuse_create_in`): create and open an unnamed file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tmpfile {
    /// Type and permission bits.
    pub mode: u32,
    /// The caller's umask (not yet applied to `mode`).
    pub umask: u32,
    /// `open(2)` flags.
    pub flags: i32,
    /// `fuse_create_in.open_flags`.
    pub open_flags: u32,
}

/// SETXATTR (`fuse_setxattr_in`, the name and the value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetXattr<'a> {
    /// The attribute's full name (`user.x`, `system.posix_acl_access`).
    pub name: &'a OsStr,
    /// Its new value.
    pub value: &'a [u8],
    /// `XATTR_CREATE` / `XATTR_REPLACE`.
    pub flags: i32,
    /// `fuse_setxattr_in.setxattr_flags` (`FUSE_SETXATTR_ACL_KILL_SGID`;
    /// 0 unless FUSE_SETXATTR_EXT was negotiated).
    pub setxattr_flags: u32,
}

/// FALLOCATE (`fuse_fallocate_in`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fallocate {
    /// The handle OPEN gave.
    pub fh: FileHandle,
    /// Start of the range.
    pub offset: u64,
    /// Length of the range.
    pub length: u64,
    /// `fallocate(2)` mode (`FALLOC_FL_*`).
    pub mode: i32,
}

/// LSEEK (`fuse_lseek_in`): `SEEK_DATA` / `SEEK_HOLE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lseek {
    /// The handle OPEN gave.
    pub fh: FileHandle,
    /// Where to start looking.
    pub offset: i64,
    /// `SEEK_DATA`, `SEEK_HOLE` (the kernel serves the others itself).
    pub whence: i32,
}

/// COPY_FILE_RANGE and COPY_FILE_RANGE_64 (`fuse_copy_file_range_in`);
/// the source file is the request's node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyFileRange {
    /// The source's handle.
    pub fh_in: FileHandle,
    /// Where to read the source.
    pub offset_in: u64,
    /// The destination file.
    pub ino_out: INodeNo,
    /// The destination's handle.
    pub fh_out: FileHandle,
    /// Where to write the destination.
    pub offset_out: u64,
    /// Bytes to copy.
    pub len: u64,
    /// `copy_file_range(2)` flags.
    pub flags: u64,
    /// COPY_FILE_RANGE_64: the reply's count is 64-bit.
    pub wide: bool,
}

/// IOCTL (`fuse_ioctl_in` and its input).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ioctl<'a> {
    /// The handle OPEN or OPENDIR gave.
    pub fh: FileHandle,
    /// `FUSE_IOCTL_*` flags.
    pub flags: u32,
    /// The ioctl number.
    pub cmd: u32,
    /// The caller's argument (a user address for most commands).
    pub arg: u64,
    /// The bytes the kernel copied in from `arg`.
    pub in_data: &'a [u8],
    /// How many bytes the caller expects back.
    pub out_size: u32,
}
