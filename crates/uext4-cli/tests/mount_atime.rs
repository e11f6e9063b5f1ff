//! Access times and directory seeks through `uext4 mount`: relatime by
//! default (the first read after a change updates the atime, the next
//! one does not; listings update a directory's), noatime, strictatime
//! (every open's reads), the times kept across a remount; then
//! seekdir(3) to positions telldir(3) never returned (fstests
//! generic/676: the listing goes on, it does not end); `nodiratime`
//! (fstests generic/003) and a mount right after `umount` returned (the
//! new daemon waits for the old one to let the image go). Every image
//! ends `e2fsck -fn` clean.
//!
//! Needs root and /dev/fuse (prints `SKIP: <reason>` otherwise).

use std::ffi::{CStr, CString};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

mod mount_support;

use mount_support::Fixture;

/// (atime seconds, atime nanoseconds) of `p`.
fn atime(p: &Path) -> (i64, i64) {
    let m = fs::metadata(p).unwrap();
    (m.atime(), m.atime_nsec())
}

#[test]
fn atime_modes_through_the_mount() {
    require_fuse!();
    let f = Fixture::with_mkfs_args("32M", &[]);
    f.mount("rw");
    let file = f.path("f");
    fs::write(&file, vec![5u8; 20_000]).unwrap();
    fs::create_dir(f.path("d")).unwrap();
    fs::write(f.path("d/x"), b"x").unwrap();
    let before = atime(&file);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(fs::read(&file).unwrap().len(), 20_000);
    let after = atime(&file);
    assert!(after > before, "relatime: the first read after the write updates ({before:?} -> {after:?})");
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::read(&file).unwrap();
    assert_eq!(atime(&file), after, "relatime: the second read does not");
    let d0 = atime(&f.path("d"));
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(fs::read_dir(f.path("d")).unwrap().count(), 1);
    let d1 = atime(&f.path("d"));
    assert!(d1 > d0, "a listing updates the directory's atime");
    f.unmount();
    f.assert_clean();

    // Kept on disk; noatime leaves it.
    f.mount("noatime");
    assert_eq!(atime(&file), after);
    fs::write(f.path("g"), b"new").unwrap();
    let g0 = atime(&f.path("g"));
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::read(f.path("g")).unwrap();
    fs::read(&file).unwrap();
    assert_eq!(atime(&f.path("g")), g0, "noatime");
    assert_eq!(atime(&file), after, "noatime");
    f.unmount();
    f.assert_clean();

    // strictatime: every open's read.
    f.mount("strictatime,lazytime");
    let mut last = atime(&file);
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        fs::read(&file).unwrap();
        let now = atime(&file);
        assert!(now > last, "strictatime: {last:?} -> {now:?}");
        last = now;
    }
    f.unmount();
    f.assert_clean();
    f.mount("ro");
    assert_eq!(atime(&file), last, "the pending atime was written at unmount");
    f.unmount();
}

/// `nodiratime`: listings leave a directory's atime, file reads still
/// update theirs. Each mount follows a plain `umount` at once, as
/// fstests' cycle_mount does: `umount` returns before the daemon has
/// written the image back, and the next `uext4 mount` waits for it
/// instead of failing with "in use".
#[test]
fn nodiratime_and_mount_right_after_umount() {
    require_fuse!();
    let f = Fixture::with_mkfs_args("32M", &[]);
    f.mount("rw");
    fs::create_dir(f.path("d")).unwrap();
    fs::write(f.path("d/x"), b"x").unwrap();
    let quick_umount = || mount_support::run(mount_support::tool("umount").arg(&f.mnt));
    quick_umount();
    f.mount("strictatime,nodiratime");
    let (d0, x0) = (atime(&f.path("d")), atime(&f.path("d/x")));
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(fs::read_dir(f.path("d")).unwrap().count(), 1);
    assert_eq!(fs::read(f.path("d/x")).unwrap(), b"x");
    assert_eq!(atime(&f.path("d")), d0, "nodiratime: a listing leaves the directory's atime");
    assert!(atime(&f.path("d/x")) > x0, "nodiratime: file reads still update");
    quick_umount();
    f.mount("strictatime");
    assert_eq!(atime(&f.path("d")), d0);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(fs::read_dir(f.path("d")).unwrap().count(), 1);
    assert!(atime(&f.path("d")) > d0, "diratime again: the listing updates");
    f.unmount();
    f.assert_clean();
}

/// One entry from `dir`, or None at the end.
///
/// # Safety
/// `dir` is an open directory stream.
unsafe fn next_name(dir: *mut libc::DIR) -> Option<Vec<u8>> {
    // SAFETY: the caller's stream; the entry is copied before the next call.
    let e = unsafe { libc::readdir(dir) };
    if e.is_null() {
        return None;
    }
    // SAFETY: readdir returned an entry whose d_name is NUL-terminated.
    Some(unsafe { CStr::from_ptr((*e).d_name.as_ptr()) }.to_bytes().to_vec())
}

#[test]
fn seekdir_to_positions_never_returned() {
    require_fuse!();
    let f = Fixture::with_mkfs_args("32M", &[]);
    f.mount("rw");
    let d = f.path("many");
    fs::create_dir(&d).unwrap();
    for i in 0..1500 {
        fs::write(d.join(format!("file-with-a-longer-name-{i:05}")), b"").unwrap();
    }
    let c = CString::new(d.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    let dir = unsafe { libc::opendir(c.as_ptr()) };
    assert!(!dir.is_null());
    // (telldir before each entry, the entry)
    let mut all = Vec::new();
    loop {
        // SAFETY: `dir` is open until closedir below.
        let pos = unsafe { libc::telldir(dir) };
        // SAFETY: as above.
        match unsafe { next_name(dir) } {
            Some(n) => all.push((pos, n)),
            None => break,
        }
    }
    assert_eq!(all.len(), 1502);
    let maxpos = all.iter().map(|a| a.0).max().unwrap();
    // Back to positions telldir returned.
    for k in (0..all.len()).step_by(97) {
        // SAFETY: as above.
        unsafe { libc::seekdir(dir, all[k].0) };
        // SAFETY: as above.
        assert_eq!(unsafe { next_name(dir) }.as_deref(), Some(all[k].1.as_slice()));
    }
    // Positions no listing returned (t_readdir_3: random() % maxpos):
    // the listing goes on.
    let mut x = 99u64;
    for _ in 0..300 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let pos = ((x >> 33) as libc::c_long) % maxpos;
        // SAFETY: as above.
        unsafe { libc::seekdir(dir, pos) };
        // SAFETY: as above.
        assert!(unsafe { next_name(dir) }.is_some(), "EOF after seekdir({pos})");
    }
    // SAFETY: opened above, closed once.
    unsafe { libc::closedir(dir) };
    f.unmount();
    f.assert_clean();
}
