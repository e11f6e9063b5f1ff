//! The `uext4` command on damaged images (issue 23, item 9): what it must
//! refuse, and what it must still get out of them. The images are crafted
//! with mkfs.ext4 and debugfs in the shape of e2fsprogs' damaged test
//! images (tests/f_*).

mod cli_support;

use cli_support::{have, run_ok, tool, uext4};
use std::path::{Path, PathBuf};
use tempfile::TempDir;

/// A fresh 8 MiB image with 1 KiB blocks made by mkfs.ext4 with `args`;
/// None (the skip printed) without e2fsprogs.
fn image(args: &[&str]) -> Option<(TempDir, PathBuf)> {
    if !have("mkfs.ext4") || !have("debugfs") || !have("e2fsck") {
        return None;
    }
    let d = tempfile::tempdir().unwrap();
    let img = d.path().join("img");
    std::fs::File::create(&img).unwrap().set_len(8 << 20).unwrap();
    run_ok({
        let mut c = tool("mkfs.ext4");
        c.args(["-q", "-F", "-b", "1024"]).args(args).arg(&img);
        c
    });
    Some((d, img))
}

/// `debugfs -w -R cmd img`.
fn debugfs_w(img: &Path, cmd: &str) {
    run_ok({
        let mut c = tool("debugfs");
        c.args(["-w", "-R", cmd]).arg(img);
        c
    });
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A root inode that is a regular file (e2fsprogs' f_bad_root_type): the
/// mount is refused before anything is mounted, saying why, as the
/// kernel refuses it and as `uext4 ls` does. Before, the mount came up and
/// every access through it failed with EIO, nothing logged.
#[test]
fn mount_refuses_a_root_that_is_no_directory() {
    let Some((d, img)) = image(&[]) else { return };
    debugfs_w(&img, "sif <2> mode 0100644");
    let out = uext4([Path::new("ls"), &img, Path::new("/")]);
    assert!(!out.status.success(), "ls succeeded");
    assert!(stderr(&out).contains("root inode"), "ls: {}", stderr(&out));
    let mnt = d.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let out = uext4([Path::new("mount"), &img, &mnt]);
    if out.status.success() {
        // Undo the mount the bug made before failing.
        let _ = tool("umount").arg(&mnt).status();
        panic!("the mount of an image whose root is a regular file succeeded");
    }
    let err = stderr(&out);
    assert!(err.contains("root inode is not a usable directory") && err.contains("e2fsck"), "mount: {err}");
}
