//! A reader's refresh (readers beside a writer, `docs/readers.md`): the view drops the pages
//! that changed since its snapshot and fills them from the newest psync's: at once those it
//! had decrypted, the others on their next touch.

use pmo_meta::error::Result;

use crate::attach::{view_err, Attachment};
use crate::whole::{view_pages, whole_checksum_of};
use pmo_os::view::PAGE_SIZE;

impl Attachment {
    /// Move a read-only attachment to the newest psync (readers beside a writer,
    /// `docs/readers.md`): the pages that changed since its snapshot are dropped from the view
    /// and fill again from the new one; the rest stay decrypted. Returns the psync the view
    /// now shows ([`Attachment::snapshot_seq`]). `Invalid` for a read-write attachment. No other
    /// thread may read the view during a refresh (as an LMDB read transaction is renewed by
    /// its own thread): a page it reads then may be of either snapshot.
    pub fn refresh(&self) -> Result<u64> {
        // A prediction worker may be installing a page of the old snapshot after the refresh
        // dropped it: no refresh while one runs.
        if self.predict_stats().is_some() {
            return Err(pmo_meta::error::StoreError::Unsupported(format!(
                "refresh of PMO '{}' attached with predictive decryption on: attach it without (PMO_PREDICT=off) to refresh",
                self.name()
            )));
        }
        let r = self.handle().refresh()?;
        let pages = self.view().pages();
        let whole = self.handle().scheme().granularity() == pmo_meta::scheme::Granularity::Whole;
        // A changed page the view had decrypted is read again at once (it was touched, and a
        // fault on its next touch costs several times the read); the others fill on touch.
        let again = !whole && !self.view().is_resident();
        let mut buf: Option<Box<pmo_engine::engine::Page>> = None;
        let dropped: Result<()> = r.changed.iter().filter(|&&p| p < pages).try_for_each(|&p| {
            let was = again && self.view().is_present(p);
            self.view().discard(p).map_err(view_err)?;
            if was {
                let b = buf.get_or_insert_with(|| Box::new([0u8; PAGE_SIZE]));
                // A page that fails to read stays absent: its next touch reports it.
                if self.handle().read_page(p, b).is_ok() {
                    self.view().install(p, b).map_err(view_err)?;
                }
            }
            Ok(())
        });
        if dropped.is_ok() && whole {
            self.view().populate_all().map_err(view_err)?;
            if let Some(prot) = whole_checksum_of(self.handle()) {
                prot.verify_whole(view_pages(self.view()))?;
            }
        }
        self.handle().refreshed();
        dropped?;
        Ok(r.seq)
    }

    /// The psync whose state a read-only attachment shows (a writer: the newest psync).
    pub fn snapshot_seq(&self) -> u64 {
        self.handle().seq()
    }
}
