//! Figures for `docs/lifecycle.md` ("Resize"): the time of a grow (by 1 MiB) and of a shrink
//! (back by 1 MiB) against the PMO's size, for a PMO never written and for one whose every page
//! is committed, in two layouts:
//! - `moved`: the PMO laid out for its size, so a grow moves it to a new extent (committed
//!   pages copied as stored under `secure`; `wedi`'s whole-PMO checksum makes it decrypt every
//!   page); repeat `k` grows by `k` MiB, past the capacity the move before left. A shrink is in
//!   place whatever the layout (but under `wedi`, which has no capacity); column `how` says
//!   what each op did;
//! - `in-place`: the PMO created with a maximum size (`pcreate_max`, the grown size), so a
//!   resize within it changes only metadata.
//!
//! Medians over `REPEATS` runs of each, pools on /dev/shm.
//!
//! Prints CSV (`op,scheme,fill,layout,how,pmo_mib,median_ms,min_ms,max_ms,data_mib_per_s`) and
//! writes it with the figure (`resize.csv`, `resize.svg`) to `--out DIR` (default
//! `bench-out/resize`).
//!
//! `cargo run --release -p pmo-bench --example resize_figures -- [--out DIR] [MIB...]`

use std::path::PathBuf;
use std::time::Instant;

use pmo_bench::plot::{self, LineChart, Series};
use pmo_store::{KdfParams, Perm, Pool, PoolOptions, ResizeOptions, Scheme};

const REPEATS: usize = 5;
const KEY: &[u8] = b"resize-figures";
const STEP: u64 = 1 << 20;

struct Row {
    op: &'static str,
    scheme: &'static str,
    fill: &'static str,
    layout: &'static str,
    how: &'static str,
    mib: u64,
    ms: Vec<f64>,
}

impl Row {
    fn median(&self) -> f64 {
        let mut v = self.ms.clone();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }
    fn min(&self) -> f64 {
        self.ms.iter().copied().fold(f64::MAX, f64::min)
    }
    fn max(&self) -> f64 {
        self.ms.iter().copied().fold(0.0, f64::max)
    }
}

/// Commit every page of PMO "p" (256 pages per psync).
fn fill_all(pool: &Pool, pages: u64) -> Result<(), Box<dyn std::error::Error>> {
    let h = pool.open_pmo("p", Perm::Write, KEY, None)?;
    let mut p = 0;
    while p < pages {
        let idx: Vec<u64> = (p..(p + 256).min(pages)).collect();
        h.commit_with(&idx, &mut |i, dst| {
            dst.fill(i as u8 | 1);
            Ok(())
        })?;
        p += 256;
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut out = PathBuf::from("bench-out/resize");
    let mut sizes = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--out" {
            out = args.next().ok_or("--out needs a directory")?.into();
        } else {
            sizes.push(a.parse::<u64>()?);
        }
    }
    if sizes.is_empty() {
        sizes = vec![1, 4, 16, 64, 256];
    }
    std::fs::create_dir_all(&out)?;
    let dir =
        std::path::Path::new("/dev/shm").join(format!("pmo-resize-fig-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut rows: Vec<Row> = Vec::new();
    let cases = [
        ("secure", "empty", "moved"),
        ("secure", "full", "moved"),
        ("wedi", "full", "moved"),
        ("secure", "empty", "in-place"),
        ("secure", "full", "in-place"),
        ("none", "full", "in-place"),
    ];
    for &mib in &sizes {
        for (scheme, fill, layout) in cases {
            let size = mib << 20;
            let path = dir.join(format!("p{mib}-{scheme}-{fill}-{layout}.pool"));
            let _ = std::fs::remove_file(&path);
            // Room for the PMO and its grown copy side by side (two data slots each), with
            // the holes the moves leave.
            let opts = PoolOptions {
                kdf: KdfParams::INSECURE_FAST,
                ns_capacity: Some(64),
                scheme: Scheme::from_name(scheme)?,
                ..Default::default()
            };
            let pool = Pool::create(&path, 8 * size + (128 << 20), &opts)?;
            let max = if layout == "in-place" { size + STEP } else { 0 };
            pool.pcreate_max("p", size, max, KEY, None)?;
            if fill == "full" {
                fill_all(&pool, size / 4096)?;
            }
            let mut grow = Row {
                op: "grow",
                scheme,
                fill,
                layout,
                how: "",
                mib,
                ms: Vec::new(),
            };
            let mut shrink = Row {
                op: "shrink",
                ms: Vec::new(),
                ..grow
            };
            for k in 1..=REPEATS as u64 {
                // In place: by 1 MiB, to the capacity; moved: past the last move's capacity.
                let grown = if layout == "in-place" { 1 } else { k };
                for (row, to) in [(&mut grow, size + grown * STEP), (&mut shrink, size)] {
                    let t = Instant::now();
                    let r = pool.resize("p", to, KEY, ResizeOptions::default())?;
                    row.ms.push(t.elapsed().as_secs_f64() * 1e3);
                    let how = if r.in_place { "in-place" } else { "moved" };
                    if !row.how.is_empty() && row.how != how {
                        return Err(format!("{scheme} {fill} {layout} {}: {how}", row.op).into());
                    }
                    row.how = how;
                }
                if grow.how != layout {
                    return Err(format!("{scheme} {fill} {layout}: grow {}", grow.how).into());
                }
            }
            rows.push(grow);
            rows.push(shrink);
            drop(pool);
            pmo_store::wait_for_background_detaches();
            std::fs::remove_file(&path)?;
        }
    }
    let _ = std::fs::remove_dir(&dir);
    let mut csv =
        String::from("op,scheme,fill,layout,how,pmo_mib,median_ms,min_ms,max_ms,data_mib_per_s\n");
    for r in &rows {
        let data = if r.fill == "full" { r.mib as f64 } else { 0.0 };
        csv.push_str(&format!(
            "{},{},{},{},{},{},{:.3},{:.3},{:.3},{:.0}\n",
            r.op,
            r.scheme,
            r.fill,
            r.layout,
            r.how,
            r.mib,
            r.median(),
            r.min(),
            r.max(),
            data / (r.median() / 1e3)
        ));
    }
    print!("{csv}");
    std::fs::write(out.join("resize.csv"), &csv)?;
    let mut series: Vec<Series> = Vec::new();
    for (scheme, fill, layout) in cases {
        for op in ["grow", "shrink"] {
            let pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| {
                    r.op == op && r.scheme == scheme && r.fill == fill && r.layout == layout
                })
                .map(|r| (r.mib as f64, r.median()))
                .collect();
            let how = rows
                .iter()
                .find(|r| r.op == op && r.scheme == scheme && r.fill == fill && r.layout == layout)
                .map_or("", |r| r.how);
            series.push(Series::plain(
                format!("{op}, {scheme}, {fill}, {how}"),
                &pts,
            ));
        }
    }
    let svg = out.join("resize.svg");
    plot::lines(
        &svg,
        &LineChart {
            title: "Resize time against PMO size (median of 5; pools on /dev/shm)",
            x_desc: "PMO size (MiB)",
            y_desc: "resize time (ms, median of 5)",
            log: true,
            integer_x: true,
            ..Default::default()
        },
        &mut series,
    )?;
    eprintln!(
        "wrote {} and {}",
        out.join("resize.csv").display(),
        svg.display()
    );
    Ok(())
}
