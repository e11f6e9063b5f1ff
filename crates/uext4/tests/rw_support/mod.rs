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

/// Why kernel loop mounts cannot be tried here, if they cannot: only a
/// missing facility counts (not root, no mount(8)/losetup/mkfs.ext4, no
/// loop devices, a kernel without ext4). The first call also loop-mounts
/// an image made by mkfs.ext4 (see [`require_loop_mount`]).
///
/// # Panics
/// When every facility is there but the kernel refuses that image: a
/// test host that cannot mount ext4 cannot check uext4's images, and a
/// skip there would turn a refused uext4 image into a pass.
pub fn kernel_unavailable() -> Option<&'static str> {
    static VERDICT: std::sync::OnceLock<Option<&'static str>> = std::sync::OnceLock::new();
    *VERDICT.get_or_init(loop_mount_facility)
}

/// True when kernel loop mounts work here; prints `SKIP: <reason>` and
/// returns false for a missing facility. Call it before the test's work:
/// after it, a refused mount is a failure (panic), never a skip.
pub fn require_loop_mount() -> bool {
    match kernel_unavailable() {
        None => true,
        Some(why) => {
            eprintln!("SKIP: kernel loop mount: {why}");
            false
        }
    }
}

/// True when this kernel's ext4 mounts casefold images (CONFIG_UNICODE:
/// ext4 then lists `casefold` in /sys/fs/ext4/features). Checked up
/// front, so that a refused casefold mount is never taken for a skip.
pub fn kernel_has_casefold() -> bool {
    Path::new("/sys/fs/ext4/features/casefold").exists()
}

/// True when this kernel's ext4 mounts quota images: ext4 needs
/// CONFIG_QUOTA and CONFIG_QFMT_V2 built in (fs/ext4/super.c tests
/// `defined(CONFIG_QFMT_V2)`, false for a module), so quota_v2's
/// `v2_read_file_info` must be in kallsyms without a `[module]` tag.
/// Checked up front, as [`kernel_has_casefold`].
pub fn kernel_has_quota_v2() -> bool {
    Path::new("/proc/sys/fs/quota").is_dir()
        && std::fs::read_to_string("/proc/kallsyms").is_ok_and(|k| {
            k.lines().any(|l| {
                let mut f = l.split_whitespace().skip(2);
                f.next() == Some("v2_read_file_info") && f.next().is_none()
            })
        })
}

/// The check behind [`kernel_unavailable`], run once per test binary.
fn loop_mount_facility() -> Option<&'static str> {
    if !is_root() {
        return Some("not root");
    }
    for t in ["mount", "losetup", "mkfs.ext4"] {
        if Command::new("sh").arg("-c").arg(format!("command -v {t}")).output().map_or(true, |o| !o.status.success()) {
            return Some(match t {
                "mount" => "mount(8) not installed",
                "losetup" => "losetup not installed",
                _ => "mkfs.ext4 not installed",
            });
        }
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("no loop devices (/dev/loop-control missing)");
    }
    match Command::new("losetup").arg("-f").output() {
        Ok(o) if o.status.success() => {}
        _ => return Some("no free loop device"),
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let img = dir.path().join("trial.img");
    std::fs::File::create(&img).and_then(|f| f.set_len(16 << 20)).expect("trial image");
    let out = Command::new("mkfs.ext4").args(["-q", "-F", "-t", "ext4"]).arg(&img).output().expect("mkfs.ext4");
    assert!(out.status.success(), "mkfs.ext4 of the trial image: {}", String::from_utf8_lossy(&out.stderr));
    match KernelMount::new(&img, "") {
        Ok(m) => {
            m.unmount();
            None
        }
        Err(e) => {
            let fss = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
            if !fss.split_whitespace().any(|f| f == "ext4") && !ext4_module_exists() {
                return Some("the kernel has no ext4");
            }
            panic!(
                "loop mounts should work here (root, mount(8), loop devices, ext4) but the kernel refused an \
                 image made by mkfs.ext4: {e}. Fix the test host; skipping would hide refused uext4 images."
            )
        }
    }
}

/// True when an ext4 module is installed for the running kernel (it is
/// absent from /proc/filesystems until loaded).
fn ext4_module_exists() -> bool {
    let Ok(rel) = std::fs::read_to_string("/proc/sys/kernel/osrelease") else { return false };
    let base = PathBuf::from("/lib/modules").join(rel.trim()).join("kernel/fs/ext4");
    base.is_dir()
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
    if !require_loop_mount() {
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
    use uext4::inode_api::FallocMode;
    let ino = fs.create(fs.root(), name, 0o644, 0, 0).unwrap().ino;
    fs.fallocate(ino, FallocMode::Allocate, 0, len).unwrap();
    for k in 0..len / 65536 {
        fs.fallocate(ino, FallocMode::PunchHole, k * 65536 + 1024, 1024).unwrap();
    }
    fs.write_direct(ino, 0, &[9u8; 4096]).unwrap();
    ino
}
