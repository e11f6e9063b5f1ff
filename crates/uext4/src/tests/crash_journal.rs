//! Crash tests of the journal's bookkeeping on a small log (1 KiB
//! blocks, 1 MiB journal): metadata freed by a transaction whose commit
//! must first checkpoint (issue 12, defect 1), and work too large for one
//! transaction split into bounded handles (defect 3). Every crash point
//! of the interesting window is tried: the image a crash there could
//! leave is recovered by uext4's own open, walked, unmounted and must be
//! `e2fsck -fn` clean.

use super::rw_support;

use rw_support::{fsck_clean, have, inodes_and_names, open_recording};
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;
use uext4::device::{BlockDevice, Event, RecordingDevice};
use uext4::fs::ops::SetAttr;
use uext4::fs::MountOptions;
use uext4::fs::XattrSetMode;
use uext4::Filesystem;

/// A fresh image with 1 KiB blocks and a 1 MiB journal, the same on
/// every run: a fixed UUID and directory hash seed (mkfs.ext4 draws both
/// at random, and the hash seed decides which creates split a directory
/// leaf, so how much of the log a run of creates fills).
fn small_journal_image(size_mb: u64) -> Option<Vec<u8>> {
    if !have("e2fsck") {
        eprintln!("SKIP: e2fsck not installed");
        return None;
    }
    let fixed = ["-U", "5eed0c0d-1a2b-4c3d-8e4f-00000000c0de", "-E", "hash_seed=5eed0c0d-1a2b-4c3d-8e4f-00000000da5e"];
    let args: Vec<&str> = ["-b", "1024", "-J", "size=1"].into_iter().chain(fixed).collect();
    let (_d, img) = rw_support::mkfs(size_mb, &args)?;
    Some(std::fs::read(&img).unwrap())
}

fn flushes(dev: &RecordingDevice, from: usize, to: usize) -> usize {
    dev.log()[from..to].iter().filter(|e| matches!(e, Event::Flush)).count()
}

/// Reads everything reachable from the root: names, attributes, file
/// contents, xattrs. Any error (a zeroed directory block, a bad extent
/// node) fails the test.
fn walk(fs: &Filesystem, what: &str) {
    let mut todo = vec![(fs.root(), "/".to_string())];
    while let Some((dir, path)) = todo.pop() {
        let entries = fs.read_dir_all(dir).unwrap_or_else(|e| panic!("{what}: readdir {path}: {e}"));
        for e in entries {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let p = format!("{path}{}", String::from_utf8_lossy(&e.name));
            let st = fs.stat(e.ino).unwrap_or_else(|err| panic!("{what}: stat {p}: {err}"));
            fs.list_xattrs(e.ino).unwrap_or_else(|err| panic!("{what}: listxattr {p}: {err}"));
            if st.mode & 0o170000 == 0o040000 {
                todo.push((e.ino, format!("{p}/")));
            } else if st.mode & 0o170000 == 0o100000 {
                // The head and the tail: the mapping is walked either way.
                let mut buf = vec![0u8; 65536];
                for off in [0, st.size.saturating_sub(65536)] {
                    fs.inodes().read(e.ino, off, &mut buf).unwrap_or_else(|err| panic!("{what}: read {p}: {err}"));
                }
            }
        }
    }
}

/// Recovers the image a crash at `point` (keeping the writes after the
/// last flush that `keep` selects) leaves, with uext4's own open; walks
/// it, unmounts, runs `e2fsck -fn`. Images already checked are skipped.
fn check_point(
    dev: &RecordingDevice,
    dir: &std::path::Path,
    seen: &mut HashSet<u64>,
    point: usize,
    keep: impl FnMut(usize) -> bool,
    what: &str,
    check: &dyn Fn(&Filesystem, &str),
) {
    // The image is determined by the last flush before the point and the
    // writes after it that are kept: equal keys, equal images.
    let log = dev.log();
    let point = point.min(log.len());
    let last_flush = log[..point].iter().rposition(|e| matches!(e, Event::Flush)).map_or(0, |i| i + 1);
    let writes = log[last_flush..point].iter().filter(|e| matches!(e, Event::Write { .. })).count();
    drop(log);
    let mut keep = keep;
    let kept: Vec<bool> = (0..writes).map(&mut keep).collect();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (last_flush, &kept).hash(&mut h);
    if !seen.insert(h.finish()) {
        return;
    }
    let bytes = dev.crash_image(point, |i| kept[i]);
    let img = dir.join("crash.img");
    std::fs::write(&img, &bytes).unwrap();
    let mut fs = Filesystem::open_rw(&img).unwrap_or_else(|e| panic!("{what}: open: {e}"));
    walk(&fs, what);
    check(&fs, what);
    fs.unmount().unwrap_or_else(|e| panic!("{what}: unmount: {e}"));
    drop(fs);
    fsck_clean(&img);
}

/// Every crash point in `from..=to`, each with all, none and an
/// alternating half of the unflushed writes kept.
fn every_point(dev: &RecordingDevice, from: usize, to: usize, what: &str, check: &dyn Fn(&Filesystem, &str)) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let mut seen = HashSet::new();
    for point in from..=to {
        let w = format!("{what}: crash at {point} ({from}..={to})");
        check_point(dev, dir.path(), &mut seen, point, |_| true, &w, check);
        check_point(dev, dir.path(), &mut seen, point, |_| false, &w, check);
        check_point(dev, dir.path(), &mut seen, point, |i| i % 2 == 0, &w, check);
    }
    seen.len()
}

/// A metadata-freeing operation, run after enough small transactions
/// that its own commit has to checkpoint first.
struct FreeCase {
    name: &'static str,
    /// Creates what will be freed (committed before the fillers).
    setup: fn(&Filesystem),
    /// Frees metadata blocks (committed in the checkpointing commit).
    free: fn(&Filesystem),
}

/// The file whose mode the fillers change: every filler commit logs the
/// same two blocks, this inode's and the superblock (which every commit
/// logs, with the free counts).
const FILLER: &[u8] = b"filler";

/// Builds the workload with `fillers` two-block transactions (a chmod
/// of [`FILLER`], each committed) between the setup and the freeing
/// operation; returns the device, the events of the freeing commit, and
/// whether that commit checkpointed (four flushes: home writes, journal
/// superblock, logged blocks, commit block), or, for `fillers == None`,
/// the index of the first filler commit that checkpointed.
fn build(base: &[u8], case: &FreeCase, fillers: Option<usize>) -> (Arc<RecordingDevice>, usize, usize, Option<usize>) {
    let (dev, fs) = open_recording(base);
    (case.setup)(&fs);
    let filler = fs.create(fs.root(), FILLER, 0o644, 0, 0).unwrap().ino;
    fs.commit().unwrap();
    let mut first_checkpoint = None;
    // A 1 MiB log holds about 250 of them.
    for k in 0..fillers.unwrap_or(2000) {
        let before = dev.events();
        let mode = if k % 2 == 0 { 0o600 } else { 0o644 };
        fs.setattr(filler, SetAttr { mode: Some(mode), ..Default::default() }).unwrap();
        fs.commit().unwrap();
        if fillers.is_none() && flushes(&dev, before, dev.events()) >= 4 {
            first_checkpoint = Some(k);
            break;
        }
    }
    let mark = dev.events();
    (case.free)(&fs);
    fs.commit().unwrap();
    let end = dev.events();
    std::mem::forget(fs);
    let checkpointed = flushes(&dev, mark, end) >= 4;
    (dev, mark, end, if fillers.is_none() { first_checkpoint } else { checkpointed.then_some(0) })
}

fn run_free_case(case: &FreeCase) {
    let Some(base) = small_journal_image(8) else { return };
    // Filler k's commit was the first to checkpoint: the log had less room
    // left than one more filler commit needs. The freeing commit logs more
    // (the freed block's bitmap and descriptor, a revoke record, ...), so
    // in filler k's place it checkpoints too.
    // Both builds put the log in the same place: the same image, the same
    // operations, and no commit but the test's (`open_recording`).
    // The fillers were creates in the root until stop 25: larger than the
    // extent shrink's commit, and larger by a block or more where a create
    // split an htree leaf, which the image's hash seed decides (mkfs.ext4
    // drew one at random). On 6 of 72 fresh images the shrink's commit
    // still fitted where the k-th create's had not, so no filler count made
    // it checkpoint ("could not make the freeing commit checkpoint";
    // hash_seed=9e30186d-7133-4fb2-b717-8b65608cf482 always did that), and
    // calibrating again on the same image changed nothing.
    let (_, _, _, first) = build(&base, case, None);
    let k = first.expect("no filler commit checkpointed: the log never filled");
    let (dev, mark, end, checkpointed) = build(&base, case, Some(k));
    assert!(
        checkpointed.is_some(),
        "{}: the freeing commit in place of filler {k} did not checkpoint (is it no larger than a filler's?)",
        case.name
    );
    let images = every_point(&dev, mark, end, case.name, &|_, _| {});
    eprintln!("{}: {k} fillers, {} crash points, {images} distinct images checked", case.name, end - mark + 1);
}

/// rmdir of a directory whose block was logged, then checkpointed by
/// the rmdir's own commit (the reproducer).
#[test]
fn freed_dir_block_survives_checkpointing_commit() {
    run_free_case(&FreeCase {
        name: "rmdir",
        setup: |fs| {
            fs.mkdir(fs.root(), b"d", 0o755, 0, 0).unwrap();
        },
        free: |fs| fs.rmdir(fs.root(), b"d").unwrap(),
    });
}

/// A file with an extent tree of depth 1 (its leaf block logged) cut
/// back to one extent: the leaf is freed as the root pulls it up.
#[test]
fn freed_extent_leaf_survives_checkpointing_commit() {
    run_free_case(&FreeCase {
        name: "extent shrink",
        setup: |fs| {
            let ino = fs.create(fs.root(), b"frag", 0o644, 0, 0).unwrap().ino;
            // Every other block: one extent each, more than the root holds.
            for b in 0..12u64 {
                fs.write_direct(ino, b * 2048, &[b as u8 + 1; 1024]).unwrap();
            }
        },
        free: |fs| {
            let ino = fs.resolve("/frag").unwrap();
            fs.setattr(ino, SetAttr { size: Some(1024), ..Default::default() }).unwrap();
        },
    });
}

/// An xattr block (logged) released when its last attribute goes.
#[test]
fn freed_xattr_block_survives_checkpointing_commit() {
    run_free_case(&FreeCase {
        name: "xattr release",
        setup: |fs| {
            let ino = fs.create(fs.root(), b"x", 0o644, 0, 0).unwrap().ino;
            fs.set_xattr(ino, b"user.big", &[7u8; 600], XattrSetMode::Any).unwrap();
        },
        free: |fs| {
            let ino = fs.resolve("/x").unwrap();
            fs.remove_xattr(ino, b"user.big").unwrap();
        },
    });
}

/// A handle that dirties more blocks than it reserved is a bug, caught
/// in debug builds; within its credits it is fine, and blocks already in
/// the transaction cost nothing.
#[test]
fn handle_over_its_credits_is_caught() {
    if !cfg!(debug_assertions) {
        eprintln!("SKIP: credits are checked in debug builds");
        return;
    }
    let Some((_d, img)) = rw_support::mkfs(8, &["-b", "1024", "-J", "size=1"]) else { return };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let table = fs.volume().groups[0].inode_table;
    {
        let tx = fs.begin(3).unwrap();
        for b in [table, table + 1, table + 2, table, table + 1] {
            tx.modify(b, |_| Ok(())).unwrap();
        }
        assert_eq!(tx.handle.credits_left(), 0);
        tx.settle();
    }
    let over = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let tx = fs.begin(2).unwrap();
        for b in [table + 3, table + 4, table + 5] {
            tx.modify(b, |_| Ok(())).unwrap();
        }
    }));
    let msg = over.expect_err("a handle of 2 credits dirtied 3 blocks unnoticed");
    let text = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.contains("over its credits"), "unexpected panic: {text}");
    // The half-done handle aborted the journal as it unwound: nothing of
    // it may commit, and the next open recovers to a clean image.
    assert!(fs.unmount().is_err(), "an aborted journal unmounted cleanly");
    drop(fs);
    Filesystem::open_rw(&img).unwrap().unmount().unwrap();
    fsck_clean(&img);
}

/// `points` crash points spread evenly over `from..=to` (every point
/// when there are no more), plus both ends.
fn spread(from: usize, to: usize, points: usize) -> Vec<usize> {
    let n = to - from;
    if n <= points {
        return (from..=to).collect();
    }
    (0..=points).map(|k| from + n * k / points).collect()
}

/// 5,000 files unlinked while open, then a crash: the orphan list is
/// longer than one transaction can free (it failed with "transaction of
/// 1270 log blocks does not fit in a journal of 1023 blocks"). The open
/// after the crash deletes them in bounded handles; crashes spread over
/// that cleanup leave images the next open finishes.
#[test]
fn thousands_of_orphans_are_cleaned_in_bounded_transactions() {
    let n: usize = std::env::var("UEXT4_ORPHANS").ok().and_then(|v| v.parse().ok()).unwrap_or(5000);
    if !have("e2fsck") {
        eprintln!("SKIP: e2fsck not installed");
        return;
    }
    let Some((_d, img0)) = rw_support::mkfs(24, &["-b", "1024", "-J", "size=1", "-N", "8192"]) else { return };
    let base = std::fs::read(&img0).unwrap();
    let (dev, fs) = open_recording(&base);
    let before = inodes_and_names(&fs);
    let root = fs.root();
    for k in 0..n {
        let name = format!("o{k}");
        let ino = fs.create(root, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        if k % 16 == 0 {
            // Some with blocks to free too.
            fs.write_direct(ino, 0, &[k as u8; 3072]).unwrap();
        }
        fs.open_inode(ino).unwrap();
        fs.unlink(root, name.as_bytes()).unwrap();
    }
    fs.commit().unwrap();
    std::mem::forget(fs);
    let crashed = dev.crash_image(dev.events(), |_| true);

    // The open after the crash, recorded.
    let dev2 = Arc::new(RecordingDevice::new(crashed));
    let opts = MountOptions { write: true, commit_interval: Duration::from_secs(3600), ..Default::default() };
    let mut fs = Filesystem::open_device(dev2.clone() as Arc<dyn BlockDevice>, opts)
        .unwrap_or_else(|e| panic!("open after the crash: {e}"));
    assert_eq!(inodes_and_names(&fs), before, "orphans left after the cleanup");
    let end = dev2.events();
    fs.unmount().unwrap();
    drop(fs);
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    std::fs::write(&img, dev2.crash_image(dev2.events(), |_| true)).unwrap();
    fsck_clean(&img);

    let points = spread(0, end, 24);
    let mut seen = HashSet::new();
    for &p in &points {
        for keep in [true, false] {
            let what = format!("orphan cleanup: crash at {p}/{end}");
            check_point(&dev2, dir.path(), &mut seen, p, |_| keep, &what, &|fs, what| {
                assert_eq!(inodes_and_names(fs), before, "{what}: orphans left");
            });
        }
    }
    eprintln!(
        "{n} orphans: cleanup of {end} events, {} crash points (evenly spread), {} images",
        points.len(),
        seen.len()
    );
}

/// A large file fragmented over many block groups (1 KiB blocks, 256
/// blocks per group: freeing it touches more bitmaps than one handle may)
/// is truncated or unlinked; every crash point across the multi-handle
/// operation recovers (uext4's open finishes it from the orphan list) to
/// a clean image where the file has its new size or is gone.
fn run_large_free(unlink: bool) {
    if !have("e2fsck") {
        eprintln!("SKIP: e2fsck not installed");
        return;
    }
    let Some((_d, img0)) = rw_support::mkfs(64, &["-b", "1024", "-g", "256", "-O", "^resize_inode", "-J", "size=1"])
    else {
        return;
    };
    let base = std::fs::read(&img0).unwrap();
    let (dev, fs) = open_recording(&base);
    let root = fs.root();
    let len: u64 = 52 << 20;
    let ino = rw_support::fragmented_file(&fs, b"big", len);
    fs.commit().unwrap();
    let mark = dev.events();
    if unlink {
        fs.unlink(root, b"big").unwrap();
    } else {
        fs.setattr(ino, SetAttr { size: Some(3000), ..Default::default() }).unwrap();
    }
    fs.commit().unwrap();
    let end = dev.events();
    // More than one commit (two flushes each) inside the operation.
    let commits = flushes(&dev, mark, end) / 2;
    assert!(commits >= 2, "the operation fit in {commits} commit(s): the test does not test bounded handles");
    std::mem::forget(fs);
    let name = if unlink { "unlink" } else { "truncate" };
    // Every crash point takes long on a 64 MiB image (about 250 points,
    // 370 images: minutes); by default the points around every flush (a
    // commit's or a checkpoint's edges) plus an even spread, every point
    // with UEXT4_CRASH_ALL=1.
    let all = std::env::var("UEXT4_CRASH_ALL").is_ok_and(|v| v == "1");
    let mut points: Vec<usize> = if all { (mark..=end).collect() } else { spread(mark, end, 8) };
    if !all {
        for (k, e) in dev.log()[mark..end].iter().enumerate() {
            if matches!(e, Event::Flush) {
                points.extend([mark + k, mark + k + 1]);
            }
        }
        points.sort_unstable();
        points.dedup();
    }
    let dir = tempfile::tempdir().unwrap();
    let mut seen = HashSet::new();
    let check = |fs: &Filesystem, what: &str| match fs.resolve("/big") {
        Ok(i) => {
            let size = fs.stat(i).unwrap().size;
            if unlink {
                assert!(size == len, "{what}: /big still there with size {size}");
            } else {
                assert!(size == 3000 || size == len, "{what}: /big has size {size}");
            }
        }
        Err(e) => assert!(unlink, "{what}: /big lost: {e}"),
    };
    for &p in &points {
        let what = format!("{name}: crash at {p} ({mark}..={end})");
        check_point(&dev, dir.path(), &mut seen, p, |_| true, &what, &check);
        check_point(&dev, dir.path(), &mut seen, p, |_| false, &what, &check);
    }
    eprintln!(
        "{name}: {commits} commits, {} of {} crash points{}, {} images",
        points.len(),
        end - mark + 1,
        if all { " (every one)" } else { " (flush edges and an even spread)" },
        seen.len()
    );
}

#[test]
fn fragmented_truncate_survives_every_crash_point() {
    run_large_free(false);
}

#[test]
fn fragmented_unlink_survives_every_crash_point() {
    run_large_free(true);
}

/// Writeback of a long run into fragmented free space (single free
/// blocks spread over many groups): the allocating path ends a chunk's
/// handle when its credits run short and goes on in a new one. The data
/// is intact after fsync, and crashes across the writeback recover clean.
#[test]
fn fragmented_writeback_takes_bounded_handles() {
    if !have("e2fsck") {
        eprintln!("SKIP: e2fsck not installed");
        return;
    }
    let args = ["-b", "1024", "-g", "256", "-O", "^resize_inode", "-J", "size=1", "-m", "0"];
    let Some((_d, img0)) = rw_support::mkfs(64, &args) else { return };
    let base = std::fs::read(&img0).unwrap();
    let (dev, fs) = open_recording(&base);
    let root = fs.root();
    // Fill the disk, then free one block in eight: 7 MiB of data then
    // takes single blocks from about 220 groups.
    let fill = fs.create(root, b"fill", 0o644, 0, 0).unwrap().ino;
    let free = fs.statfs().avail_blocks;
    let len = (free - 64) * 1024;
    fs.fallocate(fill, uext4::fs::FallocMode::Allocate, 0, len).unwrap();
    for k in 0..len / 8192 {
        fs.fallocate(fill, uext4::fs::FallocMode::PunchHole, k * 8192, 1024).unwrap();
    }
    fs.commit().unwrap();
    let data = rw_support::pattern(5, 7 << 20);
    let ino = fs.create(root, b"data", 0o644, 0, 0).unwrap().ino;
    fs.inodes().write(ino, 0, &data).unwrap();
    let mark = dev.events();
    let handles = fs.io_stats().handles;
    fs.fsync(ino).unwrap();
    let end = dev.events();
    let used = fs.io_stats().handles - handles;
    // More blocks than a transaction may hold: bounded handles let the
    // journal commit between them.
    let commits = flushes(&dev, mark, end) / 2;
    let extents = fs.stat(ino).unwrap().blocks / 2;
    assert!(fs.read_all(ino).unwrap() == data, "data differs after writeback");
    eprintln!("writeback: {used} handles, {commits} commits, {extents} blocks");
    std::mem::forget(fs);
    let dir = tempfile::tempdir().unwrap();
    let mut seen = HashSet::new();
    let mut points = spread(mark, end, 8);
    points.extend(
        dev.log()[mark..end].iter().enumerate().filter(|(_, e)| matches!(e, Event::Flush)).map(|(k, _)| mark + k + 1),
    );
    for p in points {
        let what = format!("writeback: crash at {p} ({mark}..={end})");
        check_point(&dev, dir.path(), &mut seen, p, |_| true, &what, &|fs, what| {
            if p >= end {
                let i = fs.resolve("/data").unwrap();
                assert!(fs.read_all(i).unwrap() == data, "{what}: fsync'd data differs");
            }
        });
    }
    assert!(commits >= 2, "writeback of 7 MiB took {used} handle(s) in {commits} commit(s): not split");
}
