//! The numbers of the FUSE ABI (include/uapi/linux/fuse.h, protocol
//! 7.45 as Linux 6.18 speaks it): opcodes, flag bits and the sizes of the
//! fixed structures. Layouts themselves are in the codecs
//! ([`super::decode`], [`super::encode`]), which read and write fields at
//! their offsets in native byte order, as the kernel does.

/// The protocol's major version.
pub const KERNEL_VERSION: u32 = 7;
/// The highest minor version the codecs know.
pub const KERNEL_MINOR_VERSION: u32 = 45;
/// The oldest minor version served (FUSE_INIT with 64-bit flags and every
/// structure at its current size).
pub const MIN_MINOR_VERSION: u32 = 36;

/// Request opcodes (`enum fuse_opcode`).
#[allow(missing_docs)]
pub mod op {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const GETLK: u32 = 31;
    pub const SETLK: u32 = 32;
    pub const SETLKW: u32 = 33;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const BMAP: u32 = 37;
    pub const DESTROY: u32 = 38;
    pub const IOCTL: u32 = 39;
    pub const POLL: u32 = 40;
    pub const NOTIFY_REPLY: u32 = 41;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    pub const COPY_FILE_RANGE: u32 = 47;
    pub const SETUPMAPPING: u32 = 48;
    pub const REMOVEMAPPING: u32 = 49;
    pub const SYNCFS: u32 = 50;
    pub const TMPFILE: u32 = 51;
    pub const STATX: u32 = 52;
    pub const COPY_FILE_RANGE_64: u32 = 53;
}

/// Notification codes (`enum fuse_notify_code`), sent as the error field
/// of an out header whose unique is 0.
#[allow(missing_docs)]
pub mod notify {
    pub const INVAL_INODE: i32 = 2;
    pub const INVAL_ENTRY: i32 = 3;
    pub const STORE: i32 = 4;
    pub const DELETE: i32 = 6;
}

/// `struct fuse_in_header`.
pub const IN_HEADER_LEN: usize = 40;
/// `struct fuse_out_header`.
pub const OUT_HEADER_LEN: usize = 16;
/// `struct fuse_attr`.
pub const ATTR_LEN: usize = 88;
/// `struct fuse_attr_out`.
pub const ATTR_OUT_LEN: usize = 16 + ATTR_LEN;
/// `struct fuse_entry_out`.
pub const ENTRY_OUT_LEN: usize = 40 + ATTR_LEN;
/// `struct fuse_open_out`.
pub const OPEN_OUT_LEN: usize = 16;
/// `struct fuse_kstatfs` (`fuse_statfs_out`).
pub const STATFS_OUT_LEN: usize = 80;
/// `struct fuse_statx_out`: attr_valid, nsec, flags, two spare words, fuse_statx.
pub const STATX_OUT_LEN: usize = 32 + 256;
/// `struct fuse_init_out`.
pub const INIT_OUT_LEN: usize = 64;
/// `struct fuse_dirent` without its name.
pub const DIRENT_LEN: usize = 24;
/// `struct fuse_ioctl_out`.
pub const IOCTL_OUT_LEN: usize = 16;

/// `fuse_setattr_in.valid` bits.
#[allow(missing_docs)]
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const FH: u32 = 1 << 6;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const LOCKOWNER: u32 = 1 << 9;
    pub const CTIME: u32 = 1 << 10;
    pub const KILL_SUIDGID: u32 = 1 << 11;
}

/// `fuse_getattr_in.getattr_flags`: the fh field is valid.
pub const GETATTR_FH: u32 = 1;
/// `fuse_release_in.release_flags`: flush before release.
pub const RELEASE_FLUSH: u32 = 1;
/// `fuse_write_in.write_flags`: the write comes from the page cache.
pub const WRITE_CACHE: u32 = 1 << 0;
/// `fuse_write_in.write_flags`: the lock_owner field is valid.
pub const WRITE_LOCKOWNER: u32 = 1 << 1;
/// `fuse_write_in.write_flags`: remove the set-id bits (KILLPRIV_V2).
pub const WRITE_KILL_SUIDGID: u32 = 1 << 2;
/// `fuse_read_in.read_flags`: the lock_owner field is valid.
pub const READ_LOCKOWNER: u32 = 1 << 1;
/// `fuse_fsync_in.fsync_flags`: data only.
pub const FSYNC_FDATASYNC: u32 = 1;
/// `fuse_setxattr_in.setxattr_flags` (FUSE_SETXATTR_EXT): an access ACL
/// whose setting clears set-group-ID.
pub const SETXATTR_ACL_KILL_SGID: u32 = 1;
/// `fuse_open_in.open_flags`: remove the set-id bits (O_TRUNC by a caller
/// without CAP_FSETID).
pub const OPEN_KILL_SUIDGID: u32 = 1;
/// The statx mask bits uext4 fills (STATX_BASIC_STATS | STATX_BTIME).
pub const STATX_BASIC_STATS: u32 = 0x7ff;
/// statx: creation time.
pub const STATX_BTIME: u32 = 0x800;
/// The statx attributes ext4 reports (`ext4_getattr`): compressed,
/// immutable, append-only, nodump, encrypted, verity. Their bits equal
/// the inode flags' (EXT4_*_FL), so an inode's flags masked with this are
/// its attributes.
pub const STATX_ATTR_MASK: u64 = 0x4 | 0x10 | 0x20 | 0x40 | 0x800 | 0x10_0000;
/// `FUSE_DEV_IOC_CLONE`: `_IOR(229, 0, uint32_t)`.
pub const DEV_IOC_CLONE: u64 = (2 << 30) | (4 << 16) | (229 << 8);
