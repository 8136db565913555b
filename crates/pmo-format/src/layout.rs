//! The layout of one PMO's extent (`docs/format.md` §4), its page-map entries and the sizes of
//! the commit records and journal trailers it has room for (`record` encodes them).
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
//! log             sub-page commit log: LOG_AREA_BYTES          (only with entry flag FLAG_SUBLOG)
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

/// One page-map entry (`docs/format.md` §4): bits 0-1 location (0 zero, 1 slot 0, 2 slot 1),
/// bit 2 the plaintext flag (the slot holds the page's plaintext: BP with the plaintext copy on
/// the medium, between a psync and the detach that encrypts it), bits 3-6 the narrow check and
/// bit 7 set when it is present (format version 3), bits 8-47 the page version, bits 48-63 the
/// wide check (format version 4): CRC-16/IBM-SDLC (X.25) of bytes 0..6 of the entry (bits 0-47,
/// little-endian). The narrow check is bit `j` = XOR of every bit `i` of 0-2 and 8-47 with
/// `i % 4 == j`. The wide check catches every pattern of up to 3 flipped bits and every run of
/// up to 16 anywhere in the entry, and any other pattern but with probability 2^-16.
///
/// Entries written before version 4 have bits 48-63 zero (their versions are below 2^40), and
/// before version 3 bits 3-7 zero too: they still read (a version-4 upgrade gives each one its
/// wide check at open, and a journal replay writes entries with it), so a zero wide field
/// falls back to the narrow check alone. Damage zeroes the wide field only by flipping each of
/// its set bits; a run of up to 16 that does cannot reach bits 0-2, so the page's slot still
/// reads right (only the version's top bits can change, which the version-table MAC and the
/// AEAD nonce of a protected page catch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PageMapEntry(pub u64);

/// CRC-16/IBM-SDLC (reflected: bits in the entry's own little-endian order, so a run of
/// flipped bits in the entry is a burst for the CRC; initial value and final XOR all ones, so
/// an all-zero entry does not check as zero).
const WIDE_CRC: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_IBM_SDLC);

impl PageMapEntry {
    /// The entry of a page that was never written (checked).
    pub const ZERO: PageMapEntry = Self::sealed(0);
    /// Bit 7: the narrow check (bits 3-6) is present.
    pub const CHECKED: u64 = 1 << 7;
    const NARROW_BITS: u64 = 0xF << 3;
    /// Bits 48-63: the wide check.
    pub const WIDE_BITS: u64 = 0xFFFF << 48;
    /// Bits 0-47: everything the wide check covers.
    const COVERED: u64 = (1 << 48) - 1;

    /// The narrow check of `raw` (over bits 0-2 and 8-47), in place (bits 3-6).
    const fn narrow(raw: u64) -> u64 {
        let mut x = raw & Self::COVERED & !0xF8;
        x ^= x >> 32;
        x ^= x >> 16;
        x ^= x >> 8;
        x ^= x >> 4;
        (x & 0xF) << 3
    }
    /// The wide check of `raw` (over bits 0-47), in place (bits 48-63).
    const fn wide(raw: u64) -> u64 {
        let b = raw.to_le_bytes();
        let covered = [b[0], b[1], b[2], b[3], b[4], b[5]];
        (WIDE_CRC.checksum(&covered) as u64) << 48
    }
    /// `raw` (bits 0-2 and 8-47) with both checks set.
    const fn sealed(raw: u64) -> PageMapEntry {
        let raw = raw & Self::COVERED & !0xF8;
        let low = raw | Self::CHECKED | Self::narrow(raw);
        PageMapEntry(low | Self::wide(low))
    }
    /// Whether the narrow check holds (or the entry predates it: bits 3-7 all zero).
    fn narrow_ok(self) -> bool {
        if self.0 & Self::CHECKED != 0 {
            self.0 & Self::NARROW_BITS == Self::narrow(self.0)
        } else {
            self.0 & 0xF8 == 0
        }
    }
    /// Whether the checks hold: the narrow one, and the wide one unless the entry predates it
    /// (bits 48-63 zero).
    pub fn check_ok(self) -> bool {
        let wide = self.0 & Self::WIDE_BITS;
        self.narrow_ok() && (wide == 0 || wide == Self::wide(self.0))
    }
    /// Whether the entry carries the wide check (format version 4).
    pub fn has_wide_check(self) -> bool {
        self.narrow_ok() && self.0 & Self::WIDE_BITS == Self::wide(self.0) && self.0 != 0
    }
    /// An entry written before format version 4 (from the page map at the upgrade, or from a
    /// journal, which its own CRC vouches for) with its wide check added; its other bits are
    /// kept as they are. `None` if its narrow check fails or bits 48-63 hold neither zero nor
    /// the wide check (damage, or a version of 2^40 or more, which no build wrote).
    pub fn resealed(self) -> Option<PageMapEntry> {
        self.check_ok()
            .then(|| PageMapEntry((self.0 & Self::COVERED) | Self::wide(self.0)))
    }
    /// What the version-table MAC covers (`docs/security.md` §6): the entry without its wide
    /// check, so adding that check (the version-4 upgrade) leaves the table tag unchanged.
    pub fn mac_word(self) -> u64 {
        self.0 & Self::COVERED
    }
    /// Largest page version (40 bits).
    pub const VERSION_MAX: u64 = (1 << 40) - 1;

    /// Build an entry (`version` at most [`Self::VERSION_MAX`]; callers check).
    pub fn new(loc: PageLoc, version: u64) -> PageMapEntry {
        debug_assert!(version <= Self::VERSION_MAX);
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
        (self.0 >> 8) & Self::VERSION_MAX
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
    /// Offset of the sub-page commit log area ([`crate::sublog`]; `None`: the PMO has none,
    /// every psync is page-granular).
    pub log_off: Option<u64>,
    /// Total bytes of the extent.
    pub extent_len: u64,
}

/// Bytes of one page-map entry.
pub const MAP_ENTRY_SIZE: u64 = 8;
/// Bytes of one journal entry.
pub const JOURNAL_ENTRY_SIZE: u64 = 16;
/// Bytes of a commit record (encoded by `record`): one cache line. The header page holds two,
/// at `0` and `RECORD_SIZE`.
pub const RECORD_SIZE: usize = 64;
/// Bytes of the journal trailer of a protected PMO (format v2, encoded by `record`): each
/// journal of a PMO with `tag_bytes > 0` has room for one after its entries.
pub const TRAILER_SIZE: usize = 64;

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
            TRAILER_SIZE as u64
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
            log_off: None,
            extent_len,
        })
    }

    /// This layout with a sub-page commit log area of [`crate::sublog::LOG_AREA_BYTES`] at the
    /// end of the extent when `log` (format version 6, entry flag
    /// [`crate::entry::FLAG_SUBLOG`]); `None` if it would overflow.
    pub fn with_log(self, log: bool) -> Option<PmoLayout> {
        if !log {
            return Some(PmoLayout {
                log_off: None,
                extent_len: self.log_off.unwrap_or(self.extent_len),
                ..self
            });
        }
        let base = self.log_off.unwrap_or(self.extent_len);
        Some(PmoLayout {
            log_off: Some(base),
            extent_len: base.checked_add(crate::sublog::LOG_AREA_BYTES)?,
            ..self
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
    /// Offset in the header page of the readers word (u64, format version 8): non-zero while
    /// a pin table for readers beside a writer may exist (`pmo-pins`); every writer checks it
    /// before each psync. Coordination, written without a fence, meaningless after a crash.
    pub const READERS_OFF: u64 = 2256;
    /// Offset (in the header page) of the copy of the PMO's namespace entry (format version 3):
    /// what `pmo check --repair` rebuilds a slot from when both namespace copies are damaged.
    pub const ENTRY_COPY_OFF: u64 = 1024;

    /// Offset of commit record slot `i` (0 or 1).
    pub fn record(&self, i: u64) -> u64 {
        debug_assert!(i < 2);
        i * RECORD_SIZE as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn samples() -> [PageMapEntry; 5] {
        [
            PageMapEntry::ZERO,
            PageMapEntry::new(PageLoc::Slot(0), 1),
            PageMapEntry::new(PageLoc::Slot(1), 0x1234_5678),
            PageMapEntry::new(PageLoc::Slot(1), 7).with_plain(true),
            PageMapEntry::new(PageLoc::Slot(0), PageMapEntry::VERSION_MAX),
        ]
    }

    /// Every pattern of up to 3 flipped bits and every run of up to 16 (any bits flipped
    /// inside it, both ends flipped) is caught: the entry no longer decodes, or (a run that
    /// zeroes the wide field, read as an entry from before it) decodes to the same slot.
    #[test]
    fn every_small_pattern_and_every_burst_up_to_16_is_caught() {
        for e in samples() {
            assert!(e.has_wide_check());
            for a in 0..64 {
                for b in a..64 {
                    for c in b..64 {
                        let flips = (1u64 << a) | (1 << b) | (1 << c);
                        let f = PageMapEntry(e.0 ^ flips);
                        assert!(f.loc().is_none(), "{e:?} flips {flips:#x}: {f:?}");
                    }
                }
            }
            for len in 2..=16u32 {
                for start in 0..=64 - len {
                    // Runs with both ends flipped: every inner pattern.
                    for inner in 0..1u64 << (len - 2) {
                        let run = 1 | inner << 1 | 1 << (len - 1);
                        let f = PageMapEntry(e.0 ^ (run << start));
                        let same_slot = f.loc() == e.loc() && f.is_plain() == e.is_plain();
                        assert!(
                            f.loc().is_none() || same_slot && f.0 & PageMapEntry::WIDE_BITS == 0,
                            "{e:?} run {run:#x} at {start}: {f:?}"
                        );
                    }
                }
            }
        }
    }

    /// Random patterns anywhere in the entry: caught but with probability about 2^-16.
    #[test]
    fn random_patterns_are_caught_but_rarely() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut missed = 0;
        let n = 1 << 20;
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let e = samples()[i % 5];
            if x != 0 && PageMapEntry(e.0 ^ x).loc().is_some() {
                missed += 1;
            }
        }
        // Expected about n / 2^16 = 16 (the zero-wide-field fallback adds ~1).
        assert!(missed < 64, "{missed} of {n} random patterns passed");
    }

    #[test]
    fn entries_from_before_version_4_read_and_reseal() {
        // Version 3: narrow check, no wide one; before it: no check at all.
        let v3 = PageMapEntry(PageMapEntry::new(PageLoc::Slot(1), 99).0 & !PageMapEntry::WIDE_BITS);
        let v2 = PageMapEntry(2 | 99 << 8);
        for old in [v3, v2, PageMapEntry(0), PageMapEntry(0x80)] {
            assert!(old.loc().is_some() && !old.has_wide_check(), "{old:?}");
            let new = old.resealed().unwrap();
            assert!(new.has_wide_check(), "{old:?}");
            assert_eq!((new.loc(), new.version()), (old.loc(), old.version()));
            assert_eq!(new.mac_word(), old.mac_word(), "the table MAC is unchanged");
        }
        assert_eq!(PageMapEntry(2 | 0x10 << 8 | 1 << 50).resealed(), None);
        assert_eq!(PageMapEntry(0x88).resealed(), None);
    }

    #[test]
    fn every_single_flip_of_a_checked_entry_is_caught_or_harmless() {
        for e in samples() {
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
            prop_assert!(l.map_off >= RECORD_SIZE as u64 * 2);
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
