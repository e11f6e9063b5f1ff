//! What the fuzz targets share: turning the fuzzer's bytes into the
//! image to open.

use uext4::format::checksum::crc32c;
use uext4::format::features::ro_compat;

/// The image the input `data` stands for. Byte 0 lies in the boot area,
/// which ext4 never reads: when its low bit is set, the superblock
/// checksum is recomputed (on metadata_csum images), so that mutated
/// superblock fields reach validation and the rest of the code instead of
/// stopping at the checksum.
pub fn image(data: &[u8]) -> Vec<u8> {
    let mut img = data.to_vec();
    if img.len() >= 2048 && img[0] & 1 == 1 {
        let sb = &mut img[1024..2048];
        let ro = u32::from_le_bytes([sb[0x64], sb[0x65], sb[0x66], sb[0x67]]);
        if ro & ro_compat::METADATA_CSUM != 0 {
            let c = crc32c(!0, &sb[..0x3FC]);
            sb[0x3FC..0x400].copy_from_slice(&c.to_le_bytes());
        }
    }
    img
}
