//! The FUSE protocol features uext4 asks the kernel for, each switchable
//! by a mount option, and the parsing of those options.
//!
//! The defaults are the measured best on the project's machine
//! (docs/BENCHMARKS.md): 1 MiB writes, O_DIRECT opens and opens that may
//! write served without the kernel's page cache and with parallel writes,
//! the ranges they write put back into that cache for its readers,
//! cached pages kept across opens, parallel directory operations,
//! readdirplus for every listing, entry and attribute
//! timeouts of a day (see [`KernelFeatures::attr_ttl`] for why that is
//! safe, [`DEFAULT_TTL`] for why that long), a one-second negative-entry
//! timeout, and no kernel writeback cache.
//! Asynchronous reads are always on (the session asks for them at INIT);
//! splice is not offered (the transports copy into their own buffers).

use std::time::Duration;

/// Largest `max_write` the kernel accepts (FUSE_MAX_MAX_PAGES of 4 KiB
/// pages is 1 MiB on the kernels that matter here).
pub const MAX_WRITE_LIMIT: u32 = 1 << 20;

/// The default entry and attribute timeouts: the longest the options
/// accept. The daemon is the image's only writer, so a cached name or
/// attribute goes stale only through a change the kernel sees or is told
/// of (see [`KernelFeatures::attr_ttl`]); an expiry buys nothing, as ext4's
/// never-expiring dentries in the kernel show, and costs a LOOKUP per
/// cached name once it passes: with 60 s, a walk of a 2M-inode tree
/// lasting longer than a minute found every name it had passed expired
/// and looked each up again (docs/BENCHMARKS.md, "Scale").
pub const DEFAULT_TTL: Duration = Duration::from_secs(MAX_TTL_SECS);

/// Longest `entry_timeout`, `attr_timeout` and `negative_timeout`.
const MAX_TTL_SECS: u64 = 86400;

/// When the kernel asks for READDIRPLUS (names with attributes) instead of
/// READDIR ([`KernelFeatures::readdirplus`], `-o readdirplus=`): `On`
/// for walks that stat what they list, `Off` when listings are read
/// without touching the entries and their attributes are not worth
/// sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Readdirplus {
    /// Never: READDIR only.
    Off,
    /// For every listing (the default): every entry comes with its
    /// attributes, so that a walk that stats, unlinks or opens the names
    /// it lists (`rm -rf`, `du`, `git status`) costs no LOOKUP per entry.
    #[default]
    On,
    /// When the kernel sees the caller stat the entries it lists
    /// (FUSE_READDIRPLUS_AUTO): the first batch of a listing (offset 0),
    /// and a later one only if a lookup or revalidation of a listed name
    /// came in between (fs/fuse/readdir.c, fuse_use_readdirplus). fts
    /// (`rm -rf`, `du`, `find`) reads a whole directory before it touches
    /// an entry, so every batch after the first is a plain READDIR and
    /// every name in it costs a LOOKUP (0.61 per file for `rm -rf` and
    /// `du` of 500-entry directories, docs/BENCHMARKS.md).
    Auto,
}

/// What the adapter negotiates with the kernel at INIT and answers at
/// open. Every field has a mount option (see [`KernelFeatures::set`]).
#[derive(Debug, Clone, PartialEq)]
pub struct KernelFeatures {
    /// `max_write=SIZE`: largest write request, 4 KiB to 1 MiB.
    pub max_write: u32,
    /// `[no]parallel_direct_writes`: let the kernel send writes to one
    /// file in parallel on opens it serves without its page cache
    /// (FOPEN_PARALLEL_DIRECT_WRITES); without it the kernel sends them one
    /// at a time.
    pub parallel_direct_writes: bool,
    /// `[no]direct_odirect`: answer O_DIRECT opens with FOPEN_DIRECT_IO, so
    /// their I/O reaches uext4's direct path as the caller gave it
    /// (unaligned included). Off: the kernel's own O_DIRECT handling for
    /// FUSE, which serializes writes to a file.
    pub direct_odirect: bool,
    /// `[no]direct_writes`: answer buffered opens that may write with
    /// FOPEN_DIRECT_IO too (read-only opens keep the kernel's page cache).
    /// The kernel otherwise serializes buffered writes to a file under its
    /// inode lock and sends each as a round trip; with it the writes of all
    /// writers of a file reach the daemon in parallel. The price: reads
    /// through such an open reach uext4's page cache by a round trip each,
    /// and readers lose the kernel's pages of every range written. On by
    /// default; off by itself only matters with `writeback_cache`.
    pub direct_writes: bool,
    /// `[no]direct_new_files`: with `writeback_cache` and
    /// `nodirect_writes`, answer the open of a file just created (CREATE,
    /// O_TMPFILE) or truncated at open with FOPEN_DIRECT_IO. Its writes
    /// then reach the daemon as they are made and its close costs no round
    /// trip; through the writeback cache a small new file costs three more
    /// at close (the write-back of its pages, the times, the
    /// security.capability lookup of the first write). The kernel does
    /// not move the times it keeps for such writes (see `writeback_cache`).
    pub direct_new_files: bool,
    /// `direct_io`: answer every open with FOPEN_DIRECT_IO (the kernel
    /// keeps no page cache of the mount's files).
    pub direct_io: bool,
    /// `writeback_cache` (opt-in; turns `direct_writes` off, which a
    /// `direct_writes` after it turns on again): let the kernel cache buffered writes
    /// and write them back later (FUSE_WRITEBACK_CACHE). Buffered writes
    /// then cost no round trip each and readers of a file being written
    /// keep their cached pages (W2 2+2 through the mount: 0.9-1x the
    /// kernel's ext4 for reads and writes, against 0.04x writes and 0.5x
    /// reads without it; docs/BENCHMARKS.md). Off by default because the
    /// kernel FUSE client then differs from ext4 where the daemon changes
    /// a file behind the kernel's cache (docs/COMPATIBILITY.md): it keeps
    /// a cached regular file's mtime, ctime and size itself and never
    /// takes the daemon's (fuse_get_cache_mask), so writes through
    /// FOPEN_DIRECT_IO opens (O_DIRECT, new files) and `chattr` leave the
    /// times it shows behind until it drops the inode (fstests
    /// generic/277). (A buffered reader racing an AIO O_DIRECT writer no
    /// longer keeps old data: the daemon drops the range before the
    /// write's reply, `notify::Notifier::inval_then`.)
    pub writeback_cache: bool,
    /// `[no]strict_dirty_limit`: keep the kernel's strict limit on the
    /// mount's dirty pages (1 % of the dirty threshold, even when nothing
    /// else is dirty). Off by default: with `writeback_cache` the daemon
    /// clears it when it can (see `dirty_limit`).
    pub strict_dirty_limit: bool,
    /// `[no]store_writes`: the bytes of a write through an open the
    /// kernel does not cache (`direct_writes`) are put back into the
    /// kernel's cached pages (FUSE_NOTIFY_STORE, when the next write of
    /// the file arrives) while another open of the file reads through that
    /// cache. The kernel drops its pages of every range written that way;
    /// without this, readers of a file being written go back to the
    /// daemon for every page a writer touched. Off by default: a READ that
    /// fills a page of the range and a shared mapping that dirties it in
    /// the microseconds the store is in flight would have that dirty page
    /// overwritten by the stored bytes, and stores halve W2's writes at
    /// 2+2 (docs/BENCHMARKS.md).
    pub store_writes: bool,
    /// `[no]kernel_cache` (libfuse's name): the kernel keeps a file's
    /// cached pages when it is opened again (FOPEN_KEEP_CACHE) instead of
    /// dropping them at every open. Safe because every change of file data
    /// goes through this mount, so the kernel already drops or updates
    /// what changes (buffered writes update its pages; writes of opens it
    /// does not cache, truncate and fallocate drop the range, and so does
    /// copy_file_range for its destination); the image is
    /// locked against any other writer.
    pub kernel_cache: bool,
    /// `[no]parallel_dirops`: let the kernel run lookups and readdirs of
    /// one directory in parallel (FUSE_PARALLEL_DIROPS).
    pub parallel_dirops: bool,
    /// `readdirplus=on|off|auto`.
    pub readdirplus: Readdirplus,
    /// `entry_timeout=SECONDS`: how long the kernel may cache a name.
    pub entry_ttl: Duration,
    /// `attr_timeout=SECONDS`: how long the kernel may cache attributes.
    ///
    /// Long by default (`DEFAULT_TTL`, as the entry timeout): the daemon is the image's
    /// only writer and every change reaches it through this mount, so the
    /// kernel already drops what its own requests change (the attributes
    /// of a file it writes, truncates, fallocates, links, renames or sets
    /// an xattr of, the directories whose entries change, the atime after
    /// every READ and READDIR it sends). What the daemon changes on its
    /// own (set-id bits a write removes, a set-group-ID bit an ACL
    /// removes, the ctime of FS_IOC_SETFLAGS and FS_IOC_FSSETXATTR) it
    /// pushes out of the kernel's cache itself (FUSE_NOTIFY_INVAL_INODE).
    pub attr_ttl: Duration,
    /// `negative_timeout=SECONDS`: how long the kernel may remember that a
    /// name does not exist (0: it asks every time).
    pub negative_ttl: Duration,
}

impl Default for KernelFeatures {
    fn default() -> Self {
        KernelFeatures {
            max_write: MAX_WRITE_LIMIT,
            parallel_direct_writes: true,
            direct_odirect: true,
            direct_writes: true,
            direct_new_files: true,
            direct_io: false,
            writeback_cache: false,
            strict_dirty_limit: false,
            store_writes: false,
            kernel_cache: true,
            parallel_dirops: true,
            readdirplus: Readdirplus::On,
            entry_ttl: DEFAULT_TTL,
            attr_ttl: DEFAULT_TTL,
            negative_ttl: Duration::from_secs(1),
        }
    }
}

/// The mount options [`KernelFeatures::set`] knows, for help texts.
pub const OPTIONS: &str = "max_write=SIZE, [no]parallel_direct_writes, [no]direct_odirect, [no]direct_writes, [no]direct_new_files, \
                           direct_io, [no]writeback_cache, [no]strict_dirty_limit, [no]store_writes, [no]kernel_cache, [no]parallel_dirops, \
                           readdirplus=on|off|auto, entry_timeout=SECONDS, attr_timeout=SECONDS, \
                           negative_timeout=SECONDS";

impl KernelFeatures {
    /// The lifetime for replies that carry one for both the name and the
    /// attributes (CREATE, READDIRPLUS entries): the shorter of the two.
    pub fn entry_and_attr_ttl(&self) -> Duration {
        self.entry_ttl.min(self.attr_ttl)
    }

    /// The open flags answered for an open with flags `flags` (O_DIRECT,
    /// the access mode; O_CREAT from CREATE, O_TRUNC): every backend
    /// answers opens alike, so that the kernel caches (or not) the same way.
    pub fn fopen(&self, flags: i32) -> crate::proto::types::FopenFlags {
        use crate::proto::types::FopenFlags;
        let direct = flags & libc::O_DIRECT != 0;
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY;
        // CREATE keeps O_CREAT in the flags it passes (OPEN never does),
        // and O_TRUNC reaches OPEN only with atomic_o_trunc: either way
        // the file is empty as this open begins.
        let fresh = flags & (libc::O_CREAT | libc::O_TRUNC) != 0;
        // Nothing to do at close: every write reached the library already
        // (with the kernel's writeback cache the kernel ignores this flag
        // and writes its dirty pages back at close, as it must).
        let mut fopen = FopenFlags::FOPEN_NOFLUSH;
        if self.kernel_cache {
            // Every change of the data goes through this mount, so the
            // kernel's pages are current: no reason to drop them at open.
            fopen |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        let fresh_direct = fresh && self.direct_new_files && self.writeback_cache;
        if (direct && self.direct_odirect) || self.direct_io || (writes && (self.direct_writes || fresh_direct)) {
            // The kernel sends the I/O of this open straight to us, as the
            // caller gave it, and lets writes to one file run in parallel
            // (the library locks what it needs); without FOPEN_DIRECT_IO
            // it serializes buffered writes to a file under its inode
            // lock. Buffered opens stay on the library's buffered path:
            // uext4's page cache serves them. The kernel writes back and
            // drops its cached pages of every range written this way, so
            // read-only opens, which keep the kernel's page cache, and
            // shared mappings (FUSE_DIRECT_IO_ALLOW_MMAP) see the data.
            fopen |= FopenFlags::FOPEN_DIRECT_IO;
            if self.parallel_direct_writes {
                fopen |= FopenFlags::FOPEN_PARALLEL_DIRECT_WRITES;
            }
        }
        fopen
    }

    /// Applies one mount option (`key` or `key=value`). `Ok(false)` if the
    /// key is not one of these options, an error if its value is bad.
    pub fn set(&mut self, key: &str, val: Option<&str>) -> Result<bool, String> {
        let flag = |on: bool| -> Result<bool, String> {
            match val {
                None => Ok(on),
                Some(v) => Err(format!("{key}={v}: takes no value")),
            }
        };
        match key {
            "max_write" => {
                let v = val.ok_or("max_write needs a value")?;
                let n = parse_bytes(v).map_err(|e| format!("max_write={v}: {e}"))?;
                if !(4096..=u64::from(MAX_WRITE_LIMIT)).contains(&n) {
                    return Err(format!("max_write={v}: expected 4K to 1M"));
                }
                self.max_write = n as u32;
            }
            "parallel_direct_writes" | "noparallel_direct_writes" => {
                self.parallel_direct_writes = flag(!key.starts_with("no"))?
            }
            "direct_odirect" | "nodirect_odirect" => self.direct_odirect = flag(!key.starts_with("no"))?,
            "direct_writes" | "nodirect_writes" => self.direct_writes = flag(!key.starts_with("no"))?,
            "direct_new_files" | "nodirect_new_files" => self.direct_new_files = flag(!key.starts_with("no"))?,
            "direct_io" => self.direct_io = flag(true)?,
            "writeback_cache" => {
                // The point of the cache is writes that skip the daemon:
                // `direct_writes` after it keeps both.
                self.writeback_cache = flag(true)?;
                self.direct_writes = false;
            }
            "nowriteback_cache" => self.writeback_cache = flag(false)?,
            "strict_dirty_limit" | "nostrict_dirty_limit" => self.strict_dirty_limit = flag(!key.starts_with("no"))?,
            "store_writes" | "nostore_writes" => self.store_writes = flag(!key.starts_with("no"))?,
            "kernel_cache" | "nokernel_cache" => self.kernel_cache = flag(!key.starts_with("no"))?,
            "parallel_dirops" | "noparallel_dirops" => self.parallel_dirops = flag(!key.starts_with("no"))?,
            "readdirplus" => {
                self.readdirplus = match val {
                    Some("on" | "yes") => Readdirplus::On,
                    Some("off" | "no") => Readdirplus::Off,
                    Some("auto") => Readdirplus::Auto,
                    v => return Err(format!("readdirplus={}: expected on, off or auto", v.unwrap_or(""))),
                }
            }
            "entry_timeout" | "attr_timeout" | "negative_timeout" => {
                let v = val.ok_or_else(|| format!("{key} needs a number of seconds"))?;
                let s: f64 = v.parse().map_err(|_| format!("{key}={v}: expected a number of seconds"))?;
                if !(0.0..=MAX_TTL_SECS as f64).contains(&s) {
                    return Err(format!("{key}={v}: expected 0 to {MAX_TTL_SECS} seconds"));
                }
                let d = Duration::from_secs_f64(s);
                match key {
                    "entry_timeout" => self.entry_ttl = d,
                    "attr_timeout" => self.attr_ttl = d,
                    _ => self.negative_ttl = d,
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// A byte count with an optional K/M suffix (powers of 1024).
fn parse_bytes(v: &str) -> Result<u64, String> {
    let (num, mult) = match v.as_bytes().last() {
        Some(b'k' | b'K') => (&v[..v.len() - 1], 1024),
        Some(b'm' | b'M') => (&v[..v.len() - 1], 1 << 20),
        _ => (v, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| "expected a number of bytes (K and M suffixes allowed)".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_switch_each_feature() {
        let mut f = KernelFeatures::default();
        for (k, v) in [
            ("max_write", Some("128K")),
            ("noparallel_direct_writes", None),
            ("nodirect_odirect", None),
            ("nodirect_writes", None),
            ("nodirect_new_files", None),
            ("direct_io", None),
            ("writeback_cache", None),
            ("strict_dirty_limit", None),
            ("nokernel_cache", None),
            ("store_writes", None),
            ("noparallel_dirops", None),
            ("readdirplus", Some("off")),
            ("entry_timeout", Some("0")),
            ("attr_timeout", Some("2.5")),
            ("negative_timeout", Some("0")),
        ] {
            assert_eq!(f.set(k, v), Ok(true), "{k}");
        }
        assert_eq!(f.max_write, 128 << 10);
        assert!(!f.parallel_direct_writes && !f.direct_odirect && !f.direct_writes && !f.direct_new_files);
        assert!(
            f.direct_io
                && f.writeback_cache
                && f.strict_dirty_limit
                && !f.kernel_cache
                && !f.parallel_dirops
                && f.store_writes
        );
        assert_eq!(f.readdirplus, Readdirplus::Off);
        assert_eq!((f.entry_ttl, f.attr_ttl), (Duration::ZERO, Duration::from_millis(2500)));
        assert_eq!(f.negative_ttl, Duration::ZERO);
        assert_eq!(f.set("ro", None), Ok(false));
    }

    /// Cached names and attributes outlive any walk (issue 24: 60 s ran
    /// out during a walk of a 2M-inode tree, and the next walk looked
    /// every name up again).
    #[test]
    fn default_timeouts_outlive_a_walk() {
        let f = KernelFeatures::default();
        assert_eq!((f.entry_ttl, f.attr_ttl), (DEFAULT_TTL, DEFAULT_TTL));
        assert_eq!(f.entry_and_attr_ttl(), Duration::from_secs(86400));
        let mut g = KernelFeatures::default();
        assert_eq!(g.set("entry_timeout", Some("86400")), Ok(true), "the default is accepted as an option");
        assert!(g.set("attr_timeout", Some("86401")).is_err());
        assert_eq!(f.negative_ttl, Duration::from_secs(1), "absent names still expire soon");
    }

    #[test]
    fn writeback_cache_turns_direct_writes_off_unless_given_after() {
        let mut f = KernelFeatures::default();
        assert!(f.direct_writes && !f.writeback_cache);
        f.set("writeback_cache", None).unwrap();
        assert!(f.writeback_cache && !f.direct_writes);
        f.set("direct_writes", None).unwrap();
        assert!(f.writeback_cache && f.direct_writes);
    }

    #[test]
    fn bad_values_are_refused() {
        let mut f = KernelFeatures::default();
        for (k, v) in [
            ("max_write", Some("2M")),
            ("max_write", Some("1000")),
            ("max_write", Some("x")),
            ("max_write", None),
            ("direct_writes", Some("1")),
            ("readdirplus", Some("maybe")),
            ("entry_timeout", Some("-1")),
            ("attr_timeout", Some("soon")),
        ] {
            assert!(f.set(k, v).is_err(), "{k}={v:?} accepted");
        }
        assert_eq!(f, KernelFeatures::default());
    }
}
