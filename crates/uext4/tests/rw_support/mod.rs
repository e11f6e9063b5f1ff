//! Shared helpers of the read-write tests: fresh images and the oracles.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// True if `tool` runs.
pub fn have(tool: &str) -> bool {
    Command::new(tool).arg("-V").output().is_ok()
}

/// A fresh image made by mkfs.ext4 with `args` (e.g. `["-b", "1024"]`),
/// `size_mb` MiB, in a temporary directory. None (with a printed reason)
/// when mkfs.ext4 is missing.
pub fn mkfs(size_mb: u64, args: &[&str]) -> Option<(tempfile::TempDir, PathBuf)> {
    if !have("mkfs.ext4") {
        eprintln!("SKIP: mkfs.ext4 not installed");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    let f = std::fs::File::create(&img).unwrap();
    f.set_len(size_mb << 20).unwrap();
    let out = Command::new("mkfs.ext4").arg("-q").arg("-F").args(args).arg(&img).output().unwrap();
    assert!(out.status.success(), "mkfs.ext4: {}", String::from_utf8_lossy(&out.stderr));
    Some((dir, img))
}

/// Asserts `e2fsck -fn` finds nothing wrong.
pub fn fsck_clean(img: &Path) {
    let out = Command::new("e2fsck").arg("-fn").arg(img).output().unwrap();
    assert!(
        out.status.success(),
        "e2fsck -fn {}:\n{}{}",
        img.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `debugfs -R cmd img` output.
pub fn debugfs(img: &Path, cmd: &str) -> String {
    let out = Command::new("debugfs").arg("-R").arg(cmd).arg(img).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// True when running as root (loop mounts possible).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Unmounts a kernel mount when dropped (lazily if busy).
pub struct Umount(pub PathBuf);

impl Drop for Umount {
    fn drop(&mut self) {
        let ok = Command::new("umount").arg(&self.0).status().map(|s| s.success()).unwrap_or(false);
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// xorshift64: the tests' deterministic random numbers.
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// `len` pseudo-random bytes determined by `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    (0..len).map(|_| r.next() as u8).collect()
}

/// Mounts `img` read-only with the kernel's ext4 (root and loop devices
/// needed; skipped with a message otherwise) and compares each named
/// file with its expected contents.
#[allow(dead_code)]
pub fn kernel_read_back(img: &Path, files: &[(&str, Vec<u8>)]) {
    if !is_root() {
        eprintln!("SKIP: kernel read-back needs root and loop devices");
        return;
    }
    let mnt = tempfile::tempdir().unwrap();
    let st = Command::new("mount").args(["-o", "loop,ro"]).arg(img).arg(mnt.path()).status().unwrap();
    assert!(st.success(), "kernel refused to mount {}", img.display());
    let guard = Umount(mnt.path().to_path_buf());
    for (name, want) in files {
        let got = std::fs::read(mnt.path().join(name)).unwrap();
        assert!(&got == want, "kernel read of {name} differs");
    }
    drop(guard);
}
