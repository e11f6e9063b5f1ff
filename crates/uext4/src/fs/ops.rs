//! Namespace and metadata operations of a filesystem opened read-write.
//!
//! Every operation follows the same shape: check arguments, take the
//! inode locks it needs in the order of [`crate::locks`], re-read the
//! inodes under the locks, start one journal handle, change the inodes,
//! directory entries and allocations through the [`Tx`], write the inodes
//! back, and drop the handle (its changes then commit with the running
//! transaction). Errors before the first change leave nothing behind;
//! errors after it abort nothing on disk that is not consistent, because
//! the order of changes keeps every intermediate state valid for fsck
//! (an entry is added only after its inode is written, removed before its
//! inode is freed).

use super::{FsCore, Stat};
use crate::alloc::flags as aflags;
use crate::dir::write as dw;
use crate::error::{Error, Result};
use crate::format::dirent::{file_type_of, NAME_MAX};
use crate::format::inode::{
    FileType, Inode, Timestamp, FL_EXTENTS, I_BLOCK_SIZE, ROOT_INO, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG,
};
use crate::inode::extent_write as ew;
use crate::inode::{self, MapKind};
use crate::txn::Tx;

/// Largest link count; directories beyond it count 1 (dir_nlink).
pub const LINK_MAX: u16 = 65000;
/// Blocks allocated and written per journal handle by a large write.
const WRITE_CHUNK_BLOCKS: u64 = 8192;

/// Who calls the allocating write path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteMode {
    /// A direct write: mtime and ctime are set.
    Direct,
    /// Writeback of dirty folios: times were set by the writes; the
    /// blocks reserved for the data may be allocated; `size_hint` is the
    /// file's in-memory size (for the allocator's goal and flags).
    Writeback { size_hint: u64 },
}

/// `rename` flags (renameat2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenameFlags {
    /// Fail with EEXIST if the destination exists.
    pub noreplace: bool,
    /// Atomically swap source and destination (both must exist).
    pub exchange: bool,
}

/// Attribute changes (None = leave as is).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// Permission bits (the type bits are kept).
    pub mode: Option<u16>,
    /// Owner.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
    /// New size (truncate or extend).
    pub size: Option<u64>,
    /// Access time.
    pub atime: Option<Timestamp>,
    /// Modification time.
    pub mtime: Option<Timestamp>,
}

/// fallocate(2) modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallocMode {
    /// Allocate (unwritten) and extend the size.
    Allocate,
    /// Allocate without changing the size.
    KeepSize,
    /// Deallocate the range (size unchanged).
    PunchHole,
    /// Make the range read as zeros (allocated, unwritten).
    ZeroRange,
}

/// Checks a single path component.
pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    let shown = || String::from_utf8_lossy(name).into_owned();
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(Error::Invalid(format!("bad name {:?}", shown())));
    }
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong(shown()));
    }
    Ok(())
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

fn ftype(i: &Inode) -> Result<FileType> {
    i.file_type()
}

impl FsCore {
    fn load(&self, ino: u32) -> Result<Inode> {
        self.inode(ino)
    }

    fn load_dir(&self, ino: u32) -> Result<Inode> {
        let d = self.load(ino)?;
        if ftype(&d)? != FileType::Directory {
            return Err(Error::NotDir(format!("inode {ino}")));
        }
        if d.links_count == 0 {
            return Err(Error::NotFound(format!("directory inode {ino} was removed")));
        }
        Ok(d)
    }

    fn lookup_opt(&self, dir: &Inode, name: &[u8]) -> Result<Option<u32>> {
        Ok(crate::dir::lookup(&self.vol, dir, name)?.map(|(i, _)| i))
    }

    /// Looks `name` up in directory `dir` before the operation locks
    /// anything: under the directory's I/O lock shared, so that it sees
    /// the directory before or after a change, never in between. The
    /// answer is a guess to lock by, checked again under the locks.
    fn lookup_unlocked(&self, dir: u32, name: &[u8]) -> Result<Option<u32>> {
        let _s = self.rw()?.locks.lock_shared(dir);
        self.lookup_opt(&self.load_dir(dir)?, name)
    }

    /// An inode loaded under its I/O lock, for an operation by inode
    /// number: one with no links that nobody has open was deleted (its
    /// number may be free or reused by now), so it is gone (ENOENT).
    pub(crate) fn check_live(&self, i: &Inode) -> Result<()> {
        if i.links_count == 0 && !self.rw()?.is_open(i.ino) {
            return Err(Error::NotFound(format!("inode {} was deleted", i.ino)));
        }
        Ok(())
    }

    /// Records `tx` as the last change of `inos` (for fsync), and the
    /// operation as ended consistently ([`Tx::settle`]).
    fn note_tid(&self, tx: &Tx, inos: &[u32]) {
        tx.settle();
        if let Ok(rw) = self.rw() {
            rw.note_dirty(inos, tx.tid());
        }
    }

    /// A fresh inode of `mode` owned by `uid`/`gid`, allocated near `parent`.
    fn new_inode(&self, tx: &Tx, parent: u32, mode: u16, uid: u32, gid: u32) -> Result<Inode> {
        let is_dir = mode & S_IFMT == S_IFDIR;
        let ino = tx.alloc_inode(parent, is_dir)?;
        let mut i = Inode::new_raw(&self.vol.sb, ino);
        let now = Timestamp::now();
        i.mode = mode;
        i.uid = uid;
        i.gid = gid;
        i.atime = now;
        i.mtime = now;
        i.ctime = now;
        if i.crtime.is_some() {
            i.crtime = Some(now);
        }
        i.generation = self.rw()?.next_generation();
        if matches!(mode & S_IFMT, S_IFREG | S_IFDIR) {
            ew::init_root(&mut i);
        }
        Ok(i)
    }

    fn bump_dir_links(d: &mut Inode, up: bool) {
        if up {
            if d.links_count >= LINK_MAX || d.links_count == 1 {
                // dir_nlink: past the limit the count is 1 ("many").
                d.links_count = 1;
            } else {
                d.links_count += 1;
            }
        } else if d.links_count > 2 {
            d.links_count -= 1;
        }
    }

    /// Ends the creation of inode `i` named in directory `dir` (`added`:
    /// whether writing it and its entry worked). On failure (e.g. ENOSPC
    /// for a block or for growing the directory) the inode and whatever
    /// blocks it got are freed, so nothing is left without a name; else
    /// the directory's times (and, for a subdirectory, its link count)
    /// are updated and the new inode's attributes returned.
    fn finish_new_entry(&self, tx: Tx, dir: &mut Inode, i: &mut Inode, added: Result<()>) -> Result<Stat> {
        if let Err(e) = added {
            self.release_inode(&tx, i)?;
            // Growing a directory or a new inode's blocks fail with ENOSPC
            // before changing what they grow: the inode was the only
            // change, and it is undone. Any other failure may have left a
            // half-changed directory: the journal aborts (Tx's Drop).
            if matches!(e, Error::NoSpace(_)) {
                tx.settle();
            }
            return Err(e);
        }
        if ftype(i)? == FileType::Directory {
            Self::bump_dir_links(dir, true);
        }
        touch_dir(dir);
        tx.write_inode(dir)?;
        self.note_tid(&tx, &[dir.ino, i.ino]);
        drop(tx);
        self.stat(i.ino)
    }

    /// Creates a node (regular file, device, fifo, socket) in `parent`.
    pub fn mknod(&self, parent: u32, name: &[u8], mode: u16, rdev: (u32, u32), uid: u32, gid: u32) -> Result<Stat> {
        self.retry_nospc(|| self.mknod_once(parent, name, mode, rdev, uid, gid))
    }

    fn mknod_once(&self, parent: u32, name: &[u8], mode: u16, rdev: (u32, u32), uid: u32, gid: u32) -> Result<Stat> {
        check_name(name)?;
        let t = mode & S_IFMT;
        let t = if t == 0 { S_IFREG } else { t };
        if t == S_IFDIR || t == S_IFLNK {
            return Err(Error::Invalid("mknod of a directory or symlink".into()));
        }
        let mode = t | (mode & 0o7777);
        let (_l, mut dir) = self.lock_for_new_entry(parent, name)?;
        let tx = self.begin(32)?;
        let mut i = self.new_inode(&tx, parent, mode, uid, gid)?;
        i.links_count = 1;
        if t != S_IFREG {
            i.flags &= !FL_EXTENTS;
            i.block = [0; I_BLOCK_SIZE];
            set_rdev(&mut i, rdev);
        }
        let added = tx.write_inode(&mut i).and_then(|()| dw::add_entry(&tx, &mut dir, name, i.ino, file_type_of(mode)));
        self.finish_new_entry(tx, &mut dir, &mut i, added)
    }

    /// Locks directory `parent` for adding `name` and returns it, loaded
    /// under the lock; EEXIST if `name` is there (or is "." / "..").
    fn lock_for_new_entry(&self, parent: u32, name: &[u8]) -> Result<(crate::locks::Locked, Inode)> {
        let rw = self.rw()?;
        let l = rw.locks.lock_exclusive(&[parent], &[]);
        let dir = self.load_dir(parent)?;
        if is_dot(name) || self.lookup_opt(&dir, name)?.is_some() {
            return Err(Error::Exists(String::from_utf8_lossy(name).into_owned()));
        }
        Ok((l, dir))
    }

    /// Creates a regular file.
    pub fn create(&self, parent: u32, name: &[u8], mode: u16, uid: u32, gid: u32) -> Result<Stat> {
        self.mknod(parent, name, S_IFREG | (mode & 0o7777), (0, 0), uid, gid)
    }

    /// Creates a directory.
    pub fn mkdir(&self, parent: u32, name: &[u8], mode: u16, uid: u32, gid: u32) -> Result<Stat> {
        self.retry_nospc(|| self.mkdir_once(parent, name, mode, uid, gid))
    }

    fn mkdir_once(&self, parent: u32, name: &[u8], mode: u16, uid: u32, gid: u32) -> Result<Stat> {
        check_name(name)?;
        let (_l, mut dir) = self.lock_for_new_entry(parent, name)?;
        let tx = self.begin(48)?;
        let mut d = self.new_inode(&tx, parent, S_IFDIR | (mode & 0o7777), uid, gid)?;
        d.links_count = 2;
        let added = (|| {
            let runs = ew::allocate_range(&tx, &mut d, 0, 1, false, aflags::METADATA, 0)?;
            let &(_, pblk, _) = runs.first().ok_or_else(|| Error::NoSpace("no block for the directory".into()))?;
            dw::init_dir_block(&tx, &mut d, pblk, parent)?;
            tx.write_inode(&mut d)?;
            dw::add_entry(&tx, &mut dir, name, d.ino, file_type_of(S_IFDIR))
        })();
        self.finish_new_entry(tx, &mut dir, &mut d, added)
    }

    /// Creates a symbolic link (fast when the target fits in the inode).
    pub fn symlink(&self, parent: u32, name: &[u8], target: &[u8], uid: u32, gid: u32) -> Result<Stat> {
        self.retry_nospc(|| self.symlink_once(parent, name, target, uid, gid))
    }

    fn symlink_once(&self, parent: u32, name: &[u8], target: &[u8], uid: u32, gid: u32) -> Result<Stat> {
        check_name(name)?;
        if target.is_empty() || target.contains(&0) {
            return Err(Error::Invalid("empty symlink target".into()));
        }
        if target.len() >= self.vol.block_size.min(4096) {
            return Err(Error::NameTooLong("symlink target".into()));
        }
        let (_l, mut dir) = self.lock_for_new_entry(parent, name)?;
        let tx = self.begin(40)?;
        let mut i = self.new_inode(&tx, parent, S_IFLNK | 0o777, uid, gid)?;
        i.links_count = 1;
        i.size = target.len() as u64;
        let added = (|| {
            if target.len() < I_BLOCK_SIZE {
                i.block = [0; I_BLOCK_SIZE];
                i.block[..target.len()].copy_from_slice(target);
            } else {
                ew::init_root(&mut i);
                let size = i.size;
                let runs = ew::allocate_range(&tx, &mut i, 0, 1, false, aflags::SMALL_FILE, size)?;
                let &(_, pblk, _) = runs.first().ok_or_else(|| Error::NoSpace("no block for the symlink".into()))?;
                let mut buf = vec![0u8; self.vol.block_size];
                buf[..target.len()].copy_from_slice(target);
                self.vol.device().write_at(&buf, pblk * self.vol.block_size as u64)?;
            }
            tx.write_inode(&mut i)?;
            dw::add_entry(&tx, &mut dir, name, i.ino, file_type_of(S_IFLNK))
        })();
        self.finish_new_entry(tx, &mut dir, &mut i, added)
    }

    /// Adds a hard link `newparent/newname` to `ino`.
    pub fn link(&self, ino: u32, newparent: u32, newname: &[u8]) -> Result<Stat> {
        // Growing the directory may need blocks a pending free holds.
        self.retry_nospc(|| self.link_once(ino, newparent, newname))
    }

    fn link_once(&self, ino: u32, newparent: u32, newname: &[u8]) -> Result<Stat> {
        check_name(newname)?;
        if is_dot(newname) {
            return Err(Error::Exists(lossy(newname)));
        }
        // The VFS's refusal, before any lock: a directory's type never
        // changes while its number is in use.
        if ftype(&self.load(ino)?)? == FileType::Directory {
            return Err(Error::NotPermitted("hard link to a directory".into()));
        }
        let rw = self.rw()?;
        let _l = rw.locks.lock_exclusive(&[newparent], &[ino]);
        let mut dir = self.load_dir(newparent)?;
        let mut i = self.load(ino)?;
        if ftype(&i)? == FileType::Directory {
            return Err(Error::NotPermitted("hard link to a directory".into()));
        }
        if i.links_count == 0 {
            return Err(Error::NotFound(format!("inode {ino} was removed")));
        }
        if i.links_count >= LINK_MAX {
            return Err(Error::TooManyLinks(format!("inode {ino}")));
        }
        if is_dot(newname) || self.lookup_opt(&dir, newname)?.is_some() {
            return Err(Error::Exists(String::from_utf8_lossy(newname).into_owned()));
        }
        let tx = self.begin(24)?;
        i.links_count += 1;
        i.ctime = Timestamp::now();
        tx.write_inode(&mut i)?;
        if let Err(e) = dw::add_entry(&tx, &mut dir, newname, ino, file_type_of(i.mode)) {
            // No new name (e.g. ENOSPC growing the directory): no new link.
            i.links_count -= 1;
            tx.write_inode(&mut i)?;
            if matches!(e, Error::NoSpace(_)) {
                tx.settle();
            }
            return Err(e);
        }
        touch_dir(&mut dir);
        tx.write_inode(&mut dir)?;
        self.note_tid(&tx, &[newparent, ino]);
        drop(tx);
        self.stat(ino)
    }

    /// Removes the name `parent/name` of a non-directory.
    pub fn unlink(&self, parent: u32, name: &[u8]) -> Result<()> {
        check_name(name)?;
        if is_dot(name) {
            return Err(Error::IsDir(lossy(name)));
        }
        let rw = self.rw()?;
        // The victim is found before locking and locked with its parent
        // in inode-number order; if the name changed meanwhile, again.
        let (_l, mut dir, victim) = loop {
            let victim = self.lookup_unlocked(parent, name)?.ok_or_else(|| Error::NotFound(lossy(name)))?;
            let l = rw.locks.lock_exclusive(&[parent], &[victim]);
            let dir = self.load_dir(parent)?;
            if self.lookup_opt(&dir, name)? == Some(victim) {
                break (l, dir, victim);
            }
        };
        let mut i = self.load(victim)?;
        if ftype(&i)? == FileType::Directory {
            return Err(Error::IsDir(lossy(name)));
        }
        let tx = self.begin(64)?;
        dw::remove_entry(&tx, &mut dir, name)?;
        touch_dir(&mut dir);
        tx.write_inode(&mut dir)?;
        i.links_count = i.links_count.saturating_sub(1);
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

    /// Removes the empty directory `parent/name`.
    pub fn rmdir(&self, parent: u32, name: &[u8]) -> Result<()> {
        if name == b"." {
            return Err(Error::Invalid("rmdir of \".\"".into()));
        }
        if name == b".." {
            return Err(Error::NotEmpty("rmdir of \"..\"".into()));
        }
        check_name(name)?;
        let rw = self.rw()?;
        // As unlink: found, locked in inode-number order, checked again.
        let (_l, mut dir, victim) = loop {
            let victim = self.lookup_unlocked(parent, name)?.ok_or_else(|| Error::NotFound(lossy(name)))?;
            if victim == ROOT_INO {
                return Err(Error::Busy("the root directory".into()));
            }
            let l = rw.locks.lock_exclusive(&[parent, victim], &[]);
            let dir = self.load_dir(parent)?;
            if self.lookup_opt(&dir, name)? == Some(victim) {
                break (l, dir, victim);
            }
        };
        let mut d = self.load(victim)?;
        if ftype(&d)? != FileType::Directory {
            return Err(Error::NotDir(lossy(name)));
        }
        if !dw::is_empty(&self.vol, &d)? {
            return Err(Error::NotEmpty(lossy(name)));
        }
        let tx = self.begin(64)?;
        dw::remove_entry(&tx, &mut dir, name)?;
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

    /// Frees an inode whose last link is gone: its blocks, its xattr
    /// block reference and its bitmap bit (dtime set, as the kernel does).
    pub(crate) fn release_inode(&self, tx: &Tx, i: &mut Inode) -> Result<()> {
        let is_dir = ftype(i)? == FileType::Directory;
        if let Ok(rw) = self.rw() {
            let st = rw.locks.inode(i.ino);
            st.deleted.store(true, std::sync::atomic::Ordering::Release);
            st.pages.invalidate_all();
            // Its errors are not the next user's of the number.
            rw.errs.forget(i.ino);
        }
        if i.flags & FL_EXTENTS != 0 && !self.is_fast_symlink(i) {
            ew::remove_range(tx, i, 0, u64::MAX)?;
        } else if matches!(ftype(i)?, FileType::Regular | FileType::Directory)
            || (ftype(i)? == FileType::Symlink && !self.is_fast_symlink(i))
        {
            self.free_blockmap(tx, i)?;
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

    /// Block-mapped (ext2/ext3) files are not written; deleting one is
    /// refused rather than leaking its blocks.
    fn free_blockmap(&self, _tx: &Tx, i: &Inode) -> Result<()> {
        if inode::extents(&self.vol, i)?.is_empty() {
            return Ok(());
        }
        Err(Error::Unsupported("deleting block-mapped (non-extent) files".into()))
    }

    /// rename(2) / renameat2 with NOREPLACE and EXCHANGE.
    pub fn rename(&self, parent: u32, name: &[u8], newparent: u32, newname: &[u8], flags: RenameFlags) -> Result<()> {
        // The new name may need a directory block a pending free holds;
        // the new name is added first, so a failure leaves nothing done.
        self.retry_nospc(|| self.rename_checked(parent, name, newparent, newname, flags))
    }

    /// The VFS's checks, the rename lock, then attempts until one finds
    /// the names unchanged under the locks.
    fn rename_checked(
        &self,
        parent: u32,
        name: &[u8],
        newparent: u32,
        newname: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
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
        let _cross = (parent != newparent).then(|| rw.lock_rename());
        while !self.rename_once(parent, name, newparent, newname, flags)? {}
        Ok(())
    }

    /// One attempt of [`FsCore::rename`] (rename lock held if the parents
    /// differ): looks both names up, does the VFS's checks, locks the
    /// parents and the inodes named in inode-number order and looks again.
    /// Returns false, having changed nothing, if a name changed between
    /// the lookups and the locks.
    fn rename_once(
        &self,
        parent: u32,
        name: &[u8],
        newparent: u32,
        newname: &[u8],
        flags: RenameFlags,
    ) -> Result<bool> {
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
        if dst.is_some() && !flags.exchange && !src_is_dir && rw.data.auto_da_alloc {
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
        let _l = rw.locks.lock_exclusive(&[parent, newparent], &[src, dst.unwrap_or(0)]);
        // Look again under the locks: the names, and the inodes' types
        // (a number freed and reused meanwhile may be another file).
        let pd = self.load_dir(parent)?;
        let nd = if parent == newparent { pd.clone() } else { self.load_dir(newparent)? };
        if self.lookup_opt(&pd, name)? != Some(src)
            || self.lookup_opt(&nd, newname)? != dst
            || is_dir(src)? != src_is_dir
            || dst.map(is_dir).transpose()?.is_some_and(|d| d != dst_is_dir)
        {
            return Ok(false);
        }
        self.rename_locked(parent, name, newparent, newname, flags, (src, src_is_dir), (dst, dst_is_dir), pd, nd)?;
        Ok(true)
    }

    /// The change of a rename, everything locked and checked; `pd` and
    /// `nd` are the parents loaded under the locks.
    #[allow(clippy::too_many_arguments)]
    fn rename_locked(
        &self,
        parent: u32,
        name: &[u8],
        newparent: u32,
        newname: &[u8],
        flags: RenameFlags,
        (src, src_is_dir): (u32, bool),
        (dst, dst_is_dir): (Option<u32>, bool),
        mut pd: Inode,
        mut nd: Inode,
    ) -> Result<()> {
        let mut s = self.load(src)?;
        let now = Timestamp::now();
        if flags.exchange {
            let d_ino = dst.ok_or_else(|| Error::NotFound(lossy(newname)))?;
            let mut d = self.load(d_ino)?;
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
                    dw::set_dotdot(&tx, &s, newparent)?;
                }
                if dst_is_dir {
                    dw::set_dotdot(&tx, &d, parent)?;
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
        let tx = self.begin(96)?;
        let mut deferred = None;
        // New name first (the inode is then reachable by both names for
        // an instant inside the transaction, never on disk).
        match dst {
            Some(_) => {
                dw::replace_entry(&tx, &mut nd, newname, src, file_type_of(s.mode))?;
            }
            None => dw::add_entry(&tx, &mut nd, newname, src, file_type_of(s.mode))?,
        }
        if parent == newparent {
            // nd is the same directory: continue with its newest state.
            pd = nd.clone();
        }
        dw::remove_entry(&tx, &mut pd, name)?;
        if src_is_dir && parent != newparent {
            dw::set_dotdot(&tx, &s, newparent)?;
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
                d.links_count = d.links_count.saturating_sub(1);
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
        self.note_tid(&tx, &[parent, newparent, src, dst.unwrap_or(0)]);
        drop(tx);
        if let Some(v) = deferred {
            self.delete_orphan(v)?;
        }
        Ok(())
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

    /// Changes attributes; a size change truncates or extends the file.
    pub fn setattr(&self, ino: u32, attr: SetAttr) -> Result<Stat> {
        let rw = self.rw()?;
        let _l = rw.locks.lock_exclusive(&[], &[ino]);
        let st = rw.locks.inode(ino);
        if attr.size.is_some() && st.pages.is_dirty() {
            // Truncate works on the blocks: the data goes to them first.
            self.writeback_locked(&st, ino)?;
        }
        let mut i = self.load(ino)?;
        self.check_live(&i)?;
        let now = Timestamp::now();
        if let Some(size) = attr.size {
            match ftype(&i)? {
                FileType::Regular => {}
                FileType::Directory => return Err(Error::IsDir(format!("inode {ino}"))),
                _ => return Err(Error::Invalid(format!("truncate of inode {ino}, not a regular file"))),
            }
            self.check_offset(size, 0, i.flags & FL_EXTENTS != 0)?;
        }
        let shrinking = attr.size.is_some_and(|s| s < i.size);
        let _inv = shrinking.then(|| st.invalidate.write());
        let tx = self.begin(128)?;
        let m = st.map.write();
        let mut truncate_left = false;
        if let Some(size) = attr.size {
            if size < i.size {
                st.pages.invalidate(size, u64::MAX);
                truncate_left = !self.shrink(&tx, &mut i, size)?;
            }
            if size != i.size {
                i.mtime = now;
            }
            i.size = size;
        }
        if let Some(m) = attr.mode {
            i.mode = (i.mode & S_IFMT) | (m & 0o7777);
        }
        if let Some(u) = attr.uid {
            i.uid = u;
        }
        if let Some(g) = attr.gid {
            i.gid = g;
        }
        if let Some(t) = attr.atime {
            i.atime = t;
        }
        if let Some(t) = attr.mtime {
            i.mtime = t;
        }
        i.ctime = now;
        tx.write_inode(&mut i)?;
        if truncate_left {
            // The rest of the blocks are freed in more handles; the orphan
            // list has a crash finish them (ext4_setattr's orphan_add).
            self.orphan_add(&tx, &mut i)?;
        }
        self.note_tid(&tx, &[ino]);
        drop(tx);
        drop(m);
        if truncate_left {
            self.finish_truncate(ino, Some(&st.map))?;
        }
        if attr.size == Some(0) && rw.data.auto_da_alloc {
            // What is written next reaches the disk at close, not 30 s
            // later (ext4 truncates-to-zero-then-rewrites the same way).
            rw.alloc_on_close(ino);
        }
        self.stat(ino)
    }

    /// EFBIG unless `offset + len` stays within the largest size of an
    /// extent-mapped (`extents`) or block-mapped file.
    pub(crate) fn check_offset(&self, offset: u64, len: u64, extents: bool) -> Result<()> {
        let end = offset.checked_add(len).ok_or_else(|| Error::FileTooBig("offset overflows".into()))?;
        let max = self.vol.sb.max_file_size(extents);
        if end > max {
            return Err(Error::FileTooBig(format!("offset {end} beyond the largest file ({max} bytes)")));
        }
        Ok(())
    }

    /// How much of a write of `len` bytes at `offset` fits below the
    /// largest file size: as the kernel's generic_write_checks, a write
    /// that starts below it is cut short there, one that starts at or past
    /// it fails with EFBIG. Writes go to extent-mapped files only.
    pub(crate) fn write_limit(&self, offset: u64, len: usize) -> Result<usize> {
        let max = self.vol.sb.max_file_size(true);
        if len == 0 {
            return Ok(0);
        }
        if offset >= max {
            return Err(Error::FileTooBig(format!("offset {offset} at or beyond the largest file ({max} bytes)")));
        }
        Ok(usize::try_from(max - offset).map_or(len, |room| len.min(room)))
    }

    /// Frees the blocks past `size` (as many as the handle's credits
    /// allow: false when some are left) and zeroes the tail of the last
    /// block.
    fn shrink(&self, tx: &Tx, i: &mut Inode, size: u64) -> Result<bool> {
        if i.flags & FL_EXTENTS == 0 {
            return Err(Error::Unsupported("truncating block-mapped (non-extent) files".into()));
        }
        let bs = self.vol.block_size as u64;
        let keep = size.div_ceil(bs);
        let done = self.free_blocks_bounded(tx, i, keep)?;
        let within = size % bs;
        if within != 0 {
            if let MapKind::Mapped(p) = inode::map_block(&self.vol, i, size / bs)?.kind {
                let zeros = vec![0u8; (bs - within) as usize];
                self.vol.device().write_at(&zeros, p * bs + within)?;
            }
        }
        Ok(done)
    }

    /// Writes `data` at `offset` through the page cache (buffered: the
    /// data is in dirty folios when this returns, its blocks reserved;
    /// writeback allocates them and writes it, see fs/writeback.rs).
    pub fn write(&self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        let data = &data[..self.write_limit(offset, data.len())?];
        self.check_not_aborted()?;
        let n = self.write_retrying(offset, data, |o, d| self.write_buffered(ino, o, d))?;
        // The write is done; a writeback error is reported by fsync.
        let _ = self.balance_dirty(ino);
        Ok(n)
    }

    /// The allocating write path, with the inode's I/O lock held
    /// exclusively and its direct I/O drained (direct writes that
    /// allocate, and writeback).
    ///
    /// The mapping lock is held (exclusively) per chunk, across the
    /// allocation and the data writes: buffered readers hold no I/O lock
    /// and must never walk a half-changed tree or read new blocks before
    /// their data is there. (Allocating unwritten extents first and
    /// writing outside the lock is the kernel's better way; to do.)
    /// The range is checked by the public entry points.
    pub(crate) fn write_locked(&self, ino: u32, offset: u64, data: &[u8], mode: WriteMode) -> Result<usize> {
        let (writeback, hint) = match mode {
            WriteMode::Direct => (false, 0),
            WriteMode::Writeback { size_hint } => (true, size_hint),
        };
        let st = self.rw()?.locks.inode(ino);
        let mut i = self.load(ino)?;
        match ftype(&i)? {
            FileType::Regular => {}
            FileType::Directory => return Err(Error::IsDir(format!("inode {ino}"))),
            _ => return Err(Error::Invalid(format!("write to inode {ino}, not a regular file"))),
        }
        if i.flags & FL_EXTENTS == 0 {
            return Err(Error::Unsupported("writing block-mapped (non-extent) files".into()));
        }
        if data.is_empty() {
            return Ok(0);
        }
        let bs = self.vol.block_size as u64;
        let end = offset + data.len() as u64;
        let mut pos = offset;
        while pos < end {
            let chunk_end = end.min((pos / bs + WRITE_CHUNK_BLOCKS) * bs);
            let tx = self.begin_tx(256, writeback)?;
            let _m = st.map.write();
            let chunk = &data[(pos - offset) as usize..(chunk_end - offset) as usize];
            let written = self.write_chunk(&tx, &mut i, pos, chunk, hint);
            if let Err((done, e, consistent)) = written {
                // The runs before the failing one landed: a short write.
                // Blocks this chunk mapped past the new EOF hold data no
                // size covers: unmap them (the kernel's truncate of a
                // failed write). The inode is written in any case: the
                // chunk may have changed its extent root.
                let landed = pos + done;
                if landed > pos && landed > i.size {
                    i.size = landed;
                }
                if landed > pos && !writeback {
                    let now = Timestamp::now();
                    i.mtime = now;
                    i.ctime = now;
                }
                let eof = i.size.div_ceil(bs);
                let end_blk = chunk_end.div_ceil(bs);
                if end_blk > eof {
                    ew::remove_range(&tx, &mut i, eof.max(pos / bs), end_blk)?;
                }
                tx.write_inode(&mut i)?;
                self.note_tid(&tx, &[ino]);
                if !consistent {
                    // The failing run stopped half-way through a metadata
                    // change: only ENOSPC stops cleanly there, anything
                    // else must not commit (see `Tx`).
                    tx.settle_unless_broken(Some(&e));
                }
                return if landed > offset { Ok((landed - offset) as usize) } else { Err(e) };
            }
            // The handle's credits may have ended the chunk early: the
            // rest goes on in the next handle.
            let chunk_end = pos + written.unwrap_or(0);
            if chunk_end > i.size {
                i.size = chunk_end;
            }
            if !writeback {
                // Writeback's data was timestamped when it was written.
                let now = Timestamp::now();
                i.mtime = now;
                i.ctime = now;
            }
            tx.write_inode(&mut i)?;
            self.note_tid(&tx, &[ino]);
            pos = chunk_end;
        }
        Ok(data.len())
    }

    /// Writes `data` at `offset` run by run, as far as the handle's
    /// credits allow (at least the first run): returns how many bytes of
    /// `data` were written. On an error, returns how many bytes landed
    /// (the runs before the failing one) with it.
    fn write_chunk(
        &self,
        tx: &Tx,
        i: &mut Inode,
        offset: u64,
        data: &[u8],
        hint: u64,
    ) -> std::result::Result<u64, (u64, Error, bool)> {
        let bs = self.vol.block_size as u64;
        let last = (offset + data.len() as u64 - 1) / bs;
        let mut lblk = offset / bs;
        while lblk <= last {
            let done = (lblk * bs).max(offset) - offset;
            if done > 0 && tx.handle.credits_left() < ew::alloc_step_credits(i) {
                return Ok(done);
            }
            lblk += self.write_run(tx, i, offset, data, lblk, last, hint).map_err(|(e, ok)| (done, e, ok))?;
        }
        Ok(data.len() as u64)
    }

    /// Writes the run of blocks starting at `lblk` (up to `last`) that one
    /// mapping covers (a hole: as much of it as the handle's credits
    /// allocate); returns its length in blocks. `hint` is the size
    /// the file is known to reach (writeback's in-memory size), or 0.
    ///
    /// An error comes with whether the run left the file consistent: a
    /// failed data write changes no metadata (blocks it had just
    /// allocated are unmapped again, so they never show stale contents),
    /// so the operation can end there and report it, as a failed
    /// writeback does on Linux, without aborting the journal.
    #[allow(clippy::too_many_arguments)]
    fn write_run(
        &self,
        tx: &Tx,
        i: &mut Inode,
        offset: u64,
        data: &[u8],
        lblk: u64,
        last: u64,
        hint: u64,
    ) -> std::result::Result<u64, (Error, bool)> {
        let bs = self.vol.block_size as u64;
        let dev = self.vol.device();
        let clean = |e: Error| (e, true);
        let m = inode::map_block(&self.vol, i, lblk).map_err(clean)?;
        let n = m.len.min(last - lblk + 1);
        let run_start = (lblk * bs).max(offset);
        let run_end = ((lblk + n) * bs).min(offset + data.len() as u64);
        let src = &data[(run_start - offset) as usize..(run_end - offset) as usize];
        match m.kind {
            MapKind::Mapped(p) => {
                dev.write_at(src, p * bs + (run_start - lblk * bs)).map_err(|e| clean(e.into()))?;
            }
            MapKind::Unwritten(p) => {
                write_padded(dev.as_ref(), p, lblk, n, bs, run_start, src).map_err(clean)?;
                ew::mark_written(tx, i, lblk, n).map_err(|e| (e, false))?;
            }
            MapKind::Hole => {
                let size_hint = i.size.max(offset + data.len() as u64).max(hint);
                let flags = if size_hint > 16 * bs { aflags::STREAM } else { aflags::SMALL_FILE };
                let runs = match ew::allocate_range(tx, i, lblk, n, false, flags, size_hint) {
                    Ok(runs) => runs,
                    Err(e) => {
                        // Blocks mapped before the failure hold whatever
                        // they held before: zero them (the hole's contents).
                        self.zero_partial(i, lblk * bs, (lblk + n) * bs).map_err(|e| (e, false))?;
                        return Err((e, false));
                    }
                };
                let mapped_end = runs.iter().map(|&(rl, _, rn)| rl + rn).max().unwrap_or(lblk);
                let mut covered = 0;
                for (rl, rp, rn) in runs {
                    let rs = (rl * bs).max(run_start);
                    let re = ((rl + rn) * bs).min(run_end);
                    let part = &data[(rs - offset) as usize..(re - offset) as usize];
                    if let Err(e) = write_padded(dev.as_ref(), rp, rl, rn, bs, rs, part) {
                        // Give the hole back rather than map blocks whose
                        // old contents anyone could then read.
                        let undone = ew::remove_range(tx, i, lblk, mapped_end).is_ok();
                        return Err((e, undone));
                    }
                    covered = rl + rn - lblk;
                }
                if covered == 0 {
                    return Err(clean(Error::Invalid(format!("inode {}: allocation mapped nothing", i.ino))));
                }
                return Ok(covered.min(n));
            }
        }
        Ok(n)
    }

    /// fallocate(2).
    pub fn fallocate(&self, ino: u32, mode: FallocMode, offset: u64, len: u64) -> Result<()> {
        if mode == FallocMode::PunchHole {
            return self.fallocate_once(ino, mode, offset, len);
        }
        // Allocating again fills only what is still a hole: safe to repeat.
        self.retry_nospc(|| self.fallocate_once(ino, mode, offset, len))
    }

    fn fallocate_once(&self, ino: u32, mode: FallocMode, offset: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Err(Error::Invalid("fallocate of length 0".into()));
        }
        // Only extent-mapped files can be fallocated (checked below).
        self.check_offset(offset, len, true)?;
        let rw = self.rw()?;
        let _l = rw.locks.lock_exclusive(&[], &[ino]);
        let st = rw.locks.inode(ino);
        if st.pages.is_dirty() {
            // fallocate works on the blocks: dirty data goes to them first.
            self.writeback_locked(&st, ino)?;
        }
        let mut i = self.load(ino)?;
        self.check_live(&i)?;
        if ftype(&i)? != FileType::Regular {
            return Err(Error::Invalid(format!("fallocate on inode {ino}, not a regular file")));
        }
        if i.flags & FL_EXTENTS == 0 {
            return Err(Error::Unsupported("fallocate on block-mapped (non-extent) files".into()));
        }
        let end = offset + len;
        // Punch and zero free blocks: no folio fill may read them meanwhile.
        let frees = matches!(mode, FallocMode::PunchHole | FallocMode::ZeroRange);
        let _inv = frees.then(|| st.invalidate.write());
        if frees {
            let _m = st.map.write();
            st.pages.invalidate(offset, end);
        }
        let bs = self.vol.block_size as u64;
        // Whole blocks inside a punched or zeroed range go; partial edges
        // are zeroed.
        let (b0, b1) = (offset.div_ceil(bs), end / bs);
        if frees {
            if b0 > b1 {
                // Strictly inside one block.
                self.zero_partial(&i, offset, end)?;
            } else {
                self.zero_partial(&i, offset, b0 * bs)?;
                self.zero_partial(&i, b1 * bs, end)?;
            }
        }
        // Each phase runs in as many bounded handles as it needs; the
        // file is consistent (and its size unchanged) between them. On an
        // error (ENOSPC part-way) what was done stays, as in Linux; the
        // inode is written in any case (its extent root may have changed).
        let alloc = |tx: &Tx, i: &mut Inode, from: u64, to: u64, hint: u64| -> Result<bool> {
            ew::allocate_range(tx, i, from, to - from, true, aflags::STREAM, hint)?;
            Ok(tx.handle.credits_left() >= ew::alloc_step_credits(i))
        };
        match mode {
            FallocMode::Allocate | FallocMode::KeepSize => {
                self.in_bounded_handles(&st, &mut i, |tx, i| alloc(tx, i, offset / bs, end.div_ceil(bs), end))?;
            }
            FallocMode::PunchHole | FallocMode::ZeroRange if b1 > b0 => {
                self.in_bounded_handles(&st, &mut i, |tx, i| ew::remove_range_bounded(tx, i, b0, b1))?;
                if mode == FallocMode::ZeroRange {
                    let hint = i.size.max(end);
                    self.in_bounded_handles(&st, &mut i, |tx, i| alloc(tx, i, b0, b1, hint))?;
                }
            }
            _ => {}
        }
        let grows = matches!(mode, FallocMode::Allocate | FallocMode::ZeroRange) && end > i.size;
        let tx = self.begin(1)?;
        let _m = st.map.write();
        if grows {
            i.size = end;
        }
        let now = Timestamp::now();
        i.ctime = now;
        i.mtime = now;
        tx.write_inode(&mut i)?;
        self.note_tid(&tx, &[ino]);
        Ok(())
    }

    /// Runs `step` in handles of 256 credits, with the mapping lock, until
    /// it says it is done; the inode is written at the end of each handle
    /// (also when the step fails).
    fn in_bounded_handles(
        &self,
        st: &crate::locks::InodeIo,
        i: &mut Inode,
        mut step: impl FnMut(&Tx, &mut Inode) -> Result<bool>,
    ) -> Result<()> {
        loop {
            let tx = self.begin(256)?;
            let _m = st.map.write();
            let r = step(&tx, i);
            tx.write_inode(i)?;
            self.note_tid(&tx, &[i.ino]);
            // ENOSPC part-way leaves a consistent file (what was done
            // stays, as in Linux); any other failure aborts (see `Tx`).
            tx.settle_unless_broken(r.as_ref().err());
            match r {
                Ok(true) => return Ok(()),
                Ok(false) if tx.handle.credits_left() == tx.handle.credits() => {
                    return Err(Error::Invalid(format!("inode {}: a step does not fit in a handle", i.ino)));
                }
                Ok(false) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes zeros over the written blocks of `[from, to)` (partial-block
    /// edges of a punch or zero range).
    fn zero_partial(&self, i: &Inode, from: u64, to: u64) -> Result<()> {
        let bs = self.vol.block_size as u64;
        let mut pos = from;
        while pos < to {
            let lblk = pos / bs;
            let m = inode::map_block(&self.vol, i, lblk)?;
            let run_end = ((lblk + m.len) * bs).min(to);
            if let MapKind::Mapped(p) = m.kind {
                let zeros = vec![0u8; (run_end - pos) as usize];
                self.vol.device().write_at(&zeros, p * bs + (pos - lblk * bs))?;
            }
            pos = run_end;
        }
        Ok(())
    }

    /// fsync(2)/fdatasync(2): writes back the file's dirty data, then
    /// commits the transaction that last changed `ino` unless it has
    /// committed already (a device flush otherwise).
    ///
    /// EIO at once, before any device I/O, once the journal has aborted.
    /// A writeback error of the file that happened earlier (in the
    /// background, or in a flush of other files' data) and that no fsync
    /// of `ino` has reported yet is reported now, once; see
    /// [`FsCore::fsync_file`] for per-open-file reporting.
    pub fn fsync(&self, ino: u32) -> Result<()> {
        let rw = self.rw()?;
        let r = self.fsync_inner(ino);
        if r.is_err() {
            // The caller got it: the same error is not reported twice.
            rw.errs.advance_anon(ino);
            return r;
        }
        rw.errs.check_and_advance(ino, None)
    }

    /// [`FsCore::fsync`] without the report of earlier errors.
    pub(crate) fn fsync_inner(&self, ino: u32) -> Result<()> {
        let rw = self.rw()?;
        self.check_not_aborted_io()?;
        if rw.locks.inode(ino).pages.is_dirty() {
            self.writeback_inode(ino)?;
        }
        match rw.dirty_tid(ino) {
            Some(tid) => self.commit_tid(tid),
            None => Ok(self.vol.device().flush()?),
        }
    }
}

/// Writes `src` (which starts at byte `start` of the file) into the new or
/// unwritten blocks `lblk..lblk+n` at physical `p..`, zero-filling the
/// parts of those blocks `src` does not cover.
fn write_padded(
    dev: &dyn crate::device::BlockDevice,
    p: u64,
    lblk: u64,
    n: u64,
    bs: u64,
    start: u64,
    src: &[u8],
) -> Result<()> {
    let run0 = lblk * bs;
    let head = start - run0;
    let tail = (n * bs).saturating_sub(head + src.len() as u64);
    if head == 0 && tail == 0 {
        dev.write_at(src, p * bs)?;
        return Ok(());
    }
    // Zero only the partial blocks at the edges; whole blocks come from src.
    let covered_first = head / bs;
    let covered_last = (head + src.len() as u64).div_ceil(bs);
    let mut buf = vec![0u8; ((covered_last - covered_first) * bs) as usize];
    let off = (head - covered_first * bs) as usize;
    buf[off..off + src.len()].copy_from_slice(src);
    dev.write_at(&buf, (p + covered_first) * bs)?;
    // Blocks of the run wholly outside src (allocation rounding) are zeroed.
    if covered_first > 0 {
        dev.write_at(&vec![0u8; (covered_first * bs) as usize], p * bs)?;
    }
    if covered_last < n {
        dev.write_at(&vec![0u8; ((n - covered_last) * bs) as usize], (p + covered_last) * bs)?;
    }
    Ok(())
}

fn touch_dir(d: &mut Inode) {
    let now = Timestamp::now();
    d.mtime = now;
    d.ctime = now;
}

fn lossy(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// Stores a device number in i_block as the kernel does (old format when
/// it fits, else the new one in the second word).
fn set_rdev(i: &mut Inode, (major, minor): (u32, u32)) {
    i.block = [0; I_BLOCK_SIZE];
    if major < 256 && minor < 256 {
        let old = ((major << 8) | minor) as u16;
        i.block[0..2].copy_from_slice(&old.to_le_bytes());
    } else {
        let new = (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12);
        i.block[4..8].copy_from_slice(&new.to_le_bytes());
    }
}
