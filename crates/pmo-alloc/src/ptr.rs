//! Typed persistent pointers: an offset from the heap's base, valid across attaches.
//!
//! The region is attached at the same address every time, so raw pointers stored in it stay
//! valid too; `HeapPtr<T>` is for code that wants a position-independent, checked form (and
//! for tools that read a region mapped elsewhere). Offset 0 is the heap header, never a block,
//! so it doubles as null.

use std::fmt;
use std::marker::PhantomData;

/// An offset into a heap's region, typed by what it points to. `#[repr(transparent)]` over a
/// `u64`, so it can be stored inside persistent objects.
#[repr(transparent)]
pub struct HeapPtr<T> {
    offset: u64,
    _points_to: PhantomData<fn() -> T>,
}

impl<T> HeapPtr<T> {
    /// The null pointer.
    pub const NULL: Self = HeapPtr {
        offset: 0,
        _points_to: PhantomData,
    };

    /// From a raw region offset (not checked here; [`crate::Heap::resolve`] checks).
    pub const fn from_offset(offset: u64) -> Self {
        HeapPtr {
            offset,
            _points_to: PhantomData,
        }
    }

    /// The region offset.
    pub const fn offset(self) -> u64 {
        self.offset
    }

    /// Is this the null pointer?
    pub const fn is_null(self) -> bool {
        self.offset == 0
    }

    /// The same offset typed as `U`.
    pub const fn cast<U>(self) -> HeapPtr<U> {
        HeapPtr {
            offset: self.offset,
            _points_to: PhantomData,
        }
    }
}

impl<T> Clone for HeapPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for HeapPtr<T> {}
impl<T> PartialEq for HeapPtr<T> {
    fn eq(&self, other: &Self) -> bool {
        self.offset == other.offset
    }
}
impl<T> Eq for HeapPtr<T> {}
impl<T> std::hash::Hash for HeapPtr<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.offset.hash(state)
    }
}
impl<T> Default for HeapPtr<T> {
    fn default() -> Self {
        Self::NULL
    }
}
impl<T> fmt::Debug for HeapPtr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HeapPtr({:#x})", self.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_and_cast() {
        let p: HeapPtr<u64> = HeapPtr::from_offset(0x2000);
        assert!(!p.is_null());
        assert!(HeapPtr::<u8>::NULL.is_null());
        assert_eq!(p.cast::<u8>().offset(), 0x2000);
        assert_eq!(std::mem::size_of::<HeapPtr<[u8; 100]>>(), 8);
    }
}
