//! Requests the kernel need not send, counted from the daemon's debug log
//! (`-o log=debug,logfile=...`: one line per request it decodes):
//! - a cold walk (a fresh mount) of a directory larger than one listing
//!   batch that stats or unlinks every name (`du`, `rm -rf`) gets every
//!   entry's attributes from READDIRPLUS and sends no LOOKUP per entry.
//!   Under FUSE_READDIRPLUS_AUTO the kernel lists with attributes only the
//!   first batch (offset 0), and fts reads a whole directory before it
//!   touches an entry, so each name past the first batch cost a LOOKUP.
//!
//! The transport is `UEXT4_TEST_TRANSPORT`'s (dev or uring). Needs root
//! and /dev/fuse (prints `SKIP: <reason>` otherwise).

use std::collections::HashMap;
use std::fs;
use std::path::Path;

mod mount_support;

use mount_support::{run, tool, Fixture};

/// Requests by opcode in the daemon's debug log `log`.
fn requests(log: &Path) -> HashMap<String, usize> {
    let text = fs::read_to_string(log).expect("read the debug log");
    let mut counts = HashMap::new();
    for line in text.lines() {
        // "FUSE( 42) ino 0x0000000000000001 LOOKUP name ..."
        let Some(rest) = line.split_once(") ino 0x").map(|(_, r)| r) else { continue };
        if let Some(op) = rest.split_whitespace().nth(1) {
            *counts.entry(op.to_string()).or_insert(0) += 1;
        }
    }
    counts
}

fn count(c: &HashMap<String, usize>, op: &str) -> usize {
    c.get(op).copied().unwrap_or(0)
}

/// More entries than the kernel's first READDIRPLUS batch holds (about
/// 170 of these names in the 32 KiB that getdents asks for).
const FILES: usize = 600;

#[test]
fn cold_du_and_rm_rf_of_a_large_directory_send_no_lookup_per_entry() {
    require_fuse!();
    let fx = Fixture::with_mkfs_args("64M", &[]);
    fx.mount("rw");
    fs::create_dir(fx.path("d")).expect("mkdir");
    for i in 0..FILES {
        fs::write(fx.path(&format!("d/an-entry-with-a-longer-name-{i:04}")), b"x").expect("create");
    }
    fx.unmount();

    // A fresh mount: the kernel has no dentry or attribute of the tree.
    let log = fx.dir.path().join("requests.log");
    fx.mount(&format!("rw,log=debug,logfile={}", log.display()));
    run(tool("du").arg("-s").arg(fx.path("d")));
    let after_du = requests(&log);
    run(tool("rm").arg("-rf").arg(fx.path("d")));
    let after_rm = requests(&log);
    fx.unmount();
    assert!(!fx.path("d").exists());

    // The LOOKUP of "d" itself (du's), nothing per entry.
    let lookups = count(&after_du, "LOOKUP");
    assert!(lookups <= 2, "du of {FILES} entries sent {lookups} LOOKUPs: {after_du:?}");
    assert!(count(&after_du, "READDIRPLUS") >= 2, "listed in several batches, all with attributes: {after_du:?}");
    assert_eq!(count(&after_du, "READDIR"), 0, "{after_du:?}");
    // rm -rf: an UNLINK per entry, and no LOOKUP (du's dentries may have
    // been evicted meanwhile: the listing gives them again).
    let lookups = count(&after_rm, "LOOKUP") - count(&after_du, "LOOKUP");
    assert!(lookups <= 2, "rm -rf of {FILES} entries sent {lookups} LOOKUPs: {after_rm:?}");
    assert_eq!(count(&after_rm, "UNLINK"), FILES, "{after_rm:?}");
    fx.assert_clean();
}
