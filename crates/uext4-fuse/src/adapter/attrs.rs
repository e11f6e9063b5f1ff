//! Requests on an inode's attributes: getattr and setattr, the extended
//! attributes (with what callers may see of them), `access(2)` and
//! statfs.

use super::Uext4Fuse;
use crate::conv::{self, attr, from_fuse};
use crate::proto::request::{self, Access, GetAttr, GetXattr, ListXattr, RemoveXattr, SetXattr, Statx};
use crate::proto::types::{AccessFlags, Errno, INodeNo, Request, TimeOrNow};
use crate::reply::{ReplyAttr, ReplyEmpty, ReplyStatfs, ReplyStatx, ReplyXattr};
use std::os::unix::ffi::OsStrExt;
use uext4::inode_api::{SetAttr, XattrSetMode};
use uext4::{FileType, Timestamp};

impl Uext4Fuse {
    fn xattr_reply(reply: ReplyXattr, size: u32, data: &[u8]) {
        let Ok(len) = u32::try_from(data.len()) else {
            reply.error(Errno::E2BIG);
            return;
        };
        if size == 0 {
            reply.size(len);
        } else if len > size {
            reply.error(Errno::ERANGE);
        } else {
            reply.data(data);
        }
    }

    pub(super) fn do_getattr(&self, getattr: &GetAttr, reply: ReplyAttr) {
        // The open file asked through says nothing the inode does not.
        let GetAttr { ino, fh: _ } = *getattr;
        let (st, ttl) = tri!(reply, self.getattr_stat(ino));
        reply.attr(&ttl, &attr(&st));
    }

    /// The attributes with the creation time where the inode records one
    /// (ext4's `i_crtime`, in inodes with room for it), and the statx
    /// attributes of its flags (`+i`, `+a`, `+d`, ...), as ext4_getattr.
    pub(super) fn do_statx(&self, statx: &Statx, reply: ReplyStatx) {
        // Every field is cheap: all are answered whatever `mask` asks.
        let Statx { ino, fh: _, flags: _, mask: _ } = *statx;
        let (st, ttl) = tri!(reply, self.getattr_stat(ino));
        reply.statx(&ttl, &attr(&st), st.crtime.is_some(), u64::from(st.flags));
    }

    /// GETATTR's answer (and STATX's).
    pub(crate) fn getattr_stat(&self, ino: INodeNo) -> Result<(uext4::Stat, std::time::Duration), Errno> {
        let ino = from_fuse(ino)?;
        Ok((self.stat("getattr", ino)?, self.features.attr_ttl))
    }

    pub(super) fn do_setattr(&self, req: &Request, set: &request::SetAttr, reply: ReplyAttr) {
        // The open file and KILL_SUIDGID are not needed: the kernel sends
        // the mode change killing set-id bits asks for.
        let request::SetAttr { ino, mode, uid, gid, size, atime, mtime, ctime, fh: _, kill_suidgid: _ } = *set;
        tri!(reply, self.writable());
        let ino = tri!(reply, from_fuse(ino));
        // With the writeback cache the kernel keeps the times itself and
        // sends "now" as the time it read (FATTR_MTIME without
        // FATTR_MTIME_NOW), together with the new ctime, which
        // notify_change took from the same clock reading: a time equal
        // to the ctime sent with it is "now" (touch, or the times of the
        // kernel's own writes), any other a given value.
        let given = |t: Option<TimeOrNow>| match t {
            Some(TimeOrNow::SpecificTime(x)) => ctime != Some(x),
            _ => false,
        };
        let change = SetAttr {
            mode: mode.map(|m| (m & 0o7777) as u16),
            uid,
            gid,
            size,
            atime: atime.map(time),
            mtime: mtime.map(time),
            // Sent only by a kernel that keeps the file's times itself
            // (the writeback cache): the ctime it shows is the one kept.
            ctime: ctime.map(conv::timestamp),
            // notify_change: times set to a given value (not "now") are
            // refused on an append-only file too; the library checks.
            times_given: given(atime) || given(mtime),
        };
        // FUSE_HANDLE_KILLPRIV_V2 leaves the set-id bits a chown or a
        // truncate removes to us, and which ones depends on the caller
        // (the request's `kill_suidgid` is not needed: the caller's
        // credentials say what the kernel looked at). The library asks
        // for them only for a file that has such bits, checked under its
        // lock: reading /proc is not free. A SETATTR with nothing to set
        // is what the kernel sends for chown(f, -1, -1), which on ext4
        // clears them as any chown does: a chown to the current owner.
        // (The ctime a writeback-cache kernel sends along is no change.)
        let empty = SetAttr { ctime: None, ..change } == SetAttr::default();
        let cred = || super::entries::cred(req);
        let done = if empty {
            match self.stat("setattr", ino) {
                Ok(cur) if cur.mode & 0o6000 != 0 => {
                    self.fs.setattr_as_lazily(ino, SetAttr { uid: Some(cur.uid), ..change }, &cred)
                }
                Ok(_) => self.fs.setattr(ino, change),
                Err(e) => {
                    reply.error(e);
                    return;
                }
            }
        } else if uid.is_some() || gid.is_some() || size.is_some() {
            self.fs.setattr_as_lazily(ino, change, &cred)
        } else {
            self.fs.setattr(ino, change)
        };
        let st = tri!(reply, done.map_err(|e| self.fail("setattr", ino, e)));
        reply.attr(&self.features.attr_ttl, &attr(&st));
    }

    pub(super) fn do_statfs(&self, reply: ReplyStatfs) {
        let s = self.fs.statfs();
        reply.statfs(
            s.blocks,
            s.free_blocks,
            s.avail_blocks,
            s.inodes,
            s.free_inodes,
            s.block_size,
            s.name_max,
            s.block_size,
        );
    }

    pub(super) fn do_setxattr(&self, req: &Request, xattr: &SetXattr<'_>, reply: ReplyEmpty) {
        // setxattr_flags: see acl_kill_sgid.
        let SetXattr { ino, name, value, flags, setxattr_flags: _ } = *xattr;
        tri!(reply, self.writable());
        let ino = tri!(reply, from_fuse(ino));
        let mode = match flags & (libc::XATTR_CREATE | libc::XATTR_REPLACE) {
            0 => XattrSetMode::Any,
            libc::XATTR_CREATE => XattrSetMode::Create,
            libc::XATTR_REPLACE => XattrSetMode::Replace,
            _ => {
                reply.error(Errno::EINVAL);
                return;
            }
        };
        tri!(reply, self.fs.set_xattr(ino, name.as_bytes(), value, mode).map_err(|e| self.fail("setxattr", ino, e)));
        if name.as_bytes() == b"system.posix_acl_access" && value.len() > 4 {
            tri!(reply, self.acl_kill_sgid(req, ino));
        }
        reply.ok();
    }

    /// posix_acl_update_mode: setting an access ACL clears set-group-ID
    /// when the caller is neither in the file's group nor has CAP_FSETID
    /// (the kernel would say so with FUSE_SETXATTR_ACL_KILL_SGID, which
    /// needs FUSE_SETXATTR_EXT, which INIT does not ask for).
    fn acl_kill_sgid(&self, req: &Request, ino: u32) -> Result<(), Errno> {
        let st = self.stat("setxattr", ino)?;
        if st.mode & S_ISGID == 0 {
            return Ok(());
        }
        let c = super::entries::cred(req);
        if c.cap_fsetid || c.in_group(st.gid) {
            return Ok(());
        }
        let change = SetAttr { mode: Some(st.mode & 0o7777 & !S_ISGID), ..Default::default() };
        self.fs.setattr(ino, change).map_err(|e| self.fail("setxattr", ino, e))?;
        self.inval_attrs(ino);
        Ok(())
    }

    pub(super) fn do_getxattr(&self, req: &Request, xattr: &GetXattr<'_>, reply: ReplyXattr) {
        let GetXattr { ino, name, size } = *xattr;
        let ino = tri!(reply, from_fuse(ino));
        let name = name.as_bytes();
        if !visible_xattr(req, name) {
            reply.error(Errno::NO_XATTR);
            return;
        }
        let value = tri!(reply, self.fs.get_xattr(ino, name).map_err(|e| self.fail("getxattr", ino, e)));
        Self::xattr_reply(reply, size, &value);
    }

    pub(super) fn do_listxattr(&self, req: &Request, xattr: &ListXattr, reply: ReplyXattr) {
        let ListXattr { ino, size } = *xattr;
        let ino = tri!(reply, from_fuse(ino));
        let names = tri!(reply, self.fs.list_xattrs(ino).map_err(|e| self.fail("listxattr", ino, e)));
        let mut buf = Vec::new();
        for n in names.iter().filter(|n| visible_xattr(req, n)) {
            buf.extend_from_slice(n);
            buf.push(0);
        }
        Self::xattr_reply(reply, size, &buf);
    }

    pub(super) fn do_removexattr(&self, xattr: &RemoveXattr<'_>, reply: ReplyEmpty) {
        let RemoveXattr { ino, name } = *xattr;
        tri!(reply, self.writable());
        let ino = tri!(reply, from_fuse(ino));
        tri!(reply, self.fs.remove_xattr(ino, name.as_bytes()).map_err(|e| self.fail("removexattr", ino, e)));
        reply.ok();
    }

    /// Only asked by kernels that do not check permissions themselves
    /// (the mount always has `default_permissions`): the mode bits, with
    /// root passing read and write checks.
    pub(super) fn do_access(&self, req: &Request, access: &Access, reply: ReplyEmpty) {
        let Access { ino, mask } = *access;
        let ino = tri!(reply, from_fuse(ino));
        let st = tri!(reply, self.stat("access", ino));
        if mask.contains(AccessFlags::W_OK) && self.writable().is_err() {
            reply.error(Errno::EROFS);
            return;
        }
        let want = (mask.bits() & 0o7) as u16;
        let ok = if req.uid() == 0 {
            !mask.contains(AccessFlags::X_OK) || st.file_type == FileType::Directory || st.mode & 0o111 != 0
        } else {
            let bits = if req.uid() == st.uid {
                st.mode >> 6
            } else if req.gid() == st.gid {
                st.mode >> 3
            } else {
                st.mode
            } & 0o7;
            bits & want == want
        };
        if ok {
            reply.ok();
        } else {
            reply.error(Errno::EACCES);
        }
    }
}

const S_ISGID: u16 = 0o2000;

fn time(t: TimeOrNow) -> Timestamp {
    match t {
        TimeOrNow::Now => Timestamp::now(),
        TimeOrNow::SpecificTime(s) => conv::timestamp(s),
    }
}

/// `trusted.` attributes are for CAP_SYS_ADMIN (approximated by uid 0, as
/// FUSE gives no capabilities); `system.data` (inline data) is never
/// listed, as in ext4.
fn visible_xattr(req: &Request, name: &[u8]) -> bool {
    if name == b"system.data" {
        return false;
    }
    !name.starts_with(b"trusted.") || req.uid() == 0
}
