//! FUSE over io_uring (`-o transport=uring`): a prototype transport.
//!
//! With `CONFIG_FUSE_IO_URING` (Linux 6.14+) and the `enable_uring` module
//! parameter on, a daemon that answers FUSE_INIT with FUSE_OVER_IO_URING
//! may register ring entries on the `/dev/fuse` descriptor: one queue per
//! possible CPU, each entry a header buffer and a payload buffer, handed to
//! the kernel with FUSE_IO_URING_CMD_REGISTER (an IORING_OP_URING_CMD with
//! 128-byte submission entries). Once every queue has an entry, the kernel
//! puts each request into a free entry of the queue of the CPU the caller
//! runs on and completes that entry's command; the daemon writes the reply
//! into the same buffers and submits FUSE_IO_URING_CMD_COMMIT_AND_FETCH,
//! which delivers the reply and waits for the next request in one system
//! call. FORGET and INTERRUPT still come through `/dev/fuse`, which the
//! ordinary session keeps reading.
//!
//! fuser 0.18 only reads `/dev/fuse`, and its request decoding is private,
//! so this prototype bridges: each queue's thread turns a ring entry back
//! into the bytes `/dev/fuse` would have given (in header, op header,
//! payload) and sends them as one message over an `AF_UNIX`
//! `SOCK_SEQPACKET` pair to a fuser session of its own (the same adapter
//! state, [`Uext4Fuse::share`]), whose workers answer with one message
//! each; the queue thread copies the reply into the entry and commits it.
//! That keeps every operation working through the one adapter, at the
//! price of one extra hop per request. GETATTR and READ, the requests
//! docs/BENCHMARKS.md's `bench requests` measures, are answered in the
//! queue thread itself (the adapter's getattr and read, the attributes
//! encoded here, the data read straight into the ring buffer), which is
//! what the transport costs without the hop.
//!
//! Falling back: the rings and sockets are made before the INIT handshake,
//! and FUSE_OVER_IO_URING is only asked for if they could be; a kernel
//! whose registration fails clears the connection's io_uring flag itself
//! and the requests flow through `/dev/fuse` as before. If the bridge
//! sessions cannot start after the kernel granted the flag, one deliberately
//! invalid registration makes the kernel fall back the same way.

use crate::adapter::Uext4Fuse;
use io_uring::{opcode, squeue, types, IoUring};
use log::{debug, info, warn};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::thread::JoinHandle;

/// The module parameter that allows FUSE over io_uring.
pub const ENABLE_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Which transport carries the kernel's requests to the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// read(2)/write(2) on `/dev/fuse`, one descriptor per worker.
    #[default]
    Dev,
    /// FUSE over io_uring (prototype), falling back to `/dev/fuse` when
    /// the kernel lacks it or it is not enabled.
    Uring,
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "dev" => Ok(Transport::Dev),
            "uring" | "io_uring" => Ok(Transport::Uring),
            v => Err(format!("transport={v}: expected dev or uring")),
        }
    }
}

/// Why FUSE over io_uring cannot be used on this machine now, if it cannot.
pub fn unavailable_reason() -> Option<String> {
    match std::fs::read_to_string(ENABLE_PARAM) {
        Err(_) => Some(format!(
            "the kernel has no FUSE io_uring support ({ENABLE_PARAM} missing: needs Linux 6.14+ with CONFIG_FUSE_IO_URING)"
        )),
        Ok(s) if s.trim() != "Y" => {
            Some(format!("FUSE io_uring is disabled (as root: echo Y > {ENABLE_PARAM})"))
        }
        Ok(_) => None,
    }
}

/// What the INIT handshake on `/dev/fuse` offered, recorded by the adapter.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct InitInfo {
    /// The kernel's capability flags (flags | flags2 << 32).
    pub caps: u64,
    /// The kernel's protocol version.
    pub major: u32,
    /// Minor protocol version.
    pub minor: u32,
    /// FUSE_OVER_IO_URING was offered and answered.
    pub granted: bool,
}

// The ring protocol (include/uapi/linux/fuse.h).
const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// struct fuse_uring_req_header: in/out header (128), op header (128),
/// struct fuse_uring_ent_in_out (32).
const HEADER_LEN: usize = 288;
const OP_IN: usize = 128;
const ENT_PAYLOAD_SZ: usize = 256 + 16;
const IN_HEADER_LEN: usize = 40;
const OUT_HEADER_LEN: usize = 16;
const FUSE_GETATTR: u32 = 3;
const FUSE_READ: u32 = 15;
const FUSE_INIT: u32 = 26;
const FUSE_DESTROY: u32 = 38;
const FUSE_INIT_EXT: u64 = 1 << 30;
/// The payload buffer of each entry: at least the kernel's
/// max(max_write, max_pages * PAGE_SIZE); our max_write and max_pages stay
/// at or below 1 MiB.
const PAYLOAD_LEN: usize = crate::MAX_WRITE_LIMIT as usize;
/// Entries per queue: requests of one CPU in flight at once.
const ENTRIES: usize = 4;
/// user_data of the socket receive; entries use their index.
const RECV_TAG: u64 = u64::MAX;
/// Socket buffers: every message in flight on a queue fits at once, so a
/// queue thread blocked in send(2) cannot wait on workers blocked on it.
const SOCK_BUF: libc::c_int = 16 << 20;

/// One queue made ready before the handshake.
pub(crate) struct Prepared {
    rings: Vec<IoUring<squeue::Entry128>>,
    sockets: Vec<(OwnedFd, OwnedFd)>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared").field("queues", &self.rings.len()).finish_non_exhaustive()
    }
}

/// The queues the kernel expects: one per possible CPU.
fn possible_cpus() -> usize {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    // "0-1" or "0" or "0-3,5": the highest number plus one.
    s.trim()
        .split([',', '-'])
        .filter_map(|n| n.parse::<usize>().ok())
        .max()
        .map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), |m| m + 1)
}

fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` is a valid array of two descriptors for the result.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socketpair succeeded, so both are open descriptors we own.
    let pair = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    for fd in [&pair.0, &pair.1] {
        for opt in [libc::SO_SNDBUFFORCE, libc::SO_RCVBUFFORCE] {
            // SAFETY: setsockopt reads one c_int from the pointer for its
            // length; the descriptor is open.
            let r = unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&SOCK_BUF as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if r != 0 {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("socket buffers of 16 MiB need CAP_NET_ADMIN: {}", io::Error::last_os_error()),
                ));
            }
        }
    }
    Ok(pair)
}

/// Makes the rings and sockets, before INIT asks for the transport.
pub(crate) fn prepare() -> io::Result<Prepared> {
    let n = possible_cpus();
    let mut rings = Vec::with_capacity(n);
    let mut sockets = Vec::with_capacity(n);
    for _ in 0..n {
        // One thread submits to each ring and runs its completions' task
        // work only when it asks for completions (DEFER_TASKRUN: no
        // interrupting signal per request); the ring is enabled by that
        // thread, which makes it the single issuer.
        rings.push(
            IoUring::<squeue::Entry128>::builder()
                .setup_single_issuer()
                .setup_defer_taskrun()
                .setup_r_disabled()
                .build(2 * ENTRIES as u32 + 2)?,
        );
        sockets.push(seqpacket_pair()?);
    }
    Ok(Prepared { rings, sockets })
}

/// A URING_CMD on `/dev/fuse` carrying struct fuse_uring_cmd_req.
fn fuse_cmd(dev: RawFd, op: u32, commit_id: u64, qid: u16, iov: Option<*const libc::iovec>) -> squeue::Entry128 {
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&qid.to_ne_bytes());
    let mut b = opcode::UringCmd80::new(types::Fd(dev), op).cmd(cmd);
    if let Some(p) = iov {
        b = b.addr(Some(p as u64));
    }
    let e = b.build();
    if iov.is_none() {
        return e;
    }
    // The registration passes two iovecs (header, payload): sqe->len = 2,
    // a field the crate's builder does not set.
    // SAFETY: Entry128 is repr(C): an io_uring_sqe (64 bytes, plain
    // integers and unions of them) followed by 64 command bytes, so it is
    // exactly 128 bytes with no invalid bit patterns; `len` is the u32 at
    // byte 24 of struct io_uring_sqe.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute::<squeue::Entry128, [u8; 128]>(e) };
    raw[24..28].copy_from_slice(&2u32.to_ne_bytes());
    // SAFETY: as above, any 128 bytes are a valid Entry128.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

/// One ring entry's buffers; their addresses are handed to the kernel at
/// registration and must not move or be freed while the ring lives.
struct Ent {
    header: Box<[u8; HEADER_LEN]>,
    payload: Box<[u8]>,
    iov: Box<[libc::iovec; 2]>,
}

impl Ent {
    fn new() -> Ent {
        let mut header = Box::new([0u8; HEADER_LEN]);
        let mut payload = vec![0u8; PAYLOAD_LEN].into_boxed_slice();
        let iov = Box::new([
            libc::iovec { iov_base: header.as_mut_ptr().cast(), iov_len: HEADER_LEN },
            libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: PAYLOAD_LEN },
        ]);
        Ent { header, payload, iov }
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).and_then(|s| s.try_into().ok()).map_or(0, u32::from_ne_bytes)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).and_then(|s| s.try_into().ok()).map_or(0, u64::from_ne_bytes)
}

/// The running transport: joined after the `/dev/fuse` session ends, so
/// that no adapter (and no reference to the filesystem) outlives the mount.
#[derive(Debug, Default)]
pub(crate) struct Running {
    threads: Vec<JoinHandle<()>>,
}

impl Running {
    pub(crate) fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// struct fuse_attr_out for `st` into `out`; returns its length (104).
fn encode_attr_out(st: &uext4::Stat, ttl: std::time::Duration, out: &mut [u8]) -> usize {
    let a = crate::conv::attr(st);
    let kind = match a.kind {
        fuser::FileType::NamedPipe => libc::S_IFIFO,
        fuser::FileType::CharDevice => libc::S_IFCHR,
        fuser::FileType::BlockDevice => libc::S_IFBLK,
        fuser::FileType::Directory => libc::S_IFDIR,
        fuser::FileType::RegularFile => libc::S_IFREG,
        fuser::FileType::Symlink => libc::S_IFLNK,
        fuser::FileType::Socket => libc::S_IFSOCK,
    };
    let mut put = |at: usize, v: &[u8]| out[at..at + v.len()].copy_from_slice(v);
    put(0, &ttl.as_secs().to_ne_bytes());
    put(8, &ttl.subsec_nanos().to_ne_bytes());
    put(12, &0u32.to_ne_bytes());
    let f = 16;
    put(f, &a.ino.0.to_ne_bytes());
    put(f + 8, &a.size.to_ne_bytes());
    put(f + 16, &a.blocks.to_ne_bytes());
    for (k, t) in [st.atime, st.mtime, st.ctime].iter().enumerate() {
        put(f + 24 + 8 * k, &t.sec.to_ne_bytes());
        put(f + 48 + 4 * k, &t.nsec.to_ne_bytes());
    }
    put(f + 60, &(kind | u32::from(a.perm)).to_ne_bytes());
    put(f + 64, &a.nlink.to_ne_bytes());
    put(f + 68, &a.uid.to_ne_bytes());
    put(f + 72, &a.gid.to_ne_bytes());
    put(f + 76, &a.rdev.to_ne_bytes());
    put(f + 80, &a.blksize.to_ne_bytes());
    put(f + 84, &a.flags.to_ne_bytes());
    f + 88
}

/// The INIT request `/dev/fuse` gave, rebuilt for a bridge session.
fn init_message(info: &InitInfo) -> Vec<u8> {
    let mut m = vec![0u8; IN_HEADER_LEN + 64];
    let len = m.len() as u32;
    m[0..4].copy_from_slice(&len.to_ne_bytes());
    m[4..8].copy_from_slice(&FUSE_INIT.to_ne_bytes());
    m[8..16].copy_from_slice(&1u64.to_ne_bytes());
    let body = &mut m[IN_HEADER_LEN..];
    body[0..4].copy_from_slice(&info.major.to_ne_bytes());
    body[4..8].copy_from_slice(&info.minor.to_ne_bytes());
    body[8..12].copy_from_slice(&(128u32 << 10).to_ne_bytes());
    let caps = info.caps | FUSE_INIT_EXT;
    body[12..16].copy_from_slice(&(caps as u32).to_ne_bytes());
    body[16..20].copy_from_slice(&((caps >> 32) as u32).to_ne_bytes());
    m
}

/// A fuser session on the far end of `sock`, handshaken with `info`'s INIT.
fn bridge_session(
    adapter: Uext4Fuse,
    near: &OwnedFd,
    far: OwnedFd,
    info: &InitInfo,
    acl: fuser::SessionACL,
    threads: usize,
) -> io::Result<fuser::Session<Uext4Fuse>> {
    let init = init_message(info);
    let near_fd = near.as_raw_fd();
    // The handshake blocks in from_fd until INIT is answered: feed it from
    // another thread and swallow the reply.
    let feeder = std::thread::spawn(move || -> io::Result<()> {
        // SAFETY: `init` is a valid buffer of its length; the descriptor
        // stays open (owned by the caller, who joins this thread first).
        if unsafe { libc::send(near_fd, init.as_ptr().cast(), init.len(), 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 4096];
        // SAFETY: as above, `buf` is writable for its length.
        if unsafe { libc::recv(near_fd, buf.as_mut_ptr().cast(), buf.len(), 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    });
    let mut config = fuser::Config::default();
    config.acl = acl;
    config.n_threads = Some(threads.max(1));
    config.clone_fd = false;
    let session = fuser::Session::from_fd(adapter, far, acl, config);
    feeder.join().map_err(|_| io::Error::other("INIT feeder panicked"))??;
    session
}

/// Starts the bridge sessions and the queue threads, after the kernel
/// granted FUSE_OVER_IO_URING. On an error the kernel is told to fall
/// back to `/dev/fuse` (see the module documentation).
pub(crate) fn start(
    prepared: Prepared,
    dev: BorrowedFd<'_>,
    info: &InitInfo,
    adapter: &Uext4Fuse,
    acl: fuser::SessionACL,
    threads: usize,
) -> io::Result<Running> {
    let dev = dev.try_clone_to_owned()?;
    let mut running = Running::default();
    let mut queues = Vec::new();
    let r = (|| -> io::Result<()> {
        for (ring, (near, far)) in prepared.rings.into_iter().zip(prepared.sockets) {
            let session = bridge_session(adapter.share(), &near, far, info, acl, threads)?;
            let t = std::thread::Builder::new().name("uring-session".into()).spawn(move || {
                let _ = session.run();
            })?;
            queues.push((ring, near, t));
        }
        Ok(())
    })();
    if let Err(e) = r {
        refuse(&dev);
        // The bridge sessions end when their sockets close.
        for (_, near, t) in queues {
            drop(near);
            let _ = t.join();
        }
        return Err(e);
    }
    let n = queues.len();
    for (qid, (ring, near, session)) in queues.into_iter().enumerate() {
        let dev = dev.try_clone()?;
        let adapter = adapter.share();
        running.threads.push(std::thread::Builder::new().name(format!("uring-q{qid}")).spawn(move || {
            if let Err(e) = serve_queue(ring, &dev, qid as u16, &near, &adapter) {
                warn!("io_uring queue {qid}: {e}");
            }
            // One DESTROY per worker ends the bridge session quietly (each
            // worker returns on it); closing the socket then ends any left.
            let mut m = [0u8; IN_HEADER_LEN];
            m[0..4].copy_from_slice(&(IN_HEADER_LEN as u32).to_ne_bytes());
            m[4..8].copy_from_slice(&FUSE_DESTROY.to_ne_bytes());
            m[8..16].copy_from_slice(&u64::MAX.to_ne_bytes());
            for _ in 0..threads.max(1) {
                // SAFETY: `m` is a valid buffer of its length; `near` is open.
                if unsafe { libc::send(near.as_raw_fd(), m.as_ptr().cast(), m.len(), libc::MSG_DONTWAIT) } < 0 {
                    break;
                }
            }
            // The workers answer on `near`: keep it open until they are gone.
            let _ = session.join();
        })?);
    }
    info!("transport: io_uring, {n} queues of {ENTRIES} entries (prototype bridge to fuser sessions)");
    Ok(running)
}

/// Makes the kernel give up on the ring: a registration it must refuse
/// (a header buffer too small) clears the connection's io_uring flag and
/// wakes the requests waiting for the ring, which then use `/dev/fuse`.
fn refuse(dev: &OwnedFd) {
    let Ok(mut ring) = IoUring::<squeue::Entry128>::builder().build(2) else { return };
    let mut small = [0u8; 8];
    let iov = [
        libc::iovec { iov_base: small.as_mut_ptr().cast(), iov_len: small.len() },
        libc::iovec { iov_base: small.as_mut_ptr().cast(), iov_len: small.len() },
    ];
    let e = fuse_cmd(dev.as_raw_fd(), CMD_REGISTER, 0, 0, Some(iov.as_ptr()));
    // SAFETY: the entry's iovecs point into `iov` and `small`, which live
    // until the command completed (we wait for it below).
    if unsafe { ring.submission().push(&e) }.is_ok() {
        let _ = ring.submit_and_wait(1);
    }
    warn!("io_uring transport could not start its sessions; the kernel falls back to /dev/fuse");
}

/// One queue: registers its entries, forwards each request to the bridge
/// session and commits each reply, until the kernel tears the ring down.
fn serve_queue(
    mut ring: IoUring<squeue::Entry128>,
    dev: &OwnedFd,
    qid: u16,
    sock: &OwnedFd,
    adapter: &Uext4Fuse,
) -> io::Result<()> {
    let dev_fd = dev.as_raw_fd();
    ring.submitter().register_enable_rings()?;
    // The kernel queues a request on the queue of the CPU its caller runs
    // on: serving it from that CPU keeps the wake-up local.
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes
    // within it (qid is below the number of possible CPUs, checked by
    // the macro against the set's size); sched_setaffinity(0) applies to
    // this thread and only reads the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(usize::from(qid), &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            debug!("io_uring queue {qid}: cannot pin to CPU {qid}: {}", io::Error::last_os_error());
        }
    }
    let mut ents: Vec<Ent> = (0..ENTRIES).map(|_| Ent::new()).collect();
    let mut recv_buf = vec![0u8; PAYLOAD_LEN + 4096];
    let mut msg = Vec::with_capacity(PAYLOAD_LEN + 4096);
    // unique -> entry index of the requests out with the bridge session.
    let mut pending: HashMap<u64, usize> = HashMap::new();
    let recv = |buf: &mut [u8]| {
        opcode::Recv::new(types::Fd(sock.as_raw_fd()), buf.as_mut_ptr(), buf.len() as u32).build().user_data(RECV_TAG)
    };
    for (i, e) in ents.iter().enumerate() {
        let sqe = fuse_cmd(dev_fd, CMD_REGISTER, 0, qid, Some(e.iov.as_ptr())).user_data(i as u64);
        // SAFETY: the entry's buffers and iovecs are boxed, owned by `ents`,
        // which outlives the ring's use of them: this function returns only
        // after every entry's command has completed (or the ring is dropped
        // with it, which cancels them).
        unsafe { ring.submission().push(&sqe) }.map_err(|_| io::Error::other("submission queue full"))?;
    }
    // SAFETY: `recv_buf` lives until this function returns, and is only
    // touched again after its receive completed.
    unsafe { ring.submission().push(&recv(&mut recv_buf).into()) }
        .map_err(|_| io::Error::other("submission queue full"))?;
    let mut live = ENTRIES;
    let mut registered = false;
    loop {
        ring.submit_and_wait(1)?;
        let done: Vec<(u64, i32)> = ring.completion().map(|c| (c.user_data(), c.result())).collect();
        for (tag, res) in done {
            if tag == RECV_TAG {
                if res <= 0 {
                    // The bridge session went away: nothing can be answered.
                    return Err(io::Error::other(format!("bridge socket closed ({res})")));
                }
                let r = &recv_buf[..res as usize];
                let unique = u64_at(r, 8);
                let len = (u32_at(r, 0) as usize).min(r.len());
                match pending.remove(&unique) {
                    Some(i) if len >= OUT_HEADER_LEN && len - OUT_HEADER_LEN <= PAYLOAD_LEN => {
                        let e = &mut ents[i];
                        e.header[..OUT_HEADER_LEN].copy_from_slice(&r[..OUT_HEADER_LEN]);
                        let body = len - OUT_HEADER_LEN;
                        e.payload[..body].copy_from_slice(&r[OUT_HEADER_LEN..len]);
                        e.header[ENT_PAYLOAD_SZ..ENT_PAYLOAD_SZ + 4].copy_from_slice(&(body as u32).to_ne_bytes());
                        let sqe = fuse_cmd(dev_fd, CMD_COMMIT_AND_FETCH, unique, qid, None).user_data(i as u64);
                        // SAFETY: as for the registration: the entry's
                        // buffers stay owned by `ents`.
                        unsafe { ring.submission().push(&sqe) }
                            .map_err(|_| io::Error::other("submission queue full"))?;
                    }
                    Some(i) => {
                        warn!("io_uring queue {qid}: malformed reply of {len} bytes to request {unique}");
                        pending.insert(unique, i);
                    }
                    // A notification (unique 0) or a reply nobody waits for.
                    None => debug!("io_uring queue {qid}: reply to unknown request {unique} dropped"),
                }
                // SAFETY: as for the first receive.
                unsafe { ring.submission().push(&recv(&mut recv_buf).into()) }
                    .map_err(|_| io::Error::other("submission queue full"))?;
                continue;
            }
            let i = tag as usize;
            if res < 0 {
                // Torn down (unmount, abort) or refused at registration.
                // ENOTCONN: the connection went away (the unmount's
                // teardown); anything else refused the registration.
                if !registered && res != -libc::ENOTCONN {
                    warn!(
                        "io_uring queue {qid}: registration refused: {}; requests use /dev/fuse",
                        io::Error::from_raw_os_error(-res)
                    );
                } else {
                    debug!("io_uring queue {qid}: entry {i} ended: {}", io::Error::from_raw_os_error(-res));
                }
                live -= 1;
                if live == 0 {
                    return Ok(());
                }
                continue;
            }
            if !registered {
                registered = true;
                info!("io_uring queue {qid}: requests arrive through the ring");
            }
            let Some(e) = ents.get(i) else { continue };
            let h = &e.header[..];
            let len = u32_at(h, 0) as usize;
            let unique = u64_at(h, 8);
            let payload_sz = u32_at(h, ENT_PAYLOAD_SZ) as usize;
            let op_len =
                len.checked_sub(IN_HEADER_LEN + payload_sz).filter(|&n| n <= OP_IN && payload_sz <= PAYLOAD_LEN);
            let Some(op_len) = op_len else {
                warn!("io_uring queue {qid}: malformed request (len {len}, payload {payload_sz}); answered EIO");
                let e = &mut ents[i];
                e.header[..16].copy_from_slice(&[0u8; 16]);
                e.header[0..4].copy_from_slice(&(OUT_HEADER_LEN as u32).to_ne_bytes());
                e.header[4..8].copy_from_slice(&(-libc::EIO).to_ne_bytes());
                e.header[8..16].copy_from_slice(&unique.to_ne_bytes());
                e.header[ENT_PAYLOAD_SZ..ENT_PAYLOAD_SZ + 4].copy_from_slice(&0u32.to_ne_bytes());
                let sqe = fuse_cmd(dev_fd, CMD_COMMIT_AND_FETCH, unique, qid, None).user_data(i as u64);
                // SAFETY: as for the registration.
                unsafe { ring.submission().push(&sqe) }.map_err(|_| io::Error::other("submission queue full"))?;
                continue;
            };
            // GETATTR and READ are answered here, without the bridge's
            // hop: the prototype's measure of what the ring itself costs.
            // (A READ that misses the cache waits for the device in this
            // thread, holding up the queue's other entries.)
            let opcode = u32_at(h, 4);
            if opcode == FUSE_GETATTR || opcode == FUSE_READ {
                let nodeid = fuser::INodeNo(u64_at(h, 16));
                let (fh, offset, size, flags) =
                    (u64_at(h, OP_IN), u64_at(h, OP_IN + 8), u32_at(h, OP_IN + 16) as usize, u32_at(h, OP_IN + 32));
                let e = &mut ents[i];
                let r = if opcode == FUSE_GETATTR {
                    adapter.getattr_stat(nodeid).map(|(st, ttl)| encode_attr_out(&st, ttl, &mut e.payload[..]))
                } else {
                    let buf = &mut e.payload[..size.min(PAYLOAD_LEN)];
                    adapter.read_into(nodeid, fuser::FileHandle(fh), offset, fuser::OpenFlags(flags as i32), buf)
                };
                let body = match r {
                    Ok(n) => {
                        e.header[4..8].copy_from_slice(&0i32.to_ne_bytes());
                        n
                    }
                    Err(errno) => {
                        e.header[4..8].copy_from_slice(&(-errno.code()).to_ne_bytes());
                        0
                    }
                };
                e.header[0..4].copy_from_slice(&((OUT_HEADER_LEN + body) as u32).to_ne_bytes());
                e.header[8..16].copy_from_slice(&unique.to_ne_bytes());
                e.header[ENT_PAYLOAD_SZ..ENT_PAYLOAD_SZ + 4].copy_from_slice(&(body as u32).to_ne_bytes());
                let sqe = fuse_cmd(dev_fd, CMD_COMMIT_AND_FETCH, unique, qid, None).user_data(i as u64);
                // SAFETY: as for the registration.
                unsafe { ring.submission().push(&sqe) }.map_err(|_| io::Error::other("submission queue full"))?;
                continue;
            }
            msg.clear();
            msg.extend_from_slice(&h[..IN_HEADER_LEN]);
            msg.extend_from_slice(&h[OP_IN..OP_IN + op_len]);
            msg.extend_from_slice(&e.payload[..payload_sz]);
            pending.insert(unique, i);
            // SAFETY: `msg` is a valid buffer of its length; `sock` is open.
            if unsafe { libc::send(sock.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
}
