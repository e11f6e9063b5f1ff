//! Randomized operation sequences checked against an in-memory model.
//!
//! The model is a tree of inodes (directories, regular files with their
//! contents, symlinks), keyed by the inode numbers uext4 hands out, so
//! hard links share one inode and one content. A deterministic xorshift
//! generator picks each operation and its arguments: create, mkdir,
//! symlink, link, unlink, rmdir, write (small unaligned, appends, sparse
//! far offsets, block-aligned, large), truncate (setattr size, grow and
//! shrink), rename (plain, over an existing entry, NOREPLACE, EXCHANGE,
//! directories across parents, a directory into its own subtree),
//! fallocate (allocate, keep size, punch hole, zero range), reads of random
//! ranges, fsync, commit, and closing and reopening the filesystem.
//!
//! Every operation's result is compared with what the model predicts:
//! success, or the errno a Linux caller would see (when several errors
//! apply, any of them). ENOSPC is accepted from any operation that
//! allocates; the filesystem must then still equal the model as it was
//! before the operation (checked at once), except that a write may
//! return a short count instead (the model takes those bytes) and a
//! failed punch/zero range may have zeroed part of its range, as in
//! Linux. After ENOSPC the runner frees space for a few operations.
//! Every `CHECK_EVERY` operations, after each reopen (which runs
//! `e2fsck -fn` on the unmounted image) and at the end, the whole tree is
//! compared with the model: names, inode numbers, types, link counts,
//! sizes, contents, symlink targets, "." and "..". At the end the image
//! must be `e2fsck -fn` clean, a read-only open must see the same tree
//! and, as root with loop devices, so must the kernel.
//!
//! Images: 1k blocks with metadata_csum (32 MiB), 4k blocks without it
//! (64 MiB), 4k without a journal (24 MiB), and small images (16 MiB, 1k
//! and 4k, few inodes) where ENOSPC is frequent; ext3 (1k) and ext2
//! (4k, small) images, whose files are block-mapped (fallocate other than
//! punch hole answers EOPNOTSUPP there, as on Linux). A failure names its
//! configuration, seed and step and prints the last operations. The
//! regression tests at the end are minimal reproductions of the bugs the
//! random runs found.
//!
//! `UEXT4_RANDOM_SEED=<seed>` runs one seed alone (with every
//! configuration), `UEXT4_RANDOM_SEEDS=<n>` runs n seeds per configuration,
//! `UEXT4_RANDOM_OPS=<n>` sets the operations per seed, and
//! `UEXT4_RANDOM_FSCK=1` syncs and runs e2fsck after every operation.

mod random_support;
mod rw_support;

use random_support::{run_cfg, Cfg};
use rw_support::{fsck_clean, mkfs, open_rw_reserved};
use uext4::inode_api::{FallocMode, RenameFlags, SetAttr};
use uext4::{Error, Filesystem};

const CFG_1K: Cfg = Cfg { name: "1k-csum-32M", size_mb: 32, args: &["-b", "1024"], seeds: 0..8, small: false };
const CFG_4K: Cfg = Cfg {
    name: "4k-nocsum-64M",
    size_mb: 64,
    args: &["-b", "4096", "-O", "^metadata_csum"],
    seeds: 100..108,
    small: false,
};
const CFG_1K_SMALL: Cfg =
    Cfg { name: "1k-csum-16M", size_mb: 16, args: &["-b", "1024", "-N", "48"], seeds: 200..208, small: true };
const CFG_4K_NOJOURNAL: Cfg = Cfg {
    name: "4k-nojournal-24M",
    size_mb: 24,
    args: &["-b", "4096", "-O", "^has_journal"],
    seeds: 400..408,
    small: true,
};
const CFG_4K_SMALL: Cfg = Cfg {
    name: "4k-nocsum-16M",
    size_mb: 16,
    args: &["-b", "4096", "-O", "^metadata_csum", "-N", "64"],
    seeds: 300..308,
    small: true,
};

/// ext3 (journal, no extents): block-mapped files, 1 KiB blocks.
const CFG_EXT3: Cfg =
    Cfg { name: "ext3-1k-32M", size_mb: 32, args: &["-t", "ext3", "-b", "1024"], seeds: 500..503, small: false };
/// ext2 (no journal, no extents), small: ENOSPC with block maps.
const CFG_EXT2_SMALL: Cfg = Cfg {
    name: "ext2-4k-16M",
    size_mb: 16,
    args: &["-t", "ext2", "-b", "4096", "-N", "64"],
    seeds: 600..603,
    small: true,
};

#[test]
fn random_ops_1k_metadata_csum() {
    run_cfg(&CFG_1K);
}

#[test]
fn random_ops_4k_no_metadata_csum() {
    run_cfg(&CFG_4K);
}

#[test]
fn random_ops_small_1k_enospc() {
    run_cfg(&CFG_1K_SMALL);
}

#[test]
fn random_ops_small_4k_enospc() {
    run_cfg(&CFG_4K_SMALL);
}

#[test]
fn random_ops_4k_without_journal() {
    run_cfg(&CFG_4K_NOJOURNAL);
}

#[test]
fn random_ops_ext3_blockmapped() {
    run_cfg(&CFG_EXT3);
}

#[test]
fn random_ops_ext2_small_enospc() {
    run_cfg(&CFG_EXT2_SMALL);
}

// ---------------------------------------------------------------------------
// Regressions: minimal reproductions of bugs the random runs found
// ---------------------------------------------------------------------------

/// Appends non-zero data to `ino` until the filesystem is full (blocks
/// freed by a failed write come back at the next commit: fill again).
fn fill_up(fs: &Filesystem, ino: u32) {
    let mut off = fs.stat(ino).unwrap().size;
    for len in [64 << 10, 16 << 10, 4 << 10, 1 << 10] {
        let chunk = vec![0xA5u8; len];
        loop {
            match fs.inodes().write(ino, off, &chunk) {
                Ok(n) => off += n as u64,
                Err(e) if e.errno() == libc::ENOSPC => break,
                Err(e) => panic!("fill: {e}"),
            }
        }
        fs.commit().unwrap();
    }
}

/// Fills the filesystem with a file "hog" in `dir`, then gives back its
/// last `bytes` (blocks that held 0xA5 bytes) and commits, so that about
/// that much space is free.
fn fill_all_but(fs: &Filesystem, dir: u32, bytes: u64) {
    let hog = fs.create(dir, b"hog", 0o644, 0, 0).unwrap().ino;
    fill_up(fs, hog);
    let size = fs.stat(hog).unwrap().size;
    fs.setattr(hog, SetAttr { size: Some(size - bytes), ..Default::default() }).unwrap();
    fs.commit().unwrap();
}

/// renameat2(RENAME_NOREPLACE) onto an existing name is EEXIST even when
/// the name is the source itself or another link of the same inode
/// (Linux checks NOREPLACE before vfs_rename's "same inode" shortcut).
#[test]
fn rename_noreplace_onto_the_same_inode_is_eexist() {
    let Some((_d, img)) = mkfs(16, &["-b", "1024"]) else { return };
    let fs = Filesystem::open_rw(&img).unwrap();
    let root = fs.root();
    let a = fs.create(root, b"a", 0o644, 0, 0).unwrap().ino;
    fs.link(a, root, b"b").unwrap();
    let noreplace = RenameFlags { noreplace: true, exchange: false };
    assert_eq!(fs.inodes().rename(root, b"a", root, b"a", noreplace).unwrap_err().errno(), libc::EEXIST);
    assert_eq!(fs.inodes().rename(root, b"a", root, b"b", noreplace).unwrap_err().errno(), libc::EEXIST);
    // Without the flag (and with EXCHANGE) it is a successful no-op.
    fs.inodes().rename(root, b"a", root, b"b", RenameFlags::default()).unwrap();
    fs.inodes().rename(root, b"a", root, b"b", RenameFlags { noreplace: false, exchange: true }).unwrap();
    assert_eq!(fs.stat(a).unwrap().nlink, 2);
}

/// A write that runs out of space part-way must not leave blocks it
/// allocated (holding some earlier file's data) mapped as written: here
/// the hole under the partial last block before EOF kept stale data.
#[test]
fn failed_write_maps_no_stale_blocks() {
    let Some((_d, img)) = mkfs(8, &["-b", "1024", "-N", "64"]) else { return };
    let fs = Filesystem::open_rw(&img).unwrap();
    let root = fs.root();
    let f = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    // Size 1000, block 0 a hole.
    fs.setattr(f, SetAttr { size: Some(1000), ..Default::default() }).unwrap();
    // Give back ~40 blocks that hold 0xA5 bytes.
    fill_all_but(&fs, root, 40 << 10);
    // Extends the file from inside its (unallocated) last block; runs out
    // of space after the first allocation.
    let data = vec![0x5Au8; 400 << 10];
    let r = fs.inodes().write(f, 1000, &data);
    let n = match r {
        Ok(n) => n,
        Err(e) => {
            assert_eq!(e.errno(), libc::ENOSPC);
            0
        }
    };
    assert!(n < data.len(), "the write should not fit");
    let got = fs.read_all(f).unwrap();
    assert_eq!(got.len(), 1000 + n);
    assert!(got[..1000].iter().all(|&b| b == 0), "the hole before the write reads stale data");
    assert!(got[1000..].iter().all(|&b| b == 0x5A));
    let mut fs = fs;
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}

/// A write into a hole inside EOF that runs out of space part-way must
/// still write the inode (its extent root changed) and report a short
/// write for what landed: the filesystem stays e2fsck-clean and the bytes
/// the caller was told about are there.
#[test]
fn failed_write_inside_eof_stays_consistent() {
    let Some((_d, img)) = mkfs(8, &["-b", "1024", "-N", "64"]) else { return };
    let fs = Filesystem::open_rw(&img).unwrap();
    let root = fs.root();
    let f = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    // Data at the front, then a hole up to 16 MiB.
    fs.inodes().write(f, 0, &[7u8; 3000]).unwrap();
    fs.setattr(f, SetAttr { size: Some(16 << 20), ..Default::default() }).unwrap();
    fill_all_but(&fs, root, 100 << 10);
    // Overwrites the data and goes on into the hole.
    let data = vec![0x5Au8; 1 << 20];
    let n = match fs.inodes().write(f, 0, &data) {
        Ok(n) => n,
        Err(e) => {
            assert_eq!(e.errno(), libc::ENOSPC);
            0
        }
    };
    assert!(n < data.len(), "the write should not fit");
    let got = fs.read_all(f).unwrap();
    assert_eq!(got.len(), 16 << 20);
    assert!(got[..n].iter().all(|&b| b == 0x5A), "the {n} bytes reported written");
    // Past them: the old contents (when the write reported an error,
    // nothing may have changed).
    let mut want = vec![0u8; 16 << 20];
    want[..3000].fill(7);
    assert!(got[n..] == want[n..], "bytes past the {n} reported written changed");
    let mut fs = fs;
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}

/// fallocate that runs out of space part-way keeps what it allocated (as
/// Linux does) but must write the inode whose extent root it changed.
#[test]
fn failed_fallocate_stays_consistent() {
    for mode in [FallocMode::KeepSize, FallocMode::Allocate, FallocMode::ZeroRange] {
        let Some((_d, img)) = mkfs(8, &["-b", "1024", "-N", "64"]) else { return };
        let fs = Filesystem::open_rw(&img).unwrap();
        let root = fs.root();
        let f = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
        fs.inodes().write(f, 0, &[9u8; 5000]).unwrap();
        let e = fs.fallocate(f, mode, 0, 64 << 20).unwrap_err();
        assert_eq!(e.errno(), libc::ENOSPC, "{mode:?}");
        let got = fs.read_all(f).unwrap();
        if mode != FallocMode::ZeroRange {
            assert_eq!(got, vec![9u8; 5000], "{mode:?}");
        }
        let mut fs = fs;
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
    }
}

/// Punching a block out of the middle of an extent needs one more extent
/// entry; when the node is full and no block is left for the split, the
/// punch fails with ENOSPC and must leave the file and the bitmaps as they
/// were (it freed the punched block before the split failed).
#[test]
fn punch_needing_a_split_on_a_full_filesystem() {
    let Some((_d, img)) = mkfs(8, &["-b", "1024", "-N", "64"]) else { return };
    // Root's reserve too: the filesystem really fills up.
    let fs = open_rw_reserved(&img);
    let root = fs.root();
    let f = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    // Four extents: the root in the inode is full.
    let mut want = vec![0u8; 9 << 10];
    for (b, n) in [(0u64, 3u64), (4, 1), (6, 1), (8, 1)] {
        let d = vec![b as u8 + 1; (n << 10) as usize];
        fs.inodes().write(f, b << 10, &d).unwrap();
        want[(b << 10) as usize..((b + n) << 10) as usize].copy_from_slice(&d);
    }
    fs.fsync(f).unwrap(); // delayed allocation: the extents exist after writeback
    assert_eq!(fs.extents(f).unwrap().iter().filter(|m| m.kind != uext4::inode_api::MapKind::Hole).count(), 4);
    let hog = fs.create(root, b"hog", 0o644, 0, 0).unwrap().ino;
    fill_up(&fs, hog);
    fs.commit().unwrap();
    assert_eq!(fs.statfs().free_blocks, 0, "the filesystem is full");
    let e = fs.fallocate(f, FallocMode::PunchHole, 1 << 10, 1 << 10).unwrap_err();
    assert_eq!(e.errno(), libc::ENOSPC);
    assert_eq!(fs.read_all(f).unwrap(), want);
    let mut fs = fs;
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    assert_eq!(Filesystem::open(&img).unwrap().read_all(f).unwrap(), want);
}

/// Without `use_reserved`, allocation stops at the blocks reserved for
/// root (`s_r_blocks_count`), also for a request of many blocks.
#[test]
fn root_reserve_is_honoured_by_large_requests() {
    let Some((_d, img)) = mkfs(8, &["-b", "1024", "-N", "64"]) else { return };
    let fs = Filesystem::open_rw(&img).unwrap();
    let reserved = fs.superblock().r_blocks_count;
    assert!(reserved > 100);
    let root = fs.root();
    let f = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    // One request far larger than the free space.
    let r = fs.inodes().write(f, 0, &vec![1u8; 16 << 20]);
    assert!(matches!(&r, Ok(n) if *n < 16 << 20) || r.as_ref().is_err_and(|e| e.errno() == libc::ENOSPC), "{r:?}");
    let free = fs.statfs().free_blocks;
    assert!(free >= reserved, "write: {free} blocks free, {reserved} reserved for root");
    let g = fs.create(root, b"g", 0o644, 0, 0).unwrap().ino;
    let r = fs.fallocate(g, FallocMode::KeepSize, 0, 16 << 20);
    assert_eq!(r.unwrap_err().errno(), libc::ENOSPC);
    let free = fs.statfs().free_blocks;
    assert!(free >= reserved, "fallocate: {free} blocks free, {reserved} reserved for root");
    // A caller with CAP_SYS_RESOURCE (sys_resource) may use the reserve:
    // buffered data reserved into it is allocated by writeback, which
    // does not check the reserve again.
    let h = fs.create(root, b"h", 0o644, 0, 0).unwrap().ino;
    let data = vec![3u8; 64 << 10];
    assert_eq!(uext4::FsCore::write(&fs, h, 0, &data).unwrap_err().errno(), libc::ENOSPC);
    {
        let _cap = uext4::inode_api::sys_resource(true);
        assert_eq!(uext4::FsCore::write(&fs, h, 0, &data).unwrap(), data.len());
        fs.fallocate(g, FallocMode::KeepSize, 0, 32 << 10).unwrap();
    }
    fs.fsync(h).unwrap();
    assert_eq!(fs.read_all(h).unwrap(), data);
    let mut fs = fs;
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}

/// Blocks freed by an uncommitted transaction are not reusable until it
/// commits; Linux then commits and retries (ext4_should_retry_alloc)
/// instead of failing with ENOSPC while `df` shows the space free.
#[test]
fn space_freed_by_unlink_is_usable_at_once() {
    let Some((_d, img)) = mkfs(8, &["-b", "1024", "-N", "64"]) else { return };
    let fs = Filesystem::open_rw(&img).unwrap();
    let root = fs.root();
    let hog = fs.create(root, b"hog", 0o644, 0, 0).unwrap().ino;
    fill_up(&fs, hog);
    fs.unlink(root, b"hog").unwrap();
    let f = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    let r = fs.inodes().write(f, 0, &vec![3u8; 1 << 20]);
    assert_eq!(r.map_err(|e| e.to_string()), Ok(1 << 20), "{} blocks free", fs.statfs().free_blocks);
}

/// Namespace operations that run out of blocks (a new directory's first
/// block, a slow symlink's block, a directory that must grow for a new
/// entry) fail with ENOSPC and leave nothing behind: no inode allocated
/// without a name, no link count raised without an entry.
#[test]
fn enospc_in_namespace_operations_leaves_no_trace() {
    let Some((_d, img)) = mkfs(8, &["-b", "1024", "-N", "512"]) else { return };
    let fs = Filesystem::open_rw(&img).unwrap();
    let root = fs.root();
    let d = fs.mkdir(root, b"d", 0o755, 0, 0).unwrap().ino;
    let f = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    let hog = fs.create(root, b"hog", 0o644, 0, 0).unwrap().ino;
    fill_up(&fs, hog);
    let errno = |r: Result<uext4::Stat, Error>| r.map(|_| ()).unwrap_err().errno();
    assert_eq!(errno(fs.mkdir(root, b"x", 0o755, 0, 0)), libc::ENOSPC, "mkdir");
    assert_eq!(errno(fs.inodes().symlink(root, b"s", &[b'x'; 300], 0, 0)), libc::ENOSPC, "slow symlink");
    // Empty files and fast symlinks need no block until `d` is full.
    let long = |n: usize| format!("{n:0>200}").into_bytes();
    let mut n = 0;
    let e = loop {
        match fs.create(d, &long(n), 0o644, 0, 0) {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(e.errno(), libc::ENOSPC, "create in a full directory: {e}");
    assert_eq!(errno(fs.inodes().symlink(d, &long(n), b"t", 0, 0)), libc::ENOSPC, "fast symlink in a full directory");
    assert_eq!(errno(fs.mknod(d, &long(n), 0o010644, (0, 0), 0, 0)), libc::ENOSPC, "mknod in a full directory");
    assert_eq!(errno(fs.link(f, d, &long(n))), libc::ENOSPC, "link into a full directory");
    assert_eq!(fs.stat(f).unwrap().nlink, 1);
    let e = fs.inodes().rename(root, b"f", d, &long(n), RenameFlags::default()).unwrap_err();
    assert_eq!(e.errno(), libc::ENOSPC, "rename into a full directory");
    assert_eq!(fs.lookup(root, b"f").unwrap(), f);
    let mut fs = fs;
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}

/// A write that runs out of space after some of its data landed reports
/// a short count (POSIX), not an error: the file then holds exactly the
/// bytes reported (here the buffered path splits the write into 1 MiB
/// pieces; the first ones land, a later one fails).
#[test]
fn write_running_out_of_space_is_short() {
    let Some((_d, img)) = mkfs(8, &["-b", "1024", "-N", "64"]) else { return };
    let fs = Filesystem::open_rw(&img).unwrap();
    let root = fs.root();
    fill_all_but(&fs, root, 1536 << 10);
    let f = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    let data: Vec<u8> = (0..3u32 << 20).map(|k| (k % 251) as u8 + 1).collect();
    let n = fs.inodes().write(f, 0, &data).unwrap_or_else(|e| panic!("{e}; size now {}", fs.stat(f).unwrap().size));
    assert!(n > 0 && n < data.len(), "{n}");
    assert_eq!(fs.read_all(f).unwrap(), data[..n]);
    let mut fs = fs;
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}
