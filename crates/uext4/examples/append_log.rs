//! A tiny append-only log: records appended with `O_APPEND` and made
//! durable with `sync_data`, the filesystem closed, reopened, and the log
//! checked and extended.
//!
//! ```text
//! cargo run -p uext4 --example append_log -- [IMAGE]
//! ```
//!
//! Each record is one line `seq <n> len <k> <payload>` whose payload is
//! checked on replay. A record that `append` returned for has been
//! `sync_data`'d: it survives a crash, not only a clean unmount.

use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use uext4::mkfs::{mkfs_file, MkfsOptions};
use uext4::{File, Filesystem, OpenOptions};

/// The log file inside the image.
const LOG: &str = "/var/log/app.log";

/// An open log.
pub struct Log {
    file: File,
    next: u64,
}

impl Log {
    /// Opens (creating it and its directories if needed) the log of `fs`,
    /// replaying it to find the next sequence number.
    pub fn open(fs: &Filesystem) -> io::Result<Log> {
        fs.create_dir_all("/var/log")?;
        let file = fs.open_file(LOG, OpenOptions::new().read(true).append(true).create(true).mode(0o640))?;
        let next = replay(&file)?.len() as u64;
        Ok(Log { file, next })
    }

    /// Appends one record and makes it durable; returns its number.
    pub fn append(&mut self, payload: &str) -> io::Result<u64> {
        let seq = self.next;
        let line = format!("seq {seq} len {} {payload}\n", payload.len());
        // One write: through one File, appends never interleave.
        self.file.write_all(line.as_bytes())?;
        self.file.sync_data()?;
        self.next += 1;
        Ok(seq)
    }
}

/// Reads every record of the log, checking numbering and lengths.
pub fn replay(file: &File) -> io::Result<Vec<String>> {
    let mut out = Vec::new();
    for (n, line) in BufReader::new(file).lines().enumerate() {
        let line = line?;
        let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("bad record {n}: {line:?}"));
        let mut parts = line.splitn(5, ' ');
        let (Some("seq"), Some(seq), Some("len"), Some(len), payload) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next().unwrap_or(""))
        else {
            return Err(bad());
        };
        if seq.parse::<usize>().ok() != Some(n) || len.parse::<usize>().ok() != Some(payload.len()) {
            return Err(bad());
        }
        out.push(payload.to_string());
    }
    Ok(out)
}

/// Makes a new image at `image`, writes the log in two sessions (the
/// filesystem closed and reopened in between), and checks it from a
/// read-only open. Returns the records.
pub fn run(image: &Path) -> io::Result<Vec<String>> {
    mkfs_file(image, &MkfsOptions { size: 32 << 20, ..Default::default() })?;
    let mut want = Vec::new();
    for session in 0..2 {
        let fs = Filesystem::open_rw(image)?;
        let mut log = Log::open(&fs)?;
        if log.next != want.len() as u64 {
            return Err(io::Error::other(format!("session {session}: {} records, expected {}", log.next, want.len())));
        }
        for i in 0..50 {
            let payload = format!("session {session} event {i} {}", "#".repeat(i * 7 % 40));
            log.append(&payload)?;
            want.push(payload);
        }
        drop(log);
        drop(fs); // unmount
    }
    let fs = Filesystem::open(image)?;
    let file = fs.open_file(LOG, OpenOptions::new().read(true))?;
    let got = replay(&file)?;
    if got != want {
        return Err(io::Error::other("the log differs from what was appended"));
    }
    Ok(got)
}

fn main() -> io::Result<()> {
    let tmp = tempfile::tempdir()?;
    let image = std::env::args_os().nth(1).map_or_else(|| tmp.path().join("log.img"), PathBuf::from);
    let records = run(&image)?;
    println!("{} records appended in two sessions on {}, replayed intact", records.len(), image.display());
    Ok(())
}
