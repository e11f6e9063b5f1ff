//! The null backend (`uext4 mount-null`: uext4's FUSE layer over an
//! in-memory tree, the benchmarks' ceiling) serves a real tree: files
//! and directories made, written, read back, renamed, linked, listed,
//! stat'ed and removed; a tar archive extracted into it reads back equal;
//! data past `--data-cap` reads back as zeros; the daemon exits once
//! unmounted. The transport is `UEXT4_TEST_TRANSPORT`'s (dev or uring).
//! No image is involved (nothing to e2fsck).
//!
//! Needs root and /dev/fuse (prints `SKIP: <reason>` otherwise).

use std::ffi::CString;
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod mount_support;

use mount_support::{is_mounted, run, tool, unmount_retrying, with_transport, BIN};

/// A null mount in a temporary directory, served by a foreground daemon
/// (a child process, so that its exit is seen); unmounted and the daemon
/// killed on drop if a test failed on the way.
struct NullMount {
    dir: tempfile::TempDir,
    mnt: PathBuf,
    child: Option<Child>,
}

impl NullMount {
    fn start(extra: &[&str]) -> NullMount {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).expect("mkdir");
        let mnt = mnt.canonicalize().expect("canonicalize");
        let child = Command::new(BIN)
            .arg("mount-null")
            .arg(&mnt)
            .arg("-o")
            .arg(with_transport("rw"))
            .arg("--foreground")
            .args(extra)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn uext4 mount-null");
        let m = NullMount { dir, mnt, child: Some(child) };
        let t0 = Instant::now();
        while !is_mounted(&m.mnt) {
            assert!(t0.elapsed() < Duration::from_secs(30), "the null mount did not appear");
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// Unmounts and waits for the daemon to exit, successfully.
    fn finish(mut self) {
        unmount_retrying(tool("umount").arg(&self.mnt));
        let mut child = self.child.take().expect("daemon");
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait") {
                break s;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "the daemon did not exit after the unmount");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "the daemon exited with {status}");
        assert!(!is_mounted(&self.mnt));
    }
}

impl Drop for NullMount {
    fn drop(&mut self) {
        if is_mounted(&self.mnt) {
            let _ = tool("umount").arg("-l").arg(&self.mnt).status();
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn renameat2(from: &Path, to: &Path, flags: u32) -> std::io::Result<()> {
    let (a, b) = (CString::new(from.as_os_str().as_bytes()).unwrap(), CString::new(to.as_os_str().as_bytes()).unwrap());
    // SAFETY: both are valid NUL-terminated paths; AT_FDCWD needs no descriptor.
    let r = unsafe { libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), flags) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn the_null_backend_serves_a_tree() {
    require_fuse!();
    let m = NullMount::start(&[]);
    // Directories and files, written and read back.
    fs::create_dir_all(m.path("a/b/c")).unwrap();
    fs::write(m.path("a/f"), b"hello").unwrap();
    assert_eq!(fs::read(m.path("a/f")).unwrap(), b"hello");
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + i / 4096) as u8).collect();
    fs::write(m.path("a/b/big"), &big).unwrap();
    assert_eq!(fs::read(m.path("a/b/big")).unwrap(), big);
    // A write inside a page and past the end, then a truncate.
    {
        let mut f = fs::OpenOptions::new().read(true).write(true).open(m.path("a/f")).unwrap();
        f.seek(SeekFrom::Start(8190)).unwrap();
        f.write_all(b"xyz").unwrap();
        let mut all = Vec::new();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_to_end(&mut all).unwrap();
        assert_eq!(all.len(), 8193);
        assert_eq!(&all[..5], b"hello");
        assert!(all[5..8190].iter().all(|&b| b == 0));
        assert_eq!(&all[8190..], b"xyz");
        f.set_len(3).unwrap();
    }
    assert_eq!(fs::read(m.path("a/f")).unwrap(), b"hel");
    // Attributes.
    fs::set_permissions(m.path("a/f"), fs::Permissions::from_mode(0o600)).unwrap();
    let md = fs::metadata(m.path("a/f")).unwrap();
    assert_eq!((md.mode() & 0o7777, md.len(), md.nlink(), md.uid()), (0o600, 3, 1, 0));
    assert!(fs::metadata(m.path("a")).unwrap().is_dir());
    assert_eq!(fs::metadata(m.path("a")).unwrap().nlink(), 3, "a: ., its entry, b/..");
    // Links, renames (over a file, across directories, an exchange).
    fs::hard_link(m.path("a/f"), m.path("a/b/g")).unwrap();
    assert_eq!(fs::metadata(m.path("a/f")).unwrap().nlink(), 2);
    std::os::unix::fs::symlink("b/big", m.path("a/s")).unwrap();
    assert_eq!(fs::read_link(m.path("a/s")).unwrap(), Path::new("b/big"));
    assert_eq!(fs::read(m.path("a/s")).unwrap().len(), big.len());
    fs::write(m.path("a/t"), b"replaced").unwrap();
    fs::rename(m.path("a/b/g"), m.path("a/t")).unwrap();
    assert_eq!(fs::read(m.path("a/t")).unwrap(), b"hel");
    fs::rename(m.path("a/b/c"), m.path("c2")).unwrap();
    assert_eq!(fs::metadata(m.path("a/b")).unwrap().nlink(), 2);
    renameat2(&m.path("a/t"), &m.path("c2"), libc::RENAME_EXCHANGE).unwrap();
    assert!(fs::metadata(m.path("a/t")).unwrap().is_dir() && fs::metadata(m.path("c2")).unwrap().is_file());
    let e = renameat2(&m.path("a/f"), &m.path("c2"), libc::RENAME_NOREPLACE).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
    // Extended attributes.
    run(tool("setfattr").args(["-n", "user.k", "-v", "v1"]).arg(m.path("c2")));
    let out = run(tool("getfattr").args(["-n", "user.k", "--only-values"]).arg(m.path("c2")));
    assert_eq!(out.stdout, b"v1");
    // Listings: "." and "..", every name once across several replies.
    for i in 0..600 {
        fs::write(m.path(&format!("a/b/n{i:04}")), b"").unwrap();
    }
    let mut names: Vec<String> =
        fs::read_dir(m.path("a/b")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names.len(), 601, "{:?}", &names[..5]);
    let ls = run(tool("ls").arg("-fa").arg(m.path("a/b")));
    assert_eq!(String::from_utf8_lossy(&ls.stdout).lines().count(), 603);
    // Removal: a non-empty directory is refused, then everything goes.
    let e = fs::remove_dir(m.path("a/b")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOTEMPTY));
    for e in fs::read_dir(m.mnt.clone()).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() && !p.is_symlink() {
            fs::remove_dir_all(&p).unwrap();
        } else {
            fs::remove_file(&p).unwrap();
        }
    }
    assert_eq!(fs::read_dir(&m.mnt).unwrap().count(), 0);
    m.finish();
}

/// A tar archive of a small tree (files, directories, a symlink, a hard
/// link, modes and times) extracted into the mount reads back equal.
#[test]
fn a_tar_archive_extracts_and_compares_equal() {
    require_fuse!();
    let m = NullMount::start(&[]);
    let src = m.dir.path().join("src");
    for d in ["x/y/z", "w"] {
        fs::create_dir_all(src.join(d)).unwrap();
    }
    for i in 0..40u32 {
        let data: Vec<u8> = (0..(i * 997) % 20_000).map(|j| (j ^ i) as u8).collect();
        fs::write(src.join(if i % 2 == 0 { "x/y" } else { "w" }).join(format!("f{i}")), data).unwrap();
    }
    fs::set_permissions(src.join("w/f1"), fs::Permissions::from_mode(0o751)).unwrap();
    std::os::unix::fs::symlink("../w/f3", src.join("x/l")).unwrap();
    fs::hard_link(src.join("w/f5"), src.join("x/y/z/h")).unwrap();
    let tarball = m.dir.path().join("t.tar");
    run(tool("tar").arg("-C").arg(&src).arg("-cf").arg(&tarball).arg("."));
    fs::create_dir(m.path("t")).unwrap();
    run(tool("tar").arg("-C").arg(m.path("t")).arg("-xpf").arg(&tarball));
    run(tool("diff").arg("-r").arg("--no-dereference").arg(&src).arg(m.path("t")));
    // tar's own comparison: modes, times, link targets and contents.
    run(tool("tar").arg("-C").arg(m.path("t")).arg("--compare").arg("-f").arg(&tarball));
    assert_eq!(fs::metadata(m.path("t/w/f5")).unwrap().nlink(), 2);
    run(tool("rm").arg("-rf").arg(m.path("t")));
    assert_eq!(fs::read_dir(&m.mnt).unwrap().count(), 0);
    m.finish();
}

/// Past `--data-cap`, writes are accepted and their new pages dropped:
/// they read back as zeros, the size stays what was written.
#[test]
fn data_past_the_cap_reads_back_as_zeros() {
    require_fuse!();
    let m = NullMount::start(&["--data-cap", "64K"]);
    let data = vec![0xa5u8; 128 << 10];
    fs::write(m.path("f"), &data).unwrap();
    // Dropped from the kernel's cache, so that the read reaches the daemon.
    run(tool("sh").arg("-c").arg("echo 3 > /proc/sys/vm/drop_caches"));
    let back = fs::read(m.path("f")).unwrap();
    assert_eq!(back.len(), 128 << 10);
    assert!(back[..64 << 10].iter().all(|&b| b == 0xa5), "the first 64 KiB are kept");
    assert!(back[64 << 10..].iter().all(|&b| b == 0), "what is past the cap reads as zeros");
    // Truncating the file frees its pages: new data is kept again. (Not
    // an unlink: its pages go at the kernel's FORGET, which comes when
    // the kernel chooses.)
    fs::write(m.path("f"), b"").unwrap();
    fs::write(m.path("g"), &data[..4096]).unwrap();
    run(tool("sh").arg("-c").arg("echo 3 > /proc/sys/vm/drop_caches"));
    assert_eq!(fs::read(m.path("g")).unwrap(), &data[..4096]);
    m.finish();
}

/// Without --foreground the command returns once mounted, and the
/// daemon it leaves exits at the unmount.
#[test]
fn the_daemon_mode_mounts_and_exits_at_unmount() {
    require_fuse!();
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mnt = mnt.canonicalize().unwrap();
    run(Command::new(BIN).arg("mount-null").arg(&mnt).arg("-o").arg(with_transport("rw")));
    assert!(is_mounted(&mnt));
    let daemons = || -> Vec<u32> {
        let want = mnt.as_os_str().as_bytes();
        fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                let c = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                c.split(|&b| b == 0).any(|a| a == want) && c.windows(10).any(|w| w == b"mount-null")
            })
            .collect()
    };
    assert_eq!(daemons().len(), 1, "one daemon serves the mount");
    fs::write(mnt.join("f"), b"x").unwrap();
    unmount_retrying(tool("umount").arg(&mnt));
    let t0 = Instant::now();
    while !daemons().is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(30), "the daemon is still running after the unmount");
        std::thread::sleep(Duration::from_millis(20));
    }
}
