//! Derived PMO keys kept per process for the next attach of the same PMO (issue 29: an attach
//! session derived its PMO's four subkeys with HKDF every time, 12% of a 16 KiB read-only
//! session under `secure`).
//!
//! The cache sits beside the Argon2id cache of [`crate::keys`] and holds nothing that cache
//! does not already let a reader of this process's memory compute: the subkeys are HKDF
//! outputs of a master it holds. An entry is found by a SHA-256 fingerprint of (master, pool,
//! PMO, cipher), never by the key itself, so a wrong or rotated master finds nothing; the
//! least recently used of more than [`KEPT_KEYS`] entries goes, and its keys are wiped when
//! the last protection using them drops (`PmoKeys` wipes itself on drop).

use std::sync::Arc;

use pmo_crypt::{AeadCipher, CryptError, MasterKey as CryptMasterKey, PmoKeys, Uuid};
use sha2::{Digest, Sha256};

use crate::lru::SharedLru;

/// How many PMOs' keys a process keeps.
pub const KEPT_KEYS: usize = 64;

static KEPT: SharedLru<Arc<PmoKeys>> = SharedLru::new(KEPT_KEYS);

/// The keys of PMO `pmo_uuid` of pool `pool_uuid` under `master` with `cipher` as the page
/// AEAD: kept ones, else derived ([`PmoKeys::derive_with`]) and kept.
pub fn pmo_keys(
    master: &[u8; 32],
    pool_uuid: Uuid,
    pmo_uuid: Uuid,
    cipher: AeadCipher,
) -> Result<Arc<PmoKeys>, CryptError> {
    let id = fingerprint(master, &pool_uuid, &pmo_uuid, cipher);
    if let Some(keys) = KEPT.get(&id) {
        return Ok(keys);
    }
    let crypt = CryptMasterKey::from_slice(master)?;
    let keys = Arc::new(PmoKeys::derive_with(&crypt, pool_uuid, pmo_uuid, cipher)?);
    KEPT.put(id, keys.clone());
    Ok(keys)
}

/// How many PMOs' keys are kept now.
pub fn kept() -> usize {
    KEPT.len()
}

fn fingerprint(master: &[u8; 32], pool: &Uuid, pmo: &Uuid, cipher: AeadCipher) -> [u8; 32] {
    let code = AeadCipher::ALL
        .iter()
        .position(|&c| c == cipher)
        .unwrap_or(usize::MAX) as u64;
    let mut h = Sha256::new();
    h.update(b"pmo/v1/kept-pmo-keys");
    h.update(master);
    h.update(pool);
    h.update(pmo);
    h.update(code.to_le_bytes());
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmo_crypt::{open_page, seal_page, PageCtx, PAGE_SIZE};

    fn seals_alike(a: &PmoKeys, b: &PmoKeys, pool: Uuid, pmo: Uuid) -> bool {
        let ctx = PageCtx {
            pool_uuid: pool,
            pmo_uuid: pmo,
            page_index: 1,
            version: 7,
        };
        let page = [0x5a_u8; PAGE_SIZE];
        let mut sealed = [0u8; PAGE_SIZE];
        let mut out = [0u8; PAGE_SIZE];
        let tag = seal_page(a, &ctx, &page, &mut sealed).unwrap();
        open_page(b, &ctx, &sealed, &tag, &mut out).is_ok() && out == page
    }

    #[test]
    fn kept_keys_are_the_derived_ones_a_different_master_pmo_or_cipher_finds_others_and_few_are_kept(
    ) {
        let (pool, pmo) = ([3u8; 16], [4u8; 16]);
        let master = [9u8; 32];
        for cipher in AeadCipher::ALL {
            let a = pmo_keys(&master, pool, pmo, cipher).unwrap();
            let b = pmo_keys(&master, pool, pmo, cipher).unwrap();
            assert!(Arc::ptr_eq(&a, &b), "kept");
            let fresh =
                PmoKeys::derive_with(&CryptMasterKey::from_bytes(master), pool, pmo, cipher)
                    .unwrap();
            assert!(seals_alike(&a, &fresh, pool, pmo));
            for (m, p) in [([8u8; 32], pmo), (master, [5u8; 16])] {
                let other = pmo_keys(&m, pool, p, cipher).unwrap();
                assert!(!Arc::ptr_eq(&a, &other));
            }
        }
        let [c0, c1] = AeadCipher::ALL;
        let a = pmo_keys(&master, pool, pmo, c0).unwrap();
        let b = pmo_keys(&master, pool, pmo, c1).unwrap();
        assert!(!Arc::ptr_eq(&a, &b), "one entry per cipher");
        // At most KEPT_KEYS are kept (one test: the cache is the process's).
        let master = [1u8; 32];
        for i in 0..(KEPT_KEYS as u8 + 10) {
            pmo_keys(&master, [7u8; 16], [i; 16], AeadCipher::default()).unwrap();
        }
        assert!(kept() <= KEPT_KEYS);
    }
}
