//! Extended attributes: the in-inode area and the shared xattr block.

use super::bytes::{le16, le32, put_le16, put_le32, u8_at};
use super::checksum::crc32c;
use crate::error::{Error, Result, Structure};

/// Magic at the start of the in-inode area and of an xattr block.
pub const XATTR_MAGIC: u32 = 0xEA02_0000;
/// Size of the xattr block header.
pub const BLOCK_HEADER_SIZE: usize = 32;
const ENTRY_HEADER_SIZE: usize = 16;

/// A decoded attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XattrEntry {
    /// Full name including its namespace prefix, e.g. `user.comment`.
    pub name: Vec<u8>,
    /// The value, or `None` if it lives in an EA inode (ea_inode feature).
    pub value: Option<Vec<u8>>,
    /// EA inode holding the value, if any.
    pub value_inum: u32,
}

/// Namespace prefixes by `e_name_index`.
pub fn prefix(index: u8) -> Option<&'static str> {
    Some(match index {
        0 => "",
        1 => "user.",
        2 => "system.posix_acl_access",
        3 => "system.posix_acl_default",
        4 => "trusted.",
        6 => "security.",
        7 => "system.",
        8 => "system.richacl",
        _ => return None,
    })
}

/// An attribute as stored on disk: namespace index and the name without
/// its prefix (what `e_name_index`/`e_name` hold), for the write path,
/// which re-encodes whole entry tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawXattr {
    /// `e_name_index` (see [`prefix`]).
    pub index: u8,
    /// The name after the namespace prefix (at most 255 bytes).
    pub name: Vec<u8>,
    /// The value, or `None` if it lives in an EA inode (ea_inode feature).
    pub value: Option<Vec<u8>>,
    /// EA inode holding the value, if any.
    pub value_inum: u32,
    /// `e_hash` as found on disk.
    pub hash: u32,
}

impl RawXattr {
    /// The full name including the namespace prefix.
    pub fn full_name(&self) -> Vec<u8> {
        let mut name = prefix(self.index).unwrap_or("").as_bytes().to_vec();
        name.extend_from_slice(&self.name);
        name
    }
}

/// Parses an entry table. `b` is the region that holds both entries and
/// values; entries start at `entries_start`; value offsets are relative to
/// `value_base`. Each entry and value is bounds-checked against `b`.
fn parse_raw_entries(
    b: &[u8],
    entries_start: usize,
    value_base: usize,
    structure: Structure,
    block: u64,
) -> Result<Vec<RawXattr>> {
    let bad = |d: String| Error::corrupt(structure, block, d);
    let mut out = Vec::new();
    let mut off = entries_start;
    loop {
        if off + 4 > b.len() {
            return Err(bad("attribute list not terminated".into()));
        }
        if le32(b, off) == 0 {
            break;
        }
        if off + ENTRY_HEADER_SIZE > b.len() {
            return Err(bad(format!("entry at {off} crosses the end")));
        }
        let name_len = usize::from(u8_at(b, off));
        let index = u8_at(b, off + 1);
        let value_offs = usize::from(le16(b, off + 2));
        let value_inum = le32(b, off + 4);
        let value_size = le32(b, off + 8) as usize;
        let hash = le32(b, off + 12);
        let name_end = off + ENTRY_HEADER_SIZE + name_len;
        if name_end > b.len() {
            return Err(bad(format!("name of entry at {off} crosses the end")));
        }
        if prefix(index).is_none() {
            return Err(bad(format!("unknown name index {index}")));
        }
        let name = b[off + ENTRY_HEADER_SIZE..name_end].to_vec();
        let value = if value_inum != 0 {
            None
        } else if value_size == 0 {
            // An empty value has no storage; its offset means nothing (the
            // kernel writes 0 and never checks it).
            Some(Vec::new())
        } else {
            let start = value_base + value_offs;
            let end = start.checked_add(value_size).ok_or_else(|| bad("value size overflows".into()))?;
            if end > b.len() || start < entries_start {
                return Err(bad(format!("value of entry at {off} out of bounds ({start}..{end})")));
            }
            Some(b[start..end].to_vec())
        };
        out.push(RawXattr { index, name, value, value_inum, hash });
        off = (name_end + 3) & !3;
    }
    Ok(out)
}

fn to_entries(raw: Vec<RawXattr>) -> Vec<XattrEntry> {
    raw.into_iter().map(|r| XattrEntry { name: r.full_name(), value: r.value, value_inum: r.value_inum }).collect()
}

/// The stored form of the in-inode area (the bytes after `i_extra_isize`):
/// entries in on-disk order. An area without the magic holds none.
pub fn parse_inode_area_raw(area: &[u8], ino: u32) -> Result<Vec<RawXattr>> {
    if area.len() < 4 || le32(area, 0) != XATTR_MAGIC {
        return Ok(Vec::new());
    }
    // In-inode value offsets count from the first entry, after the magic.
    parse_raw_entries(area, 4, 4, Structure::Xattr, u64::from(ino))
}

/// Parses the in-inode attribute area (the bytes after `i_extra_isize`).
/// An area without the magic holds no attributes.
pub fn parse_inode_area(area: &[u8], ino: u32) -> Result<Vec<XattrEntry>> {
    Ok(to_entries(parse_inode_area_raw(area, ino)?))
}

/// Header of an xattr block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XattrBlockHeader {
    /// Number of inodes sharing this block.
    pub refcount: u32,
    /// Stored checksum.
    pub checksum: u32,
}

/// Parses an xattr block, verifying magic, block count and (with
/// metadata_csum, `csum_seed` given) its checksum.
pub fn parse_block(b: &[u8], block: u64, csum_seed: Option<u32>) -> Result<(XattrBlockHeader, Vec<XattrEntry>)> {
    let (hdr, raw) = parse_block_raw(b, block, csum_seed)?;
    Ok((hdr, to_entries(raw)))
}

/// Like [`parse_block`], with the entries in their stored form.
pub fn parse_block_raw(b: &[u8], block: u64, csum_seed: Option<u32>) -> Result<(XattrBlockHeader, Vec<RawXattr>)> {
    let bad = |d: String| Error::corrupt(Structure::Xattr, block, d);
    if b.len() < BLOCK_HEADER_SIZE + 4 {
        return Err(bad("block too small".into()));
    }
    if le32(b, 0) != XATTR_MAGIC {
        return Err(bad(format!("bad magic {:#x}", le32(b, 0))));
    }
    if le32(b, 8) != 1 {
        return Err(bad(format!("h_blocks {} != 1", le32(b, 8))));
    }
    let hdr = XattrBlockHeader { refcount: le32(b, 4), checksum: le32(b, 0x10) };
    if let Some(seed) = csum_seed {
        let computed = block_checksum(b, block, seed);
        if computed != hdr.checksum {
            return Err(Error::Checksum { structure: Structure::Xattr, block, stored: hdr.checksum, computed });
        }
    }
    let entries = parse_raw_entries(b, BLOCK_HEADER_SIZE, 0, Structure::Xattr, block)?;
    Ok((hdr, entries))
}

/// The crc32c an xattr block at `block` should carry.
pub fn block_checksum(b: &[u8], block: u64, csum_seed: u32) -> u32 {
    let mut c = crc32c(csum_seed, &block.to_le_bytes());
    c = crc32c(c, &b[..0x10]);
    c = crc32c(c, &[0; 4]);
    crc32c(c, &b[0x14..])
}

/// Converts a POSIX ACL from ext4's compact on-disk form to the form the
/// kernel's getxattr returns (`posix_acl_xattr`, version 2, every entry with
/// an id), so that tools like getfacl read it. Returns `None` if the value
/// is not a valid ext4 ACL.
pub fn acl_to_xattr(v: &[u8]) -> Option<Vec<u8>> {
    if v.len() < 4 || le32(v, 0) != 1 {
        return None;
    }
    let mut out = 2u32.to_le_bytes().to_vec();
    let mut off = 4;
    while off < v.len() {
        let tag = le16(v, off);
        let perm = le16(v, off + 2);
        // ACL_USER (2) and ACL_GROUP (8) carry an id; the rest are short.
        let (id, len) = match tag {
            2 | 8 => (le32(v, off + 4), 8),
            1 | 4 | 16 | 32 => (u32::MAX, 4),
            _ => return None,
        };
        if off + len > v.len() {
            return None;
        }
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
        off += len;
    }
    Some(out)
}

// ---------------------------------------------------------------------------
// Encoding (the write path). Everything below is pure: it turns entry lists
// into the bytes of an in-inode area or an xattr block.

/// `e_name_index` of `user.` names.
pub const INDEX_USER: u8 = 1;
/// `e_name_index` of `system.posix_acl_access` (empty suffix).
pub const INDEX_POSIX_ACL_ACCESS: u8 = 2;
/// `e_name_index` of `system.posix_acl_default` (empty suffix).
pub const INDEX_POSIX_ACL_DEFAULT: u8 = 3;
/// `e_name_index` of `trusted.` names.
pub const INDEX_TRUSTED: u8 = 4;
/// `e_name_index` of `security.` names.
pub const INDEX_SECURITY: u8 = 6;
/// `e_name_index` of other `system.` names (`system.data` of inline data).
pub const INDEX_SYSTEM: u8 = 7;

/// Longest full attribute name, prefix included (XATTR_NAME_MAX).
pub const NAME_MAX: usize = 255;
/// Largest value setxattr(2) passes to a filesystem (XATTR_SIZE_MAX).
pub const VALUE_MAX: usize = 65536;

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

/// `h_hash` of a block from its entries' hashes in stored order
/// (ext4_xattr_rehash). An entry without a hash makes it 0, which tells
/// the kernel never to share the block.
pub fn block_hash(hashes: impl IntoIterator<Item = u32>) -> u32 {
    let mut h = 0u32;
    for e in hashes {
        if e == 0 {
            return 0;
        }
        h = (h << 16) ^ (h >> 16) ^ e;
    }
    h
}

/// Bytes the entries and their values take in an entry table (not
/// counting the header or the 4-byte terminator).
pub fn entries_bytes(entries: &[RawXattr]) -> usize {
    entries.iter().map(|e| entry_len(e.name.len()) + e.value.as_ref().map_or(0, |v| value_len(v.len()))).sum()
}

/// True if `entries` fit in an in-inode area of `area_len` bytes (magic,
/// entries, terminator and values). No entries always fit.
pub fn inode_area_fits(area_len: usize, entries: &[RawXattr]) -> bool {
    entries.is_empty() || 4 + entries_bytes(entries) + 4 <= area_len
}

/// True if `entries` fit in one xattr block of `block_size` bytes.
pub fn block_fits(block_size: usize, entries: &[RawXattr]) -> bool {
    BLOCK_HEADER_SIZE + entries_bytes(entries) + 4 <= block_size
}

/// Orders block entries as the kernel keeps them (xattr_find_entry with
/// `sorted`): by name index, then name length, then name bytes.
pub fn sort_block_entries(entries: &mut [RawXattr]) {
    entries.sort_by(|a, b| (a.index, a.name.len(), &a.name).cmp(&(b.index, b.name.len(), &b.name)));
}

/// Writes an entry table into `region`: descriptors from `entries_start`
/// down, then the terminator; values packed from the end of `region`,
/// offsets relative to `value_base`. Every entry gets its hash. Returns
/// the hashes in order. `region` must be zeroed and large enough
/// (checked, not assumed: an error instead of a panic).
fn write_table(region: &mut [u8], entries_start: usize, value_base: usize, entries: &[RawXattr]) -> Result<Vec<u32>> {
    let nospace = || Error::NoSpace("extended attributes do not fit".into());
    let mut hashes = Vec::with_capacity(entries.len());
    let mut off = entries_start;
    let mut val_end = region.len();
    for e in entries {
        let value = e
            .value
            .as_deref()
            .ok_or_else(|| Error::Unsupported("rewriting an xattr whose value lives in an EA inode".into()))?;
        let name_len =
            u8::try_from(e.name.len()).map_err(|_| Error::Range(format!("xattr name of {} bytes", e.name.len())))?;
        let value_size =
            u32::try_from(value.len()).map_err(|_| Error::NoSpace(format!("xattr value of {} bytes", value.len())))?;
        let elen = entry_len(e.name.len());
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
        let d = &mut region[off..off + elen];
        d[0] = name_len;
        d[1] = e.index;
        put_le16(d, 2, offs);
        put_le32(d, 4, 0);
        put_le32(d, 8, value_size);
        put_le32(d, 12, hash);
        d[ENTRY_HEADER_SIZE..ENTRY_HEADER_SIZE + e.name.len()].copy_from_slice(&e.name);
        hashes.push(hash);
        off += elen;
    }
    // The terminator (four zero bytes) is already there: the region was
    // zeroed and `off + 4 <= val_end` was checked for every entry.
    Ok(hashes)
}

/// Rewrites the in-inode attribute area `area` (the bytes after
/// `i_extra_isize`) to hold exactly `entries`, in the given order. With
/// no entries the area is zeroed, magic included, as the kernel clears it.
pub fn encode_inode_area(area: &mut [u8], entries: &[RawXattr]) -> Result<()> {
    area.fill(0);
    if entries.is_empty() {
        return Ok(());
    }
    if !inode_area_fits(area.len(), entries) {
        return Err(Error::NoSpace("extended attributes do not fit in the inode".into()));
    }
    put_le32(area, 0, XATTR_MAGIC);
    write_table(area, 4, 4, entries)?;
    Ok(())
}

/// The contents of an xattr block holding `entries` (sorted as the kernel
/// keeps them), with a reference count of 1, entry hashes and `h_hash`.
/// The checksum is left 0: it depends on the block number
/// ([`set_block_checksum`]).
pub fn encode_block(block_size: usize, entries: &[RawXattr]) -> Result<Vec<u8>> {
    if !block_fits(block_size, entries) {
        return Err(Error::NoSpace("extended attributes do not fit in one block".into()));
    }
    let mut sorted = entries.to_vec();
    sort_block_entries(&mut sorted);
    let mut b = vec![0u8; block_size];
    put_le32(&mut b, 0, XATTR_MAGIC);
    put_le32(&mut b, 4, 1);
    put_le32(&mut b, 8, 1);
    let hashes = write_table(&mut b, BLOCK_HEADER_SIZE, 0, &sorted)?;
    put_le32(&mut b, 0xC, block_hash(hashes));
    Ok(b)
}

/// Stores the metadata_csum checksum of the xattr block `b` at `block`.
pub fn set_block_checksum(b: &mut [u8], block: u64, csum_seed: u32) {
    if b.len() >= BLOCK_HEADER_SIZE {
        let c = block_checksum(b, block, csum_seed);
        put_le32(b, 0x10, c);
    }
}

// ---------------------------------------------------------------------------
// POSIX ACLs: the `posix_acl_xattr` form user space passes to setxattr(2)
// and ext4's compact on-disk form.

/// ACL tag: the owner.
pub const ACL_USER_OBJ: u16 = 0x01;
/// ACL tag: a named user.
pub const ACL_USER: u16 = 0x02;
/// ACL tag: the owning group.
pub const ACL_GROUP_OBJ: u16 = 0x04;
/// ACL tag: a named group.
pub const ACL_GROUP: u16 = 0x08;
/// ACL tag: the mask.
pub const ACL_MASK: u16 = 0x10;
/// ACL tag: everyone else.
pub const ACL_OTHER: u16 = 0x20;

/// One entry of a POSIX ACL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AclEntry {
    /// One of the `ACL_*` tags.
    pub tag: u16,
    /// Permission bits (read 4, write 2, execute 1).
    pub perm: u16,
    /// User or group id of `ACL_USER`/`ACL_GROUP` entries; `u32::MAX`
    /// (ACL_UNDEFINED_ID) for the others.
    pub id: u32,
}

/// Parses an ACL in the `posix_acl_xattr` form (version 2, 8-byte
/// entries) and validates it as the kernel does (posix_acl_from_xattr,
/// posix_acl_valid). `Ok(None)` is an empty ACL, which the kernel treats
/// as removing it. Errors: EINVAL for a malformed or invalid ACL,
/// EOPNOTSUPP for another version.
pub fn acl_from_xattr(v: &[u8]) -> Result<Option<Vec<AclEntry>>> {
    let inval = |d: &str| Error::Invalid(format!("POSIX ACL: {d}"));
    if v.len() < 4 {
        return Err(inval("shorter than its header"));
    }
    if le32(v, 0) != 2 {
        return Err(Error::Unsupported(format!("POSIX ACL version {}", le32(v, 0))));
    }
    if !(v.len() - 4).is_multiple_of(8) {
        return Err(inval("size is not a whole number of entries"));
    }
    let mut acl = Vec::with_capacity((v.len() - 4) / 8);
    for e in v[4..].chunks_exact(8) {
        let tag = le16(e, 0);
        let perm = le16(e, 2);
        let id = match tag {
            // (uid_t)-1 maps to no user: the kernel refuses it.
            ACL_USER | ACL_GROUP if le32(e, 4) == u32::MAX => return Err(inval("named entry without an id")),
            ACL_USER | ACL_GROUP => le32(e, 4),
            // The kernel ignores the id of the other entries.
            ACL_USER_OBJ | ACL_GROUP_OBJ | ACL_MASK | ACL_OTHER => u32::MAX,
            _ => return Err(inval("unknown tag")),
        };
        acl.push(AclEntry { tag, perm, id });
    }
    if acl.is_empty() {
        return Ok(None);
    }
    // posix_acl_valid: owner, named users, owning group, named groups,
    // mask (required when there are named entries), other; rwx only.
    #[derive(PartialEq)]
    enum State {
        UserObj,
        User,
        Group,
        Other,
        Done,
    }
    let mut state = State::UserObj;
    let mut needs_mask = false;
    for e in &acl {
        if e.perm & !7 != 0 {
            return Err(inval("permission bits beyond rwx"));
        }
        state = match (e.tag, &state) {
            (ACL_USER_OBJ, State::UserObj) => State::User,
            (ACL_USER, State::User) => {
                needs_mask = true;
                State::User
            }
            (ACL_GROUP_OBJ, State::User) => State::Group,
            (ACL_GROUP, State::Group) => {
                needs_mask = true;
                State::Group
            }
            (ACL_MASK, State::Group) => State::Other,
            (ACL_OTHER, State::Other) => State::Done,
            (ACL_OTHER, State::Group) if !needs_mask => State::Done,
            _ => return Err(inval("entries missing, repeated or out of order")),
        };
    }
    if state != State::Done {
        return Err(inval("entries missing"));
    }
    Ok(Some(acl))
}

/// ext4's on-disk form of an ACL (ext4_acl_to_disk): version 1, then
/// 8-byte entries for named users and groups and 4-byte ones for the rest.
pub fn acl_to_disk(acl: &[AclEntry]) -> Vec<u8> {
    let mut out = 1u32.to_le_bytes().to_vec();
    for e in acl {
        out.extend_from_slice(&e.tag.to_le_bytes());
        out.extend_from_slice(&e.perm.to_le_bytes());
        if matches!(e.tag, ACL_USER | ACL_GROUP) {
            out.extend_from_slice(&e.id.to_le_bytes());
        }
    }
    out
}

/// The permission bits `mode` takes when an access ACL is set
/// (posix_acl_equiv_mode): owner, group (the mask when there is one) and
/// other from the ACL; the rest of `mode` is kept. The flag is true when
/// the ACL says more than the mode bits (named entries or a mask) and must
/// be stored; false when the mode alone is equivalent.
pub fn acl_equiv_mode(acl: &[AclEntry], mode: u16) -> (u16, bool) {
    let mut bits = 0u16;
    let mut not_equiv = false;
    for e in acl {
        let p = e.perm & 7;
        match e.tag {
            ACL_USER_OBJ => bits |= p << 6,
            ACL_GROUP_OBJ => bits |= p << 3,
            ACL_OTHER => bits |= p,
            ACL_MASK => {
                bits = (bits & !0o070) | (p << 3);
                not_equiv = true;
            }
            _ => not_equiv = true,
        }
    }
    ((mode & !0o777) | bits, not_equiv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(index: u8, name: &[u8], value: &[u8]) -> RawXattr {
        RawXattr { index, name: name.to_vec(), value: Some(value.to_vec()), value_inum: 0, hash: 0 }
    }

    #[test]
    fn hash_matches_the_kernel() {
        // e_hash of `user.big` = 300 x 'x', as Linux 6.x wrote it.
        assert_eq!(entry_hash(b"big", &[b'x'; 300]), 0xfd3f_7879);
        // A block with one entry hashes to that entry's hash.
        assert_eq!(block_hash([0xfd3f_7879]), 0xfd3f_7879);
        assert_eq!(block_hash([1, 0, 2]), 0);
    }

    #[test]
    fn block_round_trip_sorted() {
        let entries = vec![raw(1, b"zz", b"1"), raw(1, b"a", b""), raw(4, b"t", b"trusted"), raw(1, b"b", &[7; 33])];
        let mut b = encode_block(1024, &entries).unwrap();
        set_block_checksum(&mut b, 77, 0x1234);
        let (hdr, got) = parse_block_raw(&b, 77, Some(0x1234)).unwrap();
        assert_eq!(hdr.refcount, 1);
        let names: Vec<_> = got.iter().map(|e| (e.index, e.name.clone())).collect();
        assert_eq!(names, vec![(1, b"a".to_vec()), (1, b"b".to_vec()), (1, b"zz".to_vec()), (4, b"t".to_vec())]);
        for e in &got {
            let v = e.value.as_deref().unwrap();
            assert_eq!(e.hash, entry_hash(&e.name, v));
        }
        assert_eq!(le32(&b, 0xC), block_hash(got.iter().map(|e| e.hash)));
        assert_eq!(got[1].value.as_deref(), Some(&[7u8; 33][..]));
    }

    #[test]
    fn fits_and_overflows() {
        let max = 1024 - BLOCK_HEADER_SIZE - 4 - entry_len(1);
        assert!(encode_block(1024, &[raw(1, b"a", &vec![1; max])]).is_ok());
        let e = encode_block(1024, &[raw(1, b"a", &vec![1; max + 1])]).unwrap_err();
        assert_eq!(e.errno(), libc::ENOSPC);
        let mut area = vec![0xAAu8; 96];
        let entries = vec![raw(1, b"x", &[1; 60])];
        assert!(inode_area_fits(96, &entries));
        encode_inode_area(&mut area, &entries).unwrap();
        let got = parse_inode_area_raw(&area, 1).unwrap();
        assert_eq!(got[0].value.as_deref(), Some(&[1u8; 60][..]));
        assert!(!inode_area_fits(96, &[raw(1, b"x", &[1; 69])]));
        assert_eq!(encode_inode_area(&mut area, &[raw(1, b"x", &[1; 69])]).unwrap_err().errno(), libc::ENOSPC);
        encode_inode_area(&mut area, &[]).unwrap();
        assert!(area.iter().all(|&b| b == 0));
    }

    #[test]
    fn acl_conversions() {
        let x = |v: &[(u16, u16, u32)]| {
            let mut out = 2u32.to_le_bytes().to_vec();
            for &(t, p, id) in v {
                out.extend_from_slice(&t.to_le_bytes());
                out.extend_from_slice(&p.to_le_bytes());
                out.extend_from_slice(&id.to_le_bytes());
            }
            out
        };
        let u = u32::MAX;
        let full = x(&[(1, 6, u), (2, 7, 1000), (4, 4, u), (8, 5, 20), (0x10, 7, u), (0x20, 0, u)]);
        let acl = acl_from_xattr(&full).unwrap().unwrap();
        let disk = acl_to_disk(&acl);
        assert_eq!(disk.len(), 4 + 4 * 4 + 2 * 8);
        assert_eq!(acl_to_xattr(&disk).unwrap(), full);
        assert_eq!(acl_equiv_mode(&acl, 0o100644), (0o100670, true));
        let plain = acl_from_xattr(&x(&[(1, 7, 5), (4, 5, 5), (0x20, 1, 5)])).unwrap().unwrap();
        assert_eq!(acl_equiv_mode(&plain, 0o104000), (0o104751, false));
        assert_eq!(acl_from_xattr(&x(&[])).unwrap(), None);
        let bad = |v: &[u8]| acl_from_xattr(v).unwrap_err().errno();
        assert_eq!(bad(&[2, 0, 0]), libc::EINVAL);
        assert_eq!(bad(&x(&[(1, 8, u), (4, 0, u), (0x20, 0, u)])), libc::EINVAL);
        assert_eq!(bad(&x(&[(1, 6, u), (4, 0, u)])), libc::EINVAL);
        assert_eq!(bad(&x(&[(1, 6, u), (2, 6, u), (4, 0, u), (0x10, 0, u), (0x20, 0, u)])), libc::EINVAL);
        assert_eq!(bad(&x(&[(1, 6, u), (4, 0, u), (0x40, 0, u)])), libc::EINVAL);
        let mut v1 = x(&[(1, 6, u), (4, 0, u), (0x20, 0, u)]);
        v1[0] = 1;
        assert_eq!(bad(&v1), libc::EOPNOTSUPP);
    }
}
