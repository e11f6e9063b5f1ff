//! Namespace and metadata operations through the library API, checked by
//! reading back, by `e2fsck -fn`, by the kernel (mount as root) and, for
//! the journal, by crashing (dropping the filesystem without unmount) and
//! recovering with uext4, e2fsck and the kernel.

mod rw_support;

use rw_support::pattern;

use rw_support::{fsck_clean, mkfs};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use uext4::inode_api::{FallocMode, RenameFlags, SetAttr};
use uext4::{Error, Filesystem};

const VARIANTS: &[&[&str]] =
    &[&["-b", "1024"], &["-b", "4096"], &["-b", "1024", "-O", "^metadata_csum"], &["-b", "4096", "-O", "^has_journal"]];

fn read_all(fs: &Filesystem, path: &str) -> Vec<u8> {
    let ino = fs.resolve(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    fs.read_all(ino).unwrap()
}

/// What the test expects the tree to hold: path -> file contents, or
/// directories / symlinks.
#[derive(Default, Clone, Debug, PartialEq, Eq)]
struct Model {
    files: BTreeMap<String, Vec<u8>>,
    dirs: Vec<String>,
    links: BTreeMap<String, Vec<u8>>,
}

fn check_model(fs: &Filesystem, m: &Model) {
    for (p, data) in &m.files {
        assert_eq!(&read_all(fs, p), data, "{p}");
    }
    for d in &m.dirs {
        let ino = fs.resolve(d).unwrap_or_else(|e| panic!("{d}: {e}"));
        assert!(fs.stat(ino).unwrap().file_type == uext4::format::inode::FileType::Directory);
    }
    for (p, t) in &m.links {
        let ino = fs.resolve(p).unwrap();
        assert_eq!(&fs.readlink(ino).unwrap(), t, "{p}");
    }
}

/// A sequence of operations touching every API call; returns the model.
fn exercise(fs: &Filesystem) -> Model {
    let mut m = Model::default();
    let root = fs.root();
    let d1 = fs.mkdir(root, b"d1", 0o755, 0, 0).unwrap().ino;
    let d2 = fs.mkdir(d1, b"d2", 0o700, 1000, 1000).unwrap().ino;
    m.dirs.extend(["/d1".to_string(), "/d1/d2".into()]);
    for (i, len) in [0usize, 1, 4095, 4096, 4097, 100_000, 3 << 20].into_iter().enumerate() {
        let name = format!("f{i}");
        let ino = fs.create(d1, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        let data = pattern(i as u64, len);
        assert_eq!(fs.inodes().write(ino, 0, &data).unwrap(), len);
        m.files.insert(format!("/d1/{name}"), data);
    }
    // Sparse file: data at 1 MiB and 10 MiB.
    let sp = fs.create(root, b"sparse", 0o600, 0, 0).unwrap().ino;
    fs.inodes().write(sp, 1 << 20, b"hello").unwrap();
    fs.inodes().write(sp, 10 << 20, b"world").unwrap();
    let mut sdata = vec![0u8; (10 << 20) + 5];
    sdata[1 << 20..(1 << 20) + 5].copy_from_slice(b"hello");
    sdata[10 << 20..].copy_from_slice(b"world");
    m.files.insert("/sparse".into(), sdata);
    // Overwrite in the middle, unaligned, across blocks.
    let f5 = fs.resolve("/d1/f5").unwrap();
    let patch = pattern(99, 5000);
    fs.inodes().write(f5, 777, &patch).unwrap();
    m.files.get_mut("/d1/f5").unwrap()[777..5777].copy_from_slice(&patch);
    // Symlinks, fast and slow; hard links.
    fs.inodes().symlink(root, b"fast", b"d1/f1", 0, 0).unwrap();
    let long = vec![b'x'; 300];
    fs.inodes().symlink(d2, b"slow", &long, 0, 0).unwrap();
    m.links.insert("/fast".into(), b"d1/f1".to_vec());
    m.links.insert("/d1/d2/slow".into(), long);
    let f2 = fs.resolve("/d1/f2").unwrap();
    fs.link(f2, d2, b"hard").unwrap();
    m.files.insert("/d1/d2/hard".into(), m.files["/d1/f2"].clone());
    assert_eq!(fs.stat(f2).unwrap().nlink, 2);
    // Renames: plain, over a file, NOREPLACE, EXCHANGE, a directory across parents.
    fs.inodes().rename(d1, b"f0", root, b"moved", RenameFlags::default()).unwrap();
    let v = m.files.remove("/d1/f0").unwrap();
    m.files.insert("/moved".into(), v);
    fs.inodes().rename(d1, b"f1", d1, b"f3", RenameFlags::default()).unwrap();
    let v = m.files.remove("/d1/f1").unwrap();
    m.files.insert("/d1/f3".into(), v);
    let e = fs.inodes().rename(d1, b"f3", d1, b"f4", RenameFlags { noreplace: true, exchange: false }).unwrap_err();
    assert_eq!(e.errno(), libc::EEXIST);
    fs.inodes().rename(d1, b"f3", d1, b"f4", RenameFlags { noreplace: false, exchange: true }).unwrap();
    let a = m.files.remove("/d1/f3").unwrap();
    let b = m.files.remove("/d1/f4").unwrap();
    m.files.insert("/d1/f3".into(), b);
    m.files.insert("/d1/f4".into(), a);
    fs.inodes().rename(d1, b"d2", root, b"d2moved", RenameFlags::default()).unwrap();
    m.dirs.retain(|d| d != "/d1/d2");
    m.dirs.push("/d2moved".into());
    let hard = m.files.remove("/d1/d2/hard").unwrap();
    m.files.insert("/d2moved/hard".into(), hard);
    let slow = m.links.remove("/d1/d2/slow").unwrap();
    m.links.insert("/d2moved/slow".into(), slow);
    assert_eq!(fs.lookup(d2, b"..").unwrap(), root);
    assert_eq!(
        fs.inodes().rename(root, b"d1", d1, b"x", RenameFlags::default()).unwrap_err().errno(),
        libc::EINVAL,
        "directory into itself"
    );
    // Unlink, rmdir.
    fs.unlink(d1, b"f6").unwrap();
    m.files.remove("/d1/f6");
    assert_eq!(fs.rmdir(root, b"d1").unwrap_err().errno(), libc::ENOTEMPTY);
    fs.mkdir(root, b"empty", 0o755, 0, 0).unwrap();
    fs.rmdir(root, b"empty").unwrap();
    assert_eq!(fs.lookup(root, b"empty").unwrap_err().errno(), libc::ENOENT);
    // setattr: truncate shrink and grow, chmod, times with nanoseconds.
    let f5 = fs.resolve("/d1/f5").unwrap();
    fs.setattr(f5, SetAttr { size: Some(5000), ..Default::default() }).unwrap();
    fs.setattr(f5, SetAttr { size: Some(9000), ..Default::default() }).unwrap();
    let v = m.files.get_mut("/d1/f5").unwrap();
    v.truncate(5000);
    v.resize(9000, 0);
    let t = uext4::format::inode::Timestamp { sec: 1_600_000_000, nsec: 123_456_789 };
    let st = fs.setattr(f5, SetAttr { mode: Some(0o640), mtime: Some(t), ..Default::default() }).unwrap();
    assert_eq!((st.mode & 0o7777, st.mtime), (0o640, t));
    assert!(st.ctime > t, "ctime: now unless given");
    // A ctime given (a FUSE kernel's writeback cache keeps it) is kept.
    let c = uext4::format::inode::Timestamp { sec: 1_600_000_001, nsec: 7 };
    let st = fs.setattr(f5, SetAttr { mtime: Some(t), ctime: Some(c), ..Default::default() }).unwrap();
    assert_eq!((st.mtime, st.ctime), (t, c));
    // fallocate: keep-size, allocate, punch, zero range.
    let fa = fs.create(root, b"falloc", 0o644, 0, 0).unwrap().ino;
    let data = pattern(7, 64 << 10);
    fs.inodes().write(fa, 0, &data).unwrap();
    fs.fallocate(fa, FallocMode::KeepSize, 64 << 10, 1 << 20).unwrap();
    assert_eq!(fs.stat(fa).unwrap().size, 64 << 10);
    fs.fallocate(fa, FallocMode::PunchHole, 1000, 20_000).unwrap();
    fs.fallocate(fa, FallocMode::ZeroRange, 30_000, 5000).unwrap();
    fs.fallocate(fa, FallocMode::Allocate, 0, 200 << 10).unwrap();
    let mut want = data;
    want[1000..21_000].fill(0);
    want[30_000..35_000].fill(0);
    want.resize(200 << 10, 0);
    // Write into the unwritten (fallocated) tail.
    fs.inodes().write(fa, 150 << 10, b"tail").unwrap();
    want[150 << 10..(150 << 10) + 4].copy_from_slice(b"tail");
    m.files.insert("/falloc".into(), want);
    // mknod: fifo and a character device.
    fs.mknod(root, b"fifo", 0o010644, (0, 0), 0, 0).unwrap();
    fs.mknod(root, b"chr", 0o020600, (1, 3), 0, 0).unwrap();
    assert_eq!(fs.stat(fs.resolve("/chr").unwrap()).unwrap().rdev, (1, 3));
    check_model(fs, &m);
    m
}

#[test]
fn operations_read_back_and_fsck_clean() {
    for args in VARIANTS {
        let Some((_d, img)) = mkfs(128, args) else { return };
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let m = exercise(&fs);
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        let fs = Filesystem::open(&img).unwrap();
        check_model(&fs, &m);
        kernel_check(&img, &m);
    }
}

#[test]
fn errors_have_the_right_errno_and_change_nothing() {
    let Some((_d, img)) = mkfs(32, &["-b", "4096"]) else { return };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let root = fs.root();
    let f = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    let d = fs.mkdir(root, b"d", 0o755, 0, 0).unwrap().ino;
    let errno = |r: Result<uext4::Stat, Error>| r.map(|_| ()).unwrap_err().errno();
    assert_eq!(errno(fs.create(root, b"f", 0o644, 0, 0)), libc::EEXIST);
    assert_eq!(errno(fs.create(root, b"a/b", 0o644, 0, 0)), libc::EINVAL);
    assert_eq!(errno(fs.create(root, b"", 0o644, 0, 0)), libc::EINVAL);
    assert_eq!(errno(fs.create(root, &[b'n'; 256], 0o644, 0, 0)), libc::ENAMETOOLONG);
    assert_eq!(errno(fs.create(f, b"x", 0o644, 0, 0)), libc::ENOTDIR);
    assert_eq!(errno(fs.mkdir(root, b"d", 0o755, 0, 0)), libc::EEXIST);
    assert_eq!(errno(fs.link(d, root, b"dl")), libc::EPERM);
    assert_eq!(fs.unlink(root, b"d").unwrap_err().errno(), libc::EISDIR);
    assert_eq!(fs.unlink(root, b"nope").unwrap_err().errno(), libc::ENOENT);
    assert_eq!(fs.rmdir(root, b"f").unwrap_err().errno(), libc::ENOTDIR);
    assert_eq!(fs.rmdir(root, b"..").unwrap_err().errno(), libc::ENOTEMPTY);
    assert_eq!(fs.inodes().write(f, u64::MAX - 10, b"x").unwrap_err().errno(), libc::EFBIG);
    assert_eq!(fs.inodes().write(f, 1 << 44, b"x").unwrap_err().errno(), libc::EFBIG);
    assert_eq!(fs.inodes().write(d, 0, b"x").unwrap_err().errno(), libc::EISDIR);
    assert_eq!(fs.inodes().rename(root, b"d", d, b"x", RenameFlags::default()).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(fs.inodes().rename(root, b"d", root, b"f", RenameFlags::default()).unwrap_err().errno(), libc::ENOTDIR);
    assert_eq!(fs.inodes().rename(root, b"f", root, b"d", RenameFlags::default()).unwrap_err().errno(), libc::EISDIR);
    let names: Vec<_> = fs.read_dir_all(root).unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names.len(), 5, "{names:?}"); // . .. lost+found f d
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    // Writes to a read-only open.
    let ro = Filesystem::open(&img).unwrap();
    assert_eq!(ro.create(ro.root(), b"g", 0o644, 0, 0).unwrap_err().errno(), libc::EROFS);
}

#[test]
fn enospc_leaves_a_clean_filesystem() {
    let Some((_d, img)) = mkfs(8, &["-b", "1024", "-N", "64"]) else { return };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let root = fs.root();
    // Out of blocks.
    let f = fs.create(root, b"big", 0o644, 0, 0).unwrap().ino;
    let chunk = vec![0xABu8; 256 << 10];
    let mut off = 0u64;
    let err = loop {
        match fs.inodes().write(f, off, &chunk) {
            Ok(n) => off += n as u64,
            Err(e) => break e,
        }
    };
    assert_eq!(err.errno(), libc::ENOSPC);
    // Out of inodes.
    let mut n = 0;
    let err = loop {
        match fs.create(root, format!("i{n}").as_bytes(), 0o644, 0, 0) {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(err.errno(), libc::ENOSPC, "{err}");
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}

/// Takes or gives back space (an allocated file `pad`, grown or cut a
/// block at a time near the end) until exactly `target` blocks are free,
/// with nothing left to commit.
fn leave_free(fs: &Filesystem, pad: u32, target: u64) {
    let bs = u64::from(fs.statfs().block_size);
    loop {
        fs.sync().unwrap();
        let free = fs.statfs().free_blocks;
        if free == target {
            return;
        }
        let size = fs.stat(pad).unwrap().size;
        if free > target {
            // Extent blocks may come with a large request: close to the
            // target, one block at a time.
            let n = if free - target > 64 { (free - target) / 2 } else { 1 };
            fs.fallocate(pad, FallocMode::Allocate, size, n * bs).unwrap();
        } else {
            assert!(size >= bs, "nothing left to give back");
            fs.setattr(pad, SetAttr { size: Some(size - bs), ..Default::default() }).unwrap();
        }
    }
}

/// A one-block directory whose block is full turns into an htree on the
/// next entry, which takes two new blocks. With one block free the
/// second allocation fails (ENOSPC): the first block stays a part of the
/// directory (an empty block of a linear directory), never a block marked
/// in use that nothing references, and the journal goes on (the
/// operation ended consistently). Create, link and rename each meet it,
/// and mkdir with two free blocks (one for its own).
#[test]
fn enospc_while_a_directory_becomes_an_htree_leaks_no_block() {
    let Some((_d, img)) = mkfs(8, &["-b", "1024", "-N", "256", "-m", "0"]) else { return };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let root = fs.root();
    let name = |k: usize| format!("entry-number-{k:04}");
    // How many such names fill the first block (learned on a probe).
    let probe = fs.mkdir(root, b"probe", 0o755, 0, 0).unwrap().ino;
    let file = fs.create(root, b"file", 0o644, 0, 0).unwrap().ino;
    let mut fit = 0;
    while fs.stat(probe).unwrap().size == 1024 {
        fs.link(file, probe, name(fit).as_bytes()).unwrap();
        fit += 1;
    }
    // The entry that did not fit split the block: two new blocks.
    assert_eq!(fs.stat(probe).unwrap().size, 3 * 1024);
    fit -= 1;
    let full_dir = |fs: &Filesystem, n: &str| {
        let d = fs.mkdir(root, n.as_bytes(), 0o755, 0, 0).unwrap().ino;
        for k in 0..fit {
            fs.link(file, d, name(k).as_bytes()).unwrap();
        }
        assert_eq!(fs.stat(d).unwrap().size, 1024);
        d
    };
    let dirs: Vec<u32> = ["create", "link", "rename", "mkdir"].iter().map(|n| full_dir(&fs, n)).collect();
    let src = fs.create(root, b"src", 0o644, 0, 0).unwrap().ino;
    let pad = fs.create(root, b"pad", 0o644, 0, 0).unwrap().ino;
    let last = name(fit);
    let last = last.as_bytes();
    let nospc = |r: uext4::Result<()>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.errno(), libc::ENOSPC, "{what}: {e}");
    };
    leave_free(&fs, pad, 1);
    nospc(fs.create(dirs[0], last, 0o644, 0, 0).map(drop), "create");
    leave_free(&fs, pad, 1);
    nospc(fs.link(src, dirs[1], last).map(drop), "link");
    leave_free(&fs, pad, 1);
    nospc(fs.inodes().rename(root, b"src", dirs[2], last, RenameFlags::default()), "rename");
    // mkdir takes one block for itself and the first of the two; once
    // its inode is undone, the retry after a commit (a block was freed)
    // finds the directory grown and puts the entry in the new block.
    leave_free(&fs, pad, 2);
    let made = fs.mkdir(dirs[3], last, 0o755, 0, 0).unwrap().ino;
    assert_eq!(fs.lookup(dirs[3], last).unwrap(), made);
    // Each directory kept its new block, empty: the name fits there now,
    // with no block to allocate.
    leave_free(&fs, pad, 0);
    for &d in &dirs {
        assert_eq!(fs.stat(d).unwrap().size, 2 * 1024);
        if d != dirs[3] {
            fs.link(src, d, last).unwrap();
            assert_eq!(fs.lookup(d, last).unwrap(), src);
        }
    }
    assert_eq!(fs.lookup(root, b"src").unwrap(), src);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}

#[test]
fn crash_after_commit_recovers_everywhere() {
    for args in [&["-b", "1024"][..], &["-b", "4096", "-O", "^metadata_csum"]] {
        let Some((dir, img)) = mkfs(64, args) else { return };
        let fs = Filesystem::open_rw(&img).unwrap();
        let m = exercise(&fs);
        fs.commit().unwrap();
        // A change after the last commit may or may not survive.
        fs.create(fs.root(), b"after-commit", 0o644, 0, 0).unwrap();
        // Crash: no unmount, no checkpoint (the journal holds the truth).
        std::mem::forget(fs);
        let copy_fsck = dir.path().join("copy-fsck");
        std::fs::copy(&img, &copy_fsck).unwrap();
        let copy_kernel = dir.path().join("copy-kernel");
        std::fs::copy(&img, &copy_kernel).unwrap();
        // uext4 read-only: replays in memory.
        let ro = Filesystem::open(&img).unwrap();
        // The replayed view no longer needs recovery; the notice says a
        // replay happened (and the image was left alone).
        assert!(ro.notices().iter().any(|n| n.contains("replayed in memory")), "{:?}", ro.notices());
        check_model(&ro, &m);
        drop(ro);
        // uext4 read-write: replays onto the image.
        let mut rw = Filesystem::open_rw(&img).unwrap();
        check_model(&rw, &m);
        rw.unmount().unwrap();
        drop(rw);
        fsck_clean(&img);
        // e2fsck replays our journal itself.
        let out = Command::new("e2fsck").arg("-fy").arg(&copy_fsck).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.code().unwrap_or(8) <= 1 && !text.contains("? yes"), "e2fsck -fy repaired:\n{text}");
        fsck_clean(&copy_fsck);
        check_model(&Filesystem::open(&copy_fsck).unwrap(), &m);
        // The kernel replays it too.
        kernel_check(&copy_kernel, &m);
    }
}

/// Mounts `img` with the kernel (as root with loop devices) and compares
/// the model; skips with a printed reason otherwise.
fn kernel_check(img: &Path, m: &Model) {
    if !rw_support::require_loop_mount() {
        return;
    }
    let mnt = rw_support::KernelMount::new(img, "")
        .unwrap_or_else(|e| panic!("kernel refused to mount {}: {e}", img.display()));
    for (p, data) in &m.files {
        let got = std::fs::read(mnt.path().join(&p[1..])).unwrap_or_else(|e| panic!("kernel {p}: {e}"));
        assert!(&got == data, "kernel read of {p} differs");
    }
    for (p, t) in &m.links {
        let got = std::fs::read_link(mnt.path().join(&p[1..])).unwrap();
        assert_eq!(got.as_os_str().as_encoded_bytes(), &t[..], "kernel readlink {p}");
    }
    for d in &m.dirs {
        assert!(mnt.path().join(&d[1..]).is_dir(), "kernel: {d} is not a directory");
    }
    mnt.unmount();
    fsck_clean(img);
}

/// Space freed by unlinks is usable at once: an allocation that fails
/// while freed blocks wait for their transaction to commit commits and
/// retries (found through FUSE: `rm` then `dd` wrote 1 MiB of 4).
#[test]
fn space_freed_by_unlink_is_reusable_at_once() {
    let Some((_d, img)) = mkfs(32, &["-b", "1024"]) else { return };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let file = vec![7u8; 512 << 10];
    let mut n = 0;
    while let Ok(st) = fs.create(fs.root(), format!("f{n}").as_bytes(), 0o644, 0, 0) {
        if !matches!(fs.inodes().write(st.ino, 0, &file), Ok(k) if k == file.len()) {
            break;
        }
        n += 1;
    }
    assert!(n >= 32, "only {n} files of 512 KiB fit in 32 MiB");
    for k in 0..=n {
        let _ = fs.unlink(fs.root(), format!("f{k}").as_bytes());
    }
    let f = fs.create(fs.root(), b"again", 0o644, 0, 0).unwrap().ino;
    assert_eq!(
        fs.inodes().write(f, 0, &vec![1u8; 4 << 20]).unwrap(),
        4 << 20,
        "buffered write right after the unlinks"
    );
    fs.unlink(fs.root(), b"again").unwrap();
    let g = fs.create(fs.root(), b"direct", 0o644, 0, 0).unwrap().ino;
    assert_eq!(fs.write_direct(g, 0, &vec![2u8; 4 << 20]).unwrap(), 4 << 20, "direct write after an unlink");
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}
