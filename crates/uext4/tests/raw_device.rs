//! The FileDevice backend on a raw block device (a loop device), whose
//! size comes from BLKGETSIZE64 rather than file metadata.

mod rw_support;

use std::process::Command;

struct Loop(String);

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
    }
}

#[test]
fn reads_through_a_loop_device() {
    if !rw_support::require_loop_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(src.join("file"), &data).unwrap();
    let img = dir.path().join("img");
    let st = Command::new("mkfs.ext4").args(["-q", "-F", "-d"]).arg(&src).arg(&img).arg("16M").status().unwrap();
    assert!(st.success());
    let out = Command::new("losetup").args(["-f", "--show", "-r"]).arg(&img).output().unwrap();
    assert!(out.status.success(), "losetup: {}", String::from_utf8_lossy(&out.stderr).trim());
    let dev = Loop(String::from_utf8(out.stdout).unwrap().trim().to_string());
    let fs = uext4::Filesystem::open(&dev.0).unwrap();
    assert_eq!(fs.superblock().blocks_count * u64::from(fs.block_size()), 16 << 20);
    let ino = fs.resolve("/file").unwrap();
    assert_eq!(fs.read_all(ino).unwrap(), data);
}
