//! Access times through the library (fstests generic/003's cases):
//! relatime (once after a change, then again after 24 hours),
//! strictatime, noatime, the noatime inode flag, directory listings,
//! explicit times winning over pending ones, no journal handle per read,
//! and the pending atime on disk after fsync and unmount. Then
//! directory seeks to positions no listing returned (generic/676). Every
//! image ends `e2fsck -fn` clean.
//!
//! The tests that need exact times fix the engine's clock
//! (`Timestamp::set_fixed_clock`, process-wide), so every test of this
//! file runs under one lock.

mod rw_support;

use rw_support::{fsck_clean, mkfs};
use std::sync::Mutex;
use uext4::inode_api::flags::FL_NOATIME;
use uext4::inode_api::SetAttr;
use uext4::{AtimeMode, Filesystem, MountOptions, Timestamp};

static CLOCK: Mutex<()> = Mutex::new(());

const T0: i64 = 1_800_000_000;

fn at(sec: i64) -> Timestamp {
    Timestamp { sec, nsec: 0 }
}

/// Fixes the engine's clock at `sec` (None: the real clock again).
fn clock(sec: Option<i64>) {
    Timestamp::set_fixed_clock(sec);
}

fn open(img: &std::path::Path, atime: AtimeMode, lazytime: bool) -> Filesystem {
    Filesystem::open_with(img, MountOptions { write: true, atime, lazytime, ..Default::default() }).unwrap()
}

/// A fresh image and /f (8 KiB), made at T0.
fn setup(atime: AtimeMode, lazytime: bool) -> Option<(tempfile::TempDir, std::path::PathBuf, Filesystem, u32)> {
    let (dir, img) = mkfs(16, &["-b", "4096", "-I", "256"])?;
    let fs = open(&img, atime, lazytime);
    clock(Some(T0));
    let c = fs.inodes();
    let f = c.create(c.root(), b"f", 0o644, 0, 0).unwrap().ino;
    c.write(f, 0, &[7u8; 8192]).unwrap();
    Some((dir, img, fs, f))
}

fn read(fs: &Filesystem, ino: u32) {
    let mut b = [0u8; 100];
    fs.inodes().read(ino, 0, &mut b).unwrap();
}

fn atime(fs: &Filesystem, ino: u32) -> Timestamp {
    fs.inodes().stat(ino).unwrap().atime
}

/// Reopens read-only and returns the atime on disk.
fn atime_on_disk(img: &std::path::Path, ino: u32) -> Timestamp {
    Filesystem::open(img).unwrap().inodes().stat(ino).unwrap().atime
}

#[test]
fn relatime_updates_after_a_change_and_after_a_day() {
    let _g = CLOCK.lock().unwrap_or_else(|p| p.into_inner());
    let Some((_t, img, mut fs, f)) = setup(AtimeMode::Relatime, false) else { return };
    // Written at T0 (atime = mtime): a read at T0 + 100 updates.
    clock(Some(T0 + 100));
    read(&fs, f);
    assert_eq!(atime(&fs, f), at(T0 + 100));
    // Newer than mtime and ctime, and recent: no update.
    clock(Some(T0 + 200));
    read(&fs, f);
    assert_eq!(atime(&fs, f), at(T0 + 100));
    // A day later: updated.
    clock(Some(T0 + 100 + 86_400));
    read(&fs, f);
    assert_eq!(atime(&fs, f), at(T0 + 100 + 86_400));
    // A change (mtime) makes the next read update again.
    clock(Some(T0 + 200_000));
    fs.inodes().write(f, 0, b"x").unwrap();
    clock(Some(T0 + 200_001));
    read(&fs, f);
    assert_eq!(atime(&fs, f), at(T0 + 200_001));
    clock(None);
    fs.unmount().unwrap();
    assert_eq!(atime_on_disk(&img, f), at(T0 + 200_001));
    fsck_clean(&img);
}

#[test]
fn strictatime_updates_on_every_read_without_a_handle() {
    let _g = CLOCK.lock().unwrap_or_else(|p| p.into_inner());
    let Some((_t, img, mut fs, f)) = setup(AtimeMode::Strictatime, true) else { return };
    // The data written back first: only the atime is left for fsync.
    fs.inodes().fsync(f).unwrap();
    clock(Some(T0 + 10));
    read(&fs, f);
    let handles = fs.io_stats().handles;
    for s in 11..200 {
        clock(Some(T0 + s));
        read(&fs, f);
        assert_eq!(atime(&fs, f), at(T0 + s));
    }
    assert_eq!(fs.io_stats().handles, handles, "a read started a journal handle");
    // fsync writes it in one handle.
    fs.inodes().fsync(f).unwrap();
    assert_eq!(fs.io_stats().handles, handles + 1);
    clock(None);
    fs.unmount().unwrap();
    assert_eq!(atime_on_disk(&img, f), at(T0 + 199));
    fsck_clean(&img);
}

#[test]
fn noatime_mount_and_noatime_flag_keep_the_atime() {
    let _g = CLOCK.lock().unwrap_or_else(|p| p.into_inner());
    let Some((_t, img, mut fs, f)) = setup(AtimeMode::Noatime, false) else { return };
    clock(Some(T0 + 1000));
    read(&fs, f);
    let d = fs.inodes().mkdir(fs.inodes().root(), b"d", 0o755, 0, 0).unwrap().ino;
    clock(Some(T0 + 2000));
    fs.inodes().readdir(d, 0, 100).unwrap();
    assert_eq!(atime(&fs, f), at(T0));
    assert_eq!(atime(&fs, d), at(T0 + 1000));
    clock(None);
    fs.unmount().unwrap();
    assert_eq!(atime_on_disk(&img, f), at(T0));

    // relatime, but chattr +A on the file.
    let mut fs = open(&img, AtimeMode::Relatime, false);
    let c = fs.inodes();
    clock(Some(T0 + 3000));
    let fl = c.flags(f).unwrap();
    c.set_flags(f, fl | FL_NOATIME).unwrap();
    c.setattr(f, SetAttr { atime: Some(at(T0)), mtime: Some(at(T0 + 5)), ..Default::default() }).unwrap();
    clock(Some(T0 + 4000));
    read(&fs, f);
    assert_eq!(atime(&fs, f), at(T0));
    clock(None);
    fs.unmount().unwrap();
    assert_eq!(atime_on_disk(&img, f), at(T0));
    fsck_clean(&img);
}

#[test]
fn listings_update_directory_atime_and_explicit_times_win() {
    let _g = CLOCK.lock().unwrap_or_else(|p| p.into_inner());
    let Some((_t, img, mut fs, f)) = setup(AtimeMode::Relatime, true) else { return };
    let c = fs.inodes();
    let d = c.mkdir(c.root(), b"d", 0o755, 0, 0).unwrap().ino;
    clock(Some(T0 + 50));
    c.readdir(d, 0, 100).unwrap();
    assert_eq!(atime(&fs, d), at(T0 + 50));
    // A read leaves a pending atime; utimes then sets another: it wins.
    clock(Some(T0 + 70));
    read(&fs, f);
    assert_eq!(atime(&fs, f), at(T0 + 70));
    c.setattr(f, SetAttr { atime: Some(at(T0 - 5000)), ..Default::default() }).unwrap();
    assert_eq!(atime(&fs, f), at(T0 - 5000));
    // A pending atime rides along with a chmod.
    clock(Some(T0 + 80));
    read(&fs, f);
    c.setattr(f, SetAttr { mode: Some(0o600), ..Default::default() }).unwrap();
    assert_eq!(atime(&fs, f), at(T0 + 80));
    // A read file unlinked before its atime is written.
    let g = c.create(c.root(), b"g", 0o644, 0, 0).unwrap().ino;
    c.write(g, 0, b"data").unwrap();
    clock(Some(T0 + 90));
    read(&fs, g);
    c.unlink(c.root(), b"g").unwrap();
    clock(None);
    fs.unmount().unwrap();
    assert_eq!(atime_on_disk(&img, f), at(T0 + 80));
    fsck_clean(&img);
}

/// seekdir to positions no listing returned goes on at the next entry in
/// hash order (an htree directory of 2000 names, and a small linear one).
#[test]
fn directory_seeks_continue_in_hash_order() {
    let Some((_t, img)) = mkfs(32, &["-b", "1024", "-I", "256"]) else { return };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let c = fs.inodes();
    let d = c.mkdir(c.root(), b"big", 0o755, 0, 0).unwrap().ino;
    for i in 0..2000u32 {
        c.create(d, format!("name-{i:05}-{}", i * 7919 % 1000).as_bytes(), 0o644, 0, 0).unwrap();
    }
    let all = c.readdir(d, 0, usize::MAX).unwrap();
    assert_eq!(all.len(), 2002);
    // starts[k]: the cookie that resumes at entry k.
    let mut starts = vec![0u64];
    starts.extend(all.iter().map(|e| e.next_cookie));
    let mut between = 0;
    // (From 3: the cookie after ".." is the first position, not the
    // first entry's.)
    for k in 3..all.len() - 1 {
        let got = c.readdir(d, starts[k], 1).unwrap();
        assert_eq!(got[0].name, all[k].name, "seek to a returned cookie");
        if starts[k] + 1 < starts[k + 1] {
            // Inside the gap after entry k's position: the next entry.
            let got = c.readdir(d, starts[k] + 1, 1).unwrap();
            assert_eq!(got[0].name, all[k + 1].name, "seek between two cookies");
            between += 1;
        }
    }
    assert!(between > 1000, "{between}");
    // Positions a program makes up (t_readdir_3 seeks to random() values):
    // never the end of the listing before the last entry.
    let mut x = 12345u64;
    for _ in 0..200 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let pos = 2 + (x >> 33);
        assert_eq!(c.readdir(d, pos, 1).unwrap().len(), 1, "seek to {pos}");
    }
    // A linear directory: byte positions, the next entry at or after one.
    let s = c.mkdir(c.root(), b"small", 0o755, 0, 0).unwrap().ino;
    for n in [b"a".as_slice(), b"bb", b"ccc"] {
        c.create(s, n, 0o644, 0, 0).unwrap();
    }
    let list = c.readdir(s, 0, usize::MAX).unwrap();
    assert_eq!(list.len(), 5);
    for w in list.windows(2) {
        let got = c.readdir(s, w[0].next_cookie, 1).unwrap();
        assert_eq!(got[0].name, w[1].name);
    }
    fs.unmount().unwrap();
    fsck_clean(&img);
}
