//! rename(2) and renameat2's exchange, noreplace and whiteout.

use super::{check_name, flags, ftype, is_dot, lossy, touch_dir};
use crate::dir::write as dw;
use crate::error::{Error, Result};
use crate::format::dirent::file_type_of;
use crate::format::inode::{FileType, Inode, Timestamp, ROOT_INO};
use crate::fs::FsCore;

/// `rename` flags (renameat2): passed to the inode-level
/// [`FsCore::rename`](crate::FsCore::rename); `Default` is a plain
/// rename(2) that replaces an existing target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenameFlags {
    /// Fail with EEXIST if the destination exists.
    pub noreplace: bool,
    /// Atomically swap source and destination (both must exist).
    pub exchange: bool,
}

/// The two names of one rename and its flags, handed down unchanged from
/// the checks through each attempt to the change.
#[derive(Clone, Copy)]
struct Move<'n> {
    parent: u32,
    name: &'n [u8],
    newparent: u32,
    newname: &'n [u8],
    flags: RenameFlags,
    /// RENAME_WHITEOUT: the owner (uid, gid) of the whiteout left at the
    /// source's name.
    whiteout: Option<(u32, u32)>,
}

impl FsCore {
    /// rename(2) / renameat2 with NOREPLACE and EXCHANGE, by directory
    /// inode and name: what a front end serving renameat2 calls; the
    /// path-based form is [`Filesystem::rename`](crate::Filesystem::rename).
    pub fn rename(&self, parent: u32, name: &[u8], newparent: u32, newname: &[u8], flags: RenameFlags) -> Result<()> {
        // The new name may need a directory block a pending free holds;
        // the new name is added first, so a failure leaves nothing done.
        let r =
            self.retry_nospc(|| self.rename_checked(Move { parent, name, newparent, newname, flags, whiteout: None }));
        self.namespace_synced(&[parent, newparent], r)
    }

    /// renameat2 with RENAME_WHITEOUT (what overlayfs asks of its upper
    /// layer): as [`FsCore::rename`] with `flags`, but the source's name
    /// is left naming a new whiteout (a character device 0:0, mode 0,
    /// owned by `uid`/`gid`) in the same transaction, as ext4 does.
    /// EINVAL with `flags.exchange`.
    #[allow(clippy::too_many_arguments)]
    pub fn rename_whiteout(
        &self,
        parent: u32,
        name: &[u8],
        newparent: u32,
        newname: &[u8],
        flags: RenameFlags,
        uid: u32,
        gid: u32,
    ) -> Result<()> {
        if flags.exchange {
            return Err(Error::Invalid("RENAME_WHITEOUT with RENAME_EXCHANGE".into()));
        }
        let m = Move { parent, name, newparent, newname, flags, whiteout: Some((uid, gid)) };
        self.namespace_synced(&[parent, newparent], self.retry_nospc(|| self.rename_checked(m)))
    }

    /// The VFS's checks, the rename lock, then attempts until one finds
    /// the names unchanged under the locks.
    fn rename_checked(&self, m: Move<'_>) -> Result<()> {
        let Move { parent, name, newparent, newname, flags, .. } = m;
        check_name(name)?;
        check_name(newname)?;
        if is_dot(name) || is_dot(newname) {
            return Err(Error::Invalid("rename of \".\" or \"..\"".into()));
        }
        if flags.noreplace && flags.exchange {
            return Err(Error::Invalid("RENAME_NOREPLACE with RENAME_EXCHANGE".into()));
        }
        let rw = self.rw()?;
        // Renames between two directories are serialized: the tree's
        // shape (ancestry) stays as checked until they are done.
        let _cross = (parent != newparent).then(|| rw.ns.lock_rename());
        while !self.rename_once(m)? {}
        Ok(())
    }

    /// One attempt of [`FsCore::rename`] (rename lock held if the parents
    /// differ): looks both names up, does the VFS's checks, locks the
    /// parents and the inodes named in inode-number order and looks again.
    /// Returns false, having changed nothing, if a name changed between
    /// the lookups and the locks.
    fn rename_once(&self, m: Move<'_>) -> Result<bool> {
        let Move { parent, name, newparent, newname, flags, .. } = m;
        let rw = self.rw()?;
        let src = self.lookup_unlocked(parent, name)?.ok_or_else(|| Error::NotFound(lossy(name)))?;
        let dst = self.lookup_unlocked(newparent, newname)?;
        if flags.noreplace && dst.is_some() {
            // Before the same-inode shortcut, as Linux checks it.
            return Err(Error::Exists(lossy(newname)));
        }
        if dst == Some(src) {
            return Ok(true); // same inode: nothing to do (POSIX)
        }
        if flags.exchange && dst.is_none() {
            return Err(Error::NotFound(lossy(newname)));
        }
        let is_dir = |ino: u32| -> Result<bool> { Ok(ftype(&self.load(ino)?)? == FileType::Directory) };
        let src_is_dir = is_dir(src)?;
        let dst_is_dir = match dst {
            Some(d) => is_dir(d)?,
            None => false,
        };
        if dst.is_some() && !flags.exchange && !src_is_dir && rw.data.config().auto_da_alloc {
            // auto_da_alloc: the file that replaces another goes to disk
            // now (its allocation in a transaction no later than the
            // rename's, its data before that commits), so a crash after
            // the rename commits finds its contents, not an empty file.
            // Under rename_lock only, before any inode lock: allowed by
            // the lock order (crate::locks).
            self.writeback_inode(src)?;
        }
        if parent != newparent {
            // The VFS's traps (lock_rename), before any inode lock: the
            // rename lock keeps the answer true until the locks are held.
            // Moving a directory into its own subtree:
            if src_is_dir && self.is_ancestor(src, newparent)? {
                return Err(Error::Invalid("rename of a directory into itself".into()));
            }
            // Replacing (or swapping with) an ancestor of the source:
            if let Some(d) = dst.filter(|_| dst_is_dir) {
                if self.is_ancestor(d, parent)? {
                    return Err(if flags.exchange {
                        Error::Invalid("rename of a directory into itself".into())
                    } else {
                        Error::NotEmpty(lossy(newname))
                    });
                }
            }
        }
        let _l = rw.data.locks().lock_exclusive(&[parent, newparent], &[src, dst.unwrap_or(0)]);
        // Look again under the locks: the names, and the inodes' types
        // (a number freed and reused meanwhile may be another file).
        let pd = self.load_dir(parent)?;
        let nd = if parent == newparent { pd.clone() } else { self.load_dir(newparent)? };
        if self.lookup_opt(&pd, name)? != Some(src) {
            return Ok(false);
        }
        // A new name's check is the search for its slot (one walk of the
        // leaf for both), used by the add under these same locks.
        let room = match dst {
            None => match dw::find_room(&self.vol, &nd, newname) {
                Ok(room) => Some(room),
                Err(Error::Exists(_)) => return Ok(false),
                Err(e) => return Err(e),
            },
            Some(_) if self.lookup_opt(&nd, newname)? != dst => return Ok(false),
            Some(_) => None,
        };
        if is_dir(src)? != src_is_dir || dst.map(is_dir).transpose()?.is_some_and(|d| d != dst_is_dir) {
            return Ok(false);
        }
        self.rename_locked(m, (src, src_is_dir), (dst, dst_is_dir), (pd, nd), room)?;
        Ok(true)
    }

    /// The change of a rename, everything locked and checked; `pd` and
    /// `nd` are the parents loaded under the locks, `room` where the new
    /// name goes when it replaces nothing ([`dw::find_room`] under them).
    fn rename_locked(
        &self,
        m: Move<'_>,
        (src, src_is_dir): (u32, bool),
        (dst, dst_is_dir): (Option<u32>, bool),
        (mut pd, mut nd): (Inode, Inode),
        room: Option<dw::Room>,
    ) -> Result<()> {
        let Move { parent, name, newparent, newname, flags, .. } = m;
        // Before the handle: a refused name must leave nothing half done.
        dw::check_encoding(&self.vol, &nd, newname)?;
        let mut s = self.load(src)?;
        crate::fs::quota_ops::check_project_link(&nd, &s)?;
        // may_delete of the source (and of the destination it replaces
        // or swaps with), may_create in the new directory.
        Self::check_dir_removable(&pd)?;
        flags::check_unpinned(&s)?;
        match dst {
            Some(d) => {
                Self::check_dir_removable(&nd)?;
                flags::check_unpinned(&self.load(d)?)?;
            }
            None => Self::check_dir_addable(&nd)?,
        }
        let now = Timestamp::now();
        if flags.exchange {
            let d_ino = dst.ok_or_else(|| Error::NotFound(lossy(newname)))?;
            let mut d = self.load(d_ino)?;
            crate::fs::quota_ops::check_project_link(&pd, &d)?;
            let tx = self.begin(64)?;
            if parent == newparent {
                dw::replace_entry(&tx, &mut pd, name, d_ino, file_type_of(d.mode))?;
                dw::replace_entry(&tx, &mut pd, newname, src, file_type_of(s.mode))?;
                touch_dir(&mut pd);
                tx.write_inode(&mut pd)?;
            } else {
                dw::replace_entry(&tx, &mut pd, name, d_ino, file_type_of(d.mode))?;
                dw::replace_entry(&tx, &mut nd, newname, src, file_type_of(s.mode))?;
                if src_is_dir {
                    dw::set_parent(&tx, &mut s, newparent)?;
                }
                if dst_is_dir {
                    dw::set_parent(&tx, &mut d, parent)?;
                }
                if src_is_dir != dst_is_dir {
                    // The directory moved from pd to nd or back.
                    Self::bump_dir_links(&mut pd, dst_is_dir);
                    Self::bump_dir_links(&mut nd, src_is_dir);
                }
                touch_dir(&mut pd);
                touch_dir(&mut nd);
                tx.write_inode(&mut pd)?;
                tx.write_inode(&mut nd)?;
            }
            s.ctime = now;
            d.ctime = now;
            tx.write_inode(&mut s)?;
            tx.write_inode(&mut d)?;
            self.note_tid(&tx, &[parent, newparent, src, d_ino]);
            return Ok(());
        }
        if let Some(d_ino) = dst {
            if flags.noreplace {
                return Err(Error::Exists(lossy(newname)));
            }
            let d = self.load(d_ino)?;
            if src_is_dir && !dst_is_dir {
                return Err(Error::NotDir(lossy(newname)));
            }
            if !src_is_dir && dst_is_dir {
                return Err(Error::IsDir(lossy(newname)));
            }
            if dst_is_dir && !dw::is_empty(&self.vol, &d)? {
                return Err(Error::NotEmpty(lossy(newname)));
            }
        }
        let tx = self.begin(if m.whiteout.is_some() { 128 } else { 96 })?;
        let mut deferred = None;
        // The whiteout first: running out of inodes changes nothing yet.
        let whiteout = match m.whiteout {
            Some((uid, gid)) => Some(self.new_whiteout(&tx, parent, uid, gid)?),
            None => None,
        };
        // New name first (the inode is then reachable by both names for
        // an instant inside the transaction, never on disk).
        let added = match dst {
            Some(_) => dw::replace_entry(&tx, &mut nd, newname, src, file_type_of(s.mode)).map(drop),
            None => match room {
                Some(room) => dw::add_entry_at(&tx, &mut nd, newname, src, file_type_of(s.mode), room),
                None => dw::add_entry(&tx, &mut nd, newname, src, file_type_of(s.mode)),
            },
        };
        if let Err(e) = added {
            // No room for the new name: nothing else is changed yet but
            // the whiteout, undone, and what the directory grew by, kept.
            if matches!(e, Error::NoSpace(_) | Error::QuotaExceeded(_)) {
                if let Some(mut w) = whiteout {
                    self.release_inode(&tx, &mut w)?;
                }
                self.keep_grown_dir(&tx, &mut nd)?;
            }
            return Err(e);
        }
        if parent == newparent {
            // nd is the same directory: continue with its newest state.
            pd = nd.clone();
        }
        match &whiteout {
            Some(w) => {
                dw::replace_entry(&tx, &mut pd, name, w.ino, file_type_of(w.mode))?;
            }
            None => {
                dw::remove_entry(&tx, &mut pd, name)?;
            }
        }
        if src_is_dir && parent != newparent {
            dw::set_parent(&tx, &mut s, newparent)?;
            Self::bump_dir_links(&mut pd, false);
            if !dst_is_dir {
                Self::bump_dir_links(&mut nd, true);
            }
        }
        if let Some(d_ino) = dst {
            let mut d = self.load(d_ino)?;
            if dst_is_dir {
                // nd loses the victim's ".." reference (src's replaces it
                // when src is a directory from another parent, counted above
                // by not bumping).
                if parent == newparent {
                    Self::bump_dir_links(&mut pd, false);
                }
                d.links_count = 0;
            } else {
                // Never clamped: a victim without links is corrupt.
                d.links_count = crate::error::sub_counter(
                    d.links_count,
                    1,
                    "i_links_count",
                    crate::error::Structure::Inode,
                    crate::error::Location::Inode(d_ino),
                )?;
            }
            d.ctime = now;
            if d.links_count == 0 {
                if self.drop_last_link(&tx, &mut d)? {
                    deferred = Some(d_ino);
                }
            } else {
                tx.write_inode(&mut d)?;
            }
        }
        s.ctime = now;
        tx.write_inode(&mut s)?;
        touch_dir(&mut pd);
        tx.write_inode(&mut pd)?;
        if parent != newparent {
            touch_dir(&mut nd);
            tx.write_inode(&mut nd)?;
        }
        self.note_tid(&tx, &[parent, newparent, src, dst.unwrap_or(0), whiteout.map_or(0, |w| w.ino)]);
        drop(tx);
        if let Some(v) = deferred {
            self.delete_orphan(v)?;
        }
        Ok(())
    }

    /// A whiteout (character device 0:0 with no permission bits, the
    /// kernel's WHITEOUT_MODE and WHITEOUT_DEV) allocated near `parent`,
    /// with its one link, written.
    fn new_whiteout(&self, tx: &crate::txn::Tx, parent: u32, uid: u32, gid: u32) -> Result<Inode> {
        let mut w = self.new_inode(tx, parent, crate::format::inode::S_IFCHR, uid, gid)?;
        w.links_count = 1;
        w.flags &= !crate::format::inode::FL_EXTENTS;
        w.block = [0; crate::format::inode::I_BLOCK_SIZE];
        tx.write_inode(&mut w)?;
        Ok(w)
    }

    /// True if directory `a` is `b` or one of its ancestors. Called with
    /// no inode lock held (each directory is read under its lock shared).
    fn is_ancestor(&self, a: u32, b: u32) -> Result<bool> {
        let mut cur = b;
        for _ in 0..4096 {
            if cur == a {
                return Ok(true);
            }
            if cur == ROOT_INO {
                return Ok(false);
            }
            cur = self.lookup_unlocked(cur, b"..")?.ok_or_else(|| Error::NotFound("..".into()))?;
        }
        Err(Error::Loop("directory tree deeper than 4096 levels".into()))
    }
}
