//! Page-level PMO handles: opening a PMO (key check, attach lock, recovery) and reading and
//! committing its pages without a mapping; what a handle's drop finishes on the medium.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pmo_format::{Entry, PAGE_SIZE};
use pmo_medium::Medium;
use pmo_os::lock::LockKind;

use crate::attach_lock::{write_holder, READER_ATTACH_STALL};
pub use crate::attach_lock::{
    BUSY_ATTACHING, BUSY_READERS, BUSY_WRITER, BUSY_WRITER_HERE, DETACHING,
};
use crate::pool::{Perm, Pool};
use pmo_engine::engine::{CommitSource, CommitStats, Page, PmoCore};
use pmo_engine::protect::Protection;
use pmo_meta::error::{Result, StoreError};
use pmo_meta::keys::{self, MasterKey};
use pmo_meta::locks::{self, LockGuard};
use pmo_meta::scheme::Scheme;

impl Pool {
    /// Open a PMO for page-level access (no mapping): the key is checked and the attach lock
    /// taken exactly as for a mapped attach, and the PMO is recovered first. `wait`: how long to
    /// wait for a conflicting user to detach (`None`: fail at once with `Busy`).
    pub fn open_pmo(
        &self,
        name: &str,
        perm: Perm,
        key: &[u8],
        wait: Option<Duration>,
    ) -> Result<PmoHandle> {
        self.open_pmo_as(name, perm, key, wait, None)
    }

    /// [`Pool::open_pmo`] running the PMO under protection design `scheme` instead of the one
    /// it was created with (`None`: that one). `scheme` must store pages exactly as the PMO's
    /// own does ([`Scheme::same_at_rest`]): a PMO created `sp-id` may be attached as `bp-ip`,
    /// `bp-id`, `sp-ip` or `sp-id`, one created `wed` as `bp` or `sp`.
    pub fn open_pmo_as(
        &self,
        name: &str,
        perm: Perm,
        key: &[u8],
        wait: Option<Duration>,
        scheme: Option<Scheme>,
    ) -> Result<PmoHandle> {
        self.open_pmo_with(name, perm, key, wait, scheme, false)
    }

    /// [`Pool::open_pmo_as`]; `exclusive_read`: a reader excludes the writer (the research
    /// kernel's rule: it shares the attach lock with other readers) instead of attaching
    /// beside it as a snapshot (`crate::reader`).
    pub fn open_pmo_with(
        &self,
        name: &str,
        perm: Perm,
        key: &[u8],
        wait: Option<Duration>,
        scheme: Option<Scheme>,
        exclusive_read: bool,
    ) -> Result<PmoHandle> {
        self.open_held(name, perm, key, wait, scheme, exclusive_read, None)
    }

    /// [`Pool::open_pmo_with`]; `held`: the PMO's attach lock and the extent it was taken
    /// for, already taken exclusively by the caller (a reader's open with no writer, whose
    /// handle is dropped at once: it is not downgraded to shared then, and not taken twice).
    #[allow(clippy::too_many_arguments)]
    fn open_held(
        &self,
        name: &str,
        perm: Perm,
        key: &[u8],
        wait: Option<Duration>,
        scheme: Option<Scheme>,
        exclusive_read: bool,
        held: Option<(pmo_meta::locks::LockGuard, u64)>,
    ) -> Result<PmoHandle> {
        let run_as = scheme;
        let inner = &*self.inner;
        let passing = held.is_some();
        inner.alive()?;
        let entry = self.entry(name)?;
        let master = keys::check_key(&entry, key)?;
        if perm == Perm::Read {
            let own = Scheme::from_code(entry.scheme)?;
            let runs = crate::reader::run_scheme(name, own, run_as)?;
            if crate::reader::beside_writer(runs) && !exclusive_read {
                if self.pre_open_needless(&entry, runs)? {
                    return self.open_snapshot_reader(entry, runs, master, key);
                }
                // No writer: first the open every user makes (recovery of a half psync, a
                // damaged record reported, a rotation finished, the sub-page log folded).
                if let Some(g) = self.lock_attach_exclusive(&entry, None)? {
                    let held = Some((g, entry.extent_off));
                    let h = self.open_held(name, Perm::Read, key, None, run_as, true, held)?;
                    // A rotation a crash cut off, which a read-only open does not finish: its
                    // pages are under two keys, which a snapshot cannot read. This reader
                    // keeps the exclusive rule (a writer's open finishes the rotation).
                    if runs.is_protected()
                        && crate::rotation::read_record(&*inner.medium, &h.core)?.is_some()
                    {
                        return Ok(h);
                    }
                }
                return self.open_snapshot_reader(entry, runs, master, key);
            }
        }
        let checked_uuid = entry.uuid;
        let word = locks::attach_word(entry.extent_off);
        let span = locks::attach_span(entry.extent_len);
        let t_lock = std::time::Instant::now();
        // Take the lock exclusively first so a dead writer's half-done psync can be replayed,
        // then (readers) downgrade. Readers that find other readers just share.
        // A holder finishing a detach in the background is waited for (the attach stall).
        // A PMO whose plaintext copy lives on the medium has one user at a time, readers
        // included: each attach fills the shared plaintext area and each detach scrubs it.
        let sole = perm == Perm::Write || entry.scheme & pmo_meta::scheme::SHADOW_MEDIUM_BIT != 0;
        let first = match held {
            // Taken on the extent the entry still names (a resize before it was taken moves it).
            Some((g, extent_off)) if extent_off == entry.extent_off => Some(g),
            _ => self.lock_attach_exclusive(&entry, if sole { wait } else { None })?,
        };
        let (mut guard, exclusive) = match first {
            Some(g) => (g, true),
            None if !sole => match inner.locker.lock_span(word, span, LockKind::Shared, wait)? {
                Some(g) => (g, false),
                // Held alone, and no writer named in the holder word: another reader's attach,
                // which holds the lock alone only while it recovers the PMO, then shares it.
                // Wait for that instant rather than fail (readers starting together).
                None if self.writer_pid(&entry) == 0 => {
                    let stall = wait.unwrap_or_default().max(READER_ATTACH_STALL);
                    match inner
                        .locker
                        .lock_span(word, span, LockKind::Shared, Some(stall))?
                    {
                        Some(g) => (g, false),
                        None => return Err(self.busy(&entry)),
                    }
                }
                None => return Err(self.busy(&entry)),
            },
            None => return Err(self.busy(&entry)),
        };
        // The entry may have been destroyed or replaced while we waited (a rotation replaces
        // the data master it gives: check the key again).
        let checked_gen = entry.generation;
        let first_extent = entry.extent_off;
        let entry = self.entry(name)?;
        if entry.uuid != checked_uuid {
            return Err(StoreError::NotFound(name.into()));
        }
        if entry.extent_off != first_extent {
            // Resized meanwhile: the lock taken is the old extent's; take the new one's.
            drop(guard);
            return self.open_pmo_with(name, perm, key, wait, run_as, exclusive_read);
        }
        pmo_meta::entries::check_in_medium(&entry, &*inner.medium)?;
        let master = if entry.generation != checked_gen {
            keys::check_key(&entry, key)?
        } else {
            master
        };
        let mut core = PmoCore::new(&entry)?;
        core.gate = Some(inner.locker.clone());
        core.pins = pmo_pins::WriterPins::new(self.pins_at(&core));
        let core = Arc::new(core);
        pmo_engine::stats::SessionCounters::add(
            &core.stats.attach_stall_ns,
            t_lock.elapsed().as_nanos() as u64,
        );
        let r = if exclusive {
            core.recover(&*inner.medium)
                .map(|r| r.note.into_iter().for_each(|n| inner.note_repair(n)))
        } else {
            core.recover_readonly(&*inner.medium)
        };
        inner.poison(r)?;
        let scheme = Scheme::from_code(entry.scheme)?;
        if entry.tag_bytes != scheme.tag_bytes() {
            return Err(StoreError::Corrupt(format!(
                "PMO '{name}': scheme {scheme} with {} metadata bytes per page (expected {})",
                entry.tag_bytes,
                scheme.tag_bytes()
            )));
        }
        let scheme = crate::reader::run_scheme(name, scheme, run_as)?;
        let master = if scheme.is_protected() {
            crate::rotation::on_open(self, &core, scheme, master, exclusive)?
        } else {
            master
        };
        let prot = if scheme.is_protected() {
            Some(Arc::new(Protection::open(
                core.clone(),
                inner.medium.clone(),
                scheme,
                &master,
                inner.sb.uuid,
            )?))
        } else {
            None
        };
        if exclusive {
            // Psynced bytes a crash or a detach left in the sub-page log go into their pages.
            pmo_engine::sublog::recover(
                &core,
                &*inner.medium,
                prot.as_deref(),
                &inner.sb.uuid,
                &inner.health,
            )?;
        }
        if perm == Perm::Read && exclusive && !sole && !passing {
            guard.downgrade()?;
        }
        if perm == Perm::Write {
            let _ = write_holder(&*inner.medium, &core, pmo_os::lock::pid());
        }
        Ok(PmoHandle {
            pool: self.clone(),
            core,
            perm,
            _lock: Some(guard),
            master,
            prot,
            scrub: None,
            whole_verified: AtomicBool::new(false),
            reader: None,
        })
    }

    /// Whether a reader may skip the open every user makes under the attach lock before its
    /// snapshot (`docs/readers.md`): that open has nothing to do that the snapshot does not do
    /// itself or refuse. The snapshot reads the newest committed psync as the map with its
    /// journal applied (a half psync needs no replay) and the sub-page log's records over it
    /// (no fold needed), and refuses a map newer than the newest intact record (a damaged
    /// newest record). Left to that open: the last writer did not detach cleanly (its pid or
    /// the detaching mark in the holder word), a record slot holds neither zeros nor a valid
    /// record (recovery clears and reports it), a rotation was cut off (its pages are under
    /// two keys), or plaintext a crash left on the medium is still to be scrubbed.
    fn pre_open_needless(&self, entry: &Entry, runs: Scheme) -> Result<bool> {
        if self.holder_word(entry) != 0 {
            return Ok(false);
        }
        let m = &*self.inner.medium;
        let core = PmoCore::new(entry)?;
        Ok(core.records_intact(m)?
            && !(runs.is_protected() && crate::rotation::read_record(m, &core)?.is_some())
            && !(core.layout.plain_off.is_some() && core.plain_marked(m)?))
    }

    /// A read-only handle beside any writer (`crate::reader`): no attach lock, no recovery.
    fn open_snapshot_reader(
        &self,
        entry: Entry,
        scheme: Scheme,
        master: MasterKey,
        key: &[u8],
    ) -> Result<PmoHandle> {
        let inner = &*self.inner;
        pmo_meta::entries::check_in_medium(&entry, &*inner.medium)?;
        if entry.tag_bytes != scheme.tag_bytes() {
            return Err(StoreError::Corrupt(format!(
                "PMO '{}': scheme {scheme} with {} metadata bytes per page (expected {})",
                entry.name,
                entry.tag_bytes,
                scheme.tag_bytes()
            )));
        }
        let core = Arc::new(PmoCore::new(&entry)?);
        if scheme.is_protected() && crate::rotation::read_record(&*inner.medium, &core)?.is_some() {
            return Err(StoreError::Busy {
                name: entry.name.clone(),
                how:
                    "read-write by a key rotation that has not finished (`pmo rotate` finishes it)",
            });
        }
        let reader = self.open_reader(core.clone(), scheme, &master)?;
        // Holding the pin-table lock now, the PMO cannot be destroyed, renamed or resized
        // under us; it may have been before we took it.
        let now = self.entry(&entry.name)?;
        if now.uuid != entry.uuid
            || now.extent_off != entry.extent_off
            || now.size != entry.size
            || now.generation != entry.generation
        {
            drop(reader);
            let master = keys::check_key(&now, key)?;
            return self.open_snapshot_reader(now, scheme, master, key);
        }
        Ok(PmoHandle {
            pool: self.clone(),
            core,
            perm: Perm::Read,
            _lock: None,
            master,
            prot: None,
            scrub: None,
            whole_verified: AtomicBool::new(false),
            reader: Some(Arc::new(reader)),
        })
    }
}

impl PmoHandle {
    /// Whether dropping this handle has work on the medium (a background detach is worth it).
    pub fn has_detach_work(&self) -> bool {
        self.scrub.is_some()
            || self.perm == Perm::Write
                && self
                    .prot
                    .as_ref()
                    .is_some_and(|p| p.has_detach_work() || p.plain_session())
    }

    /// Set the plaintext word before a mapped attach fills the plaintext area on the medium.
    pub fn begin_plain(&mut self) -> Result<()> {
        let r = self.core.mark_plain(self.medium());
        self.pool.inner.poison(r)?;
        // Until the mapping reports what it filled (a successful attach's detach), all of it.
        self.scrub = Some(PlainScrub::All);
        Ok(())
    }

    /// The pages of the plaintext area the mapping filled: zeroed when the handle drops.
    pub fn plain_pages(&mut self, pages: Vec<u64>) {
        if self.scrub.is_some() {
            self.scrub = Some(PlainScrub::Pages(pages));
        }
    }

    /// The whole-PMO checksum was verified (by an attach, over its view).
    pub fn mark_whole_verified(&self) {
        self.whole_verified.store(true, Ordering::Release);
    }

    /// Mark the holder word "detaching" (informational: attaches then wait instead of failing).
    pub fn mark_detaching(&self) {
        let _ = write_holder(self.medium(), &self.core, pmo_os::lock::pid() | DETACHING);
    }

    /// Record a finished writer session in the PMO header page (informational: no fence).
    pub fn record_session(&self, s: &pmo_engine::stats::SessionStats) {
        if self.perm != Perm::Write || self.pool.inner.health.is_poisoned() {
            return;
        }
        let off = self.core.extent_off + pmo_engine::stats::RECORD_OFF;
        let m = self.medium();
        let _ = m.write(off, &s.encode()).and_then(|_| m.flush(off, 128));
    }
}

impl Drop for PmoHandle {
    fn drop(&mut self) {
        let mut plain_committed = false;
        if let Some(p) = &self.prot {
            if self.perm == Perm::Write && !self.pool.inner.health.is_poisoned() {
                // BP on the medium: encrypt the pages psync committed as plaintext. On failure
                // they stay flagged under the plaintext word: the next keyed open encrypts them.
                plain_committed = p.plain_session();
                if plain_committed && p.encrypt_plain_pages().is_err() {
                    self.pool.inner.health.set_poisoned();
                }
                // Integrity at detach; on failure the pending word stays and the next attach's
                // crash handler repairs.
                let _ = p.finish_detach();
            }
        }
        if !self.pool.inner.health.is_poisoned() {
            // Zero the plaintext area the mapping filled, then clear the plaintext word. A
            // session without a mapping (page-level BP commits) filled no area: with its
            // plaintext encrypted above, only the word is left to clear. On failure the word
            // stays set: the next open or attach scrubs everything. (Done in the background
            // detach: a later attach's stall shows its cost.)
            let scrub = self.scrub.take();
            let m = self.medium();
            let r = match scrub {
                Some(PlainScrub::All) => self.core.scrub_plain(m, None),
                Some(PlainScrub::Pages(pages)) => self.core.scrub_plain(m, Some(&pages)),
                None if plain_committed => self.core.clear_plain_word(m),
                None => Ok(()),
            };
            if r.is_err() {
                self.pool.inner.health.set_poisoned();
            }
        }
        if self.perm == Perm::Write && !self.pool.inner.health.is_poisoned() {
            let _ = write_holder(self.medium(), &self.core, 0);
        }
        // Before the attach lock goes (a field dropped after this): the next writer must find
        // the pin table left, not still held by this core (`WriterPins::leave`).
        self.core.pins.leave();
    }
}

/// An attached PMO without a mapping: page-level reads and atomic commits. Holds the attach lock
/// (shared for readers, exclusive for the writer) until dropped.
pub struct PmoHandle {
    pool: Pool,
    pub core: Arc<PmoCore>,
    perm: Perm,
    /// The attach lock (`None` for a reader beside a writer, which takes none).
    _lock: Option<LockGuard>,
    #[allow(dead_code)] // kept for the protection layer (detach-time work)
    pub master: MasterKey,
    /// At-rest protection (`None`: scheme `none`).
    pub prot: Option<Arc<Protection>>,
    /// What of the plaintext area a mapped attach filled on the medium, zeroed at drop (`None`:
    /// the plaintext copy is not on the medium, or this handle never mapped it).
    scrub: Option<PlainScrub>,
    /// Whether the whole-PMO checksum (`wedi`) was verified by this handle (a commit by the
    /// handle keeps it true: it computed the new checksum from verified pages).
    whole_verified: AtomicBool,
    /// A reader beside a writer: its pin and snapshot (`crate::reader`).
    reader: Option<Arc<crate::reader::ReaderState>>,
}

/// The plaintext-area pages a handle's drop zeroes.
enum PlainScrub {
    /// All of them (until the mapping reports what it filled: a failed attach).
    All,
    /// These, which the mapping filled.
    Pages(Vec<u64>),
}

impl PmoHandle {
    /// The PMO's name.
    pub fn name(&self) -> &str {
        &self.core.name
    }
    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.core.size()
    }
    /// Stable virtual address recorded for the PMO.
    pub fn base_addr(&self) -> u64 {
        self.core.base_addr
    }
    /// Read-only or read-write.
    pub fn perm(&self) -> Perm {
        self.perm
    }
    /// The pool this PMO lives in.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }
    /// Sequence number of the newest committed psync (a reader: the one its snapshot shows).
    pub fn seq(&self) -> u64 {
        match &self.reader {
            Some(r) => r.snapshot().seq,
            None => self.core.seq(),
        }
    }

    /// A reader beside a writer's state (`None`: a writer, or a reader excluding writers).
    pub fn reader(&self) -> Option<&Arc<crate::reader::ReaderState>> {
        self.reader.as_ref()
    }

    /// Move a reader to the newest psync (`crate::reader`); the caller drops the changed pages
    /// it holds, then calls [`PmoHandle::refreshed`]. `Invalid` for a handle that is not a
    /// reader beside a writer.
    pub fn refresh(&self) -> Result<crate::reader::Refreshed> {
        self.pool.inner.alive()?;
        match &self.reader {
            Some(r) => r.refresh(&self.core, &self.master),
            None => Err(StoreError::Invalid(format!(
                "PMO '{}' is attached {}: only a read-only attachment refreshes to a newer psync",
                self.core.name,
                if self.perm == Perm::Write {
                    "read-write"
                } else {
                    "read-only under a scheme whose readers exclude the writer"
                }
            ))),
        }
    }

    /// The pages a refresh changed are dropped: the old snapshot's pin goes.
    pub fn refreshed(&self) {
        if let Some(r) = &self.reader {
            r.refreshed();
        }
    }
    pub fn medium(&self) -> &dyn Medium {
        &*self.pool.inner.medium
    }

    /// The PMO's protection scheme.
    pub fn scheme(&self) -> Scheme {
        if let Some(r) = &self.reader {
            return r.scheme();
        }
        self.prot.as_ref().map_or(Scheme::NONE, |p| p.scheme())
    }

    /// The protection state (`None` for scheme `none`).
    pub fn protection(&self) -> Option<&Arc<Protection>> {
        self.prot.as_ref()
    }

    /// Read one page as of the last psync (decrypted and verified for protected PMOs). Under
    /// a whole-PMO checksum (`wedi`) the first read of the handle verifies the whole PMO: no
    /// byte is returned that the checksum does not cover.
    pub fn read_page(&self, page: u64, dst: &mut Page) -> Result<()> {
        self.pool.inner.alive()?;
        if let Some(r) = &self.reader {
            let snap = r.snapshot();
            if let Some(p) = snap.protection().filter(|p| p.keeps_whole_checksum()) {
                if !self.whole_verified.load(Ordering::Acquire) {
                    let mut pages = vec![[0u8; PAGE_SIZE as usize]; self.size_pages_usize()];
                    for (i, pg) in pages.iter_mut().enumerate() {
                        self.reader_fill(r, i as u64, pg)?;
                    }
                    p.verify_whole(pages.iter())?;
                    self.whole_verified.store(true, Ordering::Release);
                }
            }
            return self.reader_fill(r, page, dst);
        }
        match &self.prot {
            None => self.core.read_page(self.medium(), page, dst),
            Some(p) if p.keeps_whole_checksum() && !self.whole_verified.load(Ordering::Acquire) => {
                p.verify_whole_on_medium()?;
                self.whole_verified.store(true, Ordering::Release);
                self.read_page(page, dst)
            }
            Some(p) => p.fill(page, dst).map_err(|reason| StoreError::Integrity {
                name: self.core.name.clone(),
                page,
                reason: reason.into(),
            }),
        }
    }

    fn size_pages_usize(&self) -> usize {
        (self.size() / PAGE_SIZE) as usize
    }

    fn reader_fill(&self, r: &crate::reader::ReaderState, page: u64, dst: &mut Page) -> Result<()> {
        r.fill(&self.core, page, dst)
            .map_err(|reason| StoreError::Integrity {
                name: self.core.name.clone(),
                page,
                reason: reason.into(),
            })
    }

    /// Read bytes at `offset` as of the last psync.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        if offset
            .checked_add(buf.len() as u64)
            .is_none_or(|e| e > self.size())
        {
            return Err(StoreError::Invalid(format!(
                "range {offset}+{} is outside the {}-byte PMO",
                buf.len(),
                self.size()
            )));
        }
        let mut page = Box::new([0u8; PAGE_SIZE as usize]);
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let (p, within) = (pos / PAGE_SIZE, (pos % PAGE_SIZE) as usize);
            self.read_page(p, &mut page)?;
            let n = (PAGE_SIZE as usize - within).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&page[within..within + n]);
            done += n;
        }
        Ok(())
    }

    /// Atomically replace whole pages (ascending, unique): one psync.
    pub fn commit_pages(&self, pages: &[(u64, &Page)]) -> Result<CommitStats> {
        let idx: Vec<u64> = pages.iter().map(|p| p.0).collect();
        self.commit_with(&idx, &mut |p, dst| {
            let (_, src) = pages.iter().find(|x| x.0 == p).expect("page from the list");
            dst.copy_from_slice(&src[..]);
            Ok(())
        })
    }

    /// Atomically write `data` at `offset` (read-modify-write of the touched pages): one psync.
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<CommitStats> {
        if offset
            .checked_add(data.len() as u64)
            .is_none_or(|e| e > self.size())
        {
            return Err(StoreError::Invalid(format!(
                "range {offset}+{} is outside the {}-byte PMO",
                data.len(),
                self.size()
            )));
        }
        if data.is_empty() {
            return Ok(CommitStats {
                seq: self.seq(),
                ..Default::default()
            });
        }
        let first = offset / PAGE_SIZE;
        let last = (offset + data.len() as u64 - 1) / PAGE_SIZE;
        let pages: Vec<u64> = (first..=last).collect();
        self.commit_with(&pages, &mut |p, dst| {
            // Through the protection: the current contents, decrypted and verified.
            self.read_page(p, dst)?;
            let page_start = p * PAGE_SIZE;
            let lo = offset.max(page_start);
            let hi = (offset + data.len() as u64).min(page_start + PAGE_SIZE);
            dst[(lo - page_start) as usize..(hi - page_start) as usize]
                .copy_from_slice(&data[(lo - offset) as usize..(hi - offset) as usize]);
            Ok(())
        })
    }

    /// Commit `pages` with contents from `src`. For a scheme with a whole-PMO checksum
    /// (`wedi`) the checksum of the new contents is computed here, reading every other page.
    pub fn commit_with(
        &self,
        pages: &[u64],
        src: &mut dyn FnMut(u64, &mut Page) -> Result<()>,
    ) -> Result<CommitStats> {
        if !self.prot.as_ref().is_some_and(|p| p.keeps_whole_checksum()) || pages.is_empty() {
            return self.commit_with_checksum(pages, CommitSource::Fill(src), None, false);
        }
        let mut new_pages: Vec<(u64, Box<Page>)> = Vec::with_capacity(pages.len());
        for &p in pages {
            let mut b = Box::new([0u8; PAGE_SIZE as usize]);
            src(p, &mut b)?;
            new_pages.push((p, b));
        }
        let mut h = pmo_crypt::WholePmoChecksum::new();
        let mut cur = Box::new([0u8; PAGE_SIZE as usize]);
        for p in 0..self.core.npages() {
            match new_pages.binary_search_by_key(&p, |x| x.0) {
                Ok(i) => h.update_page(&new_pages[i].1),
                Err(_) => {
                    self.read_page(p, &mut cur)?;
                    h.update_page(&cur);
                }
            }
        }
        let sum = h.finish().0;
        self.commit_with_checksum(
            pages,
            CommitSource::Fill(&mut |p, dst| {
                let i = new_pages
                    .binary_search_by_key(&p, |x| x.0)
                    .map_err(|_| StoreError::Invalid("page not in the commit".into()))?;
                dst.copy_from_slice(&new_pages[i].1[..]);
                Ok(())
            }),
            Some(sum),
            false,
        )
    }

    /// Commit with a whole-PMO checksum the caller computed (an attachment, from its view);
    /// `defer_checksums` as for [`PmoCore::commit`](pmo_engine::engine::PmoCore::commit).
    pub fn commit_with_checksum(
        &self,
        pages: &[u64],
        src: CommitSource<'_>,
        whole_checksum: Option<[u8; 32]>,
        defer_checksums: bool,
    ) -> Result<CommitStats> {
        let inner = &*self.pool.inner;
        inner.alive()?;
        if self.perm != Perm::Write {
            return Err(StoreError::ReadOnly(self.name().into()));
        }
        let r = self.core.commit(
            &*inner.medium,
            pages,
            src,
            self.prot.as_deref(),
            whole_checksum,
            defer_checksums,
        );
        inner.poison(r)
    }
}

/// The sub-page commit log at a handle (`pmo_engine::sublog` does the work).
impl PmoHandle {
    /// At a writer's detach, after its view is gone: fold the live records into their pages,
    /// rebuilt from slot + records (never from the view, whose bytes since the last psync are
    /// discarded). A failure poisons the pool; the next open folds them again.
    pub fn fold_log(&self) {
        let inner = &*self.pool.inner;
        pmo_engine::sublog::fold_log(
            &self.core,
            &*inner.medium,
            self.prot.as_deref(),
            &inner.health,
        )
    }

    /// After a shrink dropped pages: fold any live record, then zero the log area
    /// (`pmo_engine::sublog::scrub_log`).
    pub fn scrub_log(&self) -> Result<()> {
        pmo_engine::sublog::scrub_log(&self.core, &*self.pool.inner.medium, self.prot.as_deref())
    }
}
