//! Extended attributes of an inode: the in-inode area first, then the
//! (possibly shared) xattr block, as the kernel lists them.

pub mod write;

use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::inode::Inode;
use crate::format::xattr::{acl_to_xattr, parse_block, parse_inode_area, XattrEntry};
use crate::volume::Volume;

/// All attributes of `inode`, in-inode ones first.
pub fn list(vol: &Volume, inode: &Inode) -> Result<Vec<XattrEntry>> {
    let mut out = parse_inode_area(inode.xattr_area(), inode.ino)?;
    // `system.data` is inline data, not an attribute (the kernel has no
    // handler for it: neither listed nor readable).
    out.retain(|e| e.name != b"system.data");
    if inode.file_acl != 0 {
        let buf = block_of(vol, inode)?;
        let seed = vol.has_csum().then(|| vol.csum_seed());
        let (_, entries) = parse_block(buf.data(), inode.file_acl, seed)?;
        out.extend(entries);
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
/// (POSIX ACLs converted from ext4's compact encoding).
pub fn get(vol: &Volume, inode: &Inode, name: &[u8]) -> Result<Vec<u8>> {
    let e = list(vol, inode)?
        .into_iter()
        .find(|e| e.name == name)
        .ok_or_else(|| Error::NoAttr(String::from_utf8_lossy(name).into_owned()))?;
    let value = e.value.ok_or_else(|| Error::Unsupported("xattr value in an EA inode".into()))?;
    if name == b"system.posix_acl_access" || name == b"system.posix_acl_default" {
        return acl_to_xattr(&value).ok_or_else(|| {
            let at = Location::inode_block(inode.ino, inode.file_acl);
            Error::corruption(Structure::Xattr, at, CorruptKind::Malformed { what: "POSIX ACL" })
        });
    }
    Ok(value)
}
