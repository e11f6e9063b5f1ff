//! The jbd2 journal writer: handles, the running and committing
//! transactions, commit, checkpoint and revoke.
//!
//! # Model (as jbd2, simplified where it costs nothing)
//!
//! - A **handle** ([`Handle`]) is one atomic filesystem operation. It joins
//!   the single *running* transaction and reserves credits (an upper bound
//!   of the blocks it will dirty). Every metadata change goes through
//!   [`Handle::modify`]: copy-on-write of the block in the buffer cache,
//!   and the new version recorded in the running transaction.
//! - **Commit** (group commit): the committer *locks* the running
//!   transaction (new handles wait), waits for its handles to finish,
//!   runs the close hook (the superblock's counters), then takes the
//!   transaction away and lets new handles start the next one at once.
//!   Because buffers are immutable, the closed transaction keeps exactly
//!   the versions it had at close (jbd2's frozen copies, for free). It
//!   then writes, with no lock held: descriptor blocks and the logged
//!   copies (escaped when they start with the jbd2 magic), revoke blocks,
//!   a device flush (which also makes the ordered-mode file data written
//!   before the commit durable), the commit block, and a second flush.
//! - **Checkpoint**: committed versions wait in the checkpoint map (newest
//!   committed version per block) until written home. When the log runs
//!   short of space (or on sync/unmount) everything in the map is written
//!   home, flushed, and the journal superblock's tail is moved to the
//!   head: the log is then empty.
//! - **Revoke**: a metadata block freed while an older copy of it is still
//!   in the log gets a revoke record in the running transaction, so that
//!   replay cannot write the old copy over the block's next user. The
//!   allocator keeps such blocks reserved until the freeing transaction
//!   commits, so the revoke is durable before the block is reused; until
//!   then the block's last committed version stays in the checkpoint map.
//! - **Credits**: a handle reserves an upper bound of the blocks it will
//!   add to the transaction; each block it adds uses one (over-use is a
//!   debug assertion). Long operations check [`Handle::credits_left`]
//!   before each bounded step and go on in a new handle.
//!
//! # Locks
//!
//! `state` (Mutex) guards the transaction bookkeeping; it is taken inside
//! a buffer-cache stripe lock by [`Handle::modify`] and never the other
//! way round, and it is never held across device I/O. `commit_lock`
//! (Mutex) makes one thread the committer; it is held across the log
//! writes and the checkpoint (that is its job) and never taken by a thread
//! that holds a handle.

use super::JournalMap;
use crate::cache::{Buffer, BufferCache};
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::journal::{feature, JournalFeatures, JournalSuperblock, SUPERBLOCK_SIZE};
use crate::int_hash::{IntMap, IntSet};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

// One file per job: this one holds the types and the transaction
// bookkeeping (handles joining and leaving, blocks recorded and revoked)
// that the other two share; `handle` is the metadata-change API a handle
// offers, `commit` the log writes, checkpoint, sync and shutdown.
mod commit;
mod handle;
#[cfg(test)]
mod tests;

/// Called with a handle of the closing transaction just before it is
/// taken for commit (the filesystem writes its superblock counters).
pub type CloseHook = Box<dyn Fn(&Handle) -> Result<()> + Send + Sync>;
/// Called after a transaction's commit block is durable, with its id (the
/// allocator releases the blocks that transaction freed).
pub type CommitHook = Box<dyn Fn(u64) + Send + Sync>;
/// Called once when the journal aborts, with the reason (the filesystem
/// records the error in its superblock), with no journal lock held but
/// the commit lock.
pub type AbortHook = Box<dyn Fn(&str) + Send + Sync>;

/// The source of transaction tags ([`Txn::tag`]), shared by every journal
/// of the process: a tag is never used twice, whatever the journal.
static TXN_TAGS: AtomicU64 = AtomicU64::new(1);

#[derive(Default)]
struct Txn {
    tid: u64,
    /// Marks the versions in `blocks` as this running transaction's
    /// ([`crate::cache::Buffer::set_owner`]), which its handles may change
    /// in place. Unique in the process, unlike tids (a journal restarts
    /// them from its log).
    tag: u64,
    handles: usize,
    credits: usize,
    locked: bool,
    blocks: IntMap<u64, Arc<Buffer>>,
    revoked: IntSet<u64>,
}

struct State {
    running: Option<Txn>,
    /// The transaction being written (its blocks, for revoke decisions).
    committing: Option<(u64, IntSet<u64>)>,
    next_tid: u64,
    committed: u64,
    /// Newest committed, not yet checkpointed version of each block.
    checkpoint: IntMap<u64, Arc<Buffer>>,
    /// Next log block to write (journal-relative).
    head: u32,
    /// First log block still needed (start of the oldest transaction not
    /// checkpointed); `head` when the log is empty.
    tail: u32,
    /// The journal failed: every new handle fails with this message.
    aborted: Option<String>,
}

/// The journal of a filesystem opened read-write.
pub struct JournalWriter {
    dev: Arc<dyn BlockDevice>,
    cache: Arc<BufferCache>,
    map: JournalMap,
    bs: usize,
    features: JournalFeatures,
    seed: u32,
    uuid: [u8; 16],
    /// Log area: journal blocks `first..last`.
    first: u32,
    last: u32,
    max_txn: usize,
    /// Committed blocks the checkpoint list may hold before a commit
    /// writes them home first. Each pins its buffer in the cache, so the
    /// log's size alone (1 GiB on a large image) would let the daemon's
    /// memory grow to it; this keeps the list within half the metadata
    /// cache, as the kernel's writeback of checkpointed buffers keeps
    /// them reclaimable.
    checkpoint_cap: usize,
    /// Blocks the running transaction may hold before it is committed:
    /// each is a copy pinned until then, and a quarter of a 1 GiB log
    /// (the jbd2 bound, `max_txn`) would be 256 MiB of them. Half the
    /// metadata cache, like the checkpoint list.
    running_cap: usize,
    jsb: Mutex<JournalSuperblock>,
    state: Mutex<State>,
    cv: Condvar,
    /// Set once `State::aborted` is: the data path checks it on every
    /// write without taking the state lock.
    is_aborted: AtomicBool,
    commit_lock: Mutex<()>,
    close_hook: Mutex<Option<Arc<CloseHook>>>,
    commit_hook: Mutex<Option<Arc<CommitHook>>>,
    abort_hook: Mutex<Option<Arc<AbortHook>>>,
}

impl std::fmt::Debug for JournalWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournalWriter").field("first", &self.first).field("last", &self.last).finish_non_exhaustive()
    }
}

/// One atomic operation's membership in a transaction (or, on a
/// filesystem without a journal, a write-through context).
pub struct Handle {
    journal: Option<Arc<JournalWriter>>,
    cache: Arc<BufferCache>,
    tid: u64,
    /// The transaction's tag ([`Txn::tag`]); 0 without a journal.
    tag: u64,
    /// The close hook's pseudo-handle does not count as a handle.
    counted: bool,
    /// Credits reserved in the transaction until the handle stops.
    credits: usize,
    /// The handle has changed or freed metadata (an operation that fails
    /// after this must undo or abort: see `Tx`).
    changed: std::sync::atomic::AtomicBool,
    /// Credits used: blocks this handle added to the transaction.
    used: AtomicUsize,
    /// Credits kept aside (see [`Handle::set_reserve`]).
    reserve: usize,
    /// Credits counted as used ahead of the changes they are for
    /// ([`Handle::charge_ahead`]).
    ahead: AtomicUsize,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle").field("tid", &self.tid).finish_non_exhaustive()
    }
}

impl JournalWriter {
    /// Starts journaling on an internal journal whose log is empty
    /// (recovery has run): the log restarts at `s_first`, the revoke
    /// feature is turned on, and the journal superblock is written with a
    /// non-zero `s_start` (the log is live) before anything else.
    pub fn start(
        dev: Arc<dyn BlockDevice>,
        cache: Arc<BufferCache>,
        journal: super::Journal,
    ) -> Result<Arc<JournalWriter>> {
        let mut jsb = journal.sb;
        if jsb.start != 0 {
            return Err(Error::Invalid("the journal needs recovery before it can be written".into()));
        }
        if jsb.features.checksum_v1() && !jsb.features.csum_v2or3() {
            return Err(Error::Unsupported("writing a journal with checksum v1 (COMPAT_CHECKSUM)".into()));
        }
        if !jsb.is_v2() {
            return Err(Error::Unsupported("writing a version 1 journal superblock".into()));
        }
        jsb.features.incompat |= feature::INCOMPAT_REVOKE;
        let bs = jsb.block_size as usize;
        let first = jsb.first;
        let last = jsb.log_end();
        let len = (last - first) as usize;
        // Transaction ids are kept as u64 (the log stores the low 32 bits);
        // starting at 1 keeps "committed = next - 1" meaningful.
        let next_tid = u64::from(jsb.sequence).max(1);
        let w = JournalWriter {
            features: jsb.features,
            seed: jsb.csum_seed(),
            uuid: jsb.uuid,
            first,
            last,
            // jbd2 limits a transaction to a quarter of the log.
            max_txn: (len / 4).max(64),
            checkpoint_cap: (cache.capacity() / 2).max(64),
            running_cap: (cache.capacity() / 2).max(64),
            bs,
            map: journal.map,
            dev,
            cache,
            jsb: Mutex::new(jsb),
            state: Mutex::new(State {
                running: None,
                committing: None,
                next_tid,
                committed: next_tid.wrapping_sub(1),
                checkpoint: IntMap::default(),
                head: first,
                tail: first,
                aborted: None,
            }),
            cv: Condvar::new(),
            is_aborted: AtomicBool::new(false),
            commit_lock: Mutex::new(()),
            close_hook: Mutex::new(None),
            commit_hook: Mutex::new(None),
            abort_hook: Mutex::new(None),
        };
        w.write_jsb(first, next_tid)?;
        Ok(Arc::new(w))
    }

    /// Installs the hooks (see [`CloseHook`], [`CommitHook`]).
    pub fn set_hooks(&self, close: CloseHook, commit: CommitHook) {
        *self.close_hook.lock() = Some(Arc::new(close));
        *self.commit_hook.lock() = Some(Arc::new(commit));
    }

    /// Installs the hook called when the journal aborts.
    pub fn set_abort_hook(&self, hook: AbortHook) {
        *self.abort_hook.lock() = Some(Arc::new(hook));
    }

    /// Why the journal aborted, if it has: from then on nothing more is
    /// written to the log or home, new handles fail with EROFS and
    /// commits with EIO (jbd2's JBD2_ABORT).
    pub fn aborted(&self) -> Option<String> {
        // The common answer, "no", without the journal's state lock: every
        // direct and buffered write asks.
        if !self.is_aborted.load(Ordering::Acquire) {
            return None;
        }
        self.lock_state().aborted.clone()
    }

    /// Aborts the journal (jbd2_journal_abort): the running transaction
    /// is never committed and no handle starts again. The first abort
    /// runs the abort hook.
    pub fn abort(&self, why: &str) {
        let first = {
            let mut st = self.lock_state();
            let first = st.aborted.is_none();
            if first {
                st.aborted = Some(why.to_string());
                self.is_aborted.store(true, Ordering::Release);
            }
            first
        };
        self.cv.notify_all();
        if first {
            let hook = self.abort_hook.lock().clone();
            if let Some(hook) = hook {
                hook(why);
            }
        }
    }

    /// Id of the newest committed transaction.
    pub fn committed_tid(&self) -> u64 {
        self.lock_state().committed
    }

    /// Id of the running transaction, if it has changed anything.
    pub fn running_tid(&self) -> Option<u64> {
        let st = self.lock_state();
        st.running.as_ref().filter(|t| !t.blocks.is_empty() || !t.revoked.is_empty()).map(|t| t.tid)
    }

    fn write_jsb(&self, start: u32, sequence: u64) -> Result<()> {
        let mut jsb = self.jsb.lock();
        jsb.start = start;
        jsb.sequence = sequence as u32;
        let bytes = jsb.to_bytes();
        let p = self.map.physical(0)?;
        self.dev.write_at(&bytes[..SUPERBLOCK_SIZE], p * self.bs as u64)?;
        self.dev.flush()?;
        Ok(())
    }

    /// Takes the state lock (checked against the lock order).
    fn lock_state(&self) -> crate::locks::Ordered<parking_lot::MutexGuard<'_, State>> {
        crate::locks::ordered(crate::lock_order::Class::Journal, 0, || self.state.lock())
    }

    /// Starts a handle that will dirty at most about `credits` blocks.
    pub fn start_handle(self: &Arc<Self>, credits: usize) -> Result<Handle> {
        let credits = credits.clamp(1, self.max_txn);
        loop {
            let mut st = self.lock_state();
            if let Some(e) = &st.aborted {
                // A change after an abort is refused (EROFS), as ext4's
                // ext4_journal_check_start.
                return Err(Error::ReadOnly(format!("journal aborted: {e}")));
            }
            if st.running.as_ref().is_some_and(|t| t.locked) {
                self.cv.wait(st.guard_mut());
                continue;
            }
            if st.running.is_none() {
                let tid = st.next_tid;
                st.next_tid += 1;
                let tag = TXN_TAGS.fetch_add(1, Ordering::Relaxed);
                st.running = Some(Txn { tid, tag, ..Default::default() });
            }
            let Some(t) = st.running.as_mut() else { continue };
            // Like jbd2: the blocks already dirtied plus the credits of the
            // handles still running must fit.
            if !t.blocks.is_empty()
                && (t.blocks.len() + t.credits + credits > self.max_txn || t.blocks.len() >= self.running_cap)
            {
                // Full: have it committed and join the next one.
                let tid = t.tid;
                drop(st);
                self.commit_upto(tid)?;
                continue;
            }
            t.handles += 1;
            t.credits += credits;
            let (tid, tag) = (t.tid, t.tag);
            return Ok(Handle {
                journal: Some(self.clone()),
                cache: self.cache.clone(),
                tid,
                tag,
                counted: true,
                credits,
                changed: Default::default(),
                used: AtomicUsize::new(0),
                reserve: 0,
                ahead: AtomicUsize::new(0),
            });
        }
    }

    fn stop_handle(&self, tid: u64, unused: usize) {
        let mut st = self.lock_state();
        if let Some(t) = st.running.as_mut().filter(|t| t.tid == tid) {
            t.handles -= 1;
            // Unused credits go back (the used ones became `blocks`).
            t.credits = t.credits.saturating_sub(unused);
            if t.handles == 0 && t.locked {
                self.cv.notify_all();
            }
        }
    }

    /// Records the new version of `block` in transaction `tid` (called
    /// under the block's stripe lock). Says whether the block is new to
    /// the transaction: that uses one credit of a counted handle, which
    /// then stops being reserved (it is counted in `blocks`).
    ///
    /// The version this one replaces in the transaction is returned, not
    /// dropped: it is usually the last reference to that block copy, and
    /// freeing it under the state lock would make every handle wait on
    /// the memory allocator (whose lock the thread that allocated the
    /// copy may hold across a heap-growing system call).
    ///
    /// The new version is marked as the transaction's (its handles may
    /// change it in place), the one it replaces no longer.
    fn record(&self, tid: u64, block: u64, buf: Arc<Buffer>, counted: bool) -> Result<(bool, Option<Arc<Buffer>>)> {
        let mut st = self.lock_state();
        let t = st
            .running
            .as_mut()
            .filter(|t| t.tid == tid)
            .ok_or_else(|| Error::Invalid(format!("handle of transaction {tid} used after its commit")))?;
        t.revoked.remove(&block);
        buf.set_owner(t.tag);
        let old = t.blocks.insert(block, buf);
        if let Some(o) = &old {
            o.set_owner(0);
        }
        let new = old.is_none();
        if new && counted {
            t.credits = t.credits.saturating_sub(1);
        }
        Ok((new, old))
    }

    /// `block` was freed in transaction `tid`: forget its pending versions
    /// and revoke older log copies. Called under the block's stripe lock
    /// (the version dropped stops being the transaction's).
    ///
    /// Its last committed version stays in the checkpoint map (as jbd2
    /// keeps the buffer on the older transaction's checkpoint list) until
    /// the revoking transaction is durable: if that commit first needs a
    /// checkpoint and the machine stops before its commit block, the
    /// block's home location must still hold what the log no longer does.
    fn revoke(&self, tid: u64, block: u64) {
        let mut st = self.lock_state();
        let in_log =
            st.checkpoint.contains_key(&block) || st.committing.as_ref().is_some_and(|(_, b)| b.contains(&block));
        let mut dropped = None;
        if let Some(t) = st.running.as_mut().filter(|t| t.tid == tid) {
            dropped = t.blocks.remove(&block);
            if let Some(d) = &dropped {
                d.set_owner(0);
            }
            if in_log {
                t.revoked.insert(block);
            }
        }
        // Freed with no lock held (see `record`).
        drop(st);
        drop(dropped);
    }
}
