//! The "file size" scale benchmark of issue 24, through the library: one
//! sparse file taking random direct writes at distinct block offsets (each
//! write a new extent, so the tree grows to depth 3 and more), then random
//! direct reads, `e2fsck -fn`, and the file's removal.
//!
//! ```text
//! cargo run --release -p uext4 --example bigfile -- DIR [WRITES] [BLOCK_SIZE] [FILE_SIZE_GIB]
//! ```
//!
//! Defaults: 1,000,000 writes, 4096-byte blocks, a 1024 GiB file on a
//! 2048 GiB sparse image made by `mkfs.ext4` (lazy init) in `DIR`. The
//! writes are block-sized and mostly all-zero: the image's device turns an
//! all-zero block write into a hole punched in the image file, so a
//! million writes do not take 4 GiB of the host's space. One write in 64
//! carries a stamp (its block number), read back and checked at the end.
//!
//! Printed per tenth of the writes: the time and CPU time of that tenth,
//! writes/s, the file's extent count and tree depth, the buffer cache's
//! hit/miss counts. Then read IOPS (first and last tenth), the time of
//! `e2fsck -fn` and its verdict, and the time to unlink the file.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;
use uext4::device::{BlockDevice, FileDevice};
use uext4::MountOptions;
use uext4::{Filesystem, OpenOptions};

/// An image file whose all-zero block writes become punched holes (reads
/// of a hole return zeros: the contents are the same, the space is not
/// taken).
struct ZeroPunch {
    inner: FileDevice,
    block: usize,
}

impl BlockDevice for ZeroPunch {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let aligned = offset.is_multiple_of(self.block as u64) && buf.len().is_multiple_of(self.block);
        if aligned && !buf.is_empty() && buf.iter().all(|&b| b == 0) {
            return self.inner.discard(offset, buf.len() as u64);
        }
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_only(&self) -> bool {
        self.inner.read_only()
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.discard(offset, len)
    }
}

/// A bijection of `0..2^bits` that scatters consecutive inputs (odd
/// multiplications and xor-shifts are invertible modulo a power of two).
fn scatter(i: u64, bits: u32) -> u64 {
    let mask = (1u64 << bits) - 1;
    let mut x = i & mask;
    for _ in 0..3 {
        x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15) & mask;
        x ^= x >> (bits / 2);
    }
    x
}

/// Process CPU time (user + system), seconds.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given; a zeroed rusage is
    // a valid value of the type.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above: `ru` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// Peak resident set size, MiB.
fn peak_rss_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|k| k.parse::<f64>().ok())
        .map_or(0.0, |k| k / 1024.0)
}

fn depth(fs: &Filesystem, ino: u32) -> u16 {
    let i = fs.inode(ino).unwrap();
    u16::from_le_bytes([i.block[6], i.block[7]])
}

fn fsck(img: &Path) -> (f64, bool, String) {
    let t = Instant::now();
    let out = Command::new("e2fsck").args(["-fn"]).arg(img).output().expect("e2fsck");
    let s = t.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (s, out.status.success(), text)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(args.get(1).map_or("/dev/shm/bigfile", String::as_str));
    let writes: u64 = args.get(2).map_or(Ok(1_000_000), |s| s.parse())?;
    let bs: u64 = args.get(3).map_or(Ok(4096), |s| s.parse())?;
    let file_gib: u64 = args.get(4).map_or(Ok(1024), |s| s.parse())?;
    std::fs::create_dir_all(&dir)?;
    let img = dir.join("img");
    let _ = std::fs::remove_file(&img);
    std::fs::File::create(&img)?.set_len((2 * file_gib) << 30)?;
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", &bs.to_string(), "-E", "lazy_itable_init=1,lazy_journal_init=1"])
        .arg(&img)
        .output()?;
    assert!(out.status.success(), "mkfs.ext4: {}", String::from_utf8_lossy(&out.stderr));

    let dev = ZeroPunch { inner: FileDevice::open(&img, true)?, block: bs as usize };
    let mut fs = Filesystem::open_device(Arc::new(dev), MountOptions { write: true, ..Default::default() })?;
    let f = fs.open_file("/f", OpenOptions::new().read(true).write(true).create_new(true).direct(true))?;
    let ino = f.ino();
    let file_blocks = (file_gib << 30) / bs;
    f.set_len(file_gib << 30)?;
    let bits = file_blocks.trailing_zeros();
    assert!(file_blocks.is_power_of_two(), "file size must be a power of two of blocks");
    use std::os::unix::fs::FileExt as _;
    let zero = vec![0u8; bs as usize];
    let stamp = |lblk: u64| {
        let mut b = vec![0u8; bs as usize];
        for (k, c) in b.chunks_mut(8).enumerate() {
            c.copy_from_slice(&(lblk ^ k as u64).to_le_bytes());
        }
        b
    };
    let tenth = (writes / 10).max(1);
    println!(
        "image {} ({} GiB, {bs}-byte blocks), file {file_gib} GiB, {writes} direct writes",
        img.display(),
        2 * file_gib
    );
    println!(
        "{:>9} {:>8} {:>8} {:>10} {:>9} {:>5} {:>10} {:>10}",
        "writes", "wall_s", "cpu_s", "writes/s", "extents", "depth", "cache_hit", "cache_miss"
    );
    let t_all = Instant::now();
    let (mut t, mut c) = (Instant::now(), cpu_seconds());
    let mut c0 = fs.cache_stats();
    for i in 0..writes {
        let lblk = scatter(i, bits);
        let buf = if i.is_multiple_of(64) { stamp(lblk) } else { zero.clone() };
        f.write_at(&buf, lblk * bs)?;
        if (i + 1) % tenth == 0 {
            let (wall, cpu) = (t.elapsed().as_secs_f64(), cpu_seconds() - c);
            // The cache's counts before the extent count's walk.
            let c1 = fs.cache_stats();
            let extents = fs.fiemap(ino, 0, file_gib << 30)?.len();
            println!(
                "{:>9} {:>8.2} {:>8.2} {:>10.0} {:>9} {:>5} {:>10} {:>10}",
                i + 1,
                wall,
                cpu,
                tenth as f64 / wall,
                extents,
                depth(&fs, ino),
                c1.hits - c0.hits,
                c1.misses - c0.misses
            );
            c0 = fs.cache_stats();
            (t, c) = (Instant::now(), cpu_seconds());
        }
    }
    println!("writes: {:.1} s; peak RSS {:.0} MiB", t_all.elapsed().as_secs_f64(), peak_rss_mib());
    let io = fs.io_stats();
    println!(
        "paths: {} exclusive (allocating) direct writes, {} shared, {} unwritten conversions; {} handles",
        io.dio_write_exclusive, io.dio_write_shared, io.dio_conversions, io.handles
    );

    // Random direct reads of written blocks: the first and last tenth.
    let mut buf = vec![0u8; bs as usize];
    let reads = writes.min(200_000);
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut bad = 0u64;
    let (mut t, mut c) = (Instant::now(), cpu_seconds());
    for r in 0..reads {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = x % writes;
        let lblk = scatter(i, bits);
        f.read_at(&mut buf, lblk * bs)?;
        let want = if i.is_multiple_of(64) { stamp(lblk) } else { zero.clone() };
        bad += u64::from(buf != want);
        if (r + 1) % (reads / 10).max(1) == 0 && ((r + 1) / (reads / 10).max(1) == 1 || r + 1 == reads) {
            let (wall, cpu) = (t.elapsed().as_secs_f64(), cpu_seconds() - c);
            println!("reads {:>7}: {:.0} IOPS (cpu {:.2} s per tenth)", r + 1, (reads / 10) as f64 / wall, cpu);
        }
        if (r + 1) % (reads / 10).max(1) == 0 {
            (t, c) = (Instant::now(), cpu_seconds());
        }
    }
    // Every stamped block.
    for i in (0..writes).step_by(64) {
        let lblk = scatter(i, bits);
        f.read_at(&mut buf, lblk * bs)?;
        bad += u64::from(buf != stamp(lblk));
    }
    println!("reads: {bad} wrong blocks");
    let st = fs.stat(ino)?;
    println!("i_blocks {} depth {}", st.blocks, depth(&fs, ino));
    drop(f);
    let t = Instant::now();
    fs.unmount()?;
    println!("unmount: {:.2} s", t.elapsed().as_secs_f64());
    drop(fs);
    let (s, ok, text) = fsck(&img);
    println!("e2fsck -fn: {s:.1} s, {}", if ok { "clean" } else { "NOT CLEAN" });
    if !ok {
        println!("{text}");
    }

    // Removal: the whole tree freed.
    let dev = ZeroPunch { inner: FileDevice::open(&img, true)?, block: bs as usize };
    let mut fs = Filesystem::open_device(Arc::new(dev), MountOptions { write: true, ..Default::default() })?;
    let (t, c) = (Instant::now(), cpu_seconds());
    let h0 = fs.io_stats().handles;
    fs.remove_file("/f")?;
    println!(
        "unlink: {:.2} s (cpu {:.2} s), {} journal handles; peak RSS {:.0} MiB",
        t.elapsed().as_secs_f64(),
        cpu_seconds() - c,
        fs.io_stats().handles - h0,
        peak_rss_mib()
    );
    fs.unmount()?;
    drop(fs);
    let (s, ok, text) = fsck(&img);
    println!("e2fsck -fn after unlink: {s:.1} s, {}", if ok { "clean" } else { "NOT CLEAN" });
    if !ok {
        println!("{text}");
    }
    if std::env::var_os("BIGFILE_KEEP").is_none() {
        std::fs::remove_file(&img)?;
    }
    Ok(())
}
