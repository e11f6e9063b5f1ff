//! `uext4 bench scale` runs end to end at tiny sizes: every section prints
//! its table with every row, each image is checked with `e2fsck -fn` (when
//! e2fsck is installed) and deleted, and `--json` gives one parseable line
//! per row. No timing is asserted (a benchmark, not a test of speed).
//!
//! Needs neither root nor FUSE: the benchmark uses the library only.

use std::process::Command;

mod cli_support;

use cli_support::{have, run, BIN};

/// A tiny run on images of `sizes` (1T has 8,192 groups), every other
/// section at a few hundred or thousand operations.
fn bench(dir: &std::path::Path, sizes: &str, extra: &[&str]) -> String {
    let out = run(Command::new(BIN)
        .args(["bench", "scale", "--sizes", sizes, "--creates", "200", "--write-mib", "4"])
        .args(["--dir-entries", "2000", "--file-writes", "2000", "--read-seconds", "0.05"])
        .args(["--tree", "5x50", "--open-files", "200", "--image-size", "1G", "--dir"])
        .arg(dir)
        .args(extra)
        .env("PATH", format!("{}:/usr/local/sbin:/usr/sbin:/sbin", std::env::var("PATH").unwrap_or_default())));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The cells of the table row whose first cells are `start`.
fn row<'a>(text: &'a str, start: &[&str]) -> Vec<&'a str> {
    text.lines()
        .map(|l| l.trim_matches('|').split('|').map(str::trim).collect::<Vec<_>>())
        .find(|cells| cells.len() > start.len() && cells[..start.len()] == *start)
        .unwrap_or_else(|| panic!("no row {start:?} in:\n{text}"))
}

#[test]
fn bench_scale_prints_every_section_and_row() {
    let fsck = have("e2fsck");
    let dir = tempfile::tempdir().expect("tempdir");
    let text = bench(dir.path(), "64M,1T", &[]);
    for section in ["size", "dir", "file", "tree", "open"] {
        assert!(text.contains(&format!("### {section}\n")), "no {section} table in:\n{text}");
    }
    for size in ["64M", "1T"] {
        for op in ["mkfs", "open", "statfs", "create", "unlink", "mkdir", "write MiB+fsync", "unmount"] {
            let cells = row(&text, &[size, op]);
            assert_eq!(cells.len(), 11, "{cells:?}");
            // The ratio column: 1 for the first size, a number for the next.
            let ratio: f64 = cells[6].parse().unwrap_or_else(|_| panic!("ratio in {cells:?}"));
            assert!(ratio > 0.0 && (size != "64M" || ratio == 1.0), "{cells:?}");
            // The allocators' work per op: counted around the operations
            // on an open filesystem, not around mkfs, open and unmount.
            for work in &cells[7..10] {
                match op {
                    "mkfs" | "open" | "unmount" => assert_eq!(*work, "-", "{cells:?}"),
                    _ => assert!(work.parse::<f64>().is_ok(), "{cells:?}"),
                }
            }
        }
        assert_eq!(text.contains(&format!("size: {size} image: e2fsck -fn clean")), fsck, "{text}");
    }
    for k in 0..10 {
        let phase = format!("create {}-{}", k * 200 + 1, (k + 1) * 200);
        assert_eq!(row(&text, &[&phase])[1], "200");
    }
    for (phase, ops) in [("random lookup at 2000", "2000"), ("list (read_dir)", "2000"), ("remove all", "2000")] {
        assert_eq!(row(&text, &[phase])[1], ops);
    }
    assert_eq!(row(&text, &["write first 10%"])[1], "200");
    assert_eq!(row(&text, &["write last 10%"])[1], "200");
    assert_eq!(row(&text, &["write all"])[1], "2000");
    assert!(row(&text, &["random read"])[1].parse::<u64>().expect("reads") > 0);
    assert_eq!(text.contains("| e2fsck -fn (clean) |"), fsck, "{text}");
    // 2,000 extents do not fit in the inode (4) or in one leaf block (340).
    assert!(text.contains("file: extent tree depth 2, "), "{text}");
    // 5 directories of 50 files: 255 entries per walk.
    for phase in ["populate", "walk 1", "walk 2"] {
        assert_eq!(row(&text, &[phase])[1], "255");
    }
    for phase in ["create", "open all (held)", "close all (drop)"] {
        assert_eq!(row(&text, &[phase])[1], "200");
    }
    for section in ["dir", "tree", "open"] {
        assert_eq!(text.contains(&format!("{section}: image: e2fsck -fn clean")), fsck, "{text}");
    }
    // The bench deletes its images and its scratch directory.
    assert_eq!(std::fs::read_dir(dir.path()).expect("read dir").count(), 0);
}

#[test]
fn bench_scale_json_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = bench(dir.path(), "64M", &["--sections", "size,open", "--json"]);
    let lines: Vec<&str> = text.lines().collect();
    // 8 ops of one size, 4 open phases, and the e2fsck notes if any.
    let rows = lines.iter().filter(|l| !l.contains("\"note\":")).count();
    assert_eq!(rows, 12, "{text}");
    for l in &lines {
        assert!(l.starts_with("{\"section\":\"") && l.ends_with('}'), "{l}");
    }
    assert!(text.contains("{\"section\":\"size\",\"image\":\"64M\",\"op\":\"create\",\"count\":200,"), "{text}");
    assert!(text.contains("{\"section\":\"open\",\"phase\":\"open all (held)\",\"ops\":200,"), "{text}");
    assert_eq!(std::fs::read_dir(dir.path()).expect("read dir").count(), 0);
}
