//! [`PHashMap<K, V>`]: an open-addressing hash table (linear probing, tombstones) in one heap
//! block: `cap` control bytes, then `cap` keys, then `cap` values.
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
            _kv: PhantomData,
        }
    }
}

impl<K: Persistent, V: Persistent> std::fmt::Debug for PHashMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PHashMap({:#x}, len {}, cap {})", self.table, self.len, self.cap)
    }
}

fn align_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

/// Byte offsets of the keys and the values in a table of `cap` slots, and its size.
fn layout<K, V>(cap: usize) -> Option<(usize, usize, usize)> {
    let keys = align_up(cap, std::mem::align_of::<K>());
    let vals = align_up(
        keys.checked_add(cap.checked_mul(std::mem::size_of::<K>())?)?,
        std::mem::align_of::<V>(),
    );
    let end = vals.checked_add(cap.checked_mul(std::mem::size_of::<V>())?)?;
    Some((keys, vals, end))
}

fn hash_of<K: Hash>(k: &K) -> u64 {
    let mut s = rustc_hash::FxHasher::default();
    k.hash(&mut s);
    // Fx's low bits are weak for small integers: finish with a multiply-xorshift.
    let x = s.finish().wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^ (x >> 29)
}

fn tag(hash: u64) -> u8 {
    0x80 | (hash >> 57) as u8
}

/// Raw pointers to one table's parts (valid while the map is borrowed).
struct Table<K, V> {
    ctrl: *mut u8,
    keys: *mut K,
    vals: *mut V,
    cap: usize,
    bytes: usize,
}

// SAFETY: keys are plain data (`Copy`), values as their impls; the header is five u64 with no
// padding; an inconsistent header or table is refused as `Corrupt`. It owns its table and the
// values' blocks.
unsafe impl<K, V> Persistent for PHashMap<K, V>
where
    K: Persistent + Copy + Hash + Eq,
    V: Persistent,
{
    const LAYOUT: u64 = crate::layout::mix(
        crate::layout::mix(crate::layout::hash_str(crate::layout::SEED, "PHashMap"), K::LAYOUT),
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
            if V::OWNS_BLOCKS {
                for i in 0..t.cap {
                    // SAFETY: `i < cap`, inside the owned table; shared borrow.
                    if unsafe { *t.ctrl.add(i) } >= 0x80 {
                        unsafe { &*t.vals.add(i) }.for_each_block(h, f)?;
                    }
                }
            }
        }
        Ok(())
    }
    fn release(&mut self, h: &Ctx) -> Result<()> {
        self.clear(h)
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
    fn table(&self, h: &Ctx) -> Result<Option<Table<K, V>>> {
        h.check_handle((self as *const Self).cast(), std::mem::size_of::<Self>(), self.heap)?;
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
        let (k, v, end) = layout::<K, V>(cap).ok_or(TypedError::Corrupt("hash map too large"))?;
        let ctrl = h.ptr::<u8>(self.table, end)?;
        Ok(Some(Table {
            ctrl,
            keys: h.ptr::<K>(self.table + k as u64, cap)?,
            vals: h.ptr::<V>(self.table + v as u64, cap)?,
            cap,
            bytes: end,
        }))
    }

    /// The slot holding `k`, if any.
    fn find(t: &Table<K, V>, k: &K) -> Option<usize> {
        let hash = hash_of(k);
        let want = tag(hash);
        let mask = t.cap - 1;
        let mut i = hash as usize & mask;
        for _ in 0..t.cap {
            // SAFETY: `i <= mask < cap`: inside the table.
            let c = unsafe { *t.ctrl.add(i) };
            if c == EMPTY {
                return None;
            }
            // SAFETY: as above.
            if c == want && unsafe { *t.keys.add(i) } == *k {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// The value for `k`.
    pub fn get<'a>(&'a self, h: &'a Ctx, k: &K) -> Result<Option<&'a V>> {
        let Some(t) = self.table(h)? else {
            return Ok(None);
        };
        // SAFETY: a slot of the owned table; shared borrow of the map for 'a.
        Ok(Self::find(&t, k).map(|i| unsafe { &*t.vals.add(i) }))
    }

    /// True if `k` is present.
    pub fn contains_key(&self, h: &Ctx, k: &K) -> Result<bool> {
        Ok(self.get(h, k)?.is_some())
    }

    /// The value for `k`, mutably.
    pub fn get_mut<'a>(&'a mut self, h: &'a Ctx, k: &K) -> Result<Option<&'a mut V>> {
        h.writable()?;
        let Some(t) = self.table(h)? else {
            return Ok(None);
        };
        let Some(i) = Self::find(&t, k) else {
            return Ok(None);
        };
        // SAFETY: a slot of the owned table; exclusive borrow of the map for 'a; read-write.
        let v = unsafe { &mut *t.vals.add(i) };
        h.touch_val(v)?;
        Ok(Some(v))
    }

    /// Rebuild into a table of `cap` slots (dropping tombstones).
    fn rebuild(&mut self, h: &Ctx, cap: usize) -> Result<()> {
        let (ko, vo, end) = layout::<K, V>(cap).ok_or(TypedError::CapacityOverflow)?;
        let align = std::mem::align_of::<K>().max(std::mem::align_of::<V>());
        let new_off = h.alloc(end, align)?;
        let new = Table::<K, V> {
            ctrl: h.ptr::<u8>(new_off, end)?,
            keys: h.ptr::<K>(new_off + ko as u64, cap)?,
            vals: h.ptr::<V>(new_off + vo as u64, cap)?,
            cap,
            bytes: end,
        };
        if let Some(old) = self.table(h)? {
            for i in 0..old.cap {
                // SAFETY: slots of the old table (owned, `i < cap`) moved bitwise into empty
                // slots of the fresh block (zeroed, owned, `j < cap`); values have no drop glue
                // and the old table is freed without reading them again, so ownership moves.
                unsafe {
                    if *old.ctrl.add(i) < 0x80 {
                        continue;
                    }
                    let k = *old.keys.add(i);
                    let hash = hash_of(&k);
                    let mut j = hash as usize & (cap - 1);
                    while *new.ctrl.add(j) != EMPTY {
                        j = (j + 1) & (cap - 1);
                    }
                    *new.ctrl.add(j) = tag(hash);
                    new.keys.add(j).write(k);
                    std::ptr::copy_nonoverlapping(old.vals.add(i), new.vals.add(j), 1);
                }
            }
            h.free(self.table)?;
        }
        h.touch(new.ctrl, new.bytes)?;
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
        let t = self.table(h)?.ok_or(TypedError::Corrupt("hash map has no table"))?;
        let hash = hash_of(&k);
        let mask = t.cap - 1;
        let mut i = hash as usize & mask;
        for _ in 0..t.cap {
            // SAFETY: `i < cap`: a slot of the owned table; exclusive borrow; read-write attach.
            unsafe {
                let c = *t.ctrl.add(i);
                if c < 0x80 {
                    *t.ctrl.add(i) = tag(hash);
                    t.keys.add(i).write(k);
                    t.vals.add(i).write(v);
                    h.touch(t.ctrl.add(i), 1)?;
                    h.touch(t.keys.add(i).cast(), std::mem::size_of::<K>())?;
                    h.touch(t.vals.add(i).cast(), std::mem::size_of::<V>())?;
                    self.len += 1;
                    if c == EMPTY {
                        self.used += 1;
                    }
                    h.touch_val(self)?;
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
        // SAFETY: slot `i` of the owned table; exclusive borrow; read-write attach.
        unsafe {
            (*t.vals.add(i)).release(h)?;
            // A slot followed by an empty one can become empty again (no probe passes it).
            let next = *t.ctrl.add((i + 1) & (t.cap - 1));
            *t.ctrl.add(i) = if next == EMPTY { EMPTY } else { DELETED };
            if next == EMPTY {
                self.used -= 1;
            }
            h.touch(t.ctrl.add(i), 1)?;
        }
        self.len -= 1;
        h.touch_val(self)?;
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
                        (*t.vals.add(i)).release(h)?;
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
                    return Some((&*t.keys.add(i), &*t.vals.add(i)));
                }
            }
        }
        None
    }
}
