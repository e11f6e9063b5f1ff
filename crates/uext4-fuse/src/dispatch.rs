//! From a decoded request to the adapter: the [`Filesystem`] trait (one
//! method per request, shaped like the `fuser` crate's, each answering
//! through its reply object) and [`dispatch`], which both transports
//! call with the request and the reply buffer.

use crate::kernel_config::KernelConfig;
use crate::proto::decode::{Decoded, Operation};
use crate::proto::types::{
    AccessFlags, Errno, FileHandle, INodeNo, LockOwner, OpenFlags, RenameFlags, Request, TimeOrNow, WriteFlags,
};
use crate::proto::{abi, encode};
use crate::reply::{
    Out, ReplyAttr, ReplyBmap, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyStatx, ReplyWrite, ReplyXattr,
};
use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A filesystem served over FUSE: every method answers through its reply
/// (the defaults: ENOSYS, which the kernel remembers for most requests).
#[allow(missing_docs, clippy::too_many_arguments, unused_variables)]
pub trait Filesystem {
    /// FUSE_INIT: what to ask of the kernel.
    fn init(&mut self, req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        Ok(())
    }
    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS);
    }
    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {}
    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        reply.error(Errno::ENOSYS);
    }
    fn statx(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, mask: u32, reply: ReplyStatx) {
        reply.error(Errno::ENOSYS);
    }
    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        kill_suidgid: bool,
        reply: ReplyAttr,
    ) {
        reply.error(Errno::ENOSYS);
    }
    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        reply.error(Errno::ENOSYS);
    }
    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS);
    }
    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS);
    }
    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS);
    }
    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }
    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        reply.error(Errno::ENOSYS);
    }
    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        reply.error(Errno::ENOSYS);
    }
    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        reply.error(Errno::ENOSYS);
    }
    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        reply.error(Errno::ENOSYS);
    }
    fn flush(&self, req: &Request, ino: INodeNo, fh: FileHandle, lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        flush: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }
    fn fsync(&self, req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        reply.error(Errno::ENOSYS);
    }
    fn readdir(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, reply: ReplyDirectory) {
        reply.error(Errno::ENOSYS);
    }
    fn readdirplus(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, reply: ReplyDirectoryPlus) {
        reply.error(Errno::ENOSYS);
    }
    fn releasedir(&self, req: &Request, ino: INodeNo, fh: FileHandle, flags: OpenFlags, reply: ReplyEmpty) {
        reply.ok();
    }
    fn fsyncdir(&self, req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(0, 0, 0, 0, 0, 512, 255, 0);
    }
    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }
    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }
    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }
    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        reply.error(Errno::ENOSYS);
    }
    fn tmpfile(&self, req: &Request, parent: INodeNo, mode: u32, umask: u32, flags: i32, reply: ReplyCreate) {
        reply.error(Errno::ENOSYS);
    }
    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }
    fn lseek(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        reply.error(Errno::ENOSYS);
    }
    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: u64,
        reply: ReplyWrite,
    ) {
        reply.error(Errno::ENOSYS);
    }
    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: u32,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        reply.error(Errno::ENOSYS);
    }
    fn bmap(&self, req: &Request, ino: INodeNo, blocksize: u32, idx: u64, reply: ReplyBmap) {
        reply.error(Errno::ENOSYS);
    }
    fn syncfs(&self, req: &Request, ino: INodeNo, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }
    /// Serving `req` panicked: the panic was caught at the dispatch
    /// boundary and the caller is answered EIO. `op` names the request
    /// (`write`, `lookup`, ...), `message` is the panic's. The adapter
    /// treats it as a filesystem error (recorded, then `errors=`).
    fn panicked(&self, req: &Request, op: &str, message: &str) {}
}

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

fn set_time(valid: u32, set: u32, now: u32, sec: i64, nsec: u32) -> Option<TimeOrNow> {
    if valid & set == 0 {
        None
    } else if valid & now != 0 {
        Some(TimeOrNow::Now)
    } else {
        Some(TimeOrNow::SpecificTime(time(sec, nsec)))
    }
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
        O::Read { offset, .. } | O::Write { offset, .. } => too_big(offset),
        O::Fallocate { offset, length, .. } => too_big(offset) || too_big(length),
        O::CopyFileRange { off_in, off_out, .. } => too_big(off_in) || too_big(off_out),
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
        Operation::Setattr(s) => {
            let v = s.valid;
            let opt = |bit: u32| v & bit != 0;
            fs.setattr(
                req,
                ino,
                opt(abi::fattr::MODE).then_some(s.mode),
                opt(abi::fattr::UID).then_some(s.uid),
                opt(abi::fattr::GID).then_some(s.gid),
                opt(abi::fattr::SIZE).then_some(s.size),
                set_time(v, abi::fattr::ATIME, abi::fattr::ATIME_NOW, s.atime, s.atimensec),
                set_time(v, abi::fattr::MTIME, abi::fattr::MTIME_NOW, s.mtime, s.mtimensec),
                opt(abi::fattr::CTIME).then(|| time(s.ctime, s.ctimensec)),
                opt(abi::fattr::FH).then_some(FileHandle(s.fh)),
                opt(abi::fattr::KILL_SUIDGID),
                ReplyAttr::new(out),
            );
        }
        Operation::Readlink => fs.readlink(req, ino, ReplyData::new(out, usize::MAX)),
        Operation::Symlink { name, target } => fs.symlink(req, ino, name, Path::new(target), ReplyEntry::new(out)),
        Operation::Mknod { mode, rdev, umask, name } => {
            fs.mknod(req, ino, name, mode, umask, rdev, ReplyEntry::new(out))
        }
        Operation::Mkdir { mode, umask, name } => fs.mkdir(req, ino, name, mode, umask, ReplyEntry::new(out)),
        Operation::Unlink { name } => fs.unlink(req, ino, name, ReplyEmpty::new(out)),
        Operation::Rmdir { name } => fs.rmdir(req, ino, name, ReplyEmpty::new(out)),
        Operation::Rename { newdir, flags, name, newname } => fs.rename(
            req,
            ino,
            name,
            INodeNo(newdir),
            newname,
            RenameFlags::from_bits_retain(flags),
            ReplyEmpty::new(out),
        ),
        Operation::Link { oldnodeid, newname } => fs.link(req, INodeNo(oldnodeid), ino, newname, ReplyEntry::new(out)),
        Operation::Open { flags, .. } => fs.open(req, ino, OpenFlags(flags as i32), ReplyOpen::new(out)),
        Operation::Read { fh, offset, size, read_flags, lock_owner, flags } => {
            let owner = (read_flags & abi::READ_LOCKOWNER != 0).then_some(LockOwner(lock_owner));
            let reply = ReplyData::new(out, size as usize);
            fs.read(req, ino, FileHandle(fh), offset, size, OpenFlags(flags as i32), owner, reply);
        }
        Operation::Write { fh, offset, write_flags, lock_owner, flags, data } => {
            let owner = (write_flags & abi::WRITE_LOCKOWNER != 0).then_some(LockOwner(lock_owner));
            let wf = WriteFlags::from_bits_retain(write_flags);
            let reply = ReplyWrite::new(out, false);
            fs.write(req, ino, FileHandle(fh), offset, data, wf, OpenFlags(flags as i32), owner, reply);
        }
        Operation::Statfs => fs.statfs(req, ino, ReplyStatfs::new(out)),
        Operation::Release { fh, flags, release_flags, lock_owner } => {
            let flush = release_flags & abi::RELEASE_FLUSH != 0;
            let owner = Some(LockOwner(lock_owner));
            fs.release(req, ino, FileHandle(fh), OpenFlags(flags as i32), owner, flush, ReplyEmpty::new(out));
        }
        Operation::Fsync { fh, fsync_flags } => {
            let datasync = fsync_flags & abi::FSYNC_FDATASYNC != 0;
            fs.fsync(req, ino, FileHandle(fh), datasync, ReplyEmpty::new(out));
        }
        Operation::Setxattr { flags, name, value, .. } => {
            fs.setxattr(req, ino, name, value, flags as i32, 0, ReplyEmpty::new(out));
        }
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
        Operation::Create { flags, mode, umask, name, .. } => {
            fs.create(req, ino, name, mode, umask, flags as i32, ReplyCreate::new(out));
        }
        Operation::Tmpfile { flags, mode, umask, .. } => {
            fs.tmpfile(req, ino, mode, umask, flags as i32, ReplyCreate::new(out));
        }
        Operation::Bmap { block, blocksize } => fs.bmap(req, ino, blocksize, block, ReplyBmap::new(out)),
        Operation::Ioctl { fh, flags, cmd, out_size, data, .. } => {
            fs.ioctl(req, ino, FileHandle(fh), flags, cmd, data, out_size, ReplyIoctl::new(out));
        }
        Operation::Fallocate { fh, offset, length, mode } => {
            fs.fallocate(req, ino, FileHandle(fh), offset, length, mode as i32, ReplyEmpty::new(out));
        }
        Operation::Lseek { fh, offset, whence } => {
            fs.lseek(req, ino, FileHandle(fh), offset as i64, whence as i32, ReplyLseek::new(out));
        }
        Operation::CopyFileRange { fh_in, off_in, nodeid_out, fh_out, off_out, len, flags, wide } => fs
            .copy_file_range(
                req,
                ino,
                FileHandle(fh_in),
                off_in,
                INodeNo(nodeid_out),
                FileHandle(fh_out),
                off_out,
                len,
                flags,
                ReplyWrite::new(out, wide),
            ),
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
        let read = |offset| Operation::Read { fh: 0, offset, size: 1, read_flags: 0, lock_owner: 0, flags: 0 };
        assert_eq!(check(&decoded(1000, read(0)), Some(0)), Ok(()));
        assert_eq!(check(&decoded(0, read(1 << 63)), None), Err(Errno::EINVAL));
        let fall = Operation::Fallocate { fh: 0, offset: 0, length: u64::MAX, mode: 0 };
        assert_eq!(check(&decoded(0, fall), None), Err(Errno::EINVAL));
    }
}
