//! The per-group buddy structure: which blocks of one group are free, as
//! maximal aligned power-of-two chunks, with the counters the allocator's
//! criteria read.
//!
//! The source of truth is a bitmap (1 = in use). Derived from it, and
//! kept current on every change:
//! - for each order k, a bitmap of the 2^k-aligned chunks that are free as
//!   a whole while their parent chunk is not (the buddy system's canonical
//!   form, which equals "the maximal aligned chunks inside each free run");
//! - `counters[k]`, the number of such chunks (the kernel's bb_counters);
//! - the free count and the number of fragments (maximal free runs).
//!
//! A change only touches the free runs around the changed range, so an
//! update costs O(log group size) bitmap operations plus a short scan for
//! the run boundaries. Positions are relative to the group's first block.

/// One group's free-space state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buddy {
    nbits: u32,
    max_order: u32,
    used: Vec<u64>,
    orders: Vec<Vec<u64>>,
    counters: Vec<u32>,
    free: u32,
    fragments: u32,
}

#[inline]
fn get(bits: &[u64], i: u32) -> bool {
    bits[(i / 64) as usize] >> (i % 64) & 1 != 0
}
#[inline]
fn set(bits: &mut [u64], i: u32) {
    bits[(i / 64) as usize] |= 1 << (i % 64);
}
#[inline]
fn clear(bits: &mut [u64], i: u32) {
    bits[(i / 64) as usize] &= !(1 << (i % 64));
}

/// Sets (`value` true) or clears bits `start..end`, a word at a time.
fn fill(bits: &mut [u64], start: u32, end: u32, value: bool) {
    let mut i = start;
    while i < end {
        let w = (i / 64) as usize;
        let lo = i % 64;
        let n = (64 - lo).min(end - i);
        let mask = if n == 64 { u64::MAX } else { ((1u64 << n) - 1) << lo };
        if value {
            bits[w] |= mask;
        } else {
            bits[w] &= !mask;
        }
        i += n;
    }
}

/// First index >= `from` (and < `end`) whose bit equals `value`.
fn find(bits: &[u64], from: u32, end: u32, value: bool) -> Option<u32> {
    let mut i = from;
    while i < end {
        let w = (i / 64) as usize;
        let word = if value { bits[w] } else { !bits[w] } & (u64::MAX << (i % 64));
        if word != 0 {
            let pos = (w as u32) * 64 + word.trailing_zeros();
            return (pos < end).then_some(pos);
        }
        i = (w as u32 + 1) * 64;
    }
    None
}

/// Last index < `before` whose bit equals `value`.
fn rfind(bits: &[u64], before: u32, value: bool) -> Option<u32> {
    let mut i = before;
    while i > 0 {
        let last = i - 1;
        let w = (last / 64) as usize;
        let keep = last % 64;
        let mask = if keep == 63 { u64::MAX } else { (1u64 << (keep + 1)) - 1 };
        let word = if value { bits[w] } else { !bits[w] } & mask;
        if word != 0 {
            return Some(w as u32 * 64 + 63 - word.leading_zeros());
        }
        i = w as u32 * 64;
    }
    None
}

/// Order of a length: floor(log2(len)), for len >= 1.
#[inline]
pub fn order_of(len: u32) -> u32 {
    31 - len.max(1).leading_zeros()
}

impl Buddy {
    /// Builds the state of a group of `nbits` blocks from its bitmap
    /// (bit i of byte i/8 set = block i in use, as on disk). Bits past
    /// `nbits` are ignored.
    pub fn from_bitmap(bitmap: &[u8], nbits: u32) -> Buddy {
        let words = nbits.div_ceil(64) as usize;
        let max_order = order_of(nbits.max(1));
        let mut b = Buddy {
            nbits,
            max_order,
            used: vec![0; words],
            orders: (0..=max_order).map(|k| vec![0; (nbits >> k).div_ceil(64).max(1) as usize]).collect(),
            counters: vec![0; max_order as usize + 1],
            free: 0,
            fragments: 0,
        };
        // A word at a time (a bit at a time was most of a group's load):
        // bytes past the bitmap's end count as used, bits past `nbits`
        // stay clear.
        for (w, word) in b.used.iter_mut().enumerate() {
            let mut v = 0u64;
            for k in 0..8 {
                v |= u64::from(bitmap.get(w * 8 + k).copied().unwrap_or(0xFF)) << (8 * k);
            }
            *word = v;
        }
        if !nbits.is_multiple_of(64) {
            b.used[words - 1] &= (1u64 << (nbits % 64)) - 1;
        }
        let mut pos = 0;
        while let Some(a) = find(&b.used, pos, nbits, false) {
            let e = find(&b.used, a, nbits, true).unwrap_or(nbits);
            b.add_run(a, e);
            pos = e;
        }
        b
    }

    /// Blocks in the group.
    pub fn len(&self) -> u32 {
        self.nbits
    }

    /// Free blocks.
    pub fn free(&self) -> u32 {
        self.free
    }

    /// Maximal free runs.
    pub fn fragments(&self) -> u32 {
        self.fragments
    }

    /// Highest order with a free chunk, or `None` when full.
    pub fn largest_free_order(&self) -> Option<u32> {
        (0..=self.max_order).rev().find(|&k| self.counters[k as usize] > 0)
    }

    /// Order of the average free run length (free / fragments), the key of
    /// the CR1 lists; `None` when full.
    pub fn avg_fragment_order(&self) -> Option<u32> {
        (self.fragments > 0).then(|| order_of(self.free / self.fragments))
    }

    /// Free chunks per order (the kernel's bb_counters).
    pub fn counters(&self) -> &[u32] {
        &self.counters
    }

    /// True if block `i` is in use.
    pub fn is_used(&self, i: u32) -> bool {
        i >= self.nbits || get(&self.used, i)
    }

    /// True if every block of `start..start+len` is free.
    pub fn is_free_range(&self, start: u32, len: u32) -> bool {
        let Some(end) = start.checked_add(len).filter(|&e| e <= self.nbits) else { return false };
        len > 0 && find(&self.used, start, end, true).is_none()
    }

    /// True if every block of `start..start+len` is in use.
    pub fn is_used_range(&self, start: u32, len: u32) -> bool {
        let Some(end) = start.checked_add(len).filter(|&e| e <= self.nbits) else { return false };
        len > 0 && find(&self.used, start, end, false).is_none()
    }

    /// Records the free run `a..e` in the per-order bitmaps.
    fn add_run(&mut self, a: u32, e: u32) {
        self.for_chunks(a, e, |orders, counters, k, idx| {
            set(&mut orders[k as usize], idx);
            counters[k as usize] += 1;
        });
        self.free += e - a;
        self.fragments += 1;
    }

    /// Forgets the free run `a..e`.
    fn remove_run(&mut self, a: u32, e: u32) {
        self.for_chunks(a, e, |orders, counters, k, idx| {
            clear(&mut orders[k as usize], idx);
            counters[k as usize] -= 1;
        });
        self.free -= e - a;
        self.fragments -= 1;
    }

    /// Calls `f(order, index)` for each maximal aligned chunk of `a..e`.
    fn for_chunks(&mut self, a: u32, e: u32, mut f: impl FnMut(&mut [Vec<u64>], &mut [u32], u32, u32)) {
        let mut p = a;
        while p < e {
            let align = if p == 0 { self.max_order } else { p.trailing_zeros().min(self.max_order) };
            let k = align.min(order_of(e - p));
            f(&mut self.orders, &mut self.counters, k, p >> k);
            p += 1 << k;
        }
    }

    /// The free run containing free block `i`.
    fn run_around(&self, i: u32) -> (u32, u32) {
        let a = rfind(&self.used, i, true).map_or(0, |u| u + 1);
        let e = find(&self.used, i, self.nbits, true).unwrap_or(self.nbits);
        (a, e)
    }

    /// Marks `start..start+len` in use. Returns false (changing nothing)
    /// unless the whole range is free.
    pub fn mark_used(&mut self, start: u32, len: u32) -> bool {
        if !self.is_free_range(start, len) {
            return false;
        }
        let end = start + len;
        let (a, e) = self.run_around(start);
        self.remove_run(a, e);
        fill(&mut self.used, start, end, true);
        if a < start {
            self.add_run(a, start);
        }
        if end < e {
            self.add_run(end, e);
        }
        true
    }

    /// Marks `start..start+len` free. Returns false (changing nothing)
    /// unless the whole range is in use.
    pub fn mark_free(&mut self, start: u32, len: u32) -> bool {
        if !self.is_used_range(start, len) {
            return false;
        }
        let end = start + len;
        let a = if start > 0 && !get(&self.used, start - 1) { self.run_around(start - 1).0 } else { start };
        let e = if end < self.nbits && !get(&self.used, end) { self.run_around(end).1 } else { end };
        if a < start {
            self.remove_run(a, start);
        }
        if end < e {
            self.remove_run(end, e);
        }
        fill(&mut self.used, start, end, false);
        self.add_run(a, e);
        true
    }

    /// A free chunk of exactly order `k` or, failing that, the first
    /// chunk of a higher order (whose first 2^k blocks are then free and
    /// aligned): the buddy lookup of CR0. Returns the chunk's start.
    pub fn find_chunk(&self, k: u32) -> Option<u32> {
        for order in k..=self.max_order {
            let bits = &self.orders[order as usize];
            let n = (self.nbits >> order).max(1);
            if self.counters[order as usize] == 0 {
                continue;
            }
            if let Some(idx) = find(bits, 0, n, true) {
                return Some(idx << order);
            }
        }
        None
    }

    /// The free run starting at or after `from`, as (start, len).
    pub fn next_free_run(&self, from: u32) -> Option<(u32, u32)> {
        let a = find(&self.used, from, self.nbits, false)?;
        let e = find(&self.used, a, self.nbits, true).unwrap_or(self.nbits);
        Some((a, e - a))
    }

    /// The free run containing block `i`, if `i` is free, as (start, len).
    pub fn free_run_at(&self, i: u32) -> Option<(u32, u32)> {
        if self.is_used(i) {
            return None;
        }
        let (a, e) = self.run_around(i);
        Some((a, e - a))
    }

    /// The bitmap in on-disk form (`bytes` long; bits past the group are
    /// set, as the kernel pads them).
    #[cfg(test)]
    pub fn to_bitmap(&self, bytes: usize) -> Vec<u8> {
        let mut out = vec![0xFFu8; bytes];
        for i in 0..self.nbits.min(bytes as u32 * 8) {
            if !get(&self.used, i) {
                out[(i / 8) as usize] &= !(1 << (i % 8));
            }
        }
        out
    }

    /// Checks every derived field against a recomputation from the bitmap
    /// (tests and debug assertions).
    #[cfg(test)]
    pub fn check(&self) -> Result<(), String> {
        let fresh = Buddy::from_bitmap(&self.to_bitmap(self.nbits.div_ceil(8) as usize), self.nbits);
        if fresh != *self {
            return Err(format!(
                "buddy drifted: free {} vs {}, fragments {} vs {}, counters {:?} vs {:?}",
                self.free, fresh.free, self.fragments, fresh.fragments, self.counters, fresh.counters
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn canonical_chunks() {
        // Blocks 1..8 free in a 16-block group: chunks [1], [2,3], [4..8).
        let mut bm = vec![0xFFu8; 2];
        bm[0] = 0x01;
        let b = Buddy::from_bitmap(&bm, 16);
        assert_eq!(b.free(), 7);
        assert_eq!(b.fragments(), 1);
        assert_eq!(&b.counters()[..4], &[1, 1, 1, 0]);
        assert_eq!(b.largest_free_order(), Some(2));
        assert_eq!(b.find_chunk(2), Some(4));
        assert_eq!(b.find_chunk(1), Some(2));
        assert_eq!(b.find_chunk(3), None);
        assert_eq!(b.avg_fragment_order(), Some(2));
    }

    #[test]
    fn alloc_and_free_merge() {
        let mut b = Buddy::from_bitmap(&[0u8; 128], 1024);
        assert_eq!(b.largest_free_order(), Some(10));
        assert!(b.mark_used(100, 50));
        assert_eq!(b.fragments(), 2);
        assert!(!b.mark_used(120, 1), "double allocation refused");
        assert!(b.mark_free(100, 50));
        assert_eq!(b.fragments(), 1);
        assert_eq!(b.counters()[10], 1);
        assert!(!b.mark_free(0, 1), "double free refused");
        b.check().unwrap();
    }

    #[test]
    fn odd_sized_group() {
        let mut b = Buddy::from_bitmap(&[0u8; 100], 777);
        assert_eq!(b.free(), 777);
        assert!(b.mark_used(776, 1));
        assert!(!b.mark_used(777, 1));
        b.check().unwrap();
        let bm = b.to_bitmap(128);
        assert_eq!(bm[97] & 0x01, 1);
        assert_eq!(bm[127], 0xFF);
    }

    proptest! {
        #[test]
        fn random_ops_stay_consistent(
            nbits in 1u32..3000,
            seed in proptest::collection::vec(any::<u8>(), 0..400),
            ops in proptest::collection::vec((any::<bool>(), 0u32..3000, 1u32..200), 1..60),
        ) {
            let mut b = Buddy::from_bitmap(&seed, nbits);
            let mut model: Vec<bool> = (0..nbits).map(|i| b.is_used(i)).collect();
            for (alloc, start, len) in ops {
                let start = start % nbits;
                let ok = if alloc { b.mark_used(start, len) } else { b.mark_free(start, len) };
                let end = start.saturating_add(len);
                let in_range = end <= nbits;
                let all = in_range && (start..end).all(|i| model[i as usize] != alloc);
                prop_assert_eq!(ok, all);
                if ok {
                    for i in start..end { model[i as usize] = alloc; }
                }
                for i in 0..nbits { prop_assert_eq!(b.is_used(i), model[i as usize]); }
                prop_assert!(b.check().is_ok(), "{:?}", b.check());
                let free = model.iter().filter(|u| !**u).count() as u32;
                prop_assert_eq!(b.free(), free);
            }
        }
    }

    /// The word-at-a-time build agrees with a bit-at-a-time one, with
    /// group sizes that are not a multiple of 64 and short bitmaps.
    #[test]
    fn from_bitmap_matches_bitwise_build() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for nbits in [1u32, 7, 63, 64, 65, 200, 1000, 4096] {
            for len in [0usize, 3, (nbits as usize).div_ceil(8), 600] {
                let bm: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        (x & (x >> 8)) as u8
                    })
                    .collect();
                let b = Buddy::from_bitmap(&bm, nbits);
                let used = |i: u32| bm.get((i / 8) as usize).is_none_or(|byte| byte >> (i % 8) & 1 != 0);
                for i in 0..nbits {
                    assert_eq!(b.is_used(i), used(i), "nbits {nbits} len {len} bit {i}");
                }
                assert_eq!(b.free(), (0..nbits).filter(|&i| !used(i)).count() as u32);
                b.check().unwrap();
            }
        }
    }
}
