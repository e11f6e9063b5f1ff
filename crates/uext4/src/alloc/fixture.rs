//! A fragmentation fixture: brings free space to a chosen shape so that
//! tests and benchmarks can reproduce the seed's fragmented filesystem.

use super::{flags, AllocRequest, Allocator};
use crate::error::{Error, Result};
use crate::format::block_number::PhysicalBlock;

/// Makes every group's free space a repeating pattern of `free_len` free
/// blocks followed by `used_len` used blocks (the used ones stay allocated,
/// like files), so the average free fragment is about `free_len` blocks.
/// Returns the number of blocks left allocated by the fixture.
///
/// Works on the allocator's state (call [`Allocator::flush`] to write it).
pub fn fragment(a: &Allocator, free_len: u32, used_len: u32) -> Result<u64> {
    if free_len == 0 || used_len == 0 {
        return Err(Error::Invalid("fragment: lengths must be positive".into()));
    }
    a.load_all()?;
    // Take every free block, in large pieces.
    let mut taken = Vec::new();
    loop {
        let req =
            AllocRequest { len: 32768, min_len: 1, flags: flags::METADATA | flags::NO_PREALLOC, ..Default::default() };
        match a.allocate(&req) {
            Ok(al) => taken.push((al.start, u64::from(al.len))),
            Err(Error::NoSpace(_)) => break,
            Err(e) => return Err(e),
        }
    }
    taken.sort_unstable();
    // Give back free_len of every (free_len + used_len) blocks, aligned to
    // the pattern in absolute block numbers so the result does not depend
    // on the order the pieces were found in.
    let period = u64::from(free_len) + u64::from(used_len);
    let mut kept = 0u64;
    for (start, len) in taken {
        let end = start.get() + len;
        let mut b = start.get();
        while b < end {
            let phase = b % period;
            if phase < u64::from(free_len) {
                let n = (u64::from(free_len) - phase).min(end - b);
                a.free(PhysicalBlock(b), n, None)?;
                b += n;
            } else {
                let n = (period - phase).min(end - b);
                kept += n;
                b += n;
            }
        }
    }
    Ok(kept)
}
