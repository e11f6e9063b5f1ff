//! Concurrency of the namespace operations through the library API
//! (`Filesystem` is Send + Sync): lock-order inversions that deadlocked,
//! operations on inodes another thread deleted, the unlink/close race of
//! the orphan list, directory readers racing a directory change, and a
//! many-threaded stress test with model invariants. Every test ends with
//! `e2fsck -fn`. Deadlocks are caught by a watchdog (the test fails after
//! `WATCHDOG`); debug builds also check every lock acquisition against
//! the documented order (uext4::lock_order).
//!
//! Longer runs (defaults in brackets): UEXT4_NS_OPS [100000] and
//! UEXT4_NS_THREADS [16] for the stress test, UEXT4_NS_ROUNDS [3000;
//! 30000 for the ancestor cases] for the pairwise races,
//! UEXT4_NS_CLOSE_ROUNDS [50000] for the unlink/close race,
//! UEXT4_NS_CREATES [1200] for the directory-reader race.

mod rw_support;

use rw_support::{fsck_clean, mkfs, Rng};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use uext4::inode_api::RenameFlags;
use uext4::{Error, FileType, Filesystem};

/// A run that takes longer is taken for a deadlock.
const WATCHDOG: Duration = Duration::from_secs(60);

/// Runs `workers` on their own threads and waits for all of them, failing
/// the test (naming the stuck ones) if they are not done within the
/// watchdog's time: the deadlocked threads are left behind.
fn run_watched(what: &str, workers: Vec<Box<dyn FnOnce() + Send>>) {
    let (tx, rx) = mpsc::channel();
    let n = workers.len();
    let mut handles = Vec::new();
    for (k, w) in workers.into_iter().enumerate() {
        let tx = tx.clone();
        handles.push(std::thread::spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(w));
            let _ = tx.send((k, r.err().map(|e| panic_text(&*e))));
        }));
    }
    let deadline = std::time::Instant::now() + WATCHDOG;
    let mut done = vec![false; n];
    for _ in 0..n {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok((k, None)) => done[k] = true,
            Ok((k, Some(msg))) => panic!("{what}: worker {k} failed: {msg}"),
            Err(_) => {
                let stuck: Vec<usize> = (0..n).filter(|&k| !done[k]).collect();
                panic!("{what}: workers {stuck:?} still running after {WATCHDOG:?}: deadlock");
            }
        }
    }
    for h in handles {
        h.join().unwrap();
    }
}

fn panic_text(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

fn fresh(size_mb: u64, args: &[&str]) -> Option<(tempfile::TempDir, std::path::PathBuf, Arc<Filesystem>)> {
    let (dir, img) = mkfs(size_mb, args)?;
    let fs = Arc::new(Filesystem::open_rw(&img).unwrap());
    Some((dir, img, fs))
}

fn finish(fs: Arc<Filesystem>, img: &std::path::Path) {
    let mut fs = Arc::try_unwrap(fs).unwrap_or_else(|_| panic!("a worker still holds the filesystem"));
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(img);
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Issue 12 defect 5: a same-directory RENAME_EXCHANGE of two directories
/// locked them in call order (which alternates as the names swap) while a
/// rename of a file between the same two directories locked them in
/// number order: a deadlock within seconds.
#[test]
fn exchange_of_two_directories_races_a_rename_between_them() {
    let Some((_d, img, fs)) = fresh(64, &["-b", "4096"]) else { return };
    let root = fs.root();
    let a = fs.mkdir(root, b"A", 0o755, 0, 0).unwrap().ino;
    let b = fs.mkdir(root, b"B", 0o755, 0, 0).unwrap().ino;
    fs.create(a, b"x", 0o644, 0, 0).unwrap();
    let rounds = env_usize("UEXT4_NS_ROUNDS", 3000);
    let f1 = fs.clone();
    let f2 = fs.clone();
    run_watched(
        "exchange vs cross rename",
        vec![
            Box::new(move || {
                let ex = RenameFlags { exchange: true, ..Default::default() };
                for _ in 0..rounds {
                    f1.inodes().rename(root, b"A", root, b"B", ex).unwrap();
                }
            }),
            Box::new(move || {
                for _ in 0..rounds {
                    f2.inodes().rename(a, b"x", b, b"x", RenameFlags::default()).unwrap();
                    f2.inodes().rename(b, b"x", a, b"x", RenameFlags::default()).unwrap();
                }
            }),
        ],
    );
    finish(fs, &img);
}

/// Issue 12 defect 15: the inversions the VFS refuses before locking.
/// Each pair deadlocked in 3-5 of 3-5 runs: a rename whose destination is
/// a directory above the source's parent (ENOTEMPTY) against rmdir;
/// `link(P, P/C, name)` (EPERM) and `unlink(C, "..")` (EISDIR) against
/// rmdir of C; while a file moves between C and its subdirectory.
#[test]
fn refused_operations_take_no_locks_and_ancestor_cases_do_not_deadlock() {
    let Some((_d, img, fs)) = fresh(64, &["-b", "4096"]) else { return };
    let root = fs.root();
    let p = fs.mkdir(root, b"P", 0o755, 0, 0).unwrap().ino;
    let c = fs.mkdir(p, b"C", 0o755, 0, 0).unwrap().ino;
    let d = fs.mkdir(c, b"D", 0o755, 0, 0).unwrap().ino;
    fs.create(d, b"keep", 0o644, 0, 0).unwrap();
    fs.create(d, b"f", 0o644, 0, 0).unwrap();
    // The refusals themselves, with the errno the kernel gives.
    let e = fs.inodes().rename(d, b"keep", p, b"C", RenameFlags::default()).unwrap_err();
    assert!(matches!(e, Error::NotEmpty(_)), "{e}");
    let ex = RenameFlags { exchange: true, ..Default::default() };
    let e = fs.inodes().rename(d, b"keep", p, b"C", ex).unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    let e = fs.inodes().rename(p, b"C", d, b"C2", RenameFlags::default()).unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    let e = fs.link(p, c, b"l").unwrap_err();
    assert!(matches!(e, Error::NotPermitted(_)), "{e}");
    for n in [&b"."[..], b".."] {
        let e = fs.unlink(c, n).unwrap_err();
        assert!(matches!(e, Error::IsDir(_)), "{e}");
        let e = fs.link(d, c, n).unwrap_err();
        assert!(matches!(e, Error::Exists(_)), "{e}");
    }
    // Before the fix, 100,000 rounds deadlocked every time.
    let rounds = env_usize("UEXT4_NS_ROUNDS", 30_000);
    let (f1, f2, f3, f5) = (fs.clone(), fs.clone(), fs.clone(), fs.clone());
    run_watched(
        "ancestor cases vs rmdir",
        vec![
            Box::new(move || {
                for _ in 0..rounds {
                    let r = f1.inodes().rename(d, b"keep", p, b"C", RenameFlags::default());
                    assert!(matches!(r, Err(Error::NotEmpty(_))), "{r:?}");
                }
            }),
            Box::new(move || {
                for _ in 0..rounds {
                    assert!(matches!(f2.rmdir(c, b"D"), Err(Error::NotEmpty(_))));
                    assert!(matches!(f2.rmdir(p, b"C"), Err(Error::NotEmpty(_))));
                }
            }),
            Box::new(move || {
                for _ in 0..rounds {
                    assert!(matches!(f3.link(p, c, b"l"), Err(Error::NotPermitted(_))));
                    assert!(matches!(f3.unlink(c, b".."), Err(Error::IsDir(_))));
                }
            }),
            Box::new(move || {
                for _ in 0..rounds {
                    f5.inodes().rename(d, b"f", c, b"f", RenameFlags::default()).unwrap();
                    f5.inodes().rename(c, b"f", d, b"f", RenameFlags::default()).unwrap();
                }
            }),
        ],
    );
    finish(fs, &img);
}

/// Issue 12 defect 16: operations by inode number on an inode another
/// thread unlinked and freed succeeded (blocks allocated to a free inode:
/// "Block bitmap differences"); they answer ENOENT. An inode unlinked
/// while open is still usable until its last close.
#[test]
fn operations_on_a_deleted_inode_fail_with_enoent() {
    let Some((_d, img, fs)) = fresh(64, &["-b", "4096"]) else { return };
    let root = fs.root();
    let gone = fs.create(root, b"gone", 0o644, 0, 0).unwrap().ino;
    fs.inodes().write(gone, 0, b"some data").unwrap();
    let kept = fs.create(root, b"kept", 0o644, 0, 0).unwrap().ino;
    fs.open_inode(kept).unwrap();
    fs.unlink(root, b"gone").unwrap();
    fs.unlink(root, b"kept").unwrap();
    let enoent = |r: uext4::Result<()>, what: &str| match r {
        Err(Error::NotFound(_)) => {}
        other => panic!("{what} on a deleted inode: {other:?}"),
    };
    enoent(fs.set_xattr(gone, b"user.a", b"v", Default::default()), "setxattr");
    enoent(fs.remove_xattr(gone, b"user.a"), "removexattr");
    enoent(fs.inodes().write(gone, 0, &[7u8; 10_000]).map(drop), "write");
    enoent(fs.write_direct(gone, 0, &[7u8; 4096]).map(drop), "direct write");
    let size = uext4::inode_api::SetAttr { size: Some(1 << 20), ..Default::default() };
    enoent(fs.setattr(gone, size).map(drop), "setattr");
    let mode = uext4::inode_api::SetAttr { mode: Some(0o600), ..Default::default() };
    enoent(fs.setattr(gone, mode).map(drop), "chmod");
    enoent(fs.fallocate(gone, uext4::inode_api::FallocMode::Allocate, 0, 1 << 20), "fallocate");
    // Open: still a file until the last close.
    fs.inodes().write(kept, 0, &[1u8; 10_000]).unwrap();
    fs.set_xattr(kept, b"user.a", b"v", Default::default()).unwrap();
    fs.setattr(kept, mode).unwrap();
    fs.fsync(kept).unwrap();
    fs.close_inode(kept).unwrap();
    enoent(fs.setattr(kept, mode).map(drop), "setattr after the last close");
    finish(fs, &img);
}

/// Issue 12 defect 16: rename answered EINVAL "destination changed during
/// rename" when another thread created or removed the destination between
/// its lookup and its locks; it looks again under the locks instead.
#[test]
fn rename_redoes_its_lookups_when_the_destination_changes() {
    let Some((_d, img, fs)) = fresh(64, &["-b", "4096"]) else { return };
    let root = fs.root();
    let d = fs.mkdir(root, b"d", 0o755, 0, 0).unwrap().ino;
    fs.create(d, b"s", 0o644, 0, 0).unwrap();
    let rounds = env_usize("UEXT4_NS_ROUNDS", 3000);
    let stop = Arc::new(AtomicBool::new(false));
    let (f1, f2, s1, s2) = (fs.clone(), fs.clone(), stop.clone(), stop.clone());
    run_watched(
        "rename vs create/unlink of its destination",
        vec![
            Box::new(move || {
                for _ in 0..rounds {
                    for (a, b) in [(&b"s"[..], &b"t"[..]), (b"t", b"s")] {
                        match f1.inodes().rename(d, a, d, b, RenameFlags::default()) {
                            Ok(()) => {}
                            // The other thread unlinked our file (as "t").
                            Err(Error::NotFound(_)) => {
                                let _ = f1.create(d, b"s", 0o644, 0, 0);
                            }
                            Err(e) => panic!("rename {e}"),
                        }
                    }
                }
                s1.store(true, Ordering::Release);
            }),
            Box::new(move || {
                while !s2.load(Ordering::Acquire) {
                    match f2.create(d, b"t", 0o644, 0, 0) {
                        Ok(_) | Err(Error::Exists(_)) => {}
                        Err(e) => panic!("create {e}"),
                    }
                    match f2.unlink(d, b"t") {
                        Ok(()) | Err(Error::NotFound(_)) => {}
                        Err(e) => panic!("unlink {e}"),
                    }
                }
            }),
        ],
    );
    finish(fs, &img);
}

/// Unlink and rmdir check under the locks that the name still names the
/// inode they locked, and remove the entry that check found (issue 25:
/// one search of the directory, not two). Here the name is renamed over
/// (a different inode each time) as they run: each must remove the inode
/// it locked or look again, never the entry of another inode with the
/// link count of the one it locked (e2fsck would find the counts wrong).
#[test]
fn unlink_and_rmdir_of_a_name_renamed_over_meanwhile() {
    let Some((_d, img, fs)) = fresh(64, &["-b", "4096"]) else { return };
    let root = fs.root();
    let d = fs.mkdir(root, b"files", 0o755, 0, 0).unwrap().ino;
    let r = fs.mkdir(root, b"dirs", 0o755, 0, 0).unwrap().ino;
    let rounds = env_usize("UEXT4_NS_ROUNDS", 3000);
    let stop = Arc::new(AtomicUsize::new(0));
    let (f1, f2, f3, f4) = (fs.clone(), fs.clone(), fs.clone(), fs.clone());
    let (s1, s2, s3, s4) = (stop.clone(), stop.clone(), stop.clone(), stop.clone());
    run_watched(
        "unlink and rmdir vs rename over their names",
        vec![
            Box::new(move || {
                for _ in 0..rounds {
                    f1.create(d, b"n", 0o644, 0, 0).unwrap();
                    f1.inodes().rename(d, b"n", d, b"x", RenameFlags::default()).unwrap();
                }
                s1.fetch_add(1, Ordering::Release);
            }),
            Box::new(move || {
                while s2.load(Ordering::Acquire) < 2 {
                    match f2.unlink(d, b"x") {
                        Ok(()) | Err(Error::NotFound(_)) => {}
                        Err(e) => panic!("unlink {e}"),
                    }
                }
            }),
            Box::new(move || {
                for _ in 0..rounds {
                    f3.mkdir(r, b"n", 0o755, 0, 0).unwrap();
                    f3.inodes().rename(r, b"n", r, b"x", RenameFlags::default()).unwrap();
                }
                s3.fetch_add(1, Ordering::Release);
            }),
            Box::new(move || {
                while s4.load(Ordering::Acquire) < 2 {
                    match f4.rmdir(r, b"x") {
                        Ok(()) | Err(Error::NotFound(_)) => {}
                        Err(e) => panic!("rmdir {e}"),
                    }
                }
            }),
        ],
    );
    // What is left: at most the last "x" of each directory.
    for dir in [d, r] {
        let names: Vec<Vec<u8>> = fs.read_dir_all(dir).unwrap().into_iter().map(|e| e.name).collect();
        assert!(names.iter().all(|n| n == b"." || n == b".." || n == b"x"), "{names:?}");
    }
    finish(fs, &img);
}

/// Issue 12 defect 10: unlink checked "is it open" and marked the inode
/// doomed in two critical sections, and close decided without the inode
/// lock; a close between them deleted nothing and the inode stayed
/// allocated, on the orphan list, with no name and no opener. Many
/// unlink/close races of one open file each: every inode must be freed.
#[test]
fn unlink_racing_the_last_close_frees_the_inode() {
    let Some((_d, img, fs)) = fresh(64, &["-b", "4096"]) else { return };
    let root = fs.root();
    let dir = fs.mkdir(root, b"d", 0o755, 0, 0).unwrap().ino;
    fs.commit().unwrap();
    let free0 = fs.statfs().free_inodes;
    // The window is a few microseconds of each unlink: before the fix,
    // 50,000 rounds (about 2 s) leaked a few inodes.
    let rounds = env_usize("UEXT4_NS_CLOSE_ROUNDS", 50_000) as u64;
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let slot = Arc::new(AtomicU64::new(0));
    // How long the last unlink took (ns): the close lands at a random
    // point inside the next one.
    let took = Arc::new(AtomicU64::new(50_000));
    let (f1, f2, b1, b2, s1, s2) = (fs.clone(), fs.clone(), barrier.clone(), barrier, slot.clone(), slot);
    let (t1, t2) = (took.clone(), took);
    run_watched(
        "unlink vs close",
        vec![
            Box::new(move || {
                for k in 0..rounds {
                    let name = format!("f{k}");
                    let ino = f1.create(dir, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
                    f1.open_inode(ino).unwrap();
                    s1.store(u64::from(ino), Ordering::Release);
                    b1.wait();
                    let t0 = std::time::Instant::now();
                    f1.unlink(dir, name.as_bytes()).unwrap();
                    t1.store(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    b1.wait();
                }
            }),
            Box::new(move || {
                let mut rng = Rng(0x2345_6789_abcd_ef12);
                for _ in 0..rounds {
                    b2.wait();
                    let ino = s2.load(Ordering::Acquire) as u32;
                    // In the second half, where the unlink drops the last link.
                    let t = t2.load(Ordering::Relaxed);
                    let wait = Duration::from_nanos(t / 2 + rng.below(t * 3 / 4));
                    let t0 = std::time::Instant::now();
                    while t0.elapsed() < wait {
                        std::hint::spin_loop();
                    }
                    f2.close_inode(ino).unwrap();
                    b2.wait();
                }
            }),
        ],
    );
    fs.commit().unwrap();
    assert_eq!(fs.statfs().free_inodes, free0, "inodes unlinked and closed were not freed");
    assert_eq!(fs.read_dir_all(dir).unwrap().len(), 2);
    finish(fs, &img);
}

/// Issue 23 item 2: a kernel reference (the FUSE lookup count of a node)
/// keeps an unlinked inode as an open does: readable and writable by
/// number, on the orphan list, deleted by the last FORGET (or by the end
/// of the session), never handed out again once deleted.
#[test]
fn kernel_references_keep_an_unlinked_inode() {
    let Some((_d, img, fs)) = fresh(64, &["-b", "4096"]) else { return };
    let root = fs.root();
    fs.commit().unwrap();
    let (blocks0, inodes0) = (fs.statfs().free_blocks, fs.statfs().free_inodes);
    let ino = fs.create(root, b"held", 0o644, 0, 0).unwrap().ino;
    let data = vec![5u8; 200_000];
    fs.inodes().write(ino, 0, &data).unwrap();
    fs.fsync(ino).unwrap();
    fs.kernel_ref(ino);
    fs.kernel_ref(ino);
    fs.unlink(root, b"held").unwrap();
    fs.commit().unwrap();
    assert!(fs.statfs().free_blocks < blocks0, "freed while referenced");
    let mut buf = vec![0u8; data.len()];
    assert_eq!(fs.inodes().read(ino, 0, &mut buf).unwrap(), data.len());
    assert!(buf == data);
    fs.inodes().write(ino, data.len() as u64, b"more").unwrap();
    assert_eq!(fs.stat_kept(ino).unwrap().nlink, 0);
    fs.kernel_forget(ino, 1).unwrap();
    assert_eq!(fs.stat_kept(ino).unwrap().size, data.len() as u64 + 4, "one reference left");
    fs.kernel_forget(ino, 1).unwrap();
    assert!(matches!(fs.stat_kept(ino), Err(Error::NotFound(_))), "deleted by the last FORGET");
    assert!(matches!(fs.inodes().write(ino, 0, b"x"), Err(Error::NotFound(_))));
    // A lookup reference taken after the deletion does not revive it.
    fs.kernel_ref(ino);
    assert!(matches!(fs.stat_kept(ino), Err(Error::NotFound(_))));
    fs.kernel_forget(ino, 1).unwrap();
    fs.commit().unwrap();
    assert_eq!((fs.statfs().free_blocks, fs.statfs().free_inodes), (blocks0, inodes0));
    // Open and referenced: the later of the close and the FORGET deletes.
    let a = fs.create(root, b"a", 0o644, 0, 0).unwrap().ino;
    fs.kernel_ref(a);
    fs.open_inode(a).unwrap();
    fs.unlink(root, b"a").unwrap();
    fs.close_inode(a).unwrap();
    assert!(fs.stat_kept(a).is_ok(), "still referenced after the close");
    fs.kernel_forget(a, 1).unwrap();
    assert!(fs.stat_kept(a).is_err());
    // The end of the session deletes what only the kernel held.
    let b = fs.create(root, b"b", 0o644, 0, 0).unwrap().ino;
    fs.inodes().write(b, 0, &data).unwrap();
    fs.kernel_ref(b);
    fs.unlink(root, b"b").unwrap();
    fs.kernel_forget_all().unwrap();
    assert!(fs.stat_kept(b).is_err());
    fs.commit().unwrap();
    assert_eq!(fs.statfs().free_inodes, inodes0);
    finish(fs, &img);
}

/// A FORGET racing an unlink racing a new lookup (CONCURRENCY rule 1):
/// each inode is deleted exactly once, by whichever comes last, and a
/// lookup that counted its reference either sees the inode alive or is
/// refused; none is left allocated at the end.
#[test]
fn forget_racing_unlink_and_lookup_frees_each_inode_once() {
    let Some((_d, img, fs)) = fresh(64, &["-b", "4096"]) else { return };
    let root = fs.root();
    let dir = fs.mkdir(root, b"d", 0o755, 0, 0).unwrap().ino;
    fs.commit().unwrap();
    let free0 = fs.statfs().free_inodes;
    let rounds = env_usize("UEXT4_NS_CLOSE_ROUNDS", 50_000) as u64 / 10;
    let barrier = Arc::new(std::sync::Barrier::new(3));
    let slot = Arc::new(AtomicU64::new(0));
    let (f1, f2, f3) = (fs.clone(), fs.clone(), fs.clone());
    let (b1, b2, b3) = (barrier.clone(), barrier.clone(), barrier);
    let (s1, s2, s3) = (slot.clone(), slot.clone(), slot);
    run_watched(
        "forget vs unlink vs lookup",
        vec![
            Box::new(move || {
                for k in 0..rounds {
                    let name = format!("f{k}");
                    let ino = f1.create(dir, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
                    f1.inodes().write(ino, 0, b"data").unwrap();
                    f1.kernel_ref(ino);
                    s1.store(u64::from(ino), Ordering::Release);
                    b1.wait();
                    f1.unlink(dir, name.as_bytes()).unwrap();
                    b1.wait();
                }
            }),
            Box::new(move || {
                for _ in 0..rounds {
                    b2.wait();
                    let ino = s2.load(Ordering::Acquire) as u32;
                    f2.kernel_forget(ino, 1).unwrap();
                    b2.wait();
                }
            }),
            Box::new(move || {
                for _ in 0..rounds {
                    b3.wait();
                    let ino = s3.load(Ordering::Acquire) as u32;
                    // A lookup by number (a file handle): counted first,
                    // then checked; dropped again either way.
                    f3.kernel_ref(ino);
                    match f3.stat_kept(ino) {
                        Ok(st) => assert_eq!(st.size, 4, "a live inode with its data"),
                        Err(Error::NotFound(_)) => {}
                        Err(e) => panic!("lookup of inode {ino}: {e}"),
                    }
                    f3.kernel_forget(ino, 1).unwrap();
                    b3.wait();
                }
            }),
        ],
    );
    fs.commit().unwrap();
    assert_eq!(fs.statfs().free_inodes, free0, "inodes unlinked and forgotten were not freed");
    finish(fs, &img);
}

/// Issue 12 defect 14: a create that turns a directory into an htree (or
/// splits a leaf, or grows it) wrote the blocks before the directory's
/// inode, and lock-free readers in between read the new root as a linear
/// block ("missing checksum tail", EUCLEAN) or missed names that exist.
/// Long names on 1 KiB blocks make every few creates such a change, in
/// each directory of G's parent chain, while a file moves between two
/// subdirectories of G (whose ancestor walk reads that chain) and other
/// threads look up names that exist.
#[test]
fn directory_readers_never_see_a_half_done_change() {
    let Some((_d, img, fs)) = fresh(64, &["-b", "1024"]) else { return };
    let root = fs.root();
    let a = fs.mkdir(root, b"a", 0o755, 0, 0).unwrap().ino;
    let b = fs.mkdir(a, b"b", 0o755, 0, 0).unwrap().ino;
    let g = fs.mkdir(b, b"g", 0o755, 0, 0).unwrap().ino;
    let s1 = fs.mkdir(g, b"s1", 0o755, 0, 0).unwrap().ino;
    let s2 = fs.mkdir(g, b"s2", 0o755, 0, 0).unwrap().ino;
    fs.create(s1, b"f", 0o644, 0, 0).unwrap();
    let chain = [root, a, b, g];
    let creates = env_usize("UEXT4_NS_CREATES", 1200);
    let name = |k: usize| format!("{k:06}-{}", "n".repeat(200)).into_bytes();
    // Names created so far: k < made exist in chain[k % 4].
    let made = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let mut workers: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    {
        let (fs, made, done) = (fs.clone(), made.clone(), done.clone());
        workers.push(Box::new(move || {
            for k in 0..creates {
                fs.create(chain[k % chain.len()], &name(k), 0o644, 0, 0).unwrap();
                made.store(k + 1, Ordering::Release);
            }
            done.store(true, Ordering::Release);
        }));
    }
    {
        let (fs, done) = (fs.clone(), done.clone());
        workers.push(Box::new(move || {
            let mut moves = 0;
            while !done.load(Ordering::Acquire) || moves < 10 {
                fs.inodes()
                    .rename(s1, b"f", s2, b"f", RenameFlags::default())
                    .unwrap_or_else(|e| panic!("rename: {e}"));
                fs.inodes()
                    .rename(s2, b"f", s1, b"f", RenameFlags::default())
                    .unwrap_or_else(|e| panic!("rename: {e}"));
                moves += 1;
            }
        }));
    }
    for seed in 0..2 {
        let (fs, made, done) = (fs.clone(), made.clone(), done.clone());
        workers.push(Box::new(move || {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (seed + 10));
            while !done.load(Ordering::Acquire) {
                let n = made.load(Ordering::Acquire);
                if n == 0 {
                    continue;
                }
                let k = rng.below(n as u64) as usize;
                let dir = chain[k % chain.len()];
                match fs.lookup(dir, &name(k)) {
                    Ok(_) => {}
                    Err(e) => panic!("lookup of existing name {k} in inode {dir}: {e}"),
                }
                if k.is_multiple_of(16) {
                    let all = fs.read_dir_all(dir).unwrap_or_else(|e| panic!("readdir of inode {dir}: {e}"));
                    assert!(all.len() >= n / chain.len(), "readdir of inode {dir} lost names");
                }
            }
        }));
    }
    run_watched("directory change vs readers", workers);
    finish(fs, &img);
}

/// What one stress worker may meet: races with other workers, never
/// corruption, I/O errors, "changed during" answers or a refusal of a
/// valid request.
fn expected(e: &Error) -> bool {
    matches!(e, Error::NotFound(_) | Error::Exists(_) | Error::NotEmpty(_) | Error::NotDir(_) | Error::IsDir(_))
        || matches!(e, Error::Invalid(m) if m.contains("into itself"))
}

/// Issue 12 machinery: 8-32 threads (UEXT4_NS_THREADS, default 16) run
/// UEXT4_NS_OPS operations in all (default 100,000) of rename, exchange,
/// link, unlink, mkdir, rmdir and create over a few directories (which
/// move into each other), under a watchdog. Afterwards: every name listed
/// resolves to a live inode of the entry's type, link counts match the
/// names found (directories: 2 + subdirectories), the tree is connected,
/// and e2fsck is clean.
#[test]
fn namespace_stress() {
    let Some((_d, img, fs)) = fresh(256, &["-b", "4096", "-N", "65536"]) else { return };
    let root = fs.root();
    let threads = env_usize("UEXT4_NS_THREADS", 16).max(1);
    let ops = env_usize("UEXT4_NS_OPS", 100_000);
    let per = ops.div_ceil(threads);
    for k in 0..4 {
        fs.mkdir(root, format!("d{k}").as_bytes(), 0o755, 0, 0).unwrap();
    }
    let counts = Arc::new(Mutex::new(BTreeMap::<String, usize>::new()));
    let mut workers: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    for t in 0..threads {
        let (fs, counts) = (fs.clone(), counts.clone());
        workers.push(Box::new(move || {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (1000 + t as u64));
            let mut local = HashMap::<&'static str, usize>::new();
            for _ in 0..per {
                let (op, r) = stress_op(&fs, &mut rng);
                match r {
                    Ok(()) => *local.entry(op).or_default() += 1,
                    Err(e) if expected(&e) => *local.entry(refused(op)).or_default() += 1,
                    Err(e) => panic!("{op}: unexpected {e}"),
                }
            }
            let mut c = counts.lock().unwrap();
            for (k, v) in local {
                *c.entry(k.to_string()).or_default() += v;
            }
        }));
    }
    let t0 = std::time::Instant::now();
    run_watched("namespace stress", workers);
    eprintln!("{ops} operations on {threads} threads in {:?}: {:?}", t0.elapsed(), counts.lock().unwrap());
    check_tree(&fs);
    finish(fs, &img);
    let fs = Filesystem::open(&img).unwrap();
    check_tree(&fs);
}

use std::sync::Mutex;

/// A few directories by path; names drawn from a small set so that
/// operations collide.
fn stress_op(fs: &Filesystem, rng: &mut Rng) -> (&'static str, uext4::Result<()>) {
    let pick_dir = |rng: &mut Rng| -> uext4::Result<u32> {
        // Up to two levels: d0..d3, and subdirectories s0..s3 in them.
        let top = format!("/d{}", rng.below(4));
        if rng.below(3) != 0 {
            fs.resolve(&top)
        } else {
            fs.resolve(format!("{top}/s{}", rng.below(4)))
        }
    };
    let name = |rng: &mut Rng| -> Vec<u8> {
        if rng.below(3) == 0 {
            format!("s{}", rng.below(4)).into_bytes()
        } else {
            format!("f{}", rng.below(12)).into_bytes()
        }
    };
    // Most operations on a name the directory holds (else few succeed).
    let existing = |rng: &mut Rng, p: u32| -> uext4::Result<Vec<u8>> {
        let all = fs.read_dir_all(p)?;
        let live: Vec<_> = all.into_iter().filter(|e| e.name != b"." && e.name != b"..").collect();
        if live.is_empty() || rng.below(4) == 0 {
            return Ok(name(rng));
        }
        Ok(live[rng.below(live.len() as u64) as usize].name.clone())
    };
    let op = rng.below(100);
    let r = (|| {
        let p = pick_dir(rng)?;
        let n = if (20..80).contains(&op) { existing(rng, p)? } else { name(rng) };
        match op {
            0..=19 => {
                if n[0] == b's' {
                    fs.mkdir(p, &n, 0o755, 0, 0).map(drop)
                } else {
                    fs.create(p, &n, 0o644, 0, 0).map(drop)
                }
            }
            20..=44 => {
                let q = pick_dir(rng)?;
                let m = name(rng);
                let flags = match rng.below(6) {
                    0 => RenameFlags { exchange: true, ..Default::default() },
                    1 => RenameFlags { noreplace: true, ..Default::default() },
                    _ => RenameFlags::default(),
                };
                fs.inodes().rename(p, &n, q, &m, flags)
            }
            45..=54 => {
                let ino = fs.lookup(p, &n)?;
                let q = pick_dir(rng)?;
                let m = name(rng);
                match fs.link(ino, q, &m) {
                    // A directory: the VFS's refusal.
                    Err(Error::NotPermitted(_)) => Ok(()),
                    r => r.map(drop),
                }
            }
            55..=69 => fs.unlink(p, &n),
            70..=79 => fs.rmdir(p, &n),
            _ => {
                // Readers: a lookup and a listing whose names resolve.
                for e in fs.read_dir_all(p)? {
                    if e.name != b"." && e.name != b".." {
                        match fs.lookup(p, &e.name) {
                            Ok(_) | Err(Error::NotFound(_)) => {}
                            Err(e) => return Err(e),
                        }
                    }
                }
                Ok(())
            }
        }
    })();
    let kind = match op {
        0..=19 => "create",
        20..=44 => "rename",
        45..=54 => "link",
        55..=69 => "unlink",
        70..=79 => "rmdir",
        _ => "read",
    };
    (kind, r)
}

/// Walks the whole tree from the root: every entry resolves to a live
/// inode of its type, each directory is reached once with ".." pointing
/// at its parent, and link counts match the names found.
fn check_tree(fs: &Filesystem) {
    let mut names = HashMap::<u32, u32>::new();
    let mut stack = vec![(fs.root(), fs.root())];
    let mut dirs = 0;
    while let Some((d, parent)) = stack.pop() {
        dirs += 1;
        assert!(dirs < 1_000_000, "directory cycle");
        let mut subdirs = 0;
        for e in fs.read_dir_all(d).unwrap() {
            if e.name == b"." {
                assert_eq!(e.ino, d);
                continue;
            }
            if e.name == b".." {
                assert_eq!(e.ino, parent, "\"..\" of directory {d}");
                continue;
            }
            let st = fs.stat(e.ino).unwrap_or_else(|err| panic!("entry {:?} in {d}: {err}", lossy(&e.name)));
            assert_eq!(fs.lookup(d, &e.name).unwrap(), e.ino);
            assert!(st.nlink > 0, "entry {:?} names a deleted inode {}", lossy(&e.name), e.ino);
            if let Some(t) = e.file_type {
                assert_eq!(t, st.file_type, "type of {:?}", lossy(&e.name));
            }
            if st.file_type == FileType::Directory {
                subdirs += 1;
                stack.push((e.ino, d));
            } else {
                *names.entry(e.ino).or_default() += 1;
            }
        }
        assert_eq!(fs.stat(d).unwrap().nlink, 2 + subdirs, "link count of directory {d}");
    }
    for (ino, n) in names {
        assert_eq!(fs.stat(ino).unwrap().nlink, n, "link count of inode {ino}");
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The counter of an operation's expected refusals.
fn refused(op: &str) -> &'static str {
    match op {
        "create" => "create refused",
        "rename" => "rename refused",
        "link" => "link refused",
        "unlink" => "unlink refused",
        "rmdir" => "rmdir refused",
        _ => "read refused",
    }
}

/// Issue 25: creates and setattr answer the inode as they wrote it
/// instead of reading the record back; what they answer must be what a
/// stat reads afterwards, for every kind of new inode and change
/// (including a file whose data is still in the page cache: its size and
/// delayed blocks come from the data path).
#[test]
fn create_and_setattr_answer_what_stat_reads_back() {
    use uext4::inode_api::{Cred, SetAttr};
    use uext4::Timestamp;
    let Some((_d, img, fs)) = fresh(32, &["-b", "4096"]) else { return };
    let root = fs.root();
    let cred = Cred::user(1000, 1000, vec![]);
    let same = |st: uext4::Stat| assert_eq!(fs.stat(st.ino).unwrap(), st, "answer and stat differ");
    let d = fs.mkdir(root, b"d", 0o2775, 0, 100).unwrap();
    same(d.clone());
    same(fs.create_as(d.ino, b"f", 0o666, 0o022, &cred).unwrap());
    same(fs.mkdir(d.ino, b"sub", 0o755, 0, 0).unwrap());
    same(fs.mknod(d.ino, b"null", 0o020644, (1, 3), 0, 0).unwrap());
    same(fs.inodes().symlink(d.ino, b"short", b"f", 0, 0).unwrap());
    same(fs.inodes().symlink(d.ino, b"long", &[b'x'; 300], 0, 0).unwrap());
    let f = fs.lookup(d.ino, b"f").unwrap();
    fs.inodes().write(f, 0, &[7u8; 5000]).unwrap();
    let t = Timestamp { sec: 1_600_000_000, nsec: 5 };
    for change in [
        SetAttr { uid: Some(0), gid: Some(0), ..Default::default() },
        SetAttr { mode: Some(0o4755), ..Default::default() },
        SetAttr { atime: Some(t), mtime: Some(t), ..Default::default() },
        SetAttr { size: Some(9000), ..Default::default() },
        SetAttr { size: Some(100), ..Default::default() },
    ] {
        same(fs.setattr_as(f, change, &Cred::root()).unwrap());
    }
    finish(fs, &img);
}

/// Issue 25: threads creating the same name in one directory at once
/// make one file: every other create fails with EEXIST (the duplicate
/// check under the directory's lock).
#[test]
fn racing_creates_of_one_name_make_one_file() {
    let rounds = env_usize("UEXT4_NS_ROUNDS", 3000) / 15;
    let Some((_d, img, fs)) = fresh(32, &["-b", "4096"]) else { return };
    let dir = fs.mkdir(fs.root(), b"race", 0o755, 0, 0).unwrap().ino;
    for r in 0..rounds {
        let name = format!("n{}", r % 7);
        let made = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| match fs.create(dir, name.as_bytes(), 0o644, 0, 0) {
                    Ok(_) => {
                        made.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(Error::Exists(_)) => {}
                    Err(e) => panic!("create: {e}"),
                });
            }
        });
        assert_eq!(made.load(Ordering::Relaxed), 1, "round {r}: one create of {name} succeeds");
        fs.unlink(dir, name.as_bytes()).unwrap();
    }
    assert_eq!(fs.read_dir_all(dir).unwrap().len(), 2);
    finish(fs, &img);
}

/// Issue 25: the duplicate check of a create is also its search for room
/// (one walk of the leaf, under the directory's lock). Threads adding one
/// name at once by create, mkdir, symlink and link make one entry, the
/// others get EEXIST, in a linear directory, an indexed one (the leaf a
/// name hashes to, and slots freed by the unlinks between rounds) and a
/// casefolded indexed one, where the threads spell the name differently.
#[test]
fn racing_adds_of_one_name_in_linear_indexed_and_casefolded_directories() {
    let rounds = env_usize("UEXT4_NS_ROUNDS", 3000) / 30;
    let Some((_d, img, fs)) = fresh(64, &["-b", "1024", "-O", "casefold", "-N", "8192"]) else { return };
    let root = fs.root();
    let linear = fs.mkdir(root, b"linear", 0o755, 0, 0).unwrap().ino;
    let indexed = fs.mkdir(root, b"indexed", 0o755, 0, 0).unwrap().ino;
    let folded = fs.mkdir(root, b"folded", 0o755, 0, 0).unwrap().ino;
    fs.set_casefold(folded, true).unwrap();
    let target = fs.create(root, b"target", 0o644, 0, 0).unwrap().ino;
    for d in [indexed, folded] {
        for k in 0..400 {
            fs.create(d, format!("filler-{k:04}").as_bytes(), 0o644, 0, 0).unwrap();
        }
        assert_ne!(fs.inode(d).unwrap().flags & uext4::format::inode::FL_INDEX, 0, "an htree");
    }
    for r in 0..rounds {
        for (dir, cases) in [(linear, false), (indexed, false), (folded, true)] {
            let base = format!("Name-{}", r % 11);
            let made = AtomicUsize::new(0);
            std::thread::scope(|s| {
                for t in 0..4usize {
                    let name = if cases && t % 2 == 1 {
                        base.to_uppercase()
                    } else if cases {
                        base.to_lowercase()
                    } else {
                        base.clone()
                    };
                    let (fs, made) = (&fs, &made);
                    s.spawn(move || {
                        let name = name.as_bytes();
                        let r = match t {
                            0 => fs.create(dir, name, 0o644, 0, 0).map(drop),
                            1 => fs.mkdir(dir, name, 0o755, 0, 0).map(drop),
                            2 => fs.inodes().symlink(dir, name, b"target", 0, 0).map(drop),
                            _ => fs.link(target, dir, name).map(drop),
                        };
                        match r {
                            Ok(()) => {
                                made.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(Error::Exists(_)) => {}
                            Err(e) => panic!("add {}: {e}", lossy(name)),
                        }
                    });
                }
            });
            assert_eq!(made.load(Ordering::Relaxed), 1, "round {r}: one add of {base} succeeds");
            let ino = fs.lookup(dir, base.as_bytes()).unwrap();
            if fs.inode(ino).unwrap().file_type().unwrap() == FileType::Directory {
                fs.rmdir(dir, base.as_bytes()).unwrap();
            } else {
                fs.unlink(dir, base.as_bytes()).unwrap();
            }
        }
    }
    assert_eq!(fs.read_dir_all(linear).unwrap().len(), 2);
    assert_eq!(fs.read_dir_all(folded).unwrap().len(), 402);
    finish(fs, &img);
}

/// A lookup keeps where it found an entry for the unlink that follows
/// (rm -rf through FUSE: LOOKUP, then UNLINK); the answer serves only
/// while no change of the directory came in between. Each case below
/// makes it stale in another way, and the unlink must still remove the
/// entry the name has now (and free the right inode), in linear, indexed
/// and one-block directories; racing threads do the same.
#[test]
fn unlinks_after_lookups_remove_what_the_name_names_now() {
    let Some((_d, img, fs)) = fresh(64, &[]) else { return };
    let root = fs.root();
    for (k, n) in [1usize, 40, 3000].into_iter().enumerate() {
        let d = fs.mkdir(root, format!("d{k}").as_bytes(), 0o755, 0, 0).unwrap().ino;
        for i in 0..n {
            fs.create(d, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
        }
        // Fresh answer: used.
        let a = fs.lookup(d, b"f0").unwrap();
        fs.unlink(d, b"f0").unwrap();
        assert!(matches!(fs.lookup(d, b"f0"), Err(Error::NotFound(_))));
        assert!(fs.stat(a).map_or(true, |s| s.nlink == 0), "inode {a} unlinked");
        // A create in between: stale, searched again.
        let b = fs.create(d, b"g", 0o644, 0, 0).unwrap().ino;
        assert_eq!(fs.lookup(d, b"g").unwrap(), b);
        fs.create(d, b"h", 0o644, 0, 0).unwrap();
        fs.unlink(d, b"g").unwrap();
        assert!(fs.stat(b).map_or(true, |s| s.nlink == 0));
        // The name moved away and made again: the unlink removes the new one.
        let old = fs.lookup(d, b"h").unwrap();
        fs.inodes().rename(d, b"h", root, format!("kept{k}").as_bytes(), RenameFlags::default()).unwrap();
        let new = fs.create(d, b"h", 0o644, 0, 0).unwrap().ino;
        fs.unlink(d, b"h").unwrap();
        assert!(fs.stat(new).map_or(true, |s| s.nlink == 0));
        assert_eq!(fs.lookup(root, format!("kept{k}").as_bytes()).unwrap(), old);
        // A lookup of one name, an unlink of another: each its own.
        if n > 2 {
            let x = fs.lookup(d, b"f1").unwrap();
            fs.unlink(d, b"f2").unwrap();
            fs.unlink(d, b"f1").unwrap();
            assert!(fs.stat(x).map_or(true, |s| s.nlink == 0));
        }
    }
    // Threads looking up and removing names of one directory.
    let d = fs.mkdir(root, b"race", 0o755, 0, 0).unwrap().ino;
    let per = env_usize("UEXT4_NS_ROUNDS", 3000) / 10;
    for t in 0..4 {
        for i in 0..per {
            fs.create(d, format!("t{t}-{i}").as_bytes(), 0o644, 0, 0).unwrap();
        }
    }
    let workers: Vec<Box<dyn FnOnce() + Send>> = (0..4)
        .map(|t| {
            let fs = fs.clone();
            Box::new(move || {
                for i in 0..per {
                    let name = format!("t{t}-{i}");
                    let other = format!("t{}-{i}", (t + 1) % 4);
                    let _ = fs.lookup(d, other.as_bytes());
                    let ino = fs.lookup(d, name.as_bytes()).unwrap();
                    fs.unlink(d, name.as_bytes()).unwrap();
                    assert!(fs.stat(ino).map_or(true, |s| s.nlink == 0), "{name}: inode {ino} unlinked");
                }
            }) as Box<dyn FnOnce() + Send>
        })
        .collect();
    run_watched("lookups and unlinks", workers);
    assert_eq!(fs.inodes().readdir(d, 0, 100).unwrap().len(), 2, "only . and ..");
    finish(fs, &img);
}
