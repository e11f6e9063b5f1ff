//! A statistics counter that many threads bump without sharing a cache
//! line: one padded stripe per thread slot, summed when read. Counters on
//! the I/O fast paths are bumped on every operation; a single atomic
//! there would bounce between cores and cost more than the operation.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const STRIPES: usize = 16;

#[repr(align(128))]
#[derive(Debug, Default)]
struct Stripe(AtomicU64);

/// A monotonic counter (relaxed; exact once the bumping threads are done).
#[derive(Debug, Default)]
pub struct StripedCounter {
    stripes: [Stripe; STRIPES],
}

static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn slot() -> usize {
    SLOT.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let n = NEXT_SLOT.fetch_add(1, Ordering::Relaxed) % STRIPES;
        s.set(n);
        n
    })
}

impl StripedCounter {
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.stripes[slot()].0.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one.
    pub fn bump(&self) {
        self.add(1);
    }

    /// The total.
    pub fn get(&self) -> u64 {
        self.stripes.iter().map(|s| s.0.load(Ordering::Relaxed)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn sums_over_threads() {
        let c = Arc::new(StripedCounter::default());
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || (0..1000).for_each(|_| c.bump()))
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(c.get(), 8000);
    }
}
