//! Bad input: truncated images, single-bit flips and wild values in every
//! on-disk structure the read path parses (superblock, group descriptor,
//! inode, extent header/index/leaf, directory entry, htree node, xattr
//! block, indirect block). Each case opens the damaged image and walks all
//! of it (see [`walk`]); errors are expected, but a panic, a hang (watchdog),
//! an allocation above [`ALLOC_CAP`] or a write fails the test, naming the
//! case.
//!
//! Base images (built once with mkfs.ext4 -d, then e2fsck -D to index the
//! big directories): 1 KiB and 4 KiB blocks with metadata_csum, 1 KiB
//! without, and 1 KiB block-mapped (no extents). Flips are applied with
//! checksums left as they are (on metadata_csum images the checksum should
//! catch them), on the images without metadata_csum (so they reach the
//! parsers), and, on the csum images, with the checksum recomputed. Wild
//! values are applied with the checksum recomputed, so the parser itself
//! meets them.
//!
//! The `regression_*` tests at the end reproduce, in minimal form, library
//! bugs that these suites (and the fuzz target) found and that are fixed.
//!
//! Run with `--nocapture` to see per-suite counts.

mod corrupt_support;

use corrupt_support::{build_images, flip_positions, Fix, Image, Target};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashSet};
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Once, OnceLock};
use std::time::{Duration, Instant};
use uext4::format::bytes::{le16, le32, put_le16, put_le32};
use uext4::{BlockDevice, CorruptKind, Error, FileType, Filesystem, Location, MemoryDevice, MountOptions, Structure};

// ---------------------------------------------------------------------------
// Allocation cap: a single allocation above ALLOC_CAP is refused (returns
// null: `try_reserve` callers see an error, others abort) and recorded for
// the case running on this thread.

/// Largest single allocation a case may make.
const ALLOC_CAP: usize = 256 << 20;

struct CappedAlloc;

thread_local! {
    /// Largest refused allocation on this thread (0 = none).
    static OVERSIZE: Cell<usize> = const { Cell::new(0) };
    /// Name of the case running on this thread (pointer, length), for the
    /// message printed before a refused allocation aborts the process.
    static CASE_NAME: Cell<(*const u8, usize)> = const { Cell::new((std::ptr::null(), 0)) };
    /// Set on case threads: their panics are recorded, not printed.
    static IN_CASE: Cell<bool> = const { Cell::new(false) };
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Writes `parts` to stderr without allocating.
fn raw_stderr(parts: &[&[u8]]) {
    for p in parts {
        // SAFETY: writes `p.len()` bytes from a live slice to fd 2.
        let _ = unsafe { libc::write(2, p.as_ptr().cast(), p.len()) };
    }
}

fn refuse(size: usize) {
    let _ = OVERSIZE.try_with(|c| c.set(c.get().max(size)));
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = size;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let (p, len) = CASE_NAME.try_with(|c| c.get()).unwrap_or((std::ptr::null(), 0));
    let name: &[u8] = if p.is_null() {
        b"?"
    } else {
        // SAFETY: set by `run_case` to a string that outlives the case.
        unsafe { std::slice::from_raw_parts(p, len) }
    };
    raw_stderr(&[b"corrupt test: refused an allocation of ", &digits[i..], b" bytes in case ", name, b"\n"]);
}

// SAFETY: delegates to System; oversized requests get null, which the
// GlobalAlloc contract allows.
unsafe impl GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if l.size() > ALLOC_CAP {
            refuse(l.size());
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if l.size() > ALLOC_CAP {
            refuse(l.size());
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        if new_size > ALLOC_CAP {
            refuse(new_size);
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(p, l, new_size) }
    }
}

#[global_allocator]
static ALLOC: CappedAlloc = CappedAlloc;

// ---------------------------------------------------------------------------
// The walk: open everything the API can reach, bounded so that a corrupt
// image cannot make the walk itself explode.

/// Entries the walk visits at most.
const MAX_ENTRIES: usize = 20_000;
/// Deepest directory the walk descends into.
const MAX_DEPTH: usize = 16;
/// Bytes read per regular file at most.
const FILE_CAP: u64 = 4 << 20;
/// Bytes read per walk at most.
const READ_BUDGET: u64 = 32 << 20;
/// Read chunk.
const CHUNK: usize = 64 << 10;

/// What a walk saw.
#[derive(Debug, Default)]
struct WalkStats {
    dirs: usize,
    entries: usize,
    files: usize,
    bytes: u64,
    symlinks: usize,
    xattrs: usize,
    errors: BTreeMap<&'static str, usize>,
}

fn kind(e: &Error) -> &'static str {
    match e {
        Error::Io(_) => "io",
        Error::NotExt4(_) => "not-ext4",
        Error::Corrupt { .. } => "corrupt",
        Error::Checksum { .. } => "checksum",
        Error::Unsupported(_) => "unsupported",
        Error::NotFound(_) => "not-found",
        Error::NotDir(_) => "not-dir",
        Error::IsDir(_) => "is-dir",
        Error::NameTooLong(_) => "name-too-long",
        Error::Invalid(_) => "invalid",
        Error::BadInode(_) => "bad-inode",
        Error::Loop(_) => "loop",
        Error::NoAttr(_) => "no-attr",
        _ => "other",
    }
}

impl WalkStats {
    fn ok<T>(&mut self, r: uext4::Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                *self.errors.entry(kind(&e)).or_default() += 1;
                None
            }
        }
    }
}

/// Opens and traverses everything: readdir (paged and whole), lookup of
/// every name and of missing names (through the htree), path resolution,
/// stat, file data in 64 KiB chunks, extent maps, symlink targets, xattrs.
fn walk(fs: &Filesystem) -> WalkStats {
    let mut st = WalkStats::default();
    let _ = fs.statfs();
    let _ = (fs.notices(), fs.superblock().label(), fs.group_descs().len());
    let mut budget = READ_BUDGET;
    let mut buf = vec![0u8; CHUNK];
    let mut visited = HashSet::new();
    let root = fs.root();
    visited.insert(root);
    visit(fs, &mut st, root, b"/", &mut budget, &mut buf);
    let mut stack = vec![(root, b"/".to_vec(), 0usize)];
    while let Some((dir, path, depth)) = stack.pop() {
        st.dirs += 1;
        for missing in [&b"no-such-entry"[..], &[b'z'; 255][..], &[b'q'; 256][..]] {
            st.ok(fs.lookup(dir, missing));
        }
        if fs.stat(dir).is_ok_and(|s| s.size <= 1 << 20) {
            st.ok(fs.read_dir_all(dir));
        }
        let mut cookie = 0;
        while let Some(page) = st.ok(fs.readdir(dir, cookie, 97)) {
            match page.last() {
                Some(last) if last.next_cookie > cookie => cookie = last.next_cookie,
                _ => break,
            }
            for (i, e) in page.into_iter().enumerate() {
                if st.entries >= MAX_ENTRIES {
                    return st;
                }
                st.entries += 1;
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                st.ok(fs.lookup(dir, &e.name));
                let mut p = path.clone();
                if !p.ends_with(b"/") {
                    p.push(b'/');
                }
                p.extend_from_slice(&e.name);
                // Resolving every path repeats the lookups above; a few per
                // page exercise the path walk.
                if i < 8 {
                    st.ok(fs.resolve(&p));
                }
                if !visited.insert(e.ino) {
                    continue;
                }
                if let Some(FileType::Directory) = visit(fs, &mut st, e.ino, &p, &mut budget, &mut buf) {
                    if depth < MAX_DEPTH {
                        stack.push((e.ino, p, depth + 1));
                    }
                }
            }
        }
    }
    st
}

/// Everything but directory traversal for one inode; returns its type.
fn visit(
    fs: &Filesystem,
    st: &mut WalkStats,
    ino: u32,
    path: &[u8],
    budget: &mut u64,
    buf: &mut [u8],
) -> Option<FileType> {
    let s = st.ok(fs.stat(ino))?;
    if let Some(names) = st.ok(fs.list_xattrs(ino)) {
        for n in names.iter().take(64) {
            st.xattrs += 1;
            st.ok(fs.get_xattr(ino, n));
        }
    }
    st.ok(fs.get_xattr(ino, b"user.no-such-attribute"));
    match s.file_type {
        FileType::Regular => {
            st.files += 1;
            st.ok(fs.extents(ino));
            let mut off = 0;
            while off < s.size.min(FILE_CAP) && *budget > 0 {
                let Some(n) = st.ok(fs.inodes().read(ino, off, buf)) else { break };
                if n == 0 {
                    break;
                }
                st.bytes += n as u64;
                *budget = budget.saturating_sub(n as u64);
                off += n as u64;
            }
            // The far end of the file and offsets beyond any file.
            st.ok(fs.inodes().read(ino, s.size.saturating_sub(100), &mut buf[..4096]));
            st.ok(fs.inodes().read(ino, u64::MAX - 10, &mut buf[..4096]));
        }
        FileType::Symlink => {
            st.symlinks += 1;
            st.ok(fs.readlink(ino));
            st.ok(fs.resolve_follow(path));
        }
        FileType::Directory => {
            st.ok(fs.extents(ino));
        }
        _ => {}
    }
    Some(s.file_type)
}

// ---------------------------------------------------------------------------
// Running one case: on its own thread, under a watchdog, panics caught.

/// A case that does not finish within this time is a hang.
const WATCHDOG: Duration = Duration::from_secs(10);

/// A read-only device over a MemoryDevice that records reads outside the
/// image (refused by the MemoryDevice, but counted) and any write.
struct Recording {
    inner: MemoryDevice,
    size: u64,
    out_of_image: AtomicU64,
    writes: AtomicU64,
}

impl BlockDevice for Recording {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let inside = matches!(offset.checked_add(buf.len() as u64), Some(end) if end <= self.size);
        if !inside {
            self.out_of_image.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, _buf: &[u8], _offset: u64) -> io::Result<()> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        Err(io::Error::from_raw_os_error(libc::EROFS))
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn read_only(&self) -> bool {
        true
    }
}

/// How a case ended when it did not fail.
struct CaseResult {
    open_error: Option<&'static str>,
    walk: WalkStats,
    out_of_image: u64,
}

fn install_panic_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if IN_CASE.with(|c| c.get()) {
                let bt = std::backtrace::Backtrace::force_capture().to_string();
                // Keep the frames of this crate and the library.
                let mut frames = String::new();
                let mut keep = false;
                for line in bt.lines() {
                    let t = line.trim_start();
                    if t.starts_with("at ") {
                        if keep {
                            frames.push_str(line);
                            frames.push('\n');
                        }
                    } else {
                        keep = t.contains("uext4") || t.contains("corrupt");
                        if keep {
                            frames.push_str(line);
                            frames.push('\n');
                        }
                    }
                }
                LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{info}\n{frames}")));
            } else {
                default(info);
            }
        }));
    });
}

/// Opens `image` and walks it on a fresh thread. `Err` describes a
/// failure (panic, oversized allocation, write); a hang panics at once
/// (the stuck thread cannot be stopped, so the test cannot go on).
fn run_case(name: &str, image: Vec<u8>) -> Result<CaseResult, String> {
    run_case_with(name, image, walk)
}

/// Like [`run_case`] with another operation than the walk.
fn run_case_with(name: &str, image: Vec<u8>, op: fn(&Filesystem) -> WalkStats) -> Result<CaseResult, String> {
    install_panic_hook();
    let (tx, rx) = mpsc::channel();
    let case = name.to_string();
    let spawned = std::thread::Builder::new().name("case".into()).spawn(move || {
        IN_CASE.with(|c| c.set(true));
        CASE_NAME.with(|c| c.set((case.as_ptr(), case.len())));
        OVERSIZE.with(|c| c.set(0));
        let size = image.len() as u64;
        let dev = Arc::new(Recording {
            inner: MemoryDevice::from_bytes(&image),
            size,
            out_of_image: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        });
        drop(image);
        let d2 = dev.clone();
        let r = panic::catch_unwind(AssertUnwindSafe(move || {
            match Filesystem::open_device(d2, MountOptions { cache_blocks: 1024, ..MountOptions::default() }) {
                Ok(fs) => (None, op(&fs)),
                Err(e) => (Some(kind(&e)), WalkStats::default()),
            }
        }));
        let r = r.map_err(|_| LAST_PANIC.with(|p| p.borrow_mut().take()).unwrap_or_else(|| "panic".into()));
        let oversize = OVERSIZE.with(|c| c.get());
        CASE_NAME.with(|c| c.set((std::ptr::null(), 0)));
        let _ = tx.send((r, oversize, dev.out_of_image.load(Ordering::Relaxed), dev.writes.load(Ordering::Relaxed)));
        drop(case);
    });
    spawned.expect("spawn case thread");
    match rx.recv_timeout(WATCHDOG) {
        Ok((Err(panic), _, _, _)) => Err(format!("PANIC in case `{name}`: {panic}")),
        Ok((Ok(_), oversize, _, _)) if oversize > 0 => {
            Err(format!("HUGE ALLOCATION in case `{name}`: {oversize} bytes requested (cap {ALLOC_CAP})"))
        }
        Ok((Ok(_), _, _, writes)) if writes > 0 => Err(format!("WRITE in case `{name}`: {writes} writes")),
        Ok((Ok((open_error, walk)), _, out_of_image, _)) => Ok(CaseResult { open_error, walk, out_of_image }),
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("HANG in case `{name}`: no result after {WATCHDOG:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(format!("case `{name}`: thread died")),
    }
}

/// Counts over a group of cases; fails at the end if any case failed.
struct Suite {
    name: &'static str,
    start: Instant,
    cases: usize,
    opened: usize,
    refused: BTreeMap<&'static str, usize>,
    walk_errors: BTreeMap<&'static str, usize>,
    entries: usize,
    out_of_image: u64,
    failures: Vec<String>,
}

impl Suite {
    fn new(name: &'static str) -> Suite {
        Suite {
            name,
            start: Instant::now(),
            cases: 0,
            opened: 0,
            refused: BTreeMap::new(),
            walk_errors: BTreeMap::new(),
            entries: 0,
            out_of_image: 0,
            failures: Vec::new(),
        }
    }

    fn run(&mut self, case: String, image: Vec<u8>) {
        self.cases += 1;
        match run_case(&case, image) {
            Ok(r) => {
                match r.open_error {
                    Some(k) => *self.refused.entry(k).or_default() += 1,
                    None => self.opened += 1,
                }
                for (k, n) in r.walk.errors {
                    *self.walk_errors.entry(k).or_default() += n;
                }
                self.entries += r.walk.entries;
                self.out_of_image += r.out_of_image;
            }
            Err(f) => self.failures.push(f),
        }
    }

    /// Flips each bit of `t` (or `max` sampled bits), leaving checksums
    /// as they are.
    fn flips(&mut self, img: &Image, t: &Target, max: usize) {
        self.flips_inner(img, t, max, false);
    }

    /// Like [`Suite::flips`] but recomputes the structure's checksum after
    /// each flip, so that on metadata_csum images the flip reaches the parser.
    fn flips_fixed(&mut self, img: &Image, t: &Target, max: usize) {
        self.flips_inner(img, t, max, true);
    }

    /// The usual pair: [`Suite::flips`] with `csum_max` sampled bits on
    /// metadata_csum images (where most flips stop at the checksum) and
    /// `plain_max` on the others, then on metadata_csum images
    /// `fixed_max` more with [`Suite::flips_fixed`].
    fn flips_csum_aware(&mut self, img: &Image, t: &Target, csum_max: usize, plain_max: usize, fixed_max: usize) {
        self.flips(img, t, budget(img, csum_max, plain_max));
        if img.csum {
            self.flips_fixed(img, t, fixed_max);
        }
    }

    fn flips_inner(&mut self, img: &Image, t: &Target, max: usize, fixed: bool) {
        let seed = (t.off as u64) ^ ((img.bs as u64) << 40) ^ u64::from(fixed);
        let fixes = if fixed { std::slice::from_ref(&t.fix) } else { &[] };
        for bit in flip_positions(t.len, max, seed) {
            let b = img.damaged(fixes, |b| b[t.off + bit / 8] ^= 1 << (bit % 8));
            let how = if fixed { ", checksum recomputed" } else { "" };
            self.run(format!("{}: {} flip bit {bit} (byte {:#x}){how}", img.name, t.name, bit / 8), b);
        }
    }

    /// Applies `f` to a copy of the image, recomputes the given checksums
    /// and runs the result.
    fn wild(&mut self, img: &Image, what: &str, fixes: &[Fix], f: impl FnOnce(&mut [u8])) {
        self.run(format!("{}: {what}", img.name), img.damaged(fixes, f));
    }

    fn finish(self) {
        eprintln!(
            "[{}] {} cases in {:.1?}: {} opened and walked ({} entries), refused at open {:?}; \
             errors during walks {:?}; out-of-image read attempts (refused) {}; \
             failures {}",
            self.name,
            self.cases,
            self.start.elapsed(),
            self.opened,
            self.entries,
            self.refused,
            self.walk_errors,
            self.out_of_image,
            self.failures.len()
        );
        if !self.failures.is_empty() {
            let shown: Vec<&String> = self.failures.iter().take(5).collect();
            panic!(
                "[{}] {} of {} cases failed; first ones:\n{}",
                self.name,
                self.failures.len(),
                self.cases,
                shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n---\n")
            );
        }
    }
}

/// The base images, built once per test binary (None: mkfs.ext4 missing).
fn images() -> Option<&'static [Image]> {
    static IMAGES: OnceLock<Option<Vec<Image>>> = OnceLock::new();
    IMAGES.get_or_init(build_images).as_deref()
}

fn w16(b: &mut [u8], off: usize, v: u16) {
    put_le16(b, off, v);
}

fn w32(b: &mut [u8], off: usize, v: u32) {
    put_le32(b, off, v);
}

/// A 48-bit block number split as ext4 stores them: the low 32 bits at
/// `lo`, the high 16 at `hi`.
fn w48(b: &mut [u8], lo: usize, hi: usize, v: u64) {
    w32(b, lo, v as u32);
    w16(b, hi, (v >> 32) as u16);
}

/// Flip budget per structure: everything reaches the parser on images
/// without metadata_csum, so those get more.
fn budget(img: &Image, csum_budget: usize, plain_budget: usize) -> usize {
    if img.csum {
        csum_budget
    } else {
        plain_budget
    }
}

// ---------------------------------------------------------------------------
// Sanity: the walk reaches everything on the pristine images.

#[test]
fn pristine_images_walk_cleanly() {
    let Some(imgs) = images() else { return };
    for img in imgs {
        let r = run_case(img.name, img.bytes.to_vec()).unwrap();
        assert_eq!(r.open_error, None, "{}", img.name);
        let w = &r.walk;
        eprintln!("[pristine] {}: {w:?}", img.name);
        // 300 + 600 + 5 + a few files, 2 symlinks, 2 xattrs.
        assert!(w.entries > 900 && w.files > 900 && w.symlinks == 2 && w.xattrs >= 2, "{}: {w:?}", img.name);
        assert!(w.bytes >= 500 * 1024, "{}: {w:?}", img.name);
        let unexpected: usize = w
            .errors
            .iter()
            .filter(|(k, _)| !matches!(**k, "not-found" | "no-attr" | "name-too-long"))
            .map(|(_, n)| n)
            .sum();
        assert_eq!(unexpected, 0, "{}: {:?}", img.name, w.errors);
        assert_eq!(r.out_of_image, 0);
    }
}

/// The structure locations computed from the image agree with debugfs.
#[test]
fn locations_agree_with_debugfs() {
    let Some(imgs) = images() else { return };
    let img = &imgs[0];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("img");
    std::fs::write(&path, img.bytes.as_slice()).unwrap();
    let debugfs = |req: &str| {
        let out = std::process::Command::new("debugfs").arg("-R").arg(req).arg(&path).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let imap = debugfs("imap /frag");
    let off = img.inode_off[&img.ino["/frag"]];
    let want = format!("located at block {}, offset {:#06x}", off / img.bs, off % img.bs);
    assert!(imap.contains(&want), "debugfs says {imap:?}, we say {want}");
    let stat = debugfs("stat /small.txt");
    assert!(stat.contains(&format!("File ACL: {}", img.xattr_block)), "{stat}");
    let ex = debugfs("ex /frag");
    for (b, _) in &img.frag_tree {
        assert!(ex.split_whitespace().any(|w| w == b.to_string()), "extent block {b} not in {ex}");
    }
}

// ---------------------------------------------------------------------------
// Bad arguments on good images: inode numbers, offsets, cookies, names.

fn bad_arguments_op(fs: &Filesystem) -> WalkStats {
    let mut st = WalkStats::default();
    let mut buf = vec![0u8; 8192];
    let count = fs.superblock().inodes_count;
    for ino in [0, 1, 3, 5, 7, 8, 11, count, count + 1, u32::MAX] {
        st.ok(fs.stat(ino));
        st.ok(fs.inodes().read(ino, 0, &mut buf));
        st.ok(fs.readdir(ino, 0, 10));
        st.ok(fs.readlink(ino));
        st.ok(fs.list_xattrs(ino));
        st.ok(fs.extents(ino));
        st.ok(fs.lookup(ino, b"x"));
    }
    let root = fs.root();
    for cookie in [1, 11, 12, 4095, 4096, 1 << 32, u64::MAX - 1, u64::MAX] {
        st.ok(fs.readdir(root, cookie, 10));
    }
    st.ok(fs.readdir(root, 0, 0));
    for path in ["/frag", "/small.txt"] {
        if let Some(ino) = st.ok(fs.resolve(path)) {
            for off in [1 << 32, (1 << 44) - 1, 1 << 63, u64::MAX - 1, u64::MAX] {
                st.ok(fs.inodes().read(ino, off, &mut buf));
            }
            st.ok(fs.inodes().read(ino, 0, &mut []));
            st.ok(fs.readdir(ino, 0, 10));
            st.ok(fs.get_xattr(ino, b""));
            st.ok(fs.get_xattr(ino, [b'a'; 300]));
            st.ok(fs.get_xattr(ino, b"system.posix_acl_access"));
        }
    }
    let long = "a/".repeat(3000);
    for path in ["", "/", "//", "/..", "/../../..", "/./.", "/small.txt/", "/small.txt/x", "/fast/", "/fast/x", &long] {
        st.ok(fs.resolve(path));
        st.ok(fs.resolve_follow(path));
    }
    for name in [&b""[..], b".", b"..", b"a/b", b"a\0b", &[0xFF; 255], &[b'a'; 256], &[b'/'; 1]] {
        st.ok(fs.lookup(root, name));
    }
    st
}

#[test]
fn bad_arguments() {
    let Some(imgs) = images() else { return };
    for img in imgs {
        let r = run_case_with(&format!("{}: bad arguments", img.name), img.bytes.to_vec(), bad_arguments_op);
        r.unwrap_or_else(|e| panic!("{e}"));
    }
}

// ---------------------------------------------------------------------------
// Truncated images.

#[test]
fn truncated_images() {
    let Some(imgs) = images() else { return };
    let mut s = Suite::new("truncated");
    for img in imgs {
        let n = img.bytes.len();
        let bs = img.bs;
        let mut lens = vec![0, 100, 1024, 1500, 2047, 2048, 4096, 8192, img.gdt_off + bs, n / 4, n / 2, n - bs, n - 1];
        lens.sort_unstable();
        lens.dedup();
        for len in lens {
            s.run(format!("{}: truncated to {len}", img.name), img.bytes[..len].to_vec());
            // The same with s_blocks_count shrunk to fit, so the open goes
            // on and meets the missing metadata.
            if len >= 2048 && img.sb.features.has_incompat(uext4::format::features::incompat::BIT64) {
                s.wild(img, &format!("truncated to {len}, blocks_count fitted"), &[Fix::Super], |b| {
                    w32(&mut b[1024..], 0x4, (len / bs) as u32);
                });
            }
        }
        for len in [img.gdt_off + bs, n / 2, n - bs] {
            let mut b = img.bytes[..len].to_vec();
            w32(&mut b[1024..], 0x4, (len / bs) as u32);
            img.fix(&mut b, Fix::Super);
            s.run(format!("{}: truncated to {len} with s_blocks_count {}", img.name, len / bs), b);
        }
    }
    s.finish();
}

// ---------------------------------------------------------------------------
// Superblock.

#[test]
fn superblock_flips() {
    let Some(imgs) = images() else { return };
    let mut s = Suite::new("superblock flips");
    for img in imgs {
        // The fields that matter are in the first 0x180 bytes; the rest
        // (names, journal backup, quota inodes...) is sampled.
        let fields = Target { name: "superblock".into(), off: 1024, len: 0x180, fix: Fix::Super };
        let rest = Target { name: "superblock tail".into(), off: 1024 + 0x180, len: 1024 - 0x180, fix: Fix::Super };
        s.flips(img, &fields, budget(img, 96, 384));
        s.flips(img, &rest, budget(img, 32, 64));
        if img.csum {
            s.flips_fixed(img, &fields, 256);
        }
    }
    s.finish();
}

#[test]
fn superblock_wild() {
    let Some(imgs) = images() else { return };
    let mut s = Suite::new("superblock wild");
    use uext4::format::features::{incompat, ro_compat};
    for img in imgs {
        let blocks = img.sb.blocks_count as u32;
        let bs = img.bs as u32;
        let u32s: &[(&str, usize, &[u32])] = &[
            ("s_inodes_count", 0x0, &[0, 1, u32::MAX, img.sb.inodes_count + 1]),
            ("s_blocks_count_lo", 0x4, &[0, 1, 2, u32::MAX, blocks + 1, blocks / 2]),
            ("s_r_blocks_count_lo", 0x8, &[u32::MAX]),
            ("s_free_blocks_count_lo", 0xC, &[u32::MAX]),
            ("s_first_data_block", 0x14, &[0, 1, 2, u32::MAX]),
            ("s_log_block_size", 0x18, &[0, 1, 2, 6, 7, 30, u32::MAX]),
            ("s_log_cluster_size", 0x1C, &[0, 6, 30, 100, u32::MAX]),
            ("s_blocks_per_group", 0x20, &[0, 1, 8, 8 * bs, 8 * bs + 8, u32::MAX]),
            ("s_clusters_per_group", 0x24, &[0, u32::MAX]),
            ("s_inodes_per_group", 0x28, &[0, 1, 8 * bs, u32::MAX]),
            ("s_rev_level", 0x4C, &[0, 2, u32::MAX]),
            ("s_first_ino", 0x54, &[0, 1, 11, u32::MAX]),
            ("s_feature_compat", 0x5C, &[0, u32::MAX]),
            ("s_feature_incompat", 0x60, &[0, u32::MAX]),
            ("s_feature_ro_compat", 0x64, &[0, u32::MAX]),
            ("s_hash_seed[0]", 0xEC, &[u32::MAX]),
            ("s_first_meta_bg", 0x104, &[0, 1, u32::MAX]),
            ("s_blocks_count_hi", 0x150, &[1, u32::MAX]),
            ("s_flags", 0x160, &[0, 2, u32::MAX]),
            ("s_backup_bgs[0]", 0x24C, &[u32::MAX]),
            ("s_checksum_seed", 0x270, &[0, u32::MAX]),
        ];
        for (field, off, vals) in u32s {
            for &v in *vals {
                s.wild(img, &format!("{field} = {v:#x}"), &[Fix::Super], |b| w32(&mut b[1024..], *off, v));
            }
        }
        let u16s: &[(&str, usize, &[u16])] = &[
            ("s_magic", 0x38, &[0, 0xEF52]),
            ("s_inode_size", 0x58, &[0, 1, 127, 128, 129, 255, 512, 1024, 4096, 8192, 0xFFFF]),
            ("s_reserved_gdt_blocks", 0xCE, &[0xFFFF]),
            ("s_desc_size", 0xFE, &[0, 1, 32, 33, 63, 65, 128, 1024, 2048, 0xFFFF]),
            ("s_min_extra_isize", 0x15C, &[0xFFFF]),
        ];
        for (field, off, vals) in u16s {
            for &v in *vals {
                s.wild(img, &format!("{field} = {v:#x}"), &[Fix::Super], |b| w16(&mut b[1024..], *off, v));
            }
        }
        let u8s: &[(&str, usize, &[u8])] = &[
            ("s_def_hash_version", 0xFC, &[6, 0xFF]),
            ("s_log_groups_per_flex", 0x174, &[0, 31, 32, 0xFF]),
            ("s_checksum_type", 0x175, &[0, 2]),
        ];
        for (field, off, vals) in u8s {
            for &v in *vals {
                s.wild(img, &format!("{field} = {v:#x}"), &[Fix::Super], |b| b[1024 + *off] = v);
            }
        }
        // Single feature bits toggled.
        for (word, off) in [("compat", 0x5C), ("incompat", 0x60), ("ro_compat", 0x64)] {
            for bit in 0..32 {
                s.wild(img, &format!("s_feature_{word} ^= bit {bit}"), &[Fix::Super], |b| {
                    let v = le32(&b[1024..], off) ^ (1 << bit);
                    w32(&mut b[1024..], off, v);
                });
            }
        }
        // Combinations: bigalloc with a wild cluster size (statfs ratio),
        // meta_bg with a wild first_meta_bg, sparse_super2 with wild backups.
        s.wild(img, "bigalloc + s_log_cluster_size 40", &[Fix::Super], |b| {
            let v = le32(&b[1024..], 0x64) | ro_compat::BIGALLOC;
            w32(&mut b[1024..], 0x64, v);
            w32(&mut b[1024..], 0x1C, 40);
        });
        s.wild(img, "meta_bg + s_first_meta_bg 0", &[Fix::Super], |b| {
            let v = le32(&b[1024..], 0x60) | incompat::META_BG;
            w32(&mut b[1024..], 0x60, v);
            w32(&mut b[1024..], 0x104, 0);
        });
        s.wild(img, "csum_seed feature, wrong seed", &[Fix::Super], |b| {
            let v = le32(&b[1024..], 0x60) | incompat::CSUM_SEED;
            w32(&mut b[1024..], 0x60, v);
        });
        s.wild(img, "inodes_per_group halved, inodes_count matching", &[Fix::Super], |b| {
            let ipg = le32(&b[1024..], 0x28) / 2;
            let groups = le32(&b[1024..], 0x0) / le32(&b[1024..], 0x28);
            w32(&mut b[1024..], 0x28, ipg);
            w32(&mut b[1024..], 0x0, ipg * groups);
        });
        s.wild(img, "inode size 128 (records misread)", &[Fix::Super], |b| w16(&mut b[1024..], 0x58, 128));
        s.wild(img, "blocks_per_group doubled", &[Fix::Super], |b| {
            let v = le32(&b[1024..], 0x20) * 2;
            w32(&mut b[1024..], 0x20, v);
        });
    }
    s.finish();
}

// ---------------------------------------------------------------------------
// Group descriptors.

fn desc_target(img: &Image, g: u32) -> Target {
    Target {
        name: format!("group desc {g}"),
        off: img.gdt_off + g as usize * img.desc_size,
        len: img.desc_size,
        fix: Fix::Desc(g),
    }
}

#[test]
fn group_desc_flips() {
    let Some(imgs) = images() else { return };
    let mut s = Suite::new("group desc flips");
    for img in imgs {
        let last = (img.sb.group_count() - 1) as u32;
        for g in [0, last] {
            // Every image has descriptor checksums (crc32c or crc16), so
            // flips are also made with the checksum recomputed.
            s.flips(img, &desc_target(img, g), 64);
            s.flips_fixed(img, &desc_target(img, g), 128);
        }
    }
    s.finish();
}

#[test]
fn group_desc_wild() {
    let Some(imgs) = images() else { return };
    let mut s = Suite::new("group desc wild");
    for img in imgs {
        let blocks = img.sb.blocks_count as u32;
        let last = (img.sb.group_count() - 1) as u32;
        let itable0 = le32(&img.bytes, img.gdt_off + 0x8);
        for g in [0, last] {
            let t = desc_target(img, g);
            let fields: &[(&str, usize, &[u32])] = &[
                ("bg_block_bitmap", 0x0, &[0, 1, blocks - 1, blocks, u32::MAX]),
                ("bg_inode_bitmap", 0x4, &[0, 1, blocks, u32::MAX]),
                ("bg_inode_table", 0x8, &[0, 1, 2, blocks - 1, blocks - 2, blocks, u32::MAX, itable0 + 1]),
            ];
            for (field, off, vals) in fields {
                for &v in *vals {
                    s.wild(img, &format!("group {g} {field} = {v:#x}"), &[Fix::Desc(g)], |b| w32(b, t.off + off, v));
                }
            }
            let u16s: &[(&str, usize, &[u16])] = &[
                ("bg_flags", 0x12, &[0x7, 0xFFFF]),
                ("bg_itable_unused", 0x1C, &[0xFFFF]),
                ("bg_free_counts", 0xC, &[0xFFFF]),
            ];
            for (field, off, vals) in u16s {
                for &v in *vals {
                    s.wild(img, &format!("group {g} {field} = {v:#x}"), &[Fix::Desc(g)], |b| w16(b, t.off + off, v));
                }
            }
            if img.desc_size >= 64 {
                for (field, off) in [("bg_block_bitmap_hi", 0x20), ("bg_inode_table_hi", 0x28)] {
                    for v in [1, u32::MAX] {
                        s.wild(img, &format!("group {g} {field} = {v:#x}"), &[Fix::Desc(g)], |b| {
                            w32(b, t.off + off, v)
                        });
                    }
                }
            }
            s.wild(img, &format!("group {g} descriptor all 0xff"), &[Fix::Desc(g)], |b| {
                b[t.off..t.off + t.len].fill(0xFF)
            });
            s.wild(img, &format!("group {g} descriptor zeroed"), &[Fix::Desc(g)], |b| b[t.off..t.off + t.len].fill(0));
        }
    }
    s.finish();
}

// ---------------------------------------------------------------------------
// Inodes.

const INODE_PATHS: &[&str] = &["/", "/small.txt", "/d", "/d/f4", "/frag", "/htree", "/big", "/fast", "/slow"];

#[test]
fn inode_flips() {
    let Some(imgs) = images() else { return };
    let mut s = Suite::new("inode flips");
    for img in imgs {
        for p in INODE_PATHS {
            let t = img.inode_target(p);
            s.flips_csum_aware(img, &t, 16, 48, 32);
        }
    }
    s.finish();
}

#[test]
fn inode_wild() {
    let Some(imgs) = images() else { return };
    let mut s = Suite::new("inode wild");
    use uext4::format::inode::{FL_EXTENTS, FL_HUGE_FILE, FL_INDEX, FL_INLINE_DATA};
    for img in imgs {
        let table = img.inode_off[&img.ino["/"]] / img.bs;
        for p in INODE_PATHS {
            let t = img.inode_target(p);
            let fix = [t.fix];
            let o = t.off;
            let ino = img.ino[p];
            let mut run = |what: String, f: &dyn Fn(&mut [u8])| s.wild(img, &format!("inode {p}: {what}"), &fix, f);
            for m in [0u16, 0xF000, 0o777, 0x4000 | 0o755, 0x8000 | 0o644, 0xA000 | 0o777, 0x2000, 0x1000] {
                run(format!("i_mode = {m:#o}"), &|b| w16(b, o, m));
            }
            for size in [0u64, 1, 59, 60, 4097, 1 << 32, 1 << 40, 1 << 44, 1 << 63, u64::MAX] {
                run(format!("i_size = {size:#x}"), &|b| {
                    w32(b, o + 0x4, size as u32);
                    w32(b, o + 0x6C, (size >> 32) as u32);
                });
            }
            run("i_links_count = 0, i_mode = 0".into(), &|b| {
                w16(b, o + 0x1A, 0);
                w16(b, o, 0);
            });
            run("i_blocks = max, huge_file".into(), &|b| {
                w32(b, o + 0x1C, u32::MAX);
                w16(b, o + 0x74, u16::MAX);
                let f = le32(b, o + 0x20) | FL_HUGE_FILE;
                w32(b, o + 0x20, f);
            });
            run("i_blocks = 0 (symlinks look fast)".into(), &|b| {
                w32(b, o + 0x1C, 0);
                w16(b, o + 0x74, 0);
            });
            for (what, set, clear) in [
                ("extents flag cleared", 0, FL_EXTENTS),
                ("extents flag set", FL_EXTENTS, 0),
                ("index flag set", FL_INDEX, 0),
                ("index flag cleared", 0, FL_INDEX),
                ("inline data flag set", FL_INLINE_DATA, 0),
                ("all flags", u32::MAX, 0),
            ] {
                run(what.into(), &|b| {
                    let f = (le32(b, o + 0x20) | set) & !clear;
                    w32(b, o + 0x20, f);
                });
            }
            run("i_generation changed".into(), &|b| w32(b, o + 0x64, le32(b, o + 0x64) ^ 0x5A5A));
            for acl in
                [1u64, 2, table as u64, img.sb.blocks_count - 1, img.sb.blocks_count, u32::MAX as u64, (1 << 48) - 1]
            {
                run(format!("i_file_acl = {acl:#x}"), &|b| w48(b, o + 0x68, o + 0x76, acl));
            }
            for extra in [0u16, 1, 2, 3, 4, 30, 126, 127, 128, 130, 0xFFFF] {
                run(format!("i_extra_isize = {extra}"), &|b| w16(b, o + 0x80, extra));
            }
            run("i_block all 0xff".into(), &|b| b[o + 0x28..o + 0x28 + 60].fill(0xFF));
            run("i_block zeroed".into(), &|b| b[o + 0x28..o + 0x28 + 60].fill(0));
            run("whole inode 0xff".into(), &|b| b[o..o + t.len].fill(0xFF));
            // The in-inode xattr area (the magic after i_extra_isize).
            let ea = o + 128 + usize::from(le16(&img.bytes, o + 0x80));
            run("in-inode xattr magic".into(), &|b| w32(b, ea, 0xEA02_0000));
            run("in-inode xattr: magic, entries run off the end".into(), &|b| {
                w32(b, ea, 0xEA02_0000);
                b[ea + 4..o + t.len].fill(0x11);
            });
            for (what, off, v) in [
                ("e_value_offs 0xffff", 2usize, 0xFFFFu32),
                ("e_value_size huge", 8, u32::MAX),
                ("e_value_size past the inode", 8, 200),
                ("e_value_inum set", 4, ino),
            ] {
                run(format!("in-inode xattr {what}"), &|b| {
                    if le32(b, ea) != 0xEA02_0000 {
                        w32(b, ea, 0xEA02_0000);
                        // One entry: name "a" (user.), value of 4 bytes at offset 100.
                        b[ea + 4..ea + 4 + 16].fill(0);
                        b[ea + 4] = 1;
                        b[ea + 5] = 1;
                        w16(b, ea + 4 + 2, 100);
                        w32(b, ea + 4 + 8, 4);
                        b[ea + 4 + 16] = b'a';
                        w32(b, ea + 4 + 20, 0);
                    }
                    if off == 2 {
                        w16(b, ea + 4 + 2, v as u16);
                    } else {
                        w32(b, ea + 4 + off, v);
                    }
                });
            }
        }
    }
    s.finish();
}

// ---------------------------------------------------------------------------
// Extent trees (the depth >= 1 tree of /frag).

#[test]
fn extent_flips() {
    let Some(imgs) = images() else { return };
    let mut s = Suite::new("extent flips");
    for img in imgs.iter().filter(|i| i.extents) {
        let frag = img.ino["/frag"];
        let root =
            Target { name: "extent root".into(), off: img.inode_off[&frag] + 0x28, len: 60, fix: Fix::Inode(frag) };
        s.flips_csum_aware(img, &root, 32, 240, 64);
        let index = img.frag_tree.iter().find(|(_, d)| *d > 0).copied();
        let leaf = img.frag_tree.iter().find(|(_, d)| *d == 0).copied();
        for (blk, depth) in index.into_iter().chain(leaf) {
            let used = 12 * (usize::from(le16(&img.bytes, img.block_off(blk) + 2)) + 1);
            let t = Target {
                name: format!("extent block {blk} (depth {depth})"),
                off: img.block_off(blk),
                len: used,
                fix: Fix::ExtentBlock { block: blk, ino: frag },
            };
            s.flips_csum_aware(img, &t, 32, 192, 64);
        }
    }
    s.finish();
}

#[test]
fn extent_wild() {
    let Some(imgs) = images() else { return };
    let mut s = Suite::new("extent wild");
    for img in imgs.iter().filter(|i| i.extents) {
        let frag = img.ino["/frag"];
        let ioff = img.inode_off[&frag];
        let r = ioff + 0x28;
        let table = (ioff / img.bs) as u64;
        let blocks = img.sb.blocks_count;
        let root_depth = le16(&img.bytes, r + 6);
        let fixi = [Fix::Inode(frag)];
        // The root node in i_block.
        for (what, off, v) in [
            ("eh_magic = 0", 0usize, 0u16),
            ("eh_entries = 0", 2, 0),
            ("eh_entries = 5 (> max)", 2, 5),
            ("eh_entries = 0xffff", 2, 0xFFFF),
            ("eh_max = 0", 4, 0),
            ("eh_max = 5 (> capacity)", 4, 5),
            ("eh_max = 0xffff", 4, 0xFFFF),
            ("eh_depth = 0 (index read as leaf)", 6, 0),
            ("eh_depth + 1", 6, root_depth + 1),
            ("eh_depth = 5", 6, 5),
            ("eh_depth = 6", 6, 6),
            ("eh_depth = 0xffff", 6, 0xFFFF),
        ] {
            s.wild(img, &format!("/frag root {what}"), &fixi, |b| w16(b, r + off, v));
        }
        let own_tree: Vec<u64> = img.frag_tree.iter().map(|(b, _)| *b).collect();
        let mut targets = vec![0u64, 1, table, blocks - 1, blocks, u32::MAX as u64, (1 << 48) - 1];
        targets.extend(own_tree.iter().copied());
        for t in &targets {
            s.wild(img, &format!("/frag root index[0] -> block {t:#x}"), &fixi, |b| w48(b, r + 12 + 4, r + 12 + 8, *t));
        }
        s.wild(img, "/frag root index[1].ei_block = 0 (out of order)", &fixi, |b| w32(b, r + 24, 0));
        s.wild(img, "/frag root index[0].ei_block = u32::MAX", &fixi, |b| w32(b, r + 12, u32::MAX));
        // Tree blocks.
        for &(blk, depth) in &img.frag_tree {
            let o = img.block_off(blk);
            let fx = [Fix::ExtentBlock { block: blk, ino: frag }];
            let entries = le16(&img.bytes, o + 2);
            let name = format!("/frag block {blk} (depth {depth})");
            for (what, off, v) in [
                ("eh_magic = 0", 0usize, 0u16),
                ("eh_entries = 0", 2, 0),
                ("eh_entries = max + 1", 2, le16(&img.bytes, o + 4) + 1),
                ("eh_entries = 0xffff", 2, 0xFFFF),
                ("eh_max = 0", 4, 0),
                ("eh_max = capacity + 1", 4, ((img.bs - 12) / 12 + 1) as u16),
                ("eh_max = 0xffff", 4, 0xFFFF),
                ("eh_depth + 1", 6, depth + 1),
                ("eh_depth = 0xffff", 6, 0xFFFF),
            ] {
                s.wild(img, &format!("{name} {what}"), &fx, |b| w16(b, o + off, v));
            }
            if depth > 0 {
                let mut t2 = targets.clone();
                t2.push(blk);
                for t in t2 {
                    s.wild(img, &format!("{name} index[0] -> {t:#x}"), &fx, |b| w48(b, o + 12 + 4, o + 12 + 8, t));
                }
                s.wild(img, &format!("{name} every index -> itself"), &fx, |b| {
                    for i in 0..usize::from(entries) {
                        w32(b, o + 12 * (i + 1) + 4, blk as u32);
                        w16(b, o + 12 * (i + 1) + 8, 0);
                    }
                });
                s.wild(img, &format!("{name} self-reference at the same depth"), &fx, |b| {
                    // Claim the child has our depth + 1 so the depth check
                    // alone cannot save the walk.
                    w32(b, o + 12 + 4, blk as u32);
                    w16(b, o + 6, depth);
                });
            } else {
                for (what, e, f) in [
                    ("ee_len = 0", 0usize, &(|b: &mut [u8], e: usize| w16(b, e + 4, 0)) as &dyn Fn(&mut [u8], usize)),
                    ("ee_len = 0xffff (unwritten 32767)", 0, &|b, e| w16(b, e + 4, 0xFFFF)),
                    ("ee_len = 32768", 0, &|b, e| w16(b, e + 4, 32768)),
                    ("ee_start beyond the filesystem", 0, &|b, e| w32(b, e + 8, blocks as u32)),
                    ("ee_start = 0", 0, &|b, e| w32(b, e + 8, 0)),
                    ("ee_start_hi = 0xffff", 0, &|b, e| w16(b, e + 6, 0xFFFF)),
                    ("ee_start near the end, len 32768", 0, &|b, e| {
                        w32(b, e + 8, blocks as u32 - 10);
                        w16(b, e + 4, 32768)
                    }),
                    ("ee_block = u32::MAX", 1, &|b, e| w32(b, e, u32::MAX)),
                    ("overlapping extents", 1, &|b, e| w32(b, e, le32(b, e - 12))),
                    ("extent before its predecessor", 2, &|b, e| w32(b, e, 0)),
                    ("extent mapping the inode table", 0, &|b, e| {
                        w32(b, e + 8, table as u32);
                        w16(b, e + 4, 64)
                    }),
                ] {
                    s.wild(img, &format!("{name} extent[{e}] {what}"), &fx, |b| f(b, o + 12 * (e + 1)));
                }
            }
        }
    }
    s.finish();
}

// ---------------------------------------------------------------------------
// Directory entries (linear leaves and htree leaves).

fn dir_leaf_targets(img: &Image) -> Vec<(Target, u64)> {
    let mut v = Vec::new();
    for (dir, lblk) in [("/", 0u64), ("/d", 0), ("/htree", 1)] {
        let Some(blk) = img.dir_block(dir, lblk) else { continue };
        let t = Target {
            name: format!("dir {dir} block {lblk}"),
            off: img.block_off(blk),
            len: img.bs,
            fix: Fix::DirLeaf { block: blk, ino: img.ino[dir] },
        };
        v.push((t, blk));
    }
    v
}

#[test]
fn dirent_flips() {
    let Some(imgs) = images() else { return };
    let mut s = Suite::new("dirent flips");
    for img in imgs {
        for (t, _) in dir_leaf_targets(img) {
            // The used part of small directories is at the start.
            let t = Target { len: t.len.min(256), ..t };
            s.flips_csum_aware(img, &t, 32, 128, 64);
        }
    }
    s.finish();
}

#[test]
fn dirent_wild() {
    let Some(imgs) = images() else { return };
    let mut s = Suite::new("dirent wild");
    for img in imgs {
        let bs = img.bs;
        for (t, _) in dir_leaf_targets(img) {
            let o = t.off;
            let fx = [t.fix];
            // Offsets of the first three entries.
            let e0 = 0usize;
            let e1 = usize::from(le16(&img.bytes, o + 4));
            let e2 = e1 + usize::from(le16(&img.bytes, o + e1 + 4));
            for (at, e) in [("entry 0", e0), ("entry 1", e1), ("entry 2", e2)] {
                if e + 12 > bs {
                    continue;
                }
                let rl = le16(&img.bytes, o + e + 4);
                for v in [0u16, 1, 4, 8, 11, 13, rl + 2, (bs - e) as u16 + 4, (bs - e) as u16, 0xFFFC, 0xFFFF] {
                    s.wild(img, &format!("{}: {at} rec_len = {v}", t.name), &fx, |b| w16(b, o + e + 4, v));
                }
                for v in [0u8, 255, (rl as usize).saturating_sub(7).min(255) as u8] {
                    s.wild(img, &format!("{}: {at} name_len = {v}", t.name), &fx, |b| b[o + e + 6] = v);
                }
                for v in [0u32, 1, 2, 7, 11, img.sb.inodes_count, img.sb.inodes_count + 1, u32::MAX] {
                    s.wild(img, &format!("{}: {at} inode = {v}", t.name), &fx, |b| w32(b, o + e, v));
                }
                s.wild(img, &format!("{}: {at} file_type = 0xff", t.name), &fx, |b| b[o + e + 7] = 0xFF);
                s.wild(img, &format!("{}: {at} name contains '/' and NUL", t.name), &fx, |b| {
                    b[o + e + 8] = b'/';
                    if b[o + e + 6] > 1 {
                        b[o + e + 9] = 0;
                    }
                });
            }
            // Directory loops: an entry of the directory pointing at the
            // root, and one pointing at the directory itself.
            for (what, target) in [("-> root", 2u32), ("-> itself", le32(&img.bytes, o))] {
                s.wild(img, &format!("{}: entry 2 {what} (as a directory)", t.name), &fx, |b| {
                    if e2 + 12 <= bs {
                        w32(b, o + e2, target);
                        b[o + e2 + 7] = 2;
                    }
                });
            }
            s.wild(img, &format!("{}: checksum tail destroyed", t.name), &fx, |b| w16(b, o + bs - 12 + 4, 0));
            s.wild(img, &format!("{}: block zeroed", t.name), &[], |b| b[o..o + bs].fill(0));
            s.wild(img, &format!("{}: block 0xff", t.name), &fx, |b| b[o..o + bs].fill(0xFF));
            s.wild(img, &format!("{}: one entry of rec_len = block size", t.name), &fx, |b| {
                w16(b, o + 4, bs as u16);
            });
        }
    }
    s.finish();
}

// ---------------------------------------------------------------------------
// htree (dx) nodes: the root of /htree and /big, and /big's interior node.

struct DxTarget {
    t: Target,
    dir: &'static str,
    root: bool,
}

fn dx_targets(img: &Image) -> Vec<DxTarget> {
    let mut v = Vec::new();
    for dir in ["/htree", "/big"] {
        let block = img.dx_root(dir);
        let node = img.dx_node(block, true);
        let len = 0x20 + node.entries.len() * 8;
        let ino = img.ino[dir];
        let t = Target {
            name: format!("dx root of {dir}"),
            off: img.block_off(block),
            len,
            fix: Fix::Dx { block, ino, root: true },
        };
        v.push(DxTarget { t, dir, root: true });
        let levels = img.bytes[img.block_off(block) + 0x1E];
        if levels > 0 {
            let child = node.entries[0].block;
            let block = img.dir_block(dir, u64::from(child)).unwrap();
            let n = img.dx_node(block, false);
            let len = 0x8 + n.entries.len() * 8;
            let t = Target {
                name: format!("dx node {child} of {dir}"),
                off: img.block_off(block),
                len,
                fix: Fix::Dx { block, ino, root: false },
            };
            v.push(DxTarget { t, dir, root: false });
        }
    }
    v
}

#[test]
fn dx_flips() {
    let Some(imgs) = images() else { return };
    let mut s = Suite::new("dx flips");
    for img in imgs {
        for d in dx_targets(img) {
            s.flips_csum_aware(img, &d.t, 32, 96, 64);
        }
    }
    s.finish();
}

#[test]
fn dx_wild() {
    let Some(imgs) = images() else { return };
    let mut s = Suite::new("dx wild");
    for img in imgs {
        for d in dx_targets(img) {
            let o = d.t.off;
            let fx = [d.t.fix];
            let name = &d.t.name;
            let e = if d.root { 0x20 } else { 0x8 };
            let limit = le16(&img.bytes, o + e);
            let count = le16(&img.bytes, o + e + 2);
            let nblocks = img.dir_blocks.keys().filter(|(p, _)| *p == d.dir).count() as u32;
            if d.root {
                for (what, off, v) in [
                    ("hash_version = 6", 0x1C, 6u8),
                    ("hash_version = 0xff", 0x1C, 0xFF),
                    ("info_length = 0", 0x1D, 0),
                    ("indirect_levels = 1", 0x1E, 1),
                    ("indirect_levels = 2", 0x1E, 2),
                    ("indirect_levels = 3", 0x1E, 3),
                    ("indirect_levels = 0xff", 0x1E, 0xFF),
                    ("indirect_levels = 0", 0x1E, 0),
                    ("unused_flags = 1", 0x1F, 1),
                ] {
                    s.wild(img, &format!("{name}: {what}"), &fx, |b| b[o + off] = v);
                }
            } else {
                s.wild(img, &format!("{name}: fake entry rec_len = 12 (not a node)"), &fx, |b| w16(b, o + 4, 12));
                s.wild(img, &format!("{name}: fake entry inode = 5"), &fx, |b| w32(b, o, 5));
            }
            for (what, off, v) in [
                ("limit = 0", 0usize, 0u16),
                ("limit + 1", 0, limit + 1),
                ("limit = 0xffff", 0, 0xFFFF),
                ("count = 0", 2, 0),
                ("count = limit", 2, limit),
                ("count = limit + 1", 2, limit + 1),
                ("count = 0xffff", 2, 0xFFFF),
            ] {
                s.wild(img, &format!("{name}: {what}"), &fx, |b| w16(b, o + e + off, v));
            }
            // Entry blocks: at itself (block 0 for the root, its own lblk
            // for a node), past the end, huge.
            let own = if d.root { 0 } else { le32(&img.bytes, img.block_off(img.dx_root(d.dir)) + 0x24) };
            for (i, what) in [(0usize, "entry 0"), (1, "entry 1"), (usize::from(count) - 1, "last entry")] {
                for v in [0u32, own, 1, nblocks - 1, nblocks, u32::MAX] {
                    s.wild(img, &format!("{name}: {what} block = {v}"), &fx, |b| w32(b, o + e + 8 * i + 4, v));
                }
            }
            s.wild(img, &format!("{name}: every entry -> block 0 (loop)"), &fx, |b| {
                for i in 0..usize::from(count) {
                    w32(b, o + e + 8 * i + 4, 0);
                }
            });
            s.wild(img, &format!("{name}: every entry -> itself (loop)"), &fx, |b| {
                for i in 0..usize::from(count) {
                    w32(b, o + e + 8 * i + 4, own);
                }
            });
            s.wild(img, &format!("{name}: hashes out of order"), &fx, |b| {
                w32(b, o + e + 8, u32::MAX);
            });
            s.wild(img, &format!("{name}: every hash equal (collision chain)"), &fx, |b| {
                for i in 1..usize::from(count) {
                    w32(b, o + e + 8 * i, 0x100);
                }
            });
            s.wild(img, &format!("{name}: every hash with the collision bit"), &fx, |b| {
                for i in 1..usize::from(count) {
                    let h = le32(b, o + e + 8 * i) | 1;
                    w32(b, o + e + 8 * i, h);
                }
            });
            if !d.root {
                // The interior node points back at the root's first child
                // (itself) and the root points at the node twice: a loop
                // that only the level count can break.
                let rb = img.block_off(img.dx_root(d.dir));
                let rfix = Fix::Dx { block: img.dx_root(d.dir), ino: img.ino[d.dir], root: true };
                s.wild(img, &format!("{name}: root entries all -> this node"), &[rfix], |b| {
                    let c = usize::from(le16(b, rb + 0x22));
                    for i in 0..c {
                        w32(b, rb + 0x20 + 8 * i + 4, own);
                    }
                });
            }
        }
    }
    s.finish();
}

// ---------------------------------------------------------------------------
// Extended attribute blocks.

#[test]
fn xattr_flips() {
    let Some(imgs) = images() else { return };
    let mut s = Suite::new("xattr flips");
    for img in imgs {
        let blk = img.xattr_block;
        let t =
            Target { name: format!("xattr block {blk}"), off: img.block_off(blk), len: 128, fix: Fix::XattrBlock(blk) };
        s.flips_csum_aware(img, &t, 48, 256, 96);
        let tail = Target {
            name: format!("xattr block {blk} values"),
            off: img.block_off(blk) + 128,
            len: img.bs - 128,
            fix: Fix::XattrBlock(blk),
        };
        s.flips(img, &tail, 32);
    }
    s.finish();
}

#[test]
fn xattr_wild() {
    let Some(imgs) = images() else { return };
    let mut s = Suite::new("xattr wild");
    for img in imgs {
        let blk = img.xattr_block;
        let o = img.block_off(blk);
        let bs = img.bs;
        let fx = [Fix::XattrBlock(blk)];
        let name = format!("xattr block {blk}");
        for (what, off, v) in [
            ("h_magic = 0", 0usize, 0u32),
            ("h_refcount = 0", 4, 0),
            ("h_refcount = max", 4, u32::MAX),
            ("h_blocks = 0", 8, 0),
            ("h_blocks = 2", 8, 2),
        ] {
            s.wild(img, &format!("{name}: {what}"), &fx, |b| w32(b, o + off, v));
        }
        // The entries start at 0x20.
        let mut e = 0x20;
        let mut idx = 0;
        while le32(&img.bytes, o + e) != 0 && e + 16 < bs {
            let n = usize::from(img.bytes[o + e]);
            for (what, off, v) in [
                ("e_value_offs = 0xffff", 2usize, 0xFFFFu32),
                ("e_value_offs = block size - 2", 2, (bs - 2) as u32),
                ("e_value_offs = 0 (into the header)", 2, 0),
                ("e_value_offs = 4 (into the header)", 2, 4),
                ("e_value_inum = 12 (EA inode)", 4, 12),
                ("e_value_inum = u32::MAX", 4, u32::MAX),
                ("e_value_size = u32::MAX", 8, u32::MAX),
                ("e_value_size = 0x7fffffff", 8, 0x7FFF_FFFF),
                ("e_value_size = block size", 8, bs as u32),
                ("e_value_size = 0", 8, 0),
            ] {
                s.wild(img, &format!("{name}: entry {idx} {what}"), &fx, |b| {
                    if off == 2 {
                        w16(b, o + e + 2, v as u16);
                    } else {
                        w32(b, o + e + off, v);
                    }
                });
            }
            for (what, off, v) in
                [("e_name_len = 255", 0usize, 255u8), ("e_name_len = 0", 0, 0), ("e_name_index = 99", 1, 99)]
            {
                s.wild(img, &format!("{name}: entry {idx} {what}"), &fx, |b| b[o + e + off] = v);
            }
            for index in [2u8, 3] {
                s.wild(
                    img,
                    &format!("{name}: entry {idx} made a POSIX ACL ({index}) with a garbage value"),
                    &fx,
                    |b| {
                        b[o + e + 1] = index;
                    },
                );
            }
            e = (e + 16 + n + 3) & !3;
            idx += 1;
        }
        s.wild(img, &format!("{name}: no terminator (entries run to the end)"), &fx, |b| {
            let end = e;
            b[o + end..o + bs].fill(0x11);
        });
        s.wild(img, &format!("{name}: block 0xff"), &fx, |b| b[o..o + bs].fill(0xFF));
    }
    s.finish();
}

// ---------------------------------------------------------------------------
// Indirect blocks (the block-map image; no checksums there).

#[test]
fn indirect_blocks() {
    let Some(imgs) = images() else { return };
    let mut s = Suite::new("indirect blocks");
    for img in imgs.iter().filter(|i| !i.extents) {
        let frag = img.ino["/frag"];
        let io = img.inode_off[&frag];
        let blocks = img.sb.blocks_count as u32;
        let table = (io / img.bs) as u32;
        let ind = le32(&img.bytes, io + 0x28 + 12 * 4);
        let dind = le32(&img.bytes, io + 0x28 + 13 * 4);
        for (what, slot) in [("single", 12usize), ("double", 13), ("triple", 14), ("direct 0", 0)] {
            for v in [1u32, 2, table, blocks - 1, blocks, u32::MAX, ind, dind] {
                s.wild(img, &format!("/frag {what} indirect pointer = {v:#x}"), &[], |b| {
                    w32(b, io + 0x28 + slot * 4, v)
                });
            }
        }
        for (what, blk) in [("single", ind), ("double", dind)] {
            let t = Target {
                name: format!("{what} indirect block {blk}"),
                off: img.block_off(u64::from(blk)),
                len: img.bs,
                fix: Fix::None,
            };
            s.flips(img, &t, 192);
            let o = t.off;
            s.wild(img, &format!("{what} indirect block all 0xff"), &[], |b| b[o..o + img.bs].fill(0xFF));
            s.wild(img, &format!("{what} indirect block -> itself"), &[], |b| {
                for i in 0..img.bs / 4 {
                    w32(b, o + 4 * i, blk);
                }
            });
            s.wild(img, &format!("{what} indirect block entries = blocks_count"), &[], |b| {
                for i in 0..img.bs / 4 {
                    w32(b, o + 4 * i, blocks);
                }
            });
        }
    }
    s.finish();
}

// ---------------------------------------------------------------------------
// Regression tests for library bugs that the suites above and the fuzz
// target found, all fixed. Each test is a minimal reproducer:
// - s_log_cluster_size was validated only with bigalloc, so a wild value
//   overflowed the shifts in statfs and is_fast_symlink. Fix:
//   Superblock::validate (format/superblock.rs) refuses a cluster size
//   other than the block size without bigalloc.
// - Past the addressable range, block mapping returned 1-block holes, so
//   readdir, lookup and extents() stepped through a huge i_size one block
//   at a time (hours). Fix: map_block (inode/mod.rs) and the indirect map
//   (inode/indirect.rs) return one hole to the end of the file there.

fn image(name: &str) -> Option<&'static Image> {
    images()?.iter().find(|i| i.name == name)
}

/// Runs `op` on `img` changed by `f` (checksums in `fixes` recomputed)
/// under the watchdog, failing on a panic, a hang or a huge allocation.
fn reproduce(
    img: &Image,
    what: &str,
    expect_open_error: Option<&str>,
    fixes: &[Fix],
    f: impl FnOnce(&mut [u8]),
    op: fn(&Filesystem) -> WalkStats,
) {
    let name = format!("{}: {what}", img.name);
    let r = run_case_with(&name, img.damaged(fixes, f), op).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.open_error, expect_open_error, "{name}: unexpected outcome of open");
}

/// Sets i_size of the inode at `path` (its checksum is the caller's fix).
fn set_size(img: &Image, b: &mut [u8], path: &str, size: u64) {
    let o = img.inode_off[&img.ino[path]];
    w32(b, o + 0x4, size as u32);
    w32(b, o + 0x6C, (size >> 32) as u32);
}

/// [`reproduce`] on `img` with s_log_cluster_size = `v` (superblock
/// checksum recomputed), which open must refuse.
fn reproduce_log_cluster_size(img: &Image, v: u32, op: fn(&Filesystem) -> WalkStats) {
    let what = format!("s_log_cluster_size = {v:#x}");
    reproduce(img, &what, Some("corrupt"), &[Fix::Super], |b| w32(&mut b[1024..], 0x1C, v), op);
}

/// [`reproduce`] on `img` with the i_size of `path` set to 2^`log2`
/// (checksums of `fixes` recomputed), which open accepts.
fn reproduce_huge_size(img: &Image, path: &str, log2: u32, fixes: &[Fix], op: fn(&Filesystem) -> WalkStats) {
    let what = format!("{path} i_size = 2^{log2}");
    reproduce(img, &what, None, fixes, |b| set_size(img, b, path, 1 << log2), op);
}

fn statfs_only(fs: &Filesystem) -> WalkStats {
    let _ = fs.statfs();
    WalkStats::default()
}

#[test]
fn regression_statfs_shift_overflow() {
    let Some(img) = image("1k-nocsum") else { return };
    // fs.rs statfs: `1u64 << (log_cluster_size - log_block_size)` overflowed
    // when s_log_cluster_size was not validated without bigalloc; now open
    // refuses it.
    reproduce_log_cluster_size(img, 100, statfs_only);
}

#[test]
fn regression_readlink_shift_overflow() {
    let Some(img) = image("1k-nocsum") else { return };
    // fs.rs is_fast_symlink: `1u64 << (10 + max(log_cluster_size,
    // log_block_size))` overflowed the shift at 54 and the add at u32::MAX;
    // now open refuses both.
    for v in [54, u32::MAX] {
        reproduce_log_cluster_size(img, v, |fs| {
            let ino = fs.resolve("/fast").unwrap();
            let _ = fs.readlink(ino);
            WalkStats::default()
        });
    }
}

#[test]
fn regression_statfs_multiply_overflow() {
    let Some(img) = image("1k-nocsum") else { return };
    // The shift fits (60) but free_blocks * 2^60 overflowed; now refused at
    // open.
    reproduce_log_cluster_size(img, 60, statfs_only);
}

#[test]
fn regression_readdir_hangs_on_huge_directory_size() {
    let Some(img) = image("1k-csum") else { return };
    // Found by `1k-nocsum: inode / flip bit 881` (i_size_high bit 17).
    reproduce_huge_size(img, "/", 49, &[Fix::Inode(2)], |fs| {
        let _ = fs.read_dir_all(fs.root());
        WalkStats::default()
    });
}

#[test]
fn regression_lookup_hangs_on_huge_directory_size() {
    let Some(img) = image("1k-csum") else { return };
    reproduce_huge_size(img, "/", 49, &[Fix::Inode(2)], |fs| {
        let _ = fs.lookup(fs.root(), b"no-such-name");
        WalkStats::default()
    });
}

#[test]
fn regression_extents_hangs_on_huge_blockmap_file() {
    let Some(img) = image("1k-blockmap") else { return };
    reproduce_huge_size(img, "/d/f4", 44, &[], |fs| {
        let ino = fs.resolve("/d/f4").unwrap();
        let _ = fs.extents(ino);
        WalkStats::default()
    });
}

#[test]
fn regression_readdir_hangs_on_huge_blockmap_directory() {
    let Some(img) = image("1k-blockmap") else { return };
    reproduce_huge_size(img, "/d", 44, &[], |fs| {
        let d = fs.resolve("/d").unwrap();
        let _ = fs.read_dir_all(d);
        WalkStats::default()
    });
}

/// The broad suites' cases that met the bugs above, with the full walk.
#[test]
fn regression_cases_from_the_suites() {
    let Some(img) = image("1k-nocsum") else { return };
    let o = img.inode_off[&2];
    reproduce(img, "inode / flip bit 881 (byte 0x6e)", None, &[], |b| b[o + 0x6E] ^= 2, walk);
    reproduce(img, "superblock flip bit 255 (byte 0x1f)", Some("corrupt"), &[], |b| b[1024 + 0x1F] ^= 0x80, walk);
}

// ---------------------------------------------------------------------------
// Typed corruption: representative damage is reported as a matchable kind,
// naming the structure and where it is.

/// Opens `img` changed by `f` (checksums in `fixes` recomputed) and returns
/// the corruption `op` reports.
fn corruption_of(
    img: &Image,
    fixes: &[Fix],
    f: impl FnOnce(&mut [u8]),
    op: impl FnOnce(&Filesystem) -> uext4::Result<()>,
) -> uext4::Corruption {
    let b = img.damaged(fixes, f);
    let fs = Filesystem::open_device(Arc::new(MemoryDevice::from_bytes(&b)), MountOptions::default())
        .unwrap_or_else(|e| panic!("{}: open: {e}", img.name));
    match op(&fs) {
        Err(Error::Corrupt(c)) => {
            // The message names the structure; the errno stays EUCLEAN.
            let e = Error::Corrupt(c.clone());
            assert!(e.to_string().starts_with(&format!("corrupt {}", c.structure)), "{e}");
            assert_eq!(e.errno(), libc::EUCLEAN);
            *c
        }
        other => panic!("{}: expected a corruption, got {other:?}", img.name),
    }
}

#[test]
fn typed_corruption_kinds() {
    let Some(imgs) = images() else { return };
    for img in imgs.iter().filter(|i| i.extents) {
        let read_all = |path: &'static str| {
            move |fs: &Filesystem| -> uext4::Result<()> {
                let ino = fs.resolve(path)?;
                let mut buf = vec![0u8; 4096];
                fs.inodes().read(ino, 0, &mut buf).map(|_| ())
            }
        };

        // The extent root of /small.txt with a bad magic: named by inode.
        let ino = img.ino["/small.txt"];
        let o = img.inode_off[&ino] + 0x28;
        let c = corruption_of(img, &[Fix::Inode(ino)], |b| w16(b, o, 0xBAD0), read_all("/small.txt"));
        assert_eq!(c.structure, Structure::Extent, "{}", img.name);
        assert_eq!(c.location, Location::Inode(ino), "{}", img.name);
        assert_eq!(c.kind, CorruptKind::BadMagic { found: 0xBAD0 }, "{}", img.name);

        // A directory entry whose rec_len is not a multiple of 4: the
        // block and the entry's offset are named.
        let d0 = img.dir_block("/d", 0).expect("/d block 0");
        let d = img.ino["/d"];
        let o = img.block_off(d0);
        let c = corruption_of(
            img,
            &[Fix::DirLeaf { block: d0, ino: d }],
            |b| w16(b, o + 4, 13),
            |fs| fs.readdir(fs.resolve("/d")?, 0, 100).map(|_| ()),
        );
        assert_eq!(c.structure, Structure::DirEntry, "{}", img.name);
        assert_eq!(c.location, Location::BlockOffset { block: d0, offset: 0 }, "{}", img.name);
        assert!(matches!(c.kind, CorruptKind::OutOfRange { field: "rec_len", value: 13 }), "{}: {c}", img.name);

        // The xattr block of /small.txt with h_blocks = 2.
        let xb = img.xattr_block;
        let o = img.block_off(xb);
        let c = corruption_of(
            img,
            &[Fix::XattrBlock(xb)],
            |b| w32(b, o + 8, 2),
            |fs| fs.list_xattrs(fs.resolve("/small.txt")?).map(|_| ()),
        );
        assert_eq!((c.structure, c.location), (Structure::Xattr, Location::Block(xb)), "{}", img.name);
        assert_eq!(c.kind, CorruptKind::Mismatch { field: "h_blocks", value: 2, expected: 1 }, "{}", img.name);

        // Every extent block of /frag one level deeper than its parent
        // implies: the first one read is named with its inode.
        let frag = img.ino["/frag"];
        let fixes: Vec<Fix> = img.frag_tree.iter().map(|&(block, _)| Fix::ExtentBlock { block, ino: frag }).collect();
        let c = corruption_of(
            img,
            &fixes,
            |b| {
                for &(block, depth) in &img.frag_tree {
                    w16(b, img.block_off(block) + 6, depth + 1);
                }
            },
            read_all("/frag"),
        );
        assert_eq!(c.structure, Structure::Extent, "{}", img.name);
        let Location::InodeBlock { ino, block } = c.location else { panic!("{}: {c}", img.name) };
        let depth = img.frag_tree.iter().find(|t| t.0 == block).map(|t| u64::from(t.1)).expect("an extent block");
        assert_eq!(ino, frag, "{}", img.name);
        assert_eq!(
            c.kind,
            CorruptKind::Mismatch { field: "eh_depth", value: depth + 1, expected: depth },
            "{}",
            img.name
        );
    }
}
