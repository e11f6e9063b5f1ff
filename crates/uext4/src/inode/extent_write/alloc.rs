//! Mapping new blocks into an extent file: allocation near the goal
//! (block-mapped files go to `indirect_write`), implied clusters with
//! bigalloc, and inserting already-owned runs (fast-commit replay).

// The tree editor's own types and helpers: this module is its
// allocating part.
use super::*;

/// Inserts the already allocated run `(lblk, pblk, len)` (which must lie
/// in a hole) into the tree.
fn insert_run(
    ctx: &Ctx,
    inode: &mut Inode,
    lblk: FileBlock,
    pblk: PhysicalBlock,
    len: u64,
    unwritten: bool,
) -> Result<()> {
    let mut left = (lblk, pblk, len);
    while left.2 > 0 {
        let mut path = ctx.find_path(inode, left.0)?;
        let hi = leaf_end(&path);
        let n = left.2.min(hi.saturating_sub(left.0)).max(1).min(left.2);
        let leaf = path.len() - 1;
        let Node::Leaf(v) = &path[leaf].node else {
            return Err(Error::corruption(
                Structure::Extent,
                Location::inode_block(inode.ino, path[leaf].block.get()),
                CorruptKind::WrongType { expected: "extent leaf", found: u64::from(path[leaf].depth) },
            ));
        };
        if v.iter().any(|e| FileBlock::from(e.block) < left.0 + n && ext_end(e) > left.0) {
            return Err(Error::corruption(
                Structure::Extent,
                Location::inode_block(inode.ino, path[leaf].block.get()),
                CorruptKind::Overlap { at: left.0.get() },
            ));
        }
        let (out, _) = edit_leaf(v, FileBlock(0), FileBlock(0), None, &[(left.0, left.1, n, unwritten)])?;
        path[leaf].node = Node::Leaf(out);
        ctx.settle(inode, &mut path, leaf, left.1)?;
        left = (left.0 + n, left.1 + n, left.2 - n);
    }
    Ok(())
}

/// Maps the run `(lblk, pblk, len)` whose blocks the caller owns already
/// (fast-commit replay: blocks the kernel allocated) into a hole of the
/// tree, as unwritten when `unwritten`; the inode's block count grows by
/// `len`. Overlapping a mapped block is corruption.
pub fn map_run(
    tx: &Tx,
    inode: &mut Inode,
    lblk: FileBlock,
    pblk: PhysicalBlock,
    len: u64,
    unwritten: bool,
) -> Result<()> {
    let ctx = Ctx::new(tx, inode)?;
    if lblk.checked_add(len).is_none_or(|e| e > MAX_LBLK) {
        return Err(Error::FileTooBig(format!("inode {}: blocks {lblk}+{len} beyond the largest file", inode.ino)));
    }
    insert_run(&ctx, inode, lblk, pblk, len, unwritten)?;
    inode.blocks_512 += len * (ctx.bs as u64 / 512);
    Ok(())
}

/// Physical block that would continue the extent mapping `lblk - 1`, or a
/// block in the inode's group: where new blocks for `lblk` should go.
fn goal_for(ctx: &Ctx, inode: &Inode, lblk: FileBlock) -> Result<PhysicalBlock> {
    let path = ctx.find_path(inode, lblk)?;
    if let Some(Node::Leaf(v)) = path.last().map(|l| &l.node) {
        let pos = v.partition_point(|e| FileBlock::from(e.block) <= lblk);
        if pos > 0 {
            let e = &v[pos - 1];
            return Ok(e.start + (lblk - FileBlock::from(e.block)).min(u64::from(e.len)));
        }
        if let Some(e) = v.first() {
            return Ok(e.start.saturating_sub(FileBlock::from(e.block).saturating_sub(lblk)));
        }
    }
    Ok(ctx.tx.inode_goal(inode.ino))
}

/// Credits one allocation of a run and its insertion into the tree of
/// `inode` can take: the tree's change (see [`tree_change_credits`]) and
/// the data's bitmap and descriptor.
pub fn alloc_step_credits(inode: &Inode) -> usize {
    if !inode.uses_extents() {
        return crate::inode::indirect_write::alloc_step_credits();
    }
    let depth = parse_node(&inode.block, 0).map_or(MAX_DEPTH, |n| n.header().depth);
    tree_change_credits(depth) + 2
}

/// Allocates blocks for every hole in `[lblk, lblk + n)` (mapped parts are
/// left alone) and maps them, as unwritten extents when `unwritten`.
/// `flags` are the allocator hints; `size_hint` the size the file is
/// growing to. Returns the new runs in logical order. On an error (e.g.
/// ENOSPC part-way) the runs mapped so far stay mapped.
///
/// Bounded by the handle: after the first allocation, it stops when the
/// handle's credits left might not cover one more
/// ([`alloc_step_credits`]); the runs returned then cover only a prefix
/// of the holes, and the caller goes on in a new handle (a fragmented
/// free space can take one allocation per block).
pub fn allocate_range(
    tx: &Tx,
    inode: &mut Inode,
    lblk: FileBlock,
    n: u64,
    unwritten: bool,
    flags: u32,
    size_hint: u64,
) -> Result<Vec<Run>> {
    if !inode.uses_extents() {
        if unwritten {
            return Err(Error::Unsupported(format!("inode {}: unwritten blocks in a block-mapped file", inode.ino)));
        }
        return crate::inode::indirect_write::allocate_range(tx, inode, lblk, n, flags, size_hint);
    }
    let ctx = Ctx::new(tx, inode)?;
    // The last block an extent file may have is 2^32 - 2 (ext4_max_size):
    // the kernel refuses an inode that maps 2^32 - 1.
    let end = lblk.checked_add(n).filter(|&e| e < MAX_LBLK).ok_or_else(|| {
        Error::FileTooBig(format!("inode {}: blocks {lblk}+{n} beyond the largest extent-mapped file", inode.ino))
    })?;
    let mut runs = Vec::new();
    let mut cur = lblk;
    while cur < end {
        let m = crate::inode::map_block(tx.vol, inode, cur)?;
        let len = m.len.min(end - cur);
        if m.kind != crate::inode::MapKind::Hole {
            cur += len;
            continue;
        }
        let mut hole = (cur, len);
        let r = ctx.ratio;
        while hole.1 > 0 {
            if !runs.is_empty() && tx.handle.credits_left() < alloc_step_credits(inode) {
                return Ok(runs);
            }
            let mut want = hole.1;
            if r > 1 {
                let lc = hole.0.get() / r;
                if let Some(pc) = mapped_cluster(&ctx, inode, lc)? {
                    // Implied cluster: the file owns it already.
                    let off = hole.0.get() % r;
                    let n = hole.1.min(r - off);
                    insert_run(&ctx, inode, hole.0, pc + off, n, unwritten)?;
                    runs.push((hole.0, pc + off, n));
                    hole = (hole.0 + n, hole.1 - n);
                    continue;
                }
                // A new run stops before a last cluster that is partly
                // mapped already (it is filled as an implied cluster).
                let lc_last = (hole.0.get() + hole.1 - 1) / r;
                if lc_last > lc && mapped_cluster(&ctx, inode, lc_last)?.is_some() {
                    want = lc_last * r - hole.0.get();
                }
            }
            let goal = goal_for(&ctx, inode, hole.0)?;
            // At least one block, or EDQUOT (the kernel's dquot_alloc_block
            // before the allocation; the request may get fewer blocks).
            // (A whole cluster with bigalloc.)
            tx.check_quota_space(inode, ctx.bs as u64 * r)?;
            let want = want.min(u64::from(u32::MAX) / 2);
            let want = want.min(tx.quota_room(inode) / ctx.bs as u64).max(1);
            let a = tx.alloc_blocks(&AllocRequest {
                inode: inode.ino,
                logical: hole.0,
                goal,
                len: want.min(u64::from(u32::MAX) / 2) as u32,
                min_len: 1,
                file_size: size_hint,
                flags,
            })?;
            let got = u64::from(a.len).min(want);
            // Whole clusters past the last one used go back (without
            // bigalloc: every block past `got`).
            let used_end = (a.start.get() + got).div_ceil(r) * r;
            let a_end = a.start.get() + u64::from(a.len);
            if a_end > used_end {
                tx.free_blocks(PhysicalBlock(used_end), a_end - used_end, FreeKind::Data)?;
            }
            if let Err(e) = insert_run(&ctx, inode, hole.0, a.start, got, unwritten) {
                let _ = tx.free_blocks(a.start, got, FreeKind::Data);
                return Err(e);
            }
            inode.blocks_512 += (used_end - a.start.get() / r * r) / r * ctx.unit_sectors();
            runs.push((hole.0, a.start, got));
            hole = (hole.0 + got, hole.1 - got);
        }
        cur += len;
    }
    Ok(runs)
}
