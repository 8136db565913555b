//! User keys: Argon2id derivation of a per-PMO master key, and the key verifier.
//!
//! The user key never reaches the medium. At pcreate a random 32-byte salt is drawn and
//! `master = Argon2id(key, salt, params)`; the entry stores `verifier = HKDF-Expand(master,
//! "pmo/v1/verifier" || pmo uuid)`. Attach and pdestroy re-derive and compare in constant time.
//! Later layers derive their data keys from the same master with other HKDF labels.
//!
//! Argon2id is deliberately slow (tens of milliseconds), so a process caches masters it has
//! derived, keyed by a SHA-256 of (uuid, salt, params, key); entries are zeroized on eviction.
//! A full cache evicts its least recently used entry (it used to empty itself: a file store
//! that creates files then re-derived every open file's master, up to 40% of its opens).

use std::collections::HashMap;
use std::sync::Mutex;

use hkdf::Hkdf;
use pmo_format::KdfParams;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::error::{Result, StoreError};

/// A per-PMO master key (zeroized on drop).
pub type MasterKey = Zeroizing<[u8; 32]>;

/// Most cached derivations kept per process.
const CACHE_MAX: usize = 256;

/// The cache: cache key -> (master, last use), and the use clock.
type Cache = (HashMap<[u8; 32], (MasterKey, u64)>, u64);

static CACHE: Mutex<Option<Cache>> = Mutex::new(None);

fn cache_key(uuid: &[u8; 16], salt: &[u8; 32], params: &KdfParams, key: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"pmo/v1/kdf-cache");
    h.update(uuid);
    h.update(salt);
    for v in [params.alg, params.m_kib, params.t, params.p] {
        h.update(v.to_le_bytes());
    }
    h.update(key);
    h.finalize().into()
}

/// Derive the master key of a PMO from the user key (cached per process).
pub fn derive_master(
    uuid: &[u8; 16],
    salt: &[u8; 32],
    params: &KdfParams,
    key: &[u8],
) -> Result<MasterKey> {
    params.validate()?;
    let ck = cache_key(uuid, salt, params, key);
    if let Some((map, clock)) = CACHE.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        if let Some((m, used)) = map.get_mut(&ck) {
            *clock += 1;
            *used = *clock;
            return Ok(m.clone());
        }
    }
    let argon = argon2::Argon2::new(
        argon2::Algorithm::Argon2id,
        argon2::Version::V0x13,
        argon2::Params::new(params.m_kib, params.t, params.p, Some(32))
            .map_err(|e| StoreError::Invalid(format!("kdf parameters: {e}")))?,
    );
    let mut out = Zeroizing::new([0u8; 32]);
    argon
        .hash_password_into(key, salt, out.as_mut())
        .map_err(|e| StoreError::Invalid(format!("key derivation: {e}")))?;
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let (map, clock) = cache.get_or_insert_with(|| (HashMap::new(), 0));
    if map.len() >= CACHE_MAX && !map.contains_key(&ck) {
        // Values are Zeroizing: an evicted master is wiped.
        if let Some(lru) = map.iter().min_by_key(|(_, (_, u))| *u).map(|(k, _)| *k) {
            map.remove(&lru);
        }
    }
    *clock += 1;
    map.insert(ck, (out.clone(), *clock));
    Ok(out)
}

/// The verifier stored in the namespace entry. `binding` is empty for unprotected PMOs (the
/// format-v1 verifier) and [`binding`] for protected ones: then the verifier also authenticates
/// the entry fields protection depends on, so an entry edited to, say, scheme `none` fails the
/// key check instead of making the next psync write plaintext.
pub fn verifier(master: &MasterKey, uuid: &[u8; 16], binding: &[u8]) -> [u8; 32] {
    let hk = Hkdf::<Sha256>::from_prk(master.as_ref()).expect("32-byte PRK is valid");
    let mut out = [0u8; 32];
    if binding.is_empty() {
        hk.expand_multi_info(&[b"pmo/v1/verifier", uuid], &mut out)
    } else {
        hk.expand_multi_info(&[b"pmo/v2/verifier", uuid, binding], &mut out)
    }
    .expect("32 bytes is a valid HKDF length");
    out
}

/// The entry fields a protected PMO's verifier authenticates: scheme code, metadata bytes per
/// page, size, extent offset and length, base address, then the flags and the layout capacity
/// when non-zero (empty for an unprotected PMO).
pub fn binding(e: &pmo_format::Entry) -> Vec<u8> {
    if e.scheme == 0 {
        return Vec::new();
    }
    let mut b = Vec::with_capacity(40);
    b.extend_from_slice(&e.scheme.to_le_bytes());
    b.extend_from_slice(&e.tag_bytes.to_le_bytes());
    for v in [e.size, e.extent_off, e.extent_len, e.base_addr] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    // A rekeyed entry also binds its flags (so clearing the wrapped flag fails the key check).
    if e.flags != 0 {
        b.extend_from_slice(&e.flags.to_le_bytes());
    }
    // An entry with a layout capacity (format version 5) binds it (the layout follows it).
    if e.capacity != 0 {
        b.extend_from_slice(&e.capacity.to_le_bytes());
    }
    b
}

/// The key-encryption key a user key's master gives a rekeyed PMO.
fn kek(user_master: &MasterKey, uuid: &[u8; 16]) -> Zeroizing<[u8; 32]> {
    let hk = Hkdf::<Sha256>::from_prk(user_master.as_ref()).expect("32-byte PRK is valid");
    let mut out = Zeroizing::new([0u8; 32]);
    hk.expand_multi_info(&[b"pmo/v1/kek", uuid], out.as_mut())
        .expect("32 bytes is a valid HKDF length");
    out
}

/// Re-wrap `e` for `new_key` (`docs/lifecycle.md`): a fresh salt, the data master `data`
/// (what [`check_key`] returned for the old key) wrapped under the new key's key-encryption
/// key, and the verifier of the new key. No page changes: every data key derives from `data`.
pub fn rewrap(e: &mut pmo_format::Entry, data: &MasterKey, new_key: &[u8]) -> Result<()> {
    use pmo_format::entry::FLAG_WRAPPED;
    e.salt = random_bytes::<32>();
    let user = derive_master(&e.uuid, &e.salt, &e.kdf, new_key)?;
    e.wrapped = pmo_crypt::wrap::wrap_key(&kek(&user, &e.uuid), data)
        .map_err(|err| StoreError::Invalid(format!("key wrap: {err}")))?;
    e.flags |= FLAG_WRAPPED;
    e.verifier = verifier(&user, &e.uuid, &binding(e));
    Ok(())
}

/// Check `key` against a stored verifier; on success the PMO's data master key (the key's own
/// Argon2id master, or for a rekeyed PMO the master it unwraps).
pub fn check_key(e: &pmo_format::Entry, key: &[u8]) -> Result<MasterKey> {
    let (name, uuid) = (&e.name, &e.uuid);
    let master = derive_master(uuid, &e.salt, &e.kdf, key)?;
    if bool::from(verifier(&master, uuid, &binding(e)).ct_eq(&e.verifier)) {
        if e.flags & pmo_format::entry::FLAG_WRAPPED == 0 {
            return Ok(master);
        }
        // The key verified, so a wrap that does not open was altered on the medium.
        pmo_crypt::wrap::unwrap_key(&kek(&master, uuid), &e.wrapped).map_err(|_| {
            StoreError::Corrupt(format!(
                "PMO '{name}': its wrapped data key fails its integrity check"
            ))
        })
    } else {
        Err(StoreError::WrongKey(name.to_string()))
    }
}

/// The key-encryption key under which a rotation keeps its new data master (`crate::rotate`):
/// derived from the old data master, so only a holder of the PMO's key unwraps it.
fn rotation_kek(old_data: &MasterKey, uuid: &[u8; 16]) -> Zeroizing<[u8; 32]> {
    let hk = Hkdf::<Sha256>::from_prk(old_data.as_ref()).expect("32-byte PRK is valid");
    let mut out = Zeroizing::new([0u8; 32]);
    hk.expand_multi_info(&[b"pmo/v1/rotate-kek", uuid], out.as_mut())
        .expect("32 bytes is a valid HKDF length");
    out
}

/// Wrap a rotation's new data master under the old one.
pub(crate) fn wrap_rotation(
    old_data: &MasterKey,
    uuid: &[u8; 16],
    new_data: &MasterKey,
) -> Result<[u8; 40]> {
    pmo_crypt::wrap::wrap_key(&rotation_kek(old_data, uuid), new_data)
        .map_err(|err| StoreError::Invalid(format!("key wrap: {err}")))
}

/// Unwrap a rotation's new data master with the old one (`None`: `data` is not the master it
/// was wrapped under).
pub(crate) fn unwrap_rotation(
    data: &MasterKey,
    uuid: &[u8; 16],
    wrapped: &[u8; 40],
) -> Option<MasterKey> {
    pmo_crypt::wrap::unwrap_key(&rotation_kek(data, uuid), wrapped).ok()
}

/// Fresh random bytes from the operating system.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    use rand::RngCore;
    let mut b = [0u8; N];
    rand::rngs::OsRng.fill_bytes(&mut b);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cached(uuid: &[u8; 16], salt: &[u8; 32], key: &[u8]) -> bool {
        let ck = cache_key(uuid, salt, &KdfParams::INSECURE_FAST, key);
        CACHE
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|(m, _)| m.contains_key(&ck))
    }

    #[test]
    fn a_full_cache_evicts_the_least_recently_used_master() {
        let p = KdfParams::INSECURE_FAST;
        let hot = ([7u8; 16], [7u8; 32]);
        let first = ([8u8; 16], [8u8; 32]);
        let a = derive_master(&hot.0, &hot.1, &p, b"lru").unwrap();
        derive_master(&first.0, &first.1, &p, b"lru").unwrap();
        // Twice the capacity of other PMOs, the hot one used between each.
        for i in 0..2 * CACHE_MAX as u32 {
            let mut salt = [0u8; 32];
            salt[..4].copy_from_slice(&i.to_le_bytes());
            derive_master(&[3; 16], &salt, &p, b"lru").unwrap();
            assert_eq!(derive_master(&hot.0, &hot.1, &p, b"lru").unwrap(), a);
        }
        assert!(cached(&hot.0, &hot.1, b"lru"), "the hot master was evicted");
        assert!(!cached(&first.0, &first.1, b"lru"), "nothing was evicted");
        let len = CACHE.lock().unwrap().as_ref().map_or(0, |(m, _)| m.len());
        assert!(len <= CACHE_MAX, "{len}");
    }

    #[test]
    fn right_key_verifies_wrong_key_does_not() {
        let (uuid, salt) = ([1u8; 16], [2u8; 32]);
        let p = KdfParams::INSECURE_FAST;
        let m = derive_master(&uuid, &salt, &p, b"secret").unwrap();
        let mut e = pmo_format::Entry {
            generation: 1,
            uuid,
            size: 4096,
            extent_off: 1 << 20,
            extent_len: 1 << 20,
            base_addr: 1 << 40,
            scheme: 0,
            flags: 0,
            kdf: p,
            salt,
            verifier: verifier(&m, &uuid, &[]),
            name: "x".into(),
            created_unix_s: 0,
            tag_bytes: 0,
            wrapped: [0; 40],
            capacity: 0,
        };
        assert!(check_key(&e, b"secret").is_ok());
        assert!(matches!(
            check_key(&e, b"Secret"),
            Err(StoreError::WrongKey(_))
        ));
        // Another PMO's uuid gives another verifier.
        assert_ne!(verifier(&m, &[9; 16], &[]), e.verifier);
        // A protected entry binds its fields: editing the scheme fails the check.
        e.scheme = 9;
        e.tag_bytes = 32;
        e.verifier = verifier(&m, &uuid, &binding(&e));
        assert!(check_key(&e, b"secret").is_ok());
        for edit in [
            |e: &mut pmo_format::Entry| e.scheme = 0,
            |e: &mut pmo_format::Entry| e.scheme = 3,
            |e: &mut pmo_format::Entry| e.tag_bytes = 0,
            |e: &mut pmo_format::Entry| e.size = 8192,
        ] {
            let mut bad = e.clone();
            edit(&mut bad);
            assert!(check_key(&bad, b"secret").is_err());
        }
    }
}
