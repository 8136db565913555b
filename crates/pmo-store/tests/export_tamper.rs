//! A short smoke of the cargo-fuzz target `fuzz/fuzz_targets/import_export.rs`, which runs the
//! same body (`pmo_store::fuzzing::import_tampered`): random changes to a valid export file
//! (bytes XORed, the file cut, some with the entry's CRC recomputed as a forger would), each
//! imported into the pool it came from, must be refused as an integrity failure before anything
//! is created, never imported. `PROPTEST_CASES` raises the number of cases.

use pmo_store::fuzzing::{import_tampered, sample_export};
use proptest::prelude::*;

/// Offsets biased toward the header (its fields, the entry) and the trailing MAC.
fn change(len: usize) -> impl Strategy<Value = [u8; 4]> {
    let hot = prop_oneof![0..600usize, (len - 40)..len, 0..len + 1];
    (hot, any::<u8>(), 0u8..8).prop_map(|(off, x, cut)| {
        let o = (off as u32).to_le_bytes();
        // One change in 8 cuts the file.
        [o[0], o[1], o[2], if cut == 0 { 0 } else { x.max(1) }]
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        // PROPTEST_CASES raises it for soak runs (scripts/test).
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]
    #[test]
    fn tampered_exports_are_integrity_failures(
        fix_crc in any::<bool>(),
        changes in prop::collection::vec(change(sample_export().0.len()), 1..5),
    ) {
        let mut data = vec![fix_crc as u8];
        data.extend(changes.iter().flatten());
        // The body asserts the outcome against the file it imported: a changed file refused as
        // an integrity failure with the pool unchanged, an unchanged one imported whole. Its
        // answer, whether the file changed, is not always yes: a change can be undone (the same
        // byte XORed twice, or a KDF cost byte the body restores when it recomputes the CRC).
        import_tampered(&data);
    }
}

#[test]
fn the_unchanged_export_imports_with_its_contents() {
    assert!(!import_tampered(&[]));
    assert!(!import_tampered(&[1]));
}

#[test]
fn every_header_byte_flipped_is_refused() {
    let header = pmo_store::export::HEADER_LEN as u32;
    // With the CRC recomputed, the body keeps the entry's KDF cost fields and its CRC as
    // exported: those changes leave the file unchanged.
    let kept = |off: u32| (120..136).contains(&off) || (header - 4..header).contains(&off);
    for fix_crc in [0u8, 1] {
        for off in 0..header {
            let o = off.to_le_bytes();
            let changed = import_tampered(&[fix_crc, o[0], o[1], o[2], 0x01]);
            assert_eq!(changed, fix_crc == 0 || !kept(off), "{off}");
        }
    }
}
