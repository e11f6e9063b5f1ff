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
use crate::reply::{Out, FIXED_REPLY_MAX};
use crate::session::Negotiated;
use crate::Backend;
use io_uring::{opcode, squeue, types, IoUring};
use log::{debug, info, warn};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
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

/// Buffered READs up to this size that miss the page cache are served
/// on the queue thread: one small device read, as the small direct READs
/// the queue serves already (see `Uext4Fuse::read_fast`). Lent to the pool,
/// each cost the queue thread a wake-up of a pool thread and a wake-up by
/// the eventfd, and the pool thread two context switches: 4 KiB random
/// reads of an uncached file (bench/handoffs.sh cold-rand) went from 3.3
/// daemon context switches and 7 system calls per READ to 1 and 3.2, and
/// from 45-72k to 645-695k reads in 3 s (an image in /dev/shm). Larger
/// misses (readahead, 128 KiB) may fill many folios and still go to the
/// pool. A small miss may fill a larger folio when the engine sees a
/// sequential reader (its readahead order), which the kernel's own
/// readahead makes rare for small READs: it sends large ones then.
const INLINE_MISS: usize = 16 << 10;

/// Whether a buffered READ of `size` bytes that missed the page cache is
/// lent to the pool rather than served on the queue thread.
fn miss_goes_to_pool(size: usize) -> bool {
    size > INLINE_MISS
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
    let Ok(op) = decode_split(h.opcode, h.nodeid, Reader::split(&header[OP_IN..OP_IN + op_len], &[]), n.decode) else {
        return false;
    };
    let d = Decoded { header: h, op };
    let Operation::Read(ref r) = d.op else { return false };
    if check(&d, n.owner).is_err() {
        // Refusals are the dispatcher's to answer.
        return false;
    }
    let want = (r.size as usize).min(payload.len());
    let read = || fs.read_fast(r, &mut payload[..want]);
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
    match decode_split(h.opcode, h.nodeid, r, n.decode) {
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
    /// Signalled at a hand-back while [`Back::wait_all_back`] waits.
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
    /// [`Back::wait_all_back`] waits on `returned`: only then is it
    /// signalled (a notification costs a futex call even with nobody
    /// waiting).
    waiting: bool,
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

    /// The pool is done with entry `idx`: from here on it touches the
    /// entry's buffers no more. Only the first entry handed back since the
    /// queue thread last took them writes the eventfd: the queue thread
    /// takes every entry handed back when that write wakes it (under the
    /// same lock), so a later one finds the wake-up still pending and
    /// rides on it.
    fn hand_back(&self, idx: usize) {
        let wake = {
            let mut l = self.loans();
            let first = l.done.is_empty();
            l.done.push(idx);
            if l.waiting {
                self.returned.notify_all();
            }
            first
        };
        if !wake {
            return;
        }
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
            l.waiting = true;
            l = self.returned.wait(l).unwrap_or_else(|p| p.into_inner());
        }
        l.waiting = false;
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
}

impl Drop for Job {
    fn drop(&mut self) {
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

/// The jobs waiting for a pool thread, shared by the pool's threads and
/// every queue. A job is taken by one idle thread, which is woken only if
/// it sleeps: a thread that is busy (or about to look) takes the job when
/// it next looks, so a job costs one wake-up at most. (A channel whose
/// receiver the threads shared behind a mutex cost two: the thread that
/// got the job released the mutex the other one slept on, which woke to
/// sleep again in the channel.)
struct Jobs<T> {
    state: Mutex<JobState<T>>,
    /// Signalled when a job arrives while a thread is idle, and at close.
    ready: Condvar,
}

struct JobState<T> {
    jobs: VecDeque<T>,
    /// Threads waiting on `ready`.
    idle: usize,
    /// Handles that may still send (see [`Pool`]'s clone and drop).
    senders: usize,
}

impl<T> Jobs<T> {
    fn new() -> Jobs<T> {
        Jobs { state: Mutex::new(JobState { jobs: VecDeque::new(), idle: 0, senders: 1 }), ready: Condvar::new() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, JobState<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `job`, waking one idle thread if there is one. The wake-up
    /// comes after the lock is released: the woken thread would otherwise
    /// find it held and sleep again on it. No wake-up is lost: a thread
    /// counted idle is already waiting (it counts itself and waits under
    /// the lock, which the wait releases).
    fn push(&self, job: T) {
        let wake = {
            let mut g = self.lock();
            g.jobs.push_back(job);
            g.idle > 0
        };
        if wake {
            self.ready.notify_one();
        }
    }

    /// The next job, waiting for one; `None` once every sender is gone and
    /// no job is left.
    fn pop(&self) -> Option<T> {
        let mut g = self.lock();
        loop {
            if let Some(j) = g.jobs.pop_front() {
                return Some(j);
            }
            if g.senders == 0 {
                return None;
            }
            g.idle += 1;
            g = self.ready.wait(g).unwrap_or_else(|p| p.into_inner());
            g.idle -= 1;
        }
    }

    fn add_sender(&self) {
        self.lock().senders += 1;
    }

    /// A sender is gone; the last one wakes every thread to end.
    fn drop_sender(&self) {
        let mut g = self.lock();
        g.senders -= 1;
        if g.senders == 0 {
            self.ready.notify_all();
        }
    }
}

/// The threads that serve slow requests of every queue: a handle to send
/// them jobs. They end when the last handle is dropped, after serving the
/// jobs already sent.
pub(super) struct Pool {
    jobs: Arc<Jobs<Job>>,
}

impl Clone for Pool {
    fn clone(&self) -> Pool {
        self.jobs.add_sender();
        Pool { jobs: self.jobs.clone() }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.jobs.drop_sender();
    }
}

impl Pool {
    pub(super) fn start<F: Backend>(
        fs: Arc<F>,
        n: Negotiated,
        threads: usize,
        handles: &mut Vec<JoinHandle<()>>,
    ) -> io::Result<Pool> {
        let pool = Pool { jobs: Arc::new(Jobs::new()) };
        // At least one: a queue waits for every entry it lent to come back.
        for i in 0..threads.max(1) {
            let (fs, jobs) = (fs.clone(), pool.jobs.clone());
            handles.push(std::thread::Builder::new().name(format!("uring-slow{i}")).spawn(move || {
                let mut s = Scratch::new();
                // None: every queue (and so every sender) is gone.
                while let Some(mut job) = jobs.pop() {
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
        Ok(pool)
    }

    /// Hands `job` to a pool thread.
    fn send(&self, job: Job) {
        self.jobs.push(job);
    }
}

/// What one queue thread did, logged when the queue ends (the hand-offs
/// `bench/handoffs.sh` counts per operation).
#[derive(Debug, Default)]
struct QueueCounts {
    /// Requests received on the queue's entries.
    requests: u64,
    /// Of them, lent to the pool.
    lent: u64,
    /// Completions of the eventfd read: the pool handing entries back.
    wakeups: u64,
    /// Calls of io_uring_enter that submitted and waited.
    enters: u64,
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
        let mut counts = QueueCounts::default();
        loop {
            submit_and_wait(&ring, 1)?;
            counts.enters += 1;
            done.clear();
            done.extend(ring.completion().map(|c| (c.user_data(), c.result())));
            for &(tag, res) in &done {
                if tag == EVENT_TAG {
                    counts.wakeups += 1;
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
                        // bench/handoffs.sh reads this line.
                        info!(
                            "io_uring queue {qid} ended: {} requests, {} to the pool, {} eventfd wake-ups, {} io_uring_enter calls",
                            counts.requests, counts.lent, counts.wakeups, counts.enters
                        );
                        return Ok(());
                    }
                    continue;
                }
                if !registered {
                    registered = true;
                    info!("io_uring queue {qid}: requests arrive through the ring");
                }
                let Some(e) = ents.get_mut(i) else { continue };
                counts.requests += 1;
                let opcode = u32_at(&e.header[..], 4);
                let payload_sz = u32_at(&e.header[..], ENT_PAYLOAD_SZ) as usize;
                let mut slow = is_slow(opcode, payload_sz, &e.header[..]);
                if !slow && opcode == op::READ {
                    if read_fast(&*fs, n, &mut e.header, &mut e.payload) {
                        commit(&mut ring, ents, i)?;
                        continue;
                    }
                    slow = miss_goes_to_pool(read_size(&e.header[..]));
                }
                if slow {
                    let ent =
                        Lent { header: &mut *e.header, payload: e.payload.as_mut_ptr(), payload_len: e.payload.len() };
                    back.lend();
                    counts.lent += 1;
                    pool.send(Job { ent, idx: i, back: back.clone(), answered: false });
                    continue;
                }
                if let Some(inval) = serve_entry(&*fs, n, &mut e.header, &mut e.payload, &mut scratch) {
                    // Answered, not to be committed before the pages are
                    // dropped: lent (as to the pool) to the invalidating
                    // thread, which hands it back; this thread serves on.
                    let ent =
                        Lent { header: &mut *e.header, payload: e.payload.as_mut_ptr(), payload_len: e.payload.len() };
                    back.lend();
                    let job = Job { ent, idx: i, back: back.clone(), answered: true };
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
    use std::sync::mpsc;
    use std::time::Duration;

    /// The eventfd's counter: how many times it was written since the
    /// last read (blocks while 0, so only called when it is not).
    fn efd_count(back: &Back) -> u64 {
        let mut b = [0u8; 8];
        // SAFETY: reads 8 bytes into a live local from an open eventfd.
        assert_eq!(unsafe { libc::read(back.efd.as_raw_fd(), b.as_mut_ptr().cast(), 8) }, 8);
        u64::from_ne_bytes(b)
    }

    /// Entries handed back while the queue thread has not yet taken the
    /// earlier ones ride on the earlier wake-up: one eventfd write for
    /// them all, every entry taken back; after the take, the next hand-back
    /// writes again (no wake-up is lost).
    #[test]
    fn hand_backs_before_the_take_share_one_wakeup() {
        let back = Back::new().expect("eventfd");
        for i in 0..3 {
            back.lend();
            back.hand_back(i);
        }
        assert_eq!(efd_count(&back), 1, "one wake-up for the entries the queue had not taken yet");
        assert_eq!(back.take_back(), vec![0, 1, 2]);
        back.lend();
        back.hand_back(7);
        assert_eq!(efd_count(&back), 1, "a hand-back after the take wakes the queue again");
        assert_eq!(back.take_back(), vec![7]);
        assert_eq!(back.loans().out, 0);
    }

    /// A small READ that misses the cache is served by the queue thread;
    /// a readahead-sized one still goes to the pool.
    #[test]
    fn small_read_misses_stay_on_the_queue() {
        assert!(!miss_goes_to_pool(4096) && !miss_goes_to_pool(INLINE_MISS));
        assert!(miss_goes_to_pool(INLINE_MISS + 1) && miss_goes_to_pool(128 << 10));
    }

    /// Two pool threads: a job that blocks keeps one of them, and the
    /// jobs sent after it are served by the other meanwhile (a slow
    /// request never holds up the pool's other requests while a thread is
    /// free). When the last sender goes, the threads serve what is left
    /// and end.
    #[test]
    fn a_blocked_job_leaves_the_next_ones_to_the_other_thread() {
        let jobs = Arc::new(Jobs::<Box<dyn FnOnce() + Send>>::new());
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let jobs = jobs.clone();
                std::thread::spawn(move || {
                    while let Some(j) = jobs.pop() {
                        j();
                    }
                })
            })
            .collect();
        let (release, blocked) = mpsc::channel::<()>();
        let (done, finished) = mpsc::channel::<u32>();
        let d = done.clone();
        jobs.push(Box::new(move || {
            blocked.recv().expect("release");
            d.send(0).expect("done");
        }));
        for k in 1..=20 {
            let d = done.clone();
            jobs.push(Box::new(move || d.send(k).expect("done")));
        }
        // All 20 are served while job 0 still blocks (a deadlock here,
        // not a timing: job 0 is released only after them).
        let mut got: Vec<u32> = (0..20).map(|_| finished.recv().expect("served")).collect();
        got.sort_unstable();
        assert_eq!(got, (1..=20).collect::<Vec<_>>());
        release.send(()).expect("release");
        assert_eq!(finished.recv().expect("served"), 0);
        // Sent before the last sender goes: still served.
        let d = done.clone();
        jobs.push(Box::new(move || d.send(99).expect("done")));
        jobs.drop_sender();
        for t in threads {
            t.join().expect("pool thread");
        }
        assert_eq!(finished.recv().expect("served"), 99);
    }

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
        let job = Job { ent, idx: 0, back: back.clone(), answered: true };
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
