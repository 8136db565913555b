//! pmo-alloc: a POSEIDON-style persistent allocator living inside a PMO.
//!
//! A [`Heap`] is laid over a mapped region (a PMO attached by the store at a stable address).
//! All allocator state lives in the region, so it becomes durable with the user's data at the
//! store's `psync`, and a snapshot taken at any quiescent point opens as a consistent heap.
//!
//! Design (see `docs/allocator.md`):
//! - **Per-CPU sub-heaps**: the data area is split into sub-heaps, each with its own lock and
//!   metadata; a thread allocates from its CPU's sub-heap, a free goes to the owner.
//! - **Slabs for small sizes** (28 classes, 16 B..4 KiB, 64 KiB slabs with a slot bitmap) over an
//!   **extent allocator** (4 KiB units, segregated free bins, immediate coalescing) that also
//!   serves large sizes.
//! - **Metadata apart from user data**: no header in front of a block; every free is checked
//!   against the metadata (unit map + slab bitmaps), so invalid, double and interior frees are
//!   rejected with distinct errors and change nothing.
//! - **Metadata protection**: Intel MPK where present, else an optional `mprotect` guard mode.
//! - A **checker** ([`Heap::check`]) validating every invariant and the accounting identity.
//!
//! Glossary:
//! - *region*: the mapped bytes the heap covers (a PMO). *OS page*: 4096 bytes of the kernel.
//! - *unit*: 4096 bytes of the data area, the extent allocator's granule.
//! - *extent*: a run of units that is free, one large block, or one slab.
//! - *slab*: an extent of 16 units cut into equal *slots* of one *size class*.
//! - *block*: what `alloc` returns (a slot or a large extent).
//! - *sub-heap*: a share of the data area with its own metadata and lock.
//!
//! Module map: `layout` (offsets, geometry, classes), `meta` (in-region structs), `subheap`
//! (allocation logic), `check` (checker and walks), `heap` (public API, locks), `protect`
//! (MPK/guard), `sys` (system calls), `ptr` (typed pointers), `region` (owned mappings),
//! `bench` (workloads).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod bench;
mod check;
mod error;
mod heap;
pub mod layout;
mod meta;
pub mod protect;
mod ptr;
pub mod region;
mod subheap;
mod sys;

pub use check::CheckReport;
pub use error::{HeapError, Result};
pub use heap::{Allocation, Heap, HeapOptions, HeapStats, QuiesceGuard, WriteObserver};
pub use protect::Protection;
pub use ptr::HeapPtr;
pub use region::{MappedHeap, MappedRegion};
