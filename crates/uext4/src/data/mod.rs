//! The data path's policy and per-file state: the seeds' switches, the
//! fast-path counters, the pure decision of which path a direct write
//! takes, the per-inode [`FileData`] kept in the inode lock table, and the
//! page cache ([`page_cache`]).
//!
//! The mechanism (locks held, device I/O, conversion at completion) lives
//! with the filesystem API in `fs/buffered.rs`, `fs/direct.rs` and
//! `fs/writeback.rs`, over the state `fs/data_path.rs` owns; this module
//! has no I/O, so the decision rules can be tested on their own.

pub mod folio_mem;
pub mod page_cache;

use crate::counter::StripedCounter;
use crate::format::block_number::FileBlock;
use crate::format::timestamp::Timestamp;
use crate::inode::{MapKind, Mapping};
use crate::locks::{InodeIo, InodeLocks, InodeState};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

/// The data path's state of one inode, kept in its entry of the inode
/// lock table (one hash lookup finds the locks and the folios).
#[derive(Debug, Default)]
pub struct FileData {
    /// The file's folios in the page cache.
    pub pages: Arc<page_cache::FileCache>,
    /// Second of the last lazy mtime/ctime update by the data path.
    pub time_sec: AtomicI64,
    /// Set when the inode is deleted (under its I/O lock, exclusive):
    /// a shared-lock write that finds a cached folio then checks that the
    /// number names a live inode before writing into it (a reader may
    /// have filled a folio since the deletion dropped them all).
    pub deleted: AtomicBool,
    /// An access time that reads set and that is not written to the
    /// inode yet (`fs/atime.rs`): lazytime-style batching, so a read
    /// never starts a handle.
    pub atime: PendingTime,
    /// The inode's flags as the write paths last read them (the VFS
    /// inode's i_flags): see [`FlagsCache`].
    pub flags: FlagsCache,
}

/// A copy of an inode's `i_flags` kept beside its folios, so that each
/// write's immutable/append-only/sync check (`chattr`) needs no inode
/// read and parse on the fast path. Filled by the first check, replaced
/// by `set_flags`, the only writer of the immutable, append-only and
/// sync bits (other flag changes, e.g. casefold or inline data, touch
/// bits no reader of this copy looks at); a fresh entry of the lock
/// table starts unknown.
#[derive(Debug, Default)]
pub struct FlagsCache(AtomicU64);

impl FlagsCache {
    const KNOWN: u64 = 1 << 32;

    /// The cached flags, if known.
    #[inline]
    pub fn get(&self) -> Option<u32> {
        let v = self.0.load(Ordering::Acquire);
        (v & Self::KNOWN != 0).then_some(v as u32)
    }

    /// Records `flags` as the inode's current flags.
    #[inline]
    pub fn set(&self, flags: u32) {
        self.0.store(Self::KNOWN | u64::from(flags), Ordering::Release);
    }
}

impl InodeState for FileData {
    fn pinned(&self) -> bool {
        // Dirty data lives until written back, a pending atime until
        // written to the inode.
        self.pages.is_dirty() || self.atime.is_set()
    }
}

/// A timestamp set and taken without a lock: seconds (ext4's range,
/// -2^31 to 2^34 - 2^31) and nanoseconds packed in one atomic word,
/// stored inverted so that the all-zero default means "none" (the
/// inverse of zero, all ones, has 2^30 - 1 nanoseconds: never a time).
#[derive(Debug, Default)]
pub struct PendingTime(AtomicU64);

impl PendingTime {
    const NSEC_BITS: u32 = 30;
    const SEC_BIAS: i64 = 1 << 31;
    const SEC_MAX: i64 = (1 << 34) - 1 - Self::SEC_BIAS;

    fn pack(t: Timestamp) -> u64 {
        let sec = t.sec.clamp(-Self::SEC_BIAS, Self::SEC_MAX) + Self::SEC_BIAS;
        !(((sec as u64) << Self::NSEC_BITS) | u64::from(t.nsec.min(999_999_999)))
    }

    fn unpack(v: u64) -> Option<Timestamp> {
        (v != 0).then(|| {
            let v = !v;
            Timestamp {
                sec: (v >> Self::NSEC_BITS) as i64 - Self::SEC_BIAS,
                nsec: (v & ((1 << Self::NSEC_BITS) - 1)) as u32,
            }
        })
    }

    /// The pending time, if any.
    pub fn get(&self) -> Option<Timestamp> {
        Self::unpack(self.0.load(Ordering::Acquire))
    }

    /// True if a time is pending.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire) != 0
    }

    /// Sets `t`; true if none was pending before.
    pub fn set(&self, t: Timestamp) -> bool {
        self.0.swap(Self::pack(t), Ordering::AcqRel) == 0
    }

    /// Takes the pending time, leaving none.
    pub fn take(&self) -> Option<Timestamp> {
        Self::unpack(self.0.swap(0, Ordering::AcqRel))
    }
}

/// The per-inode locks and data-path state of a file.
pub type FileIo = InodeIo<FileData>;

/// The inode lock table of the data path.
pub type FileLocks = InodeLocks<FileData>;

/// Which inode lock a direct write takes
/// ([`DataPathConfig::lock_policy`]): `Exclusive` reproduces the
/// behaviour before the seeds (every direct write exclusive, with a
/// journal handle), for benchmarks comparing the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockPolicy {
    /// The seeds' behaviour: overwrites (and, with the other switches,
    /// unwritten and unaligned overwrites) run under the shared lock with
    /// no journal handle.
    #[default]
    Seeds,
    /// Before the seeds: every write takes the exclusive lock and starts a
    /// journal handle to map its blocks (ext4 before seed 000, XFS before
    /// seed 001).
    Exclusive,
}

impl std::str::FromStr for LockPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "seeds" => Ok(LockPolicy::Seeds),
            "exclusive" => Ok(LockPolicy::Exclusive),
            other => Err(format!("unknown lock policy {other:?} (seeds or exclusive)")),
        }
    }
}

/// The data path's switches ([`MountOptions::data`](crate::MountOptions::data));
/// the defaults are the seeds' behaviour, the alternatives reproduce each
/// seed's "before". Leave it at its default unless you are measuring what
/// one of those changes is worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataPathConfig {
    /// Seed 000 (and 001 for buffered writes).
    pub lock_policy: LockPolicy,
    /// Seed 002: a direct write into unwritten extents starts no handle at
    /// submission (off: a handle maps the range first, as before).
    pub dio_unwritten_no_handle: bool,
    /// Seed 003: sub-block direct writes that are pure overwrites of
    /// written blocks run under the shared lock (off: always exclusive,
    /// after draining in-flight direct I/O).
    pub dio_unaligned_concurrent: bool,
    /// Dirty data older than this is written back by the background
    /// thread (the kernel's `dirty_expire_centisecs`, 30 s).
    pub dirty_expire: std::time::Duration,
    /// How often the background thread looks for expired dirty data
    /// (`dirty_writeback_centisecs`, 5 s).
    pub writeback_interval: std::time::Duration,
    /// Percent of the page-cache budget that may be dirty before writers
    /// write back themselves (`dirty_ratio`); at half of it the
    /// background thread starts (`dirty_background_ratio`).
    pub dirty_ratio: u8,
    /// ext4's `auto_da_alloc`: a rename that replaces a file, and the
    /// close of a file truncated to zero while open, write the file's
    /// delayed data back at once, so that the "write a new file, rename it
    /// over the old one" pattern without fsync does not leave an empty
    /// file after a crash (off: `noauto_da_alloc`).
    pub auto_da_alloc: bool,
}

impl Default for DataPathConfig {
    fn default() -> Self {
        DataPathConfig {
            lock_policy: LockPolicy::Seeds,
            dio_unwritten_no_handle: true,
            dio_unaligned_concurrent: true,
            dirty_expire: std::time::Duration::from_secs(30),
            writeback_interval: std::time::Duration::from_secs(5),
            dirty_ratio: 20,
            auto_da_alloc: true,
        }
    }
}

/// How a direct write is carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectPlan {
    /// Every block is mapped and written: shared lock, no handle, no
    /// metadata change (seed 000; seed 003 when unaligned).
    Overwrite,
    /// Every block is mapped, some unwritten: shared lock, data written,
    /// then the unwritten part converted in a transaction (seed 002).
    Unwritten,
    /// Holes, growth past EOF, unaligned edges that need zeroing, or a
    /// switch turned off: exclusive lock, in-flight direct I/O drained.
    Exclusive,
}

/// Chooses the path of a direct write of `len > 0` bytes at `off` to a
/// file of `size` bytes whose blocks in the range map as `maps` (in
/// order, covering every block of the range), as ext4_dio_write_checks
/// does.
pub fn plan_direct_write(cfg: &DataPathConfig, maps: &[Mapping], off: u64, len: u64, size: u64, bs: u64) -> DirectPlan {
    if cfg.lock_policy == LockPolicy::Exclusive {
        return DirectPlan::Exclusive;
    }
    let end = off.saturating_add(len);
    if end > size || len == 0 {
        return DirectPlan::Exclusive;
    }
    let (first, last) = (FileBlock::of_byte(off, bs), FileBlock::of_byte(end - 1, bs));
    let mut next = first;
    let mut unwritten = false;
    for m in maps.iter().filter(|m| m.lblk <= last && m.end() > first) {
        if m.lblk > next || m.kind == MapKind::Hole {
            return DirectPlan::Exclusive;
        }
        unwritten |= matches!(m.kind, MapKind::Unwritten(_));
        next = next.max(m.end());
    }
    if next <= last {
        return DirectPlan::Exclusive;
    }
    let unaligned = !off.is_multiple_of(bs) || !end.is_multiple_of(bs);
    if unaligned && (unwritten || !cfg.dio_unaligned_concurrent) {
        // Partial blocks of unwritten extents must be zeroed around the
        // data; concurrent writers would zero each other's bytes.
        return DirectPlan::Exclusive;
    }
    if unwritten {
        DirectPlan::Unwritten
    } else {
        DirectPlan::Overwrite
    }
}

/// Counters that show which path each I/O took (monotonic, relaxed).
#[derive(Debug, Default)]
pub struct IoStats {
    /// Journal handles started (every metadata operation, allocation,
    /// conversion and time update).
    pub handles: StripedCounter,
    /// Direct writes done as pure overwrites under the shared lock,
    /// without a handle (seed 000).
    pub dio_overwrite_no_handle: StripedCounter,
    /// Direct writes into unwritten extents submitted under the shared
    /// lock without a handle (seed 002).
    pub dio_unwritten_no_handle: StripedCounter,
    /// Direct writes into unwritten extents that started a handle at
    /// submission (seed 002's "before").
    pub dio_unwritten_with_handle: StripedCounter,
    /// Unwritten-to-written conversions done at I/O completion.
    pub dio_conversions: StripedCounter,
    /// Sub-block direct writes run concurrently under the shared lock
    /// (seed 003).
    pub dio_unaligned_shared: StripedCounter,
    /// Direct writes under the shared lock (any fast path).
    pub dio_write_shared: StripedCounter,
    /// Direct writes that took the exclusive lock.
    pub dio_write_exclusive: StripedCounter,
    /// Direct reads.
    pub dio_reads: StripedCounter,
    /// Buffered writes under the shared lock (seed 001).
    pub buffered_write_shared: StripedCounter,
    /// Buffered writes under the exclusive lock.
    pub buffered_write_exclusive: StripedCounter,
    /// Lazy mtime/ctime updates made by the shared-lock write paths (one
    /// handle each, at most once per second per inode), and pending
    /// atimes written out on their own (one handle each, `fs/atime.rs`).
    pub time_updates: StripedCounter,
    /// Dirty folios written back in place (blocks already written): no
    /// handle.
    pub writeback_overwrites: StripedCounter,
    /// Runs of dirty folios written back through the allocating path
    /// (delayed allocation: one mballoc request per run and chunk).
    pub writeback_alloc_runs: StripedCounter,
    /// Bytes written back.
    pub writeback_bytes: StripedCounter,
}

/// The data path's counters at one instant, from
/// [`FsCore::io_stats`](crate::FsCore::io_stats): subtract two snapshots
/// to see how many device reads and writes a workload caused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct IoStatsSnapshot {
    pub handles: u64,
    pub dio_overwrite_no_handle: u64,
    pub dio_unwritten_no_handle: u64,
    pub dio_unwritten_with_handle: u64,
    pub dio_conversions: u64,
    pub dio_unaligned_shared: u64,
    pub dio_write_shared: u64,
    pub dio_write_exclusive: u64,
    pub dio_reads: u64,
    pub buffered_write_shared: u64,
    pub buffered_write_exclusive: u64,
    pub time_updates: u64,
    pub writeback_overwrites: u64,
    pub writeback_alloc_runs: u64,
    pub writeback_bytes: u64,
}

impl IoStats {
    /// Adds one to `c`.
    pub fn bump(c: &StripedCounter) {
        c.bump();
    }

    /// The current values.
    pub fn snapshot(&self) -> IoStatsSnapshot {
        let g = |c: &StripedCounter| c.get();
        IoStatsSnapshot {
            handles: g(&self.handles),
            dio_overwrite_no_handle: g(&self.dio_overwrite_no_handle),
            dio_unwritten_no_handle: g(&self.dio_unwritten_no_handle),
            dio_unwritten_with_handle: g(&self.dio_unwritten_with_handle),
            dio_conversions: g(&self.dio_conversions),
            dio_unaligned_shared: g(&self.dio_unaligned_shared),
            dio_write_shared: g(&self.dio_write_shared),
            dio_write_exclusive: g(&self.dio_write_exclusive),
            dio_reads: g(&self.dio_reads),
            buffered_write_shared: g(&self.buffered_write_shared),
            buffered_write_exclusive: g(&self.buffered_write_exclusive),
            time_updates: g(&self.time_updates),
            writeback_overwrites: g(&self.writeback_overwrites),
            writeback_alloc_runs: g(&self.writeback_alloc_runs),
            writeback_bytes: g(&self.writeback_bytes),
        }
    }
}

impl IoStatsSnapshot {
    /// Field-wise `self - earlier`.
    pub fn since(&self, earlier: &IoStatsSnapshot) -> IoStatsSnapshot {
        IoStatsSnapshot {
            handles: self.handles - earlier.handles,
            dio_overwrite_no_handle: self.dio_overwrite_no_handle - earlier.dio_overwrite_no_handle,
            dio_unwritten_no_handle: self.dio_unwritten_no_handle - earlier.dio_unwritten_no_handle,
            dio_unwritten_with_handle: self.dio_unwritten_with_handle - earlier.dio_unwritten_with_handle,
            dio_conversions: self.dio_conversions - earlier.dio_conversions,
            dio_unaligned_shared: self.dio_unaligned_shared - earlier.dio_unaligned_shared,
            dio_write_shared: self.dio_write_shared - earlier.dio_write_shared,
            dio_write_exclusive: self.dio_write_exclusive - earlier.dio_write_exclusive,
            dio_reads: self.dio_reads - earlier.dio_reads,
            buffered_write_shared: self.buffered_write_shared - earlier.buffered_write_shared,
            buffered_write_exclusive: self.buffered_write_exclusive - earlier.buffered_write_exclusive,
            time_updates: self.time_updates - earlier.time_updates,
            writeback_overwrites: self.writeback_overwrites - earlier.writeback_overwrites,
            writeback_alloc_runs: self.writeback_alloc_runs - earlier.writeback_alloc_runs,
            writeback_bytes: self.writeback_bytes - earlier.writeback_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::block_number::PhysicalBlock;

    fn m(lblk: u64, len: u64, kind: MapKind) -> Mapping {
        Mapping { lblk: FileBlock(lblk), len, kind }
    }

    #[test]
    fn plans_follow_ext4_dio_write_checks() {
        let cfg = DataPathConfig::default();
        let bs = 4096;
        let written = [m(0, 10, MapKind::Mapped(PhysicalBlock(100)))];
        let mixed = [m(0, 2, MapKind::Mapped(PhysicalBlock(100))), m(2, 8, MapKind::Unwritten(PhysicalBlock(102)))];
        let holey = [m(0, 2, MapKind::Mapped(PhysicalBlock(100))), m(2, 8, MapKind::Hole)];
        let size = 10 * bs;
        assert_eq!(plan_direct_write(&cfg, &written, 0, 8192, size, bs), DirectPlan::Overwrite);
        assert_eq!(plan_direct_write(&cfg, &written, 100, 2000, size, bs), DirectPlan::Overwrite);
        assert_eq!(plan_direct_write(&cfg, &written, size - 10, 20, size, bs), DirectPlan::Exclusive, "extends");
        assert_eq!(plan_direct_write(&cfg, &mixed, 0, 4 * bs, size, bs), DirectPlan::Unwritten);
        assert_eq!(plan_direct_write(&cfg, &mixed, 10, 4 * bs, size, bs), DirectPlan::Exclusive, "unaligned unwritten");
        assert_eq!(plan_direct_write(&cfg, &mixed, 10, 100, size, bs), DirectPlan::Overwrite, "edge block written");
        assert_eq!(plan_direct_write(&cfg, &holey, 0, 4 * bs, size, bs), DirectPlan::Exclusive);
        assert_eq!(plan_direct_write(&cfg, &written[..0], 0, bs, size, bs), DirectPlan::Exclusive, "unmapped");
        let before = DataPathConfig { dio_unaligned_concurrent: false, ..cfg };
        assert_eq!(plan_direct_write(&before, &written, 100, 2000, size, bs), DirectPlan::Exclusive);
        assert_eq!(plan_direct_write(&before, &written, 0, bs, size, bs), DirectPlan::Overwrite);
        let excl = DataPathConfig { lock_policy: LockPolicy::Exclusive, ..cfg };
        assert_eq!(plan_direct_write(&excl, &written, 0, bs, size, bs), DirectPlan::Exclusive);
    }
}
