//! The path functions of `std::fs`, as methods of [`Filesystem`].
//!
//! Each resolves its path(s) with the inode-level walk and does what the
//! matching system call does, with its errors: a symlink is followed
//! where the call follows it (`stat`, `open`, `chmod`, `utimensat`,
//! `getxattr`) and not where it does not (`lstat`, `unlink`, `rename`,
//! `link`, `readlink`).

use super::metadata::{FileTimes, Metadata, Permissions};
use super::{invalid_input, nonempty, split_parent, File, OpenOptions, ReadDir};
use crate::error::{Error, Result};
use crate::format::inode::FileType;
use crate::fs::{Filesystem, RenameFlags, SetAttr, XattrSetMode};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// Symlinks `canonicalize` follows before giving up (ELOOP), as the kernel.
const MAX_FOLLOWS: u32 = 40;
/// Bytes per read/write of [`Filesystem::copy`].
const COPY_CHUNK: usize = 1 << 20;

impl Filesystem {
    /// Opens a file with `opts` (`std::fs::OpenOptions::open`).
    ///
    /// A final symlink is followed, except by `create_new`, which fails on
    /// any existing name. A new file gets `opts`' mode (default `0o666`)
    /// masked by [`Filesystem::umask`], and the owner of
    /// [`Filesystem::owner`]. A directory may be opened read-only (its
    /// reads fail with `IsADirectory`); opening one for writing fails
    /// with `IsADirectory`. Opening for writing on a read-only
    /// filesystem fails with `ReadOnlyFilesystem`.
    ///
    /// Unlike Linux, `create` through a dangling symlink does not create
    /// the symlink's target: it fails with `NotFound`.
    ///
    /// # Errors
    ///
    /// the errors of resolving `path` ([`NotFound`](crate::Error::NotFound),
    /// [`NotDir`](crate::Error::NotDir), [`Loop`](crate::Error::Loop),
    /// [`NameTooLong`](crate::Error::NameTooLong)); [`Exists`](crate::Error::Exists) for
    /// `create_new` when the name exists; [`IsDir`](crate::Error::IsDir) when opening a directory
    /// for writing; [`Io`](crate::Error::Io) of kind `InvalidInput` for the option combinations std
    /// refuses; [`ReadOnly`](crate::Error::ReadOnly) on a filesystem opened read-only when opening
    /// for writing or creating; [`NoSpace`](crate::Error::NoSpace),
    /// [`QuotaExceeded`](crate::Error::QuotaExceeded) when blocks or inodes run out when creating;
    /// [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn open_file(&self, path: impl AsRef<Path>, opts: &OpenOptions) -> Result<File> {
        let path = path.as_ref();
        let access = opts.access()?;
        let core = self.shared_core();
        let bytes = nonempty(path)?;
        let ino = if opts.create_new {
            self.create_file(path, opts.mode)?
        } else if opts.create {
            match core.resolve_follow(bytes) {
                Ok(ino) => ino,
                Err(Error::NotFound(_)) => match self.create_file(path, opts.mode) {
                    // Created by someone else meanwhile: open that one.
                    Err(Error::Exists(_)) => core.resolve_follow(bytes)?,
                    r => r?,
                },
                Err(e) => return Err(e),
            }
        } else {
            core.resolve_follow(bytes)?
        };
        if access.write && core.is_read_only() {
            return Err(Error::ReadOnly("opening a file for writing".into()));
        }
        File::open_inode(core.clone(), ino, opts, access)
    }

    /// Creates the regular file `path` (EEXIST if the name exists).
    fn create_file(&self, path: &Path, mode: u32) -> Result<u32> {
        if path.as_os_str().as_bytes().ends_with(b"/") {
            // open("name/", O_CREAT): a directory is asked for.
            return Err(Error::IsDir(path.display().to_string()));
        }
        let core = self.inodes();
        let (parent, name) = split_parent(core, path)?;
        let d = self.new_file_defaults();
        let (uid, gid) = d.owner();
        Ok(core.create(parent, name, d.masked(mode), uid, gid)?.ino)
    }

    /// The metadata of `path`, following symlinks (`std::fs::metadata`).
    ///
    /// # Errors
    ///
    /// the errors of resolving `path` ([`NotFound`](crate::Error::NotFound),
    /// [`NotDir`](crate::Error::NotDir), [`Loop`](crate::Error::Loop),
    /// [`NameTooLong`](crate::Error::NameTooLong)); [`Io`](crate::Error::Io),
    /// [`Corrupt`](crate::Error::Corrupt), [`Checksum`](crate::Error::Checksum) when the device or
    /// the image fails.
    pub fn metadata(&self, path: impl AsRef<Path>) -> Result<Metadata> {
        let core = self.inodes();
        Ok(core.stat(core.resolve_follow(nonempty(path.as_ref())?)?)?.into())
    }

    /// The metadata of `path` itself, a symlink included
    /// (`std::fs::symlink_metadata`).
    ///
    /// # Errors
    ///
    /// the errors of resolving `path` ([`NotFound`](crate::Error::NotFound),
    /// [`NotDir`](crate::Error::NotDir), [`Loop`](crate::Error::Loop),
    /// [`NameTooLong`](crate::Error::NameTooLong)); [`Io`](crate::Error::Io),
    /// [`Corrupt`](crate::Error::Corrupt), [`Checksum`](crate::Error::Checksum) when the device or
    /// the image fails.
    pub fn symlink_metadata(&self, path: impl AsRef<Path>) -> Result<Metadata> {
        let core = self.inodes();
        Ok(core.stat(core.resolve(nonempty(path.as_ref())?)?)?.into())
    }

    /// True if `path` exists (following symlinks); errors other than "not
    /// found" are errors (`std::fs::exists`).
    ///
    /// # Errors
    ///
    /// any error of [`Filesystem::metadata`] but [`NotFound`](crate::Error::NotFound).
    pub fn try_exists(&self, path: impl AsRef<Path>) -> Result<bool> {
        match self.metadata(path) {
            Ok(_) => Ok(true),
            Err(Error::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// True if `metadata(path)` succeeds (`Path::exists`).
    pub fn exists(&self, path: impl AsRef<Path>) -> bool {
        self.metadata(path).is_ok()
    }

    /// The entries of directory `path`, without `.` and `..`
    /// (`std::fs::read_dir`). Entry paths are `path` joined with the name.
    ///
    /// # Errors
    ///
    /// the errors of resolving `path` ([`NotFound`](crate::Error::NotFound),
    /// [`NotDir`](crate::Error::NotDir), [`Loop`](crate::Error::Loop),
    /// [`NameTooLong`](crate::Error::NameTooLong)); [`NotDir`](crate::Error::NotDir) when `path` is
    /// not a directory; [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn read_dir(&self, path: impl AsRef<Path>) -> Result<ReadDir> {
        let path = path.as_ref();
        let core = self.shared_core();
        let ino = core.resolve_follow(nonempty(path)?)?;
        if core.stat(ino)?.file_type != FileType::Directory {
            return Err(Error::NotDir(path.display().to_string()));
        }
        Ok(ReadDir::new(core.clone(), ino, path.to_path_buf()))
    }

    /// Creates directory `path`, mode `0o777` masked by the umask
    /// (`std::fs::create_dir`).
    ///
    /// # Errors
    ///
    /// [`Exists`](crate::Error::Exists) when the name exists; the errors of resolving the parent
    /// ([`NotFound`](crate::Error::NotFound), [`NotDir`](crate::Error::NotDir),
    /// [`Loop`](crate::Error::Loop), [`NameTooLong`](crate::Error::NameTooLong));
    /// [`ReadOnly`](crate::Error::ReadOnly) on a filesystem opened read-only;
    /// [`NoSpace`](crate::Error::NoSpace), [`QuotaExceeded`](crate::Error::QuotaExceeded) when
    /// blocks or inodes run out; [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn create_dir(&self, path: impl AsRef<Path>) -> Result<()> {
        let core = self.inodes();
        let (parent, name) = split_parent(core, path.as_ref())?;
        let d = self.new_file_defaults();
        let (uid, gid) = d.owner();
        core.mkdir(parent, name, d.masked(0o777), uid, gid)?;
        Ok(())
    }

    /// Creates `path` and every missing parent (`std::fs::create_dir_all`,
    /// with its algorithm: success if the path is, or becomes, a
    /// directory).
    ///
    /// # Errors
    ///
    /// the error of the first [`Filesystem::create_dir`] that fails on a component that is not, and
    /// does not become, a directory (a file in the way: [`Exists`](crate::Error::Exists) or
    /// [`NotDir`](crate::Error::NotDir)).
    pub fn create_dir_all(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        if path.as_os_str().is_empty() {
            return Ok(());
        }
        match self.create_dir(path) {
            Ok(()) => return Ok(()),
            Err(Error::NotFound(_)) => {}
            Err(_) if self.is_dir(path) => return Ok(()),
            Err(e) => return Err(e),
        }
        match path.parent() {
            Some(p) => self.create_dir_all(p)?,
            None => return Err(Error::Invalid("failed to create whole tree".into())),
        }
        match self.create_dir(path) {
            Ok(()) => Ok(()),
            Err(_) if self.is_dir(path) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.metadata(path).is_ok_and(|m| m.is_dir())
    }

    /// Removes a file, symlink or other non-directory
    /// (`std::fs::remove_file`; a directory: `IsADirectory`).
    ///
    /// # Errors
    ///
    /// the errors of resolving `path` ([`NotFound`](crate::Error::NotFound),
    /// [`NotDir`](crate::Error::NotDir), [`Loop`](crate::Error::Loop),
    /// [`NameTooLong`](crate::Error::NameTooLong)); [`IsDir`](crate::Error::IsDir) when `path` is a
    /// directory; [`ReadOnly`](crate::Error::ReadOnly) on a filesystem opened read-only;
    /// [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn remove_file(&self, path: impl AsRef<Path>) -> Result<()> {
        let core = self.inodes();
        let (parent, name) = split_parent(core, path.as_ref())?;
        core.unlink(parent, name)
    }

    /// Removes an empty directory (`std::fs::remove_dir`).
    ///
    /// # Errors
    ///
    /// the errors of resolving `path` ([`NotFound`](crate::Error::NotFound),
    /// [`NotDir`](crate::Error::NotDir), [`Loop`](crate::Error::Loop),
    /// [`NameTooLong`](crate::Error::NameTooLong)); [`NotDir`](crate::Error::NotDir) when `path` is
    /// not a directory; [`NotEmpty`](crate::Error::NotEmpty) when it has entries;
    /// [`Busy`](crate::Error::Busy) for the root; [`ReadOnly`](crate::Error::ReadOnly) on a
    /// filesystem opened read-only; [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn remove_dir(&self, path: impl AsRef<Path>) -> Result<()> {
        let core = self.inodes();
        let (parent, name) = split_parent(core, path.as_ref())?;
        if name == b"." && parent == core.root() {
            return Err(Error::Busy("the root directory".into()));
        }
        core.rmdir(parent, name)
    }

    /// Removes a directory and everything under it
    /// (`std::fs::remove_dir_all`): a symlink is removed itself, never
    /// followed; a non-directory is `NotADirectory`.
    ///
    /// # Errors
    ///
    /// the errors of resolving `path` ([`NotFound`](crate::Error::NotFound),
    /// [`NotDir`](crate::Error::NotDir), [`Loop`](crate::Error::Loop),
    /// [`NameTooLong`](crate::Error::NameTooLong)); [`NotDir`](crate::Error::NotDir) when `path` is
    /// not a directory; any error of removing an entry under it (what was removed before stays
    /// removed); [`ReadOnly`](crate::Error::ReadOnly) on a filesystem opened read-only;
    /// [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn remove_dir_all(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let meta = self.symlink_metadata(path)?;
        if meta.is_symlink() {
            return self.remove_file(path);
        }
        if !meta.is_dir() {
            return Err(Error::NotDir(path.display().to_string()));
        }
        self.remove_tree(path)
    }

    fn remove_tree(&self, dir: &Path) -> Result<()> {
        // Collected first: removing entries while listing could skip some.
        let entries: Vec<_> = self.read_dir(dir)?.collect::<Result<_>>()?;
        for e in entries {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => self.remove_tree(&p)?,
                Ok(_) => match self.remove_file(&p) {
                    // Gone meanwhile: what remove_dir_all wants anyway.
                    Err(Error::NotFound(_)) => {}
                    r => r?,
                },
                Err(Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        match self.remove_dir(dir) {
            Err(Error::NotFound(_)) => Ok(()),
            r => r,
        }
    }

    /// Renames `from` to `to`, replacing `to` if it is a file, or an empty
    /// directory when `from` is a directory (`std::fs::rename`). Neither
    /// path's last component is followed if it is a symlink.
    ///
    /// This shadows the inode-level `rename(parent, name, newparent,
    /// newname, flags)`; reach that one through [`Filesystem::inodes`].
    ///
    /// # Errors
    ///
    /// the errors of resolving both paths; [`IsDir`](crate::Error::IsDir) or
    /// [`NotDir`](crate::Error::NotDir) when a directory would replace a non-directory or the
    /// reverse; [`NotEmpty`](crate::Error::NotEmpty) when `to` is a non-empty directory;
    /// [`Invalid`](crate::Error::Invalid) when `to` lies inside `from`;
    /// [`ReadOnly`](crate::Error::ReadOnly) on a filesystem opened read-only;
    /// [`NoSpace`](crate::Error::NoSpace), [`QuotaExceeded`](crate::Error::QuotaExceeded) when
    /// blocks or inodes run out; [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<()> {
        let core = self.inodes();
        let (p, n) = split_parent(core, from.as_ref())?;
        let (np, nn) = split_parent(core, to.as_ref())?;
        core.rename(p, n, np, nn, RenameFlags::default())
    }

    /// Makes `link` a new name of `original` (not following a final
    /// symlink of `original`, as Linux's `link`; `std::fs::hard_link`).
    ///
    /// # Errors
    ///
    /// the errors of resolving both paths; [`Exists`](crate::Error::Exists) when `link` exists;
    /// [`NotPermitted`](crate::Error::NotPermitted) when `original` is a directory;
    /// [`TooManyLinks`](crate::Error::TooManyLinks) at ext4's link limit;
    /// [`ReadOnly`](crate::Error::ReadOnly) on a filesystem opened read-only;
    /// [`NoSpace`](crate::Error::NoSpace), [`QuotaExceeded`](crate::Error::QuotaExceeded) when
    /// blocks or inodes run out; [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn hard_link(&self, original: impl AsRef<Path>, link: impl AsRef<Path>) -> Result<()> {
        let core = self.inodes();
        let ino = core.resolve(nonempty(original.as_ref())?)?;
        let (np, nn) = split_parent(core, link.as_ref())?;
        core.link(ino, np, nn)?;
        Ok(())
    }

    /// Creates the symlink `link` pointing to `original`
    /// (`std::os::unix::fs::symlink`; the target is stored as given,
    /// never resolved).
    ///
    /// This shadows the inode-level `symlink(parent, name, target, uid,
    /// gid)`; reach that one through [`Filesystem::inodes`].
    ///
    /// # Errors
    ///
    /// [`Exists`](crate::Error::Exists) when `link` exists; the errors of resolving its parent;
    /// [`ReadOnly`](crate::Error::ReadOnly) on a filesystem opened read-only;
    /// [`NoSpace`](crate::Error::NoSpace), [`QuotaExceeded`](crate::Error::QuotaExceeded) when
    /// blocks or inodes run out; [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn symlink(&self, original: impl AsRef<Path>, link: impl AsRef<Path>) -> Result<()> {
        let core = self.inodes();
        let (p, n) = split_parent(core, link.as_ref())?;
        let (uid, gid) = self.owner();
        core.symlink(p, n, original.as_ref().as_os_str().as_bytes(), uid, gid)?;
        Ok(())
    }

    /// The target of symlink `path` (`std::fs::read_link`; not a symlink:
    /// `InvalidInput`).
    ///
    /// # Errors
    ///
    /// the errors of resolving `path` ([`NotFound`](crate::Error::NotFound),
    /// [`NotDir`](crate::Error::NotDir), [`Loop`](crate::Error::Loop),
    /// [`NameTooLong`](crate::Error::NameTooLong)); [`Io`](crate::Error::Io) of kind `InvalidInput`
    /// when `path` is not a symlink; [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn read_link(&self, path: impl AsRef<Path>) -> Result<PathBuf> {
        let core = self.inodes();
        let ino = core.resolve(nonempty(path.as_ref())?)?;
        Ok(PathBuf::from(OsString::from_vec(core.readlink(ino)?)))
    }

    /// Sets the permission bits of `path`, following symlinks
    /// (`std::fs::set_permissions`).
    ///
    /// # Errors
    ///
    /// the errors of resolving `path` ([`NotFound`](crate::Error::NotFound),
    /// [`NotDir`](crate::Error::NotDir), [`Loop`](crate::Error::Loop),
    /// [`NameTooLong`](crate::Error::NameTooLong)); [`ReadOnly`](crate::Error::ReadOnly) on a
    /// filesystem opened read-only; [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn set_permissions(&self, path: impl AsRef<Path>, perm: Permissions) -> Result<()> {
        let core = self.inodes();
        let ino = core.resolve_follow(nonempty(path.as_ref())?)?;
        core.setattr(ino, SetAttr { mode: Some((perm.mode() & 0o7777) as u16), ..Default::default() })?;
        Ok(())
    }

    /// Sets the access and/or modification time of `path`, following
    /// symlinks (`utimensat`; std has it on `File` only).
    ///
    /// # Errors
    ///
    /// the errors of resolving `path` ([`NotFound`](crate::Error::NotFound),
    /// [`NotDir`](crate::Error::NotDir), [`Loop`](crate::Error::Loop),
    /// [`NameTooLong`](crate::Error::NameTooLong)); [`Invalid`](crate::Error::Invalid) for a time
    /// ext4 cannot store; [`ReadOnly`](crate::Error::ReadOnly) on a filesystem opened read-only;
    /// [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn set_times(&self, path: impl AsRef<Path>, times: FileTimes) -> Result<()> {
        let core = self.inodes();
        let ino = core.resolve_follow(nonempty(path.as_ref())?)?;
        core.setattr(ino, times.to_setattr())?;
        Ok(())
    }

    /// Copies the contents of file `from` to `to` inside the filesystem,
    /// creating or truncating `to`, and gives `to` the permission bits of
    /// `from`; returns the bytes copied (`std::fs::copy`). `from` must be
    /// a regular file (or a symlink to one): else `InvalidInput`.
    ///
    /// # Errors
    ///
    /// the errors of resolving both paths; [`Io`](crate::Error::Io) of kind `InvalidInput` when
    /// `from` is not a regular file; [`IsDir`](crate::Error::IsDir) when `to` is a directory;
    /// [`ReadOnly`](crate::Error::ReadOnly) on a filesystem opened read-only;
    /// [`NoSpace`](crate::Error::NoSpace), [`QuotaExceeded`](crate::Error::QuotaExceeded) when
    /// blocks or inodes run out; [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn copy(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<u64> {
        let mut src = self.open_file(from, OpenOptions::new().read(true))?;
        let meta = src.metadata()?;
        if !meta.is_file() {
            return Err(invalid_input("the source path is neither a regular file nor a symlink to a regular file"));
        }
        let perm = meta.permissions();
        let dst = self.open_file(to, OpenOptions::new().write(true).create(true).truncate(true).mode(perm.mode()))?;
        let mut buf = vec![0u8; COPY_CHUNK.min(usize::try_from(meta.len()).unwrap_or(COPY_CHUNK)).max(1)];
        let mut total = 0u64;
        loop {
            let n = src.read(&mut buf)?;
            if n == 0 {
                break;
            }
            (&dst).write_all(&buf[..n])?;
            total += n as u64;
        }
        dst.set_permissions(perm)?;
        Ok(total)
    }

    /// The whole contents of file `path` (`std::fs::read`).
    ///
    /// This shadows the inode-level `read(ino, offset, buf)`; reach that
    /// one through [`Filesystem::inodes`].
    ///
    /// # Errors
    ///
    /// the errors of resolving `path` ([`NotFound`](crate::Error::NotFound),
    /// [`NotDir`](crate::Error::NotDir), [`Loop`](crate::Error::Loop),
    /// [`NameTooLong`](crate::Error::NameTooLong)); [`IsDir`](crate::Error::IsDir) when `path` is a
    /// directory; [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn read(&self, path: impl AsRef<Path>) -> Result<Vec<u8>> {
        let mut f = self.open_file(path, OpenOptions::new().read(true))?;
        let mut v = Vec::with_capacity(usize::try_from(f.metadata()?.len()).unwrap_or(0).min(1 << 30));
        f.read_to_end(&mut v)?;
        Ok(v)
    }

    /// The whole contents of file `path` as UTF-8 (`std::fs::read_to_string`;
    /// not UTF-8: `InvalidData`).
    ///
    /// # Errors
    ///
    /// as [`Filesystem::read`], and [`Io`](crate::Error::Io) of kind `InvalidData` when the
    /// contents are not UTF-8.
    pub fn read_to_string(&self, path: impl AsRef<Path>) -> Result<String> {
        let v = self.read(path)?;
        String::from_utf8(v).map_err(|e| Error::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
    }

    /// Makes `contents` the whole contents of file `path`, creating it
    /// (mode `0o666` masked by the umask) or truncating it
    /// (`std::fs::write`).
    ///
    /// This shadows the inode-level `write(ino, offset, data)`; reach that
    /// one through [`Filesystem::inodes`].
    ///
    /// # Errors
    ///
    /// the errors of resolving `path` ([`NotFound`](crate::Error::NotFound),
    /// [`NotDir`](crate::Error::NotDir), [`Loop`](crate::Error::Loop),
    /// [`NameTooLong`](crate::Error::NameTooLong)) of the parent; [`IsDir`](crate::Error::IsDir)
    /// when `path` is a directory; [`ReadOnly`](crate::Error::ReadOnly) on a filesystem opened
    /// read-only; [`NoSpace`](crate::Error::NoSpace),
    /// [`QuotaExceeded`](crate::Error::QuotaExceeded) when blocks or inodes run out;
    /// [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn write(&self, path: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> Result<()> {
        let f = self.open_file(path, OpenOptions::new().write(true).create(true).truncate(true))?;
        (&f).write_all(contents.as_ref())?;
        Ok(())
    }

    /// The absolute path of `path` with every symlink resolved and no
    /// `.` or `..` left (`std::fs::canonicalize`, realpath(3)).
    ///
    /// # Errors
    ///
    /// the errors of resolving `path` ([`NotFound`](crate::Error::NotFound),
    /// [`NotDir`](crate::Error::NotDir), [`Loop`](crate::Error::Loop),
    /// [`NameTooLong`](crate::Error::NameTooLong)); [`Io`](crate::Error::Io),
    /// [`Corrupt`](crate::Error::Corrupt), [`Checksum`](crate::Error::Checksum) when the device or
    /// the image fails.
    pub fn canonicalize(&self, path: impl AsRef<Path>) -> Result<PathBuf> {
        let core = self.inodes();
        let path = path.as_ref();
        nonempty(path)?;
        // Components still to resolve, front first; and the resolved ones.
        let mut todo: Vec<OsString> = Vec::new();
        push_components(&mut todo, path);
        let mut done: Vec<OsString> = Vec::new();
        let mut follows = 0;
        while let Some(c) = todo.pop() {
            if c == ".." {
                done.pop();
                continue;
            }
            let cur = absolute(&done).join(&c);
            let ino = core.resolve(cur.as_os_str().as_bytes())?;
            match core.stat(ino)?.file_type {
                FileType::Symlink => {
                    follows += 1;
                    if follows > MAX_FOLLOWS {
                        return Err(Error::Loop(path.display().to_string()));
                    }
                    let target = PathBuf::from(OsString::from_vec(core.readlink(ino)?));
                    if target.is_absolute() {
                        done.clear();
                    }
                    push_components(&mut todo, &target);
                }
                FileType::Directory => done.push(c),
                _ if todo.is_empty() => done.push(c),
                _ => return Err(Error::NotDir(cur.display().to_string())),
            }
        }
        Ok(absolute(&done))
    }

    /// The value of extended attribute `name` of `path` (following
    /// symlinks), None if it has none by that name.
    ///
    /// # Errors
    ///
    /// the errors of resolving `path` ([`NotFound`](crate::Error::NotFound),
    /// [`NotDir`](crate::Error::NotDir), [`Loop`](crate::Error::Loop),
    /// [`NameTooLong`](crate::Error::NameTooLong)); [`Range`](crate::Error::Range) for an empty or
    /// over-long name; [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn xattr_get(&self, path: impl AsRef<Path>, name: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let core = self.inodes();
        let ino = core.resolve_follow(nonempty(path.as_ref())?)?;
        match core.get_xattr(ino, name) {
            Ok(v) => Ok(Some(v)),
            Err(Error::NoAttr(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Sets extended attribute `name` (with its namespace prefix, e.g.
    /// `user.origin`) of `path` to `value`, creating or replacing it.
    ///
    /// # Errors
    ///
    /// the errors of resolving `path` ([`NotFound`](crate::Error::NotFound),
    /// [`NotDir`](crate::Error::NotDir), [`Loop`](crate::Error::Loop),
    /// [`NameTooLong`](crate::Error::NameTooLong)); [`Range`](crate::Error::Range) for an empty or
    /// over-long name; [`NoSpace`](crate::Error::NoSpace) when the value does not fit;
    /// [`ReadOnly`](crate::Error::ReadOnly) on a filesystem opened read-only;
    /// [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn xattr_set(&self, path: impl AsRef<Path>, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let core = self.inodes();
        let ino = core.resolve_follow(nonempty(path.as_ref())?)?;
        core.set_xattr(ino, name.as_ref(), value.as_ref(), XattrSetMode::Any)
    }

    /// The names of the extended attributes of `path`.
    ///
    /// # Errors
    ///
    /// the errors of resolving `path` ([`NotFound`](crate::Error::NotFound),
    /// [`NotDir`](crate::Error::NotDir), [`Loop`](crate::Error::Loop),
    /// [`NameTooLong`](crate::Error::NameTooLong)); [`Io`](crate::Error::Io),
    /// [`Corrupt`](crate::Error::Corrupt), [`Checksum`](crate::Error::Checksum) when the device or
    /// the image fails.
    pub fn xattr_list(&self, path: impl AsRef<Path>) -> Result<Vec<OsString>> {
        let core = self.inodes();
        let ino = core.resolve_follow(nonempty(path.as_ref())?)?;
        Ok(core.list_xattrs(ino)?.into_iter().map(OsString::from_vec).collect())
    }

    /// Removes extended attribute `name` of `path` (none by that name:
    /// ENODATA, as removexattr).
    ///
    /// # Errors
    ///
    /// the errors of resolving `path` ([`NotFound`](crate::Error::NotFound),
    /// [`NotDir`](crate::Error::NotDir), [`Loop`](crate::Error::Loop),
    /// [`NameTooLong`](crate::Error::NameTooLong)); [`NoAttr`](crate::Error::NoAttr) when it has
    /// none by that name; [`ReadOnly`](crate::Error::ReadOnly) on a filesystem opened read-only;
    /// [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn xattr_remove(&self, path: impl AsRef<Path>, name: impl AsRef<[u8]>) -> Result<()> {
        let core = self.inodes();
        let ino = core.resolve_follow(nonempty(path.as_ref())?)?;
        core.remove_xattr(ino, name.as_ref())
    }
}

/// Pushes the components of `p` onto `todo` so that the first one pops
/// first; `.` and the root are dropped.
fn push_components(todo: &mut Vec<OsString>, p: &Path) {
    let comps: Vec<OsString> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    todo.extend(comps.into_iter().rev());
}

fn absolute(parts: &[OsString]) -> PathBuf {
    let mut p = PathBuf::from("/");
    p.extend(parts);
    p
}
