//! Helpers shared by the mkfs tests: what dumpe2fs says of an image,
//! mke2fs's image of the same options to compare with, and a write and
//! read-back round between uext4 and the kernel.
#![allow(dead_code)]

use super::rw_support::{self, fsck_clean};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use uext4::mkfs::MkfsFeatures;
use uext4::Filesystem;

/// The feature names `dumpe2fs -h` lists for `img`.
pub fn dumpe2fs_features(img: &Path) -> BTreeSet<String> {
    let out = Command::new("dumpe2fs").arg("-h").arg(img).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find_map(|l| l.strip_prefix("Filesystem features:")).expect("no feature line");
    line.split_whitespace().map(str::to_string).collect()
}

/// The set of space-separated `names`.
pub fn set(names: &str) -> BTreeSet<String> {
    names.split_whitespace().map(str::to_string).collect()
}

/// The default features with `list` applied as `-O`.
pub fn with(list: &str) -> MkfsFeatures {
    let mut f = MkfsFeatures::default();
    f.apply(list).unwrap();
    f
}

/// `dumpe2fs -h` fields of `img`, "Key" -> value.
pub fn dumpe2fs_fields(img: &Path) -> BTreeMap<String, String> {
    let out = Command::new("dumpe2fs").arg("-h").arg(img).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// mke2fs's image of `args` (`-q -F` added) and `size_mb`: its
/// `dumpe2fs -h` features and fields.
pub fn mke2fs_image(dir: &Path, args: &[&str], size_mb: u64) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let img = dir.join("mke2fs.img");
    let st =
        Command::new("mke2fs").args(["-q", "-F"]).args(args).arg(&img).arg(format!("{size_mb}M")).status().unwrap();
    assert!(st.success(), "mke2fs {args:?}");
    let f = dumpe2fs_features(&img);
    let fields = dumpe2fs_fields(&img);
    std::fs::remove_file(&img).unwrap();
    (f, fields)
}

/// The geometry fields uext4 mkfs and mke2fs must agree on.
pub const GEOMETRY: [&str; 11] = [
    "Reserved GDT blocks",
    "Inode count",
    "Block count",
    "First block",
    "Block size",
    "Cluster size",
    "Blocks per group",
    "Clusters per group",
    "Inodes per group",
    "Inode size",
    "Total journal blocks",
];

/// Writes files across the direct, single and double indirect (or
/// several-cluster) boundaries with uext4, then checks them, e2fsck and
/// (as root) the kernel reading them back with `-t fstype` and writing
/// more, which uext4 then reads.
pub fn write_and_cross_check(img: &Path, fstype: &str) {
    let sizes = [1usize, 4096, 12 * 1024 + 1, 300 * 1024, 1100 * 1024];
    let mut fs = Filesystem::open_rw(img).unwrap_or_else(|e| panic!("{fstype}: open_rw: {e}"));
    for (i, n) in sizes.iter().enumerate() {
        fs.write(format!("/f{i}"), rw_support::pattern(i as u64, *n)).unwrap();
    }
    let root = fs.root();
    let d = fs.mkdir(root, b"dir", 0o755, 0, 0).unwrap().ino;
    for i in 0..150 {
        fs.create(d, format!("entry-with-a-long-name-{i:03}").as_bytes(), 0o644, 0, 0).unwrap();
    }
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(img);
    if let Some(why) = rw_support::kernel_unavailable() {
        eprintln!("SKIP: kernel mount: {why}");
        return;
    }
    // Unmounted by the guard, retrying while a process another test
    // forked meanwhile still holds a descriptor in it.
    let m = rw_support::KernelMount::new_as(img, fstype, "").unwrap_or_else(|e| panic!("mount -t {fstype}: {e}"));
    let dir = m.path();
    for (i, n) in sizes.iter().enumerate() {
        assert_eq!(std::fs::read(dir.join(format!("f{i}"))).unwrap(), rw_support::pattern(i as u64, *n));
    }
    assert_eq!(std::fs::read_dir(dir.join("dir")).unwrap().count(), 150);
    std::fs::write(dir.join("k"), rw_support::pattern(9, 200_000)).unwrap();
    m.unmount();
    fsck_clean(img);
    let fs = Filesystem::open(img).unwrap();
    assert_eq!(fs.read_all(fs.resolve("/k").unwrap()).unwrap(), rw_support::pattern(9, 200_000));
}

/// `dumpe2fs`'s per-group part for `img` (from "Group 0" on): where every
/// group's metadata sits and what is free in it.
pub fn dumpe2fs_groups(img: &Path) -> String {
    let out = Command::new("dumpe2fs").arg(img).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.find("Group 0").map(|i| text[i..].to_string()).unwrap_or_default()
}
