//! The write-path fuzz script, shared by the fuzz target
//! (fuzz/fuzz_targets/write_script.rs includes this file) and its
//! deterministic CI slice (crates/uext4/tests/corrupt_write.rs).
//!
//! [`run`] opens an image (typically a damaged one) read-write from memory
//! and runs a fixed script of changes on it: creating, writing (buffered
//! and direct), mkdir, symlink, link, rename (plain and replacing),
//! unlink, rmdir, truncate, setxattr/removexattr, fallocate (allocate,
//! keep-size, punch, zero), fsync, commit, sync and unmount, on new files
//! and on the objects the image already has. Errors are expected; a panic,
//! a hang, or a write outside the filesystem's blocks is a finding.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use uext4::format::superblock::{Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use uext4::inode_api::{FallocMode, RenameFlags, SetAttr, XattrSetMode};
use uext4::{BlockDevice, FileType, Filesystem, MemoryDevice, MountOptions};

/// A memory device that refuses (and counts) writes outside
/// `0..limit`, the bytes the superblock says the filesystem has.
pub struct GuardDevice {
    inner: MemoryDevice,
    limit: u64,
    outside: AtomicU64,
    writes: AtomicU64,
}

impl GuardDevice {
    /// A device holding `image`; writes must stay below the filesystem's
    /// size as its superblock gives it (the whole image if it has none).
    pub fn new(image: &[u8]) -> GuardDevice {
        let size = image.len() as u64;
        let limit = image
            .get(SUPERBLOCK_OFFSET as usize..SUPERBLOCK_OFFSET as usize + SUPERBLOCK_SIZE)
            .and_then(|raw| Superblock::parse(raw).ok())
            .and_then(|sb| sb.blocks_count.checked_mul(u64::from(sb.block_size())))
            .map_or(size, |b| b.min(size));
        GuardDevice {
            inner: MemoryDevice::from_bytes(image),
            limit,
            outside: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        }
    }

    /// Writes refused for falling outside the filesystem.
    pub fn outside(&self) -> u64 {
        self.outside.load(Ordering::Relaxed)
    }

    /// Writes that reached the device.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// The device's contents.
    pub fn image(&self) -> Vec<u8> {
        self.inner.to_vec()
    }
}

impl BlockDevice for GuardDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let inside = offset.checked_add(buf.len() as u64).is_some_and(|end| end <= self.limit);
        if !inside {
            self.outside.fetch_add(1, Ordering::Relaxed);
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_only(&self) -> bool {
        false
    }
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Why the read-write open failed, if it did.
    pub open_error: Option<String>,
    /// Operations that succeeded.
    pub ok: usize,
    /// Failed operations by errno.
    pub errors: BTreeMap<i32, usize>,
    /// Whether the final unmount succeeded.
    pub unmounted: bool,
    /// Writes refused for falling outside the filesystem.
    pub outside: u64,
}

impl Outcome {
    fn note<T>(&mut self, r: uext4::Result<T>) -> Option<T> {
        match r {
            Ok(v) => {
                self.ok += 1;
                Some(v)
            }
            Err(e) => {
                *self.errors.entry(e.errno()).or_default() += 1;
                None
            }
        }
    }
}

/// Open options of a fuzz run: small caches, no background commit, no
/// MMP wait (a damaged superblock may turn MMP on).
pub fn options() -> MountOptions {
    MountOptions {
        write: true,
        cache_blocks: 256,
        cache_bytes: 8 << 20,
        commit_interval: Duration::from_secs(3600),
        mmp_wait: Some(Duration::ZERO),
        ..MountOptions::default()
    }
}

/// `len` bytes derived from `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Opens `dev` read-write and runs the script (see the module comment);
/// `seed` varies the data and a few sizes.
pub fn run(dev: Arc<GuardDevice>, seed: u64) -> Outcome {
    let mut out = Outcome::default();
    let mut fs = match Filesystem::open_device(dev.clone(), options()) {
        Ok(fs) => fs,
        Err(e) => {
            out.open_error = Some(e.to_string());
            out.outside = dev.outside();
            return out;
        }
    };
    script(&fs, &mut out, seed);
    out.unmounted = out.note(fs.unmount()).is_some();
    drop(fs);
    out.outside = dev.outside();
    out
}

/// Paths of the corruption suite's images, tried on every image.
const KNOWN: &[&str] = &["/small.txt", "/d", "/d/f4", "/frag", "/htree", "/big", "/fast", "/slow", "/fifo"];

fn script(fs: &Filesystem, o: &mut Outcome, seed: u64) {
    let root = fs.root();
    let data = pattern(seed, 24 << 10);
    let bs = u64::from(fs.block_size());

    // What the image already has: the known paths and the first entries
    // of the root.
    let mut existing: Vec<(u32, u32, Vec<u8>)> = Vec::new(); // (parent, ino, name)
    for p in KNOWN {
        let (dir, name) = p.rsplit_once('/').unwrap_or(("", p));
        let parent = if dir.is_empty() { Some(root) } else { o.note(fs.resolve(dir)) };
        if let Some(parent) = parent {
            if let Some(ino) = o.note(fs.lookup(parent, name.as_bytes())) {
                existing.push((parent, ino, name.as_bytes().to_vec()));
            }
        }
    }
    if let Some(page) = o.note(fs.readdir(root, 0, 24)) {
        for e in page.into_iter().filter(|e| e.name != b"." && e.name != b"..") {
            if !existing.iter().any(|x| x.1 == e.ino) {
                existing.push((root, e.ino, e.name));
            }
        }
    }

    // New objects.
    let a = o.note(fs.create(root, b"fz-a", 0o644, 0, 0)).map(|s| s.ino);
    if let Some(a) = a {
        o.note(fs.inodes().write(a, 0, &data[..5000]));
        o.note(fs.inodes().write(a, (3 << 20) + (seed % 4096), &data[..3000]));
        o.note(fs.fsync(a));
    }
    let d = o.note(fs.mkdir(root, b"fz-d", 0o755, 0, 0)).map(|s| s.ino);
    if let (Some(a), Some(d)) = (a, d) {
        o.note(fs.create(d, b"x", 0o600, 0, 0));
        o.note(fs.inodes().symlink(d, b"s", b"../fz-a", 0, 0));
        o.note(fs.inodes().symlink(d, b"long", &[b'l'; 300], 0, 0));
        o.note(fs.link(a, d, b"a2"));
        o.note(fs.inodes().rename(root, b"fz-a", d, b"y", RenameFlags::default()));
        o.note(fs.inodes().rename(d, b"y", d, b"x", RenameFlags::default()));
        o.note(fs.mknod(d, b"fifo", 0o10644, (0, 0), 0, 0));
        // Enough names to grow the directory past one block (an htree).
        for i in 0..(bs / 16) {
            o.note(fs.create(d, format!("grow-{i:04}-{}", "n".repeat(8)).as_bytes(), 0o644, 0, 0));
        }
        for i in (0..(bs / 16)).step_by(3) {
            o.note(fs.unlink(d, format!("grow-{i:04}-{}", "n".repeat(8)).as_bytes()));
        }
        o.note(fs.setattr(a, SetAttr { size: Some(1 << 20), ..Default::default() }));
        o.note(fs.fallocate(a, FallocMode::Allocate, 0, 64 << 10));
        o.note(fs.write_direct(a, bs * 3, &data[..(bs as usize) * 2]));
        o.note(fs.fallocate(a, FallocMode::PunchHole, bs, bs * 4));
        o.note(fs.fallocate(a, FallocMode::ZeroRange, 100, bs * 2));
        o.note(fs.set_xattr(a, b"user.fz", &data[..64], XattrSetMode::Any));
        o.note(fs.set_xattr(a, b"user.fz-big", &data[..1500], XattrSetMode::Any));
        o.note(fs.remove_xattr(a, b"user.fz"));
    }
    o.note(fs.commit());

    // Changes to what the image had. Each object is looked up again by
    // name: an earlier step may have removed it, and its number then names
    // a free inode (or its next owner).
    for (k, (parent, ino, name)) in existing.iter().enumerate() {
        if o.note(fs.lookup(*parent, name)) != Some(*ino) {
            continue;
        }
        let Some(st) = o.note(fs.stat(*ino)) else { continue };
        o.note(fs.set_xattr(*ino, b"user.fz", &data[k..k + 40], XattrSetMode::Any));
        o.note(fs.set_xattr(*ino, b"trusted.fz", &data[..900], XattrSetMode::Any));
        o.note(fs.setattr(*ino, SetAttr { mode: Some(0o640), ..Default::default() }));
        match st.file_type {
            FileType::Regular => {
                o.note(fs.open_inode(*ino));
                o.note(fs.inodes().write(*ino, 0, &data[..700]));
                o.note(fs.inodes().write(*ino, st.size, &data[..bs as usize + 9]));
                o.note(fs.inodes().write(*ino, st.size / 2 + 5000, &data[..12_000]));
                o.note(fs.write_direct(*ino, bs, &data[..bs as usize]));
                o.note(fs.fsync(*ino));
                o.note(fs.fallocate(*ino, FallocMode::KeepSize, st.size, 32 << 10));
                o.note(fs.fallocate(*ino, FallocMode::PunchHole, bs, bs * 2));
                o.note(fs.setattr(*ino, SetAttr { size: Some(st.size / 3), ..Default::default() }));
                o.note(fs.close_inode(*ino));
            }
            FileType::Directory => {
                o.note(fs.create(*ino, b"fz-n", 0o644, 0, 0));
                o.note(fs.mkdir(*ino, b"fz-m", 0o755, 0, 0));
                o.note(fs.inodes().rename(
                    *ino,
                    b"fz-n",
                    root,
                    format!("fz-moved-{k}").as_bytes(),
                    RenameFlags::default(),
                ));
                o.note(fs.rmdir(*ino, b"fz-m"));
                if let Some(page) = o.note(fs.readdir(*ino, 0, 8)) {
                    for (j, e) in page.iter().filter(|e| e.name != b"." && e.name != b"..").enumerate() {
                        match j % 3 {
                            0 => o.note(fs.unlink(*ino, &e.name)),
                            1 => o.note(fs.rmdir(*ino, &e.name)),
                            _ => o.note(fs.inodes().rename(
                                *ino,
                                &e.name,
                                root,
                                format!("fz-out-{k}-{j}").as_bytes(),
                                RenameFlags::default(),
                            )),
                        };
                    }
                }
            }
            _ => {
                o.note(fs.readlink(*ino));
            }
        }
        // Every other object goes away: files unlinked (one while open),
        // directories renamed.
        if k % 2 == 1 {
            if st.file_type == FileType::Directory {
                o.note(fs.inodes().rename(
                    *parent,
                    name,
                    root,
                    format!("fz-dir-{k}").as_bytes(),
                    RenameFlags::default(),
                ));
                o.note(fs.rmdir(*parent, name));
            } else {
                o.note(fs.open_inode(*ino));
                o.note(fs.unlink(*parent, name));
                o.note(fs.inodes().write(*ino, 0, &data[..100]));
                o.note(fs.close_inode(*ino));
            }
        }
    }
    o.note(fs.commit());
    if let Some(d) = d {
        o.note(fs.unlink(d, b"x"));
        o.note(fs.unlink(d, b"a2"));
    }
    o.note(fs.sync());
}
