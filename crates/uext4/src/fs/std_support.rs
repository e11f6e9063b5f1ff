//! What the std-like API ([`crate::std_api`]) needs of the owning handle:
//! the inode-level API by an explicit name (the std-like methods of the
//! same names shadow it through `Deref`), and the shared core that a
//! [`crate::File`] keeps alive past any borrow of the [`Filesystem`].

use super::{Filesystem, FsCore};
use std::sync::Arc;

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
    pub(crate) fn new_file_defaults(&self) -> &crate::std_api::NewFileDefaults {
        &self.new_files
    }
}
