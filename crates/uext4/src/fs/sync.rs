//! Durability: fsync of one file.

use crate::error::Result;
use crate::fs::FsCore;

impl FsCore {
    /// fsync(2)/fdatasync(2): writes back the file's dirty data, then
    /// commits the transaction that last changed `ino` unless it has
    /// committed already (a device flush otherwise).
    ///
    /// EIO at once, before any device I/O, once the journal has aborted.
    /// A writeback error of the file that happened earlier (in the
    /// background, or in a flush of other files' data) and that no fsync
    /// of `ino` has reported yet is reported now, once; see
    /// [`FsCore::fsync_file`] for per-open-file reporting.
    pub fn fsync(&self, ino: u32) -> Result<()> {
        let rw = self.rw()?;
        let r = self.fsync_inner(ino);
        if r.is_err() {
            // The caller got it: the same error is not reported twice.
            rw.errs.advance_anon(ino);
            return r;
        }
        rw.errs.check_and_advance(ino, None)
    }

    /// [`FsCore::fsync`] without the report of earlier errors.
    pub(crate) fn fsync_inner(&self, ino: u32) -> Result<()> {
        let rw = self.rw()?;
        self.check_not_aborted_io()?;
        if rw.locks.inode(ino).pages.is_dirty() {
            self.writeback_inode(ino)?;
        }
        match rw.dirty_tid(ino) {
            Some(tid) => self.commit_tid(tid),
            None => Ok(self.vol.device().flush()?),
        }
    }
}
