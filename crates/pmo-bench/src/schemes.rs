//! `pmo bench schemes`: every implemented protection scheme on one workload, in one run.
//!
//! - **Fig. 1 of the LOaPP paper**: attach, update one 8-byte element on a random page, psync,
//!   detach, for PMOs of 4 KiB to 16 MiB. Per scheme and size, the median of each step and of
//!   the whole cycle, normalised to `wedi` (the paper's baseline). `wedi` grows with the PMO
//!   (it decrypts everything at attach and checksums everything at psync); per-page schemes
//!   stay flat. Drawn as `schemes-fig1.svg`.
//! - **Breakdown** (the paper's Fig. 6, at the granularity measured here): attach, the update's
//!   page fault (decrypt + verify + map + write tracking), psync, detach.
//! - **Per-page costs of the secure default** against their floors, measured in the same run:
//!   fault service per page vs (the default AEAD's open of 4 KiB + a bare fault of the
//!   unprotected store), psync per dirty page vs (the default AEAD's seal of 4 KiB + persist of
//!   4 KiB), each of those over the same working set as the psync's: k distinct pages, one store each before a round, and
//!   destinations alternating between two sets of k pages (the two slots). Targets: within 1.5x.
//!
//! Pools live in `dir` (default `/dev/shm`: emulated persistent memory, clwb + sfence).

use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use pmo_store::{AttachOptions, Perm, Scheme};

use crate::{median, BenchError, Records, TempPool};

const KEY: &[u8] = b"pmo-bench-schemes";
const KIB: u64 = 1024;
const PAGE: usize = 4096;

/// Options of the schemes benchmark.
#[derive(Clone, Debug)]
pub struct SchemesBenchOptions {
    /// Directory for the pools.
    pub dir: PathBuf,
    /// Repeats of each cycle (medians are reported).
    pub repeats: usize,
    /// PMO sizes for Fig. 1, in bytes.
    pub sizes: Vec<u64>,
    /// Schemes to run (default: every implemented one).
    pub schemes: Vec<Scheme>,
}

impl SchemesBenchOptions {
    /// Defaults; `quick` runs fewer repeats and sizes.
    pub fn new(quick: bool) -> SchemesBenchOptions {
        let dir = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        SchemesBenchOptions {
            dir,
            repeats: if quick { 5 } else { 21 },
            sizes: if quick {
                vec![4 * KIB, 256 * KIB, 16 * KIB * KIB]
            } else {
                vec![
                    4 * KIB,
                    64 * KIB,
                    256 * KIB,
                    KIB * KIB,
                    4 * KIB * KIB,
                    16 * KIB * KIB,
                ]
            },
            // Every scheme with the DRAM plaintext copy, `secure` under its other AEAD
            // (AES-256-GCM, `secure:gcm`) beside it, and three with the copy on the medium (the
            // LOaPP kernel's placement).
            schemes: Scheme::all()
                .chain(
                    ["secure:gcm", "wedi:medium", "sp-id:medium", "secure:medium"]
                        .iter()
                        .filter_map(|n| Scheme::from_name(n).ok()),
                )
                .collect(),
        }
    }
}

fn human(bytes: u64) -> String {
    if bytes >= KIB * KIB {
        format!("{}MiB", bytes / (KIB * KIB))
    } else {
        format!("{}KiB", bytes / KIB)
    }
}

fn rng(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Run the benchmark, appending records.
pub fn run(opts: &SchemesBenchOptions, records: &mut Records) -> Result<(), BenchError> {
    let steps = (opts.schemes.len() * opts.sizes.len()) as u64 + 3;
    let pb = ProgressBar::new(steps);
    pb.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
            .map_err(|e| BenchError::Other(e.to_string()))?,
    );
    for &scheme in &opts.schemes {
        for &size in &opts.sizes {
            pb.set_message(format!("fig1 {scheme} {}", human(size)));
            fig1_cell(opts, scheme, size, records)?;
            pb.inc(1);
        }
    }
    pb.set_message("per-page fault service");
    per_page_fault(opts, records)?;
    pb.inc(1);
    pb.set_message("per-page psync");
    per_page_psync(opts, records)?;
    pb.inc(1);
    pb.set_message("small sessions");
    crate::small::run(&opts.dir, opts.repeats, records)?;
    pb.inc(1);
    pb.finish_and_clear();
    Ok(())
}

/// One (scheme, size) cell of Fig. 1.
fn fig1_cell(
    opts: &SchemesBenchOptions,
    scheme: Scheme,
    size: u64,
    records: &mut Records,
) -> Result<(), BenchError> {
    let tp = TempPool::new(&opts.dir, "fig1", 2 * size + 8 * KIB * KIB, scheme)?;
    tp.pool.pcreate("obj", size, KEY)?;
    // Give every page contents once, so that attach and faults decrypt real ciphertext.
    {
        let a = tp.pool.attach("obj", Perm::Write, KEY)?;
        a.write_at(0, &vec![0x5au8; size as usize])?;
        a.psync()?;
    }
    let pages = size / PAGE as u64;
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ size;
    let (mut attach, mut update, mut psync, mut detach, mut total) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in 0..=opts.repeats {
        let page = rng(&mut x) % pages;
        let t0 = Instant::now();
        let a = tp
            .pool
            .attach_with("obj", Perm::Write, KEY, AttachOptions::default())?;
        let t1 = Instant::now();
        // SAFETY: inside the writable mapping of `size` bytes; an aligned 8-byte store.
        unsafe {
            a.addr()
                .add(page as usize * PAGE + 64)
                .cast::<u64>()
                .write_volatile(r as u64)
        };
        let t2 = Instant::now();
        let st = a.psync()?;
        let t3 = Instant::now();
        a.detach()?;
        let t4 = Instant::now();
        if st.pages != 1 {
            return Err(BenchError::Other(format!(
                "{scheme}: psync committed {} pages, expected 1",
                st.pages
            )));
        }
        if r > 0 {
            let us = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e6;
            attach.push(us(t0, t1));
            update.push(us(t1, t2));
            psync.push(us(t2, t3));
            detach.push(us(t3, t4));
            total.push(us(t0, t4));
        }
    }
    let params = [
        ("scheme", scheme.name()),
        ("pmo_size", human(size)),
        ("pmo_bytes", size.to_string()),
    ];
    for (metric, v) in [
        ("attach_us", &attach),
        ("update_fault_us", &update),
        ("psync_us", &psync),
        ("detach_us", &detach),
        ("cycle_us", &total),
    ] {
        records.push_samples("schemes", &params, metric, v, "us");
    }
    Ok(())
}

/// Fault service per page: secure vs (its AEAD's open of 4 KiB + the unprotected store's fault).
fn per_page_fault(opts: &SchemesBenchOptions, records: &mut Records) -> Result<(), BenchError> {
    let size = 16 * KIB * KIB;
    let pages = (size / PAGE as u64) as usize;
    let mut per_scheme = Vec::new();
    for scheme in [Scheme::NONE, Scheme::SECURE] {
        let tp = TempPool::new(&opts.dir, "fault", 3 * size, scheme)?;
        tp.pool.pcreate("obj", size, KEY)?;
        {
            let a = tp.pool.attach("obj", Perm::Write, KEY)?;
            a.write_at(0, &vec![0x33u8; size as usize])?;
            a.psync()?;
        }
        let mut samples = Vec::new();
        for _ in 0..opts.repeats.clamp(3, 9) {
            let a = tp.pool.attach("obj", Perm::Read, KEY)?;
            let t = Instant::now();
            let mut sum = 0u64;
            for p in 0..pages {
                // SAFETY: inside the mapping; a read faults the page in.
                sum += unsafe { a.addr().add(p * PAGE).read_volatile() } as u64;
            }
            let el = t.elapsed().as_secs_f64() * 1e6 / pages as f64;
            if sum != 0x33 * pages as u64 {
                return Err(BenchError::Other(format!("{scheme}: wrong contents read")));
            }
            samples.push(el);
        }
        let m = median(&samples);
        records.push(
            "schemes",
            &[("scheme", scheme.name()), ("pmo_size", human(size))],
            "fault_service_per_page_us",
            m,
            "us",
            samples.len(),
        );
        per_scheme.push(m);
    }
    let open = crate::floors::aead_page_us(false);
    records.push(
        "schemes",
        &[("op", format!("{} open 4KiB", crate::floors::aead_name()))],
        "crypto_page_us",
        open,
        "us",
        1,
    );
    let floor = open + per_scheme[0];
    records.push(
        "schemes",
        &[("scheme", "secure".into())],
        "fault_service_vs_floor",
        per_scheme[1] / floor,
        "ratio",
        1,
    );
    Ok(())
}

/// Median µs per page to seal (the default AEAD) `k` distinct 4 KiB pages (the store's page
/// context, fresh versions) into one output page, as a psync of `k` dirty pages must: before each
/// round every page gets one store, like the pages the psync benchmark dirties, so the
/// plaintext is where an application's writes leave it, not one page hot in L1.
fn seal_pages_us(k: usize) -> f64 {
    use pmo_crypt::{seal_page, PageCtx};
    let Some(keys) = crate::floors::page_keys() else {
        return f64::NAN;
    };
    let mut plain = vec![[0x42u8; PAGE]; k];
    let mut out = [0u8; PAGE];
    let mut samples = Vec::new();
    let mut version = 1u64;
    for round in 0..11u64 {
        for p in plain.iter_mut() {
            p[8] = round as u8;
        }
        let t = Instant::now();
        for (i, p) in plain.iter().enumerate() {
            let ctx = PageCtx {
                pool_uuid: [1; 16],
                pmo_uuid: [2; 16],
                page_index: i as u64,
                version,
            };
            version += 1;
            if seal_page(&keys, &ctx, p, &mut out).is_err() {
                return f64::NAN;
            }
        }
        let el = t.elapsed().as_secs_f64() * 1e6 / k as f64;
        std::hint::black_box(&out);
        if round >= 2 {
            samples.push(el);
        }
    }
    median(&samples)
}

/// psync per dirty page (k = 256): secure vs (its AEAD's seal of 4 KiB + persist of 4 KiB).
fn per_page_psync(opts: &SchemesBenchOptions, records: &mut Records) -> Result<(), BenchError> {
    let size = 16 * KIB * KIB;
    let k = 256usize;
    let tp = TempPool::new(&opts.dir, "psync", 3 * size, Scheme::SECURE)?;
    tp.pool.pcreate("obj", size, KEY)?;
    // The default tracking for this size first (its figures are the headline), then the others.
    let default_tracking = pmo_store::tracking::resolve(None, size);
    let mut trackings = vec![default_tracking];
    for t in [
        pmo_store::DirtyTracking::Fault,
        pmo_store::DirtyTracking::Twin,
        pmo_store::DirtyTracking::Scan,
    ] {
        if !trackings.contains(&t) && t.is_available() {
            trackings.push(t);
        }
    }
    let mut ours = f64::NAN;
    for tracking in trackings {
        let a = tp.pool.attach_with(
            "obj",
            Perm::Write,
            KEY,
            AttachOptions {
                populate: true,
                tracking: Some(tracking),
                ..Default::default()
            },
        )?;
        let tracking = a.dirty_tracking().name().to_string();
        // Two layouts of the k dirty pages: contiguous (one write-protect call re-arms them all)
        // and scattered 16 pages apart (one call each). The first two rounds warm both shadow
        // slots and are not counted.
        for (layout, stride) in [("contiguous", 1usize), ("scattered", 16)] {
            let (mut samples, mut commit) = (Vec::new(), Vec::new());
            for r in 0..opts.repeats.max(3) + 2 {
                for i in 0..k {
                    // SAFETY: inside the writable mapping (k * 16 pages <= 4096).
                    unsafe { a.addr().add(i * stride * PAGE + 8).write_volatile(r as u8) };
                }
                let t = Instant::now();
                let st = a.psync()?;
                let el = t.elapsed().as_secs_f64() * 1e6 / k as f64;
                if st.pages != k as u64 {
                    return Err(BenchError::Other(format!(
                        "psync committed {} pages, expected {k}",
                        st.pages
                    )));
                }
                if r >= 2 {
                    samples.push(el);
                    commit.push(st.elapsed_ns as f64 / 1e3 / k as f64);
                }
            }
            let params = [
                ("scheme", "secure".to_string()),
                ("dirty_pages", k.to_string()),
                ("layout", layout.to_string()),
                ("tracking", tracking.clone()),
            ];
            let m = median(&samples);
            if layout == "contiguous" && ours.is_nan() {
                ours = m;
            }
            records.push(
                "schemes",
                &params,
                "psync_per_dirty_page_us",
                m,
                "us",
                samples.len(),
            );
            records.push(
                "schemes",
                &params,
                "psync_commit_per_dirty_page_us",
                median(&commit),
                "us",
                commit.len(),
            );
        }
        drop(a);
    }
    let seal = seal_pages_us(k);
    records.push(
        "schemes",
        &[("op", format!("{} seal 4KiB", crate::floors::aead_name()))],
        "crypto_page_us",
        seal,
        "us",
        1,
    );
    let persist = crate::floors::persist_page_us(&opts.dir, k)?;
    records.push(
        "schemes",
        &[("op", "persist 4KiB".into())],
        "persist_page_us",
        persist,
        "us",
        1,
    );
    records.push(
        "schemes",
        &[("scheme", "secure".into())],
        "psync_per_page_vs_floor",
        ours / (seal + persist),
        "ratio",
        1,
    );
    Ok(())
}

/// The tables of a run, as text.
pub fn table(records: &Records) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let schemes: Vec<String> = {
        let mut v: Vec<String> = Vec::new();
        for r in records.records.iter().filter(|r| r.metric == "cycle_us") {
            if let Some(s) = r.params.get("scheme") {
                if !v.contains(s) {
                    v.push(s.clone());
                }
            }
        }
        v
    };
    let sizes: Vec<String> = {
        let mut v: Vec<(u64, String)> = Vec::new();
        for r in records.records.iter().filter(|r| r.metric == "cycle_us") {
            let b: u64 = r
                .params
                .get("pmo_bytes")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let name = r.params.get("pmo_size").cloned().unwrap_or_default();
            if !v.iter().any(|x| x.1 == name) {
                v.push((b, name));
            }
        }
        v.sort();
        v.into_iter().map(|x| x.1).collect()
    };
    _ = writeln!(out, "Fig. 1: attach + update one element + psync + detach (medians, µs; in brackets: relative to wedi;\n  ?: the samples' spread is wider than the difference from wedi)");
    // As wide as the longest name (`secure:medium:aegis`), so the columns line up.
    let w = schemes.iter().map(|s| s.len()).max().unwrap_or(0).max(13);
    _ = write!(out, "{:<w$}", "scheme");
    for s in &sizes {
        _ = write!(out, " {s:>19}");
    }
    _ = writeln!(out);
    for sch in &schemes {
        _ = write!(out, "{sch:<w$}");
        for size in &sizes {
            let v = records.get("cycle_us", &[("scheme", sch), ("pmo_size", size)]);
            let w = records.get("cycle_us", &[("scheme", "wedi"), ("pmo_size", size)]);
            match (v, w) {
                (Some(v), Some(w)) => {
                    let (r, unsure) = crate::record::ratio(v, w);
                    _ = write!(
                        out,
                        " {:>9.1} ({r:>5.3}{})",
                        v.value,
                        if unsure { "?" } else { " " }
                    )
                }
                (Some(v), None) => _ = write!(out, " {:>19.1}", v.value),
                _ => _ = write!(out, " {:>19}", "-"),
            }
        }
        _ = writeln!(out);
    }
    if let Some(size) = sizes.last() {
        _ = writeln!(
            out,
            "Breakdown at {size} (medians, µs): attach / update fault / psync / detach"
        );
        for sch in &schemes {
            let g = |m| {
                records
                    .find(m, &[("scheme", sch), ("pmo_size", size)])
                    .unwrap_or(f64::NAN)
            };
            _ = writeln!(
                out,
                "  {sch:<w$} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                g("attach_us"),
                g("update_fault_us"),
                g("psync_us"),
                g("detach_us")
            );
        }
    }
    let f = |m: &str, p: &[(&str, &str)]| records.find(m, p).unwrap_or(f64::NAN);
    let aead = crate::floors::aead_name();
    let (open_op, seal_op) = (format!("{aead} open 4KiB"), format!("{aead} seal 4KiB"));
    _ = writeln!(
        out,
        "Per-page costs of the secure default (16 MiB PMO, medians, µs):"
    );
    _ = writeln!(out,
        "  fault service {:.2} vs floor {:.2} ({aead} open {:.2} + unprotected fault {:.2}): {:.2}x (target <= 1.5x)",
        f("fault_service_per_page_us", &[("scheme", "secure")]),
        f("crypto_page_us", &[("op", &open_op)])
            + f("fault_service_per_page_us", &[("scheme", "none")]),
        f("crypto_page_us", &[("op", &open_op)]),
        f("fault_service_per_page_us", &[("scheme", "none")]),
        f("fault_service_vs_floor", &[("scheme", "secure")]),
    );
    _ = writeln!(out,
        "  psync per dirty page (k=256 contiguous) {:.2} vs floor {:.2} ({aead} seal {:.2} + persist 4 KiB {:.2}): {:.2}x (target <= 1.5x)",
        f("psync_per_dirty_page_us", &[("scheme", "secure"), ("layout", "contiguous")]),
        f("crypto_page_us", &[("op", &seal_op)]) + f("persist_page_us", &[("op", "persist 4KiB")]),
        f("crypto_page_us", &[("op", &seal_op)]),
        f("persist_page_us", &[("op", "persist 4KiB")]),
        f("psync_per_page_vs_floor", &[("scheme", "secure")]),
    );
    for r in records
        .records
        .iter()
        .filter(|r| r.bench == "schemes" && r.metric == "psync_per_dirty_page_us")
    {
        let (Some(layout), Some(tracking)) = (r.params.get("layout"), r.params.get("tracking"))
        else {
            continue;
        };
        let p = [
            ("scheme", "secure"),
            ("layout", layout.as_str()),
            ("tracking", tracking.as_str()),
        ];
        _ = writeln!(
            out,
            "    {layout:>10} {tracking:>5}: psync {:.2} per page (target <= 1.0 scattered), of which commit (seal + persist + journal) {:.2}, the rest collecting and re-arming write tracking",
            r.value,
            f("psync_commit_per_dirty_page_us", &p),
        );
    }
    out.push_str(&crate::small::table(records));
    out
}

/// Draw Fig. 1 (cycle time per PMO size, one bar per scheme in each size's group, log y) as
/// SVG and PNG: the sizes are the paper's categories, as its own figure draws them.
pub fn draw_fig1(records: &Records, path: &Path) -> Result<(), BenchError> {
    let cells: Vec<_> = records
        .records
        .iter()
        .filter(|r| r.metric == "cycle_us")
        .filter_map(|r| {
            let bytes = r.params.get("pmo_bytes")?.parse::<u64>().ok()?;
            Some((r, r.params.get("scheme")?.clone(), bytes))
        })
        .collect();
    let mut sizes: Vec<u64> = cells.iter().map(|c| c.2).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut series: Vec<crate::plot::Series> = Vec::new();
    for (r, scheme, bytes) in &cells {
        let p = crate::plot::Point {
            x: sizes.iter().position(|s| s == bytes).unwrap_or(0) as f64,
            y: r.value,
            uncertain: false,
        };
        match series.iter_mut().find(|x| &x.name == scheme) {
            Some(e) => e.points.push(p),
            None => series.push(crate::plot::Series {
                name: scheme.clone(),
                points: vec![p],
            }),
        }
    }
    let n = cells.iter().map(|c| c.0.samples).max().unwrap_or(0);
    let y_desc = format!("cycle time (µs, median of {n}; log scale)");
    crate::plot::grouped_bars(
        path,
        &crate::plot::BarChart {
            title: "Fig. 1: attach + update one page + psync + detach, per PMO size",
            x_desc: "PMO size",
            y_desc: &y_desc,
            categories: sizes.iter().map(|&b| human(b)).collect(),
            log_y: true,
            ..Default::default()
        },
        &series,
    )?;
    Ok(())
}
