//! Where each word of a pin table lives. The table is an array of 64-bit words shared by every
//! process using the PMO (a file in `/dev/shm`, or process memory for a medium without a
//! file); every access is atomic. Nothing here is durable or needs to be: after a crash no
//! reader exists, and the next user of the PMO starts a fresh table (`docs/readers.md`).
//!
//! | words | content |
//! |---|---|
//! | 0..16 | header (`H_*`) |
//! | 16.. | [`SLOTS`] reader slots of [`SLOT_WORDS`] words: pid, pin (psync + 1, 0 = none), since, the pin a refresh is moving from |
//! | then | per page [`PAGE_WORDS`] words: the psync of its current version, the psync of the version before it (bit 63: a psync numbered `H_INFLIGHT` is writing the page), the first frame keeping an older version (frame + 1, 0 = none) |
//! | then | per frame [`INDEX_WORDS`] words: generation (odd while changed), page + 1 (0 = free), slot, first and last-plus-one psync it serves, next frame of the page (+ 1) |
//! | then | per frame [`FRAME_WORDS`] words: the slot's bytes as they were (the page, then its metadata) |
//! | then | the change ring: [`Layout::ring`] entries of [`RING_WORDS`] words, the psync and the page of each page a psync writes, in psync order (`changes.rs`) |

use pmo_format::PAGE_SIZE;

/// `"PMOPINS2"`: layout 2 (layout 1 had no change ring).
pub const MAGIC: u64 = u64::from_le_bytes(*b"PMOPINS2");
/// The magic of layout 1, which processes of older builds may still be using.
pub const MAGIC_V1: u64 = u64::from_le_bytes(*b"PMOPINS1");

pub const H_MAGIC: usize = 0;
pub const H_NPAGES: usize = 1;
pub const H_NFRAMES: usize = 2;
/// The newest psync when a writer first tracked page versions in this table ([`NOT_TRACKED`]
/// until then): a page whose psync words are 0 was last written at or before it.
pub const H_KNOWN_FROM: usize = 3;
/// The psync a writer is committing (0: none). Left set by a writer that died in a psync.
pub const H_INFLIGHT: usize = 4;
/// Bumped by every pin change (a reader's attach, refresh or detach).
pub const H_PINS_GEN: usize = 5;
/// Frames in use (informational: `pmo info`).
pub const H_FRAMES_USED: usize = 6;
pub const H_POOL_UUID: usize = 7;
pub const H_PMO_UUID: usize = 9;
/// The pid of the writer tracking versions (informational).
pub const H_WRITER_PID: usize = 11;
/// Change-ring entries a writer has begun to write (entry `i` is at `i % ring`): entries below
/// this minus the ring's length may have been overwritten.
pub const H_RING_RESERVED: usize = 12;
/// Change-ring entries written and complete.
pub const H_RING_HEAD: usize = 13;
/// Entries in the change ring.
pub const H_RING_LEN: usize = 14;
pub const HEADER_WORDS: usize = 16;

/// Value of `H_KNOWN_FROM` before any writer tracked.
pub const NOT_TRACKED: u64 = u64::MAX;

/// Reader slots per PMO: the most readers attached at once.
pub const SLOTS: usize = 64;
pub const SLOT_WORDS: usize = 4;
pub const S_PID: usize = 0;
pub const S_PIN: usize = 1;
pub const S_SINCE: usize = 2;
/// The pin a refresh moves away from, held until the view no longer reads through it.
pub const S_PIN_OLD: usize = 3;

pub const PAGE_WORDS: usize = 3;
pub const P_CUR: usize = 0;
pub const P_PREV: usize = 1;
pub const P_HEAD: usize = 2;
/// Bit of `P_PREV`: the psync in flight is writing the page.
pub const PENDING: u64 = 1 << 63;

pub const INDEX_WORDS: usize = 6;
pub const F_GEN: usize = 0;
pub const F_PAGE: usize = 1;
pub const F_SLOT: usize = 2;
pub const F_LO: usize = 3;
pub const F_HI: usize = 4;
pub const F_NEXT: usize = 5;

pub const RING_WORDS: usize = 2;
pub const R_SEQ: usize = 0;
pub const R_PAGE: usize = 1;

/// Entries of the change ring of a table of `npages` pages: one per page, at least 256 and at
/// most 65 536 (1 MiB). A reader further behind than the ring reaches diffs the whole map.
pub fn ring_len(npages: u64) -> u64 {
    npages.clamp(256, 1 << 16)
}

/// Bytes a frame keeps: a page and up to 32 bytes of its metadata slot.
pub const META_MAX: usize = 32;
pub const FRAME_BYTES: usize = PAGE_SIZE as usize + META_MAX;
pub const FRAME_WORDS: usize = FRAME_BYTES / 8;

/// Frames a table has unless `PMO_PIN_PAGES` says otherwise: the page versions readers may
/// keep from being overwritten, per PMO (16 MiB of slot copies).
pub const DEFAULT_FRAMES: u64 = 4096;

/// Byte of the table file whose lock serialises the table's initialisation.
pub const INIT_BYTE: u64 = 1 << 40;
/// Byte of the table file every process using the table holds shared, on the very file it
/// mapped (checked to still be the one the path names): a table whose byte is free has no
/// user, and [`crate::table::sweep_orphans`] removes it (users SIGKILLed with their pool).
pub const USE_BYTE: u64 = INIT_BYTE + 1;
/// Byte of the table file locked (exclusive) by the reader holding slot 0; slot `i` is at
/// `SLOT_BYTE + i`. The kernel drops the lock when the reader dies: a free lock with a
/// pin is a dead reader.
pub const SLOT_BYTE: u64 = 1 << 41;

/// Word offsets of a table of `npages` pages and `nframes` frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub npages: u64,
    pub nframes: u64,
    /// Change-ring entries.
    pub ring: u64,
}

impl Layout {
    /// The layout of a table of `npages` pages and `nframes` frames.
    pub fn new(npages: u64, nframes: u64) -> Layout {
        Layout {
            npages,
            nframes,
            ring: ring_len(npages),
        }
    }

    pub fn slot(&self, i: usize) -> usize {
        HEADER_WORDS + i * SLOT_WORDS
    }
    pub fn page(&self, p: u64) -> usize {
        HEADER_WORDS + SLOTS * SLOT_WORDS + p as usize * PAGE_WORDS
    }
    pub fn index(&self, f: u64) -> usize {
        self.page(self.npages) + f as usize * INDEX_WORDS
    }
    pub fn frame(&self, f: u64) -> usize {
        self.index(self.nframes) + f as usize * FRAME_WORDS
    }
    /// Change-ring entry `i` (counted from the table's start, wrapping).
    pub fn ring_entry(&self, i: u64) -> usize {
        self.frame(self.nframes) + (i % self.ring) as usize * RING_WORDS
    }
    /// Words in all.
    pub fn words(&self) -> usize {
        self.frame(self.nframes) + self.ring as usize * RING_WORDS
    }
    pub fn bytes(&self) -> u64 {
        self.words() as u64 * 8
    }
}

/// `PMO_PIN_PAGES`, else [`DEFAULT_FRAMES`]; an error for anything but a number from 1 to 2^24.
pub fn frames_from_env() -> Result<u64, String> {
    match std::env::var("PMO_PIN_PAGES") {
        Ok(v) if !v.trim().is_empty() => match v.trim().parse::<u64>() {
            Ok(n) if (1..=1 << 24).contains(&n) => Ok(n),
            _ => Err(format!(
                "PMO_PIN_PAGES={v:?} is not a number of pages from 1 to 16777216"
            )),
        },
        _ => Ok(DEFAULT_FRAMES),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_follow_each_other() {
        let l = Layout::new(3, 2);
        assert_eq!(l.slot(0), HEADER_WORDS);
        assert_eq!(l.page(0), HEADER_WORDS + SLOTS * SLOT_WORDS);
        assert_eq!(l.index(0), l.page(3));
        assert_eq!(l.frame(0), l.index(2));
        assert_eq!(l.ring, 256);
        assert_eq!(l.ring_entry(0), l.frame(2));
        assert_eq!(l.ring_entry(257), l.frame(2) + RING_WORDS);
        assert_eq!(l.words(), l.frame(0) + 2 * FRAME_WORDS + 256 * RING_WORDS);
        assert_eq!(FRAME_WORDS * 8, FRAME_BYTES);
    }
}
