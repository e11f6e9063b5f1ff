//! `setfattr` of a 64 KiB value (XATTR_SIZE_MAX) through `uext4 mount`
//! on an image made with `mkfs.ext4 -O ea_inode`: the FUSE adapter passes
//! the whole value both ways, the value lands in its own inode, and after
//! the unmount e2fsck is clean, `debugfs ea_get` and a kernel loop mount
//! read it back exactly. Needs root and /dev/fuse (prints `SKIP:`
//! otherwise), and setfattr/getfattr.

use std::process::Command;

mod mount_support;

use mount_support::{have, run, tool, Fixture};

/// A value no shell argument could carry in hex (128 KiB is the limit),
/// given in base64 as setfattr's `0s` form.
fn value() -> Vec<u8> {
    (0..65_536u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect()
}

fn base64(v: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in v.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for k in 0..4 {
            if k <= c.len() {
                s.push(A[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

#[test]
fn setfattr_of_64k_through_the_mount() {
    require_fuse!();
    if !have("setfattr") || !have("getfattr") || !have("mkfs.ext4") {
        println!("SKIP: setfattr, getfattr or mkfs.ext4 not installed");
        return;
    }
    let fx = Fixture::with_mkfs_args("32M", &[]);
    // The image the test needs is mke2fs's with ea_inode.
    run(tool("mkfs.ext4").args(["-q", "-F", "-O", "ea_inode"]).arg(&fx.img).arg("32M"));
    fx.mount("");
    let f = fx.path("f");
    std::fs::write(&f, b"data").unwrap();
    let v = value();
    run(tool("setfattr").args(["-n", "user.big", "-v"]).arg(format!("0s{}", base64(&v))).arg(&f));
    let out = run(tool("getfattr").args(["--only-values", "-n", "user.big"]).arg(&f));
    assert!(out.stdout == v, "getfattr through the mount: {} bytes", out.stdout.len());
    fx.unmount();
    fx.assert_clean();
    let got = fx.dir.path().join("got");
    run(tool("debugfs").arg("-R").arg(format!("ea_get -f {} /f user.big", got.display())).arg(&fx.img));
    assert!(std::fs::read(&got).unwrap() == v, "debugfs ea_get");
    let dump = String::from_utf8_lossy(&run(tool("debugfs").arg("-R").arg("stat /f").arg(&fx.img)).stdout).into_owned();
    assert!(dump.contains("user.big (65536)"), "the value is in its own inode: {dump}");
    let mnt = fx.dir.path().join("k");
    std::fs::create_dir(&mnt).unwrap();
    if !mount_support::require_loop_mount("kernel part") {
        return;
    }
    run(Command::new("mount").args(["-t", "ext4", "-o", "loop,ro"]).arg(&fx.img).arg(&mnt));
    let k = run(tool("getfattr").args(["--only-values", "-n", "user.big"]).arg(mnt.join("f")));
    let _ = Command::new("umount").arg(&mnt).status();
    assert!(k.stdout == v, "kernel read of the value");
}
