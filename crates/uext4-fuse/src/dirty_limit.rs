//! The kernel's limit on the mount's dirty pages, for `writeback_cache`.
//!
//! The kernel gives every FUSE mount a strict dirty limit
//! (BDI_CAP_STRICTLIMIT, `max_ratio` 1 %): a writer is throttled as soon
//! as the mount holds 1 % of the machine's dirty threshold (about 47 MB
//! on a 24 GiB machine), even when nothing else is dirty, because an
//! untrusted daemon could otherwise sit on a large share of memory it
//! never writes back. Local filesystems are only throttled against the
//! global thresholds. With writes cached in the kernel, the strict limit
//! turns a buffered write load larger than 47 MB into writes paced by
//! writeback round trips: W2 (8k random writes into a 64 MiB file, 2+2)
//! wrote 172k IOPS with it and 675k without (docs/BENCHMARKS.md).
//!
//! uext4's daemon is the trusted writer of its image (root mounts it; the
//! kernel's writeback reaches it as ordinary WRITEs it always answers), so
//! by default it clears the strict flag of its own mount when it can
//! (root: /sys/class/bdi is root's): its dirty pages then count against
//! the global limits like ext4's. `-o strict_dirty_limit` keeps the
//! kernel's rule. `max_ratio` stays: once the machine as a whole is past
//! its background threshold the mount's share is still bounded.

use std::path::Path;

/// The sysfs directory of the mount's backing device info: named
/// "MAJOR:MINOR" after the connection's anonymous device (fuseblk mounts
/// add "-fuseblk").
fn bdi_dir(mountpoint: &Path) -> Option<std::path::PathBuf> {
    let (major, minor) = crate::mountinfo::device_of(mountpoint)?;
    ["", "-fuseblk"]
        .iter()
        .map(|s| std::path::PathBuf::from(format!("/sys/class/bdi/{major}:{minor}{s}")))
        .find(|p| p.is_dir())
}

/// Clears the strict dirty limit of the mount at `mountpoint`. Err says
/// why it could not (not root, a kernel without the knob), for the log.
pub(crate) fn relax(mountpoint: &Path) -> Result<(), String> {
    let dir = bdi_dir(mountpoint).ok_or_else(|| "the mount's /sys/class/bdi entry was not found".to_string())?;
    let knob = dir.join("strict_limit");
    std::fs::write(&knob, "0").map_err(|e| format!("{}: {e}", knob.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_that_is_no_mount_has_no_bdi() {
        assert!(relax(Path::new("/no/such/mount/point")).is_err());
    }
}
