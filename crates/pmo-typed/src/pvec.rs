//! [`PVec<T>`] (a growable array in one heap block) and [`PString`] (UTF-8 bytes in a PVec).
//!
//! Why unsafe is allowed here: moving elements inside the vector's own buffer (`ptr::copy`)
//! and writing new elements; every offset is resolved through `Ctx`'s checked accessors and
//! the vector is the buffer's only owner.
#![allow(unsafe_code)]

use crate::{Ctx, Persistent, Result, TypedError};
use std::marker::PhantomData;

/// A growable array of `T` in the persistent heap. The zero value is empty.
#[repr(C)]
pub struct PVec<T: Persistent> {
    off: u64,
    len: u64,
    cap: u64,
    heap: u64,
    /// Where this header lives (its offset), recorded when it first allocates: 0 unbound.
    home: u64,
    _t: PhantomData<T>,
}

impl<T: Persistent> Default for PVec<T> {
    fn default() -> Self {
        PVec {
            off: 0,
            len: 0,
            cap: 0,
            heap: 0,
            home: 0,
            _t: PhantomData,
        }
    }
}

impl<T: Persistent> std::fmt::Debug for PVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PVec({:#x}, len {}, cap {})",
            self.off, self.len, self.cap
        )
    }
}

// SAFETY: five u64 (no padding; any bit pattern: an inconsistent one is refused as `Corrupt`),
// no drop glue, offsets only; it owns its buffer and its elements' blocks.
unsafe impl<T: Persistent> Persistent for PVec<T> {
    const LAYOUT: u64 = crate::layout::mix(
        crate::layout::hash_str(crate::layout::SEED, "PVec/2"),
        T::LAYOUT,
    );
    const OWNS_BLOCKS: bool = true;
    const LAYOUT_OK: () = T::LAYOUT_OK;
    fn for_each_block(&self, h: &Ctx, f: &mut dyn FnMut(u64)) -> Result<()> {
        let items = self.as_slice(h)?;
        if self.off != 0 {
            f(self.off);
        }
        if T::OWNS_BLOCKS {
            for x in items {
                x.for_each_block(h, f)?;
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

impl<T: Persistent> PVec<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Elements the buffer holds without growing.
    pub fn capacity(&self) -> usize {
        self.cap as usize
    }

    /// Checks: the handle lives in `h`'s mapping, belongs to its heap, and is consistent.
    #[inline]
    fn check(&self, h: &Ctx) -> Result<()> {
        h.check_handle(
            (self as *const Self).cast(),
            std::mem::size_of::<Self>(),
            self.heap,
            self.home,
        )?;
        if self.len > self.cap || (self.off == 0) != (self.cap == 0) {
            return Err(TypedError::Corrupt(
                "vector length, capacity and buffer disagree",
            ));
        }
        Ok(())
    }

    /// The elements.
    #[inline]
    pub fn as_slice<'a>(&'a self, h: &'a Ctx) -> Result<&'a [T]> {
        self.check(h)?;
        if self.cap == 0 {
            return Ok(&[]);
        }
        // The whole buffer must be in range, not only the live part.
        h.ptr::<T>(self.off, self.cap as usize)?;
        // SAFETY: the vector owns its buffer and is borrowed shared for 'a.
        unsafe { h.slice(self.off, self.len as usize) }
    }

    /// The elements, mutably.
    pub fn as_mut_slice<'a>(&'a mut self, h: &'a Ctx) -> Result<&'a mut [T]> {
        self.check(h)?;
        h.writable()?;
        if self.cap == 0 {
            return Ok(&mut []);
        }
        h.ptr::<T>(self.off, self.cap as usize)?;
        // SAFETY: the vector owns its buffer and is borrowed exclusively for 'a.
        let s = unsafe { h.slice_mut::<T>(self.off, self.len as usize) }?;
        h.touch(s.as_ptr().cast(), std::mem::size_of_val(s))?;
        Ok(s)
    }

    /// Element `i`.
    #[inline]
    pub fn get<'a>(&'a self, h: &'a Ctx, i: usize) -> Result<Option<&'a T>> {
        Ok(self.as_slice(h)?.get(i))
    }

    /// Element `i`, mutably.
    #[inline]
    pub fn get_mut<'a>(&'a mut self, h: &'a Ctx, i: usize) -> Result<Option<&'a mut T>> {
        self.check(h)?;
        if i >= self.len as usize {
            return Ok(None);
        }
        h.writable()?;
        let p = h.ptr::<T>(self.off, self.cap as usize)?;
        // SAFETY: `i < len <= cap`, the buffer is in range; exclusive borrow of the owner.
        let e = unsafe { &mut *p.add(i) };
        h.touch_val(e)?;
        Ok(Some(e))
    }

    /// Make room for `extra` more elements.
    pub fn reserve(&mut self, h: &Ctx, extra: usize) -> Result<()> {
        #[allow(clippy::let_unit_value)]
        let () = T::LAYOUT_OK;
        self.check(h)?;
        h.writable()?;
        let need = (self.len as usize)
            .checked_add(extra)
            .ok_or_else(|| TypedError::CapacityOverflow)?;
        if need <= self.cap as usize {
            return Ok(());
        }
        let cap = need.max(self.cap as usize * 2).max(4);
        let bytes = cap
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| TypedError::CapacityOverflow)?;
        let align = std::mem::align_of::<T>();
        let home = h.home_of(self)?;
        let off = if self.off == 0 {
            h.alloc(bytes, align)?
        } else {
            h.realloc(self.off, bytes, align)?
        };
        let moved = off != self.off && self.len > 0;
        self.off = off;
        self.cap = cap as u64;
        self.heap = h.heap_id();
        self.home = home;
        h.touch_val(self)?;
        if moved {
            let p = h.ptr::<T>(self.off, self.cap as usize)?;
            // SAFETY: the `len` elements realloc just moved into the owned buffer.
            unsafe { h.rebind_moved(p, self.len as usize) }?;
        }
        Ok(())
    }

    /// Append `v`.
    pub fn push(&mut self, h: &Ctx, v: T) -> Result<()> {
        self.reserve(h, 1)?;
        let p = h.ptr::<T>(self.off, self.cap as usize)?;
        // SAFETY: `len < cap` after reserve; the slot is inside the owned buffer.
        unsafe {
            let slot = p.add(self.len as usize);
            slot.write(v);
            h.touch(slot.cast(), std::mem::size_of::<T>())?;
        }
        self.len += 1;
        h.touch_val(self)
    }

    /// Insert `v` at `i`, shifting the rest right.
    pub fn insert(&mut self, h: &Ctx, i: usize, v: T) -> Result<()> {
        if i > self.len as usize {
            return Err(TypedError::OutOfBounds {
                index: i as u64,
                len: self.len,
            });
        }
        self.reserve(h, 1)?;
        let p = h.ptr::<T>(self.off, self.cap as usize)?;
        let n = self.len as usize;
        // SAFETY: `n < cap`; both ranges lie inside the owned buffer; `copy` handles overlap.
        unsafe {
            std::ptr::copy(p.add(i), p.add(i + 1), n - i);
            p.add(i).write(v);
            h.touch(p.add(i).cast(), (n + 1 - i) * std::mem::size_of::<T>())?;
            h.rebind_moved(p.add(i + 1), n - i)?;
        }
        self.len += 1;
        h.touch_val(self)
    }

    /// Remove the last element and return it (plain `Copy` data only; see [`PVec::truncate`]).
    pub fn pop(&mut self, h: &Ctx) -> Result<Option<T>>
    where
        T: Copy,
    {
        let Some(&v) = self.as_slice(h)?.last() else {
            return Ok(None);
        };
        h.writable()?;
        self.len -= 1;
        h.touch_val(self)?;
        Ok(Some(v))
    }

    /// Remove element `i` (freeing what it owns), shifting the rest left.
    pub fn delete(&mut self, h: &Ctx, i: usize) -> Result<()> {
        let n = self.len as usize;
        let Some(e) = self.get_mut(h, i)? else {
            return Err(TypedError::OutOfBounds {
                index: i as u64,
                len: n as u64,
            });
        };
        e.release(h)?;
        let p = h.ptr::<T>(self.off, self.cap as usize)?;
        // SAFETY: `i < n <= cap`, ranges inside the owned buffer; the removed element's blocks
        // were released and it has no drop glue, so overwriting it is its end.
        unsafe {
            std::ptr::copy(p.add(i + 1), p.add(i), n - i - 1);
            h.touch(p.add(i).cast(), (n - i) * std::mem::size_of::<T>())?;
            h.rebind_moved(p.add(i), n - i - 1)?;
        }
        self.len -= 1;
        h.touch_val(self)
    }

    /// Remove element `i` and return it (plain `Copy` data only).
    pub fn remove(&mut self, h: &Ctx, i: usize) -> Result<T>
    where
        T: Copy,
    {
        let v = *self.get(h, i)?.ok_or_else(|| TypedError::OutOfBounds {
            index: i as u64,
            len: self.len,
        })?;
        self.delete(h, i)?;
        Ok(v)
    }

    /// Keep the first `n` elements, freeing what the others own.
    pub fn truncate(&mut self, h: &Ctx, n: usize) -> Result<()> {
        if n >= self.len as usize {
            return self.check(h);
        }
        let s = self.as_mut_slice(h)?;
        if T::OWNS_BLOCKS {
            for e in &mut s[n..] {
                e.release(h)?;
            }
        }
        self.len = n as u64;
        h.touch_val(self)
    }

    /// Remove every element and free the buffer.
    pub fn clear(&mut self, h: &Ctx) -> Result<()> {
        self.truncate(h, 0)?;
        if self.off != 0 {
            h.writable()?;
            h.free(self.off)?;
        }
        *self = PVec::default();
        h.touch_val(self)
    }

    /// Append copies of `items`.
    pub fn extend_from_slice(&mut self, h: &Ctx, items: &[T]) -> Result<()>
    where
        T: Copy,
    {
        self.reserve(h, items.len())?;
        if items.is_empty() {
            return Ok(());
        }
        let p = h.ptr::<T>(self.off, self.cap as usize)?;
        // SAFETY: `len + items.len() <= cap` after reserve; `items` is DRAM or another block
        // (a shared borrow cannot alias our exclusively borrowed buffer).
        unsafe {
            let dst = p.add(self.len as usize);
            std::ptr::copy_nonoverlapping(items.as_ptr(), dst, items.len());
            h.touch(dst.cast(), std::mem::size_of_val(items))?;
        }
        self.len += items.len() as u64;
        h.touch_val(self)
    }

    /// Replace the contents with copies of `items`; if the heap is out of space the vector is
    /// left unchanged (room is made before anything is dropped).
    pub fn set_from_slice(&mut self, h: &Ctx, items: &[T]) -> Result<()>
    where
        T: Copy,
    {
        self.reserve(h, items.len().saturating_sub(self.len as usize))?;
        self.truncate(h, 0)?;
        self.extend_from_slice(h, items)
    }

    /// Iterate over the elements.
    pub fn iter<'a>(&'a self, h: &'a Ctx) -> Result<std::slice::Iter<'a, T>> {
        Ok(self.as_slice(h)?.iter())
    }
}

/// A UTF-8 string in the persistent heap. The zero value is the empty string.
#[repr(transparent)]
#[derive(Default, Debug)]
pub struct PString {
    bytes: PVec<u8>,
}

// SAFETY: a PVec<u8> (transparent): see PVec's impl; UTF-8 validity is checked on every read,
// never assumed.
unsafe impl Persistent for PString {
    const LAYOUT: u64 = crate::layout::hash_str(crate::layout::SEED, "PString/2");
    const OWNS_BLOCKS: bool = true;
    fn for_each_block(&self, h: &Ctx, f: &mut dyn FnMut(u64)) -> Result<()> {
        self.bytes.for_each_block(h, f)
    }
    fn release(&mut self, h: &Ctx) -> Result<()> {
        self.bytes.clear(h)
    }
    fn rebind(&mut self, h: &Ctx) -> Result<()> {
        self.bytes.rebind(h)
    }
}

impl PString {
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
    /// The string (its bytes are checked to be UTF-8: `Utf8` error otherwise).
    pub fn as_str<'a>(&'a self, h: &'a Ctx) -> Result<&'a str> {
        Ok(std::str::from_utf8(self.bytes.as_slice(h)?)?)
    }
    /// Replace the contents with `s` (reusing the buffer when it fits). If the heap is out of
    /// space the string is left unchanged.
    pub fn set(&mut self, h: &Ctx, s: &str) -> Result<()> {
        self.bytes.set_from_slice(h, s.as_bytes())
    }
    /// Append `s`.
    pub fn push_str(&mut self, h: &Ctx, s: &str) -> Result<()> {
        self.bytes.extend_from_slice(h, s.as_bytes())
    }
    /// Empty the string and free its buffer.
    pub fn clear(&mut self, h: &Ctx) -> Result<()> {
        self.bytes.clear(h)
    }
}
