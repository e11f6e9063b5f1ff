//! FUSE over io_uring (`-o transport=uring`).
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
//! Each queue's thread decodes the request straight from the entry's
//! buffers (the op header and the payload, no copy) and serves it with the
//! same dispatcher as `/dev/fuse` ([`crate::dispatch::dispatch`]), the
//! reply written into the entry's payload buffer. Requests that may take
//! long (FSYNC, FSYNCDIR, SYNCFS, large WRITEs and READs, FALLOCATE,
//! COPY_FILE_RANGE, and buffered READs over 16 KiB that miss the page
//! cache: tried first from the cache alone, see
//! `uext4::inode_api::FsCore::read_cached`; smaller misses are one small device
//! read, served on the queue thread) go to a small pool of threads shared
//! by the queues,
//! so that they do not hold up the other entries of their queue; the
//! kernel only accepts a commit on the ring that registered the entry, and
//! the ring is single-issuer, so a pool thread hands the finished entry
//! back to its queue thread (a list and an eventfd the queue's ring
//! watches), which commits it. See [`queue`].
//!
//! Falling back: the rings and sockets are made before the INIT handshake,
//! and FUSE_OVER_IO_URING is only asked for if they could be; a kernel
//! whose registration fails clears the connection's io_uring flag itself
//! and the requests flow through `/dev/fuse` as before. If the queues
//! cannot start after the kernel granted the flag, one deliberately
//! invalid registration makes the kernel fall back the same way.

use crate::session::Negotiated;
use crate::Backend;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use log::{info, warn};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::thread::JoinHandle;

mod queue;

/// The module parameter that allows FUSE over io_uring: write `Y` to it
/// (as root) before mounting for `transport=auto` to use io_uring.
pub const ENABLE_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Which transport carries the kernel's requests to the daemon
/// ([`crate::MountConfig::transport`], `-o transport=`): leave it at
/// `Auto`; `Dev` or `Uring` pin one, to compare them or to work around a
/// kernel's bug in the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// read(2)/write(2) on `/dev/fuse`, one descriptor per worker.
    Dev,
    /// FUSE over io_uring, falling back to `/dev/fuse` when
    /// the kernel lacks it or it is not enabled.
    Uring,
    /// io_uring when the kernel offers it now (the module parameter is
    /// on), else `/dev/fuse`, without a warning either way. The default:
    /// io_uring measured at least as fast as `/dev/fuse` in every
    /// workload of docs/BENCHMARKS.md.
    #[default]
    Auto,
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "dev" => Ok(Transport::Dev),
            "uring" | "io_uring" => Ok(Transport::Uring),
            "auto" => Ok(Transport::Auto),
            v => Err(format!("transport={v}: expected dev, uring or auto")),
        }
    }
}

/// Why FUSE over io_uring cannot be used on this machine now, if it
/// cannot: what a front end shows when the user asked for
/// `transport=uring`, or tests check before running on that transport.
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

// The ring protocol (include/uapi/linux/fuse.h).
const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// struct fuse_uring_req_header: in/out header (128), op header (128),
/// struct fuse_uring_ent_in_out (32).
const HEADER_LEN: usize = 288;
/// Where the op header starts in the header buffer.
const OP_IN: usize = 128;
/// `fuse_uring_ent_in_out.payload_sz`.
const ENT_PAYLOAD_SZ: usize = 256 + 16;
/// Entries per queue: requests of one CPU in flight at once. The kernel
/// sets no depth (dev_uring.c takes as many entries as are registered,
/// up to FUSE_URING_MAX_QUEUE_DEPTH) and queues a request on its CPU's
/// queue, where it waits while every entry is busy; background requests
/// (readahead, writeback, async direct I/O: up to max_background for the
/// connection) can all land on one queue, and entries lent to the pool
/// (an fsync) serve nothing else meanwhile. So: the queue's share of
/// max_background plus one entry per pool thread (`pool`), at least 8 (a
/// CPU's synchronous callers) and at most 64. Payload buffers are
/// allocated zeroed (untouched pages cost no memory) and only large
/// requests touch more than their first pages.
fn entries_per_queue(queues: usize, pool: usize) -> usize {
    let background = usize::from(crate::adapter::MAX_BACKGROUND);
    (background.div_ceil(queues.max(1)) + pool).clamp(8, 64)
}
/// Threads serving the slow requests of every queue, unless `threads=N`
/// says otherwise.
pub(crate) const POOL_THREADS: usize = 2;

/// The rings, made before the handshake.
pub(crate) struct Prepared {
    rings: Vec<IoUring<squeue::Entry128>>,
    entries: usize,
    /// Threads of the slow-request pool.
    pool: usize,
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

/// Makes the rings, before INIT asks for the transport, for queues
/// sharing a pool of `pool` threads.
pub(crate) fn prepare(pool: usize) -> io::Result<Prepared> {
    let n = possible_cpus();
    let pool = pool.max(1);
    let entries = entries_per_queue(n, pool);
    let mut rings = Vec::with_capacity(n);
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
                .build(2 * entries as u32 + 2)?,
        );
    }
    Ok(Prepared { rings, entries, pool })
}

/// Submits what `ring` has queued and waits for `want` completions,
/// retrying when a signal ends the wait. Stopping and continuing the
/// daemon (SIGSTOP/SIGCONT, Ctrl-Z, `strace -p` or a debugger attaching)
/// makes io_uring_enter return EINTR although nothing went wrong; passed
/// up, it ended the queue and with it the mount (CONCURRENCY.md rule 9).
/// The retry submits whatever the interrupted call left in the
/// submission queue: the crate counts the entries still queued from the
/// ring's head, which the kernel advances as it takes them.
fn submit_and_wait<S: squeue::EntryMarker, C: cqueue::EntryMarker>(
    ring: &IoUring<S, C>,
    want: usize,
) -> io::Result<usize> {
    loop {
        match ring.submit_and_wait(want) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
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
    fn new(payload_len: usize) -> Ent {
        let mut header = Box::new([0u8; HEADER_LEN]);
        let mut payload = vec![0u8; payload_len].into_boxed_slice();
        let iov = Box::new([
            libc::iovec { iov_base: header.as_mut_ptr().cast(), iov_len: HEADER_LEN },
            libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: payload_len },
        ]);
        Ent { header, payload, iov }
    }
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

/// Starts the queue threads and the pool, after the kernel granted
/// FUSE_OVER_IO_URING. On an error the kernel is told to fall back to
/// `/dev/fuse` (see the module documentation).
pub(crate) fn start<F: Backend>(
    prepared: Prepared,
    dev: &OwnedFd,
    adapter: Arc<F>,
    n: Negotiated,
    mountpoint: &std::path::Path,
) -> io::Result<Running> {
    // Found now: once requests flow, a stat of the mount point would be
    // one of them.
    let conn = connection_of(mountpoint);
    let r = (|| -> io::Result<Running> {
        let mut running = Running::default();
        let threads = prepared.pool;
        let pool = queue::Pool::start(adapter.clone(), n, threads, &mut running.threads)?;
        let count = prepared.rings.len();
        let entries = prepared.entries;
        for (qid, ring) in prepared.rings.into_iter().enumerate() {
            let dev = dev.try_clone()?;
            let q = queue::Queue::new(ring, entries, dev, qid as u16, adapter.clone(), n, pool.clone())?;
            let conn = conn.clone();
            running.threads.push(std::thread::Builder::new().name(format!("uring-q{qid}")).spawn(move || {
                let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| q.serve()));
                let failed = match served {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(_) => Some("panicked".to_string()),
                };
                if let Some(e) = failed {
                    // The kernel would go on queueing this CPU's requests
                    // on entries nobody serves: end the connection instead
                    // (the mount then answers ENOTCONN until unmounted).
                    log::error!("io_uring queue {qid}: {e}; aborting the connection");
                    abort(conn.as_deref());
                }
            })?);
        }
        info!("transport: io_uring, {count} queues of {entries} entries, {threads} threads for slow requests");
        Ok(running)
    })();
    if r.is_err() {
        refuse(dev);
    }
    r
}

/// The abort file of the FUSE connection of the mount at `mountpoint`
/// (/sys/fs/fuse/connections/MINOR/abort, MINOR being the mount's device
/// minor).
fn connection_of(mountpoint: &std::path::Path) -> Option<String> {
    let (_, minor) = crate::mountinfo::device_of(mountpoint)?;
    Some(format!("/sys/fs/fuse/connections/{minor}/abort"))
}

/// Aborts the connection through its control file, if known. The control
/// files live in the fusectl filesystem, which a system may not have
/// mounted: as root it is mounted then (as systemd does at boot). If the
/// connection still cannot be aborted, the daemon exits: its descriptors
/// are the connection's last references, so the kernel ends it and the
/// mount answers ENOTCONN. Left alone, the requests queued for the failed
/// queue would wait for ever (callers in D state); what was committed is
/// in the journal, as after a crash.
fn abort(control: Option<&str>) {
    let Some(p) = control else {
        log::error!("the FUSE connection's control file is unknown: exiting to end the connection");
        std::process::exit(1);
    };
    let mut r = std::fs::write(p, "1");
    if matches!(&r, Err(e) if e.kind() == io::ErrorKind::NotFound) && mount_fusectl() {
        r = std::fs::write(p, "1");
    }
    if let Err(e) = r {
        log::error!("aborting the FUSE connection ({p}): {e}; exiting to end the connection");
        std::process::exit(1);
    }
}

/// Mounts fusectl at /sys/fs/fuse/connections (root only); true if it
/// is mounted now.
fn mount_fusectl() -> bool {
    let (src, target, fstype) = (c"fusectl", c"/sys/fs/fuse/connections", c"fusectl");
    // SAFETY: the three strings are NUL-terminated literals that outlive
    // the call, and a null data pointer is allowed.
    let rc = unsafe { libc::mount(src.as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, std::ptr::null()) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EBUSY)
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
    // until the command completed (we wait for it below, through signals).
    if unsafe { ring.submission().push(&e) }.is_ok() {
        if let Err(e) = submit_and_wait(&ring, 1) {
            warn!("io_uring: refusing the ring: {e}");
        }
    }
    warn!("io_uring transport could not start its queues; the kernel falls back to /dev/fuse");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_points_connection_is_found_in_mountinfo() {
        let root = connection_of(std::path::Path::new("/")).expect("/ is a mount point");
        assert!(root.starts_with("/sys/fs/fuse/connections/") && root.ends_with("/abort"), "{root}");
        assert_eq!(connection_of(std::path::Path::new("/no/such/mount/point")), None);
    }

    #[test]
    fn transport_names_parse() {
        assert_eq!("dev".parse::<Transport>(), Ok(Transport::Dev));
        assert_eq!("io_uring".parse::<Transport>(), Ok(Transport::Uring));
        assert_eq!("auto".parse::<Transport>(), Ok(Transport::Auto));
        assert!("tcp".parse::<Transport>().is_err());
    }
}
