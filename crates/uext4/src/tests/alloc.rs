//! The multiblock allocator on real mkfs.ext4 images: model checks,
//! concurrency, on-disk results checked by e2fsck, and the free-extent
//! histogram checked against e2freefrag.

use super::rw_support;

use rw_support::{have, mkfs, Rng};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use uext4::alloc::{flags, AllocConfig, AllocRequest, Allocator, Criterion};
use uext4::device::{BlockDevice, FileDevice, MemoryDevice};
use uext4::volume::Volume;
use uext4::{FileBlock, PhysicalBlock};

fn e2fsck(img: &Path) -> (bool, String) {
    let out = Command::new("e2fsck").args(["-fn"]).arg(img).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

fn mem_volume(img: &Path) -> Arc<Volume> {
    let bytes = std::fs::read(img).unwrap();
    let dev: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::from_bytes(&bytes));
    Arc::new(Volume::open(dev, 4096).unwrap())
}

fn file_volume(img: &Path) -> Arc<Volume> {
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(img, true).unwrap());
    Arc::new(Volume::open(dev, 4096).unwrap())
}

/// Blocks marked used in the on-disk bitmaps before we touch anything.
fn initially_used(a: &Allocator) -> BTreeSet<u64> {
    let vol = a.volume();
    let mut used = BTreeSet::new();
    for g in 0..vol.groups.len() as u64 {
        let first = vol.group_first_block(g);
        let n = uext4::alloc::layout::group_blocks(vol, g);
        for i in 0..u64::from(n) {
            if !a.is_free_on_disk(PhysicalBlock(first + i)) {
                used.insert(first + i);
            }
        }
    }
    used
}

/// Random allocations and frees against a model: no block is handed out
/// twice, none is metadata or was in use before, and every derived
/// structure stays consistent.
#[test]
fn model_random_ops() {
    for (args, size_mb) in [(vec!["-b", "1024"], 48), (vec![], 256)] {
        let Some((_dir, img)) = mkfs(size_mb, &args) else { return };
        for seed in 1..=3u64 {
            let vol = mem_volume(&img);
            let a = Allocator::new(vol.clone(), AllocConfig::default()).unwrap();
            let before_free = a.free_blocks();
            let pre_used = initially_used(&a);
            let mut owned: Vec<(u64, u32, u32)> = Vec::new(); // (start, len, inode)
            let mut model: BTreeSet<u64> = BTreeSet::new();
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            for step in 0..600 {
                if rng.below(3) > 0 || owned.is_empty() {
                    let ino = 12 + rng.below(20) as u32;
                    let len = [1, 1, 2, 3, 8, 16, 100, 512, 2000][rng.below(9) as usize];
                    let fl =
                        [0, flags::METADATA, flags::SMALL_FILE, flags::STREAM, flags::EXACT_LEN][rng.below(5) as usize];
                    let goal = if rng.below(2) == 0 { 0 } else { rng.below(vol.sb.blocks_count) };
                    let req = AllocRequest {
                        inode: ino,
                        logical: FileBlock(rng.below(5000)),
                        goal: PhysicalBlock(goal),
                        len,
                        min_len: 1,
                        file_size: rng.below(64 << 20),
                        flags: fl,
                    };
                    match a.allocate(&req) {
                        Ok(al) => {
                            assert!(al.len >= 1 && al.len <= len, "{al:?} for {req:?}");
                            if fl & flags::EXACT_LEN != 0 {
                                assert_eq!(al.len, len);
                            }
                            assert!(!a.in_system_zone(al.start, u64::from(al.len)), "metadata handed out: {al:?}");
                            for b in al.start.get()..al.start.get() + u64::from(al.len) {
                                assert!(!pre_used.contains(&b), "block {b} was in use before");
                                assert!(model.insert(b), "block {b} allocated twice (step {step}, {al:?})");
                            }
                            owned.push((al.start.get(), al.len, ino));
                        }
                        Err(uext4::Error::NoSpace(_)) => {}
                        Err(e) => panic!("allocate: {e}"),
                    }
                } else {
                    let i = rng.below(owned.len() as u64) as usize;
                    let (s, l, ino) = owned.swap_remove(i);
                    let deferred = rng.below(4) == 0;
                    a.free(PhysicalBlock(s), u64::from(l), deferred.then_some(step as u64)).unwrap();
                    for b in s..s + u64::from(l) {
                        model.remove(&b);
                    }
                    if rng.below(5) == 0 {
                        a.discard_inode_prealloc(ino);
                    }
                    if rng.below(7) == 0 {
                        a.commit_frees(step as u64);
                    }
                }
                if step % 50 == 0 {
                    a.check_consistency().unwrap();
                    assert_eq!(a.free_blocks(), before_free - model.len() as u64);
                }
            }
            // Double free and metadata frees are refused.
            if let Some(&(s, l, _)) = owned.first() {
                a.free(PhysicalBlock(s), u64::from(l), None).unwrap();
                assert!(a.free(PhysicalBlock(s), u64::from(l), None).is_err());
                owned.remove(0);
            }
            let gd0 = vol.groups[0];
            assert!(a.free(PhysicalBlock(gd0.inode_table), 1, None).is_err());
            for (s, l, _) in owned.drain(..) {
                a.free(PhysicalBlock(s), u64::from(l), None).unwrap();
            }
            a.commit_frees(u64::MAX);
            a.discard_all_prealloc();
            a.check_consistency().unwrap();
            assert_eq!(a.free_blocks(), before_free);
            assert!(a.stats().requests > 0);
        }
    }
}

/// Many threads allocate and free at once; a shared model catches any
/// block handed out twice.
#[test]
fn concurrent_alloc_free() {
    let Some((_dir, img)) = mkfs(64, &["-b", "1024"]) else { return };
    concurrent_alloc_free_on(&img, AllocConfig::default(), false);
}

/// The same with 256 groups and a budget of 64 loaded groups, while a
/// thread keeps flushing and the workers flush now and then (which makes
/// groups clean, so evictable): groups
/// are unloaded and loaded again under the allocating and freeing threads,
/// and no block is handed out twice or lost.
#[test]
fn concurrent_alloc_free_with_eviction() {
    let Some((_dir, img)) = mkfs(64, &["-b", "1024", "-g", "256"]) else { return };
    let cfg = AllocConfig { loaded_budget_bytes: 1, prefetch_batch: 8, ..AllocConfig::default() };
    let st = concurrent_alloc_free_on(&img, cfg, true);
    assert!(st.evictions > 0, "{st:?}");
}

fn concurrent_alloc_free_on(img: &Path, cfg: AllocConfig, flusher: bool) -> uext4::alloc::AllocStats {
    let vol = mem_volume(img);
    let a = Allocator::new(vol, cfg).unwrap();
    let before = a.free_blocks();
    let model = Mutex::new(BTreeSet::<u64>::new());
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        if flusher {
            let (a, done) = (&a, &done);
            s.spawn(move || {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    a.flush().unwrap();
                    std::thread::yield_now();
                }
            });
        }
        let mut workers = Vec::new();
        for t in 0..8u64 {
            let a = &a;
            let model = &model;
            workers.push(s.spawn(move || {
                let mut rng = Rng(0xABCD_EF01 + t * 7919);
                let mut mine: Vec<(u64, u32)> = Vec::new();
                for i in 0..800 {
                    if flusher && i % 50 == 49 {
                        // Clean groups can be unloaded: make some.
                        a.flush().unwrap();
                    }
                    if rng.below(3) > 0 || mine.is_empty() {
                        let req = AllocRequest {
                            inode: (t * 100 + rng.below(5)) as u32 + 12,
                            logical: FileBlock(i * 4),
                            len: 1 + rng.below(64) as u32,
                            file_size: rng.below(1 << 22),
                            flags: if rng.below(4) == 0 { flags::METADATA } else { 0 },
                            ..Default::default()
                        };
                        if let Ok(al) = a.allocate(&req) {
                            let mut m = model.lock().unwrap();
                            for b in al.start.get()..al.start.get() + u64::from(al.len) {
                                assert!(m.insert(b), "block {b} handed out twice");
                            }
                            mine.push((al.start.get(), al.len));
                        }
                    } else {
                        let (s, l) = mine.swap_remove(rng.below(mine.len() as u64) as usize);
                        {
                            let mut m = model.lock().unwrap();
                            for b in s..s + u64::from(l) {
                                m.remove(&b);
                            }
                        }
                        a.free(PhysicalBlock(s), u64::from(l), None).unwrap();
                    }
                }
                for (s, l) in mine {
                    let mut m = model.lock().unwrap();
                    for b in s..s + u64::from(l) {
                        m.remove(&b);
                    }
                    drop(m);
                    a.free(PhysicalBlock(s), u64::from(l), None).unwrap();
                }
            }));
        }
        for w in workers {
            w.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    a.discard_all_prealloc();
    a.check_consistency().unwrap();
    assert_eq!(a.free_blocks(), before);
    a.stats()
}

/// Allocations written back to a real image: e2fsck sees exactly our
/// blocks as "in use but unowned" (and nothing else: no checksum or count
/// errors), and after freeing them everything is clean again.
#[test]
fn write_back_checked_by_e2fsck() {
    if !have("e2fsck") {
        eprintln!("SKIP: e2fsprogs not installed");
        return;
    }
    for (name, args, size_mb) in [
        ("csum4k", vec![], 512),
        ("csum1k", vec!["-b", "1024"], 64),
        ("nocsum", vec!["-O", "^metadata_csum,uninit_bg"], 256),
        ("ext2ish", vec!["-O", "^metadata_csum,^64bit,^flex_bg,^extent"], 128),
    ] {
        let Some((_dir, img)) = mkfs(size_mb, &args) else { return };
        let vol = file_volume(&img);
        let a = Allocator::new(vol.clone(), AllocConfig::default()).unwrap();
        let mut got = Vec::new();
        // Spread over many groups, including BLOCK_UNINIT ones.
        let ngroups = vol.groups.len() as u64;
        for i in 0..40u64 {
            let g = i % ngroups;
            let goal = vol.group_first_block(g) + u64::from(vol.sb.blocks_per_group) / 2;
            let req = AllocRequest {
                goal: PhysicalBlock(goal),
                len: 1 + (i as u32 % 7) * 9,
                flags: flags::NO_PREALLOC,
                ..Default::default()
            };
            got.push(a.allocate(&req).unwrap());
        }
        a.flush().unwrap();
        drop(a);
        let (ok, text) = e2fsck(&img);
        assert!(!ok, "{name}: e2fsck should see unowned blocks");
        for bad in ["checksum", "Inode", "Directory", "bad block", "Superblock"] {
            assert!(!text.contains(bad), "{name}: unexpected e2fsck complaint ({bad}):\n{text}");
        }
        assert!(text.contains("Block bitmap differences"), "{name}:\n{text}");
        // Every block we allocated is reported (as marked but unused).
        let diff_line = text.lines().find(|l| l.contains("Block bitmap differences")).unwrap().to_string();
        let reported = parse_bitmap_differences(&diff_line);
        let ours: BTreeSet<u64> =
            got.iter().flat_map(|al| al.start.get()..al.start.get() + u64::from(al.len)).collect();
        assert_eq!(reported, ours, "{name}: e2fsck's differences are not exactly our blocks: {diff_line}");
        // Reopen, free them, flush: clean.
        let vol = file_volume(&img);
        let a = Allocator::new(vol, AllocConfig::default()).unwrap();
        for al in &got {
            a.free(al.start, u64::from(al.len), None).unwrap();
        }
        a.flush().unwrap();
        drop(a);
        let (ok, text) = e2fsck(&img);
        assert!(ok, "{name}: e2fsck after freeing:\n{text}");
    }
}

/// Parses e2fsck's "Block bitmap differences:  -(a--b) -c ..." into the
/// set of blocks marked used but not in use.
fn parse_bitmap_differences(line: &str) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    let list = line.split(':').nth(1).unwrap_or("");
    for tok in list.split_whitespace() {
        let t = tok.trim_start_matches('-').trim_start_matches('(').trim_end_matches(')');
        assert!(tok.starts_with('-'), "block marked free but in use: {tok}");
        match t.split_once("--") {
            Some((a, b)) => out.extend(a.parse::<u64>().unwrap()..=b.parse::<u64>().unwrap()),
            None => {
                out.insert(t.parse::<u64>().unwrap());
            }
        }
    }
    out
}

/// The criteria counters move as the seed describes: a fragmented image
/// makes CR1 fail and CR1.5 succeed; with CR1.5 off, CR2 does the work.
#[test]
fn criteria_on_fragmented_image() {
    let Some((_dir, img)) = mkfs(256, &["-b", "4096"]) else { return };
    for cr15 in [true, false] {
        let vol = mem_volume(&img);
        let cfg = AllocConfig { cr1_5: cr15, ..AllocConfig::default() };
        let a = Allocator::new(vol, cfg).unwrap();
        // Free runs of 12 blocks: a 16-block (64 KiB) goal never fits.
        uext4::alloc::fixture::fragment(&a, 12, 4).unwrap();
        let h = a.free_extent_histogram().unwrap();
        assert!(h.extents > 100);
        assert!((h.avg_extent() - 12.0).abs() < 1.0, "avg {}", h.avg_extent());
        let before = a.stats();
        for i in 0..200u32 {
            let req =
                AllocRequest { inode: 100 + i, len: 16, min_len: 1, flags: flags::NO_PREALLOC, ..Default::default() };
            a.allocate(&req).unwrap();
        }
        let s = a.stats();
        let d = |c: Criterion| s.hits[c.index()] - before.hits[c.index()];
        if cr15 {
            assert!(d(Criterion::Cr1_5) > 150, "CR1.5 hits {}: {s:?}", d(Criterion::Cr1_5));
        } else {
            assert_eq!(d(Criterion::Cr1_5), 0);
            assert!(d(Criterion::Cr2) + d(Criterion::Cr3) > 150, "{s:?}");
        }
        a.check_consistency().unwrap();
    }
}

/// CR0 serves power-of-two requests from the buddy on a fresh image, and
/// the goal block is honoured when free.
#[test]
fn cr0_and_goal() {
    let Some((_dir, img)) = mkfs(256, &[]) else { return };
    let vol = mem_volume(&img);
    let a = Allocator::new(vol.clone(), AllocConfig::default()).unwrap();
    let al = a.allocate(&AllocRequest { len: 64, flags: flags::NO_PREALLOC, ..Default::default() }).unwrap();
    assert_eq!(al.criterion, Criterion::Cr0);
    assert_eq!(al.len, 64);
    assert_eq!(al.start.get() % 64, (vol.sb.first_data_block as u64) % 64, "buddy chunks are aligned");
    let goal = al.start + 64;
    let b = a.allocate(&AllocRequest { goal, len: 10, flags: flags::NO_PREALLOC, ..Default::default() }).unwrap();
    assert_eq!((b.start, b.criterion), (goal, Criterion::Goal));
    // A growing file's next write lands right after the first through its
    // per-inode preallocation.
    let f1 = a
        .allocate(&AllocRequest { inode: 50, logical: FileBlock(0), len: 1, file_size: 4096, ..Default::default() })
        .unwrap();
    let f2 = a
        .allocate(&AllocRequest { inode: 50, logical: FileBlock(1), len: 1, file_size: 8192, ..Default::default() })
        .unwrap();
    assert_eq!(f2.criterion, Criterion::Prealloc);
    assert_eq!(f2.start, f1.start + 1);
}

/// Random writes into a huge sparse file leave one preallocation each
/// (every write normalises to its own 8 MiB window): an inode keeps at
/// most `INODE_MAX_PAS` of them, kept disjoint and found by position, and
/// a write next to an earlier one still lands in that one's surplus.
#[test]
fn random_writes_into_a_huge_file_keep_preallocations_bounded() {
    let Some((_dir, img)) = mkfs(16 << 10, &["-E", "lazy_itable_init=1,lazy_journal_init=1"]) else { return };
    let vol = file_volume(&img);
    let a = Allocator::new(vol, AllocConfig::default()).unwrap();
    let max = uext4::alloc::prealloc::INODE_MAX_PAS;
    let tib_blocks = (1u64 << 40) / 4096;
    let mut rng = Rng(7);
    let mut taken = BTreeSet::new();
    let mut last = None;
    for i in 0..(max as u64 + 300) {
        let logical = rng.next() % tib_blocks;
        let req =
            AllocRequest { inode: 50, logical: FileBlock(logical), len: 1, file_size: 1 << 40, ..Default::default() };
        let al = a.allocate(&req).unwrap();
        assert!(taken.insert(al.start.get()), "block {} handed out twice", al.start.get());
        assert!(a.inode_preallocs(50) <= max, "after {i} writes: {}", a.inode_preallocs(50));
        last = Some((logical, al.start));
    }
    assert_eq!(a.inode_preallocs(50), max);
    // The newest one is kept (the trimmed ones are the farthest from it).
    let (logical, start) = last.unwrap();
    let next = a
        .allocate(&AllocRequest {
            inode: 50,
            logical: FileBlock(logical + 1),
            len: 1,
            file_size: 1 << 40,
            ..Default::default()
        })
        .unwrap();
    assert_eq!((next.criterion, next.start), (Criterion::Prealloc, start + 1));
    assert!(taken.insert(next.start.get()));
    a.discard_inode_prealloc(50);
    assert_eq!(a.inode_preallocs(50), 0);
    a.check_consistency().unwrap();
}

/// Prefetch initialises BLOCK_UNINIT groups without I/O unless switched off.
#[test]
fn prefetch_inits_uninit_groups() {
    let Some((_dir, img)) = mkfs(2048, &[]) else { return };
    for on in [true, false] {
        let vol = mem_volume(&img);
        let cfg = AllocConfig { prefetch_uninit: on, ..AllocConfig::default() };
        let a = Allocator::new(vol, cfg).unwrap();
        a.allocate(&AllocRequest { len: 8, flags: flags::NO_PREALLOC, ..Default::default() }).unwrap();
        let s = a.stats();
        if on {
            assert!(s.uninit_inits > 0, "{s:?}");
            assert!(s.prefetch_groups > s.prefetch_ios, "{s:?}");
        } else {
            assert_eq!(s.prefetch_groups, s.prefetch_ios, "{s:?}");
        }
    }
}

/// `free_extent_histogram` agrees with e2freefrag on the same image.
#[test]
fn histogram_matches_e2freefrag() {
    if Command::new("e2freefrag").arg("-h").output().is_err() {
        eprintln!("SKIP: e2freefrag not installed");
        return;
    }
    let Some((_dir, img)) = mkfs(64, &["-b", "1024"]) else { return };
    {
        let vol = file_volume(&img);
        let a = Allocator::new(vol, AllocConfig::default()).unwrap();
        uext4::alloc::fixture::fragment(&a, 37, 5).unwrap();
        a.flush().unwrap();
    }
    let vol = file_volume(&img);
    let a = Allocator::new(vol, AllocConfig::default()).unwrap();
    let h = a.free_extent_histogram().unwrap();
    let out = Command::new("e2freefrag").arg(&img).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |label: &str| -> u64 {
        let line = text.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("{label} in {text}"));
        line.split(':').nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap()
    };
    assert_eq!(field("Free blocks"), h.free_blocks, "{text}");
    assert_eq!(field("Num. free extent"), h.extents, "{text}");
    assert_eq!(field("Max. free extent"), h.max_extent * u64::from(h.block_size) / 1024, "{text}");
    assert_eq!(field("Min. free extent"), h.min_extent * u64::from(h.block_size) / 1024, "{text}");
}

/// A block bitmap that calls the inode table free is not trusted: the
/// group is never allocated from, and nothing overlapping metadata is
/// handed out.
#[test]
fn bitmap_freeing_metadata_is_distrusted() {
    let Some((_dir, img)) = mkfs(32, &["-b", "1024", "-O", "^metadata_csum,^flex_bg"]) else { return };
    let mut bytes = std::fs::read(&img).unwrap();
    let vol = mem_volume(&img);
    let gd = vol.groups[1];
    // Clear the bitmap bits of group 1's inode table (no checksums here).
    let bm_off = gd.block_bitmap as usize * 1024;
    let first = vol.group_first_block(1);
    for b in gd.inode_table..gd.inode_table + vol.inode_table_blocks() {
        let i = (b - first) as usize;
        bytes[bm_off + i / 8] &= !(1 << (i % 8));
    }
    // Make the descriptor agree with the bad bitmap, so that only the
    // metadata check can catch it.
    let mut gd1 = gd;
    gd1.free_blocks_count += vol.inode_table_blocks() as u32;
    let ds = usize::from(vol.sb.desc_size);
    let gdt = vol.desc_block_location(0) as usize * 1024 + ds;
    gd1.encode(&vol.sb, 1, &mut bytes[gdt..gdt + ds]);
    let dev: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::from_bytes(&bytes));
    let vol = Arc::new(Volume::open(dev, 64).unwrap());
    assert_eq!(vol.groups[1].free_blocks_count, gd1.free_blocks_count);
    let a = Allocator::new(vol.clone(), AllocConfig::default()).unwrap();
    a.load_all().unwrap();
    assert!(a.group_summary(1).unwrap().corrupt);
    for _ in 0..2000 {
        let Ok(al) = a.allocate(&AllocRequest { len: 64, min_len: 1, flags: flags::METADATA, ..Default::default() })
        else {
            break;
        };
        assert!(!a.in_system_zone(al.start, u64::from(al.len)), "{al:?}");
        let g = (al.start.get() - u64::from(vol.sb.first_data_block)) / u64::from(vol.sb.blocks_per_group);
        assert_ne!(g, 1, "allocated from the distrusted group: {al:?}");
    }
}

/// A free spanning two groups that fails in the second (a double free: a
/// corrupt image) is corruption (EUCLEAN, so `errors=` applies), and it
/// leaves the first group alone: it used to have freed it in memory
/// before failing, half an operation.
#[test]
fn failed_multi_group_free_changes_nothing() {
    let Some((_dir, img)) = mkfs(256, &[]) else { return };
    let vol = mem_volume(&img);
    let bpg = u64::from(vol.sb.blocks_per_group);
    let a = Allocator::new(vol, AllocConfig::default()).unwrap();
    // The last block of group 1 (group 2 starts with data: no backup).
    let last = PhysicalBlock(2 * bpg - 1);
    let al = a.allocate(&AllocRequest { goal: last, len: 1, flags: flags::NO_PREALLOC, ..Default::default() }).unwrap();
    assert_eq!(al.start, last);
    assert!(a.is_free_on_disk(last + 1), "group 2's first block is free");
    let e = a.free(last, 2, None).unwrap_err();
    assert_eq!(e.errno(), libc::EUCLEAN, "{e}");
    assert!(!a.is_free_on_disk(last), "the first group's part was not freed");
    a.free(last, 1, None).expect("freeing it alone works: it was still in use");
}

/// Issue 25: the inode bitmap and descriptor of a group are journaled
/// from a copy taken under the group lock, and a change that a copy
/// journaled in the same transaction already holds is not journaled
/// again (threads creating in one group share one journaling). A copy
/// holds every change numbered up to it and none after; a later
/// transaction, or a change after the copy, journals again.
#[test]
fn inode_group_journaling_is_shared_within_a_transaction() {
    use uext4::alloc::inodes::InodeAllocator;
    let Some((_d, img)) = mkfs(64, &["-b", "4096"]) else { return };
    let vol = mem_volume(&img);
    let balloc = Allocator::new(vol.clone(), AllocConfig::default()).unwrap();
    let ia = InodeAllocator::new(vol.clone());
    let ipg = vol.sb.inodes_per_group;
    let (a, sa) = ia.allocate_seq(&balloc, 2, false).unwrap();
    let (b, sb) = ia.allocate_seq(&balloc, 2, false).unwrap();
    assert!(sb > sa, "changes are numbered in order");
    let g = (a - 1) / ipg;
    assert_eq!((b - 1) / ipg, g, "both near the root");
    let bit = |bm: &[u8], ino: u32| {
        let i = (ino - 1) % ipg;
        bm[(i / 8) as usize] >> (i % 8) & 1 == 1
    };
    let mut copies = Vec::new();
    // The first journals a copy holding both allocations.
    ia.journal_group(g, 7, sa, |s| {
        copies.push((bit(&s.bitmap, a), bit(&s.bitmap, b), s.high, s.free));
        Ok(())
    })
    .unwrap();
    let (in_a, in_b, high, free) = copies[0];
    assert!(in_a && in_b);
    assert!(high > (b - 1) % ipg && high > (a - 1) % ipg, "the itable_unused mark covers both");
    // The second change is in it: nothing is journaled for it in
    // transaction 7, but in transaction 8 it is.
    ia.journal_group(g, 7, sb, |_| panic!("journaled again in the same transaction")).unwrap();
    let st = ia.stats();
    assert_eq!((st.group_journals, st.group_journals_shared), (1, 1));
    let mut again = 0;
    ia.journal_group(g, 8, sb, |_| {
        again += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(again, 1, "another transaction journals its own copy");
    // A change after the copy is journaled, from a copy that holds it.
    let sc = ia.release(a, false).unwrap();
    assert!(sc > sb);
    ia.journal_group(g, 8, sc, |s| {
        assert!(!bit(&s.bitmap, a) && bit(&s.bitmap, b));
        assert_eq!(s.free, free + 1);
        assert_eq!(s.high, high, "a free never lowers the mark");
        again += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(again, 2);
    // A failed journaling records nothing: the next caller journals.
    let (_c, sd) = ia.allocate_seq(&balloc, 2, false).unwrap();
    let e = ia.journal_group(g, 8, sd, |_| Err(uext4::Error::Invalid("injected".into())));
    assert!(e.is_err());
    ia.journal_group(g, 8, sd, |_| {
        again += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(again, 3);
}
