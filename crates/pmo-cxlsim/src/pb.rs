//! The persist buffer (PB) table of the first switch: entries, states and LRU counters.
//!
//! Owns the three tables of paper §V-A as one array of [`PbEntry`]: tag address (TAT), data
//! and header (DT), state and 4-bit LRU counter (ST). The controller logic that moves entries
//! between states lives in `sim` (it needs the event queue); this module is the storage with its
//! lookups and replacement. Invariants (checked by [`PersistBuffer::validate`]):
//! - at most one Dirty entry per tag, and it is the youngest entry of that tag;
//! - Empty entries hold no tag that lookups can see;
//! - with <= 16 entries the LRU counters are a permutation of ranks (exact LRU); with more they
//!   saturate at 15 (approximate LRU, as 4 bits allow).

use crate::config::PB_LRU_BITS;

/// Largest LRU counter value.
const LRU_MAX: u8 = (1 << PB_LRU_BITS) - 1;

/// State of an entry (2 bits in hardware).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PbState {
    /// Free; may be overwritten.
    Empty,
    /// Latest and only persistent copy; PM is stale.
    Dirty,
    /// A copy was sent to PM; the entry stays until PM acknowledges it.
    Drain,
}

/// The 16-byte header kept to rebuild the drain packet (here: who wrote it, for reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PbHeader {
    /// Core whose write filled the entry.
    pub src_core: u16,
    /// Opaque request id.
    pub request_id: u64,
}

/// One entry.
#[derive(Debug, Clone, Copy)]
pub struct PbEntry {
    /// Line number (address >> 6; the 58-bit tag of §V-A).
    pub tag: u64,
    /// Version of the line's 64 bytes.
    pub value: u64,
    /// Order in which this version entered the persistent domain.
    pub pd_seq: u64,
    /// State.
    pub state: PbState,
    /// LRU counter: 0 = most recent.
    pub lru: u8,
    /// Allocation order (youngest = largest), to order same-tag entries.
    pub age: u64,
    /// Header.
    pub header: PbHeader,
}

/// The table.
#[derive(Debug, Clone)]
pub struct PersistBuffer {
    entries: Vec<PbEntry>,
    next_age: u64,
    dirty_count: usize,
}

impl PersistBuffer {
    /// `entries` Empty entries.
    pub fn new(entries: usize) -> PersistBuffer {
        let n = entries.max(1);
        let entries = (0..n)
            .map(|i| PbEntry {
                tag: u64::MAX,
                value: 0,
                pd_seq: 0,
                state: PbState::Empty,
                lru: (n - 1 - i).min(LRU_MAX as usize) as u8,
                age: 0,
                header: PbHeader::default(),
            })
            .collect();
        PersistBuffer {
            entries,
            next_age: 1,
            dirty_count: 0,
        }
    }

    /// Number of entries.
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// Entries currently Dirty.
    pub fn dirty_count(&self) -> usize {
        self.dirty_count
    }

    /// Read an entry.
    pub fn entry(&self, index: usize) -> &PbEntry {
        &self.entries[index]
    }

    /// All entries.
    pub fn entries(&self) -> &[PbEntry] {
        &self.entries
    }

    /// Youngest non-Empty entry with `tag`.
    pub fn youngest(&self, tag: u64) -> Option<usize> {
        let mut best: Option<usize> = None;
        for (i, e) in self.entries.iter().enumerate() {
            if e.state != PbState::Empty
                && e.tag == tag
                && best.is_none_or(|b| e.age > self.entries[b].age)
            {
                best = Some(i);
            }
        }
        best
    }

    /// The Drain entry of `tag` holding the version with `pd_seq`.
    pub fn draining(&self, tag: u64, pd_seq: u64) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| e.state == PbState::Drain && e.tag == tag && e.pd_seq == pd_seq)
    }

    /// Mark an entry most recently used (counter-based LRU, §V-A).
    pub fn touch(&mut self, index: usize) {
        let old = self.entries[index].lru;
        for (i, e) in self.entries.iter_mut().enumerate() {
            if i != index && e.lru <= old && e.lru < LRU_MAX {
                e.lru += 1;
            }
        }
        self.entries[index].lru = 0;
    }

    fn lru_of(&self, state: PbState) -> Option<usize> {
        let mut best: Option<usize> = None;
        for (i, e) in self.entries.iter().enumerate() {
            if e.state == state && best.is_none_or(|b| e.lru > self.entries[b].lru) {
                best = Some(i);
            }
        }
        best
    }

    /// Least recently used Empty entry.
    pub fn lru_empty(&self) -> Option<usize> {
        self.lru_of(PbState::Empty)
    }

    /// Least recently used Dirty entry (drain victim; Drain entries are never victims).
    pub fn lru_dirty(&self) -> Option<usize> {
        self.lru_of(PbState::Dirty)
    }

    /// Fill an Empty entry with a new version (state Dirty).
    pub fn fill(&mut self, index: usize, tag: u64, value: u64, pd_seq: u64, header: PbHeader) {
        debug_assert_eq!(self.entries[index].state, PbState::Empty);
        let age = self.next_age;
        self.next_age += 1;
        let e = &mut self.entries[index];
        *e = PbEntry {
            tag,
            value,
            pd_seq,
            state: PbState::Dirty,
            lru: e.lru,
            age,
            header,
        };
        self.dirty_count += 1;
        self.touch(index);
    }

    /// Overwrite a Dirty entry with a newer version of the same line (write coalescing).
    pub fn coalesce(&mut self, index: usize, value: u64, pd_seq: u64, header: PbHeader) {
        debug_assert_eq!(self.entries[index].state, PbState::Dirty);
        let e = &mut self.entries[index];
        e.value = value;
        e.pd_seq = pd_seq;
        e.header = header;
        self.touch(index);
    }

    /// Change an entry's state, keeping the Dirty count.
    pub fn set_state(&mut self, index: usize, state: PbState) {
        let e = &mut self.entries[index];
        if e.state == PbState::Dirty {
            self.dirty_count -= 1;
        }
        if state == PbState::Dirty {
            self.dirty_count += 1;
        }
        e.state = state;
        if state == PbState::Empty {
            e.tag = u64::MAX;
        }
    }

    /// Surviving entries (Dirty or Drain) in age order: what recovery drains, oldest first.
    pub fn survivors(&self) -> Vec<PbEntry> {
        let mut out: Vec<PbEntry> = self
            .entries
            .iter()
            .filter(|e| e.state != PbState::Empty)
            .copied()
            .collect();
        out.sort_by_key(|e| e.age);
        out
    }

    /// Mark every entry Empty (after recovery drained them).
    pub fn clear(&mut self) {
        for i in 0..self.entries.len() {
            self.set_state(i, PbState::Empty);
        }
    }

    /// Whole-structure check of the module invariants; returns a description of the first break.
    pub fn validate(&self) -> Result<(), String> {
        let dirty = self
            .entries
            .iter()
            .filter(|e| e.state == PbState::Dirty)
            .count();
        if dirty != self.dirty_count {
            return Err(format!(
                "dirty count {} != {} Dirty entries",
                self.dirty_count, dirty
            ));
        }
        for (i, e) in self.entries.iter().enumerate() {
            if e.state == PbState::Dirty && self.youngest(e.tag) != Some(i) {
                return Err(format!(
                    "Dirty entry {i} (tag {:#x}) is not the youngest of its tag",
                    e.tag
                ));
            }
            if e.state == PbState::Dirty
                && self
                    .entries
                    .iter()
                    .enumerate()
                    .any(|(j, o)| j != i && o.state == PbState::Dirty && o.tag == e.tag)
            {
                return Err(format!("two Dirty entries for tag {:#x}", e.tag));
            }
        }
        if self.entries.len() <= 1 << PB_LRU_BITS {
            let mut seen = vec![false; self.entries.len()];
            for e in &self.entries {
                let rank = e.lru as usize;
                if rank >= seen.len() || seen[rank] {
                    return Err("LRU counters are not a permutation of ranks".into());
                }
                seen[rank] = true;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_coalesce_drain_empty() {
        let mut pb = PersistBuffer::new(4);
        let e = pb.lru_empty().unwrap();
        pb.fill(e, 7, 1, 1, PbHeader::default());
        assert_eq!(pb.youngest(7), Some(e));
        pb.coalesce(e, 2, 2, PbHeader::default());
        assert_eq!(pb.entry(e).value, 2);
        pb.set_state(e, PbState::Drain);
        assert_eq!(pb.dirty_count(), 0);
        assert_eq!(pb.draining(7, 2), Some(e));
        let e2 = pb.lru_empty().unwrap();
        pb.fill(e2, 7, 3, 3, PbHeader::default());
        assert_eq!(pb.youngest(7), Some(e2), "the younger same-tag entry wins");
        assert_eq!(
            pb.survivors().iter().map(|s| s.value).collect::<Vec<_>>(),
            vec![2, 3]
        );
        pb.validate().unwrap();
        pb.set_state(e, PbState::Empty);
        assert_eq!(pb.youngest(7), Some(e2));
        pb.validate().unwrap();
    }

    #[test]
    fn lru_is_exact_up_to_16() {
        let mut pb = PersistBuffer::new(16);
        for i in 0..16 {
            let e = pb.lru_empty().unwrap();
            pb.fill(e, i, i, i, PbHeader::default());
        }
        pb.validate().unwrap();
        // Entry holding tag 0 is the least recently used Dirty one.
        let victim = pb.lru_dirty().unwrap();
        assert_eq!(pb.entry(victim).tag, 0);
        pb.touch(victim);
        assert_eq!(pb.entry(pb.lru_dirty().unwrap()).tag, 1);
        pb.validate().unwrap();
    }

    #[test]
    fn large_buffers_saturate() {
        let mut pb = PersistBuffer::new(64);
        for i in 0..64 {
            let e = pb.lru_empty().unwrap();
            pb.fill(e, i, i, i, PbHeader::default());
        }
        assert!(pb.entries().iter().all(|e| e.lru <= LRU_MAX));
        pb.validate().unwrap();
    }
}
