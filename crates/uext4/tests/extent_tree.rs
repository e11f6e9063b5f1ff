//! Deep extent trees written through the library API.
//!
//! - Depth >= 2 (and 3) on 1k blocks (4 entries in the inode's root, 84 per
//!   tree block): a file with every other block punched out, and a sparse
//!   file written every other block in random order. The depth is read
//!   from the inode and from `debugfs -R "ex <ino>"` (Level column), the
//!   contents are compared with a model, `e2fsck -fn` must be clean and the
//!   kernel (as root, loop mount) must read the same bytes. Then the tree
//!   shrinks: holes filled, truncation in steps down to a few blocks and to
//!   0, punching everything, punching whole leaves out of the middle; the
//!   depth must come back to 0 where the extents fit in the inode, and
//!   `i_blocks` must stay right (e2fsck).
//! - Unwritten extents converted piecewise: a fallocated range written one
//!   block at a time in random order (each write splits an unwritten
//!   extent), partial blocks included.
//! - Extents at the length limit: a 40 MiB contiguous write on 1k blocks
//!   and a 160 MiB fallocate on 4k blocks must come out as legal extents
//!   (at most 32768 blocks written, 32767 unwritten).

mod rw_support;

use rw_support::{debugfs, fsck_clean, kernel_unavailable, mkfs, open_rw_reserved, KernelMount};
use std::path::{Path, PathBuf};
use std::time::Instant;
use uext4::inode_api::{FallocMode, SetAttr};
use uext4::Filesystem;

/// Deterministic xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

/// Bytes that identify their block and a generation.
fn block_data(lblk: u64, generation: u8, len: usize) -> Vec<u8> {
    let mut x = (lblk + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(generation);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x as u8) | 1
        })
        .collect()
}

/// One extent as `debugfs -R "ex"` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DfsExtent {
    level: u32,
    depth: u32,
    lstart: u64,
    pstart: u64,
    len: u64,
    uninit: bool,
}

/// Parses `debugfs -R "ex <ino>"`: every index and leaf entry.
fn debugfs_extents(img: &Path, ino: u32) -> Vec<DfsExtent> {
    let out = debugfs(img, &format!("ex <{ino}>"));
    let mut v = Vec::new();
    for line in out.lines().skip(1) {
        // " 2/ 2   1/ 84     1 -     1 10242 - 10242      1 Uninit"
        let norm = line.replace('/', " / ").replace('-', " - ");
        let t: Vec<&str> = norm.split_whitespace().collect();
        let num = |k: usize| t.get(k).and_then(|s| s.parse::<u64>().ok());
        let (Some(level), Some(depth), Some(lstart)) = (num(0), num(2), num(6)) else { continue };
        let leaf = level == depth;
        let (pstart, len, flags) =
            if leaf { (num(9), num(12), t.get(13).copied()) } else { (num(9), num(10), t.get(11).copied()) };
        v.push(DfsExtent {
            level: level as u32,
            depth: depth as u32,
            lstart,
            pstart: pstart.unwrap_or(0),
            len: len.unwrap_or(0),
            uninit: flags.is_some_and(|f| f.contains("Uninit")),
        });
    }
    v
}

/// A file under test with its expected contents.
struct TestFile {
    fs: Option<Filesystem>,
    img: PathBuf,
    name: &'static str,
    ino: u32,
    model: Vec<u8>,
    bs: u64,
}

impl TestFile {
    fn new(img: &Path, name: &'static str) -> TestFile {
        let fs = Filesystem::open_rw(img).unwrap();
        let ino = fs.create(fs.root(), name.as_bytes(), 0o644, 0, 0).unwrap().ino;
        let bs = u64::from(fs.block_size());
        TestFile { fs: Some(fs), img: img.to_path_buf(), name, ino, model: Vec::new(), bs }
    }

    fn fs(&self) -> &Filesystem {
        self.fs.as_ref().unwrap()
    }

    /// A buffered write, written back at once.
    fn write_buffered(&mut self, off: u64, data: &[u8]) {
        let n = self.fs().inodes().write(self.ino, off, data).unwrap_or_else(|e| panic!("write at {off}: {e}"));
        assert_eq!(n, data.len());
        self.fs().fsync(self.ino).unwrap();
        let end = off as usize + data.len();
        if self.model.len() < end {
            self.model.resize(end, 0);
        }
        self.model[off as usize..end].copy_from_slice(data);
    }

    /// A direct write: each call allocates at once, so tests shape the
    /// tree write by write.
    fn write(&mut self, off: u64, data: &[u8]) {
        let n = self.fs().write_direct(self.ino, off, data).unwrap_or_else(|e| panic!("write at {off}: {e}"));
        assert_eq!(n, data.len());
        let end = off as usize + data.len();
        if self.model.len() < end {
            self.model.resize(end, 0);
        }
        self.model[off as usize..end].copy_from_slice(data);
    }

    fn write_block(&mut self, lblk: u64, generation: u8) {
        let d = block_data(lblk, generation, self.bs as usize);
        self.write(lblk * self.bs, &d);
    }

    fn falloc(&mut self, mode: FallocMode, off: u64, len: u64) {
        self.fs().fallocate(self.ino, mode, off, len).unwrap_or_else(|e| panic!("{mode:?} {off}+{len}: {e}"));
        let size = self.model.len() as u64;
        let end = off + len;
        match mode {
            FallocMode::Allocate => {
                if end > size {
                    self.model.resize(end as usize, 0);
                }
            }
            FallocMode::KeepSize => {}
            FallocMode::PunchHole | FallocMode::ZeroRange => {
                if off < size {
                    self.model[off as usize..end.min(size) as usize].fill(0);
                }
                if mode == FallocMode::ZeroRange && end > size {
                    self.model.resize(end as usize, 0);
                }
            }
            FallocMode::CollapseRange => {
                self.model.drain(off as usize..end as usize);
            }
            FallocMode::InsertRange => {
                self.model.splice(off as usize..off as usize, std::iter::repeat_n(0u8, len as usize));
            }
        }
    }

    fn punch_block(&mut self, lblk: u64) {
        self.falloc(FallocMode::PunchHole, lblk * self.bs, self.bs);
    }

    fn truncate(&mut self, size: u64) {
        self.fs().setattr(self.ino, SetAttr { size: Some(size), ..Default::default() }).unwrap();
        self.model.resize(size as usize, 0);
    }

    /// Tree depth from the inode's extent header.
    fn depth(&self) -> u16 {
        let i = self.fs().inode(self.ino).unwrap();
        u16::from_le_bytes([i.block[6], i.block[7]])
    }

    fn check_contents(&self, what: &str) {
        let got = self.fs().read_all(self.ino).unwrap();
        if got != self.model {
            let first = got.iter().zip(&self.model).position(|(a, b)| a != b);
            panic!(
                "{what}: contents differ (size {} vs model {}), first difference at {first:?} (block {:?})",
                got.len(),
                self.model.len(),
                first.map(|f| f as u64 / self.bs)
            );
        }
    }

    /// Unmounts, checks with e2fsck, debugfs (depth, i_blocks), the kernel
    /// and a fresh open; returns the depth. `want_depth` checks it exactly.
    fn check_all(&mut self, what: &str, want_depth: Option<u16>) -> u16 {
        self.check_contents(what);
        let depth = self.depth();
        if let Some(d) = want_depth {
            assert_eq!(depth, d, "{what}: tree depth");
        }
        let blocks = self.fs().stat(self.ino).unwrap().blocks;
        let mut fs = self.fs.take().unwrap();
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&self.img);
        // debugfs sees the same depth, and every extent is legal.
        let ex = debugfs_extents(&self.img, self.ino);
        let dfs_depth = ex.iter().map(|e| e.depth).max();
        match dfs_depth {
            Some(d) => assert_eq!(d, u32::from(depth), "{what}: depth by debugfs"),
            None => assert!(self.model.iter().all(|&b| b == 0), "{what}: debugfs shows no extents"),
        }
        for e in ex.iter().filter(|e| e.level == e.depth) {
            let max = if e.uninit { 32767 } else { 32768 };
            assert!(e.len >= 1 && e.len <= max, "{what}: illegal extent {e:?}");
        }
        let stat = debugfs(&self.img, &format!("stat <{}>", self.ino));
        let want = format!("Blockcount: {blocks}");
        assert!(stat.contains(&want), "{what}: debugfs stat lacks {want:?}:\n{stat}");
        kernel_read_check(&self.img, self.name, &self.model, what);
        let fs = Filesystem::open_rw(&self.img).unwrap();
        self.fs = Some(fs);
        self.check_contents(&format!("{what} (reopened)"));
        depth
    }

    fn finish(mut self) {
        if let Some(mut fs) = self.fs.take() {
            fs.unmount().unwrap();
        }
        fsck_clean(&self.img);
    }
}

/// Mounts `img` with the kernel and compares `/name` with `want`.
fn kernel_read_check(img: &Path, name: &str, want: &[u8], what: &str) {
    if let Some(why) = kernel_unavailable() {
        eprintln!("SKIP: kernel read-back ({what}): {why}");
        return;
    }
    let mnt = KernelMount::new(img, "ro").unwrap_or_else(|e| panic!("{what}: kernel refused to mount: {e}"));
    let got = std::fs::read(mnt.path().join(name)).unwrap();
    mnt.unmount();
    assert!(got == want, "{what}: the kernel reads different contents (size {} vs {})", got.len(), want.len());
}

fn timed(name: &str, t0: Instant) {
    eprintln!("{name}: {:.1?}", t0.elapsed());
}

/// Every other block of a written file punched out: depth 2 at least;
/// then holes filled, and truncation in steps back to depth 0 and 0 blocks.
#[test]
fn punched_file_grows_deep_and_shrinks_back() {
    let t0 = Instant::now();
    let Some((_d, img)) = mkfs(64, &["-b", "1024"]) else { return };
    let mut f = TestFile::new(&img, "punched");
    const N: u64 = 6000;
    let data: Vec<u8> = (0..N).flat_map(|b| block_data(b, 0, 1024)).collect();
    f.write(0, &data);
    assert_eq!(f.depth(), 0, "6000 contiguous blocks fit in the inode's root");
    for b in (1..N).step_by(2) {
        f.punch_block(b);
    }
    let extents = f.fs().extents(f.ino).unwrap();
    let mapped = extents.iter().filter(|m| m.kind != uext4::inode_api::MapKind::Hole).count();
    assert_eq!(mapped as u64, N / 2, "every even block is its own extent");
    let depth = f.check_all("every other block punched", None);
    assert!(depth >= 2, "3000 extents need depth >= 2 (got {depth})");
    // Fill the holes of the first half with new data (new blocks: the
    // extents stay separate).
    for b in (1..N / 2).step_by(2) {
        f.write_block(b, 1);
    }
    f.check_all("first half's holes filled", None);
    // Truncate in steps; the tree shrinks with the file.
    for (size_blocks, want) in [(N / 2 + 1, None), (1000, None), (300, None), (120, None), (3, Some(0))] {
        f.truncate(size_blocks * 1024 - 100);
        let d = f.check_all(&format!("truncated to {size_blocks} blocks"), want);
        assert!(d <= depth);
    }
    f.truncate(0);
    f.check_all("truncated to 0", Some(0));
    assert_eq!(f.fs().stat(f.ino).unwrap().blocks, 0);
    f.finish();
    timed("punched_file_grows_deep_and_shrinks_back", t0);
}

/// A sparse file written every other block in random order (insertions
/// all over the tree, leaves split in the middle): depth 3 on 1k blocks.
/// Whole leaves are then punched out of the middle, and finally the
/// whole file: the tree goes back to an empty root.
#[test]
fn sparse_random_writes_reach_depth_3_then_punch_everything() {
    let t0 = Instant::now();
    let Some((_d, img)) = mkfs(64, &["-b", "1024"]) else { return };
    let mut f = TestFile::new(&img, "sparse");
    let mut rng = Rng(0x5EED_0001);
    // 14,000 one-block extents: more than 4 * 84 / 2 leaves of half-full
    // nodes (middle splits share entries out evenly).
    let mut blocks: Vec<u64> = (0..14_000u64).map(|k| 2 * k).collect();
    rng.shuffle(&mut blocks);
    for &b in &blocks {
        f.write_block(b, 2);
    }
    let depth = f.check_all("sparse file, every other block", None);
    assert!(depth >= 3, "14,000 scattered extents on 1k blocks need depth 3 (got {depth})");
    // Punch out a third of the file in the middle: whole leaves and index
    // entries go.
    let bs = f.bs;
    f.falloc(FallocMode::PunchHole, 9000 * bs, 9000 * bs);
    f.check_all("middle third punched", None);
    // Punch ranges that cut extents in two (a split in a deep tree).
    let size = f.model.len() as u64;
    for k in 0..200u64 {
        let off = rng.below(size - 3000);
        f.falloc(FallocMode::PunchHole, off, 1 + rng.below(3000) + k);
    }
    f.check_all("200 random punches", None);
    // Everything.
    f.falloc(FallocMode::PunchHole, 0, size);
    f.check_all("all punched", Some(0));
    assert_eq!(f.fs().stat(f.ino).unwrap().blocks, 0, "no data or tree blocks left");
    assert_eq!(f.fs().stat(f.ino).unwrap().size, size, "punching keeps the size");
    f.finish();
    timed("sparse_random_writes_reach_depth_3_then_punch_everything", t0);
}

/// A file whose extents lie in many groups, each group holding extents
/// from all over the file (8 MiB preallocation windows, 16 to a group,
/// placed in the order random writes first touch them), then unlinked:
/// the deletion's handles come back to bitmaps, descriptors and leaves the
/// running transaction already holds, so a step can free extents and use
/// no new credit. Such a handle ending short of the work must not be taken
/// for an extent no handle can free (issue 24: unlinking the 1 TiB file
/// failed with "freeing one extent needs more than a handle of 128
/// credits").
#[test]
fn deleting_a_file_scattered_over_many_groups() {
    let t0 = Instant::now();
    let lazy = "lazy_itable_init=1,lazy_journal_init=1";
    let Some((_d, img)) = mkfs(16 << 10, &["-b", "4096", "-E", lazy]) else { return };
    let fs = Filesystem::open_rw(&img).unwrap();
    let free0 = fs.statfs().free_blocks;
    let root = fs.root();
    let ino = fs.create(root, b"scattered", 0o644, 0, 0).unwrap().ino;
    let bs = 4096u64;
    let size = 8u64 << 30;
    fs.setattr(ino, SetAttr { size: Some(size), ..Default::default() }).unwrap();
    let mut rng = Rng(0x5EED_0024);
    let mut seen = std::collections::HashSet::new();
    while seen.len() < 4000 {
        let b = rng.below(size / bs);
        if seen.insert(b) {
            let n = fs.write_direct(ino, b * bs, &block_data(b, 0, bs as usize)).unwrap();
            assert_eq!(n, bs as usize);
        }
    }
    let i = fs.inode(ino).unwrap();
    assert!(u16::from_le_bytes([i.block[6], i.block[7]]) >= 2, "4000 scattered extents need depth 2");
    fs.unlink(root, b"scattered").unwrap();
    assert_eq!(fs.statfs().free_blocks, free0, "every block of the file and its tree freed");
    let mut fs = fs;
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    timed("deleting_a_file_scattered_over_many_groups", t0);
}

/// fallocate, then single blocks (and partial blocks) written in random
/// order: every write splits an unwritten extent. Then every block.
#[test]
fn unwritten_extents_converted_piecewise() {
    let t0 = Instant::now();
    let Some((_d, img)) = mkfs(64, &["-b", "1024"]) else { return };
    let mut f = TestFile::new(&img, "unwritten");
    let mut rng = Rng(0x5EED_0002);
    const N: u64 = 4000;
    f.falloc(FallocMode::Allocate, 0, N * 1024);
    let ex = f.fs().extents(f.ino).unwrap();
    assert!(ex.iter().all(|m| matches!(m.kind, uext4::inode_api::MapKind::Unwritten(_))), "{ex:?}");
    // Every other block, in random order; a third of them partially.
    let mut blocks: Vec<u64> = (0..N).step_by(2).collect();
    rng.shuffle(&mut blocks);
    for &b in &blocks {
        if rng.below(3) == 0 {
            let off = rng.below(1000);
            let len = 1 + rng.below(1024 - off);
            let d = block_data(b, 3, len as usize);
            f.write(b * 1024 + off, &d);
        } else {
            f.write_block(b, 3);
        }
    }
    let depth = f.check_all("every other block written", None);
    assert!(depth >= 2, "4000 alternating written/unwritten extents need depth 2 (got {depth})");
    let ex = debugfs_extents(&img, f.ino);
    let uninit: u64 = ex.iter().filter(|e| e.level == e.depth && e.uninit).map(|e| e.len).sum();
    assert_eq!(uninit, N / 2, "the blocks never written stay unwritten");
    // Write the rest (random order again), and the remaining partial blocks whole.
    let mut rest: Vec<u64> = (0..N).collect();
    rng.shuffle(&mut rest);
    for &b in &rest {
        if b % 2 == 1 || rng.below(4) == 0 {
            f.write_block(b, 4);
        }
    }
    f.check_all("every block written", None);
    f.assert_no_unwritten();
    // Zero range over part of it: unwritten again in the middle.
    f.falloc(FallocMode::ZeroRange, 1000 * 1024 + 17, 900 * 1024);
    f.check_all("zero range", None);
    f.finish();
    timed("unwritten_extents_converted_piecewise", t0);
}

impl TestFile {
    fn assert_no_unwritten(&self) {
        let ex = self.fs().extents(self.ino).unwrap();
        let unwritten = ex.iter().filter(|m| matches!(m.kind, uext4::inode_api::MapKind::Unwritten(_))).count();
        assert_eq!(unwritten, 0, "{ex:?}");
    }
}

/// True if some leaf extent continues the previous one both logically and
/// physically: a run longer than one extent may be was cut in two.
fn has_cut_run(leaves: &[&DfsExtent]) -> bool {
    leaves.windows(2).any(|w| w[0].lstart + w[0].len == w[1].lstart && w[0].pstart + w[0].len == w[1].pstart)
}

/// Free space in long physical runs: all group metadata packed in group 0
/// (flex groups of 32), no backup superblocks in between.
const LONG_RUNS: &[&str] = &["-O", "sparse_super2", "-E", "num_backup_sb=0", "-G", "32"];

/// A 40 MiB contiguous write on 1k blocks: extents of at most 32768 blocks.
#[test]
fn long_written_extents_are_split_at_32768_blocks() {
    let t0 = Instant::now();
    let args: Vec<&str> = ["-b", "1024"].iter().chain(LONG_RUNS).copied().collect();
    let Some((_d, img)) = mkfs(128, &args) else { return };
    // The free space before the journal (32 MiB from block 16385) goes
    // to a filler, so that the file gets the long run after it.
    {
        let fs = Filesystem::open_rw(&img).unwrap();
        let filler = fs.create(fs.root(), b"filler", 0o644, 0, 0).unwrap().ino;
        fs.fallocate(filler, FallocMode::Allocate, 0, 32 << 20).unwrap();
    }
    let mut f = TestFile::new(&img, "long");
    const N: u64 = 40 * 1024;
    let data: Vec<u8> = (0..N).flat_map(|b| block_data(b, 5, 1024)).collect();
    // Buffered: delayed allocation asks mballoc for long runs at writeback.
    f.write_buffered(0, &data);
    f.check_all("40 MiB written", None);
    let ex = debugfs_extents(&img, f.ino);
    let leaves: Vec<_> = ex.iter().filter(|e| e.level == e.depth).collect();
    let total: u64 = leaves.iter().map(|e| e.len).sum();
    assert_eq!(total, N);
    let longest = leaves.iter().map(|e| e.len).max().unwrap();
    eprintln!("40 MiB on 1k blocks: {leaves:?}");
    assert_eq!(longest, 32768, "a physical run of more than 32768 blocks, cut at the limit");
    assert!(has_cut_run(&leaves), "{leaves:?}");
    // Overwrite across the 32768-block boundary and read back.
    let patch = block_data(99, 6, 5000);
    f.write(32768 * 1024 - 2000, &patch);
    f.check_all("patched across block 32768", None);
    f.finish();
    timed("long_written_extents_are_split_at_32768_blocks", t0);
}

/// A 160 MiB fallocate on 4k blocks: unwritten extents of at most 32767
/// blocks; then writes at the extent boundaries convert pieces of them.
#[test]
fn long_unwritten_extents_are_split_at_32767_blocks() {
    let t0 = Instant::now();
    let args: Vec<&str> = ["-b", "4096"].iter().chain(LONG_RUNS).copied().collect();
    let Some((_d, img)) = mkfs(512, &args) else { return };
    // Group 0's free space is taken first (fallocated by another file),
    // so the 160 MiB come from the long free run after the journal.
    {
        let fs = Filesystem::open_rw(&img).unwrap();
        let filler = fs.create(fs.root(), b"filler", 0o644, 0, 0).unwrap().ino;
        let free0 = u64::from(fs.group_descs()[0].free_blocks_count);
        fs.fallocate(filler, FallocMode::KeepSize, 0, free0 * 4096).unwrap();
    }
    let mut f = TestFile::new(&img, "prealloc");
    const N: u64 = 40 * 1024;
    f.falloc(FallocMode::Allocate, 0, N * 4096);
    assert_eq!(f.fs().stat(f.ino).unwrap().size, N * 4096);
    f.check_all("160 MiB fallocated", None);
    let ex = debugfs_extents(&img, f.ino);
    let leaves: Vec<_> = ex.iter().filter(|e| e.level == e.depth).collect();
    assert!(leaves.iter().all(|e| e.uninit && e.len <= 32767), "{leaves:?}");
    assert_eq!(leaves.iter().map(|e| e.len).sum::<u64>(), N);
    eprintln!("160 MiB fallocated on 4k blocks: {leaves:?}");
    assert!(has_cut_run(&leaves), "a physical run longer than 32767 blocks was cut: {leaves:?}");
    // Writes at the start, the end, around every extent boundary.
    let mut at: Vec<u64> = vec![0, N - 1];
    for e in &leaves {
        at.extend([e.lstart.saturating_sub(1), e.lstart, e.lstart + 1]);
    }
    at.sort_unstable();
    at.dedup();
    for b in at.into_iter().filter(|&b| b < N) {
        f.write(b * 4096 + 100, &block_data(b, 7, 3000));
    }
    f.check_all("written at the extent boundaries", None);
    let ex = debugfs_extents(&img, f.ino);
    for e in ex.iter().filter(|e| e.level == e.depth) {
        assert!(e.len <= if e.uninit { 32767 } else { 32768 }, "{e:?}");
    }
    f.finish();
    timed("long_unwritten_extents_are_split_at_32767_blocks", t0);
}

/// An insertion that must split a full leaf *and* grow the root (whose 4
/// entries are full) needs two tree blocks. With only one left (after the
/// data block), the split must fail as a whole: the leaf may not be
/// rewritten with half its extents while the root never learns of the
/// other half (those extents' data would be lost and their blocks leaked).
#[test]
fn split_that_runs_out_of_blocks_halfway_loses_nothing() {
    let Some((_d, img)) = mkfs(8, &["-b", "1024", "-N", "64"]) else { return };
    let fs = open_rw_reserved(&img);
    let root = fs.root();
    let ino = fs.create(root, b"f", 0o644, 0, 0).unwrap().ino;
    // 336 one-block extents appended left to right: 4 full leaves of 84.
    let mut model = Vec::new();
    for k in 0..336u64 {
        let d = block_data(2 * k, 8, 1024);
        fs.write_direct(ino, 2 * k * 1024, &d).unwrap();
        model.resize(2 * k as usize * 1024, 0);
        model.extend_from_slice(&d);
    }
    let i = fs.inode(ino).unwrap();
    assert_eq!((u16::from_le_bytes([i.block[6], i.block[7]]), u16::from_le_bytes([i.block[2], i.block[3]])), (1, 4));
    // Fill the filesystem, then give exactly two blocks back.
    let hog = fs.create(root, b"hog", 0o644, 0, 0).unwrap().ino;
    let mut off = 0;
    for len in [64 << 10, 64 << 10, 4096, 1024, 1024] {
        let chunk = vec![0xA5u8; len];
        while let Ok(n) = fs.write_direct(hog, off, &chunk) {
            off += n as u64;
            if n < len {
                break;
            }
        }
        fs.commit().unwrap();
    }
    assert_eq!(fs.statfs().free_blocks, 0);
    let size = fs.stat(hog).unwrap().size;
    fs.setattr(hog, SetAttr { size: Some(size - 2048), ..Default::default() }).unwrap();
    fs.commit().unwrap();
    assert_eq!(fs.statfs().free_blocks, 2);
    // Block 1 goes into the first (full) leaf: data block, split block,
    // then a block to grow the root: one too many.
    match fs.write_direct(ino, 1024, &[0x77u8; 1024]) {
        Ok(n) => {
            assert_eq!(n, 1024);
            model[1024..2048].fill(0x77);
        }
        Err(e) => assert_eq!(e.errno(), libc::ENOSPC),
    }
    let got = fs.read_all(ino).unwrap();
    let first = got.iter().zip(&model).position(|(a, b)| a != b);
    assert!(got == model, "contents changed: first difference at block {:?}", first.map(|f| f / 1024));
    let mut fs = fs;
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}
