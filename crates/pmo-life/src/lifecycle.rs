//! A PMO's life after pcreate (`docs/lifecycle.md`): rename and rekey, each a namespace
//! update that no crash can leave half done.
//!
//! Both write the changed entry to a free slot with the next generation (copy A, then the
//! mirror, each body first and magic last), then the header page's copy of the entry, then
//! clear the old slot (mirror first). A crash before the new slot's magic is durable leaves the
//! old entry alone; after it, two slots hold the same PMO (uuid) and the higher generation wins
//! ([`pmo_meta::namespace::Namespace::find`]); recovery at open clears the older one and rewrites
//! the header copy. No page of the PMO is touched.

use pmo_format::Entry;

pub use pmo_meta::entries::header_copy;
use pmo_meta::entries::{switch_entry, validate_new_name};
use pmo_meta::error::{Result, StoreError};
use pmo_meta::keys;
use pmo_meta::redundancy::not_found;
use pmo_pool::pool::{PmoInfo, Pool};

/// Rename PMO `name` to `new` (needs its key; fails with `Busy` while it is attached and
/// with `Exists` if `new` is taken).
pub fn rename(pool: &Pool, name: &str, new: &str, key: &[u8]) -> Result<PmoInfo> {
    validate_new_name(new)?;
    replace_entry(pool, name, key, Some(new), |e, _| {
        e.name = new.to_string();
        Ok(())
    })
}

/// Change PMO `name`'s key from `key` to `new_key` without re-encrypting a page: the data
/// master key is re-wrapped under the new key and the verifier replaced, so the old key is
/// refused and the new one opens the same pages. Fails with `Busy` while attached.
pub fn rekey(pool: &Pool, name: &str, key: &[u8], new_key: &[u8]) -> Result<PmoInfo> {
    if new_key.is_empty() {
        return Err(StoreError::Invalid("the new key is empty".into()));
    }
    replace_entry(pool, name, key, None, |e, data| {
        keys::rewrap(e, data, new_key)
    })
}

/// Rewrite PMO `name`'s entry as `edit` makes it (given the entry and the PMO's data
/// master key), crash-consistently, under the metadata lock and the exclusive attach lock.
/// `taken`: a name the edit gives the entry, which must be free.
pub fn replace_entry(
    pool: &Pool,
    name: &str,
    key: &[u8],
    taken: Option<&str>,
    edit: impl FnOnce(&mut Entry, &keys::MasterKey) -> Result<()>,
) -> Result<PmoInfo> {
    let inner = &*pool.inner;
    let (_meta, mut ns) = pool.begin_ns_change()?;
    let m = &*inner.medium;
    let (slot, old) = ns
        .find(name)
        .map(|(i, e)| (i, e.clone()))
        .ok_or_else(|| not_found(&ns, name))?;
    let master = keys::check_key(&old, key)?;
    if let Some(new) = taken {
        if ns.find(new).is_some() {
            return Err(StoreError::Exists(new.into()));
        }
    }
    if let Some(damage) = ns.damage() {
        return Err(StoreError::Corrupt(format!(
            "cannot change '{name}': {damage}; `pmo check --repair` repairs or drops it first"
        )));
    }
    let Some(_attach) = pool.lock_attach_exclusive(&old, None)? else {
        return Err(pool.busy(&old));
    };
    let _no_readers = pool.lock_no_readers(&old)?;
    let new_slot = ns.free_slot().ok_or_else(|| {
        StoreError::NoSpace(format!(
            "the namespace is full ({} PMOs): a changed entry needs a free slot",
            inner.sb.ns_capacity
        ))
    })?;
    let mut entry = old.clone();
    edit(&mut entry, &master)?;
    entry.generation = old.generation + 1;
    let r = switch_entry(m, &inner.sb, slot, new_slot, &entry);
    ns.invalidate();
    inner.poison(r)?;
    Ok(pool.info_of(&entry))
}
