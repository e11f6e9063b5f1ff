//! Attribute values kept in their own inodes (the `ea_inode` feature):
//! reading them with the kernel's checks, creating one for a large value,
//! and the reference count that decides when one is freed.
//!
//! The layout (kernel fs/ext4/xattr.c, e2fsprogs lib/ext2fs/ext_attr.c):
//! the entry names the inode in `e_value_inum` and keeps the value's
//! length in `e_value_size`; its `e_hash` hashes the name and, as the one
//! value word, the value's crc32c. The value inode is a regular file
//! (mode 0600, the owner's uid and gid, one link, no directory entry)
//! flagged `EXT4_EA_INODE_FL`, whose data is the value; its `i_atime`
//! seconds hold the value's crc32c (seeded with the filesystem's checksum
//! seed) and its reference count is split over `i_ctime` seconds (high
//! 32 bits) and `i_version` (low 32 bits). Each entry naming it, in an
//! inode body or in an xattr block (a shared block counts once), holds
//! one reference; the kernel shares one inode between identical values
//! (this writer makes a new one per value and only keeps the counts of
//! shared ones right). Like the kernel, the value blocks are written
//! through the journal (they are revoked when freed), and the owner's
//! `i_blocks` is charged with the value's size rounded up to a cluster
//! (what e2fsck expects of the owner).
//!
//! Reference changes are read-modify-writes of the value inode's record
//! under its inode-table block's lock ([`Tx::modify_inode`]), and the
//! inode is freed in the same handle as the change that takes its count
//! to zero: no commit holds a count that disagrees with the entries, and
//! a count can only reach zero when no entry names the inode any more.

use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::FileBlock;
use crate::format::checksum::crc32c;
use crate::format::features::{incompat, ro_compat};
use crate::format::inode::{Inode, Timestamp, FL_EA_INODE, ROOT_INO, S_IFMT, S_IFREG};
use crate::format::xattr::{ea_entry_hash, RawXattr};
use crate::inode::extent_write as ew;
use crate::inode::{map_block, read_inode, MapKind, MAX_LBLK};
use crate::txn::Tx;
use crate::volume::Volume;

/// Credits one reference dropped to zero can take: the value inode's
/// table block, its bitmap and descriptor, the bitmaps and descriptors of
/// up to two groups of value blocks, an extent leaf with its bitmap and
/// descriptor, and the entry's area (inode or xattr block).
pub const DROP_CREDITS: usize = 12;

/// Credits a new value inode of `len` bytes can take besides the
/// entry's area: its bitmap and descriptor, inode-table blocks zeroed
/// below a new high-water mark, its own table block, every value block,
/// the bitmaps and descriptors of up to two groups of them, an extent
/// leaf with its bitmap and descriptor.
pub fn create_credits(block_size: usize, len: usize) -> usize {
    len.div_ceil(block_size.max(1)) + 2 + 4 + 1 + 4 + 3 + 2
}

/// True if the filesystem keeps large values in their own inodes.
pub fn enabled(vol: &Volume) -> bool {
    vol.sb.features.has_incompat(incompat::EA_INODE)
}

/// The hash a value inode carries for `value`: crc32c of the value seeded
/// with the filesystem's checksum seed (ext4_xattr_inode_hash; the seed is
/// there with ea_inode even without metadata_csum).
pub fn value_hash(vol: &Volume, value: &[u8]) -> u32 {
    crc32c(vol.csum_seed(), value)
}

/// What a value of `size` bytes in a value inode adds to its owner's
/// `i_blocks`: the size rounded up to whole clusters, in 512-byte units
/// (the kernel's quota charge, which e2fsck checks).
pub fn charge_sectors(vol: &Volume, size: u32) -> u64 {
    let sb = &vol.sb;
    let cluster = if sb.features.has_ro_compat(ro_compat::BIGALLOC) {
        1024u64 << sb.log_cluster_size.min(30)
    } else {
        vol.block_size as u64
    };
    u64::from(size).div_ceil(cluster) * cluster / 512
}

/// The reference count of value inode `i`.
pub fn get_ref(i: &Inode) -> u64 {
    ((i.ctime.sec as u64 & 0xFFFF_FFFF) << 32) | (i.version & 0xFFFF_FFFF)
}

/// Stores reference count `r` in value inode `i` (ctime seconds take the
/// high half, nanoseconds 0; `i_version` the low half, its high word 0).
fn set_ref(i: &mut Inode, r: u64) {
    i.ctime = Timestamp { sec: (r >> 32) as i64, nsec: 0 };
    i.version = r & 0xFFFF_FFFF;
}

/// The value hash value inode `i` carries (its atime seconds).
pub fn stored_hash(i: &Inode) -> u32 {
    i.atime.sec as u32
}

fn corrupt(ino: u32, kind: CorruptKind) -> Error {
    Error::corruption(Structure::Xattr, Location::Inode(ino), kind)
}

/// Checks what can be checked of entry `e` of inode `owner` without
/// reading its value inode (the kernel's check_xattrs): the feature, the
/// inode number's range, a non-empty value.
pub fn check_entry(vol: &Volume, owner: u32, e: &RawXattr) -> Result<()> {
    let ino = e.value_inum;
    if ino == 0 {
        return Ok(());
    }
    if !enabled(vol) {
        return Err(corrupt(owner, CorruptKind::Conflict { a: "e_value_inum", b: "no ea_inode feature" }));
    }
    let sb = &vol.sb;
    if ino == ROOT_INO || ino == owner || ino < sb.first_ino || ino > sb.inodes_count {
        return Err(corrupt(owner, CorruptKind::OutOfRange { field: "e_value_inum", value: u64::from(ino) }));
    }
    if e.value_size == 0 {
        return Err(corrupt(owner, CorruptKind::OutOfRange { field: "e_value_size", value: 0 }));
    }
    Ok(())
}

/// Reads value inode `ino`, checking that it is one (in use, flagged).
fn load(vol: &Volume, ino: u32) -> Result<Inode> {
    let i = read_inode(vol, ino)?;
    if i.mode & S_IFMT != S_IFREG || i.links_count == 0 {
        return Err(corrupt(ino, CorruptKind::WrongType { expected: "EA inode in use", found: u64::from(i.mode) }));
    }
    if i.flags & FL_EA_INODE == 0 {
        return Err(corrupt(ino, CorruptKind::Missing { what: "EXT4_EA_INODE_FL of a value inode" }));
    }
    Ok(i)
}

/// `e_hash` as old kernels computed it, with the name's bytes signed
/// (ext4_xattr_hash_entry_signed; the kernel still accepts it).
fn signed_entry_hash(name: &[u8], value_hash: u32) -> u32 {
    let mut h = 0u32;
    for &c in name {
        h = (h << 5) ^ (h >> 27) ^ (c as i8 as i32 as u32);
    }
    (h << 16) ^ (h >> 16) ^ value_hash
}

/// The value of entry `e` of inode `owner`, read from its value inode
/// and checked as the kernel does: the inode is a value inode, its size
/// is the entry's, every block is mapped, the value's crc32c is the one
/// the inode carries and the entry's hash covers it. An old Lustre-style
/// value inode (no hash; its mtime names the owner and it has the
/// owner's generation) is read without the hash checks, as the kernel
/// does.
pub fn read_value(vol: &Volume, owner: &Inode, e: &RawXattr) -> Result<Vec<u8>> {
    check_entry(vol, owner.ino, e)?;
    let ino = e.value_inum;
    let i = load(vol, ino)?;
    if i.size != u64::from(e.value_size) {
        return Err(corrupt(
            ino,
            CorruptKind::Mismatch { field: "EA inode i_size", value: i.size, expected: u64::from(e.value_size) },
        ));
    }
    let bs = vol.block_size as u64;
    let len = e.value_size as usize;
    let mut out = Vec::with_capacity(len);
    let mut lblk = FileBlock(0);
    let end = FileBlock(u64::from(e.value_size).div_ceil(bs));
    while lblk < end {
        let m = map_block(vol, &i, lblk)?;
        let MapKind::Mapped(p) = m.kind else {
            // ext4_xattr_inode_read: there are no holes in a value inode.
            return Err(corrupt(ino, CorruptKind::Hole { lblk: lblk.get() }));
        };
        let n = m.len.min(end - lblk);
        if !vol.valid_range(p.get(), n) {
            return Err(corrupt(
                ino,
                CorruptKind::OutsideFilesystem { what: "EA inode block", block: p.get(), len: n },
            ));
        }
        for k in 0..n {
            let b = vol.block(p.get() + k)?;
            let take = (len - out.len()).min(b.data().len());
            out.extend_from_slice(&b.data()[..take]);
        }
        lblk += n;
    }
    let hash = value_hash(vol, &out);
    if hash != stored_hash(&i) {
        let lustre = i.mtime.sec as u32 == owner.ino && i.generation == owner.generation;
        if lustre {
            return Ok(out);
        }
        return Err(corrupt(
            ino,
            CorruptKind::Mismatch {
                field: "EA inode value hash",
                value: u64::from(stored_hash(&i)),
                expected: u64::from(hash),
            },
        ));
    }
    if e.hash != ea_entry_hash(&e.name, hash) && e.hash != signed_entry_hash(&e.name, hash) {
        return Err(corrupt(
            owner.ino,
            CorruptKind::Mismatch {
                field: "e_hash",
                value: u64::from(e.hash),
                expected: u64::from(ea_entry_hash(&e.name, hash)),
            },
        ));
    }
    Ok(out)
}

/// Creates a value inode for `value` owned by `owner` (near it, with its
/// uid and gid), reference count 1: allocates the inode and its blocks,
/// writes the value through the journal and the inode. Returns its number
/// and the value's hash. On an error nothing stays allocated (ENOSPC
/// part-way frees what was taken; the caller settles the handle).
pub fn create(tx: &Tx, owner: &Inode, value: &[u8]) -> Result<(u32, u32)> {
    let vol = tx.vol;
    if !vol.sb.features.has_incompat(incompat::EXTENTS) {
        return Err(Error::Unsupported("EA inodes on a filesystem without extents".into()));
    }
    let bs = vol.block_size;
    let hash = value_hash(vol, value);
    let ino = tx.alloc_inode(owner.ino, false)?;
    let mut ea = Inode::new_raw(&vol.sb, ino);
    let now = Timestamp::now();
    ea.mode = S_IFREG | 0o600;
    ea.uid = owner.uid;
    ea.gid = owner.gid;
    ea.links_count = 1;
    ea.mtime = now;
    if ea.crtime.is_some() {
        ea.crtime = Some(now);
    }
    ea.atime = Timestamp { sec: i64::from(hash), nsec: 0 };
    set_ref(&mut ea, 1);
    // Any number will do (the kernel's is random); mixing the clock keeps
    // a reused inode number from getting its old generation back.
    ea.generation = now.nsec.rotate_left(7) ^ ino.wrapping_mul(0x9E37_79B9) ^ hash;
    ea.flags = FL_EA_INODE;
    ew::init_root(&mut ea);
    ea.size = value.len() as u64;
    let nblocks = value.len().div_ceil(bs) as u64;
    let mut mapped = 0;
    while mapped < nblocks {
        let got = ew::allocate_range(
            tx,
            &mut ea,
            FileBlock(mapped),
            nblocks - mapped,
            false,
            crate::alloc::flags::NO_PREALLOC,
            value.len() as u64,
        );
        let runs = match got {
            Ok(runs) if !runs.is_empty() => runs,
            Ok(_) => {
                undo(tx, &mut ea)?;
                return Err(Error::Invalid(format!("EA inode {ino}: the handle has no credits left for its blocks")));
            }
            Err(e) => {
                undo(tx, &mut ea)?;
                return Err(e);
            }
        };
        for (lblk, pblk, n) in runs {
            for k in 0..n {
                let at = ((lblk.get() + k) as usize) * bs;
                let chunk = &value[at.min(value.len())..(at + bs).min(value.len())];
                tx.init(pblk.get() + k, |b| {
                    b[..chunk.len()].copy_from_slice(chunk);
                    b[chunk.len()..].fill(0);
                    Ok(())
                })?;
            }
            mapped = mapped.max(lblk.get() + n);
        }
    }
    tx.write_inode(&mut ea)?;
    Ok((ino, hash))
}

/// Gives back what a creation that failed part-way took: its blocks
/// (and extent blocks) and its inode number.
fn undo(tx: &Tx, ea: &mut Inode) -> Result<()> {
    ew::remove_range(tx, ea, FileBlock(0), MAX_LBLK)?;
    tx.free_inode(ea.ino, false)
}

/// Changes the reference count of value inode `ino` by `delta` (+1 or
/// -1); at zero the inode and its blocks are freed in this handle.
pub fn adjust_ref(tx: &Tx, ino: u32, delta: i64) -> Result<()> {
    let last = tx.modify_inode(ino, |i| {
        if i.flags & FL_EA_INODE == 0 || i.links_count == 0 {
            return Err(corrupt(ino, CorruptKind::Missing { what: "EXT4_EA_INODE_FL of a value inode" }));
        }
        let r = get_ref(i) as i64 + delta;
        if r < 0 {
            return Err(corrupt(ino, CorruptKind::OutOfRange { field: "EA inode reference count", value: 0 }));
        }
        set_ref(i, r as u64);
        Ok(r == 0)
    })?;
    if last {
        free(tx, ino)?;
    }
    Ok(())
}

/// Frees value inode `ino` (no references left): its blocks, then the
/// inode (links 0, dtime set, as a deleted file).
pub fn free(tx: &Tx, ino: u32) -> Result<()> {
    let mut i = read_inode(tx.vol, ino)?;
    if i.uses_extents() {
        ew::remove_range(tx, &mut i, FileBlock(0), MAX_LBLK)?;
    } else if i.blocks_512 != 0 {
        return Err(Error::Unsupported(format!("freeing block-mapped EA inode {ino}")));
    }
    i.links_count = 0;
    i.size = 0;
    i.blocks_512 = 0;
    i.dtime = Timestamp::now().sec as u32;
    tx.write_inode_dtime(&mut i)?;
    tx.free_inode(ino, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_count_and_hash_fields() {
        let sb_less = |r: u64| {
            let mut i = Inode {
                ino: 20,
                mode: 0,
                uid: 0,
                gid: 0,
                size: 0,
                atime: Timestamp::default(),
                ctime: Timestamp::default(),
                mtime: Timestamp::default(),
                crtime: None,
                dtime: 0,
                links_count: 1,
                blocks_512: 0,
                flags: 0,
                version: 0xDEAD_0000_0000_0000,
                block: [0; 60],
                generation: 0,
                file_acl: 0,
                extra_isize: 32,
                projid: 0,
                raw: vec![0; 256],
            };
            set_ref(&mut i, r);
            i
        };
        for r in [0, 1, 2, 0xFFFF_FFFF, 0x1_0000_0003] {
            assert_eq!(get_ref(&sb_less(r)), r);
        }
        let mut i = sb_less(1);
        i.atime = Timestamp { sec: i64::from(0xdcb4_8f9au32), nsec: 0 };
        assert_eq!(stored_hash(&i), 0xdcb4_8f9a);
        // Stored as the kernel does: low word in the seconds field, the
        // epoch bit in the extra word.
        assert_eq!(i.atime.encode(), (0xdcb4_8f9a, 1));
        assert_eq!(signed_entry_hash(b"big", 7), ea_entry_hash(b"big", 7));
    }
}
