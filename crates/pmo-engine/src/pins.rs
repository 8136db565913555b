//! The writer's side of readers beside a writer (`pmo-pins`, `docs/readers.md`): before each
//! psync writes a slot, the versions readers pin are kept; after its commit point, the pages'
//! psync words move on. A writer joins the PMO's pin table when the readers word on the medium
//! says one exists (one 8-byte load per psync otherwise) and keeps it until it detaches.

use pmo_format::layout::{PageLoc, PageMapEntry};
use pmo_medium::Medium;
use pmo_meta::error::Result;
use pmo_pins::{Overwrite, PinTable, FRAME_BYTES, META_MAX};

use crate::engine::PmoCore;

impl PmoCore {
    /// Keep what readers pin of the slots psync `new_seq` is about to write. `current(p)`:
    /// the page's current map entry.
    pub(crate) fn keep_pinned(
        &self,
        m: &dyn Medium,
        table: &PinTable,
        newest: u64,
        new_seq: u64,
        pages: &[u64],
        current: &mut dyn FnMut(u64) -> Result<PageMapEntry>,
    ) -> Result<()> {
        let mut items = Vec::with_capacity(pages.len());
        for &p in pages {
            let cur = current(p)?;
            let (slot, has_current) = match cur.loc() {
                Some(PageLoc::Slot(s)) => (1 - s, true),
                _ => (0, false),
            };
            items.push(Overwrite {
                page: p,
                slot,
                has_current,
            });
        }
        let meta = (self.layout.tag_bytes as usize).min(META_MAX);
        let mut copy = |p: u64, slot: u8, buf: &mut [u8; FRAME_BYTES]| -> Result<()> {
            let page_len = pmo_format::PAGE_SIZE as usize;
            m.read(self.abs(self.layout.page(slot, p)), &mut buf[..page_len])?;
            if meta > 0 {
                m.read(
                    self.abs(self.layout.tag(slot, p)),
                    &mut buf[page_len..page_len + meta],
                )?;
            }
            Ok(())
        };
        table
            .before_overwrite(newest, new_seq, &items, &mut copy)
            .map_err(|e| match e {
                pmo_meta::error::StoreError::PinLimit { kept, oldest, .. } => {
                    pmo_meta::error::StoreError::PinLimit {
                        name: self.name.clone(),
                        kept,
                        oldest,
                    }
                }
                e => e,
            })
    }
}
