//! The randomized operation harness: an in-memory model of the tree, a
//! deterministic generator, and a runner that applies random operations
//! to a uext4 image and to the model and compares them (see
//! tests/random_ops.rs for what it checks). tests/compat_matrix.rs runs
//! it on images other tools made, starting from the tree they hold.
#![allow(dead_code)]

use super::rw_support::{fsck_clean, have, kernel_unavailable, mkfs, KernelMount};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use uext4::inode_api::{FallocMode, RenameFlags, SetAttr};
use uext4::{Error, FileType, Filesystem};
pub const ROOT: u32 = 2;
pub const LOST_FOUND: &[u8] = b"lost+found";
/// Full tree comparison period (in operations).
pub const CHECK_EVERY: usize = 50;
/// Operations per seed.
pub const OPS: usize = 500;
/// Files never grow past this (the model holds contents in memory).
pub const MAX_FILE: u64 = 12 << 20;

// ---------------------------------------------------------------------------
// Deterministic generator
// ---------------------------------------------------------------------------

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03);
        if r.0 == 0 {
            r.0 = 1;
        }
        for _ in 0..8 {
            r.next();
        }
        r
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<T: Clone>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize].clone()
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
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
pub enum Node {
    File(Vec<u8>),
    Dir(BTreeMap<Vec<u8>, u32>),
    Symlink(Vec<u8>),
}

#[derive(Clone, Debug)]
pub struct MInode {
    node: Node,
    /// Names of a non-directory (directories count their subdirectories).
    links: u32,
}

#[derive(Clone, Debug, Default)]
pub struct Model {
    inodes: BTreeMap<u32, MInode>,
}

impl Model {
    pub fn new(lost_found: u32) -> Model {
        let mut m = Model::default();
        m.inodes.insert(ROOT, MInode { node: Node::Dir(BTreeMap::new()), links: 0 });
        m.inodes.insert(lost_found, MInode { node: Node::Dir(BTreeMap::new()), links: 0 });
        m.dir_mut(ROOT).insert(LOST_FOUND.to_vec(), lost_found);
        m
    }

    pub fn node(&self, ino: u32) -> &Node {
        &self.inodes[&ino].node
    }

    pub fn dir(&self, ino: u32) -> &BTreeMap<Vec<u8>, u32> {
        match self.node(ino) {
            Node::Dir(c) => c,
            n => panic!("model: inode {ino} is not a directory: {n:?}"),
        }
    }

    pub fn dir_mut(&mut self, ino: u32) -> &mut BTreeMap<Vec<u8>, u32> {
        match &mut self.inodes.get_mut(&ino).unwrap().node {
            Node::Dir(c) => c,
            _ => panic!("model: inode {ino} is not a directory"),
        }
    }

    pub fn file_mut(&mut self, ino: u32) -> &mut Vec<u8> {
        match &mut self.inodes.get_mut(&ino).unwrap().node {
            Node::File(d) => d,
            _ => panic!("model: inode {ino} is not a file"),
        }
    }

    pub fn file(&self, ino: u32) -> &Vec<u8> {
        match self.node(ino) {
            Node::File(d) => d,
            _ => panic!("model: inode {ino} is not a file"),
        }
    }

    pub fn is_dir(&self, ino: u32) -> bool {
        matches!(self.node(ino), Node::Dir(_))
    }

    pub fn lookup(&self, dir: u32, name: &[u8]) -> Option<u32> {
        self.dir(dir).get(name).copied()
    }

    pub fn nlink(&self, ino: u32) -> u32 {
        match self.node(ino) {
            Node::Dir(c) => 2 + c.values().filter(|&&i| self.is_dir(i)).count() as u32,
            _ => self.inodes[&ino].links,
        }
    }

    /// Every directory, root first.
    pub fn dirs(&self) -> Vec<u32> {
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
    pub fn entries(&self) -> Vec<(u32, Vec<u8>, u32)> {
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
    pub fn files(&self) -> Vec<u32> {
        self.inodes.iter().filter(|(_, i)| matches!(i.node, Node::File(_))).map(|(&k, _)| k).collect()
    }

    /// True if directory `x` is `top` or lies below it.
    pub fn within(&self, top: u32, x: u32) -> bool {
        if top == x {
            return true;
        }
        if !self.is_dir(top) {
            return false;
        }
        self.dir(top).values().any(|&c| self.is_dir(c) && self.within(c, x))
    }

    /// Adds the name `dir/name` for `ino` (a new inode when `node` is Some).
    pub fn add(&mut self, dir: u32, name: &[u8], ino: u32, node: Option<Node>) {
        match node {
            Some(n) => {
                assert!(self.inodes.insert(ino, MInode { node: n, links: 1 }).is_none(), "inode {ino} reused live");
            }
            None => self.inodes.get_mut(&ino).unwrap().links += 1,
        }
        assert!(self.dir_mut(dir).insert(name.to_vec(), ino).is_none());
    }

    /// Removes the name `dir/name`; the inode goes with its last name.
    pub fn remove(&mut self, dir: u32, name: &[u8]) {
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

    pub fn path_of(&self, ino: u32) -> String {
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

pub struct Cfg {
    pub name: &'static str,
    pub size_mb: u64,
    pub args: &'static [&'static str],
    pub seeds: std::ops::Range<u64>,
    /// Small image: ENOSPC is expected to happen at least once.
    pub small: bool,
}

#[derive(Default, Debug)]
pub struct Stats {
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
    pub fn add(&mut self, o: &Stats) {
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

pub enum Outcome<T> {
    Done(T),
    /// Failed with an expected errno.
    Refused,
    NoSpace,
}

pub struct Runner {
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
    read_back: ReadBack,
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
pub fn show(name: &[u8]) -> String {
    let s = String::from_utf8_lossy(name);
    if s.len() > 12 {
        format!("{}..({})", &s[..7], s.len())
    } else {
        s.into_owned()
    }
}

impl Runner {
    pub fn fs(&self) -> &Filesystem {
        self.fs.as_ref().unwrap()
    }

    pub fn tag(&self) -> String {
        format!("[{} seed {} step {}]", self.cfg_name, self.seed, self.step)
    }

    pub fn log(&mut self, s: String) {
        if self.hist.len() == 40 {
            self.hist.pop_front();
        }
        self.hist.push_back(format!("{:4}: {s}", self.step));
    }

    /// Classifies `r` against the errnos the model allows (none: success
    /// expected). ENOSPC is always allowed when success is expected.
    pub fn outcome<T>(&mut self, r: Result<T, Error>, allowed: &[i32], what: &str) -> Outcome<T> {
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
    pub fn name(&mut self) -> Vec<u8> {
        if self.rng.chance(10) {
            let k = self.rng.below(6) as usize;
            let mut n = format!("long{k}-").into_bytes();
            n.resize(40 + 42 * k, b'a' + k as u8);
            n
        } else {
            format!("n{}", self.rng.below(14)).into_bytes()
        }
    }

    pub fn pick_dir(&mut self) -> u32 {
        let d = self.m.dirs();
        self.rng.pick(&d)
    }

    pub fn pick_entry(&mut self) -> Option<(u32, Vec<u8>, u32)> {
        let e = self.m.entries();
        (!e.is_empty()).then(|| self.rng.pick(&e))
    }

    pub fn pick_file(&mut self) -> Option<u32> {
        let f = self.m.files();
        (!f.is_empty()).then(|| self.rng.pick(&f))
    }

    // --- namespace operations -------------------------------------------

    pub fn op_create(&mut self) {
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

    pub fn op_link(&mut self) {
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

    pub fn op_unlink(&mut self) {
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

    pub fn op_rmdir(&mut self) {
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

    pub fn op_rename(&mut self) {
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

    pub fn op_write(&mut self) {
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
    pub fn finish_write(&mut self, ino: u32, off: u64, data: &[u8], r: Result<usize, Error>) {
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
            Outcome::Refused => self.check_file(ino),
        }
    }

    pub fn op_truncate(&mut self) {
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
            Outcome::Refused => self.check_file(ino),
        }
    }

    pub fn op_fallocate(&mut self) {
        let Some(ino) = self.pick_file() else { return };
        if self.rng.chance(20) {
            return self.op_shift(ino);
        }
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
                    // Not picked here (op_shift).
                    FallocMode::KeepSize | FallocMode::CollapseRange | FallocMode::InsertRange => {}
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

    /// fallocate COLLAPSE_RANGE or INSERT_RANGE of whole clusters inside
    /// the file (refused on block-mapped files, as on Linux).
    pub fn op_shift(&mut self, ino: u32) {
        let size = self.m.file(ino).len() as u64;
        let unit = self.fs().superblock().cluster_size().max(self.bs);
        let units = size / unit;
        let insert = self.rng.chance(50);
        if units < 2 || (insert && size + 64 * unit > MAX_FILE) {
            return;
        }
        let (mode, off, len) = if insert {
            (FallocMode::InsertRange, self.rng.below(units) * unit, self.rng.range(1, 64) * unit)
        } else {
            let off = self.rng.below(units - 1) * unit;
            (FallocMode::CollapseRange, off, self.rng.range(1, (units - off / unit - 1).clamp(1, 64)) * unit)
        };
        self.log(format!("fallocate {mode:?} {} (inode {ino}, size {size}) at {off} len {len}", self.m.path_of(ino)));
        let r = self.fs().fallocate(ino, mode, off, len);
        let allowed: &[i32] = if self.blockmap { &[libc::EOPNOTSUPP] } else { &[] };
        match self.outcome(r, allowed, "fallocate") {
            Outcome::Done(()) => {
                let f = self.m.file_mut(ino);
                let (a, b) = (off as usize, (off + len) as usize);
                if insert {
                    f.splice(a..a, std::iter::repeat_n(0u8, b - a));
                } else {
                    f.drain(a..b);
                }
                self.check_file(ino);
            }
            Outcome::NoSpace => {
                // As on Linux, a shift that ran out of space part-way
                // stays part-done (the image consistent): the model takes
                // what the filesystem did.
                *self.m.file_mut(ino) = self.fs().read_all(ino).unwrap();
            }
            Outcome::Refused => self.check_file(ino),
        }
    }

    /// A large append (fills small images: ENOSPC).
    pub fn op_fill(&mut self) {
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

    pub fn op_read(&mut self) {
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
    pub fn op_relieve(&mut self) {
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

    pub fn reopen(&mut self) {
        self.log("unmount + fsck + open_rw".into());
        self.stats.reopens += 1;
        let mut fs = self.fs.take().unwrap();
        fs.unmount().unwrap_or_else(|e| panic!("{} unmount: {e}", self.tag()));
        drop(fs);
        fsck_clean(&self.img);
        self.fs = Some(Filesystem::open_rw(&self.img).unwrap_or_else(|e| panic!("{} open_rw: {e}", self.tag())));
        self.check_tree(true);
    }

    pub fn step_once(&mut self) {
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

    pub fn check_file(&self, ino: u32) {
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
    pub fn check_tree(&self, contents: bool) {
        let mut seen = BTreeSet::new();
        self.check_dir(ROOT, ROOT, contents, &mut seen);
        let want: BTreeSet<u32> = self.m.inodes.keys().copied().collect();
        assert_eq!(seen, want, "{} reachable inodes", self.tag());
    }

    pub fn check_dir(&self, dir: u32, parent: u32, contents: bool, seen: &mut BTreeSet<u32>) {
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
    pub fn check_kernel_dir(&self, dir: u32, path: &Path) {
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
            if self.read_back == ReadBack::Kernel {
                assert_eq!(md.ino(), u64::from(ino), "{tag} kernel: inode of {p:?}");
                assert_eq!(md.nlink(), u64::from(self.m.nlink(ino)), "{tag} kernel: link count of {p:?}");
            }
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

    pub fn kernel_check(&mut self) {
        if self.read_back == ReadBack::Debugfs {
            let out = rdump(&self.img);
            self.check_kernel_dir(ROOT, out.path());
            return;
        }
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

pub fn run_seed(cfg: &Cfg, seed: u64, ops: usize) -> Option<Stats> {
    let (_dir, img) = mkfs(cfg.size_mb, cfg.args)?;
    let fs = Filesystem::open_rw(&img).unwrap();
    let lf = fs.lookup(ROOT, LOST_FOUND).unwrap();
    Some(run_from(cfg.name, seed, ops, &img, fs, Model::new(lf), ReadBack::Kernel))
}

/// Who reads the final image back to compare it with the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadBack {
    /// The kernel's ext4 mount (root and loop devices; skipped otherwise).
    Kernel,
    /// e2fsprogs: `debugfs -R "rdump / DIR"`, for feature sets this
    /// kernel cannot mount (casefold without CONFIG_UNICODE, quota without
    /// QFMT_V2). Inode numbers and link counts are not compared then.
    Debugfs,
}

/// Runs `ops` random operations on `fs` (open read-write on `img`, whose
/// tree `m` describes), checking the tree against the model as it goes;
/// at the end unmounts, runs `e2fsck -fn`, reopens read-only and compares
/// again, and has `read_back` compare the image with the model.
pub fn run_from(
    name: &'static str,
    seed: u64,
    ops: usize,
    img: &Path,
    fs: Filesystem,
    m: Model,
    read_back: ReadBack,
) -> Stats {
    let bs = u64::from(fs.block_size());
    let fs_has_extents = fs.superblock().features.has_incompat(uext4::format::features::incompat::EXTENTS);
    let img = img.to_path_buf();
    let mut r = Runner {
        cfg_name: name,
        seed,
        rng: Rng::new(seed),
        img: img.clone(),
        fs: Some(fs),
        m,
        bs,
        step: 0,
        hist: VecDeque::new(),
        stats: Stats::default(),
        pressure: 0,
        read_back,
        blockmap: !fs_has_extents,
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
    std::mem::take(&mut r.stats)
}

pub fn run_cfg(cfg: &Cfg) {
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

/// The tree of `img` as e2fsprogs sees it, dumped into a fresh host
/// directory by `debugfs -R "rdump / DIR"`.
pub fn rdump(img: &Path) -> tempfile::TempDir {
    let out = tempfile::tempdir().unwrap();
    let cmd = format!("rdump / {}", out.path().display());
    let o = Command::new("debugfs").arg("-R").arg(&cmd).arg(img).output().unwrap();
    assert!(o.status.success(), "debugfs {cmd}: {}", String::from_utf8_lossy(&o.stderr));
    out
}

impl Model {
    /// The model of the tree `fs` holds now, read through uext4 (callers
    /// first check that tree against an independent oracle).
    pub fn load(fs: &Filesystem) -> Model {
        let mut m = Model::default();
        m.inodes.insert(ROOT, MInode { node: Node::Dir(BTreeMap::new()), links: 0 });
        let mut todo = vec![ROOT];
        while let Some(dir) = todo.pop() {
            for e in fs.read_dir_all(dir).unwrap() {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                if let Some(i) = m.inodes.get_mut(&e.ino) {
                    i.links += 1;
                } else {
                    let st = fs.stat(e.ino).unwrap();
                    let node = match st.file_type {
                        FileType::Directory => {
                            todo.push(e.ino);
                            Node::Dir(BTreeMap::new())
                        }
                        FileType::Symlink => Node::Symlink(fs.readlink(e.ino).unwrap()),
                        FileType::Regular => Node::File(fs.read_all(e.ino).unwrap()),
                        t => panic!("Model::load: inode {} has type {t:?}, which the model lacks", e.ino),
                    };
                    m.inodes.insert(e.ino, MInode { node, links: 1 });
                }
                m.dir_mut(dir).insert(e.name.clone(), e.ino);
            }
        }
        m
    }

    /// Asserts that host directory `path` holds the tree below `dir`
    /// (names, types, contents, symlink targets; hard links by content).
    pub fn assert_same_as_host(&self, dir: u32, path: &Path) {
        let mut names = BTreeMap::new();
        for e in std::fs::read_dir(path).unwrap() {
            let e = e.unwrap();
            names.insert(e.file_name().as_bytes().to_vec(), e.path());
        }
        let want = self.dir(dir);
        let got: Vec<_> = names.keys().map(|n| show(n)).collect();
        let exp: Vec<_> = want.keys().filter(|n| !(dir == ROOT && *n == LOST_FOUND)).map(|n| show(n)).collect();
        let got: Vec<_> = got.into_iter().filter(|n| !(dir == ROOT && n == "lost+found")).collect();
        assert_eq!(exp, got, "names in {path:?}");
        for (name, p) in &names {
            if dir == ROOT && name == LOST_FOUND {
                continue;
            }
            let md = std::fs::symlink_metadata(p).unwrap();
            match self.node(want[name]) {
                Node::File(d) => assert!(md.is_file() && std::fs::read(p).unwrap() == *d, "contents of {p:?}"),
                Node::Symlink(t) => {
                    assert_eq!(std::fs::read_link(p).unwrap().as_os_str().as_bytes(), &t[..], "target of {p:?}")
                }
                Node::Dir(_) => {
                    assert!(md.is_dir(), "{p:?} is not a directory");
                    self.assert_same_as_host(want[name], p);
                }
            }
        }
    }
}
