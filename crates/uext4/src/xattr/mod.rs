//! Extended attributes of an inode: the in-inode area first, then the
//! (possibly shared) xattr block, as the kernel lists them; large values
//! in their own inodes ([`ea_inode`]).

pub mod ea_inode;
pub mod write;

use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::inode::Inode;
use crate::format::xattr::{acl_to_xattr, parse_block_raw, parse_inode_area_raw, RawXattr, XattrEntry, INDEX_SYSTEM};
use crate::volume::Volume;

/// All attributes of `inode`, in-inode ones first. A value kept in an EA
/// inode is `None` here (its entry is checked; [`get`] reads it).
pub fn list(vol: &Volume, inode: &Inode) -> Result<Vec<XattrEntry>> {
    // `system.data` is inline data, not an attribute (the kernel has no
    // handler for it: neither listed nor readable); nor are names in a
    // namespace uext4 does not know (fs-verity's, for one).
    Ok(list_raw(vol, inode)?
        .into_iter()
        .filter(|r| r.is_known() && !(r.index == INDEX_SYSTEM && r.name == b"data"))
        .map(|r| XattrEntry { name: r.full_name(), value: r.value, value_inum: r.value_inum })
        .collect())
}

/// All attributes of `inode` in their stored form, in-inode ones first,
/// with the entries that name EA inodes checked ([`ea_inode::check_entry`]).
pub fn list_raw(vol: &Volume, inode: &Inode) -> Result<Vec<RawXattr>> {
    let mut out = parse_inode_area_raw(inode.xattr_area(), inode.ino)?;
    if inode.file_acl != 0 {
        let buf = block_of(vol, inode)?;
        let seed = vol.has_csum().then(|| vol.csum_seed());
        let (_, entries) = parse_block_raw(buf.data(), inode.file_acl, seed)?;
        out.extend(entries);
    }
    for e in &out {
        ea_inode::check_entry(vol, inode.ino, e)?;
    }
    Ok(out)
}

/// The inode's xattr block (`file_acl`), checked to lie inside the
/// filesystem before it is read.
pub(crate) fn block_of(vol: &Volume, inode: &Inode) -> Result<std::sync::Arc<crate::cache::Buffer>> {
    let blk = inode.file_acl;
    if !vol.valid_range(blk, 1) {
        return Err(Error::corruption(
            Structure::Xattr,
            Location::inode_block(inode.ino, blk),
            CorruptKind::OutsideFilesystem { what: "i_file_acl", block: blk, len: 1 },
        ));
    }
    vol.block(blk)
}

/// The value of attribute `name`, in the form getxattr(2) returns it
/// (POSIX ACLs converted from ext4's compact encoding; a value in an EA
/// inode read from it and checked).
pub fn get(vol: &Volume, inode: &Inode, name: &[u8]) -> Result<Vec<u8>> {
    let e = list_raw(vol, inode)?
        .into_iter()
        .find(|e| e.is_known() && e.full_name() == name)
        .ok_or_else(|| Error::NoAttr(String::from_utf8_lossy(name).into_owned()))?;
    let value = match &e.value {
        Some(v) => v.clone(),
        None => ea_inode::read_value(vol, inode, &e)?,
    };
    if name == b"system.posix_acl_access" || name == b"system.posix_acl_default" {
        return acl_to_xattr(&value).ok_or_else(|| {
            let at = Location::inode_block(inode.ino, inode.file_acl);
            Error::corruption(Structure::Xattr, at, CorruptKind::Malformed { what: "POSIX ACL" })
        });
    }
    Ok(value)
}
