//! The key hierarchy: the store's master key and the per-PMO subkeys derived from it.
//!
//! ```text
//! user key --Argon2id (store)--> MasterKey (32 B, one per pool)
//!   HKDF-Extract(salt = "pmo-crypt/v1 extract", IKM = master)                    -> PRK
//!   HKDF-Expand(PRK, info = "pmo-crypt/v1" | len(label) | label | pool | pmo, L) -> subkey
//!     "page-aead"       32 B  AES-256-GCM page sealing              (PmoKeys, AES-256-GCM PMOs)
//!     "page-aegis256x4" 32 B  AEGIS-256X4 page sealing              (PmoKeys, AEGIS-256X4 PMOs)
//!     "metadata-mac"    32 B  HMAC-SHA256 over PMO metadata/headers (PmoKeys)
//!     "vtable-entry"    32 B  AES-256 PRF over (index, version)      (PmoKeys)
//!     "vtable-epoch"    32 B  AES-256 PRF over (epoch, length)       (PmoKeys)
//!     "faithful-xts"    64 B  AES-256-XTS key pair                   (FaithfulKeys)
//! ```
//! Every subkey's info string carries the pool uuid and the PMO uuid, so two PMOs (or two pools
//! sharing a user key) never share a subkey. Subkeys are derived once per attach; nothing on a
//! page path derives keys.
//!
//! Invariants: all key material lives in `Zeroizing` buffers or in wrappers that cleanse on drop;
//! no `Debug` impl prints key bytes; keys are not `Clone` (one owner, one wipe).
#![allow(clippy::module_name_repetitions)]

use crate::cipher::{AeadCipher, PageAead};
use crate::error::CryptError;
use crate::ffi::AesBlockKey;
use aws_lc_rs::{constant_time, hkdf, hmac};
use zeroize::{Zeroize, Zeroizing};

/// Length of the master key and of each 256-bit subkey, in bytes.
pub const KEY_LEN: usize = 32;

/// A 16-byte pool or PMO identifier.
pub type Uuid = [u8; 16];

const EXTRACT_SALT: &[u8] = b"pmo-crypt/v1 extract";
const INFO_PREFIX: &[u8] = b"pmo-crypt/v1";

/// HKDF labels, one per subkey. Never reuse a label for another purpose.
pub(crate) mod label {
    // The page keys' labels are the cipher module's (one per AEAD); named here for the tests.
    #[cfg(test)]
    pub(crate) const PAGE_AEAD: &[u8] = crate::cipher::LABEL_GCM;
    #[cfg(test)]
    pub(crate) const PAGE_AEGIS256X4: &[u8] = crate::cipher::LABEL_AEGIS256X4;
    pub(crate) const METADATA_MAC: &[u8] = b"metadata-mac";
    pub(crate) const VTABLE_ENTRY: &[u8] = b"vtable-entry";
    pub(crate) const VTABLE_EPOCH: &[u8] = b"vtable-epoch";
    pub(crate) const FAITHFUL_XTS: &[u8] = b"faithful-xts";
    pub(crate) const KEY_CHECK: &[u8] = b"key-check";
}

/// The pool's master key: 32 bytes from the store's Argon2id over the user key.
///
/// Zeroized on drop; `Debug` prints no key bytes.
pub struct MasterKey(Zeroizing<[u8; KEY_LEN]>);

impl MasterKey {
    /// Take ownership of the 32 key bytes (the caller should zeroize its own copy).
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(Zeroizing::new(bytes))
    }

    /// Copy the key from a slice, which must be exactly [`KEY_LEN`] bytes.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, CryptError> {
        if bytes.len() != KEY_LEN {
            return Err(CryptError::KeyLength {
                expected: KEY_LEN,
                actual: bytes.len(),
            });
        }
        // Copy straight into the zeroizing buffer: no stray stack copy of the key.
        let mut key = Zeroizing::new([0u8; KEY_LEN]);
        key.copy_from_slice(bytes);
        Ok(Self(key))
    }

    /// The pool's key-check value: a 32-byte HKDF output (label "key-check", bound to the pool
    /// uuid) that the store keeps in the pool header at creation, so that opening with a wrong
    /// user key fails with [`CryptError::WrongKey`] before anything is decrypted, instead of as an
    /// integrity failure. It reveals nothing about the subkeys (independent HKDF outputs) and
    /// helps key guessing no more than any sealed page does; Argon2id sets the cost of a guess.
    pub fn key_check(&self, pool_uuid: &Uuid) -> Result<KeyCheck, CryptError> {
        let mut out = [0u8; 32];
        self.expand(label::KEY_CHECK, pool_uuid, &[0u8; 16], &mut out)?;
        Ok(KeyCheck(out))
    }

    /// Compare with the stored key-check value in constant time.
    pub fn verify_key_check(&self, pool_uuid: &Uuid, stored: &KeyCheck) -> Result<(), CryptError> {
        let actual = self.key_check(pool_uuid)?;
        constant_time::verify_slices_are_equal(&actual.0, &stored.0)
            .map_err(|_| CryptError::WrongKey)
    }

    /// HKDF-Extract of the master key (the PRK zeroizes itself on drop).
    pub(crate) fn prk(&self) -> hkdf::Prk {
        hkdf::Salt::new(hkdf::HKDF_SHA256, EXTRACT_SALT).extract(&self.0[..])
    }

    /// Derive `out.len()` bytes of subkey for `label`, bound to the pool and PMO.
    pub(crate) fn expand(
        &self,
        label: &[u8],
        pool_uuid: &Uuid,
        pmo_uuid: &Uuid,
        out: &mut [u8],
    ) -> Result<(), CryptError> {
        expand(&self.prk(), label, pool_uuid, pmo_uuid, out)
    }
}

/// HKDF-Expand with info = prefix | len(label) | label | pool uuid | PMO uuid.
pub(crate) fn expand(
    prk: &hkdf::Prk,
    label: &[u8],
    pool_uuid: &Uuid,
    pmo_uuid: &Uuid,
    out: &mut [u8],
) -> Result<(), CryptError> {
    struct Len(usize);
    impl hkdf::KeyType for Len {
        fn len(&self) -> usize {
            self.0
        }
    }
    let label_len =
        [u8::try_from(label.len()).map_err(|_| CryptError::Backend("hkdf label too long"))?];
    let info: [&[u8]; 5] = [INFO_PREFIX, &label_len, label, pool_uuid, pmo_uuid];
    prk.expand(&info, Len(out.len()))
        .and_then(|okm| okm.fill(out))
        .map_err(|_| CryptError::Backend("hkdf expand"))
}

fn expand32(
    prk: &hkdf::Prk,
    label: &[u8],
    pool_uuid: &Uuid,
    pmo_uuid: &Uuid,
) -> Result<Zeroizing<[u8; KEY_LEN]>, CryptError> {
    let mut out = Zeroizing::new([0u8; KEY_LEN]);
    expand(prk, label, pool_uuid, pmo_uuid, &mut out[..])?;
    Ok(out)
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(<redacted>)")
    }
}

/// A pool's key-check value (see [`MasterKey::key_check`]); public, stored in the pool header.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct KeyCheck(pub [u8; 32]);

/// A 32-byte HMAC-SHA256 tag over PMO metadata (see [`PmoKeys::mac_metadata`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MetadataTag(pub [u8; 32]);

/// The secure mode's subkeys for one PMO, derived once per attach.
///
/// Holds the page AEAD key (AES-256-GCM or AEGIS-256X4, [`AeadCipher`]), the metadata HMAC key and the two version-table PRF keys, and
/// the (pool, PMO) they are bound to. Key bytes are wiped on drop.
pub struct PmoKeys {
    pub(crate) pool_uuid: Uuid,
    pub(crate) pmo_uuid: Uuid,
    pub(crate) page_aead: PageAead,
    pub(crate) metadata_mac: hmac::Key,
    pub(crate) vtable_entry: AesBlockKey,
    pub(crate) vtable_epoch: AesBlockKey,
}

impl PmoKeys {
    /// Derive the secure-mode subkeys of PMO `pmo_uuid` in pool `pool_uuid` (once per attach),
    /// with AES-256-GCM as the page AEAD.
    pub fn derive(master: &MasterKey, pool_uuid: Uuid, pmo_uuid: Uuid) -> Result<Self, CryptError> {
        Self::derive_with(master, pool_uuid, pmo_uuid, AeadCipher::Aes256Gcm)
    }

    /// [`PmoKeys::derive`] with `cipher` as the page AEAD. Its key has its own HKDF label per
    /// cipher; the other subkeys (metadata MAC, version-table PRFs) are the same for both.
    pub fn derive_with(
        master: &MasterKey,
        pool_uuid: Uuid,
        pmo_uuid: Uuid,
        cipher: AeadCipher,
    ) -> Result<Self, CryptError> {
        let prk = master.prk();
        let aead = expand32(&prk, cipher.key_label(), &pool_uuid, &pmo_uuid)?;
        let mac = expand32(&prk, label::METADATA_MAC, &pool_uuid, &pmo_uuid)?;
        let entry = expand32(&prk, label::VTABLE_ENTRY, &pool_uuid, &pmo_uuid)?;
        let epoch = expand32(&prk, label::VTABLE_EPOCH, &pool_uuid, &pmo_uuid)?;
        Ok(Self {
            pool_uuid,
            pmo_uuid,
            page_aead: PageAead::new(cipher, &aead)?,
            metadata_mac: hmac::Key::new(hmac::HMAC_SHA256, &mac[..]),
            vtable_entry: AesBlockKey::new(&entry)?,
            vtable_epoch: AesBlockKey::new(&epoch)?,
        })
    }

    /// The page AEAD these keys seal with.
    pub fn cipher(&self) -> AeadCipher {
        self.page_aead.cipher()
    }

    /// The pool these keys are bound to.
    pub fn pool_uuid(&self) -> Uuid {
        self.pool_uuid
    }

    /// The PMO these keys are bound to.
    pub fn pmo_uuid(&self) -> Uuid {
        self.pmo_uuid
    }

    /// HMAC-SHA256 over `parts` (concatenated) under the metadata key, with a caller-chosen
    /// `domain` (e.g. `b"pmo-header/v1"`) length-prefixed in front so two metadata kinds can never
    /// share a tag. For the store's PMO header and other small metadata blocks.
    pub fn mac_metadata(&self, domain: &[u8], parts: &[&[u8]]) -> MetadataTag {
        let mut ctx = hmac::Context::with_key(&self.metadata_mac);
        ctx.update(&(domain.len() as u64).to_le_bytes());
        ctx.update(domain);
        for part in parts {
            ctx.update(part);
        }
        let tag = ctx.sign();
        let mut out = [0u8; 32];
        out.copy_from_slice(tag.as_ref());
        MetadataTag(out)
    }

    /// Recompute the metadata MAC and compare in constant time.
    pub fn verify_metadata(
        &self,
        domain: &[u8],
        parts: &[&[u8]],
        tag: &MetadataTag,
    ) -> Result<(), CryptError> {
        let mut expect = self.mac_metadata(domain, parts);
        let same = constant_time::verify_slices_are_equal(&expect.0, &tag.0).is_ok();
        expect.0.zeroize();
        if same {
            Ok(())
        } else {
            Err(CryptError::Integrity)
        }
    }
}

impl std::fmt::Debug for PmoKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmoKeys")
            .field("pool_uuid", &self.pool_uuid)
            .field("pmo_uuid", &self.pmo_uuid)
            .field("cipher", &self.cipher())
            .field("keys", &"<redacted>")
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn x(
        m: &MasterKey,
        label: &[u8],
        pool: &Uuid,
        pmo: &Uuid,
    ) -> Result<Zeroizing<[u8; KEY_LEN]>, CryptError> {
        expand32(&m.prk(), label, pool, pmo)
    }

    #[test]
    fn subkeys_differ_by_label_pool_and_pmo() {
        let m = MasterKey::from_bytes([1; 32]);
        let a = x(&m, label::PAGE_AEAD, &[1; 16], &[2; 16]).unwrap();
        let b = x(&m, label::METADATA_MAC, &[1; 16], &[2; 16]).unwrap();
        let c = x(&m, label::PAGE_AEAD, &[9; 16], &[2; 16]).unwrap();
        let d = x(&m, label::PAGE_AEAD, &[1; 16], &[9; 16]).unwrap();
        let e = x(&m, label::PAGE_AEGIS256X4, &[1; 16], &[2; 16]).unwrap();
        let again = x(&m, label::PAGE_AEAD, &[1; 16], &[2; 16]).unwrap();
        assert_eq!(*a, *again, "derivation is deterministic");
        for other in [&b, &c, &d, &e] {
            assert_ne!(**other, *a);
        }
        let m2 = MasterKey::from_bytes([2; 32]);
        assert_ne!(*x(&m2, label::PAGE_AEAD, &[1; 16], &[2; 16]).unwrap(), *a);
    }

    #[test]
    fn debug_prints_no_key_bytes() {
        let m = MasterKey::from_bytes([0xAB; 32]);
        let s = format!("{m:?}");
        assert!(
            !s.contains("171") && !s.to_lowercase().contains("ab, "),
            "{s}"
        );
        assert!(s.contains("redacted"));
        let k = PmoKeys::derive(&m, [1; 16], [2; 16]).unwrap();
        let s = format!("{k:?}");
        assert!(s.contains("redacted"));
    }

    #[test]
    fn metadata_mac_detects_changes_and_domains() {
        let m = MasterKey::from_bytes([3; 32]);
        let k = PmoKeys::derive(&m, [1; 16], [2; 16]).unwrap();
        let t = k.mac_metadata(b"hdr", &[b"abc", b"def"]);
        k.verify_metadata(b"hdr", &[b"abc", b"def"], &t).unwrap();
        assert_eq!(
            k.verify_metadata(b"hdr", &[b"abc", b"deg"], &t),
            Err(CryptError::Integrity)
        );
        assert_eq!(
            k.verify_metadata(b"hd", &[b"rabc", b"def"], &t),
            Err(CryptError::Integrity)
        );
        let other = PmoKeys::derive(&m, [1; 16], [3; 16]).unwrap();
        assert_eq!(
            other.verify_metadata(b"hdr", &[b"abc", b"def"], &t),
            Err(CryptError::Integrity)
        );
    }

    #[test]
    fn key_check_tells_wrong_key() {
        let right = MasterKey::from_bytes([1; 32]);
        let wrong = MasterKey::from_bytes([2; 32]);
        let stored = right.key_check(&[7; 16]).unwrap();
        right.verify_key_check(&[7; 16], &stored).unwrap();
        assert_eq!(
            wrong.verify_key_check(&[7; 16], &stored),
            Err(CryptError::WrongKey)
        );
        assert_eq!(
            right.verify_key_check(&[8; 16], &stored),
            Err(CryptError::WrongKey)
        );
        // independent of every subkey
        let aead = x(&right, label::PAGE_AEAD, &[7; 16], &[0; 16]).unwrap();
        assert_ne!(stored.0, *aead);
    }

    #[test]
    fn master_key_from_slice_checks_length() {
        assert_eq!(
            MasterKey::from_slice(&[0; 31]).unwrap_err(),
            CryptError::KeyLength {
                expected: 32,
                actual: 31
            }
        );
        assert!(MasterKey::from_slice(&[0; 32]).is_ok());
    }
}
