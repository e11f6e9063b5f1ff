//! Notifications the daemon sends the kernel unasked, on the connection's
//! `/dev/fuse` descriptor (whatever transport carries the requests):
//! dropping cached attributes, pages or names.
//!
//! Dropping pages (FUSE_NOTIFY_INVAL_INODE with a range) waits in the
//! kernel for the lock of every cached page of the range
//! (invalidate_inode_pages2_range): a page being filled by a READ stays
//! locked until that READ is answered, a page under write-back until its
//! WRITE is, and a dirty page is written back (a WRITE) before it goes.
//! Such invalidations are therefore sent by one thread of their own that
//! serves no request, never by a thread that serves requests (see
//! [`Notifier::inval_then`] and docs/ARCHITECTURE.md, "Invalidations
//! before a reply").

use crate::proto::abi::{self, notify};
use crate::proto::encode;
use crate::proto::types::INodeNo;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, OnceLock};

/// A range of a file's pages the kernel must drop before a reply is sent
/// (FUSE_NOTIFY_INVAL_INODE: its attributes are dropped too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageInval {
    /// The node.
    pub ino: u64,
    /// First byte of the range.
    pub offset: i64,
    /// Length of the range in bytes (more than 0).
    pub len: i64,
}

/// What finishes a request once its invalidation is done: sends (or
/// commits) the reply that was built before.
pub(crate) type Done = Box<dyn FnOnce() + Send>;

/// Replies held back until their invalidation is done, at most this many
/// at once: more are answered at once and invalidated right after (see
/// [`Notifier::inval_then`] for why a bound is needed).
pub(crate) const HELD_REPLIES: usize = 4;

/// One invalidation for the invalidating thread, and the reply it holds
/// back (if any).
struct Task {
    inval: PageInval,
    done: Option<Done>,
    after: Option<Done>,
}

/// The invalidating thread's queue and the count of replies it holds.
#[derive(Debug, Default)]
struct Invalidator {
    tx: OnceLock<mpsc::Sender<Task>>,
    held: AtomicUsize,
}

/// Sends notifications on one connection.
#[derive(Debug, Clone)]
pub struct Notifier {
    dev: Arc<OwnedFd>,
    invalidator: Arc<Invalidator>,
}

impl Notifier {
    /// A notifier writing to `dev`.
    pub(crate) fn new(dev: Arc<OwnedFd>) -> Notifier {
        Notifier { dev, invalidator: Arc::new(Invalidator::default()) }
    }

    fn send(&self, code: i32, parts: &[&[u8]]) -> io::Result<()> {
        let len = abi::OUT_HEADER_LEN + parts.iter().map(|p| p.len()).sum::<usize>();
        let h = encode::out_header(len, code, 0);
        let mut all: [&[u8]; 4] = [&h, &[], &[], &[]];
        for (d, p) in all[1..].iter_mut().zip(parts) {
            *d = p;
        }
        crate::session::send(self.dev.as_raw_fd(), &all[..1 + parts.len().min(3)])
    }

    /// Drops the kernel's attributes of `ino` and its cached pages in
    /// `[offset, offset + len)` (`len` 0: to the end; `offset` negative:
    /// the attributes only, which never waits). With a range this may wait
    /// for READs and WRITEs the kernel has sent: never call it with one on
    /// a thread that serves requests (use [`Notifier::inval_then`]).
    pub fn inval_inode(&self, ino: INodeNo, offset: i64, len: i64) -> io::Result<()> {
        self.send(notify::INVAL_INODE, &[&encode::notify_inval_inode(ino.0, offset, len)])
    }

    /// Puts `data` into the kernel's page cache of `ino` at `offset`
    /// (FUSE_NOTIFY_STORE), as if a READ had returned it.
    pub fn store(&self, ino: INodeNo, offset: u64, data: &[u8]) -> io::Result<()> {
        let size = u32::try_from(data.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        self.send(notify::STORE, &[&encode::notify_store(ino.0, offset, size), data])
    }

    /// Drops `iv`'s pages, then runs `done` (which sends the reply of the
    /// request that asked for it), on the invalidating thread: the caller,
    /// a thread serving requests, goes on serving at once.
    ///
    /// Why this cannot deadlock: the invalidation waits only for READs
    /// and write-back WRITEs the kernel has sent (pages locked or under
    /// write-back), and those are served by the transports' threads, none
    /// of which ever waits for this thread (handing it a task never
    /// blocks). What a held reply does keep is the request's slot: a ring
    /// entry (io_uring), a background slot of the connection
    /// (max_background, for an async write). A READ the invalidation waits
    /// for may need such a slot, so at most [`HELD_REPLIES`] replies are
    /// held at once, fewer than any queue's entries (at least 8) and than
    /// max_background; beyond that the reply goes at once and the
    /// invalidation follows it.
    /// `after` runs on the invalidating thread once the invalidation is
    /// done, whether or not the reply was held.
    pub(crate) fn inval_then(&self, inval: PageInval, done: Done, after: Option<Done>) {
        let inv = &self.invalidator;
        let hold =
            inv.held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < HELD_REPLIES).then_some(n + 1)).is_ok();
        let (task, now) = if hold {
            (Task { inval, done: Some(done), after }, None)
        } else {
            (Task { inval, done: None, after }, Some(done))
        };
        if let Err(mpsc::SendError(task)) = self.sender().send(task) {
            // No invalidating thread (it could not be started): sending
            // the invalidation from here could wait for a READ that only
            // this thread would serve, so the reply goes without it (what
            // the kernel's own invalidation before the write leaves).
            log::warn!("no invalidating thread: inode {} answered without dropping its pages", task.inval.ino);
            if let Some(d) = task.done {
                inv.held.fetch_sub(1, Ordering::AcqRel);
                d();
            }
        }
        if let Some(d) = now {
            d();
        }
    }

    /// The invalidating thread's queue, the thread started on first use.
    fn sender(&self) -> &mpsc::Sender<Task> {
        self.invalidator.tx.get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Task>();
            let me = Notifier { dev: self.dev.clone(), invalidator: Arc::new(Invalidator::default()) };
            let held = Arc::downgrade(&self.invalidator);
            let spawned = std::thread::Builder::new().name("fuse-inval".into()).spawn(move || {
                // Ends when every sender (every clone of the notifier) is gone.
                for t in rx {
                    let i = t.inval;
                    if let Err(e) = me.inval_inode(INodeNo(i.ino), i.offset, i.len) {
                        log::debug!("invalidating inode {} at {}+{}: {e}", i.ino, i.offset, i.len);
                    }
                    if let Some(a) = t.after {
                        a();
                    }
                    if let Some(d) = t.done {
                        d();
                        if let Some(inv) = held.upgrade() {
                            inv.held.fetch_sub(1, Ordering::AcqRel);
                        }
                    }
                }
            });
            if let Err(e) = spawned {
                log::warn!("starting the invalidating thread: {e}");
            }
            tx
        })
    }
}
