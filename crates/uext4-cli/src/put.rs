//! `uext4 put`: copy a host file, symlink or directory tree into the image,
//! keeping data (holes stay holes), permission bits, owners, access and
//! modification times with nanoseconds, symlinks, hard links within the
//! copied tree, FIFOs, sockets, device nodes and extended attributes
//! (those the host lets the caller read: POSIX ACLs, `user.`, `security.`,
//! `trusted.` as root). `uext4 mkfs -d` fills a fresh image the same way
//! ([`populate`]), in a deterministic order, each file written back as soon as it
//! is copied (so allocation does not depend on when background writeback
//! runs), with host files read ahead in parallel.

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
use std::sync::{mpsc, Arc, Mutex};
use uext4::inode_api::SetAttr;
use uext4::inode_api::XattrSetMode;
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
    /// Write each file back once copied, in steps of [`WRITEBACK_STEP`]
    /// (mkfs -d: deterministic allocation, see the module docs).
    sync_each: bool,
    /// Reproducible copy (`SOURCE_DATE_EPOCH`): modification times later
    /// than this are clamped to it and access times equal them.
    clamp: Option<Timestamp>,
    /// Host files to read ahead (mkfs -d).
    readahead: Option<Readahead>,
}

/// Bytes of one file copied between two writebacks of it under
/// `sync_each`: well under the background writeback threshold of the
/// page-cache budget mkfs -d mounts with.
const WRITEBACK_STEP: u64 = 16 << 20;

/// Host files handed to a few threads that ask the kernel to read them
/// ahead (`POSIX_FADV_WILLNEED`), so that the copy, which reads files one
/// at a time in a fixed order, finds them in the host's page cache.
struct Readahead {
    tx: Option<mpsc::SyncSender<PathBuf>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Readahead {
    fn start(threads: usize) -> Readahead {
        let (tx, rx) = mpsc::sync_channel::<PathBuf>(4096);
        let rx = Arc::new(Mutex::new(rx));
        let threads = (0..threads)
            .filter_map(|_| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name("uext4-readahead".into())
                    .spawn(move || loop {
                        let next = match rx.lock() {
                            Ok(r) => r.recv(),
                            Err(_) => return,
                        };
                        let Ok(path) = next else { return };
                        let Ok(f) = fs::OpenOptions::new()
                            .read(true)
                            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                            .open(&path)
                        else {
                            continue;
                        };
                        // SAFETY: a hint on an open descriptor; no memory is passed.
                        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_WILLNEED) };
                    })
                    .ok()
            })
            .collect();
        Readahead { tx: Some(tx), threads }
    }

    /// Queues `path` unless the queue is full (a hint, never a wait).
    fn hint(&self, path: PathBuf) {
        if let Some(tx) = &self.tx {
            let _ = tx.try_send(path);
        }
    }
}

impl Drop for Readahead {
    fn drop(&mut self) {
        self.tx = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The names of the extended attributes of host path `p` (not following
/// a symlink), sorted; none where the host has no xattr support.
fn host_xattr_names(p: &Path) -> io::Result<Vec<Vec<u8>>> {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: `c` is a NUL-terminated path, `buf` is writable for its length.
        let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            buf.truncate(n as usize);
            break;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) => buf.resize(buf.len() * 4, 0),
            Some(libc::ENOTSUP) => return Ok(Vec::new()),
            _ => return Err(e),
        }
    }
    let mut names: Vec<Vec<u8>> = buf.split(|&b| b == 0).filter(|n| !n.is_empty()).map(<[u8]>::to_vec).collect();
    names.sort();
    Ok(names)
}

/// The value of host xattr `name` of `p` (not following a symlink).
fn host_xattr(p: &Path, name: &[u8]) -> io::Result<Vec<u8>> {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let n = std::ffi::CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut buf = vec![0u8; 256];
    loop {
        // SAFETY: NUL-terminated path and name; `buf` is writable for its length.
        let r = unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if r >= 0 {
            buf.truncate(r as usize);
            return Ok(buf);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ERANGE) || buf.len() > 1 << 20 {
            return Err(e);
        }
        buf.resize(buf.len() * 4, 0);
    }
}

fn ts(sec: i64, nsec: i64) -> Timestamp {
    Timestamp { sec, nsec: nsec.clamp(0, 999_999_999) as u32 }
}

/// Mode, owner and times of `m` (the size is set separately); with
/// `clamp`, the reproducible times: mtime at most `clamp`, atime = mtime.
fn meta_attr(m: &Metadata, clamp: Option<Timestamp>) -> SetAttr {
    let mtime = ts(m.mtime(), m.mtime_nsec());
    let (atime, mtime) = match clamp {
        Some(c) => (mtime.min(c), mtime.min(c)),
        None => (ts(m.atime(), m.atime_nsec()), mtime),
    };
    SetAttr {
        mode: Some((m.mode() & 0o7777) as u16),
        uid: Some(m.uid()),
        gid: Some(m.gid()),
        atime: Some(atime),
        mtime: Some(mtime),
        size: None,
        ctime: None,
        // The copy's times are given values (refused on an append-only
        // file, as utimensat refuses them).
        times_given: true,
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
                    self.fs.setattr(ino, meta_attr(&meta, self.clamp)).map(drop).map_err(|e| Fail::image(&dest, e))
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
            self.copy_xattrs(&src, ino, &dest)?;
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
            let a = meta_attr(&meta, self.clamp);
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
            self.copy_xattrs(&src, st.ino, &dest)?;
            fs.setattr(st.ino, meta_attr(&meta, self.clamp)).map_err(|e| Fail::image(&dest, e))?;
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
                Ok(e) => names.push((e.file_name(), e.file_type().is_ok_and(|t| t.is_file()))),
                Err(e) => report(&format!("{}: {e}", src.display())),
            }
        }
        names.sort();
        if let Some(ra) = &self.readahead {
            for (n, _) in names.iter().filter(|(_, file)| *file) {
                ra.hint(src.join(n));
            }
        }
        for (n, _) in names.into_iter().rev() {
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
        // A copy that fails part way (no space, a host read error) takes
        // its file back out: no empty or partial file is left under the
        // name, as if the copy had never started.
        self.fill_file(&f, &meta, ino, src, dest).inspect_err(|_| {
            if let Err(e) = fs.unlink(parent, name) {
                report(&format!("{dest}: removing the partial copy: {}", describe(dest, &e)));
            }
        })?;
        Ok(ino)
    }

    /// Writes host file `f` (`src`, metadata `meta`) into new image inode
    /// `ino`, with its attributes.
    fn fill_file(&mut self, f: &File, meta: &Metadata, ino: u32, src: &Path, dest: &str) -> Result<(), Fail> {
        let fs = self.fs;
        let size = meta.len();
        let mut end = size;
        let mut off = 0u64;
        let mut read = 0u64;
        let mut unsynced = 0u64;
        'segments: while let Some((start, stop)) = next_data(f, off, size).map_err(|e| Fail::host(src, &e))? {
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
                    unsynced += (b - a) as u64;
                }
                if self.sync_each && unsynced >= WRITEBACK_STEP {
                    fs.inodes().writeback_inode(ino).map_err(|e| Fail::image(dest, e))?;
                    unsynced = 0;
                }
                pos += n as u64;
                read += n as u64;
                self.progress.bytes(n as u64);
            }
            off = stop;
        }
        // The holes skipped count as done too.
        self.progress.bytes(size.saturating_sub(read));
        let attr = SetAttr { size: Some(end), ..meta_attr(meta, self.clamp) };
        fs.setattr(ino, attr).map_err(|e| Fail::image(dest, e))?;
        if self.sync_each {
            fs.inodes().writeback_inode(ino).map_err(|e| Fail::image(dest, e))?;
        }
        self.copy_xattrs(src, ino, dest)?;
        Ok(())
    }

    /// Copies the extended attributes of host path `src` to image inode
    /// `ino`, in name order. One the host will not read or the image
    /// refuses is reported and skipped (the entry itself is copied); only
    /// an error after which the image takes nothing more stops the copy.
    fn copy_xattrs(&mut self, src: &Path, ino: u32, dest: &str) -> Result<(), Fail> {
        let names = match host_xattr_names(src) {
            Ok(n) => n,
            Err(e) => {
                report(&format!("{}: listing xattrs: {e}", src.display()));
                return Ok(());
            }
        };
        for name in names {
            let shown_name = String::from_utf8_lossy(&name).into_owned();
            let value = match host_xattr(src, &name) {
                Ok(v) => v,
                Err(e) => {
                    report(&format!("{}: xattr {shown_name}: {e}", src.display()));
                    continue;
                }
            };
            if let Err(e) = self.fs.inodes().set_xattr(ino, &name, &value, XattrSetMode::Any) {
                match Fail::image(&format!("{dest} (xattr {shown_name})"), e) {
                    Fail::Entry(m) => report(&m),
                    fatal => return Err(fatal),
                }
            }
        }
        Ok(())
    }
}

/// Runs `uext4 put`. If DEST is an existing directory (after following
/// symlinks), the copy goes into it under SRC's name; SRC "/", "." or ".."
/// then has its contents merged into DEST. Otherwise DEST's parent must
/// exist and DEST names the copy (an existing non-directory is replaced).
pub fn run(fs: &Filesystem, image: &Path, src: &Path, dest: &[u8]) -> CliResult {
    let meta = fs::symlink_metadata(src).map_err(|e| CliError::msg(format!("{}: {e}", src.display())))?;
    let image_id = fs::metadata(image).ok().map(|m| (m.dev(), m.ino()));
    let mut p = Putter {
        fs,
        links: HashMap::new(),
        image_id,
        buf: vec![0; CHUNK],
        progress: Progress::hidden(),
        sync_each: false,
        clamp: None,
        readahead: None,
    };
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

/// Fills the fresh image `fs` (file `image`) from host directory `src`,
/// as `mke2fs -d` does: `src`'s contents go into the root directory,
/// whose mode, owner, times and xattrs become `src`'s. Entries are copied
/// in name order, each file written back once copied, so the same tree
/// gives the same allocation on every run; with `clamp`
/// (`SOURCE_DATE_EPOCH`), modification times are clamped to it and
/// access times equal them (see [`meta_attr`]).
pub fn populate(fs: &Filesystem, image: &Path, src: &Path, clamp: Option<Timestamp>) -> CliResult {
    let meta = fs::metadata(src).map_err(|e| CliError::msg(format!("{}: {e}", src.display())))?;
    if !meta.is_dir() {
        return Err(CliError::msg(format!("{}: not a directory", src.display())));
    }
    let image_id = fs::metadata(image).ok().map(|m| (m.dev(), m.ino()));
    let mut p = Putter {
        fs,
        links: HashMap::new(),
        image_id,
        buf: vec![0; CHUNK],
        progress: Progress::hidden(),
        sync_each: true,
        clamp,
        readahead: Some(Readahead::start(4)),
    };
    if progress::enabled() {
        let (bytes, files) = count_host(src);
        p.progress = Progress::copy(bytes, files.saturating_sub(1));
    }
    let root = fs.root();
    p.copy_xattrs(src, root, "/").map_err(|f| match f {
        Fail::Entry(m) | Fail::Fatal(m) => CliError::Msg(m),
    })?;
    let jobs = vec![
        Job::Finish { ino: root, meta, dest: "/".into() },
        Job::Contents { src: src.to_path_buf(), ino: root, dest: "/".into() },
    ];
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
