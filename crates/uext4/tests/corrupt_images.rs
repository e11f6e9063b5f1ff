//! What a damaged image may not make uext4 do (issue 23, item 9). Each
//! case crafts, with mkfs.ext4, uext4 and debugfs, a small image in the
//! shape of one of e2fsprogs' damaged test images (tests/f_*), and checks
//! that uext4 answers it as the kernel does: a typed error where the
//! kernel refuses, the data where the kernel reads it, and no change that
//! damages the image further (every image written ends `e2fsck -fn`,
//! clean once the crafted damage is undone).

mod rw_support;

use rw_support::{debugfs, fsck_clean, mkfs, pattern};
use std::path::Path;
use std::process::Command;
use uext4::format::inode::FL_EA_INODE;
use uext4::fs::{RenameFlags, XattrSetMode};
use uext4::{CorruptKind, Error, Filesystem, Location, OpenOptions, Structure};

/// `debugfs -w -R cmd img`, asserting it ran.
fn debugfs_w(img: &Path, cmd: &str) {
    let out = Command::new("debugfs").args(["-w", "-R", cmd]).arg(img).output().unwrap();
    assert!(out.status.success(), "debugfs -w {cmd}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The corruption `r` failed with, or a panic naming `what`.
fn corruption<T: std::fmt::Debug>(what: &str, r: uext4::Result<T>) -> uext4::Corruption {
    match r {
        Err(Error::Corrupt(c)) => *c,
        other => panic!("{what}: expected a corruption error, got {other:?}"),
    }
}

/// An xattr value's inode (EXT4_EA_INODE_FL) that a directory entry also
/// names, as in e2fsprogs' f_ea_inode_dir_ref: the kernel's lookup
/// refuses it ("unexpected EA_INODE flag", EFSCORRUPTED). Opening it as a
/// file would update its atime on a read, which in a value inode is the
/// value's hash (e2fsck then finds the xattr damaged); unlinking the name
/// would drop the value's reference.
#[test]
fn ea_inode_named_by_a_directory_entry_is_refused() {
    let Some((_d, img)) = mkfs(16, &["-b", "4096", "-O", "ea_inode"]) else { return };
    let value = pattern(7, 10_000);
    let fs = Filesystem::open_rw(&img).unwrap();
    let owner = fs.create(fs.root(), b"owner", 0o644, 0, 0).unwrap().ino;
    fs.set_xattr(owner, b"user.big", &value, XattrSetMode::Any).unwrap();
    let ea = (owner + 1..owner + 32)
        .find(|&i| fs.stat(i).is_ok_and(|s| s.flags & FL_EA_INODE != 0 && s.nlink > 0))
        .expect("the value's inode");
    drop(fs);
    fsck_clean(&img);
    let before = debugfs(&img, &format!("stat <{ea}>"));
    debugfs_w(&img, &format!("ln <{ea}> /value"));

    for write in [false, true] {
        let fs = if write { Filesystem::open_rw(&img) } else { Filesystem::open(&img) }.unwrap();
        let root = fs.root();
        for c in [
            corruption("lookup", fs.lookup(root, b"value")),
            corruption("resolve", fs.resolve("/value")),
            corruption("resolve_follow", fs.resolve_follow("/value")),
            corruption("named_inode", fs.named_inode(ea)),
        ] {
            assert_eq!(c.structure, Structure::Inode);
            assert_eq!(c.location, Location::Inode(ea));
            assert!(matches!(c.kind, CorruptKind::Conflict { .. }), "{c}");
        }
        // A file handle naming it is stale, as the kernel answers one.
        assert!(matches!(fs.stat_by_handle(ea, None), Err(Error::BadInode(_))));
        if write {
            // The open through the path API fails at the lookup, before
            // any read could update the atime.
            let mut read = OpenOptions::new();
            read.read(true);
            corruption("open", fs.open_file("/value", &read));
            corruption("unlink", fs.unlink(root, b"value"));
            corruption("rename", fs.inodes().rename(root, b"value", root, b"other", RenameFlags::default()));
        }
        // The owner still reads its value.
        assert_eq!(fs.get_xattr(fs.resolve("/owner").unwrap(), "user.big").unwrap(), value);
    }
    // Nothing above changed the value's inode (its atime is the hash, its
    // link count the references): without the stray name the image is clean.
    assert_eq!(debugfs(&img, &format!("stat <{ea}>")), before);
    debugfs_w(&img, "unlink /value");
    fsck_clean(&img);
}

/// A root inode that is no usable directory (e2fsprogs' f_bad_root_type,
/// f_zero_root): the kernel refuses the mount ("corrupt root inode, run
/// e2fsck"); so does every open, read-only or read-write, which writes
/// nothing. Before, the open succeeded and every access failed.
#[test]
fn root_inode_not_a_directory_is_refused_at_open() {
    for (what, sif) in
        [("regular file", "mode 0100644"), ("fifo", "mode 010644"), ("empty", "size 0"), ("no blocks", "blocks 0")]
    {
        let Some((_d, img)) = mkfs(8, &["-b", "1024"]) else { return };
        debugfs_w(&img, &format!("sif <2> {sif}"));
        let before = std::fs::read(&img).unwrap();
        for write in [false, true] {
            let r = if write { Filesystem::open_rw(&img) } else { Filesystem::open(&img) };
            let c = corruption(what, r.map(|_| ()));
            assert_eq!(c.structure, Structure::Inode, "{what}");
            assert_eq!(c.location, Location::Inode(2), "{what}");
            assert!(matches!(c.kind, CorruptKind::BadRoot { .. }), "{what}: {c}");
            let msg = c.to_string();
            assert!(msg.contains("root inode") && msg.contains("e2fsck"), "{what}: {msg}");
        }
        assert!(std::fs::read(&img).unwrap() == before, "{what}: the refused open wrote to the image");
    }
}
