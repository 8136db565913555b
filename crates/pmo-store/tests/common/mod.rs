//! Checks shared by pmo-store's integration tests (`mod common;` in each test file that uses
//! them). Not every test file uses every check.
#![allow(dead_code)]

pub mod stamps;

use pmo_store::{KdfParams, Pool, PoolOptions, Scheme};

/// Options of a test pool under `scheme`: the fast (insecure) KDF, 16 namespace slots.
pub fn opts(scheme: Scheme) -> PoolOptions {
    PoolOptions {
        kdf: KdfParams::INSECURE_FAST,
        ns_capacity: Some(16),
        scheme,
        ..Default::default()
    }
}

/// The pool is healthy: `Pool::check` finds no problem and used + free == heap (nothing leaked).
pub fn assert_healthy(pool: &Pool, ctx: &str) {
    let r = pool.check().unwrap();
    assert!(r.problems.is_empty(), "{ctx}: {:?}", r.problems);
    assert_eq!(
        r.used_bytes + r.free_bytes,
        r.heap_len,
        "{ctx}: space leaked"
    );
}

/// [`assert_healthy`], and every live PMO's entry copy in its header page agrees with its
/// namespace entry (name and size): what a rename, rekey or resize must keep in step.
pub fn assert_healthy_with_header_copies(pool: &Pool, ctx: &str) {
    assert_healthy(pool, ctx);
    for info in pool.list().unwrap() {
        let copy = pmo_store::lifecycle::header_copy(&**pool.medium(), info.extent_off)
            .unwrap()
            .unwrap_or_else(|| panic!("{ctx}: no header copy for '{}'", info.name));
        assert_eq!(copy.name, info.name, "{ctx}: header copy out of step");
        assert_eq!(copy.size, info.size, "{ctx}: header copy out of step");
    }
}

/// A protected pool image holds no plaintext: no 64-byte run of any of the test pages' filler
/// bytes `fillers`.
pub fn assert_no_plaintext(image: &[u8], scheme: Scheme, fillers: &[u8], ctx: &str) {
    if !scheme.is_protected() {
        return;
    }
    for &v in fillers {
        let marker = [v; 64];
        assert!(
            !image.windows(64).any(|w| w == marker),
            "{ctx}: plaintext (filler {v:#04x}) found on the medium"
        );
    }
}

/// Removes a test's pool (or export) file when dropped, also when the test panics, so that a
/// failing test leaves nothing in `/dev/shm`. Child processes of a test never hold one.
pub struct RemoveOnDrop(pub std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
