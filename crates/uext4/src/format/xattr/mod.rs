//! Extended attributes: the in-inode area and the shared xattr block.
//!
//! One structure per file: the entry table both areas share ([`entry`]),
//! the in-inode area ([`ibody`]), the xattr block and its header
//! ([`block`]), and the POSIX ACL value format ([`acl`]). Everything is
//! re-exported here.

pub mod acl;
pub mod block;
pub mod entry;
pub mod ibody;

pub use acl::*;
pub use block::*;
pub use entry::*;
pub use ibody::*;

/// Magic at the start of the in-inode area and of an xattr block.
pub const XATTR_MAGIC: u32 = 0xEA02_0000;

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
    /// `e_value_size`: the value's length (for a value in an EA inode
    /// the only record of it here; for a local value the encoder uses
    /// `value`'s length instead).
    pub value_size: u32,
    /// `e_hash` as found on disk (for a value in an EA inode also what
    /// the encoder writes: it covers the inode's value hash).
    pub hash: u32,
}

impl RawXattr {
    /// An entry with a local value (stored in the inode or the block).
    pub fn local(index: u8, name: &[u8], value: &[u8]) -> RawXattr {
        RawXattr {
            index,
            name: name.to_vec(),
            value: Some(value.to_vec()),
            value_inum: 0,
            value_size: value.len() as u32,
            hash: 0,
        }
    }

    /// True if its `e_name_index` has a namespace prefix here. Entries in
    /// other namespaces (fs-verity's index 11, for one) are neither
    /// listed nor readable, as the kernel has no handler for them, but
    /// the write path keeps them when it rewrites a table.
    pub fn is_known(&self) -> bool {
        prefix(self.index).is_some()
    }

    /// The full name including the namespace prefix (only meaningful
    /// when [`RawXattr::is_known`]).
    pub fn full_name(&self) -> Vec<u8> {
        let mut name = prefix(self.index).unwrap_or("").as_bytes().to_vec();
        name.extend_from_slice(&self.name);
        name
    }
}

pub(super) fn to_entries(raw: Vec<RawXattr>) -> Vec<XattrEntry> {
    raw.into_iter()
        .filter(RawXattr::is_known)
        .map(|r| XattrEntry { name: r.full_name(), value: r.value, value_inum: r.value_inum })
        .collect()
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::bytes::le32;

    fn raw(index: u8, name: &[u8], value: &[u8]) -> RawXattr {
        RawXattr { index, name: name.to_vec(), value: Some(value.to_vec()), value_inum: 0, value_size: 0, hash: 0 }
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
    fn ea_inode_entries_round_trip() {
        let ea = RawXattr {
            value: None,
            value_inum: 13,
            value_size: 10_000,
            hash: ea_entry_hash(b"big", 0xdcb4_8f9a),
            ..RawXattr::local(INDEX_USER, b"big", b"")
        };
        let entries = vec![raw(1, b"a", b"local"), ea.clone()];
        // The entry takes only its descriptor: no value bytes.
        assert_eq!(entries_bytes(std::slice::from_ref(&ea)), entry_len(3));
        let b = encode_block(1024, &entries).unwrap();
        let (_, got) = parse_block_raw(&b, 9, None).unwrap();
        assert_eq!(got[1], ea);
        assert_eq!(le32(&b, 0xC), block_hash([got[0].hash, ea.hash]));
        let mut area = vec![0u8; 96];
        encode_inode_area(&mut area, std::slice::from_ref(&ea)).unwrap();
        assert_eq!(parse_inode_area_raw(&area, 1).unwrap(), vec![ea]);
        // A size beyond what the kernel accepts is corruption.
        let mut bad = b.clone();
        let at = BLOCK_HEADER_SIZE + entry_len(1) + 8;
        bad[at..at + 4].copy_from_slice(&((VALUE_MAX_ON_DISK as u32) + 1).to_le_bytes());
        assert!(parse_block_raw(&bad, 9, None).unwrap_err().as_corruption().is_some());
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
}
