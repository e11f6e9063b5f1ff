//! setattr: mode, owner, size (truncate or extend) and times.

use super::flags::{self, FL_APPEND};
use super::ftype;
use super::setid::{self, Cred, S_ISGID, S_ISUID};
use crate::error::{Error, Result};
use crate::format::inode::{FileType, Timestamp, FL_EXTENTS, S_IFMT};
use crate::fs::{FsCore, Stat};

/// Attribute changes for [`FsCore::setattr`](crate::FsCore::setattr)
/// (None = leave as is): one call changes several attributes in one
/// transaction, as chown, chmod, truncate and utimensat do; build it with
/// `..Default::default()` for the fields left alone.
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
    /// Change time, when the caller keeps it (a FUSE kernel with the
    /// writeback cache keeps the times of a cached file and writes them
    /// back as it took them); None: now, as every change.
    pub ctime: Option<Timestamp>,
    /// `atime`/`mtime` are times the caller gave (utimensat with values,
    /// not UTIME_NOW): refused on an append-only file (EPERM), as
    /// notify_change refuses them; times set to now are allowed there.
    pub times_given: bool,
}

/// Whose rules a setattr follows (see [`FsCore::setattr_as`]).
#[derive(Clone, Copy)]
enum Caller<'a> {
    /// Root's, with no credentials (the library's own callers).
    Root,
    /// These credentials'.
    Is(&'a Cred),
    /// The credentials this builds, built only if a rule needs them.
    Lazy(&'a dyn Fn() -> Cred),
}

impl FsCore {
    /// Changes attributes; a size change truncates or extends the file.
    /// As on ext4, a chmod updates the access ACL's owner, group-or-mask
    /// and other entries, and a chown without a mode clears the set-id
    /// bits of a regular file (as ext4's setattr does; the bits a
    /// truncate by an unprivileged caller removes are
    /// [`FsCore::remove_privs`]'s).
    pub fn setattr(&self, ino: u32, attr: SetAttr) -> Result<Stat> {
        self.attrs_synced(ino, self.setattr_by(ino, attr, Caller::Root))
    }

    /// [`FsCore::setattr`] for `cred`, with the rules of the kernel's
    /// `notify_change` and `setattr_prepare` that depend on the caller
    /// (as the kernel's `chown` and `should_remove_suid`):
    /// - a change of owner or group of a non-directory clears
    ///   set-user-ID, and set-group-ID when group-execute is set or the
    ///   caller is neither in the file's group nor has CAP_FSETID
    ///   (`chown(f, -1, -1)` is `uid: Some` of the current owner);
    /// - a truncate by a caller without CAP_FSETID removes the bits a
    ///   write would ([`FsCore::remove_privs`]);
    /// - a mode change by a caller neither in the (new) group nor with
    ///   CAP_FSETID cannot set set-group-ID.
    ///
    /// Permission to make the change (owner or capability) is the
    /// caller's to check, as the kernel does before asking ext4.
    pub fn setattr_as(&self, ino: u32, attr: SetAttr, cred: &Cred) -> Result<Stat> {
        self.attrs_synced(ino, self.setattr_by(ino, attr, Caller::Is(cred)))
    }

    /// [`FsCore::setattr_as`] with the caller's credentials built by
    /// `cred` only when a rule depends on them: the file has set-id bits
    /// or the new mode sets set-group-ID (without either, every rule
    /// gives root's answer). For front ends to which credentials cost
    /// something (a FUSE daemon reads the caller's groups and
    /// capabilities from /proc): the check is made on the inode under
    /// its lock, not on a stat taken before.
    pub fn setattr_as_lazily(&self, ino: u32, attr: SetAttr, cred: &dyn Fn() -> Cred) -> Result<Stat> {
        self.attrs_synced(ino, self.setattr_by(ino, attr, Caller::Lazy(cred)))
    }

    fn setattr_by(&self, ino: u32, attr: SetAttr, caller: Caller<'_>) -> Result<Stat> {
        let rw = self.rw()?;
        let _l = rw.data.locks().lock_exclusive(&[], &[ino]);
        if let Some(size) = attr.size {
            // An inline file too small for the new size becomes an extent
            // file first (fs/inline.rs).
            self.prepare_inline_resize(ino, size)?;
        }
        let st = rw.data.inode(ino);
        if attr.size.is_some() && st.data.pages.is_dirty() {
            // Truncate works on the blocks: the data goes to them first.
            self.writeback_locked(&st, ino)?;
        }
        let mut i = self.load(ino)?;
        self.check_live(&i)?;
        // notify_change: nothing changes on an immutable inode; on an
        // append-only one only the times (set to now: the front end tells
        // the two apart).
        flags::check_mutable(&i)?;
        if attr.mode.is_some() || attr.uid.is_some() || attr.gid.is_some() || attr.size.is_some() {
            flags::check_unpinned(&i)?;
        }
        if attr.times_given && i.flags & FL_APPEND != 0 {
            return Err(Error::NotPermitted(format!("inode {ino} is append-only: its times are set to now only")));
        }
        let built;
        let caller = match caller {
            Caller::Root => None,
            Caller::Is(c) => Some(c),
            Caller::Lazy(f) if i.mode & (S_ISUID | S_ISGID) != 0 || attr.mode.is_some_and(|m| m & S_ISGID != 0) => {
                built = f();
                Some(&built)
            }
            Caller::Lazy(_) => None,
        };
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
        if attr.uid.is_some_and(|u| u != i.uid) || attr.gid.is_some_and(|g| g != i.gid) {
            // The new owner takes the file's usage (dquot_transfer), checked
            // before anything changes.
            tx.check_quota_move(&i, [attr.uid.unwrap_or(i.uid), attr.gid.unwrap_or(i.gid), i.projid])?;
        }
        let m = st.map.write();
        let mut truncate_left = false;
        if let Some(size) = attr.size {
            if i.has_inline_data() {
                // Fits (see prepare_inline_resize); no folios, no blocks.
                if size != i.size {
                    i.mtime = now;
                }
                crate::inode::inline::resize(&mut i, size)?;
            } else if size < i.size {
                st.data.pages.invalidate(size, u64::MAX);
                truncate_left = !self.shrink(&tx, &mut i, size)?;
            }
            if size != i.size {
                i.mtime = now;
            }
            i.size = size;
        }
        // The caller's group after the change, for the checks below.
        let new_gid = attr.gid.unwrap_or(i.gid);
        if let Some(c) = caller.filter(|_| attr.size.is_some()) {
            // do_truncate: file_remove_privs' bits, unless CAP_FSETID.
            i.mode &= !setid::kill_for(i.mode, i.gid, c);
        }
        if let Some(m) = attr.mode {
            let mut m = m & 0o7777;
            if caller.is_some_and(|c| !c.in_group_or_capable(new_gid)) {
                // setattr_prepare: no set-group-ID from a non-member.
                m &= !S_ISGID;
            }
            i.mode = (i.mode & S_IFMT) | m;
            // posix_acl_chmod: an access ACL follows the new bits.
            self.chmod_acl(&tx, &mut i)?;
        } else if attr.uid.is_some() || attr.gid.is_some() {
            // chown_common: a change of owner or group removes the set-id
            // bits of a non-directory, unless the same call sets the mode.
            let kill = match caller {
                Some(c) => setid::chown_kill(i.mode, i.gid, new_gid, c),
                // No caller: root's rules (set-group-ID only with
                // group-execute).
                None => setid::privs_to_kill(i.mode),
            };
            i.mode &= !kill;
        }
        if let Some(u) = attr.uid {
            i.uid = u;
        }
        if let Some(g) = attr.gid {
            i.gid = g;
        }
        match attr.atime {
            // An explicit atime wins over one a read left pending.
            Some(t) => {
                st.data.atime.take();
                i.atime = t;
            }
            None => Self::take_atime(&st, &mut i),
        }
        if let Some(t) = attr.mtime {
            i.mtime = t;
        }
        i.ctime = attr.ctime.unwrap_or(now);
        tx.write_inode(&mut i)?;
        // The data path skips its mtime/ctime update when it stamped them
        // in this second already (`lazy_times`): times set here (utimes
        // to the past) must not make the next write of this second keep
        // them, as ext4's file_update_time compares with the inode's.
        st.data.time_sec.store(i.mtime.sec.min(i.ctime.sec), std::sync::atomic::Ordering::Relaxed);
        if truncate_left && i.links_count > 0 {
            // The rest of the blocks are freed in more handles; the orphan
            // list has a crash finish them (ext4_setattr's orphan_add). An
            // unlinked open file is on the list already, until its close.
            self.orphan_add(&tx, &mut i)?;
        }
        self.note_tid(&tx, &[ino]);
        drop(tx);
        drop(m);
        if truncate_left {
            self.finish_truncate(ino, Some(&st.map))?;
        }
        if attr.size == Some(0) && rw.data.config().auto_da_alloc {
            // What is written next reaches the disk at close, not 30 s
            // later (ext4 truncates-to-zero-then-rewrites the same way).
            rw.open.alloc_on_close(ino);
        }
        if truncate_left {
            // Later handles changed the record (its blocks): read it back.
            return self.stat(ino);
        }
        // The inode as written, the I/O lock still held: no read-back.
        self.stat_of(i)
    }
}
