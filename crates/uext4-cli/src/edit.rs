//! The small commands that change an image: `mkdir`, `rm`, `mv`, `ln`,
//! `truncate` and `fallocate`, with the semantics of their coreutils and
//! util-linux namesakes.

use crate::util::{describe, fs_err, report, shown, CliError, CliResult};
use crate::write::{basename, existing_dir, is_fatal, join_shown, locate, lookup_opt, owner, split, Loc};
use std::collections::HashSet;
use uext4::inode_api::{FallocMode, RenameFlags, SetAttr};
use uext4::{FileType, Filesystem};

/// Mode of the directories `mkdir` makes.
const DIR_MODE: u16 = 0o755;
/// Mode of the files `truncate` and `fallocate` create.
const FILE_MODE: u16 = 0o644;

/// Runs `one` for every path: errors are reported and the next path is
/// tried, except errors that leave the image unusable, which stop.
fn each(paths: &[Vec<u8>], mut one: impl FnMut(&[u8]) -> Result<(), (String, bool)>) -> CliResult {
    for p in paths {
        match one(p) {
            Ok(()) => {}
            Err((m, true)) => return Err(CliError::Msg(m)),
            Err((m, false)) => report(&m),
        }
    }
    Ok(())
}

/// A library error about `what`, with whether it is fatal.
fn lib(what: &str, e: uext4::Error) -> (String, bool) {
    (describe(what, &e), is_fatal(&e))
}

fn cli(e: CliError) -> (String, bool) {
    match e {
        CliError::Msg(m) => (m, false),
        CliError::BrokenPipe => ("broken pipe".into(), true),
    }
}

/// `uext4 mkdir [-p]`.
pub fn mkdir(fs: &Filesystem, paths: &[Vec<u8>], parents: bool) -> CliResult {
    let (uid, gid) = owner();
    each(paths, |path| {
        if parents {
            return mkdir_parents(fs, path, uid, gid);
        }
        let loc = locate(fs, path).map_err(cli)?;
        fs.mkdir(loc.parent, &loc.name, DIR_MODE, uid, gid).map_err(|e| lib(&loc.shown, e))?;
        Ok(())
    })
}

/// `mkdir -p`: every missing component is made; existing directories
/// (also through symlinks) are fine.
fn mkdir_parents(fs: &Filesystem, path: &[u8], uid: u32, gid: u32) -> Result<(), (String, bool)> {
    let mut cur = fs.root();
    let mut prefix: Vec<u8> = if path.starts_with(b"/") { b"/".to_vec() } else { Vec::new() };
    for comp in path.split(|&c| c == b'/').filter(|c| !c.is_empty() && *c != b".") {
        if !prefix.is_empty() && !prefix.ends_with(b"/") {
            prefix.push(b'/');
        }
        prefix.extend_from_slice(comp);
        let here = shown(&prefix);
        cur = match lookup_opt(fs, cur, comp).map_err(|e| lib(&here, e))? {
            Some(_) => match existing_dir(fs, &prefix).map_err(cli)? {
                Some(d) => d,
                None => return Err((format!("{here}: file exists and is not a directory"), false)),
            },
            None => fs.mkdir(cur, comp, DIR_MODE, uid, gid).map_err(|e| lib(&here, e))?.ino,
        };
    }
    Ok(())
}

/// `uext4 rm [-r] [-f]`.
pub fn rm(fs: &Filesystem, paths: &[Vec<u8>], recursive: bool, force: bool) -> CliResult {
    each(paths, |path| {
        let name = shown(path);
        if split(path).is_none() {
            return Err((format!("{name}: refusing to remove the root directory"), false));
        }
        let loc = match locate(fs, path) {
            Ok(l) => l,
            Err(_) if force && matches!(fs.resolve(path), Err(uext4::Error::NotFound(_))) => return Ok(()),
            Err(e) => return Err(cli(e)),
        };
        let Some(ino) = lookup_opt(fs, loc.parent, &loc.name).map_err(|e| lib(&name, e))? else {
            if force {
                return Ok(());
            }
            return Err((format!("{name}: no such file or directory"), false));
        };
        if ino == fs.root() {
            return Err((format!("{name}: refusing to remove the root directory"), false));
        }
        let st = fs.stat(ino).map_err(|e| lib(&name, e))?;
        if st.file_type != FileType::Directory {
            if loc.dir_only {
                return Err((format!("{name}: not a directory"), false));
            }
            return fs.unlink(loc.parent, &loc.name).map_err(|e| lib(&name, e));
        }
        if !recursive {
            return Err((format!("{name}: is a directory (use -r)"), false));
        }
        remove_tree(fs, &loc, ino)
    })
}

/// Removes directory `ino` (named `loc`) and everything under it,
/// depth-first, without recursion.
fn remove_tree(fs: &Filesystem, loc: &Loc, ino: u32) -> Result<(), (String, bool)> {
    enum Step {
        /// Empty directory `ino`, then queue its removal.
        Enter { parent: u32, name: Vec<u8>, ino: u32, path: String },
        /// Remove the (now empty) directory `name` from `parent`.
        Rmdir { parent: u32, name: Vec<u8>, path: String },
    }
    let mut seen = HashSet::new();
    let mut steps = vec![Step::Enter {
        parent: loc.parent,
        name: loc.name.clone(),
        ino,
        path: loc.shown.trim_end_matches('/').into(),
    }];
    while let Some(step) = steps.pop() {
        match step {
            Step::Enter { parent, name, ino, path } => {
                if !seen.insert(ino) {
                    return Err((format!("{path}: directory inode {ino} seen twice (loop in the image)"), false));
                }
                let entries = fs.read_dir_all(ino).map_err(|e| lib(&path, e))?;
                steps.push(Step::Rmdir { parent, name, path: path.clone() });
                for e in entries {
                    if e.name == b"." || e.name == b".." {
                        continue;
                    }
                    let child = join_shown(&path, &e.name);
                    let ft = match e.file_type {
                        Some(t) => t,
                        None => fs.stat(e.ino).map_err(|err| lib(&child, err))?.file_type,
                    };
                    if ft == FileType::Directory {
                        steps.push(Step::Enter { parent: ino, name: e.name, ino: e.ino, path: child });
                    } else {
                        fs.unlink(ino, &e.name).map_err(|err| lib(&child, err))?;
                    }
                }
            }
            Step::Rmdir { parent, name, path } => fs.rmdir(parent, &name).map_err(|e| lib(&path, e))?,
        }
    }
    Ok(())
}

/// Where a new name goes: into DEST if it is an existing directory (under
/// `name`), else at DEST itself.
fn target(fs: &Filesystem, dest: &[u8], name: Option<&[u8]>) -> CliResult<Loc> {
    if let Some(dir) = existing_dir(fs, dest)? {
        let Some(name) = name else {
            return Err(CliError::msg(format!("{}: is an existing directory", shown(dest))));
        };
        return Ok(Loc { parent: dir, name: name.to_vec(), shown: join_shown(&shown(dest), name), dir_only: false });
    }
    locate(fs, dest)
}

/// `uext4 mv`: rename; into DEST if it is an existing directory.
pub fn mv(fs: &Filesystem, src: &[u8], dest: &[u8]) -> CliResult {
    let from = locate(fs, src)?;
    if lookup_opt(fs, from.parent, &from.name).map_err(|e| fs_err(&from.shown, e))?.is_none() {
        return Err(CliError::msg(format!("{}: no such file or directory", from.shown)));
    }
    let to = target(fs, dest, Some(&from.name))?;
    fs.inodes()
        .rename(from.parent, &from.name, to.parent, &to.name, RenameFlags::default())
        .map_err(|e| fs_err(&format!("cannot move {} to {}", from.shown, to.shown), e))
}

/// `uext4 ln [-s]`: a hard link to TARGET (a path in the image, a final
/// symlink not followed), or a symlink holding the text TARGET. If
/// LINKPATH is an existing directory the link goes into it under
/// TARGET's last component.
pub fn ln(fs: &Filesystem, target_path: &[u8], link: &[u8], symbolic: bool) -> CliResult {
    let to = target(fs, link, basename(target_path))?;
    if symbolic {
        let (uid, gid) = owner();
        fs.inodes().symlink(to.parent, &to.name, target_path, uid, gid).map_err(|e| match e {
            uext4::Error::NameTooLong(_) if to.name.len() <= 255 => {
                CliError::msg(format!("{}: symlink target too long ({} bytes)", to.shown, target_path.len()))
            }
            e => fs_err(&to.shown, e),
        })?;
        return Ok(());
    }
    let t = shown(target_path);
    let ino = fs.resolve(target_path).map_err(|e| fs_err(&t, e))?;
    if fs.stat(ino).map_err(|e| fs_err(&t, e))?.file_type == FileType::Directory {
        return Err(CliError::msg(format!("{t}: hard link not allowed for directory")));
    }
    fs.link(ino, to.parent, &to.name).map_err(|e| fs_err(&to.shown, e))?;
    Ok(())
}

/// The regular file `path` names (symlinks followed), created (mode 0644,
/// owned by the caller) if it does not exist and `create` is set.
fn open_file(fs: &Filesystem, path: &[u8], create: bool) -> CliResult<Option<u32>> {
    let name = shown(path);
    match fs.resolve_follow(path) {
        Ok(ino) => Ok(Some(ino)),
        Err(uext4::Error::NotFound(_)) if !create => Ok(None),
        Err(uext4::Error::NotFound(_)) => {
            let loc = locate(fs, path)?;
            if loc.dir_only {
                return Err(CliError::msg(format!("{name}: is a directory")));
            }
            let (uid, gid) = owner();
            Ok(Some(fs.create(loc.parent, &loc.name, FILE_MODE, uid, gid).map_err(|e| fs_err(&name, e))?.ino))
        }
        Err(e) => Err(fs_err(&name, e)),
    }
}

/// `uext4 truncate -s SIZE [-c]`: shrinks or extends the file (creating it
/// unless `no_create`).
pub fn truncate(fs: &Filesystem, path: &[u8], size: u64, no_create: bool) -> CliResult {
    let Some(ino) = open_file(fs, path, !no_create)? else { return Ok(()) };
    fs.setattr(ino, SetAttr { size: Some(size), ..Default::default() }).map_err(|e| fs_err(&shown(path), e))?;
    Ok(())
}

/// The modes of `uext4 fallocate`.
#[derive(Debug, Clone, Copy)]
pub struct FallocOpts {
    /// -k: do not change the file size.
    pub keep_size: bool,
    /// -p: deallocate the range (implies -k).
    pub punch_hole: bool,
    /// -z: make the range read as zeros.
    pub zero_range: bool,
    /// -c: remove the range, moving what follows down.
    pub collapse_range: bool,
    /// -i: insert a hole, moving what follows up.
    pub insert_range: bool,
}

/// `uext4 fallocate`, like util-linux fallocate (the file is created if
/// missing).
pub fn fallocate(fs: &Filesystem, path: &[u8], opts: FallocOpts, offset: u64, len: u64) -> CliResult {
    let name = shown(path);
    if opts.punch_hole && opts.zero_range {
        return Err(CliError::msg("--punch-hole and --zero-range cannot be combined"));
    }
    if len == 0 {
        return Err(CliError::msg("invalid length value specified (0)"));
    }
    let end = offset.checked_add(len).ok_or_else(|| CliError::msg("offset + length overflows"))?;
    let Some(ino) = open_file(fs, path, true)? else { return Ok(()) };
    let st = fs.stat(ino).map_err(|e| fs_err(&name, e))?;
    match st.file_type {
        FileType::Regular => {}
        FileType::Directory => return Err(CliError::msg(format!("{name}: is a directory"))),
        _ => return Err(CliError::msg(format!("{name}: not a regular file"))),
    }
    let err = |e| fs_err(&name, e);
    if opts.collapse_range || opts.insert_range {
        let mode = if opts.collapse_range { FallocMode::CollapseRange } else { FallocMode::InsertRange };
        fs.fallocate(ino, mode, offset, len).map_err(err)?;
    } else if opts.punch_hole {
        fs.fallocate(ino, FallocMode::PunchHole, offset, len).map_err(err)?;
    } else if opts.zero_range && opts.keep_size {
        // Zero what lies inside the file, allocate what lies beyond it.
        if offset < st.size {
            fs.fallocate(ino, FallocMode::ZeroRange, offset, end.min(st.size) - offset).map_err(err)?;
        }
        if end > st.size {
            let from = offset.max(st.size);
            fs.fallocate(ino, FallocMode::KeepSize, from, end - from).map_err(err)?;
        }
    } else {
        let mode = match (opts.zero_range, opts.keep_size) {
            (true, _) => FallocMode::ZeroRange,
            (false, true) => FallocMode::KeepSize,
            (false, false) => FallocMode::Allocate,
        };
        fs.fallocate(ino, mode, offset, len).map_err(err)?;
    }
    Ok(())
}
