//! The file store's PMOs form one key family (`docs/filebench.md`, "Keys"): after the first
//! PMO of a store under a key, creating, growing, reading and checking more files runs no
//! further Argon2id in the process, and a store written by another process (a new pool handle
//! on the same medium) opens and checks the same way.
//!
//! One test function in this file, so that no other test of the process runs Argon2id while it
//! counts derivations.

use std::sync::Arc;

use pmo_fs::{FileStore, FsOptions};
use pmo_medium::crash::CrashMedium;
use pmo_store::keys::argon2_derivations;
use pmo_store::{KdfParams, Pool, PoolOptions, Scheme};

#[test]
fn a_store_runs_one_argon2id_per_process_and_key() {
    let pool = Pool::create_on(
        Arc::new(CrashMedium::new(16 << 20)),
        &PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            ns_capacity: Some(256),
            scheme: Scheme::from_name("secure").unwrap(),
            ..Default::default()
        },
    )
    .unwrap();
    let medium = pool.medium().clone();
    let fs = FileStore::open(pool, FsOptions::default()).unwrap();
    fs.mkdir("/d").unwrap();
    let before = argon2_derivations();
    for i in 0..40u32 {
        // 40 files, some over several segments (growth creates segment PMOs).
        let data = vec![i as u8; 1000 + 9000 * (i as usize % 4)];
        fs.write_file(&format!("/d/f{i}"), &data).unwrap();
        assert_eq!(fs.read_file(&format!("/d/f{i}")).unwrap(), data);
    }
    let c = fs.check().unwrap();
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    assert_eq!(c.files, 40);
    assert_eq!(
        argon2_derivations(),
        before,
        "the store's files ran Argon2id"
    );
    drop(fs);

    // The same medium through a new pool handle (another process would see the same entries):
    // every file reads back, still without an Argon2id here (the family stage is cached).
    let fs = FileStore::open(Pool::open_on(medium).unwrap(), FsOptions::default()).unwrap();
    for i in 0..40u32 {
        assert_eq!(
            fs.read_file(&format!("/d/f{i}")).unwrap(),
            vec![i as u8; 1000 + 9000 * (i as usize % 4)]
        );
    }
    assert_eq!(argon2_derivations(), before);
    // A wrong key opens nothing.
    let wrong = FileStore::open(
        fs.pool().clone(),
        FsOptions {
            key: b"not-the-store-key".to_vec(),
            ..FsOptions::default()
        },
    );
    let refused = match wrong {
        Err(_) => true,
        Ok(w) => w.read_file("/d/f1").is_err(),
    };
    assert!(refused, "a wrong key read a file");
}
