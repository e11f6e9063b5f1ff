//! `uext4 info`: the superblock summary in `dumpe2fs -h` format, and with
//! `--groups` a concise list of the block groups.
//!
//! This module holds the command's entry points and the fallback for
//! images the library cannot open; the parts live in:
//! - `decode`: raw superblock fields and e2fsprogs' names for their values;
//! - `superblock`: the superblock lines of the text;
//! - `journal`: the internal journal's superblock and its lines;
//! - `groups`: the block group layout and the `--groups` lines;
//! - `json`: the `--json` document.

mod decode;
mod groups;
mod journal;
mod json;
mod superblock;

pub use json::run_json;

use crate::util::{open_image, warn, CliError, CliResult};
use groups::group_lines;
use journal::journal_lines;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use superblock::superblock_lines;
use uext4::format::superblock::Superblock;
use uext4::Filesystem;

/// The primary superblock read straight from the image, for images the
/// library refuses to open (unsupported features, damaged group descriptors).
fn read_superblock(image: &Path) -> Option<Superblock> {
    let f = File::open(image).ok()?;
    let mut buf = [0u8; 1024];
    f.read_exact_at(&mut buf, 1024).ok()?;
    Superblock::parse(&buf).ok()
}

/// Runs `uext4 info` on an image path. If the filesystem cannot be opened
/// but its superblock is valid, the superblock is still shown (with a
/// warning saying why the rest is missing); `--groups` then fails.
pub fn run_image(image: &Path, groups: bool, out: &mut impl Write) -> CliResult {
    let open_err = match open_image(image) {
        Ok(fs) => return run(&fs, groups, out),
        Err(e) => e,
    };
    let (CliError::Msg(why), Some(sb)) = (&open_err, read_superblock(image)) else {
        return Err(open_err);
    };
    for line in superblock_lines(&sb) {
        writeln!(out, "{line}")?;
    }
    writeln!(out)?;
    out.flush()?;
    if groups {
        return Err(open_err);
    }
    warn(&format!("{why} (only the superblock is shown)"));
    Ok(())
}

/// Runs `uext4 info` on an open filesystem.
pub fn run(fs: &Filesystem, groups: bool, out: &mut impl Write) -> CliResult {
    let sb = fs.superblock();
    for line in superblock_lines(sb) {
        writeln!(out, "{line}")?;
    }
    if let Some(lines) = journal_lines(fs) {
        for line in lines {
            writeln!(out, "{line}")?;
        }
    }
    // dumpe2fs -h ends with an empty line too.
    writeln!(out)?;
    let st = fs.statfs();
    if st.free_blocks != sb.free_blocks_count || st.free_inodes != u64::from(sb.free_inodes_count) {
        crate::util::eprint_line(&format!(
            "note: the group descriptors count {} free blocks and {} free inodes \
             (the superblock's totals above are updated lazily)",
            st.free_blocks, st.free_inodes
        ));
    }
    if groups {
        for line in group_lines(fs) {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}
