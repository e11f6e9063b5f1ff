//! Mounting and unmounting without privileges, through the setuid
//! `fusermount3` helper, as libfuse does.
//!
//! fuser 0.18 opens /dev/fuse itself first and gives up with EACCES when
//! the device is not accessible to the caller (mode 0600 on many
//! systems), although `fusermount3` could do the mount. Here we run
//! `fusermount3 -o OPTIONS -- MOUNTPOINT` with one end of a socket pair
//! named in `_FUSE_COMMFD`; it opens /dev/fuse, mounts, and passes the open
//! descriptor back over the socket (SCM_RIGHTS), which the session then
//! serves as it would one it opened itself.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// The helper's name, found on PATH (or in `FUSERMOUNT_PATH`).
fn helper() -> std::ffi::OsString {
    std::env::var_os("FUSERMOUNT_PATH").unwrap_or_else(|| "fusermount3".into())
}

/// Mounts `mountpoint` with the comma-separated `options` through
/// `fusermount3` and returns the /dev/fuse descriptor of the mount. [`crate::Mount::new`]
/// calls it when mount(2) is refused (no privilege); call it directly only
/// to serve the descriptor with a session of your own.
pub fn mount(mountpoint: &Path, options: &str) -> io::Result<OwnedFd> {
    let (ours, theirs) = UnixStream::pair()?;
    let child_fd = theirs.as_raw_fd();
    let mut cmd = Command::new(helper());
    cmd.arg("-o").arg(options).arg("--").arg(mountpoint);
    cmd.env("_FUSE_COMMFD", child_fd.to_string()).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    // SAFETY: the closure runs in the child between fork and exec and only
    // calls fcntl, which is async-signal-safe; it makes the socket end
    // (opened close-on-exec by std) survive the exec of the helper.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(child_fd, libc::F_SETFD, 0) == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| io::Error::new(e.kind(), format!("cannot run {:?}: {e}", helper())))?;
    drop(theirs);
    let received = receive_fd(&ours);
    let out = child.wait_with_output()?;
    match received {
        Ok(fd) => Ok(fd),
        Err(e) => {
            let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                if msg.is_empty() { format!("fusermount3: {e}") } else { msg },
            ))
        }
    }
}

/// Receives one descriptor sent with SCM_RIGHTS on `sock`.
fn receive_fd(sock: &UnixStream) -> io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    // Room for one control message carrying one int (CMSG_SPACE(4) is at
    // most 24 bytes on Linux); u64 elements keep it aligned for cmsghdr.
    let mut cbuf = [0u64; 8];
    // SAFETY: an all-zero msghdr is valid; the pointers set below point at
    // live locals that outlive the recvmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    let n = loop {
        // SAFETY: `msg` describes valid, writable buffers (see above).
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n;
        }
        let e = io::Error::last_os_error();
        // A signal (a stop and continue of the daemon) is no failure.
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    if n == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the helper sent no descriptor"));
    }
    // SAFETY: `msg` was filled by recvmsg; CMSG_FIRSTHDR returns null or a
    // pointer inside `cbuf`.
    let cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    if cmsg.is_null() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "no control message from the helper"));
    }
    // SAFETY: `cmsg` points at a complete header inside `cbuf` (checked
    // non-null above; the kernel bounds it by msg_controllen).
    let (level, kind, len) = unsafe { ((*cmsg).cmsg_level, (*cmsg).cmsg_type, (*cmsg).cmsg_len as usize) };
    // SAFETY: CMSG_LEN is a pure size computation.
    let want = unsafe { libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    if level != libc::SOL_SOCKET || kind != libc::SCM_RIGHTS || len < want {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "unexpected control message from the helper"));
    }
    // SAFETY: the message is SCM_RIGHTS with room for one int (checked);
    // CMSG_DATA points at it inside `cbuf`; read_unaligned needs no
    // alignment.
    let fd = unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>()) };
    if fd < 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "invalid descriptor from the helper"));
    }
    // SAFETY: the kernel just installed `fd` in this process for us; we
    // are its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fusermount3 -u [-z] MOUNTPOINT`: true if it succeeded. The unmount
/// of an ordinary user, who may not call umount(2) on a FUSE mount;
/// [`crate::Unmounter::unmount`] falls back to it.
pub fn unmount(mountpoint: &OsStr, lazy: bool) -> io::Result<bool> {
    let mut cmd = Command::new(helper());
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd.arg("--").arg(mountpoint).stdin(Stdio::null()).output()?;
    Ok(out.status.success())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    /// The whole handshake against a stand-in helper (python3) that
    /// checks its arguments and sends an open descriptor of a file back
    /// through `_FUSE_COMMFD`, as fusermount3 sends /dev/fuse.
    #[test]
    fn receives_the_descriptor_the_helper_sends() {
        if Command::new("python3").arg("-V").output().is_err() {
            println!("SKIP: python3 not found");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let payload = dir.path().join("payload");
        std::fs::write(&payload, b"sent through SCM_RIGHTS").unwrap();
        let fake = dir.path().join("fake-fusermount3");
        let mut f = std::fs::File::create(&fake).unwrap();
        writeln!(
            f,
            "#!/usr/bin/env python3\nimport os, socket, sys\n\
             assert sys.argv[1:3] == ['-o', 'rw,subtype=uext4'] and sys.argv[3] == '--', sys.argv\n\
             s = socket.socket(fileno=int(os.environ['_FUSE_COMMFD']))\n\
             fd = os.open({:?}, os.O_RDONLY)\n\
             socket.send_fds(s, [b'x'], [fd])",
            payload.to_str().unwrap()
        )
        .unwrap();
        drop(f);
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        // SAFETY (test): no other thread of this test reads the variable
        // while it is set; the helper is found through it.
        unsafe { std::env::set_var("FUSERMOUNT_PATH", &fake) };
        let fd = mount(dir.path(), "rw,subtype=uext4").unwrap();
        unsafe { std::env::remove_var("FUSERMOUNT_PATH") };
        let mut got = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(fd), &mut got).unwrap();
        assert_eq!(got, "sent through SCM_RIGHTS");
    }
}
