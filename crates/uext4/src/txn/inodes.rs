//! The inode side of a [`Tx`]: allocating and freeing inode numbers
//! (their bitmap, descriptor and the inode-table zeroing journaled with
//! them) and writing inode records into their table slots.

use super::{Tx, DEFERRED_GROUP_CREDITS};
use crate::error::{Error, Result};
use crate::format::group_desc::{GroupDesc, BG_INODE_UNINIT, BG_INODE_ZEROED};
use crate::format::inode::Inode;

/// Most inode-table blocks an inode allocation zeroes (see
/// [`Tx::zero_free_inode_slots`]).
const MAX_ZEROED_ITABLE_BLOCKS: usize = 4;

impl Tx<'_> {
    /// Allocates an inode (Orlov-like spreading for directories, near the
    /// parent for other files) and journals its bitmap and descriptor.
    ///
    /// A slot whose bit was clear but whose record is a live inode (links
    /// and no deletion time: the bitmap disagrees with the inode table)
    /// is not used: its group is marked corrupt
    /// ([`InodeAllocator::mark_corrupt`]) and another slot is taken, so
    /// that no new file is written over an existing one.
    pub fn alloc_inode(&self, parent: u32, is_dir: bool) -> Result<u32> {
        let (ino, seq) = loop {
            let (ino, seq) = self.ialloc.allocate_seq(self.alloc, parent, is_dir)?;
            // The bit is ours now (set under the group's lock), so no other
            // thread hands this slot out while its record is read, without
            // any lock held across the read.
            match self.slot_is_live(ino) {
                Ok(false) => break (ino, seq),
                Ok(true) => {
                    let g = (ino - 1) / self.vol.sb.inodes_per_group;
                    let why = Error::corruption(
                        crate::error::Structure::Bitmap,
                        crate::error::Location::Inode(ino),
                        crate::error::CorruptKind::Conflict {
                            a: "a clear inode bitmap bit",
                            b: "a live inode (links, no deletion time) in the inode table",
                        },
                    );
                    self.ialloc.mark_corrupt(g, why);
                }
                Err(e) => {
                    let _ = self.ialloc.release(ino, is_dir);
                    return Err(e);
                }
            }
        };
        if let Err(e) = self.journal_inode_group(ino, seq) {
            let _ = self.ialloc.release(ino, is_dir);
            return Err(e);
        }
        if self.quota.is_some() {
            self.new_inodes.lock().push(ino);
        }
        Ok(ino)
    }

    /// True if the inode-table record of `ino`, whose bitmap bit was
    /// clear, is a live inode: links and no deletion time (a freed inode
    /// keeps its record with no links, or a dtime). Only slots the table
    /// is known to hold records for are read: below the group's
    /// itable_unused mark as opened (with uninit_bg or metadata_csum),
    /// or anywhere in a zeroed table; a slot above the mark may hold
    /// whatever the disk had (lazy init), and is zeroed when the mark
    /// rises over it.
    fn slot_is_live(&self, ino: u32) -> Result<bool> {
        let sb = &self.vol.sb;
        let ipg = sb.inodes_per_group;
        let (g, idx) = ((ino - 1) / ipg, (ino - 1) % ipg);
        let gd = &self.vol.groups[g as usize];
        if gd.flags & BG_INODE_UNINIT != 0 {
            return Ok(false);
        }
        let marked = sb.has_metadata_csum() || sb.has_gdt_csum();
        if marked && gd.flags & BG_INODE_ZEROED == 0 && idx >= ipg - gd.itable_unused.min(ipg) {
            return Ok(false);
        }
        let (block, off) = self.inode_slot(ino)?;
        let buf = self.vol.block(block)?;
        let raw = buf.data();
        let (Some(links), Some(dtime)) = (raw.get(off + 0x1A..off + 0x1C), raw.get(off + 0x14..off + 0x18)) else {
            return Ok(false);
        };
        Ok(links != [0, 0] && dtime == [0; 4])
    }

    /// Frees inode `ino` in its bitmap and descriptor, and gives back
    /// what its record still charges to quota (see [`QuotaAccount`]: an
    /// inode charges from its allocation to here, links or not).
    pub fn free_inode(&self, ino: u32, is_dir: bool) -> Result<()> {
        // Its preallocated blocks would otherwise stay reserved for a
        // file that no longer exists (the kernel discards them when the
        // inode is evicted).
        self.alloc.discard_inode_prealloc(ino);
        if let Some(q) = self.quota.filter(|q| q.tracks(ino)) {
            let (block, off) = self.inode_slot(ino)?;
            let isz = usize::from(self.vol.sb.inode_size);
            let buf = self.vol.block(block)?;
            let charge = buf.data().get(off..off + isz).and_then(|raw| q.charge_of(ino, raw));
            drop(buf);
            q.transfer(self, charge, None)?;
        }
        let seq = self.ialloc.release(ino, is_dir)?;
        let g = (ino - 1) / self.vol.sb.inodes_per_group;
        if let Some(d) = self.deferred.lock().as_mut() {
            d.inodes.push((g, seq));
            self.handle.charge_ahead(DEFERRED_GROUP_CREDITS);
            return Ok(());
        }
        self.journal_inode_group(ino, seq)
    }

    /// Journals group `ino`'s inode bitmap, its descriptor (free count,
    /// used directories, bitmap checksum, itable_unused) and any inode
    /// slots newly brought below the itable_unused mark, from one copy of
    /// the group's state, under the group's journaling lock
    /// ([`InodeAllocator::journal_group`]): the bitmap and the descriptor
    /// always come from the same state, the mark covers every slot in use
    /// in it, and no slot allocated after the copy can be zeroed (its
    /// allocator journals, under the same lock, before writing it). When
    /// a copy journaled in this transaction by another thread already
    /// holds this change (number `seq` of the group), nothing is
    /// journaled again.
    pub(super) fn journal_inode_group(&self, ino: u32, seq: u64) -> Result<()> {
        self.journal_inode_group_of((ino - 1) / self.vol.sb.inodes_per_group, seq, None)
    }

    /// [`Tx::journal_inode_group`] of group `g`; with `blocks`, block
    /// group `blocks` (whose descriptor is in the same block) is journaled
    /// too, both descriptors in one change of their block. The block
    /// group's lock is taken inside the inode group's journaling lock
    /// (the order of `crate::locks`), after its state was copied.
    pub(super) fn journal_inode_group_of(&self, g: u32, seq: u64, blocks: Option<u32>) -> Result<()> {
        let sb = &self.vol.sb;
        let ipg = sb.inodes_per_group;
        let gd0 = self.vol.groups[g as usize];
        if let Some(bg) = blocks {
            // Loaded now, so that no group load (an outer lock) is needed
            // inside the journaling lock; it stays loaded, as the free this
            // handle made in it waits for this transaction's commit.
            self.alloc.ensure_loaded(bg)?;
        }
        let mut blocks_done = false;
        self.ialloc.journal_group(g, self.handle.tid(), seq, |st| {
            let bitmap = &st.bitmap[..];
            // Bits past inodes_per_group are set, as the kernel pads them.
            self.handle.overwrite_padded(gd0.inode_bitmap, bitmap, 0xFF)?;
            let csum = crate::alloc::inodes::bitmap_checksum(sb, bitmap);
            let mut zero = None;
            let mut edit = |gd: &mut GroupDesc| {
                gd.free_inodes_count = st.free;
                gd.used_dirs_count = st.dirs;
                // A zeroed table (mkfs or lazy init did it) holds no stale
                // records; the kernel never zeroes slots when allocating.
                let zeroed = gd.flags & BG_INODE_ZEROED != 0;
                let mut zero_from = None;
                if gd.flags & BG_INODE_UNINIT != 0 {
                    gd.flags &= !BG_INODE_UNINIT;
                    if !zeroed {
                        zero_from = Some(0);
                    }
                    gd.itable_unused = ipg;
                }
                gd.inode_bitmap_csum = csum;
                if sb.has_metadata_csum() || sb.has_gdt_csum() {
                    // The mark covers every slot in use in this state
                    // (those of other threads' allocations it holds too);
                    // it is never lowered.
                    let used_below = ipg - gd.itable_unused.min(ipg);
                    if st.high > used_below {
                        if !zeroed {
                            zero_from.get_or_insert(used_below);
                        }
                        gd.itable_unused = ipg - st.high;
                    }
                }
                zero = zero_from.map(|from| (from, st.high));
            };
            match blocks {
                Some(bg) => {
                    blocks_done = true;
                    self.journal_block_group(bg, Some((g, &mut edit)))?;
                }
                None => self.modify_desc(g, &mut edit)?,
            }
            // Free inode slots newly brought below the high-water mark must
            // be zero (the table may never have been initialised). Slots
            // whose bit is set are never touched: either another thread
            // allocated them and has not journaled its group yet (it writes
            // its whole record after this), or the mark was wrong and they
            // are live inodes that zeroing would destroy.
            if let Some((from, to)) = zero {
                self.zero_free_inode_slots(g, bitmap, from, to)?;
            }
            Ok(())
        })?;
        match blocks {
            // Another thread's copy of the inode group held this change
            // already: the block group is journaled on its own.
            Some(bg) if !blocks_done => self.journal_block_group(bg, None),
            _ => Ok(()),
        }
    }

    /// Zeroes the slots of `[from, to_excl)` that `bitmap` says are free.
    /// Allocation takes the lowest free slot, so such slots are the rare
    /// leftovers of allocations given back (a few at most, within the
    /// slack of an allocating handle's credits); more means the group's
    /// itable_unused was corrupt.
    fn zero_free_inode_slots(&self, g: u32, bitmap: &[u8], from: u32, to_excl: u32) -> Result<()> {
        let isz = u64::from(self.vol.sb.inode_size);
        let bs = self.vol.block_size as u64;
        let table = self.vol.groups[g as usize].inode_table;
        let is_free = |i: u32| bitmap.get((i / 8) as usize).is_some_and(|b| b & (1 << (i % 8)) == 0);
        // Group the free slots by inode-table block: (block, byte ranges).
        let mut blocks: Vec<(u64, Vec<(usize, usize)>)> = Vec::new();
        for i in (from..to_excl).filter(|&i| is_free(i)) {
            let byte = u64::from(i) * isz;
            let blk = table + byte / bs;
            let start = (byte % bs) as usize;
            let range = (start, start + isz as usize);
            match blocks.last_mut() {
                Some((b, ranges)) if *b == blk => ranges.push(range),
                _ => blocks.push((blk, vec![range])),
            }
        }
        if blocks.len() > MAX_ZEROED_ITABLE_BLOCKS {
            return Err(Error::corruption(
                crate::error::Structure::GroupDesc,
                crate::error::Location::Group(g),
                crate::error::CorruptKind::TooMany {
                    what: "free inode-table blocks below the new bg_itable_unused mark",
                    limit: MAX_ZEROED_ITABLE_BLOCKS as u64,
                },
            ));
        }
        for (blk, ranges) in blocks {
            self.handle.modify(blk, |b| {
                for (start, end) in &ranges {
                    b[*start..*end].fill(0);
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Writes `inode` into its inode-table slot (checksum computed).
    ///
    /// For an inode with no links, `i_dtime` is the orphan-list link that
    /// other threads may change (removing the next orphan); the slot's
    /// current value is kept. [`Tx::write_inode_dtime`] sets it instead.
    pub fn write_inode(&self, inode: &mut Inode) -> Result<()> {
        self.write_inode_with(inode, inode.links_count != 0)
    }

    /// Writes `inode` including its `i_dtime` as given (deletion time or
    /// orphan-list link).
    pub fn write_inode_dtime(&self, inode: &mut Inode) -> Result<()> {
        self.write_inode_with(inode, true)
    }

    /// Sets only the `i_dtime` of inode `ino` (an orphan-list link).
    pub fn set_inode_dtime(&self, ino: u32, dtime: u32) -> Result<()> {
        self.modify_inode(ino, |i| {
            i.dtime = dtime;
            Ok(())
        })
    }

    /// Read-modify-write of inode `ino` in its slot, all under the slot
    /// block's lock: `f` sees the inode as it is now and decides on it
    /// (e.g. an EA inode's reference count, which other inodes' handles
    /// change too); the inode is written back unless `f` fails. Planned
    /// (parsed, decided and encoded before the block is touched): in place
    /// when the running transaction alone holds the block, as for the
    /// orphan links every unlink and deletion writes.
    pub fn modify_inode<R>(&self, ino: u32, f: impl FnOnce(&mut Inode) -> Result<R>) -> Result<R> {
        let (block, off) = self.inode_slot(ino)?;
        let sb = &self.vol.sb;
        let isz = usize::from(sb.inode_size);
        self.handle.modify_planned(
            block,
            |b| {
                let mut cur = Inode::parse(sb, ino, &b[off..off + isz], block)?;
                let r = f(&mut cur)?;
                cur.encode(sb)?;
                Ok((cur, r))
            },
            |(cur, r), b| {
                b[off..off + isz].copy_from_slice(&cur.raw[..isz]);
                r
            },
        )
    }

    fn inode_slot(&self, ino: u32) -> Result<(u64, usize)> {
        let sb = &self.vol.sb;
        if ino == 0 || ino > sb.inodes_count {
            return Err(Error::BadInode(u64::from(ino)));
        }
        let idx = ino - 1;
        let g = (idx / sb.inodes_per_group) as usize;
        let within = u64::from(idx % sb.inodes_per_group) * u64::from(sb.inode_size);
        let bs = self.vol.block_size as u64;
        Ok((self.vol.groups[g].inode_table + within / bs, (within % bs) as usize))
    }

    fn write_inode_with(&self, inode: &mut Inode, own_dtime: bool) -> Result<()> {
        let sb = &self.vol.sb;
        let (block, off) = self.inode_slot(inode.ino)?;
        let isz = usize::from(sb.inode_size);
        let quota = self.quota.filter(|q| q.tracks(inode.ino));
        // What the record charged before this write (see QuotaAccount).
        let mut old = None;
        if own_dtime {
            let ino = inode.ino;
            let raw = inode.encode(sb)?;
            self.handle.modify_planned(
                block,
                |b| {
                    if let Some(q) = quota {
                        old = q.charge_of(ino, &b[off..off + isz]);
                    }
                    Ok(())
                },
                |(), b| b[off..off + raw.len()].copy_from_slice(raw),
            )?;
        } else {
            let (inode, old) = (&mut *inode, &mut old);
            self.handle.modify_planned(
                block,
                move |b| {
                    // The slot's dtime wins (see write_inode). A never-used
                    // slot may not parse; its dtime is then ours.
                    let slot = &b[off..off + isz];
                    if let Some(q) = quota {
                        *old = q.charge_of(inode.ino, slot);
                    }
                    inode.dtime = u32::from_le_bytes([slot[0x14], slot[0x15], slot[0x16], slot[0x17]]);
                    inode.encode(sb)
                },
                |raw, b| b[off..off + isz].copy_from_slice(raw),
            )?;
        }
        if let Some(q) = quota {
            let mut fresh = self.new_inodes.lock();
            if let Some(i) = fresh.iter().position(|&n| n == inode.ino) {
                fresh.swap_remove(i);
                old = None;
            }
            drop(fresh);
            let mut new = q.charge_of(inode.ino, &inode.raw);
            if let (Some(o), Some(n)) = (old.as_mut(), new.as_mut()) {
                if o.ids != n.ids {
                    // A new owner takes the inodes of its EA inode
                    // references too (dquot_transfer of ext4_get_inode_usage).
                    let refs = q.ea_inode_refs(self.vol, inode)?;
                    o.inodes += refs;
                    n.inodes += refs;
                }
            }
            q.transfer(self, old, new)?;
        }
        Ok(())
    }
}
