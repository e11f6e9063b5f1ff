//! ioctls: the inode flags (FS_IOC_GETFLAGS/SETFLAGS, what `lsattr` and
//! `chattr` use), the fsxattr view of them (FS_IOC_FSGETXATTR/FSSETXATTR,
//! `xfs_io -c lsattr/chattr/stat`), FS_IOC_GETVERSION, FITRIM (`fstrim`:
//! holes punched in the image), FS_IOC_SHUTDOWN and uext4's own
//! [`UEXT4_IOC_SYNC`] (`uext4 sync`).
//!
//! FS_IOC_SHUTDOWN is `_IOR` although the caller passes its flags in: a
//! restricted FUSE ioctl copies nothing in for a read-only direction, so
//! the daemon never sees them. It goes down as with LOGFLUSH (committed
//! journal left for recovery), unless a kernel does pass them.
//!
//! Since Linux 5.13 the VFS serves the flag ioctls itself
//! (`vfs_fileattr_get`/`vfs_fileattr_set` in fs/file_attr.c, fs/ioctl.c
//! before 6.17): it checks that the caller owns the file or is root and
//! that only CAP_LINUX_IMMUTABLE changes `i` and `a`, then FUSE's
//! `fuse_fileattr_get`/`fuse_fileattr_set` (fs/fuse/ioctl.c) send us a
//! FUSE_IOCTL with FS_IOC_GETFLAGS/SETFLAGS (an `unsigned int`) or
//! FS_IOC_FSGETXATTR/FSSETXATTR (a `struct fsxattr`). The same checks are
//! made again here on the request's uid, for kernels that forward the raw
//! ioctl. FS_IOC_GETVERSION reaches us as a plain restricted ioctl.
//!
//! FS_IOC_FIEMAP never reaches a FUSE filesystem: the VFS answers it
//! (`ioctl_fiemap` in fs/ioctl.c) from `inode->i_op->fiemap`, which FUSE
//! does not provide, so it fails with EOPNOTSUPP before any request; and
//! a restricted FUSE ioctl could not return a variable-sized reply anyway
//! (FUSE_IOCTL_RETRY needs FUSE_IOCTL_UNRESTRICTED, CUSE only). The
//! library's [`uext4::FsCore::fiemap`] serves the same mapping.

use super::Uext4Fuse;
use crate::conv::from_fuse;
use crate::proto::request::Ioctl;
use crate::proto::types::{Errno, Request};
use crate::reply::ReplyIoctl;
use uext4::inode_api::flags::{self, FL_APPEND, FL_IMMUTABLE};
use uext4::inode_api::ShutdownMode;

/// An ioctl number (asm-generic `_IOC`: direction, size, type, number).
const fn ioc(dir: u32, ty: u8, nr: u8, size: u32) -> u32 {
    (dir << 30) | (size << 16) | ((ty as u32) << 8) | nr as u32
}
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;
/// Size of `struct fstrim_range`: start, len, minlen (u64 each).
const FSTRIM_RANGE_SIZE: usize = 24;
/// `_IOWR('X', 121, struct fstrim_range)`.
const FITRIM: u32 = ioc(IOC_READ | IOC_WRITE, b'X', 121, FSTRIM_RANGE_SIZE as u32);
/// `_IOR('X', 125, __u32)`.
const FS_IOC_SHUTDOWN: u32 = ioc(IOC_READ, b'X', 125, 4);
/// `_IO('X', 0xE4)`: uext4's own "sync this filesystem" (`uext4 sync`):
/// write back and commit everything, reply when it is durable. Needed
/// because the kernel forwards FUSE_SYNCFS only for virtiofs, so
/// syncfs(2) and sync(1) never reach the daemon. No data in or out, so
/// a restricted FUSE ioctl carries it; on a directory too (the mount's
/// root). Number 0xE4 of type 'X' is used by no kernel ioctl.
pub const UEXT4_IOC_SYNC: u32 = ioc(0, b'X', 0xE4, 0);

/// `_IOR('f', 1, long)` and its 32-bit form.
const FS_IOC_GETFLAGS: u32 = ioc(IOC_READ, b'f', 1, 8);
const FS_IOC32_GETFLAGS: u32 = ioc(IOC_READ, b'f', 1, 4);
/// `_IOW('f', 2, long)` and its 32-bit form.
const FS_IOC_SETFLAGS: u32 = ioc(IOC_WRITE, b'f', 2, 8);
const FS_IOC32_SETFLAGS: u32 = ioc(IOC_WRITE, b'f', 2, 4);
/// `_IOR('v', 1, long)` and its 32-bit form.
const FS_IOC_GETVERSION: u32 = ioc(IOC_READ, b'v', 1, 8);
const FS_IOC32_GETVERSION: u32 = ioc(IOC_READ, b'v', 1, 4);
/// Size of `struct fsxattr`: xflags, extsize, nextents, projid,
/// cowextsize (u32 each) and 8 bytes of padding.
const FSXATTR_SIZE: usize = 28;
/// `_IOR('X', 31, struct fsxattr)`.
const FS_IOC_FSGETXATTR: u32 = ioc(IOC_READ, b'X', 31, FSXATTR_SIZE as u32);
/// `_IOW('X', 32, struct fsxattr)`.
const FS_IOC_FSSETXATTR: u32 = ioc(IOC_WRITE, b'X', 32, FSXATTR_SIZE as u32);

/// Little-endian u32 at `at` of `b`, if there.
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4).and_then(|s| s.try_into().ok()).map(u32::from_le_bytes)
}

/// Little-endian u64 at `at` of `b`, if there.
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 8).and_then(|s| s.try_into().ok()).map(u64::from_le_bytes)
}

impl Uext4Fuse {
    pub(super) fn do_ioctl(&self, req: &Request, ioctl: &Ioctl<'_>, reply: ReplyIoctl) {
        let Ioctl { ino, fh: _, flags: _, cmd, arg: _, in_data, out_size } = *ioctl;
        let ino = tri!(reply, from_fuse(ino));
        let out = out_size as usize;
        match cmd {
            FS_IOC_GETFLAGS | FS_IOC32_GETFLAGS => {
                let f = tri!(reply, self.fs.flags(ino).map_err(|e| self.fail("getflags", ino, e)));
                let b = f.to_le_bytes();
                reply.ioctl(0, &b[..out.min(4)]);
            }
            FS_IOC_GETVERSION | FS_IOC32_GETVERSION => {
                // ext4 writes an int.
                let st = tri!(reply, self.stat("getversion", ino));
                let b = st.generation.to_le_bytes();
                reply.ioctl(0, &b[..out.min(4)]);
            }
            FS_IOC_FSGETXATTR => {
                let st = tri!(reply, self.stat("fsgetxattr", ino));
                let mut b = [0u8; FSXATTR_SIZE];
                let xflags = flags::flags_to_xflags(st.flags & flags::FL_USER_VISIBLE);
                b[0..4].copy_from_slice(&xflags.to_le_bytes());
                b[12..16].copy_from_slice(&st.projid.to_le_bytes());
                reply.ioctl(0, &b[..out.min(FSXATTR_SIZE)]);
            }
            FS_IOC_SETFLAGS | FS_IOC32_SETFLAGS => {
                tri!(reply, self.writable());
                let Some(new) = u32_at(in_data, 0) else {
                    reply.error(Errno::EINVAL);
                    return;
                };
                tri!(reply, self.set_flags_as(req, ino, new));
                reply.ioctl(0, &[]);
            }
            FS_IOC_FSSETXATTR => {
                tri!(reply, self.writable());
                let (Some(xflags), Some(projid)) = (u32_at(in_data, 0), u32_at(in_data, 12)) else {
                    reply.error(Errno::EINVAL);
                    return;
                };
                let st = tri!(reply, self.stat("fssetxattr", ino));
                let new = flags::xflags_to_flags(st.flags & flags::FL_USER_VISIBLE, xflags);
                if projid != st.projid {
                    tri!(reply, self.owner_or_root(req, st.uid));
                    // The inherit flag goes with the other flags below.
                    let inherit = st.flags & uext4::format::inode::FL_PROJINHERIT != 0;
                    let attr = uext4::inode_api::ProjectAttr { projid, inherit };
                    tri!(reply, self.fs.set_project(ino, attr).map_err(|e| self.fail("fssetxattr", ino, e)));
                }
                tri!(reply, self.set_flags_as(req, ino, new));
                reply.ioctl(0, &[]);
            }
            FITRIM => {
                // CAP_SYS_ADMIN, then a writable filesystem, as ext4.
                if req.uid() != 0 {
                    reply.error(Errno::EPERM);
                    return;
                }
                tri!(reply, self.writable());
                let (Some(start), Some(len), Some(minlen)) =
                    (u64_at(in_data, 0), u64_at(in_data, 8), u64_at(in_data, 16))
                else {
                    reply.error(Errno::EINVAL);
                    return;
                };
                let trimmed = tri!(reply, self.fs.trim(start, len, minlen).map_err(|e| self.fail("fitrim", 0, e)));
                let mut b = [0u8; FSTRIM_RANGE_SIZE];
                b[0..8].copy_from_slice(&start.to_le_bytes());
                b[8..16].copy_from_slice(&trimmed.to_le_bytes());
                b[16..24].copy_from_slice(&minlen.to_le_bytes());
                reply.ioctl(0, &b[..out.min(FSTRIM_RANGE_SIZE)]);
            }
            FS_IOC_SHUTDOWN => {
                if req.uid() != 0 {
                    reply.error(Errno::EPERM);
                    return;
                }
                let mode = match u32_at(in_data, 0) {
                    None => ShutdownMode::LogFlush,
                    Some(f) => match ShutdownMode::from_flags(f) {
                        Some(m) => m,
                        None => {
                            reply.error(Errno::EINVAL);
                            return;
                        }
                    },
                };
                tri!(reply, self.shut_down(mode));
                reply.ioctl(0, &[]);
            }
            UEXT4_IOC_SYNC => {
                // Anyone may, as anyone may call sync(2).
                tri!(reply, self.sync_all("sync"));
                reply.ioctl(0, &[]);
            }
            // FS_IOC_FIEMAP among them: see the module doc.
            _ => reply.error(Errno::ENOTTY),
        }
    }

    /// FS_IOC_SETFLAGS for the caller of `req`: the owner or root may
    /// change flags, only root the immutable and append-only ones (the
    /// VFS's inode_owner_or_capable and CAP_LINUX_IMMUTABLE, seen from
    /// the daemon as uid 0).
    fn set_flags_as(&self, req: &Request, ino: u32, new: u32) -> Result<(), Errno> {
        let st = self.stat("setflags", ino)?;
        self.owner_or_root(req, st.uid)?;
        if (st.flags ^ new) & (FL_IMMUTABLE | FL_APPEND) != 0 && req.uid() != 0 {
            return Err(Errno::EPERM);
        }
        self.fs.set_flags(ino, new).map_err(|e| self.fail("setflags", ino, e))?;
        // The new ctime (and a project change before it): the kernel
        // keeps the attributes it had cached across the ioctl.
        self.inval_attrs(ino);
        Ok(())
    }

    fn owner_or_root(&self, req: &Request, owner: u32) -> Result<(), Errno> {
        if req.uid() == 0 || req.uid() == owner {
            Ok(())
        } else {
            Err(Errno::EPERM)
        }
    }
}

/// The EPERM of open(2) (the VFS's `inode_permission` and `may_open`),
/// which the kernel cannot make for a FUSE inode: no write access to an
/// immutable file, none without O_APPEND to an append-only one, no
/// O_TRUNC of either.
pub(super) fn open_allowed(file_flags: u32, open_flags: i32) -> Result<(), Errno> {
    let writes = open_flags & libc::O_ACCMODE != libc::O_RDONLY;
    let trunc = open_flags & libc::O_TRUNC != 0;
    if file_flags & FL_IMMUTABLE != 0 && (writes || trunc) {
        return Err(Errno::EPERM);
    }
    if file_flags & FL_APPEND != 0 && ((writes && open_flags & libc::O_APPEND == 0) || trunc) {
        return Err(Errno::EPERM);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_are_the_kernels() {
        assert_eq!(FS_IOC_GETFLAGS, 0x8008_6601);
        assert_eq!(FS_IOC_SETFLAGS, 0x4008_6602);
        assert_eq!(FS_IOC_GETVERSION, 0x8008_7601);
        assert_eq!(FS_IOC_FSGETXATTR, 0x801c_581f);
        assert_eq!(FS_IOC_FSSETXATTR, 0x401c_5820);
        assert_eq!(FITRIM, 0xc018_5879);
        assert_eq!(FS_IOC_SHUTDOWN, 0x8004_587d);
        assert_eq!(UEXT4_IOC_SYNC, 0x0000_58e4);
    }

    /// What a crash right after serving `op` leaves of a file written
    /// (not synced) before it: FUSE_SYNCFS and UEXT4_IOC_SYNC, dispatched
    /// as a transport would, must have made it durable.
    fn survives_a_crash_after(op: crate::proto::decode::Operation<'static>) -> Option<Vec<u8>> {
        use crate::proto::decode::{Decoded, InHeader};
        use std::sync::Arc;
        use uext4::device::{BlockDevice, RecordingDevice};
        let dir = tempfile::tempdir().expect("tempdir");
        let img = dir.path().join("img");
        let mk = uext4::mkfs::MkfsOptions { size: 16 << 20, ..Default::default() };
        uext4::mkfs::mkfs_file(&img, &mk).expect("mkfs");
        let dev = Arc::new(RecordingDevice::new(std::fs::read(&img).expect("read image")));
        let opts = uext4::MountOptions {
            write: true,
            commit_interval: std::time::Duration::from_secs(3600),
            ..Default::default()
        };
        let fs = Arc::new(uext4::Filesystem::open_device(dev.clone() as Arc<dyn BlockDevice>, opts).expect("open"));
        let ino = fs.create(fs.root(), b"f", 0o644, 0, 0).expect("create").ino;
        fs.inodes().write(ino, 0, b"made durable").expect("write");
        let adapter = Uext4Fuse::new(fs, &crate::MountConfig::default());
        let header = InHeader { len: 0, opcode: 0, unique: 1, nodeid: 1, uid: 1000, gid: 0, pid: 0, total_extlen: 0 };
        let mut buf = vec![0u8; 4096];
        let mut out = crate::reply::Out::new(&mut buf);
        crate::dispatch::dispatch(&adapter, &Decoded { header, op }, None, &mut out);
        assert_eq!(out.result().map(|r| r.0), Some(0), "the request failed");
        let crashed = dir.path().join("crashed");
        std::fs::write(&crashed, dev.crash_image(dev.events(), |_| false)).expect("write crash image");
        let r = uext4::Filesystem::open(&crashed).expect("open the crashed image");
        r.resolve("/f").ok().map(|i| r.read_all(i).expect("read"))
    }

    #[test]
    fn syncfs_and_the_sync_ioctl_make_everything_durable() {
        use crate::proto::decode::Operation;
        use crate::proto::request::{Statfs, Syncfs};
        use crate::proto::types::INodeNo;
        let ioctl = Operation::Ioctl(Ioctl {
            ino: INodeNo(1),
            fh: crate::proto::types::FileHandle(0),
            flags: 0,
            cmd: UEXT4_IOC_SYNC,
            arg: 0,
            in_data: &[],
            out_size: 0,
        });
        for op in [Operation::Syncfs(Syncfs { ino: INodeNo(1) }), ioctl] {
            let what = format!("{op:?}");
            assert_eq!(survives_a_crash_after(op).as_deref(), Some(&b"made durable"[..]), "{what}");
        }
        // Without either, the write is not durable (the test sees a crash).
        assert_eq!(survives_a_crash_after(Operation::Statfs(Statfs { ino: INodeNo(1) })), None);
    }

    #[test]
    fn open_rules() {
        assert!(open_allowed(FL_IMMUTABLE, libc::O_RDONLY).is_ok());
        assert_eq!(open_allowed(FL_IMMUTABLE, libc::O_WRONLY | libc::O_APPEND), Err(Errno::EPERM));
        assert_eq!(open_allowed(FL_APPEND, libc::O_WRONLY), Err(Errno::EPERM));
        assert!(open_allowed(FL_APPEND, libc::O_WRONLY | libc::O_APPEND).is_ok());
        assert_eq!(open_allowed(FL_APPEND, libc::O_RDONLY | libc::O_TRUNC), Err(Errno::EPERM));
    }
}
