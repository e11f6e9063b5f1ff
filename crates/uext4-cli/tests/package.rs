//! Publish-readiness of the workspace's three crates, offline: `cargo
//! package --workspace` builds each crate's .crate file, resolving uext4-fuse
//! and uext4-cli against the freshly packaged uext4 (a local overlay), which
//! fails on a path dependency without a version or a missing manifest
//! field. The full check, which also compiles every package from its
//! tarball, is `cargo package --workspace --offline` (minutes on a cold
//! target directory, so not run here); `cargo publish --workspace
//! --dry-run` does the same but needs the registry.

use std::path::Path;
use std::process::Command;

fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    c
}

#[test]
fn crates_package_offline_without_large_files() {
    let target = tempfile::tempdir().unwrap();
    let out = cargo()
        .args(["package", "--workspace", "--offline", "--no-verify", "--allow-dirty", "--target-dir"])
        .arg(target.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && err.contains("offline") {
        println!("SKIP: the local registry cache lacks what packaging needs offline: {err}");
        return;
    }
    assert!(out.status.success(), "cargo package failed: {err}");
    for name in ["uext4", "uext4-fuse", "uext4-cli"] {
        let krate = target.path().join(format!("package/{name}-0.1.0.crate"));
        assert!(krate.is_file(), "{name} not packaged: {err}");
    }

    // What goes into each package: sources, manifest, README; no images,
    // nothing big (the test images are made at run time, never stored).
    let out = cargo().args(["package", "--workspace", "--offline", "--list", "--allow-dirty"]).output().unwrap();
    assert!(out.status.success(), "cargo package --list: {}", String::from_utf8_lossy(&out.stderr));
    let list = String::from_utf8(out.stdout).unwrap();
    let files: Vec<&str> = list.lines().collect();
    assert!(files.iter().filter(|f| **f == "README.md").count() == 3, "a crate lacks its README: {list}");
    for f in &files {
        // (Test scripts run by the tests, e.g. tests/mount_setid/script.sh.)
        let known = f.ends_with(".rs")
            || (f.starts_with("tests/") && f.ends_with(".sh"))
            || matches!(*f, "Cargo.toml" | "Cargo.toml.orig" | "Cargo.lock" | "README.md" | ".cargo_vcs_info.json");
        assert!(known, "unexpected file in a package: {f}");
    }
}
