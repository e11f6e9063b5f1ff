//! Crash tests: a workload runs on a device that records every write and
//! flush; for many crash points (each keeping a random subset of the
//! writes issued since the last flush), the image is recovered by uext4
//! and by `e2fsck -fy`, must then be `e2fsck -fn` clean, and every file
//! fsync'd before the crash must be intact.

mod rw_support;

use rw_support::Rng;

use rw_support::{fsck_clean, have};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use uext4::device::{BlockDevice, RecordingDevice};
use uext4::inode_api::{FallocMode, RenameFlags, SetAttr};
use uext4::Filesystem;
use uext4::MountOptions;

/// A file that was fsync'd: its contents must survive a crash at any
/// event index >= `durable_at`.
struct Synced {
    path: String,
    data: Vec<u8>,
    durable_at: usize,
}

fn base_image(args: &[&str]) -> Option<Vec<u8>> {
    let (_d, img) = rw_support::mkfs(32, args)?;
    Some(std::fs::read(&img).unwrap())
}

/// A filesystem on a fresh image with `args`, over a device that records
/// every write; the journal commits only when asked (the timer is an hour).
/// None (with the reason printed) without e2fsprogs.
fn recorded_fs(args: &[&str]) -> Option<(Arc<RecordingDevice>, Filesystem)> {
    if !have("e2fsck") {
        eprintln!("SKIP: e2fsck not installed");
        return None;
    }
    let dev = Arc::new(RecordingDevice::new(base_image(args)?));
    let opts = MountOptions { write: true, commit_interval: Duration::from_secs(3600), ..Default::default() };
    let fs = Filesystem::open_device(dev.clone() as Arc<dyn BlockDevice>, opts).unwrap();
    Some((dev, fs))
}

fn workload(fs: &Filesystem, dev: &RecordingDevice, seed: u64) -> Vec<Synced> {
    let mut rng = Rng(seed | 1);
    let root = fs.root();
    let dirs: Vec<u32> = (0..3).map(|i| fs.mkdir(root, format!("d{i}").as_bytes(), 0o755, 0, 0).unwrap().ino).collect();
    let mut synced = Vec::new();
    let mut noise: Vec<(u32, String)> = Vec::new();
    for i in 0..120 {
        let d = dirs[rng.below(3) as usize];
        let di = dirs.iter().position(|&x| x == d).unwrap();
        match rng.below(10) {
            0..=3 => {
                // A file written once and fsync'd.
                let name = format!("s{i}");
                let len = rng.below(40_000) as usize;
                let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                let ino = fs.create(d, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
                fs.inodes().write(ino, 0, &data).unwrap();
                fs.fsync(ino).unwrap();
                synced.push(Synced { path: format!("/d{di}/{name}"), data, durable_at: dev.events() });
            }
            4..=6 => {
                let name = format!("n{i}");
                let ino = fs.create(d, name.as_bytes(), 0o600, 0, 0).unwrap().ino;
                let len = rng.below(20_000) as usize;
                fs.inodes().write(ino, rng.below(5000), &vec![i as u8; len]).unwrap();
                noise.push((d, name));
            }
            7 if !noise.is_empty() => {
                let k = rng.below(noise.len() as u64) as usize;
                let (pd, name) = noise.swap_remove(k);
                fs.unlink(pd, name.as_bytes()).unwrap();
            }
            8 if !noise.is_empty() => {
                let k = rng.below(noise.len() as u64) as usize;
                let (pd, name) = noise[k].clone();
                let new = format!("r{i}");
                fs.inodes().rename(pd, name.as_bytes(), d, new.as_bytes(), RenameFlags::default()).unwrap();
                noise[k] = (d, new);
            }
            _ => {
                if rng.below(4) == 0 {
                    fs.commit().unwrap();
                }
            }
        }
    }
    synced
}

fn check_synced(fs: &Filesystem, synced: &[Synced], point: usize, what: &str) {
    for s in synced.iter().filter(|s| s.durable_at <= point) {
        let ino = fs.resolve(&s.path).unwrap_or_else(|e| panic!("{what}: fsync'd {} lost: {e}", s.path));
        let got = fs.read_all(ino).unwrap();
        assert!(got == s.data, "{what}: fsync'd {} has wrong contents", s.path);
    }
}

fn run(args: &[&str], seed: u64, points: usize) {
    let Some((dev, fs)) = recorded_fs(args) else { return };
    let synced = workload(&fs, &dev, seed);
    // Crash: the filesystem is abandoned without unmount.
    std::mem::forget(fs);
    let total = dev.events();
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(seed.wrapping_mul(31) | 1);
    for k in 0..points {
        // Spread points over the run, plus the very end.
        let point = if k == 0 { total } else { rng.below(total as u64 + 1) as usize };
        let mask = rng.next();
        let keep_all = k % 5 == 1;
        let img_bytes = dev.crash_image(point, |i| keep_all || (mask >> (i % 64)) & 1 == 1);
        let what = format!("{args:?} seed {seed} crash at {point}/{total}");
        // uext4 recovers it.
        let img = dir.path().join(format!("u{k}"));
        std::fs::write(&img, &img_bytes).unwrap();
        let mut fs = Filesystem::open_rw(&img).unwrap_or_else(|e| panic!("{what}: open: {e}"));
        check_synced(&fs, &synced, point, &what);
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        std::fs::remove_file(&img).unwrap();
        // e2fsck recovers it (every third point, for time).
        if k % 3 == 0 {
            let img = dir.path().join(format!("e{k}"));
            std::fs::write(&img, &img_bytes).unwrap();
            let out = Command::new("e2fsck").arg("-fy").arg(&img).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            // Replaying the journal is expected; any repair is a failure.
            assert!(
                out.status.code().unwrap_or(8) <= 1 && !text.contains("? yes"),
                "{what}: e2fsck -fy had to repair:\n{text}"
            );
            fsck_clean(&img);
            check_synced(&Filesystem::open(&img).unwrap(), &synced, point, &what);
            std::fs::remove_file(&img).unwrap();
        }
    }
}

#[test]
fn crash_points_1k_csum() {
    run(&["-b", "1024", "-J", "size=1"], 1, 40);
}

#[test]
fn crash_points_4k_nocsum() {
    run(&["-b", "4096", "-O", "^metadata_csum"], 7, 30);
}

/// ext3: block-mapped files (past 12 KiB: single indirect blocks, journaled).
#[test]
fn crash_points_ext3_blockmapped() {
    run(&["-t", "ext3", "-b", "1024"], 11, 30);
}

/// Tag of a file of the data-path workload, from its name `t<tag>`.
fn tag_of(name: &str) -> Option<u32> {
    name.strip_prefix('t')?.parse().ok()
}

/// 8-byte records (tag, offset / 8) covering `[off, off + len)` (8-aligned).
fn records(tag: u32, off: u64, len: u64) -> Vec<u8> {
    (off / 8..(off + len) / 8).flat_map(|r| [tag.to_le_bytes(), (r as u32).to_le_bytes()].concat()).collect()
}

/// The data path under crashes: files written through the direct
/// overwrite, unwritten-conversion and allocating paths and the buffered
/// path, on blocks that held other files' data before (those files were
/// deleted first). After recovery at any crash point, every record of
/// every file is zero or that file's own record for that offset (no
/// stale block contents), and files fsync'd as their last operation are
/// intact.
fn run_data_path(args: &[&str], seed: u64, points: usize) {
    let Some((dev, fs)) = recorded_fs(args) else { return };
    let root = fs.root();
    let mut rng = Rng(seed | 1);
    // Garbage that must never reappear: fill most of the disk, then free it.
    for g in 0..6u32 {
        let name = format!("g{g}");
        let ino = fs.create(root, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.inodes().write(ino, 0, &records(0xDEAD_0000 | g, 0, 3 << 20)).unwrap();
    }
    fs.commit().unwrap();
    for g in 0..6u32 {
        fs.unlink(root, format!("g{g}").as_bytes()).unwrap();
    }
    fs.commit().unwrap();
    let start = dev.events();
    let mut synced = Vec::new();
    for tag in 1..=30u32 {
        let name = format!("t{tag}");
        let ino = fs.create(root, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        let mut model = Vec::new();
        let size = 8192 * (1 + rng.below(24));
        match tag % 4 {
            0 => {
                // Unwritten extents written directly, converted at completion.
                fs.fallocate(ino, FallocMode::Allocate, 0, size).unwrap();
                model.resize(size as usize, 0);
                for _ in 0..6 {
                    let off = rng.below(size / 4096) * 4096;
                    let d = records(tag, off, 4096);
                    fs.write_direct(ino, off, &d).unwrap();
                    model[off as usize..off as usize + 4096].copy_from_slice(&d);
                }
            }
            1 => {
                // Allocating direct writes, then direct overwrites.
                let d = records(tag, 0, size);
                fs.write_direct(ino, 0, &d).unwrap();
                model = d;
                let off = rng.below(size / 8) * 8;
                let len = (size - off).min(1000) & !7;
                let d = records(tag, off, len);
                fs.write_direct(ino, off, &d).unwrap();
            }
            2 => {
                // Buffered: extending, then in-folio rewrites.
                for k in 0..size / 8192 {
                    fs.inodes().write(ino, k * 8192, &records(tag, k * 8192, 8192)).unwrap();
                }
                model = records(tag, 0, size);
                fs.inodes().write(ino, 16, &records(tag, 16, 64)).unwrap();
            }
            _ => {
                // Truncate down and grow back (zeros), then a write past EOF.
                fs.inodes().write(ino, 0, &records(tag, 0, size)).unwrap();
                fs.setattr(ino, SetAttr { size: Some(size / 2), ..Default::default() }).unwrap();
                fs.setattr(ino, SetAttr { size: Some(size), ..Default::default() }).unwrap();
                model = records(tag, 0, size);
                model[(size / 2) as usize..].fill(0);
                fs.inodes().write(ino, size + 4096, &records(tag, size + 4096, 4096)).unwrap();
                model.resize((size + 4096) as usize, 0);
                model.extend_from_slice(&records(tag, size + 4096, 4096));
            }
        }
        if rng.below(2) == 0 {
            fs.fsync(ino).unwrap();
            synced.push(Synced { path: format!("/{name}"), data: model, durable_at: dev.events() });
        } else if rng.below(3) == 0 {
            fs.commit().unwrap();
        }
    }
    std::mem::forget(fs);
    let total = dev.events();
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(seed.wrapping_mul(77) | 1);
    for k in 0..points {
        let point = if k == 0 { total } else { start + rng.below((total - start) as u64 + 1) as usize };
        let mask = rng.next();
        let img_bytes = dev.crash_image(point, |i| k % 4 == 1 || (mask >> (i % 64)) & 1 == 1);
        let what = format!("{args:?} seed {seed} data-path crash at {point}/{total}");
        let img = dir.path().join(format!("d{k}"));
        std::fs::write(&img, &img_bytes).unwrap();
        let mut fs = Filesystem::open_rw(&img).unwrap_or_else(|e| panic!("{what}: open: {e}"));
        check_synced(&fs, &synced, point, &what);
        for e in fs.read_dir_all(fs.root()).unwrap() {
            let name = String::from_utf8_lossy(&e.name).into_owned();
            let Some(tag) = tag_of(&name) else { continue };
            let got = fs.read_all(e.ino).unwrap();
            for (i, r) in got.chunks(8).enumerate() {
                let zero = r.iter().all(|&b| b == 0);
                let own = r.len() == 8 && r[..4] == tag.to_le_bytes() && r[4..] == (i as u32).to_le_bytes();
                assert!(zero || own, "{what}: /{name} byte {} holds stale data {r:?}", i * 8);
            }
        }
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        std::fs::remove_file(&img).unwrap();
    }
}

#[test]
fn crash_points_data_path_4k() {
    run_data_path(&["-b", "4096"], 3, 25);
}

#[test]
fn crash_points_data_path_1k() {
    run_data_path(&["-b", "1024", "-O", "^metadata_csum"], 5, 20);
}

#[test]
fn crash_points_bigalloc() {
    run(&["-b", "4096", "-O", "bigalloc", "-C", "16384"], 11, 20);
    run_data_path(&["-b", "1024", "-O", "bigalloc", "-C", "16384"], 13, 15);
}

/// auto_da_alloc under a crash: a file written without fsync and renamed
/// over another, and a file truncated to zero while open, rewritten and
/// closed, are written back by the rename and the close. Once the
/// journal has committed those (its timer, not a sync), a crash leaves
/// the new contents under the names, where without auto_da_alloc it
/// leaves empty files (checked too: the test sees the difference).
#[test]
fn auto_da_alloc_survives_crash() {
    if !have("e2fsck") {
        eprintln!("SKIP: e2fsck not installed");
        return;
    }
    let Some(base) = base_image(&["-b", "4096"]) else { return };
    for auto in [true, false] {
        let dev = Arc::new(RecordingDevice::new(base.clone()));
        let data = uext4::DataPathConfig { auto_da_alloc: auto, ..Default::default() };
        let opts = MountOptions { write: true, commit_interval: Duration::from_millis(20), data, ..Default::default() };
        let fs = Filesystem::open_device(dev.clone() as Arc<dyn BlockDevice>, opts).unwrap();
        let root = fs.root();
        let (old, new) = (vec![b'o'; 20_000], vec![b'n'; 30_000]);
        // "a": replaced by rename.
        let a = fs.create(root, b"a", 0o644, 0, 0).unwrap().ino;
        fs.inodes().write(a, 0, &old).unwrap();
        fs.fsync(a).unwrap();
        let t = fs.create(root, b"a.tmp", 0o644, 0, 0).unwrap().ino;
        fs.inodes().write(t, 0, &new).unwrap();
        fs.inodes().rename(root, b"a.tmp", root, b"a", RenameFlags::default()).unwrap();
        // "b": truncated to zero while open, rewritten, closed.
        let b = fs.create(root, b"b", 0o644, 0, 0).unwrap().ino;
        fs.inodes().write(b, 0, &old).unwrap();
        fs.fsync(b).unwrap();
        fs.open_inode(b).unwrap();
        fs.setattr(b, SetAttr { size: Some(0), ..Default::default() }).unwrap();
        fs.inodes().write(b, 0, &new).unwrap();
        fs.close_inode(b).unwrap();
        // The journal's timer commits the renames and truncates; the
        // background writeback (30 s) does not run.
        std::thread::sleep(Duration::from_millis(300));
        std::mem::forget(fs);
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("img");
        std::fs::write(&img, dev.crash_image(dev.events(), |_| true)).unwrap();
        let mut fs = Filesystem::open_rw(&img).unwrap();
        for name in ["/a", "/b"] {
            let got = fs.read_all(fs.resolve(name).unwrap()).unwrap();
            if auto {
                assert!(got == new, "{name}: {} bytes after the crash, not the new contents", got.len());
            } else {
                assert!(got.is_empty(), "{name}: without auto_da_alloc expected empty, got {} bytes", got.len());
            }
        }
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
    }
}

/// Issue 25: the deletions of `rm -rf` through the mount, cut at every
/// write. Each file is removed one of three ways: unlinked while the
/// kernel holds a reference (it goes on the orphan list; the FORGET that
/// follows deletes it), unlinked while open (the last close deletes it),
/// unlinked with nothing holding it (deleted by the unlink). At every
/// crash point, with a random subset of the unflushed writes kept, uext4's
/// recovery and e2fsck's must leave an `e2fsck -fn` clean image (no
/// orphan left behind, no block or inode leaked or freed twice) on which
/// each name either still names its whole file or is gone.
#[test]
fn crash_points_unlink_forget_and_last_close() {
    let Some((dev, fs)) = recorded_fs(&["-b", "4096"]) else { return };
    let root = fs.root();
    let d = fs.mkdir(root, b"d", 0o755, 0, 0).unwrap().ino;
    let n = 18usize;
    let data = |k: usize| vec![k as u8 + 1; 1000 + 3000 * (k % 4)];
    let mut inos = Vec::new();
    for k in 0..n {
        let ino = fs.create(d, format!("f{k}").as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.inodes().write(ino, 0, &data(k)).unwrap();
        inos.push(ino);
    }
    fs.sync().unwrap();
    let start = dev.events();
    for (k, &ino) in inos.iter().enumerate() {
        let name = format!("f{k}");
        match k % 3 {
            0 => {
                fs.kernel_ref(ino);
                fs.unlink(d, name.as_bytes()).unwrap();
                fs.kernel_forget(ino, 1).unwrap();
            }
            1 => {
                fs.open_inode(ino).unwrap();
                fs.unlink(d, name.as_bytes()).unwrap();
                fs.close_inode(ino).unwrap();
            }
            _ => fs.unlink(d, name.as_bytes()).unwrap(),
        }
        if k % 4 == 3 {
            fs.commit().unwrap();
        }
    }
    std::mem::forget(fs);
    let total = dev.events();
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x25_0005);
    for point in start..=total {
        let mask = rng.next();
        let keep_all = point % 2 == 0;
        let img_bytes = dev.crash_image(point, |i| keep_all || (mask >> (i % 64)) & 1 == 1);
        let what = format!("crash at {point}/{total}");
        let img = dir.path().join("u");
        std::fs::write(&img, &img_bytes).unwrap();
        let mut fs = Filesystem::open_rw(&img).unwrap_or_else(|e| panic!("{what}: open: {e}"));
        for k in 0..n {
            match fs.resolve(format!("/d/f{k}")) {
                Ok(ino) => assert_eq!(fs.read_all(ino).unwrap(), data(k), "{what}: f{k}"),
                Err(uext4::Error::NotFound(_)) => {}
                Err(e) => panic!("{what}: f{k}: {e}"),
            }
        }
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        // e2fsck recovers it too (every fourth point, for time).
        if point % 4 == 0 {
            std::fs::write(&img, &img_bytes).unwrap();
            let out = Command::new("e2fsck").arg("-fy").arg(&img).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.code().unwrap_or(8) <= 1 && !text.contains("? yes"),
                "{what}: e2fsck -fy had to repair:\n{text}"
            );
            fsck_clean(&img);
        }
        std::fs::remove_file(&img).unwrap();
    }
}
