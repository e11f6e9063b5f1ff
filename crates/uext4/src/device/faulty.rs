//! A device that fails on purpose: fault injection for tests.
//!
//! [`FaultyDevice`] wraps any [`BlockDevice`] and makes chosen calls fail
//! with EIO: the Nth read, write or flush from now, every access touching
//! a byte range, a seeded pseudo-random fraction of calls, or everything
//! from some call on (a dead disk). A failing write can first write part
//! of its buffer (a torn, short write), as a real disk may.
//!
//! Faults are armed and cleared at run time through a shared reference,
//! so a test opens a [`crate::Filesystem`] over `Arc<FaultyDevice>` with
//! [`crate::Filesystem::open_device`] (the normal open path) and injects
//! faults while it runs.

use super::BlockDevice;
use parking_lot::Mutex;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Which kinds of call a fault of a [`FaultyDevice`] applies to (a bit
/// set): combine them with `|` to fail, say, writes and flushes but not
/// reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultOps(u8);

impl FaultOps {
    /// `read_at`.
    pub const READ: FaultOps = FaultOps(1);
    /// `write_at`.
    pub const WRITE: FaultOps = FaultOps(2);
    /// `flush`.
    pub const FLUSH: FaultOps = FaultOps(4);
    /// Writes and flushes.
    pub const WRITE_FLUSH: FaultOps = FaultOps(6);
    /// Every call.
    pub const ALL: FaultOps = FaultOps(7);

    fn has(self, o: FaultOps) -> bool {
        self.0 & o.0 != 0
    }
}

impl std::ops::BitOr for FaultOps {
    type Output = FaultOps;
    fn bitor(self, o: FaultOps) -> FaultOps {
        FaultOps(self.0 | o.0)
    }
}

#[derive(Debug, Clone)]
enum Trigger {
    /// The `n`th matching call from when the rule was armed (1-based).
    Nth(u64),
    /// Any matching call touching bytes `start..end` (flushes never do).
    Range(u64, u64),
    /// Each matching call with probability `per_million / 10^6`.
    Random { state: u64, per_million: u32 },
}

#[derive(Debug, Clone)]
struct Rule {
    ops: FaultOps,
    trigger: Trigger,
    /// Matching calls seen since the rule was armed.
    seen: u64,
    /// Once triggered, the device dies: every later call fails.
    kills: bool,
    /// Fire at most once.
    once: bool,
    spent: bool,
}

#[derive(Debug, Default)]
struct State {
    rules: Vec<Rule>,
    /// Dead disk: every call of these kinds fails.
    dead: Option<FaultOps>,
    /// A failing write first writes this fraction (in 1/256) of its
    /// buffer, rounded down to 4 KiB (0: nothing is written).
    short: u16,
}

/// A [`BlockDevice`] wrapper that injects I/O errors (see the module docs):
/// for tests of how the engine or a front end behaves when the disk fails
/// once ([`FaultyDevice::fail_nth`]) or for good ([`FaultyDevice::kill`]).
pub struct FaultyDevice {
    inner: Arc<dyn BlockDevice>,
    state: Mutex<State>,
    calls: [AtomicU64; 3],
    injected: AtomicU64,
}

impl std::fmt::Debug for FaultyDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyDevice").field("injected", &self.injected()).finish_non_exhaustive()
    }
}

fn op_index(op: FaultOps) -> usize {
    match op.0 {
        1 => 0,
        2 => 1,
        _ => 2,
    }
}

impl FaultyDevice {
    /// Wraps `inner`; no fault is armed.
    pub fn new(inner: Arc<dyn BlockDevice>) -> FaultyDevice {
        FaultyDevice {
            inner,
            state: Mutex::new(State::default()),
            calls: Default::default(),
            injected: AtomicU64::new(0),
        }
    }

    /// The wrapped device (to inspect what reached it).
    pub fn inner(&self) -> &Arc<dyn BlockDevice> {
        &self.inner
    }

    fn arm(&self, ops: FaultOps, trigger: Trigger, kills: bool, once: bool) {
        self.state.lock().rules.push(Rule { ops, trigger, seen: 0, kills, once, spent: false });
    }

    /// The `n`th call (1-based, counted from now) of a kind in `ops` fails
    /// once; later calls succeed.
    pub fn fail_nth(&self, ops: FaultOps, n: u64) {
        self.arm(ops, Trigger::Nth(n.max(1)), false, true);
    }

    /// Every call of a kind in `ops` that touches device bytes
    /// `start..end` fails, until [`FaultyDevice::heal`] (a bad region).
    pub fn fail_range(&self, ops: FaultOps, start: u64, end: u64) {
        self.arm(ops, Trigger::Range(start, end), false, false);
    }

    /// Each call of a kind in `ops` fails with probability
    /// `per_million / 1_000_000`, drawn from a generator seeded with
    /// `seed` (the same seed and call sequence give the same faults).
    pub fn fail_random(&self, ops: FaultOps, seed: u64, per_million: u32) {
        let state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        self.arm(ops, Trigger::Random { state, per_million }, false, false);
    }

    /// From the `n`th call (1-based, from now) of a kind in `ops` on, the
    /// disk is dead: that call and every later read, write and flush fail.
    pub fn die_at(&self, ops: FaultOps, n: u64) {
        self.arm(ops, Trigger::Nth(n.max(1)), true, true);
    }

    /// The disk dies now: every later call fails.
    pub fn kill(&self) {
        self.state.lock().dead = Some(FaultOps::ALL);
    }

    /// A write that fails first writes `fraction_256 / 256` of its buffer
    /// (rounded down to whole 4 KiB units, the atomic write unit of a 4Kn
    /// disk: ext4 itself assumes its 1 KiB superblock is written whole):
    /// a torn write.
    pub fn set_short_writes(&self, fraction_256: u16) {
        self.state.lock().short = fraction_256.min(256);
    }

    /// Removes every armed fault and revives a dead disk.
    pub fn heal(&self) {
        let mut st = self.state.lock();
        st.rules.clear();
        st.dead = None;
    }

    /// Calls of kind `op` (one of READ, WRITE, FLUSH) so far.
    pub fn calls(&self, op: FaultOps) -> u64 {
        self.calls[op_index(op)].load(Ordering::Relaxed)
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }

    /// Decides whether this call fails; returns how many bytes of a
    /// failing write to write first.
    fn check(&self, op: FaultOps, offset: u64, len: usize) -> Option<usize> {
        self.calls[op_index(op)].fetch_add(1, Ordering::Relaxed);
        let mut st = self.state.lock();
        let mut fail = st.dead.is_some_and(|d| d.has(op));
        let mut kill = false;
        for r in st.rules.iter_mut().filter(|r| !r.spent && r.ops.has(op)) {
            r.seen += 1;
            let hit = match &mut r.trigger {
                Trigger::Nth(n) => r.seen == *n,
                Trigger::Range(s, e) => op != FaultOps::FLUSH && offset < *e && offset + len as u64 > *s,
                Trigger::Random { state, per_million } => {
                    // xorshift64*
                    *state ^= *state >> 12;
                    *state ^= *state << 25;
                    *state ^= *state >> 27;
                    let v = state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32;
                    v % 1_000_000 < u64::from(*per_million)
                }
            };
            if hit {
                fail = true;
                kill |= r.kills;
                r.spent = r.once;
            }
        }
        if kill {
            st.dead = Some(FaultOps::ALL);
        }
        if !fail {
            return None;
        }
        self.injected.fetch_add(1, Ordering::Relaxed);
        Some((len * usize::from(st.short) / 256) & !4095)
    }
}

fn injected_error(what: &str, offset: u64) -> io::Error {
    // No raw errno: `Error::errno` maps an I/O error without one to EIO.
    io::Error::other(format!("injected {what} error at byte {offset}"))
}

impl BlockDevice for FaultyDevice {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if self.check(FaultOps::READ, offset, buf.len()).is_some() {
            return Err(injected_error("read", offset));
        }
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if let Some(part) = self.check(FaultOps::WRITE, offset, buf.len()) {
            if part > 0 {
                // The torn prefix reaches the device; the call still fails.
                let _ = self.inner.write_at(&buf[..part], offset);
            }
            return Err(injected_error("write", offset));
        }
        self.inner.write_at(buf, offset)
    }

    fn flush(&self) -> io::Result<()> {
        if self.check(FaultOps::FLUSH, 0, 0).is_some() {
            return Err(injected_error("flush", 0));
        }
        self.inner.flush()
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_only(&self) -> bool {
        self.inner.read_only()
    }
}
