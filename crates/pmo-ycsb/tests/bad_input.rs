//! Malformed or unusual workload files: a clear error or a correct run, never a panic, a hang
//! or a silently different workload.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use pmo_ycsb::fuzzing::MapStore;
use pmo_ycsb::{load, run, Workload, YcsbError};

/// What a load and run ended with: (records in the store, operations run), the driver's error,
/// or (outer `Err`) the panic's message.
type Outcome = Result<Result<(usize, u64), YcsbError>, String>;

/// Load then run `text`'s workload on a fresh map store in a thread; None if it did not finish
/// within 20 s (a hang).
fn load_and_run(text: &str) -> Option<Outcome> {
    let w = Workload::parse("t", text).expect("the workload parses");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(move || {
            let mut s = MapStore::default();
            load(&mut s, &w, 1)?;
            let r = run(&mut s, &w, 1)?;
            Ok((s.0.len(), r.ops))
        })
        .map_err(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        });
        let _ = tx.send(r);
    });
    rx.recv_timeout(Duration::from_secs(20)).ok()
}

#[test]
fn no_records_to_read_is_an_error_not_a_panic_or_a_hang() {
    for dist in ["zipfian", "uniform", "latest"] {
        let text = format!("recordcount=0\noperationcount=10\nrequestdistribution={dist}\n");
        match load_and_run(&text) {
            None => panic!("{dist}: recordcount=0 hangs the run"),
            Some(Err(p)) => panic!("{dist}: recordcount=0 panics: {p}"),
            Some(Ok(Ok(_))) => panic!("{dist}: reads of no records succeeded"),
            Some(Ok(Err(e))) => {
                let m = e.to_string();
                assert!(m.contains("recordcount=0"), "{dist}: {m}");
            }
        }
    }
}

#[test]
fn an_insert_only_run_needs_no_loaded_records() {
    for dist in ["zipfian", "uniform", "latest"] {
        let text = format!(
            "recordcount=0\noperationcount=50\nreadproportion=0\nupdateproportion=0\n\
             insertproportion=1\nrequestdistribution={dist}\n"
        );
        match load_and_run(&text) {
            None => panic!("{dist}: an insert-only run from nothing hangs"),
            Some(Err(p)) => panic!("{dist}: an insert-only run from nothing panics: {p}"),
            Some(Ok(r)) => assert_eq!(r.unwrap(), (50, 50), "{dist}"),
        }
    }
}

#[test]
fn records_shorter_than_the_tag_read_back() {
    for (fc, fl) in [(0, 100), (10, 0), (1, 1), (1, 7), (2, 4)] {
        let text =
            format!("fieldcount={fc}\nfieldlength={fl}\nreadproportion=1\nupdateproportion=0\n");
        match load_and_run(&text) {
            None => panic!("{fc}x{fl}: hangs"),
            Some(Err(p)) => panic!("{fc}x{fl}: panics: {p}"),
            Some(Ok(r)) => assert_eq!(r.unwrap(), (1000, 1000), "{fc}x{fl}"),
        }
    }
}

fn refused(text: &str, says: &str) {
    match Workload::parse("t", text) {
        Ok(w) => panic!("{text:?} accepted as {w:?}"),
        Err(m) => assert!(m.contains(says), "{text:?}: {m:?} does not say {says:?}"),
    }
}

#[test]
fn values_the_driver_cannot_honour_are_refused() {
    refused("insertorder=hashd\n", "insertorder");
    refused("maxscanlength=0\n", "maxscanlength");
    refused("minscanlength=5\n", "minscanlength");
    refused(
        "fieldlengthdistribution=uniform\n",
        "fieldlengthdistribution",
    );
    refused("insertstart=10\n", "insertstart");
    refused("recordcount=1000\ninsertcount=500\n", "insertcount");
    refused("readproportion=NaN\n", "proportion");
    refused("readproportion=inf\n", "proportion");
    // Each finite, their sum not: every draw would be NaN and pick the last operation type.
    refused(
        "readproportion=1e308\nupdateproportion=1e308\n",
        "proportion",
    );
    refused("recordcount=-1\n", "recordcount");
    refused("recordcount=99999999999999999999\n", "recordcount");
    refused("recordcount=9223372036854775808\n", "recordcount");
    refused("operationcount=18446744073709551615\n", "operationcount");
    refused("fieldlength=2147483648\n", "fieldlength");
    refused(
        "fieldcount=4294967296\nfieldlength=4294967296\n",
        "fieldcount",
    );
    refused("fieldcount=1000000\nfieldlength=1000000\n", "record");
}

#[test]
fn values_it_honours_are_accepted() {
    for text in [
        "insertorder=ordered\n",
        "insertorder=hashed\n",
        "minscanlength=1\n",
        "fieldlengthdistribution=constant\n",
        "insertstart=0\n",
        "recordcount=500\ninsertcount=500\n",
        "insertcount=500\nrecordcount=500\n",
        "readproportion=2\nupdateproportion=2\n",
        "",
    ] {
        Workload::parse("t", text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    }
    let w = Workload::parse("t", "insertorder=ordered\n").unwrap();
    assert!(!w.hashed_keys);
}

#[test]
fn a_byte_order_mark_does_not_hide_the_first_property() {
    // An editor's UTF-8 BOM before the first key made it an unknown key, silently ignored.
    let w = Workload::parse("t", "\u{feff}recordcount=5000\noperationcount=7\n").unwrap();
    assert_eq!((w.record_count, w.operation_count), (5000, 7));
    assert!(Workload::parse("t", "\u{feff}requestdistribution=hotspot\n").is_err());
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pmo-ycsb-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn files_that_are_not_workloads_are_errors() {
    let d = tmpdir("files");
    let e = Workload::from_file(&d.join("missing"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing"), "{e}");
    let e = Workload::from_file(&d).unwrap_err().to_string();
    assert!(e.to_lowercase().contains("directory"), "{e}");
    std::fs::write(d.join("garbage"), [0xffu8, 0xfe, 0, 1, 2, 0x80]).unwrap();
    assert!(Workload::from_file(&d.join("garbage")).is_err());
    // A workload file that is a directory is not silently replaced by the built-in workload.
    std::fs::create_dir(d.join("workloadb")).unwrap();
    let e = Workload::find('b', Some(&d)).unwrap_err().to_string();
    assert!(e.contains("workloadb"), "{e}");
    // A device or a fifo is no property file: refused without reading (/dev/zero never ends).
    std::os::unix::fs::symlink("/dev/zero", d.join("workloadd")).unwrap();
    let e = Workload::find('d', Some(&d)).unwrap_err().to_string();
    assert!(e.contains("not a regular file"), "{e}");
    let e = Workload::from_file(Path::new("/dev/zero"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a regular file"), "{e}");
    // Nor is a file of megabytes.
    std::fs::write(d.join("big"), "# padding\n".repeat(400_000)).unwrap();
    let e = Workload::from_file(&d.join("big")).unwrap_err().to_string();
    assert!(e.contains("larger than"), "{e}");
    // An absent one is: the documented fallback.
    assert_eq!(
        Workload::find('c', Some(&d)).unwrap(),
        Workload::core('c').unwrap()
    );
    std::fs::remove_dir_all(&d).unwrap();
}
