//! The block group layout: which groups hold superblock backups, and the
//! per-group lines of `uext4 info --groups`.

use super::decode::{
    COMPAT_SPARSE_SUPER2, RO_COMPAT_BIGALLOC, RO_COMPAT_GDT_CSUM, RO_COMPAT_METADATA_CSUM, RO_COMPAT_SPARSE_SUPER,
};
use uext4::format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT, BG_INODE_ZEROED};
use uext4::format::superblock::Superblock;
use uext4::Filesystem;

pub(super) fn has_super(sb: &Superblock, g: u64) -> bool {
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
pub(super) fn group_lines(fs: &Filesystem) -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_groups() {
        let s: Vec<u64> = (0..130).filter(|&g| sparse_backup(g)).collect();
        assert_eq!(s, vec![0, 1, 3, 5, 7, 9, 25, 27, 49, 81, 125]);
    }
}
