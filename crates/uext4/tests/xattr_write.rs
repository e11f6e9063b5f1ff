//! Extended attribute writes through the library API (`set_xattr`,
//! `remove_xattr`): in-inode placement, spilling into the xattr block,
//! create/replace semantics, removal down to nothing, POSIX ACLs, copy on
//! write of blocks the kernel shares between inodes, and the errno of each
//! refusal. Every image ends `e2fsck -fn` clean and, as root, is mounted
//! by the kernel, which must read back exactly what was set.

mod rw_support;

use rw_support::pattern;

use rw_support::{fsck_clean, mkfs, KernelMount};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use uext4::inode_api::XattrSetMode;
use uext4::Filesystem;

/// mkfs variants: block size 1k/4k, with and without metadata_csum, and
/// without a journal (changes written through).
const VARIANTS: &[&[&str]] = &[
    &["-b", "1024", "-I", "256"],
    &["-b", "4096", "-I", "256"],
    &["-b", "1024", "-I", "256", "-O", "^metadata_csum"],
    &["-b", "4096", "-I", "256", "-O", "^metadata_csum"],
    &["-b", "4096", "-I", "256", "-O", "^has_journal"],
];

/// Expected attributes per path.
type Expect = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

fn errno<T: std::fmt::Debug>(r: uext4::Result<T>) -> i32 {
    r.expect_err("expected an error").errno()
}

/// Checks every expected attribute (and that no other exists) through
/// uext4.
fn check_uext4(fs: &Filesystem, want: &Expect) {
    for (path, attrs) in want {
        let ino = fs.resolve(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut names = fs.list_xattrs(ino).unwrap();
        names.sort();
        let mut expect_names: Vec<Vec<u8>> = attrs.keys().cloned().collect();
        expect_names.sort();
        assert_eq!(names, expect_names, "{path}: attribute names");
        for (n, v) in attrs {
            assert_eq!(&fs.get_xattr(ino, n).unwrap(), v, "{path}: {}", String::from_utf8_lossy(n));
        }
    }
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// lgetxattr(2) of the kernel.
fn k_get(p: &Path, name: &[u8]) -> Option<Vec<u8>> {
    let path = cpath(p);
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 70_000];
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let r = unsafe { libc::lgetxattr(path.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return None;
    }
    buf.truncate(r as usize);
    Some(buf)
}

/// llistxattr(2) of the kernel.
fn k_list(p: &Path) -> Vec<Vec<u8>> {
    let path = cpath(p);
    let mut buf = vec![0u8; 70_000];
    // SAFETY: valid NUL-terminated string and a buffer of the given length.
    let r = unsafe { libc::llistxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r >= 0, "llistxattr {}: {}", p.display(), std::io::Error::last_os_error());
    buf.truncate(r as usize);
    buf.split(|&c| c == 0).filter(|s| !s.is_empty()).map(|s| s.to_vec()).collect()
}

/// lsetxattr(2) of the kernel.
fn k_set(p: &Path, name: &[u8], value: &[u8]) {
    let path = cpath(p);
    let n = CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings and a value of the given length.
    let r = unsafe { libc::lsetxattr(path.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert!(r == 0, "lsetxattr {}: {}", p.display(), std::io::Error::last_os_error());
}

/// Mounts `img` with the kernel; None (with the printed reason) when
/// loop mounts are missing here.
fn kernel_mount(img: &Path) -> Option<KernelMount> {
    if !rw_support::require_loop_mount() {
        return None;
    }
    Some(KernelMount::new(img, "").unwrap_or_else(|e| panic!("kernel refused to mount {}: {e}", img.display())))
}

/// e2fsck -fn, then (as root) the kernel's view of every expected
/// attribute, then e2fsck again (the mount must not have had to fix
/// anything either).
fn check_all(img: &Path, want: &Expect) {
    fsck_clean(img);
    check_uext4(&Filesystem::open(img).unwrap(), want);
    let Some(mnt) = kernel_mount(img) else { return };
    for (path, attrs) in want {
        let p = mnt.path().join(&path[1..]);
        let mut names = k_list(&p);
        // The kernel lists ACLs and security labels too; compare ours.
        names.sort();
        let mut expect_names: Vec<Vec<u8>> = attrs.keys().cloned().collect();
        expect_names.sort();
        assert_eq!(names, expect_names, "kernel: {path}: attribute names");
        for (n, v) in attrs {
            let got = k_get(&p, n).unwrap_or_else(|| {
                panic!("kernel: {path}: {}: {}", String::from_utf8_lossy(n), std::io::Error::last_os_error())
            });
            assert!(&got == v, "kernel: {path}: {} differs", String::from_utf8_lossy(n));
        }
    }
    mnt.unmount();
    fsck_clean(img);
}

/// The raw bytes of block `blk` of `img`.
fn read_block(img: &Path, blk: u64, bs: u64) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(img).unwrap();
    let mut b = vec![0u8; bs as usize];
    f.read_exact_at(&mut b, blk * bs).unwrap();
    b
}

fn refcount(img: &Path, blk: u64, bs: u64) -> u32 {
    let b = read_block(img, blk, bs);
    u32::from_le_bytes([b[4], b[5], b[6], b[7]])
}

fn new_file(fs: &Filesystem, name: &str) -> u32 {
    fs.create(fs.root(), name.as_bytes(), 0o644, 0, 0).unwrap().ino
}

#[test]
fn small_attributes_stay_in_the_inode() {
    for args in VARIANTS {
        let Some((_d, img)) = mkfs(32, args) else { return };
        let mut want = Expect::new();
        {
            let mut fs = Filesystem::open_rw(&img).unwrap();
            let ino = new_file(&fs, "f");
            let d = fs.mkdir(fs.root(), b"d", 0o755, 0, 0).unwrap().ino;
            let ctime0 = fs.stat(ino).unwrap().ctime;
            std::thread::sleep(std::time::Duration::from_millis(5));
            let mut f = BTreeMap::new();
            // 24 + 28 + 20 bytes of the 88 a 256-byte inode has (extra
            // size 32, magic and terminator).
            for (n, v) in [(&b"user.a"[..], &b"1"[..]), (b"user.bb", b"hello"), (b"trusted.t", b"")] {
                fs.set_xattr(ino, n, v, XattrSetMode::Any).unwrap();
                f.insert(n.to_vec(), v.to_vec());
            }
            fs.set_xattr(d, b"user.dir", b"on a directory", XattrSetMode::Create).unwrap();
            fs.set_xattr(d, b"security.s", b"xyz", XattrSetMode::Create).unwrap();
            assert_eq!(fs.stat(d).unwrap().file_acl, 0, "{args:?}");
            let st = fs.stat(ino).unwrap();
            assert_eq!(st.file_acl, 0, "{args:?}: small attributes must not need a block");
            assert_eq!(st.blocks, 0, "{args:?}");
            assert!(st.ctime > ctime0, "{args:?}: ctime must change");
            // Same value again: nothing changes, not even ctime.
            fs.set_xattr(ino, b"user.a", b"1", XattrSetMode::Any).unwrap();
            assert_eq!(fs.stat(ino).unwrap().ctime, st.ctime, "{args:?}");
            want.insert("/f".into(), f);
            want.insert(
                "/d".into(),
                BTreeMap::from([
                    (b"user.dir".to_vec(), b"on a directory".to_vec()),
                    (b"security.s".to_vec(), b"xyz".to_vec()),
                ]),
            );
            check_uext4(&fs, &want);
            fs.unmount().unwrap();
        }
        check_all(&img, &want);
    }
}

#[test]
fn many_and_large_attributes_spill_into_the_block() {
    for args in VARIANTS {
        let Some((_d, img)) = mkfs(32, args) else { return };
        let bs: usize = if args.contains(&"1024") { 1024 } else { 4096 };
        let mut want = Expect::new();
        {
            let mut fs = Filesystem::open_rw(&img).unwrap();
            let free0 = fs.statfs().free_blocks;
            let ino = new_file(&fs, "many");
            let mut m = BTreeMap::new();
            // Descending names: the block must still end up sorted.
            for k in (0..12u64).rev() {
                let n = format!("user.attr{k:02}").into_bytes();
                let v = pattern(k, 40);
                fs.set_xattr(ino, &n, &v, XattrSetMode::Create).unwrap();
                m.insert(n, v);
            }
            let st = fs.stat(ino).unwrap();
            assert_ne!(st.file_acl, 0, "{args:?}: 12 x 40 bytes do not fit in a 256-byte inode");
            assert_eq!(st.blocks, bs as u64 / 512, "{args:?}");
            assert_eq!(fs.statfs().free_blocks, free0 - 1, "{args:?}");
            want.insert("/many".into(), m);

            // One value about as large as a block allows.
            let big = new_file(&fs, "big");
            let name = b"user.big";
            // Block header, terminator, the entry (16 bytes + "big", padded).
            let max = bs - 32 - 4 - uext4::format::xattr::entry_len(3);
            let v = pattern(7, max);
            fs.set_xattr(big, name, &v, XattrSetMode::Any).unwrap();
            // Nothing more fits: not another attribute, not a larger value.
            assert_eq!(errno(fs.set_xattr(big, b"user.more", &pattern(8, 80), XattrSetMode::Any)), libc::ENOSPC);
            assert_eq!(errno(fs.set_xattr(big, name, &pattern(9, max + 4), XattrSetMode::Any)), libc::ENOSPC);
            // Larger than any block, and beyond the VFS limit.
            let other = new_file(&fs, "other");
            assert_eq!(errno(fs.set_xattr(other, name, &pattern(1, bs), XattrSetMode::Any)), libc::ENOSPC);
            assert_eq!(errno(fs.set_xattr(other, name, &vec![0; 65537], XattrSetMode::Any)), libc::ENOSPC);
            assert_eq!(fs.stat(other).unwrap().file_acl, 0, "{args:?}: a failed set leaves no block behind");
            want.insert("/big".into(), BTreeMap::from([(name.to_vec(), v)]));
            want.insert("/other".into(), BTreeMap::new());
            check_uext4(&fs, &want);
            fs.unmount().unwrap();
        }
        // The block is sorted by (index, name length, name).
        let fs = Filesystem::open(&img).unwrap();
        let st = fs.stat(fs.resolve("/many").unwrap()).unwrap();
        let b = read_block(&img, st.file_acl, bs as u64);
        let (_, entries) = uext4::format::xattr::parse_block_raw(&b, st.file_acl, None).unwrap();
        let keys: Vec<_> = entries.iter().map(|e| (e.index, e.name.len(), e.name.clone())).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted, "{args:?}");
        drop(fs);
        check_all(&img, &want);
    }
}

#[test]
fn replace_create_and_remove_until_empty() {
    for args in VARIANTS {
        let Some((_d, img)) = mkfs(32, args) else { return };
        let bs: u64 = if args.contains(&"1024") { 1024 } else { 4096 };
        let mut want = Expect::new();
        {
            let mut fs = Filesystem::open_rw(&img).unwrap();
            let free0 = fs.statfs().free_blocks;
            let ino = new_file(&fs, "f");
            // Modes.
            assert_eq!(errno(fs.set_xattr(ino, b"user.x", b"1", XattrSetMode::Replace)), libc::ENODATA);
            fs.set_xattr(ino, b"user.x", b"1", XattrSetMode::Create).unwrap();
            assert_eq!(errno(fs.set_xattr(ino, b"user.x", b"2", XattrSetMode::Create)), libc::EEXIST);
            fs.set_xattr(ino, b"user.x", b"22", XattrSetMode::Replace).unwrap();
            assert_eq!(fs.get_xattr(ino, b"user.x").unwrap(), b"22");
            // Grow past the inode: moves into a block.
            let big = pattern(3, 300);
            fs.set_xattr(ino, b"user.x", &big, XattrSetMode::Replace).unwrap();
            assert_ne!(fs.stat(ino).unwrap().file_acl, 0, "{args:?}");
            assert_eq!(fs.get_xattr(ino, b"user.x").unwrap(), big);
            // Shrink again: back into the inode; the empty block is freed.
            fs.set_xattr(ino, b"user.x", b"small", XattrSetMode::Any).unwrap();
            let st = fs.stat(ino).unwrap();
            assert_eq!((st.file_acl, st.blocks), (0, 0), "{args:?}");
            assert_eq!(fs.statfs().free_blocks, free0, "{args:?}");
            // Fill inode and block, then remove everything.
            let mut names = Vec::new();
            for k in 0..10u64 {
                let n = format!("user.k{k}").into_bytes();
                fs.set_xattr(ino, &n, &pattern(k, 60), XattrSetMode::Create).unwrap();
                names.push(n);
            }
            names.push(b"user.x".to_vec());
            let st = fs.stat(ino).unwrap();
            assert_ne!(st.file_acl, 0);
            assert_eq!(st.blocks, bs / 512);
            for n in &names {
                fs.remove_xattr(ino, n).unwrap();
                assert_eq!(errno(fs.get_xattr(ino, n)), libc::ENODATA);
            }
            assert_eq!(errno(fs.remove_xattr(ino, b"user.x")), libc::ENODATA);
            let st = fs.stat(ino).unwrap();
            assert_eq!((st.file_acl, st.blocks), (0, 0), "{args:?}: empty file back to no blocks");
            assert!(fs.list_xattrs(ino).unwrap().is_empty());
            assert_eq!(fs.statfs().free_blocks, free0, "{args:?}: the block was freed");
            // A second file keeps a mix, for the kernel to read.
            let g = new_file(&fs, "g");
            let mut m = BTreeMap::new();
            for k in 0..8u64 {
                let n = format!("user.keep{k}").into_bytes();
                let v = pattern(100 + k, 20 + 12 * k as usize);
                fs.set_xattr(g, &n, &v, XattrSetMode::Any).unwrap();
                m.insert(n, v);
            }
            for k in [1u64, 4, 6] {
                let n = format!("user.keep{k}").into_bytes();
                fs.remove_xattr(g, &n).unwrap();
                m.remove(&n);
            }
            let v = pattern(5, 33);
            fs.set_xattr(g, b"user.keep2", &v, XattrSetMode::Replace).unwrap();
            m.insert(b"user.keep2".to_vec(), v);
            want.insert("/f".into(), BTreeMap::new());
            want.insert("/g".into(), m);
            check_uext4(&fs, &want);
            fs.unmount().unwrap();
        }
        check_all(&img, &want);
    }
}

#[test]
fn no_in_inode_space_with_128_byte_inodes() {
    let Some((_d, img)) = mkfs(32, &["-b", "1024", "-I", "128"]) else { return };
    let mut want = Expect::new();
    {
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let ino = new_file(&fs, "f");
        fs.set_xattr(ino, b"user.a", b"b", XattrSetMode::Any).unwrap();
        assert_ne!(fs.stat(ino).unwrap().file_acl, 0, "128-byte inodes keep attributes in the block");
        want.insert("/f".into(), BTreeMap::from([(b"user.a".to_vec(), b"b".to_vec())]));
        fs.unmount().unwrap();
    }
    check_all(&img, &want);
}

#[test]
fn ext_attr_feature_is_set_on_first_write() {
    let Some((_d, img)) = mkfs(32, &["-b", "4096", "-O", "^ext_attr"]) else { return };
    let mut want = Expect::new();
    {
        let mut fs = Filesystem::open_rw(&img).unwrap();
        assert!(!fs.superblock().features.has_compat(uext4::format::features::compat::EXT_ATTR));
        let ino = new_file(&fs, "f");
        fs.set_xattr(ino, b"user.a", &pattern(1, 500), XattrSetMode::Any).unwrap();
        want.insert("/f".into(), BTreeMap::from([(b"user.a".to_vec(), pattern(1, 500))]));
        fs.unmount().unwrap();
    }
    let fs = Filesystem::open(&img).unwrap();
    assert!(fs.superblock().features.has_compat(uext4::format::features::compat::EXT_ATTR));
    drop(fs);
    check_all(&img, &want);
}

#[test]
fn refusals_and_their_errno() {
    let Some((_d, img)) = mkfs(32, &["-b", "4096"]) else { return };
    {
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let f = new_file(&fs, "f");
        let l = fs.inodes().symlink(fs.root(), b"l", b"f", 0, 0).unwrap().ino;
        let fifo = fs.mknod(fs.root(), b"p", 0o010644, (0, 0), 0, 0).unwrap().ino;
        let any = XattrSetMode::Any;
        assert_eq!(errno(fs.set_xattr(f, b"", b"v", any)), libc::ERANGE);
        let long = [b"user.".to_vec(), vec![b'n'; 251]].concat();
        assert_eq!(errno(fs.set_xattr(f, &long, b"v", any)), libc::ERANGE);
        assert_eq!(errno(fs.remove_xattr(f, &long)), libc::ERANGE);
        // 255 bytes in all is allowed (and then needs a block).
        fs.set_xattr(f, &long[..255], b"v", any).unwrap();
        assert_eq!(fs.get_xattr(f, &long[..255]).unwrap(), b"v");
        fs.remove_xattr(f, &long[..255]).unwrap();
        assert_eq!(errno(fs.set_xattr(f, b"system.data", b"v", any)), libc::EOPNOTSUPP);
        assert_eq!(errno(fs.set_xattr(f, b"system.foo", b"v", any)), libc::EOPNOTSUPP);
        assert_eq!(errno(fs.set_xattr(f, b"foo.bar", b"v", any)), libc::EOPNOTSUPP);
        assert_eq!(errno(fs.set_xattr(f, b"user.", b"v", any)), libc::EINVAL);
        assert_eq!(errno(fs.remove_xattr(f, b"system.data")), libc::EOPNOTSUPP);
        assert_eq!(errno(fs.remove_xattr(f, b"user.none")), libc::ENODATA);
        // user.* only on regular files and directories.
        assert_eq!(errno(fs.set_xattr(l, b"user.a", b"v", any)), libc::EPERM);
        assert_eq!(errno(fs.set_xattr(fifo, b"user.a", b"v", any)), libc::EPERM);
        // Other namespaces are fine there.
        fs.set_xattr(l, b"trusted.a", b"on a symlink", any).unwrap();
        fs.set_xattr(fifo, b"security.a", b"on a fifo", any).unwrap();
        // ACLs: malformed, wrong version, on a symlink, default on a file.
        assert_eq!(errno(fs.set_xattr(f, b"system.posix_acl_access", b"\x02\0\0\0\x01", any)), libc::EINVAL);
        assert_eq!(errno(fs.set_xattr(f, b"system.posix_acl_access", &acl(1, &[]), any)), libc::EOPNOTSUPP);
        let bad_order = acl(2, &[(OTHER, 4, U), (USER_OBJ, 6, U), (GROUP_OBJ, 4, U)]);
        assert_eq!(errno(fs.set_xattr(f, b"system.posix_acl_access", &bad_order, any)), libc::EINVAL);
        let no_mask = acl(2, &[(USER_OBJ, 6, U), (USER, 6, 1000), (GROUP_OBJ, 4, U), (OTHER, 4, U)]);
        assert_eq!(errno(fs.set_xattr(f, b"system.posix_acl_access", &no_mask, any)), libc::EINVAL);
        let good = acl(2, &[(USER_OBJ, 6, U), (GROUP_OBJ, 4, U), (OTHER, 4, U)]);
        assert_eq!(errno(fs.set_xattr(l, b"system.posix_acl_access", &good, any)), libc::EOPNOTSUPP);
        assert_eq!(errno(fs.set_xattr(f, b"system.posix_acl_default", &good, any)), libc::EACCES);
        // An unknown inode.
        assert!(fs.set_xattr(999_999, b"user.a", b"v", any).is_err());
        fs.unmount().unwrap();
    }
    // Read-only.
    let fs = Filesystem::open(&img).unwrap();
    let f = fs.resolve("/f").unwrap();
    assert_eq!(errno(fs.set_xattr(f, b"user.a", b"v", XattrSetMode::Any)), libc::EROFS);
    assert_eq!(errno(fs.remove_xattr(f, b"user.a")), libc::EROFS);
    drop(fs);
    let want = Expect::from([
        ("/f".to_string(), BTreeMap::new()),
        ("/l".to_string(), BTreeMap::from([(b"trusted.a".to_vec(), b"on a symlink".to_vec())])),
        ("/p".to_string(), BTreeMap::from([(b"security.a".to_vec(), b"on a fifo".to_vec())])),
    ]);
    check_all(&img, &want);
}

const USER_OBJ: u16 = 1;
const USER: u16 = 2;
const GROUP_OBJ: u16 = 4;
const GROUP: u16 = 8;
const MASK: u16 = 0x10;
const OTHER: u16 = 0x20;
/// ACL_UNDEFINED_ID.
const U: u32 = u32::MAX;

/// An ACL in the `posix_acl_xattr` form.
fn acl(version: u32, entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = version.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

#[test]
fn posix_acl_round_trip() {
    for args in [&["-b", "1024", "-I", "256"][..], &["-b", "4096", "-I", "256", "-O", "^metadata_csum"]] {
        let Some((_d, img)) = mkfs(32, args) else { return };
        let access = acl(
            2,
            &[
                (USER_OBJ, 6, U),
                (USER, 7, 1000),
                (USER, 4, 1001),
                (GROUP_OBJ, 4, U),
                (GROUP, 6, 50),
                (MASK, 5, U),
                (OTHER, 0, U),
            ],
        );
        let default = acl(2, &[(USER_OBJ, 7, U), (GROUP_OBJ, 5, U), (GROUP, 7, 100), (MASK, 7, U), (OTHER, 5, U)]);
        let mut want = Expect::new();
        {
            let mut fs = Filesystem::open_rw(&img).unwrap();
            let f = new_file(&fs, "f");
            let d = fs.mkdir(fs.root(), b"d", 0o755, 0, 0).unwrap().ino;
            // The kernel ignores XATTR_REPLACE for ACLs.
            fs.set_xattr(f, b"system.posix_acl_access", &access, XattrSetMode::Replace).unwrap();
            assert_eq!(fs.get_xattr(f, b"system.posix_acl_access").unwrap(), access, "{args:?}");
            // The mode follows the ACL: owner rw-, group = mask r-x, other ---.
            assert_eq!(fs.stat(f).unwrap().mode & 0o7777, 0o650, "{args:?}");
            fs.set_xattr(d, b"system.posix_acl_default", &default, XattrSetMode::Create).unwrap();
            assert_eq!(fs.get_xattr(d, b"system.posix_acl_default").unwrap(), default);
            // An ACL the mode expresses is not stored; the mode changes.
            let g = new_file(&fs, "g");
            let plain = acl(2, &[(USER_OBJ, 7, U), (GROUP_OBJ, 0, U), (OTHER, 1, U)]);
            fs.set_xattr(g, b"system.posix_acl_access", &plain, XattrSetMode::Any).unwrap();
            assert_eq!(errno(fs.get_xattr(g, b"system.posix_acl_access")), libc::ENODATA);
            assert_eq!(fs.stat(g).unwrap().mode & 0o7777, 0o701);
            // Removing a missing ACL is not an error (the kernel sets "none").
            fs.remove_xattr(g, b"system.posix_acl_access").unwrap();
            // Removing one that exists.
            let h = new_file(&fs, "h");
            fs.set_xattr(h, b"system.posix_acl_access", &access, XattrSetMode::Any).unwrap();
            fs.remove_xattr(h, b"system.posix_acl_access").unwrap();
            assert_eq!(errno(fs.get_xattr(h, b"system.posix_acl_access")), libc::ENODATA);
            want.insert("/f".into(), BTreeMap::from([(b"system.posix_acl_access".to_vec(), access.clone())]));
            want.insert("/d".into(), BTreeMap::from([(b"system.posix_acl_default".to_vec(), default.clone())]));
            want.insert("/g".into(), BTreeMap::new());
            want.insert("/h".into(), BTreeMap::new());
            fs.unmount().unwrap();
        }
        check_all(&img, &want);
        if let Some(mnt) = kernel_mount(&img) {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(mnt.path().join("f")).unwrap().permissions().mode();
            assert_eq!(mode & 0o7777, 0o650, "kernel sees the mode the ACL set");
            // A file created in the directory inherits the default ACL:
            // the kernel parsed what uext4 stored.
            let child = mnt.path().join("d/child");
            std::fs::write(&child, b"").unwrap();
            let inherited = k_get(&child, b"system.posix_acl_access").expect("inherited access ACL");
            assert_eq!(&inherited[..4], &2u32.to_le_bytes());
            assert!(inherited.len() == default.len(), "inherits the 5 entries");
            mnt.unmount();
            fsck_clean(&img);
        }
    }
}

/// Creates files sharing one xattr block through the kernel (identical
/// attribute sets too large for the inode: the kernel finds the first
/// block in its mbcache and takes another reference). Returns the paths
/// and the value, or None (with a printed reason) when not root.
fn kernel_shared_files(img: &Path, n: usize, value: &[u8]) -> Option<Vec<String>> {
    let mnt = kernel_mount(img)?;
    let mut names = Vec::new();
    for k in 0..n {
        let p: PathBuf = mnt.path().join(format!("s{k}"));
        std::fs::write(&p, b"").unwrap();
        k_set(&p, b"user.shared", value);
        k_set(&p, b"user.second", b"also shared");
        names.push(format!("/s{k}"));
    }
    mnt.unmount();
    Some(names)
}

#[test]
fn shared_block_is_copied_on_write() {
    for args in [&["-b", "1024", "-I", "256"][..], &["-b", "4096", "-I", "256", "-O", "^metadata_csum"]] {
        let Some((_d, img)) = mkfs(32, args) else { return };
        let bs: u64 = if args.contains(&"1024") { 1024 } else { 4096 };
        let old = pattern(42, 400);
        let Some(paths) = kernel_shared_files(&img, 3, &old) else { return };
        fsck_clean(&img);
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let inos: Vec<u32> = paths.iter().map(|p| fs.resolve(p).unwrap()).collect();
        let blk = fs.stat(inos[0]).unwrap().file_acl;
        assert_ne!(blk, 0);
        // Mounted without nombcache, the kernel shares identical blocks.
        assert!(inos.iter().all(|&i| fs.stat(i).unwrap().file_acl == blk), "the kernel did not share the block");
        assert_eq!(refcount(&img, blk, bs), 3, "{args:?}");
        let free0 = fs.statfs().free_blocks;

        // Change s0: it gets its own copy; s1 and s2 keep the old block.
        let new = pattern(43, 350);
        fs.set_xattr(inos[0], b"user.shared", &new, XattrSetMode::Replace).unwrap();
        let b0 = fs.stat(inos[0]).unwrap().file_acl;
        assert_ne!(b0, blk, "{args:?}: a shared block must not change in place");
        assert_eq!(fs.stat(inos[0]).unwrap().blocks, bs / 512, "one block replaced by another");
        assert_eq!(fs.statfs().free_blocks, free0 - 1);
        assert_eq!(fs.get_xattr(inos[1], b"user.shared").unwrap(), old);
        assert_eq!(fs.get_xattr(inos[2], b"user.shared").unwrap(), old);
        // Remove s1's large attribute: the rest fits in its inode, so its
        // block reference goes away; s2 is the last user and may change
        // the block in place.
        fs.remove_xattr(inos[1], b"user.shared").unwrap();
        let st1 = fs.stat(inos[1]).unwrap();
        assert_eq!((st1.file_acl, st1.blocks), (0, 0), "{args:?}");
        assert_eq!(fs.get_xattr(inos[1], b"user.second").unwrap(), b"also shared");
        let extra = pattern(44, 100);
        fs.set_xattr(inos[2], b"user.third", &extra, XattrSetMode::Create).unwrap();
        assert_eq!(fs.stat(inos[2]).unwrap().file_acl, blk, "last user rewrites in place");
        assert_eq!(fs.statfs().free_blocks, free0 - 1);
        fs.unmount().unwrap();
        drop(fs);
        assert_eq!(refcount(&img, blk, bs), 1);
        assert_eq!(refcount(&img, b0, bs), 1);
        let want = Expect::from([
            (
                "/s0".to_string(),
                BTreeMap::from([(b"user.shared".to_vec(), new), (b"user.second".to_vec(), b"also shared".to_vec())]),
            ),
            ("/s1".to_string(), BTreeMap::from([(b"user.second".to_vec(), b"also shared".to_vec())])),
            (
                "/s2".to_string(),
                BTreeMap::from([
                    (b"user.shared".to_vec(), old),
                    (b"user.second".to_vec(), b"also shared".to_vec()),
                    (b"user.third".to_vec(), extra),
                ]),
            ),
        ]);
        check_all(&img, &want);
    }
}

#[test]
fn concurrent_writers_on_a_shared_block() {
    let Some((_d, img)) = mkfs(32, &["-b", "1024", "-I", "256"]) else { return };
    let old = pattern(1, 500);
    let n = 8;
    let Some(paths) = kernel_shared_files(&img, n, &old) else { return };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let inos: Vec<u32> = paths.iter().map(|p| fs.resolve(p).unwrap()).collect();
    let blk = fs.stat(inos[0]).unwrap().file_acl;
    // Mounted without nombcache, the kernel shares identical blocks.
    assert!(inos.iter().all(|&i| fs.stat(i).unwrap().file_acl == blk), "the kernel did not share the block");
    let free0 = fs.statfs().free_blocks;
    // Every file changes its copy at once: each but the last to get there
    // copies; exactly one rewrites the original in place.
    std::thread::scope(|s| {
        for (k, &ino) in inos.iter().enumerate() {
            let fs = &fs;
            s.spawn(move || {
                fs.set_xattr(ino, b"user.shared", &pattern(100 + k as u64, 450), XattrSetMode::Any).unwrap();
            });
        }
    });
    let blocks: std::collections::BTreeSet<u64> = inos.iter().map(|&i| fs.stat(i).unwrap().file_acl).collect();
    assert_eq!(blocks.len(), n, "every file has its own block now");
    assert!(blocks.contains(&blk), "the original block is kept by one of them");
    assert_eq!(fs.statfs().free_blocks, free0 - (n as u64 - 1));
    fs.unmount().unwrap();
    drop(fs);
    let mut want = Expect::new();
    for (k, p) in paths.iter().enumerate() {
        want.insert(
            p.clone(),
            BTreeMap::from([
                (b"user.shared".to_vec(), pattern(100 + k as u64, 450)),
                (b"user.second".to_vec(), b"also shared".to_vec()),
            ]),
        );
    }
    check_all(&img, &want);
}

#[test]
fn corrupt_block_gives_an_error_not_a_panic() {
    let Some((_d, img)) = mkfs(32, &["-b", "1024", "-I", "256"]) else { return };
    let (ino, blk) = {
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let ino = new_file(&fs, "f");
        fs.set_xattr(ino, b"user.a", &pattern(1, 300), XattrSetMode::Any).unwrap();
        let blk = fs.stat(ino).unwrap().file_acl;
        fs.unmount().unwrap();
        (ino, blk)
    };
    // Point the single entry's value far past the end of the block.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
        f.write_all_at(&0xFFF0u16.to_le_bytes(), blk * 1024 + 32 + 2).unwrap();
    }
    let mut fs = Filesystem::open_rw(&img).unwrap();
    for r in [
        fs.set_xattr(ino, b"user.b", b"v", XattrSetMode::Any),
        fs.set_xattr(ino, b"user.a", b"v", XattrSetMode::Any),
        fs.remove_xattr(ino, b"user.a"),
    ] {
        let e = r.unwrap_err().errno();
        assert!(e == libc::EBADMSG || e == libc::EUCLEAN, "errno {e}");
    }
    fs.unmount().unwrap();
}
