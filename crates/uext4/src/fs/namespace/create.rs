//! Creating inodes and names: mknod, create, mkdir, symlink, link.

use super::setid::Owner;
use super::{check_name, flags, ftype, is_dot, lossy, touch_dir, LINK_MAX};
use crate::alloc::flags as aflags;
use crate::dir::write as dw;
use crate::error::{Error, Result};
use crate::format::block_number::FileBlock;
use crate::format::dirent::file_type_of;
use crate::format::features::incompat;
use crate::format::inode::{
    FileType, Inode, Timestamp, FL_CASEFOLD, FL_EXTENTS, I_BLOCK_SIZE, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG,
};
use crate::fs::{FsCore, Stat};
use crate::inode::extent_write as ew;

impl FsCore {
    /// Creates a node (regular file, device, fifo, socket) in `parent`,
    /// owned by `uid`/`gid` with exactly `mode` (no set-id rules, no ACL
    /// inheritance: see [`FsCore::mknod_as`] for a caller's create).
    pub fn mknod(&self, parent: u32, name: &[u8], mode: u16, rdev: (u32, u32), uid: u32, gid: u32) -> Result<Stat> {
        self.namespace_synced(
            &[parent],
            self.retry_nospc(|| self.mknod_once(parent, name, mode, rdev, Owner::Exact { uid, gid })),
        )
    }

    pub(super) fn mknod_once(
        &self,
        parent: u32,
        name: &[u8],
        mode: u16,
        rdev: (u32, u32),
        owner: Owner<'_>,
    ) -> Result<Stat> {
        check_name(name)?;
        let t = mode & S_IFMT;
        let t = if t == 0 { S_IFREG } else { t };
        if t == S_IFDIR || t == S_IFLNK {
            return Err(Error::Invalid("mknod of a directory or symlink".into()));
        }
        let mode = t | (mode & 0o7777);
        let (_l, mut dir, room) = self.lock_for_new_entry(parent, name)?;
        let init = self.init_owner(&dir, mode, owner)?;
        let tx = self.begin(32 + init.credits())?;
        let mut i = self.new_inode(&tx, parent, init.mode, init.uid, init.gid)?;
        i.links_count = 1;
        if t != S_IFREG {
            i.flags &= !FL_EXTENTS;
            i.block = [0; I_BLOCK_SIZE];
            set_rdev(&mut i, rdev);
        }
        let added = init
            .store_acls(&tx, &mut i)
            .and_then(|()| tx.write_inode(&mut i))
            .and_then(|()| dw::add_entry_at(&tx, &mut dir, name, i.ino, file_type_of(mode), room));
        if added.is_ok() && t == S_IFREG {
            self.seed_data_state(&i);
        }
        self.finish_new_entry(tx, &mut dir, &mut i, added)
    }

    /// Gives a new regular file's data-path state what its inode says, so
    /// that the first write neither reads the inode back for its flags nor
    /// starts a handle to set the mtime and ctime the create just set (a
    /// create-then-write would otherwise take two handles, and the FUSE
    /// CREATE + WRITE pair does exactly that). Called while the parent's
    /// I/O lock still hides the new name: no `set_flags` of the inode can
    /// come in between and be overwritten with these older flags. The
    /// state of a number's previous user, if its entry lingers, is
    /// replaced too.
    fn seed_data_state(&self, i: &Inode) {
        if let Ok(rw) = self.rw() {
            let st = rw.data.inode(i.ino);
            st.data.flags.set(i.flags);
            st.data.time_sec.store(i.mtime.sec.min(i.ctime.sec), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Locks directory `parent` for adding `name` and returns it, loaded
    /// under the lock, with where the entry goes; EEXIST if `name` is
    /// there (or is "." / ".."). The lock is held until the entry is
    /// added where the search found room (decided and done under one
    /// lock: no other change of the directory comes in between).
    fn lock_for_new_entry(&self, parent: u32, name: &[u8]) -> Result<(crate::locks::Locked, Inode, dw::Room)> {
        let rw = self.rw()?;
        let l = rw.data.locks().lock_exclusive(&[parent], &[]);
        let dir = self.load_dir(parent)?;
        Self::check_dir_addable(&dir)?;
        let room = self.room_for_new_entry(&l, parent, &dir, name)?;
        // Before the handle: a refused name must leave nothing half done.
        dw::check_encoding(&self.vol, &dir, name)?;
        Ok((l, dir, room))
    }

    /// Where entry `name` goes in directory `dir` (inode `parent`, locked
    /// exclusively by `l`), EEXIST if it is there: the answer of the
    /// lookup that just found it absent if the directory has not changed
    /// since (see `absent`), else the search. The duplicate check is the
    /// search for room: one walk of the leaf for both.
    fn room_for_new_entry(&self, l: &crate::locks::Locked, parent: u32, dir: &Inode, name: &[u8]) -> Result<dw::Room> {
        let rw = self.rw()?;
        if let Some(room) = l.stamp(parent).and_then(|now| rw.ns.absent.take(parent, name, &now)) {
            return Ok(room);
        }
        dw::find_room(&self.vol, dir, name)
    }

    /// Creates a regular file (exact owner and mode, as [`FsCore::mknod`]):
    /// for tools that copy owners and modes as they are. A front end that
    /// creates on behalf of a caller uses [`FsCore::create_as`], which
    /// applies the umask, set-group-ID directories and default ACLs.
    pub fn create(&self, parent: u32, name: &[u8], mode: u16, uid: u32, gid: u32) -> Result<Stat> {
        self.mknod(parent, name, S_IFREG | (mode & 0o7777), (0, 0), uid, gid)
    }

    /// Creates an unnamed regular file near directory `parent`
    /// (`open(dir, O_TMPFILE)`): an inode with no links, on the orphan
    /// list, with one open handle counted (see [`FsCore::open_inode`]).
    /// [`FsCore::link`] gives it a name (and takes it off the orphan
    /// list); otherwise the last [`FsCore::close_inode`] deletes it, and
    /// so does the next open after a crash.
    pub fn tmpfile(&self, parent: u32, mode: u16, uid: u32, gid: u32) -> Result<Stat> {
        self.retry_nospc(|| self.tmpfile_once(parent, mode, Owner::Exact { uid, gid }))
    }

    pub(super) fn tmpfile_once(&self, parent: u32, mode: u16, owner: Owner<'_>) -> Result<Stat> {
        let rw = self.rw()?;
        let _l = rw.data.locks().lock_exclusive(&[parent], &[]);
        let dir = self.load_dir(parent)?;
        Self::check_dir_addable(&dir)?;
        // ext4_tmpfile makes the inode as a create does: the directory's
        // set-group-ID and default ACL apply (inode_init_owner, ext4_init_acl).
        let init = self.init_owner(&dir, S_IFREG | (mode & 0o7777), owner)?;
        let tx = self.begin(32 + init.credits())?;
        let mut i = self.new_inode(&tx, parent, init.mode, init.uid, init.gid)?;
        i.links_count = 0;
        let added = init.store_acls(&tx, &mut i).and_then(|()| self.orphan_add(&tx, &mut i));
        if let Err(e) = added {
            self.release_inode(&tx, &mut i)?;
            return Err(e);
        }
        rw.open.open_tmpfile(i.ino);
        self.note_tid(&tx, &[i.ino]);
        drop(tx);
        self.stat(i.ino)
    }

    /// Creates a directory (exact owner and mode, as [`FsCore::mknod`]);
    /// [`FsCore::mkdir_as`] creates one for a caller, as mkdir(2) would.
    pub fn mkdir(&self, parent: u32, name: &[u8], mode: u16, uid: u32, gid: u32) -> Result<Stat> {
        self.namespace_synced(
            &[parent],
            self.retry_nospc(|| self.mkdir_once(parent, name, mode, Owner::Exact { uid, gid })),
        )
    }

    pub(super) fn mkdir_once(&self, parent: u32, name: &[u8], mode: u16, owner: Owner<'_>) -> Result<Stat> {
        check_name(name)?;
        let (_l, mut dir, room) = self.lock_for_new_entry(parent, name)?;
        let init = self.init_owner(&dir, S_IFDIR | (mode & 0o7777), owner)?;
        let tx = self.begin(48 + init.credits())?;
        let mut d = self.new_inode(&tx, parent, init.mode, init.uid, init.gid)?;
        d.links_count = 2;
        // Subdirectories of a casefolded directory are casefolded (the
        // kernel's inherited flags; only directories take this one).
        d.flags |= dir.flags & FL_CASEFOLD;
        let added = (|| {
            // On inline_data filesystems a new directory starts inline, as
            // the kernel makes it (when the inode has room for it).
            let features = &self.vol.sb.features;
            let inline = features.has_incompat(incompat::INLINE_DATA)
                && match crate::inode::inline::init_dir(&mut d, parent, features.has_incompat(incompat::FILETYPE)) {
                    Ok(()) => true,
                    Err(Error::NoSpace(_)) => false,
                    Err(e) => return Err(e),
                };
            if !inline {
                let runs = ew::allocate_range(&tx, &mut d, FileBlock(0), 1, false, aflags::METADATA, 0)?;
                let &(_, pblk, _) = runs.first().ok_or_else(|| Error::NoSpace("no block for the directory".into()))?;
                dw::init_dir_block(&tx, &mut d, pblk, parent)?;
            }
            init.store_acls(&tx, &mut d)?;
            tx.write_inode(&mut d)?;
            dw::add_entry_at(&tx, &mut dir, name, d.ino, file_type_of(S_IFDIR), room)
        })();
        self.finish_new_entry(tx, &mut dir, &mut d, added)
    }

    /// Creates a symbolic link (fast when the target fits in the inode),
    /// owned by exactly `uid`/`gid`.
    pub fn symlink(&self, parent: u32, name: &[u8], target: &[u8], uid: u32, gid: u32) -> Result<Stat> {
        self.namespace_synced(
            &[parent],
            self.retry_nospc(|| self.symlink_once(parent, name, target, Owner::Exact { uid, gid })),
        )
    }

    pub(super) fn symlink_once(&self, parent: u32, name: &[u8], target: &[u8], owner: Owner<'_>) -> Result<Stat> {
        check_name(name)?;
        if target.is_empty() || target.contains(&0) {
            return Err(Error::Invalid("empty symlink target".into()));
        }
        if target.len() >= self.vol.block_size.min(4096) {
            return Err(Error::NameTooLong("symlink target".into()));
        }
        let (_l, mut dir, room) = self.lock_for_new_entry(parent, name)?;
        let init = self.init_owner(&dir, S_IFLNK | 0o777, owner)?;
        let tx = self.begin(40)?;
        let mut i = self.new_inode(&tx, parent, init.mode, init.uid, init.gid)?;
        i.links_count = 1;
        i.size = target.len() as u64;
        let added = (|| {
            if target.len() < I_BLOCK_SIZE {
                i.block = [0; I_BLOCK_SIZE];
                i.block[..target.len()].copy_from_slice(target);
            } else {
                ew::init_map(&self.vol.sb, &mut i);
                let size = i.size;
                let runs = ew::allocate_range(&tx, &mut i, FileBlock(0), 1, false, aflags::SMALL_FILE, size)?;
                let &(_, pblk, _) = runs.first().ok_or_else(|| Error::NoSpace("no block for the symlink".into()))?;
                let mut buf = vec![0u8; self.vol.block_size];
                buf[..target.len()].copy_from_slice(target);
                self.vol.device().write_at(&buf, pblk.byte_offset(self.vol.block_size as u64))?;
            }
            tx.write_inode(&mut i)?;
            dw::add_entry_at(&tx, &mut dir, name, i.ino, file_type_of(S_IFLNK), room)
        })();
        self.finish_new_entry(tx, &mut dir, &mut i, added)
    }

    /// Adds a hard link `newparent/newname` to `ino` (link(2) by inode
    /// number; the path-based form is
    /// [`Filesystem::hard_link`](crate::Filesystem::hard_link)).
    pub fn link(&self, ino: u32, newparent: u32, newname: &[u8]) -> Result<Stat> {
        // Growing the directory may need blocks a pending free holds.
        self.namespace_synced(&[newparent], self.retry_nospc(|| self.link_once(ino, newparent, newname)))
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
        let l = rw.data.locks().lock_exclusive(&[newparent], &[ino]);
        let mut dir = self.load_dir(newparent)?;
        let mut i = self.load(ino)?;
        if ftype(&i)? == FileType::Directory {
            return Err(Error::NotPermitted("hard link to a directory".into()));
        }
        // An open tmpfile may get its first name; any other inode with no
        // links is gone (ENOENT, as linkat of an unlinked open file).
        let tmpfile = i.links_count == 0 && rw.open.is_linkable(ino);
        if i.links_count == 0 && !tmpfile {
            return Err(Error::NotFound(format!("inode {ino} was removed")));
        }
        // vfs_link: no new name for an immutable or append-only inode,
        // none in an immutable directory.
        flags::check_unpinned(&i)?;
        Self::check_dir_addable(&dir)?;
        if i.links_count >= LINK_MAX {
            return Err(Error::TooManyLinks(format!("inode {ino}")));
        }
        crate::fs::quota_ops::check_project_link(&dir, &i)?;
        let room = self.room_for_new_entry(&l, newparent, &dir, newname)?;
        dw::check_encoding(&self.vol, &dir, newname)?;
        // The tmpfile's orphan-list exit: the superblock or the orphan
        // file's block and the previous orphan's inode.
        let tx = self.begin(if tmpfile { 32 } else { 24 })?;
        i.links_count += 1;
        i.ctime = Timestamp::now();
        tx.write_inode(&mut i)?;
        if let Err(e) = dw::add_entry_at(&tx, &mut dir, newname, ino, file_type_of(i.mode), room) {
            // No new name (e.g. ENOSPC growing the directory): no new link.
            i.links_count -= 1;
            tx.write_inode(&mut i)?;
            if matches!(e, Error::NoSpace(_) | Error::QuotaExceeded(_)) {
                self.keep_grown_dir(&tx, &mut dir)?;
            }
            return Err(e);
        }
        if tmpfile {
            self.orphan_remove(&tx, ino)?;
            i.dtime = 0;
            tx.write_inode_dtime(&mut i)?;
            rw.open.linked(ino);
        }
        touch_dir(&mut dir);
        tx.write_inode(&mut dir)?;
        self.note_tid(&tx, &[newparent, ino]);
        drop(tx);
        self.stat(ino)
    }
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
