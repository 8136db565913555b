//! # pmo-crypt: at-rest protection primitives for persistent memory objects
//!
//! This crate owns the cryptography of pmo and nothing else: it does no I/O, knows nothing of
//! the medium layout, and holds no global state. The store calls it on its attach, fault,
//! psync, detach and recovery paths.
//!
//! ## Glossary
//! - **page**: a PMO page, [`PAGE_SIZE`] = 4096 bytes (not an OS page, though they coincide here).
//! - **master key**: 32 bytes the store derives from the user key with Argon2id ([`MasterKey`]).
//! - **PMO keys**: subkeys derived with HKDF-SHA256 from the master key once per attach, bound to
//!   the pool uuid and PMO uuid ([`PmoKeys`] for the secure mode, [`FaithfulKeys`] for the
//!   paper-reproduction mode).
//! - **version**: a 64-bit number attached to each sealed page; the store draws it from a
//!   per-PMO monotonic counter ([`VersionCounter`]) so that it never repeats under one key.
//! - **version table**: the per-PMO array of page versions; authenticated by a
//!   [`VersionTableMac`] tag stored in the PMO header.
//! - **epoch**: the version-counter value the store takes for each version-table commit.
//! - **secure mode**: an AEAD per page ([`seal_page`], [`open_page`]) with the page's
//!   (pool, PMO, index, version) as associated data, plus the version-table MAC. The AEAD is
//!   AES-256-GCM or AEGIS-256X4 ([`AeadCipher`], chosen per PMO by [`PmoKeys::derive_with`]);
//!   both are called, never implemented, here.
//! - **faithful mode**: what the LOaPP reference kernel does: AES-256-XTS per page with the page
//!   index as tweak ([`faithful`]), plus an unkeyed SHA-256 checksum per page or per PMO.
//! - **page protector**: [`PageProtector`], one seal/open interface over plain, XTS, XTS +
//!   checksum and AES-GCM, with a 32-byte metadata slot per page, so the store's paths do not
//!   branch on the scheme.
//!
//! ## Example
//! ```
//! use pmo_crypt::{MasterKey, PmoKeys, PageCtx, seal_page, open_page, PAGE_SIZE};
//! let master = MasterKey::from_bytes([7u8; 32]);
//! let (pool_uuid, pmo_uuid) = ([1u8; 16], [2u8; 16]);
//! // once per attach:
//! let keys = PmoKeys::derive(&master, pool_uuid, pmo_uuid).unwrap();
//! let ctx = PageCtx { pool_uuid, pmo_uuid, page_index: 3, version: 42 };
//! let plaintext = [0xAB_u8; PAGE_SIZE];
//! let mut sealed = [0u8; PAGE_SIZE];
//! let tag = seal_page(&keys, &ctx, &plaintext, &mut sealed).unwrap();
//! let mut opened = [0u8; PAGE_SIZE];
//! open_page(&keys, &ctx, &sealed, &tag, &mut opened).unwrap();
//! assert_eq!(opened, plaintext);
//! // the same bytes presented as version 41 (a rollback) are refused:
//! let old = PageCtx { version: 41, ..ctx };
//! assert!(open_page(&keys, &old, &sealed, &tag, &mut opened).is_err());
//! ```
//!
//! ## Invariants
//! - Key bytes are zeroized when their owner drops and are never printed by `Debug`.
//! - [`seal_page`], [`open_page`], their in-place variants and the faithful page functions do
//!   not allocate (they run in the page-fault handler); `tests/no_alloc.rs` checks it.
//! - A failed [`open_page`] leaves the output page zeroed, never unverified plaintext.
//!
//! `docs/security.md` in the repository gives the threat model and the security arguments.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod cipher;
mod error;
pub mod faithful;
mod ffi;
mod keys;
mod page;
pub mod pool;
mod protect;
mod record;
mod version;
mod vtable;
pub mod wrap;

pub use cipher::AeadCipher;
pub use error::CryptError;
pub use faithful::{
    page_checksum, verify_page_checksum, FaithfulKeys, PageChecksum, WholePmoChecksum,
};
pub use keys::{KeyCheck, MasterKey, MetadataTag, PmoKeys, Uuid, KEY_LEN};
pub use page::{
    open_page, open_page_in_place, seal_page, seal_page_in_place, PageCtx, Tag, TAG_LEN,
};
pub use pool::CryptoPool;
pub use protect::{PageProtector, PAGE_META_LEN};
pub use record::{open_record, seal_record, RECORD_PAGE_INDEX};
pub use version::VersionCounter;
pub use vtable::{
    mac_table, verify_table, verify_table_update, TableTag, VersionTableMac, TABLE_TAG_LEN,
    UPDATE_BATCH as TABLE_UPDATE_BATCH,
};

/// Size of a PMO page in bytes: the unit of encryption and integrity.
pub const PAGE_SIZE: usize = 4096;

/// A PMO page's bytes.
pub type Page = [u8; PAGE_SIZE];
