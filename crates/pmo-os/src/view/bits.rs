//! [`PageBits`]: an atomic bitmap with one bit per page (present, dirty and hot pages of the
//! mechanisms), safe to set from the fault path: no allocation, no lock.

use std::sync::atomic::{AtomicU64, Ordering};

/// Atomic bitmap with one bit per page.
pub(crate) struct PageBits {
    words: Box<[AtomicU64]>,
    /// Bit `w % 64` of word `w / 64` is set when word `w` may be non-zero, so that draining a
    /// large, mostly clean bitmap costs O(set words), not O(pages / 64). A setter sets the
    /// summary bit after the word bit (only when the word was zero before); a drainer swaps
    /// the summary word, then the words it flags: a bit set concurrently is either taken now
    /// or flagged for the next drain, never lost.
    summary: Box<[AtomicU64]>,
}

impl PageBits {
    pub(crate) fn new(pages: u64) -> PageBits {
        let words = pages.div_ceil(64) as usize;
        PageBits {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            summary: (0..words.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        }
    }
    pub(crate) fn set(&self, page: u64) -> bool {
        let bit = 1u64 << (page % 64);
        let w = (page / 64) as usize;
        let old = self.words[w].fetch_or(bit, Ordering::AcqRel);
        if old == 0 {
            self.summary[w / 64].fetch_or(1u64 << (w % 64), Ordering::AcqRel);
        }
        old & bit != 0
    }
    pub(crate) fn clear(&self, page: u64) {
        self.words[(page / 64) as usize].fetch_and(!(1u64 << (page % 64)), Ordering::AcqRel);
    }
    pub(crate) fn get(&self, page: u64) -> bool {
        self.words[(page / 64) as usize].load(Ordering::Acquire) & (1u64 << (page % 64)) != 0
    }
    /// Visit every set bit in ascending order without clearing (bits set or cleared meanwhile
    /// may or may not be seen).
    pub(crate) fn for_each_set(&self, mut visit: impl FnMut(u64)) {
        for (s, flags) in self.summary.iter().enumerate() {
            let mut groups = flags.load(Ordering::Acquire);
            while groups != 0 {
                let w = s * 64 + groups.trailing_zeros() as usize;
                groups &= groups - 1;
                let mut bits = self.words[w].load(Ordering::Acquire);
                while bits != 0 {
                    visit(w as u64 * 64 + bits.trailing_zeros() as u64);
                    bits &= bits - 1;
                }
            }
        }
    }
    /// Word `w` (pages `64 * w ..`): one bit per page.
    pub(crate) fn word(&self, w: usize) -> u64 {
        self.words[w].load(Ordering::Acquire)
    }
    #[cfg(test)]
    pub(crate) fn words(&self) -> &[AtomicU64] {
        &self.words
    }
    /// Take every set bit, word by word in ascending order: `visit(word_index, bits)` gets each
    /// non-zero word after it was swapped to zero. If `visit` fails, the drain stops there; the
    /// words not visited yet keep their bits (and their summary flags), and the caller owns the
    /// bits it was handed.
    pub(crate) fn drain<E>(
        &self,
        mut visit: impl FnMut(u64, u64) -> Result<(), E>,
    ) -> Result<(), E> {
        for (s, flags) in self.summary.iter().enumerate() {
            if flags.load(Ordering::Acquire) == 0 {
                continue;
            }
            let mut groups = flags.swap(0, Ordering::AcqRel);
            while groups != 0 {
                let w = s * 64 + groups.trailing_zeros() as usize;
                groups &= groups - 1;
                let bits = self.words[w].swap(0, Ordering::AcqRel);
                if bits == 0 {
                    continue;
                }
                if let Err(e) = visit(w as u64, bits) {
                    flags.fetch_or(groups, Ordering::AcqRel);
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_bits_set_get_clear() {
        let bits = PageBits::new(130);
        assert_eq!(bits.words().len(), 3);
        assert!(!bits.set(0));
        assert!(bits.set(0), "second set reports the bit was set");
        bits.set(64);
        bits.set(129);
        assert!(bits.get(0) && bits.get(64) && bits.get(129) && !bits.get(1));
        bits.clear(64);
        assert!(!bits.get(64));
        assert_eq!(bits.words()[2].load(Ordering::Relaxed), 1 << 1);
    }

    #[test]
    fn page_bits_drain_takes_every_set_bit_once() {
        let pages = 64 * 64 * 3 + 5;
        let bits = PageBits::new(pages);
        let set = [0u64, 63, 64, 4095, 4096, 8191, 9000, pages - 1];
        for &p in &set {
            bits.set(p);
        }
        bits.clear(9000);
        let mut seen = Vec::new();
        bits.drain(|w, mut b| -> Result<(), ()> {
            while b != 0 {
                seen.push(w * 64 + b.trailing_zeros() as u64);
                b &= b - 1;
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![0, 63, 64, 4095, 4096, 8191, pages - 1]);
        let mut again = 0;
        bits.drain(|_, _| -> Result<(), ()> {
            again += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(again, 0, "a drain leaves nothing behind");
        // A failing visit keeps the words it did not reach.
        for &p in &[1u64, 200, 300] {
            bits.set(p);
        }
        let mut first = Vec::new();
        assert!(bits
            .drain(|w, _| {
                first.push(w);
                Err(())
            })
            .is_err());
        assert_eq!(first, vec![0]);
        let mut rest = Vec::new();
        bits.drain(|w, _| -> Result<(), ()> {
            rest.push(w);
            Ok(())
        })
        .unwrap();
        assert_eq!(
            rest,
            vec![3, 4],
            "words 3 (page 200) and 4 (page 300) survive the failure"
        );
    }
}
