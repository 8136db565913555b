//! In-region metadata structs of one sub-heap, and the glossary of their fields.
//!
//! Owns: the `#[repr(C)]` layouts of the sub-heap header, the per-unit map and the slab
//! descriptors. Their byte sizes are region layout (`layout::SUBHEAP_HEADER_BYTES`,
//! `UNIT_ENTRY_BYTES`, `SLAB_DESC_BYTES`); the structs are checked against them at compile
//! time here. Every field is a plain integer, so any bit pattern is a valid value: corrupted
//! metadata can make the allocator return an error, never read outside the region.
//!
//! A sub-heap's metadata block (OS-page aligned, `meta_stride` bytes) is:
//! ```text
//! [SubHeapHeader: 1024 B][UnitEntry; units_per_subheap][SlabDesc; units_per_subheap / 16][pad to OS page]
//! ```
//!
//! Unit-map invariants (checked by `check`):
//! - the data area of a sub-heap is tiled by extents; the first unit of an extent has `HEAD`,
//!   the last has `TAIL` (one unit may have both), both carry the state and the length;
//! - units strictly inside a FREE or LARGE extent have state NONE;
//! - every unit of a slab has state SLAB, `link_a` = slab head unit, `link_b` = descriptor index;
//! - no two FREE extents are adjacent (freeing coalesces);
//! - a FREE extent's head is on the list of `bin_of(len)`; `link_a`/`link_b` are next/prev.

use crate::layout::{
    BIN_COUNT, CLASS_COUNT, SLAB_BITMAP_WORDS, SLAB_DESC_BYTES, SUBHEAP_HEADER_BYTES,
    UNIT_ENTRY_BYTES,
};

/// Unit state: inside an extent (not its head or tail).
pub const STATE_NONE: u8 = 0;
/// Unit state: part of a free extent.
pub const STATE_FREE: u8 = 1;
/// Unit state: part of a large allocation (one user block of `len_units` units).
pub const STATE_LARGE: u8 = 2;
/// Unit state: part of a slab.
pub const STATE_SLAB: u8 = 3;
/// Flag: first unit of an extent.
pub const FLAG_HEAD: u8 = 1;
/// Flag: last unit of an extent.
pub const FLAG_TAIL: u8 = 2;

/// One entry per unit of data.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnitEntry {
    /// `STATE_*`.
    pub state: u8,
    /// `FLAG_*`.
    pub flags: u8,
    /// Size class (slab units only).
    pub class: u8,
    /// Zero.
    pub reserved: u8,
    /// Extent length in units (head and tail entries).
    pub len_units: u32,
    /// FREE head: next extent in the bin. SLAB: head unit.
    pub link_a: u32,
    /// FREE head: previous extent in the bin. SLAB: descriptor index.
    pub link_b: u32,
}
const _: () = assert!(std::mem::size_of::<UnitEntry>() == UNIT_ENTRY_BYTES);

/// A slab's descriptor.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SlabDesc {
    /// First unit of the slab (sub-heap local).
    pub head_unit: u32,
    /// Size class.
    pub class: u8,
    /// 1 when the descriptor describes a live slab.
    pub in_use: u8,
    /// Zero.
    pub reserved: u16,
    /// Slots currently allocated.
    pub used_slots: u32,
    /// Bitmap word to search first.
    pub hint_word: u32,
    /// Next slab on the class's partial list, or next free descriptor.
    pub next: u32,
    /// Previous slab on the class's partial list.
    pub prev: u32,
    /// Zero.
    pub reserved2: u64,
    /// Bit `i` set: slot `i` allocated. Bits at and past the slot count are set at slab creation.
    pub bitmap: [u64; SLAB_BITMAP_WORDS],
}
const _: () = assert!(std::mem::size_of::<SlabDesc>() == SLAB_DESC_BYTES);

/// Sub-heap header magic ("PMOSUBHP").
pub const SUBHEAP_MAGIC: u64 = u64::from_le_bytes(*b"PMOSUBHP");

/// Per-sub-heap header: free-extent bins, partial-slab lists, counters.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SubHeapHeader {
    /// [`SUBHEAP_MAGIC`].
    pub magic: u64,
    /// Index of this sub-heap.
    pub index: u32,
    /// Units of data this sub-heap owns (copy of the geometry, checked at open).
    pub units: u32,
    /// Descriptors available (`units / 16`).
    pub desc_count: u32,
    /// Head of the stack of released descriptors.
    pub free_desc_head: u32,
    /// Descriptors ever handed out; those at and above are unused and untouched.
    pub desc_high_water: u32,
    /// Slabs alive.
    pub slab_count: u32,
    /// Live large blocks (slab slots are counted by their descriptors' `used_slots`).
    pub live_count: u64,
    /// Usable bytes of live large blocks.
    pub live_bytes: u64,
    /// Units in FREE extents.
    pub free_units: u64,
    /// Bit `b` set: bin `b` is non-empty.
    pub bin_bitmap: [u64; 2],
    /// Head extent of each bin.
    pub bin_heads: [u32; BIN_COUNT],
    /// Head slab of each class's partial list (slabs with a free slot).
    pub partial_heads: [u32; CLASS_COUNT],
    /// Heap identity copied from the header (catches a sub-heap block pasted from another heap).
    pub heap_id: u64,
}
const _: () = assert!(std::mem::size_of::<SubHeapHeader>() <= SUBHEAP_HEADER_BYTES);
const _: () = assert!(SUBHEAP_HEADER_BYTES.is_multiple_of(std::mem::align_of::<SlabDesc>()));

// The byte offsets documented in docs/allocator.md, checked at compile time.
const _: () = {
    use std::mem::offset_of;
    assert!(offset_of!(UnitEntry, state) == 0);
    assert!(offset_of!(UnitEntry, flags) == 1);
    assert!(offset_of!(UnitEntry, class) == 2);
    assert!(offset_of!(UnitEntry, len_units) == 4);
    assert!(offset_of!(UnitEntry, link_a) == 8);
    assert!(offset_of!(UnitEntry, link_b) == 12);
    assert!(offset_of!(SlabDesc, head_unit) == 0);
    assert!(offset_of!(SlabDesc, class) == 4);
    assert!(offset_of!(SlabDesc, in_use) == 5);
    assert!(offset_of!(SlabDesc, used_slots) == 8);
    assert!(offset_of!(SlabDesc, hint_word) == 12);
    assert!(offset_of!(SlabDesc, next) == 16);
    assert!(offset_of!(SlabDesc, prev) == 20);
    assert!(offset_of!(SlabDesc, bitmap) == 32);
    assert!(offset_of!(SubHeapHeader, magic) == 0);
    assert!(offset_of!(SubHeapHeader, index) == 8);
    assert!(offset_of!(SubHeapHeader, units) == 12);
    assert!(offset_of!(SubHeapHeader, desc_count) == 16);
    assert!(offset_of!(SubHeapHeader, free_desc_head) == 20);
    assert!(offset_of!(SubHeapHeader, desc_high_water) == 24);
    assert!(offset_of!(SubHeapHeader, slab_count) == 28);
    assert!(offset_of!(SubHeapHeader, live_count) == 32);
    assert!(offset_of!(SubHeapHeader, live_bytes) == 40);
    assert!(offset_of!(SubHeapHeader, free_units) == 48);
    assert!(offset_of!(SubHeapHeader, bin_bitmap) == 56);
    assert!(offset_of!(SubHeapHeader, bin_heads) == 72);
    assert!(offset_of!(SubHeapHeader, partial_heads) == 456);
    assert!(offset_of!(SubHeapHeader, heap_id) == 568);
    assert!(std::mem::size_of::<SubHeapHeader>() == 576);
};
