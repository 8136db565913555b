//! Metadata protection: keeps the allocator's metadata pages unwritable outside allocator calls.
//!
//! Owns: the choice of mode and the PKRU arithmetic. Three modes:
//! - **MPK** (Intel protection keys): metadata pages are tagged with one key at attach; a
//!   thread's PKRU denies writes to that key except between [`Protector::enter`] and
//!   [`Protector::exit`], which cost one `WRPKRU` each (tens of cycles, no system call). Other
//!   threads keep the kernel's default PKRU, which denies them all access to the key.
//! - **Guard** (fallback without PKU): metadata pages are `mprotect`ed read-only; `enter`
//!   makes the one sub-heap's metadata writable and `exit` read-only again (two system calls
//!   per allocator call, under the sub-heap's lock, so threads in other sub-heaps are
//!   unaffected).
//! - **Off**: no page protection; the free-time checks against the metadata still hold.
//!
//! Invariant: `enter`/`exit` pairs nest per thread; in MPK mode only the outermost pair writes
//! PKRU (a thread-local depth counter), in guard mode each pair names its own pages.

use crate::error::{HeapError, Result};
use crate::sys::{self, Access};
use std::cell::Cell;

/// How the heap protects its metadata (chosen at each attach; not stored in the region).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protection {
    /// No page protection.
    #[default]
    Off,
    /// `mprotect` read-only outside allocator calls.
    Guard,
    /// Intel MPK; fails with [`HeapError::ProtectionUnavailable`] where the CPU or kernel lacks it.
    Mpk,
    /// MPK where available, otherwise off (guard mode costs system calls: opt in explicitly).
    Auto,
}

/// PKRU "access disable" bit of a key (shift by `2 * key`).
pub const PKRU_ACCESS_DISABLE: u32 = 1;
/// PKRU "write disable" bit of a key (shift by `2 * key`).
pub const PKRU_WRITE_DISABLE: u32 = 2;
/// Keys a PKRU register describes.
pub const PKEY_COUNT: u32 = 16;

/// PKRU with `key` allowed to read and write, other keys unchanged.
pub const fn pkru_allow_write(pkru: u32, key: u32) -> u32 {
    pkru & !(3 << (2 * key))
}

/// PKRU with `key` readable but not writable, other keys unchanged.
pub const fn pkru_deny_write(pkru: u32, key: u32) -> u32 {
    (pkru & !(3 << (2 * key))) | (PKRU_WRITE_DISABLE << (2 * key))
}

/// `(readable, writable)` for `key` under `pkru`.
pub const fn pkru_rights(pkru: u32, key: u32) -> (bool, bool) {
    let bits = (pkru >> (2 * key)) & 3;
    let readable = bits & PKRU_ACCESS_DISABLE == 0;
    (readable, readable && bits & PKRU_WRITE_DISABLE == 0)
}

/// PKU usable according to CPUID.(EAX=7,ECX=0):ECX: bit 3 (PKU) and bit 4 (OSPKE, the OS set CR4.PKE).
pub const fn pku_usable_from_cpuid_ecx(ecx: u32) -> bool {
    const PKU: u32 = 1 << 3;
    const OSPKE: u32 = 1 << 4;
    ecx & (PKU | OSPKE) == (PKU | OSPKE)
}

/// Is MPK usable here: CPU and OS support it and the kernel hands out a key?
pub fn mpk_available() -> bool {
    if !sys::cpu_has_pku() {
        return false;
    }
    match sys::pkey_alloc_write_disabled() {
        Ok(key) => {
            let _ = sys::pkey_free(key);
            true
        }
        Err(_) => false,
    }
}

thread_local! {
    /// Depth of nested `enter` calls of this thread (MPK mode).
    static MPK_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// The protection of one attached heap.
#[derive(Debug)]
pub(crate) enum Protector {
    Off,
    Guard,
    Mpk { key: u32 },
}

impl Protector {
    /// Resolve `Auto` and check availability.
    pub(crate) fn new(protection: Protection) -> Result<Self> {
        match protection {
            Protection::Off => Ok(Protector::Off),
            Protection::Guard => Ok(Protector::Guard),
            Protection::Mpk | Protection::Auto => {
                if !mpk_available() {
                    return if protection == Protection::Mpk {
                        Err(HeapError::ProtectionUnavailable("CPU or kernel lacks protection keys"))
                    } else {
                        Ok(Protector::Off)
                    };
                }
                let key = sys::pkey_alloc_write_disabled().map_err(HeapError::Protect)?;
                Ok(Protector::Mpk { key })
            }
        }
    }

    /// The mode in force.
    pub(crate) fn mode(&self) -> Protection {
        match self {
            Protector::Off => Protection::Off,
            Protector::Guard => Protection::Guard,
            Protector::Mpk { .. } => Protection::Mpk,
        }
    }

    /// At attach: protect the metadata ranges (read-only header included) now.
    pub(crate) fn arm(&self, header: (usize, usize), meta: &[(usize, usize)]) -> Result<()> {
        match *self {
            Protector::Off => Ok(()),
            Protector::Guard => {
                sys::protect(header.0, header.1, Access::ReadOnly).map_err(HeapError::Protect)?;
                for &(a, l) in meta {
                    sys::protect(a, l, Access::ReadOnly).map_err(HeapError::Protect)?;
                }
                Ok(())
            }
            Protector::Mpk { key } => {
                sys::protect(header.0, header.1, Access::ReadOnly).map_err(HeapError::Protect)?;
                for &(a, l) in meta {
                    sys::pkey_protect(a, l, key).map_err(HeapError::Protect)?;
                }
                Ok(())
            }
        }
    }

    /// At detach: give the pages back read-write with key 0.
    pub(crate) fn disarm(&self, header: (usize, usize), meta: &[(usize, usize)]) {
        match *self {
            Protector::Off => {}
            Protector::Guard => {
                let _ = sys::protect(header.0, header.1, Access::ReadWrite);
                for &(a, l) in meta {
                    let _ = sys::protect(a, l, Access::ReadWrite);
                }
            }
            Protector::Mpk { key } => {
                let _ = sys::protect(header.0, header.1, Access::ReadWrite);
                for &(a, l) in meta {
                    let _ = sys::pkey_protect(a, l, 0);
                }
                let _ = sys::pkey_free(key);
            }
        }
    }

    /// Make `[addr, addr + len)` writable for this thread (the caller holds its lock).
    #[inline]
    pub(crate) fn enter(&self, addr: usize, len: usize) -> Result<()> {
        match *self {
            Protector::Off => Ok(()),
            Protector::Guard => sys::protect(addr, len, Access::ReadWrite).map_err(HeapError::Protect),
            Protector::Mpk { key } => {
                MPK_DEPTH.with(|d| {
                    if d.get() == 0 {
                        // SAFETY: Mpk mode exists only after `mpk_available()` confirmed OSPKE;
                        // the new value changes only `key`'s bits, keeping key 0 accessible.
                        #[allow(unsafe_code)]
                        unsafe {
                            sys::wrpkru(pkru_allow_write(sys::rdpkru(), key))
                        };
                    }
                    d.set(d.get() + 1);
                });
                Ok(())
            }
        }
    }

    /// Undo the matching [`Protector::enter`].
    #[inline]
    pub(crate) fn exit(&self, addr: usize, len: usize) -> Result<()> {
        match *self {
            Protector::Off => Ok(()),
            Protector::Guard => sys::protect(addr, len, Access::ReadOnly).map_err(HeapError::Protect),
            Protector::Mpk { key } => {
                MPK_DEPTH.with(|d| {
                    let depth = d.get().saturating_sub(1);
                    d.set(depth);
                    if depth == 0 {
                        // SAFETY: as in `enter`.
                        #[allow(unsafe_code)]
                        unsafe {
                            sys::wrpkru(pkru_deny_write(sys::rdpkru(), key))
                        };
                    }
                });
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's default PKRU for new threads: every key but 0 access-disabled.
    const LINUX_INIT_PKRU: u32 = 0x5555_5554;

    #[test]
    fn pkru_allow_and_deny_touch_only_their_key() {
        for key in 1..PKEY_COUNT {
            let open = pkru_allow_write(LINUX_INIT_PKRU, key);
            assert_eq!(pkru_rights(open, key), (true, true));
            let closed = pkru_deny_write(open, key);
            assert_eq!(pkru_rights(closed, key), (true, false));
            for other in 0..PKEY_COUNT {
                if other != key {
                    assert_eq!(pkru_rights(open, other), pkru_rights(LINUX_INIT_PKRU, other));
                    assert_eq!(pkru_rights(closed, other), pkru_rights(LINUX_INIT_PKRU, other));
                }
            }
            // Key 0 (ordinary memory) stays fully accessible.
            assert_eq!(pkru_rights(open, 0), (true, true));
            assert_eq!(pkru_rights(closed, 0), (true, true));
            assert_eq!(pkru_allow_write(closed, key), open);
        }
    }

    #[test]
    fn pkru_known_values() {
        assert_eq!(pkru_allow_write(LINUX_INIT_PKRU, 1), 0x5555_5550);
        assert_eq!(pkru_deny_write(0, 1), 0b1000);
        assert_eq!(pkru_deny_write(0, 15), 0x8000_0000);
        assert_eq!(pkru_rights(LINUX_INIT_PKRU, 3), (false, false));
    }

    #[test]
    fn cpuid_detection_needs_both_bits() {
        assert!(!pku_usable_from_cpuid_ecx(0));
        assert!(!pku_usable_from_cpuid_ecx(1 << 3), "PKU without OSPKE is not usable");
        assert!(!pku_usable_from_cpuid_ecx(1 << 4));
        assert!(pku_usable_from_cpuid_ecx((1 << 3) | (1 << 4) | 0xFFFF_0000));
    }

    #[test]
    fn detection_agrees_with_the_cpu() {
        // On a machine without PKU (like the project's) Mpk must be refused and Auto fall back.
        if !sys::cpu_has_pku() {
            assert!(!mpk_available());
            assert!(matches!(Protector::new(Protection::Mpk), Err(HeapError::ProtectionUnavailable(_))));
            assert_eq!(Protector::new(Protection::Auto).unwrap().mode(), Protection::Off);
        } else if mpk_available() {
            assert_eq!(Protector::new(Protection::Auto).unwrap().mode(), Protection::Mpk);
        }
    }
}
