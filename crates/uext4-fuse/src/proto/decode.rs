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
use super::types::{Errno, Request};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

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

/// `struct fuse_setattr_in`, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[allow(missing_docs)]
pub struct SetattrIn {
    pub valid: u32,
    pub fh: u64,
    pub size: u64,
    pub lock_owner: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub atimensec: u32,
    pub mtimensec: u32,
    pub ctimensec: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// `struct fuse_init_in`, decoded (flags and flags2 joined).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct InitIn {
    pub major: u32,
    pub minor: u32,
    pub max_readahead: u32,
    pub flags: u64,
}

/// One decoded request's operation and its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Operation<'a> {
    Lookup {
        name: &'a OsStr,
    },
    Forget {
        nlookup: u64,
    },
    /// `count` pairs of (nodeid, nlookup), 16 bytes each, in `nodes`.
    BatchForget {
        nodes: &'a [u8],
    },
    Getattr {
        fh: Option<u64>,
    },
    Setattr(SetattrIn),
    Readlink,
    Symlink {
        name: &'a OsStr,
        target: &'a OsStr,
    },
    Mknod {
        mode: u32,
        rdev: u32,
        umask: u32,
        name: &'a OsStr,
    },
    Mkdir {
        mode: u32,
        umask: u32,
        name: &'a OsStr,
    },
    Unlink {
        name: &'a OsStr,
    },
    Rmdir {
        name: &'a OsStr,
    },
    /// RENAME (flags 0) and RENAME2.
    Rename {
        newdir: u64,
        flags: u32,
        name: &'a OsStr,
        newname: &'a OsStr,
    },
    Link {
        oldnodeid: u64,
        newname: &'a OsStr,
    },
    Open {
        flags: u32,
        open_flags: u32,
    },
    Read {
        fh: u64,
        offset: u64,
        size: u32,
        read_flags: u32,
        lock_owner: u64,
        flags: u32,
    },
    Write {
        fh: u64,
        offset: u64,
        write_flags: u32,
        lock_owner: u64,
        flags: u32,
        data: &'a [u8],
    },
    Statfs,
    Release {
        fh: u64,
        flags: u32,
        release_flags: u32,
        lock_owner: u64,
    },
    Fsync {
        fh: u64,
        fsync_flags: u32,
    },
    Setxattr {
        flags: u32,
        setxattr_flags: u32,
        name: &'a OsStr,
        value: &'a [u8],
    },
    Getxattr {
        size: u32,
        name: &'a OsStr,
    },
    Listxattr {
        size: u32,
    },
    Removexattr {
        name: &'a OsStr,
    },
    Flush {
        fh: u64,
        lock_owner: u64,
    },
    Init(InitIn),
    Opendir {
        flags: u32,
    },
    Readdir {
        fh: u64,
        offset: u64,
        size: u32,
    },
    Readdirplus {
        fh: u64,
        offset: u64,
        size: u32,
    },
    Releasedir {
        fh: u64,
        flags: u32,
    },
    Fsyncdir {
        fh: u64,
        fsync_flags: u32,
    },
    /// GETLK, SETLK, SETLKW: POSIX locks stay the kernel's (ENOSYS).
    Lock,
    Access {
        mask: u32,
    },
    Create {
        flags: u32,
        mode: u32,
        umask: u32,
        open_flags: u32,
        name: &'a OsStr,
    },
    Tmpfile {
        flags: u32,
        mode: u32,
        umask: u32,
        open_flags: u32,
    },
    Interrupt {
        unique: u64,
    },
    Bmap {
        block: u64,
        blocksize: u32,
    },
    Destroy,
    Ioctl {
        fh: u64,
        flags: u32,
        cmd: u32,
        arg: u64,
        out_size: u32,
        data: &'a [u8],
    },
    Poll,
    Fallocate {
        fh: u64,
        offset: u64,
        length: u64,
        mode: u32,
    },
    Lseek {
        fh: u64,
        offset: u64,
        whence: u32,
    },
    /// COPY_FILE_RANGE (a 32-bit reply) and COPY_FILE_RANGE_64 (`wide`).
    CopyFileRange {
        fh_in: u64,
        off_in: u64,
        nodeid_out: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
        flags: u64,
        wide: bool,
    },
    Statx {
        getattr_flags: u32,
        fh: u64,
        sx_flags: u32,
        sx_mask: u32,
    },
    Syncfs,
    Unknown {
        opcode: u32,
    },
}

impl Operation<'_> {
    /// True for the requests the kernel expects no reply to.
    pub fn no_reply(&self) -> bool {
        matches!(self, Operation::Forget { .. } | Operation::BatchForget { .. } | Operation::Interrupt { .. })
    }
}

impl std::fmt::Display for Operation<'_> {
    /// The opcode's name and the names or sizes that tell requests apart
    /// in a debug log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use Operation as O;
        match self {
            O::Lookup { name } => write!(f, "LOOKUP name {name:?}"),
            O::Forget { nlookup } => write!(f, "FORGET nlookup {nlookup}"),
            O::BatchForget { nodes } => write!(f, "BATCH_FORGET {}", nodes.len() / 16),
            O::Getattr { .. } => write!(f, "GETATTR"),
            O::Setattr(s) => write!(f, "SETATTR valid {:#x}", s.valid),
            O::Readlink => write!(f, "READLINK"),
            O::Symlink { name, target } => write!(f, "SYMLINK target {target:?}, link_name {name:?}"),
            O::Mknod { name, mode, .. } => write!(f, "MKNOD name {name:?}, mode {mode:#05o}"),
            O::Mkdir { name, mode, .. } => write!(f, "MKDIR name {name:?}, mode {mode:#05o}"),
            O::Unlink { name } => write!(f, "UNLINK name {name:?}"),
            O::Rmdir { name } => write!(f, "RMDIR name {name:?}"),
            O::Rename { newdir, flags, name, newname } => {
                write!(f, "RENAME name {name:?}, newdir {newdir:#x}, newname {newname:?}, flags {flags:#x}")
            }
            O::Link { oldnodeid, newname } => write!(f, "LINK ino {oldnodeid:#x}, newname {newname:?}"),
            O::Open { flags, .. } => write!(f, "OPEN flags {flags:#x}"),
            O::Read { fh, offset, size, .. } => write!(f, "READ fh {fh}, offset {offset}, size {size}"),
            O::Write { fh, offset, data, .. } => write!(f, "WRITE fh {fh}, offset {offset}, size {}", data.len()),
            O::Statfs => write!(f, "STATFS"),
            O::Release { fh, .. } => write!(f, "RELEASE fh {fh}"),
            O::Fsync { fh, .. } => write!(f, "FSYNC fh {fh}"),
            O::Setxattr { name, value, .. } => write!(f, "SETXATTR name {name:?}, size {}", value.len()),
            O::Getxattr { name, size } => write!(f, "GETXATTR name {name:?}, size {size}"),
            O::Listxattr { size } => write!(f, "LISTXATTR size {size}"),
            O::Removexattr { name } => write!(f, "REMOVEXATTR name {name:?}"),
            O::Flush { fh, .. } => write!(f, "FLUSH fh {fh}"),
            O::Init(i) => write!(f, "INIT kernel ABI {}.{}, flags {:#x}", i.major, i.minor, i.flags),
            O::Opendir { .. } => write!(f, "OPENDIR"),
            O::Readdir { offset, size, .. } => write!(f, "READDIR offset {offset}, size {size}"),
            O::Readdirplus { offset, size, .. } => write!(f, "READDIRPLUS offset {offset}, size {size}"),
            O::Releasedir { .. } => write!(f, "RELEASEDIR"),
            O::Fsyncdir { .. } => write!(f, "FSYNCDIR"),
            O::Lock => write!(f, "GETLK/SETLK"),
            O::Access { mask } => write!(f, "ACCESS mask {mask:#o}"),
            O::Create { name, mode, flags, .. } => {
                write!(f, "CREATE name {name:?}, mode {mode:#05o}, flags {flags:#x}")
            }
            O::Tmpfile { mode, flags, .. } => write!(f, "TMPFILE mode {mode:#05o}, flags {flags:#x}"),
            O::Interrupt { unique } => write!(f, "INTERRUPT unique {unique}"),
            O::Bmap { block, .. } => write!(f, "BMAP block {block}"),
            O::Destroy => write!(f, "DESTROY"),
            O::Ioctl { cmd, .. } => write!(f, "IOCTL cmd {cmd:#x}"),
            O::Poll => write!(f, "POLL"),
            O::Fallocate { offset, length, mode, .. } => {
                write!(f, "FALLOCATE offset {offset}, length {length}, mode {mode:#x}")
            }
            O::Lseek { offset, whence, .. } => write!(f, "LSEEK offset {offset}, whence {whence}"),
            O::CopyFileRange { len, wide, .. } => {
                write!(f, "COPY_FILE_RANGE{} len {len}", if *wide { "_64" } else { "" })
            }
            O::Statx { sx_mask, .. } => write!(f, "STATX mask {sx_mask:#x}"),
            O::Syncfs => write!(f, "SYNCFS"),
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
    let op = decode_args(header.opcode, args, cfg)?;
    Ok(Decoded { header, op })
}

/// Decodes the arguments of one request of `opcode` (the bytes after the
/// in header, extensions removed).
pub fn decode_args(opcode: u32, args: &[u8], cfg: DecodeConfig) -> Result<Operation<'_>, Errno> {
    decode_split(opcode, Reader::new(args), cfg)
}

/// Decodes the arguments of one request of `opcode` from `r` (one
/// buffer, or a ring entry's op header and payload).
pub fn decode_split(opcode: u32, mut r: Reader<'_>, cfg: DecodeConfig) -> Result<Operation<'_>, Errno> {
    let o = match opcode {
        op::LOOKUP => Operation::Lookup { name: r.cstr()? },
        op::FORGET => Operation::Forget { nlookup: r.u64()? },
        op::BATCH_FORGET => {
            let count = r.u32()? as usize;
            r.u32()?;
            let nodes = r.bytes(count.checked_mul(16).ok_or(Errno::EIO)?)?;
            Operation::BatchForget { nodes }
        }
        op::GETATTR => {
            let flags = r.u32()?;
            r.u32()?;
            let fh = r.u64()?;
            Operation::Getattr { fh: (flags & abi::GETATTR_FH != 0).then_some(fh) }
        }
        op::SETATTR => {
            let valid = r.u32()?;
            r.u32()?;
            let mut s = SetattrIn { valid, ..Default::default() };
            s.fh = r.u64()?;
            s.size = r.u64()?;
            s.lock_owner = r.u64()?;
            s.atime = r.u64()? as i64;
            s.mtime = r.u64()? as i64;
            s.ctime = r.u64()? as i64;
            s.atimensec = r.u32()?;
            s.mtimensec = r.u32()?;
            s.ctimensec = r.u32()?;
            s.mode = r.u32()?;
            r.u32()?;
            s.uid = r.u32()?;
            s.gid = r.u32()?;
            Operation::Setattr(s)
        }
        op::READLINK => Operation::Readlink,
        op::SYMLINK => {
            let name = r.cstr()?;
            Operation::Symlink { name, target: r.cstr()? }
        }
        op::MKNOD => {
            let (mode, rdev, umask) = (r.u32()?, r.u32()?, r.u32()?);
            r.u32()?;
            Operation::Mknod { mode, rdev, umask, name: r.cstr()? }
        }
        op::MKDIR => {
            let (mode, umask) = (r.u32()?, r.u32()?);
            Operation::Mkdir { mode, umask, name: r.cstr()? }
        }
        op::UNLINK => Operation::Unlink { name: r.cstr()? },
        op::RMDIR => Operation::Rmdir { name: r.cstr()? },
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
            Operation::Rename { newdir, flags, name, newname: r.cstr()? }
        }
        op::LINK => {
            let oldnodeid = r.u64()?;
            Operation::Link { oldnodeid, newname: r.cstr()? }
        }
        op::OPEN => Operation::Open { flags: r.u32()?, open_flags: r.u32()? },
        op::OPENDIR => Operation::Opendir { flags: r.u32()? },
        op::READ | op::READDIR | op::READDIRPLUS => {
            let (fh, offset, size, read_flags, lock_owner, flags) =
                (r.u64()?, r.u64()?, r.u32()?, r.u32()?, r.u64()?, r.u32()?);
            match opcode {
                op::READ => Operation::Read { fh, offset, size, read_flags, lock_owner, flags },
                op::READDIR => Operation::Readdir { fh, offset, size },
                _ => Operation::Readdirplus { fh, offset, size },
            }
        }
        op::WRITE => {
            let (fh, offset, size, write_flags, lock_owner, flags) =
                (r.u64()?, r.u64()?, r.u32()?, r.u32()?, r.u64()?, r.u32()?);
            r.u32()?;
            let data = r.bytes(size as usize)?;
            Operation::Write { fh, offset, write_flags, lock_owner, flags, data }
        }
        op::STATFS => Operation::Statfs,
        op::RELEASE | op::RELEASEDIR => {
            let (fh, flags, release_flags, lock_owner) = (r.u64()?, r.u32()?, r.u32()?, r.u64()?);
            if opcode == op::RELEASE {
                Operation::Release { fh, flags, release_flags, lock_owner }
            } else {
                Operation::Releasedir { fh, flags }
            }
        }
        op::FSYNC | op::FSYNCDIR => {
            let (fh, fsync_flags) = (r.u64()?, r.u32()?);
            if opcode == op::FSYNC {
                Operation::Fsync { fh, fsync_flags }
            } else {
                Operation::Fsyncdir { fh, fsync_flags }
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
            Operation::Setxattr { flags, setxattr_flags, name, value: r.bytes(size as usize)? }
        }
        op::GETXATTR => {
            let size = r.u32()?;
            r.u32()?;
            Operation::Getxattr { size, name: r.cstr()? }
        }
        op::LISTXATTR => Operation::Listxattr { size: r.u32()? },
        op::REMOVEXATTR => Operation::Removexattr { name: r.cstr()? },
        op::FLUSH => {
            let fh = r.u64()?;
            r.u64()?;
            Operation::Flush { fh, lock_owner: r.u64()? }
        }
        op::INIT => {
            let (major, minor, max_readahead, flags) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
            // flags2 exists from 7.36 on, only meaningful with FUSE_INIT_EXT.
            let flags2 = if minor >= 36 && flags & (1 << 30) != 0 { r.u32().unwrap_or(0) } else { 0 };
            Operation::Init(InitIn { major, minor, max_readahead, flags: u64::from(flags) | u64::from(flags2) << 32 })
        }
        op::GETLK | op::SETLK | op::SETLKW => Operation::Lock,
        op::ACCESS => Operation::Access { mask: r.u32()? },
        op::CREATE | op::TMPFILE => {
            let (flags, mode, umask, open_flags) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
            if opcode == op::CREATE {
                Operation::Create { flags, mode, umask, open_flags, name: r.cstr()? }
            } else {
                Operation::Tmpfile { flags, mode, umask, open_flags }
            }
        }
        op::INTERRUPT => Operation::Interrupt { unique: r.u64()? },
        op::BMAP => Operation::Bmap { block: r.u64()?, blocksize: r.u32()? },
        op::DESTROY => Operation::Destroy,
        op::IOCTL => {
            let (fh, flags, cmd, arg, in_size, out_size) = (r.u64()?, r.u32()?, r.u32()?, r.u64()?, r.u32()?, r.u32()?);
            let data = r.bytes(in_size as usize)?;
            Operation::Ioctl { fh, flags, cmd, arg, out_size, data }
        }
        op::POLL => Operation::Poll,
        op::FALLOCATE => {
            let (fh, offset, length, mode) = (r.u64()?, r.u64()?, r.u64()?, r.u32()?);
            Operation::Fallocate { fh, offset, length, mode }
        }
        op::LSEEK => {
            let (fh, offset, whence) = (r.u64()?, r.u64()?, r.u32()?);
            Operation::Lseek { fh, offset, whence }
        }
        op::COPY_FILE_RANGE | op::COPY_FILE_RANGE_64 => Operation::CopyFileRange {
            fh_in: r.u64()?,
            off_in: r.u64()?,
            nodeid_out: r.u64()?,
            fh_out: r.u64()?,
            off_out: r.u64()?,
            len: r.u64()?,
            flags: r.u64()?,
            wide: opcode == op::COPY_FILE_RANGE_64,
        },
        op::STATX => {
            let getattr_flags = r.u32()?;
            r.u32()?;
            Operation::Statx { getattr_flags, fh: r.u64()?, sx_flags: r.u32()?, sx_mask: r.u32()? }
        }
        op::SYNCFS => Operation::Syncfs,
        opcode => Operation::Unknown { opcode },
    };
    Ok(o)
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
