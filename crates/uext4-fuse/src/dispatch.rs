//! From a decoded request to the adapter: the [`Filesystem`] trait (one
//! method per request, taking the request's typed value as decoded and
//! answering through its reply object) and [`dispatch`], which both
//! transports call with the request and the reply buffer.

use crate::kernel_config::KernelConfig;
use crate::proto::decode::{Decoded, Operation};
use crate::proto::request::{
    Access, Bmap, CopyFileRange, Create, Fallocate, Flush, Forget, Fsync, GetAttr, GetXattr, Ioctl, Link, ListXattr,
    Lookup, Lseek, Mkdir, Mknod, Open, Opendir, Read, Readdir, Readlink, Release, Releasedir, RemoveXattr, Rename,
    Rmdir, SetAttr, SetXattr, Statfs, Statx, Symlink, Syncfs, Tmpfile, Unlink, Write,
};
use crate::proto::types::{Errno, Request};
use crate::proto::{abi, encode};
use crate::reply::{
    Out, ReplyAttr, ReplyBmap, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyStatx, ReplyWrite, ReplyXattr,
};

/// A filesystem served over FUSE: one method per request, each taking the
/// caller (`req`) and the request's typed value of
/// [`crate::proto::request`] as decoded (the node it is about among its
/// fields), and answering through its reply (the defaults: ENOSYS, which
/// the kernel remembers for most requests). Implement it to serve
/// another backend through this crate's transports (as
/// [`crate::null::NullFs`] does); a field the kernel adds to a request
/// reaches every implementation through the request's struct.
#[allow(unused_variables)]
pub trait Filesystem {
    /// FUSE_INIT: what to ask of the kernel.
    fn init(&mut self, req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        Ok(())
    }
    /// LOOKUP: the entry `name` of directory `parent`, one more lookup
    /// count on it.
    fn lookup(&self, req: &Request, lookup: &Lookup<'_>, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS);
    }
    /// FORGET (and each node of BATCH_FORGET): the kernel drops `nlookup`
    /// lookup counts of `ino`. No reply.
    fn forget(&self, req: &Request, forget: &Forget) {}
    /// GETATTR: a node's attributes (`fh`: the open file asked through).
    fn getattr(&self, req: &Request, getattr: &GetAttr, reply: ReplyAttr) {
        reply.error(Errno::ENOSYS);
    }
    /// STATX: a node's attributes as statx(2) has them (`mask`: the
    /// fields asked for).
    fn statx(&self, req: &Request, statx: &Statx, reply: ReplyStatx) {
        reply.error(Errno::ENOSYS);
    }
    /// SETATTR: change the attributes `attr` names; reply the new ones.
    fn setattr(&self, req: &Request, attr: &SetAttr, reply: ReplyAttr) {
        reply.error(Errno::ENOSYS);
    }
    /// READLINK: the target of a symlink.
    fn readlink(&self, req: &Request, readlink: &Readlink, reply: ReplyData) {
        reply.error(Errno::ENOSYS);
    }
    /// MKNOD: a new file, device, FIFO or socket in `parent`.
    fn mknod(&self, req: &Request, mknod: &Mknod<'_>, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS);
    }
    /// MKDIR: a new directory in `parent`.
    fn mkdir(&self, req: &Request, mkdir: &Mkdir<'_>, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS);
    }
    /// UNLINK: remove the non-directory entry `name` of `parent`.
    fn unlink(&self, req: &Request, unlink: &Unlink<'_>, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// RMDIR: remove the empty directory `name` of `parent`.
    fn rmdir(&self, req: &Request, rmdir: &Rmdir<'_>, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// SYMLINK: a new symlink `name` in `parent` pointing at `target`.
    fn symlink(&self, req: &Request, symlink: &Symlink<'_>, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS);
    }
    /// RENAME, RENAME2: move the entry `name` of `parent`.
    fn rename(&self, req: &Request, rename: &Rename<'_>, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// LINK: a new entry `newname` in `newparent` for the file `ino`.
    fn link(&self, req: &Request, link: &Link<'_>, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS);
    }
    /// OPEN: open a file with `flags`; reply a handle.
    fn open(&self, req: &Request, open: &Open, reply: ReplyOpen) {
        reply.error(Errno::ENOSYS);
    }
    /// READ: bytes of an open file.
    fn read(&self, req: &Request, read: &Read, reply: ReplyData) {
        reply.error(Errno::ENOSYS);
    }
    /// WRITE: bytes into an open file; reply how many were written.
    fn write(&self, req: &Request, write: &Write<'_>, reply: ReplyWrite) {
        reply.error(Errno::ENOSYS);
    }
    /// FLUSH: a close(2) of a descriptor of the open file `fh`.
    fn flush(&self, req: &Request, flush: &Flush, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// RELEASE: the last close of an open file (the default: done).
    fn release(&self, req: &Request, release: &Release, reply: ReplyEmpty) {
        reply.ok();
    }
    /// FSYNC: make a file durable (`datasync`: its data and what reading
    /// it back needs).
    fn fsync(&self, req: &Request, fsync: &Fsync, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// OPENDIR: open a directory; reply a handle.
    fn opendir(&self, req: &Request, opendir: &Opendir, reply: ReplyOpen) {
        reply.error(Errno::ENOSYS);
    }
    /// READDIR: entries of a directory from `offset` (a cookie a previous
    /// reply gave, 0 at first).
    fn readdir(&self, req: &Request, readdir: &Readdir, reply: ReplyDirectory) {
        reply.error(Errno::ENOSYS);
    }
    /// READDIRPLUS: as READDIR, each entry with its attributes (and a
    /// lookup count).
    fn readdirplus(&self, req: &Request, readdir: &Readdir, reply: ReplyDirectoryPlus) {
        reply.error(Errno::ENOSYS);
    }
    /// RELEASEDIR: the last close of an open directory (the default: done).
    fn releasedir(&self, req: &Request, releasedir: &Releasedir, reply: ReplyEmpty) {
        reply.ok();
    }
    /// FSYNCDIR: make a directory durable.
    fn fsyncdir(&self, req: &Request, fsync: &Fsync, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// STATFS: the filesystem's sizes and counts (the default: all zero).
    fn statfs(&self, req: &Request, statfs: &Statfs, reply: ReplyStatfs) {
        reply.statfs(0, 0, 0, 0, 0, 512, 255, 0);
    }
    /// SETXATTR: set an extended attribute.
    fn setxattr(&self, req: &Request, xattr: &SetXattr<'_>, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// GETXATTR: the value of attribute `name` (`size` 0: its length only).
    fn getxattr(&self, req: &Request, xattr: &GetXattr<'_>, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }
    /// LISTXATTR: the names of a node's attributes (`size` 0: their
    /// length only).
    fn listxattr(&self, req: &Request, xattr: &ListXattr, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }
    /// REMOVEXATTR: remove attribute `name`.
    fn removexattr(&self, req: &Request, xattr: &RemoveXattr<'_>, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// ACCESS: may the caller access the node as `mask` says.
    fn access(&self, req: &Request, access: &Access, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// CREATE: create and open a file in `parent`.
    fn create(&self, req: &Request, create: &Create<'_>, reply: ReplyCreate) {
        reply.error(Errno::ENOSYS);
    }
    /// TMPFILE: create and open an unnamed file on `parent`'s filesystem.
    fn tmpfile(&self, req: &Request, tmpfile: &Tmpfile, reply: ReplyCreate) {
        reply.error(Errno::ENOSYS);
    }
    /// FALLOCATE: allocate, punch or zero a range of an open file.
    fn fallocate(&self, req: &Request, fallocate: &Fallocate, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// LSEEK: the next data or hole of an open file.
    fn lseek(&self, req: &Request, lseek: &Lseek, reply: ReplyLseek) {
        reply.error(Errno::ENOSYS);
    }
    /// COPY_FILE_RANGE: copy bytes from the open file `ino` to another;
    /// reply how many were copied.
    fn copy_file_range(&self, req: &Request, copy: &CopyFileRange, reply: ReplyWrite) {
        reply.error(Errno::ENOSYS);
    }
    /// IOCTL: an ioctl(2) on an open file or directory.
    fn ioctl(&self, req: &Request, ioctl: &Ioctl<'_>, reply: ReplyIoctl) {
        reply.error(Errno::ENOSYS);
    }
    /// BMAP: the device block of block `block` (of `blocksize` bytes) of a file.
    fn bmap(&self, req: &Request, bmap: &Bmap, reply: ReplyBmap) {
        reply.error(Errno::ENOSYS);
    }
    /// SYNCFS: make the whole filesystem durable.
    fn syncfs(&self, req: &Request, syncfs: &Syncfs, reply: ReplyEmpty) {
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
                | O::Read(_)
                | O::Readdir(_)
                | O::Readdirplus(_)
                | O::Forget(_)
                | O::BatchForget(_)
                | O::Write(_)
                | O::Fsync(_)
                | O::Fsyncdir(_)
                | O::Release(_)
                | O::Releasedir(_)
                | O::Interrupt(_)
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
        crate::test_hooks::on_request(d);
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
    match d.op {
        Operation::Lookup(ref l) => fs.lookup(req, l, ReplyEntry::new(out)),
        Operation::Forget(ref f) => fs.forget(req, f),
        Operation::BatchForget(ref b) => b.forgets().for_each(|f| fs.forget(req, &f)),
        Operation::Getattr(ref g) => fs.getattr(req, g, ReplyAttr::new(out)),
        Operation::Statx(ref s) => fs.statx(req, s, ReplyStatx::new(out)),
        Operation::Setattr(ref attr) => fs.setattr(req, attr, ReplyAttr::new(out)),
        Operation::Readlink(ref r) => fs.readlink(req, r, ReplyData::new(out, usize::MAX)),
        Operation::Symlink(ref s) => fs.symlink(req, s, ReplyEntry::new(out)),
        Operation::Mknod(ref m) => fs.mknod(req, m, ReplyEntry::new(out)),
        Operation::Mkdir(ref m) => fs.mkdir(req, m, ReplyEntry::new(out)),
        Operation::Unlink(ref u) => fs.unlink(req, u, ReplyEmpty::new(out)),
        Operation::Rmdir(ref r) => fs.rmdir(req, r, ReplyEmpty::new(out)),
        Operation::Rename(ref r) => fs.rename(req, r, ReplyEmpty::new(out)),
        Operation::Link(ref l) => fs.link(req, l, ReplyEntry::new(out)),
        Operation::Open(ref o) => fs.open(req, o, ReplyOpen::new(out)),
        Operation::Read(ref r) => fs.read(req, r, ReplyData::new(out, r.size as usize)),
        Operation::Write(ref w) => fs.write(req, w, ReplyWrite::new(out, false)),
        Operation::Statfs(ref s) => fs.statfs(req, s, ReplyStatfs::new(out)),
        Operation::Release(ref r) => fs.release(req, r, ReplyEmpty::new(out)),
        Operation::Fsync(ref f) => fs.fsync(req, f, ReplyEmpty::new(out)),
        Operation::Setxattr(ref x) => fs.setxattr(req, x, ReplyEmpty::new(out)),
        Operation::Getxattr(ref x) => fs.getxattr(req, x, ReplyXattr::new(out)),
        Operation::Listxattr(ref x) => fs.listxattr(req, x, ReplyXattr::new(out)),
        Operation::Removexattr(ref x) => fs.removexattr(req, x, ReplyEmpty::new(out)),
        Operation::Flush(ref f) => fs.flush(req, f, ReplyEmpty::new(out)),
        Operation::Opendir(ref o) => fs.opendir(req, o, ReplyOpen::new(out)),
        Operation::Readdir(ref r) => fs.readdir(req, r, ReplyDirectory::new(out, r.size as usize)),
        Operation::Readdirplus(ref r) => fs.readdirplus(req, r, ReplyDirectoryPlus::new(out, r.size as usize)),
        Operation::Releasedir(ref r) => fs.releasedir(req, r, ReplyEmpty::new(out)),
        Operation::Fsyncdir(ref f) => fs.fsyncdir(req, f, ReplyEmpty::new(out)),
        Operation::Access(ref a) => fs.access(req, a, ReplyEmpty::new(out)),
        Operation::Create(ref c) => fs.create(req, c, ReplyCreate::new(out)),
        Operation::Tmpfile(ref t) => fs.tmpfile(req, t, ReplyCreate::new(out)),
        Operation::Bmap(ref b) => fs.bmap(req, b, ReplyBmap::new(out)),
        Operation::Ioctl(ref i) => fs.ioctl(req, i, ReplyIoctl::new(out)),
        Operation::Fallocate(ref f) => fs.fallocate(req, f, ReplyEmpty::new(out)),
        Operation::Lseek(ref l) => fs.lseek(req, l, ReplyLseek::new(out)),
        Operation::CopyFileRange(ref c) => fs.copy_file_range(req, c, ReplyWrite::new(out, c.wide)),
        Operation::Syncfs(ref s) => fs.syncfs(req, s, ReplyEmpty::new(out)),
        Operation::Interrupt(_) => {}
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
    use crate::proto::types::{FileHandle, INodeNo, OpenFlags};
    use std::ffi::OsStr;

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
        fn lookup(&self, _req: &Request, _lookup: &Lookup<'_>, reply: ReplyEntry) {
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
        dispatch(
            &fs,
            &decoded(0, Operation::Lookup(Lookup { parent: INodeNo(1), name: OsStr::new("a") })),
            None,
            &mut out,
        );
        assert_eq!(out.result(), Some((-libc::EIO, 0)));
        assert_eq!(*fs.told.lock().unwrap(), vec![("lookup".to_string(), "boom".to_string())]);
    }

    #[test]
    fn other_users_and_huge_offsets_are_refused() {
        let lookup = Operation::Lookup(Lookup { parent: INodeNo(1), name: OsStr::new("a") });
        assert_eq!(check(&decoded(1000, lookup), Some(0)), Err(Errno::EACCES));
        assert_eq!(check(&decoded(0, lookup), Some(0)), Ok(()));
        assert_eq!(check(&decoded(1000, lookup), None), Ok(()));
        // Writeback and readahead run with whatever uid the kernel has.
        let read = |offset| {
            let (ino, fh) = (INodeNo(2), FileHandle(0));
            Operation::Read(Read { ino, fh, offset, size: 1, flags: OpenFlags(0), lock_owner: None })
        };
        assert_eq!(check(&decoded(1000, read(0)), Some(0)), Ok(()));
        assert_eq!(check(&decoded(0, read(1 << 63)), None), Err(Errno::EINVAL));
        let fall = Operation::Fallocate(Fallocate {
            ino: INodeNo(2),
            fh: FileHandle(0),
            offset: 0,
            length: u64::MAX,
            mode: 0,
        });
        assert_eq!(check(&decoded(0, fall), None), Err(Errno::EINVAL));
    }
}
