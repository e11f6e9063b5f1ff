//! Big-endian field access: everything in jbd2 is big-endian, unlike the
//! rest of ext4, so the journal codecs read and write through these.

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
