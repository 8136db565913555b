//! Many threads using one PMO's keys at once, as concurrent page faults and a psync worker pool
//! do: every thread seals and opens its own pages through the shared keys (GCM context shared
//! read-only, XTS contexts taken from the slot set) and every result must be exact.
//! `PMO_CRYPT_SOAK=N` multiplies the iterations for a longer run.

use pmo_crypt::{FaithfulKeys, MasterKey, Page, PageProtector, PmoKeys, PAGE_SIZE};
use std::sync::Arc;

fn iterations() -> usize {
    let soak: usize = std::env::var("PMO_CRYPT_SOAK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    200 * soak.max(1)
}

#[test]
fn many_threads_share_one_pmos_keys() {
    let m = MasterKey::from_bytes([0x21; 32]);
    let protectors = Arc::new(vec![
        PageProtector::Aead {
            keys: std::sync::Arc::new(PmoKeys::derive(&m, [1; 16], [2; 16]).unwrap()),
        },
        PageProtector::Aead {
            keys: std::sync::Arc::new(
                PmoKeys::derive_with(&m, [1; 16], [2; 16], pmo_crypt::AeadCipher::Aegis256X4)
                    .unwrap(),
            ),
        },
        PageProtector::Xts {
            keys: FaithfulKeys::derive(&m, [1; 16], [2; 16]).unwrap(),
            checksum: true,
        },
    ]);
    // More threads than XTS slots (16), so slot contention is exercised.
    let threads = 24;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let protectors = Arc::clone(&protectors);
            std::thread::spawn(move || {
                let mut sealed = Box::new([0u8; PAGE_SIZE]);
                let mut out = Box::new([0u8; PAGE_SIZE]);
                for i in 0..iterations() {
                    let index = (t * 1_000_000 + i) as u64;
                    let pt: Page = core::array::from_fn(|j| (j as u8) ^ (t as u8) ^ (i as u8));
                    for p in protectors.iter() {
                        let meta = p.seal(index, index + 1, &pt, &mut sealed).expect("seal");
                        p.open(index, index + 1, &meta, &sealed, &mut out)
                            .expect("open");
                        assert_eq!(out[..], pt[..], "thread {t} iteration {i} {p:?}");
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("worker panicked");
    }
}
