//! The compatibility matrix through `uext4 mount`, for the feature sets
//! people mount most (upstream default, quota, inline_data, casefold,
//! ext3).
//!
//! For each row: `mke2fs -d` writes a tree into a fresh image; `uext4
//! mount` serves it; a randomized sequence of file operations (create,
//! write at offsets, append, truncate, mkdir, rename, unlink, rmdir,
//! symlink, hard link, read; 400 of them) runs on the mount and, as the model, on a
//! copy of the tree in a host directory (ext4 here): every result and
//! errno must match. After the unmount the image must be clean (`e2fsck
//! -fn`), and the kernel's mount (or `debugfs rdump` where this kernel
//! cannot mount the set) must show exactly the model's tree.
//!
//! Rows uext4 refuses (encrypt: no keys) must fail to mount with the
//! feature named; the library matrix (crates/uext4/tests/compat_matrix.rs)
//! covers every row in depth.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

mod mount_support;

use mount_support::{have, is_mounted, run, tool, Fixture, BIN};

#[derive(Clone, Copy, Debug)]
enum Expect {
    ReadWrite,
    /// `uext4 mount` (read-write) fails naming the feature.
    Refused(&'static str),
}

struct Row {
    name: &'static str,
    mkfs: &'static [&'static str],
    /// Every kernel mounts the set (casefold and quota sets: see
    /// [`kernel_mounts`]).
    kernel: bool,
    expect: Expect,
}

const ROWS: &[Row] = &[
    Row {
        name: "upstream-default",
        mkfs: &["-t", "ext4", "-O", "orphan_file,metadata_csum_seed"],
        kernel: true,
        expect: Expect::ReadWrite,
    },
    Row {
        name: "quota",
        mkfs: &["-t", "ext4", "-O", "quota", "-E", "quotatype=usrquota:grpquota"],
        kernel: false,
        expect: Expect::ReadWrite,
    },
    Row { name: "inline_data", mkfs: &["-t", "ext4", "-O", "inline_data"], kernel: true, expect: Expect::ReadWrite },
    Row { name: "casefold", mkfs: &["-t", "ext4", "-O", "casefold"], kernel: false, expect: Expect::ReadWrite },
    Row { name: "encrypt", mkfs: &["-t", "ext4", "-O", "encrypt"], kernel: true, expect: Expect::Refused("encrypt") },
    Row { name: "ext3", mkfs: &["-t", "ext3"], kernel: true, expect: Expect::ReadWrite },
];

/// xorshift: the same sequence on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let b = self.next() as u8;
        (0..n).map(|i| b.wrapping_add((i % 251) as u8)).collect()
    }
}

/// The seed tree: small and large files, a symlink, nested and bigger
/// directories, a non-ASCII name.
fn make_tree(dir: &Path) {
    fs::create_dir_all(dir.join("a/b")).unwrap();
    for (i, len) in [0usize, 1, 60, 61, 4096, 70_000].iter().enumerate() {
        fs::write(dir.join(format!("f{i}")), vec![b'a' + i as u8; *len]).unwrap();
    }
    fs::write(dir.join("a/Stra\u{df}e"), b"sharp s").unwrap();
    std::os::unix::fs::symlink("f1", dir.join("link")).unwrap();
    fs::create_dir(dir.join("big")).unwrap();
    for i in 0..120 {
        fs::write(dir.join(format!("big/entry-{i:03}")), format!("{i}")).unwrap();
    }
}

/// Every directory below `root` (relative paths, root as "").
fn dirs(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![PathBuf::new()];
    let mut i = 0;
    while i < out.len() {
        let mut subs: Vec<_> = fs::read_dir(root.join(&out[i]))
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_type().unwrap().is_dir() && e.file_name() != "lost+found")
            .map(|e| out[i].join(e.file_name()))
            .collect();
        subs.sort();
        out.extend(subs);
        i += 1;
    }
    out
}

fn errno<T>(r: &std::io::Result<T>) -> i32 {
    r.as_ref().err().map_or(0, |e| e.raw_os_error().unwrap_or(-1))
}

/// One random operation on both trees; panics if the results differ.
fn step(rng: &mut Rng, host: &Path, mnt: &Path, n: usize) -> i32 {
    let ds = dirs(host);
    let d = ds[rng.below(ds.len() as u64) as usize].clone();
    let names = ["n0", "n1", "n2", "n3", "n4", "Stra\u{df}e", "f1", "a", "big"];
    let rel = d.join(names[rng.below(names.len() as u64) as usize]);
    let d2 = ds[rng.below(ds.len() as u64) as usize].clone();
    let rel2 = d2.join(names[rng.below(names.len() as u64) as usize]);
    let (h, m) = (host.join(&rel), mnt.join(&rel));
    let (h2, m2) = (host.join(&rel2), mnt.join(&rel2));
    let op = rng.below(10);
    let len = rng.below(20_000) as usize + 1;
    let data = rng.bytes(len);
    let off = rng.below(100_000);
    let what = format!("step {n}: op {op} on {rel:?} / {rel2:?}");
    let (a, b) = match op {
        0 | 1 => {
            let w = |p: &Path| -> std::io::Result<()> {
                let mut f = fs::OpenOptions::new().create(true).write(true).truncate(false).open(p)?;
                f.seek(SeekFrom::Start(off))?;
                f.write_all(&data)
            };
            (errno(&w(&h)), errno(&w(&m)))
        }
        2 => {
            let w = |p: &Path| fs::OpenOptions::new().append(true).open(p)?.write_all(&data);
            (errno(&w(&h)), errno(&w(&m)))
        }
        3 => {
            let t = |p: &Path| fs::OpenOptions::new().write(true).open(p)?.set_len(off / 3);
            (errno(&t(&h)), errno(&t(&m)))
        }
        4 => (errno(&fs::create_dir(&h)), errno(&fs::create_dir(&m))),
        5 => (errno(&fs::remove_file(&h)), errno(&fs::remove_file(&m))),
        6 => (errno(&fs::remove_dir(&h)), errno(&fs::remove_dir(&m))),
        7 => (errno(&fs::rename(&h, &h2)), errno(&fs::rename(&m, &m2))),
        8 => {
            if rng.below(2) == 0 {
                (errno(&std::os::unix::fs::symlink("target", &h)), errno(&std::os::unix::fs::symlink("target", &m)))
            } else {
                (errno(&fs::hard_link(&h, &h2)), errno(&fs::hard_link(&m, &m2)))
            }
        }
        _ => {
            let r = |p: &Path| -> std::io::Result<Vec<u8>> {
                let mut v = Vec::new();
                fs::File::open(p)?.read_to_end(&mut v)?;
                Ok(v)
            };
            let (x, y) = (r(&h), r(&m));
            if let (Ok(x), Ok(y)) = (&x, &y) {
                assert!(x == y, "{what}: read differs");
            }
            (errno(&x), errno(&y))
        }
    };
    // Renaming a directory onto a non-empty one may be ENOTEMPTY or EEXIST
    // in Linux; both trees here are ext4, so they must agree exactly.
    assert_eq!(a, b, "{what}: host errno {a}, mount errno {b}");
    a
}

/// Asserts that `got` holds exactly the tree `want` (names, types,
/// contents, symlink targets).
fn same_tree(want: &Path, got: &Path) {
    let list = |p: &Path| -> Vec<_> {
        let mut v: Vec<_> =
            fs::read_dir(p).unwrap().map(|e| e.unwrap().file_name()).filter(|n| n != "lost+found").collect();
        v.sort();
        v
    };
    assert_eq!(list(want), list(got), "names in {got:?}");
    for n in list(want) {
        let (w, g) = (want.join(&n), got.join(&n));
        let (mw, mg) = (fs::symlink_metadata(&w).unwrap(), fs::symlink_metadata(&g).unwrap());
        assert_eq!(mw.file_type(), mg.file_type(), "type of {g:?}");
        if mw.is_dir() {
            same_tree(&w, &g);
        } else if mw.file_type().is_symlink() {
            assert_eq!(fs::read_link(&w).unwrap(), fs::read_link(&g).unwrap(), "target of {g:?}");
        } else {
            assert!(fs::read(&w).unwrap() == fs::read(&g).unwrap(), "contents of {g:?}");
        }
    }
}

/// This kernel mounts `row`'s set: the row says so, or the set needs only
/// casefold or quota and this kernel has them (decided up front from the
/// kernel's features, never from a refused mount).
fn kernel_mounts(row: &Row) -> bool {
    let has = |f: &str| row.mkfs.iter().any(|a| a.split(',').any(|x| x == f));
    let (casefold, quota) = (has("casefold"), has("quota") || has("project"));
    row.kernel
        || ((casefold || quota)
            && (!casefold || mount_support::kernel_has_casefold())
            && (!quota || mount_support::kernel_has_quota_v2()))
}

fn check_row(row: &Row) {
    require_fuse!();
    for t in ["mke2fs", "debugfs"] {
        if !have(t) {
            println!("SKIP: {t} not installed");
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (src, img, mnt) = (dir.path().join("src"), dir.path().join("img"), dir.path().join("mnt"));
    make_tree(&src);
    fs::create_dir(&mnt).unwrap();
    fs::File::create(&img).unwrap().set_len(64 << 20).unwrap();
    run(tool("mke2fs").args(["-q", "-F"]).args(row.mkfs).arg("-d").arg(&src).arg(&img));
    if row.mkfs.iter().any(|a| a.contains("quota")) {
        // mke2fs 1.47.0 -d leaves the quota usage uncounted: e2fsck sets it.
        let _ = tool("e2fsck").arg("-fy").arg(&img).output();
    }
    run(tool("e2fsck").arg("-fn").arg(&img));
    let mnt = mnt.canonicalize().unwrap();
    let fx = Fixture::at(dir, img.clone(), mnt.clone());
    match row.expect {
        Expect::Refused(feature) => {
            let out = Command::new(BIN).arg("mount").arg(&img).arg(&mnt).output().unwrap();
            assert!(!out.status.success(), "{}: uext4 mount succeeded", row.name);
            assert!(!is_mounted(&mnt));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains(feature), "{}: the refusal does not name {feature}: {err}", row.name);
        }
        Expect::ReadWrite => {
            fx.mount("");
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ row.name.len() as u64);
            let mut results = std::collections::BTreeMap::<i32, usize>::new();
            for n in 0..400 {
                *results.entry(step(&mut rng, &src, &mnt, n)).or_default() += 1;
            }
            println!("{}: results by errno (0 = success): {results:?}", row.name);
            assert!(results.get(&0).copied().unwrap_or(0) > 120, "{}: too few operations succeeded", row.name);
            same_tree(&src, &mnt);
            fx.unmount();
            fx.assert_clean();
            // The oracle reads the image back.
            // (require_fuse! above already checked that this runs as root.)
            let kernel = kernel_mounts(row) && mount_support::loop_mount_unavailable().is_none();
            if kernel {
                run(tool("mount").args(["-t", "ext4", "-o", "loop,ro"]).arg(&img).arg(&mnt));
                let r = std::panic::catch_unwind(|| same_tree(&src, &mnt));
                run(tool("umount").arg(&mnt));
                r.unwrap();
            } else {
                let out = tempfile::tempdir().unwrap();
                let cmd = format!("rdump / {}", out.path().display());
                run(tool("debugfs").arg("-R").arg(&cmd).arg(&img));
                same_tree(&src, out.path());
            }
        }
    }
}

macro_rules! rows {
    ($($test:ident => $name:literal,)*) => {$(
        #[test]
        fn $test() {
            check_row(ROWS.iter().find(|r| r.name == $name).expect("row"));
        }
    )*};
}

rows! {
    mount_upstream_default => "upstream-default",
    mount_quota => "quota",
    mount_inline_data => "inline_data",
    mount_casefold => "casefold",
    mount_ext3 => "ext3",
    mount_encrypt_refused => "encrypt",
}
