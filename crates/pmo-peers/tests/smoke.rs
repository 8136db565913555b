//! Smoke tests: every peer benchmark returns a positive figure with tiny parameters, on the
//! emulated-PM medium (/dev/shm with PMEM_IS_PMEM_FORCE=1). They need libpmemobj and liblmdb,
//! which is why this crate is not a default member of the workspace.

use std::path::PathBuf;
use std::time::Duration;

use pmo_peers::{
    glibc_alloc_free, glibc_larson, lmdb_put_commit, pmdk_alloc_free, pmdk_larson,
    pmdk_tx_alloc_link, pmdk_tx_update, pmem_memcpy_persist, Error, LarsonParams, Measurement,
    Options, PmdkPool, Unit, Work,
};

fn tiny() -> Options {
    let dir = if PathBuf::from("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    Options {
        dir,
        repeats: 3,
        seed: 42,
        require_pmem: true,
        min_cpu_share: 0.0,
    }
}

fn assert_positive(m: &Measurement, unit: Unit) {
    assert_eq!(m.unit, unit);
    assert_eq!(m.samples.len(), 3);
    assert!(m.samples.iter().all(|s| s.is_finite() && *s > 0.0), "{m:?}");
    assert!(m.min <= m.median && m.median <= m.max, "{m:?}");
    assert!(m.ops_total > 0);
    // Some CPU time was seen, and never more than the threads could get.
    assert!(m.cpu_share > 0.0 && m.cpu_share <= 1.05, "{m:?}");
}

fn leftovers(opts: &Options) -> Vec<String> {
    let prefix = format!("pmo-peers-{}-", std::process::id());
    std::fs::read_dir(&opts.dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(&prefix))
        .collect()
}

#[test]
fn pmdk_alloc_free_small_and_huge_blocks() {
    let opts = tiny();
    for (size, threads) in [(64, 1), (4096, 2), (1 << 20, 1)] {
        let m = pmdk_alloc_free(&opts, size, threads, Work::Ops(200)).unwrap();
        assert_positive(&m, Unit::OpsPerSec);
        assert_eq!(m.ops_total, 3 * 200 * threads as u64);
    }
}

#[test]
fn glibc_alloc_free_is_positive() {
    let m = glibc_alloc_free(&tiny(), 256, 2, Work::Duration(Duration::from_millis(5))).unwrap();
    assert_positive(&m, Unit::OpsPerSec);
}

#[test]
fn larson_over_pmdk_and_glibc() {
    let params = LarsonParams {
        threads: 2,
        slots_per_thread: 50,
        min_bytes: 64,
        max_bytes: 1024,
        epochs: 2,
        work_per_epoch: Work::Ops(500),
    };
    let m = pmdk_larson(&tiny(), &params).unwrap();
    assert_positive(&m, Unit::OpsPerSec);
    assert_eq!(m.ops_total, 3 * 2 * 2 * 500);
    let m = glibc_larson(&tiny(), &params).unwrap();
    assert_positive(&m, Unit::OpsPerSec);
}

#[test]
fn pmdk_transactions() {
    for len in [64, 4096] {
        let m = pmdk_tx_update(&tiny(), len, Work::Ops(100)).unwrap();
        assert_positive(&m, Unit::MicrosPerOp);
    }
    let m = pmdk_tx_alloc_link(&tiny(), 64, Work::Ops(300)).unwrap();
    assert_positive(&m, Unit::MicrosPerOp);
    assert_eq!(m.ops_total, 900);
}

#[test]
fn libpmem_floor() {
    for len in [64, 4096] {
        let m = pmem_memcpy_persist(&tiny(), len, Work::Ops(500)).unwrap();
        assert_positive(&m, Unit::MicrosPerOp);
        assert_eq!(m.ops_total, 3 * 500);
    }
    assert!(matches!(
        pmem_memcpy_persist(&tiny(), 0, Work::Ops(1)),
        Err(Error::InvalidParameter(_))
    ));
}

#[test]
fn lmdb_put_commit_small_and_page_values() {
    for value in [64, 4096] {
        let m = lmdb_put_commit(&tiny(), value, Work::Ops(100)).unwrap();
        assert_positive(&m, Unit::MicrosPerOp);
        assert_eq!(m.ops_total, 300);
    }
}

#[test]
fn pool_is_emulated_pmem_and_scratch_is_removed() {
    let opts = tiny();
    let path = opts
        .dir
        .join(format!("pmo-peers-{}-own-pool", std::process::id()));
    {
        let pool = PmdkPool::create(&path, 16 << 20, true).unwrap();
        assert!(pool.is_pmem());
        assert!(path.exists());
    }
    assert!(!path.exists());
    // Too small a pool is a parameter error, not a PMDK failure.
    assert!(matches!(
        PmdkPool::create(&path, 1 << 20, true),
        Err(Error::InvalidParameter(_))
    ));
    pmdk_alloc_free(&opts, 64, 1, Work::Ops(100)).unwrap();
    lmdb_put_commit(&opts, 64, Work::Ops(10)).unwrap();
    let left = leftovers(&opts);
    // Other tests of this binary run concurrently and may hold scratch files right now; only
    // the names this test created must be gone.
    assert!(!left.iter().any(|n| n.ends_with("own-pool")), "{left:?}");
}

#[test]
fn bad_parameters_are_errors_not_panics() {
    let opts = tiny();
    assert!(matches!(
        pmdk_alloc_free(&opts, 0, 1, Work::Ops(1)),
        Err(Error::InvalidParameter(_))
    ));
    assert!(matches!(
        pmdk_tx_update(&opts, 0, Work::Ops(1)),
        Err(Error::InvalidParameter(_))
    ));
    assert!(matches!(
        pmdk_tx_alloc_link(&opts, 8, Work::Ops(1)),
        Err(Error::InvalidParameter(_))
    ));
    assert!(matches!(
        lmdb_put_commit(&opts, 0, Work::Ops(1)),
        Err(Error::InvalidParameter(_))
    ));
    let missing = Options {
        dir: PathBuf::from("/nonexistent/pmo-peers"),
        ..tiny()
    };
    assert!(matches!(
        pmdk_alloc_free(&missing, 64, 1, Work::Ops(1)),
        Err(Error::InvalidParameter(_))
    ));
}
