//! One page interface over every protection the schemes need, so the store's fault and psync
//! paths do not branch on the scheme: [`PageProtector`] turns a plaintext page into its at-rest
//! form plus a 32-byte metadata slot, and back.
//!
//! | variant | scheme(s) | at-rest page | metadata slot (32 B) |
//! |---|---|---|---|
//! | `Plain` | `none` | copy of the plaintext | zero |
//! | `Xts { checksum: false }` | `wed`, `bp`, `sp` | AES-256-XTS | zero |
//! | `Xts { checksum: true }` | `bp-ip`, `bp-id`, `sp-ip`, `sp-id` (faithful) | AES-256-XTS | SHA-256 of the plaintext |
//! | `Aead` | secure default | AES-256-GCM or AEGIS-256X4 (the keys' [`crate::AeadCipher`]) | the tag (16 B) then 16 zero bytes |
//!
//! `wedi`'s whole-PMO checksum is not per page: use [`crate::WholePmoChecksum`] beside
//! `Xts { checksum: false }`.
//!
//! The version argument is used by `Aead` only (it must come from the PMO's
//! [`crate::VersionCounter`]); the other variants ignore it. No allocation on any path.
//!
//! Also the per-page cost hints ([`cost_hint_ns`], public as `pmo_crypt::pool::cost_hint_ns`)
//! that [`PageProtector::cost_hint_ns`] and the worker pool's batches are weighed with.

use crate::error::CryptError;
use crate::faithful::{page_checksum, FaithfulKeys, PageChecksum};
use crate::keys::PmoKeys;
use crate::page::{open_page, seal_page, PageCtx, Tag, TAG_LEN};
use crate::Page;
use aws_lc_rs::constant_time;

/// Size of the per-page metadata slot the store keeps for every page.
pub const PAGE_META_LEN: usize = 32;

/// Per-page cost hints in nanoseconds (hot-cache medians of `crypt_bench` on this machine,
/// rounded up); only used to decide whether a batch is worth parallelising.
pub mod cost_hint_ns {
    /// AES-256-GCM seal or open of one page.
    pub const AEAD_PAGE: u64 = 400;
    /// AEGIS-256X4 seal or open of one page.
    pub const AEGIS_PAGE: u64 = 200;
    /// AES-256-XTS of one page.
    pub const XTS_PAGE: u64 = 300;
    /// SHA-256 of one page.
    pub const SHA256_PAGE: u64 = 2_300;
    /// Copy of one page.
    pub const COPY_PAGE: u64 = 100;
}

/// How a PMO's pages are protected at rest.
// Built once per attach and used by reference: the size gap between variants costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum PageProtector {
    /// No protection (`none`): the at-rest page is the plaintext.
    Plain,
    /// The paper's encryption: AES-256-XTS, tweak = page index; with `checksum`, an unkeyed
    /// SHA-256 of the plaintext in the metadata slot.
    Xts {
        /// The PMO's XTS keys.
        keys: FaithfulKeys,
        /// Whether to keep and verify a per-page checksum (the paper's `I` designs).
        checksum: bool,
    },
    /// The secure default: the keys' AEAD (AES-256-GCM or AEGIS-256X4) bound to (pool, PMO,
    /// index, version).
    Aead {
        /// The PMO's keys (shared: the store keeps them for the PMO's next attach).
        keys: std::sync::Arc<PmoKeys>,
    },
}

impl PageProtector {
    /// Estimated nanoseconds to seal or open one page (for [`crate::CryptoPool`]'s decision to
    /// parallelise a batch).
    pub fn cost_hint_ns(&self) -> u64 {
        use cost_hint_ns as c;
        match self {
            Self::Plain => c::COPY_PAGE,
            Self::Xts {
                checksum: false, ..
            } => c::XTS_PAGE,
            Self::Xts { checksum: true, .. } => c::XTS_PAGE + c::SHA256_PAGE,
            Self::Aead { keys } => match keys.cipher() {
                crate::AeadCipher::Aes256Gcm => c::AEAD_PAGE,
                crate::AeadCipher::Aegis256X4 => c::AEGIS_PAGE,
            },
        }
    }

    /// Whether the at-rest page is encrypted.
    pub fn encrypts(&self) -> bool {
        !matches!(self, Self::Plain)
    }

    /// Whether opening a page verifies it.
    pub fn verifies(&self) -> bool {
        matches!(self, Self::Aead { .. } | Self::Xts { checksum: true, .. })
    }

    /// Whether a page's version is bound into its protection (rollback of one page caught).
    pub fn binds_version(&self) -> bool {
        matches!(self, Self::Aead { .. })
    }

    /// Protect `plaintext` (page `page_index`, fresh `version`) into `out`; returns the
    /// metadata slot to store.
    pub fn seal(
        &self,
        page_index: u64,
        version: u64,
        plaintext: &Page,
        out: &mut Page,
    ) -> Result<[u8; PAGE_META_LEN], CryptError> {
        let mut meta = [0u8; PAGE_META_LEN];
        match self {
            Self::Plain => out.copy_from_slice(plaintext),
            Self::Xts { keys, checksum } => {
                if *checksum {
                    meta = page_checksum(plaintext).0;
                }
                keys.encrypt_page(page_index, plaintext, out)?;
            }
            Self::Aead { keys } => {
                let ctx = PageCtx {
                    pool_uuid: keys.pool_uuid(),
                    pmo_uuid: keys.pmo_uuid(),
                    page_index,
                    version,
                };
                let tag = seal_page(keys, &ctx, plaintext, out)?;
                meta[..TAG_LEN].copy_from_slice(&tag.0);
            }
        }
        Ok(meta)
    }

    /// [`Self::seal`] in place: `page` holds the plaintext and receives the at-rest form (one
    /// buffer less to write and read; the same result as `seal`).
    pub fn seal_in_place(
        &self,
        page_index: u64,
        version: u64,
        page: &mut Page,
    ) -> Result<[u8; PAGE_META_LEN], CryptError> {
        let mut meta = [0u8; PAGE_META_LEN];
        match self {
            Self::Plain => {}
            Self::Xts { keys, checksum } => {
                if *checksum {
                    meta = page_checksum(page).0;
                }
                keys.encrypt_page_in_place(page_index, page)?;
            }
            Self::Aead { keys } => {
                let ctx = PageCtx {
                    pool_uuid: keys.pool_uuid(),
                    pmo_uuid: keys.pmo_uuid(),
                    page_index,
                    version,
                };
                let tag = crate::page::seal_page_in_place(keys, &ctx, page)?;
                meta[..TAG_LEN].copy_from_slice(&tag.0);
            }
        }
        Ok(meta)
    }

    /// Recover and (where the variant verifies) check page `page_index` at `version` from its
    /// at-rest form and metadata slot. On [`CryptError::Integrity`], `out` is zeroed.
    pub fn open(
        &self,
        page_index: u64,
        version: u64,
        meta: &[u8; PAGE_META_LEN],
        sealed: &Page,
        out: &mut Page,
    ) -> Result<(), CryptError> {
        match self {
            Self::Plain => {
                out.copy_from_slice(sealed);
                Ok(())
            }
            Self::Xts {
                keys,
                checksum: false,
            } => keys.decrypt_page(page_index, sealed, out),
            Self::Xts {
                keys,
                checksum: true,
            } => keys.decrypt_and_verify(page_index, sealed, &PageChecksum(*meta), out),
            Self::Aead { keys } => {
                // The unused half of the slot must be zero: a flipped bit there is tampering too.
                let (tag_bytes, rest) = meta.split_at(TAG_LEN);
                let rest_is_zero =
                    constant_time::verify_slices_are_equal(rest, &[0u8; PAGE_META_LEN - TAG_LEN])
                        .is_ok();
                let mut tag = Tag::default();
                tag.0.copy_from_slice(tag_bytes);
                let ctx = PageCtx {
                    pool_uuid: keys.pool_uuid(),
                    pmo_uuid: keys.pmo_uuid(),
                    page_index,
                    version,
                };
                let result = open_page(keys, &ctx, sealed, &tag, out);
                if result.is_ok() && !rest_is_zero {
                    zeroize::Zeroize::zeroize(out);
                    return Err(CryptError::Integrity);
                }
                result
            }
        }
    }
}

impl std::fmt::Debug for PageProtector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Plain => f.write_str("PageProtector::Plain"),
            Self::Xts { checksum, .. } => {
                write!(f, "PageProtector::Xts {{ checksum: {checksum} }}")
            }
            Self::Aead { keys } => write!(f, "PageProtector::Aead({})", keys.cipher().name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MasterKey, PAGE_SIZE};

    fn all() -> Vec<PageProtector> {
        let m = MasterKey::from_bytes([9; 32]);
        vec![
            PageProtector::Plain,
            PageProtector::Xts {
                keys: FaithfulKeys::derive(&m, [1; 16], [2; 16]).unwrap(),
                checksum: false,
            },
            PageProtector::Xts {
                keys: FaithfulKeys::derive(&m, [1; 16], [2; 16]).unwrap(),
                checksum: true,
            },
            PageProtector::Aead {
                keys: std::sync::Arc::new(PmoKeys::derive(&m, [1; 16], [2; 16]).unwrap()),
            },
            PageProtector::Aead {
                keys: std::sync::Arc::new(
                    PmoKeys::derive_with(&m, [1; 16], [2; 16], crate::AeadCipher::Aegis256X4)
                        .unwrap(),
                ),
            },
        ]
    }

    #[test]
    fn sealing_in_place_equals_sealing_into_a_buffer() {
        let pt: Page = core::array::from_fn(|i| (i * 7 % 256) as u8);
        for p in all() {
            let mut out = [0u8; PAGE_SIZE];
            let meta = p.seal(9, 41, &pt, &mut out).unwrap();
            let mut inplace = pt;
            let meta2 = p.seal_in_place(9, 41, &mut inplace).unwrap();
            assert_eq!((out, meta), (inplace, meta2), "{p:?}");
        }
    }

    #[test]
    fn every_variant_round_trips_and_verifiers_catch_flips() {
        let pt: Page = core::array::from_fn(|i| (i * 5 % 256) as u8);
        for p in all() {
            let mut sealed = [0u8; PAGE_SIZE];
            let meta = p.seal(3, 77, &pt, &mut sealed).unwrap();
            assert_eq!(sealed == pt, !p.encrypts(), "{p:?}");
            let mut out = [0u8; PAGE_SIZE];
            p.open(3, 77, &meta, &sealed, &mut out).unwrap();
            assert_eq!(out, pt, "{p:?}");
            let mut bad = sealed;
            bad[10] ^= 1;
            assert_eq!(
                p.open(3, 77, &meta, &bad, &mut out).is_err(),
                p.verifies(),
                "{p:?}"
            );
            let mut bad_meta = meta;
            bad_meta[31] ^= 1;
            assert_eq!(
                p.open(3, 77, &bad_meta, &sealed, &mut out).is_err(),
                p.verifies(),
                "{p:?} meta"
            );
            assert_eq!(
                p.open(3, 76, &meta, &sealed, &mut out).is_err(),
                p.binds_version(),
                "{p:?} version"
            );
        }
    }
}
