//! On-region layout: named offsets of the heap header, the geometry computed at format time,
//! the size-class table and the free-extent bins.
//!
//! Owns: every constant that fixes where a byte lives in the region (mirrored in
//! `docs/allocator.md`). Does no I/O and holds no pointers: it encodes and decodes the header
//! from byte slices and computes offsets.
//!
//! Invariants: the header page and the root page are one OS page each; every sub-heap's
//! metadata starts on an OS page and spans a whole number of OS pages; the data area starts on
//! an OS page. Header integers are little-endian fixed-width; the in-place metadata structs in
//! `meta.rs` use the native layout, and the crate refuses to build on big-endian targets.

use crate::error::HeapError;

#[cfg(target_endian = "big")]
compile_error!(
    "pmo-alloc stores metadata structs in native layout and supports little-endian only"
);

/// OS page size the layout assumes (and `format`/`open` verify).
pub const OS_PAGE_BYTES: usize = 4096;
/// The extent allocator's granule: a "unit" of the data area.
pub const UNIT_BYTES: usize = 4096;
/// A slab is one extent of this many units, cut into equal slots of one size class.
pub const SLAB_UNITS: u32 = 16;
/// Bytes in one slab.
pub const SLAB_BYTES: usize = SLAB_UNITS as usize * UNIT_BYTES;
/// Words of the per-slab slot bitmap (enough for the smallest class).
pub const SLAB_BITMAP_WORDS: usize = SLAB_BYTES / MIN_CLASS_BYTES / 64;
/// Smallest size class; every class is a multiple of it, so every slot is 16-byte aligned.
pub const MIN_CLASS_BYTES: usize = 16;
/// Largest request served from slabs; larger requests take whole units.
pub const MAX_SMALL_BYTES: usize = 4096;
/// Sub-heaps a heap may have (bounds the DRAM lock table).
pub const MAX_SUBHEAPS: u32 = 256;
/// Largest alignment `alloc` accepts.
pub const MAX_ALIGN_BYTES: usize = UNIT_BYTES;
/// "No index" in every u32 link field.
pub const NIL: u32 = u32::MAX;

/// Size classes in bytes (all multiples of 16, at most 4096).
pub const CLASS_BYTES: [u32; 28] = [
    16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024,
    1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096,
];
/// Number of size classes.
pub const CLASS_COUNT: usize = CLASS_BYTES.len();

/// `SIZE_TO_CLASS[(size + 15) / 16]` is the smallest class holding `size` (for size <= 4096).
const SIZE_TO_CLASS: [u8; MAX_SMALL_BYTES / MIN_CLASS_BYTES + 1] = build_size_to_class();

const fn build_size_to_class() -> [u8; MAX_SMALL_BYTES / MIN_CLASS_BYTES + 1] {
    let mut table = [0u8; MAX_SMALL_BYTES / MIN_CLASS_BYTES + 1];
    let mut i = 0;
    let mut class = 0;
    while i < table.len() {
        let size = (i * MIN_CLASS_BYTES) as u32;
        while CLASS_BYTES[class] < size {
            class += 1;
        }
        table[i] = class as u8;
        i += 1;
    }
    table
}

/// Slots in a slab of `class`.
pub const fn slots_per_slab(class: usize) -> u32 {
    (SLAB_BYTES / CLASS_BYTES[class] as usize) as u32
}

/// The size class for a request of `size` bytes aligned to `align` (a power of two), or `None`
/// when it must come from the extent allocator. A class serves `align` when its size is a
/// multiple of `align`: slabs start on a unit, so slot `k` sits at `k * class`, aligned.
#[inline]
pub fn class_for(size: usize, align: usize) -> Option<usize> {
    if size > MAX_SMALL_BYTES {
        return None;
    }
    let mut class = SIZE_TO_CLASS[size.div_ceil(MIN_CLASS_BYTES)] as usize;
    if align > MIN_CLASS_BYTES {
        while class < CLASS_COUNT && !(CLASS_BYTES[class] as usize).is_multiple_of(align) {
            class += 1;
        }
        if class == CLASS_COUNT {
            return None;
        }
    }
    Some(class)
}

/// Free-extent bins: lengths 1..63 units have a bin each; longer ones share a bin per power of two.
pub const EXACT_BINS: u32 = 64;
/// Number of bins (the longest extent, 2^32-1 units, lands in bin 64 + 31 - 6 = 89).
pub const BIN_COUNT: usize = 96;

/// The bin holding free extents of `len_units` (>= 1).
#[inline]
pub fn bin_of(len_units: u32) -> usize {
    if len_units < EXACT_BINS {
        len_units as usize
    } else {
        (EXACT_BINS + (31 - len_units.leading_zeros()) - 6) as usize
    }
}

// ---- Heap header (OS page 0 of the region), little-endian -------------------------------------

/// Header magic, bytes 0..8.
pub const HEADER_MAGIC: [u8; 8] = *b"PMOHEAP\0";
/// Format version this code writes and reads.
pub const FORMAT_VERSION: u32 = 2;
/// Offsets of header fields (little-endian), inside OS page 0.
pub mod hdr {
    /// [u8; 8]
    pub const MAGIC: usize = 0;
    /// u32
    pub const VERSION: usize = 8;
    /// u32: bytes covered by the checksum (= CHECKSUM)
    pub const HEADER_BYTES: usize = 12;
    /// u64
    pub const REGION_BYTES: usize = 16;
    /// u32
    pub const UNIT_BYTES: usize = 24;
    /// u32
    pub const SLAB_UNITS: usize = 28;
    /// u32
    pub const SUBHEAP_COUNT: usize = 32;
    /// u32
    pub const UNITS_PER_SUBHEAP: usize = 36;
    /// u64
    pub const META_OFFSET: usize = 40;
    /// u64
    pub const META_STRIDE: usize = 48;
    /// u64
    pub const DATA_OFFSET: usize = 56;
    /// u64
    pub const DATA_BYTES: usize = 64;
    /// u64, random at format
    pub const HEAP_ID: usize = 72;
    /// 40 bytes of zeros
    pub const RESERVED: usize = 80;
    /// u32 crc32c of bytes 0..120
    pub const CHECKSUM: usize = 120;
    /// End of the encoded header.
    pub const END: usize = 124;
}
/// Offset of the root page (OS page 1).
pub const ROOT_PAGE_OFFSET: usize = OS_PAGE_BYTES;
/// Offsets inside the root page (OS page 1).
pub mod root {
    /// u64: region offset of the root allocation, 0 = none
    pub const ROOT_OFFSET: usize = 0;
    /// u64: ROOT_OFFSET ^ heap id ^ ROOT_CHECK_SALT
    pub const ROOT_CHECK: usize = 8;
    /// Salt of the root check word.
    pub const ROOT_CHECK_SALT: u64 = 0x005E_ED0F_B10C_C0DE;
}
/// Offset of the first sub-heap's metadata (OS page 2).
pub const META_OFFSET: usize = 2 * OS_PAGE_BYTES;

/// Where everything is: decoded from (or written to) the header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes of the region the heap covers.
    pub region_bytes: u64,
    /// Number of sub-heaps.
    pub subheap_count: u32,
    /// Units of data each sub-heap owns.
    pub units_per_subheap: u32,
    /// Region offset of sub-heap 0's metadata.
    pub meta_offset: u64,
    /// Bytes between two sub-heaps' metadata (OS-page multiple).
    pub meta_stride: u64,
    /// Region offset of the data area (sub-heap i's data starts at `data_offset + i * subheap_data_bytes`).
    pub data_offset: u64,
    /// Bytes of the data area.
    pub data_bytes: u64,
    /// Random identity chosen at format.
    pub heap_id: u64,
}

/// Bytes reserved for a sub-heap's header (`meta::SubHeapHeader`) at the start of its metadata.
pub(crate) const SUBHEAP_HEADER_BYTES: usize = 1024;
/// Bytes of one unit-map entry (`meta::UnitEntry`).
pub(crate) const UNIT_ENTRY_BYTES: usize = 16;
/// Bytes of one slab descriptor (`meta::SlabDesc`): 32 bytes of fields, then the slot bitmap.
pub(crate) const SLAB_DESC_BYTES: usize = 32 + 8 * SLAB_BITMAP_WORDS;

/// Metadata bytes of one sub-heap owning `units` units, rounded to OS pages.
pub fn meta_stride_for(units: u32) -> u64 {
    let desc_count = units / SLAB_UNITS;
    let bytes = SUBHEAP_HEADER_BYTES as u64
        + units as u64 * UNIT_ENTRY_BYTES as u64
        + desc_count as u64 * SLAB_DESC_BYTES as u64;
    bytes.div_ceil(OS_PAGE_BYTES as u64) * OS_PAGE_BYTES as u64
}

impl Geometry {
    /// Lay out a region of `region_bytes` for `subheap_count` sub-heaps, giving each as many units
    /// as fit.
    pub fn plan(region_bytes: u64, subheap_count: u32, heap_id: u64) -> Result<Self, HeapError> {
        if subheap_count == 0 || subheap_count > MAX_SUBHEAPS {
            return Err(HeapError::InvalidOptions("sub-heap count must be 1..=256"));
        }
        let min = Self::min_region_bytes(subheap_count);
        if region_bytes < min {
            return Err(HeapError::RegionTooSmall {
                len: region_bytes,
                min,
            });
        }
        let n = subheap_count as u64;
        let avail = region_bytes - META_OFFSET as u64;
        // Per unit: its data plus its share of metadata; then walk down until it fits.
        let per_unit = UNIT_BYTES as u64
            + UNIT_ENTRY_BYTES as u64
            + SLAB_DESC_BYTES as u64 / SLAB_UNITS as u64;
        let mut units = (avail / n / per_unit).min(u32::MAX as u64 - SLAB_UNITS as u64) as u32;
        loop {
            let stride = meta_stride_for(units);
            let need = META_OFFSET as u64 + n * stride + n * units as u64 * UNIT_BYTES as u64;
            if need <= region_bytes {
                let data_offset = META_OFFSET as u64 + n * stride;
                return Ok(Geometry {
                    region_bytes,
                    subheap_count,
                    units_per_subheap: units,
                    meta_offset: META_OFFSET as u64,
                    meta_stride: stride,
                    data_offset,
                    data_bytes: n * units as u64 * UNIT_BYTES as u64,
                    heap_id,
                });
            }
            if units <= SLAB_UNITS {
                return Err(HeapError::RegionTooSmall {
                    len: region_bytes,
                    min,
                });
            }
            // Shrink by the overshoot (at least one unit): converges in a few steps.
            let over_units = (need - region_bytes).div_ceil(n * UNIT_BYTES as u64).max(1);
            units = units.saturating_sub(over_units as u32).max(SLAB_UNITS);
        }
    }

    /// Smallest region that holds `subheap_count` sub-heaps of one slab each.
    pub fn min_region_bytes(subheap_count: u32) -> u64 {
        let n = subheap_count.max(1) as u64;
        META_OFFSET as u64 + n * meta_stride_for(SLAB_UNITS) + n * SLAB_BYTES as u64
    }

    /// Bytes of data one sub-heap owns.
    pub fn subheap_data_bytes(&self) -> u64 {
        self.units_per_subheap as u64 * UNIT_BYTES as u64
    }

    /// Check that the geometry is internally consistent and fits a region of `region_len` bytes.
    pub fn validate(&self, region_len: u64) -> Result<(), HeapError> {
        let bad = HeapError::BadGeometry;
        if self.region_bytes > region_len {
            return Err(bad("header claims more bytes than the region has"));
        }
        if self.subheap_count == 0 || self.subheap_count > MAX_SUBHEAPS {
            return Err(bad("sub-heap count out of range"));
        }
        if self.units_per_subheap < SLAB_UNITS || self.units_per_subheap > u32::MAX - SLAB_UNITS {
            return Err(bad("units per sub-heap out of range"));
        }
        if self.meta_offset != META_OFFSET as u64 {
            return Err(bad("metadata offset"));
        }
        if self.meta_stride != meta_stride_for(self.units_per_subheap) {
            return Err(bad("metadata stride"));
        }
        let n = self.subheap_count as u64;
        let data_offset = self
            .meta_offset
            .checked_add(n * self.meta_stride)
            .ok_or(bad("overflow"))?;
        if self.data_offset != data_offset {
            return Err(bad("data offset"));
        }
        if self.data_bytes != n * self.subheap_data_bytes() {
            return Err(bad("data length"));
        }
        let end = self
            .data_offset
            .checked_add(self.data_bytes)
            .ok_or(bad("overflow"))?;
        if end > self.region_bytes {
            return Err(bad("data area runs past the region"));
        }
        Ok(())
    }

    /// Encode into the header page's first bytes (checksum included).
    pub fn encode(&self, out: &mut [u8; hdr::END]) {
        out.fill(0);
        out[hdr::MAGIC..hdr::MAGIC + 8].copy_from_slice(&HEADER_MAGIC);
        put32(out, hdr::VERSION, FORMAT_VERSION);
        put32(out, hdr::HEADER_BYTES, hdr::CHECKSUM as u32);
        put64(out, hdr::REGION_BYTES, self.region_bytes);
        put32(out, hdr::UNIT_BYTES, UNIT_BYTES as u32);
        put32(out, hdr::SLAB_UNITS, SLAB_UNITS);
        put32(out, hdr::SUBHEAP_COUNT, self.subheap_count);
        put32(out, hdr::UNITS_PER_SUBHEAP, self.units_per_subheap);
        put64(out, hdr::META_OFFSET, self.meta_offset);
        put64(out, hdr::META_STRIDE, self.meta_stride);
        put64(out, hdr::DATA_OFFSET, self.data_offset);
        put64(out, hdr::DATA_BYTES, self.data_bytes);
        put64(out, hdr::HEAP_ID, self.heap_id);
        let crc = crc32c::crc32c(&out[..hdr::CHECKSUM]);
        put32(out, hdr::CHECKSUM, crc);
    }

    /// Decode and verify a header (magic, version, checksum, constants, geometry).
    pub fn decode(bytes: &[u8; hdr::END], region_len: u64) -> Result<Self, HeapError> {
        if bytes[hdr::MAGIC..hdr::MAGIC + 8] != HEADER_MAGIC {
            return Err(HeapError::BadMagic);
        }
        let version = get32(bytes, hdr::VERSION);
        if version != FORMAT_VERSION {
            return Err(HeapError::BadVersion(version));
        }
        let crc = crc32c::crc32c(&bytes[..hdr::CHECKSUM]);
        if crc != get32(bytes, hdr::CHECKSUM) {
            return Err(HeapError::BadChecksum);
        }
        if get32(bytes, hdr::HEADER_BYTES) != hdr::CHECKSUM as u32
            || get32(bytes, hdr::UNIT_BYTES) != UNIT_BYTES as u32
            || get32(bytes, hdr::SLAB_UNITS) != SLAB_UNITS
            || bytes[hdr::RESERVED..hdr::CHECKSUM].iter().any(|b| *b != 0)
        {
            return Err(HeapError::BadGeometry("constants differ from this build"));
        }
        let geo = Geometry {
            region_bytes: get64(bytes, hdr::REGION_BYTES),
            subheap_count: get32(bytes, hdr::SUBHEAP_COUNT),
            units_per_subheap: get32(bytes, hdr::UNITS_PER_SUBHEAP),
            meta_offset: get64(bytes, hdr::META_OFFSET),
            meta_stride: get64(bytes, hdr::META_STRIDE),
            data_offset: get64(bytes, hdr::DATA_OFFSET),
            data_bytes: get64(bytes, hdr::DATA_BYTES),
            heap_id: get64(bytes, hdr::HEAP_ID),
        };
        geo.validate(region_len)?;
        Ok(geo)
    }
}

fn put32(out: &mut [u8], at: usize, v: u32) {
    out[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(out: &mut [u8], at: usize, v: u64) {
    out[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn get32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}
fn get64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_every_small_size() {
        for size in 0..=MAX_SMALL_BYTES {
            let c = class_for(size, 16).expect("small size has a class");
            assert!(CLASS_BYTES[c] as usize >= size);
            if c > 0 {
                assert!(
                    (CLASS_BYTES[c - 1] as usize) < size.max(1),
                    "class {c} not the smallest for {size}"
                );
            }
        }
        assert_eq!(class_for(MAX_SMALL_BYTES + 1, 16), None);
    }

    #[test]
    fn aligned_classes_are_multiples_of_the_alignment() {
        for align in [32usize, 64, 128, 256, 512, 1024, 2048, 4096] {
            for size in [1usize, 17, 100, 300, 1000, 3000, 4096] {
                if let Some(c) = class_for(size, align) {
                    assert_eq!(CLASS_BYTES[c] as usize % align, 0);
                    assert!(CLASS_BYTES[c] as usize >= size);
                }
            }
        }
        assert_eq!(CLASS_BYTES[class_for(1, 4096).unwrap()], 4096);
    }

    #[test]
    fn bitmap_covers_smallest_class() {
        assert_eq!(slots_per_slab(0) as usize, SLAB_BITMAP_WORDS * 64);
        for c in 0..CLASS_COUNT {
            assert!(slots_per_slab(c) >= 16);
        }
    }

    #[test]
    fn bins_are_monotonic_and_bounded() {
        let mut last = 0;
        for len in 1..5000u32 {
            let b = bin_of(len);
            assert!(b >= last);
            last = b;
        }
        assert_eq!(bin_of(63), 63);
        assert_eq!(bin_of(64), 64);
        assert_eq!(bin_of(127), 64);
        assert_eq!(bin_of(128), 65);
        assert!(bin_of(u32::MAX) < BIN_COUNT);
    }

    #[test]
    fn plan_fits_and_round_trips() {
        for (len, n) in [
            (1u64 << 20, 1u32),
            (64 << 20, 2),
            (1 << 30, 4),
            (Geometry::min_region_bytes(3), 3),
        ] {
            let g = Geometry::plan(len, n, 7).unwrap();
            g.validate(len).unwrap();
            assert!(g.data_offset + g.data_bytes <= len);
            // Little waste: less than one unit per sub-heap plus metadata rounding.
            let mut bytes = [0u8; hdr::END];
            g.encode(&mut bytes);
            assert_eq!(Geometry::decode(&bytes, len).unwrap(), g);
        }
        assert!(matches!(
            Geometry::plan(1000, 1, 0),
            Err(HeapError::RegionTooSmall { .. })
        ));
        assert!(Geometry::plan(1 << 20, 0, 0).is_err());
    }

    #[test]
    fn every_corrupted_header_byte_is_detected() {
        let g = Geometry::plan(8 << 20, 2, 99).unwrap();
        let mut good = [0u8; hdr::END];
        g.encode(&mut good);
        for i in 0..hdr::END {
            for bit in [0x01u8, 0x80] {
                let mut bad = good;
                bad[i] ^= bit;
                assert!(
                    Geometry::decode(&bad, 8 << 20).is_err(),
                    "flip at byte {i} not detected"
                );
            }
        }
        assert!(
            Geometry::decode(&good, (8 << 20) - 1).is_err(),
            "short region accepted"
        );
    }
}
