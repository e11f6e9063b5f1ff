//! The crate's error type.
//!
//! Every failure that image contents, a path or an offset can cause is a
//! variant here, never a panic. Each variant maps to the errno a user of the
//! filesystem would expect (used by the FUSE front end and the CLI).

use std::io;

/// Which on-disk structure a corruption or checksum error was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Structure {
    /// The primary superblock.
    Superblock,
    /// A block group descriptor.
    GroupDesc,
    /// A block or inode bitmap.
    Bitmap,
    /// An inode in an inode table.
    Inode,
    /// An extent tree node (header, index or leaf).
    Extent,
    /// An indirect block of a non-extent file.
    IndirectBlock,
    /// A directory leaf block or entry.
    DirEntry,
    /// An htree (dx) root or interior node.
    DxNode,
    /// An extended attribute block or in-inode attribute area.
    Xattr,
    /// A symlink target.
    Symlink,
    /// The jbd2 journal.
    Journal,
}

impl std::fmt::Display for Structure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            Structure::Superblock => "superblock",
            Structure::GroupDesc => "group descriptor",
            Structure::Bitmap => "bitmap",
            Structure::Inode => "inode",
            Structure::Extent => "extent tree",
            Structure::IndirectBlock => "indirect block",
            Structure::DirEntry => "directory entry",
            Structure::DxNode => "htree node",
            Structure::Xattr => "extended attribute",
            Structure::Symlink => "symlink",
            Structure::Journal => "journal",
        };
        f.write_str(s)
    }
}

/// Errors returned by uext4.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The underlying device failed.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// The image is not ext2/3/4 (bad magic, impossible geometry).
    #[error("not an ext4 filesystem: {0}")]
    NotExt4(String),
    /// An on-disk structure is inconsistent.
    #[error("corrupt {structure} (block {block}): {detail}")]
    Corrupt {
        /// The structure that is damaged.
        structure: Structure,
        /// The block it lives in (0 when not block-addressed).
        block: u64,
        /// What is wrong with it.
        detail: String,
    },
    /// A metadata checksum does not match.
    #[error("checksum mismatch in {structure} (block {block}): stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// The structure whose checksum failed.
        structure: Structure,
        /// The block it lives in.
        block: u64,
        /// The checksum stored on disk.
        stored: u32,
        /// The checksum computed over the contents.
        computed: u32,
    },
    /// The image uses features this implementation refuses.
    #[error("unsupported feature(s): {0}")]
    Unsupported(String),
    /// A write was attempted on a read-only filesystem or handle.
    #[error("read-only filesystem: {0}")]
    ReadOnly(String),
    /// A path component does not exist.
    #[error("no such file or directory: {0}")]
    NotFound(String),
    /// A path component is not a directory.
    #[error("not a directory: {0}")]
    NotDir(String),
    /// A directory was given where a non-directory was expected.
    #[error("is a directory: {0}")]
    IsDir(String),
    /// A name is longer than 255 bytes.
    #[error("file name too long: {0}")]
    NameTooLong(String),
    /// An argument is invalid (bad offset, bad name, wrong file type).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// An inode number outside the filesystem's range.
    #[error("bad inode number {0}")]
    BadInode(u64),
    /// Too many symbolic links were followed while resolving a path.
    #[error("too many levels of symbolic links: {0}")]
    Loop(String),
    /// No free space (blocks or inodes) for the request.
    #[error("no space left on device: {0}")]
    NoSpace(String),
    /// The named extended attribute does not exist.
    #[error("no such attribute: {0}")]
    NoAttr(String),
    /// The name already exists.
    #[error("file exists: {0}")]
    Exists(String),
    /// A directory to remove or replace is not empty.
    #[error("directory not empty: {0}")]
    NotEmpty(String),
    /// The link count would exceed the limit.
    #[error("too many links: {0}")]
    TooManyLinks(String),
    /// An offset or size beyond the largest file ext4 can hold.
    #[error("file too large: {0}")]
    FileTooBig(String),
    /// The object is in use (the root directory, a mountpoint).
    #[error("device or resource busy: {0}")]
    Busy(String),
    /// The operation is not permitted (e.g. a hard link to a directory).
    #[error("operation not permitted: {0}")]
    NotPermitted(String),
    /// A name or value is outside the range the call accepts (an extended
    /// attribute name that is empty or longer than 255 bytes).
    #[error("out of range: {0}")]
    Range(String),
    /// Access is refused (e.g. a default ACL on a non-directory).
    #[error("permission denied: {0}")]
    AccessDenied(String),
}

impl Error {
    /// Shorthand for a [`Error::Corrupt`].
    pub fn corrupt(structure: Structure, block: u64, detail: impl Into<String>) -> Self {
        Error::Corrupt { structure, block, detail: detail.into() }
    }

    /// The errno a POSIX caller expects for this error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            Error::NotExt4(_) => libc::EINVAL,
            Error::Corrupt { .. } => libc::EUCLEAN,
            Error::Checksum { .. } => libc::EBADMSG,
            Error::Unsupported(_) => libc::EOPNOTSUPP,
            Error::ReadOnly(_) => libc::EROFS,
            Error::NotFound(_) => libc::ENOENT,
            Error::NotDir(_) => libc::ENOTDIR,
            Error::IsDir(_) => libc::EISDIR,
            Error::NameTooLong(_) => libc::ENAMETOOLONG,
            Error::Invalid(_) => libc::EINVAL,
            Error::BadInode(_) => libc::ESTALE,
            Error::Loop(_) => libc::ELOOP,
            Error::NoAttr(_) => libc::ENODATA,
            Error::NoSpace(_) => libc::ENOSPC,
            Error::Exists(_) => libc::EEXIST,
            Error::NotEmpty(_) => libc::ENOTEMPTY,
            Error::TooManyLinks(_) => libc::EMLINK,
            Error::FileTooBig(_) => libc::EFBIG,
            Error::Busy(_) => libc::EBUSY,
            Error::NotPermitted(_) => libc::EPERM,
            Error::Range(_) => libc::ERANGE,
            Error::AccessDenied(_) => libc::EACCES,
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
