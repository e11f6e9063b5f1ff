//! Conversions between the library's types and the FUSE protocol's:
//! inode numbers, attributes, times, device numbers, errors.

use crate::proto::types::{Errno, FileAttr, FileType as FuseType, INodeNo};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use uext4::{FileType, Stat, Timestamp};

/// ext4's root directory inode.
pub const EXT4_ROOT: u32 = 2;

/// The FUSE node id of ext4 inode `ino`: the root is node 1 (FUSE's root
/// id), every other inode keeps its number. ext4's inode 1 (the bad
/// blocks inode) is never handed out (see [`is_servable`]).
pub fn to_fuse(ino: u32) -> INodeNo {
    INodeNo(if ino == EXT4_ROOT { 1 } else { u64::from(ino) })
}

/// The ext4 inode of FUSE node `n`. Node 2 is never handed out (ext4's
/// root is node 1), and numbers beyond 32 bits cannot be ours: ESTALE.
pub fn from_fuse(n: INodeNo) -> Result<u32, Errno> {
    match n.0 {
        1 => Ok(EXT4_ROOT),
        2 => Err(Errno::ESTALE),
        x => u32::try_from(x).map_err(|_| Errno::ESTALE),
    }
}

/// True if a directory entry's inode can be shown: 0 is an empty slot and
/// 1 would alias FUSE's root id (and is no file in ext4).
pub fn is_servable(ino: u32) -> bool {
    ino >= EXT4_ROOT
}

/// The errno a library error stands for.
pub fn errno(e: &uext4::Error) -> Errno {
    Errno::from_i32(e.errno())
}

/// FUSE's file type of a library file type.
pub fn kind(t: FileType) -> FuseType {
    match t {
        FileType::Regular => FuseType::RegularFile,
        FileType::Directory => FuseType::Directory,
        FileType::Symlink => FuseType::Symlink,
        FileType::CharDevice => FuseType::CharDevice,
        FileType::BlockDevice => FuseType::BlockDevice,
        FileType::Fifo => FuseType::NamedPipe,
        FileType::Socket => FuseType::Socket,
    }
}

/// A timestamp as `SystemTime` (before 1970 too); out-of-range values
/// saturate at the epoch rather than fail.
pub fn system_time(t: Timestamp) -> SystemTime {
    let nanos = Duration::from_nanos(u64::from(t.nsec.min(999_999_999)));
    if t.sec >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(t.sec.unsigned_abs()) + nanos).unwrap_or(UNIX_EPOCH)
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_secs(t.sec.unsigned_abs()))
            .and_then(|s| s.checked_add(nanos))
            .unwrap_or(UNIX_EPOCH)
    }
}

/// A `SystemTime` as a timestamp with nanoseconds.
pub fn timestamp(t: SystemTime) -> Timestamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp { sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX), nsec: d.subsec_nanos() },
        Err(e) => {
            let d = e.duration();
            let sec = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            if d.subsec_nanos() == 0 {
                Timestamp { sec: -sec, nsec: 0 }
            } else {
                Timestamp { sec: -sec - 1, nsec: 1_000_000_000 - d.subsec_nanos() }
            }
        }
    }
}

/// The kernel's 32-bit device number encoding (`new_encode_dev`), which
/// FUSE uses for `rdev`.
pub fn encode_dev(major: u32, minor: u32) -> u32 {
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// The inverse of [`encode_dev`] (`new_decode_dev`).
pub fn decode_dev(dev: u32) -> (u32, u32) {
    ((dev & 0xfff00) >> 8, (dev & 0xff) | ((dev >> 12) & 0xfff00))
}

/// FUSE attributes of a library `stat`.
pub fn attr(st: &Stat) -> FileAttr {
    FileAttr {
        ino: to_fuse(st.ino),
        size: st.size,
        blocks: st.blocks,
        atime: system_time(st.atime),
        mtime: system_time(st.mtime),
        ctime: system_time(st.ctime),
        crtime: st.crtime.map_or(UNIX_EPOCH, system_time),
        kind: kind(st.file_type),
        perm: st.mode & 0o7777,
        nlink: st.nlink,
        uid: st.uid,
        gid: st.gid,
        rdev: encode_dev(st.rdev.0, st.rdev.1),
        blksize: st.blksize,
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_maps_both_ways() {
        assert_eq!(to_fuse(2), INodeNo(1));
        assert_eq!(from_fuse(INodeNo(1)), Ok(2));
        assert_eq!(to_fuse(11), INodeNo(11));
        assert_eq!(from_fuse(INodeNo(11)), Ok(11));
        assert_eq!(from_fuse(INodeNo(2)), Err(Errno::ESTALE));
        assert_eq!(from_fuse(INodeNo(1 << 40)), Err(Errno::ESTALE));
        assert!(!is_servable(0) && !is_servable(1) && is_servable(2));
    }

    #[test]
    fn times_round_trip_with_nanoseconds() {
        for t in [
            Timestamp { sec: 0, nsec: 0 },
            Timestamp { sec: 1_700_000_000, nsec: 123_456_789 },
            Timestamp { sec: -1, nsec: 500 },
            Timestamp { sec: -2_000_000_000, nsec: 999_999_999 },
            Timestamp { sec: 16_000_000_000, nsec: 1 },
        ] {
            assert_eq!(timestamp(system_time(t)), t);
        }
    }

    #[test]
    fn device_numbers_round_trip() {
        for (ma, mi) in [(0, 0), (8, 1), (259, 3), (4095, 0xfffff), (1, 256)] {
            assert_eq!(decode_dev(encode_dev(ma, mi)), (ma, mi));
        }
        // glibc's makedev agrees for majors below 4096.
        assert_eq!(u64::from(encode_dev(8, 1)), libc::makedev(8, 1));
        assert_eq!(u64::from(encode_dev(259, 300)), libc::makedev(259, 300));
    }
}
