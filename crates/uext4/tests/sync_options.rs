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
use uext4::inode_api::RenameFlags;
use uext4::Filesystem;
use uext4::MountOptions;

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

/// `sync`: a plain write, a mkdir, a chmod, an xattr, a fallocate and an
/// inode flag are each durable on return (each on its own filesystem, as
/// the last call before the crash: a later synchronous call would commit
/// an earlier change with its own).
#[test]
fn sync_option_makes_writes_and_changes_durable() {
    type Case = (&'static str, fn(&Filesystem, u32), fn(&Filesystem, u32) -> bool);
    let cases: [Case; 6] = [
        (
            "write",
            |fs, f| assert_eq!(fs.inodes().write(f, 0, &pattern(1, 30_000)).unwrap(), 30_000),
            |r, f| r.read_all(f).unwrap() == pattern(1, 30_000),
        ),
        (
            "mkdir",
            |fs, _| {
                fs.mkdir(fs.root(), b"d", 0o755, 0, 0).unwrap();
            },
            |r, _| r.resolve("/d").is_ok(),
        ),
        (
            "chmod",
            |fs, f| {
                fs.setattr(f, uext4::inode_api::SetAttr { mode: Some(0o600), ..Default::default() }).unwrap();
            },
            |r, f| r.stat(f).unwrap().mode & 0o7777 == 0o600,
        ),
        (
            "xattr",
            |fs, f| fs.set_xattr(f, b"user.k", b"v", uext4::inode_api::XattrSetMode::Any).unwrap(),
            |r, f| r.get_xattr(f, "user.k").is_ok_and(|v| v == b"v"),
        ),
        (
            "fallocate",
            |fs, f| fs.fallocate(f, uext4::inode_api::FallocMode::Allocate, 0, 1 << 20).unwrap(),
            |r, f| r.stat(f).unwrap().size == 1 << 20,
        ),
        (
            "chattr",
            |fs, f| {
                fs.set_flags(f, fs.flags(f).unwrap() | uext4::inode_api::flags::FL_NOATIME).unwrap();
            },
            |r, f| r.stat(f).unwrap().flags & uext4::inode_api::flags::FL_NOATIME != 0,
        ),
    ];
    for (what, change, check) in cases {
        let Some((dir, dev, fs)) = open(true, false) else { return };
        let f = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
        change(&fs, f);
        after_crash(&dir, &dev, fs, |r| assert!(check(r, f), "a {what} on a sync mount was lost"));
    }
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
