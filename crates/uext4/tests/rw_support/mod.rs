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

/// Why a kernel loop mount cannot be tried here, if it cannot.
pub fn kernel_unavailable() -> Option<&'static str> {
    if !is_root() {
        return Some("not root");
    }
    if !have("mount") || !Path::new("/dev/loop-control").exists() {
        return Some("no mount(8) or no loop devices");
    }
    match Command::new("losetup").arg("-f").output() {
        Ok(o) if o.status.success() => None,
        _ => Some("no free loop device"),
    }
}

/// A kernel loop mount of an image, unmounted when dropped.
///
/// Unmounting retries while the mount is busy (a process forked meanwhile
/// by another test's thread may hold a descriptor for an instant) and
/// detaches lazily only as a last resort, so that the loop device goes
/// away once nothing uses it.
pub struct KernelMount {
    dir: PathBuf,
    mounted: bool,
    /// The mount point, when the mount made it.
    _tmp: Option<tempfile::TempDir>,
}

impl KernelMount {
    /// Mounts `img` with `-t ext4 -o loop` plus `opts` (e.g. `"ro"`; empty
    /// for none) on `dir`, made if missing; `Err` holds mount's complaint.
    pub fn at(img: &Path, dir: &Path, opts: &str) -> Result<KernelMount, String> {
        Self::at_as(img, dir, "ext4", opts)
    }

    /// As [`KernelMount::at`] with another filesystem type (`ext2`, `ext3`).
    pub fn at_as(img: &Path, dir: &Path, fstype: &str, opts: &str) -> Result<KernelMount, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let o = if opts.is_empty() { "loop".to_string() } else { format!("loop,{opts}") };
        let out = Command::new("mount")
            .args(["-t", fstype, "-o", &o])
            .arg(img)
            .arg(dir)
            .output()
            .map_err(|e| format!("mount(8): {e}"))?;
        if !out.status.success() {
            return Err(format!("mount -o {o} failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(KernelMount { dir: dir.to_path_buf(), mounted: true, _tmp: None })
    }

    /// As [`KernelMount::at`], on a fresh temporary directory.
    pub fn new(img: &Path, opts: &str) -> Result<KernelMount, String> {
        Self::new_as(img, "ext4", opts)
    }

    /// As [`KernelMount::new`] with another filesystem type.
    pub fn new_as(img: &Path, fstype: &str, opts: &str) -> Result<KernelMount, String> {
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut m = KernelMount::at_as(img, tmp.path(), fstype, opts)?;
        m._tmp = Some(tmp);
        Ok(m)
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Unmounts now; panics if the mount stayed busy and had to be
    /// detached lazily.
    pub fn unmount(mut self) {
        assert!(self.do_unmount(), "cannot unmount {:?}", self.dir);
    }

    /// Unmounts, retrying while busy; false if it had to detach lazily.
    fn do_unmount(&mut self) -> bool {
        if !self.mounted {
            return true;
        }
        self.mounted = false;
        for attempt in 0..20 {
            if Command::new("umount").arg(&self.dir).status().is_ok_and(|s| s.success()) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(100 * (attempt + 1)));
        }
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        eprintln!("warning: {:?} needed a lazy unmount", self.dir);
        false
    }
}

impl Drop for KernelMount {
    fn drop(&mut self) {
        self.do_unmount();
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

    /// A file name byte: anything but NUL and '/', high bytes included
    /// (they hash differently in the signed and unsigned hash flavours).
    pub fn name_byte(&mut self) -> u8 {
        loop {
            let b = self.next() as u8;
            if b != 0 && b != b'/' {
                return b;
            }
        }
    }
}

/// Opens `img` read-write with the root-reserved blocks usable (as root
/// would).
pub fn open_rw_reserved(img: &Path) -> uext4::Filesystem {
    let dev = uext4::FileDevice::open(img, true).unwrap();
    let opts = uext4::MountOptions { write: true, use_reserved: true, ..Default::default() };
    uext4::Filesystem::open_device(std::sync::Arc::new(dev), opts).unwrap()
}

/// `len` pseudo-random bytes determined by `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    (0..len).map(|_| r.next() as u8).collect()
}

/// Mounts `img` read-only with the kernel's ext4 (root and loop devices
/// needed; skipped with a message otherwise) and compares each named
/// file with its expected contents.
pub fn kernel_read_back(img: &Path, files: &[(&str, Vec<u8>)]) {
    if !is_root() {
        eprintln!("SKIP: kernel read-back needs root and loop devices");
        return;
    }
    let mnt = KernelMount::new(img, "ro").unwrap_or_else(|e| panic!("kernel refused to mount {}: {e}", img.display()));
    for (name, want) in files {
        let got = std::fs::read(mnt.path().join(name)).unwrap();
        assert!(&got == want, "kernel read of {name} differs");
    }
    mnt.unmount();
}

/// Opens `base` (an image's bytes) read-write on a device that records
/// every write and flush, for crash-point tests; the periodic commit is
/// pushed out of the way so that commits happen where the test says.
pub fn open_recording(base: &[u8]) -> (std::sync::Arc<uext4::device::RecordingDevice>, uext4::Filesystem) {
    use std::sync::Arc;
    use uext4::device::{BlockDevice, RecordingDevice};
    let dev = Arc::new(RecordingDevice::new(base.to_vec()));
    let opts = uext4::MountOptions {
        write: true,
        commit_interval: std::time::Duration::from_secs(3600),
        ..Default::default()
    };
    let fs = uext4::Filesystem::open_device(dev.clone() as Arc<dyn BlockDevice>, opts).unwrap();
    (dev, fs)
}

/// Inodes in use and names in the root directory.
pub fn inodes_and_names(fs: &uext4::Filesystem) -> (u64, usize) {
    let st = fs.statfs();
    (st.inodes - st.free_inodes, fs.read_dir_all(fs.root()).unwrap().len())
}

/// Creates `name` in the root as a `len`-byte allocated file with a 1 KiB
/// hole every 64 KiB (hundreds of extents: a tree with leaf blocks, whose
/// truncate or delete takes several bounded handles), its first 4 KiB
/// written; returns its inode number.
pub fn fragmented_file(fs: &uext4::Filesystem, name: &[u8], len: u64) -> u32 {
    use uext4::fs::FallocMode;
    let ino = fs.create(fs.root(), name, 0o644, 0, 0).unwrap().ino;
    fs.fallocate(ino, FallocMode::Allocate, 0, len).unwrap();
    for k in 0..len / 65536 {
        fs.fallocate(ino, FallocMode::PunchHole, k * 65536 + 1024, 1024).unwrap();
    }
    fs.write_direct(ino, 0, &[9u8; 4096]).unwrap();
    ino
}
