//! Unit tests of the writer: the in-place metadata edits (when a change
//! may be made in place, and that nobody sees one).

use super::*;
use crate::device::MemoryDevice;
use crate::format::block_number::PhysicalBlock;
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

/// A planned change that may decide against itself: `None` leaves the
/// block as it was (no new version, none in the transaction); a change
/// is made in place when it may be, and either way the bytes are marked
/// as passing the check given.
#[test]
fn planned_changes_that_may_not_happen_and_mark_their_check() {
    use crate::cache::Check;
    let (cache, j) = journal();
    let h = j.start_handle(4).unwrap();
    let check = Some((Check::DirLeaf, 9));
    let v0 = cache.get(B).unwrap();
    let p0 = Arc::as_ptr(&v0);
    drop(v0);
    let r = h.modify_planned_if(B, check, |_| Ok(None::<()>), |(), d| d.fill(1)).unwrap();
    assert!(r.is_none());
    let v = cache.get(B).unwrap();
    assert_eq!((Arc::as_ptr(&v), uniform(v.data())), (p0, Some(0)), "a change that was not made");
    drop(v);
    assert!(!h.has_changes());
    // The first change copies (the transaction does not hold the
    // version yet), the second is made in place; both are verified.
    assert_eq!(h.modify_planned_if(B, check, |_| Ok(Some(7u8)), |p, d| d.fill(p)).unwrap(), Some(()));
    let v1 = cache.get(B).unwrap();
    assert!(v1.is_verified(Check::DirLeaf, 9) && uniform(v1.data()) == Some(7));
    let p1 = Arc::as_ptr(&v1);
    drop(v1);
    h.modify_planned_if(B, check, |_| Ok(Some(8)), |p, d| d.fill(p)).unwrap();
    let v2 = cache.get(B).unwrap();
    assert_eq!(Arc::as_ptr(&v2), p1, "a version only its transaction held was copied");
    assert!(v2.is_verified(Check::DirLeaf, 9) && uniform(v2.data()) == Some(8));
    drop(v2);
    // A failing plan changes nothing either.
    let e = h.modify_planned_if(B, check, |_| Err::<Option<u8>, _>(Error::Invalid("no".into())), |p, d| d.fill(p));
    assert!(e.is_err());
    assert_eq!(uniform(cache.get(B).unwrap().data()), Some(8));
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
