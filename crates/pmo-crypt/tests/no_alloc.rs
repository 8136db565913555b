//! The page paths run inside the page-fault handler, so they must not allocate. A counting global
//! allocator (per thread, so other test threads do not interfere) checks every per-page call of
//! both modes and the version-table update.
//!
//! Scope: this counts Rust allocations. AWS-LC's C code allocates with libc malloc, which this
//! allocator does not see; by source inspection (aws-lc `e_aes.c`, `cipher.c`, AEAD seal/open)
//! the pre-initialised GCM and XTS contexts used here do not allocate on success. The failure
//! path may allocate AWS-LC's thread error queue once per thread (docs/security.md).

use pmo_crypt::faithful::{page_checksum, verify_page_checksum};
use pmo_crypt::{
    open_page, open_page_in_place, seal_page, seal_page_in_place, AeadCipher, FaithfulKeys,
    MasterKey, PageCtx, PageProtector, PmoKeys, VersionTableMac, PAGE_SIZE,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: delegates to the system allocator; the counter is a const-initialised thread local
// (no allocation, no destructor).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: caller upholds GlobalAlloc's contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: caller upholds GlobalAlloc's contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: caller upholds GlobalAlloc's contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(|c| c.get())
}

#[test]
fn page_paths_do_not_allocate() {
    // Setup (attach time) may allocate.
    let master = MasterKey::from_bytes([1; 32]);
    let keys = PmoKeys::derive(&master, [2; 16], [3; 16]).unwrap();
    let faithful = FaithfulKeys::derive(&master, [2; 16], [3; 16]).unwrap();
    let mut mac = VersionTableMac::from_table(&keys, &[1, 2, 3]);
    let protectors = [
        PageProtector::Plain,
        PageProtector::Xts {
            keys: FaithfulKeys::derive(&master, [2; 16], [3; 16]).unwrap(),
            checksum: false,
        },
        PageProtector::Xts {
            keys: FaithfulKeys::derive(&master, [2; 16], [3; 16]).unwrap(),
            checksum: true,
        },
        PageProtector::Aead {
            keys: std::sync::Arc::new(PmoKeys::derive(&master, [2; 16], [3; 16]).unwrap()),
        },
        PageProtector::Aead {
            keys: std::sync::Arc::new(
                PmoKeys::derive_with(&master, [2; 16], [3; 16], AeadCipher::Aegis256X4).unwrap(),
            ),
        },
    ];
    let plain = Box::new([0x77u8; PAGE_SIZE]);
    let mut sealed = Box::new([0u8; PAGE_SIZE]);
    let mut out = Box::new([0u8; PAGE_SIZE]);

    // Warm-up: first use of any lazily initialised state.
    let ctx0 = PageCtx {
        pool_uuid: [2; 16],
        pmo_uuid: [3; 16],
        page_index: 0,
        version: 1,
    };
    let tag0 = seal_page(&keys, &ctx0, &plain, &mut sealed).unwrap();
    open_page(&keys, &ctx0, &sealed, &tag0, &mut out).unwrap();
    for p in &protectors {
        let meta = p.seal(0, 1, &plain, &mut sealed).unwrap();
        p.open(0, 1, &meta, &sealed, &mut out).unwrap();
    }

    let before = allocations();
    for i in 0..64u64 {
        let ctx = PageCtx {
            pool_uuid: [2; 16],
            pmo_uuid: [3; 16],
            page_index: i,
            version: 10 + i,
        };
        let tag = seal_page(&keys, &ctx, &plain, &mut sealed).unwrap();
        open_page(&keys, &ctx, &sealed, &tag, &mut out).unwrap();
        let tag = seal_page_in_place(&keys, &ctx, &mut out).unwrap();
        open_page_in_place(&keys, &ctx, &mut out, &tag).unwrap();
        assert_eq!(out[..], plain[..]);

        faithful.encrypt_page(i, &plain, &mut sealed).unwrap();
        let sum = page_checksum(&plain);
        faithful
            .decrypt_and_verify(i, &sealed, &sum, &mut out)
            .unwrap();
        faithful.encrypt_page_in_place(i, &mut out).unwrap();
        faithful.decrypt_page_in_place(i, &mut out).unwrap();
        verify_page_checksum(&out, &sum).unwrap();

        mac.update(&keys, i % 3, 1, 2).unwrap();
        mac.update(&keys, i % 3, 2, 1).unwrap();
        let _ = mac.tag(&keys, 100 + i);

        for p in &protectors {
            let meta = p.seal(i, 10 + i, &plain, &mut sealed).unwrap();
            p.open(i, 10 + i, &meta, &sealed, &mut out).unwrap();
            let meta = p.seal_in_place(i, 10 + i, &mut out).unwrap();
            p.open(i, 10 + i, &meta, &out, &mut sealed).unwrap();
            assert_eq!(sealed[..], plain[..]);
        }
    }
    let after = allocations();
    assert_eq!(
        after - before,
        0,
        "page paths allocated {} times",
        after - before
    );
}

#[test]
fn counter_sees_allocations() {
    let before = allocations();
    let v = std::hint::black_box(vec![1u8; 100]);
    assert!(
        allocations() > before,
        "the counting allocator must count ({})",
        v.len()
    );
}
