//! The `std::fs`-like API: paths, [`File`]s, [`Metadata`], directory
//! iterators.
//!
//! This module owns the shape a Rust programmer expects from a filesystem
//! (the shape of `std::fs`), built only on the public inode-level API of
//! [`FsCore`] (see [`Filesystem::inodes`]). It adds no on-disk behaviour:
//! every call here is a path walk plus one or more inode-level operations.
//!
//! - Path functions are methods of [`Filesystem`] named as in `std::fs`:
//!   [`Filesystem::metadata`], [`Filesystem::read_dir`],
//!   [`Filesystem::create_dir_all`], [`Filesystem::rename`],
//!   [`Filesystem::copy`], [`Filesystem::read`], [`Filesystem::write`], ...
//!   Paths are absolute or relative to the root directory (there is no
//!   current directory); symlinks are followed as the matching system
//!   call follows them.
//! - [`Filesystem::open_file`] with [`OpenOptions`] returns a [`File`]:
//!   `Read`, `Write`, `Seek`, [`std::os::unix::fs::FileExt`], `Send +
//!   Sync`, and an open handle of the inode for as long as it lives (a
//!   file removed while open keeps its data until the last `File` drops).
//! - Errors are [`crate::Error`]s; they convert into [`std::io::Error`]
//!   with the errno a system call would give (see the conversion's
//!   documentation below), so `?` works in `io::Result` code.
//!
//! New files and directories get the owner set by
//! [`Filesystem::set_owner`] (default: the process's effective uid and
//! gid) and the mode asked for masked by [`Filesystem::set_umask`]
//! (default `0o022`), as a process with that umask gets from Linux.
//!
//! Every function here that returns a `Result` says how it fails under
//! `# Errors` (checked: clippy's `missing_errors_doc` is on for this module).

#![warn(clippy::missing_errors_doc)]

mod file;
mod metadata;
mod open_options;
mod path_ops;
mod read_dir;

pub use file::File;
pub use metadata::{FileTimes, Metadata, Permissions};
pub use open_options::OpenOptions;
pub use read_dir::{DirEntry, ReadDir};

use crate::error::{Error, Result};
use crate::fs::FsCore;
use crate::Filesystem;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

impl Filesystem {
    /// Sets the umask applied to the modes of files and directories
    /// created through the std-like API (default `0o022`). Only the
    /// permission bits (`0o7777`) count.
    pub fn set_umask(&self, umask: u32) {
        self.new_file_defaults().set_umask(umask);
    }

    /// The umask of the std-like API (see [`Filesystem::set_umask`]).
    pub fn umask(&self) -> u32 {
        self.new_file_defaults().umask()
    }

    /// Sets the owner (uid, gid) of files, directories and symlinks
    /// created through the std-like API (default: the process's
    /// effective uid and gid, as on Linux).
    pub fn set_owner(&self, uid: u32, gid: u32) {
        self.new_file_defaults().set_owner(uid, gid);
    }

    /// The owner of new nodes (see [`Filesystem::set_owner`]).
    pub fn owner(&self) -> (u32, u32) {
        self.new_file_defaults().owner()
    }
}

/// Converts a uext4 error into the `std::io::Error` a system call doing
/// the same would return, so `?` works in functions returning
/// `io::Result`.
///
/// [`Error::Io`] passes its inner `io::Error` through unchanged. Every
/// other error becomes `io::Error::from_raw_os_error(err.errno())`:
/// `raw_os_error()` is `Some(err.errno())` and `kind()` is the
/// `ErrorKind` std gives that errno. Among them:
///
/// | uext4 `Error`            | errno          | `io::ErrorKind`          |
/// |--------------------------|----------------|--------------------------|
/// | `NotFound`               | `ENOENT`       | `NotFound`               |
/// | `Exists`                 | `EEXIST`       | `AlreadyExists`          |
/// | `NotDir`                 | `ENOTDIR`      | `NotADirectory`          |
/// | `IsDir`                  | `EISDIR`       | `IsADirectory`           |
/// | `NotEmpty`               | `ENOTEMPTY`    | `DirectoryNotEmpty`      |
/// | `ReadOnly`               | `EROFS`        | `ReadOnlyFilesystem`     |
/// | `NoSpace`                | `ENOSPC`       | `StorageFull`            |
/// | `QuotaExceeded`          | `EDQUOT`       | (std's kind for EDQUOT)  |
/// | `CrossDevice`            | `EXDEV`        | `CrossesDevices`         |
/// | `FileTooBig`             | `EFBIG`        | `FileTooLarge`           |
/// | `TooManyLinks`           | `EMLINK`       | `TooManyLinks`           |
/// | `NameTooLong`            | `ENAMETOOLONG` | `InvalidFilename`        |
/// | `Invalid`, `NotExt4`     | `EINVAL`       | `InvalidInput`           |
/// | `NotPermitted`           | `EPERM`        | `PermissionDenied`       |
/// | `AccessDenied`           | `EACCES`       | `PermissionDenied`       |
/// | `Busy`                   | `EBUSY`        | `ResourceBusy`           |
/// | `Unsupported`            | `EOPNOTSUPP`   | `Unsupported`            |
/// | `Loop`                   | `ELOOP`        | (std's kind for ELOOP)   |
/// | `Corrupt`                | `EUCLEAN`      | `Uncategorized` (`Other`)|
/// | `Checksum`               | `EBADMSG`      | `Uncategorized` (`Other`)|
/// | `NoAttr`                 | `ENODATA`      | `Uncategorized` (`Other`)|
///
/// An errno carries no text: the conversion drops uext4's detail (which
/// structure is corrupt, which name exists). Keep the [`Error`] (log it,
/// or match on it) where that detail matters.
impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        match e {
            Error::Io(inner) => inner,
            other => io::Error::from_raw_os_error(other.errno()),
        }
    }
}

/// An error with just an errno (for the cases a system call reports
/// with no uext4 error behind them, such as EBADF).
pub(crate) fn errno(e: i32) -> Error {
    Error::Io(io::Error::from_raw_os_error(e))
}

/// An `InvalidInput` error with no errno: what std returns for arguments
/// it refuses itself, before any system call (bad `OpenOptions`, `copy`
/// from a non-file).
pub(crate) fn invalid_input(msg: &'static str) -> Error {
    Error::Io(io::Error::new(io::ErrorKind::InvalidInput, msg))
}

/// The bytes of a path (ext4 names are bytes).
pub(crate) fn path_bytes(p: &Path) -> &[u8] {
    p.as_os_str().as_bytes()
}

/// The path's bytes, refusing the empty path (ENOENT, as the kernel).
pub(crate) fn nonempty(p: &Path) -> Result<&[u8]> {
    let b = path_bytes(p);
    if b.is_empty() {
        return Err(Error::NotFound("empty path".into()));
    }
    Ok(b)
}

/// Splits `path` into the inode of its parent directory (symlinks in it
/// followed) and its last component, for operations that add or remove
/// a name. Trailing slashes are dropped; the root itself is `"."` in the
/// root.
pub(crate) fn split_parent<'p>(core: &FsCore, path: &'p Path) -> Result<(u32, &'p [u8])> {
    let b = nonempty(path)?;
    let end = b.iter().rposition(|&c| c != b'/').map_or(0, |i| i + 1);
    let trimmed = &b[..end];
    if trimmed.is_empty() {
        return Ok((core.root(), b"."));
    }
    match trimmed.iter().rposition(|&c| c == b'/') {
        Some(i) => {
            let parent = if i == 0 { &b"/"[..] } else { &trimmed[..i] };
            Ok((core.resolve_follow(parent)?, &trimmed[i + 1..]))
        }
        None => Ok((core.root(), trimmed)),
    }
}
