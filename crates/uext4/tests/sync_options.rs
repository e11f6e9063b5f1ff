//! The library's synchronous operations, judged by a crash: the `sync` and
//! `dirsync` mount options ([`MountOptions::sync`], [`MountOptions::dirsync`])
//! and [`uext4::FsCore::write_synced`] (O_SYNC). Each case runs on a device
//! that records every write and flush, with the periodic commit an hour
//! away; the crash keeps only what was written before the last flush
//! (nothing an operation merely queued), the image is then recovered by
//! uext4 and must hold what the synchronous calls promised, and be
//! `e2fsck -fn` clean after unmount.

mod rw_support;

use rw_support::{fsck_clean, have, pattern};
use std::sync::Arc;
use std::time::Duration;
use uext4::device::{BlockDevice, RecordingDevice};
use uext4::fs::ops::RenameFlags;
use uext4::fs::MountOptions;
use uext4::Filesystem;

/// A fresh image on a recording device opened with `sync`/`dirsync`.
fn open(sync: bool, dirsync: bool) -> Option<(tempfile::TempDir, Arc<RecordingDevice>, Filesystem)> {
    if !have("e2fsck") {
        eprintln!("SKIP: e2fsck not installed");
        return None;
    }
    let (dir, img) = rw_support::mkfs(32, &[])?;
    let dev = Arc::new(RecordingDevice::new(std::fs::read(&img).unwrap()));
    let opts =
        MountOptions { write: true, commit_interval: Duration::from_secs(3600), sync, dirsync, ..Default::default() };
    let fs = Filesystem::open_device(dev.clone() as Arc<dyn BlockDevice>, opts).unwrap();
    Some((dir, dev, fs))
}

/// The image a crash right now leaves (nothing after the last flush),
/// recovered by uext4: `check` looks at it, then it must be clean.
fn after_crash(dir: &tempfile::TempDir, dev: &RecordingDevice, fs: Filesystem, check: impl FnOnce(&Filesystem)) {
    let img = dir.path().join("crashed");
    std::fs::write(&img, dev.crash_image(dev.events(), |_| false)).unwrap();
    // The crashed filesystem is never unmounted (its drop would write).
    std::mem::forget(fs);
    let mut r = Filesystem::open_rw(&img).unwrap();
    check(&r);
    r.unmount().unwrap();
    drop(r);
    fsck_clean(&img);
}

fn read(fs: &Filesystem, path: &str) -> Option<Vec<u8>> {
    fs.resolve(path).ok().map(|ino| fs.read_all(ino).unwrap())
}

/// `sync`: a plain write, a mkdir, a chmod and an xattr are durable on
/// return.
#[test]
fn sync_option_makes_writes_and_changes_durable() {
    let Some((dir, dev, fs)) = open(true, false) else { return };
    let root = fs.root();
    let ino = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    fs.inodes().write(ino, 0, &pattern(1, 30_000)).unwrap();
    fs.mkdir(root, b"d", 0o755, 0, 0).unwrap();
    let attr = uext4::fs::ops::SetAttr { mode: Some(0o600), ..Default::default() };
    fs.setattr(ino, attr).unwrap();
    fs.set_xattr(ino, b"user.k", b"v", uext4::fs::XattrSetMode::Any).unwrap();
    after_crash(&dir, &dev, fs, |r| {
        assert!(read(r, "/f") == Some(pattern(1, 30_000)), "a write on a sync mount was lost");
        assert!(r.resolve("/d").is_ok(), "a mkdir on a sync mount was lost");
        let f = r.resolve("/f").unwrap();
        assert_eq!(r.stat(f).unwrap().mode & 0o7777, 0o600, "a chmod on a sync mount was lost");
        assert_eq!(r.get_xattr(f, "user.k").unwrap(), b"v", "an xattr on a sync mount was lost");
    });
}

/// `dirsync`: namespace changes are durable on return; data is not
/// promised (a plain write is still lost, as on ext4).
#[test]
fn dirsync_option_makes_namespace_changes_durable() {
    let Some((dir, dev, fs)) = open(false, true) else { return };
    let root = fs.root();
    let a = fs.mkdir(root, b"a", 0o755, 0, 0).unwrap().ino;
    let f = fs.create(a, b"f", 0o644, 0, 0).unwrap().ino;
    fs.inodes().symlink(a, b"s", b"f", 0, 0).unwrap();
    fs.link(f, root, b"hard").unwrap();
    fs.create(root, b"gone", 0o644, 0, 0).unwrap();
    fs.unlink(root, b"gone").unwrap();
    fs.mkdir(root, b"empty", 0o755, 0, 0).unwrap();
    fs.rmdir(root, b"empty").unwrap();
    fs.inodes().rename(a, b"f", root, b"moved", RenameFlags::default()).unwrap();
    fs.inodes().write(f, 0, b"not promised").unwrap();
    after_crash(&dir, &dev, fs, |r| {
        for p in ["/a", "/a/s", "/hard", "/moved"] {
            assert!(r.resolve(p).is_ok(), "{p} lost on a dirsync mount");
        }
        for p in ["/gone", "/empty", "/a/f"] {
            assert!(r.resolve(p).is_err(), "{p} back after a crash on a dirsync mount");
        }
    });
}

/// `write_synced` (O_SYNC / O_DSYNC): durable on return with no option.
#[test]
fn write_synced_is_durable() {
    let Some((dir, dev, fs)) = open(false, false) else { return };
    let root = fs.root();
    let ino = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    fs.inodes().write_synced(ino, 0, &pattern(2, 65536), true).unwrap();
    let d = fs.create(root, b"direct", 0o644, 0, 0).unwrap().ino;
    fs.write_direct_synced(d, 0, &pattern(3, 8192), true).unwrap();
    after_crash(&dir, &dev, fs, |r| {
        assert!(read(r, "/f") == Some(pattern(2, 65536)), "an O_SYNC write was lost");
        assert!(read(r, "/direct") == Some(pattern(3, 8192)), "an O_SYNC direct write was lost");
    });
}
