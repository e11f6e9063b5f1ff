//! Collapse and insert range: moving a file's mappings by a number of
//! blocks (the kernel's ext4_ext_shift_extents), one leaf per step so
//! that the tree is consistent after every bounded handle.

// The tree editor's own types and helpers (Ctx, Level, Node, the
// credit rules): this module is its extent-moving part.
use super::*;

/// First logical block the leaf at the end of `path` is responsible for:
/// the key of the entry followed into it on the way down.
fn leaf_start(path: &[Level]) -> FileBlock {
    let mut lo = FileBlock(0);
    for lv in &path[..path.len() - 1] {
        if let Node::Index(v) = &lv.node {
            if let Some(e) = v.get(lv.pos) {
                lo = lo.max(FileBlock::from(e.block));
            }
        }
    }
    lo
}

/// Where an extent shift (collapse or insert range) stands between its
/// bounded steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shift {
    /// The first logical block that moves (the end of a collapsed range,
    /// the offset of an inserted one).
    pub start: FileBlock,
    /// How many blocks the mappings move.
    pub delta: u64,
    /// Towards block 0 (collapse) or away from it (insert).
    pub left: bool,
    /// Progress: moving left, the lowest block not moved yet; moving
    /// right, the end of what is still to move (exclusive).
    pub cursor: FileBlock,
}

impl Shift {
    /// A shift of every mapping at or after `start` by `delta` blocks.
    pub fn new(start: FileBlock, delta: u64, left: bool) -> Shift {
        Shift { start, delta, left, cursor: if left { start } else { MAX_LBLK } }
    }
}

/// Moves the mappings of `shift` (ext4_ext_shift_extents) as far as the
/// handle's credits allow: true when all moved, false when the caller
/// must go on in a new handle. Each step rewrites one leaf with its
/// extents of the range at their new place (the same physical blocks,
/// written or unwritten as they were) and the parents' keys (see
/// `Ctx::settle`), as ext4 shifts a leaf at a time, so the tree is
/// consistent after every step and no block changes owner. Moving left
/// works from the lowest leaf up and moving right from the highest down,
/// so each leaf's new range lies between its neighbours' (already moved
/// or staying) extents. Only a right shift that splits an extent at
/// `start` can overflow a leaf; a split needing a block it cannot get
/// (ENOSPC) leaves the leaf as it was. The caller made room: a collapsed
/// range is unmapped first; moving right refuses (EFBIG) a step that
/// would pass the largest block.
pub fn shift_bounded(tx: &Tx, inode: &mut Inode, shift: &mut Shift) -> Result<bool> {
    let ctx = Ctx::new(tx, inode)?;
    let mut moved_any = false;
    loop {
        let depth = parse_node(&inode.block, 0).map_or(MAX_DEPTH, |n| n.header().depth);
        if tx.handle.credits_left() < tree_change_credits(depth) + FINISH_RESERVE {
            if moved_any {
                return Ok(false);
            }
            return Err(Error::Invalid(format!("inode {}: an extent shift does not fit in a handle", inode.ino)));
        }
        let probe = if shift.left {
            shift.cursor
        } else {
            if shift.cursor <= shift.start {
                return Ok(true);
            }
            FileBlock(shift.cursor.get() - 1)
        };
        let mut path = ctx.find_path(inode, probe)?;
        let leaf = path.len() - 1;
        let Node::Leaf(v) = &path[leaf].node else {
            return Err(Error::corruption(
                Structure::Extent,
                Location::inode_block(inode.ino, path[leaf].block.get()),
                CorruptKind::WrongType { expected: "extent leaf", found: u64::from(path[leaf].depth) },
            ));
        };
        // The range [a, b) of this leaf that moves in this step.
        let (a, b) = if shift.left {
            let hi = leaf_end(&path);
            if !v.iter().any(|e| ext_end(e) > shift.cursor) {
                if hi >= MAX_LBLK || hi <= shift.cursor {
                    return Ok(true);
                }
                shift.cursor = hi;
                continue;
            }
            (shift.cursor, hi)
        } else {
            let lo = leaf_start(&path).min(probe).max(shift.start);
            if !v.iter().any(|e| FileBlock::from(e.block) < shift.cursor && ext_end(e) > lo) {
                if lo <= shift.start {
                    return Ok(true);
                }
                shift.cursor = lo;
                continue;
            }
            (lo, shift.cursor)
        };
        let mut pieces: Vec<Piece> = Vec::new();
        for e in v {
            let (s, end) = (FileBlock::from(e.block), ext_end(e));
            let (is, ie) = (s.max(a), end.min(b));
            if is >= ie {
                continue;
            }
            let to = if shift.left {
                is.get().checked_sub(shift.delta).map(FileBlock)
            } else {
                is.checked_add(shift.delta).filter(|&t| t + (ie - is) <= MAX_LBLK)
            };
            let Some(to) = to else {
                return Err(Error::FileTooBig(format!(
                    "inode {}: shifting block {is} by {} leaves the extent-mapped range",
                    inode.ino, shift.delta
                )));
            };
            pieces.push((to, e.start + (is - s), ie - is, e.unwritten));
        }
        let goal = v.first().map_or(PhysicalBlock(0), |e| e.start);
        // The range's blocks stay mapped (at their new place): nothing
        // is freed.
        let (out, _moved) = edit_leaf(v, a, b, Some(Edit::Remove), &pieces)?;
        path[leaf].node = Node::Leaf(out);
        ctx.settle(inode, &mut path, leaf, goal)?;
        moved_any = true;
        if shift.left {
            shift.cursor = b;
        } else {
            shift.cursor = a;
        }
    }
}
