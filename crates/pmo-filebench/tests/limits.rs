//! `finishoncount`, `opslimit` and `eventgen` with Filebench's semantics, and `set mode quit`,
//! on a plain directory (the counting does not depend on the backend).

use std::time::Instant;

use pmo_filebench::backend::PosixBackend;
use pmo_filebench::run::{run, RunOptions, RunResult, SyncMode};
use pmo_filebench::Workload;

fn go(tag: &str, text: &str, cap: f64) -> (RunResult, f64) {
    let dir = std::env::temp_dir().join(format!("pmo-fb-limits-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let w = Workload::from_text(&format!("{tag}.f"), text, &[]).unwrap_or_else(|e| panic!("{e}"));
    let b = PosixBackend::new(dir.clone());
    let t = Instant::now();
    let r = run(
        &w,
        &b,
        &RunOptions {
            seconds_cap: Some(cap),
            sync: SyncMode::Fsync,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{tag}: {e}"));
    let secs = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);
    (r, secs)
}

fn ops(r: &RunResult, name: &str) -> u64 {
    r.flowops
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no flowop {name}: {r:?}"))
        .ops
}

const FILE: &str = "define file name=f,path=$dir,size=0,prealloc\n";

fn writer(mode: &str, finish: &str, threads: u32) -> String {
    format!(
        "set $dir=/t\nset mode quit {mode}\n{FILE}\
         define process name=p,instances=1\n{{\n  thread name=t,memsize=1m,instances={threads}\n  {{\n\
         flowop appendfile name=app,filename=f,iosize=512\n\
         flowop fsync name=sync\n\
         flowop finishoncount name=finish,{finish}\n  }}\n}}\nrun 60\n"
    )
}

#[test]
fn finishoncount_with_a_target_counts_that_flowop_of_its_thread() {
    // Filebench's filemicro_writefsync shape: stop after 25 fsyncs.
    let (r, secs) = go(
        "target",
        &writer("firstdone", "value=25,target=sync", 1),
        30.0,
    );
    assert_eq!(ops(&r, "sync"), 25, "{r:?}");
    assert_eq!(ops(&r, "app"), 25, "{r:?}");
    assert!(secs < 20.0, "the run ended at the count, not at its time");
}

#[test]
fn finishoncount_without_a_target_counts_every_io_flowop() {
    // appendfile + fsync per loop: 40 I/O operations are 20 loops.
    let (r, _) = go("all", &writer("firstdone", "value=40", 1), 30.0);
    assert_eq!(ops(&r, "app") + ops(&r, "sync"), 40, "{r:?}");
}

#[test]
fn alldone_waits_for_every_thread_firstdone_for_one() {
    // Per-thread targets: under alldone each of 3 threads does its own 10 fsyncs.
    let (r, _) = go(
        "alldone",
        &writer("alldone", "value=10,target=sync", 3),
        30.0,
    );
    assert_eq!(ops(&r, "sync"), 30, "{r:?}");
    // Under firstdone the first thread to reach 10 ends the run (the others stop at their
    // next flowop, at most at their own 10th fsync).
    let (r, secs) = go(
        "firstdone",
        &writer("firstdone", "value=10,target=sync", 3),
        30.0,
    );
    let n = ops(&r, "sync");
    assert!((10..=30).contains(&n), "{n}: {r:?}");
    assert!(secs < 20.0);
}

#[test]
fn a_run_longer_than_the_clock_counts_ends_at_its_count() {
    // `run 1e30` is no duration an Instant can add: the run lasts as long as it may, here
    // until its count, and never panics.
    let text = writer("firstdone", "value=5,target=sync", 1).replace("run 60", "run 1e30");
    let w = Workload::from_text("long.f", &text, &[]).unwrap();
    let dir = std::env::temp_dir().join(format!("pmo-fb-limits-{}-long", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let r = run(&w, &PosixBackend::new(dir.clone()), &RunOptions::default());
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(ops(&r.unwrap_or_else(|e| panic!("{e}")), "sync"), 5);
}

#[test]
fn a_thread_without_files_ends_a_firstdone_run() {
    // filemicro_delete's shape: delete until nothing is left.
    let text = "set $dir=/t\nset mode quit firstdone\n\
        define fileset name=s,path=$dir,size=1k,entries=30,dirwidth=10,prealloc=100\n\
        define process name=p,instances=1\n{\n  thread name=t,memsize=1m,instances=2\n  {\n\
        flowop deletefile name=del,filesetname=s\n  }\n}\nrun 60\n";
    let (r, secs) = go("delete", text, 30.0);
    assert_eq!(ops(&r, "del"), 30, "{r:?}");
    assert!(secs < 20.0);
}

#[test]
fn opslimit_holds_operations_to_the_event_rate() {
    let text = |rate: u32| {
        format!(
            "set $dir=/t\neventgen rate={rate}\n{FILE}\
             define process name=p,instances=1\n{{\n  thread name=t,memsize=1m,instances=2\n  {{\n\
             flowop statfile name=stat,filename=f\n\
             flowop opslimit name=limit\n  }}\n}}\nrun 1\n"
        )
    };
    // 100 events/s for 0.6 s: at most ~60 stats (+ the two threads' first, which only note
    // the count, and rounding).
    let (r, secs) = go("limited", &text(100), 0.6);
    let limited = ops(&r, "stat");
    assert!(
        limited as f64 <= 100.0 * secs + 4.0,
        "{limited} in {secs} s"
    );
    assert!(limited >= 2, "{r:?}");
    // Without a generator (rate 0) opslimit does nothing: far more stats in the same time.
    let (r, _) = go("unlimited", &text(0), 0.6);
    assert!(
        ops(&r, "stat") > limited * 5,
        "{} vs {limited}",
        ops(&r, "stat")
    );
}

#[test]
fn a_missing_target_is_a_file_line_error() {
    let text = writer("firstdone", "value=5,target=nosuch", 1);
    let e = Workload::from_text("w.f", &text, &[])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("w.f:10: "), "{e}");
    assert!(e.contains("target 'nosuch'"), "{e}");
}

#[test]
fn finishonbytes_stops_past_the_byte_count() {
    // Filebench stops once strictly more than `value` bytes went through: 11 appends of 1000.
    let text = format!(
        "set $dir=/t\nset mode quit firstdone\n{FILE}\
         define process name=p,instances=1\n{{\n  thread name=t,memsize=1m,instances=1\n  {{\n\
         flowop appendfile name=app,filename=f,iosize=1000\n\
         flowop finishonbytes name=finish,value=10000,target=app\n  }}\n}}\nrun 60\n"
    );
    let (r, _) = go("bytes", &text, 30.0);
    assert_eq!(r.write_bytes, 11_000, "{r:?}");
}

#[test]
fn dsync_makes_every_write_durable() {
    let text = |dsync: &str| {
        format!(
            "set $dir=/t\nset mode quit firstdone\n{FILE}\
             define process name=p,instances=1\n{{\n  thread name=t,memsize=1m,instances=1\n  {{\n\
             flowop appendfile name=app,filename=f,iosize=100{dsync}\n\
             flowop finishoncount name=finish,value=12\n  }}\n}}\nrun 60\n"
        )
    };
    let (r, _) = go("dsync", &text(",dsync"), 30.0);
    assert_eq!((ops(&r, "app"), r.syncs), (12, 12), "{r:?}");
    let (r, _) = go("nodsync", &text(",dsync=false"), 30.0);
    assert_eq!((ops(&r, "app"), r.syncs), (12, 0), "{r:?}");
}

/// A thread of `flowops` on the one-file fileset `f`, under `eventgen rate=RATE`.
fn limited(rate: u32, flowops: &str) -> String {
    format!(
        "set $dir=/t\neventgen rate={rate}\n{FILE}\
         define process name=p,instances=1\n{{\n  thread name=t,memsize=1m,instances=1\n  {{\n\
         {flowops}  }}\n}}\nrun 1\n"
    )
}

#[test]
fn iopslimit_counts_reads_and_writes_only() {
    // Statfiles are not reads or writes: iopslimit without a target lets them run freely...
    let stats = "flowop statfile name=stat,filename=f\nflowop iopslimit name=limit\n";
    let (r, _) = go("iops-stat", &limited(50, stats), 0.5);
    let free = ops(&r, "stat");
    // ...and holds appends to the rate (50/s for 0.5 s: ~25, plus the first and rounding).
    let appends = "flowop appendfile name=app,filename=f,iosize=64\nflowop iopslimit name=limit\n";
    let (r, secs) = go("iops-app", &limited(50, appends), 0.5);
    let held = ops(&r, "app");
    assert!(held as f64 <= 50.0 * secs + 3.0, "{held} in {secs} s");
    assert!(held >= 1, "{r:?}");
    assert!(free > held * 5, "{free} stats vs {held} appends");
}

#[test]
fn eventlimit_takes_one_event_per_run_and_delay_sleeps() {
    let text = "flowop statfile name=stat,filename=f\nflowop eventlimit name=ev\n";
    let (r, secs) = go("eventlimit", &limited(40, text), 0.5);
    let n = ops(&r, "stat");
    assert!(n as f64 <= 40.0 * secs + 2.0, "{n} in {secs} s");
    assert!(n >= 1, "{r:?}");
    // delay value=1 in a 0.4 s run: one stat, then the delay runs out the clock.
    let text = "flowop statfile name=stat,filename=f\nflowop delay name=d,value=1\n\
                flowop hog name=h,value=1000\n";
    let (r, secs) = go("delay", &limited(0, text), 0.4);
    assert_eq!(ops(&r, "stat"), 1, "{r:?}");
    assert!(secs < 5.0, "the delay ends with the run: {secs} s"); // A delay longer than the clock can add (value=1e30) also just runs out the clock.
    let text = "flowop statfile name=stat,filename=f\nflowop delay name=d,value=1e30\n";
    let (r, secs) = go("longdelay", &limited(0, text), 0.4);
    assert_eq!(ops(&r, "stat"), 1, "{r:?}");
    assert!(secs < 5.0, "the delay ends with the run: {secs} s");
}

#[test]
fn a_hog_ends_with_the_run() {
    // hog value=1e30 is 2^64 rounds of busy work: it must stop when the run does.
    let text = "flowop statfile name=stat,filename=f\nflowop hog name=h,value=1e30\n";
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(go("hog", &limited(0, text), 0.3).1);
    });
    let secs = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the run ended");
    assert!(secs < 5.0, "{secs} s");
}

#[test]
fn a_rate_limit_watching_no_io_is_an_error() {
    let text = limited(
        10,
        "flowop statfile name=stat,filename=f\nflowop bwlimit name=bw,target=stat\n",
    );
    let e = Workload::from_text("w.f", &text, &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("w.f:") && e.contains("does no reads or writes"),
        "{e}"
    );
}

#[test]
fn makedir_removedir_and_listdir_on_leaf_directories() {
    let leaf = |prealloc: &str, flowop: &str| {
        format!(
            "set $dir=/t\nset mode quit firstdone\n\
             define fileset name=d,path=$dir,size=0,leafdirs=12,dirwidth=5{prealloc}\n\
             define process name=p,instances=1\n{{\n  thread name=t,memsize=1m,instances=2\n  {{\n\
             flowop {flowop} name=op,filesetname=d\n  }}\n}}\nrun 60\n"
        )
    };
    // Every absent leaf directory is made once, then nothing is left to make.
    let (r, _) = go("makedir", &leaf("", "makedir"), 30.0);
    assert_eq!(ops(&r, "op"), 12, "{r:?}");
    // Preallocated, each is removed once.
    let (r, _) = go("removedir", &leaf(",prealloc", "removedir"), 30.0);
    assert_eq!(ops(&r, "op"), 12, "{r:?}");
    // listdir reads a directory of 5 (or 2) files named 000000NN: 8 + 279 bytes an entry.
    let text = "set $dir=/t\n\
        define fileset name=f,path=$dir,size=1k,entries=12,dirwidth=5,prealloc\n\
        define process name=p,instances=1\n{\n  thread name=t,memsize=1m,instances=1\n  {\n\
        flowop listdir name=ls,filesetname=f\n  }\n}\nrun 1\n";
    let (r, _) = go("listdir", text, 0.3);
    let n = ops(&r, "ls");
    assert!(n > 0, "{r:?}");
    let per_entry = 8 + 279;
    assert_eq!(r.read_bytes % per_entry, 0, "{r:?}");
    let entries = r.read_bytes / per_entry;
    assert!(
        (2 * n..=5 * n).contains(&entries),
        "{entries} entries in {n} listings"
    );
    // A file flowop on a leafdirs fileset is refused at load.
    let e = Workload::from_text("w.f", &leaf("", "statfile"), &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("w.f:") && e.contains("leafdirs fileset"),
        "{e}"
    );
}
