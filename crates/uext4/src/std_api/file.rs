//! [`File`]: an open file of a [`crate::Filesystem`], shaped like
//! `std::fs::File`.
//!
//! A `File` is what an open file description is to Linux, built on the
//! inode-level calls the FUSE adapter uses: it counts as an open handle
//! of its inode ([`FsCore::open_inode`] / [`FsCore::close_inode`]), so
//! a file removed while open keeps its data until the last handle drops;
//! it samples the inode's writeback-error cursor at open
//! ([`FsCore::wb_err_sample`]) so `sync_all` reports each writeback
//! error once to every `File` ([`FsCore::fsync_file`]); and it keeps a
//! file position, shared by `&File` users as an fd's offset is.

use super::metadata::{FileTimes, Metadata, Permissions};
use super::open_options::Access;
use super::{errno, OpenOptions};
use crate::error::{Error, Result};
use crate::format::inode::FileType;
use crate::fs::{FsCore, SetAttr};
use parking_lot::Mutex;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::sync::Arc;

/// An open file of a [`crate::Filesystem`] (see
/// [`crate::Filesystem::open_file`]).
///
/// `Read`, `Write` and `Seek` work on `File` and on `&File` (sharing the
/// position, as threads sharing an fd do);
/// [`std::os::unix::fs::FileExt`] gives positioned I/O that leaves the
/// position alone. A `File` is `Send + Sync` and holds the filesystem's
/// core, so it may outlive the borrow it was opened from; after the
/// [`crate::Filesystem`] is unmounted (or dropped) it can still read but
/// writes fail with `ReadOnlyFilesystem`.
///
/// Dropping a `File` closes it: the last close of a removed file frees
/// it. Errors at close are ignored, as `std::fs::File`'s drop ignores
/// them; call [`File::sync_all`] first to see writeback errors.
pub struct File {
    core: Arc<FsCore>,
    ino: u32,
    access: Access,
    direct: bool,
    /// The file position (an fd's offset). Held across a read or write,
    /// so an append or a read through `&File` moves it atomically.
    pos: Mutex<u64>,
    /// This open's writeback-error cursor (Linux's `f_wb_err`).
    wb_cursor: Mutex<u64>,
    /// Whether the open was counted ([`FsCore::open_inode`]); only
    /// read-write filesystems count, and directories are not counted.
    counted: bool,
}

impl File {
    /// Opens inode `ino` with `opts` (already checked and resolved by
    /// `Filesystem::open_file`), truncating it if asked.
    pub(crate) fn open_inode(core: Arc<FsCore>, ino: u32, opts: &OpenOptions, access: Access) -> Result<File> {
        let st = core.stat(ino)?;
        if st.file_type == FileType::Directory && access.write {
            return Err(Error::IsDir(format!("inode {ino}")));
        }
        let counted = !core.is_read_only() && st.file_type != FileType::Directory;
        if counted {
            core.open_inode(ino)?;
        }
        let file = File {
            wb_cursor: Mutex::new(core.wb_err_sample(ino)),
            core,
            ino,
            access,
            direct: opts.direct,
            pos: Mutex::new(0),
            counted,
        };
        if opts.truncate && st.file_type == FileType::Regular && st.size > 0 {
            // After the open is counted: a concurrent unlink cannot free
            // the inode under the truncate. (Dropping `file` closes it.)
            file.core.setattr(ino, SetAttr { size: Some(0), ..Default::default() })?;
        }
        Ok(file)
    }

    /// The file's inode number.
    pub fn ino(&self) -> u32 {
        self.ino
    }

    /// The file's metadata (`fstat`).
    ///
    /// # Errors
    ///
    /// [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn metadata(&self) -> Result<Metadata> {
        Ok(self.core.stat(self.ino)?.into())
    }

    /// Truncates or extends the file to `size` bytes (extending adds a
    /// hole). EINVAL unless the file is open for writing, as ftruncate.
    ///
    /// # Errors
    ///
    /// [`Invalid`](crate::Error::Invalid) unless the file is open for writing;
    /// [`FileTooBig`](crate::Error::FileTooBig) beyond the largest file ext4 holds;
    /// [`ReadOnly`](crate::Error::ReadOnly) on a filesystem opened read-only;
    /// [`NoSpace`](crate::Error::NoSpace), [`QuotaExceeded`](crate::Error::QuotaExceeded) when
    /// blocks or inodes run out; [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn set_len(&self, size: u64) -> Result<()> {
        if !self.access.write {
            return Err(Error::Invalid("set_len of a file not open for writing".into()));
        }
        self.core.setattr(self.ino, SetAttr { size: Some(size), ..Default::default() })?;
        Ok(())
    }

    /// Makes the file's data and metadata durable (`fsync`): dirty data
    /// written back, the transaction that last changed the file committed.
    /// A writeback error of this file that this `File` has not reported
    /// yet is reported now, once (also when another `File`, or the
    /// background writeback, met it first). Nothing to do on a read-only
    /// filesystem.
    ///
    /// # Errors
    ///
    /// [`Io`](crate::Error::Io) when writing back or committing fails, or for a writeback error of
    /// the file that this `File` has not reported yet (reported once); [`Io`](crate::Error::Io),
    /// [`Corrupt`](crate::Error::Corrupt), [`Checksum`](crate::Error::Checksum) when the device or
    /// the image fails.
    pub fn sync_all(&self) -> Result<()> {
        if self.core.is_read_only() {
            return Ok(());
        }
        let mut cursor = self.wb_cursor.lock();
        self.core.fsync_file(self.ino, &mut cursor)
    }

    /// As [`File::sync_all`] (ext4 commits the metadata a later read of
    /// the data needs in the same transaction as any other metadata).
    ///
    /// # Errors
    ///
    /// as [`File::sync_all`].
    pub fn sync_data(&self) -> Result<()> {
        self.sync_all()
    }

    /// Changes the permission bits (`fchmod`; allowed on any open).
    ///
    /// # Errors
    ///
    /// [`ReadOnly`](crate::Error::ReadOnly) on a filesystem opened read-only;
    /// [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn set_permissions(&self, perm: Permissions) -> Result<()> {
        self.core.setattr(self.ino, SetAttr { mode: Some((perm.mode() & 0o7777) as u16), ..Default::default() })?;
        Ok(())
    }

    /// Sets the access and/or modification time (`futimens`).
    ///
    /// # Errors
    ///
    /// [`Invalid`](crate::Error::Invalid) for a time ext4 cannot store;
    /// [`ReadOnly`](crate::Error::ReadOnly) on a filesystem opened read-only;
    /// [`Io`](crate::Error::Io), [`Corrupt`](crate::Error::Corrupt),
    /// [`Checksum`](crate::Error::Checksum) when the device or the image fails.
    pub fn set_times(&self, times: FileTimes) -> Result<()> {
        self.core.setattr(self.ino, times.to_setattr())?;
        Ok(())
    }

    /// Sets the modification time.
    ///
    /// # Errors
    ///
    /// as [`File::set_times`].
    pub fn set_modified(&self, t: std::time::SystemTime) -> Result<()> {
        self.set_times(FileTimes::new().set_modified(t))
    }

    fn read_at_inner(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        if !self.access.read {
            return Err(errno(libc::EBADF));
        }
        if self.direct {
            self.core.read_direct(self.ino, offset, buf)
        } else {
            self.core.read(self.ino, offset, buf)
        }
    }

    fn write_at_inner(&self, buf: &[u8], offset: u64) -> Result<usize> {
        if !self.access.write {
            return Err(errno(libc::EBADF));
        }
        if self.direct {
            self.core.write_direct(self.ino, offset, buf)
        } else {
            self.core.write(self.ino, offset, buf)
        }
    }

    fn read_pos(&self, buf: &mut [u8]) -> io::Result<usize> {
        let mut pos = self.pos.lock();
        let n = self.read_at_inner(buf, *pos)?;
        *pos += n as u64;
        Ok(n)
    }

    fn write_pos(&self, buf: &[u8]) -> io::Result<usize> {
        let mut pos = self.pos.lock();
        if self.access.append {
            *pos = self.core.stat(self.ino)?.size;
        }
        let n = self.write_at_inner(buf, *pos)?;
        *pos += n as u64;
        Ok(n)
    }

    fn seek_pos(&self, to: SeekFrom) -> io::Result<u64> {
        let mut pos = self.pos.lock();
        let (base, delta) = match to {
            SeekFrom::Start(n) => (0, i64::try_from(n).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?),
            SeekFrom::Current(d) => (*pos, d),
            SeekFrom::End(d) => (self.core.stat(self.ino)?.size, d),
        };
        // lseek's EINVAL for a negative or overflowing result.
        let new = base.checked_add_signed(delta).filter(|&n| i64::try_from(n).is_ok());
        let new = new.ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        *pos = new;
        Ok(new)
    }
}

/// The open's state, not the whole filesystem core.
impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File")
            .field("ino", &self.ino)
            .field("access", &self.access)
            .field("direct", &self.direct)
            .field("pos", &*self.pos.lock())
            .finish_non_exhaustive()
    }
}

impl Drop for File {
    fn drop(&mut self) {
        if self.counted {
            // As close(2) through std: an error here has nowhere to go.
            let _ = self.core.close_inode(self.ino);
        }
    }
}

impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_pos(buf)
    }
}

impl Read for &File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_pos(buf)
    }
}

impl Write for File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_pos(buf)
    }

    /// Nothing to flush: every write has reached the filesystem (use
    /// [`File::sync_all`] for durability).
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Write for &File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_pos(buf)
    }

    /// Nothing to flush (see [`File::sync_all`]).
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for File {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        self.seek_pos(to)
    }
}

impl Seek for &File {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        self.seek_pos(to)
    }
}

/// Positioned I/O (`pread`/`pwrite`): the file position is neither used
/// nor moved. `write_at` writes at `offset` even on an append-mode
/// `File` (Linux's `pwrite` would append there).
impl std::os::unix::fs::FileExt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        Ok(self.read_at_inner(buf, offset)?)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        Ok(self.write_at_inner(buf, offset)?)
    }
}
