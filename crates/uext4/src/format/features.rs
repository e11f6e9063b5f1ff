//! Feature flags and the kernel's rules for which images may be opened.
//!
//! Three sets: COMPAT (anyone may ignore), RO_COMPAT (an implementation that
//! does not know one may only read), INCOMPAT (an implementation that does
//! not know one must not touch the filesystem at all).

/// COMPAT feature bits (kernel names, EXT4_FEATURE_COMPAT_*).
#[allow(missing_docs)]
pub mod compat {
    pub const DIR_PREALLOC: u32 = 0x1;
    pub const IMAGIC_INODES: u32 = 0x2;
    pub const HAS_JOURNAL: u32 = 0x4;
    pub const EXT_ATTR: u32 = 0x8;
    pub const RESIZE_INODE: u32 = 0x10;
    pub const DIR_INDEX: u32 = 0x20;
    pub const LAZY_BG: u32 = 0x40;
    pub const EXCLUDE_BITMAP: u32 = 0x100;
    pub const SPARSE_SUPER2: u32 = 0x200;
    pub const FAST_COMMIT: u32 = 0x400;
    pub const STABLE_INODES: u32 = 0x800;
    pub const ORPHAN_FILE: u32 = 0x1000;
}

/// RO_COMPAT feature bits (kernel names, EXT4_FEATURE_RO_COMPAT_*).
#[allow(missing_docs)]
pub mod ro_compat {
    pub const SPARSE_SUPER: u32 = 0x1;
    pub const LARGE_FILE: u32 = 0x2;
    pub const BTREE_DIR: u32 = 0x4;
    pub const HUGE_FILE: u32 = 0x8;
    pub const GDT_CSUM: u32 = 0x10;
    pub const DIR_NLINK: u32 = 0x20;
    pub const EXTRA_ISIZE: u32 = 0x40;
    pub const HAS_SNAPSHOT: u32 = 0x80;
    pub const QUOTA: u32 = 0x100;
    pub const BIGALLOC: u32 = 0x200;
    pub const METADATA_CSUM: u32 = 0x400;
    pub const REPLICA: u32 = 0x800;
    pub const READONLY: u32 = 0x1000;
    pub const PROJECT: u32 = 0x2000;
    pub const SHARED_BLOCKS: u32 = 0x4000;
    pub const VERITY: u32 = 0x8000;
    pub const ORPHAN_PRESENT: u32 = 0x10000;
}

/// INCOMPAT feature bits (kernel names, EXT4_FEATURE_INCOMPAT_*).
#[allow(missing_docs)]
pub mod incompat {
    pub const COMPRESSION: u32 = 0x1;
    pub const FILETYPE: u32 = 0x2;
    pub const RECOVER: u32 = 0x4;
    pub const JOURNAL_DEV: u32 = 0x8;
    pub const META_BG: u32 = 0x10;
    pub const EXTENTS: u32 = 0x40;
    pub const BIT64: u32 = 0x80;
    pub const MMP: u32 = 0x100;
    pub const FLEX_BG: u32 = 0x200;
    pub const EA_INODE: u32 = 0x400;
    pub const DIRDATA: u32 = 0x1000;
    pub const CSUM_SEED: u32 = 0x2000;
    pub const LARGEDIR: u32 = 0x4000;
    pub const INLINE_DATA: u32 = 0x8000;
    pub const ENCRYPT: u32 = 0x10000;
    pub const CASEFOLD: u32 = 0x20000;
}

const COMPAT_NAMES: &[(u32, &str)] = &[
    (compat::DIR_PREALLOC, "dir_prealloc"),
    (compat::IMAGIC_INODES, "imagic_inodes"),
    (compat::HAS_JOURNAL, "has_journal"),
    (compat::EXT_ATTR, "ext_attr"),
    (compat::RESIZE_INODE, "resize_inode"),
    (compat::DIR_INDEX, "dir_index"),
    (compat::LAZY_BG, "lazy_bg"),
    (compat::EXCLUDE_BITMAP, "snapshot_bitmap"),
    (compat::SPARSE_SUPER2, "sparse_super2"),
    (compat::FAST_COMMIT, "fast_commit"),
    (compat::STABLE_INODES, "stable_inodes"),
    (compat::ORPHAN_FILE, "orphan_file"),
];

const RO_COMPAT_NAMES: &[(u32, &str)] = &[
    (ro_compat::SPARSE_SUPER, "sparse_super"),
    (ro_compat::LARGE_FILE, "large_file"),
    (ro_compat::BTREE_DIR, "btree_dir"),
    (ro_compat::HUGE_FILE, "huge_file"),
    (ro_compat::GDT_CSUM, "uninit_bg"),
    (ro_compat::DIR_NLINK, "dir_nlink"),
    (ro_compat::EXTRA_ISIZE, "extra_isize"),
    (ro_compat::HAS_SNAPSHOT, "snapshot"),
    (ro_compat::QUOTA, "quota"),
    (ro_compat::BIGALLOC, "bigalloc"),
    (ro_compat::METADATA_CSUM, "metadata_csum"),
    (ro_compat::REPLICA, "replica"),
    (ro_compat::READONLY, "read-only"),
    (ro_compat::PROJECT, "project"),
    (ro_compat::SHARED_BLOCKS, "shared_blocks"),
    (ro_compat::VERITY, "verity"),
    (ro_compat::ORPHAN_PRESENT, "orphan_present"),
];

const INCOMPAT_NAMES: &[(u32, &str)] = &[
    (incompat::COMPRESSION, "compression"),
    (incompat::FILETYPE, "filetype"),
    (incompat::RECOVER, "needs_recovery"),
    (incompat::JOURNAL_DEV, "journal_dev"),
    (incompat::META_BG, "meta_bg"),
    (incompat::EXTENTS, "extent"),
    (incompat::BIT64, "64bit"),
    (incompat::MMP, "mmp"),
    (incompat::FLEX_BG, "flex_bg"),
    (incompat::EA_INODE, "ea_inode"),
    (incompat::DIRDATA, "dirdata"),
    (incompat::CSUM_SEED, "metadata_csum_seed"),
    (incompat::LARGEDIR, "large_dir"),
    (incompat::INLINE_DATA, "inline_data"),
    (incompat::ENCRYPT, "encrypt"),
    (incompat::CASEFOLD, "casefold"),
];

/// True if `name` is the e2fsprogs name of a feature (for messages that
/// tell an unknown name from an unsupported one).
pub(crate) fn is_known_name(name: &str) -> bool {
    COMPAT_NAMES.iter().chain(RO_COMPAT_NAMES).chain(INCOMPAT_NAMES).any(|&(_, n)| n == name)
}

/// INCOMPAT features this implementation understands well enough to read.
/// Anything else (journal_dev, compression, dirdata, encrypt, and
/// unknown bits) refuses the open: see
/// docs/COMPATIBILITY.md for the reason behind each.
pub const INCOMPAT_SUPPORTED: u32 = incompat::FILETYPE
    | incompat::RECOVER
    | incompat::META_BG
    | incompat::EXTENTS
    | incompat::BIT64
    | incompat::MMP
    | incompat::FLEX_BG
    | incompat::CSUM_SEED
    | incompat::LARGEDIR
    | incompat::CASEFOLD
    | incompat::EA_INODE
    | incompat::INLINE_DATA;

/// RO_COMPAT features this implementation understands and keeps
/// consistent while writing. Others make the filesystem read-only, as in
/// the kernel (the one list both the open's notice and the read-write
/// check use).
pub const RO_COMPAT_SUPPORTED: u32 = ro_compat::SPARSE_SUPER
    | ro_compat::LARGE_FILE
    | ro_compat::HUGE_FILE
    | ro_compat::GDT_CSUM
    | ro_compat::DIR_NLINK
    | ro_compat::EXTRA_ISIZE
    | ro_compat::METADATA_CSUM
    | ro_compat::ORPHAN_PRESENT
    | ro_compat::QUOTA
    | ro_compat::PROJECT
    | ro_compat::BIGALLOC;

/// The three feature words of a superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Features {
    /// COMPAT bits.
    pub compat: u32,
    /// RO_COMPAT bits.
    pub ro_compat: u32,
    /// INCOMPAT bits.
    pub incompat: u32,
}

fn names(bits: u32, table: &[(u32, &str)], out: &mut Vec<String>) {
    for bit in 0..32 {
        let mask = 1u32 << bit;
        if bits & mask == 0 {
            continue;
        }
        match table.iter().find(|(m, _)| *m == mask) {
            Some((_, n)) => out.push((*n).to_string()),
            None => out.push(format!("FEATURE_{mask:#x}")),
        }
    }
}

impl Features {
    /// True if every bit of `mask` is set in COMPAT.
    pub fn has_compat(&self, mask: u32) -> bool {
        self.compat & mask == mask
    }
    /// True if every bit of `mask` is set in RO_COMPAT.
    pub fn has_ro_compat(&self, mask: u32) -> bool {
        self.ro_compat & mask == mask
    }
    /// True if every bit of `mask` is set in INCOMPAT.
    pub fn has_incompat(&self, mask: u32) -> bool {
        self.incompat & mask == mask
    }

    /// Feature names in the order dumpe2fs prints them.
    pub fn names(&self) -> Vec<String> {
        let mut v = Vec::new();
        names(self.compat, COMPAT_NAMES, &mut v);
        names(self.incompat, INCOMPAT_NAMES, &mut v);
        names(self.ro_compat, RO_COMPAT_NAMES, &mut v);
        v
    }

    /// Names of INCOMPAT features that prevent opening at all.
    pub fn refused_incompat(&self) -> Vec<String> {
        let mut v = Vec::new();
        names(self.incompat & !INCOMPAT_SUPPORTED, INCOMPAT_NAMES, &mut v);
        v
    }

    /// Names of the RO_COMPAT bits in `bits`.
    pub fn ro_compat_names(&self, bits: u32) -> Vec<String> {
        let mut v = Vec::new();
        names(bits, RO_COMPAT_NAMES, &mut v);
        v
    }

    /// Names of RO_COMPAT features that prevent opening read-write.
    pub fn readonly_ro_compat(&self) -> Vec<String> {
        let mut v = Vec::new();
        names(self.ro_compat & !RO_COMPAT_SUPPORTED, RO_COMPAT_NAMES, &mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_bits_are_named() {
        let f = Features { compat: 0, ro_compat: 0x8000_0000, incompat: 0x4000_0000 | incompat::ENCRYPT };
        assert_eq!(f.refused_incompat(), vec!["encrypt".to_string(), "FEATURE_0x40000000".into()]);
        assert_eq!(f.readonly_ro_compat(), vec!["FEATURE_0x80000000".to_string()]);
    }

    #[test]
    fn default_mkfs_features_are_supported() {
        let f = Features {
            compat: compat::HAS_JOURNAL | compat::EXT_ATTR | compat::RESIZE_INODE | compat::DIR_INDEX,
            incompat: incompat::FILETYPE | incompat::EXTENTS | incompat::BIT64 | incompat::FLEX_BG,
            ro_compat: ro_compat::SPARSE_SUPER
                | ro_compat::LARGE_FILE
                | ro_compat::HUGE_FILE
                | ro_compat::DIR_NLINK
                | ro_compat::EXTRA_ISIZE
                | ro_compat::METADATA_CSUM,
        };
        assert!(f.refused_incompat().is_empty());
        assert!(f.readonly_ro_compat().is_empty());
    }
}
