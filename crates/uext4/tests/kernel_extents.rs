//! Files written by the Linux kernel (loop mount, as root), read back
//! through uext4.
//!
//! - Fragmented files whose extent trees reach depth 2: a file with every
//!   other block punched out, and two files grown by interleaved
//!   one-block fallocates (then written, partly left unwritten), at 1k and
//!   4k blocks. Contents must equal the model, and the mapping uext4 sees
//!   must equal the extent list `debugfs -R "ex"` prints.
//! - Timestamps with nanoseconds, before 1970 and after 2038 (the extra
//!   epoch bits), creation times, owners, xattrs: uext4's stat must equal
//!   what the kernel's statx reported before unmounting, and debugfs.
//! - A 20,000-entry directory grown by the kernel (its own htree splits,
//!   two levels at 4k with long names): every name found, readdir complete.
//!
//! Without root, e2fsprogs or working loop mounts the tests print
//! "SKIP: <reason>" and pass; CI runs as root.

mod common;
mod rw_support;

use common::*;
use rw_support::KernelMount;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{CString, OsStr};
use std::fs::{self, File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, FileExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use uext4::inode_api::MapKind;
use uext4::{Filesystem, Timestamp};

/// Makes an empty image and mounts it, or explains why not.
fn mounted_image(tag: &str, block_size: u32, size_mib: u64, extra: &[&str]) -> Option<(PathBuf, PathBuf, KernelMount)> {
    if !have_e2fsprogs() || !rw_support::require_loop_mount() {
        return None;
    }
    let dir = scratch_dir(tag);
    let img = dir.join("image.ext4");
    run(
        Command::new(tool("mkfs.ext4").unwrap())
            .args(["-q", "-F", "-t", "ext4", "-b", &block_size.to_string()])
            .args(extra)
            .arg(&img)
            .arg(format!("{size_mib}M")),
        &[0],
    );
    let mnt = dir.join("mnt");
    let m = KernelMount::at(&img, &mnt, "").unwrap_or_else(|e| panic!("{tag}: kernel mount: {e}"));
    Some((img, mnt, m))
}

fn fallocate(f: &File, mode: i32, off: u64, len: u64) {
    // SAFETY: fallocate on an open descriptor.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, off as libc::off_t, len as libc::off_t) };
    assert_eq!(r, 0, "fallocate(mode {mode:#x}, {off}, {len}): {}", std::io::Error::last_os_error());
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// What the kernel reports for a file (statx), to compare with uext4.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KStat {
    ino: u32,
    mode: u16,
    nlink: u32,
    uid: u32,
    gid: u32,
    size: u64,
    blocks: u64,
    atime: Timestamp,
    mtime: Timestamp,
    ctime: Timestamp,
    crtime: Option<Timestamp>,
    rdev: (u32, u32),
}

fn kstat(p: &Path) -> KStat {
    // SAFETY: zeroed statx is a valid out-buffer; path is NUL-terminated.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    let r =
        unsafe { libc::statx(libc::AT_FDCWD, cpath(p).as_ptr(), libc::AT_SYMLINK_NOFOLLOW, libc::STATX_ALL, &mut st) };
    assert_eq!(r, 0, "statx {p:?}: {}", std::io::Error::last_os_error());
    let ts = |t: libc::statx_timestamp| Timestamp { sec: t.tv_sec, nsec: t.tv_nsec };
    KStat {
        ino: st.stx_ino as u32,
        mode: st.stx_mode,
        nlink: st.stx_nlink,
        uid: st.stx_uid,
        gid: st.stx_gid,
        size: st.stx_size,
        blocks: st.stx_blocks,
        atime: ts(st.stx_atime),
        mtime: ts(st.stx_mtime),
        ctime: ts(st.stx_ctime),
        crtime: (st.stx_mask & libc::STATX_BTIME != 0).then(|| ts(st.stx_btime)),
        rdev: (st.stx_rdev_major, st.stx_rdev_minor),
    }
}

fn ustat(fs: &Filesystem, ino: u32) -> KStat {
    let s = fs.stat(ino).unwrap();
    KStat {
        ino: s.ino,
        mode: s.mode,
        nlink: s.nlink,
        uid: s.uid,
        gid: s.gid,
        size: s.size,
        blocks: s.blocks,
        atime: s.atime,
        mtime: s.mtime,
        ctime: s.ctime,
        crtime: s.crtime,
        rdev: s.rdev,
    }
}

/// A run of blocks: (first logical, length, physical start, unwritten).
type Run = (u64, u64, u64, bool);

/// Merges runs that continue each other logically and physically.
fn normalize(mut runs: Vec<Run>) -> Vec<Run> {
    runs.sort_unstable();
    let mut out: Vec<Run> = Vec::new();
    for r in runs {
        match out.last_mut() {
            Some(l) if l.0 + l.1 == r.0 && l.2 + l.1 == r.2 && l.3 == r.3 => l.1 += r.1,
            _ => out.push(r),
        }
    }
    out
}

/// Leaf extents of `path` per `debugfs -R "ex"`, and the tree depth.
fn debugfs_extents(img: &Path, path: &str) -> (u32, Vec<Run>) {
    let out = debugfs(img, &[format!("ex {path}")]);
    let mut depth = None;
    let mut runs = Vec::new();
    for line in out.lines() {
        let norm = line.replace('/', " / ");
        let t: Vec<&str> = norm.split_whitespace().collect();
        if t.len() < 11 || t[1] != "/" || t[0].parse::<u32>().is_err() {
            continue;
        }
        let level: u32 = t[0].parse().unwrap();
        let max: u32 = t[2].parse().unwrap();
        depth = Some(max);
        if level != max {
            continue;
        }
        // level / max entry / count lstart - lend pstart - pend len [Uninit]
        let lstart: u64 = t[6].parse().unwrap();
        let (pstart, len): (u64, u64) = if t.len() >= 13 && t[10] == "-" {
            (t[9].parse().unwrap(), t[12].parse().unwrap())
        } else {
            (t[9].parse().unwrap(), t[10].parse().unwrap())
        };
        let uninit = line.contains("Uninit");
        runs.push((lstart, len, pstart, uninit));
    }
    (depth.unwrap_or_else(|| panic!("no extent tree for {path}:\n{out}")), runs)
}

fn uext4_runs(fs: &Filesystem, ino: u32) -> Vec<Run> {
    fs.extents(ino)
        .unwrap()
        .into_iter()
        .map(|m| match m.kind {
            MapKind::Mapped(p) => (m.lblk.get(), m.len, p.get(), false),
            MapKind::Unwritten(p) => (m.lblk.get(), m.len, p.get(), true),
            MapKind::Hole => panic!("extents() returned a hole: {m:?}"),
        })
        .collect()
}

/// Clips runs to the first `end` logical blocks.
fn clip(runs: Vec<Run>, end: u64) -> Vec<Run> {
    runs.into_iter().filter(|r| r.0 < end).map(|(l, n, p, u)| (l, n.min(end - l), p, u)).collect()
}

struct Expect {
    path: &'static str,
    data: Vec<u8>,
    min_depth: u32,
}

fn fragmented(block_size: u32) {
    let tag = format!("kernel-frag-{}k", block_size / 1024);
    let Some((img, mnt, mount)) = mounted_image(&tag, block_size, 160, &[]) else { return };
    let bs = u64::from(block_size);
    let mut expect: Vec<Expect> = Vec::new();

    // 1. Every other block punched out of a written file.
    let nblocks = if bs == 1024 { 12_288 } else { 10_240 };
    let mut data = content(1, (nblocks * bs) as usize + 777);
    {
        let f = File::create(mnt.join("punched")).unwrap();
        f.write_all_at(&data, 0).unwrap();
        f.sync_all().unwrap();
        for b in (1..nblocks).step_by(2) {
            fallocate(&f, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, b * bs, bs);
            data[(b * bs) as usize..((b + 1) * bs) as usize].fill(0);
        }
        // An unaligned punch inside the last block zeroes part of it.
        let last = nblocks * bs;
        fallocate(&f, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, last + 100, 200);
        data[(last + 100) as usize..(last + 300) as usize].fill(0);
        f.sync_all().unwrap();
    }
    expect.push(Expect { path: "punched", data, min_depth: 2 });

    // 2. Two files grown by interleaved one-block allocations (each file's
    //    blocks alternate with the other's, so no two extents merge), then
    //    written; the tail of B stays unwritten (reads as zeros).
    let n = 3000;
    let a = File::create(mnt.join("inter_a")).unwrap();
    let b = File::create(mnt.join("inter_b")).unwrap();
    for i in 0..n {
        fallocate(&a, 0, i * bs, bs);
        fallocate(&b, 0, i * bs, bs);
    }
    let da = content(2, (n * bs) as usize);
    let mut db = content(3, (n * bs) as usize);
    a.write_all_at(&da, 0).unwrap();
    let written_b = (n - 100) * bs;
    b.write_all_at(&db[..written_b as usize], 0).unwrap();
    db[written_b as usize..].fill(0);
    // Beyond EOF: allocated but outside the file.
    fallocate(&b, libc::FALLOC_FL_KEEP_SIZE, n * bs, 64 * bs);
    a.sync_all().unwrap();
    b.sync_all().unwrap();
    drop((a, b));
    // mballoc decides how long the interleaving lasts (at 1k one file may
    // soon find a free run of its own); at least one of them ends up with
    // a depth-2 tree, checked below.
    expect.push(Expect { path: "inter_a", data: da, min_depth: 1 });
    expect.push(Expect { path: "inter_b", data: db, min_depth: 1 });

    // 3. Small cases: an appended file, a sparse file with an unwritten
    //    range, a zero-length file with blocks preallocated past EOF.
    let mut app = Vec::new();
    {
        let mut f = OpenOptions::new().create(true).append(true).open(mnt.join("appended")).unwrap();
        for i in 0..50u64 {
            let chunk = content(100 + i, 1000 + (i as usize * 37) % 3000);
            std::io::Write::write_all(&mut f, &chunk).unwrap();
            app.extend_from_slice(&chunk);
            if i % 7 == 0 {
                f.sync_all().unwrap();
            }
        }
    }
    expect.push(Expect { path: "appended", data: app, min_depth: 0 });
    let mut sp = vec![0u8; (3 << 20) + 5];
    {
        let f = File::create(mnt.join("sparse_unwritten")).unwrap();
        f.set_len(sp.len() as u64).unwrap();
        fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, 1 << 20, 1 << 20);
        let d = content(5, 5000);
        f.write_all_at(&d, (1 << 20) + 300).unwrap();
        sp[(1 << 20) + 300..(1 << 20) + 5300].copy_from_slice(&d);
        let t = content(6, 5);
        f.write_all_at(&t, 3 << 20).unwrap();
        sp[3 << 20..].copy_from_slice(&t);
        let f = File::create(mnt.join("prealloc_empty")).unwrap();
        fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, 0, 16 * bs);
    }
    expect.push(Expect { path: "sparse_unwritten", data: sp, min_depth: 0 });
    expect.push(Expect { path: "prealloc_empty", data: Vec::new(), min_depth: 0 });

    // 4. Attributes the kernel writes: nanoseconds, the extra epoch bits,
    //    owners, modes, xattrs, a device node, a slow symlink.
    let times: [(&str, i64, u32); 5] = [
        ("t_nsec", 1_600_000_000, 123_456_789),
        ("t_pre1970", -1_000_000_000, 500),
        ("t_2040", 2_208_988_800, 42),
        ("t_2300", 10_413_792_000, 999_999_999),
        ("t_zero", 0, 0),
    ];
    for (name, sec, nsec) in times {
        let p = mnt.join(name);
        fs::write(&p, name).unwrap();
        set_times(&p, (sec - 7, i64::from(nsec) / 2), (sec, i64::from(nsec)));
    }
    fs::write(mnt.join("owned"), b"x").unwrap();
    lchown(&mnt.join("owned"), 123_456, 654_321);
    fs::write(mnt.join("xattrs"), b"x").unwrap();
    set_xattr(&mnt.join("xattrs"), "user.small", b"v");
    set_xattr(&mnt.join("xattrs"), "user.block", &content(9, (bs as usize) / 2));
    std::os::unix::fs::symlink(OsStr::from_bytes(&long_target(300)), mnt.join("slowlink")).unwrap();
    fs::create_dir(mnt.join("dir")).unwrap();
    fs::write(mnt.join("dir/inner"), b"inner").unwrap();

    // Cross-check the model through the kernel, and record its stats.
    for e in &expect {
        assert!(fs::read(mnt.join(e.path)).unwrap() == e.data, "kernel read of {} differs from the model", e.path);
    }
    let mut names: Vec<String> = expect.iter().map(|e| e.path.to_string()).collect();
    names.extend(times.iter().map(|t| t.0.to_string()));
    names.extend(["owned", "xattrs", "slowlink", "dir", "dir/inner"].map(String::from));
    let kstats: BTreeMap<String, KStat> = names.iter().map(|n| (n.clone(), kstat(&mnt.join(n)))).collect();
    let kx = source_xattrs(&mnt.join("xattrs"));
    mount.unmount();

    // Read back through uext4.
    let fs = Filesystem::open(&img).unwrap();
    assert!(fs.notices().is_empty(), "notices after a clean unmount: {:?}", fs.notices());
    let mut depths = HashMap::new();
    for e in &expect {
        let ino = fs.resolve(e.path).unwrap();
        let got = fs.read_all(ino).unwrap();
        if got != e.data {
            let i = got.iter().zip(&e.data).position(|(x, y)| x != y).unwrap_or(got.len().min(e.data.len()));
            panic!("{}: uext4 content differs at byte {i} (lengths {} / {})", e.path, got.len(), e.data.len());
        }
        // Chunked, unaligned reads as well.
        let mut off = 0usize;
        let mut buf = vec![0u8; 77_777];
        while off < e.data.len() {
            let n = fs.inodes().read(ino, off as u64, &mut buf).unwrap();
            assert!(n > 0 && buf[..n] == e.data[off..off + n], "{}: chunk at {off}", e.path);
            off += n;
        }
        assert_eq!(fs.inodes().read(ino, off as u64, &mut buf).unwrap(), 0);

        let (depth, theirs) = debugfs_extents(&img, &format!("/{}", e.path));
        assert!(depth >= e.min_depth, "{}: extent tree depth {depth}, want >= {}", e.path, e.min_depth);
        let end = e.data.len().div_ceil(bs as usize) as u64;
        let ours = normalize(uext4_runs(&fs, ino));
        let theirs = normalize(clip(theirs, end));
        if ours != theirs {
            let i = ours.iter().zip(&theirs).position(|(x, y)| x != y).unwrap_or(ours.len().min(theirs.len()));
            panic!(
                "{}: uext4 maps {} runs, debugfs {}; first difference at #{i}: {:?} vs {:?}",
                e.path,
                ours.len(),
                theirs.len(),
                ours.get(i),
                theirs.get(i)
            );
        }
        eprintln!("{tag}: {} ({} bytes): depth {depth}, {} extents", e.path, e.data.len(), theirs.len());
        depths.insert(e.path, depth);
    }
    assert!(depths["inter_a"].max(depths["inter_b"]) >= 2, "interleaved files: extent tree depths {depths:?}");
    let unwritten = uext4_runs(&fs, fs.resolve("inter_b").unwrap()).iter().filter(|r| r.3).count();
    assert!(unwritten > 0, "inter_b has no unwritten extents");

    // Stats against the kernel's statx, and everything against debugfs.
    let mut inos = BTreeSet::new();
    for (name, k) in &kstats {
        let ino = fs.resolve(name).unwrap();
        assert_eq!(ustat(&fs, ino), *k, "{name}: uext4 stat differs from the kernel's");
        inos.insert(ino);
    }
    for (name, sec, nsec) in times {
        let m = fs.stat(fs.resolve(name).unwrap()).unwrap().mtime;
        assert_eq!(m, Timestamp { sec, nsec }, "{name}: mtime");
    }
    compare_stats_with_debugfs(&fs, &img, &inos);
    let x = fs.resolve("xattrs").unwrap();
    let mut ours: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for n in fs.list_xattrs(x).unwrap() {
        let v = fs.get_xattr(x, &n).unwrap();
        ours.insert(n, v);
    }
    assert_eq!(ours, kx, "xattrs written by the kernel");
    assert_eq!(fs.readlink(fs.resolve("slowlink").unwrap()).unwrap(), long_target(300));
    assert_eq!(fs.read_all(fs.resolve("/dir/inner").unwrap()).unwrap(), b"inner");
}

#[test]
fn kernel_fragmented_1k() {
    fragmented(1024);
}

#[test]
fn kernel_fragmented_4k() {
    fragmented(4096);
}

/// A directory of 20,000 long names grown by the kernel: its htree has
/// two levels at 4k blocks.
#[test]
fn kernel_htree_directory() {
    let Some((img, mnt, mount)) = mounted_image("kernel-htree", 4096, 256, &["-N", "32768"]) else { return };
    let dir = mnt.join("big");
    fs::create_dir(&dir).unwrap();
    let mut names = Vec::new();
    for i in 0..20_000usize {
        let mut n = big_dir_name(i);
        n.resize(200 + i % 50, b'k');
        File::create(dir.join(OsStr::from_bytes(&n))).unwrap();
        names.push(n);
    }
    // Delete some so that the leaves have holes, as real directories do.
    for n in names.iter().skip(5).step_by(10) {
        fs::remove_file(dir.join(OsStr::from_bytes(n))).unwrap();
    }
    let kernel: HashMap<Vec<u8>, u64> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().as_bytes().to_vec(), e.ino())
        })
        .collect();
    mount.unmount();

    let levels = htree_levels(&img, "/big");
    assert!(levels.unwrap_or(0) >= 1, "kernel-grown directory has htree levels {levels:?}, want >= 1");
    let fs = Filesystem::open(&img).unwrap();
    let d = fs.resolve("/big").unwrap();
    let listing = fs.read_dir_all(d).unwrap();
    let ours: HashMap<Vec<u8>, u64> = listing
        .iter()
        .filter(|e| e.name != b"." && e.name != b"..")
        .map(|e| (e.name.clone(), u64::from(e.ino)))
        .collect();
    assert_eq!(ours.len(), listing.len() - 2, "duplicate names in readdir");
    assert!(ours == kernel, "readdir differs from the kernel's ({} vs {} names)", ours.len(), kernel.len());
    let mut chunked = 0;
    let mut cookie = 0;
    loop {
        let c = fs.readdir(d, cookie, 100).unwrap();
        let Some(last) = c.last() else { break };
        cookie = last.next_cookie;
        chunked += c.len();
    }
    assert_eq!(chunked, listing.len());
    for (i, n) in names.iter().enumerate() {
        let r = fs.lookup(d, n);
        if i >= 5 && (i - 5) % 10 == 0 {
            assert!(matches!(r, Err(uext4::Error::NotFound(_))), "deleted name {i} gave {r:?}");
        } else {
            assert_eq!(r.ok().map(u64::from), Some(kernel[n]), "lookup of name {i}");
        }
    }
    eprintln!("kernel htree: {} names, levels {levels:?}", ours.len());
}
