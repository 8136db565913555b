//! The sub-page commit log (issue 13, `docs/commit.md` "The sub-page commit log",
//! `docs/format.md` §4 "Sub-page commit log"): a psync whose changed bytes are few and known
//! (declared ranges) writes one small sealed record and one fence instead of sealing and
//! writing whole pages into their slots.
//!
//! Committed state = the slots (as of the newest commit `s` that wrote pages: the base) + the
//! valid records over base `s`, in order. A record is valid only if its base is `s`, its record
//! sequence and previous tag continue the chain, and its tag checks (AES-GCM for `secure`,
//! CRC-32C for `none`); the first invalid record ends the log. So any page commit obsoletes
//! every record without touching the area (a reservation commit, which writes no page, does
//! not: `log_base`), and a record torn by a crash is simply absent. The count
//! word (the area's first 8 bytes, written with each record before its one fence) tells a
//! dropped or damaged middle record (claimed > valid + 1: an integrity error) from a torn last
//! one (claimed = valid + 1).
//!
//! Where live records are folded into pages (page-granular commits), so that nothing but the
//! writer's own session ever has to overlay them:
//! - [`recover`]: every open that holds the exclusive attach lock (recovery after a crash),
//!   before any page is read;
//! - `PmoHandle::fold_log`: a writer's detach, after its view is unmapped (from slot +
//!   records, never from the view);
//! - [`fold_before_commit`]: at the start of every other page commit of the PMO (rotation,
//!   resize, a handle's commit), rebuilt from slot + records;
//! - a psync that cannot log (too many bytes, the area full, an undeclared page): its page
//!   commit takes the pages with live records too, from the view, which holds their psynced
//!   bytes plus later declared changes ([`take_live_pages`]).
//!
//! Within the writer's session a page with a live record is resident in its view (it was
//! written there; only pages past the size are ever discarded, and those are page-committed
//! first), so the fill path never has to overlay; `rollback` does ([`overlay`]).
//!
//! A PMO gets a log area only when created (format version 6) through `Pool::pcreate_logged`
//! (`pmo-typed`'s heaps, created for declared tracking, by default; `PMO_LOG=0` turns that off) or with `PMO_LOG=1`, under
//! schemes `none` and `secure`, and records are written only under declared dirty tracking.
//! A raw `pcreate` (LMDB, the file store, the suite) gets none.
#![allow(unsafe_code)] // reading declared bytes out of the attached view.

use std::cell::Cell;
use std::sync::Mutex;

use pmo_format::entry::FLAG_SUBLOG;
use pmo_format::sublog::{
    self as fmt, claimed, count_word, RecordHeader, COUNT_WORD_OFF, FIRST_RECORD_OFF, HEADER_LEN,
    LOG_AREA_BYTES, TAG_LEN,
};
use pmo_format::PAGE_SIZE;
use pmo_medium::Medium;

use crate::engine::{CommitSource, CommitStats, Page, PmoCore};
use crate::log_state::{LiveChange, LogState};
use crate::protect::Protection;
use pmo_meta::error::{Result, StoreError};
use pmo_meta::scheme::{Cipher, Scheme, Shadow};
use pmo_meta::Health;

thread_local! {
    /// Set by [`Pool::pcreate_logged`] around its pcreate.
    static FORCE: Cell<bool> = const { Cell::new(false) };
}

/// Whether a PMO created now under `scheme` in a pool of format `version` gets a log area:
/// `PMO_LOG=1` (or `Pool::pcreate_logged`, unless `PMO_LOG=0`), a version-6 pool, and scheme
/// `none` or `secure` under either AEAD (a record is sealed with the PMO's page AEAD,
/// `pmo_crypt::seal_record`), plaintext in DRAM.
pub fn wanted(scheme: Scheme, version: u32) -> bool {
    let env = std::env::var("PMO_LOG").ok();
    let env = env.as_deref().map(str::trim);
    let asked = env != Some("0") && (FORCE.with(Cell::get) || env == Some("1"));
    asked
        && version >= pmo_format::FORMAT_VERSION_SUBLOG
        && (scheme == Scheme::NONE
            || (scheme.cipher() == Cipher::Aead && scheme.shadow == Shadow::Dram))
}

/// The entry flags for a PMO created with (`log`) or without a log area.
pub fn flags(log: bool) -> u32 {
    if log {
        FLAG_SUBLOG
    } else {
        0
    }
}

/// Run `f` (a pcreate) with a sub-page log area forced where the pool's version and the
/// scheme allow one, whatever `PMO_LOG` says: `Pool::pcreate_logged`.
pub fn with_log_forced<T>(f: impl FnOnce() -> T) -> T {
    FORCE.with(|c| c.set(true));
    let r = f();
    FORCE.with(|c| c.set(false));
    r
}

/// The sequence number records apply over, and whether records may be appended now: the
/// newest commit's sequence (0: none) when it wrote pages; when it wrote none (a reservation
/// commit of a protected PMO, which its page commit follows in the same psync, or a resize's
/// seed commit), the one before it, and no record is appended over it (the psync commits
/// pages instead). So records are only ever appended over a commit that wrote pages, and a
/// reservation commit that a crash separates from the page commit folding them leaves them
/// valid: recovery folds them.
fn log_base(core: &PmoCore, m: &dyn Medium) -> Result<(u64, bool)> {
    Ok(match core.newest_pages(m)? {
        None => (0, true),
        Some((s, pages)) if pages.is_empty() => (s.saturating_sub(1), false),
        Some((s, _)) => (s, true),
    })
}

/// The byte ranges declared since the last psync, for an attachment of a PMO with a log
/// (boxed: one word in every attachment).
#[derive(Debug, Default)]
pub struct Ranges(Box<Mutex<RangesInner>>);

#[derive(Debug, Default)]
struct RangesInner {
    list: Vec<(usize, usize)>,
    bytes: usize,
    overflow: bool,
}

impl Ranges {
    /// Hold the ranges. A declare holds them across recording its range and marking its pages
    /// dirty, a psync across collecting the dirty pages and taking the ranges: so every
    /// declare falls wholly before or wholly after what a psync sees of both. (Recorded
    /// before a psync's collect and marked after it, a range was taken by a psync that did
    /// not commit its page, and the next psync could log that page from its later ranges
    /// alone: the declared bytes were lost.)
    pub fn lock(&self) -> RangesGuard<'_> {
        RangesGuard(self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// [`Ranges`] held ([`Ranges::lock`]).
pub struct RangesGuard<'a>(std::sync::MutexGuard<'a, RangesInner>);

impl RangesGuard<'_> {
    /// Record `len` bytes at `offset`; beyond what one record can hold, just remember that the
    /// next psync is page-granular.
    pub fn record(&mut self, offset: usize, len: usize) {
        let r = &mut *self.0;
        if r.overflow {
            return;
        }
        r.bytes += len;
        if r.bytes > LOG_AREA_BYTES as usize {
            r.overflow = true;
            r.list = Vec::new();
        } else {
            r.list.push((offset, len));
        }
    }
    /// The ranges since the last take (`None`: too many to log), and forget them.
    pub fn take(&mut self) -> Option<Vec<(usize, usize)>> {
        let inner = std::mem::take(&mut *self.0);
        (!inner.overflow).then_some(inner.list)
    }
}

/// The declared ranges split at page boundaries and merged per page: `(page, offset, len)`,
/// ascending; `None` if some page of `pages` has no declared byte or a range lies in no page
/// of `pages` (then the psync is page-granular).
fn changes(ranges: &[(usize, usize)], pages: &[u64]) -> Option<Vec<(u64, usize, usize)>> {
    let ps = PAGE_SIZE as usize;
    let mut parts = Vec::with_capacity(ranges.len());
    for &(off, len) in ranges {
        let (mut at, end) = (off, off + len);
        while at < end {
            let page = (at / ps) as u64;
            let stop = end.min((page as usize + 1) * ps);
            parts.push((page, at % ps, stop - at));
            at = stop;
        }
    }
    parts.sort_unstable();
    let mut out: Vec<(u64, usize, usize)> = Vec::with_capacity(parts.len());
    for (p, o, l) in parts {
        match out.last_mut() {
            Some((lp, lo, ll)) if *lp == p && o <= *lo + *ll => *ll = (*ll).max(o + l - *lo),
            _ => out.push((p, o, l)),
        }
    }
    let mut seen: Vec<u64> = out.iter().map(|c| c.0).collect();
    seen.dedup();
    (seen == pages).then_some(out)
}

fn integrity(core: &PmoCore, reason: String) -> StoreError {
    StoreError::IntegrityPmo {
        name: core.name.clone(),
        reason,
    }
}

/// The AES-GCM keys of a `secure` PMO's records; `Err` for a protected scheme without them
/// (such PMOs never get a log area: `wanted`).
fn record_keys<'a>(
    core: &PmoCore,
    prot: Option<&'a Protection>,
) -> Result<Option<&'a pmo_crypt::PmoKeys>> {
    match prot {
        None => Ok(None),
        Some(p) => p.aead_keys().map(Some).ok_or_else(|| {
            StoreError::Corrupt(format!(
                "PMO '{}' has a sub-page log under scheme {}, which cannot have one",
                core.name,
                p.scheme()
            ))
        }),
    }
}

/// Read and check the records over `base` from the medium: the changes of the valid ones, in
/// order, and the state after them. Integrity error when the count word claims more than one
/// record past the last valid one (a middle record dropped or damaged).
fn read_log(
    core: &PmoCore,
    m: &dyn Medium,
    prot: Option<&Protection>,
    pool_uuid: &[u8; 16],
    base: u64,
) -> Result<LogState> {
    let area = core.abs(core.layout.log_off.expect("a PMO with a log"));
    let keys = record_keys(core, prot)?;
    let mut word = [0u8; 8];
    m.read(area + COUNT_WORD_OFF, &mut word)?;
    let claim = claimed(u64::from_le_bytes(word), base);
    let mut st = LogState::default();
    st.reset(core.seq(), base);
    let mut why = String::new();
    loop {
        let mut hb = [0u8; HEADER_LEN];
        if st.at + (HEADER_LEN + TAG_LEN) as u64 > LOG_AREA_BYTES {
            break;
        }
        m.read(area + st.at, &mut hb)?;
        let Some(h) = RecordHeader::decode(&hb) else {
            why = "no record header".into();
            break;
        };
        if h.base_seq != base || h.rec_seq != st.records + 1 || h.prev_tag != st.prev_tag {
            why = "it does not continue the chain".into();
            break;
        }
        let len = h.body_len as usize;
        if !fmt::fits(st.at, len) {
            why = "it runs past the area".into();
            break;
        }
        let mut body = vec![0u8; len];
        let mut tag = [0u8; TAG_LEN];
        m.read(area + st.at + HEADER_LEN as u64, &mut body)?;
        m.read(area + st.at + (HEADER_LEN + len) as u64, &mut tag)?;
        let ok = match keys {
            Some(k) => pmo_crypt::open_record(k, h.version, &hb, &mut body, &tag).is_ok(),
            None => fmt::plain_tag(pool_uuid, &core.uuid, &hb, &body) == tag,
        };
        if !ok {
            why = "its tag does not check".into();
            break;
        }
        let changes = fmt::decode_body(&body, core.npages())
            .map_err(|e| integrity(core, format!("sub-page log record {}: {e}", h.rec_seq)))?;
        for c in changes {
            st.live.push(LiveChange {
                page: c.page,
                offset: c.offset,
                bytes: body[c.data].to_vec(),
            });
        }
        st.records += 1;
        st.at += fmt::record_len(len);
        st.prev_tag = tag;
    }
    if claim > st.records + 1 {
        return Err(integrity(
            core,
            format!(
                "sub-page log record {} of {claim} fails ({why}): a record before the last was damaged or removed",
                st.records + 1
            ),
        ));
    }
    Ok(st)
}

/// Apply the live changes of `page` over its committed slot contents in `dst`.
fn apply(live: &[LiveChange], page: u64, dst: &mut Page) {
    for c in live.iter().filter(|c| c.page == page) {
        dst[c.offset..c.offset + c.bytes.len()].copy_from_slice(&c.bytes);
    }
}

/// Overlay `page`'s live changes (psynced, not yet folded) on `dst`, which holds the page as
/// its slot has it (`rollback`).
pub fn overlay(core: &PmoCore, page: u64, dst: &mut Page) {
    apply(&core.sublog.lock().live, page, dst);
}

/// Page-commit the live changes, each page rebuilt from its slot plus its records: the same
/// function for recovery and for a page commit that meets live records.
fn fold(
    core: &PmoCore,
    m: &dyn Medium,
    prot: Option<&Protection>,
    live: &[LiveChange],
) -> Result<()> {
    let mut pages: Vec<u64> = live.iter().map(|c| c.page).collect();
    pages.sort_unstable();
    pages.dedup();
    core.commit(
        m,
        &pages,
        CommitSource::Fill(&mut |p, dst| {
            match prot {
                Some(pr) => pr.fill(p, dst).map_err(|reason| StoreError::Integrity {
                    name: core.name.clone(),
                    page: p,
                    reason: reason.into(),
                })?,
                None => core.read_page(m, p, dst)?,
            }
            apply(live, p, dst);
            Ok(())
        }),
        prot,
        None,
        false,
    )?;
    Ok(())
}

/// Take the live changes of `core` (and leave the log empty): what a page commit must fold
/// first.
fn take_live(core: &PmoCore) -> Vec<LiveChange> {
    if core.layout.log_off.is_none() {
        return Vec::new();
    }
    std::mem::take(&mut core.sublog.lock().live)
}

/// Called at the start of every page commit of `core`: fold live records first (rebuilt from
/// slot + records), so the commit never obsoletes psynced bytes.
pub fn fold_before_commit(core: &PmoCore, m: &dyn Medium, prot: Option<&Protection>) -> Result<()> {
    let live = take_live(core);
    if live.is_empty() {
        return Ok(());
    }
    let r = fold(core, m, prot, &live);
    if r.is_err() {
        // Still valid on the medium (no commit of pages moved the base): kept, so that the
        // next commit folds them again or the page psync takes their pages from the view,
        // and no later commit obsoletes acknowledged bytes.
        let mut st = core.sublog.lock();
        let newer = std::mem::take(&mut st.live);
        st.live = live;
        st.live.extend(newer);
    }
    r
}

/// The pages with live changes, forgotten: a psync that commits them whole from its view
/// (which holds their psynced bytes) adds them to its pages.
pub fn take_live_pages(core: &PmoCore) -> Vec<u64> {
    let mut pages: Vec<u64> = take_live(core).into_iter().map(|c| c.page).collect();
    pages.sort_unstable();
    pages.dedup();
    pages
}

/// The psynced changes a live snapshot overlays on the slots it copied: the valid records
/// over the base of commit `seq`, read while the writer may keep psyncing.
#[derive(Debug, Default)]
pub struct LiveRecords {
    /// The newest commit when the records were read (none came between).
    pub seq: u64,
    /// Valid records read (each one psync after commit `seq`).
    pub records: u64,
    live: Vec<LiveChange>,
}

impl LiveRecords {
    /// The pages with changes, ascending.
    pub fn pages(&self) -> Vec<u64> {
        let mut pages: Vec<u64> = self.live.iter().map(|c| c.page).collect();
        pages.sort_unstable();
        pages.dedup();
        pages
    }
    /// Apply `page`'s changes over its slot contents in `dst`.
    pub fn apply(&self, page: u64, dst: &mut Page) {
        apply(&self.live, page, dst);
    }
}

/// For a live snapshot (which holds the key; `prot` opened live): read the records over the
/// newest page commit without stopping the writer. `Ok(None)`: a commit came while they were
/// read (a new base may reuse the area), read again after copying the pages it changed.
///
/// Records are appended, never rewritten, while the base stays (a torn or half-visible last
/// one fails its tag and ends the log, as at recovery), so a read bracketed by the same newest
/// commit is a prefix of the log over the slots of that commit: the PMO as of one psync.
pub fn read_live(
    core: &PmoCore,
    m: &dyn Medium,
    prot: Option<&Protection>,
    pool_uuid: &[u8; 16],
) -> Result<Option<LiveRecords>> {
    use std::sync::atomic::{fence, Ordering};
    let newest = || -> Result<u64> { Ok(core.newest_record(m)?.map_or(0, |r| r.seq)) };
    let seq = newest()?;
    if core.layout.log_off.is_none() {
        return Ok(Some(LiveRecords {
            seq,
            ..Default::default()
        }));
    }
    fence(Ordering::SeqCst);
    let read = log_base(core, m).and_then(|(base, _)| read_log(core, m, prot, pool_uuid, base));
    fence(Ordering::SeqCst);
    if newest()? != seq {
        return Ok(None);
    }
    let st = read?;
    Ok(Some(LiveRecords {
        seq,
        records: st.records,
        live: st.live,
    }))
}

/// Whether a record over the current base may be in `core`'s log area (its first record's
/// header names the base), read without keys: a path that reads the page map alone (the
/// entry-only resize) must then take the path that opens the PMO, which folds them
/// ([`recover`]). Conservative: a header whose record fails its tag still counts.
pub fn may_have_records(core: &PmoCore, m: &dyn Medium) -> Result<bool> {
    let Some(off) = core.layout.log_off else {
        return Ok(false);
    };
    let (base, _) = log_base(core, m)?;
    let mut hb = [0u8; HEADER_LEN];
    m.read(core.abs(off) + FIRST_RECORD_OFF, &mut hb)?;
    Ok(RecordHeader::decode(&hb).is_some_and(|h| h.base_seq == base && h.rec_seq == 1))
}

/// Zero a fresh extent's log area (flushed, not fenced: the entry's write fences it).
pub fn init_area(core: &PmoCore, m: &dyn Medium) -> Result<()> {
    if let Some(off) = core.layout.log_off {
        m.zero(core.abs(off), LOG_AREA_BYTES)?;
        m.flush(core.abs(off), LOG_AREA_BYTES)?;
    }
    Ok(())
}

/// Recovery of the log, at an open holding the exclusive attach lock, after the page-map
/// recovery and the protection's open: fold every valid record into its page (a page commit),
/// or report the damage (an integrity error).
pub fn recover(
    core: &PmoCore,
    m: &dyn Medium,
    prot: Option<&Protection>,
    pool_uuid: &[u8; 16],
    health: &Health,
) -> Result<()> {
    if core.layout.log_off.is_none() {
        return Ok(());
    }
    let (base, appendable) = log_base(core, m)?;
    let mut st = read_log(core, m, prot, pool_uuid, base)?;
    if !appendable {
        // Found again (and refused) by the first log psync.
        st.seq_seen = u64::MAX;
    }
    let live = std::mem::take(&mut st.live);
    *core.sublog.lock() = st;
    if !live.is_empty() {
        health.poison(fold(core, m, prot, &live))?;
    }
    Ok(())
}

/// At a writer's detach, after its view is gone: fold the live records into their pages,
/// rebuilt from slot + records (never from the view, whose bytes since the last psync are
/// discarded). A failure poisons the pool; the next open folds them again.
pub fn fold_log(core: &PmoCore, m: &dyn Medium, prot: Option<&Protection>, health: &Health) {
    if health.alive().is_err() {
        // A poisoned pool writes nothing more (as the rest of the detach): the records
        // stay valid on the medium and the next open folds them.
        return;
    }
    let _ = health.poison(fold_before_commit(core, m, prot));
}

/// After a shrink dropped pages (`resize`'s `clear_pages`): fold any live record, then
/// zero the log area, whose obsolete records may still hold bytes of the dropped pages
/// (a shrink leaves nothing of them on the medium). Only obsolete records are zeroed, so a
/// crash at any point loses nothing; fenced.
pub fn scrub_log(core: &PmoCore, m: &dyn Medium, prot: Option<&Protection>) -> Result<()> {
    if core.layout.log_off.is_none() {
        return Ok(());
    }
    fold_before_commit(core, m, prot)?;
    let mut st = core.sublog.lock();
    debug_assert!(st.live.is_empty(), "folded above");
    init_area(core, m)?;
    m.fence()?;
    // The next logged psync starts the area afresh (`log_psync` finds the base again).
    st.seq_seen = u64::MAX;
    Ok(())
}

/// A psync of `pages` (the dirty pages, ascending) as one log record of the `ranges`
/// declared since the last psync, read from the view at `base`. `Ok(None)`: this psync
/// cannot be logged (no log area, a page without declared bytes, no room, a live snapshot,
/// the version reservation spent); the caller commits pages, adding [`take_live_pages`].
///
/// # Safety
/// `base .. base + size` must be the attached view, mapped and readable, `pages` inside it.
#[allow(clippy::too_many_arguments)]
pub unsafe fn log_psync(
    core: &PmoCore,
    m: &dyn Medium,
    prot: Option<&Protection>,
    pool_uuid: &[u8; 16],
    health: &Health,
    base: *const u8,
    pages: &[u64],
    ranges: &[(usize, usize)],
) -> Result<Option<CommitStats>> {
    let Some(log_off) = core.layout.log_off else {
        return Ok(None);
    };
    let t0 = std::time::Instant::now();
    // A persistence failure poisoned the pool: every later psync fails, as a page
    // commit's does (`PmoHandle::commit_with_checksum`).
    health.alive()?;
    let keys = record_keys(core, prot)?;
    let Some(changes) = changes(ranges, pages) else {
        return Ok(None);
    };
    // A live snapshot reads slots only: while it runs, psyncs commit pages.
    let mut gate = [0u8; 8];
    m.read(core.abs(crate::gate::GATE_OFF), &mut gate)?;
    if gate != [0; 8] {
        return Ok(None);
    }
    let mut st = core.sublog.lock();
    let now = core.seq();
    if st.seq_seen != now || st.at < FIRST_RECORD_OFF {
        if !st.live.is_empty() {
            // A commit came while changes stayed live (a fold that failed after its
            // reservation commit): a page commit takes their pages.
            return Ok(None);
        }
        let (base, appendable) = log_base(core, m)?;
        if !appendable {
            return Ok(None);
        }
        st.reset(now, base);
    }
    let seq = st.base;
    let mut body = Vec::with_capacity(
        changes
            .iter()
            .map(|c| c.2 + fmt::CHANGE_HEAD)
            .sum::<usize>(),
    );
    let mut live = Vec::with_capacity(changes.len());
    for &(p, off, len) in &changes {
        let at = p as usize * PAGE_SIZE as usize + off;
        // SAFETY: the caller's contract: the view maps every byte of its dirty pages, and
        // `changes` lies inside `pages`. Racing stores by other threads land in this record
        // or, as their page is dirty again, in the next psync.
        let bytes = unsafe { std::slice::from_raw_parts(base.add(at), len) };
        fmt::push_change(&mut body, p as u32, off as u16, bytes);
        live.push(LiveChange {
            page: p,
            offset: off,
            bytes: body[body.len() - len..].to_vec(),
        });
    }
    if !fmt::fits(st.at, body.len()) || st.records >= u16::MAX as u64 - 1 {
        return Ok(None);
    }
    let version = match (prot, keys) {
        (Some(pr), Some(_)) => {
            let mut ws = pr.write.lock().unwrap_or_else(|e| e.into_inner());
            if pr.reservation_needed(&ws, 1).is_some() {
                return Ok(None);
            }
            ws.counter
                .next_version()
                .map_err(|e| StoreError::Os(format!("version counter: {e}")))?
        }
        _ => 0,
    };
    let header = RecordHeader {
        body_len: body.len() as u32,
        base_seq: seq,
        rec_seq: st.records + 1,
        version,
        prev_tag: st.prev_tag,
    }
    .encode();
    let tc = std::time::Instant::now();
    let tag = match keys {
        Some(k) => {
            pmo_crypt::seal_record(k, version, &header, &mut body)
                .map_err(|e| StoreError::Os(format!("sealing a log record: {e}")))?
                .0
        }
        None => fmt::plain_tag(pool_uuid, &core.uuid, &header, &body),
    };
    let crypt_ns = if keys.is_some() {
        tc.elapsed().as_nanos() as u64
    } else {
        0
    };
    let len = fmt::record_len(body.len());
    let mut rec = Vec::with_capacity(len as usize);
    rec.extend_from_slice(&header);
    rec.extend_from_slice(&body);
    rec.extend_from_slice(&tag);
    rec.resize(len as usize, 0);
    let area = core.abs(log_off);
    let word = count_word(seq, st.records + 1).to_le_bytes();
    let r = (|| {
        m.write_flush(area + st.at, &rec)?;
        m.write(area + COUNT_WORD_OFF, &word)?;
        m.flush(area + COUNT_WORD_OFF, 8)?;
        m.fence()
    })()
    .map_err(StoreError::from);
    health.poison(r)?;
    st.at += len;
    st.records += 1;
    st.prev_tag = tag;
    st.live.extend(live);
    let stats = CommitStats {
        seq: now,
        pages: pages.len() as u64,
        bytes_persisted: len + 8,
        fences: 1,
        elapsed_ns: t0.elapsed().as_nanos() as u64,
    };
    core.stats
        .count_psync(stats.elapsed_ns, crypt_ns, stats.bytes_persisted);
    Ok(Some(stats))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_split_merge_and_must_cover_the_dirty_pages() {
        let ps = PAGE_SIZE as usize;
        // Two overlapping ranges in page 0, one crossing into page 2 from page 1.
        let r = [(8, 8), (12, 8), (2 * ps - 4, 8)];
        assert_eq!(
            changes(&r, &[0, 1, 2]).unwrap(),
            vec![(0, 8, 12), (1, ps - 4, 4), (2, 0, 4)]
        );
        // A dirty page without declared bytes, or declared bytes in a page not dirty: no log.
        assert!(changes(&r, &[0, 1, 2, 3]).is_none());
        assert!(changes(&r, &[0, 1]).is_none());
        // Adjacent ranges merge.
        assert_eq!(changes(&[(0, 4), (4, 4)], &[0]).unwrap(), vec![(0, 0, 8)]);
    }

    #[test]
    fn ranges_overflow_to_page_granular() {
        let ranges = Ranges::default();
        let mut r = ranges.lock();
        r.record(0, 8);
        r.record(100, 8);
        assert_eq!(r.take().unwrap(), vec![(0, 8), (100, 8)]);
        assert_eq!(r.take().unwrap(), vec![]);
        r.record(0, LOG_AREA_BYTES as usize + 1);
        r.record(0, 8);
        assert!(r.take().is_none());
        assert_eq!(r.take().unwrap(), vec![]);
    }
}
