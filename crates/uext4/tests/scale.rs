//! Scale: the work of an allocation must not grow with the number of
//! groups (issue 24). The same creates, mkdirs (top-level ones go through
//! Orlov) and block allocations run through the library on a small image
//! (256 groups) and on a sparse one with 102,399 groups; the allocators'
//! work counters (groups and flex groups examined per inode, group steps
//! per block request) must stay within a constant of the small image's.
//! No timing: the counters are the measure.

mod rw_support;

use rw_support::{fsck_clean, have};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use uext4::alloc::inodes::InodeAllocStats;
use uext4::alloc::AllocStats;

/// 1 KiB blocks, 256 blocks (256 KiB) per group, 16 inodes per group:
/// many groups from a small sparse file (25 GiB gives 102,399 groups, made
/// in about 3 s: sparse_super2 and lazy init keep mkfs from writing much).
fn image(dir: &Path, name: &str, size: u64) -> PathBuf {
    let img = dir.join(name);
    std::fs::File::create(&img).unwrap().set_len(size).unwrap();
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "1024", "-g", "256", "-i", "16384", "-O", "sparse_super2"])
        .args(["-E", "lazy_itable_init=1,lazy_journal_init=1"])
        .arg(&img)
        .output()
        .unwrap();
    assert!(out.status.success(), "mkfs.ext4: {}", String::from_utf8_lossy(&out.stderr));
    img
}

/// `UEXT4_TEST_TMPDIR`, else /dev/shm if writable, else the temporary
/// directory.
fn scratch_base() -> PathBuf {
    if let Some(d) = std::env::var_os("UEXT4_TEST_TMPDIR") {
        return PathBuf::from(d);
    }
    let shm = Path::new("/dev/shm");
    if tempfile::tempdir_in(shm).is_ok() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Work counters of one phase: (inodes allocated, groups examined for
/// them, block requests, group steps taken for them).
#[derive(Debug, Clone, Copy, Default)]
struct Work {
    inodes: u64,
    inode_steps: u64,
    requests: u64,
    block_steps: u64,
    /// Groups loaded (buddies built) meanwhile.
    loads: u64,
}

impl Work {
    fn between(i0: InodeAllocStats, i1: InodeAllocStats, b0: &AllocStats, b1: &AllocStats) -> Work {
        Work {
            inodes: i1.allocations - i0.allocations,
            inode_steps: i1.groups_examined - i0.groups_examined,
            requests: b1.requests - b0.requests,
            block_steps: b1.group_steps - b0.group_steps,
            loads: b1.buddy_generations - b0.buddy_generations,
        }
    }

    fn per_inode(&self) -> f64 {
        self.inode_steps as f64 / self.inodes.max(1) as f64
    }

    fn per_request(&self) -> f64 {
        self.block_steps as f64 / self.requests.max(1) as f64
    }

    fn loads_per_request(&self) -> f64 {
        self.loads as f64 / self.requests.max(1) as f64
    }
}

const PHASES: [&str; 4] = [
    "first files in the root",
    "more files in the root",
    "top-level directories (Orlov)",
    "subdirectories and written files",
];

/// Runs the phases on `img`, calling `check(phase, work)` after each (so
/// that a regression fails at its first phase, not after minutes), and
/// returns the flex group of every top-level directory.
fn workload(img: &Path, mut check: impl FnMut(usize, Work)) -> Vec<u32> {
    let dev = uext4::FileDevice::open(img, true).unwrap();
    let opts = uext4::MountOptions { write: true, ..Default::default() };
    let mut fs = uext4::Filesystem::open_device(Arc::new(dev), opts).unwrap();
    let root = fs.root();
    let sb = fs.volume().sb.clone();
    let flex_of = |ino: u32| ((ino - 1) / sb.inodes_per_group) >> sb.log_groups_per_flex;
    let snap = |fs: &uext4::Filesystem| (fs.inode_alloc_stats().unwrap(), fs.alloc_stats().unwrap());
    let mut tops = Vec::new();
    for phase in 0..PHASES.len() {
        let (i0, b0) = snap(&fs);
        match phase {
            0 | 1 => {
                // 16 inodes per group: the root's group fills (phase 0,
                // short so that a regression fails fast), then its flex
                // group, then the hash probe places the rest.
                let range = if phase == 0 { 0..8 } else { 8..300 };
                for i in range {
                    fs.create(root, format!("f{i}").as_bytes(), 0o644, 0, 0).unwrap();
                }
            }
            2 => {
                for d in 0..16 {
                    let top = fs.mkdir(root, format!("d{d}").as_bytes(), 0o755, 0, 0).unwrap().ino;
                    tops.push(top);
                }
            }
            _ => {
                for (d, &top) in tops.iter().enumerate() {
                    for s in 0..3 {
                        let sub = fs.mkdir(top, format!("s{s}").as_bytes(), 0o755, 0, 0).unwrap().ino;
                        for f in 0..6 {
                            let ino = fs.create(sub, format!("g{f}").as_bytes(), 0o644, 0, 0).unwrap().ino;
                            let core: &uext4::fs::FsCore = &fs;
                            core.write(ino, 0, &[d as u8; 4096]).unwrap();
                        }
                    }
                }
                // Writeback allocates the data blocks.
                fs.sync().unwrap();
            }
        }
        let (i1, b1) = snap(&fs);
        check(phase, Work::between(i0, i1, &b0, &b1));
    }
    fs.unmount().unwrap();
    tops.iter().map(|&t| flex_of(t)).collect()
}

#[test]
fn allocation_work_does_not_grow_with_groups() {
    if !have("mkfs.ext4") || !have("e2fsck") {
        eprintln!("SKIP: e2fsprogs not installed");
        return;
    }
    // In RAM when possible: the big image's 76 MiB of metadata written
    // to a slow disk made deleting it take most of a minute.
    let dir = tempfile::tempdir_in(scratch_base()).unwrap();
    let small = image(dir.path(), "small", 64 << 20);
    let big = image(dir.path(), "big", 25 << 30);
    let groups = |img: &Path| {
        let dev = uext4::FileDevice::open(img, false).unwrap();
        let fs = uext4::Filesystem::open_device(Arc::new(dev), uext4::MountOptions::default()).unwrap();
        fs.volume().groups.len()
    };
    assert_eq!(groups(&small), 256);
    let big_groups = groups(&big);
    assert!(big_groups > 100_000, "{big_groups} groups");

    let mut base = Vec::new();
    let small_tops = workload(&small, |_, w| base.push(w));
    let big_tops = workload(&big, |phase, w| {
        let b = base[phase];
        eprintln!(
            "{}: per inode {:.1} groups examined ({:.1} with 256 groups), per block request {:.1} steps ({:.1}), {:.1} groups loaded ({:.1})",
            PHASES[phase],
            w.per_inode(),
            b.per_inode(),
            w.per_request(),
            b.per_request(),
            w.loads_per_request(),
            b.loads_per_request()
        );
        assert_eq!((w.inodes, w.requests > 0), (b.inodes, b.requests > 0), "same work on both images");
        // A constant more than on the small image (the hash probe takes
        // up to log2(groups) steps, Orlov a window of 64 flex groups),
        // never a multiple of the group count.
        assert!(
            w.per_inode() <= 2.0 * b.per_inode() + 64.0,
            "{}: {:.1} groups examined per inode with {big_groups} groups, {:.1} with 256",
            PHASES[phase],
            w.per_inode(),
            b.per_inode()
        );
        // A block request on the big image reads the goal's group and the
        // lists; it must not prefetch (load a batch of 32 groups) on
        // every request while most groups are not loaded yet.
        assert!(
            w.loads_per_request() <= b.loads_per_request() + 4.0,
            "{}: {:.1} groups loaded per block request with {big_groups} groups, {:.1} with 256",
            PHASES[phase],
            w.loads_per_request(),
            b.loads_per_request()
        );
        assert!(
            w.per_request() <= 2.0 * b.per_request() + 16.0,
            "{}: {:.1} group steps per block request with {big_groups} groups, {:.1} with 256",
            PHASES[phase],
            w.per_request(),
            b.per_request()
        );
    });
    // Orlov still spreads top-level directories over flex groups.
    for tops in [&small_tops, &big_tops] {
        let distinct: std::collections::BTreeSet<_> = tops.iter().collect();
        assert!(distinct.len() >= tops.len() / 2, "top-level directories crowd together: {tops:?}");
    }
    fsck_clean(&small);
    fsck_clean(&big);
}
