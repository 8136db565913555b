//! The read-only heap check for tools (`pmo check`): [`check_pmo`].
//!
//! Owns: deciding whether a PMO holds a heap (its first bytes are the heap magic) and running
//! the full checker over it without writing anything.
//!
//! Why a read-only attach is enough: `Heap::open_with(.., Protection::Off)` only reads (header,
//! root page, sub-heap headers) and arms no protection, and `Heap::check` only reads the
//! metadata (under the heap's DRAM locks, which are private to this process). The PMO is
//! therefore attached `Perm::Read`, which the store grants while the PMO is at rest or attached
//! read-only by others, and refuses with `Busy` while a writer holds it (its un-psynced state
//! is not ours to judge; the durable state is what the store's own check covers then). The
//! mapping is read-only, so a bug that tried to write would fault rather than change the PMO.
//! The attach allows relocation: the checker uses offsets only, never pointers stored inside.
//!
//! Why unsafe is allowed here: `Heap::open_with` takes the raw read-only mapping.
#![allow(unsafe_code)]

use crate::error::Result;
use pmo_alloc::layout::HEADER_MAGIC;
use pmo_alloc::{CheckReport, Heap, Protection};
use pmo_store::{AttachOptions, Perm, Pool};

/// Does this PMO start with the heap magic? Reads 8 bytes through a read-only attachment.
fn holds_heap(a: &pmo_store::Attachment) -> Result<bool> {
    if a.len() < HEADER_MAGIC.len() {
        return Ok(false);
    }
    let mut magic = [0u8; HEADER_MAGIC.len()];
    a.read_at(0, &mut magic)?;
    Ok(magic == HEADER_MAGIC)
}

/// Check the heap in PMO `name`, read-only: `Ok(None)` when the PMO holds no heap (no heap
/// magic at its start), `Ok(Some(report))` when the heap passes every check (no overlapping
/// blocks, the accounting identity `allocated + free + slab waste == capacity`, counters, bins,
/// root), `Err` when it is corrupt (`PmoHeapError::Heap(HeapError::Corrupt{..})` and kin) or
/// the PMO cannot be attached (wrong key). Beside a writer (readers beside a writer,
/// `docs/readers.md`) it checks the heap as of the writer's last psync.
pub fn check_pmo(pool: &Pool, name: &str, key: &[u8]) -> Result<Option<CheckReport>> {
    let a = pool.attach_with(
        name,
        Perm::Read,
        key,
        AttachOptions {
            relocate: true,
            ..AttachOptions::default()
        },
    )?;
    if !holds_heap(&a)? {
        return Ok(None);
    }
    // SAFETY: the attachment maps `len` bytes at `addr` (page aligned) read-only until it is
    // dropped at the end of this function, after the heap. With `Protection::Off`, opening and
    // checking only read the region (module doc), so the read-only mapping suffices, and nothing
    // writes it: the attachment is this process's private snapshot of one psync (a writer, here
    // or in another process, writes its own view, never this one).
    let heap = unsafe { Heap::open_with(a.addr(), a.len(), Protection::Off) }?;
    let report = heap.check()?;
    drop(heap);
    drop(a);
    Ok(Some(report))
}
