//! Request decoding: the bytes of one request (as read from `/dev/fuse`,
//! or put back together from a ring entry's header and payload) into a
//! typed [`Operation`] that borrows names and data from the buffer.
//!
//! Every read is bounds-checked: a request shorter than its opcode's
//! fixed part, or a name without its terminating NUL, is
//! [`Errno::EIO`] (the kernel never sends one; the reply says so rather
//! than a panic); an opcode the codecs do not know is
//! [`Operation::Unknown`], answered ENOSYS.

use super::abi::{self, op};
use super::request::{
    Access, BatchForget, Bmap, CopyFileRange, Create, Fallocate, Flush, Forget, Fsync, GetAttr, GetXattr, Interrupt,
    Ioctl, Link, ListXattr, Lookup, Lseek, Mkdir, Mknod, Open, Opendir, Read, Readdir, Readlink, Release, Releasedir,
    RemoveXattr, Rename, Rmdir, SetAttr, SetXattr, Statfs, Statx, Symlink, Syncfs, Tmpfile, Unlink, Write,
};
use super::types::{
    AccessFlags, Errno, FileHandle, INodeNo, LockOwner, OpenFlags, RenameFlags, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A bounds-checked cursor over the argument bytes of a request, in one
/// or two segments: a ring entry carries the first argument (the
/// opcode's fixed header) apart from the rest (names, data), and no field
/// straddles the two.
#[derive(Debug, Clone, Copy)]
pub struct Reader<'a> {
    b: &'a [u8],
    next: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A cursor over `b`.
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b, next: &[] }
    }

    /// A cursor over `first`, then `second`.
    pub fn split(first: &'a [u8], second: &'a [u8]) -> Reader<'a> {
        Reader { b: first, next: second }
    }

    fn current(&mut self) -> &'a [u8] {
        if self.b.is_empty() {
            self.b = std::mem::take(&mut self.next);
        }
        self.b
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Errno> {
        let b = if n == 0 { self.b } else { self.current() };
        if b.len() < n {
            return Err(Errno::EIO);
        }
        let (h, t) = b.split_at(n);
        self.b = t;
        Ok(h)
    }

    /// The next native-endian u32.
    pub fn u32(&mut self) -> Result<u32, Errno> {
        let s = self.bytes(4)?;
        Ok(u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
    }

    /// The next native-endian u16.
    pub fn u16(&mut self) -> Result<u16, Errno> {
        let s = self.bytes(2)?;
        Ok(u16::from_ne_bytes([s[0], s[1]]))
    }

    /// The next native-endian u64.
    pub fn u64(&mut self) -> Result<u64, Errno> {
        let s = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_ne_bytes(a))
    }

    /// The next NUL-terminated string (without its NUL).
    pub fn cstr(&mut self) -> Result<&'a OsStr, Errno> {
        let b = self.current();
        let end = b.iter().position(|&c| c == 0).ok_or(Errno::EIO)?;
        self.b = &b[end + 1..];
        Ok(OsStr::from_bytes(&b[..end]))
    }
}

/// `struct fuse_in_header`, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InHeader {
    /// Length of the whole request.
    pub len: u32,
    /// The opcode.
    pub opcode: u32,
    /// Unique id, echoed in the reply.
    pub unique: u64,
    /// The node the request is about.
    pub nodeid: u64,
    /// Caller's filesystem uid.
    pub uid: u32,
    /// Caller's filesystem gid.
    pub gid: u32,
    /// Caller's thread group id.
    pub pid: u32,
    /// Length of the extensions after the arguments, in 8-byte units.
    pub total_extlen: u16,
}

impl InHeader {
    /// Decodes the first 40 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<InHeader, Errno> {
        let mut r = Reader::new(b);
        let h = InHeader {
            len: r.u32()?,
            opcode: r.u32()?,
            unique: r.u64()?,
            nodeid: r.u64()?,
            uid: r.u32()?,
            gid: r.u32()?,
            pid: r.u32()?,
            total_extlen: r.u16()?,
        };
        Ok(h)
    }

    /// The caller, as the adapter sees it.
    pub fn request(&self) -> Request {
        Request { unique: self.unique, nodeid: self.nodeid, uid: self.uid, gid: self.gid, pid: self.pid }
    }
}

/// `struct fuse_init_in`, decoded (flags and flags2 joined).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitIn {
    /// The kernel's ABI major version.
    pub major: u32,
    /// The kernel's ABI minor version.
    pub minor: u32,
    /// The kernel's readahead, in bytes.
    pub max_readahead: u32,
    /// What the kernel offers (`FUSE_*` capability bits).
    pub flags: u64,
}

/// One decoded request's operation and its arguments, one typed value of
/// [`super::request`] each (the node it is about among them), which the
/// `Filesystem` method serving it takes as it is. The requests the
/// transport answers itself (INIT, DESTROY) or nobody serves (locks,
/// POLL, unknown opcodes) are the exceptions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation<'a> {
    /// LOOKUP: an entry of a directory.
    Lookup(Lookup<'a>),
    /// FORGET: the kernel drops references to a node (no reply).
    Forget(Forget),
    /// BATCH_FORGET: FORGET for many nodes (no reply).
    BatchForget(BatchForget<'a>),
    /// GETATTR: a node's attributes.
    Getattr(GetAttr),
    /// SETATTR: change attributes.
    Setattr(SetAttr),
    /// READLINK: a symlink's target.
    Readlink(Readlink),
    /// SYMLINK: a new symlink in a directory.
    Symlink(Symlink<'a>),
    /// MKNOD: a new file, device, FIFO or socket in a directory.
    Mknod(Mknod<'a>),
    /// MKDIR: a new directory in a directory.
    Mkdir(Mkdir<'a>),
    /// UNLINK: remove a non-directory entry.
    Unlink(Unlink<'a>),
    /// RMDIR: remove an empty directory's entry.
    Rmdir(Rmdir<'a>),
    /// RENAME (no flags) and RENAME2.
    Rename(Rename<'a>),
    /// LINK: a new entry in a directory for another node.
    Link(Link<'a>),
    /// OPEN: open a file.
    Open(Open),
    /// READ: bytes of an open file.
    Read(Read),
    /// WRITE: bytes into an open file.
    Write(Write<'a>),
    /// STATFS: the filesystem's sizes and counts.
    Statfs(Statfs),
    /// RELEASE: the last close of an open file.
    Release(Release),
    /// FSYNC: make a file durable.
    Fsync(Fsync),
    /// SETXATTR: set an extended attribute.
    Setxattr(SetXattr<'a>),
    /// GETXATTR: an extended attribute's value.
    Getxattr(GetXattr<'a>),
    /// LISTXATTR: the extended attributes' names.
    Listxattr(ListXattr),
    /// REMOVEXATTR: remove an extended attribute.
    Removexattr(RemoveXattr<'a>),
    /// FLUSH: a close(2) of a descriptor.
    Flush(Flush),
    /// INIT: the handshake (answered by the transport).
    Init(InitIn),
    /// OPENDIR: open a directory.
    Opendir(Opendir),
    /// READDIR: entries of an open directory.
    Readdir(Readdir),
    /// READDIRPLUS: entries with their attributes.
    Readdirplus(Readdir),
    /// RELEASEDIR: the last close of an open directory.
    Releasedir(Releasedir),
    /// FSYNCDIR: make a directory durable.
    Fsyncdir(Fsync),
    /// GETLK, SETLK, SETLKW: POSIX locks stay the kernel's (ENOSYS).
    Lock,
    /// ACCESS: may the caller access a node.
    Access(Access),
    /// CREATE: create and open a file.
    Create(Create<'a>),
    /// TMPFILE: create and open an unnamed file.
    Tmpfile(Tmpfile),
    /// INTERRUPT: the caller of another request gave up (no reply).
    Interrupt(Interrupt),
    /// BMAP: a block's device block (fuseblk only).
    Bmap(Bmap),
    /// DESTROY: the end of the session (answered by the transport).
    Destroy,
    /// IOCTL: an ioctl(2) on an open file.
    Ioctl(Ioctl<'a>),
    /// POLL (not supported: ENOSYS).
    Poll,
    /// FALLOCATE: allocate, punch or zero a range.
    Fallocate(Fallocate),
    /// LSEEK: the next data or hole.
    Lseek(Lseek),
    /// COPY_FILE_RANGE (a 32-bit reply) and COPY_FILE_RANGE_64 (`wide`).
    CopyFileRange(CopyFileRange),
    /// STATX: a node's attributes as statx(2) has them.
    Statx(Statx),
    /// SYNCFS: make the whole filesystem durable.
    Syncfs(Syncfs),
    /// An opcode the codecs do not know (ENOSYS).
    Unknown {
        /// The opcode.
        opcode: u32,
    },
}

impl Operation<'_> {
    /// True for the requests the kernel expects no reply to.
    pub fn no_reply(&self) -> bool {
        matches!(self, Operation::Forget(_) | Operation::BatchForget(_) | Operation::Interrupt(_))
    }
}

impl std::fmt::Display for Operation<'_> {
    /// The opcode's name and the names or sizes that tell requests apart
    /// in a debug log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use Operation as O;
        match self {
            O::Lookup(Lookup { name, .. }) => write!(f, "LOOKUP name {name:?}"),
            O::Forget(Forget { nlookup, .. }) => write!(f, "FORGET nlookup {nlookup}"),
            O::BatchForget(b) => write!(f, "BATCH_FORGET {}", b.len()),
            O::Getattr(_) => write!(f, "GETATTR"),
            O::Setattr(s) => write!(f, "SETATTR {s:?}"),
            O::Readlink(_) => write!(f, "READLINK"),
            O::Symlink(Symlink { name, target, .. }) => write!(f, "SYMLINK target {target:?}, link_name {name:?}"),
            O::Mknod(Mknod { name, mode, .. }) => write!(f, "MKNOD name {name:?}, mode {mode:#05o}"),
            O::Mkdir(Mkdir { name, mode, .. }) => write!(f, "MKDIR name {name:?}, mode {mode:#05o}"),
            O::Unlink(Unlink { name, .. }) => write!(f, "UNLINK name {name:?}"),
            O::Rmdir(Rmdir { name, .. }) => write!(f, "RMDIR name {name:?}"),
            O::Rename(Rename { name, newparent, newname, flags, .. }) => {
                let (newdir, flags) = (newparent.0, flags.bits());
                write!(f, "RENAME name {name:?}, newdir {newdir:#x}, newname {newname:?}, flags {flags:#x}")
            }
            O::Link(Link { ino, newname, .. }) => write!(f, "LINK ino {:#x}, newname {newname:?}", ino.0),
            O::Open(Open { flags, .. }) => write!(f, "OPEN flags {:#x}", flags.0),
            O::Read(Read { fh, offset, size, .. }) => write!(f, "READ fh {}, offset {offset}, size {size}", fh.0),
            O::Write(Write { fh, offset, data, .. }) => {
                write!(f, "WRITE fh {}, offset {offset}, size {}", fh.0, data.len())
            }
            O::Statfs(_) => write!(f, "STATFS"),
            O::Release(r) => write!(f, "RELEASE fh {}", r.fh.0),
            O::Fsync(Fsync { fh, .. }) => write!(f, "FSYNC fh {}", fh.0),
            O::Setxattr(SetXattr { name, value, .. }) => write!(f, "SETXATTR name {name:?}, size {}", value.len()),
            O::Getxattr(GetXattr { name, size, .. }) => write!(f, "GETXATTR name {name:?}, size {size}"),
            O::Listxattr(ListXattr { size, .. }) => write!(f, "LISTXATTR size {size}"),
            O::Removexattr(RemoveXattr { name, .. }) => write!(f, "REMOVEXATTR name {name:?}"),
            O::Flush(Flush { fh, .. }) => write!(f, "FLUSH fh {}", fh.0),
            O::Init(i) => write!(f, "INIT kernel ABI {}.{}, flags {:#x}", i.major, i.minor, i.flags),
            O::Opendir(_) => write!(f, "OPENDIR"),
            O::Readdir(Readdir { offset, size, .. }) => write!(f, "READDIR offset {offset}, size {size}"),
            O::Readdirplus(Readdir { offset, size, .. }) => write!(f, "READDIRPLUS offset {offset}, size {size}"),
            O::Releasedir(_) => write!(f, "RELEASEDIR"),
            O::Fsyncdir(_) => write!(f, "FSYNCDIR"),
            O::Lock => write!(f, "GETLK/SETLK"),
            O::Access(Access { mask, .. }) => write!(f, "ACCESS mask {:#o}", mask.bits()),
            O::Create(Create { name, mode, flags, .. }) => {
                write!(f, "CREATE name {name:?}, mode {mode:#05o}, flags {flags:#x}")
            }
            O::Tmpfile(Tmpfile { mode, flags, .. }) => write!(f, "TMPFILE mode {mode:#05o}, flags {flags:#x}"),
            O::Interrupt(Interrupt { unique }) => write!(f, "INTERRUPT unique {unique}"),
            O::Bmap(Bmap { block, .. }) => write!(f, "BMAP block {block}"),
            O::Destroy => write!(f, "DESTROY"),
            O::Ioctl(Ioctl { cmd, .. }) => write!(f, "IOCTL cmd {cmd:#x}"),
            O::Poll => write!(f, "POLL"),
            O::Fallocate(Fallocate { offset, length, mode, .. }) => {
                write!(f, "FALLOCATE offset {offset}, length {length}, mode {mode:#x}")
            }
            O::Lseek(Lseek { offset, whence, .. }) => write!(f, "LSEEK offset {offset}, whence {whence}"),
            O::CopyFileRange(CopyFileRange { len, wide, .. }) => {
                write!(f, "COPY_FILE_RANGE{} len {len}", if *wide { "_64" } else { "" })
            }
            O::Statx(Statx { mask, .. }) => write!(f, "STATX mask {mask:#x}"),
            O::Syncfs(_) => write!(f, "SYNCFS"),
            O::Unknown { opcode } => write!(f, "opcode {opcode}"),
        }
    }
}

/// A decoded request: who asked, and what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// The in header.
    pub header: InHeader,
    /// The operation.
    pub op: Operation<'a>,
}

/// What decoding depends on besides the bytes: what INIT negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecodeConfig {
    /// FUSE_SETXATTR_EXT was negotiated: setxattr_in is 16 bytes.
    pub setxattr_ext: bool,
}

/// Decodes one whole request (header and arguments).
pub fn decode(buf: &[u8], cfg: DecodeConfig) -> Result<Decoded<'_>, Errno> {
    let header = InHeader::parse(buf)?;
    let len = header.len as usize;
    if len < abi::IN_HEADER_LEN || len > buf.len() {
        return Err(Errno::EIO);
    }
    let ext = usize::from(header.total_extlen) * 8;
    let args = buf[abi::IN_HEADER_LEN..len].get(..len - abi::IN_HEADER_LEN - ext.min(len - abi::IN_HEADER_LEN));
    let args = args.ok_or(Errno::EIO)?;
    let op = decode_args(header.opcode, header.nodeid, args, cfg)?;
    Ok(Decoded { header, op })
}

/// Decodes the arguments of one request of `opcode` about node `nodeid`
/// (the bytes after the in header, extensions removed).
pub fn decode_args(opcode: u32, nodeid: u64, args: &[u8], cfg: DecodeConfig) -> Result<Operation<'_>, Errno> {
    decode_split(opcode, nodeid, Reader::new(args), cfg)
}

/// Decodes the arguments of one request of `opcode` about node `nodeid`
/// (the in header's) from `r` (one buffer, or a ring entry's op header
/// and payload).
pub fn decode_split(opcode: u32, nodeid: u64, mut r: Reader<'_>, cfg: DecodeConfig) -> Result<Operation<'_>, Errno> {
    let ino = INodeNo(nodeid);
    let o = match opcode {
        op::LOOKUP => Operation::Lookup(Lookup { parent: ino, name: r.cstr()? }),
        op::FORGET => Operation::Forget(Forget { ino, nlookup: r.u64()? }),
        op::BATCH_FORGET => {
            let count = r.u32()? as usize;
            r.u32()?;
            let nodes = r.bytes(count.checked_mul(16).ok_or(Errno::EIO)?)?;
            Operation::BatchForget(BatchForget { nodes })
        }
        op::GETATTR => {
            let flags = r.u32()?;
            r.u32()?;
            let fh = r.u64()?;
            Operation::Getattr(GetAttr { ino, fh: (flags & abi::GETATTR_FH != 0).then_some(FileHandle(fh)) })
        }
        op::SETATTR => {
            use abi::fattr;
            let valid = r.u32()?;
            r.u32()?;
            let (fh, size, _lock_owner) = (r.u64()?, r.u64()?, r.u64()?);
            let (atime, mtime, ctime) = (r.u64()? as i64, r.u64()? as i64, r.u64()? as i64);
            let (atimensec, mtimensec, ctimensec, mode) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
            r.u32()?;
            let (uid, gid) = (r.u32()?, r.u32()?);
            let has = |bit: u32| valid & bit != 0;
            Operation::Setattr(SetAttr {
                ino,
                mode: has(fattr::MODE).then_some(mode),
                uid: has(fattr::UID).then_some(uid),
                gid: has(fattr::GID).then_some(gid),
                size: has(fattr::SIZE).then_some(size),
                atime: set_time(valid, fattr::ATIME, fattr::ATIME_NOW, atime, atimensec),
                mtime: set_time(valid, fattr::MTIME, fattr::MTIME_NOW, mtime, mtimensec),
                ctime: has(fattr::CTIME).then(|| time(ctime, ctimensec)),
                fh: has(fattr::FH).then_some(FileHandle(fh)),
                kill_suidgid: has(fattr::KILL_SUIDGID),
            })
        }
        op::READLINK => Operation::Readlink(Readlink { ino }),
        op::SYMLINK => {
            let name = r.cstr()?;
            Operation::Symlink(Symlink { parent: ino, name, target: Path::new(r.cstr()?) })
        }
        op::MKNOD => {
            let (mode, rdev, umask) = (r.u32()?, r.u32()?, r.u32()?);
            r.u32()?;
            Operation::Mknod(Mknod { parent: ino, mode, rdev, umask, name: r.cstr()? })
        }
        op::MKDIR => {
            let (mode, umask) = (r.u32()?, r.u32()?);
            Operation::Mkdir(Mkdir { parent: ino, mode, umask, name: r.cstr()? })
        }
        op::UNLINK => Operation::Unlink(Unlink { parent: ino, name: r.cstr()? }),
        op::RMDIR => Operation::Rmdir(Rmdir { parent: ino, name: r.cstr()? }),
        op::RENAME | op::RENAME2 => {
            let newdir = r.u64()?;
            let flags = if opcode == op::RENAME2 {
                let f = r.u32()?;
                r.u32()?;
                f
            } else {
                0
            };
            let name = r.cstr()?;
            let flags = RenameFlags::from_bits_retain(flags);
            Operation::Rename(Rename { parent: ino, name, newparent: INodeNo(newdir), newname: r.cstr()?, flags })
        }
        op::LINK => {
            let oldnodeid = r.u64()?;
            Operation::Link(Link { ino: INodeNo(oldnodeid), newparent: ino, newname: r.cstr()? })
        }
        op::OPEN => {
            let flags = OpenFlags(r.u32()? as i32);
            Operation::Open(Open { ino, flags, open_flags: r.u32()? })
        }
        op::OPENDIR => Operation::Opendir(Opendir { ino, flags: OpenFlags(r.u32()? as i32) }),
        op::READ | op::READDIR | op::READDIRPLUS => {
            let (fh, offset, size, read_flags, lock_owner, flags) =
                (r.u64()?, r.u64()?, r.u32()?, r.u32()?, r.u64()?, r.u32()?);
            let fh = FileHandle(fh);
            match opcode {
                op::READ => Operation::Read(Read {
                    ino,
                    fh,
                    offset,
                    size,
                    flags: OpenFlags(flags as i32),
                    lock_owner: (read_flags & abi::READ_LOCKOWNER != 0).then_some(LockOwner(lock_owner)),
                }),
                op::READDIR => Operation::Readdir(Readdir { ino, fh, offset, size }),
                _ => Operation::Readdirplus(Readdir { ino, fh, offset, size }),
            }
        }
        op::WRITE => {
            let (fh, offset, size, write_flags, lock_owner, flags) =
                (r.u64()?, r.u64()?, r.u32()?, r.u32()?, r.u64()?, r.u32()?);
            r.u32()?;
            let data = r.bytes(size as usize)?;
            Operation::Write(Write {
                ino,
                fh: FileHandle(fh),
                offset,
                data,
                write_flags: WriteFlags::from_bits_retain(write_flags),
                flags: OpenFlags(flags as i32),
                lock_owner: (write_flags & abi::WRITE_LOCKOWNER != 0).then_some(LockOwner(lock_owner)),
            })
        }
        op::STATFS => Operation::Statfs(Statfs { ino }),
        op::RELEASE | op::RELEASEDIR => {
            let (fh, flags, release_flags, lock_owner) = (r.u64()?, r.u32()?, r.u32()?, r.u64()?);
            let (fh, flags) = (FileHandle(fh), OpenFlags(flags as i32));
            if opcode == op::RELEASE {
                Operation::Release(Release {
                    ino,
                    fh,
                    flags,
                    lock_owner: Some(LockOwner(lock_owner)),
                    flush: release_flags & abi::RELEASE_FLUSH != 0,
                })
            } else {
                Operation::Releasedir(Releasedir { ino, fh, flags })
            }
        }
        op::FSYNC | op::FSYNCDIR => {
            let (fh, fsync_flags) = (r.u64()?, r.u32()?);
            let fsync = Fsync { ino, fh: FileHandle(fh), datasync: fsync_flags & abi::FSYNC_FDATASYNC != 0 };
            if opcode == op::FSYNC {
                Operation::Fsync(fsync)
            } else {
                Operation::Fsyncdir(fsync)
            }
        }
        op::SETXATTR => {
            let (size, flags) = (r.u32()?, r.u32()?);
            let setxattr_flags = if cfg.setxattr_ext {
                let f = r.u32()?;
                r.u32()?;
                f
            } else {
                0
            };
            let name = r.cstr()?;
            let value = r.bytes(size as usize)?;
            Operation::Setxattr(SetXattr { ino, name, value, flags: flags as i32, setxattr_flags })
        }
        op::GETXATTR => {
            let size = r.u32()?;
            r.u32()?;
            Operation::Getxattr(GetXattr { ino, size, name: r.cstr()? })
        }
        op::LISTXATTR => Operation::Listxattr(ListXattr { ino, size: r.u32()? }),
        op::REMOVEXATTR => Operation::Removexattr(RemoveXattr { ino, name: r.cstr()? }),
        op::FLUSH => {
            let fh = FileHandle(r.u64()?);
            r.u64()?;
            Operation::Flush(Flush { ino, fh, lock_owner: LockOwner(r.u64()?) })
        }
        op::INIT => {
            let (major, minor, max_readahead, flags) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
            // flags2 exists from 7.36 on, only meaningful with FUSE_INIT_EXT.
            let flags2 = if minor >= 36 && flags & (1 << 30) != 0 { r.u32().unwrap_or(0) } else { 0 };
            Operation::Init(InitIn { major, minor, max_readahead, flags: u64::from(flags) | u64::from(flags2) << 32 })
        }
        op::GETLK | op::SETLK | op::SETLKW => Operation::Lock,
        op::ACCESS => Operation::Access(Access { ino, mask: AccessFlags::from_bits_retain(r.u32()? as i32) }),
        op::CREATE | op::TMPFILE => {
            let (flags, mode, umask, open_flags) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
            let flags = flags as i32;
            if opcode == op::CREATE {
                Operation::Create(Create { parent: ino, name: r.cstr()?, mode, umask, flags, open_flags })
            } else {
                Operation::Tmpfile(Tmpfile { parent: ino, mode, umask, flags, open_flags })
            }
        }
        op::INTERRUPT => Operation::Interrupt(Interrupt { unique: r.u64()? }),
        op::BMAP => Operation::Bmap(Bmap { ino, block: r.u64()?, blocksize: r.u32()? }),
        op::DESTROY => Operation::Destroy,
        op::IOCTL => {
            let (fh, flags, cmd, arg, in_size, out_size) = (r.u64()?, r.u32()?, r.u32()?, r.u64()?, r.u32()?, r.u32()?);
            let in_data = r.bytes(in_size as usize)?;
            Operation::Ioctl(Ioctl { ino, fh: FileHandle(fh), flags, cmd, arg, in_data, out_size })
        }
        op::POLL => Operation::Poll,
        op::FALLOCATE => {
            let (fh, offset, length, mode) = (r.u64()?, r.u64()?, r.u64()?, r.u32()?);
            Operation::Fallocate(Fallocate { ino, fh: FileHandle(fh), offset, length, mode: mode as i32 })
        }
        op::LSEEK => {
            let (fh, offset, whence) = (r.u64()?, r.u64()?, r.u32()?);
            Operation::Lseek(Lseek { ino, fh: FileHandle(fh), offset: offset as i64, whence: whence as i32 })
        }
        op::COPY_FILE_RANGE | op::COPY_FILE_RANGE_64 => Operation::CopyFileRange(CopyFileRange {
            ino,
            fh_in: FileHandle(r.u64()?),
            offset_in: r.u64()?,
            ino_out: INodeNo(r.u64()?),
            fh_out: FileHandle(r.u64()?),
            offset_out: r.u64()?,
            len: r.u64()?,
            flags: r.u64()?,
            wide: opcode == op::COPY_FILE_RANGE_64,
        }),
        op::STATX => {
            let getattr_flags = r.u32()?;
            r.u32()?;
            let fh = FileHandle(r.u64()?);
            let fh = (getattr_flags & abi::GETATTR_FH != 0).then_some(fh);
            Operation::Statx(Statx { ino, fh, flags: r.u32()?, mask: r.u32()? })
        }
        op::SYNCFS => Operation::Syncfs(Syncfs { ino }),
        opcode => Operation::Unknown { opcode },
    };
    Ok(o)
}

/// The time `sec`.`nsec` after the epoch (before it for a negative
/// `sec`); beyond what `SystemTime` holds, the epoch.
fn time(sec: i64, nsec: u32) -> SystemTime {
    let nanos = Duration::from_nanos(u64::from(nsec.min(999_999_999)));
    if sec >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(sec.unsigned_abs()) + nanos).unwrap_or(UNIX_EPOCH)
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_secs(sec.unsigned_abs()))
            .and_then(|t| t.checked_add(nanos))
            .unwrap_or(UNIX_EPOCH)
    }
}

/// A setattr time: absent unless `set` is in `valid`, the present if
/// `now` is too, else `sec`.`nsec`.
fn set_time(valid: u32, set: u32, now: u32, sec: i64, nsec: u32) -> Option<TimeOrNow> {
    if valid & set == 0 {
        None
    } else if valid & now != 0 {
        Some(TimeOrNow::Now)
    } else {
        Some(TimeOrNow::SpecificTime(time(sec, nsec)))
    }
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
