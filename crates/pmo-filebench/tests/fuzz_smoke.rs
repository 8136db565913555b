//! A short smoke of the cargo-fuzz target `fuzz/fuzz_targets/filebench_workload.rs`, which runs
//! the same body (`pmo_filebench::fuzzing::parse_and_plan`): a few hundred mutations of real
//! workload files (`../shared/filebench/*.f` when present, and a seed of this test covering the
//! rest of the language), each parsed and evaluated, must give a `LangError` with the file and
//! a line, never a panic. `FB_FUZZ_CASES` raises the number of cases. The regression cases
//! below are inputs the fuzzer found.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use pmo_filebench::fuzzing::{parse_and_plan, Reached};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The language beyond the standard personalities: randvars, arithmetic, composite flowops,
/// block/wakeup, semaphores, eventgen, continued lines.
const LANGUAGE_SEED: &str = "set $dir=/tmp\nset $n = 3 * 2 + 4 / 2\n\
    set $fs=cvar(type=cvar-gamma,parameters=mean:4096;gamma:1.5)\n\
    define randvar name=$io, type=tabular, min=1k, randtable =\n\
    {{ 50, 1k, 1k},\n { 50, 4k, 4k}}\n\
    set $sz = randvar(type=gamma, min=0, mean=8k,\n gamma=1500, round=1k)\n\
    set mode quit firstdone\neventgen rate=100\ndebug 1\n\
    define fileset name=f,path=$dir,size=$sz,\n   entries=$n,dirwidth=4,prealloc=50\n\
    define file name=one,path=$dir,size=$fs,prealloc\n\
    define flowop name=rw, $len=4k {\n  flowop read name=r1,fd=1,iosize=$len\n  flowop write name=w1,fd=1,iosize=$len\n}\n\
    define process name=p,instances=1 {\n thread name=t,memsize=1m,instances=2 {\n\
      flowop openfile name=o,filesetname=f,fd=1\n\
      flowop rw name=c,iters=3,$len=$io\n\
      flowop closefile name=cl,fd=1\n\
      flowop block name=b\n\
      flowop semblock name=s,value=1,highwater=2\n\
      flowop opslimit name=l\n }\n\
     thread name=u {\n\
      flowop wakeup name=wk,target=b\n\
      flowop sempost name=sp,value=1,target=s\n\
      flowop appendfilerand name=a,filename=one,iosize=$io,dsync\n\
      flowop finishoncount name=fin,value=10,target=a\n }\n}\n\
    echo \"done\"\nrun 1\n";

/// Words and fragments the mutations splice in.
const DICT: &[&str] = &[
    "set ",
    "define ",
    "fileset ",
    "file ",
    "process ",
    "thread ",
    "flowop ",
    "randvar(",
    "cvar(",
    "randtable = {{",
    "{",
    "}",
    "(",
    ")",
    ",",
    "=",
    "$",
    "$n",
    "\"",
    "*",
    "/",
    "+",
    "-",
    "\n",
    "#",
    ":",
    ";",
    "0",
    "1",
    "-1",
    "1e308",
    "16m",
    "4g",
    "1t",
    "99999999999999999999",
    "0.5",
    "iters=",
    "instances=",
    "entries=",
    "iosize=",
    "value=",
    "target=",
    "name=",
    "type=tabular",
    "type=gamma",
    "type=uniform",
    "gamma=",
    "mean=",
    "min=",
    "round=",
    "prealloc",
    "leafdirs=",
    "dirwidth=",
    "fd=",
    "srcfd=",
    "indexed=",
    "run ",
    "echo ",
    "eventgen rate=",
    "set mode quit ",
    "\0n=7",
    "\0dir=..",
    "\0n=cvar(",
    "\u{feff}",
    "é",
];

fn mutate(seed: &[u8], rng: &mut StdRng) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..rng.gen_range(1..6) {
        let at = rng.gen_range(0..=v.len());
        match rng.gen_range(0..7) {
            0 if !v.is_empty() => {
                let k = rng.gen_range(0..v.len());
                v[k] ^= 1 << rng.gen_range(0..8);
            }
            1 => {
                let w = DICT[rng.gen_range(0..DICT.len())].as_bytes();
                v.splice(at..at, w.iter().copied());
            }
            2 if at < v.len() => {
                let end = (at + rng.gen_range(1..40)).min(v.len());
                v.drain(at..end);
            }
            3 => v.truncate(at),
            4 if at < v.len() => {
                // Duplicate a run (a statement repeated, a nesting deepened).
                let end = (at + rng.gen_range(1..200)).min(v.len());
                let run: Vec<u8> = v[at..end].to_vec();
                v.splice(at..at, run);
            }
            5 => {
                // Replace a number with an extreme one.
                if let Some(k) = v[at..].iter().position(|b| b.is_ascii_digit()) {
                    let k = at + k;
                    let end = k + v[k..].iter().take_while(|b| b.is_ascii_digit()).count();
                    let w = [
                        "0",
                        "1e308",
                        "18446744073709551616",
                        "4294967296",
                        "1000000",
                    ][rng.gen_range(0..5)];
                    v.splice(k..end, w.bytes());
                }
            }
            _ => {
                let w = DICT[rng.gen_range(0..DICT.len())].as_bytes();
                let end = (at + w.len()).min(v.len());
                v.splice(at..end, w.iter().copied());
            }
        }
    }
    v
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = vec![("language".to_string(), LANGUAGE_SEED.as_bytes().to_vec())];
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/filebench");
    if let Ok(rd) = std::fs::read_dir(&dir) {
        let mut files: Vec<_> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "f"))
            .collect();
        files.sort();
        for p in files {
            let text = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            out.push((p.display().to_string(), text));
        }
    }
    out
}

/// Run the body on `data` in a thread with a time limit: a hang is a failure too.
fn within(data: Vec<u8>, secs: u64) -> Reached {
    let (tx, rx) = mpsc::channel();
    let shown = String::from_utf8_lossy(&data).into_owned();
    std::thread::spawn(move || {
        let _ = tx.send(parse_and_plan(&data));
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(r) => r,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("no answer within {secs} s for {shown:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("panicked on {shown:?}"),
    }
}

#[test]
fn the_seeds_plan_without_error() {
    for (name, text) in seeds() {
        assert_eq!(parse_and_plan(&text), Reached::Planned, "{name}");
    }
}

#[test]
fn mutated_workloads_give_errors_not_panics() {
    let cases: usize = std::env::var("FB_FUZZ_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    let seeds = seeds();
    let mut rng = StdRng::seed_from_u64(0xfb);
    let mut reached = [0usize; 3];
    for _ in 0..cases {
        let (_, seed) = &seeds[rng.gen_range(0..seeds.len())];
        let input = mutate(seed, &mut rng);
        reached[within(input, 20) as usize] += 1;
    }
    // The mutations reach every stage (not only syntax errors).
    assert!(reached.iter().all(|&n| n > 0), "{reached:?}");
}

/// The error `text` evaluates to (after [`within`] showed it answers at all).
fn error_of(text: &str) -> String {
    match pmo_filebench::Workload::from_text(pmo_filebench::fuzzing::FILE, text, &[]) {
        Ok(_) => panic!("{text:?} evaluated"),
        Err(e) => e.to_string(),
    }
}

/// Found by review, confirmed here: a randtable row's percentage drove a loop of that many
/// pushes, so `{{1e15, 1, 2}}` ran out of memory instead of being refused.
#[test]
fn a_huge_randtable_percentage_is_refused() {
    let text = "set $r = randvar(type=tabular, randtable = {{1e15, 1, 2}})\n";
    assert_eq!(within(text.as_bytes().to_vec(), 20), Reached::Invalid);
    let e = error_of(text);
    assert!(
        e.starts_with("fuzz.f:1: ") && e.contains("more than 100%"),
        "{e}"
    );
}

/// Found by review, confirmed here: a long sum is a deep expression tree (and nested randvars
/// a deep recursion of the parser); evaluating, cloning or dropping it overflowed the stack
/// (an abort, not an error). Refused with the line and column where it gets too deep.
#[test]
fn a_deep_value_is_refused_without_a_stack_overflow() {
    let sum = format!("set $a = 1{}\n", " + 1".repeat(200_000));
    let nested = format!(
        "set $a = {}1{}\n",
        "randvar(mean=".repeat(20_000),
        ")".repeat(20_000)
    );
    for text in [sum, nested] {
        assert_eq!(within(text.clone().into_bytes(), 20), Reached::Syntax);
        let e = error_of(&text);
        assert!(
            e.starts_with("fuzz.f:1:") && e.contains("nested deeper than 64"),
            "{e}"
        );
    }
    // 64 levels are still a value.
    let ok = format!("set $a = 1{}\n", " + 1".repeat(63));
    assert_eq!(parse_and_plan(ok.as_bytes()), Reached::Planned);
}

/// Found by review, confirmed here: composite flowops whose uses expand to nothing, nested,
/// multiply without adding a flowop: 20 uses per level over 7 levels are 20^7 expansions of a
/// 2 KiB file (it ran for minutes; each expansion also copied every variable).
#[test]
fn nested_empty_composites_do_not_hang() {
    let mut text = String::from("define flowop name=c0 {\n}\n");
    for level in 1..8 {
        text.push_str(&format!("define flowop name=c{level} {{\n"));
        for _ in 0..20 {
            text.push_str(&format!("flowop c{}\n", level - 1));
        }
        text.push_str("}\n");
    }
    text.push_str(
        "define process name=p {\nthread name=t {\nflowop c7\nflowop delay value=1\n}\n}\n",
    );
    assert_eq!(within(text.clone().into_bytes(), 20), Reached::Invalid);
    let e = error_of(&text);
    assert!(
        e.starts_with("fuzz.f:") && e.contains("steps to unroll"),
        "{e}"
    );
}

/// Found by review: a workload path was read whole whatever it was, so `/dev/zero` (or a fifo,
/// or a huge file) was read until memory ran out. A device, a directory and a file over
/// 1 MiB are errors naming the path.
#[test]
fn workload_paths_that_are_no_workload_files_are_refused() {
    use pmo_filebench::bench::{read_workload_file, MAX_WORKLOAD_FILE};
    let e = read_workload_file(Path::new("/dev/zero")).unwrap_err();
    assert!(
        e.to_string().contains("/dev/zero: not a regular file"),
        "{e}"
    );
    let dir = std::env::temp_dir();
    let e = read_workload_file(&dir).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
    let big = dir.join(format!("pmo-fb-big-{}.f", std::process::id()));
    std::fs::write(&big, vec![b'#'; MAX_WORKLOAD_FILE as usize + 1]).unwrap();
    let r = read_workload_file(&big);
    std::fs::remove_file(&big).unwrap();
    assert!(r.unwrap_err().to_string().contains("larger than"));
    let text = read_workload_file(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/Cargo.toml"
    )));
    assert!(text.unwrap().contains("pmo-filebench"));
}
