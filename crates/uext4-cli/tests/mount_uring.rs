//! `uext4 mount -o transport=uring`: FUSE over io_uring (uext4-fuse's
//! `uring` module). Real programs work through it
//! (files written and read back, a directory tree, rename, unlink, a
//! 3 MiB file larger than one request), the daemon's log names the
//! transport it uses, the image is clean after the unmount, READs that
//! miss the daemon's cache (small ones served on the queue, larger ones
//! by the slow-request pool) return the file's bytes, `transport=auto` (io_uring when the kernel offers
//! it) is the default, and `threads=N` sizes the slow-request pool.
//!
//! Needs root and /dev/fuse, and a kernel with FUSE io_uring: the test
//! turns the `enable_uring` module parameter on when it is off (it only
//! allows daemons that ask for the transport; it is left on), and prints
//! `SKIP: <reason>` when the kernel lacks it.

use std::fs;
use std::process::Command;

mod mount_support;

use mount_support::{run, uring_skip_reason, Fixture, BIN};

/// Mounts with exactly `opts` (`Fixture::mount` would add
/// UEXT4_TEST_TRANSPORT's transport after them).
fn mount_exactly(fx: &Fixture, opts: &str) {
    run(Command::new(BIN).arg("mount").arg(&fx.img).arg(&fx.mnt).arg("-o").arg(opts));
    assert!(mount_support::is_mounted(&fx.mnt), "not mounted after uext4 mount returned");
}

fn daemon_log(fx: &Fixture) -> String {
    fs::read_to_string(fx.dir.path().join("daemon.log")).unwrap_or_default()
}

#[test]
fn uring_transport_serves_real_work() {
    require_fuse!();
    if let Some(r) = uring_skip_reason() {
        println!("SKIP: {r}");
        return;
    }
    let fx = Fixture::new_plain("64M");
    let log = fx.dir.path().join("daemon.log");
    mount_exactly(&fx, &format!("transport=uring,attr_timeout=0,log=info,logfile={}", log.display()));
    let text = daemon_log(&fx);
    assert!(text.contains("transport: io_uring"), "the daemon did not use io_uring:\n{text}");

    let big: Vec<u8> = (0..3u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    fs::write(fx.path("big"), &big).expect("write big");
    fs::create_dir_all(fx.path("a/b/c")).expect("mkdir -p");
    for i in 0..20 {
        fs::write(fx.path(&format!("a/b/c/f{i}")), format!("file {i}\n")).expect("write small");
    }
    fs::rename(fx.path("a/b/c/f0"), fx.path("a/moved")).expect("rename");
    fs::remove_file(fx.path("a/b/c/f1")).expect("unlink");
    assert_eq!(fs::read(fx.path("big")).expect("read big"), big);
    assert_eq!(fs::read_to_string(fx.path("a/moved")).expect("read moved"), "file 0\n");
    assert_eq!(fs::read_dir(fx.path("a/b/c")).expect("readdir").count(), 18);
    let md = fs::metadata(fx.path("big")).expect("stat big");
    assert!(md.is_file() && md.len() == big.len() as u64);
    assert!(fs::metadata(fx.path("a/b")).expect("stat dir").is_dir());
    let out = run(Command::new("sh").arg("-c").arg(format!("cd {} && ls -lR . && sync", fx.mnt.display())));
    assert!(String::from_utf8_lossy(&out.stdout).contains("moved"));
    fx.unmount();
    fx.assert_clean();
    let text = daemon_log(&fx);
    assert!(text.contains("requests arrive through the ring"), "no request came through the ring:\n{text}");
    assert!(!text.contains("ERROR"), "errors in the daemon's log:\n{text}");
}

/// The default (`transport=auto`) takes io_uring when the kernel offers
/// it and /dev/fuse otherwise, and says which; `transport=dev` is honoured.
#[test]
fn auto_transport_is_the_default_and_named() {
    require_fuse!();
    let want = if uring_skip_reason().is_none() { "transport: io_uring" } else { "transport: /dev/fuse" };
    let fx = Fixture::new_plain("32M");
    let log = fx.dir.path().join("daemon.log");
    // Not fx.mount: that adds UEXT4_TEST_TRANSPORT's transport.
    run(Command::new(BIN)
        .arg("mount")
        .arg(&fx.img)
        .arg(&fx.mnt)
        .arg("-o")
        .arg(format!("log=info,logfile={}", log.display())));
    fs::write(fx.path("f"), b"x").expect("write");
    fx.unmount();
    fx.assert_clean();
    let text = daemon_log(&fx);
    assert!(text.contains(want), "{text}");
    // transport=dev: /dev/fuse even when io_uring is there.
    fs::remove_file(&log).expect("rm log");
    run(Command::new(BIN)
        .arg("mount")
        .arg(&fx.img)
        .arg(&fx.mnt)
        .arg("-o")
        .arg(format!("transport=dev,log=info,logfile={}", log.display())));
    assert_eq!(fs::read(fx.path("f")).expect("read"), b"x");
    fx.unmount();
    fx.assert_clean();
    let text = daemon_log(&fx);
    assert!(text.contains("transport: /dev/fuse") && !text.contains("io_uring"), "{text}");
    // A bad value is refused before anything is mounted.
    let out = Command::new(BIN).arg("mount").arg(&fx.img).arg(&fx.mnt).args(["-o", "transport=tcp"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("transport=tcp"));
}

/// READs that miss the daemon's page cache (a file put into the image
/// before the mount), large READs and O_DIRECT READs are handed to the
/// pool or served on the queue; every one returns the file's bytes,
/// before and after the daemon's cache holds them.
#[test]
fn uring_reads_that_miss_the_cache_and_large_reads() {
    use std::io::Read;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    require_fuse!();
    if let Some(r) = uring_skip_reason() {
        println!("SKIP: {r}");
        return;
    }
    let fx = Fixture::new_plain("64M");
    let data: Vec<u8> = (0..6u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 17) as u8).collect();
    let src = fx.dir.path().join("cold.src");
    fs::write(&src, &data).expect("write source");
    run(Command::new(BIN).arg("put").arg(&fx.img).arg(&src).arg("/cold"));
    let log = fx.dir.path().join("daemon.log");
    mount_exactly(&fx, &format!("transport=uring,log=info,logfile={}", log.display()));
    assert!(daemon_log(&fx).contains("transport: io_uring"), "{}", daemon_log(&fx));
    // Two passes with a fresh open each (the kernel drops its pages at
    // open): the first misses the daemon's cache, the second hits it.
    for pass in 0..2 {
        let f = fs::File::open(fx.path("cold")).expect("open");
        let mut buf = vec![0u8; 4096];
        for k in [5u64, 1, 1400, 700, 1535, 3] {
            let off = k * 4096;
            f.read_exact_at(&mut buf, off).expect("pread");
            assert_eq!(buf[..], data[off as usize..off as usize + 4096], "pass {pass}, 4 KiB at {off}");
        }
        let mut big = vec![0u8; 1 << 20];
        f.read_exact_at(&mut big, 2 << 20).expect("pread 1 MiB");
        assert_eq!(big[..], data[2 << 20..3 << 20], "pass {pass}, 1 MiB");
    }
    let mut all = Vec::new();
    fs::File::open(fx.path("cold")).expect("open").read_to_end(&mut all).expect("read all");
    assert!(all == data, "sequential read differs");
    let mut d = fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(fx.path("cold")).expect("O_DIRECT");
    let mut aligned = vec![0u8; (256 << 10) + 4096];
    let at = aligned.as_ptr().align_offset(4096);
    let chunk = &mut aligned[at..at + (256 << 10)];
    d.read_exact(chunk).expect("direct read");
    assert_eq!(chunk[..], data[..256 << 10]);
    drop(d);
    fx.unmount();
    fx.assert_clean();
    let text = daemon_log(&fx);
    assert!(text.contains("requests arrive through the ring"), "no request came through the ring:\n{text}");
    assert!(!text.contains("ERROR"), "errors in the daemon's log:\n{text}");
}

/// Small READs that miss the daemon's cache (4 KiB each: readahead off
/// with POSIX_FADV_RANDOM, a file put into the image before the mount)
/// are served on the queue that received them, none lent to the pool
/// (the queues' counts in the daemon's log at the end), and return the
/// file's bytes. Before, each was lent to the pool and handed back.
#[test]
fn uring_small_read_misses_are_served_on_the_queue() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    require_fuse!();
    if let Some(r) = uring_skip_reason() {
        println!("SKIP: {r}");
        return;
    }
    let fx = Fixture::new_plain("64M");
    let data: Vec<u8> = (0..2u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let src = fx.dir.path().join("cold.src");
    fs::write(&src, &data).expect("write source");
    run(Command::new(BIN).arg("put").arg(&fx.img).arg(&src).arg("/cold"));
    let log = fx.dir.path().join("daemon.log");
    mount_exactly(&fx, &format!("transport=uring,log=info,logfile={}", log.display()));
    assert!(daemon_log(&fx).contains("transport: io_uring"), "{}", daemon_log(&fx));
    let f = fs::File::open(fx.path("cold")).expect("open");
    // SAFETY: advice on an open descriptor; no memory is passed.
    assert_eq!(unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) }, 0);
    let mut buf = vec![0u8; 4096];
    for k in [300u64, 7, 511, 64, 129, 0, 250] {
        let off = k * 4096;
        f.read_exact_at(&mut buf, off).expect("pread");
        assert_eq!(buf[..], data[off as usize..off as usize + 4096], "4 KiB at {off}");
    }
    drop(f);
    fx.unmount();
    fx.assert_clean();
    let text = daemon_log(&fx);
    let ended: Vec<&str> = text.lines().filter(|l| l.contains("io_uring queue") && l.contains(" ended: ")).collect();
    assert!(!ended.is_empty(), "no queue's counts in the log:\n{text}");
    for l in &ended {
        assert!(l.contains(" 0 to the pool"), "a queue lent requests to the pool: {l}\n{text}");
    }
    assert!(!text.contains("ERROR"), "errors in the daemon's log:\n{text}");
}

/// `store_writes` keeps the mount on /dev/fuse, with io_uring asked for
/// or by default: its page stores wait for the kernel's page locks, which
/// READs queued behind them on an io_uring queue would hold forever.
#[test]
fn store_writes_mounts_stay_on_dev() {
    require_fuse!();
    if let Some(r) = uring_skip_reason() {
        println!("SKIP: {r}");
        return;
    }
    let fx = Fixture::new_plain("32M");
    let log = fx.dir.path().join("daemon.log");
    for opts in ["transport=uring,store_writes", "store_writes"] {
        let _ = fs::remove_file(&log);
        mount_exactly(&fx, &format!("{opts},log=info,logfile={}", log.display()));
        fs::write(fx.path("f"), b"y").expect("write");
        fx.unmount();
        let text = daemon_log(&fx);
        assert!(text.contains("store_writes needs the /dev/fuse transport"), "{opts}: {text}");
        assert!(text.contains("transport: /dev/fuse"), "{opts}: {text}");
    }
    fx.assert_clean();
}

/// The names of the daemon's threads that start with `prefix`.
fn threads_named(pid: u32, prefix: &str) -> usize {
    fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the daemon's threads")
        .filter_map(|t| fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with(prefix))
        .count()
}

/// `threads=N` sizes the io_uring pool that serves the slow requests
/// (before, it only sized the /dev/fuse workers and did nothing under
/// io_uring, the default transport); without it the pool has 2 threads.
/// The pool serves: an fsync (a pool request) answers.
#[test]
fn threads_sizes_the_uring_pool() {
    use std::process::Stdio;
    require_fuse!();
    if let Some(r) = uring_skip_reason() {
        println!("SKIP: {r}");
        return;
    }
    let mut fx = Fixture::new_plain("32M");
    let log = fx.dir.path().join("daemon.log");
    for (opts, want) in [("threads=3,", 3), ("", 2)] {
        let _ = fs::remove_file(&log);
        let child = Command::new(BIN)
            .arg("mount")
            .arg(&fx.img)
            .arg(&fx.mnt)
            .arg("-o")
            .arg(format!("{opts}transport=uring,log=info,logfile={}", log.display()))
            .arg("--foreground")
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn uext4 mount");
        let pid = child.id();
        fx.child = Some(child);
        let t0 = std::time::Instant::now();
        while !mount_support::is_mounted(&fx.mnt) {
            assert!(t0.elapsed() < std::time::Duration::from_secs(30), "foreground mount did not appear");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        fs::write(fx.path("f"), b"x").expect("write");
        fs::File::open(fx.path("f")).and_then(|f| f.sync_all()).expect("fsync through the pool");
        assert!(daemon_log(&fx).contains("transport: io_uring"), "{}", daemon_log(&fx));
        assert_eq!(threads_named(pid, "uring-slow"), want, "{opts}: pool threads");
        assert!(daemon_log(&fx).contains(&format!("{want} threads for slow requests")), "{opts}: {}", daemon_log(&fx));
        fx.unmount();
        let status = fx.child.take().expect("daemon").wait().expect("wait");
        assert!(status.success(), "{opts}: the daemon exited with {status}");
    }
    fx.assert_clean();
}

impl Fixture {
    fn new_plain(size: &str) -> Fixture {
        Fixture::with_mkfs_args(size, &[])
    }
}
