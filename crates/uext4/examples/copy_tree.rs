//! Copies a host directory tree into a new ext4 image, then verifies the
//! image by reading everything back and comparing it with the source.
//!
//! ```text
//! cargo run -p uext4 --example copy_tree -- [SOURCE_DIR] [IMAGE]
//! ```
//!
//! SOURCE_DIR defaults to this crate's `src/`; IMAGE defaults to a
//! temporary file (deleted at the end). The image is made by uext4's own
//! mkfs, written through the `std::fs`-like API and unmounted cleanly:
//! `e2fsck -fn IMAGE` finds nothing to fix, and Linux mounts it.

use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use uext4::mkfs::{mkfs_file, MkfsOptions};
use uext4::{FileTimes, Filesystem, OpenOptions, Permissions};

/// What was copied.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Regular files.
    pub files: u64,
    /// Directories (the source root not counted).
    pub dirs: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Bytes of file data.
    pub bytes: u64,
}

/// Makes a new image at `image` big enough for `src`, copies `src` into
/// its root, unmounts, reopens it read-only and compares every file,
/// directory listing, symlink target and permission with the source.
pub fn copy_and_verify(src: &Path, image: &Path) -> io::Result<Summary> {
    let mut size = 0u64;
    walk_size(src, &mut size)?;
    // Room for the data, its metadata and the journal, rounded to MiB.
    let bytes = (size * 2 + (32 << 20)).next_multiple_of(1 << 20);
    mkfs_file(image, &MkfsOptions { size: bytes, ..Default::default() })?;

    let fs = Filesystem::open_rw(image)?;
    let mut summary = Summary::default();
    copy_dir(&fs, src, Path::new("/"), &mut summary)?;
    // Unmount: everything written back and committed, journal emptied.
    drop(fs);

    let fs = Filesystem::open(image)?;
    let mut checked = Summary::default();
    verify_dir(&fs, src, Path::new("/"), &mut checked)?;
    if checked != summary {
        return Err(io::Error::other(format!("copied {summary:?} but found {checked:?}")));
    }
    Ok(summary)
}

fn walk_size(dir: &Path, total: &mut u64) -> io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let m = e.metadata()?;
        *total += m.len().next_multiple_of(4096);
        if m.is_dir() {
            walk_size(&e.path(), total)?;
        }
    }
    Ok(())
}

/// Copies the entries of host directory `from` into image directory `to`.
fn copy_dir(fs: &Filesystem, from: &Path, to: &Path, s: &mut Summary) -> io::Result<()> {
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let m = std::fs::symlink_metadata(&src)?;
        let t = m.file_type();
        if t.is_symlink() {
            fs.symlink(std::fs::read_link(&src)?, &dst)?;
            s.symlinks += 1;
            continue;
        }
        if t.is_dir() {
            fs.create_dir(&dst)?;
            copy_dir(fs, &src, &dst, s)?;
            s.dirs += 1;
        } else if t.is_file() {
            let mut out = fs.open_file(&dst, OpenOptions::new().write(true).create_new(true))?;
            s.bytes += io::copy(&mut std::fs::File::open(&src)?, &mut out)?;
            s.files += 1;
        } else {
            continue; // devices, fifos and sockets are left out
        }
        fs.set_permissions(&dst, Permissions::from_mode(m.permissions().mode()))?;
        fs.set_times(&dst, FileTimes::new().set_modified(m.modified()?).set_accessed(m.accessed()?))?;
    }
    Ok(())
}

fn differ(what: &str, path: &Path) -> io::Error {
    io::Error::other(format!("{}: {what} differs between the source and the image", path.display()))
}

/// Compares host directory `src` with image directory `dir`, recursively.
fn verify_dir(fs: &Filesystem, src: &Path, dir: &Path, s: &mut Summary) -> io::Result<()> {
    let mut host: Vec<_> = std::fs::read_dir(src)?.map(|e| e.map(|e| e.file_name())).collect::<io::Result<_>>()?;
    let mut image = Vec::new();
    for e in fs.read_dir(dir)? {
        let name = e?.file_name();
        // The image's root has lost+found of its own.
        if !(dir == Path::new("/") && name == "lost+found") {
            image.push(name);
        }
    }
    host.retain(|n| std::fs::symlink_metadata(src.join(n)).is_ok_and(|m| m.is_dir() || m.is_file() || m.is_symlink()));
    host.sort();
    image.sort();
    if host != image {
        return Err(differ("the listing", dir));
    }
    for name in host {
        let (hp, ip) = (src.join(&name), dir.join(&name));
        let hm = std::fs::symlink_metadata(&hp)?;
        let im = fs.symlink_metadata(&ip)?;
        if hm.file_type().is_symlink() {
            if !im.is_symlink() || std::fs::read_link(&hp)? != fs.read_link(&ip)? {
                return Err(differ("the symlink", &ip));
            }
            s.symlinks += 1;
            continue;
        }
        if hm.mode() & 0o7777 != im.mode() & 0o7777 || hm.modified()? != im.modified()? {
            return Err(differ("the mode or mtime", &ip));
        }
        if hm.is_dir() {
            if !im.is_dir() {
                return Err(differ("the type", &ip));
            }
            verify_dir(fs, &hp, &ip, s)?;
            s.dirs += 1;
        } else {
            let data = fs.read(&ip)?;
            if !im.is_file() || data != std::fs::read(&hp)? {
                return Err(differ("the contents", &ip));
            }
            s.files += 1;
            s.bytes += data.len() as u64;
        }
    }
    Ok(())
}

/// The source directory when none is given: this crate's sources.
pub fn default_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn main() -> io::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let src = args.next().map_or_else(default_source, PathBuf::from);
    let tmp = tempfile::tempdir()?;
    let image = args.next().map_or_else(|| tmp.path().join("tree.img"), PathBuf::from);
    let s = copy_and_verify(&src, &image)?;
    println!(
        "copied {} into {}: {} files ({} bytes), {} directories, {} symlinks; verified",
        src.display(),
        image.display(),
        s.files,
        s.bytes,
        s.dirs,
        s.symlinks
    );
    Ok(())
}
