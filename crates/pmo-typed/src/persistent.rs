//! The [`Persistent`] marker trait and its impls for plain data.
//!
//! Owns: the rule of what may live in a PMO. A type is `Persistent` when its bytes mean the
//! same thing after the program that wrote them is gone: plain data (integers, floats, arrays
//! of them, `#[derive(Persistent)]` structs of them) and the crate's containers, which hold
//! heap offsets, never addresses. Everything else is refused at compile time: references and
//! lifetimes, `Box`, `Vec`, `String`, `Rc`, raw pointers (addresses into DRAM or into this
//! mapping), types with a destructor, and types with invalid bit patterns (`bool`, `char`,
//! enums: a byte altered on the medium must never become undefined behaviour).
//!
//! Why unsafe is allowed here: the trait is `unsafe` to implement (its contract is what the
//! containers rely on), and the impls for primitives and arrays state that they meet it.
#![allow(unsafe_code)]

use crate::{Ctx, Result};

/// A type whose values may live in a PMO. Implement it with `#[derive(Persistent)]`.
///
/// # Safety
/// An implementor guarantees:
/// 1. every bit pattern of `size_of::<Self>()` bytes is a valid `Self` (so all-zero is valid:
///    for the containers it means "empty"), and there are no padding bytes;
/// 2. `Self` has no drop glue;
/// 3. `Self` holds no address: only offsets into the heap it lives in, owned uniquely;
/// 4. the layout is stable (`#[repr(C)]`, `#[repr(transparent)]` or a primitive);
/// 5. `for_each_block` reports exactly the heap blocks the value owns and `release` frees them;
/// 6. `rebind` calls `rebind` on every field (containers record where they live).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot live in a PMO: it is not `Persistent`",
    label = "not `Persistent`",
    note = "only plain data (integers, floats, arrays, #[derive(Persistent)] #[repr(C)] structs) and pmo-typed containers (PBox, PVec, PString, PHashMap, PBTreeMap) may live in a PMO; references, Box, Vec, String, Rc, raw pointers, bool, char, enums and Drop types may not"
)]
pub unsafe trait Persistent: Sized + 'static {
    /// A hash of the type's name, field names and field layouts (checked on the root).
    const LAYOUT: u64;
    /// True if values may own heap blocks (containers, or structs holding them).
    const OWNS_BLOCKS: bool = false;
    /// A compile-time assertion (no padding) evaluated wherever the type enters a PMO.
    const LAYOUT_OK: () = ();
    /// Call `f` with the heap offset of every block this value owns, transitively.
    fn for_each_block(&self, h: &Ctx, f: &mut dyn FnMut(u64)) -> Result<()> {
        let _ = (h, f);
        Ok(())
    }
    /// Free every block this value owns, leaving it empty (its containers empty).
    fn release(&mut self, h: &Ctx) -> Result<()> {
        let _ = h;
        Ok(())
    }
    /// The value was just moved by the container holding it: every container header in it
    /// records its new place. (A header found elsewhere than its record was moved by other
    /// means and is refused: `TypedError::Moved`.)
    fn rebind(&mut self, h: &Ctx) -> Result<()> {
        let _ = h;
        Ok(())
    }
}

/// Layout hashing in `const` context (FNV-1a), for `Persistent::LAYOUT`.
pub mod layout {
    /// The hash's start value.
    pub const SEED: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    /// Fold `s` into `h`.
    pub const fn hash_str(mut h: u64, s: &str) -> u64 {
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            h ^= b[i] as u64;
            h = h.wrapping_mul(PRIME);
            i += 1;
        }
        // A separator so ("ab","c") and ("a","bc") differ.
        h ^= 0xff;
        h.wrapping_mul(PRIME)
    }

    /// Fold `v` into `h`.
    pub const fn mix(h: u64, v: u64) -> u64 {
        let mut h = h;
        let mut i = 0;
        while i < 8 {
            h ^= (v >> (i * 8)) & 0xff;
            h = h.wrapping_mul(PRIME);
            i += 1;
        }
        h
    }
}

macro_rules! plain {
    ($($t:ty),*) => {$(
        // SAFETY: a primitive integer or float: every bit pattern valid, no padding, no drop,
        // no address, fixed layout; it owns no blocks.
        unsafe impl Persistent for $t {
            const LAYOUT: u64 = layout::hash_str(layout::SEED, stringify!($t));
        }
    )*};
}
plain!(u8, u16, u32, u64, u128, i8, i16, i32, i64, i128, f32, f64);

// SAFETY: an array of `Persistent` elements: no padding between elements (size is a multiple of
// alignment), every bit pattern valid elementwise, no drop glue, owned blocks are the elements'.
unsafe impl<T: Persistent, const N: usize> Persistent for [T; N] {
    const LAYOUT: u64 = layout::mix(layout::mix(layout::SEED ^ 0x5b, T::LAYOUT), N as u64);
    const OWNS_BLOCKS: bool = T::OWNS_BLOCKS;
    const LAYOUT_OK: () = T::LAYOUT_OK;
    fn for_each_block(&self, h: &Ctx, f: &mut dyn FnMut(u64)) -> Result<()> {
        if T::OWNS_BLOCKS {
            for x in self {
                x.for_each_block(h, f)?;
            }
        }
        Ok(())
    }
    fn release(&mut self, h: &Ctx) -> Result<()> {
        if T::OWNS_BLOCKS {
            for x in self {
                x.release(h)?;
            }
        }
        Ok(())
    }
    fn rebind(&mut self, h: &Ctx) -> Result<()> {
        if T::OWNS_BLOCKS {
            for x in self {
                x.rebind(h)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(crate::Persistent)]
    #[repr(C)]
    struct A {
        x: u64,
        y: u32,
        z: u32,
    }

    #[derive(crate::Persistent)]
    #[repr(C)]
    struct B {
        x: u64,
        z: u32,
        y: u32,
    }

    #[derive(crate::Persistent)]
    #[repr(C)]
    struct Gen<T: Copy> {
        v: [T; 4],
    }

    #[test]
    fn layout_hash_tells_types_apart() {
        // Same size, different field order or names: different layouts.
        assert_ne!(A::LAYOUT, B::LAYOUT);
        assert_ne!(u32::LAYOUT, i32::LAYOUT);
        assert_ne!(<[u8; 4]>::LAYOUT, <[u8; 5]>::LAYOUT);
        assert_ne!(<Gen<u16>>::LAYOUT, <Gen<u32>>::LAYOUT);
        assert_ne!(layout::hash_str(layout::SEED, "ab"), {
            let h = layout::hash_str(layout::SEED, "a");
            layout::hash_str(h, "b")
        });
        // Plain data owns no blocks; containers do, and so do structs holding them.
        const { assert!(!A::OWNS_BLOCKS) };
        const { assert!(crate::PString::OWNS_BLOCKS) };
        const { assert!(<[crate::PVec<u8>; 2]>::OWNS_BLOCKS) };
    }
}
