//! Directory stress: 100,000 files in one directory, every other one
//! deleted, the rest renamed; lookups checked and the image fsck-clean.

mod rw_support;

use rw_support::{fsck_clean, mkfs};
use uext4::fs::ops::RenameFlags;
use uext4::Filesystem;

#[test]
fn hundred_thousand_files_in_one_directory() {
    let n = 100_000u32;
    let Some((_d, img)) = mkfs(256, &["-b", "4096", "-N", "120000"]) else { return };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let root = fs.root();
    let d = fs.mkdir(root, b"big", 0o755, 0, 0).unwrap().ino;
    let name = |i: u32| format!("file-{i:06}-{}", "x".repeat((i % 40) as usize));
    for i in 0..n {
        fs.create(d, name(i).as_bytes(), 0o644, 0, 0).unwrap();
    }
    for i in (0..n).step_by(2) {
        fs.unlink(d, name(i).as_bytes()).unwrap();
    }
    for i in (1..n).step_by(2).filter(|i| i % 3 == 0) {
        fs.rename(d, name(i).as_bytes(), d, format!("renamed-{i}").as_bytes(), RenameFlags::default()).unwrap();
    }
    let check = |fs: &Filesystem| {
        for i in 0..n {
            let live = fs.lookup(d, name(i).as_bytes()).is_ok();
            let renamed = fs.lookup(d, format!("renamed-{i}").as_bytes()).is_ok();
            let odd = i % 2 == 1;
            assert_eq!(live, odd && i % 3 != 0, "{}", name(i));
            assert_eq!(renamed, odd && i % 3 == 0, "renamed-{i}");
        }
        let count = fs.read_dir_all(d).unwrap().len() as u32;
        assert_eq!(count, n / 2 + 2);
    };
    check(&fs);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    check(&Filesystem::open(&img).unwrap());
}
