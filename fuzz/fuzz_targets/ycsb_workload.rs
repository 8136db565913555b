//! Fuzz YCSB property files: any bytes, parsed by `pmo_ycsb::Workload::parse` and, when they
//! parse, loaded and run at a small size on an in-memory store, must give an error message or
//! a correct run, never a panic, a hang or a huge allocation. Seeds: YCSB's own files, e.g.
//! `cargo +nightly fuzz run ycsb_workload <corpus dir> /work/shared/ycsb`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    pmo_ycsb::fuzzing::parse_and_run(data);
});
