//! The `/dev/fuse` transport: the INIT handshake, then worker threads,
//! each with its own cloned descriptor (FUSE_DEV_IOC_CLONE) and its own
//! request and reply buffers, each reading one request, serving it
//! through [`dispatch`](crate::dispatch::dispatch) and writing the reply
//! with one write(2).

use crate::dispatch::{dispatch, header_for, Filesystem};
use crate::kernel_config::KernelConfig;
use crate::proto::abi::{self, op};
use crate::proto::decode::{decode, DecodeConfig, InHeader, Operation};
use crate::proto::encode;
use crate::proto::types::InitFlags;
use crate::reply::{Out, FIXED_REPLY_MAX};
use crate::Backend;
use log::{debug, error, info, warn};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

/// The request buffer: the largest write and its headers, and never less
/// than the kernel's minimum (FUSE_MIN_READ_BUFFER).
pub(crate) fn request_buffer_len(max_payload: usize) -> usize {
    (max_payload + 4096).max(8192)
}

/// What the handshake agreed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Negotiated {
    /// Flags granted.
    pub granted: InitFlags,
    /// Largest request or reply payload.
    pub max_payload: usize,
    /// How to decode requests.
    pub decode: DecodeConfig,
    /// Without `allow_other`: the mounting user, the only one whose
    /// requests are served (see [`crate::dispatch::check`]).
    pub owner: Option<u32>,
    /// WRITEs may wait for the kernel's page locks (`store_writes` sends
    /// FUSE_NOTIFY_STORE while serving them), which READs still to be
    /// read from the device hold: a WRITE then counts as a request that
    /// may wait long (see [`Readers`]).
    pub writes_notify: bool,
}

/// read(2) of one request, retrying what the kernel means as "again".
/// `Ok(None)`: the connection is gone (unmounted or aborted).
pub(crate) fn receive(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        // SAFETY: `buf` is valid for writes of its length for the call.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        // /dev/fuse never reads 0 bytes; a closed stream does.
        if n == 0 {
            return Ok(None);
        }
        if n > 0 {
            return Ok(Some(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // Interrupted, or the request was withdrawn before we read it.
            Some(libc::EINTR | libc::EAGAIN | libc::ENOENT) => continue,
            Some(libc::ENODEV) => return Ok(None),
            _ => return Err(e),
        }
    }
}

/// write(2) of one reply or notification. ENOENT (the request was
/// interrupted and is gone) is no error of ours; EINTR (a signal, a stop
/// and continue of the daemon) is retried: /dev/fuse takes a message
/// whole or not at all.
pub(crate) fn send(fd: RawFd, parts: &[&[u8]]) -> io::Result<()> {
    let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 4];
    let k = parts.len().min(iov.len());
    for (v, p) in iov.iter_mut().zip(parts) {
        *v = libc::iovec { iov_base: p.as_ptr() as *mut libc::c_void, iov_len: p.len() };
    }
    loop {
        // SAFETY: the first `k` iovecs point at live slices of their
        // lengths; writev only reads them.
        let n = unsafe { libc::writev(fd, iov.as_ptr(), k as libc::c_int) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ENOENT) => return Ok(()),
            _ => return Err(e),
        }
    }
}

/// Reads FUSE_INIT from `dev`, lets `fs` choose, answers.
pub(crate) fn handshake<F: Filesystem>(dev: &OwnedFd, fs: &mut F) -> io::Result<Negotiated> {
    let mut buf = vec![0u8; request_buffer_len(crate::MAX_WRITE_LIMIT as usize)];
    loop {
        let Some(n) = receive(dev.as_raw_fd(), &mut buf)? else {
            return Err(io::Error::new(io::ErrorKind::NotConnected, "FUSE device disconnected during handshake"));
        };
        let d = decode(&buf[..n], DecodeConfig::default())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "malformed request during the handshake"))?;
        let unique = d.header.unique;
        let Operation::Init(init) = d.op else {
            send(dev.as_raw_fd(), &[&encode::out_header(abi::OUT_HEADER_LEN, -libc::EIO, unique)])?;
            return Err(io::Error::new(io::ErrorKind::InvalidData, "a request other than INIT before INIT"));
        };
        if init.major > abi::KERNEL_VERSION {
            // Our version only; the kernel asks again with it.
            let o =
                encode::InitOut { major: abi::KERNEL_VERSION, minor: abi::KERNEL_MINOR_VERSION, ..Default::default() };
            let body = encode::init_out(&o);
            send(dev.as_raw_fd(), &[&encode::out_header(abi::OUT_HEADER_LEN + body.len(), 0, unique), &body])?;
            continue;
        }
        if init.major < abi::KERNEL_VERSION || init.minor < abi::MIN_MINOR_VERSION {
            send(dev.as_raw_fd(), &[&encode::out_header(abi::OUT_HEADER_LEN, -libc::EPROTO, unique)])?;
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("FUSE protocol {}.{} is older than 7.{}", init.major, init.minor, abi::MIN_MINOR_VERSION),
            ));
        }
        let mut config = KernelConfig::new(&init);
        if let Err(e) = fs.init(&d.header.request(), &mut config) {
            let code = e.raw_os_error().unwrap_or(libc::EIO);
            send(dev.as_raw_fd(), &[&encode::out_header(abi::OUT_HEADER_LEN, -code, unique)])?;
            return Err(e);
        }
        let reply = config.reply();
        debug!(
            "INIT response: ABI 7.{}, flags {:#x}, max readahead {}, max write {} (kernel 7.{}: {:?}, max_pages {})",
            reply.minor,
            reply.flags,
            reply.max_readahead,
            reply.max_write,
            init.minor,
            InitFlags::from_bits_retain(reply.flags),
            reply.max_pages
        );
        let body = encode::init_out(&reply);
        send(dev.as_raw_fd(), &[&encode::out_header(abi::OUT_HEADER_LEN + body.len(), 0, unique), &body])?;
        let granted = config.granted();
        return Ok(Negotiated {
            granted,
            max_payload: config.max_payload(),
            decode: DecodeConfig { setxattr_ext: granted.contains(InitFlags::FUSE_SETXATTR_EXT) },
            owner: None,
            writes_notify: false,
        });
    }
}

/// A second descriptor on the connection of `dev` (FUSE_DEV_IOC_CLONE):
/// the kernel hands each request to one reader, and each worker reading
/// its own descriptor avoids their contention on one.
pub(crate) fn clone_dev(dev: &OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated path; open returns a new descriptor or -1.
    let fd = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is ours.
    let new = unsafe { OwnedFd::from_raw_fd(fd) };
    let master: u32 = dev.as_raw_fd() as u32;
    // SAFETY: the ioctl reads one u32 (the descriptor to clone) from the
    // pointer, which points at a live local.
    if unsafe { libc::ioctl(new.as_raw_fd(), abi::DEV_IOC_CLONE as _, &master as *const u32) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(new)
}

/// How many workers wait in read(2) at once (see [`Readers`]).
const READERS: usize = 2;

/// Which workers wait in read(2). The kernel hands a request to the
/// reader that has waited longest (its wait queue is FIFO), so with every
/// idle worker in read(2) each request wakes the coldest thread: measured,
/// a lone caller's round trip grew from 23 us with one worker to 130 us
/// with four. So at most [`READERS`] workers wait in read(2) at once (the
/// ones that finished last, still warm); the others park.
///
/// A parked worker is unparked to take the place of the last reader only
/// when the request that reader took may keep it long (the io_uring
/// transport's classification, [`crate::slow::may_wait`]: syncs,
/// fallocate, large transfers; WRITEs too under `store_writes`, whose
/// page stores can wait for READs still unread), so that such requests
/// never leave the connection unread; any other request is served
/// before its worker reads again, and two of them at once keep the next
/// request waiting only that long. Unparking whenever both readers were
/// busy, as before, cost a park and an unpark per request pair with two
/// callers, and with the daemon in its callers' scheduling group (a
/// `--foreground` daemon started from their session: one autogroup) that
/// hand-off collapsed: W1 with 2 fio jobs went from 81-88k to 20-22k IOPS
/// (default workers against `threads=2`, docs/BENCHMARKS.md).
#[derive(Debug, Default)]
pub(crate) struct Readers {
    state: std::sync::Mutex<ReaderState>,
}

#[derive(Debug, Default)]
struct ReaderState {
    reading: usize,
    parked: Vec<std::thread::Thread>,
    closed: bool,
    /// What the workers did, logged when the session ends (the hand-offs
    /// `bench/handoffs.sh` counts per operation).
    counts: HandoffCounts,
}

/// The `/dev/fuse` session's hand-offs between its workers.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HandoffCounts {
    /// Requests read from the device.
    pub requests: u64,
    /// Times a worker parked because [`READERS`] were in read(2).
    pub parks: u64,
    /// Parked workers woken to read in place of a busy one.
    pub unparks: u64,
}

impl Readers {
    fn lock(&self) -> std::sync::MutexGuard<'_, ReaderState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until this worker may read; false once the connection is gone.
    fn enter(&self) -> bool {
        loop {
            let mut g = self.lock();
            if g.closed {
                return false;
            }
            if g.reading < READERS {
                g.reading += 1;
                return true;
            }
            let me = std::thread::current();
            if !g.parked.iter().any(|t| t.id() == me.id()) {
                g.parked.push(me);
                g.counts.parks += 1;
            }
            drop(g);
            std::thread::park();
        }
    }

    /// This worker got a request (or an error): when it was the last
    /// reader and the request `may_wait` long, a parked worker takes its
    /// place.
    fn leave(&self, may_wait: bool) {
        let mut g = self.lock();
        g.reading -= 1;
        g.counts.requests += 1;
        if g.reading == 0 && may_wait {
            if let Some(t) = g.parked.pop() {
                g.counts.unparks += 1;
                t.unpark();
            }
        }
    }

    /// What the workers did so far.
    pub(crate) fn counts(&self) -> HandoffCounts {
        self.lock().counts
    }

    /// The connection is gone: every parked worker ends.
    fn close(&self) {
        let mut g = self.lock();
        g.closed = true;
        for t in g.parked.drain(..) {
            t.unpark();
        }
    }
}

/// Whether serving `d` may take long (see [`Readers`]).
fn may_wait(d: &crate::proto::decode::Decoded<'_>, writes_notify: bool) -> bool {
    match &d.op {
        Operation::Write(w) => {
            writes_notify || crate::slow::sync_write(w.flags.0) || crate::slow::may_wait(op::WRITE, w.data.len(), 0)
        }
        Operation::Read(r) => crate::slow::may_wait(op::READ, 0, r.size as usize),
        _ => crate::slow::may_wait(d.header.opcode, 0, 0),
    }
}

/// Serves requests on `fd` until the connection goes away or DESTROY
/// (a lone worker).
#[cfg(test)]
pub(crate) fn worker<F: Backend>(fs: &F, fd: Arc<OwnedFd>, n: Negotiated) -> io::Result<()> {
    worker_in(fs, fd, n, &Readers::default())
}

/// Serves requests on `dev` until the connection goes away or DESTROY, as
/// one of the workers sharing `readers`.
///
/// A reply that must wait for an invalidation (an O_DIRECT WRITE's, see
/// [`crate::notify::Notifier::inval_then`]) is handed over, with the
/// descriptor it must be written to (the one the request came from: the
/// kernel looks the request up among that descriptor's), and this worker
/// goes on reading: no worker ever waits for an invalidation, so the
/// READs it may wait for are always read and served.
fn worker_in<F: Backend>(fs: &F, dev: Arc<OwnedFd>, n: Negotiated, readers: &Readers) -> io::Result<()> {
    let fd = dev.as_raw_fd();
    let mut inbuf = vec![0u8; request_buffer_len(n.max_payload)];
    let mut outbuf = vec![0u8; abi::OUT_HEADER_LEN + n.max_payload + FIXED_REPLY_MAX];
    loop {
        if !readers.enter() {
            return Ok(());
        }
        let got = receive(fd, &mut inbuf);
        let Some(len) = got.inspect_err(|_| readers.close())? else {
            readers.close();
            return Ok(());
        };
        let req = &inbuf[..len];
        let d = match decode(req, n.decode) {
            Ok(d) => {
                readers.leave(may_wait(&d, n.writes_notify));
                d
            }
            Err(e) => {
                readers.leave(false);
                // Answer what can be answered; a request without a header
                // cannot be (and the kernel never sends one).
                match InHeader::parse(req) {
                    Ok(h) if !matches!(h.opcode, op::FORGET | op::BATCH_FORGET | op::INTERRUPT) => {
                        warn!("malformed request (opcode {}, {len} bytes): answered {e:?}", h.opcode);
                        send(fd, &[&encode::out_header(abi::OUT_HEADER_LEN, -e.code(), h.unique)])?;
                    }
                    _ => warn!("malformed request of {len} bytes dropped"),
                }
                continue;
            }
        };
        let (head, body) = outbuf.split_at_mut(abi::OUT_HEADER_LEN);
        let mut out = Out::new(body);
        dispatch(fs, &d, n.owner, &mut out);
        if d.op.no_reply() {
            continue;
        }
        let (h, plen) = header_for(&out, d.header.unique);
        if let Some(inval) = out.inval_first() {
            let mut reply = Vec::with_capacity(abi::OUT_HEADER_LEN + plen);
            reply.extend_from_slice(&h);
            reply.extend_from_slice(&out.payload()[..plen]);
            let (dev, unique) = (dev.clone(), d.header.unique);
            fs.after_inval(
                inval,
                Box::new(move || {
                    if let Err(e) = send(dev.as_raw_fd(), &[&reply]) {
                        if e.raw_os_error() != Some(libc::ENODEV) {
                            error!("writing the reply to request {unique}: {e}");
                        }
                    }
                }),
            );
            continue;
        }
        head.copy_from_slice(&h);
        if let Err(e) = send(fd, &[&outbuf[..abi::OUT_HEADER_LEN + plen]]) {
            if e.raw_os_error() == Some(libc::ENODEV) {
                readers.close();
                return Ok(());
            }
            error!("writing the reply to request {}: {e}", d.header.unique);
        }
        if matches!(d.op, Operation::Destroy) {
            readers.close();
            return Ok(());
        }
    }
}

/// Runs `threads` workers on `dev` (each on a clone of it when `clone`),
/// until the connection goes away.
pub(crate) fn run<F: Backend>(
    fs: Arc<F>,
    dev: Arc<OwnedFd>,
    clone: bool,
    threads: usize,
    n: Negotiated,
) -> io::Result<()> {
    let mut handles = Vec::with_capacity(threads);
    let readers = Arc::new(Readers::default());
    for i in 0..threads.max(1) {
        let fd = if clone && i > 0 {
            match clone_dev(&dev) {
                Ok(c) => Some(c),
                Err(e) => {
                    warn!("cloning /dev/fuse: {e}; workers share one descriptor");
                    None
                }
            }
        } else {
            None
        };
        let (fs, readers) = (fs.clone(), readers.clone());
        let fd = fd.map_or_else(|| dev.clone(), Arc::new);
        handles.push(
            std::thread::Builder::new().name(format!("fuse-{i}")).spawn(move || worker_in(&*fs, fd, n, &readers))?,
        );
    }
    info!("serving /dev/fuse with {} workers", threads.max(1));
    let mut r = Ok(());
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                if r.is_ok() {
                    r = Err(e);
                }
            }
            Err(_) => r = Err(io::Error::other("a FUSE worker panicked")),
        }
    }
    let c = readers.counts();
    // bench/handoffs.sh reads this line.
    info!(
        "/dev/fuse session ended: {} requests read, workers parked {} times, unparked {} times",
        c.requests, c.parks, c.unparks
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::request::Lookup;
    use crate::proto::types::{Errno, FileAttr, FileType, Generation, INodeNo, Request};
    use crate::reply::ReplyEntry;
    use std::time::{Duration, UNIX_EPOCH};

    /// Answers LOOKUP of "x" with node 9; everything else by the trait's
    /// defaults (ENOSYS).
    struct Fake;

    impl Backend for Fake {
        fn set_want_uring(&mut self, _: bool) {}
    }

    impl Filesystem for Fake {
        fn lookup(&self, _req: &Request, lookup: &Lookup<'_>, reply: ReplyEntry) {
            if lookup.parent != INodeNo(1) || lookup.name != "x" {
                return reply.error(Errno::ENOENT);
            }
            let t = UNIX_EPOCH;
            let a = FileAttr {
                ino: INodeNo(9),
                size: 3,
                blocks: 0,
                atime: t,
                mtime: t,
                ctime: t,
                crtime: t,
                kind: FileType::RegularFile,
                perm: 0o644,
                nlink: 1,
                uid: 0,
                gid: 0,
                rdev: 0,
                blksize: 4096,
                flags: 0,
            };
            reply.entry_with_ttls(&Duration::from_secs(1), &Duration::from_secs(1), &a, Generation(4));
        }
    }

    fn request(opcode: u32, unique: u64, args: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((abi::IN_HEADER_LEN + args.len()) as u32).to_ne_bytes());
        b.extend_from_slice(&opcode.to_ne_bytes());
        b.extend_from_slice(&unique.to_ne_bytes());
        b.extend_from_slice(&1u64.to_ne_bytes());
        b.extend_from_slice(&[0u8; 16]);
        b.extend_from_slice(args);
        b
    }

    /// A worker on one end of a SOCK_SEQPACKET pair (one message per read,
    /// as /dev/fuse): replies come back in order, FORGET gets none, a
    /// malformed request an errno, and the worker ends when the stream does.
    #[test]
    fn worker_answers_each_request_once() {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors.
        assert_eq!(unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, fds.as_mut_ptr()) }, 0);
        // SAFETY: both descriptors were just created and are ours.
        let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let n = Negotiated {
            granted: InitFlags::empty(),
            max_payload: 1 << 16,
            decode: DecodeConfig::default(),
            owner: Some(0),
            writes_notify: false,
        };
        let t = std::thread::spawn(move || worker(&Fake, Arc::new(theirs), n));
        for m in [
            request(op::LOOKUP, 1, b"x\0"),
            request(op::FORGET, 2, &5u64.to_ne_bytes()),
            request(op::GETATTR, 3, &[0u8; 16]),
            request(op::LOOKUP, 4, b"no-nul"),
            request(op::LOOKUP, 5, b"y\0"),
        ] {
            send(ours.as_raw_fd(), &[&m]).unwrap();
        }
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        for _ in 0..4 {
            let n = receive(ours.as_raw_fd(), &mut buf).unwrap().unwrap();
            let len = u32::from_ne_bytes(buf[0..4].try_into().unwrap()) as usize;
            let err = i32::from_ne_bytes(buf[4..8].try_into().unwrap());
            let unique = u64::from_ne_bytes(buf[8..16].try_into().unwrap());
            assert_eq!(len, n);
            got.push((unique, err, len));
            if unique == 1 {
                assert_eq!(u64::from_ne_bytes(buf[16..24].try_into().unwrap()), 9);
                assert_eq!(u64::from_ne_bytes(buf[24..32].try_into().unwrap()), 4);
            }
        }
        assert_eq!(
            got,
            vec![
                (1, 0, abi::OUT_HEADER_LEN + abi::ENTRY_OUT_LEN),
                (3, -libc::ENOSYS, abi::OUT_HEADER_LEN),
                (4, -libc::EIO, abi::OUT_HEADER_LEN),
                (5, -libc::ENOENT, abi::OUT_HEADER_LEN),
            ]
        );
        drop(ours);
        t.join().unwrap().unwrap();
    }
}
