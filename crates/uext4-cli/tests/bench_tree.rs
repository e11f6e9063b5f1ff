//! `uext4 bench tree` runs end to end at a tiny size: both phases print
//! every call's cost and the engine counters, and the image is checked
//! with `e2fsck -fn` (when installed) and deleted. No timing is asserted
//! (a benchmark, not a test of speed). Needs neither root nor FUSE.

use std::process::Command;

mod cli_support;

use cli_support::{have, run, BIN};

#[test]
fn bench_tree_prints_both_phases_and_leaves_a_clean_image() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run(Command::new(BIN)
        .args(["bench", "tree", "--files", "300", "--threads", "2", "--dirs", "3", "--size", "5000"])
        .args(["--image-mib", "128", "--dir"])
        .arg(dir.path())
        .env("PATH", format!("{}:/usr/local/sbin:/usr/sbin:/sbin", std::env::var("PATH").unwrap_or_default())));
    let text = String::from_utf8_lossy(&out.stdout);
    for phase in ["extract: 600 files", "rm -rf: 600 files"] {
        assert!(text.contains(phase), "no {phase:?} in:\n{text}");
    }
    for call in ["lookup-miss", "create", "write", "getxattr", "setattr-owner", "release", "unlink", "forget"] {
        assert!(text.contains(&format!("{call} ")), "no {call} in:\n{text}");
    }
    // One journal handle per create and per setattr; two per removed
    // file (unlink, then the delete at the last FORGET), plus the rmdirs.
    assert!(text.contains("handles 4.00"), "{text}");
    assert!(text.contains("handles 2.0"), "{text}");
    assert_eq!(text.contains("image: e2fsck -fn clean"), have("e2fsck"), "{text}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the image is deleted");
}
