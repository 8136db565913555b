//! `Attachment::rollback`: pages written since the last psync get their committed contents back
//! (under every scheme and plaintext placement), are clean again, and a later psync commits
//! only what is written after the rollback.

use std::path::PathBuf;

use pmo_store::{KdfParams, Perm, Pool, PoolOptions, Scheme, StoreError};

const PAGE: usize = 4096;

fn pool(tag: &str) -> (Pool, PathBuf) {
    let path = std::env::temp_dir().join(format!("pmo-rollback-{tag}-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let opts = PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ..Default::default()
    };
    (Pool::create(&path, 64 << 20, &opts).unwrap(), path)
}

#[test]
fn rollback_restores_committed_pages_under_every_scheme() {
    let (pool, path) = pool("schemes");
    for (i, scheme) in Scheme::all_placements().enumerate() {
        let name = format!("p{i}");
        match pool.pcreate_with(&name, 4 * PAGE as u64, b"k", Some(scheme)) {
            Ok(_) => {}
            Err(StoreError::Unsupported(_)) => continue,
            Err(e) => panic!("{scheme}: {e}"),
        }
        let a = pool.attach(&name, Perm::Write, b"k").unwrap();
        a.write_at(0, &[1u8; 4 * PAGE]).unwrap();
        a.psync().unwrap();
        a.write_at(PAGE + 10, &[2u8; 100]).unwrap();
        a.write_at(3 * PAGE, &[3u8; PAGE]).unwrap();
        assert_eq!(a.rollback().unwrap(), 2, "{scheme}: pages restored");
        let mut buf = vec![0u8; 4 * PAGE];
        a.read_at(0, &mut buf).unwrap();
        assert!(
            buf.iter().all(|&b| b == 1),
            "{scheme}: contents after rollback"
        );
        // Clean again: nothing to commit, and the next psync commits only what follows.
        assert_eq!(a.psync().unwrap().pages, 0, "{scheme}");
        a.write_at(2 * PAGE, &[4u8; 8]).unwrap();
        assert_eq!(a.psync().unwrap().pages, 1, "{scheme}");
        a.detach().unwrap();
        let r = pool.attach(&name, Perm::Read, b"k").unwrap();
        r.read_at(0, &mut buf).unwrap();
        assert_eq!(&buf[2 * PAGE..2 * PAGE + 8], &[4u8; 8], "{scheme}");
        assert!(buf[..2 * PAGE].iter().all(|&b| b == 1), "{scheme}");
        assert!(
            matches!(r.rollback(), Err(StoreError::ReadOnly(_))),
            "{scheme}"
        );
        r.detach().unwrap();
    }
    drop(pool);
    std::fs::remove_file(path).unwrap();
}
