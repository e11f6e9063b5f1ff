//! Shared helpers of the read-path integration tests.
//!
//! - a deterministic pseudo-random generator (xorshift64*), no `rand`;
//! - generated source trees (every size, sparse layout, directory shape,
//!   link kind, name, mode, owner, timestamp and xattr the read path has to
//!   get right), built once per test process and removed at exit;
//! - image variants made from them with `mkfs.ext4 -d` (block sizes,
//!   features off, ext2/ext3 layouts, hash algorithms), built once per
//!   process and shared by the tests that use them;
//! - the full comparison of an image read through uext4 with its source
//!   tree, and of every inode's `stat` with what `debugfs -R stat` reports.
//!
//! Set `UEXT4_KEEP_TEST_FILES=1` to keep the trees and images after the run.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{CString, OsStr};
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, FileExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use std::time::Instant;
use uext4::inode_api::DirEntry;
use uext4::{Error, FileType, Filesystem, Stat, Timestamp};

// ---------------------------------------------------------------------------
// Tools and scratch space
// ---------------------------------------------------------------------------

/// Full path of an e2fsprogs / util-linux tool, also looking in the sbin
/// directories that a non-login PATH may lack.
pub fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].iter().map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn must_tool(name: &str) -> PathBuf {
    tool(name).unwrap_or_else(|| panic!("{name} not found"))
}

/// True when mkfs.ext4, debugfs, dumpe2fs and e2fsck are all there;
/// otherwise prints why the calling test is skipped.
pub fn have_e2fsprogs() -> bool {
    for t in ["mkfs.ext4", "debugfs", "dumpe2fs", "e2fsck"] {
        if tool(t).is_none() {
            eprintln!("SKIP: {t} is not installed (e2fsprogs), the image tests need it");
            return false;
        }
    }
    true
}

/// True when running as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

static SCRATCH: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

extern "C" fn remove_scratch() {
    if std::env::var_os("UEXT4_KEEP_TEST_FILES").is_some() {
        return;
    }
    if let Ok(dirs) = SCRATCH.lock() {
        for d in dirs.iter() {
            let _ = fs::remove_dir_all(d);
        }
    }
}

/// Where scratch files go: `UEXT4_TEST_TMPDIR` if set, else /dev/shm when
/// it has room (trees and images are written and deleted in bulk; on a
/// disk mounted with `discard` deleting them alone takes seconds), else
/// the system temporary directory.
pub fn scratch_base() -> PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        if let Some(d) = std::env::var_os("UEXT4_TEST_TMPDIR") {
            return PathBuf::from(d);
        }
        let shm = Path::new("/dev/shm");
        let c = cpath(shm);
        // SAFETY: statvfs into a zeroed struct; valid path.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        let ok = unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0
            && unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0
            && (st.f_bavail as u64).saturating_mul(st.f_frsize as u64) >= 8 << 30;
        if ok {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    })
    .clone()
}

/// A fresh directory that lives until the test process exits (source
/// trees and images shared between tests cannot be owned by one test).
pub fn scratch_dir(tag: &str) -> PathBuf {
    static REGISTER: Once = Once::new();
    static N: AtomicUsize = AtomicUsize::new(0);
    REGISTER.call_once(|| {
        // SAFETY: registering a plain extern "C" fn with no arguments.
        unsafe { libc::atexit(remove_scratch) };
    });
    let n = N.fetch_add(1, Ordering::Relaxed);
    let p = scratch_base().join(format!("uext4-it-{}-{n}-{tag}", std::process::id()));
    let _ = fs::remove_dir_all(&p);
    fs::create_dir_all(&p).unwrap();
    SCRATCH.lock().unwrap().push(p.clone());
    p
}

/// Runs a command, panicking with its output unless the exit code is allowed.
pub fn run(cmd: &mut Command, ok_codes: &[i32]) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let code = out.status.code().unwrap_or(-1);
    if !ok_codes.contains(&code) {
        panic!(
            "{cmd:?} exited with {code}\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// Process-wide cache of values built once per key (trees, images), built
/// outside the lock so that different keys build in parallel.
pub fn cached<K: Eq + std::hash::Hash + Clone, V: Send + Sync>(
    map: &'static Mutex<Option<HashMap<K, &'static OnceLock<V>>>>,
    key: K,
    init: impl FnOnce() -> V,
) -> &'static V {
    let cell: &'static OnceLock<V> = {
        let mut g = map.lock().unwrap_or_else(|p| p.into_inner());
        g.get_or_insert_with(HashMap::new).entry(key).or_insert_with(|| Box::leak(Box::new(OnceLock::new())))
    };
    cell.get_or_init(init)
}

// ---------------------------------------------------------------------------
// Deterministic content
// ---------------------------------------------------------------------------

/// xorshift64* generator.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value).
    pub fn new(seed: u64) -> Rng {
        let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03 | 1);
        r.next();
        r
    }

    /// Next 64 random bits.
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in 0..n.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// `len` pseudo-random bytes determined by `seed`.
pub fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng::new(seed).fill(&mut v);
    v
}

fn seed_of(s: &str) -> u64 {
    // FNV-1a
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

// ---------------------------------------------------------------------------
// Source trees
// ---------------------------------------------------------------------------

/// What a generated source tree contains beyond the fixed part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TreeSpec {
    /// Include `big/file_50m` (50 MiB + 123 bytes).
    pub big_file: bool,
    /// Entries of `bigdir/`.
    pub big_dir: usize,
    /// Value size of the large xattr (`xattr/large`); must fit an xattr
    /// block of the image's block size.
    pub xattr_large: usize,
    /// Target length of `links/slow_long` (symlinks are at most one block
    /// minus one byte: 4000 at 4k, less on smaller blocks).
    pub long_symlink: usize,
}

/// A generated source tree.
pub struct Tree {
    /// Its root directory (the `mkfs.ext4 -d` argument).
    pub root: PathBuf,
    /// What it was built from.
    pub spec: TreeSpec,
    /// The names in `bigdir/`, in creation order.
    pub big_dir_names: Vec<Vec<u8>>,
}

/// Size of the big file.
pub const BIG_FILE_SIZE: u64 = 50 * 1024 * 1024 + 123;
/// Size of `sparse/far` (beyond 4 GiB: triple-indirect on ext2 with 1k and 4k blocks).
pub const FAR_SIZE: u64 = 5 * 1024 * 1024 * 1024 + 77;
/// Islands of data in `sparse/many` (each one extent: depth-2 extent trees
/// at 1k and 4k blocks).
pub const MANY_ISLANDS: u64 = 2000;
/// Depth of `deep/`.
pub const DEEP_LEVELS: usize = 30;
/// Longest symlink chain that still resolves (the kernel's MAXSYMLINKS).
pub const MAX_FOLLOWS: usize = 40;

/// File sizes of `sizes/size_N`: every block-size, direct/indirect and
/// fast-symlink boundary, plus a few larger ones.
pub fn sizes() -> Vec<u64> {
    vec![
        0,
        1,
        2,
        59,
        60,
        61,
        511,
        512,
        1023,
        1024,
        1025,
        2047,
        2048,
        2049,
        4095,
        4096,
        4097,
        8191,
        8192,
        8193,
        12 * 1024,
        12 * 1024 + 1,
        12 * 2048 + 1,
        12 * 4096,
        12 * 4096 + 1,
        268 * 1024,
        268 * 1024 + 1,
        524 * 2048 + 1,
        1036 * 4096 + 1,
        1 << 20,
        (1 << 20) + 7,
        3_000_001,
    ]
}

/// Name `i` of `bigdir/`: unique prefix plus a pseudo-random tail mixing
/// ASCII and multi-byte UTF-8 (bytes >= 0x80 make signed and unsigned
/// directory hashes differ); two of them are exactly 255 bytes.
pub fn big_dir_name(i: usize) -> Vec<u8> {
    const PIECES: [&str; 16] = ["a", "b", "z", "Q", "_", "-", ".", "é", "ß", "漢", "🦀", "0", "9", " ", "~", "x"];
    let mut r = Rng::new(i as u64 ^ 0xB16D_1200);
    let mut s = format!("e{i:05}_");
    for _ in 0..2 + r.below(17) {
        s.push_str(PIECES[r.below(PIECES.len() as u64) as usize]);
    }
    let mut b = s.into_bytes();
    if i % 5000 == 1 {
        b.resize(255, b'L');
    }
    b
}

/// The name of exactly 255 bytes made of 3-byte UTF-8 characters.
pub fn utf8_255() -> Vec<u8> {
    "名".repeat(85).into_bytes()
}

/// Target of the slow symlinks (`links/slow200`, `links/slow_long`).
pub fn long_target(len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let mut i = 0;
    while v.len() < len {
        v.extend_from_slice(format!("seg{i:03}/").as_bytes());
        i += 1;
    }
    v.truncate(len);
    v
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// lchown(2).
pub fn lchown(p: &Path, uid: u32, gid: u32) {
    // SAFETY: valid NUL-terminated path.
    let r = unsafe { libc::lchown(cpath(p).as_ptr(), uid, gid) };
    assert_eq!(r, 0, "lchown {p:?}: {}", std::io::Error::last_os_error());
}

/// Sets atime and mtime (not following symlinks).
pub fn set_times(p: &Path, atime: (i64, i64), mtime: (i64, i64)) {
    let ts = [
        libc::timespec { tv_sec: atime.0 as libc::time_t, tv_nsec: atime.1 as _ },
        libc::timespec { tv_sec: mtime.0 as libc::time_t, tv_nsec: mtime.1 as _ },
    ];
    // SAFETY: valid path and a two-element timespec array.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, cpath(p).as_ptr(), ts.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    assert_eq!(r, 0, "utimensat {p:?}: {}", std::io::Error::last_os_error());
}

/// lsetxattr(2); returns false (after printing why) if the source
/// filesystem refuses the namespace.
pub fn set_xattr(p: &Path, name: &str, value: &[u8]) -> bool {
    let n = CString::new(name).unwrap();
    // SAFETY: valid path, name and value buffer.
    let r = unsafe { libc::lsetxattr(cpath(p).as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        eprintln!("note: source tree: cannot set {name} on {p:?}: {e}; left out");
        return false;
    }
    true
}

/// All xattrs of a source path (not following symlinks).
pub fn source_xattrs(p: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let c = cpath(p);
    let mut out = BTreeMap::new();
    // SAFETY (all three calls): valid path and buffers of the given sizes.
    let len = unsafe { libc::llistxattr(c.as_ptr(), std::ptr::null_mut(), 0) };
    assert!(len >= 0, "llistxattr {p:?}: {}", std::io::Error::last_os_error());
    let mut names = vec![0u8; len as usize];
    let len = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(len >= 0);
    names.truncate(len as usize);
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let n = CString::new(name).unwrap();
        let vlen = unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) };
        assert!(vlen >= 0, "lgetxattr {p:?} {name:?}");
        let mut v = vec![0u8; vlen as usize];
        let vlen = unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        assert!(vlen >= 0);
        v.truncate(vlen as usize);
        out.insert(name.to_vec(), v);
    }
    out
}

fn mknod(p: &Path, mode: u32, major: u32, minor: u32) {
    let dev = libc::makedev(major, minor);
    // SAFETY: valid path.
    let r = unsafe { libc::mknod(cpath(p).as_ptr(), mode as libc::mode_t, dev) };
    assert_eq!(r, 0, "mknod {p:?}: {}", std::io::Error::last_os_error());
}

fn write_file(p: &Path, data: &[u8]) {
    fs::write(p, data).unwrap_or_else(|e| panic!("write {p:?}: {e}"));
}

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

/// A POSIX ACL in the xattr format (version 2).
pub fn acl_blob(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// Data islands of `sparse/holes`: (offset, length).
pub const HOLES_ISLANDS: [(u64, usize); 4] =
    [(0, 5000), (1 << 20, 100), ((3 << 20) + 4095, 4098), ((10 << 20) - 10, 10)];

/// The source tree for `spec`, built on first use.
pub fn tree(spec: TreeSpec) -> &'static Tree {
    static TREES: Mutex<Option<HashMap<TreeSpec, &'static OnceLock<Tree>>>> = Mutex::new(None);
    cached(&TREES, spec, || {
        let t0 = Instant::now();
        let root = scratch_dir("tree").join("root");
        fs::create_dir(&root).unwrap();
        let t = build_tree(root, spec);
        eprintln!("built source tree {spec:?} in {:.1?}", t0.elapsed());
        t
    })
}

fn build_tree(root: PathBuf, spec: TreeSpec) -> Tree {
    let r = &root;
    let mkdir = |rel: &str| {
        let p = r.join(rel);
        fs::create_dir_all(&p).unwrap();
        p
    };

    // Regular files of every interesting size.
    let d = mkdir("sizes");
    for n in sizes() {
        let name = format!("size_{n}");
        write_file(&d.join(&name), &content(seed_of(&name), n as usize));
    }

    if spec.big_file {
        let d = mkdir("big");
        let mut f = File::create(d.join("file_50m")).unwrap();
        let mut rng = Rng::new(50);
        let mut buf = vec![0u8; 1 << 20];
        let mut left = BIG_FILE_SIZE as usize;
        while left > 0 {
            let n = left.min(buf.len());
            rng.fill(&mut buf[..n]);
            f.write_all(&buf[..n]).unwrap();
            left -= n;
        }
    }

    // Sparse files (mkfs -d keeps the holes).
    let d = mkdir("sparse");
    {
        let f = File::create(d.join("holes")).unwrap();
        f.set_len(10 << 20).unwrap();
        for (i, &(off, len)) in HOLES_ISLANDS.iter().enumerate() {
            f.write_all_at(&content(100 + i as u64, len), off).unwrap();
        }
        let f = File::create(d.join("hole_start")).unwrap();
        f.set_len(1 << 20).unwrap();
        f.write_all_at(&content(110, 100), (1 << 20) - 100).unwrap();
        let f = File::create(d.join("all_hole")).unwrap();
        f.set_len(5 << 20).unwrap();
        let f = File::create(d.join("many")).unwrap();
        for i in 0..MANY_ISLANDS {
            f.write_all_at(&content(1000 + i, 4096), i * 8192).unwrap();
        }
        f.set_len(MANY_ISLANDS * 8192 + 100).unwrap();
        let f = File::create(d.join("far")).unwrap();
        f.set_len(FAR_SIZE).unwrap();
        f.write_all_at(&content(120, 4096), 0).unwrap();
        f.write_all_at(&content(121, 4096), 2 << 30).unwrap();
        f.write_all_at(&content(122, 100), (4 << 30) + 12345).unwrap();
        f.write_all_at(&content(123, 50), FAR_SIZE - 50).unwrap();
    }

    // 30-level deep path.
    let mut p = mkdir("deep");
    for i in 1..=DEEP_LEVELS {
        p = p.join(format!("d{i:02}"));
        fs::create_dir(&p).unwrap();
    }
    write_file(&p.join("leaf.txt"), b"bottom of the deep tree\n");

    // Hard links (three names, two directories).
    let d = mkdir("hard");
    write_file(&d.join("a"), &content(7, 5000));
    fs::hard_link(d.join("a"), d.join("b")).unwrap();
    fs::hard_link(d.join("a"), r.join("deep/d01/hard_c")).unwrap();

    // Symlinks: fast (< 60 bytes), the 60-byte boundary, slow ones of 200
    // and 4000 bytes, to directories, absolute, dangling, loops, a chain.
    let d = mkdir("links");
    symlink("../sizes/size_1", d.join("fast")).unwrap();
    symlink("t".repeat(59), d.join("len59")).unwrap();
    symlink("t".repeat(60), d.join("len60")).unwrap();
    symlink(OsStr::from_bytes(&long_target(200)), d.join("slow200")).unwrap();
    symlink(OsStr::from_bytes(&long_target(spec.long_symlink)), d.join("slow_long")).unwrap();
    symlink("../deep/d01/d02", d.join("dirlink")).unwrap();
    symlink("/deep/d01", d.join("abs")).unwrap();
    symlink("dirlink/../d02/d03", d.join("dotdot")).unwrap();
    symlink("nonexistent/x", d.join("dangling")).unwrap();
    symlink("loop2", d.join("loop1")).unwrap();
    symlink("loop1", d.join("loop2")).unwrap();
    symlink("self", d.join("self")).unwrap();
    symlink("../sizes/size_1/", d.join("file_slash")).unwrap();
    symlink("ünïcödé/目标", d.join("utf8")).unwrap();
    // chain/c00 -> c01 -> ... -> c40 -> ../../sizes/size_2: resolving c01
    // follows exactly MAX_FOLLOWS links, c00 one more.
    let c = mkdir("links/chain");
    for i in 0..=MAX_FOLLOWS {
        let target = if i == MAX_FOLLOWS { "../../sizes/size_2".to_string() } else { format!("c{:02}", i + 1) };
        symlink(target, c.join(format!("c{i:02}"))).unwrap();
    }

    // Names: 255-byte UTF-8, 255-byte ASCII, one byte, non-UTF-8 bytes.
    let d = mkdir("names");
    write_file(&d.join(OsStr::from_bytes(&utf8_255())), b"utf8 255\n");
    write_file(&d.join("A".repeat(255)), b"ascii 255\n");
    write_file(&d.join("a"), b"a\n");
    write_file(&d.join(OsStr::from_bytes(b"bad\xff\xfename")), b"latin1\n");
    write_file(&d.join("with space and\nnewline"), b"ws\n");
    fs::create_dir(d.join("目录".repeat(42))).unwrap();

    // Special files.
    let d = mkdir("special");
    mknod(&d.join("null"), libc::S_IFCHR | 0o666, 1, 3);
    mknod(&d.join("bigchr"), libc::S_IFCHR | 0o600, 300, 70000);
    mknod(&d.join("sda1"), libc::S_IFBLK | 0o660, 8, 1);
    mknod(&d.join("bignode"), libc::S_IFBLK | 0o640, 259, 1_000_000);
    mknod(&d.join("fifo"), libc::S_IFIFO | 0o644, 0, 0);
    drop(std::os::unix::net::UnixListener::bind(d.join("sock")).unwrap());

    // Modes and owners (uid/gid above 65535 use the high 16 bits).
    let d = mkdir("modes");
    for (name, mode) in [("suid", 0o4755), ("sgid", 0o2750), ("none", 0o000), ("rw", 0o600), ("all", 0o777)] {
        write_file(&d.join(name), name.as_bytes());
        chmod(&d.join(name), mode);
    }
    fs::create_dir(d.join("sticky")).unwrap();
    chmod(&d.join("sticky"), 0o1777);
    write_file(&d.join("owner_big"), b"x");
    lchown(&d.join("owner_big"), 70000, 80001);
    write_file(&d.join("owner_1000"), b"x");
    lchown(&d.join("owner_1000"), 1000, 1000);
    lchown(&d.join("sticky"), 65534, 65533);
    symlink("owner_big", d.join("link_owned")).unwrap();
    lchown(&d.join("link_owned"), 4242, 70001);

    // Extended attributes.
    let d = mkdir("xattr");
    let small = d.join("small");
    write_file(&small, b"small xattrs\n");
    set_xattr(&small, "user.a", b"1");
    set_xattr(&small, "user.empty", b"");
    set_xattr(&small, "user.bb", b"two bytes and more");
    set_xattr(&small, "user.binary", &[0, 1, 2, 255, 254, 0]);
    set_xattr(&small, "trusted.t", b"trusted value");
    set_xattr(&small, "security.s", b"security value");
    let large = d.join("large");
    write_file(&large, b"large xattr\n");
    set_xattr(&large, "user.tiny", b"t");
    set_xattr(&large, "user.big", &content(33, spec.xattr_large));
    let many = d.join("many");
    write_file(&many, b"");
    for i in 0..15 {
        set_xattr(&many, &format!("user.k{i:02}"), format!("value number {i}").as_bytes());
    }
    let acl = d.join("acl");
    write_file(&acl, b"acl\n");
    // user::rw- user:1000:r-- group::r-- group:2000:-w- mask::rw- other::---
    set_xattr(
        &acl,
        "system.posix_acl_access",
        &acl_blob(&[
            (1, 6, u32::MAX),
            (2, 4, 1000),
            (4, 4, u32::MAX),
            (8, 2, 2000),
            (0x10, 6, u32::MAX),
            (0x20, 0, u32::MAX),
        ]),
    );
    let dir = d.join("dir");
    fs::create_dir(&dir).unwrap();
    set_xattr(&dir, "user.on_dir", b"directory xattr");
    set_xattr(&dir, "system.posix_acl_default", &acl_blob(&[(1, 7, u32::MAX), (4, 5, u32::MAX), (0x20, 5, u32::MAX)]));
    symlink("small", d.join("link")).unwrap();
    set_xattr(&d.join("link"), "trusted.on_link", b"symlink xattr");
    // A fast symlink whose xattr does not fit in the inode: the xattr block
    // counts in i_blocks (a whole cluster with bigalloc), the target is
    // still in i_block.
    symlink("small", d.join("link_xattr_block")).unwrap();
    set_xattr(&d.join("link_xattr_block"), "trusted.big", &content(34, 300));
    set_xattr(&d, "user.parent", b"p");

    // The big directory.
    let d = mkdir("bigdir");
    let mut names = Vec::with_capacity(spec.big_dir);
    for i in 0..spec.big_dir {
        let name = big_dir_name(i);
        let p = d.join(OsStr::from_bytes(&name));
        if i % 1000 == 500 {
            fs::create_dir(&p).unwrap();
        } else if i % 991 == 7 {
            symlink("../sizes/size_1", &p).unwrap();
        } else if i % 97 == 3 {
            write_file(&p, &content(i as u64, i % 300));
        } else {
            File::create(&p).unwrap();
        }
        names.push(name);
    }

    // Timestamps: nanoseconds, before 1970, near and past 2038, beyond
    // the 34-bit range of the extra epoch bits.
    let d = mkdir("times");
    let stamps: [(&str, i64, i64); 7] = [
        ("epoch", 0, 0),
        ("nsec", 1_600_000_000, 123_456_789),
        ("max_nsec", 1_000_000_001, 999_999_999),
        ("pre1970", -1_000_000_000, 500),
        ("i32max", i64::from(i32::MAX), 1),
        ("y2040", 2_208_988_800, 42),
        ("y2300", 10_413_792_000, 7),
    ];
    for (name, sec, nsec) in stamps {
        let p = d.join(name);
        write_file(&p, name.as_bytes());
        set_times(&p, (sec, nsec), (sec, nsec));
    }

    // Deterministic times everywhere else, directories last (bottom-up),
    // since creating entries changes a directory's mtime.
    fn stamp_all(p: &Path, rng: &mut Rng) {
        let meta = fs::symlink_metadata(p).unwrap();
        if meta.is_dir() {
            let mut children: Vec<_> = fs::read_dir(p).unwrap().map(|e| e.unwrap().path()).collect();
            children.sort();
            for c in children {
                if c.parent().and_then(|q| q.file_name()) == Some(OsStr::new("times")) {
                    continue;
                }
                stamp_all(&c, rng);
            }
        }
        let sec = 1_500_000_000 + rng.below(100_000_000) as i64;
        set_times(p, (sec + 1, rng.below(1_000_000_000) as i64), (sec, rng.below(1_000_000_000) as i64));
    }
    stamp_all(r, &mut Rng::new(4));
    chmod(r, 0o755);

    Tree { root, spec, big_dir_names: names }
}

// ---------------------------------------------------------------------------
// Image variants
// ---------------------------------------------------------------------------

/// How one test image is made.
#[derive(Debug)]
pub struct Variant {
    /// Short name (also the test's name).
    pub name: &'static str,
    /// mkfs.ext4 arguments besides -q -F -d SRC IMG SIZE.
    pub mkfs: &'static [&'static str],
    /// Block size it must end up with.
    pub block_size: u32,
    /// The source tree.
    pub tree: TreeSpec,
    /// Image size in MiB.
    pub size_mib: u64,
    /// mke2fs.conf `hash_alg` (legacy, half_md4, tea), None for the default.
    pub hash_alg: Option<&'static str>,
    /// Switch the superblock to unsigned directory hashes before indexing.
    pub unsigned_hash: bool,
    /// Run `e2fsck -fyD` so that large directories get htree indexes
    /// (mkfs -d writes linear directories).
    pub index_dirs: bool,
    /// Features that must (or, with a leading '^', must not) be on.
    pub features: &'static [&'static str],
    /// Minimum htree depth (indirect levels) of `bigdir` to assert.
    pub min_htree_levels: Option<u32>,
}

/// A tree for block size `bs`: large xattr and long symlink as large as
/// that block size allows.
const fn spec(big_file: bool, big_dir: usize, bs: usize) -> TreeSpec {
    let (xattr_large, long_symlink) = match bs {
        1024 => (900, 1000),
        2048 => (1800, 2000),
        _ => (3000, 4000),
    };
    TreeSpec { big_file, big_dir, xattr_large, long_symlink }
}

/// The defaults of [`VARIANTS`]' entries: the kernel's default hash, signed,
/// directories indexed, no minimum htree depth asserted.
const PLAIN: Variant = Variant {
    name: "",
    mkfs: &[],
    block_size: 4096,
    tree: spec(false, 2000, 4096),
    size_mib: 128,
    hash_alg: None,
    unsigned_hash: false,
    index_dirs: true,
    features: &[],
    min_htree_levels: None,
};

/// Every image variant of the suite.
pub const VARIANTS: &[Variant] = &[
    Variant {
        name: "ext4_4k",
        mkfs: &["-t", "ext4", "-b", "4096"],
        block_size: 4096,
        // 20,000 entries are in the 1k and 2k variants (two htree levels
        // there); mkfs -d inserts directory entries in quadratic time, so
        // each 20,000-entry image costs ~20 s of mkfs.
        tree: spec(true, 2000, 4096),
        size_mib: 256,
        features: &["extent", "64bit", "flex_bg", "metadata_csum", "dir_index", "has_journal", "huge_file"],
        ..PLAIN
    },
    Variant {
        name: "ext4_1k",
        mkfs: &["-t", "ext4", "-b", "1024"],
        block_size: 1024,
        tree: spec(false, 20_000, 1024),
        size_mib: 128,
        features: &["extent", "64bit", "flex_bg", "metadata_csum", "dir_index"],
        min_htree_levels: Some(1),
        ..PLAIN
    },
    Variant {
        name: "ext4_2k",
        mkfs: &["-t", "ext4", "-b", "2048"],
        block_size: 2048,
        tree: spec(false, 20_000, 2048),
        size_mib: 128,
        features: &["extent", "64bit", "flex_bg", "metadata_csum", "dir_index"],
        min_htree_levels: Some(1),
        ..PLAIN
    },
    Variant {
        name: "ext4_4k_no_metadata_csum",
        mkfs: &["-t", "ext4", "-b", "4096", "-O", "^metadata_csum"],
        block_size: 4096,
        tree: spec(false, 2000, 4096),
        size_mib: 128,
        features: &["^metadata_csum", "^uninit_bg", "extent", "dir_index"],
        ..PLAIN
    },
    Variant {
        name: "ext4_4k_no_64bit",
        mkfs: &["-t", "ext4", "-b", "4096", "-O", "^64bit"],
        block_size: 4096,
        tree: spec(false, 2000, 4096),
        size_mib: 128,
        features: &["^64bit", "metadata_csum", "extent"],
        ..PLAIN
    },
    Variant {
        name: "ext4_1k_no_flex_bg",
        mkfs: &["-t", "ext4", "-b", "1024", "-O", "^flex_bg"],
        block_size: 1024,
        tree: spec(false, 2000, 1024),
        size_mib: 128,
        features: &["^flex_bg", "metadata_csum", "extent"],
        ..PLAIN
    },
    Variant {
        name: "ext2_1k",
        mkfs: &["-t", "ext2", "-b", "1024"],
        block_size: 1024,
        tree: spec(true, 2000, 1024),
        size_mib: 256,
        features: &["^extent", "^has_journal", "^metadata_csum", "^flex_bg", "dir_index", "filetype"],
        ..PLAIN
    },
    Variant {
        name: "ext2_4k_128_inodes_no_filetype",
        mkfs: &["-t", "ext2", "-b", "4096", "-I", "128", "-O", "^filetype"],
        block_size: 4096,
        tree: spec(false, 2000, 4096),
        size_mib: 128,
        features: &["^extent", "^filetype", "^extra_isize"],
        ..PLAIN
    },
    Variant {
        name: "ext3_2k",
        mkfs: &["-t", "ext3", "-b", "2048"],
        block_size: 2048,
        tree: spec(false, 2000, 2048),
        size_mib: 128,
        features: &["has_journal", "^extent", "^metadata_csum", "dir_index"],
        ..PLAIN
    },
    Variant {
        name: "ext4_4k_gdt_csum",
        mkfs: &["-t", "ext4", "-b", "4096", "-O", "^metadata_csum,uninit_bg"],
        block_size: 4096,
        tree: spec(false, 2000, 4096),
        size_mib: 128,
        features: &["uninit_bg", "^metadata_csum"],
        ..PLAIN
    },
    Variant {
        name: "ext4_4k_no_dir_index",
        // e2fsck waits out the MMP interval, so MMP goes on the variant
        // that is not run through e2fsck.
        mkfs: &["-t", "ext4", "-b", "4096", "-O", "^dir_index,mmp"],
        block_size: 4096,
        tree: spec(false, 2000, 4096),
        size_mib: 128,
        index_dirs: false,
        features: &["^dir_index", "mmp"],
        ..PLAIN
    },
    Variant {
        name: "ext4_4k_tea_unsigned",
        mkfs: &["-t", "ext4", "-b", "4096"],
        block_size: 4096,
        tree: spec(false, 2000, 4096),
        size_mib: 128,
        hash_alg: Some("tea"),
        unsigned_hash: true,
        features: &["dir_index", "metadata_csum"],
        ..PLAIN
    },
    Variant {
        name: "ext4_1k_legacy_hash",
        mkfs: &["-t", "ext4", "-b", "1024", "-E", "hash_seed=3a4f8e2c-1b6d-4c9e-8f7a-5d2e1c0b9a87"],
        block_size: 1024,
        tree: spec(false, 2000, 1024),
        size_mib: 128,
        hash_alg: Some("legacy"),
        features: &["dir_index", "metadata_csum"],
        ..PLAIN
    },
    Variant {
        name: "ext4_1k_meta_bg",
        mkfs: &["-t", "ext4", "-b", "1024", "-O", "meta_bg,^resize_inode"],
        block_size: 1024,
        tree: spec(false, 2000, 1024),
        size_mib: 256,
        features: &["meta_bg", "^resize_inode", "64bit", "metadata_csum"],
        ..PLAIN
    },
    Variant {
        name: "ext4_4k_bigalloc",
        mkfs: &["-t", "ext4", "-b", "4096", "-O", "bigalloc", "-C", "65536"],
        block_size: 4096,
        tree: spec(false, 2000, 4096),
        size_mib: 256,
        features: &["bigalloc", "extent", "metadata_csum"],
        ..PLAIN
    },
    Variant {
        name: "ext4_4k_misc_features",
        mkfs: &[
            "-t",
            "ext4",
            "-b",
            "4096",
            "-O",
            "metadata_csum_seed,quota,project,orphan_file,large_dir,sparse_super2",
        ],
        block_size: 4096,
        tree: spec(false, 2000, 4096),
        size_mib: 128,
        features: &["metadata_csum_seed", "quota", "project", "orphan_file", "large_dir", "sparse_super2"],
        ..PLAIN
    },
    Variant {
        name: "ext4_64k",
        mkfs: &["-t", "ext4", "-b", "65536"],
        block_size: 65536,
        tree: spec(false, 2000, 65536),
        size_mib: 256,
        features: &["extent", "64bit", "metadata_csum"],
        ..PLAIN
    },
];

/// A built image.
pub struct Image {
    /// The image file.
    pub path: PathBuf,
    /// How it was made.
    pub variant: &'static Variant,
    /// What it was made from.
    pub tree: &'static Tree,
    /// `dumpe2fs -h` output.
    pub dumpe2fs: String,
}

impl Image {
    /// The features line of dumpe2fs.
    pub fn features(&self) -> Vec<String> {
        self.header("Filesystem features").unwrap_or_default().split_whitespace().map(str::to_string).collect()
    }

    /// True if `feature` is on.
    pub fn has(&self, feature: &str) -> bool {
        self.features().iter().any(|f| f == feature)
    }

    /// A `Key:   value` line of the dumpe2fs header.
    pub fn header(&self, key: &str) -> Option<String> {
        self.dumpe2fs.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    }

    /// A numeric dumpe2fs header field.
    pub fn header_num(&self, key: &str) -> u64 {
        let v = self.header(key).unwrap_or_else(|| panic!("dumpe2fs has no {key:?}"));
        v.parse().unwrap_or_else(|_| panic!("dumpe2fs {key:?} = {v:?}"))
    }
}

/// The variant called `name`.
pub fn variant(name: &str) -> &'static Variant {
    VARIANTS.iter().find(|v| v.name == name).unwrap_or_else(|| panic!("no variant {name}"))
}

/// Variants whose 20,000-entry directory makes mkfs slow (its directory
/// insertion is quadratic): in a full run (no test name filter on the
/// command line, or `UEXT4_TEST_PREFETCH=1`) they are built in the
/// background as soon as any image is asked for, so that tests waiting
/// for them do not leave cores idle.
const SLOW_VARIANTS: [&str; 2] = ["ext4_1k", "ext4_2k"];

fn prefetch_wanted() -> bool {
    if let Some(v) = std::env::var_os("UEXT4_TEST_PREFETCH") {
        return v == "1";
    }
    // Positional arguments of the test harness are name filters.
    !std::env::args().skip(1).any(|a| !a.starts_with('-') && a.parse::<u64>().is_err())
}

/// The image of variant `name`, built on first use.
pub fn image(name: &str) -> &'static Image {
    static IMAGES: Mutex<Option<HashMap<&'static str, &'static OnceLock<Image>>>> = Mutex::new(None);
    static PREFETCH: Once = Once::new();
    PREFETCH.call_once(|| {
        if !prefetch_wanted() {
            return;
        }
        for slow in SLOW_VARIANTS {
            if slow != name {
                let v = variant(slow);
                std::thread::spawn(move || {
                    // A failure here shows up again in the test that needs it.
                    let _ = std::panic::catch_unwind(|| cached(&IMAGES, v.name, || build_image(v)));
                });
            }
        }
    });
    let v = variant(name);
    cached(&IMAGES, v.name, || build_image(v))
}

fn mke2fs_conf_with_hash(dir: &Path, alg: &str) -> PathBuf {
    let base = std::env::var_os("MKE2FS_CONFIG").map(PathBuf::from).unwrap_or_else(|| "/etc/mke2fs.conf".into());
    let text = fs::read_to_string(&base).unwrap_or_else(|_| {
        "[defaults]\n\tbase_features = sparse_super,large_file,filetype,resize_inode,dir_index,ext_attr\n\
         \tinode_size = 256\n[fs_types]\n\text4 = {\n\t\tfeatures = has_journal,extent,huge_file,flex_bg,\
         metadata_csum,64bit,dir_nlink,extra_isize\n\t}\n"
            .to_string()
    });
    let mut out = String::new();
    let mut done = false;
    for line in text.lines() {
        if line.trim_start().starts_with("hash_alg") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
        if !done && line.trim() == "[defaults]" {
            out.push_str(&format!("\thash_alg = {alg}\n"));
            done = true;
        }
    }
    if !done {
        out = format!("[defaults]\n\thash_alg = {alg}\n{out}");
    }
    let p = dir.join("mke2fs.conf");
    fs::write(&p, out).unwrap();
    p
}

fn build_image(v: &'static Variant) -> Image {
    let tree = tree(v.tree);
    let t0 = Instant::now();
    let dir = scratch_dir(v.name);
    let path = dir.join("image.ext4");
    let mut cmd = Command::new(must_tool("mkfs.ext4"));
    cmd.args(["-q", "-F"]).args(v.mkfs).arg("-d").arg(&tree.root).arg(&path).arg(format!("{}M", v.size_mib));
    if let Some(alg) = v.hash_alg {
        cmd.env("MKE2FS_CONFIG", mke2fs_conf_with_hash(&dir, alg));
    }
    run(&mut cmd, &[0]);
    let t_mkfs = t0.elapsed();
    if v.unsigned_hash {
        // s_flags: UNSIGNED_HASH (0x2) instead of SIGNED_HASH (0x1); the
        // indexes are built below, with the new hash.
        run(Command::new(must_tool("debugfs")).args(["-w", "-R", "ssv flags 2"]).arg(&path), &[0]);
    }
    if v.index_dirs {
        run(Command::new(must_tool("e2fsck")).args(["-f", "-y", "-D"]).arg(&path), &[0, 1]);
    }
    let t_fsck = t0.elapsed() - t_mkfs;
    let out = run(Command::new(must_tool("dumpe2fs")).arg("-h").arg(&path), &[0]);
    let img = Image { path, variant: v, tree, dumpe2fs: String::from_utf8_lossy(&out.stdout).into_owned() };
    for f in v.features {
        match f.strip_prefix('^') {
            Some(off) => assert!(!img.has(off), "{}: feature {off} is on: {:?}", v.name, img.features()),
            None => assert!(img.has(f), "{}: feature {f} is off: {:?}", v.name, img.features()),
        }
    }
    assert_eq!(img.header_num("Block size"), u64::from(v.block_size), "{}: block size", v.name);
    if let Some(alg) = v.hash_alg {
        assert_eq!(img.header("Default directory hash").as_deref(), Some(alg), "{}", v.name);
    }
    if v.unsigned_hash {
        assert!(img.header("Filesystem flags").unwrap_or_default().contains("unsigned_directory_hash"));
    }
    eprintln!(
        "built image {} (mkfs {:.1?}, e2fsck {:.1?}, total {:.1?}); features: {}",
        v.name,
        t_mkfs,
        t_fsck,
        t0.elapsed(),
        img.features().join(" ")
    );
    img
}

// ---------------------------------------------------------------------------
// debugfs
// ---------------------------------------------------------------------------

/// Runs debugfs (read-only) with one command per line; returns stdout.
pub fn debugfs(img: &Path, cmds: &[String]) -> String {
    let dir = scratch_dir("debugfs");
    let cmdfile = dir.join("cmds");
    fs::write(&cmdfile, cmds.join("\n") + "\n").unwrap();
    let out = run(Command::new(must_tool("debugfs")).arg("-f").arg(&cmdfile).arg(img), &[0]);
    let _ = fs::remove_dir_all(&dir);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One inode as `debugfs -R "stat <N>"` prints it.
#[derive(Debug, Default, Clone)]
pub struct DebugfsStat {
    pub ino: u32,
    pub type_name: String,
    pub perm: u16,
    pub flags: u32,
    pub generation: u32,
    pub version: u64,
    pub uid: u32,
    pub gid: u32,
    pub projid: Option<u32>,
    pub size: u64,
    pub file_acl: u64,
    pub links: u32,
    pub blockcount: u64,
    pub ctime: Timestamp,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub crtime: Option<Timestamp>,
    pub extra_isize: Option<u16>,
    pub device: Option<(u32, u32)>,
    pub fast_link: Option<Vec<u8>>,
}

fn token_after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let i = line.find(key)?;
    line[i + key.len()..].split_whitespace().next()
}

fn num<T: std::str::FromStr>(s: Option<&str>, what: &str, line: &str) -> T {
    s.and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("debugfs: cannot parse {what} in {line:?}"))
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("bad hex {s:?}"))
}

/// Decodes debugfs's `0xSECS:EXTRA` (or `0xSECS`) timestamp.
pub fn decode_time(s: &str) -> Timestamp {
    let (secs, extra) = match s.split_once(':') {
        Some((a, b)) => (hex(a) as u32, Some(hex(b) as u32)),
        None => (hex(s) as u32, None),
    };
    let mut sec = i64::from(secs as i32);
    let mut nsec = 0;
    if let Some(e) = extra {
        sec += i64::from(e & 3) << 32;
        nsec = e >> 2;
    }
    Timestamp { sec, nsec }
}

/// Parses the output of many `stat <N>` commands.
pub fn parse_debugfs_stats(out: &str) -> BTreeMap<u32, DebugfsStat> {
    let mut all = BTreeMap::new();
    let mut cur: Option<DebugfsStat> = None;
    for line in out.lines() {
        let t = line.trim_start();
        if t.starts_with("Inode:") && line.contains("Type:") {
            if let Some(s) = cur.take() {
                all.insert(s.ino, s);
            }
            let mut s = DebugfsStat { ino: num(token_after(line, "Inode:"), "inode", line), ..Default::default() };
            let ty = &line[line.find("Type:").unwrap() + 5..line.find("Mode:").unwrap()];
            s.type_name = ty.trim().to_string();
            let mode = token_after(line, "Mode:").unwrap();
            s.perm = u16::from_str_radix(mode, 8).unwrap();
            s.flags = hex(token_after(line, "Flags:").unwrap()) as u32;
            cur = Some(s);
            continue;
        }
        let Some(s) = cur.as_mut() else { continue };
        if t.starts_with("Generation:") {
            s.generation = num(token_after(line, "Generation:"), "generation", line);
            let v = token_after(line, "Version:").unwrap();
            s.version = match v.split_once(':') {
                Some((hi, lo)) => (hex(hi) << 32) | hex(lo),
                None => hex(v),
            };
        } else if t.starts_with("User:") {
            s.uid = num(token_after(line, "User:"), "uid", line);
            s.gid = num(token_after(line, "Group:"), "gid", line);
            s.projid = token_after(line, "Project:").map(|p| num(Some(p), "project", line));
            s.size = num(token_after(line, "Size:"), "size", line);
        } else if t.starts_with("File ACL:") {
            s.file_acl = num(token_after(line, "File ACL:"), "file acl", line);
        } else if t.starts_with("Links:") {
            s.links = num(token_after(line, "Links:"), "links", line);
            s.blockcount = num(token_after(line, "Blockcount:"), "blockcount", line);
        } else if let Some(rest) = ["ctime:", "atime:", "mtime:", "crtime:"].iter().find(|k| t.starts_with(**k)) {
            let ts = decode_time(t[rest.len()..].split_whitespace().next().unwrap());
            match *rest {
                "ctime:" => s.ctime = ts,
                "atime:" => s.atime = ts,
                "mtime:" => s.mtime = ts,
                _ => s.crtime = Some(ts),
            }
        } else if t.starts_with("Size of extra inode fields:") {
            s.extra_isize = Some(num(token_after(line, "fields:"), "extra isize", line));
        } else if line.contains("Device major/minor number:") {
            let v = token_after(line, "number:").unwrap();
            let (ma, mi) = v.split_once(':').unwrap();
            s.device = Some((ma.parse().unwrap(), mi.parse().unwrap()));
        } else if let Some(rest) = t.strip_prefix("Fast link dest: ") {
            let bytes = rest.as_bytes();
            s.fast_link = Some(bytes[1..bytes.len() - 1].to_vec());
        }
    }
    if let Some(s) = cur.take() {
        all.insert(s.ino, s);
    }
    all
}

/// The debugfs name of a file type.
pub fn debugfs_type_name(t: FileType) -> &'static str {
    match t {
        FileType::Regular => "regular",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::CharDevice => "character special",
        FileType::BlockDevice => "block special",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
    }
}

/// Compares uext4's view of every inode in `inos` with debugfs's.
pub fn compare_stats_with_debugfs(fs: &Filesystem, img: &Path, inos: &BTreeSet<u32>) {
    let cmds: Vec<String> = inos.iter().map(|i| format!("stat <{i}>")).collect();
    let parsed = parse_debugfs_stats(&debugfs(img, &cmds));
    let mut mismatches = Vec::new();
    for &ino in inos {
        let d = parsed.get(&ino).unwrap_or_else(|| panic!("debugfs printed no stat for inode {ino}"));
        let st = fs.stat(ino).unwrap_or_else(|e| panic!("stat({ino}): {e}"));
        let raw = fs.inode(ino).unwrap();
        let mut diff = |field: &str, ours: String, theirs: String| {
            if ours != theirs {
                mismatches.push(format!("inode {ino} {field}: uext4 {ours}, debugfs {theirs}"));
            }
        };
        diff("type", debugfs_type_name(st.file_type).into(), d.type_name.clone());
        diff("mode", format!("{:o}", st.mode & 0o7777), format!("{:o}", d.perm));
        diff("flags", format!("{:#x}", st.flags), format!("{:#x}", d.flags));
        diff("generation", st.generation.to_string(), d.generation.to_string());
        diff("version", format!("{:#x}", raw.version), format!("{:#x}", d.version));
        diff("uid", st.uid.to_string(), d.uid.to_string());
        diff("gid", st.gid.to_string(), d.gid.to_string());
        if let Some(p) = d.projid {
            diff("projid", st.projid.to_string(), p.to_string());
        }
        diff("size", st.size.to_string(), d.size.to_string());
        diff("file_acl", st.file_acl.to_string(), d.file_acl.to_string());
        diff("nlink", st.nlink.to_string(), d.links.to_string());
        diff("blocks", st.blocks.to_string(), d.blockcount.to_string());
        diff("ctime", format!("{:?}", st.ctime), format!("{:?}", d.ctime));
        diff("atime", format!("{:?}", st.atime), format!("{:?}", d.atime));
        diff("mtime", format!("{:?}", st.mtime), format!("{:?}", d.mtime));
        diff("crtime", format!("{:?}", st.crtime), format!("{:?}", d.crtime));
        if let Some(x) = d.extra_isize {
            diff("extra_isize", raw.extra_isize.to_string(), x.to_string());
        }
        if matches!(st.file_type, FileType::CharDevice | FileType::BlockDevice) {
            diff("rdev", format!("{:?}", st.rdev), format!("{:?}", d.device.unwrap_or_default()));
        } else {
            diff("rdev", format!("{:?}", st.rdev), "(0, 0)".into());
        }
        if let Some(target) = &d.fast_link {
            let ours = fs.readlink(ino).map(|t| String::from_utf8_lossy(&t).into_owned());
            diff("fast link", format!("{ours:?}"), format!("{:?}", Ok::<_, ()>(String::from_utf8_lossy(target))));
        }
        diff("ino", st.ino.to_string(), d.ino.to_string());
    }
    assert!(
        mismatches.is_empty(),
        "{} stat field(s) differ from debugfs (first 40):\n{}",
        mismatches.len(),
        mismatches.iter().take(40).cloned().collect::<Vec<_>>().join("\n")
    );
}

/// `Indirect levels` of an htree directory, None if it is not indexed.
pub fn htree_levels(img: &Path, dir: &str) -> Option<u32> {
    let out = debugfs(img, &[format!("htree_dump {dir}")]);
    out.lines().find_map(|l| l.trim().strip_prefix("Indirect levels:").map(|v| v.trim().parse().unwrap()))
}

// ---------------------------------------------------------------------------
// Comparing an image with its source tree
// ---------------------------------------------------------------------------

/// What a walk visited.
#[derive(Default, Debug)]
pub struct Walk {
    /// Image inode -> relative paths that lead to it.
    pub inodes: BTreeMap<u32, Vec<PathBuf>>,
    /// Bytes of file data compared.
    pub bytes: u64,
    /// Files compared.
    pub files: usize,
}

/// The uext4 file type of a source file.
pub fn source_type(meta: &fs::Metadata) -> FileType {
    let t = meta.file_type();
    if t.is_dir() {
        FileType::Directory
    } else if t.is_symlink() {
        FileType::Symlink
    } else if t.is_char_device() {
        FileType::CharDevice
    } else if t.is_block_device() {
        FileType::BlockDevice
    } else if t.is_fifo() {
        FileType::Fifo
    } else if t.is_socket() {
        FileType::Socket
    } else {
        FileType::Regular
    }
}

fn show(name: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(name))
}

/// Walks the whole image from the root and compares it with the tree:
/// names per directory, types, attributes, contents, symlink targets,
/// xattrs, hard links, `.` and `..`.
pub fn walk_and_compare(fs: &Filesystem, tree: &Tree, filetype_feature: bool) -> Walk {
    let mut w = Walk::default();
    let mut src_to_img = HashMap::new();
    let mut img_to_src = HashMap::new();
    let root = fs.root();
    w.inodes.entry(root).or_default().push(PathBuf::from("/"));
    let ctx =
        &mut WalkCtx { fs, w: &mut w, src_to_img: &mut src_to_img, img_to_src: &mut img_to_src, filetype_feature };
    walk_dir(ctx, root, root, &tree.root, Path::new("/"));
    w
}

struct WalkCtx<'a> {
    fs: &'a Filesystem,
    w: &'a mut Walk,
    src_to_img: &'a mut HashMap<(u64, u64), u32>,
    img_to_src: &'a mut HashMap<u32, (u64, u64)>,
    filetype_feature: bool,
}

fn walk_dir(ctx: &mut WalkCtx, ino: u32, parent: u32, src: &Path, rel: &Path) {
    let fs = ctx.fs;
    let entries = fs.read_dir_all(ino).unwrap_or_else(|e| panic!("read_dir_all {rel:?}: {e}"));
    let mut names: BTreeMap<Vec<u8>, DirEntry> = BTreeMap::new();
    let (mut dot, mut dotdot) = (None, None);
    for e in entries {
        match &e.name[..] {
            b"." => assert!(dot.replace(e.ino).is_none(), "{rel:?}: two '.' entries"),
            b".." => assert!(dotdot.replace(e.ino).is_none(), "{rel:?}: two '..' entries"),
            _ => {
                let n = e.name.clone();
                if let Some(old) = names.insert(n.clone(), e) {
                    panic!("{rel:?}: duplicate entry {} (inode {})", show(&n), old.ino);
                }
            }
        }
    }
    assert_eq!(dot, Some(ino), "{rel:?}: '.'");
    assert_eq!(dotdot, Some(parent), "{rel:?}: '..'");
    let is_root = ino == fs.root();
    let mut extra_links = 0;
    if is_root {
        let lf = names.remove(&b"lost+found"[..]).expect("lost+found in the root");
        assert_eq!(fs.stat(lf.ino).unwrap().file_type, FileType::Directory);
        ctx.w.inodes.entry(lf.ino).or_default().push(PathBuf::from("/lost+found"));
        extra_links = 1;
    }
    let src_names: BTreeSet<Vec<u8>> =
        fs::read_dir(src).unwrap().map(|e| e.unwrap().file_name().as_bytes().to_vec()).collect();
    let img_names: BTreeSet<Vec<u8>> = names.keys().cloned().collect();
    if src_names != img_names {
        let missing: Vec<_> = src_names.difference(&img_names).take(10).map(|n| show(n)).collect();
        let extra: Vec<_> = img_names.difference(&src_names).take(10).map(|n| show(n)).collect();
        panic!(
            "{rel:?}: {} names in the source, {} in the image; missing {missing:?}, extra {extra:?}",
            src_names.len(),
            img_names.len()
        );
    }
    let mut subdirs = 0;
    for (name, e) in &names {
        let sp = src.join(OsStr::from_bytes(name));
        let rp = rel.join(OsStr::from_bytes(name));
        let meta = fs::symlink_metadata(&sp).unwrap();
        let st = fs.stat(e.ino).unwrap_or_else(|err| panic!("stat {rp:?} (inode {}): {err}", e.ino));
        check_attrs(ctx, &st, e, &meta, &rp);
        // Hard links: one image inode per source inode, both ways.
        let key = (meta.dev(), meta.ino());
        let img_ino = *ctx.src_to_img.entry(key).or_insert(e.ino);
        assert_eq!(img_ino, e.ino, "{rp:?}: hard link resolves to another inode");
        assert_eq!(
            *ctx.img_to_src.entry(e.ino).or_insert(key),
            key,
            "{rp:?}: inode {} shared by unrelated files",
            e.ino
        );
        let first_visit = !ctx.w.inodes.contains_key(&e.ino);
        ctx.w.inodes.entry(e.ino).or_default().push(rp.clone());
        match st.file_type {
            FileType::Directory => {
                subdirs += 1;
                walk_dir(ctx, e.ino, ino, &sp, &rp);
            }
            FileType::Regular if first_visit => {
                ctx.w.bytes += compare_file(fs, e.ino, &sp, &rp);
                ctx.w.files += 1;
            }
            FileType::Symlink => {
                let ours = fs.readlink(e.ino).unwrap_or_else(|err| panic!("readlink {rp:?}: {err}"));
                let theirs = fs::read_link(&sp).unwrap();
                assert_eq!(ours, theirs.as_os_str().as_bytes(), "{rp:?}: symlink target");
                assert_eq!(st.size, ours.len() as u64, "{rp:?}: symlink size");
            }
            _ => {}
        }
        compare_xattrs(fs, e.ino, &sp, &rp);
    }
    let st = fs.stat(ino).unwrap();
    assert_eq!(st.nlink, 2 + subdirs + extra_links, "{rel:?}: directory link count");
    assert_eq!(st.size % u64::from(fs.block_size()), 0, "{rel:?}: directory size");
}

fn check_attrs(ctx: &WalkCtx, st: &Stat, e: &DirEntry, meta: &fs::Metadata, rp: &Path) {
    let want = source_type(meta);
    assert_eq!(st.file_type, want, "{rp:?}: file type");
    if ctx.filetype_feature {
        assert_eq!(e.file_type, Some(want), "{rp:?}: directory entry file type");
    } else {
        assert_eq!(e.file_type, None, "{rp:?}: directory entry file type without the filetype feature");
    }
    assert_eq!(st.ino, e.ino, "{rp:?}: ino");
    assert_eq!(u32::from(st.mode), meta.mode(), "{rp:?}: mode");
    assert_eq!((st.uid, st.gid), (meta.uid(), meta.gid()), "{rp:?}: owner");
    assert_eq!(st.blksize, ctx.fs.block_size(), "{rp:?}: blksize");
    if want != FileType::Directory {
        assert_eq!(st.size, meta.size(), "{rp:?}: size");
        assert_eq!(u64::from(st.nlink), meta.nlink(), "{rp:?}: link count");
    }
    // mkfs.ext4 -d stores whole seconds, truncated to 32 bits.
    let mtime = meta.mtime();
    if i32::try_from(mtime).is_ok() {
        assert_eq!(st.mtime.sec, mtime, "{rp:?}: mtime");
    }
    let rdev = match want {
        FileType::CharDevice | FileType::BlockDevice => (libc::major(meta.rdev()), libc::minor(meta.rdev())),
        _ => (0, 0),
    };
    assert_eq!(st.rdev, rdev, "{rp:?}: device number");
    if want == FileType::Regular {
        // Allocated space covers the data (holes excepted) and no more
        // than the data rounded up, plus mapping and xattr blocks.
        let bs = u64::from(ctx.fs.block_size());
        let mapped: u64 = ctx.fs.extents(e.ino).unwrap().iter().map(|m| m.len).sum();
        assert!(mapped * bs <= st.blocks * 512, "{rp:?}: mapped {mapped} blocks but i_blocks {}", st.blocks);
        assert!(mapped <= st.size.div_ceil(bs), "{rp:?}: mapped {mapped} blocks beyond the size {}", st.size);
    }
}

/// Data ranges of a source file (SEEK_DATA / SEEK_HOLE).
pub fn data_ranges(f: &File, size: u64) -> Vec<(u64, u64)> {
    let fd = f.as_raw_fd();
    let mut out = Vec::new();
    let mut pos = 0i64;
    while (pos as u64) < size {
        // SAFETY: lseek on an open descriptor.
        let start = unsafe { libc::lseek(fd, pos, libc::SEEK_DATA) };
        if start < 0 {
            break;
        }
        let end = unsafe { libc::lseek(fd, start, libc::SEEK_HOLE) };
        assert!(end > start);
        out.push((start as u64, end as u64));
        pos = end;
    }
    out
}

/// Compares the regions [start, end) of image file `ino` and source `f` in chunks.
fn compare_range(fs: &Filesystem, ino: u32, f: &File, start: u64, end: u64, rp: &Path) -> u64 {
    const CHUNK: usize = (1 << 20) + 333; // not block-aligned on purpose
    let mut a = vec![0u8; CHUNK];
    let mut b = vec![0u8; CHUNK];
    let mut off = start;
    while off < end {
        let n = CHUNK.min((end - off) as usize);
        let got = fs.inodes().read(ino, off, &mut a[..n]).unwrap_or_else(|e| panic!("read {rp:?} at {off}: {e}"));
        assert_eq!(got, n, "{rp:?}: short read at {off}");
        f.read_exact_at(&mut b[..n], off).unwrap();
        if a[..n] != b[..n] {
            let i = a[..n].iter().zip(&b[..n]).position(|(x, y)| x != y).unwrap();
            panic!("{rp:?}: content differs at byte {} (uext4 {:#04x}, source {:#04x})", off + i as u64, a[i], b[i]);
        }
        off += n as u64;
    }
    end - start
}

/// Compares a regular file with its source, byte for byte (sparse giants:
/// every data region of either side plus samples of the holes). Also
/// checks reads at and past the end and a few unaligned slices.
pub fn compare_file(fs: &Filesystem, ino: u32, src: &Path, rp: &Path) -> u64 {
    let f = File::open(src).unwrap();
    let size = f.metadata().unwrap().len();
    let mut compared;
    if size <= 4 << 20 {
        let ours = fs.read_all(ino).unwrap_or_else(|e| panic!("read_all {rp:?}: {e}"));
        let theirs = fs::read(src).unwrap();
        if ours != theirs {
            let i = ours.iter().zip(&theirs).position(|(x, y)| x != y).unwrap_or(ours.len().min(theirs.len()));
            panic!("{rp:?}: content differs at byte {i} (lengths uext4 {}, source {})", ours.len(), theirs.len());
        }
        compared = size;
    } else if size <= 256 << 20 {
        compared = compare_range(fs, ino, &f, 0, size, rp);
    } else {
        let bs = u64::from(fs.block_size());
        let mut regions: Vec<(u64, u64)> = data_ranges(&f, size);
        for m in fs.extents(ino).unwrap() {
            regions.push((m.lblk.byte_offset(bs), m.end().byte_offset(bs).min(size)));
        }
        // Samples of the holes in between: their edges and middles.
        let mut edges = vec![0, size];
        for &(s, e) in &regions {
            edges.extend([s, e]);
        }
        edges.sort_unstable();
        for w in edges.windows(2) {
            let (s, e) = (w[0], w[1]);
            for p in [s, s + (e - s) / 2, e.saturating_sub(4096).max(s)] {
                regions.push((p, (p + 4096).min(size)));
            }
        }
        regions.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (s, e) in regions {
            let (s, e) = (s.saturating_sub(4096), (e + 4096).min(size));
            match merged.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        compared = 0;
        for (s, e) in merged {
            compared += compare_range(fs, ino, &f, s, e, rp);
        }
    }
    // Reads at and past the end, and straddling it.
    let mut buf = [0u8; 64];
    assert_eq!(fs.inodes().read(ino, size, &mut buf).unwrap(), 0, "{rp:?}: read at EOF");
    assert_eq!(fs.inodes().read(ino, size + 12345, &mut buf).unwrap(), 0, "{rp:?}: read past EOF");
    assert_eq!(fs.inodes().read(ino, u64::MAX - 10, &mut buf).unwrap(), 0, "{rp:?}: read at u64::MAX");
    if size > 0 {
        let off = size.saturating_sub(10);
        let n = fs.inodes().read(ino, off, &mut buf).unwrap();
        assert_eq!(n as u64, size - off, "{rp:?}: read straddling EOF");
        let mut theirs = vec![0u8; n];
        f.read_exact_at(&mut theirs, off).unwrap();
        assert_eq!(&buf[..n], &theirs[..], "{rp:?}: tail");
        // Unaligned slices.
        let mut rng = Rng::new(size ^ u64::from(ino));
        for _ in 0..4 {
            let off = rng.below(size);
            let len = (1 + rng.below(9000)).min(size - off) as usize;
            let mut ours = vec![0u8; len];
            let mut theirs = vec![0u8; len];
            assert_eq!(fs.inodes().read(ino, off, &mut ours).unwrap(), len, "{rp:?}: read {len} at {off}");
            f.read_exact_at(&mut theirs, off).unwrap();
            assert!(ours == theirs, "{rp:?}: slice of {len} bytes at {off} differs");
            compared += len as u64;
        }
    }
    compared
}

/// Compares the xattrs of an image inode with those of the source path.
pub fn compare_xattrs(fs: &Filesystem, ino: u32, src: &Path, rp: &Path) {
    let theirs = source_xattrs(src);
    let mut names = fs.list_xattrs(ino).unwrap_or_else(|e| panic!("list_xattrs {rp:?}: {e}"));
    names.sort();
    let want: Vec<Vec<u8>> = theirs.keys().cloned().collect();
    assert_eq!(
        names.iter().map(|n| show(n)).collect::<Vec<_>>(),
        want.iter().map(|n| show(n)).collect::<Vec<_>>(),
        "{rp:?}: xattr names"
    );
    for (name, value) in &theirs {
        let ours = fs.get_xattr(ino, name).unwrap_or_else(|e| panic!("get_xattr {rp:?} {}: {e}", show(name)));
        assert!(ours == *value, "{rp:?}: xattr {} is {:?}, source {:?}", show(name), ours, value);
    }
    match fs.get_xattr(ino, "user.no_such_attribute") {
        Err(Error::NoAttr(_)) => {}
        other => panic!("{rp:?}: absent xattr gave {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// Whole-variant check
// ---------------------------------------------------------------------------

/// Everything the suite checks on one image variant.
pub fn check_variant(name: &str) {
    if !have_e2fsprogs() {
        return;
    }
    let img = image(name);
    let t0 = Instant::now();
    let fs = Filesystem::open(&img.path).unwrap_or_else(|e| panic!("{name}: open: {e}"));
    for n in fs.notices() {
        eprintln!("{name}: notice: {n}");
    }
    check_geometry(&fs, img);

    let walk = walk_and_compare(&fs, img.tree, img.has("filetype"));
    let t_walk = t0.elapsed();

    let mut inos: BTreeSet<u32> = walk.inodes.keys().copied().collect();
    // Special inodes outside the tree: resize inode, journal, quota files,
    // orphan file.
    let sb = fs.superblock();
    let special = [
        (img.has("resize_inode"), 7),
        (img.has("has_journal"), sb.journal_inum),
        (true, sb.usr_quota_inum),
        (true, sb.grp_quota_inum),
        (true, sb.prj_quota_inum),
        (true, sb.orphan_file_inum),
    ];
    for (on, ino) in special {
        if on && ino != 0 {
            inos.insert(ino);
        }
    }
    compare_stats_with_debugfs(&fs, &img.path, &inos);
    let t_stat = t0.elapsed();

    check_big_dir(&fs, img);
    let levels = check_htree(&fs, img);
    eprintln!(
        "{name}: {} inodes, {} files, {} MiB compared; walk {:.1?}, debugfs stat {:.1?}, big dir {:.1?}; bigdir htree \
         levels {levels:?}",
        inos.len(),
        walk.files,
        walk.bytes >> 20,
        t_walk,
        t_stat - t_walk,
        t0.elapsed() - t_stat,
    );
}

fn check_geometry(fs: &Filesystem, img: &Image) {
    let v = img.variant;
    assert_eq!(fs.block_size(), v.block_size, "{}: block size", v.name);
    let sb = fs.superblock();
    assert_eq!(sb.blocks_count, img.header_num("Block count"), "{}: block count", v.name);
    assert_eq!(u64::from(sb.inodes_count), img.header_num("Inode count"), "{}: inode count", v.name);
    assert_eq!(u64::from(sb.inode_size), img.header_num("Inode size"), "{}: inode size", v.name);
    let st = fs.statfs();
    assert_eq!(st.block_size, v.block_size);
    assert_eq!(st.blocks, img.header_num("Block count"));
    assert_eq!(st.free_blocks, img.header_num("Free blocks"), "{}: free blocks", v.name);
    assert_eq!(st.free_inodes, img.header_num("Free inodes"), "{}: free inodes", v.name);
    assert_eq!(st.inodes, img.header_num("Inode count"));
    assert_eq!(st.avail_blocks, st.free_blocks - img.header_num("Reserved block count"));
    assert_eq!(st.name_max, 255);
    assert_eq!(fs.group_descs().len() as u64, sb.group_count(), "{}: group count", v.name);
}

/// readdir in chunks via cookies, lookups of every name (htree) and of
/// absent names.
pub fn check_big_dir(fs: &Filesystem, img: &Image) {
    let name = img.variant.name;
    let dir = fs.resolve("/bigdir").unwrap();
    let all = fs.read_dir_all(dir).unwrap();
    assert_eq!(all.len(), img.tree.big_dir_names.len() + 2, "{name}: bigdir entry count");

    // Chunks of 100 (and a first stretch of single entries) via next_cookie.
    let mut seen: Vec<DirEntry> = Vec::new();
    let mut cookie = 0;
    let mut calls = 0;
    loop {
        let max = if calls < 50 { 1 } else { 100 };
        let chunk = fs.readdir(dir, cookie, max).unwrap();
        calls += 1;
        assert!(calls <= all.len() + 10, "{name}: readdir does not terminate");
        if chunk.is_empty() {
            break;
        }
        assert!(chunk.len() <= max, "{name}: readdir returned {} > {max}", chunk.len());
        cookie = chunk.last().unwrap().next_cookie;
        seen.extend(chunk);
    }
    assert_eq!(seen.len(), all.len(), "{name}: chunked readdir saw {} entries, read_dir_all {}", seen.len(), all.len());
    let mut a: Vec<(Vec<u8>, u32)> = seen.iter().map(|e| (e.name.clone(), e.ino)).collect();
    let mut b: Vec<(Vec<u8>, u32)> = all.iter().map(|e| (e.name.clone(), e.ino)).collect();
    a.sort();
    b.sort();
    assert!(a == b, "{name}: chunked readdir differs from read_dir_all");
    assert!(a.windows(2).all(|w| w[0].0 != w[1].0), "{name}: an entry was returned twice");
    assert!(fs.readdir(dir, cookie, 10).unwrap().is_empty(), "{name}: readdir after the end");
    assert!(fs.readdir(dir, u64::MAX, 10).unwrap().is_empty(), "{name}: readdir at u64::MAX");
    // Resuming from any entry's cookie continues right after it.
    for i in [0, 1, 2, all.len() / 2, all.len() - 2] {
        let next = fs.readdir(dir, all[i].next_cookie, 1).unwrap();
        assert_eq!(next.first().map(|e| &e.name), all.get(i + 1).map(|e| &e.name), "{name}: resume after entry {i}");
    }

    // Lookups: every name (through the index when the directory has one).
    let by_name: HashMap<&[u8], u32> = all.iter().map(|e| (&e.name[..], e.ino)).collect();
    for n in &img.tree.big_dir_names {
        match fs.lookup(dir, n) {
            Ok(ino) => assert_eq!(ino, by_name[&n[..]], "{name}: lookup {}", show(n)),
            Err(e) => panic!("{name}: lookup {} in bigdir: {e}", show(n)),
        }
    }
    // Absent names, some differing from present ones in one byte or length.
    let mut absent: Vec<Vec<u8>> = vec![b"zzz".to_vec(), b"E00001_".to_vec(), b"e".to_vec(), b"...".to_vec()];
    for n in img.tree.big_dir_names.iter().step_by(97) {
        let mut a = n.clone();
        a.push(b'!');
        absent.push(a);
        let mut b = n.clone();
        let last = b.len() - 1;
        b[last] ^= 0x20;
        absent.push(b);
        absent.push(n[..n.len() - 1].to_vec());
        absent.push(n.iter().map(|c| c.to_ascii_uppercase()).collect());
    }
    absent.retain(|a| a.len() <= 255 && !a.contains(&0) && !a.contains(&b'/') && !by_name.contains_key(&a[..]));
    for a in &absent {
        match fs.lookup(dir, a) {
            Err(Error::NotFound(_)) => {}
            other => panic!("{name}: lookup of absent {} gave {other:?}", show(a)),
        }
    }
}

/// Asserts the htree shape the variant promises; returns the depth.
pub fn check_htree(fs: &Filesystem, img: &Image) -> Option<u32> {
    let v = img.variant;
    let levels = htree_levels(&img.path, "/bigdir");
    let st = fs.stat(fs.resolve("/bigdir").unwrap()).unwrap();
    let flags = st.flags;
    // e2fsck -D indexes directories of more than one block.
    if v.index_dirs && img.has("dir_index") && st.size > u64::from(v.block_size) {
        assert!(levels.is_some(), "{}: bigdir is not hash-indexed", v.name);
        assert_ne!(flags & 0x1000, 0, "{}: bigdir lacks the INDEX flag", v.name);
    } else {
        assert_eq!(levels, None, "{}: bigdir unexpectedly indexed", v.name);
    }
    if let Some(min) = v.min_htree_levels {
        assert!(levels.unwrap_or(0) >= min, "{}: bigdir htree has {levels:?} indirect levels, want >= {min}", v.name);
    }
    levels
}
