//! Latency emulation: profile parsing, the cost model on a manual clock (exact), the real clock
//! (with tolerance), the counters, and that the wrapper keeps the crash medium's semantics.

use std::sync::Arc;

use pmo_medium::latency::{
    numa_node_count, process_stats, CostMode, LatencyError, ManualClock, DRAIN_QUEUE_BYTES,
    NAMED_PROFILES,
};
use pmo_medium::{CrashMedium, LatencyMedium, LatencyProfile, Medium, MediumError};

fn custom(spec: &str) -> LatencyProfile {
    LatencyProfile::parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// A wrapper on a zeroed crash medium with a manual clock.
fn manual(
    profile: LatencyProfile,
    len: u64,
) -> (
    LatencyMedium<CrashMedium, Arc<ManualClock>>,
    Arc<ManualClock>,
) {
    let clock = Arc::new(ManualClock::new());
    let m = LatencyMedium::with_clock(Arc::new(CrashMedium::new(len)), profile, Arc::clone(&clock));
    (m, clock)
}

#[test]
fn named_profiles_parse() {
    assert_eq!(
        LatencyProfile::parse("dram").unwrap(),
        LatencyProfile::dram()
    );
    assert!(LatencyProfile::dram().is_free());
    let o = LatencyProfile::parse("optane").unwrap();
    assert_eq!(
        (o.read_ns, o.read_seq_ns, o.write_ns, o.unit_bytes),
        (305, 169, 90, 256)
    );
    assert_eq!((o.read_gbps, o.write_gbps), (Some(6.6), Some(2.3)));
    let near = LatencyProfile::parse(" cxl-near ").unwrap();
    let far = LatencyProfile::parse("cxl-far").unwrap();
    assert_eq!((near.read_ns, near.write_ns), (170, 170));
    assert_eq!((far.read_ns, far.write_ns), (400, 400));
    assert_eq!(
        (o.mode, near.mode, far.mode),
        (CostMode::Floor, CostMode::Added, CostMode::Added)
    );
    for p in [LatencyProfile::dram(), o, near, far] {
        assert_eq!(p.spec(), p.name);
        assert_eq!(LatencyProfile::parse(&p.spec()).unwrap(), p);
    }
    for name in NAMED_PROFILES {
        assert_eq!(LatencyProfile::parse(name).unwrap().name, name);
    }
}

#[test]
fn custom_profiles_parse() {
    let p = custom("custom:read_ns=300,write_ns=100,read_gbps=6.6,write_gbps=2.3,unit=256");
    assert_eq!(p.name, "custom");
    assert_eq!((p.read_ns, p.read_seq_ns, p.write_ns), (300, 300, 100));
    assert_eq!(
        (p.read_gbps, p.write_gbps, p.unit_bytes),
        (Some(6.6), Some(2.3), 256)
    );
    // Keys are optional, in any order, with spaces around them.
    let q = custom("custom: unit = 128 , read_seq_ns=50,read_ns=70, mode=added");
    assert_eq!((q.read_ns, q.read_seq_ns, q.write_ns), (70, 50, 0));
    assert_eq!((p.mode, q.mode), (CostMode::Floor, CostMode::Added));
    assert_eq!((q.read_gbps, q.write_gbps, q.unit_bytes), (None, None, 128));
    assert!(custom("custom:").is_free());
    // The spec of a custom profile round-trips.
    assert_eq!(LatencyProfile::parse(&p.spec()).unwrap(), p);
    assert_eq!(LatencyProfile::parse(&q.spec()).unwrap(), q);
}

#[test]
fn bad_profiles_are_errors() {
    let err = |s: &str| LatencyProfile::parse(s).expect_err(s);
    assert!(matches!(err("optane2"), LatencyError::UnknownProfile(_)));
    assert!(matches!(err(""), LatencyError::UnknownProfile(_)));
    assert!(matches!(err("DRAM"), LatencyError::UnknownProfile(_)));
    assert!(matches!(err("custom"), LatencyError::UnknownProfile(_)));
    assert!(matches!(err("custom:read=3"), LatencyError::UnknownKey(_)));
    assert!(matches!(
        err("custom:read_ns"),
        LatencyError::NotKeyValue(_)
    ));
    assert!(matches!(
        err("custom:read_ns=1,read_ns=2"),
        LatencyError::DuplicateKey(_)
    ));
    for bad in [
        "custom:read_ns=-1",
        "custom:read_ns=1.5",
        "custom:read_ns=2000000000",
        "custom:write_ns=abc",
        "custom:read_gbps=0",
        "custom:read_gbps=-2",
        "custom:write_gbps=inf",
        "custom:write_gbps=NaN",
        "custom:unit=100",
        "custom:unit=32",
        "custom:unit=131072",
        "custom:unit=",
        "custom:mode=both",
    ] {
        assert!(
            matches!(err(bad), LatencyError::BadValue { .. }),
            "{bad} should be a bad value"
        );
    }
}

#[test]
fn reads_cost_latency_plus_units_over_bandwidth() {
    // 1 GB/s = 1 byte per ns keeps the arithmetic readable.
    let p = custom("custom:read_ns=100,read_seq_ns=40,read_gbps=1,unit=256");
    let (m, clock) = manual(p, 1 << 20);
    let mut buf = vec![0u8; 65536];
    let mut expected = 0;
    // 64 bytes inside one unit: 100 + 256.
    m.read(0, &mut buf[..64]).unwrap();
    expected += 100 + 256;
    assert_eq!(clock.waited_ns(), expected);
    // Continuing where it ended, crossing into the next unit: sequential latency, 2 units.
    m.read(64, &mut buf[..256]).unwrap();
    expected += 40 + 512;
    assert_eq!(clock.waited_ns(), expected);
    // 4 KiB aligned: 16 units; 64 KiB: 256 units; random, so full latency.
    m.read(8192, &mut buf[..4096]).unwrap();
    expected += 100 + 4096;
    assert_eq!(clock.waited_ns(), expected);
    m.read(1 << 19, &mut buf).unwrap();
    expected += 100 + 65536;
    assert_eq!(clock.waited_ns(), expected);
    // Misaligned 4 KiB spans 17 units.
    m.read(100_000 + 3, &mut buf[..4096]).unwrap();
    expected += 100 + 17 * 256;
    assert_eq!(clock.waited_ns(), expected);
    // An empty read costs nothing.
    m.read(0, &mut []).unwrap();
    assert_eq!(clock.waited_ns(), expected);
    let s = m.stats();
    assert_eq!(s.reads, 6);
    assert_eq!(s.read_bytes, 64 + 256 + 4096 + 65536 + 4096);
    assert_eq!(s.read_delay_ns, expected);
    assert_eq!(s.emulated_ns(), expected);
}

/// A medium whose reads take `copy_ns` of (manual) clock time, like a real copy out of DRAM.
struct SlowCopy {
    inner: CrashMedium,
    clock: Arc<ManualClock>,
    copy_ns: u64,
}

impl Medium for SlowCopy {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediumError> {
        self.clock.advance(self.copy_ns);
        self.inner.read(offset, buf)
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), MediumError> {
        self.inner.write(offset, data)
    }
    fn flush(&self, offset: u64, len: u64) -> Result<(), MediumError> {
        self.inner.flush(offset, len)
    }
    fn fence(&self) -> Result<(), MediumError> {
        self.inner.fence()
    }
    fn kind(&self) -> pmo_medium::MediumKind {
        self.inner.kind()
    }
    fn path(&self) -> Option<&std::path::Path> {
        None
    }
}

#[test]
fn the_backing_copy_runs_inside_the_modelled_time() {
    let clock = Arc::new(ManualClock::new());
    let slow = Arc::new(SlowCopy {
        inner: CrashMedium::new(4096),
        clock: Arc::clone(&clock),
        copy_ns: 200,
    });
    let m = LatencyMedium::with_clock(slow, custom("custom:read_ns=500"), Arc::clone(&clock));
    // Computation before the read does not shorten it.
    clock.advance(10_000);
    m.read(0, &mut [0; 8]).unwrap();
    // The read took 500 ns in all: 200 ns of copying plus 300 ns of waiting.
    assert_eq!(clock.waited_ns(), 300);
    assert_eq!(m.stats().read_delay_ns, 300);
    // A copy slower than the model is not waited on at all.
    let slower = Arc::new(SlowCopy {
        inner: CrashMedium::new(4096),
        clock: Arc::clone(&clock),
        copy_ns: 900,
    });
    let m = LatencyMedium::with_clock(slower, custom("custom:read_ns=500"), Arc::clone(&clock));
    m.read(0, &mut [0; 8]).unwrap();
    assert_eq!(clock.waited_ns(), 300);
    assert_eq!(m.stats().read_delay_ns, 0);
    // In added mode (the CXL profiles) the whole cost comes after the copy.
    let added = Arc::new(SlowCopy {
        inner: CrashMedium::new(4096),
        clock: Arc::clone(&clock),
        copy_ns: 200,
    });
    let m = LatencyMedium::with_clock(
        added,
        custom("custom:read_ns=500,mode=added"),
        Arc::clone(&clock),
    );
    m.read(0, &mut [0; 8]).unwrap();
    assert_eq!(clock.waited_ns(), 300 + 500);
    assert_eq!(m.stats().read_delay_ns, 500);
}

#[test]
fn flush_costs_per_unit_and_fence_waits_for_the_drain() {
    let p = custom("custom:write_ns=90,write_gbps=1,unit=256");
    let (m, clock) = manual(p, 1 << 20);
    // Writes alone cost nothing: they are stores into the cache.
    m.write(0, &[1; 4096]).unwrap();
    assert_eq!(clock.waited_ns(), 0);
    // One 64-byte line flushed still moves a whole 256-byte unit; the flush itself does not wait.
    m.flush(0, 64).unwrap();
    assert_eq!(clock.waited_ns(), 0);
    m.fence().unwrap();
    assert_eq!(clock.waited_ns(), 256 + 90);
    // A fence with nothing flushed since the last one is free.
    m.fence().unwrap();
    assert_eq!(clock.waited_ns(), 256 + 90);
    // A page: 16 units.
    m.flush(0, 4096).unwrap();
    m.fence().unwrap();
    assert_eq!(clock.waited_ns(), 256 + 90 + 4096 + 90);
    let s = m.stats();
    assert_eq!((s.writes, s.write_bytes), (1, 4096));
    assert_eq!((s.flushes, s.flush_bytes, s.fences), (2, 4096 + 64, 3));
    assert_eq!(s.fence_delay_ns, 256 + 90 + 4096 + 90);
    assert_eq!(s.flush_delay_ns, 0);
}

#[test]
fn computation_between_flush_and_fence_overlaps_the_drain() {
    let (m, clock) = manual(custom("custom:write_ns=100,write_gbps=1"), 1 << 16);
    m.write(0, &[7; 4096]).unwrap();
    m.flush(0, 4096).unwrap(); // drains for 4096 ns
    clock.advance(3000);
    m.fence().unwrap();
    assert_eq!(clock.waited_ns(), 4096 + 100 - 3000);
    m.flush(0, 4096).unwrap();
    clock.advance(10_000); // long done
    m.fence().unwrap();
    assert_eq!(clock.waited_ns(), 4096 + 100 - 3000);
}

#[test]
fn the_drain_queue_is_bounded() {
    // At 1 GB/s the queue holds DRAIN_QUEUE_BYTES ns of write-back.
    let (m, clock) = manual(custom("custom:write_gbps=1"), 4 * DRAIN_QUEUE_BYTES);
    let page = 4096;
    let pages = 3 * DRAIN_QUEUE_BYTES / page;
    for i in 0..pages {
        m.flush(i * page, page).unwrap();
    }
    // Everything beyond the queue's capacity was waited for at the flushes.
    let total = pages * page;
    assert_eq!(m.stats().flush_delay_ns, total - DRAIN_QUEUE_BYTES);
    assert_eq!(clock.waited_ns(), total - DRAIN_QUEUE_BYTES);
    m.fence().unwrap();
    assert_eq!(clock.waited_ns(), total);
    assert_eq!(m.stats().emulated_ns(), total);
}

#[test]
fn costs_scale_with_bytes_and_units_for_every_profile() {
    for p in [
        LatencyProfile::optane(),
        LatencyProfile::cxl_near(),
        LatencyProfile::cxl_far(),
    ] {
        let unit = p.unit_bytes;
        let one = p.read_cost_ns(0, 1, false);
        assert_eq!(one, p.read_cost_ns(0, unit, false), "{}: one unit", p.name);
        assert!(p.read_cost_ns(0, unit + 1, false) > one, "{}", p.name);
        let page = p.read_cost_ns(0, 4096, false);
        let big = p.read_cost_ns(0, 65536, false);
        // The bandwidth part is linear in units.
        let ratio = (big - p.read_ns) as f64 / (page - p.read_ns) as f64;
        assert!((ratio - 16.0).abs() < 0.1, "{}: ratio {ratio}", p.name);
        assert_eq!(p.flush_cost_ns(0, 1), p.flush_cost_ns(0, unit));
        assert!(p.flush_cost_ns(0, 4096) >= 4096 / unit * p.flush_cost_ns(0, 1) - 4096 / unit);
    }
    // Optane: 305 ns random, 169 ns sequential, 4 KiB at 6.6 GB/s = 621 ns more.
    let o = LatencyProfile::optane();
    assert_eq!(o.read_cost_ns(0, 64, false), 305 + 39);
    assert_eq!(o.read_cost_ns(0, 4096, false), 305 + 621);
    assert_eq!(o.read_cost_ns(0, 4096, true), 169 + 621);
    assert_eq!(o.flush_cost_ns(0, 64), 112);
    assert_eq!(LatencyProfile::dram().read_cost_ns(0, 65536, false), 0);
}

#[test]
fn real_clock_waits_about_the_modelled_time() {
    // Measured: never less than asked; the median not much more (the machine is shared, so the
    // upper bound is loose).
    let p = custom("custom:read_ns=20000,read_gbps=1");
    let m = LatencyMedium::new(Arc::new(CrashMedium::new(1 << 16)), p.clone());
    let mut buf = vec![0u8; 4096];
    let mut excess_ns = Vec::new();
    for i in 0..21u64 {
        let offset = (i % 8) * 8192; // never sequential
        let asked = p.read_cost_ns(offset, 4096, false);
        let t0 = std::time::Instant::now();
        m.read(offset, &mut buf).unwrap();
        let took = t0.elapsed().as_nanos() as u64;
        assert!(took + 1000 >= asked, "read took {took} ns, asked {asked}");
        excess_ns.push(took.saturating_sub(asked));
    }
    excess_ns.sort_unstable();
    let median = excess_ns[excess_ns.len() / 2];
    assert!(
        median < 20_000,
        "median excess {median} ns over ~24 us asked"
    );
}

#[test]
fn dram_profile_adds_nothing_and_counts() {
    let m = LatencyMedium::new(Arc::new(CrashMedium::new(8192)), LatencyProfile::dram());
    m.write(0, &[3; 100]).unwrap();
    m.persist(0, 100).unwrap();
    let mut b = [0u8; 100];
    m.read(0, &mut b).unwrap();
    assert_eq!(b, [3; 100]);
    let s = m.stats();
    assert_eq!(
        (s.reads, s.read_bytes, s.writes, s.write_bytes),
        (1, 100, 1, 100)
    );
    assert_eq!((s.flushes, s.flush_bytes, s.fences), (1, 100, 1));
    assert_eq!(s.emulated_ns(), 0);
    assert_eq!(
        s.to_string(),
        "reads 1 (100 B), writes 1 (100 B), flushes 1 (100 B), fences 1, emulated 0.0 us \
         (reads 0.0, flush stalls 0.0, fences 0.0)"
    );
}

#[test]
fn process_stats_sum_live_and_dropped_wrappers() {
    let before = process_stats();
    let a = LatencyMedium::new(Arc::new(CrashMedium::new(4096)), LatencyProfile::dram());
    let counters = a.counters();
    a.write(0, &[1; 10]).unwrap();
    {
        let b = LatencyMedium::new(Arc::new(CrashMedium::new(4096)), LatencyProfile::dram());
        b.write(0, &[1; 20]).unwrap();
        b.fence().unwrap();
    }
    // Other tests run in parallel in this process: only lower bounds hold.
    let mid = process_stats().since(&before);
    assert!(mid.writes >= 2 && mid.write_bytes >= 30 && mid.fences >= 1);
    drop(a);
    // The handle outlives the wrapper; its counts were moved to the retired totals once.
    assert_eq!(counters.snapshot().write_bytes, 10);
    let after = process_stats().since(&before);
    assert!(after.write_bytes >= 30);
}

/// Run the same writes, flushes and fences on a bare crash medium and on a wrapped one.
fn script(m: &dyn Medium) -> Result<(), MediumError> {
    m.write(0, &[1; 64])?;
    m.persist(0, 64)?;
    m.write(64, &[2; 64])?; // never flushed
    m.write(128, &[3; 300])?;
    m.flush(128, 300)?; // flushed, not fenced
    m.write_flush(4000, &[4; 96])?;
    m.fence()?;
    m.write(512, &[5; 64])?;
    m.flush(512, 64)?;
    m.fence()
}

#[test]
fn the_wrapper_keeps_crash_semantics() {
    for crash_at in [None, Some(0), Some(1), Some(2)] {
        let bare = Arc::new(CrashMedium::new(8192));
        let inner = Arc::new(CrashMedium::new(8192));
        let wrapped = LatencyMedium::new(Arc::clone(&inner), LatencyProfile::optane());
        bare.crash_at(crash_at);
        inner.crash_at(crash_at);
        let r1 = script(bare.as_ref());
        let r2 = script(&wrapped);
        assert_eq!(r1.is_ok(), r2.is_ok(), "crash at {crash_at:?}");
        if let Err(e) = r2 {
            assert!(matches!(e, MediumError::PowerLost));
        }
        assert_eq!(bare.fences(), inner.fences());
        assert_eq!(bare.crashed(), inner.crashed());
        assert_eq!(bare.pending_lines(), inner.pending_lines());
        assert_eq!(bare.current_image(), inner.current_image());
        assert_eq!(bare.durable_image(), inner.durable_image());
        assert_eq!(bare.crash_images(6, 42), inner.crash_images(6, 42));
        assert_eq!(bare.torn_image(7), inner.torn_image(7));
        assert_eq!(wrapped.kind(), bare.kind());
        assert_eq!(wrapped.len(), bare.len());
    }
}

#[test]
fn errors_pass_through_without_cost() {
    let (m, clock) = manual(LatencyProfile::optane(), 4096);
    assert!(matches!(
        m.read(4000, &mut [0; 200]),
        Err(MediumError::OutOfRange { .. })
    ));
    assert!(matches!(
        m.flush(4096, 64),
        Err(MediumError::OutOfRange { .. })
    ));
    assert_eq!(clock.waited_ns(), 0);
    assert_eq!(m.stats().reads, 0);
}

#[test]
fn numa_nodes_are_counted() {
    let nodes = numa_node_count().unwrap();
    assert!(nodes >= 1);
}

/// What `open_medium` must do with the `PMO_LATENCY` of its environment; run in a child process
/// by [`open_medium_reads_pmo_latency`] so that no test of this process sees the variable change.
#[test]
#[ignore = "run in a child process by open_medium_reads_pmo_latency"]
fn child_open_medium_with_env() {
    let expect = std::env::var("PMO_LATENCY_TEST_EXPECT").expect("run by the parent test");
    let path = std::env::temp_dir().join(format!("pmo-latency-env-{}.pool", std::process::id()));
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(1 << 16).unwrap();
    drop(f);
    let opened = pmo_medium::open_medium(&path, Some(pmo_medium::MediumKind::File));
    let _ = std::fs::remove_file(&path);
    match expect.as_str() {
        "error" => {
            let err = opened
                .err()
                .expect("an invalid PMO_LATENCY must fail the open");
            assert!(err.to_string().contains("PMO_LATENCY"), "{err}");
        }
        "wrapped" | "bare" => {
            let m = opened.unwrap();
            let before = process_stats();
            m.read(0, &mut [0; 64]).unwrap();
            let reads = process_stats().since(&before).reads;
            assert_eq!(reads, u64::from(expect == "wrapped"), "reads counted");
        }
        other => panic!("unknown expectation {other}"),
    }
}

#[test]
fn open_medium_reads_pmo_latency() {
    let exe = std::env::current_exe().unwrap();
    for (value, expect) in [
        (Some("cxl-far"), "wrapped"),
        (Some("custom:read_ns=10,unit=256"), "wrapped"),
        (Some("dram"), "wrapped"),
        (Some("cxl"), "error"),
        (Some("custom:unit=3"), "error"),
        (Some(""), "bare"),
        (None, "bare"),
    ] {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args([
            "--exact",
            "child_open_medium_with_env",
            "--ignored",
            "--test-threads=1",
        ])
        .env("PMO_LATENCY_TEST_EXPECT", expect)
        .env_remove("PMO_MEDIUM");
        match value {
            Some(v) => cmd.env("PMO_LATENCY", v),
            None => cmd.env_remove("PMO_LATENCY"),
        };
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "PMO_LATENCY={value:?}, expected {expect}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("1 passed"),
            "the child test ran"
        );
    }
}

#[test]
fn threads_share_one_wrapper_and_every_access_is_counted() {
    let p = custom("custom:read_ns=100,write_ns=50,read_gbps=1,write_gbps=1,unit=256");
    let (m, clock) = manual(p, 1 << 20);
    let m = Arc::new(m);
    let threads = 2u64;
    let rounds = 500u64;
    std::thread::scope(|s| {
        for t in 0..threads {
            let m = Arc::clone(&m);
            s.spawn(move || {
                let mut buf = [0u8; 256];
                for i in 0..rounds {
                    let off = (t * rounds + i) * 512;
                    m.write(off, &[t as u8 + 1; 256]).unwrap();
                    m.flush(off, 256).unwrap();
                    m.fence().unwrap();
                    m.read(off, &mut buf).unwrap();
                    assert_eq!(buf, [t as u8 + 1; 256]);
                }
            });
        }
    });
    let s = m.stats();
    let n = threads * rounds;
    assert_eq!((s.reads, s.writes, s.flushes, s.fences), (n, n, n, n));
    assert_eq!(
        (s.read_bytes, s.write_bytes, s.flush_bytes),
        (256 * n, 256 * n, 256 * n)
    );
    // Every read is random (offsets 512 bytes apart never continue one another) and asks for
    // 100 + 256 ns; a thread's read waits less when the other thread's wait moved the clock
    // meanwhile, never more. The clock moves only by waiting, and every jump is counted.
    assert!(s.read_delay_ns <= n * (100 + 256) && s.read_delay_ns >= 100 + 256);
    assert!(s.fence_delay_ns >= 256 + 50);
    assert!(clock.waited_ns() <= s.emulated_ns());
    assert!(clock.waited_ns() >= n * (100 + 256) / threads);
    // The fenced data are durable in the crash medium underneath.
    let durable = m.inner().durable_image();
    assert!(durable[..256].iter().all(|&b| b == 1));
}
