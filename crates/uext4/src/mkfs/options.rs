//! What to create: the options and feature set of `uext4 mkfs`, parsed
//! from mke2fs-style `-O` and `-E` lists.

use super::profile::{Mke2fsProfile, SizeDefaults};
use crate::error::{Error, Result};

/// What to create: the size, block and inode geometry, features and
/// label of a new filesystem, passed to
/// [`mkfs_file`](crate::mkfs::mkfs_file). Build it with
/// `..Default::default()`: the defaults are mke2fs's for an ext4 of that
/// size.
#[derive(Debug, Clone)]
pub struct MkfsOptions {
    /// Device or image size in bytes.
    pub size: u64,
    /// Block size; default [`Self::profile`]'s for the size (mke2fs's
    /// built-in: 1 KiB below 512 MiB, else 4 KiB).
    pub block_size: Option<u32>,
    /// Inode record size; default [`Self::profile`]'s (256).
    pub inode_size: Option<u16>,
    /// Bytes per inode; default [`Self::profile`]'s for the size class
    /// (mke2fs's built-in: floppy below 3 MiB 8192, small below 512 MiB
    /// 4096, 16384, big from 4 TiB 32768, huge from 16 TiB 65536), at
    /// least the block (cluster) size.
    pub inode_ratio: Option<u64>,
    /// The mke2fs.conf whose size classes give the defaults above
    /// (default: mke2fs's built-in one; the `uext4 mkfs` command reads the
    /// host's, as mke2fs does).
    pub profile: Mke2fsProfile,
    /// The mke2fs type whose stanza the profile applies before the size
    /// class's (ext4, ext3 or ext2; the features are [`Self::features`]).
    pub fs_type: String,
    /// Volume label (up to 16 bytes).
    pub label: String,
    /// Journal size in blocks: `None` = mke2fs's default for the size,
    /// `Some(0)` = no journal.
    pub journal_blocks: Option<u32>,
    /// Filesystem UUID (random if `None`).
    pub uuid: Option<[u8; 16]>,
    /// The optional features to create (default: upstream mke2fs's ext4
    /// set); edit with [`MkfsFeatures::apply`].
    pub features: MkfsFeatures,
    /// Percentage of blocks reserved for root (`-m`, at most 50).
    pub reserved_percent: u32,
    /// Number of inodes (`-N`): overrides the inode ratio; per group
    /// rounded up to fill whole inode table blocks, then down to a
    /// multiple of 8, as mke2fs does.
    pub inodes: Option<u64>,
    /// The directory hash seed (`-E hash_seed=UUID`; random if `None`,
    /// derived from [`Self::time`] when that is set).
    pub hash_seed: Option<[u8; 16]>,
    /// Owner of the root directory (`-E root_owner=uid:gid`; default the
    /// calling process's).
    pub root_owner: Option<(u32, u32)>,
    /// `s_encoding_flags` of a casefold image (`-E encoding_flags=strict`
    /// gives 1: names invalid in UTF-8 are refused in casefolded
    /// directories); 0 without casefold.
    pub encoding_flags: u16,
    /// The quota files of a `quota` image, by [`QuotaType::index`](crate::format::quota::QuotaType::index)
    /// (`-E quotatype=usrquota:grpquota:prjquota`): `None` = mke2fs's
    /// default, user and group (and project with the project feature).
    /// Naming prjquota turns the project feature on, as in mke2fs.
    pub quota_types: Option<[bool; 3]>,
    /// `s_mmp_update_interval` of an mmp image (`-E
    /// mmp_update_interval=`, seconds, at most 300; mke2fs's default 5).
    pub mmp_update_interval: u16,
    /// A fixed creation time (`SOURCE_DATE_EPOCH`) for reproducible
    /// images: every timestamp mkfs writes is this one, and a UUID or
    /// hash seed not given is derived from it (and the label) instead of
    /// drawn at random, so the same options give the same bytes.
    pub time: Option<crate::format::inode::Timestamp>,
    /// The cluster size in bytes of a bigalloc image (`-C`; default 16
    /// times the block size, as mke2fs); refused without bigalloc.
    pub cluster_size: Option<u32>,
}

impl Default for MkfsOptions {
    fn default() -> Self {
        MkfsOptions {
            size: 0,
            block_size: None,
            inode_size: None,
            inode_ratio: None,
            profile: Mke2fsProfile::builtin(),
            fs_type: "ext4".into(),
            label: String::new(),
            journal_blocks: None,
            uuid: None,
            features: MkfsFeatures::default(),
            reserved_percent: 5,
            inodes: None,
            hash_seed: None,
            root_owner: None,
            encoding_flags: 0,
            quota_types: None,
            mmp_update_interval: crate::format::mmp::MIN_CHECK_INTERVAL,
            time: None,
            cluster_size: None,
        }
    }
}

impl MkfsOptions {
    /// The root directory's owner: [`Self::root_owner`], or the calling
    /// process's uid and gid.
    pub fn root_ids(&self) -> (u32, u32) {
        self.root_owner.unwrap_or_else(|| {
            // SAFETY: getuid/getgid have no preconditions and cannot fail.
            unsafe { (libc::getuid(), libc::getgid()) }
        })
    }

    /// The quota files to make, by [`QuotaType::index`](crate::format::quota::QuotaType::index): none without the
    /// quota feature; a project file only with the project feature.
    pub fn quota_files(&self) -> [bool; 3] {
        if !self.features.quota {
            return [false; 3];
        }
        let mut t = self.quota_types.unwrap_or([true, true, self.features.project]);
        t[2] &= self.features.project;
        t
    }

    /// The profile's defaults for [`Self::fs_type`] at [`Self::size`].
    pub fn size_defaults(&self) -> SizeDefaults {
        self.profile.defaults(&self.fs_type, self.size)
    }

    /// The block size mkfs will use: [`Self::block_size`], or the
    /// profile's for the size (mke2fs's built-in: 1 KiB below 512 MiB,
    /// else 4 KiB).
    pub fn effective_block_size(&self) -> u32 {
        self.block_size.unwrap_or_else(|| self.size_defaults().block_size)
    }

    /// Applies a mke2fs `-E` list (comma-separated): `hash_seed=UUID`,
    /// `root_owner[=uid:gid]` (without a value: the calling process's),
    /// `encoding=utf8` (turns casefold on), `encoding_flags=strict`,
    /// `quotatype=usrquota:grpquota:prjquota` (prjquota turns project on),
    /// `mmp_update_interval=SECONDS` (0 and less than 5 give 5),
    /// and, accepted for compatibility because uext4 mkfs behaves so
    /// anyway (its image files are sparse, their tables read as zeros and
    /// no device is discarded), `lazy_itable_init=0|1`,
    /// `lazy_journal_init=0|1`, `discard` and `nodiscard`. Anything else
    /// is refused, every unknown name in one error, leaving `self`
    /// unchanged.
    pub fn apply_extended(&mut self, list: &str) -> Result<()> {
        let mut next = self.clone();
        let mut bad = Vec::new();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (item, None),
            };
            match (key, value) {
                ("hash_seed", Some(v)) => next.hash_seed = Some(parse_uuid(v)?),
                ("root_owner", None) => {
                    // SAFETY: getuid/getgid have no preconditions and cannot fail.
                    next.root_owner = Some(unsafe { (libc::getuid(), libc::getgid()) });
                }
                ("root_owner", Some(v)) => {
                    let parsed = v.split_once(':').and_then(|(u, g)| Some((u.parse().ok()?, g.parse().ok()?)));
                    next.root_owner =
                        Some(parsed.ok_or_else(|| {
                            Error::Invalid(format!("-E root_owner={v}: expected uid:gid (two numbers)"))
                        })?);
                }
                // utf8 (12.1) is the only encoding mke2fs knows; naming it
                // turns casefold on, as there.
                ("encoding", Some("utf8" | "utf8-12.1")) => next.features.casefold = true,
                ("encoding_flags", Some(v)) => {
                    next.encoding_flags = 0;
                    for flag in v.split('-') {
                        match flag {
                            "strict" => next.encoding_flags |= 1,
                            "nostrict" => next.encoding_flags &= !1,
                            _ => bad.push(item.to_string()),
                        }
                    }
                }
                ("quotatype", Some(v)) => {
                    let mut types = [false; 3];
                    for t in v.split(':') {
                        match t {
                            "usrquota" | "usr" => types[0] = true,
                            "grpquota" | "grp" => types[1] = true,
                            "prjquota" | "prj" => types[2] = true,
                            _ => bad.push(item.to_string()),
                        }
                    }
                    if types[2] {
                        next.features.project = true;
                    }
                    next.quota_types = Some(types);
                }
                ("mmp_update_interval", Some(v)) => match v.parse::<u16>() {
                    Ok(n) if n <= crate::format::mmp::MAX_CHECK_INTERVAL => {
                        next.mmp_update_interval = n.max(crate::format::mmp::MIN_CHECK_INTERVAL)
                    }
                    _ => bad.push(item.to_string()),
                },
                ("lazy_itable_init" | "lazy_journal_init", Some("0" | "1")) | ("discard" | "nodiscard", None) => {}
                _ => bad.push(item.to_string()),
            }
        }
        if !bad.is_empty() {
            return Err(Error::Invalid(format!(
                "extended option(s) uext4 mkfs does not know or support: {} (it takes hash_seed=UUID, \
                 root_owner[=uid:gid], encoding=utf8, encoding_flags=strict, \
                 quotatype=usrquota:grpquota:prjquota, mmp_update_interval=0..300, lazy_itable_init=0|1, lazy_journal_init=0|1, discard, nodiscard)",
                bad.join(", ")
            )));
        }
        *self = next;
        Ok(())
    }
}

/// Parses a UUID in its usual text form (32 hex digits, dashes anywhere
/// ignored), as mke2fs's `-U` and `-E hash_seed=` take it.
pub fn parse_uuid(s: &str) -> Result<[u8; 16]> {
    let hex: Vec<u8> = s.bytes().filter(|&b| b != b'-').collect();
    let bad = || Error::Invalid(format!("{s:?} is not a UUID (32 hex digits, e.g. 0a1b2c3d-...)"));
    if hex.len() != 32 {
        return Err(bad());
    }
    let mut u = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).map_err(|_| bad())?;
        u[i] = u8::from_str_radix(text, 16).map_err(|_| bad())?;
    }
    Ok(u)
}

/// The features `mkfs` can turn on or off. The default is the ext4
/// set of upstream e2fsprogs 1.47's mke2fs.conf (`has_journal, extent,
/// huge_file, flex_bg, metadata_csum, metadata_csum_seed, 64bit,
/// dir_nlink, extra_isize, orphan_file`); [`Self::for_type`] gives the
/// ext2 and ext3 sets. `ext_attr`, `dir_index`, `filetype`,
/// `sparse_super` and `large_file` are always on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MkfsFeatures {
    /// A journal (its size: [`MkfsOptions::journal_blocks`]).
    pub has_journal: bool,
    /// Files larger than 2 TiB (the inode block count in fs blocks).
    pub huge_file: bool,
    /// Flex groups of 16 (bitmaps and inode tables packed together).
    pub flex_bg: bool,
    /// crc32c checksums on all metadata (off gives uninit_bg's crc16
    /// descriptor checksums instead, as mke2fs does).
    pub metadata_csum: bool,
    /// The checksum seed stored in the superblock (needs metadata_csum),
    /// so that the UUID can change without rewriting every checksum.
    pub metadata_csum_seed: bool,
    /// 64-byte group descriptors and block numbers above 2^32.
    pub bit64: bool,
    /// Directories with more than 65000 subdirectories.
    pub dir_nlink: bool,
    /// A guaranteed 32 bytes of extra inode fields.
    pub extra_isize: bool,
    /// An orphan file (inode 12) instead of the `s_last_orphan` chain only.
    /// Made only with a journal (the kernel and e2fsck refuse it without).
    pub orphan_file: bool,
    /// Small files and directories stored in the inode (needs inodes of
    /// at least 256 bytes, as mke2fs requires).
    pub inline_data: bool,
    /// Extended attribute values in their own inodes.
    pub ea_inode: bool,
    /// Directories with three-level hash trees and over 2 GiB.
    pub large_dir: bool,
    /// Case-insensitive directories (`+F`); the encoding is
    /// [`MkfsOptions::encoding_flags`]'s (utf8, as mke2fs's only).
    pub casefold: bool,
    /// Quota files kept by the filesystem itself (the types:
    /// [`MkfsOptions::quota_types`]).
    pub quota: bool,
    /// Project ids (`i_projid`); with quota, a project quota file too.
    /// Needs inodes of at least 256 bytes.
    pub project: bool,
    /// Multi-mount protection: an MMP block, left clean, checked every
    /// [`MkfsOptions::mmp_update_interval`] seconds.
    pub mmp: bool,
    /// A fast-commit area after the journal: 1/64 of mke2fs's default
    /// journal size for the filesystem, added to the journal as mke2fs
    /// does (`s_num_fc_blks`). Needs a journal.
    pub fast_commit: bool,
    /// Extent-mapped files (off: block-mapped, with indirect blocks, as
    /// ext2 and ext3).
    pub extent: bool,
    /// Without metadata_csum: crc16 descriptor checksums, which let groups
    /// be left uninitialised (`uninit_bg`; on in the ext4 set, off in
    /// ext2's and ext3's, whose every bitmap and inode table mkfs then
    /// writes). Ignored with metadata_csum, which supersedes it.
    pub uninit_bg: bool,
    /// Allocation in clusters of several blocks (the size:
    /// [`MkfsOptions::cluster_size`]). Needs extent.
    pub bigalloc: bool,
    /// Descriptor blocks reserved for growing the filesystem online
    /// (inode 7 maps them; on in the ext2 and ext3 sets, as mke2fs's, off
    /// in uext4's ext4 set). Not with bigalloc.
    pub resize_inode: bool,
}

impl Default for MkfsFeatures {
    fn default() -> Self {
        MkfsFeatures {
            has_journal: true,
            huge_file: true,
            flex_bg: true,
            metadata_csum: true,
            metadata_csum_seed: true,
            bit64: true,
            dir_nlink: true,
            extra_isize: true,
            orphan_file: true,
            inline_data: false,
            ea_inode: false,
            large_dir: false,
            casefold: false,
            quota: false,
            project: false,
            mmp: false,
            fast_commit: false,
            extent: true,
            uninit_bg: true,
            bigalloc: false,
            resize_inode: false,
        }
    }
}

impl MkfsFeatures {
    /// The feature set of mke2fs's `-t` type: `ext4` (the default),
    /// `ext3` (`has_journal` and the always-on base features) or `ext2`
    /// (the base features only), as mke2fs.conf's stanzas (resize_inode
    /// included in these two, not in uext4's ext4 set).
    pub fn for_type(fs_type: &str) -> Result<MkfsFeatures> {
        let ext4 = MkfsFeatures::default();
        let old = MkfsFeatures {
            has_journal: true,
            huge_file: false,
            flex_bg: false,
            metadata_csum: false,
            metadata_csum_seed: false,
            bit64: false,
            dir_nlink: false,
            extra_isize: false,
            orphan_file: false,
            extent: false,
            uninit_bg: false,
            resize_inode: true,
            ..ext4
        };
        match fs_type {
            "ext4" => Ok(ext4),
            "ext3" => Ok(old),
            "ext2" => Ok(MkfsFeatures { has_journal: false, ..old }),
            _ => Err(Error::Invalid(format!(
                "-t {fs_type}: uext4 mkfs makes ext2, ext3 and ext4 (the types of mke2fs.conf it knows)"
            ))),
        }
    }

    /// The features mkfs can add or drop, by their e2fsprogs names.
    pub const NAMES: [&'static str; 21] = [
        "has_journal",
        "huge_file",
        "flex_bg",
        "metadata_csum",
        "metadata_csum_seed",
        "64bit",
        "dir_nlink",
        "extra_isize",
        "orphan_file",
        "inline_data",
        "ea_inode",
        "large_dir",
        "casefold",
        "quota",
        "project",
        "mmp",
        "fast_commit",
        "extent",
        "uninit_bg",
        "bigalloc",
        "resize_inode",
    ];

    fn flag(&mut self, name: &str) -> Option<&mut bool> {
        Some(match name {
            "has_journal" => &mut self.has_journal,
            "huge_file" => &mut self.huge_file,
            "flex_bg" => &mut self.flex_bg,
            "metadata_csum" => &mut self.metadata_csum,
            "metadata_csum_seed" => &mut self.metadata_csum_seed,
            "64bit" => &mut self.bit64,
            "dir_nlink" => &mut self.dir_nlink,
            "extra_isize" => &mut self.extra_isize,
            "orphan_file" => &mut self.orphan_file,
            "inline_data" => &mut self.inline_data,
            "ea_inode" => &mut self.ea_inode,
            "large_dir" => &mut self.large_dir,
            "casefold" => &mut self.casefold,
            "quota" => &mut self.quota,
            "project" => &mut self.project,
            "mmp" => &mut self.mmp,
            "fast_commit" => &mut self.fast_commit,
            "extent" | "extents" => &mut self.extent,
            "uninit_bg" | "uninit_groups" => &mut self.uninit_bg,
            "bigalloc" => &mut self.bigalloc,
            "resize_inode" => &mut self.resize_inode,
            _ => return None,
        })
    }

    /// Applies a mke2fs `-O` list: comma-separated names, each adding the
    /// feature or, prefixed with `^`, dropping it. Dropping metadata_csum
    /// also drops metadata_csum_seed unless the list names the latter
    /// (the seed means nothing without checksums), and dropping
    /// has_journal drops orphan_file unless the list names it (it needs a
    /// journal). Unknown features and
    /// features mkfs cannot make are refused, all named in one error,
    /// and leave `self` unchanged.
    pub fn apply(&mut self, list: &str) -> Result<()> {
        let mut next = *self;
        let (mut unknown, mut unsupported) = (Vec::new(), Vec::new());
        let mut seed_named = false;
        let mut csum_dropped = false;
        let (mut orphan_named, mut journal_dropped) = (false, false);
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (on, name) = match item.strip_prefix('^') {
                Some(n) => (false, n),
                None => (true, item),
            };
            seed_named |= name == "metadata_csum_seed";
            csum_dropped |= name == "metadata_csum" && !on;
            orphan_named |= name == "orphan_file";
            journal_dropped |= name == "has_journal" && !on;
            match next.flag(name) {
                Some(f) => *f = on,
                // Always on: naming them is harmless, dropping them is not
                // something mkfs can do.
                None if on && ALWAYS_ON.contains(&name) => {}
                None if crate::format::features::is_known_name(name) || ALWAYS_ON.contains(&name) => {
                    unsupported.push(item.to_string())
                }
                None => unknown.push(item.to_string()),
            }
        }
        if csum_dropped && !seed_named {
            next.metadata_csum_seed = false;
        }
        if journal_dropped && !orphan_named {
            next.orphan_file = false;
        }
        let mut why = Vec::new();
        if !unknown.is_empty() {
            why.push(format!("unknown feature(s): {}", unknown.join(", ")));
        }
        if !unsupported.is_empty() {
            why.push(format!(
                "feature(s) uext4 mkfs cannot set this way: {} (it can add or drop {})",
                unsupported.join(", "),
                Self::NAMES.join(", ")
            ));
        }
        if !why.is_empty() {
            return Err(Error::Invalid(why.join("; ")));
        }
        *self = next;
        Ok(())
    }

    /// Refuses combinations mke2fs refuses.
    pub fn check(&self) -> Result<()> {
        if self.metadata_csum_seed && !self.metadata_csum {
            return Err(Error::Invalid("metadata_csum_seed needs metadata_csum".into()));
        }
        if self.orphan_file && !self.has_journal {
            return Err(Error::Invalid("orphan_file needs has_journal".into()));
        }
        if self.fast_commit && !self.has_journal {
            return Err(Error::Invalid("fast_commit needs has_journal".into()));
        }
        // As mke2fs: both need extent-mapped files (64-bit block numbers
        // do not fit in indirect blocks; clusters are mapped by extents).
        if self.bit64 && !self.extent {
            return Err(Error::Invalid("64bit needs extent (drop it too: -O ^extent,^64bit)".into()));
        }
        if self.bigalloc && !self.extent {
            return Err(Error::Invalid("bigalloc needs extent".into()));
        }
        if self.bigalloc && self.resize_inode {
            return Err(Error::Invalid(
                "resize_inode with bigalloc: uext4 mkfs does not reserve descriptor blocks in clusters \
                 (add -O ^resize_inode)"
                    .into(),
            ));
        }
        Ok(())
    }
}

/// Features every uext4 mkfs image has.
const ALWAYS_ON: [&str; 5] = ["ext_attr", "dir_index", "filetype", "sparse_super", "large_file"];
