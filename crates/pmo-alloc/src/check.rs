//! The heap checker and the walk over live blocks.
//!
//! Owns: the whole-structure validation of one sub-heap (`check_subheap`) and the enumeration
//! of its live blocks (`live_blocks`). Reads only; every loop is bounded by the unit or
//! descriptor count, so corrupt links cannot make it spin.
//!
//! What `check_subheap` proves, with `units` the sub-heap's unit count:
//! 1. extents tile `[0, units)`: each starts with a HEAD entry, ends with a TAIL entry of the
//!    same state and length, and (FREE/LARGE) has only NONE entries inside;
//! 2. every slab has 16 SLAB entries naming it, a live descriptor naming its head, a valid
//!    class, padding bits set and `used_slots == popcount`;
//! 3. no two FREE extents are adjacent;
//! 4. the bin lists hold exactly the FREE extents, each in `bin_of(len)`, with consistent
//!    back links, and the bin bitmap marks exactly the non-empty bins;
//! 5. the partial lists hold exactly the slabs with a free slot, of their class;
//! 6. live + free + released descriptors add up, and the counters (the header's for large
//!    blocks plus the descriptors' `used_slots` for slots) equal what the walk counted;
//! 7. `allocated + free + slab tail waste == capacity` (bytes), counted independently:
//!    blocks from the bitmaps and large extents, free from free extents and clear bits.

use crate::error::{HeapError, Result};
use crate::layout::{
    bin_of, slots_per_slab, BIN_COUNT, CLASS_BYTES, CLASS_COUNT, NIL, SLAB_UNITS, UNIT_BYTES,
};
use crate::meta::{FLAG_HEAD, FLAG_TAIL, STATE_FREE, STATE_LARGE, STATE_NONE, STATE_SLAB};
use crate::subheap::SubMeta;

/// What [`crate::Heap::check`] found (the whole heap, or one sub-heap).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Sub-heaps checked.
    pub subheaps: u32,
    /// Bytes of data.
    pub capacity_bytes: u64,
    /// Usable bytes of live blocks.
    pub allocated_bytes: u64,
    /// Bytes in free extents and free slab slots.
    pub free_bytes: u64,
    /// Bytes at the end of slabs too small for one more slot.
    pub slab_waste_bytes: u64,
    /// Live blocks.
    pub live_allocations: u64,
    /// Free extents.
    pub free_extents: u64,
    /// Longest free extent, in bytes.
    pub largest_free_extent_bytes: u64,
    /// Slabs.
    pub slabs: u64,
    /// A root object is set (and live).
    pub root_set: bool,
}

impl CheckReport {
    pub(crate) fn add(&mut self, o: &CheckReport) {
        self.capacity_bytes += o.capacity_bytes;
        self.allocated_bytes += o.allocated_bytes;
        self.free_bytes += o.free_bytes;
        self.slab_waste_bytes += o.slab_waste_bytes;
        self.live_allocations += o.live_allocations;
        self.free_extents += o.free_extents;
        self.largest_free_extent_bytes = self
            .largest_free_extent_bytes
            .max(o.largest_free_extent_bytes);
        self.slabs += o.slabs;
    }
}

fn corrupt(m: &SubMeta<'_>, reason: &'static str) -> HeapError {
    HeapError::Corrupt {
        subheap: m.index,
        reason,
    }
}

/// One extent as seen by a walk.
struct Extent {
    head: u32,
    len: u32,
    state: u8,
}

/// Walk the extents in address order, validating the tiling (invariant 1 and slab entries).
fn walk(m: &SubMeta<'_>, mut f: impl FnMut(&Extent) -> Result<()>) -> Result<()> {
    let units = m.units.len() as u32;
    let mut u = 0u32;
    while u < units {
        let e = m.units[u as usize];
        if e.flags & FLAG_HEAD == 0 || !matches!(e.state, STATE_FREE | STATE_LARGE | STATE_SLAB) {
            return Err(corrupt(m, "extent does not start with a head entry"));
        }
        let len = e.len_units;
        if len == 0 || u.checked_add(len).is_none_or(|end| end > units) {
            return Err(corrupt(m, "extent length out of range"));
        }
        let tail = m.units[(u + len - 1) as usize];
        if tail.flags & FLAG_TAIL == 0 || tail.state != e.state || tail.len_units != len {
            return Err(corrupt(m, "extent tail does not match its head"));
        }
        if e.state == STATE_SLAB {
            if len != SLAB_UNITS {
                return Err(corrupt(m, "slab length"));
            }
            for i in 0..len {
                let s = m.units[(u + i) as usize];
                if s.state != STATE_SLAB
                    || s.link_a != u
                    || s.link_b != e.link_b
                    || s.class != e.class
                {
                    return Err(corrupt(m, "slab unit entries disagree"));
                }
            }
        } else {
            for i in 1..len.saturating_sub(1) {
                if m.units[(u + i) as usize].state != STATE_NONE {
                    return Err(corrupt(m, "entry inside an extent is not NONE"));
                }
            }
        }
        f(&Extent {
            head: u,
            len,
            state: e.state,
        })?;
        u += len;
    }
    Ok(())
}

/// Append `(region offset, usable bytes)` of every live block of the sub-heap, in address order.
pub(crate) fn live_blocks(m: &SubMeta<'_>, out: &mut Vec<(usize, usize)>) -> Result<()> {
    walk(m, |x| {
        let start = m.data_off + x.head as usize * UNIT_BYTES;
        match x.state {
            STATE_LARGE => out.push((start, x.len as usize * UNIT_BYTES)),
            STATE_SLAB => {
                let d = m.units[x.head as usize].link_b;
                let desc = m
                    .descs
                    .get(d as usize)
                    .ok_or(corrupt(m, "slab descriptor index"))?;
                if desc.class as usize >= CLASS_COUNT {
                    return Err(corrupt(m, "slab class"));
                }
                let class_bytes = CLASS_BYTES[desc.class as usize] as usize;
                for slot in 0..slots_per_slab(desc.class as usize) as usize {
                    if desc.bitmap[slot / 64] & (1 << (slot % 64)) != 0 {
                        out.push((start + slot * class_bytes, class_bytes));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    })
}

/// Validate one sub-heap (see the module doc for the list).
pub(crate) fn check_subheap(m: &SubMeta<'_>) -> Result<CheckReport> {
    let units = m.units.len() as u32;
    let mut r = CheckReport {
        subheaps: 1,
        capacity_bytes: units as u64 * UNIT_BYTES as u64,
        ..Default::default()
    };
    let mut free_units = 0u64;
    let mut prev_free = false;
    let mut slabs_with_room = 0u64;
    let mut desc_seen = vec![false; m.descs.len()];
    walk(m, |x| {
        match x.state {
            STATE_FREE => {
                if prev_free {
                    return Err(corrupt(m, "two adjacent free extents (not coalesced)"));
                }
                r.free_extents += 1;
                free_units += x.len as u64;
                r.free_bytes += x.len as u64 * UNIT_BYTES as u64;
                r.largest_free_extent_bytes = r
                    .largest_free_extent_bytes
                    .max(x.len as u64 * UNIT_BYTES as u64);
            }
            STATE_LARGE => {
                r.live_allocations += 1;
                r.allocated_bytes += x.len as u64 * UNIT_BYTES as u64;
            }
            _ => {
                let head = m.units[x.head as usize];
                let d = head.link_b as usize;
                let desc = m.descs.get(d).ok_or(corrupt(m, "slab descriptor index"))?;
                if desc.in_use != 1 || desc.head_unit != x.head || desc.class != head.class {
                    return Err(corrupt(m, "slab descriptor does not describe its slab"));
                }
                if std::mem::replace(&mut desc_seen[d], true) {
                    return Err(corrupt(m, "descriptor shared by two slabs"));
                }
                let class = desc.class as usize;
                if class >= CLASS_COUNT || d as u32 >= m.hdr.desc_high_water {
                    return Err(corrupt(m, "slab class or descriptor out of range"));
                }
                let slots = slots_per_slab(class) as usize;
                let mut used = 0usize;
                for (w, word) in desc.bitmap.iter().enumerate() {
                    let first = w * 64;
                    let pad = if first >= slots {
                        !0u64
                    } else if first + 64 <= slots {
                        0
                    } else {
                        !0u64 << (slots - first)
                    };
                    if word & pad != pad {
                        return Err(corrupt(m, "slab padding bits clear"));
                    }
                    used += (word & !pad).count_ones() as usize;
                }
                if used != desc.used_slots as usize {
                    return Err(corrupt(m, "slab used count differs from its bitmap"));
                }
                if used < slots {
                    slabs_with_room += 1;
                }
                let class_bytes = CLASS_BYTES[class] as u64;
                r.slabs += 1;
                r.live_allocations += used as u64;
                r.allocated_bytes += used as u64 * class_bytes;
                r.free_bytes += (slots - used) as u64 * class_bytes;
                r.slab_waste_bytes +=
                    (SLAB_UNITS as u64 * UNIT_BYTES as u64) - slots as u64 * class_bytes;
            }
        }
        prev_free = x.state == STATE_FREE;
        Ok(())
    })?;

    // 4. Bin lists hold exactly the free extents.
    let mut listed = 0u64;
    for b in 0..BIN_COUNT {
        let head = m.hdr.bin_heads[b];
        let marked = m.hdr.bin_bitmap[b / 64] & (1 << (b % 64)) != 0;
        if marked != (head != NIL) {
            return Err(corrupt(m, "bin bitmap disagrees with bin list"));
        }
        let mut prev = NIL;
        let mut cur = head;
        while cur != NIL {
            let e = m
                .units
                .get(cur as usize)
                .ok_or(corrupt(m, "bin link out of range"))?;
            if e.state != STATE_FREE || e.flags & FLAG_HEAD == 0 || bin_of(e.len_units.max(1)) != b
            {
                return Err(corrupt(m, "bin list holds a wrong extent"));
            }
            if e.link_b != prev {
                return Err(corrupt(m, "bin back link"));
            }
            listed += 1;
            if listed > r.free_extents {
                return Err(corrupt(
                    m,
                    "bin lists longer than the free extents (cycle?)",
                ));
            }
            prev = cur;
            cur = e.link_a;
        }
    }
    if listed != r.free_extents {
        return Err(corrupt(m, "free extent missing from the bins"));
    }

    // 5. Partial lists hold exactly the slabs with room.
    let mut partial = 0u64;
    for class in 0..CLASS_COUNT {
        let mut prev = NIL;
        let mut cur = m.hdr.partial_heads[class];
        while cur != NIL {
            let desc = m
                .descs
                .get(cur as usize)
                .ok_or(corrupt(m, "partial link out of range"))?;
            if desc.in_use != 1
                || desc.class as usize != class
                || desc.used_slots >= slots_per_slab(class)
            {
                return Err(corrupt(m, "partial list holds a wrong slab"));
            }
            if desc.prev != prev {
                return Err(corrupt(m, "partial back link"));
            }
            partial += 1;
            if partial > r.slabs {
                return Err(corrupt(m, "partial lists longer than the slabs (cycle?)"));
            }
            prev = cur;
            cur = desc.next;
        }
    }
    if partial != slabs_with_room {
        return Err(corrupt(m, "slab with room missing from its partial list"));
    }

    // 6. Descriptors and counters.
    let mut released = 0u64;
    let mut cur = m.hdr.free_desc_head;
    while cur != NIL {
        let desc = m
            .descs
            .get(cur as usize)
            .ok_or(corrupt(m, "free descriptor link"))?;
        if desc.in_use != 0 || cur >= m.hdr.desc_high_water {
            return Err(corrupt(m, "released descriptor in use"));
        }
        released += 1;
        if released > m.descs.len() as u64 {
            return Err(corrupt(m, "free descriptor stack cycles"));
        }
        cur = desc.next;
    }
    if released + r.slabs != m.hdr.desc_high_water as u64 {
        return Err(corrupt(m, "descriptors lost"));
    }
    // The header counts large blocks; slab slots are counted by their descriptors.
    let (mut slot_count, mut slot_bytes) = (0u64, 0u64);
    for desc in m.descs.iter().take(m.hdr.desc_high_water as usize) {
        if desc.in_use != 0 && (desc.class as usize) < CLASS_COUNT {
            slot_count += u64::from(desc.used_slots);
            slot_bytes += u64::from(desc.used_slots) * u64::from(CLASS_BYTES[desc.class as usize]);
        }
    }
    if m.hdr.live_count + slot_count != r.live_allocations
        || m.hdr.live_bytes + slot_bytes != r.allocated_bytes
        || m.hdr.free_units != free_units
        || m.hdr.slab_count as u64 != r.slabs
    {
        return Err(corrupt(m, "header counters differ from the walk"));
    }

    // 7. Accounting identity.
    if r.allocated_bytes + r.free_bytes + r.slab_waste_bytes != r.capacity_bytes {
        return Err(corrupt(m, "allocated + free + waste != capacity"));
    }
    Ok(r)
}
