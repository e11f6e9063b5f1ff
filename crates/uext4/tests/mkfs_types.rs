//! `uext4 mkfs -t ext2|ext3`, `-O ^extent`, `-O resize_inode` and `-O
//! bigalloc -C`: the images against mke2fs's of the same options, clean,
//! written by uext4 and the kernel.

mod mkfs_support;
mod rw_support;

use mkfs_support::{
    dumpe2fs_features, dumpe2fs_fields, dumpe2fs_groups, mke2fs_image, set, with, write_and_cross_check, GEOMETRY,
};
use rw_support::{fsck_clean, have};
use std::path::Path;
use std::process::Command;
use uext4::mkfs::{mkfs_file, Layout, MkfsFeatures, MkfsOptions};
use uext4::Filesystem;

/// `-t ext2`, `-t ext3`, `-O ^extent,^64bit` and `-O resize_inode`: the
/// features, geometry (reserved GDT blocks included) and lost+found size
/// of mke2fs's image of the same type and size, block-mapped special
/// files (the journal through a double indirect block with 1 KiB
/// blocks), every group initialised without uninit_bg, the resize inode
/// as mke2fs's (its size and block count), and for plain ext2/ext3 the
/// very same groups (metadata, free blocks and inodes); clean, written by
/// uext4 and the kernel.
#[test]
fn old_types_match_mke2fs() {
    if !have("e2fsck") || !have("dumpe2fs") || !have("mke2fs") || !have("debugfs") {
        eprintln!("SKIP: e2fsprogs not installed");
        return;
    }
    assert!(MkfsFeatures::for_type("ext5").unwrap_err().to_string().contains("ext5"));
    let e = MkfsOptions { size: 64 << 20, features: with("^extent"), ..Default::default() };
    assert!(Layout::compute(&e).unwrap_err().to_string().contains("64bit needs extent"));
    let dir = tempfile::tempdir().unwrap();
    for (ty, list, bs, mb) in [
        ("ext2", "", 1024, 64),
        ("ext3", "", 1024, 64),
        ("ext3", "", 4096, 200),
        ("ext2", "", 4096, 48),
        ("ext4", "^extent,^64bit,resize_inode", 1024, 64),
        ("ext3", "^has_journal", 2048, 64),
        ("ext2", "^resize_inode", 1024, 32),
        ("ext4", "resize_inode", 4096, 300),
        ("ext4", "resize_inode,^metadata_csum,^flex_bg,^uninit_bg", 1024, 64),
    ] {
        let what = format!("-t {ty} -O {list:?} -b {bs}");
        let mut features = MkfsFeatures::for_type(ty).unwrap();
        features.apply(list).unwrap();
        let opts = MkfsOptions { size: mb << 20, block_size: Some(bs), features, ..Default::default() };
        let img = dir.path().join("t.img");
        mkfs_file(&img, &opts).unwrap_or_else(|e| panic!("{what}: {e}"));
        let bs_s = bs.to_string();
        let mut args = vec!["-t", ty, "-b", &bs_s];
        // This mke2fs's ext4 has resize_inode already.
        let theirs_list: String =
            list.split(',').filter(|f| *f != "resize_inode" && !f.is_empty()).collect::<Vec<_>>().join(",");
        if !theirs_list.is_empty() {
            args.extend(["-O", &theirs_list]);
        }
        let (mut want, theirs) = mke2fs_image(dir.path(), &args, mb);
        if ty == "ext4" {
            // Upstream's defaults beyond this mke2fs.conf.
            want.insert("orphan_file".into());
            if !list.contains("^metadata_csum") {
                want.insert("metadata_csum_seed".into());
            }
        }
        assert_eq!(dumpe2fs_features(&img), want, "{what}");
        let ours = dumpe2fs_fields(&img);
        for k in GEOMETRY {
            assert_eq!(ours.get(k), theirs.get(k), "{what}: {k}");
        }
        fsck_clean(&img);
        let lpf_size = |img: &Path| rw_support::debugfs(img, "stat /lost+found");
        let size_of =
            |s: String| s.split("Size: ").nth(1).and_then(|t| t.split_whitespace().next()).map(str::to_string);
        let theirs_img = dir.path().join("their.img");
        Command::new("mke2fs").args(["-q", "-F"]).args(&args).arg(&theirs_img).arg(format!("{mb}M")).status().unwrap();
        if !features.extent || bs > 1024 {
            // (uext4's extent-mapped lost+found of 1 KiB blocks is 16 KiB,
            // as before; mke2fs stops at 12 blocks.)
            assert_eq!(size_of(lpf_size(&img)), size_of(lpf_size(&theirs_img)), "{what}: lost+found");
        }
        let resize = |img: &Path| {
            let s = rw_support::debugfs(img, "stat <7>");
            s.lines()
                .filter(|l| l.contains("Size:") || l.contains("Blockcount:"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(resize(&img), resize(&theirs_img), "{what}: resize inode");
        if list.is_empty() {
            // Group by group the same layout and free space as mke2fs's.
            assert_eq!(dumpe2fs_groups(&img), dumpe2fs_groups(&theirs_img), "{what}: groups");
        }
        std::fs::remove_file(&theirs_img).unwrap();
        let fs = Filesystem::open(&img).unwrap();
        for ino in [2, 8, 11, 12] {
            if let Ok(st) = fs.inodes().stat(ino) {
                if st.nlink > 0 && !features.extent {
                    assert_eq!(st.flags & uext4::format::inode::FL_EXTENTS, 0, "{what}: inode {ino} extent-mapped");
                }
            }
        }
        drop(fs);
        // The kernel's ext3 needs a journal.
        let fstype = if list.contains("^has_journal") { "ext2" } else { ty };
        write_and_cross_check(&img, fstype);
        std::fs::remove_file(&img).unwrap();
    }
}

/// `-O bigalloc -C`: 16 and 64 KiB clusters on 4 KiB blocks, 16 KiB on
/// 1 KiB ones: features and geometry as mke2fs's (first block 0, groups
/// of 8 x block size clusters), `s_overhead_clusters` at most mke2fs's
/// (which also counts its reserved GDT blocks); clean, written by uext4
/// and the kernel. `-C` without bigalloc, bad cluster sizes and bigalloc
/// without extent are refused.
#[test]
fn bigalloc_matches_mke2fs() {
    if !have("e2fsck") || !have("dumpe2fs") || !have("mke2fs") {
        eprintln!("SKIP: e2fsprogs not installed");
        return;
    }
    let refused = |opts: MkfsOptions, needle: &str| {
        let e = Layout::compute(&opts).unwrap_err().to_string();
        assert!(e.contains(needle), "{e}");
    };
    refused(MkfsOptions { size: 64 << 20, cluster_size: Some(16384), ..Default::default() }, "bigalloc");
    refused(
        MkfsOptions { size: 64 << 20, cluster_size: Some(12288), features: with("bigalloc"), ..Default::default() },
        "cluster size 12288",
    );
    let mut f = MkfsFeatures::for_type("ext3").unwrap();
    f.apply("bigalloc").unwrap();
    refused(MkfsOptions { size: 64 << 20, features: f, ..Default::default() }, "bigalloc needs extent");
    let dir = tempfile::tempdir().unwrap();
    for (bs, cluster, mb) in [(4096u32, 16384u32, 128u64), (4096, 65536, 256), (1024, 16384, 160)] {
        let what = format!("-b {bs} -C {cluster}");
        let opts = MkfsOptions {
            size: mb << 20,
            block_size: Some(bs),
            cluster_size: Some(cluster),
            features: with("bigalloc"),
            ..Default::default()
        };
        let img = dir.path().join("b.img");
        let l = mkfs_file(&img, &opts).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(l.cluster_ratio, cluster / bs);
        let (bs_s, c_s) = (bs.to_string(), cluster.to_string());
        let (mut want, theirs) =
            mke2fs_image(dir.path(), &["-t", "ext4", "-b", &bs_s, "-O", "bigalloc", "-C", &c_s], mb);
        want.remove("resize_inode");
        want.extend(set("orphan_file metadata_csum_seed"));
        assert_eq!(dumpe2fs_features(&img), want, "{what}");
        let ours = dumpe2fs_fields(&img);
        for k in GEOMETRY.iter().filter(|k| **k != "Reserved GDT blocks") {
            assert_eq!(ours.get(*k), theirs.get(*k), "{what}: {k}");
        }
        let overhead = |m: &std::collections::BTreeMap<String, String>| -> u64 {
            m.get("Overhead clusters").and_then(|v| v.parse().ok()).unwrap_or(0)
        };
        assert!(overhead(&ours) > 0 && overhead(&ours) <= overhead(&theirs), "{what}: overhead");
        fsck_clean(&img);
        write_and_cross_check(&img, "ext4");
        std::fs::remove_file(&img).unwrap();
    }
}

/// On a device that does not read as zeros (`format_device` told so),
/// ext2, ext3, resize_inode and bigalloc images still come out clean:
/// every inode table, the journal and the reserved descriptor backups
/// are written.
#[test]
fn old_types_and_bigalloc_on_a_dirty_device() {
    if !have("e2fsck") {
        eprintln!("SKIP: e2fsck not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("dirty.img");
    for (ty, list) in [("ext2", ""), ("ext3", ""), ("ext4", "resize_inode"), ("ext4", "bigalloc")] {
        std::fs::write(&img, vec![0x5Au8; 24 << 20]).unwrap();
        let mut features = MkfsFeatures::for_type(ty).unwrap();
        features.apply(list).unwrap();
        let opts = MkfsOptions { size: 24 << 20, features, ..Default::default() };
        let dev = uext4::device::FileDevice::open(&img, true).unwrap();
        uext4::mkfs::format_device(&dev, &opts, false).unwrap_or_else(|e| panic!("{ty} {list}: {e}"));
        drop(dev);
        fsck_clean(&img);
    }
}
