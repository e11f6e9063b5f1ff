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

/// A root inode that is a regular file (e2fsprogs' f_bad_root_type): a
/// mount, read-write or read-only, is refused before anything is mounted,
/// saying why, as the kernel refuses it (`uext4 ls` fails too). Before,
/// the mount came up and every access through it failed with EIO,
/// nothing logged.
#[test]
fn mount_refuses_a_root_that_is_no_directory() {
    let Some((d, img)) = image(&[]) else { return };
    debugfs_w(&img, "sif <2> mode 0100644");
    let out = uext4([Path::new("ls"), &img, Path::new("/")]);
    assert!(!out.status.success(), "ls succeeded");
    let mnt = d.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    for opts in ["rw", "ro"] {
        let out = uext4([Path::new("mount"), &img, &mnt, Path::new("-o"), Path::new(opts)]);
        if out.status.success() {
            // Undo the mount the bug made before failing.
            let _ = tool("umount").arg(&mnt).status();
            panic!("the {opts} mount of an image whose root is a regular file succeeded");
        }
        let err = stderr(&out);
        assert!(err.contains("root inode is not a usable directory") && err.contains("e2fsck"), "{opts}: {err}");
    }
}

/// `debugfs -w -f script img`, the script given as lines.
fn debugfs_script(img: &Path, lines: &[&str]) {
    let script = img.with_extension("debugfs");
    std::fs::write(&script, lines.join("\n") + "\n").unwrap();
    run_ok({
        let mut c = tool("debugfs");
        c.args(["-w", "-f"]).arg(&script).arg(img);
        c
    });
}

/// Directories with two entries of one name (e2fsprogs' f_dup_de): /d
/// names one inode twice (a hard link, links_count 2), /e names two
/// inodes "a". `uext4 get` copies every readable file: the inode named
/// twice once (a warning; before, its copy was deleted to make way for a
/// hard link to itself, which then failed), the second inode as "a~0",
/// the name e2fsck gives it (an error: the copy has a name the image has
/// not, so the exit status is 1). Nothing is written to the image.
#[test]
fn get_copies_every_file_of_a_directory_with_duplicate_names() {
    let Some((d, img)) = image(&[]) else { return };
    let src = d.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("one"), b"first\n").unwrap();
    std::fs::write(src.join("two"), b"second\n").unwrap();
    let (one, two) = (src.join("one"), src.join("two"));
    let (one, two) = (one.to_str().unwrap(), two.to_str().unwrap());
    debugfs_script(
        &img,
        &[
            "mkdir d",
            &format!("write {one} d/a"),
            "ln d/a d",
            "sif d/a links_count 2",
            &format!("write {two} d/c"),
            "mkdir e",
            &format!("write {one} e/a"),
            "mkdir tmp",
            &format!("write {two} tmp/a"),
            "ln tmp/a e",
            "unlink tmp/a",
            "rmdir tmp",
        ],
    );
    let before = std::fs::read(&img).unwrap();
    let dest = d.path().join("out");
    let out = uext4([Path::new("get"), &img, Path::new("/"), &dest]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "get: {err}");
    let read = |p: &str| std::fs::read(dest.join(p)).unwrap_or_else(|e| panic!("{p}: {e}; stderr: {err}"));
    assert_eq!(read("d/a"), b"first\n");
    assert_eq!(read("d/c"), b"second\n");
    assert_eq!(read("e/a"), b"first\n");
    assert_eq!(read("e/a~0"), b"second\n");
    let mut names: Vec<_> = std::fs::read_dir(dest.join("d")).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert_eq!(names, ["a", "c"]);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines.iter().any(|l| l.contains("/d/a") && l.contains("warning") && l.contains("copied once")), "{err}");
    assert!(lines.iter().any(|l| l.contains("/e/a") && l.contains("copied as a~0")), "{err}");
    assert!(std::fs::read(&img).unwrap() == before, "get wrote to the image");
}

/// `e2fsck -fn img`: its report (stdout) and exit status.
fn e2fsck_report(img: &Path) -> (String, Option<i32>) {
    let out = tool("e2fsck").arg("-fn").arg(img).output().unwrap();
    (String::from_utf8_lossy(&out.stdout).into_owned(), out.status.code())
}

/// Block groups whose descriptors claim one free block less than their
/// bitmaps (e2fsprogs' f_bitmaps, f_bbfile shapes): uext4 skips such
/// groups for allocation, as the kernel does. When only they have room,
/// `uext4 put` says so (before: "no run of 1 free blocks", as if the disk
/// were full) and leaves no empty file behind (before: /f stayed, empty).
/// e2fsck sees the image exactly as before the failed put.
#[test]
fn put_into_corrupt_groups_says_so_and_leaves_nothing() {
    let Some((d, img)) = image(&["-g", "1024", "-O", "^flex_bg,^uninit_bg,^metadata_csum", "-E", "lazy_itable_init=0"])
    else {
        return;
    };
    let stats = run_ok({
        let mut c = tool("debugfs");
        c.args(["-R", "stats"]).arg(&img);
        c
    });
    let stats = String::from_utf8_lossy(&stats.stdout).into_owned();
    // "Group  N: ..." then "   F free blocks, ..." for each group.
    let mut lines = stats.lines();
    let mut groups = 0;
    while let Some(l) = lines.next() {
        if let Some(rest) = l.strip_prefix(" Group ") {
            let g: u32 = rest.split(':').next().unwrap().trim().parse().unwrap();
            let next = lines.next().unwrap();
            let free: u64 = next.split_whitespace().next().unwrap().parse().unwrap();
            if free > 0 {
                debugfs_w(&img, &format!("set_bg {g} free_blocks_count {}", free - 1));
            }
            groups += 1;
        }
    }
    assert!(groups >= 4, "{stats}");
    let (before, code) = e2fsck_report(&img);
    assert_eq!(code, Some(4), "the crafted damage: {before}");
    let host = d.path().join("data");
    std::fs::write(&host, vec![7u8; 5000]).unwrap();
    let out = uext4([Path::new("put"), &img, &host, Path::new("/f")]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "put: {err}");
    assert!(err.contains("skipped as corrupt") && err.contains("run e2fsck"), "put: {err}");
    let ls = uext4([Path::new("ls"), &img, Path::new("/")]);
    assert!(ls.status.success(), "ls: {}", stderr(&ls));
    let names = String::from_utf8_lossy(&ls.stdout).into_owned();
    assert!(!names.lines().any(|l| l.trim() == "f"), "the failed put left /f behind: {names}");
    assert_eq!(e2fsck_report(&img), (before, code), "the failed put changed what e2fsck sees");
}

/// An xattr value's inode named by a directory entry (e2fsprogs'
/// f_ea_inode_dir_ref): `uext4 get` of the directory refuses that name,
/// as a lookup does, instead of copying the value out as a file; the
/// other files are copied.
#[test]
fn get_refuses_an_ea_inode_named_by_an_entry() {
    let Some((d, img)) = image(&["-O", "ea_inode", "-I", "256"]) else { return };
    let value = d.path().join("value");
    std::fs::write(&value, vec![b'v'; 6000]).unwrap();
    let file = d.path().join("file");
    std::fs::write(&file, b"data\n").unwrap();
    debugfs_script(
        &img,
        &[&format!("write {} owner", file.display()), &format!("ea_set -f {} owner user.big", value.display())],
    );
    let listed = run_ok({
        let mut c = tool("debugfs");
        c.args(["-R", "stat <13>"]).arg(&img);
        c
    });
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(listed.contains("Flags: 0x280000"), "inode 13 is not the value's inode: {listed}");
    debugfs_w(&img, "ln <13> /value");
    let dest = d.path().join("out");
    let out = uext4([Path::new("get"), &img, Path::new("/"), &dest]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "get: {err}");
    assert!(err.contains("/value") && err.contains("EA_INODE"), "get: {err}");
    assert!(!dest.join("value").exists(), "the value was copied out as a file");
    assert_eq!(std::fs::read(dest.join("owner")).unwrap(), b"data\n");
}
