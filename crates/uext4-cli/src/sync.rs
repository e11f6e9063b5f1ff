//! `uext4 sync [MOUNTPOINT...]`: makes everything written to uext4 mounts
//! durable, which sync(1) and syncfs(2) cannot: they write the kernel's
//! dirty pages and inodes to the daemon, but the kernel forwards
//! FUSE_SYNCFS only for virtiofs, so the daemon never hears that it
//! should write back and commit. For each mount: syncfs(2) first (the
//! kernel's own dirty pages, with `writeback_cache` or in shared
//! mappings, go to the daemon), fsync(2) of every file of the mount that
//! a process has open or mapped (syncfs does not wait for those pages to
//! be answered), then the [`uext4_fuse::UEXT4_IOC_SYNC`] ioctl on the
//! mount's root, which the daemon answers once everything is committed.

use crate::util::{unescape_mount_field, CliError, CliResult};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// The mount points of every uext4 mount in /proc/self/mountinfo (file
/// system type `fuse.uext4`), in mount order.
fn uext4_mounts() -> CliResult<Vec<PathBuf>> {
    let info = std::fs::read("/proc/self/mountinfo")
        .map_err(|e| CliError::Msg(format!("/proc/self/mountinfo: {e} (give the mount points)")))?;
    Ok(parse_mountinfo(&info))
}

/// The mount points of `fuse.uext4` lines of a mountinfo text.
fn parse_mountinfo(info: &[u8]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for line in info.split(|&c| c == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&c| c == b' ').collect();
        // id parent major:minor root mountpoint options [optional...] - fstype source superopts
        let Some(dash) = fields.iter().position(|f| *f == b"-") else { continue };
        if fields.get(dash + 1) == Some(&&b"fuse.uext4"[..]) {
            if let Some(mp) = fields.get(4) {
                out.push(PathBuf::from(std::ffi::OsString::from_vec(unescape_mount_field(mp))));
            }
        }
    }
    out
}

/// fsync(2) of every file on the filesystem with device number `dev`
/// that some process has open or maps shared and writable (as far as
/// /proc lets us see: all of them as root, our own otherwise). Only such
/// files can have pages still dirty in the kernel (FUSE writes a file's
/// pages back and waits at every close, and when a shared mapping goes),
/// and Linux 6.18's syncfs(2) starts their write-back without waiting for
/// the daemon's answers (FUSE mappings are exempt from sync's
/// data-integrity wait, so that a stuck daemon cannot hang sync); fsync
/// waits. The files are found from fdinfo and maps, which never ask any
/// filesystem (a stat of another FUSE mount's file could wait on its
/// stopped daemon); only files of this mount are opened.
fn fsync_open_files(dev: (u32, u32)) {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = format!("{}:{}", dev.0, dev.1);
    // The mounts of this filesystem (bind mounts included), by id.
    let mounts: Vec<&str> = info
        .lines()
        .filter(|l| l.split(' ').nth(2) == Some(want.as_str()))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let maps_dev = format!("{:02x}:{:02x}", dev.0, dev.1);
    let mut done = std::collections::HashSet::new();
    let mut sync = |path: PathBuf, ino: &str| {
        if !done.insert(ino.to_string()) {
            return;
        }
        // Errors are the writer's to see (fsync reports them to every open
        // description); a file we may not open is left to its writer.
        if let Ok(f) = File::open(&path) {
            if f.metadata().is_ok_and(|m| m.is_file()) {
                let _ = f.sync_all();
            }
        }
    };
    let Ok(procs) = std::fs::read_dir("/proc") else { return };
    for p in procs.flatten() {
        if !p.file_name().to_string_lossy().bytes().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let dir = p.path();
        if let Ok(fds) = std::fs::read_dir(dir.join("fdinfo")) {
            for e in fds.flatten() {
                let Ok(text) = std::fs::read_to_string(e.path()) else { continue };
                let field = |k: &str| text.lines().find_map(|l| l.strip_prefix(k)).map(str::trim);
                if let (Some(m), Some(ino)) = (field("mnt_id:"), field("ino:")) {
                    if mounts.contains(&m) {
                        sync(dir.join("fd").join(e.file_name()), ino);
                    }
                }
            }
        }
        // address perms offset dev inode path: shared writable mappings.
        let maps = std::fs::read_to_string(dir.join("maps")).unwrap_or_default();
        for l in maps.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() >= 5 && f[3] == maps_dev && f[1].starts_with("rw") && f[1].ends_with('s') {
                sync(dir.join("map_files").join(f[0]), f[4]);
            }
        }
    }
}

/// syncfs(2), fsync of the files whose pages the kernel may still hold,
/// then UEXT4_IOC_SYNC, on the mount at `mnt`.
fn sync_one(mnt: &Path) -> CliResult {
    let fail = |what: &str, e: std::io::Error| CliError::Msg(format!("{}: {what}: {e}", mnt.display()));
    let dir = File::open(mnt).map_err(|e| fail("open", e))?;
    let fd = dir.as_raw_fd();
    // SAFETY: syncfs on a descriptor we own.
    if unsafe { libc::syncfs(fd) } != 0 {
        return Err(fail("syncfs", std::io::Error::last_os_error()));
    }
    let dev = std::os::unix::fs::MetadataExt::dev(&dir.metadata().map_err(|e| fail("stat", e))?);
    fsync_open_files((libc::major(dev), libc::minor(dev)));
    // SAFETY: an ioctl with no argument data on a descriptor we own.
    if unsafe { libc::ioctl(fd, uext4_fuse::UEXT4_IOC_SYNC as _) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOTTY) {
            return Err(CliError::Msg(format!(
                "{}: not on a uext4 mount (or its daemon predates `uext4 sync`)",
                mnt.display()
            )));
        }
        return Err(fail("sync", e));
    }
    Ok(())
}

/// `uext4 sync [MOUNTPOINT...]`: every mount given, or every uext4 mount.
/// Each is tried even when another fails, as sync(1) does; a failure is
/// reported and makes the exit status 1.
pub fn run(mountpoints: &[PathBuf]) -> CliResult {
    let all = if mountpoints.is_empty() { uext4_mounts()? } else { mountpoints.to_vec() };
    for m in &all {
        match sync_one(m) {
            Ok(()) => {}
            Err(CliError::Msg(m)) => crate::util::report(&m),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_uext4_mounts_in_mountinfo() {
        let info = b"36 35 98:0 / /mnt1 rw,noatime master:1 - ext4 /dev/root rw\n\
                     40 36 0:50 / /tmp/a\\040b rw,nosuid,nodev shared:5 - fuse.uext4 /img rw,user_id=0\n\
                     41 36 0:51 / /tmp/c rw - fuse.sshfs host: rw\n\
                     42 36 0:52 / /tmp/d rw - fuse.uext4 /img2 ro\n";
        assert_eq!(parse_mountinfo(info), vec![PathBuf::from("/tmp/a b"), PathBuf::from("/tmp/d")]);
        assert_eq!(unescape_mount_field(b"x\\134y\\0"), b"x\\y\\0");
    }
}
