//! Rotate (`docs/lifecycle.md`): re-encrypt every page of a PMO under a new random data master
//! key. The mechanism (the rotation record, the re-encryption in batches, its resumption at a
//! keyed open) is the pool layer's `pmo_pool::rotation`; this is the operation: steps 1-4 of
//! its module docs, of which the entry's replacement (step 3) is a life-cycle change.

use pmo_meta::keys::{self, MasterKey};
use pmo_pool::rotation::{read_record, reencrypt, write_record, Record};

use pmo_engine::engine::PmoCore;
use pmo_meta::error::{Result, StoreError};
use pmo_meta::scheme::Scheme;
use pmo_pool::pool::{Perm, PmoInfo, Pool, Progress};

/// Whether PMO `name` has a rotation record: a rotation a crash cut off (its next keyed
/// open, or `rotate`, finishes it).
pub fn rotation_unfinished(pool: &Pool, name: &str) -> Result<bool> {
    let core = PmoCore::new(&pool.entry(name)?)?;
    Ok(read_record(&*pool.inner.medium, &core)?.is_some())
}

/// Re-encrypt every page of PMO `name` under a new random data master key (module docs);
/// the key stays `key`. Resumes a rotation a crash cut off. Fails with `Busy` while the
/// PMO is attached; `Invalid` for an unencrypted PMO. `progress`: (pages done, pages).
pub fn rotate(pool: &Pool, name: &str, key: &[u8], progress: Progress) -> Result<PmoInfo> {
    let entry = pool.entry(name)?;
    let scheme = Scheme::from_code(entry.scheme)?;
    if !scheme.is_protected() {
        return Err(StoreError::Invalid(format!(
            "PMO '{name}' is not encrypted (scheme {scheme}): there is no key to rotate"
        )));
    }
    let wrapped = {
        // The open finishes a rotation a crash cut off (step 2).
        let h = pool.open_pmo(name, Perm::Write, key, None)?;
        let _no_readers = pool.lock_no_readers(&entry)?;
        let m = &*pool.inner.medium;
        match read_record(m, &h.core)? {
            Some(r) => r.wrapped,
            None => {
                let new: MasterKey = zeroize::Zeroizing::new(keys::random_bytes::<32>());
                let mut r = Record {
                    gen: 0,
                    cursor: 0,
                    cursor_seq: h.core.seq(),
                    base_seq: h.core.seq(),
                    wrapped: keys::wrap_rotation(&h.master, &h.core.uuid, &new)?,
                };
                let _rotating = pool.inner.locker.lock_blocking(
                    pmo_meta::locks::rotate_word(h.core.extent_off),
                    pmo_os::lock::LockKind::Exclusive,
                )?;
                pool.inner.poison(write_record(m, &h.core, &mut r))?;
                reencrypt(pool, &h.core, scheme, &h.master, &new, &mut r, progress)?;
                r.wrapped
            }
        }
    };
    // Step 3: the entry gives the new data master (unless a crash came after it).
    let uuid = entry.uuid;
    let info =
        crate::lifecycle::replace_entry(
            pool,
            name,
            key,
            None,
            |e, data| match keys::unwrap_rotation(data, &uuid, &wrapped) {
                Some(new) => keys::rewrap(e, &new, key),
                None => Ok(()),
            },
        )?;
    // Step 4: the next open finds the record's key no longer unwraps, and zeroes it.
    drop(pool.open_pmo(name, Perm::Write, key, None)?);
    Ok(info)
}
