//! Extended attribute writes (setxattr/removexattr) on a filesystem opened
//! read-write.
//!
//! The checks the kernel makes above ext4 (the VFS's name and size
//! limits, `xattr_permission`'s file-type rule for `user.`, immutable and
//! append-only inodes, the POSIX ACL conversion and validation, the mode
//! update of an access ACL) are made here, because a FUSE front end
//! receives the raw request and the library is the filesystem. What needs
//! the caller's credentials (owner checks, CAP_SYS_ADMIN for `trusted.`,
//! clearing setgid after an ACL change) is the front end's business.
//!
//! Placement, copy-on-write of shared blocks and the encoders live in
//! [`crate::xattr::write`] and [`crate::format::xattr`].

use super::FsCore;
use crate::error::{Error, Result};
use crate::format::inode::{FileType, Inode, Timestamp};
use crate::format::xattr::{
    acl_equiv_mode, acl_from_xattr, acl_to_disk, AclEntry, INDEX_POSIX_ACL_ACCESS, INDEX_POSIX_ACL_DEFAULT, INDEX_USER,
    VALUE_MAX,
};
use crate::xattr;
use crate::xattr::write::{self as xw, Presence};

/// Journal credits of one attribute change: the inode's table block, the
/// old and the new xattr block, a block bitmap and descriptor per
/// allocation or free, and the superblock.
const XATTR_CREDITS: usize = 16;

/// How [`FsCore::set_xattr`](crate::fs::FsCore::set_xattr) treats an existing attribute
/// (setxattr(2)'s flags): `Create` or `Replace` when the caller must know
/// whether the name existed, `Any` otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum XattrSetMode {
    /// Create the attribute or replace its value (flags 0).
    #[default]
    Any,
    /// Fail with EEXIST if it exists (XATTR_CREATE).
    Create,
    /// Fail with ENODATA if it does not exist (XATTR_REPLACE).
    Replace,
}

impl XattrSetMode {
    fn presence(self) -> Presence {
        match self {
            XattrSetMode::Any => Presence::Any,
            XattrSetMode::Create => Presence::Absent,
            XattrSetMode::Replace => Presence::Present,
        }
    }
}

fn is_acl(index: u8) -> bool {
    index == INDEX_POSIX_ACL_ACCESS || index == INDEX_POSIX_ACL_DEFAULT
}

/// The VFS's and ext4's refusals that depend on the inode alone.
fn check_writable(i: &Inode, index: u8) -> Result<()> {
    super::namespace::flags::check_unpinned(i)?;
    let t = i.file_type()?;
    // xattr_permission: user.* only on regular files and directories.
    if index == INDEX_USER && !matches!(t, FileType::Regular | FileType::Directory) {
        return Err(Error::NotPermitted(format!("user.* attributes on inode {} ({t:?})", i.ino)));
    }
    // Symlinks have no ACL operations in ext4.
    if is_acl(index) && t == FileType::Symlink {
        return Err(Error::Unsupported(format!("POSIX ACLs on symlink inode {}", i.ino)));
    }
    Ok(())
}

impl FsCore {
    /// Names of the extended attributes of `ino`, every namespace
    /// included (a front end hides what its caller may not see, as
    /// `trusted.` from non-root).
    pub fn list_xattrs(&self, ino: u32) -> Result<Vec<Vec<u8>>> {
        let _s = self.rw().ok().map(|rw| rw.data.locks().lock_shared(ino));
        let i = self.inode(ino)?;
        Ok(xattr::list(&self.vol, &i)?.into_iter().map(|e| e.name).collect())
    }

    /// The value of extended attribute `name` of `ino` (read from its EA
    /// inode when it has one).
    pub fn get_xattr(&self, ino: u32, name: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        // Read-write, under the inode's lock shared: a change of its
        // attributes may free the EA inode or block the entries name.
        let _s = self.rw().ok().map(|rw| rw.data.locks().lock_shared(ino));
        let i = self.inode(ino)?;
        xattr::get(&self.vol, &i, name.as_ref())
    }

    /// Sets extended attribute `name` (full name: `user.`, `trusted.`,
    /// `security.` prefixes, or `system.posix_acl_access` /
    /// `system.posix_acl_default`) of inode `ino` to `value`, as
    /// setxattr(2) on ext4 does.
    ///
    /// The value goes into the inode's extra space when it fits, else into
    /// the xattr block (allocated, or copied first when other inodes
    /// share it); with the ea_inode feature a value larger than a block
    /// takes, or fitting neither, goes into an EA inode of its own (up
    /// to 64 KiB). ctime changes unless the attribute already had this
    /// value.
    ///
    /// POSIX ACLs are given in the form getxattr(2) returns
    /// (`posix_acl_xattr`, version 2) and stored in ext4's compact form.
    /// As in the kernel, `mode` is ignored for them, an access ACL also
    /// sets the permission bits (and is not stored when the bits say it
    /// all), an empty ACL removes it, and a default ACL is only for
    /// directories.
    ///
    /// Errors: ERANGE (name empty or over 255 bytes), EOPNOTSUPP (unknown
    /// namespace, `system.data`, ACL on a symlink), EINVAL (nothing after
    /// the prefix, malformed ACL), ENOSPC (value larger than 64 KiB or
    /// fitting neither in the inode nor in one block, without ea_inode;
    /// no blocks or inodes left),
    /// EEXIST / ENODATA per `mode`, EPERM (`user.` on a special file or
    /// symlink, immutable or append-only inode), EACCES (default ACL on a
    /// non-directory), EROFS (read-only open).
    pub fn set_xattr(&self, ino: u32, name: &[u8], value: &[u8], mode: XattrSetMode) -> Result<()> {
        let (index, suffix) = xw::resolve_name(name)?;
        if value.len() > VALUE_MAX {
            // The VFS says E2BIG; the error type has no such variant and
            // ext4 itself answers ENOSPC for values that do not fit.
            return Err(Error::NoSpace(format!("xattr value of {} bytes (at most {VALUE_MAX})", value.len())));
        }
        let acl = if is_acl(index) { Some(acl_from_xattr(value)?) } else { None };
        // An xattr block may need blocks a pending free holds.
        let r = self.retry_nospc(|| {
            let rw = self.rw()?;
            let _l = rw.data.locks().lock_exclusive(&[], &[ino]);
            let mut i = self.inode(ino)?;
            self.check_live(&i)?;
            check_writable(&i, index)?;
            match &acl {
                None => self.xattr_change(&mut i, index, suffix, Some(value), mode.presence(), false),
                Some(acl) => self.set_acl(&mut i, index, acl.clone()),
            }
        });
        // A sync mount: durable on return (ext4_xattr_set's IS_SYNC).
        self.attrs_synced(ino, r)
    }

    /// Removes extended attribute `name` of inode `ino`, as removexattr(2)
    /// on ext4: ENODATA if it does not exist (a missing POSIX ACL is not
    /// an error, as in the kernel), ctime changes otherwise. The xattr
    /// block is freed (or its reference dropped) when it becomes empty.
    /// Name and permission errors as [`FsCore::set_xattr`](crate::fs::FsCore::set_xattr).
    pub fn remove_xattr(&self, ino: u32, name: &[u8]) -> Result<()> {
        self.attrs_synced(ino, self.remove_xattr_inner(ino, name))
    }

    fn remove_xattr_inner(&self, ino: u32, name: &[u8]) -> Result<()> {
        let (index, suffix) = xw::resolve_name(name)?;
        let rw = self.rw()?;
        let _l = rw.data.locks().lock_exclusive(&[], &[ino]);
        let mut i = self.inode(ino)?;
        self.check_live(&i)?;
        check_writable(&i, index)?;
        if is_acl(index) {
            // Removing an ACL is setting none (set_posix_acl with NULL):
            // no error when there is none; a non-directory has no default
            // ACL to remove.
            if index == INDEX_POSIX_ACL_DEFAULT && i.file_type()? != FileType::Directory {
                return Ok(());
            }
            return self.xattr_change(&mut i, index, suffix, None, Presence::Any, false);
        }
        self.xattr_change(&mut i, index, suffix, None, Presence::Present, false)
    }

    /// ext4_set_acl: validates the ACL against the inode and stores it in
    /// the compact form, updating the mode for an access ACL.
    fn set_acl(&self, i: &mut Inode, index: u8, acl: Option<Vec<AclEntry>>) -> Result<()> {
        let is_dir = i.file_type()? == FileType::Directory;
        if index == INDEX_POSIX_ACL_DEFAULT && !is_dir {
            return match acl {
                Some(_) => Err(Error::AccessDenied(format!("default ACL on non-directory inode {}", i.ino))),
                None => Ok(()),
            };
        }
        let mut stored = acl;
        let mut mode_changed = false;
        if index == INDEX_POSIX_ACL_ACCESS {
            if let Some(a) = &stored {
                let (mode, not_equiv) = acl_equiv_mode(a, i.mode);
                mode_changed = mode != i.mode;
                i.mode = mode;
                if !not_equiv {
                    // The permission bits express it: nothing to store.
                    stored = None;
                }
            }
        }
        let disk = stored.as_deref().map(acl_to_disk);
        // The kernel ignores XATTR_CREATE/XATTR_REPLACE for ACLs.
        self.xattr_change(i, index, b"", disk.as_deref(), Presence::Any, mode_changed)
    }

    /// One journaled attribute change of `i` (already loaded under its
    /// lock). `dirty`: `i` has other changes to write even if the
    /// attributes stay as they are.
    fn xattr_change(
        &self,
        i: &mut Inode,
        index: u8,
        name: &[u8],
        value: Option<&[u8]>,
        presence: Presence,
        dirty: bool,
    ) -> Result<()> {
        let tx = self.begin(xw::credits(&self.vol, i, value.map_or(0, <[u8]>::len)).max(XATTR_CREDITS))?;
        let changed = match xw::set(&tx, i, index, name, value, presence) {
            Ok(c) => c,
            Err(e) => {
                // ENOSPC gave back whatever it had taken (an EA inode):
                // the handle is consistent, and the caller may retry.
                if matches!(e, Error::NoSpace(_)) {
                    tx.settle();
                }
                return Err(e);
            }
        };
        if changed || dirty {
            i.ctime = Timestamp::now();
            tx.write_inode(i)?;
            // fsync of the inode must commit this transaction.
            if let Ok(rw) = self.rw() {
                rw.txns.note_dirty(&[i.ino], tx.tid());
            }
        }
        tx.settle();
        Ok(())
    }
}
