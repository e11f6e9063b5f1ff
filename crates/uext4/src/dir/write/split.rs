//! Where a full leaf splits: the entries, sorted by hash, are cut between
//! different hashes where possible (else inside a run of equal hashes,
//! with the "continued" bit), so that both halves fit with the new entry.

use super::leaf::Item;

/// Splits sorted `items` at `s` and adds `item` to the half its hash
/// belongs to; returns the lower half and (first hash, upper half).
pub(super) fn halves(mut items: Vec<Item>, s: usize, item: Item) -> (Vec<Item>, (u32, Vec<Item>)) {
    let mut right = items.split_off(s);
    let hash2 = right[0].hash;
    if item.hash >= hash2 {
        right.push(item);
    } else {
        items.push(item);
    }
    (items, (hash2, right))
}

/// Chooses where to split `items` (sorted by hash, at least two) so that
/// both halves fit in `space` with `new` added to the half its hash goes
/// to (the upper one if its hash is at least the split hash). Splits
/// between different hashes are preferred; among those, the most even.
/// Returns the index of the first item of the upper half and whether the
/// split falls inside a run of equal hashes (the "continued" bit).
pub(super) fn choose_split(items: &[Item], new: &Item, space: usize) -> Option<(usize, bool)> {
    let total: usize = items.iter().map(Item::size).sum();
    let mut left = 0;
    let mut best: Option<((bool, usize), usize)> = None;
    for s in 1..items.len() {
        left += items[s - 1].size();
        let right = total - left;
        let hash2 = items[s].hash;
        let continued = items[s - 1].hash == hash2;
        let (l, r) = if new.hash >= hash2 { (left, right + new.size()) } else { (left + new.size(), right) };
        if l > space || r > space {
            continue;
        }
        let key = (continued, l.max(r));
        if best.as_ref().is_none_or(|(k, _)| key < *k) {
            best = Some((key, s));
        }
    }
    best.map(|((continued, _), s)| (s, continued))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(hash: u32, len: usize) -> Item {
        Item { hash, ino: 12, file_type: 1, name: vec![b'a'; len] }
    }

    #[test]
    fn split_prefers_hash_boundaries() {
        // Sizes 16 each; hashes 2,4,4,4,6,8.
        let items: Vec<Item> = [2u32, 4, 4, 4, 6, 8].iter().map(|&h| item(h, 8)).collect();
        let (s, c) = choose_split(&items, &item(10, 8), 1000).unwrap();
        assert!(!c);
        assert_ne!(items[s - 1].hash, items[s].hash);
        // All equal: must split inside the run.
        let same: Vec<Item> = (0..6).map(|_| item(4, 8)).collect();
        let (s, c) = choose_split(&same, &item(4, 8), 1000).unwrap();
        assert!(c);
        assert_eq!(s, 3);
    }

    #[test]
    fn split_respects_space() {
        // 4 entries of 264 bytes in 1012 bytes: each half must fit with
        // the new one.
        let items: Vec<Item> = (1..=3u32).map(|h| item(h * 2, 255)).collect();
        let new = item(100, 255);
        let (s, _) = choose_split(&items, &new, 1012).unwrap();
        let (l, (_, r)) = halves(items, s, new);
        assert!(l.iter().map(Item::size).sum::<usize>() <= 1012);
        assert!(r.iter().map(Item::size).sum::<usize>() <= 1012);
        assert!(!l.is_empty() && !r.is_empty());
    }
}
