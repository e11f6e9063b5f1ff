//! The readdir cursor: a listing read in pages of any size is the one
//! listing, resumes inside a block without walking the block again (each
//! block is put in listing order once per version, counted by the buffer
//! cache's `derived_builds`), and loses or repeats no entry while entries
//! are added or removed under it (POSIX: an entry added or removed during
//! the listing may or may not be listed; every other one is listed once).
//! Also: stat and lookups of a walked tree make no per-inode state.

use super::rw_support;

use rw_support::{fsck_clean, mkfs};
use std::collections::{BTreeMap, BTreeSet};
use uext4::dir::DirBatch;
use uext4::Filesystem;

const ROOT: u32 = 2;

/// A fresh image (`args` for mkfs.ext4) holding directory `d` with `n`
/// files named to fill several blocks; the filesystem open read-write and
/// `d`'s inode.
fn dir_with(n: usize, args: &[&str]) -> Option<(tempfile::TempDir, std::path::PathBuf, Filesystem, u32)> {
    let (tmp, img) = mkfs(64, args)?;
    let fs = Filesystem::open_rw(&img).unwrap();
    let d = fs.mkdir(ROOT, b"d", 0o755, 0, 0).unwrap().ino;
    for i in 0..n {
        fs.create(d, name(i).as_bytes(), 0o644, 0, 0).unwrap();
    }
    Some((tmp, img, fs, d))
}

fn name(i: usize) -> String {
    format!("entry-with-a-longer-name-{i:06}")
}

/// Lists `d` in pages of `page` entries through `FsCore::readdir`.
fn paged(fs: &Filesystem, d: u32, page: usize) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    let mut cookie = 0;
    loop {
        let b = fs.readdir(d, cookie, page).unwrap();
        assert!(b.len() <= page);
        for e in &b {
            out.push((String::from_utf8(e.name.clone()).unwrap(), e.ino));
            cookie = e.next_cookie;
        }
        if b.len() < page {
            return out;
        }
    }
}

/// The same through `FsCore::readdir_into` and one reused batch.
fn paged_into(fs: &Filesystem, d: u32, page: usize) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    let mut cookie = 0;
    let mut batch = DirBatch::new();
    loop {
        fs.readdir_into(d, cookie, page, &mut batch).unwrap();
        for e in batch.iter() {
            out.push((String::from_utf8(e.name.to_vec()).unwrap(), e.ino));
            cookie = e.next_cookie;
        }
        if batch.len() < page {
            return out;
        }
    }
}

fn one_listing(fs: &Filesystem, d: u32) -> Vec<(String, u32)> {
    fs.read_dir_all(d).unwrap().into_iter().map(|e| (String::from_utf8(e.name).unwrap(), e.ino)).collect()
}

fn finish(mut fs: Filesystem, img: &std::path::Path) {
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(img);
}

/// Hash-indexed (several leaves), linear without dir_index (several
/// blocks) and one-block hash-ordered directories, each listed in pages
/// of 1 to 200 entries: the same entries in the same order as one
/// listing, each once.
#[test]
fn pages_of_any_size_make_the_one_listing() {
    for (args, n) in [(&[][..], 600), (&["-O", "^dir_index"][..], 600), (&[][..], 20)] {
        let Some((_tmp, img, fs, d)) = dir_with(n, args) else { return };
        let all = one_listing(&fs, d);
        assert_eq!(all.len(), n + 2, "{args:?}");
        let names: BTreeSet<&String> = all.iter().map(|e| &e.0).collect();
        assert_eq!(names.len(), n + 2, "{args:?}: a name listed twice");
        for page in [1, 2, 3, 7, 64, 200] {
            assert_eq!(paged(&fs, d, page), all, "{args:?}, pages of {page}");
            assert_eq!(paged_into(&fs, d, page), all, "{args:?}, pages of {page} into a batch");
        }
        finish(fs, &img);
    }
}

/// A listing in small pages walks each block once: resuming inside a
/// block finds its place in the block's entries as listed before, not by
/// walking (and in hash order hashing and sorting) the block again.
#[test]
fn a_listing_resumes_inside_a_block_without_walking_it_again() {
    for args in [&[][..], &["-O", "^dir_index"][..]] {
        let Some((_tmp, img, fs, d)) = dir_with(800, args) else { return };
        let blocks = fs.stat(d).unwrap().size / u64::from(fs.block_size());
        assert!(blocks >= 8, "{args:?}: {blocks} blocks");
        let before = fs.cache_stats().derived_builds;
        let listed = paged(&fs, d, 3);
        assert_eq!(listed.len(), 802);
        let walks = fs.cache_stats().derived_builds - before;
        // About 270 pages over `blocks` blocks: at most one walk per block
        // (block 0 of an htree twice: its dots, and the root).
        assert!(walks <= blocks + 1, "{args:?}: {walks} block walks for {blocks} blocks");
        // A second listing finds every block listed already.
        let before = fs.cache_stats().derived_builds;
        assert_eq!(paged(&fs, d, 5), listed);
        assert_eq!(fs.cache_stats().derived_builds, before, "{args:?}");
        finish(fs, &img);
    }
}

/// Entries added (splitting leaves, growing the directory, turning a
/// one-block directory into an htree) and removed between the pages of a
/// listing: every entry present throughout is listed exactly once, no
/// entry twice.
#[test]
fn entries_added_and_removed_during_a_listing_are_neither_lost_nor_repeated() {
    for (args, n, page) in [(&[][..], 400, 7), (&["-O", "^dir_index"][..], 400, 7), (&[][..], 6, 2)] {
        let Some((_tmp, img, fs, d)) = dir_with(n, args) else { return };
        let mut present: BTreeSet<String> = (0..n).map(name).collect();
        let mut removed = BTreeSet::new();
        let mut added = 0usize;
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let mut cookie = 0;
        let mut round = 0usize;
        loop {
            let b = fs.readdir(d, cookie, page).unwrap();
            for e in &b {
                *seen.entry(String::from_utf8(e.name.clone()).unwrap()).or_default() += 1;
                cookie = e.next_cookie;
            }
            if b.len() < page {
                break;
            }
            // Twenty new names per page for the first 30 pages (leaf
            // splits, new blocks; a listing of a linear directory meets
            // the names appended after it, so they must stop coming), and
            // one old name removed every other page.
            round += 1;
            for _ in 0..if round <= 30 { 20 } else { 0 } {
                fs.create(d, format!("new-{added:06}").as_bytes(), 0o644, 0, 0).unwrap();
                added += 1;
            }
            if round.is_multiple_of(2) {
                let victim = name((round * 37) % n);
                if present.remove(&victim) {
                    fs.unlink(d, victim.as_bytes()).unwrap();
                    removed.insert(victim);
                }
            }
        }
        assert!(added >= 100, "{args:?}: the listing ended after {round} pages");
        assert!(!removed.is_empty() || n < 10, "{args:?}: nothing removed");
        for p in &present {
            assert_eq!(seen.get(p), Some(&1), "{args:?}: {p} listed {:?} times", seen.get(p));
        }
        for (s, c) in &seen {
            assert_eq!(*c, 1, "{args:?}: {s} listed {c} times");
        }
        assert_eq!(seen.get("."), Some(&1));
        assert_eq!(seen.get(".."), Some(&1));
        finish(fs, &img);
    }
}

/// stat and the lookup path (lookup, the kernel's reference, the kept
/// stat a LOOKUP reply is built from) of many files make no per-inode
/// state in the lock table: a walk of a large tree keeps nothing per file
/// it passes but the lookup counts.
#[test]
fn stat_and_lookups_of_a_walked_tree_make_no_per_inode_state() {
    let Some((_tmp, img, fs, d)) = dir_with(300, &[]) else { return };
    let mut fs = fs;
    fs.unmount().unwrap();
    drop(fs);
    let fs = Filesystem::open_rw(&img).unwrap();
    let before = fs.inode_locks().unwrap().len();
    for i in 0..300 {
        let ino = fs.lookup(d, name(i).as_bytes()).unwrap();
        fs.stat(ino).unwrap();
        assert!(!fs.kernel_ref(ino));
        assert_eq!(fs.stat_kept(ino).unwrap().ino, ino);
        fs.kernel_forget(ino, 1).unwrap();
    }
    let after = fs.inode_locks().unwrap().len();
    // The directory's own state (its lookups hold its lock shared).
    assert!(after <= before + 1, "{before} inodes with state before, {after} after 300 lookups");
    finish(fs, &img);
}
