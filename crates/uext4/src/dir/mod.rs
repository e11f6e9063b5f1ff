//! Directories: reading entries (linear and htree), name lookup, and
//! (in [`mod@write`]) adding, removing and re-pointing entries.
//!
//! A directory is a file of blocks. Linear directories are scanned; htree
//! (dir_index) directories are searched through their hash index, falling
//! back to a scan, like the kernel, when the index is structurally unusable.
//! Callers hold the directory's I/O lock (shared to read, exclusive to
//! change; see [`crate::locks`]), so readers never see a change half done.
//!
//! In a casefolded directory ([`is_casefolded`]) names are hashed in their
//! casefolded form ([`crate::format::casefold`]) and a name matches an
//! entry whose name is the same bytes or folds to the same string, as the
//! kernel's `generic_ci_match` decides (`NameKey`); entries keep the
//! bytes they were created with.

mod block;
mod htree;
mod leaf;
pub mod write;

use crate::error::{CorruptKind, Error, Location, Result};
use crate::format::block_number::FileBlock;
use crate::format::casefold::{self, ENCODING_FLAG_STRICT};
use crate::format::dir_hash::{dx_hash, DirHash, HashVersion};
use crate::format::dirent::NAME_MAX;
use crate::format::features::{compat, incompat};
use crate::format::inode::{FileType, Inode, FL_CASEFOLD, FL_INDEX};
use crate::inode::inline;
use crate::volume::Volume;

/// Dirent file type of a directory ("." and "..").
const FT_DIR: u8 = 2;

/// One directory entry, owning its name, as
/// [`FsCore::readdir`](crate::FsCore::readdir) returns them. For long
/// listings prefer [`FsCore::readdir_into`](crate::FsCore::readdir_into),
/// which reuses one [`DirBatch`] instead of allocating per entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Inode the entry points to.
    pub ino: u32,
    /// The name (any bytes except '/' and NUL).
    pub name: Vec<u8>,
    /// File type from the entry (None without the filetype feature).
    pub file_type: Option<FileType>,
    /// Cookie to pass to continue reading *after* this entry.
    pub next_cookie: u64,
}

impl DirEntry {
    /// The entry borrowed.
    pub fn as_ref(&self) -> DirEntryRef<'_> {
        DirEntryRef { ino: self.ino, name: &self.name, file_type: self.file_type, next_cookie: self.next_cookie }
    }
}

/// One directory entry as a listing hands it out (`FsCore::readdir_into`): its
/// name borrowed from the directory block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirEntryRef<'a> {
    /// Inode the entry points to.
    pub ino: u32,
    /// The name (any bytes except '/' and NUL).
    pub name: &'a [u8],
    /// File type from the entry (None without the filetype feature).
    pub file_type: Option<FileType>,
    /// Cookie to pass to continue reading *after* this entry.
    pub next_cookie: u64,
}

impl DirEntryRef<'_> {
    /// The entry with its name copied.
    pub fn to_owned(&self) -> DirEntry {
        DirEntry { ino: self.ino, name: self.name.to_vec(), file_type: self.file_type, next_cookie: self.next_cookie }
    }
}

/// A page of directory entries in two reusable buffers (the names packed
/// in one), so that a listing allocates per page, not per entry (see
/// [`crate::fs::FsCore::readdir_into`]).
#[derive(Debug, Default, Clone)]
pub struct DirBatch {
    names: Vec<u8>,
    entries: Vec<BatchEntry>,
}

#[derive(Debug, Clone, Copy)]
struct BatchEntry {
    ino: u32,
    file_type: Option<FileType>,
    next_cookie: u64,
    /// The name: `names[name_at..name_at + name_len]`.
    name_at: usize,
    name_len: usize,
}

impl DirBatch {
    /// An empty batch.
    pub fn new() -> DirBatch {
        DirBatch::default()
    }

    /// Empties the batch (its buffers are kept).
    pub fn clear(&mut self) {
        self.names.clear();
        self.entries.clear();
    }

    /// Appends a copy of `e`.
    pub fn push(&mut self, e: DirEntryRef<'_>) {
        let name_at = self.names.len();
        self.names.extend_from_slice(e.name);
        self.entries.push(BatchEntry {
            ino: e.ino,
            file_type: e.file_type,
            next_cookie: e.next_cookie,
            name_at,
            name_len: e.name.len(),
        });
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if the batch holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, in listing order.
    pub fn iter(&self) -> impl Iterator<Item = DirEntryRef<'_>> + '_ {
        self.entries.iter().map(|e| DirEntryRef {
            ino: e.ino,
            name: &self.names[e.name_at..e.name_at + e.name_len],
            file_type: e.file_type,
            next_cookie: e.next_cookie,
        })
    }
}

/// True if the directory is hash-indexed and the filesystem honours it.
pub fn is_htree(vol: &Volume, dir: &Inode) -> bool {
    dir.flags & FL_INDEX != 0 && vol.sb.features.has_compat(compat::DIR_INDEX)
}

/// True if names in `dir` are casefolded: the directory has the casefold
/// flag and the filesystem the casefold feature (the flag alone, which the
/// kernel refuses as corruption, leaves names compared byte for byte).
pub fn is_casefolded(vol: &Volume, dir: &Inode) -> bool {
    dir.flags & FL_CASEFOLD != 0 && vol.sb.features.has_incompat(incompat::CASEFOLD)
}

/// True if the filesystem refuses names that are not UTF-8 in casefolded
/// directories (strict mode).
pub fn is_strict(vol: &Volume) -> bool {
    vol.sb.encoding_flags() & ENCODING_FLAG_STRICT != 0
}

/// The htree hash of entry name `name` in `dir` with `version`: over the
/// casefolded name in a casefolded directory when the name folds (the
/// raw bytes otherwise, as the kernel's `ext4fs_dirhash`).
pub(crate) fn name_hash(vol: &Volume, dir: &Inode, name: &[u8], version: HashVersion) -> DirHash {
    let folded = if is_casefolded(vol, dir) && !name.is_empty() {
        casefold::casefold(name, casefold::HASH_FOLD_MAX)
    } else {
        None
    };
    dx_hash(folded.as_deref().unwrap_or(name), version, &vol.sb.hash_seed)
}

/// Longest folded form compared when matching names: far beyond what any
/// 255-byte name folds to, only a bound on pathological input.
const MATCH_FOLD_MAX: usize = 1 << 16;

/// A name looked for in one directory: how entries match it and how it
/// hashes there.
#[derive(Debug, Clone)]
pub(crate) struct NameKey<'n> {
    name: &'n [u8],
    /// Whether the directory is casefolded.
    casefold: bool,
    /// The name's folded form (casefolded directories, names that fold).
    folded: Option<Vec<u8>>,
}

impl<'n> NameKey<'n> {
    /// The key of `name` in `dir`. In a strict-mode casefolded directory
    /// a name the kernel cannot fold is EINVAL, as its `d_hash` refuses it.
    pub(crate) fn new(vol: &Volume, dir: &Inode, name: &'n [u8]) -> Result<NameKey<'n>> {
        let casefold = is_casefolded(vol, dir);
        let folded = if casefold { casefold::casefold(name, MATCH_FOLD_MAX) } else { None };
        if casefold && folded.is_none() && is_strict(vol) {
            return Err(Error::Invalid(format!(
                "name {:?} is not valid UTF-8 (strict casefolded directory)",
                String::from_utf8_lossy(name)
            )));
        }
        Ok(NameKey { name, casefold, folded })
    }

    /// The name as given.
    pub(crate) fn name(&self) -> &'n [u8] {
        self.name
    }

    /// Whether an entry named `entry` is this name: the same bytes, or in
    /// a casefolded directory, both fold and their folded forms are equal.
    pub(crate) fn matches(&self, entry: &[u8]) -> bool {
        if entry == self.name {
            return true;
        }
        match &self.folded {
            Some(f) if self.casefold => casefold::casefold(entry, MATCH_FOLD_MAX).is_some_and(|e| e == *f),
            _ => false,
        }
    }

    /// The name's hash in its directory with `version`.
    pub(crate) fn hash(&self, vol: &Volume, dir: &Inode, version: HashVersion) -> DirHash {
        name_hash(vol, dir, self.name, version)
    }
}

fn filetype(vol: &Volume) -> bool {
    vol.sb.features.has_incompat(incompat::FILETYPE)
}

/// Number of blocks the directory spans.
fn dir_blocks(vol: &Volume, dir: &Inode) -> FileBlock {
    FileBlock(dir.size.div_ceil(vol.block_size as u64))
}

/// The hash a one-block directory without an index is listed by on a
/// dir_index filesystem (the one its index will use), if any.
fn block_hash(vol: &Volume, dir: &Inode) -> Option<crate::format::dir_hash::HashVersion> {
    if is_htree(vol, dir) || !vol.sb.features.has_compat(compat::DIR_INDEX) || dir_blocks(vol, dir) != FileBlock(1) {
        return None;
    }
    htree::hash_version(vol, vol.sb.def_hash_version)
}

/// Reads up to `max` entries starting at `cookie` (0 = the beginning);
/// [`readdir_with`] collected.
pub fn readdir(vol: &Volume, dir: &Inode, cookie: u64, max: usize) -> Result<Vec<DirEntry>> {
    let mut out = Vec::new();
    readdir_with(vol, dir, cookie, max, &mut |e| out.push(e.to_owned()))?;
    Ok(out)
}

/// Hands `f` up to `max` entries starting at `cookie` (0 = the
/// beginning), in listing order; fewer only at the end of the directory.
/// Nothing is allocated per entry: names are borrowed from the blocks.
///
/// Hash-indexed directories are listed in hash order with hash cookies,
/// as the kernel does: a leaf split while a listing is under way moves
/// entries to another block, so a byte position could then skip entries
/// or return some twice, but it does not change their hashes (the cookie
/// scheme is described in this module's private `htree` part). So are one-block directories on dir_index
/// filesystems (the kernel's `is_dx_dir`): they are the ones that turn
/// into an htree, and a listing must go on across that. Other linear
/// directories use byte positions within the directory file. A directory
/// whose index is unusable is listed by byte position, like a linear one.
///
/// A listing resumes inside a block: each block's entries are put in
/// listing order once per version of the block (see the private `leaf`
/// part), and a call finds its cookie there by binary search, so listing
/// a directory page by page costs the entries listed, not the entries of
/// every block visited per page. `f` is called only once the call can no
/// longer fail (an error hands it nothing).
pub fn readdir_with(
    vol: &Volume,
    dir: &Inode,
    cookie: u64,
    max: usize,
    f: &mut dyn FnMut(DirEntryRef<'_>),
) -> Result<()> {
    if dir.has_inline_data() {
        return inline_readdir(vol, dir, cookie, max, f);
    }
    let block_hash = block_hash(vol, dir);
    if !is_htree(vol, dir) && block_hash.is_none() {
        // A hash cookie from when the directory was one block, which has
        // grown since without an index: list it again from the start
        // (repeating entries rather than skipping them). Hash cookies stay
        // below 2^63; anything above (u64::MAX: the end) is past the end.
        let from = if cookie & htree::COOKIE_TAG != 0 && cookie >> 63 == 0 { 0 } else { cookie };
        return linear_readdir_with(vol, dir, from, max, 0, f);
    }
    if cookie & (htree::COOKIE_TAG | htree::LINEAR_TAG) == htree::LINEAR_TAG {
        // Going on with a listing that fell back to block order.
        return linear_readdir_with(vol, dir, cookie & !htree::LINEAR_TAG, max, htree::LINEAR_TAG, f);
    }
    // "." and ".." come first, from the index root, with cookies 1 and
    // the first hash position.
    let mut dots: [Option<(u32, Option<FileType>, bool)>; 2] = [None, None];
    let mut ndots = 0;
    if cookie < 2 {
        linear_readdir_with(vol, dir, 0, 2, 0, &mut |e| {
            let is_dot = e.name == b".";
            if (is_dot || e.name == b"..") && !(is_dot && cookie == 1) && ndots < max {
                dots[ndots] = Some((e.ino, e.file_type, is_dot));
                ndots += 1;
            }
        })?;
    }
    // Any other position (seekdir to one no listing returned) is a hash
    // position, as the kernel reads it: the listing goes on at the next
    // entry in hash order.
    let from = if cookie < 2 { htree::COOKIE_TAG } else { htree::COOKIE_TAG | cookie };
    let rest = max - ndots;
    let gathered = match block_hash {
        Some(version) => htree::gather_block(vol, dir, version, from, rest)?,
        None => match htree::gather(vol, dir, from, rest) {
            Ok(g) => g,
            // The leaves still hold every entry: list them by position, as the
            // kernel does when the index is bad (only from the start: a hash
            // cookie cannot be turned into a position).
            Err(Error::Corrupt { .. }) if cookie == 0 => {
                return linear_readdir_with(vol, dir, 0, max, htree::LINEAR_TAG, f)
            }
            Err(e) => return Err(e),
        },
    };
    for (ino, file_type, is_dot) in dots.into_iter().flatten() {
        let name: &[u8] = if is_dot { b"." } else { b".." };
        f(DirEntryRef { ino, name, file_type, next_cookie: if is_dot { 1 } else { htree::COOKIE_TAG } });
    }
    gathered.emit(rest, f);
    Ok(())
}

/// Reads up to `max` entries in block order from byte position `cookie`.
/// Unused slots are skipped.
pub fn linear_readdir(vol: &Volume, dir: &Inode, cookie: u64, max: usize) -> Result<Vec<DirEntry>> {
    let mut out = Vec::new();
    if dir.has_inline_data() {
        inline_readdir(vol, dir, cookie, max, &mut |e| out.push(e.to_owned()))?;
    } else {
        linear_readdir_with(vol, dir, cookie, max, 0, &mut |e| out.push(e.to_owned()))?;
    }
    Ok(out)
}

/// [`linear_readdir`] through `f`, each cookie with `tag` set (see
/// [`htree::LINEAR_TAG`]). The entries are handed over once every block
/// they come from was read and checked (a block's entries are collected
/// by reference, which allocates per call, not per entry).
fn linear_readdir_with(
    vol: &Volume,
    dir: &Inode,
    cookie: u64,
    max: usize,
    tag: u64,
    f: &mut dyn FnMut(DirEntryRef<'_>),
) -> Result<()> {
    let bs = vol.block_size as u64;
    let nblocks = dir_blocks(vol, dir);
    let htree = is_htree(vol, dir);
    let order = leaf::Order::Block;
    let mut blocks: Vec<(block::DirBlock, std::sync::Arc<leaf::Leaf>, u64, usize, usize)> = Vec::new();
    let mut n = 0usize;
    let mut lblk = FileBlock::of_byte(cookie, bs);
    while lblk < nblocks && n < max {
        let blk = match block::read(vol, dir, lblk, htree)? {
            Ok(blk) => blk,
            Err(skip) => {
                lblk += skip;
                continue;
            }
        };
        let l = leaf::entries(vol, dir, &blk, order)?;
        let base = lblk.byte_offset(bs);
        let first = l.first_at_offset(cookie.saturating_sub(base));
        let take = (l.slots.len() - first).min(max - n);
        if take > 0 {
            n += take;
            blocks.push((blk, l, base, first, first + take));
        }
        lblk += 1;
    }
    for (blk, l, base, first, end) in &blocks {
        let data = blk.buf.data();
        for s in &l.slots[*first..*end] {
            f(DirEntryRef {
                ino: s.ino,
                name: s.name(data),
                file_type: FileType::from_dirent(s.ft),
                next_cookie: (base + u64::from(s.next)) | tag,
            });
        }
    }
    Ok(())
}

/// Every entry of an inline directory, "." and ".." first, with the
/// kernel's listing positions (see [`inline::DIR_POS_SHIFT`]).
fn inline_all(vol: &Volume, dir: &Inode) -> Result<Vec<DirEntry>> {
    let ft = filetype(vol);
    let (parent, entries) = inline::dir_entries(dir, ft)?;
    let dir_type = if ft { FileType::from_dirent(FT_DIR) } else { None };
    let mut out = vec![
        DirEntry { ino: dir.ino, name: b".".to_vec(), file_type: dir_type, next_cookie: 12 },
        DirEntry { ino: parent, name: b"..".to_vec(), file_type: dir_type, next_cookie: inline::DIR_POS_SHIFT + 4 },
    ];
    for e in entries {
        out.push(DirEntry {
            ino: e.inode,
            name: e.name,
            file_type: FileType::from_dirent(e.file_type),
            next_cookie: e.next,
        });
    }
    for e in &out {
        if e.ino == 0 || e.ino > vol.sb.inodes_count {
            return Err(Error::corruption(
                crate::error::Structure::DirEntry,
                Location::Inode(dir.ino),
                CorruptKind::OutsideRange {
                    what: "inode",
                    value: u64::from(e.ino),
                    start: 1,
                    end: u64::from(vol.sb.inodes_count) + 1,
                },
            ));
        }
    }
    Ok(out)
}

/// Hands `f` up to `max` entries of an inline directory from position
/// `cookie` ("." is at 0, ".." at 12, the rest at their inline offsets
/// plus 20, as the kernel lists them). Inline directories fit in the
/// inode: they are parsed whole.
fn inline_readdir(
    vol: &Volume,
    dir: &Inode,
    cookie: u64,
    max: usize,
    f: &mut dyn FnMut(DirEntryRef<'_>),
) -> Result<()> {
    let all = inline_all(vol, dir)?;
    let mut pos = 0;
    let mut n = 0;
    for e in &all {
        if pos >= cookie && n < max {
            n += 1;
            f(e.as_ref());
        }
        pos = e.next_cookie;
    }
    Ok(())
}

/// Looks `name` up in `dir`; `Ok(None)` if absent.
pub fn lookup(vol: &Volume, dir: &Inode, name: &[u8]) -> Result<Option<(u32, Option<FileType>)>> {
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(Error::Invalid(format!("bad name {:?}", String::from_utf8_lossy(name))));
    }
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong(String::from_utf8_lossy(name).into_owned()));
    }
    // "." and ".." are never folded.
    let key = if name == b"." || name == b".." {
        NameKey { name, casefold: false, folded: None }
    } else {
        NameKey::new(vol, dir, name)?
    };
    if dir.has_inline_data() {
        return Ok(inline_all(vol, dir)?.into_iter().find(|e| key.matches(&e.name)).map(|e| (e.ino, e.file_type)));
    }
    if is_htree(vol, dir) {
        // "." and ".." live in the index root, which no hash leads to: the
        // kernel looks for them in block 0 only.
        if name == b"." || name == b".." {
            return match block::read(vol, dir, FileBlock(0), true)? {
                Ok(b) => b.find(filetype(vol), &key),
                Err(_) => Ok(None),
            };
        }
        match htree::lookup(vol, dir, &key) {
            Ok(found) => return Ok(found),
            // A structurally bad index is not fatal: the leaves still hold
            // every entry, so scan them (as the kernel does on
            // ERR_BAD_DX_DIR). Checksum failures are reported.
            Err(Error::Corrupt { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    linear_lookup(vol, dir, &key)
}

fn linear_lookup(vol: &Volume, dir: &Inode, name: &NameKey<'_>) -> Result<Option<(u32, Option<FileType>)>> {
    let htree = is_htree(vol, dir);
    let nblocks = dir_blocks(vol, dir);
    let mut lblk = FileBlock(0);
    while lblk < nblocks {
        match block::read(vol, dir, lblk, htree)? {
            Ok(blk) => {
                if let Some(found) = blk.find(filetype(vol), name)? {
                    return Ok(Some(found));
                }
                lblk += 1;
            }
            Err(skip) => lblk += skip,
        }
    }
    Ok(None)
}
