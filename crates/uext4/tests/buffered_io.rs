//! Buffered I/O through the page cache (seed 001): in-folio writes take
//! the shared lock, readers take none and never see an aligned 8 KiB
//! write torn, direct and buffered I/O stay coherent, and the cache keeps
//! its budget. Every image ends `e2fsck -fn` clean.

mod rw_support;

use rw_support::{fsck_clean, mkfs};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use uext4::inode_api::{FallocMode, SetAttr};
use uext4::Filesystem;
use uext4::MountOptions;
use uext4::{DataPathConfig, LockPolicy};

fn open(img: &Path, data: DataPathConfig, cache_bytes: usize) -> Filesystem {
    Filesystem::open_with(img, MountOptions { write: true, data, cache_bytes, ..Default::default() }).unwrap()
}

/// 8 KiB whose every 8-byte word is `v`.
fn page8k(v: u64) -> Vec<u8> {
    (0..1024).flat_map(|_| v.to_le_bytes()).collect()
}

#[test]
fn in_folio_writes_take_the_shared_lock() {
    for args in [&["-b", "4096"][..], &["-b", "1024", "-O", "^metadata_csum"]] {
        let Some((_d, img)) = mkfs(64, args) else { return };
        let mut fs = open(&img, DataPathConfig::default(), 0);
        let f = fs.create(fs.root(), b"db", 0o644, 0, 0).unwrap().ino;
        let mut model = vec![0u8; 1 << 20];
        for k in 0..128u64 {
            // Aligned 8 KiB pages, written once: allocation, exclusive.
            let p = page8k(k);
            fs.inodes().write(f, k * 8192, &p).unwrap();
            model[(k * 8192) as usize..(k * 8192 + 8192) as usize].copy_from_slice(&p);
        }
        let s0 = fs.io_stats();
        // Rewrites of cached pages: one folio each, shared, no handle.
        for k in 0..128u64 {
            let p = page8k(1000 + k);
            fs.inodes().write(f, k * 8192, &p).unwrap();
            model[(k * 8192) as usize..(k * 8192 + 8192) as usize].copy_from_slice(&p);
        }
        // Small unaligned rewrites inside a folio: shared too.
        for k in 0..16u64 {
            let off = k * 8192 + 100;
            fs.inodes().write(f, off, b"hello").unwrap();
            model[off as usize..off as usize + 5].copy_from_slice(b"hello");
        }
        let d = fs.io_stats().since(&s0);
        assert_eq!((d.buffered_write_shared, d.buffered_write_exclusive), (144, 0), "{d:?}");
        assert_eq!(d.handles, d.time_updates, "no handle but lazy mtime: {d:?}");
        // A write across two folios, or growing the file: exclusive.
        let s0 = fs.io_stats();
        fs.inodes().write(f, 8192 - 2, b"span").unwrap();
        model[8190..8194].copy_from_slice(b"span");
        fs.inodes().write(f, 1 << 20, b"tail").unwrap();
        model.extend_from_slice(b"tail");
        let d = fs.io_stats().since(&s0);
        assert_eq!((d.buffered_write_shared, d.buffered_write_exclusive), (0, 2), "{d:?}");
        assert_eq!(fs.read_all(f).unwrap(), model);
        // Direct I/O sees buffered writes and the cache sees direct ones.
        let mut buf = vec![0u8; 8192];
        fs.read_direct(f, 5 * 8192, &mut buf).unwrap();
        assert_eq!(&buf[..], &model[5 * 8192..6 * 8192]);
        let p = page8k(77);
        fs.write_direct(f, 5 * 8192, &p).unwrap();
        model[5 * 8192..6 * 8192].copy_from_slice(&p);
        fs.inodes().read(f, 5 * 8192, &mut buf).unwrap();
        assert_eq!(buf, p, "buffered read after a direct write");
        // Truncate and punch drop cached folios.
        fs.setattr(f, SetAttr { size: Some(300_000), ..Default::default() }).unwrap();
        model.truncate(300_000);
        fs.fallocate(f, FallocMode::PunchHole, 16384, 20000).unwrap();
        model[16384..36384].fill(0);
        fs.setattr(f, SetAttr { size: Some(400_000), ..Default::default() }).unwrap();
        model.resize(400_000, 0);
        assert_eq!(fs.read_all(f).unwrap(), model);
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        assert_eq!(Filesystem::open(&img).unwrap().read_all(f).unwrap(), model);
    }
}

#[test]
fn exclusive_policy_takes_the_exclusive_lock() {
    let Some((_d, img)) = mkfs(32, &["-b", "4096"]) else { return };
    let mut fs = open(&img, DataPathConfig { lock_policy: LockPolicy::Exclusive, ..Default::default() }, 0);
    let f = fs.create(fs.root(), b"x", 0o644, 0, 0).unwrap().ino;
    fs.inodes().write(f, 0, &page8k(1)).unwrap();
    let s0 = fs.io_stats();
    for k in 0..10 {
        fs.inodes().write(f, 0, &page8k(k)).unwrap();
    }
    let d = fs.io_stats().since(&s0);
    assert_eq!((d.buffered_write_shared, d.buffered_write_exclusive), (0, 10), "{d:?}");
    fs.unmount().unwrap();
    fsck_clean(&img);
}

/// Writers rewrite aligned 8 KiB pages (each page all one word), readers
/// read aligned 8 KiB pages (and larger spans) with no lock: a page must
/// never mix two writes. Run on folios of every origin: 4 KiB folios
/// created by small reads, 8 KiB ones by writes, large ones by readahead.
#[test]
fn aligned_8k_writes_are_never_seen_torn() {
    let Some((_d, img)) = mkfs(64, &["-b", "4096"]) else { return };
    for (round, policy) in [LockPolicy::Seeds, LockPolicy::Exclusive, LockPolicy::Seeds].into_iter().enumerate() {
        let fs = Arc::new(open(&img, DataPathConfig { lock_policy: policy, ..Default::default() }, 8 << 20));
        let name = format!("t{round}");
        let f = fs.create(fs.root(), name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        const PAGES: u64 = 64;
        for k in 0..PAGES {
            fs.inodes().write(f, k * 8192, &page8k(k << 32)).unwrap();
        }
        // Round 0: 4 KiB reads populate small folios; round 2: big reads.
        let mut b = vec![0u8; 4096];
        for k in 0..PAGES * 2 {
            if round == 0 {
                fs.inodes().read(f, k * 4096, &mut b).unwrap();
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut hs = Vec::new();
        for t in 0..3u64 {
            let (fs, stop) = (fs.clone(), stop.clone());
            hs.push(std::thread::spawn(move || {
                let mut x = 0x9E37 + t;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) && n < 3000 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let k = (x >> 33) % PAGES;
                    fs.inodes().write(f, k * 8192, &page8k((k << 32) | (t << 24) | n)).unwrap();
                    n += 1;
                }
            }));
        }
        for t in 0..3u64 {
            let fs = fs.clone();
            hs.push(std::thread::spawn(move || {
                let mut x = 77 + t;
                let mut buf = vec![0u8; 64 << 10];
                for _ in 0..3000 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let span = if round == 2 { 8 } else { 1 + (x >> 60) % 2 };
                    let k = (x >> 33) % (PAGES - span + 1);
                    let len = (span * 8192) as usize;
                    assert_eq!(fs.inodes().read(f, k * 8192, &mut buf[..len]).unwrap(), len);
                    for (j, page) in buf[..len].chunks(8192).enumerate() {
                        let w0 = &page[..8];
                        assert!(page.chunks(8).all(|w| w == w0), "page {} torn", k + j as u64);
                        let v = u64::from_le_bytes(w0.try_into().unwrap());
                        assert_eq!(v >> 32, k + j as u64, "page {} holds another page's data", k + j as u64);
                    }
                }
            }));
        }
        for (i, h) in hs.into_iter().enumerate() {
            if i == 3 {
                stop.store(true, Ordering::Relaxed);
            }
            h.join().unwrap();
        }
        let stats = fs.io_stats();
        if policy == LockPolicy::Seeds {
            assert!(stats.buffered_write_shared > 0, "{stats:?}");
        } else {
            assert_eq!(stats.buffered_write_shared, 0, "{stats:?}");
        }
        let (_, peak, budget) = fs.page_cache_usage();
        assert!(peak <= budget + (2 << 20), "page cache peak {peak} over budget {budget}");
        let mut fs = Arc::try_unwrap(fs).unwrap_or_else(|_| panic!("still shared"));
        fs.unmount().unwrap();
    }
    fsck_clean(&img);
}

#[test]
fn cache_keeps_its_budget_on_large_reads() {
    let Some((_d, img)) = mkfs(128, &["-b", "4096"]) else { return };
    let mut fs = open(&img, DataPathConfig::default(), 4 << 20);
    let f = fs.create(fs.root(), b"big", 0o644, 0, 0).unwrap().ino;
    let data: Vec<u8> = (0..(48u32 << 20)).map(|i| (i % 251) as u8).collect();
    fs.inodes().write(f, 0, &data).unwrap();
    // Sequential reads (readahead grows folios to 2 MiB) and random ones.
    let mut buf = vec![0u8; 64 << 10];
    for k in 0..(48 << 4) {
        fs.inodes().read(f, k * (64 << 10), &mut buf).unwrap();
        let want = &data[(k * (64 << 10)) as usize..((k + 1) * (64 << 10)) as usize];
        if buf[..] != want[..] {
            let p = buf.iter().zip(want).position(|(a, b)| a != b).unwrap();
            let q = buf.iter().zip(want).rposition(|(a, b)| a != b).unwrap();
            panic!(
                "read {k}: mismatch at {} ..{} got {:?} want {:?}",
                k * 65536 + p as u64,
                k * 65536 + q as u64,
                &buf[p..p + 8],
                &want[p..p + 8]
            );
        }
    }
    let (_, peak, budget) = fs.page_cache_usage();
    assert!(peak <= budget + (2 << 20), "peak {peak} budget {budget}");
    assert_eq!(fs.read_all(f).unwrap(), data);
    fs.unmount().unwrap();
    fsck_clean(&img);
}

/// A direct read never sees half of a buffered write that runs under the
/// shared lock inside one folio (found through FUSE with O_DIRECT readers).
#[test]
fn direct_reads_see_whole_in_folio_writes() {
    let Some((_d, img)) = mkfs(64, &["-b", "4096"]) else { return };
    let fs = Arc::new(open(&img, DataPathConfig::default(), 0));
    let f = fs.create(fs.root(), b"db", 0o644, 0, 0).unwrap().ino;
    const UNITS: u64 = 32;
    for u in 0..UNITS {
        fs.inodes().write(f, u * 8192, &page8k(u << 32)).unwrap();
    }
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (fs, done) = (fs.clone(), done.clone());
        std::thread::spawn(move || {
            let mut x = 1u64;
            for n in 1..=20_000u64 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let u = (x >> 33) % UNITS;
                fs.inodes().write(f, u * 8192, &page8k((u << 32) | n)).unwrap();
            }
            done.store(true, Ordering::Relaxed);
        })
    };
    let mut x = 7u64;
    let mut buf = vec![0u8; 8192];
    let mut reads = 0;
    while !done.load(Ordering::Relaxed) || reads < 1000 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let u = (x >> 33) % UNITS;
        fs.read_direct(f, u * 8192, &mut buf).unwrap();
        let w0 = &buf[..8];
        assert!(buf.chunks(8).all(|w| w == w0), "unit {u} torn after {reads} reads");
        assert_eq!(u64::from_le_bytes(w0.try_into().unwrap()) >> 32, u);
        reads += 1;
    }
    writer.join().unwrap();
    assert!(fs.io_stats().buffered_write_shared > 0);
    let mut fs = Arc::try_unwrap(fs).unwrap_or_else(|_| panic!("still shared"));
    fs.unmount().unwrap();
    fsck_clean(&img);
}

/// Issue 12 defect 11: a folio refilled from the device after eviction
/// was clipped at the on-disk size, not the in-memory one, so blocks that
/// writeback had cleaned past the on-disk EOF read back as zeros and an
/// extending write stored those zeros for good. A 4 MiB cache; one thread
/// appends 97-byte chunks, one fsyncs in a loop, one re-reads the tail
/// against the model, one streams another file to force eviction. Runs
/// UEXT4_EVICT_SECS seconds (default 3).
#[test]
fn appends_survive_eviction_past_the_on_disk_size() {
    use std::sync::Mutex;
    let secs: u64 = std::env::var("UEXT4_EVICT_SECS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let Some((_d, img)) = mkfs(256, &["-b", "4096"]) else { return };
    let mut fs = open(&img, DataPathConfig::default(), 4 << 20);
    let root = fs.root();
    let log = fs.create(root, b"log", 0o644, 0, 0).unwrap().ino;
    let other = fs.create(root, b"stream", 0o644, 0, 0).unwrap().ino;
    let stream: Vec<u8> = (0..(16u32 << 20)).map(|i| (i % 253) as u8).collect();
    fs.inodes().write(other, 0, &stream).unwrap();
    fs.fsync(other).unwrap();
    let model = Mutex::new(Vec::<u8>::new());
    let stop = AtomicBool::new(false);
    // Whichever thread ends (or panics) first stops the others.
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    std::thread::scope(|s| {
        let (fs, model, stop) = (&fs, &model, &stop);
        s.spawn(move || {
            let _stop = StopOnDrop(stop);
            let t0 = std::time::Instant::now();
            let mut k = 0u64;
            // Well short of filling the disk, however fast the machine.
            while t0.elapsed().as_secs() < secs && model.lock().unwrap().len() < 160 << 20 {
                let chunk: Vec<u8> = (0..97u64).map(|j| (k * 97 + j) as u8 | 1).collect();
                let off = model.lock().unwrap().len() as u64;
                assert_eq!(fs.inodes().write(log, off, &chunk).unwrap(), 97);
                model.lock().unwrap().extend_from_slice(&chunk);
                k += 1;
            }
        });
        s.spawn(move || {
            let _stop = StopOnDrop(stop);
            while !stop.load(Ordering::Acquire) {
                fs.fsync(log).unwrap();
            }
        });
        s.spawn(move || {
            let _stop = StopOnDrop(stop);
            let mut buf = vec![0u8; 64 << 10];
            while !stop.load(Ordering::Acquire) {
                // Appends only add bytes: what the model holds now is
                // what any later read must see.
                let (from, want) = {
                    let m = model.lock().unwrap();
                    let from = m.len().saturating_sub(3 << 13);
                    (from as u64, m[from..].to_vec())
                };
                let n = fs.inodes().read(log, from, &mut buf[..want.len()]).unwrap();
                assert_eq!(n, want.len(), "short read at {from}");
                if let Some(p) = buf[..n].iter().zip(&want).position(|(a, b)| a != b) {
                    panic!("tail of log wrong at byte {}: got {} want {}", from + p as u64, buf[p], want[p]);
                }
            }
        });
        s.spawn(move || {
            let _stop = StopOnDrop(stop);
            let mut buf = vec![0u8; 256 << 10];
            let mut off = 0u64;
            while !stop.load(Ordering::Acquire) {
                let n = fs.inodes().read(other, off, &mut buf).unwrap();
                assert_eq!(buf[..n], stream[off as usize..off as usize + n]);
                off = (off + n as u64) % stream.len() as u64;
            }
        });
    });
    let model = model.into_inner().unwrap();
    fs.sync().unwrap();
    assert!(fs.read_all(log).unwrap() == model, "log differs from the model after sync");
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    assert!(Filesystem::open(&img).unwrap().read_all(log).unwrap() == model, "log differs after reopening");
}

/// `read_cached` serves only what the page cache holds: nothing (and no
/// device read) for a cold range, the same bytes as `read` once the
/// range is cached, end of file as 0, and a range cached only in part
/// as a miss.
#[test]
fn cache_only_reads_serve_hits_and_refuse_misses() {
    let Some((_d, img)) = mkfs(64, &["-b", "4096"]) else { return };
    let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    let f = {
        let mut fs = open(&img, DataPathConfig::default(), 0);
        let f = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
        fs.inodes().write(f, 0, &data).unwrap();
        fs.unmount().unwrap();
        f
    };
    let mut fs = open(&img, DataPathConfig::default(), 0);
    let mut buf = vec![0u8; 8192];
    assert_eq!(fs.inodes().read_cached(f, 8192, &mut buf).unwrap(), None, "cold range");
    assert_eq!(fs.inodes().read(f, 8192, &mut buf).unwrap(), 8192);
    buf.fill(0);
    assert_eq!(fs.inodes().read_cached(f, 8192, &mut buf).unwrap(), Some(8192));
    assert_eq!(buf[..], data[8192..16384]);
    // Partly cached: the read's folio and a cold one further on.
    let mut wide = vec![0u8; 512 << 10];
    assert_eq!(fs.inodes().read_cached(f, 8192, &mut wide).unwrap(), None, "partly cached");
    assert_eq!(fs.inodes().read(f, 0, &mut wide).unwrap(), wide.len());
    wide.fill(0);
    assert_eq!(fs.inodes().read_cached(f, 0, &mut wide).unwrap(), Some(wide.len()));
    assert_eq!(wide[..], data[..512 << 10]);
    assert_eq!(fs.inodes().read_cached(f, 4 << 20, &mut buf).unwrap(), Some(0), "past EOF");
    // A buffered write is seen by the next cached read.
    fs.inodes().write(f, 8192, &[7u8; 100]).unwrap();
    assert_eq!(fs.inodes().read_cached(f, 8192, &mut buf).unwrap(), Some(8192));
    assert_eq!(buf[..100], [7u8; 100]);
    assert_eq!(buf[100..], data[8192 + 100..16384]);
    fs.unmount().unwrap();
    fsck_clean(&img);
    // Read-only: no page cache, every read is a miss.
    let ro = Filesystem::open(&img).unwrap();
    assert_eq!(ro.inodes().read_cached(f, 0, &mut buf).unwrap(), None);
}

/// One-page folios take their memory from recycled slots (issue 25): a
/// slot freed by one file's evicted or deleted folio serves another's, and
/// no file may ever read or keep another's bytes. Many small files through
/// a 4 MiB cache (evictions), with files deleted and recreated between
/// checks, every file compared with its own pattern each time.
#[test]
fn small_files_keep_their_data_when_folio_memory_is_recycled() {
    let Some((_d, img)) = mkfs(64, &["-b", "4096"]) else { return };
    let mut fs = open(&img, DataPathConfig::default(), 4 << 20);
    let root = fs.root();
    let pattern = |gen: u32, k: u32| -> Vec<u8> {
        (0..4096u32).map(|i| (i.wrapping_mul(31) ^ k.wrapping_mul(7) ^ gen.wrapping_mul(131)) as u8).collect()
    };
    let name = |k: u32| format!("f{k}").into_bytes();
    let n = 2000u32; // 8 MiB of one-page folios, twice the cache
    let mut gen_of = vec![0u32; n as usize];
    let mut inos = Vec::new();
    for k in 0..n {
        let ino = fs.create(root, &name(k), 0o644, 0, 0).unwrap().ino;
        fs.inodes().write(ino, 0, &pattern(0, k)).unwrap();
        inos.push(ino);
    }
    for round in 1..=2u32 {
        // Every file reads back its own bytes, though most of their folios
        // were evicted and their slots taken by later files.
        for k in 0..n {
            let got = fs.read_all(inos[k as usize]).unwrap();
            assert!(got == pattern(gen_of[k as usize], k), "round {round}: file {k} does not hold its own data");
        }
        // Delete every third file (their folios, some dirty, are dropped
        // and their slots reused) and write it again with new bytes,
        // rewriting the others in place meanwhile.
        for k in (round % 3..n).step_by(3) {
            fs.unlink(root, &name(k)).unwrap();
        }
        for k in 0..n {
            if k % 3 == round % 3 {
                inos[k as usize] = fs.create(root, &name(k), 0o644, 0, 0).unwrap().ino;
            }
            gen_of[k as usize] = round;
            fs.inodes().write(inos[k as usize], 0, &pattern(round, k)).unwrap();
        }
    }
    for k in 0..n {
        assert!(fs.read_all(inos[k as usize]).unwrap() == pattern(2, k), "file {k} after the last round");
    }
    let (_, peak, budget) = fs.page_cache_usage();
    assert!(peak <= budget + (2 << 20), "peak {peak} budget {budget}");
    fs.unmount().unwrap();
    fsck_clean(&img);
}
