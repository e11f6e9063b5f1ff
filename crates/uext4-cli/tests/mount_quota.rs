//! Project ids through `uext4 mount`: `xfs_io`'s chproj, lsproj and
//! chattr +P reach the daemon as FS_IOC_FSSETXATTR / FS_IOC_FSGETXATTR;
//! new files in a PROJINHERIT directory take its project, and the
//! project quota e2fsck recomputes matches the files. Root's requests
//! pass quota hard limits and use the blocks reserved for root, an
//! ordinary user's (setpriv) do not, as with CAP_SYS_RESOURCE on ext4
//! (needs root, /dev/fuse, mkfs.ext4, xfs_io, debugfs and setpriv;
//! prints `SKIP:` otherwise).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use uext4::format::quota::QuotaType;
use uext4::inode_api::QuotaLimits;

mod mount_support;

use mount_support::{have, run, tool, Fixture};

/// `xfs_io -c CMD... PATH` output.
fn xfs_io(path: &std::path::Path, cmds: &[&str]) -> String {
    let mut c = tool("xfs_io");
    for cmd in cmds {
        c.arg("-c").arg(cmd);
    }
    let out = run(c.arg(path));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn fuse_project_ids_through_fsxattr_ioctls() {
    require_fuse!();
    for t in ["mkfs.ext4", "xfs_io", "debugfs"] {
        if !have(t) {
            println!("SKIP: {t} not found");
            return;
        }
    }
    let fx = Fixture::with_mkfs_args("32M", &[]);
    // The image: a quota + project filesystem made by mkfs.ext4 instead.
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-O", "quota,project", "-E", "quotatype=usrquota:grpquota:prjquota"])
        .arg(&fx.img));
    fx.mount("rw");
    let d = fx.path("d");
    fs::create_dir(&d).unwrap();
    xfs_io(&d, &["chproj 42", "chattr +P"]);
    fs::write(d.join("f"), vec![7u8; 20000]).unwrap();
    fs::create_dir(d.join("sub")).unwrap();
    let lsproj = xfs_io(&d.join("f"), &["lsproj"]);
    assert!(lsproj.contains("projid = 42"), "{lsproj}");
    let lsattr = xfs_io(&d.join("sub"), &["lsattr"]);
    assert!(lsattr.contains('P'), "sub inherits PROJINHERIT: {lsattr}");
    // A file moved to another project.
    fs::write(fx.path("g"), vec![1u8; 5000]).unwrap();
    xfs_io(&fx.path("g"), &["chproj 43"]);
    assert!(xfs_io(&fx.path("g"), &["lsproj"]).contains("projid = 43"));
    fx.unmount();
    fx.assert_clean();
    let lq = String::from_utf8_lossy(&run(Command::new("debugfs").arg("-R").arg("lq project").arg(&fx.img)).stdout)
        .into_owned();
    let inodes = |id: &str| {
        lq.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|w| w.first() == Some(&id))
            .map(|w| w[4].to_string())
    };
    // d, d/f and d/sub in project 42; g in 43.
    assert_eq!(inodes("42").as_deref(), Some("3"), "{lq}");
    assert_eq!(inodes("43").as_deref(), Some("1"), "{lq}");
}

/// `dd` of `kib` KiB of zeros to `path` as `uid` (None: root): whether
/// it wrote them all.
fn dd_as(uid: Option<u32>, path: &Path, kib: u64) -> bool {
    let mut c = match uid {
        Some(u) => {
            let mut c = tool("setpriv");
            c.args(["--reuid", &u.to_string(), "--regid", &u.to_string(), "--clear-groups", "dd"]);
            c
        }
        None => tool("dd"),
    };
    c.arg("if=/dev/zero").arg(format!("of={}", path.display())).args(["bs=4k", &format!("count={}", kib / 4)]);
    c.arg("conv=fsync").stderr(std::process::Stdio::null()).status().is_ok_and(|s| s.success())
}

#[test]
fn fuse_root_passes_quota_limits_and_uses_the_reserve() {
    require_fuse!();
    for t in ["mkfs.ext4", "setpriv", "dd"] {
        if !have(t) {
            println!("SKIP: {t} not found");
            return;
        }
    }
    let fx = Fixture::with_mkfs_args("32M", &[]);
    run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-m", "5", "-O", "quota", "-E", "quotatype=usrquota"])
        .arg(&fx.img));
    {
        let mut fs = uext4::Filesystem::open_rw(&fx.img).unwrap();
        let limits = QuotaLimits { space_hard: 64 << 10, ..Default::default() };
        for uid in [0, 65534] {
            fs.set_quota_limits(QuotaType::User, uid, limits).unwrap();
        }
        fs.unmount().unwrap();
    }
    fx.mount("rw,allow_other");
    fs::set_permissions(&fx.mnt, fs::Permissions::from_mode(0o777)).unwrap();
    // Past the hard limit: root's write goes through, nobody's fails.
    assert!(dd_as(None, &fx.path("root-big"), 256), "root is not held to its quota");
    assert!(!dd_as(Some(65534), &fx.path("nobody-big"), 256), "nobody's write passed its quota");
    // Fill the filesystem as a user without limits: what is left is
    // root's reserve (5%), which root may still use.
    assert!(!dd_as(Some(1000), &fx.path("fill"), 64 << 10), "the filesystem did not fill");
    assert!(!dd_as(Some(1000), &fx.path("more"), 64), "an ordinary user wrote into the reserve");
    assert!(dd_as(None, &fx.path("root-reserve"), 512), "root could not use its reserve");
    assert_eq!(fs::metadata(fx.path("root-reserve")).unwrap().len(), 512 << 10);
    fx.unmount();
    fx.assert_clean();
}
