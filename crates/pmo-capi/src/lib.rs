//! libpmo: the C API of pmo (`include/pmo.h`; manual in `docs/c-api.md`).
//!
//! | module       | owns |
//! |--------------|------|
//! | [`error`]    | `PMO_E_*` codes (a negative range no errno can take), errno mapping, descriptions |
//! | [`registry`] | the process's pool (opened lazily), its live attachments and heaps by address range, the default heap |
//! | [`heap`]     | the `pmo_p_malloc` family and `pmo_heap_*` over `pmo_heap::PmoHeap`: default-heap configuration, pointer rules |
//! | [`ffi`]      | the `extern "C"` entry points: C strings, panics caught, errno and last error |
//!
//! Glossary: an *attachment* is one mapping of a PMO made through this API; its *range* is
//! `[addr, addr + size)`, and any address in it names it for `detach`/`psync`/`pmo_get_name`.
//!
//! Invariants: only [`ffi`] contains `unsafe`; no panic crosses the C boundary; this crate
//! adds no on-medium state (everything persistent is the store's).
#![deny(unsafe_code)]

pub mod error;
pub mod ffi;
pub mod heap;
pub mod registry;

pub use error::CapiError;
pub use registry::{global, Mapped, Registry, ATTACHMENTS_MAX};
