//! [`OpenOptions`]: how [`crate::Filesystem::open_file`] opens a file,
//! with the flag checks of `std::fs::OpenOptions` on Linux.

use super::invalid_input;
use crate::error::Result;

/// Options for [`crate::Filesystem::open_file`], as
/// `std::fs::OpenOptions` (with `OpenOptionsExt::mode`), plus
/// [`OpenOptions::direct`] for direct I/O.
///
/// The same combinations are refused, with the same error as std's
/// (`InvalidInput`, no errno):
/// no access mode at all; `truncate`, `create` or `create_new` without
/// `write` or `append`; `truncate` with `append` (unless `create_new`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenOptions {
    pub(crate) read: bool,
    pub(crate) write: bool,
    pub(crate) append: bool,
    pub(crate) truncate: bool,
    pub(crate) create: bool,
    pub(crate) create_new: bool,
    pub(crate) mode: u32,
    pub(crate) direct: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions::new()
    }
}

/// What an open may do with the file, from the options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Access {
    pub(crate) read: bool,
    pub(crate) write: bool,
    pub(crate) append: bool,
}

impl OpenOptions {
    /// Every option off, mode `0o666` (masked by the filesystem's umask
    /// when a file is created).
    pub fn new() -> OpenOptions {
        OpenOptions {
            read: false,
            write: false,
            append: false,
            truncate: false,
            create: false,
            create_new: false,
            mode: 0o666,
            direct: false,
        }
    }

    /// Open for reading.
    pub fn read(&mut self, read: bool) -> &mut Self {
        self.read = read;
        self
    }

    /// Open for writing.
    pub fn write(&mut self, write: bool) -> &mut Self {
        self.write = write;
        self
    }

    /// Every write goes to the end of the file (`O_APPEND`; implies
    /// writing). Appends through one [`crate::File`] are atomic with
    /// each other; appends through different `File`s of one file are
    /// not ordered against each other.
    pub fn append(&mut self, append: bool) -> &mut Self {
        self.append = append;
        self
    }

    /// Truncate an existing regular file to 0 bytes (`O_TRUNC`).
    pub fn truncate(&mut self, truncate: bool) -> &mut Self {
        self.truncate = truncate;
        self
    }

    /// Create the file if it does not exist (`O_CREAT`).
    pub fn create(&mut self, create: bool) -> &mut Self {
        self.create = create;
        self
    }

    /// Create the file, failing with `AlreadyExists` if the name exists
    /// in any form, a dangling symlink included (`O_CREAT | O_EXCL`).
    pub fn create_new(&mut self, create_new: bool) -> &mut Self {
        self.create_new = create_new;
        self
    }

    /// The mode of a created file, before the umask (default `0o666`),
    /// as `std::os::unix::fs::OpenOptionsExt::mode`.
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = mode;
        self
    }

    /// Direct I/O (`O_DIRECT`): reads and writes go between the caller's
    /// buffer and the device, past the page cache. Unlike the kernel,
    /// uext4 accepts any alignment of buffer, offset and length.
    pub fn direct(&mut self, direct: bool) -> &mut Self {
        self.direct = direct;
        self
    }

    /// The access mode, refused as std refuses it.
    pub(crate) fn access(&self) -> Result<Access> {
        if !self.read && !self.write && !self.append {
            return Err(invalid_input("no access mode: read, write or append"));
        }
        if !self.write && !self.append && (self.truncate || self.create || self.create_new) {
            return Err(invalid_input("truncate or create without write access"));
        }
        if self.append && self.truncate && !self.create_new {
            return Err(invalid_input("truncate together with append"));
        }
        Ok(Access { read: self.read, write: self.write || self.append, append: self.append })
    }
}
