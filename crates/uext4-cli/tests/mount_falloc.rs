//! fallocate's collapse and insert modes and copy_file_range through
//! `uext4 mount`, next to the kernel's ext4 on a loop mount of another
//! image doing the same: `xfs_io -c copy_range/fcollapse/finsert` and
//! util-linux `fallocate -c/-i`, then the files compared byte for byte.
//! The kernel's FUSE passes only KEEP_SIZE, PUNCH_HOLE and ZERO_RANGE to
//! a daemon (fuse_file_fallocate answers EOPNOTSUPP for the rest): a
//! collapse or an insert through the mount fails and changes nothing
//! there, which this test pins down (if a kernel passes them on, the
//! results must equal ext4's); the engine then does them (`uext4
//! fallocate -c/-i` on the image) and the files must equal the kernel's.
//! copy_file_range reaches the daemon (FUSE_COPY_FILE_RANGE), which
//! copies inside the engine.
//!
//! Needs root and /dev/fuse (prints `SKIP: <reason>` otherwise), xfs_io
//! and a loop device (skipped with a printed reason when missing).

use std::fs;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};

mod mount_support;

use mount_support::{have, run, tool, unmount_retrying, Fixture, BIN};

/// Runs `script` with `sh -c` in `dir`; true if it succeeded.
fn sh_in(dir: &Path, script: &str) -> bool {
    tool("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The setup and the copies, run in both trees: all must succeed.
const SETUP: &[&str] = &[
    "xfs_io -f -c 'pwrite -S 0x41 0 256k' -c 'pwrite -S 0x42 64k 16k' -c fsync a >/dev/null",
    "xfs_io -f -c 'pwrite -S 0x43 0 128k' -c 'truncate 300k' -c 'pwrite -S 0x44 280k 4k' b >/dev/null",
    "xfs_io -c 'copy_range -s 4096 -d 8192 -l 100000 a' b",
    "xfs_io -f -c 'copy_range b' c",
    "xfs_io -c 'copy_range -s 150000 -d 500000 -l 100000 b' c",
    "xfs_io -f -c 'falloc -k 0 64k' -c 'pwrite -S 0x45 8k 4k' d >/dev/null && xfs_io -c 'copy_range -s 0 -d 4096 -l 65536 d' c",
];

/// The shifts, run in both trees (the kernel's ext4 does them all), and
/// the same through `uext4 fallocate` on the image.
const SHIFTS: &[(&str, &[&str])] = &[
    ("xfs_io -c 'fcollapse 65536 16384' a", &["-c", "-o", "65536", "-l", "16384", "/a"]),
    ("xfs_io -c 'finsert 4096 8192' a", &["-i", "-o", "4096", "-l", "8192", "/a"]),
    ("fallocate -c -o 8192 -l 4096 a", &["-c", "-o", "8192", "-l", "4096", "/a"]),
    ("fallocate -i -o 0 -l 4096 a", &["-i", "-o", "0", "-l", "4096", "/a"]),
    ("xfs_io -c 'fcollapse 0 4096' b", &["-c", "-o", "0", "-l", "4096", "/b"]),
    ("xfs_io -c 'finsert 8192 65536' c", &["-i", "-o", "8192", "-l", "65536", "/c"]),
];

const FILES: &[&str] = &["a", "b", "c", "d"];

fn contents(dir: &Path) -> Vec<Vec<u8>> {
    FILES.iter().map(|f| fs::read(dir.join(f)).unwrap_or_else(|e| panic!("read {f}: {e}"))).collect()
}

#[test]
fn collapse_insert_copy_range_like_the_kernel() {
    require_fuse!();
    for t in ["xfs_io", "fallocate"] {
        if !have(t) {
            println!("SKIP: {t} not installed");
            return;
        }
    }
    let fx = Fixture::with_mkfs_args("64M", &[]);
    let kfx = Fixture::with_mkfs_args("64M", &[]);
    if !mount_support::require_loop_mount("the kernel is the oracle") {
        return;
    }
    let loop_ok = tool("mount").arg("-o").arg("loop").arg(&kfx.img).arg(&kfx.mnt).output().expect("mount");
    assert!(loop_ok.status.success(), "the kernel refused the image: {}", String::from_utf8_lossy(&loop_ok.stderr));
    fx.mount("rw");
    let r = std::panic::catch_unwind(|| {
        for s in SETUP {
            assert!(sh_in(&kfx.mnt, s), "kernel: {s}");
            assert!(sh_in(&fx.mnt, s), "uext4: {s}");
        }
        assert!(contents(&fx.mnt) == contents(&kfx.mnt), "copy_range results differ from the kernel's");
        // Through FUSE: refused before the daemon (nothing changes), or
        // (a kernel that passes them on) the kernel's result.
        let mut refused = Vec::new();
        for (s, cli) in SHIFTS {
            let before = contents(&fx.mnt);
            assert!(sh_in(&kfx.mnt, s), "kernel: {s}");
            if sh_in(&fx.mnt, s) {
                assert!(refused.is_empty(), "{s} worked after an earlier one was refused");
                assert!(contents(&fx.mnt) == contents(&kfx.mnt), "{s}: result differs from the kernel's");
            } else {
                assert!(contents(&fx.mnt) == before, "{s} failed but changed the files");
                println!("{s}: refused through FUSE (kernel fuse_file_fallocate)");
                refused.push(*cli);
            }
        }
        refused
    });
    fx.unmount();
    let refused = match r {
        Ok(v) => v,
        Err(p) => {
            unmount_retrying(tool("umount").arg(&kfx.mnt));
            std::panic::resume_unwind(p);
        }
    };
    // The engine does what FUSE refused: `uext4 fallocate` on the image,
    // then the files must be the kernel's.
    for cli in &refused {
        run(Command::new(BIN).arg("fallocate").arg(&fx.img).args(*cli));
    }
    fx.mount("rw");
    // AssertUnwindSafe: the fixtures are only read inside; after a panic
    // they are unmounted below and dropped.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert!(contents(&fx.mnt) == contents(&kfx.mnt), "collapse/insert by the engine differ from the kernel's");
        // A punch without KEEP_SIZE and UNSHARE_RANGE: EOPNOTSUPP on
        // both, the file unchanged.
        for mode in [libc::FALLOC_FL_PUNCH_HOLE, libc::FALLOC_FL_UNSHARE_RANGE] {
            let before = contents(&fx.mnt);
            let errs: Vec<i32> = [&fx.mnt, &kfx.mnt]
                .iter()
                .map(|d| {
                    let f = fs::OpenOptions::new().write(true).open(d.join("a")).expect("open a");
                    // SAFETY: a valid descriptor, no memory arguments.
                    let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, 0, 4096) };
                    if r == 0 {
                        0
                    } else {
                        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
                    }
                })
                .collect();
            assert_eq!(errs, [libc::EOPNOTSUPP, libc::EOPNOTSUPP], "fallocate mode {mode:#x}");
            assert!(contents(&fx.mnt) == before);
        }
        // Overlapping ranges of one file: EINVAL (the VFS checks).
        let f = fs::OpenOptions::new().read(true).write(true).open(fx.path("c")).expect("open c");
        let (mut a, mut b) = (0i64, 100i64);
        // SAFETY: valid descriptor and offset pointers for the call.
        let n = unsafe { libc::copy_file_range(f.as_raw_fd(), &mut a, f.as_raw_fd(), &mut b, 4096, 0) };
        assert_eq!(n, -1);
        assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EINVAL));
    }));
    fx.unmount();
    unmount_retrying(tool("umount").arg(&kfx.mnt));
    if let Err(p) = r {
        std::panic::resume_unwind(p);
    }
    fx.assert_clean();
    run(tool("e2fsck").arg("-fn").arg(&kfx.img));
}
