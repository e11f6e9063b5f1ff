//! Reply encoding: the fixed structures replies carry (attributes,
//! entries, open handles, statfs, statx, INIT, directory entries, ioctl
//! results) and the notifications the daemon sends unasked, each into a
//! buffer of its exact size or appended to a caller's buffer with a
//! bounds check.

use super::abi;
use super::types::{FileAttr, FopenFlags, Generation, INodeNo};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Writes `v` at `at` of a fixed-size buffer (offsets are constants of
/// the layouts, always in range).
fn put(b: &mut [u8], at: usize, v: &[u8]) {
    if let Some(d) = b.get_mut(at..at + v.len()) {
        d.copy_from_slice(v);
    }
}

/// Seconds and nanoseconds of `t` from the epoch (negative before it).
pub fn time(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (i64::try_from(d.as_secs()).unwrap_or(i64::MAX), d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let s = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            if d.subsec_nanos() == 0 {
                (-s, 0)
            } else {
                (-s - 1, 1_000_000_000 - d.subsec_nanos())
            }
        }
    }
}

/// `struct fuse_out_header`.
pub fn out_header(len: usize, error: i32, unique: u64) -> [u8; abi::OUT_HEADER_LEN] {
    let mut b = [0u8; abi::OUT_HEADER_LEN];
    put(&mut b, 0, &u32::try_from(len).unwrap_or(u32::MAX).to_ne_bytes());
    put(&mut b, 4, &error.to_ne_bytes());
    put(&mut b, 8, &unique.to_ne_bytes());
    b
}

/// `struct fuse_attr`.
pub fn attr(a: &FileAttr) -> [u8; abi::ATTR_LEN] {
    let mut b = [0u8; abi::ATTR_LEN];
    put(&mut b, 0, &a.ino.0.to_ne_bytes());
    put(&mut b, 8, &a.size.to_ne_bytes());
    put(&mut b, 16, &a.blocks.to_ne_bytes());
    for (k, t) in [a.atime, a.mtime, a.ctime].into_iter().enumerate() {
        let (s, ns) = time(t);
        put(&mut b, 24 + 8 * k, &s.to_ne_bytes());
        put(&mut b, 48 + 4 * k, &ns.to_ne_bytes());
    }
    put(&mut b, 60, &(a.kind.mode_bits() | u32::from(a.perm)).to_ne_bytes());
    put(&mut b, 64, &a.nlink.to_ne_bytes());
    put(&mut b, 68, &a.uid.to_ne_bytes());
    put(&mut b, 72, &a.gid.to_ne_bytes());
    put(&mut b, 76, &a.rdev.to_ne_bytes());
    put(&mut b, 80, &a.blksize.to_ne_bytes());
    put(&mut b, 84, &a.flags.to_ne_bytes());
    b
}

/// `struct fuse_attr_out`.
pub fn attr_out(ttl: Duration, a: &FileAttr) -> [u8; abi::ATTR_OUT_LEN] {
    let mut b = [0u8; abi::ATTR_OUT_LEN];
    put(&mut b, 0, &ttl.as_secs().to_ne_bytes());
    put(&mut b, 8, &ttl.subsec_nanos().to_ne_bytes());
    put(&mut b, 16, &attr(a));
    b
}

/// `struct fuse_entry_out`.
pub fn entry_out(
    attr_ttl: Duration,
    entry_ttl: Duration,
    a: &FileAttr,
    generation: Generation,
) -> [u8; abi::ENTRY_OUT_LEN] {
    let mut b = [0u8; abi::ENTRY_OUT_LEN];
    put(&mut b, 0, &a.ino.0.to_ne_bytes());
    put(&mut b, 8, &generation.0.to_ne_bytes());
    put(&mut b, 16, &entry_ttl.as_secs().to_ne_bytes());
    put(&mut b, 24, &attr_ttl.as_secs().to_ne_bytes());
    put(&mut b, 32, &entry_ttl.subsec_nanos().to_ne_bytes());
    put(&mut b, 36, &attr_ttl.subsec_nanos().to_ne_bytes());
    put(&mut b, 40, &attr(a));
    b
}

/// `struct fuse_open_out`.
pub fn open_out(fh: u64, flags: FopenFlags) -> [u8; abi::OPEN_OUT_LEN] {
    let mut b = [0u8; abi::OPEN_OUT_LEN];
    put(&mut b, 0, &fh.to_ne_bytes());
    put(&mut b, 8, &flags.bits().to_ne_bytes());
    b
}

/// `struct fuse_kstatfs`.
#[allow(clippy::too_many_arguments)]
pub fn statfs_out(
    blocks: u64,
    bfree: u64,
    bavail: u64,
    files: u64,
    ffree: u64,
    bsize: u32,
    namelen: u32,
    frsize: u32,
) -> [u8; abi::STATFS_OUT_LEN] {
    let mut b = [0u8; abi::STATFS_OUT_LEN];
    for (k, v) in [blocks, bfree, bavail, files, ffree].into_iter().enumerate() {
        put(&mut b, 8 * k, &v.to_ne_bytes());
    }
    put(&mut b, 40, &bsize.to_ne_bytes());
    put(&mut b, 44, &namelen.to_ne_bytes());
    put(&mut b, 48, &frsize.to_ne_bytes());
    b
}

/// `struct fuse_statx_out` for `a`: the basic statistics, plus the
/// creation time when `btime` (ext4 inodes with room for `i_crtime`), and
/// the `STATX_ATTR_*` bits `attributes` (within [`abi::STATX_ATTR_MASK`],
/// which is the attributes mask reported).
pub fn statx_out(ttl: Duration, a: &FileAttr, btime: bool, attributes: u64) -> [u8; abi::STATX_OUT_LEN] {
    let mut b = [0u8; abi::STATX_OUT_LEN];
    put(&mut b, 0, &ttl.as_secs().to_ne_bytes());
    put(&mut b, 8, &ttl.subsec_nanos().to_ne_bytes());
    let s = 32;
    let mask = abi::STATX_BASIC_STATS | if btime { abi::STATX_BTIME } else { 0 };
    put(&mut b, s, &mask.to_ne_bytes());
    put(&mut b, s + 4, &a.blksize.to_ne_bytes());
    put(&mut b, s + 8, &(attributes & abi::STATX_ATTR_MASK).to_ne_bytes());
    put(&mut b, s + 56, &abi::STATX_ATTR_MASK.to_ne_bytes());
    put(&mut b, s + 16, &a.nlink.to_ne_bytes());
    put(&mut b, s + 20, &a.uid.to_ne_bytes());
    put(&mut b, s + 24, &a.gid.to_ne_bytes());
    let mode = (a.kind.mode_bits() | u32::from(a.perm)) as u16;
    put(&mut b, s + 28, &mode.to_ne_bytes());
    put(&mut b, s + 32, &a.ino.0.to_ne_bytes());
    put(&mut b, s + 40, &a.size.to_ne_bytes());
    put(&mut b, s + 48, &a.blocks.to_ne_bytes());
    // atime, btime, ctime, mtime: struct fuse_sx_time (16 bytes each).
    for (k, t) in [Some(a.atime), btime.then_some(a.crtime), Some(a.ctime), Some(a.mtime)].into_iter().enumerate() {
        if let Some(t) = t {
            let (sec, ns) = time(t);
            put(&mut b, s + 64 + 16 * k, &sec.to_ne_bytes());
            put(&mut b, s + 72 + 16 * k, &ns.to_ne_bytes());
        }
    }
    // rdev as major and minor (the kernel's new_decode_dev of our rdev).
    let (major, minor) = ((a.rdev & 0xfff00) >> 8, (a.rdev & 0xff) | ((a.rdev >> 12) & 0xfff00));
    put(&mut b, s + 128, &major.to_ne_bytes());
    put(&mut b, s + 132, &minor.to_ne_bytes());
    b
}

/// What the daemon answers to FUSE_INIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[allow(missing_docs)]
pub struct InitOut {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u64,
    pub max_background: u16,
    pub congestion_threshold: u16,
    pub max_write: u32,
    pub time_gran: u32,
    pub max_pages: u16,
}

/// `struct fuse_init_out`.
pub fn init_out(o: &InitOut) -> [u8; abi::INIT_OUT_LEN] {
    let mut b = [0u8; abi::INIT_OUT_LEN];
    put(&mut b, 0, &o.major.to_ne_bytes());
    put(&mut b, 4, &o.minor.to_ne_bytes());
    put(&mut b, 8, &o.max_readahead.to_ne_bytes());
    put(&mut b, 12, &(o.flags as u32).to_ne_bytes());
    put(&mut b, 16, &o.max_background.to_ne_bytes());
    put(&mut b, 18, &o.congestion_threshold.to_ne_bytes());
    put(&mut b, 20, &o.max_write.to_ne_bytes());
    put(&mut b, 24, &o.time_gran.to_ne_bytes());
    put(&mut b, 28, &o.max_pages.to_ne_bytes());
    put(&mut b, 32, &((o.flags >> 32) as u32).to_ne_bytes());
    b
}

/// A 4-byte value reply (`fuse_write_out`, `fuse_getxattr_out`): the value
/// and 4 bytes of padding.
pub fn u32_out(v: u32) -> [u8; 8] {
    let mut b = [0u8; 8];
    put(&mut b, 0, &v.to_ne_bytes());
    b
}

/// An 8-byte value reply (`fuse_lseek_out`, `fuse_bmap_out`,
/// `fuse_copy_file_range_out`).
pub fn u64_out(v: u64) -> [u8; 8] {
    v.to_ne_bytes()
}

/// `struct fuse_ioctl_out` of a restricted ioctl (no retry).
pub fn ioctl_out(result: i32) -> [u8; abi::IOCTL_OUT_LEN] {
    let mut b = [0u8; abi::IOCTL_OUT_LEN];
    put(&mut b, 0, &result.to_ne_bytes());
    b
}

/// Appends `struct fuse_dirent` and its name, padded to 8 bytes, at
/// `buf[at..]` if it fits; returns its length.
pub fn dirent(buf: &mut [u8], ino: INodeNo, off: u64, typ: u32, name: &[u8]) -> Option<usize> {
    let len = (abi::DIRENT_LEN + name.len()).next_multiple_of(8);
    let d = buf.get_mut(..len)?;
    d[0..8].copy_from_slice(&ino.0.to_ne_bytes());
    d[8..16].copy_from_slice(&off.to_ne_bytes());
    d[16..20].copy_from_slice(&u32::try_from(name.len()).ok()?.to_ne_bytes());
    d[20..24].copy_from_slice(&typ.to_ne_bytes());
    d[24..24 + name.len()].copy_from_slice(name);
    d[24 + name.len()..].fill(0);
    Some(len)
}

/// Appends `struct fuse_direntplus` (an entry_out, then a dirent) if it
/// fits in `buf`; returns its length.
pub fn direntplus(buf: &mut [u8], entry: &[u8; abi::ENTRY_OUT_LEN], off: u64, typ: u32, name: &[u8]) -> Option<usize> {
    let ino = u64::from_ne_bytes(entry[..8].try_into().ok()?);
    let (head, tail) = buf.split_at_mut_checked(abi::ENTRY_OUT_LEN)?;
    let n = dirent(tail, INodeNo(ino), off, typ, name)?;
    head.copy_from_slice(entry);
    Some(abi::ENTRY_OUT_LEN + n)
}

/// `struct fuse_notify_inval_inode_out`: drop the kernel's attributes of
/// `ino` and its cached pages in `[off, off + len)` (`len` 0: all; `off`
/// negative: attributes only).
pub fn notify_inval_inode(ino: u64, off: i64, len: i64) -> [u8; 24] {
    let mut b = [0u8; 24];
    put(&mut b, 0, &ino.to_ne_bytes());
    put(&mut b, 8, &off.to_ne_bytes());
    put(&mut b, 16, &len.to_ne_bytes());
    b
}

/// `struct fuse_notify_store_out`: put `size` bytes (which follow it)
/// into the kernel's cache of `ino` at `off`.
pub fn notify_store(ino: u64, off: u64, size: u32) -> [u8; 24] {
    let mut b = [0u8; 24];
    put(&mut b, 0, &ino.to_ne_bytes());
    put(&mut b, 8, &off.to_ne_bytes());
    put(&mut b, 16, &size.to_ne_bytes());
    b
}

/// `struct fuse_notify_inval_entry_out` for a name of `namelen` bytes
/// (the name and a NUL follow it).
pub fn notify_inval_entry(parent: u64, namelen: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    put(&mut b, 0, &parent.to_ne_bytes());
    put(&mut b, 8, &namelen.to_ne_bytes());
    b
}

#[cfg(test)]
#[path = "encode_tests.rs"]
mod tests;
