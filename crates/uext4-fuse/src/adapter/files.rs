//! Requests on open files and their data: open (and the file handle it
//! hands out), read, write, release, fsync, fallocate, copy_file_range, lseek and
//! readlink. The handle's bits are all the adapter remembers about an
//! open file, besides the writeback-error cursor of a counted open.

use super::Uext4Fuse;
use crate::conv::from_fuse;
use crate::proto::request::{CopyFileRange, Fallocate, Fsync, Lseek, Open, Read, Readlink, Release, Write};
use crate::proto::types::{Errno, FileHandle, FopenFlags, INodeNo, OpenFlags, Request, WriteFlags};
use crate::reply::{ReplyData, ReplyEmpty, ReplyLseek, ReplyOpen, ReplyWrite};
use log::debug;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use uext4::inode_api::FallocMode;
use uext4::FileType;

/// File handle bit: the file was opened with O_DIRECT; its I/O goes to
/// the library's direct-I/O path.
pub(super) const FH_DIRECT: u64 = 1;
/// File handle bit: the open was counted with `Filesystem::open_inode`
/// (read-write mounts), so release must call `close_inode`.
pub(super) const FH_COUNTED: u64 = 2;
/// File handle bit: the kernel caches this open's pages (no
/// FOPEN_DIRECT_IO); counted in [`CachedOpens`] until release.
const FH_CACHED: u64 = 4;
/// File handle bit: an open without O_DIRECT, through which the kernel
/// may hold the file's pages (cached reads, or a mapping even of a
/// FOPEN_DIRECT_IO open); counted in [`CachedOpens`] until release.
const FH_PAGED: u64 = 8;
/// File handle bits above these four: a counted open's id, the key of its
/// writeback-error cursor (each open file description sees each
/// writeback error of its file once from fsync, as on Linux).
const FH_ID_SHIFT: u32 = 4;

/// Stripes of `CachedOpens::paged`.
const PAGED_STRIPES: usize = 16;

/// Stripes of [`CachedOpens::stripes`]: inodes share a stripe's write
/// counters and pending store, which only costs a store now and then.
const STORE_STRIPES: usize = 64;

/// The opens through which the kernel caches a file's pages, by inode, and
/// what keeps those pages current while another open writes (`store_writes`).
///
/// The kernel drops its cached pages of a range before it sends a write
/// of an open it does not cache (FOPEN_DIRECT_IO, `direct_writes`) and
/// again once the write is answered (Linux 6.18 fs/fuse/file.c,
/// fuse_direct_io, "as in generic_file_direct_write"): readers of a file
/// being written then miss on every page a writer touched, each miss a
/// READ round trip. A store sent while serving the write is dropped by the
/// second invalidation, so the range of each write is stored when the
/// *next* write of the inode arrives: by then the kernel has finished the
/// previous one (while a cached open exists, it sends the writes of a
/// file one at a time, FUSE_I_CACHE_IO_MODE). The bytes stored are read
/// back from the library. A store is skipped when any other write or any
/// READ of the stripe began since the write ended: the kernel may hold
/// pages of the range again, filled by that READ and perhaps dirtied
/// since through a shared mapping, which a store would overwrite. If a
/// write or READ begins while the store is on its way, the range is
/// invalidated after it (the bytes stored may predate that write).
/// What is left: a page a READ fills and a shared mapping dirties within
/// those few microseconds would lose that store (`nostore_writes` rules
/// it out).
#[derive(Debug)]
pub(super) struct CachedOpens {
    opens: Mutex<HashMap<u32, u32>>,
    stripes: Vec<Stripe>,
    /// Opens without O_DIRECT by inode (`FH_PAGED`), striped by inode: an
    /// O_DIRECT WRITE of an inode with one drops the range it wrote from
    /// the kernel's pages before its reply (see `do_write`).
    paged: Vec<Mutex<HashMap<u32, Paged>>>,
}

/// An inode's opens without O_DIRECT (see [`CachedOpens::paged`]).
#[derive(Debug, Default)]
struct Paged {
    /// Open now.
    opens: u32,
    /// Opened so far.
    gen: u64,
    /// `gen` when an invalidation of the whole file was asked for.
    clearing: Option<u64>,
}

/// One stripe of [`CachedOpens`].
#[derive(Debug, Default)]
struct Stripe {
    /// The last write to store.
    pending: Mutex<Option<Pending>>,
    /// Writes of the stripe's inodes begun and ended.
    started: AtomicU64,
    finished: AtomicU64,
    /// READs of the stripe's inodes begun.
    reads: AtomicU64,
}

/// A write whose range [`CachedOpens`] stores at the next write, with the
/// stripe's counters when it ended.
#[derive(Debug)]
struct Pending {
    ino: u32,
    offset: u64,
    len: usize,
    started: u64,
    reads: u64,
}

impl CachedOpens {
    pub(super) fn new() -> CachedOpens {
        CachedOpens {
            opens: Mutex::new(HashMap::new()),
            stripes: (0..STORE_STRIPES).map(|_| Stripe::default()).collect(),
            paged: (0..PAGED_STRIPES).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    fn paged_map(&self, ino: u32) -> std::sync::MutexGuard<'_, HashMap<u32, Paged>> {
        self.paged[ino as usize % PAGED_STRIPES].lock().unwrap_or_else(|p| p.into_inner())
    }

    fn paged_opened(&self, ino: u32) {
        let mut m = self.paged_map(ino);
        let p = m.entry(ino).or_default();
        p.opens += 1;
        p.gen += 1;
    }

    /// The entry stays after the last release: the kernel keeps the pages
    /// that open read (FOPEN_KEEP_CACHE) until an invalidation of the
    /// whole file (`direct_write_inval`) drops them.
    fn paged_released(&self, ino: u32) {
        if let Some(p) = self.paged_map(ino).get_mut(&ino) {
            p.opens = p.opens.saturating_sub(1);
        }
    }

    /// What an O_DIRECT write of `ino` at `offset` of `len` bytes must
    /// drop from the kernel's pages before its reply: nothing if no open
    /// without O_DIRECT was seen since the kernel last held none of the
    /// file's pages; the range while such an open exists; the whole file
    /// (`len` 0) when the last one is closed, after which (see
    /// [`CachedOpens::dropped_all`]) the kernel holds no pages of it.
    fn direct_write_inval(&self, ino: u32, offset: u64, len: usize) -> Option<crate::notify::PageInval> {
        let mut m = self.paged_map(ino);
        let p = m.get_mut(&ino)?;
        let whole = p.opens == 0;
        if whole {
            p.clearing = Some(p.gen);
        }
        Some(crate::notify::PageInval {
            ino: u64::from(ino),
            offset: if whole { 0 } else { i64::try_from(offset).unwrap_or(i64::MAX) },
            len: if whole { 0 } else { len as i64 },
        })
    }

    /// The kernel evicted its inode `ino` (its last FORGET), and its
    /// pages with it: the entry goes (unless an open remains, which the
    /// kernel would not allow). Bounds the map by the inodes the kernel
    /// holds.
    pub(super) fn forgotten(&self, ino: u32) {
        let mut m = self.paged_map(ino);
        if m.get(&ino).is_some_and(|p| p.opens == 0) {
            m.remove(&ino);
        }
    }

    /// The kernel dropped every page of `ino` (after [`Self::direct_write_inval`]
    /// asked for it): unless an open without O_DIRECT came since, nothing
    /// of the file is in its cache, and O_DIRECT writes need no
    /// invalidation until the next such open.
    pub(super) fn dropped_all(&self, ino: u32) {
        let mut m = self.paged_map(ino);
        if let Some(p) = m.get(&ino) {
            if p.opens == 0 && p.clearing == Some(p.gen) {
                m.remove(&ino);
            }
        }
    }

    fn stripe(&self, ino: u32) -> &Stripe {
        &self.stripes[ino as usize % STORE_STRIPES]
    }

    fn opened(&self, ino: u32) {
        *self.opens.lock().unwrap_or_else(|p| p.into_inner()).entry(ino).or_insert(0) += 1;
    }

    fn released(&self, ino: u32) {
        let mut m = self.opens.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                m.remove(&ino);
            }
        }
    }

    fn any(&self, ino: u32) -> bool {
        self.opens.lock().unwrap_or_else(|p| p.into_inner()).contains_key(&ino)
    }
}

/// fallocate(2) mode bits.
const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;
const FALLOC_FL_ZERO_RANGE: i32 = 0x10;
const FALLOC_FL_COLLAPSE_RANGE: i32 = 0x08;
const FALLOC_FL_INSERT_RANGE: i32 = 0x20;

/// lseek(2) whence values FUSE forwards.
const SEEK_DATA: i32 = 3;
const SEEK_HOLE: i32 = 4;

impl Uext4Fuse {
    /// Counts an open handle (read-write mounts) and builds the handle and
    /// the open flags of the reply.
    pub(super) fn open_handle(&self, ino: u32, flags: i32) -> (FileHandle, FopenFlags) {
        let counted = !self.read_only
            && match self.fs.open_inode(ino) {
                Ok(()) => true,
                Err(e) => {
                    debug!("open_inode({ino}): {e}");
                    false
                }
            };
        self.handle(ino, flags, counted)
    }

    /// The handle and open flags of an open of `ino`; `counted`: the
    /// library counts it (release closes it).
    pub(super) fn handle(&self, ino: u32, flags: i32, counted: bool) -> (FileHandle, FopenFlags) {
        let direct = flags & libc::O_DIRECT != 0;
        let mut fh = if direct { FH_DIRECT } else { 0 };
        if counted {
            fh |= FH_COUNTED | (self.next_fh.fetch_add(1, Ordering::Relaxed) << FH_ID_SHIFT);
            let sample = self.fs.wb_err_sample(ino);
            self.wb_cursors.lock().unwrap_or_else(|p| p.into_inner()).insert(fh, sample);
        }
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let fopen = self.features.fopen(flags);
        if !fopen.contains(FopenFlags::FOPEN_DIRECT_IO) && fh & FH_COUNTED != 0 {
            fh |= FH_CACHED;
            self.cached_opens.opened(ino);
        }
        if !direct && fh & FH_COUNTED != 0 {
            fh |= FH_PAGED;
            self.cached_opens.paged_opened(ino);
        }
        let access = if writes { "" } else { " (read-only)" };
        debug!("open {ino}{access}: {fopen:?}");
        (FileHandle(fh), fopen)
    }

    fn is_direct(fh: FileHandle, flags: OpenFlags) -> bool {
        fh.0 & FH_DIRECT != 0 || flags.0 & libc::O_DIRECT != 0
    }

    pub(super) fn fsync_ino(&self, op: &str, ino: INodeNo) -> Result<(), Errno> {
        let ino = from_fuse(ino)?;
        if self.read_only {
            return self.stat(op, ino).map(|_| ());
        }
        self.fs.fsync(ino).map_err(|e| self.fail(op, ino, e))
    }

    /// Everything the filesystem holds made durable: dirty data written
    /// back and the journal committed, as ext4's sync_fs (FUSE_SYNCFS
    /// where the kernel sends it, and [`super::ioctl::UEXT4_IOC_SYNC`]).
    pub(super) fn sync_all(&self, op: &str) -> Result<(), Errno> {
        if self.read_only {
            return Ok(());
        }
        self.fs.commit().map_err(|e| self.fail(op, 0, e))
    }

    pub(super) fn do_readlink(&self, readlink: &Readlink, reply: ReplyData) {
        let ino = tri!(reply, from_fuse(readlink.ino));
        let target = tri!(reply, self.fs.readlink(ino).map_err(|e| self.fail("readlink", ino, e)));
        reply.data(&target);
    }

    pub(super) fn do_open(&self, open: &Open, reply: ReplyOpen) {
        // FUSE_OPEN_KILL_SUIDGID (O_TRUNC by a caller without CAP_FSETID)
        // needs nothing here: without FUSE_ATOMIC_O_TRUNC the kernel
        // truncates with a SETATTR of its own (see do_setattr).
        let Open { ino, flags, open_flags: _ } = *open;
        let ino = tri!(reply, from_fuse(ino));
        let st = tri!(reply, self.stat("open", ino));
        if st.file_type == FileType::Directory {
            reply.error(Errno::EISDIR);
            return;
        }
        tri!(reply, super::ioctl::open_allowed(st.flags, flags.0));
        let (fh, fopen) = self.open_handle(ino, flags.0);
        reply.opened(fh, fopen);
    }

    pub(super) fn do_read(&self, read: &Read, reply: ReplyData) {
        // Read straight into the reply buffer (at most `size` bytes of
        // it, which the reply knows).
        let Read { ino, fh, offset, size: _, flags, lock_owner: _ } = *read;
        reply.fill(|buf| self.read_into(ino, fh, offset, flags, buf));
    }

    /// READ into `buf` (as much as it holds): for the reply buffer and for
    /// the io_uring transport, which reads straight into its ring buffer.
    pub(crate) fn read_into(
        &self,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        flags: OpenFlags,
        buf: &mut [u8],
    ) -> Result<usize, Errno> {
        let ino = from_fuse(ino)?;
        if self.down.load(Ordering::Acquire) {
            // After FS_IOC_SHUTDOWN reads fail too, as on ext4 (pages the
            // kernel has cached are still served by it).
            return Err(Errno::EIO);
        }
        self.cached_opens.stripe(ino).reads.fetch_add(1, Ordering::SeqCst);
        let r = if Self::is_direct(fh, flags) {
            self.fs.read_direct(ino, offset, buf)
        } else {
            self.fs.inodes().read(ino, offset, buf)
        };
        r.map_err(|e| self.fail("read", ino, e))
    }

    /// READ for a thread that should not wait on the device (an io_uring
    /// queue): `None` when the read would (a buffered read missing the
    /// page cache, or any read of a read-only mount), so that the caller
    /// hands it to a thread that may wait and calls [`Self::read_into`].
    /// Direct reads are served: they always go to the device, and a queue
    /// takes only small ones (see `uring::queue`).
    pub(crate) fn read_fast(&self, read: &Read, buf: &mut [u8]) -> Option<Result<usize, Errno>> {
        let Read { ino, fh, offset, size: _, flags, lock_owner: _ } = *read;
        if Self::is_direct(fh, flags) {
            return Some(self.read_into(ino, fh, offset, flags, buf));
        }
        let Ok(n) = from_fuse(ino) else { return Some(Err(Errno::EINVAL)) };
        if self.down.load(Ordering::Acquire) {
            return Some(Err(Errno::EIO));
        }
        // Counted before the read, as in read_into (a miss counts twice:
        // harmless, the count only has to move when a read may happen).
        self.cached_opens.stripe(n).reads.fetch_add(1, Ordering::SeqCst);
        match self.fs.inodes().read_cached(n, offset, buf) {
            Ok(None) => None,
            r => Some(r.map(|n| n.unwrap_or(0)).map_err(|e| self.fail("read", n, e))),
        }
    }

    pub(super) fn do_write(&self, req: &Request, write: &Write<'_>, reply: ReplyWrite) {
        let Write { ino, fh, offset, data, write_flags, flags, lock_owner: _ } = *write;
        let kill_suidgid = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        // The kernel's own write-back of its page cache (writeback_cache).
        let from_cache = write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        tri!(reply, self.writable());
        let ino = tri!(reply, from_fuse(ino));
        if kill_suidgid {
            // FUSE_HANDLE_KILLPRIV_V2: the kernel found the writer without
            // CAP_FSETID and left file_remove_privs to us; its groups still
            // decide a set-group-ID bit without group-execute.
            let mut c = super::entries::cred(req);
            c.cap_fsetid = false;
            if tri!(reply, self.fs.remove_privs(ino, &c).map_err(|e| self.fail("write", ino, e))) {
                // The write's reply carries no attributes: the kernel would
                // show the old mode until its cache times out.
                self.inval_attrs(ino);
            }
        }
        let store = fh.0 & (FH_CACHED | FH_DIRECT) == 0 && self.features.store_writes && self.cached_opens.any(ino);
        let stripe = self.cached_opens.stripe(ino);
        if store {
            self.store_pending(ino, stripe);
        }
        // O_SYNC and O_DSYNC (and RWF_SYNC/RWF_DSYNC, and every write on a
        // `sync` mount) arrive in the WRITE's flags (fs/fuse/file.c,
        // fuse_write_flags). Through a FOPEN_DIRECT_IO open the kernel
        // sends no FSYNC after the write (its direct path never calls
        // generic_write_sync): the write is made durable here, before
        // the reply, by the path a `chattr +S` file takes.
        let sync = crate::slow::sync_write(flags.0);
        stripe.started.fetch_add(1, Ordering::SeqCst);
        let r = if Self::is_direct(fh, flags) {
            self.fs.write_direct_synced(ino, offset, data, sync)
        } else {
            self.fs.inodes().write_synced(ino, offset, data, sync)
        };
        stripe.finished.fetch_add(1, Ordering::SeqCst);
        let n = tri!(reply, r.map_err(|e| self.fail("write", ino, e)));
        if store {
            let (started, reads) = (stripe.started.load(Ordering::SeqCst), stripe.reads.load(Ordering::SeqCst));
            *stripe.pending.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(Pending { ino, offset, len: n, started, reads });
        }
        let written = u32::try_from(n).unwrap_or(u32::MAX);
        // An O_DIRECT write may be asynchronous (AIO, io_uring), and then
        // the kernel drops its pages of the range only before sending it
        // and when it is sent, never once it is answered (Linux 6.18
        // fuse_direct_io, fuse_aio_complete): a page a buffered reader or
        // a mapping filled meanwhile keeps the old bytes after the write
        // completed (fstests generic/451). So the range is dropped before
        // the reply, when the kernel may hold pages of the file: an open
        // without O_DIRECT exists. Not for the kernel's own write-back
        // (FUSE_WRITE_CACHE: those pages are the new bytes, and dropping
        // them would wait for this very write) nor for writes through
        // other FOPEN_DIRECT_IO opens: those are synchronous, and the
        // kernel drops the range itself once they are answered.
        let inval = (n > 0 && !from_cache && Self::is_direct(fh, flags))
            .then(|| self.cached_opens.direct_write_inval(ino, offset, n))
            .flatten();
        if let Some(inval) = inval {
            reply.written_after_inval(written, inval);
            return;
        }
        reply.written(written);
    }

    /// Puts the range of the stripe's last write, if it was to `ino`, as
    /// the library now holds it, into the kernel's cached pages (see
    /// [`CachedOpens`]). Only for buffered writes: O_DIRECT writers keep
    /// the kernel's dropping of the range (their data is not in the
    /// library's page cache, and reading it back would put it there).
    fn store_pending(&self, ino: u32, stripe: &Stripe) {
        let Some(n) = self.inval.get() else { return };
        let Some(p) = stripe.pending.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        let quiet = |s: &Stripe| {
            s.started.load(Ordering::SeqCst) == p.started
                && s.finished.load(Ordering::SeqCst) == p.started
                && s.reads.load(Ordering::SeqCst) == p.reads
        };
        if p.ino != ino || !quiet(stripe) {
            return;
        }
        let (offset, len) = (p.offset, p.len);
        let mut buf = vec![0u8; len.min(self.features.max_write as usize)];
        let got = match self.fs.inodes().read(ino, offset, &mut buf) {
            Ok(got) => got,
            Err(e) => {
                debug!("store of inode {ino} at {offset}: reading back: {e}");
                return;
            }
        };
        if got == 0 {
            return;
        }
        let node = INodeNo(u64::from(ino));
        if let Err(e) = n.store(node, offset, &buf[..got]) {
            debug!("store of inode {ino} at {offset}+{got}: {e}");
        }
        if !quiet(stripe) {
            // A write or READ began meanwhile: what was stored may predate it.
            if let Err(e) = n.inval_inode(node, i64::try_from(offset).unwrap_or(i64::MAX), got as i64) {
                debug!("invalidating inode {ino} at {offset}+{got}: {e}");
            }
        }
    }

    pub(super) fn do_release(&self, release: &Release, reply: ReplyEmpty) {
        // Nothing to flush (see `flush` in the adapter) and no POSIX locks
        // of ours to drop: the handle's bits say all there is to undo.
        let Release { ino, fh, flags: _, lock_owner: _, flush: _ } = *release;
        let ino = tri!(reply, from_fuse(ino));
        if fh.0 & FH_CACHED != 0 {
            self.cached_opens.released(ino);
        }
        if fh.0 & FH_PAGED != 0 {
            self.cached_opens.paged_released(ino);
        }
        if fh.0 & FH_COUNTED != 0 {
            self.wb_cursors.lock().unwrap_or_else(|p| p.into_inner()).remove(&fh.0);
            // The last close of an unlinked file deletes it.
            tri!(reply, self.fs.close_inode(ino).map_err(|e| self.fail("release", ino, e)));
        }
        reply.ok();
    }

    pub(super) fn do_fsync(&self, fsync: &Fsync, reply: ReplyEmpty) {
        // fdatasync is served as fsync (`datasync` is not told apart).
        let Fsync { ino, fh, datasync: _ } = *fsync;
        let cursor = self.wb_cursors.lock().unwrap_or_else(|p| p.into_inner()).get(&fh.0).copied();
        if let (Some(mut c), false) = (cursor, self.read_only) {
            let ino = tri!(reply, from_fuse(ino));
            let r = self.fs.fsync_file(ino, &mut c);
            // Only this description's cursor moves.
            if let Some(v) = self.wb_cursors.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&fh.0) {
                *v = (*v).max(c);
            }
            tri!(reply, r.map_err(|e| self.fail("fsync", ino, e)));
            reply.ok();
            return;
        }
        tri!(reply, self.fsync_ino("fsync", ino));
        reply.ok();
    }

    /// file_modified for a request that carries no kill flag (fallocate):
    /// under FUSE_HANDLE_KILLPRIV_V2 the kernel leaves removing the set-id
    /// bits to us, by the caller's capabilities and groups.
    pub(super) fn kill_privs(&self, req: &Request, ino: INodeNo, op: &str) -> Result<(), Errno> {
        self.writable()?;
        let ino = from_fuse(ino)?;
        if self.stat(op, ino)?.mode & 0o6000 == 0 {
            return Ok(());
        }
        if self.fs.remove_privs(ino, &super::entries::cred(req)).map_err(|e| self.fail(op, ino, e))? {
            self.inval_attrs(ino);
        }
        Ok(())
    }

    pub(super) fn do_fallocate(&self, fallocate: &Fallocate, reply: ReplyEmpty) {
        let Fallocate { ino, fh: _, offset, length, mode } = *fallocate;
        tri!(reply, self.writable());
        let ino = tri!(reply, from_fuse(ino));
        let fs = &self.fs;
        let r = match mode {
            0 => fs.fallocate(ino, FallocMode::Allocate, offset, length),
            FALLOC_FL_KEEP_SIZE => fs.fallocate(ino, FallocMode::KeepSize, offset, length),
            m if m == FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE => {
                fs.fallocate(ino, FallocMode::PunchHole, offset, length)
            }
            FALLOC_FL_ZERO_RANGE => fs.fallocate(ino, FallocMode::ZeroRange, offset, length),
            m if m == FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE => {
                // Zero what lies inside the file, preallocate the rest
                // without growing it.
                let size = tri!(reply, self.stat("fallocate", ino)).size;
                let Some(end) = offset.checked_add(length) else {
                    reply.error(Errno::EFBIG);
                    return;
                };
                if offset >= size {
                    fs.fallocate(ino, FallocMode::KeepSize, offset, length)
                } else if end <= size {
                    fs.fallocate(ino, FallocMode::ZeroRange, offset, length)
                } else {
                    fs.fallocate(ino, FallocMode::ZeroRange, offset, size - offset)
                        .and_then(|()| fs.fallocate(ino, FallocMode::KeepSize, size, end - size))
                }
            }
            FALLOC_FL_COLLAPSE_RANGE => fs.fallocate(ino, FallocMode::CollapseRange, offset, length),
            FALLOC_FL_INSERT_RANGE => fs.fallocate(ino, FallocMode::InsertRange, offset, length),
            // vfs_fallocate: collapse and insert take no other flag.
            m if m & (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE) != 0 => {
                reply.error(Errno::EINVAL);
                return;
            }
            // Unshare (ext4 shares no blocks), a punch without KEEP_SIZE,
            // unknown bits: EOPNOTSUPP, as ext4_fallocate. (The kernel's
            // FUSE passes only KEEP_SIZE, PUNCH_HOLE and ZERO_RANGE on.)
            _ => {
                reply.error(Errno::EOPNOTSUPP);
                return;
            }
        };
        tri!(reply, r.map_err(|e| self.fail("fallocate", ino, e)));
        reply.ok();
    }

    pub(super) fn do_copy_file_range(&self, copy: &CopyFileRange, reply: ReplyWrite) {
        // The flags are 0: copy_file_range(2) refuses others before FUSE.
        let CopyFileRange { ino: ino_in, fh_in: _, offset_in, ino_out, fh_out: _, offset_out, len, flags: _, wide: _ } =
            *copy;
        tri!(reply, self.writable());
        let ino_in = tri!(reply, from_fuse(ino_in));
        let ino_out = tri!(reply, from_fuse(ino_out));
        // COPY_FILE_RANGE counts bytes in 32 bits: a longer request is
        // copied in part (a short copy, which the caller repeats);
        // COPY_FILE_RANGE_64 takes the whole range.
        let len = if reply.is_wide() { len } else { len.min(u64::from(u32::MAX) & !0xFFF) };
        let r = self.fs.copy_file_range(ino_in, offset_in, ino_out, offset_out, len);
        let n = tri!(reply, r.map_err(|e| self.fail("copy_file_range", ino_out, e)));
        reply.written_u64(n);
    }

    pub(super) fn do_lseek(&self, lseek: &Lseek, reply: ReplyLseek) {
        let Lseek { ino, fh: _, offset, whence } = *lseek;
        let ino = tri!(reply, from_fuse(ino));
        let Ok(offset) = u64::try_from(offset) else {
            reply.error(Errno::ENXIO);
            return;
        };
        let r = match whence {
            SEEK_DATA => self.fs.seek_data(ino, offset),
            SEEK_HOLE => self.fs.seek_hole(ino, offset),
            // SEEK_SET/CUR/END are the kernel's.
            _ => {
                reply.error(Errno::EINVAL);
                return;
            }
        };
        match tri!(reply, r.map_err(|e| self.fail("lseek", ino, e))) {
            Some(pos) => reply.offset(i64::try_from(pos).unwrap_or(i64::MAX)),
            None => reply.error(Errno::ENXIO),
        }
    }
}
