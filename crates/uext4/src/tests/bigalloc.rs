//! Bigalloc read-write (issue 14, item 7): images made by
//! `mkfs.ext4 -O bigalloc -C 16384/65536` (4 KiB blocks, and 1 KiB blocks
//! with 16 KiB clusters) written by uext4.
//!
//! Checked after each case: `e2fsck -fn` clean (it checks the cluster
//! bitmaps, the group and superblock free counts, i_blocks in whole
//! clusters and the rule that a file's logical and physical cluster
//! offsets agree); the free count back exactly after deletes; as root,
//! the kernel reads back exactly what uext4 wrote and writes more, which
//! e2fsck passes and uext4 reads back. Randomized runs against the model
//! (tests/random_support): 16, 32 and 64 KiB clusters on 4 KiB blocks,
//! 16 and 64 KiB on 1 KiB blocks, the upstream default features, no
//! journal, and a small image where ENOSPC is frequent.

use super::random_support;
use super::rw_support;

use random_support::{run_cfg, Cfg};
use rw_support::{fsck_clean, kernel_unavailable, mkfs, pattern, KernelMount};
use std::path::Path;
use uext4::fs::ops::{FallocMode, SetAttr};
use uext4::Filesystem;

const ROOT: u32 = 2;

/// The image variants: (name, mkfs arguments, size in MiB).
const VARIANTS: &[(&str, &[&str], u64)] = &[
    ("4k-16k", &["-b", "4096", "-O", "bigalloc", "-C", "16384"], 64),
    ("4k-64k", &["-b", "4096", "-O", "bigalloc", "-C", "65536"], 128),
    ("1k-16k", &["-b", "1024", "-O", "bigalloc", "-C", "16384"], 64),
];

fn free_blocks(fs: &Filesystem) -> u64 {
    fs.statfs().free_blocks
}

fn read_all(fs: &Filesystem, ino: u32) -> Vec<u8> {
    fs.read_all(ino).unwrap()
}

/// The expected contents of the files written by [`write_cases`].
struct Expected(Vec<(String, Vec<u8>)>);

/// Writes the cases into `dir` of `fs`: small, sparse, unaligned and large
/// files, partial-cluster truncates and punches.
fn write_cases(fs: &Filesystem, dir: u32, seed: u64) -> Expected {
    let mut out = Vec::new();
    let mut put = |name: &str, writes: &[(u64, usize)], after: &dyn Fn(&Filesystem, u32, &mut Vec<u8>)| {
        let ino = fs.create(dir, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        let mut model = Vec::new();
        for (k, &(off, len)) in writes.iter().enumerate() {
            let data = pattern(seed * 1000 + k as u64 + name.len() as u64, len);
            assert_eq!(fs.inodes().write(ino, off, &data).unwrap(), len);
            let end = off as usize + len;
            if model.len() < end {
                model.resize(end, 0);
            }
            model[off as usize..end].copy_from_slice(&data);
        }
        after(fs, ino, &mut model);
        out.push((name.to_string(), model));
    };
    let none = |_: &Filesystem, _: u32, _: &mut Vec<u8>| {};
    put("small", &[(0, 100)], &none);
    put("unaligned", &[(5000, 9000), (70_000, 3)], &none);
    put("sparse", &[(0, 1), (1 << 20, 4096), (3 << 20, 5000), (12_288, 4096)], &none);
    put("large", &[(0, 3 << 20)], &none);
    put("backwards", &[(12_288, 4096), (8192, 4096), (4096, 4096), (0, 4096)], &none);
    // Truncate inside a cluster, then grow again over the cut.
    put("truncated", &[(0, 200_000)], &|fs, ino, m| {
        fs.setattr(ino, SetAttr { size: Some(70_000), ..Default::default() }).unwrap();
        m.truncate(70_000);
        fs.setattr(ino, SetAttr { size: Some(5000), ..Default::default() }).unwrap();
        m.truncate(5000);
        let d = pattern(77, 30_000);
        fs.inodes().write(ino, 9000, &d).unwrap();
        m.resize(39_000, 0);
        m[9000..39_000].copy_from_slice(&d);
    });
    // Punches: inside one cluster, across clusters, partial edges.
    put("punched", &[(0, 600_000)], &|fs, ino, m| {
        for &(off, len) in &[(4096u64, 4096u64), (20_000, 50_000), (131_072, 65_536), (300_000, 1), (400_000, 150_000)]
        {
            fs.fallocate(ino, FallocMode::PunchHole, off, len).unwrap();
            m[off as usize..(off + len) as usize].fill(0);
        }
        // Write back into a punched cluster.
        let d = pattern(5, 6000);
        fs.inodes().write(ino, 22_000, &d).unwrap();
        m[22_000..28_000].copy_from_slice(&d);
    });
    put("fallocated", &[(0, 10)], &|fs, ino, m| {
        fs.fallocate(ino, FallocMode::KeepSize, 100_000, 200_000).unwrap();
        fs.fallocate(ino, FallocMode::Allocate, 7000, 10_000).unwrap();
        m.resize(17_000, 0);
        let d = pattern(9, 5000);
        fs.inodes().write(ino, 150_000, &d).unwrap();
        m.resize(155_000, 0);
        m[150_000..155_000].copy_from_slice(&d);
    });
    Expected(out)
}

fn check_cases(fs: &Filesystem, dir: u32, want: &Expected) {
    for (name, data) in &want.0 {
        let ino = fs.lookup(dir, name.as_bytes()).unwrap();
        assert!(read_all(fs, ino) == *data, "{name}: contents differ");
    }
}

fn check_cases_host(dir: &Path, want: &Expected) {
    for (name, data) in &want.0 {
        let got = std::fs::read(dir.join(name)).unwrap();
        assert!(got == *data, "kernel: {name}: contents differ");
    }
}

/// Every case on one variant: writes, fsck, deletes back to the free
/// count, then the kernel round trip.
fn cases(variant: usize) {
    let (name, args, size) = VARIANTS[variant];
    let Some((_d, img)) = mkfs(size, args) else { return };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let free0 = free_blocks(&fs);
    let dir = fs.mkdir(ROOT, b"d", 0o755, 0, 0).unwrap().ino;
    let want = write_cases(&fs, dir, 1);
    // Many small files and directories.
    for i in 0..60 {
        let sub = fs.mkdir(dir, format!("sub{i}").as_bytes(), 0o755, 0, 0).unwrap().ino;
        for j in 0..5 {
            let f = fs.create(sub, format!("f{j}").as_bytes(), 0o644, 0, 0).unwrap().ino;
            fs.inodes().write(f, 0, &pattern(i * 10 + j, (j as usize + 1) * 700)).unwrap();
        }
    }
    fs.sync().unwrap();
    check_cases(&fs, dir, &want);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);

    // Reopen, check, delete everything: the free count comes back exactly.
    let mut fs = Filesystem::open_rw(&img).unwrap();
    check_cases(&fs, dir, &want);
    for i in 0..60 {
        let sub = fs.lookup(dir, format!("sub{i}").as_bytes()).unwrap();
        for j in 0..5 {
            fs.unlink(sub, format!("f{j}").as_bytes()).unwrap();
        }
        fs.rmdir(dir, format!("sub{i}").as_bytes()).unwrap();
    }
    for (n, _) in &want.0 {
        fs.unlink(dir, n.as_bytes()).unwrap();
    }
    fs.rmdir(ROOT, b"d").unwrap();
    fs.sync().unwrap();
    assert_eq!(free_blocks(&fs), free0, "{name}: free blocks after deleting everything");
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);

    // Write again, then the kernel reads back, writes more; uext4 reads that.
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let dir = fs.mkdir(ROOT, b"k", 0o755, 0, 0).unwrap().ino;
    let want = write_cases(&fs, dir, 2);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    if let Some(why) = kernel_unavailable() {
        eprintln!("SKIP: kernel round trip ({name}): {why}");
        return;
    }
    let extra = pattern(42, 300_000);
    {
        let m = KernelMount::new(&img, "").unwrap();
        check_cases_host(&m.path().join("k"), &want);
        std::fs::write(m.path().join("k/kernel"), &extra).unwrap();
        let mut f = std::fs::OpenOptions::new().append(true).open(m.path().join("k/unaligned")).unwrap();
        std::io::Write::write_all(&mut f, b"kernel tail").unwrap();
        drop(f);
        m.unmount();
    }
    fsck_clean(&img);
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let k = fs.lookup(dir, b"kernel").unwrap();
    assert!(read_all(&fs, k) == extra, "{name}: the kernel's file");
    let u = fs.lookup(dir, b"unaligned").unwrap();
    let mut tail = want.0.iter().find(|(n, _)| n == "unaligned").unwrap().1.clone();
    tail.extend_from_slice(b"kernel tail");
    assert!(read_all(&fs, u) == tail, "{name}: the kernel's append");
    // uext4 changes the kernel's file: a punch and a truncate mid-cluster.
    fs.fallocate(k, FallocMode::PunchHole, 10_000, 100_000).unwrap();
    fs.setattr(k, SetAttr { size: Some(150_001), ..Default::default() }).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}

#[test]
fn bigalloc_4k_16k_cases() {
    cases(0);
}

#[test]
fn bigalloc_4k_64k_cases() {
    cases(1);
}

#[test]
fn bigalloc_1k_16k_cases() {
    cases(2);
}

#[test]
fn bigalloc_write_open_and_xattr_blocks() {
    // Xattr blocks and extent-tree blocks each take a cluster: i_blocks
    // as the kernel counts them (e2fsck checks).
    let Some((_d, img)) = mkfs(64, VARIANTS[0].1) else { return };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let free0 = free_blocks(&fs);
    let f = fs.create(ROOT, b"frag", 0o644, 0, 0).unwrap().ino;
    // Every other cluster: many extents, a tree with a leaf block.
    for i in 0..400u64 {
        fs.inodes().write(f, i * 2 * 16384 + (i % 4) * 4096, &pattern(i, 4096)).unwrap();
    }
    fs.set_xattr(f, b"user.big", &[7u8; 2000], uext4::fs::XattrSetMode::Any).unwrap();
    fs.sync().unwrap();
    let st = fs.stat(f).unwrap();
    // 400 data clusters, a leaf or more, the xattr cluster.
    assert!(st.blocks >= (400 + 2) * 32, "i_blocks {}", st.blocks);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    let mut fs = Filesystem::open_rw(&img).unwrap();
    fs.unlink(ROOT, b"frag").unwrap();
    fs.sync().unwrap();
    assert_eq!(free_blocks(&fs), free0);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}

const CFG_16K: Cfg = Cfg {
    name: "bigalloc-4k-16k",
    size_mb: 64,
    args: &["-b", "4096", "-O", "bigalloc", "-C", "16384"],
    seeds: 700..702,
    small: false,
};
const CFG_64K: Cfg = Cfg {
    name: "bigalloc-4k-64k",
    size_mb: 128,
    args: &["-b", "4096", "-O", "bigalloc", "-C", "65536"],
    seeds: 710..712,
    small: false,
};
const CFG_1K_16K: Cfg = Cfg {
    name: "bigalloc-1k-16k",
    size_mb: 64,
    args: &["-b", "1024", "-O", "bigalloc", "-C", "16384"],
    seeds: 720..722,
    small: false,
};
/// The upstream default features (orphan_file, metadata_csum_seed) and
/// no journal (metadata written in place).
const CFG_UPSTREAM: Cfg = Cfg {
    name: "bigalloc-upstream-16k",
    size_mb: 64,
    args: &["-b", "4096", "-O", "bigalloc,orphan_file,metadata_csum_seed", "-C", "16384"],
    seeds: 750..752,
    small: false,
};
const CFG_NOJOURNAL: Cfg = Cfg {
    name: "bigalloc-nojournal-32k",
    size_mb: 64,
    args: &["-b", "4096", "-O", "bigalloc,^has_journal", "-C", "32768"],
    seeds: 760..762,
    small: false,
};

/// Many small groups (2048 clusters each): allocations and frees across
/// group boundaries, flex_bg metadata in the first group.
const CFG_GROUPS: Cfg = Cfg {
    name: "bigalloc-groups-16k",
    size_mb: 160,
    args: &["-b", "4096", "-O", "bigalloc", "-C", "16384", "-g", "2048"],
    seeds: 770..772,
    small: false,
};
const CFG_GROUPS_1K: Cfg = Cfg {
    name: "bigalloc-groups-1k-16k",
    size_mb: 96,
    args: &["-b", "1024", "-O", "bigalloc", "-C", "16384", "-g", "1024"],
    seeds: 780..782,
    small: false,
};

/// 64 blocks a cluster.
const CFG_1K_64K: Cfg = Cfg {
    name: "bigalloc-1k-64k",
    size_mb: 128,
    args: &["-b", "1024", "-O", "bigalloc", "-C", "65536"],
    seeds: 740..742,
    small: false,
};

/// Small: ENOSPC is frequent (the per-cluster reservations and claims).
const CFG_16K_SMALL: Cfg = Cfg {
    name: "bigalloc-4k-16k-small",
    size_mb: 16,
    args: &["-b", "4096", "-O", "bigalloc", "-C", "16384", "-N", "64"],
    seeds: 730..732,
    small: true,
};

#[test]
fn bigalloc_random_16k() {
    run_cfg(&CFG_16K);
}

#[test]
fn bigalloc_random_64k() {
    run_cfg(&CFG_64K);
}

#[test]
fn bigalloc_random_1k_16k() {
    run_cfg(&CFG_1K_16K);
}

#[test]
fn bigalloc_random_1k_64k() {
    run_cfg(&CFG_1K_64K);
}

#[test]
fn bigalloc_random_upstream_features() {
    run_cfg(&CFG_UPSTREAM);
}

#[test]
fn bigalloc_random_no_journal() {
    run_cfg(&CFG_NOJOURNAL);
}

#[test]
fn bigalloc_random_many_groups() {
    run_cfg(&CFG_GROUPS);
    run_cfg(&CFG_GROUPS_1K);
}

#[test]
fn bigalloc_random_16k_small() {
    run_cfg(&CFG_16K_SMALL);
}

#[test]
fn bigalloc_implied_cluster_and_partial_frees() {
    // 4 KiB blocks, 16 KiB clusters: 4 blocks a cluster.
    let Some((_d, img)) = mkfs(64, VARIANTS[0].1) else { return };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let free0 = free_blocks(&fs);
    let f = fs.create(ROOT, b"f", 0o644, 0, 0).unwrap().ino;
    let block = |k: u64| pattern(k, 4096);
    fs.inodes().write(f, 0, &block(0)).unwrap();
    fs.sync().unwrap();
    assert_eq!(free_blocks(&fs), free0 - 4, "one cluster for the first block");
    assert_eq!(fs.stat(f).unwrap().blocks, 32, "i_blocks: a whole cluster");
    // Blocks 2 and 3 go into the same cluster: nothing more allocated.
    fs.inodes().write(f, 2 * 4096, &block(2)).unwrap();
    fs.sync().unwrap();
    fs.inodes().write(f, 3 * 4096, &block(3)).unwrap();
    fs.sync().unwrap();
    assert_eq!(free_blocks(&fs), free0 - 4, "the file's partly used cluster is reused");
    // Block 5 starts a second cluster.
    fs.inodes().write(f, 5 * 4096, &block(5)).unwrap();
    fs.sync().unwrap();
    assert_eq!(free_blocks(&fs), free0 - 8);
    assert_eq!(fs.stat(f).unwrap().blocks, 64);
    // Punching blocks 0 and 2 keeps the first cluster (block 3 is mapped);
    // punching block 3 too frees it.
    fs.fallocate(f, FallocMode::PunchHole, 0, 4096).unwrap();
    fs.fallocate(f, FallocMode::PunchHole, 2 * 4096, 4096).unwrap();
    fs.sync().unwrap();
    assert_eq!(free_blocks(&fs), free0 - 8, "a cluster with a mapped block stays");
    fs.fallocate(f, FallocMode::PunchHole, 3 * 4096, 4096).unwrap();
    fs.sync().unwrap();
    assert_eq!(free_blocks(&fs), free0 - 4, "the emptied cluster is freed");
    assert_eq!(fs.stat(f).unwrap().blocks, 32);
    // A truncate inside the second cluster that keeps block 5 keeps the
    // cluster; one that cuts block 5 frees it.
    fs.setattr(f, SetAttr { size: Some(6 * 4096 - 100), ..Default::default() }).unwrap();
    fs.sync().unwrap();
    assert_eq!(free_blocks(&fs), free0 - 4);
    fs.setattr(f, SetAttr { size: Some(5 * 4096), ..Default::default() }).unwrap();
    fs.sync().unwrap();
    assert_eq!(free_blocks(&fs), free0, "nothing mapped: every cluster back");
    assert_eq!(fs.stat(f).unwrap().blocks, 0);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);

    // A cluster the kernel left partly mapped is reused by uext4.
    if let Some(why) = kernel_unavailable() {
        eprintln!("SKIP: kernel part: {why}");
        return;
    }
    {
        let m = KernelMount::new(&img, "").unwrap();
        let mut k = std::fs::File::create(m.path().join("k")).unwrap();
        std::io::Write::write_all(&mut k, &block(10)).unwrap();
        k.sync_all().unwrap();
        drop(k);
        m.unmount();
    }
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let k = fs.lookup(ROOT, b"k").unwrap();
    let before = free_blocks(&fs);
    fs.inodes().write(k, 4096, &block(11)).unwrap();
    fs.sync().unwrap();
    assert_eq!(free_blocks(&fs), before, "the kernel's cluster is reused");
    let mut want = block(10);
    want.extend_from_slice(&block(11));
    assert!(read_all(&fs, k) == want);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    let m = KernelMount::new(&img, "ro").unwrap();
    assert!(std::fs::read(m.path().join("k")).unwrap() == want, "the kernel reads uext4's block");
    m.unmount();
}

#[test]
fn bigalloc_shared_xattr_block_from_the_kernel() {
    // The kernel shares one xattr block (one cluster) between files with
    // the same attributes; uext4 unshares and frees it by reference.
    let Some((_d, img)) = mkfs(64, VARIANTS[1].1) else { return };
    if let Some(why) = kernel_unavailable() {
        eprintln!("SKIP: {why}");
        return;
    }
    if !rw_support::have("setfattr") {
        eprintln!("SKIP: setfattr not installed");
        return;
    }
    let free0 = Filesystem::open(&img).unwrap().statfs().free_blocks;
    {
        let m = KernelMount::new(&img, "").unwrap();
        for n in ["a", "b", "c"] {
            let p = m.path().join(n);
            std::fs::write(&p, pattern(3, 20_000)).unwrap();
            let st = std::process::Command::new("setfattr")
                .args(["-n", "user.shared", "-v"])
                .arg("0x".to_string() + &"ab".repeat(1500))
                .arg(&p)
                .status()
                .unwrap();
            assert!(st.success());
        }
        m.unmount();
    }
    fsck_clean(&img);
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let a = fs.lookup(ROOT, b"a").unwrap();
    fs.set_xattr(a, b"user.other", b"x", uext4::fs::XattrSetMode::Any).unwrap();
    fs.unlink(ROOT, b"b").unwrap();
    fs.sync().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    let mut fs = Filesystem::open_rw(&img).unwrap();
    fs.unlink(ROOT, b"a").unwrap();
    fs.unlink(ROOT, b"c").unwrap();
    fs.sync().unwrap();
    assert_eq!(free_blocks(&fs), free0, "every cluster back");
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}

#[test]
fn bigalloc_allocator_hands_out_clusters() {
    use std::sync::Arc;
    use uext4::alloc::{flags, AllocConfig, AllocRequest, Allocator};
    use uext4::device::{BlockDevice, FileDevice};
    use uext4::volume::Volume;
    use uext4::{FileBlock, PhysicalBlock};
    for (name, args, size) in VARIANTS {
        let Some((_d, img)) = mkfs(*size, args) else { return };
        let open = || {
            let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(&img, true).unwrap());
            let vol = Arc::new(Volume::open(dev, 4096).unwrap());
            Allocator::new(vol, AllocConfig::default()).unwrap()
        };
        let a = open();
        let r = a.cluster_ratio();
        let free0 = a.free_blocks();
        let mut got = Vec::new();
        for k in 0..40u64 {
            let meta = k % 5 == 0;
            let req = AllocRequest {
                inode: 12,
                logical: FileBlock(k * 7),
                len: 1 + (k as u32 * 3) % 40,
                flags: if meta { flags::METADATA } else { 0 },
                goal: PhysicalBlock(if k % 2 == 0 { 0 } else { 5000 }),
                ..Default::default()
            };
            let al = a.allocate(&req).unwrap();
            // Metadata too: directory blocks are asked for at their
            // logical block (tree and xattr blocks at 0).
            let off = k * 7 % r;
            assert_eq!(al.start.get() % r, off, "{name}: the logical offset in the cluster is kept");
            assert_eq!((al.start.get() + u64::from(al.len)) % r, 0, "{name}: whole clusters");
            assert!(u64::from(al.len) >= u64::from(req.len).min(r - off), "{name}: {al:?} for {req:?}");
            got.push((al.start.get() - off, u64::from(al.len) + off));
        }
        got.sort_unstable();
        for w in got.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "{name}: overlapping clusters {w:?}");
        }
        let used: u64 = got.iter().map(|g| g.1).sum();
        assert_eq!(a.free_blocks(), free0 - used, "{name}: free count in blocks");
        // Freeing one block of a cluster frees the cluster.
        for &(s, l) in &got {
            a.free(PhysicalBlock(s + l - 1), 1, None).unwrap();
            if l > r {
                a.free(PhysicalBlock(s), l - r, None).unwrap();
            }
        }
        assert_eq!(a.free_blocks(), free0, "{name}");
        a.flush().unwrap();
        drop(a);
        fsck_clean(&img);
    }
}

#[test]
fn bigalloc_file_across_groups() {
    // 32 MiB groups: a 70 MiB file spans three; punch and truncate across
    // group boundaries, unaligned to clusters.
    let Some((_d, img)) = mkfs(160, &["-b", "4096", "-O", "bigalloc", "-C", "16384", "-g", "2048"]) else {
        return;
    };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let free0 = free_blocks(&fs);
    let f = fs.create(ROOT, b"big", 0o644, 0, 0).unwrap().ino;
    let mut want = pattern(8, 70 << 20);
    for (k, chunk) in want.chunks(8 << 20).enumerate() {
        fs.inodes().write(f, (k as u64) * (8 << 20), chunk).unwrap();
    }
    let (p0, p1) = ((32u64 << 20) - 5000, (33u64 << 20) + 7000);
    fs.fallocate(f, FallocMode::PunchHole, p0, p1 - p0).unwrap();
    want[p0 as usize..p1 as usize].fill(0);
    let cut = (64u64 << 20) + 12_345;
    fs.setattr(f, SetAttr { size: Some(cut), ..Default::default() }).unwrap();
    want.truncate(cut as usize);
    fs.sync().unwrap();
    assert!(read_all(&fs, f) == want);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    if kernel_unavailable().is_none() {
        let m = KernelMount::new(&img, "ro").unwrap();
        assert!(std::fs::read(m.path().join("big")).unwrap() == want, "the kernel reads the file");
        m.unmount();
    }
    let mut fs = Filesystem::open_rw(&img).unwrap();
    fs.unlink(ROOT, b"big").unwrap();
    fs.sync().unwrap();
    assert_eq!(free_blocks(&fs), free0);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}

#[test]
fn bigalloc_large_directory() {
    // An htree directory over many clusters (its blocks fill each cluster
    // through the implied-cluster path), then emptied and removed.
    let Some((_d, img)) = mkfs(64, VARIANTS[2].1) else { return };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let free0 = free_blocks(&fs);
    let d = fs.mkdir(ROOT, b"many", 0o755, 0, 0).unwrap().ino;
    let name = |i: u32| format!("a-rather-long-file-name-to-fill-blocks-{i:05}");
    for i in 0..3000 {
        fs.create(d, name(i).as_bytes(), 0o644, 0, 0).unwrap();
    }
    fs.sync().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    if kernel_unavailable().is_none() {
        let m = KernelMount::new(&img, "ro").unwrap();
        assert_eq!(std::fs::read_dir(m.path().join("many")).unwrap().count(), 3000);
        m.unmount();
    }
    let mut fs = Filesystem::open_rw(&img).unwrap();
    for i in 0..3000 {
        fs.unlink(d, name(i).as_bytes()).unwrap();
    }
    fs.rmdir(ROOT, b"many").unwrap();
    fs.sync().unwrap();
    assert_eq!(free_blocks(&fs), free0);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}

/// Issue 23 item 8: a counter on disk that holds less than what is to be
/// taken from it (i_blocks below the clusters a truncate frees, a link
/// count of 0 on a name being removed) is corruption, reported as such
/// (EUCLEAN, `CorruptKind::Underflow`), never clamped at zero so that the
/// operation "succeeds" on a damaged count.
#[test]
fn counter_underflow_is_corruption_not_clamped() {
    if !rw_support::have("debugfs") || !rw_support::have("e2fsck") {
        eprintln!("SKIP: e2fsprogs not installed");
        return;
    }
    let Some((_d, img)) = mkfs(64, &["-b", "4096", "-O", "bigalloc", "-C", "65536"]) else { return };
    {
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let f = fs.create(ROOT, b"f", 0o644, 0, 0).unwrap().ino;
        // Three clusters.
        fs.write_direct(f, 0, &pattern(1, 3 * 65536)).unwrap();
        fs.create(ROOT, b"g", 0o644, 0, 0).unwrap();
        fs.unmount().unwrap();
    }
    // i_blocks of one cluster where the file holds three; no links on g.
    for cmd in ["sif /f blocks 128", "sif /g links_count 0"] {
        let out = std::process::Command::new("debugfs").args(["-w", "-R", cmd]).arg(&img).output().unwrap();
        assert!(out.status.success(), "{cmd}");
    }
    let underflow = |e: &uext4::Error, field: &str| {
        assert_eq!(e.errno(), libc::EUCLEAN, "{e}");
        let c = e.as_corruption().unwrap_or_else(|| panic!("not a corruption: {e}"));
        assert!(matches!(c.kind, uext4::CorruptKind::Underflow { field: f, .. } if f == field), "{e}");
    };
    {
        let fs = Filesystem::open_rw(&img).unwrap();
        let g = fs.resolve("/g").unwrap();
        let e = fs.unlink(ROOT, b"g").unwrap_err();
        underflow(&e, "i_links_count");
        assert_eq!(fs.resolve("/g").unwrap(), g, "the name stays");
        let f = fs.resolve("/f").unwrap();
        let e = fs.setattr(f, SetAttr { size: Some(0), ..Default::default() }).unwrap_err();
        underflow(&e, "i_blocks");
    }
    // What a recovery finds has only the damage debugfs made.
    {
        let mut fs = Filesystem::open_rw(&img).unwrap();
        fs.unmount().unwrap();
    }
    let out = std::process::Command::new("e2fsck").arg("-fn").arg(&img).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // e2fsck takes g (no links) for deleted: its dtime, entry and bitmap
    // bit follow from that. No cluster was freed under f.
    assert!(text.contains("i_blocks is 128, should be 384"), "{text}");
    assert!(text.contains("Deleted inode 13 has zero dtime"), "{text}");
    assert!(!text.contains("Block bitmap differences") && !text.contains("Free blocks count wrong"), "{text}");
}
