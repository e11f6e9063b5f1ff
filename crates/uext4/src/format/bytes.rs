//! Little-endian field access for on-disk structures.
//!
//! ext4 is little-endian on every architecture. These helpers read and write
//! fields at fixed offsets of a byte slice; callers check the slice length
//! once (the structure's size) so the per-field accesses cannot go out of
//! bounds. Out-of-range reads return 0 instead of panicking, as a last line
//! of defence for hostile images.

/// Reads a little-endian u16 at `off`, or 0 if the slice is too short.
#[inline]
pub fn le16(b: &[u8], off: usize) -> u16 {
    match off.checked_add(2).and_then(|end| b.get(off..end)) {
        Some(s) => u16::from_le_bytes([s[0], s[1]]),
        None => 0,
    }
}

/// Reads a little-endian u32 at `off`, or 0 if the slice is too short.
#[inline]
pub fn le32(b: &[u8], off: usize) -> u32 {
    match off.checked_add(4).and_then(|end| b.get(off..end)) {
        Some(s) => u32::from_le_bytes([s[0], s[1], s[2], s[3]]),
        None => 0,
    }
}

/// Reads a little-endian u64 at `off`, or 0 if the slice is too short.
#[inline]
pub fn le64(b: &[u8], off: usize) -> u64 {
    match off.checked_add(8).and_then(|end| b.get(off..end)) {
        Some(s) => u64::from_le_bytes(s.try_into().unwrap_or([0; 8])),
        None => 0,
    }
}

/// Reads a byte at `off`, or 0 if the slice is too short.
#[inline]
pub fn u8_at(b: &[u8], off: usize) -> u8 {
    b.get(off).copied().unwrap_or(0)
}

/// Writes a little-endian u16 at `off`; ignored if the slice is too short.
#[inline]
pub fn put_le16(b: &mut [u8], off: usize, v: u16) {
    if let Some(s) = off.checked_add(2).and_then(|end| b.get_mut(off..end)) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// Writes a little-endian u32 at `off`; ignored if the slice is too short.
#[inline]
pub fn put_le32(b: &mut [u8], off: usize, v: u32) {
    if let Some(s) = off.checked_add(4).and_then(|end| b.get_mut(off..end)) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// Writes a little-endian u64 at `off`; ignored if the slice is too short.
#[inline]
pub fn put_le64(b: &mut [u8], off: usize, v: u64) {
    if let Some(s) = off.checked_add(8).and_then(|end| b.get_mut(off..end)) {
        s.copy_from_slice(&v.to_le_bytes());
    }
}

/// Combines a low 32-bit and a high field into one 64-bit value.
#[inline]
pub fn lo_hi(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_slices_read_zero() {
        assert_eq!(le32(&[1, 2, 3], 0), 0);
        assert_eq!(le16(&[1, 2, 3], 2), 0);
        assert_eq!(le64(&[], 0), 0);
        assert_eq!(le32(&[1, 0, 0, 0], usize::MAX - 1), 0);
    }

    #[test]
    fn round_trip() {
        let mut b = [0u8; 16];
        put_le16(&mut b, 0, 0xbeef);
        put_le32(&mut b, 2, 0xdead_beef);
        put_le64(&mut b, 6, 0x0102_0304_0506_0708);
        assert_eq!(le16(&b, 0), 0xbeef);
        assert_eq!(le32(&b, 2), 0xdead_beef);
        assert_eq!(le64(&b, 6), 0x0102_0304_0506_0708);
    }
}
