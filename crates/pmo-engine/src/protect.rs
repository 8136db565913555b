//! At-rest protection of one attached PMO: the page protector chosen by the scheme, the
//! verified page-map entries kept in DRAM, and the writer's version counter and table MAC.
//!
//! Owns the obligations of `docs/security.md` §13 on the store's side:
//! - keys are derived once per attach from the (cached) per-PMO master key and dropped (zeroized)
//!   at detach;
//! - at attach the page map is read once and, for the `secure` scheme, verified against the
//!   version-table tag committed in the newest journal trailer (each entry but its wide check
//!   is MACed, so the tag also covers which slot each page lives in); every later fill uses this
//!   verified DRAM copy, never the medium's map;
//! - every seal takes a fresh version from the PMO's [`VersionCounter`], from a range whose upper
//!   end was persisted (fenced) in the header page first; the commit's epoch is one more fresh
//!   value; the counter resumes after a crash above the persisted reservation, every committed
//!   version and the committed epoch, so no (page, version) nonce repeats under a key;
//! - an integrity failure is final: the fill fails (the faulting thread gets the documented
//!   fatal report), the attach or read returns an integrity error; nothing is retried.
//!
//! Fill runs in the page-fault handler: it takes no lock and does not allocate (the medium read
//! and [`PageProtector::open`] are allocation-free; the sealed copy lives on the fill stack).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use pmo_crypt::{
    CryptoPool, PageProtector, PmoKeys, VersionCounter, VersionTableMac, WholePmoChecksum,
    PAGE_META_LEN,
};
use pmo_format::layout::{PageLoc, PageMapEntry, PmoLayout};
use pmo_format::Trailer;
use pmo_medium::Medium;

use crate::engine::{Page, PmoCore};
use pmo_meta::error::{Result, StoreError};
use pmo_meta::scheme::{Cipher, Scheme};

/// Versions reserved by one reservation commit (two extra fences per this many seals).
pub const RESERVATION_CHUNK: u64 = 1 << 16;

/// Domain of the trailer MAC (`secure`).
pub(crate) const TRAILER_MAC_DOMAIN: &[u8] = b"pmo/v2/trailer";

/// How [`Protection::open_with`] gets the map and what it may write.
pub(crate) enum Mode {
    /// An attach: the map and trailer from the medium, verified; crash handlers run.
    Attach,
    /// A live snapshot: this committed map and trailer, verified; nothing written.
    Live(Vec<u64>, Option<Trailer>),
    /// A rotation's keys: this map, not verified, and versions from above this floor (the
    /// newest commit's reservation); nothing written.
    Fresh(Vec<u64>, u64),
}

/// The writer's crypto state, changed only by a successful commit.
#[derive(Clone)]
pub struct WriteState {
    pub counter: VersionCounter,
    pub mac: Option<VersionTableMac>,
    /// The reservation of the newest commit (carried into every trailer).
    pub reservation: u64,
}

/// Offset (in the PMO header page) of the integrity-pending word of `*-id` schemes: non-zero
/// while pages committed since the last detach lack their checksums (written and fenced before
/// the first such commit; cleared, fenced, after the checksums are durable at detach).
pub const ID_PENDING_OFF: u64 = 128;

/// One page for [`Protection::seal_batch`].
pub struct SealJob<'a> {
    pub page_index: u64,
    pub version: u64,
    /// The plaintext; `None`: it is in `out`, sealed in place.
    pub input: Option<&'a Page>,
    /// Where the at-rest page goes.
    pub out: &'a mut Page,
    /// The metadata slot, set by the seal.
    pub meta: [u8; PAGE_META_LEN],
}

/// Protection state of one attached PMO.
pub struct Protection {
    pub(crate) scheme: Scheme,
    /// Opens (and verifies) pages.
    pub(crate) protector: PageProtector,
    /// Seals pages at psync: the same as `protector`, except for integrity-at-detach schemes,
    /// which seal without the checksum (it is computed at detach).
    pub(crate) sealer: Option<PageProtector>,
    /// XTS without the checksum, for a PMO with per-page checksums run under integrity at
    /// psync (`None` otherwise): a psync that defers checksums (`psync_nochecksum`) seals with
    /// it, leaving the pages' checksums to detach as an integrity-at-detach session does, and
    /// the crash handler rebuilds them with it when such a session died.
    pub(crate) repair: Option<PageProtector>,
    /// BP with the plaintext copy on the medium: psync commits pages as plaintext (flagged in
    /// the page map, with their checksum for `bp-ip`), detach encrypts them.
    pub(crate) bp_plain: bool,
    /// Set while the pages committed as plaintext are being encrypted (a sealing commit).
    pub(crate) encrypting: AtomicBool,
    /// Whether the plaintext word is set for plaintext commits of this session.
    pub(crate) plain_session: Mutex<bool>,
    /// Pages committed (without their checksum) since the last detach (`*-id` schemes).
    /// One bit per page, set by a commit, cleared at detach (lock-free: the fill reads it).
    pub(crate) id_pages: Box<[AtomicU64]>,
    /// Whether the integrity-pending word is set for this session (guards its one write).
    pub(crate) id_session: Mutex<bool>,
    pub(crate) entries: Box<[AtomicU64]>,
    /// The whole-PMO checksum committed last (`wedi`), to verify at attach.
    pub(crate) whole_expected: Option<[u8; 32]>,
    pub write: Mutex<WriteState>,
    /// Sealed pages of a psync batch on media that are not memory (or page snapshots, sealed
    /// in place), kept between psyncs so that a psync does not fault in fresh heap pages (up to
    /// 512 pages).
    pub scratch: Mutex<Vec<Page>>,
    pub(crate) core: Arc<PmoCore>,
    pub(crate) medium: Arc<dyn Medium>,
}

impl std::fmt::Debug for Protection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Protection({}, {:?})", self.scheme, self.protector)
    }
}

pub(crate) fn integrity(core: &PmoCore, reason: impl Into<String>) -> StoreError {
    StoreError::IntegrityPmo {
        name: core.name.clone(),
        reason: reason.into(),
    }
}

impl Protection {
    pub(crate) fn write_id_pending(&self, v: u64) -> Result<()> {
        let m = &*self.medium;
        let off = self.core.abs(ID_PENDING_OFF);
        m.write(off, &v.to_le_bytes())?;
        m.flush(off, 8)?;
        m.fence()?;
        Ok(())
    }

    /// The crash handler of integrity-at-detach schemes: a session committed pages and ended
    /// without writing their checksums (the process died). Recompute the checksum of every
    /// written page from its current contents, make them durable, clear the pending word. Runs
    /// at attach under the exclusive attach lock (open recovers under it), before any page is
    /// used. As in the paper, the recomputed checksums vouch for whatever the committed pages
    /// hold: I_d trades that window for cheaper psyncs.
    pub(crate) fn crash_handler(&self) -> Result<()> {
        self.write_checksums(0..self.core.npages())
    }

    /// Recompute the checksum of each written page of `pages` from its committed contents
    /// (decrypted from the medium), make them durable, then clear the integrity-pending word.
    pub(crate) fn write_checksums(&self, pages: impl Iterator<Item = u64>) -> Result<()> {
        let Some(sealer) = self.sealer.as_ref().or(self.repair.as_ref()) else {
            return Ok(());
        };
        let layout = &self.core.layout;
        let m = &*self.medium;
        let mut sealed: Page = [0u8; 4096];
        let mut plain: Page = [0u8; 4096];
        for page in pages {
            let e = self.entry(page);
            let Some(PageLoc::Slot(s)) = e.loc() else {
                continue;
            };
            if e.is_plain() {
                continue; // its checksum comes with its encryption
            }
            m.read(self.core.abs(layout.page(s, page)), &mut sealed)?;
            sealer
                .open(
                    page,
                    e.version(),
                    &[0u8; PAGE_META_LEN],
                    &sealed,
                    &mut plain,
                )
                .map_err(crypt_err)?;
            let sum = pmo_crypt::page_checksum(&plain).0;
            let toff = self.core.abs(layout.tag(s, page));
            m.write(toff, &sum)?;
            m.flush(toff, PAGE_META_LEN as u64)?;
        }
        m.fence()?;
        self.write_id_pending(0)
    }

    /// Whether a psync may leave the per-page checksums of its pages to detach
    /// ([`Protection::can_defer_checksums`]): schemes with per-page checksums kept at psync
    /// (`bp-ip`, `sp-ip`), except BP with the plaintext copy on the medium (its plaintext
    /// commits carry their checksum until the sealing commit). An integrity-at-detach scheme
    /// defers them always; the others have none to defer (`none`, `bp`, `sp`, `wed`), or
    /// integrity that cannot wait (`secure`: the tag is the encryption's own; `wedi`: the
    /// whole-PMO checksum that attach verifies).
    pub fn can_defer_checksums(&self) -> bool {
        self.repair.is_some() && !self.bp_plain
    }

    /// The sealer of a commit: without the checksum when it is deferred (`defer`, only when
    /// [`Protection::can_defer_checksums`]) or always kept at detach.
    pub(crate) fn sealer_for(&self, defer: bool) -> &PageProtector {
        match (&self.sealer, &self.repair) {
            (Some(s), _) => s,
            (None, Some(unchecked)) if defer && self.can_defer_checksums() => unchecked,
            _ => &self.protector,
        }
    }

    /// Before a commit of `pages` of an integrity-at-detach scheme, or one that defers its
    /// checksums (`defer`): make the pending word durable (once per session) and remember the
    /// pages. No-op otherwise.
    pub fn before_commit(&self, pages: &[u64], defer: bool) -> Result<()> {
        if self.commits_plaintext() {
            // The plaintext word covers committed plaintext across a crash: set it durably
            // before the first plaintext commit of the session.
            let mut open = self.plain_session.lock().unwrap_or_else(|e| e.into_inner());
            if !*open {
                self.core.mark_plain(&*self.medium)?;
                *open = true;
            }
        }
        if self.sealer.is_none() && !(defer && self.can_defer_checksums()) {
            return Ok(());
        }
        let mut open = self.id_session.lock().unwrap_or_else(|e| e.into_inner());
        if !*open {
            self.write_id_pending(1)?;
            *open = true;
        }
        for &p in pages {
            self.id_pages[(p / 64) as usize].fetch_or(1 << (p % 64), Ordering::AcqRel);
        }
        Ok(())
    }

    /// At detach of an integrity-at-detach scheme: write the checksums of the pages committed
    /// in this session, computed from their committed contents (decrypted from the medium: the
    /// attached copy may hold later changes that detach discards), then clear the pending
    /// word. On error the word stays set and the next attach runs the crash handler.
    pub fn finish_detach(&self) -> Result<()> {
        // `open` is set only by commits without checksums (at detach, or deferred).
        let mut open = self.id_session.lock().unwrap_or_else(|e| e.into_inner());
        if !*open {
            return Ok(());
        }
        self.write_checksums((0..self.core.npages()).filter(|&p| self.committed_unchecked(p)))?;
        for w in self.id_pages.iter() {
            w.store(0, Ordering::Release);
        }
        *open = false;
        Ok(())
    }

    /// Whether `page` was committed in this session without its checksum (`*-id`, or a
    /// deferred psync).
    pub(crate) fn committed_unchecked(&self, page: u64) -> bool {
        self.id_pages
            .get((page / 64) as usize)
            .is_some_and(|w| w.load(Ordering::Acquire) & (1 << (page % 64)) != 0)
    }

    /// Whether a detach has work on the medium (checksums of pages this session committed).
    pub fn has_detach_work(&self) -> bool {
        *self.id_session.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether integrity metadata is written at detach (`*-id`).
    pub fn integrity_at_detach(&self) -> bool {
        self.sealer.is_some()
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The verified page-map entry of `page` (DRAM copy).
    pub fn entry(&self, page: u64) -> PageMapEntry {
        PageMapEntry(self.entries[page as usize].load(Ordering::Acquire))
    }

    pub fn set_entry(&self, page: u64, e: PageMapEntry) {
        self.entries[page as usize].store(e.0, Ordering::Release);
    }

    /// Whether psync commits pages as plaintext now (BP with the plaintext copy on the medium,
    /// outside the sealing commit that encrypts them).
    pub fn commits_plaintext(&self) -> bool {
        self.bp_plain && !self.encrypting.load(Ordering::Acquire)
    }

    /// Whether a session committed pages as plaintext (the handle's drop encrypts them and
    /// clears the plaintext word).
    pub fn plain_session(&self) -> bool {
        *self.plain_session.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Encrypt every page committed as plaintext (BP on the medium) in one sealing commit,
    /// then zero the slots that held the plaintext and fence. Returns the pages encrypted. At
    /// detach, and at the next keyed open after a crash. The plaintext word stays set: the
    /// caller clears it (with the plaintext area).
    pub fn encrypt_plain_pages(&self) -> Result<u64> {
        let pages: Vec<u64> = (0..self.core.npages())
            .filter(|&p| self.entry(p).is_plain())
            .collect();
        if pages.is_empty() {
            return Ok(0);
        }
        let m = &*self.medium;
        let layout = &self.core.layout;
        let old: Vec<u64> = pages
            .iter()
            .filter_map(|&p| match self.entry(p).loc() {
                Some(PageLoc::Slot(s)) => Some(self.core.abs(layout.page(s, p))),
                _ => None,
            })
            .collect();
        self.encrypting.store(true, Ordering::Release);
        let r = self.core.commit(
            m,
            &pages,
            // Through `fill`: a `bp-ip` page is checked against its psync checksum before it
            // is encrypted (and so vouched for); a tampered one is an integrity error.
            crate::engine::CommitSource::Fill(&mut |p, dst| {
                self.fill(p, dst).map_err(|reason| StoreError::Integrity {
                    name: self.core.name.clone(),
                    page: p,
                    reason: reason.into(),
                })
            }),
            Some(self),
            None,
            false,
        );
        self.encrypting.store(false, Ordering::Release);
        r?;
        for off in old {
            m.zero(off, pmo_format::PAGE_SIZE)?;
            m.flush(off, pmo_format::PAGE_SIZE)?;
        }
        m.fence()?;
        *self.plain_session.lock().unwrap_or_else(|e| e.into_inner()) = false;
        Ok(pages.len() as u64)
    }

    /// Decrypt and verify `page` into `dst`. Lock-free and allocation-free (fault handler).
    pub fn fill(&self, page: u64, dst: &mut Page) -> Result<(), &'static str> {
        if page >= self.core.npages() {
            return Err("page index beyond the PMO");
        }
        let e = self.entry(page);
        match e.loc() {
            Some(PageLoc::Zero) => {
                dst.fill(0);
                Ok(())
            }
            Some(PageLoc::Slot(s)) => {
                let layout: &PmoLayout = &self.core.layout;
                let mut sealed: Page = [0u8; 4096];
                let mut meta = [0u8; PAGE_META_LEN];
                let m = &*self.medium;
                if e.is_plain() {
                    m.read(self.core.abs(layout.page(s, page)), dst)
                        .map_err(|_| "medium read failed")?;
                    sealed.copy_from_slice(&dst[..]);
                } else {
                    m.read(self.core.abs(layout.page(s, page)), &mut sealed)
                        .map_err(|_| "medium read failed")?;
                }
                m.read(self.core.abs(layout.tag(s, page)), &mut meta)
                    .map_err(|_| "medium read failed")?;
                self.open_bytes(page, e, &sealed, &meta, dst)
            }
            None => Err("corrupted page-map entry"),
        }
    }

    /// Decrypt and verify the at-rest bytes of `page` under map entry `e` (its slot's page and
    /// metadata, read by the caller: from the medium, or from a version a writer kept for a
    /// reader, `pmo-pins`) into `dst`.
    pub fn open_bytes(
        &self,
        page: u64,
        e: PageMapEntry,
        sealed: &Page,
        meta: &[u8; PAGE_META_LEN],
        dst: &mut Page,
    ) -> Result<(), &'static str> {
        if e.is_plain() {
            // Committed as plaintext (BP on the medium): a copy, checked against its
            // checksum where one was written at psync.
            dst.copy_from_slice(sealed);
            if self.scheme.cipher() == Cipher::XtsSha256
                && !self.committed_unchecked(page)
                && pmo_crypt::verify_page_checksum(dst, &pmo_crypt::PageChecksum(*meta)).is_err()
            {
                dst.fill(0);
                return Err("the page fails its integrity check (tampered or corrupted)");
            }
            return Ok(());
        }
        // A page this session committed has no checksum yet (`*-id`, or a deferred
        // psync): it is ours.
        let opener = match self.sealer.as_ref().or(self.repair.as_ref()) {
            Some(unchecked) if self.committed_unchecked(page) => unchecked,
            _ => &self.protector,
        };
        opener
            .open(page, e.version(), meta, sealed, dst)
            .map_err(|_| "the page fails its integrity check (tampered or corrupted)")
    }

    /// Whether sealing reads the plaintext exactly once, so that a page may be sealed straight
    /// from memory other threads may be writing: the sealed page and its metadata then still
    /// agree (AES-GCM authenticates the ciphertext it wrote; XTS has no metadata). False for
    /// XTS + SHA-256, whose checksum is a second pass over the plaintext: such pages are copied
    /// into a private buffer first.
    pub fn seals_in_one_pass(&self, defer: bool) -> bool {
        !matches!(
            self.sealer_for(defer),
            PageProtector::Xts { checksum: true, .. }
        )
    }

    /// Seal a batch of pages, each with the version of its job, on the crypto workers if
    /// `parallel` (else on this thread); fills each job's metadata slot. `defer`: without
    /// checksums, where [`Protection::can_defer_checksums`].
    pub fn seal_batch(&self, jobs: &mut [SealJob<'_>], parallel: bool, defer: bool) -> Result<()> {
        let sealer = self.sealer_for(defer);
        if self.commits_plaintext() {
            // BP on the medium: psync copies the shadow into the primary (the free slot) as
            // plaintext, with the plaintext's checksum where the design updates it at psync.
            let checksum = matches!(sealer, PageProtector::Xts { checksum: true, .. });
            for j in jobs.iter_mut() {
                if let Some(input) = j.input {
                    j.out.copy_from_slice(input);
                }
                j.meta = if checksum {
                    pmo_crypt::page_checksum(j.out).0
                } else {
                    [0u8; PAGE_META_LEN]
                };
            }
            return Ok(());
        }
        let seal = |j: &mut SealJob<'_>| -> std::result::Result<(), pmo_crypt::CryptError> {
            j.meta = match j.input {
                Some(input) => sealer.seal(j.page_index, j.version, input, j.out)?,
                None => sealer.seal_in_place(j.page_index, j.version, j.out)?,
            };
            Ok(())
        };
        match crypto_pool().filter(|_| parallel) {
            Some(pool) => pool
                .run(jobs, sealer.cost_hint_ns(), seal)
                .map_err(crypt_err)?,
            None => {
                for j in jobs {
                    seal(j).map_err(crypt_err)?;
                }
            }
        }
        Ok(())
    }

    /// The table MAC update for pages changing, each `(page, old, new)` (secure scheme only;
    /// pages distinct). A few pages' AES blocks at a time ([`VersionTableMac::update_many`]).
    pub fn mac_update(
        &self,
        mac: &mut Option<VersionTableMac>,
        changes: impl Iterator<Item = (u64, PageMapEntry, PageMapEntry)>,
    ) -> Result<()> {
        let (Some(mac), PageProtector::Aead { keys }) = (mac.as_mut(), &self.protector) else {
            return Ok(());
        };
        const N: usize = pmo_crypt::TABLE_UPDATE_BATCH;
        let mut buf = [(0u64, 0u64, 0u64); N];
        let mut n = 0;
        for (page, old, new) in changes {
            buf[n] = (page, old.mac_word(), new.mac_word());
            n += 1;
            if n == N {
                mac.update_many(keys, &buf).map_err(crypt_err)?;
                n = 0;
            }
        }
        mac.update_many(keys, &buf[..n]).map_err(crypt_err)
    }

    /// The trailer of a commit under `epoch` with the (already updated) `mac`, carrying
    /// `reservation`.
    pub fn trailer(
        &self,
        mac: &Option<VersionTableMac>,
        epoch: u64,
        reservation: u64,
        whole_checksum: Option<[u8; 32]>,
    ) -> Trailer {
        let mut t = Trailer {
            epoch,
            reservation,
            table_tag: [0u8; 16],
            tail: whole_checksum.unwrap_or([0u8; 32]),
        };
        if let (Some(mac), PageProtector::Aead { keys }) = (mac, &self.protector) {
            t.table_tag = mac.tag(keys, epoch).0;
            t.tail = trailer_mac(keys, &t);
        }
        t
    }

    /// Whether a psync of `pages` pages must first commit a larger reservation; if so, the
    /// reservation to commit and the epoch to commit it under (the top value of the new
    /// range, never handed out as a page version). Deterministic in (reservation, pages), so
    /// a retry after a crash reuses the epoch only with the same, unchanged table.
    pub fn reservation_needed(&self, ws: &WriteState, pages: u64) -> Option<(u64, u64)> {
        if !matches!(self.protector, PageProtector::Aead { .. }) || ws.counter.remaining() > pages {
            return None;
        }
        let base = ws.counter.reserved_until().max(ws.reservation);
        let chunks = (pages + 2).div_ceil(RESERVATION_CHUNK);
        let until = base.saturating_add(chunks.saturating_mul(RESERVATION_CHUNK));
        Some((until, until - 1))
    }

    /// The trailer of the one commit that vouches for a PMO's page map at a new extent (a
    /// resize, `crate::resize`): the version-table MAC of `table` (the new map's raw entries,
    /// `secure`), tagged under `epoch`, carrying `reservation` and, for `wedi`, the whole-PMO
    /// checksum. The keys are this PMO's: a resized PMO keeps its uuid and data master.
    pub fn seed_trailer(
        &self,
        table: &[u64],
        epoch: u64,
        reservation: u64,
        whole_checksum: Option<[u8; 32]>,
    ) -> Trailer {
        let mac = match &self.protector {
            PageProtector::Aead { keys } => {
                // What the MAC covers: each entry without its wide check (as at attach).
                let words: Vec<u64> = table.iter().map(|&e| PageMapEntry(e).mac_word()).collect();
                Some(VersionTableMac::from_table(keys, &words))
            }
            _ => None,
        };
        self.trailer(&mac, epoch, reservation, whole_checksum)
    }

    /// The AES-GCM keys of a `secure` PMO (its sub-page log records are sealed under them).
    pub fn aead_keys(&self) -> Option<&pmo_crypt::PmoKeys> {
        match &self.protector {
            PageProtector::Aead { keys } => Some(keys),
            _ => None,
        }
    }

    /// Whether page versions are nonces (AES-GCM): then no version may repeat under the keys.
    pub fn versions_are_nonces(&self) -> bool {
        matches!(self.protector, PageProtector::Aead { .. })
    }

    /// Whether this scheme keeps a whole-PMO checksum (`wedi`).
    pub fn keeps_whole_checksum(&self) -> bool {
        self.scheme.whole_checksum()
    }

    /// Check the whole-PMO checksum against the committed one, reading every page from the
    /// medium (decrypted): what a page-level reader does before it returns any byte.
    pub fn verify_whole_on_medium(&self) -> Result<()> {
        if self.whole_expected.is_none() {
            return Ok(());
        }
        let mut h = WholePmoChecksum::new();
        let mut page: Box<Page> = Box::new([0u8; 4096]);
        for p in 0..self.core.npages() {
            self.fill(p, &mut page)
                .map_err(|reason| StoreError::Integrity {
                    name: self.core.name.clone(),
                    page: p,
                    reason: reason.into(),
                })?;
            h.update_page(&page);
        }
        let expected = self.whole_expected.unwrap_or_default();
        h.verify(&pmo_crypt::PageChecksum(expected))
            .map_err(|_| integrity(&self.core, "the whole-PMO checksum does not match"))
    }

    /// The whole-PMO checksum committed last (`wedi`; `None` otherwise or before any commit).
    pub fn whole_expected(&self) -> Option<[u8; 32]> {
        self.whole_expected
    }

    /// Check the whole-PMO checksum of `pages` (all pages, in order) against the committed one.
    pub fn verify_whole<'a>(&self, pages: impl IntoIterator<Item = &'a Page>) -> Result<()> {
        let Some(expected) = self.whole_expected else {
            return Ok(());
        };
        let mut h = WholePmoChecksum::new();
        for p in pages {
            h.update_page(p);
        }
        h.verify(&pmo_crypt::PageChecksum(expected))
            .map_err(|_| integrity(&self.core, "the whole-PMO checksum does not match"))
    }
}

/// The whole-PMO checksum of `pages` (all pages, in order).
pub fn whole_checksum<'a>(pages: impl IntoIterator<Item = &'a Page>) -> [u8; 32] {
    let mut h = WholePmoChecksum::new();
    for p in pages {
        h.update_page(p);
    }
    h.finish().0
}

/// The process's crypto workers (one per core), made on first use; `None` if threads cannot
/// be started (then sealing runs on the caller's thread).
pub(crate) fn crypto_pool() -> Option<&'static CryptoPool> {
    static POOL: OnceLock<Option<CryptoPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        CryptoPool::new(n).ok()
    })
    .as_ref()
}

/// The MAC of a `secure` trailer: (epoch, reservation, table tag) under the PMO's metadata key.
pub(crate) fn trailer_mac(keys: &PmoKeys, t: &Trailer) -> [u8; 32] {
    keys.mac_metadata(
        TRAILER_MAC_DOMAIN,
        &[
            &t.epoch.to_le_bytes(),
            &t.reservation.to_le_bytes(),
            &t.table_tag,
        ],
    )
    .0
}

pub(crate) fn crypt_err(e: pmo_crypt::CryptError) -> StoreError {
    match e {
        pmo_crypt::CryptError::Integrity => StoreError::Invalid(
            "integrity failure in a crypto primitive that should not verify".into(),
        ),
        other => StoreError::Os(format!("crypto: {other}")),
    }
}
