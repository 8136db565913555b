//! The mappings of resident views kept for reuse after their view is dropped (issue 29's
//! "reuse the mapping"): a small PMO attached, detached and attached again in one process pays
//! its `mmap`s, `madvise`s and first-touch page faults once, not per session; a view of another
//! PMO of the same size takes a spare too, moved to its stable address (`mremap`: its pages go
//! with it, none is allocated or zeroed again; the file store's files).
//!
//! Owns: every [`Mem`] not in use by a view, in a process-wide list bounded by
//! [`spare_bytes`] (least recently returned evicted first, by `munmap`). A `Mem` is returned
//! here only **zeroed** (module `resident` zeroes the plaintext and the twin before it calls
//! [`put`]): nothing of a detached PMO is readable in a spare mapping.
//!
//! Invariants: a `Mem` is owned by exactly one of a resident view or this list; the list holds
//! only the current process's mappings (a fork child inherits none of them: `MADV_DONTFORK`, and
//! entries of another pid are forgotten, never unmapped); a spare range overlapping a range a
//! new view must take at a fixed address is unmapped first ([`evict_overlapping`]), so the
//! cache never makes a stable address look taken.
#![allow(unsafe_code)] // unmapping and moving spare mappings.

use std::sync::Mutex;

use super::sys;

/// Default bound of the bytes of spare mappings (view and twin or alias) a process keeps:
/// 64 MiB, 1000 spare 16 KiB PMOs with their twins. `PMO_VIEW_SPARE_BYTES` sets it; 0 unmaps
/// every resident view at its drop.
pub(crate) const DEFAULT_SPARE_BYTES: usize = 64 << 20;

/// The mappings of one resident view: the application's range at `base` and, at `aux`, the
/// twin (a writable view compared with its twin: the last committed contents of each page) or
/// the writable alias of a read-only view (the memfd mapped again: fills and zeroing go
/// through it); `aux` is 0 for a writable view with declared tracking, which needs no twin.
pub(crate) struct Mem {
    pub(crate) base: usize,
    pub(crate) len: usize,
    pub(crate) writable: bool,
    pub(crate) aux: usize,
    pub(crate) pid: u32,
}

impl Mem {
    /// Bytes mapped: the view, and its twin or alias if it has one.
    fn bytes(&self) -> usize {
        if self.aux == 0 {
            self.len
        } else {
            2 * self.len
        }
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        if self.pid != crate::lock::pid() {
            // A fork child's copy: the mappings were never inherited (`MADV_DONTFORK`) and the
            // ranges may hold the child's own by now.
            return;
        }
        // SAFETY: the mappings are this `Mem`'s alone (owned by one view or by the list) and
        // nothing references them any more: the view that used them is gone.
        unsafe {
            sys::unmap(self.base, self.len);
            if self.aux != 0 {
                sys::unmap(self.aux, self.len);
            }
        }
    }
}

struct List {
    pid: u32,
    /// Oldest first.
    mems: Vec<Mem>,
    bytes: usize,
}

static LIST: Mutex<List> = Mutex::new(List {
    pid: 0,
    mems: Vec::new(),
    bytes: 0,
});

fn list() -> std::sync::MutexGuard<'static, List> {
    let mut l = LIST.lock().unwrap_or_else(|e| e.into_inner());
    let pid = crate::lock::pid();
    if l.pid != pid {
        // A fork child: the parent's spares are not mapped here (their drops see the pid and
        // unmap nothing).
        l.mems.clear();
        l.bytes = 0;
        l.pid = pid;
    }
    l
}

/// The bound of spare bytes: `PMO_VIEW_SPARE_BYTES` if set to a number, else
/// [`DEFAULT_SPARE_BYTES`].
pub(crate) fn spare_bytes() -> usize {
    static CACHED: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CACHED.get_or_init(|| {
        std::env::var("PMO_VIEW_SPARE_BYTES")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(DEFAULT_SPARE_BYTES)
    })
}

/// Take the spare mapping at exactly `base..base + len` with the same writability and, if
/// `aux`, a twin or alias (else none), if kept.
pub(crate) fn take_at(base: usize, len: usize, writable: bool, aux: bool) -> Option<Mem> {
    let mut l = list();
    let i = l.mems.iter().rposition(|m| {
        m.base == base && m.len == len && m.writable == writable && (m.aux != 0) == aux
    })?;
    let m = l.mems.remove(i);
    l.bytes -= m.bytes();
    Some(m)
}

/// Views smaller than this map anew rather than move a spare: a move's two system calls and
/// its TLB shootdown (the old range leaves every thread's TLB) cost more than populating a few
/// fresh pages. Filebench varmail (16 KiB files) ran 20-25% slower when its 4-page views
/// moved spares; with this bar it is even and fileserver (files up to 256 KiB) 7-13% faster
/// (`docs/results.md`, issue 29, fourth pass).
const MOVE_MIN_BYTES: usize = 16 * 4096;

/// A spare mapping of the shape [`take_at`] asks for, kept at another address, moved to
/// `base..base + len` (its pages go with it: nothing is allocated, zeroed or faulted in, where a
/// new mapping populates every page), for views of at least [`MOVE_MIN_BYTES`]. The range is
/// reserved first (`MAP_FIXED_NOREPLACE`), so nothing mapped there is ever replaced. `None` when no spare fits or the range is taken: the
/// caller maps anew (which unmaps spares in its way, or reports the address in use).
pub(crate) fn take_moved(base: usize, len: usize, writable: bool, aux: bool) -> Option<Mem> {
    if len < MOVE_MIN_BYTES {
        return None;
    }
    let mut m = {
        let mut l = list();
        // The oldest such spare: the next to be unmapped anyway, and the least likely to be
        // taken again at its own range (a recent spare is a PMO this process may attach again,
        // whose own take costs no system call at all).
        let i = l
            .mems
            .iter()
            .position(|m| m.len == len && m.writable == writable && (m.aux != 0) == aux)?;
        let m = l.mems.remove(i);
        l.bytes -= m.bytes();
        m
    };
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    if sys::map_at(base, len, libc::PROT_NONE, flags, -1, 0, true).is_err() {
        put(m);
        return None;
    }
    // SAFETY: `m.base..+len` is the spare's own mapping, which nothing references (the list
    // held it), and `base..+len` the reservation just made; the spare's pages are zero.
    match unsafe { sys::move_mapping(m.base, len, base) } {
        Ok(()) => {
            m.base = base;
            Some(m)
        }
        Err(_) => {
            // SAFETY: the reservation just made, ours alone.
            unsafe { sys::unmap(base, len) };
            put(m);
            None
        }
    }
}

/// Unmap the spare mappings overlapping `addr..addr + len` (a view about to be mapped there);
/// whether there were any.
pub(crate) fn evict_overlapping(addr: usize, len: usize) -> bool {
    let gone: Vec<Mem> = {
        let mut l = list();
        let (gone, kept): (Vec<Mem>, Vec<Mem>) = std::mem::take(&mut l.mems)
            .into_iter()
            .partition(|m| m.base < addr + len && addr < m.base + m.len);
        l.mems = kept;
        l.bytes -= gone.iter().map(Mem::bytes).sum::<usize>();
        gone
    };
    let any = !gone.is_empty();
    drop(gone);
    any
}

/// Keep a zeroed `Mem` for reuse (or unmap it, and the oldest spares, beyond the bound).
pub(crate) fn put(mem: Mem) {
    let bound = spare_bytes();
    if mem.pid != crate::lock::pid() || mem.bytes() > bound {
        return;
    }
    let gone: Vec<Mem> = {
        let mut l = list();
        let mut gone = Vec::new();
        while l.bytes + mem.bytes() > bound && !l.mems.is_empty() {
            let m = l.mems.remove(0);
            l.bytes -= m.bytes();
            gone.push(m);
        }
        l.bytes += mem.bytes();
        l.mems.push(mem);
        gone
    };
    // Unmapped outside the lock.
    drop(gone);
}

/// Unmap every spare mapping of the process (tests; a program that wants the memory back).
pub fn release_all() {
    let gone = {
        let mut l = list();
        l.bytes = 0;
        std::mem::take(&mut l.mems)
    };
    drop(gone);
}

/// Bytes of spare mappings kept now (view and twin or alias).
pub fn kept_bytes() -> usize {
    list().bytes
}

/// Whether a spare mapping starting at `addr` is kept now (tests, diagnostics).
pub fn kept_at(addr: usize) -> bool {
    list().mems.iter().any(|m| m.base == addr)
}
