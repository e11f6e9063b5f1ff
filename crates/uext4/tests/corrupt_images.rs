//! What a damaged image may not make uext4 do (issue 23, item 9). Each
//! case crafts, with mkfs.ext4, uext4 and debugfs, a small image in the
//! shape of one of e2fsprogs' damaged test images (tests/f_*), and checks
//! that uext4 answers it as the kernel does: a typed error where the
//! kernel refuses, the data where the kernel reads it, and no change that
//! damages the image further (every image written ends `e2fsck -fn`,
//! clean once the crafted damage is undone).

mod rw_support;

use rw_support::{debugfs, fsck_clean, kernel_unavailable, mkfs, pattern, KernelMount};
use std::path::Path;
use std::process::Command;
use uext4::format::inode::FL_EA_INODE;
use uext4::inode_api::{RenameFlags, XattrSetMode};
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
/// e2fsck"); so do a read-write open (writing nothing) and
/// [`FsCore::check_root`], which a mount calls on its read-only open too.
/// Before, the open succeeded and every access failed. A read-only open
/// still serves inspection (statfs, inodes by number).
#[test]
fn root_inode_not_a_directory_is_refused_at_open() {
    for (what, sif) in
        [("regular file", "mode 0100644"), ("fifo", "mode 010644"), ("empty", "size 0"), ("no blocks", "blocks 0")]
    {
        let Some((_d, img)) = mkfs(8, &["-b", "1024"]) else { return };
        debugfs_w(&img, &format!("sif <2> {sif}"));
        let before = std::fs::read(&img).unwrap();
        for write in [false, true] {
            let r = if write {
                Filesystem::open_rw(&img).map(|_| ())
            } else {
                let fs = Filesystem::open(&img).unwrap();
                assert!(fs.statfs().free_inodes > 0 && fs.stat(11).is_ok(), "{what}: inspection");
                fs.check_root()
            };
            let c = corruption(what, r);
            assert_eq!(c.structure, Structure::Inode, "{what}");
            assert_eq!(c.location, Location::Inode(2), "{what}");
            assert!(matches!(c.kind, CorruptKind::BadRoot { .. }), "{what}: {c}");
            let msg = c.to_string();
            assert!(msg.contains("root inode") && msg.contains("e2fsck"), "{what}: {msg}");
        }
        assert!(std::fs::read(&img).unwrap() == before, "{what}: the refused open wrote to the image");
    }
}

/// e2fsck's version as (major, minor, patch), from its banner.
fn e2fsck_version() -> (u32, u32, u32) {
    let out = Command::new("e2fsck").arg("-V").output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let v = text.split_whitespace().nth(1).unwrap_or("0");
    let mut n =
        v.split('.').map(|p| p.chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap_or(0));
    (n.next().unwrap_or(0), n.next().unwrap_or(0), n.next().unwrap_or(0))
}

/// `e2fsck -fn` clean, except (before e2fsprogs 1.47.4, commit "ext2fs:
/// fix fast symlink blocks check") its own false report of the fast
/// symlink `ino` whose i_blocks counts an xattr value's inode: "illegal
/// block(s)" that are the target's bytes. Every other line is a failure.
fn fsck_clean_but_old_fast_symlink_check(img: &Path, ino: u32) {
    if e2fsck_version() >= (1, 47, 4) {
        return fsck_clean(img);
    }
    let out = Command::new("e2fsck").arg("-fn").arg(img).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let own = [format!("Inode {ino} has illegal block(s).  Clear? no"), format!(" in inode {ino}.  IGNORED.")];
    for line in text.lines() {
        let known = line.is_empty()
            || line.starts_with("Pass ")
            || line.contains("files (")
            || line.contains("WARNING: Filesystem still has errors")
            || line == own[0]
            || (line.starts_with("Illegal block #") && line.ends_with(&own[1]));
        assert!(known, "e2fsck -fn {}: {line:?} in:\n{text}", img.display());
    }
}

/// A short symlink with a large xattr on an ea_inode filesystem
/// (e2fsprogs' f_ea_inode_fast_symlink): the value's inode counts in the
/// symlink's i_blocks, so a block count test takes the target in i_block
/// for a block map ("corrupt indirect block ... data pointer"). The
/// kernel (since 2025) and e2fsprogs (1.47.4) decide by size there. The
/// image is valid: the target reads back (also through the kernel, when
/// it can be mounted here), the link resolves, removing it frees the
/// symlink and the value's inode, and e2fsck agrees at each step.
#[test]
fn short_symlink_with_an_ea_inode_value_is_fast() {
    let Some((_d, img)) = mkfs(16, &["-b", "4096", "-O", "ea_inode"]) else { return };
    let value = pattern(3, 9000);
    let fs = Filesystem::open_rw(&img).unwrap();
    let root = fs.root();
    fs.write("/target", b"reached").unwrap();
    let link = fs.inodes().symlink(root, b"link", b"target", 0, 0).unwrap().ino;
    fs.set_xattr(link, b"trusted.big", &value, XattrSetMode::Any).unwrap();
    assert!(fs.stat(link).unwrap().blocks > 0, "the value's inode counts in the symlink's blocks");
    drop(fs);
    fsck_clean_but_old_fast_symlink_check(&img, link);
    for write in [false, true] {
        let fs = if write { Filesystem::open_rw(&img) } else { Filesystem::open(&img) }.unwrap();
        let link = fs.resolve("/link").unwrap();
        assert_eq!(fs.readlink(link).unwrap(), b"target");
        assert_eq!(fs.resolve_follow("/link").unwrap(), fs.resolve("/target").unwrap());
        assert!(fs.extents(link).unwrap().is_empty(), "a fast symlink has no block map");
        assert_eq!(fs.get_xattr(link, "trusted.big").unwrap(), value);
    }
    fsck_clean_but_old_fast_symlink_check(&img, link);
    match kernel_unavailable() {
        Some(why) => eprintln!("SKIP: the kernel's reading: {why}"),
        None => {
            let m = KernelMount::new(&img, "ro").unwrap_or_else(|e| panic!("kernel mount: {e}"));
            assert_eq!(std::fs::read_link(m.path().join("link")).unwrap(), Path::new("target"));
            assert_eq!(std::fs::read(m.path().join("link")).unwrap(), b"reached");
            m.unmount();
        }
    }
    let fs = Filesystem::open_rw(&img).unwrap();
    let before = fs.statfs();
    fs.inodes().unlink(fs.root(), b"link").unwrap();
    drop(fs);
    fsck_clean(&img);
    let after = Filesystem::open(&img).unwrap().statfs();
    assert_eq!(after.free_inodes, before.free_inodes + 2, "the symlink and its value's inode are freed");
}

/// Byte offset of inode `ino` in `img`, from `debugfs imap`.
fn inode_offset(img: &Path, ino: u32) -> usize {
    let out = debugfs(img, &format!("imap <{ino}>"));
    let block: usize = out.split("located at block ").nth(1).and_then(|s| s.split(',').next()?.parse().ok()).unwrap();
    let off = out.split("offset 0x").nth(1).and_then(|s| usize::from_str_radix(s.trim(), 16).ok()).unwrap();
    let bs: usize = debugfs(img, "stats")
        .split("Block size:")
        .nth(1)
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap();
    block * bs + off
}

/// An xattr in a namespace uext4 has no prefix for (e_name_index 11, as
/// e2fsprogs' f_verity shows one): the kernel has no handler for it, so
/// it is neither listed nor readable, and the file's other attributes and
/// data work. Before, the whole file's attributes failed. Rewriting the
/// file's attributes keeps the entry as it was.
#[test]
fn xattr_with_an_unknown_name_index_is_skipped_and_kept() {
    let Some((_d, img)) = mkfs(8, &["-b", "4096", "-I", "256"]) else { return };
    let fs = Filesystem::open_rw(&img).unwrap();
    fs.write("/f", b"data").unwrap();
    let ino = fs.resolve("/f").unwrap();
    fs.set_xattr(ino, b"user.keep", b"k", XattrSetMode::Any).unwrap();
    fs.set_xattr(ino, b"user.hidden", b"xyz", XattrSetMode::Any).unwrap();
    drop(fs);
    // Move user.hidden to index 11 in the in-inode area, then have
    // debugfs recompute the inode's checksum.
    let off = inode_offset(&img, ino);
    let mut b = std::fs::read(&img).unwrap();
    let mut e = off + 128 + usize::from(u16::from_le_bytes([b[off + 128], b[off + 129]])) + 4;
    while b[e..e + 4] != [0; 4] {
        let n = usize::from(b[e]);
        if &b[e + 16..e + 16 + n] == b"hidden" {
            b[e + 1] = 11;
        }
        e = (e + 16 + n + 3) & !3;
    }
    std::fs::write(&img, &b).unwrap();
    let out =
        Command::new("debugfs").args(["-w", "-n", "-R", &format!("sif <{ino}> checksum calc")]).arg(&img).output();
    assert!(out.unwrap().status.success());
    fsck_clean(&img);
    let unknown = "hidden (3) = \"xyz\"";
    assert!(debugfs(&img, "ea_list /f").contains(unknown), "{}", debugfs(&img, "ea_list /f"));

    for write in [false, true] {
        let fs = if write { Filesystem::open_rw(&img) } else { Filesystem::open(&img) }.unwrap();
        assert_eq!(fs.list_xattrs(ino).unwrap(), vec![b"user.keep".to_vec()]);
        assert_eq!(fs.get_xattr(ino, "user.keep").unwrap(), b"k");
        for name in ["user.hidden", "hidden", "trusted.hidden"] {
            assert!(matches!(fs.get_xattr(ino, name), Err(Error::NoAttr(_))), "{name}");
        }
        assert_eq!(fs.read("/f").unwrap(), b"data");
        if write {
            // Rewrites of the table: an addition, a removal.
            fs.set_xattr(ino, b"user.new", b"n", XattrSetMode::Any).unwrap();
            fs.remove_xattr(ino, b"user.keep").unwrap();
            assert_eq!(fs.list_xattrs(ino).unwrap(), vec![b"user.new".to_vec()]);
        }
    }
    fsck_clean(&img);
    let listed = debugfs(&img, "ea_list /f");
    assert!(listed.contains(unknown) && listed.contains("user.new") && !listed.contains("user.keep"), "{listed}");
}

/// An inode bitmap that calls a live inode free (e2fsprogs' f_bitmaps,
/// f_dup_ba shapes, made with `debugfs freei`): before, the next create
/// took that slot and wrote its new inode over the live one, so two names
/// reached one new inode. Each slot is checked in the inode table before
/// it is used; a live one marks its group corrupt (no more inodes from
/// it) and another group's slot is taken. Once the bitmap's bit is put
/// back (`seti`), e2fsck finds nothing else wrong.
#[test]
fn inode_slot_the_bitmap_calls_free_but_is_live_is_not_reused() {
    let Some((_d, img)) = mkfs(8, &["-b", "1024", "-g", "2048", "-N", "256"]) else { return };
    let fs = Filesystem::open_rw(&img).unwrap();
    fs.write("/a", b"aaa").unwrap();
    fs.write("/b", b"bbb").unwrap();
    let b = fs.resolve("/b").unwrap();
    drop(fs);
    fsck_clean(&img);
    // The bit and the group's free count, as a bitmap and descriptor
    // that agree with each other but not with the inode table.
    let stats = debugfs(&img, "stats");
    let free0: u32 = stats.split(" free inodes").next().and_then(|s| s.rsplit(' ').next()?.parse().ok()).unwrap();
    debugfs_w(&img, &format!("freei <{b}>"));
    debugfs_w(&img, &format!("set_bg 0 free_inodes_count {}", free0 + 1));
    debugfs_w(&img, "set_bg 0 checksum calc");
    let ipg: u32 = debugfs(&img, "stats")
        .split("Inodes per group:")
        .nth(1)
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap();
    assert!(256 / ipg >= 2, "two groups at least");

    let fs = Filesystem::open_rw(&img).unwrap();
    fs.write("/new", b"new").unwrap();
    fs.write("/new2", b"new2").unwrap();
    let (n1, n2) = (fs.resolve("/new").unwrap(), fs.resolve("/new2").unwrap());
    assert_ne!(n1, b, "the live inode's slot was handed out");
    assert!((n1 - 1) / ipg > 0 && (n2 - 1) / ipg > 0, "group 0 is corrupt: {n1}, {n2}");
    assert_eq!(fs.read("/b").unwrap(), b"bbb");
    assert_eq!(fs.stat(b).unwrap().nlink, 1);
    assert_eq!(fs.detected_errors(), 1, "one group marked corrupt");
    drop(fs);
    // Recorded as ext4_error records it, naming the inode.
    let out = Command::new("dumpe2fs").arg("-h").arg(&img).output().unwrap();
    let header = String::from_utf8_lossy(&out.stdout);
    assert!(header.contains("FS Error count:           1"), "{header}");
    assert!(header.contains("First error function:     ext4_new_inode"), "{header}");
    assert!(header.contains(&format!("First error inode #:      {b}")), "{header}");
    let fs = Filesystem::open(&img).unwrap();
    for (p, data) in [("/a", &b"aaa"[..]), ("/b", b"bbb"), ("/new", b"new"), ("/new2", b"new2")] {
        assert_eq!(fs.read(p).unwrap(), data, "{p}");
    }
    drop(fs);
    debugfs_w(&img, &format!("seti <{b}>"));
    let stats = debugfs(&img, "stats");
    let free0: u32 = stats.split(" free inodes").next().and_then(|s| s.rsplit(' ').next()?.parse().ok()).unwrap();
    debugfs_w(&img, &format!("set_bg 0 free_inodes_count {}", free0 - 1));
    debugfs_w(&img, "set_bg 0 checksum calc");
    fsck_clean(&img);
}

/// An inode bitmap that disagrees with its descriptor's free count: the
/// kernel marks the group corrupt and allocates from the next one; so
/// does uext4 (before, every create that reached the group failed), and
/// the error is recorded in the superblock.
#[test]
fn inode_group_whose_bitmap_disagrees_is_skipped() {
    let Some((_d, img)) = mkfs(8, &["-b", "1024", "-g", "2048", "-N", "256"]) else { return };
    let stats = debugfs(&img, "stats");
    let free0: u32 = stats.split(" free inodes").next().and_then(|s| s.rsplit(' ').next()?.parse().ok()).unwrap();
    debugfs_w(&img, &format!("set_bg 0 free_inodes_count {}", free0 - 1));
    debugfs_w(&img, "set_bg 0 checksum calc");
    let ipg: u32 =
        stats.split("Inodes per group:").nth(1).and_then(|s| s.split_whitespace().next()?.parse().ok()).unwrap();
    let fs = Filesystem::open_rw(&img).unwrap();
    fs.write("/f", b"data").unwrap();
    let ino = fs.resolve("/f").unwrap();
    assert!((ino - 1) / ipg > 0, "inode {ino} is from the corrupt group 0");
    assert_eq!(fs.detected_errors(), 1);
    drop(fs);
    let out = Command::new("dumpe2fs").arg("-h").arg(&img).output().unwrap();
    let header = String::from_utf8_lossy(&out.stdout);
    assert!(header.contains("FS Error count:           1"), "{header}");
    assert_eq!(Filesystem::open(&img).unwrap().read("/f").unwrap(), b"data");
    debugfs_w(&img, &format!("set_bg 0 free_inodes_count {free0}"));
    debugfs_w(&img, "set_bg 0 checksum calc");
    fsck_clean(&img);
}
