//! The shadow-paging engine of one PMO: page reads, psync commits and recovery.
//!
//! Every page has two slots on the medium and a page-map entry naming the current one (or "zero").
//! A psync of pages P with sequence number `s`:
//! 1. writes each page of P to its *other* slot and flushes it;
//! 2. writes journal `s % 2` (page, new page-map entry) for P and flushes it; **fence**;
//! 3. writes commit record slot `s % 2` {s, |P|, CRC of the journal}; **fence** (the commit point);
//! 4. writes and flushes the new page-map entries, without a fence of their own: the first
//!    fence of the next psync (or any later fence) makes them durable, and until then recovery
//!    re-applies journal `s % 2`, which the next psync leaves alone (it writes the other one;
//!    the psync after it, which does overwrite it, comes after that fence).
//!
//! A crash before 3 completes leaves the previous record the newest valid one; a crash after it
//! leaves record `s`. Recovery re-applies the journal of the newest valid record, which is always
//! intact (the next psync writes the other journal) and idempotent (it *sets* entries). Pages of
//! an uncommitted psync sit in slots no entry points to. So after any crash each PMO is exactly
//! as of its last committed psync; the cost of a psync grows with |P|, not with the PMO size.
//!
//! Invariant: the page-map entries on the medium reflect every committed psync except possibly
//! the newest one (whose journal recovery re-applies).
//!
//! Step 1 writes each page with [`Medium::write_flush`]: on persistent memory (DAX or
//! `/dev/shm`) non-temporal stores, which need no line-by-line write-back and never read the
//! free slot's lines into the cache; the fence of step 2 makes them durable as it does flushed
//! lines. A protected psync seals each page from the attached view (when the sealer reads the
//! plaintext once) into one scratch page that stays in this core's cache, then streams it to
//! its free slot: no snapshot copy, and only ciphertext is ever stored on the medium.
//! Otherwise the pages are copied (or filled) into buffers and sealed there in place, then
//! written.
#![allow(unsafe_code)] // reading the attached view's pages in place.

use std::sync::Mutex;
use std::time::Instant;

use pmo_format::layout::{PageLoc, PageMapEntry, PmoLayout, JOURNAL_ENTRY_SIZE};
use pmo_format::record::{CommitRecord, JournalEntry, Trailer, TRAILER_SIZE};
use pmo_format::{crc, Entry, PAGE_SIZE};
use pmo_medium::Medium;

use crate::error::{Result, StoreError};
use crate::protect::Protection;
use pmo_crypt::PAGE_META_LEN;

/// One page of bytes.
pub type Page = [u8; PAGE_SIZE as usize];

/// Pages a protected psync seals at once (4 MiB of buffers at most, on a medium that is not
/// memory): enough work to spread over the crypto workers.
const SEAL_BATCH_PAGES: usize = 512;

/// Where a commit finds the new contents of its pages.
pub enum CommitSource<'a> {
    /// A callback that fills a buffer with the new contents of page `p`.
    Fill(&'a mut dyn FnMut(u64, &mut Page) -> Result<()>),
    /// The pages in place in memory (an attachment's view): sealed or written from there,
    /// without a copy.
    Mapped(MappedPages),
}

/// Pages lying in memory: page `p` at `base + p * PAGE_SIZE` (an attachment's view).
#[derive(Clone, Copy, Debug)]
pub struct MappedPages {
    base: *const u8,
    npages: u64,
    /// Pages read from snapshots instead (`(twin of page 0, ascending page list)`): pages a
    /// view keeps writable, whose committed contents are their twins (twin tracking).
    twins: Option<(*const u8, *const [u64])>,
}

// SAFETY: only the address is shared; what reading through it requires is the contract of
// `MappedPages::new`, which holds on every thread (the mapping is process-wide).
unsafe impl Send for MappedPages {}
// SAFETY: as above; `&MappedPages` only hands out shared views of the pages.
unsafe impl Sync for MappedPages {}

impl MappedPages {
    /// Pages `0..npages` at `base`.
    ///
    /// # Safety
    /// `base .. base + npages * PAGE_SIZE` must stay mapped and readable (a read may fault a
    /// page in, but must not fail) while the value or a copy of it is used. Other threads may
    /// store into the pages meanwhile: a commit then persists some mix of their old and new
    /// bytes (a racing writer's page is dirty again, and the next psync commits it); reads
    /// through `MappedPages::page` go only to copies and to sealers that read each byte once.
    pub unsafe fn new(base: *const u8, npages: u64) -> MappedPages {
        MappedPages {
            base,
            npages,
            twins: None,
        }
    }

    /// Read the pages listed in `pages` (ascending) from `twins + p * PAGE_SIZE` instead.
    ///
    /// # Safety
    /// For every listed page, that range must stay mapped, readable and unchanged while the
    /// value or a copy of it is used, and so must the list itself.
    pub unsafe fn with_twins(self, twins: *const u8, pages: &[u64]) -> MappedPages {
        MappedPages {
            twins: Some((twins, pages as *const [u64])),
            ..self
        }
    }

    /// Page `p` (`p < npages`, checked).
    fn page(&self, p: u64) -> &Page {
        assert!(p < self.npages, "page {p} beyond the mapped pages");
        if let Some((twins, list)) = self.twins {
            // SAFETY: `with_twins`' contract keeps the list alive while `self` is used.
            if unsafe { &*list }.binary_search(&p).is_ok() {
                // SAFETY: `with_twins`' contract: the twin is mapped, readable and unchanged.
                return unsafe { &*twins.add(p as usize * PAGE_SIZE as usize).cast::<Page>() };
            }
        }
        // SAFETY: inside the range `new`'s contract keeps mapped and readable; `Page` is a
        // byte array (alignment 1). Stores by other threads may race with the reads (see
        // `new`): the bytes are only copied or sealed in one pass, never relied upon twice.
        unsafe {
            &*self
                .base
                .add(p as usize * PAGE_SIZE as usize)
                .cast::<Page>()
        }
    }
}

/// Flush the ranges `(offset, len)`, merging the ones that touch or overlap their predecessor
/// (consecutive tags or page-map entries) into one flush: the same lines, fewer flushes.
fn flush_runs(m: &dyn Medium, ranges: impl Iterator<Item = (u64, u64)>) -> Result<()> {
    let mut run: Option<(u64, u64)> = None;
    for (off, len) in ranges {
        run = match run {
            Some((lo, hi)) if off >= lo && off <= hi => Some((lo, hi.max(off + len))),
            Some((lo, hi)) => {
                m.flush(lo, hi - lo)?;
                Some((off, off + len))
            }
            None => Some((off, off + len)),
        };
    }
    if let Some((lo, hi)) = run {
        m.flush(lo, hi - lo)?;
    }
    Ok(())
}

/// What a psync did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Sequence number of the commit (0 if there was nothing to commit).
    pub seq: u64,
    /// Pages written.
    pub pages: u64,
    /// Bytes written to the medium (data, journal, record, page map).
    pub bytes_persisted: u64,
    /// Fences issued.
    pub fences: u64,
    /// Wall time in nanoseconds.
    pub elapsed_ns: u64,
}

/// A committed page map: (sequence number, page-map entries, the commit's trailer).
pub(crate) type CommittedMap = (u64, Vec<u64>, Option<Trailer>);

/// What recovery did for one PMO.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoverReport {
    /// Sequence number of the newest committed psync.
    pub seq: u64,
    /// Page-map entries that had to be re-applied.
    pub replayed: u64,
    /// A commit record slot that held neither zeros nor a valid record (torn by a crash in
    /// its psync's step 3, or damaged), cleared by this recovery: the repair line, said once.
    pub note: Option<String>,
}

/// The engine state of one PMO (shared by all handles of this process to it).
pub struct PmoCore {
    pub name: String,
    pub uuid: [u8; 16],
    pub extent_off: u64,
    /// Size in bytes (grows in place while attached: [`crate::resize`]).
    size: std::sync::atomic::AtomicU64,
    pub base_addr: u64,
    pub layout: PmoLayout,
    /// First 8 bytes of the uuid, stamped into commit records.
    tag: u64,
    /// Sequence number of the newest committed psync; the mutex also serialises psyncs.
    seq: Mutex<u64>,
    /// This attach session's instrumentation.
    pub stats: crate::stats::SessionCounters,
    /// The pool's locks, for the snapshot gate a psync passes ([`crate::snapshot`]); `None`
    /// for a core that never commits.
    pub(crate) gate: Option<crate::locks::Locker>,
    /// The sub-page commit log's state ([`crate::sublog`]).
    pub(crate) sublog: crate::sublog::LogCell,
}

impl PmoCore {
    /// Engine for a namespace entry. Fails if the entry's layout does not fit its extent. The
    /// engine works on the layout capacity's pages (`docs/format.md` §3, "Capacity"): pages
    /// from the size to the capacity read as zeros, and the view maps only the size.
    pub fn new(entry: &Entry) -> Result<PmoCore> {
        let npages = entry.capacity_bytes() / PAGE_SIZE;
        let plain = entry.scheme & crate::scheme::SHADOW_MEDIUM_BIT != 0;
        let log = entry.flags & pmo_format::entry::FLAG_SUBLOG != 0;
        let layout = PmoLayout::with_plain(npages, entry.tag_bytes as u64, plain)
            .and_then(|l| l.with_log(log))
            .filter(|l| l.extent_len <= entry.extent_len)
            .ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "PMO '{}': extent too small for its size",
                    entry.name
                ))
            })?;
        Ok(PmoCore {
            name: entry.name.clone(),
            uuid: entry.uuid,
            extent_off: entry.extent_off,
            size: entry.size.into(),
            base_addr: entry.base_addr,
            layout,
            tag: u64::from_le_bytes(entry.uuid[..8].try_into().expect("8 bytes")),
            seq: Mutex::new(0),
            stats: Default::default(),
            gate: None,
            sublog: Default::default(),
        })
    }

    pub(crate) fn abs(&self, rel: u64) -> u64 {
        self.extent_off + rel
    }

    /// Pages the PMO's layout holds (its capacity; at least its size).
    pub fn npages(&self) -> u64 {
        self.layout.npages
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Pages of the PMO's size (what an attach exposes).
    pub fn size_pages(&self) -> u64 {
        self.size() / PAGE_SIZE
    }

    /// The size after an in-place resize of the attached PMO ([`crate::resize`]).
    pub(crate) fn set_size(&self, bytes: u64) {
        self.size.store(bytes, std::sync::atomic::Ordering::Release)
    }

    /// Newest committed sequence number known to this process.
    pub fn seq(&self) -> u64 {
        *self.seq.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Prepare a fresh extent: no commit records, every page "zero". Flushed, not fenced.
    pub fn init_on_medium(&self, m: &dyn Medium) -> Result<()> {
        m.zero(self.abs(0), PAGE_SIZE)?;
        m.flush(self.abs(0), PAGE_SIZE)?;
        let map_len = self.layout.journal_off[0] - self.layout.map_off;
        m.zero(self.abs(self.layout.map_off), map_len)?;
        // Every page "never written", checked (a flipped bit in it is caught, not read).
        let zero = PageMapEntry::ZERO.0.to_le_bytes().repeat(512);
        let mut at = 0;
        while at < self.layout.npages * 8 {
            let n = (self.layout.npages * 8 - at).min(zero.len() as u64);
            m.write(self.abs(self.layout.map_off + at), &zero[..n as usize])?;
            at += n;
        }
        m.flush(self.abs(self.layout.map_off), map_len)?;
        // A plaintext area reads as zeros while detached (`check` holds it to that); the free
        // space under a new extent may hold anything (an old extent's ciphertext).
        if let Some(off) = self.layout.plain_off {
            let len = self.layout.npages * PAGE_SIZE;
            m.zero(self.abs(off), len)?;
            m.flush(self.abs(off), len)?;
        }
        crate::sublog::init_area(self, m)
    }

    /// The page-map entry of `page` as stored.
    pub fn map_entry(&self, m: &dyn Medium, page: u64) -> Result<PageMapEntry> {
        let mut b = [0u8; 8];
        m.read(self.abs(self.layout.map_entry(page)), &mut b)?;
        Ok(PageMapEntry(u64::from_le_bytes(b)))
    }

    /// Fill `dst` with the current contents of `page`. Allocation-free and lock-free on media
    /// that are mapped (file, PM), so it may run inside a page-fault handler.
    pub fn fill_page(&self, m: &dyn Medium, page: u64, dst: &mut Page) -> Result<(), &'static str> {
        if page >= self.layout.npages {
            return Err("page index beyond the PMO");
        }
        let mut b = [0u8; 8];
        m.read(self.abs(self.layout.map_entry(page)), &mut b)
            .map_err(|_| "medium read failed")?;
        match PageMapEntry(u64::from_le_bytes(b)).loc() {
            Some(PageLoc::Zero) => {
                dst.fill(0);
                Ok(())
            }
            Some(PageLoc::Slot(s)) => m
                .read(self.abs(self.layout.page(s, page)), dst)
                .map_err(|_| "medium read failed"),
            None => Err("corrupted page-map entry"),
        }
    }

    /// [`PmoCore::fill_page`] with a typed error.
    pub fn read_page(&self, m: &dyn Medium, page: u64, dst: &mut Page) -> Result<()> {
        self.fill_page(m, page, dst)
            .map_err(|reason| StoreError::Integrity {
                name: self.name.clone(),
                page,
                reason: reason.into(),
            })
    }

    /// Commit `pages` (ascending, unique, in range) atomically; `src` provides each page's new
    /// contents. `defer_checksums`: leave the pages' per-page checksums to detach where the
    /// scheme allows it ([`Protection::can_defer_checksums`]; ignored otherwise). On error the
    /// medium is in an unknown state and the caller poisons the pool.
    pub fn commit(
        &self,
        m: &dyn Medium,
        pages: &[u64],
        mut src: CommitSource<'_>,
        prot: Option<&Protection>,
        whole_checksum: Option<[u8; 32]>,
        defer_checksums: bool,
    ) -> Result<CommitStats> {
        let defer = defer_checksums && prot.is_some_and(Protection::can_defer_checksums);
        let t0 = Instant::now();
        if pages.windows(2).any(|w| w[0] >= w[1])
            || pages.last().is_some_and(|&p| p >= self.layout.npages)
        {
            return Err(StoreError::Invalid(
                "psync pages must be ascending, unique and inside the PMO".into(),
            ));
        }
        // Psynced bytes still in the sub-page log go into their pages first.
        crate::sublog::fold_before_commit(self, m, prot)?;
        let _gate = crate::snapshot::pass_gate(self, m)?;
        let mut seq = self.seq.lock().unwrap_or_else(|e| e.into_inner());
        if pages.is_empty() {
            return Ok(CommitStats {
                seq: *seq,
                ..Default::default()
            });
        }
        let mut new_seq = *seq + 1;
        let mut fences = 2;
        // Protected PMOs: versions come from the counter, and only from below a reservation
        // that a durable commit carries (authenticated, for `secure`): if this psync needs
        // more, a commit of no pages raises the reservation first. The writer state is changed
        // only after each commit point.
        let mut ws_guard = prot.map(|p| p.write.lock().unwrap_or_else(|e| e.into_inner()));
        if let (Some(p), Some(ws)) = (prot, ws_guard.as_deref_mut()) {
            if let Some((until, epoch)) = p.reservation_needed(ws, pages.len() as u64) {
                if until - 1 > PageMapEntry::VERSION_MAX {
                    // A page-map entry holds 40 bits of version (`docs/format.md` §4).
                    return Err(StoreError::Invalid(format!(
                        "PMO '{}' has used every page version (2^40); copy it (`pmo copy`) to a fresh PMO",
                        self.name
                    )));
                }
                let t = p.trailer(&ws.mac, epoch, until, None);
                self.publish(m, new_seq, &t.encode(), 0)?;
                *seq = new_seq;
                new_seq += 1;
                fences += 2;
                ws.reservation = until;
                ws.counter.confirm_reservation(until - 1);
            }
        }
        if let Some(p) = prot {
            p.before_commit(pages, defer)?;
        }
        let mut pending = ws_guard.as_deref().cloned();
        let trailer_len = if prot.is_some() { TRAILER_SIZE } else { 0 };
        let mut journal =
            Vec::with_capacity(pages.len() * JOURNAL_ENTRY_SIZE as usize + trailer_len);
        let mut next_entries = Vec::with_capacity(pages.len());
        let mut crypt_ns = 0u64;
        let mut push = |p: u64, next: PageMapEntry| {
            journal.extend_from_slice(
                &JournalEntry {
                    page: p,
                    entry: next,
                }
                .encode(),
            );
            next_entries.push(next);
        };
        match (prot, pending.as_mut()) {
            (Some(pr), Some(ws)) => {
                // Per batch: seal, write and flush (`Medium::write_flush`: non-temporal stores on
                // persistent memory). Pages a sealer reads once are sealed out of place from the
                // view, one at a time, into one scratch page that stays in this core's cache,
                // then streamed to their free slots (the same cost within noise as sealing
                // straight into the slot, which read each line in and wrote it back with
                // `clwb`; one write path for every scheme: `docs/commit.md`). The crypt time
                // of these pages includes their streaming store. Other pages are sealed in
                // place in buffers (a snapshot, or a fill), on the crypto workers for large
                // batches: in-place sealing never runs on the medium, where it would store
                // plaintext first.
                let view = match &src {
                    CommitSource::Mapped(v) if pr.seals_in_one_pass(defer) => Some(*v),
                    _ => None,
                };
                let mut scratch = pr.scratch.lock().unwrap_or_else(|e| e.into_inner());
                // BP on the medium: this psync commits plaintext, flagged in the page map.
                let plain = pr.commits_plaintext();
                let mut cur_next = Vec::with_capacity(pages.len().min(SEAL_BATCH_PAGES));
                let mut metas = Vec::with_capacity(pages.len().min(SEAL_BATCH_PAGES));
                for batch in pages.chunks(SEAL_BATCH_PAGES) {
                    cur_next.clear();
                    metas.clear();
                    for &p in batch {
                        let cur = pr.entry(p);
                        let slot = match cur.loc() {
                            Some(PageLoc::Slot(0)) => 1,
                            _ => 0,
                        };
                        let v = ws
                            .counter
                            .next_version()
                            .map_err(|e| StoreError::Os(format!("version counter: {e}")))?;
                        let next = PageMapEntry::new(PageLoc::Slot(slot), v);
                        // `new` leaves the plaintext flag clear: resealing only to clear it
                        // again would cost a CRC per page.
                        let next = if plain { next.with_plain(true) } else { next };
                        cur_next.push((cur, next, slot));
                    }
                    let off = |i: usize| self.abs(self.layout.page(cur_next[i].2, batch[i]));
                    let want = if view.is_some() { 1 } else { batch.len() };
                    if scratch.len() < want {
                        scratch.resize(want, [0u8; PAGE_SIZE as usize]);
                    }
                    let tc = Instant::now();
                    if let Some(view) = view.as_ref() {
                        for (i, &p) in batch.iter().enumerate() {
                            let out = &mut scratch[0];
                            let mut job = [crate::protect::SealJob {
                                page_index: p,
                                version: cur_next[i].1.version(),
                                input: Some(view.page(p)),
                                out,
                                meta: [0u8; PAGE_META_LEN],
                            }];
                            pr.seal_batch(&mut job, false, defer)?;
                            metas.push(job[0].meta);
                            m.write_flush(off(i), &scratch[0][..])?;
                        }
                        crypt_ns += tc.elapsed().as_nanos() as u64;
                    } else {
                        let mut jobs = Vec::with_capacity(batch.len());
                        for ((&p, out), cn) in batch.iter().zip(scratch.iter_mut()).zip(&cur_next) {
                            match &mut src {
                                CommitSource::Mapped(v) => out.copy_from_slice(v.page(p)),
                                CommitSource::Fill(fill) => fill(p, out)?,
                            }
                            jobs.push(crate::protect::SealJob {
                                page_index: p,
                                version: cn.1.version(),
                                input: None,
                                out,
                                meta: [0u8; PAGE_META_LEN],
                            });
                        }
                        pr.seal_batch(&mut jobs, true, defer)?;
                        crypt_ns += tc.elapsed().as_nanos() as u64;
                        for (i, j) in jobs.iter().enumerate() {
                            m.write_flush(off(i), &j.out[..])?;
                            metas.push(j.meta);
                        }
                    }
                    for (i, meta) in metas.iter().enumerate() {
                        let toff = self.abs(self.layout.tag(cur_next[i].2, batch[i]));
                        m.write(toff, meta)?;
                    }
                    flush_runs(
                        m,
                        (0..batch.len()).map(|i| {
                            let toff = self.abs(self.layout.tag(cur_next[i].2, batch[i]));
                            (toff, PAGE_META_LEN as u64)
                        }),
                    )?;
                    let changes = batch.iter().zip(&cur_next);
                    pr.mac_update(&mut ws.mac, changes.map(|(&p, c)| (p, c.0, c.1)))?;
                    for (&p, &(_, next, _)) in batch.iter().zip(&cur_next) {
                        push(p, next);
                    }
                }
            }
            _ => {
                // Only a fill needs a buffer (a view's pages are written from where they are).
                let mut buf: Option<Box<Page>> = None;
                for &p in pages {
                    let cur = self.map_entry(m, p)?;
                    let next = cur.next().ok_or_else(|| {
                        StoreError::Corrupt(format!(
                            "PMO '{}' page {p}: invalid page-map entry {:#x}",
                            self.name, cur.0
                        ))
                    })?;
                    let Some(PageLoc::Slot(slot)) = next.loc() else {
                        return Err(StoreError::Corrupt(format!(
                            "PMO '{}' page {p}: no slot for the next version",
                            self.name
                        )));
                    };
                    let data: &Page = match &mut src {
                        CommitSource::Mapped(view) => view.page(p),
                        CommitSource::Fill(fill) => {
                            // Only a fill is timed: a view's page is a pointer, and two clock
                            // reads per page were ~8% of a 5-page `none` psync.
                            let tc = Instant::now();
                            let b = buf.get_or_insert_with(|| Box::new([0; PAGE_SIZE as usize]));
                            fill(p, b)?;
                            crypt_ns += tc.elapsed().as_nanos() as u64;
                            b
                        }
                    };
                    m.write_flush(self.abs(self.layout.page(slot, p)), &data[..])?;
                    push(p, next);
                }
            }
        }
        if let (Some(pr), Some(ws)) = (prot, pending.as_mut()) {
            let epoch = ws
                .counter
                .next_version()
                .map_err(|e| StoreError::Os(format!("version counter: {e}")))?;
            journal.extend_from_slice(
                &pr.trailer(&ws.mac, epoch, ws.reservation, whole_checksum)
                    .encode(),
            );
        }
        self.publish(m, new_seq, &journal, pages.len() as u64)?;
        // Committed: the writer state and the verified DRAM map follow.
        if let (Some(pr), Some(ws), Some(done)) = (prot, ws_guard.as_deref_mut(), pending) {
            *ws = done;
            for (&p, e) in pages.iter().zip(&next_entries) {
                pr.set_entry(p, *e);
            }
        }
        for (&p, e) in pages.iter().zip(&next_entries) {
            m.write(self.abs(self.layout.map_entry(p)), &e.0.to_le_bytes())?;
        }
        flush_runs(
            m,
            pages
                .iter()
                .map(|&p| (self.abs(self.layout.map_entry(p)), 8)),
        )?;
        // No fence: see step 4 in the module docs.
        *seq = new_seq;
        let k = pages.len() as u64;
        let stats = CommitStats {
            seq: new_seq,
            pages: k,
            bytes_persisted: k * PAGE_SIZE
                + k * self.layout.tag_bytes
                + journal.len() as u64
                + pmo_format::RECORD_SIZE as u64
                + 8 * k,
            fences,
            elapsed_ns: t0.elapsed().as_nanos() as u64,
        };
        self.stats
            .count_psync(stats.elapsed_ns, crypt_ns, stats.bytes_persisted);
        if prot.is_some() {
            crate::stats::SessionCounters::add(&self.stats.pages_encrypted, k);
        }
        Ok(stats)
    }

    /// Steps 2 and 3 of a psync: journal `seq % 2` (entries, then the trailer of a protected
    /// PMO) and its fence, then the record and its fence (the commit point).
    pub(crate) fn publish(
        &self,
        m: &dyn Medium,
        seq: u64,
        journal: &[u8],
        count: u64,
    ) -> Result<()> {
        let j = seq % 2;
        let joff = self.abs(self.layout.journal_off[j as usize]);
        // A small journal goes out as whole lines, zero-padded (the journal area is
        // page-aligned and a whole number of pages; nothing reads past the journal's
        // length), so a medium may stream it (`Medium::write_flush`): cheaper here than
        // store + flush for a few lines (`docs/commit.md`).
        const LINE: usize = 64;
        let mut padded = [0u8; 16 * LINE];
        let whole = journal.len().next_multiple_of(LINE);
        if whole <= padded.len() {
            padded[..journal.len()].copy_from_slice(journal);
            m.write_flush(joff, &padded[..whole])?;
        } else {
            m.write(joff, journal)?;
            m.flush(joff, journal.len() as u64)?;
        }
        m.fence()?;
        let record = CommitRecord {
            seq,
            count,
            journal_crc: crc(journal),
            pmo_tag: self.tag,
        };
        let roff = self.abs(self.layout.record(j));
        // One whole line (`RECORD_SIZE`): streamed where the medium can.
        m.write_flush(roff, &record.encode())?;
        m.fence()?;
        Ok(())
    }

    /// The journal trailer of the newest commit of a protected PMO (`None`: no commit yet).
    pub fn newest_trailer(&self, m: &dyn Medium) -> Result<Option<Trailer>> {
        if self.layout.tag_bytes == 0 {
            return Ok(None);
        }
        let Some(record) = self.newest_record(m)? else {
            return Ok(None);
        };
        let (_, trailer) = self.journal_with_trailer(m, &record)?;
        Ok(trailer)
    }

    /// The newest valid commit record, if any.
    pub(crate) fn newest_record(&self, m: &dyn Medium) -> Result<Option<CommitRecord>> {
        Ok(self.records(m)?.0)
    }

    /// The newest valid commit record, and the record slots that hold neither zeros nor a
    /// valid record (`docs/format.md` §5: torn by a crash in step 3, or damaged).
    fn records(&self, m: &dyn Medium) -> Result<(Option<CommitRecord>, Vec<u64>)> {
        let mut newest: Option<CommitRecord> = None;
        let mut bad = Vec::new();
        for i in 0..2 {
            let mut b = [0u8; pmo_format::RECORD_SIZE];
            m.read(self.abs(self.layout.record(i)), &mut b)?;
            match CommitRecord::decode(&b, self.tag, self.layout.npages) {
                Some(r) if r.seq % 2 == i => {
                    if newest.is_none_or(|n| r.seq > n.seq) {
                        newest = Some(r);
                    }
                }
                _ if b.iter().all(|&x| x == 0) => {}
                _ => bad.push(i),
            }
        }
        Ok((newest, bad))
    }

    /// Zero the record slots `bad` (after the replay of the newest valid record: it decides)
    /// and say so once.
    fn clear_bad_records(
        &self,
        m: &dyn Medium,
        bad: &[u64],
        newest: Option<u64>,
    ) -> Result<Option<String>> {
        if bad.is_empty() {
            return Ok(None);
        }
        for &i in bad {
            let off = self.abs(self.layout.record(i));
            m.zero(off, pmo_format::RECORD_SIZE as u64)?;
            m.flush(off, pmo_format::RECORD_SIZE as u64)?;
        }
        m.fence()?;
        let slots: Vec<String> = bad.iter().map(u64::to_string).collect();
        Ok(Some(format!(
            "PMO '{}': commit record slot {} was unreadable (damaged, or torn by a crash during a psync) and is cleared; the PMO is as of psync {}",
            self.name,
            slots.join(" and "),
            newest.unwrap_or(0)
        )))
    }

    /// Read and check the journal of `record`.
    fn journal(&self, m: &dyn Medium, record: &CommitRecord) -> Result<Vec<JournalEntry>> {
        Ok(self.journal_with_trailer(m, record)?.0)
    }

    /// Read and check the journal of `record` and, for a protected PMO, its trailer.
    fn journal_with_trailer(
        &self,
        m: &dyn Medium,
        record: &CommitRecord,
    ) -> Result<(Vec<JournalEntry>, Option<Trailer>)> {
        let entries_len = (record.count * JOURNAL_ENTRY_SIZE) as usize;
        let trailer_len = if self.layout.tag_bytes > 0 {
            TRAILER_SIZE
        } else {
            0
        };
        let mut journal = vec![0u8; entries_len + trailer_len];
        m.read(
            self.abs(self.layout.journal_off[(record.seq % 2) as usize]),
            &mut journal,
        )?;
        if crc(&journal) != record.journal_crc {
            return Err(StoreError::Corrupt(format!(
                "PMO '{}': journal of psync {} fails its checksum",
                self.name, record.seq
            )));
        }
        let trailer = if trailer_len > 0 {
            Some(Trailer::decode(&journal[entries_len..]).ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "PMO '{}': journal trailer of psync {} is malformed",
                    self.name, record.seq
                ))
            })?)
        } else {
            None
        };
        let mut entries: Vec<JournalEntry> = journal[..entries_len]
            .chunks_exact(JOURNAL_ENTRY_SIZE as usize)
            .map(JournalEntry::decode)
            .collect();
        for e in &mut entries {
            // The journal's CRC vouches for it: an entry a build before format version 4
            // journaled gets its wide check here, so a replay writes it checked.
            match e.entry.resealed() {
                Some(sealed)
                    if e.page < self.layout.npages
                        && matches!(sealed.loc(), Some(PageLoc::Slot(_))) =>
                {
                    e.entry = sealed;
                }
                _ => {
                    return Err(StoreError::Corrupt(format!(
                        "PMO '{}': invalid journal entry for page {}",
                        self.name, e.page
                    )))
                }
            }
        }
        Ok((entries, trailer))
    }

    /// Bring the page map up to the newest committed psync (idempotent; safe to crash in).
    /// The caller holds the PMO's exclusive attach lock.
    pub fn recover(&self, m: &dyn Medium) -> Result<RecoverReport> {
        let mut seq = self.seq.lock().unwrap_or_else(|e| e.into_inner());
        let (newest, bad) = self.records(m)?;
        let Some(record) = newest else {
            *seq = 0;
            self.scrub_if_marked(m)?;
            let note = self.clear_bad_records(m, &bad, None)?;
            return Ok(RecoverReport {
                note,
                ..Default::default()
            });
        };
        let mut replayed = 0;
        let journal = self.journal(m, &record)?;
        // A replay never lowers a version: no crash leaves a map entry newer than the newest
        // intact commit that names its page (psync s sets entries only after record s is
        // durable), so one that is newer means record s was damaged, not torn.
        for e in &journal {
            let cur = self.map_entry(m, e.page)?;
            if cur.loc().is_some() && cur.version() > e.entry.version() {
                return Err(StoreError::Corrupt(format!(
                    "PMO '{}': page {} is mapped at version {}, newer than the newest intact commit ({}, version {}): a newer commit record is damaged",
                    self.name,
                    e.page,
                    cur.version(),
                    record.seq,
                    e.entry.version()
                )));
            }
        }
        for e in journal {
            if self.map_entry(m, e.page)? != e.entry {
                let off = self.abs(self.layout.map_entry(e.page));
                m.write(off, &e.entry.0.to_le_bytes())?;
                m.flush(off, 8)?;
                replayed += 1;
            }
        }
        if replayed > 0 {
            m.fence()?;
        }
        // After the replay: which slot of each page is current is settled.
        self.scrub_if_marked(m)?;
        let note = self.clear_bad_records(m, &bad, Some(record.seq))?;
        *seq = record.seq;
        Ok(RecoverReport {
            seq: record.seq,
            replayed,
            note,
        })
    }

    /// Learn the newest sequence number without writing (a reader joining other readers: the
    /// first of them recovered the PMO under the exclusive lock).
    pub fn recover_readonly(&self, m: &dyn Medium) -> Result<()> {
        let newest = self.newest_record(m)?;
        *self.seq.lock().unwrap_or_else(|e| e.into_inner()) = newest.map_or(0, |r| r.seq);
        Ok(())
    }

    /// The committed page map as of the newest psync, read without any lock while a writer in
    /// another process may be psyncing (a live snapshot): (sequence number, page-map entries,
    /// trailer). `None` if a psync committed while it was read (the caller reads again). The
    /// map on the medium lags only by the newest psync's entries, so its journal is applied
    /// over it; psync `s + 1` writes the other journal and psync `s + 2` cannot begin before
    /// `s + 1` is the newest record, so an unchanged newest record after the reads means the
    /// journal and every other entry read were those of `s`.
    pub(crate) fn committed_map(&self, m: &dyn Medium) -> Result<Option<CommittedMap>> {
        use std::sync::atomic::{fence, Ordering};
        let before = self.newest_record(m)?;
        fence(Ordering::SeqCst);
        let (journal, trailer) = match &before {
            Some(r) => match self.journal_with_trailer(m, r) {
                Ok(j) => j,
                // A journal overwritten under us fails its CRC: read again.
                Err(_) if self.newest_record(m)?.map(|r| r.seq) != Some(r.seq) => return Ok(None),
                Err(e) => return Err(e),
            },
            None => (Vec::new(), None),
        };
        let mut raw = vec![0u8; (self.layout.npages * 8) as usize];
        m.read(self.abs(self.layout.map_off), &mut raw)?;
        fence(Ordering::SeqCst);
        if self.newest_record(m)?.map(|r| r.seq) != before.map(|r| r.seq) {
            return Ok(None);
        }
        let mut table: Vec<u64> = raw
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        for e in journal {
            table[e.page as usize] = e.entry.0;
        }
        Ok(Some((before.map_or(0, |r| r.seq), table, trailer)))
    }

    /// The pages the newest committed psync wrote (its journal), with its sequence number.
    pub(crate) fn newest_pages(&self, m: &dyn Medium) -> Result<Option<(u64, Vec<u64>)>> {
        let Some(r) = self.newest_record(m)? else {
            return Ok(None);
        };
        let pages = self.journal(m, &r)?.into_iter().map(|e| e.page).collect();
        Ok(Some((r.seq, pages)))
    }

    /// Problems found by a read-only check of this PMO's metadata (empty: none).
    pub fn check(&self, m: &dyn Medium) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        let (newest, bad) = self.records(m)?;
        if let Some(record) = newest {
            if let Err(e) = self.journal(m, &record) {
                problems.push(e.to_string());
            }
        }
        for i in bad {
            problems.push(format!(
                "PMO '{}': commit record slot {i} is unreadable (damaged, or torn by a crash; attaching the PMO clears it)",
                self.name
            ));
        }
        let map_len = (self.layout.npages * 8) as usize;
        let mut map = vec![0u8; map_len];
        m.read(self.abs(self.layout.map_off), &mut map)?;
        let bad = map
            .chunks_exact(8)
            .filter(|c| {
                PageMapEntry(u64::from_le_bytes((*c).try_into().expect("8")))
                    .loc()
                    .is_none()
            })
            .count();
        if bad > 0 {
            problems.push(format!(
                "PMO '{}': {bad} corrupted page-map entries",
                self.name
            ));
        }
        let committed_plain = self.plain_committed(m)?;
        if committed_plain > 0 {
            problems.push(format!(
                "PMO '{}': plaintext found on the medium: {committed_plain} pages committed as plaintext by a BP session that did not detach (attach it, or run `pmo check --repair` on it, with its key to encrypt them)",
                self.name
            ));
        } else if self.plain_marked(m)? {
            problems.push(format!(
                "PMO '{}': its plaintext copy on the medium was not scrubbed (a crash while attached; opening the pool or attaching it scrubs it)",
                self.name
            ));
        } else if let Some(off) = self.layout.plain_off {
            let mut page = vec![0u8; PAGE_SIZE as usize];
            let mut dirty = 0u64;
            for p in 0..self.layout.npages {
                m.read(self.abs(off + p * PAGE_SIZE), &mut page)?;
                dirty += u64::from(page.iter().any(|&b| b != 0));
            }
            if dirty > 0 {
                problems.push(format!(
                    "PMO '{}': plaintext found on the medium: {dirty} pages of its plaintext area are not zero while it is detached",
                    self.name
                ));
            }
        }
        Ok(problems)
    }

    // The plaintext area of a PMO whose shadow lives on the medium (`docs/format.md` §4): the
    // plaintext word is set and fenced before an attach writes the area, and cleared (fenced)
    // only after the pages it wrote are zeroed and fenced. So after any crash a set word covers
    // every page that may hold plaintext.

    /// Whether the plaintext word is set (always false without a plaintext area).
    pub fn plain_marked(&self, m: &dyn Medium) -> Result<bool> {
        if self.layout.plain_off.is_none() {
            return Ok(false);
        }
        let mut b = [0u8; 8];
        m.read(self.abs(PmoLayout::PLAIN_WORD_OFF), &mut b)?;
        Ok(u64::from_le_bytes(b) != 0)
    }

    fn write_plain_word(&self, m: &dyn Medium, v: u64) -> Result<()> {
        let off = self.abs(PmoLayout::PLAIN_WORD_OFF);
        m.write(off, &v.to_le_bytes())?;
        m.persist(off, 8)?;
        Ok(())
    }

    /// Set the plaintext word, durably, before the plaintext area is written.
    pub fn mark_plain(&self, m: &dyn Medium) -> Result<()> {
        self.write_plain_word(m, 1)
    }

    /// Clear the plaintext word, durably: no plaintext is left (the caller zeroed and fenced it).
    pub fn clear_plain_word(&self, m: &dyn Medium) -> Result<()> {
        self.write_plain_word(m, 0)
    }

    /// Zero `pages` of the plaintext area (`None`: all of it), fence, then clear the plaintext
    /// word. A crash inside leaves the word set, and the next recovery zeroes the whole area
    /// again (idempotent).
    pub fn scrub_plain(&self, m: &dyn Medium, pages: Option<&[u64]>) -> Result<()> {
        let Some(base) = self.layout.plain_off else {
            return Ok(());
        };
        let zero = |p: u64| -> Result<()> {
            let off = self.abs(base + p * PAGE_SIZE);
            m.zero(off, PAGE_SIZE)?;
            m.flush(off, PAGE_SIZE)?;
            Ok(())
        };
        match pages {
            Some(list) => list
                .iter()
                .filter(|&&p| p < self.layout.npages)
                .try_for_each(|&p| zero(p))?,
            None => (0..self.layout.npages).try_for_each(zero)?,
        }
        m.fence()?;
        self.clear_plain_word(m)
    }

    /// The crash handler of the plaintext area, which needs no key: if the plaintext word is
    /// set, zero the whole area and every slot no page-map entry names (plaintext a BP psync
    /// left behind), fence, and clear the word unless pages are still committed as plaintext
    /// (BP on the medium: only a keyed open can encrypt them).
    pub fn scrub_if_marked(&self, m: &dyn Medium) -> Result<()> {
        self.scrub_marked(m, false)
    }

    /// Before the extent is given back (pdestroy): the crash handler, and the slots of pages
    /// still committed as plaintext are zeroed too, so the word is always cleared.
    pub fn scrub_for_destroy(&self, m: &dyn Medium) -> Result<()> {
        self.scrub_marked(m, true)
    }

    fn scrub_marked(&self, m: &dyn Medium, destroy: bool) -> Result<()> {
        if !self.plain_marked(m)? {
            return Ok(());
        }
        let Some(base) = self.layout.plain_off else {
            return Ok(());
        };
        let zero = |off: u64| -> Result<()> {
            m.zero(off, PAGE_SIZE)?;
            m.flush(off, PAGE_SIZE)?;
            Ok(())
        };
        let mut committed_plain = 0u64;
        for p in 0..self.layout.npages {
            zero(self.abs(base + p * PAGE_SIZE))?;
            let e = self.map_entry(m, p)?;
            // The slot that stays: the current one, unless it holds plaintext being destroyed.
            let keep = if destroy && e.is_plain() {
                None
            } else {
                e.loc()
            };
            committed_plain += u64::from(keep.is_some() && e.is_plain());
            for s in 0..2u8 {
                if keep != Some(PageLoc::Slot(s)) {
                    zero(self.abs(self.layout.page(s, p)))?;
                }
            }
        }
        m.fence()?;
        if committed_plain == 0 {
            self.clear_plain_word(m)?;
        }
        Ok(())
    }

    /// Pages whose committed copy is plaintext (BP on the medium, a session that did not
    /// reach its detach).
    pub fn plain_committed(&self, m: &dyn Medium) -> Result<u64> {
        if self.layout.plain_off.is_none() {
            return Ok(0);
        }
        let mut n = 0;
        for p in 0..self.layout.npages {
            n += u64::from(self.map_entry(m, p)?.is_plain());
        }
        Ok(n)
    }
}
