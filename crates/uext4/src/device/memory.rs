//! A RAM disk.

use super::{check_range, BlockDevice};
use parking_lot::RwLock;
use std::io;

/// Chunk granularity of the RAM disk's locks. Small enough that threads
/// writing different files rarely meet on one lock, large enough that the
/// lock array stays small.
const CHUNK: usize = 64 * 1024;

/// An in-memory device, used by tests and benchmarks.
///
/// Storage is split into 64 KiB chunks, each behind its own lock, so
/// concurrent I/O to different places does not serialize (a single lock
/// would hide the very scaling the benchmarks measure).
pub struct MemoryDevice {
    chunks: Vec<RwLock<Box<[u8]>>>,
    size: u64,
}

impl std::fmt::Debug for MemoryDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryDevice").field("size", &self.size).finish()
    }
}

impl MemoryDevice {
    /// A zero-filled device of `size` bytes.
    pub fn new(size: u64) -> MemoryDevice {
        let n = (size as usize).div_ceil(CHUNK);
        let chunks = (0..n).map(|_| RwLock::new(vec![0u8; CHUNK].into_boxed_slice())).collect();
        MemoryDevice { chunks, size }
    }

    /// A device holding a copy of `bytes` (e.g. an image file read whole).
    pub fn from_bytes(bytes: &[u8]) -> MemoryDevice {
        let dev = MemoryDevice::new(bytes.len() as u64);
        // Cannot fail: the range is the device itself.
        let _ = dev.write_at(bytes, 0);
        dev
    }

    /// Copies the whole device out (e.g. to save it as an image file).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.size as usize];
        let _ = self.read_at(&mut v, 0);
        v
    }

    /// Calls `f(chunk, offset_in_chunk, range_in_buf)` for each chunk the
    /// byte range touches.
    fn for_chunks(offset: u64, len: usize, mut f: impl FnMut(usize, usize, std::ops::Range<usize>)) {
        let mut done = 0usize;
        while done < len {
            let pos = offset as usize + done;
            let (chunk, within) = (pos / CHUNK, pos % CHUNK);
            let n = (CHUNK - within).min(len - done);
            f(chunk, within, done..done + n);
            done += n;
        }
    }
}

impl BlockDevice for MemoryDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(offset, buf.len(), self.size)?;
        Self::for_chunks(offset, buf.len(), |c, w, r| {
            let n = r.len();
            buf[r].copy_from_slice(&self.chunks[c].read()[w..w + n]);
        });
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(offset, buf.len(), self.size)?;
        Self::for_chunks(offset, buf.len(), |c, w, r| {
            let n = r.len();
            self.chunks[c].write()[w..w + n].copy_from_slice(&buf[r]);
        });
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn size(&self) -> u64 {
        self.size
    }

    fn read_only(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cross_chunk_round_trip_and_bounds() {
        let d = MemoryDevice::new(3 * CHUNK as u64 + 10);
        let data: Vec<u8> = (0..CHUNK + 100).map(|i| i as u8).collect();
        d.write_at(&data, CHUNK as u64 - 50).unwrap();
        let mut back = vec![0u8; data.len()];
        d.read_at(&mut back, CHUNK as u64 - 50).unwrap();
        assert_eq!(back, data);
        let mut one = [0u8; 20];
        assert!(d.read_at(&mut one, d.size() - 10).is_err());
        assert!(d.read_at(&mut one, u64::MAX - 5).is_err());
    }
}
