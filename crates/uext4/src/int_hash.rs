//! The hasher of the engine's tables keyed by one integer (inode numbers
//! in the inode lock table and the dirty-tid map, block numbers in the
//! buffer cache and the journal's transactions): those maps are looked up
//! on every read and write, and std's SipHash cost more than the rest of
//! the lookup.
//!
//! The keys come from the image (block and inode numbers), so a crafted
//! image could at worst make some lookups slower by colliding; it cannot
//! change what they find.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` keyed by an integer, hashed with [`IntHasher`].
pub(crate) type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// A `HashSet` of integers, hashed with [`IntHasher`].
pub(crate) type IntSet<K> = HashSet<K, BuildHasherDefault<IntHasher>>;

/// SplitMix64's finalizer over the key: every output bit depends on
/// every key bit, so hashbrown's bucket index (low bits) and its tag
/// (top seven bits) both vary among keys that a sharded table groups by
/// some of their bits (the inode lock table by `ino % 64`, the buffer
/// cache by the top bits of another multiplicative hash).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IntHasher(u64);

impl IntHasher {
    #[inline]
    fn mix(mut x: u64) -> u64 {
        x ^= x >> 30;
        x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x ^= x >> 27;
        x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }
}

impl Hasher for IntHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    /// Any other key type: folded in a byte at a time (not used by the
    /// engine's integer keys, kept correct for completeness).
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = Self::mix(self.0 ^ u64::from(b));
        }
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = Self::mix(self.0 ^ n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn keys_of_one_shard_spread_over_buckets_and_tags() {
        let b = BuildHasherDefault::<IntHasher>::default();
        // Inodes of one lock-table shard: equal modulo 64.
        let hashes: Vec<u64> = (0..4096u32).map(|k| b.hash_one(k * 64 + 5)).collect();
        let low: std::collections::HashSet<u64> = hashes.iter().map(|h| h & 1023).collect();
        let tags: std::collections::HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(low.len() > 900, "{} of 1024 buckets", low.len());
        assert_eq!(tags.len(), 128);
        let mut m: IntMap<u32, u32> = IntMap::default();
        for k in 0..1000 {
            m.insert(k, k * 2);
        }
        assert!((0..1000).all(|k| m.get(&k) == Some(&(k * 2))));
    }
}
