//! One io_uring queue: its entries registered with the kernel, each
//! request decoded from the entry's buffers, served by the dispatcher and
//! committed with the fetch of the next one; and the pool that serves the
//! slow requests of every queue without holding up the others.

use super::{fuse_cmd, submit_and_wait, Ent, CMD_COMMIT_AND_FETCH, CMD_REGISTER, ENT_PAYLOAD_SZ, HEADER_LEN, OP_IN};
use crate::dispatch::{check, dispatch, guarded, header_for};
use crate::notify::PageInval;
use crate::proto::abi::{self, op};
use crate::proto::decode::{decode_split, Decoded, InHeader, Operation, Reader};
use crate::proto::encode;
use crate::proto::types::{FileHandle, INodeNo, OpenFlags};
use crate::reply::{Out, FIXED_REPLY_MAX};
use crate::session::Negotiated;
use crate::Backend;
use io_uring::{opcode, squeue, types, IoUring};
use log::{debug, info, warn};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// user_data of the eventfd read; entries use their index.
const EVENT_TAG: u64 = u64::MAX;
/// Request payloads up to this size are copied aside before the reply is
/// written over them; larger ones (writes) have small replies, which are
/// built aside instead.
const SMALL_PAYLOAD: usize = 64 << 10;

/// Buffers a serving thread reuses for every request.
struct Scratch {
    input: Vec<u8>,
    output: Vec<u8>,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch { input: vec![0u8; SMALL_PAYLOAD], output: vec![0u8; SMALL_PAYLOAD + FIXED_REPLY_MAX] }
    }
}

/// True for requests that may wait on the device for long (they go to
/// the pool; see [`crate::slow`]).
fn is_slow(opcode: u32, payload_sz: usize, header: &[u8]) -> bool {
    let read = if opcode == op::READ { read_size(header) } else { 0 };
    // `fuse_write_in.flags`: an O_SYNC/O_DSYNC write commits before its reply.
    let sync = opcode == op::WRITE && crate::slow::sync_write(u32_at(header, OP_IN + 32) as i32);
    sync || crate::slow::may_wait(opcode, payload_sz, read)
}

/// `fuse_read_in.size` of a READ in an entry's header buffer.
fn read_size(header: &[u8]) -> usize {
    u32_at(header, OP_IN + 16) as usize
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).and_then(|s| s.try_into().ok()).map_or(0, u32::from_ne_bytes)
}

/// Serves the request in an entry's buffers and leaves the reply there:
/// the out header in the header buffer, the reply payload and its size.
/// `Some`: the reply may be committed only once the kernel dropped these
/// pages (see [`crate::notify::Notifier::inval_then`]).
fn serve_entry<F: Backend>(
    fs: &F,
    n: Negotiated,
    header: &mut [u8; HEADER_LEN],
    payload: &mut [u8],
    s: &mut Scratch,
) -> Option<PageInval> {
    let h = match InHeader::parse(&header[..abi::IN_HEADER_LEN]) {
        Ok(h) => h,
        Err(_) => return None,
    };
    let mut inval = None;
    let payload_sz = u32_at(&header[..], ENT_PAYLOAD_SZ) as usize;
    let op_len = (h.len as usize)
        .checked_sub(abi::IN_HEADER_LEN + payload_sz)
        .filter(|&l| l <= OP_IN && payload_sz <= payload.len());
    let (error, len) = match op_len {
        None => {
            warn!("io_uring: malformed request (len {}, payload {payload_sz}); answered EIO", h.len);
            (-libc::EIO, 0)
        }
        Some(op_len) => {
            let op_in = &header[OP_IN..OP_IN + op_len];
            if payload_sz <= SMALL_PAYLOAD {
                // Decode from a copy, reply straight into the payload buffer.
                s.input[..payload_sz].copy_from_slice(&payload[..payload_sz]);
                let r = Reader::split(op_in, &s.input[..payload_sz]);
                let mut out = Out::new(payload);
                serve(fs, h, r, n, &mut out);
                inval = out.inval_first();
                header_parts(&out)
            } else {
                // A large request (a write): its small reply is built aside.
                let r = Reader::split(op_in, &payload[..payload_sz]);
                let mut out = Out::new(&mut s.output);
                serve(fs, h, r, n, &mut out);
                inval = out.inval_first();
                let (e, l) = header_parts(&out);
                let l = l.min(payload.len());
                payload[..l].copy_from_slice(&out.payload()[..l]);
                (e, l)
            }
        }
    };
    header[..abi::OUT_HEADER_LEN].copy_from_slice(&encode::out_header(abi::OUT_HEADER_LEN + len, error, h.unique));
    header[ENT_PAYLOAD_SZ..ENT_PAYLOAD_SZ + 4].copy_from_slice(&(len as u32).to_ne_bytes());
    inval
}

/// Serves a small READ from the page cache into the entry's payload
/// buffer, as [`serve_entry`] would; false (nothing written) when it
/// would have to wait on the device, for the pool to serve instead.
fn read_fast<F: Backend>(fs: &F, n: Negotiated, header: &mut [u8; HEADER_LEN], payload: &mut [u8]) -> bool {
    let Ok(h) = InHeader::parse(&header[..abi::IN_HEADER_LEN]) else { return false };
    let op_len = (h.len as usize).saturating_sub(abi::IN_HEADER_LEN).min(OP_IN);
    let Ok(op) = decode_split(h.opcode, Reader::split(&header[OP_IN..OP_IN + op_len], &[]), n.decode) else {
        return false;
    };
    let d = Decoded { header: h, op };
    let Operation::Read { fh, offset, size, flags, .. } = d.op else { return false };
    if check(&d, n.owner).is_err() {
        // Refusals are the dispatcher's to answer.
        return false;
    }
    let want = (size as usize).min(payload.len());
    let read =
        || fs.read_fast(INodeNo(h.nodeid), FileHandle(fh), offset, OpenFlags(flags as i32), &mut payload[..want]);
    // This calls the adapter without the dispatcher: the same boundary
    // catches a panic.
    let (error, len) = match guarded(fs, &d, read) {
        Some(None) => return false,
        Some(Some(Ok(len))) => (0, len.min(want)),
        Some(Some(Err(e))) => (-e.code(), 0),
        None => (-libc::EIO, 0),
    };
    if log::log_enabled!(log::Level::Debug) {
        debug!("FUSE({:3}) ino {:#018x} {}", h.unique, h.nodeid, d.op);
    }
    header[..abi::OUT_HEADER_LEN].copy_from_slice(&encode::out_header(abi::OUT_HEADER_LEN + len, error, h.unique));
    header[ENT_PAYLOAD_SZ..ENT_PAYLOAD_SZ + 4].copy_from_slice(&(len as u32).to_ne_bytes());
    true
}

fn header_parts(out: &Out<'_>) -> (i32, usize) {
    let (h, len) = header_for(out, 0);
    (i32::from_ne_bytes([h[4], h[5], h[6], h[7]]), len)
}

fn serve<F: Backend>(fs: &F, h: InHeader, r: Reader<'_>, n: Negotiated, out: &mut Out<'_>) {
    match decode_split(h.opcode, r, n.decode) {
        Ok(op) if !op.no_reply() => dispatch(fs, &Decoded { header: h, op }, n.owner, out),
        // FORGET and INTERRUPT come through /dev/fuse, never a ring.
        Ok(_) => crate::reply::ReplyEmpty::new(out).error(crate::proto::types::Errno::ENOSYS),
        Err(e) => {
            warn!("io_uring: malformed request (opcode {}): answered {e:?}", h.opcode);
            crate::reply::ReplyEmpty::new(out).error(e);
        }
    }
}

/// Where a pool thread hands a finished entry back to its queue, and the
/// count of the queue's entries out on loan.
struct Back {
    loans: Mutex<Loans>,
    /// Signalled at every hand-back, for [`Back::wait_all_back`].
    returned: Condvar,
    /// Wakes the queue's ring (it keeps a read of it submitted).
    efd: OwnedFd,
}

#[derive(Default)]
struct Loans {
    /// Entries handed back and not yet taken by the queue thread.
    done: Vec<usize>,
    /// Entries lent and not yet taken back ([`Loans::done`] included).
    out: usize,
}

impl Back {
    fn new() -> io::Result<Back> {
        // SAFETY: eventfd returns a new descriptor or -1.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `efd` was just created and is ours.
        let efd = unsafe { OwnedFd::from_raw_fd(efd) };
        Ok(Back { loans: Mutex::new(Loans::default()), returned: Condvar::new(), efd })
    }

    fn loans(&self) -> std::sync::MutexGuard<'_, Loans> {
        self.loans.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts an entry about to be lent, before the pool can hand it back.
    fn lend(&self) {
        self.loans().out += 1;
    }

    /// The queue thread takes back a loan the pool never received.
    fn unlend(&self) {
        self.loans().out -= 1;
    }

    /// The pool is done with entry `idx`: from here on it touches the
    /// entry's buffers no more.
    fn hand_back(&self, idx: usize) {
        self.loans().done.push(idx);
        self.returned.notify_all();
        let one = 1u64.to_ne_bytes();
        loop {
            // SAFETY: writes 8 bytes from a live local to an open eventfd.
            if unsafe { libc::write(self.efd.as_raw_fd(), one.as_ptr().cast(), 8) } == 8 {
                return;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                warn!("io_uring: waking queue: {e}");
                return;
            }
        }
    }

    /// The entries handed back since the last call, for the queue thread
    /// to commit; their loans end.
    fn take_back(&self) -> Vec<usize> {
        let mut l = self.loans();
        let done = std::mem::take(&mut l.done);
        l.out -= done.len();
        done
    }

    /// Blocks until every lent entry has been handed back.
    fn wait_all_back(&self) {
        let mut l = self.loans();
        while l.out > l.done.len() {
            l = self.returned.wait(l).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// A queue's entries. Their buffers are freed only after every entry
/// lent to the pool has come back: the drop waits for that, so no way out
/// of [`Queue::serve`] (a return, an error's `?`, a panic) frees them
/// while a pool thread may still write through a [`Lent`].
struct Entries {
    ents: Vec<Ent>,
    back: Arc<Back>,
}

impl Drop for Entries {
    fn drop(&mut self) {
        // The fields (the buffers) are dropped after this returns.
        self.back.wait_all_back();
    }
}

/// An entry's buffers, lent to a pool thread.
struct Lent {
    header: *mut [u8; HEADER_LEN],
    payload: *mut u8,
    payload_len: usize,
}

// SAFETY: a lent entry is touched by the holder of its `Job` alone until
// the job is dropped: the queue thread neither reads nor commits it
// meanwhile (it commits an entry only once `take_back` returned it).
// `Job`'s drop hands the entry back on every path (served, panicked, or
// discarded unserved with the channel). The buffers outlive the loan:
// they are owned by an `Entries`, whose drop blocks until every lent
// entry has been handed back before the buffers go, on every way out of
// `Queue::serve` (returns, `?` errors and unwinding alike). So no pool
// thread writes through these pointers after the buffers are freed.
unsafe impl Send for Lent {}

/// A slow request for the pool: the entry's buffers on loan.
struct Job {
    ent: Lent,
    idx: usize,
    back: Arc<Back>,
    /// The reply is in the entry's buffers.
    answered: bool,
    /// The queue thread took the loan back (the pool is gone).
    cancelled: bool,
}

impl Job {
    /// The queue thread serves the entry itself: the loan ends unused.
    fn cancel(mut self) {
        self.back.unlend();
        self.cancelled = true;
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if self.cancelled {
            return;
        }
        if !self.answered {
            // Discarded unserved (the pool went away) or its server
            // panicked outside the dispatcher: the entry is committed
            // with EIO rather than with the request's own bytes.
            // SAFETY: the loan is still ours (see `Lent`).
            let header = unsafe { &mut *self.ent.header };
            let unique = u64::from_ne_bytes(header[8..16].try_into().unwrap_or([0; 8]));
            header[..abi::OUT_HEADER_LEN].copy_from_slice(&encode::out_header(abi::OUT_HEADER_LEN, -libc::EIO, unique));
            header[ENT_PAYLOAD_SZ..ENT_PAYLOAD_SZ + 4].copy_from_slice(&0u32.to_ne_bytes());
        }
        self.back.hand_back(self.idx);
    }
}

/// The threads that serve slow requests of every queue.
#[derive(Clone)]
pub(super) struct Pool {
    tx: mpsc::Sender<Job>,
}

impl Pool {
    pub(super) fn start<F: Backend>(
        fs: Arc<F>,
        n: Negotiated,
        threads: usize,
        handles: &mut Vec<JoinHandle<()>>,
    ) -> io::Result<Pool> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let (fs, rx) = (fs.clone(), rx.clone());
            handles.push(std::thread::Builder::new().name(format!("uring-slow{i}")).spawn(move || {
                let mut s = Scratch::new();
                loop {
                    let job = match rx.lock() {
                        Ok(r) => r.recv(),
                        Err(_) => return,
                    };
                    // Every queue (and so every sender) is gone.
                    let Ok(mut job) = job else { return };
                    // SAFETY: see `Lent`: the buffers are ours alone now
                    // and live until the job is dropped below.
                    let (header, payload) = unsafe {
                        (&mut *job.ent.header, std::slice::from_raw_parts_mut(job.ent.payload, job.ent.payload_len))
                    };
                    // The dispatcher catches a panic of the request it
                    // serves; one elsewhere in serve_entry leaves the job
                    // unanswered, and its drop answers EIO. Either way the
                    // thread goes on serving.
                    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        serve_entry(&*fs, n, header, payload, &mut s)
                    }));
                    job.answered = served.is_ok();
                    if served.is_err() {
                        s = Scratch::new();
                    }
                    if let Ok(Some(inval)) = served {
                        // The entry goes back once the pages are dropped,
                        // and this thread serves on meanwhile.
                        fs.after_inval(inval, Box::new(move || drop(job)));
                        continue;
                    }
                    // Hands the entry back.
                    drop(job);
                }
            })?);
        }
        Ok(Pool { tx })
    }
}

/// One queue, ready to serve.
pub(super) struct Queue<F> {
    ring: IoUring<squeue::Entry128>,
    entries: usize,
    dev: OwnedFd,
    qid: u16,
    fs: Arc<F>,
    n: Negotiated,
    pool: Pool,
    back: Arc<Back>,
}

impl<F: Backend> Queue<F> {
    pub(super) fn new(
        ring: IoUring<squeue::Entry128>,
        entries: usize,
        dev: OwnedFd,
        qid: u16,
        fs: Arc<F>,
        n: Negotiated,
        pool: Pool,
    ) -> io::Result<Queue<F>> {
        let back = Arc::new(Back::new()?);
        Ok(Queue { ring, entries, dev, qid, fs, n, pool, back })
    }

    /// Registers the entries and serves until the kernel tears the ring
    /// down (unmount, abort) or refuses the registration.
    pub(super) fn serve(self) -> io::Result<()> {
        // The buffers (`owned`, `efd_buf`) are declared before the ring,
        // so that the ring (and with it every command still using them)
        // goes first.
        let payload_len = self.n.max_payload.max(crate::MAX_WRITE_LIMIT as usize);
        let Queue { ring, entries, dev, qid, fs, n, pool, back } = self;
        let mut owned = Entries { ents: (0..entries).map(|_| Ent::new(payload_len)).collect(), back: back.clone() };
        let ents = &mut owned.ents;
        let mut efd_buf = Box::new([0u8; 8]);
        let mut scratch = Scratch::new();
        let mut done: Vec<(u64, i32)> = Vec::with_capacity(2 * ents.len() + 2);
        // Moved into a binding declared after the buffers: dropped first.
        let mut ring = ring;
        let dev_fd = dev.as_raw_fd();
        ring.submitter().register_enable_rings()?;
        pin_to_cpu(qid);
        let push = |ring: &mut IoUring<squeue::Entry128>, e: &squeue::Entry128| -> io::Result<()> {
            // SAFETY: every buffer an entry names (the entries' boxed
            // buffers and iovecs, `efd_buf`) outlives the ring (see above).
            unsafe { ring.submission().push(e) }.map_err(|_| io::Error::other("submission queue full"))
        };
        for (i, e) in ents.iter().enumerate() {
            push(&mut ring, &fuse_cmd(dev_fd, CMD_REGISTER, 0, qid, Some(e.iov.as_ptr())).user_data(i as u64))?;
        }
        let efd_read = |buf: &mut [u8; 8]| {
            opcode::Read::new(types::Fd(back.efd.as_raw_fd()), buf.as_mut_ptr(), 8).build().user_data(EVENT_TAG).into()
        };
        push(&mut ring, &efd_read(&mut efd_buf))?;
        let commit = |ring: &mut IoUring<squeue::Entry128>, ents: &[Ent], i: usize| -> io::Result<()> {
            let unique = u64::from_ne_bytes(ents[i].header[8..16].try_into().unwrap_or([0; 8]));
            push(ring, &fuse_cmd(dev_fd, CMD_COMMIT_AND_FETCH, unique, qid, None).user_data(i as u64))
        };
        let mut live = entries;
        let mut registered = false;
        loop {
            submit_and_wait(&ring, 1)?;
            done.clear();
            done.extend(ring.completion().map(|c| (c.user_data(), c.result())));
            for &(tag, res) in &done {
                if tag == EVENT_TAG {
                    for i in back.take_back() {
                        commit(&mut ring, ents, i)?;
                    }
                    if res >= 0 || res == -libc::EINTR {
                        push(&mut ring, &efd_read(&mut efd_buf))?;
                    }
                    continue;
                }
                let i = tag as usize;
                if res < 0 {
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
                let Some(e) = ents.get_mut(i) else { continue };
                let opcode = u32_at(&e.header[..], 4);
                let payload_sz = u32_at(&e.header[..], ENT_PAYLOAD_SZ) as usize;
                let slow = is_slow(opcode, payload_sz, &e.header[..])
                    || (opcode == op::READ && !read_fast(&*fs, n, &mut e.header, &mut e.payload));
                if !slow && opcode == op::READ {
                    commit(&mut ring, ents, i)?;
                    continue;
                }
                if slow {
                    let ent =
                        Lent { header: &mut *e.header, payload: e.payload.as_mut_ptr(), payload_len: e.payload.len() };
                    back.lend();
                    let job = Job { ent, idx: i, back: back.clone(), answered: false, cancelled: false };
                    match pool.tx.send(job) {
                        Ok(()) => continue,
                        // No pool thread left: served here instead.
                        Err(mpsc::SendError(job)) => job.cancel(),
                    }
                }
                if let Some(inval) = serve_entry(&*fs, n, &mut e.header, &mut e.payload, &mut scratch) {
                    // Answered, not to be committed before the pages are
                    // dropped: lent (as to the pool) to the invalidating
                    // thread, which hands it back; this thread serves on.
                    let ent =
                        Lent { header: &mut *e.header, payload: e.payload.as_mut_ptr(), payload_len: e.payload.len() };
                    back.lend();
                    let job = Job { ent, idx: i, back: back.clone(), answered: true, cancelled: false };
                    fs.after_inval(inval, Box::new(move || drop(job)));
                    continue;
                }
                commit(&mut ring, ents, i)?;
            }
        }
    }
}

/// The kernel queues a request on the queue of the CPU its caller runs
/// on: serving it from that CPU keeps the wake-up local.
fn pin_to_cpu(qid: u16) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes
    // within it (qid is below the number of possible CPUs, checked by the
    // macro against the set's size); sched_setaffinity(0) applies to this
    // thread and only reads the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(usize::from(qid), &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            debug!("io_uring queue {qid}: cannot pin to CPU {qid}: {}", io::Error::last_os_error());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Dropping a queue's entries, as every way out of `Queue::serve`
    /// does (an error's `?` included), waits until the pool has handed
    /// back every entry it holds: no loan is out when the buffers go.
    #[test]
    fn entries_are_freed_only_after_every_loan_came_back() {
        let back = Arc::new(Back::new().expect("eventfd"));
        let mut owned = Entries { ents: vec![Ent::new(4096)], back: back.clone() };
        let e = &mut owned.ents[0];
        let ent = Lent { header: &mut *e.header, payload: e.payload.as_mut_ptr(), payload_len: e.payload.len() };
        back.lend();
        // Answered: its drop writes nothing through the loan, which would
        // be a use after free if the wait were missing.
        let job = Job { ent, idx: 0, back: back.clone(), answered: true, cancelled: false };
        let (go, wait_go) = mpsc::channel::<()>();
        let pool = std::thread::spawn(move || {
            wait_go.recv().expect("go");
            drop(job);
        });
        let release = std::thread::spawn(move || {
            // Gives a drop that does not wait the time to free the
            // buffers with the loan still out (which the assertion below
            // catches); the drop that waits passes however long this takes.
            std::thread::sleep(Duration::from_millis(50));
            go.send(()).expect("go");
        });
        drop(owned);
        let outstanding = {
            let l = back.loans();
            l.out - l.done.len()
        };
        assert_eq!(outstanding, 0, "the buffers were freed while lent to the pool");
        release.join().expect("release");
        pool.join().expect("pool");
        assert_eq!(back.take_back(), vec![0]);
    }
}
