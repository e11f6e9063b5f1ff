//! Set-id rules and POSIX ACL inheritance: what the kernel's VFS and ext4
//! do to the mode, group and ACLs of an inode when a caller creates it,
//! writes or truncates it, changes its owner or its mode.
//!
//! They live in the engine, not in a front end, so that every user of the
//! library gets them: the rules that depend on who asks take a [`Cred`]
//! (the `*_as` creation methods, [`FsCore::setattr_as`] for chown,
//! chmod and truncate, [`FsCore::remove_privs`] for writes); the ones
//! that do not (chmod updating an access ACL) are part of
//! [`FsCore::setattr`] too, which without a caller clears on chown what
//! the kernel clears for root. The plain creation methods
//! ([`FsCore::create`] and the others taking `uid, gid`) stay exact: they
//! make the inode with the given owner and mode, as a restore tool wants.

use crate::error::Result;
use crate::format::inode::{Inode, Timestamp, S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};
use crate::format::xattr::{
    acl_from_xattr, acl_to_disk, acl_to_xattr, AclEntry, ACL_GROUP, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER, ACL_USER,
    ACL_USER_OBJ, INDEX_POSIX_ACL_ACCESS, INDEX_POSIX_ACL_DEFAULT,
};
use crate::fs::{FsCore, Stat};
use crate::txn::Tx;
use crate::xattr::write::{self as xw, Presence};

/// Set-user-ID bit.
pub const S_ISUID: u16 = 0o4000;
/// Set-group-ID bit.
pub const S_ISGID: u16 = 0o2000;
const S_IXGRP: u16 = 0o010;

/// Who performs an operation, as far as the set-id rules need it: the
/// filesystem ids, the supplementary groups and whether the caller has
/// CAP_FSETID (which keeps the set-id bits on a write and lets a caller
/// create set-group-ID files in a group it is not in).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cred {
    /// Filesystem user id (owner of what the caller creates).
    pub uid: u32,
    /// Filesystem group id.
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// The caller holds CAP_FSETID.
    pub cap_fsetid: bool,
}

impl Cred {
    /// Root: uid and gid 0, with CAP_FSETID.
    pub fn root() -> Cred {
        Cred { uid: 0, gid: 0, groups: Vec::new(), cap_fsetid: true }
    }

    /// An ordinary caller (CAP_FSETID only for uid 0, as a process that
    /// did not drop its capabilities has it).
    pub fn user(uid: u32, gid: u32, groups: Vec<u32>) -> Cred {
        Cred { uid, gid, groups, cap_fsetid: uid == 0 }
    }

    /// The caller's group or one of its supplementary groups is `gid`.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }

    /// in_group_or_capable with CAP_FSETID.
    pub(crate) fn in_group_or_capable(&self, gid: u32) -> bool {
        self.cap_fsetid || self.in_group(gid)
    }
}

/// The set-id bits a write, a truncate or a chown removes from `mode`
/// (should_remove_suid): set-user-ID always, set-group-ID only with
/// group-execute (without it the bit marks mandatory locking, not a
/// set-group-ID program). Only regular files lose them.
pub fn privs_to_kill(mode: u16) -> u16 {
    if mode & S_IFMT != S_IFREG {
        return 0;
    }
    let mut kill = mode & S_ISUID;
    if mode & (S_ISGID | S_IXGRP) == S_ISGID | S_IXGRP {
        kill |= S_ISGID;
    }
    kill
}

/// The set-id bits a write or truncate by `cred` removes from a file of
/// `mode` and group `gid` (should_remove_suid with setattr_should_drop_sgid):
/// [`privs_to_kill`], and set-group-ID without group-execute too when the
/// caller is not in the file's group; nothing for a caller with CAP_FSETID.
pub fn kill_for(mode: u16, gid: u32, cred: &Cred) -> u16 {
    if cred.cap_fsetid || mode & S_IFMT != S_IFREG {
        return 0;
    }
    let mut kill = privs_to_kill(mode);
    if mode & S_ISGID != 0 && !cred.in_group(gid) {
        kill |= S_ISGID;
    }
    kill
}

/// The set-id bits a change of owner or group (chown, also with both
/// ids -1) by `cred` removes from a file of `mode` in group `gid`, going
/// to group `new_gid` (notify_change with ATTR_KILL_SUID|ATTR_KILL_SGID,
/// then setattr_prepare): set-user-ID always, even root's; set-group-ID
/// with group-execute, or when the caller is neither in the file's group
/// nor has CAP_FSETID (setattr_should_drop_sgid) — or, once a bit goes,
/// not in the new group. Only non-directories; the others lose nothing.
pub fn chown_kill(mode: u16, gid: u32, new_gid: u32, cred: &Cred) -> u16 {
    if mode & S_IFMT == S_IFDIR {
        return 0;
    }
    let mut kill = mode & S_ISUID;
    if mode & S_ISGID != 0 && (mode & S_IXGRP != 0 || !cred.in_group_or_capable(gid)) {
        kill |= S_ISGID;
    }
    if kill != 0 && !cred.in_group_or_capable(new_gid) {
        // The mode is now part of the change: setattr_prepare's rule.
        kill |= mode & S_ISGID;
    }
    kill
}

/// What a new inode gets from its caller and its parent directory.
pub(super) struct Init {
    /// Type and permission bits.
    pub mode: u16,
    pub uid: u32,
    pub gid: u32,
    /// ext4 form of the access ACL to store, if the mode does not say it all.
    pub access: Option<Vec<u8>>,
    /// ext4 form of the default ACL (directories under a default ACL).
    pub default: Option<Vec<u8>>,
}

impl Init {
    /// Extra journal credits the ACLs may need (an xattr block).
    pub fn credits(&self) -> usize {
        if self.access.is_some() || self.default.is_some() {
            16
        } else {
            0
        }
    }

    /// Stores the inherited ACLs in `i` (before it is first written).
    pub(crate) fn store_acls(&self, tx: &Tx, i: &mut Inode) -> Result<()> {
        for (index, v) in [(INDEX_POSIX_ACL_ACCESS, &self.access), (INDEX_POSIX_ACL_DEFAULT, &self.default)] {
            if let Some(v) = v {
                xw::set(tx, i, index, b"", Some(v), Presence::Any)?;
            }
        }
        Ok(())
    }
}

/// Who owns a new inode: exactly the given ids and mode (the plain
/// methods), or a caller's, by the kernel's rules (the `*_as` methods).
#[derive(Clone, Copy)]
pub(super) enum Owner<'c> {
    Exact { uid: u32, gid: u32 },
    Caller { cred: &'c Cred, umask: u16 },
}

/// The ACL in `v` (ext4's on-disk form), if it parses.
fn parse_disk(v: &[u8]) -> Option<Vec<AclEntry>> {
    acl_from_xattr(&acl_to_xattr(v)?).ok().flatten()
}

/// posix_acl_create_masq: masks a copy of the default ACL by the create
/// mode and the mode by the ACL; true if the ACL says more than the mode.
fn create_masq(acl: &mut [AclEntry], mode: &mut u16) -> bool {
    let mut not_equiv = false;
    let (mut group_obj, mut mask_obj) = (None, None);
    for (n, e) in acl.iter_mut().enumerate() {
        match e.tag {
            ACL_USER_OBJ => {
                e.perm &= (*mode >> 6) & 7;
                *mode &= (e.perm << 6) | !0o700;
            }
            ACL_USER | ACL_GROUP => not_equiv = true,
            ACL_GROUP_OBJ => group_obj = Some(n),
            ACL_MASK => {
                mask_obj = Some(n);
                not_equiv = true;
            }
            ACL_OTHER => {
                e.perm &= *mode & 7;
                *mode &= e.perm | !0o007;
            }
            _ => {}
        }
    }
    if let Some(n) = mask_obj.or(group_obj) {
        let e = &mut acl[n];
        e.perm &= (*mode >> 3) & 7;
        *mode &= (e.perm << 3) | !0o070;
    }
    not_equiv
}

/// __posix_acl_chmod: the owner, group (the mask when there is one) and
/// other entries take the new permission bits.
fn chmod_masq(acl: &mut [AclEntry], mode: u16) {
    let has_mask = acl.iter().any(|e| e.tag == ACL_MASK);
    for e in acl.iter_mut() {
        match e.tag {
            ACL_USER_OBJ => e.perm = (mode >> 6) & 7,
            ACL_MASK => e.perm = (mode >> 3) & 7,
            ACL_GROUP_OBJ if !has_mask => e.perm = (mode >> 3) & 7,
            ACL_OTHER => e.perm = mode & 7,
            _ => {}
        }
    }
}

impl FsCore {
    /// The mode, owner and ACLs of a new inode of `mode` made in `dir`
    /// (loaded under its lock) for `owner`. For a caller, as the kernel
    /// makes them: mode_strip_sgid (no set-group-ID file in a set-group-ID
    /// directory whose group the caller is not in, without CAP_FSETID),
    /// inode_init_owner (the group of a set-group-ID directory, whose new
    /// subdirectories are set-group-ID too) and posix_acl_create (under a
    /// default ACL the access ACL comes from it masked by the mode and the
    /// umask is not applied; directories inherit the default ACL too).
    pub(super) fn init_owner(&self, dir: &Inode, mode: u16, owner: Owner<'_>) -> Result<Init> {
        let (cred, umask) = match owner {
            Owner::Exact { uid, gid } => return Ok(Init { mode, uid, gid, access: None, default: None }),
            Owner::Caller { cred, umask } => (cred, umask),
        };
        let mut mode = mode;
        let is_dir = mode & S_IFMT == S_IFDIR;
        if !is_dir
            && mode & (S_ISGID | S_IXGRP) == S_ISGID | S_IXGRP
            && dir.mode & S_ISGID != 0
            && !cred.in_group_or_capable(dir.gid)
        {
            mode &= !S_ISGID;
        }
        let mut gid = cred.gid;
        if dir.mode & S_ISGID != 0 {
            gid = dir.gid;
            if is_dir {
                mode |= S_ISGID;
            }
        }
        let mut init = Init { mode, uid: cred.uid, gid, access: None, default: None };
        if mode & S_IFMT == S_IFLNK {
            return Ok(init);
        }
        let default = match crate::xattr::get(&self.vol, dir, b"system.posix_acl_default") {
            Ok(v) => acl_from_xattr(&v).ok().flatten(),
            Err(crate::error::Error::NoAttr(_)) => None,
            Err(e) => return Err(e),
        };
        let Some(default) = default else {
            init.mode &= !(umask & 0o777);
            return Ok(init);
        };
        let mut access = default.clone();
        if create_masq(&mut access, &mut init.mode) {
            init.access = Some(acl_to_disk(&access));
        }
        if is_dir {
            init.default = Some(acl_to_disk(&default));
        }
        Ok(init)
    }

    /// posix_acl_chmod: after a mode change of `i`, its access ACL (if it
    /// has one) takes the new owner, group-or-mask and other bits.
    pub(super) fn chmod_acl(&self, tx: &Tx, i: &mut Inode) -> Result<()> {
        if i.mode & S_IFMT == S_IFLNK {
            return Ok(());
        }
        let raw = match crate::xattr::list_raw(&self.vol, i) {
            Ok(all) => all.into_iter().find(|e| e.index == INDEX_POSIX_ACL_ACCESS && e.name.is_empty()),
            Err(e) => return Err(e),
        };
        let Some(mut acl) = raw.and_then(|e| e.value).as_deref().and_then(parse_disk) else {
            return Ok(());
        };
        chmod_masq(&mut acl, i.mode);
        xw::set(tx, i, INDEX_POSIX_ACL_ACCESS, b"", Some(&acl_to_disk(&acl)), Presence::Any)?;
        Ok(())
    }

    /// file_remove_privs: before a write or truncate of regular file
    /// `ino` by `cred`, clears its set-user-ID bit, and set-group-ID when
    /// group-execute is set or the caller is not in the file's group
    /// (setattr_should_drop_sgid), unless the caller has CAP_FSETID. Returns
    /// true if the mode changed. [`FsCore::write`] and
    /// [`FsCore::setattr`] do not know their caller: a front end acting
    /// for a user calls this first (the FUSE adapter does, for the
    /// kernel's FUSE_WRITE_KILL_SUIDGID and for truncates).
    pub fn remove_privs(&self, ino: u32, cred: &Cred) -> Result<bool> {
        let st = self.stat(ino)?;
        if kill_for(st.mode, st.gid, cred) == 0 {
            return Ok(false);
        }
        let rw = self.rw()?;
        let _l = rw.data.locks().lock_exclusive(&[], &[ino]);
        let mut i = self.load(ino)?;
        self.check_live(&i)?;
        let kill = kill_for(i.mode, i.gid, cred);
        if kill == 0 {
            return Ok(false);
        }
        let tx = self.begin(4)?;
        i.mode &= !kill;
        i.ctime = Timestamp::now();
        tx.write_inode(&mut i)?;
        self.note_tid(&tx, &[ino]);
        Ok(true)
    }

    /// Creates a regular file for `cred`, as open(O_CREAT) on ext4 does:
    /// the set-id rules and POSIX ACL inheritance of the module docs;
    /// `umask` applies unless `parent` has a default ACL.
    pub fn create_as(&self, parent: u32, name: &[u8], mode: u16, umask: u16, cred: &Cred) -> Result<Stat> {
        self.mknod_as(parent, name, S_IFREG | (mode & 0o7777), (0, 0), umask, cred)
    }

    /// Creates an unnamed regular file for `cred` (`open(dir, O_TMPFILE)`
    /// on ext4: the rules of [`FsCore::create_as`], then as
    /// [`FsCore::tmpfile`]).
    pub fn tmpfile_as(&self, parent: u32, mode: u16, umask: u16, cred: &Cred) -> Result<Stat> {
        self.retry_nospc(|| self.tmpfile_once(parent, mode, Owner::Caller { cred, umask }))
    }

    /// Creates a device node, FIFO, socket or regular file for `cred`, as
    /// mknod(2) would for that caller (see [`FsCore::create_as`]).
    pub fn mknod_as(
        &self,
        parent: u32,
        name: &[u8],
        mode: u16,
        rdev: (u32, u32),
        umask: u16,
        cred: &Cred,
    ) -> Result<Stat> {
        self.namespace_synced(
            &[parent],
            self.retry_nospc(|| self.mknod_once(parent, name, mode, rdev, Owner::Caller { cred, umask })),
        )
    }

    /// Creates a directory for `cred` (see [`FsCore::create_as`]; a new
    /// directory also inherits the parent's default ACL and set-group-ID).
    pub fn mkdir_as(&self, parent: u32, name: &[u8], mode: u16, umask: u16, cred: &Cred) -> Result<Stat> {
        self.namespace_synced(
            &[parent],
            self.retry_nospc(|| self.mkdir_once(parent, name, mode, Owner::Caller { cred, umask })),
        )
    }

    /// Creates a symbolic link for `cred` (the group of a set-group-ID
    /// parent; symlinks have no ACLs).
    pub fn symlink_as(&self, parent: u32, name: &[u8], target: &[u8], cred: &Cred) -> Result<Stat> {
        self.namespace_synced(
            &[parent],
            self.retry_nospc(|| self.symlink_once(parent, name, target, Owner::Caller { cred, umask: 0 })),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(tag: u16, perm: u16) -> AclEntry {
        AclEntry { tag, perm, id: if matches!(tag, ACL_USER | ACL_GROUP) { 1000 } else { u32::MAX } }
    }

    #[test]
    fn masks() {
        assert_eq!(privs_to_kill(S_IFREG | 0o6755), S_ISUID | S_ISGID);
        assert_eq!(privs_to_kill(S_IFREG | 0o6745), S_ISUID);
        assert_eq!(privs_to_kill(S_IFDIR | 0o6755), 0);
        let nobody = Cred::user(65534, 65534, vec![4242]);
        assert_eq!(kill_for(S_IFREG | 0o2745, 0, &nobody), S_ISGID);
        assert_eq!(kill_for(S_IFREG | 0o2745, 4242, &nobody), 0);
        assert_eq!(kill_for(S_IFREG | 0o6755, 0, &Cred::root()), 0);
        let mut acl = vec![e(ACL_USER_OBJ, 7), e(ACL_USER, 7), e(ACL_GROUP_OBJ, 5), e(ACL_MASK, 7), e(ACL_OTHER, 5)];
        let mut mode = S_IFREG | 0o640;
        assert!(create_masq(&mut acl, &mut mode));
        assert_eq!(mode, S_IFREG | 0o640);
        assert_eq!(acl.iter().map(|e| e.perm).collect::<Vec<_>>(), [6, 7, 5, 4, 0]);
        let mut plain = vec![e(ACL_USER_OBJ, 7), e(ACL_GROUP_OBJ, 5), e(ACL_OTHER, 0)];
        let mut mode = S_IFDIR | 0o777;
        assert!(!create_masq(&mut plain, &mut mode));
        assert_eq!(mode, S_IFDIR | 0o750);
        chmod_masq(&mut acl, 0o751);
        assert_eq!(acl.iter().map(|e| e.perm).collect::<Vec<_>>(), [7, 7, 5, 5, 1]);
    }
}
