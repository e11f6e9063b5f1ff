//! Multi-mount protection (the kernel's fs/ext4/mmp.c): a read-write open
//! of an `mmp` filesystem claims the MMP block, a background thread keeps
//! changing its sequence number while the filesystem is open, and the
//! close marks it clean. Another node (the kernel, e2fsck, a second
//! uext4) that sees the number change while it waits refuses the image.
//!
//! The block is read and written directly on the device, never through
//! the buffer cache or the journal: other nodes must see each update, and
//! a cached copy would hide theirs.

use crate::device::BlockDevice;
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::features::incompat;
use crate::format::mmp::{self, Mmp, MAX_CHECK_INTERVAL, MIN_CHECK_INTERVAL, SEQ_CLEAN, SEQ_FSCK, SEQ_MAX};
use crate::format::superblock::Superblock;
use parking_lot::{Condvar, Mutex};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// s_mmp_update_interval when the superblock says 0 (EXT4_MMP_UPDATE_INTERVAL).
const DEFAULT_UPDATE_INTERVAL: u16 = 5;

/// Where the MMP block is and how it is checksummed.
#[derive(Clone)]
struct Place {
    dev: Arc<dyn BlockDevice>,
    block: u64,
    block_size: usize,
    csum_seed: Option<u32>,
}

impl Place {
    fn read(&self) -> Result<Mmp> {
        let mut b = vec![0u8; self.block_size];
        self.dev.read_at(&mut b, self.block * self.block_size as u64)?;
        Mmp::parse(&b, self.block, self.csum_seed)
    }

    fn write(&self, m: &Mmp) -> Result<()> {
        // The rest of the block is unused: zeros, as mke2fs writes it.
        let mut b = vec![0u8; self.block_size];
        m.encode(&mut b, self.csum_seed);
        self.dev.write_at(&b, self.block * self.block_size as u64)?;
        Ok(())
    }
}

/// The claim on an MMP filesystem and its updater thread. Dropping it
/// stops the thread, which marks the block clean (unless another node
/// took the block over meanwhile).
pub(crate) struct MmpGuard {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
    lost: Arc<OnceLock<String>>,
}

impl std::fmt::Debug for MmpGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MmpGuard").field("lost", &self.lost.get()).finish_non_exhaustive()
    }
}

impl MmpGuard {
    /// Set (to the reason) when the updater finds the block rewritten by
    /// another node (multiply mounted): nothing may be changed any more.
    pub(crate) fn lost(&self) -> Arc<OnceLock<String>> {
        self.lost.clone()
    }

    /// Stops the updater; it writes the clean sequence and flushes.
    pub(crate) fn stop(mut self) -> Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        match self.thread.take() {
            Some(t) => t.join().unwrap_or_else(|_| Err(Error::Io(std::io::Error::other("MMP thread panicked")))),
            None => Ok(()),
        }
    }
}

impl Drop for MmpGuard {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// Claims the MMP block of `sb` for a read-write open (no-op without the
/// feature), as ext4_multi_mount_protect does: an in-use sequence is
/// watched for `2 * interval + 1` s (at most `interval + 60`); a new random
/// sequence is written and watched again as long; any change means another
/// node has the filesystem: EBUSY. `wait` replaces that wait (tests).
pub(crate) fn claim(dev: &Arc<dyn BlockDevice>, sb: &Superblock, wait: Option<Duration>) -> Result<Option<MmpGuard>> {
    if !sb.features.has_incompat(incompat::MMP) {
        return Ok(None);
    }
    if sb.mmp_block < u64::from(sb.first_data_block) || sb.mmp_block >= sb.blocks_count {
        return Err(Error::corruption(
            Structure::Superblock,
            Location::Unknown,
            CorruptKind::OutsideFilesystem { what: "s_mmp_block", block: sb.mmp_block, len: 1 },
        ));
    }
    let place = Place {
        dev: dev.clone(),
        block: sb.mmp_block,
        block_size: sb.block_size() as usize,
        csum_seed: sb.has_metadata_csum().then(|| sb.csum_seed()),
    };
    let mut m = place.read()?;
    let mut check = sb.mmp_interval.max(MIN_CHECK_INTERVAL);
    // The updater records how long it may take between updates.
    check = check.max(m.check_interval);
    let mut wait_time = Duration::ZERO;
    if m.seq != SEQ_CLEAN {
        if m.seq == SEQ_FSCK {
            return Err(Error::Busy(format!("e2fsck is running on the filesystem ({})", describe(&m))));
        }
        let secs = (2 * u64::from(check) + 1).min(u64::from(check) + 60);
        wait_time = wait.unwrap_or(Duration::from_secs(secs));
        let seen = m.seq;
        std::thread::sleep(wait_time);
        m = place.read()?;
        if m.seq != seen {
            return Err(Error::Busy(format!("the filesystem is in use on another node ({})", describe(&m))));
        }
    }
    let seq = new_seq();
    m.seq = seq;
    place.write(&m)?;
    place.dev.flush()?;
    std::thread::sleep(wait_time);
    let now = place.read()?;
    if now.seq != seq {
        return Err(Error::Busy(format!("the filesystem is in use on another node ({})", describe(&now))));
    }
    m.nodename = mmp::name_field(&nodename());
    m.bdevname = mmp::name_field(b"uext4");
    let update = match sb.mmp_interval {
        0 => DEFAULT_UPDATE_INTERVAL,
        n => n,
    };
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let lost = Arc::new(OnceLock::new());
    let (s2, l2) = (stop.clone(), lost.clone());
    let thread = std::thread::Builder::new()
        .name("uext4-mmp".into())
        .spawn(move || updater(place, m, update, s2, l2))
        .map_err(Error::Io)?;
    Ok(Some(MmpGuard { stop, thread: Some(thread), lost }))
}

/// kmmpd: bumps the sequence every `update` seconds; when an update came
/// later than the check interval, first makes sure nobody else wrote the
/// block meanwhile. Marks the block clean when stopped.
fn updater(
    place: Place,
    mut m: Mmp,
    update: u16,
    stop: Arc<(Mutex<bool>, Condvar)>,
    lost: Arc<OnceLock<String>>,
) -> Result<()> {
    let update = Duration::from_secs(u64::from(update));
    // A damaged s_mmp_update_interval may be up to 65535: keep the field
    // from wrapping.
    let mut check = (2 * update.as_secs()).clamp(u64::from(MIN_CHECK_INTERVAL), u64::from(u16::MAX));
    m.check_interval = u16::try_from(check).unwrap_or(u16::MAX);
    let mut seq = m.seq;
    loop {
        seq = if seq >= SEQ_MAX { 1 } else { seq + 1 };
        m.seq = seq;
        m.time = now_secs();
        let last = Instant::now();
        // A failed update is retried at the next one, as kmmpd does; the
        // other node then sees no change for one more interval.
        let _ = place.write(&m);
        {
            let mut stopped = stop.0.lock();
            let until = last + update;
            while !*stopped && Instant::now() < until {
                stop.1.wait_until(&mut stopped, until);
            }
            if *stopped {
                break;
            }
        }
        let took = last.elapsed();
        if took.as_secs() > check {
            let cur = place.read()?;
            if cur.seq != m.seq || cur.nodename != m.nodename {
                let why = format!("the MMP block was rewritten by another node ({})", describe(&cur));
                let _ = lost.set(why.clone());
                // The block is theirs now: wait to be stopped, never mark
                // it clean.
                let mut stopped = stop.0.lock();
                while !*stopped {
                    stop.1.wait(&mut stopped);
                }
                return Err(Error::Busy(why));
            }
        }
        check = (2 * took.as_secs()).clamp(u64::from(MIN_CHECK_INTERVAL), u64::from(MAX_CHECK_INTERVAL));
        m.check_interval = u16::try_from(check).unwrap_or(MAX_CHECK_INTERVAL);
    }
    m.seq = SEQ_CLEAN;
    m.time = now_secs();
    place.write(&m)?;
    place.dev.flush()?;
    Ok(())
}

fn describe(m: &Mmp) -> String {
    format!(
        "node {}, device {}, updated at {}",
        crate::format::superblock::cstr(&m.nodename),
        crate::format::superblock::cstr(&m.bdevname),
        m.time
    )
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A random sequence in `0..=SEQ_MAX` (mmp_new_seq).
fn new_seq() -> u32 {
    loop {
        let mut b = [0u8; 4];
        // SAFETY: the buffer is valid for writes of its length; getrandom
        // writes at most that many bytes.
        let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
        let v = if n == 4 {
            u32::from_le_bytes(b)
        } else {
            // No getrandom: the clock's nanoseconds are unpredictable
            // enough to tell two claims apart.
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.subsec_nanos())
        };
        if v <= SEQ_MAX {
            return v;
        }
    }
}

/// This host's node name (uname -n).
pub(crate) fn nodename() -> Vec<u8> {
    // SAFETY: utsname is plain data; uname fills it and returns 0 on
    // success, when its fields are NUL-terminated.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return b"uext4".to_vec();
    }
    u.nodename.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect()
}
