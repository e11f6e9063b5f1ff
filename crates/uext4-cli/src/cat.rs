//! `uext4 cat`: stream a file's contents to stdout.

use crate::util::{fs_err, shown, type_name, CliError, CliResult};
use std::io::Write;
use uext4::{FileType, Filesystem};

/// Bytes read from the image per step; files are never loaded whole.
pub const CHUNK: usize = 1 << 20;

/// Runs `uext4 cat`: follows symlinks, refuses anything but regular files.
pub fn run(fs: &Filesystem, path: &[u8], out: &mut impl Write) -> CliResult {
    let name = shown(path);
    let ino = fs.resolve_follow(path).map_err(|e| fs_err(&name, e))?;
    let st = fs.stat(ino).map_err(|e| fs_err(&name, e))?;
    match st.file_type {
        FileType::Regular => {}
        FileType::Directory => return Err(CliError::msg(format!("{name}: is a directory"))),
        t => return Err(CliError::msg(format!("{name}: not a regular file ({})", type_name(t)))),
    }
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0u64;
    loop {
        let n = fs.inodes().read(ino, off, &mut buf).map_err(|e| fs_err(&name, e))?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
        off += n as u64;
    }
    out.flush()?;
    Ok(())
}
