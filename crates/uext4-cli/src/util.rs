//! Helpers shared by the subcommands: the CLI error type, diagnostics on
//! stderr, opening an image, and formatting of modes, types and times.

use std::ffi::OsStr;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use uext4::{FileType, Filesystem, Timestamp};

/// Why a command stopped.
#[derive(Debug)]
pub enum CliError {
    /// A fatal error: printed as one `uext4: ` line, exit status 1.
    Msg(String),
    /// stdout was closed by the reader (e.g. `| head`): exit quietly.
    BrokenPipe,
}

impl CliError {
    /// A fatal error with this message.
    pub fn msg(m: impl Into<String>) -> Self {
        CliError::Msg(m.into())
    }
}

/// Converts an error writing to stdout.
impl From<io::Error> for CliError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::BrokenPipe {
            CliError::BrokenPipe
        } else {
            CliError::Msg(format!("write error: {e}"))
        }
    }
}

/// Result of a subcommand.
pub type CliResult<T = ()> = Result<T, CliError>;

static FAILED: AtomicBool = AtomicBool::new(false);

/// True when a non-fatal error was reported: the command went on but must
/// exit with status 1.
pub fn failed() -> bool {
    FAILED.load(Ordering::Relaxed)
}

/// Prints one `uext4: ` line on stderr (never panics, even if stderr is closed).
pub fn eprint_line(msg: &str) {
    crate::progress::suspend(|| {
        let mut e = io::stderr().lock();
        let _ = writeln!(e, "uext4: {msg}");
    });
}

/// Reports a non-fatal error: one line on stderr, and the exit status becomes 1.
pub fn report(msg: &str) {
    FAILED.store(true, Ordering::Relaxed);
    eprint_line(msg);
}

/// Prints a warning (does not change the exit status).
pub fn warn(msg: &str) {
    eprint_line(&format!("warning: {msg}"));
}

/// A path inside the image, for messages.
pub fn shown(path: &[u8]) -> String {
    String::from_utf8_lossy(path).into_owned()
}

/// One message for a library error about `what` (an image path or an
/// inode): `what: reason`, without repeating the path the library already
/// put into some errors.
pub fn describe(what: &str, e: &uext4::Error) -> String {
    use uext4::Error as E;
    match e {
        E::NotFound(_) => format!("{what}: no such file or directory"),
        E::NotDir(_) => format!("{what}: not a directory"),
        E::IsDir(_) => format!("{what}: is a directory"),
        E::NameTooLong(_) => format!("{what}: file name too long"),
        E::Loop(_) => format!("{what}: too many levels of symbolic links"),
        E::Io(io) => format!("{what}: I/O error: {io}"),
        E::Exists(_) => format!("{what}: file exists"),
        E::NotEmpty(_) => format!("{what}: directory not empty"),
        E::TooManyLinks(_) => format!("{what}: too many links"),
        other => format!("{what}: {other}"),
    }
}

/// A fatal error for a library error about `what`.
pub fn fs_err(what: &str, e: uext4::Error) -> CliError {
    CliError::Msg(describe(what, &e))
}

/// Opens an image and prints its notices (as warnings) on stderr.
pub fn open_image(image: &Path) -> CliResult<Filesystem> {
    opened(image, Filesystem::open(image))
}

/// The outcome of opening `image` (read-only or read-write), the way every
/// command reports it: an error names the image, and the image's notices
/// are printed as warnings.
pub fn opened(image: &Path, r: uext4::Result<Filesystem>) -> CliResult<Filesystem> {
    let name = image.display().to_string();
    let fs = r.map_err(|e| match e {
        uext4::Error::Io(io) => CliError::Msg(format!("{name}: {io}")),
        other => CliError::Msg(format!("{name}: {other}")),
    })?;
    for n in fs.notices() {
        warn(&format!("{name}: {n}"));
    }
    Ok(fs)
}

/// The bytes of an OS string (paths inside the image may be any bytes).
pub fn os_bytes(s: &OsStr) -> &[u8] {
    s.as_bytes()
}

/// `ls -l` style mode string, e.g. `drwxr-xr-x`.
pub fn mode_string(mode: u16) -> String {
    let t = match FileType::from_mode(mode) {
        Some(FileType::Regular) => '-',
        Some(FileType::Directory) => 'd',
        Some(FileType::Symlink) => 'l',
        Some(FileType::CharDevice) => 'c',
        Some(FileType::BlockDevice) => 'b',
        Some(FileType::Fifo) => 'p',
        Some(FileType::Socket) => 's',
        None => '?',
    };
    let bit = |m: u16, c: char| if mode & m != 0 { c } else { '-' };
    let special = |x: bool, s: bool, set: char, unset_x: char| match (x, s) {
        (true, true) => set,
        (false, true) => unset_x,
        (true, false) => 'x',
        (false, false) => '-',
    };
    let mut s = String::with_capacity(10);
    s.push(t);
    s.push(bit(0o400, 'r'));
    s.push(bit(0o200, 'w'));
    s.push(special(mode & 0o100 != 0, mode & 0o4000 != 0, 's', 'S'));
    s.push(bit(0o040, 'r'));
    s.push(bit(0o020, 'w'));
    s.push(special(mode & 0o010 != 0, mode & 0o2000 != 0, 's', 'S'));
    s.push(bit(0o004, 'r'));
    s.push(bit(0o002, 'w'));
    s.push(special(mode & 0o001 != 0, mode & 0o1000 != 0, 't', 'T'));
    s
}

/// The file type as `stat(1)` names it.
pub fn type_name(t: FileType) -> &'static str {
    match t {
        FileType::Regular => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symbolic link",
        FileType::CharDevice => "character special file",
        FileType::BlockDevice => "block special file",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
    }
}

/// A broken-down time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tm {
    /// Full year.
    pub year: i64,
    /// 1..=12.
    pub mon: u32,
    /// 1..=31.
    pub mday: u32,
    /// 0..=23.
    pub hour: u32,
    /// 0..=59.
    pub min: u32,
    /// 0..=60.
    pub sec: u32,
    /// 0 = Sunday.
    pub wday: u32,
    /// Seconds east of UTC.
    pub gmtoff: i64,
}

const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// `sec` since the epoch in UTC (proleptic Gregorian calendar, any i64).
pub fn utc(sec: i64) -> Tm {
    let days = sec.div_euclid(86_400);
    let rem = sec.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let mday = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let mon = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(mon <= 2);
    Tm {
        year,
        mon,
        mday,
        hour: (rem / 3600) as u32,
        min: (rem % 3600 / 60) as u32,
        sec: (rem % 60) as u32,
        wday: (days + 4).rem_euclid(7) as u32,
        gmtoff: 0,
    }
}

/// `sec` in the local time zone (the TZ variable), like the e2fsprogs and
/// coreutils tools print it; UTC when the C library cannot convert it.
pub fn local(sec: i64) -> Tm {
    // time_t is 32 bits on some targets.
    #[allow(irrefutable_let_patterns, clippy::unnecessary_fallible_conversions)]
    let Ok(t) = libc::time_t::try_from(sec) else {
        return utc(sec);
    };
    // SAFETY: `tm` is plain old data, so all-zero is a valid value; both
    // pointers are valid for the call and localtime_r keeps neither.
    let (ok, tm) = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        let r = libc::localtime_r(&t, &mut tm);
        (!r.is_null(), tm)
    };
    let (Ok(mon), Ok(mday), Ok(hour), Ok(min), Ok(s), Ok(wday)) = (
        u32::try_from(tm.tm_mon + 1),
        u32::try_from(tm.tm_mday),
        u32::try_from(tm.tm_hour),
        u32::try_from(tm.tm_min),
        u32::try_from(tm.tm_sec),
        u32::try_from(tm.tm_wday),
    ) else {
        return utc(sec);
    };
    if !ok || !(1..=12).contains(&mon) || wday > 6 {
        return utc(sec);
    }
    // c_long is 32 bits on some targets.
    #[allow(clippy::useless_conversion)]
    let gmtoff = i64::from(tm.tm_gmtoff);
    Tm { year: i64::from(tm.tm_year) + 1900, mon, mday, hour, min, sec: s, wday, gmtoff }
}

fn month(tm: &Tm) -> &'static str {
    MONTHS[(tm.mon as usize).clamp(1, 12) - 1]
}

/// ctime(3) format without the newline: `Sun Nov 22 05:17:00 2026`.
pub fn ctime(sec: i64) -> String {
    let tm = local(sec);
    format!(
        "{} {} {:>2} {:02}:{:02}:{:02} {}",
        DAYS[tm.wday as usize % 7],
        month(&tm),
        tm.mday,
        tm.hour,
        tm.min,
        tm.sec,
        tm.year
    )
}

/// `stat(1)` format: `2026-11-22 05:17:00.123456789 +0000`.
pub fn full_time(t: Timestamp) -> String {
    let tm = local(t.sec);
    let off = tm.gmtoff.abs();
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:09} {}{:02}{:02}",
        tm.year,
        tm.mon,
        tm.mday,
        tm.hour,
        tm.min,
        tm.sec,
        t.nsec,
        if tm.gmtoff < 0 { '-' } else { '+' },
        off / 3600,
        off % 3600 / 60
    )
}

/// `ls -l` format: `Nov 22 05:17` for times in the last six months,
/// `Nov 22  2025` otherwise.
pub fn ls_time(sec: i64, now: i64) -> String {
    const SIX_MONTHS: i64 = 31_556_952 / 2;
    let tm = local(sec);
    if sec > now - SIX_MONTHS && sec <= now {
        format!("{} {:>2} {:02}:{:02}", month(&tm), tm.mday, tm.hour, tm.min)
    } else {
        format!("{} {:>2}  {}", month(&tm), tm.mday, tm.year)
    }
}

/// Seconds since the epoch now.
pub fn now() -> i64 {
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// Names of the inode flags set in `flags` (as `lsattr`/the kernel call them).
pub fn inode_flag_names(flags: u32) -> Vec<String> {
    const NAMES: &[(u32, &str)] = &[
        (0x1, "secrm"),
        (0x2, "unrm"),
        (0x4, "compr"),
        (0x8, "sync"),
        (0x10, "immutable"),
        (0x20, "append"),
        (0x40, "nodump"),
        (0x80, "noatime"),
        (0x800, "encrypt"),
        (0x1000, "index"),
        (0x2000, "imagic"),
        (0x4000, "journal_data"),
        (0x8000, "notail"),
        (0x10000, "dirsync"),
        (0x20000, "topdir"),
        (0x40000, "huge_file"),
        (0x80000, "extents"),
        (0x100000, "verity"),
        (0x200000, "ea_inode"),
        (0x800000, "nocow"),
        (0x2000000, "dax"),
        (0x10000000, "inline_data"),
        (0x20000000, "projinherit"),
        (0x40000000, "casefold"),
    ];
    let mut out = Vec::new();
    let mut rest = flags;
    for &(m, n) in NAMES {
        if flags & m != 0 {
            out.push(n.to_string());
            rest &= !m;
        }
    }
    if rest != 0 {
        out.push(format!("{rest:#x}"));
    }
    out
}

/// Parses a size like `65536`, `64K`, `100M`, `2G`, `1T` (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M') => (&s[..s.len() - 1], 1 << 20),
        Some('G') => (&s[..s.len() - 1], 1 << 30),
        Some('T') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    n.checked_mul(mult).ok_or_else(|| format!("size {s:?} too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), Tm { year: 1970, mon: 1, mday: 1, hour: 0, min: 0, sec: 0, wday: 4, gmtoff: 0 });
        // 2026-11-22 05:17:00 UTC was a Sunday.
        let t = utc(1_795_324_620);
        assert_eq!((t.year, t.mon, t.mday, t.hour, t.min, t.wday), (2026, 11, 22, 5, 17, 0));
        // Before the epoch.
        let t = utc(-1);
        assert_eq!((t.year, t.mon, t.mday, t.hour, t.min, t.sec, t.wday), (1969, 12, 31, 23, 59, 59, 3));
        // Leap day.
        let t = utc(951_782_400);
        assert_eq!((t.year, t.mon, t.mday), (2000, 2, 29));
        // Extreme values do not panic.
        let _ = utc(i64::MAX);
        let _ = utc(i64::MIN);
    }

    #[test]
    fn modes() {
        assert_eq!(mode_string(0o40755), "drwxr-xr-x");
        assert_eq!(mode_string(0o100644), "-rw-r--r--");
        assert_eq!(mode_string(0o104755), "-rwsr-xr-x");
        assert_eq!(mode_string(0o102644), "-rw-r-Sr--");
        assert_eq!(mode_string(0o41777), "drwxrwxrwt");
        assert_eq!(mode_string(0o41776), "drwxrwxrwT");
        assert_eq!(mode_string(0o120777), "lrwxrwxrwx");
        assert_eq!(mode_string(0o20600), "crw-------");
    }

    #[test]
    fn flags() {
        assert_eq!(inode_flag_names(0x80000), vec!["extents".to_string()]);
        assert_eq!(inode_flag_names(0x80010), vec!["immutable".to_string(), "extents".to_string()]);
        assert_eq!(inode_flag_names(0x100), vec!["0x100".to_string()]);
    }
}

/// Writes `v` as one pretty-printed JSON document and a newline (`--json`).
pub fn print_json(v: &impl serde::Serialize, out: &mut impl Write) -> CliResult {
    let text = serde_json::to_vec_pretty(v).map_err(|e| CliError::msg(format!("JSON output: {e}")))?;
    out.write_all(&text)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// A timestamp in `--json` output: seconds since the epoch and nanoseconds.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct JsonTime {
    /// Seconds since 1970-01-01 00:00:00 UTC (negative before).
    pub sec: i64,
    /// Nanoseconds within the second.
    pub nsec: u32,
}

impl From<Timestamp> for JsonTime {
    fn from(t: Timestamp) -> Self {
        JsonTime { sec: t.sec, nsec: t.nsec }
    }
}

/// A name (any bytes) in `--json` output: `name` is the text (invalid UTF-8
/// replaced by U+FFFD); `name_bytes` carries the exact bytes only when the
/// name is not valid UTF-8, so scripts can still tell such names apart.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JsonName {
    /// The name as text.
    pub name: String,
    /// The raw bytes, present only if the name is not valid UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name_bytes: Option<Vec<u8>>,
}

impl JsonName {
    /// The JSON form of `name`.
    pub fn new(name: &[u8]) -> Self {
        match std::str::from_utf8(name) {
            Ok(s) => JsonName { name: s.to_string(), name_bytes: None },
            Err(_) => JsonName { name: shown(name), name_bytes: Some(name.to_vec()) },
        }
    }
}

/// The file type in `--json` output: one lowercase snake_case word.
pub fn type_token(t: FileType) -> &'static str {
    match t {
        FileType::Regular => "regular",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::CharDevice => "char_device",
        FileType::BlockDevice => "block_device",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
    }
}

/// An inode's fields in `--json` output (`stat` and `ls`), named after
/// struct stat where it has them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JsonInode {
    /// Inode number.
    pub ino: u32,
    /// File type, see [`type_token`].
    #[serde(rename = "type")]
    pub file_type: &'static str,
    /// Full i_mode: type and permission bits.
    pub mode: u16,
    /// Permission bits only (`mode & 0o7777`).
    pub permissions: u16,
    /// `ls -l`'s symbolic mode, e.g. `-rw-r--r--`.
    pub mode_string: String,
    /// Hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Allocated 512-byte units.
    pub blocks: u64,
    /// I/O block size.
    pub blksize: u32,
    /// Device major number (0 for non-devices).
    pub rdev_major: u32,
    /// Device minor number (0 for non-devices).
    pub rdev_minor: u32,
    /// ext4 inode flags (i_flags).
    pub flags: u32,
    /// Names of the set flags, as `stat` shows them.
    pub flag_names: Vec<String>,
    /// Generation number.
    pub generation: u32,
    /// Extended attribute block, 0 if none.
    pub xattr_block: u64,
    /// Project id.
    pub project: u32,
    /// Access time.
    pub atime: JsonTime,
    /// Modification time.
    pub mtime: JsonTime,
    /// Change time.
    pub ctime: JsonTime,
    /// Creation time, `null` if the inode has no room for it.
    pub crtime: Option<JsonTime>,
}

impl From<&uext4::Stat> for JsonInode {
    fn from(st: &uext4::Stat) -> Self {
        JsonInode {
            ino: st.ino,
            file_type: type_token(st.file_type),
            mode: st.mode,
            permissions: st.mode & 0o7777,
            mode_string: mode_string(st.mode),
            nlink: st.nlink,
            uid: st.uid,
            gid: st.gid,
            size: st.size,
            blocks: st.blocks,
            blksize: st.blksize,
            rdev_major: st.rdev.0,
            rdev_minor: st.rdev.1,
            flags: st.flags,
            flag_names: inode_flag_names(st.flags),
            generation: st.generation,
            xattr_block: st.file_acl,
            project: st.projid,
            atime: st.atime.into(),
            mtime: st.mtime.into(),
            ctime: st.ctime.into(),
            crtime: st.crtime.map(Into::into),
        }
    }
}

/// A symlink target (any bytes) in `--json` output, like [`JsonName`]:
/// `target` as text, `target_bytes` only if it is not valid UTF-8.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JsonTarget {
    /// The target as text.
    pub target: String,
    /// The raw bytes, present only if the target is not valid UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_bytes: Option<Vec<u8>>,
}

impl JsonTarget {
    /// The JSON form of `target`.
    pub fn new(target: &[u8]) -> Self {
        let n = JsonName::new(target);
        JsonTarget { target: n.name, target_bytes: n.name_bytes }
    }
}

/// Undoes the octal escapes (`\040` for a space) of a /proc/mounts field.
pub fn unescape_mount_field(f: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(f.len());
    let mut i = 0;
    while i < f.len() {
        let oct = f.get(i + 1..i + 4).filter(|d| f[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match oct {
            Some(d) => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8).wrapping_add(c - b'0')));
                i += 4;
            }
            None => {
                out.push(f[i]);
                i += 1;
            }
        }
    }
    out
}
