//! `uext4 ls`: list a directory (or show one file), optionally long and recursive.

use crate::util::{
    describe, fs_err, ls_time, mode_string, now, print_json, report, shown, CliResult, JsonInode, JsonName, JsonTarget,
};
use std::collections::HashSet;
use std::io::Write;
use uext4::{FileType, Filesystem, Stat};

/// Options of `uext4 ls`.
#[derive(Debug, Clone, Copy, Default)]
pub struct LsOpts {
    /// `-l`: long format.
    pub long: bool,
    /// `-R`: recurse into subdirectories.
    pub recursive: bool,
    /// `-a`: show "." and "..".
    pub all: bool,
}

/// One line to print.
struct Row {
    name: Vec<u8>,
    stat: Option<Stat>,
    target: Option<Vec<u8>>,
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if !p.ends_with(b"/") {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// Reads a symlink's target for `-l`; reports and shows `?` on failure.
fn link_target(fs: &Filesystem, st: &Stat, path: &[u8]) -> Option<Vec<u8>> {
    if st.file_type != FileType::Symlink {
        return None;
    }
    match fs.readlink(st.ino) {
        Ok(t) => Some(t),
        Err(e) => {
            report(&describe(&shown(path), &e));
            Some(b"?".to_vec())
        }
    }
}

fn size_field(st: &Stat) -> Result<String, (String, String)> {
    match st.file_type {
        FileType::CharDevice | FileType::BlockDevice => Err((st.rdev.0.to_string(), st.rdev.1.to_string())),
        _ => Ok(st.size.to_string()),
    }
}

/// Prints rows in `ls -l` format, columns aligned like GNU ls.
fn print_long(rows: &[Row], now: i64, out: &mut impl Write) -> CliResult {
    let stats: Vec<(&Row, &Stat)> = rows.iter().filter_map(|r| r.stat.as_ref().map(|s| (r, s))).collect();
    let w = |f: &dyn Fn(&Stat) -> usize| stats.iter().map(|(_, s)| f(s)).max().unwrap_or(0);
    let nlink_w = w(&|s| s.nlink.to_string().len());
    let uid_w = w(&|s| s.uid.to_string().len());
    let gid_w = w(&|s| s.gid.to_string().len());
    let maj_w = w(&|s| size_field(s).err().map_or(0, |(m, _)| m.len()));
    let min_w = w(&|s| size_field(s).err().map_or(0, |(_, m)| m.len()));
    let dev_w = if maj_w > 0 { maj_w + 2 + min_w } else { 0 };
    let size_w = w(&|s| size_field(s).map_or(0, |v| v.len())).max(dev_w);
    for (row, st) in stats {
        let size = match size_field(st) {
            Ok(v) => format!("{v:>size_w$}"),
            Err((maj, min)) => {
                let pad = maj_w + size_w.saturating_sub(dev_w);
                format!("{maj:>pad$}, {min:>min_w$}")
            }
        };
        write!(
            out,
            "{} {:>nlink_w$} {:>uid_w$} {:>gid_w$} {} {} ",
            mode_string(st.mode),
            st.nlink,
            st.uid,
            st.gid,
            size,
            ls_time(st.mtime.sec, now)
        )?;
        out.write_all(&row.name)?;
        if let Some(t) = &row.target {
            out.write_all(b" -> ")?;
            out.write_all(t)?;
        }
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// The inode PATH names and its metadata. Like ls: a symlink named on the
/// command line is followed unless -l (or when written with a trailing
/// slash); a dangling one is shown as is.
fn operand(fs: &Filesystem, path: &[u8], opts: LsOpts) -> CliResult<(u32, Stat)> {
    let ino = fs.resolve(path).map_err(|e| fs_err(&shown(path), e))?;
    let st = fs.stat(ino).map_err(|e| fs_err(&shown(path), e))?;
    if st.file_type == FileType::Symlink && (!opts.long || path.ends_with(b"/")) {
        if let Ok(t) = fs.resolve_follow(path) {
            if let Ok(s) = fs.stat(t) {
                return Ok((t, s));
            }
        }
    }
    Ok((ino, st))
}

/// Runs `uext4 ls`.
pub fn run(fs: &Filesystem, path: &[u8], opts: LsOpts, out: &mut impl Write) -> CliResult {
    let now = now();
    let (ino, st) = operand(fs, path, opts)?;
    if st.file_type != FileType::Directory {
        let target = if opts.long { link_target(fs, &st, path) } else { None };
        let row = Row { name: path.to_vec(), stat: Some(st), target };
        if opts.long {
            print_long(&[row], now, out)?;
        } else {
            out.write_all(&row.name)?;
            out.write_all(b"\n")?;
        }
        return Ok(());
    }

    let mut stack: Vec<(Vec<u8>, u32)> = vec![(path.to_vec(), ino)];
    let mut visited: HashSet<u32> = HashSet::from([ino]);
    let mut first = true;
    while let Some((dpath, dino)) = stack.pop() {
        if opts.recursive {
            if !first {
                out.write_all(b"\n")?;
            }
            out.write_all(&dpath)?;
            out.write_all(b":\n")?;
        }
        first = false;
        let entries = match fs.read_dir_all(dino) {
            Ok(e) => e,
            Err(e) => {
                out.flush()?;
                report(&describe(&shown(&dpath), &e));
                continue;
            }
        };
        let mut entries: Vec<_> =
            entries.into_iter().filter(|e| opts.all || (e.name != b"." && e.name != b"..")).collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let mut rows = Vec::with_capacity(entries.len());
        let mut subdirs = Vec::new();
        for e in entries {
            let epath = join(&dpath, &e.name);
            let need_stat = opts.long || (opts.recursive && e.file_type.is_none());
            let stat = if need_stat {
                match fs.stat(e.ino) {
                    Ok(s) => Some(s),
                    Err(err) => {
                        out.flush()?;
                        report(&describe(&shown(&epath), &err));
                        None
                    }
                }
            } else {
                None
            };
            let is_dir = match &stat {
                Some(s) => s.file_type == FileType::Directory,
                None => e.file_type == Some(FileType::Directory),
            };
            if opts.recursive && is_dir && e.name != b"." && e.name != b".." {
                if visited.insert(e.ino) {
                    subdirs.push((epath.clone(), e.ino));
                } else {
                    report(&format!(
                        "{}: directory inode {} already listed (loop in the image), skipped",
                        shown(&epath),
                        e.ino
                    ));
                }
            }
            let target = match &stat {
                Some(s) if opts.long => link_target(fs, s, &epath),
                _ => None,
            };
            rows.push(Row { name: e.name, stat, target });
        }
        if opts.long {
            let total: u64 = rows.iter().filter_map(|r| r.stat.as_ref()).map(|s| s.blocks.div_ceil(2)).sum();
            writeln!(out, "total {total}")?;
            print_long(&rows, now, out)?;
        } else {
            for r in &rows {
                out.write_all(&r.name)?;
                out.write_all(b"\n")?;
            }
        }
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(())
}

/// `ls --json`: PATH's listing, flat like the text output (each listed
/// directory once, with its path), so that no depth of tree makes the
/// document (or its writer) nest deeper.
#[derive(serde::Serialize)]
struct LsJson {
    /// PATH as given.
    path: String,
    /// The directories listed: PATH first, then with -R every subdirectory,
    /// depth-first in name order (as the text output). Empty if PATH is not
    /// a directory.
    directories: Vec<DirJson>,
    /// PATH itself when it is not a directory, else `null`.
    file: Option<EntryJson>,
}

/// One listed directory.
#[derive(serde::Serialize)]
struct DirJson {
    /// Its path inside the image.
    #[serde(flatten)]
    path: PathJson,
    ino: u32,
    /// Its entries sorted by name bytes ("." and ".." only with -a).
    entries: Vec<EntryJson>,
}

/// A path (any bytes): as text, plus the raw bytes if not valid UTF-8.
#[derive(serde::Serialize)]
struct PathJson {
    path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    path_bytes: Option<Vec<u8>>,
}

impl PathJson {
    fn new(p: &[u8]) -> Self {
        let n = JsonName::new(p);
        PathJson { path: n.name, path_bytes: n.name_bytes }
    }
}

/// One entry: its name and its inode's fields.
#[derive(serde::Serialize)]
struct EntryJson {
    #[serde(flatten)]
    name: JsonName,
    #[serde(flatten)]
    inode: EntryInode,
    /// A symlink's target.
    #[serde(flatten)]
    target: Option<JsonTarget>,
}

/// The inode of an entry, or why it could not be read (also reported on
/// stderr, and the exit status is 1).
#[derive(serde::Serialize)]
#[serde(untagged)]
enum EntryInode {
    Ok(JsonInode),
    Failed { ino: u32, error: String },
}

/// The JSON entry for `name` (inode `ino`, image path `path`), and its
/// file type if its inode could be read.
fn entry_json(fs: &Filesystem, name: &[u8], ino: u32, path: &[u8]) -> (EntryJson, Option<FileType>) {
    let (inode, target, ft) = match fs.stat(ino) {
        Ok(st) => {
            let target = link_target(fs, &st, path).map(|t| JsonTarget::new(&t));
            (EntryInode::Ok(JsonInode::from(&st)), target, Some(st.file_type))
        }
        Err(e) => {
            let error = describe(&shown(path), &e);
            report(&error);
            (EntryInode::Failed { ino, error }, None, None)
        }
    };
    (EntryJson { name: JsonName::new(name), inode, target }, ft)
}

/// Runs `uext4 ls --json` (every entry is stat'ed, as with -l).
pub fn run_json(fs: &Filesystem, path: &[u8], opts: LsOpts, out: &mut impl Write) -> CliResult {
    let (ino, st) = operand(fs, path, opts)?;
    let mut doc = LsJson { path: shown(path), directories: Vec::new(), file: None };
    if st.file_type != FileType::Directory {
        doc.file = Some(entry_json(fs, path, ino, path).0);
        return print_json(&doc, out);
    }
    let mut stack: Vec<(Vec<u8>, u32)> = vec![(path.to_vec(), ino)];
    let mut visited: HashSet<u32> = HashSet::from([ino]);
    while let Some((dpath, dino)) = stack.pop() {
        let mut entries = match fs.read_dir_all(dino) {
            Ok(e) => e,
            Err(e) => {
                report(&describe(&shown(&dpath), &e));
                continue;
            }
        };
        entries.retain(|e| opts.all || (e.name != b"." && e.name != b".."));
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let mut rows = Vec::with_capacity(entries.len());
        let mut subdirs = Vec::new();
        for e in entries {
            let epath = join(&dpath, &e.name);
            let (row, ft) = entry_json(fs, &e.name, e.ino, &epath);
            if opts.recursive && ft == Some(FileType::Directory) && e.name != b"." && e.name != b".." {
                if visited.insert(e.ino) {
                    subdirs.push((epath, e.ino));
                } else {
                    report(&format!(
                        "{}: directory inode {} already listed (loop in the image), skipped",
                        shown(&epath),
                        e.ino
                    ));
                }
            }
            rows.push(row);
        }
        doc.directories.push(DirJson { path: PathJson::new(&dpath), ino: dino, entries: rows });
        stack.extend(subdirs.into_iter().rev());
    }
    print_json(&doc, out)
}
