//! The superblock part of `uext4 info`'s text: the lines of `dumpe2fs -h`,
//! in its order and with its labels.

use super::decode::{
    cstr, errcode_name, hash_name, interval_string, le16, le32, le64, lifetime_writes, mount_opts_string, os_name,
    user_or_group, uuid_str, COMPAT_DIR_INDEX, COMPAT_ORPHAN_FILE, INCOMPAT_64BIT, INCOMPAT_CASEFOLD,
    INCOMPAT_CSUM_SEED, INCOMPAT_MMP, RO_COMPAT_BIGALLOC, RO_COMPAT_METADATA_CSUM,
};
use crate::util::ctime;
use uext4::format::superblock::Superblock;

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
