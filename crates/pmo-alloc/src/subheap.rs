//! The allocator of one sub-heap: size-class slabs over an extent allocator, both described
//! entirely by the sub-heap's metadata block (see `meta.rs` for the invariants).
//!
//! Owns: every change to a sub-heap's metadata. Callers (`heap.rs`) hold the sub-heap's lock
//! and have made its metadata writable; this module is safe code over slices.
//!
//! Every index read from metadata is bounds-checked before use; an inconsistency is reported as
//! [`HeapError::Corrupt`]. Free-time misuse is classified *before* any write, so a rejected free
//! changes nothing.

use crate::error::{HeapError, Result};
use crate::layout::{
    bin_of, slots_per_slab, BIN_COUNT, CLASS_BYTES, CLASS_COUNT, EXACT_BINS, NIL, SLAB_DESC_BYTES,
    SLAB_UNITS, SUBHEAP_HEADER_BYTES, UNIT_BYTES, UNIT_ENTRY_BYTES,
};
use crate::meta::{
    SlabDesc, SubHeapHeader, UnitEntry, FLAG_HEAD, FLAG_TAIL, STATE_FREE, STATE_LARGE, STATE_NONE,
    STATE_SLAB, SUBHEAP_MAGIC,
};
use crate::protect::PageGuard;

/// Longest walk along one bin list looking for a fit before moving to a larger bin.
const BIN_SEARCH_STEPS_MAX: u32 = 64;

/// A live block, as found from its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Block {
    /// Slot `slot` of the slab with descriptor `desc`.
    Small { desc: u32, slot: u32, class: u8 },
    /// A large block of `len_units` units starting at unit `head`.
    Large { head: u32, len_units: u32 },
}

impl Block {
    /// Usable bytes of the block.
    pub(crate) fn usable_bytes(&self) -> usize {
        match *self {
            Block::Small { class, .. } => CLASS_BYTES[class as usize] as usize,
            Block::Large { len_units, .. } => len_units as usize * UNIT_BYTES,
        }
    }
}

/// Mutable view of one sub-heap's metadata, valid while its lock is held.
pub(crate) struct SubMeta<'a> {
    /// Index of this sub-heap.
    pub index: u32,
    /// The header.
    pub hdr: &'a mut SubHeapHeader,
    /// One entry per unit.
    pub units: &'a mut [UnitEntry],
    /// Slab descriptors.
    pub descs: &'a mut [SlabDesc],
    /// Region offset of this sub-heap's unit 0.
    pub data_off: usize,
    /// Guard mode: opens each metadata OS page for writing before its first write.
    pub guard: Option<&'a mut PageGuard>,
}

impl<'a> SubMeta<'a> {
    /// Guard mode: make unit entries `[first, first + n)` writable (no-op otherwise).
    #[inline]
    fn touch_units(&mut self, first: u32, n: u32) {
        if let Some(g) = self.guard.as_deref_mut() {
            let units = self.units.len();
            if (first as usize) < units && n > 0 {
                let n = (n as usize).min(units - first as usize);
                g.open(
                    SUBHEAP_HEADER_BYTES + first as usize * UNIT_ENTRY_BYTES,
                    n * UNIT_ENTRY_BYTES,
                );
            }
        }
    }

    /// Guard mode: make descriptor `d` writable (no-op otherwise).
    #[inline]
    fn touch_desc(&mut self, d: u32) {
        if let Some(g) = self.guard.as_deref_mut() {
            if (d as usize) < self.descs.len() {
                let descs_off = SUBHEAP_HEADER_BYTES + self.units.len() * UNIT_ENTRY_BYTES;
                g.open(descs_off + d as usize * SLAB_DESC_BYTES, SLAB_DESC_BYTES);
            }
        }
    }

    fn corrupt(&self, reason: &'static str) -> HeapError {
        HeapError::Corrupt {
            subheap: self.index,
            reason,
        }
    }

    fn unit_count(&self) -> u32 {
        self.units.len() as u32
    }

    /// Write a fresh, empty sub-heap: one free extent over all units.
    pub(crate) fn format(&mut self, heap_id: u64) {
        let units = self.unit_count();
        self.units.fill(UnitEntry::default());
        *self.hdr = SubHeapHeader {
            magic: SUBHEAP_MAGIC,
            index: self.index,
            units,
            desc_count: self.descs.len() as u32,
            free_desc_head: NIL,
            desc_high_water: 0,
            slab_count: 0,
            live_count: 0,
            live_bytes: 0,
            free_units: units as u64,
            bin_bitmap: [0; 2],
            bin_heads: [NIL; BIN_COUNT],
            partial_heads: [NIL; CLASS_COUNT],
            heap_id,
        };
        self.set_extent(0, units, STATE_FREE);
        // A fresh sub-heap's only extent: the push cannot meet a bad link.
        let _ = self.bin_push(0, units);
    }

    /// Cheap validation at open: the header matches the geometry.
    pub(crate) fn validate_header(&self, heap_id: u64) -> Result<()> {
        let h = &*self.hdr;
        if h.magic != SUBHEAP_MAGIC {
            return Err(self.corrupt("bad sub-heap magic"));
        }
        if h.index != self.index || h.units != self.unit_count() || h.heap_id != heap_id {
            return Err(self.corrupt("sub-heap header does not match the heap geometry"));
        }
        if h.desc_count != self.descs.len() as u32 || h.desc_high_water > h.desc_count {
            return Err(self.corrupt("descriptor counts out of range"));
        }
        if h.free_units > self.unit_count() as u64 {
            return Err(self.corrupt("free unit count out of range"));
        }
        Ok(())
    }

    // ---- extents -------------------------------------------------------------------------

    /// Write head and tail entries of the extent `[head, head + len)`.
    fn set_extent(&mut self, head: u32, len: u32, state: u8) {
        let tail = head + len - 1;
        let flags = if len == 1 {
            FLAG_HEAD | FLAG_TAIL
        } else {
            FLAG_HEAD
        };
        self.touch_units(head, 1);
        self.touch_units(tail, 1);
        self.units[head as usize] = UnitEntry {
            state,
            flags,
            class: 0,
            reserved: 0,
            len_units: len,
            link_a: NIL,
            link_b: NIL,
        };
        if len > 1 {
            self.units[tail as usize] = UnitEntry {
                state,
                flags: FLAG_TAIL,
                class: 0,
                reserved: 0,
                len_units: len,
                link_a: NIL,
                link_b: NIL,
            };
        }
    }

    fn bin_push(&mut self, head: u32, len: u32) -> Result<()> {
        let b = bin_of(len);
        let old = self.hdr.bin_heads[b];
        self.touch_units(head, 1);
        self.touch_units(old, 1);
        {
            let e = &mut self.units[head as usize];
            e.link_a = old;
            e.link_b = NIL;
        }
        if let Some(o) = self.units.get_mut(old as usize) {
            o.link_b = head;
        }
        self.hdr.bin_heads[b] = head;
        self.hdr.bin_bitmap[b / 64] |= 1 << (b % 64);
        Ok(())
    }

    fn bin_remove(&mut self, head: u32) -> Result<()> {
        let e = *self.units.get(head as usize).ok_or(HeapError::Corrupt {
            subheap: self.index,
            reason: "free extent out of range",
        })?;
        if e.state != STATE_FREE || e.flags & FLAG_HEAD == 0 || e.len_units == 0 {
            return Err(self.corrupt("bin list holds a non-free extent"));
        }
        let b = bin_of(e.len_units);
        self.touch_units(e.link_a, 1);
        self.touch_units(e.link_b, 1);
        if e.link_b == NIL {
            if self.hdr.bin_heads[b] != head {
                return Err(self.corrupt("bin list head mismatch"));
            }
            self.hdr.bin_heads[b] = e.link_a;
            if e.link_a == NIL {
                self.hdr.bin_bitmap[b / 64] &= !(1 << (b % 64));
            }
        } else {
            let prev = self
                .units
                .get_mut(e.link_b as usize)
                .ok_or(HeapError::Corrupt {
                    subheap: self.index,
                    reason: "bin prev link",
                })?;
            prev.link_a = e.link_a;
        }
        if e.link_a != NIL {
            let next = self
                .units
                .get_mut(e.link_a as usize)
                .ok_or(HeapError::Corrupt {
                    subheap: self.index,
                    reason: "bin next link",
                })?;
            next.link_b = e.link_b;
        }
        Ok(())
    }

    /// First non-empty bin at or above `from`.
    fn next_bin(&self, from: usize) -> Option<usize> {
        let mut word = from / 64;
        if word >= self.hdr.bin_bitmap.len() {
            return None;
        }
        let mut bits = self.hdr.bin_bitmap[word] & (!0u64 << (from % 64));
        loop {
            if bits != 0 {
                let b = word * 64 + bits.trailing_zeros() as usize;
                return (b < BIN_COUNT).then_some(b);
            }
            word += 1;
            if word >= self.hdr.bin_bitmap.len() {
                return None;
            }
            bits = self.hdr.bin_bitmap[word];
        }
    }

    /// Take an extent of exactly `len` units from the free bins, marking it `state`.
    /// `Ok(None)` when no free extent is long enough.
    fn take_extent(&mut self, len: u32, state: u8) -> Result<Option<u32>> {
        let want_bin = bin_of(len);
        let mut bin = match self.next_bin(want_bin) {
            Some(b) => b,
            None => return Ok(None),
        };
        let head = loop {
            let first = self.hdr.bin_heads[bin];
            if bin >= EXACT_BINS as usize && bin == want_bin {
                // A shared bin may hold extents shorter than `len`: look for a fit.
                let mut cur = first;
                let mut steps = 0;
                let mut found = NIL;
                while cur != NIL && steps < BIN_SEARCH_STEPS_MAX {
                    let e = self.units.get(cur as usize).ok_or(HeapError::Corrupt {
                        subheap: self.index,
                        reason: "bin link out of range",
                    })?;
                    if e.len_units >= len {
                        found = cur;
                        break;
                    }
                    cur = e.link_a;
                    steps += 1;
                }
                if found != NIL {
                    break found;
                }
                bin = match self.next_bin(bin + 1) {
                    Some(b) => b,
                    None => return Ok(None),
                };
                continue;
            }
            break first;
        };
        let have = self
            .units
            .get(head as usize)
            .ok_or(HeapError::Corrupt {
                subheap: self.index,
                reason: "bin head out of range",
            })?
            .len_units;
        if have < len
            || head
                .checked_add(have)
                .is_none_or(|end| end > self.unit_count())
        {
            return Err(self.corrupt("free extent length inconsistent with its bin"));
        }
        if have > len && bin_of(have - len) == bin_of(have) {
            // Carve from the end: the free remainder keeps its head entry and its place in
            // the bin list, so no list operation is needed.
            let rest = have - len;
            self.touch_units(head, 1);
            let e = &mut self.units[head as usize];
            e.len_units = rest;
            e.flags = if rest == 1 {
                FLAG_HEAD | FLAG_TAIL
            } else {
                FLAG_HEAD
            };
            if rest > 1 {
                self.write_tail(head + rest - 1, rest, STATE_FREE);
            }
            let taken = head + rest;
            self.set_extent(taken, len, state);
            self.hdr.free_units = self.hdr.free_units.saturating_sub(len as u64);
            return Ok(Some(taken));
        }
        self.bin_remove(head)?;
        if have > len {
            let rest = head + len;
            self.set_extent(rest, have - len, STATE_FREE);
            self.bin_push(rest, have - len)?;
        }
        self.set_extent(head, len, state);
        self.hdr.free_units = self.hdr.free_units.saturating_sub(len as u64);
        Ok(Some(head))
    }

    /// Write a tail entry (extent length >= 2).
    fn write_tail(&mut self, tail: u32, len: u32, state: u8) {
        self.touch_units(tail, 1);
        self.units[tail as usize] = UnitEntry {
            state,
            flags: FLAG_TAIL,
            class: 0,
            reserved: 0,
            len_units: len,
            link_a: NIL,
            link_b: NIL,
        };
    }

    /// Return `[head, head + len)` (whose head/tail entries the caller has cleared and whose
    /// interior entries are NONE) to the free bins, coalescing with free neighbours.
    fn release_extent(&mut self, head: u32, len: u32) -> Result<()> {
        let units = self.unit_count();
        let mut left: Option<(u32, u32)> = None;
        if head > 0 {
            let left_tail = self.units[head as usize - 1];
            if left_tail.state == STATE_FREE && left_tail.flags & FLAG_TAIL != 0 {
                let left_len = left_tail.len_units;
                let left_head = head.checked_sub(left_len).filter(|_| left_len > 0).ok_or(
                    HeapError::Corrupt {
                        subheap: self.index,
                        reason: "left neighbour length",
                    },
                )?;
                let lh = self.units[left_head as usize];
                if lh.state != STATE_FREE || lh.flags & FLAG_HEAD == 0 || lh.len_units != left_len {
                    return Err(self.corrupt("left neighbour head and tail disagree"));
                }
                left = Some((left_head, left_len));
            }
        }
        let right = head + len;
        let mut right_len = 0;
        if right < units {
            let right_head = self.units[right as usize];
            if right_head.state == STATE_FREE && right_head.flags & FLAG_HEAD != 0 {
                right_len = right_head.len_units;
                if right_len == 0 || right.checked_add(right_len).is_none_or(|e| e > units) {
                    return Err(self.corrupt("right neighbour length"));
                }
                self.bin_remove(right)?;
            }
        }
        let start = left.map_or(head, |(lh, _)| lh);
        let total = len + left.map_or(0, |(_, ll)| ll) + right_len;
        // The left neighbour keeps its head entry and list place if its bin does not change.
        let keep_left = matches!(left, Some((_, ll)) if bin_of(total) == bin_of(ll));
        if let Some((lh, _)) = left {
            if !keep_left {
                self.bin_remove(lh)?;
            }
            if head - 1 != start {
                self.touch_units(head - 1, 1);
                self.units[head as usize - 1] = UnitEntry::default();
            }
        }
        if right_len > 0 {
            self.touch_units(right, 1);
            self.units[right as usize] = UnitEntry::default();
        }
        if keep_left {
            self.touch_units(start, 1);
            let e = &mut self.units[start as usize];
            e.len_units = total;
            e.flags = FLAG_HEAD;
            self.write_tail(start + total - 1, total, STATE_FREE);
        } else {
            self.set_extent(start, total, STATE_FREE);
            self.bin_push(start, total)?;
        }
        self.hdr.free_units += len as u64;
        Ok(())
    }

    // ---- slabs ---------------------------------------------------------------------------

    fn partial_push(&mut self, class: usize, d: u32) {
        let old = self.hdr.partial_heads[class];
        self.touch_desc(d);
        self.touch_desc(old);
        self.descs[d as usize].next = old;
        self.descs[d as usize].prev = NIL;
        if let Some(o) = self.descs.get_mut(old as usize) {
            o.prev = d;
        }
        self.hdr.partial_heads[class] = d;
    }

    fn partial_remove(&mut self, class: usize, d: u32) -> Result<()> {
        let (next, prev) = (self.descs[d as usize].next, self.descs[d as usize].prev);
        self.touch_desc(d);
        self.touch_desc(next);
        self.touch_desc(prev);
        if prev == NIL {
            if self.hdr.partial_heads[class] != d {
                return Err(self.corrupt("partial list head mismatch"));
            }
            self.hdr.partial_heads[class] = next;
        } else {
            self.descs
                .get_mut(prev as usize)
                .ok_or(HeapError::Corrupt {
                    subheap: self.index,
                    reason: "partial prev link",
                })?
                .next = next;
        }
        if next != NIL {
            self.descs
                .get_mut(next as usize)
                .ok_or(HeapError::Corrupt {
                    subheap: self.index,
                    reason: "partial next link",
                })?
                .prev = prev;
        }
        let desc = &mut self.descs[d as usize];
        desc.next = NIL;
        desc.prev = NIL;
        Ok(())
    }

    /// Make a new slab for `class` and put it on the partial list. `Ok(None)`: no room.
    fn new_slab(&mut self, class: usize) -> Result<Option<u32>> {
        let d = if self.hdr.free_desc_head != NIL {
            self.hdr.free_desc_head
        } else if self.hdr.desc_high_water < self.hdr.desc_count {
            self.hdr.desc_high_water
        } else {
            return Ok(None);
        };
        if d as usize >= self.descs.len() {
            return Err(self.corrupt("descriptor index out of range"));
        }
        let head = match self.take_extent(SLAB_UNITS, STATE_SLAB)? {
            Some(h) => h,
            None => return Ok(None),
        };
        if self.hdr.free_desc_head == d {
            self.hdr.free_desc_head = self.descs[d as usize].next;
        } else {
            self.hdr.desc_high_water += 1;
        }
        let slots = slots_per_slab(class) as usize;
        self.touch_desc(d);
        self.touch_units(head, SLAB_UNITS);
        let desc = &mut self.descs[d as usize];
        desc.head_unit = head;
        desc.class = class as u8;
        desc.in_use = 1;
        desc.reserved = 0;
        desc.used_slots = 0;
        desc.hint_word = 0;
        desc.reserved2 = 0;
        for (w, word) in desc.bitmap.iter_mut().enumerate() {
            let first = w * 64;
            *word = if first >= slots {
                !0
            } else if first + 64 <= slots {
                0
            } else {
                !0u64 << (slots - first)
            };
        }
        for i in 0..SLAB_UNITS {
            let mut flags = 0;
            if i == 0 {
                flags |= FLAG_HEAD;
            }
            if i == SLAB_UNITS - 1 {
                flags |= FLAG_TAIL;
            }
            self.units[(head + i) as usize] = UnitEntry {
                state: STATE_SLAB,
                flags,
                class: class as u8,
                reserved: 0,
                len_units: SLAB_UNITS,
                link_a: head,
                link_b: d,
            };
        }
        self.hdr.slab_count += 1;
        self.partial_push(class, d);
        Ok(Some(d))
    }

    /// Return an empty slab's units to the extent allocator.
    fn release_slab(&mut self, class: usize, d: u32) -> Result<()> {
        self.partial_remove(class, d)?;
        let head = self.descs[d as usize].head_unit;
        self.touch_desc(d);
        self.touch_units(head, SLAB_UNITS);
        for i in 0..SLAB_UNITS {
            self.units[(head + i) as usize] = UnitEntry::default();
        }
        let desc = &mut self.descs[d as usize];
        desc.in_use = 0;
        desc.next = self.hdr.free_desc_head;
        self.hdr.free_desc_head = d;
        self.hdr.slab_count = self.hdr.slab_count.saturating_sub(1);
        self.release_extent(head, SLAB_UNITS)
    }

    // ---- allocation ----------------------------------------------------------------------

    /// Allocate one slot of `class`. `Ok(None)`: this sub-heap is full.
    pub(crate) fn alloc_small(&mut self, class: usize) -> Result<Option<usize>> {
        let mut d = self.hdr.partial_heads[class];
        if d == NIL {
            d = match self.new_slab(class)? {
                Some(d) => d,
                None => return Ok(None),
            };
        }
        let slots = slots_per_slab(class);
        let words = slots.div_ceil(64) as usize;
        self.touch_desc(d);
        let desc = self.descs.get_mut(d as usize).ok_or(HeapError::Corrupt {
            subheap: self.index,
            reason: "partial list link out of range",
        })?;
        if desc.in_use != 1 || desc.class as usize != class || desc.used_slots >= slots {
            return Err(self.corrupt("partial list holds a bad slab"));
        }
        let mut w = desc.hint_word as usize;
        if w >= words {
            w = 0;
        }
        let mut found = None;
        for _ in 0..words {
            if desc.bitmap[w] != !0 {
                found = Some(w);
                break;
            }
            w += 1;
            if w == words {
                w = 0;
            }
        }
        let w = found.ok_or(HeapError::Corrupt {
            subheap: self.index,
            reason: "partial slab has no free slot",
        })?;
        let bit = (!desc.bitmap[w]).trailing_zeros();
        let slot = w as u32 * 64 + bit;
        if slot >= slots {
            return Err(self.corrupt("slab padding bit clear"));
        }
        desc.bitmap[w] |= 1 << bit;
        desc.used_slots += 1;
        desc.hint_word = w as u32;
        let full = desc.used_slots == slots;
        let head = desc.head_unit;
        if head
            .checked_add(SLAB_UNITS)
            .is_none_or(|e| e > self.unit_count())
        {
            return Err(self.corrupt("slab head out of range"));
        }
        if full {
            self.partial_remove(class, d)?;
        }
        let class_bytes = CLASS_BYTES[class] as usize;
        // Slab slots are counted by their descriptor (`used_slots`), not in the header, so the
        // common small alloc/free writes no header page (one page less per psync).
        Ok(Some(
            self.data_off + head as usize * UNIT_BYTES + slot as usize * class_bytes,
        ))
    }

    /// Allocate `len` whole units. `Ok(None)`: no free extent that long here.
    pub(crate) fn alloc_large(&mut self, len: u32) -> Result<Option<usize>> {
        Ok(self.take_extent(len, STATE_LARGE)?.map(|head| {
            self.hdr.live_count += 1;
            self.hdr.live_bytes += len as u64 * UNIT_BYTES as u64;
            self.data_off + head as usize * UNIT_BYTES
        }))
    }

    /// Find the live block starting at `addr` (which lies in this sub-heap's data), or say
    /// precisely why there is none. Reads only.
    pub(crate) fn classify(&self, addr: usize) -> Result<Block> {
        let off = addr - self.data_off;
        let u = off / UNIT_BYTES;
        let e = *self.units.get(u).ok_or(HeapError::NotInHeap)?;
        match e.state {
            STATE_SLAB => {
                let (head, d) = (e.link_a, e.link_b);
                let desc = self.descs.get(d as usize).ok_or(HeapError::Corrupt {
                    subheap: self.index,
                    reason: "slab descriptor index",
                })?;
                if desc.in_use != 1
                    || desc.head_unit != head
                    || (desc.class as usize) >= CLASS_COUNT
                    || (u as u32) < head
                    || u as u32 >= head.saturating_add(SLAB_UNITS)
                    || head
                        .checked_add(SLAB_UNITS)
                        .is_none_or(|e| e > self.unit_count())
                {
                    return Err(self.corrupt("slab unit and descriptor disagree"));
                }
                let class_bytes = CLASS_BYTES[desc.class as usize] as usize;
                let in_slab = off - head as usize * UNIT_BYTES;
                let slot = in_slab / class_bytes;
                if slot >= slots_per_slab(desc.class as usize) as usize {
                    return Err(HeapError::NotAllocated);
                }
                let live = desc.bitmap[slot / 64] & (1 << (slot % 64)) != 0;
                match (in_slab.is_multiple_of(class_bytes), live) {
                    (true, true) => Ok(Block::Small {
                        desc: d,
                        slot: slot as u32,
                        class: desc.class,
                    }),
                    (true, false) => Err(HeapError::DoubleFree),
                    (false, true) => Err(HeapError::InteriorPointer),
                    (false, false) => Err(HeapError::NotAllocated),
                }
            }
            STATE_LARGE if e.flags & FLAG_HEAD != 0 => {
                if !off.is_multiple_of(UNIT_BYTES) {
                    return Err(HeapError::InteriorPointer);
                }
                if e.len_units == 0
                    || (u as u32)
                        .checked_add(e.len_units)
                        .is_none_or(|x| x > self.unit_count())
                {
                    return Err(self.corrupt("large block length"));
                }
                Ok(Block::Large {
                    head: u as u32,
                    len_units: e.len_units,
                })
            }
            _ => Err(self.classify_inside_extent(u, off)),
        }
    }

    /// The error for an address inside a FREE or LARGE extent but not at a large block's head.
    fn classify_inside_extent(&self, u: usize, off: usize) -> HeapError {
        // Interior entries are NONE; walking back reaches the extent's head (or its tail, if
        // `u` is the tail). Error path only: bounded by the unit count.
        let mut i = u;
        loop {
            let e = self.units[i];
            if e.state != STATE_NONE {
                let head = if e.flags & FLAG_HEAD != 0 {
                    Some(i)
                } else if e.flags & FLAG_TAIL != 0 && i == u {
                    (i + 1).checked_sub(e.len_units as usize)
                } else {
                    None
                };
                let Some(head) = head else {
                    return self.corrupt("unit map: interior unit after a tail");
                };
                let head_state = self.units.get(head).map(|h| h.state);
                return match head_state {
                    Some(STATE_LARGE) => HeapError::InteriorPointer,
                    Some(STATE_FREE) if off.is_multiple_of(UNIT_BYTES) => HeapError::DoubleFree,
                    Some(STATE_FREE) => HeapError::NotAllocated,
                    _ => self.corrupt("unit map: extent head has a bad state"),
                };
            }
            if i == 0 {
                return self.corrupt("unit map: no extent head before unit");
            }
            i -= 1;
        }
    }

    /// Free the block at `addr`; on any error nothing has changed.
    pub(crate) fn free(&mut self, addr: usize) -> Result<usize> {
        let block = self.classify(addr)?;
        let usable = block.usable_bytes();
        match block {
            Block::Small {
                desc: d,
                slot,
                class,
            } => {
                let class = class as usize;
                let slots = slots_per_slab(class);
                self.touch_desc(d);
                let desc = &mut self.descs[d as usize];
                desc.bitmap[slot as usize / 64] &= !(1 << (slot % 64));
                let was_full = desc.used_slots == slots;
                desc.used_slots = desc.used_slots.saturating_sub(1);
                let empty = desc.used_slots == 0;
                if was_full {
                    self.partial_push(class, d);
                }
                // Keep one empty slab per class so alloc/free at a boundary does not thrash:
                // release an empty slab only when its class has another partial slab.
                if empty {
                    let alone =
                        self.hdr.partial_heads[class] == d && self.descs[d as usize].next == NIL;
                    if !alone {
                        self.release_slab(class, d)?;
                    }
                }
            }
            Block::Large { head, len_units } => {
                self.touch_units(head, 1);
                self.touch_units(head + len_units - 1, 1);
                self.units[head as usize] = UnitEntry::default();
                self.units[(head + len_units - 1) as usize] = UnitEntry::default();
                self.hdr.live_count = self.hdr.live_count.saturating_sub(1);
                self.hdr.live_bytes = self.hdr.live_bytes.saturating_sub(usable as u64);
                self.release_extent(head, len_units)?;
            }
        }
        Ok(usable)
    }
}
