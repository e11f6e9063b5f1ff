//! Data integrity of `uext4 mount` under concurrent load, through the
//! kernel's FUSE client:
//!
//! - fio verify jobs (`verify=crc32c`, several jobs at once): direct and
//!   buffered random writes of 4 KiB and 8 KiB, direct writes into
//!   fallocated (unwritten) files, 2 KiB direct overwrites of one shared
//!   file with libaio; the data is verified again after a remount
//!   (`--verify_only`), and the image is clean afterwards (`e2fsck -fn`).
//! - 8 KiB buffered writes are never seen torn: 2 writer and 2 reader
//!   threads on one file, each 8 KiB unit always filled with one 8-byte
//!   word; readers (O_DIRECT, so that they reach the daemon: see
//!   `torn_run`) check every unit they read is uniform. Passes with
//!   the default policy and with `-o lock_policy=exclusive`.
//! - reads through cached read-only opens never return data from before
//!   a write through a write open (which bypasses the kernel's page
//!   cache under `direct_writes`), however they race with it.
//! - a reader process sees every completed write of another process
//!   byte-exact through one cached open it keeps (`store_writes` on and
//!   off).
//! - ENOSPC with 8 writers at once on a small image (1 KiB and 4 KiB
//!   blocks): every writer gets ENOSPC (the daemon survives), what was
//!   written completely reads back, deleting frees space, writing works
//!   again at once, the image is clean.
//!
//! They need root and /dev/fuse (and fio for the fio part) and print
//! `SKIP: <reason>` otherwise; nothing is installed from here.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

mod mount_support;

use mount_support::{have, is_mounted, tool, Fixture};

fn errno_of<T>(r: &std::io::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

/// statfs(2) of a path: (free blocks for unprivileged users, block size).
fn statfs(p: &Path) -> (u64, u64) {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).expect("no NUL");
    // SAFETY: a zeroed statfs is a valid out buffer; `c` is a valid path.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut s) }, 0, "statfs {}", p.display());
    (s.f_bavail as u64, s.f_bsize as u64)
}

/// A small xorshift generator: the tests need no crate for randomness.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One fio verify job set: what it is called and its arguments.
struct FioJob {
    name: String,
    args: Vec<String>,
}

impl FioJob {
    fn new(name: &str, dir: &Path, args: &[&str]) -> FioJob {
        let mut all = vec![
            format!("--name={name}"),
            format!("--directory={}", dir.display()),
            "--verify=crc32c".into(),
            "--verify_fatal=1".into(),
            "--do_verify=1".into(),
            "--group_reporting=1".into(),
            "--numjobs=4".into(),
        ];
        all.extend(args.iter().map(|a| a.to_string()));
        FioJob { name: name.into(), args: all }
    }
}

/// Each with 4 jobs at once: random writes of 4 MiB per job, then fio
/// reads everything back and checks the crc32c of every block.
fn fio_jobs(dir: &Path) -> Vec<FioJob> {
    let mut jobs = Vec::new();
    for (direct, bs) in [("1", "4k"), ("1", "8k"), ("0", "4k"), ("0", "8k")] {
        let name = format!("{}-{bs}", if direct == "1" { "direct" } else { "buffered" });
        let (bs, direct) = (format!("--bs={bs}"), format!("--direct={direct}"));
        jobs.push(FioJob::new(&name, dir, &["--rw=randwrite", &bs, &direct, "--ioengine=psync", "--size=4m"]));
    }
    // Seed 002: direct writes into fallocated (unwritten) extents.
    jobs.push(FioJob::new(
        "unwritten-4k",
        dir,
        &["--rw=randwrite", "--bs=4k", "--direct=1", "--ioengine=psync", "--size=4m", "--fallocate=native"],
    ));
    // Seed 003: 2 KiB (sub-block) direct overwrites of one shared file,
    // libaio, each job in its own 2 MiB so that verification is exact.
    jobs.push(FioJob::new(
        "shared-2k",
        dir,
        &[
            "--rw=randwrite",
            "--bs=2k",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=32",
            "--filename=shared",
            "--size=2m",
            "--offset_increment=2m",
            "--overwrite=1",
        ],
    ));
    jobs
}

/// Runs fio in `cwd` (where it keeps its verify state files).
fn fio(cwd: &Path, args: &[String], extra: &[&str]) -> Output {
    let out = tool("fio").current_dir(cwd).args(args).args(extra).output().expect("run fio");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "fio {} failed ({}):\n{text}", args.join(" "), out.status);
    assert!(!text.contains("verify: bad") && !text.contains("verify failed"), "fio verify failed:\n{text}");
    assert!(text.contains("err= 0"), "fio reported an error:\n{text}");
    assert!(text.contains("read:"), "fio verified nothing (no read phase):\n{text}");
    out
}

/// fio verify jobs, direct and buffered, on 4 KiB- and 1 KiB-block
/// images; then a remount and a verify-only pass over the same data; the
/// image is clean after each.
#[test]
fn fio_verify_jobs_pass() {
    require_fuse!();
    if !have("fio") {
        println!("SKIP: fio not found (apt-get install fio)");
        return;
    }
    let t0 = Instant::now();
    for bs in [4096, 1024] {
        let fx = Fixture::with_mkfs_args("256M", &["-b", &bs.to_string()]);
        let cwd = fx.img.parent().expect("tempdir").to_path_buf();
        fx.mount("rw");
        let jobs = fio_jobs(&fx.mnt);
        for j in &jobs {
            let t = Instant::now();
            fio(&cwd, &j.args, &[]);
            println!("fio {} ({bs}-byte blocks): {:.1} s", j.name, t.elapsed().as_secs_f64());
        }
        fx.unmount();
        fx.assert_clean();
        // The data reached the image: read back and checked after a remount.
        fx.mount("rw");
        for j in &jobs {
            fio(&cwd, &j.args, &["--verify_only"]);
        }
        assert!(fs::metadata(fx.path("shared")).expect("stat shared").len() >= 8 << 20);
        fx.unmount();
        fx.assert_clean();
    }
    println!("fio_verify_jobs_pass: {:.1} s", t0.elapsed().as_secs_f64());
}

/// The 8 KiB unit size of the torn-write check (seed 001: databases count
/// on 8 KiB buffered writes being atomic).
const UNIT: usize = 8192;
const UNITS: u64 = 64;

/// The word of a unit's content: who wrote it, when, and which unit.
fn word(writer: u64, iter: u64, unit: u64) -> u64 {
    (writer << 56) | (iter << 16) | unit
}

/// Checks that every 8 KiB unit of `buf` (read at unit `first`) is one
/// word repeated, and that the word belongs to that unit.
fn check_units(buf: &[u8], first: u64) -> Result<(), String> {
    for (k, u) in buf.chunks_exact(UNIT).enumerate() {
        let unit = first + k as u64;
        let w0 = u64::from_le_bytes(u[..8].try_into().expect("8 bytes"));
        if let Some(bad) = u.chunks_exact(8).position(|c| c != &u[..8]) {
            let w = u64::from_le_bytes(u[bad * 8..bad * 8 + 8].try_into().expect("8 bytes"));
            return Err(format!("unit {unit} torn: word {w0:#x} at byte 0, {w:#x} at byte {}", bad * 8));
        }
        if w0 & 0xffff != unit {
            return Err(format!("unit {unit} holds {w0:#x}, written for unit {}", w0 & 0xffff));
        }
    }
    Ok(())
}

/// What a torn-write run did.
struct TornRun {
    writes: u64,
    reads: u64,
    torn: Vec<String>,
}

/// 2 writer threads rewrite random 8 KiB-aligned units of one file in the
/// mount with 8 KiB buffered pwrites (each unit all one word); 2 reader
/// threads pread 1 to 4 units at a time with O_DIRECT and check each unit.
///
/// Without the kernel's writeback cache (the default, `direct_writes`):
/// with it, buffered writes stay in the kernel's pages and reach the
/// daemon at write-back, and a FUSE O_DIRECT read writes the range back
/// without the writer's inode lock, so the kernel's FUSE client can show
/// a write torn whatever the daemon does (docs/COMPATIBILITY.md). These
/// runs test the daemon's own buffered write path.
///
/// The readers use O_DIRECT so that every read reaches the daemon: through
/// the kernel's page cache (buffered reads of a FUSE file) 8 KiB writes are
/// seen torn whatever the daemon does, as on the kernel's own ext4 and
/// tmpfs, whose buffered reads take no inode lock: the kernel copies each
/// page to the reader while the writer may be copying into it.
fn torn_run(opts: &str) -> TornRun {
    const WRITES: u64 = 5000;
    const MAX_TIME: Duration = Duration::from_secs(6);
    let fx = Fixture::with_mkfs_args("64M", &["-b", "4096"]);
    fx.mount(opts);
    let path = fx.path("db");
    {
        let f = File::create(&path).expect("create");
        for u in 0..UNITS {
            f.write_all_at(&word(0, 0, u).to_le_bytes().repeat(UNIT / 8), u * UNIT as u64).expect("fill");
        }
        f.sync_all().expect("fsync");
    }
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(4));
    let t0 = Instant::now();
    let mut writers = Vec::new();
    for w in 1..=2u64 {
        let (path, start) = (path.clone(), start.clone());
        writers.push(std::thread::spawn(move || {
            let f = OpenOptions::new().write(true).open(&path).expect("open for writing");
            let mut rng = Rng::new(w);
            start.wait();
            let mut n = 0;
            while n < WRITES && t0.elapsed() < MAX_TIME {
                n += 1;
                let unit = rng.below(UNITS);
                let buf = word(w, n, unit).to_le_bytes().repeat(UNIT / 8);
                f.write_all_at(&buf, unit * UNIT as u64).expect("pwrite 8 KiB");
            }
            n
        }));
    }
    let mut readers = Vec::new();
    for r in 0..2u64 {
        let (path, start, done) = (path.clone(), start.clone(), done.clone());
        readers.push(std::thread::spawn(move || {
            let f = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&path).expect("open O_DIRECT");
            let mut rng = Rng::new(100 + r);
            // Aligned, as O_DIRECT wants it on most filesystems.
            let mut raw = vec![0u8; 5 * UNIT];
            let a = raw.as_ptr().align_offset(4096);
            let buf = &mut raw[a..a + 4 * UNIT];
            let (mut reads, mut torn) = (0u64, Vec::new());
            start.wait();
            while !done.load(Ordering::Relaxed) {
                let first = rng.below(UNITS);
                let n = (1 + rng.below(4)).min(UNITS - first) as usize;
                f.read_exact_at(&mut buf[..n * UNIT], first * UNIT as u64).expect("pread O_DIRECT");
                if let Err(e) = check_units(&buf[..n * UNIT], first) {
                    torn.push(format!("reader {r}: {e}"));
                }
                reads += 1;
            }
            (reads, torn)
        }));
    }
    let writes = writers.into_iter().map(|w| w.join().expect("writer")).sum();
    done.store(true, Ordering::Relaxed);
    let (mut reads, mut torn) = (0, Vec::new());
    for r in readers {
        let (n, t) = r.join().expect("reader");
        reads += n;
        torn.extend(t);
    }
    // Whatever the readers saw, the file is whole at the end.
    let all = fs::read(&path).expect("read all");
    assert_eq!(all.len(), UNITS as usize * UNIT);
    check_units(&all, 0).expect("final content");
    fx.unmount();
    fx.assert_clean();
    TornRun { writes, reads, torn }
}

/// With `lock_policy=exclusive` (every buffered write exclusive, as in
/// the kernel's ext4), direct readers never see a torn 8 KiB write.
#[test]
fn buffered_8k_writes_never_torn_exclusive() {
    require_fuse!();
    let t0 = Instant::now();
    let r = torn_run("lock_policy=exclusive");
    assert!(r.reads > 100 && r.writes > 1000, "{} reads, {} writes", r.reads, r.writes);
    assert!(r.torn.is_empty(), "{} of {} reads saw a torn 8 KiB write: {:?}", r.torn.len(), r.reads, &r.torn[..1]);
    println!(
        "buffered_8k_writes_never_torn_exclusive: {} writes, {} reads, {:.1} s",
        r.writes,
        r.reads,
        t0.elapsed().as_secs_f64()
    );
}

/// The same with the default (seeds) lock policy: an in-folio buffered
/// write runs under the inode's shared lock (seed 001) and reaches the
/// device under its folio lock; O_DIRECT reads hold the cached folios'
/// locks while they read the device, so they see it whole.
#[test]
fn buffered_8k_writes_never_torn() {
    require_fuse!();
    let t0 = Instant::now();
    let r = torn_run("rw");
    assert!(r.reads > 100 && r.writes > 1000, "{} reads, {} writes", r.reads, r.writes);
    assert!(r.torn.is_empty(), "{} of {} reads saw a torn 8 KiB write: {:?}", r.torn.len(), r.reads, &r.torn[..1]);
    println!(
        "buffered_8k_writes_never_torn: {} writes, {} reads, {:.1} s",
        r.writes,
        r.reads,
        t0.elapsed().as_secs_f64()
    );
}

fn fill(thread: usize, file: usize, len: usize) -> Vec<u8> {
    let seed = (thread as u64) << 32 | file as u64;
    let mut rng = Rng::new(seed + 1);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&rng.next().to_le_bytes());
    }
    v.truncate(len);
    v
}

/// What one ENOSPC writer did: files written completely, the error that
/// stopped it.
struct Filled {
    complete: usize,
    errno: i32,
    error: String,
}

/// 8 writers fill a 32 MiB image through the mount (half buffered, half
/// O_DIRECT): each stops at ENOSPC; the daemon is alive, complete files
/// read back, deleting frees space, writing works again, the image is
/// clean.
#[test]
fn enospc_with_many_writers() {
    require_fuse!();
    let t0 = Instant::now();
    let mut files = Vec::new();
    for bs in [1024, 4096] {
        files.push(enospc_run(bs));
    }
    println!("enospc_with_many_writers: {files:?} files before ENOSPC, {:.1} s", t0.elapsed().as_secs_f64());
}

/// One ENOSPC round on an image with `bs`-byte blocks; returns how many
/// files were written completely.
fn enospc_run(bs: u32) -> usize {
    let fx = Fixture::with_mkfs_args("32M", &["-b", &bs.to_string()]);
    fx.mount("rw");
    const FILE: usize = 512 << 10;
    const CHUNK: usize = 64 << 10;
    let start = Arc::new(Barrier::new(8));
    let mut threads = Vec::new();
    for t in 0..8usize {
        let dir = fx.path(&format!("t{t}"));
        fs::create_dir(&dir).expect("mkdir");
        let start = start.clone();
        threads.push(std::thread::spawn(move || -> Filled {
            start.wait();
            for n in 0..10_000 {
                let mut o = OpenOptions::new();
                o.write(true).create_new(true);
                if t % 2 == 1 {
                    o.custom_flags(libc::O_DIRECT);
                }
                let data = fill(t, n, FILE);
                let r = o.open(dir.join(format!("f{n}"))).and_then(|f| {
                    for (k, c) in data.chunks(CHUNK).enumerate() {
                        f.write_all_at(c, (k * CHUNK) as u64)?;
                    }
                    Ok(())
                });
                if r.is_err() {
                    return Filled { complete: n, errno: errno_of(&r), error: format!("{:?}", r.err()) };
                }
            }
            Filled { complete: 10_000, errno: 0, error: "never ran out of space".into() }
        }));
    }
    let results: Vec<Filled> = threads.into_iter().map(|t| t.join().expect("writer thread panicked")).collect();
    let total: usize = results.iter().map(|r| r.complete).sum();
    for (t, r) in results.iter().enumerate() {
        assert_eq!(r.errno, libc::ENOSPC, "writer {t} stopped with {} after {} files", r.error, r.complete);
    }
    assert!(total * FILE >= 16 << 20, "only {total} files of 512 KiB fit in a 32 MiB image");

    // The daemon is alive: stat, statfs, listing, content.
    assert!(is_mounted(&fx.mnt));
    let (free_full, bsize) = statfs(&fx.mnt);
    assert!(free_full * bsize < 2 << 20, "{free_full} blocks still free after ENOSPC");
    for (t, r) in results.iter().enumerate() {
        let dir = fx.path(&format!("t{t}"));
        for n in 0..r.complete {
            let got = fs::read(dir.join(format!("f{n}"))).expect("read a complete file");
            assert!(got == fill(t, n, FILE), "t{t}/f{n} differs after ENOSPC");
        }
    }
    // Deleting frees space; writing works again.
    for t in 0..8 {
        fs::remove_dir_all(fx.path(&format!("t{t}"))).expect("rm -r");
    }
    let (free_after, _) = statfs(&fx.mnt);
    assert!((free_after - free_full) * bsize >= 16 << 20, "deleting freed only {} blocks", free_after - free_full);
    let data = fill(99, 0, 4 << 20);
    {
        let mut f = File::create(fx.path("again")).expect("create after ENOSPC");
        f.write_all(&data).expect("write after ENOSPC");
        f.sync_all().expect("fsync");
    }
    assert!(fs::read(fx.path("again")).expect("read") == data);
    fx.unmount();
    fx.assert_clean();
    total
}

/// The writer a test drives from another process: python3 holding one
/// O_WRONLY open of `path`, writing `LEN` bytes of value `BYTE` at `OFF`
/// for every "OFF LEN BYTE" line on its stdin and answering "ok" once
/// pwrite(2) has returned.
const WRITER_PY: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
for line in sys.stdin:
    off, n, b = map(int, line.split())
    assert os.pwrite(fd, bytes([b]) * n, off) == n
    sys.stdout.write("ok\n")
    sys.stdout.flush()
os.close(fd)
"#;

/// A reader process sees every completed write of another process, byte
/// for byte, through one cached read-only open it keeps for the whole
/// run (its pages stay in the kernel's cache) while a second reader
/// thread races misses against the writes. The writer (python3) writes
/// through its own open, which bypasses the kernel's cache
/// (`direct_writes`): aligned 8 KiB units, small unaligned pieces, pieces
/// across page boundaries and appends. With `store_writes` (opt-in)
/// the daemon puts each written range back into the kernel's cache once
/// the next write arrives; with `nostore_writes` the kernel's dropping of
/// the range is all there is. Both must be exact.
#[test]
fn cached_reader_sees_every_write_of_another_process() {
    require_fuse!();
    if !have("python3") {
        println!("SKIP: python3 is not installed");
        return;
    }
    for opts in ["store_writes", "nostore_writes"] {
        let fx = Fixture::with_mkfs_args("64M", &["-b", "4096"]);
        fx.mount(opts);
        let path = fx.path("shared");
        let mut model: Vec<u8> = (0..16 * UNIT).map(|i| (i / 4096) as u8).collect();
        fs::write(&path, &model).expect("create");
        let reader = File::open(&path).expect("open O_RDONLY");
        let mut all = vec![0u8; 192 * UNIT];
        assert_eq!(reader.read_at(&mut all, 0).expect("pread"), model.len());
        let done = Arc::new(AtomicBool::new(false));
        let racer = {
            let (path, done) = (path.clone(), done.clone());
            std::thread::spawn(move || {
                let f = File::open(&path).expect("open O_RDONLY");
                let (mut rng, mut buf) = (Rng::new(99), vec![0u8; 4096]);
                while !done.load(Ordering::Relaxed) {
                    let _ = f.read_at(&mut buf, rng.below(16 * UNIT as u64));
                }
            })
        };
        let mut child = std::process::Command::new("python3")
            .args(["-c", WRITER_PY])
            .arg(&path)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut to = child.stdin.take().expect("stdin");
        let mut from = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut rng = Rng::new(5);
        let mut bad = Vec::new();
        // Bursts of one to four writes, then each written range with a
        // page either side (the daemon stores a write's range when the
        // next one arrives, unless a READ came between), now and then the
        // whole file.
        let mut i = 0u64;
        while i < 800 && bad.len() < 4 {
            let mut ranges = Vec::new();
            for _ in 0..1 + rng.below(4) {
                let len = model.len() as u64;
                let (off, n) = match rng.below(20) {
                    0 => (len, 1 + rng.below(3 * 4096)),
                    1..=8 => (rng.below(len / UNIT as u64) * UNIT as u64, UNIT as u64),
                    9..=14 => (rng.below(len), 1 + rng.below(300)),
                    _ => (rng.below(len), 1 + rng.below(3 * 4096)),
                };
                let byte = (i % 251 + 1) as u8;
                writeln!(to, "{off} {n} {byte}").expect("to the writer");
                let mut line = String::new();
                std::io::BufRead::read_line(&mut from, &mut line).expect("from the writer");
                assert_eq!(line.trim(), "ok", "writer failed at write {i}");
                let end = (off + n) as usize;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[off as usize..end].fill(byte);
                ranges.push((i, off as usize, end));
                i += 1;
            }
            for (w, off, end) in ranges {
                let (from_b, to_b) = (off.saturating_sub(4096), (end + 4096).min(model.len()));
                let got = reader.read_at(&mut all[..to_b - from_b], from_b as u64).expect("pread");
                if got != to_b - from_b || all[..got] != model[from_b..to_b] {
                    bad.push(format!("write {w} ({off}..{end}): read {got} bytes, not the ones written"));
                }
            }
            if rng.below(16) == 0 {
                let got = reader.read_at(&mut all, 0).expect("pread");
                if all[..got] != model[..] {
                    let at = all[..got].iter().zip(&model).position(|(a, b)| a != b).unwrap_or(got);
                    bad.push(format!("after write {i}: the file differs at {at} ({got} of {} bytes)", model.len()));
                }
            }
        }
        drop(to);
        assert!(child.wait().expect("writer").success(), "{opts}: the writer failed");
        done.store(true, Ordering::Relaxed);
        racer.join().expect("racer");
        assert!(bad.is_empty(), "{opts}: {bad:?}");
        drop(reader);
        assert!(fs::read(&path).expect("read") == model, "{opts}: a new open reads other bytes");
        fx.unmount();
        fx.assert_clean();
    }
}

/// Opens that may write bypass the kernel's page cache (`direct_writes`,
/// the default) while read-only opens keep it. While three threads read
/// one small file through cached read-only opens as fast as they can
/// (their misses race with every write), a writer writes 8 KiB units with
/// increasing generation numbers and, after each write, reads the unit
/// back through another cached read-only open: it must see what it just
/// wrote, never a page cached from before the write.
#[test]
fn cached_reads_never_stale_after_direct_writes() {
    require_fuse!();
    const HOT: u64 = 4;
    const WRITES: u64 = 20_000;
    const MAX_TIME: Duration = Duration::from_secs(8);
    let fx = Fixture::with_mkfs_args("64M", &["-b", "4096"]);
    fx.mount("rw");
    let path = fx.path("hot");
    fs::write(&path, vec![0u8; HOT as usize * UNIT]).expect("create");
    let done = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for r in 0..3u64 {
        let (path, done) = (path.clone(), done.clone());
        readers.push(std::thread::spawn(move || {
            let f = File::open(&path).expect("open O_RDONLY");
            let mut rng = Rng::new(200 + r);
            let mut buf = vec![0u8; UNIT];
            let mut n = 0u64;
            while !done.load(Ordering::Relaxed) {
                f.read_exact_at(&mut buf, rng.below(HOT) * UNIT as u64).expect("pread");
                n += 1;
            }
            n
        }));
    }
    let check = File::open(&path).expect("open O_RDONLY");
    let w = OpenOptions::new().write(true).open(&path).expect("open O_WRONLY");
    let mut rng = Rng::new(7);
    let (mut stale, mut writes) = (Vec::new(), 0u64);
    let t0 = Instant::now();
    let mut back = vec![0u8; UNIT];
    while writes < WRITES && t0.elapsed() < MAX_TIME {
        writes += 1;
        let unit = rng.below(HOT);
        let want = writes.to_le_bytes().repeat(UNIT / 8);
        w.write_all_at(&want, unit * UNIT as u64).expect("pwrite");
        check.read_exact_at(&mut back, unit * UNIT as u64).expect("pread");
        if back != want && stale.len() < 4 {
            stale.push(format!("write {writes} to unit {unit}: read back {:?}", &back[..8]));
        }
    }
    done.store(true, Ordering::Relaxed);
    let reads: u64 = readers.into_iter().map(|r| r.join().expect("reader")).sum();
    assert!(writes > 1000 && reads > 1000, "{writes} writes, {reads} reads");
    assert!(stale.is_empty(), "stale cached reads: {stale:?}");
    drop((check, w));
    fx.unmount();
    fx.assert_clean();
}
