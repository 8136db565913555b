//! A psync's commit of one PMO (the steps in [`crate::engine`]'s header): pages to their free
//! slots, the journal, the commit record (the commit point), then the page-map entries; and the
//! initialisation of a new PMO's extent.
#![allow(unsafe_code)] // reading the attached view's pages in place.

use std::time::Instant;

use pmo_crypt::PAGE_META_LEN;
use pmo_format::layout::{PageLoc, PageMapEntry, JOURNAL_ENTRY_SIZE};
use pmo_format::record::{CommitRecord, JournalEntry, TRAILER_SIZE};
use pmo_format::{crc, PAGE_SIZE};
use pmo_medium::Medium;
use pmo_meta::error::{Result, StoreError};

use crate::engine::{CommitSource, CommitStats, Page, PmoCore};
use crate::protect::Protection;

/// Pages a protected psync seals at once (4 MiB of buffers at most, on a medium that is not
/// memory): enough work to spread over the crypto workers.
const SEAL_BATCH_PAGES: usize = 512;

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

impl PmoCore {
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
        let _gate = crate::gate::pass_gate(self, m)?;
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
        // Readers beside this writer: keep the slot contents their snapshots show (pins.rs).
        let pin_table = self.pins.for_commit(*seq)?;
        if let Some(t) = &pin_table {
            let mut current = |p: u64| match prot {
                Some(pr) => Ok(pr.entry(p)),
                None => self.map_entry(m, p),
            };
            self.keep_pinned(m, t, *seq, new_seq, pages, &mut current)?;
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
        if let Some(t) = &pin_table {
            t.committed(new_seq, pages);
        }
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
    pub fn publish(&self, m: &dyn Medium, seq: u64, journal: &[u8], count: u64) -> Result<()> {
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
}
