//! Store benchmarks (issue 2's figures):
//! - psync time for k dirty pages (k = 1, 16, 256, 4096) on PMOs of 16 MiB and 1 GiB;
//! - attach + detach of an at-rest PMO, 16 MiB and 1 GiB;
//! - per-page cost of the fill fault and of the dirty-tracking write fault, per mechanism, next
//!   to a bare 4 KiB memcpy measured in the same run;
//! - one psync of one dirty 4 KiB page on emulated PM, next to a PMDK transaction updating 4 KiB
//!   (with the `peers` feature);
//! - readers beside a writer ([`crate::readers`]): psync beside readers, refresh, reads.

use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use pmo_os::view::Mechanism;
use pmo_store::{AttachOptions, DirtyTracking, Perm, Pool};

use crate::{median, BenchError, Records, TempPool};

/// The store's own costs, like PMDK's (which encrypts nothing): scheme `none` unless
/// `PMO_SCHEME` says otherwise; protection costs are `pmo bench schemes`.
fn store_scheme() -> Result<pmo_store::Scheme, BenchError> {
    Ok(pmo_store::Scheme::from_env()?.unwrap_or(pmo_store::Scheme::NONE))
}

const KEY: &[u8] = b"bench-key";
const MIB: u64 = 1 << 20;
const PAGE: usize = 4096;

/// Options of the store benchmark.
#[derive(Clone, Debug)]
pub struct StoreBenchOptions {
    /// Directory of the pool: on tmpfs (`/dev/shm`) the medium is emulated PM (clwb + sfence).
    pub dir: PathBuf,
    /// Timed repeats per figure (after one warm-up).
    pub repeats: usize,
    /// Large PMO size (the issue asks for 1 GiB).
    pub large_bytes: u64,
    /// Pages touched per fault-cost run.
    pub fault_pages: usize,
    /// Also measure psync on a regular file (msync) in this directory.
    pub file_dir: Option<PathBuf>,
}

impl StoreBenchOptions {
    /// The default (full) configuration; `quick` uses fewer repeats.
    pub fn new(quick: bool) -> StoreBenchOptions {
        StoreBenchOptions {
            dir: PathBuf::from(if Path::new("/dev/shm").is_dir() {
                "/dev/shm"
            } else {
                "/tmp"
            }),
            repeats: if quick { 7 } else { 21 },
            large_bytes: 1 << 30,
            fault_pages: if quick { 4096 } else { 16384 },
            file_dir: Some(std::env::temp_dir()),
        }
    }
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} {msg}")
            .expect("template")
            .progress_chars("=> "),
    );
    pb.set_prefix(what.to_string());
    pb
}

fn size_name(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{}GiB", bytes >> 30)
    } else {
        format!("{}MiB", bytes >> 20)
    }
}

/// Run every store measurement, appending to `records`.
pub fn run(opts: &StoreBenchOptions, records: &mut Records) -> Result<(), BenchError> {
    run_store(opts, records)?;
    let mut schemes = vec![store_scheme()?];
    let secure = pmo_store::Scheme::from_name("secure")?;
    if !schemes.contains(&secure) {
        schemes.push(secure);
    }
    crate::readers::run(&opts.dir, opts.repeats, &schemes, records)?;
    crate::ranges::run(&opts.dir, opts.repeats, &schemes, records)
}

fn run_store(opts: &StoreBenchOptions, records: &mut Records) -> Result<(), BenchError> {
    let sizes = [16 * MIB, opts.large_bytes];
    let ks = [1usize, 16, 256, 4096];
    let mechanisms = Mechanism::available();
    let steps = (sizes.len() * ks.len() + sizes.len() + mechanisms.len() + 2) as u64;
    let pb = bar(steps, "store");
    let medium_name = |p: &Pool| {
        p.pool_info()
            .map(|i| i.medium.name().to_string())
            .unwrap_or_default()
    };

    // Pool big enough for both PMOs (each needs twice its size plus metadata).
    let tp = TempPool::new(
        &opts.dir,
        "store",
        2 * (sizes.iter().sum::<u64>()) + 64 * MIB,
        store_scheme()?,
    )?;
    let medium = medium_name(&tp.pool);
    for &size in &sizes {
        let name = size_name(size);
        tp.pool.pcreate(&name, size, KEY)?;
        let npages = (size / PAGE as u64) as usize;
        let a = tp.pool.attach(&name, Perm::Write, KEY)?;
        let mechanism = a.mechanism().name().to_string();
        let mut stamp = 0u64;
        for &k in &ks {
            pb.set_message(format!("psync k={k} on {name}"));
            let stride = npages / k;
            let mut samples = Vec::with_capacity(opts.repeats);
            for r in 0..=opts.repeats {
                // A value never written before: every update changes its page (twin tracking
                // commits only pages that changed).
                stamp += 1;
                for i in 0..k {
                    a.write_at(i * stride * PAGE, &stamp.to_le_bytes())?;
                }
                let t = Instant::now();
                let s = a.psync()?;
                let us = t.elapsed().as_secs_f64() * 1e6;
                if s.pages != k as u64 {
                    return Err(BenchError::Other(format!(
                        "psync committed {} pages, expected {k}",
                        s.pages
                    )));
                }
                if r > 0 {
                    samples.push(us);
                }
            }
            let m = median(&samples);
            let params = [
                ("pmo_size", name.clone()),
                ("dirty_pages", k.to_string()),
                ("medium", medium.clone()),
                ("mechanism", mechanism.clone()),
            ];
            records.push("store", &params, "psync_us", m, "us", samples.len());
            records.push(
                "store",
                &params,
                "psync_per_page_us",
                m / k as f64,
                "us",
                samples.len(),
            );
            pb.inc(1);
        }
        drop(a);
    }

    // Attach + detach of an at-rest PMO.
    for &size in &sizes {
        let name = size_name(size);
        pb.set_message(format!("attach+detach {name}"));
        let (mut att, mut det) = (Vec::new(), Vec::new());
        for r in 0..=opts.repeats {
            let t = Instant::now();
            let a = tp.pool.attach(&name, Perm::Write, KEY)?;
            let t1 = Instant::now();
            a.detach()?;
            let t2 = Instant::now();
            if r > 0 {
                att.push((t1 - t).as_secs_f64() * 1e6);
                det.push((t2 - t1).as_secs_f64() * 1e6);
            }
        }
        let params = [("pmo_size", name.clone()), ("medium", medium.clone())];
        records.push("store", &params, "attach_us", median(&att), "us", att.len());
        records.push("store", &params, "detach_us", median(&det), "us", det.len());
        let both: Vec<f64> = att.iter().zip(&det).map(|(a, d)| a + d).collect();
        records.push(
            "store",
            &params,
            "attach_detach_us",
            median(&both),
            "us",
            both.len(),
        );
        pb.inc(1);
    }
    drop(tp);

    // Fault costs per mechanism, next to a bare 4 KiB memcpy.
    let n = opts.fault_pages;
    let tp = TempPool::new(
        &opts.dir,
        "faults",
        2 * (n * PAGE) as u64 + 64 * MIB,
        store_scheme()?,
    )?;
    tp.pool.pcreate("f", (n * PAGE) as u64, KEY)?;
    {
        let h = tp.pool.open_pmo("f", Perm::Write, KEY, None)?;
        h.write_at(0, &vec![0x5a; n * PAGE])?;
    }
    for &mech in &mechanisms {
        pb.set_message(format!("faults ({})", mech.name()));
        let (mut fill, mut wp) = (Vec::new(), Vec::new());
        for r in 0..=opts.repeats.min(9) {
            let a = tp.pool.attach_with(
                "f",
                Perm::Write,
                KEY,
                AttachOptions {
                    mechanism: Some(mech),
                    ..Default::default()
                },
            )?;
            let mut b = [0u8; 1];
            let t = Instant::now();
            for p in 0..n {
                a.read_at(p * PAGE, &mut b)?;
            }
            let fill_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
            let t = Instant::now();
            for p in 0..n {
                a.write_at(p * PAGE + 8, &[r as u8])?;
            }
            let wp_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
            drop(a); // discard: nothing psynced
            if r > 0 {
                fill.push(fill_us);
                wp.push(wp_us);
            }
        }
        let params = [
            ("mechanism", mech.name().to_string()),
            ("pages", n.to_string()),
            ("medium", medium.clone()),
        ];
        records.push(
            "store",
            &params,
            "fill_fault_us_per_page",
            median(&fill),
            "us",
            fill.len(),
        );
        records.push(
            "store",
            &params,
            "write_tracking_us_per_page",
            median(&wp),
            "us",
            wp.len(),
        );
        pb.inc(1);
    }
    {
        let src = vec![0xa5u8; n * PAGE];
        let mut dst = vec![0u8; n * PAGE];
        let mut samples = Vec::new();
        for r in 0..=opts.repeats {
            let t = Instant::now();
            for p in 0..n {
                dst[p * PAGE..(p + 1) * PAGE].copy_from_slice(&src[p * PAGE..(p + 1) * PAGE]);
            }
            std::hint::black_box(&mut dst);
            if r > 0 {
                samples.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
            }
        }
        records.push(
            "store",
            &[("pages", n.to_string())],
            "memcpy_4k_us",
            median(&samples),
            "us",
            samples.len(),
        );
        pb.inc(1);
    }
    drop(tp);

    // One dirty 4 KiB page: write + psync, on emulated PM (and on a regular file).
    pb.set_message("1-page psync");
    // Every dirty tracking on emulated PM (the default one first), the default on a file.
    let default_tracking = pmo_store::tracking::resolve(None, 16 * MIB);
    // (directory, tracking, PMO bytes): the 16 MiB PMO is the headline (next to PMDK); a 1 MiB
    // PMO shows how the tracking choice moves with the resident size a psync must cover.
    let mut runs = vec![(opts.dir.clone(), default_tracking, 16 * MIB)];
    for t in [
        DirtyTracking::Fault,
        DirtyTracking::Twin,
        DirtyTracking::Scan,
        DirtyTracking::Declared,
    ] {
        if t != default_tracking && t.is_available() {
            runs.push((opts.dir.clone(), t, 16 * MIB));
        }
    }
    for t in [
        DirtyTracking::Fault,
        DirtyTracking::Twin,
        DirtyTracking::Scan,
    ] {
        if t.is_available() {
            runs.push((opts.dir.clone(), t, MIB));
        }
    }
    runs.extend(
        opts.file_dir
            .clone()
            .map(|d| (d, default_tracking, 16 * MIB)),
    );
    for (dir, tracking, pmo_bytes) in runs {
        let tp = TempPool::new(&dir, "one", 64 * MIB, store_scheme()?)?;
        let medium = medium_name(&tp.pool);
        tp.pool.pcreate("one", pmo_bytes, KEY)?;
        let a = tp.pool.attach_with(
            "one",
            Perm::Write,
            KEY,
            AttachOptions {
                tracking: Some(tracking),
                ..Default::default()
            },
        )?;
        let tracking = a.dirty_tracking();
        // Warm up first (PMDK's peer runs a warm-up chunk, and its pool creation zeroes the
        // object): commit every page twice, so both shadow slots of every page have been
        // written once and the medium's pages are mapped. The figure is the steady-state cost
        // of an update, not of the first touch of a medium page after the pool was created.
        // Different bytes each round: twin tracking commits only pages that changed.
        for round in 0..2u8 {
            let warm = vec![0x55u8 + round; pmo_bytes as usize];
            a.write_at(0, &warm)?;
            a.psync()?;
        }
        let mut page = vec![0x77u8; PAGE];
        let reps = opts.repeats * 20;
        let (mut both, mut ps, mut commit) = (Vec::new(), Vec::new(), Vec::new());
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for r in 0..=reps {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let p = (x % (pmo_bytes / PAGE as u64)) as usize;
            // A new value every round: each update changes its page.
            page[..8].copy_from_slice(&(r as u64 + 1).to_le_bytes());
            let t = Instant::now();
            a.write_at(p * PAGE, &page)?;
            let t1 = Instant::now();
            let st = a.psync()?;
            let t2 = Instant::now();
            if r > 0 {
                both.push((t2 - t).as_secs_f64() * 1e6);
                ps.push((t2 - t1).as_secs_f64() * 1e6);
                commit.push(st.elapsed_ns as f64 / 1e3);
            }
        }
        let params = [
            ("medium", medium.clone()),
            ("tracking", tracking.name().to_string()),
            ("update_bytes", "4096".to_string()),
            ("pmo_bytes", pmo_bytes.to_string()),
        ];
        records.push(
            "store",
            &params,
            "psync_1page_us",
            median(&ps),
            "us",
            ps.len(),
        );
        records.push(
            "store",
            &params,
            "psync_1page_commit_us",
            median(&commit),
            "us",
            commit.len(),
        );
        records.push(
            "store",
            &params,
            "write_psync_1page_us",
            median(&both),
            "us",
            both.len(),
        );
    }
    pb.inc(1);

    #[cfg(feature = "peers")]
    {
        pb.set_message("PMDK tx 4 KiB");
        let popts = pmo_peers::Options {
            dir: opts.dir.clone(),
            repeats: opts.repeats.min(9),
            ..Default::default()
        };
        match pmo_peers::pmdk_tx_update(&popts, 4096, pmo_peers::Work::Ops(20_000)) {
            Ok(m) => records.push(
                "store",
                &[("peer", "pmdk".into()), ("update_bytes", "4096".into())],
                "pmdk_tx_us",
                m.median,
                "us",
                m.samples.len(),
            ),
            Err(e) => eprintln!("PMDK peer failed: {e}"),
        }
    }
    pb.finish_and_clear();
    Ok(())
}

/// The store figures as a table, as text.
pub fn table(records: &Records) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    _ = writeln!(out, "psync time by dirty pages (medians, µs):");
    _ = writeln!(
        out,
        "  {:>11} {:>10} {:>10}  ratio 1GiB/16MiB",
        "dirty pages", "16 MiB", "1 GiB"
    );
    for k in ["1", "16", "256", "4096"] {
        let small = records.find("psync_us", &[("pmo_size", "16MiB"), ("dirty_pages", k)]);
        let large = records.find("psync_us", &[("pmo_size", "1GiB"), ("dirty_pages", k)]);
        if let (Some(s), Some(l)) = (small, large) {
            _ = writeln!(out, "  {k:>11} {s:>10.1} {l:>10.1}  {:.2}", l / s);
        }
    }
    _ = writeln!(out, "attach + detach of an at-rest PMO (medians, µs):");
    for size in ["16MiB", "1GiB"] {
        if let (Some(a), Some(d)) = (
            records.find("attach_us", &[("pmo_size", size)]),
            records.find("detach_us", &[("pmo_size", size)]),
        ) {
            _ = writeln!(
                out,
                "  {size:>6}: attach {a:.1} + detach {d:.1} = {:.1}",
                a + d
            );
        }
    }
    let memcpy = records.find("memcpy_4k_us", &[]);
    _ = writeln!(
        out,
        "per-page fault costs (medians, µs) next to a bare 4 KiB memcpy ({:.3} µs):",
        memcpy.unwrap_or(f64::NAN)
    );
    for mech in ["userfaultfd", "sigsegv"] {
        if let (Some(f), Some(w)) = (
            records.find("fill_fault_us_per_page", &[("mechanism", mech)]),
            records.find("write_tracking_us_per_page", &[("mechanism", mech)]),
        ) {
            _ = writeln!(
                out,
                "  {mech:>11}: fill on first touch {f:.2}, first write (dirty tracking) {w:.2}"
            );
        }
    }
    _ = writeln!(out, "one dirty 4 KiB page (medians, µs):");
    for r in records
        .records
        .iter()
        .filter(|r| r.metric == "write_psync_1page_us")
    {
        let medium = r.params.get("medium").cloned().unwrap_or_default();
        let tracking = r.params.get("tracking").cloned().unwrap_or_default();
        let bytes = r.params.get("pmo_bytes").cloned().unwrap_or_default();
        let key = [
            ("medium", medium.as_str()),
            ("tracking", tracking.as_str()),
            ("pmo_bytes", bytes.as_str()),
        ];
        let ps = records.find("psync_1page_us", &key).unwrap_or(f64::NAN);
        let commit = records
            .find("psync_1page_commit_us", &key)
            .unwrap_or(f64::NAN);
        let mib = bytes.parse::<u64>().map_or(0, |b| b / MIB);
        _ = writeln!(out,
            "  {medium:>10} {tracking:>8} {mib:>3} MiB PMO: write 4 KiB + psync {:.2} (psync alone {ps:.2}, of which commit {commit:.2})",
            r.value
        );
    }
    match records.find("pmdk_tx_us", &[("peer", "pmdk")]) {
        Some(p) => {
            _ = writeln!(out, "  PMDK transaction updating 4 KiB (tx_add_range + memcpy + commit): {p:.2}");
            for r in records
                .records
                .iter()
                .filter(|r| r.metric == "write_psync_1page_us")
                .filter(|r| r.params.get("medium").map(String::as_str) == Some("pmem-emul"))
            {
                let tracking = r.params.get("tracking").cloned().unwrap_or_default();
                let bytes = r.params.get("pmo_bytes").cloned().unwrap_or_default();
                let ps = records
                    .find(
                        "psync_1page_us",
                        &[
                            ("medium", "pmem-emul"),
                            ("tracking", tracking.as_str()),
                            ("pmo_bytes", bytes.as_str()),
                        ],
                    )
                    .unwrap_or(f64::NAN);
                let mib = bytes.parse::<u64>().map_or(0, |b| b / MIB);
                _ = writeln!(out,
                    "    pmo/PMDK, {tracking:>8} tracking, {mib:>3} MiB PMO: write + psync {:.2}x, psync alone {:.2}x",
                    r.value / p,
                    ps / p
                );
            }
        }
        None => _ = writeln!(out, "  PMDK peer not measured (build with --features peers after crates/pmo-peers/install-deps.sh)"),
    }
    crate::readers::table(records, &mut out);
    crate::ranges::table(records, &mut out);
    out
}
