//! The multi-mount protection block (`struct mmp_struct`, feature `mmp`).
//!
//! A node that opens the filesystem read-write keeps changing the block's
//! sequence number every `s_mmp_update_interval` seconds; another node that
//! sees the number change while it waits knows the filesystem is in use.
//! The protocol itself lives in `fs/mmp.rs`; this is the pure codec.

use super::bytes::{le16, le32, le64};
use super::checksum::crc32c;
use crate::error::{CorruptKind, Error, Location, Result, Structure};

/// `mmp_magic`.
pub const MMP_MAGIC: u32 = 0x004D_4D50;
/// Sequence of a cleanly closed filesystem.
pub const SEQ_CLEAN: u32 = 0xFF4D_4D50;
/// Sequence written by e2fsck while it runs.
pub const SEQ_FSCK: u32 = 0xE24D_4D50;
/// Largest sequence of a filesystem in use.
pub const SEQ_MAX: u32 = 0xE24D_4D4F;
/// Smallest check interval in seconds (EXT4_MMP_MIN_CHECK_INTERVAL).
pub const MIN_CHECK_INTERVAL: u16 = 5;
/// Largest check interval in seconds (EXT4_MMP_MAX_CHECK_INTERVAL).
pub const MAX_CHECK_INTERVAL: u16 = 300;
/// Bytes of the structure at the start of the block.
pub const MMP_SIZE: usize = 1024;
const NODENAME: std::ops::Range<usize> = 16..80;
const BDEVNAME: std::ops::Range<usize> = 80..112;
const CHECK_INTERVAL: usize = 112;
const CHECKSUM: usize = 1020;

/// The decoded MMP block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mmp {
    /// Sequence number (a random number while in use, or [`SEQ_CLEAN`] /
    /// [`SEQ_FSCK`]).
    pub seq: u32,
    /// Time of the last update (seconds since the epoch).
    pub time: u64,
    /// Node that last updated the block (NUL-padded).
    pub nodename: [u8; 64],
    /// Device name the node used (NUL-padded).
    pub bdevname: [u8; 32],
    /// Seconds a node should wait to see an update (the updater's view).
    pub check_interval: u16,
}

impl Mmp {
    /// Decodes the first [`MMP_SIZE`] bytes of the MMP block `block`,
    /// checking the magic and, with metadata_csum (`csum_seed`), the
    /// checksum.
    pub fn parse(b: &[u8], block: u64, csum_seed: Option<u32>) -> Result<Mmp> {
        if b.len() < MMP_SIZE {
            return Err(Error::corruption(
                Structure::Mmp,
                Location::Block(block),
                CorruptKind::TooShort { len: b.len(), need: MMP_SIZE },
            ));
        }
        if le32(b, 0) != MMP_MAGIC {
            return Err(Error::corruption(
                Structure::Mmp,
                Location::Block(block),
                CorruptKind::BadMagic { found: u64::from(le32(b, 0)) },
            ));
        }
        if let Some(seed) = csum_seed {
            let want = crc32c(seed, &b[..CHECKSUM]);
            let have = le32(b, CHECKSUM);
            if want != have {
                return Err(Error::Checksum { structure: Structure::Mmp, block, ino: 0, stored: have, computed: want });
            }
        }
        let mut nodename = [0u8; 64];
        nodename.copy_from_slice(&b[NODENAME]);
        let mut bdevname = [0u8; 32];
        bdevname.copy_from_slice(&b[BDEVNAME]);
        Ok(Mmp { seq: le32(b, 4), time: le64(b, 8), nodename, bdevname, check_interval: le16(b, CHECK_INTERVAL) })
    }

    /// Encodes into the first [`MMP_SIZE`] bytes of `b` (the rest of the
    /// block is left alone), with the checksum when `csum_seed` is given.
    pub fn encode(&self, b: &mut [u8], csum_seed: Option<u32>) {
        let b = &mut b[..MMP_SIZE];
        b.fill(0);
        b[0..4].copy_from_slice(&MMP_MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&self.seq.to_le_bytes());
        b[8..16].copy_from_slice(&self.time.to_le_bytes());
        b[NODENAME].copy_from_slice(&self.nodename);
        b[BDEVNAME].copy_from_slice(&self.bdevname);
        b[CHECK_INTERVAL..CHECK_INTERVAL + 2].copy_from_slice(&self.check_interval.to_le_bytes());
        if let Some(seed) = csum_seed {
            let c = crc32c(seed, &b[..CHECKSUM]);
            b[CHECKSUM..CHECKSUM + 4].copy_from_slice(&c.to_le_bytes());
        }
    }

    /// True when the sequence says a node has the filesystem open (neither
    /// clean nor fsck).
    pub fn in_use(&self) -> bool {
        self.seq <= SEQ_MAX
    }
}

/// Copies `s` into a NUL-padded field, truncating it if needed.
pub fn name_field<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = s.len().min(N);
    out[..n].copy_from_slice(&s[..n]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_checksum() {
        let m = Mmp {
            seq: 1234,
            time: 99,
            nodename: name_field(b"host"),
            bdevname: name_field(b"loop0"),
            check_interval: 10,
        };
        let mut b = vec![0xAAu8; 4096];
        m.encode(&mut b, Some(7));
        assert_eq!(Mmp::parse(&b, 9, Some(7)).unwrap(), m);
        assert_eq!(b[MMP_SIZE], 0xAA);
        b[5] ^= 1;
        assert!(matches!(Mmp::parse(&b, 9, Some(7)), Err(Error::Checksum { .. })));
        assert!(Mmp::parse(&b, 9, None).is_ok());
        assert!(Mmp::parse(&b[..100], 9, None).is_err());
        assert!(Mmp::parse(&[0u8; 1024], 9, None).is_err());
    }

    #[test]
    fn sequence_classes() {
        let mut m = Mmp::parse(
            &{
                let mut b = [0u8; 1024];
                b[0..4].copy_from_slice(&MMP_MAGIC.to_le_bytes());
                b
            },
            1,
            None,
        )
        .unwrap();
        for (seq, used) in [(SEQ_CLEAN, false), (SEQ_FSCK, false), (SEQ_MAX, true), (0, true)] {
            m.seq = seq;
            assert_eq!(m.in_use(), used);
        }
    }
}
