//! `pmo bench filebench` as a user meets it: a short run with records, the plain-directory
//! peer, and the exit-code contract for bad workload files and options (1, one line).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pmo-cli-fb-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn pmo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pmo"))
        .args(args)
        .env_remove("PMO_LATENCY")
        .env_remove("PMO_PREDICT")
        .output()
        .unwrap()
}

fn fails(o: &Output, needle: &str) {
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "stderr: {e}");
    let last = e.trim_end().lines().last().unwrap_or("");
    assert!(last.starts_with("pmo: "), "{e:?}");
    assert!(last.contains(needle), "{needle:?} not in {e:?}");
}

const SHORT: [&str; 12] = [
    "bench",
    "filebench",
    "--quick",
    "--study",
    "fig10",
    "--set",
    "nfiles=12",
    "--set",
    "nthreads=2",
    "--seconds",
    "0.3",
    "--workload",
];

#[test]
fn a_short_run_writes_records() {
    let d = tmpdir("run");
    let json = d.join("fb.json");
    let mut args: Vec<&str> = SHORT.to_vec();
    let (out, j) = (d.to_str().unwrap(), json.to_str().unwrap());
    args.extend([
        "varmail", "--scheme", "none", "--scheme", "wedi", "--out", out, "--json", j,
    ]);
    let o = pmo(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&json).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let recs = v["records"].as_array().unwrap();
    let ops: Vec<(String, f64)> = recs
        .iter()
        .filter(|r| r["metric"] == "ops")
        .map(|r| {
            let scheme = r["params"]["scheme"].as_str().unwrap_or("").to_string();
            (scheme, r["value"].as_f64().unwrap())
        })
        .collect();
    let mut schemes: Vec<&str> = ops.iter().map(|(s, _)| s.as_str()).collect();
    schemes.sort_unstable();
    // The POSIX peers: tmpfs (`posix`, in the pool's directory), and a disk file system
    // (`posix-disk`) when this machine has a directory that is not tmpfs.
    assert!(
        schemes == ["none", "posix", "posix-disk", "wedi"] || schemes == ["none", "posix", "wedi"],
        "{schemes:?}"
    );
    assert!(ops.iter().all(|(_, n)| *n > 0.0), "{ops:?}");
    for r in recs
        .iter()
        .filter(|r| r["params"]["scheme"] == "posix-disk")
    {
        assert_ne!(r["params"]["fs"], "tmpfs", "the disk peer ran on tmpfs");
    }
    if schemes.contains(&"posix-disk") {
        assert!(String::from_utf8_lossy(&o.stdout).contains("against POSIX file systems"));
    }
    assert!(recs
        .iter()
        .any(|r| r["metric"] == "write_bytes" && r["value"].as_f64() > Some(0.0)));
    assert!(Path::new(out).join("filebench.csv").exists());
    assert!(String::from_utf8_lossy(&o.stdout).contains("normalised to wedi"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn dir_runs_against_a_plain_directory() {
    let d = tmpdir("posix");
    let root = d.join("files");
    let mut args: Vec<&str> = SHORT.to_vec();
    let (out, r) = (d.to_str().unwrap(), root.to_str().unwrap());
    args.extend(["webserver", "--dir", r, "--threads", "2", "--out", out]);
    let o = pmo(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let csv = std::fs::read_to_string(d.join("filebench.csv")).unwrap();
    assert!(csv.contains("posix") && !csv.contains(",pmo,"), "{csv}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bad_workload_files_and_options_exit_1() {
    let d = tmpdir("bad");
    let f = d.join("bad.f");
    std::fs::write(&f, "set $n=1\ndefine fileset name=s,entries=$n\ndefine process name=p\n{\n thread name=t\n {\n  flowop frobfile name=x,filesetname=s\n }\n}\n").unwrap();
    let o = pmo(&["bench", "filebench", "--workload", f.to_str().unwrap()]);
    fails(&o, "bad.f:7: unknown flowop 'frobfile'");
    std::fs::write(&f, "set $n 1\n").unwrap();
    let o = pmo(&["bench", "filebench", "--workload", f.to_str().unwrap()]);
    fails(&o, "bad.f:1:8: expected '='");
    let o = pmo(&["bench", "filebench", "--workload", "/nonexistent/x.f"]);
    fails(&o, "/nonexistent/x.f");
    let o = pmo(&["bench", "filebench", "--sync", "sometimes"]);
    fails(&o, "unknown sync mode 'sometimes'");
    let o = pmo(&["bench", "filebench", "--set", "nfiles"]);
    fails(&o, "expected VAR=VALUE");
    let o = pmo(&["bench", "filebench", "--scheme", "rot13"]);
    fails(&o, "unknown scheme 'rot13'");
    std::fs::remove_dir_all(&d).unwrap();
}

/// `pmo bench suite --psync-interval`: the papers' tempo in seconds of the unprotected run,
/// checked (a usage error, exit 1, one line), refused for other benchmarks, and effective: a
/// tiny interval psyncs after every step, an hour once per run.
#[test]
fn suite_psync_interval_sets_the_tempo_and_is_checked() {
    for bad in ["0", "-1", "nan", "inf", "3601"] {
        let arg = format!("--psync-interval={bad}");
        let o = pmo(&["bench", "suite", &arg, "--size", "tiny"]);
        fails(&o, "--psync-interval takes seconds above 0");
    }
    fails(
        &pmo(&["bench", "store", "--psync-interval", "1"]),
        "--psync-interval is for the suite",
    );
    let psyncs = |interval: &str| -> f64 {
        let d = tmpdir(&format!("iv{}", interval.len()));
        let o = pmo(&[
            "bench",
            "suite",
            "--quick",
            "--size",
            "tiny",
            "--workload",
            "gauss",
            "--study",
            "breakdown",
            "--scheme",
            "none",
            "--psync-interval",
            interval,
            "--out",
            d.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let csv = std::fs::read_to_string(d.join("suite.csv")).unwrap();
        let head: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        let col = |n: &str| head.iter().position(|h| *h == n).unwrap();
        let (metric, value) = (col("metric"), col("value"));
        let v = csv
            .lines()
            .skip(1)
            .map(|l| l.split(',').collect::<Vec<_>>())
            .find(|f| f[metric] == "psyncs")
            .map(|f| f[value].parse().unwrap())
            .unwrap();
        std::fs::remove_dir_all(&d).unwrap();
        v
    };
    let (fast, slow) = (psyncs("0.000001"), psyncs("3600"));
    assert_eq!(slow, 1.0, "an hour's interval psyncs once, at the end");
    assert!(
        fast > 4.0,
        "a microsecond's interval psyncs every step: {fast}"
    );
}
