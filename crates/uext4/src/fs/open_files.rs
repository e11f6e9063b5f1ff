//! Open files and orphans: how many handles each inode has, how many
//! references the FUSE kernel holds on it (its lookup count), which
//! inodes were unlinked while held (deleted when the last handle and the
//! last kernel reference are gone), which
//! were truncated to zero while open (written back at their next close),
//! and the mutex that serializes changes of the on-disk orphan list
//! (the `s_last_orphan` chain and the orphan file's slots, whose state
//! it guards: `fs/orphan_file.rs`).
//!
//! The orphan list itself (its on-disk chain, cleanup at mount) is in
//! `fs/orphan.rs`; this module is the in-memory bookkeeping it and the
//! namespace operations consult.

use super::orphan_file::OrphanSlots;
use crate::int_hash::{IntMap, IntSet};
use crate::lock_order::Class;
use crate::locks::{ordered, Ordered};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Open handles per inode and what their closes must do.
#[derive(Default)]
struct Table {
    /// Open handles per inode. Whether the kernel holds an inode is its
    /// count in [`OpenFiles::refs`], read under that shard's lock, which
    /// is taken before this table's (no second per-node set here: one
    /// entry per node of a walked tree, under the one lock every LOOKUP
    /// of a new node took).
    counts: IntMap<u32, u32>,
    /// Inodes unlinked while held (open or referenced by the kernel): deleted when the
    /// last handle and the last kernel reference are gone.
    doomed: IntSet<u32>,
    /// Inodes truncated to zero while open: written back at their next
    /// close (auto_da_alloc).
    alloc_on_close: IntSet<u32>,
    /// Doomed inodes made by `tmpfile` (O_TMPFILE without O_EXCL): a
    /// link may still name them (the kernel's I_LINKABLE).
    linkable: IntSet<u32>,
    /// Doomed inodes taken for deletion ([`OpenFiles::take_doomed`]) whose
    /// deletion has not finished yet ([`OpenFiles::deleted`]).
    deleting: u32,
    /// Deletions finished so far: what [`OpenFiles::wait_deleted`] waits
    /// to see change.
    deleted: u64,
}

/// What a close must do (see [`OpenFiles::close_ref`]).
pub(crate) struct Closed {
    /// It was the last handle of an unlinked inode: delete it.
    pub delete: bool,
    /// The file was truncated to zero while open: write it back.
    pub alloc: bool,
}

/// Shards of [`OpenFiles::refs`].
const REF_SHARDS: usize = 64;

/// One shard of [`OpenFiles::refs`]: the kernel's references per inode.
type RefMap = IntMap<u32, u32>;

/// A reference count that reached it is no longer counted: the kernel's
/// count is a u64, and more than this many lookups of one node without a
/// FORGET (4 billion revalidations) keeps the node held, conservatively,
/// until the session ends.
const STUCK: u32 = u32::MAX;

/// A reference shard whose map holds fewer than a quarter of the entries
/// it has room for (and room for more than this many) is shrunk to twice
/// its entries: the kernel's FORGETs after it evicts (memory pressure,
/// `drop_caches`) give the daemon's per-node memory back, as they do the
/// kernel's, at O(1) amortized per FORGET (a shrink of n entries follows
/// at least n removals).
const SHRINK_MIN: usize = 1024;

/// Bytes released by shrinking reference maps after which
/// [`OpenFiles::take_released`] reports them (for the allocator to give
/// back to the system: a trim walks the heap, so not after every shrink).
pub(crate) const RELEASE_REPORT: usize = 4 << 20;

/// The open-file table and the orphan-list mutex.
pub(crate) struct OpenFiles {
    table: Mutex<Table>,
    /// Serializes changes of the orphan list and guards the orphan
    /// file's slots (taken inside inode locks and a handle, before any
    /// allocator or cache lock).
    orphan_lock: Mutex<OrphanSlots>,
    /// The kernel's references per inode (FUSE lookup counts), sharded by
    /// inode number (integer-hashed, as every table here: one entry per
    /// inode the kernel caches, touched by each LOOKUP and READDIRPLUS
    /// entry, where SipHash cost more than the rest of the count): a LOOKUP of a node the kernel holds already (a
    /// revalidation, most of them) takes only its shard's lock; the
    /// table's lock is taken when a count leaves or reaches zero, inside
    /// the shard's lock (shard, then table: never the other way round).
    /// A count is a `u32` (8 bytes an entry, not 16: one per node of a
    /// walked tree); one that would pass `u32::MAX` sticks there, held
    /// until the session ends (see [`OpenFiles::kernel_ref`]).
    refs: Box<[Mutex<RefMap>]>,
    /// Bytes of reference maps released by shrinks since
    /// [`OpenFiles::take_released`] last reported them.
    released: AtomicUsize,
    /// Signalled (with the table's lock) when the deletion of a doomed
    /// inode finishes: an allocation that failed with ENOSPC waits for
    /// the deletions the kernel's pending FORGETs are about to start.
    deleted_cv: Condvar,
}

impl Default for OpenFiles {
    fn default() -> OpenFiles {
        OpenFiles::new(OrphanSlots::default())
    }
}

impl std::fmt::Debug for OpenFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenFiles").finish_non_exhaustive()
    }
}

impl OpenFiles {
    /// An empty table over the orphan file's state `slots`.
    pub(crate) fn new(slots: OrphanSlots) -> OpenFiles {
        OpenFiles {
            table: Mutex::default(),
            orphan_lock: Mutex::new(slots),
            refs: (0..REF_SHARDS).map(|_| Mutex::default()).collect(),
            released: AtomicUsize::new(0),
            deleted_cv: Condvar::new(),
        }
    }

    /// Takes the orphan-list mutex (checked against the lock order).
    pub(crate) fn lock_orphans(&self) -> Ordered<MutexGuard<'_, OrphanSlots>> {
        ordered(Class::Orphan, 0, || self.orphan_lock.lock())
    }

    /// True if `ino` was unlinked and is still held (open or referenced
    /// by the kernel): an inode with no links that is not kept this way
    /// was deleted (or is being deleted), and its number may be reused.
    pub(crate) fn is_kept(&self, ino: u32) -> bool {
        let s = self.shard(ino).lock();
        let g = self.table.lock();
        g.doomed.contains(&ino) && g.held(&s, ino)
    }

    fn shard(&self, ino: u32) -> &Mutex<RefMap> {
        &self.refs[ino as usize % REF_SHARDS]
    }

    /// Counts one more kernel reference of `ino` (a reply that hands its
    /// node to the kernel: LOOKUP, CREATE, READDIRPLUS, ...); true if the
    /// kernel held it already. Only the shard's lock: the decisions that
    /// depend on the count (unlink, close, deletion) take it too.
    pub(crate) fn kernel_ref(&self, ino: u32) -> bool {
        let mut s = self.shard(ino).lock();
        let c = s.entry(ino).or_insert(0);
        *c = c.saturating_add(1);
        *c > 1
    }

    /// Drops `n` kernel references of `ino` (FORGET); more than it has
    /// drops them all (the kernel never forgets more than it was given).
    /// True if that was the last reference of any kind to an unlinked
    /// inode: to delete, once [`OpenFiles::take_doomed`] confirms it
    /// under the inode lock (decided here under the table's lock, as a
    /// close decides).
    pub(crate) fn kernel_unref(&self, ino: u32, n: u64) -> bool {
        let mut s = self.shard(ino).lock();
        let Some(c) = s.get_mut(&ino) else {
            // The protocol forbids it: a count out of step with the
            // kernel's (a reply counted nowhere, or counted twice).
            log::debug!("FORGET of {n} reference(s) to inode {ino}, which the kernel does not hold");
            return false;
        };
        if *c == STUCK {
            return false;
        }
        if u64::from(*c) > n {
            *c -= n as u32; // less than *c: fits
            return false;
        }
        if u64::from(*c) < n {
            log::debug!("FORGET of {n} reference(s) to inode {ino}, which the kernel holds {c} of");
        }
        s.remove(&ino);
        if s.capacity() > SHRINK_MIN && s.len() * 4 < s.capacity() {
            let (before, keep) = (s.capacity(), s.len() * 2);
            s.shrink_to(keep);
            let entry = std::mem::size_of::<(u32, u32)>() + 1;
            self.released.fetch_add(before.saturating_sub(s.capacity()) * entry, Ordering::Relaxed);
        }
        let g = self.table.lock();
        g.doomed.contains(&ino) && !g.counts.contains_key(&ino)
    }

    /// True (once) when shrinking the reference maps has released at
    /// least [`RELEASE_REPORT`] bytes since the last true: the caller may
    /// ask the allocator to return free memory to the system.
    pub(crate) fn take_released(&self) -> bool {
        let r = self.released.load(Ordering::Relaxed);
        r >= RELEASE_REPORT && self.released.compare_exchange(r, 0, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }

    /// Room in the reference maps, in entries (tests: it must follow the
    /// entries down as the kernel forgets).
    #[cfg(test)]
    fn refs_capacity(&self) -> usize {
        self.refs.iter().map(|s| s.lock().capacity()).sum()
    }

    /// Drops every kernel reference (the FUSE session ended: the kernel
    /// holds nothing any more). Returns the unlinked inodes no longer
    /// held, to delete (each confirmed by [`OpenFiles::take_doomed`]).
    pub(crate) fn kernel_unref_all(&self) -> Vec<u32> {
        let mut shards: Vec<_> = self.refs.iter().map(|s| s.lock()).collect();
        let g = self.table.lock();
        for s in &mut shards {
            s.clear();
        }
        g.doomed.iter().copied().filter(|i| !g.counts.contains_key(i)).collect()
    }

    /// The kernel's references to `ino`.
    pub(crate) fn kernel_refs(&self, ino: u32) -> u64 {
        self.shard(ino).lock().get(&ino).copied().map_or(0, u64::from)
    }

    /// Counts one more handle of `ino`.
    pub(crate) fn open_ref(&self, ino: u32) {
        *self.table.lock().counts.entry(ino).or_insert(0) += 1;
    }

    /// Drops one handle. Says whether it was the last one of an unlinked
    /// inode (to delete: confirmed under the inode lock by
    /// [`OpenFiles::take_doomed`]), and whether the file was truncated to
    /// zero while open since the last close (to write back now:
    /// auto_da_alloc).
    pub(crate) fn close_ref(&self, ino: u32) -> Closed {
        let s = self.shard(ino).lock();
        let mut g = self.table.lock();
        let alloc = g.alloc_on_close.remove(&ino);
        let delete = match g.counts.get_mut(&ino) {
            Some(c) if *c > 1 => {
                *c -= 1;
                false
            }
            Some(_) => {
                g.counts.remove(&ino);
                g.doomed.contains(&ino) && !s.contains_key(&ino)
            }
            None => false,
        };
        Closed { delete, alloc }
    }

    /// Marks `ino` (its last link gone, its I/O lock held) as unlinked
    /// while held if it is open or referenced by the kernel, in the same
    /// critical section as the check, so that a close or a FORGET cannot
    /// slip between them: true if it is held (the last close or FORGET
    /// deletes it), false if it is to be deleted now.
    pub(crate) fn doom_if_open(&self, ino: u32) -> bool {
        let s = self.shard(ino).lock();
        let mut g = self.table.lock();
        if g.held(&s, ino) {
            g.doomed.insert(ino);
            true
        } else {
            false
        }
    }

    /// The close-side (or FORGET-side) decision, under the inode's I/O
    /// lock: true (and no longer doomed) if `ino` is doomed and neither
    /// open nor referenced again, so the caller deletes it; false if
    /// another close did, or it was reopened or looked up again (its own
    /// last close or FORGET deletes it).
    /// The caller must call [`OpenFiles::deleted`] when the deletion it
    /// starts ends, whether it succeeded or not.
    pub(crate) fn take_doomed(&self, ino: u32) -> bool {
        let s = self.shard(ino).lock();
        let mut g = self.table.lock();
        if g.held(&s, ino) || !g.doomed.remove(&ino) {
            return false;
        }
        g.linkable.remove(&ino);
        g.deleting += 1;
        true
    }

    /// The deletion of an inode [`OpenFiles::take_doomed`] handed out has
    /// ended (its blocks freed, or it failed): wakes the allocations
    /// waiting for it in [`OpenFiles::wait_deleted`].
    pub(crate) fn deleted(&self) {
        let mut g = self.table.lock();
        g.deleting = g.deleting.saturating_sub(1);
        g.deleted += 1;
        self.deleted_cv.notify_all();
    }

    /// How many deletions of doomed inodes have ended so far: the mark an
    /// allocation takes before it tries, for [`OpenFiles::wait_deleted`].
    pub(crate) fn deletions(&self) -> u64 {
        self.table.lock().deleted
    }

    /// After an allocation failed with ENOSPC: waits until `deadline` for
    /// the deletion of an unlinked inode that only the kernel still holds
    /// (its FORGET is on its way: the kernel sends it when it evicts the
    /// node, asynchronously, and another thread may serve the caller's
    /// next request first) or that is being deleted. True (and `since`
    /// moved to now) as soon as a deletion has ended after the mark
    /// `since` ([`OpenFiles::deletions`], taken before the allocation
    /// tried; its blocks are freed, allocatable after a commit); false at
    /// once if none has and none is pending, or when `deadline` passes
    /// first. Nothing on a common path: it scans the doomed inodes only
    /// when the filesystem is full.
    pub(crate) fn wait_deleted(&self, since: &mut u64, deadline: Instant) -> bool {
        let mut g = self.table.lock();
        loop {
            if g.deleted != *since {
                *since = g.deleted;
                return true;
            }
            // Doomed and not open: kept only by the kernel's references
            // (or its last one just dropped, its deletion about to start).
            let pending = g.deleting > 0 || g.doomed.iter().any(|i| !g.counts.contains_key(i));
            if !pending || self.deleted_cv.wait_until(&mut g, deadline).timed_out() {
                let ended = g.deleted != *since;
                *since = g.deleted;
                return ended;
            }
        }
    }

    /// Counts the first handle of the new unnamed inode `ino` (O_TMPFILE),
    /// doomed (its last close deletes it) and linkable.
    pub(crate) fn open_tmpfile(&self, ino: u32) {
        let mut g = self.table.lock();
        *g.counts.entry(ino).or_insert(0) += 1;
        g.doomed.insert(ino);
        g.linkable.insert(ino);
    }

    /// True if `ino` is an open tmpfile that a link may still name.
    pub(crate) fn is_linkable(&self, ino: u32) -> bool {
        let g = self.table.lock();
        g.linkable.contains(&ino) && g.doomed.contains(&ino) && g.counts.contains_key(&ino)
    }

    /// Tmpfile `ino` got its first name (its inode lock held): no longer
    /// deleted by its last close.
    pub(crate) fn linked(&self, ino: u32) {
        let mut g = self.table.lock();
        g.linkable.remove(&ino);
        g.doomed.remove(&ino);
    }

    /// Notes that open file `ino` was truncated to zero: its next close
    /// writes its delayed data back (ext4's EXT4_STATE_DA_ALLOC_CLOSE).
    pub(crate) fn alloc_on_close(&self, ino: u32) {
        let mut g = self.table.lock();
        if g.counts.contains_key(&ino) {
            g.alloc_on_close.insert(ino);
        }
    }

    /// The inodes unlinked while held (at unmount, to delete).
    pub(crate) fn doomed(&self) -> Vec<u32> {
        self.table.lock().doomed.iter().copied().collect()
    }

    /// Leaves `ino` exactly one handle, so that a close deletes it if it
    /// is doomed (unmount closes what is still open).
    pub(crate) fn keep_one_ref(&self, ino: u32) {
        self.table.lock().counts.insert(ino, 1);
    }
}

impl Table {
    /// Open, or referenced by the kernel (`refs`: the locked shard of
    /// `ino` in [`OpenFiles::refs`]).
    fn held(&self, refs: &RefMap, ino: u32) -> bool {
        self.counts.contains_key(&ino) || refs.contains_key(&ino)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An inode unlinked while open is deleted by its last close only,
    /// and a truncate to zero while open is written back by the next close.
    #[test]
    fn last_close_of_a_doomed_inode_deletes_it() {
        let t = OpenFiles::default();
        assert!(!t.doom_if_open(5), "not open: the unlink deletes it itself");
        t.open_ref(5);
        t.open_ref(5);
        assert!(!t.is_kept(5), "open, not unlinked");
        t.alloc_on_close(5);
        t.alloc_on_close(6); // not open: nothing to do at a close
        assert!(t.doom_if_open(5));
        let first = t.close_ref(5);
        assert!(!first.delete && first.alloc);
        assert!(!t.take_doomed(5), "still open");
        let last = t.close_ref(5);
        assert!(last.delete && !last.alloc);
        assert_eq!(t.doomed(), vec![5]);
        assert!(t.take_doomed(5));
        assert!(!t.take_doomed(5), "deleted once");
        assert!(!t.close_ref(6).alloc);
        assert!(!t.is_kept(5));
    }

    /// A kernel reference keeps an unlinked inode as an open does: the
    /// last of the references and opens, whichever it is, deletes it, and
    /// a lookup between the decision and the deletion keeps it again.
    #[test]
    fn kernel_references_keep_an_unlinked_inode() {
        let t = OpenFiles::default();
        // Referenced only (an O_PATH descriptor, a cached dentry): doomed,
        // not deleted by the unlink.
        assert!(!t.kernel_ref(7), "the first reference");
        assert!(t.kernel_ref(7), "held already");
        assert!(t.doom_if_open(7), "referenced: kept on the orphan list");
        assert!(t.is_kept(7));
        // Opened through the reference, closed again: still referenced.
        t.open_ref(7);
        assert!(!t.close_ref(7).delete, "the kernel still holds it");
        assert!(!t.take_doomed(7));
        assert!(!t.kernel_unref(7, 1), "one reference left");
        assert_eq!(t.kernel_refs(7), 1);
        // The last FORGET, with an open still there: the close deletes it.
        t.open_ref(7);
        assert!(!t.kernel_unref(7, 1), "still open");
        assert!(t.close_ref(7).delete);
        // A lookup between that decision and the deletion keeps it.
        t.kernel_ref(7);
        assert!(!t.take_doomed(7), "looked up again");
        assert!(t.kernel_unref(7, 5), "more than it has: all of them");
        assert!(t.take_doomed(7));
        assert!(!t.is_kept(7));
        assert_eq!(t.kernel_refs(7), 0);
        // A FORGET of a node never counted changes nothing.
        assert!(!t.kernel_unref(8, 1));
        // Not referenced, not open: the unlink deletes it at once.
        t.kernel_ref(9);
        assert!(!t.kernel_unref(9, 1));
        assert!(!t.doom_if_open(9));
        // The end of the session drops every reference: what was kept
        // only by them is returned for deletion, what is open is not.
        t.kernel_ref(10);
        t.kernel_ref(11);
        t.open_ref(11);
        assert!(t.doom_if_open(10) && t.doom_if_open(11));
        assert_eq!(t.kernel_unref_all(), vec![10]);
        assert_eq!(t.kernel_refs(10), 0);
        assert!(t.take_doomed(10));
        assert!(t.close_ref(11).delete);
    }
    /// The kernel's references of a walked tree cost the daemon memory
    /// while the kernel holds them, not after: once the kernel forgets
    /// the nodes (memory pressure, `drop_caches`), the maps shrink with
    /// them and report what they released, and a walk that comes back
    /// grows them again.
    #[test]
    fn reference_maps_shrink_when_the_kernel_forgets() {
        let t = OpenFiles::default();
        let n = 300_000u32;
        for round in 0..2 {
            for ino in 12..12 + n {
                assert!(!t.kernel_ref(ino));
            }
            let full = t.refs_capacity();
            assert!(full >= n as usize, "round {round}: {full}");
            for ino in 12..12 + n - 100 {
                assert!(!t.kernel_unref(ino, 1));
            }
            let left = t.refs_capacity();
            // 100 entries left: each shard back to its floor or twice
            // what it holds.
            assert!(left <= REF_SHARDS * 2 * SHRINK_MIN, "round {round}: {full} -> {left} entries of room");
            for ino in 12 + n - 100..12 + n {
                assert_eq!(t.kernel_refs(ino), 1, "the others kept");
                assert!(!t.kernel_unref(ino, 1));
            }
        }
        // Two rounds of the room for 300k entries (17 bytes each), down
        // to the floor, released and counted; reported once past the
        // report size, then not again until as much more is released.
        let entry = std::mem::size_of::<(u32, u32)>() + 1;
        let released = t.released.load(Ordering::Relaxed);
        assert!(released >= 2 * (n as usize - REF_SHARDS * 2 * SHRINK_MIN) * entry, "{released} bytes");
        assert_eq!(t.take_released(), released >= RELEASE_REPORT);
        t.released.fetch_add(RELEASE_REPORT, Ordering::Relaxed);
        assert!(t.take_released());
        assert!(!t.take_released());
    }

    /// A count that would pass u32::MAX sticks: the node stays held
    /// (an unlink keeps it) whatever is forgotten, until the session ends.
    #[test]
    fn a_count_past_u32_sticks_held() {
        let t = OpenFiles::default();
        t.shard(5).lock().insert(5, STUCK - 1);
        assert!(t.kernel_ref(5));
        assert!(t.kernel_ref(5), "past the top: still held");
        assert_eq!(t.kernel_refs(5), u64::from(STUCK));
        assert!(!t.kernel_unref(5, u64::from(STUCK) + 7));
        assert!(!t.kernel_unref(5, 1));
        assert!(t.doom_if_open(5), "still held: the unlink keeps it");
        assert_eq!(t.kernel_unref_all(), vec![5], "the end of the session lets it go");
        // Counts below the top are exact, forgets of more than a u32 too.
        assert!(!t.kernel_ref(6) && t.kernel_ref(6));
        assert!(!t.kernel_unref(6, 1));
        assert!(!t.kernel_unref(6, u64::MAX), "all of them");
        assert_eq!(t.kernel_refs(6), 0);
    }

    /// An allocation that found the disk full waits for the deletion of
    /// an unlinked inode only the kernel holds (its FORGET on its way):
    /// true once a deletion ends after the allocation's mark; false at
    /// once when none is pending (an open file's last close is not on its
    /// way), and at the deadline when the kernel keeps holding it.
    #[test]
    fn enospc_waits_for_the_deletions_forget_starts() {
        use std::time::Duration;
        let t = std::sync::Arc::new(OpenFiles::default());
        let later = || Instant::now() + Duration::from_secs(60);
        let mut mark = t.deletions();
        assert!(!t.wait_deleted(&mut mark, later()), "nothing pending: no wait");
        // Unlinked while open: its close is the caller's, not on its way.
        t.open_ref(3);
        assert!(t.doom_if_open(3));
        assert!(!t.wait_deleted(&mut mark, later()), "open: not waited for");
        // Held by the kernel only: waited for until the deadline...
        t.kernel_ref(4);
        assert!(t.doom_if_open(4));
        let soon = Instant::now() + Duration::from_millis(10);
        assert!(!t.wait_deleted(&mut mark, soon), "never forgotten: the deadline ends the wait");
        // ...or until its deletion ends in another thread, before or
        // after the wait begins.
        let other = std::sync::Arc::clone(&t);
        let forget = std::thread::spawn(move || {
            assert!(other.kernel_unref(4, 1));
            assert!(other.take_doomed(4));
            other.deleted();
        });
        assert!(t.wait_deleted(&mut mark, later()), "woken by the deletion");
        forget.join().expect("the forgetting thread");
        assert_eq!(mark, t.deletions());
        assert!(!t.wait_deleted(&mut mark, later()), "nothing more pending");
    }
}
