//! Crash tests: a workload runs on a device that records every write and
//! flush; for many crash points (each keeping a random subset of the
//! writes issued since the last flush), the image is recovered by uext4
//! and by `e2fsck -fy`, must then be `e2fsck -fn` clean, and every file
//! fsync'd before the crash must be intact.

mod rw_support;

use rw_support::{fsck_clean, have};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use uext4::device::{BlockDevice, RecordingDevice};
use uext4::fs::ops::RenameFlags;
use uext4::fs::OpenOptions;
use uext4::Filesystem;

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
}

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
                fs.write(ino, 0, &data).unwrap();
                fs.fsync(ino).unwrap();
                synced.push(Synced { path: format!("/d{di}/{name}"), data, durable_at: dev.events() });
            }
            4..=6 => {
                let name = format!("n{i}");
                let ino = fs.create(d, name.as_bytes(), 0o600, 0, 0).unwrap().ino;
                let len = rng.below(20_000) as usize;
                fs.write(ino, rng.below(5000), &vec![i as u8; len]).unwrap();
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
                fs.rename(pd, name.as_bytes(), d, new.as_bytes(), RenameFlags::default()).unwrap();
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
    if !have("e2fsck") {
        eprintln!("SKIP: e2fsck not installed");
        return;
    }
    let Some(base) = base_image(args) else { return };
    let dev = Arc::new(RecordingDevice::new(base));
    let opts = OpenOptions { write: true, commit_interval: Duration::from_secs(3600), ..Default::default() };
    let fs = Filesystem::open_device(dev.clone() as Arc<dyn BlockDevice>, opts).unwrap();
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
