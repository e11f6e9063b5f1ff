//! What the std-like API ([`crate::std_api`]) needs of the owning handle:
//! the inode-level API by an explicit name (the std-like methods of the
//! same names shadow it through `Deref`), and the shared core that a
//! [`crate::File`] keeps alive past any borrow of the [`Filesystem`]; and
//! the owner and umask of the files it creates ([`NewFileDefaults`]),
//! state of the std-like API that the owning handle carries. They live
//! here, below `std_api`, so that the handle does not import its own
//! front end (the layer order of docs/ARCHITECTURE.md).

use super::{Filesystem, FsCore};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Owner and umask of the files and directories the std-like API creates
/// (one per [`Filesystem`]; see [`Filesystem::set_umask`]).
#[derive(Debug)]
pub struct NewFileDefaults {
    umask: AtomicU32,
    uid: AtomicU32,
    gid: AtomicU32,
}

impl Default for NewFileDefaults {
    fn default() -> Self {
        // SAFETY: geteuid and getegid have no preconditions and cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        NewFileDefaults { umask: AtomicU32::new(0o022), uid: AtomicU32::new(uid), gid: AtomicU32::new(gid) }
    }
}

impl NewFileDefaults {
    /// The permission bits a new node asked for with `mode` gets.
    pub(crate) fn masked(&self, mode: u32) -> u16 {
        (mode & !self.umask.load(Ordering::Relaxed) & 0o7777) as u16
    }

    /// The owner of new nodes.
    pub(crate) fn owner(&self) -> (u32, u32) {
        (self.uid.load(Ordering::Relaxed), self.gid.load(Ordering::Relaxed))
    }

    /// Sets the umask (only the permission bits, `0o7777`, count).
    pub(crate) fn set_umask(&self, umask: u32) {
        self.umask.store(umask & 0o7777, Ordering::Relaxed);
    }

    /// The umask.
    pub(crate) fn umask(&self) -> u32 {
        self.umask.load(Ordering::Relaxed)
    }

    /// Sets the owner of new nodes.
    pub(crate) fn set_owner(&self, uid: u32, gid: u32) {
        self.uid.store(uid, Ordering::Relaxed);
        self.gid.store(gid, Ordering::Relaxed);
    }
}

impl Filesystem {
    /// The inode-level API: operations on inode numbers, close to the
    /// request set of FUSE (`lookup`, `create`, `read(ino, offset, buf)`,
    /// `write(ino, offset, data)`, `rename(parent, name, newparent,
    /// newname, flags)`, ...).
    ///
    /// This is the API of the FUSE adapter and of advanced users (image
    /// builders that want inode numbers, tests of the engine). Most
    /// programs want the path-based, `std::fs`-like methods of
    /// [`Filesystem`] and [`crate::File`] instead. `Filesystem` also
    /// dereferences to [`FsCore`]; where a std-like method has the same
    /// name as an inode-level one (`read`, `write`, `rename`, `symlink`),
    /// the std-like one wins, and this method reaches the other.
    pub fn inodes(&self) -> &FsCore {
        &self.core
    }

    /// The shared core, for handles ([`crate::File`], [`crate::ReadDir`])
    /// that outlive a borrow of `self`.
    pub(crate) fn shared_core(&self) -> &Arc<FsCore> {
        &self.core
    }

    /// The defaults of new files created through the std-like API.
    pub(crate) fn new_file_defaults(&self) -> &NewFileDefaults {
        &self.new_files
    }
}
