//! pmo-heap: a POSEIDON heap (crate `pmo-alloc`) living inside a PMO of a pmo pool.
//!
//! ```no_run
//! use pmo_heap::{PmoHeap, HeapOptions};
//! # fn main() -> pmo_heap::Result<()> {
//! let pool = pmo_store::Pool::open(std::path::Path::new("/dev/shm/my.pool"))?;
//! let heap = PmoHeap::create(&pool, "heap", 64 << 20, b"key", &HeapOptions::default())?;
//! let node = heap.alloc(64, 16)?;   // a block in the PMO, at a stable address
//! heap.set_root(Some(node))?;       // link it
//! heap.psync()?;                    // allocation + link + data: durable together, atomically
//! heap.detach()?;
//! let heap = PmoHeap::open(&pool, "heap", b"key")?;
//! assert_eq!(heap.root()?, Some(node));
//! # Ok(()) }
//! ```
//!
//! The allocator keeps all of its state inside the PMO, and the store's psync commits the
//! written pages with shadow paging, atomically. So "allocate, link, psync" is atomic with no
//! allocator log: after a crash the heap is exactly as at the last psync (`docs/heap.md`, and
//! `tests/crash.rs`, which checks it at every persist point of the store's crash simulator).
//!
//! Glossary:
//! - *PMO*: a named persistent memory object in a pool; *attach* maps it at its stable address.
//! - *heap*: the allocator's region = the whole PMO (header, root page, sub-heap metadata,
//!   data area); *block*: what `alloc` returns.
//! - *psync*: the store's atomic commit of the pages written since the previous psync.
//! - *guard mode*: metadata pages `mprotect`ed read-only outside allocator calls.
//!
//! Module map: `pmo_heap` ([`PmoHeap`], protection vs fault mechanism), `check`
//! ([`check_pmo`] for `pmo check`), [`mod@bench`] (the side-by-side benchmark), `error`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod bench;
mod check;
mod error;
mod pmo_heap;

pub use check::check_pmo;
pub use error::{PmoHeapError, Result};
pub use pmo_alloc::{
    Allocation, CheckReport, Heap, HeapError, HeapOptions, HeapPtr, HeapStats, Protection,
};
pub use pmo_heap::{effective_protection, OpenOptions, PmoHeap};
pub use pmo_os::view::{DirtyTracking, Mechanism};
pub use pmo_store::{AttachOptions, CommitStats};
