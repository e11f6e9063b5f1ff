//! `uext4 put`: copy a host file, symlink or directory tree into the image,
//! keeping data (holes stay holes), permission bits, owners, access and
//! modification times with nanoseconds, symlinks, hard links within the
//! copied tree, FIFOs, sockets and device nodes.

use crate::progress::{self, Progress};
use crate::util::{describe, fs_err, report, shown, warn, CliError, CliResult};
use crate::write::{basename, existing_dir, is_fatal, join_shown, locate, lookup_opt};
use std::collections::{HashMap, HashSet};
use std::fs::{self, File, Metadata};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use uext4::fs::ops::SetAttr;
use uext4::{FileType, Filesystem, Timestamp};

/// Bytes read from the host and written to the image per step.
const CHUNK: usize = 1 << 20;
/// Granularity of the zero check that keeps copies sparse.
const PIECE: u64 = 4096;
static ZEROS: [u8; PIECE as usize] = [0; PIECE as usize];

/// What is left to do, in a stack (no recursion, so any depth is fine).
enum Job {
    /// Copy host `src` to `name` in image directory `parent` (shown as `dest`).
    Copy { src: PathBuf, parent: u32, name: Vec<u8>, dest: String },
    /// Copy the contents of host directory `src` into image directory `ino`.
    Contents { src: PathBuf, ino: u32, dest: String },
    /// A directory's contents are done: apply its mode, owner and times.
    Finish { ino: u32, meta: Metadata, dest: String },
}

/// Why one entry was not copied.
enum Fail {
    /// Reported; the copy goes on with the next entry.
    Entry(String),
    /// The image cannot take more: stop.
    Fatal(String),
}

impl Fail {
    fn image(what: &str, e: uext4::Error) -> Fail {
        if is_fatal(&e) {
            Fail::Fatal(describe(what, &e))
        } else {
            Fail::Entry(describe(what, &e))
        }
    }

    fn host(src: &Path, e: &io::Error) -> Fail {
        Fail::Entry(format!("{}: {e}", src.display()))
    }
}

struct Putter<'a> {
    fs: &'a Filesystem,
    /// Image inode of the first copy of each multiply-linked host file.
    links: HashMap<(u64, u64), u32>,
    /// The image file itself, never copied into itself.
    image_id: Option<(u64, u64)>,
    buf: Vec<u8>,
    progress: Progress,
}

fn ts(sec: i64, nsec: i64) -> Timestamp {
    Timestamp { sec, nsec: nsec.clamp(0, 999_999_999) as u32 }
}

/// Mode, owner and times of `m` (the size is set separately).
fn meta_attr(m: &Metadata) -> SetAttr {
    SetAttr {
        mode: Some((m.mode() & 0o7777) as u16),
        uid: Some(m.uid()),
        gid: Some(m.gid()),
        atime: Some(ts(m.atime(), m.atime_nsec())),
        mtime: Some(ts(m.mtime(), m.mtime_nsec())),
        size: None,
    }
}

/// The runs of `data` (which starts at file offset `base`) worth writing:
/// everything except all-zero pieces aligned to PIECE in the file.
fn nonzero_runs(data: &[u8], base: u64) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut i = 0usize;
    while i < data.len() {
        let piece_end = ((base + i as u64) / PIECE + 1) * PIECE;
        let end = ((piece_end - base) as usize).min(data.len());
        if data[i..end] != ZEROS[..end - i] {
            match runs.last_mut() {
                Some(r) if r.1 == i => r.1 = end,
                _ => runs.push((i, end)),
            }
        }
        i = end;
    }
    runs
}

/// The next data segment of `f` at or after `off` (below `size`), using
/// SEEK_DATA/SEEK_HOLE where the host supports them.
fn next_data(f: &File, off: u64, size: u64) -> io::Result<Option<(u64, u64)>> {
    if off >= size {
        return Ok(None);
    }
    let fd = f.as_raw_fd();
    let Ok(o) = libc::off_t::try_from(off) else { return Ok(Some((off, size))) };
    // SAFETY: lseek on an open descriptor; pread ignores the file offset.
    let data = unsafe { libc::lseek(fd, o, libc::SEEK_DATA) };
    if data < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENXIO) => Ok(None),
            Some(libc::EINVAL | libc::EOPNOTSUPP) => Ok(Some((off, size))),
            _ => Err(e),
        };
    }
    // SAFETY: as above.
    let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
    if hole < 0 {
        return Ok(Some((data as u64, size)));
    }
    let (data, hole) = (data as u64, hole as u64);
    if data >= size {
        return Ok(None);
    }
    Ok(Some((data, hole.clamp(data + 1, size))))
}

impl Putter<'_> {
    fn run(&mut self, mut jobs: Vec<Job>) -> CliResult {
        while let Some(job) = jobs.pop() {
            let r = match job {
                Job::Copy { src, parent, name, dest } => {
                    let r = self.copy(src, parent, name, dest, &mut jobs);
                    self.progress.file_done();
                    r
                }
                Job::Contents { src, ino, dest } => self.contents(&src, ino, &dest, &mut jobs),
                Job::Finish { ino, meta, dest } => {
                    self.fs.setattr(ino, meta_attr(&meta)).map(drop).map_err(|e| Fail::image(&dest, e))
                }
            };
            match r {
                Ok(()) => {}
                Err(Fail::Entry(m)) => report(&m),
                Err(Fail::Fatal(m)) => return Err(CliError::Msg(m)),
            }
        }
        Ok(())
    }

    fn copy(
        &mut self,
        src: PathBuf,
        parent: u32,
        name: Vec<u8>,
        dest: String,
        jobs: &mut Vec<Job>,
    ) -> Result<(), Fail> {
        let meta = fs::symlink_metadata(&src).map_err(|e| Fail::host(&src, &e))?;
        if Some((meta.dev(), meta.ino())) == self.image_id {
            warn(&format!("{}: skipped (it is the image being written)", src.display()));
            return Ok(());
        }
        let fs = self.fs;
        let existing = lookup_opt(fs, parent, &name).map_err(|e| Fail::image(&dest, e))?;
        let existing_type = match existing {
            Some(ino) => Some(fs.stat(ino).map_err(|e| Fail::image(&dest, e))?.file_type),
            None => None,
        };
        let ft = meta.file_type();
        if ft.is_dir() {
            let ino = match (existing, existing_type) {
                // Merge into an existing directory, like `cp -r`.
                (Some(ino), Some(FileType::Directory)) => ino,
                (Some(_), _) => {
                    return Err(Fail::Entry(format!("{dest}: cannot overwrite non-directory with directory")))
                }
                _ => {
                    let (mode, uid, gid) = ((meta.mode() & 0o7777) as u16, meta.uid(), meta.gid());
                    fs.mkdir(parent, &name, mode, uid, gid).map_err(|e| Fail::image(&dest, e))?.ino
                }
            };
            jobs.push(Job::Finish { ino, meta, dest: dest.clone() });
            return self.contents(&src, ino, &dest, jobs);
        }
        match existing_type {
            Some(FileType::Directory) => {
                return Err(Fail::Entry(format!("{dest}: cannot overwrite directory with non-directory")))
            }
            // Existing non-directories are replaced.
            Some(_) => fs.unlink(parent, &name).map_err(|e| Fail::image(&dest, e))?,
            None => {}
        }
        let key = (meta.dev(), meta.ino());
        if meta.nlink() > 1 {
            if let Some(&ino) = self.links.get(&key) {
                fs.link(ino, parent, &name).map_err(|e| Fail::image(&dest, e))?;
                return Ok(());
            }
        }
        let (uid, gid) = (meta.uid(), meta.gid());
        let ino = if ft.is_file() {
            self.copy_file(&src, parent, &name, &dest)?
        } else if ft.is_symlink() {
            let target = fs::read_link(&src).map_err(|e| Fail::host(&src, &e))?;
            let target = target.as_os_str().as_bytes();
            let st = fs.inodes().symlink(parent, &name, target, uid, gid).map_err(|e| match e {
                uext4::Error::NameTooLong(_) => {
                    Fail::Entry(format!("{dest}: symlink target too long for the image ({} bytes)", target.len()))
                }
                e => Fail::image(&dest, e),
            })?;
            let a = meta_attr(&meta);
            // A symlink's permission bits are always 0777.
            let attr = SetAttr { mode: None, ..a };
            fs.setattr(st.ino, attr).map_err(|e| Fail::image(&dest, e))?;
            st.ino
        } else {
            let kind = if ft.is_fifo() {
                libc::S_IFIFO
            } else if ft.is_char_device() {
                libc::S_IFCHR
            } else if ft.is_block_device() {
                libc::S_IFBLK
            } else if ft.is_socket() {
                libc::S_IFSOCK
            } else {
                return Err(Fail::Entry(format!("{}: unknown file type, skipped", src.display())));
            };
            let rdev = meta.rdev();
            let dev = (libc::major(rdev), libc::minor(rdev));
            let mode = (kind | (meta.mode() & 0o7777)) as u16;
            let st = fs.mknod(parent, &name, mode, dev, uid, gid).map_err(|e| Fail::image(&dest, e))?;
            fs.setattr(st.ino, meta_attr(&meta)).map_err(|e| Fail::image(&dest, e))?;
            st.ino
        };
        if meta.nlink() > 1 {
            self.links.insert(key, ino);
        }
        Ok(())
    }

    /// Queues the entries of host directory `src` (sorted by name) for
    /// copying into image directory `ino`.
    fn contents(&mut self, src: &Path, ino: u32, dest: &str, jobs: &mut Vec<Job>) -> Result<(), Fail> {
        let rd = fs::read_dir(src).map_err(|e| Fail::host(src, &e))?;
        let mut names = Vec::new();
        for e in rd {
            match e {
                Ok(e) => names.push(e.file_name()),
                Err(e) => report(&format!("{}: {e}", src.display())),
            }
        }
        names.sort();
        for n in names.into_iter().rev() {
            let name = n.as_bytes().to_vec();
            let child = join_shown(dest, &name);
            jobs.push(Job::Copy { src: src.join(&n), parent: ino, name, dest: child });
        }
        Ok(())
    }

    /// Creates `name` in `parent` and fills it from host file `src`.
    fn copy_file(&mut self, src: &Path, parent: u32, name: &[u8], dest: &str) -> Result<u32, Fail> {
        let f = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(src)
            .map_err(|e| Fail::host(src, &e))?;
        let meta = f.metadata().map_err(|e| Fail::host(src, &e))?;
        if !meta.is_file() {
            return Err(Fail::Entry(format!("{}: changed while being copied, skipped", src.display())));
        }
        let fs = self.fs;
        let mode = (meta.mode() & 0o7777) as u16;
        let ino = fs.create(parent, name, mode, meta.uid(), meta.gid()).map_err(|e| Fail::image(dest, e))?.ino;
        let size = meta.len();
        let mut end = size;
        let mut off = 0u64;
        let mut read = 0u64;
        'segments: while let Some((start, stop)) = next_data(&f, off, size).map_err(|e| Fail::host(src, &e))? {
            let mut pos = start;
            while pos < stop {
                let want = (stop - pos).min(CHUNK as u64) as usize;
                let n = f.read_at(&mut self.buf[..want], pos).map_err(|e| Fail::host(src, &e))?;
                if n == 0 {
                    // The file shrank while being copied: keep what was read.
                    end = pos;
                    break 'segments;
                }
                for (a, b) in nonzero_runs(&self.buf[..n], pos) {
                    fs.inodes().write(ino, pos + a as u64, &self.buf[a..b]).map_err(|e| Fail::image(dest, e))?;
                }
                pos += n as u64;
                read += n as u64;
                self.progress.bytes(n as u64);
            }
            off = stop;
        }
        // The holes skipped count as done too.
        self.progress.bytes(size.saturating_sub(read));
        let attr = SetAttr { size: Some(end), ..meta_attr(&meta) };
        fs.setattr(ino, attr).map_err(|e| Fail::image(dest, e))?;
        Ok(ino)
    }
}

/// Runs `uext4 put`. If DEST is an existing directory (after following
/// symlinks), the copy goes into it under SRC's name; SRC "/", "." or ".."
/// then has its contents merged into DEST. Otherwise DEST's parent must
/// exist and DEST names the copy (an existing non-directory is replaced).
pub fn run(fs: &Filesystem, image: &Path, src: &Path, dest: &[u8]) -> CliResult {
    let meta = fs::symlink_metadata(src).map_err(|e| CliError::msg(format!("{}: {e}", src.display())))?;
    let image_id = fs::metadata(image).ok().map(|m| (m.dev(), m.ino()));
    let mut p = Putter { fs, links: HashMap::new(), image_id, buf: vec![0; CHUNK], progress: Progress::hidden() };
    let dest_shown = shown(dest);
    let jobs = match existing_dir(fs, dest)? {
        Some(dir) => match basename(src.as_os_str().as_bytes()) {
            Some(b) => vec![Job::Copy {
                src: src.to_path_buf(),
                parent: dir,
                name: b.to_vec(),
                dest: join_shown(&dest_shown, b),
            }],
            None if meta.is_dir() => vec![
                Job::Finish { ino: dir, meta, dest: dest_shown.clone() },
                Job::Contents { src: src.to_path_buf(), ino: dir, dest: dest_shown },
            ],
            None => return Err(CliError::msg(format!("{}: no file name to copy to", src.display()))),
        },
        None => {
            let loc = locate(fs, dest)?;
            if loc.dir_only && !meta.is_dir() {
                let e = uext4::Error::NotDir(loc.shown.clone());
                return Err(fs_err(&loc.shown, e));
            }
            vec![Job::Copy { src: src.to_path_buf(), parent: loc.parent, name: loc.name, dest: loc.shown }]
        }
    };
    if progress::enabled() {
        let (bytes, mut files) = count_host(src);
        if matches!(jobs.first(), Some(Job::Finish { .. })) {
            // SRC's contents are merged into DEST: SRC itself is no copy.
            files = files.saturating_sub(1);
        }
        p.progress = Progress::copy(bytes, files);
    }
    p.run(jobs)
}

/// The progress bar's totals for copying host path `src`: the bytes of its
/// regular files (each multiply-linked file once) and the number of files
/// of any type, directories included. A cheap walk of metadata only;
/// unreadable entries are skipped here (the copy reports them).
fn count_host(src: &Path) -> (u64, u64) {
    let (mut bytes, mut files) = (0u64, 0u64);
    let mut linked = HashSet::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(m) = fs::symlink_metadata(&p) else { continue };
        files += 1;
        if m.is_dir() {
            if let Ok(rd) = fs::read_dir(&p) {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
        } else if m.is_file() && (m.nlink() == 1 || linked.insert((m.dev(), m.ino()))) {
            bytes += m.len();
        }
    }
    (bytes, files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs() {
        let mut d = vec![0u8; 3 * PIECE as usize + 10];
        assert!(nonzero_runs(&d, 0).is_empty());
        d[5] = 1;
        d[2 * PIECE as usize] = 1;
        d[2 * PIECE as usize + 4096] = 1;
        assert_eq!(nonzero_runs(&d, 0), vec![(0, 4096), (8192, d.len())]);
        // Pieces are aligned to the file, not the buffer.
        let d = [0u8, 0, 1, 0];
        assert_eq!(nonzero_runs(&d, 4094), vec![(2, 4)]);
        let mut d = vec![0u8; 8192];
        d[100] = 1;
        assert_eq!(nonzero_runs(&d, 4000), vec![(96, 4192)]);
    }
}
