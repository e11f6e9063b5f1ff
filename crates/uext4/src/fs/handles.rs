//! File handles: an inode named by number and generation rather than by
//! path, as NFS export and `open_by_handle_at(2)` need (ext4's
//! `ext4_nfs_get_inode`). A handle outlives the mount that made it; one
//! whose inode was deleted, or deleted and reused (a new `i_generation`),
//! is stale, never an error of the filesystem.

use super::{FsCore, Stat};
use crate::error::{Error, Result};
use crate::format::inode::ROOT_INO;
use crate::inode;

impl FsCore {
    /// The attributes of the live inode `ino`, checked against the
    /// generation a handle recorded (`None`: any generation).
    ///
    /// [`Error::BadInode`] (ESTALE) for a number outside the inode table,
    /// a reserved inode other than the root, a free or deleted inode (no
    /// links), an xattr value's inode, or a different generation: a stale handle, as ext4 answers
    /// it. Reading the inode table may still fail with an I/O or checksum
    /// error.
    pub fn stat_by_handle(&self, ino: u32, generation: Option<u32>) -> Result<Stat> {
        let stale = || Error::BadInode(u64::from(ino));
        if ino != ROOT_INO && ino < self.vol.sb.first_ino {
            return Err(stale());
        }
        let i = inode::read_inode(&self.vol, ino)?;
        // An xattr value's inode is never a file: a handle naming its
        // number was made for an inode since freed and reused for a value
        // (the kernel's EXT4_IGET_HANDLE answers ESTALE, not corruption).
        if i.links_count == 0
            || i.mode == 0
            || i.flags & crate::format::inode::FL_EA_INODE != 0
            || generation.is_some_and(|g| g != i.generation)
        {
            return Err(stale());
        }
        self.stat(ino)
    }
}
