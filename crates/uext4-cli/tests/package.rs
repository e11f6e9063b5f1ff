//! Publish-readiness of the workspace's three crates, offline: `cargo
//! package --workspace` builds each crate's .crate file, resolving uext4-fuse
//! and uext4-cli against the freshly packaged uext4 (a local overlay), which
//! fails on a path dependency without a version or a missing manifest
//! field. The full check, which also compiles every package from its
//! tarball, is `cargo package --workspace --offline` (minutes on a cold
//! target directory, so not run here); `cargo publish --workspace
//! --dry-run` does the same but needs the registry.
//!
//! And the Debian package of the command (scripts/deb), installed into this
//! machine, mounted from /etc/fstab and removed again (root only).

mod mount_support;

use mount_support::{have, is_mounted, run, tool, unmount_retrying, wait_image_free, Fixture};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    c
}

#[test]
fn crates_package_offline_without_large_files() {
    let target = tempfile::tempdir().unwrap();
    let out = cargo()
        .args(["package", "--workspace", "--offline", "--no-verify", "--allow-dirty", "--target-dir"])
        .arg(target.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && err.contains("offline") {
        println!("SKIP: the local registry cache lacks what packaging needs offline: {err}");
        return;
    }
    assert!(out.status.success(), "cargo package failed: {err}");
    for name in ["uext4", "uext4-fuse", "uext4-cli"] {
        let krate = target.path().join(format!("package/{name}-0.1.0.crate"));
        assert!(krate.is_file(), "{name} not packaged: {err}");
    }

    // What goes into each package: sources, manifest, README; no images,
    // nothing big (the test images are made at run time, never stored).
    let out = cargo().args(["package", "--workspace", "--offline", "--list", "--allow-dirty"]).output().unwrap();
    assert!(out.status.success(), "cargo package --list: {}", String::from_utf8_lossy(&out.stderr));
    let list = String::from_utf8(out.stdout).unwrap();
    let files: Vec<&str> = list.lines().collect();
    assert!(files.iter().filter(|f| **f == "README.md").count() == 3, "a crate lacks its README: {list}");
    for f in &files {
        // (Test scripts run by the tests, e.g. tests/mount_setid/script.sh.)
        let known = f.ends_with(".rs")
            || (f.starts_with("tests/") && f.ends_with(".sh"))
            || matches!(*f, "Cargo.toml" | "Cargo.toml.orig" | "Cargo.lock" | "README.md" | ".cargo_vcs_info.json");
        assert!(known, "unexpected file in a package: {f}");
    }
}

/// What the package test changed on the machine, put back when it drops,
/// also when the test fails half-way: mounts left behind are lazily
/// unmounted, /etc/fstab gets its bytes back, the package is removed, and
/// the files it replaced (a hand-made /sbin/mount.fuse.uext4 link, say)
/// are put back.
struct Machine {
    /// The mount points the test mounts through /etc/fstab.
    mounts: Vec<PathBuf>,
    /// /etc/fstab before the test (`None`: there was none), once changed.
    fstab: Option<Option<Vec<u8>>>,
    /// The package may be (partly) installed.
    installed: bool,
    /// Files at the package's paths before it was installed, and where
    /// their copies are.
    saved: Vec<(PathBuf, PathBuf)>,
    /// Holds those copies.
    backup: tempfile::TempDir,
}

const FSTAB: &str = "/etc/fstab";

impl Machine {
    /// Moves away whatever is at the package's file paths (`dpkg-deb
    /// --fsys-tarfile | tar -t`), so that neither dpkg's install nor its
    /// removal destroys what was there.
    fn save_paths_of(&mut self, deb: &Path) {
        let out = run(tool("sh").arg("-c").arg("dpkg-deb --fsys-tarfile \"$1\" | tar -t").arg("sh").arg(deb));
        for entry in String::from_utf8(out.stdout).expect("utf-8 paths").lines() {
            let path = PathBuf::from(entry.trim_start_matches('.'));
            if entry.ends_with('/') || fs::symlink_metadata(&path).is_err() {
                continue;
            }
            let copy = self.backup.path().join(self.saved.len().to_string());
            run(tool("cp").arg("-a").arg(&path).arg(&copy));
            fs::remove_file(&path).unwrap_or_else(|e| panic!("move {} aside: {e}", path.display()));
            println!("moved {} aside (put back at the end)", path.display());
            self.saved.push((path, copy));
        }
    }

    /// Appends `lines` to /etc/fstab (keeping the original to restore).
    fn add_fstab(&mut self, lines: &str) {
        let old = fs::read(FSTAB).ok();
        let mut new = old.clone().unwrap_or_default();
        if !new.is_empty() && !new.ends_with(b"\n") {
            new.push(b'\n');
        }
        new.extend_from_slice(lines.as_bytes());
        self.fstab = Some(old);
        fs::write(FSTAB, new).expect("write /etc/fstab");
    }

    fn restore_fstab(&mut self) {
        match self.fstab.take() {
            Some(Some(old)) => fs::write(FSTAB, old).expect("restore /etc/fstab"),
            Some(None) => fs::remove_file(FSTAB).expect("remove /etc/fstab"),
            None => {}
        }
    }

    fn remove_package(&mut self) {
        if !self.installed {
            return;
        }
        let out = if have("apt-get") {
            apt().args(["remove", "-y", "uext4"]).output()
        } else {
            tool("dpkg").args(["-r", "uext4"]).output()
        }
        .expect("run the package manager");
        assert!(out.status.success(), "removing uext4: {}", String::from_utf8_lossy(&out.stderr));
        self.installed = false;
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        for m in &self.mounts {
            if is_mounted(m) {
                let _ = tool("umount").arg("-l").arg(m).status();
            }
        }
        if let Some(old) = self.fstab.take() {
            let _ = match old {
                Some(old) => fs::write(FSTAB, old),
                None => fs::remove_file(FSTAB),
            };
        }
        if self.installed {
            let _ = apt().args(["remove", "-y", "uext4"]).status();
            let _ = tool("dpkg").args(["-r", "uext4"]).status();
        }
        for (path, copy) in &self.saved {
            let _ = tool("cp").arg("-a").arg(copy).arg(path).status();
        }
    }
}

/// apt-get as a script runs it: no questions, waiting for another apt or
/// dpkg to finish rather than failing on its lock.
fn apt() -> Command {
    let mut c = tool("apt-get");
    c.env("DEBIAN_FRONTEND", "noninteractive").args(["-o", "DPkg::Lock::Timeout=300"]);
    c
}

/// Whether dpkg has the package `name` installed (in part or whole).
fn package_installed(name: &str) -> bool {
    tool("dpkg-query")
        .args(["-W", "-f=${Status}", name])
        .output()
        .is_ok_and(|o| o.status.success() && !String::from_utf8_lossy(&o.stdout).contains("not-installed"))
}

/// A path as an /etc/fstab field (fstab(5): octal escapes for blanks).
fn fstab_field(p: &Path) -> String {
    p.to_str()
        .expect("utf-8 temporary path")
        .replace('\\', "\\134")
        .replace(' ', "\\040")
        .replace('\t', "\\011")
        .replace('\n', "\\012")
}

/// The type and options of the mount at `mnt` in /proc/self/mounts.
fn mount_entry(mnt: &Path) -> Option<(String, String)> {
    let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.len() > 3 && f[1] == fstab_field(mnt)).then(|| (f[2].to_string(), f[3].to_string()))
    })
}

/// The .deb that scripts/deb builds installs with apt-get, mounts images
/// through /etc/fstab lines of both types (`uext4`, which mount(8) runs
/// /sbin/mount.uext4 for, and `fuse.uext4`, /sbin/mount.fuse.uext4) with
/// `mount MOUNTPOINT`, and `mount -t uext4 IMAGE DIR`; each mount is
/// written, unmounted with `umount` and checked with `e2fsck -fn`. Its
/// man pages, completions and documents are in place; `apt-get remove`
/// takes all of it away again. The machine is left as it was: /etc/fstab
/// byte for byte, and any file at the package's paths (moved aside and
/// back). A `uext4` package that is installed already is not touched:
/// the test fails and says so. The package holds the binary this test
/// build made (with the test hooks, inert without their variables), so
/// that it compiles nothing more; `scripts/deb` alone builds the release.
#[test]
fn deb_installs_mounts_from_fstab_and_removes() {
    require_fuse!();
    for t in ["dpkg", "dpkg-deb", "dpkg-query", "mount", "umount"] {
        if !have(t) {
            println!("SKIP: {t} not found (not a Debian system)");
            return;
        }
    }
    assert!(
        !package_installed("uext4"),
        "a uext4 package is installed on this machine: this test installs and removes its own, so it leaves \
         yours alone; remove it (apt-get remove uext4) to run the test"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out_dir = tempfile::tempdir().expect("tempdir");
    let out = run(Command::new(root.join("scripts/deb"))
        .arg("--binary")
        .arg(mount_support::BIN)
        .arg("--out")
        .arg(out_dir.path()));
    let deb = PathBuf::from(String::from_utf8(out.stdout).expect("utf-8").trim());
    let arch = String::from_utf8(run(tool("dpkg").arg("--print-architecture")).stdout).expect("utf-8");
    assert_eq!(
        deb.file_name().and_then(|n| n.to_str()),
        Some(format!("uext4_{}_{}.deb", env!("CARGO_PKG_VERSION"), arch.trim()).as_str())
    );
    let control = String::from_utf8(run(tool("dpkg-deb").arg("-f").arg(&deb)).stdout).expect("utf-8");
    assert!(control.contains("\nDepends: libc6"), "{control}");

    // Two images, one per fstab type, and one for `mount -t uext4`.
    let a = Fixture::with_mkfs_args("64M", &[]);
    let b = Fixture::with_mkfs_args("64M", &[]);
    let mut machine = Machine {
        mounts: vec![a.mnt.clone(), b.mnt.clone()],
        fstab: None,
        installed: false,
        saved: Vec::new(),
        backup: tempfile::tempdir().expect("tempdir"),
    };
    machine.save_paths_of(&deb);
    // What mount(8) passes from fstab: nofail, _netdev and user (with the
    // noexec,nosuid,nodev it implies; defaults and x-* it keeps to
    // itself) are accepted, the first three meaning nothing to a file
    // image.
    machine.add_fstab(&format!(
        "{} {} uext4 defaults,nofail 0 0\n\
         {} {} fuse.uext4 defaults,nofail,_netdev,user,noatime,x-systemd.device-timeout=5s 0 0\n",
        fstab_field(&a.img),
        fstab_field(&a.mnt),
        fstab_field(&b.img),
        fstab_field(&b.mnt),
    ));
    // No helper yet: mount(8) asks the kernel for a type "uext4", which
    // it does not know.
    let before = tool("mount").arg(&a.mnt).output().expect("run mount");
    assert!(!before.status.success() && !is_mounted(&a.mnt), "mounted before the package was installed");

    machine.installed = true;
    if have("apt-get") {
        // apt installs a local .deb without the network when its
        // dependencies are there.
        run(apt().arg("install").arg("-y").arg(&deb));
    } else {
        run(tool("dpkg").arg("-i").arg(&deb));
    }
    assert!(package_installed("uext4"));
    let version = run(Command::new("/usr/bin/uext4").arg("--version"));
    assert_eq!(String::from_utf8_lossy(&version.stdout).trim(), format!("uext4 {}", env!("CARGO_PKG_VERSION")));
    for link in ["/sbin/mount.uext4", "/sbin/mount.fuse.uext4"] {
        assert_eq!(fs::read_link(link).expect(link), Path::new("/usr/bin/uext4"));
    }
    for f in [
        "/usr/share/man/man1/uext4.1.gz",
        "/usr/share/man/man1/uext4-mount.1.gz",
        "/usr/share/man/man8/mount.uext4.8.gz",
        "/usr/share/man/man8/mount.fuse.uext4.8.gz",
        "/usr/share/bash-completion/completions/uext4",
        "/usr/share/zsh/vendor-completions/_uext4",
        "/usr/share/fish/vendor_completions.d/uext4.fish",
        "/usr/share/doc/uext4/copyright",
        "/usr/share/doc/uext4/README.md.gz",
        "/usr/share/doc/uext4/changelog.gz",
    ] {
        assert!(fs::metadata(f).is_ok_and(|m| m.is_file() && m.len() > 0), "{f} missing or empty");
    }
    if have("man") {
        run(tool("man").args(["-w", "uext4-mount"]));
        run(tool("man").args(["-w", "8", "mount.uext4"]));
    }
    // The completion script loads and completes `uext4`.
    run(tool("bash").arg("-c").arg("source /usr/share/bash-completion/completions/uext4 && complete -p uext4"));

    // Through /etc/fstab, as mount(8) and the boot's mounts do.
    for (fx, name, flag) in [(&a, "by-fstab-uext4", "relatime"), (&b, "by-fstab-fuse.uext4", "noexec")] {
        run(tool("mount").arg(&fx.mnt));
        let (ty, opts) = mount_entry(&fx.mnt).expect("mounted");
        assert_eq!(ty, "fuse.uext4");
        // The line's flags reached the kernel: on b the noexec that `user`
        // implies (a's options leave the kernel's default relatime).
        assert!(opts.split(',').any(|o| o == flag), "{flag} not among {opts}");
        fs::write(fx.path(name), name).expect("write through the mount");
        assert_eq!(fs::read(fx.path(name)).expect("read back"), name.as_bytes());
        unmount_retrying(tool("umount").arg(&fx.mnt));
        wait_image_free(&fx.img);
        assert!(!is_mounted(&fx.mnt));
        fx.assert_clean();
        let out = run(Command::new("/usr/bin/uext4").arg("cat").arg(&fx.img).arg(format!("/{name}")));
        assert_eq!(out.stdout, name.as_bytes());
    }
    // `mount -t uext4 IMAGE DIR` without fstab (the lines name other
    // mount points than this one).
    let c = Fixture::with_mkfs_args("64M", &[]);
    machine.mounts.push(c.mnt.clone());
    run(tool("mount").arg("-t").arg("uext4").arg(&c.img).arg(&c.mnt));
    assert_eq!(mount_entry(&c.mnt).map(|e| e.0).as_deref(), Some("fuse.uext4"));
    fs::write(c.path("by-mount-t"), b"t").expect("write");
    unmount_retrying(tool("umount").arg(&c.mnt));
    wait_image_free(&c.img);
    c.assert_clean();

    machine.restore_fstab();
    machine.remove_package();
    assert!(!package_installed("uext4"), "uext4 still installed after apt-get remove");
    for gone in ["/usr/bin/uext4", "/sbin/mount.uext4", "/sbin/mount.fuse.uext4", "/usr/share/man/man1/uext4.1.gz"] {
        assert!(fs::symlink_metadata(gone).is_err(), "{gone} left after removing the package");
    }
    drop(machine);
    println!("deb_installs_mounts_from_fstab_and_removes: {} installed, mounted from fstab, removed", deb.display());
}
