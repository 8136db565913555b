//! Issue 31: a pool that does not exist has one answer in every interface. In Rust it is
//! `StoreError::NoPool`, errno `ENOENT`, its message the `pmo` command's line word for word.

use pmo_store::{Pool, StoreError};

#[test]
fn opening_a_missing_pool_is_no_pool_with_the_cli_sentence() {
    let dir = std::env::temp_dir().join(format!("pmo-no-pool-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("absent.pool");
    let e = match Pool::open(&path) {
        Ok(_) => panic!("opened a pool that does not exist"),
        Err(e) => e,
    };
    assert!(
        matches!(&e, StoreError::NoPool { path: p } if p == &path),
        "{e:?}"
    );
    assert_eq!(e.errno(), libc::ENOENT);
    assert_eq!(
        e.to_string(),
        format!(
            "no pool at {}: create one with `pmo init --size 1GiB`, or name another with --pool or PMO_POOL",
            path.display()
        )
    );
    // Nothing is created by the failed open.
    assert!(!path.exists());
    // A directory that does not exist either: the same answer.
    let deeper = dir.join("no-such-dir").join("p.pool");
    assert!(matches!(
        Pool::open(&deeper),
        Err(StoreError::NoPool { .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}
