//! Set-id rules and POSIX ACLs through `uext4 mount`, run by ordinary
//! users (`setpriv --reuid 65534 --regid 65534 --clear-groups`, and the
//! same user in supplementary group 4242): writes, truncates (also by
//! open(O_TRUNC)), fallocate and chown (also by a caller outside the
//! file's group, and chown(f, -1, -1)) clearing set-user-ID and set-group-ID, a
//! set-group-ID directory's group and bit inherited, set-group-ID stripped
//! from a file made by a non-member, a named-user deny entry refused
//! (EACCES) and a named-group allow entry honoured, default ACLs inherited
//! (checked with getfacl) with the umask ignored under them, chmod
//! moving the ACL mask, and setfacl by a non-member clearing
//! set-group-ID. One script (mount_setid/script.sh) runs on the mount and
//! on the host's own ext4 (the temporary directory, or a loop-mounted
//! ext4 where that is not ext4): the outputs must be identical, and match
//! the expected lines below. e2fsck -fn after the unmount.
//!
//! Needs root and /dev/fuse (prints `SKIP: <reason>` otherwise), setpriv,
//! setfacl/getfacl (package acl) and perl.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

mod mount_support;

use mount_support::{have, run, tool, Fixture};

const SCRIPT: &str = include_str!("mount_setid/script.sh");

/// Lines the script must print (on the kernel's ext4 as on the mount).
const EXPECT: &[&str] = &[
    "w/f1 777 0 0",
    "w/f2 767 0 0",
    "w/f3 6777 0 0",
    "w/f4 777 0 0",
    "w/f5 777 0 0",
    "w/f6 755 65534 0",
    "w/f7 2745 0 100",
    "w/f8 755 0 0",
    "w/f9 777 0 0",
    "sg/a 644 65534 4242",
    "sg/d 2755 65534 4242",
    "sg/s 755 65534 4242",
    "sg/t 2755 65534 4242",
    "sg/r 2755 0 4242",
    "sg/d/e 2775 65534 4242",
    "nobody read acl/f: denied",
    "nobody write acl/f: denied",
    "group read acl/g: allowed",
    "nobody read acl/g: denied",
    "dacl/f 660 65534 65534",
    "dacl/d 770 65534 65534",
    "dacl/e 750 65534 65534",
    "dacl/p 640 0 0",
    "user:65534:rwx\t#effective:r-x",
    "default:user:65534:rwx",
    "mask::r--",
    "k/a 775 65534 0",
    // chown: set-group-ID without group-execute goes when the caller is
    // not in the file's group; chown(f, -1, -1) clears as any chown;
    // chmod g+s by a non-member; truncate by the owner; directories keep.
    "c/a 745 65534 4242",
    "c/b 745 65534 0",
    "c/r 2745 0 0",
    "c/s 755 0 0",
    "c/d 755 65534 0",
    "c/e 777 65534 0",
    "c/g 745 65534 0",
    "c/dir 6777 0 0",
];

/// Runs the script on `dir` and returns what it printed.
fn script_on(dir: &Path) -> String {
    let out = run(tool("sh").arg("-c").arg(SCRIPT).arg("script").arg(dir));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The temporary directory is on ext4 (the host's filesystem to compare
/// with).
fn on_ext4(p: &Path) -> bool {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: an all-zero statfs is a valid out buffer; `c` is a valid C string.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::statfs(c.as_ptr(), &mut s) == 0 && s.f_type == 0xEF53 }
}

#[test]
fn setid_and_acls_as_ext4() {
    require_fuse!();
    for t in ["setpriv", "setfacl", "getfacl", "perl", "fallocate"] {
        if !have(t) {
            println!("SKIP: {t} not found");
            return;
        }
    }
    let mut host_out = None;
    // Writes through FOPEN_DIRECT_IO (the default), the page cache and the
    // writeback cache reach the set-id kill by different kernel paths.
    for opts in ["rw,allow_other", "rw,allow_other,nodirect_writes", "rw,allow_other,writeback_cache"] {
        let fx = Fixture::with_mkfs_args("64M", &[]);
        fx.mount(opts);
        fs::set_permissions(&fx.mnt, fs::Permissions::from_mode(0o755)).expect("chmod mnt");
        let got = script_on(&fx.mnt);
        fx.unmount();
        fx.assert_clean();
        for want in EXPECT {
            assert!(got.lines().any(|l| l == *want), "-o {opts}: missing {want:?} in the mount's output:\n{got}");
        }
        let host = host_out.get_or_insert_with(|| {
            let host = fx.dir.path().join("host");
            fs::create_dir(&host).expect("mkdir host");
            fs::set_permissions(&host, fs::Permissions::from_mode(0o755)).expect("chmod host");
            if on_ext4(&host) {
                return Some(script_on(&host));
            }
            // Not on ext4 (a tmpfs /tmp): the kernel's ext4 on a loop device
            // is the host to compare with.
            if !mount_support::require_loop_mount("comparison with the kernel's ext4") {
                return None;
            }
            let img = fx.dir.path().join("host.img");
            fs::File::create(&img).and_then(|f| f.set_len(64 << 20)).expect("host image");
            run(tool("mkfs.ext4").args(["-q", "-F"]).arg(&img));
            run(tool("mount").args(["-o", "loop"]).arg(&img).arg(&host));
            fs::set_permissions(&host, fs::Permissions::from_mode(0o755)).expect("chmod host mount");
            let out = std::panic::catch_unwind(|| script_on(&host));
            mount_support::unmount_retrying(tool("umount").arg(&host));
            Some(out.unwrap_or_else(|p| std::panic::resume_unwind(p)))
        });
        if let Some(h) = host {
            assert_eq!(&got, h, "-o {opts}: the mount and the host's ext4 differ");
        }
    }
}
