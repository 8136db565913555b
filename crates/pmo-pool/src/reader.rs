//! Readers beside a writer (`docs/readers.md`): a PMO opened read-only shows exactly one
//! psync's state, the newest when it opened (or last refreshed), whatever a writer in this or
//! another process does meanwhile.
//!
//! Beside a writer a reader takes no attach lock and writes nothing on the medium but the
//! readers word (with no writer, `PmoHandle`'s open recovers the PMO first, as any open does). It
//! joins the PMO's pin table (`pmo-pins`), claims a reader slot, pins the newest psync and reads
//! that psync's committed page map (`PmoCore::committed_map`, verified as an attach verifies it,
//! then the sub-page log's records over it). A page is filled from the slot its snapshot entry
//! names; if the writer has kept that version in a frame since (it was about to overwrite the
//! slot), from the frame: the slot is read first and the frame looked up after, so a slot being
//! overwritten is never used (the writer publishes the frame before it writes the slot).
//!
//! A reader's view is its own, in DRAM, whatever the scheme's placement: a writer of a PMO
//! whose plaintext copy lives on the medium keeps that area to itself (its psyncs seal into the
//! shadow slots, which the reader reads like any other).
//!
//! Where a writer of the PMO may change the slots a reader reads other than by a psync, the
//! research kernel's rule stays (readers exclude the writer): a scheme writing each page's
//! checksum into its slot at detach (`bp-id`, `sp-id`), and on the medium `bp*`, whose psync
//! commits plaintext into the slots and whose detach seals and then zeroes them. The rule goes
//! by what is stored, not by what one user runs: a writer may run a PMO under any scheme of
//! its class (`Scheme::attachable_as`), so a reader beside it must be safe under all of them.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use pmo_engine::engine::{Page, PmoCore};
use pmo_engine::protect::Protection;
use pmo_engine::sublog::LiveRecords;
use pmo_format::layout::{PageLoc, PageMapEntry};
use pmo_format::PAGE_SIZE;
use pmo_medium::Medium;
use pmo_meta::error::{Result, StoreError};
use pmo_meta::keys::MasterKey;
use pmo_meta::scheme::{IntegrityAt, Scheme, SchemeId, Shadow};
use pmo_pins::{PinTable, PinsAt, ReaderSlot, FRAME_BYTES, META_MAX};

use crate::pool::Pool;

/// Whether readers of PMOs under `scheme` may attach beside a writer: no scheme a writer may
/// run the PMO under (its class, [`Scheme::attachable_as`]) changes a committed slot other
/// than by a psync.
pub fn beside_writer(scheme: Scheme) -> bool {
    scheme
        .attachable_as()
        .iter()
        .all(|&s| only_psyncs_change_slots(s))
}

/// Whether a writer running `s` changes committed slots only by psyncs (which keep the
/// versions readers pin): not with checksums written at detach, not with plaintext committed
/// on the medium (`bp*:medium`).
fn only_psyncs_change_slots(s: Scheme) -> bool {
    let detach_checksums = s.integrity_at() == IntegrityAt::Detach
        && s.cipher() == pmo_meta::scheme::Cipher::XtsSha256;
    let plaintext_slots = s.shadow == Shadow::Medium
        && matches!(s.id, SchemeId::Bp | SchemeId::BpIp | SchemeId::BpId);
    !detach_checksums && !plaintext_slots
}

/// The scheme a PMO stored as `own` runs as when asked for `run_as`.
pub(crate) fn run_scheme(name: &str, own: Scheme, run_as: Option<Scheme>) -> Result<Scheme> {
    match run_as {
        Some(s) if s != own => {
            if !own.same_at_rest(&s) {
                let names: Vec<String> = own.attachable_as().iter().map(|x| x.name()).collect();
                return Err(StoreError::Invalid(format!(
                    "PMO '{name}' is stored as {own}; it can be attached as {}, not as {s}",
                    names.join(", ")
                )));
            }
            Ok(s)
        }
        _ => Ok(own),
    }
}

/// One psync's state as a reader sees it.
pub struct Snapshot {
    /// The page-map commit it shows.
    pub seq: u64,
    /// Sub-page log records over that commit it shows too (each one psync).
    pub records: u64,
    /// The committed map (unprotected PMOs; a protected one's is in `prot`). A refresh that
    /// knows the changed pages stores their entries in place (shared with the snapshot it
    /// moved on from), as it does in `prot`: [`ReaderState`]'s `gen` keeps fills consistent.
    table: Arc<[AtomicU64]>,
    prot: Option<Arc<Protection>>,
    live: Option<LiveRecords>,
}

impl Snapshot {
    /// The map entry the snapshot shows for `page` (what a fill reads; also for a test's
    /// diagnosis of a wrong page).
    pub fn entry(&self, page: u64) -> PageMapEntry {
        match &self.prot {
            Some(p) => p.entry(page),
            None => PageMapEntry(
                self.table
                    .get(page as usize)
                    .map_or(u64::MAX, |e| e.load(Ordering::Acquire)),
            ),
        }
    }

    /// The protection the snapshot reads with (`None`: scheme `none`).
    pub fn protection(&self) -> Option<&Arc<Protection>> {
        self.prot.as_ref()
    }
}

/// A reader's state: its slot, and the snapshot its view fills from.
pub struct ReaderState {
    slot: ReaderSlot,
    snap: RwLock<Arc<Snapshot>>,
    /// Odd while a refresh changes the snapshot's entries in place: a fill that saw it odd, or
    /// saw it change, fills again (a seqlock).
    gen: AtomicU64,
    scheme: Scheme,
    medium: Arc<dyn Medium>,
    pool_uuid: [u8; 16],
}

impl std::fmt::Debug for ReaderState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReaderState({:?})", self.slot)
    }
}

/// What a refresh did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refreshed {
    /// The page-map commit the reader now sees.
    pub seq: u64,
    /// Pages whose contents may differ from the previous snapshot (ascending).
    pub changed: Vec<u64>,
    /// Whether the pin table's change ring named the changed pages (else the whole committed
    /// map was read and compared).
    pub from_ring: bool,
}

impl Pool {
    /// Where `core`'s pin table is.
    pub fn pins_at(&self, core: &PmoCore) -> PinsAt {
        PinsAt {
            name: core.name.clone(),
            locker: self.inner.locker.clone(),
            medium: self.inner.medium.clone(),
            pool_uuid: self.inner.sb.uuid,
            pmo_uuid: core.uuid,
            extent_off: core.extent_off,
            npages: core.npages(),
            keep: Some(Arc::downgrade(&self.kept)),
        }
    }

    /// A reader beside any writer: join the pin table, claim a slot, pin the newest psync.
    pub(crate) fn open_reader(
        &self,
        core: Arc<PmoCore>,
        scheme: Scheme,
        master: &MasterKey,
    ) -> Result<ReaderState> {
        let inner = &*self.inner;
        let table = PinTable::join(&self.pins_at(&core), true)?
            .ok_or_else(|| StoreError::Os("pin table not made".into()))?;
        let slot = table.claim(&core.name)?;
        let medium = inner.medium.clone();
        let snap = take(&core, &medium, &slot, scheme, master, &inner.sb.uuid, None)?;
        Ok(ReaderState {
            slot,
            snap: RwLock::new(Arc::new(snap)),
            gen: AtomicU64::new(0),
            scheme,
            medium,
            pool_uuid: inner.sb.uuid,
        })
    }

    /// Readers attached to `core`'s PMO beside any writer, and the oldest psync they pin.
    pub fn readers_of(&self, core: &PmoCore) -> Result<(usize, Option<u64>)> {
        if let Some(t) = core.pins.joined() {
            return Ok(t.readers());
        }
        match PinTable::join(&self.pins_at(core), false)? {
            Some(t) => Ok(t.readers()),
            None => Ok((0, None)),
        }
    }

    /// Hold the pin-table lock of `core`'s PMO exclusively: `Busy` while readers are attached.
    /// Destroy, rename, rekey, resize and rotate hold it for their whole change, so no reader
    /// attaches meanwhile; a table a crash left is removed.
    pub fn lock_no_readers(&self, e: &pmo_format::Entry) -> Result<pmo_meta::locks::LockGuard> {
        self.lock_no_readers_as(e, false)
    }

    /// [`Pool::lock_no_readers`] for a destroy: a table file is removed only when the PMO's
    /// readers word says one may exist. With the word clear, the only table file there can be
    /// is one a reader died making before it set the word (nobody holds the lock now); the PMO
    /// and its uuid are gone, so nobody can join that file, and the sweep the first pool open
    /// of every pmo process runs removes it (`pmo_pins::table::sweep_orphans`). This saves a
    /// destroy the `unlink` of a file that is almost never there (issue 29).
    pub(crate) fn lock_no_readers_as(
        &self,
        e: &pmo_format::Entry,
        destroying: bool,
    ) -> Result<pmo_meta::locks::LockGuard> {
        let word = pmo_meta::locks::pins_word(e.extent_off);
        // A table this handle kept for its next reader leaves first, as a last user would.
        self.kept.forget(&e.uuid);
        match self
            .inner
            .locker
            .lock(word, pmo_os::lock::LockKind::Exclusive, None)?
        {
            Some(g) => {
                let core = PmoCore::new(e)?;
                let at = self.pins_at(&core);
                if !destroying || at.announced()? {
                    pmo_pins::table::remove_unused(&at, &g)?;
                }
                Ok(g)
            }
            None => Err(StoreError::Busy {
                name: e.name.clone(),
                how: "read-only by readers beside its writer (detach them first)",
            }),
        }
    }
}

/// Pin the newest psync and read its state.
fn take(
    core: &Arc<PmoCore>,
    medium: &Arc<dyn Medium>,
    slot: &ReaderSlot,
    scheme: Scheme,
    master: &MasterKey,
    pool_uuid: &[u8; 16],
    prev: Option<&Protection>,
) -> Result<Snapshot> {
    let m = &**medium;
    for _ in 0..100_000 {
        let newest = core.newest_record(m)?.map_or(0, |r| r.seq);
        // Dekker with the writer (pmo-pins readers.rs): the pin, then the newest record.
        slot.pin(newest);
        let Some((seq, table, trailer)) = core.committed_map(m)? else {
            std::thread::yield_now();
            continue;
        };
        if seq != newest {
            continue;
        }
        let (prot, table) = if scheme.is_protected() {
            // Moving on from a snapshot: its verified MAC state and the changed entries.
            let p = Protection::open_live_after(
                prev,
                core.clone(),
                medium.clone(),
                scheme,
                master,
                *pool_uuid,
                table,
                trailer,
            )?;
            (Some(Arc::new(p)), Arc::from([]))
        } else {
            (None, table.into_iter().map(AtomicU64::new).collect())
        };
        let live = if core.layout.log_off.is_some() {
            match pmo_engine::sublog::read_live(core, m, prot.as_deref(), pool_uuid)? {
                Some(l) if l.seq == seq => Some(l),
                _ => continue,
            }
        } else {
            None
        };
        return Ok(Snapshot {
            seq,
            records: live.as_ref().map_or(0, |l| l.records),
            table,
            prot,
            live,
        });
    }
    Err(StoreError::Busy {
        name: core.name.clone(),
        how: "read-write (psyncing too fast for a snapshot to be taken)",
    })
}

impl ReaderState {
    /// The snapshot the reader sees now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snap.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The scheme the reader reads under.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The reader's pin table.
    pub fn table(&self) -> &Arc<PinTable> {
        self.slot.table()
    }

    /// Fill `dst` with `page` as of the snapshot. Allocation-free (a page-fault handler).
    pub fn fill(&self, core: &PmoCore, page: u64, dst: &mut Page) -> Result<(), &'static str> {
        loop {
            let g = self.gen.load(Ordering::Acquire);
            if g & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let r = {
                let snap = self.snap.read().unwrap_or_else(|e| e.into_inner());
                fill_from(&snap, core, &*self.medium, self.slot.table(), page, dst)
            };
            fence(Ordering::Acquire);
            if self.gen.load(Ordering::Relaxed) == g {
                return r;
            }
        }
    }

    /// Move to the newest psync: the pages that changed since, for the view to drop.
    pub fn refresh(&self, core: &Arc<PmoCore>, master: &MasterKey) -> Result<Refreshed> {
        let m = &*self.medium;
        let old = self.snapshot();
        let newest = core.newest_record(m)?.map_or(0, |r| r.seq);
        if newest == old.seq && core.layout.log_off.is_none() {
            return Ok(Refreshed {
                seq: newest,
                changed: Vec::new(),
                from_ring: true,
            });
        }
        // The old pin stays until the view stops filling through the old snapshot.
        self.slot.begin_move();
        match self.refresh_in_place(core, &old) {
            Ok(Some(r)) => return Ok(r),
            Ok(None) => {}
            Err(e) => {
                self.slot.pin(old.seq);
                self.slot.end_move();
                return Err(e);
            }
        }
        let r = take(
            core,
            &self.medium,
            &self.slot,
            self.scheme,
            master,
            &self.pool_uuid,
            old.prot.as_deref(),
        );
        let new = match r {
            Ok(s) => s,
            Err(e) => {
                self.slot.pin(old.seq);
                self.slot.end_move();
                return Err(e);
            }
        };
        let mut changed: Vec<u64> = (0..core.npages())
            .filter(|&p| old.entry(p) != new.entry(p))
            .collect();
        for l in [&old.live, &new.live].into_iter().flatten() {
            changed.extend(l.pages());
        }
        changed.sort_unstable();
        changed.dedup();
        let seq = new.seq;
        *self.snap.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(new);
        Ok(Refreshed {
            seq,
            changed,
            from_ring: false,
        })
    }

    /// A refresh that reads only the pages the pin table's change ring names, and stores their
    /// entries in place. `None`: the ring does not cover the psyncs since the snapshot (or the
    /// protection cannot move in place): the caller reads the whole map. The slot has begun its
    /// move (the old pin held).
    fn refresh_in_place(&self, core: &Arc<PmoCore>, old: &Snapshot) -> Result<Option<Refreshed>> {
        let m = &*self.medium;
        for _ in 0..100_000 {
            let newest = core.newest_record(m)?.map_or(0, |r| r.seq);
            // Dekker with the writer, as `take`: the pin, then the newest record, then (after
            // a full fence, in `changed_since`) the ring, which holds every page of every
            // psync up to that record.
            self.slot.pin(newest);
            let Some(pages) = self.slot.table().changed_since(old.seq) else {
                return Ok(None);
            };
            let Some((seq, entries, trailer)) = core.committed_entries(m, &pages)? else {
                std::thread::yield_now();
                continue;
            };
            if seq != newest {
                continue;
            }
            let live = if core.layout.log_off.is_some() {
                match pmo_engine::sublog::read_live(core, m, old.prot.as_deref(), &self.pool_uuid)?
                {
                    Some(l) if l.seq == seq => Some(l),
                    _ => continue,
                }
            } else {
                None
            };
            // The pages whose entries changed (a psync that failed before its commit point
            // left pages in the ring that did not).
            let changes: Vec<(u64, u64)> = pages
                .iter()
                .zip(&entries)
                .filter(|&(&p, &e)| old.entry(p).0 != e)
                .map(|(&p, &e)| (p, e))
                .collect();
            let plan = match &old.prot {
                Some(prot) => match prot.check_refresh(&changes, trailer.as_ref())? {
                    Some(plan) => Some(plan),
                    None => return Ok(None),
                },
                None => None,
            };
            let mut changed: Vec<u64> = changes.iter().map(|&(p, _)| p).collect();
            for l in [&old.live, &live].into_iter().flatten() {
                changed.extend(l.pages());
            }
            changed.sort_unstable();
            changed.dedup();
            let new = Snapshot {
                seq,
                records: live.as_ref().map_or(0, |l| l.records),
                table: old.table.clone(),
                prot: old.prot.clone(),
                live,
            };
            // Fills wait, and fill again, while the entries change under them.
            self.gen.fetch_add(1, Ordering::AcqRel);
            fence(Ordering::SeqCst);
            match (&old.prot, plan) {
                (Some(prot), Some(plan)) => prot.apply_refresh(plan),
                _ => {
                    for &(p, e) in &changes {
                        old.table[p as usize].store(e, Ordering::Release);
                    }
                }
            }
            *self.snap.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(new);
            self.gen.fetch_add(1, Ordering::Release);
            return Ok(Some(Refreshed {
                seq,
                changed,
                from_ring: true,
            }));
        }
        Ok(None)
    }

    /// The view has dropped the changed pages: the old snapshot's pin goes.
    pub fn refreshed(&self) {
        self.slot.end_move();
    }
}

fn fill_from(
    snap: &Snapshot,
    core: &PmoCore,
    m: &dyn Medium,
    table: &PinTable,
    page: u64,
    dst: &mut Page,
) -> Result<(), &'static str> {
    if page >= core.npages() {
        return Err("page index beyond the PMO");
    }
    let e = snap.entry(page);
    match e.loc() {
        Some(PageLoc::Zero) => dst.fill(0),
        Some(PageLoc::Slot(s)) => {
            let mut buf = [0u8; FRAME_BYTES];
            let n = PAGE_SIZE as usize;
            if !table.lookup(page, s, snap.seq, &mut buf) {
                let meta = (core.layout.tag_bytes as usize).min(META_MAX);
                m.read(core.abs(core.layout.page(s, page)), &mut buf[..n])
                    .map_err(|_| "medium read failed")?;
                if meta > 0 {
                    m.read(core.abs(core.layout.tag(s, page)), &mut buf[n..n + meta])
                        .map_err(|_| "medium read failed")?;
                }
                // The slot, then the frames: a frame published meanwhile means the slot may
                // have been overwritten under the read, and has the version (frames.rs).
                fence(Ordering::SeqCst);
                table.lookup(page, s, snap.seq, &mut buf);
            }
            let (sealed, meta) = buf.split_at(n);
            let sealed: &Page = sealed.try_into().map_err(|_| "page size")?;
            match &snap.prot {
                Some(p) => {
                    let meta: &[u8; META_MAX] = meta.try_into().map_err(|_| "meta size")?;
                    p.open_bytes(page, e, sealed, meta, dst)?
                }
                None => dst.copy_from_slice(sealed),
            }
        }
        None => return Err("corrupted page-map entry"),
    }
    if let Some(l) = &snap.live {
        l.apply(page, dst);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_beside_a_writer_go_by_the_stored_schemes_class() {
        let beside: Vec<String> = Scheme::all_placements()
            .filter(|&s| beside_writer(s))
            .map(|s| s.name())
            .collect();
        assert_eq!(
            beside,
            [
                "none",
                "wed",
                "wedi",
                "bp",
                "sp",
                "secure:gcm",
                "secure",
                "none:medium",
                "wedi:medium",
                "secure:medium:gcm",
                "secure:medium"
            ]
        );
    }
}
