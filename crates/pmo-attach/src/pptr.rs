//! Relocatable typed pointers: an offset from the start of a PMO.
//!
//! Raw pointers stored in a PMO stay valid because attach maps it at its recorded stable
//! address. Code that prefers position independence stores a [`PPtr<T>`] instead: 8 bytes, an
//! offset from the PMO's start (0 is null), resolved against an attachment's current address.

use std::marker::PhantomData;

/// An offset pointer to a `T` inside a PMO. `PPtr::NULL` is offset 0.
#[repr(transparent)]
pub struct PPtr<T> {
    offset: u64,
    _t: PhantomData<*const T>,
}

impl<T> Clone for PPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for PPtr<T> {}
impl<T> PartialEq for PPtr<T> {
    fn eq(&self, other: &Self) -> bool {
        self.offset == other.offset
    }
}
impl<T> Eq for PPtr<T> {}
impl<T> std::fmt::Debug for PPtr<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PPtr({:#x})", self.offset)
    }
}

impl<T> PPtr<T> {
    /// The null pointer.
    pub const NULL: PPtr<T> = PPtr {
        offset: 0,
        _t: PhantomData,
    };

    /// A pointer to byte `offset` of the PMO.
    pub const fn from_offset(offset: u64) -> PPtr<T> {
        PPtr {
            offset,
            _t: PhantomData,
        }
    }
    /// The offset.
    pub fn offset(self) -> u64 {
        self.offset
    }
    /// True for null.
    pub fn is_null(self) -> bool {
        self.offset == 0
    }
    /// The pointer to this object in a PMO mapped at `base` with `len` bytes: `None` for null,
    /// out of range or misaligned offsets. Dereferencing it is up to the caller.
    pub fn resolve(self, base: *mut u8, len: usize) -> Option<*mut T> {
        let size = std::mem::size_of::<T>() as u64;
        if self.offset == 0 || self.offset.checked_add(size).is_none_or(|e| e > len as u64) {
            return None;
        }
        let p = base.wrapping_add(self.offset as usize);
        (p as usize)
            .is_multiple_of(std::mem::align_of::<T>())
            .then_some(p.cast())
    }
    /// The offset pointer for `ptr` inside a PMO mapped at `base` with `len` bytes.
    pub fn from_ptr(ptr: *const T, base: *const u8, len: usize) -> Option<PPtr<T>> {
        let off = (ptr as usize).checked_sub(base as usize)?;
        (off > 0 && off + std::mem::size_of::<T>() <= len).then_some(PPtr::from_offset(off as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_checks_bounds_and_alignment() {
        let mut buf = vec![0u64; 64];
        let base = buf.as_mut_ptr().cast::<u8>();
        let len = 64 * 8;
        assert_eq!(PPtr::<u64>::NULL.resolve(base, len), None);
        let p = PPtr::<u64>::from_offset(8);
        assert_eq!(p.resolve(base, len), Some(base.wrapping_add(8).cast()));
        assert_eq!(
            PPtr::<u64>::from_offset(9).resolve(base, len),
            None,
            "misaligned"
        );
        assert_eq!(
            PPtr::<u64>::from_offset(len as u64 - 4).resolve(base, len),
            None,
            "crosses the end"
        );
        let q = PPtr::<u64>::from_ptr(base.wrapping_add(16).cast(), base, len).unwrap();
        assert_eq!(q.offset(), 16);
    }
}
