//! Random corruption of a valid pool image (bit flips, overwritten runs, truncation), biased
//! toward metadata, then open + use: never a panic, only errors. A short smoke of the cargo-fuzz
//! target `fuzz/fuzz_targets/open_pool.rs`, which runs the same body.
//! `PROPTEST_CASES` raises the number of cases.

use pmo_store::fuzzing::{open_and_exercise, sample_image};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Damage {
    Flip { offset: usize, bit: u8 },
    Overwrite { offset: usize, bytes: Vec<u8> },
    Truncate { len: usize },
}

fn damage(len: usize) -> impl Strategy<Value = Damage> {
    // Most metadata lives in the first 64 KiB (superblocks, config, namespace) and at the start
    // of each PMO extent; aim 3 of 4 mutations there.
    let hot = 0..(96 << 10).min(len);
    let anywhere = 0..len;
    let offset = prop_oneof![3 => hot, 1 => anywhere];
    prop_oneof![
        6 => (offset.clone(), 0u8..8).prop_map(|(offset, bit)| Damage::Flip { offset, bit }),
        3 => (offset, prop::collection::vec(any::<u8>(), 1..64)).prop_map(|(offset, bytes)| Damage::Overwrite { offset, bytes }),
        1 => (0..len).prop_map(|len| Damage::Truncate { len }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        // PROPTEST_CASES raises it for soak runs (scripts/test).
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]
    #[test]
    fn corrupted_pools_give_errors_not_panics(damages in prop::collection::vec(damage(1 << 20), 1..6)) {
        let mut image = sample_image();
        for d in damages {
            match d {
                Damage::Flip { offset, bit } => { if offset < image.len() { image[offset] ^= 1 << bit } }
                Damage::Overwrite { offset, bytes } => {
                    let end = (offset + bytes.len()).min(image.len());
                    if offset < end { image[offset..end].copy_from_slice(&bytes[..end - offset]) }
                }
                Damage::Truncate { len } => image.truncate(len),
            }
        }
        open_and_exercise(&image);
    }
}

#[test]
fn the_sample_itself_is_fully_exercised() {
    assert_eq!(open_and_exercise(&sample_image()), 3);
}

#[test]
fn one_flip_in_every_namespace_byte_is_caught_or_harmless() {
    // Exhaustive over the first namespace entry: decode never yields a different valid PMO.
    let base = sample_image();
    let ns = pmo_format::superblock::NS_OFFSET as usize;
    for byte in ns..ns + pmo_format::ENTRY_SIZE {
        let mut img = base.clone();
        img[byte] ^= 0x10;
        open_and_exercise(&img);
    }
}

/// A pool a newer pmo wrote (its superblock's checksum right, its version above ours), in one
/// copy (a newer build's upgrade cut off between the copies) or both, is refused as
/// unsupported (CLI exit 1), never reported as corruption nor "repaired" back to our version.
#[test]
fn a_pool_from_a_newer_build_is_unsupported_not_corrupt() {
    use pmo_format::superblock::SB_OFFSETS;
    use pmo_medium::Medium;
    use pmo_store::{Pool, StoreError};
    use std::sync::Arc;
    let newer = |image: &mut Vec<u8>, copy: usize| {
        let o = SB_OFFSETS[copy] as usize;
        let v = pmo_format::FORMAT_VERSION + 1;
        image[o + 8..o + 12].copy_from_slice(&v.to_le_bytes());
        let c = pmo_format::crc(&image[o..o + 252]);
        image[o + 252..o + 256].copy_from_slice(&c.to_le_bytes());
    };
    for copies in [vec![0], vec![1], vec![0, 1]] {
        let mut image = sample_image();
        for &c in &copies {
            newer(&mut image, c);
        }
        let before = image.clone();
        let m = Arc::new(pmo_medium::crash::CrashMedium::from_image(image));
        match Pool::open_on(m.clone()) {
            Err(StoreError::Unsupported(msg)) => {
                assert!(msg.contains("newer"), "{copies:?}: {msg}")
            }
            Err(e) => panic!("{copies:?}: {e}"),
            Ok(_) => panic!("{copies:?}: opened"),
        }
        let mut after = vec![0u8; before.len()];
        m.read(0, &mut after).unwrap();
        assert!(after == before, "{copies:?}: the refused pool was written");
    }
}
