//! Version-table authentication: an incremental XOR-MAC (XMACC, counter-based) over the per-PMO
//! array of page versions.
//!
//! ```text
//! F(i, v)      = AES-256_{K_entry}(i u64 LE | v u64 LE)
//! G(epoch, n)  = AES-256_{K_epoch}(epoch u64 LE | n u64 LE)
//! tag(T, e)    = G(e, len T) XOR  XOR_{i < len T} F(i, T[i])          (16 bytes)
//! ```
//! Why this scheme: a psync changes a few entries; with the running XOR of the F terms kept in
//! DRAM, the new tag costs O(dirty pages) AES blocks (`update`: remove the old term, add the new),
//! not a pass over the whole table. It is Bellare, Guerin and Rogaway's counter-based XOR MAC
//! (XMACC, CRYPTO '95), proven a secure MAC when F and G are PRFs and the counter (our *epoch*)
//! never repeats: the epoch term stops an attacker from XOR-ing observed tags into a tag for a
//! mixed table, which a deterministic XOR-MAC would allow. Each index appears once per table, so
//! no terms cancel. AES-256 as PRF costs at most q^2/2^129 over the PRF bound. Forgery chance per
//! try is 2^-128.
//!
//! Obligations on the caller (the store):
//! - the epoch of each committed table is a fresh value from the PMO's [`crate::VersionCounter`]
//!   (so it never repeats, even across crashes), stored beside the tag in the PMO header;
//! - `update` must be given the entry's true old version (kept in DRAM after verification); a
//!   wrong one yields a tag that will not verify (fails closed).
//!
//! What it cannot catch: the whole header (table, epoch and tag) rolled back together to an older
//! valid state; that needs a trusted monotonic counter outside the medium (docs/security.md).

use crate::error::CryptError;
use crate::keys::PmoKeys;
use aws_lc_rs::constant_time;

/// Length of a version-table tag in bytes.
pub const TABLE_TAG_LEN: usize = 16;

/// Changes whose AES blocks [`VersionTableMac::update_many`] computes in one run.
pub const UPDATE_BATCH: usize = 8;

/// A version-table tag, kept in the PMO header beside its epoch.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct TableTag(pub [u8; TABLE_TAG_LEN]);

fn block(a: u64, b: u64) -> [u8; 16] {
    let mut x = [0u8; 16];
    x[..8].copy_from_slice(&a.to_le_bytes());
    x[8..].copy_from_slice(&b.to_le_bytes());
    x
}

fn xor_into(acc: &mut [u8; 16], x: &[u8; 16]) {
    for (a, b) in acc.iter_mut().zip(x) {
        *a ^= b;
    }
}

/// Running state of the table MAC: the XOR of all entry terms and the table length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionTableMac {
    entries_xor: [u8; 16],
    len: u64,
}

impl VersionTableMac {
    /// The empty table.
    pub fn new() -> Self {
        Self {
            entries_xor: [0; 16],
            len: 0,
        }
    }

    /// Build the running state from a whole table (O(len) AES blocks).
    pub fn from_table(keys: &PmoKeys, versions: &[u64]) -> Self {
        let mut acc = [0u8; 16];
        for (i, &v) in versions.iter().enumerate() {
            xor_into(
                &mut acc,
                &keys.vtable_entry.encrypt_block(&block(i as u64, v)),
            );
        }
        Self {
            entries_xor: acc,
            len: versions.len() as u64,
        }
    }

    /// Number of entries covered.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entry `index` changed from `old_version` to `new_version` (two AES blocks).
    pub fn update(
        &mut self,
        keys: &PmoKeys,
        index: u64,
        old_version: u64,
        new_version: u64,
    ) -> Result<(), CryptError> {
        if index >= self.len {
            return Err(CryptError::TableIndexOutOfRange {
                index,
                len: self.len,
            });
        }
        xor_into(
            &mut self.entries_xor,
            &keys.vtable_entry.encrypt_block(&block(index, old_version)),
        );
        xor_into(
            &mut self.entries_xor,
            &keys.vtable_entry.encrypt_block(&block(index, new_version)),
        );
        Ok(())
    }

    /// [`Self::update`] for several entries at once: `(index, old_version, new_version)` each
    /// (a psync's pages). The same result as calling `update` for each, in any order; nothing
    /// changes unless every index is in the table. Faster for a few entries: the AES blocks of
    /// up to [`UPDATE_BATCH`] changes are computed back to back, independent of one another, so
    /// the core overlaps them, and only then folded into the running XOR (`docs/commit.md`).
    pub fn update_many(
        &mut self,
        keys: &PmoKeys,
        changes: &[(u64, u64, u64)],
    ) -> Result<(), CryptError> {
        if let Some(&(index, ..)) = changes.iter().find(|c| c.0 >= self.len) {
            return Err(CryptError::TableIndexOutOfRange {
                index,
                len: self.len,
            });
        }
        let mut acc = u128::from_le_bytes(self.entries_xor);
        for chunk in changes.chunks(UPDATE_BATCH) {
            let mut terms = [[0u8; 16]; 2 * UPDATE_BATCH];
            for (t, &(index, old, new)) in terms.chunks_exact_mut(2).zip(chunk) {
                t[0] = keys.vtable_entry.encrypt_block(&block(index, old));
                t[1] = keys.vtable_entry.encrypt_block(&block(index, new));
            }
            for t in &terms[..2 * chunk.len()] {
                acc ^= u128::from_le_bytes(*t);
            }
        }
        self.entries_xor = acc.to_le_bytes();
        Ok(())
    }

    /// Append an entry (the PMO grew by one page).
    pub fn push(&mut self, keys: &PmoKeys, version: u64) {
        xor_into(
            &mut self.entries_xor,
            &keys.vtable_entry.encrypt_block(&block(self.len, version)),
        );
        self.len += 1;
    }

    /// Remove the last entry, whose current version is `last_version` (the PMO shrank).
    pub fn pop(&mut self, keys: &PmoKeys, last_version: u64) -> Result<(), CryptError> {
        if self.len == 0 {
            return Err(CryptError::TableIndexOutOfRange { index: 0, len: 0 });
        }
        self.len -= 1;
        xor_into(
            &mut self.entries_xor,
            &keys
                .vtable_entry
                .encrypt_block(&block(self.len, last_version)),
        );
        Ok(())
    }

    /// The tag of the current table committed under `epoch` (one AES block).
    pub fn tag(&self, keys: &PmoKeys, epoch: u64) -> TableTag {
        let mut t = keys.vtable_epoch.encrypt_block(&block(epoch, self.len));
        xor_into(&mut t, &self.entries_xor);
        TableTag(t)
    }
}

impl Default for VersionTableMac {
    fn default() -> Self {
        Self::new()
    }
}

/// Tag of a whole table under `epoch` (O(len)).
pub fn mac_table(keys: &PmoKeys, epoch: u64, versions: &[u64]) -> TableTag {
    VersionTableMac::from_table(keys, versions).tag(keys, epoch)
}

/// Verify a whole table read from the medium against its stored epoch and tag (constant-time
/// compare). On success, returns the running state for later incremental updates.
pub fn verify_table(
    keys: &PmoKeys,
    epoch: u64,
    versions: &[u64],
    tag: &TableTag,
) -> Result<VersionTableMac, CryptError> {
    let mac = VersionTableMac::from_table(keys, versions);
    let expect = mac.tag(keys, epoch);
    constant_time::verify_slices_are_equal(&expect.0, &tag.0).map_err(|_| CryptError::Integrity)?;
    Ok(mac)
}

/// [`verify_table`] of a table that differs from one verified before (`prev`, its running
/// state) in the entries `changes` lists (`(index, old_version, new_version)`, every changed
/// entry): O(changes) AES blocks. The running state is the XOR of every entry's term, so the
/// state it checks is exactly the whole table's: as strong as [`verify_table`], provided the
/// list is complete (a missing change makes the tag fail, closed).
pub fn verify_table_update(
    keys: &PmoKeys,
    prev: &VersionTableMac,
    epoch: u64,
    changes: &[(u64, u64, u64)],
    tag: &TableTag,
) -> Result<VersionTableMac, CryptError> {
    let mut mac = prev.clone();
    for chunk in changes.chunks(UPDATE_BATCH) {
        mac.update_many(keys, chunk)?;
    }
    let expect = mac.tag(keys, epoch);
    constant_time::verify_slices_are_equal(&expect.0, &tag.0).map_err(|_| CryptError::Integrity)?;
    Ok(mac)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MasterKey;
    use proptest::prelude::*;

    fn keys() -> PmoKeys {
        PmoKeys::derive(&MasterKey::from_bytes([6; 32]), [1; 16], [2; 16]).unwrap()
    }

    #[test]
    fn detects_entry_change_swap_truncation_and_epoch() {
        let k = keys();
        let table = vec![5u64, 9, 12, 3];
        let tag = mac_table(&k, 100, &table);
        verify_table(&k, 100, &table, &tag).unwrap();
        let mut rolled = table.clone();
        rolled[2] = 11;
        assert_eq!(
            verify_table(&k, 100, &rolled, &tag),
            Err(CryptError::Integrity)
        );
        let swapped = vec![9u64, 5, 12, 3];
        assert_eq!(
            verify_table(&k, 100, &swapped, &tag),
            Err(CryptError::Integrity)
        );
        assert_eq!(
            verify_table(&k, 100, &table[..3], &tag),
            Err(CryptError::Integrity)
        );
        assert_eq!(
            verify_table(&k, 101, &table, &tag),
            Err(CryptError::Integrity)
        );
        let other = PmoKeys::derive(&MasterKey::from_bytes([6; 32]), [1; 16], [3; 16]).unwrap();
        assert_eq!(
            verify_table(&other, 100, &table, &tag),
            Err(CryptError::Integrity)
        );
    }

    /// The attack a deterministic XOR-MAC allows, tag(A) ^ tag(B) ^ tag(C) = tag(A^B^C), fails
    /// because each tag carries its own epoch term.
    #[test]
    fn xor_combination_of_observed_tags_is_not_a_forgery() {
        let k = keys();
        let t1 = mac_table(&k, 1, &[1, 1]);
        let t2 = mac_table(&k, 2, &[2, 1]);
        let t3 = mac_table(&k, 3, &[1, 2]);
        let mut forged = t1.0;
        xor_into(&mut forged, &t2.0);
        xor_into(&mut forged, &t3.0);
        for epoch in [1, 2, 3, 4] {
            assert!(verify_table(&k, epoch, &[2, 2], &TableTag(forged)).is_err());
        }
    }

    #[test]
    fn index_checks() {
        let k = keys();
        let mut m = VersionTableMac::from_table(&k, &[1, 2]);
        assert!(m.update(&k, 2, 0, 1).is_err());
        m.pop(&k, 2).unwrap();
        m.pop(&k, 1).unwrap();
        assert_eq!(m, VersionTableMac::new());
        assert!(m.pop(&k, 0).is_err());
    }

    proptest! {
        /// The incremental state always equals a recomputation over the whole table.
        #[test]
        fn incremental_equals_recompute(
            initial in proptest::collection::vec(any::<u64>(), 0..40),
            edits in proptest::collection::vec((any::<u16>(), any::<u64>(), 0u8..4), 0..60),
            epoch in any::<u64>(),
        ) {
            let k = keys();
            let mut table = initial.clone();
            let mut mac = VersionTableMac::from_table(&k, &table);
            for (at, v, kind) in edits {
                match kind {
                    0 | 1 if !table.is_empty() => {
                        let i = usize::from(at) % table.len();
                        mac.update(&k, i as u64, table[i], v).unwrap();
                        table[i] = v;
                    }
                    2 => { mac.push(&k, v); table.push(v); }
                    _ => if let Some(last) = table.pop() { mac.pop(&k, last).unwrap(); },
                }
            }
            prop_assert_eq!(&mac, &VersionTableMac::from_table(&k, &table));
            let tag = mac.tag(&k, epoch);
            prop_assert!(verify_table(&k, epoch, &table, &tag).is_ok());
        }

        /// `update_many` (a psync's pages: distinct indices, more than one batch at times)
        /// equals `update` one entry at a time, and refuses an index past the table whole.
        #[test]
        fn update_many_equals_updates(
            initial in proptest::collection::vec(any::<u64>(), 1..64),
            edits in proptest::collection::btree_map(any::<u16>(), any::<u64>(), 0..24),
        ) {
            let k = keys();
            let mut table = initial.clone();
            let mut one = VersionTableMac::from_table(&k, &table);
            let mut many = one.clone();
            let mut changes = Vec::new();
            for (at, v) in edits {
                let i = usize::from(at) % table.len();
                if changes.iter().any(|&(j, _, _)| j == i as u64) {
                    continue;
                }
                one.update(&k, i as u64, table[i], v).unwrap();
                changes.push((i as u64, table[i], v));
                table[i] = v;
            }
            many.update_many(&k, &changes).unwrap();
            prop_assert_eq!(&many, &one);
            prop_assert_eq!(&many, &VersionTableMac::from_table(&k, &table));
            let before = many.clone();
            changes.push((table.len() as u64, 0, 1));
            prop_assert!(many.update_many(&k, &changes).is_err());
            prop_assert_eq!(&many, &before);
        }
    }

    #[test]
    fn an_update_verifies_exactly_what_a_whole_verification_does() {
        let k = keys();
        let old: Vec<u64> = (0..64).map(|i| i * 3).collect();
        let prev = VersionTableMac::from_table(&k, &old);
        let mut new = old.clone();
        new[5] = 1000;
        new[63] = 1001;
        let tag = mac_table(&k, 9, &new);
        let changes = [(5, old[5], 1000), (63, old[63], 1001)];
        let got = verify_table_update(&k, &prev, 9, &changes, &tag).unwrap();
        assert_eq!(got, verify_table(&k, 9, &new, &tag).unwrap());
        // A change left out, a wrong old version, another epoch: refused.
        assert!(verify_table_update(&k, &prev, 9, &changes[..1], &tag).is_err());
        assert!(verify_table_update(&k, &prev, 9, &[(5, 1, 1000), changes[1]], &tag).is_err());
        assert!(verify_table_update(&k, &prev, 10, &changes, &tag).is_err());
    }
}
