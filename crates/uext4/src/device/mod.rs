//! Block devices: where the filesystem's bytes live.
//!
//! A [`BlockDevice`] is positional (every call names its byte offset; there
//! is no shared cursor), so any number of threads use one device at once
//! without coordination. Backends: a regular image file or a raw block
//! device ([`FileDevice`]), and memory ([`MemoryDevice`], a RAM disk for
//! tests and benchmarks). Wrappers over another device:
//! [`OverlayDevice`] (copy-on-write in memory over a device never
//! written, for opening a read-only image whose journal needs replaying),
//! and two for tests, [`FaultyDevice`] (injected I/O errors) and
//! [`RecordingDevice`] (the images a crash at any instant could leave).

mod faulty;
mod file;
mod memory;
mod overlay;
mod recording;
pub use faulty::{FaultOps, FaultyDevice};
pub use overlay::OverlayDevice;
pub use recording::{Event, RecordingDevice};

pub use file::FileDevice;
pub use memory::MemoryDevice;

use std::io;

/// A random-access store of bytes shared by many threads: what a
/// filesystem lives on. [`FileDevice`] serves image files and block
/// devices, [`MemoryDevice`] RAM; implement it to put a filesystem on
/// storage of your own and open it with
/// [`Filesystem::open_device`](crate::Filesystem::open_device).
pub trait BlockDevice: Send + Sync {
    /// Fills `buf` from byte `offset`. Reading past the end is an
    /// `UnexpectedEof` error, never a short read.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at byte `offset`.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes every completed write durable (a flush/FUA barrier).
    fn flush(&self) -> io::Result<()>;
    /// Size of the device in bytes.
    fn size(&self) -> u64;
    /// True if the device refuses writes.
    fn read_only(&self) -> bool;
    /// Tells the device that `len` bytes at `offset` hold nothing worth
    /// keeping (FITRIM): an image file gives the space back (a hole);
    /// reads of the range may return anything afterwards. The default:
    /// `Unsupported` (nothing discarded).
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Err(io::Error::new(io::ErrorKind::Unsupported, "the device cannot discard"))
    }
}

/// Checks that `len` bytes at `offset` lie inside a device of `size`
/// bytes, so backends never read or write outside the image.
pub(crate) fn check_range(offset: u64, len: usize, size: u64) -> io::Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("access at {offset}+{len} beyond device end {size}"),
        )),
    }
}

impl<T: BlockDevice + ?Sized> BlockDevice for std::sync::Arc<T> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        (**self).write_at(buf, offset)
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        (**self).discard(offset, len)
    }
    fn flush(&self) -> io::Result<()> {
        (**self).flush()
    }
    fn size(&self) -> u64 {
        (**self).size()
    }
    fn read_only(&self) -> bool {
        (**self).read_only()
    }
}
