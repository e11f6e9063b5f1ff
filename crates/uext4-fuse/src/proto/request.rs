//! The arguments of every request the `Filesystem` trait serves, one
//! typed value each, as [`super::decode`] builds them from the wire and
//! the trait's methods and the adapter's `do_*` functions take them: a
//! field the kernel adds is decoded into its request's struct and read
//! where it is used, with no argument list in between to grow. Each
//! value names the node it is about (`ino`, or `parent` for the requests
//! on a directory's entries: the in header's node id); names and data
//! borrow from the request buffer.

use super::types::{AccessFlags, FileHandle, INodeNo, LockOwner, OpenFlags, RenameFlags, TimeOrNow, WriteFlags};
use std::ffi::OsStr;
use std::path::Path;
use std::time::SystemTime;

/// LOOKUP (the name): find an entry and count one more kernel reference
/// to what it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lookup<'a> {
    /// The directory looked in.
    pub parent: INodeNo,
    /// The entry's name.
    pub name: &'a OsStr,
}

/// FORGET (`fuse_forget_in`), and each node of BATCH_FORGET: the kernel
/// drops references it counted through LOOKUP and the entry replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forget {
    /// The node forgotten.
    pub ino: INodeNo,
    /// How many references it drops.
    pub nlookup: u64,
}

/// BATCH_FORGET (`fuse_batch_forget_in` and its `fuse_forget_one`s):
/// many FORGETs in one request; [`BatchForget::forgets`] yields them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchForget<'a> {
    /// `count` pairs of (nodeid, nlookup), 16 bytes each, as the kernel
    /// sent them.
    pub nodes: &'a [u8],
}

impl BatchForget<'_> {
    /// How many nodes the batch forgets.
    pub fn len(&self) -> usize {
        self.nodes.len() / 16
    }

    /// True if the batch names no node.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batch's FORGETs, in the kernel's order.
    pub fn forgets(&self) -> impl Iterator<Item = Forget> + '_ {
        self.nodes.chunks_exact(16).filter_map(|n| {
            let mut r = super::decode::Reader::new(n);
            Some(Forget { ino: INodeNo(r.u64().ok()?), nlookup: r.u64().ok()? })
        })
    }
}

/// GETATTR (`fuse_getattr_in`): a node's attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetAttr {
    /// The node.
    pub ino: INodeNo,
    /// The open file asked through (`fstat`, `FUSE_GETATTR_FH`).
    pub fh: Option<FileHandle>,
}

/// STATX (`fuse_statx_in`): a node's attributes as statx(2) has them
/// (the kernel asks when a caller wants what GETATTR lacks, as btime).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Statx {
    /// The node.
    pub ino: INodeNo,
    /// The open file asked through (`FUSE_GETATTR_FH`).
    pub fh: Option<FileHandle>,
    /// statx(2) flags (`AT_STATX_*`).
    pub flags: u32,
    /// The fields asked for (`STATX_*`).
    pub mask: u32,
}

/// SETATTR (`fuse_setattr_in`): the attributes to change, each `None`
/// (its `FATTR_*` bit clear) left as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetAttr {
    /// The node changed.
    pub ino: INodeNo,
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

impl SetAttr {
    /// A SETATTR of `ino` that changes nothing: the start of a literal
    /// that sets the fields a test or caller wants (`..SetAttr::of(ino)`).
    pub fn of(ino: INodeNo) -> SetAttr {
        SetAttr {
            ino,
            mode: None,
            uid: None,
            gid: None,
            size: None,
            atime: None,
            mtime: None,
            ctime: None,
            fh: None,
            kill_suidgid: false,
        }
    }
}

/// READLINK: a symlink's target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readlink {
    /// The symlink.
    pub ino: INodeNo,
}

/// SYMLINK (both names): a new symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Symlink<'a> {
    /// The directory it goes in.
    pub parent: INodeNo,
    /// The new entry's name.
    pub name: &'a OsStr,
    /// What it points at (stored as given, not resolved).
    pub target: &'a Path,
}

/// MKNOD (`fuse_mknod_in` and the name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mknod<'a> {
    /// The directory it goes in.
    pub parent: INodeNo,
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
    /// The directory it goes in.
    pub parent: INodeNo,
    /// The new directory's name in the parent.
    pub name: &'a OsStr,
    /// Permission bits.
    pub mode: u32,
    /// The caller's umask (not yet applied to `mode`).
    pub umask: u32,
}

/// UNLINK (the name): remove a non-directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unlink<'a> {
    /// The directory holding the entry.
    pub parent: INodeNo,
    /// The entry's name.
    pub name: &'a OsStr,
}

/// RMDIR (the name): remove an empty directory's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rmdir<'a> {
    /// The directory holding the entry.
    pub parent: INodeNo,
    /// The entry's name.
    pub name: &'a OsStr,
}

/// RENAME and RENAME2 (`fuse_rename2_in` and both names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rename<'a> {
    /// The source directory.
    pub parent: INodeNo,
    /// The entry's name in the source directory.
    pub name: &'a OsStr,
    /// The target directory.
    pub newparent: INodeNo,
    /// The entry's name in the target directory.
    pub newname: &'a OsStr,
    /// `renameat2(2)` flags (none for RENAME).
    pub flags: RenameFlags,
}

/// LINK (`fuse_link_in` and the name): a new entry for an existing node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link<'a> {
    /// The node linked.
    pub ino: INodeNo,
    /// The directory the new entry goes in (the in header's node).
    pub newparent: INodeNo,
    /// The new entry's name.
    pub newname: &'a OsStr,
}

/// OPEN (`fuse_open_in`): open a file; the reply gives its handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Open {
    /// The file.
    pub ino: INodeNo,
    /// `open(2)` flags.
    pub flags: OpenFlags,
    /// `fuse_open_in.open_flags` (`FUSE_OPEN_KILL_SUIDGID`).
    pub open_flags: u32,
}

/// READ (`fuse_read_in`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    /// The open file.
    pub ino: INodeNo,
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
    /// The open file.
    pub ino: INodeNo,
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

/// STATFS: the filesystem's sizes and counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Statfs {
    /// The node asked through (any node of the filesystem).
    pub ino: INodeNo,
}

/// RELEASE (`fuse_release_in`): the last close of an open file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    /// The file.
    pub ino: INodeNo,
    /// The handle OPEN gave.
    pub fh: FileHandle,
    /// The open's flags.
    pub flags: OpenFlags,
    /// The lock owner of the closing file.
    pub lock_owner: Option<LockOwner>,
    /// Flush before releasing (`FUSE_RELEASE_FLUSH`: no FLUSH came).
    pub flush: bool,
}

/// FSYNC and FSYNCDIR (`fuse_fsync_in`): make a file or directory durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fsync {
    /// The file or directory.
    pub ino: INodeNo,
    /// The handle OPEN or OPENDIR gave.
    pub fh: FileHandle,
    /// fdatasync(2) (`FUSE_FSYNC_FDATASYNC`): the data and what reading
    /// it back needs, not every attribute.
    pub datasync: bool,
}

/// SETXATTR (`fuse_setxattr_in`, the name and the value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetXattr<'a> {
    /// The node.
    pub ino: INodeNo,
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

/// GETXATTR (`fuse_getxattr_in` and the name): an extended attribute's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetXattr<'a> {
    /// The node.
    pub ino: INodeNo,
    /// The attribute's full name.
    pub name: &'a OsStr,
    /// The caller's buffer size (0: reply the value's length only).
    pub size: u32,
}

/// LISTXATTR (`fuse_getxattr_in`): the names of a node's extended attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListXattr {
    /// The node.
    pub ino: INodeNo,
    /// The caller's buffer size (0: reply the list's length only).
    pub size: u32,
}

/// REMOVEXATTR (the name): remove an extended attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoveXattr<'a> {
    /// The node.
    pub ino: INodeNo,
    /// The attribute's full name.
    pub name: &'a OsStr,
}

/// FLUSH (`fuse_flush_in`): a close(2) of one descriptor of an open file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flush {
    /// The file.
    pub ino: INodeNo,
    /// The handle OPEN gave.
    pub fh: FileHandle,
    /// The closing caller's lock owner.
    pub lock_owner: LockOwner,
}

/// OPENDIR (`fuse_open_in`): open a directory; the reply gives its handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opendir {
    /// The directory.
    pub ino: INodeNo,
    /// `open(2)` flags.
    pub flags: OpenFlags,
}

/// READDIR and READDIRPLUS (`fuse_read_in`): entries of an open directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readdir {
    /// The directory.
    pub ino: INodeNo,
    /// The handle OPENDIR gave.
    pub fh: FileHandle,
    /// Where to go on (a cookie a previous reply gave, 0 at first).
    pub offset: u64,
    /// The reply's size limit in bytes.
    pub size: u32,
}

/// RELEASEDIR (`fuse_release_in`): the last close of an open directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Releasedir {
    /// The directory.
    pub ino: INodeNo,
    /// The handle OPENDIR gave.
    pub fh: FileHandle,
    /// The open's flags.
    pub flags: OpenFlags,
}

/// ACCESS (`fuse_access_in`): may the caller access a node (asked only
/// by kernels that do not check permissions themselves).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// The node.
    pub ino: INodeNo,
    /// The `access(2)` mask.
    pub mask: AccessFlags,
}

/// CREATE (`fuse_create_in` and the name): create and open a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Create<'a> {
    /// The directory it goes in.
    pub parent: INodeNo,
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
    /// The directory whose filesystem (and default ACL) it gets.
    pub parent: INodeNo,
    /// Type and permission bits.
    pub mode: u32,
    /// The caller's umask (not yet applied to `mode`).
    pub umask: u32,
    /// `open(2)` flags.
    pub flags: i32,
    /// `fuse_create_in.open_flags`.
    pub open_flags: u32,
}

/// INTERRUPT (`fuse_interrupt_in`): the caller of another request gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupt {
    /// The interrupted request's unique id.
    pub unique: u64,
}

/// BMAP (`fuse_bmap_in`): a file block's device block (fuseblk mounts only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bmap {
    /// The file.
    pub ino: INodeNo,
    /// The file's block.
    pub block: u64,
    /// Its size in bytes.
    pub blocksize: u32,
}

/// FALLOCATE (`fuse_fallocate_in`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fallocate {
    /// The open file.
    pub ino: INodeNo,
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
    /// The open file.
    pub ino: INodeNo,
    /// The handle OPEN gave.
    pub fh: FileHandle,
    /// Where to start looking.
    pub offset: i64,
    /// `SEEK_DATA`, `SEEK_HOLE` (the kernel serves the others itself).
    pub whence: i32,
}

/// COPY_FILE_RANGE and COPY_FILE_RANGE_64 (`fuse_copy_file_range_in`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyFileRange {
    /// The source file (the in header's node).
    pub ino: INodeNo,
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
    /// The open file or directory.
    pub ino: INodeNo,
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

/// SYNCFS (`fuse_syncfs_in`): make the whole filesystem durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Syncfs {
    /// The node asked through (any node of the filesystem).
    pub ino: INodeNo,
}
