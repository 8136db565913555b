//! Shared body of the workload-language fuzz target (`fuzz/fuzz_targets/filebench_workload.rs`)
//! and of its smoke test (`tests/fuzz_smoke.rs`): any bytes, read as a `.f` file (and, after a
//! NUL byte, as `--set VAR=VALUE` lines), are parsed and evaluated into a [`Workload`] whose
//! plan is checked, without running it. Bad input must give a [`LangError`] naming the file
//! and a line of it; a panic, a hang or a huge allocation is a defect.

use rand::SeedableRng;

use crate::lang::{parse, LangError};
use crate::model::{Dist, MAX_ENTRIES, MAX_THREADS};
use crate::Workload;

/// The name the fuzzed text is parsed under (what its errors must name).
pub const FILE: &str = "fuzz.f";

/// How far [`parse_and_plan`] got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reached {
    /// The text does not parse (a syntax error).
    Syntax,
    /// It parses but does not evaluate (an unknown name, a bad value, a limit).
    Invalid,
    /// It evaluates into a workload whose plan holds together.
    Planned,
}

/// Split `data` into the workload text and its `--set VAR=VALUE` overrides (the lines after
/// the first NUL byte).
pub fn split_input(data: &[u8]) -> (String, Vec<(String, String)>) {
    let (text, sets) = match data.iter().position(|&b| b == 0) {
        Some(k) => (&data[..k], &data[k + 1..]),
        None => (data, &[][..]),
    };
    let overrides = String::from_utf8_lossy(sets)
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (String::from_utf8_lossy(text).into_owned(), overrides)
}

/// Parse, evaluate and check the plan of `data` (see [`split_input`]). Panics only on a
/// defect: an error without a usable position, or a workload the interpreter could not run.
pub fn parse_and_plan(data: &[u8]) -> Reached {
    let (text, overrides) = split_input(data);
    let lines = text.lines().count();
    let script = match parse(FILE, &text) {
        Ok(s) => s,
        Err(e) => {
            check_error(&e, lines, true);
            return Reached::Syntax;
        }
    };
    let w = match Workload::from_script(&script, &overrides) {
        Ok(w) => w,
        Err(e) => {
            check_error(&e, lines, false);
            return Reached::Invalid;
        }
    };
    check_plan(&w);
    Reached::Planned
}

/// An error names the file it is in, and a line of it (the `--set` ones name `--set`).
fn check_error(e: &LangError, lines: usize, syntax: bool) {
    let shown = e.to_string();
    assert!(!e.msg.is_empty(), "an error without a message: {e:?}");
    if e.file == "--set" {
        return;
    }
    assert_eq!(e.file, FILE, "{shown}");
    assert!(
        e.pos.line >= 1 && e.pos.line <= lines.max(1),
        "{shown}: line {} of a {lines}-line file",
        e.pos.line
    );
    if syntax && e.with_col {
        assert!(e.pos.col >= 1, "{shown}: column 0");
    }
    assert!(
        shown.starts_with(&format!("{FILE}:{}:", e.pos.line)),
        "{shown}"
    );
}

/// What `run` relies on: limits kept, every index in range, every distribution drawable.
fn check_plan(w: &Workload) {
    assert!(
        w.threads.len() as u64 <= MAX_THREADS,
        "{} threads",
        w.threads.len()
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut draw = |d: &Dist| {
        for _ in 0..4 {
            d.sample(&mut rng);
        }
        let _ = d.mean();
    };
    for s in &w.filesets {
        assert!(
            (1..=MAX_ENTRIES).contains(&s.entries),
            "fileset {}: {} entries",
            s.name,
            s.entries
        );
        assert!(s.prealloc_pct <= 100, "fileset {}: prealloc", s.name);
        assert!(s.dirwidth >= 1);
        assert!(!s.single_file || s.entries == 1);
        draw(&s.size);
    }
    for t in &w.threads {
        for f in &t.flowops {
            if let Some(i) = f.fileset {
                assert!(i < w.filesets.len(), "flowop {}: fileset {i}", f.name);
            }
            if let Some(i) = f.target {
                assert!(i < t.flowops.len(), "flowop {}: target {i}", f.name);
            }
            draw(&f.iosize);
            if let Some(d) = &f.indexed {
                draw(d);
            }
        }
    }
    let _ = format!("{w:?}");
}
