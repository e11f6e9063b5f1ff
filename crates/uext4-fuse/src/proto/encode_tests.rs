//! Encoder tests: field offsets of every fixed structure, checked against
//! the layouts of include/uapi/linux/fuse.h, and the bounds of the
//! appended directory entries.

use super::*;
use crate::proto::types::FileType;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
}

fn sample() -> FileAttr {
    FileAttr {
        ino: INodeNo(12),
        size: 5000,
        blocks: 16,
        atime: UNIX_EPOCH + Duration::new(100, 1),
        mtime: UNIX_EPOCH + Duration::new(200, 2),
        ctime: UNIX_EPOCH + Duration::new(300, 3),
        crtime: UNIX_EPOCH + Duration::new(50, 5),
        kind: FileType::RegularFile,
        perm: 0o4755,
        nlink: 2,
        uid: 1000,
        gid: 100,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

#[test]
fn attr_and_entry_layouts() {
    let a = attr(&sample());
    assert_eq!((u64_at(&a, 0), u64_at(&a, 8), u64_at(&a, 16)), (12, 5000, 16));
    assert_eq!((u64_at(&a, 24), u64_at(&a, 32), u64_at(&a, 40)), (100, 200, 300));
    assert_eq!((u32_at(&a, 48), u32_at(&a, 52), u32_at(&a, 56)), (1, 2, 3));
    assert_eq!(u32_at(&a, 60), libc::S_IFREG | 0o4755);
    assert_eq!((u32_at(&a, 64), u32_at(&a, 68), u32_at(&a, 72), u32_at(&a, 80)), (2, 1000, 100, 4096));
    let e = entry_out(Duration::new(1, 5), Duration::new(2, 6), &sample(), Generation(9));
    assert_eq!((u64_at(&e, 0), u64_at(&e, 8), u64_at(&e, 16), u64_at(&e, 24)), (12, 9, 2, 1));
    assert_eq!((u32_at(&e, 32), u32_at(&e, 36)), (6, 5));
    assert_eq!(&e[40..], &a[..]);
    let o = attr_out(Duration::new(3, 7), &sample());
    assert_eq!((u64_at(&o, 0), u32_at(&o, 8)), (3, 7));
    assert_eq!(&o[16..], &a[..]);
}

#[test]
fn statx_carries_btime_only_when_asked() {
    let s = statx_out(Duration::from_secs(1), &sample(), true, 0x20 | 0x8_0000);
    assert_eq!((u64_at(&s, 32 + 8), u64_at(&s, 32 + 56)), (0x20, abi::STATX_ATTR_MASK));
    let x = 32;
    assert_eq!(u32_at(&s, x), abi::STATX_BASIC_STATS | abi::STATX_BTIME);
    assert_eq!(u32_at(&s, x + 4), 4096);
    assert_eq!((u32_at(&s, x + 16), u32_at(&s, x + 20), u32_at(&s, x + 24)), (2, 1000, 100));
    assert_eq!(u16::from_ne_bytes([s[x + 28], s[x + 29]]), (libc::S_IFREG | 0o4755) as u16);
    assert_eq!((u64_at(&s, x + 32), u64_at(&s, x + 40), u64_at(&s, x + 48)), (12, 5000, 16));
    // atime, btime, ctime, mtime.
    assert_eq!((u64_at(&s, x + 64), u32_at(&s, x + 72)), (100, 1));
    assert_eq!((u64_at(&s, x + 80), u32_at(&s, x + 88)), (50, 5));
    assert_eq!((u64_at(&s, x + 96), u64_at(&s, x + 112)), (300, 200));
    let n = statx_out(Duration::ZERO, &sample(), false, 0);
    assert_eq!(u32_at(&n, x), abi::STATX_BASIC_STATS);
    assert_eq!(u64_at(&n, x + 80), 0);
}

#[test]
fn times_before_the_epoch() {
    assert_eq!(time(UNIX_EPOCH - Duration::new(1, 0)), (-1, 0));
    assert_eq!(time(UNIX_EPOCH - Duration::new(1, 500)), (-2, 999_999_500));
}

#[test]
fn small_structures() {
    let h = out_header(24, -2, 77);
    assert_eq!((u32_at(&h, 0), u32_at(&h, 4) as i32, u64_at(&h, 8)), (24, -2, 77));
    let o = open_out(5, FopenFlags::FOPEN_KEEP_CACHE);
    assert_eq!((u64_at(&o, 0), u32_at(&o, 8)), (5, 2));
    let s = statfs_out(1, 2, 3, 4, 5, 4096, 255, 4096);
    assert_eq!((u64_at(&s, 32), u32_at(&s, 40), u32_at(&s, 44), u32_at(&s, 48)), (5, 4096, 255, 4096));
    let i = init_out(&InitOut { major: 7, minor: 41, flags: 1 << 41 | 1, max_pages: 256, ..Default::default() });
    assert_eq!((u32_at(&i, 0), u32_at(&i, 4), u32_at(&i, 12), u32_at(&i, 32)), (7, 41, 1, 1 << 9));
    assert_eq!(u16::from_ne_bytes([i[28], i[29]]), 256);
    assert_eq!(u32_at(&ioctl_out(-5), 0) as i32, -5);
    assert_eq!(u32_at(&notify_inval_entry(3, 4), 8), 4);
    assert_eq!(u64_at(&notify_inval_inode(1, -1, 0), 8) as i64, -1);
    assert_eq!(u32_at(&notify_store(7, 4096, 512), 16), 512);
}

#[test]
fn dirents_are_padded_and_bounded() {
    let mut b = [0xffu8; 64];
    let n = dirent(&mut b, INodeNo(3), 7, 8, b"abc").unwrap();
    assert_eq!(n, 32);
    assert_eq!((u64_at(&b, 0), u64_at(&b, 8), u32_at(&b, 16), u32_at(&b, 20)), (3, 7, 3, 8));
    assert_eq!(&b[24..32], b"abc\0\0\0\0\0");
    assert_eq!(dirent(&mut b[..31], INodeNo(3), 7, 8, b"abc"), None);
    let e = entry_out(Duration::ZERO, Duration::ZERO, &sample(), Generation(1));
    let mut big = [0u8; 200];
    assert_eq!(direntplus(&mut big, &e, 1, 8, b"x"), Some(abi::ENTRY_OUT_LEN + 32));
    assert_eq!(u64_at(&big, abi::ENTRY_OUT_LEN), 12);
    assert_eq!(direntplus(&mut big[..150], &e, 1, 8, b"x"), None);
}
