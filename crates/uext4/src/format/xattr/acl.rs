//! POSIX ACLs: the `posix_acl_xattr` form user space passes to setxattr(2)
//! and ext4's compact on-disk form.

use crate::error::{Error, Result};
use crate::format::bytes::{le16, le32};

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
