//! Project ids through `uext4 mount`: `xfs_io`'s chproj, lsproj and
//! chattr +P reach the daemon as FS_IOC_FSSETXATTR / FS_IOC_FSGETXATTR;
//! new files in a PROJINHERIT directory take its project, and the
//! project quota e2fsck recomputes matches the files (needs root,
//! /dev/fuse, mkfs.ext4, xfs_io and debugfs; prints `SKIP:` otherwise).

use std::fs;
use std::process::Command;

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
