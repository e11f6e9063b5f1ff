//! The null backend: an in-memory tree served through uext4's own FUSE
//! layer (the same handshake and INIT negotiation, the same mount
//! options, dispatcher, transports and threads as [`crate::Uext4Fuse`]),
//! doing no engine work. A workload run on it shows what the protocol and
//! the transport allow ("the ceiling"): run three ways, on the kernel's
//! ext4, on this and on uext4, it tells for each gap how much is FUSE and
//! how much is the engine (`uext4 mount-null`, `bench/fio-compare.sh`).
//!
//! What it keeps: inodes in a sharded map, each behind its own lock;
//! directories as a hash map of names and a cookie order for
//! READDIR/READDIRPLUS offsets; attributes (type, mode, owner, size,
//! times, link count, device); small extended attributes; file data as
//! sparse 4 KiB pages up to a cap ([`NullFs::new`]). Past the cap,
//! writes into pages not stored yet are accepted and dropped, and reading
//! a page never stored returns zeros (as a hole does), so that large
//! benchmarks can run on it; below it the data reads back as written (tar,
//! git, fio's verify). Access times are not updated by reads, nothing is
//! durable (fsync is a no-op) and `statfs` reports the cap.
//!
//! It answers as uext4 does where the kernel's behaviour depends on the
//! answer: the same entry, attribute and negative-entry lifetimes, the
//! same open flags ([`crate::KernelFeatures::fopen`]), "." and ".." in
//! listings, FLUSH refused once with ENOSYS, and every READ served on the
//! io_uring queue thread that received it (its data is always in memory).
//! Locks: a node's lock is the only one held while serving, except where
//! one request changes several nodes (link, rmdir, rename): those are
//! locked in increasing inode order. A shard's lock is taken alone.

mod requests;

use crate::proto::request::Read;
use crate::proto::types::{Errno, FileAttr, FileType, Generation, INodeNo, RenameFlags, Request};
use crate::reply::ReplyEntry;
use crate::{KernelFeatures, MountConfig};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime};

/// The root's node id (FUSE_ROOT_ID).
const ROOT: u64 = 1;
/// Bytes per stored page of file data.
const PAGE: u64 = 4096;
/// Shards of the inode map: enough that threads creating or looking up
/// different inodes rarely meet on one.
const SHARDS: usize = 64;
/// Longest name, as ext4's.
const NAME_MAX: usize = 255;
/// Cookies of "." and ".."; the entries of a directory take the ones
/// after these.
const DOT: u64 = 1;
const DOTDOT: u64 = 2;
/// Inodes reported by `statfs`, as a large ext4 would.
const FILES: u64 = 1 << 32;

/// The default data cap: a quarter of the machine's memory (1 GiB if
/// /proc/meminfo cannot tell).
pub fn default_data_cap() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
        line.split_whitespace().nth(1)?.parse::<u64>().ok()
    });
    total.map_or(1 << 30, |kib| kib * 1024 / 4)
}

/// What a node holds besides its attributes.
#[derive(Debug)]
enum Body {
    /// Stored pages of data, by page index.
    File(HashMap<u64, Box<[u8]>>),
    Dir(Dir),
    Symlink(Vec<u8>),
    /// FIFOs, sockets, devices.
    Special,
}

/// A directory's entries.
#[derive(Debug)]
struct Dir {
    /// The node of "..".
    parent: u64,
    /// Name to (node, cookie).
    names: HashMap<Vec<u8>, (u64, u64)>,
    /// Cookie to (name, node, type): the listing order.
    order: BTreeMap<u64, (Vec<u8>, u64, FileType)>,
    /// The next entry's cookie.
    next: u64,
}

impl Dir {
    fn new(parent: u64) -> Dir {
        Dir { parent, names: HashMap::new(), order: BTreeMap::new(), next: DOTDOT + 1 }
    }

    fn insert(&mut self, name: &[u8], ino: u64, kind: FileType) {
        let cookie = self.next;
        self.next += 1;
        self.names.insert(name.to_vec(), (ino, cookie));
        self.order.insert(cookie, (name.to_vec(), ino, kind));
    }

    fn remove(&mut self, name: &[u8]) -> Option<u64> {
        let (ino, cookie) = self.names.remove(name)?;
        self.order.remove(&cookie);
        Some(ino)
    }

    fn get(&self, name: &[u8]) -> Option<u64> {
        self.names.get(name).map(|&(ino, _)| ino)
    }
}

/// One inode.
#[derive(Debug)]
struct Node {
    kind: FileType,
    perm: u16,
    uid: u32,
    gid: u32,
    size: u64,
    atime: SystemTime,
    mtime: SystemTime,
    ctime: SystemTime,
    crtime: SystemTime,
    nlink: u32,
    rdev: u32,
    body: Body,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Node {
    fn new(kind: FileType, perm: u16, uid: u32, gid: u32, body: Body) -> Node {
        let now = SystemTime::now();
        let dir = kind == FileType::Directory;
        let nlink = if dir { 2 } else { 1 };
        Node {
            kind,
            perm,
            uid,
            gid,
            // A directory shows one block's size, as on ext4.
            size: if dir { PAGE } else { 0 },
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            nlink,
            rdev: 0,
            body,
            xattrs: BTreeMap::new(),
        }
    }

    fn attr(&self, ino: u64) -> FileAttr {
        let blocks = match &self.body {
            Body::File(pages) => pages.len() as u64 * (PAGE / 512),
            Body::Dir(_) => PAGE / 512,
            _ => 0,
        };
        FileAttr {
            ino: INodeNo(ino),
            size: self.size,
            blocks,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            crtime: self.crtime,
            kind: self.kind,
            perm: self.perm,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: self.rdev,
            blksize: PAGE as u32,
            flags: 0,
        }
    }

    fn dir(&self) -> Result<&Dir, Errno> {
        match &self.body {
            Body::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    fn dir_mut(&mut self) -> Result<&mut Dir, Errno> {
        match &mut self.body {
            Body::Dir(d) => Ok(d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    /// The set-id bits a write, truncate or chown by an unprivileged
    /// caller removes (FUSE_HANDLE_KILLPRIV_V2 leaves it to the daemon):
    /// set-user-ID, and set-group-ID when group-executable.
    fn kill_suidgid(&mut self) {
        self.perm &= !0o4000;
        if self.perm & 0o010 != 0 {
            self.perm &= !0o2000;
        }
    }

    fn touch_change(&mut self) {
        let now = SystemTime::now();
        self.mtime = now;
        self.ctime = now;
    }
}

/// A node with the kernel's reference count on it (kept outside its lock:
/// LOOKUP counts under a shared lock).
#[derive(Debug)]
struct Cell {
    lookups: AtomicU64,
    node: RwLock<Node>,
}

fn rd<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn wr<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

/// The null backend (see the module documentation): mount it with
/// [`crate::Mount::new_null`] to measure what the FUSE protocol and its
/// transports cost on a workload without the engine (`uext4
/// mount-null`), the ceiling uext4's numbers are compared with.
#[derive(Debug)]
pub struct NullFs {
    features: KernelFeatures,
    want_uring: bool,
    shards: Vec<RwLock<HashMap<u64, Arc<Cell>>>>,
    next_ino: AtomicU64,
    /// Pages of file data stored, and the most that may be.
    pages: AtomicU64,
    cap_pages: u64,
}

impl NullFs {
    /// An empty tree (a root directory owned by root, mode 0755) answering
    /// with the features and lifetimes of `cfg`, storing at most
    /// `data_cap` bytes of file data.
    pub fn new(cfg: &MountConfig, data_cap: u64) -> NullFs {
        let shards = (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect();
        let fs = NullFs {
            features: cfg.kernel.clone(),
            want_uring: false,
            shards,
            next_ino: AtomicU64::new(ROOT + 1),
            pages: AtomicU64::new(0),
            cap_pages: data_cap / PAGE,
        };
        let root = Node::new(FileType::Directory, 0o755, 0, 0, Body::Dir(Dir::new(ROOT)));
        fs.insert(ROOT, root);
        // The kernel holds the root for the whole mount and never forgets it.
        if let Some(c) = fs.cell(ROOT) {
            c.lookups.store(1, Ordering::Relaxed);
        }
        fs
    }

    fn shard(&self, ino: u64) -> &RwLock<HashMap<u64, Arc<Cell>>> {
        &self.shards[(ino as usize) % SHARDS]
    }

    fn insert(&self, ino: u64, node: Node) {
        let cell = Arc::new(Cell { lookups: AtomicU64::new(0), node: RwLock::new(node) });
        wr(self.shard(ino)).insert(ino, cell);
    }

    fn cell(&self, ino: u64) -> Option<Arc<Cell>> {
        rd(self.shard(ino)).get(&ino).cloned()
    }

    fn get(&self, ino: INodeNo) -> Result<Arc<Cell>, Errno> {
        self.cell(ino.0).ok_or(Errno::ENOENT)
    }

    /// Counts the kernel's reference for an entry it is given.
    fn hand_out(&self, cell: &Cell) {
        cell.lookups.fetch_add(1, Ordering::Relaxed);
    }

    /// Frees `ino` once it has no name and the kernel holds no reference.
    fn maybe_free(&self, ino: u64) {
        if ino == ROOT {
            return;
        }
        let Some(c) = self.cell(ino) else { return };
        if c.lookups.load(Ordering::Acquire) != 0 || rd(&c.node).nlink != 0 {
            return;
        }
        if let Some(c) = wr(self.shard(ino)).remove(&ino) {
            if let Body::File(pages) = &rd(&c.node).body {
                self.pages.fetch_sub(pages.len() as u64, Ordering::Relaxed);
            }
        }
    }

    /// Write locks on the nodes `inos` (any order, duplicates allowed),
    /// taken in increasing inode order; the guards follow `inos` sorted
    /// and deduplicated, with their inode numbers.
    fn cells_sorted(&self, inos: &[u64]) -> Result<Vec<(u64, Arc<Cell>)>, Errno> {
        let mut v = inos.to_vec();
        v.sort_unstable();
        v.dedup();
        v.into_iter().map(|i| self.cell(i).map(|c| (i, c)).ok_or(Errno::ENOENT)).collect()
    }

    fn ttl(&self) -> Duration {
        self.features.entry_and_attr_ttl()
    }

    /// Makes a node named `name` in `parent` and answers its attributes
    /// (the kernel's reference counted).
    #[allow(clippy::too_many_arguments)]
    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        kind: FileType,
        mode: u32,
        umask: u32,
        body: Body,
        size: u64,
    ) -> Result<FileAttr, Errno> {
        let name = name.as_bytes();
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let pc = self.get(parent)?;
        let mut p = wr(&pc.node);
        if p.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        let (pgid, psetgid) = (p.gid, p.perm & 0o2000 != 0);
        let d = p.dir_mut()?;
        if d.get(name).is_some() {
            return Err(Errno::EEXIST);
        }
        // FUSE_DONT_MASK leaves the umask to us (no ACLs here).
        let mut perm = (mode & 0o7777 & !(umask & 0o777)) as u16;
        if kind == FileType::Symlink {
            perm = 0o777;
        }
        // A set-group-ID directory gives its group, and its bit to
        // directories, as ext4's.
        let gid = if psetgid { pgid } else { req.gid() };
        if psetgid && kind == FileType::Directory {
            perm |= 0o2000;
        }
        let ino = self.next_ino.fetch_add(1, Ordering::Relaxed);
        let mut n = Node::new(kind, perm, req.uid(), gid, body);
        n.size = size;
        let a = n.attr(ino);
        self.insert(ino, n);
        if let Some(c) = self.cell(ino) {
            self.hand_out(&c);
        }
        d.insert(name, ino, kind);
        if kind == FileType::Directory {
            p.nlink += 1;
        }
        p.touch_change();
        Ok(a)
    }

    fn entry(&self, reply: ReplyEntry, a: &FileAttr) {
        let f = &self.features;
        reply.entry_with_ttls(&f.attr_ttl, &f.entry_ttl, a, Generation(0));
    }

    fn do_unlink(&self, parent: INodeNo, name: &OsStr) -> Result<(), Errno> {
        let pc = self.get(parent)?;
        let ino = {
            let mut p = wr(&pc.node);
            let d = p.dir_mut()?;
            let &(ino, cookie) = d.names.get(name.as_bytes()).ok_or(Errno::ENOENT)?;
            // The type is the entry's (no child lock under the parent's).
            if d.order.get(&cookie).is_some_and(|e| e.2 == FileType::Directory) {
                return Err(Errno::EISDIR);
            }
            d.remove(name.as_bytes());
            p.touch_change();
            ino
        };
        if let Some(c) = self.cell(ino) {
            let mut n = wr(&c.node);
            n.nlink = n.nlink.saturating_sub(1);
            n.ctime = SystemTime::now();
        }
        self.maybe_free(ino);
        Ok(())
    }

    fn do_rmdir(&self, parent: INodeNo, name: &OsStr) -> Result<(), Errno> {
        let name = name.as_bytes();
        if name == b"." {
            return Err(Errno::EINVAL);
        }
        let child = rd(&self.get(parent)?.node).dir()?.get(name).ok_or(Errno::ENOENT)?;
        let cells = self.cells_sorted(&[parent.0, child])?;
        let mut g: Vec<_> = cells.iter().map(|(i, c)| (*i, wr(&c.node))).collect();
        let pi = g.iter().position(|(i, _)| *i == parent.0).ok_or(Errno::ENOENT)?;
        let ci = g.iter().position(|(i, _)| *i == child).ok_or(Errno::ENOENT)?;
        if pi == ci || g[pi].1.dir()?.get(name) != Some(child) {
            // Renamed meanwhile (the kernel's locks make it rare).
            return Err(Errno::ENOENT);
        }
        {
            let c = &mut g[ci].1;
            if !c.dir()?.names.is_empty() {
                return Err(Errno::from_i32(libc::ENOTEMPTY));
            }
            c.nlink = 0;
            c.ctime = SystemTime::now();
        }
        let p = &mut g[pi].1;
        p.dir_mut()?.remove(name);
        p.nlink = p.nlink.saturating_sub(1);
        p.touch_change();
        drop(g);
        self.maybe_free(child);
        Ok(())
    }

    fn do_rename(
        &self,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        let (name, newname) = (name.as_bytes(), newname.as_bytes());
        if newname.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        if !(RenameFlags::RENAME_NOREPLACE | RenameFlags::RENAME_EXCHANGE).contains(flags) {
            return Err(Errno::EINVAL);
        }
        let exchange = flags.contains(RenameFlags::RENAME_EXCHANGE);
        let (op, np) = (parent.0, newparent.0);
        let src = rd(&self.get(parent)?.node).dir()?.get(name).ok_or(Errno::ENOENT)?;
        let dst = rd(&self.get(newparent)?.node).dir()?.get(newname);
        if dst == Some(src) {
            // Two names of one inode: nothing to do (POSIX).
            return Ok(());
        }
        if exchange && dst.is_none() {
            return Err(Errno::ENOENT);
        }
        if flags.contains(RenameFlags::RENAME_NOREPLACE) && dst.is_some() {
            return Err(Errno::EEXIST);
        }
        let mut inos = vec![op, np, src];
        inos.extend(dst);
        let cells = self.cells_sorted(&inos)?;
        let mut g: Vec<_> = cells.iter().map(|(i, c)| (*i, wr(&c.node))).collect();
        let at = |g: &[(u64, RwLockWriteGuard<'_, Node>)], ino: u64| g.iter().position(|(i, _)| *i == ino);
        let (opi, npi, si) = (at(&g, op), at(&g, np), at(&g, src));
        let (Some(opi), Some(npi), Some(si)) = (opi, npi, si) else { return Err(Errno::ENOENT) };
        // Changed between the lookups and the locks (the kernel's locks
        // make it rare): refused rather than retried.
        if g[opi].1.dir()?.get(name) != Some(src) || g[npi].1.dir()?.get(newname) != dst {
            return Err(Errno::ENOENT);
        }
        let skind = g[si].1.kind;
        let now = SystemTime::now();
        let mut freed = None;
        if exchange {
            let Some(d) = dst else { return Err(Errno::ENOENT) };
            let di = at(&g, d).ok_or(Errno::ENOENT)?;
            let dkind = g[di].1.kind;
            g[opi].1.dir_mut()?.remove(name);
            g[npi].1.dir_mut()?.remove(newname);
            g[opi].1.dir_mut()?.insert(name, d, dkind);
            g[npi].1.dir_mut()?.insert(newname, src, skind);
            if op != np {
                for (moved, kind, to) in [(si, skind, np), (di, dkind, op)] {
                    if kind == FileType::Directory {
                        g[moved].1.dir_mut()?.parent = to;
                    }
                }
                let diff = i64::from(skind == FileType::Directory) - i64::from(dkind == FileType::Directory);
                g[opi].1.nlink = (i64::from(g[opi].1.nlink) - diff) as u32;
                g[npi].1.nlink = (i64::from(g[npi].1.nlink) + diff) as u32;
            }
            g[di].1.ctime = now;
        } else {
            if let Some(d) = dst {
                let di = at(&g, d).ok_or(Errno::ENOENT)?;
                let t = &mut g[di].1;
                match (skind == FileType::Directory, t.kind == FileType::Directory) {
                    (true, false) => return Err(Errno::ENOTDIR),
                    (false, true) => return Err(Errno::EISDIR),
                    (true, true) if !t.dir()?.names.is_empty() => return Err(Errno::from_i32(libc::ENOTEMPTY)),
                    _ => {}
                }
                if t.kind == FileType::Directory {
                    t.nlink = 0;
                    g[npi].1.nlink = g[npi].1.nlink.saturating_sub(1);
                } else {
                    t.nlink = t.nlink.saturating_sub(1);
                }
                g[di].1.ctime = now;
                g[npi].1.dir_mut()?.remove(newname);
                freed = Some(d);
            }
            g[opi].1.dir_mut()?.remove(name);
            g[npi].1.dir_mut()?.insert(newname, src, skind);
            if skind == FileType::Directory && op != np {
                g[si].1.dir_mut()?.parent = np;
                g[opi].1.nlink = g[opi].1.nlink.saturating_sub(1);
                g[npi].1.nlink += 1;
            }
        }
        g[si].1.ctime = now;
        g[opi].1.touch_change();
        g[npi].1.touch_change();
        drop(g);
        if let Some(d) = freed {
            self.maybe_free(d);
        }
        Ok(())
    }

    fn do_link(&self, ino: INodeNo, newparent: INodeNo, newname: &OsStr) -> Result<FileAttr, Errno> {
        let newname = newname.as_bytes();
        if newname.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        let cells = self.cells_sorted(&[ino.0, newparent.0])?;
        if cells.len() < 2 {
            return Err(Errno::EPERM);
        }
        let mut g: Vec<_> = cells.iter().map(|(i, c)| (*i, wr(&c.node))).collect();
        let (ti, pi) = if g[0].0 == ino.0 { (0, 1) } else { (1, 0) };
        if g[ti].1.kind == FileType::Directory {
            return Err(Errno::EPERM);
        }
        if g[ti].1.nlink == 0 || g[pi].1.nlink == 0 {
            return Err(Errno::ENOENT);
        }
        let kind = g[ti].1.kind;
        let d = g[pi].1.dir_mut()?;
        if d.get(newname).is_some() {
            return Err(Errno::EEXIST);
        }
        d.insert(newname, ino.0, kind);
        g[pi].1.touch_change();
        let t = &mut g[ti].1;
        t.nlink += 1;
        t.ctime = SystemTime::now();
        let a = t.attr(ino.0);
        drop(g);
        if let Some((_, c)) = cells.iter().find(|(i, _)| *i == ino.0) {
            self.hand_out(c);
        }
        Ok(a)
    }

    /// Copies what `ino` holds at `offset` into `buf` (zeros where no page
    /// is stored), up to its size.
    fn read_into(&self, ino: INodeNo, offset: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        let c = self.get(ino)?;
        let n = rd(&c.node);
        let Body::File(pages) = &n.body else { return Err(Errno::EISDIR) };
        if offset >= n.size {
            return Ok(0);
        }
        let len = (n.size - offset).min(buf.len() as u64) as usize;
        let mut done = 0;
        while done < len {
            let pos = offset + done as u64;
            let (idx, at) = (pos / PAGE, (pos % PAGE) as usize);
            let k = (PAGE as usize - at).min(len - done);
            match pages.get(&idx) {
                Some(p) => buf[done..done + k].copy_from_slice(&p[at..at + k]),
                None => buf[done..done + k].fill(0),
            }
            done += k;
        }
        Ok(len)
    }

    fn do_write(&self, ino: INodeNo, offset: u64, data: &[u8], kill: bool) -> Result<u32, Errno> {
        let c = self.get(ino)?;
        let mut n = wr(&c.node);
        let end = offset.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
        let Body::File(pages) = &mut n.body else { return Err(Errno::EISDIR) };
        let mut done = 0;
        while done < data.len() {
            let pos = offset + done as u64;
            let (idx, at) = (pos / PAGE, (pos % PAGE) as usize);
            let k = (PAGE as usize - at).min(data.len() - done);
            let page = match pages.get_mut(&idx) {
                Some(p) => Some(p),
                // Past the cap the bytes are dropped (read back as zeros).
                None if self.pages.fetch_add(1, Ordering::Relaxed) < self.cap_pages => {
                    Some(pages.entry(idx).or_insert_with(|| vec![0u8; PAGE as usize].into_boxed_slice()))
                }
                None => {
                    self.pages.fetch_sub(1, Ordering::Relaxed);
                    None
                }
            };
            if let Some(p) = page {
                p[at..at + k].copy_from_slice(&data[done..done + k]);
            }
            done += k;
        }
        n.size = n.size.max(end);
        n.touch_change();
        if kill {
            n.kill_suidgid();
        }
        Ok(data.len() as u32)
    }

    /// Drops the stored bytes of `[start, end)` of a file: whole pages
    /// go, partial ones are zeroed.
    fn zero_range(&self, pages: &mut HashMap<u64, Box<[u8]>>, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let first_whole = start.div_ceil(PAGE);
        let last_whole = end / PAGE;
        let before = pages.len();
        pages.retain(|&i, _| i < first_whole || i >= last_whole);
        self.pages.fetch_sub((before - pages.len()) as u64, Ordering::Relaxed);
        for idx in [start / PAGE, end.saturating_sub(1) / PAGE] {
            if let Some(p) = pages.get_mut(&idx) {
                let lo = start.max(idx * PAGE) - idx * PAGE;
                let hi = end.min((idx + 1) * PAGE) - idx * PAGE;
                if lo < hi {
                    p[lo as usize..hi as usize].fill(0);
                }
            }
        }
    }
}

impl crate::Backend for NullFs {
    fn set_want_uring(&mut self, on: bool) {
        self.want_uring = on;
    }

    /// Every READ: the data is in memory.
    fn read_fast(&self, read: &Read, buf: &mut [u8]) -> Option<Result<usize, Errno>> {
        Some(self.read_into(read.ino, read.offset, buf))
    }
}
