//! The detach of a small PMO finishes inline; a larger one's goes to the background worker,
//! and the next attach waits for it (moved from `src/detach.rs`, where they were unit tests).
use std::sync::Arc;

use pmo_medium::crash::CrashMedium;

use pmo_engine::protect::ID_PENDING_OFF;
use pmo_meta::scheme::Scheme;
use pmo_pool::pool::PoolOptions;
use pmo_pool::pool::{Perm, Pool};

const PAGE_SIZE: usize = pmo_format::PAGE_SIZE as usize;

fn pending(pool: &Pool, extent_off: u64) -> u64 {
    let mut b = [0u8; 8];
    pool.medium()
        .read(extent_off + ID_PENDING_OFF, &mut b)
        .unwrap();
    u64::from_le_bytes(b)
}

/// A small `sp-id` PMO's detach writes its checksums and clears the pending word before
/// `detach` returns: nothing is left for the worker, nothing is in flight.
#[test]
fn a_small_pmo_finishes_its_detach_inline() {
    let pool = Pool::create_on(
        Arc::new(CrashMedium::new(4 << 20)),
        &PoolOptions {
            kdf: pmo_format::KdfParams::INSECURE_FAST,
            ns_capacity: Some(4),
            ..Default::default()
        },
    )
    .unwrap();
    let sp_id = Scheme::from_name("sp-id").unwrap();
    pool.pcreate_with("s", 4 * PAGE_SIZE as u64, b"k", Some(sp_id))
        .unwrap();
    let a = pmo_attach::attach::attach(&pool, "s", Perm::Write, b"k").unwrap();
    let (uuid, off) = (a.handle().core.uuid, a.handle().core.extent_off);
    assert!(a.handle().core.npages() <= pmo_attach::detach::inline_pages());
    a.write_at(0, &[0x5a; 2 * PAGE_SIZE]).unwrap();
    a.psync().unwrap();
    assert_ne!(
        pending(&pool, off),
        0,
        "sp-id's psync leaves checksums to detach"
    );
    a.detach().unwrap();
    assert!(
        !pmo_pool::inflight::in_flight(uuid),
        "no background detach queued"
    );
    assert_eq!(
        pending(&pool, off),
        0,
        "checksums written before detach returned"
    );
    // And they verify: the next attach reads the pages back without a crash repair.
    let a = pmo_attach::attach::attach(&pool, "s", Perm::Read, b"k").unwrap();
    let mut b = vec![0u8; PAGE_SIZE];
    a.read_at(PAGE_SIZE, &mut b).unwrap();
    assert!(b.iter().all(|&x| x == 0x5a));
}
