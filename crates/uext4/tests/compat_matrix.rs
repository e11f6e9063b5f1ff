//! The compatibility matrix: one row per feature set people's images have.
//!
//! For a row uext4 writes, the test
//! 1. has the oracle write a tree into a fresh image: the kernel (mount,
//!    `cp -a`, unmount) where this kernel can mount the feature set and the
//!    test runs as root, else `mke2fs -d` (e2fsprogs);
//! 2. checks `e2fsck -fn`, opens the image read-write with uext4 and checks
//!    that uext4 reads exactly the host tree that was copied in;
//! 3. runs the randomized operation harness (tests/random_support) from
//!    that tree against its model: every check of tests/random_ops.rs,
//!    reopen cycles with `e2fsck -fn`, and at the end the kernel (or
//!    `debugfs rdump` where the kernel cannot mount the set) reads back
//!    exactly the model's tree;
//! 4. has the oracle write more (kernel `cp -a`, or `debugfs -w` mkdir and
//!    write) and checks that uext4 reads that back exactly.
//!
//! A row uext4 does not write yet must be refused read-write at open with
//! a message naming the feature, and (where it opens read-only) read
//! exactly: never silently mishandled. docs/COMPATIBILITY.md shows this
//! matrix; each of its cells is one of these rows.
//!
//! `UEXT4_MATRIX_OPS=<n>` sets the operations per row (default 200).

mod matrix_rows;
mod random_support;
mod rw_support;

use matrix_rows::{Expect, Row, ROWS};
use random_support::{run_from, Model, ReadBack};
use rw_support::{fsck_clean, have, kernel_unavailable, KernelMount};
use std::path::Path;
use std::process::Command;
use uext4::Filesystem;

const ROOT: u32 = 2;

/// Writes a deterministic tree into host directory `dir`: files of sizes
/// around the inline, block and indirect-block boundaries, short and long
/// symlinks, a hard link, nested and large directories, non-ASCII names.
fn make_tree(dir: &Path, salt: u64) {
    let mut rng = rw_support::Rng(0x5eed ^ salt.wrapping_mul(0x9E37_79B9));
    let fill = |rng: &mut rw_support::Rng, len: usize| -> Vec<u8> {
        let base = rng.next();
        rw_support::pattern(base, len)
    };
    std::fs::create_dir_all(dir.join("a/b/c")).unwrap();
    for (i, len) in [0usize, 1, 59, 60, 61, 200, 4095, 4096, 5000, 49_153, 70_000, (1 << 20) + 3].iter().enumerate() {
        std::fs::write(dir.join(format!("f{i}")), fill(&mut rng, *len)).unwrap();
    }
    std::fs::write(dir.join("a/b/c/deep"), fill(&mut rng, 3000)).unwrap();
    std::fs::write(dir.join("a/Stra\u{df}e"), b"sharp s").unwrap();
    std::fs::write(dir.join("a/caf\u{e9}"), b"precomposed").unwrap();
    std::os::unix::fs::symlink("f1", dir.join("short-link")).unwrap();
    std::os::unix::fs::symlink("a/".repeat(50) + "x", dir.join("long-link")).unwrap();
    std::fs::hard_link(dir.join("f5"), dir.join("a/f5-link")).unwrap();
    std::fs::create_dir(dir.join("big")).unwrap();
    for i in 0..300 {
        std::fs::write(dir.join(format!("big/entry-with-a-longish-name-{i:04}")), format!("{i}")).unwrap();
    }
}

fn run(cmd: &mut Command) {
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Rows whose image `uext4 mkfs` makes (the library's, from the row's
/// mke2fs-style `-t`, `-O`, `-C` and `-b`) and the kernel fills; then the
/// same flow as the rows of [`ROWS`].
const UEXT4_MKFS_ROWS: &[Row] = &[
    Row { name: "uext4-mkfs-ext2", mkfs: &["-t", "ext2"], size_mb: 64, kernel: true, expect: Expect::ReadWrite },
    Row { name: "uext4-mkfs-ext3", mkfs: &["-t", "ext3"], size_mb: 64, kernel: true, expect: Expect::ReadWrite },
    Row {
        name: "uext4-mkfs-bigalloc-16k",
        mkfs: &["-O", "bigalloc", "-C", "16384"],
        size_mb: 128,
        kernel: true,
        expect: Expect::ReadWrite,
    },
    Row {
        name: "uext4-mkfs-bigalloc-64k",
        mkfs: &["-O", "bigalloc", "-C", "65536", "-b", "4096"],
        size_mb: 256,
        kernel: true,
        expect: Expect::ReadWrite,
    },
];

/// Makes `img` with uext4's mkfs from `row.mkfs`.
fn uext4_mkfs(row: &Row, img: &Path) {
    let mut opts = uext4::mkfs::MkfsOptions { size: row.size_mb << 20, ..Default::default() };
    for pair in row.mkfs.chunks(2) {
        match pair {
            ["-t", t] => opts.features = uext4::mkfs::MkfsFeatures::for_type(t).unwrap(),
            ["-O", list] => opts.features.apply(list).unwrap(),
            ["-C", c] => opts.cluster_size = Some(c.parse().unwrap()),
            ["-b", b] => opts.block_size = Some(b.parse().unwrap()),
            _ => panic!("{}: uext4 mkfs row takes -t, -O, -C, -b: {pair:?}", row.name),
        }
    }
    uext4::mkfs::mkfs_file(img, &opts).unwrap_or_else(|e| panic!("{}: {e}", row.name));
}

/// A fresh image for `row` holding the tree `src`, written by the
/// kernel when `kernel` (else by `mke2fs -d`).
fn make_image(row: &Row, img: &Path, src: &Path, kernel: bool) {
    if UEXT4_MKFS_ROWS.iter().any(|r| r.name == row.name) {
        uext4_mkfs(row, img);
        let mnt = KernelMount::new(img, "").unwrap_or_else(|e| panic!("{}: {e}", row.name));
        run(Command::new("cp").arg("-a").arg(format!("{}/.", src.display())).arg(mnt.path()));
        mnt.unmount();
        return;
    }
    std::fs::File::create(img).unwrap().set_len(row.size_mb << 20).unwrap();
    let mut mk = Command::new("mke2fs");
    mk.args(["-q", "-F"]).args(row.mkfs);
    if !kernel {
        mk.arg("-d").arg(src);
    }
    run(mk.arg(img));
    if !kernel && row.mkfs.iter().any(|a| a.contains("quota")) {
        // mke2fs 1.47.0 -d does not count the files it copies in the
        // quota files (e2fsck -fn then reports "Usage inconsistent"): let
        // e2fsck, the oracle, set them once before the test starts.
        let _ = Command::new("e2fsck").arg("-fy").arg(img).output().unwrap();
    }
    if kernel {
        let mnt = KernelMount::new(img, "").unwrap_or_else(|e| panic!("{}: {e}", row.name));
        run(Command::new("cp").arg("-a").arg(format!("{}/.", src.display())).arg(mnt.path()));
        mnt.unmount();
    }
}

/// The oracle adds the tree `src` as /more: the kernel, or debugfs.
fn write_more(row: &Row, img: &Path, src: &Path, kernel: bool) {
    if kernel {
        let mnt = KernelMount::new(img, "").unwrap_or_else(|e| panic!("{}: {e}", row.name));
        run(Command::new("cp").arg("-a").arg(src).arg(mnt.path().join("more")));
        mnt.unmount();
        return;
    }
    // debugfs writes files and directories (not links): a flat copy of
    // the tree's regular files.
    let mut script = String::from("mkdir more\n");
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            let n = e.file_name().into_string().unwrap();
            script += &format!("write {} more/{n}\n", e.path().display());
        }
    }
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), script).unwrap();
    run(Command::new("debugfs").arg("-w").arg("-f").arg(f.path()).arg(img));
    if row.mkfs.iter().any(|a| a.contains("quota")) {
        // debugfs does not charge what it writes to the quota files.
        let _ = Command::new("e2fsck").arg("-fy").arg(img).output().unwrap();
    }
}

/// Asserts that uext4 reads `/more` of `img` exactly as host `src` (files
/// only when `files_only`: what debugfs copied).
fn check_more(img: &Path, src: &Path, files_only: bool) {
    let fs = Filesystem::open(img).unwrap();
    let m = Model::load(&fs);
    let more = fs.lookup(ROOT, b"more").unwrap();
    if files_only {
        let flat = tempfile::tempdir().unwrap();
        for e in std::fs::read_dir(src).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                std::fs::copy(e.path(), flat.path().join(e.file_name())).unwrap();
            }
        }
        m.assert_same_as_host(more, flat.path());
    } else {
        m.assert_same_as_host(more, src);
    }
}

/// This kernel mounts `row`'s set: the row says so, or the set needs only
/// casefold or quota and this kernel has them (decided up front from the
/// kernel's features, never from a refused mount).
fn kernel_mounts(row: &Row) -> bool {
    let has = |f: &str| row.mkfs.iter().any(|a| a.split(',').any(|x| x == f));
    let (casefold, quota) = (has("casefold"), has("quota") || has("project"));
    row.kernel
        || ((casefold || quota)
            && (!casefold || rw_support::kernel_has_casefold())
            && (!quota || rw_support::kernel_has_quota_v2()))
}

fn check_row(row: &Row, seed: u64) {
    for tool in ["mke2fs", "e2fsck", "debugfs"] {
        if !have(tool) {
            eprintln!("SKIP: {}: {tool} not installed", row.name);
            return;
        }
    }
    let kernel = kernel_mounts(row)
        && match kernel_unavailable() {
            None => true,
            Some(why) => {
                eprintln!("NOTE: {}: kernel unavailable ({why}): e2fsprogs writes and reads back", row.name);
                false
            }
        };
    if !kernel && UEXT4_MKFS_ROWS.iter().any(|r| r.name == row.name) {
        // The library's mkfs has no -d: the kernel fills these images.
        eprintln!("SKIP: {}: needs the kernel to fill a uext4 mkfs image", row.name);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (src, img) = (dir.path().join("src"), dir.path().join("img"));
    make_tree(&src, seed);
    make_image(row, &img, &src, kernel);
    fsck_clean(&img);
    match row.expect {
        Expect::Refused(feature) => {
            let e = Filesystem::open(&img).err().unwrap_or_else(|| panic!("{}: open succeeded", row.name));
            assert!(e.to_string().contains(feature), "{}: refusal does not name {feature}: {e}", row.name);
        }
        Expect::ReadOnly(feature) => {
            let e = Filesystem::open_rw(&img).err().unwrap_or_else(|| panic!("{}: open_rw succeeded", row.name));
            assert!(e.to_string().contains(feature), "{}: refusal does not name {feature}: {e}", row.name);
            let fs = Filesystem::open(&img).unwrap();
            Model::load(&fs).assert_same_as_host(ROOT, &src);
        }
        Expect::ReadWrite => {
            let fs = Filesystem::open_rw(&img).unwrap_or_else(|e| panic!("{}: open_rw: {e}", row.name));
            let m = Model::load(&fs);
            m.assert_same_as_host(ROOT, &src);
            let ops = std::env::var("UEXT4_MATRIX_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
            let rb = if kernel { ReadBack::Kernel } else { ReadBack::Debugfs };
            let stats = run_from(row.name, seed, ops, &img, fs, m, rb);
            eprintln!("{}: {stats:?}", row.name);
            let more = dir.path().join("more");
            make_tree(&more, seed + 1);
            write_more(row, &img, &more, kernel);
            fsck_clean(&img);
            check_more(&img, &more, !kernel);
        }
    }
    fsck_clean(&img);
}

macro_rules! matrix_tests {
    ($($test:ident => $name:literal,)*) => {$(
        #[test]
        fn $test() {
            let row = ROWS.iter().find(|r| r.name == $name).expect("row");
            check_row(row, 7);
        }
    )*};
}

matrix_tests! {
    upstream_default => "upstream-default",
    quota => "quota",
    project => "project",
    inline_data => "inline_data",
    ea_inode => "ea_inode",
    casefold => "casefold",
    bigalloc_16k => "bigalloc-16k",
    bigalloc_64k => "bigalloc-64k",
    fast_commit => "fast_commit",
    mmp => "mmp",
    encrypt => "encrypt",
    verity => "verity",
    ext3 => "ext3",
    ext2 => "ext2",
    blocks_1k => "1k-blocks",
    blocks_2k => "2k-blocks",
    blocks_4k => "4k-blocks",
    blocks_64k => "64k-blocks",
}

macro_rules! uext4_mkfs_tests {
    ($($test:ident => $name:literal,)*) => {$(
        #[test]
        fn $test() {
            let row = UEXT4_MKFS_ROWS.iter().find(|r| r.name == $name).expect("row");
            check_row(row, 11);
        }
    )*};
}

uext4_mkfs_tests! {
    uext4_mkfs_ext2 => "uext4-mkfs-ext2",
    uext4_mkfs_ext3 => "uext4-mkfs-ext3",
    uext4_mkfs_bigalloc_16k => "uext4-mkfs-bigalloc-16k",
    uext4_mkfs_bigalloc_64k => "uext4-mkfs-bigalloc-64k",
}

/// Every row has a test above (the table and the tests stay in step).
#[test]
fn every_row_is_tested() {
    let src = include_str!("compat_matrix.rs");
    for r in ROWS.iter().chain(UEXT4_MKFS_ROWS) {
        assert!(src.contains(&format!("=> \"{}\",", r.name)), "row {} has no test", r.name);
    }
}
