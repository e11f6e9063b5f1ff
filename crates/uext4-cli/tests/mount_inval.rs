//! O_DIRECT writes against the kernel's page cache through the mount: the
//! daemon drops a direct write's range from the kernel's pages before it
//! answers (uext4-fuse's `notify::Notifier::inval_then`), so that
//! - after an asynchronous O_DIRECT write completes, no buffered reader
//!   sees the old bytes (fstests generic/451's shape: an AIO O_DIRECT
//!   writer and buffered readers of one file, checked against what was
//!   written) and `stat` shows the write's mtime;
//! - and that invalidation never deadlocks with the READs it waits for:
//!   many O_DIRECT writers (synchronous and AIO, small and large), buffered
//!   readers and mapped readers and writers of the same files, on one or
//!   two serving threads, finish; a hang fails the test (the connection is
//!   aborted and the daemon killed: mount_support's watchdog, over the
//!   whole test) instead of hanging it, as `a_hang_fails_the_test` shows
//!   with a WRITE the daemon never answers.
//!
//! Each runs on the transport UEXT4_TEST_TRANSPORT names (dev or uring).
//! Needs root and /dev/fuse.

use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

mod mount_support;

use mount_support::Fixture;

/// How long each test may take before its watchdog fails it (they take
/// seconds; a deadlock takes forever).
const LIMIT: Duration = Duration::from_secs(300);

/// Page-aligned buffer for O_DIRECT.
struct Aligned {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is owned memory, used by one thread at a time.
unsafe impl Send for Aligned {}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let layout = std::alloc::Layout::from_size_align(len, 4096).expect("layout");
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory");
        Aligned { ptr, len }
    }
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points at `len` owned, initialized bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, std::alloc::Layout::from_size_align(self.len, 4096).expect("layout")) }
    }
}

/// struct iocb of the Linux AIO ABI (x86-64 and other little-endian 64-bit).
#[repr(C)]
#[derive(Default)]
struct Iocb {
    data: u64,
    key: u32,
    rw_flags: i32,
    opcode: u16,
    reqprio: i16,
    fildes: u32,
    buf: u64,
    nbytes: u64,
    offset: i64,
    reserved2: u64,
    flags: u32,
    resfd: u32,
}

/// struct io_event.
#[repr(C)]
#[derive(Default, Clone, Copy)]
struct IoEvent {
    data: u64,
    obj: u64,
    res: i64,
    res2: i64,
}

const IOCB_CMD_PWRITE: u16 = 1;

/// A Linux AIO context (io_setup), for asynchronous O_DIRECT writes: the
/// kernel's FUSE client sends them in the background and drops its
/// cached pages only when it sends them, not when they complete.
struct Aio(u64);

impl Aio {
    fn new(depth: u32) -> Aio {
        let mut ctx = 0u64;
        // SAFETY: io_setup writes the context id to the pointer.
        let r = unsafe { libc::syscall(libc::SYS_io_setup, depth as libc::c_long, &mut ctx as *mut u64) };
        assert_eq!(r, 0, "io_setup: {}", std::io::Error::last_os_error());
        Aio(ctx)
    }

    /// Submits O_DIRECT writes of `bufs` at `offsets` to `fd` and waits
    /// for all of them; each must write in full.
    fn write_all(&self, fd: i32, bufs: &mut [&mut Aligned], offsets: &[u64], between: impl FnOnce()) {
        let mut cbs: Vec<Iocb> = bufs
            .iter_mut()
            .zip(offsets)
            .enumerate()
            .map(|(i, (b, &o))| Iocb {
                data: i as u64,
                opcode: IOCB_CMD_PWRITE,
                fildes: fd as u32,
                buf: b.ptr as u64,
                nbytes: b.len as u64,
                offset: o as i64,
                ..Default::default()
            })
            .collect();
        let mut ptrs: Vec<*mut Iocb> = cbs.iter_mut().map(|c| c as *mut Iocb).collect();
        let mut done = 0;
        while done < ptrs.len() {
            // SAFETY: the iocbs and the buffers they name live until their
            // completions are reaped below.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_submit,
                    self.0 as libc::c_ulong,
                    (ptrs.len() - done) as libc::c_long,
                    ptrs[done..].as_mut_ptr(),
                )
            };
            assert!(r > 0, "io_submit: {}", std::io::Error::last_os_error());
            done += r as usize;
        }
        between();
        let mut events = vec![IoEvent::default(); ptrs.len()];
        let mut got = 0;
        while got < ptrs.len() {
            // SAFETY: `events` has room for the events asked for.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_getevents,
                    self.0 as libc::c_ulong,
                    1 as libc::c_long,
                    (ptrs.len() - got) as libc::c_long,
                    events[got..].as_mut_ptr(),
                    std::ptr::null_mut::<libc::timespec>(),
                )
            };
            if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            assert!(r > 0, "io_getevents: {}", std::io::Error::last_os_error());
            got += r as usize;
        }
        for e in &events {
            assert_eq!(e.res, bufs[e.data as usize].len as i64, "AIO write {} returned {}", e.data, e.res);
        }
    }
}

impl Drop for Aio {
    fn drop(&mut self) {
        // SAFETY: destroys the context made in `new`.
        unsafe { libc::syscall(libc::SYS_io_destroy, self.0 as libc::c_ulong) };
    }
}

fn odirect(path: &Path) -> File {
    OpenOptions::new().read(true).write(true).custom_flags(libc::O_DIRECT).open(path).expect("open O_DIRECT")
}

/// A file of `len` bytes of `byte`, written through the mount.
fn make_file(path: &Path, len: usize, byte: u8) {
    fs::write(path, vec![byte; len]).expect("write file");
}

/// generic/451's shape against a model: an AIO O_DIRECT writer rewrites a
/// file with byte k while buffered readers (read-only opens, which the
/// kernel caches) read it over and over; once write k completed, a
/// buffered read sees only k, and (without the writeback cache, where the
/// kernel keeps its own mtime) `stat` shows the mtime the write set, not
/// the one set before it.
fn aio_writer_and_cached_readers(opts: &str) {
    let fx = Fixture::with_mkfs_args("64M", &[]);
    let _watchdog = fx.watchdog(&format!("AIO writer and cached readers ({opts})"), LIMIT);
    fx.mount(opts);
    const LEN: usize = 256 << 10;
    let path = fx.path("f");
    make_file(&path, LEN, 0);
    let stop = Arc::new(AtomicBool::new(false));
    // The readers open the file for each pass, as generic/451's `xfs_io`
    // readers do: the pages one read stay in the kernel's cache after it
    // closed (FOPEN_KEEP_CACHE), while no open may exist as a write is
    // answered.
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (path, stop) = (path.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; LEN];
                while !stop.load(Ordering::Relaxed) {
                    let _ = File::open(&path).expect("open reader").read_at(&mut buf, 0);
                }
            })
        })
        .collect();
    let check_times = !opts.contains("writeback_cache");
    let p = path.clone();
    let mut stale = Vec::new();
    {
        let w = odirect(&p);
        let aio = Aio::new(4);
        let mut buf = Aligned::new(LEN);
        let mut got = vec![0u8; LEN];
        let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        for k in 1..=150u32 {
            let byte = k as u8;
            buf.as_mut().fill(byte);
            if check_times {
                w.set_modified(old).expect("set mtime");
            }
            // A stat while the write is on its way: the kernel may cache
            // the attributes from before it.
            aio.write_all(w.as_raw_fd(), &mut [&mut buf], &[0], || {
                let _ = fs::metadata(&p);
            });
            // Checked through a new open, as generic/451's checker does.
            File::open(&p).expect("open checker").read_exact_at(&mut got, 0).expect("buffered read");
            if let Some(at) = got.iter().position(|&b| b != byte) {
                stale.push(format!("write {k}: byte {at} is {} after the write completed", got[at]));
            }
            if check_times {
                let m = fs::metadata(&p).expect("stat").modified().expect("mtime");
                if m == old {
                    stale.push(format!("write {k}: stat shows the mtime from before the write"));
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("reader");
    }
    assert!(stale.is_empty(), "{opts}: {} stale results, first: {:?}", stale.len(), &stale[..stale.len().min(5)]);
    fx.unmount();
    fx.assert_clean();
}

#[test]
fn aio_direct_writes_are_seen_by_cached_readers() {
    require_fuse!();
    aio_writer_and_cached_readers("");
}

#[test]
fn aio_direct_writes_are_seen_by_cached_readers_writeback_cache() {
    require_fuse!();
    aio_writer_and_cached_readers("writeback_cache");
}

/// O_DIRECT writers of two files (synchronous pwrite and AIO, 64 KiB and
/// 256 KiB: served on an io_uring queue thread and by its pool), against
/// buffered readers, readers through a mapping (refaulting every pass)
/// and a writer through a shared mapping (dirty pages an invalidation
/// must write back first), with `opts` (the serving threads).
fn no_deadlock(opts: &str) {
    let fx = Fixture::with_mkfs_args("64M", &[]);
    let _watchdog = fx.watchdog(&format!("direct writers against readers and mappings ({opts})"), LIMIT);
    fx.mount(opts);
    const LEN: usize = 1 << 20;
    let files: Vec<PathBuf> = (0..2).map(|i| fx.path(&format!("f{i}"))).collect();
    for f in &files {
        make_file(f, LEN, 1);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut others = Vec::new();
    for f in &files {
        for kind in 0..4 {
            let (f, stop) = (f.clone(), stop.clone());
            others.push(std::thread::spawn(move || {
                let file = if kind == 3 {
                    OpenOptions::new().read(true).write(true).open(&f).expect("open mapped writer")
                } else {
                    File::open(&f).expect("open reader")
                };
                let mut buf = vec![0u8; 64 << 10];
                let prot = if kind == 3 { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
                // SAFETY: a fresh shared mapping of the file's LEN bytes,
                // unmapped below; only this thread touches it.
                let map = unsafe { libc::mmap(std::ptr::null_mut(), LEN, prot, libc::MAP_SHARED, file.as_raw_fd(), 0) };
                assert_ne!(map, libc::MAP_FAILED, "mmap");
                let mut pass = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    pass += 1;
                    match kind {
                        0 | 1 => {
                            let _ = file.read_at(&mut buf, ((pass * 37) % 16 * (64 << 10)) as u64);
                        }
                        _ => {
                            let p = map.cast::<u8>();
                            for page in (0..LEN).step_by(4096).skip(pass % 7).step_by(7) {
                                // SAFETY: `page` is within the mapping;
                                // volatile so that every pass faults.
                                unsafe {
                                    let v = std::ptr::read_volatile(p.add(page));
                                    if kind == 3 {
                                        std::ptr::write_volatile(p.add(page + 1), v);
                                    }
                                }
                            }
                            // SAFETY: drops this mapping's pages so that
                            // the next pass faults them in again.
                            unsafe { libc::madvise(map, LEN, libc::MADV_DONTNEED) };
                        }
                    }
                }
                // SAFETY: the mapping made above.
                unsafe { libc::munmap(map, LEN) };
            }));
        }
    }
    {
        let writers: Vec<_> = files
            .iter()
            .flat_map(|f| (0..3).map(move |kind| (f.clone(), kind)))
            .map(|(f, kind)| {
                std::thread::spawn(move || {
                    let w = odirect(&f);
                    let size = if kind == 1 { 256 << 10 } else { 64 << 10 };
                    let mut bufs: Vec<Aligned> = (0..4).map(|_| Aligned::new(size)).collect();
                    let aio = Aio::new(8);
                    for round in 0..40usize {
                        let offsets: Vec<u64> =
                            (0..4).map(|i| (((round * 5 + i * 3) * size) % (LEN - size)) as u64 & !4095).collect();
                        for b in bufs.iter_mut() {
                            b.as_mut().fill(round as u8);
                        }
                        if kind == 2 {
                            // Synchronous O_DIRECT writes.
                            for (b, &o) in bufs.iter_mut().zip(&offsets) {
                                w.write_all_at(b.as_mut(), o).expect("pwrite O_DIRECT");
                            }
                        } else {
                            let mut refs: Vec<&mut Aligned> = bufs.iter_mut().collect();
                            aio.write_all(w.as_raw_fd(), &mut refs, &offsets, || {});
                        }
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().expect("writer");
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in others {
        t.join().expect("reader");
    }
    fx.unmount();
    fx.assert_clean();
}

#[test]
fn direct_writes_against_readers_and_mappings_finish_one_thread() {
    require_fuse!();
    no_deadlock("threads=1");
}

#[test]
fn direct_writes_against_readers_and_mappings_finish_two_threads() {
    require_fuse!();
    no_deadlock("threads=2");
}

#[test]
fn direct_writes_against_readers_and_mappings_finish_writeback_cache() {
    require_fuse!();
    no_deadlock("threads=1,writeback_cache");
}

/// Set in the environment of the test process [`a_hang_fails_the_test`]
/// starts: `hang` or `hang_unreturning`, which of the induced hangs to run.
const SELFTEST: &str = "UEXT4_WATCHDOG_SELFTEST";
/// The WRITE offset the daemon never answers in the induced hangs
/// (UEXT4_TEST_HANG_OFFSET: uext4-fuse's test hooks).
const HANG_AT: u64 = 3 * 4096;
/// The watchdog limit of the induced hangs.
const HANG_LIMIT: Duration = Duration::from_secs(5);

/// The induced hang: a write the daemon never answers, made by the test's
/// own thread outside any helper (as a fixture's setup writes are), or by a
/// thread the test then waits for forever (`unreturning`: the abort ends
/// the write but not the wait, so the watchdog ends the process). Run only
/// by [`a_hang_fails_the_test`], in a test process of its own.
fn induced_hang(unreturning: bool) {
    let fx = Fixture::with_mkfs_args("64M", &[]);
    // The daemon inherits UEXT4_TEST_HANG_OFFSET from this process.
    fx.mount("");
    println!("image: {}", fx.img.display());
    let _watchdog = fx.watchdog("induced hang", HANG_LIMIT);
    let path = fx.path("f");
    make_file(&path, 4 * 4096, 1);
    let write = move || {
        let f = OpenOptions::new().write(true).open(&path).expect("open");
        f.write_all_at(&[2; 4096], HANG_AT).expect("the write the daemon never answers");
    };
    if unreturning {
        std::thread::spawn(write);
        loop {
            std::thread::park();
        }
    }
    write();
    unreachable!("the write at {HANG_AT} returned");
}

#[test]
#[ignore = "run in a process of its own by a_hang_fails_the_test"]
fn induced_hang_in_the_test_thread() {
    if std::env::var(SELFTEST).is_ok_and(|v| v == "hang") {
        induced_hang(false);
    }
}

#[test]
#[ignore = "run in a process of its own by a_hang_fails_the_test"]
fn induced_hang_unreturning() {
    if std::env::var(SELFTEST).is_ok_and(|v| v == "hang_unreturning") {
        induced_hang(true);
    }
}

/// Runs the induced hang `name` in a test process of its own and checks
/// that it fails, with the watchdog's report, within the watchdog's limit
/// and grace, leaving no mount and no daemon behind.
fn hang_fails(name: &str, mode: &str) {
    let t0 = Instant::now();
    let mut child = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", name, "--include-ignored", "--nocapture", "--test-threads=1"])
        .env(SELFTEST, mode)
        .env("UEXT4_TEST_HANG_OFFSET", HANG_AT.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the test binary");
    // Setting up (mkfs, mount) and unwinding take seconds; a watchdog that
    // does not fire leaves the child hanging, and then it is killed here.
    let bound = HANG_LIMIT + mount_support::watchdog::GRACE + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for the test binary") {
            break s;
        }
        if t0.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name}: the induced hang still hangs after {bound:?}: the watchdog did not end it");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = t0.elapsed();
    let out = child.wait_with_output().expect("output");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!status.success(), "{name}: the induced hang passed ({took:?}):\n{stdout}\n{stderr}");
    assert!(stderr.contains("watchdog: induced hang: not finished after"), "{name}: no watchdog report:\n{stderr}");
    assert!(stderr.contains("aborted the connection"), "{name}: the connection was not aborted:\n{stderr}");
    if mode == "hang_unreturning" {
        assert_eq!(status.code(), Some(mount_support::watchdog::EXIT_HUNG), "{name}: {status}:\n{stderr}");
        assert!(stderr.contains("did not return within"), "{name}:\n{stderr}");
    }
    let img = stdout.lines().find_map(|l| Some(&l[l.find("image: ")? + 7..])).map(PathBuf::from);
    let img = img.unwrap_or_else(|| panic!("{name}: the image path was not printed:\n{stdout}"));
    let dir = img.parent().expect("the fixture's directory").to_path_buf();
    assert!(!mount_support::is_mounted(&dir.join("mnt")), "{name}: still mounted");
    // SIGKILLed daemons are gone once they are reaped (by init).
    let t1 = Instant::now();
    while !mount_support::daemons_of(&img).is_empty() {
        assert!(t1.elapsed() < Duration::from_secs(30), "{name}: daemons left: {:?}", mount_support::daemons_of(&img));
        std::thread::sleep(Duration::from_millis(50));
    }
    // The unreturning test process left its fixture's directory.
    let _ = fs::remove_dir_all(&dir);
}

/// A deadlock through the mount fails its test instead of hanging it, on
/// the transport UEXT4_TEST_TRANSPORT names: the daemon never answers one
/// WRITE (the test hook), made by the test's own thread (which the abort
/// frees: the test fails by itself) or by a thread it waits for forever
/// (the watchdog ends the process).
#[test]
fn a_hang_fails_the_test() {
    require_fuse!();
    hang_fails("induced_hang_in_the_test_thread", "hang");
    hang_fails("induced_hang_unreturning", "hang_unreturning");
}
