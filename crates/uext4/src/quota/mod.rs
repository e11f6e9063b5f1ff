//! Disk quotas (the `quota` feature, with user, group and project quota
//! files): per-id usage and limits kept exact in the hidden quota inodes,
//! in the same transaction as the change they account for.
//!
//! What is counted is what e2fsck counts (its pass 1 and
//! `quota_compute_usage`): every inode with links that is the root or at
//! least `s_first_ino` (and, until it is freed, an orphan without links,
//! as in the kernel; see [`Quotas::charge_of`]), except the project quota file, the orphan file
//! and xattr-value inodes, charges `i_blocks` in bytes (data, extent
//! tree and xattr blocks alike) and one inode to its uid, gid and project
//! id, plus one inode for each xattr value it keeps in an EA inode
//! ([`ea_inode_refs`]; the xattr writer charges those as entries come
//! and go, [`Quotas::charge_inodes`], and a change of owner moves them). The account is therefore kept where an inode's record changes:
//! [`crate::txn::Tx`] calls [`Quotas::transfer`] (through the
//! [`QuotaAccount`] it holds) with what the record
//! charged before and after each write, so allocation, free, truncate,
//! chown, chgrp and project changes all move usage the same way, and the
//! changed entries go through the journal in that handle. Ids seen for
//! the first time get their entry (and tree blocks, growing the file as
//! the kernel's `ext4_quota_write` does) there too; each handle keeps
//! [`QUOTA_CREDITS`] aside for that ([`crate::journal::Handle::set_reserve`]).
//!
//! Limits are enforced before space or inodes are taken
//! ([`Quotas::check`]): `EDQUOT` past a hard limit, or past a soft limit
//! whose grace time (started when the usage passed it, from the file's
//! grace period) is over; unless the filesystem was opened with
//! `use_reserved` (the library's stand-in for `CAP_SYS_RESOURCE`, which
//! lets the kernel ignore limits too).
//!
//! Lock order: the quota mutex comes after the orphan-list mutex and
//! before the allocator group locks ([`crate::locks`]).

use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::FileBlock;
use crate::format::bytes::{le16, le32};
use crate::format::features::ro_compat;
use crate::format::inode::{FL_EA_INODE, FL_HUGE_FILE, GOOD_OLD_INODE_SIZE, ROOT_INO};
use crate::format::quota::{self as fq, DataHeader, Dqblk, Info, QuotaType, QT_BLOCK_SIZE, TREE_DEPTH, TREE_ROOT};
use crate::lock_order::Class;
use crate::txn::{QuotaAccount, Tx};
use crate::volume::Volume;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};

/// Journal credits every handle keeps aside for quota writes: for each
/// type, the entries of the old and new id, and the first entry of a new
/// id (header, up to three new tree blocks and their parent, a data
/// block and the next one on the free list, and the quota inode's growth:
/// inode, bitmap, descriptor and an extent block).
pub const QUOTA_CREDITS: usize = 3 * 16;

/// What an inode charges (defined with [`QuotaAccount`], the view of
/// the quota account a `Tx` keeps at every inode write).
pub use crate::txn::Charge;

/// How many of `inode`'s xattr entries, in its in-inode area and in its
/// xattr block, keep their value in an EA inode: each charges the owner
/// one inode (the kernel's ext4_xattr_inode_alloc_quota and
/// ext4_get_inode_usage; e2fsck's pass 1 counts them the same way, a
/// shared block's entries once for each inode that names the block).
pub fn ea_inode_refs(vol: &Volume, inode: &crate::format::inode::Inode) -> Result<u64> {
    use crate::format::xattr::{parse_block_raw, parse_inode_area_raw};
    if !vol.sb.features.has_incompat(crate::format::features::incompat::EA_INODE) {
        return Ok(0);
    }
    let named = |v: &[crate::format::xattr::RawXattr]| v.iter().filter(|e| e.value_inum != 0).count() as u64;
    let mut n = 0;
    let start = GOOD_OLD_INODE_SIZE + usize::from(inode.extra_isize);
    if inode.extra_isize != 0 && start + 4 + 3 < inode.raw.len() {
        n += named(&parse_inode_area_raw(&inode.raw[start..], inode.ino)?);
    }
    if inode.file_acl != 0 {
        let seed = vol.has_csum().then(|| vol.csum_seed());
        let buf = vol.block(inode.file_acl)?;
        n += named(&parse_block_raw(buf.data(), inode.file_acl, seed)?.1);
    }
    Ok(n)
}

/// One id's usage and limits, as the library reports and sets them.
pub type QuotaEntry = Dqblk;

/// The limits of one id (block limits in bytes, rounded down to the
/// format's 1 KiB units; 0: none), as
/// [`FsCore::set_quota_limits`](crate::FsCore::set_quota_limits) sets them
/// (`setquota`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QuotaLimits {
    /// Hard limit on space, bytes.
    pub space_hard: u64,
    /// Soft limit on space, bytes.
    pub space_soft: u64,
    /// Hard limit on inodes.
    pub inodes_hard: u64,
    /// Soft limit on inodes.
    pub inodes_soft: u64,
}

/// One id's entry in memory and where it lives in its file.
#[derive(Debug, Clone, Copy)]
struct Entry {
    d: Dqblk,
    /// Byte offset of the entry in the quota file.
    at: u64,
}

/// One quota file.
#[derive(Debug)]
struct QFile {
    ty: QuotaType,
    ino: u32,
    info: Info,
    /// Physical block of each filesystem block of the file (0: hole).
    fblocks: Vec<u64>,
    /// `i_size` of the file.
    size: u64,
    dquots: HashMap<u32, Entry>,
    /// Ids whose usage was found too small (clamped at zero) and logged:
    /// each is logged once.
    clamped: HashSet<u32>,
}

/// The quota state of a filesystem opened read-write with the `quota`
/// feature (see the module docs).
#[derive(Debug)]
pub struct Quotas {
    first_ino: u32,
    prj_ino: u32,
    orphan_ino: u32,
    block_size: u64,
    huge: bool,
    /// The files present, by [`QuotaType::index`].
    files: Mutex<[Option<QFile>; 3]>,
}

fn corrupt(ino: u32, offset: u64, kind: CorruptKind) -> Error {
    let location = Location::InodeOffset { ino, offset: offset as usize };
    Error::corruption(Structure::Inode, location, kind)
}

impl QFile {
    /// Loads quota file `ino` of type `ty`: its block map and every entry.
    fn load(vol: &Volume, ty: QuotaType, ino: u32) -> Result<QFile> {
        let inode = crate::inode::read_inode(vol, ino)?;
        let bs = vol.block_size as u64;
        let nblocks = inode.size.div_ceil(bs);
        if nblocks > 1 << 20 {
            return Err(corrupt(ino, 0, CorruptKind::OutOfRange { field: "quota file i_size", value: inode.size }));
        }
        let mut fblocks = Vec::with_capacity(nblocks as usize);
        let mut lblk = 0u64;
        while lblk < nblocks {
            let m = crate::inode::map_block(vol, &inode, FileBlock(lblk))?;
            let n = m.len.clamp(1, nblocks - lblk);
            for k in 0..n {
                fblocks.push(match m.kind {
                    crate::inode::MapKind::Mapped(p) => p.get() + k,
                    _ => 0,
                });
            }
            lblk += n;
        }
        let mut qf = QFile {
            ty,
            ino,
            info: Info::default(),
            fblocks,
            size: inode.size,
            dquots: HashMap::new(),
            clamped: HashSet::new(),
        };
        let b0 = qf.read(vol, 0)?;
        qf.info = fq::parse_header(ty, &b0).map_err(|e| {
            let kind = match e {
                fq::HeaderError::Magic(m) => CorruptKind::BadMagic { found: u64::from(m) },
                fq::HeaderError::Version(v) => {
                    CorruptKind::OutOfRange { field: "quota file version", value: u64::from(v) }
                }
                fq::HeaderError::Short => CorruptKind::TooShort { len: 0, need: QT_BLOCK_SIZE },
            };
            corrupt(ino, 0, kind)
        })?;
        if qf.info.blocks <= TREE_ROOT || u64::from(qf.info.blocks) * QT_BLOCK_SIZE as u64 > qf.size {
            let value = u64::from(qf.info.blocks);
            return Err(corrupt(ino, 0, CorruptKind::OutOfRange { field: "dqi_blocks", value }));
        }
        let mut seen = HashSet::new();
        qf.walk(vol, TREE_ROOT, 0, &mut seen)?;
        Ok(qf)
    }

    /// Reads tree block `blk` (every block is read once: a tree never
    /// shares index blocks, and data blocks are read once however many
    /// leaves point to them).
    fn walk(&mut self, vol: &Volume, blk: u32, depth: usize, seen: &mut HashSet<u32>) -> Result<()> {
        self.check_ref(blk)?;
        if !seen.insert(blk) {
            if depth < TREE_DEPTH {
                let kind = CorruptKind::OutOfRange { field: "quota tree reference (loop)", value: u64::from(blk) };
                return Err(corrupt(self.ino, u64::from(blk) * QT_BLOCK_SIZE as u64, kind));
            }
            return Ok(());
        }
        let b = self.read(vol, blk)?;
        if depth == TREE_DEPTH {
            for i in 0..fq::ENTRIES_PER_BLOCK {
                let off = fq::entry_offset(i);
                if let Some(d) = Dqblk::parse(&b[off..off + fq::DQBLK_SIZE]) {
                    let at = u64::from(blk) * QT_BLOCK_SIZE as u64 + off as u64;
                    self.dquots.insert(d.id, Entry { d, at });
                }
            }
            return Ok(());
        }
        for i in 0..256 {
            let r = fq::index_ref(&b, i);
            if r != 0 {
                self.walk(vol, r, depth + 1, seen)?;
            }
        }
        Ok(())
    }

    fn check_ref(&self, blk: u32) -> Result<()> {
        if blk == 0 || blk >= self.info.blocks {
            let kind = CorruptKind::OutOfRange { field: "quota tree reference", value: u64::from(blk) };
            return Err(corrupt(self.ino, 0, kind));
        }
        Ok(())
    }

    /// Where quota block `qblk` lives: (physical block, offset in it).
    fn locate(&self, bs: u64, qblk: u32) -> Result<(u64, usize)> {
        let byte = u64::from(qblk) * QT_BLOCK_SIZE as u64;
        match self.fblocks.get((byte / bs) as usize) {
            Some(&p) if p != 0 => Ok((p, (byte % bs) as usize)),
            _ => Err(corrupt(self.ino, byte, CorruptKind::CrossesEnd { what: "quota block (unmapped)" })),
        }
    }

    fn read(&self, vol: &Volume, qblk: u32) -> Result<Vec<u8>> {
        let (p, off) = self.locate(vol.block_size as u64, qblk)?;
        let buf = vol.block(p)?;
        buf.data()
            .get(off..off + QT_BLOCK_SIZE)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| corrupt(self.ino, 0, CorruptKind::CrossesEnd { what: "quota block" }))
    }

    /// Changes quota block `qblk` through the journal.
    fn write(&self, tx: &Tx, qblk: u32, f: impl FnOnce(&mut [u8])) -> Result<()> {
        let (p, off) = self.locate(tx.vol.block_size as u64, qblk)?;
        tx.modify(p, |b| {
            f(&mut b[off..off + QT_BLOCK_SIZE]);
            Ok(())
        })
    }

    fn write_info(&self, tx: &Tx) -> Result<()> {
        let (ty, info) = (self.ty, self.info);
        self.write(tx, 0, |b| fq::encode_header(ty, &info, b))
    }

    fn write_entry(&self, tx: &Tx, e: &Entry) -> Result<()> {
        let qblk = (e.at / QT_BLOCK_SIZE as u64) as u32;
        let off = (e.at % QT_BLOCK_SIZE as u64) as usize;
        self.write(tx, qblk, |b| e.d.encode(&mut b[off..off + fq::DQBLK_SIZE]))
    }

    /// Makes quota block `qblk` part of the file (allocating its
    /// filesystem block if needed) and the file at least that long.
    fn grow(&mut self, tx: &Tx, qblk: u32) -> Result<()> {
        let bs = tx.vol.block_size as u64;
        let end = (u64::from(qblk) + 1) * QT_BLOCK_SIZE as u64;
        let fidx = (u64::from(qblk) * QT_BLOCK_SIZE as u64 / bs) as usize;
        let mapped = self.fblocks.get(fidx).is_some_and(|&p| p != 0);
        if mapped && end <= self.size {
            return Ok(());
        }
        let mut qi = crate::inode::read_inode(tx.vol, self.ino)?;
        if !mapped {
            let flags = crate::alloc::flags::METADATA;
            let runs =
                crate::inode::extent_write::allocate_range(tx, &mut qi, FileBlock(fidx as u64), 1, false, flags, end)?;
            let &(_, p, _) = runs.first().ok_or_else(|| Error::NoSpace("no block for the quota file".into()))?;
            tx.init(p.get(), |b| {
                b.fill(0);
                Ok(())
            })?;
            if self.fblocks.len() <= fidx {
                self.fblocks.resize(fidx + 1, 0);
            }
            self.fblocks[fidx] = p.get();
        }
        self.size = self.size.max(end);
        qi.size = self.size;
        tx.write_inode(&mut qi)
    }

    /// A zeroed block for the tree: from the free-block list, or
    /// appended (the kernel's get_free_dqblk).
    fn new_block(&mut self, tx: &Tx) -> Result<u32> {
        let blk = if self.info.free_blk != 0 {
            let blk = self.info.free_blk;
            self.check_ref(blk)?;
            let next = DataHeader::parse(&self.read(tx.vol, blk)?).next_free;
            self.info.free_blk = next;
            blk
        } else {
            let blk = self.info.blocks;
            self.grow(tx, blk)?;
            self.info.blocks += 1;
            blk
        };
        self.write(tx, blk, |b| b.fill(0))?;
        self.write_info(tx)?;
        Ok(blk)
    }

    /// Stores a new entry `d` (its id not in the file yet): the tree path,
    /// then a slot in the first data block with room (the kernel's
    /// do_insert_tree and find_free_dqentry). Returns its offset.
    fn insert(&mut self, tx: &Tx, d: &Dqblk) -> Result<u64> {
        let mut blk = TREE_ROOT;
        for depth in 0..TREE_DEPTH - 1 {
            let idx = fq::tree_index(d.id, depth);
            let r = fq::index_ref(&self.read(tx.vol, blk)?, idx);
            blk = if r == 0 {
                let nb = self.new_block(tx)?;
                self.write(tx, blk, |b| fq::set_index_ref(b, idx, nb))?;
                nb
            } else {
                self.check_ref(r)?;
                r
            };
        }
        let idx = fq::tree_index(d.id, TREE_DEPTH - 1);
        if fq::index_ref(&self.read(tx.vol, blk)?, idx) != 0 {
            // Loading found every entry the tree reaches.
            let kind = CorruptKind::OutOfRange { field: "quota tree leaf without its entry", value: u64::from(d.id) };
            return Err(corrupt(self.ino, u64::from(blk) * QT_BLOCK_SIZE as u64, kind));
        }
        let data = self.free_entry_block(tx)?;
        let at = self.put_entry(tx, data, d)?;
        self.write(tx, blk, |b| fq::set_index_ref(b, idx, data))?;
        Ok(at)
    }

    /// The head of the free-entry list, or a new data block put there.
    fn free_entry_block(&mut self, tx: &Tx) -> Result<u32> {
        if self.info.free_entry != 0 {
            self.check_ref(self.info.free_entry)?;
            return Ok(self.info.free_entry);
        }
        let blk = self.new_block(tx)?;
        // An empty list: the new block is all of it (header all zero).
        self.info.free_entry = blk;
        self.write_info(tx)?;
        Ok(blk)
    }

    /// Puts `d` in a free slot of data block `blk` (on the free-entry
    /// list), taking the block off the list when it fills up.
    fn put_entry(&mut self, tx: &Tx, blk: u32, d: &Dqblk) -> Result<u64> {
        let b = self.read(tx.vol, blk)?;
        let mut h = DataHeader::parse(&b);
        let at_blk = u64::from(blk) * QT_BLOCK_SIZE as u64;
        let slot = fq::free_slot(&b).ok_or_else(|| {
            corrupt(self.ino, at_blk, CorruptKind::OutOfRange { field: "dqdh_entries", value: u64::from(h.entries) })
        })?;
        h.entries += 1;
        if usize::from(h.entries) >= fq::ENTRIES_PER_BLOCK {
            // Full: unlink it (the kernel's remove_free_dqentry).
            if h.next_free != 0 {
                self.check_ref(h.next_free)?;
                let prev = h.prev_free;
                self.write(tx, h.next_free, |nb| {
                    let mut nh = DataHeader::parse(nb);
                    nh.prev_free = prev;
                    nh.encode(nb);
                })?;
            }
            if h.prev_free != 0 {
                self.check_ref(h.prev_free)?;
                let next = h.next_free;
                self.write(tx, h.prev_free, |pb| {
                    let mut ph = DataHeader::parse(pb);
                    ph.next_free = next;
                    ph.encode(pb);
                })?;
            } else {
                self.info.free_entry = h.next_free;
                self.write_info(tx)?;
            }
            h.next_free = 0;
            h.prev_free = 0;
        }
        let off = fq::entry_offset(slot);
        self.write(tx, blk, |b| {
            h.encode(b);
            d.encode(&mut b[off..off + fq::DQBLK_SIZE]);
        })?;
        Ok(at_blk + off as u64)
    }

    /// Moves the usage of `id` by `ds` bytes and `di` inodes and stores
    /// the entry through `tx`.
    fn apply(&mut self, tx: &Tx, id: u32, ds: i128, di: i64) -> Result<()> {
        let mut d = self.dquots.get(&id).map_or(Dqblk { id, ..Default::default() }, |e| e.d);
        // Usage that would go below zero was wrong before this change (an
        // image written by an older uext4 that did not charge EA inodes, a
        // quota file edited by hand): the kernel clamps it at zero
        // (dquot_decr_inodes, dquot_decr_space) and e2fsck recomputes it,
        // so it is clamped here too, with a warning once per id, and no
        // error recorded. Unlike i_blocks, link counts and group counters
        // (strict: fs/errors.rs), nothing on disk depends on it.
        let mut short = None;
        let mut moved = |field: &'static str, cur: u64, delta: i128| -> u64 {
            let v = i128::from(cur) + delta;
            if v < 0 {
                short.get_or_insert((field, cur, delta.unsigned_abs()));
            }
            v.clamp(0, i128::from(u64::MAX)) as u64
        };
        d.curspace = moved("dqb_curspace", d.curspace, ds);
        d.curinodes = moved("dqb_curinodes", d.curinodes, i128::from(di));
        if let Some((field, cur, sub)) = short {
            if self.clamped.insert(id) {
                log::warn!(
                    "{} quota of id {id}: {field} {cur} is less than the {sub} to take; clamped at 0 \
                     (the usage was wrong before; e2fsck -f recomputes it)",
                    self.ty.name()
                );
            }
        }
        set_grace(&mut d, &self.info, now());
        // The inode record already changed in this handle: a quota file
        // that cannot follow (no block for a new id's entry) must not
        // commit with it, so the error is not one an operation stops
        // cleanly at.
        let ty = self.ty;
        self.store(tx, d).map_err(|e| match e {
            Error::NoSpace(m) | Error::QuotaExceeded(m) => {
                Error::Io(std::io::Error::other(format!("the {} quota file cannot grow: {m}", ty.name())))
            }
            e => e,
        })
    }

    /// Sets id's entry to `d` in memory and on disk (inserting it if new).
    fn store(&mut self, tx: &Tx, d: Dqblk) -> Result<()> {
        match self.dquots.get_mut(&d.id) {
            Some(e) => {
                e.d = d;
                let e = *e;
                self.write_entry(tx, &e)
            }
            None => {
                let at = self.insert(tx, &d)?;
                self.dquots.insert(d.id, Entry { d, at });
                Ok(())
            }
        }
    }
}

/// Seconds since the epoch.
fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Starts the grace time of a soft limit the usage just passed and ends
/// it when the usage is back under (the kernel's dquot btime/itime).
fn set_grace(d: &mut Dqblk, info: &Info, now: u64) {
    if d.bsoftlimit == 0 || d.curspace <= d.space_soft_bytes() {
        d.btime = 0;
    } else if d.btime == 0 {
        d.btime = now + u64::from(info.bgrace);
    }
    if d.isoftlimit == 0 || d.curinodes <= d.isoftlimit {
        d.itime = 0;
    } else if d.itime == 0 {
        d.itime = now + u64::from(info.igrace);
    }
}

impl Quotas {
    /// Loads the quota files of `vol` (None without the `quota` feature).
    pub fn load(vol: &Volume) -> Result<Option<Quotas>> {
        let sb = &vol.sb;
        if !sb.features.has_ro_compat(ro_compat::QUOTA) {
            return Ok(None);
        }
        let mut files: [Option<QFile>; 3] = [None, None, None];
        let inums = [sb.usr_quota_inum, sb.grp_quota_inum, sb.prj_quota_inum];
        for ty in QuotaType::ALL {
            let ino = inums[ty.index()];
            if ino != 0 {
                files[ty.index()] = Some(QFile::load(vol, ty, ino)?);
            }
        }
        Ok(Some(Quotas {
            first_ino: sb.first_ino,
            prj_ino: sb.prj_quota_inum,
            orphan_ino: sb.orphan_file_inum,
            block_size: vol.block_size as u64,
            huge: sb.features.has_ro_compat(ro_compat::HUGE_FILE),
            files: Mutex::new(files),
        }))
    }

    fn lock(&self) -> crate::locks::Ordered<parking_lot::MutexGuard<'_, [Option<QFile>; 3]>> {
        crate::locks::ordered(Class::Quota, 0, || self.files.lock())
    }

    /// Whether inode `ino` can charge anything (e2fsck's rule; the quota
    /// files themselves never do).
    pub fn tracks(&self, ino: u32) -> bool {
        ino == ROOT_INO || (ino >= self.first_ino && ino != self.prj_ino && ino != self.orphan_ino)
    }

    /// What the inode record `raw` of `ino` charges, if it is in use
    /// (None: nothing, as for an EA inode or one never used). Reads the
    /// record's fields directly: a slot about to be reused may not even
    /// parse.
    ///
    /// An inode without links still charges: as in the kernel (whose
    /// dquot_free_inode runs when the inode is freed, not at its last
    /// unlink) an unlinked open file counts until [`crate::txn::Tx::free_inode`]
    /// gives its charge back. e2fsck relies on that when it deletes the
    /// orphans a crash left: it takes their blocks and inode off the
    /// usage it read from the quota files (release_orphan_inode).
    pub fn charge_of(&self, ino: u32, raw: &[u8]) -> Option<Charge> {
        if !self.tracks(ino) || raw.len() < GOOD_OLD_INODE_SIZE {
            return None;
        }
        let flags = le32(raw, 0x20);
        if le16(raw, 0) == 0 || flags & FL_EA_INODE != 0 {
            return None;
        }
        let uid = u32::from(le16(raw, 0x2)) | u32::from(le16(raw, 0x78)) << 16;
        let gid = u32::from(le16(raw, 0x18)) | u32::from(le16(raw, 0x7A)) << 16;
        let extra = if raw.len() > GOOD_OLD_INODE_SIZE { usize::from(le16(raw, 0x80)) } else { 0 };
        let projid = if GOOD_OLD_INODE_SIZE + extra >= 0x9C + 4 && raw.len() >= 0xA0 { le32(raw, 0x9C) } else { 0 };
        let hi = if self.huge { u64::from(le16(raw, 0x74)) } else { 0 };
        let mut blocks = u64::from(le32(raw, 0x1C)) | hi << 32;
        if self.huge && flags & FL_HUGE_FILE != 0 {
            blocks = blocks.saturating_mul(self.block_size / 512);
        }
        Some(Charge { ids: [uid, gid, projid], space: blocks.saturating_mul(512), inodes: 1 })
    }

    /// Moves the usage of an inode whose record charged `old` and now
    /// charges `new`, writing the changed entries through `tx`.
    pub fn transfer(&self, tx: &Tx, old: Option<Charge>, new: Option<Charge>) -> Result<()> {
        if old == new {
            return Ok(());
        }
        let mut files = self.lock();
        for ty in QuotaType::ALL {
            let Some(qf) = files[ty.index()].as_mut() else { continue };
            let t = ty.index();
            // (id, space delta, inode delta) per id touched.
            let mut moves: Vec<(u32, i128, i64)> = Vec::with_capacity(2);
            match (old, new) {
                (Some(o), Some(n)) if o.ids[t] == n.ids[t] => {
                    if o.space != n.space {
                        moves.push((n.ids[t], i128::from(n.space) - i128::from(o.space), 0));
                    }
                }
                _ => {
                    if let Some(o) = old {
                        moves.push((o.ids[t], -i128::from(o.space), -(o.inodes as i64)));
                    }
                    if let Some(n) = new {
                        moves.push((n.ids[t], i128::from(n.space), n.inodes as i64));
                    }
                }
            }
            for (id, ds, di) in moves {
                qf.apply(tx, id, ds, di)?;
            }
        }
        Ok(())
    }

    /// Charges (`delta` > 0) or gives back the inodes of EA inode
    /// references gained or lost by an inode of owner `ids`, writing the
    /// changed entries through `tx`.
    pub fn charge_inodes(&self, tx: &Tx, ids: [u32; 3], delta: i64) -> Result<()> {
        if delta == 0 {
            return Ok(());
        }
        let mut files = self.lock();
        for ty in QuotaType::ALL {
            if let Some(qf) = files[ty.index()].as_mut() {
                qf.apply(tx, ids[ty.index()], 0, delta)?;
            }
        }
        Ok(())
    }

    /// Refuses (EDQUOT) `space` more bytes and `inodes` more inodes for
    /// the owner `ids` when that passes a hard limit.
    pub fn check(&self, ids: [u32; 3], space: u64, inodes: u64) -> Result<()> {
        self.check_some([None; 3], ids, space, inodes)
    }

    /// [`Quotas::check`] of an inode of `space` bytes and `inodes`
    /// inodes (itself and its EA inode references) moving from owner
    /// `old` to `new`: only the types whose id changes are checked.
    pub fn check_moved(&self, old: [u32; 3], new: [u32; 3], space: u64, inodes: u64) -> Result<()> {
        self.check_some(old.map(Some), new, space, inodes)
    }

    fn check_some(&self, old: [Option<u32>; 3], ids: [u32; 3], space: u64, inodes: u64) -> Result<()> {
        let files = self.lock();
        for ty in QuotaType::ALL {
            if old[ty.index()] == Some(ids[ty.index()]) {
                continue;
            }
            let Some(e) = files[ty.index()].as_ref().and_then(|qf| qf.dquots.get(&ids[ty.index()])) else {
                continue;
            };
            let d = &e.d;
            let (sp, ino) = (d.curspace.saturating_add(space), d.curinodes.saturating_add(inodes));
            // Past the soft limit once its grace time ran out counts as
            // past the hard one (the kernel's check_bdq/check_idq).
            let late = |soft: u64, grace_end: u64| soft != 0 && grace_end != 0 && now() >= grace_end;
            let refused = if space > 0 && d.bhardlimit != 0 && sp > d.space_hard_bytes() {
                Some("space hard limit")
            } else if inodes > 0 && d.ihardlimit != 0 && ino > d.ihardlimit {
                Some("inode hard limit")
            } else if space > 0 && sp > d.space_soft_bytes() && late(d.bsoftlimit, d.btime) {
                Some("space soft limit (grace time over)")
            } else if inodes > 0 && ino > d.isoftlimit && late(d.isoftlimit, d.itime) {
                Some("inode soft limit (grace time over)")
            } else {
                None
            };
            if let Some(what) = refused {
                return Err(Error::QuotaExceeded(format!("{what} of {} {}", ty.name(), d.id)));
            }
        }
        Ok(())
    }

    /// Bytes the owner `ids` may still take before a hard space limit
    /// (`u64::MAX`: none).
    pub fn space_room(&self, ids: [u32; 3]) -> u64 {
        let files = self.lock();
        QuotaType::ALL
            .iter()
            .filter_map(|ty| files[ty.index()].as_ref().and_then(|qf| qf.dquots.get(&ids[ty.index()])))
            .filter(|e| e.d.bhardlimit != 0)
            .map(|e| e.d.space_hard_bytes().saturating_sub(e.d.curspace))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// The entry of `id` in the `ty` quota file (None: no such file, or
    /// no entry: nothing used and no limits).
    pub fn get(&self, ty: QuotaType, id: u32) -> Option<QuotaEntry> {
        let files = self.lock();
        files[ty.index()].as_ref().and_then(|qf| qf.dquots.get(&id)).map(|e| e.d)
    }

    /// Every entry of the `ty` quota file, by id.
    pub fn entries(&self, ty: QuotaType) -> Vec<QuotaEntry> {
        let files = self.lock();
        let mut v: Vec<QuotaEntry> =
            files[ty.index()].as_ref().map(|qf| qf.dquots.values().map(|e| e.d).collect()).unwrap_or_default();
        v.sort_by_key(|d| d.id);
        v
    }

    /// The grace periods (space, inodes; seconds) of the `ty` quota file.
    pub fn grace(&self, ty: QuotaType) -> Option<(u32, u32)> {
        let files = self.lock();
        files[ty.index()].as_ref().map(|qf| (qf.info.bgrace, qf.info.igrace))
    }

    /// Sets the grace periods (seconds) of the `ty` quota file through
    /// `tx`; grace times already running keep their end.
    pub fn set_grace(&self, tx: &Tx, ty: QuotaType, space: u32, inodes: u32) -> Result<()> {
        let mut files = self.lock();
        let qf = files[ty.index()]
            .as_mut()
            .ok_or_else(|| Error::Unsupported(format!("the filesystem has no {} quota file", ty.name())))?;
        qf.info.bgrace = space;
        qf.info.igrace = inodes;
        qf.write_info(tx)
    }

    /// Sets the limits of `id` in the `ty` quota file through `tx`.
    pub fn set_limits(&self, tx: &Tx, ty: QuotaType, id: u32, l: QuotaLimits) -> Result<()> {
        let mut files = self.lock();
        let qf = files[ty.index()]
            .as_mut()
            .ok_or_else(|| Error::Unsupported(format!("the filesystem has no {} quota file", ty.name())))?;
        let mut d = qf.dquots.get(&id).map_or(Dqblk { id, ..Default::default() }, |e| e.d);
        d.bhardlimit = l.space_hard / fq::LIMIT_UNIT;
        d.bsoftlimit = l.space_soft / fq::LIMIT_UNIT;
        d.ihardlimit = l.inodes_hard;
        d.isoftlimit = l.inodes_soft;
        // New limits restart a grace time (the kernel's do_set_dqblk).
        d.btime = 0;
        d.itime = 0;
        set_grace(&mut d, &qf.info, now());
        qf.store(tx, d)
    }
}

/// The account a `Tx` keeps at every inode write (see the module docs):
/// the methods above, reached by `txn` through the trait it defines.
impl QuotaAccount for Quotas {
    fn tracks(&self, ino: u32) -> bool {
        Quotas::tracks(self, ino)
    }

    fn charge_of(&self, ino: u32, raw: &[u8]) -> Option<Charge> {
        Quotas::charge_of(self, ino, raw)
    }

    fn ea_inode_refs(&self, vol: &Volume, inode: &crate::format::inode::Inode) -> Result<u64> {
        ea_inode_refs(vol, inode)
    }

    fn transfer(&self, tx: &Tx<'_>, old: Option<Charge>, new: Option<Charge>) -> Result<()> {
        Quotas::transfer(self, tx, old, new)
    }

    fn charge_inodes(&self, tx: &Tx<'_>, ids: [u32; 3], delta: i64) -> Result<()> {
        Quotas::charge_inodes(self, tx, ids, delta)
    }

    fn check(&self, ids: [u32; 3], space: u64, inodes: u64) -> Result<()> {
        Quotas::check(self, ids, space, inodes)
    }

    fn check_moved(&self, old: [u32; 3], new: [u32; 3], space: u64, inodes: u64) -> Result<()> {
        Quotas::check_moved(self, old, new, space, inodes)
    }

    fn space_room(&self, ids: [u32; 3]) -> u64 {
        Quotas::space_room(self, ids)
    }
}
