//! Directory stress: 100,000 files in one directory, every other one
//! deleted, the rest renamed; lookups checked and the image fsck-clean.

mod rw_support;

use rw_support::{fsck_clean, mkfs};
use uext4::inode_api::RenameFlags;
use uext4::Filesystem;

#[test]
fn hundred_thousand_files_in_one_directory() {
    let n = 100_000u32;
    let Some((_d, img)) = mkfs(256, &["-b", "4096", "-N", "120000"]) else { return };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let root = fs.root();
    let d = fs.mkdir(root, b"big", 0o755, 0, 0).unwrap().ino;
    let name = |i: u32| format!("file-{i:06}-{}", "x".repeat((i % 40) as usize));
    for i in 0..n {
        fs.create(d, name(i).as_bytes(), 0o644, 0, 0).unwrap();
    }
    for i in (0..n).step_by(2) {
        fs.unlink(d, name(i).as_bytes()).unwrap();
    }
    for i in (1..n).step_by(2).filter(|i| i % 3 == 0) {
        fs.inodes()
            .rename(d, name(i).as_bytes(), d, format!("renamed-{i}").as_bytes(), RenameFlags::default())
            .unwrap();
    }
    let check = |fs: &Filesystem| {
        for i in 0..n {
            let live = fs.lookup(d, name(i).as_bytes()).is_ok();
            let renamed = fs.lookup(d, format!("renamed-{i}").as_bytes()).is_ok();
            let odd = i % 2 == 1;
            assert_eq!(live, odd && i % 3 != 0, "{}", name(i));
            assert_eq!(renamed, odd && i % 3 == 0, "renamed-{i}");
        }
        let count = fs.read_dir_all(d).unwrap().len() as u32;
        assert_eq!(count, n / 2 + 2);
    };
    check(&fs);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
    check(&Filesystem::open(&img).unwrap());
}

/// One dirstress worker (fstests' src/dirstress.c): creates `files`
/// entries in `dir` (a quarter each regular files, directories, symlinks
/// and device nodes), renames random entries over each other, then
/// removes what is left. Errors a racing peer explains (the entry was
/// renamed away, a directory over a file) are expected; any other error
/// (a corrupt inode) fails the test.
fn dirstress_worker(fs: &Filesystem, dir: u32, worker: u32, files: u32, seed: u64) {
    use uext4::Error;
    let mut rng = rw_support::Rng(seed);
    let names: Vec<Vec<u8>> = (0..files)
        .map(|i| {
            let letters: String = (0..12).map(|_| char::from(b'A' + rng.below(26) as u8)).collect();
            format!("{letters}.w{worker}.{i}").into_bytes()
        })
        .collect();
    let tolerated = |r: uext4::Result<()>, what: &str, name: &[u8]| match r {
        Ok(())
        | Err(Error::NotFound(_) | Error::Exists(_) | Error::NotEmpty(_) | Error::IsDir(_) | Error::NotDir(_)) => {}
        Err(e) => panic!("{what} {}: {e}", String::from_utf8_lossy(name)),
    };
    for (i, name) in names.iter().enumerate() {
        let r = match i % 4 {
            0 => fs.create(dir, name, 0o644, 0, 0),
            1 => fs.mkdir(dir, name, 0o755, 0, 0),
            2 => fs.inodes().symlink(dir, name, b"../some/symlink/target", 0, 0),
            _ => fs.mknod(dir, name, 0o020644, (1, 3), 0, 0),
        };
        tolerated(r.map(|_| ()), "create", name);
    }
    for _ in 0..files {
        let a = &names[rng.below(u64::from(files)) as usize];
        let b = &names[rng.below(u64::from(files)) as usize];
        let r = fs.inodes().rename(dir, a, dir, b, RenameFlags::default());
        tolerated(r, "rename", a);
    }
    for name in &names {
        let r = match fs.unlink(dir, name) {
            Err(Error::IsDir(_)) => fs.rmdir(dir, name),
            r => r,
        };
        tolerated(r, "remove", name);
    }
}

/// Runs `procs` dirstress workers, `per_dir` of them sharing each
/// directory `stress.<pass>.<n>` under `top`, and removes the directories.
fn dirstress_pass(fs: &Filesystem, top: u32, pass: u32, procs: u32, per_dir: u32, files: u32) {
    let dirs: Vec<u32> = (0..procs.div_ceil(per_dir))
        .map(|d| fs.mkdir(top, format!("stress.{pass}.{d}").as_bytes(), 0o755, 0, 0).unwrap().ino)
        .collect();
    std::thread::scope(|s| {
        for w in 0..procs {
            let dir = dirs[(w / per_dir) as usize];
            s.spawn(move || dirstress_worker(fs, dir, w, files, u64::from(pass * 100 + w + 1)));
        }
    });
    for (d, &ino) in dirs.iter().enumerate() {
        let left = fs.read_dir_all(ino).unwrap();
        assert_eq!(left.len(), 2, "stress.{pass}.{d} not empty after the removals: {left:?}");
        fs.rmdir(top, format!("stress.{pass}.{d}").as_bytes()).unwrap();
    }
}

/// Issue 12 defect 9: concurrent creates in one inode group zeroed each
/// other's freshly written inodes (the itable_unused mark was raised and
/// the slots below it zeroed outside the group lock). The three passes of
/// the recipe (dirstress -f 1000: -p 1 -n 1, then -p 5 -n 1, then -p 5
/// -n 5) in one directory, on an image whose inode tables are not
/// pre-zeroed (lazy_itable_init) so allocation does zero slots.
#[test]
fn dirstress_concurrent_creates() {
    let files = std::env::var("UEXT4_DIRSTRESS_FILES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let Some((_d, img)) = mkfs(1024, &["-b", "4096", "-E", "lazy_itable_init=1"]) else { return };
    let mut fs = Filesystem::open_rw(&img).unwrap();
    let top = fs.mkdir(fs.root(), b"dirstress", 0o755, 0, 0).unwrap().ino;
    dirstress_pass(&fs, top, 0, 1, 1, files);
    dirstress_pass(&fs, top, 1, 5, 1, files);
    dirstress_pass(&fs, top, 2, 5, 5, files);
    assert_eq!(fs.read_dir_all(top).unwrap().len(), 2);
    fs.unmount().unwrap();
    drop(fs);
    fsck_clean(&img);
}
