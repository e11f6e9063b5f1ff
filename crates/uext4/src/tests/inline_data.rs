//! inline_data images: files, symlinks and directories kept in the inode
//! (`i_block` + `system.data`), read exactly as mke2fs and the kernel wrote
//! them; writes that convert files to extents, truncates, directory
//! inserts (in place, then converted to a block), removals and renames;
//! every written image is checked by `e2fsck -fn` and read back by the
//! kernel (root and loop devices; skipped otherwise).

use super::rw_support;

use rw_support::{fsck_clean, have, kernel_unavailable, pattern, KernelMount};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use uext4::format::inode::{FL_EXTENTS, FL_INLINE_DATA};
use uext4::fs::ops::{RenameFlags, SetAttr};
use uext4::fs::xattr_ops::XattrSetMode;
use uext4::Filesystem;

/// What a path holds, as compared between trees.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    File(Vec<u8>),
    Link(Vec<u8>),
    Dir,
}

type Tree = BTreeMap<String, Node>;

/// The tree under `dir` of the host's filesystem (lost+found left out).
fn host_tree(dir: &Path) -> Tree {
    fn walk(base: &Path, rel: &str, out: &mut Tree) {
        for e in std::fs::read_dir(base.join(rel)).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            if rel.is_empty() && name == "lost+found" {
                continue;
            }
            let path = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            let ft = e.file_type().unwrap();
            if ft.is_symlink() {
                let t = std::fs::read_link(e.path()).unwrap();
                out.insert(path, Node::Link(t.into_os_string().into_encoded_bytes()));
            } else if ft.is_dir() {
                out.insert(path.clone(), Node::Dir);
                walk(base, &path, out);
            } else {
                out.insert(path, Node::File(std::fs::read(e.path()).unwrap()));
            }
        }
    }
    let mut out = Tree::new();
    walk(dir, "", &mut out);
    out
}

/// The tree as uext4 reads it (lost+found left out); checks "." and ".."
/// of every directory on the way.
fn uext4_tree(fs: &Filesystem) -> Tree {
    fn walk(fs: &Filesystem, ino: u32, parent: u32, rel: &str, out: &mut Tree) {
        let entries = fs.inodes().read_dir_all(ino).unwrap();
        assert_eq!(entries[0].name, b".", "{rel}: first entry");
        assert_eq!(entries[0].ino, ino);
        assert_eq!(entries[1].name, b"..", "{rel}: second entry");
        assert_eq!(entries[1].ino, parent, "{rel}: ..");
        for e in &entries[2..] {
            let name = String::from_utf8(e.name.clone()).unwrap();
            if rel.is_empty() && name == "lost+found" {
                continue;
            }
            assert_eq!(fs.inodes().lookup(ino, &e.name).unwrap(), e.ino, "lookup of {name}");
            let path = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            let st = fs.inodes().stat(e.ino).unwrap();
            match st.file_type {
                uext4::format::inode::FileType::Directory => {
                    out.insert(path.clone(), Node::Dir);
                    walk(fs, e.ino, ino, &path, out);
                }
                uext4::format::inode::FileType::Symlink => {
                    out.insert(path, Node::Link(fs.inodes().readlink(e.ino).unwrap()));
                }
                _ => {
                    out.insert(path, Node::File(fs.inodes().read_all(e.ino).unwrap()));
                }
            }
        }
    }
    let mut out = Tree::new();
    walk(fs, 2, 2, "", &mut out);
    out
}

fn assert_same(got: &Tree, want: &Tree, what: &str) {
    let gk: Vec<_> = got.keys().collect();
    let wk: Vec<_> = want.keys().collect();
    assert_eq!(gk, wk, "{what}: names differ");
    for (k, v) in want {
        assert!(got[k] == *v, "{what}: {k} differs");
    }
}

/// A source tree with inline-sized and bigger files, symlinks of every
/// kind, a small directory and one too big to stay inline.
fn source_tree(root: &Path) {
    std::fs::create_dir_all(root.join("small")).unwrap();
    std::fs::create_dir_all(root.join("big")).unwrap();
    std::fs::create_dir_all(root.join("small/empty")).unwrap();
    std::fs::create_dir_all(root.join("empty2")).unwrap();
    for (i, len) in [0usize, 1, 59, 60, 61, 100, 150, 5000].into_iter().enumerate() {
        std::fs::write(root.join(format!("f{len}")), pattern(i as u64 + 1, len)).unwrap();
    }
    std::fs::write(root.join("small/a"), b"alpha").unwrap();
    std::fs::write(root.join("small/b"), pattern(9, 90)).unwrap();
    for i in 0..40 {
        std::fs::write(root.join(format!("big/entry-with-a-longish-name-{i:03}")), pattern(100 + i, i as usize))
            .unwrap();
    }
    std::os::unix::fs::symlink("short", root.join("l10")).unwrap();
    std::os::unix::fs::symlink("m".repeat(80), root.join("l80")).unwrap();
    std::os::unix::fs::symlink("x".repeat(300), root.join("l300")).unwrap();
}

/// `mkfs.ext4 -O inline_data -d` of [`source_tree`] (256-byte inodes);
/// returns the temp dir, the image and the source path.
fn image() -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    if !have("mkfs.ext4") || !have("e2fsck") {
        eprintln!("SKIP: e2fsprogs not installed");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    source_tree(&src);
    let img = dir.path().join("img");
    std::fs::File::create(&img).unwrap().set_len(32 << 20).unwrap();
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096", "-I", "256", "-O", "inline_data,metadata_csum"])
        .arg("-d")
        .arg(&src)
        .arg(&img)
        .output()
        .unwrap();
    assert!(out.status.success(), "mkfs.ext4: {}", String::from_utf8_lossy(&out.stderr));
    fsck_clean(&img);
    Some((dir, img, src))
}

fn flags(fs: &Filesystem, path: &str) -> u32 {
    fs.inodes().stat(fs.inodes().resolve(path).unwrap()).unwrap().flags
}

fn kernel_tree(img: &Path) -> Option<Tree> {
    if let Some(why) = kernel_unavailable() {
        eprintln!("SKIP: kernel read-back: {why}");
        return None;
    }
    let m = KernelMount::new(img, "ro").unwrap_or_else(|e| panic!("kernel refused {}: {e}", img.display()));
    let t = host_tree(m.path());
    m.unmount();
    Some(t)
}

#[test]
fn reads_mke2fs_inline_tree() {
    let Some((_d, img, src)) = image() else { return };
    let want = host_tree(&src);
    let fs = Filesystem::open(&img).unwrap();
    // mke2fs made the small things inline (what this test is about).
    for p in ["f1", "f59", "f100", "small", "l80"] {
        assert_ne!(flags(&fs, p) & FL_INLINE_DATA, 0, "{p} is not inline");
    }
    assert_eq!(flags(&fs, "big") & FL_INLINE_DATA, 0);
    assert_same(&uext4_tree(&fs), &want, "read-only open");
    let ino = fs.inodes().resolve("f100").unwrap();
    assert_eq!(fs.inodes().seek_data(ino, 10).unwrap(), Some(10));
    assert_eq!(fs.inodes().seek_hole(ino, 10).unwrap(), Some(100));
    assert_eq!(fs.inodes().seek_data(ino, 100).unwrap(), None);
    let mut buf = [0u8; 30];
    assert_eq!(fs.inodes().read(ino, 50, &mut buf).unwrap(), 30);
    assert_eq!(&buf[..], &pattern(6, 100)[50..80]);
    assert!(fs.inodes().extents(ino).unwrap().is_empty());
    assert!(!fs.inodes().list_xattrs(ino).unwrap().iter().any(|n| n == b"system.data"));
    drop(fs);
    // The same through a read-write open (page cache and direct paths).
    let fs = Filesystem::open_rw(&img).unwrap();
    assert_same(&uext4_tree(&fs), &want, "read-write open");
    let mut buf = vec![0u8; 200];
    assert_eq!(fs.inodes().read_direct(ino, 0, &mut buf).unwrap(), 100);
    assert_eq!(&buf[..100], &pattern(6, 100)[..]);
    drop(fs);
    fsck_clean(&img);
}

#[test]
fn writes_convert_files_and_truncate() {
    let Some((_d, img, src)) = image() else { return };
    let mut want = host_tree(&src);
    let fs = Filesystem::open_rw(&img).unwrap();
    // Writes and truncates that still fit stay in the inode
    // (system.data grows and shrinks): 63, 30, then 120 bytes.
    let f59 = fs.inodes().resolve("f59").unwrap();
    fs.inodes().write(f59, 59, b"tail").unwrap();
    fs.inodes().setattr(f59, SetAttr { size: Some(30), ..Default::default() }).unwrap();
    fs.inodes().setattr(f59, SetAttr { size: Some(120), ..Default::default() }).unwrap();
    fs.inodes().write(f59, 100, b"twenty bytes at 100!").unwrap();
    if let Some(Node::File(v)) = want.get_mut("f59") {
        v.truncate(30);
        v.resize(100, 0);
        v.extend_from_slice(b"twenty bytes at 100!");
    }
    let f0 = fs.inodes().resolve("f0").unwrap();
    fs.inodes().write(f0, 0, b"was empty").unwrap();
    want.insert("f0".into(), Node::File(b"was empty".to_vec()));
    // A write past what the inode holds: converted to extents.
    let f100 = fs.inodes().resolve("f100").unwrap();
    let more = pattern(77, 9000);
    fs.inodes().write(f100, 100, &more).unwrap();
    if let Some(Node::File(v)) = want.get_mut("f100") {
        v.extend_from_slice(&more);
    }
    // Direct I/O converts too.
    let f61 = fs.inodes().resolve("f61").unwrap();
    fs.inodes().write_direct(f61, 0, &[7u8; 4096]).unwrap();
    want.insert("f61".into(), Node::File(vec![7u8; 4096]));
    // Truncates: shorter, to zero, longer.
    let f150 = fs.inodes().resolve("f150").unwrap();
    fs.inodes().setattr(f150, SetAttr { size: Some(20), ..Default::default() }).unwrap();
    if let Some(Node::File(v)) = want.get_mut("f150") {
        v.truncate(20);
    }
    let f60 = fs.inodes().resolve("f60").unwrap();
    fs.inodes().setattr(f60, SetAttr { size: Some(0), ..Default::default() }).unwrap();
    want.insert("f60".into(), Node::File(Vec::new()));
    let f1 = fs.inodes().resolve("f1").unwrap();
    fs.inodes().setattr(f1, SetAttr { size: Some(3000), ..Default::default() }).unwrap();
    if let Some(Node::File(v)) = want.get_mut("f1") {
        v.resize(3000, 0);
    }
    // Unlinking inline files and symlinks frees no blocks that are not theirs.
    fs.inodes().unlink(2, b"l80").unwrap();
    want.remove("l80");
    let small = fs.inodes().resolve("small").unwrap();
    fs.inodes().unlink(small, b"b").unwrap();
    want.remove("small/b");
    for p in ["f59", "f60"] {
        assert_ne!(flags(&fs, p) & FL_INLINE_DATA, 0, "{p} was converted");
    }
    for p in ["f100", "f61", "f150", "f1"] {
        let fl = flags(&fs, p);
        assert_eq!(fl & FL_INLINE_DATA, 0, "{p} still inline");
        assert_ne!(fl & FL_EXTENTS, 0, "{p} has no extents");
    }
    assert_same(&uext4_tree(&fs), &want, "uext4 after writes");
    fs.inodes().sync().unwrap();
    drop(fs);
    fsck_clean(&img);
    if let Some(k) = kernel_tree(&img) {
        assert_same(&k, &want, "kernel after uext4's writes");
    }
    let fs = Filesystem::open(&img).unwrap();
    assert_same(&uext4_tree(&fs), &want, "uext4 reopened");
}

#[test]
fn inline_dirs_insert_remove_convert_rename() {
    let Some((_d, img, src)) = image() else { return };
    let mut want = host_tree(&src);
    let fs = Filesystem::open_rw(&img).unwrap();
    let small = fs.inodes().resolve("small").unwrap();
    let empty = fs.inodes().resolve("small/empty").unwrap();
    // Remove then add in place: still inline.
    fs.inodes().unlink(small, b"a").unwrap();
    want.remove("small/a");
    fs.inodes().create(small, b"n1", 0o100644, 0, 0).unwrap();
    want.insert("small/n1".into(), Node::File(Vec::new()));
    assert_ne!(flags(&fs, "small") & FL_INLINE_DATA, 0, "small converted early");
    // Rename inside the inline directory, and an inline directory moved
    // to another parent ("..").
    fs.inodes().rename(small, b"n1", small, b"n2", RenameFlags::default()).unwrap();
    want.remove("small/n1");
    want.insert("small/n2".into(), Node::File(Vec::new()));
    let d = fs.inodes().mkdir(2, b"moved", 0o40755, 0, 0).unwrap().ino;
    assert_ne!(flags(&fs, "moved") & FL_INLINE_DATA, 0, "a new directory starts inline, as the kernel's");
    fs.inodes().rename(small, b"empty", d, b"e2", RenameFlags::default()).unwrap();
    want.remove("small/empty");
    want.insert("moved".into(), Node::Dir);
    want.insert("moved/e2".into(), Node::Dir);
    assert_eq!(fs.inodes().lookup(empty, b"..").unwrap(), d);
    // Fill the inline directory until it becomes a block directory; the
    // entries keep their listing positions across the conversion (as the
    // kernel's conversion keeps them), so a listing can go on.
    let mut converted = false;
    for i in 0..30 {
        let before = fs.inodes().read_dir_all(small).unwrap();
        let name = format!("grow-{i:02}-padding-name");
        fs.inodes().create(small, name.as_bytes(), 0o100644, 0, 0).unwrap();
        want.insert(format!("small/{name}"), Node::File(Vec::new()));
        if !converted && flags(&fs, "small") & FL_INLINE_DATA == 0 {
            converted = true;
            let vol = fs.volume().clone();
            let after = uext4::dir::linear_readdir(&vol, &fs.inodes().inode(small).unwrap(), 0, usize::MAX).unwrap();
            let pos = |v: &[uext4::dir::DirEntry]| -> Vec<(Vec<u8>, u64)> {
                v.iter().map(|e| (e.name.clone(), e.next_cookie)).collect()
            };
            let (b, a) = (pos(&before), pos(&after));
            assert_eq!(b[..b.len() - 1], a[..b.len() - 1], "positions changed by the conversion");
        }
    }
    assert!(converted, "small still inline");
    // A file renamed over an entry of an inline directory (replace).
    fs.inodes().create(empty, b"x", 0o100644, 0, 0).unwrap();
    fs.inodes().create(empty, b"y", 0o100644, 0, 0).unwrap();
    fs.inodes().rename(empty, b"x", empty, b"y", RenameFlags::default()).unwrap();
    want.insert("moved/e2/y".into(), Node::File(Vec::new()));
    // rmdir of a directory uext4 made, and of an inline one after an
    // exchange of two inline directories in different parents (both
    // ".." move).
    fs.inodes().mkdir(small, b"gone", 0o40755, 0, 0).unwrap();
    fs.inodes().rmdir(small, b"gone").unwrap();
    let exchange = RenameFlags { exchange: true, ..Default::default() };
    assert_ne!(flags(&fs, "empty2") & FL_INLINE_DATA, 0);
    assert_ne!(flags(&fs, "moved/e2") & FL_INLINE_DATA, 0);
    fs.inodes().rename(2, b"empty2", d, b"e2", exchange).unwrap();
    want.remove("moved/e2/y");
    want.insert("empty2/y".into(), Node::File(Vec::new()));
    fs.inodes().rmdir(d, b"e2").unwrap();
    want.remove("moved/e2");
    assert_same(&uext4_tree(&fs), &want, "uext4 after directory changes");
    fs.inodes().sync().unwrap();
    drop(fs);
    fsck_clean(&img);
    if let Some(k) = kernel_tree(&img) {
        assert_same(&k, &want, "kernel after uext4's directory changes");
    }
}

#[test]
fn reads_kernel_written_inline_tree() {
    if let Some(why) = kernel_unavailable() {
        eprintln!("SKIP: {why}");
        return;
    }
    let Some((_d, img)) = rw_support::mkfs(32, &["-b", "4096", "-I", "256", "-O", "inline_data"]) else { return };
    let m = KernelMount::new(&img, "").unwrap_or_else(|e| panic!("mount: {e}"));
    let root = m.path();
    std::fs::create_dir_all(root.join("kd/sub")).unwrap();
    for (i, len) in [3usize, 40, 60, 100, 140, 2000].into_iter().enumerate() {
        std::fs::write(root.join(format!("kd/k{len}")), pattern(50 + i as u64, len)).unwrap();
    }
    std::fs::write(root.join("kd/sub/s"), b"sub").unwrap();
    std::os::unix::fs::symlink("t".repeat(70), root.join("kd/link70")).unwrap();
    for i in 0..12 {
        std::fs::write(root.join(format!("kd/sub/many-{i}")), b"").unwrap();
    }
    let want = host_tree(root);
    m.unmount();
    fsck_clean(&img);
    let fs = Filesystem::open(&img).unwrap();
    assert_ne!(flags(&fs, "kd/k40") & FL_INLINE_DATA, 0, "the kernel wrote k40 as an extent file");
    assert_same(&uext4_tree(&fs), &want, "uext4 reading the kernel's tree");
    drop(fs);
    // uext4 writes to the kernel's inline files and directories.
    let fs = Filesystem::open_rw(&img).unwrap();
    let kd = fs.inodes().resolve("kd").unwrap();
    let k40 = fs.inodes().resolve("kd/k40").unwrap();
    fs.inodes().write(k40, 0, b"uext4").unwrap();
    fs.inodes().create(kd, b"new", 0o100644, 0, 0).unwrap();
    let want2 = uext4_tree(&fs);
    fs.inodes().sync().unwrap();
    drop(fs);
    fsck_clean(&img);
    // The kernel reads uext4's changes, then writes more (to files and
    // directories uext4 converted or left inline), and uext4 reads that.
    let m = KernelMount::new(&img, "").unwrap_or_else(|e| panic!("mount: {e}"));
    let root = m.path();
    assert_same(&host_tree(root), &want2, "kernel reading uext4's changes");
    std::fs::write(root.join("kd/k60"), pattern(7, 90)).unwrap();
    std::fs::OpenOptions::new().append(true).open(root.join("kd/k40")).unwrap().write_all(b" and the kernel").unwrap();
    std::fs::write(root.join("kd/new"), b"kernel data").unwrap();
    std::fs::create_dir(root.join("kd/kdir")).unwrap();
    std::fs::write(root.join("kd/kdir/x"), b"x").unwrap();
    let want3 = host_tree(root);
    m.unmount();
    fsck_clean(&img);
    let fs = Filesystem::open(&img).unwrap();
    assert_same(&uext4_tree(&fs), &want3, "uext4 reading the kernel's second writes");
}

/// Parent path and name of `path` ("" is the root).
fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

fn ino_of(fs: &Filesystem, path: &str) -> u32 {
    if path.is_empty() {
        2
    } else {
        fs.inodes().resolve(path).unwrap_or_else(|e| panic!("resolve {path}: {e}"))
    }
}

/// Random small writes, truncates, creates, unlinks, mkdirs, rmdirs and
/// renames (files and directories, across parents, over existing files)
/// in inline files and directories, against a model of the tree: inline
/// files grow and shrink in place or convert, inline directories fill up
/// and convert. Checked against the model along the way, then by
/// `e2fsck -fn`, a read-only reopen and the kernel.
#[test]
fn random_inline_operations() {
    if !have("mkfs.ext4") || !have("e2fsck") {
        eprintln!("SKIP: e2fsprogs not installed");
        return;
    }
    for seed in [1u64, 2, 3] {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        let mut rng = rw_support::Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        for d in 0..4 {
            std::fs::create_dir_all(src.join(format!("d{d}"))).unwrap();
            for f in 0..2 {
                let len = rng.below(120) as usize;
                std::fs::write(src.join(format!("d{d}/f{f}")), pattern(rng.next(), len)).unwrap();
            }
        }
        let img = dir.path().join("img");
        std::fs::File::create(&img).unwrap().set_len(32 << 20).unwrap();
        // Inline capacity: about 128 bytes, 380 and 890.
        let (bs, isize) = [("4096", "256"), ("1024", "512"), ("1024", "1024")][(seed - 1) as usize];
        let out = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-b", bs, "-I", isize, "-O", "inline_data"])
            .arg("-d")
            .arg(&src)
            .arg(&img)
            .output()
            .unwrap();
        assert!(out.status.success(), "mkfs.ext4: {}", String::from_utf8_lossy(&out.stderr));
        let mut model = host_tree(&src);
        let fs = Filesystem::open_rw(&img).unwrap();
        let c = fs.inodes();
        for step in 0..300 {
            let files: Vec<String> =
                model.iter().filter(|(_, n)| matches!(n, Node::File(_))).map(|(k, _)| k.clone()).collect();
            let mut dirs: Vec<String> =
                model.iter().filter(|(_, n)| **n == Node::Dir).map(|(k, _)| k.clone()).collect();
            dirs.push(String::new());
            let pick = |rng: &mut rw_support::Rng, v: &[String]| v[rng.below(v.len() as u64) as usize].clone();
            let join = |d: &str, n: &str| if d.is_empty() { n.to_string() } else { format!("{d}/{n}") };
            let fresh = |rng: &mut rw_support::Rng, model: &Tree, d: &str| loop {
                let name = format!("n{}-{}", rng.below(1000), "x".repeat(rng.below(12) as usize));
                if !model.contains_key(&join(d, &name)) {
                    break name;
                }
            };
            match rng.below(12) {
                0..=2 if !files.is_empty() => {
                    let p = pick(&mut rng, &files);
                    let far = rng.below(25) == 0;
                    let off = rng.below(if far { 3000 } else { 100 });
                    let data = pattern(rng.next(), 1 + rng.below(40) as usize);
                    c.write(ino_of(&fs, &p), off, &data).unwrap();
                    if let Some(Node::File(v)) = model.get_mut(&p) {
                        let end = off as usize + data.len();
                        if v.len() < end {
                            v.resize(end, 0);
                        }
                        v[off as usize..end].copy_from_slice(&data);
                    }
                }
                3 if !files.is_empty() => {
                    let p = pick(&mut rng, &files);
                    let far = rng.below(25) == 0;
                    let size = rng.below(if far { 5000 } else { 120 });
                    c.setattr(ino_of(&fs, &p), SetAttr { size: Some(size), ..Default::default() }).unwrap();
                    if let Some(Node::File(v)) = model.get_mut(&p) {
                        v.resize(size as usize, 0);
                    }
                }
                4 | 5 => {
                    let d = pick(&mut rng, &dirs);
                    let name = fresh(&mut rng, &model, &d);
                    c.create(ino_of(&fs, &d), name.as_bytes(), 0o100644, 0, 0).unwrap();
                    model.insert(join(&d, &name), Node::File(Vec::new()));
                }
                6 if !files.is_empty() => {
                    let p = pick(&mut rng, &files);
                    let (d, n) = split(&p);
                    c.unlink(ino_of(&fs, d), n.as_bytes()).unwrap();
                    model.remove(&p);
                }
                7 => {
                    let d = pick(&mut rng, &dirs);
                    if rng.below(2) == 0 {
                        let name = fresh(&mut rng, &model, &d);
                        c.mkdir(ino_of(&fs, &d), name.as_bytes(), 0o40755, 0, 0).unwrap();
                        model.insert(join(&d, &name), Node::Dir);
                    } else if !d.is_empty() && !model.keys().any(|k| k.starts_with(&format!("{d}/"))) {
                        let (pd, n) = split(&d);
                        c.rmdir(ino_of(&fs, pd), n.as_bytes()).unwrap();
                        model.remove(&d);
                    }
                }
                8 if !files.is_empty() => {
                    // A file to another (or the same) directory, a new
                    // name or over an existing file.
                    let p = pick(&mut rng, &files);
                    let to_dir = pick(&mut rng, &dirs);
                    let target = if rng.below(3) == 0 {
                        pick(&mut rng, &files)
                    } else {
                        join(&to_dir, &fresh(&mut rng, &model, &to_dir))
                    };
                    let ((sd, sn), (td, tn)) = (split(&p), split(&target));
                    c.rename(ino_of(&fs, sd), sn.as_bytes(), ino_of(&fs, td), tn.as_bytes(), RenameFlags::default())
                        .unwrap();
                    if p != target {
                        let v = model.remove(&p).unwrap();
                        model.insert(target, v);
                    }
                }
                9 => {
                    // A directory to another parent outside its subtree.
                    let d = pick(&mut rng, &dirs);
                    let to = pick(&mut rng, &dirs);
                    if d.is_empty() || to == d || to.starts_with(&format!("{d}/")) {
                        continue;
                    }
                    let name = fresh(&mut rng, &model, &to);
                    let (pd, n) = split(&d);
                    c.rename(ino_of(&fs, pd), n.as_bytes(), ino_of(&fs, &to), name.as_bytes(), RenameFlags::default())
                        .unwrap();
                    let new = join(&to, &name);
                    let moved: Vec<String> =
                        model.keys().filter(|k| **k == d || k.starts_with(&format!("{d}/"))).cloned().collect();
                    for k in moved {
                        let v = model.remove(&k).unwrap();
                        model.insert(format!("{new}{}", &k[d.len()..]), v);
                    }
                }
                10 if !files.is_empty() => {
                    // Direct I/O converts, as in the kernel.
                    let p = pick(&mut rng, &files);
                    let off = rng.below(100);
                    let data = pattern(rng.next(), 1 + rng.below(30) as usize);
                    c.write_direct(ino_of(&fs, &p), off, &data).unwrap();
                    if let Some(Node::File(v)) = model.get_mut(&p) {
                        let end = off as usize + data.len();
                        if v.len() < end {
                            v.resize(end, 0);
                        }
                        v[off as usize..end].copy_from_slice(&data);
                    }
                }
                11 => {
                    // Attributes compete with system.data for the inode
                    // body (set or removed on files and directories).
                    let all: Vec<String> = model.keys().cloned().collect();
                    if let Some(p) = all.get(rng.below(all.len() as u64) as usize) {
                        let ino = ino_of(&fs, p);
                        if rng.below(3) == 0 {
                            let _ = c.remove_xattr(ino, b"user.k");
                        } else {
                            let v = pattern(rng.next(), rng.below(40) as usize);
                            c.set_xattr(ino, b"user.k", &v, XattrSetMode::Any).unwrap();
                        }
                    }
                }
                _ => {}
            }
            if step % 50 == 49 {
                assert_same(&uext4_tree(&fs), &model, &format!("seed {seed} step {step}"));
            }
        }
        assert_same(&uext4_tree(&fs), &model, &format!("seed {seed} at the end"));
        let inline = model.keys().filter(|p| flags(&fs, p) & FL_INLINE_DATA != 0).count();
        eprintln!("seed {seed}: {} names, {inline} inline", model.len());
        drop(fs);
        fsck_clean(&img);
        let fs = Filesystem::open(&img).unwrap();
        assert_same(&uext4_tree(&fs), &model, &format!("seed {seed} reopened"));
        drop(fs);
        if let Some(k) = kernel_tree(&img) {
            assert_same(&k, &model, &format!("seed {seed}: kernel"));
        }
    }
}

/// Every byte of an inline file's, symlink's and directory's inode record
/// changed in turn (without metadata_csum, so the damage is parsed):
/// reading the tree gives data or typed errors, never a panic; so do
/// writes to the damaged inodes through a read-write open (for a sample
/// of the bytes).
#[test]
fn damaged_inline_inodes_give_errors_not_panics() {
    if !have("mkfs.ext4") || !have("debugfs") {
        eprintln!("SKIP: e2fsprogs not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("d/f"), pattern(3, 100)).unwrap();
    std::fs::write(src.join("d/g"), b"g").unwrap();
    std::os::unix::fs::symlink("s".repeat(70), src.join("d/l")).unwrap();
    let img = dir.path().join("img");
    std::fs::File::create(&img).unwrap().set_len(8 << 20).unwrap();
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "1024", "-I", "256", "-O", "inline_data,^metadata_csum"])
        .arg("-d")
        .arg(&src)
        .arg(&img)
        .output()
        .unwrap();
    assert!(out.status.success(), "mkfs.ext4: {}", String::from_utf8_lossy(&out.stderr));
    let base = std::fs::read(&img).unwrap();
    let locate = |path: &str| -> usize {
        // "located at block 1059, offset 0x0b00"
        let text = rw_support::debugfs(&img, &format!("imap {path}"));
        let at = text.split("located at block ").nth(1).unwrap();
        let (blk, rest) = at.split_once(", offset 0x").unwrap();
        let off = usize::from_str_radix(rest.trim(), 16).unwrap();
        blk.trim().parse::<usize>().unwrap() * 1024 + off
    };
    let walk = |fs: &Filesystem| {
        let c = fs.inodes();
        if let Ok(d) = c.resolve("d") {
            let _ = c.read_dir_all(d);
            for n in [&b"f"[..], b"g", b"l", b"x"] {
                if let Ok(i) = c.lookup(d, n) {
                    let _ = c.read_all(i);
                    let _ = c.readlink(i);
                    let _ = c.seek_hole(i, 0);
                    let _ = c.list_xattrs(i);
                }
            }
        }
    };
    let work = dir.path().join("work");
    for path in ["/d", "/d/f", "/d/l"] {
        let at = locate(path);
        // i_size, i_flags, i_block, and the in-inode xattr area.
        // (Every other byte of the two areas, to keep the test quick.)
        let fields = (4..8).chain(0x20..0x24).chain((0x28..0x64).step_by(2)).chain((0xA0..0x100).step_by(2));
        for (k, off) in fields.enumerate() {
            let mut img_bytes = base.clone();
            img_bytes[at + off] ^= [0xFF, 0x01, 0x80, 0x10][k % 4];
            std::fs::write(&work, &img_bytes).unwrap();
            if let Ok(fs) = Filesystem::open(&work) {
                walk(&fs);
            }
            if k % 16 == 0 {
                // Writes to the damaged inodes: errors, not panics.
                if let Ok(fs) = Filesystem::open_rw(&work) {
                    let c = fs.inodes();
                    if let Ok(d) = c.resolve("d") {
                        let _ = c.create(d, b"new-name", 0o100644, 0, 0);
                        let _ = c.unlink(d, b"g");
                        if let Ok(f) = c.lookup(d, b"f") {
                            let _ = c.write(f, 10, b"abc");
                            let _ = c.setattr(f, SetAttr { size: Some(5), ..Default::default() });
                        }
                    }
                    walk(&fs);
                }
            }
        }
    }
}
