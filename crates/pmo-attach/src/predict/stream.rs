//! One stream-table entry, packed into a `u64` so that it changes with one compare-exchange.

use super::config::MAX_TRACKED_PAGES;

/// One stream-table entry, packed into a `u64` so that it changes with one compare-exchange.
/// Bits 0..40: last fault page + 1 (0: empty); 40..52: stride (12-bit two's complement, 0:
/// unknown); 52..54: confidence (0..=3); 54..57: depth level (adaptive: depth = 2^level);
/// 57..64: window (pages requested ahead of the last fault, 0..=127).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) last: u64,
    pub(crate) stride: i64,
    pub(crate) confidence: u64,
    pub(crate) level: u32,
    pub(crate) window: u64,
}

pub(crate) const STRIDE_BITS: u32 = 12;
pub(crate) const WINDOW_MAX: u64 = 127;
pub(crate) const LEVEL_MAX: u32 = 6; // 2^6 = MAX_DEPTH

impl Entry {
    pub(crate) fn encode(&self) -> u64 {
        let stride = (self.stride as u64) & ((1 << STRIDE_BITS) - 1);
        ((self.last + 1) & MAX_TRACKED_PAGES)
            | stride << 40
            | (self.confidence & 3) << 52
            | u64::from(self.level & 7) << 54
            | (self.window & WINDOW_MAX) << 57
    }

    /// `None` for an empty slot.
    pub(crate) fn decode(word: u64) -> Option<Entry> {
        let last1 = word & MAX_TRACKED_PAGES;
        if last1 == 0 {
            return None;
        }
        let raw = (word >> 40) & ((1 << STRIDE_BITS) - 1);
        // Sign-extend the 12-bit stride.
        let stride = ((raw << (64 - STRIDE_BITS)) as i64) >> (64 - STRIDE_BITS);
        Some(Entry {
            last: last1 - 1,
            stride,
            confidence: (word >> 52) & 3,
            level: ((word >> 54) & 7) as u32,
            window: (word >> 57) & WINDOW_MAX,
        })
    }
}
