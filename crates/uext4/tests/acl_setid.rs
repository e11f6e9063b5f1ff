//! Set-id rules and POSIX ACL inheritance through the library API: the
//! `*_as` creation methods with a caller's [`Cred`] (set-group-ID
//! directories, stripping set-group-ID for a caller outside the group,
//! the umask, default ACL -> access ACL, default ACL and mode),
//! `remove_privs` (a write or truncate by an unprivileged caller), chown
//! and chmod through `setattr` (set-id bits cleared, the ACL mask
//! following the mode) and `setattr_as` (what a caller's chown, truncate
//! or chmod clears), and the plain methods left exact. Every image ends
//! `e2fsck -fn` clean; as root, the kernel mounts it and `getfacl` must
//! read the inherited ACLs back as the library wrote them.

mod rw_support;

use rw_support::{fsck_clean, have, kernel_unavailable, mkfs, KernelMount};
use std::path::Path;
use std::process::Command;
use uext4::inode_api::{Cred, SetAttr, XattrSetMode};
use uext4::Filesystem;

const S_IFMT: u16 = 0o170000;

/// An ACL in the `posix_acl_xattr` form (tag, perm, id; ids only for the
/// named entries).
fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

const U: u32 = u32::MAX;

fn mode(fs: &Filesystem, ino: u32) -> u16 {
    fs.stat(ino).expect("stat").mode & !S_IFMT
}

fn nobody() -> Cred {
    Cred::user(65534, 65534, Vec::new())
}

fn fresh() -> Option<(tempfile::TempDir, std::path::PathBuf, Filesystem)> {
    let (dir, img) = mkfs(32, &["-b", "4096", "-I", "256"])?;
    let fs = Filesystem::open_rw(&img).expect("open_rw");
    Some((dir, img, fs))
}

fn finish(mut fs: Filesystem, img: &Path) {
    fs.unmount().expect("unmount");
    drop(fs);
    fsck_clean(img);
}

#[test]
fn setgid_directories_and_stripping() {
    let Some((_d, img, fs)) = fresh() else { return };
    let root = fs.root();
    let sg = fs.mkdir(root, b"sg", 0o777, 0, 4242).expect("mkdir").ino;
    fs.setattr(sg, SetAttr { mode: Some(0o2777), ..Default::default() }).expect("chmod");
    let n = nobody();
    // The group of the directory; a new directory is set-group-ID too.
    let a = fs.create_as(sg, b"a", 0o666, 0o022, &n).expect("create");
    assert_eq!((a.mode & !S_IFMT, a.uid, a.gid), (0o644, 65534, 4242));
    let d = fs.mkdir_as(sg, b"d", 0o777, 0o022, &n).expect("mkdir");
    assert_eq!((d.mode & !S_IFMT, d.gid), (0o2755, 4242));
    let e = fs.mkdir_as(d.ino, b"e", 0o775, 0o022, &n).expect("mkdir");
    assert_eq!((e.mode & !S_IFMT, e.gid), (0o2755, 4242));
    // A set-group-ID file by a caller outside the group loses the bit;
    // a member (supplementary group) or root keeps it.
    let s = fs.create_as(sg, b"s", 0o2755, 0o022, &n).expect("create");
    assert_eq!((s.mode & !S_IFMT, s.gid), (0o755, 4242));
    let member = Cred::user(65534, 65534, vec![4242]);
    let t = fs.create_as(sg, b"t", 0o2755, 0o022, &member).expect("create");
    assert_eq!(t.mode & !S_IFMT, 0o2755);
    let r = fs.create_as(sg, b"r", 0o2755, 0o022, &Cred::root()).expect("create");
    assert_eq!((r.mode & !S_IFMT, r.uid, r.gid), (0o2755, 0, 4242));
    let l = fs.symlink_as(sg, b"l", b"a", &n).expect("symlink");
    assert_eq!((l.uid, l.gid), (65534, 4242));
    // Outside a set-group-ID directory: the caller's group, umask applied.
    let p = fs.create_as(root, b"p", 0o2777, 0o027, &n).expect("create");
    assert_eq!((p.mode & !S_IFMT, p.gid), (0o2750, 65534));
    // The plain methods stay exact.
    let x = fs.create(sg, b"x", 0o2755, 7, 8).expect("create");
    assert_eq!((x.mode & !S_IFMT, x.uid, x.gid), (0o2755, 7, 8));
    finish(fs, &img);
}

#[test]
fn writes_truncates_and_chown_remove_setid() {
    let Some((_d, img, fs)) = fresh() else { return };
    let root = fs.root();
    let mk = |name: &[u8], m: u16, gid: u32| {
        let ino = fs.create(root, name, 0o644, 0, gid).expect("create").ino;
        fs.setattr(ino, SetAttr { mode: Some(m), ..Default::default() }).expect("chmod");
        ino
    };
    let n = nobody();
    let f1 = mk(b"f1", 0o6777, 0);
    assert!(fs.remove_privs(f1, &n).expect("kill"));
    assert_eq!(mode(&fs, f1), 0o777);
    // Set-group-ID without group-execute: kept for a member of the
    // file's group, removed for anyone else (setattr_should_drop_sgid).
    let f2 = mk(b"f2", 0o6767, 0);
    fs.remove_privs(f2, &n).expect("kill");
    assert_eq!(mode(&fs, f2), 0o767);
    let f3 = mk(b"f3", 0o6767, 4242);
    fs.remove_privs(f3, &Cred::user(65534, 65534, vec![4242])).expect("kill");
    assert_eq!(mode(&fs, f3), 0o2767);
    // CAP_FSETID keeps everything; directories never lose anything.
    let f4 = mk(b"f4", 0o6777, 0);
    assert!(!fs.remove_privs(f4, &Cred::root()).expect("kill"));
    assert_eq!(mode(&fs, f4), 0o6777);
    let dir = fs.mkdir(root, b"dir", 0o2777, 0, 0).expect("mkdir").ino;
    assert!(!fs.remove_privs(dir, &n).expect("kill"));
    // A write after the kill: the data is there, the mode stays cleared.
    fs.inodes().write(f1, 0, b"data").expect("write");
    assert_eq!(mode(&fs, f1), 0o777);
    // chown: both bits (set-group-ID only with group-execute), even by
    // root; not when the same call sets the mode; not on directories.
    let c1 = mk(b"c1", 0o6755, 0);
    fs.setattr(c1, SetAttr { uid: Some(65534), ..Default::default() }).expect("chown");
    assert_eq!(mode(&fs, c1), 0o755);
    let c2 = mk(b"c2", 0o2745, 0);
    fs.setattr(c2, SetAttr { gid: Some(100), ..Default::default() }).expect("chgrp");
    assert_eq!(mode(&fs, c2), 0o2745);
    let c3 = mk(b"c3", 0o6755, 0);
    fs.setattr(c3, SetAttr { uid: Some(1), mode: Some(0o4755), ..Default::default() }).expect("chown");
    assert_eq!(mode(&fs, c3), 0o4755);
    fs.setattr(dir, SetAttr { uid: Some(1), ..Default::default() }).expect("chown");
    assert_eq!(mode(&fs, dir), 0o2777);
    finish(fs, &img);
}

/// `setattr_as`: the caller decides what a chown, a truncate or a chmod
/// clears, as notify_change and setattr_prepare do on ext4.
#[test]
fn chown_truncate_and_chmod_by_a_caller() {
    let Some((_d, img, fs)) = fresh() else { return };
    let root = fs.root();
    let mk = |name: &[u8], m: u16, gid: u32| {
        let ino = fs.create(root, name, 0o644, 65534, gid).expect("create").ino;
        fs.setattr(ino, SetAttr { mode: Some(m), ..Default::default() }).expect("chmod");
        ino
    };
    let n = nobody();
    let member = Cred::user(65534, 65534, vec![4242]);
    // Set-group-ID without group-execute: a chgrp by a caller outside
    // the file's (old) group clears it, root's or a member's keeps it.
    let a = mk(b"a", 0o2745, 0);
    fs.setattr_as(a, SetAttr { gid: Some(4242), ..Default::default() }, &member).expect("chgrp");
    assert_eq!(mode(&fs, a), 0o745);
    let b = mk(b"b", 0o2745, 4242);
    fs.setattr_as(b, SetAttr { uid: Some(65534), ..Default::default() }, &member).expect("chown");
    assert_eq!(mode(&fs, b), 0o2745);
    let c = mk(b"c", 0o6745, 0);
    fs.setattr_as(c, SetAttr { uid: Some(65534), ..Default::default() }, &Cred::root()).expect("chown");
    assert_eq!(mode(&fs, c), 0o2745, "root: set-user-ID goes, set-group-ID without g+x stays");
    // chown(f, -1, -1) by the owner: the current owner as the new one.
    let d = mk(b"d", 0o6745, 0);
    fs.setattr_as(d, SetAttr { uid: Some(65534), ..Default::default() }, &n).expect("chown");
    assert_eq!(mode(&fs, d), 0o745);
    // Truncate: what a write removes, nothing with CAP_FSETID.
    let e = mk(b"e", 0o6777, 0);
    fs.setattr_as(e, SetAttr { size: Some(1), ..Default::default() }, &n).expect("truncate");
    assert_eq!((mode(&fs, e), fs.stat(e).expect("stat").size), (0o777, 1));
    let f = mk(b"f", 0o6777, 0);
    fs.setattr_as(f, SetAttr { size: Some(0), ..Default::default() }, &Cred::root()).expect("truncate");
    assert_eq!(mode(&fs, f), 0o6777);
    // chmod g+s by a caller outside the group: the bit is not set.
    let g = mk(b"g", 0o755, 0);
    fs.setattr_as(g, SetAttr { mode: Some(0o2755), ..Default::default() }, &n).expect("chmod");
    assert_eq!(mode(&fs, g), 0o755);
    fs.setattr_as(g, SetAttr { mode: Some(0o2755), gid: Some(4242), ..Default::default() }, &member).expect("chmod");
    assert_eq!(mode(&fs, g), 0o2755);
    // Directories keep their bits on chown.
    let dir = fs.mkdir(root, b"dir", 0o6777, 65534, 0).expect("mkdir").ino;
    fs.setattr_as(dir, SetAttr { uid: Some(65534), ..Default::default() }, &n).expect("chown");
    assert_eq!(mode(&fs, dir), 0o6777);
    finish(fs, &img);
}

/// `setattr_as_lazily`: the same rules as `setattr_as`, with the caller's
/// credentials built only when a rule depends on them (set-id bits on the
/// file, or set-group-ID in the new mode).
#[test]
fn credentials_are_built_only_when_a_rule_needs_them() {
    let Some((_d, img, fs)) = fresh() else { return };
    let root = fs.root();
    let built = std::cell::Cell::new(0);
    let n = || {
        built.set(built.get() + 1);
        nobody()
    };
    let plain = fs.create(root, b"plain", 0o644, 65534, 0).expect("create").ino;
    fs.setattr_as_lazily(plain, SetAttr { uid: Some(65534), gid: Some(0), ..Default::default() }, &n).expect("chown");
    fs.setattr_as_lazily(plain, SetAttr { size: Some(10), ..Default::default() }, &n).expect("truncate");
    assert_eq!(built.get(), 0, "no set-id bits: root's answer, no credentials");
    assert_eq!((mode(&fs, plain), fs.stat(plain).expect("stat").size), (0o644, 10));
    let s = fs.create(root, b"s", 0o644, 65534, 0).expect("create").ino;
    fs.setattr(s, SetAttr { mode: Some(0o6777), ..Default::default() }).expect("chmod");
    fs.setattr_as_lazily(s, SetAttr { size: Some(1), ..Default::default() }, &n).expect("truncate");
    assert_eq!((built.get(), mode(&fs, s)), (1, 0o777), "truncate by nobody removes both bits");
    fs.setattr_as_lazily(s, SetAttr { mode: Some(0o2755), ..Default::default() }, &n).expect("chmod");
    assert_eq!((built.get(), mode(&fs, s)), (2, 0o755), "chmod g+s outside the group");
    finish(fs, &img);
}

#[test]
fn default_acls_are_inherited() {
    let Some((_d, img, fs)) = fresh() else { return };
    let root = fs.root();
    let dacl = fs.mkdir(root, b"dacl", 0o777, 0, 0).expect("mkdir").ino;
    let default = acl(&[(0x01, 7, U), (0x02, 7, 65534), (0x04, 5, U), (0x08, 4, 4242), (0x10, 7, U), (0x20, 0, U)]);
    fs.set_xattr(dacl, b"system.posix_acl_default", &default, XattrSetMode::Any).expect("setfacl -d");
    let n = nobody();
    // The umask is not applied; the mode and the mask come from the
    // create mode and the default ACL.
    let f = fs.create_as(dacl, b"f", 0o666, 0o077, &n).expect("create");
    assert_eq!(f.mode & !S_IFMT, 0o660);
    let want_f = acl(&[(0x01, 6, U), (0x02, 7, 65534), (0x04, 5, U), (0x08, 4, 4242), (0x10, 6, U), (0x20, 0, U)]);
    assert_eq!(fs.get_xattr(f.ino, b"system.posix_acl_access").expect("acl"), want_f);
    assert!(fs.get_xattr(f.ino, b"system.posix_acl_default").is_err(), "a file has no default ACL");
    // A directory gets the default ACL as its own too.
    let d = fs.mkdir_as(dacl, b"d", 0o750, 0o077, &n).expect("mkdir");
    assert_eq!(d.mode & !S_IFMT, 0o750);
    let want_d = acl(&[(0x01, 7, U), (0x02, 7, 65534), (0x04, 5, U), (0x08, 4, 4242), (0x10, 5, U), (0x20, 0, U)]);
    assert_eq!(fs.get_xattr(d.ino, b"system.posix_acl_access").expect("acl"), want_d);
    assert_eq!(fs.get_xattr(d.ino, b"system.posix_acl_default").expect("default"), default);
    // A minimal default ACL: no access ACL stored, the mode says it all.
    let plain = fs.mkdir(root, b"plain", 0o777, 0, 0).expect("mkdir").ino;
    let minimal = acl(&[(0x01, 7, U), (0x04, 5, U), (0x20, 1, U)]);
    fs.set_xattr(plain, b"system.posix_acl_default", &minimal, XattrSetMode::Any).expect("setfacl -d");
    let g = fs.create_as(plain, b"g", 0o777, 0o077, &n).expect("create");
    assert_eq!(g.mode & !S_IFMT, 0o751);
    assert!(fs.get_xattr(g.ino, b"system.posix_acl_access").is_err());
    // chmod: the owner, mask and other entries follow the mode.
    fs.setattr(f.ino, SetAttr { mode: Some(0o640), ..Default::default() }).expect("chmod");
    let want_chmod = acl(&[(0x01, 6, U), (0x02, 7, 65534), (0x04, 5, U), (0x08, 4, 4242), (0x10, 4, U), (0x20, 0, U)]);
    assert_eq!(fs.get_xattr(f.ino, b"system.posix_acl_access").expect("acl"), want_chmod);
    finish(fs, &img);
    kernel_getfacl(&img);
}

/// As root with a loop device and getfacl: the kernel reads the inherited
/// ACLs back as the library stored them.
fn kernel_getfacl(img: &Path) {
    if let Some(r) = kernel_unavailable() {
        println!("SKIP: kernel getfacl: {r}");
        return;
    }
    if !have("getfacl") {
        println!("SKIP: kernel getfacl: getfacl not found (install acl)");
        return;
    }
    let m = KernelMount::new(img, "ro").expect("kernel mount");
    let out = Command::new("getfacl").args(["-n", "-c"]).arg(m.path().join("dacl/d")).output().expect("getfacl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let want = "user::rwx\nuser:65534:rwx\t#effective:r-x\ngroup::r-x\ngroup:4242:r--\nmask::r-x\nother::---\n\
                default:user::rwx\ndefault:user:65534:rwx\ndefault:group::r-x\ndefault:group:4242:r--\n\
                default:mask::rwx\ndefault:other::---\n";
    assert_eq!(text.trim_end(), want.trim_end(), "getfacl dacl/d through the kernel");
    let st = std::fs::metadata(m.path().join("dacl/f")).expect("stat");
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&st.permissions()) & 0o7777, 0o640);
    m.unmount();
}
