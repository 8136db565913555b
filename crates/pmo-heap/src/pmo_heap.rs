//! [`PmoHeap`]: a pmo-alloc [`Heap`] formatted inside a PMO attached read-write from a pool.
//!
//! Owns: the pairing of one [`Attachment`] (the mapping, the attach lock) with the [`Heap`]
//! laid over it, and the rules that make that pairing sound:
//! - the heap is dropped before the attachment (field order), so the heap never outlives the
//!   mapping its pointers point into;
//! - the region is written only by the heap and by user code inside blocks the heap handed
//!   out; the attachment itself (whose `write_at` could write anywhere) is reachable only
//!   through the `unsafe` [`PmoHeap::attachment`];
//! - [`PmoHeap::psync`] runs the store's psync under [`Heap::quiesce`], so the committed
//!   image never holds a half-done allocator call. Shadow paging makes that image atomic:
//!   "allocate, link, psync" needs no allocator log (`docs/heap.md`, `tests/crash.rs`);
//! - page-protecting metadata (guard mode, MPK) is refused on a mapping whose fault mechanism
//!   manages page protections itself (sigsegv), see [`effective_protection`];
//! - on an attachment with declared dirty tracking (`DirtyTracking::Declared`, PMDK's
//!   `tx_add_range` contract: psync commits only declared pages) the heap declares every page
//!   it writes itself (metadata, root, `realloc`'s copy) through its write observer, and the
//!   user declares what they write into blocks ([`PmoHeap::declare`]). Fault and scan tracking
//!   find every write by themselves; `declare` is then a no-op.
//!
//! Callers: applications, the C API (`pmo_p_malloc` and friends), `pmo check` (through
//! [`crate::check_pmo`]).
//!
//! Why unsafe is allowed here: `Heap::format`/`Heap::open_with` take a raw region (the
//! attachment's mapping), and [`PmoHeap::attachment`] hands out the attachment, whose safe
//! `write_at` could otherwise race with the heap's metadata writes.
#![allow(unsafe_code)]

use crate::error::{PmoHeapError, Result};
use pmo_alloc::{Heap, HeapOptions, HeapPtr, Protection};
use pmo_os::view::{DirtyTracking, Mechanism, ViewStats};
use pmo_store::{AttachOptions, Attachment, CommitStats, Perm, Pool, StoreError};
use std::ops::Deref;
use std::sync::Arc;

/// How [`PmoHeap::open_with`] / [`PmoHeap::create_with`] attach and protect.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenOptions {
    /// Metadata protection for this attach (not stored in the PMO).
    pub protection: Protection,
    /// How the store attaches the PMO (wait, relocation, fault mechanism, populate).
    pub attach: AttachOptions,
}

/// The protection a heap gets on a mapping served by `mechanism`, or the reason it cannot.
///
/// Guard mode `mprotect`s metadata pages read-only and back; MPK tags them with
/// `pkey_mprotect`. The sigsegv mechanism keeps unfilled pages `PROT_NONE` and opens a page
/// for writing only in its fault handler, where it records the page as dirty: a heap that
/// changed protections there would expose unfilled pages and let writes escape dirty tracking
/// (lost at psync). The userfaultfd mechanism keeps one mapping whose protections it never
/// changes, tracking writes with userfaultfd write-protection, which the kernel keeps across
/// `mprotect` (a page write-protected by userfaultfd does not become writable when the VMA
/// does): the combination works and `tests/guard.rs` checks it survives psync and re-attach.
/// `Auto` on sigsegv falls back to `Off` (it is best effort by definition).
pub fn effective_protection(requested: Protection, mechanism: Mechanism) -> Result<Protection> {
    match (requested, mechanism) {
        (Protection::Off, _) => Ok(Protection::Off),
        (p, Mechanism::Userfaultfd) => Ok(p),
        (Protection::Auto, Mechanism::Sigsegv) => Ok(Protection::Off),
        (Protection::Guard | Protection::Mpk, Mechanism::Sigsegv) => {
            Err(PmoHeapError::GuardIncompatible {
                mechanism: mechanism.name(),
            })
        }
    }
}

/// A persistent heap living in a PMO, attached read-write.
///
/// Derefs to [`Heap`] for `alloc`, `free`, `realloc`, `usable_size`, `set_root`, `root`,
/// `allocations`, `check`, typed pointers (`alloc_typed`, `resolve`, `root_ptr`). Blocks are
/// raw memory in the mapping: reading and writing them is the caller's `unsafe` business, as
/// with `malloc`. Nothing is durable until [`PmoHeap::psync`]; [`PmoHeap::detach`] (or drop)
/// discards what was not psynced, exactly as a crash would.
pub struct PmoHeap {
    // Field order matters: the heap (which may hold page protections) goes before the mapping.
    heap: Heap,
    /// Shared with the heap's write observer under declared tracking (dropped with the heap).
    attachment: Arc<Attachment>,
}

impl PmoHeap {
    /// Create PMO `name` of `size` bytes in `pool`, format a heap in it and psync, so the
    /// empty heap is durable. On any failure after `pcreate` the PMO is destroyed again.
    pub fn create(
        pool: &Pool,
        name: &str,
        size: u64,
        key: &[u8],
        opts: &HeapOptions,
    ) -> Result<PmoHeap> {
        Self::create_with(pool, name, size, key, opts, AttachOptions::default())
    }

    /// [`PmoHeap::create`] with attach options (`opts.protection` is the heap's protection).
    pub fn create_with(
        pool: &Pool,
        name: &str,
        size: u64,
        key: &[u8],
        opts: &HeapOptions,
        attach: AttachOptions,
    ) -> Result<PmoHeap> {
        // A heap created for declared dirty tracking (`pmo-typed`'s default) says which bytes
        // its psyncs change: a sub-page commit log makes its small psyncs one record each
        // (`docs/commit.md`, "The sub-page commit log"; `PMO_LOG=0`: none). Other trackings
        // never write records: no log area.
        if attach.tracking.or_else(DirtyTracking::from_env) == Some(DirtyTracking::Declared) {
            pool.pcreate_logged(name, size, key, None)?;
        } else {
            pool.pcreate(name, size, key)?;
        }
        let made = pool
            .attach_with(name, Perm::Write, key, attach)
            .map_err(PmoHeapError::from)
            .and_then(|a| Self::format_attached(a, opts))
            .and_then(|h| h.psync().map(|_| h));
        match made {
            Ok(h) => Ok(h),
            Err(e) => {
                // The half-made PMO is detached by now (dropped); do not leave it behind.
                let _ = pool.pdestroy(name, key);
                Err(e)
            }
        }
    }

    /// Open the heap in PMO `name`: attach read-write at its stable address, validate the
    /// heap's header, root and sub-heap headers. No protection.
    pub fn open(pool: &Pool, name: &str, key: &[u8]) -> Result<PmoHeap> {
        Self::open_with(pool, name, key, &OpenOptions::default())
    }

    /// [`PmoHeap::open`] with protection and attach options.
    pub fn open_with(pool: &Pool, name: &str, key: &[u8], opts: &OpenOptions) -> Result<PmoHeap> {
        let a = pool.attach_with(name, Perm::Write, key, opts.attach)?;
        Self::open_attached(a, opts.protection)
    }

    /// Open the heap in PMO `name` if it exists, else create it (`size`, `opts`). Another
    /// process creating it at the same moment is not an error: this one then opens it.
    pub fn open_or_create(
        pool: &Pool,
        name: &str,
        size: u64,
        key: &[u8],
        opts: &HeapOptions,
    ) -> Result<PmoHeap> {
        let open = OpenOptions {
            protection: opts.protection,
            attach: AttachOptions::default(),
        };
        if pool.exists(name)? {
            return Self::open_with(pool, name, key, &open);
        }
        match Self::create(pool, name, size, key, opts) {
            Err(PmoHeapError::Store(StoreError::Exists(_))) => {
                Self::open_with(pool, name, key, &open)
            }
            r => r,
        }
    }

    /// Format a new, empty heap over an attachment (erasing the PMO's contents in the mapping;
    /// durable at the next [`PmoHeap::psync`]).
    pub fn format_attached(attachment: Attachment, opts: &HeapOptions) -> Result<PmoHeap> {
        let mut opts = *opts;
        opts.protection = Self::usable(&attachment, opts.protection)?;
        let attachment = Arc::new(attachment);
        // SAFETY: the attachment maps `len` bytes at `addr` (page aligned) read-write and keeps
        // them mapped until it is dropped, which happens after the heap (field order of
        // `PmoHeap`). The attachment is moved into the PmoHeap and reachable afterwards only
        // through the unsafe `attachment()`, so nothing else writes the region but the heap
        // and user code inside its blocks; `psync` runs under `quiesce`.
        let heap = unsafe { Heap::format(attachment.addr(), attachment.len(), &opts) }?;
        // Format wrote the header, the root page and every sub-heap's metadata.
        attachment.declare(0, heap.geometry().data_offset as usize)?;
        Ok(Self::assemble(heap, attachment))
    }

    /// Open the heap in an attachment.
    pub fn open_attached(attachment: Attachment, protection: Protection) -> Result<PmoHeap> {
        let protection = Self::usable(&attachment, protection)?;
        let attachment = Arc::new(attachment);
        // SAFETY: as in `format_attached`. The PMO is mapped at its stable address unless the
        // caller asked the store to relocate it (then raw pointers stored inside do not point
        // into it, which the heap itself never relies on: it keeps offsets).
        let heap = unsafe { Heap::open_with(attachment.addr(), attachment.len(), protection) }?;
        Ok(Self::assemble(heap, attachment))
    }

    /// Pair a heap with its attachment; under declared tracking, the heap declares its writes.
    fn assemble(mut heap: Heap, attachment: Arc<Attachment>) -> PmoHeap {
        if attachment.dirty_tracking() == DirtyTracking::Declared {
            let a = Arc::clone(&attachment);
            heap.set_write_observer(Some(Arc::new(move |off, len| a.declare(off, len).is_ok())));
        }
        PmoHeap { heap, attachment }
    }

    fn usable(attachment: &Attachment, protection: Protection) -> Result<Protection> {
        if attachment.perm() != Perm::Write {
            return Err(StoreError::ReadOnly(attachment.name().into()).into());
        }
        effective_protection(protection, attachment.mechanism())
    }

    /// The heap (also reachable through `Deref`).
    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    /// `psync`: make every change since the previous psync durable, atomically: user data and
    /// allocator metadata together. Allocator calls from other threads wait while it runs;
    /// user writes into blocks racing with it land in this psync or the next.
    pub fn psync(&self) -> Result<CommitStats> {
        let _quiet = self.heap.quiesce();
        Ok(self.attachment.psync()?)
    }

    /// Detach: drop the heap, unmap the PMO and release the attach lock. Changes since the last
    /// psync are discarded.
    pub fn detach(self) -> Result<()> {
        let PmoHeap { heap, attachment } = self;
        // The heap holds the only other reference (its write observer): after it, ours is
        // the last one.
        drop(heap);
        match Arc::try_unwrap(attachment) {
            Ok(a) => Ok(a.detach()?),
            // Unreachable by construction; dropping the last reference detaches anyway.
            Err(_shared) => Ok(()),
        }
    }

    /// Declare that `len` bytes at `ptr` (inside a block) were written, so the next psync
    /// commits them. Needed only when the attachment uses declared dirty tracking
    /// ([`PmoHeap::dirty_tracking`]); a no-op with fault or scan tracking, which find writes by
    /// themselves. The heap declares its own writes.
    pub fn declare(&self, ptr: *const u8, len: usize) -> Result<()> {
        let off = (ptr as usize).wrapping_sub(self.addr() as usize);
        Ok(self.attachment.declare(off, len)?)
    }

    /// [`PmoHeap::declare`] of several ranges `(ptr, len)` at once: one hold of the
    /// attachment's declared ranges per eight (`Attachment::declare_ranges`), where `declare`
    /// takes one per range. For a container's operation that writes a few places. Each batch
    /// of eight is checked whole before any of it is recorded.
    pub fn declare_many(&self, ranges: &[(*const u8, usize)]) -> Result<()> {
        const BATCH: usize = 8;
        let base = self.addr() as usize;
        for chunk in ranges.chunks(BATCH) {
            let mut offs = [(0usize, 0usize); BATCH];
            for (o, &(p, len)) in offs.iter_mut().zip(chunk) {
                *o = ((p as usize).wrapping_sub(base), len);
            }
            self.attachment.declare_ranges(&offs[..chunk.len()])?;
        }
        Ok(())
    }

    /// How the attachment finds the pages a psync commits.
    pub fn dirty_tracking(&self) -> DirtyTracking {
        self.attachment.dirty_tracking()
    }

    /// Make the block at typed pointer `p` the root (null clears it).
    pub fn set_root_ptr<T>(&self, p: HeapPtr<T>) -> Result<()> {
        let ptr = self.heap.resolve(p.cast::<u8>())?;
        Ok(self.heap.set_root(ptr)?)
    }

    /// The PMO's name.
    pub fn name(&self) -> &str {
        self.attachment.name()
    }

    /// First byte of the mapping (the heap's region; offset 0 of every `HeapPtr`).
    pub fn addr(&self) -> *mut u8 {
        self.attachment.addr()
    }

    /// Bytes of the PMO.
    pub fn len(&self) -> usize {
        self.attachment.len()
    }

    /// Never true: a PMO has at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The fault mechanism serving the mapping.
    pub fn mechanism(&self) -> Mechanism {
        self.attachment.mechanism()
    }

    /// True if the store mapped the PMO away from its stable address.
    pub fn relocated(&self) -> bool {
        self.attachment.relocated()
    }

    /// Fault and fill counters of the mapping.
    pub fn view_stats(&self) -> ViewStats {
        self.attachment.view_stats()
    }

    /// The attachment under the heap.
    ///
    /// # Safety
    /// The caller must not write the heap's metadata (the first pages of the PMO up to the data
    /// area, see `Heap::geometry`) through it (`write_at`), nor write a block the heap has not
    /// handed out, and must call its `psync` only while holding [`Heap::quiesce`] (or use
    /// [`PmoHeap::psync`]). Reading is always allowed.
    pub unsafe fn attachment(&self) -> &Attachment {
        &self.attachment
    }
}

impl Deref for PmoHeap {
    type Target = Heap;
    fn deref(&self) -> &Heap {
        &self.heap
    }
}

impl std::fmt::Debug for PmoHeap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmoHeap")
            .field("name", &self.name())
            .field("addr", &self.addr())
            .field("len", &self.len())
            .field("mechanism", &self.mechanism())
            .field("protection", &self.heap.protection())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protection_rules_per_mechanism() {
        use Mechanism::{Sigsegv, Userfaultfd};
        for p in [
            Protection::Off,
            Protection::Guard,
            Protection::Mpk,
            Protection::Auto,
        ] {
            assert_eq!(effective_protection(p, Userfaultfd).unwrap(), p);
        }
        assert_eq!(
            effective_protection(Protection::Off, Sigsegv).unwrap(),
            Protection::Off
        );
        assert_eq!(
            effective_protection(Protection::Auto, Sigsegv).unwrap(),
            Protection::Off
        );
        for p in [Protection::Guard, Protection::Mpk] {
            let e = effective_protection(p, Sigsegv).unwrap_err();
            assert!(matches!(
                e,
                PmoHeapError::GuardIncompatible {
                    mechanism: "sigsegv"
                }
            ));
            assert!(e.to_string().contains("sigsegv"), "{e}");
        }
    }
}
