//! The entry table shared by the in-inode area and the xattr block:
//! entry descriptors (`struct ext4_xattr_entry`) growing down from the
//! start, values packed from the end, closed by a zero word.

use super::RawXattr;
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::bytes::{le16, le32, put_le16, put_le32, u8_at};

pub(super) const ENTRY_HEADER_SIZE: usize = 16;

/// Largest `e_value_size` the kernel accepts on disk
/// (EXT4_XATTR_SIZE_MAX); larger is corruption. Values written through
/// setxattr(2) are at most [`super::VALUE_MAX`].
pub const VALUE_MAX_ON_DISK: usize = 1 << 24;

/// Parses an entry table. `b` is the region that holds both entries and
/// values; entries start at `entries_start`; value offsets are relative to
/// `value_base`. Each entry and value is bounds-checked against `b`.
pub(super) fn parse_raw_entries(
    b: &[u8],
    entries_start: usize,
    value_base: usize,
    structure: Structure,
    at: impl Fn(usize) -> Location,
) -> Result<Vec<RawXattr>> {
    let bad = |off: usize, kind| Error::corruption(structure, at(off), kind);
    let mut out = Vec::new();
    let mut off = entries_start;
    loop {
        if off + 4 > b.len() {
            return Err(bad(off, CorruptKind::CrossesEnd { what: "attribute list (no terminator)" }));
        }
        if le32(b, off) == 0 {
            break;
        }
        if off + ENTRY_HEADER_SIZE > b.len() {
            return Err(bad(off, CorruptKind::CrossesEnd { what: "entry" }));
        }
        let name_len = usize::from(u8_at(b, off));
        let index = u8_at(b, off + 1);
        let value_offs = usize::from(le16(b, off + 2));
        let value_inum = le32(b, off + 4);
        let value_size = le32(b, off + 8) as usize;
        let hash = le32(b, off + 12);
        let name_end = off + ENTRY_HEADER_SIZE + name_len;
        if name_end > b.len() {
            return Err(bad(off, CorruptKind::CrossesEnd { what: "entry name" }));
        }
        // An index uext4 has no prefix for (fs-verity's 11, Hurd's 10, a
        // later one) is kept, not refused: the kernel skips entries
        // without a handler when listing and never matches them when
        // looking a name up, and keeps them when it rewrites the table.
        // Readers filter them out ([`RawXattr::is_known`]).
        let name = b[off + ENTRY_HEADER_SIZE..name_end].to_vec();
        if value_size > VALUE_MAX_ON_DISK {
            return Err(bad(off, CorruptKind::OutOfRange { field: "e_value_size", value: value_size as u64 }));
        }
        let value = if value_inum != 0 {
            // Kept in an EA inode (ea_inode feature): e_value_offs means
            // nothing; the caller resolves the inode.
            None
        } else if value_size == 0 {
            // An empty value has no storage; its offset means nothing (the
            // kernel writes 0 and never checks it).
            Some(Vec::new())
        } else {
            let start = value_base + value_offs;
            let end = start
                .checked_add(value_size)
                .ok_or_else(|| bad(off, CorruptKind::OutOfRange { field: "e_value_size", value: value_size as u64 }))?;
            if end > b.len() || start < entries_start {
                return Err(bad(off, CorruptKind::CrossesEnd { what: "entry value" }));
            }
            Some(b[start..end].to_vec())
        };
        out.push(RawXattr { index, name, value, value_inum, value_size: value_size as u32, hash });
        off = (name_end + 3) & !3;
    }
    Ok(out)
}

/// Bytes an entry descriptor with a name of `name_len` bytes occupies
/// (EXT4_XATTR_LEN: header and name, padded to 4).
pub fn entry_len(name_len: usize) -> usize {
    (ENTRY_HEADER_SIZE + name_len + 3) & !3
}

/// Bytes a value of `size` bytes occupies (EXT4_XATTR_SIZE: padded to 4).
pub fn value_len(size: usize) -> usize {
    (size + 3) & !3
}

/// `e_hash` of an entry whose value is stored locally
/// (ext4_xattr_hash_entry): the name bytes (unsigned), then the value as
/// little-endian 32-bit words, zero padded to a multiple of 4.
pub fn entry_hash(name: &[u8], value: &[u8]) -> u32 {
    let mut h = 0u32;
    for &c in name {
        h = (h << 5) ^ (h >> 27) ^ u32::from(c);
    }
    for w in value.chunks(4) {
        let mut word = [0u8; 4];
        word[..w.len()].copy_from_slice(w);
        h = (h << 16) ^ (h >> 16) ^ u32::from_le_bytes(word);
    }
    h
}

/// `e_hash` of an entry whose value lives in an EA inode: the name, then
/// the value's crc32c (the EA inode's hash) as the only value word
/// (ext4_xattr_set_entry feeds the hash instead of the long value).
pub fn ea_entry_hash(name: &[u8], value_hash: u32) -> u32 {
    entry_hash(name, &value_hash.to_le_bytes())
}

/// Bytes the entries and their values take in an entry table (not
/// counting the header or the 4-byte terminator).
pub fn entries_bytes(entries: &[RawXattr]) -> usize {
    entries.iter().map(|e| entry_len(e.name.len()) + e.value.as_ref().map_or(0, |v| value_len(v.len()))).sum()
}

/// Writes an entry table into `region`: descriptors from `entries_start`
/// down, then the terminator; values packed from the end of `region`,
/// offsets relative to `value_base`. Every entry gets its hash. Returns
/// the hashes in order. `region` must be zeroed and large enough
/// (checked, not assumed: an error instead of a panic).
pub(super) fn write_table(
    region: &mut [u8],
    entries_start: usize,
    value_base: usize,
    entries: &[RawXattr],
) -> Result<Vec<u32>> {
    let nospace = || Error::NoSpace("extended attributes do not fit".into());
    let mut hashes = Vec::with_capacity(entries.len());
    let mut off = entries_start;
    let mut val_end = region.len();
    for e in entries {
        let name_len =
            u8::try_from(e.name.len()).map_err(|_| Error::Range(format!("xattr name of {} bytes", e.name.len())))?;
        let elen = entry_len(e.name.len());
        let Some(value) = e.value.as_deref() else {
            // A value in an EA inode: only the descriptor is stored here,
            // with the inode, the value's size and the hash it was given.
            if e.value_inum == 0 {
                return Err(Error::Invalid("xattr entry with neither a value nor an EA inode".into()));
            }
            if off + elen + 4 > val_end {
                return Err(nospace());
            }
            put_descriptor(&mut region[off..off + elen], e, name_len, 0, e.value_inum, e.value_size, e.hash);
            hashes.push(e.hash);
            off += elen;
            continue;
        };
        let value_size =
            u32::try_from(value.len()).map_err(|_| Error::NoSpace(format!("xattr value of {} bytes", value.len())))?;
        let vlen = value_len(value.len());
        let offs = if value.is_empty() {
            0
        } else {
            let start = val_end.checked_sub(vlen).ok_or_else(nospace)?;
            // Values may not run into the descriptors or the terminator.
            if start < off + elen + 4 {
                return Err(nospace());
            }
            region[start..start + value.len()].copy_from_slice(value);
            val_end = start;
            u16::try_from(start - value_base).map_err(|_| nospace())?
        };
        if off + elen + 4 > val_end {
            return Err(nospace());
        }
        let hash = entry_hash(&e.name, value);
        put_descriptor(&mut region[off..off + elen], e, name_len, offs, 0, value_size, hash);
        hashes.push(hash);
        off += elen;
    }
    // The terminator (four zero bytes) is already there: the region was
    // zeroed and `off + 4 <= val_end` was checked for every entry.
    Ok(hashes)
}

/// Fills one entry descriptor `d` (exactly its padded length).
fn put_descriptor(d: &mut [u8], e: &RawXattr, name_len: u8, offs: u16, inum: u32, size: u32, hash: u32) {
    d[0] = name_len;
    d[1] = e.index;
    put_le16(d, 2, offs);
    put_le32(d, 4, inum);
    put_le32(d, 8, size);
    put_le32(d, 12, hash);
    d[ENTRY_HEADER_SIZE..ENTRY_HEADER_SIZE + e.name.len()].copy_from_slice(&e.name);
}
