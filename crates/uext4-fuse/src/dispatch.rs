//! From a decoded request to the adapter: the [`Filesystem`] trait (one
//! method per request, taking the request's typed value as decoded and
//! answering through its reply object) and [`dispatch`], which both
//! transports call with the request and the reply buffer.

use crate::kernel_config::KernelConfig;
use crate::proto::decode::{Decoded, Operation};
use crate::proto::request::{
    CopyFileRange, Create, Fallocate, Ioctl, Lseek, Mkdir, Mknod, Read, Release, Rename, SetAttr, SetXattr, Tmpfile,
    Write,
};
use crate::proto::types::{AccessFlags, Errno, FileHandle, INodeNo, LockOwner, OpenFlags, Request};
use crate::proto::{abi, encode};
use crate::reply::{
    Out, ReplyAttr, ReplyBmap, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyStatx, ReplyWrite, ReplyXattr,
};
use std::ffi::OsStr;
use std::path::Path;

/// A filesystem served over FUSE: one method per request, each answering
/// through its reply (the defaults: ENOSYS, which the kernel remembers
/// for most requests). `req` is the caller, `ino` (or `parent`) the node
/// the request is about; a request with more arguments than a name or
/// two takes them as one typed value of [`crate::proto::request`], as
/// decoded.
#[allow(unused_variables)]
pub trait Filesystem {
    /// FUSE_INIT: what to ask of the kernel.
    fn init(&mut self, req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        Ok(())
    }
    /// LOOKUP: the entry `name` of directory `parent`, one more lookup
    /// count on it.
    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS);
    }
    /// FORGET (and each node of BATCH_FORGET): the kernel drops `nlookup`
    /// lookup counts of `ino`. No reply.
    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {}
    /// GETATTR: `ino`'s attributes (`fh`: the open file asked through).
    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        reply.error(Errno::ENOSYS);
    }
    /// STATX: `ino`'s attributes as statx(2) has them (`mask`: the fields
    /// asked for).
    fn statx(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, mask: u32, reply: ReplyStatx) {
        reply.error(Errno::ENOSYS);
    }
    /// SETATTR: change the attributes `attr` names; reply the new ones.
    fn setattr(&self, req: &Request, ino: INodeNo, attr: &SetAttr, reply: ReplyAttr) {
        reply.error(Errno::ENOSYS);
    }
    /// READLINK: the target of symlink `ino`.
    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        reply.error(Errno::ENOSYS);
    }
    /// MKNOD: a new file, device, FIFO or socket in `parent`.
    fn mknod(&self, req: &Request, parent: INodeNo, mknod: &Mknod<'_>, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS);
    }
    /// MKDIR: a new directory in `parent`.
    fn mkdir(&self, req: &Request, parent: INodeNo, mkdir: &Mkdir<'_>, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS);
    }
    /// UNLINK: remove the non-directory entry `name` of `parent`.
    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// RMDIR: remove the empty directory `name` of `parent`.
    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// SYMLINK: a new symlink `link_name` in `parent` pointing at `target`.
    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS);
    }
    /// RENAME, RENAME2: move the entry `rename.name` of `parent`.
    fn rename(&self, req: &Request, parent: INodeNo, rename: &Rename<'_>, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// LINK: a new entry `newname` in `newparent` for the file `ino`.
    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS);
    }
    /// OPEN: open file `ino` with `flags`; reply a handle.
    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        reply.error(Errno::ENOSYS);
    }
    /// READ: bytes of the open file `ino`.
    fn read(&self, req: &Request, ino: INodeNo, read: &Read, reply: ReplyData) {
        reply.error(Errno::ENOSYS);
    }
    /// WRITE: bytes into the open file `ino`; reply how many were written.
    fn write(&self, req: &Request, ino: INodeNo, write: &Write<'_>, reply: ReplyWrite) {
        reply.error(Errno::ENOSYS);
    }
    /// FLUSH: a close(2) of a descriptor of the open file `fh`.
    fn flush(&self, req: &Request, ino: INodeNo, fh: FileHandle, lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// RELEASE: the last close of an open file (the default: done).
    fn release(&self, req: &Request, ino: INodeNo, release: &Release, reply: ReplyEmpty) {
        reply.ok();
    }
    /// FSYNC: make file `ino` durable (`datasync`: its data and what
    /// reading it back needs).
    fn fsync(&self, req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// OPENDIR: open directory `ino`; reply a handle.
    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        reply.error(Errno::ENOSYS);
    }
    /// READDIR: entries of directory `ino` from `offset` (a cookie a
    /// previous reply gave, 0 at first).
    fn readdir(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, reply: ReplyDirectory) {
        reply.error(Errno::ENOSYS);
    }
    /// READDIRPLUS: as READDIR, each entry with its attributes (and a
    /// lookup count).
    fn readdirplus(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, reply: ReplyDirectoryPlus) {
        reply.error(Errno::ENOSYS);
    }
    /// RELEASEDIR: the last close of an open directory (the default: done).
    fn releasedir(&self, req: &Request, ino: INodeNo, fh: FileHandle, flags: OpenFlags, reply: ReplyEmpty) {
        reply.ok();
    }
    /// FSYNCDIR: make directory `ino` durable.
    fn fsyncdir(&self, req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// STATFS: the filesystem's sizes and counts (the default: all zero).
    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(0, 0, 0, 0, 0, 512, 255, 0);
    }
    /// SETXATTR: set an extended attribute of `ino`.
    fn setxattr(&self, req: &Request, ino: INodeNo, xattr: &SetXattr<'_>, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// GETXATTR: the value of attribute `name` of `ino` (`size` 0: its
    /// length only).
    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }
    /// LISTXATTR: the attribute names of `ino` (`size` 0: their length only).
    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }
    /// REMOVEXATTR: remove attribute `name` of `ino`.
    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// ACCESS: may the caller access `ino` as `mask` says.
    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// CREATE: create and open a file in `parent`.
    fn create(&self, req: &Request, parent: INodeNo, create: &Create<'_>, reply: ReplyCreate) {
        reply.error(Errno::ENOSYS);
    }
    /// TMPFILE: create and open an unnamed file on `parent`'s filesystem.
    fn tmpfile(&self, req: &Request, parent: INodeNo, tmpfile: &Tmpfile, reply: ReplyCreate) {
        reply.error(Errno::ENOSYS);
    }
    /// FALLOCATE: allocate, punch or zero a range of the open file `ino`.
    fn fallocate(&self, req: &Request, ino: INodeNo, fallocate: &Fallocate, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// LSEEK: the next data or hole of the open file `ino`.
    fn lseek(&self, req: &Request, ino: INodeNo, lseek: &Lseek, reply: ReplyLseek) {
        reply.error(Errno::ENOSYS);
    }
    /// COPY_FILE_RANGE: copy bytes from the open file `ino` to another;
    /// reply how many were copied.
    fn copy_file_range(&self, req: &Request, ino: INodeNo, copy: &CopyFileRange, reply: ReplyWrite) {
        reply.error(Errno::ENOSYS);
    }
    /// IOCTL: an ioctl(2) on the open file or directory `ino`.
    fn ioctl(&self, req: &Request, ino: INodeNo, ioctl: &Ioctl<'_>, reply: ReplyIoctl) {
        reply.error(Errno::ENOSYS);
    }
    /// BMAP: the device block of block `idx` (of `blocksize` bytes) of `ino`.
    fn bmap(&self, req: &Request, ino: INodeNo, blocksize: u32, idx: u64, reply: ReplyBmap) {
        reply.error(Errno::ENOSYS);
    }
    /// SYNCFS: make the whole filesystem durable.
    fn syncfs(&self, req: &Request, ino: INodeNo, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// Serving `req` panicked: the panic was caught at the dispatch
    /// boundary and the caller is answered EIO. `op` names the request
    /// (`write`, `lookup`, ...), `message` is the panic's. The adapter
    /// treats it as a filesystem error (recorded, then `errors=`).
    fn panicked(&self, req: &Request, op: &str, message: &str) {}
}

/// Refusals made before the filesystem sees a request: without
/// `allow_other` (`owner` is the mounting user) only the kernel's own
/// requests may come from another uid (the kernel already keeps other
/// users out; this is the daemon's second line, as libfuse's); offsets
/// beyond `off_t` are EINVAL.
pub fn check(d: &Decoded<'_>, owner: Option<u32>) -> Result<(), Errno> {
    use Operation as O;
    if let Some(owner) = owner {
        let kernels_own = matches!(
            d.op,
            O::Init(_)
                | O::Destroy
                | O::Read { .. }
                | O::Readdir { .. }
                | O::Readdirplus { .. }
                | O::Forget { .. }
                | O::BatchForget { .. }
                | O::Write { .. }
                | O::Fsync { .. }
                | O::Fsyncdir { .. }
                | O::Release { .. }
                | O::Releasedir { .. }
                | O::Interrupt { .. }
        );
        if d.header.uid != owner && !kernels_own {
            return Err(Errno::EACCES);
        }
    }
    let too_big = |v: u64| v > i64::MAX as u64;
    let bad = match d.op {
        O::Read(Read { offset, .. }) | O::Write(Write { offset, .. }) => too_big(offset),
        O::Fallocate(Fallocate { offset, length, .. }) => too_big(offset) || too_big(length),
        O::CopyFileRange(CopyFileRange { offset_in, offset_out, .. }) => too_big(offset_in) || too_big(offset_out),
        _ => false,
    };
    if bad {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// Serves one decoded request (not INIT or DESTROY, which the transport
/// answers) through `fs`, the reply into `out`, after [`check`]ing it
/// (`owner`: the mounting user, without `allow_other`). Requests without a
/// reply (FORGET, BATCH_FORGET, INTERRUPT) leave `out` unanswered. A
/// request whose serving panics is answered EIO (see [`guarded`]).
pub fn dispatch<F: Filesystem + ?Sized>(fs: &F, d: &Decoded<'_>, owner: Option<u32>, out: &mut Out<'_>) {
    if log::log_enabled!(log::Level::Debug) {
        // The format the request counts of docs/BENCHMARKS.md are read in.
        log::debug!("FUSE({:3}) ino {:#018x} {}", d.header.unique, d.header.nodeid, d.op);
    }
    if let Err(e) = check(d, owner) {
        if !d.op.no_reply() {
            ReplyEmpty::new(out).error(e);
        }
        return;
    }
    if guarded(fs, d, || call(fs, d, out)).is_none() && !d.op.no_reply() {
        // Whatever the panicking method answered (if anything) is replaced.
        ReplyEmpty::new(out).error(Errno::EIO);
    }
}

/// Runs `serve`, the serving of request `d`, catching a panic: the
/// request boundary of both transports (CONCURRENCY.md rule 9). A panic
/// not caught here would end the worker or queue thread with the request
/// unanswered: its caller waits forever (D state) and, on io_uring, the
/// unmount hangs on the entry never committed. `None` when it panicked:
/// the panic is logged with the request and `fs` is told
/// ([`Filesystem::panicked`]: a filesystem error, then `errors=`); the
/// caller answers EIO.
pub(crate) fn guarded<F: Filesystem + ?Sized, R>(fs: &F, d: &Decoded<'_>, serve: impl FnOnce() -> R) -> Option<R> {
    // AssertUnwindSafe: what the panic may have left half-changed is
    // exactly why `errors=` applies below (remount-ro by default: no
    // more changes), rather than going on as if nothing happened.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        #[cfg(feature = "test-hooks")]
        crate::test_hooks::panic_if_asked(d);
        serve()
    }));
    let payload = match caught {
        Ok(r) => return Some(r),
        Err(p) => p,
    };
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    let h = &d.header;
    log::error!(
        "request {} ({}, ino {:#x}, uid {}, pid {}) panicked: {message}; answered EIO",
        h.unique,
        d.op,
        h.nodeid,
        h.uid,
        h.pid
    );
    let op = d.op.to_string();
    let op = op.split(' ').next().unwrap_or("request").to_ascii_lowercase();
    // Recording the error goes through the engine, which the panic may
    // have left broken: a second panic there must not escape either.
    let told = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fs.panicked(&h.request(), &op, message)));
    if told.is_err() {
        log::error!("request {}: recording its panic panicked too", h.unique);
    }
    None
}

/// Calls the method of `fs` that serves `d` (checked) with its reply.
fn call<F: Filesystem + ?Sized>(fs: &F, d: &Decoded<'_>, out: &mut Out<'_>) {
    let req = d.header.request();
    let req = &req;
    let ino = INodeNo(d.header.nodeid);
    match d.op {
        Operation::Lookup { name } => fs.lookup(req, ino, name, ReplyEntry::new(out)),
        Operation::Forget { nlookup } => fs.forget(req, ino, nlookup),
        Operation::BatchForget { nodes } => {
            for n in nodes.chunks_exact(16) {
                let mut r = crate::proto::decode::Reader::new(n);
                if let (Ok(id), Ok(nl)) = (r.u64(), r.u64()) {
                    fs.forget(req, INodeNo(id), nl);
                }
            }
        }
        Operation::Getattr { fh } => fs.getattr(req, ino, fh.map(FileHandle), ReplyAttr::new(out)),
        Operation::Statx { getattr_flags, fh, sx_mask, .. } => {
            let fh = (getattr_flags & abi::GETATTR_FH != 0).then_some(FileHandle(fh));
            fs.statx(req, ino, fh, sx_mask, ReplyStatx::new(out));
        }
        Operation::Setattr(ref attr) => fs.setattr(req, ino, attr, ReplyAttr::new(out)),
        Operation::Readlink => fs.readlink(req, ino, ReplyData::new(out, usize::MAX)),
        Operation::Symlink { name, target } => fs.symlink(req, ino, name, Path::new(target), ReplyEntry::new(out)),
        Operation::Mknod(ref m) => fs.mknod(req, ino, m, ReplyEntry::new(out)),
        Operation::Mkdir(ref m) => fs.mkdir(req, ino, m, ReplyEntry::new(out)),
        Operation::Unlink { name } => fs.unlink(req, ino, name, ReplyEmpty::new(out)),
        Operation::Rmdir { name } => fs.rmdir(req, ino, name, ReplyEmpty::new(out)),
        Operation::Rename(ref r) => fs.rename(req, ino, r, ReplyEmpty::new(out)),
        Operation::Link { oldnodeid, newname } => fs.link(req, INodeNo(oldnodeid), ino, newname, ReplyEntry::new(out)),
        Operation::Open { flags, .. } => fs.open(req, ino, OpenFlags(flags as i32), ReplyOpen::new(out)),
        Operation::Read(ref r) => fs.read(req, ino, r, ReplyData::new(out, r.size as usize)),
        Operation::Write(ref w) => fs.write(req, ino, w, ReplyWrite::new(out, false)),
        Operation::Statfs => fs.statfs(req, ino, ReplyStatfs::new(out)),
        Operation::Release(ref r) => fs.release(req, ino, r, ReplyEmpty::new(out)),
        Operation::Fsync { fh, fsync_flags } => {
            let datasync = fsync_flags & abi::FSYNC_FDATASYNC != 0;
            fs.fsync(req, ino, FileHandle(fh), datasync, ReplyEmpty::new(out));
        }
        Operation::Setxattr(ref x) => fs.setxattr(req, ino, x, ReplyEmpty::new(out)),
        Operation::Getxattr { size, name } => fs.getxattr(req, ino, name, size, ReplyXattr::new(out)),
        Operation::Listxattr { size } => fs.listxattr(req, ino, size, ReplyXattr::new(out)),
        Operation::Removexattr { name } => fs.removexattr(req, ino, name, ReplyEmpty::new(out)),
        Operation::Flush { fh, lock_owner } => {
            fs.flush(req, ino, FileHandle(fh), LockOwner(lock_owner), ReplyEmpty::new(out));
        }
        Operation::Opendir { flags } => fs.opendir(req, ino, OpenFlags(flags as i32), ReplyOpen::new(out)),
        Operation::Readdir { fh, offset, size } => {
            fs.readdir(req, ino, FileHandle(fh), offset, ReplyDirectory::new(out, size as usize));
        }
        Operation::Readdirplus { fh, offset, size } => {
            fs.readdirplus(req, ino, FileHandle(fh), offset, ReplyDirectoryPlus::new(out, size as usize));
        }
        Operation::Releasedir { fh, flags } => {
            fs.releasedir(req, ino, FileHandle(fh), OpenFlags(flags as i32), ReplyEmpty::new(out));
        }
        Operation::Fsyncdir { fh, fsync_flags } => {
            let datasync = fsync_flags & abi::FSYNC_FDATASYNC != 0;
            fs.fsyncdir(req, ino, FileHandle(fh), datasync, ReplyEmpty::new(out));
        }
        Operation::Access { mask } => {
            fs.access(req, ino, AccessFlags::from_bits_retain(mask as i32), ReplyEmpty::new(out));
        }
        Operation::Create(ref c) => fs.create(req, ino, c, ReplyCreate::new(out)),
        Operation::Tmpfile(ref t) => fs.tmpfile(req, ino, t, ReplyCreate::new(out)),
        Operation::Bmap { block, blocksize } => fs.bmap(req, ino, blocksize, block, ReplyBmap::new(out)),
        Operation::Ioctl(ref i) => fs.ioctl(req, ino, i, ReplyIoctl::new(out)),
        Operation::Fallocate(ref f) => fs.fallocate(req, ino, f, ReplyEmpty::new(out)),
        Operation::Lseek(ref l) => fs.lseek(req, ino, l, ReplyLseek::new(out)),
        Operation::CopyFileRange(ref c) => fs.copy_file_range(req, ino, c, ReplyWrite::new(out, c.wide)),
        Operation::Syncfs => fs.syncfs(req, ino, ReplyEmpty::new(out)),
        Operation::Interrupt { .. } => {}
        // Served by the transport (INIT, DESTROY) or not at all: POSIX
        // locks stay the kernel's, no poll support, unknown opcodes.
        Operation::Init(_) => ReplyEmpty::new(out).error(Errno::EIO),
        Operation::Destroy => ReplyEmpty::new(out).ok(),
        Operation::Lock | Operation::Poll | Operation::Unknown { .. } => ReplyEmpty::new(out).error(Errno::ENOSYS),
    }
}

/// The out header for `out`'s answer to request `unique`: EIO for a
/// request that should have been answered and was not.
pub fn header_for(out: &Out<'_>, unique: u64) -> ([u8; abi::OUT_HEADER_LEN], usize) {
    let (error, len) = out.result().unwrap_or((-libc::EIO, 0));
    (encode::out_header(abi::OUT_HEADER_LEN + len, error, unique), len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::decode::InHeader;

    fn decoded(uid: u32, op: Operation<'static>) -> Decoded<'static> {
        let header = InHeader { len: 0, opcode: 0, unique: 1, nodeid: 1, uid, gid: 0, pid: 0, total_extlen: 0 };
        Decoded { header, op }
    }

    /// Panics in LOOKUP; records what it is told of panics.
    #[derive(Default)]
    struct Panicky {
        told: std::sync::Mutex<Vec<(String, String)>>,
    }

    impl Filesystem for Panicky {
        fn lookup(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEntry) {
            // Even after answering: the panic's answer replaces it.
            reply.error(Errno::ENOENT);
            panic!("boom");
        }
        fn panicked(&self, _req: &Request, op: &str, message: &str) {
            self.told.lock().unwrap().push((op.to_string(), message.to_string()));
        }
    }

    /// A method that panics is answered EIO (not left unanswered, which
    /// left its caller waiting forever) and the filesystem is told which
    /// request panicked and why.
    #[test]
    fn a_panicking_request_is_answered_eio_and_reported() {
        let fs = Panicky::default();
        let mut buf = [0u8; 256];
        let mut out = Out::new(&mut buf);
        dispatch(&fs, &decoded(0, Operation::Lookup { name: OsStr::new("a") }), None, &mut out);
        assert_eq!(out.result(), Some((-libc::EIO, 0)));
        assert_eq!(*fs.told.lock().unwrap(), vec![("lookup".to_string(), "boom".to_string())]);
    }

    #[test]
    fn other_users_and_huge_offsets_are_refused() {
        let lookup = Operation::Lookup { name: OsStr::new("a") };
        assert_eq!(check(&decoded(1000, lookup), Some(0)), Err(Errno::EACCES));
        assert_eq!(check(&decoded(0, lookup), Some(0)), Ok(()));
        assert_eq!(check(&decoded(1000, lookup), None), Ok(()));
        // Writeback and readahead run with whatever uid the kernel has.
        let read = |offset| {
            Operation::Read(Read { fh: FileHandle(0), offset, size: 1, flags: OpenFlags(0), lock_owner: None })
        };
        assert_eq!(check(&decoded(1000, read(0)), Some(0)), Ok(()));
        assert_eq!(check(&decoded(0, read(1 << 63)), None), Err(Errno::EINVAL));
        let fall = Operation::Fallocate(Fallocate { fh: FileHandle(0), offset: 0, length: u64::MAX, mode: 0 });
        assert_eq!(check(&decoded(0, fall), None), Err(Errno::EINVAL));
    }
}
