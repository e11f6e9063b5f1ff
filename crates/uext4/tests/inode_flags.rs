//! The user-visible inode flags through the library (`flags`,
//! `set_flags`, what `lsattr`/`chattr` reach through the mount) and the
//! refusals of the immutable and append-only flags on every change, with
//! the kernel's errno (EPERM); the flags persist (debugfs and, as root,
//! the kernel's `lsattr` read them back) and every image ends
//! `e2fsck -fn` clean.

mod rw_support;

use rw_support::{debugfs, fsck_clean, kernel_unavailable, mkfs, KernelMount};
use uext4::inode_api::flags::{FL_APPEND, FL_IMMUTABLE, FL_NOATIME, FL_NODUMP, FL_SYNC, FL_TOPDIR};
use uext4::inode_api::{FallocMode, RenameFlags, SetAttr, XattrSetMode};
use uext4::{Filesystem, FsCore};

const FL_EXTENTS: u32 = 0x8_0000;

fn errno<T: std::fmt::Debug>(r: uext4::Result<T>) -> i32 {
    r.expect_err("expected an error").errno()
}

/// A fresh image with /d (a directory) holding /d/f (8 KiB) and /d/g.
fn setup() -> Option<(tempfile::TempDir, std::path::PathBuf, Filesystem, u32, u32)> {
    let (dir, img) = mkfs(16, &["-b", "4096", "-I", "256"])?;
    let fs = Filesystem::open_rw(&img).unwrap();
    let c = fs.inodes();
    let d = c.mkdir(c.root(), b"d", 0o755, 0, 0).unwrap().ino;
    let f = c.create(d, b"f", 0o644, 0, 0).unwrap().ino;
    c.write(f, 0, &[7u8; 8192]).unwrap();
    c.create(d, b"g", 0o644, 0, 0).unwrap();
    Some((dir, img, fs, d, f))
}

fn plus(c: &FsCore, ino: u32, fl: u32) {
    let cur = c.flags(ino).unwrap();
    c.set_flags(ino, cur | fl).unwrap();
}

fn minus(c: &FsCore, ino: u32, fl: u32) {
    let cur = c.flags(ino).unwrap();
    c.set_flags(ino, cur & !fl).unwrap();
}

#[test]
fn immutable_refuses_every_change() {
    let Some((_t, img, mut fs, d, f)) = setup() else { return };
    let c = fs.inodes();
    plus(c, f, FL_IMMUTABLE);
    assert_eq!(c.flags(f).unwrap() & (FL_IMMUTABLE | FL_EXTENTS), FL_IMMUTABLE | FL_EXTENTS);
    let eperm = libc::EPERM;
    assert_eq!(errno(c.write(f, 0, b"x")), eperm);
    assert_eq!(errno(c.write(f, 8192, b"x")), eperm);
    assert_eq!(errno(c.write_direct(f, 8192, &[1u8; 4096])), eperm);
    assert_eq!(errno(c.setattr(f, SetAttr { size: Some(0), ..Default::default() })), eperm);
    assert_eq!(errno(c.setattr(f, SetAttr { mode: Some(0o600), ..Default::default() })), eperm);
    assert_eq!(errno(c.setattr(f, SetAttr { uid: Some(5), ..Default::default() })), eperm);
    assert_eq!(errno(c.setattr(f, SetAttr { mtime: Some(uext4::Timestamp::now()), ..Default::default() })), eperm);
    assert_eq!(errno(c.fallocate(f, FallocMode::KeepSize, 0, 65536)), eperm);
    assert_eq!(errno(c.unlink(d, b"f")), eperm);
    assert_eq!(errno(c.link(f, d, b"f2")), eperm);
    assert_eq!(errno(c.rename(d, b"f", d, b"f3", RenameFlags::default())), eperm);
    // Replaced by a rename, or swapped: also a removal of its name.
    assert_eq!(errno(c.rename(d, b"g", d, b"f", RenameFlags::default())), eperm);
    assert_eq!(errno(c.rename(d, b"g", d, b"f", RenameFlags { exchange: true, ..Default::default() })), eperm);
    assert_eq!(errno(c.set_xattr(f, b"user.a", b"v", XattrSetMode::Any)), eperm);
    // Other flags stay as they are while `i` is on; clearing it works.
    assert_eq!(errno(c.set_flags(f, c.flags(f).unwrap() | FL_NODUMP)), eperm);
    let mut buf = [0u8; 8192];
    assert_eq!(c.read(f, 0, &mut buf).unwrap(), 8192, "reads still work");
    minus(c, f, FL_IMMUTABLE);
    c.write(f, 0, b"x").unwrap();

    // An immutable directory: no names added or removed in it.
    plus(c, d, FL_IMMUTABLE);
    assert_eq!(errno(c.create(d, b"new", 0o644, 0, 0)), eperm);
    assert_eq!(errno(c.mkdir(d, b"sub", 0o755, 0, 0)), eperm);
    assert_eq!(errno(c.symlink(d, b"s", b"f", 0, 0)), eperm);
    assert_eq!(errno(c.unlink(d, b"g")), eperm);
    assert_eq!(errno(c.rename(d, b"g", c.root(), b"g", RenameFlags::default())), eperm);
    assert_eq!(errno(c.rename(c.root(), b"d", c.root(), b"e", RenameFlags::default())), eperm);
    assert_eq!(errno(c.link(f, d, b"f2")), eperm);
    // Its files' data may still change (the flag is per inode).
    c.write(f, 1, b"y").unwrap();
    minus(c, d, FL_IMMUTABLE);
    plus(c, f, FL_IMMUTABLE);
    c.sync().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    let s = debugfs(&img, "stat /d/f");
    assert!(s.contains("Flags: 0x80010"), "debugfs sees i: {s}");
    if kernel_unavailable().is_none() {
        let m = KernelMount::new(&img, "ro").unwrap();
        let out = std::process::Command::new("lsattr").arg(m.path().join("d/f")).output().unwrap();
        let line = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(line.starts_with("----i---------e-------"), "kernel lsattr: {line}");
        m.unmount();
    }
}

#[test]
fn append_only_allows_appending_only() {
    let Some((_t, img, mut fs, d, f)) = setup() else { return };
    let c = fs.inodes();
    plus(c, f, FL_APPEND);
    let eperm = libc::EPERM;
    assert_eq!(errno(c.write(f, 0, b"x")), eperm, "rewrite");
    assert_eq!(errno(c.write(f, 100, b"x")), eperm, "rewrite inside");
    assert_eq!(c.write(f, 8192, b"tail").unwrap(), 4);
    // The buffered size counts: the next append goes after it.
    assert_eq!(errno(c.write(f, 8192, b"again")), eperm);
    assert_eq!(c.write(f, 8196, b"more").unwrap(), 4);
    assert_eq!(c.stat(f).unwrap().size, 8200);
    assert_eq!(errno(c.setattr(f, SetAttr { size: Some(0), ..Default::default() })), eperm);
    assert_eq!(errno(c.setattr(f, SetAttr { mode: Some(0o600), ..Default::default() })), eperm);
    // Times set to now may change; times given as values may not.
    c.setattr(f, SetAttr { mtime: Some(uext4::Timestamp::now()), ..Default::default() }).unwrap();
    let past = uext4::Timestamp { sec: 1_000_000_000, nsec: 0 };
    let given = SetAttr { atime: Some(past), mtime: Some(past), times_given: true, ..Default::default() };
    assert_eq!(errno(c.setattr(f, given)), eperm, "given times");
    assert_ne!(c.stat(f).unwrap().mtime.sec, past.sec);
    assert_eq!(errno(c.fallocate(f, FallocMode::PunchHole, 0, 4096)), eperm);
    c.fallocate(f, FallocMode::KeepSize, 8192, 65536).unwrap();
    assert_eq!(errno(c.unlink(d, b"f")), eperm);
    assert_eq!(errno(c.rename(d, b"f", d, b"h", RenameFlags::default())), eperm);
    assert_eq!(errno(c.link(f, d, b"f2")), eperm);
    assert_eq!(errno(c.set_xattr(f, b"user.a", b"v", XattrSetMode::Any)), eperm);

    // An append-only directory: names may be added, not removed.
    plus(c, d, FL_APPEND);
    c.create(d, b"new", 0o644, 0, 0).unwrap();
    assert_eq!(errno(c.unlink(d, b"g")), eperm);
    assert_eq!(errno(c.rename(d, b"g", d, b"g2", RenameFlags::default())), eperm);
    c.create(c.root(), b"x", 0o644, 0, 0).unwrap();
    assert_eq!(errno(c.rename(c.root(), b"x", d, b"new", RenameFlags::default())), eperm, "replace");
    c.rename(c.root(), b"x", d, b"x", RenameFlags::default()).unwrap();
    minus(c, d, FL_APPEND);
    c.unlink(d, b"g").unwrap();
    minus(c, f, FL_APPEND);
    c.write(f, 0, b"x").unwrap();
    c.unlink(d, b"f").unwrap();
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}

#[test]
fn flag_rules_persistence_and_inheritance() {
    let Some((_t, img, mut fs, d, f)) = setup() else { return };
    let c = fs.inodes();
    let eopnotsupp = libc::EOPNOTSUPP;
    // The extent flag cannot be cleared; bits outside the visible set
    // and directory-only flags on a file are refused.
    assert_eq!(errno(c.set_flags(f, c.flags(f).unwrap() & !FL_EXTENTS)), eopnotsupp);
    assert_eq!(errno(c.set_flags(f, c.flags(f).unwrap() | 0x8000_0000)), eopnotsupp);
    assert_eq!(errno(c.set_flags(f, c.flags(f).unwrap() | FL_TOPDIR)), eopnotsupp);
    assert_eq!(errno(c.set_flags(f, c.flags(f).unwrap() | 0x4000)), eopnotsupp, "+j");
    // Casefold without the feature.
    assert_eq!(errno(c.set_flags(d, c.flags(d).unwrap() | 0x4000_0000)), eopnotsupp);
    // Visible but unmodifiable bits are ignored (a directory's index flag).
    plus(c, f, FL_NOATIME | FL_NODUMP | FL_SYNC);
    assert_eq!(c.flags(f).unwrap(), FL_EXTENTS | FL_NOATIME | FL_NODUMP | FL_SYNC);
    // +S: a write is on disk when it returns (no dirty data left).
    c.write(f, 8192, b"sync").unwrap();
    // Directory flags are inherited by new inodes (EXT4_FL_INHERITED).
    plus(c, d, FL_NODUMP | FL_SYNC | FL_TOPDIR);
    let n = c.create(d, b"n", 0o644, 0, 0).unwrap();
    assert_eq!(n.flags & (FL_NODUMP | FL_SYNC | FL_TOPDIR), FL_NODUMP | FL_SYNC, "TOPDIR is not inherited");
    let sub = c.mkdir(d, b"sub", 0o755, 0, 0).unwrap();
    assert_eq!(sub.flags & (FL_NODUMP | FL_SYNC), FL_NODUMP | FL_SYNC);
    let gen = c.stat(f).unwrap().generation;
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    let s = debugfs(&img, "stat /d/f");
    assert!(s.contains(&format!("Flags: {:#x}", FL_EXTENTS | FL_NOATIME | FL_NODUMP | FL_SYNC)), "{s}");
    assert!(s.contains(&format!("Generation: {gen} ")), "{s}");
    let fs = Filesystem::open(&img).unwrap();
    let c = fs.inodes();
    assert_eq!(c.flags(f).unwrap(), FL_EXTENTS | FL_NOATIME | FL_NODUMP | FL_SYNC);
    let mut buf = [0u8; 4];
    c.read(f, 8192, &mut buf).unwrap();
    assert_eq!(&buf, b"sync");
}

#[test]
fn casefold_flag_through_set_flags() {
    let Some((_t, img)) = mkfs(16, &["-b", "4096", "-I", "256", "-O", "casefold"]) else { return };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let c = fs.inodes();
    let d = c.mkdir(c.root(), b"cf", 0o755, 0, 0).unwrap().ino;
    const FL_CASEFOLD: u32 = 0x4000_0000;
    plus(c, d, FL_CASEFOLD);
    assert_ne!(c.flags(d).unwrap() & FL_CASEFOLD, 0);
    c.create(d, b"Hello", 0o644, 0, 0).unwrap();
    assert!(c.lookup(d, b"hELLO").is_ok(), "case-insensitive lookup");
    // Not on a non-empty directory (ENOTEMPTY), nor on a file.
    assert_eq!(errno(c.set_flags(d, c.flags(d).unwrap() & !FL_CASEFOLD)), libc::ENOTEMPTY);
    let f = c.lookup(d, b"Hello").unwrap();
    assert_eq!(errno(c.set_flags(f, c.flags(f).unwrap() | FL_CASEFOLD)), libc::EOPNOTSUPP);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}
