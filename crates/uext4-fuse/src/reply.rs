//! The reply objects the adapter answers through, one per kind of reply
//! (entry, attributes, data, ...): each writes its reply into the
//! transport's reply buffer ([`Out`]) and is consumed by doing so. A
//! reply dropped unanswered is answered EIO by the transport.

use crate::proto::abi;
use crate::proto::encode;
use crate::proto::types::{Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

/// Where one reply goes: the payload area after the out header (in the
/// `/dev/fuse` worker's buffer, or a ring entry's payload buffer), and
/// the outcome once a reply object has answered.
#[derive(Debug)]
pub struct Out<'b> {
    buf: &'b mut [u8],
    len: usize,
    error: i32,
    done: bool,
    inval: Option<crate::notify::PageInval>,
}

impl<'b> Out<'b> {
    /// A reply into `buf`.
    pub fn new(buf: &'b mut [u8]) -> Out<'b> {
        Out { buf, len: 0, error: 0, done: false, inval: None }
    }

    /// The pages the kernel must drop before this reply is sent (a direct
    /// WRITE's range; see [`ReplyWrite::written_after_inval`]): the
    /// transport then hands the sending of the reply to
    /// [`crate::Backend::after_inval`].
    pub fn inval_first(&self) -> Option<crate::notify::PageInval> {
        if self.error == 0 {
            self.inval
        } else {
            None
        }
    }

    /// `Some((error, payload length))` once answered (error 0 or a
    /// negative errno).
    pub fn result(&self) -> Option<(i32, usize)> {
        self.done.then_some((self.error, self.len))
    }

    /// The payload bytes of the answer.
    pub fn payload(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// The sink the reply objects write into (object-safe, so that reply
/// types need one lifetime only).
pub trait Sink {
    /// The payload area.
    fn area(&mut self) -> &mut [u8];
    /// The reply is complete.
    fn commit(&mut self, error: i32, len: usize);
    /// The reply is to be sent only once the kernel dropped `inval`'s
    /// pages.
    fn inval_first(&mut self, inval: crate::notify::PageInval);
}

impl Sink for Out<'_> {
    fn area(&mut self) -> &mut [u8] {
        self.buf
    }
    fn commit(&mut self, error: i32, len: usize) {
        self.error = error;
        self.len = if error == 0 { len.min(self.buf.len()) } else { 0 };
        self.done = true;
    }
    fn inval_first(&mut self, inval: crate::notify::PageInval) {
        self.inval = Some(inval);
    }
}

/// What every reply object holds.
struct Replier<'r> {
    out: &'r mut dyn Sink,
}

impl Replier<'_> {
    fn error(self, e: Errno) {
        self.out.commit(-e.code(), 0);
    }

    /// Replies with the concatenation of `parts` (EIO if the buffer, sized
    /// for the largest reply negotiated, cannot hold it).
    fn send(self, parts: &[&[u8]]) {
        let area = self.out.area();
        let mut at = 0;
        for p in parts {
            match area.get_mut(at..at + p.len()) {
                Some(d) => d.copy_from_slice(p),
                None => {
                    log::warn!("reply of more than {} bytes dropped", area.len());
                    self.out.commit(-libc::EIO, 0);
                    return;
                }
            }
            at += p.len();
        }
        self.out.commit(0, at);
    }
}

macro_rules! reply_type {
    ($(#[$m:meta])* $name:ident $({ $($f:ident: $t:ty),* })?) => {
        $(#[$m])*
        pub struct $name<'r> {
            r: Replier<'r>,
            $($($f: $t,)*)?
        }

        impl<'r> $name<'r> {
            /// Answers with an error.
            #[allow(dead_code)]
            pub fn error(self, e: Errno) {
                self.r.error(e);
            }
        }
    };
}

reply_type!(
    /// An empty success (or an error).
    ReplyEmpty
);
reply_type!(
    /// `fuse_entry_out`.
    ReplyEntry
);
reply_type!(
    /// `fuse_attr_out`.
    ReplyAttr
);
reply_type!(
    /// Bytes (READ, READLINK), at most `max` of them.
    ReplyData { max: usize }
);
reply_type!(
    /// `fuse_open_out`.
    ReplyOpen
);
reply_type!(
    /// `fuse_write_out`, or the 64-bit count of COPY_FILE_RANGE_64.
    ReplyWrite { wide: bool }
);
reply_type!(
    /// `fuse_entry_out` and `fuse_open_out` (CREATE, TMPFILE).
    ReplyCreate
);
reply_type!(
    /// `fuse_statfs_out`.
    ReplyStatfs
);
reply_type!(
    /// A size (`fuse_getxattr_out`) or the data.
    ReplyXattr
);
reply_type!(
    /// `fuse_lseek_out`.
    ReplyLseek
);
reply_type!(
    /// `fuse_ioctl_out` and the output data.
    ReplyIoctl
);
reply_type!(
    /// `fuse_bmap_out`.
    ReplyBmap
);
reply_type!(
    /// `fuse_statx_out`.
    ReplyStatx
);
reply_type!(
    /// `fuse_dirent`s, up to the size the kernel asked for.
    ReplyDirectory { max: usize, used: usize }
);
reply_type!(
    /// `fuse_direntplus`es, up to the size the kernel asked for.
    ReplyDirectoryPlus { max: usize, used: usize }
);

impl<'r> ReplyEmpty<'r> {
    /// A reply through `out`.
    pub fn new(out: &'r mut dyn Sink) -> Self {
        ReplyEmpty { r: Replier { out } }
    }
    /// Success.
    pub fn ok(self) {
        self.r.send(&[]);
    }
}

impl<'r> ReplyEntry<'r> {
    /// A reply through `out`.
    pub fn new(out: &'r mut dyn Sink) -> Self {
        ReplyEntry { r: Replier { out } }
    }
    /// The entry, with separate lifetimes for its attributes and its name.
    pub fn entry_with_ttls(self, attr_ttl: &Duration, entry_ttl: &Duration, attr: &FileAttr, generation: Generation) {
        self.r.send(&[&encode::entry_out(*attr_ttl, *entry_ttl, attr, generation)]);
    }
}

impl<'r> ReplyAttr<'r> {
    /// A reply through `out`.
    pub fn new(out: &'r mut dyn Sink) -> Self {
        ReplyAttr { r: Replier { out } }
    }
    /// The attributes.
    pub fn attr(self, ttl: &Duration, attr: &FileAttr) {
        self.r.send(&[&encode::attr_out(*ttl, attr)]);
    }
}

impl<'r> ReplyStatx<'r> {
    /// A reply through `out`.
    pub fn new(out: &'r mut dyn Sink) -> Self {
        ReplyStatx { r: Replier { out } }
    }
    /// The attributes, with the creation time if `btime`, and the
    /// `STATX_ATTR_*` bits `attributes`.
    pub fn statx(self, ttl: &Duration, attr: &FileAttr, btime: bool, attributes: u64) {
        self.r.send(&[&encode::statx_out(*ttl, attr, btime, attributes)]);
    }
}

impl<'r> ReplyData<'r> {
    /// A reply through `out` of at most `max` bytes.
    pub fn new(out: &'r mut dyn Sink, max: usize) -> Self {
        ReplyData { r: Replier { out }, max }
    }
    /// These bytes (cut to the size asked for).
    pub fn data(self, data: &[u8]) {
        let n = data.len().min(self.max);
        self.r.send(&[&data[..n]]);
    }
    /// Fills the reply buffer in place: `f` gets room for the size asked
    /// for and returns how much it wrote (no copy of the data).
    pub fn fill(self, f: impl FnOnce(&mut [u8]) -> Result<usize, Errno>) {
        let area = self.r.out.area();
        let n = self.max.min(area.len());
        match f(&mut area[..n]) {
            Ok(len) => self.r.out.commit(0, len.min(n)),
            Err(e) => self.r.error(e),
        }
    }
}

impl<'r> ReplyOpen<'r> {
    /// A reply through `out`.
    pub fn new(out: &'r mut dyn Sink) -> Self {
        ReplyOpen { r: Replier { out } }
    }
    /// The handle and its open flags.
    pub fn opened(self, fh: FileHandle, flags: FopenFlags) {
        self.r.send(&[&encode::open_out(fh.0, flags)]);
    }
}

impl<'r> ReplyWrite<'r> {
    /// A reply through `out` (`wide`: a 64-bit count).
    pub fn new(out: &'r mut dyn Sink, wide: bool) -> Self {
        ReplyWrite { r: Replier { out }, wide }
    }
    /// True if the count may exceed 32 bits (COPY_FILE_RANGE_64).
    pub fn is_wide(&self) -> bool {
        self.wide
    }
    /// Bytes written.
    pub fn written(self, size: u32) {
        self.written_u64(u64::from(size));
    }
    /// Bytes written, the reply to be sent only after the kernel dropped
    /// its cached pages of `inval` (see [`crate::notify::Notifier::inval_then`]).
    pub fn written_after_inval(self, size: u32, inval: crate::notify::PageInval) {
        self.r.out.inval_first(inval);
        self.written(size);
    }
    /// Bytes written, up to 64 bits where the request allows (else
    /// clamped to 32).
    pub fn written_u64(self, size: u64) {
        if self.wide {
            self.r.send(&[&encode::u64_out(size)]);
        } else {
            self.r.send(&[&encode::u32_out(u32::try_from(size).unwrap_or(u32::MAX))]);
        }
    }
}

impl<'r> ReplyCreate<'r> {
    /// A reply through `out`.
    pub fn new(out: &'r mut dyn Sink) -> Self {
        ReplyCreate { r: Replier { out } }
    }
    /// The new entry and its open handle.
    pub fn created(self, ttl: &Duration, attr: &FileAttr, generation: Generation, fh: FileHandle, flags: FopenFlags) {
        self.r.send(&[&encode::entry_out(*ttl, *ttl, attr, generation), &encode::open_out(fh.0, flags)]);
    }
}

impl<'r> ReplyStatfs<'r> {
    /// A reply through `out`.
    pub fn new(out: &'r mut dyn Sink) -> Self {
        ReplyStatfs { r: Replier { out } }
    }
    /// The filesystem's statistics.
    #[allow(clippy::too_many_arguments)]
    pub fn statfs(
        self,
        blocks: u64,
        bfree: u64,
        bavail: u64,
        files: u64,
        ffree: u64,
        bsize: u32,
        namelen: u32,
        frsize: u32,
    ) {
        self.r.send(&[&encode::statfs_out(blocks, bfree, bavail, files, ffree, bsize, namelen, frsize)]);
    }
}

impl<'r> ReplyXattr<'r> {
    /// A reply through `out`.
    pub fn new(out: &'r mut dyn Sink) -> Self {
        ReplyXattr { r: Replier { out } }
    }
    /// The size the value (or list) needs.
    pub fn size(self, size: u32) {
        self.r.send(&[&encode::u32_out(size)]);
    }
    /// The value (or list).
    pub fn data(self, data: &[u8]) {
        self.r.send(&[data]);
    }
}

impl<'r> ReplyLseek<'r> {
    /// A reply through `out`.
    pub fn new(out: &'r mut dyn Sink) -> Self {
        ReplyLseek { r: Replier { out } }
    }
    /// The new offset.
    pub fn offset(self, offset: i64) {
        self.r.send(&[&encode::u64_out(offset as u64)]);
    }
}

impl<'r> ReplyIoctl<'r> {
    /// A reply through `out`.
    pub fn new(out: &'r mut dyn Sink) -> Self {
        ReplyIoctl { r: Replier { out } }
    }
    /// The ioctl's result and output.
    pub fn ioctl(self, result: i32, data: &[u8]) {
        self.r.send(&[&encode::ioctl_out(result), data]);
    }
}

impl<'r> ReplyBmap<'r> {
    /// A reply through `out` (bmap serves fuseblk mounts only: uext4
    /// answers ENOSYS).
    pub fn new(out: &'r mut dyn Sink) -> Self {
        ReplyBmap { r: Replier { out } }
    }
}

impl<'r> ReplyDirectory<'r> {
    /// A listing of at most `max` bytes through `out`.
    pub fn new(out: &'r mut dyn Sink, max: usize) -> Self {
        ReplyDirectory { r: Replier { out }, max, used: 0 }
    }
    /// The most entries that could still be added (each takes at least
    /// a header and a one-byte name, padded), so that a caller fetches no
    /// more than that.
    pub fn room(&mut self) -> usize {
        let end = self.max.min(self.r.out.area().len());
        end.saturating_sub(self.used) / (abi::DIRENT_LEN + 1).next_multiple_of(8)
    }
    /// Adds an entry; true if the reply is full (it was not added).
    pub fn add(&mut self, ino: INodeNo, offset: u64, kind: FileType, name: &OsStr) -> bool {
        let area = self.r.out.area();
        let end = self.max.min(area.len());
        let Some(room) = area.get_mut(self.used..end) else { return true };
        match encode::dirent(room, ino, offset, kind.dirent_type(), name.as_bytes()) {
            Some(n) => {
                self.used += n;
                false
            }
            None => true,
        }
    }
    /// Sends what was added.
    pub fn ok(self) {
        self.r.out.commit(0, self.used);
    }
}

impl<'r> ReplyDirectoryPlus<'r> {
    /// A listing of at most `max` bytes through `out`.
    pub fn new(out: &'r mut dyn Sink, max: usize) -> Self {
        ReplyDirectoryPlus { r: Replier { out }, max, used: 0 }
    }
    /// The most entries that could still be added (see
    /// [`ReplyDirectory::room`]).
    pub fn room(&mut self) -> usize {
        let end = self.max.min(self.r.out.area().len());
        end.saturating_sub(self.used) / (abi::ENTRY_OUT_LEN + (abi::DIRENT_LEN + 1).next_multiple_of(8))
    }
    /// Adds an entry with its attributes; true if the reply is full.
    pub fn add(
        &mut self,
        ino: INodeNo,
        offset: u64,
        name: &OsStr,
        ttl: &Duration,
        attr: &FileAttr,
        generation: Generation,
    ) -> bool {
        let mut a = *attr;
        a.ino = ino;
        let entry = encode::entry_out(*ttl, *ttl, &a, generation);
        let area = self.r.out.area();
        let end = self.max.min(area.len());
        let Some(room) = area.get_mut(self.used..end) else { return true };
        match encode::direntplus(room, &entry, offset, attr.kind.dirent_type(), name.as_bytes()) {
            Some(n) => {
                self.used += n;
                false
            }
            None => true,
        }
    }
    /// Sends what was added.
    pub fn ok(self) {
        self.r.out.commit(0, self.used);
    }
}

/// Room every reply buffer needs besides data: the largest fixed reply.
pub const FIXED_REPLY_MAX: usize = abi::STATX_OUT_LEN + abi::ENTRY_OUT_LEN;
