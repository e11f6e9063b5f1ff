//! Extended attributes: the in-inode area and the shared xattr block.

use super::bytes::{le16, le32, u8_at};
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

/// Parses an entry table. `b` is the region that holds both entries and
/// values; entries start at `entries_start`; value offsets are relative to
/// `value_base`. Each entry and value is bounds-checked against `b`.
fn parse_entries(
    b: &[u8],
    entries_start: usize,
    value_base: usize,
    structure: Structure,
    block: u64,
) -> Result<Vec<XattrEntry>> {
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
        let name_end = off + ENTRY_HEADER_SIZE + name_len;
        if name_end > b.len() {
            return Err(bad(format!("name of entry at {off} crosses the end")));
        }
        let pfx = prefix(index).ok_or_else(|| bad(format!("unknown name index {index}")))?;
        let mut name = pfx.as_bytes().to_vec();
        name.extend_from_slice(&b[off + ENTRY_HEADER_SIZE..name_end]);
        let value = if value_inum != 0 {
            None
        } else {
            let start = value_base + value_offs;
            let end = start.checked_add(value_size).ok_or_else(|| bad("value size overflows".into()))?;
            if end > b.len() || start < entries_start {
                return Err(bad(format!("value of entry at {off} out of bounds ({start}..{end})")));
            }
            Some(b[start..end].to_vec())
        };
        out.push(XattrEntry { name, value, value_inum });
        off = (name_end + 3) & !3;
    }
    Ok(out)
}

/// Parses the in-inode attribute area (the bytes after `i_extra_isize`).
/// An area without the magic holds no attributes.
pub fn parse_inode_area(area: &[u8], ino: u32) -> Result<Vec<XattrEntry>> {
    if area.len() < 4 || le32(area, 0) != XATTR_MAGIC {
        return Ok(Vec::new());
    }
    // In-inode value offsets count from the first entry, after the magic.
    parse_entries(area, 4, 4, Structure::Xattr, u64::from(ino))
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
    let entries = parse_entries(b, BLOCK_HEADER_SIZE, 0, Structure::Xattr, block)?;
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
