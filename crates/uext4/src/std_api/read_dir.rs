//! [`ReadDir`] and [`DirEntry`]: directory listing as `std::fs::read_dir`
//! gives it, in batches of the inode-level `readdir`.

use super::metadata::Metadata;
use crate::error::Result;
use crate::format::inode::FileType;
use crate::fs::FsCore;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::sync::Arc;

/// Entries fetched from the directory per inode-level `readdir` call.
const BATCH: usize = 128;

/// The entries of a directory, without `.` and `..`, in the directory's
/// own order (hash order for indexed directories), as
/// `std::fs::ReadDir`. Entries added or removed while the listing runs
/// may or may not appear; none appears twice unless the directory is
/// converted from linear to indexed under it (as ext4's readdir).
pub struct ReadDir {
    core: Arc<FsCore>,
    dir: u32,
    path: Arc<PathBuf>,
    cookie: u64,
    pending: VecDeque<crate::dir::DirEntry>,
    done: bool,
}

impl ReadDir {
    pub(crate) fn new(core: Arc<FsCore>, dir: u32, path: PathBuf) -> ReadDir {
        ReadDir { core, dir, path: Arc::new(path), cookie: 0, pending: VecDeque::new(), done: false }
    }
}

/// The listing's state, not the whole filesystem core.
impl std::fmt::Debug for ReadDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadDir").field("path", &self.path).field("cookie", &self.cookie).finish_non_exhaustive()
    }
}

/// The entry, not the whole filesystem core.
impl std::fmt::Debug for DirEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirEntry")
            .field("path", &self.path())
            .field("ino", &self.ino)
            .field("file_type", &self.file_type)
            .finish()
    }
}

impl Iterator for ReadDir {
    type Item = Result<DirEntry>;

    fn next(&mut self) -> Option<Result<DirEntry>> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                return Some(Ok(DirEntry {
                    core: self.core.clone(),
                    dir_path: self.path.clone(),
                    name: OsString::from_vec(e.name),
                    ino: e.ino,
                    file_type: e.file_type,
                }));
            }
            if self.done {
                return None;
            }
            match self.core.readdir(self.dir, self.cookie, BATCH) {
                Ok(batch) => match batch.last() {
                    Some(last) => {
                        self.cookie = last.next_cookie;
                        self.pending.extend(batch);
                    }
                    None => self.done = true,
                },
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// One entry of a [`ReadDir`], as `std::fs::DirEntry` (with
/// `DirEntryExt::ino`).
#[derive(Clone)]
pub struct DirEntry {
    core: Arc<FsCore>,
    dir_path: Arc<PathBuf>,
    name: OsString,
    ino: u32,
    file_type: Option<FileType>,
}

impl DirEntry {
    /// The directory's path given to `read_dir` joined with the name.
    pub fn path(&self) -> PathBuf {
        self.dir_path.join(&self.name)
    }

    /// The entry's name.
    pub fn file_name(&self) -> OsString {
        self.name.clone()
    }

    /// The inode number the entry points to.
    pub fn ino(&self) -> u64 {
        u64::from(self.ino)
    }

    /// The file type, from the entry (no inode read) when the filesystem
    /// records types in entries (the `filetype` feature), else from the
    /// inode. A symlink is a symlink: it is not followed.
    ///
    /// # Errors
    ///
    /// only when the inode must be read (no `filetype` feature): [`Io`](crate::Error::Io),
    /// [`Corrupt`](crate::Error::Corrupt), [`Checksum`](crate::Error::Checksum) when the device or
    /// the image fails.
    pub fn file_type(&self) -> Result<FileType> {
        match self.file_type {
            Some(t) => Ok(t),
            None => Ok(self.core.stat(self.ino)?.file_type),
        }
    }

    /// The metadata of the entry's inode, not following a symlink (as
    /// `std::fs::DirEntry::metadata`).
    ///
    /// # Errors
    ///
    /// [`NotFound`](crate::Error::NotFound) when the entry was removed since it was listed;
    /// [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn metadata(&self) -> Result<Metadata> {
        Ok(self.core.stat(self.ino)?.into())
    }
}
