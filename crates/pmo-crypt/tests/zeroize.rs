//! Key material is wiped when its owner drops: the master key's bytes are zero after drop, and
//! the subkey wrappers (GCM context, AES PRF keys, XTS contexts) cleanse in their `Drop` (the
//! AES PRF key is checked in `src/ffi.rs`'s unit tests, the C contexts are freed by AWS-LC, whose
//! `OPENSSL_free` cleanses).

use pmo_crypt::MasterKey;
use std::mem::{size_of, ManuallyDrop};

#[test]
fn master_key_bytes_are_zero_after_drop() {
    let mut slot = ManuallyDrop::new(MasterKey::from_bytes([0xA5; 32]));
    let ptr = (&mut *slot as *mut MasterKey).cast::<u8>();
    // The key lives inline in the struct.
    // SAFETY: ptr points to a live MasterKey of size_of::<MasterKey>() bytes.
    let before: Vec<u8> =
        unsafe { std::slice::from_raw_parts(ptr, size_of::<MasterKey>()) }.to_vec();
    assert!(
        before.windows(32).any(|w| w.iter().all(|&b| b == 0xA5)),
        "key bytes are inline"
    );
    // SAFETY: drops the key exactly once; ManuallyDrop keeps the storage alive afterwards.
    unsafe { ManuallyDrop::drop(&mut slot) };
    // SAFETY: the storage is still owned by `slot` (ManuallyDrop never frees it); the bytes were
    // initialised and zeroize wrote zeros with volatile stores. Reading u8s cannot be invalid.
    let after: Vec<u8> =
        unsafe { std::slice::from_raw_parts(ptr, size_of::<MasterKey>()) }.to_vec();
    assert!(
        after.iter().all(|&b| b == 0),
        "master key not wiped: {after:?}"
    );
}
