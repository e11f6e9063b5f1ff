//! Node lifetime through the mount: an inode whose last name is removed
//! lives on while the kernel still holds its node (an `O_PATH`
//! descriptor, a cached dentry: lookup references the daemon counts from
//! its replies and the kernel returns with FORGET), and is deleted by
//! the last FORGET; a root mount lets other users in (allow_other by
//! default). Each image is checked with `e2fsck -fn` after unmounting.
//!
//! They need root and /dev/fuse and print `SKIP: <reason>` otherwise.

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

mod mount_support;

use mount_support::{as_nobody, free_bytes, free_counts, tool, Fixture};

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// An `O_PATH` descriptor of `p`: the kernel holds the node, the daemon
/// sees no OPEN.
fn open_path(p: &Path) -> File {
    OpenOptions::new().read(true).custom_flags(libc::O_PATH).open(p).unwrap_or_else(|e| panic!("O_PATH {p:?}: {e}"))
}

/// `held` opened again, read-write, through /proc/self/fd.
fn reopen_rw(held: &File) -> File {
    let proc = format!("/proc/self/fd/{}", held.as_raw_fd());
    OpenOptions::new().read(true).write(true).open(&proc).unwrap_or_else(|e| panic!("reopening {proc}: {e}"))
}

/// Writes `data` to `p` and makes it durable (blocks allocated).
fn write_synced(p: &Path, data: &[u8]) {
    let mut f = File::create(p).unwrap_or_else(|e| panic!("create {p:?}: {e}"));
    f.write_all(data).expect("write");
    f.sync_all().expect("fsync");
}

/// The file `held` (its name gone) still has `data` and takes a write
/// through a read-write reopen of its `O_PATH` descriptor.
fn still_there(held: &File, data: &[u8]) {
    let mut rw = reopen_rw(held);
    let mut got = Vec::new();
    rw.read_to_end(&mut got).expect("read the unlinked file");
    assert!(got == data, "read {} bytes of the unlinked file, expected its {} bytes", got.len(), data.len());
    let tail = pattern(99, 8192);
    rw.write_all_at(&tail, data.len() as u64).expect("write to the unlinked file");
    rw.sync_all().expect("fsync the unlinked file");
    let mut back = vec![0u8; tail.len()];
    rw.read_exact_at(&mut back, data.len() as u64).expect("read back");
    assert!(back == tail, "the write to the unlinked file did not read back");
}

/// Unlink with the node held only by an `O_PATH` descriptor (issue 23
/// item 2): the inode lives on, with its data, readable and writable
/// through /proc/self/fd, and the image is clean after the descriptor is
/// closed and the mount is gone. Before lookup counting the inode was
/// freed at once: the read returned 0 bytes, the write went into the
/// freed inode and e2fsck found block bitmap differences.
#[test]
fn opath_node_outlives_unlink() {
    require_fuse!();
    let fx = Fixture::with_mkfs_args("64M", &[]);
    fx.mount("rw");
    let data = pattern(1, 300_000);
    write_synced(&fx.path("unlinked"), &data);
    let held = open_path(&fx.path("unlinked"));
    fs::remove_file(fx.path("unlinked")).expect("unlink");
    still_there(&held, &data);
    drop(held);
    fx.unmount();
    fx.assert_clean();
}

/// The reproducer of issue 23 item 2 as it was reported: an ordinary
/// user (uid 65534) on a root mount (allow_other by default) makes a file,
/// holds it by an `O_PATH` descriptor, unlinks it, reopens it read-write
/// through /proc/self/fd, reads its data back and writes to it. Run in a
/// forked child that only makes system calls (no allocation after the
/// fork); its exit status says which step failed.
#[test]
fn opath_node_outlives_unlink_by_another_user() {
    require_fuse!();
    let fx = Fixture::with_mkfs_args("64M", &[]);
    fx.mount("rw");
    fs::create_dir(fx.path("shared")).expect("mkdir");
    fs::set_permissions(fx.path("shared"), fs::Permissions::from_mode(0o1777)).expect("chmod");
    let path = CString::new(fx.path("shared/mine").as_os_str().as_bytes()).expect("path");
    let data = pattern(4, 100_000);
    let mut back = vec![0u8; data.len()];
    // SAFETY: the child makes only system calls on memory prepared
    // before the fork, and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: as above; every pointer is into `path`, `data`, `back`
        // or the stack.
        unsafe { libc::_exit(nobody_child(&path, &data, &mut back)) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "child status {status:#x}");
    let steps = ["", "setuid", "create", "write", "O_PATH open", "unlink", "reopen", "read", "data differ", "write"];
    let code = libc::WEXITSTATUS(status) as usize;
    assert_eq!(code, 0, "uid 65534's reproducer failed at: {}", steps.get(code).copied().unwrap_or("?"));
    fx.unmount();
    fx.assert_clean();
}

/// The child of [`opath_node_outlives_unlink_by_another_user`]: 0, or the
/// step that failed.
///
/// # Safety
/// Called in a forked child: system calls only.
unsafe fn nobody_child(path: &CString, data: &[u8], back: &mut [u8]) -> i32 {
    // SAFETY (the whole body): system calls on valid buffers and strings.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
            return 1;
        }
        let fd = libc::open(path.as_ptr(), libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, 0o644);
        if fd < 0 {
            return 2;
        }
        if libc::write(fd, data.as_ptr().cast(), data.len()) != data.len() as isize || libc::fsync(fd) != 0 {
            return 3;
        }
        libc::close(fd);
        let held = libc::open(path.as_ptr(), libc::O_PATH);
        if held < 0 {
            return 4;
        }
        if libc::unlink(path.as_ptr()) != 0 {
            return 5;
        }
        // "/proc/self/fd/<held>" without allocating.
        let mut proc = *b"/proc/self/fd/\0\0\0\0\0\0\0\0\0\0\0";
        let mut digits = [0u8; 10];
        let (mut n, mut v) = (0, held as u32);
        loop {
            digits[n] = b'0' + (v % 10) as u8;
            n += 1;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        for i in 0..n {
            proc[14 + i] = digits[n - 1 - i];
        }
        let rw = libc::open(proc.as_ptr().cast(), libc::O_RDWR);
        if rw < 0 {
            return 6;
        }
        if libc::pread(rw, back.as_mut_ptr().cast(), back.len(), 0) != back.len() as isize {
            return 7;
        }
        if back != data {
            return 8;
        }
        if libc::pwrite(rw, data.as_ptr().cast(), 4096, data.len() as i64) != 4096 || libc::fsync(rw) != 0 {
            return 9;
        }
        libc::close(rw);
        libc::close(held);
        0
    }
}

/// A node the kernel learned from READDIRPLUS alone (a fresh mount, a
/// listing, then an `O_PATH` open through the cached entry: no LOOKUP) is
/// counted too: unlinked, it keeps its data.
#[test]
fn readdirplus_entries_are_counted() {
    require_fuse!();
    let fx = Fixture::with_mkfs_args("64M", &[]);
    fx.mount("rw");
    let data = pattern(5, 50_000);
    write_synced(&fx.path("listed"), &data);
    fx.unmount();
    // readdirplus=on: every listing is READDIRPLUS.
    fx.mount("rw,readdirplus=on");
    let names: Vec<_> = fs::read_dir(&fx.mnt).expect("readdir").map(|e| e.expect("entry").file_name()).collect();
    assert!(names.iter().any(|n| n == "listed"), "{names:?}");
    let held = open_path(&fx.path("listed"));
    fs::remove_file(fx.path("listed")).expect("unlink");
    still_there(&held, &data);
    drop(held);
    fx.unmount();
    fx.assert_clean();
}

/// As [`opath_node_outlives_unlink`], the held file replaced by a rename
/// over its name.
#[test]
fn opath_node_outlives_rename_over() {
    require_fuse!();
    let fx = Fixture::with_mkfs_args("64M", &[]);
    fx.mount("rw");
    let old = pattern(2, 200_000);
    write_synced(&fx.path("target"), &old);
    write_synced(&fx.path("new"), b"the new contents");
    let held = open_path(&fx.path("target"));
    fs::rename(fx.path("new"), fx.path("target")).expect("rename over");
    still_there(&held, &old);
    assert_eq!(fs::read(fx.path("target")).expect("read the new file"), b"the new contents");
    drop(held);
    fx.unmount();
    fx.assert_clean();
}

/// rmdir of a directory whose node is held: it keeps its number while
/// held, and new directories and files get other numbers (before, the
/// next new directory took its number).
#[test]
fn opath_node_outlives_rmdir() {
    require_fuse!();
    let fx = Fixture::with_mkfs_args("64M", &[]);
    fx.mount("rw");
    fs::create_dir(fx.path("dir")).expect("mkdir");
    let held = open_path(&fx.path("dir"));
    let dir_ino = held.metadata().expect("fstat").ino();
    fs::remove_dir(fx.path("dir")).expect("rmdir");
    for i in 0..8 {
        let (d, f) = (fx.path(&format!("dir-{i}")), fx.path(&format!("file-{i}")));
        fs::create_dir(&d).expect("mkdir");
        write_synced(&f, b"x");
        for p in [d, f] {
            let ino = fs::metadata(&p).expect("stat").ino();
            assert_ne!(ino, dir_ino, "{p:?} took the number of a directory still held");
        }
    }
    let st = held.metadata().expect("fstat of the removed directory");
    assert!(st.is_dir(), "the removed directory's node shows {:o}", st.mode());
    drop(held);
    fx.unmount();
    fx.assert_clean();
}

/// The last FORGET of an unlinked inode deletes it while mounted: its
/// blocks stay allocated while an `O_PATH` descriptor holds the node and
/// come back once it is closed (the kernel then evicts the node and
/// sends FORGET), before any unmount.
#[test]
fn forget_after_unlink_frees_the_inode() {
    require_fuse!();
    let fx = Fixture::with_mkfs_args("64M", &[]);
    fx.mount("rw");
    let data = pattern(3, 4 << 20);
    write_synced(&fx.path("big"), &data);
    let size = data.len() as u64;
    let with_file = free_bytes(&fx.mnt);
    let held = open_path(&fx.path("big"));
    fs::remove_file(fx.path("big")).expect("unlink");
    let held_free = free_bytes(&fx.mnt);
    assert!(held_free < with_file + size / 2, "blocks freed while the node is held: {with_file} -> {held_free}");
    drop(held);
    mount_support::wait_free_bytes(&fx.mnt, with_file + size);
    fx.unmount();
    fx.assert_clean();
}

/// Directories listed with `ls -la` (READDIRPLUS, whose `.` and `..`
/// entries the kernel does not take as references, fs/fuse/readdir.c
/// fuse_direntplus_link) and then removed are deleted when the kernel
/// forgets them, before any unmount: their inodes and blocks come back
/// (issue 23 polish, item 4). Counting `.` and `..` as references would
/// keep them until the unmount.
#[test]
fn rmdir_after_readdirplus_frees_at_forget() {
    require_fuse!();
    let fx = Fixture::with_mkfs_args("64M", &[]);
    fx.mount("rw,readdirplus=on");
    let before = free_counts(&fx.mnt);
    fs::create_dir_all(fx.path("top/sub")).expect("mkdir");
    for d in ["top", "top/sub"] {
        for i in 0..3 {
            fs::write(fx.path(&format!("{d}/f{i}")), b"x").expect("write");
        }
    }
    // `.` of top and sub, `..` of sub (top) and of top (the root).
    for d in ["top", "top/sub"] {
        let out = tool("ls").arg("-la").arg(fx.path(d)).output().expect("ls -la");
        assert!(out.status.success(), "ls -la {d}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let made = free_counts(&fx.mnt);
    assert!(made.1 + 8 <= before.1, "8 inodes made: {before:?} -> {made:?}");
    fs::remove_dir_all(fx.path("top")).expect("rm -r");
    // FORGET is asynchronous: wait for the inodes and blocks to come back.
    let t0 = Instant::now();
    loop {
        let now = free_counts(&fx.mnt);
        if now.0 >= before.0 && now.1 >= before.1 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "not all freed while mounted: {before:?} -> {now:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    fx.unmount();
    fx.assert_clean();
}

/// Fills the filesystem with `path`: `chunk`-byte writes until ENOSPC,
/// then made durable.
fn fill(path: &Path, chunk: usize) {
    let mut f = OpenOptions::new().create(true).append(true).open(path).expect("open the filler");
    let buf = vec![0x5au8; chunk];
    loop {
        match f.write(&buf) {
            Ok(n) if n == buf.len() => {}
            Ok(_) => break,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    f.sync_all().expect("fsync the filler");
}

/// On a full filesystem, `rm` of a big file then at once a write of
/// nearly as much to a file opened before, 20 times: no ENOSPC (issue
/// 23 polish, item 1). The inode is deleted at the kernel's FORGET,
/// which another daemon thread may serve after the write; the write's
/// allocation waits for that deletion and retries, as ext4 retries one
/// after a commit. Before, the write failed with ENOSPC in some rounds.
#[test]
fn write_right_after_rm_on_a_full_disk() {
    require_fuse!();
    let fx = Fixture::with_mkfs_args("64M", &[]);
    fx.mount("rw");
    let big = 4 << 20;
    write_synced(&fx.path("big"), &pattern(6, big));
    // Whatever the first pass's reservations left over, the second
    // takes (in blocks).
    fill(&fx.path("filler"), 1 << 20);
    fill(&fx.path("filler"), 4096);
    // The next file is a little smaller than the one it replaces: its
    // blocks and its extent blocks fit in what the rm frees.
    let data = pattern(7, big - (256 << 10));
    for round in 0..20 {
        // Opened before the rm: the request right after the unlink is
        // the WRITE.
        let mut next = File::create(fx.path("next")).expect("create");
        fs::remove_file(fx.path("big")).expect("rm");
        // The quickest allocation (fallocate: no data to copy first),
        // then the data written into it.
        // SAFETY: fallocate on a descriptor we own.
        if unsafe { libc::fallocate(next.as_raw_fd(), 0, 0, data.len() as i64) } != 0 {
            let e = std::io::Error::last_os_error();
            panic!("round {round}: fallocate of {} bytes right after rm of a bigger file: {e}", data.len());
        }
        if let Err(e) = next.write_all(&data).and_then(|()| next.sync_all()) {
            panic!("round {round}: writing {} bytes right after rm of a bigger file: {e}", data.len());
        }
        drop(next);
        fs::rename(fx.path("next"), fx.path("big")).expect("rename");
    }
    fx.unmount();
    fx.assert_clean();
}

/// `-o writeback_cache`, the atomic-replace pattern (write a temporary
/// file, fsync it, rename it over an existing file), then syncfs: the
/// kernel's write-back of the replaced inode's times (a SETATTR) reached
/// a deleted inode and syncfs failed with ENOENT (issue 23 item 12). The
/// replaced inode is now kept until the kernel forgets it.
#[test]
fn syncfs_after_atomic_replace_with_writeback_cache() {
    require_fuse!();
    let fx = Fixture::with_mkfs_args("64M", &[]);
    fx.mount("rw,writeback_cache");
    for round in 0..3u8 {
        let mut f = File::create(fx.path("state")).expect("create");
        f.write_all(&pattern(round, 10_000)).expect("write");
        drop(f);
        let tmp = fx.path("state.tmp");
        let mut t = File::create(&tmp).expect("create tmp");
        t.write_all(&pattern(round + 100, 20_000)).expect("write tmp");
        t.sync_all().expect("fsync tmp");
        drop(t);
        fs::rename(&tmp, fx.path("state")).expect("rename over");
        let root = File::open(&fx.mnt).expect("open the mount");
        // SAFETY: syncfs on a descriptor we own.
        let r = unsafe { libc::syncfs(root.as_raw_fd()) };
        assert_eq!(r, 0, "syncfs after the replace (round {round}): {}", std::io::Error::last_os_error());
        assert_eq!(fs::read(fx.path("state")).expect("read"), pattern(round + 100, 20_000));
    }
    fx.unmount();
    fx.assert_clean();
}

/// The options /proc/self/mountinfo shows for the mount at `mnt`.
fn mount_options(mnt: &Path) -> String {
    let info = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let want = mnt.to_str().expect("utf-8 mount point");
    info.lines()
        .find(|l| l.split(' ').nth(4) == Some(want))
        .unwrap_or_else(|| panic!("{want} not in mountinfo"))
        .to_string()
}

/// A root mount lets other users in (allow_other is the default when
/// root mounts, the kernel checking permissions), `-o noallow_other`
/// keeps it to root.
#[test]
fn root_mount_allows_other_users_by_default() {
    require_fuse!();
    let fx = Fixture::with_mkfs_args("64M", &[]);
    fx.mount("rw");
    fs::write(fx.path("readable"), b"hello").expect("write");
    let m = fx.mnt.display();
    assert!(mount_options(&fx.mnt).contains("allow_other"), "{}", mount_options(&fx.mnt));
    assert!(as_nobody(&format!("ls {m} && cat {m}/readable")), "nobody could not read a default root mount");
    // The kernel checks permissions (default_permissions): a root-owned
    // 0755 directory is not writable by others.
    assert!(!as_nobody(&format!("touch {m}/by-nobody")), "nobody wrote into a root-owned 0755 directory");
    fx.unmount();
    fx.mount("rw,noallow_other");
    assert!(!mount_options(&fx.mnt).contains("allow_other"), "{}", mount_options(&fx.mnt));
    assert!(!as_nobody(&format!("ls {m}")), "nobody listed a noallow_other mount");
    fx.unmount();
    fx.assert_clean();
}
