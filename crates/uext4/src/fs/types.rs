//! The option and result types of the filesystem API.

use crate::format::inode::{FileType, Timestamp};
use std::time::Duration;

/// How to open a filesystem: pass it to
/// [`Filesystem::open_with`](crate::Filesystem::open_with) or
/// [`Filesystem::open_device`](crate::Filesystem::open_device) when the
/// defaults of [`Filesystem::open`](crate::Filesystem::open) and
/// [`Filesystem::open_rw`](crate::Filesystem::open_rw) do not fit (cache
/// sizes, commit interval, `sync`, atime, recovery); build it with
/// `..Default::default()`.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Metadata blocks the buffer cache keeps (default 16384).
    pub cache_blocks: usize,
    /// Open read-write (replays the journal onto the device first).
    pub write: bool,
    /// Interval of the periodic journal commit (default 5 s).
    pub commit_interval: Duration,
    /// Writes may use the blocks reserved for root (`s_r_blocks_count`),
    /// as a process with CAP_SYS_RESOURCE may (default false).
    pub use_reserved: bool,
    /// The data path's switches (the seeds' behaviour by default).
    pub data: crate::data::DataPathConfig,
    /// Page-cache budget in bytes (0: an eighth of RAM, 64 MiB to 4 GiB).
    pub cache_bytes: usize,
    /// How long a read-write open of an `mmp` filesystem watches an
    /// in-use MMP block before claiming it. None (the default): the
    /// kernel's `2 * interval + 1` s, at least 11 s. Shorter waits are for
    /// tests; they can miss a live node that updates less often.
    pub mmp_wait: Option<Duration>,
    /// When reads update access times (`relatime` by default, as ext4).
    pub atime: AtimeMode,
    /// `lazytime`: access times that reads set are written to the inode
    /// with its next change, at fsync, sync and unmount, or after 24
    /// hours; without it, also at the next periodic commit. Either way a
    /// read never starts a journal handle (see `fs/atime.rs`).
    pub lazytime: bool,
    /// `nodiratime`: directory listings never update access times (file
    /// reads follow [`MountOptions::atime`]).
    pub nodiratime: bool,
    /// `norecovery` (`noload`): a read-only open does not replay a
    /// journal that needs recovery (the image shows what its blocks hold,
    /// without the last committed changes); a read-write open of such an
    /// image is refused, as ext4 refuses it.
    pub norecovery: bool,
    /// `sync` (ext4's MS_SYNCHRONOUS): every write is durable when it
    /// returns (as with O_SYNC), and so is every change of the
    /// namespace, of attributes, inode flags and extended attributes, and
    /// every fallocate. Implies
    /// [`MountOptions::dirsync`].
    pub sync: bool,
    /// `dirsync`: every change of the namespace (create, mkdir, mknod,
    /// symlink, link, unlink, rmdir, rename) is durable when it returns
    /// (the journal commits before the call returns, as ext4's
    /// `ext4_handle_sync` of a directory with `IS_DIRSYNC`).
    pub dirsync: bool,
    /// Memory the block allocator's loaded groups (bitmap and buddy) may
    /// take, in bytes; clean groups beyond it are unloaded (0: the
    /// default, 64 MiB).
    pub alloc_cache_bytes: u64,
}

/// When reads of file data and directory listings update the access
/// time (the mount options of the same names). Inodes with the noatime
/// flag (`chattr +A`) are never updated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtimeMode {
    /// Only if the access time is not after the modification or change
    /// time, or is 24 hours old (the kernel's default).
    #[default]
    Relatime,
    /// On every read.
    Strictatime,
    /// Never.
    Noatime,
}

impl std::str::FromStr for AtimeMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "relatime" => Ok(AtimeMode::Relatime),
            "strictatime" => Ok(AtimeMode::Strictatime),
            "noatime" => Ok(AtimeMode::Noatime),
            other => Err(format!("unknown atime mode {other:?} (relatime, strictatime or noatime)")),
        }
    }
}

/// Everything `stat(2)` reports, plus the ext4-specific fields, from the
/// inode-level [`FsCore::stat`](crate::FsCore::stat) and the operations
/// that create or change an inode. Path-based code gets it wrapped in a
/// [`Metadata`](crate::Metadata) ([`Metadata::stat`](crate::Metadata::stat)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// Inode number.
    pub ino: u32,
    /// File type.
    pub file_type: FileType,
    /// Full mode (type and permission bits).
    pub mode: u16,
    /// Hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Allocated 512-byte sectors (including the xattr block).
    pub blocks: u64,
    /// Preferred I/O size (the block size).
    pub blksize: u32,
    /// Device numbers (major, minor) of device nodes; (0, 0) otherwise.
    pub rdev: (u32, u32),
    /// Access time.
    pub atime: Timestamp,
    /// Modification time.
    pub mtime: Timestamp,
    /// Change time.
    pub ctime: Timestamp,
    /// Creation time, when the inode is large enough to record it.
    pub crtime: Option<Timestamp>,
    /// ext4 inode flags (`i_flags`).
    pub flags: u32,
    /// Generation number.
    pub generation: u32,
    /// Extended attribute block, 0 if none.
    pub file_acl: u64,
    /// Project id.
    pub projid: u32,
}

/// Filesystem-wide counters, as statfs(2) reports them, from
/// [`FsCore::statfs`](crate::FsCore::statfs): free space and inodes, for
/// `df` or for deciding whether a write will fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    /// Block size.
    pub block_size: u32,
    /// Total blocks.
    pub blocks: u64,
    /// Free blocks.
    pub free_blocks: u64,
    /// Free blocks available to unprivileged users.
    pub avail_blocks: u64,
    /// Total inodes.
    pub inodes: u64,
    /// Free inodes.
    pub free_inodes: u64,
    /// Longest name.
    pub name_max: u32,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            cache_blocks: 16384,
            write: false,
            commit_interval: Duration::from_secs(5),
            use_reserved: false,
            data: crate::data::DataPathConfig::default(),
            cache_bytes: 0,
            mmp_wait: None,
            atime: AtimeMode::default(),
            lazytime: false,
            nodiratime: false,
            norecovery: false,
            sync: false,
            dirsync: false,
            alloc_cache_bytes: 0,
        }
    }
}
