//! Image files and raw block devices, through pread/pwrite.

use super::{check_range, BlockDevice};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;

/// A regular image file or a raw block device (e.g. /dev/loop0).
///
/// Both use positional I/O on one file descriptor, which the kernel allows
/// from many threads at once. The size of a block device comes from
/// `BLKGETSIZE64`, since its metadata length is 0.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    size: u64,
    read_only: bool,
    /// A raw block device (no hole punching: discard is refused).
    block_device: bool,
}

// From <linux/fs.h>: _IOR(0x12, 114, size_t).
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;

fn block_device_size(file: &File) -> io::Result<u64> {
    use std::os::fd::AsRawFd;
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points
    // at a live, properly aligned u64 on our stack; the fd is owned by
    // `file` and open for the duration of the call.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64 as _, &mut size as *mut u64) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(size)
}

impl FileDevice {
    /// Opens an image file or block device, read-only or read-write: the
    /// device [`Filesystem::open`](crate::Filesystem::open) and its kin
    /// build; open one yourself to hand it to
    /// [`Filesystem::open_device`](crate::Filesystem::open_device) behind a
    /// wrapper of your own.
    pub fn open(path: impl AsRef<Path>, writable: bool) -> io::Result<FileDevice> {
        let file = OpenOptions::new().read(true).write(writable).open(path.as_ref())?;
        let meta = file.metadata()?;
        let block_device = meta.file_type().is_block_device();
        let size = if block_device {
            block_device_size(&file)?
        } else if meta.is_file() {
            meta.len()
        } else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file or block device"));
        };
        Ok(FileDevice { file, size, read_only: !writable, block_device })
    }
}

impl BlockDevice for FileDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(offset, buf.len(), self.size)?;
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.read_only {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        check_range(offset, buf.len(), self.size)?;
        self.file.write_all_at(buf, offset)
    }

    fn flush(&self) -> io::Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.file.sync_data()
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    /// A hole in an image file (the file keeps its size); refused for a
    /// raw block device.
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        if self.read_only {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        if self.block_device {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "discard of a block device"));
        }
        let n = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        check_range(offset, n, self.size)?;
        let (o, l) = (offset as libc::off_t, len as libc::off_t);
        loop {
            // SAFETY: fallocate on a descriptor `file` owns, open for writing.
            let rc = unsafe {
                libc::fallocate(self.file.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, o, l)
            };
            if rc == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            // A signal ends the call early without failing it (std's
            // read_exact_at, write_all_at and sync_data retry the same).
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}
