//! The lock-order checker (lockdep-like), debug builds only.
//!
//! Every acquisition of a lock in the order of [`crate::locks`] goes
//! through [`acquire`], which checks it against the locks this thread
//! already holds and panics with both on a violation; the returned
//! [`Held`] token releases the record when the lock guard drops. A
//! violation is reported the first time the code path runs, not the
//! rare time two threads interleave badly enough to deadlock.
//!
//! In release builds [`Held`] is an empty type without `Drop` and
//! [`acquire`] does nothing: the checker costs nothing.

/// The checked lock classes, outer first (their order is the order of
/// [`crate::locks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// The fs-wide rename lock (`s_vfs_rename_mutex`).
    Rename,
    /// An inode's I/O lock (`i_rwsem`), shared or exclusive: several in
    /// increasing inode number.
    Io,
    /// A folio lock (key: the folio's first page index): several, in
    /// increasing index, of one file.
    Folio,
    /// An inode's invalidate lock (`invalidate_lock`): one at a time.
    Invalidate,
    /// A journal handle: at most one per thread, after every inode lock.
    Handle,
    /// An inode's mapping lock (`i_data_sem`): one at a time, inside the
    /// handle when there is one.
    Map,
    /// The orphan-list mutex.
    Orphan,
    /// The quota mutex ([`crate::quota::Quotas`]).
    Quota,
    /// An allocator group's load lock (block or inode group; key: the
    /// group): one at a time, held across the read of the group's bitmap.
    GroupLoad,
    /// An inode group's journaling lock (key: the group): one at a time,
    /// held while its bitmap and descriptor are journaled, outside the
    /// group lock.
    GroupJournal,
    /// An allocator group lock (block or inode group; key: the group):
    /// one at a time.
    Group,
    /// A buffer-cache stripe lock (key: the block): one at a time.
    Stripe,
    /// The journal's state lock.
    Journal,
}

/// Proof that this thread holds a lock of a checked class; the record is
/// dropped with it. Drop it on the thread that acquired it.
#[derive(Debug)]
#[must_use = "the lock is recorded as held until this is dropped"]
pub struct Held {
    #[cfg(debug_assertions)]
    id: u64,
}

#[cfg(debug_assertions)]
mod imp {
    use super::Class;
    use std::cell::{Cell, RefCell};

    /// One lock this thread holds.
    #[derive(Debug, Clone, Copy)]
    pub(super) struct Entry {
        pub class: Class,
        pub key: u64,
        pub id: u64,
    }

    thread_local! {
        pub(super) static HELD: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
        pub(super) static NEXT: Cell<u64> = const { Cell::new(1) };
    }

    /// Why taking `(class, key)` while holding `h` breaks the order, if it does.
    pub(super) fn conflict(h: &Entry, class: Class, key: u64) -> Option<&'static str> {
        if h.class > class {
            return Some("a lock of an outer class is taken after an inner one");
        }
        if h.class < class {
            return None;
        }
        match class {
            Class::Io if h.key < key => None,
            Class::Io if h.key == key => Some("the same inode's I/O lock is taken twice"),
            Class::Io => Some("inode I/O locks are taken in increasing inode number"),
            Class::Folio if h.key < key => None,
            Class::Folio => Some("folio locks are taken in increasing index"),
            Class::Rename => Some("the rename lock is taken twice"),
            Class::Handle => Some("a handle is started while this thread holds another"),
            Class::Map => Some("a second mapping lock is taken (one at a time)"),
            Class::Invalidate => Some("a second invalidate lock is taken (one at a time)"),
            Class::Orphan => Some("the orphan-list mutex is taken twice"),
            Class::Quota => Some("the quota mutex is taken twice"),
            Class::GroupLoad => Some("a second allocator group load lock is taken (one at a time)"),
            Class::GroupJournal => Some("a second inode group journaling lock is taken (one at a time)"),
            Class::Group => Some("a second allocator group lock is taken (one at a time)"),
            Class::Stripe => Some("a second buffer-cache stripe lock is taken (one at a time)"),
            Class::Journal => Some("the journal state lock is taken twice"),
        }
    }
}

/// Records that this thread takes a lock of `class` with `key` (the
/// inode for [`Class::Io`], [`Class::Map`] and [`Class::Invalidate`], the
/// folio index for [`Class::Folio`], the group or block for the leaf
/// classes; 0 otherwise), about to wait for it.
///
/// # Panics
/// In debug builds, when the acquisition breaks the lock order of
/// [`crate::locks`] given the locks this thread holds: that is a bug that
/// can deadlock, never a property of the image or the input.
#[inline]
pub fn acquire(class: Class, key: u64) -> Held {
    #[cfg(debug_assertions)]
    {
        let id = imp::NEXT.with(|n| {
            let id = n.get();
            n.set(id + 1);
            id
        });
        imp::HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some((h, why)) = held.iter().find_map(|h| imp::conflict(h, class, key).map(|w| (h, w))) {
                let all: Vec<String> = held.iter().map(|e| format!("{:?}({})", e.class, e.key)).collect();
                let msg = format!(
                    "lock order violation: taking {class:?}({key}) while holding {:?}({}): {why}; held: [{}] \
                     (see uext4::locks for the order)",
                    h.class,
                    h.key,
                    all.join(", ")
                );
                // Not recorded: the caller unwinds without the lock.
                drop(held);
                panic!("{msg}");
            }
            held.push(imp::Entry { class, key, id });
        });
        Held { id }
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = (class, key);
        Held {}
    }
}

#[cfg(debug_assertions)]
impl Drop for Held {
    fn drop(&mut self) {
        let id = self.id;
        // try_with: a token dropped during thread teardown finds no list.
        let _ = imp::HELD.try_with(|held| {
            let mut held = held.borrow_mut();
            if let Some(pos) = held.iter().rposition(|e| e.id == id) {
                held.remove(pos);
            }
        });
    }
}

/// The locks this thread holds, outer first (only debug builds track
/// them: the order tests below run there alone).
#[cfg(all(test, debug_assertions))]
pub fn held() -> Vec<(Class, u64)> {
    imp::HELD.with(|h| h.borrow().iter().map(|e| (e.class, e.key)).collect())
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    fn violation(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
        let e = std::panic::catch_unwind(f).expect_err("the violation must be detected");
        e.downcast_ref::<String>().cloned().unwrap_or_default()
    }

    #[test]
    fn the_documented_order_passes() {
        let r = acquire(Class::Rename, 0);
        let a = acquire(Class::Io, 12);
        let b = acquire(Class::Io, 40);
        let h = acquire(Class::Handle, 0);
        let m = acquire(Class::Map, 40);
        assert_eq!(held().len(), 5);
        drop((m, h, a, b, r));
        assert!(held().is_empty());
        // Released out of order, then taken again.
        let a = acquire(Class::Io, 7);
        let b = acquire(Class::Io, 9);
        drop(a);
        let m = acquire(Class::Map, 9);
        drop((b, m));
        assert!(held().is_empty());
    }

    #[test]
    fn the_whole_order_passes() {
        // An allocating buffered write's writeback, innermost locks one
        // at a time.
        let io = acquire(Class::Io, 12);
        let f0 = acquire(Class::Folio, 0);
        let f1 = acquire(Class::Folio, 4);
        let h = acquire(Class::Handle, 0);
        let m = acquire(Class::Map, 12);
        let o = acquire(Class::Orphan, 0);
        let g = acquire(Class::Group, 3);
        drop(g);
        let g = acquire(Class::Group, 1);
        let s = acquire(Class::Stripe, 1000);
        let j = acquire(Class::Journal, 0);
        assert_eq!(held().len(), 9);
        drop((j, s, g, o, m, h, f1, f0, io));
        // A buffered read's fill: folios, then the invalidate lock, then
        // the mapping lock, with no I/O lock.
        let f = acquire(Class::Folio, 8);
        let i = acquire(Class::Invalidate, 12);
        let m = acquire(Class::Map, 12);
        drop((m, i, f));
        // Truncate: I/O, invalidate (no folio), handle.
        let io = acquire(Class::Io, 12);
        let i = acquire(Class::Invalidate, 12);
        let h = acquire(Class::Handle, 0);
        drop((h, i, io));
        assert!(held().is_empty());
    }

    #[test]
    fn violations_are_detected() {
        let cases: [(&[(Class, u64)], &str); 19] = [
            (&[(Class::Io, 40), (Class::Io, 12)], "increasing inode number"),
            (&[(Class::Io, 40), (Class::Io, 40)], "taken twice"),
            (&[(Class::Handle, 0), (Class::Io, 12)], "outer class"),
            (&[(Class::Io, 12), (Class::Rename, 0)], "Rename(0) while holding Io(12)"),
            (&[(Class::Handle, 0), (Class::Handle, 0)], "another"),
            (&[(Class::Map, 3), (Class::Map, 4)], "one at a time"),
            (&[(Class::Map, 3), (Class::Handle, 0)], "outer class"),
            (&[(Class::Folio, 4), (Class::Folio, 0)], "increasing index"),
            (&[(Class::Folio, 4), (Class::Folio, 4)], "increasing index"),
            (&[(Class::Folio, 0), (Class::Io, 12)], "outer class"),
            (&[(Class::Handle, 0), (Class::Folio, 0)], "outer class"),
            (&[(Class::Invalidate, 12), (Class::Folio, 0)], "outer class"),
            (&[(Class::Invalidate, 12), (Class::Invalidate, 13)], "one at a time"),
            (&[(Class::Orphan, 0), (Class::Orphan, 0)], "taken twice"),
            (&[(Class::Group, 0), (Class::Orphan, 0)], "outer class"),
            (&[(Class::Group, 1), (Class::Group, 2)], "one at a time"),
            (&[(Class::Stripe, 5), (Class::Group, 0)], "outer class"),
            (&[(Class::Stripe, 5), (Class::Stripe, 9)], "one at a time"),
            (&[(Class::Journal, 0), (Class::Stripe, 5)], "outer class"),
        ];
        for (locks, why) in cases {
            let msg = violation(|| {
                let _held: Vec<Held> = locks.iter().map(|&(c, k)| acquire(c, k)).collect();
            });
            assert!(msg.contains(why), "{locks:?}: {msg}");
        }
        // Every token was dropped by the unwinding.
        assert!(held().is_empty());
    }
}
