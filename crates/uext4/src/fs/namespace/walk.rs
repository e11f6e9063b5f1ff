//! Path resolution and directory lookups: the read side of the namespace.

use super::{check_name, is_dot};
use crate::dir::{self, write as dw};
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::dirent::NAME_MAX;
use crate::format::inode::{FileType, Inode, FL_EA_INODE, ROOT_INO};
use crate::fs::FsCore;
use crate::locks::IoStamp;

/// Symlinks followed while resolving one path before giving up (ELOOP),
/// the kernel's limit.
const MAX_SYMLINK_FOLLOWS: u32 = 40;

impl FsCore {
    /// Looks `name` up in directory `dir` and returns the inode it names:
    /// one step of a walk, for front ends that resolve names one
    /// directory at a time (LOOKUP); [`FsCore::resolve`] walks a whole path.
    pub fn lookup(&self, dir: u32, name: &[u8]) -> Result<u32> {
        self.find(dir, name)?.ok_or_else(|| Error::NotFound(String::from_utf8_lossy(name).into_owned()))
    }

    /// [`FsCore::lookup`] with an absent name as `None`, not as an error:
    /// for front ends that answer most lookups of new names (a FUSE
    /// LOOKUP before every create), an answer that builds no message.
    pub fn find(&self, dir: u32, name: &[u8]) -> Result<Option<u32>> {
        let found = match self.live() {
            Some(rw) if !is_dot(name) => {
                // One walk for the entry or, if there is none, the room a
                // create of the name (which FUSE sends next) would search
                // for again: kept for it, with the lock's stamp; and an
                // entry found, where it is, for an unlink that may follow.
                match self.search_shared(dir, name)? {
                    (stamp, dw::Search::Found(ino, ft, at)) => {
                        if let Some(at) = at {
                            rw.ns.present.note(dir, name, stamp, at);
                        }
                        Some((ino, ft))
                    }
                    (stamp, dw::Search::Absent(room)) => {
                        rw.ns.absent.note(dir, name, stamp, room);
                        None
                    }
                }
            }
            _ => self.read_dir_with(dir, |d| dir::lookup(&self.vol, d, name))?,
        };
        match found {
            Some((ino, _)) => {
                self.named_inode(ino)?;
                Ok(Some(ino))
            }
            None => Ok(None),
        }
    }

    /// One walk of directory `dir` for `name` (a valid name, not a dot)
    /// under the directory's I/O lock shared ([`dw::search`]), with the
    /// lock's stamp: while the stamp holds, the answer does too (see
    /// `seen.rs`). Open read-write only.
    pub(super) fn search_shared(&self, dir: u32, name: &[u8]) -> Result<(IoStamp, dw::Search)> {
        let shared = self.rw()?.data.locks().lock_shared(dir);
        let d = self.dir_inode(dir)?;
        check_name(name)?;
        Ok((shared.stamp(), dw::search(&self.vol, &d, name)?))
    }

    /// Reads inode `ino` that a directory entry names, refusing one that
    /// is an extended attribute's value (flagged `EXT4_EA_INODE_FL`), as
    /// the kernel's `__ext4_iget` does for every inode it reaches other
    /// than through an xattr (EFSCORRUPTED, "unexpected EA_INODE flag").
    /// Such an inode is no file: its `i_atime` holds the value's hash and
    /// its link count the value's references, so opening it as a file
    /// (reading updates the atime) would damage the xattr that owns it.
    pub fn named_inode(&self, ino: u32) -> Result<Inode> {
        let i = self.inode(ino)?;
        if i.flags & FL_EA_INODE != 0 {
            return Err(Error::corruption(
                Structure::Inode,
                Location::Inode(ino),
                CorruptKind::Conflict { a: "EXT4_EA_INODE_FL (an xattr value)", b: "a directory entry naming it" },
            ));
        }
        Ok(i)
    }

    /// Reads directory `ino` with `f`: when open read-write, under its
    /// I/O lock shared (as the VFS holds `i_rwsem` shared for lookups and
    /// listings), so that a change in progress (the first block turning
    /// into an htree root before the inode says so, a leaf split, a new
    /// block) is seen whole or not at all. The caller holds no inode lock.
    pub(in crate::fs) fn read_dir_with<T>(&self, ino: u32, f: impl FnOnce(&Inode) -> Result<T>) -> Result<T> {
        let _shared = self.live().map(|rw| rw.data.locks().lock_shared(ino));
        f(&self.dir_inode(ino)?)
    }

    /// Inode `ino`, which must be a directory.
    fn dir_inode(&self, ino: u32) -> Result<Inode> {
        let d = self.inode(ino)?;
        if d.file_type()? != FileType::Directory {
            return Err(Error::NotDir(format!("inode {ino}")));
        }
        Ok(d)
    }

    /// Resolves `path` (absolute, or relative to the root) to an inode,
    /// following symlinks in every component except the last.
    pub fn resolve(&self, path: impl AsRef<[u8]>) -> Result<u32> {
        let mut follows = 0;
        self.walk(ROOT_INO, path.as_ref(), false, &mut follows)
    }

    /// Like [`FsCore::resolve`] but also follows a final symlink: the
    /// inode a path's contents come from, as open(2) without
    /// `O_NOFOLLOW` sees it.
    pub fn resolve_follow(&self, path: impl AsRef<[u8]>) -> Result<u32> {
        let mut follows = 0;
        self.walk(ROOT_INO, path.as_ref(), true, &mut follows)
    }

    fn walk(&self, start: u32, path: &[u8], follow_last: bool, follows: &mut u32) -> Result<u32> {
        let shown = || String::from_utf8_lossy(path).into_owned();
        let mut cur = if path.first() == Some(&b'/') { ROOT_INO } else { start };
        let comps: Vec<&[u8]> = path.split(|&c| c == b'/').filter(|c| !c.is_empty() && *c != b".").collect();
        // A trailing slash (or "/.") demands a directory: the last
        // component's symlink is followed and the result must be a
        // directory, as in POSIX path resolution.
        let must_be_dir = path.ends_with(b"/") || path.ends_with(b"/.") || path == b".";
        let follow_last = follow_last || must_be_dir;
        for (i, comp) in comps.iter().enumerate() {
            if comp.len() > NAME_MAX {
                return Err(Error::NameTooLong(shown()));
            }
            let found = match self.read_dir_with(cur, |d| dir::lookup(&self.vol, d, comp)) {
                Err(Error::NotDir(_)) => return Err(Error::NotDir(shown())),
                r => r?,
            };
            let next = match found {
                Some((ino, _)) => ino,
                None => return Err(Error::NotFound(shown())),
            };
            let last = i + 1 == comps.len();
            let node = self.named_inode(next)?;
            if node.file_type()? == FileType::Symlink && (!last || follow_last) {
                *follows += 1;
                if *follows > MAX_SYMLINK_FOLLOWS {
                    return Err(Error::Loop(shown()));
                }
                let target = self.readlink_inode(&node)?;
                cur = self.walk(cur, &target, true, follows)?;
            } else {
                cur = next;
            }
        }
        if must_be_dir && self.inode(cur)?.file_type()? != FileType::Directory {
            return Err(Error::NotDir(shown()));
        }
        Ok(cur)
    }
}
