//! Shared parts of the commands that change an image: opening it
//! read-write with a clean unmount at the end, locating the parent
//! directory and last name of a path inside the image, and the owner of
//! the nodes the commands create.

use crate::util::{describe, fs_err, opened, shown, CliError, CliResult};
use std::path::Path;
use uext4::{FileType, Filesystem};

/// Opens an image read-write (replaying its journal first, if needed) and
/// prints its notices as warnings.
fn open_rw(image: &Path, opts: uext4::MountOptions) -> CliResult<Filesystem> {
    opened(image, Filesystem::open_with(image, uext4::MountOptions { write: true, ..opts }))
}

/// Runs `f` on the image opened read-write, then unmounts it cleanly
/// (journal committed and checkpointed) whether or not `f` failed. The
/// first error wins; an unmount failure after another error is added to
/// the same line.
pub fn with_rw<T>(image: &Path, f: impl FnOnce(&Filesystem) -> CliResult<T>) -> CliResult<T> {
    with_rw_using(image, uext4::MountOptions::default(), f)
}

/// [`with_rw`] with mount options `opts` (made read-write).
pub fn with_rw_using<T>(
    image: &Path,
    opts: uext4::MountOptions,
    f: impl FnOnce(&Filesystem) -> CliResult<T>,
) -> CliResult<T> {
    let mut fs = open_rw(image, opts)?;
    let r = f(&fs);
    let u = fs.unmount().map_err(|e| describe(&format!("{}: unmount", image.display()), &e));
    match (r, u) {
        (Ok(v), Ok(())) => Ok(v),
        (Ok(_), Err(m)) => Err(CliError::Msg(m)),
        (Err(CliError::Msg(first)), Err(m)) => Err(CliError::Msg(format!("{first} (and {m})"))),
        (Err(e), _) => Err(e),
    }
}

/// Errors after which nothing more should be tried on the image: the
/// device failed, it is full, or its metadata is damaged.
pub fn is_fatal(e: &uext4::Error) -> bool {
    use uext4::Error as E;
    matches!(e, E::Io(_) | E::NoSpace(_) | E::Corrupt { .. } | E::Checksum { .. } | E::ReadOnly(_) | E::NotExt4(_))
}

/// Owner of the nodes `mkdir`, `ln -s`, `truncate` and `fallocate` create:
/// the caller, as if the image were mounted.
pub fn owner() -> (u32, u32) {
    // SAFETY: geteuid and getegid have no preconditions and cannot fail.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// `path` without its trailing slashes (the root stays "/").
fn trim_slashes(path: &[u8]) -> &[u8] {
    let mut end = path.len();
    while end > 1 && path[end - 1] == b'/' {
        end -= 1;
    }
    &path[..end]
}

/// The last component of a path (host or image, as bytes), `None` for the
/// root, "", "." or "..".
pub fn basename(path: &[u8]) -> Option<&[u8]> {
    let last = path.split(|&c| c == b'/').rfind(|c| !c.is_empty())?;
    (last != b"." && last != b"..").then_some(last)
}

/// Splits an image path into its parent path and last name; `None` for the
/// root directory. The name may be "." or ".." (callers refuse those).
pub fn split(path: &[u8]) -> Option<(&[u8], &[u8])> {
    let t = trim_slashes(path);
    if t.is_empty() || t == b"/" {
        return None;
    }
    Some(match t.iter().rposition(|&c| c == b'/') {
        Some(0) => (&b"/"[..], &t[1..]),
        Some(i) => (&t[..i], &t[i + 1..]),
        None => (&b"/"[..], t),
    })
}

/// A name in a directory of the image.
#[derive(Debug, Clone)]
pub struct Loc {
    /// The directory's inode.
    pub parent: u32,
    /// The name in it (not ".", "..", empty or containing '/').
    pub name: Vec<u8>,
    /// The path as given, for messages.
    pub shown: String,
    /// The path ended with a slash: it must name a directory.
    pub dir_only: bool,
}

/// Finds the directory that holds `path`'s last component (symlinks in the
/// parent path are followed). Refuses the root, "." and "..".
pub fn locate(fs: &Filesystem, path: &[u8]) -> CliResult<Loc> {
    let name = shown(path);
    let Some((parent, last)) = split(path) else {
        return Err(CliError::msg(if path.is_empty() {
            "empty path".to_string()
        } else {
            format!("{name}: is the root directory")
        }));
    };
    if last == b"." || last == b".." {
        return Err(CliError::msg(format!("{name}: refusing to operate on \".\" or \"..\"")));
    }
    let pino = fs.resolve_follow(parent).map_err(|e| fs_err(&name, e))?;
    Ok(Loc { parent: pino, name: last.to_vec(), shown: name, dir_only: path.len() > 1 && path.ends_with(b"/") })
}

/// Looks `name` up in directory `dir`: `None` if it does not exist.
pub fn lookup_opt(fs: &Filesystem, dir: u32, name: &[u8]) -> uext4::Result<Option<u32>> {
    match fs.lookup(dir, name) {
        Ok(ino) => Ok(Some(ino)),
        Err(uext4::Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The inode `path` names after following symlinks, if it is a directory
/// (`None` if it does not exist or is something else).
pub fn existing_dir(fs: &Filesystem, path: &[u8]) -> CliResult<Option<u32>> {
    match fs.resolve_follow(path) {
        Ok(ino) => {
            let st = fs.stat(ino).map_err(|e| fs_err(&shown(path), e))?;
            Ok((st.file_type == FileType::Directory).then_some(ino))
        }
        Err(uext4::Error::NotFound(_) | uext4::Error::NotDir(_) | uext4::Error::Loop(_)) => Ok(None),
        Err(e) => Err(fs_err(&shown(path), e)),
    }
}

/// Joins an image path and a name, for messages.
pub fn join_shown(dir: &str, name: &[u8]) -> String {
    let n = shown(name);
    if dir.is_empty() || dir.ends_with('/') {
        format!("{dir}{n}")
    } else {
        format!("{dir}/{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits() {
        assert_eq!(split(b"/a/b"), Some((&b"/a"[..], &b"b"[..])));
        assert_eq!(split(b"/a/b//"), Some((&b"/a"[..], &b"b"[..])));
        assert_eq!(split(b"a"), Some((&b"/"[..], &b"a"[..])));
        assert_eq!(split(b"/a"), Some((&b"/"[..], &b"a"[..])));
        assert_eq!(split(b"a/."), Some((&b"a"[..], &b"."[..])));
        assert_eq!(split(b"/"), None);
        assert_eq!(split(b"//"), None);
        assert_eq!(split(b""), None);
    }

    #[test]
    fn basenames() {
        assert_eq!(basename(b"/x/y"), Some(&b"y"[..]));
        assert_eq!(basename(b"y/"), Some(&b"y"[..]));
        assert_eq!(basename(b"/"), None);
        assert_eq!(basename(b".."), None);
        assert_eq!(basename(b"a/."), None);
    }

    #[test]
    fn joins() {
        assert_eq!(join_shown("/", b"a"), "/a");
        assert_eq!(join_shown("/d", b"a"), "/d/a");
        assert_eq!(join_shown("d/", b"a"), "d/a");
    }
}
