//! Large extended attribute values kept in their own inodes (the
//! ea_inode feature): values the kernel wrote (including one inode shared
//! by two files) read back exactly; values uext4 writes (4 KiB to 64 KiB)
//! read back by the kernel and by `debugfs ea_get`; replacing, removing
//! and unlinking give every inode and block back, shared value inodes
//! only lose a reference; orphans left by a crash are finished with their
//! value inodes; damaged references are typed errors. Every image ends
//! `e2fsck -fn` clean (which checks the value inodes' flags, hashes and
//! reference counts and the owners' block counts).

mod rw_support;

use rw_support::{debugfs, fsck_clean, kernel_unavailable, mkfs, open_recording, pattern, KernelMount};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use uext4::inode_api::XattrSetMode;
use uext4::Filesystem;

/// mkfs variants: 4 KiB blocks with metadata_csum, 1 KiB blocks without
/// it (the hash seed then comes from the UUID), no journal, 128-byte
/// inodes.
const VARIANTS: &[&[&str]] = &[
    &["-b", "4096", "-I", "256", "-O", "ea_inode"],
    &["-b", "1024", "-I", "256", "-O", "ea_inode,^metadata_csum"],
    &["-b", "4096", "-I", "256", "-O", "ea_inode,^has_journal"],
    // No in-inode area: every entry in the block.
    &["-b", "2048", "-I", "128", "-O", "ea_inode"],
];

const ANY: XattrSetMode = XattrSetMode::Any;

fn new_file(fs: &Filesystem, name: &str) -> u32 {
    fs.create(fs.root(), name.as_bytes(), 0o644, 0, 0).unwrap().ino
}

/// Free blocks and inodes as the group descriptors say (after a clean
/// close everything freed is committed).
fn free_counts(img: &Path) -> (u64, u64) {
    let s = Filesystem::open(img).unwrap().statfs();
    (s.free_blocks, s.free_inodes)
}

/// Inode numbers in use (one link) flagged EXT4_EA_INODE_FL, among the
/// first 2048: one debugfs run over a script of `stat` commands.
fn ea_inodes(img: &Path) -> Vec<u32> {
    let n = Filesystem::open(img).unwrap().statfs().inodes.min(2048) as u32;
    let script = img.with_extension("stat-script");
    let cmds: String = (12..=n).map(|ino| format!("stat <{ino}>\n")).collect();
    std::fs::write(&script, cmds).unwrap();
    let out = std::process::Command::new("debugfs").arg("-f").arg(&script).arg(img).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.split("Inode: ")
        .skip(1)
        .filter(|s| s.contains("Links: 1") && flags_of(s) & 0x20_0000 != 0)
        .filter_map(|s| s.split_whitespace().next()?.parse().ok())
        .collect()
}

fn flags_of(stat: &str) -> u32 {
    stat.split("Flags: 0x").nth(1).and_then(|s| u32::from_str_radix(s.split_whitespace().next()?, 16).ok()).unwrap_or(0)
}

/// Runs `setfattr`-equivalent lsetxattr(2) through the kernel.
fn k_set(p: &Path, name: &str, value: &[u8]) {
    let path = CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings and a value of the given length.
    let r = unsafe { libc::lsetxattr(path.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert!(r == 0, "lsetxattr {}: {}", p.display(), std::io::Error::last_os_error());
}

/// lgetxattr(2) through the kernel.
fn k_get(p: &Path, name: &str) -> Vec<u8> {
    let path = CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 70_000];
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let r = unsafe { libc::lgetxattr(path.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r >= 0, "lgetxattr {} {name}: {}", p.display(), std::io::Error::last_os_error());
    buf.truncate(r as usize);
    buf
}

fn kernel_mount(img: &Path) -> Option<KernelMount> {
    if let Some(why) = kernel_unavailable() {
        eprintln!("SKIP: kernel mount: {why}");
        return None;
    }
    Some(KernelMount::new(img, "").unwrap_or_else(|e| panic!("kernel refused {}: {e}", img.display())))
}

/// `debugfs -R "ea_get -f OUT FILE NAME"`: the value as e2fsprogs reads it.
fn debugfs_value(img: &Path, file: &str, name: &str) -> Vec<u8> {
    let out = img.with_extension("ea_get");
    let _ = std::fs::remove_file(&out);
    debugfs(img, &format!("ea_get -f {} {file} {name}", out.display()));
    std::fs::read(&out).unwrap_or_default()
}

#[test]
fn kernel_written_values_read_back() {
    let Some((_d, img)) = mkfs(32, VARIANTS[0]) else { return };
    let Some(mnt) = kernel_mount(&img) else { return };
    let big = pattern(1, 10_000);
    let max = pattern(2, 65_536);
    let mut want: Vec<(&str, &str, Vec<u8>)> = Vec::new();
    for f in ["a", "b", "c"] {
        std::fs::write(mnt.path().join(f), b"data").unwrap();
    }
    // a and b: the same value, which the kernel keeps in one shared inode.
    for f in ["a", "b"] {
        k_set(&mnt.path().join(f), "user.big", &big);
        want.push((f, "user.big", big.clone()));
    }
    k_set(&mnt.path().join("a"), "user.small", b"hello");
    want.push(("a", "user.small", b"hello".to_vec()));
    k_set(&mnt.path().join("c"), "user.max", &max);
    want.push(("c", "user.max", max.clone()));
    // Enough names to send some entries to the xattr block.
    for k in 0..12 {
        let v = pattern(100 + k, 5000 + k as usize);
        let name: &'static str = Box::leak(format!("user.n{k:02}_{}", "x".repeat(40)).into_boxed_str());
        k_set(&mnt.path().join("c"), name, &v);
        want.push(("c", name, v));
    }
    mnt.unmount();
    fsck_clean(&img);
    let shared = ea_inodes(&img);
    assert_eq!(shared.len(), 14, "value inodes: {shared:?}");
    for fs in [Filesystem::open(&img).unwrap(), Filesystem::open_rw(&img).unwrap()] {
        for (f, name, v) in &want {
            let ino = fs.resolve(format!("/{f}")).unwrap();
            assert_eq!(&fs.get_xattr(ino, name).unwrap(), v, "{f} {name}");
            assert!(fs.list_xattrs(ino).unwrap().contains(&name.as_bytes().to_vec()), "{f} lists {name}");
        }
    }
    fsck_clean(&img);
}

#[test]
fn uext4_written_values_read_by_kernel_and_debugfs() {
    for args in VARIANTS {
        let Some((_d, img)) = mkfs(48, args) else { return };
        let sizes = [4096usize, 5000, 16_384, 65_536];
        let fs = Filesystem::open_rw(&img).unwrap();
        for (k, &n) in sizes.iter().enumerate() {
            let ino = new_file(&fs, &format!("f{k}"));
            fs.set_xattr(ino, b"user.v", &pattern(k as u64, n), ANY).unwrap();
            fs.set_xattr(ino, b"user.small", b"s", ANY).unwrap();
        }
        // Several large values on one file: entries in the inode and in
        // the block.
        let many = new_file(&fs, "many");
        for k in 0..8u64 {
            let name = format!("user.m{k}_{}", "y".repeat(30));
            fs.set_xattr(many, name.as_bytes(), &pattern(50 + k, 3000 + 1000 * k as usize), ANY).unwrap();
        }
        for (k, &n) in sizes.iter().enumerate() {
            let ino = fs.resolve(format!("/f{k}")).unwrap();
            assert_eq!(fs.get_xattr(ino, "user.v").unwrap(), pattern(k as u64, n));
        }
        drop(fs);
        fsck_clean(&img);
        for (k, &n) in sizes.iter().enumerate() {
            assert_eq!(debugfs_value(&img, &format!("/f{k}"), "user.v"), pattern(k as u64, n), "{args:?} debugfs f{k}");
        }
        let Some(mnt) = kernel_mount(&img) else { continue };
        for (k, &n) in sizes.iter().enumerate() {
            assert_eq!(k_get(&mnt.path().join(format!("f{k}")), "user.v"), pattern(k as u64, n), "{args:?} f{k}");
        }
        for k in 0..8u64 {
            let name = format!("user.m{k}_{}", "y".repeat(30));
            assert_eq!(k_get(&mnt.path().join("many"), &name), pattern(50 + k, 3000 + 1000 * k as usize));
        }
        // The kernel replaces one of ours: it drops our inode's reference.
        k_set(&mnt.path().join("f0"), "user.v", &pattern(9, 7000));
        mnt.unmount();
        fsck_clean(&img);
        let fs = Filesystem::open(&img).unwrap();
        assert_eq!(fs.get_xattr(fs.resolve("/f0").unwrap(), "user.v").unwrap(), pattern(9, 7000));
    }
}

#[test]
fn replace_remove_and_unlink_give_everything_back() {
    for args in VARIANTS {
        let Some((_d, img)) = mkfs(48, args) else { return };
        {
            let fs = Filesystem::open_rw(&img).unwrap();
            new_file(&fs, "f");
        }
        let base = free_counts(&img);
        let step = |f: &dyn Fn(&Filesystem, u32)| {
            let fs = Filesystem::open_rw(&img).unwrap();
            let ino = fs.resolve("/f").unwrap();
            f(&fs, ino);
            drop(fs);
            fsck_clean(&img);
        };
        // Replace a value inode by another, by a local value, remove.
        step(&|fs, ino| fs.set_xattr(ino, b"user.a", &pattern(1, 30_000), ANY).unwrap());
        assert!(free_counts(&img).1 < base.1, "{args:?}: a value inode was made");
        step(&|fs, ino| fs.set_xattr(ino, b"user.a", &pattern(2, 65_536), ANY).unwrap());
        step(&|fs, ino| {
            assert_eq!(fs.get_xattr(ino, "user.a").unwrap(), pattern(2, 65_536));
            fs.set_xattr(ino, b"user.a", b"tiny", ANY).unwrap();
        });
        // Without an in-inode area the small value takes an xattr block.
        let in_block = u64::from(args.contains(&"128"));
        assert_eq!(free_counts(&img), (base.0 - in_block, base.1), "{args:?}: after replacing by a local value");
        step(&|fs, ino| fs.set_xattr(ino, b"user.b", &pattern(3, 9000), ANY).unwrap());
        step(&|fs, ino| fs.remove_xattr(ino, b"user.b").unwrap());
        step(&|fs, ino| fs.remove_xattr(ino, b"user.a").unwrap());
        assert_eq!(free_counts(&img), base, "{args:?}: after removing");
        // A file with values in the inode and in the block, unlinked.
        step(&|fs, ino| {
            for k in 0..10u64 {
                let name = format!("user.k{k}_{}", "z".repeat(50));
                fs.set_xattr(ino, name.as_bytes(), &pattern(k, 4000 + 500 * k as usize), ANY).unwrap();
            }
        });
        step(&|fs, _| fs.unlink(fs.root(), b"f").unwrap());
        let (blocks, inodes) = free_counts(&img);
        assert_eq!((blocks, inodes), (base.0, base.1 + 1), "{args:?}: after unlink");
    }
}

#[test]
fn shared_value_inode_keeps_its_other_reference() {
    let Some((_d, img)) = mkfs(32, VARIANTS[0]) else { return };
    let Some(mnt) = kernel_mount(&img) else { return };
    let v = pattern(7, 20_000);
    for f in ["a", "b"] {
        std::fs::write(mnt.path().join(f), b"x").unwrap();
        k_set(&mnt.path().join(f), "user.same", &v);
    }
    mnt.unmount();
    let base = free_counts(&img);
    let shared = ea_inodes(&img);
    assert_eq!(shared.len(), 1, "the kernel shares one value inode");
    assert!(debugfs(&img, &format!("stat <{}>", shared[0])).contains("Version: 0x00000000:00000002"));
    {
        let fs = Filesystem::open_rw(&img).unwrap();
        let a = fs.resolve("/a").unwrap();
        fs.set_xattr(a, b"user.same", &pattern(8, 20_000), ANY).unwrap();
    }
    fsck_clean(&img);
    assert!(debugfs(&img, &format!("stat <{}>", shared[0])).contains("Version: 0x00000000:00000001"));
    {
        let fs = Filesystem::open_rw(&img).unwrap();
        assert_eq!(fs.get_xattr(fs.resolve("/b").unwrap(), "user.same").unwrap(), v);
        fs.unlink(fs.root(), b"b").unwrap();
    }
    fsck_clean(&img);
    assert!(!ea_inodes(&img).contains(&shared[0]), "the shared value inode is freed with its last reference");
    let (_, inodes) = free_counts(&img);
    assert_eq!(inodes, base.1 + 1, "b and the old shared inode freed, a's new value inode made");
    let Some(mnt) = kernel_mount(&img) else { return };
    assert_eq!(k_get(&mnt.path().join("a"), "user.same"), pattern(8, 20_000));
}

#[test]
fn orphan_with_value_inodes_is_finished_at_open() {
    let Some((_d, img)) = mkfs(32, VARIANTS[0]) else { return };
    let base = free_counts(&img);
    let (dev, fs) = open_recording(&std::fs::read(&img).unwrap());
    let ino = new_file(&fs, "f");
    fs.set_xattr(ino, b"user.big", &pattern(1, 40_000), ANY).unwrap();
    fs.set_xattr(ino, b"user.big2", &pattern(2, 8000), ANY).unwrap();
    fs.open_inode(ino).unwrap();
    fs.unlink(fs.root(), b"f").unwrap();
    fs.sync().unwrap();
    // A crash with the file still open: it stays an orphan.
    std::mem::forget(fs);
    std::fs::write(&img, dev.crash_image(dev.events(), |_| true)).unwrap();
    drop(Filesystem::open_rw(&img).unwrap());
    fsck_clean(&img);
    assert_eq!(free_counts(&img), base);
}

#[test]
fn damaged_references_are_typed_errors() {
    let Some((_d, img)) = mkfs(32, VARIANTS[0]) else { return };
    let v = pattern(3, 12_000);
    {
        let fs = Filesystem::open_rw(&img).unwrap();
        let ino = new_file(&fs, "f");
        fs.set_xattr(ino, b"user.big", &v, ANY).unwrap();
    }
    let ea = ea_inodes(&img);
    assert_eq!(ea.len(), 1);
    let damage = |field: &str, value: &str| {
        let copy = img.with_extension(field);
        std::fs::copy(&img, &copy).unwrap();
        let out = std::process::Command::new("debugfs")
            .arg("-w")
            .arg("-R")
            .arg(format!("sif <{}> {field} {value}", ea[0]))
            .arg(&copy)
            .output()
            .unwrap();
        assert!(out.status.success());
        let fs = Filesystem::open(&copy).unwrap();
        let e = fs.get_xattr(fs.resolve("/f").unwrap(), "user.big").expect_err(field);
        assert!(e.as_corruption().is_some(), "{field}: {e:?}");
    };
    damage("flags", "0x80000");
    damage("size", "12001");
    damage("atime", "@12345678");
    // The first extent starts at logical block 1: block 0 is a hole.
    damage("block[3]", "1");
    // Undamaged, it reads.
    let fs = Filesystem::open(&img).unwrap();
    assert_eq!(fs.get_xattr(fs.resolve("/f").unwrap(), "user.big").unwrap(), v);
}

/// Two files whose xattr blocks the kernel shares, the block naming a
/// value inode. (The kernel leaves that inode's count one too high when
/// it shares the block; `e2fsck -fy` sets it right first.) A change on one
/// file copies the block, and the copy takes a reference of its own; the
/// other file's deletion frees the old block and drops its reference.
#[test]
fn shared_block_naming_a_value_inode_is_copied() {
    let Some((_d, img)) = mkfs(32, VARIANTS[0]) else { return };
    let Some(mnt) = kernel_mount(&img) else { return };
    let big = pattern(5, 10_000);
    for f in ["a", "b"] {
        let p = mnt.path().join(f);
        std::fs::write(&p, b"x").unwrap();
        // Fills the in-inode area, so that the large value's entry goes
        // to the block.
        k_set(&p, "user.i", &[b'i'; 60]);
        k_set(&p, "user.big", &big);
    }
    mnt.unmount();
    let _ = std::process::Command::new("e2fsck").arg("-fy").arg(&img).output().unwrap();
    fsck_clean(&img);
    let acl = |f: &str| {
        debugfs(&img, &format!("stat {f}"))
            .split("File ACL: ")
            .nth(1)
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
    };
    assert_eq!(acl("a"), acl("b"), "the kernel shares the block");
    let before = free_counts(&img);
    {
        let fs = Filesystem::open_rw(&img).unwrap();
        let a = fs.resolve("/a").unwrap();
        fs.set_xattr(a, b"user.more", b"m", ANY).unwrap();
    }
    fsck_clean(&img);
    assert_ne!(acl("a"), acl("b"), "a has its own copy");
    {
        let fs = Filesystem::open_rw(&img).unwrap();
        fs.unlink(fs.root(), b"b").unwrap();
        let a = fs.resolve("/a").unwrap();
        assert_eq!(fs.get_xattr(a, "user.big").unwrap(), big);
    }
    fsck_clean(&img);
    assert_eq!(ea_inodes(&img).len(), 1);
    {
        let fs = Filesystem::open_rw(&img).unwrap();
        let a = fs.resolve("/a").unwrap();
        fs.remove_xattr(a, b"user.big").unwrap();
    }
    fsck_clean(&img);
    assert!(ea_inodes(&img).is_empty());
    let (blocks, inodes) = free_counts(&img);
    // b's inode and the value inode are free; the block count is back to
    // what it was (a's copy replaced by nothing of the shared one's).
    assert_eq!(inodes, before.1 + 2);
    assert!(blocks >= before.0, "{blocks} < {}", before.0);
}

/// Eight files sharing one kernel-made value inode change their values
/// at once, each several times: every change drops or takes references
/// on the shared inode and on fresh ones concurrently. In the end the
/// shared inode is freed exactly once, no value inode leaks, and every
/// file holds its last value.
#[test]
fn concurrent_changes_on_a_shared_value_inode() {
    let Some((_d, img)) = mkfs(48, VARIANTS[0]) else { return };
    let Some(mnt) = kernel_mount(&img) else { return };
    let n = 8u64;
    let v = pattern(11, 12_000);
    for k in 0..n {
        let p = mnt.path().join(format!("f{k}"));
        std::fs::write(&p, b"x").unwrap();
        k_set(&p, "user.same", &v);
    }
    mnt.unmount();
    let shared = ea_inodes(&img);
    assert_eq!(shared.len(), 1);
    assert!(debugfs(&img, &format!("stat <{}>", shared[0])).contains("Version: 0x00000000:00000008"));
    let base = free_counts(&img);
    let last = |k: u64| pattern(200 + k, 9000 + 100 * k as usize);
    {
        let fs = Filesystem::open_rw(&img).unwrap();
        let inos: Vec<u32> = (0..n).map(|k| fs.resolve(format!("/f{k}")).unwrap()).collect();
        std::thread::scope(|s| {
            for (k, &ino) in inos.iter().enumerate() {
                let fs = &fs;
                s.spawn(move || {
                    let k = k as u64;
                    for round in 0..4u64 {
                        fs.set_xattr(ino, b"user.same", &pattern(300 + 10 * k + round, 20_000), ANY).unwrap();
                        fs.set_xattr(ino, b"user.other", &pattern(400 + k, 6000), ANY).unwrap();
                        fs.remove_xattr(ino, b"user.other").unwrap();
                    }
                    fs.set_xattr(ino, b"user.same", &last(k), ANY).unwrap();
                });
            }
        });
        for (k, &ino) in inos.iter().enumerate() {
            assert_eq!(fs.get_xattr(ino, "user.same").unwrap(), last(k as u64));
        }
    }
    fsck_clean(&img);
    let now = ea_inodes(&img);
    assert_eq!(now.len(), n as usize, "one value inode per file: {now:?}");
    assert!(
        !now.contains(&shared[0])
            || debugfs(&img, &format!("stat <{}>", shared[0])).contains("Version: 0x00000000:00000001")
    );
    // The shared one is gone; eight new ones exist.
    assert_eq!(free_counts(&img).1, base.1 + 1 - n);
}

/// A large value on a full filesystem: ENOSPC, and nothing the attempt
/// took (the value inode, part of its blocks) stays allocated.
#[test]
fn no_space_for_the_value_leaves_nothing_behind() {
    for args in [VARIANTS[0], VARIANTS[1]] {
        let Some((_d, img)) = mkfs(8, args) else { return };
        let before;
        {
            let fs = Filesystem::open_rw(&img).unwrap();
            let f = new_file(&fs, "f");
            let filler = new_file(&fs, "filler");
            let chunk = vec![7u8; 64 << 10];
            let mut off = 0u64;
            loop {
                let room = fs.statfs().free_blocks * fs.statfs().block_size as u64;
                // Leave less than the value needs.
                if room < 16 << 10 {
                    break;
                }
                let n = chunk.len().min((room - (12 << 10)) as usize);
                match fs.write_direct(filler, off, &chunk[..n]) {
                    Ok(w) => off += w as u64,
                    Err(e) if e.errno() == libc::ENOSPC => break,
                    Err(e) => panic!("{e}"),
                }
                fs.sync().unwrap();
            }
            fs.sync().unwrap();
            before = fs.statfs();
            let e = fs.set_xattr(f, b"user.big", &pattern(1, 65_536), ANY).unwrap_err();
            assert_eq!(e.errno(), libc::ENOSPC, "{args:?}: {e}");
            fs.sync().unwrap();
            let after = fs.statfs();
            assert_eq!((after.free_blocks, after.free_inodes), (before.free_blocks, before.free_inodes), "{args:?}");
            // A small one still fits (the handle was not left broken).
            fs.set_xattr(f, b"user.small", b"ok", ANY).unwrap();
        }
        fsck_clean(&img);
        let _ = before;
    }
}

/// A value inode uext4 made is one the kernel can share: after reading
/// it, the kernel gives the same value to another file by taking a
/// reference on it (its hash and contents pass the kernel's checks);
/// uext4 then drops the first file's reference and the second keeps the
/// value.
#[test]
fn kernel_shares_a_uext4_value_inode() {
    let Some((_d, img)) = mkfs(32, VARIANTS[0]) else { return };
    let v = pattern(21, 30_000);
    {
        let fs = Filesystem::open_rw(&img).unwrap();
        let a = new_file(&fs, "a");
        new_file(&fs, "b");
        fs.set_xattr(a, b"user.v", &v, ANY).unwrap();
    }
    let ours = ea_inodes(&img);
    assert_eq!(ours.len(), 1);
    let Some(mnt) = kernel_mount(&img) else { return };
    assert_eq!(k_get(&mnt.path().join("a"), "user.v"), v);
    k_set(&mnt.path().join("b"), "user.v", &v);
    mnt.unmount();
    fsck_clean(&img);
    let stat = debugfs(&img, &format!("stat <{}>", ours[0]));
    // Mounted without nombcache, the kernel finds the value inode by its
    // hash and takes a second reference.
    assert!(stat.contains("Version: 0x00000000:00000002"), "the kernel did not share the value inode:\n{stat}");
    assert_eq!(ea_inodes(&img), ours);
    {
        let fs = Filesystem::open_rw(&img).unwrap();
        let a = fs.resolve("/a").unwrap();
        fs.remove_xattr(a, b"user.v").unwrap();
        assert_eq!(fs.get_xattr(fs.resolve("/b").unwrap(), "user.v").unwrap(), v);
    }
    fsck_clean(&img);
    assert!(debugfs(&img, &format!("stat <{}>", ours[0])).contains("Version: 0x00000000:00000001"));
}

/// Crashes at random points of a workload of large values (create,
/// replace, remove, a file with many values unlinked while open and
/// closed, another unlinked outright): every image uext4 recovers is
/// `e2fsck -fn` clean, so no commit ever holds a value inode without its
/// entry, an entry without its inode, or a wrong reference count.
#[test]
fn crash_points_keep_references_consistent() {
    for args in [VARIANTS[0], VARIANTS[1]] {
        let Some((_d, img)) = mkfs(32, args) else { return };
        let (dev, fs) = open_recording(&std::fs::read(&img).unwrap());
        let a = new_file(&fs, "a");
        let b = new_file(&fs, "b");
        let c = new_file(&fs, "c");
        for round in 0..3u64 {
            fs.set_xattr(a, b"user.v", &pattern(round, 20_000 + 7000 * round as usize), ANY).unwrap();
            fs.set_xattr(b, b"user.w", &pattern(10 + round, 5000), ANY).unwrap();
            fs.sync().unwrap();
            for k in 0..6u64 {
                let name = format!("user.k{k}_{}", "q".repeat(40));
                fs.set_xattr(c, name.as_bytes(), &pattern(20 + k + round, 3000 + 900 * k as usize), ANY).unwrap();
            }
            fs.sync().unwrap();
            fs.set_xattr(a, b"user.v", b"small now", ANY).unwrap();
            fs.remove_xattr(b, b"user.w").unwrap();
            fs.sync().unwrap();
        }
        fs.open_inode(c).unwrap();
        fs.unlink(fs.root(), b"c").unwrap();
        fs.sync().unwrap();
        fs.close_inode(c).unwrap();
        fs.unlink(fs.root(), b"b").unwrap();
        fs.sync().unwrap();
        std::mem::forget(fs);
        let total = dev.events();
        let mut rng = rw_support::Rng(0x5eed_1234 ^ total as u64);
        for k in 0..14 {
            let point = if k == 0 { total } else { rng.below(total as u64 + 1) as usize };
            let mask = rng.next();
            let bytes = dev.crash_image(point, |i| k % 4 == 1 || (mask >> (i % 64)) & 1 == 1);
            let crashed = img.with_extension(format!("crash{k}"));
            std::fs::write(&crashed, bytes).unwrap();
            let fs = Filesystem::open_rw(&crashed).unwrap_or_else(|e| panic!("{args:?} point {point}/{total}: {e}"));
            // Whatever survived reads back whole.
            for name in ["a", "b"] {
                if let Ok(ino) = fs.resolve(format!("/{name}")) {
                    for n in fs.list_xattrs(ino).unwrap() {
                        fs.get_xattr(ino, &n).unwrap_or_else(|e| panic!("{args:?} point {point}: {name} {e}"));
                    }
                }
            }
            drop(fs);
            fsck_clean(&crashed);
            std::fs::remove_file(&crashed).unwrap();
        }
    }
}
