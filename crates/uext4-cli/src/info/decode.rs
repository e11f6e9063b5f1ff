//! The raw superblock fields `uext4 info` reads itself (feature bits, byte
//! readers at fixed offsets) and the names e2fsprogs gives their values
//! (UUIDs, intervals, mount options, hash versions, OS, users, error codes),
//! shared by the text and `--json` forms.

use std::ffi::CStr;

// Feature bits this command tests (EXT4_FEATURE_*).
pub(super) const COMPAT_DIR_INDEX: u32 = 0x20;
pub(super) const COMPAT_SPARSE_SUPER2: u32 = 0x200;
pub(super) const COMPAT_FAST_COMMIT: u32 = 0x400;
pub(super) const COMPAT_HAS_JOURNAL: u32 = 0x4;
pub(super) const COMPAT_ORPHAN_FILE: u32 = 0x1000;
pub(super) const RO_COMPAT_SPARSE_SUPER: u32 = 0x1;
pub(super) const RO_COMPAT_GDT_CSUM: u32 = 0x10;
pub(super) const RO_COMPAT_BIGALLOC: u32 = 0x200;
pub(super) const RO_COMPAT_METADATA_CSUM: u32 = 0x400;
pub(super) const INCOMPAT_64BIT: u32 = 0x80;
pub(super) const INCOMPAT_MMP: u32 = 0x100;
pub(super) const INCOMPAT_CSUM_SEED: u32 = 0x2000;
pub(super) const INCOMPAT_CASEFOLD: u32 = 0x20000;

pub(super) fn le16(b: &[u8], off: usize) -> u16 {
    b.get(off..off + 2).map_or(0, |s| u16::from_le_bytes([s[0], s[1]]))
}

pub(super) fn le32(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4).map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

pub(super) fn le64(b: &[u8], off: usize) -> u64 {
    u64::from(le32(b, off)) | (u64::from(le32(b, off + 4)) << 32)
}

pub(super) fn be32(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4).map_or(0, |s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// Text up to the first NUL.
pub(super) fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// A UUID as e2fsprogs prints it: 8-4-4-4-12 lowercase hex, `<none>` if all zero.
pub fn uuid_str(u: &[u8]) -> String {
    if u.iter().all(|&b| b == 0) || u.len() != 16 {
        return "<none>".into();
    }
    let h: Vec<String> = u.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", h[..4].concat(), h[4..6].concat(), h[6..8].concat(), h[8..10].concat(), h[10..].concat())
}

/// e2fsprogs' interval_string.
pub(super) fn interval_string(mut secs: u32) -> String {
    const MINUTE: u32 = 60;
    const HOUR: u32 = 60 * MINUTE;
    const DAY: u32 = 24 * HOUR;
    const WEEK: u32 = 7 * DAY;
    const MONTH: u32 = 30 * DAY;
    if secs == 0 {
        return "<none>".into();
    }
    let mut parts = Vec::new();
    for (unit, name) in [(MONTH, "month"), (WEEK, "week"), (DAY, "day")] {
        if secs >= unit {
            let n = secs / unit;
            secs -= n * unit;
            parts.push(format!("{n} {name}{}", if n > 1 { "s" } else { "" }));
        }
    }
    if secs > 0 {
        parts.push(format!("{}:{:02}:{:02}", secs / HOUR, secs % HOUR / MINUTE, secs % MINUTE));
    }
    parts.join(", ")
}

pub(super) fn mount_opts_string(mask: u32) -> String {
    let v = mount_opt_names(mask);
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(" ")
    }
}

/// The names of the default mount options in `mask`, journal mode first.
pub(super) fn mount_opt_names(mask: u32) -> Vec<String> {
    const JMODE: u32 = 0x60;
    let name = |m: u32| -> String {
        match m {
            0x1 => "debug".into(),
            0x2 => "bsdgroups".into(),
            0x4 => "user_xattr".into(),
            0x8 => "acl".into(),
            0x10 => "uid16".into(),
            0x20 => "journal_data".into(),
            0x40 => "journal_data_ordered".into(),
            0x60 => "journal_data_writeback".into(),
            0x100 => "nobarrier".into(),
            0x200 => "block_validity".into(),
            0x400 => "discard".into(),
            0x800 => "nodelalloc".into(),
            _ => format!("MNTOPT_{}", m.trailing_zeros()),
        }
    };
    let mut v = Vec::new();
    if mask & JMODE != 0 {
        v.push(name(mask & JMODE));
    }
    for bit in 0..32 {
        let m = 1u32 << bit;
        if m & JMODE == 0 && mask & m != 0 {
            v.push(name(m));
        }
    }
    v
}

pub(super) fn hash_name(v: u8) -> String {
    match v {
        0 => "legacy".into(),
        1 => "half_md4".into(),
        2 => "tea".into(),
        3 => "legacy_unsigned".into(),
        4 => "half_md4_unsigned".into(),
        5 => "tea_unsigned".into(),
        6 => "siphash".into(),
        n => format!("HASHALG_{n}"),
    }
}

pub(super) fn os_name(os: u32) -> &'static str {
    match os {
        0 => "Linux",
        1 => "Hurd",
        2 => "Masix",
        3 => "FreeBSD",
        4 => "Lites",
        _ => "(unknown os)",
    }
}

/// `uid (user NAME)` / `gid (group NAME)` from the host's databases, as dumpe2fs prints them.
pub(super) fn user_or_group(id: u16, group: bool) -> String {
    let mut buf = vec![0 as libc::c_char; 16384];
    let name = if group {
        // SAFETY: `grp` is plain old data; every pointer passed is valid for
        // the call and `buf` outlives the use of the returned name.
        unsafe {
            let mut grp: libc::group = std::mem::zeroed();
            let mut res: *mut libc::group = std::ptr::null_mut();
            let rc = libc::getgrgid_r(libc::gid_t::from(id), &mut grp, buf.as_mut_ptr(), buf.len(), &mut res);
            (rc == 0 && !res.is_null() && !grp.gr_name.is_null())
                .then(|| CStr::from_ptr(grp.gr_name).to_string_lossy().into_owned())
        }
    } else {
        // SAFETY: as above, for the passwd database.
        unsafe {
            let mut pw: libc::passwd = std::mem::zeroed();
            let mut res: *mut libc::passwd = std::ptr::null_mut();
            let rc = libc::getpwuid_r(libc::uid_t::from(id), &mut pw, buf.as_mut_ptr(), buf.len(), &mut res);
            (rc == 0 && !res.is_null() && !pw.pw_name.is_null())
                .then(|| CStr::from_ptr(pw.pw_name).to_string_lossy().into_owned())
        }
    };
    let kind = if group { "group" } else { "user" };
    format!("{id} ({kind} {})", name.as_deref().unwrap_or("unknown"))
}

/// e2fsprogs' names for the s_*_error_errcode values (the engine's
/// table, which its writer uses too).
pub(super) fn errcode_name(code: u8) -> String {
    uext4::format::superblock::errcode_name(code)
}

pub(super) fn lifetime_writes(kb: u64) -> String {
    let p = |x: u32| 1u64 << x;
    if kb < p(13) {
        format!("{kb} kB")
    } else if kb < p(23) {
        format!("{} MB", (kb + p(9)) >> 10)
    } else if kb < p(33) {
        format!("{} GB", (kb + p(19)) >> 20)
    } else if kb < p(43) {
        format!("{} TB", (kb + p(29)) >> 30)
    } else {
        format!("{} PB", kb.saturating_add(p(39)) >> 40)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals() {
        assert_eq!(interval_string(0), "<none>");
        assert_eq!(interval_string(15_552_000), "6 months");
        assert_eq!(interval_string(86_400 * 38 + 3_661), "1 month, 1 week, 1 day, 1:01:01");
    }

    #[test]
    fn uuids() {
        assert_eq!(uuid_str(&[0; 16]), "<none>");
        let u: Vec<u8> = (1..=16).collect();
        assert_eq!(uuid_str(&u), "01020304-0506-0708-090a-0b0c0d0e0f10");
    }
}
