//! A device that records every write and flush, to build the images a
//! crash at any instant could leave (crash tests).
//!
//! The model is a disk with a volatile write cache: a write becomes
//! durable at the next flush; writes issued since the last flush may each
//! have reached the media or not, in any combination. [`RecordingDevice::crash_image`]
//! builds such an image: everything up to the last flush before the crash
//! point, plus a chosen subset of the writes after it.

use super::{BlockDevice, MemoryDevice};
use parking_lot::Mutex;
use std::io;
use std::sync::Arc;

/// One recorded event of a [`RecordingDevice`]'s
/// [`log`](RecordingDevice::log): a crash test picks crash points among
/// them.
#[derive(Debug, Clone)]
pub enum Event {
    /// Bytes written at an offset.
    Write {
        /// Byte offset.
        offset: u64,
        /// The bytes.
        data: Arc<[u8]>,
    },
    /// A flush barrier.
    Flush,
}

/// Records writes and flushes on their way to an in-memory device: for
/// crash tests, which run a workload on it and then check the image
/// [`RecordingDevice::crash_image`] builds for each crash point (every
/// write before the last flush, any subset of those after it).
pub struct RecordingDevice {
    base: Vec<u8>,
    live: MemoryDevice,
    log: Mutex<Vec<Event>>,
}

impl std::fmt::Debug for RecordingDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingDevice").field("events", &self.log.lock().len()).finish_non_exhaustive()
    }
}

impl RecordingDevice {
    /// A recording device whose initial contents are `image`.
    pub fn new(image: Vec<u8>) -> RecordingDevice {
        RecordingDevice { live: MemoryDevice::from_bytes(&image), base: image, log: Mutex::new(Vec::new()) }
    }

    /// Number of events so far (a crash point is an index into them).
    pub fn events(&self) -> usize {
        self.log.lock().len()
    }

    /// A copy of the events.
    pub fn log(&self) -> Vec<Event> {
        self.log.lock().clone()
    }

    /// The image a crash just before event `point` could leave: every
    /// write before the last flush preceding `point`, plus those writes
    /// after that flush (and before `point`) for which `keep(i)` is true,
    /// `i` counting them from 0 in issue order.
    pub fn crash_image(&self, point: usize, mut keep: impl FnMut(usize) -> bool) -> Vec<u8> {
        let log = self.log.lock();
        let point = point.min(log.len());
        let last_flush = log[..point].iter().rposition(|e| matches!(e, Event::Flush)).map_or(0, |i| i + 1);
        let mut img = self.base.clone();
        let mut apply = |offset: u64, data: &[u8]| {
            let o = offset as usize;
            img[o..o + data.len()].copy_from_slice(data);
        };
        for e in &log[..last_flush] {
            if let Event::Write { offset, data } = e {
                apply(*offset, data);
            }
        }
        let mut n = 0;
        for e in &log[last_flush..point] {
            if let Event::Write { offset, data } = e {
                if keep(n) {
                    apply(*offset, data);
                }
                n += 1;
            }
        }
        img
    }
}

impl BlockDevice for RecordingDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.live.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        // Log and apply under one lock so the log order is the order the
        // writes reached the device.
        let mut log = self.log.lock();
        self.live.write_at(buf, offset)?;
        log.push(Event::Write { offset, data: buf.into() });
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.log.lock().push(Event::Flush);
        Ok(())
    }

    fn size(&self) -> u64 {
        self.live.size()
    }

    fn read_only(&self) -> bool {
        false
    }
}
