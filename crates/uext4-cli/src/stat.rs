//! `uext4 stat`: every inode field, the block mapping and the xattr names.

use crate::util::{
    describe, fs_err, full_time, inode_flag_names, mode_string, print_json, report, shown, type_name, CliResult,
    JsonInode, JsonName, JsonTarget,
};
use std::io::Write;
use uext4::inode_api::{MapKind, Mapping};
use uext4::{FileType, Filesystem, Stat};

/// True if the inode's i_block holds data block pointers (an extent tree
/// or block map) rather than a device number or an inline symlink target.
fn maps_blocks(st: &Stat) -> bool {
    match st.file_type {
        FileType::Regular | FileType::Directory => true,
        FileType::Symlink => {
            let ea = if st.file_acl != 0 { u64::from(st.blksize / 512) } else { 0 };
            !(st.size < 60 && st.blocks.saturating_sub(ea) == 0)
        }
        _ => false,
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// One `Label:  value` line.
fn kv(out: &mut impl Write, k: &str, v: &dyn std::fmt::Display) -> std::io::Result<()> {
    writeln!(out, "{:<13}{}", format!("{k}:"), v)
}

/// What both forms of `uext4 stat` show, read once. A part that cannot be
/// read (a symlink's target, the block map, the xattr names) is reported
/// on stderr as one line and left out; the inode itself must be readable.
struct Inspected {
    /// The path as given, for display.
    name: String,
    st: Stat,
    /// A symlink's target.
    target: Option<Vec<u8>>,
    /// The block map of an inode that maps blocks (see [`maps_blocks`]).
    extents: Option<Vec<Mapping>>,
    xattrs: Option<Vec<Vec<u8>>>,
}

/// The value of `r`, or None with the error about `what` reported.
fn part<T>(what: &str, r: uext4::Result<T>) -> Option<T> {
    r.map_err(|e| report(&describe(what, &e))).ok()
}

fn inspect(fs: &Filesystem, path: &[u8], follow: bool) -> CliResult<Inspected> {
    let name = shown(path);
    let ino = if follow { fs.resolve_follow(path) } else { fs.resolve(path) }.map_err(|e| fs_err(&name, e))?;
    let st = fs.stat(ino).map_err(|e| fs_err(&name, e))?;
    let target = (st.file_type == FileType::Symlink).then(|| part(&name, fs.readlink(ino))).flatten();
    let extents = maps_blocks(&st).then(|| part(&format!("{name}: block map"), fs.extents(ino))).flatten();
    let xattrs = part(&format!("{name}: extended attributes"), fs.list_xattrs(ino));
    Ok(Inspected { name, st, target, extents, xattrs })
}

/// Runs `uext4 stat`.
pub fn run(fs: &Filesystem, path: &[u8], follow: bool, out: &mut impl Write) -> CliResult {
    let Inspected { name, st, target, extents, xattrs } = inspect(fs, path, follow)?;
    match &target {
        Some(t) => kv(out, "File", &format!("{name} -> {}", shown(t)))?,
        None => kv(out, "File", &name)?,
    }
    kv(out, "Inode", &st.ino)?;
    kv(out, "Type", &type_name(st.file_type))?;
    kv(out, "Mode", &format!("{:04o} ({})", st.mode & 0o7777, mode_string(st.mode)))?;
    kv(out, "Links", &st.nlink)?;
    kv(out, "Uid", &st.uid)?;
    kv(out, "Gid", &st.gid)?;
    kv(out, "Size", &st.size)?;
    kv(out, "Blocks", &format!("{} (512-byte units)", st.blocks))?;
    kv(out, "IO Block", &st.blksize)?;
    if matches!(st.file_type, FileType::CharDevice | FileType::BlockDevice) {
        kv(out, "Device", &format!("{}, {} (major, minor)", st.rdev.0, st.rdev.1))?;
    }
    let flag_names = inode_flag_names(st.flags);
    if flag_names.is_empty() {
        kv(out, "Flags", &format!("{:#010x}", st.flags))?;
    } else {
        kv(out, "Flags", &format!("{:#010x} ({})", st.flags, flag_names.join(" ")))?;
    }
    kv(out, "Generation", &st.generation)?;
    kv(out, "Xattr block", &st.file_acl)?;
    kv(out, "Project", &st.projid)?;
    kv(out, "Access", &full_time(st.atime))?;
    kv(out, "Modify", &full_time(st.mtime))?;
    kv(out, "Change", &full_time(st.ctime))?;
    match st.crtime {
        Some(t) => kv(out, "Birth", &full_time(t))?,
        None => kv(out, "Birth", &"-")?,
    }

    if let Some(runs) = extents {
        let blocks: u64 = runs.iter().map(|m| m.len).sum();
        if runs.is_empty() {
            kv(out, "Extents", &"(none)")?;
        } else {
            kv(
                out,
                "Extents",
                &format!("{} run{}, {blocks} block{}", runs.len(), plural(runs.len() as u64), plural(blocks)),
            )?;
        }
        for m in runs {
            let last = m.lblk + m.len.saturating_sub(1);
            let (phys, note) = match m.kind {
                MapKind::Mapped(p) => (p, ""),
                MapKind::Unwritten(p) => (p, ", unwritten"),
                MapKind::Hole => continue,
            };
            writeln!(
                out,
                "  logical {}-{} -> physical {}-{} ({} block{}{note})",
                m.lblk,
                last,
                phys,
                phys + m.len.saturating_sub(1),
                m.len,
                plural(m.len)
            )?;
        }
    }

    match xattrs {
        Some(names) if names.is_empty() => writeln!(out, "{:<13}(none)", "Xattrs:")?,
        Some(names) => {
            writeln!(out, "{:<13}{}", "Xattrs:", names.len())?;
            for n in names {
                out.write_all(b"  ")?;
                out.write_all(&n)?;
                out.write_all(b"\n")?;
            }
        }
        None => {}
    }
    Ok(())
}

/// `stat --json`: the inode's fields, its block runs and xattr names.
#[derive(serde::Serialize)]
struct StatJson {
    /// PATH as given.
    path: String,
    #[serde(flatten)]
    inode: JsonInode,
    /// A symlink's target (only for symlinks).
    #[serde(flatten)]
    target: Option<JsonTarget>,
    /// The mapped block runs, in logical order; `null` for inodes that map
    /// no blocks (devices, FIFOs, sockets, short symlinks) or whose map
    /// could not be read (then an error line goes to stderr).
    extents: Option<Vec<ExtentJson>>,
    /// Extended attribute names; `null` if they could not be read.
    xattrs: Option<Vec<JsonName>>,
}

/// One run of logical blocks mapped to consecutive physical blocks.
#[derive(serde::Serialize)]
struct ExtentJson {
    logical: u64,
    physical: u64,
    len: u64,
    unwritten: bool,
}

/// Runs `uext4 stat --json`.
pub fn run_json(fs: &Filesystem, path: &[u8], follow: bool, out: &mut impl Write) -> CliResult {
    let Inspected { name, st, target, extents, xattrs } = inspect(fs, path, follow)?;
    let target = target.map(|t| JsonTarget::new(&t));
    let extents = extents.map(|runs| {
        runs.iter()
            .filter_map(|m| match m.kind {
                MapKind::Mapped(p) => Some((m, p, false)),
                MapKind::Unwritten(p) => Some((m, p, true)),
                MapKind::Hole => None,
            })
            .map(|(m, physical, unwritten)| ExtentJson {
                logical: m.lblk.get(),
                physical: physical.get(),
                len: m.len,
                unwritten,
            })
            .collect()
    });
    let xattrs = xattrs.map(|names| names.iter().map(|n| JsonName::new(n)).collect());
    print_json(&StatJson { path: name, inode: JsonInode::from(&st), target, extents, xattrs }, out)
}

/// `uext4 stat --extents`: the file's FIEMAP extents in the layout of
/// `filefrag -v` (block units, the same flag names, `eof` on an extent
/// reaching the end of the file), since FIEMAP cannot pass a FUSE mount.
pub fn run_extents(fs: &Filesystem, path: &[u8], follow: bool, out: &mut impl Write) -> CliResult {
    use uext4::inode_api::{FIEMAP_EXTENT_LAST, FIEMAP_EXTENT_MERGED, FIEMAP_EXTENT_UNWRITTEN};
    let name = shown(path);
    let ino = if follow { fs.resolve_follow(path) } else { fs.resolve(path) }.map_err(|e| fs_err(&name, e))?;
    let st = fs.stat(ino).map_err(|e| fs_err(&name, e))?;
    let ext = fs.inodes().fiemap(ino, 0, u64::MAX).map_err(|e| fs_err(&name, e))?;
    let bs = u64::from(fs.block_size());
    let blocks = st.size.div_ceil(bs);
    writeln!(out, "File size of {name} is {} ({blocks} block{} of {bs} bytes)", st.size, plural(blocks))?;
    writeln!(out, " ext:     logical_offset:        physical_offset: length:   expected: flags:")?;
    let mut found = 0u64;
    let mut next_phys = None;
    for (n, e) in ext.iter().enumerate() {
        let (l, p, len) = (e.logical / bs, e.physical / bs, e.length / bs);
        let expected = next_phys.filter(|&x| x != p);
        if next_phys.is_none() || expected.is_some() {
            found += 1;
        }
        next_phys = Some(p + len);
        let mut flags: Vec<&str> = Vec::new();
        for (bit, name) in
            [(FIEMAP_EXTENT_LAST, "last"), (FIEMAP_EXTENT_UNWRITTEN, "unwritten"), (FIEMAP_EXTENT_MERGED, "merged")]
        {
            if e.flags & bit != 0 {
                flags.push(name);
            }
        }
        let mut flags = flags.join(",");
        if e.logical + e.length >= st.size {
            // filefrag appends ",eof" (",eof" alone when no other flag).
            flags.push_str(",eof");
        }
        let expected = expected.map_or_else(|| " ".repeat(11), |x| format!("{x:>10}:"));
        writeln!(
            out,
            "{n:>4}: {l:>8}..{:>8}: {p:>10}..{:>10}: {len:>6}: {expected} {}",
            l + len - 1,
            p + len - 1,
            flags
        )?;
    }
    writeln!(out, "{name}: {found} extent{} found", plural(found))?;
    Ok(())
}
