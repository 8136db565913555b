//! [`PHashMap<K, V>`]: an open-addressing hash table (linear probing, tombstones) in one heap
//! block: `cap` control bytes, then `cap` slots, each a key and its value (one cache line
//! for both when they are small).
//!
//! Control byte: 0 empty, 1 deleted, `0x80 | top 7 bits of the hash` full. The hash is
//! `rustc_hash::FxHasher` with no random seed: the table's layout is persistent, so the hash
//! of a key must not change between runs (`docs/typed.md`: part of the on-medium format).
//! The table grows (or is rebuilt to drop tombstones) when full + deleted slots exceed 7/8.
//! Rebuilding writes a fresh block and frees the old one; the psync that follows commits both
//! or neither (shadow paging), so a crash never leaves half a rehash.
//!
//! Why unsafe is allowed here: slots are read and written through raw pointers into the
//! map's own table block (resolved by `Ctx`, owned by this map only).
#![allow(unsafe_code)]

use crate::{Ctx, Persistent, Result, TypedError};
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;

const EMPTY: u8 = 0;
const DELETED: u8 = 1;
const MIN_CAP: usize = 8;

/// A hash map in the persistent heap. Keys are plain `Copy` data; values may own blocks.
/// The zero value is empty.
#[repr(C)]
pub struct PHashMap<K: Persistent, V: Persistent> {
    table: u64,
    len: u64,
    cap: u64,
    /// Full + deleted slots.
    used: u64,
    heap: u64,
    /// Where this header lives (its offset), recorded when it first allocates: 0 unbound.
    home: u64,
    _kv: PhantomData<(K, V)>,
}

impl<K: Persistent, V: Persistent> Default for PHashMap<K, V> {
    fn default() -> Self {
        PHashMap {
            table: 0,
            len: 0,
            cap: 0,
            used: 0,
            heap: 0,
            home: 0,
            _kv: PhantomData,
        }
    }
}

impl<K: Persistent, V: Persistent> std::fmt::Debug for PHashMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PHashMap({:#x}, len {}, cap {})",
            self.table, self.len, self.cap
        )
    }
}

fn align_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// A table of `cap` slots: (offset of the slot array, slot stride, offset of the value in a
/// slot, total bytes, alignment).
#[inline(always)]
fn layout<K, V>(cap: usize) -> Option<(usize, usize, usize, usize, usize)> {
    let (stride, voff, align) = (
        Slot::<K, V>::STRIDE,
        Slot::<K, V>::VOFF,
        Slot::<K, V>::ALIGN,
    );
    let slots = align_up(cap, align);
    let end = slots.checked_add(cap.checked_mul(stride)?)?;
    Some((slots, stride, voff, end, align))
}

/// A slot's shape, known at compile time: the key, then the value at its alignment.
struct Slot<K, V>(PhantomData<(K, V)>);

impl<K, V> Slot<K, V> {
    const ALIGN: usize = max(std::mem::align_of::<K>(), std::mem::align_of::<V>());
    const VOFF: usize = align_up_c(std::mem::size_of::<K>(), std::mem::align_of::<V>());
    const STRIDE: usize = align_up_c(Self::VOFF + std::mem::size_of::<V>(), Self::ALIGN);
}

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

const fn align_up_c(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// Control bytes are examined eight at a time (a `u64`, SWAR): the lookup's branches then
/// depend on whole groups, not on each byte, which keeps them predictable and lets the
/// processor overlap the cache misses of successive lookups.
const GROUP: usize = 8;
const LO7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
const HI: u64 = 0x8080_8080_8080_8080;

/// Bit 7 of every byte of `x` that is zero (exact: no carry crosses a byte).
#[inline(always)]
fn zero_bytes(x: u64) -> u64 {
    !(((x & LO7).wrapping_add(LO7)) | x) & HI
}

/// `b` in every byte.
#[inline]
fn repeat(b: u8) -> u64 {
    u64::from_ne_bytes([b; 8])
}

#[inline(always)]
fn hash_of<K: Hash>(k: &K) -> u64 {
    let mut s = rustc_hash::FxHasher::default();
    k.hash(&mut s);
    // Fx's low bits are weak for small integers: finish with a multiply-xorshift.
    let x = s.finish().wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^ (x >> 29)
}

#[inline]
fn tag(hash: u64) -> u8 {
    0x80 | (hash >> 57) as u8
}

/// Raw pointers to one table's parts (valid while the map is borrowed).
struct Table<K, V> {
    ctrl: *mut u8,
    slots: *mut u8,
    cap: usize,
    bytes: usize,
    _kv: PhantomData<(K, V)>,
}

impl<K, V> Table<K, V> {
    /// Resolve the table of `cap` slots at `off` (range and alignment checked by `Ctx`).
    #[inline(always)]
    fn at(h: &Ctx, off: u64, cap: usize) -> Result<Self> {
        let (slots, _, _, end, align) =
            layout::<K, V>(cap).ok_or_else(|| TypedError::Corrupt("hash map too large"))?;
        let ctrl = h.ptr::<u8>(off, end)?;
        // Slot 0 aligned => every slot's key and value (the stride and the value's offset are
        // multiples of their alignments, which divide `align`).
        if !(ctrl as usize + slots).is_multiple_of(align) {
            return Err(TypedError::Corrupt("misaligned offset"));
        }
        Ok(Table {
            ctrl,
            // SAFETY: `slots < end`: inside the block just checked.
            slots: unsafe { ctrl.add(slots) },
            cap,
            bytes: end,
            _kv: PhantomData,
        })
    }
    /// Control bytes `pos..pos + 8` (wrapping around the table), byte `j` in bits `8j..8j+8`.
    #[inline(always)]
    fn group(&self, pos: usize) -> u64 {
        if pos + GROUP <= self.cap {
            // SAFETY: `pos + 8 <= cap`: eight control bytes of the table.
            let b = unsafe { self.ctrl.add(pos).cast::<[u8; GROUP]>().read_unaligned() };
            u64::from_le_bytes(b)
        } else {
            let mut g = 0u64;
            for j in 0..GROUP {
                // SAFETY: masked by `cap - 1`: a control byte of the table.
                let c = unsafe { *self.ctrl.add((pos + j) & (self.cap - 1)) };
                g |= (c as u64) << (8 * j);
            }
            g
        }
    }
    /// Start loading slot `i`'s cache line (`i < cap`), so that a lookup's two misses, the
    /// control bytes and the slot, overlap instead of following one another.
    #[inline(always)]
    fn prefetch_slot(&self, i: usize) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is a hint: it reads nothing and cannot fault; the address is
        // a slot of the table anyway.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(self.key(i).cast::<i8>());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = i;
    }
    /// Key of slot `i` (`i < cap`).
    #[inline(always)]
    fn key(&self, i: usize) -> *mut K {
        debug_assert!(i < self.cap);
        // SAFETY: `i < cap`: inside the slot array (checked by `at`).
        unsafe { self.slots.add(i * Slot::<K, V>::STRIDE) as *mut K }
    }
    /// Value of slot `i` (`i < cap`).
    #[inline(always)]
    fn val(&self, i: usize) -> *mut V {
        debug_assert!(i < self.cap);
        // SAFETY: as in `key`.
        unsafe {
            self.slots
                .add(i * Slot::<K, V>::STRIDE + Slot::<K, V>::VOFF) as *mut V
        }
    }
}

// SAFETY: keys are plain data (`Copy`), values as their impls; the header is six u64 with no
// padding; an inconsistent header or table is refused as `Corrupt`. It owns its table and the
// values' blocks.
unsafe impl<K, V> Persistent for PHashMap<K, V>
where
    K: Persistent + Copy + Hash + Eq,
    V: Persistent,
{
    const LAYOUT: u64 = crate::layout::mix(
        crate::layout::mix(
            crate::layout::hash_str(crate::layout::SEED, "PHashMap/2"),
            K::LAYOUT,
        ),
        V::LAYOUT,
    );
    const OWNS_BLOCKS: bool = true;
    const LAYOUT_OK: () = {
        let () = K::LAYOUT_OK;
        V::LAYOUT_OK
    };
    fn for_each_block(&self, h: &Ctx, f: &mut dyn FnMut(u64)) -> Result<()> {
        let t = self.table(h)?;
        if let Some(t) = t {
            f(self.table);
            // The walk (what `TypedHeap::check` runs) also counts the slots: a header whose
            // counts were altered would otherwise pass until an update trusts them.
            let (mut full, mut deleted) = (0u64, 0u64);
            for i in 0..t.cap {
                // SAFETY: `i < cap`, inside the owned table.
                match unsafe { *t.ctrl.add(i) } {
                    c if c >= 0x80 => {
                        full += 1;
                        if V::OWNS_BLOCKS {
                            // SAFETY: slot `i` is full, inside the owned table; shared borrow.
                            unsafe { &*t.val(i) }.for_each_block(h, f)?;
                        }
                    }
                    DELETED => deleted += 1,
                    EMPTY => {}
                    _ => return Err(TypedError::Corrupt("hash map control byte is invalid")),
                }
            }
            if full != self.len || full + deleted != self.used {
                return Err(TypedError::Corrupt(
                    "hash map counts disagree with its table",
                ));
            }
        }
        Ok(())
    }
    fn release(&mut self, h: &Ctx) -> Result<()> {
        self.clear(h)
    }
    fn rebind(&mut self, h: &Ctx) -> Result<()> {
        h.rebind_handle(self, |s| &mut s.home)
    }
}

impl<K, V> PHashMap<K, V>
where
    K: Persistent + Copy + Hash + Eq,
    V: Persistent,
{
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Check the handle and resolve the table (`None` when unallocated).
    #[inline(always)]
    fn table(&self, h: &Ctx) -> Result<Option<Table<K, V>>> {
        h.check_handle(
            (self as *const Self).cast(),
            std::mem::size_of::<Self>(),
            self.heap,
            self.home,
        )?;
        if self.table == 0 {
            if self.cap != 0 || self.len != 0 || self.used != 0 {
                return Err(TypedError::Corrupt("hash map without a table has entries"));
            }
            return Ok(None);
        }
        let cap = self.cap as usize;
        if !cap.is_power_of_two() || self.len > self.used || self.used > self.cap {
            return Err(TypedError::Corrupt("hash map header is inconsistent"));
        }
        Ok(Some(Table::at(h, self.table, cap)?))
    }

    /// The slot holding `k`, if any. The probe sequence is the byte-by-byte linear probe of
    /// `insert` (the first empty slot ends it), examined a group of eight at a time.
    #[inline(always)]
    fn find(t: &Table<K, V>, k: &K) -> Option<usize> {
        let hash = hash_of(k);
        let want = repeat(tag(hash));
        let mask = t.cap - 1;
        let mut pos = hash as usize & mask;
        t.prefetch_slot(pos);
        let mut probed = 0;
        while probed < t.cap {
            let g = t.group(pos);
            let empty = zero_bytes(g);
            let mut hits = zero_bytes(g ^ want);
            if empty != 0 {
                // Only the slots before the first empty one are on the probe sequence.
                hits &= (empty & empty.wrapping_neg()) - 1;
            }
            while hits != 0 {
                let i = (pos + (hits.trailing_zeros() / 8) as usize) & mask;
                // SAFETY: `i <= mask < cap`: a slot of the table.
                if unsafe { *t.key(i) } == *k {
                    return Some(i);
                }
                hits &= hits - 1;
            }
            if empty != 0 {
                return None;
            }
            pos = (pos + GROUP) & mask;
            probed += GROUP;
        }
        None
    }

    /// The value for `k`.
    #[inline(always)]
    pub fn get<'a>(&'a self, h: &'a Ctx, k: &K) -> Result<Option<&'a V>> {
        let Some(t) = self.table(h)? else {
            return Ok(None);
        };
        // SAFETY: a slot of the owned table; shared borrow of the map for 'a.
        Ok(Self::find(&t, k).map(|i| unsafe { &*t.val(i) }))
    }

    /// True if `k` is present.
    pub fn contains_key(&self, h: &Ctx, k: &K) -> Result<bool> {
        Ok(self.get(h, k)?.is_some())
    }

    /// The value for `k`, mutably.
    #[inline(always)]
    pub fn get_mut<'a>(&'a mut self, h: &'a Ctx, k: &K) -> Result<Option<&'a mut V>> {
        h.writable()?;
        let Some(t) = self.table(h)? else {
            return Ok(None);
        };
        let Some(i) = Self::find(&t, k) else {
            return Ok(None);
        };
        // SAFETY: a slot of the owned table; exclusive borrow of the map for 'a; read-write.
        let v = unsafe { &mut *t.val(i) };
        h.touch_val(v)?;
        Ok(Some(v))
    }

    /// Rebuild into a table of `cap` slots (dropping tombstones).
    fn rebuild(&mut self, h: &Ctx, cap: usize) -> Result<()> {
        let (.., end, align) = layout::<K, V>(cap).ok_or_else(|| TypedError::CapacityOverflow)?;
        let new_off = h.alloc(end, align)?;
        let new = Table::<K, V>::at(h, new_off, cap)?;
        if let Some(old) = self.table(h)? {
            for i in 0..old.cap {
                // SAFETY: slots of the old table (owned, `i < cap`) moved bitwise into empty
                // slots of the fresh block (zeroed, owned, `j < cap`); values have no drop glue
                // and the old table is freed without reading them again, so ownership moves.
                unsafe {
                    if *old.ctrl.add(i) < 0x80 {
                        continue;
                    }
                    let k = *old.key(i);
                    let hash = hash_of(&k);
                    let mut j = hash as usize & (cap - 1);
                    while *new.ctrl.add(j) != EMPTY {
                        j = (j + 1) & (cap - 1);
                    }
                    *new.ctrl.add(j) = tag(hash);
                    new.key(j).write(k);
                    std::ptr::copy_nonoverlapping(old.val(i), new.val(j), 1);
                    h.rebind_moved(new.val(j), 1)?;
                }
            }
            h.free(self.table)?;
        }
        h.touch(new.ctrl, new.bytes)?;
        self.home = h.home_of(self)?;
        self.table = new_off;
        self.cap = cap as u64;
        self.used = self.len;
        self.heap = h.heap_id();
        h.touch_val(self)
    }

    /// Insert or replace: returns true if `k` was present (its old value's blocks are freed).
    pub fn insert(&mut self, h: &Ctx, k: K, v: V) -> Result<bool> {
        #[allow(clippy::let_unit_value)]
        let () = <Self as Persistent>::LAYOUT_OK;
        h.writable()?;
        if let Some(old) = self.get_mut(h, &k)? {
            old.release(h)?;
            let p: *mut V = old;
            // SAFETY: the slot we just borrowed (owned table); the old value has no drop glue
            // and its blocks were released.
            unsafe { p.write(v) };
            return Ok(true);
        }
        if (self.used as usize + 1) * 8 > self.cap as usize * 7 {
            let cap = if (self.len as usize + 1) * 2 > self.cap as usize {
                (self.cap as usize * 2).max(MIN_CAP)
            } else {
                self.cap as usize
            };
            self.rebuild(h, cap)?;
        }
        let t = self
            .table(h)?
            .ok_or_else(|| TypedError::Corrupt("hash map has no table"))?;
        let hash = hash_of(&k);
        let mask = t.cap - 1;
        let mut i = hash as usize & mask;
        for _ in 0..t.cap {
            // SAFETY: `i < cap`: a slot of the owned table; exclusive borrow; read-write attach.
            unsafe {
                let c = *t.ctrl.add(i);
                if c < 0x80 {
                    *t.ctrl.add(i) = tag(hash);
                    t.key(i).write(k);
                    t.val(i).write(v);
                    self.len += 1;
                    if c == EMPTY {
                        self.used += 1;
                    }
                    // The control byte, the slot (key, then value) and the header, together.
                    h.touch_many(&[
                        (t.ctrl.add(i), 1),
                        (
                            t.key(i).cast(),
                            Slot::<K, V>::VOFF + std::mem::size_of::<V>(),
                        ),
                        ((self as *const Self).cast(), std::mem::size_of::<Self>()),
                    ])?;
                    return Ok(false);
                }
            }
            i = (i + 1) & mask;
        }
        Err(TypedError::Corrupt("hash map table is full"))
    }

    /// Remove `k` (freeing what its value owns): true if it was present.
    pub fn remove(&mut self, h: &Ctx, k: &K) -> Result<bool> {
        h.writable()?;
        let Some(t) = self.table(h)? else {
            return Ok(false);
        };
        let Some(i) = Self::find(&t, k) else {
            return Ok(false);
        };
        // SAFETY: a control byte of the owned table (masked by `cap - 1`).
        let next = unsafe { *t.ctrl.add((i + 1) & (t.cap - 1)) };
        // The counts after the removal, before anything changes: a header that counts fewer
        // entries than the table holds was altered outside pmo.
        let (Some(len), Some(used)) = (
            self.len.checked_sub(1),
            self.used.checked_sub(u64::from(next == EMPTY)),
        ) else {
            return Err(TypedError::Corrupt(
                "hash map has more entries than recorded",
            ));
        };
        // SAFETY: slot `i` of the owned table; exclusive borrow; read-write attach.
        unsafe {
            (*t.val(i)).release(h)?;
            // A slot followed by an empty one can become empty again (no probe passes it).
            *t.ctrl.add(i) = if next == EMPTY { EMPTY } else { DELETED };
            self.used = used;
            self.len = len;
            h.touch_many(&[
                (t.ctrl.add(i), 1),
                ((self as *const Self).cast(), std::mem::size_of::<Self>()),
            ])?;
        }
        Ok(true)
    }

    /// Remove every entry and free the table.
    pub fn clear(&mut self, h: &Ctx) -> Result<()> {
        h.writable()?;
        let Some(t) = self.table(h)? else {
            return Ok(());
        };
        if V::OWNS_BLOCKS {
            for i in 0..t.cap {
                // SAFETY: slot `i < cap` of the owned table; exclusive borrow.
                unsafe {
                    if *t.ctrl.add(i) >= 0x80 {
                        (*t.val(i)).release(h)?;
                    }
                }
            }
        }
        h.free(self.table)?;
        *self = PHashMap::default();
        h.touch_val(self)
    }

    /// Iterate over the entries (in table order).
    pub fn iter<'a>(&'a self, h: &'a Ctx) -> Result<Iter<'a, K, V>> {
        Ok(Iter {
            t: self.table(h)?,
            i: 0,
            _m: PhantomData,
        })
    }
}

/// Iterator over a [`PHashMap`]'s entries.
pub struct Iter<'a, K, V> {
    t: Option<Table<K, V>>,
    i: usize,
    _m: PhantomData<&'a (K, V)>,
}

impl<'a, K: 'a, V: 'a> Iterator for Iter<'a, K, V> {
    type Item = (&'a K, &'a V);
    fn next(&mut self) -> Option<Self::Item> {
        let t = self.t.as_ref()?;
        while self.i < t.cap {
            let i = self.i;
            self.i += 1;
            // SAFETY: `i < cap`: a slot of the table, which the map (borrowed shared for 'a)
            // owns.
            unsafe {
                if *t.ctrl.add(i) >= 0x80 {
                    return Some((&*t.key(i), &*t.val(i)));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_layout_aligns_keys_and_values() {
        // u8 keys, u64 values: values 8-aligned, stride 16, slots after the control bytes.
        let (slots, stride, voff, end, align) = layout::<u8, u64>(8).unwrap();
        assert_eq!((slots, stride, voff, end, align), (8, 16, 8, 8 + 8 * 16, 8));
        // [u8; 3] keys, u16 values: no wasted alignment beyond 2.
        let (slots, stride, voff, _, align) = layout::<[u8; 3], u16>(16).unwrap();
        assert_eq!((slots, stride, voff, align), (16, 6, 4, 2));
        assert!(
            layout::<u64, u64>(usize::MAX / 4).is_none(),
            "overflow is refused"
        );
    }

    #[test]
    fn zero_bytes_is_exact() {
        for (x, want) in [
            (0u64, HI),
            (u64::MAX, 0),
            (0x0100_8000_0001_ff00, 0x0080_0080_8000_0080),
            (0x8080_8080_8080_8080, 0),
            (0x0101_0101_0101_0100, 0x80),
        ] {
            assert_eq!(zero_bytes(x), want, "{x:#x}");
        }
        // Every single byte value, in every position.
        for b in 0..=255u8 {
            for j in 0..8 {
                let x = repeat(0x55) & !(0xff << (8 * j)) | (b as u64) << (8 * j);
                let hit = zero_bytes(x) == 0x80 << (8 * j);
                assert_eq!(hit, b == 0, "byte {b:#x} at {j}");
                if b != 0 {
                    assert_eq!(zero_bytes(x), 0);
                }
            }
        }
    }

    #[test]
    fn tags_are_full_and_hashes_spread() {
        assert!(tag(0) >= 0x80 && tag(u64::MAX) >= 0x80);
        let mask = 1023;
        let mut seen = std::collections::HashSet::new();
        for k in 0u64..512 {
            seen.insert(hash_of(&k) as usize & mask);
        }
        assert!(
            seen.len() > 350,
            "sequential keys spread over the table: {}",
            seen.len()
        );
    }
}
