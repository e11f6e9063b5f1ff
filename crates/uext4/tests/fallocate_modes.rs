//! fallocate's COLLAPSE_RANGE and INSERT_RANGE and copy_file_range
//! through the library: random sequences against an in-memory model
//! (with reopens, on fragmented files whose extent trees have several
//! leaves), the kernel's EINVAL/EOPNOTSUPP/EFBIG rules, crash points
//! across a collapse and an insert, and a kernel read-back of the results.

mod rw_support;

use rw_support::{fsck_clean, have, kernel_read_back, mkfs, open_recording, open_rw_reserved, pattern, Rng};
use std::path::Path;
use std::sync::Arc;
use uext4::inode_api::FallocMode;
use uext4::{Error, Filesystem};

/// Reads all of `ino` and compares it with `want`.
fn check(fs: &Filesystem, ino: u32, want: &[u8], what: &str) {
    assert_eq!(fs.stat(ino).unwrap().size, want.len() as u64, "{what}: size");
    let got = fs.inodes().read_all(ino).unwrap();
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
        panic!("{what}: contents differ first at byte {at}");
    }
}

/// A file of `len` bytes with data runs, holes and preallocated ranges
/// every few blocks (many extents), written buffered (some of it still
/// in the page cache); returns its inode and contents.
fn patchy_file(fs: &Filesystem, name: &[u8], len: u64, bs: u64, seed: u64) -> (u32, Vec<u8>) {
    let ino = fs.create(fs.root(), name, 0o644, 0, 0).unwrap().ino;
    let mut model = vec![0u8; len as usize];
    let mut rng = Rng(seed | 1);
    let mut pos = 0;
    while pos < len {
        let n = (rng.below(4) + 1) * bs;
        let n = n.min(len - pos);
        match rng.below(3) {
            0 => {
                let d = pattern(rng.next(), n as usize);
                assert_eq!(fs.inodes().write(ino, pos, &d).unwrap(), n as usize);
                model[pos as usize..(pos + n) as usize].copy_from_slice(&d);
            }
            1 => fs.fallocate(ino, FallocMode::KeepSize, pos, n).unwrap(),
            _ => {}
        }
        pos += n + bs;
    }
    if fs.stat(ino).unwrap().size < len {
        fs.setattr(ino, uext4::inode_api::SetAttr { size: Some(len), ..Default::default() }).unwrap();
    }
    (ino, model)
}

/// Random collapses, inserts, writes and punches on one file, checked
/// against the model after each (reopening now and then); e2fsck and the
/// kernel read back the result.
fn random_shifts(args: &[&str], seed: u64) {
    let Some((_d, img)) = mkfs(48, args) else { return };
    let mut fs = open_rw_reserved(&img);
    let bs = fs.block_size() as u64;
    let unit = fs.superblock().cluster_size().max(bs);
    let (ino, mut model) = patchy_file(&fs, b"f", 600 * bs, bs, seed);
    check(&fs, ino, &model, "initial");
    let mut rng = Rng(seed.wrapping_mul(31) | 1);
    for step in 0..60 {
        let size = model.len() as u64;
        let units = size / unit;
        let what = format!("seed {seed} step {step}");
        match rng.below(5) {
            0 | 1 if units > 2 => {
                let off = rng.below(units - 1) * unit;
                let len = (rng.below((units - off / unit - 1).min(40)) + 1) * unit;
                fs.fallocate(ino, FallocMode::CollapseRange, off, len).unwrap_or_else(|e| panic!("{what}: {e}"));
                model.drain(off as usize..(off + len) as usize);
            }
            2 if size < 4 << 20 => {
                let off = rng.below(units.max(1)) * unit;
                let len = (rng.below(40) + 1) * unit;
                fs.fallocate(ino, FallocMode::InsertRange, off, len).unwrap_or_else(|e| panic!("{what}: {e}"));
                model.splice(off as usize..off as usize, std::iter::repeat_n(0u8, len as usize));
            }
            3 => {
                let off = rng.below(size + bs);
                let d = pattern(rng.next(), rng.below(3 * bs) as usize + 1);
                fs.inodes().write(ino, off, &d).unwrap();
                let end = off as usize + d.len();
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[off as usize..end].copy_from_slice(&d);
            }
            _ => {
                let off = rng.below(size.max(1));
                let len = rng.below(8 * bs) + 1;
                fs.fallocate(ino, FallocMode::PunchHole, off, len).unwrap();
                let e = (off + len).min(size) as usize;
                model[off as usize..e].fill(0);
            }
        }
        check(&fs, ino, &model, &what);
        if step % 20 == 19 {
            fs.unmount().unwrap();
            drop(fs);
            fs = open_rw_reserved(&img);
            check(&fs, ino, &model, &format!("{what}, reopened"));
        }
    }
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    kernel_read_back(&img, &[("f", model)]);
}

#[test]
fn random_collapse_insert_1k() {
    random_shifts(&["-b", "1024"], 7);
}

#[test]
fn random_collapse_insert_4k() {
    random_shifts(&["-b", "4096"], 11);
}

#[test]
fn random_collapse_insert_bigalloc() {
    random_shifts(&["-b", "1024", "-O", "bigalloc", "-C", "4096"], 13);
}

fn errno(r: uext4::Result<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => e.errno(),
    }
}

/// The kernel's refusals: unaligned ranges and a collapse reaching the
/// end (EINVAL), an insert at or past the end (EINVAL), past the largest
/// file (EFBIG); nothing changed by any of them.
#[test]
fn collapse_insert_rules() {
    let Some((_d, img)) = mkfs(16, &["-b", "4096"]) else { return };
    let mut fs = open_rw_reserved(&img);
    let ino = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    let data = pattern(3, 40960);
    fs.inodes().write(ino, 0, &data).unwrap();
    let cases: [(FallocMode, u64, u64, i32); 8] = [
        (FallocMode::CollapseRange, 100, 4096, libc::EINVAL),
        (FallocMode::CollapseRange, 4096, 100, libc::EINVAL),
        (FallocMode::CollapseRange, 4096, 36864, libc::EINVAL),
        (FallocMode::CollapseRange, 40960, 4096, libc::EINVAL),
        (FallocMode::CollapseRange, 0, 0, libc::EINVAL),
        (FallocMode::InsertRange, 40960, 4096, libc::EINVAL),
        (FallocMode::InsertRange, 8192, 1000, libc::EINVAL),
        (FallocMode::InsertRange, 0, 1 << 60, libc::EFBIG),
    ];
    for (mode, off, len, want) in cases {
        assert_eq!(errno(fs.fallocate(ino, mode, off, len)), want, "{mode:?} {off} {len}");
        check(&fs, ino, &data, &format!("after the refused {mode:?} {off} {len}"));
    }
    let dir = fs.mkdir(fs.root(), b"d", 0o755, 0, 0).unwrap().ino;
    assert_ne!(errno(fs.fallocate(dir, FallocMode::InsertRange, 0, 4096)), 0);
    // Collapse just short of the end, insert at the last block.
    fs.fallocate(ino, FallocMode::CollapseRange, 0, 36864).unwrap();
    check(&fs, ino, &data[36864..], "collapse to one block");
    fs.fallocate(ino, FallocMode::InsertRange, 0, 8192).unwrap();
    let mut want = vec![0u8; 8192];
    want.extend_from_slice(&data[36864..]);
    check(&fs, ino, &want, "insert before it");
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}

/// As ext4_fallocate: a block-mapped file only has holes punched.
#[test]
fn collapse_insert_block_mapped_eopnotsupp() {
    let Some((_d, img)) = mkfs(16, &["-b", "1024", "-O", "^extent,^64bit,^flex_bg"]) else { return };
    let mut fs = open_rw_reserved(&img);
    let ino = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    let data = pattern(5, 20480);
    fs.inodes().write(ino, 0, &data).unwrap();
    for mode in [FallocMode::CollapseRange, FallocMode::InsertRange] {
        assert_eq!(errno(fs.fallocate(ino, mode, 1024, 1024)), libc::EOPNOTSUPP, "{mode:?}");
    }
    check(&fs, ino, &data, "block-mapped, unchanged");
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}

/// Every crash point across a collapse or an insert on a file of
/// 1,200 extents (a two-level tree, several handles): the image recovers clean, the
/// file has its old or its new size, and after the last commit the new
/// contents.
fn crash_shift(insert: bool) {
    if !have("e2fsck") {
        eprintln!("SKIP: e2fsck not installed");
        return;
    }
    let Some((_d, img0)) = mkfs(16, &["-b", "1024"]) else { return };
    let base = std::fs::read(&img0).unwrap();
    let (dev, fs) = open_recording(&base);
    let bs = 1024;
    let (ino, mut model) = striped_file(&fs, 1200, bs);
    fs.commit().unwrap();
    let old = model.len() as u64;
    let start = dev.events();
    if insert {
        fs.fallocate(ino, FallocMode::InsertRange, 3 * bs, 5 * bs).unwrap();
        model.splice(3 * bs as usize..3 * bs as usize, std::iter::repeat_n(0u8, 5 * bs as usize));
    } else {
        fs.fallocate(ino, FallocMode::CollapseRange, 2 * bs, 7 * bs).unwrap();
        model.drain(2 * bs as usize..9 * bs as usize);
    }
    fs.commit().unwrap();
    let end = dev.events();
    std::mem::forget(fs);
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("crash.img");
    let n = end - start;
    let points: Vec<usize> =
        if n <= 24 { (start..=end).collect() } else { (0..=24).map(|k| start + n * k / 24).collect() };
    for p in points {
        for keep in [true, false] {
            let what = format!("insert {insert}: crash at {p} ({start}..={end}), keep {keep}");
            std::fs::write(&img, dev.crash_image(p, |_| keep)).unwrap();
            let mut fs = Filesystem::open_rw(&img).unwrap_or_else(|e| panic!("{what}: open: {e}"));
            let size = fs.stat(ino).unwrap().size;
            assert!(size == old || size == model.len() as u64, "{what}: size {size}");
            if p == end {
                check(&fs, ino, &model, &what);
            }
            fs.unmount().unwrap();
            drop(fs);
            fsck_clean(&img);
        }
    }
}

#[test]
fn crash_points_collapse() {
    crash_shift(false);
}

#[test]
fn crash_points_insert() {
    crash_shift(true);
}

/// copy_file_range: the same bytes as a read/write copy (data, holes,
/// preallocated ranges, a destination that held data where the source
/// has holes, a copy ending in a hole past the destination's end), cut
/// at the source's end, EINVAL for overlapping ranges of one file.
#[test]
fn copy_file_range_matches_read_write() {
    let Some((_d, img)) = mkfs(32, &["-b", "4096"]) else { return };
    let mut fs = open_rw_reserved(&img);
    let bs = 4096;
    let (src, smodel) = patchy_file(&fs, b"src", 300 * bs, bs, 5);
    let (dst, mut dmodel) = patchy_file(&fs, b"dst", 100 * bs, bs, 9);
    let dst_full = pattern(77, 50 * bs as usize);
    fs.inodes().write(dst, 0, &dst_full).unwrap();
    dmodel[..dst_full.len()].copy_from_slice(&dst_full);
    let mut rng = Rng(99);
    for step in 0..25 {
        let off_in = rng.below(smodel.len() as u64 + bs);
        let off_out = rng.below(dmodel.len() as u64 + 4 * bs);
        let len = rng.below(60 * bs) + 1;
        let got = fs.copy_file_range(src, off_in, dst, off_out, len).unwrap();
        let count = (smodel.len() as u64).saturating_sub(off_in).min(len);
        assert_eq!(got, count, "step {step}: bytes copied");
        if count > 0 {
            let end = (off_out + count) as usize;
            if dmodel.len() < end {
                dmodel.resize(end, 0);
            }
            dmodel[off_out as usize..end].copy_from_slice(&smodel[off_in as usize..(off_in + count) as usize]);
        }
        check(&fs, dst, &dmodel, &format!("step {step}"));
    }
    check(&fs, src, &smodel, "source unchanged");
    // One file: apart is fine, overlapping is EINVAL (also by one byte).
    let part = smodel[..10000].to_vec();
    assert_eq!(fs.copy_file_range(src, 0, src, 400 * bs, 10000).unwrap(), 10000);
    assert_eq!(fs.inodes().read_all(src).unwrap()[400 * bs as usize..][..10000], part[..]);
    for (a, b) in [(0, 9999), (9999, 0), (bs, bs)] {
        let r = fs.copy_file_range(src, a, src, b, 10000);
        assert!(matches!(r, Err(Error::Invalid(_))), "overlap {a} {b}: {r:?}");
    }
    // Past the source's end: nothing.
    assert_eq!(fs.copy_file_range(dst, 1 << 30, src, 0, 100).unwrap(), 0);
    let smodel = fs.inodes().read_all(src).unwrap();
    let dmodel = fs.inodes().read_all(dst).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    kernel_read_back(&img, &[("src", smodel), ("dst", dmodel)]);
}

/// An insert then a collapse on a file whose data is still in the page
/// cache only: the shifted contents include it (written back first).
#[test]
fn shifts_see_buffered_data() {
    let Some((_d, img)) = mkfs(16, &["-b", "1024"]) else { return };
    let mut fs = open_rw_reserved(&img);
    let ino = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    let data = pattern(8, 64 << 10);
    fs.inodes().write(ino, 0, &data).unwrap();
    // Cache it, then change it again (dirty pages over written blocks).
    assert_eq!(fs.inodes().read_all(ino).unwrap(), data);
    let patch = pattern(9, 3000);
    fs.inodes().write(ino, 5000, &patch).unwrap();
    let mut model = data.clone();
    model[5000..8000].copy_from_slice(&patch);
    fs.fallocate(ino, FallocMode::InsertRange, 4096, 2048).unwrap();
    model.splice(4096..4096, std::iter::repeat_n(0u8, 2048));
    check(&fs, ino, &model, "after insert");
    fs.inodes().write(ino, 4096, b"hello").unwrap();
    model[4096..4101].copy_from_slice(b"hello");
    fs.fallocate(ino, FallocMode::CollapseRange, 1024, 2048).unwrap();
    model.drain(1024..3072);
    check(&fs, ino, &model, "after collapse");
    fs.unmount().unwrap();
    drop(fs);
    check_reopen(&img, ino, &model);
}

fn check_reopen(img: &Path, ino: u32, model: &[u8]) {
    let fs = Arc::new(open_rw_reserved(img));
    check(&fs, ino, model, "reopened");
    drop(fs);
    fsck_clean(img);
}

/// File "f" with `n` one-block extents, every other block written
/// (an extent tree two levels deep with 1 KiB blocks and 900 or more);
/// returns its inode and contents.
fn striped_file(fs: &Filesystem, n: u64, bs: u64) -> (u32, Vec<u8>) {
    let ino = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
    let mut model = vec![0u8; ((2 * n - 1) * bs) as usize];
    for k in 0..n {
        let d = pattern(k, bs as usize);
        fs.write_direct(ino, 2 * k * bs, &d).unwrap();
        model[(2 * k * bs) as usize..((2 * k + 1) * bs) as usize].copy_from_slice(&d);
    }
    (ino, model)
}

/// Depth of `ino`'s extent tree (eh_depth in its root).
fn depth(fs: &Filesystem, ino: u32) -> u16 {
    let b = fs.inode(ino).unwrap().block;
    u16::from_le_bytes([b[6], b[7]])
}

/// Shifts through a tree two index levels deep (1 KiB blocks, one
/// extent per written block), up front and near the end.
#[test]
fn shifts_in_a_deep_tree() {
    let Some((_d, img)) = mkfs(16, &["-b", "1024"]) else { return };
    let mut fs = open_rw_reserved(&img);
    let bs = 1024u64;
    let (ino, mut model) = striped_file(&fs, 900, bs);
    assert!(depth(&fs, ino) >= 2, "depth {}", depth(&fs, ino));
    let ops = [(false, 3, 1), (true, 0, 1), (false, 1, 5), (true, 1700, 3), (false, 1500, 100), (true, 10, 333)];
    for (insert, b, nb) in ops {
        let (off, len) = (b * bs, nb * bs);
        let mode = if insert { FallocMode::InsertRange } else { FallocMode::CollapseRange };
        fs.fallocate(ino, mode, off, len).unwrap();
        if insert {
            model.splice(off as usize..off as usize, std::iter::repeat_n(0u8, len as usize));
        } else {
            model.drain(off as usize..(off + len) as usize);
        }
        check(&fs, ino, &model, &format!("{mode:?} {b}+{nb}"));
    }
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    kernel_read_back(&img, &[("f", model)]);
}
