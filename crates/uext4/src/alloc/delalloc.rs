//! The space account of delayed allocation (ext4's
//! `s_dirtyclusters_counter`): blocks reserved for buffered data not yet
//! allocated, and blocks claimed by allocations in progress that do not
//! come out of a reservation.
//!
//! It lives here, below both its users, because the page cache reserves
//! space when data is dirtied and every transaction's allocation must
//! leave those reservations alone (see [`crate::txn::Tx::alloc_blocks`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// Blocks reserved for delayed allocation and claimed by allocations in
/// progress.
#[derive(Debug, Default)]
pub struct DelallocSpace {
    /// Blocks reserved for dirty, not yet allocated data.
    reserved: AtomicU64,
    /// Blocks claimed by allocations in progress that do not come out of
    /// a reservation (see [`DelallocSpace::claim`]).
    claimed: AtomicU64,
}

/// Blocks claimed for an allocation in progress, given back on drop
/// (by then the allocator's free count no longer holds them).
#[derive(Debug)]
pub struct Claim<'a>(&'a DelallocSpace, u64);

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0.claimed.fetch_sub(self.1, Ordering::SeqCst);
    }
}

impl DelallocSpace {
    /// Blocks reserved for delayed allocation.
    pub fn reserved_blocks(&self) -> u64 {
        self.reserved.load(Ordering::Acquire)
    }

    /// Blocks reserved or claimed by allocations in progress.
    pub fn committed_blocks(&self) -> u64 {
        self.reserved.load(Ordering::SeqCst) + self.claimed.load(Ordering::SeqCst)
    }

    /// Reserves `n` blocks for delayed allocation if the free blocks
    /// (`free()`, read after the reservation is counted) then cover every
    /// reservation, every claim and `keep` blocks more.
    ///
    /// Both this and [`DelallocSpace::claim`] count first and check after,
    /// so of a reservation and an allocation that race at least one sees
    /// the other: both may fail near a full disk, never both take the
    /// same blocks (a check made on a snapshot taken before the other's
    /// count let both succeed).
    pub fn reserve_space(&self, n: u64, keep: u64, free: impl FnOnce() -> u64) -> bool {
        self.reserved.fetch_add(n, Ordering::SeqCst);
        if self.committed_blocks() + keep <= free() {
            return true;
        }
        self.reserved.fetch_sub(n, Ordering::SeqCst);
        false
    }

    /// Gives back `n` reserved blocks (their data was allocated, or
    /// dropped).
    pub fn release(&self, n: u64) {
        self.reserved.fetch_sub(n, Ordering::AcqRel);
    }

    /// Claims `n` blocks for an allocation that does not come out of a
    /// reservation, if the free blocks then cover every reservation, every
    /// claim, `keep` blocks more and, while anything is reserved, `pool`
    /// (what writeback of the reserved data may need besides; see
    /// [`DelallocSpace::reserve_space`]). The caller allocates at most `n`
    /// blocks while it holds the claim.
    pub fn claim(&self, n: u64, keep: u64, pool: u64, free: impl FnOnce() -> u64) -> Option<Claim<'_>> {
        self.claimed.fetch_add(n, Ordering::SeqCst);
        let c = Claim(self, n);
        let reserved = self.reserved.load(Ordering::SeqCst);
        let pool = if reserved > 0 { pool } else { 0 };
        (reserved + self.claimed.load(Ordering::SeqCst) + keep + pool <= free()).then_some(c)
    }
}
