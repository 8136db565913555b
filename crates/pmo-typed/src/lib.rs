//! pmo-typed: typed persistent data on a PMO heap, safe by construction.
//!
//! ```no_run
//! use pmo_typed::{Persistent, PBTreeMap, PString, TypedHeap};
//!
//! #[derive(Persistent)]
//! #[repr(C)]
//! struct Task {
//!     done: u64,
//!     title: PString,
//! }
//!
//! #[derive(Persistent)]
//! #[repr(C)]
//! struct Todo {
//!     next_id: u64,
//!     tasks: PBTreeMap<u64, Task>,
//! }
//!
//! # fn main() -> pmo_typed::Result<()> {
//! # let pool = pmo_store::Pool::open(std::path::Path::new("/dev/shm/todo.pool"))?;
//! let mut heap = TypedHeap::open_or_create(&pool, "todo", 16 << 20, b"key")?;
//! let (todo, h) = heap.root::<Todo>()?;          // created (zeroed: empty) on first use
//! todo.next_id += 1;
//! todo.tasks.insert(h, todo.next_id, Task { done: 0, title: PString::default() })?;
//! if let Some(t) = todo.tasks.get_mut(h, &todo.next_id)? {
//!     t.title.set(h, "buy milk")?;
//! }
//! heap.psync()?;                                  // every change above, atomically
//! heap.detach()?;
//! # Ok(()) }
//! ```
//!
//! - [`Persistent`] (with `#[derive(Persistent)]`) is the compile-time gate: only plain data
//!   and the containers below may live in a PMO (`docs/typed.md`).
//! - [`TypedHeap`] (read-write attach) gives `&mut` to the root; [`TypedReader`] (read-only
//!   attach) gives `&T`. Every container method takes the [`Ctx`] handed out with the root.
//! - Containers hold heap offsets, never addresses: [`PBox`], [`PVec`], [`PString`],
//!   [`PHashMap`], [`PBTreeMap`] (with range scans). Their zero value is empty. A header
//!   records where it lives: one moved by `mem::swap`/`mem::take`/assignment instead of by its
//!   containers is refused ([`TypedError::Moved`]), so no block ever has two owners.
//! - A read-write attach tracks writes by declaration: the containers declare what they write
//!   and the root is compared at psync, so the program declares nothing.
//! - `psync` commits every change since the last psync atomically (shadow paging, no log);
//!   detach, drop, an unwinding panic or a crash discard them.
//!
//! Module map: `persistent` (the trait, plain-data impls, layout hashing), `ctx` (Ctx, the
//! typed root, TypedHeap, TypedReader, the reachability check), `pbox`, `pvec` (PVec,
//! PString), `phash`, `pbtree`, `kv` ([`kv::PKv`]: a byte-keyed durable store for YCSB-style
//! drivers), `error`. The benchmark is `examples/typed_bench.rs`, the
//! application `examples/todo.rs`.
#![deny(unsafe_code)]
#![warn(missing_docs)]
// `TypedError` has drop glue (it can hold a store error), so `option.ok_or(TypedError::..)`
// builds the error and calls its destructor on every call, found or not: on `PHashMap::get`
// that was a third of the lookup's instructions (lookups 100 -> 170 M/s once it went, since
// fewer instructions per lookup let more lookups' cache misses overlap). Errors are built
// lazily (`ok_or_else`), which this lint would undo.
#![allow(clippy::unnecessary_lazy_evaluations)]

// The derive names `::pmo_typed`; let it resolve inside this crate too.
extern crate self as pmo_typed;

mod ctx;
mod error;
pub mod kv;
mod pbox;
pub mod pbtree;
mod persistent;
pub mod phash;
mod pvec;

pub use ctx::{Ctx, TypedCheck, TypedHeap, TypedReader};
pub use error::{Result, TypedError};
pub use pbox::PBox;
pub use pbtree::PBTreeMap;
pub use persistent::{layout, Persistent};
pub use phash::PHashMap;
pub use pmo_alloc::HeapError;
pub use pmo_heap::{AttachOptions, CommitStats, DirtyTracking};
pub use pmo_typed_derive::Persistent;
pub use pvec::{PString, PVec};
