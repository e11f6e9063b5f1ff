//! metadata_csum_seed: checksums come from the seed stored in the
//! superblock, not from the UUID, so that `tune2fs -U` can change the
//! UUID of a mounted-style image without rewriting every checksum. uext4
//! must keep using the stored seed after the UUID changed.

mod rw_support;

use rw_support::{fsck_clean, have, kernel_read_back, mkfs, pattern};
use std::process::Command;
use uext4::Filesystem;

const ROOT: u32 = 2;

#[test]
fn writes_after_the_uuid_changed_use_the_stored_seed() {
    if !have("tune2fs") || !have("e2fsck") {
        eprintln!("SKIP: tune2fs or e2fsck not installed");
        return;
    }
    let Some((_d, img)) = mkfs(32, &["-O", "metadata_csum,metadata_csum_seed"]) else { return };
    let uuid_before = Filesystem::open(&img).unwrap().superblock().uuid;
    let out = Command::new("tune2fs").args(["-U", "random"]).arg(&img).output().unwrap();
    assert!(out.status.success(), "tune2fs -U: {}", String::from_utf8_lossy(&out.stderr));
    fsck_clean(&img);

    let mut files = Vec::new();
    {
        let mut fs = Filesystem::open_rw(&img).unwrap();
        assert_ne!(fs.superblock().uuid, uuid_before, "tune2fs did not change the UUID");
        let dir = fs.mkdir(ROOT, b"d", 0o755, 0, 0).unwrap().ino;
        for i in 0..40u64 {
            let name = format!("f{i}");
            let ino = fs.create(dir, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
            let data = pattern(i, 1000 + i as usize * 700);
            fs.inodes().write(ino, 0, &data).unwrap();
            fs.set_xattr(ino, b"user.k", b"v", uext4::inode_api::XattrSetMode::Any).unwrap();
            files.push((format!("d/{name}"), data));
        }
        fs.unmount().unwrap();
    }
    // e2fsck verifies every checksum against the stored seed.
    fsck_clean(&img);
    let refs: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, d)| (n.as_str(), d.clone())).collect();
    kernel_read_back(&img, &refs);
    let fs = Filesystem::open(&img).unwrap();
    let dir = fs.lookup(ROOT, b"d").unwrap();
    for (name, want) in &files {
        let ino = fs.lookup(dir, name.trim_start_matches("d/").as_bytes()).unwrap();
        assert!(fs.read_all(ino).unwrap() == *want, "{name}");
    }
}
