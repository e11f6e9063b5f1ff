//! Directory listings through `uext4 mount` read with small getdents64
//! buffers: each call ends inside a FUSE reply, so the kernel's next
//! READDIR (or READDIRPLUS) resumes from a cookie inside a directory
//! block. The listing is the one `read_dir` gives, each name once, and
//! names added while it is under way lose or repeat no other name. The
//! transport is `UEXT4_TEST_TRANSPORT`'s (dev or uring). The image ends
//! `e2fsck -fn` clean.
//!
//! Needs root and /dev/fuse (prints `SKIP: <reason>` otherwise).

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

mod mount_support;

use mount_support::Fixture;

/// The names getdents64 returns for `dir` in calls of a `buf`-byte
/// buffer; `between` runs after every call but the last.
fn getdents(dir: &Path, buf: usize, mut between: impl FnMut()) -> Vec<String> {
    let c = CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    assert!(fd >= 0, "open {}: {}", dir.display(), std::io::Error::last_os_error());
    let mut names = Vec::new();
    let mut b = vec![0u8; buf];
    loop {
        // SAFETY: `b` is a writable buffer of `b.len()` bytes, `fd` open.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, b.as_mut_ptr(), b.len()) };
        assert!(n >= 0, "getdents64: {}", std::io::Error::last_os_error());
        if n == 0 {
            break;
        }
        let mut off = 0usize;
        while off < n as usize {
            // struct linux_dirent64: ino 8, off 8, reclen 2, type 1, name.
            let reclen = u16::from_ne_bytes([b[off + 16], b[off + 17]]) as usize;
            let name = &b[off + 19..off + reclen];
            let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
            names.push(String::from_utf8(name[..end].to_vec()).unwrap());
            off += reclen;
        }
        between();
    }
    // SAFETY: `fd` is open and not used after.
    unsafe { libc::close(fd) };
    names
}

fn counts(names: &[String]) -> BTreeMap<&str, usize> {
    let mut m = BTreeMap::new();
    for n in names {
        *m.entry(n.as_str()).or_default() += 1;
    }
    m
}

#[test]
fn small_getdents_buffers_list_each_name_once() {
    require_fuse!();
    let f = Fixture::with_mkfs_args("64M", &[]);
    f.mount("rw");
    let d = f.path("d");
    fs::create_dir(&d).unwrap();
    let n = 1500;
    for i in 0..n {
        fs::write(d.join(format!("a-somewhat-long-file-name-{i:05}")), b"").unwrap();
    }
    let mut all: Vec<String> =
        fs::read_dir(&d).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    all.sort();
    assert_eq!(all.len(), n);
    // Buffers of one to a few entries: every call resumes mid-block.
    for buf in [64, 200, 1000] {
        let mut got = getdents(&d, buf, || {});
        got.retain(|s| s != "." && s != "..");
        got.sort();
        assert_eq!(got, all, "getdents64 in {buf}-byte calls");
    }
    // Names added between the calls (leaf splits) repeat or lose no name
    // present throughout.
    let mut added = 0;
    let got = getdents(&d, 200, || {
        if added < 600 {
            for _ in 0..20 {
                fs::write(d.join(format!("new-{added:05}")), b"").unwrap();
                added += 1;
            }
        }
    });
    let c = counts(&got);
    for name in &all {
        assert_eq!(c.get(name.as_str()), Some(&1), "{name}");
    }
    for (name, k) in &c {
        assert_eq!(*k, 1, "{name} listed {k} times");
    }
    f.unmount();
    f.assert_clean();
}
