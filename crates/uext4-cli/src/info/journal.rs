//! The internal journal: reading its superblock from the journal inode,
//! decoding its features, checksum type and fast-commit area, and the
//! journal part of `uext4 info`'s text.

use super::decode::{be32, COMPAT_FAST_COMMIT, COMPAT_HAS_JOURNAL};
use crate::util::warn;
use uext4::format::superblock::Superblock;
use uext4::Filesystem;

pub(super) fn journal_feature_names(jsb: &[u8]) -> Vec<String> {
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
pub(super) fn journal_sb(fs: &Filesystem) -> Option<[u8; 1024]> {
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
pub(super) fn fast_commit_blocks(sb: &Superblock, jsb: &[u8]) -> u32 {
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
pub(super) fn journal_csum_type(jsb: &[u8]) -> Option<&'static str> {
    (be32(jsb, 0x28) & 0x18 != 0).then(|| match jsb[0x50] {
        1 => "crc32",
        2 => "md5",
        3 => "sha1",
        4 => "crc32c",
        _ => "unknown",
    })
}

/// The journal superblock part of `dumpe2fs -h` (internal journals only).
pub(super) fn journal_lines(fs: &Filesystem) -> Option<Vec<String>> {
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
