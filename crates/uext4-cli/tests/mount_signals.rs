//! The daemon under signals and internal failures (CONCURRENCY.md rule
//! 9): stopping and continuing it (what Ctrl-Z, `strace -p` or a debugger
//! do) while a writer works must cost the writer nothing and leave the
//! mount in place.
//!
//! Needs root and /dev/fuse and prints `SKIP: <reason>` otherwise. Run on
//! the transport UEXT4_TEST_TRANSPORT names (scripts/test runs it on
//! both).

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

mod mount_support;

use mount_support::{is_mounted, with_transport, Fixture, BIN};

impl Fixture {
    /// `uext4 mount --foreground -o OPTS` (with UEXT4_TEST_TRANSPORT's
    /// transport) as a child process, logging to `daemon.log` next to the
    /// image; mounted when it returns. The child's pid is the daemon's.
    fn mount_foreground_logged(&mut self, opts: &str) -> u32 {
        let log = self.dir.path().join("daemon.log");
        let child = Command::new(BIN)
            .arg("mount")
            .arg(&self.img)
            .arg(&self.mnt)
            .arg("-o")
            .arg(with_transport(&format!("{opts},log=info,logfile={}", log.display())))
            .arg("--foreground")
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn uext4 mount");
        let pid = child.id();
        self.child = Some(child);
        let t0 = Instant::now();
        while !is_mounted(&self.mnt) {
            assert!(t0.elapsed() < Duration::from_secs(30), "foreground mount did not appear");
            std::thread::sleep(Duration::from_millis(20));
        }
        pid
    }

    fn daemon_log(&self) -> String {
        fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    /// Unmounts and waits for the foreground daemon, which must exit 0.
    fn unmount_foreground(&mut self) {
        self.unmount();
        let status = self.child.take().expect("a foreground daemon").wait().expect("wait for the daemon");
        assert!(status.success(), "the daemon exited with {status}:\n{}", self.daemon_log());
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
    let pid = fx.mount_foreground_logged("rw");
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
