//! The layout of one PMO's extent (`docs/format.md` §4) and its page-map entries.
//!
//! ```text
//! +0              header page: commit records [2] at +0 and +64; the rest reserved (protection state)
//! +4096           page map: npages x 8 bytes                 (rounded up to 4096)
//! map_end         journal 0: npages x 16 bytes               (rounded up to 4096)
//! journal0_end    journal 1: npages x 16 bytes               (rounded up to 4096)
//! journal1_end    tags: 2 slots x npages x tag_bytes         (rounded up to 4096; absent if 0)
//!                 (with tag_bytes > 0 each journal has room for npages x 16 + a 64-byte trailer)
//! data            slot 0: npages x 4096, then slot 1: npages x 4096
//! plain           plaintext copy: npages x 4096                (only with the shadow on the medium)
//! ```

use crate::{align_up, PAGE_SIZE};

/// Where a page's current contents are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageLoc {
    /// Never written: reads as zeros.
    Zero,
    /// In data slot 0 or 1.
    Slot(u8),
}

/// One page-map entry: bits 0-1 location (0 zero, 1 slot 0, 2 slot 1), bit 2 the plaintext flag
/// (the slot holds the page's plaintext: BP with the plaintext copy on the medium, between a
/// psync and the detach that encrypts it), bits 3-6 the check, bit 7 set when the check is
/// present (format version 3; entries written before it have bits 3-7 zero and no check), bits
/// 8-63 the page version. The check is bit `j` = XOR of every bit `i` outside 3-7 with
/// `i % 4 == j`: any single flipped bit, and any run of up to 4, fails it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PageMapEntry(pub u64);

impl PageMapEntry {
    /// The entry of a page that was never written (checked).
    pub const ZERO: PageMapEntry = PageMapEntry(Self::CHECKED);
    /// Bit 7: the check (bits 3-6) is present.
    pub const CHECKED: u64 = 1 << 7;
    const CHECK_BITS: u64 = 0xF << 3;

    /// The check of `raw` (bits 3-7 ignored), in place (bits 3-6).
    const fn check(raw: u64) -> u64 {
        let mut x = raw & !0xF8;
        x ^= x >> 32;
        x ^= x >> 16;
        x ^= x >> 8;
        x ^= x >> 4;
        (x & 0xF) << 3
    }
    /// `raw` with its check set.
    const fn sealed(raw: u64) -> PageMapEntry {
        let raw = raw & !0xF8;
        PageMapEntry(raw | Self::CHECKED | Self::check(raw))
    }
    /// Whether the check holds (or the entry predates checks: bits 3-7 all zero).
    pub fn check_ok(self) -> bool {
        if self.0 & Self::CHECKED != 0 {
            self.0 & Self::CHECK_BITS == Self::check(self.0)
        } else {
            self.0 & 0xF8 == 0
        }
    }
    /// Largest page version.
    pub const VERSION_MAX: u64 = (1 << 56) - 1;

    /// Build an entry.
    pub fn new(loc: PageLoc, version: u64) -> PageMapEntry {
        let l = match loc {
            PageLoc::Zero => 0,
            PageLoc::Slot(s) => 1 + (s as u64 & 1),
        };
        Self::sealed(l | (version & Self::VERSION_MAX) << 8)
    }
    /// Bit 2: the slot holds plaintext.
    pub const PLAIN: u64 = 1 << 2;

    /// Whether the slot holds the page's plaintext (bit 2).
    pub fn is_plain(self) -> bool {
        self.0 & Self::PLAIN != 0
    }
    /// This entry with the plaintext flag set or cleared.
    pub fn with_plain(self, plain: bool) -> PageMapEntry {
        Self::sealed(if plain {
            self.0 | Self::PLAIN
        } else {
            self.0 & !Self::PLAIN
        })
    }

    /// Decode the location; `None` for the invalid code 3, a failed check, or the plaintext
    /// flag on a page that is not in a slot.
    pub fn loc(self) -> Option<PageLoc> {
        if !self.check_ok() || (self.is_plain() && self.0 & 3 == 0) {
            return None;
        }
        match self.0 & 3 {
            0 => Some(PageLoc::Zero),
            1 => Some(PageLoc::Slot(0)),
            2 => Some(PageLoc::Slot(1)),
            _ => None,
        }
    }
    /// The page version.
    pub fn version(self) -> u64 {
        self.0 >> 8
    }
    /// The entry a psync of this page writes: the other slot, version + 1.
    pub fn next(self) -> Option<PageMapEntry> {
        let slot = match self.loc()? {
            PageLoc::Zero | PageLoc::Slot(1) => 0,
            PageLoc::Slot(_) => 1,
        };
        let version = self
            .version()
            .checked_add(1)
            .filter(|&v| v <= Self::VERSION_MAX)?;
        Some(PageMapEntry::new(PageLoc::Slot(slot), version))
    }
}

/// Offsets (relative to the extent) of every area of a PMO with `npages` pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PmoLayout {
    pub npages: u64,
    pub tag_bytes: u64,
    pub map_off: u64,
    pub journal_off: [u64; 2],
    pub tags_off: u64,
    pub data_off: u64,
    /// Offset of the plaintext copy of a PMO whose shadow lives on the medium (`None`: the
    /// plaintext copy lives in DRAM, or the PMO is unprotected and has none).
    pub plain_off: Option<u64>,
    /// Total bytes of the extent.
    pub extent_len: u64,
}

/// Bytes of one page-map entry.
pub const MAP_ENTRY_SIZE: u64 = 8;
/// Bytes of one journal entry.
pub const JOURNAL_ENTRY_SIZE: u64 = 16;

impl PmoLayout {
    /// Compute the layout without a plaintext area; `None` if it would overflow.
    pub fn new(npages: u64, tag_bytes: u64) -> Option<PmoLayout> {
        PmoLayout::with_plain(npages, tag_bytes, false)
    }

    /// Compute the layout, with a plaintext area after the data slots when `plain`.
    pub fn with_plain(npages: u64, tag_bytes: u64, plain: bool) -> Option<PmoLayout> {
        let map_off = PAGE_SIZE;
        let j0 = align_up(
            map_off.checked_add(npages.checked_mul(MAP_ENTRY_SIZE)?)?,
            PAGE_SIZE,
        )?;
        // Protected PMOs (tag_bytes > 0) end each journal with a trailer (format v2).
        let trailer = if tag_bytes > 0 {
            crate::record::TRAILER_SIZE as u64
        } else {
            0
        };
        let jlen = align_up(
            npages
                .checked_mul(JOURNAL_ENTRY_SIZE)?
                .checked_add(trailer)?,
            PAGE_SIZE,
        )?;
        let j1 = j0.checked_add(jlen)?;
        let tags_off = j1.checked_add(jlen)?;
        let data_off = align_up(
            tags_off.checked_add(npages.checked_mul(2)?.checked_mul(tag_bytes)?)?,
            PAGE_SIZE,
        )?;
        let data_end = data_off.checked_add(npages.checked_mul(2 * PAGE_SIZE)?)?;
        let (plain_off, extent_len) = if plain {
            let end = data_end.checked_add(npages.checked_mul(PAGE_SIZE)?)?;
            (Some(data_end), end)
        } else {
            (None, data_end)
        };
        Some(PmoLayout {
            npages,
            tag_bytes,
            map_off,
            journal_off: [j0, j1],
            tags_off,
            data_off,
            plain_off,
            extent_len,
        })
    }
    /// Offset of page `page`'s entry in the page map.
    pub fn map_entry(&self, page: u64) -> u64 {
        debug_assert!(page < self.npages);
        self.map_off + page * MAP_ENTRY_SIZE
    }
    /// Offset of page `page` in data slot `slot`.
    pub fn page(&self, slot: u8, page: u64) -> u64 {
        debug_assert!(page < self.npages && slot < 2);
        self.data_off + (slot as u64 * self.npages + page) * PAGE_SIZE
    }
    /// Offset of the protection metadata of page `page` in slot `slot`.
    pub fn tag(&self, slot: u8, page: u64) -> u64 {
        debug_assert!(page < self.npages && slot < 2);
        self.tags_off + (slot as u64 * self.npages + page) * self.tag_bytes
    }
    /// Offset of page `page` of the plaintext area (`None` without one).
    pub fn plain_page(&self, page: u64) -> Option<u64> {
        debug_assert!(page < self.npages);
        self.plain_off.map(|o| o + page * PAGE_SIZE)
    }
    /// Offset (in the header page) of the plaintext word of a PMO with a plaintext area (u64):
    /// non-zero from before the area is first written at attach until it has been zeroed and
    /// fenced at detach. Set at recovery: the area may hold plaintext and is zeroed first.
    pub const PLAIN_WORD_OFF: u64 = 136;
    /// Offset (in the header page) of the holder word: the pid of the process that has the PMO
    /// attached read-write (u32, 0 = none). Informational only: written at attach and detach
    /// without a fence; the attach lock, not this word, decides who may attach.
    pub const HOLDER_OFF: u64 = 2048;
    /// Offset (in the header page) of the copy of the PMO's namespace entry (format version 3):
    /// what `pmo check --repair` rebuilds a slot from when both namespace copies are damaged.
    pub const ENTRY_COPY_OFF: u64 = 1024;

    /// Offset of commit record slot `i` (0 or 1).
    pub fn record(&self, i: u64) -> u64 {
        debug_assert!(i < 2);
        i * crate::RECORD_SIZE as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_single_flip_of_a_checked_entry_is_caught_or_harmless() {
        for e in [
            PageMapEntry::ZERO,
            PageMapEntry::new(PageLoc::Slot(0), 1),
            PageMapEntry::new(PageLoc::Slot(1), 0x1234_5678),
            PageMapEntry::new(PageLoc::Slot(1), 7).with_plain(true),
        ] {
            for bit in 0..64 {
                let f = PageMapEntry(e.0 ^ (1 << bit));
                // Bit 7 cleared with a zero check reads as the same unchecked entry: harmless.
                let same = f.loc() == e.loc()
                    && f.version() == e.version()
                    && f.is_plain() == e.is_plain();
                assert!(f.loc().is_none() || same, "{e:?} bit {bit}: {f:?}");
            }
        }
    }

    #[test]
    fn entry_transitions() {
        let z = PageMapEntry::ZERO;
        assert_eq!(z.loc(), Some(PageLoc::Zero));
        let a = z.next().unwrap();
        assert_eq!((a.loc(), a.version()), (Some(PageLoc::Slot(0)), 1));
        let b = a.next().unwrap();
        assert_eq!((b.loc(), b.version()), (Some(PageLoc::Slot(1)), 2));
        assert_eq!(b.next().unwrap().loc(), Some(PageLoc::Slot(0)));
        assert_eq!(PageMapEntry(3).loc(), None);
        assert_eq!(PageMapEntry(4).loc(), None, "plaintext flag on a zero page");
        assert_eq!(PageMapEntry(8).loc(), None);
        // Entries from before the check still read.
        assert_eq!(PageMapEntry(0x101).loc(), Some(PageLoc::Slot(0)));
        assert_eq!(PageMapEntry(0).loc(), Some(PageLoc::Zero));
        let p = a.with_plain(true);
        assert!(p.is_plain() && p.loc() == a.loc() && p.version() == a.version());
        assert!(!p.with_plain(false).is_plain());
        assert!(
            !p.next().unwrap().is_plain(),
            "a psync's entry starts unflagged"
        );
        assert_eq!(
            PageMapEntry::new(PageLoc::Slot(1), PageMapEntry::VERSION_MAX).next(),
            None
        );
    }

    proptest! {
        #[test]
        fn areas_do_not_overlap(npages in 1u64..1_000_000, tag in prop::sample::select(vec![0u64, 16, 32, 48])) {
            let l = PmoLayout::new(npages, tag).unwrap();
            prop_assert!(l.map_off >= crate::RECORD_SIZE as u64 * 2);
            prop_assert!(l.map_entry(npages - 1) + MAP_ENTRY_SIZE <= l.journal_off[0]);
            prop_assert!(l.journal_off[0] + npages * JOURNAL_ENTRY_SIZE <= l.journal_off[1]);
            prop_assert!(l.journal_off[1] + npages * JOURNAL_ENTRY_SIZE <= l.tags_off);
            if tag > 0 { prop_assert!(l.tag(1, npages - 1) + tag <= l.data_off); }
            prop_assert!(l.page(0, npages - 1) + PAGE_SIZE == l.page(1, 0));
            prop_assert_eq!(l.page(1, npages - 1) + PAGE_SIZE, l.extent_len);
            prop_assert_eq!(l.data_off % PAGE_SIZE, 0);
            let p = PmoLayout::with_plain(npages, tag, true).unwrap();
            prop_assert_eq!(p.plain_page(0), Some(l.extent_len));
            prop_assert_eq!(p.plain_page(npages - 1).unwrap() + PAGE_SIZE, p.extent_len);
            prop_assert_eq!(l.plain_off, None);
        }
    }
}
