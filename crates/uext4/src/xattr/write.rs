//! Changing extended attributes: placement between the in-inode area and
//! the xattr block, copy-on-write of shared blocks, and the block's
//! reference count.
//!
//! The placement follows the kernel's `ext4_xattr_set_handle`: an
//! attribute is looked up in the inode first and in the block only if the
//! inode does not have it; a new value goes into the inode if it fits
//! there (and any copy in the block is then removed), else into the block
//! (and any copy in the inode is removed). The whole entry table of the
//! area that changes is re-encoded from its parsed entries (values packed
//! from the end, no holes), which is the layout the kernel's in-place
//! edits converge to and what e2fsck checks: no overlaps, everything in
//! bounds, correct hashes.
//!
//! A block with `h_refcount > 1` is shared with other inodes (the kernel
//! shares identical blocks through its mbcache) and is never changed in
//! place: the inode gets a fresh copy and the old block loses one
//! reference. The decision is taken inside the block's read-modify-write
//! (under its stripe lock), so two inodes sharing a block and changing
//! their attributes at once cannot both believe they hold the last
//! reference, or both copy and leave the block unreferenced.

use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::PhysicalBlock;
use crate::format::bytes::{le32, put_le32};
use crate::format::checksum::crc32c;
use crate::format::features::compat;
use crate::format::inode::{Inode, GOOD_OLD_INODE_SIZE};
use crate::format::superblock::{SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use crate::format::xattr::{
    block_checksum, block_fits, encode_block, encode_inode_area, inode_area_fits, parse_block, parse_block_raw,
    parse_inode_area_raw, set_block_checksum, RawXattr, INDEX_POSIX_ACL_ACCESS, INDEX_POSIX_ACL_DEFAULT,
    INDEX_SECURITY, INDEX_TRUSTED, INDEX_USER, NAME_MAX,
};
use crate::txn::{FreeKind, Tx};
use crate::volume::Volume;

/// Offset of `s_feature_compat` in the superblock.
const S_FEATURE_COMPAT: usize = 0x5C;
/// Offset of `s_checksum` in the superblock.
const S_CHECKSUM: usize = 0x3FC;

/// What must be true of the attribute before the change (setxattr's
/// XATTR_CREATE / XATTR_REPLACE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// Either way.
    Any,
    /// It must not exist (EEXIST otherwise).
    Absent,
    /// It must exist (ENODATA otherwise).
    Present,
}

/// Splits a full attribute name into its `e_name_index` and the stored
/// suffix, with the checks the VFS and ext4's handlers make: empty or
/// longer than 255 bytes is ERANGE, a known prefix with nothing after it
/// EINVAL, an unknown namespace (including `system.data`, the inline-data
/// attribute, which only the filesystem itself writes) EOPNOTSUPP.
pub fn resolve_name(full: &[u8]) -> Result<(u8, &[u8])> {
    let shown = || String::from_utf8_lossy(full).into_owned();
    if full.is_empty() || full.len() > NAME_MAX {
        return Err(Error::Range(format!("xattr name of {} bytes", full.len())));
    }
    // A C string cannot carry a NUL; refuse rather than store a name no
    // other tool could ask for.
    if full.contains(&0) {
        return Err(Error::Invalid(format!("xattr name {:?} contains a NUL byte", shown())));
    }
    match full {
        b"system.posix_acl_access" => return Ok((INDEX_POSIX_ACL_ACCESS, &[])),
        b"system.posix_acl_default" => return Ok((INDEX_POSIX_ACL_DEFAULT, &[])),
        _ => {}
    }
    const PREFIXES: [(&[u8], u8); 3] =
        [(b"user.", INDEX_USER), (b"trusted.", INDEX_TRUSTED), (b"security.", INDEX_SECURITY)];
    for (p, index) in PREFIXES {
        if let Some(rest) = full.strip_prefix(p) {
            if rest.is_empty() {
                return Err(Error::Invalid(format!("xattr name {:?} has nothing after its prefix", shown())));
            }
            return Ok((index, rest));
        }
    }
    Err(Error::Unsupported(format!("xattr namespace of {:?}", shown())))
}

/// Where the in-inode attribute area of `inode` starts, if it has one the
/// kernel would use (EXT4_INODE_HAS_XATTR_SPACE: a non-zero
/// `i_extra_isize` and room for the magic and at least a little more).
fn ibody_start(inode: &Inode) -> Option<usize> {
    let start = GOOD_OLD_INODE_SIZE + usize::from(inode.extra_isize);
    (inode.extra_isize != 0 && start + 4 + 3 < inode.raw.len()).then_some(start)
}

/// The inode's xattr block: its reference count and entries (validated:
/// range, magic, checksum, entry bounds).
fn read_block(vol: &Volume, inode: &Inode) -> Result<(u32, Vec<RawXattr>)> {
    let buf = super::block_of(vol, inode)?;
    let seed = vol.has_csum().then(|| vol.csum_seed());
    let (hdr, entries) = parse_block_raw(buf.data(), inode.file_acl, seed)?;
    Ok((hdr.refcount, entries))
}

/// Creates, replaces or (with `value` None) removes attribute
/// `index`/`name` of `inode`, checking `presence` first. Changes the
/// in-inode area in `inode.raw`, `file_acl` and `blocks_512`, and the
/// xattr blocks through `tx`; the caller writes the inode (with a new
/// ctime) when this returns `Ok(true)`. `Ok(false)`: nothing changed (the
/// value was already there, or there was nothing to remove and
/// `presence` allowed that). On an error the caller must not write
/// `inode`; errors of the checks and of allocation come before any change.
///
/// Errors: EEXIST / ENODATA per `presence`, ENOSPC when the value fits
/// neither in the inode nor in the block, EOPNOTSUPP for attributes kept
/// in EA inodes, corruption of the existing area or block.
pub fn set(
    tx: &Tx,
    inode: &mut Inode,
    index: u8,
    name: &[u8],
    value: Option<&[u8]>,
    presence: Presence,
) -> Result<bool> {
    let vol = tx.vol;
    let bs = vol.block_size;
    let ibody_at = ibody_start(inode);
    let mut ibody = match ibody_at {
        Some(at) => parse_inode_area_raw(&inode.raw[at..], inode.ino)?,
        None => Vec::new(),
    };
    let mut block = if inode.file_acl != 0 { read_block(vol, inode)?.1 } else { Vec::new() };
    if ibody.iter().chain(&block).any(|e| e.value_inum != 0) {
        // Values in EA inodes carry references that a rewrite (or a
        // copy of a shared block) would have to adjust.
        return Err(Error::Unsupported(format!("inode {}: xattr values in EA inodes", inode.ino)));
    }
    let is_it = |e: &RawXattr| e.index == index && e.name == name;
    let in_ibody = ibody.iter().position(is_it);
    // As the kernel: the block is searched only when the inode does not
    // have the attribute.
    let in_block = if in_ibody.is_none() { block.iter().position(is_it) } else { None };
    let shown = || {
        let n = RawXattr { index, name: name.to_vec(), value: None, value_inum: 0, hash: 0 }.full_name();
        String::from_utf8_lossy(&n).into_owned()
    };
    let found = in_ibody.is_some() || in_block.is_some();
    match presence {
        Presence::Absent if found => return Err(Error::Exists(shown())),
        Presence::Present if !found => return Err(Error::NoAttr(shown())),
        _ => {}
    }

    let Some(value) = value else {
        // Removal.
        if let (Some(p), Some(at)) = (in_ibody, ibody_at) {
            ibody.remove(p);
            encode_inode_area(&mut inode.raw[at..], &ibody)?;
        } else if let Some(p) = in_block {
            block.remove(p);
            store_block(tx, inode, &block)?;
        } else {
            return Ok(false);
        }
        return Ok(true);
    };

    // Setting a value that is already there changes nothing (and, as in
    // the kernel, not even ctime).
    let current = in_ibody.map(|p| &ibody[p]).or_else(|| in_block.map(|p| &block[p]));
    if current.and_then(|e| e.value.as_deref()) == Some(value) {
        return Ok(false);
    }
    let new = RawXattr { index, name: name.to_vec(), value: Some(value.to_vec()), value_inum: 0, hash: 0 };

    // First choice: the inode.
    if let Some(at) = ibody_at {
        let mut candidate = ibody.clone();
        match in_ibody {
            Some(p) => candidate[p] = new.clone(),
            // In-inode entries are unsorted: new ones go last.
            None => candidate.push(new.clone()),
        }
        if inode_area_fits(inode.raw.len() - at, &candidate) {
            // The block change may fail (allocation for a copy of a
            // shared block); do it before touching the inode's copy.
            if let Some(p) = in_block {
                block.remove(p);
                store_block(tx, inode, &block)?;
            }
            encode_inode_area(&mut inode.raw[at..], &candidate)?;
            ensure_ext_attr_feature(tx)?;
            return Ok(true);
        }
    }

    // Else the block. When the inode had the attribute the block was not
    // searched yet; the kernel searches it now too (a copy there, which
    // only a damaged filesystem has, is replaced rather than duplicated).
    match block.iter().position(is_it) {
        Some(p) => block[p] = new,
        None => block.push(new),
    }
    if !block_fits(bs, &block) {
        return Err(Error::NoSpace(format!(
            "xattr {} ({} bytes) does not fit in the inode or the xattr block",
            shown(),
            value.len()
        )));
    }
    store_block(tx, inode, &block)?;
    if let (Some(p), Some(at)) = (in_ibody, ibody_at) {
        ibody.remove(p);
        encode_inode_area(&mut inode.raw[at..], &ibody)?;
    }
    ensure_ext_attr_feature(tx)?;
    Ok(true)
}

/// How a rewrite of an existing block went.
enum Rewrite {
    /// The block was ours alone and now holds the new contents.
    InPlace,
    /// The block is shared: one reference dropped; the copy is used.
    Dropped,
    /// The block turned out to be shared and no copy was prepared.
    NeedCopy,
}

/// Makes `inode`'s xattr block hold exactly `entries`: frees it (or drops
/// a reference) when there are none, allocates one when there was none,
/// rewrites it in place when the inode is its only user, else copies.
fn store_block(tx: &Tx, inode: &mut Inode, entries: &[RawXattr]) -> Result<()> {
    let vol = tx.vol;
    if entries.is_empty() {
        return release_block(tx, inode);
    }
    let seed = vol.has_csum().then(|| vol.csum_seed());
    let content = encode_block(vol.block_size, entries)?;
    let old = inode.file_acl;
    if old == 0 {
        let new = new_block(tx, inode, &content, seed)?;
        inode.file_acl = new.get();
        // A whole cluster with bigalloc, as the kernel counts it.
        inode.blocks_512 += vol.sb.cluster_size() / 512;
        return Ok(());
    }
    // Prepare the copy up front when the block looks shared, so that the
    // decision below (under the block's lock) has it at hand.
    let (refs, _) = read_block(vol, inode)?;
    let mut copy = if refs > 1 { Some(new_block(tx, inode, &content, seed)?) } else { None };
    // At most two rounds: a second one only if the block became shared
    // in between, and then a copy is ready.
    for _ in 0..2 {
        let have_copy = copy.is_some();
        let outcome = tx.modify(old, |b| {
            let refs = le32(b, 4);
            if refs <= 1 {
                if b.len() != content.len() {
                    let kind = CorruptKind::Changed { what: "xattr block size" };
                    return Err(Error::corruption(Structure::Xattr, Location::Block(old), kind));
                }
                b.copy_from_slice(&content);
                if let Some(seed) = seed {
                    set_block_checksum(b, old, seed);
                }
                return Ok(Rewrite::InPlace);
            }
            if !have_copy {
                return Ok(Rewrite::NeedCopy);
            }
            put_le32(b, 4, refs - 1);
            if let Some(seed) = seed {
                set_block_checksum(b, old, seed);
            }
            Ok(Rewrite::Dropped)
        })?;
        match (outcome, copy) {
            (Rewrite::InPlace, Some(unused)) => {
                // The other users went away meanwhile: the copy is not needed.
                tx.free_blocks(unused, 1, FreeKind::Metadata)?;
                return Ok(());
            }
            (Rewrite::InPlace, None) => return Ok(()),
            (Rewrite::Dropped, Some(new)) => {
                // One block replaced by another: blocks_512 unchanged.
                inode.file_acl = new.get();
                return Ok(());
            }
            _ => copy = Some(new_block(tx, inode, &content, seed)?),
        }
    }
    Err(Error::corruption(Structure::Xattr, Location::Block(old), CorruptKind::Changed { what: "h_refcount" }))
}

/// Allocates a block for `inode`'s attributes (near the start of the
/// inode's group, as the kernel) and fills it with `content`.
fn new_block(tx: &Tx, inode: &Inode, content: &[u8], seed: Option<u32>) -> Result<PhysicalBlock> {
    let blk = tx.alloc_metadata_block(inode.ino, tx.inode_goal(inode.ino))?;
    let filled = tx.init(blk.get(), |b| {
        if b.len() != content.len() {
            return Err(Error::Invalid(format!("xattr block of {} bytes for a {}-byte block", content.len(), b.len())));
        }
        b.copy_from_slice(content);
        if let Some(seed) = seed {
            set_block_checksum(b, blk.get(), seed);
        }
        Ok(())
    });
    if let Err(e) = filled {
        // Do not leak the block.
        let _ = tx.free_blocks(blk, 1, FreeKind::Metadata);
        return Err(e);
    }
    Ok(blk)
}

/// Sets the ext_attr compat feature if the superblock lacks it, as the
/// kernel's ext4_xattr_update_super_block does on the first attribute
/// write (e2fsck expects it on a filesystem with attributes).
fn ensure_ext_attr_feature(tx: &Tx) -> Result<()> {
    let vol = tx.vol;
    if vol.sb.features.has_compat(compat::EXT_ATTR) {
        return Ok(());
    }
    let bs = vol.block_size as u64;
    let blk = SUPERBLOCK_OFFSET / bs;
    let off = (SUPERBLOCK_OFFSET % bs) as usize;
    // The open-time superblock is immutable; the block may already have
    // been updated by an earlier call.
    if le32(vol.block(blk)?.data(), off + S_FEATURE_COMPAT) & compat::EXT_ATTR != 0 {
        return Ok(());
    }
    let csum = vol.has_csum();
    tx.modify(blk, |b| {
        let raw = b.get_mut(off..off + SUPERBLOCK_SIZE).ok_or_else(|| {
            Error::corruption(
                Structure::Superblock,
                Location::Block(blk),
                CorruptKind::CrossesEnd { what: "superblock" },
            )
        })?;
        let f = le32(raw, S_FEATURE_COMPAT);
        put_le32(raw, S_FEATURE_COMPAT, f | compat::EXT_ATTR);
        if csum {
            let c = crc32c(!0, &raw[..S_CHECKSUM]);
            put_le32(raw, S_CHECKSUM, c);
        }
        Ok(())
    })
}

/// Drops `inode`'s reference to its xattr block (inode being deleted):
/// the block is freed with its last reference, else its count goes down.
/// Clears `file_acl` and the block's share of `blocks_512`.
pub fn release_block(tx: &Tx, inode: &mut Inode) -> Result<()> {
    let blk = inode.file_acl;
    if blk == 0 {
        return Ok(());
    }
    let vol = tx.vol;
    let seed = vol.has_csum().then(|| vol.csum_seed());
    // Validates magic, size and checksum before trusting the count.
    parse_block(vol.block(blk)?.data(), blk, seed)?;
    let last = tx.modify(blk, |b| {
        let refs = le32(b, 4);
        if refs <= 1 {
            return Ok(true);
        }
        put_le32(b, 4, refs - 1);
        if let Some(seed) = seed {
            let c = block_checksum(b, blk, seed);
            put_le32(b, 0x10, c);
        }
        Ok(false)
    })?;
    if last {
        tx.free_blocks(PhysicalBlock(blk), 1, FreeKind::Metadata)?;
    }
    inode.file_acl = 0;
    inode.blocks_512 = inode.blocks_512.saturating_sub(vol.sb.cluster_size() / 512);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(resolve_name(b"user.a").unwrap(), (INDEX_USER, &b"a"[..]));
        assert_eq!(resolve_name(b"trusted.x.y").unwrap(), (INDEX_TRUSTED, &b"x.y"[..]));
        assert_eq!(resolve_name(b"security.selinux").unwrap(), (INDEX_SECURITY, &b"selinux"[..]));
        assert_eq!(resolve_name(b"system.posix_acl_access").unwrap(), (INDEX_POSIX_ACL_ACCESS, &b""[..]));
        assert_eq!(resolve_name(b"system.posix_acl_default").unwrap(), (INDEX_POSIX_ACL_DEFAULT, &b""[..]));
        let errno = |n: &[u8]| resolve_name(n).unwrap_err().errno();
        assert_eq!(errno(b""), libc::ERANGE);
        assert_eq!(errno(&[b'u'; 256]), libc::ERANGE);
        assert_eq!(errno(b"user."), libc::EINVAL);
        assert_eq!(errno(b"system.data"), libc::EOPNOTSUPP);
        assert_eq!(errno(b"system.posix_acl_accessx"), libc::EOPNOTSUPP);
        assert_eq!(errno(b"other.x"), libc::EOPNOTSUPP);
        assert_eq!(errno(b"user.a\0b"), libc::EINVAL);
    }
}
