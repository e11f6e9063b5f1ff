//! The journal superblock's feature words and what they imply for the
//! layout of the other journal blocks (tag size, revoke record size, tails).

use super::tail::TAIL_SIZE;

/// Journal feature bits.
pub mod feature {
    /// COMPAT: commit blocks carry a crc32 of the transaction (checksum v1).
    pub const COMPAT_CHECKSUM: u32 = 0x1;
    /// INCOMPAT: the log has revoke blocks.
    pub const INCOMPAT_REVOKE: u32 = 0x1;
    /// INCOMPAT: block numbers are 64 bits.
    pub const INCOMPAT_64BIT: u32 = 0x2;
    /// INCOMPAT: commit blocks are written without waiting for the data.
    pub const INCOMPAT_ASYNC_COMMIT: u32 = 0x4;
    /// INCOMPAT: checksum v2 (16-bit data block checksums in the tags).
    pub const INCOMPAT_CSUM_V2: u32 = 0x8;
    /// INCOMPAT: checksum v3 (32-bit data block checksums, fixed tag size).
    pub const INCOMPAT_CSUM_V3: u32 = 0x10;
    /// INCOMPAT: the journal has a fast-commit area.
    pub const INCOMPAT_FAST_COMMIT: u32 = 0x20;
    /// COMPAT features the kernel knows.
    pub const KNOWN_COMPAT: u32 = COMPAT_CHECKSUM;
    /// INCOMPAT features the kernel knows.
    pub const KNOWN_INCOMPAT: u32 = INCOMPAT_REVOKE
        | INCOMPAT_64BIT
        | INCOMPAT_ASYNC_COMMIT
        | INCOMPAT_CSUM_V2
        | INCOMPAT_CSUM_V3
        | INCOMPAT_FAST_COMMIT;
    /// RO_COMPAT features the kernel knows (none).
    pub const KNOWN_RO_COMPAT: u32 = 0;
}

/// The three feature words of a journal superblock (all zero for v1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JournalFeatures {
    /// Compatible features.
    pub compat: u32,
    /// Incompatible features.
    pub incompat: u32,
    /// Read-only compatible features.
    pub ro_compat: u32,
}

const FEATURE_NAMES: &[(u8, u32, &str)] = &[
    (b'C', feature::COMPAT_CHECKSUM, "journal_checksum"),
    (b'I', feature::INCOMPAT_REVOKE, "journal_incompat_revoke"),
    (b'I', feature::INCOMPAT_64BIT, "journal_64bit"),
    (b'I', feature::INCOMPAT_ASYNC_COMMIT, "journal_async_commit"),
    (b'I', feature::INCOMPAT_CSUM_V2, "journal_checksum_v2"),
    (b'I', feature::INCOMPAT_CSUM_V3, "journal_checksum_v3"),
    (b'I', feature::INCOMPAT_FAST_COMMIT, "journal_fast_commit"),
];

impl JournalFeatures {
    /// Block numbers are 64 bits wide (tags carry `t_blocknr_high`,
    /// revoke records are 8 bytes).
    pub fn has_64bit(&self) -> bool {
        self.incompat & feature::INCOMPAT_64BIT != 0
    }
    /// Checksum v1: a crc32 of the transaction in the commit block.
    pub fn checksum_v1(&self) -> bool {
        self.compat & feature::COMPAT_CHECKSUM != 0
    }
    /// Checksum v2.
    pub fn csum_v2(&self) -> bool {
        self.incompat & feature::INCOMPAT_CSUM_V2 != 0
    }
    /// Checksum v3.
    pub fn csum_v3(&self) -> bool {
        self.incompat & feature::INCOMPAT_CSUM_V3 != 0
    }
    /// Checksum v2 or v3: every metadata block and data tag is checksummed.
    pub fn csum_v2or3(&self) -> bool {
        self.csum_v2() || self.csum_v3()
    }
    /// Asynchronous commit.
    pub fn async_commit(&self) -> bool {
        self.incompat & feature::INCOMPAT_ASYNC_COMMIT != 0
    }
    /// Revoke records in use.
    pub fn revoke(&self) -> bool {
        self.incompat & feature::INCOMPAT_REVOKE != 0
    }
    /// The journal has a fast-commit area.
    pub fn fast_commit(&self) -> bool {
        self.incompat & feature::INCOMPAT_FAST_COMMIT != 0
    }

    /// Bytes of one descriptor tag, without the optional UUID, exactly as
    /// the kernel's `journal_tag_bytes`: 16 with csum v3; otherwise 12
    /// (`journal_block_tag_t`), plus 2 with csum v2, minus 4 without 64bit.
    pub fn tag_bytes(&self) -> usize {
        if self.csum_v3() {
            return 16;
        }
        let mut sz = 12;
        if self.csum_v2() {
            sz += 2;
        }
        if self.has_64bit() {
            sz
        } else {
            sz - 4
        }
    }

    /// Bytes of one revoke record.
    pub fn revoke_record_bytes(&self) -> usize {
        if self.has_64bit() {
            8
        } else {
            4
        }
    }

    /// Bytes at the end of descriptor and revoke blocks taken by the
    /// checksum tail.
    pub fn tail_bytes(&self) -> usize {
        if self.csum_v2or3() {
            TAIL_SIZE
        } else {
            0
        }
    }

    /// INCOMPAT bits this implementation (and the kernel) does not know.
    pub fn unknown_incompat(&self) -> u32 {
        self.incompat & !feature::KNOWN_INCOMPAT
    }

    /// RO_COMPAT bits this implementation (and the kernel) does not know.
    pub fn unknown_ro_compat(&self) -> u32 {
        self.ro_compat & !feature::KNOWN_RO_COMPAT
    }

    /// Feature names as dumpe2fs prints them ("Journal features:");
    /// unknown bits as `FEATURE_<C|I|R><bit>`.
    pub fn names(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (kind, word) in [(b'C', self.compat), (b'I', self.incompat), (b'R', self.ro_compat)] {
            for bit in 0..32 {
                let mask = 1u32 << bit;
                if word & mask == 0 {
                    continue;
                }
                match FEATURE_NAMES.iter().find(|(k, m, _)| *k == kind && *m == mask) {
                    Some((_, _, name)) => out.push((*name).to_string()),
                    None => out.push(format!("FEATURE_{}{bit}", kind as char)),
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::format::journal::test_util::*;
    use crate::format::journal::*;

    #[test]
    fn tag_bytes_match_the_kernel() {
        use super::feature::*;
        assert_eq!(feats(0, 0).tag_bytes(), 8);
        assert_eq!(feats(0, INCOMPAT_64BIT).tag_bytes(), 12);
        assert_eq!(feats(0, INCOMPAT_CSUM_V2).tag_bytes(), 10);
        assert_eq!(feats(0, INCOMPAT_CSUM_V2 | INCOMPAT_64BIT).tag_bytes(), 14);
        assert_eq!(feats(0, INCOMPAT_CSUM_V3).tag_bytes(), 16);
        assert_eq!(feats(0, INCOMPAT_CSUM_V3 | INCOMPAT_64BIT).tag_bytes(), 16);
        assert_eq!(feats(COMPAT_CHECKSUM, 0).tag_bytes(), 8);
    }

    #[test]
    fn feature_names() {
        let f = JournalFeatures { compat: 1, incompat: V3_64 | 0x100, ro_compat: 2 };
        assert_eq!(
            f.names(),
            vec![
                "journal_checksum",
                "journal_incompat_revoke",
                "journal_64bit",
                "journal_checksum_v3",
                "FEATURE_I8",
                "FEATURE_R1"
            ]
        );
    }
}
