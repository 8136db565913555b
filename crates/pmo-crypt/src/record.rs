//! Sealing of sub-page commit log records (the store's `sublog`, `docs/format.md` §4): the PMO's
//! page AEAD (AES-256-GCM or AEGIS-256X4) under its page key over a record body of any length.
//!
//! ```text
//! nonce (12 B) = RECORD_PAGE_INDEX as u32 LE | version as u64 LE
//! aad          = "pmo-lg/v1" (9) | pool_uuid (16) | pmo_uuid (16) | record header (the caller's
//!                bytes: base sequence, record sequence, version, previous tag, ...)
//! ```
//!
//! Nonce argument: `version` comes from the PMO's [`crate::VersionCounter`], the same counter
//! page versions come from, which never hands a value out twice; so a record's nonce never
//! repeats a page's or another record's (the index field differs from every page's as well
//! while the PMO has fewer than 2^32 - 1 pages, as redundant defence).

use crate::error::CryptError;
use crate::ffi::{GCM_NONCE_LEN, GCM_TAG_LEN};
use crate::keys::PmoKeys;
use crate::page::Tag;

/// The page-index field of a record's nonce.
pub const RECORD_PAGE_INDEX: u32 = u32::MAX;
const DOMAIN: &[u8; 9] = b"pmo-lg/v1";

fn nonce_aad(keys: &PmoKeys, version: u64, header: &[u8]) -> ([u8; GCM_NONCE_LEN], Vec<u8>) {
    let mut nonce = [0u8; GCM_NONCE_LEN];
    nonce[..4].copy_from_slice(&RECORD_PAGE_INDEX.to_le_bytes());
    nonce[4..].copy_from_slice(&version.to_le_bytes());
    let mut aad = Vec::with_capacity(DOMAIN.len() + 32 + header.len());
    aad.extend_from_slice(DOMAIN);
    aad.extend_from_slice(&keys.pool_uuid);
    aad.extend_from_slice(&keys.pmo_uuid);
    aad.extend_from_slice(header);
    (nonce, aad)
}

/// Encrypt `body` in place, bound to `header` and to the keys' pool and PMO; returns the tag.
/// `version` must be fresh from the PMO's version counter.
pub fn seal_record(
    keys: &PmoKeys,
    version: u64,
    header: &[u8],
    body: &mut [u8],
) -> Result<Tag, CryptError> {
    let (nonce, aad) = nonce_aad(keys, version, header);
    let mut tag = Tag::default();
    keys.page_aead
        .seal_in_place(&nonce, &aad, body, &mut tag.0)?;
    Ok(tag)
}

/// Verify and decrypt `body` in place. On failure ([`CryptError::Integrity`]: modified, or
/// sealed under another header, version, PMO, pool or key) `body` is zeroed.
pub fn open_record(
    keys: &PmoKeys,
    version: u64,
    header: &[u8],
    body: &mut [u8],
    tag: &[u8; GCM_TAG_LEN],
) -> Result<(), CryptError> {
    let (nonce, aad) = nonce_aad(keys, version, header);
    // A failed open zeroes `body` (the cipher layer's invariant).
    keys.page_aead.open_in_place(&nonce, &aad, body, tag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MasterKey;

    fn keys(pmo: u8) -> PmoKeys {
        PmoKeys::derive(&MasterKey::from_bytes([5; 32]), [1; 16], [pmo; 16]).unwrap()
    }

    #[test]
    fn a_sealed_record_opens_only_with_its_header_version_and_pmo() {
        let k = keys(2);
        let header = [7u8; 48];
        let plain = b"three small updates".to_vec();
        let mut body = plain.clone();
        let tag = seal_record(&k, 10, &header, &mut body).unwrap();
        assert_ne!(body, plain);
        let sealed = body.clone();
        open_record(&k, 10, &header, &mut body, &tag.0).unwrap();
        assert_eq!(body, plain);
        let fails = |k: &PmoKeys, v: u64, h: &[u8], t: [u8; 16]| {
            let mut b = sealed.clone();
            let r = open_record(k, v, h, &mut b, &t);
            r.is_err() && b.iter().all(|&x| x == 0)
        };
        assert!(fails(&k, 11, &header, tag.0));
        let mut h2 = header;
        h2[20] ^= 1;
        assert!(fails(&k, 10, &h2, tag.0));
        assert!(fails(&keys(3), 10, &header, tag.0));
        let mut t2 = tag.0;
        t2[0] ^= 1;
        assert!(fails(&k, 10, &header, t2));
        let mut b = sealed.clone();
        b[0] ^= 1;
        assert!(open_record(&k, 10, &header, &mut b, &tag.0).is_err());
    }
}
