//! The "recovery" column of the compatibility matrix: for every row of
//! tests/compat_matrix.rs that uext4 writes (tests/matrix_rows), a
//! workload exercising the row's feature runs on a device that records
//! every write and flush (creates, writes, fsync, rename, unlink, mkdir,
//! rmdir, unlink of open files (orphans at the cut), xattrs — large
//! ones with `ea_inode` —, small files with
//! `inline_data`, case variants in a casefolded directory with
//! `casefold`, chown and project ids with quota); then, for several cut
//! points (a power cut: everything before the last flush, plus a random
//! subset of the writes after it), the image is opened read-write by uext4
//! (journal recovery, orphans), every file fsync'd before the cut must be
//! there with its exact contents and xattr, and after unmount `e2fsck -fn`
//! must be clean (with quota, that includes e2fsck's usage check). With
//! `UEXT4_CRASH_E2FSCK=1`, every fourth point is also recovered by
//! `e2fsck -fy`, which must find nothing to repair (but for two reports
//! e2fsck 1.47.0 makes on kernel images alike, see `e2fsck_repairs`) and
//! leave the fsync'd files intact (`UEXT4_CRASH_KEEP=1` keeps failing images in /tmp).
//!
//! ext2 has no journal: as in the kernel's nojournal mode only fsync'd
//! files are promised. There the image must stay marked "not clean"
//! through uext4's open and unmount (so the boot-time fsck runs), `e2fsck
//! -fy` must repair it to `-fn` clean, and the fsync'd files must still
//! be intact after that.
//!
//! `UEXT4_CRASH_POINTS=<n>` sets the cut points per row (default 8),
//! `UEXT4_CRASH_SEED=<n>` varies the workloads and cut points.

mod matrix_rows;
mod rw_support;

use matrix_rows::{Expect, Row, ROWS};
use rw_support::{fsck_clean, have, pattern, Rng};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use uext4::device::{BlockDevice, RecordingDevice};
use uext4::inode_api::ProjectAttr;
use uext4::inode_api::{RenameFlags, SetAttr};
use uext4::Filesystem;
use uext4::{inode_api::XattrSetMode, MountOptions};

/// What a row's workload exercises, from its mkfs arguments.
#[derive(Clone, Copy, Debug, Default)]
struct Features {
    journal: bool,
    quota: bool,
    project: bool,
    inline: bool,
    ea_inode: bool,
    casefold: bool,
}

impl Features {
    fn of(row: &Row) -> Features {
        let has = |f: &str| row.mkfs.iter().any(|a| a.split(',').any(|x| x == f));
        Features {
            journal: !row.mkfs.contains(&"ext2"),
            quota: has("quota"),
            project: has("project"),
            inline: has("inline_data"),
            ea_inode: has("ea_inode"),
            casefold: has("casefold"),
        }
    }
}

/// A file fsync'd as its last change: from event `durable_at` on it must
/// survive any cut, found under `path` (and `alt`, a case variant, in a
/// casefolded directory) with `data` and the xattr `xattr`.
struct Synced {
    path: String,
    alt: Option<String>,
    data: Vec<u8>,
    xattr: Option<(Vec<u8>, Vec<u8>)>,
    durable_at: usize,
}

/// The casefolded directory of the casefold row.
const CF: &str = "cf";

/// Image size: small (each cut point writes a copy), except where mkfs
/// needs room for a journal (64 KiB blocks).
fn size_mb(row: &Row) -> u64 {
    if row.mkfs.contains(&"65536") && row.mkfs.contains(&"-b") {
        row.size_mb
    } else {
        32
    }
}

fn run_tool(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A fresh image of `row` (with an empty casefolded directory for the
/// casefold row, made by debugfs as the kernel's chattr +F would).
fn base_image(row: &Row, f: Features) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    std::fs::File::create(&img).unwrap().set_len(size_mb(row) << 20).unwrap();
    run_tool(Command::new("mke2fs").args(["-q", "-F"]).args(row.mkfs).arg(&img));
    if f.casefold {
        let script = dir.path().join("script");
        std::fs::write(&script, format!("mkdir {CF}\nset_inode_field {CF} flags 0x40080000\n")).unwrap();
        run_tool(Command::new("debugfs").arg("-w").arg("-f").arg(&script).arg(&img));
        assert!(rw_support::debugfs(&img, &format!("stat {CF}")).contains("0x40080000"), "no casefolded dir");
    }
    fsck_clean(&img);
    std::fs::read(&img).unwrap()
}

/// Options for every open: MMP blocks a crash left "in use" are taken
/// at once (nobody else has the image; the kernel would wait 2 * interval
/// + 1 s).
fn opts() -> MountOptions {
    MountOptions {
        write: true,
        commit_interval: Duration::from_secs(3600),
        mmp_wait: Some(Duration::ZERO),
        ..Default::default()
    }
}

/// A name for the casefolded directory with a case variant that folds
/// alike (full case folding: ß and SS, final sigma).
fn cf_names(i: usize, k: u64) -> (String, String) {
    match k % 4 {
        0 => (format!("Stra\u{df}e-{i}"), format!("STRASSE-{i}")),
        1 => (format!("MiXeD-{i}.Txt"), format!("mixed-{i}.TXT")),
        2 => (
            format!("\u{3a3}\u{399}\u{3a3}\u{3a5}\u{3a6}\u{39f}\u{3a3}-{i}"),
            format!("\u{3c3}\u{3b9}\u{3c3}\u{3c5}\u{3c6}\u{3bf}\u{3c2}-{i}"),
        ),
        _ => (format!("caf\u{e9}-{i}"), format!("CAFE\u{301}-{i}")),
    }
}

/// The recorded workload; returns the fsync'd files and the event where
/// the workload started (after the open).
fn workload(fs: &Filesystem, dev: &RecordingDevice, f: Features, seed: u64) -> Vec<Synced> {
    let mut rng = Rng(seed | 1);
    let root = fs.root();
    let mut dirs: Vec<(u32, String)> = Vec::new();
    for i in 0..2 {
        let name = format!("d{i}");
        dirs.push((fs.mkdir(root, name.as_bytes(), 0o755, 0, 0).unwrap().ino, format!("/{name}")));
    }
    if f.casefold {
        dirs.push((fs.lookup(root, CF.as_bytes()).unwrap(), format!("/{CF}")));
    }
    let cf_ino = f.casefold.then(|| dirs[2].0);
    let mut synced: Vec<Synced> = Vec::new();
    // Files and empty directories not promised anything: (dir, name, is_dir).
    let mut noise: Vec<(u32, String, bool)> = Vec::new();
    let ids = [0u32, 1000, 1001, 2002, 65534];
    let len_of = |rng: &mut Rng| -> usize {
        match rng.below(4) {
            0 if f.inline => rng.below(140) as usize,
            0 => rng.below(64) as usize,
            1 => rng.below(5000) as usize,
            _ => rng.below(40_000) as usize,
        }
    };
    let xattr_of = |rng: &mut Rng, i: usize| -> (Vec<u8>, Vec<u8>) {
        let len = if f.ea_inode && rng.below(2) == 0 {
            // Beyond any block: a value inode (up to the kernel's 64 KiB).
            8000 + rng.below(65536 - 8000 + 1) as usize
        } else {
            rng.below(200) as usize
        };
        (format!("user.x{}", i % 3).into_bytes(), pattern(rng.next(), len))
    };
    for i in 0..90usize {
        let d = rng.below(dirs.len() as u64) as usize;
        let (dino, dpath) = dirs[d].clone();
        match rng.below(14) {
            0..=4 => {
                // Created, written, maybe given an xattr, an owner and a
                // project, then fsync'd: promised from here on.
                let (name, alt) = if Some(dino) == cf_ino {
                    let (n, a) = cf_names(i, rng.next());
                    (n, Some(a))
                } else {
                    (format!("s{i}"), None)
                };
                let data = pattern(rng.next(), len_of(&mut rng));
                let ino = fs.create(dino, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
                fs.inodes().write(ino, 0, &data).unwrap();
                let xattr = (rng.below(3) == 0).then(|| xattr_of(&mut rng, i));
                if let Some((n, v)) = &xattr {
                    fs.set_xattr(ino, n, v, XattrSetMode::Any).unwrap();
                }
                if f.quota {
                    let (u, g) = (ids[rng.below(5) as usize], ids[rng.below(5) as usize]);
                    fs.setattr(ino, SetAttr { uid: Some(u), gid: Some(g), ..Default::default() }).unwrap();
                }
                if f.project {
                    fs.set_project(ino, ProjectAttr { projid: ids[rng.below(5) as usize], inherit: false }).unwrap();
                }
                if let Some(a) = &alt {
                    // The case variant is the same name: no second entry.
                    let e = fs.create(dino, a.as_bytes(), 0o644, 0, 0).err();
                    assert!(matches!(e, Some(uext4::Error::Exists(_))), "{a} beside {name}: {e:?}");
                }
                fs.fsync(ino).unwrap();
                synced.push(Synced {
                    path: format!("{dpath}/{name}"),
                    alt: alt.map(|a| format!("{dpath}/{a}")),
                    data,
                    xattr,
                    durable_at: dev.events(),
                });
            }
            5..=6 => {
                let name = if Some(dino) == cf_ino { cf_names(i, rng.next()).0 } else { format!("n{i}") };
                let ino = fs.create(dino, name.as_bytes(), 0o600, 0, 0).unwrap().ino;
                let len = len_of(&mut rng);
                fs.inodes().write(ino, rng.below(3000), &pattern(rng.next(), len)).unwrap();
                if rng.below(3) == 0 {
                    let (n, v) = xattr_of(&mut rng, i);
                    fs.set_xattr(ino, &n, &v, XattrSetMode::Any).unwrap();
                }
                noise.push((dino, name, false));
            }
            7 => {
                let name = format!("m{i}");
                fs.mkdir(dino, name.as_bytes(), 0o755, 0, 0).unwrap();
                noise.push((dino, name, true));
            }
            8 if !noise.is_empty() => {
                let (pd, name, is_dir) = noise.swap_remove(rng.below(noise.len() as u64) as usize);
                if !is_dir && rng.below(3) == 0 {
                    // Unlinked while open, never closed: an orphan at the
                    // cut (the orphan file or chain, recovered at open).
                    let ino = fs.lookup(pd, name.as_bytes()).unwrap();
                    fs.open_inode(ino).unwrap();
                    fs.unlink(pd, name.as_bytes()).unwrap();
                } else if is_dir {
                    fs.rmdir(pd, name.as_bytes()).unwrap();
                } else {
                    fs.unlink(pd, name.as_bytes()).unwrap();
                }
            }
            9 if !noise.is_empty() => {
                // Renamed, to another directory or, in the casefolded one,
                // to a case variant of itself (nothing changes).
                let k = rng.below(noise.len() as u64) as usize;
                let (pd, name, is_dir) = noise[k].clone();
                let new = if Some(pd) == cf_ino && Some(dino) == cf_ino {
                    name.to_uppercase()
                } else if Some(dino) == cf_ino {
                    cf_names(i, rng.next()).0
                } else {
                    format!("r{i}")
                };
                fs.inodes().rename(pd, name.as_bytes(), dino, new.as_bytes(), RenameFlags::default()).unwrap();
                if !(Some(pd) == cf_ino && Some(dino) == cf_ino) {
                    noise[k] = (dino, new, is_dir);
                }
            }
            10 if !noise.is_empty() => {
                // Owner, xattr and truncate changes on an unpromised file.
                let (pd, name, is_dir) = noise[rng.below(noise.len() as u64) as usize].clone();
                let ino = fs.lookup(pd, name.as_bytes()).unwrap();
                if f.quota {
                    let u = ids[rng.below(5) as usize];
                    fs.setattr(ino, SetAttr { uid: Some(u), gid: Some(u), ..Default::default() }).unwrap();
                }
                if f.project {
                    fs.set_project(ino, ProjectAttr { projid: ids[rng.below(5) as usize], inherit: is_dir }).unwrap();
                }
                let (n, v) = xattr_of(&mut rng, i);
                if rng.below(2) == 0 {
                    fs.set_xattr(ino, &n, &v, XattrSetMode::Any).unwrap();
                } else {
                    let _ = fs.remove_xattr(ino, &n);
                }
                if !is_dir {
                    let size = rng.below(20_000);
                    fs.setattr(ino, SetAttr { size: Some(size), ..Default::default() }).unwrap();
                }
            }
            _ => {
                if rng.below(3) == 0 {
                    fs.commit().unwrap();
                }
            }
        }
    }
    synced
}

/// Asserts every file fsync'd before event `point` is intact in `fs`.
fn check_synced(fs: &Filesystem, synced: &[Synced], point: usize, what: &str) {
    for s in synced.iter().filter(|s| s.durable_at <= point) {
        for p in std::iter::once(&s.path).chain(&s.alt) {
            let ino = fs.resolve(p).unwrap_or_else(|e| panic!("{what}: fsync'd {p} lost: {e}"));
            let got = fs.read_all(ino).unwrap_or_else(|e| panic!("{what}: read {p}: {e}"));
            assert!(got == s.data, "{what}: fsync'd {p}: {} bytes, not its {}", got.len(), s.data.len());
            if let Some((n, v)) = &s.xattr {
                let got = fs.get_xattr(ino, n).unwrap_or_else(|e| panic!("{what}: {p}: xattr: {e}"));
                assert!(&got == v, "{what}: {p}: xattr of {} bytes, not {}", got.len(), v.len());
            }
        }
    }
}

/// Writes `bytes` to `path` sparsely (runs of zero blocks are skipped):
/// the 256 MiB images of the 64 KiB-block row are mostly empty.
fn write_sparse(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::File::create(path).unwrap();
    f.set_len(bytes.len() as u64).unwrap();
    for (k, chunk) in bytes.chunks(65536).enumerate() {
        if chunk.iter().any(|&b| b != 0) {
            f.seek(SeekFrom::Start(k as u64 * 65536)).unwrap();
            f.write_all(chunk).unwrap();
        }
    }
}

/// True if the superblock of `img` says "not clean".
fn not_clean(img: &Path) -> bool {
    let out = Command::new("dumpe2fs").arg("-h").arg(img).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().any(|l| l.starts_with("Filesystem state:") && l.contains("not clean"))
}

/// The repairs `e2fsck -fy` reported in `text` (its "? yes" answers),
/// less those that e2fsck 1.47.0 makes after recovering a crash of the
/// kernel's alike (each checked on a kernel mount left with open
/// unlinked files by `xfs_io -x -c "shutdown -f"`):
/// - "Feature orphan_present is set but orphan file is clean": the
///   kernel sets orphan_present at every journaled mount
///   (ext4_setup_super), as uext4 does, and e2fsck clears it after its
///   own orphan pass when the file is empty;
/// - "Orphan file (inode N) block B is not clean", when e2fsck deleted
///   orphans itself ("Clearing orphaned inode"): 1.47.0's
///   process_orphan_block (e2fsck/super.c) releases the inodes an
///   orphan-file block lists but leaves their entries, which its final
///   check_init_orphan_file (unix.c) reports as PR_6_ORPHAN_BLOCK_DIRTY.
///   e2fsprogs' own tests/f_clear_orphan_file/expect.1 shows it on a
///   kernel image; commit db87cf4c ("e2fsck: clear the orphan_file while
///   processing it", 1.47.2) clears the entries as they are read;
/// - "Unattached inode N" (connected to lost+found) and "Inode N ref
///   count is 2, should be 1", for an EA inode N (`is_ea_inode`), when
///   e2fsck deleted orphans itself: release_orphan_inode (super.c) gives
///   back an orphan's xattr block but not its references to EA inodes,
///   so pass 4 finds the value inode of a deleted orphan's large xattr
///   without a referrer (1.47.0 and later alike).
fn e2fsck_repairs(text: &str, is_ea_inode: impl Fn(u32) -> bool) -> usize {
    let own_orphans = text.contains("Clearing orphaned inode");
    let ea = |l: &str, prefix: &str, suffix: &str| {
        own_orphans
            && l.strip_prefix(prefix)
                .and_then(|r| r.strip_suffix(suffix))
                .and_then(|n| n.parse().ok())
                .is_some_and(&is_ea_inode)
    };
    let accepted_question = |l: &str| {
        l.starts_with("Feature orphan_present is set but orphan file is clean.")
            || (own_orphans && l.starts_with("Orphan file (inode ") && l.ends_with(" is not clean."))
            || ea(l, "Unattached inode ", "")
    };
    let lines: Vec<&str> = text.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("? yes"))
        .filter(|(i, l)| {
            let answer_to_previous = matches!(l.trim(), "Clear? yes" | "Connect to /lost+found? yes");
            let own = (answer_to_previous && *i > 0 && accepted_question(lines[i - 1]))
                || ea(l, "Inode ", " ref count is 2, should be 1.  Fix? yes");
            !own
        })
        .count()
}

fn check_row(row: &Row, seed: u64) {
    for tool in ["mke2fs", "e2fsck", "debugfs", "dumpe2fs"] {
        if !have(tool) {
            eprintln!("SKIP: {}: {tool} not installed", row.name);
            return;
        }
    }
    assert!(matches!(row.expect, Expect::ReadWrite), "{}: only read-write rows have a recovery column", row.name);
    let f = Features::of(row);
    let dev = Arc::new(RecordingDevice::new(base_image(row, f)));
    let fs = Filesystem::open_device(dev.clone() as Arc<dyn BlockDevice>, opts())
        .unwrap_or_else(|e| panic!("{}: open: {e}", row.name));
    let start = dev.events();
    let synced = workload(&fs, &dev, f, seed);
    // The cut: the filesystem is abandoned, never unmounted.
    std::mem::forget(fs);
    let total = dev.events();
    let points: usize = std::env::var("UEXT4_CRASH_POINTS").ok().and_then(|v| v.parse().ok()).unwrap_or(8);
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9) | 1);
    let mut repaired = 0;
    for k in 0..points {
        // The very end, then points spread over the workload; every third
        // keeps all writes since the last flush, the others a random set.
        let point = if k == 0 { total } else { start + rng.below((total - start) as u64 + 1) as usize };
        let mask = rng.next();
        let bytes = dev.crash_image(point, |i| k % 3 == 1 || (mask >> (i % 64)) & 1 == 1);
        let what = format!("{} seed {seed}: cut at {point}/{total}", row.name);
        if f.journal && k % 4 == 2 && std::env::var_os("UEXT4_CRASH_E2FSCK").is_some() {
            // e2fsck recovers the same image: a journal replay (and the
            // orphans), never a repair but 1.47.0's own (e2fsck_repairs).
            write_sparse(&img, &bytes);
            let out = Command::new("e2fsck").arg("-fy").arg(&img).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let repairs = e2fsck_repairs(&text, |n| {
                // EXT4_EA_INODE_FL in the repaired image's inode.
                let out = rw_support::debugfs(&img, &format!("stat <{n}>"));
                let flags = out.split("Flags: 0x").nth(1).and_then(|r| r.split_whitespace().next());
                flags.and_then(|h| u32::from_str_radix(h, 16).ok()).is_some_and(|f| f & 0x0020_0000 != 0)
            });
            if std::env::var_os("UEXT4_CRASH_KEEP").is_some() && repairs > 0 {
                std::fs::copy(&img, format!("/tmp/crash-{}-{point}.img", row.name)).unwrap();
                std::fs::write(format!("/tmp/crash-{}-{point}.orig", row.name), &bytes).unwrap();
            }
            assert!(out.status.code().unwrap_or(8) <= 1 && repairs == 0, "{what}: e2fsck -fy had to repair:\n{text}");
            fsck_clean(&img);
            check_synced(&Filesystem::open(&img).unwrap(), &synced, point, &format!("{what} (e2fsck's recovery)"));
        }
        write_sparse(&img, &bytes);
        let mut fs = Filesystem::open_with(&img, opts()).unwrap_or_else(|e| panic!("{what}: open: {e}"));
        check_synced(&fs, &synced, point, &what);
        fs.unmount().unwrap_or_else(|e| panic!("{what}: unmount: {e}"));
        drop(fs);
        if !f.journal {
            // Nothing orders the metadata without a journal: the image
            // keeps saying so until e2fsck has been over it.
            assert!(not_clean(&img), "{what}: uext4's unmount marked an unchecked ext2 image clean");
            let out = Command::new("e2fsck").arg("-fy").arg(&img).output().unwrap();
            assert!(
                out.status.code().is_some_and(|c| c <= 1),
                "{what}: e2fsck -fy could not repair:\n{}",
                String::from_utf8_lossy(&out.stdout)
            );
            repaired += usize::from(String::from_utf8_lossy(&out.stdout).contains("? yes"));
            fsck_clean(&img);
            check_synced(&Filesystem::open(&img).unwrap(), &synced, point, &format!("{what} (after e2fsck -fy)"));
        }
        fsck_clean(&img);
    }
    eprintln!(
        "{}: {} events, {} fsync'd files, {points} cut points ({repaired} repaired by e2fsck -fy)",
        row.name,
        total - start,
        synced.len()
    );
}

macro_rules! crash_rows {
    ($($test:ident => $name:literal,)*) => {$(
        #[test]
        fn $test() {
            let row = ROWS.iter().find(|r| r.name == $name).expect("row");
            let salt: u64 = std::env::var("UEXT4_CRASH_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
            check_row(row, $name.bytes().fold(0x5eed ^ salt, |h, b| h.wrapping_mul(31) ^ u64::from(b)));
        }
    )*};
}

crash_rows! {
    upstream_default => "upstream-default",
    quota => "quota",
    project => "project",
    inline_data => "inline_data",
    ea_inode => "ea_inode",
    casefold => "casefold",
    bigalloc_16k => "bigalloc-16k",
    bigalloc_64k => "bigalloc-64k",
    fast_commit => "fast_commit",
    mmp => "mmp",
    ext3 => "ext3",
    ext2 => "ext2",
    blocks_1k => "1k-blocks",
    blocks_2k => "2k-blocks",
    blocks_4k => "4k-blocks",
    blocks_64k => "64k-blocks",
}

/// Every read-write row of the matrix has a recovery test above.
#[test]
fn every_read_write_row_is_crash_tested() {
    let src = include_str!("crash_matrix.rs");
    for r in ROWS.iter().filter(|r| matches!(r.expect, Expect::ReadWrite)) {
        assert!(src.contains(&format!("=> \"{}\",", r.name)), "row {} has no crash test", r.name);
    }
}

/// Only e2fsck 1.47.0's own reports are discounted, and those about
/// orphans only after e2fsck deleted orphans itself.
#[test]
fn e2fsck_repairs_discounts_only_its_own_reports() {
    let kernel = "recovering journal\nClearing orphaned inode 13 (uid=0, gid=0, mode=0100644, size=16384)\n\
                  Pass 4: Checking reference counts\nUnattached inode 14\nConnect to /lost+found? yes\n\n\
                  Inode 14 ref count is 2, should be 1.  Fix? yes\n\n\
                  Pass 5: Checking group summary information\nOrphan file (inode 12) block 0 is not clean.\n\
                  Clear? yes\n\nFeature orphan_present is set but orphan file is clean.\nClear? yes\n";
    assert_eq!(e2fsck_repairs(kernel, |n| n == 14), 0);
    // Inode 14 not an EA inode: both of its repairs count.
    assert_eq!(e2fsck_repairs(kernel, |_| false), 2);
    // No orphan deleted by e2fsck: only orphan_present's is its own.
    assert_eq!(e2fsck_repairs(&kernel.replace("Clearing orphaned inode", "Truncating orphaned inode"), |_| true), 3);
    let quota = "Clearing orphaned inode 6148 (uid=2002)\nUpdate quota info for quota type 0? yes\n";
    assert_eq!(e2fsck_repairs(quota, |_| true), 1);
    let counts = "Free blocks count wrong (56039, counted=55991).\nFix? yes\n";
    assert_eq!(e2fsck_repairs(counts, |_| true), 1);
}
