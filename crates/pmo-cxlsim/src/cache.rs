//! Set-associative, LRU, write-back cache arrays holding line versions.
//!
//! Owns one cache array (tags, dirty bits, the version each line holds, LRU stamps). The
//! simulator builds the hierarchy from these (private L1 per core, shared inclusive L2) and
//! decides what goes to the fabric; this module only stores and replaces. Invariant: a line
//! appears at most once per array; `line == INVALID` marks an empty way.

/// Marker of an empty way.
const INVALID: u64 = u64::MAX;

/// A line pushed out of the array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evicted {
    /// Line number (address / 64).
    pub line: u64,
    /// Version it held.
    pub value: u64,
    /// Whether it was modified since it was filled.
    pub dirty: bool,
}

/// One cache array.
#[derive(Debug, Clone)]
pub struct CacheArray {
    set_mask: u64,
    ways: usize,
    lines: Vec<u64>,
    values: Vec<u64>,
    dirty: Vec<bool>,
    stamps: Vec<u64>,
    clock: u64,
}

impl CacheArray {
    /// `sets` must be a power of two (checked by `Params::validate`); `ways >= 1`.
    pub fn new(sets: usize, ways: usize) -> CacheArray {
        let sets = sets.max(1).next_power_of_two();
        let ways = ways.max(1);
        let slots = sets * ways;
        CacheArray {
            set_mask: sets as u64 - 1,
            ways,
            lines: vec![INVALID; slots],
            values: vec![0; slots],
            dirty: vec![false; slots],
            stamps: vec![0; slots],
            clock: 0,
        }
    }

    fn set_base(&self, line: u64) -> usize {
        ((line & self.set_mask) as usize) * self.ways
    }

    /// Slot holding `line`, if present (does not touch LRU).
    pub fn find(&self, line: u64) -> Option<usize> {
        let base = self.set_base(line);
        self.lines[base..base + self.ways]
            .iter()
            .position(|&l| l == line)
            .map(|w| base + w)
    }

    /// Mark a slot most recently used.
    pub fn touch(&mut self, slot: usize) {
        self.clock += 1;
        self.stamps[slot] = self.clock;
    }

    /// Version held by a slot.
    pub fn value(&self, slot: usize) -> u64 {
        self.values[slot]
    }

    /// Whether a slot is dirty.
    pub fn is_dirty(&self, slot: usize) -> bool {
        self.dirty[slot]
    }

    /// Overwrite a slot's version and mark it dirty.
    pub fn write(&mut self, slot: usize, value: u64) {
        self.values[slot] = value;
        self.dirty[slot] = true;
        self.touch(slot);
    }

    /// Insert a line not present; returns the valid line it replaced, if any.
    pub fn insert(&mut self, line: u64, value: u64, dirty: bool) -> (usize, Option<Evicted>) {
        debug_assert!(self.find(line).is_none(), "line inserted twice");
        let base = self.set_base(line);
        let mut victim = base;
        for slot in base..base + self.ways {
            if self.lines[slot] == INVALID {
                victim = slot;
                break;
            }
            if self.stamps[slot] < self.stamps[victim] {
                victim = slot;
            }
        }
        let evicted = (self.lines[victim] != INVALID).then(|| Evicted {
            line: self.lines[victim],
            value: self.values[victim],
            dirty: self.dirty[victim],
        });
        self.lines[victim] = line;
        self.values[victim] = value;
        self.dirty[victim] = dirty;
        self.touch(victim);
        (victim, evicted)
    }

    /// Drop a slot; returns what it held.
    pub fn invalidate(&mut self, slot: usize) -> Evicted {
        let out = Evicted {
            line: self.lines[slot],
            value: self.values[slot],
            dirty: self.dirty[slot],
        };
        self.lines[slot] = INVALID;
        self.dirty[slot] = false;
        self.stamps[slot] = 0;
        out
    }

    /// Drop everything (a crash).
    pub fn clear(&mut self) {
        self.lines.fill(INVALID);
        self.dirty.fill(false);
        self.stamps.fill(0);
    }

    /// Valid lines (for tests and whole-structure checks).
    pub fn valid_lines(&self) -> usize {
        self.lines.iter().filter(|&&l| l != INVALID).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_replaces_least_recent() {
        let mut c = CacheArray::new(1, 2);
        c.insert(1, 10, false);
        c.insert(2, 20, true);
        let s1 = c.find(1).unwrap();
        c.touch(s1);
        let (_, ev) = c.insert(3, 30, false);
        assert_eq!(
            ev,
            Some(Evicted {
                line: 2,
                value: 20,
                dirty: true
            })
        );
        assert!(c.find(2).is_none());
        assert_eq!(c.valid_lines(), 2);
    }

    #[test]
    fn sets_are_independent() {
        let mut c = CacheArray::new(4, 1);
        for line in 0..4 {
            assert_eq!(c.insert(line, line, false).1, None);
        }
        assert_eq!(c.insert(4, 4, false).1.map(|e| e.line), Some(0));
        let s = c.find(4).unwrap();
        c.write(s, 99);
        assert!(c.is_dirty(s));
        assert_eq!(c.invalidate(s).value, 99);
        assert!(c.find(4).is_none());
    }
}
