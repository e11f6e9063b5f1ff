//! The examples in `crates/uext4/examples/` run as tests: each example's
//! body is a library-style function, included here by path and run on an
//! image in a temporary directory, which then passes `e2fsck -fn`.

mod rw_support;

#[allow(dead_code)]
#[path = "../examples/copy_tree.rs"]
mod copy_tree;

#[allow(dead_code)]
#[path = "../examples/threads.rs"]
mod threads;

#[allow(dead_code)]
#[path = "../examples/append_log.rs"]
mod append_log;

#[allow(dead_code)]
#[path = "../examples/bigdir_cost.rs"]
mod bigdir_cost;

use std::path::Path;

fn fsck(img: &Path) {
    if rw_support::have("e2fsck") {
        rw_support::fsck_clean(img);
    } else {
        eprintln!("SKIP: e2fsck not installed; image not checked");
    }
}

#[test]
fn copy_tree_example() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("tree.img");
    let s = copy_tree::copy_and_verify(&copy_tree::default_source(), &img).unwrap();
    assert!(s.files > 10 && s.dirs > 3, "{s:?}");
    fsck(&img);
}

#[test]
fn copy_tree_example_with_symlinks_and_modes() {
    let src = tempfile::tempdir().unwrap();
    let p = src.path();
    std::fs::create_dir_all(p.join("a/b/c")).unwrap();
    std::fs::write(p.join("a/file"), vec![7u8; 100_000]).unwrap();
    std::fs::write(p.join("a/b/c/empty"), b"").unwrap();
    std::os::unix::fs::symlink("../file", p.join("a/b/up")).unwrap();
    std::os::unix::fs::symlink("/nowhere", p.join("dangling")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p.join("a/file"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(p.join("a/b"), std::fs::Permissions::from_mode(0o750)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("tree.img");
    let s = copy_tree::copy_and_verify(p, &img).unwrap();
    assert_eq!(s, copy_tree::Summary { files: 2, dirs: 3, symlinks: 2, bytes: 100_000 });
    fsck(&img);
}

#[test]
fn threads_example() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("threads.img");
    threads::run(&img).unwrap();
    fsck(&img);
}

#[test]
fn append_log_example() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("log.img");
    let records = append_log::run(&img).unwrap();
    assert_eq!(records.len(), 100);
    fsck(&img);
}

/// The big-directory cost harness, on a small directory (3,000 entries:
/// the paths it measures, not their speed), e2fsck-clean at the end.
#[test]
fn bigdir_cost_example() {
    if !rw_support::have("mkfs.ext4") || !rw_support::have("e2fsck") {
        eprintln!("SKIP: e2fsprogs not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    assert!(bigdir_cost::run(&img, 3000, None), "e2fsck -fn found the image unclean");
}
