//! The daemon under signals and internal failures (CONCURRENCY.md rule
//! 9): stopping and continuing it (what Ctrl-Z, `strace -p` or a debugger
//! do) while a writer works must cost the writer nothing and leave the
//! mount in place; a request whose serving panics is answered EIO, the
//! mount follows `errors=` and the daemon still unmounts and exits.
//!
//! Needs root and /dev/fuse and prints `SKIP: <reason>` otherwise. Run on
//! the transport UEXT4_TEST_TRANSPORT names (scripts/test runs it on
//! both).

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

mod mount_support;

use mount_support::{is_mounted, run, tool, Fixture};

impl Fixture {
    /// `uext4 mount --foreground -o OPTS` (with UEXT4_TEST_TRANSPORT's
    /// transport) as a child process, logging to `daemon.log` next to the
    /// image; mounted when it returns. The child's pid is the daemon's.
    fn mount_foreground_logged(&mut self, opts: &str, env: &[(&str, String)]) -> u32 {
        let log = self.dir.path().join("daemon.log");
        // Its messages go to the log file; the panic hook's backtraces
        // would only clutter the test's output.
        self.spawn_foreground(&format!("{opts},log=info,logfile={}", log.display()), Stdio::null(), env)
    }

    fn daemon_log(&self) -> String {
        fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    /// Unmounts and waits for the foreground daemon, which must exit 0
    /// (and, in the io_uring pass, have served through io_uring, not a
    /// fallback).
    fn unmount_foreground(&mut self) {
        self.unmount();
        let status = self.child.take().expect("a foreground daemon").wait().expect("wait for the daemon");
        let log = self.daemon_log();
        assert!(status.success(), "the daemon exited with {status}:\n{log}");
        if std::env::var("UEXT4_TEST_TRANSPORT").is_ok_and(|t| t == "uring") {
            assert!(log.contains("requests arrive through the ring"), "the daemon did not use io_uring:\n{log}");
        }
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) with a pid of our own child and a valid signal.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, sig) }, 0, "kill {sig}");
}

/// A writer appends one line per open, as a shell's `echo >> f` does,
/// while the daemon is stopped and continued 25 times. Before the fix,
/// io_uring_enter's EINTR ended the queue threads: the writer got
/// ENOTCONN and the mount was gone (or, where the connection could not be
/// aborted, hung). Every line must arrive and the mount must stay.
#[test]
fn stopping_and_continuing_the_daemon_keeps_the_mount() {
    require_fuse!();
    let mut fx = Fixture::with_mkfs_args("64M", &[]);
    let pid = fx.mount_foreground_logged("rw", &[]);
    let file = fx.path("appended");
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let writer = {
        let (file, stop) = (file.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u32;
            let r = loop {
                if stop.load(Ordering::Relaxed) {
                    break Ok(n);
                }
                let w = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&file)
                    .and_then(|mut f| f.write_all(format!("line {n}\n").as_bytes()));
                if let Err(e) = w {
                    break Err((n, e));
                }
                n += 1;
            };
            let _ = tx.send(r);
        })
    };
    for _ in 0..25 {
        signal(pid, libc::SIGSTOP);
        std::thread::sleep(Duration::from_millis(30));
        signal(pid, libc::SIGCONT);
        std::thread::sleep(Duration::from_millis(30));
    }
    stop.store(true, Ordering::Relaxed);
    // A hung mount leaves the writer blocked: that is a failure too (the
    // fixture's drop then unmounts and kills the daemon, which frees it).
    let lines = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Ok(n)) => n,
        Ok(Err((n, e))) => panic!("append {n} failed: {e}\n{}", fx.daemon_log()),
        Err(_) => panic!("the writer is stuck after the stops\n{}", fx.daemon_log()),
    };
    writer.join().expect("writer");
    assert!(is_mounted(&fx.mnt), "the mount is gone:\n{}", fx.daemon_log());
    let want: String = (0..lines).map(|i| format!("line {i}\n")).collect();
    assert!(fs::read_to_string(&file).expect("read back") == want, "the appended lines differ");
    fx.unmount_foreground();
    let log = fx.daemon_log();
    assert!(!log.contains("ERROR"), "errors in the daemon's log:\n{log}");
    fx.assert_clean();
}

fn errno_of<T>(r: std::io::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

/// Where the test-only panic trigger fires (UEXT4_TEST_PANIC_OFFSET,
/// compiled into test builds only: see uext4-fuse's test_hooks).
const PANIC_AT: u64 = 1 << 20;

/// A request whose serving panics is answered EIO on every path a request
/// takes: a small write (served by a /dev/fuse worker, or inline by an
/// io_uring queue thread), a fallocate (the io_uring pool) and an
/// O_DIRECT read (io_uring's fast read path). Before the fix the panic
/// ended the thread with the request unanswered: the caller hung and, on
/// io_uring, so did the unmount. The panic counts as a filesystem error:
/// logged with the request, recorded in the superblock, and under the
/// default errors=remount-ro every later change is refused while reads
/// go on; the daemon unmounts and exits 0.
#[test]
fn a_panicking_request_is_answered_eio_and_the_daemon_unmounts() {
    require_fuse!();
    let mut fx = Fixture::with_mkfs_args("64M", &[]);
    fx.mount_foreground_logged("rw", &[("UEXT4_TEST_PANIC_OFFSET", PANIC_AT.to_string())]);
    let kept: Vec<u8> = (0..8192u32).map(|i| (i * 7) as u8).collect();
    fs::write(fx.path("kept"), &kept).expect("write before the panics");
    OpenOptions::new().write(true).open(fx.path("kept")).and_then(|f| f.sync_all()).expect("fsync");
    // Each call runs in its own thread, so that a caller left waiting
    // fails the test instead of hanging it.
    let call = |what: &'static str, path: std::path::PathBuf, f: fn(&std::path::Path) -> i32| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f(&path));
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(e) => e,
            Err(_) => panic!("{what}: the caller is still waiting for its answer"),
        }
    };
    let write = call("pwrite", fx.path("victim"), |p| {
        let f = OpenOptions::new().create(true).truncate(false).write(true).open(p).expect("open victim");
        errno_of(f.write_at(&[1u8; 4096], PANIC_AT))
    });
    assert_eq!(write, libc::EIO, "the write that panicked");
    let fallocate = call("fallocate", fx.path("victim"), |p| {
        let f = OpenOptions::new().write(true).open(p).expect("open victim");
        // SAFETY: fallocate(2) on a descriptor we own.
        let r = unsafe { libc::fallocate(f.as_raw_fd(), 0, PANIC_AT as libc::off_t, 4096) };
        if r == 0 {
            0
        } else {
            std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
        }
    });
    assert_eq!(fallocate, libc::EIO, "the fallocate that panicked");
    let read = call("O_DIRECT pread", fx.path("victim"), |p| {
        let f = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(p).expect("open victim O_DIRECT");
        let mut buf = vec![0u8; 8192];
        let at = buf.as_ptr().align_offset(4096);
        errno_of(f.read_at(&mut buf[at..at + 4096], PANIC_AT))
    });
    assert_eq!(read, libc::EIO, "the read that panicked");
    // errors=remount-ro (the default): no change after an internal error.
    assert_eq!(errno_of(fs::write(fx.path("new"), b"y")), libc::EROFS, "a write after the panics");
    assert_eq!(errno_of(fs::create_dir(fx.path("d"))), libc::EROFS, "a mkdir after the panics");
    assert_eq!(fs::read(fx.path("kept")).expect("reads go on"), kept);
    assert!(is_mounted(&fx.mnt), "the mount is gone");
    let log = fx.daemon_log();
    for op in ["WRITE", "FALLOCATE", "READ"] {
        assert!(
            log.lines().any(|l| l.contains(") panicked: ") && l.contains(&format!("({op} "))),
            "no panic of a {op} logged with its request:\n{log}"
        );
    }
    assert!(log.contains("(errors=remount-ro)"), "no errors= action logged:\n{log}");
    fx.unmount_foreground();
    let d = fx.dumpe2fs();
    assert!(d.lines().any(|l| l.starts_with("FS Error count:")), "no error recorded in the superblock:\n{d}");
    run(tool("e2fsck").arg("-fn").arg(&fx.img));
}
