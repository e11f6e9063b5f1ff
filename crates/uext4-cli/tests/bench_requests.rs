//! `uext4 bench requests` runs end to end with tiny durations: it mounts a
//! fresh image (and the null backend), measures both operations at two
//! thread counts, unmounts, checks the image with `e2fsck -fn` and prints
//! one row per run. No
//! timing is asserted (a benchmark, not a test of speed).
//!
//! Needs root and /dev/fuse (prints `SKIP: <reason>` otherwise).

use std::process::Command;

mod mount_support;

use mount_support::{run, BIN};

#[test]
fn bench_requests_prints_a_row_per_run() {
    require_fuse!();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run(Command::new(BIN)
        .args(["bench", "requests", "--targets", "uext4,null", "--seconds", "0.05", "--threads", "1,2", "--dir"])
        .arg(dir.path()));
    let text = String::from_utf8_lossy(&out.stdout);
    for (target, op) in [("uext4", "stat"), ("uext4", "read"), ("null", "stat"), ("null", "read")] {
        for t in [1, 2] {
            let row = format!("| {target} | {op} | {t} | ");
            let line = text.lines().find(|l| l.starts_with(&row)).unwrap_or_else(|| panic!("no {row:?} in:\n{text}"));
            let rate: f64 = line.split('|').nth(4).and_then(|c| c.trim().parse().ok()).expect("a rate");
            assert!(rate > 0.0, "{line}");
        }
    }
    assert!(text.contains("uext4: image e2fsck -fn clean after unmount"), "{text}");
    // The bench cleans up after itself.
    assert_eq!(std::fs::read_dir(dir.path()).expect("read dir").count(), 0);
}
