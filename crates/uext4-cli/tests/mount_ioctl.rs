//! The inode-flag ioctls through `uext4 mount`: `lsattr`/`chattr`
//! (FS_IOC_GETFLAGS/SETFLAGS), `xfs_io -c lsattr/chattr`
//! (FS_IOC_FSGETXATTR/FSSETXATTR), `lsattr -v` (FS_IOC_GETVERSION), the
//! effects of immutable and append-only on real programs (EPERM as on
//! ext4), who may change which flag (root, the owner, nobody else; run
//! as uid 65534 with setpriv), and the flags on disk after an unmount
//! (debugfs, a remount, e2fsck -fn). FS_IOC_FIEMAP cannot reach a FUSE
//! daemon (the VFS refuses it: FUSE has no `fiemap` inode operation): the
//! test pins that down, so that the day it changes is noticed.
//!
//! Needs root and /dev/fuse (prints `SKIP: <reason>` otherwise) and the
//! e2fsprogs tools; the xfs_io and setpriv parts are skipped, with a
//! printed reason, when those are missing.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};

mod mount_support;

use mount_support::{have, run, tool, Fixture};

/// `lsattr -d PATH`'s flag column.
fn lsattr(p: &Path) -> String {
    let out = run(tool("lsattr").arg("-d").arg(p));
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or_default().to_string()
}

/// `chattr ARG PATH`, as root or (with `nobody`) as uid/gid 65534 with
/// no groups; true if it worked.
fn chattr(arg: &str, p: &Path, nobody: bool) -> bool {
    let mut c = if nobody {
        let mut c = tool("setpriv");
        c.args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "chattr"]);
        c
    } else {
        tool("chattr")
    };
    c.arg(arg).arg(p).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

fn errno_of<T>(r: std::io::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

fn sh_ok(script: &str) -> bool {
    tool("sh").arg("-c").arg(script).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// `debugfs -R "stat PATH"` of the image.
fn debugfs_stat(img: &Path, path: &str) -> String {
    let out = run(tool("debugfs").arg("-R").arg(format!("stat {path}")).arg(img));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn inode_flags_through_the_mount() {
    require_fuse!();
    flags_run("rw,allow_other", false);
}

/// With the writeback cache (the kernel keeps a cached file's ctime and
/// sends its times as explicit values).
#[test]
fn inode_flags_with_writeback_cache() {
    require_fuse!();
    flags_run("rw,allow_other,writeback_cache", true);
}

fn flags_run(opts: &str, writeback: bool) {
    let fx = Fixture::with_mkfs_args("64M", &[]);
    fx.mount(opts);
    let f = fx.path("f");
    fs::write(&f, b"hello\n").expect("write f");
    fs::create_dir(fx.path("d")).expect("mkdir d");
    fs::write(fx.path("d/g"), b"g").expect("write d/g");
    let eperm = libc::EPERM;
    assert_eq!(lsattr(&f), "--------------e-------");

    // Immutable: nothing changes, reads work.
    assert!(chattr("+i", &f, false));
    assert_eq!(lsattr(&f), "----i---------e-------");
    assert_eq!(errno_of(OpenOptions::new().write(true).open(&f)), eperm, "open for writing");
    assert_eq!(errno_of(OpenOptions::new().append(true).open(&f)), eperm, "open for appending");
    assert_eq!(errno_of(fs::remove_file(&f)), eperm, "unlink");
    assert_eq!(errno_of(fs::rename(&f, fx.path("f2"))), eperm, "rename");
    assert_eq!(errno_of(fs::rename(fx.path("d/g"), &f)), eperm, "rename over it");
    assert_eq!(errno_of(fs::hard_link(&f, fx.path("f3"))), eperm, "link");
    assert_eq!(errno_of(OpenOptions::new().write(true).open(&f).and_then(|h| h.set_len(0))), eperm);
    assert!(!sh_ok(&format!("truncate -s 0 {}", f.display())), "truncate");
    assert!(!sh_ok(&format!("chmod 600 {}", f.display())), "chmod");
    assert!(!sh_ok(&format!("touch -d 2001-01-01 {}", f.display())), "touch -d");
    if have("setfattr") {
        assert!(!sh_ok(&format!("setfattr -n user.a -v 1 {}", f.display())), "setxattr");
    }
    assert_eq!(fs::read(&f).expect("read"), b"hello\n");
    // Only root changes `i` (CAP_LINUX_IMMUTABLE), not even the owner.
    let setpriv = have("setpriv");
    if setpriv {
        let nf = fx.path("nf");
        fs::write(&nf, b"n").expect("write nf");
        run(tool("chown").arg("65534:65534").arg(&nf));
        assert!(!chattr("-i", &f, true), "nobody cleared i of root's file");
        assert!(!chattr("+d", &f, true), "nobody changed root's file");
        assert!(chattr("+d", &nf, true), "the owner sets d");
        assert!(!chattr("+a", &nf, true), "the owner set a");
        assert!(!chattr("+i", &nf, true), "the owner set i");
        assert_eq!(lsattr(&nf), "------d-------e-------");
    } else {
        println!("SKIP (part): setpriv not installed, no unprivileged chattr");
    }
    assert!(chattr("-i", &f, false));

    // An immutable directory: no names added or removed.
    let d = fx.path("d");
    assert!(chattr("+i", &d, false));
    assert_eq!(errno_of(fs::write(fx.path("d/new"), b"x")), eperm, "create in it");
    assert_eq!(errno_of(fs::remove_file(fx.path("d/g"))), eperm, "unlink in it");
    assert!(chattr("-i", &d, false));

    // Append-only: appends only.
    assert!(chattr("+a", &f, false));
    assert_eq!(errno_of(OpenOptions::new().write(true).open(&f)), eperm, "open without O_APPEND");
    assert_eq!(errno_of(OpenOptions::new().write(true).truncate(true).open(&f)), eperm, "O_TRUNC");
    OpenOptions::new().append(true).open(&f).and_then(|mut h| h.write_all(b"more\n")).expect("append");
    assert_eq!(fs::read(&f).expect("read"), b"hello\nmore\n");
    assert_eq!(errno_of(fs::remove_file(&f)), eperm, "unlink");
    assert_eq!(errno_of(fs::rename(&f, fx.path("f2"))), eperm, "rename");
    assert!(!sh_ok(&format!("truncate -s 0 {}", f.display())), "truncate");
    assert!(sh_ok(&format!("touch {}", f.display())), "touch (times to now) is allowed");
    assert!(!sh_ok(&format!("touch -d 2001-01-01 {}", f.display())), "touch -d");

    // Stored flags; the extent flag stays. The new ctime shows at once
    // (fstests generic/277), not after the attribute timeout; with the
    // writeback cache the kernel keeps a regular file's ctime itself and
    // never takes the daemon's while it holds the inode
    // (fuse_get_cache_mask), so it shows once the kernel dropped the
    // inode (docs/COMPATIBILITY.md).
    let ctime = |p: &Path| {
        let m = fs::metadata(p).unwrap();
        (m.ctime(), m.ctime_nsec())
    };
    let c0 = ctime(&f);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(chattr("+AdS", &f, false));
    if writeback {
        fs::write("/proc/sys/vm/drop_caches", "2").expect("drop the kernel's inodes");
    }
    assert!(ctime(&f) > c0, "chattr updates the ctime the mount shows");
    assert!(!chattr("-e", &f, false), "chattr -e");
    assert_eq!(lsattr(&f), "--S--adA------e-------");

    // fsxattr view (xfs_io opens read-only: the file is append-only).
    if have("xfs_io") {
        let out = run(tool("xfs_io").arg("-r").arg("-c").arg("lsattr").arg(&f));
        let shown = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(shown.starts_with("---asAd---"), "xfs_io lsattr: {shown}");
        run(tool("xfs_io").arg("-r").arg("-c").arg("chattr -a").arg(&f));
        assert_eq!(lsattr(&f), "--S---dA------e-------");
        // A project ID other than 0 needs the project feature (EOPNOTSUPP).
        let out = tool("xfs_io").arg("-r").arg("-c").arg("chproj 7").arg(&f).output().expect("xfs_io");
        assert!(String::from_utf8_lossy(&out.stderr).contains("not supported"), "{out:?}");
    } else {
        println!("SKIP (part): xfs_io not installed");
        assert!(chattr("-a", &f, false));
    }
    OpenOptions::new().write(true).open(&f).and_then(|mut h| h.write_all(b"H")).expect("rewrite after -a");

    // FS_IOC_GETVERSION: the generation.
    let out = run(tool("lsattr").arg("-v").arg(&f));
    let version: u32 =
        String::from_utf8_lossy(&out.stdout).split_whitespace().next().and_then(|v| v.parse().ok()).expect("lsattr -v");

    // FIEMAP stops in the VFS (fs/ioctl.c ioctl_fiemap: no i_op->fiemap).
    let h = fs::File::open(&f).expect("open");
    let mut buf = [0u64; 4 + 7 * 4];
    buf[1] = u64::MAX; // fm_length
                       // SAFETY: FS_IOC_FIEMAP with a struct fiemap of 32 bytes and room for
                       // four extents (fm_extent_count 0 here: count only), owned by us.
    let r = unsafe { libc::ioctl(h.as_raw_fd(), 0xc020_660b, buf.as_mut_ptr()) };
    assert_eq!((r, std::io::Error::last_os_error().raw_os_error()), (-1, Some(libc::EOPNOTSUPP)));
    drop(h);

    fx.unmount();
    fx.assert_clean();
    let s = debugfs_stat(&fx.img, "/f");
    assert!(s.contains("Flags: 0x800c8"), "debugfs: {s}");
    assert!(s.contains(&format!("Generation: {version} ")), "generation {version}: {s}");

    // Persisted: a new mount shows the same flags.
    fx.mount("ro");
    assert_eq!(lsattr(&fx.path("f")), "--S---dA------e-------");
    fx.unmount();
    // And the kernel agrees, where it can mount.
    if mount_support::require_loop_mount("kernel part") {
        let out = Command::new("mount").arg("-o").arg("ro,loop").arg(&fx.img).arg(&fx.mnt).output().expect("mount");
        assert!(out.status.success(), "the kernel refused the image: {}", String::from_utf8_lossy(&out.stderr));
        let k = lsattr(&fx.path("f"));
        run(tool("umount").arg(&fx.mnt));
        assert_eq!(k, "--S---dA------e-------", "kernel lsattr");
    }
    run(tool("e2fsck").arg("-fn").arg(&fx.img));
}

/// The extent lines of `filefrag -v` (or `uext4 stat --extents`):
/// logical range, physical range, length and flags of each.
fn extent_rows(out: &[u8]) -> Vec<[String; 4]> {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| {
            let parts: Vec<&str> = l.split(':').collect();
            parts.first()?.trim().parse::<u32>().ok()?;
            let flags = if parts.len() >= 6 { parts[5] } else { parts.get(4).copied().unwrap_or("") };
            Some([parts[1], parts[2], parts[3], flags].map(|s| s.split_whitespace().collect::<String>()))
        })
        .collect()
}

#[test]
fn filefrag_matches_the_kernel() {
    require_fuse!();
    if !have("filefrag") {
        println!("SKIP: filefrag not installed (e2fsprogs)");
        return;
    }
    if !mount_support::require_loop_mount("the kernel is the oracle") {
        return;
    }
    let fx = Fixture::with_mkfs_args("128M", &[]);
    fx.mount("rw");
    fs::write(fx.path("small"), b"hi\n").expect("small");
    // Contiguous past the longest extent (32768 blocks at 1 KiB).
    let mut big = fs::File::create(fx.path("big")).expect("big");
    let chunk = vec![0x5au8; 1 << 20];
    for _ in 0..40 {
        big.write_all(&chunk).expect("write big");
    }
    drop(big);
    // Two files written in turns, each piece made durable: fragments.
    let mut a = fs::File::create(fx.path("a")).expect("a");
    let mut b = fs::File::create(fx.path("b")).expect("b");
    for _ in 0..6 {
        for h in [&mut a, &mut b] {
            h.write_all(&chunk[..256 << 10]).expect("write");
            h.sync_all().expect("fsync");
        }
    }
    drop((a, b));
    // Preallocated (unwritten), written, preallocated past the end.
    let pre = fx.path("pre").display().to_string();
    assert!(sh_ok(&format!("fallocate -l 1M {pre} && echo x >> {pre} && fallocate -n -o 2M -l 1M {pre}")));
    // Holes.
    let sparse = fx.path("sparse").display().to_string();
    assert!(sh_ok(&format!(
        "dd if=/dev/urandom of={sparse} bs=4k count=3 seek=100 && \
         dd if=/dev/urandom of={sparse} bs=4k count=2 seek=10 conv=notrunc"
    )));
    fs::create_dir(fx.path("dir")).expect("dir");
    fx.unmount();
    fx.assert_clean();

    let names = ["small", "big", "a", "b", "pre", "sparse", "dir"];
    let ours: Vec<_> = names
        .iter()
        .map(|n| {
            extent_rows(&run(Command::new(mount_support::BIN).args(["stat", "--extents"]).arg(&fx.img).arg(n)).stdout)
        })
        .collect();
    let out = Command::new("mount").arg("-o").arg("ro,loop").arg(&fx.img).arg(&fx.mnt).output().expect("mount");
    assert!(out.status.success(), "the kernel refused the image: {}", String::from_utf8_lossy(&out.stderr));
    let kernel: Vec<_> =
        names.iter().map(|n| extent_rows(&run(tool("filefrag").arg("-v").arg(fx.path(n))).stdout)).collect();
    run(tool("umount").arg(&fx.mnt));
    for ((n, k), o) in names.iter().zip(&kernel).zip(&ours) {
        assert!(!k.is_empty(), "{n}: no extents from filefrag");
        assert_eq!(o, k, "{n}: uext4 stat --extents vs the kernel's filefrag -v");
    }
    assert!(kernel[1].len() >= 2 && kernel[2].len() >= 2, "big and a are in pieces: {kernel:?}");
    assert!(kernel[4].iter().any(|r| r[3].contains("unwritten")), "pre has unwritten extents");
    run(tool("e2fsck").arg("-fn").arg(&fx.img));
}
