//! Rotate (`docs/lifecycle.md`): re-encrypt every page of a PMO under a new random data master
//! key, page by page in psyncs of [`BATCH`] pages, resumable after a crash. Unlike a rekey
//! (which re-wraps the same data master), a rotation leaves nothing a leaked data key opens.
//!
//! State on the medium: the rotation record in the PMO's header page ([`RECORD_OFF`], two
//! slots written alternately, each checked by a CRC, the valid one with the higher generation
//! wins) holds the new data master wrapped under the old one, and the progress cursor with the
//! sequence number of the psync that reached it. Pages below the cursor are sealed under the
//! new key, the others under the old; the page map's MAC (`secure`) is under the new key once
//! the first batch committed.
//!
//! 1. Under the PMO's exclusive attach lock: record {new key wrapped, cursor 0}, fenced.
//! 2. Each batch: the next written pages from the cursor, read under the old key and committed
//!    under the new one by the ordinary psync (shadow slots, journal, commit record: atomic);
//!    then the record's cursor, fenced. A crash between the two is told by the newest journal:
//!    a psync newer than the record's names the batch's pages, so the cursor is its last + 1.
//! 3. Cursor at the end: the entry is replaced (crash-consistent, `lifecycle`) with the new
//!    data master wrapped under the user key's key-encryption key and a fresh salt.
//! 4. The record is zeroed, fenced.
//!
//! Any keyed open of the PMO with a record finishes what is left of step 2 first (under its
//! exclusive lock) and uses the new key; a record whose key the entry's key no longer unwraps
//! is a finished rotation (step 3 done) and is zeroed. Steps 3 and 4 are `pmo rotate`'s: it
//! resumes a rotation a crash cut off. A live snapshot refuses a PMO with a rotation record.

use std::sync::Arc;

use pmo_format::layout::{PageLoc, PageMapEntry};
use pmo_medium::Medium;

use pmo_engine::engine::{CommitSource, PmoCore};
use pmo_meta::error::{Result, StoreError};

use crate::pool::{Pool, Progress};
use pmo_engine::protect::Protection;
use pmo_meta::keys::{self, MasterKey};
use pmo_meta::scheme::Scheme;

/// Offset in the PMO's header page of the rotation record's two slots.
pub const RECORD_OFF: u64 = 2064;
const SLOT: u64 = 96;
const MAGIC: [u8; 8] = *b"PMOROT01";
/// Pages re-encrypted per psync.
pub const BATCH: usize = 256;

/// A rotation in progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub gen: u64,
    /// Pages below it are under the new key.
    pub cursor: u64,
    /// The sequence number of the psync that reached `cursor` (or of the newest psync when the
    /// rotation began).
    pub cursor_seq: u64,
    /// The new data master, wrapped under the old one.
    pub wrapped: [u8; 40],
    /// The sequence number of the newest psync when the rotation began: a newer one is the
    /// rotation's, under the new key.
    pub base_seq: u64,
}

impl Record {
    fn encode(&self) -> [u8; SLOT as usize] {
        let mut b = [0u8; SLOT as usize];
        b[..8].copy_from_slice(&MAGIC);
        b[8..16].copy_from_slice(&self.gen.to_le_bytes());
        b[16..24].copy_from_slice(&self.cursor.to_le_bytes());
        b[24..32].copy_from_slice(&self.cursor_seq.to_le_bytes());
        b[32..72].copy_from_slice(&self.wrapped);
        b[72..80].copy_from_slice(&self.base_seq.to_le_bytes());
        let c = pmo_format::crc(&b[..80]);
        b[80..84].copy_from_slice(&c.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Record> {
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        if b[..8] != MAGIC || pmo_format::crc(&b[..80]).to_le_bytes() != b[80..84] {
            return None;
        }
        Some(Record {
            gen: u64_at(8),
            cursor: u64_at(16),
            cursor_seq: u64_at(24),
            wrapped: b[32..72].try_into().expect("40 bytes"),
            base_seq: u64_at(72),
        })
    }
}

/// The valid rotation record with the higher generation, if any.
pub fn read_record(m: &dyn Medium, core: &PmoCore) -> Result<Option<Record>> {
    let mut b = [0u8; 2 * SLOT as usize];
    m.read(core.abs(RECORD_OFF), &mut b)?;
    Ok(b.chunks_exact(SLOT as usize)
        .filter_map(Record::decode)
        .max_by_key(|r| r.gen))
}

/// Write `r` (generation one above `prev`'s) into the slot `prev` does not occupy; fenced.
pub fn write_record(m: &dyn Medium, core: &PmoCore, r: &mut Record) -> Result<()> {
    r.gen += 1;
    let off = core.abs(RECORD_OFF + (r.gen % 2) * SLOT);
    m.write(off, &r.encode())?;
    m.persist(off, SLOT)?;
    Ok(())
}

/// Zero both slots; fenced.
fn clear_record(m: &dyn Medium, core: &PmoCore) -> Result<()> {
    let off = core.abs(RECORD_OFF);
    m.write(off, &[0u8; 2 * SLOT as usize])?;
    m.persist(off, 2 * SLOT)?;
    Ok(())
}

/// Where a cut-off rotation resumes: the record's cursor, or past the batch the newest psync
/// committed if that psync is newer than the record (only a rotation batch can be: every
/// keyed open finishes a rotation before anything else commits).
fn resume_cursor(m: &dyn Medium, core: &PmoCore, r: &Record) -> Result<u64> {
    if r.cursor >= core.npages() {
        return Ok(core.npages());
    }
    match core.newest_pages(m)? {
        Some((seq, pages)) if seq > r.cursor_seq => Ok(pages
            .iter()
            .max()
            .map_or(r.cursor, |&p| (p + 1).max(r.cursor))),
        _ => Ok(r.cursor),
    }
}

fn crypt(name: &str, page: u64) -> impl FnOnce(&'static str) -> StoreError + '_ {
    move |reason| StoreError::Integrity {
        name: name.into(),
        page,
        reason: reason.into(),
    }
}

/// Step 2 from the cursor to the end: `old` and `new` are the data masters.
#[allow(clippy::too_many_arguments)]
pub fn reencrypt(
    pool: &Pool,
    core: &Arc<PmoCore>,
    scheme: Scheme,
    old: &MasterKey,
    new: &MasterKey,
    r: &mut Record,
    progress: Progress,
) -> Result<()> {
    let inner = &*pool.inner;
    let m = &*inner.medium;
    let n = core.npages();
    let mut raw = vec![0u8; (n * 8) as usize];
    m.read(core.abs(core.layout.map_off), &mut raw)?;
    let table: Vec<u64> = raw
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let trailer = core.newest_trailer(m)?;
    let floor = trailer.map_or(0, |t| t.reservation);
    let whole = trailer.filter(|_| scheme.whole_checksum()).map(|t| t.tail);
    let open = |key: &MasterKey| {
        Protection::open_fresh(
            core.clone(),
            inner.medium.clone(),
            scheme,
            key,
            inner.sb.uuid,
            table.clone(),
            floor,
        )
    };
    let (p_old, p_new) = (open(old)?, open(new)?);
    let mut cursor = resume_cursor(m, core, r)?;
    while cursor < n {
        let mut pages = Vec::with_capacity(BATCH);
        let mut end = cursor;
        while end < n && pages.len() < BATCH {
            if matches!(
                PageMapEntry(table[end as usize]).loc(),
                Some(PageLoc::Slot(_))
            ) {
                pages.push(end);
            }
            end += 1;
        }
        if !pages.is_empty() {
            let mut fill = |p: u64, dst: &mut pmo_engine::engine::Page| -> Result<()> {
                p_old.fill(p, dst).map_err(crypt(&core.name, p))
            };
            let r2 = core.commit(
                m,
                &pages,
                CommitSource::Fill(&mut fill),
                Some(&p_new),
                whole,
                false,
            );
            inner.poison(r2)?;
        }
        cursor = end;
        r.cursor = cursor;
        r.cursor_seq = core.seq();
        inner.poison(write_record(m, core, r))?;
        progress(cursor, n);
    }
    Ok(())
}

/// At a keyed open, after recovery: the data master to use, finishing a rotation a crash cut
/// off (`exclusive`: the caller holds the exclusive attach lock; a shared opener meets an
/// unfinished rotation as `Busy`).
pub fn on_open(
    pool: &Pool,
    core: &Arc<PmoCore>,
    scheme: Scheme,
    master: MasterKey,
    exclusive: bool,
) -> Result<MasterKey> {
    let inner = &*pool.inner;
    let m = &*inner.medium;
    let Some(mut r) = read_record(m, core)? else {
        return Ok(master);
    };
    let Some(new) = keys::unwrap_rotation(&master, &core.uuid, &r.wrapped) else {
        // The entry already gives the new key (step 3 done): only the record is left.
        if exclusive {
            inner.poison(clear_record(m, core))?;
        }
        return Ok(master);
    };
    let cursor = resume_cursor(m, core, &r)?;
    if cursor >= core.npages() && r.cursor < cursor && exclusive {
        // The last batch committed but a crash cut off its cursor: record it now, before
        // anything else commits (a later psync would pass for a batch and move the resume
        // point back over pages already under the new key).
        r.cursor = cursor;
        r.cursor_seq = core.seq();
        inner.poison(write_record(m, core, &mut r))?;
    }
    if cursor < core.npages() {
        if !exclusive {
            return Err(StoreError::Busy {
                name: core.name.clone(),
                how: "read-write (a rotation is being finished)",
            });
        }
        // The map as the newest commit vouches for it: under the old key until the rotation
        // first committed (a reservation or a batch), under the new one after.
        let vouching = if core.seq() == r.base_seq {
            &master
        } else {
            &new
        };
        drop(Protection::open(
            core.clone(),
            inner.medium.clone(),
            scheme,
            vouching,
            inner.sb.uuid,
        )?);
        let _rotating = inner.locker.lock_blocking(
            pmo_meta::locks::rotate_word(core.extent_off),
            pmo_os::lock::LockKind::Exclusive,
        )?;
        reencrypt(pool, core, scheme, &master, &new, &mut r, &mut |_, _| {})?;
    }
    Ok(new)
}
