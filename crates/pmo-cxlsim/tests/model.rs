//! Property tests against the sequential model: random small traces, random parameters, every
//! scheme, crash points throughout: no violation ever. Plus timing sanity checks.

use pmo_cxlsim::checker::run_checked;
use pmo_cxlsim::kernels::{generate, Size};
use pmo_cxlsim::{simulate, Op, OpKind, Params, Scheme, Trace};
use proptest::prelude::*;

fn op_strategy() -> impl Strategy<Value = Op> {
    (0u8..4, 0u64..24, 0u32..40).prop_map(|(k, line, gap)| {
        let kind = match k {
            0 => OpKind::Load,
            1 => OpKind::Store,
            2 => OpKind::Flush,
            _ => OpKind::Fence,
        };
        // Lines 0..24 spread over few cache sets so evictions and write-backs happen too.
        let addr = if kind == OpKind::Fence {
            0
        } else {
            0x4000_0000 + line * 64 * 16
        };
        Op {
            addr,
            gap_cycles: gap,
            kind,
        }
    })
}

proptest! {
    // 256 cases by default; PROPTEST_CASES (the soak run) overrides.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_traces_keep_every_criterion(
        threads in prop::collection::vec(prop::collection::vec(op_strategy(), 1..120), 1..4),
        scheme in prop::sample::select(vec![Scheme::NoPb, Scheme::Pb, Scheme::PbRf]),
        hops in 0usize..4,
        pb_entries in 2usize..10,
        miss_window in 1usize..5,
        pm_wpq_entries in prop::sample::select(vec![0usize, 1, 4, 128]),
        pm_banks in prop::sample::select(vec![1usize, 2, 16]),
        rf_drain_high in prop::sample::select(vec![0.5f64, 0.8, 1.0]),
        pm_reads_first in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let trace = Trace { name: "prop".into(), threads };
        let p = Params {
            scheme, hops, pb_entries, cores: 4,
            l1_bytes: 1024, l1_ways: 2, l2_bytes: 4096, l2_ways: 2,
            outstanding_per_core: 4,
            miss_window,
            pm_wpq_entries,
            pm_banks,
            pm_reads_first,
            rf_drain_high,
            rf_drain_low: rf_drain_high / 2.0,
            ..Params::default()
        };
        let stats = run_checked(&p, &trace, 64, seed).expect("run");
        prop_assert_eq!(stats.violation_count, 0, "{:?}", stats.violations);
        let ops: usize = trace.op_count();
        prop_assert_eq!(stats.ops as usize, ops);
    }
}

#[test]
fn persist_latency_grows_with_hops_only_without_a_buffer() {
    // A fence after every flush keeps persists latency-bound (with whole-checkpoint bursts a
    // 16-entry buffer becomes throughput-bound and its drain round trip grows with hops).
    let trace = generate("fft", 8, Size::Small)
        .expect("workload")
        .with_fence_after_each_flush();
    let mut last_nopb = 0.0;
    let mut pb = Vec::new();
    for hops in 0..=4 {
        let n = simulate(
            &Params {
                scheme: Scheme::NoPb,
                hops,
                ..Params::default()
            },
            &trace,
        )
        .expect("run");
        assert!(n.persist_latency_ns() > last_nopb, "hops {hops}");
        last_nopb = n.persist_latency_ns();
        if hops >= 1 {
            let b = simulate(
                &Params {
                    scheme: Scheme::Pb,
                    hops,
                    ..Params::default()
                },
                &trace,
            )
            .expect("run");
            pb.push(b.persist_latency_ns());
        }
    }
    // With the buffer in the first switch, extra hops only slow the drains, not the acks.
    let spread =
        pb.iter().cloned().fold(f64::MIN, f64::max) / pb.iter().cloned().fold(f64::MAX, f64::min);
    assert!(
        spread < 2.0,
        "pb persist latency varies too much with hops: {pb:?}"
    );
    assert!(
        pb[3] < last_nopb,
        "pb at 4 hops {} vs nopb {}",
        pb[3],
        last_nopb
    );
}

#[test]
fn trace_file_round_trip_gives_the_same_run() {
    let trace = generate("radix", 4, Size::Small).expect("workload");
    let dir = std::env::temp_dir().join(format!("pmo-cxlsim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("radix.trace");
    trace.write_file(&path).expect("write");
    let back = Trace::read_file(&path).expect("read");
    assert_eq!(back.threads, trace.threads);
    let p = Params {
        scheme: Scheme::PbRf,
        ..Params::default()
    };
    let a = simulate(&p, &trace).expect("run");
    let mut b = simulate(&p, &back).expect("run");
    b.workload = a.workload.clone();
    assert_eq!(a, b);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pm_only_sees_misses_writebacks_and_flushes() {
    let trace = generate("raytrace", 8, Size::Small).expect("workload");
    let s = simulate(
        &Params {
            scheme: Scheme::NoPb,
            ..Params::default()
        },
        &trace,
    )
    .expect("run");
    let loads = trace.count(OpKind::Load) as u64;
    assert!(
        s.fabric_reads * 4 < loads,
        "the caches should filter most loads: {} of {loads}",
        s.fabric_reads
    );
    assert_eq!(s.pm_reads, s.fabric_reads);
    assert_eq!(s.pm_writes, s.persists + s.writebacks);
}
