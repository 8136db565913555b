//! The study writes every table and figure (small size, few runs, so it stays a test).

use pmo_cxlsim::kernels::Size;
use pmo_cxlsim::study::{run_study, StudyConfig};

#[test]
fn study_writes_csv_svg_and_summary() {
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
        "fig1_hops.svg",
        "fig1_hops_strict.svg",
        "workloads.csv",
        "workloads_strict.csv",
        "fig5_speedup_strict.svg",
        "fig5_speedup.svg",
        "fig6a_persist_latency.svg",
        "fig6b_read_latency.svg",
        "fig7_pb_rates.svg",
        "fig8_pb_entries.csv",
        "fig8_pb_entries.svg",
        "fig8_pb_entries_strict.svg",
        "summary.md",
    ] {
        let meta = std::fs::metadata(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(meta.len() > 100, "{file} is nearly empty");
    }
    let svg = std::fs::read_to_string(dir.join("fig5_speedup.svg")).expect("svg");
    assert!(svg.contains("<svg") && svg.contains("cholesky"));
    let _ = std::fs::remove_dir_all(&dir);
}
