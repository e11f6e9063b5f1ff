//! FS_IOC_SHUTDOWN: taking the filesystem down on request, as ext4 does
//! for `godown` and `xfs_io -c shutdown` (ext4_shutdown): from then on
//! every change fails, and what the journal holds is left for the next
//! open to recover.

use super::transactions::SHUTDOWN_WHY;
use super::FsCore;
use crate::error::{Error, Result};

/// What a shutdown keeps (FS_IOC_SHUTDOWN's flags): passed to
/// [`FsCore::shutdown_now`](crate::FsCore::shutdown_now) by a front end
/// that serves the ioctl, or by a test that simulates a dying disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownMode {
    /// EXT4_GOING_FLAGS_DEFAULT: everything written back and
    /// checkpointed first (as a freeze does); nothing is left to recover.
    Full,
    /// EXT4_GOING_FLAGS_LOGFLUSH: dirty data written back and the running
    /// transaction committed, not checkpointed: the next open replays it.
    LogFlush,
    /// EXT4_GOING_FLAGS_NOLOGFLUSH: down at once; the running transaction
    /// (and data not yet written back) is lost, as in a crash.
    NoLogFlush,
}

impl ShutdownMode {
    /// The mode of FS_IOC_SHUTDOWN's flag value (None: EINVAL).
    pub fn from_flags(flags: u32) -> Option<ShutdownMode> {
        match flags {
            0 => Some(ShutdownMode::Full),
            1 => Some(ShutdownMode::LogFlush),
            2 => Some(ShutdownMode::NoLogFlush),
            _ => None,
        }
    }
}

impl FsCore {
    /// Shuts the filesystem down (see [`ShutdownMode`]): the journal is
    /// aborted, so every later change fails (EROFS for namespace changes,
    /// EIO for data and fsync), and the superblock keeps
    /// `needs_recovery`; no filesystem error is recorded. The unmount
    /// that follows leaves the image to the next open's recovery.
    ///
    /// Needs a journal (Unsupported otherwise: nothing else could stop
    /// the writes already under way).
    pub fn shutdown_now(&self, mode: ShutdownMode) -> Result<()> {
        let rw = self.rw()?;
        if rw.txns.aborted().is_some() {
            return Ok(()); // down already
        }
        // A failure to flush (a dead disk) takes it down all the same, as
        // ext4 ignores ext4_force_commit's.
        let _ = match mode {
            ShutdownMode::Full => self.sync(),
            ShutdownMode::LogFlush => self.commit(),
            ShutdownMode::NoLogFlush => Ok(()),
        };
        if !rw.txns.abort(&format!("{SHUTDOWN_WHY} ({mode:?})")) {
            return Err(Error::Unsupported("shutdown of a filesystem without a journal".into()));
        }
        Ok(())
    }
}
