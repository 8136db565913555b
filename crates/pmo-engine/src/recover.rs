//! Recovery of one PMO after a crash (the newest valid commit record's journal re-applied), the
//! commit records and journals it reads, and the structural check of `pmo check`.

use pmo_format::layout::{PageLoc, PageMapEntry, JOURNAL_ENTRY_SIZE};
use pmo_format::record::{CommitRecord, JournalEntry, Trailer, TRAILER_SIZE};
use pmo_format::{crc, PAGE_SIZE};
use pmo_medium::Medium;
use pmo_meta::error::{Result, StoreError};

use crate::engine::{CommittedMap, PmoCore, RecoverReport};

/// A journaled page whose map entry on the medium is newer than its journal entry.
type Damaged = (JournalEntry, PageMapEntry);

/// Whether map entry `cur` is newer than `journaled`, the newest intact commit's entry for
/// the same page: no crash leaves that (psync `s` sets entries only after record `s` is
/// durable), so a newer commit record is damaged.
fn newer(cur: PageMapEntry, journaled: PageMapEntry) -> bool {
    cur.loc().is_some() && cur.version() > journaled.version()
}

impl PmoCore {
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
    pub fn newest_record(&self, m: &dyn Medium) -> Result<Option<CommitRecord>> {
        Ok(self.records(m)?.0)
    }

    /// Whether both commit record slots hold a valid record or zeros: nothing a recovery
    /// would clear and report (a reader with no writer may skip it then, `pmo-pool`).
    pub fn records_intact(&self, m: &dyn Medium) -> Result<bool> {
        Ok(self.records(m)?.1.is_empty())
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
            if newer(cur, e.entry) {
                return Err(self.newer_than_newest(e, cur, record.seq));
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
    pub fn committed_map(&self, m: &dyn Medium) -> Result<Option<CommittedMap>> {
        self.committed_read(m, |journal| {
            let mut raw = vec![0u8; (self.layout.npages * 8) as usize];
            m.read(self.abs(self.layout.map_off), &mut raw)?;
            let mut table: Vec<u64> = raw
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            let mut damaged = None;
            for e in journal {
                let cur = PageMapEntry(table[e.page as usize]);
                if damaged.is_none() && newer(cur, e.entry) {
                    damaged = Some((*e, cur));
                }
                table[e.page as usize] = e.entry.0;
            }
            Ok((table, damaged))
        })
    }

    /// [`PmoCore::committed_map`] for `pages` only (ascending): their entries as of the newest
    /// psync, read the same way; `None` if a psync committed while they were read.
    pub fn committed_entries(&self, m: &dyn Medium, pages: &[u64]) -> Result<Option<CommittedMap>> {
        self.committed_read(m, |journal| {
            let sorted = journal.windows(2).all(|w| w[0].page < w[1].page);
            let mut entries = Vec::with_capacity(pages.len());
            let mut damaged = None;
            for &p in pages {
                if p >= self.layout.npages {
                    return Err(StoreError::Invalid(format!(
                        "PMO '{}': page {p} is beyond its {} pages",
                        self.name, self.layout.npages
                    )));
                }
                // A psync's journal lists its pages ascending; one that does not is searched
                // whole, applied as `committed_map` applies it (the last entry of a page wins).
                let found = if sorted {
                    journal
                        .binary_search_by_key(&p, |j| j.page)
                        .ok()
                        .map(|i| journal[i])
                } else {
                    journal.iter().rev().find(|j| j.page == p).copied()
                };
                let cur = self.map_entry(m, p)?;
                let e = match found {
                    Some(j) => {
                        if damaged.is_none() && newer(cur, j.entry) {
                            damaged = Some((j, cur));
                        }
                        j.entry
                    }
                    None => cur,
                };
                entries.push(e.0);
            }
            Ok((entries, damaged))
        })
    }

    /// The newest psync's journal, `read` (the map entries the caller wants, from the medium
    /// with that journal applied, and the first journaled page whose entry on the medium is
    /// newer than the journal's), and the journal's trailer, bracketed by two reads of the
    /// newest commit record: `None` if a psync committed meanwhile (`committed_map`).
    ///
    /// A page mapped newer than the newest intact commit says of a snapshot what it says of
    /// recovery (`recover`): a newer commit record is damaged, and the map mixes two psyncs.
    /// Under a scheme without tags nothing else would catch it, so it is an integrity error,
    /// raised only once the second read of the record shows no psync committed meanwhile
    /// (a psync sets map entries only after its record is durable, so within an unchanged
    /// bracket no live psync explains it).
    fn committed_read(
        &self,
        m: &dyn Medium,
        read: impl FnOnce(&[JournalEntry]) -> Result<(Vec<u64>, Option<Damaged>)>,
    ) -> Result<Option<CommittedMap>> {
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
        let (entries, damaged) = read(&journal)?;
        fence(Ordering::SeqCst);
        if self.newest_record(m)?.map(|r| r.seq) != before.map(|r| r.seq) {
            return Ok(None);
        }
        let seq = before.map_or(0, |r| r.seq);
        if let Some((j, cur)) = damaged {
            return Err(self.newer_than_newest(&j, cur, seq));
        }
        Ok(Some((seq, entries, trailer)))
    }

    /// The error of a page mapped at `cur`, newer than journal entry `j` of the newest intact
    /// commit `seq`.
    fn newer_than_newest(&self, j: &JournalEntry, cur: PageMapEntry, seq: u64) -> StoreError {
        StoreError::Corrupt(format!(
            "PMO '{}': page {} is mapped at version {}, newer than the newest intact commit ({}, version {}): a newer commit record is damaged",
            self.name,
            j.page,
            cur.version(),
            seq,
            j.entry.version()
        ))
    }

    /// The pages the newest committed psync wrote (its journal), with its sequence number.
    pub fn newest_pages(&self, m: &dyn Medium) -> Result<Option<(u64, Vec<u64>)>> {
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
}
