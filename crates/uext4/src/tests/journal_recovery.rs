//! Journal recovery (jbd2 replay).
//!
//! - Kernel-made journals (root, loop mounts): images whose log the kernel
//!   flushed but never checkpointed (EXT4_IOC_SHUTDOWN with LOGFLUSH), in
//!   several journal formats (csum v3 with 64-bit tags, 1 KiB blocks, no
//!   checksums, checksum v1 with 32-bit tags, async commit, data=journal
//!   with a log that wraps). Copy A is recovered in place by uext4 and must
//!   pass `e2fsck -fn`; copy B is recovered by the kernel; their trees (read
//!   through uext4) must be identical, and so must the tree of the
//!   original opened read-only (replayed in memory, the file unchanged).
//! - Synthetic journals written with uext4's encoders (no root): revokes,
//!   escaped blocks, a log that wraps, a journalled superblock, a torn log
//!   end, bad commit and data checksums, in every tag format; the exact set
//!   of blocks written is checked.
//! - Corrupt journals: bit flips and wild values give errors or a clean
//!   stop, never a panic, a hang or a write outside the filesystem.
//!
//! Without root, e2fsprogs or working loop mounts the affected tests print
//! "SKIP: <reason>" and pass.

use super::common;
use super::rw_support;

use common::{have_e2fsprogs, run, tool};
use rw_support::KernelMount;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use uext4::device::{BlockDevice, FileDevice, MemoryDevice, OverlayDevice};
use uext4::format::checksum::crc32c;
use uext4::format::journal::{
    self as jf, blocktype, feature, tag_flag, BlockHeader, BlockTag, CommitBlock, JournalFeatures, JournalSuperblock,
    RevokeBlock, JBD2_MAGIC,
};
use uext4::journal::{recover, Journal, RecoveryReport};
use uext4::volume::Volume;
use uext4::{CorruptKind, Error, FileType, Filesystem, Location, MountOptions, Structure};

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// A scratch directory (in /dev/shm when possible), removed on drop.
fn scratch(tag: &str) -> tempfile::TempDir {
    let base = std::env::var_os("UEXT4_TEST_TMPDIR").map(PathBuf::from).unwrap_or_else(|| {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() && fs::metadata(shm).map(|m| !m.permissions().readonly()).unwrap_or(false) {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    });
    tempfile::Builder::new().prefix(&format!("uext4-jr-{tag}-")).tempdir_in(base).unwrap()
}

fn mkfs(img: &Path, block_size: u32, size: &str, extra: &[&str]) {
    run(
        Command::new(tool("mkfs.ext4").unwrap())
            .args(["-q", "-F", "-t", "ext4", "-b", &block_size.to_string()])
            .args(extra)
            .arg(img)
            .arg(size),
        &[0],
    );
}

/// `e2fsck -fn`: panics with its output unless the image is clean.
fn fsck_clean(img: &Path, what: &str) {
    let out = Command::new(tool("e2fsck").unwrap()).arg("-fn").arg(img).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: e2fsck -fn is not clean\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fresh 64 MiB image with 4 KiB blocks (and `extra` mkfs arguments)
/// in a scratch directory, mounted by the kernel at its `mnt`; None, with
/// the reason printed, when that cannot be done here.
fn mounted_image(tag: &str, extra: &[&str]) -> Option<(tempfile::TempDir, PathBuf, PathBuf, KernelMount)> {
    if !have_e2fsprogs() || !rw_support::require_loop_mount() {
        return None;
    }
    let dir = scratch(tag);
    let img = dir.path().join("img");
    mkfs(&img, 4096, "64M", extra);
    let mnt = dir.path().join("mnt");
    let m = KernelMount::at(&img, &mnt, "").unwrap_or_else(|e| panic!("{tag}: kernel mount: {e}"));
    Some((dir, img, mnt, m))
}

fn dumpe2fs_h(img: &Path) -> String {
    let out = run(Command::new(tool("dumpe2fs").unwrap()).arg("-h").arg(img), &[0]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn needs_recovery_flag(img: &Path) -> bool {
    dumpe2fs_h(img).lines().any(|l| l.starts_with("Filesystem features:") && l.contains("needs_recovery"))
}

/// xorshift64*.
struct Rng(u64);
impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }
}

fn file_hash(path: &Path) -> (u64, u32) {
    let mut f = File::open(path).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let (mut len, mut crc) = (0u64, 0u32);
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            return (len, crc);
        }
        crc = crc32c(crc, &buf[..n]);
        len += n as u64;
    }
}

/// Everything uext4 reports about a file, for comparing trees.
#[derive(Debug, PartialEq, Eq)]
struct Node {
    stat: uext4::Stat,
    content: Option<(usize, u32)>,
    link: Option<Vec<u8>>,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The whole tree of a filesystem, by path.
fn snapshot(fs: &Filesystem) -> BTreeMap<Vec<u8>, Node> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(b"/".to_vec(), fs.root())];
    while let Some((path, ino)) = stack.pop() {
        let stat = fs.stat(ino).unwrap_or_else(|e| panic!("stat {}: {e}", String::from_utf8_lossy(&path)));
        let mut xattrs = Vec::new();
        for name in fs.list_xattrs(ino).unwrap() {
            let v = fs.get_xattr(ino, &name).unwrap();
            xattrs.push((name, v));
        }
        let (mut content, mut link) = (None, None);
        match stat.file_type {
            FileType::Regular => {
                let d = fs.read_all(ino).unwrap();
                content = Some((d.len(), crc32c(0, &d)));
            }
            FileType::Symlink => link = Some(fs.readlink(ino).unwrap()),
            FileType::Directory => {
                for e in fs.read_dir_all(ino).unwrap() {
                    if e.name == b"." || e.name == b".." {
                        continue;
                    }
                    let mut p = path.clone();
                    if p.len() > 1 {
                        p.push(b'/');
                    }
                    p.extend_from_slice(&e.name);
                    stack.push((p, e.ino));
                }
            }
            _ => {}
        }
        out.insert(path, Node { stat, content, link, xattrs });
    }
    out
}

fn assert_same_tree(a: &BTreeMap<Vec<u8>, Node>, b: &BTreeMap<Vec<u8>, Node>, what: &str) {
    let ka: BTreeSet<_> = a.keys().collect();
    let kb: BTreeSet<_> = b.keys().collect();
    let only_a: Vec<_> = ka.difference(&kb).map(|k| String::from_utf8_lossy(k)).collect();
    let only_b: Vec<_> = kb.difference(&ka).map(|k| String::from_utf8_lossy(k)).collect();
    assert!(only_a.is_empty() && only_b.is_empty(), "{what}: paths only in A {only_a:?}, only in B {only_b:?}");
    for (k, na) in a {
        assert_eq!(na, &b[k], "{what}: {} differs", String::from_utf8_lossy(k));
    }
}

/// Records the byte ranges written through it.
struct Recorder {
    inner: Arc<dyn BlockDevice>,
    writes: Mutex<Vec<(u64, usize)>>,
}

impl Recorder {
    fn new(inner: Arc<dyn BlockDevice>) -> Arc<Recorder> {
        Arc::new(Recorder { inner, writes: Mutex::new(Vec::new()) })
    }
    fn writes(&self) -> Vec<(u64, usize)> {
        self.writes.lock().unwrap().clone()
    }
}

impl BlockDevice for Recorder {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.writes.lock().unwrap().push((offset, buf.len()));
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_only(&self) -> bool {
        self.inner.read_only()
    }
}

fn read_dev(dev: &dyn BlockDevice, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    dev.read_at(&mut b, off).unwrap();
    b
}

/// Rewrites the ext4 superblock through `f` (checksum recomputed).
fn edit_ext4_sb(dev: &dyn BlockDevice, f: impl FnOnce(&mut [u8])) {
    let mut raw = read_dev(dev, 1024, 1024);
    f(&mut raw);
    if u32::from_le_bytes(raw[0x64..0x68].try_into().unwrap()) & 0x400 != 0 {
        let c = crc32c(!0, &raw[..0x3FC]);
        raw[0x3FC..].copy_from_slice(&c.to_le_bytes());
    }
    dev.write_at(&raw, 1024).unwrap();
}

fn ext4_incompat(dev: &dyn BlockDevice) -> u32 {
    u32::from_le_bytes(read_dev(dev, 1024 + 0x60, 4).try_into().unwrap())
}

const RECOVER: u32 = 0x4;

// ---------------------------------------------------------------------------
// Kernel-made journals
// ---------------------------------------------------------------------------

fn syncfs(dir: &Path) {
    let f = File::open(dir).unwrap();
    // SAFETY: syncfs on an open descriptor.
    assert_eq!(unsafe { libc::syncfs(f.as_raw_fd()) }, 0);
}

/// EXT4_IOC_SHUTDOWN = _IOR('X', 125, __u32).
const EXT4_IOC_SHUTDOWN: libc::c_ulong = 0x8004_587D;
/// Flush the log, then shut down (no checkpoint).
const EXT4_GOING_FLAGS_LOGFLUSH: u32 = 0x1;
/// Shut down without flushing the log.
const EXT4_GOING_FLAGS_NOLOGFLUSH: u32 = 0x2;

fn shutdown_logflush(dir: &Path) -> std::io::Result<()> {
    shutdown(dir, EXT4_GOING_FLAGS_LOGFLUSH)
}

fn shutdown(dir: &Path, flags: u32) -> std::io::Result<()> {
    let f = File::open(dir)?;
    // SAFETY: the ioctl reads one u32 through the pointer, which points at
    // a live u32; the descriptor is open for the call.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), EXT4_IOC_SHUTDOWN as _, &flags as *const u32) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn write_file(path: &Path, data: &[u8], fsync: bool) {
    let mut f = File::create(path).unwrap();
    f.write_all(data).unwrap();
    if fsync {
        f.sync_all().unwrap();
    }
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: valid C strings and a live value buffer.
    let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(r, 0, "setxattr {path:?}: {}", std::io::Error::last_os_error());
}

/// Creates, overwrites, renames and deletes files, syncing half way, so
/// that the log holds committed transactions of every kind of change.
fn workload(mnt: &Path, seed: u64, big_mib: usize) {
    let mut rng = Rng::new(seed);
    for d in 0..4 {
        fs::create_dir(mnt.join(format!("d{d}"))).unwrap();
    }
    let mut files: Vec<PathBuf> = Vec::new();
    for i in 0..160 {
        let p = mnt.join(format!("d{}", i % 4)).join(format!("file-{i:04}"));
        let len = rng.below(12_000) as usize;
        write_file(&p, &rng.bytes(len), false);
        files.push(p);
    }
    std::os::unix::fs::symlink("d0/file-0000", mnt.join("link-short")).unwrap();
    std::os::unix::fs::symlink("x".repeat(200), mnt.join("link-long")).unwrap();
    fs::hard_link(&files[5], mnt.join("d2/hard-5")).unwrap();
    write_file(&mnt.join("big1"), &rng.bytes(1 << 20), false);
    set_xattr(&files[1], "user.phase", b"one");
    syncfs(mnt);

    // Phase 2: these changes live only in the log.
    for p in files.iter().take(40).skip(10) {
        let mut f = fs::OpenOptions::new().write(true).open(p).unwrap();
        let off = rng.below(8000);
        use std::io::{Seek, SeekFrom};
        f.seek(SeekFrom::Start(off)).unwrap();
        f.write_all(&rng.bytes(3000)).unwrap();
        f.sync_all().unwrap();
    }
    for (k, p) in files.iter().enumerate().skip(40).take(20) {
        let to = mnt.join(format!("d{}", (k + 1) % 4)).join(format!("renamed-{k}"));
        fs::rename(p, to).unwrap();
    }
    for p in files.iter().skip(60).take(40) {
        fs::remove_file(p).unwrap();
    }
    for p in files.iter().skip(100).take(5) {
        let f = fs::OpenOptions::new().write(true).open(p).unwrap();
        f.set_len(rng.below(3000)).unwrap();
        f.sync_all().unwrap();
    }
    let nested = mnt.join("n1/n2/n3");
    fs::create_dir_all(&nested).unwrap();
    for i in 0..60 {
        let len = rng.below(5000) as usize;
        write_file(&nested.join(format!("nested-{i}")), &rng.bytes(len), i % 3 != 0);
    }
    write_file(&mnt.join("big2"), &rng.bytes(big_mib << 20), true);
    {
        let mut f = fs::OpenOptions::new().write(true).open(mnt.join("big1")).unwrap();
        use std::io::{Seek, SeekFrom};
        f.seek(SeekFrom::Start(300_000)).unwrap();
        f.write_all(&rng.bytes(200_000)).unwrap();
        f.sync_all().unwrap();
    }
    set_xattr(&files[2], "user.phase", b"two");
    // Blocks that start with the jbd2 magic: escaped when data is journalled.
    let mut magic = rng.bytes(64 << 10);
    for chunk in magic.chunks_mut(1024) {
        chunk[..4].copy_from_slice(&JBD2_MAGIC.to_be_bytes());
    }
    write_file(&mnt.join("magic"), &magic, true);
    fs::remove_dir_all(mnt.join("d3")).unwrap();
    let mut perms = fs::metadata(&files[4]).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o600);
    fs::set_permissions(&files[4], perms).unwrap();
    fs::create_dir(mnt.join("late")).unwrap();
    for i in 0..30 {
        write_file(&mnt.join(format!("late/l{i}")), &rng.bytes(100 + i * 10), true);
    }
}

struct Variant {
    name: &'static str,
    block_size: u32,
    size: &'static str,
    mkfs: &'static [&'static str],
    mount: &'static str,
    big_mib: usize,
    /// Expected journal features (all must be present).
    expect: u32,
    expect_compat: u32,
    /// The log must wrap and contain escaped blocks (data=journal).
    wraps: bool,
}

const VARIANTS: &[Variant] = &[
    Variant {
        name: "4k-csum3-64bit",
        block_size: 4096,
        size: "128M",
        mkfs: &["-J", "size=4"],
        mount: "",
        big_mib: 3,
        expect: feature::INCOMPAT_CSUM_V3 | feature::INCOMPAT_64BIT,
        wraps: false,
        expect_compat: 0,
    },
    Variant {
        name: "4k-csum3-datajournal-wrap",
        block_size: 4096,
        size: "96M",
        mkfs: &["-J", "size=4"],
        mount: "data=journal",
        big_mib: 6,
        expect: feature::INCOMPAT_CSUM_V3 | feature::INCOMPAT_64BIT,
        wraps: true,
        expect_compat: 0,
    },
    Variant {
        name: "1k-csum3-datajournal-wrap",
        block_size: 1024,
        size: "64M",
        mkfs: &["-J", "size=1"],
        mount: "data=journal",
        big_mib: 2,
        expect: feature::INCOMPAT_CSUM_V3 | feature::INCOMPAT_64BIT,
        wraps: true,
        expect_compat: 0,
    },
    Variant {
        name: "1k-csum3-64bit",
        block_size: 1024,
        size: "64M",
        mkfs: &["-J", "size=1"],
        mount: "",
        big_mib: 2,
        expect: feature::INCOMPAT_CSUM_V3 | feature::INCOMPAT_64BIT,
        wraps: false,
        expect_compat: 0,
    },
    Variant {
        name: "4k-nocsum",
        block_size: 4096,
        size: "96M",
        mkfs: &["-O", "^metadata_csum", "-J", "size=4"],
        mount: "",
        big_mib: 3,
        expect: 0,
        wraps: false,
        expect_compat: 0,
    },
    Variant {
        name: "1k-csum1-32bit",
        block_size: 1024,
        size: "48M",
        mkfs: &["-O", "^metadata_csum,^64bit", "-J", "size=2"],
        mount: "journal_checksum",
        big_mib: 2,
        expect: 0,
        wraps: false,
        expect_compat: feature::COMPAT_CHECKSUM,
    },
    Variant {
        name: "4k-csum3-async",
        block_size: 4096,
        size: "96M",
        mkfs: &["-J", "size=4"],
        mount: "data=journal,journal_async_commit",
        big_mib: 2,
        expect: feature::INCOMPAT_CSUM_V3 | feature::INCOMPAT_ASYNC_COMMIT,
        wraps: true,
        expect_compat: 0,
    },
];

fn journal_of(img: &Path) -> Journal {
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(img, false).unwrap());
    let vol = Volume::open(dev, 64).unwrap();
    Journal::open(&vol).unwrap().unwrap()
}

/// Escaped tags in the descriptors of transactions `first..first+n`.
fn escaped_tags(j: &Journal, img: &Path, first: u32, n: u32) -> usize {
    let dev = FileDevice::open(img, false).unwrap();
    let bs = u64::from(j.sb.block_size);
    let mut count = 0;
    for b in j.sb.first..j.sb.log_end() {
        let block = read_dev(&dev, j.map.physical(u64::from(b)).unwrap() * bs, bs as usize);
        let Some(h) = BlockHeader::parse(&block) else { continue };
        if h.is_journal_block() && h.blocktype == blocktype::DESCRIPTOR && h.sequence.wrapping_sub(first) < n {
            count += jf::parse_tags(&block, &j.sb.features).iter().filter(|t| t.escaped()).count();
        }
    }
    count
}

/// Runs one variant (panics on any failure). Where the log ends is up
/// to the kernel's checkpointing: a variant that must wrap is retried with
/// other data until its log does.
fn kernel_variant(v: &Variant, seed: u64) {
    const ATTEMPTS: u64 = 8;
    for attempt in 0..ATTEMPTS {
        if kernel_attempt(v, seed + 1000 * attempt) {
            return;
        }
        eprintln!("{}: attempt {attempt}: the log did not wrap, retrying", v.name);
    }
    panic!("{}: the log never wrapped in {ATTEMPTS} attempts", v.name);
}

/// One run of a variant; false if it had to wrap and did not.
fn kernel_attempt(v: &Variant, seed: u64) -> bool {
    let t0 = Instant::now();
    let dir = scratch(v.name);
    let img = dir.path().join("orig.img");
    mkfs(&img, v.block_size, v.size, v.mkfs);
    let mnt = dir.path().join("mnt");
    let m = KernelMount::at(&img, &mnt, v.mount).unwrap_or_else(|e| panic!("{}: kernel mount: {e}", v.name));
    workload(&mnt, seed, v.big_mib);
    shutdown_logflush(&mnt).unwrap_or_else(|e| panic!("{}: EXT4_IOC_SHUTDOWN failed: {e}", v.name));
    m.unmount();

    assert!(needs_recovery_flag(&img), "{}: image does not need recovery after the shutdown", v.name);
    let j = journal_of(&img);
    assert_ne!(j.sb.start, 0, "{}: the log is empty", v.name);
    assert_eq!(j.sb.features.incompat & v.expect, v.expect, "{}: journal features {:?}", v.name, j.sb.features);
    assert_eq!(j.sb.features.compat & v.expect_compat, v.expect_compat, "{}: {:?}", v.name, j.sb.features);
    let orig_hash = file_hash(&img);

    // (a) uext4 recovers copy A in place.
    let a = dir.path().join("a.img");
    fs::copy(&img, &a).unwrap();
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(&a, true).unwrap());
    let report: RecoveryReport = recover(dev).unwrap_or_else(|e| panic!("{}: recovery failed: {e}", v.name));
    eprintln!("{}: {report:?}", v.name);
    assert!(report.needed && report.modified, "{}: {report:?}", v.name);
    assert!(report.transactions > 0 && report.blocks_replayed > 0, "{}: {report:?}", v.name);
    assert_eq!(report.next_tid, report.first_tid.wrapping_add(report.transactions).wrapping_add(1));
    assert!(!needs_recovery_flag(&a), "{}: needs_recovery still set", v.name);
    if v.wraps {
        if report.log_head >= report.log_start {
            return false;
        }
        let escaped = escaped_tags(&j, &img, report.first_tid, report.transactions);
        assert!(escaped > 0, "{}: no escaped block in the log", v.name);
    }
    let ja = journal_of(&a);
    assert_eq!((ja.sb.start, ja.sb.sequence), (0, report.next_tid), "{}", v.name);
    fsck_clean(&a, &format!("{} (recovered by uext4)", v.name));
    let fs_a = Filesystem::open(&a).unwrap();
    assert!(fs_a.notices().is_empty(), "{}: {:?}", v.name, fs_a.notices());
    let tree_a = snapshot(&fs_a);
    assert!(tree_a.contains_key(b"/late/l29".as_slice()), "{}: the last changes are missing", v.name);
    assert!(!tree_a.contains_key(b"/d3".as_slice()), "{}: d3 was deleted", v.name);
    // Recovering again is a no-op.
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(&a, true).unwrap());
    let again = recover(dev).unwrap();
    assert!(!again.needed && !again.modified && again.transactions == 0, "{}: {again:?}", v.name);

    // (b) the kernel recovers copy B.
    let b = dir.path().join("b.img");
    fs::copy(&img, &b).unwrap();
    let mb = KernelMount::at(&b, &dir.path().join("mnt-b"), "")
        .unwrap_or_else(|e| panic!("{}: kernel recovery mount: {e}", v.name));
    mb.unmount();
    assert!(!needs_recovery_flag(&b));
    let tree_b = snapshot(&Filesystem::open(&b).unwrap());
    assert_same_tree(&tree_a, &tree_b, &format!("{}: uext4 recovery vs kernel recovery", v.name));

    // (c) the original, opened read-only: replayed in memory, file untouched.
    let fs_o = Filesystem::open(&img).unwrap();
    let want = format!("the journal was replayed in memory ({} transaction(s))", report.transactions);
    assert!(fs_o.notices().iter().any(|n| n.starts_with(&want)), "{}: notices {:?}", v.name, fs_o.notices());
    assert!(!fs_o.superblock().needs_recovery());
    assert_same_tree(&tree_a, &snapshot(&fs_o), &format!("{}: in-memory replay vs in-place", v.name));
    drop(fs_o);
    assert_eq!(file_hash(&img), orig_hash, "{}: the read-only open modified the image", v.name);
    assert!(needs_recovery_flag(&img));
    // (d) norecovery: read-only without the replay; read-write refused.
    let norec = |write| uext4::MountOptions { write, norecovery: true, ..Default::default() };
    let fs_n = Filesystem::open_with(&img, norec(false)).unwrap();
    assert!(fs_n.superblock().needs_recovery(), "{}: norecovery replayed", v.name);
    assert!(fs_n.notices().iter().any(|n| n.contains("not replayed")), "{}: {:?}", v.name, fs_n.notices());
    drop(fs_n);
    let e = Filesystem::open_with(&img, norec(true)).map(drop).expect_err("read-write norecovery");
    assert_eq!(e.errno(), libc::EROFS, "{}: {e}", v.name);
    assert_eq!(file_hash(&img), orig_hash, "{}: a norecovery open modified the image", v.name);
    eprintln!("{}: {} paths, {:.1}s", v.name, tree_a.len(), t0.elapsed().as_secs_f64());
    true
}

/// Every variant runs and must pass: none may skip once loop mounts
/// work here.
#[test]
fn kernel_made_journals() {
    if !have_e2fsprogs() || !rw_support::require_loop_mount() {
        return;
    }
    std::thread::scope(|s| {
        let handles: Vec<_> =
            VARIANTS.iter().enumerate().map(|(i, v)| s.spawn(move || kernel_variant(v, 1000 + i as u64))).collect();
        for h in handles {
            h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        }
    });
}

/// Fast commits: the journal layer's `recover` (no fast-commit replay)
/// refuses before writing anything (naming fast_commit) and its
/// `replay_in_memory` gives the full commits and reports the skipped fast
/// commits; the filesystem's opens (read-only and read-write) replay them,
/// so the fsynced files are there (more in tests/fast_commit.rs).
#[test]
fn kernel_fast_commit_journal() {
    let extra = ["-O", "fast_commit", "-E", "lazy_itable_init=0,lazy_journal_init=0"];
    let Some((dir, img, mnt, m)) = mounted_image("fc", &extra) else { return };
    fs::create_dir(mnt.join("full")).unwrap();
    for i in 0..20 {
        write_file(&mnt.join(format!("full/f{i}")), format!("full commit {i}\n").as_bytes(), false);
    }
    syncfs(&mnt);
    fs::create_dir(mnt.join("more")).unwrap();
    syncfs(&mnt);
    // fsync of a new file in an already committed directory: a fast commit.
    for i in 0..10 {
        write_file(&mnt.join(format!("more/g{i}")), &[b'x'; 5000], true);
    }
    // Without flushing the log: a log flush would commit the running
    // transaction in full, which supersedes the fast commits.
    // EXT4_IOC_SHUTDOWN is in every kernel since 4.10: a failure is one.
    shutdown(&mnt, EXT4_GOING_FLAGS_NOLOGFLUSH).unwrap_or_else(|e| panic!("EXT4_IOC_SHUTDOWN failed: {e}"));
    m.unmount();
    let j = journal_of(&img);
    assert!(j.sb.features.fast_commit(), "{:?}", j.sb.features);

    let a = dir.path().join("a.img");
    fs::copy(&img, &a).unwrap();
    let before = fs::read(&a).unwrap();
    match recover(Arc::new(FileDevice::open(&a, true).unwrap())) {
        Err(Error::Unsupported(msg)) => assert!(msg.contains("fast_commit"), "{msg}"),
        other => panic!("recovery with fast commits: {other:?}"),
    }
    assert!(fs::read(&a).unwrap() == before, "the refused recovery wrote to the image");
    assert!(needs_recovery_flag(&a));

    let (ov, r) = uext4::journal::replay_in_memory(Arc::new(FileDevice::open(&img, false).unwrap())).unwrap();
    assert!(r.fast_commits_skipped && r.fast_commits > 0, "{r:?}");
    assert!(r.warnings.iter().any(|w| w.contains("fast commit")), "{r:?}");
    let fs_a = Filesystem::open_device(ov, MountOptions::default()).unwrap();
    for i in 0..20 {
        let ino = fs_a.resolve(format!("/full/f{i}")).unwrap();
        assert_eq!(fs_a.read_all(ino).unwrap(), format!("full commit {i}\n").as_bytes());
    }
    assert!(fs_a.resolve("/more").is_ok());

    // The read-only open says so too.
    let fs_o = Filesystem::open(&img).unwrap();
    assert!(fs_o.notices().iter().any(|n| n.contains("fast commit(s) replayed")), "{:?}", fs_o.notices());
    let fs_w = Filesystem::open_rw(&a).unwrap();
    for f in [&fs_o, &fs_w] {
        for i in 0..10 {
            let ino = f.resolve(format!("/more/g{i}")).unwrap();
            assert_eq!(f.read_all(ino).unwrap(), vec![b'x'; 5000]);
        }
    }
    drop(fs_w);
    assert!(!needs_recovery_flag(&a));
    fsck_clean(&a, "after uext4's fast-commit replay");
}

// ---------------------------------------------------------------------------
// Synthetic journals
// ---------------------------------------------------------------------------

/// A fresh image in memory with its journal located.
struct Fixture {
    bytes: Vec<u8>,
    bs: usize,
    blocks: u64,
    jmap: Vec<u64>,
    jsb: JournalSuperblock,
}

fn fixture(block_size: u32) -> Option<Fixture> {
    if !have_e2fsprogs() {
        return None;
    }
    let dir = scratch("fixture");
    let img = dir.path().join("f.img");
    let size = if block_size == 1024 { "8M" } else { "32M" };
    let journal = if block_size == 1024 { "size=1" } else { "size=4" };
    mkfs(&img, block_size, size, &["-J", journal]);
    let bytes = fs::read(&img).unwrap();
    let dev: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::from_bytes(&bytes));
    let vol = Volume::open(dev, 64).unwrap();
    let j = Journal::open(&vol).unwrap().unwrap();
    let jmap = (0..u64::from(j.sb.maxlen)).map(|b| j.map.physical(b).unwrap()).collect();
    Some(Fixture { bytes, bs: vol.block_size, blocks: vol.sb.blocks_count, jmap, jsb: j.sb })
}

/// Writes a log with uext4's encoders.
struct LogBuilder<'a> {
    dev: &'a dyn BlockDevice,
    fx: &'a Fixture,
    f: JournalFeatures,
    seed: u32,
    pos: u32,
    first: u32,
    last: u32,
    crc: u32,
    /// Journal block of every block written, in order.
    placed: Vec<u32>,
}

impl<'a> LogBuilder<'a> {
    fn new(dev: &'a dyn BlockDevice, fx: &'a Fixture, f: JournalFeatures, start: u32) -> LogBuilder<'a> {
        let mut sb = fx.jsb.clone();
        sb.features = f;
        LogBuilder {
            dev,
            fx,
            f,
            seed: sb.csum_seed(),
            pos: start,
            first: sb.first,
            last: sb.log_end(),
            crc: !0,
            placed: Vec::new(),
        }
    }

    fn put(&mut self, block: &[u8]) -> u32 {
        let at = self.pos;
        self.dev.write_at(block, self.fx.jmap[at as usize] * self.fx.bs as u64).unwrap();
        self.placed.push(at);
        self.pos += 1;
        if self.pos >= self.last {
            self.pos = self.first;
        }
        at
    }

    /// A descriptor and its data blocks; returns the journal blocks of the
    /// data, in order.
    fn descriptor(&mut self, tid: u32, entries: &[(u64, Vec<u8>)]) -> Vec<u32> {
        let mut tags = Vec::new();
        let mut logged = Vec::new();
        for (i, (target, data)) in entries.iter().enumerate() {
            let mut d = data.clone();
            let mut flags = if i == 0 { 0 } else { tag_flag::SAME_UUID };
            if jf::escape_block(&mut d) {
                flags |= tag_flag::ESCAPE;
            }
            if i + 1 == entries.len() {
                flags |= tag_flag::LAST_TAG;
            }
            let checksum = jf::tag_checksum_value(&self.f, self.seed, tid, &d);
            tags.push(BlockTag { block: *target, flags, checksum, uuid: (i == 0).then_some(self.fx.jsb.uuid) });
            logged.push(d);
        }
        let mut desc = vec![0u8; self.fx.bs];
        jf::encode_descriptor(&mut desc, tid, &tags, &self.f, self.seed).unwrap();
        self.crc = jf::crc32_be(self.crc, &desc);
        self.put(&desc);
        let mut at = Vec::new();
        for d in logged {
            self.crc = jf::crc32_be(self.crc, &d);
            at.push(self.put(&d));
        }
        at
    }

    fn revoke(&mut self, tid: u32, blocks: &[u64]) -> u32 {
        let mut b = vec![0u8; self.fx.bs];
        RevokeBlock { sequence: tid, records: blocks.to_vec() }.encode(&mut b, &self.f, self.seed).unwrap();
        self.put(&b)
    }

    /// A commit block; `good == false` makes its checksum wrong (with
    /// checksums on).
    fn commit(&mut self, tid: u32, sec: u64, good: bool) -> u32 {
        let mut c = CommitBlock { sequence: tid, commit_sec: sec, commit_nsec: 5, ..Default::default() };
        if self.f.checksum_v1() {
            c.chksum_type = jf::checksum_type::CRC32;
            c.chksum_size = 4;
            c.chksum[0] = if good { self.crc } else { !self.crc };
        }
        let mut b = vec![0u8; self.fx.bs];
        c.encode(&mut b, &self.f, self.seed).unwrap();
        if !good && self.f.csum_v2or3() {
            // Damage the stored checksum itself.
            b[0x10] ^= 0x40;
        }
        self.crc = !0;
        self.put(&b)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tail {
    /// The log ends after T102.
    Clean,
    /// T103: a descriptor and data but no commit block.
    Torn,
    /// T103 complete but its commit checksum is wrong.
    BadCommit,
}

struct Scenario {
    base: Arc<MemoryDevice>,
    /// A is logged in T100 (revoked by T101) and T102; B is escaped; C is
    /// in T101; D only in T103.
    a: u64,
    b: u64,
    c: u64,
    d: u64,
    a2: Vec<u8>,
    b1: Vec<u8>,
    c1: Vec<u8>,
    sb_block: u64,
    /// Journal blocks of the log's blocks, in order.
    placed: Vec<u32>,
    /// The journal block holding C's logged copy.
    c_logged: u32,
}

const TID0: u32 = 100;

fn jfeat(compat: u32, incompat: u32) -> JournalFeatures {
    JournalFeatures { compat, incompat, ro_compat: 0 }
}

/// Builds T100..T102 (+ the tail) starting 3 blocks before the end of the
/// log, so T100 wraps.
fn scenario(fx: &Fixture, f: JournalFeatures, tail: Tail) -> Scenario {
    let base = Arc::new(MemoryDevice::from_bytes(&fx.bytes));
    let dev: &dyn BlockDevice = base.as_ref();
    let bs = fx.bs;
    let (a, b, c, d) = (fx.blocks - 2, fx.blocks - 3, fx.blocks - 4, fx.blocks - 5);
    for x in [a, b, c, d] {
        assert!(!fx.jmap.contains(&x));
    }
    let mut rng = Rng::new(u64::from(f.incompat) << 8 | u64::from(f.compat));
    let a1 = rng.bytes(bs);
    let a2 = rng.bytes(bs);
    let mut b1 = rng.bytes(bs);
    b1[..4].copy_from_slice(&JBD2_MAGIC.to_be_bytes());
    let c1 = rng.bytes(bs);
    let d1 = rng.bytes(bs);
    // The superblock's block, as the kernel journals it: label changed,
    // needs_recovery still set.
    let sb_block = if bs == 1024 { 1 } else { 0 };
    let mut sbb = read_dev(dev, sb_block * bs as u64, bs);
    let sb_off = if bs == 1024 { 0 } else { 1024 };
    {
        let raw = &mut sbb[sb_off..sb_off + 1024];
        raw[0x78..0x88].copy_from_slice(b"replayed\0\0\0\0\0\0\0\0");
        let inc = u32::from_le_bytes(raw[0x60..0x64].try_into().unwrap()) | RECOVER;
        raw[0x60..0x64].copy_from_slice(&inc.to_le_bytes());
        let c = crc32c(!0, &raw[..0x3FC]);
        raw[0x3FC..].copy_from_slice(&c.to_le_bytes());
    }

    let mut sb = fx.jsb.clone();
    sb.features = f;
    sb.checksum_type = if f.csum_v2or3() { jf::checksum_type::CRC32C } else { 0 };
    let start = sb.log_end() - 3;
    let mut lb = LogBuilder::new(dev, fx, f, start);
    lb.descriptor(TID0, &[(a, a1), (b, b1.clone())]);
    lb.commit(TID0, 1000, true);
    lb.revoke(TID0 + 1, &[a]);
    let c_at = lb.descriptor(TID0 + 1, &[(c, c1.clone())]);
    lb.commit(TID0 + 1, 1001, true);
    lb.descriptor(TID0 + 2, &[(a, a2.clone()), (sb_block, sbb)]);
    lb.commit(TID0 + 2, 1002, true);
    match tail {
        Tail::Clean => {}
        Tail::Torn => {
            lb.descriptor(TID0 + 3, &[(d, d1)]);
        }
        Tail::BadCommit => {
            lb.descriptor(TID0 + 3, &[(d, d1)]);
            lb.commit(TID0 + 3, 1003, false);
        }
    }
    // Make sure the block after the log is not mistaken for more log.
    let zero = vec![0u8; bs];
    let after = lb.pos;
    dev.write_at(&zero, fx.jmap[after as usize] * bs as u64).unwrap();
    let placed = lb.placed.clone();

    sb.sequence = TID0;
    sb.start = start;
    dev.write_at(&sb.to_bytes(), fx.jmap[0] * bs as u64).unwrap();
    edit_ext4_sb(dev, |raw| {
        let inc = u32::from_le_bytes(raw[0x60..0x64].try_into().unwrap()) | RECOVER;
        raw[0x60..0x64].copy_from_slice(&inc.to_le_bytes());
    });
    Scenario { base, a, b, c, d, a2, b1, c1, sb_block, placed, c_logged: c_at[0] }
}

fn block_of(dev: &dyn BlockDevice, bs: usize, b: u64) -> Vec<u8> {
    read_dev(dev, b * bs as u64, bs)
}

/// Journal superblock as it is on the device.
fn jsb_on(dev: &dyn BlockDevice, fx: &Fixture) -> JournalSuperblock {
    JournalSuperblock::parse(&read_dev(dev, fx.jmap[0] * fx.bs as u64, 1024)).unwrap()
}

fn journal_formats() -> Vec<(&'static str, JournalFeatures)> {
    use feature::*;
    vec![
        ("none", jfeat(0, 0)),
        ("64bit", jfeat(0, INCOMPAT_64BIT | INCOMPAT_REVOKE)),
        ("csum1", jfeat(COMPAT_CHECKSUM, INCOMPAT_REVOKE)),
        ("csum1-async", jfeat(COMPAT_CHECKSUM, INCOMPAT_ASYNC_COMMIT)),
        ("csum2", jfeat(0, INCOMPAT_CSUM_V2)),
        ("csum2-64bit", jfeat(0, INCOMPAT_CSUM_V2 | INCOMPAT_64BIT)),
        ("csum3", jfeat(0, INCOMPAT_CSUM_V3)),
        ("csum3-64bit", jfeat(0, INCOMPAT_CSUM_V3 | INCOMPAT_64BIT | INCOMPAT_REVOKE)),
        ("csum3-64bit-async", jfeat(0, INCOMPAT_CSUM_V3 | INCOMPAT_64BIT | INCOMPAT_ASYNC_COMMIT)),
    ]
}

fn check_success(fx: &Fixture, s: &Scenario, dev: &Recorder, r: &RecoveryReport, what: &str) {
    let bs = fx.bs;
    assert_eq!(r.transactions, 3, "{what}: {r:?}");
    assert_eq!((r.first_tid, r.last_tid, r.next_tid), (TID0, Some(TID0 + 2), TID0 + 4), "{what}");
    assert_eq!((r.blocks_replayed, r.blocks_revoked, r.revoke_records), (4, 1, 1), "{what}: {r:?}");
    assert!(r.needed && r.modified);
    assert_eq!(block_of(dev, bs, s.a), s.a2, "{what}: A");
    assert_eq!(block_of(dev, bs, s.b), s.b1, "{what}: B (escaped)");
    assert_eq!(block_of(dev, bs, s.c), s.c1, "{what}: C");
    assert_eq!(block_of(dev, bs, s.d), block_of(s.base.as_ref(), bs, s.d), "{what}: D must not be replayed");
    // Exactly these writes: four blocks home, the journal superblock, the
    // ext4 superblock.
    let mut expect: Vec<(u64, usize)> = [s.b, s.c, s.a, s.sb_block].iter().map(|&b| (b * bs as u64, bs)).collect();
    expect.push((fx.jmap[0] * bs as u64, 1024));
    expect.push((1024, 1024));
    let mut got = dev.writes();
    got.sort_unstable();
    expect.sort_unstable();
    assert_eq!(got, expect, "{what}: writes");
    let jsb = jsb_on(dev, fx);
    assert_eq!((jsb.start, jsb.sequence, jsb.errno), (0, TID0 + 4, 0), "{what}");
    assert_eq!(ext4_incompat(dev) & RECOVER, 0, "{what}: needs_recovery still set");
    // The replayed superblock is the one in use: label from the log.
    let fs = Filesystem::open_device(
        Arc::new(MemoryDevice::from_bytes(&read_dev(dev, 0, dev.size() as usize))),
        MountOptions::default(),
    )
    .unwrap();
    assert_eq!(fs.superblock().label(), "replayed", "{what}");
    assert!(fs.notices().is_empty(), "{what}: {:?}", fs.notices());
}

#[test]
fn synthetic_journals_in_every_format() {
    for bs in [1024u32, 4096] {
        let Some(fx) = fixture(bs) else { return };
        for (name, f) in journal_formats() {
            for tail in [Tail::Clean, Tail::Torn, Tail::BadCommit] {
                let what = format!("{bs}/{name}/{tail:?}");
                let s = scenario(&fx, f, tail);
                let overlay: Arc<dyn BlockDevice> = Arc::new(OverlayDevice::new(s.base.clone()));
                let dev = Recorder::new(overlay);
                let res = recover(dev.clone());
                let detectable = f.csum_v2or3() || f.checksum_v1();
                if tail == Tail::BadCommit && detectable && !f.async_commit() {
                    // The kernel replays T100..T102, then refuses: the
                    // journal is left as it was.
                    let e = res.expect_err(&what);
                    assert!(
                        matches!(&e, Error::Corrupt(c) if c.structure == Structure::Journal
                            && matches!(c.location, Location::Transaction { tid: 103, .. })
                            && c.kind == CorruptKind::BadCommit { replayed: 3 }),
                        "{what}: {e}"
                    );
                    assert_eq!(block_of(dev.as_ref(), fx.bs, s.a), s.a2, "{what}");
                    assert_eq!(block_of(dev.as_ref(), fx.bs, s.c), s.c1, "{what}");
                    assert_eq!(
                        block_of(dev.as_ref(), fx.bs, s.d),
                        block_of(s.base.as_ref(), fx.bs, s.d),
                        "{what}: D replayed"
                    );
                    assert_eq!(jsb_on(dev.as_ref(), &fx).start, fx.jsb.log_end_for(f) - 3, "{what}");
                    assert_ne!(ext4_incompat(dev.as_ref()) & RECOVER, 0, "{what}");
                    continue;
                }
                if tail == Tail::BadCommit && !detectable {
                    // Without checksums T103 is a good transaction.
                    let r = res.unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(r.transactions, 4, "{what}");
                    continue;
                }
                let r = res.unwrap_or_else(|e| panic!("{what}: {e}"));
                check_success(&fx, &s, &dev, &r, &what);
                // The base under the overlay was never written.
                assert_eq!(ext4_incompat(s.base.as_ref()) & RECOVER, RECOVER);
            }
        }
    }
}

/// Helper on the fixture's journal superblock: the log end with other
/// features (fast commit changes it).
trait LogEnd {
    fn log_end_for(&self, f: JournalFeatures) -> u32;
}
impl LogEnd for JournalSuperblock {
    fn log_end_for(&self, f: JournalFeatures) -> u32 {
        let mut s = self.clone();
        s.features = f;
        s.log_end()
    }
}

#[test]
fn synthetic_recovery_passes_fsck_and_opens_in_memory() {
    let Some(fx) = fixture(1024) else { return };
    let dir = scratch("synthetic");
    for (name, f) in [("csum3-64bit", journal_formats()[7].1), ("none", journal_formats()[0].1)] {
        let s = scenario(&fx, f, Tail::Torn);
        // Read-only open: replayed in memory, the device untouched.
        let before = read_dev(s.base.as_ref(), 0, s.base.size() as usize);
        let fs = Filesystem::open_device(s.base.clone(), MountOptions::default()).unwrap();
        assert_eq!(fs.superblock().label(), "replayed", "{name}");
        assert!(!fs.superblock().needs_recovery());
        assert!(
            fs.notices().iter().any(|n| n.starts_with("the journal was replayed in memory (3 transaction(s))")),
            "{name}: {:?}",
            fs.notices()
        );
        drop(fs);
        assert!(read_dev(s.base.as_ref(), 0, s.base.size() as usize) == before, "{name}: base modified");

        // In place, then e2fsck.
        let r = recover(s.base.clone()).unwrap();
        assert_eq!(r.transactions, 3);
        let img = dir.path().join(format!("{name}.img"));
        fs::write(&img, read_dev(s.base.as_ref(), 0, s.base.size() as usize)).unwrap();
        fsck_clean(&img, name);
    }
}

#[test]
fn data_block_checksum_mismatch_skips_the_block() {
    let Some(fx) = fixture(1024) else { return };
    for (_, f) in journal_formats().into_iter().filter(|(_, f)| f.csum_v2or3()) {
        let s = scenario(&fx, f, Tail::Clean);
        // Damage C's logged copy.
        let at = fx.jmap[s.c_logged as usize] * fx.bs as u64 + 100;
        let mut x = read_dev(s.base.as_ref(), at, 1);
        x[0] ^= 0xFF;
        s.base.write_at(&x, at).unwrap();
        let dev = Recorder::new(s.base.clone());
        let e = recover(dev.clone()).unwrap_err();
        assert!(matches!(e, Error::Checksum { structure: Structure::Journal, .. }), "{f:?}: {e}");
        // Everything else was replayed; C was not; the journal stays dirty.
        assert_eq!(block_of(dev.as_ref(), fx.bs, s.a), s.a2);
        assert_eq!(block_of(dev.as_ref(), fx.bs, s.b), s.b1);
        assert_ne!(block_of(dev.as_ref(), fx.bs, s.c), s.c1);
        assert_ne!(jsb_on(dev.as_ref(), &fx).start, 0);
        assert_ne!(ext4_incompat(dev.as_ref()) & RECOVER, 0);
        // The read-only open falls back to the un-replayed image.
        let fs = Filesystem::open_device(s.base.clone(), MountOptions::default()).unwrap();
        assert!(fs.notices().iter().any(|n| n.contains("replaying it failed")), "{:?}", fs.notices());
    }
}

#[test]
fn empty_log_and_errno() {
    let Some(fx) = fixture(1024) else { return };
    let f = jfeat(0, feature::INCOMPAT_CSUM_V3 | feature::INCOMPAT_64BIT);
    // needs_recovery with an empty log: flag cleared, sequence bumped.
    let s = scenario(&fx, f, Tail::Clean);
    let mut sb = jsb_on(s.base.as_ref(), &fx);
    sb.start = 0;
    sb.errno = -5;
    s.base.write_at(&sb.to_bytes(), fx.jmap[0] * fx.bs as u64).unwrap();
    let dev = Recorder::new(s.base.clone());
    let r = recover(dev.clone()).unwrap();
    assert_eq!((r.transactions, r.blocks_replayed, r.next_tid, r.journal_errno), (0, 0, TID0 + 1, -5), "{r:?}");
    assert!(r.warnings.iter().any(|w| w.contains("error -5")), "{r:?}");
    assert_eq!(ext4_incompat(dev.as_ref()) & RECOVER, 0);
    let jsb = jsb_on(dev.as_ref(), &fx);
    assert_eq!((jsb.start, jsb.sequence, jsb.errno), (0, TID0 + 1, 0));
    // The error moved to the filesystem state.
    let state = u16::from_le_bytes(read_dev(dev.as_ref(), 1024 + 0x3A, 2).try_into().unwrap());
    assert_eq!(state & 2, 2);
    assert_eq!(block_of(dev.as_ref(), fx.bs, s.a), block_of(&MemoryDevice::from_bytes(&fx.bytes), fx.bs, s.a));

    // A log without needs_recovery is ignored (nothing written).
    let s = scenario(&fx, f, Tail::Clean);
    edit_ext4_sb(s.base.as_ref(), |raw| {
        let inc = u32::from_le_bytes(raw[0x60..0x64].try_into().unwrap()) & !RECOVER;
        raw[0x60..0x64].copy_from_slice(&inc.to_le_bytes());
    });
    let dev = Recorder::new(s.base.clone());
    let r = recover(dev.clone()).unwrap();
    assert!(!r.needed && !r.modified && !r.warnings.is_empty(), "{r:?}");
    assert!(dev.writes().is_empty());

    // A read-only device is refused.
    let ro = dir_image_readonly(&fx);
    assert!(matches!(recover(ro), Err(Error::ReadOnly(_))));
}

fn dir_image_readonly(fx: &Fixture) -> Arc<dyn BlockDevice> {
    let dir = scratch("ro");
    let p = dir.path().join("ro.img");
    fs::write(&p, &fx.bytes).unwrap();
    let dev = FileDevice::open(&p, false).unwrap();
    // The file stays open after the directory is removed.
    drop(dir);
    Arc::new(dev)
}

// ---------------------------------------------------------------------------
// Corrupt journals
// ---------------------------------------------------------------------------

/// Runs recovery on an overlay over `base` after `mutate`; checks that it
/// neither panics nor writes outside the filesystem, and that errors are
/// journal errors.
fn recover_mutated(
    fx: &Fixture,
    base: &Arc<MemoryDevice>,
    mutate: impl FnOnce(&dyn BlockDevice),
) -> Result<RecoveryReport, Error> {
    let overlay: Arc<dyn BlockDevice> = Arc::new(OverlayDevice::new(base.clone()));
    mutate(overlay.as_ref());
    let dev = Recorder::new(overlay);
    let t = Instant::now();
    let res = recover(dev.clone());
    assert!(t.elapsed().as_secs() < 10, "recovery took {:?}", t.elapsed());
    let fs_end = fx.blocks * fx.bs as u64;
    for (off, len) in dev.writes() {
        assert!(off + len as u64 <= fs_end, "write at {off}+{len} beyond the filesystem");
    }
    if let Err(e) = &res {
        assert!(
            matches!(e, Error::Checksum { structure: Structure::Journal, .. } | Error::Unsupported(_))
                || matches!(e, Error::Corrupt(c) if c.structure == Structure::Journal),
            "unexpected error kind: {e:?}"
        );
    }
    res
}

fn flip(dev: &dyn BlockDevice, off: u64, bit: u8) {
    let mut b = read_dev(dev, off, 1);
    b[0] ^= 1 << (bit & 7);
    dev.write_at(&b, off).unwrap();
}

#[test]
fn bit_flips_never_panic() {
    let Some(fx) = fixture(1024) else { return };
    let mut rng = Rng::new(77);
    let t0 = Instant::now();
    let mut outcomes = BTreeMap::<String, usize>::new();
    for (name, f) in journal_formats() {
        let s = scenario(&fx, f, Tail::Torn);
        let mut targets: Vec<u64> = s.placed.iter().map(|&j| fx.jmap[j as usize]).collect();
        targets.push(fx.jmap[0]);
        for _ in 0..60 {
            let blk = targets[rng.below(targets.len() as u64) as usize];
            // Mostly the header and tags, sometimes anywhere.
            let within = if rng.below(2) == 0 { rng.below(64) } else { rng.below(fx.bs as u64) };
            let nflips = 1 + rng.below(3);
            let flips: Vec<(u64, u8)> =
                (0..nflips).map(|_| (blk * fx.bs as u64 + within.min(fx.bs as u64 - 1), rng.below(8) as u8)).collect();
            let res = recover_mutated(&fx, &s.base, |d| {
                for &(o, b) in &flips {
                    flip(d, o, b);
                }
            });
            let key = match &res {
                Ok(r) => format!("ok/{} txns", r.transactions),
                Err(e) => format!("err/{}", format!("{e}").split(':').next().unwrap_or("")),
            };
            *outcomes.entry(format!("{name}: {key}")).or_default() += 1;
        }
    }
    eprintln!("bit flips: {:.1}s, outcomes {outcomes:#?}", t0.elapsed().as_secs_f64());
}

/// Rewrites the journal superblock on `d` (checksum recomputed).
fn edit_jsb(fx: &Fixture, d: &dyn BlockDevice, f: impl FnOnce(&mut JournalSuperblock)) {
    let raw = read_dev(d, fx.jmap[0] * fx.bs as u64, 1024);
    let mut sb = JournalSuperblock::parse(&raw).unwrap();
    f(&mut sb);
    d.write_at(&sb.to_bytes(), fx.jmap[0] * fx.bs as u64).unwrap();
}

fn is_journal_corrupt(r: &Result<RecoveryReport, Error>) -> bool {
    matches!(r, Err(Error::Corrupt(c)) if c.structure == Structure::Journal)
}

#[test]
fn wild_values_are_errors() {
    let Some(fx) = fixture(1024) else { return };
    for (name, f) in journal_formats() {
        let s = scenario(&fx, f, Tail::Clean);
        let seed = jf::journal_csum_seed(&fx.jsb.uuid);
        let bs = fx.bs as u64;
        let pos = |i: usize| fx.jmap[s.placed[i] as usize] * bs;
        // placed: 0 desc T100, 1 A, 2 B, 3 commit, 4 revoke T101, 5 desc T101, 6 C, 7 commit, 8 desc T102 ...

        // Superblock geometry.
        for (what, edit) in [
            ("first > maxlen", Box::new(|sb: &mut JournalSuperblock| sb.first = sb.maxlen + 5) as Box<dyn Fn(&mut _)>),
            ("first = 0", Box::new(|sb: &mut JournalSuperblock| sb.first = 0)),
            ("start beyond", Box::new(|sb: &mut JournalSuperblock| sb.start = sb.maxlen)),
            ("maxlen huge", Box::new(|sb: &mut JournalSuperblock| sb.maxlen = u32::MAX)),
            ("maxlen tiny", Box::new(|sb: &mut JournalSuperblock| sb.maxlen = 10)),
            ("block size", Box::new(|sb: &mut JournalSuperblock| sb.block_size = 4096)),
            ("block size odd", Box::new(|sb: &mut JournalSuperblock| sb.block_size = 1000)),
        ] {
            let r = recover_mutated(&fx, &s.base, |d| edit_jsb(&fx, d, |sb| edit(sb)));
            assert!(is_journal_corrupt(&r), "{name}/{what}: {r:?}");
        }
        let r = recover_mutated(&fx, &s.base, |d| edit_jsb(&fx, d, |sb| sb.features.incompat |= 0x80));
        assert!(matches!(r, Err(Error::Unsupported(_))), "{name}: {r:?}");

        // Huge r_count.
        for count in [u32::MAX, fx.bs as u32 + 1, fx.bs as u32 - 3] {
            let r = recover_mutated(&fx, &s.base, |d| {
                let mut b = read_dev(d, pos(4), fx.bs);
                b[12..16].copy_from_slice(&count.to_be_bytes());
                if f.csum_v2or3() {
                    jf::set_tail_checksum(seed, &mut b);
                }
                d.write_at(&b, pos(4)).unwrap();
            });
            if count > fx.bs as u32 - f.tail_bytes() as u32 {
                assert!(is_journal_corrupt(&r), "{name}/r_count {count}: {r:?}");
            } else {
                // The tail of the block read as records: zeros, harmless.
                assert!(r.is_ok(), "{name}/r_count {count}: {r:?}");
            }
        }

        // Tags beyond the filesystem: refused before anything is written.
        for wild in [fx.blocks, fx.blocks + 1000, u64::from(u32::MAX), 0xFFFF_FFFF_0000_0010] {
            if wild > u64::from(u32::MAX) && !f.has_64bit() {
                continue;
            }
            let overlay: Arc<dyn BlockDevice> = Arc::new(OverlayDevice::new(s.base.clone()));
            let mut b = read_dev(overlay.as_ref(), pos(0), fx.bs);
            let mut tags = jf::parse_tags(&b, &f);
            tags[0].block = wild;
            jf::encode_descriptor(&mut b, TID0, &tags, &f, seed).unwrap();
            overlay.write_at(&b, pos(0)).unwrap();
            let dev = Recorder::new(overlay);
            let r = recover(dev.clone());
            assert!(is_journal_corrupt(&r), "{name}/tag {wild}: {r:?}");
            assert!(dev.writes().is_empty(), "{name}/tag {wild}: wrote {:?}", dev.writes());
        }

        // A log of descriptors that never commits, filling the whole log
        // area: it would wrap onto itself forever.
        let r = recover_mutated(&fx, &s.base, |d| {
            let mut b = vec![0u8; fx.bs];
            let tags =
                [BlockTag { block: s.d, flags: tag_flag::LAST_TAG | tag_flag::SAME_UUID, checksum: 0, uuid: None }];
            jf::encode_descriptor(&mut b, TID0, &tags, &f, seed).unwrap();
            let sb = jsb_on(d, &fx);
            for j in sb.first..sb.log_end_for(f) {
                d.write_at(&b, fx.jmap[j as usize] * bs).unwrap();
            }
        });
        let r = r.unwrap_or_else(|e| panic!("{name}: endless log: {e}"));
        assert_eq!(r.transactions, 0, "{name}");

        // All commit blocks of the right sequence numbers, everywhere:
        // the log is as long as the log area, and stops there.
        let r = recover_mutated(&fx, &s.base, |d| {
            let sb = jsb_on(d, &fx);
            let mut j = sb.start;
            for tid in TID0..TID0 + (sb.log_end_for(f) - sb.first) {
                let mut b = vec![0u8; fx.bs];
                let mut c = CommitBlock { sequence: tid, commit_sec: u64::from(tid), ..Default::default() };
                if f.checksum_v1() {
                    c.chksum_type = jf::checksum_type::CRC32;
                    c.chksum_size = 4;
                    c.chksum[0] = !0;
                }
                c.encode(&mut b, &f, seed).unwrap();
                d.write_at(&b, fx.jmap[j as usize] * bs).unwrap();
                j += 1;
                if j >= sb.log_end_for(f) {
                    j = sb.first;
                }
            }
        });
        let r = r.unwrap_or_else(|e| panic!("{name}: all commits: {e}"));
        assert_eq!(r.transactions, fx.jsb.log_end_for(f) - fx.jsb.first, "{name}");

        // A bad descriptor checksum followed by a newer commit: error; by
        // an older commit: stale, the log ends cleanly.
        if f.csum_v2or3() {
            let r = recover_mutated(&fx, &s.base, |d| flip(d, pos(8) + 20, 0));
            assert!(is_journal_corrupt(&r), "{name}: {r:?}");
            let r = recover_mutated(&fx, &s.base, |d| {
                flip(d, pos(8) + 20, 0);
                let mut b = read_dev(d, pos(11), fx.bs);
                let mut c = CommitBlock::parse(&b).unwrap();
                c.commit_sec = 10;
                c.encode(&mut b, &f, seed).unwrap();
                d.write_at(&b, pos(11)).unwrap();
            });
            let r = r.unwrap_or_else(|e| panic!("{name}: stale descriptor: {e}"));
            assert_eq!(r.transactions, 2, "{name}");
            // A bad revoke checksum, then a newer commit: error.
            let r = recover_mutated(&fx, &s.base, |d| flip(d, pos(4) + 17, 3));
            assert!(is_journal_corrupt(&r), "{name}: {r:?}");
        }
    }

    // External journal and a journal inode that is not a journal.
    let base = Arc::new(MemoryDevice::from_bytes(&fx.bytes));
    let r = recover_mutated(&fx, &base, |d| {
        edit_ext4_sb(d, |raw| {
            raw[0xE0..0xE4].copy_from_slice(&0u32.to_le_bytes());
            raw[0xD0..0xE0].copy_from_slice(&[7; 16]);
            raw[0x60] |= RECOVER as u8;
        })
    });
    assert!(matches!(&r, Err(Error::Unsupported(m)) if m.contains("external journal")), "{r:?}");
    let r = recover_mutated(&fx, &base, |d| {
        edit_ext4_sb(d, |raw| {
            raw[0xE0..0xE4].copy_from_slice(&2u32.to_le_bytes());
            raw[0x60] |= RECOVER as u8;
        })
    });
    assert!(is_journal_corrupt(&r), "{r:?}");
    let r = recover_mutated(&fx, &base, |d| {
        edit_ext4_sb(d, |raw| {
            raw[0xE0..0xE4].copy_from_slice(&11u32.to_le_bytes());
            raw[0x60] |= RECOVER as u8;
        })
    });
    assert!(r.is_err(), "{r:?}");
}

#[test]
fn header_codec_sanity() {
    // The magic the tests escape is the jbd2 magic, big-endian on disk.
    let mut b = [0u8; 12];
    BlockHeader::new(blocktype::COMMIT, 1).encode(&mut b);
    assert_eq!(&b[..4], &JBD2_MAGIC.to_be_bytes());
}

/// The kernel leaves an unlinked-but-open file on its orphan list when it
/// shuts down; uext4's read-write open replays the journal, then finishes
/// the deletion (the kernel's orphan cleanup): the inode and its blocks
/// are free and e2fsck finds the image clean without touching it.
#[test]
fn kernel_orphan_list_is_processed_after_replay() {
    let Some((dir, img, mnt, m)) = mounted_image("orphan", &[]) else { return };
    write_file(&mnt.join("keep"), b"kept", true);
    let path = mnt.join("doomed");
    write_file(&path, &vec![7u8; 3 << 20], true);
    let held = File::open(&path).unwrap();
    fs::remove_file(&path).unwrap();
    syncfs(&mnt);
    shutdown_logflush(&mnt).unwrap();
    drop(held);
    m.unmount();
    assert!(needs_recovery_flag(&img));

    let before_free = {
        let copy = dir.path().join("e2fsck-copy");
        fs::copy(&img, &copy).unwrap();
        // e2fsck -fy replays and processes the orphan itself: the reference.
        run(Command::new(tool("e2fsck").unwrap()).arg("-fy").arg(&copy), &[0, 1]);
        Filesystem::open(&copy).unwrap().statfs()
    };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let notes = fs.notices().join("; ");
    assert!(notes.contains("orphan list: 1 inode(s) deleted"), "{notes}");
    assert_eq!(fs.read_all(fs.resolve("/keep").unwrap()).unwrap(), b"kept");
    assert!(fs.resolve("/doomed").is_err());
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img, "after uext4's orphan cleanup");
    let after = Filesystem::open(&img).unwrap().statfs();
    assert_eq!((after.free_blocks, after.free_inodes), (before_free.free_blocks, before_free.free_inodes));
}
