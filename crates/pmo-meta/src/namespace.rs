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
    /// Decoded slots (for a pool with a mirror: the copy that survives, see [`Namespace::reload`]).
    pub slots: Vec<Option<Entry>>,
    /// Slots that are damaged beyond what the mirror repairs, with the reason: their extent is
    /// unknown, so nothing is allocated while one is listed.
    pub corrupt: Vec<(usize, String)>,
    /// Copies to rewrite from the surviving one (found by the last load; written by recovery).
    pub fixes: Vec<Fix>,
    /// Slots by name and by uuid, built at the first lookup after a load and kept up to date
    /// by [`Namespace::after_own_change`] (`slots` changes nowhere else): a lookup reads the
    /// few slots of one name instead of scanning all of them, which at Filebench's own sizes
    /// (tens of thousands of slots) was most of an open's or a create's time.
    index: std::sync::OnceLock<Index>,
}

/// See [`Namespace`]'s `index`. Each list holds slot numbers in ascending order.
#[derive(Default)]
struct Index {
    by_name: std::collections::HashMap<String, Vec<usize>>,
    by_uuid: std::collections::HashMap<[u8; 16], Vec<usize>>,
    /// Every occupied slot by its entry's extent `(extent_off, extent_len, slot)`, ascending:
    /// the free extents without sorting every entry per pcreate (issue 29).
    by_extent: std::collections::BTreeSet<(u64, u64, usize)>,
    /// Every occupied slot by its entry's stable address `(base_addr, slot)`, ascending: the
    /// taken address ranges without sorting (`crate::address`).
    by_base: std::collections::BTreeSet<(u64, usize)>,
}

impl Index {
    fn build(slots: &[Option<Entry>]) -> Index {
        let mut ix = Index::default();
        for (i, e) in slots.iter().enumerate() {
            if let Some(e) = e {
                ix.add(i, e);
            }
        }
        ix
    }

    fn add(&mut self, slot: usize, e: &Entry) {
        for v in [
            self.by_name.entry(e.name.clone()).or_default(),
            self.by_uuid.entry(e.uuid).or_default(),
        ] {
            if let Err(at) = v.binary_search(&slot) {
                v.insert(at, slot);
            }
        }
        self.by_extent.insert((e.extent_off, e.extent_len, slot));
        self.by_base.insert((e.base_addr, slot));
    }

    fn remove(&mut self, slot: usize, e: &Entry) {
        if let Some(v) = self.by_name.get_mut(&e.name) {
            v.retain(|&i| i != slot);
            if v.is_empty() {
                self.by_name.remove(&e.name);
            }
        }
        if let Some(v) = self.by_uuid.get_mut(&e.uuid) {
            v.retain(|&i| i != slot);
            if v.is_empty() {
                self.by_uuid.remove(&e.uuid);
            }
        }
        self.by_extent.remove(&(e.extent_off, e.extent_len, slot));
        self.by_base.remove(&(e.base_addr, slot));
    }
}

/// One namespace copy to rewrite from the other.
#[derive(Clone, Debug)]
pub struct Fix {
    pub slot: usize,
    /// The copy to rewrite: `false` copy A (the namespace), `true` copy B (the mirror).
    pub mirror: bool,
    /// What it must hold (`None`: free).
    pub entry: Option<Entry>,
    /// What to report (`None`: the leftover of an interrupted update, not damage).
    pub note: Option<String>,
}

/// Offset of namespace slot `i`.
pub fn slot_offset(sb: &Superblock, i: usize) -> u64 {
    sb.ns_offset + (i * ENTRY_SIZE) as u64
}

/// Offset of slot `i` in copy A (`mirror` false) or the mirror, copy B.
pub fn copy_offset(sb: &Superblock, i: usize, mirror: bool) -> u64 {
    if mirror {
        sb.ns_mirror + (i * ENTRY_SIZE) as u64
    } else {
        slot_offset(sb, i)
    }
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

    /// Read every slot (both copies when the pool has a mirror) and resolve each slot.
    /// Updates keep an order no crash can reverse: an entry is written to copy A, then B; it
    /// is cleared from B, then A. So A is the authority whenever it decodes, and B stands in
    /// when A is damaged. (A free, B live) never follows a crash: A lost its first word, and B
    /// restores it. Every disagreement becomes a [`Fix`].
    pub fn reload(&mut self, m: &dyn Medium, sb: &Superblock) -> Result<()> {
        let len = sb.ns_capacity as usize * ENTRY_SIZE;
        let mut raw = vec![0u8; len];
        m.read(sb.ns_offset, &mut raw)?;
        let mirror = if sb.ns_mirror != 0 {
            let mut b = vec![0u8; len];
            m.read(sb.ns_mirror, &mut b)?;
            Some(b)
        } else {
            None
        };
        self.slots.clear();
        self.corrupt.clear();
        self.fixes.clear();
        self.index = std::sync::OnceLock::new();
        for (i, a) in raw.chunks_exact(ENTRY_SIZE).enumerate() {
            let a = Entry::decode(a);
            let Some(mirror) = &mirror else {
                match a {
                    Ok(e) => self.slots.push(e),
                    Err(err) => {
                        self.slots.push(None);
                        self.corrupt.push((i, err.to_string()));
                    }
                }
                continue;
            };
            let b = Entry::decode(&mirror[i * ENTRY_SIZE..(i + 1) * ENTRY_SIZE]);
            let fix = |mirror: bool, entry: Option<Entry>, note: Option<String>| Fix {
                slot: i,
                mirror,
                entry,
                note,
            };
            let (slot, fix) = match (a, b) {
                (Ok(a), Ok(b)) if a == b => (a, None),
                (Ok(Some(a)), Ok(None)) => (Some(a.clone()), Some(fix(true, Some(a), None))),
                (Ok(None), Ok(Some(b))) => {
                    let note = format!(
                        "namespace slot {i}: copy A lost PMO '{}': restored from copy B",
                        b.name
                    );
                    (Some(b.clone()), Some(fix(false, Some(b), Some(note))))
                }
                (Ok(a), Ok(_)) => {
                    let note = format!(
                        "namespace slot {i}: copy B differs from copy A: rewritten from copy A"
                    );
                    (a.clone(), Some(fix(true, a, Some(note))))
                }
                (Ok(a), Err(why)) => {
                    let note = format!(
                        "namespace slot {i}: copy B damaged ({why}): rewritten from copy A"
                    );
                    (a.clone(), Some(fix(true, a, Some(note))))
                }
                (Err(why), Ok(b)) => {
                    let note = format!(
                        "namespace slot {i}: copy A damaged ({why}): rewritten from copy B"
                    );
                    (b.clone(), Some(fix(false, b, Some(note))))
                }
                (Err(wa), Err(wb)) => {
                    self.corrupt
                        .push((i, format!("both copies damaged (A: {wa}; B: {wb})")));
                    (None, None)
                }
            };
            self.slots.push(slot);
            self.fixes.extend(fix);
        }
        self.gen = None;
        Ok(())
    }

    /// The damaged slots as one line (`None`: none), for errors met while looking up a name.
    pub fn damage(&self) -> Option<String> {
        if self.corrupt.is_empty() {
            return None;
        }
        let list: Vec<String> = self
            .corrupt
            .iter()
            .map(|(i, why)| format!("namespace slot {i} is damaged ({why})"))
            .collect();
        Some(list.join("; "))
    }

    /// Forget the cached copy so the next refresh reloads.
    pub fn invalidate(&mut self) {
        self.gen = None;
    }

    /// The live entry called `name` (highest generation if a crash left two). An entry whose
    /// PMO (uuid) has a newer generation under another name is not live: a rename the crash
    /// cut off before it cleared the old slot (`lifecycle`).
    pub fn find(&self, name: &str) -> Option<(usize, &Entry)> {
        let ix = self.index.get_or_init(|| Index::build(&self.slots));
        self.newest(ix, name, ix.by_name.get(name)?)
    }

    /// Among `slots` (ascending), the live entry called `name`: not superseded, highest
    /// generation, the last slot on a tie.
    fn newest(&self, ix: &Index, name: &str, slots: &[usize]) -> Option<(usize, &Entry)> {
        slots
            .iter()
            .filter_map(|&i| self.slots.get(i)?.as_ref().map(|e| (i, e)))
            .filter(|(i, e)| e.name == name && !self.superseded(ix, *i, e))
            .max_by_key(|(_, e)| e.generation)
    }

    /// Another slot holds the same PMO (uuid) with a higher generation.
    fn superseded(&self, ix: &Index, i: usize, e: &Entry) -> bool {
        ix.by_uuid.get(&e.uuid).is_some_and(|v| {
            v.iter().any(|&j| {
                j != i
                    && self
                        .slots
                        .get(j)
                        .and_then(|o| o.as_ref())
                        .is_some_and(|o| o.uuid == e.uuid && o.generation > e.generation)
            })
        })
    }

    /// Slot `slot` now holds `new` (the index follows).
    fn set_slot(&mut self, slot: usize, new: Option<Entry>) {
        if let Some(ix) = self.index.get_mut() {
            if let Some(old) = &self.slots[slot] {
                ix.remove(slot, old);
            }
            if let Some(e) = &new {
                ix.add(slot, e);
            }
        }
        self.slots[slot] = new;
    }

    /// Live entries, one per name (highest generation), in slot order: the slot [`find`]
    /// returns for each name.
    ///
    /// [`find`]: Namespace::find
    pub fn live(&self) -> Vec<(usize, &Entry)> {
        let winner = self.winners();
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (i, e)))
            .filter(|(i, _)| winner[*i])
            .collect()
    }

    /// Slots holding an older generation of a name that also has a newer entry.
    pub fn stale(&self) -> Vec<usize> {
        let winner = self.winners();
        (0..self.slots.len())
            .filter(|&i| self.slots[i].is_some() && !winner[i])
            .collect()
    }

    /// For each slot, whether [`Namespace::find`] of its entry's name returns it: one `find`
    /// per name of the index rather than one scanning `find` per slot (which was quadratic in
    /// the capacity: at 656 slots, most of a pcreate's time went here, through the address
    /// search's list of live ranges).
    fn winners(&self) -> Vec<bool> {
        let ix = self.index.get_or_init(|| Index::build(&self.slots));
        let mut winner = vec![false; self.slots.len()];
        for (name, slots) in &ix.by_name {
            if let Some((i, _)) = self.newest(ix, name, slots) {
                winner[i] = true;
            }
        }
        winner
    }

    /// Every entry (live or an older generation a crash left) in ascending order of its stable
    /// address: what `crate::address` must not overlap.
    pub fn by_base_addr(&self) -> impl Iterator<Item = &Entry> + '_ {
        let ix = self.index.get_or_init(|| Index::build(&self.slots));
        ix.by_base
            .iter()
            .filter_map(|&(_, slot)| self.slots.get(slot)?.as_ref())
    }

    /// A slot that holds nothing (not even a corrupt entry).
    pub fn free_slot(&self) -> Option<usize> {
        (0..self.slots.len())
            .find(|&i| self.slots[i].is_none() && !self.corrupt.iter().any(|(c, _)| *c == i))
    }

    /// Free extents of the heap, ascending: the gaps between live entries' extents (and the
    /// namespace mirror, when an upgrade placed it in the heap).
    pub fn free_extents(&self, sb: &Superblock) -> Vec<(u64, u64)> {
        let ix = self.index.get_or_init(|| Index::build(&self.slots));
        // Every entry's extent in ascending order (the index keeps them sorted), with the
        // namespace mirror merged in where it lies.
        let mirror = (sb.ns_mirror >= sb.heap_offset).then(|| (sb.ns_mirror, sb.ns_bytes()));
        let mut used: Vec<(u64, u64)> = ix.by_extent.iter().map(|&(o, l, _)| (o, l)).collect();
        if let Some(m) = mirror {
            let at = used.partition_point(|u| *u < m);
            used.insert(at, m);
        }
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

    /// The first free extent of at least `len` bytes (its offset), or the largest free extent's
    /// length when none is that long.
    pub fn first_fit(&self, sb: &Superblock, len: u64) -> std::result::Result<u64, u64> {
        let free = self.free_extents(sb);
        match free.iter().find(|f| f.1 >= len) {
            Some(f) => Ok(f.0),
            None => Err(free.iter().map(|f| f.1).max().unwrap_or(0)),
        }
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
        for e in &used {
            let (m0, m1) = (sb.ns_mirror, sb.ns_mirror + sb.ns_bytes());
            if sb.ns_mirror >= sb.heap_offset
                && e.extent_off < m1
                && m0 < e.extent_off + e.extent_len
            {
                problems.push(format!("PMO '{}' overlaps the namespace mirror", e.name));
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

impl Namespace {
    /// After this process changed `slot` under the metadata lock, with this copy current when
    /// the change began: `ok`, the slot now holds `new` on the medium (both copies), so record
    /// it and the generation word the change left instead of reloading every slot at the next
    /// refresh (which costs O(capacity) per pcreate or pdestroy). A failed change, or a
    /// generation word that cannot be read, leaves the copy to be reloaded.
    pub fn after_own_change(
        &mut self,
        m: &dyn Medium,
        sb: &Superblock,
        ok: bool,
        slot: usize,
        new: Option<Entry>,
    ) {
        let gen = match read_gen(m, sb) {
            Ok(g) if ok && self.gen.is_some() && slot < self.slots.len() => g,
            _ => return self.invalidate(),
        };
        self.set_slot(slot, new);
        self.fixes.retain(|f| f.slot != slot);
        self.gen = Some(gen);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn entry(name: &str, uuid: u8, generation: u64) -> Entry {
        Entry {
            generation,
            uuid: [uuid; 16],
            size: 4096,
            extent_off: 0,
            extent_len: 4096,
            base_addr: 0,
            scheme: 0,
            flags: 0,
            kdf: pmo_format::KdfParams::INSECURE_FAST,
            salt: [0; 32],
            verifier: [0; 32],
            name: name.into(),
            created_unix_s: 0,
            tag_bytes: 0,
            wrapped: [0; pmo_format::entry::WRAPPED_LEN],
            capacity: 0,
            family: [0; 32],
        }
    }

    /// `find` as it was: a scan of every slot.
    fn find_by_scan(ns: &Namespace, name: &str) -> Option<usize> {
        let superseded = |i: usize, e: &Entry| {
            ns.slots.iter().enumerate().any(|(j, o)| {
                j != i
                    && o.as_ref()
                        .is_some_and(|o| o.uuid == e.uuid && o.generation > e.generation)
            })
        };
        ns.slots
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|e| (i, e)))
            .filter(|(i, e)| e.name == name && !superseded(*i, e))
            .max_by_key(|(_, e)| e.generation)
            .map(|(i, _)| i)
    }

    /// `live` and `stale` as they were: one scanning `find` per slot.
    fn live_by_find(ns: &Namespace) -> Vec<usize> {
        (0..ns.slots.len())
            .filter(|&i| {
                ns.slots[i]
                    .as_ref()
                    .is_some_and(|e| find_by_scan(ns, &e.name) == Some(i))
            })
            .collect()
    }

    #[test]
    fn the_index_follows_changes_of_slots() {
        // Random changes through `set_slot` (what `after_own_change` records), each followed
        // by a lookup of every name, against a scan of the slots.
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for _ in 0..50 {
            let mut ns = Namespace {
                slots: vec![None; 16],
                ..Default::default()
            };
            for _ in 0..60 {
                let slot = rng.gen_range(0..16);
                let new = rng.gen_bool(0.6).then(|| {
                    let name = format!("p{}", rng.gen_range(0..5));
                    entry(&name, rng.gen_range(0..5), rng.gen_range(0..3))
                });
                let new = new.map(|mut e| {
                    e.extent_off = rng.gen_range(0..8) * 4096;
                    e.base_addr = rng.gen_range(0..8) << 30;
                    e
                });
                ns.set_slot(slot, new);
                for k in 0..6 {
                    let name = format!("p{k}");
                    assert_eq!(ns.find(&name).map(|(i, _)| i), find_by_scan(&ns, &name));
                }
                // The ordered sets follow too: every entry by base address and by extent.
                let mut bases: Vec<u64> = ns.slots.iter().flatten().map(|e| e.base_addr).collect();
                bases.sort_unstable();
                let got: Vec<u64> = ns.by_base_addr().map(|e| e.base_addr).collect();
                assert_eq!(got, bases);
                let ix = ns.index.get().expect("built by the lookups");
                let mut ext: Vec<(u64, u64)> = ns
                    .slots
                    .iter()
                    .flatten()
                    .map(|e| (e.extent_off, e.extent_len))
                    .collect();
                ext.sort_unstable();
                let got: Vec<(u64, u64)> = ix.by_extent.iter().map(|&(o, l, _)| (o, l)).collect();
                assert_eq!(got, ext);
            }
        }
    }

    #[test]
    fn live_and_stale_agree_with_find() {
        // Crash leftovers of every kind: a name twice (generations equal or not), a uuid
        // under two names (a cut-off rename), empty slots.
        let mut rng = rand::rngs::StdRng::seed_from_u64(10);
        for _ in 0..300 {
            let n = rng.gen_range(0..24);
            let slots = (0..n)
                .map(|_| {
                    rng.gen_bool(0.7).then(|| {
                        let name = format!("p{}", rng.gen_range(0..6));
                        entry(&name, rng.gen_range(0..6), rng.gen_range(0..4))
                    })
                })
                .collect();
            let ns = Namespace {
                slots,
                ..Default::default()
            };
            for k in 0..7 {
                let name = format!("p{k}");
                assert_eq!(ns.find(&name).map(|(i, _)| i), find_by_scan(&ns, &name));
            }
            let want = live_by_find(&ns);
            let got: Vec<usize> = ns.live().into_iter().map(|(i, _)| i).collect();
            assert_eq!(got, want);
            let stale: Vec<usize> = (0..ns.slots.len())
                .filter(|i| ns.slots[*i].is_some() && !want.contains(i))
                .collect();
            assert_eq!(ns.stale(), stale);
        }
    }
}
