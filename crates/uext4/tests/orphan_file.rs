//! The orphan_file feature read-write: images made with `-O orphan_file`
//! (the upstream mke2fs default) are written, their orphans go through
//! the orphan file's slots (falling back to the `s_last_orphan` chain
//! when it is full), and orphans left by a crash of uext4 or by the
//! kernel are cleaned at the next read-write open. Every image ends in
//! `e2fsck -fn`.

mod rw_support;

use rw_support::{fsck_clean, have, inodes_and_names, open_recording, KernelMount};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use uext4::device::{BlockDevice, Event, RecordingDevice};
use uext4::format::features::ro_compat;
use uext4::format::orphan_file as of;
use uext4::inode_api::SetAttr;
use uext4::Filesystem;
use uext4::MountOptions;

/// A fresh `-O orphan_file` image (`args` added), or None with a SKIP.
fn orphan_image(size_mb: u64, args: &[&str]) -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    if !have("e2fsck") {
        eprintln!("SKIP: e2fsck not installed");
        return None;
    }
    let mut a = vec!["-O", "orphan_file"];
    a.extend_from_slice(args);
    rw_support::mkfs(size_mb, &a)
}

/// The inode numbers the orphan file's slots hold, and its slot count.
fn orphan_slots(fs: &Filesystem) -> (Vec<u32>, usize) {
    let ino = fs.superblock().orphan_file_inum;
    assert_ne!(ino, 0, "no orphan file");
    let bs = fs.block_size() as usize;
    let size = fs.stat(ino).unwrap().size as usize;
    let mut data = vec![0u8; size];
    assert_eq!(fs.inodes().read(ino, 0, &mut data).unwrap(), size);
    let mut used = Vec::new();
    for b in data.chunks(bs) {
        assert!(of::verify(b, 0, None).is_ok(), "orphan file block without its magic");
        used.extend(of::entries(b).map(|(_, i)| i));
    }
    (used, size / bs * of::slots_per_block(bs))
}

fn read_only(img: &[u8]) -> Filesystem {
    let dev = Arc::new(RecordingDevice::new(img.to_vec()));
    Filesystem::open_device(dev as Arc<dyn BlockDevice>, MountOptions::default()).unwrap()
}

/// After a clean unmount: no orphan anywhere, the flag cleared.
fn assert_no_orphans(fs: &Filesystem, what: &str) {
    let sb = fs.superblock();
    assert_eq!(sb.last_orphan, 0, "{what}: s_last_orphan left");
    assert!(!sb.features.has_ro_compat(ro_compat::ORPHAN_PRESENT), "{what}: orphan_present left set");
    assert!(orphan_slots(fs).0.is_empty(), "{what}: orphan file slots left");
}

/// uext4 writes a tree into an orphan_file image (files unlinked while
/// open and truncated on the way), unmounts: e2fsck is clean, the flag
/// is cleared, and the kernel reads the tree back.
#[test]
fn tree_written_into_an_orphan_file_image() {
    let Some((_d, img)) = orphan_image(32, &[]) else { return };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    assert!(
        fs.read_superblock().unwrap().features.has_ro_compat(ro_compat::ORPHAN_PRESENT),
        "a read-write open sets orphan_present, as the kernel's mount does"
    );
    let root = fs.root();
    let mut files = Vec::new();
    for d in 0..4 {
        let dino = fs.mkdir(root, format!("d{d}").as_bytes(), 0o755, 0, 0).unwrap().ino;
        for k in 0..12 {
            let name = format!("f{k}");
            let ino = fs.create(dino, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
            let data = rw_support::pattern(d * 100 + k, (k as usize * 7919) % 70000);
            fs.inodes().write(ino, 0, &data).unwrap();
            files.push((format!("d{d}/{name}"), data));
        }
    }
    // Unlinked while open: the orphan goes into a slot, the last close
    // frees it.
    let mut held = Vec::new();
    for k in 0..8 {
        let name = format!("gone{k}");
        let ino = fs.create(root, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.inodes().write(ino, 0, &[7u8; 9000]).unwrap();
        fs.open_inode(ino).unwrap();
        fs.unlink(root, name.as_bytes()).unwrap();
        held.push(ino);
    }
    fs.commit().unwrap();
    for &ino in &held[..4] {
        // The last close deletes it and frees its slot; the others are
        // deleted by the unmount.
        fs.close_inode(ino).unwrap();
    }
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    let fs = Filesystem::open(&img).unwrap();
    assert_no_orphans(&fs, "after unmount");
    drop(fs);
    let refs: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, d)| (n.as_str(), d.clone())).collect();
    rw_support::kernel_read_back(&img, &refs);
    fsck_clean(&img);
}

/// More files unlinked while open than the orphan file (4 blocks here)
/// has slots, then a
/// crash before their last close: the crashed image holds them in the
/// orphan file (full) and the chain (the rest); the next open deletes
/// them all, and crashes spread over that cleanup leave images the
/// following open finishes.
#[test]
fn open_unlinked_files_survive_a_crash_through_the_orphan_file() {
    let Some((_d, img0)) = orphan_image(24, &["-b", "1024", "-J", "size=1", "-N", "4096", "-E", "orphan_file_size=4"])
    else {
        return;
    };
    let base = std::fs::read(&img0).unwrap();
    let (dev, fs) = open_recording(&base);
    let before = inodes_and_names(&fs);
    let (_, capacity) = orphan_slots(&fs);
    assert!(capacity > 0);
    let n = capacity + 40;
    let root = fs.root();
    let mut inos = Vec::new();
    for k in 0..n {
        let name = format!("o{k}");
        let ino = fs.create(root, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        if k % 32 == 0 {
            fs.write_direct(ino, 0, &[k as u8; 3072]).unwrap();
        }
        fs.open_inode(ino).unwrap();
        fs.unlink(root, name.as_bytes()).unwrap();
        inos.push(ino);
    }
    fs.commit().unwrap();
    std::mem::forget(fs);
    let crashed = dev.crash_image(dev.events(), |_| true);
    {
        let ro = read_only(&crashed);
        let (used, _) = orphan_slots(&ro);
        assert_eq!(used.len(), capacity, "the orphan file fills first");
        assert_ne!(ro.superblock().last_orphan, 0, "the rest goes on the chain");
        let mut all = used.clone();
        let mut cur = ro.superblock().last_orphan;
        while cur != 0 {
            all.push(cur);
            cur = ro.inodes().inode(cur).unwrap().dtime;
        }
        all.sort_unstable();
        let mut want = inos.clone();
        want.sort_unstable();
        assert_eq!(all, want, "every open-unlinked inode is in the file or on the chain");
    }

    let dev2 = Arc::new(RecordingDevice::new(crashed));
    let opts = MountOptions { write: true, commit_interval: Duration::from_secs(3600), ..Default::default() };
    let mut fs = Filesystem::open_device(dev2.clone() as Arc<dyn BlockDevice>, opts).unwrap();
    assert_eq!(inodes_and_names(&fs), before, "orphans left after the cleanup: {:?}", fs.notices());
    let end = dev2.events();
    fs.unmount().unwrap();
    drop(fs);
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    let clean = dev2.crash_image(dev2.events(), |_| true);
    std::fs::write(&img, &clean).unwrap();
    fsck_clean(&img);
    assert_no_orphans(&read_only(&clean), "after the cleanup");

    for k in 0..=6 {
        let p = end * k / 6;
        for keep in [true, false] {
            let what = format!("orphan cleanup: crash at {p}/{end}");
            std::fs::write(&img, dev2.crash_image(p, |_| keep)).unwrap();
            let mut fs = Filesystem::open_rw(&img).unwrap_or_else(|e| panic!("{what}: open: {e}"));
            assert_eq!(inodes_and_names(&fs), before, "{what}: orphans left");
            fs.unmount().unwrap();
            drop(fs);
            fsck_clean(&img);
            assert_no_orphans(&Filesystem::open(&img).unwrap(), &what);
        }
    }
}

/// A file truncated in bounded steps (fragmented over many groups) is
/// an orphan in the orphan file while the steps run; every crash point
/// recovers to a clean image where it has its old or its new size.
#[test]
fn bounded_truncate_survives_crashes_through_the_orphan_file() {
    let Some((_d, img0)) = orphan_image(64, &["-b", "1024", "-g", "256", "-O", "^resize_inode", "-J", "size=1"]) else {
        return;
    };
    let base = std::fs::read(&img0).unwrap();
    let (dev, fs) = open_recording(&base);
    let len: u64 = 40 << 20;
    let ino = rw_support::fragmented_file(&fs, b"big", len);
    fs.commit().unwrap();
    let mark = dev.events();
    fs.setattr(ino, SetAttr { size: Some(3000), ..Default::default() }).unwrap();
    fs.commit().unwrap();
    let end = dev.events();
    let commits = dev.log()[mark..end].iter().filter(|e| matches!(e, Event::Flush)).count() / 2;
    assert!(commits >= 2, "the truncate fit in {commits} commit(s): nothing bounded to test");
    std::mem::forget(fs);
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    let mut in_file = 0;
    for k in 0..=10 {
        let p = mark + (end - mark) * k / 10;
        for keep in [true, false] {
            let what = format!("truncate: crash at {p} ({mark}..={end})");
            let bytes = dev.crash_image(p, |_| keep);
            {
                let ro = read_only(&bytes);
                assert_eq!(ro.superblock().last_orphan, 0, "{what}: the chain was used");
                if orphan_slots(&ro).0.contains(&ino) {
                    in_file += 1;
                }
            }
            std::fs::write(&img, &bytes).unwrap();
            let mut fs = Filesystem::open_rw(&img).unwrap_or_else(|e| panic!("{what}: open: {e}"));
            let size = fs.stat(fs.resolve("/big").unwrap()).unwrap().size;
            assert!(size == 3000 || size == len, "{what}: /big has size {size}");
            fs.unmount().unwrap();
            drop(fs);
            fsck_clean(&img);
            assert_no_orphans(&Filesystem::open(&img).unwrap(), &what);
        }
    }
    assert!(in_file > 0, "no crash point caught the truncate's orphan in the orphan file");
}

/// Orphans the kernel leaves: files held open and unlinked in a kernel
/// mount, then the filesystem shut down without cleanup (`xfs_io -x -c
/// "shutdown -f"`: the log is flushed, the orphan slots are committed)
/// and unmounted. uext4's read-write open replays the journal, deletes
/// the orphans from the kernel's orphan file, and e2fsck is clean.
#[test]
fn kernel_left_orphans_are_cleaned() {
    if let Some(why) = rw_support::kernel_unavailable() {
        eprintln!("SKIP: {why}");
        return;
    }
    if !have("xfs_io") {
        eprintln!("SKIP: xfs_io not installed (apt-get install xfsprogs)");
        return;
    }
    let Some((_d, img)) = orphan_image(32, &[]) else { return };
    let n = 6;
    {
        let m = KernelMount::new(&img, "").unwrap_or_else(|e| panic!("kernel mount: {e}"));
        {
            // Synced: the shutdown drops what was not.
            use std::io::Write;
            let mut f = std::fs::File::create(m.path().join("keep")).unwrap();
            f.write_all(b"kept").unwrap();
            f.sync_all().unwrap();
        }
        let mut held = Vec::new();
        for k in 0..n {
            let p = m.path().join(format!("held{k}"));
            std::fs::write(&p, rw_support::pattern(k, 20000)).unwrap();
            held.push(std::fs::File::open(&p).unwrap());
            std::fs::remove_file(&p).unwrap();
        }
        let out = Command::new("xfs_io").args(["-x", "-c", "shutdown -f"]).arg(m.path()).output().unwrap();
        assert!(out.status.success(), "xfs_io shutdown: {}", String::from_utf8_lossy(&out.stderr));
        drop(held);
        m.unmount();
    }
    let before = {
        let fs = Filesystem::open(&img).unwrap();
        let (used, _) = orphan_slots(&fs);
        assert!(used.len() >= n as usize, "the kernel left {} orphan slot(s), expected {n}", used.len());
        let pending = format!("orphan inodes pending ({} in the orphan file", used.len());
        assert!(fs.notices().iter().any(|s| s.contains(&pending)), "read-only notices: {:?}", fs.notices());
        used.len()
    };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    assert!(
        fs.notices().iter().any(|s| s.contains(&format!("{before} inode(s) deleted"))),
        "notices: {:?}",
        fs.notices()
    );
    let names: Vec<Vec<u8>> = fs.read_dir_all(fs.root()).unwrap().into_iter().map(|e| e.name).collect();
    assert!(names.iter().all(|n| !n.starts_with(b"held")), "unlinked files came back");
    assert!(names.iter().any(|n| n == b"keep"));
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    let fs = Filesystem::open(&img).unwrap();
    assert_no_orphans(&fs, "after the cleanup");
    drop(fs);
    rw_support::kernel_read_back(&img, &[("keep", b"kept".to_vec())]);
    fsck_clean(&img);
}

/// A file unlinked while open and then truncated in bounded steps (an
/// ftruncate on the open descriptor) stays an orphan until its last
/// close: a crash before it leaves it to the next open, which deletes
/// it. With and without the orphan file (the chain).
#[test]
fn truncate_of_an_unlinked_open_file_keeps_it_an_orphan() {
    for orphan_file in [true, false] {
        let args = ["-b", "1024", "-g", "256", "-O", "^resize_inode", "-J", "size=1"];
        let made = if orphan_file { orphan_image(48, &args) } else { rw_support::mkfs(48, &args) };
        let Some((_d, img0)) = made else { return };
        let base = std::fs::read(&img0).unwrap();
        let (dev, fs) = open_recording(&base);
        let before = inodes_and_names(&fs);
        let root = fs.root();
        let ino = fs.create(root, b"big", 0o644, 0, 0).unwrap().ino;
        let len: u64 = 24 << 20;
        fs.fallocate(ino, uext4::inode_api::FallocMode::Allocate, 0, len).unwrap();
        for k in 0..len / 65536 {
            fs.fallocate(ino, uext4::inode_api::FallocMode::PunchHole, k * 65536 + 1024, 1024).unwrap();
        }
        fs.open_inode(ino).unwrap();
        fs.unlink(root, b"big").unwrap();
        fs.setattr(ino, SetAttr { size: Some(3000), ..Default::default() }).unwrap();
        fs.commit().unwrap();
        std::mem::forget(fs);
        let crashed = dev.crash_image(dev.events(), |_| true);
        let what = if orphan_file { "orphan file" } else { "chain" };
        {
            let ro = read_only(&crashed);
            let listed =
                if orphan_file { orphan_slots(&ro).0.contains(&ino) } else { ro.superblock().last_orphan == ino };
            assert!(listed, "{what}: the unlinked open file is no longer an orphan after its truncate");
        }
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("img");
        std::fs::write(&img, &crashed).unwrap();
        let mut fs = Filesystem::open_rw(&img).unwrap();
        assert_eq!(inodes_and_names(&fs), before, "{what}: the orphan was not deleted");
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
    }
}

/// The `s_last_orphan` chain alone (no orphan file): its head is kept in
/// memory by the orphan state and patched into the superblock in place.
/// Orphans added and taken off at the head, in the middle and at the tail
/// leave, at every commit, exactly the open-unlinked inodes on the chain
/// on disk; a crash then finds them, the next open deletes them, and the
/// image is clean.
#[test]
fn chain_head_follows_adds_and_removes() {
    if !have("e2fsck") {
        eprintln!("SKIP: e2fsck not installed");
        return;
    }
    let Some((_d, img0)) = rw_support::mkfs(16, &["-b", "1024", "-O", "^orphan_file"]) else { return };
    let base = std::fs::read(&img0).unwrap();
    let (dev, fs) = open_recording(&base);
    let before = inodes_and_names(&fs);
    let root = fs.root();
    let on_disk_chain = |dev: &RecordingDevice| {
        let ro = read_only(&dev.crash_image(dev.events(), |_| true));
        let mut chain = Vec::new();
        let mut cur = ro.superblock().last_orphan;
        while cur != 0 && chain.len() < 100 {
            chain.push(cur);
            cur = ro.inodes().inode(cur).unwrap().dtime;
        }
        chain.sort_unstable();
        chain
    };
    let mut open = Vec::new();
    let orphan = |k: usize, open: &mut Vec<u32>| {
        let name = format!("c{k}");
        let ino = fs.create(root, name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.open_inode(ino).unwrap();
        fs.unlink(root, name.as_bytes()).unwrap();
        open.push(ino);
    };
    for k in 0..6 {
        orphan(k, &mut open);
    }
    // Chain (head first): o5 o4 o3 o2 o1 o0. Off: a middle one, the head,
    // the tail, then a new head in front of what is left.
    for (step, idx) in [2usize, 5, 0].into_iter().enumerate() {
        let ino = open[idx.min(open.len() - 1)];
        fs.close_inode(ino).unwrap();
        open.retain(|&i| i != ino);
        fs.commit().unwrap();
        let mut want = open.clone();
        want.sort_unstable();
        assert_eq!(on_disk_chain(&dev), want, "after close {step}");
    }
    orphan(6, &mut open);
    fs.commit().unwrap();
    let mut want = open.clone();
    want.sort_unstable();
    assert_eq!(on_disk_chain(&dev), want, "after a new orphan");
    std::mem::forget(fs);
    let crashed = dev.crash_image(dev.events(), |_| true);
    let dev2 = Arc::new(RecordingDevice::new(crashed));
    let opts = MountOptions { write: true, commit_interval: Duration::from_secs(3600), ..Default::default() };
    let mut fs = Filesystem::open_device(dev2.clone() as Arc<dyn BlockDevice>, opts).unwrap();
    assert_eq!(inodes_and_names(&fs), before, "orphans left after the cleanup");
    fs.unmount().unwrap();
    drop(fs);
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    std::fs::write(&img, dev2.crash_image(dev2.events(), |_| true)).unwrap();
    fsck_clean(&img);
    assert_eq!(Filesystem::open(&img).unwrap().superblock().last_orphan, 0);
}

/// Issue 25: a deletion frees its blocks and its inode in groups whose
/// descriptors share a descriptor block; that block is changed once per
/// deletion, not once for the block bitmap and again for the inode
/// bitmap (`AllocStats::desc_writes`): the unlink of a closed file, the
/// FORGET of an unlinked file the kernel still held, an rmdir. A file
/// whose blocks lie in several groups has each of the others' descriptor
/// changed on its own, and the image stays consistent.
#[test]
fn a_deletion_changes_its_descriptor_block_once() {
    // 4 groups of 32 MiB, their descriptors in one block.
    let Some((_d, img)) = orphan_image(128, &["-b", "4096", "-g", "8192"]) else { return };
    let dev = uext4::FileDevice::open(&img, true).unwrap();
    let mut fs = Filesystem::open_device(Arc::new(dev), MountOptions { write: true, ..Default::default() }).unwrap();
    let root = fs.root();
    for (k, len) in [(0u8, 8192usize), (1, 8192), (2, 48 << 20)] {
        let ino = fs.create(root, format!("f{k}").as_bytes(), 0o644, 0, 0).unwrap().ino;
        fs.inodes().write(ino, 0, &vec![k + 1; len]).unwrap();
    }
    fs.mkdir(root, b"d", 0o755, 0, 0).unwrap();
    // Written back: the files have blocks to free.
    fs.commit().unwrap();
    let descs = |fs: &Filesystem| fs.alloc_stats().unwrap().desc_writes;
    let ino0 = fs.lookup(root, b"f0").unwrap();
    assert!(fs.stat(ino0).unwrap().blocks > 0, "written back before the deletion");

    // Closed, no kernel reference: the unlink deletes it.
    let before = descs(&fs);
    fs.unlink(root, b"f0").unwrap();
    assert_eq!(descs(&fs) - before, 1, "unlink of a closed file");

    // Held by the kernel: the unlink orphans it, its FORGET deletes it.
    let ino1 = fs.lookup(root, b"f1").unwrap();
    fs.kernel_ref(ino1);
    fs.unlink(root, b"f1").unwrap();
    let before = descs(&fs);
    fs.kernel_forget(ino1, 1).unwrap();
    assert_eq!(descs(&fs) - before, 1, "FORGET of an unlinked file");

    let before = descs(&fs);
    fs.rmdir(root, b"d").unwrap();
    assert_eq!(descs(&fs) - before, 1, "rmdir (the directory's block and its inode)");

    // 48 MiB: blocks in two groups at least; one of them goes with the
    // inode's descriptor change, each other one is a change of its own.
    let before = descs(&fs);
    fs.unlink(root, b"f2").unwrap();
    let d = descs(&fs) - before;
    assert!((1..=4).contains(&d), "{d} descriptor changes for a file in at most 4 groups");
    fs.unmount().unwrap();
    fsck_clean(&img);
}
