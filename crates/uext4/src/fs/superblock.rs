//! The superblock's writes outside an operation: marks at mount and
//! clean unmount, the free counts, and the error record (ext4_error's
//! `__save_error_info`), journaled or straight to the device.
//!
//! One home below the mount (`mount.rs`), journal control
//! (`transactions.rs`) and error ownership (`errors.rs`), which all write
//! the superblock, so that none of them imports another for it (the
//! layer order of docs/ARCHITECTURE.md).

use crate::error::{Error, Result};
use crate::format::features::compat;
use crate::format::superblock::{Superblock, STATE_VALID, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use crate::journal::Handle;
use crate::volume::Volume;

/// Writes the primary superblock outside the journal (at mount and
/// unmount, as the kernel's ext4_commit_super does) after `f` changes it.
pub(crate) fn write_sb_direct(vol: &Volume, f: impl FnOnce(&mut Superblock)) -> Result<()> {
    let (blk, off) = vol.sb_location();
    let guard = vol.cache.lock_block(blk);
    let cur = guard.current()?;
    let mut data: Box<[u8]> = cur.data().into();
    let mut sb = Superblock::parse(&data[off..off + SUPERBLOCK_SIZE])?;
    f(&mut sb);
    data[off..off + SUPERBLOCK_SIZE].copy_from_slice(sb.encode());
    vol.device().write_at(&data[off..off + SUPERBLOCK_SIZE], SUPERBLOCK_OFFSET)?;
    vol.device().flush()?;
    guard.install(data)?;
    Ok(())
}

/// Marks the superblock in use at mount (`now`): mount time and count,
/// and "needs recovery" with a journal or "not clean" without one; with
/// an orphan file, "orphan present" (the kernel's ext4_setup_super: the
/// file may hold entries until a clean unmount finds it empty).
///
/// Returns whether the superblock said "clean" before (the kernel's
/// `s_mount_state`): without a journal, only then may the unmount mark it
/// clean again.
pub(crate) fn mark_mounted(vol: &Volume, has_journal: bool, now: u32) -> Result<bool> {
    let mut was_valid = false;
    write_sb_direct(vol, |sb| {
        was_valid = sb.state & STATE_VALID != 0;
        sb.set_mount_time(u64::from(now));
        sb.bump_mount_count();
        if sb.features.has_compat(compat::ORPHAN_FILE) {
            sb.set_orphan_present(true);
        }
        if has_journal {
            sb.set_needs_recovery(true);
        } else {
            sb.set_state(sb.state & !STATE_VALID);
        }
    })?;
    Ok(was_valid)
}

/// Clears "needs recovery" once the log is empty (clean unmount), and
/// "orphan present" if `orphans_empty` (the orphan file holds nothing).
pub(crate) fn mark_journal_clean(vol: &Volume, orphans_empty: bool) -> Result<()> {
    write_sb_direct(vol, |sb| {
        sb.set_needs_recovery(false);
        if orphans_empty {
            sb.set_orphan_present(false);
        }
    })
}

/// Sets "clean" on a filesystem without a journal (clean unmount) if it
/// was clean when mounted (`was_valid`), and clears "orphan present" if
/// `orphans_empty`. An image mounted "not clean" (a crash, nothing
/// journaled) stays so until e2fsck has checked it, as the kernel's
/// ext4_put_super puts back `s_mount_state`.
pub(crate) fn mark_unjournaled_clean(vol: &Volume, orphans_empty: bool, was_valid: bool) -> Result<()> {
    write_sb_direct(vol, |sb| {
        if was_valid {
            sb.set_state(sb.state | STATE_VALID);
        }
        if orphans_empty {
            sb.set_orphan_present(false);
        }
    })
}

/// Records error `e` in the superblock's error fields, written straight
/// to the device (the journal is not working).
pub(crate) fn save_error_direct(vol: &Volume, e: &Error, ino: u32, block: u64, func: &str) -> Result<()> {
    write_sb_direct(vol, |sb| save_error_info(sb, e, ino, block, func, 0))
}

/// Runs `f` on the superblock in its block `b` (as read or changed
/// through a handle) and puts it back encoded, checksum included.
pub(crate) fn modify_sb_in_block<R>(vol: &Volume, b: &mut [u8], f: impl FnOnce(&mut Superblock) -> R) -> Result<R> {
    let (_, off) = vol.sb_location();
    let mut sb = Superblock::parse(&b[off..off + SUPERBLOCK_SIZE])?;
    let r = f(&mut sb);
    b[off..off + SUPERBLOCK_SIZE].copy_from_slice(sb.encode());
    Ok(r)
}

/// Writes the free counts into the superblock block through `h`.
pub(crate) fn write_super_counts(vol: &Volume, h: &Handle, free_blocks: u64, free_inodes: u32) -> Result<()> {
    h.modify(vol.sb_location().0, |b| modify_sb_in_block(vol, b, |sb| sb.set_free_counts(free_blocks, free_inodes)))
}

/// ext4's s_*_error_errcode value (EXT4_ERR_*) for `e`: the code of
/// the errno `e` maps to, as the kernel's ext4_errno_to_code (a
/// checksum error is EFSBADCRC, corruption EFSCORRUPTED).
fn errcode(e: &Error) -> u8 {
    crate::format::superblock::errno_to_errcode(e.errno())
}

/// Records `e` in the superblock's error fields as ext4's
/// `__save_error_info` does.
pub(crate) fn save_error_info(sb: &mut Superblock, e: &Error, ino: u32, block: u64, func: &str, line: u32) {
    let now = crate::format::inode::Timestamp::now().sec.max(0) as u64;
    sb.record_error(now, errcode(e), ino, block, func, line);
}
