//! Metadata protection: keeps the allocator's metadata pages unwritable outside allocator calls.
//!
//! Owns: the choice of mode and the PKRU arithmetic. Three modes:
//! - **MPK** (Intel protection keys): metadata pages are tagged with one key at attach; a
//!   thread's PKRU denies writes to that key except between `Protector::enter` and
//!   `Protector::exit`, which cost one `WRPKRU` each (tens of cycles, no system call). Other
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

// The CPUID decoding lives with the CPUID read in `sys`; its public path stays here.
pub use crate::sys::pku_usable_from_cpuid_ecx;

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
                        Err(HeapError::ProtectionUnavailable(
                            "CPU or kernel lacks protection keys",
                        ))
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
            Protector::Guard => {
                sys::protect(addr, len, Access::ReadWrite).map_err(HeapError::Protect)
            }
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
            Protector::Guard => {
                sys::protect(addr, len, Access::ReadOnly).map_err(HeapError::Protect)
            }
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
                    assert_eq!(
                        pkru_rights(open, other),
                        pkru_rights(LINUX_INIT_PKRU, other)
                    );
                    assert_eq!(
                        pkru_rights(closed, other),
                        pkru_rights(LINUX_INIT_PKRU, other)
                    );
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
    fn detection_agrees_with_the_cpu() {
        // On a machine without PKU (like the project's) Mpk must be refused and Auto fall back.
        if !sys::cpu_has_pku() {
            assert!(!mpk_available());
            assert!(matches!(
                Protector::new(Protection::Mpk),
                Err(HeapError::ProtectionUnavailable(_))
            ));
            assert_eq!(
                Protector::new(Protection::Auto).unwrap().mode(),
                Protection::Off
            );
        } else if mpk_available() {
            assert_eq!(
                Protector::new(Protection::Auto).unwrap().mode(),
                Protection::Mpk
            );
        }
    }
}

/// Pages a [`PageGuard`] tracks one by one before it opens the whole metadata block.
pub(crate) const GUARD_PAGES_MAX: usize = 32;

/// Guard mode, one allocator call: opens the OS pages of one sub-heap's metadata for writing
/// as the call first writes them, and makes them read-only again at [`PageGuard::close`].
///
/// Why per page: `mprotect` costs time in proportion to the resident pages of its range
/// (about 4 µs for a page, hundreds of µs for a few MiB of resident metadata here), and a call
/// writes only a few pages (the sub-heap header, a descriptor, a few unit entries).
/// Invariant: `pages[..count]` are exactly the pages made writable, at most
/// [`GUARD_PAGES_MAX`]; past that the whole block is opened (`whole`).
///
/// The same bookkeeping serves the heap's write observer (`Heap::set_write_observer`): a
/// *recording* guard (`protect == false`) changes no protection and only records which pages
/// the call wrote, for [`PageGuard::for_each_written`].
pub(crate) struct PageGuard {
    meta_addr: usize,
    meta_len: usize,
    pages: [u32; GUARD_PAGES_MAX],
    count: usize,
    whole: bool,
    /// Change page protections (guard mode) or only record the pages (observer only).
    protect: bool,
    error: Option<std::io::Error>,
}

impl PageGuard {
    /// A guard over the metadata block `[meta_addr, meta_addr + meta_len)` (OS-page aligned).
    #[cfg(test)]
    pub(crate) fn new(meta_addr: usize, meta_len: usize) -> Self {
        Self::with_protection(meta_addr, meta_len, true)
    }

    /// A guard that protects pages (`protect`) or only records them.
    pub(crate) fn with_protection(meta_addr: usize, meta_len: usize, protect: bool) -> Self {
        PageGuard {
            meta_addr,
            meta_len,
            pages: [0; GUARD_PAGES_MAX],
            count: 0,
            whole: false,
            protect,
            error: None,
        }
    }

    /// Call `f(offset_in_block, len)` for every page written since the last `close` (the whole
    /// block, once, past [`GUARD_PAGES_MAX`] pages).
    pub(crate) fn for_each_written(&self, mut f: impl FnMut(usize, usize)) {
        let page_bytes = crate::layout::OS_PAGE_BYTES;
        if self.whole {
            f(0, self.meta_len);
        } else {
            for &p in &self.pages[..self.count] {
                f(p as usize * page_bytes, page_bytes);
            }
        }
    }

    /// Make the bytes `[offset, offset + len)` of the block writable. If `mprotect` fails the
    /// error is kept for `close` and the write that follows faults (fail-stop, never a
    /// silent write to unprotected state).
    #[inline]
    pub(crate) fn open(&mut self, offset: usize, len: usize) {
        if self.whole || len == 0 {
            return;
        }
        let page_bytes = crate::layout::OS_PAGE_BYTES;
        let first = offset / page_bytes;
        let last = (offset + len - 1).min(self.meta_len - 1) / page_bytes;
        for page in first..=last {
            if self.pages[..self.count].contains(&(page as u32)) {
                continue;
            }
            if self.count == GUARD_PAGES_MAX {
                if self.protect {
                    if let Err(e) = sys::protect(self.meta_addr, self.meta_len, Access::ReadWrite) {
                        self.error.get_or_insert(e);
                    }
                }
                self.whole = true;
                return;
            }
            if self.protect {
                if let Err(e) = sys::protect(
                    self.meta_addr + page * page_bytes,
                    page_bytes,
                    Access::ReadWrite,
                ) {
                    self.error.get_or_insert(e);
                }
            }
            self.pages[self.count] = page as u32;
            self.count += 1;
        }
    }

    /// Make every opened page read-only again (adjacent pages in one call).
    pub(crate) fn close(&mut self) -> std::io::Result<()> {
        let page_bytes = crate::layout::OS_PAGE_BYTES;
        if !self.protect {
            // Recording only: nothing to re-protect.
        } else if self.whole {
            if let Err(e) = sys::protect(self.meta_addr, self.meta_len, Access::ReadOnly) {
                self.error.get_or_insert(e);
            }
        } else {
            let pages = &mut self.pages[..self.count];
            pages.sort_unstable();
            let mut i = 0;
            while i < pages.len() {
                let mut j = i + 1;
                while j < pages.len() && pages[j] == pages[j - 1] + 1 {
                    j += 1;
                }
                let addr = self.meta_addr + pages[i] as usize * page_bytes;
                if let Err(e) = sys::protect(addr, (j - i) * page_bytes, Access::ReadOnly) {
                    self.error.get_or_insert(e);
                }
                i = j;
            }
        }
        self.count = 0;
        self.whole = false;
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Pages opened so far (tests and diagnostics).
    #[cfg(test)]
    pub(crate) fn opened(&self) -> &[u32] {
        &self.pages[..self.count]
    }
}

#[cfg(test)]
mod guard_tests {
    use super::*;

    #[test]
    fn page_guard_opens_each_page_once_and_closes_them() {
        let len = 64 * 4096;
        let region = sys::map_anonymous(len).unwrap();
        let addr = region.as_ptr() as usize;
        sys::protect(addr, len, Access::ReadOnly).unwrap();
        let mut g = PageGuard::new(addr, len);
        g.open(10, 16);
        g.open(4090, 16); // straddles pages 0 and 1
        g.open(5 * 4096, 544);
        assert_eq!(g.opened(), &[0, 1, 5]);
        for p in 0..40 {
            g.open(p * 4096, 8);
        }
        assert!(
            g.whole,
            "more than GUARD_PAGES_MAX pages opens the whole block"
        );
        g.close().unwrap();
        assert!(g.opened().is_empty());
        sys::protect(addr, len, Access::ReadWrite).unwrap();
        // SAFETY: the mapping is ours and unused now.
        #[allow(unsafe_code)]
        unsafe {
            sys::unmap(region, len)
        };
    }
}
