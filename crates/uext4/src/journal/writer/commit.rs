//! Commit, checkpoint, sync and shutdown: closing the running
//! transaction and writing it to the log, and writing committed versions
//! home (the commit lock's work).

use super::{Handle, JournalWriter, Txn};
use crate::cache::Buffer;
use crate::error::{Error, Result};
use crate::format::journal::{
    encode_descriptor, escape_block, revoke_capacity, tag_checksum_value, tag_flag, BlockTag, CommitBlock,
};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

impl JournalWriter {
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
