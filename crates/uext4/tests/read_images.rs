//! Images made by `mkfs.ext4 -d` from generated trees, read back through
//! uext4 and compared with the source (names, types, contents byte for
//! byte, symlink targets, xattrs, hard links) and with `debugfs -R stat`
//! (every stat field of every inode).
//!
//! Each `variant_*` test checks one image variant (block size, features
//! off, ext2/ext3 layouts, hash algorithms: see `common::VARIANTS`); the
//! other tests reuse the images for path resolution edge cases, error
//! cases and concurrent readers. Without e2fsprogs the tests print SKIP
//! and pass.

mod common;

use common::*;
use std::collections::HashMap;
use std::path::PathBuf;
use uext4::{Error, FileType, Filesystem};

#[test]
fn variant_ext4_4k() {
    check_variant("ext4_4k");
}

#[test]
fn variant_ext4_1k() {
    check_variant("ext4_1k");
}

#[test]
fn variant_ext4_2k() {
    check_variant("ext4_2k");
}

#[test]
fn variant_ext4_4k_no_metadata_csum() {
    check_variant("ext4_4k_no_metadata_csum");
}

#[test]
fn variant_ext4_4k_no_64bit() {
    check_variant("ext4_4k_no_64bit");
}

#[test]
fn variant_ext4_1k_no_flex_bg() {
    check_variant("ext4_1k_no_flex_bg");
}

#[test]
fn variant_ext2_1k() {
    check_variant("ext2_1k");
}

#[test]
fn variant_ext2_4k_128_inodes_no_filetype() {
    check_variant("ext2_4k_128_inodes_no_filetype");
}

#[test]
fn variant_ext3_2k() {
    check_variant("ext3_2k");
}

#[test]
fn variant_ext4_4k_gdt_csum() {
    check_variant("ext4_4k_gdt_csum");
}

#[test]
fn variant_ext4_4k_no_dir_index() {
    check_variant("ext4_4k_no_dir_index");
}

#[test]
fn variant_ext4_4k_tea_unsigned() {
    check_variant("ext4_4k_tea_unsigned");
}

#[test]
fn variant_ext4_1k_legacy_hash() {
    check_variant("ext4_1k_legacy_hash");
}

#[test]
fn variant_ext4_1k_meta_bg() {
    check_variant("ext4_1k_meta_bg");
}

#[test]
fn variant_ext4_4k_bigalloc() {
    check_variant("ext4_4k_bigalloc");
}

#[test]
fn variant_ext4_4k_misc_features() {
    check_variant("ext4_4k_misc_features");
}

#[test]
fn variant_ext4_64k() {
    check_variant("ext4_64k");
}

/// Extent trees of depth 2 from mkfs (sparse/many), and block maps with
/// double and triple indirect blocks (ext2: big file and sparse/far), read
/// through the mapping API as well as read().
#[test]
fn mapping_depths() {
    if !have_e2fsprogs() {
        return;
    }
    for name in ["ext4_4k", "ext4_1k", "ext2_1k"] {
        let img = image(name);
        let fs = Filesystem::open(&img.path).unwrap();
        let ino = fs.resolve("/sparse/many").unwrap();
        let runs = fs.extents(ino).unwrap();
        let bs = u64::from(fs.block_size());
        // Every island is its own run of 4096 bytes at i * 8192.
        let mut islands = Vec::new();
        for m in &runs {
            assert!(matches!(m.kind, uext4::inode_api::MapKind::Mapped(_)), "{name}: {m:?}");
            let (s, e) = (m.lblk.byte_offset(bs), m.end().byte_offset(bs));
            islands.push((s, e));
        }
        let covered: u64 = islands.iter().map(|(s, e)| e - s).sum();
        assert_eq!(covered, MANY_ISLANDS * 4096, "{name}: mapped bytes of sparse/many");
        for (s, e) in &islands {
            assert!(s / 8192 == (e - 1) / 8192 && s % 8192 < 4096, "{name}: run {s}..{e} crosses a hole");
        }
        if img.has("extent") {
            let out = debugfs(&img.path, &["ex /sparse/many".to_string()]);
            let depth = out
                .lines()
                .find_map(|l| {
                    let l = l.trim_start();
                    let (_, rest) = l.split_once('/')?;
                    rest.split_whitespace().next()?.parse::<u32>().ok()
                })
                .unwrap();
            assert!(depth >= 2, "{name}: sparse/many extent tree depth {depth}, want >= 2\n{out}");
        } else {
            let out = debugfs(&img.path, &["blocks /sparse/far".to_string(), "stat /sparse/far".to_string()]);
            assert!(out.contains("(TIND)"), "{name}: sparse/far has no triple-indirect block");
            let out = debugfs(&img.path, &["stat /big/file_50m".to_string()]);
            assert!(out.contains("(DIND)"), "{name}: big file has no double-indirect block");
        }
    }
}

/// Small xattrs live in the inode body (when inodes have room), large
/// ones in the xattr block; both read back (the value check itself is in
/// every variant's walk).
#[test]
fn xattr_placement() {
    if !have_e2fsprogs() {
        return;
    }
    for name in ["ext4_4k", "ext4_1k", "ext2_4k_128_inodes_no_filetype"] {
        let img = image(name);
        let fs = Filesystem::open(&img.path).unwrap();
        let small = fs.inode(fs.resolve("/xattr/small").unwrap()).unwrap();
        let large = fs.inode(fs.resolve("/xattr/large").unwrap()).unwrap();
        assert_ne!(large.file_acl, 0, "{name}: the large xattr is not in a block");
        let in_inode = small.xattr_area().get(..4).map(|m| u32::from_le_bytes(m.try_into().unwrap()));
        if fs.superblock().inode_size > 128 {
            assert_eq!(in_inode, Some(0xEA02_0000), "{name}: no in-inode xattrs on xattr/small");
        } else {
            assert_eq!(in_inode, None, "{name}: 128-byte inodes have no xattr area");
            assert_ne!(small.file_acl, 0, "{name}: small xattrs must be in the block");
        }
        assert_eq!(
            fs.get_xattr(large.ino, "user.big").unwrap(),
            content(33, img.tree.spec.xattr_large),
            "{name}: user.big"
        );
        assert_eq!(fs.get_xattr(small.ino, "user.empty").unwrap(), b"", "{name}: empty value");
    }
}

/// Path resolution: symlinked directories, `..`, absolute and relative
/// targets, loops (ELOOP at the kernel's limit of 40), ENOTDIR,
/// ENAMETOOLONG, and the error cases of the other calls.
#[test]
fn path_edge_cases() {
    if !have_e2fsprogs() {
        return;
    }
    let img = image("ext4_4k");
    let fs = Filesystem::open(&img.path).unwrap();
    let r = |p: &str| fs.resolve(p).unwrap_or_else(|e| panic!("resolve {p:?}: {e}"));
    let rf = |p: &str| fs.resolve_follow(p).unwrap_or_else(|e| panic!("resolve_follow {p:?}: {e}"));

    let root = fs.root();
    assert_eq!(r("/"), root);
    assert_eq!(r(""), root);
    assert_eq!(r("/.."), root);
    assert_eq!(r("/../../.."), root);
    assert_eq!(r("//deep///d01/./"), r("/deep/d01"));
    assert_eq!(r("deep/d01"), r("/deep/d01"));

    // The 30-level path, and `..` all the way back up.
    let mut deep = String::from("/deep");
    for i in 1..=DEEP_LEVELS {
        deep.push_str(&format!("/d{i:02}"));
    }
    let leaf = r(&format!("{deep}/leaf.txt"));
    assert_eq!(fs.read_all(leaf).unwrap(), b"bottom of the deep tree\n");
    let up = format!("{deep}{}", "/..".repeat(DEEP_LEVELS));
    assert_eq!(r(&up), r("/deep"));
    assert_eq!(r("/deep/d01/d02/../d02/d03/.."), r("/deep/d01/d02"));

    // Symlinks to directories, in the middle and at the end of paths.
    let d02 = r("/deep/d01/d02");
    let dirlink = r("/links/dirlink");
    assert_ne!(dirlink, d02);
    assert_eq!(fs.stat(dirlink).unwrap().file_type, FileType::Symlink);
    assert_eq!(rf("/links/dirlink"), d02);
    assert_eq!(r("/links/dirlink/d03"), r("/deep/d01/d02/d03"));
    // `..` after a symlinked directory is the target's parent (POSIX).
    assert_eq!(r("/links/dirlink/.."), r("/deep/d01"));
    assert_eq!(rf("/links/abs"), r("/deep/d01"));
    assert_eq!(r("/links/abs/d02/d03"), r("/deep/d01/d02/d03"));
    assert_eq!(rf("/links/dotdot"), r("/deep/d01/d02/d03"));
    assert_eq!(rf("/links/fast"), r("/sizes/size_1"));

    // Chains: 40 follows resolve, 41 are ELOOP; loops are ELOOP.
    assert_eq!(rf("/links/chain/c01"), r("/sizes/size_2"));
    assert!(matches!(fs.resolve_follow("/links/chain/c00"), Err(Error::Loop(_))));
    assert_eq!(fs.stat(r("/links/chain/c00")).unwrap().file_type, FileType::Symlink);
    for p in ["/links/loop1", "/links/self"] {
        assert!(matches!(fs.resolve_follow(p), Err(Error::Loop(_))), "{p}");
        assert_eq!(fs.stat(r(p)).unwrap().file_type, FileType::Symlink, "{p} without following");
        let e = fs.resolve(format!("{p}/x")).unwrap_err();
        assert!(matches!(e, Error::Loop(_)), "{p}/x: {e:?}");
        assert_eq!(e.errno(), libc::ELOOP);
    }

    // Dangling symlinks.
    assert!(matches!(fs.resolve_follow("/links/dangling"), Err(Error::NotFound(_))));
    assert_eq!(fs.stat(r("/links/dangling")).unwrap().file_type, FileType::Symlink);

    // ENOTDIR, ENOENT, ENAMETOOLONG.
    for p in ["/sizes/size_1/x", "/sizes/size_1/..", "/links/fast/x", "/special/null/x"] {
        let e = fs.resolve(p).unwrap_err();
        assert!(matches!(e, Error::NotDir(_)), "{p}: {e:?}");
        assert_eq!(e.errno(), libc::ENOTDIR);
    }
    for p in ["/nonexistent", "/deep/d01/nonexistent/x", "/sizes/size_"] {
        let e = fs.resolve(p).unwrap_err();
        assert!(matches!(e, Error::NotFound(_)), "{p}: {e:?}");
        assert_eq!(e.errno(), libc::ENOENT);
    }
    let long = "n".repeat(256);
    for p in [format!("/{long}"), format!("/names/{long}"), format!("/{long}/x")] {
        let e = fs.resolve(&p).unwrap_err();
        assert!(matches!(e, Error::NameTooLong(_)), "{p}: {e:?}");
        assert_eq!(e.errno(), libc::ENAMETOOLONG);
    }
    assert!(matches!(fs.lookup(root, long.as_bytes()), Err(Error::NameTooLong(_))));
    // 255 bytes is fine: found (UTF-8 and ASCII) or absent.
    let names = r("/names");
    let utf8 = fs.lookup(names, &utf8_255()).unwrap();
    assert_eq!(fs.read_all(utf8).unwrap(), b"utf8 255\n");
    let mut p = b"/names/".to_vec();
    p.extend_from_slice(&utf8_255());
    assert_eq!(fs.resolve(&p).unwrap(), utf8);
    assert_eq!(fs.read_all(r(&format!("/names/{}", "A".repeat(255)))).unwrap(), b"ascii 255\n");
    assert!(matches!(fs.lookup(names, "B".repeat(255).as_bytes()), Err(Error::NotFound(_))));
    assert_eq!(fs.read_all(fs.resolve(b"/names/bad\xff\xfename").unwrap()).unwrap(), b"latin1\n");
    assert_eq!(fs.read_all(r("/names/with space and\nnewline")).unwrap(), b"ws\n");

    // Bad names and wrong file types.
    assert!(matches!(fs.lookup(root, b""), Err(Error::Invalid(_))));
    assert!(matches!(fs.lookup(root, b"a/b"), Err(Error::Invalid(_))));
    assert!(matches!(fs.lookup(root, b"a\0b"), Err(Error::Invalid(_))));
    let file = r("/sizes/size_4096");
    assert!(matches!(fs.lookup(file, b"x"), Err(Error::NotDir(_))));
    assert!(matches!(fs.readdir(file, 0, 10), Err(Error::NotDir(_))));
    assert!(matches!(fs.read_dir_all(file), Err(Error::NotDir(_))));
    assert!(matches!(fs.inodes().read(root, 0, &mut [0u8; 10]), Err(Error::IsDir(_))));
    assert!(matches!(fs.read_all(root), Err(Error::Invalid(_))));
    assert!(matches!(fs.inodes().read(r("/special/fifo"), 0, &mut [0u8; 10]), Err(Error::Invalid(_))));
    assert!(matches!(fs.inodes().read(r("/links/fast"), 0, &mut [0u8; 10]), Err(Error::Invalid(_))));
    assert!(matches!(fs.readlink(file), Err(Error::Invalid(_))));
    assert!(matches!(fs.readlink(root), Err(Error::Invalid(_))));
    assert!(matches!(fs.get_xattr(file, "user.nope"), Err(Error::NoAttr(_))));
    assert_eq!(fs.list_xattrs(file).unwrap(), Vec::<Vec<u8>>::new());
    let inodes = fs.superblock().inodes_count;
    for bad in [0, inodes + 1, u32::MAX] {
        assert!(matches!(fs.stat(bad), Err(Error::BadInode(_))), "stat({bad})");
        assert!(matches!(fs.inodes().read(bad, 0, &mut [0u8; 4]), Err(Error::BadInode(_))), "read({bad})");
        assert!(matches!(fs.lookup(bad, b"x"), Err(Error::BadInode(_))), "lookup({bad})");
    }
    // An unused inode is an error, not a zeroed stat.
    let free = inodes; // the last inode of a mostly empty filesystem
    assert!(fs.stat(free).is_err(), "stat of an unused inode succeeded");
    // Empty reads.
    assert_eq!(fs.inodes().read(file, 0, &mut []).unwrap(), 0);
    assert_eq!(fs.inodes().read(r("/sizes/size_0"), 0, &mut [0u8; 8]).unwrap(), 0);
}

/// A path with a trailing slash names a directory: POSIX path resolution
/// fails with ENOTDIR on a non-directory and follows a final symlink.
#[test]
fn trailing_slash() {
    if !have_e2fsprogs() {
        return;
    }
    let img = image("ext4_4k");
    let fs = Filesystem::open(&img.path).unwrap();
    assert_eq!(fs.resolve("/deep/d01/").unwrap(), fs.resolve("/deep/d01").unwrap());
    let e = fs.resolve("/sizes/size_1/");
    assert!(matches!(e, Err(Error::NotDir(_))), "resolve(\"/sizes/size_1/\") = {e:?}");
    let e = fs.resolve("/links/file_slash").map(|i| fs.stat(i).unwrap().file_type);
    assert_eq!(e.ok(), Some(FileType::Symlink));
    let e = fs.resolve_follow("/links/file_slash");
    assert!(matches!(e, Err(Error::NotDir(_))), "symlink to \"size_1/\" = {e:?}");
    assert_eq!(fs.resolve("/links/dirlink/").unwrap(), fs.resolve("/deep/d01/d02").unwrap());
}

/// `.` and `..` looked up by name, in linear and in hash-indexed
/// directories (where they live in the index root block, outside every
/// leaf the hash can lead to; the kernel scans block 0 for them).
#[test]
fn dot_and_dotdot_lookup() {
    if !have_e2fsprogs() {
        return;
    }
    let mut failures = Vec::new();
    for name in ["ext4_4k", "ext4_1k", "ext4_4k_no_dir_index"] {
        let img = image(name);
        let fs = Filesystem::open(&img.path).unwrap();
        let root = fs.root();
        for dir in ["/bigdir", "/deep/d01", "/sizes"] {
            let ino = fs.resolve(dir).unwrap();
            let parent = fs.resolve(format!("{dir}/../.")).ok();
            let indexed = fs.stat(ino).unwrap().flags & 0x1000 != 0;
            let dot = fs.lookup(ino, b".");
            let dotdot = fs.lookup(ino, b"..");
            let up = fs.resolve(format!("{dir}/.."));
            let want_parent = if dir == "/bigdir" || dir == "/sizes" { root } else { fs.resolve("/deep").unwrap() };
            if dot.as_ref().ok() != Some(&ino)
                || dotdot.as_ref().ok() != Some(&want_parent)
                || up.as_ref().ok() != Some(&want_parent)
            {
                failures.push(format!(
                    "{name} {dir} (indexed: {indexed}): lookup(\".\") = {dot:?}, lookup(\"..\") = {dotdot:?}, \
                     resolve(\"{dir}/..\") = {up:?}, parent via \"{dir}/../.\" = {parent:?}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Filesystems shared by 8 threads reading at once: the files and the
/// 50 MiB file of the 4k image, the 20,000-entry directory (two htree
/// levels) of the 1k image.
#[test]
fn concurrent_readers() {
    if !have_e2fsprogs() {
        return;
    }
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Filesystem>();
    let img = image("ext4_4k");
    let dir_img = image("ext4_1k");
    let fs = Filesystem::open(&img.path).unwrap();
    let dfs = Filesystem::open(&dir_img.path).unwrap();
    // Expected results, computed single-threaded from the source.
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for n in sizes() {
        let p = format!("/sizes/size_{n}");
        files.push((p.clone(), std::fs::read(img.tree.root.join(&p[1..])).unwrap()));
    }
    for p in ["/hard/a", "/sparse/holes", "/sparse/many", "/deep/d01/hard_c", "/xattr/small"] {
        files.push((p.to_string(), std::fs::read(img.tree.root.join(&p[1..])).unwrap()));
    }
    let big = std::fs::read(img.tree.root.join("big/file_50m")).unwrap();
    let bigdir = dfs.resolve("/bigdir").unwrap();
    let expected_dir: HashMap<Vec<u8>, u32> =
        dfs.read_dir_all(bigdir).unwrap().into_iter().map(|e| (e.name, e.ino)).collect();
    assert_eq!(expected_dir.len(), 20_002);
    let (fs, dfs, files, big, expected_dir) = (&fs, &dfs, &files, &big, &expected_dir);
    std::thread::scope(|s| {
        for t in 0..8u64 {
            s.spawn(move || {
                let mut rng = Rng::new(t);
                for round in 0..3 {
                    // Whole files, in a per-thread order.
                    let mut order: Vec<usize> = (0..files.len()).collect();
                    for i in (1..order.len()).rev() {
                        order.swap(i, rng.below(i as u64 + 1) as usize);
                    }
                    for &i in &order {
                        let (p, want) = &files[i];
                        let ino = fs.resolve(p).unwrap();
                        assert!(fs.read_all(ino).unwrap() == *want, "thread {t}: {p}");
                    }
                    // Random slices of the big file.
                    let ino = fs.resolve("/big/file_50m").unwrap();
                    for _ in 0..200 {
                        let off = rng.below(big.len() as u64) as usize;
                        let len = (1 + rng.below(300_000) as usize).min(big.len() - off);
                        let mut buf = vec![0u8; len];
                        assert_eq!(fs.inodes().read(ino, off as u64, &mut buf).unwrap(), len);
                        assert!(buf[..] == big[off..off + len], "thread {t}: big file at {off}+{len}");
                    }
                    // A share of the big directory through lookups, and a
                    // full listing.
                    let names: Vec<&Vec<u8>> =
                        expected_dir.keys().filter(|n| n.as_slice() != b"." && n.as_slice() != b"..").collect();
                    for n in names.iter().skip((t as usize + round) % 8).step_by(8) {
                        assert_eq!(dfs.lookup(bigdir, n).unwrap(), expected_dir[*n], "thread {t}");
                    }
                    let listing = dfs.read_dir_all(bigdir).unwrap();
                    assert_eq!(listing.len(), expected_dir.len(), "thread {t}");
                    for e in &listing {
                        assert_eq!(expected_dir.get(&e.name), Some(&e.ino), "thread {t}");
                    }
                    // Deep path and xattrs.
                    let mut deep = PathBuf::from("/deep");
                    for i in 1..=DEEP_LEVELS {
                        deep.push(format!("d{i:02}"));
                    }
                    deep.push("leaf.txt");
                    let leaf = fs.resolve(deep.to_str().unwrap()).unwrap();
                    assert_eq!(fs.read_all(leaf).unwrap(), b"bottom of the deep tree\n");
                    let x = fs.resolve("/xattr/large").unwrap();
                    assert_eq!(fs.get_xattr(x, "user.big").unwrap(), content(33, img.tree.spec.xattr_large));
                }
            });
        }
    });
    // Read the whole big file once more in one call.
    let ino = fs.resolve("/big/file_50m").unwrap();
    assert!(fs.read_all(ino).unwrap() == *big);
}

/// The debugfs parser itself, on a fixed sample.
#[test]
fn debugfs_stat_parser() {
    let sample = "debugfs: stat <13>\n\
Inode: 13   Type: block special    Mode:  4644   Flags: 0x80000\n\
Generation: 7    Version: 0x00000001:00000002\n\
User: 70000   Group:     5   Project:     9   Size: 1234567890123\n\
File ACL: 4567\n\
Links: 2   Blockcount: 18\n\
Fragment:  Address: 0    Number: 0    Size: 0\n\
 ctime: 0x6b027bc4:00000001 -- x\n\
 atime: 0x80000000:00000003 -- x\n\
 mtime: 0xffffffff:00000004 -- x\n\
crtime: 0x00000001:ee6b27fc -- x\n\
Size of extra inode fields: 32\n\
(New-style) Device major/minor number: 259:70000 (hex 103:11170)\n\
debugfs: stat <14>\n\
Inode: 14   Type: symlink    Mode:  0777   Flags: 0x0\n\
Generation: 0    Version: 0x00000000\n\
User:     0   Group:     0   Size: 1\n\
File ACL: 0\n\
Links: 1   Blockcount: 0\n\
ctime: 0x00000010 -- x\n\
atime: 0x00000011 -- x\n\
mtime: 0x00000012 -- x\n\
Fast link dest: \"a b\"\n";
    let m = parse_debugfs_stats(sample);
    let a = &m[&13];
    assert_eq!(a.type_name, "block special");
    assert_eq!(a.perm, 0o4644);
    assert_eq!(a.flags, 0x80000);
    assert_eq!(a.generation, 7);
    assert_eq!(a.version, (1 << 32) | 2);
    assert_eq!((a.uid, a.gid, a.projid, a.size), (70000, 5, Some(9), 1234567890123));
    assert_eq!((a.file_acl, a.links, a.blockcount), (4567, 2, 18));
    assert_eq!(a.ctime, uext4::Timestamp { sec: 0x6b027bc4 + (1 << 32), nsec: 0 });
    assert_eq!(a.atime, uext4::Timestamp { sec: -(1 << 31) + (3 << 32), nsec: 0 });
    assert_eq!(a.mtime, uext4::Timestamp { sec: -1, nsec: 1 });
    assert_eq!(a.crtime, Some(uext4::Timestamp { sec: 1, nsec: 999_999_999 }));
    assert_eq!(a.extra_isize, Some(32));
    assert_eq!(a.device, Some((259, 70000)));
    let b = &m[&14];
    assert_eq!(b.version, 0);
    assert_eq!(b.projid, None);
    assert_eq!(b.crtime, None);
    assert_eq!(b.ctime, uext4::Timestamp { sec: 16, nsec: 0 });
    assert_eq!(b.fast_link.as_deref(), Some(&b"a b"[..]));
}
