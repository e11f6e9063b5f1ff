//! The user-visible inode flags (`lsattr`/`chattr`, FS_IOC_GETFLAGS and
//! FS_IOC_SETFLAGS, FS_IOC_FSGETXATTR and FS_IOC_FSSETXATTR) and the
//! refusals the immutable and append-only flags impose on every change.
//!
//! The kernel makes these refusals in the VFS (`may_delete`,
//! `inode_permission`, `notify_change`, `may_open`, `vfs_fallocate`) from
//! the in-memory inode flags; a FUSE front end receives raw requests for
//! inodes whose kernel copy carries no such flag, so the library makes
//! them itself, with EPERM as the kernel answers. What needs the caller's
//! credentials (only CAP_LINUX_IMMUTABLE may change `i`/`a`, only the
//! owner or root may change flags at all) is the front end's business.

use super::ftype;
use crate::data::FileIo;
use crate::error::{Error, Result};
use crate::format::features::incompat;
use crate::format::inode::{FileType, Inode, Timestamp, FL_CASEFOLD, FL_EXTENTS};
use crate::fs::{FsCore, Stat};

/// `s`: secure deletion (stored, not acted on, as ext4).
pub const FL_SECRM: u32 = 0x1;
/// `u`: undelete (stored only).
pub const FL_UNRM: u32 = 0x2;
/// `c`: compress (stored only).
pub const FL_COMPR: u32 = 0x4;
/// `S`: synchronous updates.
pub const FL_SYNC: u32 = 0x8;
/// `i`: immutable.
pub const FL_IMMUTABLE: u32 = 0x10;
/// `a`: append only.
pub const FL_APPEND: u32 = 0x20;
/// `d`: no dump.
pub const FL_NODUMP: u32 = 0x40;
/// `A`: no atime updates.
pub const FL_NOATIME: u32 = 0x80;
/// `j`: data journaling.
pub const FL_JOURNAL_DATA: u32 = 0x4000;
/// `t`: no tail merging (stored only).
pub const FL_NOTAIL: u32 = 0x8000;
/// `D`: synchronous directory updates.
pub const FL_DIRSYNC: u32 = 0x1_0000;
/// `T`: top of a directory hierarchy (allocator hint).
pub const FL_TOPDIR: u32 = 0x2_0000;
/// `x`: DAX.
pub const FL_DAX: u32 = 0x200_0000;
/// `P`: new inodes take the directory's project ID.
pub const FL_PROJINHERIT: u32 = 0x2000_0000;

/// The flags a user may change (the kernel's EXT4_FL_USER_MODIFIABLE).
pub const FL_USER_MODIFIABLE: u32 = FL_SECRM
    | FL_UNRM
    | FL_COMPR
    | FL_SYNC
    | FL_IMMUTABLE
    | FL_APPEND
    | FL_NODUMP
    | FL_NOATIME
    | FL_JOURNAL_DATA
    | FL_NOTAIL
    | FL_DIRSYNC
    | FL_TOPDIR
    | FL_EXTENTS
    | 0x40_0000 // the former EOFBLOCKS flag
    | FL_DAX
    | FL_PROJINHERIT
    | FL_CASEFOLD;

/// The flags FS_IOC_GETFLAGS shows (EXT4_FL_USER_VISIBLE): the modifiable
/// ones and dirty, compressed-blocks, no-compress, encrypt, index,
/// verity and inline data.
pub const FL_USER_VISIBLE: u32 = FL_USER_MODIFIABLE | 0x100 | 0x200 | 0x400 | 0x800 | 0x1000 | 0x10_0000 | 0x1000_0000;

/// The flags FS_IOC_FSSETXATTR controls (EXT4_FL_XFLAG_VISIBLE).
const FL_XFLAG_VISIBLE: u32 = FL_SYNC | FL_IMMUTABLE | FL_APPEND | FL_NODUMP | FL_NOATIME | FL_PROJINHERIT | FL_DAX;

/// `struct fsxattr`'s `fsx_xflags` bits and the inode flags they stand for
/// (the kernel's ext4_iflags_to_xflags table).
const XFLAG_MAP: [(u32, u32); 7] = [
    (0x8, FL_IMMUTABLE),     // FS_XFLAG_IMMUTABLE
    (0x10, FL_APPEND),       // FS_XFLAG_APPEND
    (0x20, FL_SYNC),         // FS_XFLAG_SYNC
    (0x40, FL_NOATIME),      // FS_XFLAG_NOATIME
    (0x80, FL_NODUMP),       // FS_XFLAG_NODUMP
    (0x200, FL_PROJINHERIT), // FS_XFLAG_PROJINHERIT
    (0x8000, FL_DAX),        // FS_XFLAG_DAX
];

/// Flags new inodes take from their directory (EXT4_FL_INHERITED, less
/// data journaling, which this library does not do, and casefold, which
/// mkdir handles).
const FL_INHERITED: u32 = FL_SECRM
    | FL_UNRM
    | FL_COMPR
    | FL_SYNC
    | FL_NODUMP
    | FL_NOATIME
    | 0x400 // no-compress
    | FL_NOTAIL
    | FL_DIRSYNC
    | FL_PROJINHERIT;

/// The inode flags of FS_IOC_FSGETXATTR's `fsx_xflags`.
pub fn flags_to_xflags(flags: u32) -> u32 {
    XFLAG_MAP.iter().filter(|&&(_, f)| flags & f != 0).fold(0, |x, &(xf, _)| x | xf)
}

/// `flags` with the bits `xflags` controls replaced by those `xflags`
/// sets (what FS_IOC_FSSETXATTR asks for, as the flag word
/// [`FsCore::set_flags`] takes).
pub fn xflags_to_flags(flags: u32, xflags: u32) -> u32 {
    let set = XFLAG_MAP.iter().filter(|&&(xf, _)| xflags & xf != 0).fold(0, |f, &(_, fl)| f | fl);
    (flags & !FL_XFLAG_VISIBLE) | set
}

/// The flags an inode of `mode` may carry (ext4_mask_flags): directories
/// all, regular files all but the directory-only ones, others only
/// nodump and noatime.
fn mask_flags(t: FileType, flags: u32) -> u32 {
    match t {
        FileType::Directory => flags,
        FileType::Regular => flags & !(FL_DIRSYNC | FL_TOPDIR | FL_CASEFOLD | FL_PROJINHERIT),
        _ => flags & (FL_NODUMP | FL_NOATIME),
    }
}

/// The flags a new inode of type `t` takes from its directory `dir`.
pub(in crate::fs) fn inherited_flags(dir: &Inode, t: FileType) -> u32 {
    mask_flags(t, dir.flags & FL_INHERITED)
}

/// EPERM if `i` is immutable: nothing about it may change.
pub(crate) fn check_mutable(i: &Inode) -> Result<()> {
    if i.flags & FL_IMMUTABLE != 0 {
        return Err(Error::NotPermitted(format!("inode {} is immutable", i.ino)));
    }
    Ok(())
}

/// EPERM if `i` is immutable or append-only: its name may not be removed
/// or replaced, its data not rewritten, its attributes not changed.
pub(crate) fn check_unpinned(i: &Inode) -> Result<()> {
    if i.flags & (FL_IMMUTABLE | FL_APPEND) != 0 {
        return Err(Error::NotPermitted(format!("inode {} is immutable or append-only", i.ino)));
    }
    Ok(())
}

impl FsCore {
    /// The user-visible flags of `ino` (FS_IOC_GETFLAGS, `lsattr`): test
    /// them against the constants of [`flags`](crate::inode_api::flags).
    pub fn flags(&self, ino: u32) -> Result<u32> {
        Ok(self.inode(ino)?.flags & FL_USER_VISIBLE)
    }

    /// Sets the user-modifiable flags of `ino` to those in `flags`
    /// (FS_IOC_SETFLAGS, `chattr`), with ext4's rules: bits outside the
    /// visible set, or not allowed on the inode's type, are refused
    /// (EOPNOTSUPP); visible but unmodifiable bits are ignored; the
    /// extent flag cannot be cleared, nor set on a block-mapped file
    /// (EOPNOTSUPP: no migration); data journaling and DAX cannot be
    /// turned on or off (EOPNOTSUPP: this library journals metadata only
    /// and has no DAX); the casefold flag follows
    /// [`FsCore::set_casefold`]'s rules. An immutable inode may only have
    /// its immutable flag cleared (EPERM otherwise). A regular file
    /// becoming immutable has its buffered data written first.
    ///
    /// The caller's right to do this (owner or root; only root for `i`
    /// and `a`) is the front end's to check.
    pub fn set_flags(&self, ino: u32, flags: u32) -> Result<Stat> {
        // A sync mount: durable on return (ext4_ioctl_setflags' IS_SYNC).
        self.attrs_synced(ino, self.set_flags_inner(ino, flags))
    }

    fn set_flags_inner(&self, ino: u32, flags: u32) -> Result<Stat> {
        if flags & !FL_USER_VISIBLE != 0 {
            return Err(Error::Unsupported(format!("inode flags {:#x}", flags & !FL_USER_VISIBLE)));
        }
        let flags = flags & FL_USER_MODIFIABLE;
        let old = self.inode(ino)?;
        let t = ftype(&old)?;
        if mask_flags(t, flags) != flags {
            return Err(Error::Unsupported(format!("flags {flags:#x} on a {t:?}")));
        }
        if (old.flags ^ flags) & FL_CASEFOLD != 0 {
            // Its own checks (feature, empty directory) and handle; the
            // other flags follow in a second one.
            if old.flags & FL_IMMUTABLE != 0 {
                return Err(Error::NotPermitted(format!("inode {ino} is immutable")));
            }
            self.set_casefold(ino, flags & FL_CASEFOLD != 0)?;
        }
        let rw = self.rw()?;
        let _l = rw.data.locks().lock_exclusive(&[], &[ino]);
        let st = rw.data.inode(ino);
        if t == FileType::Regular && flags & FL_IMMUTABLE != 0 && st.data.pages.is_dirty() {
            // ext4 flushes before the flag goes on: no dirty data may
            // reach an immutable file later.
            self.writeback_locked(&st, ino)?;
        }
        let mut i = self.load(ino)?;
        self.check_live(&i)?;
        let old = i.flags;
        let changed = (old ^ flags) & FL_USER_MODIFIABLE;
        if old & FL_IMMUTABLE != 0 && flags & FL_IMMUTABLE != 0 && changed != 0 {
            // ext4_ioctl_check_immutable: only clearing `i` is allowed.
            return Err(Error::NotPermitted(format!("inode {ino} is immutable")));
        }
        if changed & FL_EXTENTS != 0 {
            return Err(Error::Unsupported(if old & FL_EXTENTS != 0 {
                "clearing the extent flag".into()
            } else {
                "migrating a block-mapped file to extents".into()
            }));
        }
        if changed & FL_JOURNAL_DATA != 0 {
            return Err(Error::Unsupported("data journaling (chattr +j)".into()));
        }
        if changed & FL_DAX != 0 {
            return Err(Error::Unsupported("DAX (chattr +x)".into()));
        }
        if changed & FL_CASEFOLD != 0 && !self.vol.sb.features.has_incompat(incompat::CASEFOLD) {
            return Err(Error::Unsupported("the casefold flag needs the casefold feature".into()));
        }
        if changed == 0 {
            drop(_l);
            return self.stat(ino);
        }
        let tx = self.begin(4)?;
        i.flags = (old & !FL_USER_MODIFIABLE) | flags;
        i.ctime = Timestamp::now();
        tx.write_inode(&mut i)?;
        self.note_tid(&tx, &[ino]);
        drop(tx);
        // The write paths' copy (see check_write_flags). As before it
        // existed, a write that checked the flags just before this change
        // may still complete: the check is not under the inode's lock.
        st.data.flags.set(i.flags);
        drop(_l);
        self.stat(ino)
    }

    /// EPERM unless a new name may be added to directory `dir`.
    pub(in crate::fs) fn check_dir_addable(dir: &Inode) -> Result<()> {
        check_mutable(dir)
    }

    /// EPERM unless names may be removed from directory `dir` (ext4:
    /// neither immutable nor append-only).
    pub(in crate::fs) fn check_dir_removable(dir: &Inode) -> Result<()> {
        check_unpinned(dir)
    }

    /// The immutable and append-only refusals of a write of data at
    /// `offset` into `ino`: none into an immutable file, and into an
    /// append-only one only at its end (its size, buffered data
    /// included), as a file opened with O_APPEND writes. Returns whether
    /// the file wants synchronous writes (`chattr +S`).
    pub(in crate::fs) fn check_write_flags(&self, st: Option<&FileIo>, ino: u32, offset: u64) -> Result<bool> {
        // The common case, no immutable or append-only flag, from the
        // copy beside the folios: no inode read per write.
        if let Some(f) = st.and_then(|st| st.data.flags.get()) {
            if f & (FL_IMMUTABLE | FL_APPEND) == 0 {
                return Ok(f & FL_SYNC != 0);
            }
        }
        // An inode that cannot be read is the write path's to report.
        let Ok(i) = self.inode(ino) else { return Ok(false) };
        if let Some(st) = st {
            st.data.flags.set(i.flags);
        }
        let sync = i.flags & FL_SYNC != 0;
        if i.flags & (FL_IMMUTABLE | FL_APPEND) == 0 {
            return Ok(sync);
        }
        check_mutable(&i)?;
        let size = match self.live() {
            Some(rw) => i.size.max(rw.data.inode(ino).data.pages.pending_size()),
            None => i.size,
        };
        if offset < size {
            return Err(Error::NotPermitted(format!("inode {ino} is append-only (write at {offset} < size {size})")));
        }
        Ok(sync)
    }

    /// Whether `ino` asks for synchronous writes (`chattr +S`): a front
    /// end that answers writes itself checks it to make them durable
    /// before replying.
    pub fn is_sync(&self, ino: u32) -> Result<bool> {
        Ok(self.inode(ino)?.flags & FL_SYNC != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_match_the_kernel() {
        assert_eq!(FL_USER_MODIFIABLE, 0x624B_C0FF);
        assert_eq!(FL_USER_VISIBLE, 0x725B_DFFF);
    }

    #[test]
    fn xflags_round_trip() {
        let f = FL_IMMUTABLE | FL_NOATIME | FL_EXTENTS;
        assert_eq!(flags_to_xflags(f), 0x8 | 0x40);
        assert_eq!(xflags_to_flags(f, 0x10), FL_APPEND | FL_EXTENTS);
    }
}
