//! Block-mapped special files (ext2/ext3, `-O ^extent`): the journal,
//! orphan and quota files laid out as mke2fs lays them, each indirect
//! block just before the first data block it maps, all in one walk over
//! the blocks reserved for the file.

use crate::error::{Error, Result};

/// Direct block pointers in `i_block`.
const NDIR: u64 = 12;

/// A block-mapped file's mapping: `i_block` and its indirect blocks.
#[derive(Debug, Clone, Default)]
pub struct BlockMap {
    /// The inode's 15 block pointers (12 direct, single, double, triple).
    pub i_block: [u32; 15],
    /// Every indirect block: its block number and its entries (a block
    /// of `block_size / 4` little-endian pointers, zero past the end).
    pub indirect: Vec<(u64, Vec<u32>)>,
    /// The data blocks, as runs (start, len) in logical order.
    pub data: Vec<(u64, u32)>,
}

impl BlockMap {
    /// `i_block` as the inode's 60 raw bytes.
    pub fn i_block_bytes(&self) -> [u8; 60] {
        let mut b = [0u8; 60];
        for (i, w) in self.i_block.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// An indirect block's raw bytes.
    pub fn encode(entries: &[u32]) -> Vec<u8> {
        entries.iter().flat_map(|e| e.to_le_bytes()).collect()
    }
}

/// Indirect blocks needed to map `n` data blocks with `bs`-byte blocks.
pub fn meta_blocks(n: u64, bs: u32) -> u64 {
    let p = u64::from(bs / 4);
    let mut m = 0;
    let mut left = n.saturating_sub(NDIR);
    if left == 0 {
        return 0;
    }
    // Single indirect.
    m += 1;
    left = left.saturating_sub(p);
    if left == 0 {
        return m;
    }
    // Double: the top block and one per `p` data blocks.
    let two = left.min(p * p);
    m += 1 + two.div_ceil(p);
    left -= two;
    if left == 0 {
        return m;
    }
    // Triple: the top block, one per p*p and one per p data blocks.
    m + 1 + left.div_ceil(p * p) + left.div_ceil(p)
}

/// Maps `n` data blocks onto the blocks of `runs` (which hold exactly
/// `n + meta_blocks(n, bs)` blocks), in mke2fs's order: each indirect
/// block (higher levels first) takes the next block just before the data
/// block that first needs it.
pub fn build(runs: &[(u64, u32)], n: u64, bs: u32) -> Result<BlockMap> {
    let p = u64::from(bs / 4);
    let mut phys = runs.iter().flat_map(|&(s, l)| s..s + u64::from(l));
    let mut next = || phys.next().ok_or_else(|| Error::Invalid("mkfs: block-mapped file outgrew its blocks".into()));
    let ptr =
        |b: u64| u32::try_from(b).map_err(|_| Error::Invalid(format!("block {b} above 2^32 in a block-mapped file")));
    let mut map = BlockMap::default();
    // Index into `map.indirect` of the open node at each depth.
    let mut open = [0usize; 3];
    for i in 0..n {
        let (level, off) = if i < NDIR {
            (0, i)
        } else if i - NDIR < p {
            (1, i - NDIR)
        } else if i - NDIR - p < p * p {
            (2, i - NDIR - p)
        } else if i - NDIR - p - p * p < p * p * p {
            (3, i - NDIR - p - p * p)
        } else {
            return Err(Error::Invalid(format!("{n} blocks are too many for a block-mapped file")));
        };
        // The path's digits in base p, most significant first.
        let mut digits = [0u64; 3];
        let mut rest = off;
        for d in (0..level).rev() {
            digits[d] = rest % p;
            rest /= p;
        }
        if level == 0 {
            let b = next()?;
            map.i_block[i as usize] = ptr(b)?;
            push_run(&mut map.data, b);
            continue;
        }
        for d in 0..level {
            // A new node at depth d when every digit below it is zero.
            if digits[d..level].iter().all(|&x| x == 0) {
                let b = next()?;
                if d == 0 {
                    map.i_block[NDIR as usize + level - 1] = ptr(b)?;
                } else {
                    map.indirect[open[d - 1]].1[digits[d - 1] as usize] = ptr(b)?;
                }
                map.indirect.push((b, vec![0; p as usize]));
                open[d] = map.indirect.len() - 1;
            }
        }
        let b = next()?;
        map.indirect[open[level - 1]].1[digits[level - 1] as usize] = ptr(b)?;
        push_run(&mut map.data, b);
    }
    Ok(map)
}

fn push_run(runs: &mut Vec<(u64, u32)>, b: u64) {
    match runs.last_mut() {
        Some((s, l)) if *s + u64::from(*l) == b => *l += 1,
        _ => runs.push((b, 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_order_match_mke2fs() {
        // mke2fs -t ext3 64M (1 KiB blocks): the 4096-block journal at 786.
        let n = 4096;
        let m = meta_blocks(n, 1024);
        assert_eq!(m, 1 + 1 + 15);
        let map = build(&[(786, (n + m) as u32)], n, 1024).unwrap();
        assert_eq!(map.i_block[..12], (786..798).collect::<Vec<u32>>()[..]);
        assert_eq!(map.i_block[12], 798);
        assert_eq!(map.i_block[13], 1055);
        assert_eq!(map.indirect[1].1[0], 1056);
        assert_eq!(map.indirect[2].1[0], 1057);
        assert_eq!(map.data.iter().map(|r| u64::from(r.1)).sum::<u64>(), n);
        for n in [0, 5, 12, 13, 268, 269, 300, 65804, 65805, 70000] {
            let m = meta_blocks(n, 1024);
            let map = build(&[(1000, (n + m) as u32)], n, 1024).unwrap();
            assert_eq!(map.indirect.len() as u64, m, "{n}");
        }
    }
}
