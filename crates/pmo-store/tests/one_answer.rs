//! Issue 31: the wrong-key, busy and full-pool situations in Rust give the kind, errno and
//! sentence of `docs/c-api.md`'s "One situation, one answer" table (the CLI prints the same
//! sentence after `pmo: `; C and Python carry the same `StoreError`).

use std::sync::Arc;

use pmo_medium::crash::CrashMedium;
use pmo_store::{KdfParams, Perm, Pool, PoolOptions, StoreError};

fn pool() -> Pool {
    Pool::create_on(
        Arc::new(CrashMedium::new(4 << 20)),
        &PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            ns_capacity: Some(8),
            ..Default::default()
        },
    )
    .unwrap()
}

#[test]
fn wrong_key_busy_and_full_pool_have_the_tables_kind_errno_and_sentence() {
    let pool = pool();
    pool.pcreate("a", 4 * 4096, b"right").unwrap();

    let e = pool
        .attach("a", Perm::Read, b"wrong")
        .err()
        .expect("a wrong key attached");
    assert!(matches!(&e, StoreError::WrongKey(n) if n == "a"), "{e:?}");
    assert_eq!(e.errno(), libc::EACCES);
    assert_eq!(e.to_string(), "wrong key for PMO 'a'");

    let writer = pool.attach("a", Perm::Write, b"right").unwrap();
    let e = pool
        .attach("a", Perm::Write, b"right")
        .err()
        .expect("a second writer attached");
    assert!(
        matches!(&e, StoreError::Busy { name, .. } if name == "a"),
        "{e:?}"
    );
    assert_eq!(e.errno(), libc::EBUSY);
    assert!(e.to_string().starts_with("PMO 'a' is attached "), "{e}");
    writer.detach().unwrap();

    let e = pool.pcreate("huge", 1 << 30, b"k").unwrap_err();
    assert!(matches!(&e, StoreError::NoSpace(_)), "{e:?}");
    assert_eq!(e.errno(), libc::ENOSPC);
    assert!(e.to_string().starts_with("pool is full: "), "{e}");
    // Nothing was lost: the PMO created before still opens with its key.
    pool.attach("a", Perm::Read, b"right")
        .unwrap()
        .detach()
        .unwrap();
}
