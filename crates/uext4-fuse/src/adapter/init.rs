//! The FUSE_INIT handshake: the write size, background-request limits
//! and capability flags the adapter asks of the kernel, as the mount's
//! [`KernelFeatures`](crate::KernelFeatures) say, logging what the kernel
//! does not offer.

use super::Uext4Fuse;
use crate::kernel_config::KernelConfig;
use crate::proto::types::InitFlags;
use crate::{KernelFeatures, Readdirplus};
use log::{info, warn};

/// Background requests (readahead, writeback, async direct I/O) the
/// kernel keeps in flight at once; the io_uring queues are sized from it.
pub(crate) const MAX_BACKGROUND: u16 = 64;

impl Uext4Fuse {
    pub(super) fn do_init(&self, config: &mut KernelConfig) -> std::io::Result<()> {
        negotiate(&self.features, self.want_uring, config);
        Ok(())
    }
}

/// What every backend asks of the kernel at INIT for the features `f`
/// (and FUSE_OVER_IO_URING if `want_uring`): shared with the null
/// backend, so that it is measured under the same protocol as uext4.
pub(crate) fn negotiate(f: &KernelFeatures, want_uring: bool, config: &mut KernelConfig) {
    if let Err(max) = config.set_max_write(f.max_write) {
        info!("max_write {} refused, the kernel's limit is {max}", f.max_write);
        let _ = config.set_max_write(max);
    }
    let _ = config.set_max_background(MAX_BACKGROUND);
    let _ = config.set_congestion_threshold(48);
    let mut want = InitFlags::FUSE_BIG_WRITES
        | InitFlags::FUSE_ASYNC_DIO
        | InitFlags::FUSE_CACHE_SYMLINKS
        // Shared mappings of files opened with FOPEN_DIRECT_IO (write
        // opens under `direct_writes`, O_DIRECT opens): without it
        // mmap(MAP_SHARED) of such a file fails with ENODEV.
        | InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP
        // The set-id bits a write or truncate removes are the
        // library's (remove_privs), told by FUSE_WRITE_KILL_SUIDGID:
        // no getattr + setattr round trip before each write.
        | InitFlags::FUSE_HANDLE_KILLPRIV_V2
        // The kernel checks permissions with the ACLs we serve (the
        // mount has default_permissions) and leaves the umask to the
        // library, which skips it under a default ACL (posix_acl_create).
        | InitFlags::FUSE_POSIX_ACL
        | InitFlags::FUSE_DONT_MASK
        // File handles that outlive the kernel's inode cache (NFS
        // export, open_by_handle_at): the kernel looks nodes up by id
        // ("." in the node) and parents by "..", and checks the
        // generation we return against the handle's.
        | InitFlags::FUSE_EXPORT_SUPPORT;
    for (on, flag) in [
        (f.parallel_dirops, InitFlags::FUSE_PARALLEL_DIROPS),
        (f.readdirplus != Readdirplus::Off, InitFlags::FUSE_DO_READDIRPLUS),
        (f.readdirplus == Readdirplus::Auto, InitFlags::FUSE_READDIRPLUS_AUTO),
        (f.writeback_cache, InitFlags::FUSE_WRITEBACK_CACHE),
    ] {
        if on {
            want |= flag;
        }
    }
    // FUSE_ASYNC_READ (several reads of a file in flight, readahead
    // beside the caller's read) is always requested (KernelConfig::new).
    let have = config.capabilities();
    for flag in want.iter() {
        if have.contains(flag) {
            let _ = config.add_capabilities(flag);
        } else {
            info!("the kernel does not offer {flag:?}");
        }
    }
    if want_uring && have.contains(InitFlags::FUSE_OVER_IO_URING) {
        let _ = config.add_capabilities(InitFlags::FUSE_OVER_IO_URING);
    }
    if f.writeback_cache && !have.contains(InitFlags::FUSE_WRITEBACK_CACHE) {
        warn!("writeback_cache requested but the kernel does not support it");
    }
}
