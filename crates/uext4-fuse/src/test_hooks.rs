//! Test-only hooks that make the daemon fail on demand, compiled in only
//! with the `test-hooks` feature. Only tests enable it (uext4-cli's
//! dev-dependency on this crate does, so `cargo test` builds the `uext4`
//! binary its tests run with it); `cargo build --release` and
//! `cargo install` leave it out, and then the hooks do nothing and their
//! variables are not even read.
//!
//! - `UEXT4_TEST_FAULT_TRIGGER=PATH`: the image is opened through a
//!   [`uext4::device::FaultyDevice`] that turns into a dead disk (every
//!   read, write and flush fails with EIO) once PATH exists, checked every
//!   20 ms ([`faulty_device`]).
//! - `UEXT4_TEST_PANIC_OFFSET=N`: every READ, WRITE or FALLOCATE at offset
//!   N panics in the dispatcher, inside the boundary that catches a
//!   request's panic (`dispatch::guarded`).
//! - `UEXT4_TEST_HANG_OFFSET=N`: every WRITE at offset N is never
//!   answered: the thread serving it sleeps until the process ends (a
//!   deadlock on demand, for the mount tests' watchdog).

use std::io;
use std::path::Path;
use std::sync::Arc;

/// With `UEXT4_TEST_FAULT_TRIGGER` set (and the `test-hooks` feature),
/// the image as a device that dies once the trigger path exists; `None`:
/// open the image as usual.
pub fn faulty_device(image: &Path, write: bool) -> Option<io::Result<Arc<dyn uext4::device::BlockDevice>>> {
    #[cfg(feature = "test-hooks")]
    {
        let trigger = std::path::PathBuf::from(std::env::var_os("UEXT4_TEST_FAULT_TRIGGER")?);
        let file = match uext4::FileDevice::open(image, write) {
            Ok(f) => Arc::new(f),
            Err(e) => return Some(Err(e)),
        };
        let dev = Arc::new(uext4::device::FaultyDevice::new(file));
        let weak = Arc::downgrade(&dev);
        let _ = std::thread::Builder::new().name("uext4-test-fault".into()).spawn(move || {
            while let Some(d) = weak.upgrade() {
                if trigger.exists() {
                    d.kill();
                    return;
                }
                drop(d);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        });
        Some(Ok(dev))
    }
    #[cfg(not(feature = "test-hooks"))]
    {
        let _ = (image, write);
        None
    }
}

/// Panics when `d` is a READ, WRITE or FALLOCATE at the offset
/// `UEXT4_TEST_PANIC_OFFSET` names; never returns when it is a WRITE at
/// the offset `UEXT4_TEST_HANG_OFFSET` names.
#[cfg(feature = "test-hooks")]
pub(crate) fn on_request(d: &crate::proto::decode::Decoded<'_>) {
    use crate::proto::decode::Operation;
    static PANIC_AT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    static HANG_AT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let offset_var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    let panic_at = *PANIC_AT.get_or_init(|| offset_var("UEXT4_TEST_PANIC_OFFSET"));
    let hang_at = *HANG_AT.get_or_init(|| offset_var("UEXT4_TEST_HANG_OFFSET"));
    if panic_at.is_none() && hang_at.is_none() {
        return;
    }
    let offset = match d.op {
        Operation::Read(r) => r.offset,
        Operation::Write(w) => {
            if Some(w.offset) == hang_at {
                log::warn!("UEXT4_TEST_HANG_OFFSET: a WRITE at offset {}: never answered", w.offset);
                loop {
                    std::thread::park();
                }
            }
            w.offset
        }
        Operation::Fallocate(f) => f.offset,
        _ => return,
    };
    if Some(offset) == panic_at {
        panic!("UEXT4_TEST_PANIC_OFFSET: a request at offset {offset}");
    }
}
