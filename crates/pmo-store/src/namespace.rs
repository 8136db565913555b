//! The in-memory copy of the namespace and the derived free-space map.
//!
//! The namespace on the medium is the only record of which extents are used: free space is
//! whatever no live entry covers, so a crash can never leak space. The copy here is reloaded
//! whenever the pool's namespace generation word changes (or is odd: a change in progress).

use pmo_format::superblock::NS_GEN_OFFSET;
use pmo_format::{Entry, Superblock, ENTRY_SIZE};
use pmo_medium::Medium;

use crate::error::Result;

/// The namespace as last read.
#[derive(Default)]
pub struct Namespace {
    /// Generation word at the last load (`None`: never loaded).
    gen: Option<u64>,
    /// Decoded slots.
    pub slots: Vec<Option<Entry>>,
    /// Slots that carry the entry magic but fail to decode, with the reason.
    pub corrupt: Vec<(usize, String)>,
}

/// Offset of namespace slot `i`.
pub fn slot_offset(sb: &Superblock, i: usize) -> u64 {
    sb.ns_offset + (i * ENTRY_SIZE) as u64
}

/// Read the generation word.
pub fn read_gen(m: &dyn Medium, sb: &Superblock) -> Result<u64> {
    let mut b = [0u8; 8];
    m.read(sb.config_offset + NS_GEN_OFFSET, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// Advance the generation word (a cache hint: flushed, not fenced).
pub fn bump_gen(m: &dyn Medium, sb: &Superblock) -> Result<()> {
    let g = read_gen(m, sb)?.wrapping_add(1);
    m.write(sb.config_offset + NS_GEN_OFFSET, &g.to_le_bytes())?;
    m.flush(sb.config_offset + NS_GEN_OFFSET, 8)?;
    Ok(())
}

impl Namespace {
    /// Reload from the medium unless the cached copy is current.
    pub fn refresh(&mut self, m: &dyn Medium, sb: &Superblock) -> Result<()> {
        let gen = read_gen(m, sb)?;
        if self.gen == Some(gen) && gen % 2 == 0 {
            return Ok(());
        }
        self.reload(m, sb)?;
        self.gen = Some(gen);
        Ok(())
    }

    /// Read every slot.
    pub fn reload(&mut self, m: &dyn Medium, sb: &Superblock) -> Result<()> {
        let mut raw = vec![0u8; sb.ns_capacity as usize * ENTRY_SIZE];
        m.read(sb.ns_offset, &mut raw)?;
        self.slots.clear();
        self.corrupt.clear();
        for (i, b) in raw.chunks_exact(ENTRY_SIZE).enumerate() {
            match Entry::decode(b) {
                Ok(e) => self.slots.push(e),
                Err(err) => {
                    self.slots.push(None);
                    self.corrupt.push((i, err.to_string()));
                }
            }
        }
        self.gen = None;
        Ok(())
    }

    /// Forget the cached copy so the next refresh reloads.
    pub fn invalidate(&mut self) {
        self.gen = None;
    }

    /// The live entry called `name` (highest generation if a crash left two).
    pub fn find(&self, name: &str) -> Option<(usize, &Entry)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (i, e)))
            .filter(|(_, e)| e.name == name)
            .max_by_key(|(_, e)| e.generation)
    }

    /// Live entries, one per name (highest generation), in slot order.
    pub fn live(&self) -> Vec<(usize, &Entry)> {
        let mut v: Vec<(usize, &Entry)> = Vec::new();
        for (i, e) in self.slots.iter().enumerate() {
            let Some(e) = e else { continue };
            if self.find(&e.name).map(|(j, _)| j) == Some(i) {
                v.push((i, e));
            }
        }
        v
    }

    /// Slots holding an older generation of a name that also has a newer entry.
    pub fn stale(&self) -> Vec<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (i, e)))
            .filter(|(i, e)| self.find(&e.name).map(|(j, _)| j) != Some(*i))
            .map(|(i, _)| i)
            .collect()
    }

    /// A slot that holds nothing (not even a corrupt entry).
    pub fn free_slot(&self) -> Option<usize> {
        (0..self.slots.len())
            .find(|&i| self.slots[i].is_none() && !self.corrupt.iter().any(|(c, _)| *c == i))
    }

    /// Free extents of the heap, ascending: the gaps between live entries' extents.
    pub fn free_extents(&self, sb: &Superblock) -> Vec<(u64, u64)> {
        let mut used: Vec<(u64, u64)> = self
            .slots
            .iter()
            .flatten()
            .map(|e| (e.extent_off, e.extent_len))
            .collect();
        used.sort_unstable();
        let mut free = Vec::new();
        let mut cursor = sb.heap_offset;
        let end = sb.heap_offset + sb.heap_len;
        for (off, len) in used {
            if off > cursor {
                free.push((cursor, off - cursor));
            }
            cursor = cursor.max(off.saturating_add(len));
        }
        if cursor < end {
            free.push((cursor, end - cursor));
        }
        free
    }

    /// Overlapping or out-of-heap extents among live entries (problems for `check`).
    pub fn extent_problems(&self, sb: &Superblock) -> Vec<String> {
        let mut used: Vec<&Entry> = self.slots.iter().flatten().collect();
        used.sort_unstable_by_key(|e| e.extent_off);
        let mut problems = Vec::new();
        let end = sb.heap_offset + sb.heap_len;
        for w in used.windows(2) {
            if w[0].extent_off + w[0].extent_len > w[1].extent_off {
                problems.push(format!("PMOs '{}' and '{}' overlap", w[0].name, w[1].name));
            }
        }
        for e in used {
            if e.extent_off < sb.heap_offset
                || e.extent_off
                    .checked_add(e.extent_len)
                    .is_none_or(|x| x > end)
            {
                problems.push(format!("PMO '{}' lies outside the heap", e.name));
            }
        }
        problems
    }
}
