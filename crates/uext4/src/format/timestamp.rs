//! Inode timestamps: a 32-bit seconds field and, in large inodes, an
//! `_extra` word with 2 epoch bits and 30 bits of nanoseconds.

/// A timestamp with nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Timestamp {
    /// Seconds since the epoch (may be negative or beyond 2038).
    pub sec: i64,
    /// Nanoseconds, 0..1_000_000_000.
    pub nsec: u32,
}

impl Timestamp {
    /// Decodes a 32-bit seconds field and its optional `_extra` word
    /// (2 epoch bits extending the seconds, 30 bits of nanoseconds).
    pub fn decode(secs: u32, extra: Option<u32>) -> Timestamp {
        let mut sec = i64::from(secs as i32);
        let mut nsec = 0;
        if let Some(extra) = extra {
            sec += i64::from(extra & 3) << 32;
            nsec = (extra >> 2).min(999_999_999);
        }
        Timestamp { sec, nsec }
    }

    /// Encodes into the 32-bit seconds field and the `_extra` word.
    /// Seconds outside ext4's range (1901..2446) are clamped to it.
    pub fn encode(self) -> (u32, u32) {
        let min = -(1i64 << 31);
        let max = (1i64 << 34) - (1i64 << 31) - 1;
        let sec = self.sec.clamp(min, max);
        let epoch = ((sec - i64::from(sec as i32)) >> 32) as u32 & 3;
        (sec as u32, epoch | (self.nsec.min(999_999_999) << 2))
    }

    /// The current time, or the fixed time set by
    /// [`Timestamp::set_fixed_clock`].
    pub fn now() -> Timestamp {
        let fixed = FIXED_CLOCK.load(std::sync::atomic::Ordering::Relaxed);
        if fixed != CLOCK_REAL {
            return Timestamp { sec: fixed, nsec: 0 };
        }
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Timestamp { sec: d.as_secs() as i64, nsec: d.subsec_nanos() }
    }

    /// The current time from the coarse clock (`CLOCK_REALTIME_COARSE`:
    /// the last timer tick, a few milliseconds behind [`Timestamp::now`]
    /// and never ahead of it), or the fixed time of
    /// [`Timestamp::set_fixed_clock`]. Cheaper than `now`: for decisions
    /// taken on every read or write that rarely lead to a new timestamp
    /// (relatime, the once-a-second mtime update), which then stamp with
    /// `now`.
    pub fn now_coarse() -> Timestamp {
        let fixed = FIXED_CLOCK.load(std::sync::atomic::Ordering::Relaxed);
        if fixed != CLOCK_REAL {
            return Timestamp { sec: fixed, nsec: 0 };
        }
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid, writable timespec for the call's
        // duration; clock_gettime writes nothing else.
        if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) } != 0 {
            return Timestamp::now();
        }
        Timestamp { sec: ts.tv_sec, nsec: (ts.tv_nsec as u32).min(999_999_999) }
    }

    /// The time [`Timestamp::set_fixed_clock`] fixed, if it did.
    pub fn fixed_clock() -> Option<i64> {
        let fixed = FIXED_CLOCK.load(std::sync::atomic::Ordering::Relaxed);
        (fixed != CLOCK_REAL).then_some(fixed)
    }

    /// Makes [`Timestamp::now`] return `sec` (whole seconds) in the whole
    /// process until called again with `None`. For reproducible images
    /// (`SOURCE_DATE_EPOCH`): every time the engine stamps (inode change
    /// and creation times, superblock mount and write times, journal
    /// commit times, the generation-number seed) is then the same on
    /// every run. Process-wide because the clock is read deep inside
    /// every operation; only a tool that owns the process (`uext4 mkfs
    /// -d`) should set it.
    pub fn set_fixed_clock(sec: Option<i64>) {
        // i64::MIN itself cannot be fixed; it is before ext4's range anyway.
        let v = sec.map_or(CLOCK_REAL, |s| s.max(CLOCK_REAL + 1));
        FIXED_CLOCK.store(v, std::sync::atomic::Ordering::Relaxed);
    }
}

/// [`FIXED_CLOCK`]'s value for "read the real clock".
const CLOCK_REAL: i64 = i64::MIN;
/// The fixed time of [`Timestamp::set_fixed_clock`], or [`CLOCK_REAL`].
static FIXED_CLOCK: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(CLOCK_REAL);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_across_the_epochs() {
        for (sec, nsec) in [
            (0i64, 0u32),
            (-1, 5),
            (-(1 << 31), 1),
            (1 << 31, 999_999_999),
            (1_700_000_000, 42),
            ((1 << 34) - (1 << 31) - 1, 7),
        ] {
            let t = Timestamp { sec, nsec };
            let (s, e) = t.encode();
            assert_eq!(Timestamp::decode(s, Some(e)), t, "{sec}");
        }
        // Without the extra word only 1901..2038 is representable.
        assert_eq!(Timestamp::decode(u32::MAX, None), Timestamp { sec: -1, nsec: 0 });
        // Out of range seconds are clamped, nanoseconds capped.
        let (s, e) = Timestamp { sec: i64::MAX, nsec: u32::MAX }.encode();
        assert_eq!(Timestamp::decode(s, Some(e)), Timestamp { sec: (1 << 34) - (1 << 31) - 1, nsec: 999_999_999 });
    }

    #[test]
    fn coarse_clock_is_never_ahead() {
        let coarse = Timestamp::now_coarse();
        let fine = Timestamp::now();
        assert!(coarse <= fine, "{coarse:?} after {fine:?}");
        // One tick behind at most (well under a second).
        assert!(fine.sec - coarse.sec <= 1, "{coarse:?} vs {fine:?}");
    }
}
