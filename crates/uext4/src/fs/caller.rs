//! What the calling thread may do beyond an ordinary user: the stand-in
//! for CAP_SYS_RESOURCE, per operation.
//!
//! The kernel lets a caller with CAP_SYS_RESOURCE (root) allocate the
//! blocks ext4 reserves for root (`s_r_blocks_count`) and pass quota
//! limits. A library filesystem opened with
//! [`MountOptions::use_reserved`](super::MountOptions::use_reserved)
//! grants that to every operation; a front end serving several users
//! (the FUSE daemon) grants it to one request instead, by holding a
//! [`SysResourceScope`] on the thread that runs it. The flag is
//! thread-local because an operation runs on its caller's thread from
//! start to end (background writeback allocates only blocks reserved
//! for it, whoever reserved them).

use std::cell::Cell;
use std::marker::PhantomData;

thread_local! {
    static SYS_RESOURCE: Cell<bool> = const { Cell::new(false) };
}

/// While it lives, operations on this thread act with CAP_SYS_RESOURCE
/// (or without it) as [`sys_resource`] asked; the previous state comes
/// back when it drops.
#[derive(Debug)]
#[must_use = "the capability holds only while the scope lives"]
pub struct SysResourceScope {
    prev: bool,
    /// Bound to the thread whose flag it set.
    _thread: PhantomData<*const ()>,
}

/// Operations run by this thread until the returned scope drops may
/// (`on`) or may not use root's reserved blocks and pass quota limits.
pub fn sys_resource(on: bool) -> SysResourceScope {
    let prev = SYS_RESOURCE.with(|c| c.replace(on));
    SysResourceScope { prev, _thread: PhantomData }
}

impl Drop for SysResourceScope {
    fn drop(&mut self) {
        SYS_RESOURCE.with(|c| c.set(self.prev));
    }
}

/// The current thread holds a [`SysResourceScope`] granting it.
pub(crate) fn has_sys_resource() -> bool {
    SYS_RESOURCE.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_nest_and_restore() {
        assert!(!has_sys_resource());
        {
            let _a = sys_resource(true);
            assert!(has_sys_resource());
            {
                let _b = sys_resource(false);
                assert!(!has_sys_resource());
            }
            assert!(has_sys_resource());
            std::thread::spawn(|| assert!(!has_sys_resource())).join().unwrap();
        }
        assert!(!has_sys_resource());
    }
}
