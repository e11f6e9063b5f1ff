//! The argument types of the inode-level operations, where the FUSE
//! adapter and the CLI import them from (the operations themselves live
//! in `fs/namespace`, `fs/write.rs` and `fs/fallocate.rs`).

pub use super::fallocate::FallocMode;
pub use super::namespace::{flags, Cred, RenameFlags, SetAttr, LINK_MAX};
