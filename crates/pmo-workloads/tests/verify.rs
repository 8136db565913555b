//! Every kernel computes correctly in PMOs (under `none` and `secure`, attach sessions of 1 and 3
//! psyncs), and the verifier catches a flipped value.

use std::path::PathBuf;

use pmo_store::{AttachOptions, KdfParams, Perm, Pool, PoolOptions, Scheme};
use pmo_workloads::{
    run, run_with_reference, verify_pmo, Reference, RunConfig, Size, VerifyFailure, Workload,
};

struct TempPool {
    pool: Option<Pool>,
    path: PathBuf,
}

impl Drop for TempPool {
    fn drop(&mut self) {
        drop(self.pool.take());
        let _ = std::fs::remove_file(&self.path);
    }
}

fn temp_pool(tag: &str) -> TempPool {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!("pmo-workloads-{tag}-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let pool = Pool::create(
        &path,
        64 << 20,
        &PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            ..Default::default()
        },
    )
    .expect("create pool");
    TempPool {
        pool: Some(pool),
        path,
    }
}

#[test]
fn every_kernel_verifies_under_none_and_secure_with_k_1_and_3() {
    let tp = temp_pool("matrix");
    let pool = tp.pool.as_ref().unwrap();
    for w in Workload::ALL {
        let reference = Reference::compute(w, w.dims(Size::Tiny), 1).unwrap();
        let steps = w.steps(w.dims(Size::Tiny));
        for scheme in ["none", "secure"] {
            for k in [1, 3] {
                for threads in [1, 2] {
                    let cfg = RunConfig {
                        scheme: Scheme::from_name(scheme).unwrap(),
                        session_psyncs: k,
                        iters_per_psync: Some(2),
                        threads,
                        ..RunConfig::new(w, Size::Tiny)
                    };
                    let r = run_with_reference(pool, &cfg, &reference).unwrap();
                    let what = format!("{w} {scheme} K={k} threads={threads}");
                    assert!(r.verified, "{what}: {:?}", r.verify_error);
                    let psyncs = steps.div_ceil(2) as u64;
                    assert_eq!(r.psyncs, psyncs, "{what}");
                    assert_eq!(r.sessions, psyncs.div_ceil(k as u64), "{what}");
                    assert!(r.pages_committed > 0, "{what}");
                    assert!(
                        r.wall_ns >= r.attach_ns + r.psync_ns + r.detach_ns + r.compute_ns,
                        "{what}"
                    );
                    assert!(!pool.exists(&r.pmo).unwrap(), "{what}: PMO left behind");
                }
            }
        }
    }
}

#[test]
fn steps_split_over_threads_on_pmo_memory_verify() {
    // Sizes big enough that a step is worth several threads (see par::MIN_WORK_PER_THREAD).
    let tp = temp_pool("threads");
    let pool = tp.pool.as_ref().unwrap();
    for (w, n, m, tile) in [
        (Workload::Conv2d, 128, 3, 0),
        (Workload::Tmm, 96, 0, 16),
        (Workload::Gauss, 300, 0, 0),
        (Workload::Cholesky, 400, 0, 0),
        (Workload::Lu, 300, 0, 0),
    ] {
        let dims = pmo_workloads::Dims { n, m, tile };
        let reference = Reference::compute(w, dims, 1).unwrap();
        let cfg = RunConfig {
            dims,
            threads: 4,
            scheme: Scheme::SECURE,
            iters_per_psync: Some(7),
            ..RunConfig::new(w, Size::Tiny)
        };
        let r = run_with_reference(pool, &cfg, &reference).unwrap();
        assert!(r.verified, "{w}: {:?}", r.verify_error);
    }
}

#[test]
fn calibrated_run_verifies() {
    let tp = temp_pool("calibrated");
    let pool = tp.pool.as_ref().unwrap();
    let r = run(pool, &RunConfig::new(Workload::Cholesky, Size::Tiny)).unwrap();
    assert!(r.verified, "{:?}", r.verify_error);
    assert!(r.iters_per_psync >= 1 && r.psyncs >= 1);
    let metrics = r.metrics();
    let get = |name| metrics.iter().find(|m| m.0 == name).map(|m| m.1);
    assert_eq!(get("wall"), Some(r.wall_ns as f64 / 1e6));
    assert_eq!(get("psyncs"), Some(r.psyncs as f64));
    assert_eq!(get("verified"), Some(1.0));
    assert!(r.params().contains(&("workload", "cholesky".to_string())));
}

#[test]
fn a_flipped_value_is_caught() {
    let tp = temp_pool("corrupt");
    let pool = tp.pool.as_ref().unwrap();
    for scheme in ["none", "secure"] {
        let w = Workload::Tmm;
        let reference = Reference::compute(w, w.dims(Size::Tiny), 1).unwrap();
        let cfg = RunConfig {
            scheme: Scheme::from_name(scheme).unwrap(),
            keep_pmo: true,
            iters_per_psync: Some(1),
            ..RunConfig::new(w, Size::Tiny)
        };
        let r = run_with_reference(pool, &cfg, &reference).unwrap();
        assert!(r.verified, "{scheme}: {:?}", r.verify_error);
        verify_pmo(pool, &r.pmo, &cfg.key, &reference).expect("untouched PMO verifies");

        // Flip the lowest mantissa bit of one element of C, durably.
        let index = w.len_f64(cfg.dims) - 5;
        let att = pool
            .attach_with(&r.pmo, Perm::Write, &cfg.key, AttachOptions::default())
            .unwrap();
        let mut bytes = [0u8; 8];
        att.read_at(index * 8, &mut bytes).unwrap();
        let flipped = f64::from_le_bytes(bytes).to_bits() ^ 1;
        att.write_at(index * 8, &flipped.to_le_bytes()).unwrap();
        att.psync().unwrap();
        att.detach().unwrap();

        match verify_pmo(pool, &r.pmo, &cfg.key, &reference) {
            Err(VerifyFailure::Mismatch(why)) => {
                assert!(why.contains(&format!("element {index} ")), "{why}")
            }
            other => panic!("{scheme}: corruption not caught: {other:?}"),
        }
        pool.pdestroy(&r.pmo, &cfg.key).unwrap();
    }
}

#[test]
fn a_value_flipped_before_verification_fails_the_run() {
    let tp = temp_pool("tamper");
    let pool = tp.pool.as_ref().unwrap();
    fn flip_one_bit(mem: &mut [f64]) {
        let i = mem.len() / 2;
        mem[i] = f64::from_bits(mem[i].to_bits() ^ 1);
    }
    for w in Workload::ALL {
        for scheme in ["none", "secure"] {
            let cfg = RunConfig {
                scheme: Scheme::from_name(scheme).unwrap(),
                tamper: Some(flip_one_bit),
                ..RunConfig::new(w, Size::Tiny)
            };
            let r = run(pool, &cfg).unwrap();
            assert!(!r.verified, "{w} {scheme}: flipped value passed");
            let why = r.verify_error.unwrap_or_default();
            assert!(why.contains("differs"), "{w} {scheme}: {why}");
        }
    }
}

#[test]
fn bad_parameters_are_errors() {
    let tp = temp_pool("params");
    let pool = tp.pool.as_ref().unwrap();
    let base = RunConfig::new(Workload::Lu, Size::Tiny);
    for cfg in [
        RunConfig {
            threads: 0,
            ..base.clone()
        },
        RunConfig {
            session_psyncs: 0,
            ..base.clone()
        },
        RunConfig {
            iters_per_psync: Some(0),
            ..base.clone()
        },
    ] {
        assert!(run(pool, &cfg).is_err());
    }
    let other = Reference::compute(Workload::Gauss, Workload::Gauss.dims(Size::Tiny), 1).unwrap();
    assert!(run_with_reference(pool, &base, &other).is_err());
    assert!(
        pool.list().unwrap().is_empty(),
        "nothing created by refused runs"
    );
}
