//! The typed values requests carry and replies take: node ids, handles,
//! attributes, flag sets and errors. The request structs of
//! [`super::request`] and the reply objects are built from them, so that
//! a node id, a handle or a flag set has one type from decode to reply.

use std::time::SystemTime;

/// An error number replied to the kernel (positive, as in `errno`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(i32);

impl std::fmt::Debug for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Errno({})", std::io::Error::from_raw_os_error(self.0))
    }
}

macro_rules! errnos {
    ($($name:ident = $val:expr),* $(,)?) => {
        impl Errno {
            $(
                #[allow(missing_docs)]
                pub const $name: Errno = Errno($val);
            )*
        }
    };
}

errnos! {
    EPERM = libc::EPERM, ENOENT = libc::ENOENT, EIO = libc::EIO, ENXIO = libc::ENXIO,
    E2BIG = libc::E2BIG, EACCES = libc::EACCES, EEXIST = libc::EEXIST, ENOTDIR = libc::ENOTDIR,
    EISDIR = libc::EISDIR, EINVAL = libc::EINVAL, EFBIG = libc::EFBIG, ENOSPC = libc::ENOSPC,
    EROFS = libc::EROFS, ERANGE = libc::ERANGE, ENAMETOOLONG = libc::ENAMETOOLONG,
    ENOSYS = libc::ENOSYS, ENOTTY = libc::ENOTTY, ESTALE = libc::ESTALE,
    EOPNOTSUPP = libc::EOPNOTSUPP, EPROTO = libc::EPROTO, NO_XATTR = libc::ENODATA,
}

impl Errno {
    /// The errno `n` (its absolute value; 0 becomes EIO: a reply must fail).
    pub fn from_i32(n: i32) -> Errno {
        match n.checked_abs() {
            Some(0) | None => Errno::EIO,
            Some(v) => Errno(v),
        }
    }

    /// The positive error number.
    pub fn code(self) -> i32 {
        self.0
    }
}

/// A FUSE node id (1 is the root).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct INodeNo(pub u64);

/// A file handle the daemon handed out at open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileHandle(pub u64);

/// An inode's generation (node id + generation name a file for good).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Generation(pub u64);

/// The owner of POSIX locks a request names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockOwner(pub u64);

/// `open(2)` flags as the caller gave them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFlags(pub i32);

/// A time a setattr sets: a given one or the present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeOrNow {
    /// This time.
    SpecificTime(SystemTime),
    /// The time the daemon serves the request.
    Now,
}

/// File types as FUSE reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    /// `S_IFIFO`.
    NamedPipe,
    /// `S_IFCHR`.
    CharDevice,
    /// `S_IFBLK`.
    BlockDevice,
    /// `S_IFDIR`.
    Directory,
    /// `S_IFREG`.
    RegularFile,
    /// `S_IFLNK`.
    Symlink,
    /// `S_IFSOCK`.
    Socket,
}

impl FileType {
    /// The `S_IFMT` bits of this type.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileType::NamedPipe => libc::S_IFIFO,
            FileType::CharDevice => libc::S_IFCHR,
            FileType::BlockDevice => libc::S_IFBLK,
            FileType::Directory => libc::S_IFDIR,
            FileType::RegularFile => libc::S_IFREG,
            FileType::Symlink => libc::S_IFLNK,
            FileType::Socket => libc::S_IFSOCK,
        }
    }

    /// The `DT_*` value of this type (a dirent's type field).
    pub fn dirent_type(self) -> u32 {
        self.mode_bits() >> 12
    }
}

/// An inode's attributes as replies carry them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileAttr {
    /// Node id.
    pub ino: INodeNo,
    /// Size in bytes.
    pub size: u64,
    /// 512-byte blocks allocated.
    pub blocks: u64,
    /// Last access.
    pub atime: SystemTime,
    /// Last data change.
    pub mtime: SystemTime,
    /// Last status change.
    pub ctime: SystemTime,
    /// Creation (statx btime).
    pub crtime: SystemTime,
    /// Type.
    pub kind: FileType,
    /// Permission bits (with set-id and sticky).
    pub perm: u16,
    /// Hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number (kernel's 32-bit encoding).
    pub rdev: u32,
    /// Preferred I/O size.
    pub blksize: u32,
    /// `fuse_attr.flags` (FUSE_ATTR_*).
    pub flags: u32,
}

macro_rules! flag_set {
    ($(#[$m:meta])* $name:ident($t:ty) { $($(#[$fm:meta])* $flag:ident = $v:expr),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name($t);

        impl $name {
            $($(#[$fm])* pub const $flag: $name = $name($v);)*

            /// No flag.
            pub const fn empty() -> $name {
                $name(0)
            }
            /// The set of these raw bits (unknown ones kept).
            pub const fn from_bits_retain(bits: $t) -> $name {
                $name(bits)
            }
            /// The raw bits.
            pub const fn bits(self) -> $t {
                self.0
            }
            /// True if every flag of `other` is set.
            pub const fn contains(self, other: $name) -> bool {
                self.0 & other.0 == other.0
            }
            /// Each set bit as a set of its own.
            pub fn iter(self) -> impl Iterator<Item = $name> {
                (0..<$t>::BITS).map(|b| (1 as $t) << b).filter(move |b| self.0 & b != 0).map($name)
            }
            fn name(self) -> Option<&'static str> {
                match self.0 {
                    $(v if v == $v => Some(stringify!($flag)),)*
                    _ => None,
                }
            }
        }

        impl std::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, o: $name) -> $name {
                $name(self.0 | o.0)
            }
        }

        impl std::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, o: $name) {
                self.0 |= o.0;
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}(", stringify!($name))?;
                let mut first = true;
                for b in self.iter() {
                    if !first {
                        f.write_str(" | ")?;
                    }
                    first = false;
                    match b.name() {
                        Some(n) => f.write_str(n)?,
                        None => write!(f, "{:#x}", b.0)?,
                    }
                }
                f.write_str(")")
            }
        }
    };
}

flag_set! {
    /// `fuse_open_out.open_flags`.
    FopenFlags(u32) {
        /// Bypass the kernel's page cache for this open.
        FOPEN_DIRECT_IO = 1 << 0,
        /// Keep the cached pages at open.
        FOPEN_KEEP_CACHE = 1 << 1,
        /// Not seekable.
        FOPEN_NONSEEKABLE = 1 << 2,
        /// Cache the directory's listing.
        FOPEN_CACHE_DIR = 1 << 3,
        /// Stream-like.
        FOPEN_STREAM = 1 << 4,
        /// No FLUSH at close.
        FOPEN_NOFLUSH = 1 << 5,
        /// Parallel writes on a direct-I/O open.
        FOPEN_PARALLEL_DIRECT_WRITES = 1 << 6,
    }
}

flag_set! {
    /// `renameat2(2)` flags.
    RenameFlags(u32) {
        /// Fail if the target exists.
        RENAME_NOREPLACE = 1 << 0,
        /// Swap source and target.
        RENAME_EXCHANGE = 1 << 1,
        /// Leave a whiteout at the source.
        RENAME_WHITEOUT = 1 << 2,
    }
}

flag_set! {
    /// `access(2)` mask.
    AccessFlags(i32) {
        /// Execute or search.
        X_OK = 1,
        /// Write.
        W_OK = 2,
        /// Read.
        R_OK = 4,
    }
}

flag_set! {
    /// `fuse_write_in.write_flags`.
    WriteFlags(u32) {
        /// A write of the kernel's page cache.
        FUSE_WRITE_CACHE = 1 << 0,
        /// lock_owner is valid.
        FUSE_WRITE_LOCKOWNER = 1 << 1,
        /// Remove the set-id bits (FUSE_HANDLE_KILLPRIV_V2).
        FUSE_WRITE_KILL_SUIDGID = 1 << 2,
    }
}

flag_set! {
    /// FUSE_INIT capability flags (flags | flags2 << 32).
    InitFlags(u64) {
        #[allow(missing_docs)] FUSE_ASYNC_READ = 1 << 0,
        #[allow(missing_docs)] FUSE_POSIX_LOCKS = 1 << 1,
        #[allow(missing_docs)] FUSE_FILE_OPS = 1 << 2,
        #[allow(missing_docs)] FUSE_ATOMIC_O_TRUNC = 1 << 3,
        #[allow(missing_docs)] FUSE_EXPORT_SUPPORT = 1 << 4,
        #[allow(missing_docs)] FUSE_BIG_WRITES = 1 << 5,
        #[allow(missing_docs)] FUSE_DONT_MASK = 1 << 6,
        #[allow(missing_docs)] FUSE_SPLICE_WRITE = 1 << 7,
        #[allow(missing_docs)] FUSE_SPLICE_MOVE = 1 << 8,
        #[allow(missing_docs)] FUSE_SPLICE_READ = 1 << 9,
        #[allow(missing_docs)] FUSE_FLOCK_LOCKS = 1 << 10,
        #[allow(missing_docs)] FUSE_HAS_IOCTL_DIR = 1 << 11,
        #[allow(missing_docs)] FUSE_AUTO_INVAL_DATA = 1 << 12,
        #[allow(missing_docs)] FUSE_DO_READDIRPLUS = 1 << 13,
        #[allow(missing_docs)] FUSE_READDIRPLUS_AUTO = 1 << 14,
        #[allow(missing_docs)] FUSE_ASYNC_DIO = 1 << 15,
        #[allow(missing_docs)] FUSE_WRITEBACK_CACHE = 1 << 16,
        #[allow(missing_docs)] FUSE_NO_OPEN_SUPPORT = 1 << 17,
        #[allow(missing_docs)] FUSE_PARALLEL_DIROPS = 1 << 18,
        #[allow(missing_docs)] FUSE_HANDLE_KILLPRIV = 1 << 19,
        #[allow(missing_docs)] FUSE_POSIX_ACL = 1 << 20,
        #[allow(missing_docs)] FUSE_ABORT_ERROR = 1 << 21,
        #[allow(missing_docs)] FUSE_MAX_PAGES = 1 << 22,
        #[allow(missing_docs)] FUSE_CACHE_SYMLINKS = 1 << 23,
        #[allow(missing_docs)] FUSE_NO_OPENDIR_SUPPORT = 1 << 24,
        #[allow(missing_docs)] FUSE_EXPLICIT_INVAL_DATA = 1 << 25,
        #[allow(missing_docs)] FUSE_MAP_ALIGNMENT = 1 << 26,
        #[allow(missing_docs)] FUSE_SUBMOUNTS = 1 << 27,
        #[allow(missing_docs)] FUSE_HANDLE_KILLPRIV_V2 = 1 << 28,
        #[allow(missing_docs)] FUSE_SETXATTR_EXT = 1 << 29,
        #[allow(missing_docs)] FUSE_INIT_EXT = 1 << 30,
        #[allow(missing_docs)] FUSE_INIT_RESERVED = 1 << 31,
        #[allow(missing_docs)] FUSE_SECURITY_CTX = 1 << 32,
        #[allow(missing_docs)] FUSE_HAS_INODE_DAX = 1 << 33,
        #[allow(missing_docs)] FUSE_CREATE_SUPP_GROUP = 1 << 34,
        #[allow(missing_docs)] FUSE_HAS_EXPIRE_ONLY = 1 << 35,
        #[allow(missing_docs)] FUSE_DIRECT_IO_ALLOW_MMAP = 1 << 36,
        #[allow(missing_docs)] FUSE_PASSTHROUGH = 1 << 37,
        #[allow(missing_docs)] FUSE_NO_EXPORT_SUPPORT = 1 << 38,
        #[allow(missing_docs)] FUSE_HAS_RESEND = 1 << 39,
        #[allow(missing_docs)] FUSE_ALLOW_IDMAP = 1 << 40,
        #[allow(missing_docs)] FUSE_OVER_IO_URING = 1 << 41,
        #[allow(missing_docs)] FUSE_REQUEST_TIMEOUT = 1 << 42,
    }
}

/// Who sent a request: the caller's ids and process, from the in header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The request's unique id.
    pub unique: u64,
    /// The node it is about.
    pub nodeid: u64,
    /// The caller's filesystem uid.
    pub uid: u32,
    /// The caller's filesystem gid.
    pub gid: u32,
    /// The caller's thread group id (0 for the kernel's own requests).
    pub pid: u32,
}

impl Request {
    /// The caller's filesystem uid.
    pub fn uid(&self) -> u32 {
        self.uid
    }
    /// The caller's filesystem gid.
    pub fn gid(&self) -> u32 {
        self.gid
    }
    /// The caller's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }
    /// The request's unique id.
    pub fn unique(&self) -> u64 {
        self.unique
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_sets_combine_and_print() {
        let f = FopenFlags::FOPEN_NOFLUSH | FopenFlags::FOPEN_DIRECT_IO;
        assert!(f.contains(FopenFlags::FOPEN_DIRECT_IO) && !f.contains(FopenFlags::FOPEN_KEEP_CACHE));
        assert_eq!(f.bits(), 0x21);
        assert_eq!(format!("{f:?}"), "FopenFlags(FOPEN_DIRECT_IO | FOPEN_NOFLUSH)");
        assert_eq!(format!("{:?}", InitFlags::from_bits_retain(1 << 63)), "InitFlags(0x8000000000000000)");
        assert_eq!(InitFlags::FUSE_OVER_IO_URING.iter().count(), 1);
        assert_eq!(format!("{:?}", FopenFlags::empty()), "FopenFlags()");
    }

    #[test]
    fn errno_is_positive_and_never_zero() {
        assert_eq!(Errno::from_i32(-libc::ENOENT), Errno::ENOENT);
        assert_eq!(Errno::from_i32(0), Errno::EIO);
        assert_eq!(Errno::from_i32(i32::MIN), Errno::EIO);
        assert_eq!(Errno::ENOSYS.code(), libc::ENOSYS);
    }
}
