//! Our own FUSE request layer: pure codecs for the kernel's FUSE ABI
//! (include/uapi/linux/fuse.h), with no I/O.
//!
//! [`decode`] turns the bytes of one request into a typed
//! [`decode::Operation`] borrowing from the buffer (no allocation per
//! request), the arguments of most requests one typed value of
//! [`request`] each; [`encode`] builds the fixed reply structures; [`abi`] holds
//! the numbers; [`types`] the values the adapter works with. The
//! transports (`session` for `/dev/fuse`, `uring` for FUSE over io_uring)
//! move the bytes; `reply` and `dispatch` connect both to the adapter.

pub mod abi;
pub mod decode;
pub mod encode;
pub mod request;
pub mod types;
