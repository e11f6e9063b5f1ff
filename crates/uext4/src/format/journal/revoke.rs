//! Revoke blocks: block numbers whose earlier log copies must not be
//! replayed, closed by a checksum tail (csum v2/v3).

use super::bad;
use super::bytes::{be32, be64, put_be32, put_be64};
use super::features::JournalFeatures;
use super::header::{blocktype, expect_header, BlockHeader};
use super::tail::set_tail_checksum;
use crate::error::{CorruptKind, Error, Result};

/// Size of the revoke block header (block header + `r_count`).
pub const REVOKE_HEADER_SIZE: usize = 16;

/// A revoke block: blocks whose log copies in this or earlier transactions
/// must not be replayed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RevokeBlock {
    /// Transaction id.
    pub sequence: u32,
    /// Revoked filesystem blocks.
    pub records: Vec<u64>,
}

impl RevokeBlock {
    /// Parses a revoke block. `r_count` (bytes used, header included) larger
    /// than the block minus its checksum tail is corruption (the kernel
    /// fails recovery with EINVAL); records are read while a whole record
    /// fits below `r_count`.
    pub fn parse(block: &[u8], features: &JournalFeatures) -> Result<RevokeBlock> {
        let h = expect_header(block, blocktype::REVOKE, "revoke block")?;
        if block.len() < REVOKE_HEADER_SIZE {
            return Err(bad(CorruptKind::TooShort { len: block.len(), need: REVOKE_HEADER_SIZE }));
        }
        let r_count = be32(block, 12) as usize;
        let limit = block.len().saturating_sub(features.tail_bytes());
        if r_count > limit {
            return Err(bad(CorruptKind::OutsideRange {
                what: "r_count",
                value: r_count as u64,
                start: 0,
                end: limit as u64 + 1,
            }));
        }
        let rec = features.revoke_record_bytes();
        let mut records = Vec::with_capacity(r_count.saturating_sub(REVOKE_HEADER_SIZE) / rec);
        let mut off = REVOKE_HEADER_SIZE;
        while off + rec <= r_count {
            let v = if rec == 8 { be64(block, off) } else { u64::from(be32(block, off)) };
            records.push(v);
            off += rec;
        }
        Ok(RevokeBlock { sequence: h.sequence, records })
    }

    /// Encodes the revoke block into `buf` (one journal block, zeroed
    /// first), with the tail checksum when csum v2/v3 is on. Fails if the
    /// records do not fit ([`revoke_capacity`]) or a block number needs
    /// 64 bits the journal does not have.
    pub fn encode(&self, buf: &mut [u8], features: &JournalFeatures, csum_seed: u32) -> Result<()> {
        let rec = features.revoke_record_bytes();
        if self.records.len() > revoke_capacity(buf.len(), features) {
            return Err(Error::Invalid(format!("{} revoke records do not fit in one block", self.records.len())));
        }
        buf.fill(0);
        BlockHeader::new(blocktype::REVOKE, self.sequence).encode(buf);
        let mut off = REVOKE_HEADER_SIZE;
        for &r in &self.records {
            if rec == 8 {
                put_be64(buf, off, r);
            } else {
                let v = u32::try_from(r)
                    .map_err(|_| Error::Invalid(format!("block {r} needs the journal 64bit feature")))?;
                put_be32(buf, off, v);
            }
            off += rec;
        }
        put_be32(buf, 12, off as u32);
        if features.csum_v2or3() {
            set_tail_checksum(csum_seed, buf);
        }
        Ok(())
    }
}

/// How many revoke records fit in one block.
pub fn revoke_capacity(block_size: usize, features: &JournalFeatures) -> usize {
    block_size.saturating_sub(REVOKE_HEADER_SIZE + features.tail_bytes()) / features.revoke_record_bytes()
}

#[cfg(test)]
mod tests {
    use crate::format::journal::test_util::*;
    use crate::format::journal::*;

    #[test]
    fn revoke_round_trip() {
        let seed = journal_csum_seed(&[5; 16]);
        for f in all_formats() {
            for bs in [1024usize, 4096] {
                let cap = revoke_capacity(bs, &f);
                let big = if f.has_64bit() { 1u64 << 33 } else { 0 };
                let r = RevokeBlock { sequence: 3, records: (0..cap as u64).map(|i| big + i * 3).collect() };
                let mut buf = vec![0u8; bs];
                r.encode(&mut buf, &f, seed).unwrap();
                assert_eq!(RevokeBlock::parse(&buf, &f).unwrap(), r);
                if f.csum_v2or3() {
                    assert!(verify_tail_checksum(seed, &buf));
                }
                let mut more = r.clone();
                more.records.push(1);
                assert!(more.encode(&mut buf, &f, seed).is_err());
            }
        }
        let f = feats(0, 0);
        let r = RevokeBlock { sequence: 1, records: vec![1 << 32] };
        assert!(r.encode(&mut [0u8; 1024], &f, 0).is_err());
    }

    #[test]
    fn revoke_rejects_huge_count() {
        let f = feats(0, V3_64);
        let mut buf = vec![0u8; 1024];
        RevokeBlock { sequence: 1, records: vec![5] }.encode(&mut buf, &f, 0).unwrap();
        put_be32(&mut buf, 12, 1021);
        assert!(RevokeBlock::parse(&buf, &f).is_err());
        put_be32(&mut buf, 12, u32::MAX);
        assert!(RevokeBlock::parse(&buf, &f).is_err());
        // Counts below the header give no records.
        put_be32(&mut buf, 12, 3);
        assert!(RevokeBlock::parse(&buf, &f).unwrap().records.is_empty());
    }
}
