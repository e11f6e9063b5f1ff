//! Mounting: mount(2) of a `fuse` filesystem on a fresh `/dev/fuse`
//! descriptor when we may (root), else the setuid `fusermount3` helper
//! ([`crate::fusermount`]); and the unmount a session does when it ends
//! while its mount is still there (a connection aborted through
//! /sys/fs/fuse/connections), as libfuse and the `fuser` crate do.

use crate::fusermount;
use log::debug;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What to mount.
#[derive(Debug, Clone)]
pub(crate) struct MountSpec {
    /// The source shown in /proc/mounts.
    pub fsname: String,
    /// Read-only.
    pub read_only: bool,
    /// `allow_other`.
    pub allow_other: bool,
    /// Generic flags from [`crate::KERNEL_FLAGS`].
    pub kernel_flags: Vec<String>,
}

/// mount(2) flags for the generic options; `nodev` and `nosuid` unless
/// `dev` and `suid` are given.
fn ms_flags(spec: &MountSpec) -> io::Result<libc::c_ulong> {
    let has = |f: &str| spec.kernel_flags.iter().any(|k| k == f);
    let mut flags = 0;
    if !has("dev") {
        flags |= libc::MS_NODEV;
    }
    if !has("suid") {
        flags |= libc::MS_NOSUID;
    }
    if spec.read_only {
        flags |= libc::MS_RDONLY;
    }
    for f in &spec.kernel_flags {
        flags |= match f.as_str() {
            "nodev" => libc::MS_NODEV,
            "nosuid" => libc::MS_NOSUID,
            "noexec" => libc::MS_NOEXEC,
            "noatime" => libc::MS_NOATIME,
            "sync" => libc::MS_SYNCHRONOUS,
            "dirsync" => libc::MS_DIRSYNC,
            "dev" | "suid" | "exec" | "atime" | "async" => 0,
            other => {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("unknown mount flag {other:?}")));
            }
        };
    }
    Ok(flags)
}

/// The fsname as mount options can carry it.
fn clean(s: &str) -> String {
    s.replace([',', '\n'], "_")
}

/// Mounts and returns the connection's `/dev/fuse` descriptor, and
/// whether `fusermount3` did the mount.
pub(crate) fn mount(mountpoint: &Path, spec: &MountSpec) -> io::Result<(OwnedFd, bool)> {
    let flags = ms_flags(spec)?;
    match mount_direct(mountpoint, spec, flags) {
        Ok(fd) => Ok((fd, false)),
        // /dev/fuse closed to us, or mount(2) refused: the setuid helper
        // mounts and hands us the device.
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            let mut o = vec![
                if spec.read_only { "ro" } else { "rw" }.to_string(),
                format!("fsname={}", clean(&spec.fsname)),
                "subtype=uext4".into(),
                "default_permissions".into(),
            ];
            if spec.allow_other {
                o.push("allow_other".into());
            }
            o.extend(spec.kernel_flags.iter().cloned());
            debug!("mount(2) refused ({e}); mounting through fusermount3");
            Ok((fusermount::mount(mountpoint, &o.join(","))?, true))
        }
        Err(e) => Err(e),
    }
}

fn mount_direct(mountpoint: &Path, spec: &MountSpec, flags: libc::c_ulong) -> io::Result<OwnedFd> {
    let mode = std::fs::metadata(mountpoint)?.mode();
    // SAFETY: a NUL-terminated path; open returns a new descriptor or -1.
    let fd = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::NotFound {
            return Err(io::Error::new(e.kind(), "/dev/fuse not found (modprobe fuse)"));
        }
        return Err(e);
    }
    // SAFETY: `fd` was just opened and is ours.
    let dev = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: getuid and getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut data = format!(
        "fd={},rootmode={:o},user_id={uid},group_id={gid},subtype=uext4,default_permissions",
        dev.as_raw_fd(),
        mode & libc::S_IFMT | mode & 0o7777
    );
    if spec.allow_other {
        data.push_str(",allow_other");
    }
    let nul =
        |s: &[u8]| CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a mount argument"));
    let source = nul(clean(&spec.fsname).as_bytes())?;
    let target = nul(mountpoint.as_os_str().as_bytes())?;
    let data = nul(data.as_bytes())?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the
    // call; mount(2) copies them.
    let r = unsafe { libc::mount(source.as_ptr(), target.as_ptr(), c"fuse".as_ptr(), flags, data.as_ptr().cast()) };
    if r != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EPERM) {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, e));
        }
        return Err(io::Error::new(e.kind(), format!("mount() of {} (flags {flags:#x}): {e}", mountpoint.display())));
    }
    Ok(dev)
}

/// umount(2) of `path`; EPERM: the setuid helper's lazy unmount.
/// Not mounted (any more) is no error.
pub(crate) fn unmount_quietly(path: &CString, shown: &Path) {
    // SAFETY: `path` is a valid NUL-terminated string; umount2 does not
    // keep the pointer.
    if unsafe { libc::umount2(path.as_ptr(), 0) } == 0 {
        return;
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EINVAL | libc::ENOENT) => {}
        Some(libc::EPERM) => {
            let _ = fusermount::unmount(shown.as_os_str(), true);
        }
        _ => debug!("unmounting {}: {e}", shown.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generic_flags_map_to_mount_flags() {
        let spec = |flags: &[&str], ro| MountSpec {
            fsname: "x".into(),
            read_only: ro,
            allow_other: false,
            kernel_flags: flags.iter().map(|s| s.to_string()).collect(),
        };
        assert_eq!(ms_flags(&spec(&[], false)).unwrap(), libc::MS_NODEV | libc::MS_NOSUID);
        assert_eq!(ms_flags(&spec(&["dev", "suid"], true)).unwrap(), libc::MS_RDONLY);
        let f = ms_flags(&spec(&["noexec", "noatime", "dirsync"], false)).unwrap();
        assert_eq!(
            f & (libc::MS_NOEXEC | libc::MS_NOATIME | libc::MS_DIRSYNC),
            libc::MS_NOEXEC | libc::MS_NOATIME | libc::MS_DIRSYNC
        );
        assert!(ms_flags(&spec(&["bogus"], false)).is_err());
    }
}
