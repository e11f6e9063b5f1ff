//! Checksums used by ext4: crc32c for metadata_csum, crc16 for gdt_csum.
//!
//! ext4's crc32c is the Castagnoli CRC *without* the final inversion: the
//! kernel's `ext4_chksum` returns the raw register, and each structure seeds
//! it with the filesystem's checksum seed. The `crc32c` crate implements the
//! standard (inverted in, inverted out) form, so we convert at the boundary.

/// ext4-style crc32c: continue a raw (non-inverted) CRC register over `data`.
#[inline]
pub fn crc32c(seed: u32, data: &[u8]) -> u32 {
    // The crate inverts on entry and exit; undo both to get the raw update
    // that jbd2/ext4 use.
    !crc32c::crc32c_append(!seed, data)
}

/// crc16 (ANSI, polynomial 0x8005 reflected as 0xA001) as used by the
/// pre-metadata_csum group descriptor checksum (gdt_csum / uninit_bg).
pub fn crc16(mut crc: u16, data: &[u8]) -> u16 {
    for &byte in data {
        crc ^= u16::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xA001 } else { crc >> 1 };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_standard_vector() {
        // Standard CRC-32C("123456789") = 0xE3069283, computed with initial
        // ~0 and final inversion.
        assert_eq!(!crc32c(!0, b"123456789"), 0xE306_9283);
    }

    #[test]
    fn crc16_matches_standard_vector() {
        // CRC-16/ARC("123456789") = 0xBB3D.
        assert_eq!(crc16(0, b"123456789"), 0xBB3D);
    }
}
