//! The null backend's answers to the requests: each served from the
//! in-memory tree under the node locks the module's comment names.

use crate::dispatch::Filesystem;
use crate::kernel_config::KernelConfig;
use crate::proto::request::{
    Access, Create, Fallocate, Flush, Forget, Fsync, GetAttr, GetXattr, Link, ListXattr, Lookup, Mkdir, Mknod, Open,
    Opendir, Read, Readdir, Readlink, RemoveXattr, Rename, Rmdir, SetAttr, SetXattr, Statfs, Statx, Symlink, Unlink,
    Write,
};
use crate::proto::types::{
    Errno, FileHandle, FileType, FopenFlags, Generation, INodeNo, Request, TimeOrNow, WriteFlags,
};
use crate::reply::{
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyStatx, ReplyWrite, ReplyXattr,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use super::{rd, wr, Body, Dir, NullFs, DOT, DOTDOT, FILES, NAME_MAX, PAGE, ROOT};

fn time_of(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl Filesystem for NullFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        crate::adapter::negotiate(&self.features, self.want_uring, config);
        Ok(())
    }

    fn lookup(&self, _req: &Request, lookup: &Lookup<'_>, reply: ReplyEntry) {
        let Lookup { parent, name } = *lookup;
        let pc = tri!(reply, self.get(parent));
        let found = {
            let p = rd(&pc.node);
            let d = tri!(reply, p.dir());
            match name.as_bytes() {
                b"." => Some(parent.0),
                b".." => Some(d.parent),
                n => d.get(n),
            }
        };
        let Some(ino) = found else {
            if self.features.negative_ttl.is_zero() {
                reply.error(Errno::ENOENT);
            } else {
                // A negative entry, as uext4 answers.
                let mut a = rd(&pc.node).attr(0);
                a.ino = INodeNo(0);
                reply.entry_with_ttls(&Duration::ZERO, &self.features.negative_ttl, &a, Generation(0));
            }
            return;
        };
        let c = tri!(reply, self.cell(ino).ok_or(Errno::ENOENT));
        let a = rd(&c.node).attr(ino);
        self.hand_out(&c);
        self.entry(reply, &a);
    }

    fn forget(&self, _req: &Request, forget: &Forget) {
        let Forget { ino, nlookup } = *forget;
        if ino.0 == ROOT {
            return;
        }
        if let Some(c) = self.cell(ino.0) {
            let before =
                c.lookups.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| Some(n.saturating_sub(nlookup)));
            if before.is_ok_and(|n| n <= nlookup) {
                self.maybe_free(ino.0);
            }
        }
    }

    fn getattr(&self, _req: &Request, getattr: &GetAttr, reply: ReplyAttr) {
        let ino = getattr.ino;
        let c = tri!(reply, self.get(ino));
        let a = rd(&c.node).attr(ino.0);
        reply.attr(&self.features.attr_ttl, &a);
    }

    fn statx(&self, _req: &Request, statx: &Statx, reply: ReplyStatx) {
        let ino = statx.ino;
        let c = tri!(reply, self.get(ino));
        let a = rd(&c.node).attr(ino.0);
        reply.statx(&self.features.attr_ttl, &a, true, 0);
    }

    fn setattr(&self, _req: &Request, attr: &SetAttr, reply: ReplyAttr) {
        let SetAttr { ino, mode, uid, gid, size, atime, mtime, ctime, fh: _, kill_suidgid } = *attr;
        let c = tri!(reply, self.get(ino));
        let mut n = wr(&c.node);
        if let Some(size) = size {
            let old = n.size;
            match &mut n.body {
                Body::File(pages) => {
                    if size < old {
                        // Beyond the new end nothing may read back.
                        self.zero_range(pages, size, old.next_multiple_of(PAGE));
                    }
                }
                Body::Dir(_) => {
                    reply.error(Errno::EISDIR);
                    return;
                }
                _ => {
                    reply.error(Errno::EINVAL);
                    return;
                }
            }
            n.size = size;
            n.mtime = SystemTime::now();
        }
        if let Some(m) = mode {
            n.perm = (m & 0o7777) as u16;
        }
        if let Some(u) = uid {
            n.uid = u;
        }
        if let Some(g) = gid {
            n.gid = g;
        }
        if kill_suidgid {
            n.kill_suidgid();
        }
        if let Some(t) = atime {
            n.atime = time_of(t);
        }
        if let Some(t) = mtime {
            n.mtime = time_of(t);
        }
        n.ctime = ctime.unwrap_or_else(SystemTime::now);
        let a = n.attr(ino.0);
        reply.attr(&self.features.attr_ttl, &a);
    }

    fn readlink(&self, _req: &Request, readlink: &Readlink, reply: ReplyData) {
        let c = tri!(reply, self.get(readlink.ino));
        let n = rd(&c.node);
        match &n.body {
            Body::Symlink(t) => reply.data(t),
            _ => reply.error(Errno::EINVAL),
        }
    }

    fn mknod(&self, req: &Request, mknod: &Mknod<'_>, reply: ReplyEntry) {
        let Mknod { parent, name, mode, umask, rdev } = *mknod;
        let (kind, body) = match mode & libc::S_IFMT {
            libc::S_IFREG | 0 => (FileType::RegularFile, Body::File(HashMap::new())),
            libc::S_IFIFO => (FileType::NamedPipe, Body::Special),
            libc::S_IFSOCK => (FileType::Socket, Body::Special),
            libc::S_IFCHR => (FileType::CharDevice, Body::Special),
            libc::S_IFBLK => (FileType::BlockDevice, Body::Special),
            _ => {
                reply.error(Errno::EINVAL);
                return;
            }
        };
        let mut a = tri!(reply, self.make(req, parent, name, kind, mode, umask, body, 0));
        if matches!(kind, FileType::CharDevice | FileType::BlockDevice) {
            if let Some(c) = self.cell(a.ino.0) {
                wr(&c.node).rdev = rdev;
            }
            a.rdev = rdev;
        }
        self.entry(reply, &a);
    }

    fn mkdir(&self, req: &Request, mkdir: &Mkdir<'_>, reply: ReplyEntry) {
        let Mkdir { parent, name, mode, umask } = *mkdir;
        let body = Body::Dir(Dir::new(parent.0));
        let a = tri!(reply, self.make(req, parent, name, FileType::Directory, mode, umask, body, 0));
        self.entry(reply, &a);
    }

    fn unlink(&self, _req: &Request, unlink: &Unlink<'_>, reply: ReplyEmpty) {
        tri!(reply, self.do_unlink(unlink.parent, unlink.name));
        reply.ok();
    }

    fn rmdir(&self, _req: &Request, rmdir: &Rmdir<'_>, reply: ReplyEmpty) {
        tri!(reply, self.do_rmdir(rmdir.parent, rmdir.name));
        reply.ok();
    }

    fn symlink(&self, req: &Request, symlink: &Symlink<'_>, reply: ReplyEntry) {
        let Symlink { parent, name: link_name, target } = *symlink;
        let t = target.as_os_str().as_bytes().to_vec();
        let len = t.len() as u64;
        let a = tri!(reply, self.make(req, parent, link_name, FileType::Symlink, 0o777, 0, Body::Symlink(t), len));
        self.entry(reply, &a);
    }

    fn rename(&self, _req: &Request, rename: &Rename<'_>, reply: ReplyEmpty) {
        let Rename { parent, name, newparent, newname, flags } = *rename;
        tri!(reply, self.do_rename(parent, name, newparent, newname, flags));
        reply.ok();
    }

    fn link(&self, _req: &Request, link: &Link<'_>, reply: ReplyEntry) {
        let Link { ino, newparent, newname } = *link;
        let a = tri!(reply, self.do_link(ino, newparent, newname));
        self.entry(reply, &a);
    }

    fn open(&self, _req: &Request, open: &Open, reply: ReplyOpen) {
        let Open { ino, flags, open_flags: _ } = *open;
        let c = tri!(reply, self.get(ino));
        if rd(&c.node).kind == FileType::Directory {
            reply.error(Errno::EISDIR);
            return;
        }
        reply.opened(FileHandle(0), self.features.fopen(flags.0));
    }

    fn read(&self, _req: &Request, read: &Read, reply: ReplyData) {
        let (ino, offset) = (read.ino, read.offset);
        reply.fill(|buf| self.read_into(ino, offset, buf));
    }

    fn write(&self, _req: &Request, write: &Write<'_>, reply: ReplyWrite) {
        let Write { ino, offset, data, write_flags, .. } = *write;
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        let n = tri!(reply, self.do_write(ino, offset, data, kill));
        reply.written(n);
    }

    /// As uext4: nothing to do at close, and ENOSYS tells the kernel so
    /// once for the connection.
    fn flush(&self, _req: &Request, _flush: &Flush, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    fn fsync(&self, _req: &Request, fsync: &Fsync, reply: ReplyEmpty) {
        tri!(reply, self.get(fsync.ino));
        reply.ok();
    }

    fn opendir(&self, _req: &Request, opendir: &Opendir, reply: ReplyOpen) {
        let c = tri!(reply, self.get(opendir.ino));
        if rd(&c.node).kind != FileType::Directory {
            reply.error(Errno::ENOTDIR);
            return;
        }
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(&self, _req: &Request, readdir: &Readdir, mut reply: ReplyDirectory) {
        let Readdir { ino, offset, .. } = *readdir;
        let c = tri!(reply, self.get(ino));
        let n = rd(&c.node);
        let d = tri!(reply, n.dir());
        if offset < DOT && reply.add(ino, DOT, FileType::Directory, OsStr::new(".")) {
            reply.ok();
            return;
        }
        if offset < DOTDOT && reply.add(INodeNo(d.parent), DOTDOT, FileType::Directory, OsStr::new("..")) {
            reply.ok();
            return;
        }
        for (&cookie, (name, child, kind)) in d.order.range(offset.max(DOTDOT) + 1..) {
            if reply.add(INodeNo(*child), cookie, *kind, OsStr::from_bytes(name)) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(&self, _req: &Request, readdir: &Readdir, mut reply: ReplyDirectoryPlus) {
        let Readdir { ino, offset, .. } = *readdir;
        let c = tri!(reply, self.get(ino));
        // The entries are gathered first, then each node is read under
        // its own lock alone (no node's lock is taken under another's).
        let room = reply.room();
        let batch: Vec<(u64, Vec<u8>, u64)> = {
            let n = rd(&c.node);
            let d = tri!(reply, n.dir());
            let dots = [(DOT, b".".to_vec(), ino.0), (DOTDOT, b"..".to_vec(), d.parent)];
            let dots = dots.into_iter().filter(|(k, _, _)| *k > offset);
            let rest = d.order.range(offset.max(DOTDOT) + 1..).map(|(&k, (nm, i, _))| (k, nm.clone(), *i));
            dots.chain(rest).take(room).collect()
        };
        let ttl = self.ttl();
        for (cookie, name, child) in batch {
            let Some(cc) = self.cell(child) else { continue };
            let a = rd(&cc.node).attr(child);
            if reply.add(INodeNo(child), cookie, OsStr::from_bytes(&name), &ttl, &a, Generation(0)) {
                break;
            }
            // The kernel takes a reference to every entry it is given
            // but "." and ".." (fs/fuse/readdir.c, fuse_direntplus_link).
            if name != b"." && name != b".." {
                self.hand_out(&cc);
            }
        }
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, fsync: &Fsync, reply: ReplyEmpty) {
        tri!(reply, self.get(fsync.ino));
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _statfs: &Statfs, reply: ReplyStatfs) {
        let used = self.pages.load(Ordering::Relaxed).min(self.cap_pages);
        let free = self.cap_pages - used;
        let files = self.shards.iter().map(|s| rd(s).len() as u64).sum::<u64>();
        reply.statfs(
            self.cap_pages,
            free,
            free,
            FILES,
            FILES.saturating_sub(files),
            PAGE as u32,
            NAME_MAX as u32,
            PAGE as u32,
        );
    }

    fn setxattr(&self, _req: &Request, xattr: &SetXattr<'_>, reply: ReplyEmpty) {
        let SetXattr { ino, name, value, flags, .. } = *xattr;
        let c = tri!(reply, self.get(ino));
        let mut n = wr(&c.node);
        let name = name.as_bytes();
        let exists = n.xattrs.contains_key(name);
        if flags & libc::XATTR_CREATE != 0 && exists {
            reply.error(Errno::EEXIST);
            return;
        }
        if flags & libc::XATTR_REPLACE != 0 && !exists {
            reply.error(Errno::NO_XATTR);
            return;
        }
        n.xattrs.insert(name.to_vec(), value.to_vec());
        n.ctime = SystemTime::now();
        reply.ok();
    }

    fn getxattr(&self, _req: &Request, xattr: &GetXattr<'_>, reply: ReplyXattr) {
        let GetXattr { ino, name, size } = *xattr;
        let c = tri!(reply, self.get(ino));
        let n = rd(&c.node);
        let Some(v) = n.xattrs.get(name.as_bytes()) else {
            reply.error(Errno::NO_XATTR);
            return;
        };
        if size == 0 {
            reply.size(v.len() as u32);
        } else if (size as usize) < v.len() {
            reply.error(Errno::ERANGE);
        } else {
            reply.data(v);
        }
    }

    fn listxattr(&self, _req: &Request, xattr: &ListXattr, reply: ReplyXattr) {
        let ListXattr { ino, size } = *xattr;
        let c = tri!(reply, self.get(ino));
        let n = rd(&c.node);
        let mut list = Vec::new();
        for k in n.xattrs.keys() {
            list.extend_from_slice(k);
            list.push(0);
        }
        if size == 0 {
            reply.size(list.len() as u32);
        } else if (size as usize) < list.len() {
            reply.error(Errno::ERANGE);
        } else {
            reply.data(&list);
        }
    }

    fn removexattr(&self, _req: &Request, xattr: &RemoveXattr<'_>, reply: ReplyEmpty) {
        let RemoveXattr { ino, name } = *xattr;
        let c = tri!(reply, self.get(ino));
        let mut n = wr(&c.node);
        if n.xattrs.remove(name.as_bytes()).is_none() {
            reply.error(Errno::NO_XATTR);
            return;
        }
        n.ctime = SystemTime::now();
        reply.ok();
    }

    /// The kernel checks permissions itself (`default_permissions`): only
    /// whether the node exists is answered here.
    fn access(&self, _req: &Request, access: &Access, reply: ReplyEmpty) {
        tri!(reply, self.get(access.ino));
        reply.ok();
    }

    fn create(&self, req: &Request, create: &Create<'_>, reply: ReplyCreate) {
        let Create { parent, name, mode, umask, flags, .. } = *create;
        let body = Body::File(HashMap::new());
        let a = tri!(reply, self.make(req, parent, name, FileType::RegularFile, mode, umask, body, 0));
        reply.created(&self.ttl(), &a, Generation(0), FileHandle(0), self.features.fopen(flags));
    }

    /// Allocation (mode 0, KEEP_SIZE: the size only, no pages) and
    /// PUNCH_HOLE; other modes are refused.
    fn fallocate(&self, _req: &Request, fallocate: &Fallocate, reply: ReplyEmpty) {
        let Fallocate { ino, offset, length, mode, .. } = *fallocate;
        const KEEP_SIZE: i32 = 0x01;
        const PUNCH_HOLE: i32 = 0x02;
        let c = tri!(reply, self.get(ino));
        let mut n = wr(&c.node);
        let end = tri!(reply, offset.checked_add(length).ok_or(Errno::EFBIG));
        let size = n.size;
        if n.kind != FileType::RegularFile {
            reply.error(Errno::from_i32(libc::ENODEV));
            return;
        }
        match mode {
            0 => n.size = size.max(end),
            KEEP_SIZE => {}
            m if m == PUNCH_HOLE | KEEP_SIZE => {
                if let Body::File(pages) = &mut n.body {
                    self.zero_range(pages, offset, end.min(size));
                }
            }
            _ => {
                reply.error(Errno::EOPNOTSUPP);
                return;
            }
        }
        n.touch_change();
        reply.ok();
    }
}
