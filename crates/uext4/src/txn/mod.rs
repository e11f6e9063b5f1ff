//! The transaction context of one metadata operation.
//!
//! A [`Tx`] is what the inode, extent and directory layers change the
//! filesystem through: a journal [`Handle`] (every block change is a
//! journaled copy-on-write; write-through on a filesystem without a
//! journal) plus the block and inode allocators, whose bitmap and
//! group-descriptor updates it journals in the same handle. With the
//! `quota` feature, every inode write also moves the usage it changes in
//! the quota files, in the same handle, through the [`QuotaAccount`] the
//! `Tx` holds (the quota module's `Quotas`: the quota files are written
//! through the extent writer, which takes a `Tx`, so `Tx` knows the
//! account by this trait alone and the arrow points down).
//!
//! Lock order here: an allocator group lock, then a cache stripe lock
//! (inside [`Handle::modify`]), then the journal's state lock. Closures
//! passed to `modify` never take locks.

mod inodes;

use crate::alloc::delalloc::DelallocSpace;
use crate::alloc::inodes::InodeAllocator;
use crate::alloc::{AllocRequest, Allocation, Allocator};
use crate::error::{Error, Result};
use crate::format::block_number::PhysicalBlock;
use crate::format::group_desc::{block_bitmap_checksum, GroupDesc, BG_BLOCK_UNINIT};
use crate::format::inode::Inode;
use crate::journal::Handle;
use crate::volume::Volume;

/// What an inode charges to disk quotas: its uid, gid and project id,
/// its space in bytes, and inodes: itself and one for each xattr value
/// it keeps in an EA inode (see [`QuotaAccount::ea_inode_refs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    /// Ids, indexed by `format::quota::QuotaType::index`.
    pub ids: [u32; 3],
    /// `i_blocks` in bytes.
    pub space: u64,
    /// Inodes: 1, plus the EA inode references when the caller counted
    /// them ([`QuotaAccount::charge_of`] does not: it sees the record alone).
    pub inodes: u64,
}

/// The disk-quota account a [`Tx`] keeps exact at every inode write
/// (implemented by the quota module's `Quotas`, which sits above `txn`:
/// it writes its files through a `Tx`). Usage moves in the transaction
/// that changes the inode, entries written through that `Tx`.
pub trait QuotaAccount: std::fmt::Debug + Send + Sync {
    /// Whether inode `ino` can charge anything (the quota files never do).
    fn tracks(&self, ino: u32) -> bool;
    /// What the inode record `raw` of `ino` charges, if it is in use.
    fn charge_of(&self, ino: u32, raw: &[u8]) -> Option<Charge>;
    /// How many of `inode`'s xattr values live in EA inodes (one inode
    /// of its owner each).
    fn ea_inode_refs(&self, vol: &Volume, inode: &Inode) -> Result<u64>;
    /// Moves the usage of an inode whose record charged `old` and now
    /// charges `new`, writing the changed entries through `tx`.
    fn transfer(&self, tx: &Tx<'_>, old: Option<Charge>, new: Option<Charge>) -> Result<()>;
    /// Charges (`delta` > 0) or gives back `delta` inodes of owner `ids`.
    fn charge_inodes(&self, tx: &Tx<'_>, ids: [u32; 3], delta: i64) -> Result<()>;
    /// Refuses (EDQUOT) `space` more bytes and `inodes` more inodes for
    /// the owner `ids` past a limit.
    fn check(&self, ids: [u32; 3], space: u64, inodes: u64) -> Result<()>;
    /// [`QuotaAccount::check`] for an inode moving from owner `old` to
    /// `new`: only the types whose id changes.
    fn check_moved(&self, old: [u32; 3], new: [u32; 3], space: u64, inodes: u64) -> Result<()>;
    /// Bytes the owner `ids` may still take before a hard space limit.
    fn space_room(&self, ids: [u32; 3]) -> u64;
}

/// One operation's access to metadata: journal handle and allocators.
pub struct Tx<'a> {
    /// The volume (superblock, static layout, cache).
    pub vol: &'a Volume,
    /// Block allocator.
    pub alloc: &'a Allocator,
    /// Inode allocator.
    pub ialloc: &'a InodeAllocator,
    /// The journal handle.
    pub handle: Handle,
    /// May allocate the blocks reserved for root (`s_r_blocks_count`).
    pub use_reserved: bool,
    /// Blocks reserved for delayed allocation, which other allocations
    /// leave alone (None: no page cache, nothing reserved).
    pub delalloc: Option<&'a DelallocSpace>,
    /// This transaction is writeback's: it allocates the blocks that
    /// were reserved for it.
    pub writeback: bool,
    /// The operation reached a consistent end (see [`Tx::settle`]).
    pub settled: std::sync::atomic::AtomicBool,
    /// The handle's record in the lock-order checker (kept for its Drop,
    /// which removes the record: never read).
    #[allow(dead_code)]
    pub order: crate::lock_order::Held,
    /// Disk quotas to keep (None without the `quota` feature).
    pub quota: Option<&'a dyn QuotaAccount>,
    /// Inodes this handle allocated and has not written yet: their slot's
    /// old contents charged nothing, whatever they hold.
    pub new_inodes: parking_lot::Mutex<Vec<u32>>,
    /// Group journaling put off to the end of a [`Tx::batch_groups`]
    /// (None outside one).
    pub deferred: parking_lot::Mutex<Option<DeferredGroups>>,
}

/// Bitmaps and descriptors whose journaling a [`Tx::batch_groups`] puts
/// off to its end, when the changes of one deletion are journaled
/// together: the block frees' group and the inode's group, whose
/// descriptors usually share one descriptor block, in one change of that
/// block instead of a copy each.
#[derive(Debug, Default)]
pub struct DeferredGroups {
    /// Block groups freed from.
    blocks: Vec<u32>,
    /// Inode groups freed from, with the group's change number of the free.
    inodes: Vec<(u32, u64)>,
}

/// Another group's descriptor change made in the same copy of the
/// descriptor block: the group and the edit.
type OtherDesc<'f> = (u32, &'f mut dyn FnMut(&mut GroupDesc));

/// Credits a deferred group is charged ahead (its bitmap and descriptor),
/// so that a bounded step sizing itself by the credits left counts the
/// journaling it has not done yet.
const DEFERRED_GROUP_CREDITS: usize = 2;

impl std::fmt::Debug for Tx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx").field("tid", &self.handle.tid()).finish_non_exhaustive()
    }
}

/// What a freed range held (metadata blocks are revoked and dropped from
/// the cache; data blocks are not in the journal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreeKind {
    /// File data.
    Data,
    /// Extent, directory, xattr or indirect blocks.
    Metadata,
}

impl Drop for Tx<'_> {
    /// An operation that changed metadata and ends without
    /// [`Tx::settle`] failed half-way: whatever it installed in the
    /// running transaction is an inconsistent step (an entry removed but
    /// the link count not dropped, a bitmap freed in one group and not the
    /// next). Like ext4 (ext4_abort on a failed handle), the journal is
    /// aborted so that it never commits; the last committed state, plus
    /// the log, stays what a recovery finds.
    fn drop(&mut self) {
        if self.handle.has_changes() && !self.settled.load(std::sync::atomic::Ordering::Relaxed) {
            self.handle.abort_journal("an operation failed after changing metadata");
        }
    }
}

/// Blocks kept free for the metadata (extent blocks) that writeback of
/// buffered data may need: only writeback allocates them, and buffered
/// writes reserve their data blocks outside them (the kernel's
/// s_resv_clusters). Counted in clusters with bigalloc, where each
/// extent block takes one.
///
/// Without the `extent` feature every file is block-mapped: writeback
/// adds an indirect block per 256 to 1024 data blocks, and the pool is
/// the kernel's (ext4_calculate_resv_clusters: 2%, at most 4096).
pub fn writeback_reserve(sb: &crate::format::superblock::Superblock) -> u64 {
    if !sb.features.has_incompat(crate::format::features::incompat::EXTENTS) {
        return (sb.blocks_count / 50).clamp(16, 4096);
    }
    let bits = sb.log_cluster_size.saturating_sub(sb.log_block_size);
    ((sb.blocks_count >> bits) / 1024).clamp(16, 4096) << bits
}

impl<'a> Tx<'a> {
    /// Marks the operation as ended consistently: done, or failed after
    /// undoing its changes. A `Tx` that changed metadata and drops without
    /// this aborts the journal (see the `Drop` impl).
    pub fn settle(&self) {
        self.settled.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Settles only if the operation's error `r` is one it undoes or
    /// stops cleanly at (ENOSPC part-way: what was done stays, as on
    /// Linux); any other error leaves the `Tx` unsettled, so its drop
    /// aborts the journal.
    pub fn settle_unless_broken(&self, err: Option<&Error>) {
        let ok = matches!(err, None | Some(Error::NoSpace(_)) | Some(Error::QuotaExceeded(_)));
        self.settled.store(ok, std::sync::atomic::Ordering::Relaxed);
    }

    /// Transaction id (0 without a journal).
    pub fn tid(&self) -> u64 {
        self.handle.tid()
    }

    /// Read-modify-write of a metadata block (see [`Handle::modify`]).
    pub fn modify<R>(&self, block: u64, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
        self.check_block(block)?;
        self.handle.modify(block, f)
    }

    /// Read-modify-write in two steps, in place when the running
    /// transaction alone holds the block (see [`Handle::modify_planned`]).
    pub fn modify_planned<P, R>(
        &self,
        block: u64,
        plan: impl FnOnce(&[u8]) -> Result<P>,
        apply: impl FnOnce(P, &mut [u8]) -> R,
    ) -> Result<R> {
        self.check_block(block)?;
        self.handle.modify_planned(block, plan, apply)
    }

    /// Planned read-modify-write that may change nothing and marks the
    /// result verified (see [`Handle::modify_planned_if`]).
    pub fn modify_planned_if<P, R>(
        &self,
        block: u64,
        check: Option<(crate::cache::Check, u32)>,
        plan: impl FnOnce(&[u8]) -> Result<Option<P>>,
        apply: impl FnOnce(P, &mut [u8]) -> R,
    ) -> Result<Option<R>> {
        self.check_block(block)?;
        self.handle.modify_planned_if(block, check, plan, apply)
    }

    /// Initialises a newly allocated metadata block (see [`Handle::init`]).
    pub fn init(&self, block: u64, f: impl FnOnce(&mut [u8]) -> Result<()>) -> Result<()> {
        self.check_block(block)?;
        self.handle.init(block, f)
    }

    /// Sets the whole of metadata block `block` and returns the new
    /// version (see [`Handle::rewrite`]).
    pub fn rewrite(
        &self,
        block: u64,
        f: impl FnOnce(&mut [u8]) -> Result<()>,
    ) -> Result<std::sync::Arc<crate::cache::Buffer>> {
        self.check_block(block)?;
        self.handle.rewrite(block, f)
    }

    fn check_block(&self, block: u64) -> Result<()> {
        if !self.vol.valid_range(block, 1) && block != 0 {
            // The number came from the image (an extent or xattr pointer).
            let kind = crate::error::CorruptKind::OutsideFilesystem { what: "metadata write", block, len: 1 };
            return Err(Error::corruption(crate::error::Structure::Extent, crate::error::Location::Block(block), kind));
        }
        Ok(())
    }

    /// Allocates blocks through mballoc and journals the bitmap and
    /// descriptor of the group they came from.
    ///
    /// Writeback allocates the blocks reserved for it and may use the
    /// pool kept for its metadata ([`writeback_reserve`], the kernel's
    /// s_resv_clusters); any other allocation leaves the reservations
    /// and, while there are any, that pool alone, and claims its blocks
    /// atomically with the reservations (see [`DelallocSpace::claim`]).
    pub fn alloc_blocks(&self, req: &AllocRequest) -> Result<Allocation> {
        let mut req = *req;
        // Writeback allocates blocks reserved when the data was written,
        // root's reserve included if the writer could use it.
        let root = if self.use_reserved || self.writeback { 0 } else { self.vol.sb.r_blocks_count };
        let acct = self.delalloc.filter(|_| !self.writeback);
        let pool = writeback_reserve(&self.vol.sb);
        let committed = acct.map_or(0, |a| {
            // The pool matters only while some data waits for writeback.
            a.committed_blocks() + if a.reserved_blocks() > 0 { pool } else { 0 }
        });
        let mut _claim = None;
        if committed + root > 0 {
            let free = self.alloc.free_blocks();
            // With bigalloc whole clusters are taken, from the request's
            // offset in its cluster on (see Allocator::allocate).
            let r = self.alloc.cluster_ratio();
            let off = req.logical.get() % r;
            let taken = |n: u64| (off + n).div_ceil(r) * r;
            let want = taken(u64::from(req.min_len.max(1)));
            let avail = free.saturating_sub(committed + root);
            let full = || Error::NoSpace("the free blocks left are reserved (for root or for buffered data)".into());
            if avail < want {
                return Err(full());
            }
            // Nor may a long request eat into them.
            let fits = (avail / r * r).saturating_sub(off);
            req.len = req.len.min(u32::try_from(fits).unwrap_or(u32::MAX));
            if let Some(acct) = acct {
                let n = taken(u64::from(req.len));
                _claim = Some(acct.claim(n, root, pool, || self.alloc.free_blocks()).ok_or_else(full)?);
            }
        }
        let a = self.alloc.allocate(&req)?;
        if let Err(e) = self.journal_block_group(self.block_group_of(a.start), None) {
            // Give the blocks back rather than leak them in memory.
            let _ = self.alloc.free(a.start, u64::from(a.len), None);
            return Err(e);
        }
        Ok(a)
    }

    /// Allocates one metadata block (extent node, xattr block) for inode
    /// `ino` near `goal`.
    pub fn alloc_metadata_block(&self, ino: u32, goal: PhysicalBlock) -> Result<PhysicalBlock> {
        let a = self.alloc_blocks(&AllocRequest {
            inode: ino,
            goal,
            len: 1,
            min_len: 1,
            flags: crate::alloc::flags::METADATA,
            ..Default::default()
        })?;
        // With bigalloc the block owns its whole cluster (the kernel's
        // metadata blocks do too): only clusters past the first go back.
        let ratio = self.alloc.cluster_ratio();
        if u64::from(a.len) > ratio {
            self.free_blocks(a.start + ratio, u64::from(a.len) - ratio, FreeKind::Metadata)?;
        }
        Ok(a.start)
    }

    /// The first block of inode `ino`'s group: where its blocks go when
    /// nothing better is known (the kernel's ext4_inode_to_goal_block).
    pub fn inode_goal(&self, ino: u32) -> PhysicalBlock {
        let ipg = self.vol.sb.inodes_per_group.max(1);
        PhysicalBlock(self.vol.group_first_block(u64::from(ino.saturating_sub(1) / ipg)))
    }

    /// Frees `start..start+len`. Blocks stay reserved in the allocator
    /// until this transaction commits; metadata blocks are revoked.
    pub fn free_blocks(&self, start: PhysicalBlock, len: u64, kind: FreeKind) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let tid = self.handle.is_journaled().then(|| self.tid());
        self.alloc.free(start, len, tid)?;
        if kind == FreeKind::Metadata {
            for i in 0..len {
                self.handle.forget(start + i);
            }
        }
        let (g0, g1) = (self.block_group_of(start), self.block_group_of(start + (len - 1)));
        for g in g0..=g1 {
            if !self.defer_block_group(g) {
                self.journal_block_group(g, None)?;
            }
        }
        Ok(())
    }

    /// The block group of `block`.
    fn block_group_of(&self, block: PhysicalBlock) -> u32 {
        let sb = &self.vol.sb;
        ((block.get() - u64::from(sb.first_data_block)) / u64::from(sb.blocks_per_group)) as u32
    }

    /// Puts off the journaling of block group `g` to the end of the batch
    /// this handle is in, if it is in one (true), charging its credits
    /// ahead the first time.
    fn defer_block_group(&self, g: u32) -> bool {
        let mut d = self.deferred.lock();
        let Some(d) = d.as_mut() else { return false };
        if !d.blocks.contains(&g) {
            d.blocks.push(g);
            self.handle.charge_ahead(DEFERRED_GROUP_CREDITS);
        }
        true
    }

    /// Runs `f` with the journaling of the block and inode groups it
    /// frees from put off to its end, then journals them, each
    /// descriptor block that holds both a block group's and an inode
    /// group's descriptor changed once for both (the kernel's deletion
    /// also modifies the group descriptor block once per handle, as its
    /// buffer is simply dirtied again). What `f` frees is in the
    /// allocators at once as before, and the groups are journaled in this
    /// same handle whatever `f` returns: the bitmaps and descriptors are
    /// in the transaction before it can commit. A batch inside a batch
    /// is part of the outer one.
    pub fn batch_groups<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        {
            let mut d = self.deferred.lock();
            if d.is_some() {
                drop(d);
                return f();
            }
            *d = Some(DeferredGroups::default());
        }
        let r = f();
        let d = self.deferred.lock().take().unwrap_or_default();
        let j = self.journal_deferred(d);
        let v = r?;
        j.map(|()| v)
    }

    /// Journals what a batch put off (see [`Tx::batch_groups`]).
    fn journal_deferred(&self, d: DeferredGroups) -> Result<()> {
        let DeferredGroups { mut blocks, inodes } = d;
        self.handle.uncharge(DEFERRED_GROUP_CREDITS * (blocks.len() + inodes.len()));
        let mut first_err = None;
        for (g, seq) in inodes {
            let desc = self.desc_location(g).0;
            let k = blocks.iter().position(|&b| self.desc_location(b).0 == desc);
            let with = k.map(|k| blocks.swap_remove(k));
            if let Err(e) = self.journal_inode_group_of(g, seq, with) {
                first_err.get_or_insert(e);
            }
        }
        for g in blocks {
            if let Err(e) = self.journal_block_group(g, None) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Marks `start..start+len` in use wherever it is free, through the
    /// allocator (fast-commit replay); returns the runs newly marked.
    pub fn claim_blocks(&self, start: PhysicalBlock, len: u64) -> Result<Vec<(PhysicalBlock, u64)>> {
        let runs = self.alloc.claim(start, len)?;
        for &(s, _) in &runs {
            self.journal_block_group(self.block_group_of(s), None)?;
        }
        Ok(runs)
    }

    /// Marks inode `ino` in use if it is free (fast-commit replay); true
    /// if it was free.
    pub fn claim_inode(&self, ino: u32, is_dir: bool) -> Result<bool> {
        let newly = self.ialloc.claim(ino, is_dir)?;
        if newly {
            self.journal_inode_group(ino, u64::MAX)?;
        }
        Ok(newly)
    }

    /// Copies the allocator's view of block group `g`'s bitmap into the
    /// journal and updates the group's descriptor, under the group's lock
    /// (so that no other thread's copy of an older state lands after it).
    /// `also` is another group's descriptor change (group and edit), in
    /// the same descriptor block, made in the same copy of that block.
    fn journal_block_group(&self, g: u32, also: Option<OtherDesc<'_>>) -> Result<()> {
        let sb = &self.vol.sb;
        let gd0 = self.vol.groups[g as usize];
        self.alloc.with_group_bitmap(g, |bitmap, free| {
            self.handle.overwrite_padded(gd0.block_bitmap, bitmap, 0)?;
            let csum = block_bitmap_checksum(sb, bitmap);
            let mut mine = |gd: &mut GroupDesc| {
                gd.free_blocks_count = free;
                gd.flags &= !BG_BLOCK_UNINIT;
                gd.block_bitmap_csum = csum;
            };
            match also {
                Some((g2, f2)) => self.modify_descs(g, &mut mine, Some((g2, f2))),
                None => self.modify_descs(g, &mut mine, None),
            }
        })?
    }

    /// Where group `g`'s descriptor is: its block and byte offset.
    fn desc_location(&self, g: u32) -> (u64, usize) {
        let ds = usize::from(self.vol.sb.desc_size);
        let per_block = self.vol.block_size / ds;
        (self.vol.desc_block_location(u64::from(g) / per_block as u64), (g as usize % per_block) * ds)
    }

    /// Read-modify-write of group `g`'s descriptor (checksum updated).
    pub fn modify_desc(&self, g: u32, mut f: impl FnMut(&mut GroupDesc)) -> Result<()> {
        self.modify_descs(g, &mut f, None)
    }

    /// [`Tx::modify_desc`] of group `g`, and of `also`'s group in the same
    /// copy of the block (an error if its descriptor is in another block).
    fn modify_descs(&self, g: u32, f: &mut dyn FnMut(&mut GroupDesc), also: Option<OtherDesc<'_>>) -> Result<()> {
        let sb = &self.vol.sb;
        let ds = usize::from(sb.desc_size);
        let (blk, off) = self.desc_location(g);
        let also = match also {
            Some((g2, f2)) => {
                let (blk2, off2) = self.desc_location(g2);
                if blk2 != blk {
                    return Err(Error::Invalid(format!("groups {g} and {g2}: descriptors in different blocks")));
                }
                Some((g2, off2, f2))
            }
            None => None,
        };
        self.alloc.note_desc_write();
        self.handle.modify_planned(
            blk,
            |raw| {
                let mut gd = GroupDesc::parse(sb, g, &raw[off..off + ds], blk)?;
                f(&mut gd);
                // Both changes are planned on the block as it is before
                // either: the same group's two changes (a deletion
                // freeing blocks and an inode of one group) go into one
                // descriptor, or encoding the second would write back the
                // group as it was before the first.
                let second = match also {
                    Some((g2, _, f2)) if g2 == g => {
                        f2(&mut gd);
                        None
                    }
                    Some((g2, off2, f2)) => {
                        let mut gd2 = GroupDesc::parse(sb, g2, &raw[off2..off2 + ds], blk)?;
                        f2(&mut gd2);
                        Some((g2, off2, gd2))
                    }
                    None => None,
                };
                Ok((gd, second))
            },
            |(gd, second), raw| {
                gd.encode(sb, g, &mut raw[off..off + ds]);
                if let Some((g2, off2, gd2)) = second {
                    gd2.encode(sb, g2, &mut raw[off2..off2 + ds]);
                }
            },
        )
    }

    /// Refuses (EDQUOT) `space` more bytes and `inodes` more inodes for
    /// owner `ids` (uid, gid, project) past a quota limit (see
    /// [`QuotaAccount::check`]); nothing without quotas, for
    /// writeback (its blocks were accepted when the data was written) or
    /// when the root reserve may be used (the stand-in for
    /// CAP_SYS_RESOURCE, which ignores limits).
    pub fn check_quota(&self, ids: [u32; 3], space: u64, inodes: u64) -> Result<()> {
        match self.quota {
            Some(q) if !self.writeback && !self.use_reserved => q.check(ids, space, inodes),
            _ => Ok(()),
        }
    }

    /// [`Tx::check_quota`] for inode `inode` moving to the owner `ids`
    /// (chown, chgrp, project change): its space and one inode, for each
    /// quota type whose id changes.
    pub fn check_quota_move(&self, inode: &Inode, ids: [u32; 3]) -> Result<()> {
        let Some(q) = self.quota.filter(|q| q.tracks(inode.ino) && inode.links_count > 0) else { return Ok(()) };
        if self.writeback || self.use_reserved {
            return Ok(());
        }
        let old = [inode.uid, inode.gid, inode.projid];
        let inodes = 1 + q.ea_inode_refs(self.vol, inode)?;
        q.check_moved(old, ids, inode.blocks_512.saturating_mul(512), inodes)
    }

    /// Bytes inode `inode` may still take before a hard space limit of
    /// its owners (`u64::MAX` when nothing limits it here).
    pub fn quota_room(&self, inode: &Inode) -> u64 {
        match self.quota {
            Some(q) if !self.writeback && !self.use_reserved && q.tracks(inode.ino) => {
                q.space_room([inode.uid, inode.gid, inode.projid])
            }
            _ => u64::MAX,
        }
    }

    /// Charges the owner of `inode` `delta` inodes for EA inode
    /// references its xattr entries gained (or, negative, lost): each
    /// value kept in an EA inode counts as one inode of its owner (see
    /// [`QuotaAccount::ea_inode_refs`]).
    pub fn charge_ea_refs(&self, inode: &Inode, delta: i64) -> Result<()> {
        match self.quota {
            Some(q) if q.tracks(inode.ino) && delta != 0 => {
                q.charge_inodes(self, [inode.uid, inode.gid, inode.projid], delta)
            }
            _ => Ok(()),
        }
    }

    /// [`Tx::check_quota`] for a new EA inode reference of `inode`: one
    /// more inode and `space` more bytes for its owner.
    pub fn check_quota_ea(&self, inode: &Inode, space: u64) -> Result<()> {
        match self.quota {
            Some(q) if q.tracks(inode.ino) => self.check_quota([inode.uid, inode.gid, inode.projid], space, 1),
            _ => Ok(()),
        }
    }

    /// [`Tx::check_quota`] for `space` more bytes of inode `inode`.
    pub fn check_quota_space(&self, inode: &Inode, space: u64) -> Result<()> {
        match self.quota {
            Some(q) if q.tracks(inode.ino) => self.check_quota([inode.uid, inode.gid, inode.projid], space, 0),
            _ => Ok(()),
        }
    }
}
