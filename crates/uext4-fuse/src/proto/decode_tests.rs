//! Decoder tests: every argument layout the adapter serves, from bytes
//! built field by field, and malformed input (short, unterminated,
//! lying lengths) answered with an errno, never a panic.

use super::*;
use crate::proto::request::*;
use crate::proto::types::{AccessFlags, FileHandle, INodeNo, LockOwner, OpenFlags, RenameFlags, TimeOrNow, WriteFlags};
use std::path::Path;

/// The node of every request [`req`] builds: each decoded value names it.
const N: INodeNo = INodeNo(5);

/// A request: in header (unique 7, node 5, uid 1000, gid 100, pid 42)
/// and `args`.
fn req(opcode: u32, args: &[u8]) -> Vec<u8> {
    let len = (abi::IN_HEADER_LEN + args.len()) as u32;
    let mut b = Vec::new();
    for v in [len, opcode] {
        b.extend_from_slice(&v.to_ne_bytes());
    }
    b.extend_from_slice(&7u64.to_ne_bytes());
    b.extend_from_slice(&5u64.to_ne_bytes());
    for v in [1000u32, 100, 42, 0] {
        b.extend_from_slice(&v.to_ne_bytes());
    }
    b.extend_from_slice(args);
    b
}

#[derive(Default)]
struct Args(Vec<u8>);

impl Args {
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    fn s(mut self, v: &str) -> Self {
        self.0.extend_from_slice(v.as_bytes());
        self.0.push(0);
        self
    }
    fn raw(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
}

fn op(opcode: u32, a: Args) -> Operation<'static> {
    let b: &'static [u8] = Box::leak(req(opcode, &a.0).into_boxed_slice());
    let d = decode(b, DecodeConfig::default()).unwrap();
    assert_eq!((d.header.unique, d.header.nodeid, d.header.uid, d.header.gid, d.header.pid), (7, 5, 1000, 100, 42));
    d.op
}

fn name(s: &str) -> &OsStr {
    OsStr::new(s)
}

#[test]
fn names_and_entries() {
    assert_eq!(op(op::LOOKUP, Args::default().s("a")), Operation::Lookup(Lookup { parent: N, name: name("a") }));
    assert_eq!(op(op::UNLINK, Args::default().s("b")), Operation::Unlink(Unlink { parent: N, name: name("b") }));
    assert_eq!(op(op::RMDIR, Args::default().s("c")), Operation::Rmdir(Rmdir { parent: N, name: name("c") }));
    assert_eq!(
        op(op::SYMLINK, Args::default().s("l").s("/t")),
        Operation::Symlink(Symlink { parent: N, name: name("l"), target: Path::new("/t") })
    );
    assert_eq!(
        op(op::MKNOD, Args::default().u32(0o10644).u32(0x801).u32(0o22).u32(0).s("n")),
        Operation::Mknod(Mknod { parent: N, name: name("n"), mode: 0o10644, umask: 0o22, rdev: 0x801 })
    );
    assert_eq!(
        op(op::MKDIR, Args::default().u32(0o755).u32(0o22).s("d")),
        Operation::Mkdir(Mkdir { parent: N, name: name("d"), mode: 0o755, umask: 0o22 })
    );
    assert_eq!(
        op(op::RENAME, Args::default().u64(9).s("x").s("y")),
        Operation::Rename(Rename {
            parent: N,
            name: name("x"),
            newparent: INodeNo(9),
            newname: name("y"),
            flags: RenameFlags::empty()
        })
    );
    assert_eq!(
        op(op::RENAME2, Args::default().u64(9).u32(2).u32(0).s("x").s("y")),
        Operation::Rename(Rename {
            parent: N,
            name: name("x"),
            newparent: INodeNo(9),
            newname: name("y"),
            flags: RenameFlags::RENAME_EXCHANGE
        })
    );
    assert_eq!(
        op(op::LINK, Args::default().u64(12).s("h")),
        Operation::Link(Link { ino: INodeNo(12), newparent: N, newname: name("h") })
    );
    assert_eq!(
        op(op::CREATE, Args::default().u32(0o102).u32(0o644).u32(0o22).u32(0).s("f")),
        Operation::Create(Create { parent: N, name: name("f"), mode: 0o644, umask: 0o22, flags: 0o102, open_flags: 0 })
    );
    assert_eq!(
        op(op::TMPFILE, Args::default().u32(0o20000002).u32(0o600).u32(0o22).u32(0).s("/")),
        Operation::Tmpfile(Tmpfile { parent: N, mode: 0o600, umask: 0o22, flags: 0o20000002, open_flags: 0 })
    );
}

#[test]
fn files_and_data() {
    assert_eq!(
        op(op::OPEN, Args::default().u32(2).u32(1)),
        Operation::Open(Open { ino: N, flags: OpenFlags(2), open_flags: 1 })
    );
    // The lock owner is there only when read_flags / write_flags say so.
    for (read_flags, lock_owner) in [(2, Some(LockOwner(77))), (0, None)] {
        let read = Args::default().u64(3).u64(4096).u32(8192).u32(read_flags).u64(77).u32(0o2).u32(0);
        assert_eq!(
            op(op::READ, read),
            Operation::Read(Read {
                ino: N,
                fh: FileHandle(3),
                offset: 4096,
                size: 8192,
                flags: OpenFlags(0o2),
                lock_owner
            })
        );
    }
    for (write_flags, lock_owner) in [(4, None), (2, Some(LockOwner(9)))] {
        let write = Args::default().u64(3).u64(10).u32(5).u32(write_flags).u64(9).u32(1).u32(0).raw(b"hello");
        assert_eq!(
            op(op::WRITE, write),
            Operation::Write(Write {
                ino: N,
                fh: FileHandle(3),
                offset: 10,
                data: b"hello",
                write_flags: WriteFlags::from_bits_retain(write_flags),
                flags: OpenFlags(1),
                lock_owner
            })
        );
    }
    for (release_flags, flush) in [(1, true), (0, false)] {
        assert_eq!(
            op(op::RELEASE, Args::default().u64(3).u32(2).u32(release_flags).u64(5)),
            Operation::Release(Release {
                ino: N,
                fh: FileHandle(3),
                flags: OpenFlags(2),
                lock_owner: Some(LockOwner(5)),
                flush
            })
        );
    }
    // FUSE_FSYNC_FDATASYNC is bit 0.
    for (fsync_flags, datasync) in [(1, true), (0, false)] {
        assert_eq!(
            op(op::FSYNC, Args::default().u64(3).u32(fsync_flags).u32(0)),
            Operation::Fsync(Fsync { ino: N, fh: FileHandle(3), datasync })
        );
    }
    assert_eq!(
        op(op::FLUSH, Args::default().u64(3).u32(0).u32(0).u64(9)),
        Operation::Flush(Flush { ino: N, fh: FileHandle(3), lock_owner: LockOwner(9) })
    );
    assert_eq!(
        op(op::FALLOCATE, Args::default().u64(3).u64(1).u64(2).u32(3).u32(0)),
        Operation::Fallocate(Fallocate { ino: N, fh: FileHandle(3), offset: 1, length: 2, mode: 3 })
    );
    assert_eq!(
        op(op::LSEEK, Args::default().u64(3).u64(100).u32(3).u32(0)),
        Operation::Lseek(Lseek { ino: N, fh: FileHandle(3), offset: 100, whence: 3 })
    );
    let cfr = || Args::default().u64(1).u64(2).u64(3).u64(4).u64(5).u64(6).u64(0);
    for (code, wide) in [(op::COPY_FILE_RANGE, false), (op::COPY_FILE_RANGE_64, true)] {
        assert_eq!(
            op(code, cfr()),
            Operation::CopyFileRange(CopyFileRange {
                ino: N,
                fh_in: FileHandle(1),
                offset_in: 2,
                ino_out: INodeNo(3),
                fh_out: FileHandle(4),
                offset_out: 5,
                len: 6,
                flags: 0,
                wide
            })
        );
    }
    let ioctl = Args::default().u64(3).u32(0).u32(0x8008_6601).u64(0).u32(4).u32(8).raw(&[1, 2, 3, 4]);
    assert_eq!(
        op(op::IOCTL, ioctl),
        Operation::Ioctl(Ioctl {
            ino: N,
            fh: FileHandle(3),
            flags: 0,
            cmd: 0x8008_6601,
            arg: 0,
            in_data: &[1, 2, 3, 4],
            out_size: 8
        })
    );
    assert_eq!(
        op(op::BMAP, Args::default().u64(9).u32(4096).u32(0)),
        Operation::Bmap(Bmap { ino: N, block: 9, blocksize: 4096 })
    );
}

#[test]
fn attributes_xattrs_and_dirs() {
    let getattr = |fh| Operation::Getattr(GetAttr { ino: N, fh });
    assert_eq!(op(op::GETATTR, Args::default().u32(0).u32(0).u64(3)), getattr(None));
    assert_eq!(op(op::GETATTR, Args::default().u32(1).u32(0).u64(3)), getattr(Some(FileHandle(3))));
    // The handle counts only with FUSE_GETATTR_FH, as GETATTR's.
    for (getattr_flags, fh) in [(1, Some(FileHandle(8))), (0, None)] {
        let statx = Args::default().u32(getattr_flags).u32(0).u64(8).u32(0x800).u32(0xfff);
        assert_eq!(op(op::STATX, statx), Operation::Statx(Statx { ino: N, fh, flags: 0x800, mask: 0xfff }));
    }
    let mut sa = Args::default().u32(abi::fattr::MODE | abi::fattr::SIZE).u32(0);
    for v in [1u64, 4096, 0, 10, 20, 30] {
        sa = sa.u64(v);
    }
    for v in [1u32, 2, 3, 0o644, 0, 7, 8, 0] {
        sa = sa.u32(v);
    }
    // Only what `valid` names is set.
    assert_eq!(
        op(op::SETATTR, sa),
        Operation::Setattr(SetAttr { mode: Some(0o644), size: Some(4096), ..SetAttr::of(N) })
    );
    let every = abi::fattr::MODE
        | abi::fattr::UID
        | abi::fattr::GID
        | abi::fattr::SIZE
        | abi::fattr::ATIME
        | abi::fattr::MTIME
        | abi::fattr::MTIME_NOW
        | abi::fattr::FH
        | abi::fattr::CTIME
        | abi::fattr::KILL_SUIDGID;
    let mut sa = Args::default().u32(every).u32(0);
    for v in [1u64, 4096, 0, 10, 20, 30] {
        sa = sa.u64(v);
    }
    for v in [1u32, 2, 3, 0o644, 0, 7, 8, 0] {
        sa = sa.u32(v);
    }
    let at = |sec: u64, nsec: u64| std::time::UNIX_EPOCH + std::time::Duration::from_nanos(sec * 1_000_000_000 + nsec);
    let want = SetAttr {
        ino: N,
        mode: Some(0o644),
        uid: Some(7),
        gid: Some(8),
        size: Some(4096),
        atime: Some(TimeOrNow::SpecificTime(at(10, 1))),
        mtime: Some(TimeOrNow::Now),
        ctime: Some(at(30, 3)),
        fh: Some(FileHandle(1)),
        kill_suidgid: true,
    };
    assert_eq!(op(op::SETATTR, sa), Operation::Setattr(want));
    assert_eq!(
        op(op::SETXATTR, Args::default().u32(3).u32(1).s("user.a").raw(b"xyz")),
        Operation::Setxattr(SetXattr { ino: N, name: name("user.a"), value: b"xyz", flags: 1, setxattr_flags: 0 })
    );
    let ext = req(op::SETXATTR, &Args::default().u32(2).u32(0).u32(1).u32(0).s("system.posix_acl_access").raw(b"ab").0);
    let d = decode(&ext, DecodeConfig { setxattr_ext: true }).unwrap();
    assert_eq!(
        d.op,
        Operation::Setxattr(SetXattr {
            ino: N,
            name: name("system.posix_acl_access"),
            value: b"ab",
            flags: 0,
            setxattr_flags: 1
        })
    );
    assert_eq!(
        op(op::GETXATTR, Args::default().u32(64).u32(0).s("user.a")),
        Operation::Getxattr(GetXattr { ino: N, size: 64, name: name("user.a") })
    );
    assert_eq!(op(op::LISTXATTR, Args::default().u32(0).u32(0)), Operation::Listxattr(ListXattr { ino: N, size: 0 }));
    assert_eq!(
        op(op::REMOVEXATTR, Args::default().s("user.a")),
        Operation::Removexattr(RemoveXattr { ino: N, name: name("user.a") })
    );
    let rd = || Args::default().u64(2).u64(5).u32(4096).u32(0).u64(0).u32(0).u32(0);
    let readdir = Readdir { ino: N, fh: FileHandle(2), offset: 5, size: 4096 };
    assert_eq!(op(op::READDIR, rd()), Operation::Readdir(readdir));
    assert_eq!(op(op::READDIRPLUS, rd()), Operation::Readdirplus(readdir));
    assert_eq!(
        op(op::OPENDIR, Args::default().u32(0o4000).u32(0)),
        Operation::Opendir(Opendir { ino: N, flags: OpenFlags(0o4000) })
    );
    assert_eq!(
        op(op::RELEASEDIR, Args::default().u64(2).u32(1).u32(0).u64(0)),
        Operation::Releasedir(Releasedir { ino: N, fh: FileHandle(2), flags: OpenFlags(1) })
    );
    assert_eq!(
        op(op::FSYNCDIR, Args::default().u64(2).u32(1).u32(0)),
        Operation::Fsyncdir(Fsync { ino: N, fh: FileHandle(2), datasync: true })
    );
    assert_eq!(
        op(op::ACCESS, Args::default().u32(2).u32(0)),
        Operation::Access(Access { ino: N, mask: AccessFlags::W_OK })
    );
    assert_eq!(op(op::STATFS, Args::default()), Operation::Statfs(Statfs { ino: N }));
    assert_eq!(op(op::SYNCFS, Args::default().u64(0)), Operation::Syncfs(Syncfs { ino: N }));
    assert_eq!(op(op::READLINK, Args::default()), Operation::Readlink(Readlink { ino: N }));
    assert_eq!(op(op::DESTROY, Args::default()), Operation::Destroy);
    assert_eq!(op(op::GETLK, Args::default()), Operation::Lock);
    assert_eq!(op(op::POLL, Args::default()), Operation::Poll);
    assert_eq!(op(999, Args::default()), Operation::Unknown { opcode: 999 });
}

#[test]
fn init_forget_interrupt() {
    let init = Args::default().u32(7).u32(41).u32(131072).u32(1 << 30 | 1).u32(1 << 9);
    assert_eq!(
        op(op::INIT, init.raw(&[0; 44])),
        Operation::Init(InitIn { major: 7, minor: 41, max_readahead: 131072, flags: 1 << 30 | 1 | 1 << 41 })
    );
    assert_eq!(op(op::FORGET, Args::default().u64(3)), Operation::Forget(Forget { ino: N, nlookup: 3 }));
    let bf = op(op::BATCH_FORGET, Args::default().u32(2).u32(0).u64(5).u64(1).u64(6).u64(2));
    let Operation::BatchForget(b) = bf else { panic!("{bf:?}") };
    assert_eq!(b.len(), 2);
    let forgets: Vec<Forget> = b.forgets().collect();
    let want = [Forget { ino: INodeNo(5), nlookup: 1 }, Forget { ino: INodeNo(6), nlookup: 2 }];
    assert_eq!(forgets, want);
    assert!(bf.no_reply());
    assert_eq!(op(op::INTERRUPT, Args::default().u64(99)), Operation::Interrupt(Interrupt { unique: 99 }));
}

#[test]
fn split_reader_reads_header_then_payload() {
    let head = Args::default().u64(3).u64(10).u32(2).u32(0).u64(0).u32(0).u32(0).0;
    let d = decode_split(op::WRITE, 5, Reader::split(&head, b"hi"), DecodeConfig::default()).unwrap();
    assert!(matches!(d, Operation::Write(Write { data: b"hi", offset: 10, .. })));
    let d = decode_split(op::LOOKUP, 5, Reader::split(&[], b"name\0"), DecodeConfig::default()).unwrap();
    assert_eq!(d, Operation::Lookup(Lookup { parent: N, name: name("name") }));
    // A field may not straddle the two segments.
    assert_eq!(decode_split(op::FORGET, 5, Reader::split(&[0; 4], &[0; 4]), DecodeConfig::default()), Err(Errno::EIO));
}

#[test]
fn malformed_requests_are_errors() {
    let cfg = DecodeConfig::default();
    // Shorter than a header; a length beyond the buffer; below a header.
    assert_eq!(decode(&[0; 20], cfg), Err(Errno::EIO));
    let mut b = req(op::LOOKUP, b"a\0");
    b[0..4].copy_from_slice(&1000u32.to_ne_bytes());
    assert_eq!(decode(&b, cfg), Err(Errno::EIO));
    b[0..4].copy_from_slice(&8u32.to_ne_bytes());
    assert_eq!(decode(&b, cfg), Err(Errno::EIO));
    // Extensions longer than the arguments.
    let mut b = req(op::LOOKUP, b"a\0");
    b[36..38].copy_from_slice(&100u16.to_ne_bytes());
    assert!(decode(&b, cfg).is_err());
    // A name without its NUL; fixed parts cut short; data cut short.
    assert_eq!(decode(&req(op::LOOKUP, b"abc"), cfg), Err(Errno::EIO));
    for code in [op::GETATTR, op::SETATTR, op::READ, op::OPEN, op::MKNOD, op::RENAME2, op::STATX, op::INIT] {
        assert_eq!(decode(&req(code, &[0; 3]), cfg), Err(Errno::EIO), "opcode {code}");
    }
    let w = Args::default().u64(3).u64(10).u32(100).u32(0).u64(0).u32(0).u32(0).raw(b"short");
    assert_eq!(decode(&req(op::WRITE, &w.0), cfg), Err(Errno::EIO));
    let bf = Args::default().u32(u32::MAX).u32(0);
    assert_eq!(decode(&req(op::BATCH_FORGET, &bf.0), cfg), Err(Errno::EIO));
    // Random bytes never panic.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..2000 {
        let n = (x % 120) as usize;
        let mut b = Vec::with_capacity(n);
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.push(x as u8);
        }
        if b.len() >= 8 {
            let len = (b.len() as u32).to_ne_bytes();
            b[..4].copy_from_slice(&len);
            b[4..8].copy_from_slice(&((x % 60) as u32).to_ne_bytes());
        }
        let _ = decode(&b, cfg);
    }
}
