//! Requests on open directories: opendir, readdir and readdirplus (in
//! batches from the library, skipping entries that point at inodes the
//! adapter cannot serve) and fsyncdir.

use super::Uext4Fuse;
use crate::conv::{attr, from_fuse, is_servable, kind, to_fuse};
use crate::proto::request::{Fsync, Opendir, Readdir};
use crate::proto::types::{Errno, FileHandle, FopenFlags, Generation};
use crate::reply::{ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyOpen};
use log::{debug, warn};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;
use uext4::inode_api::{DirBatch, DirEntryRef};
use uext4::{FileType, Stat, Timestamp};

impl Uext4Fuse {
    /// The file type of a directory entry, from the entry or the inode.
    fn entry_kind(&self, e: &DirEntryRef<'_>) -> crate::proto::types::FileType {
        match e.file_type {
            Some(t) => kind(t),
            None => self.fs.stat(e.ino).map_or(crate::proto::types::FileType::RegularFile, |st| kind(st.file_type)),
        }
    }

    /// Fills a readdir reply from `cookie` on, asking the library for at
    /// most `room` entries at a time (what the reply could still hold:
    /// `room` is given the entries added so far); `add` returns true when
    /// the reply is full (that entry was not added). One batch of
    /// buffers serves the whole reply: nothing is allocated per entry.
    fn fill_dir(
        &self,
        ino: u32,
        cookie: u64,
        room: usize,
        mut add: impl FnMut(&DirEntryRef<'_>) -> bool,
    ) -> Result<(), Errno> {
        let mut cookie = cookie;
        let mut added = 0usize;
        let mut batch = DirBatch::new();
        loop {
            // At least one: a reply too small for the smallest entry
            // still reports the directory's error, or its end.
            let want = room.saturating_sub(added).max(1);
            match self.fs.readdir_into(ino, cookie, want, &mut batch) {
                Ok(()) => {}
                // Entries already added are returned; the next call from
                // their cookie reports the error.
                Err(e) if added > 0 => {
                    debug!("readdir({ino}) after {added} entries: {e}");
                    return Ok(());
                }
                Err(e) => return Err(self.fail("readdir", ino, e)),
            }
            for e in batch.iter() {
                if is_servable(e.ino) {
                    if add(&e) {
                        return Ok(());
                    }
                    added += 1;
                } else {
                    warn!("readdir({ino}): entry {:?} points at inode {}", String::from_utf8_lossy(e.name), e.ino);
                }
                cookie = e.next_cookie;
            }
            if batch.len() < want {
                return Ok(());
            }
        }
    }

    pub(super) fn do_opendir(&self, opendir: &Opendir, reply: ReplyOpen) {
        // A directory's handle carries nothing: every READDIR names its
        // position by cookie, whatever the open's flags.
        let Opendir { ino, flags: _ } = *opendir;
        let ino = tri!(reply, from_fuse(ino));
        let st = tri!(reply, self.stat("opendir", ino));
        if st.file_type != FileType::Directory {
            reply.error(Errno::ENOTDIR);
            return;
        }
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    pub(super) fn do_readdir(&self, readdir: &Readdir, mut reply: ReplyDirectory) {
        // `size` is the reply's room, which the reply itself knows.
        let Readdir { ino, fh: _, offset, size: _ } = *readdir;
        let ino = tri!(reply, from_fuse(ino));
        let room = reply.room();
        let r = self.fill_dir(ino, offset, room, |e| {
            let kind = self.entry_kind(e);
            reply.add(to_fuse(e.ino), e.next_cookie, kind, OsStr::from_bytes(e.name))
        });
        tri!(reply, r);
        reply.ok();
    }

    pub(super) fn do_readdirplus(&self, readdir: &Readdir, mut reply: ReplyDirectoryPlus) {
        let Readdir { ino, fh: _, offset, size: _ } = *readdir;
        let ino = tri!(reply, from_fuse(ino));
        let zero = Duration::ZERO;
        let ttl = self.features.entry_and_attr_ttl();
        let room = reply.room();
        // Each entry is a lookup: an inode a name may not reach (an xattr
        // value's) is listed with the placeholder, as an error below.
        let r = self.fill_dir(ino, offset, room, |e| {
            let full = match self.fs.named_inode(e.ino).and_then(|_| self.fs.stat(e.ino)) {
                Ok(st) => reply.add(
                    to_fuse(e.ino),
                    e.next_cookie,
                    OsStr::from_bytes(e.name),
                    &ttl,
                    &attr(&st),
                    Self::generation(&st),
                ),
                Err(err) => {
                    // List the name anyway (as readdir on ext4 does); with no
                    // cache lifetime the kernel asks again and gets the error.
                    debug!("readdirplus: stat of inode {}: {err}", e.ino);
                    let mut a = attr(&placeholder(e.ino, e.file_type));
                    a.kind = self.entry_kind(e);
                    reply.add(to_fuse(e.ino), e.next_cookie, OsStr::from_bytes(e.name), &zero, &a, Generation(0))
                }
            };
            // The kernel takes a reference to the node of every entry it
            // is given (a placeholder's too) except "." and ".."
            // (fs/fuse/readdir.c, fuse_direntplus_link). The directory's
            // shared lock, which the kernel holds for the READDIRPLUS,
            // keeps its entries from being unlinked meanwhile.
            if !full && e.name != b"." && e.name != b".." {
                self.hand_out(e.ino);
            }
            full
        });
        tri!(reply, r);
        reply.ok();
    }

    pub(super) fn do_fsyncdir(&self, fsync: &Fsync, reply: ReplyEmpty) {
        // A directory's data is metadata: datasync changes nothing.
        tri!(reply, self.fsync_ino("fsyncdir", fsync.ino));
        reply.ok();
    }
}

/// Attributes for an entry whose inode cannot be read (listed anyway).
pub(super) fn placeholder(ino: u32, t: Option<FileType>) -> Stat {
    let t = t.unwrap_or(FileType::Regular);
    let zero = Timestamp { sec: 0, nsec: 0 };
    Stat {
        ino,
        file_type: t,
        mode: 0,
        nlink: 1,
        uid: 0,
        gid: 0,
        size: 0,
        blocks: 0,
        blksize: 4096,
        rdev: (0, 0),
        atime: zero,
        mtime: zero,
        ctime: zero,
        crtime: None,
        flags: 0,
        generation: 0,
        file_acl: 0,
        projid: 0,
    }
}
