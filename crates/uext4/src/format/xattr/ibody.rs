//! The in-inode attribute area (the bytes after `i_extra_isize`): the
//! magic, then an entry table whose value offsets count from the first
//! entry.

use super::entry::{entries_bytes, parse_raw_entries, write_table};
use super::{to_entries, RawXattr, XattrEntry, XATTR_MAGIC};
use crate::error::{Error, Location, Result, Structure};
use crate::format::bytes::{le32, put_le32};

/// The stored form of the in-inode area (the bytes after `i_extra_isize`):
/// entries in on-disk order. An area without the magic holds none.
pub fn parse_inode_area_raw(area: &[u8], ino: u32) -> Result<Vec<RawXattr>> {
    if area.len() < 4 || le32(area, 0) != XATTR_MAGIC {
        return Ok(Vec::new());
    }
    // In-inode value offsets count from the first entry, after the magic.
    parse_raw_entries(area, 4, 4, Structure::Xattr, |offset| Location::InodeOffset { ino, offset })
}

/// Parses the in-inode attribute area (the bytes after `i_extra_isize`).
/// An area without the magic holds no attributes.
pub fn parse_inode_area(area: &[u8], ino: u32) -> Result<Vec<XattrEntry>> {
    Ok(to_entries(parse_inode_area_raw(area, ino)?))
}

/// True if `entries` fit in an in-inode area of `area_len` bytes (magic,
/// entries, terminator and values). No entries always fit.
pub fn inode_area_fits(area_len: usize, entries: &[RawXattr]) -> bool {
    entries.is_empty() || 4 + entries_bytes(entries) + 4 <= area_len
}

/// Rewrites the in-inode attribute area `area` (the bytes after
/// `i_extra_isize`) to hold exactly `entries`, in the given order. With
/// no entries the area is zeroed, magic included, as the kernel clears it.
pub fn encode_inode_area(area: &mut [u8], entries: &[RawXattr]) -> Result<()> {
    area.fill(0);
    if entries.is_empty() {
        return Ok(());
    }
    if !inode_area_fits(area.len(), entries) {
        return Err(Error::NoSpace("extended attributes do not fit in the inode".into()));
    }
    put_le32(area, 0, XATTR_MAGIC);
    write_table(area, 4, 4, entries)?;
    Ok(())
}
