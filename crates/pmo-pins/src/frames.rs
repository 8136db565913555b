//! Page versions kept for readers: what the writer does before a psync overwrites a slot, and
//! how a reader finds the version its snapshot needs.
//!
//! Shadow paging writes each page of a psync into the slot its map entry does not name. That
//! slot holds the page's version before the current one, which snapshots from the psync that
//! wrote it up to (not including) the psync that wrote the current one still show. So before a
//! psync writes page `p`'s slot, the writer copies that slot's bytes (page and metadata) into a
//! *frame* when a live pin falls in that range, and publishes the frame in `p`'s list before
//! the slot is written (a full fence between). A reader whose snapshot entry names a slot reads
//! the slot, then looks for a frame of that page, slot and pin: if there is one the writer may
//! have overwritten the slot meanwhile, and the frame has the bytes. A frame that serves a live
//! pin is never changed or freed, so what a reader copies from it is stable.
//!
//! The writer knows each page's range from two words per page in the table: the psync of the
//! current version and of the one before. Pages not written since the table began tracking
//! were last written at or before `H_KNOWN_FROM`, so their other slot serves `[0, known_from)`.
//! A psync marks its pages pending and `H_INFLIGHT` before it writes any slot; the words move
//! on after its commit point. A writer that died in between leaves them: the next one settles
//! them against the newest commit ([`PinTable::track`]).

use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use pmo_meta::error::{Result, StoreError};

use crate::layout::*;
use crate::table::{PinTable, WriterState};

/// How often a writer that keeps versions looks for dead readers (one `fcntl` per pinned slot).
const LIVENESS_EVERY: Duration = Duration::from_millis(20);

/// Reads page `p`'s slot `s` (page, then metadata) into a frame's buffer.
pub type CopySlot<'a> = dyn FnMut(u64, u8, &mut [u8; FRAME_BYTES]) -> Result<()> + 'a;

/// A page a psync is about to write: its slot the psync writes, and whether its current map
/// entry names a slot (otherwise no version of it exists to keep).
#[derive(Clone, Copy, Debug)]
pub struct Overwrite {
    pub page: u64,
    pub slot: u8,
    pub has_current: bool,
}

impl PinTable {
    /// A writer starts tracking versions in this table: the first one records the newest
    /// psync `newest`; a later one settles the page words a writer that died in a psync left.
    pub fn track(&self, newest: u64) {
        let _ = self.w(H_KNOWN_FROM).compare_exchange(
            NOT_TRACKED,
            newest,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        self.w(H_WRITER_PID)
            .store(u64::from(std::process::id()), Ordering::Relaxed);
        self.settle_inflight(newest);
    }

    /// A psync marked in flight did not reach [`PinTable::committed`] (its writer died, or it
    /// failed): settle its pages against `newest`, the newest committed psync.
    fn settle_inflight(&self, newest: u64) {
        let inflight = self.w(H_INFLIGHT).load(Ordering::Acquire);
        if inflight != 0 {
            let committed = newest >= inflight;
            for p in 0..self.layout.npages {
                let b = self.layout.page(p);
                let prev = self.w(b + P_PREV).load(Ordering::Acquire);
                if prev & PENDING != 0 {
                    self.settle(p, inflight, committed);
                }
            }
            self.w(H_INFLIGHT).store(0, Ordering::Release);
        }
    }

    fn settle(&self, p: u64, seq: u64, committed: bool) {
        let b = self.layout.page(p);
        let cur = self.w(b + P_CUR).load(Ordering::Acquire);
        let prev = self.w(b + P_PREV).load(Ordering::Acquire) & !PENDING;
        if committed {
            self.w(b + P_PREV).store(cur, Ordering::Release);
            self.w(b + P_CUR).store(seq, Ordering::Release);
        } else {
            self.w(b + P_PREV).store(prev, Ordering::Release);
        }
    }

    /// Before psync `new_seq` (the newest committed being `newest`) writes `pages`' slots: keep each slot's version that a live pin
    /// needs (`copy` reads the slot's bytes, page then metadata, into a frame's buffer). Fails,
    /// before any slot is written, with `NoSpace` when the frames are all serving pins.
    pub fn before_overwrite(
        &self,
        newest: u64,
        new_seq: u64,
        pages: &[Overwrite],
        copy: &mut CopySlot<'_>,
    ) -> Result<()> {
        let mut st = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        self.settle_inflight(newest);
        // The full fence of Dekker's pattern (readers.rs): the previous commit record before
        // these loads of the pins.
        fence(Ordering::SeqCst);
        let due = st.checked.is_none_or(|t| t.elapsed() >= LIVENESS_EVERY);
        let mut dead = std::mem::take(&mut st.dead);
        let mut pins = self.live_pins(&mut dead, false);
        if !pins.is_empty() && due {
            pins = self.live_pins(&mut dead, true);
            st.checked = Some(Instant::now());
        }
        st.dead = dead;
        let known_from = self.w(H_KNOWN_FROM).load(Ordering::Acquire);
        self.w(H_INFLIGHT).store(new_seq, Ordering::Release);
        // A buffer kept between psyncs (no allocation per psync that keeps versions).
        let mut buf = st.buf.take();
        for o in pages {
            let b = self.layout.page(o.page);
            let cur = self.w(b + P_CUR).load(Ordering::Acquire);
            let prev = self.w(b + P_PREV).load(Ordering::Acquire);
            let (lo, hi) = if cur == 0 {
                (0, known_from)
            } else {
                (prev & !PENDING, cur)
            };
            if o.has_current
                && pins.iter().any(|&r| lo <= r && r < hi)
                && !self.has_frame(o.page, o.slot, lo, hi)
            {
                let f = self.alloc(&mut st, &mut pins)?;
                let data = buf.get_or_insert_with(|| Box::new([0u8; FRAME_BYTES]));
                // The copy fills the page and the metadata it has; the rest stays zero.
                data[pmo_format::PAGE_SIZE as usize..].fill(0);
                if let Err(e) = copy(o.page, o.slot, data) {
                    st.free.push(f);
                    return Err(e);
                }
                self.publish(f, o.page, o.slot, lo, hi, data);
                st.used.push(f);
            }
            self.w(b + P_PREV).store(prev | PENDING, Ordering::Release);
        }
        st.buf = buf;
        // The pages this psync changes, for readers' refreshes (changes.rs).
        self.record_changes(new_seq, pages.iter().map(|o| o.page));
        // Frames and changes published before any slot is written (the writes are
        // non-temporal stores), so before the commit record.
        fence(Ordering::SeqCst);
        Ok(())
    }

    /// Psync `seq` of `pages` has committed: their current versions are now `seq`'s.
    pub fn committed(&self, seq: u64, pages: &[u64]) {
        for &p in pages {
            self.settle(p, seq, true);
        }
        self.w(H_INFLIGHT).store(0, Ordering::Release);
    }

    fn has_frame(&self, page: u64, slot: u8, lo: u64, hi: u64) -> bool {
        let mut f1 = self
            .w(self.layout.page(page) + P_HEAD)
            .load(Ordering::Acquire);
        while f1 != 0 {
            let i = self.layout.index(f1 - 1);
            let get = |k: usize| self.w(i + k).load(Ordering::Acquire);
            if get(F_SLOT) == u64::from(slot) && get(F_LO) == lo && get(F_HI) == hi {
                return true;
            }
            f1 = get(F_NEXT);
        }
        false
    }

    /// A free frame: from the free list, else after freeing frames no live pin needs (with a
    /// look for dead readers if that frees none).
    fn alloc(&self, st: &mut WriterState, pins: &mut Vec<u64>) -> Result<u64> {
        let gen = self.w(H_PINS_GEN).load(Ordering::Acquire);
        if st.free.is_empty() || gen != st.reclaimed_gen || !st.scanned {
            self.reclaim(st, pins);
        }
        if st.free.is_empty() {
            let mut dead = std::mem::take(&mut st.dead);
            *pins = self.live_pins(&mut dead, true);
            st.dead = dead;
            st.checked = Some(Instant::now());
            self.reclaim(st, pins);
        }
        st.free.pop().ok_or_else(|| StoreError::PinLimit {
            name: String::new(),
            kept: self.layout.nframes,
            oldest: pins.first().copied().unwrap_or(0),
        })
    }

    /// Free every frame no pin in `pins` needs. The first time this writer looks, every frame
    /// is scanned (a table may hold frames of an earlier writer); later, only those in use.
    fn reclaim(&self, st: &mut WriterState, pins: &[u64]) {
        st.reclaimed_gen = self.w(H_PINS_GEN).load(Ordering::Acquire);
        let candidates: Vec<u64> = if st.scanned {
            std::mem::take(&mut st.used)
        } else {
            st.free.clear();
            (0..self.layout.nframes).rev().collect()
        };
        for f in candidates {
            let i = self.layout.index(f);
            let page1 = self.w(i + F_PAGE).load(Ordering::Acquire);
            if page1 == 0 {
                st.free.push(f);
                continue;
            }
            let (lo, hi) = (
                self.w(i + F_LO).load(Ordering::Acquire),
                self.w(i + F_HI).load(Ordering::Acquire),
            );
            if pins.iter().any(|&r| lo <= r && r < hi) {
                st.used.push(f);
            } else {
                self.unlink(f, page1 - 1);
                st.free.push(f);
            }
        }
        st.scanned = true;
        self.w(H_FRAMES_USED)
            .store(st.used.len() as u64, Ordering::Relaxed);
    }

    /// Take frame `f` out of `page`'s list and mark it free (its generation odd meanwhile, so a
    /// reader walking through it starts again).
    fn unlink(&self, f: u64, page: u64) {
        let i = self.layout.index(f);
        let gen = self.w(i + F_GEN);
        gen.fetch_add(1, Ordering::AcqRel);
        let next = self.w(i + F_NEXT).load(Ordering::Acquire);
        let head = self.w(self.layout.page(page) + P_HEAD);
        if head.load(Ordering::Acquire) == f + 1 {
            head.store(next, Ordering::Release);
        } else {
            let mut g1 = head.load(Ordering::Acquire);
            while g1 != 0 {
                let gi = self.layout.index(g1 - 1);
                let gnext = self.w(gi + F_NEXT);
                if gnext.load(Ordering::Acquire) == f + 1 {
                    let ggen = self.w(gi + F_GEN);
                    ggen.fetch_add(1, Ordering::AcqRel);
                    gnext.store(next, Ordering::Release);
                    ggen.fetch_add(1, Ordering::AcqRel);
                    break;
                }
                g1 = gnext.load(Ordering::Acquire);
            }
        }
        self.w(i + F_PAGE).store(0, Ordering::Release);
        gen.fetch_add(1, Ordering::AcqRel);
    }

    fn publish(&self, f: u64, page: u64, slot: u8, lo: u64, hi: u64, data: &[u8; FRAME_BYTES]) {
        let i = self.layout.index(f);
        let gen = self.w(i + F_GEN);
        gen.fetch_add(1, Ordering::AcqRel);
        let d = self.layout.frame(f);
        // One bounds check for the frame, not one per word.
        let words = &self.words()[d..d + FRAME_WORDS];
        for (w, c) in words.iter().zip(data.chunks_exact(8)) {
            w.store(
                u64::from_le_bytes(c.try_into().expect("8 bytes")),
                Ordering::Relaxed,
            );
        }
        let head = self.w(self.layout.page(page) + P_HEAD);
        self.w(i + F_SLOT).store(u64::from(slot), Ordering::Relaxed);
        self.w(i + F_LO).store(lo, Ordering::Relaxed);
        self.w(i + F_HI).store(hi, Ordering::Relaxed);
        self.w(i + F_NEXT)
            .store(head.load(Ordering::Acquire), Ordering::Relaxed);
        self.w(i + F_PAGE).store(page + 1, Ordering::Release);
        gen.fetch_add(1, Ordering::AcqRel);
        head.store(f + 1, Ordering::Release);
        self.w(H_FRAMES_USED).fetch_add(1, Ordering::Relaxed);
    }

    /// A reader pinning psync `pin` looks for the version of `page` in `slot` its snapshot
    /// shows; true (and the bytes in `out`) if the writer kept it.
    pub fn lookup(&self, page: u64, slot: u8, pin: u64, out: &mut [u8; FRAME_BYTES]) -> bool {
        if page >= self.layout.npages {
            return false;
        }
        let head = self.w(self.layout.page(page) + P_HEAD);
        'restart: loop {
            let mut f1 = head.load(Ordering::Acquire);
            while f1 != 0 {
                if f1 > self.layout.nframes {
                    return false;
                }
                let i = self.layout.index(f1 - 1);
                let gen = self.w(i + F_GEN);
                let g = gen.load(Ordering::Acquire);
                if g & 1 == 1 {
                    std::hint::spin_loop();
                    continue 'restart;
                }
                let get = |k: usize| self.w(i + k).load(Ordering::Acquire);
                let (p1, s, lo, hi, next) =
                    (get(F_PAGE), get(F_SLOT), get(F_LO), get(F_HI), get(F_NEXT));
                if gen.load(Ordering::Acquire) != g {
                    continue 'restart;
                }
                if p1 == page + 1 && s == u64::from(slot) && lo <= pin && pin < hi {
                    // Serves our pin: the writer never changes it while we hold the pin.
                    let d = self.layout.frame(f1 - 1);
                    let words = &self.words()[d..d + FRAME_WORDS];
                    for (w, c) in words.iter().zip(out.chunks_exact_mut(8)) {
                        c.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
                    }
                    return true;
                }
                f1 = next;
            }
            return false;
        }
    }
}
