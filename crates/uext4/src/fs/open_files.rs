//! Open files and orphans: how many handles each inode has, which
//! inodes were unlinked while open (deleted at their last close), which
//! were truncated to zero while open (written back at their next close),
//! and the mutex that serializes changes of the on-disk orphan list
//! (the `s_last_orphan` chain and the orphan file's slots, whose state
//! it guards: `fs/orphan_file.rs`).
//!
//! The orphan list itself (its on-disk chain, cleanup at mount) is in
//! `fs/orphan.rs`; this module is the in-memory bookkeeping it and the
//! namespace operations consult.

use super::orphan_file::OrphanSlots;
use crate::lock_order::Class;
use crate::locks::{ordered, Ordered};
use parking_lot::{Mutex, MutexGuard};
use std::collections::{HashMap, HashSet};

/// Open handles per inode and what their closes must do.
#[derive(Default)]
struct Table {
    /// Open handles per inode.
    counts: HashMap<u32, u32>,
    /// Inodes unlinked while open: deleted at their last close.
    doomed: HashSet<u32>,
    /// Inodes truncated to zero while open: written back at their next
    /// close (auto_da_alloc).
    alloc_on_close: HashSet<u32>,
    /// Doomed inodes made by `tmpfile` (O_TMPFILE without O_EXCL): a
    /// link may still name them (the kernel's I_LINKABLE).
    linkable: HashSet<u32>,
}

/// What a close must do (see [`OpenFiles::close_ref`]).
pub(crate) struct Closed {
    /// It was the last handle of an unlinked inode: delete it.
    pub delete: bool,
    /// The file was truncated to zero while open: write it back.
    pub alloc: bool,
}

/// The open-file table and the orphan-list mutex.
#[derive(Default)]
pub(crate) struct OpenFiles {
    table: Mutex<Table>,
    /// Serializes changes of the orphan list and guards the orphan
    /// file's slots (taken inside inode locks and a handle, before any
    /// allocator or cache lock).
    orphan_lock: Mutex<OrphanSlots>,
}

impl std::fmt::Debug for OpenFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenFiles").finish_non_exhaustive()
    }
}

impl OpenFiles {
    /// An empty table over the orphan file's state `slots`.
    pub(crate) fn new(slots: OrphanSlots) -> OpenFiles {
        OpenFiles { table: Mutex::default(), orphan_lock: Mutex::new(slots) }
    }

    /// Takes the orphan-list mutex (checked against the lock order).
    pub(crate) fn lock_orphans(&self) -> Ordered<MutexGuard<'_, OrphanSlots>> {
        ordered(Class::Orphan, 0, || self.orphan_lock.lock())
    }

    /// True if `ino` has open handles.
    pub(crate) fn is_open(&self, ino: u32) -> bool {
        self.table.lock().counts.contains_key(&ino)
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
        let mut g = self.table.lock();
        let alloc = g.alloc_on_close.remove(&ino);
        let delete = match g.counts.get_mut(&ino) {
            Some(c) if *c > 1 => {
                *c -= 1;
                false
            }
            Some(_) => {
                g.counts.remove(&ino);
                g.doomed.contains(&ino)
            }
            None => false,
        };
        Closed { delete, alloc }
    }

    /// Marks `ino` (its last link gone, its I/O lock held) as unlinked
    /// while open if it is open, in the same critical section as the
    /// check, so that a close cannot slip between them: true if it is
    /// open (its last close deletes it), false if it is to be deleted now.
    pub(crate) fn doom_if_open(&self, ino: u32) -> bool {
        let mut g = self.table.lock();
        if g.counts.contains_key(&ino) {
            g.doomed.insert(ino);
            true
        } else {
            false
        }
    }

    /// The close-side decision, under the inode's I/O lock: true (and no
    /// longer doomed) if `ino` is doomed and not open again, so the
    /// caller deletes it; false if another close did, or it was reopened
    /// (its own last close deletes it).
    pub(crate) fn take_doomed(&self, ino: u32) -> bool {
        let mut g = self.table.lock();
        if g.counts.contains_key(&ino) || !g.doomed.remove(&ino) {
            return false;
        }
        g.linkable.remove(&ino);
        true
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

    /// The inodes unlinked while open (at unmount, to delete).
    pub(crate) fn doomed(&self) -> Vec<u32> {
        self.table.lock().doomed.iter().copied().collect()
    }

    /// Leaves `ino` exactly one handle, so that a close deletes it if it
    /// is doomed (unmount closes what is still open).
    pub(crate) fn keep_one_ref(&self, ino: u32) {
        self.table.lock().counts.insert(ino, 1);
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
        assert!(t.is_open(5));
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
        assert!(!t.is_open(5));
    }
}
