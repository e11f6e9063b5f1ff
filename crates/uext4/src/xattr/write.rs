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
//!
//! With `ea_inode`, a value too large for a block (or for the room left)
//! goes into an EA inode of its own ([`super::ea_inode`]) and the entry
//! keeps only its descriptor. Every entry naming an EA inode holds one
//! reference on it: entries that go away (replaced, removed, in a block
//! rewritten in place or freed) drop theirs, a copy of a shared block
//! takes one for each of its entries, and a dying inode drops its own
//! ([`drop_ea_refs`]).

use super::ea_inode;
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::PhysicalBlock;
use crate::format::bytes::{le32, put_le32};
use crate::format::checksum::crc32c;
use crate::format::features::compat;
use crate::format::inode::{Inode, GOOD_OLD_INODE_SIZE};
use crate::format::superblock::{SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use crate::format::xattr::{
    block_checksum, block_fits, block_reserve, ea_entry_hash, encode_block, encode_inode_area, inode_area_fits,
    min_large_value, parse_block_raw, parse_inode_area_raw, set_block_checksum, value_len, values_bytes, RawXattr,
    BLOCK_HEADER_SIZE, INDEX_POSIX_ACL_ACCESS, INDEX_POSIX_ACL_DEFAULT, INDEX_SECURITY, INDEX_TRUSTED, INDEX_USER,
    NAME_MAX,
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
/// xattr blocks and EA inodes through `tx`; the caller writes the inode
/// (with a new ctime) when this returns `Ok(true)`. `Ok(false)`: nothing
/// changed (the value was already there, or there was nothing to remove
/// and `presence` allowed that). On an error the caller must not write
/// `inode`; errors of the checks come before any change, and ENOSPC
/// leaves nothing allocated (the caller may settle its handle).
///
/// With the ea_inode feature a value goes into an EA inode of its own
/// when it is longer than a block could take ([`min_large_value`]) or
/// fits neither in the inode nor in the block (ext4_xattr_set_handle's
/// retry); a local value may then not eat into the block's reserve for
/// names ([`block_reserve`]). Replaced and removed values in EA inodes
/// lose their reference ([`ea_inode::adjust_ref`]).
///
/// Errors: EEXIST / ENODATA per `presence`, ENOSPC when the value fits
/// neither in the inode nor in the block (nor, with ea_inode, in an EA
/// inode), corruption of the existing area, block or EA inodes.
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
    // The in-inode entries as they were, for the owner's quota charge of
    // EA inode references (the block's follow in store_block).
    let ibody_before = ibody.clone();
    let old_block = if inode.file_acl != 0 { read_block(vol, inode)?.1 } else { Vec::new() };
    for e in ibody.iter().chain(&old_block) {
        ea_inode::check_entry(vol, inode.ino, e)?;
    }
    let mut block = old_block.clone();
    let is_it = |e: &RawXattr| e.index == index && e.name == name;
    let in_ibody = ibody.iter().position(is_it);
    // As the kernel: the block is searched only when the inode does not
    // have the attribute.
    let in_block = if in_ibody.is_none() { block.iter().position(is_it) } else { None };
    let shown = || String::from_utf8_lossy(&RawXattr::local(index, name, b"").full_name()).into_owned();
    let found = in_ibody.is_some() || in_block.is_some();
    match presence {
        Presence::Absent if found => return Err(Error::Exists(shown())),
        Presence::Present if !found => return Err(Error::NoAttr(shown())),
        _ => {}
    }
    // The entry that goes away (replaced or removed), for its EA inode's
    // reference and its owner's charge.
    let old_entry = in_ibody.map(|p| ibody[p].clone()).or_else(|| in_block.map(|p| block[p].clone()));
    let old_charge =
        old_entry.as_ref().filter(|e| e.value_inum != 0).map_or(0, |e| ea_inode::charge_sectors(vol, e.value_size));
    // An i_blocks that does not cover the old value's charge is corrupt:
    // refused before anything changes.
    inode.blocks_less(old_charge)?;

    let Some(value) = value else {
        // Removal.
        if let (Some(p), Some(at)) = (in_ibody, ibody_at) {
            let gone = ibody.remove(p);
            encode_inode_area(&mut inode.raw[at..], &ibody)?;
            if gone.value_inum != 0 {
                ea_inode::adjust_ref(tx, gone.value_inum, -1)?;
            }
        } else if let Some(p) = in_block {
            block.remove(p);
            store_block(tx, inode, &old_block, &block, 0)?;
        } else {
            return Ok(false);
        }
        inode.blocks_512 = inode.blocks_less(old_charge)?;
        charge_ibody(tx, inode, ibody_at, &ibody_before)?;
        return Ok(true);
    };

    // Setting a value that is already there changes nothing (and, as in
    // the kernel, not even ctime). A value in an EA inode is never
    // compared (ext4_xattr_value_same).
    if old_entry.as_ref().and_then(|e| e.value.as_deref()) == Some(value) {
        return Ok(false);
    }

    let ea_ok = ea_inode::enabled(vol);
    let mut in_ea = ea_ok && value_len(value.len()) > min_large_value(bs);
    let plan = loop {
        let new = if in_ea {
            // Placeholder inode number until the placement is known.
            RawXattr {
                value: None,
                value_inum: u32::MAX,
                value_size: value.len() as u32,
                ..RawXattr::local(index, name, b"")
            }
        } else {
            RawXattr::local(index, name, value)
        };
        if let Some(plan) =
            place(bs, ea_ok, ibody_at.map(|at| inode.raw.len() - at), &ibody, &block, in_ibody, in_block, new)
        {
            break plan;
        }
        if ea_ok && !in_ea && !value.is_empty() {
            in_ea = true;
            continue;
        }
        return Err(Error::NoSpace(format!(
            "xattr {} ({} bytes) does not fit in the inode or the xattr block",
            shown(),
            value.len()
        )));
    };

    // The value's own inode first (as the kernel prepares it before
    // touching the areas); undone if what follows runs out of space. Its
    // owner is charged the inode and the value's space, refused past a
    // quota limit (ext4_xattr_inode_alloc_quota).
    if in_ea {
        let space = ea_inode::charge_sectors(vol, value.len() as u32) * 512;
        tx.check_quota_ea(inode, space)?;
    }
    let fresh = if in_ea {
        let (ino, vhash) = ea_inode::create(tx, inode, value)?;
        Some((ino, ea_entry_hash(name, vhash)))
    } else {
        None
    };
    let fill = |mut entries: Vec<RawXattr>| {
        if let Some((ino, hash)) = fresh {
            for e in entries.iter_mut().filter(|e| e.value_inum == u32::MAX && e.index == index && e.name == name) {
                e.value_inum = ino;
                e.hash = hash;
            }
        }
        entries
    };
    let fresh_ino = fresh.map_or(0, |f| f.0);
    let done = match plan {
        Plan::Ibody(candidate) => {
            let candidate = fill(candidate);
            // The block change may fail (allocation for a copy of a
            // shared block); do it before touching the inode's copy.
            if let Some(p) = in_block {
                block.remove(p);
                if let Err(e) = store_block(tx, inode, &old_block, &block, 0) {
                    return abandon(tx, fresh_ino, e);
                }
            }
            let at = ibody_at.ok_or_else(|| Error::Invalid("in-inode placement without an in-inode area".into()))?;
            encode_inode_area(&mut inode.raw[at..], &candidate)
        }
        Plan::Block(candidate) => {
            let candidate = fill(candidate);
            if let Err(e) = store_block(tx, inode, &old_block, &candidate, fresh_ino) {
                return abandon(tx, fresh_ino, e);
            }
            match (in_ibody, ibody_at) {
                (Some(p), Some(at)) => {
                    ibody.remove(p);
                    encode_inode_area(&mut inode.raw[at..], &ibody)
                }
                _ => Ok(()),
            }
        }
    };
    done?;
    // The old value's EA inode loses the reference the inode held (one in
    // the block was dropped by store_block).
    if let Some(e) = old_entry.as_ref().filter(|e| in_ibody.is_some() && e.value_inum != 0) {
        ea_inode::adjust_ref(tx, e.value_inum, -1)?;
    }
    let new_charge = if in_ea { ea_inode::charge_sectors(vol, value.len() as u32) } else { 0 };
    inode.blocks_512 = inode.blocks_less(old_charge)? + new_charge;
    charge_ibody(tx, inode, ibody_at, &ibody_before)?;
    ensure_ext_attr_feature(tx)?;
    Ok(true)
}

/// Where a new value goes.
enum Plan {
    /// The in-inode area, with these entries.
    Ibody(Vec<RawXattr>),
    /// The xattr block, with these entries.
    Block(Vec<RawXattr>),
}

/// The placement of entry `new` (ext4_xattr_set_handle): the inode's area
/// (of `ibody_len` bytes, if it has one) if it fits there, else the
/// block; None when neither has room. `in_ibody`/`in_block`: where the
/// attribute is now.
#[allow(clippy::too_many_arguments)]
fn place(
    bs: usize,
    ea_ok: bool,
    ibody_len: Option<usize>,
    ibody: &[RawXattr],
    block: &[RawXattr],
    in_ibody: Option<usize>,
    in_block: Option<usize>,
    new: RawXattr,
) -> Option<Plan> {
    if let Some(len) = ibody_len {
        let mut candidate = ibody.to_vec();
        match in_ibody {
            Some(p) => candidate[p] = new.clone(),
            // In-inode entries are unsorted: new ones go last.
            None => candidate.push(new.clone()),
        }
        if inode_area_fits(len, &candidate) {
            return Some(Plan::Ibody(candidate));
        }
    }
    // Else the block. When the inode had the attribute the block was not
    // searched yet; the kernel searches it now too (a copy there, which
    // only a damaged filesystem has, is replaced rather than duplicated).
    let mut candidate = block.to_vec();
    let is_it = |e: &RawXattr| e.index == new.index && e.name == new.name;
    match in_block.or_else(|| candidate.iter().position(is_it)) {
        Some(p) => candidate[p] = new.clone(),
        None => candidate.push(new.clone()),
    }
    if !block_fits(bs, &candidate) {
        return None;
    }
    // With EA inodes to fall back on, a local value may not take the
    // room kept for names (EXT4_XATTR_BLOCK_RESERVE).
    let local = new.value.as_ref().is_some_and(|v| !v.is_empty());
    if ea_ok && local && bs.saturating_sub(BLOCK_HEADER_SIZE + values_bytes(&candidate)) < block_reserve(bs) {
        return None;
    }
    Some(Plan::Block(candidate))
}

/// Gives up a change after the EA inode `fresh` (0: none) was created:
/// frees it and returns `err`.
fn abandon(tx: &Tx, fresh: u32, err: Error) -> Result<bool> {
    if fresh != 0 {
        ea_inode::free(tx, fresh)?;
    }
    Err(err)
}

/// How many of `entries` keep their value in an EA inode: each charges
/// the inode that names it one inode of quota ([`Tx::charge_ea_refs`]).
fn ea_refs(entries: &[RawXattr]) -> i64 {
    entries.iter().filter(|e| e.value_inum != 0).count() as i64
}

/// Charges `inode`'s owner for the change of its in-inode entries from
/// `before` to what `inode.raw` holds now (at `ibody_at`).
fn charge_ibody(tx: &Tx, inode: &Inode, ibody_at: Option<usize>, before: &[RawXattr]) -> Result<()> {
    let after = match ibody_at {
        Some(at) => parse_inode_area_raw(&inode.raw[at..], inode.ino)?,
        None => Vec::new(),
    };
    tx.charge_ea_refs(inode, ea_refs(&after) - ea_refs(before))
}

/// The EA inodes named by entries of `from` that `to` does not keep (the
/// same name with the same inode).
fn refs_not_in(from: &[RawXattr], to: &[RawXattr]) -> Vec<u32> {
    from.iter()
        .filter(|e| e.value_inum != 0)
        .filter(|e| !to.iter().any(|t| t.index == e.index && t.name == e.name && t.value_inum == e.value_inum))
        .map(|e| e.value_inum)
        .collect()
}

/// Adds `delta` to the reference count of each EA inode in `inos`.
fn adjust_all(tx: &Tx, inos: &[u32], delta: i64) -> Result<()> {
    for &ino in inos {
        ea_inode::adjust_ref(tx, ino, delta)?;
    }
    Ok(())
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

/// Makes `inode`'s xattr block hold exactly `entries` (it held `old`):
/// frees it (or drops a reference) when there are none, allocates one
/// when there was none, rewrites it in place when the inode is its only
/// user, else copies. `fresh`: the EA inode of the new value, if any,
/// whose one reference the new entry takes over.
///
/// EA inode references follow the block's entries: a copy holds a new
/// reference to each EA inode it names (taken before the old block's
/// count drops, so that no other user of the old block can free one in
/// between), a block rewritten in place drops those of the entries it
/// lost, and a freed block those of all its entries.
fn store_block(tx: &Tx, inode: &mut Inode, old: &[RawXattr], entries: &[RawXattr], fresh: u32) -> Result<()> {
    let vol = tx.vol;
    if entries.is_empty() {
        return release_block(tx, inode);
    }
    // The owner's quota charge for the EA inodes the block's entries
    // name, settled once the block holds `entries`.
    let charged = ea_refs(entries) - ea_refs(old);
    let seed = vol.has_csum().then(|| vol.csum_seed());
    let content = encode_block(vol.block_size, entries)?;
    let carried: Vec<u32> =
        entries.iter().filter(|e| e.value_inum != 0 && e.value_inum != fresh).map(|e| e.value_inum).collect();
    let prev = inode.file_acl;
    if prev == 0 {
        // The block is charged to the inode's owners (dquot_alloc_block).
        tx.check_quota_space(inode, vol.sb.cluster_size())?;
        let new = new_block(tx, inode, &content, seed)?;
        inode.file_acl = new.get();
        // A whole cluster with bigalloc, as the kernel counts it.
        inode.blocks_512 += vol.sb.cluster_size() / 512;
        adjust_all(tx, &carried, 1)?;
        return tx.charge_ea_refs(inode, charged);
    }
    // Prepare the copy up front when the block looks shared, so that the
    // decision below (under the block's lock) has it at hand.
    let (refs, _) = read_block(vol, inode)?;
    let mut copy = None;
    if refs > 1 {
        copy = Some(new_block(tx, inode, &content, seed)?);
        adjust_all(tx, &carried, 1)?;
    }
    // At most two rounds: a second one only if the block became shared
    // in between, and then a copy is ready.
    for _ in 0..2 {
        let have_copy = copy.is_some();
        let outcome = tx.modify(prev, |b| {
            let refs = le32(b, 4);
            if refs <= 1 {
                if b.len() != content.len() {
                    let kind = CorruptKind::Changed { what: "xattr block size" };
                    return Err(Error::corruption(Structure::Xattr, Location::Block(prev), kind));
                }
                b.copy_from_slice(&content);
                if let Some(seed) = seed {
                    set_block_checksum(b, prev, seed);
                }
                return Ok(Rewrite::InPlace);
            }
            if !have_copy {
                return Ok(Rewrite::NeedCopy);
            }
            put_le32(b, 4, refs - 1);
            if let Some(seed) = seed {
                set_block_checksum(b, prev, seed);
            }
            Ok(Rewrite::Dropped)
        })?;
        match (outcome, copy) {
            (Rewrite::InPlace, Some(unused)) => {
                // The other users went away meanwhile: the copy and its
                // references are not needed.
                tx.free_blocks(unused, 1, FreeKind::Metadata)?;
                adjust_all(tx, &carried, -1)?;
                adjust_all(tx, &refs_not_in(old, entries), -1)?;
                return tx.charge_ea_refs(inode, charged);
            }
            (Rewrite::InPlace, None) => {
                adjust_all(tx, &refs_not_in(old, entries), -1)?;
                let added: Vec<u32> = refs_not_in(entries, old).into_iter().filter(|&i| i != fresh).collect();
                adjust_all(tx, &added, 1)?;
                return tx.charge_ea_refs(inode, charged);
            }
            (Rewrite::Dropped, Some(new)) => {
                // One block replaced by another: blocks_512 unchanged.
                inode.file_acl = new.get();
                return tx.charge_ea_refs(inode, charged);
            }
            _ => {
                copy = Some(new_block(tx, inode, &content, seed)?);
                adjust_all(tx, &carried, 1)?;
            }
        }
    }
    Err(Error::corruption(Structure::Xattr, Location::Block(prev), CorruptKind::Changed { what: "h_refcount" }))
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

/// Drops `inode`'s reference to its xattr block (inode being deleted, or
/// its last attribute there removed): the block is freed with its last
/// reference, and then the EA inodes its entries name lose theirs; else
/// its count goes down. Clears `file_acl` and the block's share of
/// `blocks_512`.
pub fn release_block(tx: &Tx, inode: &mut Inode) -> Result<()> {
    let blk = inode.file_acl;
    if blk == 0 {
        return Ok(());
    }
    let vol = tx.vol;
    let seed = vol.has_csum().then(|| vol.csum_seed());
    // Validates magic, size and checksum before trusting the count.
    let (_, entries) = parse_block_raw(vol.block(blk)?.data(), blk, seed)?;
    let left = inode.blocks_less(vol.sb.cluster_size() / 512)?;
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
        // Nobody else could see the block any more: its entries' EA
        // inodes lose the references it held.
        let inos: Vec<u32> = entries.iter().filter(|e| e.value_inum != 0).map(|e| e.value_inum).collect();
        adjust_all(tx, &inos, -1)?;
    }
    // Shared or not, the inode no longer names the block's EA inodes.
    tx.charge_ea_refs(inode, -ea_refs(&entries))?;
    inode.file_acl = 0;
    inode.blocks_512 = left;
    Ok(())
}

/// Drops the references `inode` (being deleted) holds on EA inodes, as
/// the kernel's ext4_xattr_delete_inode: each entry of its in-inode area
/// that names one, and those of its xattr block when the inode is the
/// block's only user (a shared block keeps them; [`release_block`] drops
/// them if it turns out to be the last user). Each entry is removed in
/// the same handle as its reference, so a crash part-way leaves an
/// orphan whose deletion goes on from there, and `blocks_512` loses the
/// value's charge. `bounded`: stop (false) before a step might not fit
/// in the handle's credits with `reserve` left; the caller writes the
/// inode and goes on in a new handle. True when none are left.
pub fn drop_ea_refs(tx: &Tx, inode: &mut Inode, bounded: bool, reserve: usize) -> Result<bool> {
    let vol = tx.vol;
    if !ea_inode::enabled(vol) {
        return Ok(true);
    }
    let room = |tx: &Tx| !bounded || tx.handle.credits_left() >= ea_inode::DROP_CREDITS + reserve;
    if let Some(at) = ibody_start(inode) {
        let mut ibody = parse_inode_area_raw(&inode.raw[at..], inode.ino)?;
        while let Some(p) = ibody.iter().position(|e| e.value_inum != 0) {
            if !room(tx) {
                return Ok(false);
            }
            let gone = ibody.remove(p);
            ea_inode::check_entry(vol, inode.ino, &gone)?;
            let left = inode.blocks_less(ea_inode::charge_sectors(vol, gone.value_size))?;
            encode_inode_area(&mut inode.raw[at..], &ibody)?;
            inode.blocks_512 = left;
            ea_inode::adjust_ref(tx, gone.value_inum, -1)?;
            tx.charge_ea_refs(inode, -1)?;
        }
    }
    if inode.file_acl == 0 {
        return Ok(true);
    }
    let (refs, mut block) = read_block(vol, inode)?;
    if refs > 1 {
        return Ok(true);
    }
    while let Some(p) = block.iter().position(|e| e.value_inum != 0) {
        if !room(tx) {
            return Ok(false);
        }
        let old = block.clone();
        let gone = block.remove(p);
        ea_inode::check_entry(vol, inode.ino, &gone)?;
        let charge = ea_inode::charge_sectors(vol, gone.value_size);
        inode.blocks_less(charge)?;
        store_block(tx, inode, &old, &block, 0)?;
        inode.blocks_512 = inode.blocks_less(charge)?;
        if inode.file_acl == 0 {
            break;
        }
    }
    Ok(true)
}

/// Credits one attribute change of `inode` to a value of `value_len`
/// bytes (0: a removal) can take: the inode, the old and the new xattr
/// block with their bitmaps and descriptors, the superblock; with
/// ea_inode also a new EA inode for the value, the old value's EA inode
/// freed, and a reference change for each EA inode the inode's entries
/// name (a copied block takes a new one on each).
pub fn credits(vol: &Volume, inode: &Inode, value_len: usize) -> usize {
    const BASE: usize = 16;
    if !ea_inode::enabled(vol) {
        return BASE;
    }
    let mut named = ibody_start(inode)
        .and_then(|at| parse_inode_area_raw(&inode.raw[at..], inode.ino).ok())
        .map_or(0, |v| v.iter().filter(|e| e.value_inum != 0).count());
    if inode.file_acl != 0 {
        named += read_block(vol, inode).map_or(0, |(_, v)| v.iter().filter(|e| e.value_inum != 0).count());
    }
    BASE + ea_inode::create_credits(vol.block_size, value_len) + ea_inode::DROP_CREDITS + named
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
