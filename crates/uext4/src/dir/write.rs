//! Directory writes: adding, removing and re-pointing entries, a new
//! directory's first block, "..", and the emptiness test.
//!
//! Linear directories take a new entry in the first block with room (the
//! slack after a live entry, or an unused slot), else in a new block. A
//! one-block directory that fills up on a dir_index filesystem becomes an
//! htree (a root in block 0 and two leaves), as the kernel does; larger
//! linear directories stay linear, as in the kernel.
//!
//! Indexed directories insert through the index. A full leaf is split in
//! two by hash, preferring a split point between different hashes so that
//! equal hashes stay in one leaf; when that is impossible the new index
//! entry carries the "continued" bit that makes lookups go on into the
//! next leaf. A full index node is split into two (its parent gains an
//! entry), and a full chain up to the root makes the tree one level deeper
//! (the root's entries move into a new node), up to the kernel's limit of
//! two index levels (three with large_dir).
//!
//! Every block is read through the verifying reader (checksums, entry
//! structure) and changed on a copy; the copy is installed whole through
//! the transaction with its checksum tail recomputed, so a corrupt block is
//! reported as a typed error before anything is written. New blocks are
//! written as valid empty leaves as soon as they are mapped, so the
//! directory stays well-formed even if a later step fails.

use super::htree::{self, bad_dx, hash_version};
use super::{block, is_htree, linear_readdir};
use crate::alloc::flags as aflags;
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::{FileBlock, PhysicalBlock};
use crate::format::bytes::{le32, put_le16, put_le32};
use crate::format::dir_hash::{dx_hash, HashVersion};
use crate::format::dirent::{self, rec_len_for, rec_len_to_disk, DIRENT_HEADER, NAME_MAX, TAIL_SIZE};
use crate::format::dx::{self, DxEntry};
use crate::format::features::{compat, incompat};
use crate::format::inode::{Inode, FL_CASEFOLD, FL_ENCRYPT, FL_INDEX, S_IFDIR, S_IFMT};
use crate::inode::MAX_LBLK;
use crate::txn::Tx;
use crate::volume::Volume;

/// Directory entry file type of a directory (for "." and "..").
const FT_DIR: u8 = 2;

/// Adds entry `name` -> `ino` with dirent file type `file_type` (see
/// [`dirent::file_type_of`]). The caller has checked that the name does
/// not exist, holds the directory's lock, and writes `dir` back (its size,
/// block count and flags may change).
pub fn add_entry(tx: &Tx, dir: &mut Inode, name: &[u8], ino: u32, file_type: u8) -> Result<()> {
    check_name(name)?;
    if name == b"." || name == b".." {
        return Err(Error::Exists(String::from_utf8_lossy(name).into_owned()));
    }
    if ino == 0 || ino > tx.vol.sb.inodes_count {
        return Err(Error::Invalid(format!("directory entry for inode {ino}")));
    }
    check_dir(tx.vol, dir)?;
    let ctx = Ctx::new(tx, dir);
    let item = Item { hash: 0, ino, file_type: ctx.file_type(file_type), name: name.to_vec() };
    let mut fallback = false;
    if is_htree(tx.vol, dir) {
        match dx_add(&ctx, dir, item.clone()) {
            // A structurally broken index (not a checksum failure) is
            // abandoned without metadata_csum, as the kernel does: the
            // leaves still hold every entry, so the directory is used as
            // a linear one from now on.
            Err(Error::Corrupt(c)) if c.structure == Structure::DxNode && !ctx.csum => fallback = true,
            r => return r,
        }
    }
    linear_add(&ctx, dir, item, fallback)
}

/// Removes entry `name` and returns the inode it pointed at. Its space
/// joins the previous entry of its block (the first entry of a block is
/// marked unused instead). Never removes "." or "..".
pub fn remove_entry(tx: &Tx, dir: &mut Inode, name: &[u8]) -> Result<u32> {
    check_name(name)?;
    if name == b"." || name == b".." {
        return Err(Error::Invalid(format!("cannot remove {:?}", String::from_utf8_lossy(name))));
    }
    check_dir(tx.vol, dir)?;
    let ctx = Ctx::new(tx, dir);
    let mut loc = find(&ctx, dir, name)?.ok_or_else(|| not_found(name))?;
    let slots = ctx.slots(&loc.data, loc.pblk)?;
    let i = slots.iter().position(|s| s.off == loc.off).ok_or_else(|| moved(loc.pblk))?;
    let s = slots[i];
    let b = &mut loc.data;
    if i > 0 {
        let prev = slots[i - 1];
        put_le16(b, prev.off + 4, rec_len_to_disk(prev.rec_len + s.rec_len, ctx.bs));
        b[s.off..s.off + s.rec_len].fill(0);
    } else {
        // Keep the record (its rec_len) but wipe inode, name length,
        // type and name.
        put_le32(b, s.off, 0);
        b[s.off + 6..s.off + s.rec_len].fill(0);
    }
    ctx.finish_leaf(b);
    ctx.put(loc.pblk, b)?;
    Ok(loc.ino)
}

/// Points existing entry `name` at `ino` with `file_type` (rename over an
/// existing name); returns the inode it pointed at before.
pub fn replace_entry(tx: &Tx, dir: &mut Inode, name: &[u8], ino: u32, file_type: u8) -> Result<u32> {
    check_name(name)?;
    if name == b"." || name == b".." {
        return Err(Error::Invalid(format!("cannot replace {:?}", String::from_utf8_lossy(name))));
    }
    if ino == 0 || ino > tx.vol.sb.inodes_count {
        return Err(Error::Invalid(format!("directory entry for inode {ino}")));
    }
    check_dir(tx.vol, dir)?;
    let ctx = Ctx::new(tx, dir);
    let mut loc = find(&ctx, dir, name)?.ok_or_else(|| not_found(name))?;
    put_le32(&mut loc.data, loc.off, ino);
    if ctx.ft {
        loc.data[loc.off + 7] = ctx.file_type(file_type);
    }
    ctx.finish_leaf(&mut loc.data);
    ctx.put(loc.pblk, &loc.data)?;
    Ok(loc.ino)
}

/// Writes the first block of a new directory into `block` (allocated and
/// mapped at logical block 0 by the caller): "." -> the directory, ".." ->
/// `parent`, and the checksum tail with metadata_csum. Sets `dir.size` to
/// one block.
pub fn init_dir_block(tx: &Tx, dir: &mut Inode, block: PhysicalBlock, parent: u32) -> Result<()> {
    if parent == 0 || parent > tx.vol.sb.inodes_count {
        return Err(Error::Invalid(format!("parent inode {parent}")));
    }
    let ctx = Ctx::new(tx, dir);
    let mut b = vec![0u8; ctx.bs];
    let dot = rec_len_for(1);
    ctx.write_entry(&mut b, 0, dir.ino, dot, b".", FT_DIR);
    ctx.write_entry(&mut b, dot, parent, ctx.space() - dot, b"..", FT_DIR);
    ctx.finish_leaf(&mut b);
    tx.init(block.get(), |d| copy_block(d, &b, block.get()))?;
    dir.size = ctx.bs as u64;
    dir.flags &= !FL_INDEX;
    Ok(())
}

/// Points ".." of directory `dir` at `parent` (a directory renamed to a new
/// parent). Works on linear first blocks and htree roots.
pub fn set_dotdot(tx: &Tx, dir: &Inode, parent: u32) -> Result<()> {
    if parent == 0 || parent > tx.vol.sb.inodes_count {
        return Err(Error::Invalid(format!("parent inode {parent}")));
    }
    check_dir(tx.vol, dir)?;
    let ctx = Ctx::new(tx, dir);
    let htree = is_htree(tx.vol, dir);
    let blk = block::read(tx.vol, dir, FileBlock(0), htree)?.map_err(|_| {
        Error::corruption(
            Structure::DirEntry,
            Location::FileBlock { ino: dir.ino, lblk: 0 },
            CorruptKind::Hole { lblk: 0 },
        )
    })?;
    let pblk = blk.block;
    let mut b = blk.buf.data().to_vec();
    drop(blk);
    let dotdot = if htree {
        // The root is "." plus a ".." whose record covers the index.
        let v = dirent::parse_leaf(&b, ctx.ft, pblk)?;
        check_dots(&v.iter().map(Slot::from).collect::<Vec<_>>(), &b, pblk)?;
        v[1].offset
    } else {
        let v = ctx.slots(&b, pblk)?;
        check_dots(&v, &b, pblk)?;
        v[1].off
    };
    put_le32(&mut b, dotdot, parent);
    if htree {
        if ctx.csum {
            let node = dx::parse_node(&b, true, true, pblk)?;
            dx::set_checksum(&mut b, node.entries_offset, ctx.seed);
        }
    } else {
        ctx.finish_leaf(&mut b);
    }
    ctx.put(pblk, &b)
}

/// True if the directory holds nothing but "." and "..".
pub fn is_empty(vol: &Volume, dir: &Inode) -> Result<bool> {
    // Any third live entry, or any live entry other than the dots, means
    // the directory is in use.
    let v = linear_readdir(vol, dir, 0, 3)?;
    Ok(v.len() <= 2 && v.iter().all(|e| e.name == b"." || e.name == b".."))
}

// ---------------------------------------------------------------------------
// Context and leaf-block helpers.

/// What every step of one operation needs.
struct Ctx<'t, 'a> {
    tx: &'t Tx<'a>,
    bs: usize,
    csum: bool,
    /// Per-directory checksum seed.
    seed: u32,
    /// The filetype feature (name_len is one byte and a type byte follows).
    ft: bool,
}

/// One entry of a leaf, by position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    off: usize,
    ino: u32,
    rec_len: usize,
    name_len: usize,
}

impl From<&dirent::RawDirent<'_>> for Slot {
    fn from(e: &dirent::RawDirent<'_>) -> Slot {
        Slot { off: e.offset, ino: e.inode, rec_len: e.rec_len, name_len: e.name.len() }
    }
}

impl Slot {
    fn name<'b>(&self, b: &'b [u8]) -> &'b [u8] {
        &b[self.off + DIRENT_HEADER..self.off + DIRENT_HEADER + self.name_len]
    }
}

/// A live entry being moved or added.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Item {
    hash: u32,
    ino: u32,
    file_type: u8,
    name: Vec<u8>,
}

impl Item {
    fn size(&self) -> usize {
        rec_len_for(self.name.len())
    }
}

impl<'t, 'a> Ctx<'t, 'a> {
    fn new(tx: &'t Tx<'a>, dir: &Inode) -> Self {
        let vol = tx.vol;
        Ctx {
            tx,
            bs: vol.block_size,
            csum: vol.has_csum(),
            seed: vol.inode_csum_seed(dir.ino, dir.generation),
            ft: vol.sb.features.has_incompat(incompat::FILETYPE),
        }
    }

    fn vol(&self) -> &'t Volume {
        self.tx.vol
    }

    /// Bytes of a leaf available to entries (the tail excluded).
    fn space(&self) -> usize {
        self.bs - if self.csum { TAIL_SIZE } else { 0 }
    }

    /// The type byte to store (always 0 without the filetype feature).
    fn file_type(&self, t: u8) -> u8 {
        if self.ft {
            t
        } else {
            0
        }
    }

    fn write_entry(&self, b: &mut [u8], off: usize, ino: u32, rec_len: usize, name: &[u8], t: u8) {
        dirent::write_entry(b, off, ino, rec_len, name, self.file_type(t), self.ft);
    }

    /// The entries of a leaf block (tail excluded), validated.
    fn slots(&self, b: &[u8], pblk: u64) -> Result<Vec<Slot>> {
        if b.len() != self.bs {
            let kind = CorruptKind::Mismatch { field: "block length", value: b.len() as u64, expected: self.bs as u64 };
            return Err(Error::corruption(Structure::DirEntry, Location::from_block(pblk), kind));
        }
        if self.csum && !dirent::has_tail(b) {
            return Err(Error::corruption(
                Structure::DirEntry,
                Location::from_block(pblk),
                CorruptKind::MissingChecksumTail,
            ));
        }
        Ok(dirent::parse_leaf(&b[..self.space()], self.ft, pblk)?.iter().map(Slot::from).collect())
    }

    /// Writes the checksum tail of a leaf (metadata_csum).
    fn finish_leaf(&self, b: &mut [u8]) {
        if self.csum {
            dirent::write_tail(b);
            dirent::set_leaf_checksum(b, self.seed);
        }
    }

    /// A complete leaf holding `items` (the last entry takes the rest of
    /// the space; no items gives one unused entry).
    fn build_leaf<'i>(&self, items: impl IntoIterator<Item = &'i Item>) -> Result<Vec<u8>> {
        let mut b = vec![0u8; self.bs];
        let space = self.space();
        let items: Vec<&Item> = items.into_iter().collect();
        let used: usize = items.iter().map(|i| i.size()).sum();
        if used > space {
            return Err(Error::NoSpace(format!("{used} bytes of entries do not fit a {space}-byte leaf")));
        }
        if items.is_empty() {
            self.write_entry(&mut b, 0, 0, space, b"", 0);
        }
        let mut off = 0;
        for (i, it) in items.iter().enumerate() {
            let rec = if i + 1 == items.len() { space - off } else { it.size() };
            self.write_entry(&mut b, off, it.ino, rec, &it.name, it.file_type);
            off += rec;
        }
        self.finish_leaf(&mut b);
        Ok(b)
    }

    /// Installs new contents of an existing metadata block.
    fn put(&self, pblk: u64, data: &[u8]) -> Result<()> {
        self.tx.modify(pblk, |b| copy_block(b, data, pblk))
    }

    /// Installs the contents of a newly mapped block.
    fn put_new(&self, pblk: u64, data: &[u8]) -> Result<()> {
        self.tx.init(pblk, |b| copy_block(b, data, pblk))
    }

    /// Reads logical block `lblk` as a leaf (verified): physical block
    /// and a copy of the bytes; `None` for a hole.
    fn read_leaf(&self, dir: &Inode, lblk: FileBlock) -> Result<Option<(u64, Vec<u8>)>> {
        Ok(match block::read(self.vol(), dir, lblk, false)? {
            Ok(b) => Some((b.block, b.buf.data().to_vec())),
            Err(_) => None,
        })
    }
}

fn copy_block(dst: &mut [u8], src: &[u8], pblk: u64) -> Result<()> {
    if dst.len() != src.len() {
        let kind = CorruptKind::Mismatch { field: "block length", value: src.len() as u64, expected: dst.len() as u64 };
        return Err(Error::corruption(Structure::DirEntry, Location::from_block(pblk), kind));
    }
    dst.copy_from_slice(src);
    Ok(())
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(Error::Invalid(format!("bad name {:?}", String::from_utf8_lossy(name))));
    }
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong(String::from_utf8_lossy(name).into_owned()));
    }
    Ok(())
}

fn check_dir(vol: &Volume, dir: &Inode) -> Result<()> {
    if dir.mode & S_IFMT != S_IFDIR {
        return Err(Error::NotDir(format!("inode {}", dir.ino)));
    }
    if dir.has_inline_data() {
        return Err(Error::Unsupported("writing inline-data directories".into()));
    }
    if dir.flags & (FL_ENCRYPT | FL_CASEFOLD) != 0 {
        return Err(Error::Unsupported("writing encrypted or casefolded directories".into()));
    }
    if !dir.size.is_multiple_of(vol.block_size as u64) {
        return Err(Error::corruption(
            Structure::Inode,
            Location::Inode(dir.ino),
            CorruptKind::OutOfRange { field: "i_size (not whole blocks)", value: dir.size },
        ));
    }
    Ok(())
}

fn not_found(name: &[u8]) -> Error {
    Error::NotFound(String::from_utf8_lossy(name).into_owned())
}

fn moved(pblk: u64) -> Error {
    Error::corruption(Structure::DirEntry, Location::from_block(pblk), CorruptKind::Changed { what: "directory entry" })
}

/// Checks that the first two entries are "." and "..".
fn check_dots(v: &[Slot], b: &[u8], pblk: u64) -> Result<()> {
    if v.len() < 2 || v[0].name(b) != b"." || v[1].name(b) != b".." {
        let kind = CorruptKind::Missing { what: "\".\" and \"..\" as the first entries" };
        return Err(Error::corruption(Structure::DirEntry, Location::from_block(pblk), kind));
    }
    Ok(())
}

/// Finds room for an entry of `need` bytes: the index of an unused slot or
/// of a live entry with enough slack. A live entry named `name` is
/// `Error::Exists`.
fn find_slot(v: &[Slot], b: &[u8], name: &[u8], need: usize) -> Result<Option<usize>> {
    for (i, s) in v.iter().enumerate() {
        let used = if s.ino != 0 {
            if s.name(b) == name {
                return Err(Error::Exists(String::from_utf8_lossy(name).into_owned()));
            }
            rec_len_for(s.name_len)
        } else {
            0
        };
        if s.rec_len.saturating_sub(used) >= need {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// Writes `item` into slot `s` (splitting a live entry's slack off).
fn insert_at(ctx: &Ctx, b: &mut [u8], s: Slot, item: &Item) {
    let (off, len) = if s.ino != 0 {
        let used = rec_len_for(s.name_len);
        put_le16(b, s.off + 4, rec_len_to_disk(used, ctx.bs));
        (s.off + used, s.rec_len - used)
    } else {
        (s.off, s.rec_len)
    };
    b[off..off + len].fill(0);
    ctx.write_entry(b, off, item.ino, len, &item.name, item.file_type);
}

// ---------------------------------------------------------------------------
// Growing the directory.

/// Maps a new block at the end of the directory, writes it as an empty
/// leaf and grows `dir.size`; returns (logical, physical) block.
fn append_block(ctx: &Ctx, dir: &mut Inode) -> Result<(u32, u64)> {
    let bs = ctx.bs as u64;
    let lblk = FileBlock::of_byte(dir.size, bs);
    let largedir = ctx.vol().sb.features.has_incompat(incompat::LARGEDIR);
    let limit = if largedir { MAX_LBLK } else { FileBlock((1u64 << 32) / bs) };
    if lblk + 1 >= limit.min(MAX_LBLK) {
        return Err(Error::NoSpace(format!("directory {} has reached its maximum size", dir.ino)));
    }
    let pblk = grow(ctx, dir, lblk)?;
    let empty = ctx.build_leaf([])?;
    ctx.put_new(pblk, &empty)?;
    dir.size += bs;
    Ok((lblk.get() as u32, pblk))
}

/// Allocates and maps logical block `lblk` of the directory (a metadata
/// block, near the directory's other blocks; the extent tree grows as
/// needed).
fn grow(ctx: &Ctx, dir: &mut Inode, lblk: FileBlock) -> Result<u64> {
    if !dir.uses_extents() {
        return Err(Error::Unsupported("growing a directory without extents".into()));
    }
    let size = dir.size + ctx.bs as u64;
    let runs = crate::inode::extent_write::allocate_range(ctx.tx, dir, lblk, 1, false, aflags::METADATA, size)?;
    match runs.as_slice() {
        [(_, pblk, 1)] => Ok(pblk.get()),
        _ => {
            Err(Error::corruption(Structure::Extent, Location::Inode(dir.ino), CorruptKind::Overlap { at: lblk.get() }))
        }
    }
}

// ---------------------------------------------------------------------------
// Linear directories.

fn linear_add(ctx: &Ctx, dir: &mut Inode, mut item: Item, fallback: bool) -> Result<()> {
    // Entries may land in what was the index root's ".." record.
    dir.flags &= !FL_INDEX;
    let need = item.size();
    let nblocks = FileBlock::of_byte(dir.size, ctx.bs as u64);
    let mut lblk = FileBlock(0);
    while lblk < nblocks {
        // Holes (sparse directories) are skipped in one step.
        let (pblk, mut b) = match block::read(ctx.vol(), dir, lblk, false)? {
            Ok(blk) => (blk.block, blk.buf.data().to_vec()),
            Err(skip) => {
                lblk = lblk.saturating_add(skip);
                continue;
            }
        };
        lblk += 1;
        let v = ctx.slots(&b, pblk)?;
        if let Some(i) = find_slot(&v, &b, &item.name, need)? {
            insert_at(ctx, &mut b, v[i], &item);
            ctx.finish_leaf(&mut b);
            return ctx.put(pblk, &b);
        }
        if nblocks == FileBlock(1) && !fallback && ctx.vol().sb.features.has_compat(compat::DIR_INDEX) {
            // The kernel only accepts the signed names 0..=2 in a root
            // (the unsigned flavour comes from the superblock flag).
            let raw = ctx.vol().sb.def_hash_version;
            if let Some(version) = hash_version(ctx.vol(), raw).filter(|_| raw <= 2) {
                item.hash = dx_hash(&item.name, version, &ctx.vol().sb.hash_seed).major;
                return make_indexed(ctx, dir, pblk, &b, &v, item, version);
            }
        }
    }
    let (_, pblk) = append_block(ctx, dir)?;
    let b = ctx.build_leaf([&item])?;
    ctx.put_new(pblk, &b)
}

/// Turns a full one-block directory into an htree: the entries after ".."
/// move to two new leaves split by hash (the new entry joins its half),
/// and block 0 becomes the index root.
fn make_indexed(
    ctx: &Ctx,
    dir: &mut Inode,
    pblk0: u64,
    b0: &[u8],
    v: &[Slot],
    item: Item,
    version: HashVersion,
) -> Result<()> {
    check_dots(v, b0, pblk0)?;
    let dot_ft = if ctx.ft { b0[v[0].off + 7] } else { 0 };
    let dotdot_ft = if ctx.ft { b0[v[1].off + 7] } else { 0 };
    let mut items: Vec<Item> = v[2..]
        .iter()
        .filter(|s| s.ino != 0)
        .map(|s| Item {
            hash: dx_hash(s.name(b0), version, &ctx.vol().sb.hash_seed).major,
            ino: s.ino,
            file_type: if ctx.ft { b0[s.off + 7] } else { 0 },
            name: s.name(b0).to_vec(),
        })
        .collect();
    items.sort_by_key(|i| i.hash);
    let split = if items.len() >= 2 { choose_split(&items, &item, ctx.space()) } else { None };
    let (l1, p1) = append_block(ctx, dir)?;
    let mut entries = vec![DxEntry { hash: 0, block: l1 }];
    match split {
        Some((s, continued)) => {
            let (l2, p2) = append_block(ctx, dir)?;
            let (left, right) = halves(items, s, item);
            ctx.put_new(p1, &ctx.build_leaf(&left)?)?;
            ctx.put_new(p2, &ctx.build_leaf(&right.1)?)?;
            entries.push(DxEntry { hash: right.0 | u32::from(continued), block: l2 });
        }
        None => {
            items.push(item);
            ctx.put_new(p1, &ctx.build_leaf(&items)?)?;
        }
    }
    let mut root = vec![0u8; ctx.bs];
    let dot = rec_len_for(1);
    ctx.write_entry(&mut root, 0, le32(b0, v[0].off), dot, b".", dot_ft);
    ctx.write_entry(&mut root, dot, le32(b0, v[1].off), ctx.bs - dot, b"..", dotdot_ft);
    dx::write_root_info(&mut root, ctx.vol().sb.def_hash_version, 0);
    dx::write_entries(&mut root, dx::ROOT_ENTRIES_OFFSET, dx::root_limit(ctx.bs, ctx.csum), &entries)?;
    if ctx.csum {
        dx::set_checksum(&mut root, dx::ROOT_ENTRIES_OFFSET, ctx.seed);
    }
    ctx.put(pblk0, &root)?;
    dir.flags |= FL_INDEX;
    Ok(())
}

/// Splits sorted `items` at `s` and adds `item` to the half its hash
/// belongs to; returns the lower half and (first hash, upper half).
fn halves(mut items: Vec<Item>, s: usize, item: Item) -> (Vec<Item>, (u32, Vec<Item>)) {
    let mut right = items.split_off(s);
    let hash2 = right[0].hash;
    if item.hash >= hash2 {
        right.push(item);
    } else {
        items.push(item);
    }
    (items, (hash2, right))
}

/// Chooses where to split `items` (sorted by hash, at least two) so that
/// both halves fit in `space` with `new` added to the half its hash goes
/// to (the upper one if its hash is at least the split hash). Splits
/// between different hashes are preferred; among those, the most even.
/// Returns the index of the first item of the upper half and whether the
/// split falls inside a run of equal hashes (the "continued" bit).
fn choose_split(items: &[Item], new: &Item, space: usize) -> Option<(usize, bool)> {
    let total: usize = items.iter().map(Item::size).sum();
    let mut left = 0;
    let mut best: Option<((bool, usize), usize)> = None;
    for s in 1..items.len() {
        left += items[s - 1].size();
        let right = total - left;
        let hash2 = items[s].hash;
        let continued = items[s - 1].hash == hash2;
        let (l, r) = if new.hash >= hash2 { (left, right + new.size()) } else { (left + new.size(), right) };
        if l > space || r > space {
            continue;
        }
        let key = (continued, l.max(r));
        if best.as_ref().is_none_or(|(k, _)| key < *k) {
            best = Some((key, s));
        }
    }
    best.map(|((continued, _), s)| (s, continued))
}

// ---------------------------------------------------------------------------
// Indexed directories.

/// One index block on the path from the root to a leaf.
#[derive(Debug)]
struct Frame {
    pblk: u64,
    data: Vec<u8>,
    entries_offset: usize,
    limit: u16,
    entries: Vec<DxEntry>,
    /// The entry followed.
    pos: usize,
}

impl Frame {
    fn full(&self) -> bool {
        self.entries.len() >= usize::from(self.limit)
    }
}

/// The path to the leaf a hash belongs in.
#[derive(Debug)]
struct Probe {
    frames: Vec<Frame>,
    hash: u32,
    version: HashVersion,
    hash_version_raw: u8,
    max_levels: usize,
}

/// Walks the index from the root to the leaf `name` hashes to.
fn probe(ctx: &Ctx, dir: &Inode, name: &[u8]) -> Result<Probe> {
    let vol = ctx.vol();
    let nblocks = dir.size / ctx.bs as u64;
    let htree::Root { block: root, info, version } = htree::read_root(vol, dir)?;
    let data = root.buf.data().to_vec();
    let hash = dx_hash(name, version, &vol.sb.hash_seed).major;
    let node = dx::parse_node(&data, true, ctx.csum, root.block)?;
    let mut seen = vec![0u32];
    let mut cur = Frame {
        pblk: root.block,
        data,
        entries_offset: node.entries_offset,
        limit: node.limit,
        entries: node.entries,
        pos: 0,
    };
    drop(root);
    let mut frames = Vec::new();
    loop {
        cur.pos = cur.entries.partition_point(|e| e.hash <= hash).max(1) - 1;
        let child = cur.entries[cur.pos].block;
        if u64::from(child) >= nblocks || seen.contains(&child) {
            let at = Location::inode_block(dir.ino, cur.pblk);
            if seen.contains(&child) {
                return Err(bad_dx(at, CorruptKind::Loop { what: "htree index", at: u64::from(child) }));
            }
            let what = "dx entry block";
            return Err(bad_dx(
                at,
                CorruptKind::OutsideRange { what, value: u64::from(child), start: 0, end: nblocks },
            ));
        }
        seen.push(child);
        frames.push(cur);
        if frames.len() > usize::from(info.indirect_levels) {
            break;
        }
        let b = block::read(vol, dir, FileBlock::from(child), true)?.map_err(|_| {
            bad_dx(
                Location::FileBlock { ino: dir.ino, lblk: u64::from(child) },
                CorruptKind::Hole { lblk: u64::from(child) },
            )
        })?;
        if !b.is_dx {
            let kind = CorruptKind::WrongType { expected: "htree index node", found: 0 };
            return Err(bad_dx(Location::inode_block(dir.ino, b.block), kind));
        }
        let data = b.buf.data().to_vec();
        let node = dx::parse_node(&data, false, ctx.csum, b.block)?;
        cur = Frame {
            pblk: b.block,
            data,
            entries_offset: node.entries_offset,
            limit: node.limit,
            entries: node.entries,
            pos: 0,
        };
    }
    Ok(Probe { frames, hash, version, hash_version_raw: info.hash_version, max_levels: htree::max_levels(vol) })
}

/// Rewrites an index block from its frame.
fn write_frame(ctx: &Ctx, f: &mut Frame) -> Result<()> {
    dx::write_entries(&mut f.data, f.entries_offset, f.limit, &f.entries)?;
    if ctx.csum {
        dx::set_checksum(&mut f.data, f.entries_offset, ctx.seed);
    }
    ctx.put(f.pblk, &f.data)
}

/// A new interior node holding `entries`, written to `pblk`.
fn write_new_node(ctx: &Ctx, pblk: u64, entries: &[DxEntry]) -> Result<()> {
    let mut b = vec![0u8; ctx.bs];
    dx::write_node_header(&mut b);
    dx::write_entries(&mut b, dx::NODE_ENTRIES_OFFSET, dx::node_limit(ctx.bs, ctx.csum), entries)?;
    if ctx.csum {
        dx::set_checksum(&mut b, dx::NODE_ENTRIES_OFFSET, ctx.seed);
    }
    ctx.put_new(pblk, &b)
}

/// Most restarts one insertion can need: each fixes one full index level.
const MAX_RESTARTS: usize = 8;

fn dx_add(ctx: &Ctx, dir: &mut Inode, mut item: Item) -> Result<()> {
    let need = item.size();
    for _ in 0..MAX_RESTARTS {
        let mut p = probe(ctx, dir, &item.name)?;
        item.hash = p.hash;
        let bottom = p.frames.len() - 1;
        let leaf = p.frames[bottom].entries[p.frames[bottom].pos].block;
        let (pblk, mut b) = ctx.read_leaf(dir, FileBlock::from(leaf))?.ok_or_else(|| {
            let lblk = u64::from(leaf);
            bad_dx(Location::FileBlock { ino: dir.ino, lblk }, CorruptKind::Hole { lblk })
        })?;
        let v = ctx.slots(&b, pblk)?;
        if let Some(i) = find_slot(&v, &b, &item.name, need)? {
            insert_at(ctx, &mut b, v[i], &item);
            ctx.finish_leaf(&mut b);
            return ctx.put(pblk, &b);
        }
        if !p.frames[bottom].full() {
            return split_leaf(ctx, dir, &mut p, pblk, &b, &v, item);
        }
        // The leaf's index block is full: find the highest full level.
        let mut k = bottom;
        while k > 0 && p.frames[k - 1].full() {
            k -= 1;
        }
        if k == 0 {
            if p.frames.len() >= p.max_levels {
                return Err(Error::NoSpace(format!("directory {} index is full", dir.ino)));
            }
            add_level(ctx, dir, &mut p)?;
        } else {
            split_node(ctx, dir, &mut p.frames, k)?;
        }
    }
    Err(bad_dx(Location::Inode(dir.ino), CorruptKind::Changed { what: "htree index (it did not settle)" }))
}

/// Moves the root's entries into a new node under a one-entry root.
fn add_level(ctx: &Ctx, dir: &mut Inode, p: &mut Probe) -> Result<()> {
    let (l, pblk) = append_block(ctx, dir)?;
    let levels = p.frames.len() as u8;
    let root = &mut p.frames[0];
    write_new_node(ctx, pblk, &root.entries)?;
    root.entries = vec![DxEntry { hash: 0, block: l }];
    dx::write_root_info(&mut root.data, p.hash_version_raw, levels);
    write_frame(ctx, root)
}

/// Splits the full node `frames[k]` in two; its parent (which has room)
/// gains an entry for the upper half.
fn split_node(ctx: &Ctx, dir: &mut Inode, frames: &mut [Frame], k: usize) -> Result<()> {
    let n = frames[k].entries.len();
    if n < 2 {
        let kind = CorruptKind::OutOfRange { field: "count (full node)", value: n as u64 };
        return Err(bad_dx(Location::inode_block(dir.ino, frames[k].pblk), kind));
    }
    let (l, pblk) = append_block(ctx, dir)?;
    let upper = frames[k].entries.split_off(n / 2);
    write_new_node(ctx, pblk, &upper)?;
    write_frame(ctx, &mut frames[k])?;
    let parent = &mut frames[k - 1];
    parent.entries.insert(parent.pos + 1, DxEntry { hash: upper[0].hash, block: l });
    write_frame(ctx, parent)
}

/// Splits a full leaf by hash into itself and a new block, adds the new
/// entry to the right half and indexes the new block.
fn split_leaf(ctx: &Ctx, dir: &mut Inode, p: &mut Probe, pblk: u64, b: &[u8], v: &[Slot], item: Item) -> Result<()> {
    let seed = &ctx.vol().sb.hash_seed;
    let mut items: Vec<Item> = v
        .iter()
        .filter(|s| s.ino != 0)
        .map(|s| Item {
            hash: dx_hash(s.name(b), p.version, seed).major,
            ino: s.ino,
            file_type: if ctx.ft { b[s.off + 7] } else { 0 },
            name: s.name(b).to_vec(),
        })
        .collect();
    items.sort_by_key(|i| i.hash);
    let frame = p
        .frames
        .last_mut()
        .ok_or_else(|| bad_dx(Location::Inode(dir.ino), CorruptKind::Empty { what: "htree index path" }))?;
    if items.len() < 2 {
        let kind = CorruptKind::OutOfRange { field: "entries (full leaf)", value: items.len() as u64 };
        return Err(Error::corruption(Structure::DirEntry, Location::inode_block(dir.ino, pblk), kind));
    }
    let (s, continued) = choose_split(&items, &item, ctx.space()).ok_or_else(|| {
        let kind = CorruptKind::Malformed { what: "leaf (it cannot be split)" };
        Error::corruption(Structure::DirEntry, Location::inode_block(dir.ino, pblk), kind)
    })?;
    // The split hash must fall inside the leaf's hash range, or the index
    // would go out of order (a misplaced entry in a corrupt leaf).
    let hash2 = items[s].hash | u32::from(continued);
    let lo = frame.entries[frame.pos].hash;
    let hi = frame.entries.get(frame.pos + 1).map_or(u32::MAX, |e| e.hash);
    if hash2 < lo || hash2 > hi {
        let kind = CorruptKind::OutsideRange {
            what: "leaf hash",
            value: u64::from(hash2),
            start: u64::from(lo),
            end: u64::from(hi) + 1,
        };
        return Err(bad_dx(Location::inode_block(dir.ino, frame.pblk), kind));
    }
    let (left, (_, right)) = halves(items, s, item);
    let left = ctx.build_leaf(&left)?;
    let right = ctx.build_leaf(&right)?;
    let (l2, p2) = append_block(ctx, dir)?;
    ctx.put_new(p2, &right)?;
    ctx.put(pblk, &left)?;
    frame.entries.insert(frame.pos + 1, DxEntry { hash: hash2, block: l2 });
    write_frame(ctx, frame)
}

// ---------------------------------------------------------------------------
// Finding an entry to change.

/// Where a live entry is: its block (and a copy of it) and offset.
struct Loc {
    pblk: u64,
    data: Vec<u8>,
    off: usize,
    ino: u32,
}

fn find(ctx: &Ctx, dir: &Inode, name: &[u8]) -> Result<Option<Loc>> {
    if is_htree(ctx.vol(), dir) {
        match dx_find(ctx, dir, name) {
            // A structurally bad index: the leaves still hold every entry.
            Err(Error::Corrupt(c)) if c.structure == Structure::DxNode => {}
            r => return r,
        }
    }
    linear_find(ctx, dir, name)
}

fn find_in(ctx: &Ctx, pblk: u64, data: Vec<u8>, name: &[u8]) -> Result<Option<Loc>> {
    let v = ctx.slots(&data, pblk)?;
    Ok(v.iter().find(|s| s.ino != 0 && s.name(&data) == name).map(|s| (s.off, s.ino)).map(|(off, ino)| Loc {
        pblk,
        data,
        off,
        ino,
    }))
}

fn linear_find(ctx: &Ctx, dir: &Inode, name: &[u8]) -> Result<Option<Loc>> {
    let htree = is_htree(ctx.vol(), dir);
    let nblocks = FileBlock::of_byte(dir.size, ctx.bs as u64);
    let mut lblk = FileBlock(0);
    while lblk < nblocks {
        match block::read(ctx.vol(), dir, lblk, htree)? {
            Ok(b) if !b.is_dx => {
                let data = b.buf.data().to_vec();
                if let Some(loc) = find_in(ctx, b.block, data, name)? {
                    return Ok(Some(loc));
                }
                lblk += 1;
            }
            Ok(_) => lblk += 1,
            Err(skip) => lblk += skip,
        }
    }
    Ok(None)
}

fn dx_find(ctx: &Ctx, dir: &Inode, name: &[u8]) -> Result<Option<Loc>> {
    let p = probe(ctx, dir, name)?;
    let nblocks = dir.size / ctx.bs as u64;
    let mut path: Vec<(Vec<DxEntry>, usize)> = p.frames.into_iter().map(|f| (f.entries, f.pos)).collect();
    let (entries, pos) = &path[path.len() - 1];
    let mut leaf = entries[*pos].block;
    loop {
        if let Some((pblk, data)) = ctx.read_leaf(dir, FileBlock::from(leaf))? {
            if let Some(loc) = find_in(ctx, pblk, data, name)? {
                return Ok(Some(loc));
            }
        }
        // Equal hashes may continue into the next leaf (its index entry
        // then has the low bit set).
        match htree::next_leaf(ctx.vol(), dir, &mut path, ctx.csum, nblocks)? {
            Some((h, next)) if h & !1 == p.hash => leaf = next,
            _ => return Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(hash: u32, len: usize) -> Item {
        Item { hash, ino: 12, file_type: 1, name: vec![b'a'; len] }
    }

    #[test]
    fn split_prefers_hash_boundaries() {
        // Sizes 16 each; hashes 2,4,4,4,6,8.
        let items: Vec<Item> = [2u32, 4, 4, 4, 6, 8].iter().map(|&h| item(h, 8)).collect();
        let (s, c) = choose_split(&items, &item(10, 8), 1000).unwrap();
        assert!(!c);
        assert_ne!(items[s - 1].hash, items[s].hash);
        // All equal: must split inside the run.
        let same: Vec<Item> = (0..6).map(|_| item(4, 8)).collect();
        let (s, c) = choose_split(&same, &item(4, 8), 1000).unwrap();
        assert!(c);
        assert_eq!(s, 3);
    }

    #[test]
    fn split_respects_space() {
        // 4 entries of 264 bytes in 1012 bytes: each half must fit with
        // the new one.
        let items: Vec<Item> = (1..=3u32).map(|h| item(h * 2, 255)).collect();
        let new = item(100, 255);
        let (s, _) = choose_split(&items, &new, 1012).unwrap();
        let (l, (_, r)) = halves(items, s, new);
        assert!(l.iter().map(Item::size).sum::<usize>() <= 1012);
        assert!(r.iter().map(Item::size).sum::<usize>() <= 1012);
        assert!(!l.is_empty() && !r.is_empty());
    }

    #[test]
    fn slots_and_slack() {
        let s =
            [Slot { off: 0, ino: 2, rec_len: 12, name_len: 1 }, Slot { off: 12, ino: 2, rec_len: 1000, name_len: 2 }];
        let mut b = vec![0u8; 1024];
        b[8] = b'.';
        b[20] = b'.';
        b[21] = b'.';
        assert_eq!(find_slot(&s, &b, b"x", 12).unwrap(), Some(1));
        assert_eq!(find_slot(&s, &b, b"x", 1000).unwrap(), None);
        assert!(matches!(find_slot(&s, &b, b"..", 12), Err(Error::Exists(_))));
    }
}
