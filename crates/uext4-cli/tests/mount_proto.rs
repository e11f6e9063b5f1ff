//! What uext4's own FUSE request layer carries that the `fuser` crate
//! could not: FUSE_STATX (statx(2) with the creation time, btime, from
//! the inode's `i_crtime`) and FUSE_TMPFILE (`open(dir, O_TMPFILE)`, then
//! `linkat` of the open file, or its deletion at close). Runs on the
//! transport UEXT4_TEST_TRANSPORT names. Needs root and /dev/fuse.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

mod mount_support;

use mount_support::{run, tool, Fixture};

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("no NUL")
}

/// statx(2) of `p` asking for the basic statistics and btime.
fn statx(p: &Path) -> libc::statx {
    // SAFETY: an all-zero statx is a valid out buffer.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    let c = cpath(p);
    // SAFETY: `c` is NUL-terminated and `st` writable; both outlive the call.
    let r = unsafe { libc::statx(libc::AT_FDCWD, c.as_ptr(), 0, libc::STATX_BASIC_STATS | libc::STATX_BTIME, &mut st) };
    assert_eq!(r, 0, "statx {}: {}", p.display(), std::io::Error::last_os_error());
    st
}

/// Free inodes of the mount (statvfs f_ffree).
fn free_inodes(p: &Path) -> u64 {
    // SAFETY: an all-zero statvfs is a valid out buffer.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    let c = cpath(p);
    // SAFETY: as for statx.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0);
    s.f_ffree
}

#[test]
fn statx_reports_the_creation_time() {
    require_fuse!();
    let fx = Fixture::with_mkfs_args("64M", &[]);
    fx.mount("");
    fs::write(fx.path("f"), b"born").expect("write");
    fs::create_dir(fx.path("d")).expect("mkdir");
    // A stat first: the kernel caches attributes without btime, and must
    // still ask (FUSE_STATX) when a caller wants btime.
    fs::metadata(fx.path("f")).expect("stat");
    let f = statx(&fx.path("f"));
    let d = statx(&fx.path("d"));
    for (name, st) in [("f", &f), ("d", &d)] {
        assert_ne!(st.stx_mask & libc::STATX_BTIME, 0, "{name}: no btime in the statx mask {:#x}", st.stx_mask);
        assert!(st.stx_btime.tv_sec > 1_600_000_000, "{name}: btime {}", st.stx_btime.tv_sec);
        assert!(st.stx_btime.tv_sec <= st.stx_mtime.tv_sec);
    }
    assert_eq!(f.stx_size, 4);
    // stat(1)'s %W (seconds of the birth time) agrees.
    let out = run(Command::new("stat").arg("-c").arg("%W").arg(fx.path("f")));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), f.stx_btime.tv_sec.to_string());
    fx.unmount();
    fx.assert_clean();
    // The library's crtime of the same inode, and debugfs's.
    let lib = uext4::Filesystem::open(&fx.img).expect("open image");
    let ino = lib.lookup(2, b"f").expect("lookup");
    let crtime = lib.stat(ino).expect("stat").crtime.expect("inode has crtime");
    assert_eq!((crtime.sec, crtime.nsec), (f.stx_btime.tv_sec, f.stx_btime.tv_nsec));
    drop(lib);
    let out = run(tool("debugfs").arg("-R").arg("stat /f").arg(&fx.img));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.trim_start().starts_with("crtime:")).expect("debugfs crtime line");
    let hex = line.split_whitespace().nth(1).and_then(|v| v.split(':').next()).expect("crtime value");
    let sec = i64::from_str_radix(hex.trim_start_matches("0x"), 16).expect("hex seconds");
    assert_eq!(sec, f.stx_btime.tv_sec, "{line}");
}

#[test]
fn o_tmpfile_is_linked_or_vanishes() {
    require_fuse!();
    let fx = Fixture::with_mkfs_args("64M", &[]);
    fx.mount("");
    fs::create_dir(fx.path("dir")).expect("mkdir");
    let dir = cpath(&fx.path("dir"));
    let before = free_inodes(&fx.mnt);

    // A tmpfile that gets a name through linkat(AT_EMPTY_PATH).
    // SAFETY: `dir` is NUL-terminated; open returns a descriptor or -1.
    let fd = unsafe { libc::open(dir.as_ptr(), libc::O_TMPFILE | libc::O_RDWR, 0o640) };
    assert!(fd >= 0, "O_TMPFILE: {}", std::io::Error::last_os_error());
    let data = b"written before it had a name";
    // SAFETY: writes from a live buffer to the open descriptor.
    assert_eq!(unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) }, data.len() as isize);
    assert_eq!(fs::read_dir(fx.path("dir")).expect("readdir").count(), 0, "the tmpfile has a name");
    let target = cpath(&fx.path("dir/named"));
    // SAFETY: both paths are NUL-terminated; `fd` is open.
    let r = unsafe { libc::linkat(fd, c"".as_ptr(), libc::AT_FDCWD, target.as_ptr(), libc::AT_EMPTY_PATH) };
    assert_eq!(r, 0, "linkat: {}", std::io::Error::last_os_error());
    // SAFETY: closes our descriptor once.
    unsafe { libc::close(fd) };
    assert_eq!(fs::read(fx.path("dir/named")).expect("read named"), data);
    assert_eq!(fs::metadata(fx.path("dir/named")).expect("stat").len(), data.len() as u64);

    // A tmpfile closed without a name: gone, its inode free again.
    // SAFETY: as above.
    let fd = unsafe { libc::open(dir.as_ptr(), libc::O_TMPFILE | libc::O_WRONLY, 0o600) };
    assert!(fd >= 0, "O_TMPFILE: {}", std::io::Error::last_os_error());
    let big = vec![0x5au8; 1 << 20];
    // SAFETY: as above.
    assert_eq!(unsafe { libc::write(fd, big.as_ptr().cast(), big.len()) }, big.len() as isize);
    assert_eq!(free_inodes(&fx.mnt), before - 2);
    // SAFETY: closes our descriptor once.
    unsafe { libc::close(fd) };
    // The kernel sends RELEASE after close returns (in the background):
    // wait for it, up to 10 s.
    let mut free = free_inodes(&fx.mnt);
    for _ in 0..1000 {
        if free == before - 1 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        free = free_inodes(&fx.mnt);
    }
    assert_eq!(free, before - 1, "the unnamed tmpfile outlived its close");
    assert_eq!(fs::read_dir(fx.path("dir")).expect("readdir").count(), 1);
    fx.unmount();
    fx.assert_clean();
    let out = run(tool("debugfs").arg("-R").arg("ls -l /dir").arg(&fx.img));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("named") && text.contains(&data.len().to_string()), "{text}");
}

/// An O_TMPFILE in a set-group-ID directory with a default ACL is made
/// as a create there would be (ext4_tmpfile: inode_init_owner and
/// ext4_init_acl): the directory's group, and the default ACL inherited
/// as the file's access ACL.
#[test]
fn o_tmpfile_inherits_group_and_default_acl() {
    require_fuse!();
    if !mount_support::have("setfacl") || !mount_support::have("getfacl") {
        println!("SKIP: setfacl/getfacl (acl) are not installed");
        return;
    }
    let fx = Fixture::with_mkfs_args("64M", &[]);
    fx.mount("");
    let d = fx.path("shared");
    fs::create_dir(&d).expect("mkdir");
    run(Command::new("chown").arg("0:4321").arg(&d));
    run(Command::new("chmod").arg("2775").arg(&d));
    run(Command::new("setfacl").args(["-d", "-m", "u:65534:rw"]).arg(&d));
    let dir = cpath(&d);
    // SAFETY: `dir` is NUL-terminated; open returns a descriptor or -1.
    let fd = unsafe { libc::open(dir.as_ptr(), libc::O_TMPFILE | libc::O_RDWR, 0o666) };
    assert!(fd >= 0, "O_TMPFILE: {}", std::io::Error::last_os_error());
    let target = cpath(&fx.path("shared/named"));
    // SAFETY: both paths are NUL-terminated; `fd` is open.
    let r = unsafe { libc::linkat(fd, c"".as_ptr(), libc::AT_FDCWD, target.as_ptr(), libc::AT_EMPTY_PATH) };
    assert_eq!(r, 0, "linkat: {}", std::io::Error::last_os_error());
    // SAFETY: closes our descriptor once.
    unsafe { libc::close(fd) };
    let named = fx.path("shared/named");
    let st = statx(&named);
    assert_eq!(st.stx_gid, 4321, "the set-group-ID directory's group");
    let out = run(Command::new("getfacl").arg("-cn").arg(&named));
    let acl = String::from_utf8_lossy(&out.stdout);
    assert!(acl.contains("user:65534:rw-"), "the default ACL was not inherited:\n{acl}");
    fx.unmount();
    fx.assert_clean();
}
