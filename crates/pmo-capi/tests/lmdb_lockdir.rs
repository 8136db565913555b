//! Issue 31: `pmo_destroy` removes the LMDB lock directory of an environment the PMO held, as
//! `pmo destroy` does (`docs/lmdb.md`, `pmo-lmdb-lockdir`), and leaves one a process still has
//! open.

use std::ffi::CString;

use pmo::ffi::{pmo_create, pmo_destroy, pmo_pool_open};
use pmo_lmdb_lockdir::{lock_root, prepare, release, Owner};

#[test]
fn pmo_destroy_removes_the_pmos_lmdb_lock_directory() {
    let dir = std::env::temp_dir().join(format!("pmo-capi-lockdir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("locks")).unwrap();
    // Read by lock_root() here and in pmo_destroy: one test in this binary, so no other
    // thread reads the environment meanwhile.
    std::env::set_var("PMO_LMDB_LOCKDIR", dir.join("locks"));
    std::env::set_var("PMO_KDF", "fast");
    let pool_path = CString::new(dir.join("t.pool").to_str().unwrap()).unwrap();
    // SAFETY: valid C strings that outlive the calls.
    unsafe {
        assert_eq!(pmo_pool_open(pool_path.as_ptr(), 64 << 20), 0);
    }
    let (name, key) = (CString::new("env").unwrap(), CString::new("k").unwrap());
    // SAFETY: as above.
    unsafe { assert!(!pmo_create(name.as_ptr(), 1 << 20, key.as_ptr()).is_null()) };
    // The directory an LMDB environment on the PMO makes (owner file and all), closed again.
    let pool = pmo_store::Pool::open(&dir.join("t.pool")).unwrap();
    let owner = Owner::of(&pool, "env").unwrap();
    let lockdir = prepare(&lock_root(), &owner).unwrap();
    release(&lockdir);
    assert!(lockdir.join("owner").is_file());
    // SAFETY: as above.
    unsafe { assert_eq!(pmo_destroy(name.as_ptr(), key.as_ptr()), 0) };
    assert!(!lockdir.exists(), "pmo_destroy left {}", lockdir.display());
    drop(pool);
    let _ = std::fs::remove_dir_all(&dir);
}
