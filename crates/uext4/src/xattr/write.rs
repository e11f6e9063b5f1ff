//! Changing extended attributes: the shared xattr block's reference count.

use crate::error::Result;
use crate::format::bytes::{le32, put_le32};
use crate::format::inode::Inode;
use crate::format::xattr::{block_checksum, parse_block};
use crate::txn::{FreeKind, Tx};

/// Drops `inode`'s reference to its xattr block (inode being deleted):
/// the block is freed with its last reference, else its count goes down.
/// Clears `file_acl` and the block's share of `blocks_512`.
pub fn release_block(tx: &Tx, inode: &mut Inode) -> Result<()> {
    let blk = inode.file_acl;
    if blk == 0 {
        return Ok(());
    }
    let vol = tx.vol;
    let seed = vol.has_csum().then(|| vol.csum_seed());
    // Validates magic, size and checksum before trusting the count.
    parse_block(vol.block(blk)?.data(), blk, seed)?;
    let last = tx.modify(blk, |b| {
        let refs = le32(b, 4);
        if refs <= 1 {
            return Ok(true);
        }
        put_le32(b, 4, refs - 1);
        if let Some(seed) = seed {
            let c = block_checksum(b, blk, seed);
            put_le32(b, 0x10, c);
        }
        Ok(false)
    })?;
    if last {
        tx.free_blocks(blk, 1, FreeKind::Metadata)?;
    }
    inode.file_acl = 0;
    inode.blocks_512 = inode.blocks_512.saturating_sub(vol.block_size as u64 / 512);
    Ok(())
}
