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

mod rw_support;

use rw_support::{fsck_clean, have, kernel_unavailable, mkfs, open_rw_reserved, KernelMount};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use uext4::fs::ops::{FallocMode, RenameFlags, SetAttr};
use uext4::{Error, FileType, Filesystem};

const ROOT: u32 = 2;
const LOST_FOUND: &[u8] = b"lost+found";
/// Full tree comparison period (in operations).
const CHECK_EVERY: usize = 50;
/// Operations per seed.
const OPS: usize = 500;
/// Files never grow past this (the model holds contents in memory).
const MAX_FILE: u64 = 12 << 20;

// ---------------------------------------------------------------------------
// Deterministic generator
// ---------------------------------------------------------------------------

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03);
        if r.0 == 0 {
            r.0 = 1;
        }
        for _ in 0..8 {
            r.next();
        }
        r
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (0 when n is 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<T: Clone>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize].clone()
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }
}

// ---------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    File(Vec<u8>),
    Dir(BTreeMap<Vec<u8>, u32>),
    Symlink(Vec<u8>),
}

#[derive(Clone, Debug)]
struct MInode {
    node: Node,
    /// Names of a non-directory (directories count their subdirectories).
    links: u32,
}

#[derive(Clone, Debug, Default)]
struct Model {
    inodes: BTreeMap<u32, MInode>,
}

impl Model {
    fn new(lost_found: u32) -> Model {
        let mut m = Model::default();
        m.inodes.insert(ROOT, MInode { node: Node::Dir(BTreeMap::new()), links: 0 });
        m.inodes.insert(lost_found, MInode { node: Node::Dir(BTreeMap::new()), links: 0 });
        m.dir_mut(ROOT).insert(LOST_FOUND.to_vec(), lost_found);
        m
    }

    fn node(&self, ino: u32) -> &Node {
        &self.inodes[&ino].node
    }

    fn dir(&self, ino: u32) -> &BTreeMap<Vec<u8>, u32> {
        match self.node(ino) {
            Node::Dir(c) => c,
            n => panic!("model: inode {ino} is not a directory: {n:?}"),
        }
    }

    fn dir_mut(&mut self, ino: u32) -> &mut BTreeMap<Vec<u8>, u32> {
        match &mut self.inodes.get_mut(&ino).unwrap().node {
            Node::Dir(c) => c,
            _ => panic!("model: inode {ino} is not a directory"),
        }
    }

    fn file_mut(&mut self, ino: u32) -> &mut Vec<u8> {
        match &mut self.inodes.get_mut(&ino).unwrap().node {
            Node::File(d) => d,
            _ => panic!("model: inode {ino} is not a file"),
        }
    }

    fn file(&self, ino: u32) -> &Vec<u8> {
        match self.node(ino) {
            Node::File(d) => d,
            _ => panic!("model: inode {ino} is not a file"),
        }
    }

    fn is_dir(&self, ino: u32) -> bool {
        matches!(self.node(ino), Node::Dir(_))
    }

    fn lookup(&self, dir: u32, name: &[u8]) -> Option<u32> {
        self.dir(dir).get(name).copied()
    }

    fn nlink(&self, ino: u32) -> u32 {
        match self.node(ino) {
            Node::Dir(c) => 2 + c.values().filter(|&&i| self.is_dir(i)).count() as u32,
            _ => self.inodes[&ino].links,
        }
    }

    /// Every directory, root first.
    fn dirs(&self) -> Vec<u32> {
        let mut out = vec![ROOT];
        let mut i = 0;
        while i < out.len() {
            let d = out[i];
            out.extend(self.dir(d).values().copied().filter(|&c| self.is_dir(c)));
            i += 1;
        }
        out
    }

    /// Every (directory, name, inode) except /lost+found itself.
    fn entries(&self) -> Vec<(u32, Vec<u8>, u32)> {
        let mut out = Vec::new();
        for d in self.dirs() {
            for (n, &i) in self.dir(d) {
                if !(d == ROOT && n == LOST_FOUND) {
                    out.push((d, n.clone(), i));
                }
            }
        }
        out
    }

    /// Regular files (each inode once).
    fn files(&self) -> Vec<u32> {
        self.inodes.iter().filter(|(_, i)| matches!(i.node, Node::File(_))).map(|(&k, _)| k).collect()
    }

    /// True if directory `x` is `top` or lies below it.
    fn within(&self, top: u32, x: u32) -> bool {
        if top == x {
            return true;
        }
        if !self.is_dir(top) {
            return false;
        }
        self.dir(top).values().any(|&c| self.is_dir(c) && self.within(c, x))
    }

    /// Adds the name `dir/name` for `ino` (a new inode when `node` is Some).
    fn add(&mut self, dir: u32, name: &[u8], ino: u32, node: Option<Node>) {
        match node {
            Some(n) => {
                assert!(self.inodes.insert(ino, MInode { node: n, links: 1 }).is_none(), "inode {ino} reused live");
            }
            None => self.inodes.get_mut(&ino).unwrap().links += 1,
        }
        assert!(self.dir_mut(dir).insert(name.to_vec(), ino).is_none());
    }

    /// Removes the name `dir/name`; the inode goes with its last name.
    fn remove(&mut self, dir: u32, name: &[u8]) {
        let ino = self.dir_mut(dir).remove(name).unwrap();
        if self.is_dir(ino) {
            assert!(self.dir(ino).is_empty());
            self.inodes.remove(&ino);
        } else {
            let i = self.inodes.get_mut(&ino).unwrap();
            i.links -= 1;
            if i.links == 0 {
                self.inodes.remove(&ino);
            }
        }
    }

    fn path_of(&self, ino: u32) -> String {
        for d in self.dirs() {
            for (n, &i) in self.dir(d) {
                if i != ino {
                    continue;
                }
                let p = if d == ROOT { String::new() } else { self.path_of(d) };
                return format!("{p}/{}", show(n));
            }
        }
        if ino == ROOT {
            "/".into()
        } else {
            format!("<inode {ino}>")
        }
    }
}

// ---------------------------------------------------------------------------
// Configurations
// ---------------------------------------------------------------------------

struct Cfg {
    name: &'static str,
    size_mb: u64,
    args: &'static [&'static str],
    seeds: std::ops::Range<u64>,
    /// Small image: ENOSPC is expected to happen at least once.
    small: bool,
}

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

#[derive(Default, Debug)]
struct Stats {
    ops: usize,
    refused: BTreeMap<i32, usize>,
    enospc: usize,
    short_writes: usize,
    reopens: usize,
    checks: usize,
    kernel_checks: usize,
    bytes_written: u64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.ops += o.ops;
        for (k, v) in &o.refused {
            *self.refused.entry(*k).or_default() += v;
        }
        self.enospc += o.enospc;
        self.short_writes += o.short_writes;
        self.reopens += o.reopens;
        self.checks += o.checks;
        self.kernel_checks += o.kernel_checks;
        self.bytes_written += o.bytes_written;
    }
}

// ---------------------------------------------------------------------------
// The runner
// ---------------------------------------------------------------------------

enum Outcome<T> {
    Done(T),
    /// Failed with an expected errno.
    Refused,
    NoSpace,
}

struct Runner {
    cfg_name: &'static str,
    seed: u64,
    rng: Rng,
    img: PathBuf,
    fs: Option<Filesystem>,
    m: Model,
    bs: u64,
    step: usize,
    hist: VecDeque<String>,
    stats: Stats,
    /// Operations left during which space is freed preferentially.
    pressure: u32,
    /// Files are block-mapped (ext2/ext3): fallocate other than punch
    /// hole is EOPNOTSUPP.
    blockmap: bool,
}

impl Drop for Runner {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "=== {} seed {} failed at step {}; last operations:\n{}",
                self.cfg_name,
                self.seed,
                self.step,
                self.hist.iter().cloned().collect::<Vec<_>>().join("\n")
            );
        }
    }
}

/// A name for messages (long pool names abbreviated).
fn show(name: &[u8]) -> String {
    let s = String::from_utf8_lossy(name);
    if s.len() > 12 {
        format!("{}..({})", &s[..7], s.len())
    } else {
        s.into_owned()
    }
}

impl Runner {
    fn fs(&self) -> &Filesystem {
        self.fs.as_ref().unwrap()
    }

    fn tag(&self) -> String {
        format!("[{} seed {} step {}]", self.cfg_name, self.seed, self.step)
    }

    fn log(&mut self, s: String) {
        if self.hist.len() == 40 {
            self.hist.pop_front();
        }
        self.hist.push_back(format!("{:4}: {s}", self.step));
    }

    /// Classifies `r` against the errnos the model allows (none: success
    /// expected). ENOSPC is always allowed when success is expected.
    fn outcome<T>(&mut self, r: Result<T, Error>, allowed: &[i32], what: &str) -> Outcome<T> {
        match r {
            Ok(v) => {
                assert!(allowed.is_empty(), "{} {what}: succeeded, expected errno {allowed:?}", self.tag());
                Outcome::Done(v)
            }
            Err(e) if e.errno() == libc::ENOSPC && allowed.is_empty() => {
                self.log(format!("  -> ENOSPC ({e})"));
                self.stats.enospc += 1;
                self.pressure = 6;
                Outcome::NoSpace
            }
            Err(e) => {
                assert!(
                    allowed.contains(&e.errno()),
                    "{} {what}: {e} (errno {}), expected {}",
                    self.tag(),
                    e.errno(),
                    if allowed.is_empty() { "success".to_string() } else { format!("errno in {allowed:?}") }
                );
                *self.stats.refused.entry(e.errno()).or_default() += 1;
                Outcome::Refused
            }
        }
    }

    /// A name from a small pool (collisions are the point), sometimes long.
    fn name(&mut self) -> Vec<u8> {
        if self.rng.chance(10) {
            let k = self.rng.below(6) as usize;
            let mut n = format!("long{k}-").into_bytes();
            n.resize(40 + 42 * k, b'a' + k as u8);
            n
        } else {
            format!("n{}", self.rng.below(14)).into_bytes()
        }
    }

    fn pick_dir(&mut self) -> u32 {
        let d = self.m.dirs();
        self.rng.pick(&d)
    }

    fn pick_entry(&mut self) -> Option<(u32, Vec<u8>, u32)> {
        let e = self.m.entries();
        (!e.is_empty()).then(|| self.rng.pick(&e))
    }

    fn pick_file(&mut self) -> Option<u32> {
        let f = self.m.files();
        (!f.is_empty()).then(|| self.rng.pick(&f))
    }

    // --- namespace operations -------------------------------------------

    fn op_create(&mut self) {
        let (dir, name) = (self.pick_dir(), self.name());
        let kind = self.rng.below(10);
        let exists = self.m.lookup(dir, &name).is_some();
        let allowed: &[i32] = if exists { &[libc::EEXIST] } else { &[] };
        let dpath = self.m.path_of(dir);
        match kind {
            0..=5 => {
                self.log(format!("create {dpath}/{}", show(&name)));
                let r = self.fs().create(dir, &name, 0o644, 0, 0);
                if let Outcome::Done(st) = self.outcome(r, allowed, "create") {
                    self.m.add(dir, &name, st.ino, Some(Node::File(Vec::new())));
                }
            }
            6..=8 => {
                self.log(format!("mkdir {dpath}/{}", show(&name)));
                let r = self.fs().mkdir(dir, &name, 0o755, 0, 0);
                if let Outcome::Done(st) = self.outcome(r, allowed, "mkdir") {
                    self.m.add(dir, &name, st.ino, Some(Node::Dir(BTreeMap::new())));
                }
            }
            _ => {
                // Fast (< 60 bytes, in the inode) or slow (a data block).
                let max = if self.rng.chance(50) { 59 } else { (self.bs - 1).min(700) };
                let len = self.rng.range(1, max) as usize;
                let target: Vec<u8> =
                    (0..len).map(|_| b"abcdefgh/._-0123456789"[self.rng.below(22) as usize]).collect();
                self.log(format!("symlink {dpath}/{} -> {len} bytes", show(&name)));
                let r = self.fs().inodes().symlink(dir, &name, &target, 0, 0);
                if let Outcome::Done(st) = self.outcome(r, allowed, "symlink") {
                    self.m.add(dir, &name, st.ino, Some(Node::Symlink(target)));
                }
            }
        }
    }

    fn op_link(&mut self) {
        let Some((_, _, ino)) = self.pick_entry() else { return };
        let (dir, name) = (self.pick_dir(), self.name());
        let mut allowed = Vec::new();
        if self.m.is_dir(ino) {
            allowed.push(libc::EPERM);
        }
        if self.m.lookup(dir, &name).is_some() {
            allowed.push(libc::EEXIST);
        }
        self.log(format!("link {} -> {}/{}", self.m.path_of(ino), self.m.path_of(dir), show(&name)));
        let r = self.fs().link(ino, dir, &name);
        if let Outcome::Done(st) = self.outcome(r, &allowed, "link") {
            self.m.add(dir, &name, ino, None);
            assert_eq!(st.nlink, self.m.nlink(ino), "{} link count after link", self.tag());
        }
    }

    fn op_unlink(&mut self) {
        let (dir, name) = match self.pick_entry() {
            Some((d, n, _)) if self.rng.chance(95) => (d, n),
            _ => (self.pick_dir(), self.name()),
        };
        let allowed: &[i32] = match self.m.lookup(dir, &name) {
            None => &[libc::ENOENT],
            Some(i) if self.m.is_dir(i) => &[libc::EISDIR],
            Some(_) => &[],
        };
        self.log(format!("unlink {}/{}", self.m.path_of(dir), show(&name)));
        let r = self.fs().unlink(dir, &name);
        match self.outcome(r, allowed, "unlink") {
            Outcome::Done(()) => self.m.remove(dir, &name),
            Outcome::NoSpace => self.check_tree(false),
            Outcome::Refused => {}
        }
    }

    fn op_rmdir(&mut self) {
        let entries: Vec<_> = self.m.entries().into_iter().filter(|e| self.m.is_dir(e.2)).collect();
        let (dir, name) = match entries.is_empty() {
            false if self.rng.chance(85) => {
                let e = self.rng.pick(&entries);
                (e.0, e.1)
            }
            _ => match self.pick_entry() {
                Some((d, n, _)) if self.rng.chance(60) => (d, n),
                _ => (self.pick_dir(), self.name()),
            },
        };
        let allowed: &[i32] = match self.m.lookup(dir, &name) {
            None => &[libc::ENOENT],
            Some(i) if !self.m.is_dir(i) => &[libc::ENOTDIR],
            Some(i) if !self.m.dir(i).is_empty() => &[libc::ENOTEMPTY],
            Some(_) => &[],
        };
        self.log(format!("rmdir {}/{}", self.m.path_of(dir), show(&name)));
        let r = self.fs().rmdir(dir, &name);
        match self.outcome(r, allowed, "rmdir") {
            Outcome::Done(()) => self.m.remove(dir, &name),
            Outcome::NoSpace => self.check_tree(false),
            Outcome::Refused => {}
        }
    }

    fn op_rename(&mut self) {
        let Some((p, n, src)) = self.pick_entry() else { return };
        let kind = self.rng.below(100);
        let flags = match kind {
            0..=14 => RenameFlags { noreplace: true, exchange: false },
            15..=34 => RenameFlags { noreplace: false, exchange: true },
            _ => RenameFlags::default(),
        };
        // Destination: a random directory; for exchanges and "over an
        // existing file" mostly an existing entry; sometimes a directory
        // inside the source (EINVAL).
        let (np, nn) = if self.m.is_dir(src) && self.rng.chance(12) {
            let inside: Vec<u32> = self.m.dirs().into_iter().filter(|&d| self.m.within(src, d)).collect();
            (self.rng.pick(&inside), self.name())
        } else if (flags.exchange || kind >= 70) && self.rng.chance(80) {
            let e = self.pick_entry().unwrap();
            (e.0, e.1)
        } else {
            (self.pick_dir(), self.name())
        };
        let dst = self.m.lookup(np, &nn);
        let src_dir = self.m.is_dir(src);
        let dst_dir = dst.is_some_and(|d| self.m.is_dir(d));
        // The errors Linux's renameat2 reports here (any of them when
        // several apply: the order of the checks is not part of the API).
        let mut allowed = Vec::new();
        if flags.noreplace && dst.is_some() {
            allowed.push(libc::EEXIST);
        }
        if flags.exchange && dst.is_none() {
            allowed.push(libc::ENOENT);
        }
        let same = dst == Some(src);
        if !same {
            if src_dir && self.m.within(src, np) {
                allowed.push(libc::EINVAL);
            }
            match dst {
                Some(d) if flags.exchange && dst_dir && self.m.within(d, p) => allowed.push(libc::EINVAL),
                Some(_) if flags.exchange => {}
                Some(d) => {
                    if src_dir && !dst_dir {
                        allowed.push(libc::ENOTDIR);
                    }
                    if !src_dir && dst_dir {
                        allowed.push(libc::EISDIR);
                    }
                    if dst_dir && !self.m.dir(d).is_empty() {
                        allowed.push(libc::ENOTEMPTY);
                    }
                }
                None => {}
            }
        }
        self.log(format!(
            "rename{} {}/{} -> {}/{} ({})",
            if flags.noreplace {
                "[noreplace]"
            } else if flags.exchange {
                "[exchange]"
            } else {
                ""
            },
            self.m.path_of(p),
            show(&n),
            self.m.path_of(np),
            show(&nn),
            match dst {
                None => "new name".to_string(),
                Some(d) if d == src => "same inode".to_string(),
                Some(d) => format!("over inode {d}"),
            }
        ));
        let r = self.fs().inodes().rename(p, &n, np, &nn, flags);
        match self.outcome(r, &allowed, "rename") {
            Outcome::Done(()) => {
                if same {
                    return; // both names of one inode: nothing happens
                }
                if flags.exchange {
                    let d = dst.unwrap();
                    self.m.dir_mut(p).insert(n.clone(), d);
                    self.m.dir_mut(np).insert(nn.clone(), src);
                } else {
                    if dst.is_some() {
                        self.m.remove(np, &nn);
                    }
                    self.m.dir_mut(p).remove(&n);
                    self.m.dir_mut(np).insert(nn.clone(), src);
                }
                if src_dir {
                    let got = self.fs().lookup(src, b"..").unwrap();
                    assert_eq!(got, np, "{} \"..\" of the renamed directory", self.tag());
                }
            }
            Outcome::NoSpace => self.check_tree(false),
            Outcome::Refused => {}
        }
    }

    // --- data operations ------------------------------------------------

    fn op_write(&mut self) {
        let Some(ino) = self.pick_file() else { return self.op_create() };
        let size = self.m.file(ino).len() as u64;
        let bs = self.bs;
        let (mut off, mut len) = match self.rng.below(100) {
            // Small and unaligned, inside or around the data.
            0..=34 => (self.rng.range(0, size), self.rng.range(1, 5000)),
            // Append.
            35..=54 => (size, self.rng.range(1, 65536)),
            // Sparse: far past the end.
            55..=64 => (size + self.rng.range(1, 4 << 20), self.rng.range(1, 9000)),
            // Whole blocks.
            65..=79 => (self.rng.range(0, size / bs + 8) * bs, self.rng.range(1, 32) * bs),
            // Large.
            80..=89 => (self.rng.range(0, size), self.rng.range(64 << 10, 1 << 20)),
            // Just past the end, inside or next to the last block.
            _ => (size + self.rng.range(1, 3 * bs), self.rng.range(1, 2 * bs)),
        };
        if off >= MAX_FILE {
            off = self.rng.below(MAX_FILE / 2);
        }
        len = len.min(MAX_FILE - off);
        let data = self.rng.bytes(len as usize);
        self.log(format!("write {} (inode {ino}, size {size}) at {off} len {len}", self.m.path_of(ino)));
        let r = self.fs().inodes().write(ino, off, &data);
        self.finish_write(ino, off, &data, r);
    }

    /// Checks a write's result and applies it to the model.
    fn finish_write(&mut self, ino: u32, off: u64, data: &[u8], r: Result<usize, Error>) {
        match self.outcome(r, &[], "write") {
            Outcome::Done(n) => {
                assert!(n <= data.len() && n > 0, "{} write returned {n} of {}", self.tag(), data.len());
                if n < data.len() {
                    self.log(format!("  -> short write {n}"));
                    self.stats.short_writes += 1;
                    self.pressure = 6;
                }
                self.stats.bytes_written += n as u64;
                let f = self.m.file_mut(ino);
                let end = off as usize + n;
                if f.len() < end {
                    f.resize(end, 0);
                }
                f[off as usize..end].copy_from_slice(&data[..n]);
                if n < data.len() {
                    self.check_file(ino);
                }
            }
            Outcome::NoSpace => self.check_file(ino),
            Outcome::Refused => unreachable!(),
        }
    }

    fn op_truncate(&mut self) {
        if self.rng.chance(4) {
            // Not a regular file: EISDIR / EINVAL.
            let Some((_, _, ino)) = self.pick_entry() else { return };
            let allowed: &[i32] = match self.m.node(ino) {
                Node::Dir(_) => &[libc::EISDIR],
                Node::Symlink(_) => &[libc::EINVAL],
                Node::File(_) => return,
            };
            self.log(format!("truncate {} (not a file)", self.m.path_of(ino)));
            let r = self.fs().setattr(ino, SetAttr { size: Some(0), ..Default::default() });
            self.outcome(r, allowed, "setattr size");
            return;
        }
        let Some(ino) = self.pick_file() else { return };
        let size = self.m.file(ino).len() as u64;
        let new = match self.rng.below(100) {
            0..=9 => 0,
            10..=54 => self.rng.range(0, size),
            55..=69 => self.rng.range(0, size) / self.bs * self.bs,
            _ => size + self.rng.range(1, 1 << 20),
        }
        .min(MAX_FILE);
        self.log(format!("truncate {} (inode {ino}) {size} -> {new}", self.m.path_of(ino)));
        let r = self.fs().setattr(ino, SetAttr { size: Some(new), ..Default::default() });
        match self.outcome(r, &[], "truncate") {
            Outcome::Done(st) => {
                assert_eq!(st.size, new, "{} size after truncate", self.tag());
                self.m.file_mut(ino).resize(new as usize, 0);
            }
            Outcome::NoSpace => self.check_file(ino),
            Outcome::Refused => unreachable!(),
        }
    }

    fn op_fallocate(&mut self) {
        let Some(ino) = self.pick_file() else { return };
        let size = self.m.file(ino).len() as u64;
        let bs = self.bs;
        let mode =
            self.rng.pick(&[FallocMode::Allocate, FallocMode::KeepSize, FallocMode::PunchHole, FallocMode::ZeroRange]);
        let (mut off, mut len) = if self.rng.chance(40) {
            (self.rng.range(0, size.div_ceil(bs) + 16) * bs, self.rng.range(1, 64) * bs)
        } else {
            (self.rng.range(0, size + (256 << 10)), self.rng.range(1, 256 << 10))
        };
        if off >= MAX_FILE {
            off = self.rng.below(MAX_FILE / 2);
        }
        len = len.min(MAX_FILE - off);
        self.log(format!("fallocate {mode:?} {} (inode {ino}, size {size}) at {off} len {len}", self.m.path_of(ino)));
        let r = self.fs().fallocate(ino, mode, off, len);
        // Block-mapped files can only have holes punched (as on Linux).
        let refused = self.blockmap && mode != FallocMode::PunchHole;
        let allowed: &[i32] = if refused { &[libc::EOPNOTSUPP] } else { &[] };
        match self.outcome(r, allowed, "fallocate") {
            Outcome::Done(()) => {
                let end = off + len;
                let f = self.m.file_mut(ino);
                match mode {
                    FallocMode::Allocate => {
                        if (f.len() as u64) < end {
                            f.resize(end as usize, 0);
                        }
                    }
                    FallocMode::KeepSize => {}
                    FallocMode::PunchHole => {
                        let e = end.min(size) as usize;
                        if (off as usize) < e {
                            f[off as usize..e].fill(0);
                        }
                    }
                    FallocMode::ZeroRange => {
                        let e = end.min(size) as usize;
                        if (off as usize) < e {
                            f[off as usize..e].fill(0);
                        }
                        if (f.len() as u64) < end {
                            f.resize(end as usize, 0);
                        }
                    }
                }
                let got = self.fs().stat(ino).unwrap().size;
                assert_eq!(got, self.m.file(ino).len() as u64, "{} size after fallocate", self.tag());
            }
            Outcome::NoSpace if matches!(mode, FallocMode::PunchHole | FallocMode::ZeroRange) => {
                // Linux may leave the range partly zeroed; nothing else
                // may change. The model takes what the filesystem did.
                let got = self.fs().read_all(ino).unwrap();
                let want = self.m.file(ino);
                assert_eq!(got.len(), want.len(), "{} size after a failed {mode:?}", self.tag());
                let (a, b) = (off as usize, ((off + len) as usize).min(want.len()));
                for (k, (&g, &w)) in got.iter().zip(want.iter()).enumerate() {
                    let in_range = k >= a && k < b;
                    assert!(g == w || (in_range && g == 0), "{} byte {k} after a failed {mode:?}", self.tag());
                }
                *self.m.file_mut(ino) = got;
            }
            Outcome::NoSpace => self.check_file(ino),
            Outcome::Refused => self.check_file(ino),
        }
    }

    /// A large append (fills small images: ENOSPC).
    fn op_fill(&mut self) {
        let Some(ino) = self.pick_file() else { return };
        let size = self.m.file(ino).len() as u64;
        let len = self.rng.range(512 << 10, 6 << 20).min(MAX_FILE.saturating_sub(size));
        if len == 0 {
            return;
        }
        let data = self.rng.bytes(len as usize);
        self.log(format!("write (fill) {} (inode {ino}, size {size}) len {len}", self.m.path_of(ino)));
        let r = self.fs().inodes().write(ino, size, &data);
        self.finish_write(ino, size, &data, r);
    }

    fn op_read(&mut self) {
        let Some(ino) = self.pick_file() else { return };
        let size = self.m.file(ino).len() as u64;
        let off = self.rng.range(0, size + 5000);
        let len = self.rng.range(1, 70_000) as usize;
        self.log(format!("read inode {ino} (size {size}) at {off} len {len}"));
        let mut buf = vec![0xEEu8; len];
        let n = self.fs().inodes().read(ino, off, &mut buf).unwrap_or_else(|e| panic!("{} read: {e}", self.tag()));
        let f = self.m.file(ino);
        let want = if off >= size { &[][..] } else { &f[off as usize..(off as usize + len).min(f.len())] };
        assert_eq!(n, want.len(), "{} read of inode {ino} at {off} len {len}: length", self.tag());
        assert!(buf[..n] == *want, "{} read of inode {ino} at {off} len {len}: contents differ", self.tag());
    }

    /// Frees space after an ENOSPC: removes a big file or cuts it down.
    fn op_relieve(&mut self) {
        let mut files: Vec<(u64, u32)> = self.m.files().into_iter().map(|i| (self.m.file(i).len() as u64, i)).collect();
        files.sort_unstable();
        let Some(&(size, ino)) = files.last() else { return };
        if self.rng.chance(50) {
            // Remove every name of the largest file.
            let names: Vec<_> = self.m.entries().into_iter().filter(|e| e.2 == ino).collect();
            for (d, n, _) in names {
                self.log(format!("unlink (relieve) {}/{}", self.m.path_of(d), show(&n)));
                let r = self.fs().unlink(d, &n);
                if let Outcome::Done(()) = self.outcome(r, &[], "unlink") {
                    self.m.remove(d, &n);
                }
            }
        } else {
            let new = size / 4;
            self.log(format!("truncate (relieve) inode {ino} {size} -> {new}"));
            let r = self.fs().setattr(ino, SetAttr { size: Some(new), ..Default::default() });
            if let Outcome::Done(_) = self.outcome(r, &[], "truncate") {
                self.m.file_mut(ino).truncate(new as usize);
            }
        }
    }

    fn reopen(&mut self) {
        self.log("unmount + fsck + open_rw".into());
        self.stats.reopens += 1;
        let mut fs = self.fs.take().unwrap();
        fs.unmount().unwrap_or_else(|e| panic!("{} unmount: {e}", self.tag()));
        drop(fs);
        fsck_clean(&self.img);
        self.fs = Some(Filesystem::open_rw(&self.img).unwrap_or_else(|e| panic!("{} open_rw: {e}", self.tag())));
        self.check_tree(true);
    }

    fn step_once(&mut self) {
        if self.pressure > 0 {
            self.pressure -= 1;
            if self.rng.chance(50) {
                return self.op_relieve();
            }
        }
        match self.rng.below(1000) {
            0..=139 => self.op_create(),
            140..=189 => self.op_link(),
            190..=269 => self.op_unlink(),
            270..=319 => self.op_rmdir(),
            320..=459 => self.op_rename(),
            460..=659 => self.op_write(),
            660..=679 => self.op_fill(),
            680..=759 => self.op_truncate(),
            760..=879 => self.op_fallocate(),
            880..=959 => self.op_read(),
            960..=974 => {
                self.log("commit".into());
                self.fs().commit().unwrap();
            }
            975..=989 => {
                if let Some(ino) = self.pick_file() {
                    self.log(format!("fsync inode {ino}"));
                    self.fs().fsync(ino).unwrap();
                }
            }
            _ => self.reopen(),
        }
    }

    // --- checks ----------------------------------------------------------

    fn check_file(&self, ino: u32) {
        let got = self.fs().read_all(ino).unwrap_or_else(|e| panic!("{} read_all({ino}): {e}", self.tag()));
        let want = self.m.file(ino);
        if got != *want {
            let first = got.iter().zip(want.iter()).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
            let last = got.iter().zip(want.iter()).rposition(|(a, b)| a != b).unwrap_or(first);
            let zeros = got[first..=last.min(got.len().saturating_sub(1))].iter().all(|&b| b == 0);
            let blk = uext4::FileBlock::of_byte(first as u64, self.bs);
            let map: Vec<_> = self
                .fs()
                .extents(ino)
                .unwrap()
                .into_iter()
                .filter(|m| m.lblk + m.len + 2 > blk && m.lblk < blk + 3)
                .collect();
            panic!(
                "{} inode {ino} ({}): contents differ: size {} (model {}), bytes {first}..={last} differ \
                 (read back {}; model {:?}...), mapping near block {blk}: {map:?}",
                self.tag(),
                self.m.path_of(ino),
                got.len(),
                want.len(),
                if zeros {
                    "all zeros".to_string()
                } else {
                    format!("{:?}...", &got[first..(first + 8).min(got.len())])
                },
                &want[first..(first + 8).min(want.len())],
            );
        }
    }

    /// Compares the whole tree with the model (file contents when `contents`).
    fn check_tree(&self, contents: bool) {
        let mut seen = BTreeSet::new();
        self.check_dir(ROOT, ROOT, contents, &mut seen);
        let want: BTreeSet<u32> = self.m.inodes.keys().copied().collect();
        assert_eq!(seen, want, "{} reachable inodes", self.tag());
    }

    fn check_dir(&self, dir: u32, parent: u32, contents: bool, seen: &mut BTreeSet<u32>) {
        let fs = self.fs();
        let tag = self.tag();
        seen.insert(dir);
        let mut names = BTreeMap::new();
        for e in fs.read_dir_all(dir).unwrap_or_else(|e| panic!("{tag} readdir {dir}: {e}")) {
            match &e.name[..] {
                b"." => assert_eq!(e.ino, dir, "{tag} \".\" of {dir}"),
                b".." => assert_eq!(e.ino, parent, "{tag} \"..\" of {}", self.m.path_of(dir)),
                _ => {
                    let dup = names.insert(e.name.clone(), (e.ino, e.file_type));
                    assert!(dup.is_none(), "{tag} duplicate name {} in {dir}", show(&e.name));
                }
            }
        }
        let want = self.m.dir(dir);
        let got_names: Vec<_> = names.keys().map(|n| String::from_utf8_lossy(n).into_owned()).collect();
        let want_names: Vec<_> = want.keys().map(|n| String::from_utf8_lossy(n).into_owned()).collect();
        assert_eq!(got_names, want_names, "{tag} names in {}", self.m.path_of(dir));
        for (name, &(ino, ftype)) in &names {
            let wino = want[name];
            let path = format!("{}/{}", self.m.path_of(dir), show(name));
            assert_eq!(ino, wino, "{tag} inode of {path}");
            let st = fs.stat(ino).unwrap_or_else(|e| panic!("{tag} stat {path}: {e}"));
            let wtype = match self.m.node(ino) {
                Node::File(_) => FileType::Regular,
                Node::Dir(_) => FileType::Directory,
                Node::Symlink(_) => FileType::Symlink,
            };
            assert_eq!(st.file_type, wtype, "{tag} type of {path}");
            if let Some(t) = ftype {
                assert_eq!(t, wtype, "{tag} directory entry type of {path}");
            }
            assert_eq!(st.nlink, self.m.nlink(ino), "{tag} link count of {path}");
            match self.m.node(ino) {
                Node::File(d) => {
                    assert_eq!(st.size, d.len() as u64, "{tag} size of {path}");
                    if contents && seen.insert(ino) {
                        self.check_file(ino);
                    }
                    seen.insert(ino);
                }
                Node::Symlink(t) => {
                    seen.insert(ino);
                    assert_eq!(st.size, t.len() as u64, "{tag} size of {path}");
                    let got = fs.readlink(ino).unwrap_or_else(|e| panic!("{tag} readlink {path}: {e}"));
                    assert!(got == *t, "{tag} target of {path}");
                }
                Node::Dir(_) => self.check_dir(ino, dir, contents, seen),
            }
        }
    }

    /// The kernel's view of the tree must equal the model.
    fn check_kernel_dir(&self, dir: u32, path: &Path) {
        let tag = self.tag();
        let mut names = BTreeMap::new();
        for e in std::fs::read_dir(path).unwrap_or_else(|e| panic!("{tag} kernel readdir {path:?}: {e}")) {
            let e = e.unwrap();
            names.insert(e.file_name().as_bytes().to_vec(), e.path());
        }
        let want = self.m.dir(dir);
        let got_names: Vec<_> = names.keys().map(|n| String::from_utf8_lossy(n).into_owned()).collect();
        let want_names: Vec<_> = want.keys().map(|n| String::from_utf8_lossy(n).into_owned()).collect();
        assert_eq!(got_names, want_names, "{tag} kernel: names in {path:?}");
        for (name, p) in &names {
            let ino = want[name];
            let md = std::fs::symlink_metadata(p).unwrap();
            assert_eq!(md.ino(), u64::from(ino), "{tag} kernel: inode of {p:?}");
            assert_eq!(md.nlink(), u64::from(self.m.nlink(ino)), "{tag} kernel: link count of {p:?}");
            match self.m.node(ino) {
                Node::File(d) => {
                    assert!(md.file_type().is_file(), "{tag} kernel: {p:?} is not a file");
                    let got = std::fs::read(p).unwrap_or_else(|e| panic!("{tag} kernel read {p:?}: {e}"));
                    assert!(got == *d, "{tag} kernel: contents of {p:?} differ (size {} vs {})", got.len(), d.len());
                }
                Node::Symlink(t) => {
                    assert!(md.file_type().is_symlink(), "{tag} kernel: {p:?} is not a symlink");
                    let got = std::fs::read_link(p).unwrap();
                    assert_eq!(got.as_os_str().as_bytes(), &t[..], "{tag} kernel: target of {p:?}");
                }
                Node::Dir(_) => {
                    assert!(md.file_type().is_dir(), "{tag} kernel: {p:?} is not a directory");
                    self.check_kernel_dir(ino, p);
                }
            }
        }
    }

    fn kernel_check(&mut self) {
        let Some(why) = kernel_unavailable() else {
            let mnt = KernelMount::new(&self.img, "")
                .unwrap_or_else(|e| panic!("{} kernel refused to mount: {e}", self.tag()));
            self.check_kernel_dir(ROOT, mnt.path());
            mnt.unmount();
            fsck_clean(&self.img);
            self.stats.kernel_checks += 1;
            return;
        };
        eprintln!("SKIP: kernel check: {why}");
    }
}

fn run_seed(cfg: &Cfg, seed: u64, ops: usize) -> Option<Stats> {
    let (_dir, img) = mkfs(cfg.size_mb, cfg.args)?;
    let fs = Filesystem::open_rw(&img).unwrap();
    let lf = fs.lookup(ROOT, LOST_FOUND).unwrap();
    let bs = u64::from(fs.block_size());
    let mut r = Runner {
        cfg_name: cfg.name,
        seed,
        rng: Rng::new(seed),
        img: img.clone(),
        fs: Some(fs),
        m: Model::new(lf),
        bs,
        step: 0,
        hist: VecDeque::new(),
        stats: Stats::default(),
        pressure: 0,
        blockmap: cfg.args.iter().any(|a| matches!(*a, "ext2" | "ext3")),
    };
    r.check_tree(true);
    // Debugging aid: UEXT4_RANDOM_FSCK=1 syncs and runs e2fsck after every
    // operation (slow), to find the one that broke the image.
    let fsck_each = std::env::var_os("UEXT4_RANDOM_FSCK").is_some();
    for step in 1..=ops {
        r.step = step;
        r.step_once();
        r.stats.ops += 1;
        if fsck_each {
            r.fs().sync().unwrap();
            let out = Command::new("e2fsck").arg("-fn").arg(&img).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let bad = text.lines().any(|l| l.contains("Fix?") || l.contains("differences") || l.contains("wrong"));
            assert!(!bad, "{} e2fsck after sync:\n{text}", r.tag());
        }
        if step % CHECK_EVERY == 0 {
            r.check_tree(true);
            r.stats.checks += 1;
        }
    }
    r.check_tree(true);
    let mut fs = r.fs.take().unwrap();
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    // A read-only open sees the same tree.
    r.fs = Some(Filesystem::open(&img).unwrap());
    r.check_tree(true);
    r.kernel_check();
    Some(std::mem::take(&mut r.stats))
}

fn run_cfg(cfg: &Cfg) {
    if !have("e2fsck") {
        eprintln!("SKIP: e2fsck not installed");
        return;
    }
    let t0 = Instant::now();
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let seeds: Vec<u64> = match (env("UEXT4_RANDOM_SEED"), env("UEXT4_RANDOM_SEEDS")) {
        (Some(s), _) => vec![s],
        (None, Some(n)) => (cfg.seeds.start..cfg.seeds.start + n).collect(),
        (None, None) => cfg.seeds.clone().collect(),
    };
    let ops = env("UEXT4_RANDOM_OPS").map_or(OPS, |n| n as usize);
    let mut total = Stats::default();
    for seed in seeds {
        let Some(s) = run_seed(cfg, seed, ops) else { return };
        total.add(&s);
    }
    eprintln!("{}: {:?} in {:.1?}", cfg.name, total, t0.elapsed());
    if cfg.small && env("UEXT4_RANDOM_SEED").is_none() {
        assert!(total.enospc + total.short_writes > 0, "{}: no ENOSPC in any seed: the image is too large", cfg.name);
    }
}

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
    assert_eq!(fs.extents(f).unwrap().iter().filter(|m| m.kind != uext4::inode::MapKind::Hole).count(), 4);
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
