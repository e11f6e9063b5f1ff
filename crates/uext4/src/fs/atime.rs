//! Access times: the mount's policy (`relatime`, `strictatime`,
//! `noatime`, `lazytime`) and the batching that keeps reads free of
//! journal handles.
//!
//! A read of file data or a directory listing decides by the kernel's
//! rules ([`needs_update`]) whether the access time changes, and records
//! the new one in the inode's entry of the inode lock table
//! ([`crate::data::FileData::atime`], one atomic word): the read path
//! takes no lock for it. Only an inode's *first* pending atime also puts
//! its number on a sharded list here (a short mutex, once per inode
//! between two write-outs). `stat` reports the pending time.
//!
//! The pending atime reaches the inode record, in a journal handle of
//! its own or of another change:
//! - with the inode's next change by `setattr` (an explicit atime wins
//!   over it) or by the write paths' mtime updates;
//! - at `fsync` of the inode, at `commit`/`sync` and at unmount;
//! - from the background writeback thread, once it has waited the commit
//!   interval, or 24 hours with `lazytime` (as the kernel's
//!   `dirtytime_expire_interval`).
//!
//! A crash loses pending atimes, as it loses the kernel's under
//! `lazytime`. The write-out holds the inode's I/O lock shared and its
//! mapping lock exclusively, as the data path's lazy mtime update does,
//! so no other writer of the record is half-way through a
//! read-modify-write of it.

use super::types::AtimeMode;
use super::FsCore;
use crate::data::FileIo;
use crate::error::Result;
use crate::format::inode::{Inode, S_IFDIR, S_IFMT};
use crate::format::timestamp::Timestamp;
use crate::fs::namespace::flags::FL_NOATIME;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const SHARDS: usize = 16;

/// How long a pending atime waits under `lazytime` (the kernel's
/// `dirtytime_expire_interval`, 12 hours, rounded up to the day the
/// relatime rule works in).
const LAZYTIME_AGE: Duration = Duration::from_secs(24 * 3600);

/// The access-time policy of a filesystem and the inodes whose new atime
/// is not written yet.
#[derive(Debug)]
pub(crate) struct Atimes {
    mode: AtimeMode,
    /// `nodiratime`: directories keep their access times.
    pub(crate) nodiratime: bool,
    /// How long a pending atime waits for the background write-out.
    max_age: Duration,
    /// Inode number -> when its atime became pending.
    pending: Vec<Mutex<HashMap<u32, Instant>>>,
}

impl Default for Atimes {
    fn default() -> Self {
        Atimes::new(AtimeMode::default(), false, Duration::from_secs(5))
    }
}

impl Atimes {
    /// The policy of a mount: `mode`, `lazytime`, and the commit interval
    /// that pending atimes wait without `lazytime`.
    pub(crate) fn new(mode: AtimeMode, lazytime: bool, commit_interval: Duration) -> Atimes {
        let max_age = if lazytime { LAZYTIME_AGE } else { commit_interval };
        Atimes { mode, nodiratime: false, max_age, pending: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect() }
    }

    fn note(&self, ino: u32) {
        self.pending[ino as usize % SHARDS].lock().entry(ino).or_insert_with(Instant::now);
    }

    /// Takes off the list, and returns, the inodes pending for at least
    /// `older`.
    fn due(&self, older: Duration) -> Vec<u32> {
        let now = Instant::now();
        let mut v = Vec::new();
        for shard in &self.pending {
            shard.lock().retain(|&ino, since| {
                let due = now.saturating_duration_since(*since) >= older;
                if due {
                    v.push(ino);
                }
                !due
            });
        }
        v.sort_unstable();
        v
    }
}

/// What the access-time decision needs of an inode record: a copy, so
/// that a read can drop the parsed inode before it copies data out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AccessTimes {
    ino: u32,
    atime: Timestamp,
    mtime: Timestamp,
    ctime: Timestamp,
    flags: u32,
    /// A directory (`nodiratime` spares those).
    dir: bool,
}

impl AccessTimes {
    /// The times and flags of `i`.
    pub(crate) fn of(i: &Inode) -> AccessTimes {
        let dir = i.mode & S_IFMT == S_IFDIR;
        AccessTimes { ino: i.ino, atime: i.atime, mtime: i.mtime, ctime: i.ctime, flags: i.flags, dir }
    }
}

/// The kernel's `atime_needs_update` for a mount in `mode`: should a read
/// at `now` of an inode with these times set its atime to `now`?
pub(crate) fn needs_update(
    mode: AtimeMode,
    atime: Timestamp,
    mtime: Timestamp,
    ctime: Timestamp,
    now: Timestamp,
) -> bool {
    let relatime_says = match mode {
        AtimeMode::Noatime => return false,
        AtimeMode::Strictatime => true,
        // relatime_need_update: the atime is not after the last change,
        // or it is a day old.
        AtimeMode::Relatime => mtime >= atime || ctime >= atime || now.sec - atime.sec >= 24 * 3600,
    };
    relatime_says && atime != now
}

impl FsCore {
    /// A read of the inode whose times are `t` (state `st`) happened:
    /// records a new atime if the policy asks for one. No lock, no
    /// handle; the first pending atime of the inode puts it on the
    /// write-out list.
    pub(super) fn note_access(&self, st: &FileIo, t: &AccessTimes) {
        let Some(rw) = self.live() else { return };
        let a = &rw.data.atimes;
        if a.mode == AtimeMode::Noatime || t.flags & FL_NOATIME != 0 || (a.nodiratime && t.dir) {
            return;
        }
        let atime = st.data.atime.get().unwrap_or(t.atime);
        // Under relatime most reads change nothing, and the rule needs
        // only whole seconds of the clock: the coarse one decides (at
        // worst a tick late for the day-old case), the precise one is
        // read for the new time only.
        if a.mode == AtimeMode::Relatime && !needs_update(a.mode, atime, t.mtime, t.ctime, Timestamp::now_coarse()) {
            return;
        }
        let now = Timestamp::now();
        if needs_update(a.mode, atime, t.mtime, t.ctime, now) && st.data.atime.set(now) {
            a.note(t.ino);
        }
    }

    /// [`FsCore::note_access`] for a caller that has no [`FileIo`] at hand.
    pub(super) fn note_access_ino(&self, i: &Inode) {
        if let Some(rw) = self.live() {
            if rw.data.atimes.mode != AtimeMode::Noatime {
                self.note_access(&rw.data.inode(i.ino), &AccessTimes::of(i));
            }
        }
    }

    /// The atime `stat` reports for `ino`: the pending one, if any.
    pub(super) fn pending_atime(&self, ino: u32) -> Option<Timestamp> {
        self.live()?.data.peek(ino)?.data.atime.get()
    }

    /// Moves a pending atime into `i`, which the caller is about to write
    /// in a handle (the inode's next journaled change carries it). The
    /// caller holds the inode's I/O lock exclusively, or shared with its
    /// mapping lock exclusively.
    pub(super) fn take_atime(st: &FileIo, i: &mut Inode) {
        if let Some(t) = st.data.atime.take() {
            i.atime = t;
        }
    }

    /// Writes the pending atime of `ino`, if any, in a handle of its own.
    pub(crate) fn write_atime(&self, ino: u32) -> Result<()> {
        let rw = self.rw()?;
        let st = rw.data.inode(ino);
        if !st.data.atime.is_set() {
            return Ok(());
        }
        let _io = st.io.read();
        crate::data::IoStats::bump(&rw.data.stats().time_updates);
        let tx = self.begin(1)?;
        let _m = st.map.write();
        let r = (|| {
            let Some(t) = st.data.atime.take() else { return Ok(()) };
            // Deleted (the number is free again) or unlinked and open:
            // nobody will see the time.
            let Ok(mut i) = self.inode(ino) else { return Ok(()) };
            if i.links_count == 0 {
                return Ok(());
            }
            i.atime = t;
            if let Err(e) = tx.write_inode(&mut i) {
                // Left pending for the next attempt.
                if st.data.atime.set(t) {
                    rw.data.atimes.note(ino);
                }
                return Err(e);
            }
            rw.txns.note_dirty(&[ino], tx.tid());
            Ok(())
        })();
        tx.settle();
        r
    }

    /// Writes the atimes pending for at least `older` (zero: all of them).
    /// Every inode is tried; the first error is returned.
    pub(crate) fn write_atimes(&self, older: Duration) -> Result<()> {
        let Some(rw) = self.live() else { return Ok(()) };
        let mut first = None;
        for ino in rw.data.atimes.due(older) {
            if let Err(e) = self.write_atime(ino) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// The background write-out of pending atimes (the writeback thread).
    pub(super) fn write_old_atimes(&self) {
        if let Some(rw) = self.live() {
            let _ = self.write_atimes(rw.data.atimes.max_age);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(sec: i64) -> Timestamp {
        Timestamp { sec, nsec: 0 }
    }

    #[test]
    fn relatime_rule_is_the_kernels() {
        let r = AtimeMode::Relatime;
        let now = t(1_000_000);
        // atime not after mtime or ctime: update.
        assert!(needs_update(r, t(500), t(500), t(400), now));
        assert!(needs_update(r, t(500), t(400), t(600), now));
        // Newer than both and recent: no update.
        assert!(!needs_update(r, t(999_000), t(998_000), t(998_000), now));
        // A day old: update.
        assert!(needs_update(r, t(1_000_000 - 86_400), t(0), t(0), now));
        assert!(!needs_update(r, t(1_000_000 - 86_399), t(0), t(0), now));
        // Never to the same time.
        assert!(!needs_update(r, now, now, now, now));
    }

    #[test]
    fn strict_and_no_atime() {
        let now = t(1_000_000);
        assert!(needs_update(AtimeMode::Strictatime, t(999_999), t(0), t(0), now));
        assert!(!needs_update(AtimeMode::Strictatime, now, t(0), t(0), now));
        assert!(!needs_update(AtimeMode::Noatime, t(0), t(5), t(5), now));
    }

    #[test]
    fn pending_time_round_trips() {
        let p = crate::data::PendingTime::default();
        assert_eq!(p.get(), None);
        for ts in [
            Timestamp { sec: 1_700_000_000, nsec: 999_999_999 },
            Timestamp { sec: -(1 << 31), nsec: 0 },
            Timestamp { sec: (1 << 34) - 1 - (1 << 31), nsec: 5 },
            Timestamp { sec: 0, nsec: 0 },
        ] {
            assert!(p.set(ts));
            assert!(!p.set(ts));
            assert_eq!(p.get(), Some(ts));
            assert_eq!(p.take(), Some(ts));
            assert!(!p.is_set());
        }
    }

    #[test]
    fn due_takes_only_old_entries() {
        let a = Atimes::default();
        a.note(7);
        a.note(3);
        assert_eq!(a.due(Duration::from_secs(3600)), Vec::<u32>::new());
        assert_eq!(a.due(Duration::ZERO), vec![3, 7]);
        assert_eq!(a.due(Duration::ZERO), Vec::<u32>::new());
    }
}
