//! copy_file_range(2) inside the engine: the bytes go from one file to
//! the other through the page cache in one pass, without a round trip
//! through the caller (for the mount: without the kernel copying through
//! its page cache with a read and a write request per chunk). ext4 shares
//! no extents, so neither does this: the data is copied. Holes of the
//! source (and its unwritten extents, which read as zeros) are not
//! written: the destination gets a hole there (punched where it held
//! data, left alone where it was a hole or past its end already), so the
//! result reads exactly as a read/write copy would.

use super::namespace::SetAttr;
use crate::error::{Error, Result};
use crate::format::inode::FileType;
use crate::fs::{FallocMode, FsCore};

/// Bytes read and written per step.
const CHUNK: u64 = 1 << 20;

impl FsCore {
    /// copy_file_range(2): copies up to `len` bytes of file `ino_in` from
    /// `off_in` to file `ino_out` at `off_out`; returns the bytes copied
    /// (fewer at the end of the source, 0 at or past it). As the kernel's
    /// generic_copy_file_checks: both must be regular files (EISDIR for a
    /// directory, else EINVAL), the copy is cut at the source's end, and
    /// overlapping ranges of one file are EINVAL. The destination is
    /// written as by [`FsCore::write`] (append-only and immutable files
    /// refused, EFBIG past the largest file) and grows to cover the copy.
    pub fn copy_file_range(&self, ino_in: u32, off_in: u64, ino_out: u32, off_out: u64, len: u64) -> Result<u64> {
        let src = self.stat(ino_in)?;
        let dst = self.stat(ino_out)?;
        for s in [&src, &dst] {
            match s.file_type {
                FileType::Regular => {}
                FileType::Directory => return Err(Error::IsDir(format!("copy_file_range on inode {}", s.ino))),
                _ => return Err(Error::Invalid(format!("copy_file_range on inode {}, not a regular file", s.ino))),
            }
        }
        let count = if off_in >= src.size { 0 } else { len.min(src.size - off_in) };
        if ino_in == ino_out && off_out < off_in.saturating_add(count) && off_in < off_out.saturating_add(count) {
            return Err(Error::Invalid(format!(
                "copy_file_range within inode {ino_in}: [{off_in}, +{count}) overlaps [{off_out}, +{count})"
            )));
        }
        if count == 0 {
            return Ok(0);
        }
        self.check_offset(off_out, count, true)?;
        let end = off_in + count;
        let mut pos = off_in;
        let mut buf = Vec::new();
        while pos < end {
            // The hole (or preallocated run) at `pos`, then the data after it.
            let data = self.seek_data(ino_in, pos)?.map_or(end, |d| d.min(end));
            if data > pos {
                self.copy_hole(ino_out, off_out + (pos - off_in), data - pos)?;
                pos = data;
            }
            if pos >= end {
                break;
            }
            let data_end = self.seek_hole(ino_in, pos)?.map_or(end, |h| h.min(end)).max(pos + 1);
            while pos < data_end {
                let n = (data_end - pos).min(CHUNK) as usize;
                buf.resize(n, 0);
                let got = self.read(ino_in, pos, &mut buf)?;
                if got == 0 {
                    // The source shrank meanwhile: the copy ends here.
                    return self.finish_copy(ino_out, off_out, pos - off_in);
                }
                let mut done = 0;
                while done < got {
                    let w = self.write(ino_out, off_out + (pos - off_in) + done as u64, &buf[done..got])?;
                    if w == 0 {
                        return self.finish_copy(ino_out, off_out, pos - off_in + done as u64);
                    }
                    done += w;
                }
                pos += got as u64;
            }
        }
        self.finish_copy(ino_out, off_out, count)
    }

    /// Makes `[off, off + len)` of `ino` read as zeros, as a hole: punched
    /// where the file holds data below its size, left alone past it.
    fn copy_hole(&self, ino: u32, off: u64, len: u64) -> Result<()> {
        let size = self.stat(ino)?.size;
        let inside = (off + len).min(size);
        if off >= inside {
            return Ok(());
        }
        match self.seek_data(ino, off)? {
            Some(d) if d < inside => self.fallocate(ino, FallocMode::PunchHole, d, inside - d),
            _ => Ok(()),
        }
    }

    /// The destination covers the `copied` bytes at `off_out` (a copy
    /// that ends in a hole extends it as the write of zeros would).
    fn finish_copy(&self, ino: u32, off_out: u64, copied: u64) -> Result<u64> {
        let want = off_out + copied;
        if copied > 0 && self.stat(ino)?.size < want {
            self.setattr(ino, SetAttr { size: Some(want), ..Default::default() })?;
        }
        Ok(copied)
    }
}
