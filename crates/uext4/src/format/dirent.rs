//! Directory leaf blocks: variable-length entries and the checksum tail.

use super::bytes::{le16, le32, put_le16, put_le32, u8_at};
use super::checksum::crc32c;
use crate::error::{CorruptKind, Error, Location, Result, Structure};

/// Size of the fixed part of an entry.
pub const DIRENT_HEADER: usize = 8;
/// Size of the metadata_csum tail (a fake entry holding the crc).
pub const TAIL_SIZE: usize = 12;
/// File type byte that marks the checksum tail.
pub const TAIL_FT: u8 = 0xDE;
/// Longest name ext4 stores.
pub const NAME_MAX: usize = 255;

/// One entry of a leaf block, borrowing its name from the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawDirent<'a> {
    /// Inode number; 0 for an unused slot.
    pub inode: u32,
    /// Distance to the next entry.
    pub rec_len: usize,
    /// The name bytes.
    pub name: &'a [u8],
    /// File type byte (0 without the filetype feature).
    pub file_type: u8,
    /// Byte offset of the entry within its block.
    pub offset: usize,
}

/// Bytes an entry with a name of `name_len` bytes needs (4-byte aligned).
pub fn rec_len_for(name_len: usize) -> usize {
    (DIRENT_HEADER + name_len + 3) & !3
}

/// Decodes an on-disk rec_len: 64 KiB blocks need a special encoding
/// because 65536 does not fit in 16 bits.
pub fn rec_len_from_disk(v: u16, block_size: usize) -> usize {
    if block_size < 65536 {
        usize::from(v)
    } else if v == u16::MAX || v == 0 {
        block_size
    } else {
        usize::from(v & 0xFFFC) | (usize::from(v & 3) << 16)
    }
}

/// Parses every entry of a leaf block, validating each the way the kernel
/// does (ext4_check_dir_entry): a corrupt entry fails the whole block
/// rather than letting a reader walk off it. `block` is for errors.
pub fn parse_leaf(b: &[u8], filetype: bool, block: u64) -> Result<Vec<RawDirent<'_>>> {
    let mut out = Vec::new();
    walk_leaf(b, filetype, block, |e| out.push(e))?;
    Ok(out)
}

/// [`parse_leaf`] without the vector: calls `f` with each entry in block
/// order, every entry validated as there. The hot paths (a lookup, an
/// insert: several walks of a leaf per create) collect only what they
/// need instead of allocating every entry; `f` may have seen entries
/// before a corrupt one fails the walk.
pub fn walk_leaf<'a>(b: &'a [u8], filetype: bool, block: u64, mut f: impl FnMut(RawDirent<'a>)) -> Result<()> {
    let bs = b.len();
    let mut off = 0usize;
    while off < bs {
        let bad = |kind| Error::corruption(Structure::DirEntry, Location::BlockOffset { block, offset: off }, kind);
        if off + DIRENT_HEADER > bs {
            return Err(bad(CorruptKind::CrossesEnd { what: "entry header" }));
        }
        let inode = le32(b, off);
        let rec_len = rec_len_from_disk(le16(b, off + 4), bs);
        let (name_len, file_type) = if filetype {
            (usize::from(u8_at(b, off + 6)), u8_at(b, off + 7))
        } else {
            (usize::from(le16(b, off + 6)), 0)
        };
        // rec_len: at least a header, 4-aligned, within the block.
        if rec_len < 12 || !rec_len.is_multiple_of(4) {
            return Err(bad(CorruptKind::OutOfRange { field: "rec_len", value: rec_len as u64 }));
        }
        if off + rec_len > bs {
            return Err(bad(CorruptKind::CrossesEnd { what: "rec_len" }));
        }
        if name_len > NAME_MAX || rec_len_for(name_len) > rec_len {
            // The name must fit in the record (and in NAME_MAX).
            return Err(bad(CorruptKind::OutsideRange {
                what: "name_len",
                value: name_len as u64,
                start: 0,
                end: (rec_len - DIRENT_HEADER).min(NAME_MAX) as u64 + 1,
            }));
        }
        f(RawDirent {
            inode,
            rec_len,
            name: &b[off + DIRENT_HEADER..off + DIRENT_HEADER + name_len],
            file_type,
            offset: off,
        });
        off += rec_len;
    }
    Ok(())
}

/// True if the block ends with a well-formed checksum tail.
pub fn has_tail(b: &[u8]) -> bool {
    let Some(t) = b.len().checked_sub(TAIL_SIZE) else { return false };
    le32(b, t) == 0 && le16(b, t + 4) as usize == TAIL_SIZE && u8_at(b, t + 6) == 0 && u8_at(b, t + 7) == TAIL_FT
}

/// The crc32c a leaf block's tail should hold.
pub fn leaf_checksum(b: &[u8], inode_seed: u32) -> u32 {
    crc32c(inode_seed, &b[..b.len().saturating_sub(TAIL_SIZE)])
}

/// Verifies a leaf block's checksum tail (metadata_csum only).
pub fn verify_leaf(b: &[u8], inode_seed: u32, block: u64) -> Result<()> {
    if !has_tail(b) {
        return Err(Error::corruption(
            Structure::DirEntry,
            Location::from_block(block),
            CorruptKind::MissingChecksumTail,
        ));
    }
    let stored = le32(b, b.len() - 4);
    let computed = leaf_checksum(b, inode_seed);
    if stored != computed {
        return Err(Error::Checksum { structure: Structure::DirEntry, block, ino: 0, stored, computed });
    }
    Ok(())
}

/// Encodes an on-disk rec_len (see [`rec_len_from_disk`]).
pub fn rec_len_to_disk(len: usize, block_size: usize) -> u16 {
    if block_size < 65536 || len < 65536 {
        len as u16
    } else if len == block_size {
        u16::MAX
    } else {
        ((len & 0xFFFC) | ((len >> 16) & 3)) as u16
    }
}

/// Writes one entry at `off` of block `b`.
pub fn write_entry(b: &mut [u8], off: usize, inode: u32, rec_len: usize, name: &[u8], file_type: u8, filetype: bool) {
    let bs = b.len();
    put_le32(b, off, inode);
    put_le16(b, off + 4, rec_len_to_disk(rec_len, bs));
    if filetype {
        b[off + 6] = name.len() as u8;
        b[off + 7] = file_type;
    } else {
        put_le16(b, off + 6, name.len() as u16);
    }
    b[off + DIRENT_HEADER..off + DIRENT_HEADER + name.len()].copy_from_slice(name);
}

/// Writes the metadata_csum tail (without its checksum) at the block end.
pub fn write_tail(b: &mut [u8]) {
    let t = b.len() - TAIL_SIZE;
    b[t..].fill(0);
    put_le16(b, t + 4, TAIL_SIZE as u16);
    b[t + 7] = TAIL_FT;
}

/// Sets the leaf block's tail checksum.
pub fn set_leaf_checksum(b: &mut [u8], inode_seed: u32) {
    let c = leaf_checksum(b, inode_seed);
    let n = b.len();
    put_le32(b, n - 4, c);
}

/// The dirent file type byte for an inode mode.
pub fn file_type_of(mode: u16) -> u8 {
    match mode & super::inode::S_IFMT {
        super::inode::S_IFREG => 1,
        super::inode::S_IFDIR => 2,
        super::inode::S_IFCHR => 3,
        super::inode::S_IFBLK => 4,
        super::inode::S_IFIFO => 5,
        super::inode::S_IFSOCK => 6,
        super::inode::S_IFLNK => 7,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(b: &mut [u8], off: usize, ino: u32, rec_len: u16, name: &[u8]) {
        b[off..off + 4].copy_from_slice(&ino.to_le_bytes());
        b[off + 4..off + 6].copy_from_slice(&rec_len.to_le_bytes());
        b[off + 6] = name.len() as u8;
        b[off + 7] = 1;
        b[off + 8..off + 8 + name.len()].copy_from_slice(name);
    }

    #[test]
    fn parses_and_validates() {
        let mut b = vec![0u8; 1024];
        entry(&mut b, 0, 12, 16, b"abc");
        entry(&mut b, 16, 13, 1008, b"hello");
        let v = parse_leaf(&b, true, 0).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].name, b"hello");
        let mut z = b.clone();
        z[4] = 0;
        assert!(parse_leaf(&z, true, 0).is_err(), "rec_len 0");
        let mut o = b.clone();
        o[20..22].copy_from_slice(&2000u16.to_le_bytes());
        assert!(parse_leaf(&o, true, 0).is_err(), "rec_len past end");
        let mut n = b.clone();
        n[6] = 200;
        assert!(parse_leaf(&n, true, 0).is_err(), "name longer than rec_len");
    }

    #[test]
    fn big_block_rec_len() {
        assert_eq!(rec_len_from_disk(0, 65536), 65536);
        assert_eq!(rec_len_from_disk(65535, 65536), 65536);
        assert_eq!(rec_len_from_disk(12, 4096), 12);
    }
}
