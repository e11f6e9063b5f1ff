//! Journal recovery: replaying the committed transactions of the log.
//!
//! This follows the kernel's `fs/jbd2/recovery.c` (which e2fsck shares)
//! pass by pass:
//!
//! 1. **SCAN** walks the log from `s_start` expecting transaction
//!    `s_sequence`, wrapping from the end of the log area back to
//!    `s_first`. Each transaction is descriptor blocks (each followed by
//!    the data blocks its tags describe) and revoke blocks, closed by a
//!    commit block. The log ends at the first block that is not a journal
//!    block of the expected transaction; a transaction without its commit
//!    block is not part of the log. Checksums (see below) can also end it.
//! 2. **REVOKE** reads every revoke block of the committed transactions
//!    into a table: block -> newest transaction that revoked it.
//! 3. **REPLAY** writes every logged block home unless a revoke in the
//!    same or a later transaction covers it, putting back the magic of
//!    escaped blocks. Later transactions overwrite earlier ones.
//!
//! Checksums, as the kernel handles them:
//! - checksum v1 (COMPAT_CHECKSUM): SCAN runs crc32_be over each
//!   transaction's descriptor and data blocks; a commit block whose crc
//!   does not match ends the log there (see "failed commit" below).
//! - checksum v2/v3: a descriptor or revoke block with a bad tail checksum
//!   seen by SCAN is only trusted to be stale if the next commit block is
//!   older than the last good one (then the log ends cleanly); if the
//!   commit is not older, recovery fails with a checksum error. A commit
//!   block with a bad checksum (neither full nor "incomplete commit block")
//!   ends the log; if its time is older than the previous commit it is
//!   stale and the log simply ends there.
//! - a commit that ends the log by a bad checksum in a journal without
//!   `async_commit` is a *failed commit*: the kernel replays the
//!   transactions before it and then refuses the mount
//!   ("journal transaction N is corrupt"). [`recover`] does the same: it
//!   writes those transactions and returns an error, leaving the journal
//!   and `needs_recovery` as they were for e2fsck. With `async_commit` the
//!   log just ends there.
//! - a data block whose tag checksum (csum v2/v3) does not match is not
//!   written; the rest is replayed and then [`recover`] returns the
//!   checksum error, again leaving the journal for e2fsck (the kernel's
//!   recovery returns -EIO after replaying what it could).
//!
//! After a successful replay the journal superblock says the log is empty
//! (`s_start = 0`) and expects transaction `end + 1` (`end` being the first
//! transaction id not found in the log, as the kernel restarts the log),
//! and the ext4 superblock loses `needs_recovery` (checksum recomputed).
//! Like the kernel, the error-tracking fields of the ext4 superblock
//! (`s_error_count` .. `s_last_error_*`) are kept from before the replay,
//! and a journal that recorded an abort (`s_errno != 0`) is reported, its
//! error moved to the filesystem state (`s_state |= ERROR_FS`) and cleared
//! from the journal.
//!
//! **Fast commits**: after SCAN, the fast-commit area (when the journal
//! has the feature and a non-empty log) is scanned as the kernel does
//! ([`super::fast_commit`]): only fast commits of the transaction after
//! the last full commit, up to the last valid tail, count. Their tags
//! change inodes, extent trees and directories, which this layer does not
//! know: [`recover_replaying`] and [`replay_in_memory_replaying`] take the
//! replay as a callback (the engine's `fs/fc_replay.rs`), run once the
//! full commits are written home and flushed and **before** the journal is
//! emptied, so a crash during the replay leaves the whole journal for the
//! next recovery (the tag replay is idempotent, as the kernel's is).
//! Without a callback, [`recover`] refuses with [`Error::Unsupported`]
//! naming `fast_commit` before anything is written, and
//! [`replay_in_memory`] replays the full commits only and says so
//! ([`RecoveryReport::fast_commits_skipped`] and a warning). Stale or
//! invalid fast-commit blocks are ignored, as the kernel ignores them.
//!
//! **Bounds**: every pass walks at most the log area once (a log that
//! would wrap onto itself ends the scan), a descriptor has at most a
//! block's worth of tags, the revoke table keeps only blocks inside the
//! filesystem and at most [`MAX_REVOKE_RECORDS`] of them, and a tag that
//! points outside the filesystem is corruption found before anything is
//! written.
//!
//! Orphan processing (what the kernel does after recovery at mount) is not
//! part of recovery.

use super::fast_commit::{scan_area, FcScan};
use super::{at_block, Journal};
use crate::device::{BlockDevice, OverlayDevice};
use crate::error::{CorruptKind, Error, Location, Result, Structure};
use crate::format::bytes::{le16, le32, put_le16, put_le32};
use crate::format::checksum::crc32c;
use crate::format::features::{incompat, ro_compat};
use crate::format::journal::{
    blocktype, checksum_type, crc32_be, parse_tags, stored_tail_checksum, tag_checksum_value, tag_flag, tail_checksum,
    unescape_block, verify_commit_checksum, verify_tag_checksum, verify_tail_checksum, BlockHeader, CommitBlock,
    JournalFeatures, RevokeBlock,
};
use crate::format::superblock::{Superblock, STATE_ERROR, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use crate::volume::Volume;
use std::collections::HashMap;
use std::sync::Arc;

/// Most distinct revoked blocks recovery keeps track of (about 100 MiB of
/// table); a log revoking more is treated as corrupt.
pub const MAX_REVOKE_RECORDS: usize = 1 << 22;
/// Metadata cache blocks of the volume opened to locate the journal.
const CACHE_BLOCKS: usize = 256;
/// `s_error_count` .. `s_mount_opts`: the ext4 superblock fields the kernel
/// keeps from before the replay (EXT4_S_ERR_START .. EXT4_S_ERR_END).
const SB_ERR_RANGE: std::ops::Range<usize> = 0x194..0x200;

/// What [`recover`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The filesystem was marked `needs_recovery`.
    pub needed: bool,
    /// Something was written to the device (blocks replayed, journal
    /// superblock reset, `needs_recovery` cleared).
    pub modified: bool,
    /// Committed transactions found in the log and replayed.
    pub transactions: u32,
    /// First transaction id the log expected (`s_sequence` as found).
    pub first_tid: u32,
    /// Last transaction replayed, if any.
    pub last_tid: Option<u32>,
    /// Transaction id the journal expects next (its new `s_sequence`).
    pub next_tid: u32,
    /// Journal block where the log started (`s_start` as found; 0 if empty).
    pub log_start: u32,
    /// Journal block following the last replayed commit block (the
    /// kernel's `head_block`); below `log_start` when the log wrapped.
    pub log_head: u32,
    /// Logged blocks written home.
    pub blocks_replayed: u64,
    /// Logged blocks skipped because a revoke record covered them.
    pub blocks_revoked: u64,
    /// Revoke records read.
    pub revoke_records: u64,
    /// `s_errno` of the journal as found (non-zero after a journal abort).
    pub journal_errno: i32,
    /// The fast-commit area held fast commits newer than the last full
    /// commit; they were not replayed (only [`replay_in_memory`] goes on
    /// without them; [`recover`] refuses).
    pub fast_commits_skipped: bool,
    /// Valid fast commits found after the last full commit.
    pub fast_commits: u32,
    /// The fast commits were replayed (by the caller's replay).
    pub fast_commits_replayed: bool,
    /// Things worth telling the user.
    pub warnings: Vec<String>,
}

fn corrupt(location: Location, kind: CorruptKind) -> Error {
    Error::corruption(Structure::Journal, location, kind)
}

/// `a` is after `b` in transaction-id order (ids wrap at 2^32).
fn tid_gt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// `a` is `b` or after it.
fn tid_geq(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    Scan,
    Revoke,
    Replay,
}

/// What the passes carry between them.
#[derive(Default)]
struct Info {
    /// First transaction id that is not part of the log (set by SCAN).
    end_tid: Option<u32>,
    /// A transaction whose commit block failed its checksum, and where
    /// that commit block is.
    failed_commit: Option<(u32, u64)>,
    /// Block after the last good commit (SCAN).
    head_block: u32,
    replays: u64,
    revoke_hits: u64,
    revokes: u64,
    /// The first error of the REPLAY pass, which keeps going (recover what
    /// we can) and reports it at the end.
    replay_error: Option<Error>,
}

/// Block -> newest transaction that revoked it.
struct RevokeTable {
    map: HashMap<u64, u32>,
    fs_blocks: u64,
}

impl RevokeTable {
    fn set(&mut self, block: u64, tid: u32) -> Result<()> {
        if block >= self.fs_blocks {
            // Nothing there can be replayed (such tags are refused).
            return Ok(());
        }
        if let Some(t) = self.map.get_mut(&block) {
            if tid_gt(tid, *t) {
                *t = tid;
            }
            return Ok(());
        }
        if self.map.len() >= MAX_REVOKE_RECORDS {
            return Err(corrupt(
                Location::Transaction { tid, block: 0 },
                CorruptKind::TooMany { what: "revoked blocks in the log", limit: MAX_REVOKE_RECORDS as u64 },
            ));
        }
        self.map.insert(block, tid);
        Ok(())
    }

    /// A block logged in `tid` is revoked if a revoke record in `tid` or a
    /// later transaction names it.
    fn revoked(&self, block: u64, tid: u32) -> bool {
        self.map.get(&block).is_some_and(|&t| !tid_gt(tid, t))
    }
}

/// The log being recovered.
struct Log<'a> {
    dev: &'a dyn BlockDevice,
    journal: &'a Journal,
    bs: usize,
    features: JournalFeatures,
    seed: u32,
    /// First log block.
    first: u32,
    /// One past the last log block.
    last: u32,
    /// Blocks in the filesystem (replay targets must be below).
    fs_blocks: u64,
}

impl Log<'_> {
    /// Reads journal block `jblk`; returns its physical block.
    fn read(&self, jblk: u32, buf: &mut [u8]) -> Result<u64> {
        let p = self.journal.map.physical(u64::from(jblk))?;
        self.dev.read_at(buf, p * self.bs as u64)?;
        Ok(p)
    }

    /// The log block `n` blocks after `b`, wrapping at the end of the log.
    fn advance(&self, b: u32, n: u64) -> u32 {
        let (first, last) = (u64::from(self.first), u64::from(self.last));
        let v = u64::from(b) + n;
        if v >= last {
            (first + (v - first) % (last - first)) as u32
        } else {
            v as u32
        }
    }

    fn log_len(&self) -> u64 {
        u64::from(self.last - self.first)
    }

    /// One recovery pass, as the kernel's `do_one_pass`.
    fn pass(&self, pass: Pass, info: &mut Info, revokes: &mut RevokeTable) -> Result<()> {
        let sb = &self.journal.sb;
        let f = self.features;
        let mut next_tid = sb.sequence;
        let mut next_block = sb.start;
        // Blocks consumed from the log: a log cannot be longer than the log
        // area, so a corrupt one cannot make us walk in circles.
        let mut walked = 0u64;
        let mut crc32_sum = !0u32;
        let mut need_check_commit_time = false;
        let mut last_commit_time = 0u64;
        let mut block = vec![0u8; self.bs];
        let mut data = vec![0u8; self.bs];

        loop {
            if pass != Pass::Scan {
                if let Some(end) = info.end_tid {
                    if tid_geq(next_tid, end) {
                        break;
                    }
                }
            }
            if walked >= self.log_len() {
                break;
            }
            let pblk = self.read(next_block, &mut block)?;
            next_block = self.advance(next_block, 1);
            walked += 1;

            let Some(h) = BlockHeader::parse(&block) else { break };
            if !h.is_journal_block() || h.sequence != next_tid {
                break;
            }
            match h.blocktype {
                blocktype::DESCRIPTOR => {
                    if f.csum_v2or3() && !verify_tail_checksum(self.seed, &block) {
                        // SCAN may see stale blocks (lazy journal init):
                        // decide at the next commit block.
                        if pass != Pass::Scan {
                            return Err(Error::Checksum {
                                structure: Structure::Journal,
                                block: pblk,
                                ino: 0,
                                stored: stored_tail_checksum(&block),
                                computed: tail_checksum(self.seed, &block),
                            });
                        }
                        need_check_commit_time = true;
                    }
                    let tags = parse_tags(&block, &f);
                    match pass {
                        Pass::Scan => {
                            if f.checksum_v1() && !need_check_commit_time && info.end_tid.is_none() {
                                crc32_sum = crc32_be(crc32_sum, &block);
                                let mut read_failed = false;
                                for _ in 0..tags.len() {
                                    let io = next_block;
                                    next_block = self.advance(next_block, 1);
                                    walked += 1;
                                    if self.read(io, &mut data).is_err() {
                                        read_failed = true;
                                        break;
                                    }
                                    crc32_sum = crc32_be(crc32_sum, &data);
                                }
                                if read_failed {
                                    break;
                                }
                            } else {
                                next_block = self.advance(next_block, tags.len() as u64);
                                walked += tags.len() as u64;
                            }
                        }
                        Pass::Revoke => {
                            if let Some(t) = tags.iter().find(|t| t.block >= self.fs_blocks) {
                                return Err(corrupt(
                                    Location::Transaction { tid: next_tid, block: pblk },
                                    CorruptKind::OutsideRange {
                                        what: "logged block",
                                        value: t.block,
                                        start: 0,
                                        end: self.fs_blocks,
                                    },
                                ));
                            }
                            next_block = self.advance(next_block, tags.len() as u64);
                            walked += tags.len() as u64;
                        }
                        Pass::Replay => {
                            for tag in &tags {
                                let io = next_block;
                                next_block = self.advance(next_block, 1);
                                walked += 1;
                                let log_pblk = match self.read(io, &mut data) {
                                    Ok(p) => p,
                                    Err(e) => {
                                        info.replay_error.get_or_insert(e);
                                        continue;
                                    }
                                };
                                if revokes.revoked(tag.block, next_tid) {
                                    info.revoke_hits += 1;
                                    continue;
                                }
                                if !verify_tag_checksum(&f, tag, self.seed, h.sequence, &data) {
                                    let computed = tag_checksum_value(&f, self.seed, h.sequence, &data);
                                    info.replay_error.get_or_insert(Error::Checksum {
                                        structure: Structure::Journal,
                                        block: log_pblk,
                                        ino: 0,
                                        stored: tag.checksum,
                                        computed,
                                    });
                                    continue;
                                }
                                if tag.block >= self.fs_blocks {
                                    // Refused by the REVOKE pass already.
                                    info.replay_error.get_or_insert(corrupt(
                                        Location::Transaction { tid: next_tid, block: log_pblk },
                                        CorruptKind::OutsideRange {
                                            what: "logged block",
                                            value: tag.block,
                                            start: 0,
                                            end: self.fs_blocks,
                                        },
                                    ));
                                    continue;
                                }
                                if tag.flags & tag_flag::ESCAPE != 0 {
                                    unescape_block(&mut data);
                                }
                                self.dev.write_at(&data, tag.block * self.bs as u64)?;
                                info.replays += 1;
                            }
                        }
                    }
                }
                blocktype::COMMIT => {
                    if pass != Pass::Scan {
                        next_tid = next_tid.wrapping_add(1);
                        continue;
                    }
                    let commit = CommitBlock::parse(&block).map_err(|e| at_block(e, pblk))?;
                    let commit_time = commit.commit_sec;
                    if need_check_commit_time {
                        if commit_time >= last_commit_time {
                            return Err(corrupt(
                                Location::Transaction { tid: next_tid, block: pblk },
                                CorruptKind::TransactionChecksum { what: "descriptor or revoke block" },
                            ));
                        }
                        // Older than the previous commit: stale blocks of
                        // an earlier use of the journal. The log ends.
                        break;
                    }
                    let ok = if f.checksum_v1() {
                        if let Some(end) = info.end_tid {
                            info.failed_commit = Some((end, pblk));
                            break;
                        }
                        let found = commit.chksum[0];
                        let good = (crc32_sum == found
                            && commit.chksum_type == checksum_type::CRC32
                            && commit.chksum_size == checksum_type::CRC32_SIZE)
                            || (commit.chksum_type == 0 && commit.chksum_size == 0 && found == 0);
                        if good {
                            crc32_sum = !0;
                        }
                        good
                    } else {
                        verify_commit_checksum(&f, self.seed, &block)
                    };
                    if !ok {
                        if commit_time < last_commit_time {
                            break;
                        }
                        info.end_tid = Some(next_tid);
                        if !f.async_commit() {
                            info.failed_commit = Some((next_tid, pblk));
                            break;
                        }
                    }
                    last_commit_time = commit_time;
                    if info.end_tid.is_none() {
                        info.head_block = next_block;
                    }
                    next_tid = next_tid.wrapping_add(1);
                }
                blocktype::REVOKE => {
                    if pass == Pass::Scan && f.csum_v2or3() && !verify_tail_checksum(self.seed, &block) {
                        need_check_commit_time = true;
                    }
                    if pass != Pass::Revoke {
                        continue;
                    }
                    let r = RevokeBlock::parse(&block, &f).map_err(|e| at_block(e, pblk))?;
                    for rec in r.records {
                        revokes.set(rec, next_tid)?;
                        info.revokes += 1;
                    }
                }
                _ => break,
            }
        }

        if pass == Pass::Scan {
            if info.end_tid.is_none() {
                info.end_tid = Some(next_tid);
            }
        } else if info.end_tid != Some(next_tid) {
            let e = corrupt(
                Location::Transaction { tid: next_tid, block: 0 },
                CorruptKind::RecoveryMismatch {
                    ended: u64::from(next_tid),
                    expected: u64::from(info.end_tid.unwrap_or(next_tid)),
                },
            );
            if pass == Pass::Revoke {
                return Err(e);
            }
            info.replay_error.get_or_insert(e);
        }
        Ok(())
    }

    /// The valid fast commits for transaction `end_tid` (the one after the
    /// last full commit) in the fast-commit area, as the kernel scans it.
    fn scan_fast_commits(&self, end_tid: u32, inode_size: usize) -> FcScan {
        let sb = &self.journal.sb;
        if !sb.features.fast_commit() || sb.log_end() >= sb.maxlen {
            return FcScan::default();
        }
        // The kernel's j_fc_first = j_last + 1; its writes stay below
        // j_fc_last = s_maxlen.
        let fc_first = sb.log_end().saturating_add(1);
        let blocks = sb.maxlen.saturating_sub(fc_first);
        let mut read = |i: u32, buf: &mut [u8]| self.read(fc_first + i, buf).map(|_| ());
        scan_area(&mut read, blocks, self.bs, inode_size, end_tid)
    }
}

/// Replays the journal of the filesystem on `dev` in place.
///
/// Opens the volume itself (superblock, descriptors, journal inode). Does
/// nothing (and says so in the report) when the filesystem has no journal
/// or is not marked `needs_recovery`; a journal that holds transactions
/// without that flag is ignored, as the kernel ignores it. Errors: the
/// device is read-only ([`Error::ReadOnly`]); an external journal
/// ([`Error::Unsupported`]); a corrupt journal ([`Error::Corrupt`] /
/// [`Error::Checksum`] with [`Structure::Journal`]) — when found before
/// replay nothing has been written; a failed commit or a bad data block
/// checksum is reported after the rest was replayed (see the module
/// documentation); valid fast commits after the last full commit
/// ([`Error::Unsupported`] naming `fast_commit`, found before anything is
/// written).
#[cfg(test)]
pub fn recover(dev: Arc<dyn BlockDevice>) -> Result<RecoveryReport> {
    recover_with(dev, FastCommits::Refuse)
}

/// Applies the valid fast-commit tags of a scan to the filesystem on the
/// device it is given (the one recovery writes to), after the full
/// commits were written home and before the journal is emptied; returns
/// notices for the user.
pub type FcReplay<'a> = &'a mut dyn FnMut(Arc<dyn BlockDevice>, &FcScan) -> Result<Vec<String>>;

/// [`recover`], replaying the fast commits through `replay` instead of
/// refusing them.
pub fn recover_replaying(dev: Arc<dyn BlockDevice>, replay: FcReplay<'_>) -> Result<RecoveryReport> {
    recover_with(dev, FastCommits::Replay(replay))
}

/// What recovery does with fast commits.
enum FastCommits<'a> {
    /// Refuse before writing anything (the device is the real one).
    #[cfg_attr(not(test), allow(dead_code))]
    Refuse,
    /// Go on without them and say so (an in-memory replay for reading).
    #[cfg_attr(not(test), allow(dead_code))]
    Skip,
    /// Replay them through the callback.
    Replay(FcReplay<'a>),
}

fn recover_with(dev: Arc<dyn BlockDevice>, mut fc: FastCommits<'_>) -> Result<RecoveryReport> {
    if dev.read_only() {
        return Err(Error::ReadOnly("journal recovery needs a writable device".into()));
    }
    let vol = Volume::open(dev.clone(), CACHE_BLOCKS)?;
    let mut report = RecoveryReport { needed: vol.sb.needs_recovery(), ..Default::default() };
    let Some(journal) = Journal::open(&vol)? else {
        if report.needed {
            return Err(corrupt(Location::Unknown, CorruptKind::Missing { what: "journal (needs_recovery is set)" }));
        }
        return Ok(report);
    };
    let jsb = &journal.sb;
    report.first_tid = jsb.sequence;
    report.next_tid = jsb.sequence;
    report.journal_errno = jsb.errno;
    if jsb.errno != 0 {
        report.warnings.push(format!(
            "the journal recorded error {} ({}) from a previous mount",
            jsb.errno,
            std::io::Error::from_raw_os_error(jsb.errno.saturating_neg())
        ));
    }
    if !report.needed {
        if jsb.start != 0 {
            report.warnings.push(
                "the journal holds transactions but the filesystem is not marked needs_recovery; \
                 they are ignored, as the kernel ignores them"
                    .into(),
            );
        }
        return Ok(report);
    }
    let old_sb = *vol.sb.raw();
    let log = Log {
        dev: dev.as_ref(),
        journal: &journal,
        bs: vol.block_size,
        features: jsb.features,
        seed: jsb.csum_seed(),
        first: jsb.first,
        last: jsb.log_end(),
        fs_blocks: vol.sb.blocks_count,
    };

    let mut info = Info { head_block: jsb.start, ..Default::default() };
    report.log_start = jsb.start;
    let mut fc_pending: Option<FcScan> = None;
    let end_tid = if jsb.start == 0 {
        jsb.sequence
    } else {
        let mut revokes = RevokeTable { map: HashMap::new(), fs_blocks: vol.sb.blocks_count };
        log.pass(Pass::Scan, &mut info, &mut revokes)?;
        let end = info.end_tid.unwrap_or(jsb.sequence);
        let fcs = log.scan_fast_commits(end, usize::from(vol.sb.inode_size));
        if fcs.has_tags() {
            report.fast_commits = fcs.commits;
            if matches!(fc, FastCommits::Replay(_)) {
                fc_pending = Some(fcs);
            } else if matches!(fc, FastCommits::Refuse) {
                return Err(Error::Unsupported(format!(
                    "fast_commit: the journal holds {} fast commit(s) ({} change tag(s)) after transaction {} \
                     and this recovery has no fast-commit replay; nothing was written: open the image with \
                     uext4's Filesystem (which replays them), mount it, or run e2fsck -fy",
                    fcs.commits,
                    fcs.change_tags(),
                    end.wrapping_sub(1)
                )));
            } else {
                report.fast_commits_skipped = true;
                report.warnings.push(format!(
                    "the journal holds {} fast commit(s) after the last full commit; they were not replayed, \
                     so the most recent fsync'ed changes are not shown",
                    fcs.commits
                ));
            }
        }
        log.pass(Pass::Revoke, &mut info, &mut revokes)?;
        log.pass(Pass::Replay, &mut info, &mut revokes)?;
        dev.flush()?;
        report.modified = info.replays > 0;
        info.end_tid.unwrap_or(jsb.sequence)
    };
    report.transactions = end_tid.wrapping_sub(jsb.sequence);
    report.last_tid = (report.transactions > 0).then(|| end_tid.wrapping_sub(1));
    report.log_head = info.head_block;
    report.blocks_replayed = info.replays;
    report.blocks_revoked = info.revoke_hits;
    report.revoke_records = info.revokes;
    if let Some(e) = info.replay_error {
        return Err(e);
    }
    if let Some((tid, commit_block)) = info.failed_commit {
        return Err(corrupt(
            Location::Transaction { tid, block: commit_block },
            CorruptKind::BadCommit { replayed: u64::from(report.transactions) },
        ));
    }
    if let (Some(scan), FastCommits::Replay(replay)) = (fc_pending.as_ref(), &mut fc) {
        // The full commits are home and flushed; the journal still holds
        // everything, so a failure or crash here leaves it for the next
        // recovery.
        let notes = replay(dev.clone(), scan)?;
        dev.flush()?;
        report.warnings.extend(notes);
        report.fast_commits_replayed = true;
    }
    // The superblock as replayed (the log may have carried a copy of it),
    // without needs_recovery. Checked before anything more is written.
    let mut raw = [0u8; SUPERBLOCK_SIZE];
    dev.read_at(&mut raw, SUPERBLOCK_OFFSET)?;
    raw[SB_ERR_RANGE].copy_from_slice(&old_sb[SB_ERR_RANGE]);
    let feat = le32(&raw, 0x60) & !incompat::RECOVER;
    put_le32(&mut raw, 0x60, feat);
    if jsb.errno != 0 {
        let state = le16(&raw, 0x3A) | STATE_ERROR;
        put_le16(&mut raw, 0x3A, state);
    }
    if le32(&raw, 0x64) & ro_compat::METADATA_CSUM != 0 {
        let c = crc32c(!0, &raw[..0x3FC]);
        put_le32(&mut raw, 0x3FC, c);
    }
    Superblock::parse(&raw)
        .map_err(|e| corrupt(Location::Unknown, CorruptKind::InvalidAfterReplay { cause: e.to_string() }))?;

    // Empty the log: the next transaction is end + 1, as the kernel and
    // e2fsck restart it, so no stale block of this log can be taken as
    // part of the next one. Then clear needs_recovery (a crash between
    // the two leaves an empty log to "recover" again).
    let mut new_jsb = jsb.clone();
    new_jsb.sequence = end_tid.wrapping_add(1);
    new_jsb.start = 0;
    new_jsb.errno = 0;
    let jsb_block = journal.map.physical(0)?;
    dev.write_at(&new_jsb.to_bytes(), jsb_block * vol.block_size as u64)?;
    dev.flush()?;
    report.next_tid = new_jsb.sequence;
    dev.write_at(&raw, SUPERBLOCK_OFFSET)?;
    dev.flush()?;
    report.modified = true;
    Ok(report)
}

/// Replays the journal of the (possibly read-only) device `base` into an
/// in-memory [`OverlayDevice`]: `base` is never written. Returns the
/// overlay (the replayed filesystem) and what was done.
#[cfg(test)]
pub fn replay_in_memory(base: Arc<dyn BlockDevice>) -> Result<(Arc<OverlayDevice>, RecoveryReport)> {
    let overlay = Arc::new(OverlayDevice::new(base));
    let report = recover_with(overlay.clone(), FastCommits::Skip)?;
    Ok((overlay, report))
}

/// [`replay_in_memory`], replaying the fast commits into the overlay
/// through `replay`.
pub fn replay_in_memory_replaying(
    base: Arc<dyn BlockDevice>,
    replay: FcReplay<'_>,
) -> Result<(Arc<OverlayDevice>, RecoveryReport)> {
    let overlay = Arc::new(OverlayDevice::new(base));
    let report = recover_with(overlay.clone(), FastCommits::Replay(replay))?;
    Ok((overlay, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tid_order_wraps() {
        assert!(tid_gt(1, 0));
        assert!(tid_gt(0, u32::MAX));
        assert!(!tid_gt(5, 5));
        assert!(tid_geq(5, 5));
        assert!(!tid_geq(u32::MAX, 0));
    }

    #[test]
    fn revoke_table_keeps_newest() {
        let mut t = RevokeTable { map: HashMap::new(), fs_blocks: 100 };
        t.set(10, 5).unwrap();
        t.set(10, 3).unwrap();
        assert!(t.revoked(10, 5));
        assert!(t.revoked(10, 4));
        assert!(!t.revoked(10, 6));
        t.set(10, 7).unwrap();
        assert!(t.revoked(10, 6));
        t.set(1000, 9).unwrap();
        assert!(!t.revoked(1000, 1));
        assert!(!t.revoked(11, 1));
    }
}
