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
//!   aborted and the daemon killed) instead of hanging it.
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

/// The FUSE connection number of the mount at `mnt` (its device minor),
/// from /proc/self/mountinfo: a stat of the mount point would be a
/// request to the daemon, which may be stuck.
fn connection_of(mnt: &Path) -> Option<String> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = mnt.to_str()?;
    let line = info.lines().find(|l| l.split(' ').nth(4) == Some(want))?;
    Some(line.split(' ').nth(2)?.split(':').nth(1)?.to_string())
}

/// Runs `work` on a thread; if it has not finished within `limit` (a
/// deadlock), aborts the mount's FUSE connection (which fails every
/// request in flight, so the workers return) and fails the test.
fn finishes_or_abort(fx: &Fixture, what: &str, limit: Duration, work: impl FnOnce() + Send + 'static) {
    let conn = connection_of(&fx.mnt).expect("the mount's connection");
    let t = std::thread::spawn(work);
    let t0 = Instant::now();
    while !t.is_finished() {
        if t0.elapsed() > limit {
            let dir = "/sys/fs/fuse/connections";
            if !Path::new(&format!("{dir}/{conn}")).exists() {
                let _ = mount_support::tool("mount").args(["-t", "fusectl", "fusectl", dir]).status();
            }
            let abort = format!("{dir}/{conn}/abort");
            let r = fs::write(&abort, "1");
            let _ = mount_support::tool("umount").arg("-l").arg(&fx.mnt).status();
            panic!("{what}: not finished after {limit:?} (a deadlock?): aborted the connection ({abort}: {r:?})");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if let Err(e) = t.join() {
        std::panic::resume_unwind(e);
    }
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
    let stale = Arc::new(std::sync::Mutex::new(Vec::new()));
    let found = stale.clone();
    finishes_or_abort(&fx, "AIO writer", Duration::from_secs(300), move || {
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
                found.lock().unwrap().push(format!("write {k}: byte {at} is {} after the write completed", got[at]));
            }
            if check_times {
                let m = fs::metadata(&p).expect("stat").modified().expect("mtime");
                if m == old {
                    found.lock().unwrap().push(format!("write {k}: stat shows the mtime from before the write"));
                }
            }
        }
    });
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("reader");
    }
    let stale = stale.lock().unwrap().clone();
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
    let writers_files = files.clone();
    finishes_or_abort(&fx, opts, Duration::from_secs(300), move || {
        let writers: Vec<_> = writers_files
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
    });
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
