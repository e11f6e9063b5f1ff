//! End-to-end tests of the `uext4` command on images made by mkfs.ext4 -d.
//!
//! Every test prints `SKIP: <reason>` and returns when e2fsprogs is missing.
//! Times are compared in UTC (TZ=UTC for every tool run here).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use tempfile::TempDir;

mod cli_support;

use cli_support::{have, ok, one_error_line, run_ok, tool, uext4, BIN};

/// The time every source entry gets; `NS` is its nanosecond part.
const DATE: &str = "2021-03-04 05:06:07.123456789";
const NS: u32 = 123_456_789;
/// `DATE` as `uext4 stat` prints it.
const STAT_DATE: &str = "2021-03-04 05:06:07.123456789 +0000";
/// Size of the big file: over the 1 MiB chunk, not a multiple of it.
const BIG: usize = (1 << 20) + (1 << 19) + 123;

/// Runs uext4 and expects success without any stderr output; its stdout
/// is text.
fn uext4_ok<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    String::from_utf8(ok(args)).expect("UTF-8 output")
}

/// Asserts a failure with exit status 1, exactly one `uext4: ` line on
/// stderr containing `needle`, and nothing on stdout.
fn assert_one_error(out: &Output, needle: &str) {
    let line = one_error_line("uext4", out);
    assert!(line.contains(needle), "{line:?} does not mention {needle:?}");
    assert!(out.stdout.is_empty(), "stdout not empty: {:?}", String::from_utf8_lossy(&out.stdout));
}

/// Deterministic pseudo-random bytes (xorshift), so the big file has no
/// zero runs that could hide a read at the wrong offset.
fn pattern(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn set_mode(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
}

/// Sets a user xattr on the source; false if the host filesystem refuses.
fn try_set_xattr(p: &Path, name: &str, value: &[u8]) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings and a valid value buffer.
    unsafe { libc::lsetxattr(c.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) == 0 }
}

fn get_xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid strings; `buf` is writable for its length.
    let r = unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (r >= 0).then(|| {
        buf.truncate(r as usize);
        buf
    })
}

/// A source tree, its image (4 KiB blocks), and where things are.
struct Fixture {
    dir: TempDir,
    src: PathBuf,
    img: PathBuf,
    /// The user xattr made it into the image (host supports user xattrs).
    xattr: bool,
    /// Nanosecond times are in the image (mkfs kept them or debugfs set them).
    ns: bool,
}

/// Builds:
/// ```text
/// tree/            0755
///   hello.txt      0640  "hello world\n"  (user.color = "blue" when possible)
///   big.bin        0644  BIG bytes of pattern()
///   empty.txt      0600  ""
///   suid           4755  "#!/bin/sh\n"
///   link        -> hello.txt
///   hard           hard link to dir/nested.txt
///   fifo           fifo 0644
///   dir/           0750
///     nested.txt   0644  "nest\n"
///     sub/         0700
///       deep.txt   0644  "deep\n"
/// ```
/// with every time set to DATE, then `mkfs.ext4 -b 4096 -d`.
fn fixture(mkfs_opts: &[&str]) -> Option<Fixture> {
    if !have("mkfs.ext4") {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let t = src.join("tree");
    fs::create_dir_all(t.join("dir/sub")).unwrap();
    fs::write(t.join("hello.txt"), "hello world\n").unwrap();
    fs::write(t.join("big.bin"), pattern(BIG)).unwrap();
    fs::write(t.join("empty.txt"), "").unwrap();
    fs::write(t.join("suid"), "#!/bin/sh\n").unwrap();
    fs::write(t.join("dir/nested.txt"), "nest\n").unwrap();
    fs::write(t.join("dir/sub/deep.txt"), "deep\n").unwrap();
    std::os::unix::fs::symlink("hello.txt", t.join("link")).unwrap();
    fs::hard_link(t.join("dir/nested.txt"), t.join("hard")).unwrap();
    run_ok({
        let mut c = tool("mkfifo");
        c.arg(t.join("fifo"));
        c
    });
    for (p, m) in [
        ("hello.txt", 0o640),
        ("big.bin", 0o644),
        ("empty.txt", 0o600),
        ("suid", 0o4755),
        ("fifo", 0o644),
        ("dir/nested.txt", 0o644),
        ("dir/sub/deep.txt", 0o644),
        ("dir/sub", 0o700),
        ("dir", 0o750),
        ("", 0o755),
    ] {
        set_mode(&t.join(p), m);
    }
    let xattr = try_set_xattr(&t.join("hello.txt"), "user.color", b"blue");
    if !xattr {
        println!("note: host filesystem has no user xattrs; xattr checks skipped");
    }
    // Times last: adding entries changes directory times.
    let mut touch = tool("touch");
    touch.arg("-h").arg("-d").arg(DATE);
    for p in [
        "hello.txt",
        "big.bin",
        "empty.txt",
        "suid",
        "link",
        "hard",
        "fifo",
        "dir/nested.txt",
        "dir/sub/deep.txt",
        "dir/sub",
        "dir",
        "",
    ] {
        touch.arg(t.join(p));
    }
    run_ok(touch);

    let img = dir.path().join("test.img");
    let mut mkfs = tool("mkfs.ext4");
    mkfs.args(["-q", "-F", "-b", "4096"]).args(mkfs_opts).arg("-d").arg(&src).arg(&img).arg("64M");
    run_ok(mkfs);

    // mkfs.ext4 before 1.47.1 drops nanoseconds; put them in with debugfs.
    let ns = ensure_ns(&img, &["/tree/hello.txt", "/tree/link", "/tree/dir"]);
    Some(Fixture { dir, src, img, xattr, ns })
}

/// Makes sure the image's mtime and atime of `paths` carry NS nanoseconds.
fn ensure_ns(img: &Path, paths: &[&str]) -> bool {
    let has_ns = |p: &str| {
        let out = uext4(["stat".as_ref(), img.as_os_str(), p.as_ref()]);
        String::from_utf8_lossy(&out.stdout).contains(&format!("Modify:      {STAT_DATE}"))
    };
    if paths.iter().all(|p| has_ns(p)) {
        return true;
    }
    for p in paths {
        for field in ["mtime_extra", "atime_extra"] {
            let cmd = format!("set_inode_field {p} {field} {}", u64::from(NS) << 2);
            let ok = tool("debugfs")
                .arg("-w")
                .arg("-R")
                .arg(&cmd)
                .arg(img)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                println!("note: debugfs unavailable and mkfs dropped nanoseconds; nanosecond checks skipped");
                return false;
            }
        }
    }
    paths.iter().all(|p| has_ns(p))
}

/// `Key: value` lines of dumpe2fs -h / uext4 info.
fn fields(text: &str) -> HashMap<String, String> {
    text.lines().filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect()
}

#[test]
fn info_matches_dumpe2fs() {
    if !have("dumpe2fs") {
        return;
    }
    for opts in [&[][..], &["-b", "1024"], &["-O", "^metadata_csum,^64bit"], &["-L", "my-label", "-I", "128"]] {
        let Some(f) = fixture(opts) else { return };
        let mut d = tool("dumpe2fs");
        d.arg("-h").arg(&f.img);
        let theirs = String::from_utf8(run_ok(d).stdout).unwrap();
        let ours = uext4_ok(["info".as_ref(), f.img.as_os_str()]);
        let (t, o) = (fields(&theirs), fields(&ours));
        for key in [
            "Filesystem volume name",
            "Filesystem UUID",
            "Filesystem magic number",
            "Filesystem revision #",
            "Filesystem features",
            "Filesystem flags",
            "Default mount options",
            "Filesystem state",
            "Errors behavior",
            "Filesystem OS type",
            "Inode count",
            "Block count",
            "Reserved block count",
            "Free blocks",
            "Free inodes",
            "First block",
            "Block size",
            "Fragment size",
            "Reserved GDT blocks",
            "Blocks per group",
            "Inodes per group",
            "Inode blocks per group",
            "Flex block group size",
            "Filesystem created",
            "Last write time",
            "Mount count",
            "Maximum mount count",
            "Inode size",
            "First inode",
            "Journal inode",
            "Default directory hash",
            "Directory Hash Seed",
            "Journal backup",
            "Checksum type",
            "Checksum",
            "Total journal blocks",
        ] {
            assert_eq!(o.get(key), t.get(key), "field {key:?} with mkfs options {opts:?}");
        }
        assert!(o.contains_key("Inode count") && o.contains_key("Filesystem UUID"));
        let uuid = &o["Filesystem UUID"];
        let parts: Vec<usize> = uuid.split('-').map(str::len).collect();
        assert_eq!(parts, [8, 4, 4, 4, 12], "UUID {uuid}");

        // --groups lists as many groups as dumpe2fs does.
        let mut d = tool("dumpe2fs");
        d.arg(&f.img);
        let all = String::from_utf8(run_ok(d).stdout).unwrap();
        let is_group = |l: &&str| l.starts_with("Group ") && l.contains(": (Blocks ");
        let theirs = all.lines().filter(is_group).count();
        let ours = uext4_ok(["info".as_ref(), "--groups".as_ref(), f.img.as_os_str()]);
        let group_lines: Vec<&str> = ours.lines().filter(is_group).collect();
        assert_eq!(group_lines.len(), theirs);
        assert!(group_lines[0].starts_with("Group 0: (Blocks "), "{}", group_lines[0]);
    }
}

/// Issue 23 item 6: `uext4 info` names every s_*_error_errcode as
/// dumpe2fs does (the kernel's EXT4_ERR_* table: 4 is EFSBADCRC, 5
/// EFSCORRUPTED), including codes past the table.
#[test]
fn info_error_codes_match_dumpe2fs() {
    if !have("dumpe2fs") || !have("debugfs") || !have("mkfs.ext4") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    fs::File::create(&img).unwrap().set_len(4 << 20).unwrap();
    // No metadata_csum: the superblock's error bytes are written raw below.
    let mut c = tool("mkfs.ext4");
    c.args(["-q", "-F", "-O", "^metadata_csum"]).arg(&img);
    run_ok(c);
    let mut d = tool("debugfs");
    d.arg("-w").arg("-f").arg("-").arg(&img).stdin(Stdio::piped());
    let mut child = d.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let cmds = "ssv error_count 2\nssv first_error_time 20240102030405\nssv last_error_time 20240102030406\n\
                ssv first_error_func ext4_lookup\nssv last_error_func ext4_iget\nssv first_error_ino 12\n";
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), cmds.as_bytes()).unwrap();
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    let field = |text: &str, key: &str| fields(text).get(key).cloned();
    for code in 0u8..=18 {
        let mut raw = fs::read(&img).unwrap();
        raw[1024 + 0x27A] = code;
        raw[1024 + 0x27B] = 18 - code;
        fs::write(&img, &raw).unwrap();
        let mut d = tool("dumpe2fs");
        d.arg("-h").arg(&img);
        let theirs = String::from_utf8(run_ok(d).stdout).unwrap();
        let ours = uext4_ok(["info".as_ref(), img.as_os_str()]);
        for key in ["First error err", "Last error err", "First error inode #", "First error function"] {
            assert_eq!(field(&ours, key), field(&theirs, key), "{key} with code {code}:\n{ours}\n{theirs}");
        }
        if code == 4 {
            assert_eq!(field(&ours, "First error err").as_deref(), Some("EFSBADCRC"));
        }
    }
    let mut e = tool("e2fsck");
    e.arg("-fn").arg(&img);
    let out = e.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn ls_plain_long_recursive() {
    let Some(f) = fixture(&[]) else { return };
    let img = f.img.as_os_str();
    let md = fs::metadata(f.src.join("tree")).unwrap();
    let (u, g) = (md.uid(), md.gid());

    assert_eq!(uext4_ok(["ls".as_ref(), img]), "lost+found\ntree\n");
    assert_eq!(
        uext4_ok(["ls".as_ref(), img, "/tree".as_ref()]),
        "big.bin\ndir\nempty.txt\nfifo\nhard\nhello.txt\nlink\nsuid\n"
    );
    assert_eq!(uext4_ok(["ls".as_ref(), "-a".as_ref(), img, "tree/dir".as_ref()]), ".\n..\nnested.txt\nsub\n");

    let long = uext4_ok(["ls".as_ref(), "-l".as_ref(), img, "/tree".as_ref()]);
    let expect_rows = [
        format!("-rw-r--r-- 1 {u} {g} {BIG} Mar  4  2021 big.bin"),
        format!("drwxr-x--- 3 {u} {g} {:>7} Mar  4  2021 dir", 4096),
        format!("-rw------- 1 {u} {g} {:>7} Mar  4  2021 empty.txt", 0),
        format!("prw-r--r-- 1 {u} {g} {:>7} Mar  4  2021 fifo", 0),
        format!("-rw-r--r-- 2 {u} {g} {:>7} Mar  4  2021 hard", 5),
        format!("-rw-r----- 1 {u} {g} {:>7} Mar  4  2021 hello.txt", 12),
        format!("lrwxrwxrwx 1 {u} {g} {:>7} Mar  4  2021 link -> hello.txt", 9),
        format!("-rwsr-xr-x 1 {u} {g} {:>7} Mar  4  2021 suid", 10),
    ];
    let lines: Vec<&str> = long.lines().collect();
    assert!(lines[0].starts_with("total "), "{long}");
    assert_eq!(&lines[1..], &expect_rows.iter().map(String::as_str).collect::<Vec<_>>()[..], "{long}");

    let rec = uext4_ok(["ls".as_ref(), "-lR".as_ref(), img, "/tree/dir".as_ref()]);
    let expect = format!(
        "/tree/dir:\ntotal 8\n\
         -rw-r--r-- 2 {u} {g}    5 Mar  4  2021 nested.txt\n\
         drwx------ 2 {u} {g} 4096 Mar  4  2021 sub\n\
         \n/tree/dir/sub:\ntotal 4\n\
         -rw-r--r-- 1 {u} {g} 5 Mar  4  2021 deep.txt\n"
    );
    assert_eq!(rec, expect);

    let rec = uext4_ok(["ls".as_ref(), "-R".as_ref(), img, "/tree/dir".as_ref()]);
    assert_eq!(rec, "/tree/dir:\nnested.txt\nsub\n\n/tree/dir/sub:\ndeep.txt\n");

    // A file operand prints just itself; a symlink operand is followed without -l.
    assert_eq!(uext4_ok(["ls".as_ref(), img, "/tree/hello.txt".as_ref()]), "/tree/hello.txt\n");
    assert_eq!(
        uext4_ok(["ls".as_ref(), "-l".as_ref(), img, "/tree/link".as_ref()]),
        format!("lrwxrwxrwx 1 {u} {g} 9 Mar  4  2021 /tree/link -> hello.txt\n")
    );
}

#[test]
fn cat_is_byte_exact() {
    let Some(f) = fixture(&[]) else { return };
    let img = f.img.as_os_str();
    let out = uext4(["cat".as_ref(), img, "/tree/big.bin".as_ref()]);
    assert!(out.status.success() && out.stderr.is_empty());
    assert_eq!(out.stdout.len(), BIG);
    assert!(out.stdout == pattern(BIG), "big.bin differs");
    assert_eq!(uext4_ok(["cat".as_ref(), img, "/tree/hello.txt".as_ref()]), "hello world\n");
    assert_eq!(uext4_ok(["cat".as_ref(), img, "/tree/empty.txt".as_ref()]), "");
    // Symlinks are followed.
    assert_eq!(uext4_ok(["cat".as_ref(), img, "tree/link".as_ref()]), "hello world\n");
    // A 1 KiB-block image maps the same file through many more blocks.
    let Some(f1) = fixture(&["-b", "1024", "-O", "^metadata_csum,^64bit"]) else { return };
    let out = uext4(["cat".as_ref(), f1.img.as_os_str(), "/tree/big.bin".as_ref()]);
    assert!(out.status.success() && out.stdout == pattern(BIG));
}

#[test]
fn cat_into_closed_pipe_is_quiet() {
    let Some(f) = fixture(&[]) else { return };
    let mut child = Command::new(BIN)
        .args(["cat".as_ref(), f.img.as_os_str(), "/tree/big.bin".as_ref()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut one = [0u8; 1];
    stdout.read_exact(&mut one).unwrap();
    drop(stdout);
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let status = child.wait().unwrap();
    assert!(err.is_empty(), "stderr after closed pipe: {err}");
    assert!(status.success(), "{status:?}");
}

#[test]
fn stat_shows_inode_fields() {
    let Some(f) = fixture(&[]) else { return };
    let img = f.img.as_os_str();
    let out = uext4_ok(["stat".as_ref(), img, "/tree/hello.txt".as_ref()]);
    let kv = fields(&out);
    let md = fs::metadata(f.src.join("tree/hello.txt")).unwrap();
    assert_eq!(kv["File"], "/tree/hello.txt");
    assert_eq!(kv["Type"], "regular file");
    assert_eq!(kv["Mode"], "0640 (-rw-r-----)");
    assert_eq!(kv["Links"], "1");
    assert_eq!(kv["Uid"], md.uid().to_string());
    assert_eq!(kv["Gid"], md.gid().to_string());
    assert_eq!(kv["Size"], "12");
    assert_eq!(kv["Blocks"], "8 (512-byte units)");
    assert_eq!(kv["IO Block"], "4096");
    assert!(kv["Flags"].starts_with("0x00080000 (extents"), "{}", kv["Flags"]);
    assert!(kv["Inode"].parse::<u32>().unwrap() > 11);
    assert!(kv.contains_key("Generation") && kv.contains_key("Change") && kv.contains_key("Birth"));
    assert!(out.contains("Extents:     1 run, 1 block\n  logical 0-0 -> physical "), "{out}");
    if f.ns {
        assert!(out.contains(&format!("Modify:      {STAT_DATE}\n")), "{out}");
        assert!(out.contains(&format!("Access:      {STAT_DATE}\n")), "{out}");
    }
    if f.xattr {
        assert!(out.contains("Xattrs:      1\n  user.color\n"), "{out}");
    }

    // The symlink itself, then (-L) its target.
    let out = uext4_ok(["stat".as_ref(), img, "/tree/link".as_ref()]);
    let kv = fields(&out);
    assert_eq!(kv["File"], "/tree/link -> hello.txt");
    assert_eq!(kv["Type"], "symbolic link");
    assert_eq!(kv["Mode"], "0777 (lrwxrwxrwx)");
    assert_eq!(kv["Size"], "9");
    assert!(!out.contains("Extents:"), "fast symlink has no block map: {out}");
    let out = uext4_ok(["stat".as_ref(), "-L".as_ref(), img, "/tree/link".as_ref()]);
    assert_eq!(fields(&out)["Type"], "regular file");

    let out = uext4_ok(["stat".as_ref(), img, "/tree/dir".as_ref()]);
    let kv = fields(&out);
    assert_eq!(kv["Type"], "directory");
    assert_eq!(kv["Mode"], "0750 (drwxr-x---)");
    assert_eq!(kv["Links"], "3");

    let out = uext4_ok(["stat".as_ref(), img, "/tree/suid".as_ref()]);
    assert_eq!(fields(&out)["Mode"], "4755 (-rwsr-xr-x)");
    let out = uext4_ok(["stat".as_ref(), img, "/tree/fifo".as_ref()]);
    assert_eq!(fields(&out)["Type"], "fifo");

    let out = uext4_ok(["stat".as_ref(), img, "/tree/big.bin".as_ref()]);
    let kv = fields(&out);
    assert_eq!(kv["Size"], BIG.to_string());
    let blocks = BIG.div_ceil(4096);
    assert!(kv["Extents"].ends_with(&format!("{blocks} blocks")), "{}", kv["Extents"]);
}

fn mtime_ns(md: &fs::Metadata) -> (i64, i64) {
    (md.mtime(), md.mtime_nsec())
}

#[test]
fn get_copies_a_tree() {
    let Some(f) = fixture(&[]) else { return };
    let img = f.img.as_os_str();
    let dest = f.dir.path().join("out");
    fs::create_dir(&dest).unwrap();
    // DEST exists: the copy goes to DEST/tree.
    let out = uext4(["get".as_ref(), img, "/tree".as_ref(), dest.as_os_str()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let root = dest.join("tree");
    let src = f.src.join("tree");

    // Nanosecond times (the image has them: see ensure_ns). The source's
    // atime changed when mkfs read it, so only the nanoseconds are compared.
    if f.ns {
        let want = fs::metadata(src.join("hello.txt")).unwrap();
        assert_eq!(want.mtime_nsec(), i64::from(NS), "source lost its nanoseconds");
        let got = fs::metadata(root.join("hello.txt")).unwrap();
        assert_eq!(mtime_ns(&got), mtime_ns(&want));
        assert_eq!(got.atime_nsec(), i64::from(NS));
        let got = fs::symlink_metadata(root.join("link")).unwrap();
        assert_eq!(mtime_ns(&got), mtime_ns(&fs::symlink_metadata(src.join("link")).unwrap()));
        let got = fs::metadata(root.join("dir")).unwrap();
        assert_eq!(got.mtime_nsec(), i64::from(NS));
    }
    if f.xattr {
        assert_eq!(get_xattr(&root.join("hello.txt"), "user.color").as_deref(), Some(&b"blue"[..]));
    }

    // Contents last: reading the copies updates their atimes.
    for p in ["hello.txt", "big.bin", "empty.txt", "suid", "hard", "dir/nested.txt", "dir/sub/deep.txt"] {
        assert_eq!(fs::read(root.join(p)).unwrap(), fs::read(src.join(p)).unwrap(), "{p}");
    }
    for p in ["", "hello.txt", "big.bin", "empty.txt", "suid", "fifo", "dir", "dir/sub", "dir/nested.txt"] {
        let (a, b) = (fs::symlink_metadata(root.join(p)).unwrap(), fs::symlink_metadata(src.join(p)).unwrap());
        assert_eq!(a.mode(), b.mode(), "mode of {p:?}: {:o} vs {:o}", a.mode(), b.mode());
        assert_eq!(a.mtime(), b.mtime(), "mtime of {p:?}");
    }
    assert!(fs::symlink_metadata(root.join("fifo")).unwrap().file_type().is_fifo());

    // Symlink kept as a symlink, with its own time.
    let l = fs::symlink_metadata(root.join("link")).unwrap();
    assert!(l.file_type().is_symlink());
    assert_eq!(fs::read_link(root.join("link")).unwrap(), Path::new("hello.txt"));
    assert_eq!(l.mtime(), fs::symlink_metadata(src.join("link")).unwrap().mtime());

    // Hard links stay hard links.
    let (a, b) = (fs::metadata(root.join("hard")).unwrap(), fs::metadata(root.join("dir/nested.txt")).unwrap());
    assert_eq!((a.dev(), a.ino()), (b.dev(), b.ino()));
    assert_eq!(a.nlink(), 2);

    // A single file to a new name, and a symlink as a symlink.
    let one = f.dir.path().join("one.txt");
    uext4_ok(["get".as_ref(), img, "/tree/dir/sub/deep.txt".as_ref(), one.as_os_str()]);
    assert_eq!(fs::read(&one).unwrap(), b"deep\n");
    let lnk = f.dir.path().join("lnk");
    uext4_ok(["get".as_ref(), img, "/tree/link".as_ref(), lnk.as_os_str()]);
    assert_eq!(fs::read_link(&lnk).unwrap(), Path::new("hello.txt"));
    // Copying again replaces files (like cp).
    uext4_ok(["get".as_ref(), img, "/tree/hello.txt".as_ref(), one.as_os_str()]);
    assert_eq!(fs::read(&one).unwrap(), b"hello world\n");
}

#[test]
fn errors_are_one_line() {
    let Some(f) = fixture(&[]) else { return };
    let img = f.img.as_os_str();
    let missing = f.dir.path().join("missing.img");
    assert_one_error(&uext4(["ls".as_ref(), missing.as_os_str()]), "missing.img");
    assert_one_error(&uext4(["info".as_ref(), missing.as_os_str()]), "No such file");
    assert_one_error(&uext4(["ls".as_ref(), img, "/nope".as_ref()]), "/nope: no such file or directory");
    assert_one_error(&uext4(["cat".as_ref(), img, "/tree/nope".as_ref()]), "no such file or directory");
    assert_one_error(&uext4(["stat".as_ref(), img, "/nope/x".as_ref()]), "no such file or directory");
    let dest = f.dir.path().join("never");
    assert_one_error(&uext4(["get".as_ref(), img, "/nope".as_ref(), dest.as_os_str()]), "no such file or directory");
    assert!(!dest.exists());
    assert_one_error(&uext4(["cat".as_ref(), img, "/tree/dir".as_ref()]), "/tree/dir: is a directory");
    assert_one_error(&uext4(["cat".as_ref(), img, "/tree/fifo".as_ref()]), "not a regular file");
    assert_one_error(&uext4(["cat".as_ref(), img, "/tree/hello.txt/x".as_ref()]), "not a directory");
    // Not an ext4 image at all.
    let junk = f.dir.path().join("junk.img");
    fs::write(&junk, vec![0u8; 8192]).unwrap();
    assert_one_error(&uext4(["stat".as_ref(), junk.as_os_str(), "/".as_ref()]), "not an ext4 filesystem");
    // Copy into a directory that does not exist.
    let bad = f.dir.path().join("no/such/dir/x");
    assert_one_error(&uext4(["get".as_ref(), img, "/tree/hello.txt".as_ref(), bad.as_os_str()]), "No such file");
    // Usage errors exit with 2 (clap).
    assert_eq!(uext4(["ls"]).status.code(), Some(2));
    assert_eq!(uext4(["frobnicate"]).status.code(), Some(2));
    let help = uext4(["get", "--help"]);
    assert!(help.status.success() && String::from_utf8_lossy(&help.stdout).contains("DEST"));
}

/// `uext4 freefrag` prints exactly what e2freefrag prints, on a fresh
/// image and on one with files in it, at 1 KiB and 4 KiB blocks.
#[test]
fn freefrag_matches_e2freefrag() {
    if !have("e2freefrag") {
        return;
    }
    for opts in [&["-b", "1024"][..], &["-b", "4096"][..]] {
        let Some(f) = fixture(opts) else { return };
        let ours = uext4_ok([OsStr::new("freefrag"), f.img.as_os_str()]);
        let theirs = run_ok({
            let mut c = tool("e2freefrag");
            c.arg(&f.img);
            c
        });
        assert_eq!(ours, String::from_utf8_lossy(&theirs.stdout), "{opts:?}");
    }
}

/// A sparse image of `gib` GiB (mkfs.ext4 `args`: no journal, no backup
/// superblocks, every group's metadata at the start, so the free space is
/// long runs) holding one file `/f` that `uext4 fallocate` allocates and
/// then punches: one hole of every size at both ends of every histogram
/// row from 1 cluster up to 2^(`rows`-1) clusters (2^(i-1) and 2^i - 1),
/// a cluster kept between holes (about 3 * 2^`rows` clusters). Wherever
/// the allocator puts the file, what is left on either side of it holds a
/// run of several GiB. e2fsck must find the image clean.
fn freefrag_image(dir: &Path, args: &[&str], gib: u64, rows: u32) -> PathBuf {
    let img = dir.join("ff.img");
    fs::File::create(&img).unwrap().set_len(gib << 30).unwrap();
    run_ok({
        let mut c = tool("mkfs.ext4");
        c.args(["-q", "-F", "-O", "^has_journal,sparse_super2", "-E", "num_backup_sb=0", "-G", "4096", "-N", "8192"]);
        c.args(args).arg(&img);
        c
    });
    let info = uext4_ok([OsStr::new("info"), img.as_os_str()]);
    let bs: u64 = fields(&info)["Block size"].parse().unwrap();
    let cluster: u64 = fields(&info).get("Cluster size").map_or(bs, |c| c.parse().unwrap());
    let mut holes = Vec::new();
    for i in 1..=rows {
        holes.push(1u64 << (i - 1));
        if i > 1 {
            holes.push((1u64 << i) - 1);
        }
    }
    let len = cluster * (holes.iter().sum::<u64>() + holes.len() as u64 + 1);
    let img_s = img.as_os_str();
    ok([OsStr::new("fallocate"), OsStr::new("-l"), OsStr::new(&len.to_string()), img_s, OsStr::new("/f")]);
    let mut off = cluster;
    for h in holes {
        let (o, l) = (off.to_string(), (h * cluster).to_string());
        ok([
            OsStr::new("fallocate"),
            OsStr::new("-p"),
            OsStr::new("-o"),
            OsStr::new(&o),
            OsStr::new("-l"),
            OsStr::new(&l),
            img_s,
            OsStr::new("/f"),
        ]);
        off += (h + 1) * cluster;
    }
    run_ok({
        let mut c = tool("e2fsck");
        c.arg("-fn").arg(&img);
        c
    });
    img
}

/// The report without its first line (`Device: NAME`).
fn without_device(report: &str) -> &str {
    assert!(report.starts_with("Device: "), "{report}");
    &report[report.find('\n').unwrap() + 1..]
}

/// `uext4 freefrag` is e2freefrag's output byte for byte where free
/// extents fill the histogram's rows from one block to several GiB, at 1
/// KiB and 4 KiB blocks: rows end at `1024K-` and `1024M-` before the
/// unit changes, and the average is whole blocks before KiB.
#[test]
fn freefrag_matches_e2freefrag_on_every_row() {
    if !have("e2freefrag") || !have("e2fsck") {
        return;
    }
    for (args, gib, rows, must) in [
        (&["-b", "1024"][..], 16, 20, &["  512K... 1024K-  :", "    1M...    2M-  :", "  512M... 1024M-  :"][..]),
        (&["-b", "4096"][..], 16, 18, &["    4K...    8K-  :", "  512K... 1024K-  :", "  512M... 1024M-  :"][..]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let img = freefrag_image(dir.path(), args, gib, rows);
        let ours = uext4_ok([OsStr::new("freefrag"), img.as_os_str()]);
        let mut c = tool("e2freefrag");
        c.arg(&img);
        let theirs = String::from_utf8(run_ok(c).stdout).unwrap();
        for m in must {
            assert!(theirs.contains(m), "{args:?}: the fixture misses the row {m:?}:\n{theirs}");
        }
        assert!(theirs.contains("G-  :"), "{args:?}: no free run of GiB:\n{theirs}");
        assert_eq!(ours, theirs, "{args:?}");
    }
}

/// On bigalloc (16 and 64 KiB clusters of 4 KiB blocks) `uext4 freefrag`
/// is e2freefrag's output as e2freefrag reads a mounted filesystem (the
/// kernel's GETFSMAP). Its offline scan cannot be the oracle there: it
/// tests the cluster bitmap at `block >> cluster_bits` through a call that
/// shifts again (misc/e2freefrag.c, scan_block_bitmap), so it reports the
/// free space of the wrong clusters.
#[test]
fn freefrag_matches_e2freefrag_on_bigalloc() {
    if !have("e2freefrag") || !have("e2fsck") || !cli_support::require_loop_mount("bigalloc oracle") {
        return;
    }
    for (args, rows) in [
        (&["-b", "4096", "-O", "bigalloc", "-C", "16384"][..], 16),
        (&["-b", "4096", "-O", "bigalloc", "-C", "65536"][..], 14),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let img = freefrag_image(dir.path(), args, 16, rows);
        let ours = uext4_ok([OsStr::new("freefrag"), img.as_os_str()]);
        let mnt = dir.path().join("mnt");
        fs::create_dir(&mnt).unwrap();
        run_ok({
            let mut c = tool("mount");
            c.args(["-o", "ro,loop"]).arg(&img).arg(&mnt);
            c
        });
        let src = run_ok({
            let mut c = tool("findmnt");
            c.args(["-n", "-o", "SOURCE"]).arg(&mnt);
            c
        });
        let dev = String::from_utf8(src.stdout).unwrap().trim().to_string();
        let theirs = tool("e2freefrag").arg(&dev).output().expect("e2freefrag");
        run_ok({
            let mut c = tool("umount");
            c.arg(&mnt);
            c
        });
        assert!(theirs.status.success(), "e2freefrag {dev}: {}", String::from_utf8_lossy(&theirs.stderr));
        let theirs = String::from_utf8(theirs.stdout).unwrap();
        for m in ["  512K... 1024K-  :", "  512M... 1024M-  :", "G-  :"] {
            assert!(theirs.contains(m), "{args:?}: the fixture misses the row {m:?}:\n{theirs}");
        }
        assert_eq!(without_device(&ours), without_device(&theirs), "{args:?}");
    }
}

/// `uext4 mbstats` loads every group and prints one line per group with
/// free counts that add up to the superblock's, then the counters.
#[test]
fn mbstats_lists_every_group() {
    let Some(f) = fixture(&["-b", "1024"]) else { return };
    let out = uext4_ok([OsStr::new("mbstats"), f.img.as_os_str()]);
    let info = uext4_ok([OsStr::new("info"), f.img.as_os_str()]);
    let free_sb: u64 = fields(&info)["Free blocks"].parse().unwrap();
    let free_groups: u64 = out
        .lines()
        .filter(|l| l.starts_with('#') && !l.starts_with("#group"))
        .map(|l| l.split(':').nth(1).unwrap().split_whitespace().next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(free_groups, free_sb, "{out}");
    assert!(out.contains("buddies_generated:"), "{out}");
    assert!(out.contains("cr_best_avail (CR1.5):"), "{out}");
}

/// `uext4 bench alloc` runs a small configuration and reports both runs.
#[test]
fn bench_alloc_small() {
    if !have("mkfs.ext4") {
        return;
    }
    let out = uext4_ok(["bench", "alloc", "--image-mib", "64", "--files", "64", "--threads", "1,2", "--json"]);
    assert_eq!(out.matches("\"threads\"").count(), 4, "{out}");
    assert!(out.contains("\"cr1_5\":true") && out.contains("\"cr1_5\":false"), "{out}");
}

// ---- --json, completions, man, progress --------------------------------

/// Runs uext4 (no stderr expected) and parses its stdout as one JSON document.
fn json<I, S>(args: I) -> serde_json::Value
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let out = uext4_ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not one JSON document ({e}): {out}"))
}

/// `debugfs -R CMD IMG` output.
fn debugfs(img: &Path, cmd: &str) -> String {
    let mut c = tool("debugfs");
    c.arg("-R").arg(cmd).arg(img);
    String::from_utf8(run_ok(c).stdout).unwrap()
}

/// The number after `key` in debugfs output ("Inode: 12").
fn debugfs_num(out: &str, key: &str) -> u64 {
    let i = out.find(key).unwrap_or_else(|| panic!("no {key:?} in {out}"));
    out[i + key.len()..].split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn info_json_matches_dumpe2fs() {
    if !have("dumpe2fs") {
        return;
    }
    for opts in [&["-b", "1024"][..], &["-O", "^metadata_csum,^64bit", "-L", "lbl"]] {
        let Some(f) = fixture(opts) else { return };
        let dump = |h: bool| {
            let mut d = tool("dumpe2fs");
            d.args(h.then_some("-h")).arg(&f.img);
            String::from_utf8(run_ok(d).stdout).unwrap()
        };
        let (t, all) = (fields(&dump(true)), dump(false));
        let num = |k: &str| t[k].parse::<u64>().unwrap_or_else(|_| panic!("{k}: {}", t[k]));
        let j = json(["info", "--json", "--groups"].map(OsStr::new).into_iter().chain([f.img.as_os_str()]));
        let sb = &j["superblock"];
        let label = match t["Filesystem volume name"].as_str() {
            "<none>" => "",
            l => l,
        };
        assert_eq!(sb["volume_name"], label, "{opts:?}");
        assert_eq!(sb["uuid"], t["Filesystem UUID"].as_str());
        assert_eq!(sb["magic"], 0xEF53);
        assert_eq!(sb["state"], t["Filesystem state"].as_str());
        let features: Vec<&str> = t["Filesystem features"].split(' ').collect();
        assert_eq!(sb["features"], serde_json::json!(features), "{opts:?}");
        for (ours, theirs) in [
            ("inode_count", "Inode count"),
            ("block_count", "Block count"),
            ("reserved_block_count", "Reserved block count"),
            ("free_blocks", "Free blocks"),
            ("free_inodes", "Free inodes"),
            ("first_block", "First block"),
            ("block_size", "Block size"),
            ("blocks_per_group", "Blocks per group"),
            ("inodes_per_group", "Inodes per group"),
            ("inode_blocks_per_group", "Inode blocks per group"),
            ("flex_bg_size", "Flex block group size"),
            ("mount_count", "Mount count"),
            ("first_inode", "First inode"),
            ("inode_size", "Inode size"),
            ("journal_inode", "Journal inode"),
            ("reserved_gdt_blocks", "Reserved GDT blocks"),
        ] {
            assert_eq!(sb[ours], num(theirs), "{ours} with {opts:?}");
        }
        assert_eq!(sb["default_directory_hash"], t["Default directory hash"].as_str());
        assert_eq!(sb["directory_hash_seed"], t["Directory Hash Seed"].as_str());
        match t.get("Checksum") {
            Some(c) => assert_eq!(sb["checksum"], u64::from_str_radix(&c[2..], 16).unwrap()),
            None => assert!(sb["checksum"].is_null()),
        }
        // Times are seconds: the text shows the same instant.
        let created = sb["created"].as_i64().unwrap();
        assert!(uext4_ok(["info".as_ref(), f.img.as_os_str()])
            .contains(&format!("Filesystem created:       {}", t["Filesystem created"])));
        assert!(created > 1_500_000_000, "{created}");
        assert_eq!(j["journal"]["total_blocks"], num("Total journal blocks"));
        assert_eq!(j["journal"]["sequence"], u64::from_str_radix(&t["Journal sequence"][2..], 16).unwrap());
        // --groups: one object per group, bitmaps where dumpe2fs has them.
        let groups = j["groups"].as_array().unwrap();
        let group_lines = all.lines().filter(|l| l.starts_with("Group ") && l.contains(": (Blocks ")).count();
        assert_eq!(groups.len(), group_lines);
        let bitmap = debugfs_num(&all, "Block bitmap at ");
        assert_eq!(groups[0]["block_bitmap"], bitmap);
        assert_eq!(groups[0]["superblock"], sb["first_block"]);
        let free: u64 = groups.iter().map(|g| g["free_blocks"].as_u64().unwrap()).sum();
        assert_eq!(free, j["group_descriptor_totals"]["free_blocks"].as_u64().unwrap());
        // Without --groups the key is absent.
        let j = json(["info", "--json"].map(OsStr::new).into_iter().chain([f.img.as_os_str()]));
        assert!(j.get("groups").is_none());
    }
}

#[test]
fn ls_json_lists_entries_with_inode_fields() {
    let Some(f) = fixture(&[]) else { return };
    let img = f.img.as_os_str();
    let md = fs::metadata(f.src.join("tree")).unwrap();
    let j = json(["ls".as_ref(), "--json".as_ref(), img, "/tree".as_ref()]);
    assert_eq!(j["path"], "/tree");
    assert!(j["file"].is_null());
    let dirs = j["directories"].as_array().unwrap();
    assert_eq!(dirs.len(), 1);
    assert_eq!(dirs[0]["path"], "/tree");
    let entries = dirs[0]["entries"].as_array().unwrap();
    let names: Vec<&str> = entries.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["big.bin", "dir", "empty.txt", "fifo", "hard", "hello.txt", "link", "suid"]);
    let by = |n: &str| entries.iter().find(|e| e["name"] == n).unwrap();
    let debugfs_ino = |p: &str| debugfs_num(&debugfs(&f.img, &format!("stat {p}")), "Inode: ");
    assert_eq!(by("big.bin")["size"], BIG as u64);
    assert_eq!(by("big.bin")["ino"], debugfs_ino("/tree/big.bin"));
    assert_eq!(by("dir")["type"], "directory");
    assert_eq!(by("dir")["permissions"], 0o750);
    assert_eq!(by("dir")["nlink"], 3);
    assert_eq!(by("fifo")["type"], "fifo");
    assert_eq!(by("hard")["nlink"], 2);
    assert_eq!(by("hard")["ino"], debugfs_ino("/tree/dir/nested.txt"));
    assert_eq!(by("hello.txt")["mode"], 0o100640);
    assert_eq!(by("hello.txt")["mode_string"], "-rw-r-----");
    assert_eq!(by("hello.txt")["uid"], md.uid());
    assert_eq!(by("hello.txt")["gid"], md.gid());
    assert_eq!(by("hello.txt")["mtime"]["sec"], 1_614_834_367);
    if f.ns {
        assert_eq!(by("hello.txt")["mtime"]["nsec"], NS);
    }
    assert_eq!(by("link")["type"], "symlink");
    assert_eq!(by("link")["target"], "hello.txt");
    assert!(by("hello.txt").get("target").is_none());
    assert_eq!(by("suid")["permissions"], 0o4755);

    // -R -a: every directory once, flat, depth-first; "." and ".." listed.
    let j = json(["ls".as_ref(), "--json".as_ref(), "-R".as_ref(), "-a".as_ref(), img, "/tree/dir".as_ref()]);
    let dirs = j["directories"].as_array().unwrap();
    let paths: Vec<&str> = dirs.iter().map(|d| d["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["/tree/dir", "/tree/dir/sub"]);
    let names: Vec<&str> = dirs[0]["entries"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, [".", "..", "nested.txt", "sub"]);
    assert_eq!(dirs[1]["entries"][2]["name"], "deep.txt");
    assert_eq!(dirs[1]["entries"][2]["size"], 5);

    // A file operand: the file itself, no directories.
    let j = json(["ls".as_ref(), "--json".as_ref(), img, "/tree/hello.txt".as_ref()]);
    assert_eq!(j["directories"], serde_json::json!([]));
    assert_eq!(j["file"]["name"], "/tree/hello.txt");
    assert_eq!(j["file"]["size"], 12);
}

#[test]
fn stat_json_matches_debugfs() {
    let Some(f) = fixture(&[]) else { return };
    if !have("debugfs") {
        return;
    }
    let img = f.img.as_os_str();
    let j = json(["stat".as_ref(), "--json".as_ref(), img, "/tree/hello.txt".as_ref()]);
    let d = debugfs(&f.img, "stat /tree/hello.txt");
    assert_eq!(j["path"], "/tree/hello.txt");
    assert_eq!(j["ino"], debugfs_num(&d, "Inode: "));
    assert_eq!(j["type"], "regular");
    assert_eq!(j["permissions"], 0o640);
    assert_eq!(j["size"], 12);
    assert_eq!(j["nlink"], debugfs_num(&d, "Links: "));
    assert_eq!(j["blocks"], debugfs_num(&d, "Blockcount: "));
    assert_eq!(j["generation"], debugfs_num(&d, "Generation: "));
    assert_eq!(j["flags"], 0x80000);
    assert_eq!(j["flag_names"][0], "extents");
    assert_eq!(j["blksize"], 4096);
    assert!(j["crtime"]["sec"].is_i64());
    let ext = j["extents"].as_array().unwrap();
    assert_eq!(ext.len(), 1);
    let bmap: u64 = debugfs(&f.img, "bmap /tree/hello.txt 0").trim().parse().unwrap();
    assert_eq!(ext[0]["physical"], bmap);
    assert_eq!(ext[0]["logical"], 0);
    assert_eq!(ext[0]["len"], 1);
    assert_eq!(ext[0]["unwritten"], false);
    if f.xattr {
        assert_eq!(j["xattrs"], serde_json::json!([{ "name": "user.color" }]));
    } else {
        assert_eq!(j["xattrs"], serde_json::json!([]));
    }

    // big.bin: the runs cover the file and start where debugfs maps block 0.
    let j = json(["stat".as_ref(), "--json".as_ref(), img, "/tree/big.bin".as_ref()]);
    let ext = j["extents"].as_array().unwrap();
    let blocks: u64 = ext.iter().map(|e| e["len"].as_u64().unwrap()).sum();
    assert_eq!(blocks, BIG.div_ceil(4096) as u64);
    let bmap: u64 = debugfs(&f.img, "bmap /tree/big.bin 0").trim().parse().unwrap();
    assert_eq!(ext[0]["physical"], bmap);

    // A fast symlink maps no blocks; -L shows the target's inode.
    let j = json(["stat".as_ref(), "--json".as_ref(), img, "/tree/link".as_ref()]);
    assert_eq!(j["type"], "symlink");
    assert_eq!(j["target"], "hello.txt");
    assert!(j["extents"].is_null());
    let j = json(["stat".as_ref(), "--json".as_ref(), "-L".as_ref(), img, "/tree/link".as_ref()]);
    assert_eq!(j["type"], "regular");
    assert!(j.get("target").is_none());
}

#[test]
fn freefrag_and_mbstats_json_match_the_tables() {
    if !have("e2freefrag") {
        return;
    }
    let Some(f) = fixture(&["-b", "1024"]) else { return };
    let img = f.img.as_os_str();
    let j = json([OsStr::new("freefrag"), OsStr::new("--json"), img]);
    let mut c = tool("e2freefrag");
    c.arg(&f.img);
    let theirs = String::from_utf8(run_ok(c).stdout).unwrap();
    let t = fields(&theirs);
    assert_eq!(j["block_size"], 1024);
    assert_eq!(j["total_blocks"], t["Total blocks"].parse::<u64>().unwrap());
    let free: u64 = t["Free blocks"].split_whitespace().next().unwrap().parse().unwrap();
    assert_eq!(j["free_blocks"], free);
    assert_eq!(j["free_extents"], t["Num. free extent"].parse::<u64>().unwrap());
    assert_eq!(j["max_free_extent_kb"], t["Max. free extent"].trim_end_matches(" KB").parse::<u64>().unwrap());
    // One histogram row per e2freefrag row, same counts.
    let rows: Vec<(u64, u64)> = theirs
        .lines()
        .filter(|l| l.contains("...") && l.contains('%'))
        .map(|l| {
            let mut n = l.split(':').nth(1).unwrap().split_whitespace();
            (n.next().unwrap().parse().unwrap(), n.next().unwrap().parse().unwrap())
        })
        .collect();
    let hist: Vec<(u64, u64)> = j["histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["free_extents"].as_u64().unwrap(), b["free_blocks"].as_u64().unwrap()))
        .collect();
    assert_eq!(hist, rows);

    let m = json([OsStr::new("mbstats"), OsStr::new("--json"), img]);
    let info = json([OsStr::new("info"), OsStr::new("--json"), img]);
    let groups = m["groups"].as_array().unwrap();
    let per_group = info["superblock"]["blocks_per_group"].as_u64().unwrap();
    let blocks = info["superblock"]["block_count"].as_u64().unwrap();
    assert_eq!(groups.len() as u64, (blocks - 1).div_ceil(per_group));
    let free_groups: u64 = groups.iter().map(|g| g["free"].as_u64().unwrap()).sum();
    assert_eq!(free_groups, info["superblock"]["free_blocks"].as_u64().unwrap());
    assert!(m["stats"]["buddies_generated"].as_u64().unwrap() >= groups.len() as u64);
    let names: Vec<&str> =
        m["stats"]["criteria"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"cr_best_avail (CR1.5)"), "{names:?}");
}

#[test]
fn completions_for_every_shell() {
    let bash = uext4_ok(["completions", "bash"]);
    for sub in ["info", "ls", "stat", "put", "get", "mkfs", "mount", "completions", "man", "--json"] {
        assert!(bash.contains(sub), "bash completion lacks {sub}");
    }
    assert!(bash.contains("complete -F _uext4"), "no bash complete command");
    assert!(uext4_ok(["completions", "zsh"]).starts_with("#compdef uext4"));
    for shell in ["fish", "elvish", "powershell"] {
        assert!(uext4_ok(["completions", shell]).contains("mkfs"), "{shell}");
    }
    let out = uext4(["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "unknown shell is a usage error");
}

#[test]
fn man_pages() {
    let page = uext4_ok(["man"]);
    assert!(page.lines().any(|l| l.starts_with(".TH uext4 1")), "no .TH line: {page}");
    assert!(page.contains(".SH SUBCOMMANDS") && page.contains("uext4\\-mkfs"), "{page}");

    let dir = tempfile::tempdir().unwrap();
    let listed = uext4_ok(["man".as_ref(), "--dir".as_ref(), dir.path().as_os_str()]);
    for name in ["uext4.1", "uext4-info.1", "uext4-bench-io.1"] {
        let p = dir.path().join(name);
        assert!(p.is_file(), "{name} missing");
        assert!(listed.contains(&p.display().to_string()), "{name} not listed: {listed}");
    }
    let info = fs::read_to_string(dir.path().join("uext4-info.1")).unwrap();
    assert!(info.contains("\\-\\-json"), "{info}");

    if tool("man").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
        println!("SKIP: man not installed; the page was not rendered");
        return;
    }
    let mut c = tool("man");
    c.arg("-l").arg(dir.path().join("uext4.1")).env("MANPAGER", "cat").env("MANWIDTH", "100");
    let shown = String::from_utf8(run_ok(c).stdout).unwrap();
    assert!(shown.contains("Inspect, read and write ext4 images"), "{shown}");
    assert!(shown.contains("completions"), "{shown}");
}

/// Under a terminal (`script` gives one), `get` draws a progress bar on
/// stderr; without one (every other test) stderr stays empty.
#[test]
fn get_shows_progress_on_a_terminal() {
    let Some(f) = fixture(&[]) else { return };
    if tool("script").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
        println!("SKIP: script (util-linux) not installed: no terminal to test the progress bar on");
        return;
    }
    let out = f.dir.path().join("out");
    let cmd = format!("{BIN} get {} /tree {}", f.img.display(), out.display());
    let mut c = tool("script");
    c.args(["-qfec", &cmd, "/dev/null"]).env("TERM", "xterm");
    let typescript = String::from_utf8_lossy(&run_ok(c).stdout).into_owned();
    assert!(out.join("big.bin").is_file());
    // tree, dir, dir/sub and 9 files below them (redraws are throttled, so
    // only the first count is sure to be drawn).
    assert!(typescript.contains(" 0/12 files"), "no files total: {typescript:?}");
    assert!(typescript.contains("ETA"), "no ETA: {typescript:?}");
}
