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
use crate::format::block_number::PhysicalBlock;
use crate::format::journal::{
    encode_descriptor, escape_block, feature, revoke_capacity, tag_checksum_value, tag_flag, BlockTag, CommitBlock,
    JournalFeatures, JournalSuperblock, SUPERBLOCK_SIZE,
};
use crate::int_hash::{IntMap, IntSet};
use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

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

/// Block versions a change replaced (in the cache, in the transaction),
/// dropped by [`Handle::install`]'s callers after their locks.
type Replaced = [Option<Arc<Buffer>>; 2];

/// Modes of [`Handle::modify`]-style changes without a journal.
enum Backend<'a> {
    Journal(&'a JournalWriter),
    Direct(&'a BufferCache),
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

    /// Commits every transaction up to `tid` (no-op if already committed).
    pub fn commit_upto(self: &Arc<Self>, tid: u64) -> Result<()> {
        let _c = self.commit_lock.lock();
        {
            let st = self.lock_state();
            if let Some(e) = &st.aborted {
                return Err(Error::Io(std::io::Error::other(format!("journal aborted: {e}"))));
            }
            if st.committed >= tid {
                return Ok(());
            }
            if st.running.as_ref().is_none_or(|t| t.tid > tid) {
                return Ok(());
            }
        }
        let r = self.commit_running();
        if let Err(e) = &r {
            self.abort(&e.to_string());
        }
        r
    }

    /// Commits the running transaction if it changed anything.
    pub fn commit(self: &Arc<Self>) -> Result<()> {
        self.check_live()?;
        let tid = match self.lock_state().running.as_ref() {
            Some(t) => t.tid,
            None => return Ok(()),
        };
        self.commit_upto(tid)
    }

    /// Closes and writes the running transaction (commit lock held).
    fn commit_running(self: &Arc<Self>) -> Result<()> {
        // Lock it and wait for its handles.
        let (tid, tag) = {
            let mut st = self.lock_state();
            let Some(t) = st.running.as_mut() else { return Ok(()) };
            t.locked = true;
            let (tid, tag) = (t.tid, t.tag);
            while st.running.as_ref().is_some_and(|t| t.handles > 0) {
                self.cv.wait(st.guard_mut());
            }
            // A handle that failed half-way aborted the journal before it
            // stopped: its transaction must not reach the log.
            if let Some(e) = &st.aborted {
                return Err(Error::Io(std::io::Error::other(format!("journal aborted: {e}"))));
            }
            (tid, tag)
        };
        let hook = self.close_hook.lock().clone();
        if let Some(hook) = hook {
            // Records into the locked transaction; not counted as a handle.
            let h = Handle {
                journal: Some(self.clone()),
                cache: self.cache.clone(),
                tid,
                tag,
                counted: false,
                credits: 0,
                changed: Default::default(),
                used: AtomicUsize::new(0),
                reserve: 0,
                ahead: AtomicUsize::new(0),
            };
            hook(&h)?;
        }
        let txn = {
            let mut st = self.lock_state();
            let txn = st.running.take().ok_or_else(|| Error::Invalid("running transaction vanished".into()))?;
            st.committing = Some((txn.tid, txn.blocks.keys().copied().collect()));
            self.cv.notify_all();
            txn
        };
        // Frozen: no handle of this transaction is left to change its
        // versions in place, and from now on none may.
        for b in txn.blocks.values() {
            b.set_owner(0);
        }
        if txn.blocks.is_empty() && txn.revoked.is_empty() {
            let mut st = self.lock_state();
            st.committing = None;
            st.committed = txn.tid;
            drop(st);
            self.after_commit(txn.tid);
            return Ok(());
        }
        let needed = self.log_blocks_needed(&txn);
        if needed + 2 > (self.last - self.first) as usize {
            return Err(Error::NoSpace(format!(
                "transaction of {needed} log blocks does not fit in a journal of {} blocks",
                self.last - self.first
            )));
        }
        let pinned = self.lock_state().checkpoint.len();
        if needed + 1 > self.free_log_blocks() || pinned + txn.blocks.len() > self.checkpoint_cap {
            self.checkpoint_locked()?;
        }
        self.write_transaction(&txn)?;
        // The versions the checkpoint map drops are freed after the state
        // lock (see `record`): a transaction replaces thousands of them.
        let mut replaced = Vec::with_capacity(txn.blocks.len());
        {
            let mut st = self.lock_state();
            // Blocks the running transaction has since freed are kept too:
            // their revoke is not durable yet (see `revoke`).
            for (b, buf) in txn.blocks {
                replaced.extend(st.checkpoint.insert(b, buf));
            }
            // This transaction's revokes are durable: the older versions of
            // the blocks it freed need no checkpoint any more. Commits are
            // serialized and a freed block is not reallocated before its
            // freeing transaction commits, so what the map holds for them
            // is still the version this transaction revoked.
            for b in &txn.revoked {
                replaced.extend(st.checkpoint.remove(b));
            }
            st.committing = None;
            st.committed = txn.tid;
        }
        drop(replaced);
        self.after_commit(txn.tid);
        Ok(())
    }

    fn after_commit(&self, tid: u64) {
        let hook = self.commit_hook.lock().clone();
        if let Some(hook) = hook {
            hook(tid);
        }
        self.cv.notify_all();
    }

    fn free_log_blocks(&self) -> usize {
        let st = self.lock_state();
        let len = (self.last - self.first) as usize;
        let used = (st.head + self.last - self.first - st.tail) % (self.last - self.first);
        len - used as usize
    }

    fn log_blocks_needed(&self, txn: &Txn) -> usize {
        let per_desc = crate::format::journal::descriptor_capacity(self.bs, &self.features).max(1);
        let n = txn.blocks.len();
        let per_revoke = revoke_capacity(self.bs, &self.features).max(1);
        n + n.div_ceil(per_desc) + txn.revoked.len().div_ceil(per_revoke) + 1
    }

    fn write_log(&self, jblk: u32, data: &[u8]) -> Result<()> {
        let p = self.map.physical(u64::from(jblk))?;
        self.dev.write_at(data, p * self.bs as u64)?;
        Ok(())
    }

    fn advance(&self, jblk: u32) -> u32 {
        if jblk + 1 >= self.last {
            self.first
        } else {
            jblk + 1
        }
    }

    fn write_transaction(&self, txn: &Txn) -> Result<()> {
        let seq = txn.tid as u32;
        let mut pos = self.lock_state().head;
        let per_desc = crate::format::journal::descriptor_capacity(self.bs, &self.features).max(1);
        let blocks: BTreeMap<u64, &Arc<Buffer>> = txn.blocks.iter().map(|(b, v)| (*b, v)).collect();
        let list: Vec<(u64, &Arc<Buffer>)> = blocks.into_iter().collect();
        let mut desc = vec![0u8; self.bs];
        for chunk in list.chunks(per_desc) {
            let mut tags = Vec::with_capacity(chunk.len());
            let mut copies = Vec::with_capacity(chunk.len());
            for (i, (b, buf)) in chunk.iter().enumerate() {
                // Logged as they are (the buffer is an immutable version),
                // copied only when the block must be escaped (it starts
                // with the journal's magic number).
                let mut data = std::borrow::Cow::Borrowed(buf.data());
                let mut head = [0u8; 4];
                head.copy_from_slice(&data[..4]);
                let mut flags = if escape_block(&mut head) {
                    data.to_mut()[..4].copy_from_slice(&head);
                    tag_flag::ESCAPE
                } else {
                    0
                };
                if i > 0 {
                    flags |= tag_flag::SAME_UUID;
                }
                if i + 1 == chunk.len() {
                    flags |= tag_flag::LAST_TAG;
                }
                let checksum = tag_checksum_value(&self.features, self.seed, seq, &data);
                tags.push(BlockTag { block: *b, flags, checksum, uuid: if i == 0 { Some(self.uuid) } else { None } });
                copies.push(data);
            }
            encode_descriptor(&mut desc, seq, &tags, &self.features, self.seed)?;
            self.write_log(pos, &desc)?;
            pos = self.advance(pos);
            for c in &copies {
                self.write_log(pos, c)?;
                pos = self.advance(pos);
            }
        }
        if !txn.revoked.is_empty() {
            let mut recs: Vec<u64> = txn.revoked.iter().copied().collect();
            recs.sort_unstable();
            let cap = revoke_capacity(self.bs, &self.features).max(1);
            for chunk in recs.chunks(cap) {
                let rb = crate::format::journal::RevokeBlock { sequence: seq, records: chunk.to_vec() };
                rb.encode(&mut desc, &self.features, self.seed)?;
                self.write_log(pos, &desc)?;
                pos = self.advance(pos);
            }
        }
        // Logged copies and ordered data durable before the commit block.
        self.dev.flush()?;
        let now = crate::format::inode::Timestamp::now();
        let cb = CommitBlock {
            sequence: seq,
            commit_sec: now.sec.max(0) as u64,
            commit_nsec: now.nsec,
            ..Default::default()
        };
        cb.encode(&mut desc, &self.features, self.seed)?;
        self.write_log(pos, &desc)?;
        pos = self.advance(pos);
        self.dev.flush()?;
        self.lock_state().head = pos;
        Ok(())
    }

    /// Writes every committed version home and empties the log (commit
    /// lock held).
    fn checkpoint_locked(&self) -> Result<()> {
        let (list, head, next) = {
            let st = self.lock_state();
            let list: Vec<(u64, Arc<Buffer>)> = st.checkpoint.iter().map(|(b, v)| (*b, v.clone())).collect();
            (list, st.head, st.next_tid)
        };
        let mut sorted = list;
        sorted.sort_unstable_by_key(|(b, _)| *b);
        for (b, buf) in &sorted {
            self.dev.write_at(buf.data(), b * self.bs as u64)?;
        }
        self.dev.flush()?;
        // The empty log expects the next transaction written to it: the
        // one being committed (a checkpoint made room for it), else the
        // running one, else the next to start.
        let expect = {
            let st = self.lock_state();
            match (&st.committing, &st.running) {
                (Some((tid, _)), _) => *tid,
                (None, Some(t)) => t.tid,
                (None, None) => next,
            }
        };
        self.write_jsb(head, expect)?;
        let mut st = self.lock_state();
        for (b, buf) in &sorted {
            if st.checkpoint.get(b).is_some_and(|cur| Arc::ptr_eq(cur, buf)) {
                st.checkpoint.remove(b);
            }
        }
        st.tail = head;
        drop(st);
        // The written versions are freed with no lock held (see `record`).
        drop(sorted);
        Ok(())
    }

    /// Commits the running transaction and checkpoints everything: the
    /// image on disk is then complete without the log.
    pub fn sync(self: &Arc<Self>) -> Result<()> {
        self.commit()?;
        let _c = self.commit_lock.lock();
        self.check_live()?;
        // A checkpoint that fails leaves the log the only complete copy:
        // jbd2 aborts then, so nothing is written over it.
        self.checkpoint_locked().inspect_err(|e| self.abort(&e.to_string()))
    }

    /// EIO if the journal has aborted.
    fn check_live(&self) -> Result<()> {
        match &self.lock_state().aborted {
            Some(e) => Err(Error::Io(std::io::Error::other(format!("journal aborted: {e}")))),
            None => Ok(()),
        }
    }

    /// Commits, checkpoints and marks the log empty (`s_start = 0`): a
    /// clean unmount.
    pub fn shutdown(self: &Arc<Self>) -> Result<()> {
        self.sync()?;
        let _c = self.commit_lock.lock();
        self.check_live()?;
        let next = self.lock_state().next_tid;
        self.write_jsb(0, next).inspect_err(|e| self.abort(&e.to_string()))
    }
}

impl Handle {
    /// A write-through handle for a filesystem without a journal.
    pub fn direct(cache: Arc<BufferCache>) -> Handle {
        Handle {
            journal: None,
            cache,
            tid: 0,
            tag: 0,
            counted: false,
            credits: 0,
            changed: Default::default(),
            used: AtomicUsize::new(0),
            reserve: 0,
            ahead: AtomicUsize::new(0),
        }
    }

    /// Credits this handle has not used yet: how many more blocks it may
    /// add to its transaction. Unbounded without a journal (and for the
    /// commit's close hook). Long operations check it before each bounded
    /// step and continue in a new handle when it runs short (jbd2's
    /// handle restart).
    pub fn credits_left(&self) -> usize {
        if self.journal.is_none() || !self.counted {
            return usize::MAX;
        }
        self.credits
            .saturating_sub(self.used.load(Ordering::Relaxed) + self.ahead.load(Ordering::Relaxed) + self.reserve)
    }

    /// Keeps `n` of the handle's credits out of [`Handle::credits_left`]:
    /// they are for writes made at the end of every change, whatever it
    /// was (the quota entries), so that a long operation sizing its steps
    /// by the credits left never uses them up.
    pub fn set_reserve(&mut self, n: usize) {
        self.reserve = n.min(self.credits);
    }

    /// Counts `n` credits as used before the blocks they are for are
    /// changed (work put off to later in the handle, see
    /// `Tx::batch_groups`), so that [`Handle::credits_left`] counts it;
    /// [`Handle::uncharge`] gives them back just before that work, which
    /// then uses what it really adds to the transaction.
    pub fn charge_ahead(&self, n: usize) {
        self.ahead.fetch_add(n, Ordering::Relaxed);
    }

    /// Gives back credits of [`Handle::charge_ahead`].
    pub fn uncharge(&self, n: usize) {
        let _ = self.ahead.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| Some(u.saturating_sub(n)));
    }

    /// Credits reserved when the handle started.
    pub fn credits(&self) -> usize {
        self.credits
    }

    /// The transaction this handle belongs to (0 without a journal).
    pub fn tid(&self) -> u64 {
        self.tid
    }

    /// True when changes go through a journal.
    pub fn is_journaled(&self) -> bool {
        self.journal.is_some()
    }

    fn backend(&self) -> Backend<'_> {
        match &self.journal {
            Some(j) => Backend::Journal(j),
            None => Backend::Direct(&self.cache),
        }
    }

    /// Read-modify-write of metadata block `block`: `f` changes a copy of
    /// the current contents; the copy becomes the new version, part of
    /// this handle's transaction (or is written through at once without
    /// a journal). `f` must not touch the cache.
    pub fn modify<R>(&self, block: u64, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
        self.modify_then(block, |d| f(d).map(|r| (r, true)))
    }

    /// [`Handle::modify`] that may decide to change nothing: the new
    /// version is installed only when `f` returns `Some`.
    pub fn modify_if<R>(&self, block: u64, f: impl FnOnce(&mut [u8]) -> Result<Option<R>>) -> Result<Option<R>> {
        self.modify_then(block, |d| {
            f(d).map(|r| {
                let changed = r.is_some();
                (r, changed)
            })
        })
    }

    /// [`Handle::modify_if`] for a change that leaves the block passing
    /// `check` with `seed` (its checksum recomputed by `f`): the new
    /// version is marked verified ([`Buffer::set_verified`]), so that the
    /// next reader does not compute the checksum just written again.
    pub fn modify_if_checked<R>(
        &self,
        block: u64,
        check: (crate::cache::Check, u32),
        f: impl FnOnce(&mut [u8]) -> Result<Option<R>>,
    ) -> Result<Option<R>> {
        self.modify_marking(block, Some(check), |d| {
            f(d).map(|r| {
                let changed = r.is_some();
                (r, changed)
            })
        })
    }

    /// Both of the above: `f` edits a copy of the current version and says
    /// whether to install it.
    fn modify_then<R>(&self, block: u64, f: impl FnOnce(&mut [u8]) -> Result<(R, bool)>) -> Result<R> {
        self.modify_marking(block, None, f)
    }

    /// [`Handle::modify_then`], the new version marked as passing `check`.
    fn modify_marking<R>(
        &self,
        block: u64,
        check: Option<(crate::cache::Check, u32)>,
        f: impl FnOnce(&mut [u8]) -> Result<(R, bool)>,
    ) -> Result<R> {
        let guard = self.cache.lock_block(block);
        let cur = guard.current()?;
        let mut data = crate::cache::pool::copy_of(cur.data());
        drop(cur);
        let (r, install) = f(&mut data)?;
        if install {
            let (buf, replaced) = self.install(&guard, block, data)?;
            if let Some((check, seed)) = check {
                buf.set_verified(check, seed);
            }
            drop(guard);
            drop(replaced);
        }
        Ok(r)
    }

    /// Read-modify-write of metadata block `block` in two steps: `plan`
    /// reads the current contents and decides (when it fails nothing
    /// changes), `apply` makes the change and cannot fail. Neither may
    /// touch the cache or wait for a lock.
    ///
    /// When this handle's transaction already holds the block's current
    /// version and nobody else does (no reader, no committing
    /// transaction: [`crate::cache::BlockGuard::edit`]), the change is
    /// made in place: no copy, no new version to install or record. That
    /// is the common case of the blocks a transaction changes again and
    /// again (an inode-table block, a group's descriptor block).
    /// Otherwise it is made on a copy, as [`Handle::modify`].
    pub fn modify_planned<P, R>(
        &self,
        block: u64,
        plan: impl FnOnce(&[u8]) -> Result<P>,
        apply: impl FnOnce(P, &mut [u8]) -> R,
    ) -> Result<R> {
        let guard = self.cache.lock_block(block);
        if let Some(mut edit) = guard.edit(self.tag) {
            let p = plan(edit.data())?;
            self.changed.store(true, Ordering::Relaxed);
            return Ok(apply(p, edit.data_mut()));
        }
        let cur = guard.current()?;
        let p = plan(cur.data())?;
        let mut data = crate::cache::pool::copy_of(cur.data());
        drop(cur);
        let r = apply(p, &mut data);
        let (_, replaced) = self.install(&guard, block, data)?;
        drop(guard);
        drop(replaced);
        Ok(r)
    }

    /// Sets metadata block `block` to `src` followed by `pad` bytes (a
    /// bitmap journaled whole from the allocator's copy, `src` cut at the
    /// block size): made in place when [`Handle::modify_planned`] would
    /// be, else a new version in pooled memory with each byte written once
    /// (no zero fill, no copy of the current version).
    pub fn overwrite_padded(&self, block: u64, src: &[u8], pad: u8) -> Result<()> {
        let bs = self.cache.block_size();
        let n = src.len().min(bs);
        let guard = self.cache.lock_block(block);
        if let Some(mut edit) = guard.edit(self.tag) {
            self.changed.store(true, Ordering::Relaxed);
            let b = edit.data_mut();
            b[..n].copy_from_slice(&src[..n]);
            b[n..].fill(pad);
            return Ok(());
        }
        // A new version, each byte written once (no zero fill first).
        let data = crate::cache::pool::copy_padded(src, bs, pad);
        let (_, replaced) = self.install(&guard, block, data)?;
        drop(guard);
        drop(replaced);
        Ok(())
    }

    /// Sets the full contents of a block that is being (re)initialised
    /// (a newly allocated metadata block): nothing is read.
    pub fn init(&self, block: u64, f: impl FnOnce(&mut [u8]) -> Result<()>) -> Result<()> {
        let guard = self.cache.lock_block(block);
        let mut data = crate::cache::pool::zeroed(self.cache.block_size());
        f(&mut data)?;
        let (_, replaced) = self.install(&guard, block, data)?;
        drop(guard);
        drop(replaced);
        Ok(())
    }

    /// True once this handle has changed or freed a metadata block.
    pub fn has_changes(&self) -> bool {
        self.changed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Aborts the journal this handle belongs to (an operation failed
    /// after changing metadata and cannot undo it: its transaction must
    /// never commit). No-op without a journal.
    pub fn abort_journal(&self, why: &str) {
        if let Some(j) = &self.journal {
            j.abort(why);
        }
    }

    /// Installs `data` as the new version of `block`; returns the versions
    /// it replaced (in the cache and in the transaction), for the caller
    /// to drop once it has released the stripe lock: freeing memory under
    /// a lock makes its waiters wait on the allocator too.
    fn install(
        &self,
        guard: &crate::cache::BlockGuard<'_>,
        block: u64,
        data: Box<[u8]>,
    ) -> Result<(Arc<Buffer>, Replaced)> {
        self.changed.store(true, std::sync::atomic::Ordering::Relaxed);
        match self.backend() {
            Backend::Journal(j) => {
                let (buf, cached) = guard.install_replacing(data)?;
                let (new, logged) = j.record(self.tid, block, buf.clone(), self.counted)?;
                if new && self.counted {
                    let used = self.used.fetch_add(1, Ordering::Relaxed) + 1;
                    // A handle is an upper bound of what its operation
                    // dirties: the transaction was sized from it (jbd2
                    // warns and aborts on the same over-use).
                    debug_assert!(
                        used <= self.credits,
                        "journal handle over its credits: block {block} is block {used} of a handle of {} credits",
                        self.credits
                    );
                }
                Ok((buf, [cached, logged]))
            }
            Backend::Direct(cache) => {
                let bs = cache.block_size() as u64;
                cache.device().write_at(&data, block * bs)?;
                let (buf, cached) = guard.install_replacing(data)?;
                Ok((buf, [cached, None]))
            }
        }
    }

    /// Metadata block `block` was freed by this handle: no pending version
    /// of it may reach its home location, and older log copies are
    /// revoked.
    pub fn forget(&self, block: PhysicalBlock) {
        self.changed.store(true, std::sync::atomic::Ordering::Relaxed);
        // The stripe lock orders this with in-place changes of the block
        // (an owner mark changes only under it).
        let guard = self.cache.lock_block(block.get());
        if let Some(j) = &self.journal {
            j.revoke(self.tid, block.get());
        }
        self.cache.forget(block.get());
        drop(guard);
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if self.counted {
            if let Some(j) = &self.journal {
                j.stop_handle(self.tid, self.credits_left());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryDevice;
    use crate::format::journal::JournalFeatures;

    const BS: usize = 4096;
    /// A metadata block the tests change (below the log at 1000..2024).
    const B: u64 = 10;

    fn journal() -> (Arc<BufferCache>, Arc<JournalWriter>) {
        let dev: Arc<dyn BlockDevice> = Arc::new(MemoryDevice::new(2100 * BS as u64));
        let cache = Arc::new(BufferCache::new(dev.clone(), BS, 256));
        let sb = JournalSuperblock::new_v2(BS as u32, 1024, 1, 1, JournalFeatures::default(), [7; 16]);
        let map = JournalMap { runs: vec![(0, 1024, 1000)], len: 1024 };
        let j = JournalWriter::start(dev, cache.clone(), super::super::Journal { sb, map }).unwrap();
        (cache, j)
    }

    /// Sets every byte of `B` to `v` through `h`'s in-place-capable path.
    fn fill(h: &Handle, v: u8) {
        h.modify_planned(B, |_| Ok(()), |(), d| d.fill(v)).unwrap();
    }

    fn uniform(d: &[u8]) -> Option<u8> {
        d.iter().all(|&x| x == d[0]).then_some(d[0])
    }

    /// A change is made in place only on a version the running
    /// transaction holds and nobody else does: a reader holding the
    /// version keeps its bytes (the change makes a copy), a value derived
    /// from it stays valid, and a committed version is never changed.
    #[test]
    fn in_place_only_when_the_running_transaction_alone_holds_the_version() {
        let (cache, j) = journal();
        let h = j.start_handle(4).unwrap();
        fill(&h, 1);
        let v1 = cache.get(B).unwrap();
        // A reader holds v1: the next change is a copy.
        fill(&h, 2);
        assert_eq!(uniform(v1.data()), Some(1), "a held version changed under its reader");
        let v2 = cache.get(B).unwrap();
        assert!(!Arc::ptr_eq(&v1, &v2));
        assert_eq!(uniform(v2.data()), Some(2));
        drop(v1);
        // Nobody but the cache and the transaction: in place.
        let p2 = Arc::as_ptr(&v2);
        drop(v2);
        fill(&h, 3);
        let v3 = cache.get(B).unwrap();
        assert_eq!(Arc::as_ptr(&v3), p2, "the change copied a version only its transaction held");
        assert_eq!(uniform(v3.data()), Some(3));
        // A value derived from the version is keyed by its identity: the
        // change must then copy, or the value would go stale.
        drop(v3);
        let first = |b: &Buffer| -> Result<u8> { Ok(b.data()[0]) };
        let d = B + 1;
        h.modify_planned(d, |_| Ok(()), |(), d| d[0] = 1).unwrap();
        let d1 = cache.get(d).unwrap();
        assert_eq!(*cache.derived(&d1, 1, first).unwrap(), 1);
        let pd = Arc::as_ptr(&d1);
        drop(d1);
        h.modify_planned(d, |_| Ok(()), |(), d| d[0] = 2).unwrap();
        let d2 = cache.get(d).unwrap();
        assert_eq!(*cache.derived(&d2, 1, first).unwrap(), 2);
        assert_ne!(Arc::as_ptr(&d2), pd);
        drop(d2);
        fill(&h, 4);
        // Committed (the checkpoint list and the cache hold it), then
        // changed by the next transaction: a copy, the committed version
        // keeps the bytes it was logged with.
        // (Looked at through the list: a reference held here would make
        // the change copy anyway.)
        drop(h);
        j.commit().unwrap();
        let committed = |j: &JournalWriter| {
            let st = j.lock_state();
            st.checkpoint.get(&B).map(|c| (Arc::as_ptr(c), uniform(c.data())))
        };
        let (p4, v) = committed(&j).unwrap();
        assert_eq!(v, Some(4));
        let h = j.start_handle(4).unwrap();
        fill(&h, 5);
        fill(&h, 6);
        assert_eq!(committed(&j), Some((p4, Some(4))), "a committed version changed");
        assert_eq!(uniform(cache.get(B).unwrap().data()), Some(6));
        // A revoked block stops being the transaction's: a version only
        // the cache holds is not changed in place (a reader may take it).
        h.forget(PhysicalBlock(B));
        assert!(cache.lock_block(B).edit(h.tag).is_none());
        drop(h);
        j.commit().unwrap();
    }

    /// A panic in an in-place change (or a read of the cache from one,
    /// which debug builds report) leaves no reader waiting for ever.
    #[test]
    fn an_edit_that_unwinds_lets_readers_go_on() {
        let (cache, j) = journal();
        let h = j.start_handle(4).unwrap();
        fill(&h, 1);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            h.modify_planned(B, |_| Ok(()), |(), _d| panic!("the change fails half-way"))
        }));
        assert!(r.is_err());
        assert_eq!(uniform(cache.get(B).unwrap().data()), Some(1));
        #[cfg(debug_assertions)]
        {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                h.modify_planned(B, |_| cache.get(B + 1).map(drop), |(), d| d.fill(2))
            }));
            assert!(r.is_err(), "a read of the cache during an in-place change went unnoticed");
        }
        assert_eq!(uniform(cache.get(B).unwrap().data()), Some(1));
        drop(h);
        j.commit().unwrap();
    }

    /// Writers change one block again and again (in place when they
    /// can), readers check that every version they see is whole and stays
    /// as they first saw it, and a committer closes transactions all the
    /// while: every committed version keeps the bytes it closed with.
    #[test]
    fn readers_and_commits_never_see_an_in_place_change() {
        let (cache, j) = journal();
        let stop = Arc::new(AtomicBool::new(false));
        /// Stops the other threads however the checking one ends.
        struct Stop(Arc<AtomicBool>);
        impl Drop for Stop {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        std::thread::scope(|s| {
            let _stop = Stop(stop.clone());
            for w in 0..2u8 {
                let j = j.clone();
                let stop = stop.clone();
                s.spawn(move || {
                    let mut v = w;
                    while !stop.load(Ordering::Relaxed) {
                        let h = j.start_handle(2).unwrap();
                        for _ in 0..8 {
                            v = v.wrapping_add(2);
                            fill(&h, v);
                        }
                    }
                });
            }
            for _ in 0..2 {
                let cache = cache.clone();
                let stop = stop.clone();
                s.spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let b = cache.get(B).unwrap();
                        let seen = uniform(b.data()).expect("a torn block version");
                        std::thread::yield_now();
                        assert_eq!(uniform(b.data()), Some(seen), "a held version changed");
                    }
                });
            }
            // The newest committed version, by identity and bytes (held, it
            // would never be changed in place: a copy would be made).
            let mut last: Option<(*const Buffer, u8)> = None;
            for _ in 0..300 {
                std::thread::yield_now();
                {
                    let st = j.lock_state();
                    let c = st.checkpoint.get(&B);
                    if let (Some(c), Some((p, v))) = (c, last) {
                        assert!(std::ptr::eq(Arc::as_ptr(c), p));
                        assert_eq!(uniform(c.data()), Some(v), "a committed version changed");
                    }
                }
                j.commit().unwrap();
                let st = j.lock_state();
                last = st.checkpoint.get(&B).map(|c| (Arc::as_ptr(c), uniform(c.data()).expect("torn when logged")));
            }
        });
        j.sync().unwrap();
        let home = &mut vec![0u8; BS];
        j.dev.read_at(home, B * BS as u64).unwrap();
        assert_eq!(uniform(home), uniform(cache.get(B).unwrap().data()), "the block written home");
    }
}
