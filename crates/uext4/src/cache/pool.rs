//! Recycled block-sized memory for buffer versions.
//!
//! Every change of a metadata block makes a new version of it (a copy,
//! see [`crate::journal::Handle::modify`]) and drops the version it
//! replaces, usually on another thread than the one that allocated it
//! (the other FUSE queue thread, the committer, the checkpoint). With the
//! C library's allocator a free of memory another thread allocated takes
//! that thread's arena lock, and block-sized chunks bypass its per-thread
//! cache: creating files on two queue threads spent much of its off-CPU
//! time waiting for that lock inside `free` (issue 25, BENCHMARKS). Here
//! a dropped version's memory goes to a small cache of the dropping
//! thread and is reused by its next copy; a thread that only drops (the
//! committer) hands full batches to a shared depot that threads whose
//! cache ran dry take from, one short lock per batch. What stays pooled
//! is bounded: [`LOCAL_CAP`] blocks per thread and [`DEPOT_BATCHES`]
//! batches of [`BATCH`] in the depot; beyond that memory is freed.
//!
//! Blocks of several sizes may meet in one process (several filesystems):
//! a thread's cache holds one size at a time (a block of another size is
//! freed, not cached) and a batch in the depot is of one size.

use parking_lot::Mutex;
use std::cell::RefCell;

/// Blocks a thread keeps for reuse.
pub const LOCAL_CAP: usize = 64;
/// Blocks per batch moved between a thread and the depot.
pub const BATCH: usize = 32;
/// Batches the depot keeps.
pub const DEPOT_BATCHES: usize = 64;

thread_local! {
    static LOCAL: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

static DEPOT: Mutex<Vec<Vec<Box<[u8]>>>> = Mutex::new(Vec::new());

/// A block of `len` bytes with unspecified contents, pooled if one is.
fn take(len: usize) -> Option<Box<[u8]>> {
    let got = LOCAL
        .try_with(|l| {
            let mut l = l.borrow_mut();
            if l.last().is_some_and(|b| b.len() == len) {
                return l.pop();
            }
            // Empty (or of another size): a batch from the depot.
            let batch = {
                let mut d = DEPOT.lock();
                let k = d.iter().rposition(|b| b.first().is_some_and(|x| x.len() == len))?;
                d.swap_remove(k)
            };
            *l = batch;
            l.pop()
        })
        .ok()
        .flatten();
    got
}

/// A copy of `src` in pooled memory.
pub fn copy_of(src: &[u8]) -> Box<[u8]> {
    match take(src.len()) {
        Some(mut b) => {
            b.copy_from_slice(src);
            b
        }
        None => src.into(),
    }
}

/// A block of `len` bytes in pooled memory: `src`, then `pad` up to
/// `len` (`src` is cut at `len`). Each byte is written once: a bitmap
/// block built from the allocator's copy (whose tail is padding) costs
/// no zero fill first.
pub fn copy_padded(src: &[u8], len: usize, pad: u8) -> Box<[u8]> {
    let n = src.len().min(len);
    match take(len) {
        Some(mut b) => {
            b[..n].copy_from_slice(&src[..n]);
            b[n..].fill(pad);
            b
        }
        None => {
            let mut v = Vec::with_capacity(len);
            v.extend_from_slice(&src[..n]);
            v.resize(len, pad);
            v.into_boxed_slice()
        }
    }
}

/// `len` zero bytes in pooled memory.
pub fn zeroed(len: usize) -> Box<[u8]> {
    match take(len) {
        Some(mut b) => {
            b.fill(0);
            b
        }
        None => vec![0u8; len].into_boxed_slice(),
    }
}

/// Gives `b`'s memory back for reuse (or frees it when the pools are
/// full or hold another size).
pub fn give(b: Box<[u8]>) {
    if b.is_empty() {
        return;
    }
    let _ = LOCAL.try_with(|l| {
        let mut l = l.borrow_mut();
        if l.first().is_some_and(|x| x.len() != b.len()) {
            // Another size: this one is freed (`b` drops).
            return;
        }
        if l.len() >= LOCAL_CAP {
            // Full: a batch goes to the depot, if it has room.
            let keep = l.len() - BATCH;
            let batch: Vec<Box<[u8]>> = l.drain(keep..).collect();
            let mut d = DEPOT.lock();
            if d.len() < DEPOT_BATCHES {
                d.push(batch);
            } else {
                drop(d);
                drop(batch);
            }
        }
        l.push(b);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_memory_and_keeps_sizes_apart() {
        let a = zeroed(4096);
        let p = a.as_ptr();
        give(a);
        let b = copy_of(&[7u8; 4096]);
        assert_eq!(b.as_ptr(), p, "the block given back is reused");
        assert!(b.iter().all(|&x| x == 7));
        give(b);
        let c = zeroed(1024);
        assert_eq!(c.len(), 1024);
        assert!(c.iter().all(|&x| x == 0));
        let d = zeroed(4096);
        assert!(d.iter().all(|&x| x == 0), "pooled memory is zeroed when asked");
    }

    #[test]
    fn padded_copies_overwrite_every_byte_of_a_reused_block() {
        give(copy_of(&[7u8; 4096]));
        let b = copy_padded(&[1, 2, 3], 4096, 0xFF);
        assert_eq!(&b[..3], &[1, 2, 3]);
        assert!(b[3..].iter().all(|&x| x == 0xFF), "no byte of the reused block's old contents is left");
        let full = copy_padded(&[9u8; 4096], 4096, 0);
        assert!(full.iter().all(|&x| x == 9));
        // A pool miss builds the same block.
        let fresh = copy_padded(&[5u8; 2], 1000, 0xAA);
        assert_eq!(fresh.len(), 1000);
        assert_eq!(&fresh[..3], &[5, 5, 0xAA]);
    }

    #[test]
    fn a_thread_that_only_frees_feeds_the_others() {
        let blocks: Vec<Box<[u8]>> = (0..LOCAL_CAP + BATCH).map(|_| zeroed(2048)).collect();
        std::thread::spawn(move || blocks.into_iter().for_each(give)).join().unwrap();
        // This thread's cache is empty: it takes a batch from the depot.
        let got =
            std::thread::spawn(|| (0..BATCH).map(|_| take(2048).is_some()).filter(|&x| x).count()).join().unwrap();
        assert!(got >= 1);
    }
}
