//! Several threads write their own files on one filesystem while another
//! thread reads them.
//!
//! ```text
//! cargo run -p uext4 --example threads -- [IMAGE]
//! ```
//!
//! A `Filesystem` is `Send + Sync`: share it with an `Arc` (or scoped
//! threads) and open as many `File`s as you like from any thread. Each
//! writer appends numbered records to its own file and makes them durable
//! with `sync_all`; the reader checks that whatever it sees of a file is a
//! whole prefix of what its writer writes (a record may be cut only at the
//! end). At the end every file is read back complete.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use uext4::mkfs::{mkfs_file, MkfsOptions};
use uext4::{Filesystem, OpenOptions};

/// Writer threads.
pub const WRITERS: usize = 4;
/// Records each writer writes.
pub const RECORDS: usize = 500;

/// Record `i` of writer `w`: one line.
fn record(w: usize, i: usize) -> String {
    format!("writer {w} record {i:05} {}\n", "x".repeat(i % 97))
}

/// Everything writer `w` writes.
fn expected(w: usize) -> Vec<u8> {
    (0..RECORDS).flat_map(|i| record(w, i).into_bytes()).collect()
}

/// Makes a new image at `image`, runs the writers and the reader, then
/// checks every file. Returns the number of reads the reader made.
pub fn run(image: &Path) -> io::Result<usize> {
    mkfs_file(image, &MkfsOptions { size: 64 << 20, ..Default::default() })?;
    let fs = Filesystem::open_rw(image)?;
    fs.create_dir("/logs")?;
    let finished = AtomicUsize::new(0);
    let reads = std::thread::scope(|s| -> io::Result<usize> {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (fs, finished) = (&fs, &finished);
                s.spawn(move || -> io::Result<()> {
                    let path = format!("/logs/writer-{w}");
                    let mut f = fs.open_file(&path, OpenOptions::new().write(true).create_new(true))?;
                    for i in 0..RECORDS {
                        f.write_all(record(w, i).as_bytes())?;
                        if i % 100 == 99 {
                            f.sync_all()?;
                        }
                    }
                    f.sync_all()?;
                    finished.fetch_add(1, Ordering::Release);
                    Ok(())
                })
            })
            .collect();
        let reader = s.spawn(|| -> io::Result<usize> {
            let want: Vec<Vec<u8>> = (0..WRITERS).map(expected).collect();
            let mut reads = 0;
            loop {
                let done = finished.load(Ordering::Acquire) == WRITERS;
                for (w, want) in want.iter().enumerate() {
                    match fs.read(format!("/logs/writer-{w}")) {
                        Ok(seen) if want.starts_with(&seen) => reads += 1,
                        Ok(_) => {
                            return Err(io::Error::other(format!("writer-{w}: the reader saw bytes never written")))
                        }
                        // Not created yet.
                        Err(uext4::Error::NotFound(_)) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                if done {
                    return Ok(reads);
                }
                std::thread::yield_now();
            }
        });
        for w in writers {
            w.join().map_err(|_| io::Error::other("a writer panicked"))??;
        }
        reader.join().map_err(|_| io::Error::other("the reader panicked"))?
    })?;
    for w in 0..WRITERS {
        if fs.read(format!("/logs/writer-{w}"))? != expected(w) {
            return Err(io::Error::other(format!("writer-{w}: incomplete")));
        }
    }
    drop(fs); // unmount
    Ok(reads)
}

fn main() -> io::Result<()> {
    let tmp = tempfile::tempdir()?;
    let image = std::env::args_os().nth(1).map_or_else(|| tmp.path().join("threads.img"), PathBuf::from);
    let reads = run(&image)?;
    println!(
        "{WRITERS} writers x {RECORDS} records on {}: all complete ({reads} reads while writing)",
        image.display()
    );
    Ok(())
}
