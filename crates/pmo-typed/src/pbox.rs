//! [`PBox<T>`]: one `T` in its own heap block, owned by the box (nullable: zero is empty).
//!
//! Why unsafe is allowed here: turning the box's checked offset into a reference; the box is
//! the block's only owner (not `Clone`, not `Copy`), so `&self`/`&mut self` borrows of the box
//! are exactly the borrows of the value.
#![allow(unsafe_code)]

use crate::{Ctx, Persistent, Result};
use std::marker::PhantomData;

/// An owned `T` in the persistent heap. The zero value (`PBox::default()`) is empty.
#[repr(C)]
pub struct PBox<T: Persistent> {
    off: u64,
    heap: u64,
    /// Where this header lives (its offset), recorded when it first allocates: 0 unbound.
    home: u64,
    _t: PhantomData<T>,
}

impl<T: Persistent> Default for PBox<T> {
    fn default() -> Self {
        PBox {
            off: 0,
            heap: 0,
            home: 0,
            _t: PhantomData,
        }
    }
}

impl<T: Persistent> std::fmt::Debug for PBox<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PBox({:#x})", self.off)
    }
}

// SAFETY: three u64 (no padding, any bit pattern: an out-of-range offset is refused by `Ctx::ptr`),
// no drop glue, an offset not an address; it owns exactly its block and the value's blocks.
unsafe impl<T: Persistent> Persistent for PBox<T> {
    const LAYOUT: u64 = crate::layout::mix(
        crate::layout::hash_str(crate::layout::SEED, "PBox/2"),
        T::LAYOUT,
    );
    const OWNS_BLOCKS: bool = true;
    const LAYOUT_OK: () = T::LAYOUT_OK;
    fn for_each_block(&self, h: &Ctx, f: &mut dyn FnMut(u64)) -> Result<()> {
        if let Some(v) = self.get(h)? {
            f(self.off);
            v.for_each_block(h, f)?;
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

impl<T: Persistent> PBox<T> {
    /// True when the box holds a value.
    pub fn is_some(&self) -> bool {
        self.off != 0
    }

    fn check(&self, h: &Ctx) -> Result<()> {
        h.check_handle(
            (self as *const Self).cast(),
            std::mem::size_of::<Self>(),
            self.heap,
            self.home,
        )
    }

    /// The value, if any.
    pub fn get<'a>(&'a self, h: &'a Ctx) -> Result<Option<&'a T>> {
        self.check(h)?;
        if self.off == 0 {
            return Ok(None);
        }
        let p = h.ptr::<T>(self.off, 1)?;
        // SAFETY: checked in range and aligned; the box owns the block and is borrowed shared.
        Ok(Some(unsafe { &*p }))
    }

    /// The value, mutably, if any.
    pub fn get_mut<'a>(&'a mut self, h: &'a Ctx) -> Result<Option<&'a mut T>> {
        self.check(h)?;
        h.writable()?;
        if self.off == 0 {
            return Ok(None);
        }
        let p = h.ptr::<T>(self.off, 1)?;
        h.touch(p.cast(), std::mem::size_of::<T>())?;
        // SAFETY: as in `get`; the box is borrowed exclusively and the attach is read-write.
        Ok(Some(unsafe { &mut *p }))
    }

    /// Store `v` (allocating the block on first use; an old value's blocks are freed).
    pub fn set<'a>(&'a mut self, h: &'a Ctx, v: T) -> Result<&'a mut T> {
        #[allow(clippy::let_unit_value)]
        let () = T::LAYOUT_OK;
        self.check(h)?;
        h.writable()?;
        if self.off == 0 {
            let off = h.alloc(std::mem::size_of::<T>(), std::mem::align_of::<T>())?;
            self.home = h.home_of(self)?;
            self.off = off;
            self.heap = h.heap_id();
            h.touch_val(self)?;
        } else if let Some(old) = self.get_mut(h)? {
            old.release(h)?;
        }
        let p = h.ptr::<T>(self.off, 1)?;
        // SAFETY: the box's own block (checked); exclusive borrow; read-write attach. The old
        // value has no drop glue, and its blocks were released above.
        unsafe { p.write(v) };
        h.touch(p.cast(), std::mem::size_of::<T>())?;
        // SAFETY: as above.
        Ok(unsafe { &mut *p })
    }

    /// Free the value's blocks and the box's block; the box is empty afterwards.
    pub fn clear(&mut self, h: &Ctx) -> Result<()> {
        self.check(h)?;
        h.writable()?;
        if let Some(v) = self.get_mut(h)? {
            v.release(h)?;
        } else {
            return Ok(());
        }
        h.free(self.off)?;
        self.off = 0;
        self.heap = 0;
        h.touch_val(self)
    }

    /// Take the value out (the box is empty afterwards). Only for plain `Copy` data: a value
    /// owning blocks would leave the PMO.
    pub fn take(&mut self, h: &Ctx) -> Result<Option<T>>
    where
        T: Copy,
    {
        let v = self.get(h)?.copied();
        self.clear(h)?;
        Ok(v)
    }
}
