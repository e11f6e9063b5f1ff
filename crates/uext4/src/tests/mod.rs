//! Whole-filesystem tests that reach the engine's internals (the
//! allocator, the journal, the volume, directory blocks, inode mapping):
//! they were integration tests under `tests/` while every module was
//! public; now that only the facade is, they live here, compiled into the
//! crate's own test binary. Each file is unchanged but for its imports
//! (`uext4::...` paths resolve through `extern crate self as uext4` in
//! lib.rs). Tests that need only the public API stay in `tests/`.
//!
//! The support modules are the same files the integration tests include.

#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "../../tests/mkfs_support/mod.rs"]
mod mkfs_support;
#[path = "../../tests/random_support/mod.rs"]
mod random_support;
#[path = "../../tests/rw_support/mod.rs"]
mod rw_support;

mod alloc;
mod bigalloc;
mod crash_journal;
mod dir_write;
mod fast_commit;
mod inline_data;
mod journal_recovery;
mod mkfs;
mod readdir_cursor;
mod rw_basic;
mod scale;
mod writeback;
