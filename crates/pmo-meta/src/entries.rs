//! Namespace entries beyond the namespace's own slots: names a new entry may take, the
//! crash-consistent switch of an entry to a new slot (rename, rekey, resize), the shredding of
//! freed slots and header-page copies, and the check that an entry lies inside this process's
//! view of the medium.

use pmo_format::{Entry, PmoLayout};
use pmo_medium::Medium;

use crate::error::{Result, StoreError};
use crate::namespace;
use crate::redundancy::{clear_slot, write_entry, write_header_copy};

/// Check a new name the way pcreate does.
pub fn validate_new_name(name: &str) -> Result<()> {
    Entry::validate_name(name).map_err(|e| StoreError::Invalid(e.to_string()))?;
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(StoreError::Invalid(format!(
            "PMO name {name:?} contains the control character {c:?}: use printable characters"
        )));
    }
    Ok(())
}

/// Replace the entry in `slot` by `entry` (same uuid, a higher generation, same extent) in
/// the free slot `new_slot`, crash-consistently (the module docs); the caller holds the
/// metadata lock and the PMO's exclusive attach lock.
pub fn switch_entry(
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
pub fn shred_slot(m: &dyn Medium, sb: &pmo_format::Superblock, slot: usize) -> Result<()> {
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
pub fn shred_leftovers(
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
pub fn shred_header_copy(m: &dyn Medium, extent_off: u64) -> Result<()> {
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

/// Refuse an entry whose extent lies past the end of this process's view of the medium: the
/// pool was grown by another process after this one opened it.
pub fn check_in_medium(e: &Entry, m: &dyn Medium) -> Result<()> {
    if e.extent_off.saturating_add(e.extent_len) > m.len() {
        return Err(StoreError::Invalid(format!(
            "PMO '{}' lies past the {} bytes this process mapped: the pool was grown since it was opened; reopen the pool",
            e.name,
            m.len()
        )));
    }
    Ok(())
}
