//! Group lists by order: "largest free order" lists for CR0 and
//! "average fragment size order" lists for CR1/CR1.5.
//!
//! Each order has its own `RwLock<BTreeSet<group>>`. Lookups take one list
//! lock shared, copy a handful of candidates starting at the goal group
//! (so allocations stay near their goal and threads with different goals
//! pick different groups) and drop the lock before any group is locked.
//! Updates happen under the group's lock and take one list lock
//! exclusively: lock order is group -> list, never the reverse.

use parking_lot::RwLock;
use std::collections::BTreeSet;

/// One set of per-order group lists.
#[derive(Debug)]
pub struct OrderLists {
    lists: Vec<RwLock<BTreeSet<u32>>>,
}

impl OrderLists {
    /// Lists for orders `0..=max_order`.
    pub fn new(max_order: u32) -> OrderLists {
        OrderLists { lists: (0..=max_order).map(|_| RwLock::new(BTreeSet::new())).collect() }
    }

    /// Highest order a list exists for.
    pub fn max_order(&self) -> u32 {
        self.lists.len() as u32 - 1
    }

    /// Moves `group` from list `old` to list `new` (None = on no list).
    pub fn update(&self, group: u32, old: Option<u32>, new: Option<u32>) {
        if old == new {
            return;
        }
        if let Some(o) = old.and_then(|o| self.lists.get(o as usize)) {
            o.write().remove(&group);
        }
        if let Some(n) = new.and_then(|n| self.lists.get(n as usize)) {
            n.write().insert(group);
        }
    }

    /// True if list `order` has no group.
    pub fn is_empty(&self, order: u32) -> bool {
        self.lists.get(order as usize).is_none_or(|l| l.read().is_empty())
    }

    /// Up to `max` groups of list `order`, starting at `from` and wrapping.
    pub fn candidates(&self, order: u32, from: u32, max: usize) -> Vec<u32> {
        let Some(list) = self.lists.get(order as usize) else { return Vec::new() };
        let l = list.read();
        l.range(from..).chain(l.range(..from)).take(max).copied().collect()
    }

    /// Groups on each list (for statistics and consistency checks).
    #[cfg(test)]
    pub fn snapshot(&self) -> Vec<Vec<u32>> {
        self.lists.iter().map(|l| l.read().iter().copied().collect()).collect()
    }
}
