//! `mkfs`: images we create pass e2fsck, read back through uext4, and
//! (as root) mount in the kernel.

mod rw_support;

use rw_support::{fsck_clean, have, is_root, KernelMount};
use std::process::Command;
use uext4::mkfs::{mkfs_file, MkfsOptions};

#[test]
fn fresh_images_are_clean() {
    if !have("e2fsck") {
        eprintln!("SKIP: e2fsck not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, MkfsOptions)> = vec![
        ("64m", MkfsOptions { size: 64 << 20, ..Default::default() }),
        ("5m", MkfsOptions { size: 5 << 20, ..Default::default() }),
        ("600m", MkfsOptions { size: 600 << 20, ..Default::default() }),
        ("2k", MkfsOptions { size: 100 << 20, block_size: Some(2048), ..Default::default() }),
        ("nocsum", MkfsOptions { size: 64 << 20, metadata_csum: false, ..Default::default() }),
        (
            "nojournal",
            MkfsOptions { size: 64 << 20, journal_blocks: Some(0), label: "data".into(), ..Default::default() },
        ),
        ("odd", MkfsOptions { size: (300 << 20) + 12345, inode_size: 128, ..Default::default() }),
        ("big", MkfsOptions { size: 20 << 30, ..Default::default() }),
    ];
    for (name, opts) in cases {
        let img = dir.path().join(name);
        mkfs_file(&img, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
        fsck_clean(&img);
        let fs = uext4::Filesystem::open(&img).unwrap();
        let names: Vec<_> = fs.read_dir_all(fs.root()).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, vec![b".".to_vec(), b"..".to_vec(), b"lost+found".to_vec()], "{name}");
        assert!(fs.notices().is_empty(), "{name}: {:?}", fs.notices());
        std::fs::remove_file(&img).unwrap();
    }
}

/// The kernel mounts what we made, writes into it, and e2fsck is still
/// happy afterwards.
#[test]
fn kernel_mounts_and_writes() {
    if !is_root() || !have("e2fsck") {
        eprintln!("SKIP: kernel_mounts_and_writes needs root (loop mount) and e2fsprogs");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for (name, opts) in [
        ("k1", MkfsOptions { size: 64 << 20, ..Default::default() }),
        ("k4", MkfsOptions { size: 1 << 30, ..Default::default() }),
        ("knocsum", MkfsOptions { size: 64 << 20, metadata_csum: false, ..Default::default() }),
    ] {
        let img = dir.path().join(name);
        mkfs_file(&img, &opts).unwrap();
        let m = match KernelMount::new(&img, "") {
            Ok(m) => m,
            Err(e) => {
                eprintln!("SKIP: loop mount failed: {e}");
                return;
            }
        };
        let mnt = m.path().to_path_buf();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
        std::fs::create_dir(mnt.join("d")).unwrap();
        std::fs::write(mnt.join("d/f"), &data).unwrap();
        for i in 0..300 {
            std::fs::write(mnt.join(format!("d/small{i}")), format!("{i}")).unwrap();
        }
        m.unmount();
        fsck_clean(&img);
        let fs = uext4::Filesystem::open(&img).unwrap();
        assert_eq!(fs.read_all(fs.resolve("/d/f").unwrap()).unwrap(), data, "{name}");
        assert_eq!(fs.read_all(fs.resolve("/d/small299").unwrap()).unwrap(), b"299", "{name}");
    }
}

/// Every inode of a real mkfs.ext4 -d image re-encodes to the very same
/// bytes (fields and checksum).
#[test]
fn inode_encode_round_trips() {
    if !have("mkfs.ext4") {
        eprintln!("SKIP: mkfs.ext4 not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("a/b")).unwrap();
    std::fs::write(src.join("a/f"), vec![7u8; 100_000]).unwrap();
    std::os::unix::fs::symlink("a/f", src.join("l")).unwrap();
    for (name, args) in [("csum", vec![]), ("nocsum", vec!["-O", "^metadata_csum"]), ("128", vec!["-I", "128"])] {
        let img = dir.path().join(name);
        let st = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-d"])
            .arg(&src)
            .args(&args)
            .arg(&img)
            .arg("32M")
            .status()
            .unwrap();
        assert!(st.success());
        let fs = uext4::Filesystem::open(&img).unwrap();
        let sb = fs.superblock().clone();
        let mut checked = 0;
        for ino in 1..=sb.inodes_count.min(200) {
            let Ok(mut i) = uext4::inode::read_inode(fs.volume(), ino) else { continue };
            if i.raw.iter().all(|&b| b == 0) {
                continue;
            }
            let before = i.raw.clone();
            let after = i.encode(&sb).unwrap().to_vec();
            assert_eq!(before, after, "{name}: inode {ino} re-encodes differently");
            checked += 1;
        }
        assert!(checked >= 8, "{name}: only {checked} inodes");
    }
}
