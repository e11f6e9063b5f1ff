//! A copy-on-write layer in memory over a device that is never written.

use super::{check_range, BlockDevice};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::io;
use std::sync::Arc;

/// Default granularity of the overlay, in bytes.
pub const DEFAULT_OVERLAY_BLOCK: usize = 4096;

/// A read-only base device plus an in-memory copy-on-write layer.
///
/// Writes land in the layer, in blocks of a fixed granularity (a partial
/// write first copies the block from the base); reads return the layer's
/// blocks where it has them and the base's bytes elsewhere. The base is
/// only ever read, so a read-only image can be changed "in memory" — which
/// is how a read-only open replays a journal without modifying the image
/// (the kernel, even for `mount -o ro`, writes the replay to the device).
///
/// `flush` has nothing to make durable and succeeds. The layer grows with
/// every distinct block written and is never written back.
pub struct OverlayDevice {
    base: Arc<dyn BlockDevice>,
    block: usize,
    size: u64,
    layer: RwLock<HashMap<u64, Box<[u8]>>>,
}

impl std::fmt::Debug for OverlayDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OverlayDevice")
            .field("size", &self.size)
            .field("block", &self.block)
            .field("overlay_blocks", &self.layer.read().len())
            .finish_non_exhaustive()
    }
}

impl OverlayDevice {
    /// An overlay over `base` with the default granularity (4 KiB).
    pub fn new(base: Arc<dyn BlockDevice>) -> OverlayDevice {
        OverlayDevice::with_block_size(base, DEFAULT_OVERLAY_BLOCK)
    }

    /// An overlay over `base` keeping written data in blocks of
    /// `block_size` bytes (rounded up to a power of two, at least 512).
    pub fn with_block_size(base: Arc<dyn BlockDevice>, block_size: usize) -> OverlayDevice {
        let block = block_size.clamp(512, 1 << 20).next_power_of_two();
        let size = base.size();
        OverlayDevice { base, block, size, layer: RwLock::new(HashMap::new()) }
    }

    /// The device under the overlay.
    pub fn base(&self) -> &Arc<dyn BlockDevice> {
        &self.base
    }

    /// Granularity of the overlay in bytes.
    pub fn block_size(&self) -> usize {
        self.block
    }

    /// Number of overlay blocks holding written data.
    pub fn overlay_blocks(&self) -> usize {
        self.layer.read().len()
    }

    /// The overlay block indexes that hold written data, sorted (block `i`
    /// covers bytes `i * block_size()..(i + 1) * block_size()`).
    pub fn written_blocks(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.layer.read().keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Drops every written block: the overlay reads as the base again.
    pub fn discard(&self) {
        self.layer.write().clear();
    }

    /// Byte length of overlay block `i` (the last one may be short).
    fn block_len(&self, i: u64) -> usize {
        let start = i * self.block as u64;
        (self.size - start).min(self.block as u64) as usize
    }
}

impl BlockDevice for OverlayDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(offset, buf.len(), self.size)?;
        let layer = self.layer.read();
        if layer.is_empty() {
            return self.base.read_at(buf, offset);
        }
        let bs = self.block as u64;
        let mut done = 0usize;
        // A run of bytes not in the overlay, read from the base at once.
        let mut base_from: Option<usize> = None;
        while done < buf.len() {
            let pos = offset + done as u64;
            let i = pos / bs;
            let within = (pos % bs) as usize;
            let n = (self.block - within).min(buf.len() - done);
            match layer.get(&i) {
                Some(data) => {
                    if let Some(from) = base_from.take() {
                        self.base.read_at(&mut buf[from..done], offset + from as u64)?;
                    }
                    buf[done..done + n].copy_from_slice(&data[within..within + n]);
                }
                None => {
                    base_from.get_or_insert(done);
                }
            }
            done += n;
        }
        if let Some(from) = base_from {
            self.base.read_at(&mut buf[from..], offset + from as u64)?;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(offset, buf.len(), self.size)?;
        let bs = self.block as u64;
        let mut layer = self.layer.write();
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let i = pos / bs;
            let within = (pos % bs) as usize;
            let n = (self.block - within).min(buf.len() - done);
            let len = self.block_len(i);
            let data = match layer.entry(i) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let mut fresh = vec![0u8; len].into_boxed_slice();
                    if n < len {
                        // Copy-on-write: the bytes not overwritten come from the base.
                        self.base.read_at(&mut fresh, i * bs)?;
                    }
                    e.insert(fresh)
                }
            };
            data[within..within + n].copy_from_slice(&buf[done..done + n]);
            done += n;
        }
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
    use crate::device::MemoryDevice;

    fn base(len: usize) -> (Arc<dyn BlockDevice>, Vec<u8>) {
        let content: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
        let dev = MemoryDevice::new(len as u64);
        dev.write_at(&content, 0).unwrap();
        (Arc::new(dev), content)
    }

    /// A read-only wrapper that fails every write, to prove the base is
    /// never written.
    struct ReadOnly(Arc<dyn BlockDevice>);
    impl BlockDevice for ReadOnly {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.0.read_at(buf, offset)
        }
        fn write_at(&self, _: &[u8], _: u64) -> io::Result<()> {
            Err(io::Error::from_raw_os_error(libc::EROFS))
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
        fn size(&self) -> u64 {
            self.0.size()
        }
        fn read_only(&self) -> bool {
            true
        }
    }

    #[test]
    fn reads_merge_and_base_is_untouched() {
        let len = 5 * 4096 + 1000; // last block short
        let (b, mut model) = base(len);
        let ro: Arc<dyn BlockDevice> = Arc::new(ReadOnly(b.clone()));
        let ov = OverlayDevice::new(ro);
        assert!(!ov.read_only());
        assert_eq!(ov.size(), len as u64);
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |m: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % m
        };
        for round in 0..400 {
            let off = next(len as u64) as usize;
            let n = (next(9000) as usize).min(len - off);
            if round % 2 == 0 {
                let data: Vec<u8> = (0..n).map(|_| next(256) as u8).collect();
                ov.write_at(&data, off as u64).unwrap();
                model[off..off + n].copy_from_slice(&data);
            } else {
                let mut got = vec![0u8; n];
                ov.read_at(&mut got, off as u64).unwrap();
                assert_eq!(got, model[off..off + n], "read {off}+{n}");
            }
        }
        let mut all = vec![0u8; len];
        ov.read_at(&mut all, 0).unwrap();
        assert_eq!(all, model);
        // The base still has its original content.
        let (_, orig) = base(len);
        let mut raw = vec![0u8; len];
        b.read_at(&mut raw, 0).unwrap();
        assert_eq!(raw, orig);
        assert!(ov.overlay_blocks() > 0 && ov.overlay_blocks() <= 6);
        ov.discard();
        ov.read_at(&mut all, 0).unwrap();
        assert_eq!(all, orig);
    }

    #[test]
    fn partial_write_keeps_the_rest_of_the_block() {
        let (b, model) = base(8192);
        let ov = OverlayDevice::with_block_size(b, 1024);
        assert_eq!(ov.block_size(), 1024);
        ov.write_at(&[0xAA; 10], 1500).unwrap();
        let mut got = vec![0u8; 2048];
        ov.read_at(&mut got, 1024).unwrap();
        assert_eq!(got[..476], model[1024..1500]);
        assert_eq!(got[476..486], [0xAA; 10]);
        assert_eq!(got[486..], model[1510..3072]);
        assert_eq!(ov.written_blocks(), vec![1]);
    }

    #[test]
    fn out_of_range_is_an_error() {
        let (b, _) = base(4096);
        let ov = OverlayDevice::new(b);
        assert!(ov.write_at(&[1], 4096).is_err());
        assert!(ov.read_at(&mut [0u8; 2], 4095).is_err());
        assert!(ov.write_at(&[1], u64::MAX).is_err());
        assert_eq!(ov.overlay_blocks(), 0);
        ov.flush().unwrap();
    }

    #[test]
    fn concurrent_writers_and_readers() {
        let (b, _) = base(64 * 1024);
        let ov = Arc::new(OverlayDevice::with_block_size(b, 512));
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let ov = ov.clone();
                s.spawn(move || {
                    for k in 0..200u64 {
                        let off = (u64::from(t) * 16 + (k % 16)) * 1024;
                        let v = vec![t.wrapping_add(k as u8); 1024];
                        ov.write_at(&v, off).unwrap();
                        let mut r = vec![0u8; 1024];
                        ov.read_at(&mut r, off).unwrap();
                        assert_eq!(r, v);
                    }
                });
            }
        });
    }
}
