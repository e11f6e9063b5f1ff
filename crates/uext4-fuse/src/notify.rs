//! Notifications the daemon sends the kernel unasked, on the connection's
//! `/dev/fuse` descriptor (whatever transport carries the requests):
//! dropping cached attributes, pages or names.

use crate::proto::abi::{self, notify};
use crate::proto::encode;
use crate::proto::types::INodeNo;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

/// Sends notifications on one connection.
#[derive(Debug, Clone)]
pub struct Notifier {
    dev: Arc<OwnedFd>,
}

impl Notifier {
    /// A notifier writing to `dev`.
    pub(crate) fn new(dev: Arc<OwnedFd>) -> Notifier {
        Notifier { dev }
    }

    fn send(&self, code: i32, parts: &[&[u8]]) -> io::Result<()> {
        let len = abi::OUT_HEADER_LEN + parts.iter().map(|p| p.len()).sum::<usize>();
        let h = encode::out_header(len, code, 0);
        let mut all: [&[u8]; 4] = [&h, &[], &[], &[]];
        for (d, p) in all[1..].iter_mut().zip(parts) {
            *d = p;
        }
        crate::session::send(self.dev.as_raw_fd(), &all[..1 + parts.len().min(3)])
    }

    /// Drops the kernel's attributes of `ino` and its cached pages in
    /// `[offset, offset + len)` (`len` 0: to the end; `offset` negative:
    /// the attributes only).
    pub fn inval_inode(&self, ino: INodeNo, offset: i64, len: i64) -> io::Result<()> {
        self.send(notify::INVAL_INODE, &[&encode::notify_inval_inode(ino.0, offset, len)])
    }

    /// Puts `data` into the kernel's page cache of `ino` at `offset`
    /// (FUSE_NOTIFY_STORE), as if a READ had returned it.
    pub fn store(&self, ino: INodeNo, offset: u64, data: &[u8]) -> io::Result<()> {
        let size = u32::try_from(data.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        self.send(notify::STORE, &[&encode::notify_store(ino.0, offset, size), data])
    }
}
