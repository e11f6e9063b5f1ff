//! `uext4 get`: copy a file, symlink or whole tree out of the image onto the
//! host, keeping modes, times (with nanoseconds), owners (as root), hard
//! links, symlinks, device nodes (as root), FIFOs and extended attributes.

use crate::cat::CHUNK;
use crate::progress::{self, Progress};
use crate::util::{describe, fs_err, report, shown, warn, CliResult};
use std::collections::{HashMap, HashSet};
use std::ffi::{CString, OsStr};
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use uext4::{FileType, Filesystem, Stat, Timestamp};

/// Granularity of the zero check that keeps copies sparse.
const SPARSE_PIECE: usize = 4096;
static ZEROS: [u8; SPARSE_PIECE] = [0; SPARSE_PIECE];

/// What is left to do, in a stack (no recursion, so any depth is fine).
enum Job {
    /// Copy inode `ino` (image path `src`) to `dest`.
    Copy { ino: u32, dest: PathBuf, src: Vec<u8>, top: bool },
    /// A directory's contents are done: apply its owner, xattrs, mode and times.
    Finish { st: Stat, dest: PathBuf, src: Vec<u8> },
}

struct Copier<'a> {
    fs: &'a Filesystem,
    /// Running as root: owners are set and device nodes created.
    root: bool,
    /// Host path of the first copy of each multiply-linked inode.
    links: HashMap<u32, PathBuf>,
    /// Directories already copied (a loop in a corrupt image stops here).
    dirs: HashSet<u32>,
    buf: Vec<u8>,
    progress: Progress,
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if !p.ends_with(b"/") {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// The last component of an image path, `None` for the root, "." or "..".
fn basename(path: &[u8]) -> Option<&[u8]> {
    let last = path.split(|&c| c == b'/').rfind(|c| !c.is_empty() && *c != b".")?;
    (last != b"..").then_some(last)
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))
}

fn dest_err(dest: &Path, e: &io::Error) -> String {
    format!("{}: {e}", dest.display())
}

/// Creates directory `dest` (mode 0700 until its contents are done), or
/// accepts an existing directory to merge into, like `cp -r`.
fn make_dir(dest: &Path, top: bool) -> io::Result<()> {
    match fs::DirBuilder::new().mode(0o700).create(dest) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            // Only DEST itself may be a symlink to a directory; inside the
            // copy nothing is followed.
            let m = if top { fs::metadata(dest) } else { fs::symlink_metadata(dest) }?;
            if m.is_dir() {
                Ok(())
            } else {
                Err(io::Error::new(io::ErrorKind::AlreadyExists, "exists and is not a directory"))
            }
        }
        Err(e) => Err(e),
    }
}

/// Removes an existing non-directory at `dest` (it is replaced, like
/// `cp --remove-destination`); refuses to replace a directory.
fn remove_existing(dest: &Path) -> io::Result<()> {
    match fs::symlink_metadata(dest) {
        Ok(m) if m.is_dir() => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "is an existing directory, not replaced by a non-directory",
        )),
        Ok(_) => fs::remove_file(dest),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Writes `data` at `off`, skipping all-zero 4 KiB pieces so the copy stays sparse.
fn write_sparse(f: &File, data: &[u8], off: u64) -> io::Result<()> {
    let zero = |i: usize| {
        let end = (i + SPARSE_PIECE).min(data.len());
        (data[i..end] == ZEROS[..end - i], end)
    };
    let mut i = 0;
    while i < data.len() {
        let (z, end) = zero(i);
        if z {
            i = end;
            continue;
        }
        let start = i;
        i = end;
        while i < data.len() {
            let (z, end) = zero(i);
            if z {
                break;
            }
            i = end;
        }
        f.write_all_at(&data[start..i], off + start as u64)?;
    }
    Ok(())
}

fn timespec(t: Timestamp) -> libc::timespec {
    // SAFETY: timespec is plain old data (some targets have private padding
    // fields, hence zeroed() instead of a struct literal).
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // time_t and c_long are 32 bits on some targets.
    #[allow(clippy::useless_conversion)]
    {
        ts.tv_sec =
            libc::time_t::try_from(t.sec).unwrap_or(if t.sec < 0 { libc::time_t::MIN } else { libc::time_t::MAX });
    }
    // Below 10^9, so it fits any c_long.
    ts.tv_nsec = t.nsec.min(999_999_999) as libc::c_long;
    ts
}

impl Copier<'_> {
    fn run(&mut self, ino: u32, dest: PathBuf, src: Vec<u8>) {
        let mut jobs = vec![Job::Copy { ino, dest, src, top: true }];
        while let Some(job) = jobs.pop() {
            match job {
                Job::Copy { ino, dest, src, top } => {
                    self.copy(ino, dest, src, top, &mut jobs);
                    self.progress.file_done();
                }
                Job::Finish { st, dest, src } => self.apply_meta(&st, &dest, &src),
            }
        }
    }

    fn copy(&mut self, ino: u32, dest: PathBuf, src: Vec<u8>, top: bool, jobs: &mut Vec<Job>) {
        // Reached through a name: an xattr value's inode is refused, as a
        // lookup refuses it (FsCore::named_inode), not copied as a file.
        let st = match self.fs.named_inode(ino).and_then(|_| self.fs.stat(ino)) {
            Ok(s) => s,
            Err(e) => return report(&describe(&shown(&src), &e)),
        };
        if st.file_type == FileType::Directory {
            return self.copy_dir(st, dest, src, top, jobs);
        }
        if st.nlink > 1 {
            if let Some(first) = self.links.get(&ino) {
                if *first == dest {
                    // Already there (never replace a copy by a link to itself).
                    return;
                }
                if let Err(e) = remove_existing(&dest).and_then(|()| fs::hard_link(first, &dest)) {
                    report(&format!("{}: cannot link to {}: {e}", dest.display(), first.display()));
                }
                return;
            }
        }
        let made = match st.file_type {
            FileType::Regular => self.copy_file(&st, &dest, &src),
            FileType::Symlink => self.copy_symlink(&st, &dest, &src),
            FileType::CharDevice | FileType::BlockDevice if !self.root => {
                warn(&format!("{}: device node skipped (creating it needs root)", shown(&src)));
                return;
            }
            _ => make_node(&st, &dest),
        };
        match made {
            Ok(()) => {
                self.apply_meta(&st, &dest, &src);
                if st.nlink > 1 {
                    self.links.insert(ino, dest);
                }
            }
            Err(msg) => report(&msg),
        }
    }

    fn copy_dir(&mut self, st: Stat, dest: PathBuf, src: Vec<u8>, top: bool, jobs: &mut Vec<Job>) {
        if !self.dirs.insert(st.ino) {
            return report(&format!(
                "{}: directory inode {} already copied (loop in the image), skipped",
                shown(&src),
                st.ino
            ));
        }
        if let Err(e) = make_dir(&dest, top) {
            return report(&dest_err(&dest, &e));
        }
        let entries = self.fs.read_dir_all(st.ino);
        jobs.push(Job::Finish { st, dest: dest.clone(), src: src.clone() });
        let mut entries = match entries {
            Ok(v) => v,
            Err(e) => return report(&describe(&shown(&src), &e)),
        };
        // A stable sort: entries of one name stay in directory order.
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        // Names in use in the copy: the image's, then those given to
        // duplicates.
        let mut taken: HashSet<Vec<u8>> = entries.iter().map(|e| e.name.clone()).collect();
        // Inodes copied under each name of this directory.
        let mut copied: HashMap<Vec<u8>, Vec<u32>> = HashMap::new();
        let mut here = Vec::new();
        for e in entries {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let child = join(&src, &e.name);
            // A corrupt image must not make us write outside DEST.
            if e.name.is_empty() || e.name.contains(&b'/') || e.name.contains(&0) {
                report(&format!("{}: invalid file name in the image, skipped", shown(&child)));
                continue;
            }
            // Two entries of one name (a damaged directory, e2fsprogs'
            // f_dup_de): the host directory can hold only one. The same
            // inode again adds nothing (e2fsck clears such an entry): it is
            // copied once, with a warning. Another inode is copied under
            // the name e2fsck would rename it to (NAME~0, ~1, ...), and
            // that is an error: the copy then has a name the image has not.
            let inos = copied.entry(e.name.clone()).or_default();
            let mut name = e.name.clone();
            if inos.contains(&e.ino) {
                warn(&format!("{}: duplicate entry for inode {} in the image, copied once", shown(&child), e.ino));
                continue;
            }
            if !inos.is_empty() {
                name = unique_name(&e.name, &taken);
                taken.insert(name.clone());
                report(&format!(
                    "{}: duplicate name in the image (inode {}, another inode has it too), copied as {}",
                    shown(&child),
                    e.ino,
                    shown(&name)
                ));
            }
            inos.push(e.ino);
            here.push(Job::Copy { ino: e.ino, dest: dest.join(OsStr::from_bytes(&name)), src: child, top: false });
        }
        // The stack pops the last first: push in reverse to copy in order.
        jobs.extend(here.into_iter().rev());
    }

    fn copy_file(&mut self, st: &Stat, dest: &Path, src: &[u8]) -> Result<(), String> {
        remove_existing(dest).map_err(|e| dest_err(dest, &e))?;
        let f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(dest)
            .map_err(|e| dest_err(dest, &e))?;
        let mut off = 0u64;
        loop {
            let n = self.fs.inodes().read(st.ino, off, &mut self.buf).map_err(|e| describe(&shown(src), &e))?;
            if n == 0 {
                break;
            }
            write_sparse(&f, &self.buf[..n], off).map_err(|e| dest_err(dest, &e))?;
            off += n as u64;
            self.progress.bytes(n as u64);
        }
        f.set_len(off).map_err(|e| dest_err(dest, &e))?;
        Ok(())
    }

    fn copy_symlink(&self, st: &Stat, dest: &Path, src: &[u8]) -> Result<(), String> {
        let target = self.fs.readlink(st.ino).map_err(|e| describe(&shown(src), &e))?;
        remove_existing(dest).map_err(|e| dest_err(dest, &e))?;
        symlink(OsStr::from_bytes(&target), dest).map_err(|e| dest_err(dest, &e))
    }

    /// Owner, xattrs, mode, then times (in that order: chown clears setuid
    /// bits and security.capability; times must come last).
    fn apply_meta(&self, st: &Stat, dest: &Path, src: &[u8]) {
        let c = match cpath(dest) {
            Ok(c) => c,
            Err(e) => return report(&dest_err(dest, &e)),
        };
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        if unsafe { libc::lchown(c.as_ptr(), st.uid, st.gid) } != 0 {
            let e = io::Error::last_os_error();
            if self.root || e.raw_os_error() != Some(libc::EPERM) {
                warn(&format!("{}: cannot set owner {}:{}: {e}", dest.display(), st.uid, st.gid));
            }
        }
        self.copy_xattrs(st, dest, &c, src);
        if st.file_type != FileType::Symlink {
            let perm = fs::Permissions::from_mode(u32::from(st.mode & 0o7777));
            if let Err(e) = fs::set_permissions(dest, perm) {
                report(&format!("{}: cannot set mode {:04o}: {e}", dest.display(), st.mode & 0o7777));
            }
        }
        let times = [timespec(st.atime), timespec(st.mtime)];
        // SAFETY: `c` is a valid path and `times` two valid timespecs.
        if unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) } != 0 {
            let e = io::Error::last_os_error();
            report(&format!("{}: cannot set times: {e}", dest.display()));
        }
    }

    fn copy_xattrs(&self, st: &Stat, dest: &Path, c: &CString, src: &[u8]) {
        let names = match self.fs.list_xattrs(st.ino) {
            Ok(n) => n,
            Err(e) => return report(&describe(&format!("{}: extended attributes", shown(src)), &e)),
        };
        for name in names {
            let wanted = [&b"user."[..], b"trusted.", b"security."].iter().any(|p| name.starts_with(p))
                || name == b"system.posix_acl_access"
                || name == b"system.posix_acl_default";
            if !wanted {
                continue;
            }
            let shown_name = shown(&name);
            let value = match self.fs.get_xattr(st.ino, &name) {
                Ok(v) => v,
                Err(e) => {
                    report(&describe(&format!("{}: extended attribute {shown_name}", shown(src)), &e));
                    continue;
                }
            };
            let Ok(cname) = CString::new(name) else {
                warn(&format!("{}: extended attribute {shown_name:?} has a NUL in its name, skipped", shown(src)));
                continue;
            };
            // SAFETY: both strings are NUL-terminated and `value` is valid
            // for `value.len()` bytes during the call.
            let rc = unsafe { libc::lsetxattr(c.as_ptr(), cname.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                warn(&format!("{}: cannot set extended attribute {shown_name}: {e}", dest.display()));
            }
        }
    }
}

/// Creates a device node, FIFO or socket node (mode 0600 until apply_meta).
fn make_node(st: &Stat, dest: &Path) -> Result<(), String> {
    let (kind, dev) = match st.file_type {
        FileType::CharDevice => (libc::S_IFCHR, libc::makedev(st.rdev.0, st.rdev.1)),
        FileType::BlockDevice => (libc::S_IFBLK, libc::makedev(st.rdev.0, st.rdev.1)),
        FileType::Fifo => (libc::S_IFIFO, 0),
        FileType::Socket => (libc::S_IFSOCK, 0),
        _ => return Err(format!("{}: unexpected file type", dest.display())),
    };
    remove_existing(dest).map_err(|e| dest_err(dest, &e))?;
    let c = cpath(dest).map_err(|e| dest_err(dest, &e))?;
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    if unsafe { libc::mknod(c.as_ptr(), kind | 0o600, dev) } != 0 {
        return Err(dest_err(dest, &io::Error::last_os_error()));
    }
    Ok(())
}

/// A name for a second entry called `name` that no entry of `taken` has:
/// `name~0`, `name~1`, ... as e2fsck renames a non-unique name (its
/// `mutate_name`), the stem shortened so that it fits NAME_MAX.
fn unique_name(name: &[u8], taken: &HashSet<Vec<u8>>) -> Vec<u8> {
    (0u32..)
        .map(|k| {
            let suffix = format!("~{k}");
            let stem = &name[..name.len().min(255 - suffix.len())];
            [stem, suffix.as_bytes()].concat()
        })
        .find(|n| !taken.contains(n))
        .unwrap_or_default()
}

/// Runs `uext4 get`. If DEST is an existing directory, the source is copied
/// into it under its own name (the root directory's contents go straight in).
pub fn run(fs: &Filesystem, src: &[u8], dest: &Path) -> CliResult {
    let name = shown(src);
    let ino = fs.resolve(src).map_err(|e| fs_err(&name, e))?;
    fs.stat(ino).map_err(|e| fs_err(&name, e))?;
    let target = match fs::metadata(dest) {
        Ok(m) if m.is_dir() => match basename(src) {
            Some(b) => dest.join(OsStr::from_bytes(b)),
            None => dest.to_path_buf(),
        },
        _ => dest.to_path_buf(),
    };
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let progress = if progress::enabled() {
        let (bytes, files) = count_image(fs, ino);
        Progress::copy(bytes, files)
    } else {
        Progress::hidden()
    };
    let mut c = Copier { fs, root, links: HashMap::new(), dirs: HashSet::new(), buf: vec![0; CHUNK], progress };
    c.run(ino, target, src.to_vec());
    Ok(())
}

/// The progress bar's totals for copying inode `ino` out: the bytes of the
/// regular files (each multiply-linked inode once) and the number of files
/// of any type, directories included. Walks directories and inodes only;
/// what cannot be read is skipped here (the copy reports it).
fn count_image(fs: &Filesystem, ino: u32) -> (u64, u64) {
    let (mut bytes, mut files) = (0u64, 0u64);
    let mut seen = HashSet::new();
    let mut stack = vec![ino];
    while let Some(ino) = stack.pop() {
        // Directories are walked once (a loop in a corrupt image ends
        // here); other inodes are counted per name, as they are copied.
        let Ok(st) = fs.stat(ino) else { continue };
        files += 1;
        match st.file_type {
            FileType::Directory if seen.insert(ino) => {
                if let Ok(entries) = fs.read_dir_all(ino) {
                    stack.extend(entries.iter().filter(|e| e.name != b"." && e.name != b"..").map(|e| e.ino));
                }
            }
            FileType::Regular if st.nlink == 1 || seen.insert(ino) => bytes += st.size,
            _ => {}
        }
    }
    (bytes, files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basenames() {
        assert_eq!(basename(b"/a/b"), Some(&b"b"[..]));
        assert_eq!(basename(b"/a/b/"), Some(&b"b"[..]));
        assert_eq!(basename(b"a/./"), Some(&b"a"[..]));
        assert_eq!(basename(b"/"), None);
        assert_eq!(basename(b""), None);
        assert_eq!(basename(b"/a/.."), None);
    }

    #[test]
    fn sparse_writes() {
        let dir = std::env::temp_dir().join(format!("uext4-sparse-{}", std::process::id()));
        let mut data = vec![0u8; 3 * SPARSE_PIECE + 10];
        data[SPARSE_PIECE + 5] = 1;
        data[3 * SPARSE_PIECE + 9] = 2;
        let f = File::create(&dir).unwrap();
        write_sparse(&f, &data, 100).unwrap();
        f.set_len(100 + data.len() as u64).unwrap();
        let back = fs::read(&dir).unwrap();
        fs::remove_file(&dir).unwrap();
        assert_eq!(&back[100..], &data[..]);
        assert!(back[..100].iter().all(|&b| b == 0));
    }
}
