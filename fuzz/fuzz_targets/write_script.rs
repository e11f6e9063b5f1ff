//! Fuzz target: the input is a whole ext4 image. Open it read-write from
//! memory and run the fixed script of changes of
//! crates/uext4/tests/write_script (the same one its CI slice,
//! crates/uext4/tests/corrupt_write.rs, runs on damaged images). Errors
//! are fine; a panic, a timeout, an oversized allocation or a write
//! outside the filesystem's blocks is a finding.
//!
//! Bytes 0 and 1 lie in the boot area, which ext4 never reads. As in
//! `open_walk`, when the low bit of byte 0 is set the superblock checksum
//! is recomputed before opening; byte 1 seeds the script's data and a few
//! of its offsets.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::Arc;

#[path = "../../crates/uext4/tests/write_script/mod.rs"]
mod write_script;

mod input;

fuzz_target!(|data: &[u8]| {
    let img = input::image(data);
    let seed = u64::from(img.get(1).copied().unwrap_or(0));
    let dev = Arc::new(write_script::GuardDevice::new(&img));
    let out = write_script::run(dev, seed);
    assert_eq!(out.outside, 0, "write outside the filesystem: {out:?}");
});
