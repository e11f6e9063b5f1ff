//! The std-like API against std itself: the same sequence of calls runs
//! on a host temporary directory (`std::fs`) and on an image (uext4), and
//! must give the same results and the same errors (`ErrorKind` and
//! `raw_os_error`). Then what only the image can show: many `File`s from
//! many threads, a `File` kept open across `remove_file`, `?` in
//! `io::Result` code, batching of long listings, direct I/O, read-only
//! filesystems. Every image ends with `e2fsck -fn`.

mod rw_support;

use std::fmt::Debug;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use uext4::mkfs::{mkfs_file, MkfsOptions};
use uext4::{FileTimes, Filesystem, OpenOptions, Permissions};

type R<T> = io::Result<T>;

/// A fresh image of `mb` MiB made by uext4's mkfs, opened read-write.
fn new_image(mb: u64) -> (tempfile::TempDir, PathBuf, Filesystem) {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    mkfs_file(&img, &MkfsOptions { size: mb << 20, ..Default::default() }).unwrap();
    let fs = Filesystem::open_rw(&img).unwrap();
    (dir, img, fs)
}

/// Unmounts and runs `e2fsck -fn` (skipped, with a message, without e2fsprogs).
fn finish(fs: Filesystem, img: &Path) {
    drop(fs);
    if rw_support::have("e2fsck") {
        rw_support::fsck_clean(img);
    } else {
        eprintln!("SKIP: e2fsck not installed; image not checked");
    }
}

/// The process umask (set back at once).
fn process_umask() -> u32 {
    // SAFETY: umask has no preconditions and cannot fail; the old value is
    // restored immediately.
    unsafe {
        let old = libc::umask(0o022);
        libc::umask(old);
        old
    }
}

/// What the comparison looks at in a file's metadata. Directory sizes
/// and link counts depend on the host filesystem: left out.
#[derive(Debug, PartialEq)]
struct Meta {
    kind: &'static str,
    len: u64,
    perm: u32,
    nlink: u64,
    uid: u32,
    gid: u32,
}

fn kind_name(dir: bool, file: bool, symlink: bool) -> &'static str {
    match (dir, file, symlink) {
        (true, _, _) => "dir",
        (_, true, _) => "file",
        (_, _, true) => "symlink",
        _ => "other",
    }
}

fn meta(kind: &'static str, len: u64, mode: u32, nlink: u64, uid: u32, gid: u32) -> Meta {
    let (len, nlink) = if kind == "dir" { (0, 0) } else { (len, nlink) };
    Meta { kind, len, perm: mode & 0o7777, nlink, uid, gid }
}

fn host_meta(m: std::fs::Metadata) -> Meta {
    let t = m.file_type();
    meta(kind_name(t.is_dir(), t.is_file(), t.is_symlink()), m.len(), m.mode(), m.nlink(), m.uid(), m.gid())
}

fn img_meta(m: uext4::Metadata) -> Meta {
    let t = m.file_type();
    meta(kind_name(t.is_dir(), t.is_file(), t.is_symlink()), m.len(), m.mode(), m.nlink(), m.uid(), m.gid())
}

/// std::fs::OpenOptions' switches, for both sides.
#[derive(Clone, Copy, Default)]
struct Opts {
    read: bool,
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
    mode: Option<u32>,
}

fn ro() -> Opts {
    Opts { read: true, ..Default::default() }
}

/// Sets the switches of `o` on an `OpenOptions` builder. std's and
/// uext4's builders have the same methods: one body serves both sides, so
/// the two cannot be opened differently.
macro_rules! set_opts {
    ($builder:expr, $o:expr) => {{
        let (oo, o) = (&mut $builder, $o);
        oo.read(o.read).write(o.write).append(o.append).truncate(o.truncate).create(o.create).create_new(o.create_new);
        if let Some(m) = o.mode {
            oo.mode(m);
        }
    }};
}

/// The rows (name, kind, length) of a listing, sorted. std's and uext4's
/// directory entries have the same methods: one body serves both sides.
/// `$check` sees each entry once its metadata is read.
macro_rules! listing {
    ($entries:expr, $meta:expr, $check:expr) => {{
        let check = $check;
        let mut v = Vec::new();
        for e in $entries {
            let e = e?;
            let t = e.file_type()?;
            let m = $meta(e.metadata()?);
            check(&e);
            v.push((
                e.file_name().to_string_lossy().into_owned(),
                kind_name(t.is_dir(), t.is_file(), t.is_symlink()),
                m.len,
            ));
        }
        v.sort();
        Ok(v)
    }};
}

/// An open file on either side.
trait AnyFile: Read + Write + Seek {
    fn pread(&self, buf: &mut [u8], off: u64) -> R<usize>;
    fn pwrite(&self, buf: &[u8], off: u64) -> R<usize>;
    fn truncate_to(&self, n: u64) -> R<()>;
    fn sync(&self) -> R<()>;
    fn meta(&self) -> R<Meta>;
    fn chmod(&self, mode: u32) -> R<()>;
}

impl AnyFile for std::fs::File {
    fn pread(&self, buf: &mut [u8], off: u64) -> R<usize> {
        self.read_at(buf, off)
    }
    fn pwrite(&self, buf: &[u8], off: u64) -> R<usize> {
        self.write_at(buf, off)
    }
    fn truncate_to(&self, n: u64) -> R<()> {
        self.set_len(n)
    }
    fn sync(&self) -> R<()> {
        self.sync_all()
    }
    fn meta(&self) -> R<Meta> {
        Ok(host_meta(self.metadata()?))
    }
    fn chmod(&self, mode: u32) -> R<()> {
        self.set_permissions(std::fs::Permissions::from_mode(mode))
    }
}

impl AnyFile for uext4::File {
    fn pread(&self, buf: &mut [u8], off: u64) -> R<usize> {
        self.read_at(buf, off)
    }
    fn pwrite(&self, buf: &[u8], off: u64) -> R<usize> {
        self.write_at(buf, off)
    }
    fn truncate_to(&self, n: u64) -> R<()> {
        Ok(self.set_len(n)?)
    }
    fn sync(&self) -> R<()> {
        Ok(self.sync_all()?)
    }
    fn meta(&self) -> R<Meta> {
        Ok(img_meta(self.metadata()?))
    }
    fn chmod(&self, mode: u32) -> R<()> {
        Ok(self.set_permissions(Permissions::from_mode(mode))?)
    }
}

/// The path functions, on either side. Paths are relative to the side's
/// root (the temporary directory, or the image's root).
trait Env {
    fn open(&self, p: &str, o: Opts) -> R<Box<dyn AnyFile>>;
    fn metadata(&self, p: &str) -> R<Meta>;
    fn symlink_metadata(&self, p: &str) -> R<Meta>;
    fn times(&self, p: &str) -> R<(SystemTime, SystemTime)>;
    fn read_dir(&self, p: &str) -> R<Vec<(String, &'static str, u64)>>;
    fn create_dir(&self, p: &str) -> R<()>;
    fn create_dir_all(&self, p: &str) -> R<()>;
    fn remove_file(&self, p: &str) -> R<()>;
    fn remove_dir(&self, p: &str) -> R<()>;
    fn remove_dir_all(&self, p: &str) -> R<()>;
    fn rename(&self, a: &str, b: &str) -> R<()>;
    fn hard_link(&self, a: &str, b: &str) -> R<()>;
    fn symlink(&self, target: &str, link: &str) -> R<()>;
    fn read_link(&self, p: &str) -> R<PathBuf>;
    fn set_permissions(&self, p: &str, mode: u32) -> R<()>;
    fn set_times(&self, p: &str, atime: SystemTime, mtime: SystemTime) -> R<()>;
    fn copy(&self, a: &str, b: &str) -> R<u64>;
    fn read(&self, p: &str) -> R<Vec<u8>>;
    fn read_to_string(&self, p: &str) -> R<String>;
    fn write(&self, p: &str, data: &[u8]) -> R<()>;
    fn exists(&self, p: &str) -> bool;
    fn try_exists(&self, p: &str) -> R<bool>;
}

struct Host(PathBuf);

impl Host {
    fn p(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Env for Host {
    fn open(&self, p: &str, o: Opts) -> R<Box<dyn AnyFile>> {
        let mut oo = std::fs::OpenOptions::new();
        set_opts!(oo, o);
        Ok(Box::new(oo.open(self.p(p))?))
    }
    fn metadata(&self, p: &str) -> R<Meta> {
        Ok(host_meta(std::fs::metadata(self.p(p))?))
    }
    fn symlink_metadata(&self, p: &str) -> R<Meta> {
        Ok(host_meta(std::fs::symlink_metadata(self.p(p))?))
    }
    fn times(&self, p: &str) -> R<(SystemTime, SystemTime)> {
        let m = std::fs::metadata(self.p(p))?;
        Ok((m.accessed()?, m.modified()?))
    }
    fn read_dir(&self, p: &str) -> R<Vec<(String, &'static str, u64)>> {
        listing!(std::fs::read_dir(self.p(p))?, host_meta, |_: &std::fs::DirEntry| {})
    }
    fn create_dir(&self, p: &str) -> R<()> {
        std::fs::create_dir(self.p(p))
    }
    fn create_dir_all(&self, p: &str) -> R<()> {
        std::fs::create_dir_all(self.p(p))
    }
    fn remove_file(&self, p: &str) -> R<()> {
        std::fs::remove_file(self.p(p))
    }
    fn remove_dir(&self, p: &str) -> R<()> {
        std::fs::remove_dir(self.p(p))
    }
    fn remove_dir_all(&self, p: &str) -> R<()> {
        std::fs::remove_dir_all(self.p(p))
    }
    fn rename(&self, a: &str, b: &str) -> R<()> {
        std::fs::rename(self.p(a), self.p(b))
    }
    fn hard_link(&self, a: &str, b: &str) -> R<()> {
        std::fs::hard_link(self.p(a), self.p(b))
    }
    fn symlink(&self, target: &str, link: &str) -> R<()> {
        std::os::unix::fs::symlink(target, self.p(link))
    }
    fn read_link(&self, p: &str) -> R<PathBuf> {
        std::fs::read_link(self.p(p))
    }
    fn set_permissions(&self, p: &str, mode: u32) -> R<()> {
        std::fs::set_permissions(self.p(p), std::fs::Permissions::from_mode(mode))
    }
    fn set_times(&self, p: &str, atime: SystemTime, mtime: SystemTime) -> R<()> {
        std::fs::File::open(self.p(p))?.set_times(std::fs::FileTimes::new().set_accessed(atime).set_modified(mtime))
    }
    fn copy(&self, a: &str, b: &str) -> R<u64> {
        std::fs::copy(self.p(a), self.p(b))
    }
    fn read(&self, p: &str) -> R<Vec<u8>> {
        std::fs::read(self.p(p))
    }
    fn read_to_string(&self, p: &str) -> R<String> {
        std::fs::read_to_string(self.p(p))
    }
    fn write(&self, p: &str, data: &[u8]) -> R<()> {
        std::fs::write(self.p(p), data)
    }
    fn exists(&self, p: &str) -> bool {
        self.p(p).exists()
    }
    fn try_exists(&self, p: &str) -> R<bool> {
        self.p(p).try_exists()
    }
}

struct Img(Filesystem);

impl Env for Img {
    fn open(&self, p: &str, o: Opts) -> R<Box<dyn AnyFile>> {
        let mut oo = OpenOptions::new();
        set_opts!(oo, o);
        Ok(Box::new(self.0.open_file(p, &oo)?))
    }
    fn metadata(&self, p: &str) -> R<Meta> {
        Ok(img_meta(self.0.metadata(p)?))
    }
    fn symlink_metadata(&self, p: &str) -> R<Meta> {
        Ok(img_meta(self.0.symlink_metadata(p)?))
    }
    fn times(&self, p: &str) -> R<(SystemTime, SystemTime)> {
        let m = self.0.metadata(p)?;
        Ok((m.accessed()?, m.modified()?))
    }
    fn read_dir(&self, p: &str) -> R<Vec<(String, &'static str, u64)>> {
        listing!(self.0.read_dir(p)?, img_meta, |e: &uext4::DirEntry| assert_eq!(
            e.path(),
            Path::new(p).join(e.file_name())
        ))
    }
    fn create_dir(&self, p: &str) -> R<()> {
        Ok(self.0.create_dir(p)?)
    }
    fn create_dir_all(&self, p: &str) -> R<()> {
        Ok(self.0.create_dir_all(p)?)
    }
    fn remove_file(&self, p: &str) -> R<()> {
        Ok(self.0.remove_file(p)?)
    }
    fn remove_dir(&self, p: &str) -> R<()> {
        Ok(self.0.remove_dir(p)?)
    }
    fn remove_dir_all(&self, p: &str) -> R<()> {
        Ok(self.0.remove_dir_all(p)?)
    }
    fn rename(&self, a: &str, b: &str) -> R<()> {
        Ok(self.0.rename(a, b)?)
    }
    fn hard_link(&self, a: &str, b: &str) -> R<()> {
        Ok(self.0.hard_link(a, b)?)
    }
    fn symlink(&self, target: &str, link: &str) -> R<()> {
        Ok(self.0.symlink(target, link)?)
    }
    fn read_link(&self, p: &str) -> R<PathBuf> {
        Ok(self.0.read_link(p)?)
    }
    fn set_permissions(&self, p: &str, mode: u32) -> R<()> {
        Ok(self.0.set_permissions(p, Permissions::from_mode(mode))?)
    }
    fn set_times(&self, p: &str, atime: SystemTime, mtime: SystemTime) -> R<()> {
        Ok(self.0.set_times(p, FileTimes::new().set_accessed(atime).set_modified(mtime))?)
    }
    fn copy(&self, a: &str, b: &str) -> R<u64> {
        Ok(self.0.copy(a, b)?)
    }
    fn read(&self, p: &str) -> R<Vec<u8>> {
        Ok(self.0.read(p)?)
    }
    fn read_to_string(&self, p: &str) -> R<String> {
        Ok(self.0.read_to_string(p)?)
    }
    fn write(&self, p: &str, data: &[u8]) -> R<()> {
        Ok(self.0.write(p, data)?)
    }
    fn exists(&self, p: &str) -> bool {
        self.0.exists(p)
    }
    fn try_exists(&self, p: &str) -> R<bool> {
        Ok(self.0.try_exists(p)?)
    }
}

/// Several outcomes logged as one.
fn both<T>(v: T) -> R<T> {
    Ok(v)
}

/// An outcome as compared: the value, or the error's kind and errno.
fn show<T: Debug>(r: R<T>) -> String {
    match r {
        Ok(v) => format!("Ok({v:?})"),
        Err(e) => format!("Err({:?}, {:?})", e.kind(), e.raw_os_error()),
    }
}

/// The sequence of calls; every outcome is logged with its step's name.
/// Everything happens under `t/` (an image's root also holds lost+found).
fn script(env: &dyn Env) -> Vec<String> {
    let mut log = Vec::new();
    let mut step = |name: &str, outcome: String| log.push(format!("{name}: {outcome}"));
    let mut buf = vec![0u8; 64];

    step("mkdir t", show(env.create_dir("t")));
    // Whole-file write/read, and open with each flag.
    step("write f", show(env.write("t/f", b"hello")));
    step("read f", show(env.read("t/f")));
    step("read_to_string f", show(env.read_to_string("t/f")));
    step(
        "append",
        show(env.open("t/f", Opts { append: true, ..Default::default() }).and_then(|mut f| f.write_all(b" world"))),
    );
    step("read after append", show(env.read_to_string("t/f")));
    step(
        "append after seek",
        show(env.open("t/f", Opts { read: true, append: true, ..Default::default() }).and_then(|mut f| {
            f.seek(SeekFrom::Start(0))?;
            f.write_all(b"!")?;
            f.stream_position()
        })),
    );
    step(
        "truncate open",
        show(
            env.open("t/f", Opts { write: true, truncate: true, ..Default::default() })
                .and_then(|mut f| f.write_all(b"x")),
        ),
    );
    step("read after truncate", show(env.read("t/f")));
    // Seek past the end and write: a hole that reads as zeros.
    step(
        "hole",
        show(env.open("t/g", Opts { read: true, write: true, create: true, ..Default::default() }).and_then(
            |mut f| {
                f.write_all(b"0123456789")?;
                let end = f.seek(SeekFrom::Start(10_000))?;
                f.write_all(b"end")?;
                let len = f.meta()?.len;
                f.seek(SeekFrom::Start(0))?;
                let mut all = Vec::new();
                f.read_to_end(&mut all)?;
                let zeros = all[10..10_000].iter().all(|&b| b == 0);
                let mut b = [0u8; 5];
                let n = f.pread(&mut b, 9_998)?;
                let back = f.seek(SeekFrom::End(-3))?;
                let cur = f.seek(SeekFrom::Current(1))?;
                Ok((end, len, all.len(), zeros, n, b, back, cur))
            },
        )),
    );
    step(
        "set_len and write_at",
        show(env.open("t/g", Opts { read: true, write: true, ..Default::default() }).and_then(|f| {
            f.truncate_to(50)?;
            let short = f.meta()?.len;
            f.truncate_to(5000)?;
            let long = f.meta()?.len;
            let n = f.pwrite(b"abc", 4998)?;
            let mut b = [9u8; 8];
            let r = f.pread(&mut b, 45)?;
            f.sync()?;
            Ok((short, long, n, f.meta()?.len, r, b))
        })),
    );
    step("read g", show(env.read("t/g").map(|v| (v.len(), v[..10].to_vec(), v[4990..].to_vec()))));
    // Opening: what exists, what does not, what the flags refuse.
    step(
        "create_new existing",
        show(env.open("t/f", Opts { write: true, create_new: true, ..Default::default() }).map(|_| ())),
    );
    step(
        "create_new fresh",
        show(
            env.open("t/h", Opts { write: true, create_new: true, mode: Some(0o640), ..Default::default() })
                .map(|_| ()),
        ),
    );
    step("mode of created", show(env.metadata("t/h")));
    step("open missing", show(env.open("t/nope", ro()).map(|_| ())));
    step(
        "create in missing dir",
        show(env.open("t/nodir/x", Opts { write: true, create: true, ..Default::default() }).map(|_| ())),
    );
    step("no access mode", show(env.open("t/f", Opts::default()).map(|_| ())));
    step(
        "truncate without write",
        show(env.open("t/f", Opts { read: true, truncate: true, ..Default::default() }).map(|_| ())),
    );
    step(
        "create without write",
        show(env.open("t/f", Opts { read: true, create: true, ..Default::default() }).map(|_| ())),
    );
    step(
        "append with truncate",
        show(env.open("t/f", Opts { append: true, truncate: true, ..Default::default() }).map(|_| ())),
    );
    step("write to read-only open", show(env.open("t/f", ro()).and_then(|mut f| f.write(b"x"))));
    step(
        "read from write-only open",
        show(env.open("t/f", Opts { write: true, ..Default::default() }).and_then(|mut f| f.read(&mut buf))),
    );
    step("set_len of read-only open", show(env.open("t/f", ro()).and_then(|f| f.truncate_to(0))));
    step("seek beyond i64", show(env.open("t/f", ro()).and_then(|mut f| f.seek(SeekFrom::Start(u64::MAX)))));
    step(
        "create with a trailing slash",
        show(env.open("t/newdir/", Opts { write: true, create: true, ..Default::default() }).map(|_| ())),
    );
    step("seek before start", show(env.open("t/f", ro()).and_then(|mut f| f.seek(SeekFrom::End(-100)))));
    step(
        "chmod through a read-only open",
        show(env.open("t/h", ro()).and_then(|f| f.chmod(0o604).and_then(|()| f.meta()))),
    );
    // Directories.
    step("mkdir d", show(env.create_dir("t/d")));
    step("mkdir d again", show(env.create_dir("t/d")));
    step("write d/a", show(env.write("t/d/a", b"a")));
    step("open dir read-only", show(env.open("t/d", ro()).map(|_| ())));
    step("read from dir", show(env.open("t/d", ro()).and_then(|mut f| f.read(&mut buf))));
    step("open dir for writing", show(env.open("t/d", Opts { write: true, ..Default::default() }).map(|_| ())));
    step("write over dir", show(env.write("t/d", b"x")));
    step("read dir as file", show(env.read("t/d")));
    step("remove_dir non-empty", show(env.remove_dir("t/d")));
    step("remove_file on dir", show(env.remove_file("t/d")));
    step("remove_dir on file", show(env.remove_dir("t/f")));
    step("remove_file missing", show(env.remove_file("t/nope")));
    step("metadata through a file", show(env.metadata("t/f/x")));
    step("read_dir of a file", show(env.read_dir("t/f")));
    step("read_dir missing", show(env.read_dir("t/nope")));
    // Renames.
    step("rename file over file", show(env.rename("t/f", "t/h")));
    step("after rename", show(both((env.exists("t/f"), env.read("t/h").ok()))));
    step("mkdir d2", show(env.create_dir("t/d2")));
    step("write d2/x", show(env.write("t/d2/x", b"x")));
    step("mkdir d3", show(env.create_dir("t/d3")));
    step("rename dir over non-empty dir", show(env.rename("t/d3", "t/d2")));
    step("rename dir over empty dir", show(env.rename("t/d2", "t/d3")));
    step("rename dir over file", show(env.rename("t/d3", "t/h")));
    step("rename file over dir", show(env.rename("t/h", "t/d")));
    step("rename missing", show(env.rename("t/nope", "t/x")));
    step("rename dir into itself", show(env.rename("t/d", "t/d/sub")));
    // Links.
    step("hard_link", show(env.hard_link("t/h", "t/h2")));
    step("nlink", show(env.metadata("t/h")));
    step("hard_link over existing", show(env.hard_link("t/h", "t/g")));
    step("hard_link of a dir", show(env.hard_link("t/d", "t/dl")));
    step("symlink", show(env.symlink("h", "t/s")));
    step("symlink over existing", show(env.symlink("h", "t/g")));
    step("read_link", show(env.read_link("t/s")));
    step("read_link of a file", show(env.read_link("t/h")));
    step("metadata of symlink", show(env.metadata("t/s")));
    step("symlink_metadata", show(env.symlink_metadata("t/s")));
    step("read through symlink", show(env.read("t/s")));
    step("dangling symlink", show(env.symlink("missing", "t/dangling")));
    step("dangling exists", show(both((env.exists("t/dangling"), env.try_exists("t/dangling").ok()))));
    step("dangling metadata", show(env.metadata("t/dangling")));
    step("dangling symlink_metadata", show(env.symlink_metadata("t/dangling")));
    step(
        "create_new on dangling",
        show(env.open("t/dangling", Opts { write: true, create_new: true, ..Default::default() }).map(|_| ())),
    );
    step("symlink loop", show(env.symlink("loop", "t/loop").and_then(|()| env.metadata("t/loop"))));
    step("dir symlink", show(env.symlink("d3", "t/ds")));
    step("write through dir symlink", show(env.write("t/ds/y", b"yy")));
    // Listing, with types and sizes.
    step("read_dir t", show(env.read_dir("t")));
    step("read_dir d3", show(env.read_dir("t/d3")));
    // create_dir_all / remove_dir_all.
    step("create_dir_all", show(env.create_dir_all("t/p/q/r")));
    step("create_dir_all again", show(env.create_dir_all("t/p/q/r")));
    step("create_dir_all through a file", show(env.create_dir_all("t/h/x/y")));
    step("create_dir_all on a file", show(env.create_dir_all("t/h")));
    step("write p/q/f", show(env.write("t/p/q/f", b"deep")));
    step("symlink in p", show(env.symlink("../h", "t/p/hl")));
    step("remove_dir_all p", show(env.remove_dir_all("t/p")));
    step("p gone, h kept", show(both((env.exists("t/p"), env.read("t/h").ok()))));
    step("remove_dir_all of a file", show(env.remove_dir_all("t/h")));
    step("remove_dir_all of a dir symlink", show(env.remove_dir_all("t/ds")));
    step("ds gone, d3 kept", show(both((env.exists("t/ds"), env.read_dir("t/d3")))));
    step("remove_dir_all missing", show(env.remove_dir_all("t/nope")));
    // copy, permissions, times.
    step("set_permissions h", show(env.set_permissions("t/h", 0o600)));
    step("copy h", show(env.copy("t/h", "t/c")));
    step("copy result", show(both((env.read("t/c"), env.metadata("t/c")))));
    step("copy over existing", show(env.copy("t/g", "t/c")));
    step("copy result 2", show(env.metadata("t/c")));
    step("copy missing", show(env.copy("t/nope", "t/c2")));
    step("copy of a dir", show(env.copy("t/d", "t/c3")));
    step("set_permissions through symlink", show(env.set_permissions("t/s", 0o4751)));
    step("perm of target", show(both((env.symlink_metadata("t/s"), env.metadata("t/h")))));
    step("set_permissions missing", show(env.set_permissions("t/nope", 0o600)));
    let at = UNIX_EPOCH + Duration::new(1_000_000_000, 123_456_789);
    let mt = UNIX_EPOCH + Duration::new(1_500_000_000, 987_654_321);
    step("set_times", show(env.set_times("t/h", at, mt)));
    step("times", show(env.times("t/h")));
    step("set_times before the epoch", show(env.set_times("t/h", UNIX_EPOCH - Duration::new(100, 250_000_000), mt)));
    step("times 2", show(env.times("t/h")));
    step(
        "exists",
        show(both((
            env.exists("t/h"),
            env.exists("t/nope"),
            env.try_exists("t/nope").ok(),
            env.try_exists("t/h/x").is_err(),
        ))),
    );
    // Invalid UTF-8.
    step("write non-utf8", show(env.write("t/bin", &[0xff, 0xfe])));
    step("read_to_string non-utf8", show(env.read_to_string("t/bin")));
    step("read_dir t at the end", show(env.read_dir("t")));
    log
}

#[test]
fn same_calls_same_results_as_std() {
    let host_dir = tempfile::tempdir().unwrap();
    let host = script(&Host(host_dir.path().to_path_buf()));
    if std::env::var_os("STD_API_LOG").is_some() {
        eprintln!("{}", host.join("\n"));
    }
    let (_d, img, fs) = new_image(32);
    fs.set_umask(process_umask());
    let env = Img(fs);
    let image = script(&env);
    let mut diffs = Vec::new();
    for (h, i) in host.iter().zip(&image) {
        if h != i {
            diffs.push(format!("host:  {h}\nimage: {i}"));
        }
    }
    assert_eq!(host.len(), image.len());
    assert!(diffs.is_empty(), "{} difference(s):\n{}", diffs.len(), diffs.join("\n"));
    finish(env.0, &img);
}

/// The handles cross threads.
#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<uext4::File>();
    send_sync::<uext4::Filesystem>();
    send_sync::<uext4::Metadata>();
    send_sync::<uext4::DirEntry>();
    fn send<T: Send>() {}
    send::<uext4::ReadDir>();
}

/// Many `File`s on one `Filesystem` from many threads: each thread writes
/// its own file through `Write` and its stripes of a shared file through
/// `write_at`; a reader thread reads the files while they grow.
#[test]
fn many_files_many_threads() {
    const THREADS: usize = 4;
    const CHUNK: usize = 3000;
    const CHUNKS: usize = 40;
    let (_d, img, fs) = new_image(64);
    let fs = Arc::new(fs);
    let shared = Arc::new(fs.open_file("/shared", OpenOptions::new().read(true).write(true).create(true)).unwrap());
    let pattern = |t: usize, c: usize| vec![(t * 31 + c) as u8; CHUNK];
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (fs, shared) = (fs.clone(), shared.clone());
            s.spawn(move || {
                let mut own = fs.open_file(format!("own{t}"), OpenOptions::new().write(true).create_new(true)).unwrap();
                for c in 0..CHUNKS {
                    own.write_all(&pattern(t, c)).unwrap();
                    // Stripe c of the shared file belongs to thread c % THREADS.
                    let stripe = c * THREADS + t;
                    shared.write_at(&pattern(t, c), (stripe * CHUNK) as u64).unwrap();
                }
                own.sync_all().unwrap();
            });
        }
        let fs = fs.clone();
        s.spawn(move || {
            // Whatever a reader sees is a prefix of what is written.
            for _ in 0..20 {
                for t in 0..THREADS {
                    if let Ok(v) = fs.read(format!("own{t}")) {
                        for (c, chunk) in v.chunks(CHUNK).enumerate() {
                            assert!(chunk.iter().all(|&b| b == pattern(t, c)[0]), "thread {t} chunk {c}");
                        }
                    }
                }
            }
        });
    });
    shared.sync_all().unwrap();
    for t in 0..THREADS {
        let v = fs.read(format!("/own{t}")).unwrap();
        assert_eq!(v.len(), CHUNK * CHUNKS);
        for c in 0..CHUNKS {
            assert_eq!(v[c * CHUNK..(c + 1) * CHUNK], pattern(t, c)[..], "own{t} chunk {c}");
        }
    }
    let v = fs.read("shared").unwrap();
    assert_eq!(v.len(), CHUNK * CHUNKS * THREADS);
    for c in 0..CHUNKS {
        for t in 0..THREADS {
            let stripe = c * THREADS + t;
            assert_eq!(v[stripe * CHUNK..(stripe + 1) * CHUNK], pattern(t, c)[..], "shared stripe {stripe}");
        }
    }
    drop(shared);
    let fs = Arc::into_inner(fs).unwrap();
    finish(fs, &img);
}

/// Groups load lazily, at their first allocation; here many threads make
/// their first allocations together on a freshly opened filesystem, again
/// and again: creates in four directories (inode groups) and writes synced
/// at once (block groups). A group's first loader and its first allocation
/// race with the group's other loaders, and none of them may take the
/// bitmap that allocation changed for a corrupt one (CI once saw a block
/// bitmap "checksum" error before loads were serialised).
#[test]
fn first_loads_of_groups_at_once() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 8;
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    // 1 KiB blocks: 8 MiB groups, 48 of them.
    mkfs_file(&img, &MkfsOptions { size: 384 << 20, block_size: Some(1024), ..Default::default() }).unwrap();
    let fs = Filesystem::open_rw(&img).unwrap();
    // Two directories in each of four inode groups (subdirectories stay
    // near their parent): creates in one group under different locks.
    for d in 0..4 {
        fs.create_dir_all(format!("/d{d}/s0")).unwrap();
        fs.create_dir(format!("/d{d}/s1")).unwrap();
    }
    drop(fs);
    let byte = |t: usize, r: usize| (t * ROUNDS + r) as u8;
    for r in 0..ROUNDS {
        let fs = Filesystem::open_rw(&img).unwrap();
        let start = std::sync::Barrier::new(THREADS);
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (fs, start) = (&fs, &start);
                s.spawn(move || {
                    start.wait();
                    let path = format!("/d{}/s{}/f{t}_{r}", t % 4, t / 4 % 2);
                    let mut f = fs.open_file(path, OpenOptions::new().write(true).create_new(true)).unwrap();
                    f.write_all(&vec![byte(t, r); 40 << 10]).unwrap();
                    f.sync_all().unwrap();
                });
            }
        });
        drop(fs);
    }
    let fs = Filesystem::open_rw(&img).unwrap();
    for t in 0..THREADS {
        for r in 0..ROUNDS {
            let v = fs.read(format!("/d{}/s{}/f{t}_{r}", t % 4, t / 4 % 2)).unwrap();
            assert!(v.len() == 40 << 10 && v.iter().all(|&b| b == byte(t, r)), "f{t}_{r}");
        }
    }
    finish(fs, &img);
}

/// A `File` open across `remove_file` keeps its data until it drops; then
/// the inode and its blocks are freed.
#[test]
fn file_open_across_remove() {
    let (_d, img, fs) = new_image(32);
    fs.create_dir("dir").unwrap();
    let before = fs.statfs();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let mut f = fs.open_file("dir/victim", OpenOptions::new().read(true).write(true).create(true)).unwrap();
    f.write_all(&data).unwrap();
    fs.remove_file("dir/victim").unwrap();
    assert_eq!(io::Error::from(fs.metadata("dir/victim").unwrap_err()).kind(), io::ErrorKind::NotFound);
    // Still readable and writable through the open File.
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut back = Vec::new();
    f.read_to_end(&mut back).unwrap();
    assert_eq!(back, data);
    f.write_all(b"more").unwrap();
    f.sync_all().unwrap();
    let m = f.metadata().unwrap();
    assert_eq!((m.nlink(), m.len()), (0, data.len() as u64 + 4));
    assert!(fs.read_dir("dir").unwrap().next().is_none());
    drop(f);
    fs.commit().unwrap();
    let after = fs.statfs();
    assert_eq!(after.free_inodes, before.free_inodes);
    assert_eq!(after.free_blocks, before.free_blocks);
    finish(fs, &img);
}

/// Code that returns `io::Result` uses `?` on uext4 calls.
fn io_result_code(fs: &Filesystem) -> io::Result<u64> {
    fs.create_dir_all("q/r")?;
    let mut f = fs.open_file("q/r/file", OpenOptions::new().write(true).create(true))?;
    f.write_all(b"through ?")?;
    let n = fs.metadata("q/r/file")?.len();
    fs.metadata("q/r/missing")?;
    Ok(n)
}

#[test]
fn question_mark_in_io_result_code() {
    let (_d, img, fs) = new_image(32);
    let e = io_result_code(&fs).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    assert_eq!(fs.read("q/r/file").unwrap(), b"through ?");
    // Every mapped errno gives std's kind; Error::Io passes through.
    let cases: Vec<(uext4::Error, io::ErrorKind)> = vec![
        (uext4::Error::Exists("x".into()), io::ErrorKind::AlreadyExists),
        (uext4::Error::NotDir("x".into()), io::ErrorKind::NotADirectory),
        (uext4::Error::IsDir("x".into()), io::ErrorKind::IsADirectory),
        (uext4::Error::NotEmpty("x".into()), io::ErrorKind::DirectoryNotEmpty),
        (uext4::Error::ReadOnly("x".into()), io::ErrorKind::ReadOnlyFilesystem),
        (uext4::Error::NoSpace("x".into()), io::ErrorKind::StorageFull),
        (uext4::Error::Invalid("x".into()), io::ErrorKind::InvalidInput),
        (uext4::Error::NotPermitted("x".into()), io::ErrorKind::PermissionDenied),
        (uext4::Error::Unsupported("x".into()), io::ErrorKind::Unsupported),
        (uext4::Error::Io(io::Error::new(io::ErrorKind::TimedOut, "device")), io::ErrorKind::TimedOut),
    ];
    for (err, kind) in cases {
        let errno = err.errno();
        let passthrough = matches!(err, uext4::Error::Io(_));
        let io = io::Error::from(err);
        assert_eq!(io.kind(), kind);
        if !passthrough {
            assert_eq!(io.raw_os_error(), Some(errno));
        }
    }
    finish(fs, &img);
}

/// Listings longer than one batch of the inode-level readdir, entry paths
/// and metadata; canonicalize; xattrs by path; direct I/O through a File.
#[test]
fn long_listing_canonicalize_xattr_direct() {
    let (_d, img, fs) = new_image(32);
    fs.create_dir_all("/big/sub").unwrap();
    let mut want: Vec<String> = (0..300).map(|i| format!("entry-{i:03}")).collect();
    for n in &want {
        fs.write(format!("/big/{n}"), n.as_bytes()).unwrap();
    }
    want.push("sub".into());
    want.sort();
    let mut got: Vec<String> = Vec::new();
    for e in fs.read_dir("/big").unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        assert_eq!(e.path(), Path::new("/big").join(&name));
        let m = e.metadata().unwrap();
        if name == "sub" {
            assert!(m.is_dir() && e.file_type().unwrap().is_dir());
        } else {
            assert_eq!(m.len(), name.len() as u64);
        }
        got.push(name);
    }
    got.sort();
    assert_eq!(got, want);

    fs.symlink("/big/sub", "/link").unwrap();
    fs.symlink("../entry-007", "/big/sub/rel").unwrap();
    assert_eq!(fs.canonicalize("link/./rel").unwrap(), Path::new("/big/entry-007"));
    assert_eq!(fs.canonicalize("/big/sub/../../link").unwrap(), Path::new("/big/sub"));
    assert_eq!(fs.canonicalize("/").unwrap(), Path::new("/"));
    assert_eq!(io::Error::from(fs.canonicalize("/big/entry-001/x").unwrap_err()).raw_os_error(), Some(libc::ENOTDIR));
    assert_eq!(io::Error::from(fs.canonicalize("/nope").unwrap_err()).raw_os_error(), Some(libc::ENOENT));

    fs.xattr_set("link", "user.origin", b"test").unwrap();
    assert_eq!(fs.xattr_get("/big/sub", "user.origin").unwrap().as_deref(), Some(&b"test"[..]));
    assert_eq!(fs.xattr_get("/big/sub", "user.none").unwrap(), None);
    assert!(fs.xattr_list("/big/sub").unwrap().iter().any(|n| n == "user.origin"));
    fs.xattr_remove("/big/sub", "user.origin").unwrap();
    assert_eq!(
        io::Error::from(fs.xattr_remove("/big/sub", "user.origin").unwrap_err()).raw_os_error(),
        Some(libc::ENODATA)
    );

    let mut d = fs.open_file("/direct", OpenOptions::new().read(true).write(true).create(true).direct(true)).unwrap();
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    d.write_all(&data).unwrap();
    d.write_at(b"XYZ", 4095).unwrap();
    d.sync_data().unwrap();
    let mut back = vec![0u8; 10_000];
    d.read_exact_at(&mut back, 0).unwrap();
    let mut want = data.clone();
    want[4095..4098].copy_from_slice(b"XYZ");
    assert_eq!(back, want);
    drop(d);
    assert_eq!(fs.read("/direct").unwrap(), want);
    finish(fs, &img);
}

/// On a read-only filesystem files open for reading, writing opens fail
/// with EROFS; a File outlives the Filesystem it came from.
#[test]
fn read_only_and_outliving_the_filesystem() {
    let (_d, img, fs) = new_image(32);
    fs.write("/a", b"contents").unwrap();
    let kept = fs.open_file("/a", OpenOptions::new().read(true).write(true)).unwrap();
    drop(fs);
    // The core lives on in the File: reads work, writes are refused.
    let mut s = String::new();
    (&kept).read_to_string(&mut s).unwrap();
    assert_eq!(s, "contents");
    assert_eq!((&kept).write(b"x").unwrap_err().raw_os_error(), Some(libc::EROFS));
    drop(kept);
    let ro = Filesystem::open(&img).unwrap();
    assert_eq!(ro.read_to_string("a").unwrap(), "contents");
    let mut f = ro.open_file("a", OpenOptions::new().read(true)).unwrap();
    f.sync_all().unwrap();
    let mut v = Vec::new();
    f.read_to_end(&mut v).unwrap();
    assert_eq!(v, b"contents");
    for e in [
        ro.open_file("a", OpenOptions::new().write(true)).unwrap_err(),
        ro.write("b", b"x").unwrap_err(),
        ro.create_dir("c").unwrap_err(),
    ] {
        assert_eq!(io::Error::from(e).raw_os_error(), Some(libc::EROFS));
    }
    assert_eq!(io::Error::from(ro.write("nodir/b", b"x").unwrap_err()).raw_os_error(), Some(libc::ENOENT));
    drop(f);
    drop(ro);
    if rw_support::have("e2fsck") {
        rw_support::fsck_clean(&img);
    }
}
