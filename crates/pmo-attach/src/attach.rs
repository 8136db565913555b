//! Mapped attach: a PMO as plain memory at its stable address.
//!
//! An [`Attachment`] is a [`PmoHandle`] (key checked, attach lock held, PMO recovered) plus a
//! `pmo_os::view::View` at the PMO's recorded base address (`MAP_FIXED_NOREPLACE`: a taken range
//! is an error unless relocation was asked for). Pages are filled from the medium on first
//! touch, writes are tracked per page, and [`Attachment::psync`] commits exactly the pages
//! written since the previous psync. Changes not psynced are discarded at detach.
#![allow(unsafe_code)] // copying pages out of and into the attached mapping.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pmo_os::view::{
    DirtyTracking, Mechanism, PageSource, Placement, View, ViewError, ViewOptions, ViewStats,
    PAGE_SIZE,
};

use crate::source::{PlainSource, ProtectedSource, ReaderSource};
use crate::whole::{view_pages, whole_checksum_of};
use pmo_engine::engine::{CommitSource, CommitStats, MappedPages};
use pmo_meta::error::{Result, StoreError};
use pmo_meta::scheme::Shadow;
use pmo_pool::handle::PmoHandle;
use pmo_pool::pool::{Perm, Pool};

/// Options of `Pool::attach_with`.
#[derive(Clone, Copy, Debug, Default)]
pub struct AttachOptions {
    /// Wait up to this long for a conflicting user to detach (`None`: fail at once with `Busy`).
    pub wait: Option<Duration>,
    /// Map elsewhere if the stable address is taken (raw pointers stored in the PMO then do not
    /// point into it: use `PPtr` for such PMOs).
    pub relocate: bool,
    /// Fault mechanism (`None`: `PMO_FAULT`, else the fastest available).
    pub mechanism: Option<Mechanism>,
    /// Fill every page at attach instead of on first touch.
    pub populate: bool,
    /// How writes are found for psync (`None`: `PMO_DIRTY`, else chosen from the PMO's size by
    /// [`crate::tracking::default_tracking`]).
    /// [`DirtyTracking::Declared`] commits only what [`Attachment::write_at`] and
    /// [`Attachment::declare`] name (PMDK's `tx_add_range` contract): writes through raw
    /// pointers that are not declared are then not made durable.
    pub tracking: Option<DirtyTracking>,
    /// Predictive decryption (`None`: `PMO_PREDICT`, else off). Only per-page schemes without
    /// `populate` predict; see [`crate::predict`].
    pub predict: Option<crate::predict::PredictConfig>,
    /// Run this attach under another protection design with the same at-rest format as the
    /// PMO's own (`None`: the PMO's scheme); see [`Pool::open_pmo_as`] and
    /// [`pmo_meta::scheme::Scheme::attachable_as`].
    pub scheme: Option<pmo_meta::scheme::Scheme>,
    /// NUMA node the DRAM plaintext copy is allocated from (`None`: `PMO_NUMA_NODE`, else the
    /// kernel's default, near the faulting CPU): the LPMO slides' near and far DRAM cache. An
    /// error for a PMO whose plaintext copy is on the medium, or for a node that does not exist.
    pub numa_node: Option<u32>,
    /// A read-only attach excludes writers (the research kernel's rule: readers share the PMO,
    /// a writer waits or gets `Busy`) instead of attaching beside a writer as a snapshot of one
    /// psync (`docs/readers.md`). pmo-lmdb's `MDB_RDONLY` environments attach beside the
    /// writer and refresh when a read transaction begins, unless their backend sets this.
    pub exclusive_read: bool,
    /// The largest PMO, in pages, that gets a resident view (filled whole at attach, no
    /// faults, its mapping reused by the next attach: `pmo_os::view::View::resident`). `None`:
    /// `PMO_RESIDENT_PAGES`, else 16. A caller that touches every page of its sessions (the
    /// file store reads and writes whole files) may raise it.
    pub resident_pages: Option<u64>,
}

/// The NUMA node named by `PMO_NUMA_NODE` (unset or empty: none; anything else but a number:
/// an error).
fn numa_node_from_env() -> Result<Option<u32>> {
    match std::env::var("PMO_NUMA_NODE") {
        Ok(v) if !v.trim().is_empty() => {
            v.trim().parse().map(Some).map_err(|_| {
                StoreError::Invalid(format!("PMO_NUMA_NODE={v:?} is not a node number"))
            })
        }
        _ => Ok(None),
    }
}

pub use crate::tracking::DEFAULT_TRACKING;

/// The largest fault-around window attach gives a view when `PMO_FAULT_AROUND` does not say:
/// a first touch that continues a sequential run fills up to this many pages in one trip
/// (`pmo_os::view::View::set_fault_around`; figures in `docs/faults.md`).
pub const DEFAULT_FAULT_AROUND: usize = 16;

/// The fault-around window: `PMO_FAULT_AROUND` (pages, 1 = off; anything else but a number is an
/// error), else [`DEFAULT_FAULT_AROUND`].
fn fault_around_from_env() -> Result<usize> {
    match std::env::var("PMO_FAULT_AROUND") {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().map_err(|_| {
            StoreError::Invalid(format!("PMO_FAULT_AROUND={v:?} is not a number of pages"))
        }),
        _ => Ok(DEFAULT_FAULT_AROUND),
    }
}

/// Name of the page-fault mechanism attach uses by default in this process.
pub fn fault_mechanism_name() -> &'static str {
    Mechanism::from_env().unwrap_or_else(Mechanism::best).name()
}

/// An attached PMO. Detaches on drop.
pub struct Attachment {
    // The view is unmapped (in `Drop`) before the handle, and so the lock, is released.
    // The prediction workers (holding clones of the view) are joined before that.
    view: std::mem::ManuallyDrop<Arc<View>>,
    predictor: Option<crate::predict::Predictor>,
    handle: std::mem::ManuallyDrop<PmoHandle>,
    relocated: bool,
    attach_ns: u64,
    /// When attach began (the session's wall clock).
    started: Instant,
    /// Held by `psync` from collect to commit (twin tracking's snapshots), and by an
    /// in-place grow.
    pub(crate) psync_lock: std::sync::Mutex<()>,
    /// The PMO's size in bytes: the view may map more (a writer's view spans the layout
    /// capacity, so that the PMO grows in place: `pmo_life::resize`).
    pub(crate) len: std::sync::atomic::AtomicUsize,
    /// Byte ranges declared since the last psync (a PMO with a sub-page log).
    pub(crate) log_ranges: pmo_engine::sublog::Ranges,
}

impl Drop for Attachment {
    fn drop(&mut self) {
        let v = self.view.stats();
        let t = Instant::now();
        // Join the prediction workers first (no install into an unmapped range), then count
        // what they installed.
        let predicted = self.predictor.take().map_or(0, |p| p.finish().installed);
        if self.handle.scheme().shadow == Shadow::Medium {
            // The pages of the plaintext area this mapping filled: scrubbed at the handle's drop.
            let mut pages = Vec::new();
            self.view.resident_pages(&mut pages);
            self.handle.plain_pages(pages);
        }
        // SAFETY: dropped exactly once, here; `view` is not used after this line.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.view) };
        if self.handle.perm() == Perm::Write {
            self.handle.fold_log();
        }
        let detach_ns = t.elapsed().as_nanos() as u64;
        if self.handle.perm() == Perm::Write {
            let mut s = self.session_stats_with(v);
            s.predicted = predicted;
            s.detach_ns = detach_ns;
            s.wall_ns = self.started.elapsed().as_nanos() as u64;
            self.handle.record_session(&s.with_compute());
        }
        // SAFETY: taken exactly once, here; `handle` is not used after this line.
        let handle = unsafe { std::mem::ManuallyDrop::take(&mut self.handle) };
        // Work on the medium (integrity-at-detach checksums) finishes in the background.
        crate::detach::finish(handle);
    }
}

/// `attach(name, perm, key)`: map a PMO at its stable address.
pub fn attach(pool: &Pool, name: &str, perm: Perm, key: &[u8]) -> Result<Attachment> {
    attach_with(pool, name, perm, key, AttachOptions::default())
}

/// Attach with options.
pub fn attach_with(
    pool: &Pool,
    name: &str,
    perm: Perm,
    key: &[u8],
    opts: AttachOptions,
) -> Result<Attachment> {
    let t0 = Instant::now();
    let mut handle =
        pool.open_pmo_with(name, perm, key, opts.wait, opts.scheme, opts.exclusive_read)?;
    let whole = handle.scheme().granularity() == pmo_meta::scheme::Granularity::Whole;
    // Where the plaintext copy lives: DRAM (a view of its own), or the PMO's plaintext area
    // on the medium (a view over the pool file, marked before anything is written there). A
    // reader beside a writer has a DRAM view of its own under every placement: the area is
    // the writer's.
    let plain_area = match handle.scheme().shadow {
        _ if handle.reader().is_some() => None,
        Shadow::Dram => None,
        Shadow::Medium => {
            let file = pool.medium().file().ok_or_else(|| {
                StoreError::Unsupported(format!(
                    "PMO '{name}' keeps its plaintext copy on the medium, and this medium ({:?}) cannot be mapped",
                    pool.medium().kind()
                ))
            })?;
            let off =
                handle.core.layout.plain_off.ok_or_else(|| {
                    StoreError::Corrupt(format!("PMO '{name}': no plaintext area"))
                })?;
            handle.begin_plain()?;
            Some((file, handle.core.extent_off + off))
        }
    };
    let predict_cfg = match opts.predict {
        Some(cfg) => cfg,
        None => crate::predict::PredictConfig::from_env()?,
    };
    predict_cfg.validate()?;
    let fault_around = fault_around_from_env()?;
    let pages = handle.size() / PAGE_SIZE as u64;
    // The predictor skips a PMO of a few of the windows the view will take.
    let engages = predict_cfg.is_on() && {
        let around = opts
            .mechanism
            .or_else(Mechanism::from_env)
            .unwrap_or_else(Mechanism::best)
            .fault_around_window(fault_around);
        predict_cfg.engages(pages, around)
    };
    let hook = if whole || opts.populate || !engages {
        None
    } else {
        crate::predict::PredictHook::new(predict_cfg, pages)?
    };
    if let Some(h) = &hook {
        h.resume(handle.core.uuid);
    }
    let make_source = |predict| -> Arc<dyn PageSource> {
        if let Some(r) = handle.reader() {
            return Arc::new(ReaderSource {
                core: handle.core.clone(),
                reader: r.clone(),
                predict,
            });
        }
        match handle.protection() {
            Some(prot) => Arc::new(ProtectedSource {
                prot: prot.clone(),
                label: handle.name().to_string(),
                predict,
            }),
            None => Arc::new(PlainSource {
                core: handle.core.clone(),
                medium: pool.medium().clone(),
                predict,
            }),
        }
    };
    let source = make_source(hook.clone());
    let size = usize::try_from(handle.size())
        .map_err(|_| StoreError::Invalid("PMO larger than the address space".into()))?;
    // A writer maps the PMO's whole layout capacity (address space only; the pages past
    // the size are never touched through `len`): it grows in place (`pmo_life::resize`).
    let span = if perm == Perm::Write && !opts.populate && !whole {
        usize::try_from(handle.core.npages() * PAGE_SIZE as u64)
            .map_err(|_| StoreError::Invalid("PMO larger than the address space".into()))?
    } else {
        size
    };
    let mut vopts = ViewOptions {
        len_bytes: span,
        placement: Placement::Fixed(handle.base_addr() as usize),
        writable: perm == Perm::Write,
        mechanism: opts.mechanism,
    };
    let mut relocated = false;
    let tracking = crate::tracking::resolve(opts.tracking, handle.size());
    let node = match opts.numa_node {
        Some(n) => Some(n),
        None => numa_node_from_env()?,
    };
    let resident = plain_area.is_none()
        && hook.is_none()
        && node.is_none()
        && crate::tracking::resident(
            (span / PAGE_SIZE) as u64,
            opts.resident_pages,
            opts.mechanism,
            opts.tracking,
        );
    let make_view = |vopts: ViewOptions, source: Arc<dyn PageSource>| match plain_area {
        None if resident => View::resident(vopts, source, tracking),
        None => View::with_tracking(vopts, source, Some(tracking)),
        Some((file, off)) => View::over_file(vopts, source, file, off),
    };
    let view = match make_view(vopts, source.clone()) {
        Ok(v) => v,
        Err(ViewError::AddressInUse { .. }) if opts.relocate => {
            vopts.placement = Placement::Anywhere;
            relocated = true;
            make_view(vopts, source).map_err(|e| named(view_err(e), name))?
        }
        Err(ViewError::AddressInUse { addr, len }) => {
            return Err(StoreError::AddressInUse {
                name: name.into(),
                addr: addr as u64,
                len: len as u64,
            });
        }
        // A resident view's fill failed: the page is named, as a fault would name it.
        Err(e) => return Err(named(view_err(e), name)),
    };
    view.set_fault_around(fault_around);
    let view = Arc::new(view);
    if let Some(n) = node {
        if plain_area.is_some() {
            return Err(StoreError::Invalid(format!(
                "PMO '{name}' keeps its plaintext copy on the medium: a NUMA node places a DRAM copy"
            )));
        }
        view.bind_to_node(n).map_err(|e| {
            let nodes = pmo_medium::latency::numa_node_count().unwrap_or(1);
            StoreError::Invalid(format!(
                "cannot place PMO '{name}' on NUMA node {n} (this machine has {nodes} node(s)): {e}"
            ))
        })?;
    }
    if opts.populate || whole {
        view.populate_all().map_err(|e| named(view_err(e), name))?;
    }
    if let Some(prot) = whole_checksum_of(&handle) {
        prot.verify_whole(view_pages(&view))?;
        handle.mark_whole_verified();
    }
    let attach_ns = t0.elapsed().as_nanos() as u64;
    use pmo_engine::stats::SessionCounters as C;
    let stall = C::get(&handle.core.stats.attach_stall_ns);
    C::add(
        &handle.core.stats.attach_other_ns,
        attach_ns.saturating_sub(stall),
    );
    let predictor = match hook {
        Some(h) => Some(crate::predict::Predictor::start(
            h,
            view.clone(),
            make_source(None),
        )?),
        None => None,
    };
    Ok(Attachment {
        view: std::mem::ManuallyDrop::new(view),
        predictor,
        handle: std::mem::ManuallyDrop::new(handle),
        relocated,
        attach_ns,
        started: t0,
        psync_lock: std::sync::Mutex::new(()),
        len: size.into(),
        log_ranges: Default::default(),
    })
}

/// Put the PMO's name into an integrity error that lacks it.
fn named(e: StoreError, pmo: &str) -> StoreError {
    match e {
        StoreError::Integrity { name, page, reason } if name.is_empty() => StoreError::Integrity {
            name: pmo.to_string(),
            page,
            reason,
        },
        other => other,
    }
}

pub(crate) fn view_err(e: ViewError) -> StoreError {
    match e {
        ViewError::Fill { page, reason } => StoreError::Integrity {
            name: String::new(),
            page,
            reason: reason.into(),
        },
        other => StoreError::Os(other.to_string()),
    }
}

impl Attachment {
    /// Address of the first byte.
    pub fn addr(&self) -> *mut u8 {
        self.view.addr()
    }
    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len.load(std::sync::atomic::Ordering::Acquire)
    }
    /// The bytes mapped at [`Attachment::addr`]: the size, or for a writer the PMO's layout
    /// capacity, up to which [`Attachment::grow`] grows it without moving it.
    pub fn mapped_len(&self) -> usize {
        self.view.len_bytes()
    }
    /// The mapping (an in-place grow discards stale pages past the old size).
    pub(crate) fn view(&self) -> &View {
        &self.view
    }
    /// Never true: a PMO has at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }
    /// The PMO's name.
    pub fn name(&self) -> &str {
        self.handle.name()
    }
    /// Read-only or read-write.
    pub fn perm(&self) -> Perm {
        self.handle.perm()
    }
    /// True if the stable address was taken and the PMO was mapped elsewhere.
    pub fn relocated(&self) -> bool {
        self.relocated
    }
    /// The fault mechanism serving this attachment.
    pub fn mechanism(&self) -> Mechanism {
        self.view.mechanism()
    }
    /// How this attachment finds the pages a psync commits.
    pub fn dirty_tracking(&self) -> DirtyTracking {
        self.view.dirty_tracking()
    }

    /// Declare that bytes `offset..offset + len` were (or will be, before the next psync)
    /// written, so the next psync commits their pages. Needed only with
    /// [`DirtyTracking::Declared`] for writes through raw pointers; harmless (and cheap: an
    /// atomic OR per page) with the other trackings, which find writes by themselves.
    pub fn declare(&self, offset: usize, len: usize) -> Result<()> {
        self.declare_ranges(&[(offset, len)])
    }
    /// [`Attachment::declare`] of several ranges `(offset, len)` at once: one hold of the
    /// declared ranges for all of them. A container that writes a few places per operation
    /// (a control byte, a slot, its header) declares them together: each hold is an atomic
    /// read-modify-write, which waits for the operation's pending stores to drain.
    /// All ranges are checked before any is recorded.
    #[inline]
    pub fn declare_ranges(&self, ranges: &[(usize, usize)]) -> Result<()> {
        if self.perm() != Perm::Write {
            return Err(StoreError::ReadOnly(self.name().into()));
        }
        for &(offset, len) in ranges {
            self.check_range(offset, len)?;
        }
        if self.view.dirty_tracking() != DirtyTracking::Declared {
            return Ok(());
        }
        // Held until the pages are marked: a psync sees each range and its pages, or neither.
        let mut held = self.hold_log_ranges();
        for &(offset, len) in ranges.iter().filter(|r| r.1 > 0) {
            if let Some(r) = held.as_mut() {
                r.record(offset, len);
            }
            let first = offset / PAGE_SIZE;
            let end = (offset + len).div_ceil(PAGE_SIZE);
            for p in first..end {
                self.view.mark_dirty(p as u64).map_err(view_err)?;
            }
        }
        drop(held);
        Ok(())
    }
    /// The declared ranges held (`None`: the PMO has no sub-page log). A declare holds them
    /// from recording its range to marking its pages dirty, a psync from collecting the dirty
    /// pages to taking the ranges, so a psync sees a declare's range and pages or neither
    /// (`sublog::Ranges::lock`).
    fn hold_log_ranges(&self) -> Option<pmo_engine::sublog::RangesGuard<'_>> {
        self.handle
            .core
            .layout
            .log_off
            .is_some()
            .then(|| self.log_ranges.lock())
    }
    /// Counters of predictive decryption (`None` when this attachment does not predict).
    pub fn predict_stats(&self) -> Option<crate::predict::PredictStats> {
        self.predictor.as_ref().map(|p| p.stats())
    }
    /// Fault and fill counters of the mapping.
    pub fn view_stats(&self) -> ViewStats {
        self.view.stats()
    }

    /// Where this attach session's time went so far (the LOaPP Fig. 6 categories; see
    /// [`pmo_engine::stats`]). `detach_ns` is 0 until detach; a writer's final figures are
    /// recorded in the PMO at detach (`Pool::last_session`).
    pub fn session_stats(&self) -> pmo_engine::stats::SessionStats {
        self.session_stats_with(self.view.stats()).with_compute()
    }

    fn session_stats_with(&self, v: ViewStats) -> pmo_engine::stats::SessionStats {
        use pmo_engine::stats::SessionCounters as C;
        let c = &self.handle.core.stats;
        pmo_engine::stats::SessionStats {
            wall_ns: self.started.elapsed().as_nanos() as u64,
            attach_stall_ns: C::get(&c.attach_stall_ns),
            attach_other_ns: C::get(&c.attach_other_ns),
            pf_ns: v.service_ns,
            psync_crypt_ns: C::get(&c.psync_crypt_ns),
            psync_persist_ns: C::get(&c.psync_persist_ns),
            detach_ns: 0,
            compute_ns: 0,
            faults: v.faults,
            pages_decrypted: if self.handle.protection().is_some() {
                v.fills
            } else {
                0
            },
            pages_encrypted: C::get(&c.pages_encrypted),
            psyncs: C::get(&c.psyncs),
            bytes_persisted: C::get(&c.bytes_persisted),
            predicted: self.predict_stats().map_or(0, |p| p.installed),
        }
    }

    /// Nanoseconds the attach took.
    pub fn attach_ns(&self) -> u64 {
        self.attach_ns
    }
    /// The page-level handle.
    pub fn handle(&self) -> &PmoHandle {
        &self.handle
    }

    /// `psync`: make every change since the previous psync durable, atomically.
    /// Writes racing with a psync from other threads land in this psync or the next.
    pub fn psync(&self) -> Result<CommitStats> {
        self.psync_with(false)
    }

    /// `psync_nochecksum`: [`Attachment::psync`], leaving the per-page checksums of the pages
    /// it commits to detach where the scheme allows it (`bp-ip`, `sp-ip`: they are then
    /// committed as their `*-id` twins commit, the checksums written at detach or rebuilt by
    /// the crash handler; see [`Protection::can_defer_checksums`](pmo_engine::protect::Protection::can_defer_checksums)).
    /// Under any other scheme it is `psync`.
    pub fn psync_nochecksum(&self) -> Result<CommitStats> {
        self.psync_with(true)
    }

    fn psync_with(&self, defer_checksums: bool) -> Result<CommitStats> {
        if self.perm() != Perm::Write {
            return Err(StoreError::ReadOnly(self.name().into()));
        }
        // Collect + commit as one step: twins reported by a collect stay unchanged only until
        // the next collect, so a psync on another thread waits.
        let _serial = self.psync_lock.lock().unwrap_or_else(|p| p.into_inner());
        let (mut pages, mut from_twin) = (Vec::new(), Vec::new());
        let tc = Instant::now();
        // The dirty pages and the declared ranges are read under one hold of the ranges.
        let held = self.hold_log_ranges();
        self.view
            .collect_dirty_with_twins(&mut pages, &mut from_twin)
            .map_err(view_err)?;
        #[cfg(test)]
        tests::after_collect();
        let taken = held.map(|mut r| r.take());
        // Pages past the size (stores past `len()` into a view that spans the capacity) are
        // not the PMO's: dropped, so a later grow shows zeros there.
        let n = (self.len() / PAGE_SIZE) as u64;
        if pages.last().is_some_and(|&p| p >= n) {
            for &p in pages.iter().filter(|&&p| p >= n) {
                self.view.discard(p).map_err(view_err)?;
            }
            pages.retain(|&p| p < n);
            from_twin.retain(|&p| p < n);
        }
        pmo_engine::stats::SessionCounters::add(
            &self.handle.core.stats.psync_persist_ns,
            tc.elapsed().as_nanos() as u64,
        );
        let base = self.view.addr();
        if let Some(ranges) = taken.filter(|_| !pages.is_empty()) {
            if let Some(ranges) =
                ranges.filter(|_| self.dirty_tracking() == DirtyTracking::Declared)
            {
                let h = &self.handle;
                let inner = &*h.pool().inner;
                // SAFETY: the view maps the PMO's size pages at `base`; `pages` are inside it.
                let logged = unsafe {
                    pmo_engine::sublog::log_psync(
                        &h.core,
                        &*inner.medium,
                        h.prot.as_deref(),
                        &inner.sb.uuid,
                        &inner.health,
                        base,
                        &pages,
                        &ranges,
                    )
                };
                match logged {
                    Ok(Some(stats)) => return Ok(stats),
                    Ok(None) => {}
                    Err(e) => {
                        for &p in &pages {
                            let _ = self.view.mark_dirty(p);
                        }
                        return Err(e);
                    }
                }
            }
            // A page commit: it takes the pages with live records too (their view pages hold
            // the psynced bytes), which it obsoletes.
            let live = pmo_engine::sublog::take_live_pages(&self.handle.core);
            if !live.is_empty() {
                pages.extend(live.into_iter().filter(|&p| p < n));
                pages.sort_unstable();
                pages.dedup();
            }
        }
        let whole = match self.handle.protection() {
            Some(prot) if prot.keeps_whole_checksum() && !pages.is_empty() => {
                Some(pmo_engine::protect::whole_checksum(view_pages(&self.view)))
            }
            _ => None,
        };
        // SAFETY: the view maps the PMO's size pages at `base` until it is dropped, after `self`'s
        // borrow here ends; dirty pages are present, and reading any page of the view may at
        // worst fault it in. Writers racing with the commit are allowed by `MappedPages`' contract:
        // their page is dirty again and the next psync commits it.
        let mut src = unsafe { MappedPages::new(base, self.handle.core.size_pages()) };
        if let Some(twins) = self.view.twin_addr(0).filter(|_| !from_twin.is_empty()) {
            // SAFETY: the view keeps the twins of `from_twin` mapped and unchanged until its
            // next collect or discard, which `psync_lock` (held) and this module exclude until
            // the commit returns; `from_twin` outlives `src`.
            src = unsafe { src.with_twins(twins, &from_twin) };
        }
        let r = self.handle.commit_with_checksum(
            &pages,
            CommitSource::Mapped(src),
            whole,
            defer_checksums,
        );
        if r.is_err() {
            // Nothing was committed: keep the changes for the next psync.
            for &p in &pages {
                let _ = self.view.mark_dirty(p);
            }
        }
        r
    }

    /// Copy bytes out of the mapping (faulting pages in as needed).
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.check_range(offset, buf.len())?;
        // SAFETY: the range is inside the live mapping (checked); pages fault in on access.
        unsafe {
            std::ptr::copy_nonoverlapping(self.view.addr().add(offset), buf.as_mut_ptr(), buf.len())
        };
        Ok(())
    }

    /// Copy bytes into the mapping (not durable until `psync`).
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        if self.perm() != Perm::Write {
            return Err(StoreError::ReadOnly(self.name().into()));
        }
        self.check_range(offset, data.len())?;
        // SAFETY: the range is inside the live, writable mapping (checked); pages fault in and
        // are marked dirty on access.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.view.addr().add(offset), data.len())
        };
        self.declare(offset, data.len())
    }

    /// Undo every change since the last psync: each page written since then gets its
    /// committed contents back (read as a fault would fill it), and is clean again. Returns
    /// the number of pages restored. No other thread may write the PMO meanwhile (its writes
    /// could be lost or kept). With [`DirtyTracking::Declared`] only declared writes are undone.
    pub fn rollback(&self) -> Result<u64> {
        if self.perm() != Perm::Write {
            return Err(StoreError::ReadOnly(self.name().into()));
        }
        let mut pages = Vec::new();
        self.view.collect_dirty(&mut pages).map_err(view_err)?;
        let _ = self.log_ranges.lock().take();
        let mut buf = Box::new([0u8; PAGE_SIZE]);
        for (i, &p) in pages.iter().enumerate() {
            let read = self.handle.read_page(p, &mut buf);
            if read.is_ok() {
                // Psynced bytes still in the sub-page log.
                pmo_engine::sublog::overlay(&self.handle.core, p, &mut buf);
            }
            if let Err(e) = read {
                // Keep what was not restored for the next psync or rollback.
                for &q in &pages[i..] {
                    let _ = self.view.mark_dirty(q);
                }
                return Err(e);
            }
            // SAFETY: page `p` is inside the live, writable mapping (a dirty page of the view).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    buf.as_ptr(),
                    self.view.addr().add(p as usize * PAGE_SIZE),
                    PAGE_SIZE,
                )
            };
        }
        // The restored pages now equal their committed contents: forget that they were written.
        let mut again = Vec::new();
        self.view.collect_dirty(&mut again).map_err(view_err)?;
        Ok(pages.len() as u64)
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        if offset.checked_add(len).is_none_or(|e| e > self.len()) {
            return Err(StoreError::Invalid(format!(
                "range {offset}+{len} is outside the {}-byte PMO",
                self.len()
            )));
        }
        Ok(())
    }

    /// `detach`: unmap and release. Changes since the last psync are discarded.
    pub fn detach(self) -> Result<()> {
        drop(self);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::sync::Arc;

    use super::*;
    use pmo_pool::pool::{Pool, PoolOptions};

    thread_local! {
        /// Run once in `psync_with` between collecting the dirty pages and taking the
        /// declared ranges (to replay an interleaving deterministically).
        static AFTER_COLLECT: RefCell<Option<Box<dyn FnOnce()>>> = RefCell::new(None);
    }

    pub(super) fn after_collect() {
        if let Some(f) = AFTER_COLLECT.with(|h| h.borrow_mut().take()) {
            f();
        }
    }

    /// A declare on another thread whose range is recorded before a psync collects the dirty
    /// pages and whose page is marked after it: its bytes must reach the medium (they were
    /// lost: the psync took the range without committing the page, and the next psync logged
    /// the page from its later range alone).
    #[test]
    fn a_declare_racing_a_psync_is_committed_by_it_or_the_next() {
        let pool = Pool::create_on(
            Arc::new(pmo_medium::crash::CrashMedium::new(4 << 20)),
            &PoolOptions {
                kdf: pmo_format::KdfParams::INSECURE_FAST,
                ns_capacity: Some(4),
                ..Default::default()
            },
        )
        .unwrap();
        pool.pcreate_logged(
            "p",
            4 * PAGE_SIZE as u64,
            b"k",
            Some(pmo_meta::scheme::Scheme::NONE),
        )
        .unwrap();
        let opts = AttachOptions {
            tracking: Some(DirtyTracking::Declared),
            relocate: true,
            ..Default::default()
        };
        let att = Arc::new(attach_with(&pool, "p", Perm::Write, b"k", opts).unwrap());
        att.write_at(0, b"base").unwrap();
        att.psync().unwrap();
        att.write_at(8, b"zero").unwrap();
        // Between this psync's collect and its take, another thread writes and declares
        // "RRRR" on page 1 (with the fix it waits for the psync's hold and lands in the next
        // one; without it, it ran inside the window).
        let (tx, rx) = std::sync::mpsc::channel();
        let other = Arc::clone(&att);
        let writer = Arc::new(std::sync::Mutex::new(None));
        let slot = Arc::clone(&writer);
        AFTER_COLLECT.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                let t = std::thread::spawn(move || {
                    other.write_at(PAGE_SIZE + 100, b"RRRR").unwrap();
                    let _ = tx.send(());
                });
                // Let the declare run if nothing holds it back.
                let _ = rx.recv_timeout(std::time::Duration::from_millis(200));
                *slot.lock().unwrap() = Some(t);
            }));
        });
        att.psync().unwrap();
        let t = writer.lock().unwrap().take().expect("the hook ran");
        t.join().unwrap();
        // A later small write on the same page, logged.
        att.write_at(PAGE_SIZE + 200, b"SSSS").unwrap();
        att.psync().unwrap();
        drop(att);
        let h = pool.open_pmo("p", Perm::Read, b"k", None).unwrap();
        let mut b = [0u8; PAGE_SIZE];
        h.read_page(1, &mut b).unwrap();
        assert_eq!(
            &b[100..104],
            b"RRRR",
            "the racing declare's bytes were lost"
        );
        assert_eq!(&b[200..204], b"SSSS");
        h.read_page(0, &mut b).unwrap();
        assert_eq!(&b[0..4], b"base");
        assert_eq!(&b[8..12], b"zero");
    }
}
