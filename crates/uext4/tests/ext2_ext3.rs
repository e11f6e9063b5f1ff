//! ext2 and ext3 read-write: block-mapped files (direct, single, double
//! and triple indirect blocks) written, overwritten, truncated to each
//! boundary and deleted; block-mapped directories grown; slow symlinks;
//! new files in an ext4 image that also holds block-mapped files stay
//! extent-mapped. Every image ends `e2fsck -fn` clean and, as root with
//! loop devices, the kernel reads back exactly what was written.

mod rw_support;

use rw_support::{debugfs, fsck_clean, have, kernel_unavailable, pattern, KernelMount};
use std::path::{Path, PathBuf};
use std::process::Command;
use uext4::inode_api::{FallocMode, SetAttr};
use uext4::Filesystem;

/// A fresh `kind` ("ext2"/"ext3") image of `size_mb` MiB with `bs`-byte
/// blocks; None (with a printed reason) without mke2fs.
fn mkfs_old(kind: &str, size_mb: u64, bs: u32) -> Option<(tempfile::TempDir, PathBuf)> {
    mkfs_old_with(kind, size_mb, bs, &[])
}

/// As [`mkfs_old`], with more mke2fs arguments.
fn mkfs_old_with(kind: &str, size_mb: u64, bs: u32, extra: &[&str]) -> Option<(tempfile::TempDir, PathBuf)> {
    if !have("mke2fs") || !have("e2fsck") {
        eprintln!("SKIP: e2fsprogs not installed");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    std::fs::File::create(&img).unwrap().set_len(size_mb << 20).unwrap();
    let out = Command::new("mke2fs")
        .args(["-q", "-F", "-t", kind, "-b", &bs.to_string()])
        .args(extra)
        .arg(&img)
        .output()
        .unwrap();
    assert!(out.status.success(), "mke2fs: {}", String::from_utf8_lossy(&out.stderr));
    Some((dir, img))
}

/// The configurations: (kind, block size).
const CONFIGS: [(&str, u32); 5] = [("ext2", 1024), ("ext3", 1024), ("ext3", 2048), ("ext2", 4096), ("ext3", 4096)];

/// The first logical blocks of the single, double and triple indirect
/// trees for a block size.
fn boundaries(bs: u32) -> [u64; 3] {
    let per = u64::from(bs) / 4;
    [12, 12 + per, 12 + per + per * per]
}

fn create(fs: &Filesystem, dir: u32, name: &str) -> u32 {
    fs.create(dir, name.as_bytes(), 0o644, 0, 0).unwrap().ino
}

fn read_all(fs: &Filesystem, ino: u32) -> Vec<u8> {
    let size = fs.stat(ino).unwrap().size;
    let mut buf = vec![0u8; size as usize];
    let mut off = 0;
    while off < buf.len() {
        let n = fs.inodes().read(ino, off as u64, &mut buf[off..]).unwrap();
        assert!(n > 0, "short read at {off} of {size}");
        off += n;
    }
    buf
}

/// Writes `data` at `off` into the model `m` (grown with zeros).
fn model_write(m: &mut Vec<u8>, off: u64, data: &[u8]) {
    let end = off as usize + data.len();
    if m.len() < end {
        m.resize(end, 0);
    }
    m[off as usize..end].copy_from_slice(data);
}

/// Checks a sparse file written as `pieces` (later ones over earlier
/// ones) through `read`: each piece with the bytes around it (holes read
/// as zeros).
fn check_pieces(pieces: &[(u64, Vec<u8>)], read: impl Fn(u64, &mut [u8]) -> usize) {
    let end = pieces.iter().map(|(o, p)| o + p.len() as u64).max().unwrap_or(0);
    for (off, piece) in pieces {
        let start = off.saturating_sub(300);
        let stop = (off + piece.len() as u64 + 300).min(end);
        let mut want = vec![0u8; (stop - start) as usize];
        for (o, p) in pieces {
            for (k, &byte) in p.iter().enumerate() {
                let at = o + k as u64;
                if (start..stop).contains(&at) {
                    want[(at - start) as usize] = byte;
                }
            }
        }
        let mut got = vec![0u8; want.len()];
        let mut done = 0;
        while done < got.len() {
            let n = read(start + done as u64, &mut got[done..]);
            assert!(n > 0, "short read at {}", start + done as u64);
            done += n;
        }
        assert!(got == want, "sparse file differs around offset {off}");
    }
}

/// `debugfs stat` of `path`: the map kind and the indirect levels used.
fn map_of(img: &Path, path: &str) -> String {
    debugfs(img, &format!("stat {path}"))
}

/// Kernel read-back: mounts `img` (a `fstype` image) read-only and compares the
/// files (sparse ones compared in full), symlinks and directory sizes.
fn kernel_check(
    img: &Path,
    fstype: &str,
    files: &[(String, Vec<u8>)],
    links: &[(String, Vec<u8>)],
    sparse: &[(u64, Vec<u8>)],
) {
    if let Some(why) = kernel_unavailable() {
        eprintln!("SKIP: kernel read-back: {why}");
        return;
    }
    // The ext4 driver serves ext2 and ext3 images (as distributions
    // configure it); `fstype` names the image in messages.
    let mnt = KernelMount::new(img, "ro")
        .unwrap_or_else(|e| panic!("kernel refused to mount {fstype} {}: {e}", img.display()));
    for (name, want) in files {
        let got = std::fs::read(mnt.path().join(name)).unwrap();
        assert!(&got == want, "kernel read of {name} differs ({} vs {} bytes)", got.len(), want.len());
    }
    for (name, target) in links {
        let got = std::fs::read_link(mnt.path().join(name)).unwrap();
        assert_eq!(got.as_os_str().as_encoded_bytes(), &target[..], "symlink {name}");
    }
    if !sparse.is_empty() {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(mnt.path().join("sparse")).unwrap();
        check_pieces(sparse, |off, buf| f.read_at(buf, off).unwrap());
        drop(f);
    }
    mnt.unmount();
}

#[test]
fn blockmapped_files_cross_every_indirect_boundary() {
    for (kind, bs) in CONFIGS {
        let Some((_d, img)) = mkfs_old(kind, 48, bs) else { return };
        let mut fs = Filesystem::open_rw(&img).unwrap_or_else(|e| panic!("{kind} {bs}: open rw: {e}"));
        let root = fs.root();
        let b = u64::from(bs);
        let [ind, dind, tind] = boundaries(bs);
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();

        // Small, and large across the single/double boundary (buffered).
        let small = create(&fs, root, "small");
        let data = pattern(1, 5000);
        fs.inodes().write(small, 0, &data).unwrap();
        files.push(("small".into(), data));
        let large = create(&fs, root, "large");
        let len = ((dind + 40) * b + 123) as usize;
        let data = pattern(2, len);
        fs.inodes().write(large, 0, &data).unwrap();
        files.push(("large".into(), data));

        // Direct writes across the single indirect boundary, then an
        // overwrite straddling it.
        let direct = create(&fs, root, "direct");
        let mut model = Vec::new();
        let d1 = pattern(3, (ind * b + 3 * b) as usize);
        fs.write_direct(direct, 0, &d1).unwrap();
        model_write(&mut model, 0, &d1);
        let d2 = pattern(4, (2 * b + 77) as usize);
        fs.write_direct(direct, (ind - 1) * b + 5, &d2).unwrap();
        model_write(&mut model, (ind - 1) * b + 5, &d2);
        files.push(("direct".into(), model));

        // Sparse (gigabytes at 4 KiB blocks: compared piece by piece):
        // pieces at the start of each tree, the double tree's second
        // subtree and the triple tree's second one, and an overwrite.
        let sparse = create(&fs, root, "sparse");
        let mut pieces: Vec<(u64, Vec<u8>)> = Vec::new();
        for (k, lblk) in
            [3, ind + 1, dind, dind + b / 4 + 2, tind, tind + (b / 4) * (b / 4) + 5].into_iter().enumerate()
        {
            pieces.push((lblk * b + 17, pattern(10 + k as u64, (b + 100) as usize)));
        }
        pieces.push((dind * b + 200, pattern(30, 64)));
        for (off, piece) in &pieces {
            fs.inodes().write(sparse, *off, piece).unwrap();
        }

        // Slow and fast symlinks; a subdirectory grown past its direct
        // blocks (into its single indirect block).
        let long_target = vec![b'x'; 200];
        fs.inodes().symlink(root, b"slow", &long_target, 0, 0).unwrap();
        fs.inodes().symlink(root, b"fast", b"small", 0, 0).unwrap();
        let sub = fs.mkdir(root, b"sub", 0o755, 0, 0).unwrap().ino;
        let names = (14 * b / 48) as usize + 10;
        for n in 0..names {
            let name = format!("entry-with-a-longish-name-{n:05}");
            create(&fs, sub, &name);
        }
        assert!(fs.stat(sub).unwrap().size > 12 * b, "{kind} {bs}: the directory stays within direct blocks");

        fs.fsync(large).unwrap();
        for (name, want) in &files {
            let ino = fs.lookup(root, name.as_bytes()).unwrap();
            assert!(read_all(&fs, ino) == *want, "{kind} {bs}: uext4 read of {name}");
        }
        check_pieces(&pieces, |off, buf| fs.inodes().read(sparse, off, buf).unwrap());
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);

        for name in ["small", "large", "sparse", "slow", "sub"] {
            let st = map_of(&img, name);
            assert!(!st.contains("EXTENTS"), "{kind} {bs}: {name} is extent-mapped:\n{st}");
        }
        assert!(map_of(&img, "large").contains("(DIND)"), "{kind} {bs}: large has no double indirect block");
        assert!(map_of(&img, "sparse").contains("(TIND)"), "{kind} {bs}: sparse has no triple indirect block");
        assert!(map_of(&img, "sub").contains("(IND)"), "{kind} {bs}: sub has no indirect block");

        // Read-only reopen sees the same, and so does the kernel.
        let fs = Filesystem::open(&img).unwrap();
        for (name, want) in &files {
            let ino = fs.lookup(fs.root(), name.as_bytes()).unwrap();
            assert!(read_all(&fs, ino) == *want, "{kind} {bs}: reopened read of {name}");
        }
        let sparse = fs.lookup(fs.root(), b"sparse").unwrap();
        check_pieces(&pieces, |off, buf| fs.inodes().read(sparse, off, buf).unwrap());
        assert_eq!(fs.read_dir_all(fs.lookup(fs.root(), b"sub").unwrap()).unwrap().len(), names + 2);
        drop(fs);
        kernel_check(&img, kind, &files, &[("slow".into(), long_target), ("fast".into(), b"small".to_vec())], &pieces);
    }
}

#[test]
fn truncate_to_each_boundary_and_delete() {
    for (kind, bs) in CONFIGS {
        let Some((_d, img)) = mkfs_old(kind, 32, bs) else { return };
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let root = fs.root();
        let b = u64::from(bs);
        let [ind, dind, tind] = boundaries(bs);
        let free0 = fs.statfs().free_blocks;
        let ino = create(&fs, root, "f");
        // Filled to a little past the double indirect boundary, plus a
        // block in the triple tree.
        let len = (dind + 3) * b;
        let mut model = pattern(5, len as usize);
        fs.inodes().write(ino, 0, &model).unwrap();
        let tail = pattern(6, 100);
        fs.inodes().write(ino, tind * b, &tail).unwrap();
        fs.fsync(ino).unwrap();
        for size in [tind * b + 1, dind * b + 1, dind * b, dind * b - 1, ind * b + 1, ind * b, ind * b - 7, 5 * b, 0] {
            fs.setattr(ino, SetAttr { size: Some(size), ..Default::default() }).unwrap();
            assert_eq!(fs.stat(ino).unwrap().size, size);
            if size == tind * b + 1 {
                // The dense part (the model) and the first tail byte.
                let mut one = [0u8; 1];
                fs.inodes().read(ino, tind * b, &mut one).unwrap();
                assert_eq!(one[0], tail[0]);
            } else {
                model.truncate(size as usize);
                assert!(read_all(&fs, ino) == model, "{kind} {bs}: read after truncate to {size}");
            }
            let blocks = fs.stat(ino).unwrap().blocks;
            fs.commit().unwrap();
            // The file is dense up to `len`, sparse past it.
            let want_data = size.min(len).div_ceil(b);
            // Data blocks plus at most the indirect blocks on the way.
            assert!(blocks * 512 >= want_data * b, "{kind} {bs}: {blocks} sectors for {size} bytes");
        }
        assert_eq!(fs.stat(ino).unwrap().blocks, 0, "{kind} {bs}: blocks left after truncate to 0");
        // Regrow across the boundaries, then delete while open (orphan),
        // and a second file by plain unlink.
        let data = pattern(7, ((dind + 2) * b) as usize);
        fs.inodes().write(ino, 0, &data).unwrap();
        let g = create(&fs, root, "g");
        fs.write_direct(g, 0, &pattern(8, ((ind + 5) * b) as usize)).unwrap();
        fs.fsync(ino).unwrap();
        fs.open_inode(ino).unwrap();
        fs.unlink(root, b"f").unwrap();
        fs.unlink(root, b"g").unwrap();
        // A directory grown into its single indirect block, emptied and
        // removed.
        let dir = fs.mkdir(root, b"dir", 0o755, 0, 0).unwrap().ino;
        let names: Vec<String> = (0..(14 * b / 48) + 10).map(|n| format!("entry-with-a-longish-name-{n:05}")).collect();
        for name in &names {
            create(&fs, dir, name);
        }
        assert!(fs.stat(dir).unwrap().size > 12 * b);
        for name in &names {
            fs.unlink(dir, name.as_bytes()).unwrap();
        }
        fs.rmdir(root, b"dir").unwrap();
        fs.close_inode(ino).unwrap();
        fs.commit().unwrap();
        assert_eq!(fs.statfs().free_blocks, free0, "{kind} {bs}: blocks leaked");
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
    }
}

/// fallocate on block-mapped files: punch hole works (blocks and emptied
/// indirect blocks freed, edges zeroed), every other mode is EOPNOTSUPP,
/// as ext4_fallocate.
#[test]
fn fallocate_on_blockmapped_files_punches_only() {
    for (kind, bs) in [("ext3", 1024u32), ("ext2", 4096)] {
        let Some((_d, img)) = mkfs_old(kind, 16, bs) else { return };
        let b = u64::from(bs);
        let [ind, dind, _] = boundaries(bs);
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let ino = create(&fs, fs.root(), "f");
        let mut model = pattern(80, ((dind + 2 * b / 4 + 3) * b) as usize);
        fs.inodes().write(ino, 0, &model).unwrap();
        fs.fsync(ino).unwrap();
        for mode in [FallocMode::Allocate, FallocMode::KeepSize, FallocMode::ZeroRange] {
            let e = fs.fallocate(ino, mode, 0, 1 << 20).unwrap_err();
            assert_eq!(e.errno(), libc::EOPNOTSUPP, "{kind} {bs} {mode:?}: {e}");
        }
        let before = fs.stat(ino).unwrap().blocks;
        // Unaligned holes: across the direct/single boundary, the whole
        // single indirect range (its block freed) and a whole double
        // indirect subtree plus parts of its neighbours.
        let holes = [(5 * b + 100, (ind + 3) * b), (ind * b, (b / 4) * b), ((dind + 10) * b + 1, (b / 4 + 20) * b)];
        for (off, len) in holes {
            fs.fallocate(ino, FallocMode::PunchHole, off, len).unwrap();
            let end = ((off + len) as usize).min(model.len());
            model[off as usize..end].fill(0);
        }
        assert!(read_all(&fs, ino) == model, "{kind} {bs}: contents after the punches");
        let after = fs.stat(ino).unwrap().blocks;
        // At least the data of the single indirect range and its block.
        assert!(before - after >= (b / 4 + 1) * (b / 512), "{kind} {bs}: {before} -> {after} sectors");
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        kernel_check(&img, kind, &[("f".into(), model)], &[], &[]);
    }
}

/// An ext3 image whose files debugfs wrote block-mapped, then given the
/// `extent` feature (as `tune2fs -O extent` does to convert to ext4):
/// the old files stay block-mapped as uext4 grows, truncates and deletes
/// them; new files are extent-mapped.
#[test]
fn ext4_image_with_blockmapped_files() {
    if !have("tune2fs") || !have("debugfs") {
        eprintln!("SKIP: e2fsprogs tools missing");
        return;
    }
    for bs in [1024u32, 4096] {
        let Some((d, img)) = mkfs_old("ext3", 32, bs) else { return };
        let b = u64::from(bs);
        let [_, dind, _] = boundaries(bs);
        let src = d.path().join("src");
        let old = pattern(40, ((dind + 5) * b) as usize);
        std::fs::write(&src, &old).unwrap();
        for name in ["old", "gone"] {
            let out = Command::new("debugfs")
                .arg("-w")
                .arg("-R")
                .arg(format!("write {} {name}", src.display()))
                .arg(&img)
                .output()
                .unwrap();
            assert!(out.status.success());
        }
        let out = Command::new("tune2fs").args(["-O", "extent"]).arg(&img).output().unwrap();
        assert!(out.status.success(), "tune2fs: {}", String::from_utf8_lossy(&out.stderr));
        assert!(map_of(&img, "old").contains("(DIND)"));

        let mut fs = Filesystem::open_rw(&img).unwrap();
        let root = fs.root();
        let ino = fs.lookup(root, b"old").unwrap();
        let mut model = old.clone();
        let more = pattern(41, (3 * b + 9) as usize);
        let at = model.len() as u64 + 2 * b;
        fs.inodes().write(ino, at, &more).unwrap();
        model_write(&mut model, at, &more);
        let keep = (dind - 1) * b + 3;
        fs.setattr(ino, SetAttr { size: Some(keep), ..Default::default() }).unwrap();
        model.truncate(keep as usize);
        fs.unlink(root, b"gone").unwrap();
        let new = create(&fs, root, "new");
        let data = pattern(42, (20 * b) as usize);
        fs.inodes().write(new, 0, &data).unwrap();
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        assert!(!map_of(&img, "old").contains("EXTENTS"), "the old file became extent-mapped");
        assert!(map_of(&img, "new").contains("EXTENTS"), "a new file in an ext4 image is not extent-mapped");
        kernel_check(&img, "ext4", &[("old".into(), model), ("new".into(), data)], &[], &[]);
    }
}

/// The kernel and uext4 take turns on ext2 and ext3 images: each reads
/// back exactly what the other wrote, then grows, overwrites and
/// truncates it and deletes the other's files.
#[test]
fn kernel_and_uext4_take_turns() {
    if let Some(why) = kernel_unavailable() {
        eprintln!("SKIP: {why}");
        return;
    }
    for (kind, bs) in [("ext3", 1024u32), ("ext2", 4096)] {
        let Some((_d, img)) = mkfs_old(kind, 32, bs) else { return };
        let b = u64::from(bs);
        let [ind, dind, _] = boundaries(bs);
        // uext4 first.
        let mut a = pattern(50, ((ind + 20) * b + 5) as usize);
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let ino = create(&fs, fs.root(), "a");
        fs.inodes().write(ino, 0, &a).unwrap();
        create(&fs, fs.root(), "doomed");
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        // The kernel reads it, appends to it, writes its own file across
        // the double indirect boundary and deletes one of uext4's.
        let k = pattern(51, ((dind + 10) * b + 7) as usize);
        let more = pattern(52, (3 * b) as usize);
        {
            use std::io::Write;
            let mnt = KernelMount::new(&img, "").unwrap_or_else(|e| panic!("{kind}: kernel mount: {e}"));
            assert!(std::fs::read(mnt.path().join("a")).unwrap() == a, "{kind} {bs}: kernel read of uext4's file");
            let mut f = std::fs::OpenOptions::new().append(true).open(mnt.path().join("a")).unwrap();
            f.write_all(&more).unwrap();
            drop(f);
            std::fs::write(mnt.path().join("k"), &k).unwrap();
            std::fs::remove_file(mnt.path().join("doomed")).unwrap();
            mnt.unmount();
        }
        a.extend_from_slice(&more);
        fsck_clean(&img);
        // uext4 reads both back, overwrites, truncates and deletes.
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let root = fs.root();
        let ai = fs.lookup(root, b"a").unwrap();
        let ki = fs.lookup(root, b"k").unwrap();
        assert!(read_all(&fs, ai) == a, "{kind} {bs}: uext4 read of the kernel's append");
        assert!(read_all(&fs, ki) == k, "{kind} {bs}: uext4 read of the kernel's file");
        assert!(fs.lookup(root, b"doomed").is_err());
        let over = pattern(53, (2 * b) as usize);
        fs.inodes().write(ki, ind * b - 9, &over).unwrap();
        let mut k2 = k.clone();
        model_write(&mut k2, ind * b - 9, &over);
        let keep = (ind + 7) * b + 1;
        fs.setattr(ki, SetAttr { size: Some(keep), ..Default::default() }).unwrap();
        k2.truncate(keep as usize);
        fs.unlink(root, b"a").unwrap();
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        kernel_check(&img, kind, &[("k".into(), k2)], &[], &[]);
    }
}

/// The oldest layouts: 128-byte inodes (no extra fields, no crtime) and
/// no `filetype` (directory entries without a type byte).
#[test]
fn old_layouts_128_byte_inodes_without_filetype() {
    for (kind, bs) in [("ext2", 4096u32), ("ext3", 1024)] {
        let Some((_d, img)) = mkfs_old_with(kind, 16, bs, &["-I", "128", "-O", "^filetype"]) else { return };
        let b = u64::from(bs);
        let [_, dind, _] = boundaries(bs);
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let root = fs.root();
        let f = create(&fs, root, "f");
        let data = pattern(60, ((dind + 2) * b) as usize);
        fs.inodes().write(f, 0, &data).unwrap();
        let d = fs.mkdir(root, b"d", 0o755, 0, 0).unwrap().ino;
        for n in 0..40 {
            create(&fs, d, &format!("file-{n}"));
        }
        fs.inodes().symlink(d, b"up", b"../f", 0, 0).unwrap();
        fs.unlink(d, b"file-7").unwrap();
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        kernel_check(&img, kind, &[("f".into(), data)], &[("d/up".into(), b"../f".to_vec())], &[]);
    }
}

/// Buffered data filling the image: the indirect blocks writeback adds
/// must still find room (the write is refused or cut short up front,
/// never lost at writeback), and every byte accepted reads back.
#[test]
fn buffered_writes_fill_the_image() {
    for (kind, bs) in [("ext2", 1024u32), ("ext3", 1024)] {
        let Some((_d, img)) = mkfs_old(kind, 16, bs) else { return };
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let root = fs.root();
        let mut files = Vec::new();
        let mut full = false;
        'fill: for n in 0..4 {
            let name = format!("big{n}");
            let ino = create(&fs, root, &name);
            let mut model = Vec::new();
            loop {
                let chunk = pattern(70 + model.len() as u64, 256 << 10);
                match fs.inodes().write(ino, model.len() as u64, &chunk) {
                    Ok(k) if k > 0 => model.extend_from_slice(&chunk[..k]),
                    Ok(_) => {
                        full = true;
                        files.push((name, model));
                        break 'fill;
                    }
                    Err(e) if e.errno() == libc::ENOSPC => {
                        full = true;
                        files.push((name, model));
                        break 'fill;
                    }
                    Err(e) => panic!("{kind}: write: {e}"),
                }
                if model.len() > 6 << 20 {
                    break;
                }
            }
            files.push((name, model));
        }
        assert!(full, "{kind} {bs}: the image never filled up");
        fs.sync().unwrap_or_else(|e| panic!("{kind} {bs}: writeback failed on a full image: {e}"));
        for (name, want) in &files {
            let ino = fs.lookup(root, name.as_bytes()).unwrap();
            assert!(read_all(&fs, ino) == *want, "{kind} {bs}: {name} after writeback");
        }
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        kernel_check(&img, kind, &files, &[], &[]);
    }
}
