//! `uext4 bench scale`: does the cost of an operation grow with the size
//! of the image, the directory, the file or the tree? The library-only
//! half of issue 24's scale benchmark (no FUSE: `bench/scale.sh` measures
//! through the mount), so the engine's own curve is visible. A
//! measurement, never a test.
//!
//! Everything goes through the public API a library user calls: the
//! `std::fs`-like [`Filesystem`] path functions, [`File`] and
//! [`OpenOptions`], plus [`FsCore::inode`](uext4::FsCore::inode) and the
//! extent header parser for the file's tree depth (no call reports it).
//! Each section works on its own sparse image in `--dir`, made like
//! `mkfs.ext4 -E lazy_itable_init=1,lazy_journal_init=1` (by uext4's mkfs,
//! whose image files are sparse and never zero tables, or by mkfs.ext4
//! itself with `--mkfs mkfs.ext4`), checked with `e2fsck -fn` after
//! unmount when e2fsck is installed (a dirty image fails the command),
//! and deleted.
//!
//! - size: per image size, open, the first statfs, N creates (create, 4
//!   KiB write, close), N unlinks, N mkdirs (top level: the Orlov path),
//!   a sequential write and fsync, unmount; each per-op cost also as a
//!   ratio to the first size's.
//! - dir: one directory grown to N empty files, creates/s per tenth, then
//!   random lookups, one full listing, removing every file.
//! - file: a 1 TiB sparse file taking N random 4 KiB direct writes at
//!   distinct aligned offsets (IOPS of the first and last tenth), random
//!   reads for a few seconds, the extent tree's depth.
//! - tree: D directories of F empty files: populate, then two walks
//!   (read_dir and metadata of every entry), the process's RSS after each.
//! - open: N files open at once (kept in a Vec), then dropped.
//!
//! RSS is the whole process's (VmRSS), so a later size or section also
//! shows what earlier ones left in the allocator; run one section at a
//! time for a clean figure.

use crate::util::{fs_err, parse_size, CliError, CliResult};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;
use uext4::mkfs::{mkfs_file, MkfsOptions};
use uext4::MountOptions;
use uext4::{File, Filesystem, OpenOptions};

/// Parameters of `bench scale`.
#[derive(Debug, Clone)]
pub struct ScaleBench {
    /// Sections to run: size, dir, file, tree, open.
    pub sections: Vec<String>,
    /// Image sizes of the size section (`1G`, `1T`, ...).
    pub sizes: Vec<String>,
    /// Creates, unlinks and mkdirs per image size.
    pub creates: u64,
    /// MiB of the size section's sequential write.
    pub write_mib: u64,
    /// Entries of the dir section's directory.
    pub dir_entries: u64,
    /// Random direct writes of the file section.
    pub file_writes: u64,
    /// Seconds of random reads in the file section.
    pub read_seconds: f64,
    /// The tree section's shape, `DxF` (directories x files).
    pub tree: String,
    /// Files the open section holds open at once.
    pub open_files: u64,
    /// Image size of the dir, file, tree and open sections.
    pub image_size: String,
    /// Who makes the images: `uext4` (the library's mkfs) or `mkfs.ext4`.
    pub mkfs: String,
    /// Where the images go.
    pub dir: PathBuf,
    /// Print JSON lines instead of markdown tables.
    pub json: bool,
}

const SECTIONS: [&str; 5] = ["size", "dir", "file", "tree", "open"];

/// One cell of a result row.
enum V {
    S(String),
    I(u64),
    F(f64),
    /// No value (e.g. the ratio of the first row to itself is 1, but a
    /// ratio of a one-off operation means nothing).
    None,
}

impl V {
    fn table(&self) -> String {
        match self {
            V::S(s) => s.clone(),
            V::I(n) => n.to_string(),
            V::F(x) if x.abs() >= 100.0 => format!("{x:.0}"),
            V::F(x) if x.abs() >= 1.0 => format!("{x:.2}"),
            V::F(x) => format!("{x:.4}"),
            V::None => "-".into(),
        }
    }

    fn json(&self) -> String {
        match self {
            V::S(s) => format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"")),
            V::I(n) => n.to_string(),
            V::F(x) if x.is_finite() => format!("{x:.6}"),
            V::F(_) | V::None => "null".into(),
        }
    }
}

/// A row: (JSON key, table heading, value) per column.
type Row = Vec<(&'static str, &'static str, V)>;

/// Prints rows as they come: a JSON line each, or a markdown table per
/// section (its heading printed before the first row).
struct Report<'a, W: Write> {
    out: &'a mut W,
    json: bool,
    /// The section whose table is open, if any.
    open: Option<&'static str>,
}

impl<W: Write> Report<'_, W> {
    fn row(&mut self, section: &'static str, row: Row) -> CliResult {
        if self.json {
            let cells: Vec<String> = row.iter().map(|(k, _, v)| format!("\"{k}\":{}", v.json())).collect();
            writeln!(self.out, "{{\"section\":\"{section}\",{}}}", cells.join(","))?;
        } else {
            if self.open != Some(section) {
                let heads: Vec<&str> = row.iter().map(|(_, h, _)| *h).collect();
                writeln!(self.out, "\n### {section}\n")?;
                writeln!(self.out, "| {} |", heads.join(" | "))?;
                writeln!(self.out, "|{}", "---|".repeat(heads.len()))?;
                self.open = Some(section);
            }
            let cells: Vec<String> = row.iter().map(|(_, _, v)| v.table()).collect();
            writeln!(self.out, "| {} |", cells.join(" | "))?;
        }
        self.out.flush()?;
        Ok(())
    }

    /// A line outside the tables (text mode only; JSON gets a row).
    fn note(&mut self, section: &'static str, text: &str) -> CliResult {
        if self.json {
            writeln!(self.out, "{{\"section\":\"{section}\",\"note\":{}}}", V::S(text.into()).json())?;
        } else {
            if self.open.is_some() {
                writeln!(self.out)?;
            }
            writeln!(self.out, "{section}: {text}")?;
            self.open = None;
        }
        self.out.flush()?;
        Ok(())
    }
}

/// The process's resident set (VmRSS) in MiB.
fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

/// `tool` with e2fsprogs' sbin directories added to PATH.
fn tool(name: &str) -> Command {
    let mut c = Command::new(name);
    let path = std::env::var("PATH").unwrap_or_default();
    c.env("PATH", format!("{path}:/usr/local/sbin:/usr/sbin:/sbin"));
    c
}

fn have(name: &str) -> bool {
    tool(name).arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

/// The scratch directory in `--dir`; removed with everything in it.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Ctx<'a> {
    p: &'a ScaleBench,
    dir: PathBuf,
    fsck: bool,
}

impl Ctx<'_> {
    /// Makes a fresh sparse image of `size` bytes at `img`; returns the
    /// seconds it took.
    fn mkfs(&self, img: &Path, size: u64) -> CliResult<f64> {
        let t = Instant::now();
        match self.p.mkfs.as_str() {
            "uext4" => {
                let mut o = MkfsOptions { size, ..Default::default() };
                // uext4's mkfs is lazy anyway (sparse files, tables never
                // zeroed); named so that the two mkfs runs read alike.
                o.apply_extended("lazy_itable_init=1,lazy_journal_init=1").map_err(|e| fs_err("mkfs", e))?;
                mkfs_file(img, &o).map_err(|e| fs_err("mkfs", e))?;
            }
            "mkfs.ext4" => {
                let f = std::fs::File::create(img)?;
                f.set_len(size)?;
                drop(f);
                let out = tool("mkfs.ext4")
                    .args(["-q", "-F", "-E", "lazy_itable_init=1,lazy_journal_init=1"])
                    .arg(img)
                    .output()
                    .map_err(|e| CliError::msg(format!("mkfs.ext4: {e} (install e2fsprogs)")))?;
                if !out.status.success() {
                    return Err(CliError::msg(format!(
                        "mkfs.ext4 failed: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    )));
                }
            }
            other => return Err(CliError::msg(format!("unknown --mkfs {other:?} (uext4, mkfs.ext4)"))),
        }
        Ok(t.elapsed().as_secs_f64())
    }

    fn open(&self, img: &Path) -> CliResult<Filesystem> {
        Filesystem::open_with(img, MountOptions { write: true, ..Default::default() }).map_err(|e| fs_err("open", e))
    }

    /// `e2fsck -fn` of an unmounted image: an error unless clean. Returns
    /// its seconds (None without e2fsck). Deletes the image either way.
    fn check(&self, img: &Path) -> CliResult<Option<f64>> {
        if !self.fsck {
            let _ = std::fs::remove_file(img);
            return Ok(None);
        }
        let t = Instant::now();
        let out = tool("e2fsck").arg("-fn").arg(img).output();
        let secs = t.elapsed().as_secs_f64();
        let _ = std::fs::remove_file(img);
        let out = out.map_err(|e| CliError::msg(format!("e2fsck: {e}")))?;
        if !out.status.success() {
            return Err(CliError::msg(format!(
                "e2fsck -fn found {} not clean ({}):\n{}{}",
                img.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(Some(secs))
    }

    fn image_size(&self) -> CliResult<u64> {
        parse_size(&self.p.image_size).map_err(CliError::msg)
    }
}

/// Runs `f` `n` times (with the index), returning the seconds.
fn timed_loop(n: u64, mut f: impl FnMut(u64) -> CliResult) -> CliResult<f64> {
    let t = Instant::now();
    for i in 0..n {
        f(i)?;
    }
    Ok(t.elapsed().as_secs_f64())
}

fn timed<T>(f: impl FnOnce() -> CliResult<T>) -> CliResult<(T, f64)> {
    let t = Instant::now();
    let r = f()?;
    Ok((r, t.elapsed().as_secs_f64()))
}

/// The allocators' work counters: robust under load where times are not.
#[derive(Clone, Copy, Default)]
struct Work {
    /// Groups (or flex groups) the inode allocator examined.
    inode_groups: u64,
    /// Free extents the block allocator scanned.
    block_extents: u64,
    /// Groups the block allocator scanned.
    block_groups: u64,
}

impl Work {
    fn of(fs: &Filesystem) -> Work {
        let i = fs.inode_alloc_stats().map_or(0, |s| s.groups_examined);
        let (e, g) = fs
            .alloc_stats()
            .map_or((0, 0), |s| (s.extents_scanned.iter().sum::<u64>(), s.groups_scanned.iter().sum::<u64>()));
        Work { inode_groups: i, block_extents: e, block_groups: g }
    }

    fn since(self, before: Work) -> Work {
        Work {
            inode_groups: self.inode_groups - before.inode_groups,
            block_extents: self.block_extents - before.block_extents,
            block_groups: self.block_groups - before.block_groups,
        }
    }

    /// The three columns, per operation.
    fn cells(self, ops: u64) -> [(&'static str, &'static str, V); 3] {
        let per = |n: u64| V::F(n as f64 / ops.max(1) as f64);
        [
            ("inode_groups_per_op", "inode groups examined/op", per(self.inode_groups)),
            ("block_extents_per_op", "block extents scanned/op", per(self.block_extents)),
            ("block_groups_per_op", "block groups scanned/op", per(self.block_groups)),
        ]
    }
}

impl Work {
    /// [`Work::cells`], or the same columns empty when not counted.
    fn cells_or_none(w: Option<Work>, ops: u64) -> [(&'static str, &'static str, V); 3] {
        match w {
            Some(w) => w.cells(ops),
            None => Work::default().cells(1).map(|(k, h, _)| (k, h, V::None)),
        }
    }
}

/// Runs `f` on `fs`, returning its result and the allocators' work.
fn counted<T>(fs: &Filesystem, f: impl FnOnce() -> CliResult<T>) -> CliResult<(T, Work)> {
    let w = Work::of(fs);
    let r = f()?;
    Ok((r, Work::of(fs).since(w)))
}

/// An I/O error of a `File` call, with the file's name.
fn io_err(path: &str, e: std::io::Error) -> CliError {
    CliError::msg(format!("{path}: {e}"))
}

fn create_empty(fs: &Filesystem, path: &str) -> CliResult {
    fs.open_file(path, OpenOptions::new().write(true).create_new(true)).map_err(|e| fs_err(path, e))?;
    Ok(())
}

fn fsck_note<W: Write>(r: &mut Report<W>, section: &'static str, what: &str, secs: Option<f64>) -> CliResult {
    match secs {
        Some(s) => r.note(section, &format!("{what}: e2fsck -fn clean ({s:.2} s)")),
        None => Ok(()),
    }
}

/// The size section: the per-operation cost on images of each size.
fn size_section<W: Write>(c: &Ctx, r: &mut Report<W>) -> CliResult {
    let p = c.p;
    let n = p.creates;
    // The first size's µs per op, by op, for the ratio column.
    let mut first: Vec<(&'static str, f64)> = Vec::new();
    let mut checked = Vec::new();
    // The same write on every size, so that the ratios compare like with
    // like: at most half the smallest image (a 1 GiB write cannot fit in a
    // 1 GiB image beside its journal and reserve).
    let smallest = p.sizes.iter().filter_map(|s| parse_size(s).ok()).min().unwrap_or(0);
    let write_mib = p.write_mib.min((smallest / 2) >> 20);
    if write_mib != p.write_mib {
        r.note("size", &format!("sequential write cut to {write_mib} MiB (half the smallest image)"))?;
    }
    for label in &p.sizes {
        let size = parse_size(label).map_err(CliError::msg)?;
        let img = c.dir.join(format!("size-{label}.img"));
        let mut ops: Vec<(&'static str, u64, f64, Option<Work>)> = Vec::new();
        ops.push(("mkfs", 1, c.mkfs(&img, size)?, None));
        let (mut fs, secs) = timed(|| c.open(&img))?;
        ops.push(("open", 1, secs, None));
        let ((_, secs), w) = counted(&fs, || timed(|| Ok(fs.statfs())))?;
        ops.push(("statfs", 1, secs, Some(w)));
        let data = vec![0x5Au8; 4096];
        let (secs, w) = counted(&fs, || {
            timed_loop(n, |i| {
                let path = format!("/f{i}");
                let mut f = fs
                    .open_file(&path, OpenOptions::new().write(true).create_new(true))
                    .map_err(|e| fs_err(&path, e))?;
                f.write_all(&data).map_err(|e| io_err(&path, e))
            })
        })?;
        ops.push(("create", n, secs, Some(w)));
        let (secs, w) =
            counted(&fs, || timed_loop(n, |i| fs.remove_file(format!("/f{i}")).map_err(|e| fs_err("unlink", e))))?;
        ops.push(("unlink", n, secs, Some(w)));
        let (secs, w) =
            counted(&fs, || timed_loop(n, |i| fs.create_dir(format!("/d{i}")).map_err(|e| fs_err("mkdir", e))))?;
        ops.push(("mkdir", n, secs, Some(w)));
        let ((_, secs), w) = counted(&fs, || {
            timed(|| {
                let mut f = fs
                    .open_file("/seq", OpenOptions::new().write(true).create_new(true))
                    .map_err(|e| fs_err("/seq", e))?;
                let chunk = vec![0xC3u8; 1 << 20];
                for _ in 0..write_mib {
                    f.write_all(&chunk).map_err(|e| io_err("/seq", e))?;
                }
                f.sync_all().map_err(|e| fs_err("fsync", e))
            })
        })?;
        ops.push(("write MiB+fsync", write_mib, secs, Some(w)));
        let rss = rss_mib();
        let (_, secs) = timed(|| fs.unmount().map_err(|e| fs_err("unmount", e)))?;
        ops.push(("unmount", 1, secs, None));
        drop(fs);
        for (op, count, secs, work) in ops {
            let us = secs * 1e6 / count.max(1) as f64;
            let ratio = match first.iter().find(|(o, _)| *o == op) {
                Some(&(_, base)) => V::F(us / base),
                None => {
                    first.push((op, us));
                    V::F(1.0)
                }
            };
            let mut row = vec![
                ("image", "image", V::S(label.clone())),
                ("op", "op", V::S(op.into())),
                ("count", "count", V::I(count)),
                ("secs", "s", V::F(secs)),
                ("ops_per_sec", "ops/s", V::F(count as f64 / secs)),
                ("us_per_op", "µs/op", V::F(us)),
                ("ratio_to_first", "x first size", ratio),
            ];
            row.extend(Work::cells_or_none(work, count));
            row.push(("rss_mib", "RSS MiB", V::F(rss)));
            r.row("size", row)?;
        }
        // The notes wait for the end of the table (a text line right
        // after a markdown table would read as one of its rows).
        checked.push((label.clone(), c.check(&img)?));
    }
    for (label, secs) in checked {
        fsck_note(r, "size", &format!("{label} image"), secs)?;
    }
    Ok(())
}

/// The dir section: one directory grown to `--dir-entries` files.
fn dir_section<W: Write>(c: &Ctx, r: &mut Report<W>) -> CliResult {
    let n = c.p.dir_entries.max(10);
    let img = c.dir.join("dir.img");
    c.mkfs(&img, c.image_size()?)?;
    let mut fs = c.open(&img)?;
    fs.create_dir("/big").map_err(|e| fs_err("/big", e))?;
    let row = |phase: String, ops: u64, secs: f64, ratio: V| {
        vec![
            ("phase", "phase", V::S(phase)),
            ("ops", "ops", V::I(ops)),
            ("secs", "s", V::F(secs)),
            ("ops_per_sec", "ops/s", V::F(ops as f64 / secs)),
            ("us_per_op", "µs/op", V::F(secs * 1e6 / ops.max(1) as f64)),
            ("ratio_to_first_tenth", "x first tenth (µs/op)", ratio),
        ]
    };
    let mut first_us = None;
    for k in 0..10 {
        let (lo, hi) = (n * k / 10, n * (k + 1) / 10);
        let secs = timed_loop(hi - lo, |i| create_empty(&fs, &format!("/big/f{}", lo + i)))?;
        let us = secs * 1e6 / (hi - lo).max(1) as f64;
        let base = *first_us.get_or_insert(us);
        r.row("dir", row(format!("create {}-{hi}", lo + 1), hi - lo, secs, V::F(us / base)))?;
    }
    let lookups = n.min(100_000);
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let secs = timed_loop(lookups, |_| {
        let path = format!("/big/f{}", rng.below(n));
        fs.metadata(&path).map_err(|e| fs_err(&path, e))?;
        Ok(())
    })?;
    r.row("dir", row(format!("random lookup at {n}"), lookups, secs, V::None))?;
    let (listed, secs) = timed(|| {
        let mut count = 0u64;
        for e in fs.read_dir("/big").map_err(|e| fs_err("read_dir", e))? {
            e.map_err(|e| fs_err("read_dir", e))?;
            count += 1;
        }
        Ok(count)
    })?;
    if listed != n {
        return Err(CliError::msg(format!("listing /big gave {listed} entries, not {n}")));
    }
    r.row("dir", row("list (read_dir)".into(), listed, secs, V::None))?;
    let secs = timed_loop(n, |i| fs.remove_file(format!("/big/f{i}")).map_err(|e| fs_err("unlink", e)))?;
    r.row("dir", row("remove all".into(), n, secs, V::None))?;
    let (_, secs) = timed(|| fs.unmount().map_err(|e| fs_err("unmount", e)))?;
    r.row("dir", row("unmount".into(), 1, secs, V::None))?;
    drop(fs);
    fsck_note(r, "dir", "image", c.check(&img)?)
}

/// xorshift64: reproducible random numbers without a dependency.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// The file section: random direct writes into a 1 TiB sparse file.
fn file_section<W: Write>(c: &Ctx, r: &mut Report<W>) -> CliResult {
    const FILE: u64 = 1 << 40;
    const BLOCKS: u64 = FILE / 4096; // a power of two
    let n = c.p.file_writes.clamp(10, BLOCKS);
    // Write i goes to block (i * odd) mod 2^28: distinct for every i
    // below 2^28 (an odd multiplier is invertible modulo a power of
    // two), and scattered over the whole file.
    let offset = |i: u64| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15 | 1) & (BLOCKS - 1)) * 4096;
    let img = c.dir.join("file.img");
    c.mkfs(&img, c.image_size()?)?;
    let mut fs = c.open(&img)?;
    let f: File = fs
        .open_file("/sparse", OpenOptions::new().read(true).write(true).create_new(true).direct(true))
        .map_err(|e| fs_err("/sparse", e))?;
    f.set_len(FILE).map_err(|e| fs_err("set_len", e))?;
    let row = |phase: &str, ops: u64, secs: f64, work: Option<Work>| {
        let mut row = vec![
            ("phase", "phase", V::S(phase.into())),
            ("ops", "ops", V::I(ops)),
            ("secs", "s", V::F(secs)),
            ("iops", "IOPS", V::F(ops as f64 / secs)),
            ("us_per_op", "µs/op", V::F(secs * 1e6 / ops.max(1) as f64)),
        ];
        row.extend(Work::cells_or_none(work, ops));
        row
    };
    let mut buf = vec![0xE7u8; 4096];
    let tenth = n / 10;
    let mut write = |range: std::ops::Range<u64>| {
        counted(&fs, || {
            timed_loop(range.end - range.start, |i| {
                let i = range.start + i;
                buf[..8].copy_from_slice(&i.to_le_bytes());
                f.write_all_at(&buf, offset(i)).map_err(|e| io_err("/sparse", e))
            })
        })
    };
    let (s_first, w_first) = write(0..tenth)?;
    let (s_mid, w_mid) = write(tenth..n - tenth)?;
    let (s_last, w_last) = write(n - tenth..n)?;
    let w_all = Work {
        inode_groups: w_first.inode_groups + w_mid.inode_groups + w_last.inode_groups,
        block_extents: w_first.block_extents + w_mid.block_extents + w_last.block_extents,
        block_groups: w_first.block_groups + w_mid.block_groups + w_last.block_groups,
    };
    r.row("file", row("write first 10%", tenth, s_first, Some(w_first)))?;
    r.row("file", row("write last 10%", tenth, s_last, Some(w_last)))?;
    r.row("file", row("write all", n, s_first + s_mid + s_last, Some(w_all)))?;
    f.sync_all().map_err(|e| fs_err("fsync", e))?;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let before = Work::of(&fs);
    let (mut reads, t) = (0u64, Instant::now());
    let mut back = vec![0u8; 4096];
    while t.elapsed().as_secs_f64() < c.p.read_seconds || reads == 0 {
        let i = rng.below(n);
        f.read_exact_at(&mut back, offset(i)).map_err(|e| io_err("/sparse", e))?;
        // Cheap, and keeps the figures honest: each block holds its index.
        if back[..8] != i.to_le_bytes() {
            return Err(CliError::msg(format!("block {i} at {} reads back wrong", offset(i))));
        }
        reads += 1;
    }
    let secs = t.elapsed().as_secs_f64();
    r.row("file", row("random read", reads, secs, Some(Work::of(&fs).since(before))))?;
    // No call reports the tree's depth: the root header in i_block has it.
    let ino = f.ino();
    let inode = fs.inode(ino).map_err(|e| fs_err("inode", e))?;
    let depth =
        uext4::format::extent::parse_node(&inode.block, 0).map_err(|e| fs_err("extent root", e))?.header().depth;
    let runs = fs.extents(ino).map_err(|e| fs_err("extents", e))?.len();
    drop(f);
    let (_, secs) = timed(|| fs.unmount().map_err(|e| fs_err("unmount", e)))?;
    drop(fs);
    r.row("file", row("unmount", 1, secs, None))?;
    let fsck = c.check(&img)?;
    if let Some(s) = fsck {
        r.row("file", row("e2fsck -fn (clean)", 1, s, None))?;
    }
    r.note("file", &format!("extent tree depth {depth}, {runs} mapped runs, {n} distinct 4 KiB blocks written"))?;
    Ok(())
}

/// Parses `DxF`.
fn tree_shape(s: &str) -> CliResult<(u64, u64)> {
    let bad = || CliError::msg(format!("--tree {s:?}: expected DIRSxFILES, e.g. 2000x1000"));
    let (d, f) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    Ok((d.trim().parse().map_err(|_| bad())?, f.trim().parse().map_err(|_| bad())?))
}

/// The tree section: populate D x F files, walk the tree twice.
fn tree_section<W: Write>(c: &Ctx, r: &mut Report<W>) -> CliResult {
    let (dirs, files) = tree_shape(&c.p.tree)?;
    let img = c.dir.join("tree.img");
    c.mkfs(&img, c.image_size()?)?;
    let mut fs = c.open(&img)?;
    let row = |phase: &str, entries: u64, secs: f64| {
        vec![
            ("phase", "phase", V::S(phase.into())),
            ("entries", "entries", V::I(entries)),
            ("secs", "s", V::F(secs)),
            ("per_sec", "entries/s", V::F(entries as f64 / secs)),
            ("us_per_entry", "µs/entry", V::F(secs * 1e6 / entries.max(1) as f64)),
            ("rss_mib", "RSS MiB after", V::F(rss_mib())),
        ]
    };
    fs.create_dir("/t").map_err(|e| fs_err("/t", e))?;
    let secs = timed_loop(dirs, |d| {
        fs.create_dir(format!("/t/d{d}")).map_err(|e| fs_err("mkdir", e))?;
        for j in 0..files {
            create_empty(&fs, &format!("/t/d{d}/f{j}"))?;
        }
        Ok(())
    })?;
    r.row("tree", row("populate", dirs * (files + 1), secs))?;
    for pass in ["walk 1", "walk 2"] {
        let (seen, secs) = timed(|| {
            let mut seen = 0u64;
            for e in fs.read_dir("/t").map_err(|e| fs_err("read_dir", e))? {
                let e = e.map_err(|e| fs_err("read_dir", e))?;
                let m = e.metadata().map_err(|e| fs_err("metadata", e))?;
                seen += 1;
                if m.is_dir() {
                    for f in fs.read_dir(e.path()).map_err(|e| fs_err("read_dir", e))? {
                        f.map_err(|e| fs_err("read_dir", e))?.metadata().map_err(|e| fs_err("metadata", e))?;
                        seen += 1;
                    }
                }
            }
            Ok(seen)
        })?;
        if seen != dirs * (files + 1) {
            return Err(CliError::msg(format!("{pass} saw {seen} entries, not {}", dirs * (files + 1))));
        }
        r.row("tree", row(pass, seen, secs))?;
    }
    let (_, secs) = timed(|| fs.unmount().map_err(|e| fs_err("unmount", e)))?;
    drop(fs);
    r.row("tree", row("unmount", 1, secs))?;
    fsck_note(r, "tree", "image", c.check(&img)?)
}

/// The open section: `--open-files` files open at once.
fn open_section<W: Write>(c: &Ctx, r: &mut Report<W>) -> CliResult {
    let n = c.p.open_files;
    let img = c.dir.join("open.img");
    c.mkfs(&img, c.image_size()?)?;
    let mut fs = c.open(&img)?;
    let row = |phase: &str, ops: u64, secs: f64| {
        vec![
            ("phase", "phase", V::S(phase.into())),
            ("ops", "ops", V::I(ops)),
            ("secs", "s", V::F(secs)),
            ("ops_per_sec", "ops/s", V::F(ops as f64 / secs)),
            ("us_per_op", "µs/op", V::F(secs * 1e6 / ops.max(1) as f64)),
            ("rss_mib", "RSS MiB after", V::F(rss_mib())),
        ]
    };
    fs.create_dir("/o").map_err(|e| fs_err("/o", e))?;
    let secs = timed_loop(n, |i| create_empty(&fs, &format!("/o/f{i}")))?;
    r.row("open", row("create", n, secs))?;
    let mut held: Vec<File> = Vec::with_capacity(n as usize);
    let secs = timed_loop(n, |i| {
        let path = format!("/o/f{i}");
        held.push(fs.open_file(&path, OpenOptions::new().read(true).write(true)).map_err(|e| fs_err(&path, e))?);
        Ok(())
    })?;
    r.row("open", row("open all (held)", n, secs))?;
    let (_, secs) = timed(|| {
        drop(held);
        Ok(())
    })?;
    r.row("open", row("close all (drop)", n, secs))?;
    let (_, secs) = timed(|| fs.unmount().map_err(|e| fs_err("unmount", e)))?;
    drop(fs);
    r.row("open", row("unmount", 1, secs))?;
    fsck_note(r, "open", "image", c.check(&img)?)
}

/// Runs `bench scale` and prints the results.
pub fn run_scale(p: &ScaleBench, out: &mut impl Write) -> CliResult {
    for s in &p.sections {
        if !SECTIONS.contains(&s.as_str()) {
            return Err(CliError::msg(format!("unknown section {s:?} ({})", SECTIONS.join(", "))));
        }
    }
    // Refuse bad arguments before minutes of work.
    for s in p.sizes.iter().chain([&p.image_size]) {
        parse_size(s).map_err(CliError::msg)?;
    }
    tree_shape(&p.tree)?;
    if p.mkfs != "uext4" && p.mkfs != "mkfs.ext4" {
        return Err(CliError::msg(format!("unknown --mkfs {:?} (uext4, mkfs.ext4)", p.mkfs)));
    }
    let dir = p.dir.join(format!("uext4-bench-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let scratch = Scratch(dir);
    let c = Ctx { p, dir: scratch.0.clone(), fsck: have("e2fsck") };
    let mut r = Report { out, json: p.json, open: None };
    if !p.json {
        writeln!(
            r.out,
            "bench scale: library only (no FUSE), images by {} in {}, single thread",
            p.mkfs,
            p.dir.display()
        )?;
    }
    if !c.fsck {
        r.note("all", "e2fsck is not installed: the images are not checked")?;
    }
    for s in &p.sections {
        match s.as_str() {
            "size" => size_section(&c, &mut r)?,
            "dir" => dir_section(&c, &mut r)?,
            "file" => file_section(&c, &mut r)?,
            "tree" => tree_section(&c, &mut r)?,
            _ => open_section(&c, &mut r)?,
        }
    }
    drop(scratch);
    Ok(())
}
