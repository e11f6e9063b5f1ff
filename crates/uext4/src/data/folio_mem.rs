//! Memory for page-cache folios: one-page folios come from 2 MiB chunks
//! mapped once and recycled, not from the C library's heap.
//!
//! Creating many small files (W5, tar extract) makes a new one-page folio
//! per file, and the cache grows until it reaches its budget. Taken from
//! the C library's allocator on a thread other than the main one, every
//! such 4 KiB block grew the thread's arena heap by one page (`sysmalloc`:
//! an `mprotect` under the process's mmap lock) and then faulted the page
//! in on first touch: 16 % of the daemon's samples through the mount
//! (issue 25, BENCHMARKS). Here a chunk of [`CHUNK`] bytes is mapped at a
//! time (naturally aligned, so a slot finds its chunk by its address; its
//! pages populated by one call instead of a fault per folio) and cut into
//! [`SLOT`]-byte slots; a dropped folio's slot goes back to its chunk and
//! is reused by the next folio.
//!
//! # Bounds
//!
//! A chunk is mapped only when every slot of every chunk is in use, so the
//! chunks never hold more than the most one-page folios ever alive at once
//! (which the page cache's budget bounds) plus one chunk per thread that
//! found none free at the same moment. A chunk whose
//! slots are all free again is unmapped, except [`KEEP_EMPTY`] of them
//! (so that a cache hovering at a chunk boundary does not map and unmap
//! one per folio). Slots are taken from the lowest-addressed chunk with
//! a free one, so that frees tend to empty the others.
//!
//! # Ownership
//!
//! A [`FolioBuf`] owns its slot as a `Box` owns its memory: it is not
//! `Clone`, every borrow of its bytes ends before it can be dropped, and
//! the slot returns to the free list only in its `Drop`. So no folio can
//! read or write memory another folio has been given.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::ptr::NonNull;

/// Bytes of one slot: a one-page folio (the page cache's page size, which
/// it asserts; defined here so that the allocator below the page cache
/// imports nothing from it).
pub const SLOT: usize = 4096;
/// Bytes mapped at a time (a transparent huge page on x86-64).
pub const CHUNK: usize = 2 << 20;
/// Slots per chunk.
const SLOTS: usize = CHUNK / SLOT;
/// Chunks with no slot in use kept mapped for reuse.
pub const KEEP_EMPTY: usize = 1;

/// The bytes of a folio: a slot of a chunk (one-page folios) or a heap
/// buffer (larger folios, or when no chunk could be mapped).
pub struct FolioBuf {
    repr: Repr,
}

enum Repr {
    Heap(Vec<u8>),
    /// `SLOT` bytes at this address, owned by this buffer.
    Slot(NonNull<u8>),
}

// SAFETY: a `Slot` is memory this buffer owns exclusively (as a `Box<[u8]>`
// would): nothing else reads or writes it until `Drop` gives it back, and
// the free list it goes back to is behind a mutex.
unsafe impl Send for FolioBuf {}
// SAFETY: shared access only reads through `&[u8]` (as for `Box<[u8]>`).
unsafe impl Sync for FolioBuf {}

impl Default for FolioBuf {
    fn default() -> FolioBuf {
        FolioBuf { repr: Repr::Heap(Vec::new()) }
    }
}

impl std::fmt::Debug for FolioBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.repr {
            Repr::Heap(_) => "heap",
            Repr::Slot(_) => "slot",
        };
        write!(f, "FolioBuf({kind}, {} bytes)", self.len())
    }
}

impl From<Vec<u8>> for FolioBuf {
    fn from(v: Vec<u8>) -> FolioBuf {
        FolioBuf { repr: Repr::Heap(v) }
    }
}

impl FolioBuf {
    /// `len` zero bytes: a recycled slot when `len` is [`SLOT`].
    pub fn zeroed(len: usize) -> FolioBuf {
        if len == SLOT {
            if let Some(p) = SLAB.lock().take() {
                // SAFETY: `p` is a slot of `SLOT` bytes of a mapped chunk,
                // given to this buffer alone by `take`.
                unsafe { std::ptr::write_bytes(p.as_ptr(), 0, SLOT) };
                return FolioBuf { repr: Repr::Slot(p) };
            }
            if let Some(p) = map_chunk_and_take() {
                // SAFETY: as above; a fresh anonymous mapping reads as
                // zeros already, but a chunk may also have been mapped by
                // another thread and recycled in between: zero anyway.
                unsafe { std::ptr::write_bytes(p.as_ptr(), 0, SLOT) };
                return FolioBuf { repr: Repr::Slot(p) };
            }
        }
        FolioBuf { repr: Repr::Heap(vec![0; len]) }
    }

    /// Makes the buffer `len` zero bytes, in place when it has that size
    /// already (a folio filled again), else as [`FolioBuf::zeroed`].
    pub fn zero_to(&mut self, len: usize) {
        if self.len() == len {
            self.fill(0);
        } else {
            *self = FolioBuf::zeroed(len);
        }
    }

    /// True if the bytes are a slot of a chunk (not the heap).
    #[cfg(test)]
    fn is_slot(&self) -> bool {
        matches!(self.repr, Repr::Slot(_))
    }
}

impl std::ops::Deref for FolioBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.repr {
            Repr::Heap(v) => v,
            // SAFETY: the slot is `SLOT` bytes this buffer owns; the borrow
            // of `self` keeps it from being given back meanwhile.
            Repr::Slot(p) => unsafe { std::slice::from_raw_parts(p.as_ptr(), SLOT) },
        }
    }
}

impl std::ops::DerefMut for FolioBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.repr {
            Repr::Heap(v) => v,
            // SAFETY: as in `deref`; `&mut self` makes the borrow unique.
            Repr::Slot(p) => unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), SLOT) },
        }
    }
}

impl Drop for FolioBuf {
    fn drop(&mut self) {
        if let Repr::Slot(p) = self.repr {
            let unmap = SLAB.lock().give(p);
            if let Some(base) = unmap {
                // SAFETY: `give` removed the chunk from the slab, so no slot
                // of it is in use or can be handed out again.
                unsafe { libc::munmap(base as *mut libc::c_void, CHUNK) };
            }
        }
    }
}

/// One mapped chunk: the indexes of its free slots.
struct Chunk {
    free: Vec<u16>,
}

/// Every mapped chunk, by base address.
struct Slab {
    chunks: BTreeMap<usize, Chunk>,
    /// Chunks with a free slot.
    partial: BTreeSet<usize>,
    /// Chunks with every slot free.
    empty: usize,
}

static SLAB: Mutex<Slab> = Mutex::new(Slab { chunks: BTreeMap::new(), partial: BTreeSet::new(), empty: 0 });

impl Slab {
    /// A free slot, if a chunk has one. The chunk at the lowest address
    /// is used first: frees then tend to empty the higher ones, which can
    /// be unmapped (a slot's position never matters otherwise).
    fn take(&mut self) -> Option<NonNull<u8>> {
        let &base = self.partial.first()?;
        let c = self.chunks.get_mut(&base)?;
        let i = c.free.pop()?;
        if c.free.len() == SLOTS - 1 {
            self.empty -= 1;
        }
        if c.free.is_empty() {
            self.partial.remove(&base);
        }
        NonNull::new((base + i as usize * SLOT) as *mut u8)
    }

    /// Takes slot `p` back; returns the base of a chunk to unmap (already
    /// out of the slab) when this emptied one beyond [`KEEP_EMPTY`].
    fn give(&mut self, p: NonNull<u8>) -> Option<usize> {
        let addr = p.as_ptr() as usize;
        let base = addr & !(CHUNK - 1);
        let c = self.chunks.get_mut(&base)?;
        c.free.push(((addr - base) / SLOT) as u16);
        self.partial.insert(base);
        if c.free.len() < SLOTS {
            return None;
        }
        if self.empty < KEEP_EMPTY {
            self.empty += 1;
            return None;
        }
        self.chunks.remove(&base);
        self.partial.remove(&base);
        Some(base)
    }

    /// Adds a freshly mapped chunk and takes a slot of it.
    fn add(&mut self, base: usize) -> Option<NonNull<u8>> {
        // Slot 0 is taken at once; the others are popped from the end of
        // the list, lowest address first.
        let free: Vec<u16> = (1..SLOTS as u16).rev().collect();
        self.chunks.insert(base, Chunk { free });
        self.partial.insert(base);
        NonNull::new(base as *mut u8)
    }
}

/// Maps a new chunk (outside the slab's lock: the mapping is a system
/// call) and takes its first slot. `None` if the system refuses.
fn map_chunk_and_take() -> Option<NonNull<u8>> {
    // Twice the size, so that an aligned chunk lies inside; the rest is
    // unmapped.
    let len = 2 * CHUNK;
    // SAFETY: an anonymous private mapping at an address of the kernel's
    // choice touches no existing memory.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return None;
    }
    let start = raw as usize;
    let base = (start + CHUNK - 1) & !(CHUNK - 1);
    // SAFETY: both ranges lie inside the mapping just made and outside the
    // chunk kept; nothing refers to them.
    unsafe {
        if base > start {
            libc::munmap(start as *mut libc::c_void, base - start);
        }
        let end = base + CHUNK;
        if start + len > end {
            libc::munmap(end as *mut libc::c_void, start + len - end);
        }
        // The chunk's pages faulted in by one call rather than one fault
        // per folio. Not a transparent huge page: zeroing 2 MiB pages on
        // fault cost far more than it saved in W5 (16 % of the daemon's
        // samples in `clear_page_erms`, BENCHMARKS). Kernels before 5.14
        // refuse the advice: the pages then fault in on first touch.
        libc::madvise(base as *mut libc::c_void, CHUNK, libc::MADV_POPULATE_WRITE);
    }
    SLAB.lock().add(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_distinct_zeroed_and_recycled() {
        let mut bufs: Vec<FolioBuf> = (0..SLOTS + 3).map(|_| FolioBuf::zeroed(SLOT)).collect();
        assert!(bufs.iter().all(|b| b.is_slot() && b.len() == SLOT && b.iter().all(|&x| x == 0)));
        for (i, b) in bufs.iter_mut().enumerate() {
            b.fill(i as u8);
        }
        // No two buffers share memory.
        for (i, b) in bufs.iter().enumerate() {
            assert!(b.iter().all(|&x| x == i as u8), "buffer {i} was overwritten");
        }
        drop(bufs.swap_remove(5));
        let again = FolioBuf::zeroed(SLOT);
        assert!(again.iter().all(|&x| x == 0), "a recycled slot is zeroed");
        for (i, b) in bufs.iter().enumerate().filter(|(i, _)| *i != 5) {
            assert!(b.iter().all(|&x| x == i as u8), "buffer {i} was overwritten by a recycled slot");
        }
        // Other sizes come from the heap.
        let big = FolioBuf::zeroed(2 * SLOT);
        assert!(!big.is_slot() && big.len() == 2 * SLOT && big.iter().all(|&x| x == 0));
    }

    /// The slab's bookkeeping alone (a private slab, made-up chunk
    /// addresses: nothing is mapped or touched), so that other tests of
    /// this binary using the shared slab cannot disturb the figures.
    #[test]
    fn chunks_fill_lowest_first_and_empty_ones_beyond_one_are_released() {
        let mut s = Slab { chunks: BTreeMap::new(), partial: BTreeSet::new(), empty: 0 };
        assert!(s.take().is_none(), "no chunk, no slot");
        let (a, b) = (64 * CHUNK, 128 * CHUNK);
        let mut got: Vec<NonNull<u8>> = vec![s.add(b).unwrap()];
        got.extend((1..SLOTS).map(|_| s.take().unwrap()));
        assert!(s.take().is_none(), "a full chunk has no slot to give");
        got.push(s.add(a).unwrap());
        got.extend((1..SLOTS).map(|_| s.take().unwrap()));
        let mut addrs: Vec<usize> = got.iter().map(|p| p.as_ptr() as usize).collect();
        addrs.sort_unstable();
        addrs.dedup();
        assert_eq!(addrs.len(), 2 * SLOTS, "every slot handed out once");
        // Free all of b and one slot of a: b is the one empty chunk kept.
        let (in_a, in_b): (Vec<_>, Vec<_>) = got.into_iter().partition(|p| (p.as_ptr() as usize) < b);
        assert!(in_b.into_iter().all(|p| s.give(p).is_none()), "the first empty chunk is kept");
        let one = in_a[0];
        assert!(s.give(one).is_none());
        // The lowest chunk with a free slot is used first.
        assert_eq!(s.take(), Some(one));
        let from_b = s.take().unwrap();
        assert_eq!(from_b.as_ptr() as usize & !(CHUNK - 1), b, "a is full again: b serves");
        // Emptying a keeps it (b is in use now); emptying b then releases b.
        let mut released = Vec::new();
        for p in in_a {
            released.extend(s.give(p));
        }
        assert!(released.is_empty(), "the only empty chunk is kept");
        assert_eq!(s.give(from_b), Some(b), "a second empty chunk is released");
        assert_eq!(s.chunks.len(), 1);
        assert!(s.take().is_some_and(|p| (p.as_ptr() as usize & !(CHUNK - 1)) == a));
        assert_eq!(s.empty, 0);
    }
}
