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

use pmo_format::layout::{PageLoc, PageMapEntry, PmoLayout};
use pmo_format::record::Trailer;
use pmo_format::{Entry, PAGE_SIZE};
use pmo_medium::Medium;

use pmo_meta::error::{Result, StoreError};

/// One page of bytes.
pub type Page = [u8; PAGE_SIZE as usize];

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
    pub fn page(&self, p: u64) -> &Page {
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
pub type CommittedMap = (u64, Vec<u64>, Option<Trailer>);

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
    pub tag: u64,
    /// Sequence number of the newest committed psync; the mutex also serialises psyncs.
    pub seq: Mutex<u64>,
    /// This attach session's instrumentation.
    pub stats: crate::stats::SessionCounters,
    /// The pool's locks, for the snapshot gate a psync passes (`crate::snapshot`); `None`
    /// for a core that never commits.
    pub gate: Option<pmo_meta::locks::Locker>,
    /// The sub-page commit log's state ([`crate::sublog`]).
    pub sublog: crate::log_state::LogCell,
    /// The pin table of readers beside this writer (`pmo_pins`, [`crate::pins`]); unset for a core that
    /// never commits.
    pub pins: pmo_pins::WriterPins,
}

impl PmoCore {
    /// Engine for a namespace entry. Fails if the entry's layout does not fit its extent. The
    /// engine works on the layout capacity's pages (`docs/format.md` §3, "Capacity"): pages
    /// from the size to the capacity read as zeros, and the view maps only the size.
    pub fn new(entry: &Entry) -> Result<PmoCore> {
        let npages = entry.capacity_bytes() / PAGE_SIZE;
        let plain = entry.scheme & pmo_meta::scheme::SHADOW_MEDIUM_BIT != 0;
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
            pins: Default::default(),
        })
    }

    pub fn abs(&self, rel: u64) -> u64 {
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

    /// The size after an in-place resize of the attached PMO (`crate::resize`).
    pub fn set_size(&self, bytes: u64) {
        self.size.store(bytes, std::sync::atomic::Ordering::Release)
    }

    /// Newest committed sequence number known to this process.
    pub fn seq(&self) -> u64 {
        *self.seq.lock().unwrap_or_else(|e| e.into_inner())
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
}
