//! Shared body of the pool-parser fuzz target (`fuzz/fuzz_targets/open_pool.rs`) and of the
//! corruption property tests: open any bytes as a pool and use it. It must never panic or
//! misbehave: every problem is an error value.

use std::sync::Arc;

use pmo_medium::CrashMedium;

use crate::{Perm, Pool};

/// Key used by [`sample_image`] for every PMO.
pub const SAMPLE_KEY: &[u8] = b"fuzz";

/// Open `image` as a pool and exercise it: list, info, check, and read every PMO with the
/// sample key. Returns how far it got (for statistics), never panics on bad input.
pub fn open_and_exercise(image: &[u8]) -> usize {
    let medium = Arc::new(CrashMedium::from_image(image.to_vec()));
    let Ok(pool) = Pool::open_on(medium) else {
        return 0;
    };
    let _ = pool.pool_info();
    let _ = pool.check();
    let Ok(list) = pool.list() else { return 1 };
    let mut reached = 2;
    for info in list {
        let Ok(h) = pool.open_pmo(&info.name, Perm::Read, SAMPLE_KEY, None) else {
            continue;
        };
        let mut page = [0u8; 4096];
        for p in 0..(h.size() / 4096).min(8) {
            let _ = h.read_page(p, &mut page);
        }
        drop(h);
        if let Ok(h) = pool.open_pmo(&info.name, Perm::Write, SAMPLE_KEY, None) {
            let _ = h.write_at(0, b"fuzz");
        }
        reached = 3;
    }
    reached
}

/// A small valid pool image with two PMOs and a few psyncs: the seed for corruption.
pub fn sample_image() -> Vec<u8> {
    let m = Arc::new(CrashMedium::new(1 << 20));
    let opts = crate::PoolOptions {
        kdf: pmo_format::KdfParams::INSECURE_FAST,
        ns_capacity: Some(16),
        base_addr: Some(0x2000_0000_0000),
        medium: None,
        preallocate: false,
        scheme: crate::Scheme::SECURE,
    };
    let pool = Pool::create_on(m.clone(), &opts).expect("sample pool");
    pool.pcreate("one", 4 * 4096, SAMPLE_KEY).expect("pcreate");
    pool.pcreate_with("two", 2 * 4096, SAMPLE_KEY, Some(crate::Scheme::NONE))
        .expect("pcreate");
    let h = pool
        .open_pmo("one", Perm::Write, SAMPLE_KEY, None)
        .expect("open");
    h.write_at(100, b"hello").expect("write");
    h.write_at(5000, &[7u8; 9000]).expect("write");
    drop(h);
    m.current_image()
}
