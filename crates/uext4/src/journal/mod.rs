//! The jbd2 journal.
//!
//! Locating an internal journal (the journal inode's block map and its
//! superblock), [`recovery`] (replaying the log left by a crash or by a
//! kernel that did not checkpoint; [`fast_commit`] scans the fast-commit
//! area after it) and [`writer`] (handles, transactions,
//! commit, checkpoint, revoke).
//!
//! The on-disk codecs live in [`crate::format::journal`].

pub mod fast_commit;
pub mod recovery;
pub mod writer;

#[cfg(test)]
pub use recovery::{recover, replay_in_memory, RecoveryReport};
pub use recovery::{recover_replaying, replay_in_memory_replaying};
pub use writer::{Handle, JournalWriter};

use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::block_number::FileBlock;
use crate::format::features::compat;
use crate::format::inode::FileType;
use crate::format::journal::{JournalSuperblock, SUPERBLOCK_SIZE};
use crate::inode::{self, MapKind};
use crate::volume::Volume;

fn corrupt(location: Location, kind: CorruptKind) -> Error {
    Error::corruption(Structure::Journal, location, kind)
}

/// Where the journal's blocks are: the physical block of every journal
/// block `0..len`, as runs from the journal inode's block map.
#[derive(Debug, Clone)]
pub struct JournalMap {
    /// (first journal block, length, first physical block), sorted and
    /// contiguous from 0.
    runs: Vec<(u64, u64, u64)>,
    len: u64,
}

impl JournalMap {
    /// Maps journal blocks `0..len` of the journal inode. A hole, an
    /// unwritten extent or a block outside the filesystem is corruption
    /// (the kernel's "bad block at offset").
    pub fn new(vol: &Volume, inode: &crate::format::inode::Inode, len: u64) -> Result<JournalMap> {
        let mut runs: Vec<(u64, u64, u64)> = Vec::new();
        let mut lblk = 0u64;
        while lblk < len {
            // Journal blocks stay plain numbers inside the journal (they
            // are positions in the log, a domain of their own); the
            // typed mapping is unwrapped here, at the one place it is made.
            let m = inode::map_block(vol, inode, FileBlock(lblk))?;
            let pblk = match m.kind {
                MapKind::Mapped(p) => p.get(),
                MapKind::Unwritten(_) | MapKind::Hole => {
                    return Err(corrupt(Location::JournalBlock(lblk), CorruptKind::Hole { lblk }));
                }
            };
            let n = m.len.max(1).min(len - lblk);
            if !vol.valid_range(pblk, n) {
                return Err(corrupt(
                    Location::JournalBlock(lblk),
                    CorruptKind::OutsideFilesystem { what: "journal extent", block: pblk, len: n },
                ));
            }
            match runs.last_mut() {
                Some(last) if last.0 + last.1 == lblk && last.2 + last.1 == pblk => last.1 += n,
                _ => runs.push((lblk, n, pblk)),
            }
            lblk += n;
        }
        Ok(JournalMap { runs, len })
    }

    /// Physical block of journal block `jblk`.
    pub fn physical(&self, jblk: u64) -> Result<u64> {
        if jblk >= self.len {
            return Err(corrupt(
                Location::Unknown,
                CorruptKind::OutsideRange { what: "journal block", value: jblk, start: 0, end: self.len },
            ));
        }
        let i = self.runs.partition_point(|r| r.0 + r.1 <= jblk);
        match self.runs.get(i) {
            Some(&(l, n, p)) if jblk >= l && jblk < l + n => Ok(p + (jblk - l)),
            _ => Err(corrupt(Location::JournalBlock(jblk), CorruptKind::Hole { lblk: jblk })),
        }
    }
}

/// An internal journal: its superblock and block map.
#[derive(Debug, Clone)]
pub struct Journal {
    /// The journal superblock as read.
    pub sb: JournalSuperblock,
    /// Journal blocks `0..s_maxlen` to physical blocks.
    pub map: JournalMap,
}

impl Journal {
    /// Finds and validates the filesystem's internal journal.
    ///
    /// Returns `Ok(None)` when the filesystem has no journal. An external
    /// journal (no journal inode; `s_journal_uuid` or `s_journal_dev` set)
    /// is [`Error::Unsupported`]. Checks what the kernel and e2fsck check
    /// before trusting the journal: the inode is an in-use regular file at
    /// least `s_maxlen` blocks long, fully mapped inside the filesystem,
    /// and the journal superblock is valid with the filesystem's block
    /// size.
    pub fn open(vol: &Volume) -> Result<Option<Journal>> {
        let sb = &vol.sb;
        if !sb.features.has_compat(compat::HAS_JOURNAL) {
            return Ok(None);
        }
        if sb.journal_inum == 0 {
            if sb.journal_uuid != [0; 16] || sb.journal_dev != 0 {
                return Err(Error::Unsupported("external journal".into()));
            }
            return Err(corrupt(
                Location::Unknown,
                CorruptKind::Missing { what: "journal inode (has_journal is set)" },
            ));
        }
        let ino = inode::read_inode(vol, sb.journal_inum)?;
        if ino.links_count == 0 || ino.file_type().ok() != Some(FileType::Regular) {
            return Err(corrupt(
                Location::Inode(sb.journal_inum),
                CorruptKind::WrongType { expected: "a regular file in use", found: u64::from(ino.mode) },
            ));
        }
        let bs = vol.block_size as u64;
        let inode_blocks = (ino.size / bs).min(u64::from(u32::MAX));
        if inode_blocks == 0 {
            return Err(corrupt(Location::Inode(sb.journal_inum), CorruptKind::Empty { what: "journal inode" }));
        }
        let first = JournalMap::new(vol, &ino, 1)?;
        let p0 = first.physical(0)?;
        let mut raw = vec![0u8; vol.block_size];
        vol.device().read_at(&mut raw, p0 * bs)?;
        let jsb = JournalSuperblock::parse(&raw[..SUPERBLOCK_SIZE]).map_err(|e| at_block(e, p0))?;
        if u64::from(jsb.block_size) != bs {
            return Err(corrupt(
                Location::Block(p0),
                CorruptKind::Mismatch { field: "s_blocksize", value: u64::from(jsb.block_size), expected: bs },
            ));
        }
        if u64::from(jsb.maxlen) > inode_blocks {
            // The journal file must hold at least s_maxlen blocks.
            return Err(corrupt(
                Location::Block(p0),
                CorruptKind::OutsideRange {
                    what: "s_maxlen",
                    value: u64::from(jsb.maxlen),
                    start: 0,
                    end: inode_blocks + 1,
                },
            ));
        }
        let map = JournalMap::new(vol, &ino, u64::from(jsb.maxlen))?;
        Ok(Some(Journal { sb: jsb, map }))
    }
}

/// Sets the block of a corruption or checksum error found in a block
/// whose parser did not know where it lived.
pub(crate) fn at_block(e: Error, block: u64) -> Error {
    e.at_block(block)
}
