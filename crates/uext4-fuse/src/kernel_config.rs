//! The INIT negotiation: what the kernel offered (its protocol version,
//! capability flags and readahead) and what the daemon asks for, turned
//! into the `fuse_init_out` reply.

use crate::proto::abi;
use crate::proto::decode::InitIn;
use crate::proto::encode::InitOut;
use crate::proto::types::InitFlags;

/// The kernel's largest request page count by default
/// (FUSE_DEFAULT_MAX_PAGES_LIMIT): 1 MiB of 4 KiB pages.
const MAX_PAGES_LIMIT: u32 = 256;
const PAGE_SIZE: u32 = 4096;

/// What INIT negotiates, filled by the filesystem's `init`.
#[derive(Debug, Clone)]
pub struct KernelConfig {
    offered: InitFlags,
    requested: InitFlags,
    abi: (u32, u32),
    max_readahead: u32,
    max_write: u32,
    max_background: u16,
    congestion_threshold: u16,
}

impl KernelConfig {
    /// The negotiation for the kernel's INIT request. Asynchronous reads,
    /// big writes and a page count of our own are always asked for (as
    /// the `fuser` crate did).
    pub fn new(init: &InitIn) -> KernelConfig {
        let offered = InitFlags::from_bits_retain(init.flags);
        let mut requested = InitFlags::FUSE_ASYNC_READ | InitFlags::FUSE_BIG_WRITES;
        if offered.contains(InitFlags::FUSE_MAX_PAGES) {
            requested |= InitFlags::FUSE_MAX_PAGES;
        }
        KernelConfig {
            offered,
            requested,
            abi: (init.major, init.minor),
            max_readahead: init.max_readahead,
            max_write: 128 << 10,
            max_background: 16,
            congestion_threshold: 12,
        }
    }

    /// The flags the kernel offered (FUSE_INIT_EXT left out).
    pub fn capabilities(&self) -> InitFlags {
        InitFlags::from_bits_retain(self.offered.bits() & !InitFlags::FUSE_INIT_EXT.bits())
    }

    /// Asks for `flags`; the ones the kernel did not offer are refused.
    pub fn add_capabilities(&mut self, flags: InitFlags) -> Result<(), InitFlags> {
        let missing = flags.bits() & !self.offered.bits();
        if missing != 0 {
            return Err(InitFlags::from_bits_retain(missing));
        }
        self.requested |= flags;
        Ok(())
    }

    /// The largest write; above the kernel's limit it is refused with it.
    pub fn set_max_write(&mut self, v: u32) -> Result<u32, u32> {
        let limit = MAX_PAGES_LIMIT * PAGE_SIZE;
        if v == 0 || v > limit {
            return Err(limit);
        }
        Ok(std::mem::replace(&mut self.max_write, v))
    }

    /// Background requests the kernel keeps in flight.
    pub fn set_max_background(&mut self, v: u16) -> Result<u16, u16> {
        Ok(std::mem::replace(&mut self.max_background, v))
    }

    /// When the kernel counts the connection as congested.
    pub fn set_congestion_threshold(&mut self, v: u16) -> Result<u16, u16> {
        Ok(std::mem::replace(&mut self.congestion_threshold, v.min(self.max_background)))
    }

    /// The flags agreed: asked for and offered.
    pub fn granted(&self) -> InitFlags {
        InitFlags::from_bits_retain(self.requested.bits() & self.offered.bits())
    }

    /// The largest request or reply payload agreed: a write, or a read of
    /// `max_pages` pages.
    pub fn max_payload(&self) -> usize {
        (u32::from(self.max_pages()) * PAGE_SIZE).max(self.max_write) as usize
    }

    fn max_pages(&self) -> u16 {
        let bytes = self.max_write.max(self.max_readahead.min(MAX_PAGES_LIMIT * PAGE_SIZE)).max(1);
        (bytes.div_ceil(PAGE_SIZE)).min(MAX_PAGES_LIMIT) as u16
    }

    /// The `fuse_init_out` answering the kernel.
    pub fn reply(&self) -> InitOut {
        let flags = (self.requested | InitFlags::FUSE_INIT_EXT).bits() & self.offered.bits();
        InitOut {
            major: abi::KERNEL_VERSION,
            minor: abi::KERNEL_MINOR_VERSION.min(self.abi.1),
            max_readahead: self.max_readahead,
            flags,
            max_background: self.max_background,
            congestion_threshold: self.congestion_threshold,
            max_write: self.max_write,
            time_gran: 1,
            max_pages: self.max_pages(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_only_what_the_kernel_offers() {
        let offered = InitFlags::FUSE_ASYNC_READ | InitFlags::FUSE_MAX_PAGES | InitFlags::FUSE_INIT_EXT;
        let init = InitIn { major: 7, minor: 41, max_readahead: 128 << 10, flags: offered.bits() };
        let mut c = KernelConfig::new(&init);
        assert!(c.add_capabilities(InitFlags::FUSE_POSIX_ACL).is_err());
        assert_eq!(c.set_max_write(2 << 20), Err(1 << 20));
        c.set_max_write(1 << 20).unwrap();
        let r = c.reply();
        assert_eq!(r.flags, offered.bits());
        assert_eq!((r.major, r.minor, r.max_pages, r.max_write), (7, 41, 256, 1 << 20));
        assert_eq!(c.max_payload(), 1 << 20);
    }
}
