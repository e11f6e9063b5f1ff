//! Making a populated image look freshly made (`uext4 mkfs -d`): the
//! population runs through a read-write mount, whose traces (mount time
//! and count, lifetime writes, the journal's log and sequence) depend on
//! when and how often the journal committed. Resetting them gives an image
//! as mke2fs leaves one, and, with a fixed clock, the same bytes on every
//! run.

use super::layout::Layout;
use crate::device::{BlockDevice, FileDevice};
use crate::error::{Error, Result};
use crate::format::bytes::put_le32;
use crate::format::checksum::crc32c;
use crate::format::features::ro_compat;
use crate::format::inode::Timestamp;
use crate::format::journal::JournalSuperblock;
use crate::format::mmp::{self, Mmp};
use crate::format::superblock::{SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use std::os::fd::AsRawFd;
use std::path::Path;

/// After a populating mount of the image file `path` made with `layout`
/// was cleanly unmounted: clears the superblock's mount traces (`s_mtime`,
/// `s_mnt_count`, `s_last_mounted`, `s_kbytes_written`), sets its write
/// and last-check times to `time`, leaves an MMP block clean with that
/// time and no host name, empties the journal (every log block
/// zeroed, punched out of the file where the host allows; `s_start` 0,
/// `s_sequence` 1). Refuses an image that still needs recovery.
pub fn reset_mount_traces(path: impl AsRef<Path>, layout: &Layout, time: Timestamp) -> Result<()> {
    let path = path.as_ref();
    let dev = FileDevice::open(path, true)?;
    let mut b = [0u8; SUPERBLOCK_SIZE];
    dev.read_at(&mut b, SUPERBLOCK_OFFSET)?;
    let sb = crate::format::superblock::Superblock::parse(&b)?;
    if sb.needs_recovery() {
        return Err(Error::Invalid(format!("{}: the journal still needs recovery", path.display())));
    }
    put_le32(&mut b, 0x2C, 0); // s_mtime
    b[0x275] = 0;
    b[0x34..0x36].fill(0); // s_mnt_count
    b[0x88..0xC8].fill(0); // s_last_mounted
    b[0x178..0x180].fill(0); // s_kbytes_written
    let (sec, hi) = (time.sec as u32, (time.sec >> 32) as u8);
    put_le32(&mut b, 0x30, sec); // s_wtime
    b[0x274] = hi;
    put_le32(&mut b, 0x40, sec); // s_lastcheck
    b[0x277] = hi;
    if sb.features.ro_compat & ro_compat::METADATA_CSUM != 0 {
        let c = crc32c(!0, &b[..0x3FC]);
        put_le32(&mut b, 0x3FC, c);
    }
    dev.write_at(&b, SUPERBLOCK_OFFSET)?;
    if layout.mmp_block != 0 {
        // The mount left its host name and clock in the MMP block: clean
        // it as mkfs wrote it.
        let m = Mmp {
            seq: mmp::SEQ_CLEAN,
            time: time.sec.max(0) as u64,
            nodename: [0; 64],
            bdevname: [0; 32],
            check_interval: sb.mmp_interval.max(mmp::MIN_CHECK_INTERVAL),
        };
        let mut blk = vec![0u8; layout.block_size as usize];
        let csum = sb.features.ro_compat & ro_compat::METADATA_CSUM != 0;
        m.encode(&mut blk, csum.then(|| sb.csum_seed()));
        dev.write_at(&blk, layout.mmp_block * u64::from(layout.block_size))?;
    }

    if let Some(&(first, _)) = layout.journal.first() {
        let bs = u64::from(layout.block_size);
        let mut raw = vec![0u8; bs as usize];
        dev.read_at(&mut raw, first * bs)?;
        let mut jsb = JournalSuperblock::parse(&raw)?;
        jsb.start = 0;
        jsb.sequence = 1;
        jsb.errno = 0;
        raw[..SUPERBLOCK_SIZE].copy_from_slice(&jsb.to_bytes());
        dev.write_at(&raw, first * bs)?;
        let file = std::fs::OpenOptions::new().write(true).open(path)?;
        let zero = vec![0u8; 1 << 20];
        for (k, &(start, len)) in layout.journal.iter().enumerate() {
            // The first run's first block is the journal superblock.
            let skip = u64::from(k == 0);
            let (off, n) = ((start + skip) * bs, (u64::from(len) - skip) * bs);
            if !punch(&file, off, n) {
                let mut done = 0;
                while done < n {
                    let step = (n - done).min(zero.len() as u64) as usize;
                    dev.write_at(&zero[..step], off + done)?;
                    done += step as u64;
                }
            }
        }
    }
    dev.flush()?;
    Ok(())
}

/// Deallocates `len` bytes at `off` of `file` (which then read as zeros),
/// keeping its size. False where the host cannot (the caller writes zeros).
fn punch(file: &std::fs::File, off: u64, len: u64) -> bool {
    let (Ok(o), Ok(l)) = (libc::off_t::try_from(off), libc::off_t::try_from(len)) else { return false };
    // SAFETY: fallocate on an open descriptor with no memory arguments.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, o, l) };
    r == 0
}
