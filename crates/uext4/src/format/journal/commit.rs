//! Commit blocks, closing a transaction: commit time and a crc32 over the
//! transaction's blocks (COMPAT_CHECKSUM) or a crc32c of the commit block
//! itself (csum v2/v3).

use super::bad;
use super::bytes::{be32, be64, put_be32, put_be64};
use super::features::JournalFeatures;
use super::header::{blocktype, expect_header, BlockHeader};
use crate::error::{CorruptKind, Error, Result};
use crate::format::checksum::crc32c;

/// Size of `struct commit_header` (the part of a commit block in use).
pub const COMMIT_HEADER_SIZE: usize = 60;

/// Offset of `h_chksum[0]` in a commit block.
const COMMIT_CHECKSUM_OFFSET: usize = 0x10;

/// A commit block (`struct commit_header`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommitBlock {
    /// Transaction id.
    pub sequence: u32,
    /// Checksum type of `chksum` (1 = crc32 for checksum v1; 0 otherwise).
    pub chksum_type: u8,
    /// Checksum size in bytes (4 for crc32; 0 otherwise).
    pub chksum_size: u8,
    /// `h_chksum[]`: the first word is the crc32 (v1) or the commit block's crc32c (v2/v3).
    pub chksum: [u32; 8],
    /// Commit time, seconds.
    pub commit_sec: u64,
    /// Commit time, nanoseconds.
    pub commit_nsec: u32,
}

impl CommitBlock {
    /// Parses a commit block (header must say COMMIT).
    pub fn parse(block: &[u8]) -> Result<CommitBlock> {
        let h = expect_header(block, blocktype::COMMIT, "commit block")?;
        if block.len() < COMMIT_HEADER_SIZE {
            return Err(bad(CorruptKind::TooShort { len: block.len(), need: COMMIT_HEADER_SIZE }));
        }
        let mut chksum = [0u32; 8];
        for (i, c) in chksum.iter_mut().enumerate() {
            *c = be32(block, COMMIT_CHECKSUM_OFFSET + 4 * i);
        }
        Ok(CommitBlock {
            sequence: h.sequence,
            chksum_type: block[0xC],
            chksum_size: block[0xD],
            chksum,
            commit_sec: be64(block, 0x30),
            commit_nsec: be32(block, 0x38),
        })
    }

    /// Encodes the commit block into `buf` (one journal block, zeroed
    /// first). With csum v2/v3, `h_chksum[0]` is replaced by the block's
    /// checksum.
    pub fn encode(&self, buf: &mut [u8], features: &JournalFeatures, csum_seed: u32) -> Result<()> {
        if buf.len() < COMMIT_HEADER_SIZE {
            return Err(Error::Invalid("block too small for a commit block".into()));
        }
        buf.fill(0);
        BlockHeader::new(blocktype::COMMIT, self.sequence).encode(buf);
        buf[0xC] = self.chksum_type;
        buf[0xD] = self.chksum_size;
        for (i, c) in self.chksum.iter().enumerate() {
            put_be32(buf, COMMIT_CHECKSUM_OFFSET + 4 * i, *c);
        }
        put_be64(buf, 0x30, self.commit_sec);
        put_be32(buf, 0x38, self.commit_nsec);
        if features.csum_v2or3() {
            let c = commit_checksum(csum_seed, buf);
            put_be32(buf, COMMIT_CHECKSUM_OFFSET, c);
        }
        Ok(())
    }
}

/// crc32c(seed, commit block) with `h_chksum[0]` taken as zero.
pub fn commit_checksum(seed: u32, block: &[u8]) -> u32 {
    if block.len() < COMMIT_CHECKSUM_OFFSET + 4 {
        return crc32c(seed, block);
    }
    let c = crc32c(seed, &block[..COMMIT_CHECKSUM_OFFSET]);
    let c = crc32c(c, &[0u8; 4]);
    crc32c(c, &block[COMMIT_CHECKSUM_OFFSET + 4..])
}

/// The checksum of a commit block whose header reached the disk but whose
/// tail did not: crc32c(seed) over the 60-byte header (with `h_chksum[0]`
/// zero) followed by zeros up to the block size. The kernel accepts a
/// commit block that matches this ("incomplete commit block").
pub fn commit_partial_checksum(seed: u32, block: &[u8]) -> u32 {
    let head = block.len().min(COMMIT_HEADER_SIZE);
    let mut tmp = [0u8; COMMIT_HEADER_SIZE];
    tmp[..head].copy_from_slice(&block[..head]);
    if head >= COMMIT_CHECKSUM_OFFSET + 4 {
        tmp[COMMIT_CHECKSUM_OFFSET..COMMIT_CHECKSUM_OFFSET + 4].fill(0);
    }
    let mut c = crc32c(seed, &tmp[..head]);
    let zeros = [0u8; 256];
    let mut rest = block.len() - head;
    while rest > 0 {
        let n = rest.min(zeros.len());
        c = crc32c(c, &zeros[..n]);
        rest -= n;
    }
    c
}

/// True if the commit block's csum v2/v3 checksum matches, in full or as an
/// incomplete commit block (see [`commit_partial_checksum`]). Always true
/// without csum v2/v3.
pub fn verify_commit_checksum(features: &JournalFeatures, seed: u32, block: &[u8]) -> bool {
    if !features.csum_v2or3() {
        return true;
    }
    let stored = be32(block, COMMIT_CHECKSUM_OFFSET);
    stored == commit_checksum(seed, block) || stored == commit_partial_checksum(seed, block)
}

#[cfg(test)]
mod tests {
    use crate::format::journal::test_util::*;
    use crate::format::journal::*;

    #[test]
    fn commit_round_trip_and_checksums() {
        let seed = journal_csum_seed(&[4; 16]);
        let c = CommitBlock {
            sequence: 9,
            chksum_type: checksum_type::CRC32,
            chksum_size: 4,
            chksum: [1, 2, 3, 4, 5, 6, 7, 8],
            commit_sec: 1_700_000_000,
            commit_nsec: 123,
        };
        for f in all_formats() {
            let mut buf = vec![0xEEu8; 4096];
            c.encode(&mut buf, &f, seed).unwrap();
            let p = CommitBlock::parse(&buf).unwrap();
            if f.csum_v2or3() {
                assert_eq!(p.chksum[0], commit_checksum(seed, &buf));
                assert_eq!(CommitBlock { chksum: [p.chksum[0], 2, 3, 4, 5, 6, 7, 8], ..c }, p);
                assert!(verify_commit_checksum(&f, seed, &buf));
                // A torn tail is accepted as an incomplete commit block.
                buf[3000] = 1;
                assert!(verify_commit_checksum(&f, seed, &buf));
                // A damaged header is not.
                buf[0x31] ^= 1;
                assert!(!verify_commit_checksum(&f, seed, &buf));
            } else {
                assert_eq!(p, c);
                assert!(verify_commit_checksum(&f, seed, &buf));
            }
        }
        let mut buf = vec![0u8; 1024];
        BlockHeader::new(blocktype::DESCRIPTOR, 1).encode(&mut buf);
        assert!(CommitBlock::parse(&buf).is_err());
        assert!(CommitBlock::parse(&buf[..20]).is_err());
    }
}
