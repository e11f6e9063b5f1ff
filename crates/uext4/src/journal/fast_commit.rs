//! Scanning the fast-commit area at recovery, as the kernel's
//! `ext4_fc_replay_scan` (called by jbd2's `fc_do_one_pass`) does.
//!
//! The area is the journal blocks after the normal log (`j_fc_first =
//! j_last + 1` up to the end of the journal). Fast commits there belong to
//! the transaction after the last full commit found in the log (jbd2's
//! `end_transaction`); anything else is stale. The rules, block by block
//! from the area's first block:
//!
//! - the first block must start with a HEAD tag, or there is nothing to
//!   replay; a HEAD with unknown features, or for another transaction,
//!   ends the scan;
//! - every tag's crc32c (seed 0) is chained until a TAIL: a TAIL whose
//!   transaction id and crc match makes every tag up to it valid, and
//!   restarts the crc; a TAIL that does not match, an unknown tag or a
//!   wrong value length ends the scan;
//! - only the tags up to the last valid TAIL count: a torn last fast
//!   commit is dropped whole.
//!
//! What to do with the valid tags is the caller's business
//! ([`super::recovery`], which hands them to the engine's replay).
//! [`build_area`] lays tags out as the kernel does, for tests and tools.

use crate::error::Result;
use crate::format::checksum::crc32c;
use crate::format::journal::{parse_fc_tags, FcTag, FC_SUPPORTED_FEATURES, FC_TAIL_CRC_OFFSET, FC_TL_SIZE};

/// The valid part of a fast-commit area.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FcScan {
    /// Every tag up to and including the last valid TAIL, in log order
    /// (the kernel's `fc_replay_num_tags` of them).
    pub tags: Vec<FcTag>,
    /// Valid fast commits (valid TAILs).
    pub commits: u32,
    /// Blocks of the area read.
    pub blocks_read: u32,
}

impl FcScan {
    /// True if there is something to replay.
    pub fn has_tags(&self) -> bool {
        !self.tags.is_empty()
    }

    /// Tags that change the filesystem (not HEAD, PAD or TAIL).
    pub fn change_tags(&self) -> usize {
        self.tags.iter().filter(|t| !matches!(t, FcTag::Head { .. } | FcTag::Pad | FcTag::Tail { .. })).count()
    }
}

/// Scans `blocks` fast-commit blocks read by `read(index, buf)` (index 0 is
/// the area's first block) for fast commits of transaction `expected_tid`.
/// A read error ends the scan (what was valid before it stays valid).
pub fn scan_area(
    read: &mut dyn FnMut(u32, &mut [u8]) -> Result<()>,
    blocks: u32,
    block_size: usize,
    inode_size: usize,
    expected_tid: u32,
) -> FcScan {
    let mut out = FcScan::default();
    let mut pending: Vec<FcTag> = Vec::new();
    let mut crc = 0u32;
    let mut buf = vec![0u8; block_size];
    for index in 0..blocks {
        if read(index, &mut buf).is_err() {
            break;
        }
        out.blocks_read += 1;
        let records = parse_fc_tags(&buf, inode_size);
        if index == 0 && !matches!(records.first().map(|r| &r.tag), Some(FcTag::Head { .. })) {
            return out;
        }
        for rec in records {
            let bytes = &buf[rec.offset..rec.offset + rec.record_len];
            match rec.tag {
                FcTag::Invalid { .. } => return out,
                FcTag::Head { features, tid } => {
                    if features & !FC_SUPPORTED_FEATURES != 0 || tid != expected_tid {
                        return out;
                    }
                    crc = crc32c(crc, bytes);
                    pending.push(rec.tag);
                }
                FcTag::Tail { tid, crc: stored } => {
                    crc = crc32c(crc, &bytes[..FC_TL_SIZE + FC_TAIL_CRC_OFFSET]);
                    if tid != expected_tid || stored != crc {
                        return out;
                    }
                    pending.push(rec.tag);
                    out.tags.append(&mut pending);
                    out.commits += 1;
                    crc = 0;
                }
                tag => {
                    crc = crc32c(crc, bytes);
                    pending.push(tag);
                }
            }
        }
    }
    out
}

/// Builds fast-commit blocks from tags, as the kernel lays them out: a tag
/// that does not fit in the rest of a block goes to the next one, the rest
/// padded with a PAD tag; every TAIL gets its crc. For tests and tools.
#[cfg(test)]
pub fn build_area(tags: &[FcTag], block_size: usize) -> Vec<Vec<u8>> {
    use crate::format::journal::encode_fc_tag;
    let mut blocks = Vec::new();
    let mut cur: Vec<u8> = Vec::new();
    let mut crc = 0u32;
    let pad_out = |cur: &mut Vec<u8>, crc: &mut u32, blocks: &mut Vec<Vec<u8>>| {
        let rest = block_size - cur.len();
        if rest >= FC_TL_SIZE {
            let mut pad = encode_fc_tag(&FcTag::Pad);
            pad[2..4].copy_from_slice(&((rest - FC_TL_SIZE) as u16).to_le_bytes());
            pad.resize(rest, 0);
            *crc = crc32c(*crc, &pad);
            cur.extend_from_slice(&pad);
        }
        cur.resize(block_size, 0);
        blocks.push(std::mem::take(cur));
    };
    for tag in tags {
        let mut bytes = encode_fc_tag(tag);
        if cur.len() + bytes.len() > block_size {
            pad_out(&mut cur, &mut crc, &mut blocks);
        }
        if let FcTag::Tail { .. } = tag {
            crc = crc32c(crc, &bytes[..FC_TL_SIZE + FC_TAIL_CRC_OFFSET]);
            let off = FC_TL_SIZE + FC_TAIL_CRC_OFFSET;
            bytes[off..off + 4].copy_from_slice(&crc.to_le_bytes());
            crc = 0;
        } else {
            crc = crc32c(crc, &bytes);
        }
        cur.extend_from_slice(&bytes);
    }
    if !cur.is_empty() {
        pad_out(&mut cur, &mut crc, &mut blocks);
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::journal::{fc_tag, FcExtent};

    const BS: usize = 1024;

    fn commit(tid: u32, ino: u32, with_head: bool) -> Vec<FcTag> {
        let mut v = Vec::new();
        if with_head {
            v.push(FcTag::Head { features: 0, tid });
        }
        v.push(FcTag::AddRange {
            ino,
            extent: FcExtent { lblk: 0, len: 1, unwritten: false, pblk: 500 + u64::from(ino) },
        });
        v.push(FcTag::Dentry { kind: fc_tag::CREAT, parent: 2, ino, name: format!("f{ino}").into_bytes() });
        v.push(FcTag::Inode { ino, raw: vec![ino as u8; 256] });
        v.push(FcTag::Tail { tid, crc: 0 });
        v
    }

    fn scan(blocks: &[Vec<u8>], tid: u32) -> FcScan {
        let mut read = |i: u32, buf: &mut [u8]| -> Result<()> {
            buf.copy_from_slice(&blocks[i as usize]);
            Ok(())
        };
        scan_area(&mut read, blocks.len() as u32, BS, 256, tid)
    }

    fn area(n: u32, tid: u32) -> Vec<Vec<u8>> {
        let tags: Vec<FcTag> = (0..n).flat_map(|i| commit(tid, 20 + i, i == 0)).collect();
        let mut b = build_area(&tags, BS);
        let n = b.len().max(8);
        b.resize(n, vec![0u8; BS]);
        b
    }

    #[test]
    fn valid_commits_are_found() {
        let s = scan(&area(5, 9), 9);
        assert_eq!(s.commits, 5);
        assert_eq!(s.change_tags(), 15);
        assert!(matches!(s.tags.first(), Some(FcTag::Head { tid: 9, .. })));
        assert!(matches!(s.tags.last(), Some(FcTag::Tail { tid: 9, .. })));
    }

    #[test]
    fn another_transaction_is_stale() {
        assert!(!scan(&area(3, 9), 10).has_tags());
        assert!(!scan(&area(3, 9), 8).has_tags());
    }

    #[test]
    fn no_head_nothing_to_replay() {
        let tags: Vec<FcTag> = commit(9, 20, false);
        let b = build_area(&tags, BS);
        assert!(!scan(&b, 9).has_tags());
    }

    #[test]
    fn torn_last_commit_is_dropped() {
        let mut b = area(5, 9);
        let full = scan(&b, 9);
        // Corrupt the last byte of the last tail: its crc no longer matches.
        let (bi, off) = last_tail(&b);
        b[bi][off + FC_TL_SIZE + FC_TAIL_CRC_OFFSET] ^= 0xff;
        let s = scan(&b, 9);
        assert_eq!(s.commits, 4);
        assert_eq!(s.change_tags(), 12);
        assert_eq!(&s.tags[..], &full.tags[..s.tags.len()]);
        // Corrupting a tag inside the first commit (crc mismatch at its
        // tail) leaves nothing.
        let mut b = area(5, 9);
        b[0][FC_TL_SIZE + 8 + FC_TL_SIZE + 4] ^= 1;
        assert!(!scan(&b, 9).has_tags());
    }

    fn last_tail(blocks: &[Vec<u8>]) -> (usize, usize) {
        let mut found = (0, 0);
        for (i, b) in blocks.iter().enumerate() {
            for r in parse_fc_tags(b, 256) {
                if matches!(r.tag, FcTag::Tail { .. }) {
                    found = (i, r.offset);
                }
            }
        }
        found
    }

    #[test]
    fn read_error_keeps_what_was_valid() {
        let b = area(40, 3);
        assert!(b.iter().filter(|x| x.iter().any(|&c| c != 0)).count() > 2, "commits span blocks");
        let all = scan(&b, 3);
        assert_eq!(all.commits, 40);
        let mut read = |i: u32, buf: &mut [u8]| -> Result<()> {
            if i == 2 {
                return Err(crate::error::Error::Io(std::io::Error::other("boom")));
            }
            buf.copy_from_slice(&b[i as usize]);
            Ok(())
        };
        let s = scan_area(&mut read, b.len() as u32, BS, 256, 3);
        assert!(s.commits > 0 && s.commits < 40, "{}", s.commits);
    }
}
