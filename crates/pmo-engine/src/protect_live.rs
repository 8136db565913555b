//! A reader's verified page map moving on in place (readers beside a writer, `docs/readers.md`):
//! a refresh that knows which pages changed (the pin table's change ring) checks their new
//! entries and the newest commit's trailer, then stores them, without reading or verifying the
//! rest of the map. The version-table MAC is checked from the snapshot's verified running state
//! and the changed entries (`pmo_crypt::verify_table_update`), exactly as strong as a whole
//! check: a change left out or altered fails it.

use std::sync::atomic::Ordering;

use pmo_crypt::{PageProtector, VersionTableMac};
use pmo_format::layout::PageMapEntry;
use pmo_format::Trailer;
use pmo_meta::error::Result;
use pmo_meta::scheme::Cipher;

use crate::protect::{integrity, trailer_mac, Protection};

/// A checked refresh of a reader's map, to store with [`Protection::apply_refresh`].
pub struct RefreshPlan {
    entries: Vec<(u64, u64)>,
    mac: Option<VersionTableMac>,
}

impl Protection {
    /// Check a reader's move to the map whose `changes` (page, new entry) from this one are
    /// given, with the newest commit's `trailer`. `Ok(None)`: this protection cannot move in
    /// place (a whole-PMO checksum, per-page checksums a detach may owe, or no verified MAC
    /// state): the caller opens a new one. Nothing is changed here.
    pub fn check_refresh(
        &self,
        changes: &[(u64, u64)],
        trailer: Option<&Trailer>,
    ) -> Result<Option<RefreshPlan>> {
        let cipher = self.scheme.cipher();
        if self.scheme.whole_checksum() || cipher == Cipher::XtsSha256 {
            return Ok(None);
        }
        let core = &self.core;
        let may_hold_plain = core.layout.plain_off.is_some() && cipher == Cipher::Xts;
        for &(p, e) in changes {
            let e = PageMapEntry(e);
            if p >= self.entries.len() as u64 || e.loc().is_none() {
                return Err(integrity(
                    core,
                    format!("page {p}: invalid page-map entry {:#x}", e.0),
                ));
            }
            if e.is_plain() && !may_hold_plain {
                return Err(integrity(
                    core,
                    format!("page {p}: marked as committed plaintext, which this PMO never holds"),
                ));
            }
        }
        let mac = match &self.protector {
            PageProtector::Aead { keys } => {
                let Some(t) = trailer else {
                    return Err(integrity(
                        core,
                        "pages are mapped but no commit vouches for them",
                    ));
                };
                let expect = trailer_mac(keys, t);
                if !bool::from(subtle::ConstantTimeEq::ct_eq(&expect[..], &t.tail[..])) {
                    return Err(integrity(
                        core,
                        "the newest commit's trailer fails its MAC (epoch, reservation or table tag altered)",
                    ));
                }
                let Some(state) = self
                    .write
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .mac
                    .clone()
                else {
                    return Ok(None);
                };
                let words: Vec<(u64, u64, u64)> = changes
                    .iter()
                    .filter_map(|&(p, new)| {
                        let old = self.entry(p).mac_word();
                        let new = PageMapEntry(new).mac_word();
                        (old != new).then_some((p, old, new))
                    })
                    .collect();
                let tag = pmo_crypt::TableTag(t.table_tag);
                Some(
                    pmo_crypt::verify_table_update(keys, &state, t.epoch, &words, &tag).map_err(
                        |_| {
                            integrity(
                                core,
                                "the page map fails its version-table MAC (pages rolled back, swapped or transplanted, or the map was altered)",
                            )
                        },
                    )?,
                )
            }
            _ => None,
        };
        Ok(Some(RefreshPlan {
            entries: changes.to_vec(),
            mac,
        }))
    }

    /// Store a checked refresh: the changed entries and the new MAC state.
    pub fn apply_refresh(&self, plan: RefreshPlan) {
        for (p, e) in plan.entries {
            self.entries[p as usize].store(e, Ordering::Release);
        }
        if plan.mac.is_some() {
            self.write.lock().unwrap_or_else(|e| e.into_inner()).mac = plan.mac;
        }
    }
}
