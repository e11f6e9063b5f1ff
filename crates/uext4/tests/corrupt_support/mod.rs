//! Helpers of the corruption tests: building the base images, locating each
//! on-disk structure in them, and recomputing checksums after a targeted
//! change so that the change reaches the parsers instead of the checksum
//! check.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use uext4::format::bytes::{le16, le32, put_le16, put_le32};
use uext4::format::checksum::crc32c;
use uext4::format::dirent::leaf_checksum;
use uext4::format::dx;
use uext4::format::extent::{parse_node, ExtentNode};
use uext4::format::group_desc::desc_checksum;
use uext4::format::inode::inode_checksum;
use uext4::format::superblock::Superblock;
use uext4::format::xattr::block_checksum;
use uext4::inode_api::MapKind;
use uext4::{Filesystem, MemoryDevice, MountOptions};

/// A deterministic pseudo-random generator (splitmix64), so that sampled
/// cases are the same on every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Bit positions to flip in a structure of `len` bytes: all of them when
/// there are at most `max`, otherwise `max` distinct random ones.
pub fn flip_positions(len: usize, max: usize, seed: u64) -> Vec<usize> {
    let bits = len * 8;
    if bits <= max {
        return (0..bits).collect();
    }
    let mut rng = Rng(seed);
    let mut seen = std::collections::HashSet::new();
    let mut v = Vec::new();
    while v.len() < max {
        let b = rng.below(bits);
        if seen.insert(b) {
            v.push(b);
        }
    }
    v.sort_unstable();
    v
}

/// How a structure's checksum is recomputed after a change.
#[derive(Debug, Clone, Copy)]
pub enum Fix {
    /// Nothing to recompute (no checksum, or none we want fixed).
    None,
    /// The primary superblock.
    Super,
    /// The descriptor of a group.
    Desc(u32),
    /// An inode record.
    Inode(u32),
    /// A non-root extent tree block owned by an inode.
    ExtentBlock { block: u64, ino: u32 },
    /// A directory leaf block.
    DirLeaf { block: u64, ino: u32 },
    /// An htree root or interior node.
    Dx { block: u64, ino: u32, root: bool },
    /// An xattr block.
    XattrBlock(u64),
}

/// A byte range of the image holding one structure.
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub off: usize,
    pub len: usize,
    pub fix: Fix,
}

/// What the tests need to know about one base image.
pub struct Image {
    pub name: &'static str,
    pub bytes: Arc<Vec<u8>>,
    pub bs: usize,
    pub csum: bool,
    pub sb: Superblock,
    pub extents: bool,
    /// Inode numbers by path.
    pub ino: std::collections::HashMap<&'static str, u32>,
    /// Byte offset of each of those inodes.
    pub inode_off: std::collections::HashMap<u32, usize>,
    /// Extent tree blocks of /frag: (block, depth).
    pub frag_tree: Vec<(u64, u16)>,
    /// Physical blocks of directories by logical block: (path, lblk) -> pblk.
    pub dir_blocks: std::collections::HashMap<(&'static str, u64), u64>,
    /// The xattr block of /small.txt.
    pub xattr_block: u64,
    /// Byte offset of the group descriptor table.
    pub gdt_off: usize,
    pub desc_size: usize,
}

pub const PATHS: &[&str] = &["/", "/small.txt", "/d", "/d/f4", "/frag", "/htree", "/big", "/fast", "/slow", "/fifo"];

/// The xattrs of /small.txt: one too big for the inode (so it goes to an
/// xattr block) and a small one.
fn xattrs() -> [(&'static str, Vec<u8>); 2] {
    [("user.big", vec![b'v'; 900]), ("user.s", b"tiny".to_vec())]
}

/// Writes the source tree every base image is made from. Returns false if
/// the host filesystem refused user xattrs (they are then added with
/// debugfs after mkfs).
fn make_source(src: &Path) -> bool {
    use std::fs;
    use std::io::{Seek, SeekFrom, Write};
    fs::create_dir_all(src).unwrap();
    fs::write(src.join("small.txt"), b"hello, world\n").unwrap();
    fs::create_dir(src.join("d")).unwrap();
    for i in 0..5u8 {
        fs::write(src.join(format!("d/f{i}")), vec![b'a' + i; 1000 * usize::from(i) + 1]).unwrap();
    }
    // Many small data islands: one extent each, so the extent tree needs
    // index blocks (depth 2 with 1 KiB blocks, depth 1 with 4 KiB).
    let mut f = fs::File::create(src.join("frag")).unwrap();
    for i in 0..500u64 {
        f.seek(SeekFrom::Start(i * 8192)).unwrap();
        f.write_all(&[(i % 251) as u8 + 1; 1024]).unwrap();
    }
    drop(f);
    fs::create_dir(src.join("htree")).unwrap();
    for i in 0..300 {
        fs::write(src.join(format!("htree/n{i:04}_{}", "x".repeat(190))), b"").unwrap();
    }
    // Enough long names for a two-level index with 1 KiB blocks.
    fs::create_dir(src.join("big")).unwrap();
    for i in 0..600 {
        fs::write(src.join(format!("big/n{i:04}_{}", "y".repeat(240))), b"").unwrap();
    }
    std::os::unix::fs::symlink("small.txt", src.join("fast")).unwrap();
    std::os::unix::fs::symlink(format!("/{}target", "long/".repeat(30)), src.join("slow")).unwrap();
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).unwrap();
    let fifo = c(&src.join("fifo"));
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let small = c(&src.join("small.txt"));
    for (name, value) in xattrs() {
        let n = CString::new(name).unwrap();
        // SAFETY: valid NUL-terminated strings and a live buffer of the given length.
        let rc = unsafe { libc::lsetxattr(small.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
        if rc != 0 {
            return false;
        }
    }
    true
}

/// True if mkfs.ext4 is available (else the tests skip).
fn have_mkfs() -> bool {
    Command::new("mkfs.ext4").arg("-V").output().is_ok()
}

fn mkfs(src: &Path, img: &Path, args: &[&str], size: &str, src_xattrs: bool) -> Vec<u8> {
    // A fixed UUID and hash seed: the same checksums, hashes and hence
    // listing orders on every run, so that every case is reproducible.
    let fixed = ["-U", "c0aac0de-5eed-4a11-8bad-f00dfeedface", "-E", "hash_seed=0d15ea5e-abad-4bad-9ead-c0ffee0ddba1"];
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .args(fixed)
        .args(args)
        .arg("-d")
        .arg(src)
        .arg(img)
        .arg(size)
        .output()
        .unwrap();
    assert!(out.status.success(), "mkfs.ext4 {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    if !src_xattrs {
        for (name, value) in xattrs() {
            let file = img.with_extension("xattr");
            std::fs::write(&file, &value).unwrap();
            let req = format!("ea_set -f {} /small.txt {name}", file.display());
            let out = Command::new("debugfs").args(["-w", "-R", &req]).arg(img).output().unwrap();
            assert!(out.status.success(), "debugfs {req}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    // Index the big directories (mkfs -d writes them linear).
    let st = Command::new("e2fsck").args(["-fyD"]).arg(img).output().unwrap();
    assert!(st.status.code().unwrap_or(8) < 4, "e2fsck -fyD: {}", String::from_utf8_lossy(&st.stdout));
    std::fs::read(img).unwrap()
}

/// Builds the base images: 1 KiB and 4 KiB blocks with metadata_csum, 1 KiB
/// without (so that flips reach the parsers), and an ext3-style one without
/// extents (block maps). None, the skip printed, without mkfs.ext4.
pub fn build_images() -> Option<Vec<Image>> {
    if !have_mkfs() {
        eprintln!("SKIP: mkfs.ext4 not installed");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let src_xattrs = make_source(&src);
    let specs: [(&'static str, &[&str], &str); 4] = [
        ("1k-csum", &["-b", "1024", "-g", "2048"], "8M"),
        ("4k-csum", &["-b", "4096", "-g", "1024"], "16M"),
        ("1k-nocsum", &["-b", "1024", "-g", "2048", "-O", "^metadata_csum"], "8M"),
        ("1k-blockmap", &["-b", "1024", "-g", "2048", "-O", "^metadata_csum,^extent,^64bit,^flex_bg"], "8M"),
    ];
    let images = specs
        .iter()
        .map(|(name, args, size)| {
            let bytes = mkfs(&src, &dir.path().join(name), args, size, src_xattrs);
            describe(name, bytes)
        })
        .collect();
    Some(images)
}

/// Locates every structure of interest in a pristine image.
pub fn describe(name: &'static str, bytes: Vec<u8>) -> Image {
    let fs = Filesystem::open_device(Arc::new(MemoryDevice::from_bytes(&bytes)), MountOptions::default()).unwrap();
    let sb = fs.superblock().clone();
    let bs = fs.block_size() as usize;
    let mut ino = std::collections::HashMap::new();
    let mut inode_off = std::collections::HashMap::new();
    for p in PATHS {
        let i = fs.resolve(p).unwrap_or_else(|e| panic!("{name}: {p}: {e}"));
        ino.insert(*p, i);
        let idx = i - 1;
        let g = (idx / sb.inodes_per_group) as usize;
        let within = (idx % sb.inodes_per_group) as usize * usize::from(sb.inode_size);
        inode_off.insert(i, fs.group_descs()[g].inode_table as usize * bs + within);
    }
    let extents = sb.features.has_incompat(uext4::format::features::incompat::EXTENTS);
    let mut frag_tree = Vec::new();
    if extents {
        let off = inode_off[&ino["/frag"]];
        let root = parse_node(&bytes[off + 0x28..off + 0x28 + 60], 0).unwrap();
        let mut stack = vec![root];
        while let Some(n) = stack.pop() {
            if let ExtentNode::Index(h, idx) = n {
                for e in idx {
                    frag_tree.push((e.leaf.0, h.depth - 1));
                    let b = &bytes[e.leaf.0 as usize * bs..(e.leaf.0 as usize + 1) * bs];
                    stack.push(parse_node(b, e.leaf.0).unwrap());
                }
            }
        }
    }
    let mut dir_blocks = std::collections::HashMap::new();
    for p in ["/", "/d", "/htree", "/big"] {
        for m in fs.extents(ino[p]).unwrap() {
            if let MapKind::Mapped(pb) = m.kind {
                for k in 0..m.len {
                    dir_blocks.insert((p, (m.lblk + k).get()), (pb + k).get());
                }
            }
        }
    }
    let xattr_block = fs.stat(ino["/small.txt"]).unwrap().file_acl;
    assert_ne!(xattr_block, 0, "{name}: /small.txt has no xattr block");
    let gdt_off = (sb.first_data_block as usize + 1) * bs;
    let desc_size = usize::from(sb.desc_size);
    let csum = sb.has_metadata_csum();
    Image {
        name,
        bytes: Arc::new(bytes),
        bs,
        csum,
        sb,
        extents,
        ino,
        inode_off,
        frag_tree,
        dir_blocks,
        xattr_block,
        gdt_off,
        desc_size,
    }
}

impl Image {
    /// A copy of the image changed by `f`, then the checksums of `fixes`
    /// recomputed.
    pub fn damaged(&self, fixes: &[Fix], f: impl FnOnce(&mut [u8])) -> Vec<u8> {
        let mut b = self.bytes.to_vec();
        f(&mut b);
        for fix in fixes {
            self.fix(&mut b, *fix);
        }
        b
    }

    pub fn inode_target(&self, path: &str) -> Target {
        let i = self.ino[path];
        Target {
            name: format!("inode {path}"),
            off: self.inode_off[&i],
            len: usize::from(self.sb.inode_size),
            fix: Fix::Inode(i),
        }
    }

    pub fn block_off(&self, b: u64) -> usize {
        b as usize * self.bs
    }

    /// The htree root (lblk 0) of a directory, and its first index block.
    pub fn dx_root(&self, dir: &'static str) -> u64 {
        self.dir_blocks[&(dir, 0)]
    }

    /// Logical -> physical for a directory block.
    pub fn dir_block(&self, dir: &'static str, lblk: u64) -> Option<u64> {
        self.dir_blocks.get(&(dir, lblk)).copied()
    }

    /// Per-inode checksum seed, with the generation currently in `img`.
    pub fn inode_seed(&self, img: &[u8], ino: u32) -> u32 {
        let generation = le32(img, self.inode_off[&ino] + 0x64);
        let c = crc32c(self.sb.csum_seed(), &ino.to_le_bytes());
        crc32c(c, &generation.to_le_bytes())
    }

    /// Recomputes a checksum in `img` (no-op without metadata_csum, except
    /// group descriptors which also have the crc16 form).
    pub fn fix(&self, img: &mut [u8], fix: Fix) {
        let bs = self.bs;
        match fix {
            Fix::None => {}
            Fix::Super => {
                let s = &mut img[1024..2048];
                let ro = le32(s, 0x64);
                if ro & uext4::format::features::ro_compat::METADATA_CSUM != 0 {
                    let c = crc32c(!0, &s[..0x3FC]);
                    put_le32(s, 0x3FC, c);
                }
            }
            Fix::Desc(g) => {
                let off = self.gdt_off + g as usize * self.desc_size;
                if let Some(c) = desc_checksum(&self.sb, g, &img[off..off + self.desc_size]) {
                    put_le16(&mut img[off..], 0x1E, c);
                }
            }
            Fix::Inode(ino) => {
                if !self.csum {
                    return;
                }
                let off = self.inode_off[&ino];
                let isz = usize::from(self.sb.inode_size);
                let c = inode_checksum(&self.sb, ino, &img[off..off + isz]);
                let r = &mut img[off..off + isz];
                put_le16(r, 0x7C, c as u16);
                if isz > 128 && 128 + usize::from(le16(r, 0x80)) >= 0x84 {
                    put_le16(r, 0x82, (c >> 16) as u16);
                }
            }
            Fix::ExtentBlock { block, ino } => {
                if !self.csum {
                    return;
                }
                let seed = self.inode_seed(img, ino);
                let b = &mut img[block as usize * bs..(block as usize + 1) * bs];
                let tail = 12 * (usize::from(le16(b, 4)) + 1);
                if tail + 4 <= bs {
                    let c = crc32c(seed, &b[..tail]);
                    put_le32(b, tail, c);
                }
            }
            Fix::DirLeaf { block, ino } => {
                if !self.csum {
                    return;
                }
                let seed = self.inode_seed(img, ino);
                let b = &mut img[block as usize * bs..(block as usize + 1) * bs];
                let c = leaf_checksum(b, seed);
                put_le32(b, bs - 4, c);
            }
            Fix::Dx { block, ino, root } => {
                if !self.csum {
                    return;
                }
                let seed = self.inode_seed(img, ino);
                let b = &mut img[block as usize * bs..(block as usize + 1) * bs];
                let off = if root { 0x20 } else { 0x8 };
                let limit = usize::from(le16(b, off));
                let count = usize::from(le16(b, off + 2)).min(limit);
                let tail = off + limit * 8;
                if tail + 8 <= bs {
                    let mut c = crc32c(seed, &b[..off + count * 8]);
                    c = crc32c(c, &b[tail..tail + 4]);
                    c = crc32c(c, &[0; 4]);
                    put_le32(b, tail + 4, c);
                }
            }
            Fix::XattrBlock(block) => {
                if !self.csum {
                    return;
                }
                let b = &mut img[block as usize * bs..(block as usize + 1) * bs];
                let c = block_checksum(b, block, self.sb.csum_seed());
                put_le32(b, 0x10, c);
            }
        }
    }

    /// The dx node (root or interior) parsed from the pristine image.
    pub fn dx_node(&self, block: u64, root: bool) -> dx::DxNode {
        let b = &self.bytes[self.block_off(block)..self.block_off(block) + self.bs];
        dx::parse_node(b, root, self.csum, block).unwrap()
    }
}
