//! Fuzz target: the input is a whole ext4 image. Open it and walk all of it
//! (the same walk as crates/uext4/tests/corrupt.rs). Errors are fine; a
//! panic, a timeout or an oversized allocation (-malloc_limit_mb) is a
//! finding.
//!
//! Byte 0 lies in the boot area, which ext4 never reads. When its low bit is
//! set, the superblock checksum is recomputed before opening, so that
//! mutated superblock fields on metadata_csum seeds reach validation and
//! the rest of the code instead of stopping at the checksum.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;
use std::sync::Arc;
use uext4::{FileType, Filesystem, MemoryDevice, MountOptions};

mod input;

fuzz_target!(|data: &[u8]| {
    let img = input::image(data);
    let dev = Arc::new(MemoryDevice::from_bytes(&img));
    if let Ok(fs) = Filesystem::open_device(dev, MountOptions { cache_blocks: 256, ..MountOptions::default() }) {
        walk(&fs);
    }
});

const MAX_ENTRIES: usize = 5_000;
const MAX_DEPTH: usize = 16;
const FILE_CAP: u64 = 1 << 20;
const READ_BUDGET: u64 = 8 << 20;

struct Walk<'a> {
    fs: &'a Filesystem,
    entries: usize,
    budget: u64,
    buf: Vec<u8>,
}

fn walk(fs: &Filesystem) {
    let _ = fs.statfs();
    let mut w = Walk { fs, entries: 0, budget: READ_BUDGET, buf: vec![0; 64 << 10] };
    let mut visited = HashSet::new();
    let root = fs.root();
    visited.insert(root);
    w.visit(root, b"/");
    let mut stack = vec![(root, b"/".to_vec(), 0usize)];
    while let Some((dir, path, depth)) = stack.pop() {
        for missing in [&b"no-such-entry"[..], &[b'z'; 255][..]] {
            let _ = fs.lookup(dir, missing);
        }
        if fs.stat(dir).is_ok_and(|s| s.size <= 1 << 20) {
            let _ = fs.read_dir_all(dir);
        }
        let mut cookie = 0;
        while let Ok(page) = fs.readdir(dir, cookie, 97) {
            match page.last() {
                Some(last) if last.next_cookie > cookie => cookie = last.next_cookie,
                _ => break,
            }
            for (i, e) in page.into_iter().enumerate() {
                if w.entries >= MAX_ENTRIES {
                    return;
                }
                w.entries += 1;
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let _ = fs.lookup(dir, &e.name);
                let mut p = path.clone();
                if !p.ends_with(b"/") {
                    p.push(b'/');
                }
                p.extend_from_slice(&e.name);
                if i < 8 {
                    let _ = fs.resolve(&p);
                }
                if visited.insert(e.ino) && w.visit(e.ino, &p) == Some(FileType::Directory) && depth < MAX_DEPTH {
                    stack.push((e.ino, p, depth + 1));
                }
            }
        }
    }
}

impl Walk<'_> {
    fn visit(&mut self, ino: u32, path: &[u8]) -> Option<FileType> {
        let fs = self.fs;
        let s = fs.stat(ino).ok()?;
        if let Ok(names) = fs.list_xattrs(ino) {
            for n in names.iter().take(64) {
                let _ = fs.get_xattr(ino, n);
            }
        }
        match s.file_type {
            FileType::Regular => {
                let _ = fs.extents(ino);
                let mut off = 0;
                while off < s.size.min(FILE_CAP) && self.budget > 0 {
                    let Ok(n) = fs.read(ino, off, &mut self.buf) else { break };
                    if n == 0 {
                        break;
                    }
                    self.budget = self.budget.saturating_sub(n as u64);
                    off += n as u64;
                }
                let _ = fs.read(ino, s.size.saturating_sub(100), &mut self.buf[..4096]);
                let _ = fs.read(ino, u64::MAX - 10, &mut self.buf[..4096]);
            }
            FileType::Symlink => {
                let _ = fs.readlink(ino);
                let _ = fs.resolve_follow(path);
            }
            FileType::Directory => {
                let _ = fs.extents(ino);
            }
            _ => {}
        }
        Some(s.file_type)
    }
}
