//! The direct-I/O paths: which path each kind of write takes (proved by
//! the counters), each seed's switch, and a many-thread model test on
//! overlapping ranges. Every image ends `e2fsck -fn` clean and, as root,
//! is read back by the kernel.

mod rw_support;

use rw_support::pattern;

use rw_support::{fsck_clean, mkfs};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use uext4::inode_api::{FallocMode, SetAttr};
use uext4::Filesystem;
use uext4::MountOptions;
use uext4::{inode_api::stats::IoStatsSnapshot, DataPathConfig, LockPolicy};

fn open(img: &Path, data: DataPathConfig) -> Filesystem {
    Filesystem::open_with(img, MountOptions { write: true, data, ..Default::default() }).unwrap()
}

/// Handles beyond the lazy time updates: the mapping/allocation handles.
fn io_handles(d: &IoStatsSnapshot) -> u64 {
    d.handles - d.time_updates
}

/// Reads the files back through a kernel loop mount (root only).
#[test]
fn each_write_kind_takes_its_path() {
    for args in [&["-b", "4096"][..], &["-b", "1024", "-O", "^metadata_csum"]] {
        let Some((_d, img)) = mkfs(64, args) else { return };
        let mut fs = open(&img, DataPathConfig::default());
        let bs = fs.superblock().block_size() as u64;
        let root = fs.root();
        let f = fs.create(root, b"written", 0o644, 0, 0).unwrap().ino;
        let mut model = pattern(1, 1 << 20);
        fs.inodes().write(f, 0, &model).unwrap();
        let u = fs.create(root, b"unwritten", 0o644, 0, 0).unwrap().ino;
        fs.fallocate(u, FallocMode::Allocate, 0, 1 << 20).unwrap();
        let mut umodel = vec![0u8; 1 << 20];
        fs.commit().unwrap();

        // Seed 000: aligned overwrites, shared lock, no handle.
        let s0 = fs.io_stats();
        for k in 0..16u64 {
            let data = pattern(100 + k, 4096);
            let off = (k * 37 % 200) * 4096;
            assert_eq!(fs.write_direct(f, off, &data).unwrap(), 4096);
            model[off as usize..off as usize + 4096].copy_from_slice(&data);
        }
        let d = fs.io_stats().since(&s0);
        assert_eq!(d.dio_overwrite_no_handle, 16, "{d:?}");
        assert_eq!((d.dio_write_shared, d.dio_write_exclusive, io_handles(&d)), (16, 0, 0), "{d:?}");
        assert_eq!(d.dio_unaligned_shared, 0);

        // Seed 003: sub-block overwrites of written blocks, still shared.
        let s0 = fs.io_stats();
        for k in 0..8u64 {
            let data = pattern(200 + k, 600);
            let off = k * 5000 + 100;
            fs.write_direct(f, off, &data).unwrap();
            model[off as usize..off as usize + 600].copy_from_slice(&data);
        }
        let d = fs.io_stats().since(&s0);
        assert_eq!((d.dio_unaligned_shared, d.dio_overwrite_no_handle, io_handles(&d)), (8, 8, 0), "{d:?}");

        // Seed 002: aligned writes into unwritten extents: no handle at
        // submission, one conversion (one handle) at completion each.
        let s0 = fs.io_stats();
        for k in 0..6u64 {
            let data = pattern(300 + k, 2 * bs as usize);
            let off = (k * 7 % 40) * 2 * bs;
            fs.write_direct(u, off, &data).unwrap();
            umodel[off as usize..off as usize + data.len()].copy_from_slice(&data);
        }
        let d = fs.io_stats().since(&s0);
        assert_eq!((d.dio_unwritten_no_handle, d.dio_conversions, d.dio_unwritten_with_handle), (6, 6, 0), "{d:?}");
        assert_eq!((io_handles(&d), d.dio_write_exclusive), (6, 0), "{d:?}");
        assert_eq!(fs.read_all(u).unwrap(), umodel);

        // Unaligned into unwritten, growth and holes: exclusive.
        let s0 = fs.io_stats();
        let data = pattern(400, 100);
        fs.write_direct(u, 100 * bs + 10, &data).unwrap();
        umodel[(100 * bs + 10) as usize..(100 * bs + 110) as usize].copy_from_slice(&data);
        let tail = pattern(401, 5000);
        fs.write_direct(f, (1 << 20) - 1000, &tail).unwrap();
        model.truncate((1 << 20) - 1000);
        model.extend_from_slice(&tail);
        let h = fs.create(root, b"holes", 0o644, 0, 0).unwrap().ino;
        fs.setattr(h, SetAttr { size: Some(1 << 20), ..Default::default() }).unwrap();
        let hd = pattern(402, 8192);
        fs.write_direct(h, 65536, &hd).unwrap();
        let mut hmodel = vec![0u8; 1 << 20];
        hmodel[65536..65536 + 8192].copy_from_slice(&hd);
        let d = fs.io_stats().since(&s0);
        assert_eq!((d.dio_write_exclusive, d.dio_write_shared), (3, 0), "{d:?}");

        // Direct reads see the same bytes.
        let mut buf = vec![0u8; model.len() + 10];
        assert_eq!(fs.read_direct(f, 0, &mut buf).unwrap(), model.len());
        assert!(buf[..model.len()] == model[..]);
        assert_eq!(fs.read_all(u).unwrap(), umodel);
        assert_eq!(fs.read_all(h).unwrap(), hmodel);
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        rw_support::kernel_read_back(&img, &[("written", model), ("unwritten", umodel), ("holes", hmodel)]);
    }
}

#[test]
fn before_switches_take_the_old_paths() {
    let Some((_d, img)) = mkfs(32, &["-b", "4096"]) else { return };
    let n = AtomicU64::new(0);
    let run = |cfg: DataPathConfig| -> IoStatsSnapshot {
        let mut fs = open(&img, cfg);
        let root = fs.root();
        let name = format!("f{}", n.fetch_add(1, Ordering::Relaxed));
        let f = fs.create(root, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.inodes().write(f, 0, &pattern(5, 256 << 10)).unwrap();
        fs.fsync(f).unwrap(); // delayed allocation: the blocks exist after writeback
        let u = fs.create(root, format!("u{name}").as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.fallocate(u, FallocMode::Allocate, 0, 256 << 10).unwrap();
        let s0 = fs.io_stats();
        for k in 0..4u64 {
            fs.write_direct(f, k * 8192, &pattern(k, 4096)).unwrap(); // overwrite
            fs.write_direct(f, k * 8192 + 512, &pattern(k, 1024)).unwrap(); // unaligned overwrite
            fs.write_direct(u, k * 8192, &pattern(k, 4096)).unwrap(); // unwritten
        }
        let d = fs.io_stats().since(&s0);
        fs.unmount().unwrap();
        d
    };
    let seeds = run(DataPathConfig::default());
    assert_eq!((seeds.dio_write_shared, seeds.dio_write_exclusive), (12, 0), "{seeds:?}");
    let excl = run(DataPathConfig { lock_policy: LockPolicy::Exclusive, ..Default::default() });
    assert_eq!((excl.dio_write_shared, excl.dio_write_exclusive), (0, 12), "{excl:?}");
    assert!(io_handles(&excl) >= 12, "every exclusive-policy write starts a handle: {excl:?}");
    let no002 = run(DataPathConfig { dio_unwritten_no_handle: false, ..Default::default() });
    assert_eq!((no002.dio_unwritten_with_handle, no002.dio_unwritten_no_handle), (4, 0), "{no002:?}");
    assert_eq!(io_handles(&no002), 8, "a handle at submission and one at completion: {no002:?}");
    let no003 = run(DataPathConfig { dio_unaligned_concurrent: false, ..Default::default() });
    assert_eq!((no003.dio_unaligned_shared, no003.dio_write_exclusive), (0, 4), "{no003:?}");
    fsck_clean(&img);
}

/// One write in the global log: who, which range, and when it started
/// and ended on the test's logical clock.
#[derive(Clone, Copy, Debug)]
struct Event {
    start: u64,
    end: u64,
    off: u64,
    len: u64,
    /// `None` for zeroing events (punch / zero range).
    stamp: Option<u32>,
}

/// (file, unused, offset, length) of a stamped write.
type WriteInfo = (u32, u64, u64, u64);

/// A record is 8 bytes at an 8-aligned file offset: (stamp, offset / 8).
fn stamp_data(stamp: u32, off: u64, len: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(len as usize);
    let mut o = off;
    while o < off + len {
        v.extend_from_slice(&stamp.to_le_bytes());
        v.extend_from_slice(&((o / 8) as u32).to_le_bytes());
        o += 8;
    }
    v
}

fn record_at(buf: &[u8], i: usize) -> (u32, u32) {
    let r = &buf[i * 8..i * 8 + 8];
    (u32::from_le_bytes([r[0], r[1], r[2], r[3]]), u32::from_le_bytes([r[4], r[5], r[6], r[7]]))
}

/// Threads write stamped records (direct aligned / unaligned, buffered),
/// zero ranges and truncate-and-regrow, and read, on overlapping ranges of a few files of
/// fixed size, half of them fallocated (unwritten) at first. Readers check
/// that every record they see is zero or was written at that offset by a
/// write that had started; at the end every record must come from a
/// write (or zeroing) that no other covering event strictly followed.
fn model_run(img: &Path, threads: usize, ops: usize, seed: u64, cfg: DataPathConfig) -> Vec<(String, Vec<u8>)> {
    const FILE: u64 = 256 << 10;
    let fs = Arc::new(open(img, cfg));
    let root = fs.root();
    let files: Vec<u32> = (0..3)
        .map(|k| {
            let name = format!("m{seed}-{threads}-{k}");
            let ino = fs.create(root, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
            if k % 2 == 0 {
                fs.inodes().write(ino, 0, &vec![0u8; FILE as usize]).unwrap();
            } else {
                fs.fallocate(ino, FallocMode::Allocate, 0, FILE).unwrap();
            }
            ino
        })
        .collect();
    let clock = Arc::new(AtomicU64::new(1));
    let log: Arc<Mutex<HashMap<u32, Vec<Event>>>> = Arc::new(Mutex::new(HashMap::new()));
    let stamps: Arc<Mutex<HashMap<u32, WriteInfo>>> = Arc::new(Mutex::new(HashMap::new()));
    let mut hs = Vec::new();
    for t in 0..threads {
        let (fs, files, clock, log, stamps) = (fs.clone(), files.clone(), clock.clone(), log.clone(), stamps.clone());
        hs.push(std::thread::spawn(move || {
            let mut x = seed.wrapping_mul(1000 + t as u64) | 1;
            let mut rnd = move |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            for seq in 0..ops as u32 {
                let f = files[rnd(files.len() as u64) as usize];
                let stamp = ((t as u32) << 20) | seq | 0x8000_0000;
                let kind = rnd(10);
                // Offsets and lengths in 8-byte records; some block-aligned.
                let (off, len) = if kind < 5 {
                    let blocks = 1 + rnd(4);
                    (rnd(FILE / 4096 - blocks) * 4096, blocks * 4096)
                } else {
                    let len = 8 * (1 + rnd(300));
                    (8 * rnd((FILE - len) / 8), len)
                };
                match kind {
                    0..=6 => {
                        let data = stamp_data(stamp, off, len);
                        stamps.lock().unwrap().insert(stamp, (f, 0, off, len));
                        let start = clock.fetch_add(1, Ordering::SeqCst);
                        if kind < 6 {
                            assert_eq!(fs.write_direct(f, off, &data).unwrap(), data.len());
                        } else {
                            assert_eq!(fs.inodes().write(f, off, &data).unwrap(), data.len());
                        }
                        let end = clock.fetch_add(1, Ordering::SeqCst);
                        let e = Event { start, end, off, len, stamp: Some(stamp) };
                        log.lock().unwrap().entry(f).or_default().push(e);
                    }
                    7 if rnd(3) == 0 => {
                        // Truncate down and straight back up: zeros from
                        // `off` on, racing with everything else.
                        let start = clock.fetch_add(1, Ordering::SeqCst);
                        fs.setattr(f, SetAttr { size: Some(off), ..Default::default() }).unwrap();
                        fs.setattr(f, SetAttr { size: Some(FILE), ..Default::default() }).unwrap();
                        let end = clock.fetch_add(1, Ordering::SeqCst);
                        let e = Event { start, end, off, len: FILE - off, stamp: None };
                        log.lock().unwrap().entry(f).or_default().push(e);
                    }
                    7 => {
                        let start = clock.fetch_add(1, Ordering::SeqCst);
                        fs.fallocate(f, FallocMode::ZeroRange, off, len).unwrap();
                        let end = clock.fetch_add(1, Ordering::SeqCst);
                        log.lock().unwrap().entry(f).or_default().push(Event { start, end, off, len, stamp: None });
                    }
                    _ => {
                        let mut buf = vec![0u8; len as usize];
                        let read_end_bound = clock.load(Ordering::SeqCst);
                        let n = if kind == 8 {
                            fs.read_direct(f, off, &mut buf)
                        } else {
                            fs.inodes().read(f, off, &mut buf)
                        };
                        // Short only while a truncate has the file shrunk.
                        let n = n.unwrap();
                        assert!(n <= len as usize && n % 8 == 0, "read of {len} at {off} returned {n}");
                        let st = stamps.lock().unwrap();
                        for i in 0..n / 8 {
                            let (s, o) = record_at(&buf, i);
                            if s == 0 && o == 0 {
                                continue;
                            }
                            let at = off / 8 + i as u64;
                            assert_eq!(u64::from(o), at, "record at {} names offset {}", at * 8, o as u64 * 8);
                            let w = st.get(&s).unwrap_or_else(|| panic!("record from unknown write {s:#x}"));
                            assert!(w.0 == f && w.2 <= at * 8 && at * 8 < w.2 + w.3, "record from a write elsewhere");
                        }
                        let _ = read_end_bound;
                    }
                }
            }
        }));
    }
    for h in hs {
        h.join().unwrap();
    }
    // Final content against the log.
    let log = log.lock().unwrap();
    let mut finals = Vec::new();
    for (k, &f) in files.iter().enumerate() {
        let got = fs.read_all(f).unwrap();
        finals.push((format!("m{seed}-{threads}-{k}"), got.clone()));
        assert_eq!(got.len() as u64, FILE);
        let events = log.get(&f).cloned().unwrap_or_default();
        for i in 0..(FILE / 8) as usize {
            let at = i as u64 * 8;
            let (s, _) = record_at(&got, i);
            let covering: Vec<&Event> = events.iter().filter(|e| e.off <= at && at < e.off + e.len).collect();
            // The event that produced the record: a write with this stamp,
            // or (for zero) a zeroing event or the initial state.
            let producers: Vec<&&Event> = covering.iter().filter(|e| e.stamp == (s != 0).then_some(s)).collect();
            if s != 0 {
                assert!(!producers.is_empty(), "file {f} offset {at}: record from a write not covering it");
            }
            // Some producer must not be strictly followed by another event.
            let ok = if producers.is_empty() {
                // Initial zeros: no covering event at all may have written.
                covering.iter().all(|e| e.stamp.is_none())
            } else {
                producers.iter().any(|p| covering.iter().all(|e| e.start < p.end))
            };
            assert!(ok, "file {f} offset {at}: record {s:#x} was overwritten later (lost write): {covering:?}");
        }
    }
    drop(log);
    let mut fs = Arc::try_unwrap(fs).unwrap_or_else(|_| panic!("filesystem still shared"));
    fs.unmount().unwrap();
    finals
}

#[test]
fn many_threads_overlapping_ranges_match_the_model() {
    // CI runs one round (8 seeds); UEXT4_MODEL_ROUNDS=N runs N rounds with
    // other seeds, on a fresh image each.
    let rounds: u64 = std::env::var("UEXT4_MODEL_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    for round in 0..rounds {
        let Some((_d, img)) = mkfs(64, &["-b", "4096"]) else { return };
        let mut seed = 1 + round * 100;
        let mut finals = Vec::new();
        for threads in [2, 4, 8, 32] {
            for cfg in
                [DataPathConfig::default(), DataPathConfig { lock_policy: LockPolicy::Exclusive, ..Default::default() }]
            {
                finals.extend(model_run(&img, threads, 1200 / threads, seed, cfg));
                seed += 1;
            }
        }
        fsck_clean(&img);
        let files: Vec<(&str, Vec<u8>)> = finals.iter().map(|(n, d)| (n.as_str(), d.clone())).collect();
        rw_support::kernel_read_back(&img, &files);
    }
}

#[test]
fn many_threads_overlapping_ranges_1k_blocks() {
    let Some((_d, img)) = mkfs(32, &["-b", "1024"]) else { return };
    let mut finals = Vec::new();
    for seed in 11..14 {
        finals.extend(model_run(&img, 8, 150, seed, DataPathConfig::default()));
    }
    fsck_clean(&img);
    let files: Vec<(&str, Vec<u8>)> = finals.iter().map(|(n, d)| (n.as_str(), d.clone())).collect();
    rw_support::kernel_read_back(&img, &files);
}

/// Deepest level of the extent tree of `ino` by `debugfs -R "ex"` (its
/// "Level" column, "level/ depth"), with the leaf entries' lengths.
fn debugfs_depth_and_leaves(img: &Path, ino: u32) -> (u32, Vec<(u64, bool)>) {
    let out = rw_support::debugfs(img, &format!("ex <{ino}>"));
    let mut depth = 0;
    let mut leaves = Vec::new();
    for line in out.lines().skip(1) {
        // " 3/ 3  12/ 84  5120 -  5120 27105 - 27105      1 Uninit"
        let norm = line.replace('/', " / ").replace('-', " - ");
        let t: Vec<&str> = norm.split_whitespace().collect();
        let num = |k: usize| t.get(k).and_then(|s| s.parse::<u64>().ok());
        let (Some(level), Some(d)) = (num(0), num(2)) else { continue };
        depth = depth.max(d as u32);
        if level == d {
            leaves.push((num(12).unwrap_or(0), t.get(13).is_some_and(|f| f.contains("Uninit"))));
        }
    }
    (depth, leaves)
}

/// Extent tree depth from the inode's extent header.
fn tree_depth(fs: &Filesystem, ino: u32) -> u16 {
    let i = fs.inode(ino).unwrap();
    u16::from_le_bytes([i.block[6], i.block[7]])
}

/// Depth 3 under concurrency (issue 24): on 1 KiB blocks (4 entries in the
/// inode's root, 84 per tree block) threads first grow one file to depth
/// 3 with direct and buffered one-block writes on disjoint blocks (every
/// other block, each its own extent: splits all over the tree at once),
/// then run direct writes (allocating into holes, overwriting, unaligned),
/// buffered writes, hole punches (one block to whole leaves) and zero
/// ranges, on ranges private to each thread and on ranges all of them
/// share, with direct and buffered reads checking every record they see.
/// The final contents must match the event log (as `model_run`), the
/// tree must be legal to `debugfs`, `e2fsck -fn` clean, and the kernel
/// must read the same bytes.
#[test]
fn many_threads_on_a_depth_3_tree_1k_blocks() {
    const THREADS: u64 = 4;
    // 14,000 one-block extents reach depth 3 (see extent_tree.rs).
    const EXTENTS: u64 = 14_000;
    const BS: u64 = 1024;
    const FILE: u64 = 2 * EXTENTS * BS;
    let Some((_d, img)) = mkfs(64, &["-b", "1024"]) else { return };
    let fs = Arc::new(open(&img, DataPathConfig::default()));
    let root = fs.root();
    let f = fs.create(root, b"deep", 0o644, 0, 0).unwrap().ino;
    fs.setattr(f, SetAttr { size: Some(FILE), ..Default::default() }).unwrap();
    let clock = Arc::new(AtomicU64::new(1));
    let log: Arc<Mutex<Vec<Event>>> = Arc::new(Mutex::new(Vec::new()));
    let stamps: Arc<Mutex<HashMap<u32, WriteInfo>>> = Arc::new(Mutex::new(HashMap::new()));
    // A write logged as an event (between two clock ticks).
    let write = |fs: &Filesystem, stamp: u32, off: u64, len: u64, direct: bool| {
        let data = stamp_data(stamp, off, len);
        stamps.lock().unwrap().insert(stamp, (f, 0, off, len));
        let start = clock.fetch_add(1, Ordering::SeqCst);
        let n = if direct { fs.write_direct(f, off, &data) } else { fs.inodes().write(f, off, &data) };
        assert_eq!(n.unwrap_or_else(|e| panic!("write {len} at {off}: {e}")), data.len());
        let end = clock.fetch_add(1, Ordering::SeqCst);
        log.lock().unwrap().push(Event { start, end, off, len, stamp: Some(stamp) });
    };

    // Phase 1: grow the tree, each thread its own even blocks in random
    // order; one write in eight buffered.
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (fs, write) = (&fs, &write);
            s.spawn(move || {
                let mut x = 0x5EED_0024 ^ (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let mut rnd = move |n: u64| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x % n
                };
                let mut mine: Vec<u64> = (0..EXTENTS).filter(|k| k % THREADS == t).map(|k| 2 * k).collect();
                for i in (1..mine.len()).rev() {
                    mine.swap(i, rnd(i as u64 + 1) as usize);
                }
                for (seq, b) in mine.into_iter().enumerate() {
                    let stamp = 0x4000_0000 | ((t as u32) << 20) | seq as u32;
                    write(fs, stamp, b * BS, BS, seq % 8 != 0);
                }
            });
        }
    });
    fs.fsync(f).unwrap();
    let depth = tree_depth(&fs, f);
    assert!(depth >= 3, "{EXTENTS} scattered one-block extents on 1k blocks need depth 3 (got {depth})");

    // Phase 2: mixed operations on private and shared ranges.
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (fs, write, clock, log, stamps) = (&fs, &write, &clock, &log, &stamps);
            s.spawn(move || {
                let mut x = 0xD1CE_0024 ^ (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let mut rnd = move |n: u64| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x % n
                };
                let slice = FILE / THREADS;
                for seq in 0..250u32 {
                    let stamp = 0x8000_0000 | ((t as u32) << 20) | seq;
                    // Half the operations in this thread's slice, half anywhere.
                    let (base, span) = if rnd(2) == 0 { (t * slice, slice) } else { (0, FILE) };
                    let blocks = 1 + rnd(4);
                    let off = base + rnd(span / BS - blocks) * BS;
                    match rnd(12) {
                        0..=3 => write(fs, stamp, off, blocks * BS, true),
                        4 => {
                            // Unaligned (8-byte records): under the shared
                            // lock when the blocks are written.
                            let len = 8 * (1 + rnd(200));
                            write(fs, stamp, base + 8 * rnd((span - len) / 8), len, true);
                        }
                        5 | 6 => write(fs, stamp, off, blocks * BS, false),
                        7 | 8 => {
                            // Punch: a few blocks, or up to whole leaves.
                            let len = if rnd(4) == 0 { (84 + rnd(400)) * BS } else { blocks * BS };
                            let len = len.min(FILE - off);
                            let mode = if rnd(3) == 0 { FallocMode::ZeroRange } else { FallocMode::PunchHole };
                            let start = clock.fetch_add(1, Ordering::SeqCst);
                            fs.fallocate(f, mode, off, len).unwrap_or_else(|e| panic!("{mode:?} {len} at {off}: {e}"));
                            let end = clock.fetch_add(1, Ordering::SeqCst);
                            log.lock().unwrap().push(Event { start, end, off, len, stamp: None });
                        }
                        k => {
                            let len = blocks * BS + 8 * rnd(64);
                            let len = len.min(FILE - off);
                            let mut buf = vec![0u8; len as usize];
                            let n = if k < 11 {
                                fs.read_direct(f, off, &mut buf)
                            } else {
                                fs.inodes().read(f, off, &mut buf)
                            };
                            assert_eq!(n.unwrap(), len as usize, "read of {len} at {off}");
                            let st = stamps.lock().unwrap();
                            for i in 0..len as usize / 8 {
                                let (s, o) = record_at(&buf, i);
                                if s == 0 && o == 0 {
                                    continue;
                                }
                                let at = off / 8 + i as u64;
                                assert_eq!(u64::from(o), at, "record at {} names offset {}", at * 8, o as u64 * 8);
                                let w = st.get(&s).unwrap_or_else(|| panic!("record from unknown write {s:#x}"));
                                assert!(w.2 <= at * 8 && at * 8 < w.2 + w.3, "record from a write elsewhere");
                            }
                        }
                    }
                }
            });
        }
    });
    fs.fsync(f).unwrap();

    // Every record against the events covering it (indexed by block).
    let got = fs.read_all(f).unwrap();
    assert_eq!(got.len() as u64, FILE);
    let log = log.lock().unwrap();
    let mut by_block: Vec<Vec<usize>> = vec![Vec::new(); (FILE / BS) as usize];
    for (k, e) in log.iter().enumerate() {
        for b in e.off / BS..(e.off + e.len).div_ceil(BS) {
            by_block[b as usize].push(k);
        }
    }
    for i in 0..(FILE / 8) as usize {
        let at = i as u64 * 8;
        let (s, _) = record_at(&got, i);
        let covering: Vec<&Event> = by_block[(at / BS) as usize]
            .iter()
            .map(|&k| &log[k])
            .filter(|e| e.off <= at && at < e.off + e.len)
            .collect();
        let producers: Vec<&&Event> = covering.iter().filter(|e| e.stamp == (s != 0).then_some(s)).collect();
        if s != 0 {
            assert!(!producers.is_empty(), "offset {at}: record {s:#x} from a write not covering it");
        }
        let ok = if producers.is_empty() {
            covering.iter().all(|e| e.stamp.is_none())
        } else {
            producers.iter().any(|p| covering.iter().all(|e| e.start < p.end))
        };
        assert!(ok, "offset {at}: record {s:#x} was overwritten later (lost write): {covering:?}");
    }
    drop(log);
    let depth = tree_depth(&fs, f);
    let blocks = fs.stat(f).unwrap().blocks;
    eprintln!("depth-3 model: depth {depth} at the end, {} extents", fs.extents(f).unwrap().len());
    let mut fs = Arc::try_unwrap(fs).unwrap_or_else(|_| panic!("filesystem still shared"));
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    // The kernel's view: the same depth, legal extents, the same bytes.
    let (dfs_depth, leaves) = debugfs_depth_and_leaves(&img, f);
    assert_eq!(dfs_depth, u32::from(depth), "depth by debugfs");
    assert!(depth >= 2, "the tree stays deep (depth {depth})");
    assert!(!leaves.is_empty());
    for (len, uninit) in &leaves {
        assert!(*len >= 1 && *len <= if *uninit { 32767 } else { 32768 }, "illegal extent length {len}");
    }
    let stat = rw_support::debugfs(&img, &format!("stat <{f}>"));
    assert!(stat.contains(&format!("Blockcount: {blocks}")), "i_blocks {blocks} by debugfs:\n{stat}");
    rw_support::kernel_read_back(&img, &[("deep", got)]);
}
