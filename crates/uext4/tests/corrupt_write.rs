//! Write-path fuzzing, deterministic slice: damaged images (single-bit
//! flips, checksums recomputed where the image has them, in the
//! superblock, a group descriptor, the bitmaps, inodes, extent blocks,
//! directory leaves, an htree root and an xattr block) opened read-write,
//! then the fixed script of changes of `write_script` (the one the
//! `write_script` fuzz target runs). Errors are expected; a panic (on any
//! thread, background ones included), a hang (watchdog) or a write
//! outside the filesystem's blocks fails the test, naming the case.
//!
//! `UEXT4_FUZZ_WRITE_FLIPS` sets the flips per structure (default 6);
//! `UEXT4_FUZZ_WRITE_SEEDS` adds that many runs with random multi-byte
//! damage anywhere in the metadata (default 40). The pristine images run
//! the script too and must come out e2fsck-clean.

#[allow(dead_code)]
mod corrupt_support;
mod write_script;

use corrupt_support::{build_images, flip_positions, Fix, Image, Rng, Target};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, Once, OnceLock};
use std::time::Duration;
use write_script::{GuardDevice, Outcome};

/// A case that does not finish within this time is a hang.
const WATCHDOG: Duration = Duration::from_secs(30);

/// Set by the panic hook: a panic anywhere (a background thread of a
/// filesystem under test included) fails the test.
static PANICKED: AtomicBool = AtomicBool::new(false);
static PANIC_MSG: Mutex<Option<String>> = Mutex::new(None);

fn install_panic_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            // Cases and the library's background threads; not the test
            // threads' own assertions.
            let t = std::thread::current();
            if !t.name().is_some_and(|n| n.starts_with("case ") || n.starts_with("uext4")) {
                return default(info);
            }
            PANICKED.store(true, Ordering::SeqCst);
            let bt = std::backtrace::Backtrace::force_capture();
            if let Ok(mut m) = PANIC_MSG.lock() {
                m.get_or_insert_with(|| format!("{info}\n{bt}"));
            }
            default(info);
        }));
    });
}

fn images() -> Option<&'static [Image]> {
    static IMAGES: OnceLock<Option<Vec<Image>>> = OnceLock::new();
    IMAGES.get_or_init(build_images).as_deref()
}

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Runs the script on `image` on its own thread under the watchdog.
/// Returns the outcome and the image left behind, or what went wrong.
fn run_case(name: &str, image: Vec<u8>, seed: u64) -> Result<(Outcome, Vec<u8>), String> {
    install_panic_hook();
    // One case at a time across the tests, so that a panic flagged by a
    // background thread belongs to the case running.
    static ONE: Mutex<()> = Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    PANICKED.store(false, Ordering::SeqCst);
    if let Ok(mut m) = PANIC_MSG.lock() {
        *m = None;
    }
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name(format!("case {name}"))
        .spawn(move || {
            let dev = Arc::new(GuardDevice::new(&image));
            drop(image);
            let r = panic::catch_unwind(AssertUnwindSafe(|| write_script::run(dev.clone(), seed)));
            let _ = tx.send(r.map(|o| (o, dev.image())).map_err(|_| ()));
        })
        .expect("spawn case thread");
    let r = match rx.recv_timeout(WATCHDOG) {
        Ok(Ok((o, img))) if o.outside > 0 => {
            Err(format!("WRITE OUTSIDE the filesystem in case `{name}`: {o:?}")).map(|()| (o, img))
        }
        Ok(Ok(v)) => Ok(v),
        Ok(Err(())) => Err(format!("PANIC in case `{name}`")),
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("HANG in case `{name}`: no result after {WATCHDOG:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(format!("case `{name}`: thread died")),
    };
    if PANICKED.load(Ordering::SeqCst) {
        let msg = PANIC_MSG.lock().ok().and_then(|m| m.clone()).unwrap_or_default();
        return Err(format!("PANIC (maybe in a background thread) by case `{name}`: {msg}"));
    }
    r
}

/// The structures the flips go into.
fn targets(img: &Image) -> Vec<Target> {
    let mut v = vec![
        Target { name: "superblock".into(), off: 1024, len: 1024, fix: Fix::Super },
        Target { name: "group desc 0".into(), off: img.gdt_off, len: img.desc_size, fix: Fix::Desc(0) },
    ];
    let fs = uext4::Filesystem::open_device(
        Arc::new(uext4::MemoryDevice::from_bytes(&img.bytes)),
        uext4::MountOptions::default(),
    )
    .unwrap();
    let gd = fs.group_descs()[0];
    // Bitmaps: their checksums live in the descriptor and are not
    // recomputed, so on csum images the flips mostly meet the check; on
    // the image without checksums they reach the allocators.
    for (name, blk) in [("block bitmap 0", gd.block_bitmap), ("inode bitmap 0", gd.inode_bitmap)] {
        v.push(Target { name: name.into(), off: img.block_off(blk), len: img.bs.min(256), fix: Fix::None });
    }
    for p in corrupt_support::PATHS {
        v.push(img.inode_target(p));
    }
    for &(block, _) in img.frag_tree.iter().take(2) {
        v.push(Target {
            name: format!("extent block {block}"),
            off: img.block_off(block),
            len: img.bs,
            fix: Fix::ExtentBlock { block, ino: img.ino["/frag"] },
        });
    }
    for (dir, lblk) in [("/", 0u64), ("/d", 0), ("/htree", 1)] {
        if let Some(block) = img.dir_block(dir, lblk) {
            v.push(Target {
                name: format!("dir {dir} block {lblk}"),
                off: img.block_off(block),
                len: img.bs,
                fix: Fix::DirLeaf { block, ino: img.ino[dir] },
            });
        }
    }
    let root = img.dx_root("/htree");
    v.push(Target {
        name: "htree root".into(),
        off: img.block_off(root),
        len: 64,
        fix: Fix::Dx { block: root, ino: img.ino["/htree"], root: true },
    });
    v.push(Target {
        name: "xattr block".into(),
        off: img.block_off(img.xattr_block),
        len: img.bs,
        fix: Fix::XattrBlock(img.xattr_block),
    });
    v
}

/// The cases of one test: each runs, and the test fails at the end naming
/// all the failed ones.
#[derive(Default)]
struct Tally {
    failures: Vec<String>,
    cases: usize,
    opened: usize,
}

impl Tally {
    /// Runs the case `name` (see [`run_case`]) and counts its outcome.
    fn run(&mut self, name: &str, image: Vec<u8>, seed: u64) {
        self.cases += 1;
        match run_case(name, image, seed) {
            Ok((o, _)) => self.opened += usize::from(o.open_error.is_none()),
            Err(e) => self.failures.push(e),
        }
    }

    fn finish(self) {
        let Tally { failures, cases, opened } = self;
        eprintln!("{cases} cases, {opened} opened read-write, {} failed", failures.len());
        assert!(failures.is_empty(), "{} of {cases} cases failed:\n{}", failures.len(), failures.join("\n"));
    }
}

#[test]
fn script_on_pristine_images_is_clean() {
    let Some(images) = images() else { return };
    for img in images {
        let (o, after) = run_case(img.name, img.bytes.to_vec(), 1).unwrap_or_else(|e| panic!("{e}"));
        assert!(o.open_error.is_none() && o.unmounted, "{}: {o:?}", img.name);
        assert!(o.ok > 100, "{}: the script did little: {o:?}", img.name);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        std::fs::write(&p, &after).unwrap();
        let out = std::process::Command::new("e2fsck").arg("-fn").arg(&p).output().unwrap();
        assert!(
            out.status.success(),
            "{}: e2fsck after the script:\n{}",
            img.name,
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

#[test]
fn script_on_flipped_structures() {
    let Some(images) = images() else { return };
    let flips = env_count("UEXT4_FUZZ_WRITE_FLIPS", 6);
    let mut tally = Tally::default();
    for img in images {
        for (t, target) in targets(img).into_iter().enumerate() {
            let fixes = if img.csum { std::slice::from_ref(&target.fix) } else { &[] };
            for bit in flip_positions(target.len, flips, 0xF11F ^ (t as u64) << 8 ^ img.bs as u64) {
                let b = img.damaged(fixes, |b| b[target.off + bit / 8] ^= 1 << (bit % 8));
                let name = format!("{} {} bit {bit}", img.name, target.name);
                tally.run(&name, b, bit as u64);
            }
        }
    }
    tally.finish();
}

#[test]
fn script_on_random_damage() {
    let Some(images) = images() else { return };
    let seeds = env_count("UEXT4_FUZZ_WRITE_SEEDS", 40);
    let mut tally = Tally::default();
    for img in images {
        let t = targets(img);
        for seed in 0..seeds as u64 {
            let mut rng = Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ img.bs as u64);
            let mut b = img.bytes.to_vec();
            // A few random bytes in a few structures at once, checksums
            // recomputed: damage that reaches the parsers in combination.
            let mut hit = Vec::new();
            for _ in 0..1 + rng.below(4) {
                let target = &t[rng.below(t.len())];
                let at = target.off + rng.below(target.len);
                b[at] = rng.next() as u8;
                hit.push(format!("{}+{}", target.name, at - target.off));
                if img.csum {
                    img.fix(&mut b, target.fix);
                }
            }
            let name = format!("{} seed {seed} [{}]", img.name, hit.join(", "));
            tally.run(&name, b, seed);
        }
    }
    tally.finish();
}

/// (offset, width, value) of one inode field.
type Field = (usize, usize, u64);

/// Extreme values in the inode fields the write path computes with (size,
/// link count, flags, block count, xattr block, mode), checksum
/// recomputed: the script then writes, truncates and allocates with them.
#[test]
fn script_on_wild_inode_fields() {
    let Some(images) = images() else { return };
    let size = |v: u64| vec![(0x4usize, 4usize, v & 0xFFFF_FFFF), (0x6C, 4, v >> 32)];
    let edits: Vec<(&str, Vec<Field>)> = vec![
        ("size 2^64-1", size(u64::MAX)),
        ("size 2^63", size(1 << 63)),
        ("size 2^44", size(1 << 44)),
        ("size 2^32*bs", size(1 << 42)),
        ("links 0", vec![(0x1A, 2, 0)]),
        ("links 65535", vec![(0x1A, 2, 0xFFFF)]),
        ("flags all", vec![(0x20, 4, 0xFFFF_FFFF)]),
        ("flags none", vec![(0x20, 4, 0)]),
        ("blocks max", vec![(0x1C, 4, 0xFFFF_FFFF), (0x74, 2, 0xFFFF)]),
        ("file_acl 1", vec![(0x68, 4, 1)]),
        ("file_acl max", vec![(0x68, 4, 0xFFFF_FFFF), (0x76, 2, 0xFFFF)]),
        ("mode 0", vec![(0x0, 2, 0)]),
        ("mode dir", vec![(0x0, 2, 0o40755)]),
        ("mode file", vec![(0x0, 2, 0o100644)]),
        ("extra_isize max", vec![(0x80, 2, 0xFFFF)]),
    ];
    let mut tally = Tally::default();
    for img in images {
        for path in ["/small.txt", "/d", "/frag", "/big", "/slow"] {
            let t = img.inode_target(path);
            let fixes = if img.csum { std::slice::from_ref(&t.fix) } else { &[] };
            for (what, fields) in &edits {
                let b = img.damaged(fixes, |b| {
                    for &(off, width, v) in fields {
                        let at = t.off + off;
                        b[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
                    }
                });
                let name = format!("{} inode {path} {what}", img.name);
                // The seed is the case's number, counted from 1.
                let seed = tally.cases as u64 + 1;
                tally.run(&name, b, seed);
            }
        }
    }
    tally.finish();
}
