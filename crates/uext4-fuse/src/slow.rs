//! Which requests may keep the thread serving them waiting for long (on
//! the device, the journal, a large copy): the io_uring transport hands
//! them to its pool so that they do not hold up their queue, and the
//! `/dev/fuse` transport makes sure another worker reads requests while
//! one of them is served (see `session::Readers`). Both transports use
//! this one classification.

use crate::proto::abi::op;

/// A WRITE with more data than this may wait long.
pub(crate) const LARGE_WRITE: usize = 128 << 10;
/// A READ of more than this may wait long (a direct one always reads the
/// device; a buffered one may fill many folios); the io_uring transport
/// also lends buffered READs over 16 KiB that miss the page cache (it
/// tries the cache first), and serves smaller misses itself.
pub(crate) const LARGE_READ: usize = 128 << 10;

/// True for requests that may wait long: FSYNC, FSYNCDIR, SYNCFS,
/// FALLOCATE, COPY_FILE_RANGE, IOCTL, and WRITEs and READs larger than
/// [`LARGE_WRITE`] and [`LARGE_READ`] (`write_len`: the WRITE's data,
/// `read_size`: the READ's size; 0 for other requests).
pub(crate) fn may_wait(opcode: u32, write_len: usize, read_size: usize) -> bool {
    match opcode {
        op::FSYNC | op::FSYNCDIR | op::SYNCFS | op::FALLOCATE | op::COPY_FILE_RANGE | op::COPY_FILE_RANGE_64 => true,
        // FITRIM and `uext4 sync` (UEXT4_IOC_SYNC) wait on the device.
        op::IOCTL => true,
        op::WRITE => write_len > LARGE_WRITE,
        op::READ => read_size > LARGE_READ,
        _ => false,
    }
}

/// True for a WRITE whose open flags (`fuse_write_in.flags`) ask for a
/// synchronous write (O_DSYNC; O_SYNC includes it): it commits before its
/// reply, so it may wait long whatever its size.
pub(crate) fn sync_write(open_flags: i32) -> bool {
    open_flags & libc::O_DSYNC != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syncs_and_large_transfers_may_wait() {
        assert!(may_wait(op::FSYNC, 0, 0) && may_wait(op::SYNCFS, 0, 0) && may_wait(op::FALLOCATE, 0, 0));
        assert!(may_wait(op::IOCTL, 0, 0));
        assert!(may_wait(op::WRITE, LARGE_WRITE + 1, 0) && !may_wait(op::WRITE, 8192, 0));
        assert!(may_wait(op::READ, 0, LARGE_READ + 1) && !may_wait(op::READ, 0, 4096));
        assert!(!may_wait(op::LOOKUP, 0, 0) && !may_wait(op::CREATE, 0, 0) && !may_wait(op::GETATTR, 0, 0));
    }

    #[test]
    fn o_sync_and_o_dsync_writes_are_synchronous() {
        assert!(sync_write(libc::O_WRONLY | libc::O_SYNC) && sync_write(libc::O_RDWR | libc::O_DSYNC));
        assert!(!sync_write(libc::O_WRONLY | libc::O_DIRECT | libc::O_APPEND));
    }
}
