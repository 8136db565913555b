//! The on-medium format of a pmo pool, byte by byte (see `docs/format.md`, which this crate
//! mirrors with named offsets). This crate does no I/O: it encodes and decodes fixed-size records
//! and computes layouts. Every integer on the medium is fixed-width little-endian; every metadata
//! record carries a CRC-32C of its bytes, so a torn or corrupted record reads as invalid, never as
//! a different valid record.
//!
//! Glossary:
//! - *pool*: one medium holding a superblock, a namespace and a heap of PMO extents.
//! - *PMO*: a named persistent memory object; its *extent* holds its metadata and two data slots.
//! - *page*: 4 KiB of a PMO; its *page-map entry* says which slot holds its current contents
//!   (or that it was never written and reads as zeros) and its version.
//! - *psync*: a commit of dirty pages: pages to the free slot, a *journal* of new page-map entries,
//!   then a *commit record*; recovery re-applies the journal of the newest valid record.
#![deny(unsafe_code)]

pub mod codec;
pub mod entry;
mod kdf;
pub mod layout;
pub mod record;
pub mod sublog;
pub mod superblock;

pub use entry::{Entry, ENTRY_SIZE, NAME_MAX};
pub use kdf::KdfParams;
pub use layout::{PageLoc, PageMapEntry, PmoLayout, RECORD_SIZE, TRAILER_SIZE};
pub use record::{CommitRecord, JournalEntry, Trailer};
pub use superblock::{PoolConfig, Superblock};

/// Bytes per PMO page (and per OS page).
pub const PAGE_SIZE: u64 = 4096;

/// The format version this code writes and the newest it reads. Version 2 added protected PMOs
/// (per-page metadata, journal trailers, the version reservation); a version-1 pool opens and
/// works, but holds unprotected PMOs only. Version 3 added the namespace mirror; version 4 the
/// wide check of every page-map entry; version 5 the layout capacity of namespace entries;
/// version 6 the sub-page commit log of PMOs created with one ([`sublog`]); version 7 key
/// families ([`entry::FLAG_FAMILY`]); version 8 readers beside a writer (the readers word,
/// [`layout::PmoLayout::READERS_OFF`], which every writer checks before a psync); version 9 the
/// AEAD field of a scheme code (bits 9-11: AES-256-GCM or AEGIS-256X4).
pub const FORMAT_VERSION: u32 = 9;
/// The first format version with protected PMOs.
pub const FORMAT_VERSION_PROTECTION: u32 = 2;
/// The first format version with a namespace mirror (copy B of every slot). Older pools are
/// upgraded when a current build opens them.
pub const FORMAT_VERSION_MIRROR: u32 = 3;
/// The first format version whose page-map entries all carry the wide check (bits 48-63).
/// Older pools are upgraded when a current build opens them.
pub const FORMAT_VERSION_MAP_CHECK: u32 = 4;
/// The first format version whose namespace entries may carry a layout capacity above their
/// size (entry bytes 468..476). Older pools are upgraded (the superblock only) on open.
pub const FORMAT_VERSION_CAPACITY: u32 = 5;
/// The first format version whose PMOs may have a sub-page commit log (entry flag
/// [`entry::FLAG_SUBLOG`], the log area at the end of the extent). Older pools are upgraded
/// (the superblock only) on open.
pub const FORMAT_VERSION_SUBLOG: u32 = 6;
/// The first format version whose PMOs may belong to a key family (entry flag
/// [`entry::FLAG_FAMILY`], the family salt at entry bytes 476..508). Older pools are upgraded
/// (the superblock only) on open.
pub const FORMAT_VERSION_FAMILY: u32 = 7;
/// The first format version whose writers keep page versions for readers beside them (the
/// readers word in the header page: [`layout::PmoLayout::READERS_OFF`]). An older build's
/// writer would ignore the word and overwrite versions readers still read. Older pools are
/// upgraded (the superblock only) on open.
pub const FORMAT_VERSION_READERS: u32 = 8;
/// The first format version whose scheme codes may name an AEAD other than AES-256-GCM (bits
/// 9-11 of the code: 1 = AEGIS-256X4, `docs/format.md` §3). An older build would read such a
/// code as a damaged entry. Older pools are upgraded (the superblock only) on open; their PMOs
/// keep AES-256-GCM.
pub const FORMAT_VERSION_AEAD: u32 = 9;

/// Why a record does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("not a pmo pool (no pmo magic number)")]
    Foreign,
    #[error("{what}: checksum mismatch")]
    Checksum { what: &'static str },
    #[error("{what}: bad magic number")]
    Magic { what: &'static str },
    #[error("pool format version {found} is newer than this pmo supports ({supported})")]
    TooNew { found: u32, supported: u32 },
    #[error("{what}: invalid field: {detail}")]
    Invalid { what: &'static str, detail: String },
}

/// CRC-32C of `bytes`.
pub fn crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// Round `x` up to a multiple of `align` (a power of two). `None` on overflow.
pub fn align_up(x: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    Some(x.checked_add(align - 1)? & !(align - 1))
}
