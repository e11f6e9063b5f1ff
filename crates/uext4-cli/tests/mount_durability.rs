//! Durability through the mount, judged the way it fails: each case does
//! its calls on a mount whose daemon commits only when asked
//! (`commit=600`), kills the daemon with SIGKILL (a crash, as far as the
//! image is concerned: what the daemon had not written to it is gone),
//! then reads the image with `uext4` itself (the journal replayed in
//! memory) and finally mounts it again (replay on disk), unmounts, and
//! runs `e2fsck -fn`.
//!
//! Cases: O_SYNC and O_DSYNC writes (the kernel sends no FSYNC after a
//! write through a FOPEN_DIRECT_IO open, the default `direct_writes`;
//! the WRITE carries the open flags), the same under `writeback_cache`,
//! `-o sync` and `-o dirsync`, and `uext4 sync`.
//!
//! They need root and /dev/fuse and print `SKIP: <reason>` otherwise.
//! `UEXT4_TEST_TRANSPORT=uring` runs them on the io_uring transport.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::process::{Command, Stdio};

mod mount_support;

use mount_support::{have, is_mounted, run, tool, Fixture, BIN};

/// Distinct bytes for case `i` (a lost write shows as other bytes).
fn pattern(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (j.wrapping_mul(13).wrapping_add(i * 101) % 253) as u8 + 1).collect()
}

/// The ways of mounting and crashing that these tests use.
impl Fixture {
    fn fresh() -> Fixture {
        Fixture::with_mkfs_args("64M", &[])
    }

    /// `uext4 mount --foreground -o commit=600,OPTS` as a child process:
    /// nothing is committed unless an operation asks for it.
    fn mount_lazy(&mut self, opts: &str) {
        let opts = if opts.is_empty() { "commit=600".to_string() } else { format!("commit=600,{opts}") };
        self.spawn_foreground(&opts, Stdio::inherit(), &[]);
    }

    /// SIGKILL of the daemon, then the dead mount taken away.
    fn crash(&mut self) {
        let mut child = self.child.take().expect("daemon");
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        if have("fusermount3") {
            run(tool("fusermount3").arg("-u").arg("-z").arg(&self.mnt));
        } else {
            run(tool("umount").arg("-l").arg(&self.mnt));
        }
        assert!(!is_mounted(&self.mnt));
    }

    /// `uext4 cat IMG PATH`: the file as the image holds it after the
    /// crash (the journal replayed in memory); None if it is not there.
    fn cat(&self, path: &str) -> Option<Vec<u8>> {
        let out = Command::new(BIN).arg("cat").arg(&self.img).arg(path).output().expect("uext4 cat");
        out.status.success().then_some(out.stdout)
    }

    /// Asserts that the image holds `want` at `path` after the crash.
    fn assert_holds(&self, path: &str, want: &[u8], what: &str) {
        match self.cat(path) {
            None => panic!("{what}: {path} is not in the image after the crash"),
            Some(got) if got != want => {
                let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
                panic!("{what}: {path} holds {} bytes, {} expected, first difference at {at}", got.len(), want.len())
            }
            Some(_) => {}
        }
    }

    /// The names in directory `path` of the image (None if it is not
    /// there), as `uext4 ls` lists them.
    fn names(&self, path: &str) -> Option<Vec<String>> {
        let out = Command::new(BIN).arg("ls").arg(&self.img).arg(path).output().expect("uext4 ls");
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect())
    }

    /// Mounts again (the journal replayed onto the image), unmounts, and
    /// checks the image is clean and e2fsck finds nothing.
    fn recover_and_check(&self) {
        self.mount("rw");
        self.unmount();
        self.assert_clean();
    }
}

/// Writes `data` at `offset` through a new descriptor opened with
/// `flags` (O_WRONLY, O_CREAT added), and closes it: no fsync.
fn write_with(path: &Path, custom: i32, offset: u64, data: &[u8]) {
    let f = OpenOptions::new().write(true).create(true).custom_flags(custom).open(path).expect("open");
    f.write_all_at(data, offset).expect("write");
}

/// A 64 KiB O_SYNC write to a new file on the default mount survives.
#[test]
fn o_sync_write_to_new_file() {
    require_fuse!();
    let mut fx = Fixture::fresh();
    fx.mount_lazy("");
    write_with(&fx.path("f"), libc::O_SYNC, 0, &pattern(1, 65536));
    fx.crash();
    fx.assert_holds("/f", &pattern(1, 65536), "the O_SYNC write was lost");
    fx.recover_and_check();
}

/// O_SYNC and O_DSYNC pwrites over an fsync'd file survive: the new
/// bytes, not the old ones.
#[test]
fn o_sync_and_o_dsync_overwrite() {
    require_fuse!();
    let mut fx = Fixture::fresh();
    fx.mount_lazy("");
    for name in ["s", "d"] {
        let mut f = File::create(fx.path(name)).expect("create");
        f.write_all(&pattern(0, 32768)).expect("write");
        f.sync_all().expect("fsync");
    }
    File::open(&fx.mnt).expect("open root").sync_all().expect("fsync root");
    write_with(&fx.path("s"), libc::O_SYNC, 4096, &pattern(2, 8192));
    write_with(&fx.path("d"), libc::O_DSYNC, 100, &pattern(3, 5000));
    fx.crash();
    let mut s = pattern(0, 32768);
    s[4096..12288].copy_from_slice(&pattern(2, 8192));
    let mut d = pattern(0, 32768);
    d[100..5100].copy_from_slice(&pattern(3, 5000));
    fx.assert_holds("/s", &s, "the O_SYNC overwrite was lost");
    fx.assert_holds("/d", &d, "the O_DSYNC overwrite was lost");
    fx.recover_and_check();
}

/// With the kernel's writeback cache (new files still bypass it,
/// `direct_new_files`; older ones do not): O_SYNC writes to a new file and
/// over an existing one survive.
#[test]
fn o_sync_write_with_writeback_cache() {
    require_fuse!();
    let mut fx = Fixture::fresh();
    fx.mount_lazy("writeback_cache");
    let mut f = File::create(fx.path("old")).expect("create");
    f.write_all(&pattern(0, 16384)).expect("write");
    f.sync_all().expect("fsync");
    drop(f);
    File::open(&fx.mnt).expect("open root").sync_all().expect("fsync root");
    write_with(&fx.path("f"), libc::O_SYNC, 0, &pattern(4, 65536));
    // Without O_CREAT|O_TRUNC: a cached open, written back by the kernel.
    let f = OpenOptions::new().write(true).custom_flags(libc::O_SYNC).open(fx.path("old")).expect("open");
    f.write_all_at(&pattern(5, 4096), 8192).expect("write");
    drop(f);
    fx.crash();
    fx.assert_holds("/f", &pattern(4, 65536), "the O_SYNC write was lost");
    let mut old = pattern(0, 16384);
    old[8192..12288].copy_from_slice(&pattern(5, 4096));
    fx.assert_holds("/old", &old, "the O_SYNC overwrite of a cached file was lost");
    fx.recover_and_check();
}

/// `-o sync`: a plain write (no O_SYNC, no fsync) and a mkdir survive.
#[test]
fn sync_mount_makes_every_write_durable() {
    require_fuse!();
    let mut fx = Fixture::fresh();
    fx.mount_lazy("sync");
    fs::write(fx.path("plain"), pattern(6, 20000)).expect("write");
    fs::create_dir(fx.path("dir")).expect("mkdir");
    fx.crash();
    fx.assert_holds("/plain", &pattern(6, 20000), "a write on a sync mount was lost");
    assert!(fx.names("/dir").is_some(), "a mkdir on a sync mount was lost");
    fx.recover_and_check();
}

/// `-o dirsync`: every kind of namespace change survives (the image
/// holds a directory and files to remove and rename before the mount).
#[test]
fn dirsync_mount_makes_namespace_changes_durable() {
    require_fuse!();
    let mut fx = Fixture::fresh();
    let src = fx.dir.path().join("src");
    fs::write(&src, b"x").expect("write src");
    run(Command::new(BIN).arg("mkdir").arg(&fx.img).arg("/old"));
    for dest in ["/victim", "/mover", "/target"] {
        run(Command::new(BIN).arg("put").arg(&fx.img).arg(&src).arg(dest));
    }
    fx.mount_lazy("dirsync");
    fs::create_dir(fx.path("a")).expect("mkdir");
    File::create(fx.path("a/created")).expect("create");
    std::os::unix::fs::symlink("target", fx.path("a/sym")).expect("symlink");
    fs::hard_link(fx.path("target"), fx.path("a/hard")).expect("link");
    fs::rename(fx.path("mover"), fx.path("a/moved")).expect("rename");
    fs::remove_file(fx.path("victim")).expect("unlink");
    fs::remove_dir(fx.path("old")).expect("rmdir");
    let fifo = std::ffi::CString::new(fx.path("a/fifo").into_os_string().into_encoded_bytes()).expect("path");
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mknod(fifo.as_ptr(), libc::S_IFIFO | 0o644, 0) }, 0, "mknod");
    fx.crash();
    let root = fx.names("/").expect("root");
    let a = fx.names("/a").unwrap_or_default();
    for n in ["created", "sym", "hard", "moved", "fifo"] {
        assert!(a.iter().any(|x| x == n), "a/{n} lost after a crash on a dirsync mount: /a holds {a:?}");
    }
    for gone in ["victim", "old", "mover"] {
        assert!(!root.iter().any(|x| x == gone), "{gone} came back after a crash on a dirsync mount: {root:?}");
    }
    fx.recover_and_check();
}

/// `uext4 sync MNT`: what was written and created before it survives
/// (sync(1)'s syncfs never reaches a FUSE daemon on this kernel), also
/// with the kernel's writeback cache, and stores through a shared mapping
/// that are still only in the kernel's pages (the mapping's descriptor
/// is closed: no close of it writes them back). A directory on another
/// filesystem is refused. (`uext4 sync` without arguments would sync
/// every uext4 mount of the machine, other tests' included: its
/// mountinfo parsing is a unit test of the command.)
#[test]
fn uext4_sync_makes_everything_durable() {
    require_fuse!();
    for opts in ["", "writeback_cache,nodirect_new_files"] {
        let mut fx = Fixture::fresh();
        fx.mount_lazy(opts);
        fs::create_dir(fx.path("d")).expect("mkdir");
        fs::write(fx.path("d/one"), pattern(7, 100_000)).expect("write");
        fs::write(fx.path("two"), pattern(8, 3000)).expect("write");
        let mapped = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(fx.path("mapped"));
        let mapped = mapped.expect("create");
        mapped.set_len(8192).expect("set_len");
        // SAFETY: a fresh shared mapping of 8192 bytes of a file that long.
        let map = unsafe {
            let rw = libc::PROT_READ | libc::PROT_WRITE;
            libc::mmap(std::ptr::null_mut(), 8192, rw, libc::MAP_SHARED, mapped.as_raw_fd(), 0)
        };
        assert_ne!(map, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
        drop(mapped);
        // SAFETY: the mapping is 8192 writable bytes and ours alone.
        unsafe { std::slice::from_raw_parts_mut(map.cast::<u8>(), 8192) }.copy_from_slice(&pattern(9, 8192));
        run(Command::new(BIN).arg("sync").arg(&fx.mnt));
        let out = Command::new(BIN).arg("sync").arg(fx.dir.path()).output().expect("uext4 sync");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.code() == Some(1) && err.contains("not on a uext4 mount"), "{:?}: {err}", out.status);
        fx.crash();
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(map, 8192) };
        let what = format!("-o {opts}: lost after uext4 sync");
        fx.assert_holds("/d/one", &pattern(7, 100_000), &what);
        fx.assert_holds("/two", &pattern(8, 3000), &what);
        fx.assert_holds("/mapped", &pattern(9, 8192), &what);
        fx.recover_and_check();
    }
}
