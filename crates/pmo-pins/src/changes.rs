//! The change ring: which pages each psync wrote, so that a reader's refresh finds the pages
//! that changed since its snapshot without reading the whole page map (`docs/readers.md`).
//!
//! The writer appends one entry (psync, page) per page a psync writes, before the psync writes
//! any slot ([`PinTable::before_overwrite`]), so a reader that sees a psync's commit record sees
//! its entries. Entries are appended in psync order; a psync that fails before its commit point
//! leaves entries naming pages that did not change, which costs a reader only a page dropped
//! that it did not need to drop.
//!
//! The ring is a seqlock of counters: `H_RING_RESERVED` is raised before entries are written,
//! `H_RING_HEAD` after. A reader reads the head, then entries backwards, then the reserved
//! count: an entry it read is valid if the writer cannot have started to overwrite it, i.e. its
//! index is at least the reserved count minus the ring's length. Psyncs the ring does not cover
//! (made before a writer tracked this table, or overwritten because the reader is further behind
//! than the ring reaches) give `None`: the reader then diffs the whole map.

use std::sync::atomic::{fence, Ordering};

use crate::layout::*;
use crate::table::PinTable;

impl PinTable {
    /// Psync `seq` is about to write `pages`: append them to the ring. Writer only.
    pub(crate) fn record_changes(&self, seq: u64, pages: impl Iterator<Item = u64> + Clone) {
        let n = pages.clone().count() as u64;
        let ring = self.layout.ring;
        if n == 0 || ring == 0 {
            return;
        }
        let head = self.w(H_RING_HEAD).load(Ordering::Acquire);
        let end = head + n;
        self.w(H_RING_RESERVED).store(end, Ordering::SeqCst);
        // Only the newest `ring` entries can be kept.
        let skip = n.saturating_sub(ring);
        for (i, p) in (head..end).zip(pages).skip(skip as usize) {
            let e = self.layout.ring_entry(i);
            self.w(e + R_SEQ).store(seq, Ordering::Relaxed);
            self.w(e + R_PAGE).store(p, Ordering::Relaxed);
        }
        self.w(H_RING_HEAD).store(end, Ordering::Release);
    }

    /// The pages written by psyncs after `since` (ascending, without repeats), or `None` when
    /// the ring does not cover them all. Call after reading the newest commit record (a full
    /// fence between): every page written by a psync up to that record is in the answer, and
    /// possibly pages of a psync after it.
    pub fn changed_since(&self, since: u64) -> Option<Vec<u64>> {
        let ring = self.layout.ring;
        let known_from = self.w(H_KNOWN_FROM).load(Ordering::Acquire);
        if ring == 0 || known_from == NOT_TRACKED || since < known_from {
            return None;
        }
        fence(Ordering::SeqCst);
        let head = self.w(H_RING_HEAD).load(Ordering::Acquire);
        let mut pages = Vec::new();
        let mut i = head;
        while i > 0 {
            if head - (i - 1) > ring {
                // Older entries are gone: psyncs after `since` may be among them.
                return None;
            }
            let e = self.layout.ring_entry(i - 1);
            let seq = self.w(e + R_SEQ).load(Ordering::Relaxed);
            let page = self.w(e + R_PAGE).load(Ordering::Relaxed);
            if seq <= since {
                break;
            }
            pages.push(page);
            i -= 1;
        }
        // Every entry read must have been stable while it was read.
        fence(Ordering::Acquire);
        let reserved = self.w(H_RING_RESERVED).load(Ordering::Acquire);
        if i.saturating_sub(1) < reserved.saturating_sub(ring) {
            return None;
        }
        if pages.iter().any(|&p| p >= self.layout.npages) {
            return None;
        }
        pages.sort_unstable();
        pages.dedup();
        Some(pages)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pmo_medium::crash::CrashMedium;
    use pmo_meta::locks::{LocalLocks, Locker};

    use super::*;
    use crate::table::PinsAt;

    fn table(npages: u64, pmo: u8) -> (Arc<PinTable>, PinsAt) {
        let at = PinsAt {
            name: "ring".into(),
            locker: Locker::Local(Arc::new(LocalLocks::default())),
            medium: Arc::new(CrashMedium::new(1 << 16)),
            pool_uuid: [7; 16],
            pmo_uuid: [pmo; 16],
            extent_off: 4096,
            npages,
            keep: None,
        };
        (PinTable::join(&at, true).unwrap().unwrap(), at)
    }

    #[test]
    fn a_reader_gets_the_pages_of_the_psyncs_after_its_own() {
        let (t, _at) = table(1000, 1);
        // Nothing tracked yet: the ring cannot answer.
        assert_eq!(t.changed_since(0), None);
        t.track(5);
        assert_eq!(
            t.changed_since(4),
            None,
            "psyncs before tracking are not in the ring"
        );
        assert_eq!(t.changed_since(5), Some(vec![]));
        t.record_changes(6, [9u64, 3, 700].into_iter());
        t.record_changes(7, [3u64, 4].into_iter());
        assert_eq!(t.changed_since(5), Some(vec![3, 4, 9, 700]));
        assert_eq!(t.changed_since(6), Some(vec![3, 4]));
        assert_eq!(t.changed_since(7), Some(vec![]));
    }

    #[test]
    fn a_reader_further_behind_than_the_ring_is_told_so() {
        let (t, _at) = table(4, 2);
        assert_eq!(t.layout.ring, 256);
        t.track(0);
        for seq in 1..=100 {
            t.record_changes(seq, [seq % 4, (seq + 1) % 4].into_iter());
        }
        // 200 entries: all still there.
        assert_eq!(t.changed_since(0), Some(vec![0, 1, 2, 3]));
        for seq in 101..=200 {
            t.record_changes(seq, [seq % 4, (seq + 1) % 4].into_iter());
        }
        // 400 entries: psync 1's are gone, psync 73's on are there (entries 144.. of 400), so
        // a reader at 72 cannot know whether psync 73 wrote more pages; one at 73 can.
        assert_eq!(t.changed_since(0), None);
        assert_eq!(t.changed_since(72), None);
        assert_eq!(t.changed_since(73), Some(vec![0, 1, 2, 3]));
        assert_eq!(t.changed_since(199), Some(vec![0, 1]));
        // One psync of more pages than the ring holds: nobody behind it can be answered.
        t.record_changes(201, 0..300u64);
        assert_eq!(t.changed_since(200), None);
    }

    #[test]
    fn a_page_beyond_the_table_is_not_believed() {
        let (t, _at) = table(8, 3);
        t.track(0);
        t.record_changes(1, [2u64, 8].into_iter());
        assert_eq!(t.changed_since(0), None);
    }
}
