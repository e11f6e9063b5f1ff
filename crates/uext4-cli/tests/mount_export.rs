//! Linux semantics an exported or layered filesystem needs, through
//! `uext4 mount`: file handles (`name_to_handle_at`/`open_by_handle_at`,
//! as an NFS server uses them: fstests generic/426, 467, 477) on live
//! files, after the kernel dropped its caches and after an unmount and
//! remount, stale handles of deleted files; overlayfs with uext4 mounts
//! as its layers (RENAME_WHITEOUT, whiteouts checked with debugfs);
//! `fstrim -v` shrinking the sparse image; `xfs_io -c shutdown` (EIO
//! after, the journal recovered by the next mount, which says so, but
//! not as mount(8)'s helper; left alone by `ro,norecovery`).
//!
//! Needs root and /dev/fuse (prints `SKIP: <reason>` otherwise) and the
//! e2fsprogs tools; overlayfs, fstrim and xfs_io parts skip without them.

use std::ffi::CString;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

mod mount_support;

use mount_support::Fixture;

/// Room for any handle (MAX_HANDLE_SZ is 128) after the header.
const HANDLE_ROOM: usize = 128;

/// A file handle: `struct file_handle` and its bytes, in u64s so that the
/// header is aligned.
struct Handle(Vec<u64>);

impl Handle {
    fn ptr(&mut self) -> *mut libc::file_handle {
        self.0.as_mut_ptr().cast()
    }
}

/// `name_to_handle_at(AT_FDCWD, p, ..., 0)`.
fn handle_of(p: &Path) -> io::Result<Handle> {
    let mut h = Handle(vec![0; 1 + HANDLE_ROOM / 8]);
    let path = CString::new(p.as_os_str().as_bytes()).expect("path without NUL");
    let mut mount_id = 0;
    // SAFETY: the buffer holds the header and HANDLE_ROOM bytes after it,
    // as handle_bytes says; path and mount_id are valid for the call.
    let r = unsafe {
        (*h.ptr()).handle_bytes = HANDLE_ROOM as u32;
        libc::name_to_handle_at(libc::AT_FDCWD, path.as_ptr(), h.ptr(), &mut mount_id, 0)
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(h)
}

/// `open_by_handle_at` on the filesystem mounted at `mnt`.
fn open_by(mnt: &Path, h: &mut Handle, flags: i32) -> io::Result<File> {
    let m = File::open(mnt)?;
    // SAFETY: `h` is a handle filled in by name_to_handle_at.
    let fd = unsafe { libc::open_by_handle_at(m.as_raw_fd(), h.ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor that nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

fn read_all(mut f: File) -> Vec<u8> {
    let mut v = Vec::new();
    f.read_to_end(&mut v).expect("read through the handle");
    v
}

fn errno_of<T>(r: io::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

/// Makes the kernel forget every unused dentry and inode, so that a
/// handle must be resolved by the daemon ("." by node id).
fn drop_caches() {
    // Best effort: without it the handles still resolve, from the cache.
    let _ = fs::write("/proc/sys/vm/drop_caches", "2");
}

#[test]
fn file_handles_work_on_live_files_and_after_a_remount() {
    require_fuse!();
    let fx = Fixture::with_mkfs_args("64M", &[]);
    fx.mount("rw");
    fs::create_dir_all(fx.path("d/sub")).expect("mkdir d/sub");
    fs::write(fx.path("f"), b"top file\n").expect("write f");
    fs::write(fx.path("d/sub/g"), b"deep file\n").expect("write g");
    fs::write(fx.path("gone"), b"x").expect("write gone");
    let ino_sub = fs::metadata(fx.path("d/sub")).expect("stat").ino();

    let mut hf = handle_of(&fx.path("f")).expect("handle of f");
    let mut hg = handle_of(&fx.path("d/sub/g")).expect("handle of g");
    let mut hsub = handle_of(&fx.path("d/sub")).expect("handle of d/sub");
    let mut hroot = handle_of(&fx.mnt).expect("handle of the root");
    let mut hgone = handle_of(&fx.path("gone")).expect("handle of gone");

    // Live, from the kernel's cache and then from the daemon.
    for pass in 0..2 {
        assert_eq!(read_all(open_by(&fx.mnt, &mut hf, libc::O_RDONLY).expect("open f")), b"top file\n", "{pass}");
        assert_eq!(read_all(open_by(&fx.mnt, &mut hg, libc::O_RDONLY).expect("open g")), b"deep file\n");
        let d = open_by(&fx.mnt, &mut hsub, libc::O_RDONLY | libc::O_DIRECTORY).expect("open d/sub");
        assert_eq!(d.metadata().expect("fstat").ino(), ino_sub);
        let r = open_by(&fx.mnt, &mut hroot, libc::O_RDONLY | libc::O_DIRECTORY).expect("open the root");
        assert_eq!(r.metadata().expect("fstat").ino(), 1, "the root is FUSE node 1");
        drop_caches();
    }
    fs::remove_file(fx.path("gone")).expect("unlink gone");
    drop_caches();
    assert_eq!(errno_of(open_by(&fx.mnt, &mut hgone, libc::O_RDONLY)), libc::ESTALE, "deleted, live mount");

    fx.unmount();
    fx.mount("rw");
    assert_eq!(read_all(open_by(&fx.mnt, &mut hf, libc::O_RDONLY).expect("open f after remount")), b"top file\n");
    // A deep file and a directory whose ancestors the kernel does not
    // know yet: the parent chain is rebuilt with ".." lookups.
    assert_eq!(read_all(open_by(&fx.mnt, &mut hg, libc::O_RDONLY).expect("open g after remount")), b"deep file\n");
    let d = open_by(&fx.mnt, &mut hsub, libc::O_RDONLY | libc::O_DIRECTORY).expect("open d/sub after remount");
    assert_eq!(d.metadata().expect("fstat").ino(), ino_sub);
    drop(d);
    assert_eq!(errno_of(open_by(&fx.mnt, &mut hgone, libc::O_RDONLY)), libc::ESTALE, "deleted, after remount");

    // A handle is an inode number and a generation: a new file on the
    // freed inode number is another file.
    let mut reused = None;
    for i in 0..4 {
        let p = fx.path(&format!("new{i}"));
        fs::write(&p, b"new").expect("write new");
        if fs::metadata(&p).expect("stat").ino() == u64::from(ino_of_handle(&mut hgone)) {
            reused = Some(p);
            break;
        }
    }
    if reused.is_some() {
        drop_caches();
        assert_eq!(errno_of(open_by(&fx.mnt, &mut hgone, libc::O_RDONLY)), libc::ESTALE, "reused inode number");
    }
    fx.unmount();
    fx.assert_clean();
}

/// The inode number in a FUSE handle (its node id: two u32s, high first,
/// then the generation).
fn ino_of_handle(h: &mut Handle) -> u32 {
    // SAFETY: a handle filled in by name_to_handle_at, at least 12 bytes
    // for FUSE.
    let bytes = unsafe { std::slice::from_raw_parts(h.ptr().cast::<u8>().add(8), 12) };
    u32::from_ne_bytes(bytes[4..8].try_into().expect("4 bytes"))
}

/// Whether the kernel has overlayfs.
fn have_overlay() -> bool {
    fs::read_to_string("/proc/filesystems").is_ok_and(|s| s.lines().any(|l| l.ends_with("\toverlay")))
}

/// `debugfs -R "stat PATH"` of an image.
fn debugfs_stat(img: &Path, path: &str) -> String {
    let out = mount_support::run(mount_support::tool("debugfs").arg("-R").arg(format!("stat {path}")).arg(img));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn overlayfs_over_uext4_upper_and_lower() {
    require_fuse!();
    if !have_overlay() {
        println!("SKIP: the kernel has no overlayfs");
        return;
    }
    let lower = Fixture::with_mkfs_args("32M", &[]);
    let upper = Fixture::with_mkfs_args("32M", &[]);
    lower.mount("rw");
    fs::create_dir_all(lower.path("l/dir")).expect("mkdir l/dir");
    for (name, data) in [("keep", "keep\n"), ("edit", "old\n"), ("del", "del\n"), ("mv", "mv\n"), ("dir/in", "in\n")] {
        fs::write(lower.path(&format!("l/{name}")), data).expect("write lower file");
    }
    lower.unmount();
    lower.mount("ro");
    upper.mount("rw");
    fs::create_dir_all(upper.path("u")).expect("mkdir u");
    fs::create_dir_all(upper.path("w")).expect("mkdir w");
    let merged = upper.dir.path().join("merged");
    fs::create_dir(&merged).expect("mkdir merged");
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.path("l").display(),
        upper.path("u").display(),
        upper.path("w").display()
    );
    let out = mount_support::tool("mount").args(["-t", "overlay", "overlay", "-o", &opts]).arg(&merged).output();
    let out = out.expect("run mount");
    if !out.status.success() {
        panic!("overlay mount: {}", String::from_utf8_lossy(&out.stderr));
    }
    let m = |p: &str| merged.join(p);
    // Copy-up, delete (a whiteout), rename (a whiteout at the old name),
    // a new file, a removed lower directory.
    fs::write(m("edit"), "new\n").expect("edit through the overlay");
    fs::remove_file(m("del")).expect("delete through the overlay");
    fs::rename(m("mv"), m("moved")).expect("rename through the overlay");
    fs::write(m("fresh"), "fresh\n").expect("new file");
    fs::remove_file(m("dir/in")).expect("delete in a lower dir");
    fs::remove_dir(m("dir")).expect("rmdir a lower dir");
    let check = || {
        let mut names: Vec<String> = fs::read_dir(&merged)
            .expect("readdir")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
            .collect();
        names.sort();
        assert_eq!(names, ["edit", "fresh", "keep", "moved"]);
        assert_eq!(fs::read_to_string(m("edit")).expect("read edit"), "new\n");
        assert_eq!(fs::read_to_string(m("moved")).expect("read moved"), "mv\n");
        assert_eq!(fs::read_to_string(m("keep")).expect("read keep"), "keep\n");
    };
    check();
    mount_support::unmount_retrying(mount_support::tool("umount").arg(&merged));
    upper.unmount();
    lower.unmount();
    upper.assert_clean();
    lower.assert_clean();
    for wh in ["/u/del", "/u/mv", "/u/dir"] {
        let st = debugfs_stat(&upper.img, wh);
        assert!(st.contains("Type: character special"), "{wh} is no whiteout: {st}");
        assert!(st.contains("Device major/minor number: 00:00"), "{wh}: {st}");
    }
    // The layers unchanged below, the same view when mounted again.
    lower.mount("ro");
    assert_eq!(fs::read_to_string(lower.path("l/edit")).expect("lower edit"), "old\n");
    upper.mount("rw");
    let out = mount_support::tool("mount").args(["-t", "overlay", "overlay", "-o", &opts]).arg(&merged).output();
    assert!(out.expect("run mount").status.success(), "overlay mount again");
    check();
    mount_support::unmount_retrying(mount_support::tool("umount").arg(&merged));
    upper.unmount();
    lower.unmount();
    upper.assert_clean();
}

/// Bytes the image file occupies on its filesystem.
fn allocated(img: &Path) -> u64 {
    fs::metadata(img).expect("stat image").blocks() * 512
}

#[test]
fn fstrim_through_the_mount_shrinks_the_sparse_image() {
    require_fuse!();
    if !mount_support::have("fstrim") {
        println!("SKIP: fstrim not installed");
        return;
    }
    let fx = Fixture::with_mkfs_args("64M", &[]);
    fx.mount("rw");
    fs::write(fx.path("keep"), b"kept\n").expect("write keep");
    let chunk = vec![0x5au8; 1 << 20];
    let mut big = File::create(fx.path("big")).expect("create big");
    for _ in 0..16 {
        std::io::Write::write_all(&mut big, &chunk).expect("write big");
    }
    big.sync_all().expect("fsync big");
    drop(big);
    let full = allocated(&fx.img);
    let with_big = mount_support::free_bytes(&fx.mnt);
    fs::remove_file(fx.path("big")).expect("rm big");
    // The blocks are free (and trimmable) once the kernel's FORGET of the
    // node has been served; the kernel queues it when it evicts the node.
    mount_support::wait_free_bytes(&fx.mnt, with_big + (16 << 20));
    let out = mount_support::run(mount_support::tool("fstrim").arg("-v").arg(&fx.mnt));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // "MNT: 52.3 MiB (54853632 bytes) trimmed"
    let bytes: u64 = text
        .split('(')
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("fstrim -v said {text:?}"));
    assert!(bytes >= 16 << 20, "{text}");
    let after = allocated(&fx.img);
    assert!(after + (15 << 20) <= full, "the image kept its space: {full} -> {after}");
    // As ext4: a non-root caller may not trim.
    if mount_support::have("setpriv") {
        let st = mount_support::tool("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "fstrim"])
            .arg(&fx.mnt)
            .output()
            .expect("run setpriv");
        assert!(!st.status.success(), "fstrim as nobody worked");
    }
    assert_eq!(fs::read(fx.path("keep")).expect("read keep"), b"kept\n");
    fx.unmount();
    fx.assert_clean();
}

#[test]
fn shutdown_through_the_mount_refuses_writes_and_leaves_the_journal() {
    require_fuse!();
    if !mount_support::have("xfs_io") {
        println!("SKIP: xfs_io not installed");
        return;
    }
    let fx = Fixture::with_mkfs_args("32M", &[]);
    fx.mount("rw");
    fs::write(fx.path("before"), b"before\n").expect("write before");
    // xfs_io's shutdown is XFS_IOC_GOINGDOWN, FS_IOC_SHUTDOWN's number.
    mount_support::run(mount_support::tool("xfs_io").args(["-x", "-c", "shutdown -f"]).arg(&fx.mnt));
    assert_eq!(errno_of(fs::write(fx.path("after"), b"x")), libc::EIO, "create after shutdown");
    assert_eq!(
        errno_of(
            fs::OpenOptions::new()
                .append(true)
                .open(fx.path("before"))
                .and_then(|mut f| std::io::Write::write_all(&mut f, b"more").and_then(|()| f.sync_all()))
        ),
        libc::EIO
    );
    // Reads the daemon sees fail too (direct I/O skips the kernel's cache).
    let direct = fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(fx.path("before"));
    if let Ok(mut f) = direct {
        let mut buf = vec![0u8; 4096];
        assert_eq!(errno_of(f.read(&mut buf)), libc::EIO, "O_DIRECT read after shutdown");
    }
    fx.unmount();
    assert!(fx.dumpe2fs().contains("needs_recovery"), "the journal was not left for recovery");
    // `ro,norecovery` (fstests generic/537) leaves the journal alone;
    // a read-write open may not skip it.
    let mount_cmd = |opts: &str| {
        let mut c = std::process::Command::new(mount_support::BIN);
        c.arg("mount").arg(&fx.img).arg(&fx.mnt).args(["-o", opts]);
        c
    };
    let out = mount_support::run(&mut mount_cmd("ro,norecovery"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not replayed"), "{out:?}");
    fx.unmount();
    assert!(fx.dumpe2fs().contains("needs_recovery"), "norecovery replayed the journal");
    let out = mount_cmd("rw,norecovery").output().expect("uext4 mount");
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("norecovery"), "{out:?}");
    // The next open recovers, and `uext4 mount` says so; what was
    // written before is there.
    let out = mount_support::run(
        std::process::Command::new(mount_support::BIN).arg("mount").arg(&fx.img).arg(&fx.mnt).args(["-o", "rw"]),
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("journal was replayed"), "{out:?}");
    assert_eq!(fs::read(fx.path("before")).expect("read before"), b"before\n");
    assert!(!fx.path("after").exists());
    // As mount(8)'s helper the notice goes to the daemon's log, not to
    // mount's output (fstests compares it, as the kernel's ext4 tells
    // only the kernel log).
    mount_support::run(mount_support::tool("xfs_io").args(["-x", "-c", "shutdown -f"]).arg(&fx.mnt));
    fx.unmount();
    assert!(fx.dumpe2fs().contains("needs_recovery"), "the second shutdown left nothing to replay");
    let helper = fx.dir.path().join("mount.fuse.uext4");
    std::os::unix::fs::symlink(mount_support::BIN, &helper).expect("symlink helper");
    let out = mount_support::run(std::process::Command::new(&helper).arg(&fx.img).arg(&fx.mnt).args(["-o", "rw"]));
    assert!(out.stderr.is_empty(), "the helper printed {:?}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(fs::read(fx.path("before")).expect("read before"), b"before\n");
    fx.unmount();
    fx.assert_clean();
}
