//! A PMO's life after pcreate (`docs/lifecycle.md`): rename and rekey, each a namespace
//! update that no crash can leave half done.
//!
//! Both write the changed entry to a free slot with the next generation (copy A, then the
//! mirror, each body first and magic last), then the header page's copy of the entry, then
//! clear the old slot (mirror first). A crash before the new slot's magic is durable leaves the
//! old entry alone; after it, two slots hold the same PMO (uuid) and the higher generation wins
//! ([`crate::namespace::Namespace::find`]); recovery at open clears the older one and rewrites
//! the header copy. No page of the PMO is touched.

use pmo_format::{Entry, PmoLayout};
use pmo_medium::Medium;

use crate::error::{Result, StoreError};
use crate::keys;
use crate::namespace;
use crate::pool::{PmoInfo, Pool};
use crate::redundancy::{clear_slot, not_found, write_entry, write_header_copy};

/// Check a new name the way pcreate does.
pub(crate) fn validate_new_name(name: &str) -> Result<()> {
    Entry::validate_name(name).map_err(|e| StoreError::Invalid(e.to_string()))?;
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(StoreError::Invalid(format!(
            "PMO name {name:?} contains the control character {c:?}: use printable characters"
        )));
    }
    Ok(())
}

impl Pool {
    /// Rename PMO `name` to `new` (needs its key; fails with `Busy` while it is attached and
    /// with `Exists` if `new` is taken).
    pub fn rename(&self, name: &str, new: &str, key: &[u8]) -> Result<PmoInfo> {
        validate_new_name(new)?;
        self.replace_entry(name, key, Some(new), |e, _| {
            e.name = new.to_string();
            Ok(())
        })
    }

    /// Change PMO `name`'s key from `key` to `new_key` without re-encrypting a page: the data
    /// master key is re-wrapped under the new key and the verifier replaced, so the old key is
    /// refused and the new one opens the same pages. Fails with `Busy` while attached.
    pub fn rekey(&self, name: &str, key: &[u8], new_key: &[u8]) -> Result<PmoInfo> {
        if new_key.is_empty() {
            return Err(StoreError::Invalid("the new key is empty".into()));
        }
        self.replace_entry(name, key, None, |e, data| keys::rewrap(e, data, new_key))
    }

    /// Rewrite PMO `name`'s entry as `edit` makes it (given the entry and the PMO's data
    /// master key), crash-consistently, under the metadata lock and the exclusive attach lock.
    /// `taken`: a name the edit gives the entry, which must be free.
    pub(crate) fn replace_entry(
        &self,
        name: &str,
        key: &[u8],
        taken: Option<&str>,
        edit: impl FnOnce(&mut Entry, &keys::MasterKey) -> Result<()>,
    ) -> Result<PmoInfo> {
        let inner = &*self.inner;
        let (_meta, mut ns) = self.begin_ns_change()?;
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
        let Some(_attach) = self.lock_attach_exclusive(&old, None)? else {
            return Err(self.busy(&old));
        };
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
        Ok(self.info_of(&entry))
    }
}

/// Replace the entry in `slot` by `entry` (same uuid, a higher generation, same extent) in
/// the free slot `new_slot`, crash-consistently (the module docs); the caller holds the
/// metadata lock and the PMO's exclusive attach lock.
pub(crate) fn switch_entry(
    m: &dyn Medium,
    sb: &pmo_format::Superblock,
    slot: usize,
    new_slot: usize,
    entry: &Entry,
) -> Result<()> {
    namespace::bump_gen(m, sb)?;
    write_entry(m, sb, new_slot, entry)?;
    if sb.ns_mirror != 0 {
        write_header_copy(m, entry, true)?;
        m.fence()?;
    }
    clear_slot(m, sb, slot)?;
    m.fence()?;
    // The old salt and verifier go too: after a rekey the old key must not re-derive
    // the data master from what is left on the medium.
    shred_slot(m, sb, slot)?;
    m.fence()?;
    namespace::bump_gen(m, sb)?;
    Ok(())
}

/// Zero the body (bytes 8..) of both copies of a slot already freed (its first word zero and
/// fenced): its salt, verifier and wrapped key, so nothing left can re-derive or unwrap a key.
/// The slot stays free whatever part of this a crash keeps. Flushed, not fenced.
pub(crate) fn shred_slot(m: &dyn Medium, sb: &pmo_format::Superblock, slot: usize) -> Result<()> {
    let zero = [0u8; pmo_format::ENTRY_SIZE - 8];
    let mut copies = vec![false];
    if sb.ns_mirror != 0 {
        copies.push(true);
    }
    for mirror in copies {
        let off = namespace::copy_offset(sb, slot, mirror) + 8;
        m.write(off, &zero)?;
        m.flush(off, zero.len() as u64)?;
    }
    Ok(())
}

/// Shred every free slot copy whose body is not zero (`ns` freshly loaded); fenced. Returns
/// whether anything was shredded (the caller reloads).
pub(crate) fn shred_leftovers(
    m: &dyn Medium,
    sb: &pmo_format::Superblock,
    ns: &namespace::Namespace,
) -> Result<bool> {
    let len = sb.ns_capacity as usize * pmo_format::ENTRY_SIZE;
    let mut found = Vec::new();
    let mut copies = vec![sb.ns_offset];
    if sb.ns_mirror != 0 {
        copies.push(sb.ns_mirror);
    }
    for base in copies {
        let mut raw = vec![0u8; len];
        m.read(base, &mut raw)?;
        for (i, b) in raw.chunks_exact(pmo_format::ENTRY_SIZE).enumerate() {
            let free = ns.slots.get(i).is_some_and(Option::is_none)
                && !ns.corrupt.iter().any(|(c, _)| *c == i);
            if free && b[..8].iter().all(|&x| x == 0) && b.iter().any(|&x| x != 0) {
                found.push(i);
            }
        }
    }
    found.dedup();
    for &i in &found {
        shred_slot(m, sb, i)?;
    }
    if !found.is_empty() {
        m.fence()?;
    }
    Ok(!found.is_empty())
}

/// Zero the whole header-page copy of a destroyed PMO's entry (its magic already cleared and
/// fenced). Flushed, not fenced.
pub(crate) fn shred_header_copy(m: &dyn Medium, extent_off: u64) -> Result<()> {
    let off = extent_off + PmoLayout::ENTRY_COPY_OFF;
    m.write(off, &[0u8; pmo_format::ENTRY_SIZE])?;
    m.flush(off, pmo_format::ENTRY_SIZE as u64)?;
    Ok(())
}

/// Read the header page's copy of `e`'s entry (for tests and `check`).
pub fn header_copy(m: &dyn Medium, e_extent_off: u64) -> Result<Option<Entry>> {
    let mut b = [0u8; pmo_format::ENTRY_SIZE];
    m.read(e_extent_off + PmoLayout::ENTRY_COPY_OFF, &mut b)?;
    Ok(Entry::decode(&b).ok().flatten())
}
