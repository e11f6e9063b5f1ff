//! The handle API: changes of metadata blocks through the buffer cache
//! (copy-on-write, or in place when only the running transaction holds
//! the version), recorded in the handle's transaction or written through
//! without a journal.

use super::{Handle, JournalWriter};
use crate::cache::{Buffer, BufferCache};
use crate::error::Result;
use crate::format::block_number::PhysicalBlock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Block versions a change replaced (in the cache, in the transaction),
/// dropped by [`Handle::install`]'s callers after their locks.
type Replaced = [Option<Arc<Buffer>>; 2];

/// Modes of [`Handle::modify`]-style changes without a journal.
enum Backend<'a> {
    Journal(&'a JournalWriter),
    Direct(&'a BufferCache),
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
        let guard = self.cache.lock_block(block);
        let cur = guard.current()?;
        let mut data = crate::cache::pool::copy_of(cur.data());
        drop(cur);
        let r = f(&mut data)?;
        let (_, replaced) = self.install(&guard, block, data)?;
        drop(guard);
        drop(replaced);
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
        // A plan that always decides to change: the answer is always Some.
        let r = self.modify_planned_if(block, None, |b| plan(b).map(Some), apply)?;
        r.ok_or_else(|| crate::error::Error::Invalid(format!("block {block}: a planned change was not made")))
    }

    /// [`Handle::modify_planned`] for a change that may not be made
    /// (`plan` answers `None`: nothing changes) and that leaves the block
    /// passing `check` (its checksum recomputed by `apply`): the new
    /// bytes, in place or in a new version, are marked verified
    /// ([`Buffer::set_verified`]). A directory leaf that a transaction
    /// inserts into again and again is then changed where it is, as an
    /// inode-table block is, instead of copied at every insert.
    pub fn modify_planned_if<P, R>(
        &self,
        block: u64,
        check: Option<(crate::cache::Check, u32)>,
        plan: impl FnOnce(&[u8]) -> Result<Option<P>>,
        apply: impl FnOnce(P, &mut [u8]) -> R,
    ) -> Result<Option<R>> {
        let guard = self.cache.lock_block(block);
        if let Some(mut edit) = guard.edit(self.tag) {
            let Some(p) = plan(edit.data())? else { return Ok(None) };
            self.changed.store(true, Ordering::Relaxed);
            let r = apply(p, edit.data_mut());
            if let Some((check, seed)) = check {
                edit.set_verified(check, seed);
            }
            return Ok(Some(r));
        }
        let cur = guard.current()?;
        let Some(p) = plan(cur.data())? else { return Ok(None) };
        let mut data = crate::cache::pool::copy_of(cur.data());
        drop(cur);
        let r = apply(p, &mut data);
        let (buf, replaced) = self.install(&guard, block, data)?;
        if let Some((check, seed)) = check {
            buf.set_verified(check, seed);
        }
        drop(guard);
        drop(replaced);
        Ok(Some(r))
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
        self.rewrite(block, f).map(drop)
    }

    /// Sets the full contents of metadata block `block`, new or not, from
    /// zeros (for a writer that encodes the whole block: nothing of the
    /// current version is read or copied), and returns the new version,
    /// for the caller to record what it knows of it (its checks passed,
    /// its decoded form: [`Buffer::set_verified`],
    /// [`crate::cache::BufferCache::seed_derived`]).
    pub fn rewrite(&self, block: u64, f: impl FnOnce(&mut [u8]) -> Result<()>) -> Result<Arc<Buffer>> {
        let guard = self.cache.lock_block(block);
        let mut data = crate::cache::pool::zeroed(self.cache.block_size());
        f(&mut data)?;
        let (buf, replaced) = self.install(&guard, block, data)?;
        drop(guard);
        drop(replaced);
        Ok(buf)
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
