//! End-to-end tests of the `uext4` commands that change an image: put,
//! mkdir, rm, mv, ln, truncate and fallocate, on images made by
//! `uext4 mkfs`, checked by reading back with `uext4 get`/`cat`/`stat`, by
//! debugfs and by `e2fsck -fn` (which must find the image clean after every
//! command sequence, including ones that failed).
//!
//! Every test prints `SKIP: <reason>` and returns when e2fsck or debugfs is
//! missing.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tempfile::TempDir;

mod cli_support;

use cli_support::{have, ok, one_error_line, require_loop_mount, run_ok, tool, uext4, BIN};

/// True if e2fsck and debugfs can be run (prints the skip reason otherwise).
fn have_tools() -> bool {
    ["e2fsck", "debugfs"].into_iter().all(have)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs uext4 and expects exit status 1 with exactly one `uext4: ` line
/// containing `needle`.
fn fails<I, S>(args: I, needle: &str)
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let what = format!("uext4 {args:?}");
    let line = one_error_line(&what, &uext4(&args));
    assert!(line.to_lowercase().contains(needle), "{what}: {line:?} does not mention {needle:?}");
}

/// A temporary directory with a fresh 64 MiB image (1 KiB blocks) made by
/// `uext4 mkfs`.
struct Img {
    dir: TempDir,
    img: PathBuf,
}

impl Img {
    /// A fresh image, or None (the skip printed) without e2fsck and debugfs.
    fn checked() -> Option<Img> {
        have_tools().then(Img::new)
    }

    fn new() -> Img {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("test.img");
        ok([OsStr::new("mkfs"), img.as_os_str(), OsStr::new("--size"), OsStr::new("64M")]);
        Img { dir, img }
    }

    /// Runs `uext4 CMD IMG ARGS...` and expects success.
    fn run(&self, cmd: &str, args: &[&str]) -> Vec<u8> {
        ok(self.args(cmd, args))
    }

    /// Runs `uext4 CMD IMG ARGS...` and expects one error line with `needle`.
    fn fails(&self, cmd: &str, args: &[&str], needle: &str) {
        fails(self.args(cmd, args), needle)
    }

    fn args(&self, cmd: &str, args: &[&str]) -> Vec<std::ffi::OsString> {
        let mut v = vec![cmd.into(), self.img.clone().into_os_string()];
        v.extend(args.iter().map(|a| a.into()));
        v
    }

    /// `uext4 put IMG SRC DEST`.
    fn put(&self, src: &Path, dest: &str) {
        ok([OsStr::new("put"), self.img.as_os_str(), src.as_os_str(), OsStr::new(dest)]);
    }

    fn cat(&self, path: &str) -> Vec<u8> {
        self.run("cat", &[path])
    }

    /// `Key: value` fields of `uext4 stat`.
    fn stat(&self, path: &str) -> BTreeMap<String, String> {
        let out = String::from_utf8(self.run("stat", &[path])).unwrap();
        out.lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect()
    }

    fn size(&self, path: &str) -> u64 {
        self.stat(path)["Size"].parse().unwrap()
    }

    fn exists(&self, path: &str) -> bool {
        let out = uext4(self.args("stat", &[path]));
        out.status.success()
    }

    /// `debugfs -R "stat PATH"` output.
    fn debugfs_stat(&self, path: &str) -> String {
        let mut c = tool("debugfs");
        c.arg("-R").arg(format!("stat {path}")).arg(&self.img);
        String::from_utf8(run_ok(c).stdout).unwrap()
    }

    /// A number after `key` in debugfs's stat output ("Links: 2").
    fn debugfs_field(&self, path: &str, key: &str) -> u64 {
        let s = self.debugfs_stat(path);
        let i = s.find(key).unwrap_or_else(|| panic!("no {key:?} in debugfs stat {path}: {s}"));
        s[i + key.len()..].split_whitespace().next().unwrap().parse().unwrap()
    }

    /// `e2fsck -fn` must report a clean filesystem.
    fn fsck(&self) {
        let mut c = tool("e2fsck");
        c.arg("-fn").arg(&self.img);
        run_ok(c);
    }
}

/// Deterministic pseudo-random bytes without zero runs.
fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8 | 1
        })
        .collect()
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Sets atime and mtime (with nanoseconds) without following symlinks.
fn set_times(p: &Path, atime: (i64, i64), mtime: (i64, i64)) {
    let ts = |(s, ns): (i64, i64)| {
        // SAFETY: timespec is plain old data.
        let mut t: libc::timespec = unsafe { std::mem::zeroed() };
        t.tv_sec = s as libc::time_t;
        t.tv_nsec = ns as libc::c_long;
        t
    };
    let times = [ts(atime), ts(mtime)];
    let c = cpath(p);
    // SAFETY: valid path and two valid timespecs.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
    assert_eq!(r, 0, "utimensat {}: {}", p.display(), std::io::Error::last_os_error());
}

/// Builds the source tree:
/// ```text
/// tree/             0750
///   empty           0600  0 bytes
///   one             0644  1 byte
///   f4095 f4096 f4097     pattern bytes
///   big             0755  1 MiB + 3 bytes
///   sparse          0640  8 MiB + 17 bytes, data at 0 and 5 MiB only
///   zeros           0644  200 KiB of written zeros (a hole in the image)
///   suid            4755
///   link         -> one
///   dangling     -> no/such/target
///   hard1           hard link with sub/hard2
///   fifo            0620
///   sock            socket
///   chr             char device 1:3 (as root only)
///   sub/            0700
///     hard2
///     nested        0600
///     deeper/       0755 (empty)
/// ```
/// with distinct nanosecond times on every entry. Returns the root of the tree.
fn make_tree(base: &Path) -> PathBuf {
    let t = base.join("tree");
    fs::create_dir_all(t.join("sub/deeper")).unwrap();
    let files: &[(&str, usize, u32)] = &[
        ("empty", 0, 0o600),
        ("one", 1, 0o644),
        ("f4095", 4095, 0o644),
        ("f4096", 4096, 0o644),
        ("f4097", 4097, 0o644),
        ("big", (1 << 20) + 3, 0o755),
        ("suid", 10, 0o4755),
        ("hard1", 5000, 0o644),
        ("sub/nested", 300, 0o600),
    ];
    for (i, &(name, len, mode)) in files.iter().enumerate() {
        fs::write(t.join(name), pattern(i as u64 + 1, len)).unwrap();
        fs::set_permissions(t.join(name), fs::Permissions::from_mode(mode)).unwrap();
    }
    {
        let f = fs::File::create(t.join("sparse")).unwrap();
        use std::os::unix::fs::FileExt;
        f.write_all_at(b"start of the sparse file", 0).unwrap();
        f.write_all_at(&pattern(99, 5000), 5 << 20).unwrap();
        f.set_len((8 << 20) + 17).unwrap();
        fs::set_permissions(t.join("sparse"), fs::Permissions::from_mode(0o640)).unwrap();
    }
    fs::write(t.join("zeros"), vec![0u8; 200 << 10]).unwrap();
    std::os::unix::fs::symlink("one", t.join("link")).unwrap();
    std::os::unix::fs::symlink("no/such/target", t.join("dangling")).unwrap();
    fs::hard_link(t.join("hard1"), t.join("sub/hard2")).unwrap();
    let fifo = cpath(&t.join("fifo"));
    // SAFETY: valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o620) }, 0);
    fs::set_permissions(t.join("fifo"), fs::Permissions::from_mode(0o620)).unwrap();
    let sock = std::os::unix::net::UnixListener::bind(t.join("sock")).unwrap();
    drop(sock);
    if is_root() {
        let c = cpath(&t.join("chr"));
        // SAFETY: valid path.
        assert_eq!(unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o640, libc::makedev(1, 3)) }, 0);
        // Owners other than root's survive the round trip.
        let h = cpath(&t.join("one"));
        // SAFETY: valid path.
        assert_eq!(unsafe { libc::lchown(h.as_ptr(), 1234, 5678) }, 0);
    }
    fs::set_permissions(t.join("sub"), fs::Permissions::from_mode(0o700)).unwrap();
    fs::set_permissions(&t, fs::Permissions::from_mode(0o750)).unwrap();
    // Times last, children before their directories.
    let mut entries = Vec::new();
    collect(&t, &mut entries);
    entries.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for (i, p) in entries.iter().enumerate() {
        let i = i as i64;
        set_times(p, (1_600_000_000 + i, 100_000_000 + i), (1_500_000_000 + 7 * i, 123_456_789 + i));
    }
    t
}

/// Every path under `dir` (and `dir` itself).
fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_path_buf());
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if fs::symlink_metadata(&p).unwrap().is_dir() {
            collect(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// What is compared between the source tree and the copy.
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    kind: &'static str,
    perm: u32,
    uid: u32,
    gid: u32,
    size: u64,
    mtime: (i64, i64),
    rdev: u64,
    target: Option<PathBuf>,
}

/// Relative path -> entry, for the whole tree (metadata only: reading the
/// files would change their atimes).
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Entry> {
    let mut all = Vec::new();
    collect(root, &mut all);
    all.into_iter()
        .map(|p| {
            let m = fs::symlink_metadata(&p).unwrap();
            let ft = m.file_type();
            let kind = if ft.is_dir() {
                "dir"
            } else if ft.is_file() {
                "file"
            } else if ft.is_symlink() {
                "symlink"
            } else if ft.is_fifo() {
                "fifo"
            } else if ft.is_socket() {
                "socket"
            } else if ft.is_char_device() {
                "chr"
            } else {
                "other"
            };
            let e = Entry {
                kind,
                perm: if ft.is_symlink() { 0 } else { m.mode() & 0o7777 },
                uid: m.uid(),
                gid: m.gid(),
                size: if ft.is_dir() { 0 } else { m.len() },
                mtime: (m.mtime(), m.mtime_nsec()),
                rdev: m.rdev(),
                target: ft.is_symlink().then(|| fs::read_link(&p).unwrap()),
            };
            (p.strip_prefix(root).unwrap().to_path_buf(), e)
        })
        .collect()
}

/// Asserts that `copy` holds the same tree as `src`: types, permission
/// bits, owners, sizes, mtimes, link targets, device numbers, bytes, and
/// the hard link pair.
fn assert_same_tree(src: &Path, copy: &Path) {
    let (a, mut b) = (snapshot(src), snapshot(copy));
    // A whole image copied out has the lost+found its mkfs made.
    if !a.contains_key(Path::new("lost+found")) {
        b.remove(Path::new("lost+found"));
    }
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "entry names differ");
    for (k, e) in &a {
        assert_eq!(e, &b[k], "{}", k.display());
        if e.kind == "file" {
            assert!(fs::read(src.join(k)).unwrap() == fs::read(copy.join(k)).unwrap(), "contents of {}", k.display());
        }
    }
    let h1 = fs::metadata(copy.join("hard1")).unwrap();
    let h2 = fs::metadata(copy.join("sub/hard2")).unwrap();
    assert_eq!((h1.ino(), h1.nlink()), (h2.ino(), 2), "hard link pair not kept");
}

#[test]
fn put_tree_round_trips() {
    let Some(im) = Img::checked() else { return };
    let src = make_tree(&im.dir.path().join("src"));
    im.put(&src, "/");
    im.fsck();

    // Copied out again, the tree is the same.
    let out = im.dir.path().join("out");
    fs::create_dir(&out).unwrap();
    ok([OsStr::new("get"), im.img.as_os_str(), OsStr::new("/tree"), out.as_os_str()]);
    assert_same_tree(&src, &out.join("tree"));

    // Inside the image: hard links share an inode with two links, holes
    // stay holes, atimes keep their nanoseconds.
    assert_eq!(im.debugfs_field("/tree/hard1", "Links: "), 2);
    assert_eq!(im.stat("/tree/hard1")["Inode"], im.stat("/tree/sub/hard2")["Inode"]);
    let sparse_blocks = im.debugfs_field("/tree/sparse", "Blockcount: ");
    assert!(sparse_blocks <= 64, "sparse file uses {sparse_blocks} sectors");
    assert_eq!(im.size("/tree/sparse"), (8 << 20) + 17);
    assert_eq!(im.debugfs_field("/tree/zeros", "Blockcount: "), 0, "written zeros were stored");
    assert_eq!(im.size("/tree/zeros"), 200 << 10);
    let big_blocks = im.debugfs_field("/tree/big", "Blockcount: ");
    assert!(big_blocks >= 2 * 1025, "big file has only {big_blocks} sectors");
    let atime = &im.stat("/tree/sub/nested")["Access"];
    let host_atime = {
        // The source's atime may have changed by reading it; the image keeps
        // the one `put` saw, which make_tree set with a nanosecond part.
        atime.split('.').nth(1).unwrap().split(' ').next().unwrap().to_string()
    };
    assert!(host_atime.starts_with("1000000"), "atime nanoseconds lost: {atime}");
    assert_eq!(im.stat("/tree/link")["File"], "/tree/link -> one");
    assert_eq!(im.stat("/tree/fifo")["Type"], "fifo");
    assert_eq!(im.stat("/tree/sock")["Type"], "socket");
    if is_root() {
        assert_eq!(im.stat("/tree/chr")["Device"], "1, 3 (major, minor)");
        assert_eq!((im.stat("/tree/one")["Uid"].as_str(), im.stat("/tree/one")["Gid"].as_str()), ("1234", "5678"));
    }

    // A second put merges into the existing tree and replaces the files.
    fs::write(src.join("one"), "2").unwrap();
    set_times(&src.join("one"), (1, 2), (3, 4));
    im.put(&src, "/");
    im.fsck();
    assert_eq!(im.cat("/tree/one"), b"2");
    assert_eq!(im.stat("/tree/one")["Modify"], "1970-01-01 00:00:03.000000004 +0000");
    assert_eq!(im.debugfs_field("/tree/hard1", "Links: "), 2);
}

#[test]
fn put_destinations_and_errors() {
    let Some(im) = Img::checked() else { return };
    let host = im.dir.path().join("h");
    fs::create_dir(&host).unwrap();
    let f = host.join("file.txt");
    fs::write(&f, "hello\n").unwrap();
    let d = host.join("dir");
    fs::create_dir(&d).unwrap();
    fs::write(d.join("inner"), "inner\n").unwrap();

    im.run("mkdir", &["/dst"]);
    // Into an existing directory, under its own name.
    im.put(&f, "/dst");
    assert_eq!(im.cat("/dst/file.txt"), b"hello\n");
    // To a new name (relative to the root).
    im.put(&f, "dst/renamed");
    assert_eq!(im.cat("/dst/renamed"), b"hello\n");
    // Over an existing file: replaced.
    fs::write(&f, "second\n").unwrap();
    im.put(&f, "/dst/renamed");
    assert_eq!(im.cat("/dst/renamed"), b"second\n");
    // A directory to a new name, and its contents with "dir/.".
    im.put(&d, "/copy");
    assert_eq!(im.cat("/copy/inner"), b"inner\n");
    im.run("mkdir", &["/merged"]);
    im.put(&d.join("."), "/merged");
    assert_eq!(im.cat("/merged/inner"), b"inner\n");
    im.fsck();

    // Errors: one line, exit 1, the image still clean.
    let fails_put = |src: &Path, dest: &str, needle: &str| {
        fails([OsStr::new("put"), im.img.as_os_str(), src.as_os_str(), OsStr::new(dest)], needle);
    };
    fails_put(&f, "/missing/parent/x", "no such file or directory");
    fails_put(&host.join("nope"), "/dst", "no such file or directory");
    fails_put(&d, "/dst/file.txt", "cannot overwrite non-directory with directory");
    im.fsck();
}

#[test]
fn mkdir_rm_mv_ln() {
    let Some(im) = Img::checked() else { return };
    // mkdir, -p, and errors.
    im.run("mkdir", &["/a", "b"]);
    im.fails("mkdir", &["/a"], "file exists");
    im.fails("mkdir", &["/x/y"], "no such file or directory");
    im.run("mkdir", &["-p", "/a/b/c", "/a", "p/q/r/"]);
    assert_eq!(im.stat("/a/b/c")["Type"], "directory");
    assert_eq!(im.stat("/a/b/c")["Mode"], "0755 (drwxr-xr-x)");
    assert_eq!(im.stat("/p/q/r")["Type"], "directory");
    assert_eq!(im.debugfs_field("/a", "Links: "), 3);
    im.fsck();

    // A tree to work on: many files so directories span several blocks.
    let host = im.dir.path().join("h");
    fs::create_dir_all(host.join("t/d1/d2")).unwrap();
    for i in 0..150 {
        fs::write(host.join(format!("t/d1/file-with-a-long-name-{i:04}")), format!("{i}")).unwrap();
    }
    fs::write(host.join("t/d1/d2/leaf"), "leaf").unwrap();
    fs::write(host.join("t/x"), "x content").unwrap();
    fs::write(host.join("t/y"), "y content").unwrap();
    im.put(&host.join("t"), "/");

    // rm: a directory needs -r; the root, "." and ".." are refused.
    im.fails("rm", &["/t/d1"], "is a directory");
    assert!(im.exists("/t/d1/d2/leaf"));
    im.fails("rm", &["/"], "root directory");
    im.fails("rm", &["-r", "/t/."], "refusing");
    im.fails("rm", &["/t/nope"], "no such file or directory");
    im.run("rm", &["-f", "/t/nope", "/nope/nope"]);
    im.fsck();

    // ln: a hard link, and into a directory under the target's name.
    im.run("ln", &["/t/x", "/t/x-hard"]);
    im.run("ln", &["/t/y", "/a"]);
    assert_eq!(im.debugfs_field("/t/x", "Links: "), 2);
    assert_eq!(im.cat("/a/y"), b"y content");
    im.fails("ln", &["/t/d1", "/t/dirlink"], "directory");
    im.fails("ln", &["/t/x", "/t/y"], "file exists");
    // ln -s: the target is text, relative to the link.
    im.run("ln", &["-s", "../t/x", "/a/sym"]);
    im.run("ln", &["-s", "/t/missing", "/a/dangling"]);
    assert_eq!(im.stat("/a/sym")["File"], "/a/sym -> ../t/x");
    assert_eq!(im.cat("/a/sym"), b"x content");
    assert_eq!(im.stat("/a/dangling")["File"], "/a/dangling -> /t/missing");
    im.fsck();

    // mv: into a directory, renaming over a file, a directory elsewhere.
    im.run("mv", &["/t/x-hard", "/a/b"]);
    assert_eq!(im.cat("/a/b/x-hard"), b"x content");
    let y_ino = im.stat("/t/y")["Inode"].clone();
    im.run("mv", &["/t/y", "/t/x"]);
    assert!(!im.exists("/t/y"));
    assert_eq!(im.cat("/t/x"), b"y content");
    assert_eq!(im.stat("/t/x")["Inode"], y_ino);
    // The old /t/x keeps its other name.
    assert_eq!(im.cat("/a/b/x-hard"), b"x content");
    assert_eq!(im.debugfs_field("/a/b/x-hard", "Links: "), 1);
    im.run("mv", &["/t/d1/d2", "/p"]);
    assert_eq!(im.cat("/p/d2/leaf"), b"leaf");
    im.run("mv", &["/p/d2", "/p/renamed"]);
    assert_eq!(im.cat("/p/renamed/leaf"), b"leaf");
    im.fails("mv", &["/p", "/p/q"], "invalid argument");
    im.fails("mv", &["/nope", "/a"], "no such file or directory");
    im.fsck();

    // rm -r removes a whole tree; rm a symlink removes the link only.
    im.run("rm", &["/a/sym"]);
    assert_eq!(im.cat("/t/x"), b"y content");
    im.run("rm", &["-r", "/t", "/p"]);
    assert!(!im.exists("/t"));
    assert!(!im.exists("/p"));
    im.run("rm", &["/a/y", "/a/dangling"]);
    im.run("rm", &["-r", "/a"]);
    assert!(!im.exists("/a"));
    im.fsck();
    // Everything but "b" and lost+found (if any) is gone, and all blocks
    // and inodes are back (e2fsck checks the counts).
    let ls = String::from_utf8(im.run("ls", &["/"])).unwrap();
    assert!(ls.lines().all(|l| l == "b" || l == "lost+found"), "{ls}");
}

#[test]
fn truncate_and_fallocate() {
    let Some(im) = Img::checked() else { return };
    let host = im.dir.path().join("data");
    let data = pattern(7, 70_000);
    fs::write(&host, &data).unwrap();
    im.put(&host, "/f");

    // truncate: shrink, grow (zeros), create.
    im.run("truncate", &["-s", "5000", "/f"]);
    assert_eq!(im.cat("/f"), &data[..5000]);
    im.run("truncate", &["/f", "-s", "1M"]);
    let back = im.cat("/f");
    assert_eq!(back.len(), 1 << 20);
    assert_eq!(&back[..5000], &data[..5000]);
    assert!(back[5000..].iter().all(|&b| b == 0));
    im.run("truncate", &["-s", "10K", "/new"]);
    assert_eq!(im.cat("/new"), vec![0u8; 10240]);
    im.run("truncate", &["-c", "-s", "10K", "/not-created"]);
    assert!(!im.exists("/not-created"));
    im.fails("truncate", &["-s", "1", "/"], "is a directory");
    im.fsck();

    // fallocate: allocate (size grows), keep size.
    im.run("fallocate", &["-l", "1M", "/g"]);
    assert_eq!(im.size("/g"), 1 << 20);
    assert_eq!(im.cat("/g"), vec![0u8; 1 << 20]);
    assert!(im.debugfs_field("/g", "Blockcount: ") >= 2048);
    im.run("fallocate", &["-k", "-o", "2M", "-l", "1M", "/g"]);
    assert_eq!(im.size("/g"), 1 << 20);
    assert!(im.debugfs_field("/g", "Blockcount: ") >= 4096);

    // Punch a hole and zero ranges in a file with data.
    im.put(&host, "/h");
    let mut want = data.clone();
    im.run("fallocate", &["-p", "-o", "1000", "-l", "20000", "/h"]);
    want[1000..21000].fill(0);
    assert_eq!(im.cat("/h"), want);
    im.run("fallocate", &["--zero-range", "--offset", "30000", "--length", "5000", "/h"]);
    want[30000..35000].fill(0);
    assert_eq!(im.cat("/h"), want);
    // Zero range past the end extends the file, with -k it does not.
    im.run("fallocate", &["-z", "-o", "65000", "-l", "10000", "/h"]);
    want[65000..].fill(0);
    want.resize(75000, 0);
    assert_eq!(im.cat("/h"), want);
    im.run("fallocate", &["-z", "-k", "-o", "60000", "-l", "40000", "/h"]);
    want[60000..].fill(0);
    assert_eq!(im.size("/h"), 75000);
    assert_eq!(im.cat("/h"), want);
    im.fsck();

    im.fails("fallocate", &["-l", "0", "/h"], "length");
    im.fails("fallocate", &["-l", "1K", "/"], "is a directory");
    let out = uext4(im.args("fallocate", &["-p", "-z", "-l", "1K", "/h"]));
    assert_eq!(out.status.code(), Some(2), "conflicting modes are a usage error");
    im.fsck();

    // Collapse and insert ranges (whole blocks, inside the file).
    im.put(&host, "/s");
    let mut want = data.clone();
    im.run("fallocate", &["-c", "-o", "4K", "-l", "8K", "/s"]);
    want.drain(4096..12288);
    assert_eq!(im.cat("/s"), want);
    im.run("fallocate", &["--insert-range", "-o", "0", "-l", "4K", "/s"]);
    want.splice(0..0, std::iter::repeat_n(0u8, 4096));
    assert_eq!(im.cat("/s"), want);
    im.fails("fallocate", &["-c", "-o", "100", "-l", "4K", "/s"], "nvalid");
    let out = uext4(im.args("fallocate", &["-c", "-i", "-l", "4K", "/s"]));
    assert_eq!(out.status.code(), Some(2), "collapse and insert together are a usage error");
    im.fsck();
}

/// Under a terminal (`script` gives one), `mkfs` shows a spinner and `put`
/// a progress bar that counts every file of the tree; the image is as
/// clean as without them.
#[test]
fn mkfs_and_put_show_progress_on_a_terminal() {
    if !have_tools() {
        return;
    }
    if tool("script").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
        println!("SKIP: script (util-linux) not installed: no terminal to test the progress bar on");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = make_tree(&dir.path().join("src"));
    let mut all = Vec::new();
    collect(&src, &mut all);
    let img = dir.path().join("test.img");
    let in_terminal = |cmd: String| {
        let out = tool("script").args(["-qfec", &cmd, "/dev/null"]).env("TERM", "xterm").output().unwrap();
        assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stdout));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let typescript = in_terminal(format!("{BIN} mkfs {} --size 64M", img.display()));
    // The summary line still goes to stdout, after the spinner is cleared.
    assert!(typescript.contains("blocks of 1024 bytes"), "{typescript:?}");
    let typescript = in_terminal(format!("{BIN} put {} {} /", img.display(), src.display()));
    let n = all.len();
    // The total (redraws are throttled, so not every count is drawn).
    assert!(typescript.contains(&format!(" 0/{n} files")), "files total is not {n}: {typescript:?}");
    assert!(typescript.contains("ETA"), "{typescript:?}");
    let im = Img { dir, img };
    im.fsck();
    assert_eq!(im.size("/tree/big"), (1 << 20) + 3);
}

/// `--json` keeps names and symlink targets that are not UTF-8 exact:
/// text with U+FFFD for scripts, and the raw bytes beside it.
#[test]
fn json_names_that_are_not_utf8() {
    let Some(im) = Img::checked() else { return };
    let src = im.dir.path().join("src");
    fs::create_dir(&src).unwrap();
    let bad = OsStr::from_bytes(b"bad\xff");
    fs::write(src.join(bad), "x").unwrap();
    std::os::unix::fs::symlink(bad, src.join("link")).unwrap();
    im.put(&src, "/");
    im.fsck();
    let out = ok([OsStr::new("ls"), OsStr::new("--json"), im.img.as_os_str(), OsStr::new("/src")]);
    let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let entries = &j["directories"][0]["entries"];
    assert_eq!(entries[0]["name"], "bad\u{fffd}");
    assert_eq!(entries[0]["name_bytes"], serde_json::json!([98, 97, 100, 255]));
    assert_eq!(entries[1]["name"], "link");
    assert!(entries[1].get("name_bytes").is_none());
    assert_eq!(entries[1]["target_bytes"], serde_json::json!([98, 97, 100, 255]));
    let out = ok([OsStr::new("stat"), OsStr::new("--json"), im.img.as_os_str(), OsStr::new("/src/link")]);
    let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(j["target"], "bad\u{fffd}");
    assert_eq!(j["target_bytes"], serde_json::json!([98, 97, 100, 255]));
}

/// `dumpe2fs -h` feature names of `img`.
fn features_of(img: &Path) -> Vec<String> {
    let out = tool("dumpe2fs").arg("-h").arg(img).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text.lines().find_map(|l| l.strip_prefix("Filesystem features:")).unwrap_or("").to_string();
    let mut v: Vec<String> = line.split_whitespace().map(str::to_string).collect();
    v.sort();
    v
}

/// `uext4 mkfs` makes orphan_file and metadata_csum_seed by default;
/// `-O ^orphan_file,^metadata_csum_seed` (the list may repeat) drops
/// them; unknown or unsupported names are refused, each named; every
/// image made is clean and takes a `put`.
#[test]
fn mkfs_feature_option() {
    if !have_tools() || !have("dumpe2fs") {
        return;
    }
    let im = Img::new();
    let f = features_of(&im.img);
    assert!(f.iter().any(|n| n == "orphan_file") && f.iter().any(|n| n == "metadata_csum_seed"), "{f:?}");
    let src = im.dir.path().join("src");
    fs::write(&src, pattern(3, 50_000)).unwrap();
    im.put(&src, "/a");
    assert_eq!(im.cat("/a"), pattern(3, 50_000));
    im.fsck();

    let img = im.dir.path().join("old.img");
    let mk = |extra: &[&str]| {
        let mut v: Vec<&OsStr> = vec![OsStr::new("mkfs"), img.as_os_str(), OsStr::new("-s"), OsStr::new("64M")];
        v.extend(extra.iter().map(OsStr::new));
        v.into_iter().map(|a| a.to_owned()).collect::<Vec<_>>()
    };
    ok(mk(&["-O", "^orphan_file", "-O", "^metadata_csum_seed"]));
    let f = features_of(&img);
    assert!(!f.iter().any(|n| n == "orphan_file" || n == "metadata_csum_seed"), "{f:?}");
    assert!(f.iter().any(|n| n == "metadata_csum"), "{f:?}");
    let old = Img { dir: tempfile::tempdir().unwrap(), img: img.clone() };
    old.put(&src, "/a");
    old.fsck();

    fails(mk(&["-O", "frobnicate,^orphan_file"]), "frobnicate");
    fails(mk(&["-O", "encrypt"]), "encrypt");
    fails(mk(&["-t", "ext5"]), "ext5");
    // As mke2fs: -J asks for a journal.
    ok(mk(&["-t", "ext2", "-J", "size=4"]));
    assert!(features_of(&img).iter().any(|n| n == "has_journal"));
    fails(mk(&["-C", "16384"]), "bigalloc");
    fails(mk(&["-t", "ext3", "-O", "bigalloc"]), "bigalloc needs extent");
    ok(mk(&["-t", "ext4"]));
    ok(mk(&["-O", "inline_data,ea_inode,large_dir", "-E", "encoding=utf8,encoding_flags=strict"]));
    let f = features_of(&img);
    for n in ["inline_data", "ea_inode", "large_dir", "casefold"] {
        assert!(f.iter().any(|x| x == n), "{n}: {f:?}");
    }
    let new = Img { dir: tempfile::tempdir().unwrap(), img: img.clone() };
    new.put(&src, "/a");
    assert_eq!(new.cat("/a"), pattern(3, 50_000));
    new.fsck();
    ok(mk(&["-O", "quota", "-E", "quotatype=usrquota:grpquota:prjquota"]));
    let fields = dumpe2fs_fields(&img);
    for (k, v) in [("User quota inode", "3"), ("Group quota inode", "4"), ("Project quota inode", "12")] {
        assert_eq!(fields.get(k).map(String::as_str), Some(v), "{k}");
    }
    new.put(&src, "/a");
    new.fsck();
    ok(mk(&["-O", "fast_commit"]));
    assert_eq!(dumpe2fs_fields(&img).get("Fast commit length").map(String::as_str), Some("64"));
    new.put(&src, "/a");
    new.fsck();
    ok(mk(&["-O", "mmp", "-E", "mmp_update_interval=7"]));
    assert_eq!(dumpe2fs_fields(&img).get("MMP update interval").map(String::as_str), Some("7"));
    new.put(&src, "/a");
    new.fsck();
    fails(mk(&["-O", "^has_journal,orphan_file"]), "orphan_file needs has_journal");
}

/// `dumpe2fs -h` fields of `img`, "Key" -> value.
fn dumpe2fs_fields(img: &Path) -> BTreeMap<String, String> {
    let out = tool("dumpe2fs").arg("-h").arg(img).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// mke2fs's -b, -N, -I, -J size=, -m, -L, -U and -E hash_seed=,
/// root_owner= reach the superblock as dumpe2fs shows it (and the root
/// directory's owner); unknown or bad values are refused, each named.
#[test]
fn mkfs_options_reach_the_superblock() {
    if !have_tools() || !have("dumpe2fs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("o.img");
    let mk = |extra: &[&str]| {
        let mut v: Vec<&OsStr> = vec![OsStr::new("mkfs"), img.as_os_str(), OsStr::new("-s"), OsStr::new("100M")];
        v.extend(extra.iter().map(OsStr::new));
        v.into_iter().map(|a| a.to_owned()).collect::<Vec<_>>()
    };
    let uuid = "01234567-89ab-4cde-8f01-23456789abcd";
    let seed = "fedcba98-7654-4321-8fed-cba987654321";
    let hash_opts = format!("hash_seed={seed},root_owner=1234:5678");
    let args = ["-b", "2048", "-N", "5000", "-I", "512", "-J", "size=8", "-m", "2", "-L", "vol1", "-U", uuid, "-E"];
    let mut all: Vec<&str> = args.to_vec();
    all.extend([hash_opts.as_str(), "-E", "lazy_itable_init=1,nodiscard"]);
    ok(mk(&all));
    let d = dumpe2fs_fields(&img);
    assert_eq!(d["Block size"], "2048");
    assert_eq!(d["Inode size"], "512");
    let inodes: u64 = d["Inode count"].parse().unwrap();
    let groups = d["Block count"].parse::<u64>().unwrap().div_ceil(16384);
    // As mke2fs: per group filled to whole table blocks, then down to a
    // multiple of 8 (4992 here, as mke2fs makes).
    assert!((5000 - 8 * groups..=5000 + 8 * groups).contains(&inodes), "{inodes} inodes for -N 5000");
    assert_eq!(d["Total journal size"], "8M");
    let blocks: u64 = d["Block count"].parse().unwrap();
    assert_eq!(d["Reserved block count"].parse::<u64>().unwrap(), blocks * 2 / 100);
    assert_eq!(d["Filesystem volume name"], "vol1");
    assert_eq!(d["Filesystem UUID"], uuid);
    assert_eq!(d["Directory Hash Seed"], seed);
    let im = Img { dir, img: img.clone() };
    assert_eq!(im.debugfs_field("/", "User: "), 1234);
    assert_eq!(im.debugfs_field("/", "Group: "), 5678);
    im.fsck();

    fails(mk(&["-E", "frobnicate,stride=4,lazy_itable_init=1"]), "frobnicate, stride=4");
    fails(mk(&["-E", "root_owner=me"]), "root_owner=me");
    fails(mk(&["-J", "size=8,device=/dev/x"]), "device=/dev/x");
    fails(mk(&["-U", "not-a-uuid"]), "not a uuid");
    fails(mk(&["-m", "60"]), "at most 50");
    fails(mk(&["-b", "2048", "-N", "1000000"]), "1000000 inodes");
}

/// `uext4 mkfs` takes its default block size, inode size and inode ratio
/// from mke2fs.conf as mke2fs does ($MKE2FS_CONFIG here): the type's
/// stanza, then the size class's (64 MiB is "small"); both make the same
/// geometry from the same file.
#[test]
fn mkfs_reads_mke2fs_conf() {
    if !have_tools() || !have("dumpe2fs") || !have("mke2fs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("mke2fs.conf");
    fs::write(
        &conf,
        "[defaults]\n\tblocksize = 4096\n\tinode_size = 256\n\tinode_ratio = 16384\n\n[fs_types]\n\text4 = {\n\t\t\
         features = has_journal,extent,huge_file,flex_bg,metadata_csum,64bit,dir_nlink,extra_isize\n\t\tinode_size = 512\n\t}\n\t\
         small = {\n\t\tblocksize = 2048\n\t\tinode_ratio = 32768\n\t}\n",
    )
    .unwrap();
    let (ours, theirs) = (dir.path().join("ours.img"), dir.path().join("theirs.img"));
    let out = std::process::Command::new(BIN)
        .arg("mkfs")
        .arg(&ours)
        .args(["-s", "64M"])
        .env("MKE2FS_CONFIG", &conf)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    fs::File::create(&theirs).unwrap().set_len(64 << 20).unwrap();
    run_ok({
        let mut c = tool("mke2fs");
        c.args(["-q", "-F", "-t", "ext4"]).arg(&theirs).env("MKE2FS_CONFIG", &conf);
        c
    });
    let (a, b) = (dumpe2fs_fields(&ours), dumpe2fs_fields(&theirs));
    assert_eq!(a["Block size"], "2048");
    assert_eq!(a["Inode size"], "512");
    for k in ["Block size", "Inode size", "Inode count", "Inodes per group", "Block count"] {
        assert_eq!(a.get(k), b.get(k), "{k}");
    }
    Img { dir, img: ours }.fsck();
}

/// `mkfs -U time` gives a time-based UUID as mke2fs does (version 1 and
/// the RFC 4122 variant in dumpe2fs's text, a timestamp of now, a new one
/// each time), `-U random` a version 4 one, `-U clear` the nil UUID.
#[test]
fn mkfs_uuid_time_random_clear() {
    if !have_tools() || !have("dumpe2fs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("u.img");
    let uuid_of = |how: &str| {
        ok([
            OsStr::new("mkfs"),
            img.as_os_str(),
            OsStr::new("-s"),
            OsStr::new("16M"),
            OsStr::new("-U"),
            OsStr::new(how),
        ]);
        Img { dir: tempfile::tempdir().unwrap(), img: img.clone() }.fsck();
        dumpe2fs_fields(&img)["Filesystem UUID"].clone()
    };
    let secs = |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let before = secs(std::time::SystemTime::now());
    let t1 = uuid_of("time");
    let t2 = uuid_of("time");
    let after = secs(std::time::SystemTime::now());
    for u in [&t1, &t2] {
        let hex: Vec<char> = u.chars().filter(|&c| c != '-').collect();
        assert_eq!(hex.len(), 32, "{u}");
        assert_eq!(hex[12], '1', "-U time: not version 1: {u}");
        assert!("89ab".contains(hex[16]), "-U time: not the RFC 4122 variant: {u}");
        // time_hi (12 bits after the version), time_mid, time_low: 100 ns
        // since 1582-10-15.
        let field = |r: std::ops::Range<usize>| u64::from_str_radix(&hex[r].iter().collect::<String>(), 16).unwrap();
        let ts = (field(13..16) << 48) | (field(8..12) << 32) | field(0..8);
        let unix = (ts - 0x01B2_1DD2_1381_4000) / 10_000_000;
        assert!((before..=after).contains(&unix), "-U time: {u} holds {unix}, made between {before} and {after}");
    }
    assert_ne!(t1, t2, "two -U time UUIDs are the same");
    let r = uuid_of("random");
    assert_eq!(r.chars().nth(14), Some('4'), "-U random: not version 4: {r}");
    assert_eq!(uuid_of("clear"), "<none>");
}

/// Sets host xattr `name` on `p`; false where the host's filesystem
/// takes none.
fn set_host_xattr(p: &Path, name: &str, value: &[u8]) -> bool {
    let (c, n) = (cpath(p), CString::new(name).unwrap());
    // SAFETY: NUL-terminated path and name, `value` valid for its length.
    unsafe { libc::lsetxattr(c.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) == 0 }
}

fn host_xattr(p: &Path, name: &str) -> Vec<u8> {
    let (c, n) = (cpath(p), CString::new(name).unwrap());
    let mut buf = vec![0u8; 4096];
    // SAFETY: NUL-terminated path and name, `buf` writable for its length.
    let r = unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(r >= 0, "getxattr {} {name}: {}", p.display(), std::io::Error::last_os_error());
    buf.truncate(r as usize);
    buf
}

/// Issue 23 item 7: `uext4 mkfs -O quota,ea_inode -d DIR` with values
/// too large for a block: each value kept in an EA inode charges its
/// owner one inode, as e2fsck -fn (which checks quota usage) counts.
#[test]
fn mkfs_d_ea_inode_values_are_charged_to_quota() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("one"), b"one").unwrap();
    fs::write(src.join("two"), b"two").unwrap();
    // Larger than the image's 1 KiB blocks (so kept in EA inodes), small
    // enough for a host filesystem without ea_inode.
    let xattrs = set_host_xattr(&src.join("one"), "user.big", &pattern(7, 3_000))
        && set_host_xattr(&src.join("two"), "user.big", &pattern(8, 2_000))
        && set_host_xattr(&src.join("two"), "user.small", b"s");
    if !xattrs {
        eprintln!("SKIP: the host's /tmp takes no user xattrs");
        return;
    }
    let img = dir.path().join("q.img");
    ok([
        OsStr::new("mkfs"),
        img.as_os_str(),
        OsStr::new("-s"),
        OsStr::new("32M"),
        OsStr::new("-b"),
        OsStr::new("1024"),
        OsStr::new("-O"),
        OsStr::new("quota,ea_inode"),
        OsStr::new("-d"),
        src.as_os_str(),
    ]);
    let im = Img { dir, img };
    im.fsck();
    let out = im.dir.path().join("out");
    fs::create_dir(&out).unwrap();
    ok([OsStr::new("get"), im.img.as_os_str(), OsStr::new("/"), out.as_os_str()]);
    assert_eq!(host_xattr(&out.join("two"), "user.big"), pattern(8, 2_000));
    // One data block and the value's three, charged to the file: the
    // value is in an EA inode.
    assert_eq!(im.debugfs_field("/one", "Blockcount: "), 8);
}

/// `uext4 mkfs -d DIR` copies a tree with every kind of file (special
/// files as mke2fs -d does; device nodes when root can make them on the
/// host) with modes, owners, times with nanoseconds, hard links, symlinks
/// and xattrs; DIR's own mode and times go to the root directory. e2fsck
/// is clean; uext4 and (as root) the kernel read back the exact tree.
#[test]
fn mkfs_d_copies_a_tree() {
    if !have_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = make_tree(&dir.path().join("src"));
    let xattrs = set_host_xattr(&src.join("one"), "user.mkfs", b"file value")
        && set_host_xattr(&src.join("sub"), "user.dir", &pattern(5, 300))
        && set_host_xattr(&src, "user.root", b"r");
    // An access ACL (posix_acl_xattr v2: user::rw-, user:1234:r--,
    // group::r--, mask::r--, other::r--), stored in ext4's own form.
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in
        [(1u16, 6u16, u32::MAX), (2, 4, 1234), (4, 4, u32::MAX), (0x10, 4, u32::MAX), (0x20, 4, u32::MAX)]
    {
        acl.extend(tag.to_le_bytes().into_iter().chain(perm.to_le_bytes()).chain(id.to_le_bytes()));
    }
    let acls = xattrs && set_host_xattr(&src.join("f4096"), "system.posix_acl_access", &acl);
    if !xattrs || !acls {
        eprintln!("SKIP (xattr part): the host's /tmp takes no user xattrs or ACLs");
    }
    let img = dir.path().join("d.img");
    ok([OsStr::new("mkfs"), img.as_os_str(), OsStr::new("-s"), OsStr::new("64M"), OsStr::new("-d"), src.as_os_str()]);
    let im = Img { dir, img };
    im.fsck();
    let check = |copy: &Path| {
        assert_same_tree(&src, copy);
        if xattrs {
            assert_eq!(host_xattr(&copy.join("one"), "user.mkfs"), b"file value");
            assert_eq!(host_xattr(&copy.join("sub"), "user.dir"), pattern(5, 300));
            assert_eq!(host_xattr(copy, "user.root"), b"r");
        }
        if acls {
            let want = host_xattr(&src.join("f4096"), "system.posix_acl_access");
            assert_eq!(host_xattr(&copy.join("f4096"), "system.posix_acl_access"), want);
        }
    };
    let out = im.dir.path().join("out");
    fs::create_dir(&out).unwrap();
    ok([OsStr::new("get"), im.img.as_os_str(), OsStr::new("/"), out.as_os_str()]);
    check(&out);
    assert_eq!(im.debugfs_field("/hard1", "Links: "), 2);
    assert!(im.debugfs_field("/sparse", "Blockcount: ") <= 64, "holes not kept");
    let atime = &im.stat("/sub/nested")["Access"];
    assert!(atime.split('.').nth(1).unwrap().starts_with("1000000"), "atime nanoseconds lost: {atime}");
    assert_eq!(im.stat("/fifo")["Type"], "fifo");
    assert_eq!(im.stat("/sock")["Type"], "socket");

    if !require_loop_mount("kernel part") {
        return;
    }
    let kmnt = im.dir.path().join("kernel");
    fs::create_dir(&kmnt).unwrap();
    let mounted = tool("mount").arg("-o").arg("loop,ro").arg(&im.img).arg(&kmnt).output().unwrap();
    assert!(mounted.status.success(), "the kernel refused the image: {}", String::from_utf8_lossy(&mounted.stderr));
    let r = std::panic::catch_unwind(|| check(&kmnt));
    let _ = tool("umount").arg(&kmnt).status();
    if let Err(e) = r {
        std::panic::resume_unwind(e);
    }
}

/// `uext4 mkfs -d` with `-t ext2`, `-t ext3` and `-O bigalloc -C`
/// (16 and 64 KiB clusters on 4 KiB blocks, 16 KiB on 1 KiB): the
/// features asked for (files block-mapped without extent), e2fsck clean,
/// uext4 and (as root) the kernel, mounting with that type, read back
/// the exact tree.
#[test]
fn mkfs_d_old_types_and_bigalloc() {
    if !have_tools() || !have("dumpe2fs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = make_tree(&dir.path().join("src"));
    for (args, fstype, feature) in [
        (&["-t", "ext2"][..], "ext2", None),
        (&["-t", "ext3"][..], "ext3", Some("has_journal")),
        (&["-O", "bigalloc", "-C", "16384", "-b", "4096"][..], "ext4", Some("bigalloc")),
        (&["-O", "bigalloc", "-C", "64K", "-b", "4096"][..], "ext4", Some("bigalloc")),
        (&["-O", "bigalloc", "-C", "16K", "-b", "1024"][..], "ext4", Some("bigalloc")),
    ] {
        let img = dir.path().join("t.img");
        let mut v: Vec<&OsStr> = vec![OsStr::new("mkfs"), img.as_os_str(), OsStr::new("-s"), OsStr::new("64M")];
        v.extend(args.iter().map(OsStr::new));
        v.extend([OsStr::new("-d"), src.as_os_str()]);
        ok(v);
        let f = features_of(&img);
        if let Some(n) = feature {
            assert!(f.iter().any(|x| x == n), "{args:?}: {f:?}");
        }
        let extents = f.iter().any(|x| x == "extent");
        assert_eq!(extents, fstype == "ext4", "{args:?}: {f:?}");
        let im = Img { dir: tempfile::tempdir().unwrap(), img: img.clone() };
        im.fsck();
        let flags = im.debugfs_stat("/big");
        assert_eq!(flags.contains("Flags: 0x80000"), extents, "{args:?}: {flags}");
        let out = im.dir.path().join("out");
        fs::create_dir(&out).unwrap();
        ok([OsStr::new("get"), img.as_os_str(), OsStr::new("/"), out.as_os_str()]);
        assert_same_tree(&src, &out);
        if !require_loop_mount("kernel part") {
            continue;
        }
        let kmnt = im.dir.path().join("kernel");
        fs::create_dir(&kmnt).unwrap();
        let o = tool("mount").args(["-t", fstype, "-o", "loop,ro"]).arg(&img).arg(&kmnt).output().unwrap();
        assert!(o.status.success(), "{args:?}: the kernel refused the image: {}", String::from_utf8_lossy(&o.stderr));
        let r = std::panic::catch_unwind(|| assert_same_tree(&src, &kmnt));
        umount_retrying(&kmnt);
        if let Err(e) = r {
            std::panic::resume_unwind(e);
        }
    }
}

/// Unmounts `dir`, retrying while busy (another test's process forked
/// meanwhile may hold a descriptor for an instant); detaches lazily as a
/// last resort.
fn umount_retrying(dir: &Path) {
    for attempt in 0..20 {
        if tool("umount").arg(dir).stderr(Stdio::null()).status().is_ok_and(|s| s.success()) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100 * (attempt + 1)));
    }
    let _ = tool("umount").arg("-l").arg(dir).status();
}

/// With SOURCE_DATE_EPOCH, two `mkfs -d` runs of the same tree at
/// different wall-clock times give byte-identical images (cmp), whose
/// times are the epoch's; another epoch gives another image (UUID
/// included).
#[test]
fn mkfs_d_is_reproducible() {
    if !have_tools() || !have("cmp") || !have("dumpe2fs") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = make_tree(&dir.path().join("src"));
    // A large directory (hashed) and a file of several extents' worth.
    fs::create_dir(src.join("many")).unwrap();
    for i in 0..400 {
        fs::write(src.join(format!("many/file-{i}")), pattern(i, (i as usize * 37) % 3000)).unwrap();
    }
    fs::write(src.join("large"), pattern(7, 3 << 20)).unwrap();
    let build = |name: &str, epoch: &str| {
        let img = dir.path().join(name);
        let mut c = std::process::Command::new(BIN);
        c.arg("mkfs").arg(&img).args(["-s", "48M", "-L", "repro", "-d"]).arg(&src).env("SOURCE_DATE_EPOCH", epoch);
        run_ok(c);
        img
    };
    let a = build("a.img", "1700000000");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let b = build("b.img", "1700000000");
    let mut cmp = tool("cmp");
    cmp.arg(&a).arg(&b);
    run_ok(cmp);
    let im = Img { dir: tempfile::tempdir().unwrap(), img: a.clone() };
    im.fsck();
    assert_eq!(im.stat("/many/file-7")["Change"], "2023-11-14 22:13:20.000000000 +0000");
    // make_tree's mtimes are before the epoch: kept.
    assert_eq!(im.stat("/one")["Modify"], im.stat("/one")["Access"]);
    let c = build("c.img", "1700000001");
    assert_ne!(fs::read(&a).unwrap(), fs::read(&c).unwrap());
    assert_ne!(dumpe2fs_fields(&a)["Filesystem UUID"], dumpe2fs_fields(&c)["Filesystem UUID"]);
    let d = dumpe2fs_fields(&a);
    assert_eq!(d["Mount count"], "0");
    assert_eq!(d["Last mount time"], "n/a");
    // With an MMP block (which the populating mount stamps with its host
    // and clock; mkfs cleans it) and quota files too.
    let build_f = |name: &str| {
        let img = dir.path().join(name);
        let mut c = std::process::Command::new(BIN);
        c.arg("mkfs").arg(&img).args(["-s", "48M", "-O", "mmp,quota,project", "-d"]).arg(&src);
        c.env("SOURCE_DATE_EPOCH", "1700000000");
        run_ok(c);
        img
    };
    let e = build_f("e.img");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let f = build_f("f.img");
    let mut cmp = tool("cmp");
    cmp.arg(&e).arg(&f);
    run_ok(cmp);
    Img { dir: tempfile::tempdir().unwrap(), img: e }.fsck();
}
