//! Removing names and releasing inodes: unlink, rmdir.

use super::{check_name, flags, ftype, is_dot, lossy, touch_dir};
use crate::dir::write as dw;
use crate::error::{Error, Result};
use crate::format::block_number::FileBlock;
use crate::format::inode::{FileType, Inode, Timestamp, ROOT_INO};
use crate::fs::FsCore;
use crate::inode::extent_write as ew;
use crate::locks::Locked;
use crate::txn::Tx;

impl FsCore {
    /// Removes the name `parent/name` of a non-directory (unlink(2) by
    /// inode number; path-based code calls
    /// [`Filesystem::remove_file`](crate::Filesystem::remove_file)). The
    /// inode is deleted with its last name, unless it is still open
    /// ([`FsCore::open_inode`]) or held by a front end's kernel references.
    pub fn unlink(&self, parent: u32, name: &[u8]) -> Result<()> {
        self.namespace_synced(&[parent], self.unlink_inner(parent, name))
    }

    /// The victim of a removal of `parent/name` (a directory if
    /// `is_dir`), locked with its parent: found before locking, locked in
    /// inode-number order, checked again under the locks; if the name
    /// changed meanwhile, again. Returns the locks, the handle, the
    /// parent loaded under them, the victim and its entry.
    ///
    /// The handle starts before the check under the locks, and the entry
    /// that check finds is the one removed: one search of the directory
    /// under the locks, not two (a handle that changed nothing ends
    /// without effect on the paths that return early). None at all when
    /// the search before locking found the entry in a leaf and no
    /// exclusive hold of the directory ended since (its lock's stamp):
    /// the directory is as that search saw it.
    fn lock_named(&self, parent: u32, name: &[u8], is_dir: bool) -> Result<(Locked, Tx<'_>, Inode, u32, dw::Found)> {
        let rw = self.rw()?;
        loop {
            let (victim, seen) = self.locate_unlocked(parent, name)?.ok_or_else(|| Error::NotFound(lossy(name)))?;
            if is_dir && victim == ROOT_INO {
                return Err(Error::Busy("the root directory".into()));
            }
            let l = if is_dir {
                rw.data.locks().lock_exclusive(&[parent, victim], &[])
            } else {
                rw.data.locks().lock_exclusive(&[parent], &[victim])
            };
            let dir = self.load_dir(parent)?;
            let tx = self.begin(64)?;
            let still = seen.filter(|(then, _)| l.stamp(parent).is_some_and(|now| then.same(&now)));
            let found = match still {
                Some((_, found)) => Some(found),
                None => dw::find_entry(&tx, &dir, name)?,
            };
            match found {
                Some(found) if found.ino() == victim => return Ok((l, tx, dir, victim, found)),
                _ => {}
            }
        }
    }

    fn unlink_inner(&self, parent: u32, name: &[u8]) -> Result<()> {
        check_name(name)?;
        if is_dot(name) {
            return Err(Error::IsDir(lossy(name)));
        }
        let (_l, tx, mut dir, victim, found) = self.lock_named(parent, name, false)?;
        let mut i = self.load(victim)?;
        if ftype(&i)? == FileType::Directory {
            return Err(Error::IsDir(lossy(name)));
        }
        // may_delete: neither the directory nor the victim may be
        // immutable or append-only.
        Self::check_dir_removable(&dir)?;
        flags::check_unpinned(&i)?;
        // A name reaching an inode without links: corrupt, refused before
        // anything changes (not clamped, which would hide it).
        let links = crate::error::sub_counter(
            i.links_count,
            1,
            "i_links_count",
            crate::error::Structure::Inode,
            crate::error::Location::Inode(victim),
        )?;
        dw::remove_found(&tx, &mut dir, name, found)?;
        touch_dir(&mut dir);
        tx.write_inode(&mut dir)?;
        i.links_count = links;
        i.ctime = Timestamp::now();
        let deferred = if i.links_count == 0 {
            self.drop_last_link(&tx, &mut i)?
        } else {
            tx.write_inode(&mut i)?;
            false
        };
        self.note_tid(&tx, &[parent, victim]);
        drop(tx);
        if deferred {
            self.delete_orphan(victim)?;
        }
        Ok(())
    }

    /// Removes the empty directory `parent/name` (rmdir(2) by inode
    /// number; path-based code calls
    /// [`Filesystem::remove_dir`](crate::Filesystem::remove_dir), or
    /// [`Filesystem::remove_dir_all`](crate::Filesystem::remove_dir_all)
    /// for a tree).
    pub fn rmdir(&self, parent: u32, name: &[u8]) -> Result<()> {
        self.namespace_synced(&[parent], self.rmdir_inner(parent, name))
    }

    fn rmdir_inner(&self, parent: u32, name: &[u8]) -> Result<()> {
        if name == b"." {
            return Err(Error::Invalid("rmdir of \".\"".into()));
        }
        if name == b".." {
            return Err(Error::NotEmpty("rmdir of \"..\"".into()));
        }
        check_name(name)?;
        let (_l, tx, mut dir, victim, found) = self.lock_named(parent, name, true)?;
        let mut d = self.load(victim)?;
        if ftype(&d)? != FileType::Directory {
            return Err(Error::NotDir(lossy(name)));
        }
        Self::check_dir_removable(&dir)?;
        flags::check_unpinned(&d)?;
        if !dw::is_empty(&self.vol, &d)? {
            return Err(Error::NotEmpty(lossy(name)));
        }
        dw::remove_found(&tx, &mut dir, name, found)?;
        Self::bump_dir_links(&mut dir, false);
        touch_dir(&mut dir);
        tx.write_inode(&mut dir)?;
        d.links_count = 0;
        let deferred = self.drop_last_link(&tx, &mut d)?;
        self.note_tid(&tx, &[parent, victim]);
        drop(tx);
        if deferred {
            self.delete_orphan(victim)?;
        }
        Ok(())
    }

    /// Frees an inode whose last link is gone: its blocks, its references
    /// to EA inodes, its xattr block reference and its bitmap bit (dtime
    /// set, as the kernel does).
    pub(crate) fn release_inode(&self, tx: &Tx, i: &mut Inode) -> Result<()> {
        self.release_inode_with(tx, i, false)
    }

    /// [`FsCore::release_inode`] of an inode whose caller has dropped its
    /// cached pages, freed all its blocks and its references to EA inodes
    /// already, in this handle (the bounded deletions of `fs/orphan.rs`):
    /// none of that is looked for again.
    pub(crate) fn release_emptied_inode(&self, tx: &Tx, i: &mut Inode) -> Result<()> {
        self.release_inode_with(tx, i, true)
    }

    fn release_inode_with(&self, tx: &Tx, i: &mut Inode, emptied: bool) -> Result<()> {
        let is_dir = ftype(i)? == FileType::Directory;
        if let Ok(rw) = self.rw() {
            let st = rw.data.inode(i.ino);
            st.data.deleted.store(true, std::sync::atomic::Ordering::Release);
            // Not the next user's of the number either.
            st.data.atime.take();
            if !emptied {
                st.data.pages.invalidate_all();
            }
            // Its errors are not the next user's of the number.
            rw.data.errors().forget(i.ino);
        }
        if !emptied {
            // Extent-mapped or block-mapped alike.
            if self.has_block_map(i)? {
                ew::remove_range(tx, i, FileBlock(0), FileBlock(u64::MAX))?;
            }
            // References to EA inodes left, then (below) the xattr block.
            crate::xattr::write::drop_ea_refs(tx, i, false, 0)?;
        }
        if i.file_acl != 0 {
            crate::xattr::write::release_block(tx, i)?;
        }
        i.links_count = 0;
        i.size = 0;
        i.dtime = Timestamp::now().sec as u32;
        i.blocks_512 = 0;
        tx.write_inode_dtime(i)?;
        tx.free_inode(i.ino, is_dir)
    }
}
