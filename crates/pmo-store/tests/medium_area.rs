//! A new PMO whose plaintext copy lives on the medium (`:medium`) starts with its plaintext area
//! zeroed: the free space under it may hold an old extent's bytes, and `check` holds a
//! detached PMO's area to all zeros (anything else would read as plaintext left behind).

use std::sync::Arc;

use pmo_medium::crash::CrashMedium;
use pmo_store::{KdfParams, Perm, Pool, PoolOptions, Scheme};

const KEY: &[u8] = b"area-key";

#[test]
fn a_medium_pmo_created_over_freed_space_checks_clean() {
    let pool = Pool::create_on(
        Arc::new(CrashMedium::new(32 << 20)),
        &PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            ns_capacity: Some(16),
            scheme: Scheme::from_name("secure").unwrap(),
            ..Default::default()
        },
    )
    .unwrap();
    // Fill most of the heap with written pages of an ordinary PMO, then free it.
    let (old_size, size) = (6 << 20, 2 << 20);
    pool.pcreate("old", old_size, KEY).unwrap();
    {
        let h = pool.open_pmo("old", Perm::Write, KEY, None).unwrap();
        let data = vec![0xA5u8; old_size as usize];
        h.write_at(0, &data).unwrap();
    }
    pmo_store::wait_for_background_detaches();
    pool.pdestroy("old", KEY).unwrap();
    for name in ["sp:medium", "secure:medium", "bp-ip:medium"] {
        let scheme = Scheme::from_name(name).unwrap();
        pool.pcreate_with("new", size, KEY, Some(scheme)).unwrap();
        let report = pool.check().unwrap();
        assert!(report.problems.is_empty(), "{name}: {:?}", report.problems);
        pool.pdestroy("new", KEY).unwrap();
    }
}
