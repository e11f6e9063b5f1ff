//! [`Metadata`], [`Permissions`], [`FileTimes`] and the std-like queries
//! of [`FileType`]: what `std::fs` and `std::os::unix::fs` return, over
//! the engine's [`Stat`].

use crate::error::{Error, Result};
use crate::format::inode::{FileType, Timestamp};
use crate::fs::Stat;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The std-like questions about a file type (`std::fs::FileType` and
/// `std::os::unix::fs::FileTypeExt`), on the engine's own enum.
impl FileType {
    /// A directory.
    pub fn is_dir(&self) -> bool {
        *self == FileType::Directory
    }

    /// A regular file.
    pub fn is_file(&self) -> bool {
        *self == FileType::Regular
    }

    /// A symbolic link.
    pub fn is_symlink(&self) -> bool {
        *self == FileType::Symlink
    }

    /// A block device node.
    pub fn is_block_device(&self) -> bool {
        *self == FileType::BlockDevice
    }

    /// A character device node.
    pub fn is_char_device(&self) -> bool {
        *self == FileType::CharDevice
    }

    /// A named pipe.
    pub fn is_fifo(&self) -> bool {
        *self == FileType::Fifo
    }

    /// A Unix socket.
    pub fn is_socket(&self) -> bool {
        *self == FileType::Socket
    }
}

/// A timestamp as a [`SystemTime`] (None if the platform cannot hold it).
pub(crate) fn to_system_time(t: Timestamp) -> Option<SystemTime> {
    let nsec = Duration::from_nanos(u64::from(t.nsec));
    if t.sec >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(t.sec as u64))?.checked_add(nsec)
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(t.sec.unsigned_abs()))?.checked_add(nsec)
    }
}

/// A [`SystemTime`] as a timestamp (seconds saturate at the ends of i64;
/// ext4 then clamps to what it can store).
pub(crate) fn from_system_time(t: SystemTime) -> Timestamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp { sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX), nsec: d.subsec_nanos() },
        Err(e) => {
            // Before the epoch: whole seconds down, nanoseconds up.
            let d = e.duration();
            let sec = i64::try_from(d.as_secs()).map_or(i64::MIN, |s| -s);
            match d.subsec_nanos() {
                0 => Timestamp { sec, nsec: 0 },
                n => Timestamp { sec: sec.saturating_sub(1), nsec: 1_000_000_000 - n },
            }
        }
    }
}

/// What `metadata` returns: `std::fs::Metadata` plus the fields of
/// `std::os::unix::fs::MetadataExt`, over the engine's [`Stat`] (see
/// [`Metadata::stat`] for the ext4-specific fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    stat: Stat,
}

impl From<Stat> for Metadata {
    fn from(stat: Stat) -> Metadata {
        Metadata { stat }
    }
}

impl Metadata {
    /// Everything the engine knows about the inode (flags, generation,
    /// project id, creation time, ...).
    pub fn stat(&self) -> &Stat {
        &self.stat
    }

    /// The file type.
    pub fn file_type(&self) -> FileType {
        self.stat.file_type
    }

    /// A directory.
    pub fn is_dir(&self) -> bool {
        self.stat.file_type.is_dir()
    }

    /// A regular file.
    pub fn is_file(&self) -> bool {
        self.stat.file_type.is_file()
    }

    /// A symbolic link (only from `symlink_metadata`, which does not follow
    /// it).
    pub fn is_symlink(&self) -> bool {
        self.stat.file_type.is_symlink()
    }

    /// Size in bytes (a symlink's: the length of its target).
    #[allow(clippy::len_without_is_empty)] // std::fs::Metadata's shape.
    pub fn len(&self) -> u64 {
        self.stat.size
    }

    /// The permission bits.
    pub fn permissions(&self) -> Permissions {
        Permissions::from_mode(self.mode())
    }

    /// Last modification (mtime).
    ///
    /// # Errors
    ///
    /// [`Invalid`](crate::Error::Invalid) when the stored time does not fit a `SystemTime`.
    pub fn modified(&self) -> Result<SystemTime> {
        time(self.stat.mtime)
    }

    /// Last access (atime).
    ///
    /// # Errors
    ///
    /// [`Invalid`](crate::Error::Invalid) when the stored time does not fit a `SystemTime`.
    pub fn accessed(&self) -> Result<SystemTime> {
        time(self.stat.atime)
    }

    /// Creation (crtime); `Unsupported` when the inode is too small to
    /// record it (128-byte inodes), as std reports a missing birth time.
    ///
    /// # Errors
    ///
    /// [`Unsupported`](crate::Error::Unsupported) when the inode has no creation time;
    /// [`Invalid`](crate::Error::Invalid) when it does not fit a `SystemTime`.
    pub fn created(&self) -> Result<SystemTime> {
        let t =
            self.stat.crtime.ok_or_else(|| Error::Unsupported("creation time: the inode has no room for it".into()))?;
        time(t)
    }

    /// Inode number.
    pub fn ino(&self) -> u64 {
        u64::from(self.stat.ino)
    }

    /// Full mode: file type and permission bits (`st_mode`).
    pub fn mode(&self) -> u32 {
        u32::from(self.stat.mode)
    }

    /// Number of hard links.
    pub fn nlink(&self) -> u64 {
        u64::from(self.stat.nlink)
    }

    /// Owner.
    pub fn uid(&self) -> u32 {
        self.stat.uid
    }

    /// Group.
    pub fn gid(&self) -> u32 {
        self.stat.gid
    }

    /// Device number of a device node (Linux `makedev` encoding), else 0.
    pub fn rdev(&self) -> u64 {
        let (major, minor) = (u64::from(self.stat.rdev.0), u64::from(self.stat.rdev.1));
        ((major & 0xfff) << 8) | ((major & !0xfff) << 32) | (minor & 0xff) | ((minor & !0xff) << 12)
    }

    /// Size in bytes (`st_size`).
    pub fn size(&self) -> u64 {
        self.stat.size
    }

    /// Allocated 512-byte sectors (`st_blocks`).
    pub fn blocks(&self) -> u64 {
        self.stat.blocks
    }

    /// Preferred I/O size: the block size (`st_blksize`).
    pub fn blksize(&self) -> u64 {
        u64::from(self.stat.blksize)
    }

    /// Access time, seconds since the epoch.
    pub fn atime(&self) -> i64 {
        self.stat.atime.sec
    }

    /// Nanoseconds of the access time.
    pub fn atime_nsec(&self) -> i64 {
        i64::from(self.stat.atime.nsec)
    }

    /// Modification time, seconds since the epoch.
    pub fn mtime(&self) -> i64 {
        self.stat.mtime.sec
    }

    /// Nanoseconds of the modification time.
    pub fn mtime_nsec(&self) -> i64 {
        i64::from(self.stat.mtime.nsec)
    }

    /// Status change time, seconds since the epoch.
    pub fn ctime(&self) -> i64 {
        self.stat.ctime.sec
    }

    /// Nanoseconds of the status change time.
    pub fn ctime_nsec(&self) -> i64 {
        i64::from(self.stat.ctime.nsec)
    }
}

fn time(t: Timestamp) -> Result<SystemTime> {
    to_system_time(t)
        .ok_or_else(|| Error::Invalid(format!("timestamp {}.{:09} does not fit a SystemTime", t.sec, t.nsec)))
}

/// Permission bits, as `std::fs::Permissions` with
/// `std::os::unix::fs::PermissionsExt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Permissions {
    mode: u32,
}

impl Permissions {
    /// Permissions of `mode` (type bits, if any, are kept but ignored when
    /// applied).
    pub fn from_mode(mode: u32) -> Permissions {
        Permissions { mode }
    }

    /// The mode bits.
    pub fn mode(&self) -> u32 {
        self.mode
    }

    /// Replaces the mode bits.
    pub fn set_mode(&mut self, mode: u32) {
        self.mode = mode;
    }

    /// No write bit is set for anyone (std's definition on Unix).
    pub fn readonly(&self) -> bool {
        self.mode & 0o222 == 0
    }

    /// Clears every write bit, or (false) sets them all, as std does on
    /// Unix.
    pub fn set_readonly(&mut self, readonly: bool) {
        if readonly {
            self.mode &= !0o222;
        } else {
            self.mode |= 0o222;
        }
    }
}

/// Timestamps to set (`std::fs::FileTimes`, with getters): `None` leaves
/// a time as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileTimes {
    accessed: Option<SystemTime>,
    modified: Option<SystemTime>,
}

impl FileTimes {
    /// Nothing to change.
    pub fn new() -> FileTimes {
        FileTimes::default()
    }

    /// Sets the access time.
    pub fn set_accessed(mut self, t: SystemTime) -> FileTimes {
        self.accessed = Some(t);
        self
    }

    /// Sets the modification time.
    pub fn set_modified(mut self, t: SystemTime) -> FileTimes {
        self.modified = Some(t);
        self
    }

    /// The access time to set.
    pub fn accessed(&self) -> Option<SystemTime> {
        self.accessed
    }

    /// The modification time to set.
    pub fn modified(&self) -> Option<SystemTime> {
        self.modified
    }

    /// The attribute change that applies these times.
    pub(crate) fn to_setattr(self) -> crate::fs::SetAttr {
        crate::fs::SetAttr {
            atime: self.accessed.map(from_system_time),
            mtime: self.modified.map(from_system_time),
            // Values, not "now" (File::set_times has no "now").
            times_given: self.accessed.is_some() || self.modified.is_some(),
            ..Default::default()
        }
    }
}
