//! The largest file size: the kernel's ext4_max_size (extent-mapped files)
//! and ext4_max_bitmap_size (block-mapped), per block size and huge_file.
//! A file at the limit must pass e2fsck and the kernel's inode checks
//! (it refuses "bad i_size value" past them); anything past it is EFBIG.

mod rw_support;

use rw_support::{fsck_clean, have, mkfs, KernelMount};
use std::process::Command;
use uext4::inode_api::{FallocMode, SetAttr};
use uext4::{Error, Filesystem};

/// The kernel's limits, computed independently of the library: extent
/// files end at logical block 2^32 - 2; without huge_file i_blocks (2^32
/// sectors) caps both kinds.
fn expected(bs: u64, huge: bool, extents: bool) -> u64 {
    match (bs, huge, extents) {
        (1024, true, true) => ((1u64 << 32) - 1) * 1024,
        (4096, true, true) => ((1u64 << 32) - 1) * 4096,
        (4096, false, true) => (((1u64 << 32) - 1) >> 3) << 12,
        // 12 direct + 256 + 256^2 + 256^3 blocks.
        (1024, true, false) => (12 + 256 + 65_536 + 16_777_216) * 1024,
        // 12 + 1024 + 1024^2 + 1024^3 blocks (the 4 TiB of ext3).
        (4096, true, false) => 4_402_345_721_856,
        // 2^29 - 1 blocks of i_blocks, less the indirect blocks mapping them.
        (4096, false, false) => {
            let upper = (1u64 << 29) - 1;
            let rest = upper - 12 - 1024 - 1024 * 1024;
            let meta = 1 + (1 + 1024) + 1 + rest.div_ceil(1024) + rest.div_ceil(1024 * 1024);
            (upper - meta) * 4096
        }
        _ => unreachable!(),
    }
}

fn efbig<T: std::fmt::Debug>(r: uext4::Result<T>) {
    match r {
        Err(e @ Error::FileTooBig(_)) => assert_eq!(e.errno(), libc::EFBIG),
        other => panic!("expected EFBIG, got {other:?}"),
    }
}

/// Mounts `img` read-only in the kernel and returns the size it reports
/// for each of `names` and the last byte of each (None when skipped).
fn kernel_sizes(img: &std::path::Path, names: &[&str]) -> Option<Vec<(u64, Option<u8>)>> {
    if !rw_support::require_loop_mount() {
        return None;
    }
    let mnt = KernelMount::new(img, "ro").unwrap_or_else(|e| panic!("kernel refused {}: {e}", img.display()));
    let mut out = Vec::new();
    for n in names {
        use std::io::{Read, Seek, SeekFrom};
        use std::os::unix::fs::MetadataExt;
        // The kernel's iget validates i_size: this fails with EFSCORRUPTED
        // ("bad i_size value") on an inode past the limit.
        let p = mnt.path().join(n);
        let size = std::fs::metadata(&p).unwrap_or_else(|e| panic!("kernel stat of {n}: {e}")).size();
        let mut f = std::fs::File::open(&p).unwrap();
        let last = if size > 0 {
            f.seek(SeekFrom::Start(size - 1)).unwrap();
            let mut b = [0u8; 1];
            f.read_exact(&mut b).unwrap();
            Some(b[0])
        } else {
            None
        };
        out.push((size, last));
    }
    Some(out)
}

/// A 32 MiB image with `bs`-byte blocks, with or without huge_file.
fn image(bs: u64, huge: bool) -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    let bs_arg = bs.to_string();
    let mut args = vec!["-b", bs_arg.as_str()];
    if !huge {
        args.extend(["-O", "^huge_file"]);
    }
    mkfs(32, &args)
}

#[test]
fn extent_files_stop_at_the_kernel_limit() {
    for (bs, huge) in [(1024u64, true), (4096, true), (4096, false)] {
        let Some((_d, img)) = image(bs, huge) else { return };
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let max = expected(bs, huge, true);
        assert_eq!(fs.superblock().max_file_size(true), max, "bs {bs} huge {huge}");
        let a = fs.create(2, b"written", 0o644, 0, 0).unwrap().ino;
        // The last byte is writable; the next one is not, and a write
        // across the limit is cut short at it.
        assert_eq!(fs.inodes().write(a, max - 1, b"x").unwrap(), 1);
        efbig(fs.inodes().write(a, max, b"y"));
        assert_eq!(fs.inodes().write(a, max - 3, b"abcdef").unwrap(), 3);
        assert_eq!(fs.write_direct(a, max - 2, &vec![7u8; bs as usize]).unwrap(), 2);
        efbig(fs.write_direct(a, max, &vec![7u8; bs as usize]));
        fs.commit().unwrap();
        assert_eq!(fs.stat(a).unwrap().size, max);
        // Truncate and fallocate: up to the limit, not one byte past.
        let t = fs.create(2, b"truncated", 0o644, 0, 0).unwrap().ino;
        efbig(fs.setattr(t, SetAttr { size: Some(max + 1), ..Default::default() }));
        fs.setattr(t, SetAttr { size: Some(max), ..Default::default() }).unwrap();
        let f = fs.create(2, b"fallocated", 0o644, 0, 0).unwrap().ino;
        efbig(fs.fallocate(f, FallocMode::KeepSize, max - bs, bs + 1));
        efbig(fs.fallocate(f, FallocMode::Allocate, max, 1));
        fs.fallocate(f, FallocMode::Allocate, max - bs, bs).unwrap();
        assert_eq!(fs.stat(f).unwrap().size, max);
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        if let Some(k) = kernel_sizes(&img, &["written", "truncated", "fallocated"]) {
            assert_eq!(k[0], (max, Some(7)), "bs {bs} huge {huge}");
            assert_eq!(k[1], (max, Some(0)));
            assert_eq!(k[2], (max, Some(0)));
        }
    }
}

#[test]
fn block_mapped_files_stop_at_the_bitmap_limit() {
    if !have("debugfs") {
        eprintln!("SKIP: debugfs not installed");
        return;
    }
    for (bs, huge) in [(1024u64, true), (4096, true), (4096, false)] {
        let Some((_d, img)) = image(bs, huge) else { return };
        // An empty block-mapped file: an extent inode with its flag and
        // empty extent header cleared.
        let mut cmds = String::from("write /dev/null bm\nsif bm flags 0\n");
        for i in 0..15 {
            cmds.push_str(&format!("sif bm block[{i}] 0\n"));
        }
        let script = img.with_extension("cmds");
        std::fs::write(&script, cmds).unwrap();
        let out = Command::new("debugfs").arg("-w").arg("-f").arg(&script).arg(&img).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let max = expected(bs, huge, false);
        let mut fs = Filesystem::open_rw(&img).unwrap();
        assert_eq!(fs.superblock().max_file_size(false), max, "bs {bs} huge {huge}");
        let ino = fs.resolve("/bm").unwrap();
        efbig(fs.setattr(ino, SetAttr { size: Some(max + 1), ..Default::default() }));
        fs.setattr(ino, SetAttr { size: Some(max), ..Default::default() }).unwrap();
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        if let Some(k) = kernel_sizes(&img, &["bm"]) {
            assert_eq!(k[0], (max, Some(0)), "bs {bs} huge {huge}");
        }
    }
}
