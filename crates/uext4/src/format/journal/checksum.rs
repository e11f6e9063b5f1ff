//! The journal's checksum algorithms: the crc32 of checksum v1
//! (COMPAT_CHECKSUM), the checksum type codes, and the seed every csum v2/v3
//! checksum except the superblock's starts from.

use crate::format::checksum::crc32c;

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

/// The seed of every journal checksum except the superblock's.
pub fn journal_csum_seed(uuid: &[u8; 16]) -> u32 {
    crc32c(!0, uuid)
}

#[cfg(test)]
mod tests {
    use crate::format::journal::*;

    #[test]
    fn crc32_be_matches_standard_vector() {
        // CRC-32/MPEG-2 ("123456789") = 0x0376E6E7: init ~0, MSB first, no xorout.
        assert_eq!(crc32_be(!0, b"123456789"), 0x0376_E6E7);
        assert_eq!(crc32_be(!0, b""), !0);
    }
}
