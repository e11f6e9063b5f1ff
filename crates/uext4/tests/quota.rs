//! Quotas (user, group, project) and project ids, read-write: uext4
//! changes files of several owners and projects, and e2fsck -fn (which
//! recomputes every id's usage and compares it with the quota files) must
//! find the files exact; limits set through the library give EDQUOT at
//! the limit and not before, and survive e2fsck; usage stays exact across
//! a crash and uext4's recovery.

mod rw_support;

use rw_support::{debugfs, fsck_clean, have, open_recording, Rng};
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use uext4::device::{BlockDevice, RecordingDevice};
use uext4::format::quota::QuotaType;
use uext4::inode_api::ProjectAttr;
use uext4::inode_api::QuotaLimits;
use uext4::inode_api::XattrSetMode;
use uext4::inode_api::{FallocMode, RenameFlags, SetAttr};
use uext4::MountOptions;
use uext4::{Error, Filesystem, FsCore};

const QUOTA_ARGS: [&str; 4] = ["-O", "quota,project", "-E", "quotatype=usrquota:grpquota:prjquota"];

fn tools() -> bool {
    if !have("e2fsck") || !have("debugfs") {
        eprintln!("SKIP: e2fsck or debugfs not installed");
        return false;
    }
    true
}

/// A fresh quota image (`extra`: more mkfs arguments).
fn quota_image(size_mb: u64, extra: &[&str]) -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    let mut args: Vec<&str> = QUOTA_ARGS.to_vec();
    args.extend_from_slice(extra);
    rw_support::mkfs(size_mb, &args)
}

/// `debugfs lq TYPE`: id -> (space, space soft, space hard, inodes, inode soft, inode hard).
fn debugfs_quota(img: &Path, ty: &str) -> HashMap<u32, [u64; 6]> {
    let out = debugfs(img, &format!("lq {ty}"));
    let mut m = HashMap::new();
    for line in out.lines().skip(1) {
        let v: Vec<u64> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        if v.len() == 7 {
            m.insert(v[0] as u32, [v[1], v[2], v[3], v[4], v[5], v[6]]);
        }
    }
    m
}

/// The library's view of the same (space limits in the format's 1 KiB
/// units, as debugfs prints them).
fn library_quota(fs: &Filesystem, ty: QuotaType) -> HashMap<u32, [u64; 6]> {
    fs.quota_entries(ty)
        .unwrap()
        .into_iter()
        .map(|d| (d.id, [d.curspace, d.bsoftlimit, d.bhardlimit, d.curinodes, d.isoftlimit, d.ihardlimit]))
        .collect()
}

/// Asserts that debugfs and the library (opened read-only) report the
/// same quotas, and returns the library's, by type.
fn quotas_agree(img: &Path) -> [HashMap<u32, [u64; 6]>; 3] {
    let fs = Filesystem::open(img).unwrap();
    let out = QuotaType::ALL.map(|ty| {
        let lib = library_quota(&fs, ty);
        let dbg = debugfs_quota(img, ty.name());
        // debugfs lists every entry; the library too (ids without usage
        // or limits may be listed by both as all zero).
        let nonzero = |m: &HashMap<u32, [u64; 6]>| -> HashMap<u32, [u64; 6]> {
            m.iter().filter(|(_, v)| v.iter().any(|&x| x != 0)).map(|(k, v)| (*k, *v)).collect()
        };
        assert_eq!(nonzero(&lib), nonzero(&dbg), "{} quota: library vs debugfs", ty.name());
        lib
    });
    out
}

/// What a name in [`random_ops`] refers to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Symlink,
}

/// Randomized operations by several owners and projects: creates,
/// buffered and direct writes, truncates, fallocate and punch, xattrs,
/// hard links, symlinks, renames (over existing files too), chown,
/// chgrp, project changes and removals.
fn random_ops(fs: &Filesystem, seed: u64, steps: usize) {
    let mut rng = Rng(seed);
    let root = fs.root();
    let owners = [(0u32, 0u32), (1000, 100), (1001, 100), (1002, 200), (70000, 70001)];
    // Without the project feature only project 0 exists.
    let has_project = fs.superblock().features.has_ro_compat(uext4::format::features::ro_compat::PROJECT);
    let projects: &[u32] = if has_project { &[0, 5, 42, 1 << 20] } else { &[0, 0, 0] };
    // Two project directories whose new files inherit their project.
    let mut dirs = vec![root];
    for (k, &p) in projects[1..3].iter().enumerate() {
        let d = fs.mkdir(root, format!("proj{seed}.{k}").as_bytes(), 0o777, 0, 0).unwrap().ino;
        fs.set_project(d, ProjectAttr { projid: p, inherit: has_project }).unwrap();
        dirs.push(d);
    }
    let mut names: Vec<(u32, u32, String, Kind)> = Vec::new(); // (parent, ino, name, kind)
    for step in 0..steps {
        let pick = |rng: &mut Rng, names: &[(u32, u32, String, Kind)], want: Option<Kind>| {
            let c: Vec<usize> = (0..names.len()).filter(|&i| want.is_none_or(|k| names[i].3 == k)).collect();
            (!c.is_empty()).then(|| c[rng.below(c.len() as u64) as usize])
        };
        let (uid, gid) = owners[rng.below(owners.len() as u64) as usize];
        let name = format!("f{seed}.{step}");
        match rng.below(16) {
            0..=2 => {
                let parent = dirs[rng.below(dirs.len() as u64) as usize];
                let (st, kind) = match rng.below(6) {
                    0 => (fs.mkdir(parent, name.as_bytes(), 0o755, uid, gid).unwrap(), Kind::Dir),
                    1 => {
                        let target = "t".repeat(1 + rng.below(900) as usize);
                        (
                            FsCore::symlink(fs, parent, name.as_bytes(), target.as_bytes(), uid, gid).unwrap(),
                            Kind::Symlink,
                        )
                    }
                    _ => (fs.create(parent, name.as_bytes(), 0o644, uid, gid).unwrap(), Kind::File),
                };
                if kind == Kind::Dir {
                    dirs.push(st.ino);
                }
                names.push((parent, st.ino, name, kind));
            }
            3..=5 => {
                let Some(i) = pick(&mut rng, &names, Some(Kind::File)) else { continue };
                let ino = names[i].1;
                let off = rng.below(200_000);
                let data = rw_support::pattern(step as u64, 1 + rng.below(40_000) as usize);
                if rng.below(2) == 0 {
                    FsCore::write(fs, ino, off, &data).unwrap();
                } else {
                    fs.write_direct(ino, off, &data).unwrap();
                }
            }
            6 => {
                let Some(i) = pick(&mut rng, &names, Some(Kind::File)) else { continue };
                fs.setattr(names[i].1, SetAttr { size: Some(rng.below(100_000)), ..Default::default() }).unwrap();
            }
            7 => {
                let Some(i) = pick(&mut rng, &names, None) else { continue };
                let attr = match rng.below(3) {
                    0 => SetAttr { uid: Some(uid), ..Default::default() },
                    1 => SetAttr { gid: Some(gid), ..Default::default() },
                    _ => SetAttr { uid: Some(uid), gid: Some(gid), ..Default::default() },
                };
                fs.setattr(names[i].1, attr).unwrap();
            }
            8 => {
                let Some(i) = pick(&mut rng, &names, None) else { continue };
                let p = projects[rng.below(projects.len() as u64) as usize];
                fs.set_project(names[i].1, ProjectAttr { projid: p, inherit: false }).unwrap();
            }
            9 => {
                let Some(i) = pick(&mut rng, &names, None) else { continue };
                let (parent, ino, name, kind) = names[i].clone();
                let r = if kind == Kind::Dir {
                    fs.rmdir(parent, name.as_bytes())
                } else {
                    fs.unlink(parent, name.as_bytes())
                };
                match r {
                    Ok(()) => {
                        names.swap_remove(i);
                        dirs.retain(|&d| d != ino);
                    }
                    Err(Error::NotEmpty(_)) => {}
                    Err(e) => panic!("remove: {e}"),
                }
            }
            10 => {
                let Some(i) = pick(&mut rng, &names, Some(Kind::File)) else { continue };
                let mode = [FallocMode::Allocate, FallocMode::KeepSize, FallocMode::PunchHole, FallocMode::ZeroRange]
                    [rng.below(4) as usize];
                fs.fallocate(names[i].1, mode, rng.below(150_000), 1 + rng.below(60_000)).unwrap();
            }
            11 => {
                let Some(i) = pick(&mut rng, &names, Some(Kind::File)) else { continue };
                let value = rw_support::pattern(step as u64, rng.below(1200) as usize);
                let key = format!("user.q{}", rng.below(3));
                match fs.set_xattr(names[i].1, key.as_bytes(), &value, XattrSetMode::default()) {
                    Ok(()) | Err(Error::NoSpace(_)) => {}
                    Err(e) => panic!("set_xattr: {e}"),
                }
            }
            12 => {
                // A file moved to another directory, over an existing file.
                let (Some(i), Some(j)) =
                    (pick(&mut rng, &names, Some(Kind::File)), pick(&mut rng, &names, Some(Kind::File)))
                else {
                    continue;
                };
                if names[i].1 == names[j].1 {
                    continue;
                }
                let (src, dst) = (names[i].clone(), names[j].clone());
                match FsCore::rename(fs, src.0, src.2.as_bytes(), dst.0, dst.2.as_bytes(), RenameFlags::default()) {
                    Ok(()) => {
                        names[j].1 = src.1;
                        names.swap_remove(i);
                    }
                    Err(Error::CrossDevice(_)) => {}
                    Err(e) => panic!("rename: {e}"),
                }
            }
            13 => {
                let Some(i) = pick(&mut rng, &names, Some(Kind::File)) else { continue };
                let parent = dirs[rng.below(dirs.len() as u64) as usize];
                let ino = names[i].1;
                match fs.link(ino, parent, name.as_bytes()) {
                    Ok(_) => names.push((parent, ino, name, Kind::File)),
                    Err(Error::CrossDevice(_)) => {}
                    Err(e) => panic!("link: {e}"),
                }
            }
            _ => {}
        }
    }
}

#[test]
fn usage_stays_exact_through_random_ops_of_several_owners() {
    if !tools() {
        return;
    }
    for (seed, bs) in [(1u64, "1024"), (2, "4096")] {
        let Some((_d, img)) = quota_image(32, &["-b", bs]) else { return };
        fsck_clean(&img);
        {
            let mut fs = Filesystem::open_rw(&img).unwrap();
            random_ops(&fs, seed, 400);
            fs.unmount().unwrap();
        }
        fsck_clean(&img);
        let q = quotas_agree(&img);
        // Several ids of each type were charged.
        for (ty, m) in QuotaType::ALL.iter().zip(&q) {
            let used = m.values().filter(|v| v[3] > 0).count();
            assert!(used >= 3, "{} quota: only {used} ids in use: {m:?}", ty.name());
        }
        assert!(q[0].get(&70000).is_some_and(|v| v[3] > 0), "uid 70000 (past 16 bits) charged: {:?}", q[0]);
    }
}

/// A tree owned by several uids and gids, made into an image by
/// `mke2fs -d` (whose quota files e2fsck -fy then makes exact, as mke2fs
/// 1.47.0 leaves them stale); uext4 changes it further.
#[test]
fn mke2fs_tree_of_several_owners_stays_exact() {
    if !tools() || !rw_support::is_root() {
        eprintln!("SKIP: needs e2fsck, debugfs and root (to chown the source tree)");
        return;
    }
    let src = tempfile::tempdir().unwrap();
    for (k, (uid, gid)) in [(0u32, 0u32), (1000, 100), (1001, 200), (1002, 100)].into_iter().enumerate() {
        let d = src.path().join(format!("d{k}"));
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("a"), rw_support::pattern(k as u64, 5000 * (k + 1))).unwrap();
        std::fs::write(d.join("b"), b"small").unwrap();
        for p in [d.join("a"), d.join("b"), d.clone()] {
            std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
        }
    }
    let Some((_d, img)) = quota_image(32, &["-b", "1024", "-d", src.path().to_str().unwrap()]) else { return };
    let out = Command::new("e2fsck").arg("-fy").arg(&img).output().unwrap();
    assert!(out.status.code().is_some_and(|c| c <= 1), "e2fsck -fy: {}", String::from_utf8_lossy(&out.stdout));
    fsck_clean(&img);
    let before = quotas_agree(&img);
    assert!(before[0].get(&1001).is_some_and(|v| v[3] == 3), "uid 1001: {:?}", before[0]);
    {
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let d1 = fs.lookup(fs.root(), b"d1").unwrap();
        let a = fs.lookup(d1, b"a").unwrap();
        fs.setattr(a, SetAttr { uid: Some(1002), gid: Some(200), ..Default::default() }).unwrap();
        fs.write_direct(a, 100_000, &[7u8; 9000]).unwrap();
        let d2 = fs.lookup(fs.root(), b"d2").unwrap();
        fs.unlink(d2, b"a").unwrap();
        let q = fs.quota(QuotaType::User, 1001).unwrap().unwrap();
        assert_eq!(q.curinodes, 2, "uid 1001 lost d1/a: {q:?}");
        random_ops(&fs, 9, 150);
        fs.unmount().unwrap();
    }
    fsck_clean(&img);
    quotas_agree(&img);
}

/// `-O quota` alone (user and group quota files, no project feature).
#[test]
fn user_and_group_quota_without_project() {
    if !tools() {
        return;
    }
    let Some((_d, img)) = rw_support::mkfs(32, &["-O", "quota", "-b", "1024"]) else { return };
    {
        let mut fs = Filesystem::open_rw(&img).unwrap();
        random_ops(&fs, 11, 300);
        assert!(fs.quota(QuotaType::Project, 0).unwrap().is_none());
        let e = fs.set_project(fs.root(), ProjectAttr { projid: 3, inherit: false }).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e}");
        fs.unmount().unwrap();
    }
    fsck_clean(&img);
    let q = quotas_agree(&img);
    assert!(q[0].len() >= 3 && q[1].len() >= 3 && q[2].is_empty(), "{q:?}");
}

#[test]
fn hard_limits_give_edquot_at_the_limit_and_not_before() {
    if !tools() {
        return;
    }
    let Some((_d, img)) = quota_image(32, &["-b", "4096"]) else { return };
    let limits = QuotaLimits { space_hard: 64 << 10, space_soft: 48 << 10, inodes_hard: 3, inodes_soft: 0 };
    {
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let root = fs.root();
        fs.set_quota_limits(QuotaType::User, 1000, limits).unwrap();
        fs.set_quota_limits(QuotaType::Project, 7, QuotaLimits { space_hard: 32 << 10, ..Default::default() }).unwrap();
        // Space: 64 KiB fit exactly (no extent block for one extent).
        let f = fs.create(root, b"f", 0o644, 1000, 1000).unwrap().ino;
        fs.write_direct(f, 0, &[1u8; 64 << 10]).unwrap();
        assert_eq!(fs.quota(QuotaType::User, 1000).unwrap().unwrap().curspace, 64 << 10);
        let e = fs.write_direct(f, 64 << 10, &[2u8; 4096]).unwrap_err();
        assert!(matches!(e, Error::QuotaExceeded(_)), "{e}");
        assert_eq!(e.errno(), libc::EDQUOT);
        let e = FsCore::write(&fs, f, 64 << 10, &[2u8; 4096]).unwrap_err();
        assert!(matches!(e, Error::QuotaExceeded(_)), "buffered: {e}");
        // An xattr block is space too.
        let e = fs.set_xattr(f, b"user.big", &[9u8; 2000], XattrSetMode::default()).unwrap_err();
        assert!(matches!(e, Error::QuotaExceeded(_)), "xattr block: {e}");
        fs.set_xattr(f, b"user.small", b"fits in the inode", XattrSetMode::default()).unwrap();
        // Rewriting what is allocated needs nothing.
        fs.write_direct(f, 0, &[3u8; 4096]).unwrap();
        // Another owner is not limited.
        let g = fs.create(root, b"g", 0o644, 1001, 1000).unwrap().ino;
        fs.write_direct(g, 0, &[4u8; 128 << 10]).unwrap();
        // chown of g to uid 1000 would pass the limit.
        let e = fs.setattr(g, SetAttr { uid: Some(1000), ..Default::default() }).unwrap_err();
        assert!(matches!(e, Error::QuotaExceeded(_)), "chown: {e}");
        assert_eq!(fs.stat(g).unwrap().uid, 1001);
        // Inodes: f is one; two more fit, the fourth does not.
        fs.create(root, b"h1", 0o644, 1000, 1000).unwrap();
        fs.mkdir(root, b"h2", 0o755, 1000, 1000).unwrap_err(); // its block: over the space limit
        fs.create(root, b"h2", 0o644, 1000, 1000).unwrap();
        let e = fs.create(root, b"h3", 0o644, 1000, 1000).unwrap_err();
        assert!(matches!(e, Error::QuotaExceeded(_)), "inode limit: {e}");
        assert_eq!(fs.quota(QuotaType::User, 1000).unwrap().unwrap().curinodes, 3);
        // Buffered writes count this file's data not yet written back.
        let b = fs.create(root, b"b", 0o644, 1002, 1000).unwrap().ino;
        fs.set_quota_limits(QuotaType::User, 1002, QuotaLimits { space_hard: 40 << 10, ..Default::default() }).unwrap();
        for k in 0..10 {
            FsCore::write(&fs, b, k * 4096, &[7u8; 4096]).unwrap();
        }
        let e = FsCore::write(&fs, b, 10 * 4096, &[7u8; 4096]).unwrap_err();
        assert!(matches!(e, Error::QuotaExceeded(_)), "buffered past the limit: {e}");
        fs.fsync(b).unwrap();
        assert_eq!(fs.quota(QuotaType::User, 1002).unwrap().unwrap().curspace, 40 << 10);
        {
            // A caller with CAP_SYS_RESOURCE (the FUSE daemon's root
            // requests) passes the limits; the scope ends with the block.
            let _cap = uext4::inode_api::sys_resource(true);
            FsCore::write(&fs, b, 10 * 4096, &[7u8; 4096]).unwrap();
            fs.write_direct(f, 64 << 10, &[2u8; 4096]).unwrap();
        }
        fs.fsync(b).unwrap();
        assert_eq!(fs.quota(QuotaType::User, 1002).unwrap().unwrap().curspace, 44 << 10);
        let e = FsCore::write(&fs, b, 11 * 4096, &[7u8; 4096]).unwrap_err();
        assert!(matches!(e, Error::QuotaExceeded(_)), "after the scope: {e}");
        // Freeing makes room again.
        fs.setattr(f, SetAttr { size: Some(32 << 10), ..Default::default() }).unwrap();
        fs.write_direct(f, 32 << 10, &[5u8; 32 << 10]).unwrap();
        // Project limit: moving g (128 KiB) into project 7 is refused.
        let e = fs.set_project(g, ProjectAttr { projid: 7, inherit: false }).unwrap_err();
        assert!(matches!(e, Error::QuotaExceeded(_)), "project move: {e}");
        fs.unmount().unwrap();
    }
    fsck_clean(&img);
    // Limits survive e2fsck and reopening; e2fsck agrees with the usage.
    let q = quotas_agree(&img);
    assert_eq!(q[0][&1000], [64 << 10, 48, 64, 3, 0, 3]);
    // The root reserve's holder (CAP_SYS_RESOURCE) passes hard limits.
    {
        let mut fs = rw_support::open_rw_reserved(&img);
        let f = fs.lookup(fs.root(), b"f").unwrap();
        fs.write_direct(f, 64 << 10, &[6u8; 8192]).unwrap();
        fs.create(fs.root(), b"h3", 0o644, 1000, 1000).unwrap();
        fs.unmount().unwrap();
    }
    fsck_clean(&img);
    let q = quotas_agree(&img);
    assert_eq!(q[0][&1000][0], 72 << 10);
    assert_eq!(q[0][&1000][3], 4);
}

#[test]
fn soft_limits_refuse_once_their_grace_time_is_over() {
    if !tools() {
        return;
    }
    let Some((_d, img)) = quota_image(32, &["-b", "1024"]) else { return };
    {
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let root = fs.root();
        assert_eq!(fs.quota_grace(QuotaType::Group).unwrap(), Some((604800, 604800)));
        let soft = QuotaLimits { space_soft: 16 << 10, inodes_soft: 2, ..Default::default() };
        fs.set_quota_limits(QuotaType::Group, 300, soft).unwrap();
        // A week of grace: past the soft limit is allowed.
        let f = fs.create(root, b"f", 0o644, 5, 300).unwrap().ino;
        fs.write_direct(f, 0, &[1u8; 20 << 10]).unwrap();
        let q = fs.quota(QuotaType::Group, 300).unwrap().unwrap();
        assert!(q.btime > 0 && q.itime == 0, "{q:?}");
        fs.write_direct(f, 20 << 10, &[1u8; 4 << 10]).unwrap();
        // No grace: the next block past the soft limit is refused...
        fs.set_quota_grace(QuotaType::Group, 0, 0).unwrap();
        fs.set_quota_limits(QuotaType::Group, 300, soft).unwrap(); // restarts the grace time
        let e = fs.write_direct(f, 24 << 10, &[1u8; 1024]).unwrap_err();
        assert!(matches!(e, Error::QuotaExceeded(_)), "{e}");
        // ... until the usage is back under it.
        fs.setattr(f, SetAttr { size: Some(8 << 10), ..Default::default() }).unwrap();
        assert_eq!(fs.quota(QuotaType::Group, 300).unwrap().unwrap().btime, 0);
        fs.write_direct(f, 8 << 10, &[1u8; 8 << 10]).unwrap();
        // Inodes (soft limit 2, no grace): f and g fit, h passes the
        // soft limit (starting a grace time that is already over), i is
        // refused.
        fs.create(root, b"g", 0o644, 5, 300).unwrap();
        fs.create(root, b"h", 0o644, 5, 300).unwrap();
        let e = fs.create(root, b"i", 0o644, 5, 300).unwrap_err();
        assert!(matches!(e, Error::QuotaExceeded(_)), "{e}");
        fs.unmount().unwrap();
    }
    fsck_clean(&img);
    let q = quotas_agree(&img);
    assert_eq!(q[1][&300][3], 3);
}

#[test]
fn project_ids_are_inherited_and_move_usage() {
    if !tools() {
        return;
    }
    let Some((_d, img)) = quota_image(32, &["-b", "1024"]) else { return };
    {
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let root = fs.root();
        let p = fs.mkdir(root, b"p", 0o755, 0, 0).unwrap().ino;
        fs.set_project(p, ProjectAttr { projid: 77, inherit: true }).unwrap();
        assert_eq!(fs.project(p).unwrap(), ProjectAttr { projid: 77, inherit: true });
        let sub = fs.mkdir(p, b"sub", 0o755, 0, 0).unwrap().ino;
        assert_eq!(fs.project(sub).unwrap(), ProjectAttr { projid: 77, inherit: true });
        let f = fs.create(sub, b"f", 0o644, 0, 0).unwrap().ino;
        assert_eq!(fs.project(f).unwrap(), ProjectAttr { projid: 77, inherit: false });
        assert_eq!(fs.stat(f).unwrap().projid, 77);
        fs.write_direct(f, 0, &[1u8; 10_000]).unwrap();
        let outside = fs.create(root, b"o", 0o644, 0, 0).unwrap().ino;
        assert_eq!(fs.project(outside).unwrap().projid, 0);
        let q = fs.quota(QuotaType::Project, 77).unwrap().unwrap();
        // p, sub and f, with a block each for p and sub and 10 for f.
        assert_eq!((q.curinodes, q.curspace), (3, 12 << 10));
        // A name in the project tree for a file of another project: EXDEV
        // (user space copies instead), as the kernel's ext4_link/rename.
        let e = fs.link(outside, p, b"o2").unwrap_err();
        assert!(matches!(e, Error::CrossDevice(_)) && e.errno() == libc::EXDEV, "{e}");
        let e = FsCore::rename(&fs, root, b"o", sub, b"o", RenameFlags::default()).unwrap_err();
        assert!(matches!(e, Error::CrossDevice(_)), "{e}");
        FsCore::rename(&fs, sub, b"f", p, b"f", RenameFlags::default()).unwrap();
        FsCore::rename(&fs, p, b"f", sub, b"f", RenameFlags::default()).unwrap();
        fs.set_project(f, ProjectAttr { projid: 78, inherit: false }).unwrap();
        assert_eq!(fs.quota(QuotaType::Project, 77).unwrap().unwrap().curspace, 2 << 10);
        assert_eq!(fs.quota(QuotaType::Project, 78).unwrap().unwrap().curspace, 10 << 10);
        fs.unmount().unwrap();
    }
    fsck_clean(&img);
    let st = debugfs(&img, "stat /p/sub/f");
    let projid = st.split("Project:").nth(1).and_then(|r| r.split_whitespace().next());
    assert_eq!(projid, Some("78"), "{st}");
    let q = quotas_agree(&img);
    assert_eq!(q[2][&77][3], 2);
}

/// Crash points across operations of several owners: every image a crash
/// could leave, recovered by uext4's open, has exact quota files.
#[test]
fn usage_is_exact_after_a_crash_and_recovery() {
    if !tools() {
        return;
    }
    let Some((_d, img0)) = quota_image(16, &["-b", "1024", "-J", "size=1"]) else { return };
    let base = std::fs::read(&img0).unwrap();
    let (dev, fs) = open_recording(&base);
    let start = dev.events();
    random_ops(&fs, 5, 120);
    fs.commit().unwrap();
    random_ops(&fs, 6, 60);
    fs.commit().unwrap();
    let end = dev.events();
    std::mem::forget(fs);
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    let n = 10;
    for k in 0..=n {
        let point = start + (end - start) * k / n;
        for keep in [true, false] {
            let crashed = dev.crash_image(point, |_| keep);
            let dev2 = Arc::new(RecordingDevice::new(crashed));
            let opts = MountOptions { write: true, commit_interval: Duration::from_secs(3600), ..Default::default() };
            let mut fs = Filesystem::open_device(dev2.clone() as Arc<dyn BlockDevice>, opts)
                .unwrap_or_else(|e| panic!("open after a crash at {point}: {e}"));
            fs.unmount().unwrap();
            drop(fs);
            std::fs::write(&img, dev2.crash_image(dev2.events(), |_| true)).unwrap();
            fsck_clean(&img);
        }
    }
}

/// An unlinked file that is still open keeps charging its owners until
/// its last close frees it, as in the kernel: e2fsck, deleting the
/// orphans of a crash, takes their blocks and inode off the usage in the
/// quota files, so after a crash with the file open its own recovery
/// must find the files exact.
#[test]
fn an_unlinked_open_file_charges_until_its_last_close() {
    if !tools() {
        return;
    }
    let Some((_d, img0)) = quota_image(16, &[]) else { return };
    let (dev, mut fs) = open_recording(&std::fs::read(&img0).unwrap());
    let root = fs.root();
    let ino = fs.create(root, b"held", 0o644, 1000, 1000).unwrap().ino;
    fs.inodes().write(ino, 0, &vec![7u8; 20_000]).unwrap();
    fs.fsync(ino).unwrap();
    let used = |fs: &Filesystem| library_quota(fs, QuotaType::User).get(&1000).map_or([0; 2], |v| [v[0], v[3]]);
    let before = used(&fs);
    assert_eq!(before[1], 1);
    assert!(before[0] >= 20_000, "{before:?}");
    fs.open_inode(ino).unwrap();
    fs.unlink(root, b"held").unwrap();
    fs.commit().unwrap();
    assert_eq!(used(&fs), before, "the unlinked open file still charges");
    // A crash now: e2fsck deletes the orphan and finds the quota exact.
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("crashed");
    std::fs::write(&img, dev.crash_image(dev.events(), |_| true)).unwrap();
    let out = Command::new("e2fsck").arg("-fy").arg(&img).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Clearing orphaned inode"), "{text}");
    assert!(!text.contains("? yes"), "e2fsck -fy had to repair:\n{text}");
    fsck_clean(&img);
    // The last close frees it and its charge.
    fs.close_inode(ino).unwrap();
    assert_eq!(used(&fs), [0, 0]);
    fs.unmount().unwrap();
    drop(fs);
    std::fs::write(&img, dev.crash_image(dev.events(), |_| true)).unwrap();
    fsck_clean(&img);
}

/// Many ids, spread over every byte of the id: new tree blocks at each
/// level, data blocks filled (14 entries each) and taken off the
/// free-entry list, the quota files growing; then reopened (the tree
/// uext4 wrote is read back) and changed again.
#[test]
fn many_ids_grow_the_quota_tree() {
    if !tools() {
        return;
    }
    for bs in ["1024", "4096"] {
        let Some((_d, img)) = quota_image(32, &["-b", bs, "-N", "512"]) else { return };
        let ids: Vec<u32> = (0..70u32).map(|k| (k % 4) << (8 * (k % 4)) | (k * 37 + 1)).collect();
        {
            let mut fs = Filesystem::open_rw(&img).unwrap();
            let root = fs.root();
            for (k, &id) in ids.iter().enumerate() {
                let ino = fs.create(root, format!("u{k}").as_bytes(), 0o644, id, id ^ 0x5555).unwrap().ino;
                fs.write_direct(ino, 0, &[k as u8; 3000]).unwrap();
                fs.set_project(ino, ProjectAttr { projid: id.rotate_left(8), inherit: false }).unwrap();
            }
            fs.unmount().unwrap();
        }
        fsck_clean(&img);
        let q = quotas_agree(&img);
        for (k, &id) in ids.iter().enumerate() {
            assert_eq!(q[0].get(&id).map(|v| v[3]), Some(1), "uid {id} (file u{k}, {bs}-byte blocks)");
        }
        let st = debugfs(&img, "stat <3>");
        let size: u64 =
            st.split("Size: ").nth(1).and_then(|r| r.split_whitespace().next()).and_then(|v| v.parse().ok()).unwrap();
        // mke2fs made 6 quota blocks (header, 4 tree levels, one data block).
        assert!(size >= 6 * 1024 + 4 * 1024, "the user quota file grew: {size} bytes\n{st}");
        {
            let mut fs = Filesystem::open_rw(&img).unwrap();
            let root = fs.root();
            for k in (0..ids.len()).step_by(3) {
                fs.unlink(root, format!("u{k}").as_bytes()).unwrap();
            }
            let ino = fs.lookup(root, b"u1").unwrap();
            fs.setattr(ino, SetAttr { uid: Some(ids[0]), ..Default::default() }).unwrap();
            fs.unmount().unwrap();
        }
        fsck_clean(&img);
        let q = quotas_agree(&img);
        assert_eq!(q[0].get(&ids[0]).map(|v| v[3]), Some(1), "uid {} took u1", ids[0]);
        assert_eq!(q[0].get(&ids[3]).map_or(0, |v| v[3]), 0, "uid {} lost u3", ids[3]);
    }
}

/// Threads changing files of different and shared owners at once (the
/// lock-order checker of debug builds watches the quota mutex): the
/// usage stays exact.
#[test]
fn concurrent_changes_keep_usage_exact() {
    if !tools() {
        return;
    }
    let Some((_d, img)) = quota_image(64, &["-b", "4096"]) else { return };
    {
        let mut fs = Filesystem::open_rw(&img).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let fs = &fs;
                s.spawn(move || {
                    let root = fs.root();
                    let mut rng = Rng(100 + u64::from(t));
                    let dir = fs.mkdir(root, format!("t{t}").as_bytes(), 0o755, 1000 + t, 100).unwrap().ino;
                    let mut live: Vec<(String, u32)> = Vec::new();
                    for k in 0..150 {
                        match rng.below(5) {
                            0 | 1 => {
                                let name = format!("f{k}");
                                // Shared owners: threads charge the same ids at once.
                                let uid = [1000 + t, 2000][rng.below(2) as usize];
                                let ino = fs.create(dir, name.as_bytes(), 0o644, uid, 100 + t % 2).unwrap().ino;
                                live.push((name, ino));
                            }
                            2 if !live.is_empty() => {
                                let (_, ino) = &live[rng.below(live.len() as u64) as usize];
                                let data = rw_support::pattern(k, 1 + rng.below(30_000) as usize);
                                FsCore::write(fs, *ino, rng.below(100_000), &data).unwrap();
                            }
                            3 if !live.is_empty() => {
                                let (_, ino) = &live[rng.below(live.len() as u64) as usize];
                                let uid = [1000 + t, 2000, 3000][rng.below(3) as usize];
                                fs.setattr(*ino, SetAttr { uid: Some(uid), ..Default::default() }).unwrap();
                            }
                            4 if !live.is_empty() => {
                                let (name, _) = live.swap_remove(rng.below(live.len() as u64) as usize);
                                fs.unlink(dir, name.as_bytes()).unwrap();
                            }
                            _ => {}
                        }
                    }
                });
            }
        });
        fs.unmount().unwrap();
    }
    fsck_clean(&img);
    let q = quotas_agree(&img);
    assert!(q[0].get(&2000).is_some_and(|v| v[3] > 0), "{:?}", q[0]);
}

/// Issue 23 item 7: every xattr value kept in an EA inode charges its
/// owner one inode (the kernel's ext4_xattr_inode_alloc_quota; e2fsck's
/// pass 1 counts it), as well as its space: through set, replace, entries
/// in the inode and in the xattr block, chown, chgrp, a project change,
/// removal and deletion. e2fsck -fn (which recomputes usage and compares
/// it with the quota files) after each step.
#[test]
fn ea_inode_values_charge_their_owner_an_inode() {
    if !tools() {
        return;
    }
    let Some((_d, img)) = quota_image(32, &["-O", "ea_inode"]) else { return };
    let big = |seed: u8, len: usize| -> Vec<u8> { (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect() };
    let set = |fs: &Filesystem, ino: u32, name: &str, value: &[u8]| {
        fs.set_xattr(ino, name.as_bytes(), value, XattrSetMode::Any).unwrap();
        assert_eq!(fs.get_xattr(ino, name).unwrap(), value, "{name}");
    };
    // Every step on a fresh read-write open, checked once unmounted.
    let step = |what: &str, f: &dyn Fn(&Filesystem)| {
        let mut fs = Filesystem::open_rw(&img).unwrap();
        f(&fs);
        fs.unmount().unwrap();
        drop(fs);
        let out = Command::new("e2fsck").arg("-fn").arg(&img).output().unwrap();
        assert!(
            out.status.success(),
            "after {what}: e2fsck -fn:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let user_inodes = |uid: u32| {
        let fs = Filesystem::open(&img).unwrap();
        fs.quota(QuotaType::User, uid).unwrap().map_or(0, |q| q.curinodes)
    };
    step("create and set one value", &|fs| {
        let root = fs.root();
        let f = fs.create(root, b"f", 0o644, 1000, 1000).unwrap().ino;
        set(fs, f, "user.big", &big(1, 10_000));
        let g = fs.create(root, b"g", 0o644, 1000, 1000).unwrap().ino;
        set(fs, g, "user.big", &big(2, 10_000));
    });
    // f and g, and one EA inode each.
    assert_eq!(user_inodes(1000), 4);
    step("replace", &|fs| {
        let f = fs.resolve("/f").unwrap();
        set(fs, f, "user.big", &big(3, 12_000));
    });
    step("values in the inode and in the xattr block", &|fs| {
        let f = fs.resolve("/f").unwrap();
        for k in 0..8 {
            set(fs, f, &format!("user.more{k}"), &big(10 + k, 5_000 + usize::from(k)));
        }
    });
    assert_eq!(user_inodes(1000), 4 + 8);
    let st = debugfs(&img, "stat /f");
    let acl = st.split("File ACL:").nth(1).and_then(|r| r.split_whitespace().next());
    assert!(acl.is_some_and(|b| b != "0"), "some values are named from the xattr block:\n{st}");
    step("chown", &|fs| {
        let f = fs.resolve("/f").unwrap();
        fs.setattr(f, SetAttr { uid: Some(2000), ..Default::default() }).unwrap();
    });
    assert_eq!((user_inodes(1000), user_inodes(2000)), (2, 10));
    step("chgrp", &|fs| {
        let f = fs.resolve("/f").unwrap();
        fs.setattr(f, SetAttr { gid: Some(3000), ..Default::default() }).unwrap();
    });
    step("project change", &|fs| {
        let f = fs.resolve("/f").unwrap();
        fs.set_project(f, ProjectAttr { projid: 55, inherit: false }).unwrap();
    });
    step("replace with a small value, remove in the inode and in the block", &|fs| {
        let f = fs.resolve("/f").unwrap();
        set(fs, f, "user.more0", b"small");
        fs.remove_xattr(f, b"user.big").unwrap();
        fs.remove_xattr(f, b"user.more7").unwrap();
    });
    step("delete", &|fs| {
        let root = fs.root();
        fs.unlink(root, b"f").unwrap();
        fs.unlink(root, b"g").unwrap();
    });
    assert_eq!((user_inodes(1000), user_inodes(2000)), (0, 0));
    // An inode hard limit counts the EA inodes: the file and one value
    // fit in 2, a second value is EDQUOT and leaves nothing behind.
    step("inode limit", &|fs| {
        let limits = QuotaLimits { inodes_hard: 2, ..Default::default() };
        fs.set_quota_limits(QuotaType::User, 1000, limits).unwrap();
        let h = fs.create(fs.root(), b"h", 0o644, 1000, 1000).unwrap().ino;
        set(fs, h, "user.one", &big(20, 10_000));
        let e = fs.set_xattr(h, b"user.two", &big(21, 10_000), XattrSetMode::Any).unwrap_err();
        assert!(matches!(e, Error::QuotaExceeded(_)) && e.errno() == libc::EDQUOT, "{e}");
        assert!(fs.get_xattr(h, "user.two").is_err());
        // A value that stays in the inode or its block needs no inode.
        set(fs, h, "user.small", b"fits");
    });
    assert_eq!(user_inodes(1000), 2);
}

/// Sets the usage of `uid` in the user quota file of unmounted `img` to
/// zero inodes and zero bytes, below the truth (as an older uext4 that
/// did not charge EA inodes left it, or a hand edit): the entry is found
/// in the quota file's 1 KiB blocks (a 16-byte header, then 72-byte
/// v2r1 entries: id at 0, curinodes at 24, curspace at 48) by its id and
/// its usage `inodes`.
fn zero_user_usage(img: &Path, uid: u32, inodes: u64) {
    let bs = u64::from(Filesystem::open(img).unwrap().superblock().block_size());
    let blocks: Vec<u64> =
        debugfs(img, "blocks <3>").split_whitespace().map(|b| b.parse().expect("block number")).collect();
    let mut image = std::fs::read(img).unwrap();
    let mut found = 0;
    for b in blocks {
        for q in 0..(bs / 1024) {
            let at = (b * bs + q * 1024) as usize;
            for slot in 0..14 {
                let e = at + 16 + slot * 72;
                let field = |o: usize| u64::from_le_bytes(image[e + o..e + o + 8].try_into().unwrap());
                if u32::from_le_bytes(image[e..e + 4].try_into().unwrap()) == uid && field(24) == inodes {
                    image[e + 24..e + 32].fill(0);
                    image[e + 48..e + 56].fill(0);
                    found += 1;
                }
            }
        }
    }
    assert_eq!(found, 1, "the user quota entry of {uid} with {inodes} inodes");
    std::fs::write(img, image).unwrap();
}

/// Quota usage already below the truth (issue 23 polish, item 2): a
/// delete that would take it below zero clamps it at zero, as the
/// kernel's dquot_decr_inodes/dquot_decr_space do, and succeeds; no
/// error is recorded and the filesystem stays writable. Before, the
/// underflow was corruption: the unlink failed with EUCLEAN and the
/// journal aborted.
#[test]
fn quota_usage_below_the_truth_is_clamped_at_zero() {
    if !tools() {
        return;
    }
    let Some((_d, img)) = quota_image(16, &[]) else { return };
    {
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let root = fs.root();
        for name in [&b"a"[..], b"b"] {
            let ino = fs.create(root, name, 0o644, 1000, 1000).unwrap().ino;
            fs.inodes().write(ino, 0, &vec![7u8; 20_000]).unwrap();
        }
        fs.unmount().unwrap();
    }
    fsck_clean(&img);
    zero_user_usage(&img, 1000, 2);
    log::set_logger(&CAPTURE).expect("the only logger of this test binary");
    log::set_max_level(log::LevelFilter::Warn);
    {
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let root = fs.root();
        fs.unlink(root, b"a").expect("unlink with the owner's usage below the truth");
        fs.unlink(root, b"b").expect("the second unlink, usage at zero already");
        let q = fs.quota(QuotaType::User, 1000).unwrap().expect("entry of 1000");
        assert_eq!((q.curinodes, q.curspace), (0, 0), "clamped at zero");
        // Still writable: nothing aborted.
        fs.create(root, b"after", 0o644, 0, 0).expect("create after the clamped deletes");
        fs.unmount().unwrap();
    }
    let warned: Vec<String> = CAPTURE.0.lock().unwrap().iter().filter(|m| m.contains("clamped")).cloned().collect();
    assert_eq!(warned.len(), 1, "one warning for user 1000, however many clamps: {warned:?}");
    assert!(warned[0].contains("user quota of id 1000"), "{warned:?}");
    let out = Command::new("dumpe2fs").arg("-h").arg(&img).output().unwrap();
    let d = String::from_utf8_lossy(&out.stdout);
    assert!(!d.contains("FS Error count"), "an error was recorded:\n{d}");
    assert!(d.lines().any(|l| l.starts_with("Filesystem state:") && l.trim_end().ends_with("clean")), "{d}");
    // Both files of 1000 are gone: the clamped usage (0) is the truth.
    fsck_clean(&img);
}

/// Keeps the warnings the library logs (the `log` facade), for
/// [`quota_usage_below_the_truth_is_clamped_at_zero`].
struct Capture(std::sync::Mutex<Vec<String>>);

static CAPTURE: Capture = Capture(std::sync::Mutex::new(Vec::new()));

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Warn
    }

    fn log(&self, r: &log::Record<'_>) {
        self.0.lock().unwrap().push(format!("{}", r.args()));
    }

    fn flush(&self) {}
}
