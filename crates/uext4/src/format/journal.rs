//! The jbd2 journal's on-disk format (pure codecs, no I/O).
//!
//! Everything in jbd2 is **big-endian**, unlike the rest of ext4. Every
//! journal block that is not a data block starts with a 12-byte header
//! (magic, block type, transaction id). The structures:
//!
//! - the journal superblock (v1 or v2, 1024 bytes at journal block 0),
//!   protected (csum v2/v3) by `crc32c(~0, sb with s_checksum zeroed)`;
//! - descriptor blocks: an array of block tags, one per data block that
//!   follows in the log (tag layout depends on the 64bit, csum v2 and
//!   csum v3 features, see [`JournalFeatures::tag_bytes`]), closed by a
//!   checksum tail (csum v2/v3);
//! - commit blocks, closing a transaction (commit time; a crc32 over the
//!   transaction's blocks with the old COMPAT_CHECKSUM feature, or a crc32c
//!   of the commit block itself with csum v2/v3);
//! - revoke blocks: block numbers whose earlier log copies must not be
//!   replayed, closed by a checksum tail (csum v2/v3).
//!
//! All checksums except the superblock's start from the journal seed,
//! `crc32c(~0, s_uuid)`. Data blocks are checksummed in their descriptor tag:
//! `crc32c(crc32c(seed, be32 tid), data)` (all 32 bits with csum v3, the low
//! 16 with csum v2).
//!
//! Parsers check lengths before indexing and counts before trusting them;
//! encoders are used by tests and by the journal writer.

use super::checksum::crc32c;
use crate::error::{Error, Result, Structure};

/// The jbd2 magic number, first word of every journal metadata block.
pub const JBD2_MAGIC: u32 = 0xC03B_3998;
/// Size of the common block header.
pub const HEADER_SIZE: usize = 12;
/// Size of the journal superblock.
pub const SUPERBLOCK_SIZE: usize = 1024;
/// Size of the checksum tail of descriptor and revoke blocks (csum v2/v3).
pub const TAIL_SIZE: usize = 4;
/// Size of `struct commit_header` (the part of a commit block in use).
pub const COMMIT_HEADER_SIZE: usize = 60;
/// Size of the revoke block header (block header + `r_count`).
pub const REVOKE_HEADER_SIZE: usize = 16;
/// Size of the UUID that follows a tag without [`tag_flag::SAME_UUID`].
pub const TAG_UUID_SIZE: usize = 16;
/// Smallest journal the kernel accepts, in blocks.
pub const MIN_JOURNAL_BLOCKS: u32 = 1024;
/// Fast-commit blocks when the superblock does not say (`s_num_fc_blks == 0`).
pub const DEFAULT_FC_BLOCKS: u32 = 256;
/// Offset of `s_checksum` in the journal superblock.
const SB_CHECKSUM_OFFSET: usize = 0xFC;
/// Offset of `h_chksum[0]` in a commit block.
const COMMIT_CHECKSUM_OFFSET: usize = 0x10;

/// Journal block types (`h_blocktype`).
pub mod blocktype {
    /// A descriptor block: tags for the data blocks that follow.
    pub const DESCRIPTOR: u32 = 1;
    /// A commit block: the end of a transaction.
    pub const COMMIT: u32 = 2;
    /// Journal superblock, version 1.
    pub const SUPERBLOCK_V1: u32 = 3;
    /// Journal superblock, version 2.
    pub const SUPERBLOCK_V2: u32 = 4;
    /// A revoke block.
    pub const REVOKE: u32 = 5;
}

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

/// Descriptor tag flags (`t_flags`).
pub mod tag_flag {
    /// The data block's first 4 bytes were the jbd2 magic and were zeroed
    /// in the log; replay puts the magic back.
    pub const ESCAPE: u16 = 0x1;
    /// No UUID follows this tag (it is the same as the previous one).
    pub const SAME_UUID: u16 = 0x2;
    /// The block was deleted by the transaction (unused).
    pub const DELETED: u16 = 0x4;
    /// The last tag of the descriptor block.
    pub const LAST_TAG: u16 = 0x8;
}

/// Checksum algorithms (`s_checksum_type`, `h_chksum_type`).
pub mod checksum_type {
    /// crc32 (the COMPAT_CHECKSUM commit checksum).
    pub const CRC32: u8 = 1;
    /// MD5 (never used by Linux).
    pub const MD5: u8 = 2;
    /// SHA1 (never used by Linux).
    pub const SHA1: u8 = 3;
    /// crc32c (csum v2/v3).
    pub const CRC32C: u8 = 4;
    /// Size of a crc32 commit checksum.
    pub const CRC32_SIZE: u8 = 4;
}

/// Name of a journal checksum type, as dumpe2fs prints it.
pub fn checksum_type_name(t: u8) -> String {
    match t {
        checksum_type::CRC32 => "crc32".into(),
        checksum_type::MD5 => "md5".into(),
        checksum_type::SHA1 => "sha1".into(),
        checksum_type::CRC32C => "crc32c".into(),
        other => format!("unknown ({other})"),
    }
}

fn bad(detail: impl Into<String>) -> Error {
    Error::corrupt(Structure::Journal, 0, detail)
}

// ---------------------------------------------------------------------------
// Big-endian field access
// ---------------------------------------------------------------------------

/// Reads a big-endian u16 at `off`, or 0 if the slice is too short.
#[inline]
pub fn be16(b: &[u8], off: usize) -> u16 {
    match off.checked_add(2).and_then(|end| b.get(off..end)) {
        Some(s) => u16::from_be_bytes([s[0], s[1]]),
        None => 0,
    }
}

/// Reads a big-endian u32 at `off`, or 0 if the slice is too short.
#[inline]
pub fn be32(b: &[u8], off: usize) -> u32 {
    match off.checked_add(4).and_then(|end| b.get(off..end)) {
        Some(s) => u32::from_be_bytes([s[0], s[1], s[2], s[3]]),
        None => 0,
    }
}

/// Reads a big-endian u64 at `off`, or 0 if the slice is too short.
#[inline]
pub fn be64(b: &[u8], off: usize) -> u64 {
    match off.checked_add(8).and_then(|end| b.get(off..end)) {
        Some(s) => u64::from_be_bytes(s.try_into().unwrap_or([0; 8])),
        None => 0,
    }
}

/// Writes a big-endian u16 at `off`; ignored if the slice is too short.
#[inline]
pub fn put_be16(b: &mut [u8], off: usize, v: u16) {
    if let Some(s) = off.checked_add(2).and_then(|end| b.get_mut(off..end)) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

/// Writes a big-endian u32 at `off`; ignored if the slice is too short.
#[inline]
pub fn put_be32(b: &mut [u8], off: usize, v: u32) {
    if let Some(s) = off.checked_add(4).and_then(|end| b.get_mut(off..end)) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

/// Writes a big-endian u64 at `off`; ignored if the slice is too short.
#[inline]
pub fn put_be64(b: &mut [u8], off: usize, v: u64) {
    if let Some(s) = off.checked_add(8).and_then(|end| b.get_mut(off..end)) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

// ---------------------------------------------------------------------------
// crc32 (big-endian), for COMPAT_CHECKSUM
// ---------------------------------------------------------------------------

const CRC32_BE_TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = (i as u32) << 24;
        let mut j = 0;
        while j < 8 {
            c = if c & 0x8000_0000 != 0 { (c << 1) ^ 0x04C1_1DB7 } else { c << 1 };
            j += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// The kernel's `crc32_be`: MSB-first CRC-32 (polynomial 0x04C11DB7), no
/// reflection and no final inversion. jbd2's checksum v1 (COMPAT_CHECKSUM)
/// runs it from `~0` over every descriptor and data block of a transaction.
pub fn crc32_be(mut crc: u32, data: &[u8]) -> u32 {
    for &b in data {
        crc = (crc << 8) ^ CRC32_BE_TABLE[usize::from((crc >> 24) as u8 ^ b)];
    }
    crc
}

// ---------------------------------------------------------------------------
// Features
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Block header
// ---------------------------------------------------------------------------

/// The 12-byte header of every journal metadata block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockHeader {
    /// Should be [`JBD2_MAGIC`].
    pub magic: u32,
    /// One of [`blocktype`].
    pub blocktype: u32,
    /// Transaction id.
    pub sequence: u32,
}

impl BlockHeader {
    /// A header with the jbd2 magic.
    pub fn new(blocktype: u32, sequence: u32) -> BlockHeader {
        BlockHeader { magic: JBD2_MAGIC, blocktype, sequence }
    }

    /// Reads the header; `None` if `b` is shorter than a header.
    pub fn parse(b: &[u8]) -> Option<BlockHeader> {
        if b.len() < HEADER_SIZE {
            return None;
        }
        Some(BlockHeader { magic: be32(b, 0), blocktype: be32(b, 4), sequence: be32(b, 8) })
    }

    /// True if the magic is jbd2's.
    pub fn is_journal_block(&self) -> bool {
        self.magic == JBD2_MAGIC
    }

    /// Writes the header at the start of `b`.
    pub fn encode(&self, b: &mut [u8]) {
        put_be32(b, 0, self.magic);
        put_be32(b, 4, self.blocktype);
        put_be32(b, 8, self.sequence);
    }
}

fn expect_header(b: &[u8], blocktype: u32, what: &str) -> Result<BlockHeader> {
    let h = BlockHeader::parse(b).ok_or_else(|| bad(format!("{what} block too short")))?;
    if !h.is_journal_block() {
        return Err(bad(format!("{what} block has bad magic {:#010x}", h.magic)));
    }
    if h.blocktype != blocktype {
        return Err(bad(format!("{what} block has block type {}", h.blocktype)));
    }
    Ok(h)
}

// ---------------------------------------------------------------------------
// Superblock
// ---------------------------------------------------------------------------

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

/// The seed of every journal checksum except the superblock's.
pub fn journal_csum_seed(uuid: &[u8; 16]) -> u32 {
    crc32c(!0, uuid)
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
            .ok_or_else(|| bad("journal superblock truncated"))?;
        let b = &raw[..];
        let magic = be32(b, 0);
        if magic != JBD2_MAGIC {
            return Err(bad(format!("journal superblock has bad magic {magic:#010x}")));
        }
        let blocktype = be32(b, 4);
        match blocktype {
            blocktype::SUPERBLOCK_V1 | blocktype::SUPERBLOCK_V2 => {}
            blocktype::DESCRIPTOR | blocktype::COMMIT | blocktype::REVOKE => {
                return Err(bad(format!("journal superblock has block type {blocktype}")));
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
            return Err(bad("journal has both checksum v2 and v3"));
        }
        if f.csum_v2or3() && f.checksum_v1() {
            return Err(bad("journal has both checksum v1 and v2/v3"));
        }
        if f.csum_v2or3() {
            if self.checksum_type != checksum_type::CRC32C {
                return Err(bad(format!("journal checksum type {} is not crc32c", self.checksum_type)));
            }
            let computed = superblock_checksum(&self.raw[..]);
            if computed != self.checksum {
                return Err(Error::Checksum {
                    structure: Structure::Journal,
                    block: 0,
                    stored: self.checksum,
                    computed,
                });
            }
        }
        let bs = self.block_size;
        if !(1024..=65536).contains(&bs) || !bs.is_power_of_two() {
            return Err(bad(format!("journal block size {bs} invalid")));
        }
        if self.maxlen < MIN_JOURNAL_BLOCKS {
            return Err(bad(format!("journal too short ({} blocks)", self.maxlen)));
        }
        if self.first == 0 || self.first >= self.maxlen {
            return Err(bad(format!("invalid first log block {} (journal has {} blocks)", self.first, self.maxlen)));
        }
        let last = self.log_end();
        if self.first >= last {
            return Err(bad(format!("first log block {} beyond the log end {last}", self.first)));
        }
        if self.start != 0 && (self.start < self.first || self.start >= last) {
            return Err(bad(format!("log start {} outside the log [{}, {last})", self.start, self.first)));
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

// ---------------------------------------------------------------------------
// Block tails (descriptor and revoke blocks, csum v2/v3)
// ---------------------------------------------------------------------------

/// crc32c(seed, block) with the last 4 bytes (the tail) taken as zero.
pub fn tail_checksum(seed: u32, block: &[u8]) -> u32 {
    let split = block.len().saturating_sub(TAIL_SIZE);
    let c = crc32c(seed, &block[..split]);
    crc32c(c, &[0u8; TAIL_SIZE][..block.len() - split])
}

/// The checksum stored in the tail of a descriptor or revoke block.
pub fn stored_tail_checksum(block: &[u8]) -> u32 {
    be32(block, block.len().saturating_sub(TAIL_SIZE))
}

/// True if the tail checksum of a descriptor or revoke block is right.
pub fn verify_tail_checksum(seed: u32, block: &[u8]) -> bool {
    block.len() >= TAIL_SIZE && stored_tail_checksum(block) == tail_checksum(seed, block)
}

/// Stores the tail checksum of a descriptor or revoke block.
pub fn set_tail_checksum(seed: u32, block: &mut [u8]) {
    let c = tail_checksum(seed, block);
    let off = block.len().saturating_sub(TAIL_SIZE);
    put_be32(block, off, c);
}

// ---------------------------------------------------------------------------
// Descriptor blocks and tags
// ---------------------------------------------------------------------------

/// One descriptor tag: where a logged block goes home.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockTag {
    /// Filesystem block the logged copy belongs to (high 32 bits only with
    /// the 64bit feature).
    pub block: u64,
    /// [`tag_flag`] bits.
    pub flags: u16,
    /// Data block checksum: 32 bits with csum v3, 16 bits with csum v2
    /// (the low half of the crc), otherwise whatever the field holds.
    pub checksum: u32,
    /// The UUID following the tag (present when [`tag_flag::SAME_UUID`] is
    /// clear and it fits in the block).
    pub uuid: Option<[u8; 16]>,
}

impl BlockTag {
    /// True if the block was escaped in the log.
    pub fn escaped(&self) -> bool {
        self.flags & tag_flag::ESCAPE != 0
    }
    /// True if this is the last tag of its descriptor.
    pub fn is_last(&self) -> bool {
        self.flags & tag_flag::LAST_TAG != 0
    }
}

/// Reads the tags of a descriptor block the way the kernel's `count_tags`
/// and replay loop walk them: from byte 12, while a whole tag fits before
/// the checksum tail, skipping the 16-byte UUID after tags without
/// SAME_UUID, up to and including the first tag with LAST_TAG. The block
/// header is not checked here. At most `block.len() / tag_bytes` tags.
pub fn parse_tags(block: &[u8], features: &JournalFeatures) -> Vec<BlockTag> {
    let tag_bytes = features.tag_bytes();
    let limit = block.len().saturating_sub(features.tail_bytes());
    let mut out = Vec::new();
    let mut off = HEADER_SIZE;
    while off + tag_bytes <= limit {
        let t = &block[off..off + tag_bytes];
        let flags = be16(t, 6);
        let mut blocknr = u64::from(be32(t, 0));
        if features.has_64bit() {
            blocknr |= u64::from(be32(t, 8)) << 32;
        }
        let checksum = if features.csum_v3() { be32(t, 12) } else { u32::from(be16(t, 4)) };
        off += tag_bytes;
        let mut uuid = None;
        if flags & tag_flag::SAME_UUID == 0 {
            if let Some(u) = block.get(off..off + TAG_UUID_SIZE) {
                let mut a = [0u8; 16];
                a.copy_from_slice(u);
                uuid = Some(a);
            }
            off += TAG_UUID_SIZE;
        }
        out.push(BlockTag { block: blocknr, flags, checksum, uuid });
        if flags & tag_flag::LAST_TAG != 0 {
            break;
        }
    }
    out
}

/// How many tags fit in one descriptor block when the first carries a UUID
/// and the others SAME_UUID (what the kernel's commit writes).
pub fn descriptor_capacity(block_size: usize, features: &JournalFeatures) -> usize {
    let room = block_size.saturating_sub(HEADER_SIZE + features.tail_bytes() + TAG_UUID_SIZE);
    room / features.tag_bytes()
}

/// Encodes a descriptor block into `buf` (one journal block, zeroed first):
/// header, the tags in order with their flags as given (a UUID, zero if
/// `uuid` is `None`, after every tag without SAME_UUID), and the tail
/// checksum with csum v2/v3. Block numbers need the 64bit feature above
/// 2^32. The caller sets LAST_TAG on the last tag.
pub fn encode_descriptor(
    buf: &mut [u8],
    sequence: u32,
    tags: &[BlockTag],
    features: &JournalFeatures,
    csum_seed: u32,
) -> Result<()> {
    let tag_bytes = features.tag_bytes();
    let limit = buf.len().checked_sub(features.tail_bytes()).ok_or_else(|| Error::Invalid("block too small".into()))?;
    buf.fill(0);
    BlockHeader::new(blocktype::DESCRIPTOR, sequence).encode(buf);
    let mut off = HEADER_SIZE;
    for tag in tags {
        let need = tag_bytes + if tag.flags & tag_flag::SAME_UUID == 0 { TAG_UUID_SIZE } else { 0 };
        if off + need > limit {
            return Err(Error::Invalid(format!("{} tags do not fit in a descriptor block", tags.len())));
        }
        if !features.has_64bit() && tag.block > u64::from(u32::MAX) {
            return Err(Error::Invalid(format!("block {} needs the journal 64bit feature", tag.block)));
        }
        let t = &mut buf[off..off + tag_bytes];
        put_be32(t, 0, tag.block as u32);
        if features.csum_v3() {
            put_be32(t, 4, u32::from(tag.flags));
            put_be32(t, 12, tag.checksum);
        } else {
            put_be16(t, 4, tag.checksum as u16);
            put_be16(t, 6, tag.flags);
        }
        if features.has_64bit() {
            put_be32(t, 8, (tag.block >> 32) as u32);
        }
        off += tag_bytes;
        if tag.flags & tag_flag::SAME_UUID == 0 {
            buf[off..off + TAG_UUID_SIZE].copy_from_slice(&tag.uuid.unwrap_or([0; 16]));
            off += TAG_UUID_SIZE;
        }
    }
    if features.csum_v2or3() {
        set_tail_checksum(csum_seed, buf);
    }
    Ok(())
}

/// The full crc32c of a logged data block: `crc32c(crc32c(seed, be32
/// sequence), data)`, computed over the block as it is in the log (after
/// escaping).
pub fn data_block_checksum(csum_seed: u32, sequence: u32, data: &[u8]) -> u32 {
    let c = crc32c(csum_seed, &sequence.to_be_bytes());
    crc32c(c, data)
}

/// The value a tag stores for `data` (32 bits with csum v3, the low 16
/// with csum v2, 0 without checksums).
pub fn tag_checksum_value(features: &JournalFeatures, csum_seed: u32, sequence: u32, data: &[u8]) -> u32 {
    if features.csum_v3() {
        data_block_checksum(csum_seed, sequence, data)
    } else if features.csum_v2() {
        data_block_checksum(csum_seed, sequence, data) & 0xFFFF
    } else {
        0
    }
}

/// True if the tag's checksum matches `data` (always true without csum
/// v2/v3).
pub fn verify_tag_checksum(
    features: &JournalFeatures,
    tag: &BlockTag,
    csum_seed: u32,
    sequence: u32,
    data: &[u8],
) -> bool {
    !features.csum_v2or3() || tag.checksum == tag_checksum_value(features, csum_seed, sequence, data)
}

/// Escapes a data block for the log: if it starts with the jbd2 magic, the
/// first 4 bytes are zeroed and true is returned (the tag then needs
/// [`tag_flag::ESCAPE`]).
pub fn escape_block(data: &mut [u8]) -> bool {
    if be32(data, 0) == JBD2_MAGIC {
        data[..4].fill(0);
        true
    } else {
        false
    }
}

/// Undoes [`escape_block`]: puts the magic back.
pub fn unescape_block(data: &mut [u8]) {
    put_be32(data, 0, JBD2_MAGIC);
}

// ---------------------------------------------------------------------------
// Commit blocks
// ---------------------------------------------------------------------------

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
        let h = expect_header(block, blocktype::COMMIT, "commit")?;
        if block.len() < COMMIT_HEADER_SIZE {
            return Err(bad("commit block too short"));
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

// ---------------------------------------------------------------------------
// Revoke blocks
// ---------------------------------------------------------------------------

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
        let h = expect_header(block, blocktype::REVOKE, "revoke")?;
        if block.len() < REVOKE_HEADER_SIZE {
            return Err(bad("revoke block too short"));
        }
        let r_count = be32(block, 12) as usize;
        let limit = block.len().saturating_sub(features.tail_bytes());
        if r_count > limit {
            return Err(bad(format!("revoke block byte count {r_count} exceeds the block ({limit} bytes)")));
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
    use super::*;

    fn feats(compat: u32, incompat: u32) -> JournalFeatures {
        JournalFeatures { compat, incompat, ro_compat: 0 }
    }

    const V3_64: u32 = feature::INCOMPAT_CSUM_V3 | feature::INCOMPAT_64BIT | feature::INCOMPAT_REVOKE;

    #[test]
    fn crc32_be_matches_standard_vector() {
        // CRC-32/MPEG-2 ("123456789") = 0x0376E6E7: init ~0, MSB first, no xorout.
        assert_eq!(crc32_be(!0, b"123456789"), 0x0376_E6E7);
        assert_eq!(crc32_be(!0, b""), !0);
    }

    #[test]
    fn tag_bytes_match_the_kernel() {
        use feature::*;
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

    #[test]
    fn header_round_trip() {
        let mut b = [0u8; 12];
        let h = BlockHeader::new(blocktype::REVOKE, 0xdead_beef);
        h.encode(&mut b);
        assert_eq!(b[..4], [0xC0, 0x3B, 0x39, 0x98]);
        assert_eq!(BlockHeader::parse(&b), Some(h));
        assert_eq!(BlockHeader::parse(&b[..11]), None);
    }

    fn sample_sb(features: JournalFeatures) -> JournalSuperblock {
        let mut sb = JournalSuperblock::new_v2(4096, 2048, 1, 7, features, [7; 16]);
        sb.start = 5;
        sb.errno = -5;
        sb.num_fc_blocks = 0;
        sb.head = 9;
        sb
    }

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

    fn all_formats() -> Vec<JournalFeatures> {
        use feature::*;
        vec![
            feats(0, 0),
            feats(0, INCOMPAT_64BIT),
            feats(COMPAT_CHECKSUM, 0),
            feats(0, INCOMPAT_CSUM_V2),
            feats(0, INCOMPAT_CSUM_V2 | INCOMPAT_64BIT),
            feats(0, INCOMPAT_CSUM_V3),
            feats(0, INCOMPAT_CSUM_V3 | INCOMPAT_64BIT),
        ]
    }

    #[test]
    fn descriptor_round_trip_in_every_format() {
        let seed = journal_csum_seed(&[3; 16]);
        for f in all_formats() {
            for bs in [1024usize, 4096] {
                let cap = descriptor_capacity(bs, &f);
                let big = if f.has_64bit() { 1u64 << 40 } else { 0 };
                let mut tags: Vec<BlockTag> = (0..cap)
                    .map(|i| BlockTag {
                        block: big + 1000 + i as u64,
                        flags: if i == 0 { tag_flag::ESCAPE } else { tag_flag::SAME_UUID },
                        checksum: if f.csum_v3() {
                            0x1234_5678 + i as u32
                        } else if f.csum_v2() {
                            0xBEEF
                        } else {
                            0
                        },
                        uuid: if i == 0 { Some([9; 16]) } else { None },
                    })
                    .collect();
                tags.last_mut().unwrap().flags |= tag_flag::LAST_TAG;
                let mut buf = vec![0u8; bs];
                encode_descriptor(&mut buf, 42, &tags, &f, seed).unwrap();
                let h = BlockHeader::parse(&buf).unwrap();
                assert_eq!((h.blocktype, h.sequence), (blocktype::DESCRIPTOR, 42));
                assert_eq!(parse_tags(&buf, &f), tags, "{f:?} {bs}");
                if f.csum_v2or3() {
                    assert!(verify_tail_checksum(seed, &buf));
                    buf[20] ^= 1;
                    assert!(!verify_tail_checksum(seed, &buf));
                }
                // One tag more does not fit.
                let mut more = tags.clone();
                more.push(BlockTag { block: 1, flags: tag_flag::SAME_UUID, checksum: 0, uuid: None });
                assert!(encode_descriptor(&mut buf, 42, &more, &f, seed).is_err());
            }
        }
    }

    #[test]
    fn parse_tags_without_last_tag_stops_at_the_block_end() {
        let f = feats(0, V3_64);
        let mut buf = vec![0u8; 1024];
        BlockHeader::new(blocktype::DESCRIPTOR, 1).encode(&mut buf);
        // All-zero tags: no SAME_UUID, so each takes 16 + 16 bytes.
        let tags = parse_tags(&buf, &f);
        assert_eq!(tags.len(), (1024 - 12 - 4) / 32 + usize::from((1024 - 12 - 4) % 32 >= 16));
        assert!(parse_tags(&buf[..10], &f).is_empty());
    }

    #[test]
    fn data_tag_checksums() {
        let seed = journal_csum_seed(&[1; 16]);
        let data = vec![0x5Au8; 4096];
        let full = data_block_checksum(seed, 77, &data);
        let v3 = feats(0, feature::INCOMPAT_CSUM_V3);
        let v2 = feats(0, feature::INCOMPAT_CSUM_V2);
        let tag = |c| BlockTag { block: 1, flags: 0, checksum: c, uuid: None };
        assert!(verify_tag_checksum(&v3, &tag(full), seed, 77, &data));
        assert!(!verify_tag_checksum(&v3, &tag(full), seed, 78, &data));
        assert!(verify_tag_checksum(&v2, &tag(full & 0xFFFF), seed, 77, &data));
        assert!(!verify_tag_checksum(&v2, &tag(full), seed, 77, &data) || full <= 0xFFFF);
        assert!(verify_tag_checksum(&feats(0, 0), &tag(0), seed, 77, &data));
    }

    #[test]
    fn escape_round_trip() {
        let mut d = vec![0u8; 1024];
        d[..4].copy_from_slice(&JBD2_MAGIC.to_be_bytes());
        d[4] = 7;
        let orig = d.clone();
        assert!(escape_block(&mut d));
        assert_eq!(&d[..5], &[0, 0, 0, 0, 7]);
        unescape_block(&mut d);
        assert_eq!(d, orig);
        let mut plain = vec![1u8; 16];
        assert!(!escape_block(&mut plain));
    }

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

    #[test]
    fn parsers_survive_garbage() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for len in [0usize, 1, 11, 12, 59, 60, 1024, 4096] {
            for _ in 0..50 {
                let buf: Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                for f in all_formats() {
                    let _ = parse_tags(&buf, &f);
                    let _ = RevokeBlock::parse(&buf, &f);
                    let _ = verify_commit_checksum(&f, 1, &buf);
                }
                let _ = CommitBlock::parse(&buf);
                let _ = JournalSuperblock::parse(&buf);
                let _ = verify_tail_checksum(1, &buf);
                let _ = commit_partial_checksum(1, &buf);
            }
        }
    }
}
