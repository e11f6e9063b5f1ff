//! `mkfs`: images we create pass e2fsck, read back through uext4, and
//! (as root) mount in the kernel.

use super::mkfs_support;
use super::rw_support;

use mkfs_support::{dumpe2fs_features, dumpe2fs_fields, set, with};
use rw_support::{fsck_clean, have, KernelMount};
use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use uext4::format::checksum::crc32c;
use uext4::format::orphan_file as of;
use uext4::mkfs::{mkfs_file, Layout, MkfsFeatures, MkfsOptions};
use uext4::Filesystem;

/// Upstream e2fsprogs 1.47's default ext4 set without resize_inode.
const UPSTREAM: &str = "has_journal ext_attr dir_index orphan_file filetype extent 64bit flex_bg \
                        metadata_csum_seed sparse_super large_file huge_file dir_nlink extra_isize metadata_csum";
/// The set before orphan_file and metadata_csum_seed became defaults.
const OLD: &str = "has_journal ext_attr dir_index filetype extent 64bit flex_bg sparse_super large_file huge_file \
                   dir_nlink extra_isize metadata_csum";

#[test]
fn fresh_images_are_clean() {
    if !have("e2fsck") {
        eprintln!("SKIP: e2fsck not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, MkfsOptions)> = vec![
        ("64m", MkfsOptions { size: 64 << 20, ..Default::default() }),
        ("5m", MkfsOptions { size: 5 << 20, ..Default::default() }),
        ("600m", MkfsOptions { size: 600 << 20, ..Default::default() }),
        ("2k", MkfsOptions { size: 100 << 20, block_size: Some(2048), ..Default::default() }),
        ("nocsum", MkfsOptions { size: 64 << 20, features: with("^metadata_csum"), ..Default::default() }),
        ("no64", MkfsOptions { size: 300 << 20, features: with("^64bit,^flex_bg"), ..Default::default() }),
        (
            "nojournal",
            MkfsOptions { size: 64 << 20, journal_blocks: Some(0), label: "data".into(), ..Default::default() },
        ),
        ("odd", MkfsOptions { size: (300 << 20) + 12345, inode_size: Some(128), ..Default::default() }),
        ("big", MkfsOptions { size: 20 << 30, ..Default::default() }),
        // 65528 blocks per group at most, an inode per block, as mke2fs.
        ("64k", MkfsOptions { size: 5 << 30, block_size: Some(65536), ..Default::default() }),
        (
            "64k-ext2",
            MkfsOptions {
                size: 512 << 20,
                block_size: Some(65536),
                features: MkfsFeatures::for_type("ext2").unwrap(),
                ..Default::default()
            },
        ),
    ];
    for (name, opts) in cases {
        let img = dir.path().join(name);
        mkfs_file(&img, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
        fsck_clean(&img);
        let fs = uext4::Filesystem::open(&img).unwrap();
        let names: Vec<_> = fs.read_dir_all(fs.root()).unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, vec![b".".to_vec(), b"..".to_vec(), b"lost+found".to_vec()], "{name}");
        assert!(fs.notices().is_empty(), "{name}: {:?}", fs.notices());
        std::fs::remove_file(&img).unwrap();
    }
}

/// The kernel mounts what we made, writes into it, and e2fsck is still
/// happy afterwards.
#[test]
fn kernel_mounts_and_writes() {
    if !have("e2fsck") {
        eprintln!("SKIP: kernel_mounts_and_writes needs e2fsprogs");
        return;
    }
    if !rw_support::require_loop_mount() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for (name, opts) in [
        ("k1", MkfsOptions { size: 64 << 20, ..Default::default() }),
        ("k4", MkfsOptions { size: 1 << 30, ..Default::default() }),
        ("knocsum", MkfsOptions { size: 64 << 20, features: with("^metadata_csum"), ..Default::default() }),
    ] {
        let img = dir.path().join(name);
        mkfs_file(&img, &opts).unwrap();
        let m = KernelMount::new(&img, "").unwrap_or_else(|e| panic!("{name}: the kernel refused the image: {e}"));
        let mnt = m.path().to_path_buf();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
        std::fs::create_dir(mnt.join("d")).unwrap();
        std::fs::write(mnt.join("d/f"), &data).unwrap();
        for i in 0..300 {
            std::fs::write(mnt.join(format!("d/small{i}")), format!("{i}")).unwrap();
        }
        // Held open across its unlink: an orphan (in the orphan file by
        // default), deleted at the close.
        let mut held = std::fs::File::create(mnt.join("held")).unwrap();
        held.write_all(&data[..200_000]).unwrap();
        held.sync_all().unwrap();
        std::fs::remove_file(mnt.join("held")).unwrap();
        held.write_all(&data[..100_000]).unwrap();
        held.sync_all().unwrap();
        drop(held);
        m.unmount();
        fsck_clean(&img);
        let fs = uext4::Filesystem::open(&img).unwrap();
        assert_eq!(fs.read_all(fs.resolve("/d/f").unwrap()).unwrap(), data, "{name}");
        assert_eq!(fs.read_all(fs.resolve("/d/small299").unwrap()).unwrap(), b"299", "{name}");
    }
}

/// Every inode of a real mkfs.ext4 -d image re-encodes to the very same
/// bytes (fields and checksum).
#[test]
fn inode_encode_round_trips() {
    if !have("mkfs.ext4") {
        eprintln!("SKIP: mkfs.ext4 not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("a/b")).unwrap();
    std::fs::write(src.join("a/f"), vec![7u8; 100_000]).unwrap();
    std::os::unix::fs::symlink("a/f", src.join("l")).unwrap();
    for (name, args) in [("csum", vec![]), ("nocsum", vec!["-O", "^metadata_csum"]), ("128", vec!["-I", "128"])] {
        let img = dir.path().join(name);
        let st = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-d"])
            .arg(&src)
            .args(&args)
            .arg(&img)
            .arg("32M")
            .status()
            .unwrap();
        assert!(st.success());
        let fs = uext4::Filesystem::open(&img).unwrap();
        let sb = fs.superblock().clone();
        let mut checked = 0;
        for ino in 1..=sb.inodes_count.min(200) {
            let Ok(mut i) = uext4::inode::read_inode(fs.volume(), ino) else { continue };
            if i.raw.iter().all(|&b| b == 0) {
                continue;
            }
            let before = i.raw.clone();
            let after = i.encode(&sb).unwrap().to_vec();
            assert_eq!(before, after, "{name}: inode {ino} re-encodes differently");
            checked += 1;
        }
        assert!(checked >= 8, "{name}: only {checked} inodes");
    }
}

/// A default image has exactly upstream mke2fs's default features (less
/// resize_inode), its orphan file (inode 12, sized as mke2fs sizes it,
/// every block an empty slot array with a valid tail) and a stored
/// checksum seed of crc32c(~0, uuid); uext4 writes into it read-write
/// (a file unlinked while open included) and e2fsck stays clean. `-O
/// ^orphan_file,^metadata_csum_seed` gives the set of before.
#[test]
fn default_features_are_upstreams() {
    if !have("e2fsck") || !have("dumpe2fs") {
        eprintln!("SKIP: e2fsprogs not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for (size, orphan_blocks) in [(64u64 << 20, 32u64), (1 << 30, 64)] {
        let img = dir.path().join("default");
        let l = mkfs_file(&img, &MkfsOptions { size, ..Default::default() }).unwrap();
        assert_eq!(dumpe2fs_features(&img), set(UPSTREAM));
        fsck_clean(&img);
        let fs = Filesystem::open(&img).unwrap();
        let sb = fs.superblock().clone();
        assert_eq!(sb.orphan_file_inum, 12);
        assert_eq!(sb.checksum_seed, crc32c(!0, &sb.uuid));
        assert_eq!(u64::from(l.orphan.1), orphan_blocks);
        let bs = fs.block_size() as usize;
        let st = fs.stat(12).unwrap();
        assert_eq!(st.size, orphan_blocks * bs as u64);
        let mut data = vec![0u8; st.size as usize];
        assert_eq!(fs.inodes().read(12, 0, &mut data).unwrap(), data.len());
        for (k, b) in data.chunks(bs).enumerate() {
            assert!(of::verify(b, l.orphan.0 + k as u64, None).is_ok(), "block {k}: no magic");
            assert_eq!(of::entries(b).count(), 0, "block {k}: a slot taken");
        }
        drop(fs);

        let mut fs = Filesystem::open_rw(&img).unwrap();
        let root = fs.root();
        let payload = vec![0x5au8; 300_000];
        let f = fs.create(root, b"kept", 0o644, 0, 0).unwrap().ino;
        fs.inodes().write(f, 0, &payload).unwrap();
        let gone = fs.create(root, b"gone", 0o644, 0, 0).unwrap().ino;
        fs.inodes().write(gone, 0, &payload).unwrap();
        fs.open_inode(gone).unwrap();
        fs.unlink(root, b"gone").unwrap();
        fs.commit().unwrap();
        fs.close_inode(gone).unwrap();
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        let fs = Filesystem::open(&img).unwrap();
        assert_eq!(fs.read_all(fs.resolve("/kept").unwrap()).unwrap(), payload);
        assert!(fs.resolve("/gone").is_err());
        drop(fs);
        std::fs::remove_file(&img).unwrap();
    }

    let img = dir.path().join("old");
    let opts = MkfsOptions { size: 64 << 20, features: with("^orphan_file,^metadata_csum_seed"), ..Default::default() };
    mkfs_file(&img, &opts).unwrap();
    assert_eq!(dumpe2fs_features(&img), set(OLD));
    fsck_clean(&img);
    let fs = Filesystem::open(&img).unwrap();
    assert_eq!(fs.superblock().orphan_file_inum, 0);
}

/// mke2fs itself makes the same set when asked for the two new
/// defaults (Debian's mke2fs.conf lacks them), bar resize_inode.
#[test]
fn default_features_match_mke2fs() {
    let Some((_d, img)) = rw_support::mkfs(64, &["-O", "orphan_file,metadata_csum_seed"]) else { return };
    if !have("dumpe2fs") {
        eprintln!("SKIP: dumpe2fs not installed");
        return;
    }
    let mut theirs = dumpe2fs_features(&img);
    theirs.remove("resize_inode");
    assert_eq!(theirs, set(UPSTREAM));
}

/// `-O` lists: every supported feature can be dropped (each image is
/// clean and lists exactly what was asked); unknown and unsupported
/// names are refused, all named, leaving the features unchanged.
#[test]
fn feature_lists() {
    let mut f = MkfsFeatures::default();
    let e = f.apply("^orphan_file,frobnicate,encrypt,^sparse_super,orphan_file").unwrap_err().to_string();
    assert!(e.contains("frobnicate") && e.contains("encrypt") && e.contains("^sparse_super"), "{e}");
    assert!(!e.contains("^orphan_file"), "{e}");
    assert_eq!(f, MkfsFeatures::default(), "a refused list changes nothing");
    f.apply("extent,ext_attr").unwrap();
    assert_eq!(f, MkfsFeatures::default(), "always-on features may be named");
    f.apply("^metadata_csum").unwrap();
    assert!(!f.metadata_csum && !f.metadata_csum_seed, "the seed goes with the checksums");
    let mut g = MkfsFeatures::default();
    g.apply("^metadata_csum,metadata_csum_seed").unwrap();
    assert!(g.check().is_err());
    let mut h = MkfsFeatures::default();
    h.apply("^has_journal").unwrap();
    assert!(!h.orphan_file, "no journal, no orphan file");
    h.apply("orphan_file").unwrap();
    assert!(MkfsOptions { size: 64 << 20, features: h, ..Default::default() }.features.check().is_err());

    if !have("e2fsck") || !have("dumpe2fs") {
        eprintln!("SKIP: e2fsprogs not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let all = set(UPSTREAM);
    for (list, dropped) in [
        ("^has_journal", "has_journal orphan_file"),
        ("^huge_file,^dir_nlink,^extra_isize", "huge_file dir_nlink extra_isize"),
        ("^flex_bg", "flex_bg"),
        ("^64bit", "64bit"),
        ("^metadata_csum", "metadata_csum metadata_csum_seed"),
    ] {
        let img = dir.path().join("f");
        mkfs_file(&img, &MkfsOptions { size: 200 << 20, features: with(list), ..Default::default() })
            .unwrap_or_else(|e| panic!("{list}: {e}"));
        let mut want: BTreeSet<String> = all.difference(&set(dropped)).cloned().collect();
        if list == "^metadata_csum" {
            want.insert("uninit_bg".into());
        }
        assert_eq!(dumpe2fs_features(&img), want, "{list}");
        fsck_clean(&img);
        std::fs::remove_file(&img).unwrap();
    }
}

/// The library's mke2fs-like options (`-N`, `-m`, `-U`, `-E hash_seed=`,
/// `root_owner=`, a fixed time) show in dumpe2fs; `-E` refuses unknown
/// names, all named, changing nothing; with a fixed time and no UUID, two
/// images made apart in wall-clock time are byte-identical, every
/// timestamp the fixed one.
#[test]
fn options_and_fixed_time() {
    let mut o = MkfsOptions { size: 64 << 20, ..Default::default() };
    let e = o.apply_extended("stride=4,hash_seed=00112233-4455-6677-8899-aabbccddeeff,bogus").unwrap_err().to_string();
    assert!(e.contains("stride=4") && e.contains("bogus"), "{e}");
    assert!(o.hash_seed.is_none(), "a refused list changes nothing");
    assert!(o.apply_extended("hash_seed=xyz").is_err());
    o.apply_extended("hash_seed=00112233-4455-6677-8899-aabbccddeeff,root_owner=42:43,lazy_itable_init=0").unwrap();
    assert_eq!(o.root_owner, Some((42, 43)));
    if !have("e2fsck") || !have("dumpe2fs") || !have("debugfs") {
        eprintln!("SKIP: e2fsprogs not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("o");
    o.inodes = Some(3000);
    o.reserved_percent = 10;
    o.uuid = Some(uext4::mkfs::parse_uuid("0a0b0c0d-0e0f-4011-8213-141516171819").unwrap());
    mkfs_file(&img, &o).unwrap();
    fsck_clean(&img);
    let d = dumpe2fs_fields(&img);
    let inodes: u64 = d["Inode count"].parse().unwrap();
    assert!((3000..3000 + 8 * 8).contains(&inodes), "{inodes}");
    let blocks: u64 = d["Block count"].parse().unwrap();
    assert_eq!(d["Reserved block count"].parse::<u64>().unwrap(), blocks / 10);
    assert_eq!(d["Filesystem UUID"], "0a0b0c0d-0e0f-4011-8213-141516171819");
    assert_eq!(d["Directory Hash Seed"], "00112233-4455-6677-8899-aabbccddeeff");
    let fs = Filesystem::open(&img).unwrap();
    let st = fs.stat(fs.root()).unwrap();
    assert_eq!((st.uid, st.gid), (42, 43));
    drop(fs);
    assert!(mkfs_file(&img, &MkfsOptions { inodes: Some(1 << 40), ..o.clone() }).is_err());
    assert!(mkfs_file(&img, &MkfsOptions { reserved_percent: 51, ..o.clone() }).is_err());

    let time = uext4::Timestamp { sec: 1_650_000_000, nsec: 0 };
    let fixed = MkfsOptions { size: 64 << 20, time: Some(time), label: "r".into(), ..Default::default() };
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    mkfs_file(&a, &fixed).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    mkfs_file(&b, &fixed).unwrap();
    assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(), "two fixed-time images differ");
    fsck_clean(&a);
    let fs = Filesystem::open(&a).unwrap();
    let sb = fs.superblock();
    assert_eq!((sb.mkfs_time, sb.wtime, sb.lastcheck), (1_650_000_000, 1_650_000_000, 1_650_000_000));
    for ino in [fs.root(), 11] {
        let st = fs.stat(ino).unwrap();
        assert_eq!([st.atime, st.mtime, st.ctime], [time; 3], "inode {ino}");
        assert_eq!(st.crtime, Some(time));
    }
    drop(fs);
    let other = MkfsOptions { label: "s".into(), ..fixed };
    mkfs_file(&b, &other).unwrap();
    assert_ne!(dumpe2fs_fields(&a)["Filesystem UUID"], dumpe2fs_fields(&b)["Filesystem UUID"]);
}

/// mke2fs's `dumpe2fs -h` features of `args` (plus `-t ext4`, 64 MiB),
/// with the defaults this mke2fs differs in from upstream's evened out:
/// resize_inode dropped, orphan_file and metadata_csum_seed added.
fn mke2fs_features(dir: &Path, args: &[&str]) -> (BTreeSet<String>, std::collections::BTreeMap<String, String>) {
    let img = dir.join("mke2fs.img");
    let st = Command::new("mke2fs").args(["-q", "-F", "-t", "ext4"]).args(args).arg(&img).arg("64M").status().unwrap();
    assert!(st.success(), "mke2fs {args:?}");
    let mut f = dumpe2fs_features(&img);
    f.remove("resize_inode");
    f.extend(set("orphan_file metadata_csum_seed"));
    let fields = dumpe2fs_fields(&img);
    std::fs::remove_file(&img).unwrap();
    (f, fields)
}

/// The flag-only features (`-O inline_data`, `ea_inode`, `large_dir`,
/// `casefold` with `-E encoding=utf8,encoding_flags=strict`): the image
/// lists what mke2fs's lists, is clean, uext4 writes into it using the
/// feature, and the kernel (where it has the feature) mounts and writes.
#[test]
fn flag_features_match_mke2fs() {
    if !have("e2fsck") || !have("dumpe2fs") || !have("mke2fs") {
        eprintln!("SKIP: e2fsprogs not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let e = MkfsOptions { size: 64 << 20, features: with("inline_data"), inode_size: Some(128), ..Default::default() };
    assert!(Layout::compute(&e).unwrap_err().to_string().contains("inline_data"));
    let mut e = MkfsOptions::default();
    assert!(e.apply_extended("encoding=utf9").is_err());
    assert!(e.apply_extended("encoding_flags=strict").is_ok());
    e.size = 64 << 20;
    assert!(Layout::compute(&e).unwrap_err().to_string().contains("casefold"), "flags without casefold");
    for (o, ext) in [
        ("inline_data", ""),
        ("ea_inode", ""),
        ("large_dir", ""),
        ("casefold", ""),
        ("", "encoding=utf8,encoding_flags=strict"),
    ] {
        let img = dir.path().join("f");
        let mut opts = MkfsOptions { size: 64 << 20, ..Default::default() };
        let mut args = Vec::new();
        if !o.is_empty() {
            opts.features.apply(o).unwrap();
            args.extend(["-O", o]);
        }
        if !ext.is_empty() {
            opts.apply_extended(ext).unwrap();
            args.extend(["-E", ext]);
        }
        mkfs_file(&img, &opts).unwrap_or_else(|e| panic!("{o}{ext}: {e}"));
        let (want, theirs) = mke2fs_features(dir.path(), &args);
        assert_eq!(dumpe2fs_features(&img), want, "{o}{ext}");
        let ours = dumpe2fs_fields(&img);
        assert_eq!(ours.get("Character encoding"), theirs.get("Character encoding"), "{o}{ext}");
        fsck_clean(&img);
        let casefold = opts.features.casefold;
        if casefold {
            let raw = std::fs::read(&img).unwrap();
            let flags = u16::from_le_bytes([raw[1024 + 0x27E], raw[1024 + 0x27F]]);
            assert_eq!(flags, u16::from(!ext.is_empty()), "s_encoding_flags");
        }

        let mut fs = Filesystem::open_rw(&img).unwrap();
        let root = fs.root();
        fs.write("/small", b"tiny file").unwrap();
        let f = fs.resolve("/small").unwrap();
        if opts.features.inline_data {
            // New directories start inline, as the kernel's.
            let d = fs.mkdir(root, b"sub", 0o755, 0, 0).unwrap().ino;
            let fl = fs.inodes().stat(d).unwrap().flags;
            assert_ne!(fl & uext4::format::inode::FL_INLINE_DATA, 0, "not inline");
        }
        if opts.features.ea_inode {
            fs.set_xattr(f, b"user.big", &vec![7u8; 6000], uext4::fs::XattrSetMode::Any).unwrap();
        }
        if casefold {
            let d = fs.mkdir(root, b"cf", 0o755, 0, 0).unwrap().ino;
            fs.set_casefold(d, true).unwrap();
            let a = fs.create(d, b"Name", 0o644, 0, 0).unwrap().ino;
            assert_eq!(fs.lookup(d, b"nAME").unwrap(), a);
        }
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        if casefold && !rw_support::kernel_has_casefold() {
            eprintln!("SKIP (kernel part): this kernel has no CONFIG_UNICODE (no casefold)");
            continue;
        }
        if !rw_support::require_loop_mount() {
            continue;
        }
        let m = KernelMount::new(&img, "").unwrap();
        assert_eq!(std::fs::read(m.path().join("small")).unwrap(), b"tiny file");
        std::fs::write(m.path().join("k"), b"from the kernel").unwrap();
        std::fs::create_dir(m.path().join("kd")).unwrap();
        m.unmount();
        fsck_clean(&img);
        let fs = Filesystem::open(&img).unwrap();
        assert_eq!(fs.read_all(fs.resolve("/k").unwrap()).unwrap(), b"from the kernel");
        if opts.features.ea_inode {
            assert_eq!(fs.get_xattr(fs.resolve("/small").unwrap(), b"user.big").unwrap(), vec![7u8; 6000]);
        }
        drop(fs);
        std::fs::remove_file(&img).unwrap();
    }
}

/// `-O quota` (with `-E quotatype=`) and `-O project`: the quota inodes
/// are where mke2fs puts them (3, 4, the project one the first free
/// inode, the orphan file after it), e2fsck finds the usage they record
/// exact, and uext4 keeps it exact as it writes.
#[test]
fn quota_images_match_mke2fs() {
    if !have("e2fsck") || !have("dumpe2fs") || !have("mke2fs") {
        eprintln!("SKIP: e2fsprogs not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let small = MkfsOptions { size: 64 << 20, features: with("project"), inode_size: Some(128), ..Default::default() };
    assert!(Layout::compute(&small).unwrap_err().to_string().contains("project"));
    let mut e = MkfsOptions::default();
    assert!(e.apply_extended("quotatype=usrquota:bogus").is_err());
    const FIELDS: [&str; 4] = ["User quota inode", "Group quota inode", "Project quota inode", "Orphan file inode"];
    for (o, ext) in [
        ("quota", ""),
        ("quota,project", "root_owner=1000:100"),
        ("quota", "quotatype=prjquota"),
        ("quota,^orphan_file", "quotatype=usrquota"),
        ("project", ""),
    ] {
        let what = format!("-O {o} -E {ext}");
        let img = dir.path().join("q");
        let mut opts = MkfsOptions { size: 64 << 20, features: with(o), ..Default::default() };
        let mut args = vec!["-O", o];
        if !ext.is_empty() {
            opts.apply_extended(ext).unwrap();
            args.extend(["-E", ext]);
        }
        if o.contains("^orphan_file") {
            args = vec!["-O", "quota", "-E", ext];
        } else {
            // This mke2fs does not make an orphan file by default.
            args[1] = if o == "project" { "project,orphan_file" } else { "quota,project,orphan_file" };
            if !o.contains("project") && !ext.contains("prj") {
                args[1] = "quota,orphan_file";
            }
        }
        mkfs_file(&img, &opts).unwrap_or_else(|e| panic!("{what}: {e}"));
        let (mut want, theirs) = mke2fs_features(dir.path(), &args);
        if o.contains("^orphan_file") {
            want.remove("orphan_file");
        }
        assert_eq!(dumpe2fs_features(&img), want, "{what}");
        let ours = dumpe2fs_fields(&img);
        for f in FIELDS {
            assert_eq!(ours.get(f), theirs.get(f), "{what}: {f}");
        }
        fsck_clean(&img);

        let mut fs = Filesystem::open_rw(&img).unwrap();
        fs.create_dir_all("/d/e").unwrap();
        fs.set_owner(4242, 77);
        fs.write("/d/e/f", vec![1u8; 70_000]).unwrap();
        fs.unmount().unwrap();
        drop(fs);
        // e2fsck checks every quota file against the inodes.
        fsck_clean(&img);
        // A kernel without QFMT_V2 refuses quota and project images alike,
        // mke2fs's as ours: checked up front, never taken from a refusal.
        if !rw_support::kernel_has_quota_v2() {
            eprintln!("SKIP (kernel part): {what}: this kernel has no QFMT_V2 quota format");
        } else if rw_support::require_loop_mount() {
            let m = KernelMount::new(&img, "").unwrap_or_else(|e| panic!("{what}: the kernel refused the image: {e}"));
            assert_eq!(std::fs::read(m.path().join("d/e/f")).unwrap().len(), 70_000, "{what}");
            std::fs::write(m.path().join("k"), b"from the kernel").unwrap();
            m.unmount();
            fsck_clean(&img);
        }
        std::fs::remove_file(&img).unwrap();
    }
}

/// `-O mmp` (with `-E mmp_update_interval=`): the MMP block is clean
/// with mke2fs's interval, e2fsck is happy, uext4 opens the image
/// read-write (taking and releasing the block), and the kernel mounts it
/// and writes.
#[test]
fn mmp_images_match_mke2fs() {
    if !have("e2fsck") || !have("dumpe2fs") || !have("mke2fs") {
        eprintln!("SKIP: e2fsprogs not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut e = MkfsOptions::default();
    assert!(e.apply_extended("mmp_update_interval=301").is_err());
    for (ext, bs) in [("", 1024), ("mmp_update_interval=10", 4096)] {
        let what = format!("-O mmp -E {ext} -b {bs}");
        let img = dir.path().join("m");
        let mut opts =
            MkfsOptions { size: 64 << 20, block_size: Some(bs), features: with("mmp"), ..Default::default() };
        let bs_arg = bs.to_string();
        let mut args = vec!["-O", "mmp,orphan_file", "-b", &bs_arg];
        if !ext.is_empty() {
            opts.apply_extended(ext).unwrap();
            args.extend(["-E", ext]);
        }
        mkfs_file(&img, &opts).unwrap_or_else(|e| panic!("{what}: {e}"));
        let (want, theirs) = mke2fs_features(dir.path(), &args);
        assert_eq!(dumpe2fs_features(&img), want, "{what}");
        let ours = dumpe2fs_fields(&img);
        assert_eq!(ours.get("MMP update interval"), theirs.get("MMP update interval"), "{what}");
        assert_eq!(ours.get("mmp_sequence").map(String::as_str), Some("0xff4d4d50"), "{what}: not clean");
        fsck_clean(&img);

        let mut fs = Filesystem::open_rw(&img).unwrap();
        fs.write("/f", b"under mmp").unwrap();
        fs.unmount().unwrap();
        drop(fs);
        assert_eq!(dumpe2fs_fields(&img).get("mmp_sequence").map(String::as_str), Some("0xff4d4d50"), "{what}");
        fsck_clean(&img);
        if !rw_support::require_loop_mount() {
            continue;
        }
        let m = KernelMount::new(&img, "").unwrap();
        assert_eq!(std::fs::read(m.path().join("f")).unwrap(), b"under mmp");
        std::fs::write(m.path().join("k"), b"from the kernel").unwrap();
        m.unmount();
        fsck_clean(&img);
        let fs = Filesystem::open(&img).unwrap();
        assert_eq!(fs.read_all(fs.resolve("/k").unwrap()).unwrap(), b"from the kernel");
        drop(fs);
        std::fs::remove_file(&img).unwrap();
    }
}

/// `-O fast_commit`: the journal grows by mke2fs's fast-commit area
/// (a 64th of the default journal, whatever `-J size=` says), e2fsck is
/// happy, uext4 writes into the image, and the kernel mounts it, writes
/// and fsyncs (fast commits) and leaves it clean.
#[test]
fn fast_commit_images_match_mke2fs() {
    if !have("e2fsck") || !have("dumpe2fs") || !have("mke2fs") {
        eprintln!("SKIP: e2fsprogs not installed");
        return;
    }
    let mut nj = with("^has_journal");
    nj.apply("fast_commit").unwrap();
    assert!(nj.check().is_err(), "fast_commit without a journal");
    let dir = tempfile::tempdir().unwrap();
    for (bs, jmib) in [(1024u32, None), (1024, Some(8u32)), (4096, None)] {
        let what = format!("-O fast_commit -b {bs} -J size={jmib:?}");
        let img = dir.path().join("fc");
        let opts = MkfsOptions {
            size: 64 << 20,
            block_size: Some(bs),
            journal_blocks: jmib.map(|m| (m << 20) / bs),
            features: with("fast_commit"),
            ..Default::default()
        };
        let bs_arg = bs.to_string();
        let j_arg = format!("size={}", jmib.unwrap_or(0));
        let mut args = vec!["-O", "fast_commit,orphan_file", "-b", &bs_arg];
        if jmib.is_some() {
            args.extend(["-J", &j_arg]);
        }
        mkfs_file(&img, &opts).unwrap_or_else(|e| panic!("{what}: {e}"));
        let (want, theirs) = mke2fs_features(dir.path(), &args);
        assert_eq!(dumpe2fs_features(&img), want, "{what}");
        let ours = dumpe2fs_fields(&img);
        for f in ["Total journal blocks", "Fast commit length", "Journal features"] {
            assert_eq!(ours.get(f), theirs.get(f), "{what}: {f}");
        }
        fsck_clean(&img);

        let mut fs = Filesystem::open_rw(&img).unwrap();
        fs.write("/f", b"fast").unwrap();
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        if !rw_support::require_loop_mount() {
            continue;
        }
        let m = KernelMount::new(&img, "").unwrap();
        assert_eq!(std::fs::read(m.path().join("f")).unwrap(), b"fast");
        let mut k = std::fs::File::create(m.path().join("k")).unwrap();
        k.write_all(b"from the kernel").unwrap();
        k.sync_all().unwrap();
        drop(k);
        m.unmount();
        fsck_clean(&img);
        let fs = Filesystem::open(&img).unwrap();
        assert_eq!(fs.read_all(fs.resolve("/k").unwrap()).unwrap(), b"from the kernel");
        drop(fs);
        std::fs::remove_file(&img).unwrap();
    }
}

/// The layout of a huge device costs per group, not per block: the used
/// blocks are kept as runs (about one per flex group), and computing the
/// layout and every group's used count (what writing the descriptors and
/// bitmaps asks) takes a bounded number of lookups per group, the same at
/// 1 TiB, 15 TiB and 64 TiB. Each group's used count matches the formula
/// of its metadata (superblock backup and descriptors, and in a flex
/// group's first group the 16 groups' bitmaps and inode tables).
#[test]
fn layout_work_is_per_group() {
    let tib = 1u64 << 40;
    let mut per_group = Vec::new();
    for size in [tib, 15 * tib, 64 * tib] {
        let l = Layout::compute(&MkfsOptions { size, block_size: Some(4096), ..Default::default() }).unwrap();
        let groups = u64::from(l.groups);
        // The metadata's runs: a flex group's bitmaps and tables are one,
        // a superblock backup outside them another.
        let backups = (1..l.groups).filter(|&g| l.has_super(g)).count() as u64;
        assert!(l.used_runs() as u64 <= groups / 16 + backups + 16, "{size}: {} runs", l.used_runs());
        let mut used_total = 0u64;
        let journal_groups: BTreeSet<u32> = l
            .journal
            .iter()
            .flat_map(|&(s, n)| [s, s + u64::from(n) - 1])
            .chain(l.journal_leaf)
            .map(|b| (b / u64::from(l.blocks_per_group)) as u32)
            .collect();
        for g in 0..l.groups {
            let used = l.used_in_group(g);
            used_total += u64::from(used);
            if g < 16 || journal_groups.contains(&g) || g + 1 == l.groups {
                continue;
            }
            let members = (l.groups - g).min(16);
            let flex = if g % 16 == 0 { members * (2 + l.itable_blocks) } else { 0 };
            assert_eq!(used, l.super_blocks(g) + flex, "{size}: group {g}");
        }
        // The journal's blocks are in the groups it crosses.
        let jblocks: u64 = l.journal.iter().map(|r| u64::from(r.1)).sum();
        assert!(used_total > jblocks, "{size}");
        per_group.push(l.probes() as f64 / groups as f64);
    }
    // A bounded number of lookups per group (about 19: placing three
    // metadata runs per group, its used count), the same at every size;
    // counting per block instead would make it tens of thousands.
    for p in &per_group {
        assert!(*p < 24.0, "{per_group:?} lookups per group");
    }
}

/// Per group, `(free blocks, free inodes, flags)` from `dumpe2fs`'s group
/// summaries of `img`.
fn group_summaries(img: &Path) -> Vec<(u64, u64, String)> {
    let text = mkfs_support::dumpe2fs_groups(img);
    let mut out = Vec::new();
    let mut flags = String::new();
    for line in text.lines() {
        if line.starts_with("Group ") {
            flags = line.split_once('[').map(|(_, f)| f.trim_end_matches(']').to_string()).unwrap_or_default();
        } else if let Some((blocks, rest)) = line.trim().split_once(" free blocks, ") {
            let inodes = rest.split_once(" free inodes").unwrap().0;
            out.push((blocks.parse().unwrap(), inodes.parse().unwrap(), flags.clone()));
        }
    }
    out
}

/// The blocks of the journal (inode 8) of `img` as `debugfs` maps them,
/// its extent block included.
fn journal_blocks(img: &Path) -> Vec<u64> {
    let out = Command::new("debugfs").args(["-R", "stat <8>"]).arg(img).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let ext = text.lines().skip_while(|l| !l.starts_with("EXTENTS:")).nth(1).expect("journal extents");
    let mut blocks = Vec::new();
    for item in ext.split(", ") {
        let phys = item.rsplit_once(':').unwrap().1;
        let (a, b) = phys.split_once('-').unwrap_or((phys, phys));
        blocks.extend([a.parse::<u64>().unwrap(), b.parse().unwrap()]);
    }
    blocks
}

/// A 1 TiB sparse image (8192 groups, 512 flex groups, superblock
/// backups up to group 7^4) has, group by group, the free blocks, free
/// inodes and uninit flags of mke2fs's with the same features, but where
/// the journal lies (uext4 starts it one group earlier, with its extent
/// block just before: the totals still agree).
#[test]
fn big_image_groups_match_mke2fs() {
    if !have("e2fsck") || !have("dumpe2fs") || !have("mke2fs") || !have("debugfs") {
        eprintln!("SKIP: e2fsprogs not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let size = 1u64 << 40;
    let ours = dir.path().join("ours.img");
    let l = mkfs_file(&ours, &MkfsOptions { size, ..Default::default() }).unwrap();
    fsck_clean(&ours);
    let theirs = dir.path().join("theirs.img");
    std::fs::File::create(&theirs).unwrap().set_len(size).unwrap();
    let st = Command::new("mke2fs")
        .args(["-q", "-F", "-t", "ext4", "-O", "^resize_inode,orphan_file,metadata_csum_seed"])
        .args(["-E", "lazy_itable_init=1,lazy_journal_init=1"])
        .arg(&theirs)
        .status()
        .unwrap();
    assert!(st.success());
    let (a, b) = (group_summaries(&ours), group_summaries(&theirs));
    assert_eq!((a.len(), b.len()), (l.groups as usize, l.groups as usize));
    let bpg = u64::from(l.blocks_per_group);
    let journal: BTreeSet<usize> =
        journal_blocks(&ours).into_iter().chain(journal_blocks(&theirs)).map(|b| (b / bpg) as usize).collect();
    let mut compared = 0;
    for (g, (x, y)) in a.iter().zip(&b).enumerate() {
        if !journal.contains(&g) {
            assert_eq!(x, y, "group {g}");
            compared += 1;
        }
    }
    assert!(compared > a.len() - 16, "{compared} groups compared");
    let total = |v: &[(u64, u64, String)]| v.iter().map(|t| (t.0, t.1)).fold((0, 0), |s, t| (s.0 + t.0, s.1 + t.1));
    assert_eq!(total(&a), total(&b));
    let (fa, fb) = (dumpe2fs_fields(&ours), dumpe2fs_fields(&theirs));
    for k in ["Free blocks", "Free inodes", "Inodes per group", "Inode count", "Block count"] {
        assert_eq!(fa.get(k), fb.get(k), "{k}");
    }
}

/// Block size, block count and inodes as `mke2fs -n -t ext4` (which reads
/// the host's mke2fs.conf) would make them for `size` bytes (given on the
/// command line: the host's filesystem may not hold a 17 TiB file).
fn mke2fs_plan(dir: &Path, size: u64) -> (u32, u64, u64) {
    let img = dir.join("plan.img");
    std::fs::File::create(&img).unwrap();
    let out = Command::new("mke2fs")
        .args(["-n", "-F", "-t", "ext4"])
        .arg(&img)
        .arg(format!("{}k", size / 1024))
        .output()
        .unwrap();
    std::fs::remove_file(&img).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find_map(|l| l.strip_prefix("Creating filesystem with ")).expect("mke2fs -n summary");
    // "N Xk blocks and M inodes"
    let w: Vec<&str> = line.split_whitespace().collect();
    let bs = w[1].trim_end_matches('k').parse::<u32>().unwrap() * 1024;
    (bs, w[0].parse().unwrap(), w[4].parse().unwrap())
}

/// mke2fs's size classes (floppy, small, default, big from 4 TiB, huge
/// from 16 TiB) from the host's mke2fs.conf: uext4 picks the block size,
/// inode size and inodes mke2fs picks at each (sparse files, nothing
/// written for the two largest: their layout only, against `mke2fs -n`).
#[test]
fn size_classes_match_mke2fs() {
    if !have("e2fsck") || !have("dumpe2fs") || !have("mke2fs") {
        eprintln!("SKIP: e2fsprogs not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let profile = uext4::mkfs::Mke2fsProfile::load().unwrap();
    let (mib, tib) = (1u64 << 20, 1u64 << 40);
    for size in [2 * mib, 3 * mib, 100 * mib, 1 << 30, 5 * tib, 17 * tib] {
        let opts = MkfsOptions { size, profile: profile.clone(), ..Default::default() };
        let l = Layout::compute(&opts).unwrap();
        let inodes = u64::from(l.inodes_per_group) * u64::from(l.groups);
        assert_eq!((l.block_size, l.blocks_count, inodes), mke2fs_plan(dir.path(), size), "{size}");
        if size > 1 << 30 {
            continue;
        }
        let ours = dir.path().join("ours.img");
        mkfs_file(&ours, &opts).unwrap();
        fsck_clean(&ours);
        let (_, theirs) = mkfs_support::mke2fs_image(dir.path(), &["-t", "ext4"], size / mib);
        let fields = dumpe2fs_fields(&ours);
        for k in ["Block size", "Inode size", "Inodes per group", "Inode count", "Block count"] {
            assert_eq!(fields.get(k), theirs.get(k), "{size}: {k}");
        }
    }
}
