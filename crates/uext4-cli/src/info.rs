//! `uext4 info`: the superblock summary in `dumpe2fs -h` format, and with
//! `--groups` a concise list of the block groups.

use crate::util::{ctime, open_image, print_json, warn, CliError, CliResult};
use std::ffi::CStr;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use uext4::format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT, BG_INODE_ZEROED};
use uext4::format::superblock::Superblock;
use uext4::Filesystem;

// Feature bits this command tests (EXT4_FEATURE_*).
const COMPAT_DIR_INDEX: u32 = 0x20;
const COMPAT_SPARSE_SUPER2: u32 = 0x200;
const COMPAT_FAST_COMMIT: u32 = 0x400;
const COMPAT_HAS_JOURNAL: u32 = 0x4;
const COMPAT_ORPHAN_FILE: u32 = 0x1000;
const RO_COMPAT_SPARSE_SUPER: u32 = 0x1;
const RO_COMPAT_GDT_CSUM: u32 = 0x10;
const RO_COMPAT_BIGALLOC: u32 = 0x200;
const RO_COMPAT_METADATA_CSUM: u32 = 0x400;
const INCOMPAT_64BIT: u32 = 0x80;
const INCOMPAT_MMP: u32 = 0x100;
const INCOMPAT_CSUM_SEED: u32 = 0x2000;
const INCOMPAT_CASEFOLD: u32 = 0x20000;

fn le16(b: &[u8], off: usize) -> u16 {
    b.get(off..off + 2).map_or(0, |s| u16::from_le_bytes([s[0], s[1]]))
}

fn le32(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4).map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn le64(b: &[u8], off: usize) -> u64 {
    u64::from(le32(b, off)) | (u64::from(le32(b, off + 4)) << 32)
}

fn be32(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4).map_or(0, |s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// Text up to the first NUL.
fn cstr(b: &[u8]) -> String {
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
fn interval_string(mut secs: u32) -> String {
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

fn mount_opts_string(mask: u32) -> String {
    let v = mount_opt_names(mask);
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(" ")
    }
}

/// The names of the default mount options in `mask`, journal mode first.
fn mount_opt_names(mask: u32) -> Vec<String> {
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

fn hash_name(v: u8) -> String {
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

fn os_name(os: u32) -> &'static str {
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
fn user_or_group(id: u16, group: bool) -> String {
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

/// e2fsprogs' names for the s_*_error_errcode values.
fn errcode_name(code: u8) -> String {
    const NAMES: [&str; 17] = [
        "",
        "EIO",
        "ENOMEM",
        "EFSBADCRC",
        "EFSCORRUPTED",
        "ENOSPC",
        "ENOKEY",
        "EROFS",
        "EFBIG",
        "EEXIST",
        "ERANGE",
        "EOVERFLOW",
        "EBUSY",
        "ENOTDIR",
        "ENOTEMPTY",
        "ESHUTDOWN",
        "EFAULT",
    ];
    match NAMES.get(usize::from(code)) {
        Some(n) if !n.is_empty() => (*n).to_string(),
        _ => format!("UNKNOWN_ERRCODE_{code}"),
    }
}

fn lifetime_writes(kb: u64) -> String {
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

/// The lines of `dumpe2fs -h`'s superblock part, in its order and labels.
pub fn superblock_lines(sb: &Superblock) -> Vec<String> {
    let raw = &sb.raw()[..];
    let f = &sb.features;
    let bs = u64::from(sb.block_size());
    let mut l: Vec<String> = Vec::new();
    let mut kv = |k: &str, v: String| l.push(format!("{:<26}{}", format!("{k}:"), v));

    let label = sb.label();
    kv("Filesystem volume name", if label.is_empty() { "<none>".into() } else { label });
    let lm = sb.last_mounted_str();
    kv("Last mounted on", if lm.is_empty() { "<not available>".into() } else { lm });
    kv("Filesystem UUID", uuid_str(&sb.uuid));
    kv("Filesystem magic number", format!("0x{:04X}", le16(raw, 0x38)));
    let rev = match sb.rev_level {
        0 => "original",
        1 => "dynamic",
        _ => "unknown",
    };
    kv("Filesystem revision #", format!("{} ({rev})", sb.rev_level));
    let names = f.names();
    kv("Filesystem features", if names.is_empty() { "(none)".into() } else { names.join(" ") });
    if sb.flags != 0 {
        let mut fl = String::new();
        for (bit, name) in [(1, "signed_directory_hash "), (2, "unsigned_directory_hash "), (4, "test_filesystem ")] {
            if sb.flags & bit != 0 {
                fl.push_str(name);
            }
        }
        kv("Filesystem flags", if fl.is_empty() { "(none)".into() } else { fl });
    }
    kv("Default mount options", mount_opts_string(sb.default_mount_opts));
    let mount_opts = cstr(&raw[0x200..0x240]);
    if !mount_opts.is_empty() {
        kv("Mount options", mount_opts);
    }
    let mut state = if sb.state & 1 != 0 { "clean" } else { "not clean" }.to_string();
    if sb.state & 2 != 0 {
        state.push_str(" with errors");
    }
    kv("Filesystem state", state);
    kv(
        "Errors behavior",
        match sb.errors {
            1 => "Continue",
            2 => "Remount read-only",
            3 => "Panic",
            _ => "Unknown (continue)",
        }
        .into(),
    );
    kv("Filesystem OS type", os_name(sb.creator_os).into());
    kv("Inode count", sb.inodes_count.to_string());
    kv("Block count", sb.blocks_count.to_string());
    kv("Reserved block count", sb.r_blocks_count.to_string());
    if sb.overhead_blocks != 0 {
        kv("Overhead clusters", sb.overhead_blocks.to_string());
    }
    kv("Free blocks", sb.free_blocks_count.to_string());
    kv("Free inodes", sb.free_inodes_count.to_string());
    kv("First block", sb.first_data_block.to_string());
    kv("Block size", sb.block_size().to_string());
    let bigalloc = f.has_ro_compat(RO_COMPAT_BIGALLOC);
    let cluster = 1u64 << (10 + sb.log_cluster_size.min(40));
    kv(if bigalloc { "Cluster size" } else { "Fragment size" }, cluster.to_string());
    if f.has_incompat(INCOMPAT_64BIT) {
        kv("Group descriptor size", sb.desc_size.to_string());
    }
    if sb.reserved_gdt_blocks != 0 {
        kv("Reserved GDT blocks", sb.reserved_gdt_blocks.to_string());
    }
    kv("Blocks per group", sb.blocks_per_group.to_string());
    kv(if bigalloc { "Clusters per group" } else { "Fragments per group" }, sb.clusters_per_group.to_string());
    kv("Inodes per group", sb.inodes_per_group.to_string());
    let itb = (u64::from(sb.inodes_per_group) * u64::from(sb.inode_size)).div_ceil(bs);
    kv("Inode blocks per group", itb.to_string());
    if sb.raid_stride != 0 {
        kv("RAID stride", sb.raid_stride.to_string());
    }
    if sb.raid_stripe_width != 0 {
        kv("RAID stripe width", sb.raid_stripe_width.to_string());
    }
    if sb.first_meta_bg != 0 {
        kv("First meta block group", sb.first_meta_bg.to_string());
    }
    if sb.log_groups_per_flex != 0 {
        kv("Flex block group size", (1u64 << sb.log_groups_per_flex.min(63)).to_string());
    }
    let t = |s: u64| ctime(i64::try_from(s).unwrap_or(i64::MAX));
    if sb.mkfs_time != 0 {
        kv("Filesystem created", t(sb.mkfs_time));
    }
    kv("Last mount time", if sb.mtime != 0 { t(sb.mtime) } else { "n/a".into() });
    kv("Last write time", t(sb.wtime));
    kv("Mount count", sb.mnt_count.to_string());
    kv("Maximum mount count", sb.max_mnt_count.to_string());
    kv("Last checked", t(sb.lastcheck));
    kv("Check interval", format!("{} ({})", sb.checkinterval, interval_string(sb.checkinterval)));
    if sb.checkinterval != 0 {
        kv("Next check after", t(sb.lastcheck + u64::from(sb.checkinterval)));
    }
    if sb.kbytes_written != 0 {
        kv("Lifetime writes", lifetime_writes(sb.kbytes_written));
    }
    kv("Reserved blocks uid", user_or_group(sb.def_resuid, false));
    kv("Reserved blocks gid", user_or_group(sb.def_resgid, true));
    if sb.rev_level >= 1 {
        kv("First inode", sb.first_ino.to_string());
        // dumpe2fs really has a tab here.
        l.push(format!("Inode size:\t          {}", sb.inode_size));
        let mut kv = |k: &str, v: String| l.push(format!("{:<26}{}", format!("{k}:"), v));
        if sb.min_extra_isize != 0 {
            kv("Required extra isize", sb.min_extra_isize.to_string());
        }
        if sb.want_extra_isize != 0 {
            kv("Desired extra isize", sb.want_extra_isize.to_string());
        }
    }
    let mut kv = |k: &str, v: String| l.push(format!("{:<26}{}", format!("{k}:"), v));
    if sb.journal_uuid.iter().any(|&b| b != 0) {
        kv("Journal UUID", uuid_str(&sb.journal_uuid));
    }
    if sb.journal_inum != 0 {
        kv("Journal inode", sb.journal_inum.to_string());
    }
    if sb.journal_dev != 0 {
        l.push(format!("Journal device:\t          0x{:04x}", sb.journal_dev));
    }
    let mut kv = |k: &str, v: String| l.push(format!("{:<26}{}", format!("{k}:"), v));
    if sb.last_orphan != 0 {
        kv("First orphan inode", sb.last_orphan.to_string());
    }
    if f.has_compat(COMPAT_DIR_INDEX) || sb.def_hash_version != 0 {
        kv("Default directory hash", hash_name(sb.def_hash_version));
    }
    let seed = &raw[0xEC..0xFC];
    if seed.iter().any(|&b| b != 0) {
        kv("Directory Hash Seed", uuid_str(seed));
    }
    match raw[0xFD] {
        0 => {}
        1 => kv("Journal backup", "inode blocks".into()),
        n => kv("Journal backup", format!("type {n}")),
    }
    if sb.backup_bgs != [0, 0] {
        let mut s = String::new();
        if sb.backup_bgs[0] != 0 {
            s.push_str(&format!("{} ", sb.backup_bgs[0]));
        }
        if sb.backup_bgs[1] != 0 {
            s.push_str(&format!("{} ", sb.backup_bgs[1]));
        }
        kv("Backup block groups", s);
    }
    if sb.error_count != 0 {
        kv("FS Error count", sb.error_count.to_string());
    }
    for (which, time_off, hi_off, ino_off, block_off, func_off, line_off, errcode_off) in [
        ("First", 0x198, 0x278, 0x19C, 0x1A0, 0x1A8, 0x1C8, 0x27A),
        ("Last", 0x1CC, 0x279, 0x1D0, 0x1D8, 0x1E0, 0x1D4, 0x27B),
    ] {
        let when = u64::from(le32(raw, time_off)) | (u64::from(raw[hi_off]) << 32);
        if when == 0 {
            continue;
        }
        kv(&format!("{which} error time"), t(when));
        kv(&format!("{which} error function"), cstr(&raw[func_off..func_off + 32]));
        kv(&format!("{which} error line #"), le32(raw, line_off).to_string());
        let ino = le32(raw, ino_off);
        if ino != 0 {
            kv(&format!("{which} error inode #"), ino.to_string());
        }
        let blk = le64(raw, block_off);
        if blk != 0 {
            kv(&format!("{which} error block #"), blk.to_string());
        }
        let code = raw[errcode_off];
        if code != 0 {
            kv(&format!("{which} error err"), errcode_name(code));
        }
    }
    if f.has_incompat(INCOMPAT_MMP) {
        kv("MMP block number", sb.mmp_block.to_string());
        kv("MMP update interval", sb.mmp_interval.to_string());
    }
    for (name, ino) in [
        ("User quota inode", sb.usr_quota_inum),
        ("Group quota inode", sb.grp_quota_inum),
        ("Project quota inode", sb.prj_quota_inum),
    ] {
        if ino != 0 {
            kv(name, ino.to_string());
        }
    }
    if f.has_ro_compat(RO_COMPAT_METADATA_CSUM) {
        kv("Checksum type", if sb.checksum_type == 1 { "crc32c" } else { "unknown" }.into());
        kv("Checksum", format!("0x{:08x}", sb.checksum));
    }
    let salt = &raw[0x258..0x268];
    if salt.iter().any(|&b| b != 0) {
        kv("Encryption PW Salt", uuid_str(salt));
    }
    if f.has_incompat(INCOMPAT_CSUM_SEED) {
        kv("Checksum seed", format!("0x{:08x}", sb.checksum_seed));
    }
    if f.has_incompat(INCOMPAT_CASEFOLD) {
        let enc = match le16(raw, 0x27C) {
            1 => "utf8-12.1".to_string(),
            n => format!("UNKNOWN_ENCODING_{n}"),
        };
        kv("Character encoding", enc);
    }
    if f.has_compat(COMPAT_ORPHAN_FILE) {
        kv("Orphan file inode", sb.orphan_file_inum.to_string());
    }
    l
}

fn journal_feature_names(jsb: &[u8]) -> Vec<String> {
    let mut v = Vec::new();
    for (i, (off, tag)) in [(0x24, 'C'), (0x28, 'I'), (0x2C, 'R')].into_iter().enumerate() {
        let mask = be32(jsb, off);
        for bit in 0..32 {
            let m = 1u32 << bit;
            if mask & m == 0 {
                continue;
            }
            let name = match (i, m) {
                (0, 0x1) => "journal_checksum".to_string(),
                (1, 0x1) => "journal_incompat_revoke".into(),
                (1, 0x2) => "journal_64bit".into(),
                (1, 0x4) => "journal_async_commit".into(),
                (1, 0x8) => "journal_checksum_v2".into(),
                (1, 0x10) => "journal_checksum_v3".into(),
                (1, 0x20) => "journal_fast_commit".into(),
                _ => format!("FEATURE_{tag}{bit}"),
            };
            v.push(name);
        }
    }
    v
}

/// The internal journal's superblock (its first 1 KiB), if the image has
/// one and it is valid; warns why not otherwise.
fn journal_sb(fs: &Filesystem) -> Option<[u8; 1024]> {
    let sb = fs.superblock();
    if !sb.features.has_compat(COMPAT_HAS_JOURNAL) || sb.journal_inum == 0 {
        return None;
    }
    let mut jsb = [0u8; 1024];
    match fs.inodes().read(sb.journal_inum, 0, &mut jsb) {
        Ok(n) if n == jsb.len() => {}
        Ok(_) => {
            warn("journal inode too small for a journal superblock");
            return None;
        }
        Err(e) => {
            warn(&format!("cannot read the journal superblock: {e}"));
            return None;
        }
    }
    if be32(&jsb, 0) != 0xC03B_3998 || !matches!(be32(&jsb, 4), 3 | 4) {
        warn("journal superblock magic number invalid");
        return None;
    }
    Some(jsb)
}

/// Fast-commit blocks at the journal's end. Like e2fsprogs: the
/// filesystem feature (not the journal's) decides.
fn fast_commit_blocks(sb: &Superblock, jsb: &[u8]) -> u32 {
    if sb.features.has_compat(COMPAT_FAST_COMMIT) {
        match be32(jsb, 0x54) {
            0 => 256,
            n => n,
        }
    } else {
        0
    }
}

/// The journal superblock's checksum type name (v2/v3 checksums), if any.
fn journal_csum_type(jsb: &[u8]) -> Option<&'static str> {
    (be32(jsb, 0x28) & 0x18 != 0).then(|| match jsb[0x50] {
        1 => "crc32",
        2 => "md5",
        3 => "sha1",
        4 => "crc32c",
        _ => "unknown",
    })
}

/// The journal superblock part of `dumpe2fs -h` (internal journals only).
fn journal_lines(fs: &Filesystem) -> Option<Vec<String>> {
    let sb = fs.superblock();
    let jsb = journal_sb(fs)?;
    let mut l = Vec::new();
    let mut kv = |k: &str, v: String| l.push(format!("{:<26}{}", format!("{k}:"), v));
    let jbs = be32(&jsb, 0xC);
    let maxlen = be32(&jsb, 0x10);
    let fc_blocks = fast_commit_blocks(sb, &jsb);
    let names = journal_feature_names(&jsb);
    kv("Journal features", if names.is_empty() { "(none)".into() } else { names.join(" ") });
    let size = u64::from(jbs / 1024) * u64::from(maxlen);
    kv("Total journal size", if size < 8192 { format!("{size}k") } else { format!("{}M", size >> 10) });
    if u64::from(jbs) != u64::from(sb.block_size()) {
        kv("Journal block size", jbs.to_string());
    }
    kv("Total journal blocks", maxlen.to_string());
    kv("Max transaction length", maxlen.saturating_sub(fc_blocks).to_string());
    kv("Fast commit length", fc_blocks.to_string());
    let first = be32(&jsb, 0x14);
    if first != 1 {
        kv("Journal first block", first.to_string());
    }
    kv("Journal sequence", format!("0x{:08x}", be32(&jsb, 0x18)));
    kv("Journal start", be32(&jsb, 0x1C).to_string());
    let nr_users = be32(&jsb, 0x40);
    if nr_users != 1 {
        kv("Journal number of users", nr_users.to_string());
    }
    if be32(&jsb, 0x24) & 1 != 0 {
        kv("Journal checksum type", "crc32".into());
    }
    if let Some(t) = journal_csum_type(&jsb) {
        kv("Journal checksum type", t.into());
        kv("Journal checksum", format!("0x{:08x}", be32(&jsb, 0xFC)));
    }
    let errno = be32(&jsb, 0x20) as i32;
    if errno != 0 {
        kv("Journal errno", errno.to_string());
    }
    Some(l)
}

fn has_super(sb: &Superblock, g: u64) -> bool {
    if g == 0 {
        return true;
    }
    if sb.features.has_compat(COMPAT_SPARSE_SUPER2) {
        return g == u64::from(sb.backup_bgs[0]) || g == u64::from(sb.backup_bgs[1]);
    }
    !sb.features.has_ro_compat(RO_COMPAT_SPARSE_SUPER) || sparse_backup(g)
}

/// True if group `g` holds a superblock backup under sparse_super: 0, 1
/// and the powers of 3, 5 and 7.
fn sparse_backup(g: u64) -> bool {
    if g <= 1 {
        return true;
    }
    if g & 1 == 0 {
        return false;
    }
    [3u64, 5, 7].iter().any(|&base| {
        let mut n = base;
        while n < g {
            n = n.saturating_mul(base);
        }
        n == g
    })
}

/// The per-group lines of `--groups`.
fn group_lines(fs: &Filesystem) -> Vec<String> {
    let sb = fs.superblock();
    let bs = u64::from(sb.block_size());
    let csums = sb.features.has_ro_compat(RO_COMPAT_METADATA_CSUM) || sb.features.has_ro_compat(RO_COMPAT_GDT_CSUM);
    let itb = (u64::from(sb.inodes_per_group) * u64::from(sb.inode_size)).div_ceil(bs);
    let bpg = u64::from(sb.blocks_per_group);
    let mut l = Vec::new();
    for (g, gd) in fs.group_descs().iter().enumerate() {
        let g = g as u64;
        let first = u64::from(sb.first_data_block) + g * bpg;
        let last = (first + bpg - 1).min(sb.blocks_count.saturating_sub(1));
        let mut head = format!("Group {g}: (Blocks {first}-{last})");
        if csums {
            head.push_str(&format!(" csum 0x{:04x}", gd.checksum));
            let mut fl = Vec::new();
            for (bit, name) in [
                (BG_INODE_UNINIT, "INODE_UNINIT"),
                (BG_BLOCK_UNINIT, "BLOCK_UNINIT"),
                (BG_INODE_ZEROED, "ITABLE_ZEROED"),
            ] {
                if gd.flags & bit != 0 {
                    fl.push(name);
                }
            }
            if !fl.is_empty() {
                head.push_str(&format!(" [{}]", fl.join(", ")));
            }
        }
        l.push(head);
        if has_super(sb, g) {
            let which = if g == 0 { "Primary" } else { "Backup" };
            // With 1 KiB blocks the primary superblock is block 1 (= first); otherwise
            // it is inside block 0, which is also the group's first block.
            l.push(format!("  {which} superblock at {first}"));
        }
        l.push(format!(
            "  Block bitmap at {}, Inode bitmap at {}, Inode table at {}-{}",
            gd.block_bitmap,
            gd.inode_bitmap,
            gd.inode_table,
            (gd.inode_table + itb).saturating_sub(1)
        ));
        l.push(format!(
            "  {} free {}, {} free inodes, {} directories{}",
            gd.free_blocks_count,
            if sb.features.has_ro_compat(RO_COMPAT_BIGALLOC) { "clusters" } else { "blocks" },
            gd.free_inodes_count,
            gd.used_dirs_count,
            if csums { format!(", {} unused inodes", gd.itable_unused) } else { String::new() }
        ));
    }
    l
}

/// The primary superblock read straight from the image, for images the
/// library refuses to open (unsupported features, damaged group descriptors).
fn read_superblock(image: &Path) -> Option<Superblock> {
    let f = File::open(image).ok()?;
    let mut buf = [0u8; 1024];
    f.read_exact_at(&mut buf, 1024).ok()?;
    Superblock::parse(&buf).ok()
}

/// Runs `uext4 info` on an image path. If the filesystem cannot be opened
/// but its superblock is valid, the superblock is still shown (with a
/// warning saying why the rest is missing); `--groups` then fails.
pub fn run_image(image: &Path, groups: bool, out: &mut impl Write) -> CliResult {
    let open_err = match open_image(image) {
        Ok(fs) => return run(&fs, groups, out),
        Err(e) => e,
    };
    let (CliError::Msg(why), Some(sb)) = (&open_err, read_superblock(image)) else {
        return Err(open_err);
    };
    for line in superblock_lines(&sb) {
        writeln!(out, "{line}")?;
    }
    writeln!(out)?;
    out.flush()?;
    if groups {
        return Err(open_err);
    }
    warn(&format!("{why} (only the superblock is shown)"));
    Ok(())
}

/// Runs `uext4 info` on an open filesystem.
pub fn run(fs: &Filesystem, groups: bool, out: &mut impl Write) -> CliResult {
    let sb = fs.superblock();
    for line in superblock_lines(sb) {
        writeln!(out, "{line}")?;
    }
    if let Some(lines) = journal_lines(fs) {
        for line in lines {
            writeln!(out, "{line}")?;
        }
    }
    // dumpe2fs -h ends with an empty line too.
    writeln!(out)?;
    let st = fs.statfs();
    if st.free_blocks != sb.free_blocks_count || st.free_inodes != u64::from(sb.free_inodes_count) {
        crate::util::eprint_line(&format!(
            "note: the group descriptors count {} free blocks and {} free inodes \
             (the superblock's totals above are updated lazily)",
            st.free_blocks, st.free_inodes
        ));
    }
    if groups {
        for line in group_lines(fs) {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

// ---- `info --json` ----------------------------------------------------
//
// The same information as the text, as one document with stable names:
// every field is always present (absent values are `null`, never
// omitted), times are seconds since the epoch (`null` for "never"),
// UUIDs are text (`null` when all zero).

/// The whole `info --json` document.
#[derive(serde::Serialize)]
struct InfoJson {
    superblock: SuperblockJson,
    /// The internal journal's superblock; `null` without one (or if it
    /// cannot be read: a warning says why).
    journal: Option<JournalJson>,
    /// Free counts summed over the group descriptors (the superblock's are
    /// updated lazily); `null` if the image could not be opened.
    group_descriptor_totals: Option<TotalsJson>,
    /// Only with --groups.
    #[serde(skip_serializing_if = "Option::is_none")]
    groups: Option<Vec<GroupJson>>,
}

#[derive(serde::Serialize)]
struct TotalsJson {
    free_blocks: u64,
    free_inodes: u64,
}

/// One `First error` / `Last error` record.
#[derive(serde::Serialize)]
struct ErrorJson {
    time: u64,
    function: String,
    line: u32,
    inode: u32,
    block: u64,
    /// e2fsprogs' name of the error code (`null` if none recorded).
    err: Option<String>,
}

#[derive(serde::Serialize)]
struct SuperblockJson {
    volume_name: String,
    last_mounted: String,
    uuid: Option<String>,
    magic: u16,
    revision: u32,
    features: Vec<String>,
    flags: Vec<&'static str>,
    default_mount_options: Vec<String>,
    mount_options: String,
    /// "clean" or "not clean", with " with errors" if the error bit is set.
    state: String,
    /// "continue", "remount-ro", "panic" or "unknown".
    errors_behavior: &'static str,
    os_type: &'static str,
    inode_count: u32,
    block_count: u64,
    reserved_block_count: u64,
    overhead_clusters: u32,
    free_blocks: u64,
    free_inodes: u32,
    first_block: u32,
    block_size: u32,
    cluster_size: u64,
    group_descriptor_size: u16,
    reserved_gdt_blocks: u16,
    blocks_per_group: u32,
    clusters_per_group: u32,
    inodes_per_group: u32,
    inode_blocks_per_group: u64,
    raid_stride: u16,
    raid_stripe_width: u32,
    first_meta_bg: u32,
    /// Groups per flex group (`null` without flex_bg's field set).
    flex_bg_size: Option<u64>,
    created: Option<u64>,
    last_mount_time: Option<u64>,
    last_write_time: u64,
    mount_count: u16,
    max_mount_count: i16,
    last_checked: u64,
    /// Seconds; 0 for none.
    check_interval: u32,
    next_check_after: Option<u64>,
    lifetime_writes_kb: u64,
    reserved_blocks_uid: u16,
    reserved_blocks_gid: u16,
    first_inode: u32,
    inode_size: u16,
    required_extra_isize: u16,
    desired_extra_isize: u16,
    journal_uuid: Option<String>,
    journal_inode: u32,
    journal_device: u32,
    first_orphan_inode: u32,
    default_directory_hash: String,
    directory_hash_seed: Option<String>,
    /// s_jnl_backup_type: 0 none, 1 the journal inode's blocks.
    journal_backup_type: u8,
    backup_block_groups: [u32; 2],
    error_count: u32,
    first_error: Option<ErrorJson>,
    last_error: Option<ErrorJson>,
    mmp_block: Option<u64>,
    mmp_update_interval: Option<u16>,
    user_quota_inode: u32,
    group_quota_inode: u32,
    project_quota_inode: u32,
    checksum_type: Option<&'static str>,
    checksum: Option<u32>,
    encryption_pw_salt: Option<String>,
    checksum_seed: Option<u32>,
    character_encoding: Option<String>,
    orphan_file_inode: u32,
}

#[derive(serde::Serialize)]
struct JournalJson {
    features: Vec<String>,
    total_size_kb: u64,
    block_size: u32,
    total_blocks: u32,
    max_transaction_length: u32,
    fast_commit_length: u32,
    first_block: u32,
    sequence: u32,
    start: u32,
    number_of_users: u32,
    checksum_type: Option<&'static str>,
    checksum: Option<u32>,
    errno: i32,
}

#[derive(serde::Serialize)]
struct GroupJson {
    group: u64,
    first_block: u64,
    last_block: u64,
    /// Descriptor checksum (`null` without metadata_csum / uninit_bg).
    checksum: Option<u16>,
    /// INODE_UNINIT, BLOCK_UNINIT, ITABLE_ZEROED.
    flags: Vec<&'static str>,
    /// Where this group's superblock (primary or backup) is, if it has one.
    superblock: Option<u64>,
    block_bitmap: u64,
    inode_bitmap: u64,
    inode_table_first: u64,
    inode_table_last: u64,
    /// Free blocks (clusters with bigalloc).
    free_blocks: u32,
    free_inodes: u32,
    directories: u32,
    unused_inodes: Option<u32>,
}

fn uuid_opt(u: &[u8]) -> Option<String> {
    let s = uuid_str(u);
    (s != "<none>").then_some(s)
}

fn nonzero(t: u64) -> Option<u64> {
    (t != 0).then_some(t)
}

fn superblock_json(sb: &Superblock) -> SuperblockJson {
    let raw = &sb.raw()[..];
    let f = &sb.features;
    let mut state = if sb.state & 1 != 0 { "clean" } else { "not clean" }.to_string();
    if sb.state & 2 != 0 {
        state.push_str(" with errors");
    }
    let error = |time_off: usize, hi_off: usize, ino_off: usize, block_off, func_off: usize, line_off, code_off| {
        let time = u64::from(le32(raw, time_off)) | (u64::from(raw[hi_off]) << 32);
        let code: u8 = raw[code_off];
        (time != 0).then(|| ErrorJson {
            time,
            function: cstr(&raw[func_off..func_off + 32]),
            line: le32(raw, line_off),
            inode: le32(raw, ino_off),
            block: le64(raw, block_off),
            err: (code != 0).then(|| errcode_name(code)),
        })
    };
    let mmp = f.has_incompat(INCOMPAT_MMP);
    let csum = f.has_ro_compat(RO_COMPAT_METADATA_CSUM);
    SuperblockJson {
        volume_name: sb.label(),
        last_mounted: sb.last_mounted_str(),
        uuid: uuid_opt(&sb.uuid),
        magic: le16(raw, 0x38),
        revision: sb.rev_level,
        features: f.names(),
        flags: [(1, "signed_directory_hash"), (2, "unsigned_directory_hash"), (4, "test_filesystem")]
            .into_iter()
            .filter(|(bit, _)| sb.flags & bit != 0)
            .map(|(_, n)| n)
            .collect(),
        default_mount_options: mount_opt_names(sb.default_mount_opts),
        mount_options: cstr(&raw[0x200..0x240]),
        state,
        errors_behavior: match sb.errors {
            1 => "continue",
            2 => "remount-ro",
            3 => "panic",
            _ => "unknown",
        },
        os_type: os_name(sb.creator_os),
        inode_count: sb.inodes_count,
        block_count: sb.blocks_count,
        reserved_block_count: sb.r_blocks_count,
        overhead_clusters: sb.overhead_blocks,
        free_blocks: sb.free_blocks_count,
        free_inodes: sb.free_inodes_count,
        first_block: sb.first_data_block,
        block_size: sb.block_size(),
        cluster_size: 1u64 << (10 + sb.log_cluster_size.min(40)),
        group_descriptor_size: sb.desc_size,
        reserved_gdt_blocks: sb.reserved_gdt_blocks,
        blocks_per_group: sb.blocks_per_group,
        clusters_per_group: sb.clusters_per_group,
        inodes_per_group: sb.inodes_per_group,
        inode_blocks_per_group: (u64::from(sb.inodes_per_group) * u64::from(sb.inode_size))
            .div_ceil(u64::from(sb.block_size())),
        raid_stride: sb.raid_stride,
        raid_stripe_width: sb.raid_stripe_width,
        first_meta_bg: sb.first_meta_bg,
        flex_bg_size: (sb.log_groups_per_flex != 0).then(|| 1u64 << sb.log_groups_per_flex.min(63)),
        created: nonzero(sb.mkfs_time),
        last_mount_time: nonzero(sb.mtime),
        last_write_time: sb.wtime,
        mount_count: sb.mnt_count,
        max_mount_count: sb.max_mnt_count,
        last_checked: sb.lastcheck,
        check_interval: sb.checkinterval,
        next_check_after: (sb.checkinterval != 0).then(|| sb.lastcheck + u64::from(sb.checkinterval)),
        lifetime_writes_kb: sb.kbytes_written,
        reserved_blocks_uid: sb.def_resuid,
        reserved_blocks_gid: sb.def_resgid,
        first_inode: sb.first_ino,
        inode_size: sb.inode_size,
        required_extra_isize: sb.min_extra_isize,
        desired_extra_isize: sb.want_extra_isize,
        journal_uuid: uuid_opt(&sb.journal_uuid),
        journal_inode: sb.journal_inum,
        journal_device: sb.journal_dev,
        first_orphan_inode: sb.last_orphan,
        default_directory_hash: hash_name(sb.def_hash_version),
        directory_hash_seed: uuid_opt(&raw[0xEC..0xFC]),
        journal_backup_type: raw[0xFD],
        backup_block_groups: sb.backup_bgs,
        error_count: sb.error_count,
        first_error: error(0x198, 0x278, 0x19C, 0x1A0, 0x1A8, 0x1C8, 0x27A),
        last_error: error(0x1CC, 0x279, 0x1D0, 0x1D8, 0x1E0, 0x1D4, 0x27B),
        mmp_block: mmp.then_some(sb.mmp_block),
        mmp_update_interval: mmp.then_some(sb.mmp_interval),
        user_quota_inode: sb.usr_quota_inum,
        group_quota_inode: sb.grp_quota_inum,
        project_quota_inode: sb.prj_quota_inum,
        checksum_type: csum.then_some(if sb.checksum_type == 1 { "crc32c" } else { "unknown" }),
        checksum: csum.then_some(sb.checksum),
        encryption_pw_salt: uuid_opt(&raw[0x258..0x268]),
        checksum_seed: f.has_incompat(INCOMPAT_CSUM_SEED).then_some(sb.checksum_seed),
        character_encoding: f.has_incompat(INCOMPAT_CASEFOLD).then(|| match le16(raw, 0x27C) {
            1 => "utf8-12.1".to_string(),
            n => format!("UNKNOWN_ENCODING_{n}"),
        }),
        orphan_file_inode: sb.orphan_file_inum,
    }
}

fn journal_json(fs: &Filesystem) -> Option<JournalJson> {
    let sb = fs.superblock();
    let jsb = journal_sb(fs)?;
    let jbs = be32(&jsb, 0xC);
    let maxlen = be32(&jsb, 0x10);
    let fc_blocks = fast_commit_blocks(sb, &jsb);
    let csum_type = journal_csum_type(&jsb).or((be32(&jsb, 0x24) & 1 != 0).then_some("crc32"));
    Some(JournalJson {
        features: journal_feature_names(&jsb),
        total_size_kb: u64::from(jbs / 1024) * u64::from(maxlen),
        block_size: jbs,
        total_blocks: maxlen,
        max_transaction_length: maxlen.saturating_sub(fc_blocks),
        fast_commit_length: fc_blocks,
        first_block: be32(&jsb, 0x14),
        sequence: be32(&jsb, 0x18),
        start: be32(&jsb, 0x1C),
        number_of_users: be32(&jsb, 0x40),
        checksum_type: csum_type,
        checksum: journal_csum_type(&jsb).map(|_| be32(&jsb, 0xFC)),
        errno: be32(&jsb, 0x20) as i32,
    })
}

fn groups_json(fs: &Filesystem) -> Vec<GroupJson> {
    let sb = fs.superblock();
    let csums = sb.features.has_ro_compat(RO_COMPAT_METADATA_CSUM) || sb.features.has_ro_compat(RO_COMPAT_GDT_CSUM);
    let itb = (u64::from(sb.inodes_per_group) * u64::from(sb.inode_size)).div_ceil(u64::from(sb.block_size()));
    let bpg = u64::from(sb.blocks_per_group);
    let mut v = Vec::new();
    for (g, gd) in fs.group_descs().iter().enumerate() {
        let g = g as u64;
        let first = u64::from(sb.first_data_block) + g * bpg;
        let flags =
            [(BG_INODE_UNINIT, "INODE_UNINIT"), (BG_BLOCK_UNINIT, "BLOCK_UNINIT"), (BG_INODE_ZEROED, "ITABLE_ZEROED")]
                .into_iter()
                .filter(|(bit, _)| csums && gd.flags & bit != 0)
                .map(|(_, n)| n)
                .collect();
        v.push(GroupJson {
            group: g,
            first_block: first,
            last_block: (first + bpg - 1).min(sb.blocks_count.saturating_sub(1)),
            checksum: csums.then_some(gd.checksum),
            flags,
            superblock: has_super(sb, g).then_some(first),
            block_bitmap: gd.block_bitmap,
            inode_bitmap: gd.inode_bitmap,
            inode_table_first: gd.inode_table,
            inode_table_last: (gd.inode_table + itb).saturating_sub(1),
            free_blocks: gd.free_blocks_count,
            free_inodes: gd.free_inodes_count,
            directories: gd.used_dirs_count,
            unused_inodes: csums.then_some(gd.itable_unused),
        });
    }
    v
}

/// Runs `uext4 info --json`. As the text form, it falls back to the bare
/// superblock (with a warning) for images the library cannot open.
pub fn run_json(image: &Path, groups: bool, out: &mut impl Write) -> CliResult {
    let doc = match open_image(image) {
        Ok(fs) => {
            let st = fs.statfs();
            InfoJson {
                superblock: superblock_json(fs.superblock()),
                journal: journal_json(&fs),
                group_descriptor_totals: Some(TotalsJson { free_blocks: st.free_blocks, free_inodes: st.free_inodes }),
                groups: groups.then(|| groups_json(&fs)),
            }
        }
        Err(open_err) => {
            let (CliError::Msg(why), Some(sb), false) = (&open_err, read_superblock(image), groups) else {
                return Err(open_err);
            };
            warn(&format!("{why} (only the superblock is shown)"));
            InfoJson { superblock: superblock_json(&sb), journal: None, group_descriptor_totals: None, groups: None }
        }
    };
    print_json(&doc, out)
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

    #[test]
    fn sparse_groups() {
        let s: Vec<u64> = (0..130).filter(|&g| sparse_backup(g)).collect();
        assert_eq!(s, vec![0, 1, 3, 5, 7, 9, 25, 27, 49, 81, 125]);
    }
}
