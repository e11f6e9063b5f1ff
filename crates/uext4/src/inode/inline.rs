//! Inline data (the `inline_data` feature): inodes flagged
//! `EXT4_INLINE_DATA_FL` keep their contents in the inode itself, the
//! first 60 bytes in `i_block` and the rest in the value of the in-inode
//! extended attribute `system.data` (index 7, name "data"), which exists,
//! possibly empty, on every such inode (kernel fs/ext4/inline.c).
//!
//! A file's bytes are `i_block` followed by the value, cut at `i_size`.
//! A directory's `i_block` starts with the parent's inode number (4
//! bytes, in place of "." and ".."), then entries whose records cover the
//! rest of `i_block`; the value, when not empty, holds more entries
//! covering it whole. Neither part has a checksum tail.
//!
//! This module decodes and re-encodes those bytes; it does no I/O and
//! never maps blocks (an inline inode has no block map: [`super::map_block`]
//! refuses it).

use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::dirent::{self, rec_len_for};
use crate::format::inode::{Inode, FL_EXTENTS, FL_INLINE_DATA, GOOD_OLD_INODE_SIZE, I_BLOCK_SIZE};
use crate::format::xattr::{encode_inode_area, inode_area_fits, parse_inode_area_raw, RawXattr, INDEX_SYSTEM};

/// The name (after `system.`) of the attribute holding the bytes past
/// `i_block`.
pub const DATA_NAME: &[u8] = b"data";
/// Bytes of `i_block` that hold a directory's parent inode number.
pub const DOTDOT_SIZE: usize = 4;
/// Position shift of inline directory entries in listings, as the kernel
/// uses (ext4_read_inline_dir): "." at 0, ".." at 12, and an entry at
/// byte `o` of the inline bytes at `o + 20` (the two dot records, 24
/// bytes, stand for the 4-byte parent number).
pub const DIR_POS_SHIFT: u64 = 12 + 12 - DOTDOT_SIZE as u64;

fn is_data(e: &RawXattr) -> bool {
    e.index == INDEX_SYSTEM && e.name == DATA_NAME
}

fn bad(ino: u32, kind: CorruptKind) -> Error {
    Error::corruption(Structure::Inode, Location::Inode(ino), kind)
}

/// The value of `system.data` (empty when absent: the kernel treats a
/// missing attribute as no data past `i_block`).
pub fn data_value(inode: &Inode) -> Result<Vec<u8>> {
    let entries = parse_inode_area_raw(inode.xattr_area(), inode.ino)?;
    match entries.into_iter().find(is_data) {
        Some(e) => e.value.ok_or_else(|| bad(inode.ino, CorruptKind::Malformed { what: "system.data in an EA inode" })),
        None => Ok(Vec::new()),
    }
}

/// All inline bytes: `i_block` then the `system.data` value (the inline
/// capacity in use, which may exceed `i_size`).
pub fn bytes(inode: &Inode) -> Result<Vec<u8>> {
    let mut v = inode.block.to_vec();
    v.extend(data_value(inode)?);
    Ok(v)
}

/// Reads file bytes at `offset` into `buf` from an inline inode: short at
/// `i_size`; bytes inside `i_size` past the inline bytes read as zeros,
/// as the kernel's inline read fills the rest of its page.
pub fn read_at(inode: &Inode, offset: u64, buf: &mut [u8]) -> Result<usize> {
    if offset >= inode.size {
        return Ok(0);
    }
    let total = (inode.size - offset).min(buf.len() as u64) as usize;
    let src = bytes(inode)?;
    let dst = &mut buf[..total];
    dst.fill(0);
    if let Ok(start) = usize::try_from(offset) {
        if start < src.len() {
            let n = (src.len() - start).min(total);
            dst[..n].copy_from_slice(&src[start..start + n]);
        }
    }
    Ok(total)
}

/// The file's bytes (`i_size` of them: inline bytes, zeros past them).
fn file_bytes(inode: &Inode) -> Result<Vec<u8>> {
    let cap = capacity(inode);
    let size = usize::try_from(inode.size).ok().filter(|&s| s <= cap).ok_or_else(|| {
        bad(
            inode.ino,
            CorruptKind::OutsideRange { what: "inline i_size", value: inode.size, start: 0, end: cap as u64 + 1 },
        )
    })?;
    let mut v = bytes(inode)?;
    v.resize(size, 0);
    Ok(v)
}

/// An upper bound of what an inline inode can hold: `i_block` and the
/// whole record (the attribute area is smaller).
fn capacity(inode: &Inode) -> usize {
    I_BLOCK_SIZE + inode.raw.len()
}

/// Makes `data` the whole contents of inline file `inode`: `i_block`
/// (zero-padded) and `system.data` (what is past `i_block`, possibly
/// empty), and `i_size`. ENOSPC, with nothing changed, when it does not
/// fit the inode body.
fn store(inode: &mut Inode, data: &[u8]) -> Result<()> {
    let split = data.len().min(I_BLOCK_SIZE);
    set_data_value(inode, Some(&data[split..]))?;
    inode.block = [0; I_BLOCK_SIZE];
    inode.block[..split].copy_from_slice(&data[..split]);
    inode.size = data.len() as u64;
    Ok(())
}

/// Writes `data` at `offset` of inline file `inode`, in the inode
/// (growing `system.data` as far as the inode body allows); ENOSPC, with
/// nothing changed, when the result does not fit (the caller converts).
pub fn write_at(inode: &mut Inode, offset: u64, data: &[u8]) -> Result<()> {
    let nospace = || Error::NoSpace(format!("inode {}: the write does not fit inline", inode.ino));
    let end = offset.checked_add(data.len() as u64).ok_or_else(nospace)?;
    if end > capacity(inode) as u64 {
        return Err(nospace());
    }
    let mut v = file_bytes(inode)?;
    if v.len() < end as usize {
        v.resize(end as usize, 0);
    }
    v[offset as usize..end as usize].copy_from_slice(data);
    store(inode, &v)
}

/// Sets the size of inline file `inode` (cut, or zero-extended) in the
/// inode; ENOSPC, with nothing changed, when it does not fit.
pub fn resize(inode: &mut Inode, size: u64) -> Result<()> {
    if size > capacity(inode) as u64 {
        return Err(Error::NoSpace(format!("inode {}: {size} bytes do not fit inline", inode.ino)));
    }
    let mut v = file_bytes(inode)?;
    v.resize(size as usize, 0);
    store(inode, &v)
}

/// One live entry of an inline directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlineEntry {
    /// Listing position (see [`DIR_POS_SHIFT`]).
    pub pos: u64,
    /// Position of the next record (the cookie to resume after this one).
    pub next: u64,
    /// Inode number.
    pub inode: u32,
    /// Name.
    pub name: Vec<u8>,
    /// Dirent file type byte (0 without the filetype feature).
    pub file_type: u8,
}

/// The two parts of an inline directory's entries: `i_block` after the
/// parent number, and the `system.data` value.
fn dir_parts(inode: &Inode) -> Result<(Vec<u8>, Vec<u8>)> {
    Ok((inode.block[DOTDOT_SIZE..].to_vec(), data_value(inode)?))
}

/// Parses one part (whose records must cover it exactly), appending its
/// live entries; `base` is the part's offset in the inline bytes.
fn parse_part(part: &[u8], base: usize, ft: bool, out: &mut Vec<InlineEntry>) -> Result<()> {
    if part.is_empty() {
        return Ok(());
    }
    for e in dirent::parse_leaf(part, ft, 0)? {
        if e.inode == 0 {
            continue;
        }
        let pos = (base + e.offset) as u64 + DIR_POS_SHIFT;
        out.push(InlineEntry {
            pos,
            next: pos + e.rec_len as u64,
            inode: e.inode,
            name: e.name.to_vec(),
            file_type: e.file_type,
        });
    }
    Ok(())
}

/// The parent inode number and the live entries of inline directory
/// `inode` ("." and ".." not included), in on-disk order.
pub fn dir_entries(inode: &Inode, ft: bool) -> Result<(u32, Vec<InlineEntry>)> {
    let parent = u32::from_le_bytes([inode.block[0], inode.block[1], inode.block[2], inode.block[3]]);
    let (head, tail) = dir_parts(inode)?;
    let mut out = Vec::new();
    parse_part(&head, DOTDOT_SIZE, ft, &mut out)?;
    parse_part(&tail, I_BLOCK_SIZE, ft, &mut out)?;
    Ok((parent, out))
}

/// Where the in-inode attribute area starts (None: the inode has none).
fn ibody_start(inode: &Inode) -> Option<usize> {
    let start = GOOD_OLD_INODE_SIZE + usize::from(inode.extra_isize);
    (inode.extra_isize != 0 && start < inode.raw.len()).then_some(start)
}

/// Sets (Some) or removes (None) the `system.data` value in `inode.raw`,
/// keeping every other in-inode attribute. Errors (ENOSPC) without a
/// change when the new value does not fit the inode body.
pub fn set_data_value(inode: &mut Inode, value: Option<&[u8]>) -> Result<()> {
    let Some(at) = ibody_start(inode) else {
        return match value {
            None => Ok(()),
            Some(_) => Err(Error::NoSpace(format!("inode {} has no room for inline data", inode.ino))),
        };
    };
    let mut entries = parse_inode_area_raw(&inode.raw[at..], inode.ino)?;
    let pos = entries.iter().position(is_data);
    match (value, pos) {
        (None, None) => return Ok(()),
        (None, Some(p)) => {
            entries.remove(p);
        }
        (Some(v), Some(p)) => entries[p] = RawXattr::local(INDEX_SYSTEM, DATA_NAME, v),
        (Some(v), None) => entries.insert(0, RawXattr::local(INDEX_SYSTEM, DATA_NAME, v)),
    }
    if !inode_area_fits(inode.raw.len() - at, &entries) {
        return Err(Error::NoSpace(format!("inode {}: inline data does not fit the inode", inode.ino)));
    }
    encode_inode_area(&mut inode.raw[at..], &entries)
}

/// Turns `inode` into a plain (not inline) inode with an empty `i_block`:
/// the flag cleared and `system.data` removed, as the kernel's
/// ext4_destroy_inline_data does. The caller sets up the block map and
/// writes the inode.
pub fn destroy(inode: &mut Inode) -> Result<()> {
    set_data_value(inode, None)?;
    inode.block = [0; I_BLOCK_SIZE];
    inode.flags &= !FL_INLINE_DATA;
    Ok(())
}

/// Writes the directory parts back: `head` (56 bytes, the entries in
/// `i_block` after the parent) and `tail` (the `system.data` value, same
/// length as before).
fn put_dir_parts(inode: &mut Inode, head: &[u8], tail: &[u8]) -> Result<()> {
    inode.block[DOTDOT_SIZE..].copy_from_slice(head);
    if !tail.is_empty() {
        set_data_value(inode, Some(tail))?;
    }
    Ok(())
}

/// Makes new directory `inode` an empty inline directory under `parent`,
/// as the kernel's ext4_try_create_inline_dir does: the parent number,
/// one unused record over the rest of `i_block`, an empty `system.data`,
/// `i_size` 60. ENOSPC, with nothing changed, when the inode has no room
/// for the attribute (the caller makes a block directory instead).
pub fn init_dir(inode: &mut Inode, parent: u32, ft: bool) -> Result<()> {
    set_data_value(inode, Some(b""))?;
    inode.flags = (inode.flags & !FL_EXTENTS) | FL_INLINE_DATA;
    inode.block = [0; I_BLOCK_SIZE];
    set_parent(inode, parent);
    dirent::write_entry(&mut inode.block[DOTDOT_SIZE..], 0, 0, I_BLOCK_SIZE - DOTDOT_SIZE, b"", 0, ft);
    inode.size = I_BLOCK_SIZE as u64;
    Ok(())
}

/// Sets the parent number of inline directory `inode` (its "..").
pub fn set_parent(inode: &mut Inode, parent: u32) {
    inode.block[..DOTDOT_SIZE].copy_from_slice(&parent.to_le_bytes());
}

/// Runs `f` on the part holding entry `name` (its bytes and the entry's
/// offset in them) and writes the parts back; returns what `f` returns,
/// or None when no live entry has that name.
fn edit_entry<R>(
    inode: &mut Inode,
    ft: bool,
    name: &[u8],
    f: impl FnOnce(&mut Vec<u8>, &[dirent::RawDirent<'_>], usize) -> R,
) -> Result<Option<R>> {
    let (mut head, mut tail) = dir_parts(inode)?;
    for which in 0..2 {
        let part = if which == 0 { &mut head } else { &mut tail };
        if part.is_empty() {
            continue;
        }
        let copy = part.clone();
        let v = dirent::parse_leaf(&copy, ft, 0)?;
        if let Some(i) = v.iter().position(|e| e.inode != 0 && e.name == name) {
            let r = f(part, &v, i);
            put_dir_parts(inode, &head, &tail)?;
            return Ok(Some(r));
        }
    }
    Ok(None)
}

/// Removes entry `name` of inline directory `inode`; returns the inode it
/// pointed at (None: absent). Its record joins the previous one of its
/// part, or is marked unused when it is the part's first.
pub fn remove_entry(inode: &mut Inode, ft: bool, name: &[u8]) -> Result<Option<u32>> {
    edit_entry(inode, ft, name, |b, v, i| {
        let s = v[i];
        if i > 0 {
            let prev = v[i - 1];
            let merged = dirent::rec_len_to_disk(prev.rec_len + s.rec_len, b.len());
            b[prev.offset + 4..prev.offset + 6].copy_from_slice(&merged.to_le_bytes());
            b[s.offset..s.offset + s.rec_len].fill(0);
        } else {
            b[s.offset..s.offset + 4].fill(0);
            b[s.offset + 6..s.offset + s.rec_len].fill(0);
        }
        s.inode
    })
}

/// Points entry `name` of inline directory `inode` at `ino` with
/// `file_type`; returns the inode it pointed at (None: absent).
pub fn replace_entry(inode: &mut Inode, ft: bool, name: &[u8], ino: u32, file_type: u8) -> Result<Option<u32>> {
    edit_entry(inode, ft, name, |b, v, i| {
        let s = v[i];
        b[s.offset..s.offset + 4].copy_from_slice(&ino.to_le_bytes());
        if ft {
            b[s.offset + 7] = file_type;
        }
        s.inode
    })
}

/// Adds `name` -> `ino` to inline directory `inode` if a record has room
/// (an unused one, or the slack after a live one), else in a new record
/// at the end of `system.data`, grown as far as the inode body allows
/// (`i_size` grows with it), as the kernel's ext4_try_add_inline_entry
/// does; false when that does not fit either (the caller converts the
/// directory to blocks).
pub fn add_entry(inode: &mut Inode, ft: bool, name: &[u8], ino: u32, file_type: u8) -> Result<bool> {
    let need = rec_len_for(name.len());
    let (mut head, mut tail) = dir_parts(inode)?;
    for which in 0..2 {
        let part = if which == 0 { &mut head } else { &mut tail };
        if part.is_empty() {
            continue;
        }
        let copy = part.clone();
        let v = dirent::parse_leaf(&copy, ft, 0)?;
        for s in &v {
            let used = if s.inode == 0 { 0 } else { rec_len_for(s.name.len()) };
            if s.rec_len < used + need {
                continue;
            }
            let (off, rec) = if used == 0 {
                (s.offset, s.rec_len)
            } else {
                // The live entry keeps what it needs; the new one takes
                // the slack.
                let used_disk = dirent::rec_len_to_disk(used, part.len());
                part[s.offset + 4..s.offset + 6].copy_from_slice(&used_disk.to_le_bytes());
                (s.offset + used, s.rec_len - used)
            };
            dirent::write_entry(part, off, ino, rec, name, file_type, ft);
            put_dir_parts(inode, &head, &tail)?;
            return Ok(true);
        }
    }
    let old = tail.len();
    tail.resize(old + need, 0);
    dirent::write_entry(&mut tail, old, ino, need, name, file_type, ft);
    match set_data_value(inode, Some(&tail)) {
        Ok(()) => {
            inode.size = (I_BLOCK_SIZE + tail.len()) as u64;
            Ok(true)
        }
        Err(Error::NoSpace(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::inode::{Timestamp, FL_INLINE_DATA};

    /// An empty inline inode of 256 bytes (32 extra) with an empty
    /// `system.data`, as mke2fs makes them.
    fn inode() -> Inode {
        let mut i = Inode {
            ino: 12,
            mode: 0o100644,
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
            flags: FL_INLINE_DATA,
            version: 0,
            block: [0; I_BLOCK_SIZE],
            generation: 0,
            file_acl: 0,
            extra_isize: 32,
            projid: 0,
            raw: vec![0; 256],
        };
        set_data_value(&mut i, Some(b"")).unwrap();
        i
    }

    fn read_all(i: &Inode) -> Vec<u8> {
        let mut v = vec![0xEE; i.size as usize];
        assert_eq!(read_at(i, 0, &mut v).unwrap(), v.len());
        v
    }

    #[test]
    fn file_grows_into_system_data_and_shrinks() {
        let mut i = inode();
        write_at(&mut i, 0, &[1; 50]).unwrap();
        assert_eq!(i.size, 50);
        assert!(data_value(&i).unwrap().is_empty());
        write_at(&mut i, 55, &[2; 45]).unwrap();
        assert_eq!(i.size, 100);
        assert_eq!(data_value(&i).unwrap().len(), 40);
        let v = read_all(&i);
        assert_eq!(&v[..50], &[1; 50]);
        assert_eq!(&v[50..55], &[0; 5]);
        assert_eq!(&v[55..], &[2; 45]);
        // 96-byte area: magic, one entry of 20 bytes, terminator: 68 bytes
        // of value at most.
        assert!(matches!(write_at(&mut i.clone(), 0, &[3; 129]), Err(Error::NoSpace(_))));
        write_at(&mut i, 0, &[3; 128]).unwrap();
        resize(&mut i, 10).unwrap();
        assert_eq!(read_all(&i), vec![3; 10]);
        assert!(data_value(&i).unwrap().is_empty());
        assert_eq!(&i.block[10..], &[0; 50]);
        resize(&mut i, 70).unwrap();
        let mut want = vec![3; 10];
        want.resize(70, 0);
        assert_eq!(read_all(&i), want);
        destroy(&mut i).unwrap();
        assert!(!i.has_inline_data());
        assert!(parse_inode_area_raw(i.xattr_area(), 12).unwrap().is_empty());
    }

    #[test]
    fn size_past_the_inline_bytes_reads_zeros_and_corrupt_sizes_are_refused() {
        let mut i = inode();
        i.block[0] = 9;
        i.size = 100;
        let v = read_all(&i);
        assert_eq!(v[0], 9);
        assert!(v[1..].iter().all(|&b| b == 0));
        i.size = 1 << 40;
        assert!(matches!(write_at(&mut i, 0, b"x"), Err(Error::Corrupt(_))));
    }

    #[test]
    fn directory_entries_in_both_parts() {
        let mut d = inode();
        d.mode = 0o40755;
        set_parent(&mut d, 2);
        // i_block: one unused record covering the 56 bytes.
        dirent::write_entry(&mut d.block[DOTDOT_SIZE..], 0, 0, 56, b"", 0, true);
        set_data_value(&mut d, Some(&[0; 40])).unwrap();
        let mut tail = vec![0u8; 40];
        dirent::write_entry(&mut tail, 0, 0, 40, b"", 0, true);
        set_data_value(&mut d, Some(&tail)).unwrap();
        assert!(add_entry(&mut d, true, b"first-long-name-of-thirty-bytes", 20, 1).unwrap());
        assert!(add_entry(&mut d, true, b"second", 21, 2).unwrap());
        assert!(add_entry(&mut d, true, b"third", 22, 1).unwrap());
        assert!(add_entry(&mut d, true, b"fourth-is-here", 23, 1).unwrap());
        // No record has room: system.data grows by a record when the
        // inode body holds it (96-byte area: magic 4, entry 20, end 4: a
        // value of 68 bytes at most), and i_size with it.
        d.size = 100;
        assert!(!add_entry(&mut d, true, b"no-room-for-this-one-anywhere", 24, 1).unwrap());
        assert_eq!(d.size, 100);
        assert!(add_entry(&mut d, true, b"z", 27, 1).unwrap());
        assert_eq!(d.size, 112);
        assert!(add_entry(&mut d, true, b"y", 28, 1).unwrap());
        assert_eq!(d.size, 124);
        assert!(!add_entry(&mut d, true, b"w", 29, 1).unwrap());
        let (parent, v) = dir_entries(&d, true).unwrap();
        assert_eq!(parent, 2);
        let names: Vec<_> = v.iter().map(|e| (e.name.clone(), e.inode, e.pos)).collect();
        assert_eq!(
            names,
            vec![
                (b"first-long-name-of-thirty-bytes".to_vec(), 20, 24),
                (b"second".to_vec(), 21, 24 + 40),
                (b"third".to_vec(), 22, 80),
                (b"fourth-is-here".to_vec(), 23, 80 + 16),
                (b"z".to_vec(), 27, 120),
                (b"y".to_vec(), 28, 132),
            ]
        );
        assert_eq!(replace_entry(&mut d, true, b"third", 30, 2).unwrap(), Some(22));
        assert_eq!(remove_entry(&mut d, true, b"second").unwrap(), Some(21));
        assert_eq!(remove_entry(&mut d, true, b"third").unwrap(), Some(30));
        assert_eq!(remove_entry(&mut d, true, b"third").unwrap(), None);
        let (_, v) = dir_entries(&d, true).unwrap();
        let names: Vec<_> = v.iter().map(|e| e.name.clone()).collect();
        assert_eq!(
            names,
            vec![b"first-long-name-of-thirty-bytes".to_vec(), b"fourth-is-here".to_vec(), b"z".to_vec(), b"y".to_vec()]
        );
        // New entries take the room removals left: the slack after the
        // first entry (which absorbed "second"), then the unused first
        // record of system.data.
        assert!(add_entry(&mut d, true, b"again", 25, 1).unwrap());
        assert!(add_entry(&mut d, true, b"more", 26, 1).unwrap());
        let pos: Vec<_> = dir_entries(&d, true).unwrap().1.iter().map(|e| (e.inode, e.pos)).collect();
        assert_eq!(pos, vec![(20, 24), (25, 64), (26, 80), (23, 96), (27, 120), (28, 132)]);
    }
}
