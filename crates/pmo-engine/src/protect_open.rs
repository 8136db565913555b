//! Opening a PMO's protection at attach: the keys derived from its master, the page map read
//! and verified against its trailer (the version-table MAC), the version counter resumed past
//! every version ever used, and the crash handler for what a cut-off session left.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use pmo_crypt::{
    FaithfulKeys, MasterKey as CryptMasterKey, PageProtector, VersionCounter, VersionTableMac,
};
use pmo_format::layout::{PageLoc, PageMapEntry};
use pmo_format::Trailer;
use pmo_medium::Medium;

use crate::engine::PmoCore;
use pmo_meta::error::Result;
use pmo_meta::keys::MasterKey;
use pmo_meta::scheme::{Cipher, Scheme};

use crate::protect::*;

impl Protection {
    /// Set up protection for an attach: derive keys, read (and for `secure`, verify) the page
    /// map, recover the version counter. The PMO must be recovered already.
    pub fn open(
        core: Arc<PmoCore>,
        medium: Arc<dyn Medium>,
        scheme: Scheme,
        master: &MasterKey,
        pool_uuid: [u8; 16],
    ) -> Result<Protection> {
        Self::open_with(core, medium, scheme, master, pool_uuid, Mode::Attach, None)
    }

    /// A rotation's protection (`crate::rotate`) over the current map `table`, unverified (the
    /// caller opened the PMO verified under the key that vouches for the map): it seals with
    /// checksums included and never commits plaintext; nothing is written by the open.
    pub fn open_fresh(
        core: Arc<PmoCore>,
        medium: Arc<dyn Medium>,
        scheme: Scheme,
        master: &MasterKey,
        pool_uuid: [u8; 16],
        table: Vec<u64>,
        floor: u64,
    ) -> Result<Protection> {
        Self::open_with(
            core,
            medium,
            scheme,
            master,
            pool_uuid,
            Mode::Fresh(table, floor),
            None,
        )
    }

    /// A reader's protection over a committed map read while a writer in another process may
    /// be psyncing (a live snapshot: [`PmoCore::committed_map`]): verified as at attach, but
    /// nothing is written (no crash handler runs: the writer's session is alive), and pages of
    /// an integrity-at-detach session still open have no checksums yet, so they are decrypted
    /// without one (the snapshot's own commits write fresh ones).
    pub fn open_live(
        core: Arc<PmoCore>,
        medium: Arc<dyn Medium>,
        scheme: Scheme,
        master: &MasterKey,
        pool_uuid: [u8; 16],
        table: Vec<u64>,
        trailer: Option<Trailer>,
    ) -> Result<Protection> {
        Self::open_with(
            core,
            medium,
            scheme,
            master,
            pool_uuid,
            Mode::Live(table, trailer),
            None,
        )
    }

    /// [`Protection::open_live`] for a reader, moving on from its snapshot `prev` if it has one
    /// (the same PMO, an older committed map): the version-table MAC is then checked from
    /// `prev`'s verified running state and the entries that changed (O(changed) AES blocks,
    /// `pmo_crypt::verify_table_update`), exactly as strong as the whole check, which it falls
    /// back to when `prev` is `None` or has no MAC state for this table.
    #[allow(clippy::too_many_arguments)] // open_live's, and the snapshot moved on from
    pub fn open_live_after(
        prev: Option<&Protection>,
        core: Arc<PmoCore>,
        medium: Arc<dyn Medium>,
        scheme: Scheme,
        master: &MasterKey,
        pool_uuid: [u8; 16],
        table: Vec<u64>,
        trailer: Option<Trailer>,
    ) -> Result<Protection> {
        Self::open_with(
            core,
            medium,
            scheme,
            master,
            pool_uuid,
            Mode::Live(table, trailer),
            prev,
        )
    }

    fn open_with(
        core: Arc<PmoCore>,
        medium: Arc<dyn Medium>,
        scheme: Scheme,
        master: &MasterKey,
        pool_uuid: [u8; 16],
        mode: Mode,
        prev: Option<&Protection>,
    ) -> Result<Protection> {
        let mut fresh_floor = 0;
        let (fresh, live) = match mode {
            Mode::Attach => (false, None),
            Mode::Live(table, trailer) => (false, Some((table, trailer))),
            Mode::Fresh(table, floor) => {
                fresh_floor = floor;
                (true, Some((table, None)))
            }
        };
        let m = &*medium;
        let crypt_master = CryptMasterKey::from_slice(&master[..]).map_err(crypt_err)?;
        let at_detach = scheme.integrity_at() == pmo_meta::scheme::IntegrityAt::Detach;
        // Per-page checksums may be pending from an earlier session at detach even when this
        // attach runs the PMO at psync (a run-time switch of design): the crash handler then
        // repairs them all the same.
        let pending = scheme.cipher() == Cipher::XtsSha256 && {
            let mut b = [0u8; 8];
            m.read(core.abs(ID_PENDING_OFF), &mut b)?;
            u64::from_le_bytes(b) != 0
        };
        let unchecked = || -> Result<PageProtector> {
            Ok(PageProtector::Xts {
                keys: FaithfulKeys::derive(&crypt_master, pool_uuid, core.uuid)
                    .map_err(crypt_err)?,
                checksum: false,
            })
        };
        let sealer = if at_detach && !fresh {
            Some(unchecked()?)
        } else {
            None
        };
        let repair = if scheme.cipher() == Cipher::XtsSha256 && !at_detach {
            Some(unchecked()?)
        } else {
            None
        };
        let protector = match scheme.cipher() {
            Cipher::Plain => PageProtector::Plain,
            Cipher::Xts | Cipher::XtsSha256 => PageProtector::Xts {
                keys: FaithfulKeys::derive(&crypt_master, pool_uuid, core.uuid)
                    .map_err(crypt_err)?,
                checksum: scheme.cipher() == Cipher::XtsSha256
                    && !(live.is_some() && !fresh && pending),
            },
            Cipher::Aead => PageProtector::Aead {
                keys: pmo_meta::kept_keys::pmo_keys(master, pool_uuid, core.uuid, scheme.aead)
                    .map_err(crypt_err)?,
            },
        };
        let bp_plain = scheme.shadow == pmo_meta::scheme::Shadow::Medium
            && matches!(
                scheme.id,
                pmo_meta::scheme::SchemeId::Bp
                    | pmo_meta::scheme::SchemeId::BpIp
                    | pmo_meta::scheme::SchemeId::BpId
            );
        // Plaintext in a committed slot is possible only for a PMO with a plaintext area and
        // the XTS designs (a run-time switch to SP or WED finds it from a BP session).
        let may_hold_plain = core.layout.plain_off.is_some()
            && matches!(scheme.cipher(), Cipher::Xts | Cipher::XtsSha256);
        let is_live = live.is_some();
        let (table, trailer) = match live {
            Some(t) => t,
            None => {
                let mut raw = vec![0u8; (core.npages() * 8) as usize];
                m.read(core.abs(core.layout.map_off), &mut raw)?;
                let table: Vec<u64> = raw
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect();
                (table, core.newest_trailer(m)?)
            }
        };
        // What the version-table MAC covers: each entry without its wide check.
        let mac_words =
            || -> Vec<u64> { table.iter().map(|&e| PageMapEntry(e).mac_word()).collect() };
        let mut max_used = 0u64;
        for (i, &e) in table.iter().enumerate() {
            let e = PageMapEntry(e);
            if e.loc().is_none() {
                return Err(integrity(
                    &core,
                    format!("page {i}: invalid page-map entry {:#x}", e.0),
                ));
            }
            if e.is_plain() && !may_hold_plain {
                return Err(integrity(
                    &core,
                    format!("page {i}: marked as committed plaintext, which this PMO never holds"),
                ));
            }
            max_used = max_used.max(e.version());
        }
        if let Some(t) = &trailer {
            max_used = max_used.max(t.epoch);
        }
        let mac = match &protector {
            PageProtector::Aead { keys } => Some(match &trailer {
                Some(t) => {
                    let expect = trailer_mac(keys, t);
                    if !bool::from(subtle::ConstantTimeEq::ct_eq(&expect[..], &t.tail[..])) {
                        return Err(integrity(
                            &core,
                            "the newest commit's trailer fails its MAC (epoch, reservation or table tag altered)",
                        ));
                    }
                    let tag = pmo_crypt::TableTag(t.table_tag);
                    match prev.and_then(|p| p.mac_changes(&table)) {
                        Some((state, changes)) => pmo_crypt::verify_table_update(
                            keys, &state, t.epoch, &changes, &tag,
                        ),
                        None => pmo_crypt::verify_table(keys, t.epoch, &mac_words(), &tag),
                    }
                    .map_err(|_| {
                        integrity(
                            &core,
                            "the page map fails its version-table MAC (pages rolled back, swapped or transplanted, or the map was altered)",
                        )
                    })?
                }
                None if fresh
                    || table
                        .iter()
                        .all(|&e| PageMapEntry(e).loc() == Some(PageLoc::Zero)) =>
                {
                    VersionTableMac::from_table(keys, &mac_words())
                }
                None => {
                    return Err(integrity(
                        &core,
                        "pages are mapped but no commit vouches for them",
                    ))
                }
            }),
            _ => None,
        };
        // A whole-PMO checksum vouches for every page; without a commit there is none, so the
        // map must be empty (a flipped entry would otherwise read as data).
        if scheme.whole_checksum()
            && !fresh
            && trailer.is_none()
            && table
                .iter()
                .any(|&e| PageMapEntry(e).loc() != Some(PageLoc::Zero))
        {
            return Err(integrity(
                &core,
                "pages are mapped but no commit vouches for them",
            ));
        }
        // Resume above everything committed: the (authenticated, for `secure`) reservation of
        // the newest commit bounds every version used before, committed or not.
        let reservation = trailer.map_or(0, |t| t.reservation);
        let mut counter =
            VersionCounter::recover(reservation.max(max_used.saturating_add(1)).max(fresh_floor));
        if !matches!(protector, PageProtector::Aead { .. }) {
            // No nonces outside AES-GCM: versions only order pages, no reservation needed.
            counter.confirm_reservation(PageMapEntry::VERSION_MAX);
        }
        let prot = Protection {
            scheme,
            protector,
            sealer,
            repair,
            bp_plain,
            encrypting: AtomicBool::new(fresh),
            plain_session: Mutex::new(false),
            id_pages: (0..core.npages().div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            id_session: Mutex::new(false),
            entries: table.into_iter().map(AtomicU64::new).collect(),
            whole_expected: trailer.filter(|_| scheme.whole_checksum()).map(|t| t.tail),
            write: Mutex::new(WriteState {
                counter,
                mac,
                reservation,
            }),
            scratch: Mutex::new(Vec::new()),
            core,
            medium,
        };
        if is_live {
            if pending {
                // Which pages the live session committed without checksums is its secret:
                // none is checked (a plaintext commit's checksum included).
                for w in prot.id_pages.iter() {
                    w.store(u64::MAX, Ordering::Release);
                }
            }
            return Ok(prot);
        }
        // The crash handler of BP on the medium: pages a session committed as plaintext and
        // did not encrypt (the process died) are encrypted now, before anything is used.
        // (Open runs under the exclusive attach lock for PMOs with a plaintext area.)
        if prot.encrypt_plain_pages()? > 0 {
            prot.finish_detach()?;
            prot.core.clear_plain_word(&*prot.medium)?;
        }
        if pending {
            prot.crash_handler()?;
        }
        Ok(prot)
    }
}

/// A verified version-table MAC state, and the changes `(index, old word, new word)` from its
/// table to another.
type MacChanges = (VersionTableMac, Vec<(u64, u64, u64)>);

impl Protection {
    /// This protection's verified version-table MAC state, and the changes `(index, old word,
    /// new word)` from its map to `table`, if it has one for a table of that length.
    fn mac_changes(&self, table: &[u64]) -> Option<MacChanges> {
        if !matches!(self.protector, PageProtector::Aead { .. })
            || self.entries.len() != table.len()
        {
            return None;
        }
        let state = self
            .write
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .mac
            .clone()?;
        let changes = table
            .iter()
            .zip(self.entries.iter())
            .enumerate()
            .filter_map(|(i, (&new, old))| {
                let (old, new) = (
                    PageMapEntry(old.load(Ordering::Acquire)).mac_word(),
                    PageMapEntry(new).mac_word(),
                );
                (old != new).then_some((i as u64, old, new))
            })
            .collect();
        Some((state, changes))
    }
}
