//! User keys: Argon2id derivation of a per-PMO master key, and the key verifier.
//!
//! The user key never reaches the medium. At pcreate a random 32-byte salt is drawn and
//! `master = Argon2id(key, salt, params)`; the entry stores `verifier = HKDF-Expand(master,
//! "pmo/v1/verifier" || pmo uuid)`. Attach and pdestroy re-derive and compare in constant time.
//! Later layers derive their data keys from the same master with other HKDF labels.
//!
//! A PMO of a *key family* (entry flag `FLAG_FAMILY`, format version 7) takes its master as
//! `HKDF-SHA256(salt = salt, IKM = Argon2id(key, family, params), info = "pmo/v1/family" ||
//! uuid)`: the Argon2id stage depends on the family's salt alone, so the PMOs of one family under
//! one key (a file store's files) cost one Argon2id per process, and each PMO's master still
//! needs its own random salt (destroy shreds it). `docs/security.md` "Key families".
//!
//! Argon2id is deliberately slow (tens of milliseconds), so a process caches masters it has
//! derived, keyed by a SHA-256 of (uuid, salt, params, key), and family stages keyed by
//! (family, params, key); entries are zeroized on eviction.
//! A full cache evicts its least recently used entry (it used to empty itself: a file store
//! that creates files then re-derived every open file's master, up to 40% of its opens).

use hkdf::Hkdf;
use pmo_format::KdfParams;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use crate::error::{Result, StoreError};
use crate::lru::SharedLru;

/// A per-PMO master key (zeroized on drop).
pub type MasterKey = Zeroizing<[u8; 32]>;

/// Most cached derivations kept per process.
const CACHE_MAX: usize = 256;

/// The cache: cache key -> master (values are `Zeroizing`: an evicted master is wiped).
static CACHE: SharedLru<MasterKey> = SharedLru::new(CACHE_MAX);

fn cache_key(uuid: &[u8; 16], salt: &[u8; 32], params: &KdfParams, key: &[u8]) -> [u8; 32] {
    cache_key_in(b"pmo/v1/kdf-cache", uuid, salt, params, key)
}

/// The cache key of a family's Argon2id stage (another domain than a PMO's own master).
fn family_cache_key(family: &[u8; 32], params: &KdfParams, key: &[u8]) -> [u8; 32] {
    cache_key_in(b"pmo/v1/kdf-family", &[], family, params, key)
}

fn cache_key_in(
    domain: &[u8],
    uuid: &[u8],
    salt: &[u8; 32],
    params: &KdfParams,
    key: &[u8],
) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(domain);
    h.update(uuid);
    h.update(salt);
    for v in [params.alg, params.m_kib, params.t, params.p] {
        h.update(v.to_le_bytes());
    }
    h.update(key);
    h.finalize().into()
}

/// The user-key master of the PMO `e` describes: [`derive_master`] from its own salt, or for a
/// PMO of a key family (`FLAG_FAMILY`) [`derive_family_master`].
pub fn master_for(e: &pmo_format::Entry, key: &[u8]) -> Result<MasterKey> {
    if e.flags & pmo_format::entry::FLAG_FAMILY != 0 {
        derive_family_master(&e.uuid, &e.salt, &e.kdf, &e.family, key)
    } else {
        derive_master(&e.uuid, &e.salt, &e.kdf, key)
    }
}

/// The master of a PMO of key family `family`: HKDF-SHA256 with the PMO's own `salt` over the
/// family's Argon2id stage (cached per process: one Argon2id per family and key), expanded
/// with "pmo/v1/family" and the PMO's uuid.
pub fn derive_family_master(
    uuid: &[u8; 16],
    salt: &[u8; 32],
    params: &KdfParams,
    family: &[u8; 32],
    key: &[u8],
) -> Result<MasterKey> {
    params.validate()?;
    let stage = argon_cached(family_cache_key(family, params, key), family, params, key)?;
    let hk = Hkdf::<Sha256>::new(Some(salt), stage.as_ref());
    let mut out = Zeroizing::new([0u8; 32]);
    hk.expand_multi_info(&[b"pmo/v1/family", uuid], out.as_mut())
        .expect("32 bytes is a valid HKDF length");
    Ok(out)
}

/// A key family's salt for `label` in the pool `pool_uuid`: SHA-256("pmo/v1/family" || pool
/// uuid || label). Unique per pool (its uuid is random), so no guess computed for one pool
/// serves another; public, as any salt.
pub fn family_salt(pool_uuid: &[u8; 16], label: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"pmo/v1/family");
    h.update(pool_uuid);
    h.update(label);
    h.finalize().into()
}

/// Argon2id derivations run by this process (not cache hits).
static DERIVATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many Argon2id derivations this process has run (cache hits excluded): what a key
/// family saves, for tests and benchmarks.
pub fn argon2_derivations() -> u64 {
    DERIVATIONS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Derive the master key of a PMO from the user key (cached per process).
pub fn derive_master(
    uuid: &[u8; 16],
    salt: &[u8; 32],
    params: &KdfParams,
    key: &[u8],
) -> Result<MasterKey> {
    params.validate()?;
    argon_cached(cache_key(uuid, salt, params, key), salt, params, key)
}

/// The KDF's parameters come from the medium (a pool's superblock, an export's entry), which a
/// forger can set to a valid 4 GiB: more memory than the machine has `available` is an error,
/// not an aborted allocation or the OOM killer.
fn fits_in_memory(m_kib: u32, available: Option<u64>) -> Result<()> {
    let need = u64::from(m_kib) * 1024;
    match available {
        Some(avail) if need > avail => Err(StoreError::Invalid(format!(
            "the key derivation asks for {} MiB of memory (Argon2id m={m_kib} KiB), more than \
             the {} MiB available",
            need >> 20,
            avail >> 20
        ))),
        _ => Ok(()),
    }
}

/// Argon2id(key, salt, params), from the per-process cache under `ck` or derived and cached.
fn argon_cached(
    ck: [u8; 32],
    salt: &[u8; 32],
    params: &KdfParams,
    key: &[u8],
) -> Result<MasterKey> {
    if let Some(m) = CACHE.get(&ck) {
        return Ok(m);
    }
    fits_in_memory(params.m_kib, pmo_os::mem_available())?;
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
    DERIVATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    CACHE.put(ck, out.clone());
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
/// A PMO of a key family leaves it (the new key is its own: its own Argon2id salt).
pub fn rewrap(e: &mut pmo_format::Entry, data: &MasterKey, new_key: &[u8]) -> Result<()> {
    use pmo_format::entry::{FLAG_FAMILY, FLAG_WRAPPED};
    e.salt = random_bytes::<32>();
    e.flags &= !FLAG_FAMILY;
    e.family = [0; 32];
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
    let master = master_for(e, key)?;
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
pub fn wrap_rotation(
    old_data: &MasterKey,
    uuid: &[u8; 16],
    new_data: &MasterKey,
) -> Result<[u8; 40]> {
    pmo_crypt::wrap::wrap_key(&rotation_kek(old_data, uuid), new_data)
        .map_err(|err| StoreError::Invalid(format!("key wrap: {err}")))
}

/// Unwrap a rotation's new data master with the old one (`None`: `data` is not the master it
/// was wrapped under).
pub fn unwrap_rotation(data: &MasterKey, uuid: &[u8; 16], wrapped: &[u8; 40]) -> Option<MasterKey> {
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
        CACHE.contains(&ck)
    }

    #[test]
    fn a_kdf_asking_for_more_memory_than_available_is_refused() {
        // 4 GiB (the most a pool accepts) against 1 GiB available.
        let e = fits_in_memory(4 << 20, Some(1 << 30))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("4096 MiB") && e.contains("1024 MiB available"),
            "{e}"
        );
        assert!(fits_in_memory(64 << 10, Some(1 << 30)).is_ok());
        assert!(
            fits_in_memory(1 << 20, Some(1 << 30)).is_ok(),
            "exactly what is available"
        );
        assert!(
            fits_in_memory(4 << 20, None).is_ok(),
            "no /proc/meminfo: not refused"
        );
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
        let len = CACHE.len();
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
            family: [0; 32],
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

    #[test]
    fn a_key_family_keeps_masters_apart_and_checks_keys() {
        use pmo_format::entry::FLAG_FAMILY;
        let p = KdfParams::INSECURE_FAST;
        let family = family_salt(&[4; 16], b"test-family");
        assert_ne!(family, family_salt(&[5; 16], b"test-family"));
        assert_ne!(family, family_salt(&[4; 16], b"other"));
        let a = derive_family_master(&[1; 16], &[1; 32], &p, &family, b"k").unwrap();
        let b = derive_family_master(&[2; 16], &[2; 32], &p, &family, b"k").unwrap();
        let b2 = derive_family_master(&[2; 16], &[3; 32], &p, &family, b"k").unwrap();
        assert_ne!(a, b, "two PMOs of a family share no master");
        assert_ne!(b, b2, "the PMO's own salt enters its master");
        // The same inputs give the same master; another key another one; a PMO's own
        // (non-family) master differs from its family master.
        assert_eq!(
            derive_family_master(&[1; 16], &[1; 32], &p, &family, b"k").unwrap(),
            a
        );
        assert_ne!(
            derive_family_master(&[1; 16], &[1; 32], &p, &family, b"K").unwrap(),
            a
        );
        assert_ne!(derive_master(&[1; 16], &[1; 32], &p, b"k").unwrap(), a);
        // check_key takes the family path from the entry's flag.
        let mut e = pmo_format::Entry {
            generation: 1,
            uuid: [1; 16],
            size: 4096,
            extent_off: 1 << 20,
            extent_len: 1 << 20,
            base_addr: 1 << 40,
            scheme: 9,
            flags: FLAG_FAMILY,
            kdf: p,
            salt: [1; 32],
            verifier: [0; 32],
            name: "f".into(),
            created_unix_s: 0,
            tag_bytes: 32,
            wrapped: [0; 40],
            capacity: 0,
            family,
        };
        e.verifier = verifier(&a, &e.uuid, &binding(&e));
        assert_eq!(check_key(&e, b"k").unwrap(), a);
        assert!(matches!(check_key(&e, b"x"), Err(StoreError::WrongKey(_))));
        // Clearing the flag (a medium edit) fails the key check: the flags are bound.
        let mut off = e.clone();
        off.flags = 0;
        off.family = [0; 32];
        assert!(check_key(&off, b"k").is_err());
        // Another family salt: the key no longer verifies.
        let mut other = e.clone();
        other.family[0] ^= 1;
        assert!(check_key(&other, b"k").is_err());
        // A rekey leaves the family and still opens with the new key, to the same data master.
        let data = check_key(&e, b"k").unwrap();
        rewrap(&mut e, &data, b"new").unwrap();
        assert_eq!(e.flags & FLAG_FAMILY, 0);
        assert_eq!(e.family, [0; 32]);
        assert_eq!(check_key(&e, b"new").unwrap(), data);
        assert!(check_key(&e, b"k").is_err());
    }

    #[test]
    fn family_members_after_the_first_run_no_argon2id() {
        // A family of its own (a salt no other test uses), so that the per-process cache
        // holds nothing of it yet; other tests may derive concurrently, so count in a loop
        // until a window without them shows the members cost nothing.
        let p = KdfParams::INSECURE_FAST;
        let family = family_salt(&[0xAB; 16], b"count");
        derive_family_master(&[0; 16], &[0; 32], &p, &family, b"c").unwrap();
        let quiet = (0..50).any(|round| {
            let before = argon2_derivations();
            for i in 0..16u8 {
                derive_family_master(&[i; 16], &[i.wrapping_add(round); 32], &p, &family, b"c")
                    .unwrap();
            }
            argon2_derivations() == before
        });
        assert!(quiet, "16 family members always ran Argon2id");
        // Without a family, each new salt runs one.
        let before = argon2_derivations();
        derive_master(&[0xCD; 16], &random_bytes::<32>(), &p, b"c").unwrap();
        assert!(argon2_derivations() > before);
    }
}
