//! The study writes every table and figure (small size, few runs, so it stays a test): each
//! figure as SVG and as a real PNG beside it, with tick labels a person would write.

use std::path::Path;

use pmo_cxlsim::kernels::Size;
use pmo_cxlsim::study::{run_study, StudyConfig};

#[test]
fn study_writes_csv_svg_png_and_summary() {
    let dir = std::env::temp_dir().join(format!("pmo-cxlsim-study-{}", std::process::id()));
    let mut config = StudyConfig::new(dir.clone(), true);
    config.size = Size::Small;
    config.workloads = vec!["fft".into(), "cholesky".into()];
    config.hops = vec![0, 1, 2];
    config.pb_entries = vec![8, 16];
    config.progress = false;
    let result = run_study(&config).expect("study");
    assert_eq!(result.rows.len(), 2);
    assert_eq!(result.strict_rows.len(), 2);
    for row in &result.strict_rows {
        // A fence after every flush puts each persist on the thread's path: a buffer one hop
        // closer must cut the persist latency and speed the run up.
        assert!(
            row.persist_norm(1) < 0.8,
            "{}: {}",
            row.workload,
            row.persist_norm(1)
        );
        assert!(row.speedup(1) > 1.0, "{}: {}", row.workload, row.speedup(1));
    }
    assert_eq!(result.fig1.len(), 3);
    assert_eq!(result.fig1_strict.len(), 3);
    // With a fence after every flush the buffer in the first switch hides the extra hop.
    assert!(result.fig1_strict[2].2 < result.fig1_strict[2].1);
    assert_eq!(result.fig8.len(), 4);
    assert_eq!(result.fig8_strict.len(), 4);
    assert!(
        result.fig1[1].1 > result.fig1[0].1,
        "one hop must cost more than none"
    );
    for file in [
        "fig1_hops.csv",
        "workloads.csv",
        "workloads_strict.csv",
        "fig8_pb_entries.csv",
        "summary.md",
    ] {
        let meta = std::fs::metadata(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(meta.len() > 100, "{file} is nearly empty");
    }
    let figures = [
        "fig1_hops",
        "fig1_hops_strict",
        "fig5_speedup",
        "fig5_speedup_strict",
        "fig6a_persist_latency",
        "fig6b_read_latency",
        "fig7_pb_rates",
        "fig8_pb_entries",
        "fig8_pb_entries_strict",
    ];
    for name in figures {
        assert!(dir.join(format!("{name}.svg")).is_file(), "{name}.svg");
    }
    assert_eq!(assert_figures(&dir), figures.len(), "one SVG per figure");
    let texts = |f: &str| pmo_plot::svg_texts(&std::fs::read_to_string(dir.join(f)).unwrap());
    let fig5 = texts("fig5_speedup.svg");
    for want in ["cholesky", "fft", "mean", "pb", "pb-rf"] {
        assert!(fig5.iter().any(|t| t == want), "{want}: {fig5:?}");
    }
    // The axes name their unit and statistic: three runs of every configuration.
    assert!(
        fig5.iter()
            .any(|t| t == "speedup over nopb (x; mean simulated time of 3 runs)"),
        "{fig5:?}"
    );
    assert!(texts("fig6a_persist_latency.svg")
        .iter()
        .any(|t| t == "persist latency / nopb (mean of 3 runs' persists)"));
    assert!(texts("fig7_pb_rates.svg")
        .iter()
        .any(|t| t == "share (%, pooled over 3 runs)"));
    // Fig. 8: PB entries on the x axis, ticks at the entries the study ran.
    let fig8 = texts("fig8_pb_entries.svg");
    for want in ["8", "16", "PB entries (log scale)", "fft pb", "fft pb-rf"] {
        assert!(fig8.iter().any(|t| t == want), "{want}: {fig8:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every SVG in `dir` has a real PNG beside it, and no text of it is a raw float such as
/// `5000000.0`, `1.2000000000000002` or `12500`; its numeric tick labels are found. Returns
/// how many SVGs there are.
fn assert_figures(dir: &Path) -> usize {
    let mut svgs = 0;
    for entry in std::fs::read_dir(dir).expect("out dir") {
        let svg = entry.expect("entry").path();
        if svg.extension().is_none_or(|e| e != "svg") {
            continue;
        }
        svgs += 1;
        let png = svg.with_extension("png");
        let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
        assert!(
            bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.get(12..16) == Some(b"IHDR"),
            "{} is no PNG",
            png.display()
        );
        // A blank page compresses to a few hundred bytes; axes, text and bars do not.
        assert!(
            bytes.len() > 8_000,
            "{}: {} bytes",
            png.display(),
            bytes.len()
        );
        let texts = pmo_plot::svg_texts(&std::fs::read_to_string(&svg).expect("svg"));
        for t in &texts {
            assert!(!raw_number(t), "{}: tick label {t:?}", svg.display());
        }
        assert!(
            texts.iter().filter(|t| t.parse::<f64>().is_ok()).count() >= 3,
            "{}: no numeric ticks in {texts:?}",
            svg.display()
        );
    }
    svgs
}

/// A number as a program prints it, not as a person writes a tick: a trailing `.0`, more than
/// three decimals, or five digits and more without `k`/`M`.
fn raw_number(t: &str) -> bool {
    let Ok(v) = t.parse::<f64>() else {
        return false;
    };
    t.ends_with(".0") || t.split('.').nth(1).is_some_and(|d| d.len() > 3) || v.abs() >= 10_000.0
}

#[test]
fn raw_numbers_are_told_from_ticks() {
    for raw in ["5000000.0", "1.0", "1.2000000000000002", "12500"] {
        assert!(raw_number(raw), "{raw}");
    }
    for tick in ["0", "0.5", "1.25", "5 M", "10 k", "64", "fft", "n=0"] {
        assert!(!raw_number(tick), "{tick}");
    }
}
