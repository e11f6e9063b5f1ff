//! Writeback: dirty folios to the device, their blocks allocated then,
//! in large runs (delayed allocation).
//!
//! # When
//! - `fsync` writes back its own file, then commits the transaction that
//!   last changed it; `commit`, `sync` and unmount write back every file.
//! - A background thread ("uext4-writeback", the kernel's flusher) wakes
//!   every `writeback_interval` and writes back files dirty for longer
//!   than `dirty_expire`; when dirty data passes half of `dirty_ratio`
//!   of the page-cache budget it is woken at once and writes back the
//!   oldest files until dirty data is under a quarter of it.
//! - A writer that leaves more than `dirty_ratio` percent of the budget
//!   dirty writes back its own file, then the oldest others, before it
//!   returns (`balance_dirty_pages`): dirty folios cannot be evicted, so
//!   this is what keeps the cache within its budget.
//!
//! # How
//! A file is written back in batches of up to [`BATCH`] bytes of dirty
//! folios, each batch's folios locked while their bytes go out. First,
//! under the file's I/O lock *shared*, the dirty blocks that are already
//! written go back in place, with no handle: writers and direct I/O of
//! the file go on meanwhile, and truncate and punch (exclusive) cannot
//! free the blocks. Then, only if some dirty block has no written block
//! yet or the in-memory size is past `i_size`, under the lock
//! exclusively: the remaining dirty blocks are grouped into runs of
//! adjacent bytes and written through the allocating path: one handle per
//! chunk, one mballoc request per run and chunk (so a file written
//! sequentially gets long extents), the data written before the handle
//! stops, so the transaction that maps the blocks and raises `i_size`
//! commits after them (ordered mode). A crash before that commit leaves
//! the old size and no new mapping: never stale blocks.
//! On an error the folios stay dirty (and keep their reservation); the
//! next writeback, or `fsync`, tries again and reports it.

use super::FsCore;
use crate::data::page_cache::{all_written, Folio, FolioGuard};
use crate::data::FileIo;
use crate::error::Result;
use crate::format::block_number::FileBlock;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

/// Dirty bytes written back under one hold of a file's I/O lock.
const BATCH: u64 = 16 << 20;
const SHARDS: usize = 16;
/// Most other files a writer past the hard dirty limit writes back.
const BALANCE_BATCH: usize = 64;

/// The dirty-inode list and the background thread's controls.
#[derive(Debug)]
pub(crate) struct Writeback {
    /// Dirty files and when they became dirty.
    dirty: Vec<Mutex<HashMap<u32, Instant>>>,
    signal: Arc<Signal>,
    /// Set while a wake-up is pending, so that writers over the
    /// background threshold notify the thread once, not each.
    kicked: AtomicBool,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Debug, Default)]
struct Signal {
    /// (stop, kicked)
    state: Mutex<(bool, bool)>,
    cv: Condvar,
}

impl Default for Writeback {
    fn default() -> Self {
        Writeback {
            dirty: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            signal: Arc::new(Signal::default()),
            kicked: AtomicBool::new(false),
            thread: Mutex::new(None),
        }
    }
}

impl Writeback {
    fn note(&self, ino: u32) {
        self.dirty[ino as usize % SHARDS].lock().entry(ino).or_insert_with(Instant::now);
    }

    /// Takes `ino` off the list unless it is dirty again: the check is
    /// under the list's lock, which a writer dirtying the file's first
    /// folio takes to put it back (see `FileCache::set_dirty`).
    fn forget(&self, ino: u32, file: &crate::data::page_cache::FileCache) {
        let mut shard = self.dirty[ino as usize % SHARDS].lock();
        if !file.is_dirty() {
            shard.remove(&ino);
        }
    }

    /// Dirty files, oldest first, dirty since at least `older` ago.
    fn list(&self, older: std::time::Duration) -> Vec<u32> {
        let now = Instant::now();
        let mut v: Vec<(Instant, u32)> = self
            .dirty
            .iter()
            .flat_map(|s| s.lock().iter().map(|(&i, &t)| (t, i)).collect::<Vec<_>>())
            .filter(|(t, _)| now.saturating_duration_since(*t) >= older)
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, i)| i).collect()
    }

    /// The `k` oldest dirty files, oldest first: a selection, not a sort
    /// of the whole list (which holds every dirty file, thousands of
    /// small ones).
    fn oldest(&self, k: usize) -> Vec<u32> {
        let mut v: Vec<(Instant, u32)> =
            self.dirty.iter().flat_map(|s| s.lock().iter().map(|(&i, &t)| (t, i)).collect::<Vec<_>>()).collect();
        if v.len() > k {
            v.select_nth_unstable(k);
            v.truncate(k);
        }
        v.sort_unstable();
        v.into_iter().map(|(_, i)| i).collect()
    }

    fn kick(&self) {
        if !self.kicked.swap(true, Ordering::AcqRel) {
            self.signal.state.lock().1 = true;
            self.signal.cv.notify_all();
        }
    }
}

impl FsCore {
    /// Starts the background writeback thread (read-write only).
    pub(super) fn start_writeback(&self, me: Weak<FsCore>) {
        let Some(rw) = self.live() else { return };
        let signal = rw.data.writeback().signal.clone();
        let every = rw.data.config().writeback_interval;
        let t = std::thread::Builder::new().name("uext4-writeback".into()).spawn(move || loop {
            {
                let mut g = signal.state.lock();
                if !g.0 && !g.1 {
                    signal.cv.wait_for(&mut g, every);
                }
                if g.0 {
                    return;
                }
                g.1 = false;
            }
            let Some(fs) = me.upgrade() else { return };
            fs.background_writeback();
        });
        *rw.data.writeback().thread.lock() = t.ok();
    }

    /// Stops the background thread and waits for it.
    pub(super) fn stop_writeback(&self) {
        let Some(rw) = self.live() else { return };
        rw.data.writeback().signal.state.lock().0 = true;
        rw.data.writeback().signal.cv.notify_all();
        let t = rw.data.writeback().thread.lock().take();
        if let Some(t) = t {
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }

    /// One pass of the background thread.
    fn background_writeback(&self) {
        let Some(rw) = self.live() else { return };
        self.write_old_atimes();
        rw.data.writeback().kicked.store(false, Ordering::Release);
        let (background, _) = self.dirty_limits();
        let over = rw.data.pages().dirty() > background;
        let older = if over { std::time::Duration::ZERO } else { rw.data.config().dirty_expire };
        for ino in rw.data.writeback().list(older) {
            // Errors leave the folios dirty: fsync reports them.
            let _ = self.writeback_inode(ino);
            if over && rw.data.pages().dirty() <= background / 2 {
                break;
            }
        }
    }

    /// (background, hard) dirty thresholds in bytes.
    fn dirty_limits(&self) -> (usize, usize) {
        let Some(rw) = self.live() else { return (usize::MAX, usize::MAX) };
        let hard = rw.data.pages().budget() / 100 * usize::from(rw.data.config().dirty_ratio.clamp(1, 50));
        (hard / 2, hard)
    }

    /// True past the hard dirty threshold.
    pub(super) fn over_dirty_limit(&self) -> bool {
        self.live().is_some_and(|rw| rw.data.pages().dirty() > self.dirty_limits().1)
    }

    /// Records that `ino` has dirty data (first folio dirtied).
    pub(super) fn note_inode_dirty(&self, ino: u32) {
        if let Some(rw) = self.live() {
            rw.data.writeback().note(ino);
        }
    }

    /// After a buffered write, with no lock held: wakes the background
    /// thread past its threshold, and past the hard one writes back
    /// `ino`, then the oldest other files, until under it.
    pub(crate) fn balance_dirty(&self, ino: u32) -> Result<()> {
        let Some(rw) = self.live() else { return Ok(()) };
        let (background, hard) = self.dirty_limits();
        let dirty = rw.data.pages().dirty();
        if dirty <= background {
            return Ok(());
        }
        rw.data.writeback().kick();
        if dirty <= hard {
            return Ok(());
        }
        self.writeback_inode(ino)?;
        if rw.data.pages().dirty() <= hard {
            return Ok(());
        }
        // Then up to a batch of the oldest others, down to a margin under
        // the limit. Listing (and sorting) every dirty file to write back
        // one or two of them, at each write past the limit, cost more
        // than the writes once writers outran the writeback thread: a
        // batch spreads one selection over many files, and the margin
        // spares the writers right behind this one from doing the same.
        let target = hard - hard / 8;
        for other in rw.data.writeback().oldest(BALANCE_BATCH) {
            if rw.data.pages().dirty() <= target {
                break;
            }
            self.writeback_inode(other)?;
        }
        Ok(())
    }

    /// Writes back every dirty folio of `ino` (takes its I/O lock).
    ///
    /// First, under the I/O lock *shared*, every dirty block that is
    /// already written goes back in place: writers and direct I/O of the
    /// file go on meanwhile (each folio is locked only while its bytes go
    /// out), and truncate and punch, which take the lock exclusively,
    /// cannot free the blocks. Then, only if some dirty block needs
    /// allocating (or the in-memory size must reach `i_size`), the rest
    /// under the lock exclusively, as the allocating path requires.
    ///
    /// An error is also recorded on the file (see [`FsCore::fsync`]): the
    /// folios stay dirty and are tried again, but whoever syncs the file
    /// hears of it.
    pub fn writeback_inode(&self, ino: u32) -> Result<()> {
        let rw = self.rw()?;
        self.check_not_aborted_io()?;
        let dirty = rw.data.inode(ino).data.pages.is_dirty();
        let r = self.writeback_inode_inner(ino);
        self.wb_result(ino, dirty, &r);
        r
    }

    /// Notes that writeback wrote data of `ino` (if `wrote`), and records
    /// its error on the file.
    pub(crate) fn wb_result<T>(&self, ino: u32, wrote: bool, r: &Result<T>) {
        let Some(rw) = self.live() else { return };
        if wrote {
            rw.data.errors().note_written(ino);
        }
        match r {
            // After an abort every fsync fails anyway.
            Err(crate::error::Error::ReadOnly(_)) | Ok(_) => {}
            Err(e) => rw.data.errors().record(ino, e),
        }
    }

    fn writeback_inode_inner(&self, ino: u32) -> Result<()> {
        let rw = self.rw()?;
        let st = rw.data.inode(ino);
        let mut from = 0;
        let mut needs_alloc = false;
        while let Some(next) = {
            let _shared = st.io.read();
            self.writeback_batch(&st, ino, from, false, &mut needs_alloc)?
        } {
            from = next;
        }
        // Blocks dirtied again meanwhile are newer writes: not ours to wait
        // for (fsync's data was all in the batches above).
        if needs_alloc || st.data.pages.pending_size() != 0 {
            let _l = rw.data.locks().lock_exclusive(&[], &[ino]);
            self.writeback_locked(&st, ino)?;
        } else {
            rw.data.writeback().forget(ino, &st.data.pages);
        }
        Ok(())
    }

    /// Writes back every dirty folio of `ino`; the caller holds its I/O
    /// lock exclusively.
    pub(crate) fn writeback_locked(&self, st: &FileIo, ino: u32) -> Result<()> {
        let mut ignored = false;
        while self.writeback_batch(st, ino, 0, true, &mut ignored)?.is_some() {}
        self.finish_writeback(st, ino)
    }

    /// Writes back every dirty file, without committing the journal: to
    /// push buffered data to the device early (the background writeback
    /// does it anyway). [`FsCore::commit`] does this and then commits, which
    /// is what makes completed operations survive a crash.
    pub fn writeback_all(&self) -> Result<()> {
        let Some(rw) = self.live() else { return Ok(()) };
        let mut first_err = None;
        for ino in rw.data.writeback().list(std::time::Duration::ZERO) {
            if let Err(e) = self.writeback_inode(ino) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// One batch of `ino`'s dirty folios from page `from` on: in place
    /// only (I/O lock held shared; `needs_alloc` is set if some dirty
    /// block is not written yet), or everything (`allocate`, I/O lock
    /// held exclusively). Returns where the next batch starts, or None
    /// when there was nothing left.
    fn writeback_batch(
        &self,
        st: &FileIo,
        ino: u32,
        from: u64,
        allocate: bool,
        needs_alloc: &mut bool,
    ) -> Result<Option<u64>> {
        let folios = st.data.pages.dirty_batch(from, BATCH);
        let Some(last) = folios.last() else { return Ok(None) };
        let next = last.index + last.pages;
        let mut guards: Vec<FolioGuard<'_>> = folios.iter().map(|f| f.lock()).collect();
        let r = self.write_folios(st, ino, &folios, &mut guards, allocate);
        drop(guards);
        *needs_alloc |= r?;
        // With allocation every batch cleans its folios: start over from
        // the first dirty folio (new ones may have appeared before it).
        Ok(Some(if allocate { 0 } else { next }))
    }

    /// Writes the dirty blocks of locked folios `folios` (in file order):
    /// those already written in place; the others through the allocating
    /// path if `allocate`, else left dirty (returns true if there were).
    fn write_folios(
        &self,
        st: &FileIo,
        ino: u32,
        folios: &[Arc<Folio>],
        guards: &mut [FolioGuard<'_>],
        allocate: bool,
    ) -> Result<bool> {
        let rw = self.rw()?;
        let bs = self.vol.block_size as u64;
        let size = self.file_size(st, ino)?;
        let dev = self.vol.device();
        // Dirty blocks needing allocation, grouped into runs of adjacent
        // bytes: (start, length, pieces as (index into `folios`, byte
        // range in its data)). The bytes are gathered only for a run of
        // several pieces; a one-piece run (a small file's one folio) is
        // written from the folio itself.
        let mut runs: Vec<(u64, usize, Vec<Piece>)> = Vec::new();
        let mut left_dirty = false;
        for (k, (f, g)) in folios.iter().zip(guards.iter_mut()).enumerate() {
            let mut needs_alloc = false;
            for (s, e) in g.dirty.runs() {
                let lo = f.start() + s * bs;
                let hi = (f.start() + e * bs).min(size);
                if hi <= lo {
                    continue; // past EOF: not file data any more
                }
                let (from, to) = ((lo - f.start()) as usize, (hi - f.start()) as usize);
                let bytes = &g.data[from..to];
                if all_written(&g.runs, FileBlock::of_byte(lo, bs), FileBlock(hi.div_ceil(bs))) {
                    for r in &g.runs {
                        let (a, b) = (r.lblk.byte_offset(bs).max(lo), r.end().byte_offset(bs).min(hi));
                        if a < b {
                            let src = &bytes[(a - lo) as usize..(b - lo) as usize];
                            dev.write_at(src, r.device_offset(a, bs))?;
                        }
                    }
                    rw.data.stats().writeback_overwrites.bump();
                    rw.data.stats().writeback_bytes.add(hi - lo);
                    continue;
                }
                needs_alloc = true;
                if !allocate {
                    continue;
                }
                match runs.last_mut() {
                    Some((start, len, pieces)) if *start + *len as u64 == lo => {
                        *len += to - from;
                        pieces.push((k, from, to));
                    }
                    _ => runs.push((lo, to - from, vec![(k, from, to)])),
                }
            }
            if !needs_alloc {
                st.data.pages.set_clean(f, g);
            }
            left_dirty |= needs_alloc;
        }
        if !allocate {
            return Ok(left_dirty);
        }
        let mut failed = None;
        for (start, len, pieces) in runs {
            let joined: Vec<u8>;
            let buf: &[u8] = match pieces[..] {
                [(k, from, to)] => &guards[k].data[from..to],
                _ => {
                    let mut v = Vec::with_capacity(len);
                    for &(k, from, to) in &pieces {
                        v.extend_from_slice(&guards[k].data[from..to]);
                    }
                    joined = v;
                    &joined
                }
            };
            debug_assert_eq!(buf.len(), len);
            // ENOSPC while blocks freed by an uncommitted transaction
            // wait: commit and go on (the reservation counted them free).
            let r = self.write_retrying(start, buf, false, |off, data| {
                self.write_locked(ino, off, data, super::write::WriteMode::Writeback { size_hint: size })
            });
            let n = match r {
                Ok(n) if n == len => n,
                Ok(n) => {
                    failed = Some(crate::error::Error::NoSpace(format!(
                        "writeback of inode {ino} stopped at byte {}: the filesystem is full",
                        start + n as u64
                    )));
                    n
                }
                Err(e) => {
                    failed = Some(e);
                    0
                }
            };
            rw.data.stats().writeback_alloc_runs.bump();
            rw.data.stats().writeback_bytes.add(n as u64);
            let mut last = None;
            for &(k, _, _) in &pieces {
                if last == Some(k) {
                    continue;
                }
                last = Some(k);
                // Their blocks are allocated now (or some are, on failure).
                guards[k].runs = self.folio_runs(st, ino, &folios[k])?.1;
            }
            if failed.is_some() {
                break;
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        // Every run landed: the folios that had some are clean now.
        for (f, g) in folios.iter().zip(guards.iter_mut()) {
            st.data.pages.set_clean(f, g);
        }
        Ok(false)
    }

    /// After the last dirty folio of `ino` is written: `i_size` reaches
    /// the in-memory size, and the file leaves the dirty list.
    fn finish_writeback(&self, st: &FileIo, ino: u32) -> Result<()> {
        let rw = self.rw()?;
        let pending = st.data.pages.pending_size();
        if pending != 0 {
            let disk = {
                let _m = st.map.read();
                self.regular(ino)?.size
            };
            if pending > disk {
                // Only a size, no data, is left (the data past the old
                // size was already on written blocks).
                let tx = self.begin(2)?;
                let _m = st.map.write();
                let mut i = self.regular(ino)?;
                i.size = i.size.max(pending);
                tx.write_inode(&mut i)?;
                tx.settle();
                rw.txns.note_dirty(&[ino], tx.tid());
            }
            st.data.pages.settle_size(pending);
        }
        rw.data.writeback().forget(ino, &st.data.pages);
        Ok(())
    }
}

/// A dirty byte range of one folio that writeback allocates for: the
/// folio's index in the batch, then the range's first and end byte in its
/// data.
type Piece = (usize, usize, usize);
