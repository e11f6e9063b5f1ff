//! mke2fs.conf's defaults by filesystem type and size class: the block
//! size, inode size and bytes per inode mke2fs picks when the command line
//! does not say (e2fsprogs' `parse_fs_type` and `get_int_from_profile`).
//! Only these three fields are read; the feature lists are uext4's own
//! ([`super::MkfsFeatures`]).

use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// e2fsprogs 1.47's built-in profile (misc/mke2fs.conf.in), which mke2fs
/// uses when no configuration file exists: its size-class part.
pub const BUILTIN: &str = "[defaults]
\tblocksize = 4096
\tinode_size = 256
\tinode_ratio = 16384

[fs_types]
\tsmall = {
\t\tblocksize = 1024
\t\tinode_ratio = 4096
\t}
\tfloppy = {
\t\tblocksize = 1024
\t\tinode_ratio = 8192
\t}
\tbig = {
\t\tinode_ratio = 32768
\t}
\thuge = {
\t\tinode_ratio = 65536
\t}
";

/// The size-class fields of one stanza (unset: inherited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Fields {
    blocksize: Option<i64>,
    inode_size: Option<i64>,
    inode_ratio: Option<i64>,
}

impl Fields {
    fn set(&mut self, key: &str, value: &str) {
        let slot = match key {
            "blocksize" => &mut self.blocksize,
            "inode_size" => &mut self.inode_size,
            "inode_ratio" => &mut self.inode_ratio,
            _ => return,
        };
        // As the profile library: a value that is not a number is ignored.
        if let Ok(v) = value.trim().trim_matches('"').parse() {
            *slot = Some(v);
        }
    }
}

/// What mkfs defaults to for one filesystem type and size, from
/// [`Mke2fsProfile::defaults`]: what an option left `None` in
/// [`MkfsOptions`](crate::mkfs::MkfsOptions) becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeDefaults {
    /// Block size in bytes.
    pub block_size: u32,
    /// Inode record size in bytes.
    pub inode_size: u16,
    /// Bytes per inode (before mkfs raises it to the block or cluster size).
    pub inode_ratio: u64,
}

/// The `[defaults]` and `[fs_types]` size fields of a mke2fs.conf
/// ([`MkfsOptions::profile`](crate::mkfs::MkfsOptions::profile)): use
/// [`Mke2fsProfile::load`] to size new filesystems as the machine's mke2fs
/// would, the default ([`Mke2fsProfile::builtin`]) for results that do not
/// depend on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mke2fsProfile {
    defaults: Fields,
    types: BTreeMap<String, Fields>,
}

impl Default for Mke2fsProfile {
    fn default() -> Self {
        Self::builtin()
    }
}

impl Mke2fsProfile {
    /// mke2fs's built-in profile (`BUILTIN`).
    pub fn builtin() -> Self {
        Self::parse(BUILTIN)
    }

    /// Reads the profile mke2fs reads: `$MKE2FS_CONFIG`, else
    /// /etc/mke2fs.conf; the built-in one when that file does not exist.
    pub fn load() -> Result<Self> {
        let path = std::env::var_os("MKE2FS_CONFIG").unwrap_or_else(|| "/etc/mke2fs.conf".into());
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Self::parse(&text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::builtin()),
            Err(e) => Err(Error::Invalid(format!("{}: {e}", std::path::Path::new(&path).display()))),
        }
    }

    /// Parses a mke2fs.conf: `key = value` relations in `[defaults]`, and
    /// `name = { key = value ... }` stanzas in `[fs_types]`; other sections,
    /// keys and comments (`#`, `;`) are skipped.
    pub fn parse(text: &str) -> Self {
        let mut p = Mke2fsProfile { defaults: Fields::default(), types: BTreeMap::new() };
        let mut section = String::new();
        // The open stanza of [fs_types], and how deep the braces are
        // (nested subsections, as [options] may have, are skipped).
        let mut stanza: Option<String> = None;
        let mut depth = 0usize;
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if depth == 0 && line.starts_with('[') {
                section = line.trim_matches(|c| c == '[' || c == ']').trim().to_string();
                continue;
            }
            if line.starts_with('}') {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    stanza = None;
                }
                continue;
            }
            let Some((key, value)) = line.split_once('=') else { continue };
            let (key, value) = (key.trim(), value.trim());
            if value.starts_with('{') {
                depth += 1;
                if depth == 1 && section == "fs_types" {
                    stanza = Some(key.to_string());
                }
                continue;
            }
            match (&stanza, depth, section.as_str()) {
                (None, 0, "defaults") => p.defaults.set(key, value),
                (Some(name), 1, _) => p.types.entry(name.clone()).or_default().set(key, value),
                _ => {}
            }
        }
        p
    }

    /// mke2fs's size class of a device of `size` bytes: floppy below
    /// 3 MiB, small below 512 MiB, default below 4 TiB, big below 16 TiB,
    /// else huge.
    pub fn size_type(size: u64) -> &'static str {
        const MIB: u64 = 1 << 20;
        match size {
            s if s < 3 * MIB => "floppy",
            s if s < 512 * MIB => "small",
            s if s < 4 << 40 => "default",
            s if s < 16 << 40 => "big",
            _ => "huge",
        }
    }

    /// The defaults for `fs_type` (ext4, ext3, ext2) at `size` bytes: as
    /// mke2fs, `[defaults]` overridden by the type's stanza, then by the
    /// size class's; a block size of -1 is the page size.
    pub fn defaults(&self, fs_type: &str, size: u64) -> SizeDefaults {
        let mut f = self.defaults;
        for t in [fs_type, Self::size_type(size)] {
            if let Some(s) = self.types.get(t) {
                f.blocksize = s.blocksize.or(f.blocksize);
                f.inode_size = s.inode_size.or(f.inode_size);
                f.inode_ratio = s.inode_ratio.or(f.inode_ratio);
            }
        }
        let block_size = match f.blocksize {
            Some(-1) => page_size(),
            // mke2fs's fallback, and what a nonsense value gets; the
            // layout refuses sizes that are not a power of two.
            Some(b) if b > 0 => u32::try_from(b).unwrap_or(4096),
            _ => 4096,
        };
        // Without one in the profile: 256, e2fsprogs 1.47's default.
        let inode_size = f.inode_size.and_then(|v| u16::try_from(v).ok()).filter(|&v| v > 0).unwrap_or(256);
        let inode_ratio = f.inode_ratio.and_then(|v| u64::try_from(v).ok()).filter(|&v| v > 0).unwrap_or(8192);
        SizeDefaults { block_size, inode_size, inode_ratio }
    }
}

fn page_size() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u32::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_size_classes() {
        let p = Mke2fsProfile::builtin();
        let t = 1u64 << 40;
        let d = |size| {
            let s = p.defaults("ext4", size);
            (s.block_size, s.inode_size, s.inode_ratio)
        };
        assert_eq!(d(2 << 20), (1024, 256, 8192));
        assert_eq!(d(3 << 20), (1024, 256, 4096));
        assert_eq!(d(512 << 20), (4096, 256, 16384));
        assert_eq!(d(4 * t - 1), (4096, 256, 16384));
        assert_eq!(d(4 * t), (4096, 256, 32768));
        assert_eq!(d(16 * t), (4096, 256, 65536));
    }

    #[test]
    fn parses_stanzas_and_skips_the_rest() {
        let p = Mke2fsProfile::parse(
            "# comment\n[defaults]\n\tinode_size = 128\n\tbase_features = a,b\n[fs_types]\n\text4 = {\n\t\tfeatures = x\n\t\tinode_ratio = 1234\n\t}\n\
             \tsmall = {\n\t\tblocksize = 2048\n\t\tinode_size = 512\n\t}\n\thurd = {\n\t\tblocksize = -1\n\t}\n[options]\n\tfoo = {\n\t\tinode_size = 9\n\t}\n",
        );
        assert_eq!(p.defaults("ext4", 1 << 30), SizeDefaults { block_size: 4096, inode_size: 128, inode_ratio: 1234 });
        assert_eq!(
            p.defaults("ext4", 100 << 20),
            SizeDefaults { block_size: 2048, inode_size: 512, inode_ratio: 1234 }
        );
        assert_eq!(p.defaults("ext2", 1 << 30).inode_ratio, 8192);
        assert_eq!(p.defaults("hurd", 1 << 30).block_size, page_size());
    }
}
