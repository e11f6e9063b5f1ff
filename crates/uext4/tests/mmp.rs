//! Multi-mount protection (`mkfs.ext4 -O mmp`): a read-write open claims
//! the MMP block and keeps updating it; a second opener (uext4 or the
//! kernel) sees it change and refuses; unmount marks it clean; a read-only
//! open never touches it.

mod rw_support;

use rw_support::{fsck_clean, mkfs, KernelMount};
use std::path::Path;
use std::time::{Duration, Instant};
use uext4::format::mmp::{Mmp, SEQ_CLEAN, SEQ_FSCK};
use uext4::{Error, Filesystem, MountOptions};

/// An MMP image whose owner updates the block every second.
fn mmp_image() -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    mkfs(32, &["-b", "4096", "-O", "mmp", "-E", "mmp_update_interval=1"])
}

/// Where the MMP block is and its checksum seed.
fn place(img: &Path) -> (u64, u64, Option<u32>) {
    let fs = Filesystem::open(img).unwrap();
    let sb = fs.superblock();
    assert!(sb.mmp_block != 0, "mkfs made no MMP block");
    (sb.mmp_block, u64::from(sb.block_size()), sb.has_metadata_csum().then(|| sb.csum_seed()))
}

fn raw_block(img: &Path) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let (blk, bs, _) = place(img);
    let mut b = vec![0u8; bs as usize];
    std::fs::File::open(img).unwrap().read_exact_at(&mut b, blk * bs).unwrap();
    b
}

/// The MMP block as on disk (its checksum verified).
fn read_mmp(img: &Path) -> Mmp {
    let (blk, _, seed) = place(img);
    Mmp::parse(&raw_block(img), blk, seed).unwrap()
}

fn write_seq(img: &Path, seq: u32) {
    use std::os::unix::fs::FileExt;
    let (blk, bs, seed) = place(img);
    let mut m = read_mmp(img);
    m.seq = seq;
    let mut b = vec![0u8; bs as usize];
    m.encode(&mut b, seed);
    std::fs::OpenOptions::new().write(true).open(img).unwrap().write_all_at(&b, blk * bs).unwrap();
}

fn open_rw(img: &Path, wait: Duration) -> uext4::Result<Filesystem> {
    Filesystem::open_with(img, MountOptions { write: true, mmp_wait: Some(wait), ..Default::default() })
}

/// Waits (bounded) until the MMP sequence differs from `seq`.
fn wait_for_update(img: &Path, seq: u32) -> u32 {
    let start = Instant::now();
    loop {
        let now = read_mmp(img).seq;
        if now != seq {
            return now;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the MMP block was not updated for 10 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn second_open_is_refused_while_the_first_has_it() {
    let Some((_d, img)) = mmp_image() else { return };
    assert_eq!(read_mmp(&img).seq, SEQ_CLEAN, "mkfs leaves the block clean");
    let mut fs = open_rw(&img, Duration::from_secs(3)).unwrap();
    fs.mkdir(2, b"d", 0o755, 0, 0).unwrap();
    let s1 = read_mmp(&img);
    assert!(s1.in_use(), "claimed: {:#x}", s1.seq);
    // The updater keeps changing it while open.
    let s2 = wait_for_update(&img, s1.seq);
    wait_for_update(&img, s2);
    // A second read-write open watches it change and refuses; the first
    // keeps working.
    let t = Instant::now();
    match open_rw(&img, Duration::from_millis(2500)) {
        Err(e @ Error::Busy(_)) => assert_eq!(e.errno(), libc::EBUSY),
        other => panic!("second read-write open: {other:?}"),
    }
    assert!(t.elapsed() >= Duration::from_millis(2500));
    fs.mkdir(2, b"e", 0o755, 0, 0).unwrap();
    fs.commit().unwrap();
    // Read-only opens are not refused.
    Filesystem::open(&img).unwrap().resolve("/d").unwrap();
    fs.unmount().unwrap();
    drop(fs);
    assert_eq!(read_mmp(&img).seq, SEQ_CLEAN, "unmount marks the block clean");
    fsck_clean(&img);
    // Clean: the next owner claims it at once.
    let t = Instant::now();
    let mut fs = Filesystem::open_rw(&img).unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
    fs.resolve("/e").unwrap();
    fs.unmount().unwrap();
    fsck_clean(&img);
}

#[test]
fn stale_and_fsck_sequences() {
    let Some((_d, img)) = mmp_image() else { return };
    // e2fsck running: refused without waiting.
    write_seq(&img, SEQ_FSCK);
    assert!(matches!(open_rw(&img, Duration::from_secs(60)), Err(Error::Busy(_))));
    // Left in use by a node that crashed: nothing changes during the wait,
    // so it is taken over (after the wait and a second one after the claim).
    write_seq(&img, 1234);
    let t = Instant::now();
    let mut fs = open_rw(&img, Duration::from_millis(500)).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(1000));
    assert_ne!(read_mmp(&img).seq, 1234);
    fs.mkdir(2, b"d", 0o755, 0, 0).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    assert_eq!(read_mmp(&img).seq, SEQ_CLEAN);
    fsck_clean(&img);
}

#[test]
fn read_only_open_does_not_touch_the_block() {
    let Some((_d, img)) = mmp_image() else { return };
    write_seq(&img, 777);
    let before = raw_block(&img);
    let t = Instant::now();
    let fs = Filesystem::open(&img).unwrap();
    fs.read_dir_all(2).unwrap();
    drop(fs);
    assert!(t.elapsed() < Duration::from_secs(2), "a read-only open does not wait");
    assert_eq!(raw_block(&img), before);
    write_seq(&img, SEQ_CLEAN);
    fsck_clean(&img);
}

#[test]
fn kernel_refuses_while_uext4_has_it() {
    let Some((_d, img)) = mmp_image() else { return };
    if !rw_support::require_loop_mount() {
        return;
    }
    let mut fs = open_rw(&img, Duration::from_secs(3)).unwrap();
    fs.mkdir(2, b"mine", 0o755, 0, 0).unwrap();
    fs.commit().unwrap();
    // The kernel watches the block for 2 * 5 + 1 s and sees it change.
    let err = match KernelMount::new(&img, "") {
        Ok(_mounted) => panic!("the kernel mounted an image uext4 has open read-write"),
        Err(e) => e,
    };
    // The refusal must be MMP's (mount(8) prints the kernel's EBUSY),
    // not a loop device that could not be set up.
    assert!(!err.contains("failed to setup loop device"), "loop device: {err}");
    fs.mkdir(2, b"after", 0o755, 0, 0).unwrap();
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    // Once uext4 is done, the kernel takes it at once (clean) and sees
    // both directories.
    let mnt =
        KernelMount::new(&img, "").unwrap_or_else(|e| panic!("kernel refused the image after a clean unmount: {e}"));
    assert!(mnt.path().join("mine").is_dir() && mnt.path().join("after").is_dir());
    mnt.unmount();
    assert_eq!(read_mmp(&img).seq, SEQ_CLEAN, "the kernel marks it clean at umount");
    fsck_clean(&img);
}
