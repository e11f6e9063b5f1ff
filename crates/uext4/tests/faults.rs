//! I/O-error semantics, driven through `FaultyDevice`: the error reaches
//! the caller that owns the data, nothing is reported durable that is
//! not, a journal abort refuses changes (EROFS) and fsyncs (EIO) before
//! any device I/O, and the image left behind is clean or recovered to
//! clean by uext4's next open (then `e2fsck -fn` clean). No panic, no
//! hang.
//!
//! `UEXT4_FAULT_POINTS` sets how many fault points the sweep tries
//! (default 40).

mod rw_support;

use rw_support::{fsck_clean, have, Rng};
use std::sync::Arc;
use std::time::Duration;
use uext4::device::{BlockDevice, FaultOps, FaultyDevice, MemoryDevice};
use uext4::inode_api::FallocMode;
use uext4::MountOptions;
use uext4::{Error, Filesystem};

/// A fresh image (MiB, mkfs args) in memory.
fn base(size_mb: u64, args: &[&str]) -> Option<Vec<u8>> {
    if !have("e2fsck") {
        eprintln!("SKIP: e2fsck not installed");
        return None;
    }
    let (_d, img) = rw_support::mkfs(size_mb, args)?;
    Some(std::fs::read(&img).unwrap())
}

struct Rig {
    mem: Arc<MemoryDevice>,
    dev: Arc<FaultyDevice>,
}

fn rig(image: &[u8]) -> Rig {
    let mem = Arc::new(MemoryDevice::from_bytes(image));
    let dev = Arc::new(FaultyDevice::new(mem.clone() as Arc<dyn BlockDevice>));
    Rig { mem, dev }
}

fn opts() -> MountOptions {
    // No background commits or writeback: the test decides every I/O.
    let mut o = MountOptions { write: true, commit_interval: Duration::from_secs(3600), ..Default::default() };
    o.data.writeback_interval = Duration::from_secs(3600);
    o
}

impl Rig {
    fn open(&self) -> uext4::Result<Filesystem> {
        Filesystem::open_device(self.dev.clone() as Arc<dyn BlockDevice>, opts())
    }

    /// What is on the "disk" now, recovered by uext4's own read-write
    /// open and unmounted, then checked by e2fsck. Returns the image path.
    fn recover_and_check(&self, dir: &std::path::Path, what: &str) -> std::path::PathBuf {
        let img = dir.join("img");
        std::fs::write(&img, self.mem.to_vec()).unwrap();
        let mut fs = Filesystem::open_rw(&img).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
        fs.unmount().unwrap_or_else(|e| panic!("{what}: unmount after reopen: {e}"));
        drop(fs);
        fsck_clean(&img);
        img
    }
}

fn is_eio(r: &uext4::Result<()>) -> bool {
    matches!(r, Err(e) if e.errno() == libc::EIO)
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    rw_support::pattern(seed, len)
}

/// Defect 2(a)(b): after the journal aborts, fsync of a file with nothing
/// pending is EIO and every change is EROFS, with no device I/O at all;
/// the abort is in the superblock's error fields.
#[test]
fn abort_refuses_changes_and_fsync_before_any_io() {
    let Some(image) = base(16, &[]) else { return };
    let r = rig(&image);
    let fs = r.open().unwrap();
    let root = fs.root();
    let a = fs.create(root, b"a", 0o644, 0, 0).unwrap().ino;
    let data = pattern(1, 64 << 10);
    fs.inodes().write(a, 0, &data).unwrap();
    fs.fsync(a).unwrap();
    // The commit of the next change fails at its first flush: abort.
    fs.create(root, b"b", 0o644, 0, 0).unwrap();
    r.dev.fail_nth(FaultOps::FLUSH, 1);
    let e = fs.commit().unwrap_err();
    assert_eq!(e.errno(), libc::EIO, "{e}");
    let calls = |d: &FaultyDevice| (d.calls(FaultOps::READ), d.calls(FaultOps::WRITE), d.calls(FaultOps::FLUSH));
    let before = calls(&r.dev);
    // a has nothing pending: it used to be a bare flush, and Ok.
    assert!(is_eio(&fs.fsync(a)), "fsync after abort must be EIO");
    assert!(is_eio(&fs.fsync(a)), "and stays EIO");
    let mut cursor = fs.wb_err_sample(a);
    assert!(is_eio(&fs.fsync_file(a, &mut cursor)));
    assert_eq!(fs.write_direct(a, 0, &data[..4096]).unwrap_err().errno(), libc::EROFS);
    assert_eq!(fs.inodes().write(a, 0, b"x").unwrap_err().errno(), libc::EROFS);
    assert_eq!(fs.create(root, b"c", 0o644, 0, 0).unwrap_err().errno(), libc::EROFS);
    assert_eq!(fs.unlink(root, b"a").unwrap_err().errno(), libc::EROFS);
    assert_eq!(calls(&r.dev).1, before.1, "no device write after the abort");
    assert_eq!(calls(&r.dev).2, before.2, "no device flush after the abort");
    assert!(fs.sync().is_err());
    drop(fs);
    let dir = tempfile::tempdir().unwrap();
    let img = r.recover_and_check(dir.path(), "abort");
    let fs = Filesystem::open(&img).unwrap();
    let sb = fs.read_superblock().unwrap();
    assert!(sb.error_count >= 1, "the abort is counted in s_error_count");
    let a = fs.resolve("/a").unwrap();
    assert_eq!(fs.read_all(a).unwrap(), data, "fsync'd data survives the abort");
    let out = std::process::Command::new("dumpe2fs").arg("-h").arg(&img).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("FS Error count"), "dumpe2fs shows the error:\n{text}");
    assert!(text.contains("jbd2_journal_abort"), "and where it happened:\n{text}");
}

/// Defect 2(c): a failed device flush is reported to every file whose
/// data it covered, once each, not only to the caller that issued it.
#[test]
fn failed_flush_reaches_every_file_in_its_window() {
    let Some(image) = base(16, &[]) else { return };
    let r = rig(&image);
    let fs = r.open().unwrap();
    let root = fs.root();
    let mk = |name: &[u8], seed| {
        let ino = fs.create(root, name, 0o644, 0, 0).unwrap().ino;
        fs.inodes().write(ino, 0, &pattern(seed, 32 << 10)).unwrap();
        ino
    };
    let (a, b, c) = (mk(b"a", 1), mk(b"b", 2), mk(b"c", 3));
    fs.commit().unwrap();
    let mut a_desc = fs.wb_err_sample(a);
    let mut a_desc2 = fs.wb_err_sample(a);
    // Overwrites in place: written back with no transaction.
    fs.inodes().write(a, 0, &pattern(4, 32 << 10)).unwrap();
    fs.inodes().write(b, 0, &pattern(5, 32 << 10)).unwrap();
    fs.writeback_inode(a).unwrap();
    fs.writeback_inode(b).unwrap();
    // Someone else's fsync issues the flush, and it fails.
    r.dev.fail_nth(FaultOps::FLUSH, 1);
    let rc = fs.fsync(c);
    assert!(rc.is_err(), "the caller of the failed flush gets it");
    // a and b's data was in the failed window.
    assert!(is_eio(&fs.fsync(b)), "fsync(b) must report the lost flush");
    assert!(fs.fsync(b).is_ok(), "once");
    assert!(is_eio(&fs.fsync_file(a, &mut a_desc)), "each open description sees it");
    assert!(is_eio(&fs.fsync_file(a, &mut a_desc2)), "each open description sees it");
    assert!(fs.fsync_file(a, &mut a_desc).is_ok(), "once per description");
    assert!(is_eio(&fs.fsync(a)), "plain fsync is one more description");
    let mut late = fs.wb_err_sample(a);
    assert!(fs.fsync_file(a, &mut late).is_ok(), "a description opened after it was seen does not");
    drop(fs);
    let dir = tempfile::tempdir().unwrap();
    r.recover_and_check(dir.path(), "flush window");
}

/// Defect 2(c): a writeback error met by someone else (sync, the
/// background thread) is reported to the file's fsync; the data stays
/// dirty and is written when the device works again.
#[test]
fn writeback_error_is_the_files() {
    let Some(image) = base(16, &[]) else { return };
    let r = rig(&image);
    let mut fs = r.open().unwrap();
    let root = fs.root();
    let a = fs.create(root, b"a", 0o644, 0, 0).unwrap().ino;
    let b = fs.create(root, b"b", 0o644, 0, 0).unwrap().ino;
    fs.inodes().write(a, 0, &pattern(1, 100 << 10)).unwrap();
    fs.commit().unwrap();
    let mut desc = fs.wb_err_sample(a);
    let new = pattern(2, 100 << 10);
    fs.inodes().write(a, 0, &new).unwrap();
    fs.inodes().write(b, 0, b"unrelated").unwrap();
    // Every data write fails (a bad disk area: the whole data region).
    let bs = u64::from(fs.block_size());
    let m = fs.extents(a).unwrap();
    let first = m
        .iter()
        .filter_map(|m| match m.kind {
            uext4::inode_api::MapKind::Mapped(p) => Some(p),
            _ => None,
        })
        .min()
        .unwrap();
    r.dev.fail_range(FaultOps::WRITE, first.byte_offset(bs), (first + 25).byte_offset(bs));
    assert!(fs.writeback_all().is_err());
    r.dev.heal();
    // The retry now works, but a's data met an error it has not heard of.
    assert!(is_eio(&fs.fsync_file(a, &mut desc)));
    assert!(fs.fsync_file(a, &mut desc).is_ok());
    assert!(is_eio(&fs.fsync(a)));
    assert!(fs.fsync(a).is_ok());
    assert!(fs.fsync(b).is_ok(), "b's writeback did not fail");
    fs.unmount().unwrap();
    drop(fs);
    let dir = tempfile::tempdir().unwrap();
    let img = r.recover_and_check(dir.path(), "writeback error");
    let fs = Filesystem::open(&img).unwrap();
    assert_eq!(fs.read_all(fs.resolve("/a").unwrap()).unwrap(), new, "kept dirty and written later");
}

/// One step of the sweep's workload; Ok(Some(..)) when it made data
/// durable (fsync returned Ok).
type Durable = Vec<(String, Vec<u8>)>;

fn workload(fs: &Filesystem, rng: &mut Rng, durable: &mut Durable) -> uext4::Result<()> {
    let root = fs.root();
    let d = match fs.lookup(root, b"d") {
        Ok(d) => d,
        Err(_) => fs.mkdir(root, b"d", 0o755, 0, 0)?.ino,
    };
    for i in 0..24 {
        let name = format!("f{i}");
        let path = format!("/d/{name}");
        let data = pattern(rng.next(), rng.below(40_000) as usize + 1);
        match rng.below(7) {
            0 | 1 => {
                // Buffered write (delayed allocation) + fsync.
                let ino = match fs.lookup(d, name.as_bytes()) {
                    Ok(i) => i,
                    Err(_) => fs.create(d, name.as_bytes(), 0o644, 0, 0)?.ino,
                };
                fs.setattr(ino, uext4::inode_api::SetAttr { size: Some(0), ..Default::default() })?;
                fs.inodes().write(ino, 0, &data)?;
                fs.fsync(ino)?;
                durable.retain(|(p, _)| *p != path);
                durable.push((path, data));
            }
            2 => {
                // Direct write (allocating, then an overwrite) + fsync.
                let ino = fs.create(d, format!("x{i}").as_bytes(), 0o644, 0, 0)?.ino;
                let len = data.len().div_ceil(4096) * 4096;
                let mut buf = data.clone();
                buf.resize(len, 0);
                fs.write_direct(ino, 0, &buf)?;
                fs.write_direct(ino, 0, &buf[..4096])?;
                fs.fsync(ino)?;
            }
            3 => {
                // Unwritten extents converted by a direct write.
                let ino = fs.create(d, format!("u{i}").as_bytes(), 0o644, 0, 0)?.ino;
                fs.fallocate(ino, FallocMode::Allocate, 0, 64 << 10)?;
                fs.write_direct(ino, 0, &vec![7u8; 16 << 10])?;
                fs.fsync(ino)?;
            }
            4 => {
                let _ = fs.unlink(d, name.as_bytes());
                durable.retain(|(p, _)| *p != path);
            }
            5 => fs.sync()?,
            _ => fs.commit()?,
        }
    }
    Ok(())
}

fn check_durable(fs: &Filesystem, durable: &Durable, what: &str) {
    for (p, data) in durable {
        let ino = fs.resolve(p).unwrap_or_else(|e| panic!("{what}: fsync'd {p} lost: {e}"));
        assert!(fs.read_all(ino).unwrap() == *data, "{what}: fsync'd {p} has wrong contents");
    }
}

/// Machinery: faults at many points of a workload that crosses buffered
/// writeback, direct overwrite, unwritten conversion, commit, checkpoint
/// and unmount; then recovery and orphan cleanup at the next open, also
/// under faults. Every error is typed, fsync'd data survives, and the
/// image recovers to fsck-clean.
#[test]
fn fault_sweep() {
    let Some(image) = base(16, &["-b", "1024", "-J", "size=1"]) else { return };
    let points: u64 = std::env::var("UEXT4_FAULT_POINTS").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let dir = tempfile::tempdir().unwrap();
    // How many calls a clean run makes, to spread the points over them.
    let total = {
        let r = rig(&image);
        let fs = r.open().unwrap();
        let mut durable = Vec::new();
        workload(&fs, &mut Rng(7), &mut durable).unwrap();
        drop(fs);
        r.dev.calls(FaultOps::WRITE) + r.dev.calls(FaultOps::FLUSH)
    };
    let mut prng = Rng(99);
    for k in 0..points {
        let r = rig(&image);
        let fs = r.open().unwrap();
        let n = 1 + prng.below(total);
        let kind = k % 4;
        match kind {
            0 => r.dev.fail_nth(FaultOps::WRITE_FLUSH, n),
            1 => r.dev.die_at(FaultOps::WRITE_FLUSH, n),
            2 => {
                r.dev.set_short_writes(128);
                r.dev.fail_nth(FaultOps::WRITE, n)
            }
            _ => r.dev.fail_random(FaultOps::ALL, k, 2_000),
        }
        let what = format!("point {k} (kind {kind}, call {n} of {total})");
        let mut durable = Vec::new();
        let res = workload(&fs, &mut Rng(7), &mut durable);
        if let Err(e) = &res {
            // Typed: never a bare EINVAL for a device failure.
            assert!(
                matches!(e, Error::Io(_) | Error::ReadOnly(_) | Error::NoSpace(_)),
                "{what}: unexpected error {e:?}"
            );
        }
        drop(fs);
        r.dev.heal();
        // Recovery and orphan cleanup meet a fault too, at times.
        if k % 5 == 2 {
            r.dev.fail_nth(FaultOps::WRITE, 1 + prng.below(20));
            let _ = r.open().map(drop);
            r.dev.heal();
        }
        let img = r.recover_and_check(dir.path(), &what);
        check_durable(&Filesystem::open(&img).unwrap(), &durable, &what);
    }
}

/// Recovery and orphan cleanup on a dead disk fail with EIO, and the image
/// is still recoverable once the disk works again.
#[test]
fn open_on_failing_disk_then_recover() {
    let Some(image) = base(16, &[]) else { return };
    let r = rig(&image);
    let fs = r.open().unwrap();
    let root = fs.root();
    let a = fs.create(root, b"a", 0o644, 0, 0).unwrap().ino;
    fs.inodes().write(a, 0, &pattern(3, 50_000)).unwrap();
    fs.open_inode(a).unwrap();
    fs.unlink(root, b"a").unwrap();
    fs.commit().unwrap();
    // Crash with an orphan and a live log.
    std::mem::forget(fs);
    for n in 1..6 {
        r.dev.die_at(FaultOps::WRITE_FLUSH, n);
        let e = r.open().expect_err("open on a dying disk");
        assert_eq!(e.errno(), libc::EIO, "{e}");
        r.dev.heal();
    }
    let dir = tempfile::tempdir().unwrap();
    r.recover_and_check(dir.path(), "dead disk at open");
}

/// Defect 4: unlink removes the entry, then freeing the inode's blocks
/// meets EIO reading its extent leaf. The half-done unlink must never
/// commit (it used to: the entry gone, the inode still linked and
/// allocated, "unattached inode" for e2fsck); the journal aborts and
/// recovery finds the file as it was.
#[test]
fn failed_unlink_never_commits_half() {
    let Some(image) = base(16, &[]) else { return };
    let r = rig(&image);
    let bs = {
        let mut fs = r.open().unwrap();
        let f = fs.create(fs.root(), b"f", 0o644, 0, 0).unwrap().ino;
        // Holes between the blocks: one extent each, more than the inode holds.
        for k in 0..12u64 {
            fs.write_direct(f, k * 8192, &pattern(k, 4096)).unwrap();
        }
        let bs = u64::from(fs.block_size());
        fs.unmount().unwrap();
        bs
    };
    // A fresh open: the extent leaf is not cached.
    let fs = r.open().unwrap();
    let f = fs.resolve("/f").unwrap();
    let i = fs.inode(f).unwrap();
    assert_eq!(u16::from_le_bytes([i.block[6], i.block[7]]), 1, "the file needs an extent leaf block");
    let leaf = u64::from(u32::from_le_bytes(i.block[16..20].try_into().unwrap()))
        | (u64::from(u16::from_le_bytes([i.block[20], i.block[21]])) << 32);
    r.dev.fail_range(FaultOps::READ, leaf * bs, (leaf + 1) * bs);
    let e = fs.unlink(fs.root(), b"f").unwrap_err();
    assert_eq!(e.errno(), libc::EIO, "{e}");
    r.dev.heal();
    // The device works again: still nothing of the half unlink commits.
    assert!(fs.commit().is_err(), "the journal aborted");
    assert_eq!(fs.create(fs.root(), b"g", 0o644, 0, 0).unwrap_err().errno(), libc::EROFS);
    drop(fs);
    let dir = tempfile::tempdir().unwrap();
    let img = r.recover_and_check(dir.path(), "half unlink");
    let fs = Filesystem::open(&img).unwrap();
    let f = fs.resolve("/f").expect("the unlink did not happen");
    assert_eq!(fs.read_all(f).unwrap()[8192..12288], pattern(1, 4096)[..]);
}

/// A checkpoint that cannot write home aborts the journal (the log is
/// then the only complete copy, so nothing may overwrite it); an unmount
/// whose flush fails reports it. Both leave an image that uext4's next
/// open recovers to clean, with every fsync'd file intact.
#[test]
fn checkpoint_and_unmount_failures() {
    let Some(image) = base(16, &[]) else { return };
    for case in ["checkpoint", "unmount"] {
        let r = rig(&image);
        let mut fs = r.open().unwrap();
        let root = fs.root();
        let data = pattern(9, 70_000);
        let a = fs.create(root, b"a", 0o644, 0, 0).unwrap().ino;
        fs.inodes().write(a, 0, &data).unwrap();
        fs.fsync(a).unwrap();
        fs.mkdir(root, b"d", 0o755, 0, 0).unwrap();
        fs.commit().unwrap();
        if case == "checkpoint" {
            // Nothing to commit: the first write is the checkpoint's.
            r.dev.fail_nth(FaultOps::WRITE, 1);
            assert!(is_eio(&fs.sync()), "{case}: sync reports the failed checkpoint");
            assert_eq!(fs.mkdir(root, b"e", 0o755, 0, 0).unwrap_err().errno(), libc::EROFS, "{case}");
            assert!(is_eio(&fs.fsync(a)), "{case}");
            assert!(fs.unmount().is_err(), "{case}: no clean unmount after an abort");
        } else {
            fs.create(root, b"late", 0o644, 0, 0).unwrap();
            r.dev.fail_nth(FaultOps::FLUSH, 1);
            assert!(fs.unmount().is_err(), "{case}: the failed flush is reported");
        }
        drop(fs);
        let dir = tempfile::tempdir().unwrap();
        let img = r.recover_and_check(dir.path(), case);
        let fs = Filesystem::open(&img).unwrap();
        assert_eq!(fs.read_all(fs.resolve("/a").unwrap()).unwrap(), data, "{case}");
        fs.resolve("/d").unwrap_or_else(|e| panic!("{case}: committed mkdir lost: {e}"));
    }
}

/// `Key: value` of a `dumpe2fs -h` line starting with `key`.
fn dumpe2fs_field(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')).map(|v| v.trim().to_string()))
}

/// Issue 23 item 6: the error codes written to the superblock are the
/// kernel's EXT4_ERR_* (a checksum failure is EFSBADCRC = 4, corruption
/// EFSCORRUPTED = 5, as dumpe2fs names them), and a bad inode checksum
/// met while looking a file up records that inode.
#[test]
fn recorded_error_codes_are_the_kernels() {
    if !have("dumpe2fs") || !have("debugfs") || !have("e2fsck") {
        eprintln!("SKIP: e2fsprogs not installed");
        return;
    }
    let Some((_d, img)) = rw_support::mkfs(16, &["-O", "metadata_csum"]) else { return };
    let ino = {
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let ino = fs.create(fs.root(), b"a", 0o644, 0, 0).unwrap().ino;
        fs.unmount().unwrap();
        ino
    };
    let out = std::process::Command::new("debugfs").args(["-w", "-R", "sif a checksum 0x1234"]).arg(&img).output();
    assert!(out.unwrap().status.success());
    let dir_block = uext4::Location::Block(77);
    let cases: [(Error, &str); 4] = [
        (Error::Io(std::io::Error::other("device gone")), "EIO"),
        (Error::NoSpace("x".into()), "ENOSPC"),
        (
            Error::corruption(uext4::Structure::DirEntry, dir_block, uext4::CorruptKind::Changed { what: "x" }),
            "EFSCORRUPTED",
        ),
        (Error::ReadOnly("x".into()), "EROFS"),
    ];
    // Met by the stat that follows a lookup (the FUSE LOOKUP reply needs
    // it): the error names the inode, whatever inode the caller passes.
    let fs = Filesystem::open_rw(&img).unwrap();
    let bad = fs.stat(ino).unwrap_err();
    assert!(matches!(bad, Error::Checksum { .. }), "{bad}");
    fs.record_error(&bad, 0, "ext4_lookup").unwrap();
    drop(fs);
    let dump = |img: &std::path::Path| {
        let out = std::process::Command::new("dumpe2fs").arg("-h").arg(img).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = dump(&img);
    assert_eq!(dumpe2fs_field(&text, "First error err").as_deref(), Some("EFSBADCRC"), "{text}");
    assert_eq!(dumpe2fs_field(&text, "First error inode #"), Some(ino.to_string()), "{text}");
    assert_eq!(dumpe2fs_field(&text, "First error function").as_deref(), Some("ext4_lookup"), "{text}");
    for (e, name) in cases {
        let fs = Filesystem::open_rw(&img).unwrap();
        fs.record_error(&e, 0, "test").unwrap();
        drop(fs);
        let text = dump(&img);
        assert_eq!(dumpe2fs_field(&text, "Last error err").as_deref(), Some(name), "{e}:\n{text}");
        // The first error stays as it was.
        assert_eq!(dumpe2fs_field(&text, "First error err").as_deref(), Some("EFSBADCRC"), "{text}");
    }
    // Only the damage debugfs made (and the error state) is wrong.
    let out = std::process::Command::new("e2fsck").arg("-fn").arg(&img).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("Inode {ino} passes checks, but checksum does not match inode")), "{text}");
    let problems: Vec<&str> = text.lines().filter(|l| l.ends_with("? no")).collect();
    assert_eq!(problems.len(), 1, "{text}");
}
