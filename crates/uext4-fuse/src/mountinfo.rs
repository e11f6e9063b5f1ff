//! What the kernel says about our mount in /proc/self/mountinfo, read
//! without a request to the mount itself (a stat of the mount point would
//! be one, and would wait for the daemon being set up).

use std::path::Path;

/// The device number (major, minor) of the mount at `mountpoint`: for a
/// FUSE mount, the minor names its connection in /sys/fs/fuse/connections
/// and both name its backing device info in /sys/class/bdi. The newest
/// mount on the path wins (the one just made over an older one). A mount
/// point with spaces is octal-escaped in mountinfo and not matched.
pub(crate) fn device_of(mountpoint: &Path) -> Option<(u32, u32)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = mountpoint.to_str()?;
    // Fields: id, parent, major:minor, root, mount point, ...
    let line = info.lines().rev().find(|l| l.split(' ').nth(4) == Some(want))?;
    let (major, minor) = line.split(' ').nth(2)?.split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_mount_has_a_device_and_a_missing_path_none() {
        assert!(device_of(Path::new("/")).is_some());
        assert_eq!(device_of(Path::new("/no/such/mount/point")), None);
    }
}
