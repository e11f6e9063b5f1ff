//! Answers of lookups kept for the change that follows them: names a
//! lookup found absent, for the create, and names it found, for the
//! unlink.
//!
//! Through FUSE every create, mkdir, mknod, symlink and link of a new name
//! comes right after a LOOKUP of that name (the kernel's atomic_open and
//! lookup_create look it up first), and both searched the directory the
//! same way: the leaf the name hashes to, for the name; the create also
//! for room. The lookup's walk now finds the room on its way
//! ([`dw::search`]) and leaves the answer here; the create takes it
//! instead of walking again, if the directory's I/O lock shows that no
//! exclusive hold (the only kind that changes a directory) ended since
//! the lookup held it shared ([`IoStamp`]). Otherwise the create searches
//! as before, so a wrong guess costs a search, never an entry.
//!
//! An unlink (rm -rf: a LOOKUP, then the UNLINK) needs the victim's
//! number before it locks (the victim is locked with the directory, in
//! inode-number order), and then the entry under the locks: a lookup's
//! answer with its place in the leaf gives both, under the same rule
//! ([`crate::dir::write::Found`]; the removal checks the entry is still
//! where it was found all the same).
//!
//! Bounded: [`SLOTS`] answers of each kind, each slot chosen by
//! directory and name; a newer answer replaces whatever held its slot,
//! and the change that uses an answer takes it out. Each slot's mutex is
//! a leaf lock (held for a compare and a copy; nothing is locked inside
//! it), taken with or without the directory's I/O lock.

use crate::locks::IoStamp;
use parking_lot::Mutex;

/// Answers kept at once: more than the creates in flight at a time.
const SLOTS: usize = 64;

/// The answers of one kind (`T`: where a name's entry would go, or where
/// it is), by slot.
#[derive(Debug)]
pub(crate) struct SeenNames<T> {
    slots: Box<[Mutex<Option<Seen<T>>>]>,
}

/// One lookup's answer about `name` in directory `dir`, `what`, which
/// holds as long as `stamp` is the directory's.
#[derive(Debug)]
struct Seen<T> {
    dir: u32,
    name: Vec<u8>,
    stamp: IoStamp,
    what: T,
}

impl<T> SeenNames<T> {
    pub(crate) fn new() -> SeenNames<T> {
        SeenNames { slots: (0..SLOTS).map(|_| Mutex::new(None)).collect() }
    }

    fn slot(&self, dir: u32, name: &[u8]) -> &Mutex<Option<Seen<T>>> {
        // FNV-1a of the name, mixed with the directory: names of one
        // directory spread over the slots.
        let mut h: u32 = 0x811c_9dc5 ^ dir.wrapping_mul(0x9E37_79B9);
        for &b in name {
            h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
        }
        &self.slots[h as usize % SLOTS]
    }

    /// Keeps the answer of a lookup of `name` in `dir` made under the
    /// directory's lock held shared, with that lock's stamp.
    pub(crate) fn note(&self, dir: u32, name: &[u8], stamp: IoStamp, what: T) {
        let mut slot = self.slot(dir, name).lock();
        match &mut *slot {
            // The slot's name buffer is reused.
            Some(a) => {
                a.dir = dir;
                a.name.clear();
                a.name.extend_from_slice(name);
                a.stamp = stamp;
                a.what = what;
            }
            None => *slot = Some(Seen { dir, name: name.to_vec(), stamp, what }),
        }
    }

    /// The answer kept for `name` in `dir`, taken out, with the stamp it
    /// holds for: the caller compares it with the directory's once it
    /// holds the lock exclusively ([`IoStamp::same`]).
    pub(crate) fn take_stamped(&self, dir: u32, name: &[u8]) -> Option<(IoStamp, T)> {
        let mut slot = self.slot(dir, name).lock();
        let a = slot.as_ref()?;
        if a.dir != dir || a.name != name {
            return None;
        }
        let a = slot.take()?;
        Some((a.stamp, a.what))
    }

    /// The answer kept for `name` in `dir`, taken out, if the directory's
    /// lock (held exclusively by the caller) still has the stamp it had
    /// then. Taken out whether or not it still holds: once the caller's
    /// hold ends, it never will.
    pub(crate) fn take(&self, dir: u32, name: &[u8], now: &IoStamp) -> Option<T> {
        let (stamp, what) = self.take_stamped(dir, name)?;
        stamp.same(now).then_some(what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dir::write::Room;
    use crate::locks::InodeLocks;

    type AbsentNames = SeenNames<Room>;

    fn noted(names: &AbsentNames, locks: &InodeLocks, dir: u32, name: &[u8]) {
        let shared = locks.lock_shared(dir);
        names.note(dir, name, shared.stamp(), Room::unknown());
    }

    fn taken(names: &AbsentNames, locks: &InodeLocks, dir: u32, name: &[u8]) -> bool {
        let l = locks.lock_exclusive(&[dir], &[]);
        names.take(dir, name, &l.stamp(dir).unwrap()).is_some()
    }

    #[test]
    fn an_answer_serves_the_next_exclusive_hold_once() {
        let (names, locks) = (AbsentNames::new(), InodeLocks::default());
        noted(&names, &locks, 12, b"x");
        assert!(!taken(&names, &locks, 12, b"y"), "another name");
        assert!(!taken(&names, &locks, 13, b"x"), "another directory");
        // The hold of 12 that looked for "y" ended: the answer for "x"
        // is stale now.
        assert!(!taken(&names, &locks, 12, b"x"));
        noted(&names, &locks, 12, b"x");
        assert!(taken(&names, &locks, 12, b"x"));
        assert!(!taken(&names, &locks, 12, b"x"), "taken out by the first");
    }

    #[test]
    fn an_exclusive_hold_in_between_makes_the_answer_stale() {
        let (names, locks) = (AbsentNames::new(), InodeLocks::default());
        noted(&names, &locks, 7, b"name");
        drop(locks.lock_exclusive(&[3, 7], &[]));
        assert!(!taken(&names, &locks, 7, b"name"));
        // Shared holds in between change nothing.
        noted(&names, &locks, 7, b"name");
        drop(locks.lock_shared(7));
        drop(locks.lock_exclusive(&[8], &[]));
        assert!(taken(&names, &locks, 7, b"name"));
    }

    #[test]
    fn a_lock_made_anew_is_not_the_one_the_answer_saw() {
        let names = AbsentNames::new();
        let old = InodeLocks::default();
        noted(&names, &old, 9, b"a");
        // Same inode, same count (0), another lock: a table entry dropped
        // and made again while nobody held it.
        let new = InodeLocks::default();
        assert!(!taken(&names, &new, 9, b"a"));
    }
}
