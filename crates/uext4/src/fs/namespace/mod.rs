//! Namespace operations: creating, linking, removing, renaming and
//! changing the attributes of inodes, and resolving paths.
//!
//! Every operation follows the same shape: check arguments, take the
//! inode locks it needs in the order of [`crate::locks`], re-read the
//! inodes under the locks, start one journal handle, change the inodes,
//! directory entries and allocations through the [`Tx`], write the inodes
//! back, and drop the handle (its changes then commit with the running
//! transaction). Errors before the first change leave nothing behind;
//! errors after it abort nothing on disk that is not consistent, because
//! the order of changes keeps every intermediate state valid for fsck
//! (an entry is added only after its inode is written, removed before its
//! inode is freed).

mod casefold;
mod create;
pub mod flags;
mod remove;
mod rename;
mod seen;
mod setattr;
pub mod setid;
mod walk;

pub use rename::RenameFlags;
pub use setattr::SetAttr;
pub use setid::Cred;

/// The namespace's own state: the rename lock, the source of inode
/// generation numbers, and the answers of the last lookups (names found
/// absent, for the creates that follow; names found, for the unlinks).
#[derive(Debug)]
pub(crate) struct NamespaceState {
    /// Only renames that move an entry between two directories (first in
    /// the lock order, see [`crate::locks`]).
    rename_lock: parking_lot::Mutex<()>,
    generation: std::sync::atomic::AtomicU32,
    absent: seen::SeenNames<dw::Room>,
    present: seen::SeenNames<dw::Found>,
}

impl NamespaceState {
    /// Generation numbers start from a random number drawn at every
    /// mount, as ext4's (`get_random_u32`): a file handle names an inode
    /// by number and generation, and a handle from another image, another
    /// mount's incarnation of the number or another filesystem instance
    /// must not be taken for the inode that has the number now. With the
    /// clock fixed for a reproducible image (`SOURCE_DATE_EPOCH`,
    /// [`crate::Timestamp::set_fixed_clock`]) they start from a hash of
    /// that time instead, the same on every run.
    pub(crate) fn new() -> NamespaceState {
        let seed = match crate::format::timestamp::Timestamp::fixed_clock() {
            Some(t) => (t as u32).wrapping_mul(2_654_435_761),
            None => random_u32(),
        };
        NamespaceState {
            rename_lock: parking_lot::Mutex::new(()),
            generation: std::sync::atomic::AtomicU32::new(seed),
            absent: seen::SeenNames::new(),
            present: seen::SeenNames::new(),
        }
    }

    /// Takes the rename lock (first in the lock order: the caller holds
    /// no inode lock).
    pub(crate) fn lock_rename(&self) -> (crate::lock_order::Held, parking_lot::MutexGuard<'_, ()>) {
        (crate::lock_order::acquire(crate::lock_order::Class::Rename, 0), self.rename_lock.lock())
    }

    /// A generation number for a new inode.
    pub(crate) fn next_generation(&self) -> u32 {
        self.generation.fetch_add(0x9E37_79B9, std::sync::atomic::Ordering::Relaxed)
    }
}

/// A random number from the kernel (getrandom(2)); without it, the
/// clock's nanoseconds mixed with the process id, which still differ from
/// one mount to the next.
fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: the buffer is valid for writes of its length; getrandom
    // writes at most that many bytes.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == 4 {
        return u32::from_le_bytes(b);
    }
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    (t.subsec_nanos() ^ (t.as_secs() as u32).rotate_left(16) ^ std::process::id()).wrapping_mul(2_654_435_761)
}

use crate::dir::write as dw;
use crate::error::{Error, Result};
use crate::format::dirent::NAME_MAX;
use crate::format::inode::{FileType, Inode, Timestamp, S_IFDIR, S_IFMT, S_IFREG};
use crate::fs::{FsCore, Stat};
use crate::inode::extent_write as ew;
use crate::locks::IoStamp;
use crate::txn::Tx;

/// Largest link count; directories beyond it count 1 (dir_nlink).
pub const LINK_MAX: u16 = 65000;

/// Checks a single path component.
pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    let shown = || String::from_utf8_lossy(name).into_owned();
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(Error::Invalid(format!("bad name {:?}", shown())));
    }
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong(shown()));
    }
    Ok(())
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

pub(in crate::fs) fn ftype(i: &Inode) -> Result<FileType> {
    i.file_type()
}

impl FsCore {
    pub(in crate::fs) fn load(&self, ino: u32) -> Result<Inode> {
        self.inode(ino)
    }

    fn load_dir(&self, ino: u32) -> Result<Inode> {
        let d = self.load(ino)?;
        if ftype(&d)? != FileType::Directory {
            return Err(Error::NotDir(format!("inode {ino}")));
        }
        if d.links_count == 0 {
            return Err(Error::NotFound(format!("directory inode {ino} was removed")));
        }
        Ok(d)
    }

    fn lookup_opt(&self, dir: &Inode, name: &[u8]) -> Result<Option<u32>> {
        Ok(crate::dir::lookup(&self.vol, dir, name)?.map(|(i, _)| i))
    }

    /// Looks `name` up in directory `dir` before the operation locks
    /// anything: under the directory's I/O lock shared, so that it sees
    /// the directory before or after a change, never in between. The
    /// answer is a guess to lock by, checked again under the locks. As
    /// the VFS's lookup before an unlink or a rename, it refuses a name
    /// that reaches an xattr value's inode ([`FsCore::named_inode`]).
    fn lookup_unlocked(&self, dir: u32, name: &[u8]) -> Result<Option<u32>> {
        let _s = self.rw()?.data.locks().lock_shared(dir);
        let found = self.lookup_opt(&self.load_dir(dir)?, name)?;
        if let Some(ino) = found {
            self.named_inode(ino)?;
        }
        Ok(found)
    }

    /// [`FsCore::lookup_unlocked`] for a removal: the inode `name` names
    /// and, when the walk found it in a leaf, where, with the stamp of
    /// the lock it was found under (an answer the removal may use once it
    /// holds the lock exclusively, if the stamp is still the
    /// directory's). A LOOKUP's answer of the same name (rm -rf: LOOKUP,
    /// then UNLINK), if kept, serves instead of a walk.
    #[allow(clippy::type_complexity)]
    fn locate_unlocked(&self, dir: u32, name: &[u8]) -> Result<Option<(u32, Option<(IoStamp, dw::Found)>)>> {
        let rw = self.rw()?;
        if let Some((stamp, found)) = rw.ns.present.take_stamped(dir, name) {
            let ino = found.ino();
            self.named_inode(ino)?;
            return Ok(Some((ino, Some((stamp, found)))));
        }
        let found = match self.search_shared(dir, name)? {
            (stamp, dw::Search::Found(ino, _, at)) => Some((ino, at.map(|f| (stamp, f)))),
            (_, dw::Search::Absent(_)) => None,
        };
        if let Some((ino, _)) = found {
            self.named_inode(ino)?;
        }
        Ok(found)
    }

    /// An inode loaded under its I/O lock, for an operation by inode
    /// number: one with no links that no open and no kernel reference
    /// kept was deleted (its number may be free or reused by now), so it
    /// is gone (ENOENT).
    pub(crate) fn check_live(&self, i: &Inode) -> Result<()> {
        if i.links_count == 0 && !self.rw()?.open.is_kept(i.ino) {
            return Err(Error::NotFound(format!("inode {} was deleted", i.ino)));
        }
        Ok(())
    }

    /// Ends an operation that could not add its entry to `dir` for want
    /// of space (ENOSPC, EDQUOT) once everything else it did is undone:
    /// the blocks the directory grew by before that are kept (see
    /// dw::add_entry), so `dir` is written back, and the operation ended
    /// consistently.
    pub(in crate::fs) fn keep_grown_dir(&self, tx: &Tx, dir: &mut Inode) -> Result<()> {
        tx.write_inode(dir)?;
        self.note_tid(tx, &[dir.ino]);
        Ok(())
    }

    /// Records `tx` as the last change of `inos` (for fsync), and the
    /// operation as ended consistently ([`Tx::settle`]).
    pub(in crate::fs) fn note_tid(&self, tx: &Tx, inos: &[u32]) {
        tx.settle();
        if let Ok(rw) = self.rw() {
            rw.txns.note_dirty(inos, tx.tid());
        }
    }

    /// Records in the superblock, in `tx`, each inode group the allocator
    /// found corrupt (a bitmap calling a live inode free, failing its
    /// checksum or disagreeing with its descriptor), as the
    /// kernel's ext4_error does: the error count and first/last error
    /// fields, and the "errors" state that makes the next fsck check
    /// everything. The allocation itself went on in another group.
    fn record_alloc_corruption(&self, tx: &Tx) -> Result<()> {
        for e in self.rw()?.ialloc.take_reports() {
            let ino = match e.as_corruption().map(|c| c.location) {
                Some(crate::error::Location::Inode(i)) => i,
                _ => 0,
            };
            let vol = &self.vol;
            tx.modify(vol.sb_location().0, |b| {
                crate::fs::superblock::modify_sb_in_block(vol, b, |sb| {
                    crate::fs::superblock::save_error_info(sb, &e, ino, e.block().unwrap_or(0), "ext4_new_inode", 0)
                })
            })?;
        }
        Ok(())
    }

    /// A fresh inode of `mode` owned by `uid`/`gid`, allocated near `parent`.
    fn new_inode(&self, tx: &Tx, parent: u32, mode: u16, uid: u32, gid: u32) -> Result<Inode> {
        let is_dir = mode & S_IFMT == S_IFDIR;
        // The project of a directory marked for inheritance (the
        // kernel's __ext4_new_inode), else the default project 0.
        let mut projid = 0;
        let mut inherit = 0;
        if self.vol.sb.features.has_ro_compat(crate::format::features::ro_compat::PROJECT) {
            let d = self.load(parent)?;
            if d.flags & crate::format::inode::FL_PROJINHERIT != 0 {
                projid = d.projid;
                inherit = if is_dir { crate::format::inode::FL_PROJINHERIT } else { 0 };
            }
        }
        tx.check_quota([uid, gid, projid], 0, 1)?;
        let ino = tx.alloc_inode(parent, is_dir)?;
        self.record_alloc_corruption(tx)?;
        let mut i = Inode::new_raw(&self.vol.sb, ino);
        i.projid = projid;
        i.flags |= inherit;
        let now = Timestamp::now();
        i.mode = mode;
        i.uid = uid;
        i.gid = gid;
        i.atime = now;
        i.mtime = now;
        i.ctime = now;
        if i.crtime.is_some() {
            i.crtime = Some(now);
        }
        i.generation = self.rw()?.ns.next_generation();
        if let Some(t) = FileType::from_mode(mode) {
            // EXT4_FL_INHERITED (chattr +S/+d/+A/... on a directory).
            i.flags |= flags::inherited_flags(&self.load(parent)?, t);
        }
        if matches!(mode & S_IFMT, S_IFREG | S_IFDIR) {
            ew::init_map(&self.vol.sb, &mut i);
        }
        Ok(i)
    }

    fn bump_dir_links(d: &mut Inode, up: bool) {
        if up {
            if d.links_count >= LINK_MAX || d.links_count == 1 {
                // dir_nlink: past the limit the count is 1 ("many").
                d.links_count = 1;
            } else {
                d.links_count += 1;
            }
        } else if d.links_count > 2 {
            d.links_count -= 1;
        }
    }

    /// Ends the creation of inode `i` named in directory `dir` (`added`:
    /// whether writing it and its entry worked). On failure (e.g. ENOSPC
    /// for a block or for growing the directory) the inode and whatever
    /// blocks it got are freed, so nothing is left without a name; else
    /// the directory's times (and, for a subdirectory, its link count)
    /// are updated and the new inode's attributes returned.
    fn finish_new_entry(&self, tx: Tx, dir: &mut Inode, i: &mut Inode, added: Result<()>) -> Result<Stat> {
        if let Err(e) = added {
            self.release_inode(&tx, i)?;
            // A new inode's blocks fail with ENOSPC before changing what
            // they grow, and the inode is undone; the directory may have
            // grown whole steps before the one that failed, which stay
            // (see dw::add_entry). Any other failure may have left a
            // half-changed directory: the journal aborts (Tx's Drop).
            if matches!(e, Error::NoSpace(_) | Error::QuotaExceeded(_)) {
                self.keep_grown_dir(&tx, dir)?;
            }
            return Err(e);
        }
        if ftype(i)? == FileType::Directory {
            Self::bump_dir_links(dir, true);
        }
        touch_dir(dir);
        tx.write_inode(dir)?;
        self.note_tid(&tx, &[dir.ino, i.ino]);
        drop(tx);
        // The new inode as written: no read-back of the record.
        self.stat_of(i.clone())
    }
}

fn touch_dir(d: &mut Inode) {
    let now = Timestamp::now();
    d.mtime = now;
    d.ctime = now;
}

fn lossy(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}
