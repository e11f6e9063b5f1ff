//! The journal superblock (v1 or v2, 1024 bytes at journal block 0),
//! protected (csum v2/v3) by `crc32c(~0, sb with s_checksum zeroed)`.

use super::bad;
use super::bytes::{be32, put_be32};
use super::checksum::{checksum_type, journal_csum_seed};
use super::features::JournalFeatures;
use super::header::{blocktype, JBD2_MAGIC};
use crate::error::{CorruptKind, Error, Result, Structure};
use crate::format::checksum::crc32c;

/// Size of the journal superblock.
pub const SUPERBLOCK_SIZE: usize = 1024;

/// Smallest journal the kernel accepts, in blocks.
pub const MIN_JOURNAL_BLOCKS: u32 = 1024;
/// Fast-commit blocks when the superblock does not say (`s_num_fc_blks == 0`).
pub const DEFAULT_FC_BLOCKS: u32 = 256;

/// Offset of `s_checksum` in the journal superblock.
const SB_CHECKSUM_OFFSET: usize = 0xFC;

/// A parsed journal superblock.
///
/// The raw bytes are kept so that encoding after a change preserves the
/// fields this version does not interpret (`s_users`, padding).
#[derive(Clone)]
pub struct JournalSuperblock {
    raw: Box<[u8; SUPERBLOCK_SIZE]>,
    /// [`blocktype::SUPERBLOCK_V1`] or [`blocktype::SUPERBLOCK_V2`].
    pub blocktype: u32,
    /// `h_sequence` of the superblock's own header (unused, normally 0).
    pub header_sequence: u32,
    /// Journal block size (`s_blocksize`).
    pub block_size: u32,
    /// Total blocks in the journal (`s_maxlen`).
    pub maxlen: u32,
    /// First block of log information (`s_first`).
    pub first: u32,
    /// First transaction id expected in the log (`s_sequence`).
    pub sequence: u32,
    /// Log block where the log starts; 0 when the log is empty (`s_start`).
    pub start: u32,
    /// Error recorded by a journal abort (`s_errno`, a negative errno).
    pub errno: i32,
    /// Feature words (zero for a v1 superblock).
    pub features: JournalFeatures,
    /// Journal UUID.
    pub uuid: [u8; 16],
    /// Number of filesystems sharing the journal.
    pub nr_users: u32,
    /// Location of a dynamic superblock copy (unused).
    pub dynsuper: u32,
    /// Limit of journal blocks per transaction (unused).
    pub max_transaction: u32,
    /// Limit of data blocks per transaction (unused).
    pub max_trans_data: u32,
    /// Checksum algorithm ([`checksum_type`]).
    pub checksum_type: u8,
    /// Fast-commit blocks (`s_num_fc_blks`; 0 means the default 256).
    pub num_fc_blocks: u32,
    /// First unused block when the log is empty (`s_head`).
    pub head: u32,
    /// Stored checksum (`s_checksum`).
    pub checksum: u32,
}

impl std::fmt::Debug for JournalSuperblock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournalSuperblock")
            .field("blocktype", &self.blocktype)
            .field("block_size", &self.block_size)
            .field("maxlen", &self.maxlen)
            .field("first", &self.first)
            .field("sequence", &self.sequence)
            .field("start", &self.start)
            .field("errno", &self.errno)
            .field("features", &self.features)
            .finish_non_exhaustive()
    }
}

/// crc32c of a journal superblock with `s_checksum` taken as zero. Unlike
/// every other journal checksum, it starts from `~0`, not the UUID seed.
pub fn superblock_checksum(raw: &[u8]) -> u32 {
    let head = raw.get(..SB_CHECKSUM_OFFSET).unwrap_or(raw);
    let c = crc32c(!0, head);
    let c = crc32c(c, &[0u8; 4]);
    crc32c(c, raw.get(SB_CHECKSUM_OFFSET + 4..SUPERBLOCK_SIZE).unwrap_or(&[]))
}

impl JournalSuperblock {
    /// Parses and validates a journal superblock from the first 1024 bytes
    /// of `bytes` (journal block 0).
    ///
    /// Checks what the kernel checks before trusting the journal: magic and
    /// version, unknown INCOMPAT/RO_COMPAT features (refused as
    /// [`Error::Unsupported`]), conflicting checksum features, the checksum
    /// type and checksum (csum v2/v3), the block size, and that `s_first`,
    /// `s_start` and `s_maxlen` describe a possible log.
    pub fn parse(bytes: &[u8]) -> Result<JournalSuperblock> {
        let raw: [u8; SUPERBLOCK_SIZE] = bytes
            .get(..SUPERBLOCK_SIZE)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| bad(CorruptKind::TooShort { len: bytes.len(), need: SUPERBLOCK_SIZE }))?;
        let b = &raw[..];
        let magic = be32(b, 0);
        if magic != JBD2_MAGIC {
            return Err(bad(CorruptKind::BadMagic { found: u64::from(magic) }));
        }
        let blocktype = be32(b, 4);
        match blocktype {
            blocktype::SUPERBLOCK_V1 | blocktype::SUPERBLOCK_V2 => {}
            blocktype::DESCRIPTOR | blocktype::COMMIT | blocktype::REVOKE => {
                return Err(bad(CorruptKind::WrongType {
                    expected: "journal superblock",
                    found: u64::from(blocktype),
                }));
            }
            other => return Err(Error::Unsupported(format!("journal superblock version (block type {other})"))),
        }
        let v2 = blocktype == blocktype::SUPERBLOCK_V2;
        let features = if v2 {
            JournalFeatures { compat: be32(b, 0x24), incompat: be32(b, 0x28), ro_compat: be32(b, 0x2C) }
        } else {
            JournalFeatures::default()
        };
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[0x30..0x40]);
        let sb = JournalSuperblock {
            blocktype,
            header_sequence: be32(b, 8),
            block_size: be32(b, 0xC),
            maxlen: be32(b, 0x10),
            first: be32(b, 0x14),
            sequence: be32(b, 0x18),
            start: be32(b, 0x1C),
            errno: be32(b, 0x20) as i32,
            features,
            uuid,
            nr_users: if v2 { be32(b, 0x40) } else { 0 },
            dynsuper: if v2 { be32(b, 0x44) } else { 0 },
            max_transaction: if v2 { be32(b, 0x48) } else { 0 },
            max_trans_data: if v2 { be32(b, 0x4C) } else { 0 },
            checksum_type: if v2 { b[0x50] } else { 0 },
            num_fc_blocks: if v2 { be32(b, 0x54) } else { 0 },
            head: if v2 { be32(b, 0x58) } else { 0 },
            checksum: be32(b, SB_CHECKSUM_OFFSET),
            raw: Box::new(raw),
        };
        sb.validate()?;
        Ok(sb)
    }

    fn validate(&self) -> Result<()> {
        let f = &self.features;
        if f.unknown_incompat() != 0 {
            let names = JournalFeatures { incompat: f.unknown_incompat(), ..Default::default() }.names();
            return Err(Error::Unsupported(format!("journal incompatible feature(s) {}", names.join(", "))));
        }
        if f.unknown_ro_compat() != 0 {
            let names = JournalFeatures { ro_compat: f.unknown_ro_compat(), ..Default::default() }.names();
            return Err(Error::Unsupported(format!("journal read-only compatible feature(s) {}", names.join(", "))));
        }
        if f.csum_v2() && f.csum_v3() {
            return Err(bad(CorruptKind::Conflict { a: "journal_checksum_v2", b: "journal_checksum_v3" }));
        }
        if f.csum_v2or3() && f.checksum_v1() {
            return Err(bad(CorruptKind::Conflict { a: "journal_checksum", b: "journal_checksum_v2/v3" }));
        }
        if f.csum_v2or3() {
            if self.checksum_type != checksum_type::CRC32C {
                return Err(bad(CorruptKind::Mismatch {
                    field: "s_checksum_type",
                    value: u64::from(self.checksum_type),
                    expected: u64::from(checksum_type::CRC32C),
                }));
            }
            let computed = superblock_checksum(&self.raw[..]);
            if computed != self.checksum {
                return Err(Error::Checksum {
                    structure: Structure::Journal,
                    block: 0,
                    ino: 0,
                    stored: self.checksum,
                    computed,
                });
            }
        }
        let bs = self.block_size;
        if !(1024..=65536).contains(&bs) || !bs.is_power_of_two() {
            return Err(bad(CorruptKind::OutOfRange { field: "s_blocksize", value: u64::from(bs) }));
        }
        if self.maxlen < MIN_JOURNAL_BLOCKS {
            return Err(bad(CorruptKind::OutsideRange {
                what: "s_maxlen",
                value: u64::from(self.maxlen),
                start: u64::from(MIN_JOURNAL_BLOCKS),
                end: u64::from(u32::MAX) + 1,
            }));
        }
        if self.first == 0 || self.first >= self.maxlen {
            return Err(bad(CorruptKind::OutsideRange {
                what: "s_first",
                value: u64::from(self.first),
                start: 1,
                end: u64::from(self.maxlen),
            }));
        }
        let last = self.log_end();
        if self.first >= last {
            return Err(bad(CorruptKind::OutsideRange {
                what: "s_first",
                value: u64::from(self.first),
                start: 1,
                end: u64::from(last),
            }));
        }
        if self.start != 0 && (self.start < self.first || self.start >= last) {
            return Err(bad(CorruptKind::OutsideRange {
                what: "s_start",
                value: u64::from(self.start),
                start: u64::from(self.first),
                end: u64::from(last),
            }));
        }
        Ok(())
    }

    /// A new, empty v2 superblock (what mke2fs writes), for tests and the
    /// journal writer. `s_nr_users` is 1, as for an internal journal.
    pub fn new_v2(
        block_size: u32,
        maxlen: u32,
        first: u32,
        sequence: u32,
        features: JournalFeatures,
        uuid: [u8; 16],
    ) -> JournalSuperblock {
        JournalSuperblock {
            raw: Box::new([0u8; SUPERBLOCK_SIZE]),
            blocktype: blocktype::SUPERBLOCK_V2,
            header_sequence: 0,
            block_size,
            maxlen,
            first,
            sequence,
            start: 0,
            errno: 0,
            features,
            uuid,
            nr_users: 1,
            dynsuper: 0,
            max_transaction: 0,
            max_trans_data: 0,
            checksum_type: if features.csum_v2or3() { checksum_type::CRC32C } else { 0 },
            num_fc_blocks: 0,
            head: 0,
            checksum: 0,
        }
    }

    /// True for a v2 superblock.
    pub fn is_v2(&self) -> bool {
        self.blocktype == blocktype::SUPERBLOCK_V2
    }

    /// The `s_users` array (16-byte ids of the filesystems sharing the log).
    pub fn users(&self) -> &[u8] {
        &self.raw[0x100..0x400]
    }

    /// The raw bytes as parsed (or as constructed).
    pub fn raw(&self) -> &[u8; SUPERBLOCK_SIZE] {
        &self.raw
    }

    /// Blocks of the fast-commit area (0 without fast commit).
    pub fn fc_blocks(&self) -> u32 {
        if !self.features.fast_commit() {
            0
        } else if self.num_fc_blocks == 0 {
            DEFAULT_FC_BLOCKS
        } else {
            self.num_fc_blocks
        }
    }

    /// One past the last block of the normal log (`j_last`): the fast-commit
    /// area, when there is one and the journal is big enough for it, takes
    /// the end of the journal, as the kernel lays it out.
    pub fn log_end(&self) -> u32 {
        let fc = self.fc_blocks();
        if fc != 0 && self.maxlen.saturating_sub(fc) >= MIN_JOURNAL_BLOCKS {
            self.maxlen - fc
        } else {
            self.maxlen
        }
    }

    /// The seed of the descriptor, commit, revoke and data checksums.
    pub fn csum_seed(&self) -> u32 {
        journal_csum_seed(&self.uuid)
    }

    /// Encodes the superblock: every field written over the raw bytes it was
    /// parsed from (v2 fields only for a v2 superblock), and `s_checksum`
    /// recomputed when csum v2/v3 is on. The stored [`Self::checksum`] is
    /// written as is otherwise.
    pub fn to_bytes(&self) -> [u8; SUPERBLOCK_SIZE] {
        let mut b = *self.raw;
        put_be32(&mut b, 0, JBD2_MAGIC);
        put_be32(&mut b, 4, self.blocktype);
        put_be32(&mut b, 8, self.header_sequence);
        put_be32(&mut b, 0xC, self.block_size);
        put_be32(&mut b, 0x10, self.maxlen);
        put_be32(&mut b, 0x14, self.first);
        put_be32(&mut b, 0x18, self.sequence);
        put_be32(&mut b, 0x1C, self.start);
        put_be32(&mut b, 0x20, self.errno as u32);
        if self.is_v2() {
            put_be32(&mut b, 0x24, self.features.compat);
            put_be32(&mut b, 0x28, self.features.incompat);
            put_be32(&mut b, 0x2C, self.features.ro_compat);
            b[0x30..0x40].copy_from_slice(&self.uuid);
            put_be32(&mut b, 0x40, self.nr_users);
            put_be32(&mut b, 0x44, self.dynsuper);
            put_be32(&mut b, 0x48, self.max_transaction);
            put_be32(&mut b, 0x4C, self.max_trans_data);
            b[0x50] = self.checksum_type;
            put_be32(&mut b, 0x54, self.num_fc_blocks);
            put_be32(&mut b, 0x58, self.head);
        } else {
            b[0x30..0x40].copy_from_slice(&self.uuid);
        }
        let csum = if self.features.csum_v2or3() { superblock_checksum(&b) } else { self.checksum };
        put_be32(&mut b, SB_CHECKSUM_OFFSET, csum);
        b
    }

    /// Recomputes [`Self::checksum`] as [`Self::to_bytes`] would store it.
    pub fn update_checksum(&mut self) {
        if self.features.csum_v2or3() {
            let b = self.to_bytes();
            self.checksum = be32(&b, SB_CHECKSUM_OFFSET);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::error::Error;
    use crate::format::journal::test_util::*;
    use crate::format::journal::*;

    #[test]
    fn superblock_round_trip_and_checksum() {
        for f in [feats(0, 0), feats(1, feature::INCOMPAT_64BIT), feats(0, V3_64), feats(0, feature::INCOMPAT_CSUM_V2)]
        {
            let sb = sample_sb(f);
            let b = sb.to_bytes();
            let p = JournalSuperblock::parse(&b).unwrap();
            assert_eq!(p.to_bytes(), b);
            assert_eq!((p.maxlen, p.first, p.sequence, p.start, p.errno, p.head), (2048, 1, 7, 5, -5, 9));
            assert_eq!(p.features, f);
            assert_eq!(p.uuid, [7; 16]);
            if f.csum_v2or3() {
                assert_eq!(p.checksum, superblock_checksum(&b));
                let mut bad = b;
                bad[0x1F] ^= 1;
                assert!(matches!(JournalSuperblock::parse(&bad), Err(Error::Checksum { .. })));
            }
        }
    }

    #[test]
    fn superblock_v1_ignores_v2_fields() {
        let mut b = sample_sb(feats(0, V3_64)).to_bytes();
        put_be32(&mut b, 4, blocktype::SUPERBLOCK_V1);
        let p = JournalSuperblock::parse(&b).unwrap();
        assert!(!p.is_v2());
        assert_eq!(p.features, JournalFeatures::default());
        assert_eq!(JournalSuperblock::parse(&p.to_bytes()).unwrap().start, 5);
    }

    #[test]
    fn superblock_rejects_bad_geometry_and_features() {
        let base = sample_sb(feats(0, feature::INCOMPAT_64BIT));
        let check = |f: &dyn Fn(&mut JournalSuperblock)| {
            let mut s = base.clone();
            f(&mut s);
            JournalSuperblock::parse(&s.to_bytes())
        };
        assert!(check(&|_| {}).is_ok());
        assert!(matches!(check(&|s| s.first = 0), Err(Error::Corrupt { .. })));
        assert!(matches!(check(&|s| s.first = 4000), Err(Error::Corrupt { .. })));
        assert!(matches!(check(&|s| s.start = 2048), Err(Error::Corrupt { .. })));
        assert!(matches!(check(&|s| s.maxlen = 100), Err(Error::Corrupt { .. })));
        assert!(matches!(check(&|s| s.block_size = 3000), Err(Error::Corrupt { .. })));
        assert!(matches!(check(&|s| s.features.incompat |= 0x40), Err(Error::Unsupported(_))));
        assert!(matches!(check(&|s| s.features.ro_compat |= 1), Err(Error::Unsupported(_))));
        assert!(matches!(
            check(&|s| s.features.incompat |= feature::INCOMPAT_CSUM_V2 | feature::INCOMPAT_CSUM_V3),
            Err(Error::Corrupt { .. })
        ));
        let mut b = base.to_bytes();
        put_be32(&mut b, 4, blocktype::COMMIT);
        assert!(matches!(JournalSuperblock::parse(&b), Err(Error::Corrupt { .. })));
        put_be32(&mut b, 4, 9);
        assert!(matches!(JournalSuperblock::parse(&b), Err(Error::Unsupported(_))));
        put_be32(&mut b, 0, 0);
        assert!(matches!(JournalSuperblock::parse(&b), Err(Error::Corrupt { .. })));
        assert!(JournalSuperblock::parse(&b[..100]).is_err());
    }

    #[test]
    fn fast_commit_area_takes_the_end() {
        let mut sb = sample_sb(feats(0, feature::INCOMPAT_FAST_COMMIT));
        assert_eq!(sb.log_end(), 2048 - 256);
        sb.num_fc_blocks = 100;
        assert_eq!(sb.log_end(), 1948);
        sb.maxlen = 1050;
        assert_eq!(sb.log_end(), 1050);
    }
}
