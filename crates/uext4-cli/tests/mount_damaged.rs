//! Damaged images through the mount (issue 23, item 9): an xattr value's
//! inode named by a directory entry is refused by lookup and readdirplus
//! and left unchanged; an inode group found corrupt while allocating
//! makes `errors=remount-ro` refuse later changes. Run on both transports
//! (UEXT4_TEST_TRANSPORT=dev|uring).

mod mount_support;

use mount_support::{run, tool, Fixture};
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn errno_of(r: std::io::Result<impl Sized>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

/// `debugfs [-w] -R cmd img`: its output.
fn debugfs(img: &Path, write: bool, cmd: &str) -> String {
    let mut c = tool("debugfs");
    if write {
        c.arg("-w");
    }
    let out = run(c.arg("-R").arg(cmd).arg(img));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) {
    let path = CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings and a value of the given length.
    let r = unsafe { libc::setxattr(path.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(r, 0, "setxattr {}: {}", p.display(), std::io::Error::last_os_error());
}

/// e2fsprogs' f_ea_inode_dir_ref through the mount: the kernel gets
/// EUCLEAN for the name from LOOKUP and never a node id, a listing
/// (READDIRPLUS) shows the name but no usable inode, and nothing the
/// tries do changes the value's inode (its atime is the value's hash).
#[test]
fn ea_inode_named_by_an_entry_is_refused_through_the_mount() {
    require_fuse!();
    let fx = Fixture::with_mkfs_args("32M", &["-O", "ea_inode"]);
    fx.mount("rw");
    fs::write(fx.path("owner"), b"data").unwrap();
    let value: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
    set_xattr(&fx.path("owner"), "user.big", &value);
    fx.unmount();
    fx.assert_clean();
    let ea = (12..64)
        .find(|i| {
            let s = debugfs(&fx.img, false, &format!("stat <{i}>"));
            s.contains("Links: 1") && s.split("Flags: 0x").nth(1).is_some_and(|f| f.starts_with("2"))
        })
        .expect("the value's inode");
    let before = debugfs(&fx.img, false, &format!("stat <{ea}>"));
    debugfs(&fx.img, true, &format!("ln <{ea}> /value"));

    fx.mount("rw,errors=continue");
    assert_eq!(errno_of(fs::symlink_metadata(fx.path("value"))), libc::EUCLEAN);
    assert_eq!(errno_of(fs::read(fx.path("value"))), libc::EUCLEAN);
    assert_eq!(errno_of(fs::remove_file(fx.path("value"))), libc::EUCLEAN);
    // Listed (as ext4 lists it), but not reachable.
    let names: Vec<_> = fs::read_dir(&fx.mnt).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(names.iter().any(|n| n == "value"), "{names:?}");
    assert_ne!(errno_of(fs::read(fx.path("value"))), 0);
    assert_eq!(fs::read(fx.path("owner")).unwrap(), b"data");
    fx.unmount();
    assert_eq!(debugfs(&fx.img, false, &format!("stat <{ea}>")), before, "the value's inode changed");
    debugfs(&fx.img, true, "unlink /value");
    run(tool("e2fsck").arg("-fn").arg(&fx.img));
}

/// An inode bitmap that disagrees with its descriptor (found when the
/// allocator first reaches the group): the create goes on in another
/// group, the error is recorded in the superblock, and
/// `errors=remount-ro` refuses every later change (EROFS), as after an
/// operation's own corruption error. (The policy is applied at the next
/// change: the create that met the group itself succeeded.)
#[test]
fn corrupt_inode_group_met_by_a_create_applies_errors_remount_ro() {
    require_fuse!();
    let fx = Fixture::with_mkfs_args("64M", &[]);
    let stats = debugfs(&fx.img, false, "stats");
    let free0: u32 = stats.split(" free inodes").next().and_then(|s| s.rsplit(' ').next()?.parse().ok()).unwrap();
    debugfs(&fx.img, true, &format!("set_bg 0 free_inodes_count {}", free0 - 1));
    debugfs(&fx.img, true, "set_bg 0 checksum calc");
    fx.mount("rw,errors=remount-ro");
    // The create that meets the corrupt group succeeds (in another
    // group); errors= is applied from the next change on.
    drop(fs::File::create(fx.path("first")).expect("the create that meets the corrupt group"));
    assert_eq!(errno_of(fs::write(fx.path("first"), b"1")), libc::EROFS);
    assert_eq!(errno_of(fs::write(fx.path("second"), b"2")), libc::EROFS);
    assert!(fx.path("first").exists());
    fx.unmount();
    let d = fx.dumpe2fs();
    assert!(d.contains("FS Error count:           1"), "{d}");
    debugfs(&fx.img, true, &format!("set_bg 0 free_inodes_count {free0}"));
    debugfs(&fx.img, true, "set_bg 0 checksum calc");
    run(tool("e2fsck").arg("-fn").arg(&fx.img));
}
