//! Requests on directory entries: lookup and every request that adds,
//! removes or moves a name (mknod, mkdir, unlink, rmdir, symlink, rename,
//! link, create), with their common prologue (a writable mount, a name
//! ext4 can store) and the owner of new inodes.

use super::dirs::placeholder;
use super::Uext4Fuse;
use crate::conv::{self, attr, from_fuse, is_servable};
use crate::proto::request::{Create, Link, Lookup, Mkdir, Mknod, Rename, Rmdir, Symlink, Tmpfile, Unlink};
use crate::proto::types::{Errno, Generation, INodeNo, RenameFlags, Request};
use crate::reply::{ReplyCreate, ReplyEmpty, ReplyEntry};
use log::warn;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;
use uext4::inode_api::Cred;
use uext4::inode_api::RenameFlags as LibRename;
use uext4::Stat;

/// Longest name ext4 stores.
const NAME_MAX: usize = 255;

const S_IFLNK: u16 = 0o120000;

impl Uext4Fuse {
    /// Replies with the entry of `st`, whose node the kernel now holds
    /// one more reference to: counted here (the caller made the inode, or
    /// took the reference already: [`Self::kept_stat`]).
    fn entry(&self, reply: ReplyEntry, st: &Stat) {
        let f = &self.features;
        reply.entry_with_ttls(&f.attr_ttl, &f.entry_ttl, &attr(st), Self::generation(st));
    }

    /// [`Self::entry`] for an inode the request just made or linked:
    /// counts the kernel's new reference first.
    fn new_entry(&self, reply: ReplyEntry, st: &Stat) {
        self.hand_out(st.ino);
        self.entry(reply, st);
    }

    /// The attributes of `ino` for a LOOKUP reply, its reference counted
    /// before they are read (`get`, told whether the kernel held the node
    /// already), so that an unlink cannot delete it in between; the
    /// reference is dropped again if `get` fails.
    fn kept_stat(&self, ino: u32, get: impl FnOnce(bool) -> uext4::Result<Stat>) -> Result<Stat, Errno> {
        let held = self.hand_out(ino);
        get(held).map_err(|e| {
            self.forget_ino(ino, 1);
            self.fail("lookup", ino, e)
        })
    }

    /// The prologue of every request that changes the entry `name` of
    /// `parent`: a writable mount, then the parent's inode number and a
    /// name ext4 can store, in that order (the errno of the first check
    /// that fails is the reply).
    fn entry_change<'n>(&self, parent: INodeNo, name: &'n OsStr) -> Result<(u32, &'n [u8]), Errno> {
        self.writable()?;
        Ok((from_fuse(parent)?, name_ok(name)?))
    }

    /// [`Self::entry_change`] for a request that makes a new inode, with
    /// the caller's credentials and umask: the library works out the new
    /// inode's owner, mode and inherited ACLs from them as ext4 does (the
    /// umask arrives unapplied with FUSE_DONT_MASK, for the library to
    /// apply only where the parent has no default ACL).
    fn entry_create<'n>(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &'n OsStr,
        mode: u16,
        umask: u32,
    ) -> Result<NewEntry<'n>, Errno> {
        let (parent, name) = self.entry_change(parent, name)?;
        // The groups and capabilities only decide whether a set-group-ID
        // file keeps the bit: /proc is read only for such a mode.
        let cred = if mode & 0o2000 != 0 { cred(req) } else { Cred::user(req.uid(), req.gid(), Vec::new()) };
        Ok(NewEntry { parent, name, mode, umask: (umask & 0o777) as u16, cred })
    }

    pub(super) fn do_lookup(&self, lookup: &Lookup<'_>, reply: ReplyEntry) {
        let Lookup { parent, name } = *lookup;
        let parent = tri!(reply, from_fuse(parent));
        let name = tri!(reply, name_ok(name));
        if name == b"." {
            // The kernel's way of finding a node by id alone (a file
            // handle it no longer has cached, FUSE_EXPORT_SUPPORT): the
            // node may be any file, and it may be gone (ESTALE).
            let st = tri!(reply, self.kept_stat(parent, |_| self.fs.stat_by_handle(parent, None)));
            self.entry(reply, &st);
            return;
        }
        let ino = match self.fs.find(parent, name) {
            Ok(Some(ino)) => ino,
            Ok(None) if self.features.negative_ttl.is_zero() => {
                reply.error(Errno::ENOENT);
                return;
            }
            Ok(None) => {
                // A negative entry (node id 0): the kernel remembers the
                // name is absent. Every create or rename of a name goes
                // through this mount, and the kernel replaces the entry
                // then, so it cannot hide a file.
                let mut a = attr(&placeholder(0, None));
                a.ino = INodeNo(0);
                reply.entry_with_ttls(&Duration::ZERO, &self.features.negative_ttl, &a, Generation(0));
                return;
            }
            Err(e) => {
                reply.error(self.fail("lookup", parent, e));
                return;
            }
        };
        if !is_servable(ino) {
            warn!("lookup: {:?} in {parent} points at inode {ino}", String::from_utf8_lossy(name));
            reply.error(Errno::from_i32(libc::EUCLEAN));
            return;
        }
        // A revalidation (the kernel holds the node) needs no check: a
        // held inode is never deleted.
        let st = tri!(reply, self.kept_stat(ino, |held| if held { self.fs.stat(ino) } else { self.fs.stat_kept(ino) }));
        self.entry(reply, &st);
    }

    pub(super) fn do_mknod(&self, req: &Request, mknod: &Mknod<'_>, reply: ReplyEntry) {
        let Mknod { parent, name, mode, umask, rdev } = *mknod;
        let n = tri!(reply, self.entry_create(req, parent, name, (mode & 0xffff) as u16, umask));
        let dev = conv::decode_dev(rdev);
        let st = tri!(
            reply,
            self.fs
                .mknod_as(n.parent, n.name, n.mode, dev, n.umask, &n.cred)
                .map_err(|e| self.fail("mknod", n.parent, e))
        );
        self.new_entry(reply, &st);
    }

    pub(super) fn do_mkdir(&self, req: &Request, mkdir: &Mkdir<'_>, reply: ReplyEntry) {
        let Mkdir { parent, name, mode, umask } = *mkdir;
        let n = tri!(reply, self.entry_create(req, parent, name, (mode & 0o7777) as u16, umask));
        let st = tri!(
            reply,
            self.fs.mkdir_as(n.parent, n.name, n.mode, n.umask, &n.cred).map_err(|e| self.fail("mkdir", n.parent, e))
        );
        self.new_entry(reply, &st);
    }

    pub(super) fn do_unlink(&self, unlink: &Unlink<'_>, reply: ReplyEmpty) {
        let Unlink { parent, name } = *unlink;
        let (parent, name) = tri!(reply, self.entry_change(parent, name));
        tri!(reply, self.fs.unlink(parent, name).map_err(|e| self.fail("unlink", parent, e)));
        reply.ok();
    }

    pub(super) fn do_rmdir(&self, rmdir: &Rmdir<'_>, reply: ReplyEmpty) {
        let Rmdir { parent, name } = *rmdir;
        let (parent, name) = tri!(reply, self.entry_change(parent, name));
        tri!(reply, self.fs.rmdir(parent, name).map_err(|e| self.fail("rmdir", parent, e)));
        reply.ok();
    }

    pub(super) fn do_symlink(&self, req: &Request, symlink: &Symlink<'_>, reply: ReplyEntry) {
        let Symlink { parent, name, target } = *symlink;
        let n = tri!(reply, self.entry_create(req, parent, name, S_IFLNK | 0o777, 0));
        let target = target.as_os_str().as_bytes();
        let st = tri!(
            reply,
            self.fs
                .inodes()
                .symlink_as(n.parent, n.name, target, &n.cred)
                .map_err(|e| self.fail("symlink", n.parent, e))
        );
        self.new_entry(reply, &st);
    }

    pub(super) fn do_rename(&self, req: &Request, rename: &Rename<'_>, reply: ReplyEmpty) {
        let Rename { parent, name, newparent, newname, flags } = *rename;
        let (parent, name) = tri!(reply, self.entry_change(parent, name));
        let (newparent, newname) = tri!(reply, self.entry_change(newparent, newname));
        let known = RenameFlags::RENAME_NOREPLACE | RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT;
        if !known.contains(flags) {
            reply.error(Errno::EINVAL);
            return;
        }
        let lib = LibRename {
            noreplace: flags.contains(RenameFlags::RENAME_NOREPLACE),
            exchange: flags.contains(RenameFlags::RENAME_EXCHANGE),
        };
        let r = if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            // The whiteout is the caller's, as ext4's (overlayfs calls
            // with its mounter's credentials).
            self.fs.inodes().rename_whiteout(parent, name, newparent, newname, lib, req.uid(), req.gid())
        } else {
            self.fs.inodes().rename(parent, name, newparent, newname, lib)
        };
        tri!(reply, r.map_err(|e| self.fail("rename", parent, e)));
        reply.ok();
    }

    pub(super) fn do_link(&self, link: &Link<'_>, reply: ReplyEntry) {
        let Link { ino, newparent, newname } = *link;
        let (newparent, newname) = tri!(reply, self.entry_change(newparent, newname));
        let ino = tri!(reply, from_fuse(ino));
        let st = tri!(reply, self.fs.link(ino, newparent, newname).map_err(|e| self.fail("link", ino, e)));
        self.new_entry(reply, &st);
    }

    pub(super) fn do_create(&self, req: &Request, create: &Create<'_>, reply: ReplyCreate) {
        let Create { parent, name, mode, umask, flags, open_flags: _ } = *create;
        let n = tri!(reply, self.entry_create(req, parent, name, (mode & 0o7777) as u16, umask));
        let st = tri!(
            reply,
            self.fs.create_as(n.parent, n.name, n.mode, n.umask, &n.cred).map_err(|e| self.fail("create", n.parent, e))
        );
        let (fh, fopen) = self.open_handle(st.ino, flags);
        self.hand_out(st.ino);
        let ttl = self.features.entry_and_attr_ttl();
        reply.created(&ttl, &attr(&st), Self::generation(&st), fh, fopen);
    }
}

impl Uext4Fuse {
    /// `open(dir, O_TMPFILE)`: an inode without a name, on the orphan
    /// list and counted open once by the library ([`uext4::FsCore::tmpfile`]);
    /// the handle answered is that count, so the release deletes the file
    /// unless `linkat` gave it a name meanwhile. Owner, group, mode and
    /// ACLs as for a create ([`uext4::FsCore::tmpfile_as`]: set-group-ID
    /// directories, default ACLs, the umask unless a default ACL applies).
    pub(super) fn do_tmpfile(&self, req: &Request, tmpfile: &Tmpfile, reply: ReplyCreate) {
        let Tmpfile { parent, mode, umask, flags, open_flags: _ } = *tmpfile;
        tri!(reply, self.writable());
        let parent = tri!(reply, from_fuse(parent));
        let mode = (mode & 0o7777) as u16;
        let cred = if mode & 0o2000 != 0 { cred(req) } else { Cred::user(req.uid(), req.gid(), Vec::new()) };
        let umask = (umask & 0o777) as u16;
        let st =
            tri!(reply, self.fs.tmpfile_as(parent, mode, umask, &cred).map_err(|e| self.fail("tmpfile", parent, e)));
        let (fh, fopen) = self.handle(st.ino, flags, true);
        self.hand_out(st.ino);
        let ttl = self.features.entry_and_attr_ttl();
        reply.created(&ttl, &attr(&st), Self::generation(&st), fh, fopen);
    }
}

fn name_ok(name: &OsStr) -> Result<&[u8], Errno> {
    let b = name.as_bytes();
    if b.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(b)
}

/// Where a new inode goes and who makes it: what
/// [`Uext4Fuse::entry_create`] checked and gathered.
struct NewEntry<'n> {
    parent: u32,
    name: &'n [u8],
    mode: u16,
    umask: u16,
    cred: Cred,
}

/// CAP_FSETID's bit in the capability sets.
const CAP_FSETID: u32 = 4;

/// The credentials of the process behind `req`: its filesystem ids from
/// the request, its supplementary groups and whether CAP_FSETID is in its
/// effective set from /proc/PID/status (FUSE passes neither). A process
/// gone by now (or a kernel-internal request, pid 0) counts as an
/// ordinary user without supplementary groups, root as capable.
pub(super) fn cred(req: &Request) -> Cred {
    let mut c = Cred::user(req.uid(), req.gid(), Vec::new());
    let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", req.pid())) else {
        return c;
    };
    for line in status.lines() {
        if let Some(g) = line.strip_prefix("Groups:") {
            c.groups = g.split_whitespace().filter_map(|v| v.parse().ok()).collect();
        } else if let Some(cap) = line.strip_prefix("CapEff:") {
            if let Ok(bits) = u64::from_str_radix(cap.trim(), 16) {
                c.cap_fsetid = bits & (1 << CAP_FSETID) != 0;
            }
        }
    }
    c
}
