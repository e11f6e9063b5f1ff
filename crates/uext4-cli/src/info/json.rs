//! `uext4 info --json`: the same information as the text, as one document
//! with stable names.

use super::decode::{
    be32, cstr, errcode_name, hash_name, le16, le32, le64, mount_opt_names, os_name, uuid_str, INCOMPAT_CASEFOLD,
    INCOMPAT_CSUM_SEED, INCOMPAT_MMP, RO_COMPAT_GDT_CSUM, RO_COMPAT_METADATA_CSUM,
};
use super::groups::has_super;
use super::journal::{fast_commit_blocks, journal_csum_type, journal_feature_names, journal_sb};
use super::read_superblock;
use crate::util::{open_image, print_json, warn, CliError, CliResult};
use std::io::Write;
use std::path::Path;
use uext4::format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT, BG_INODE_ZEROED};
use uext4::format::superblock::Superblock;
use uext4::Filesystem;

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
