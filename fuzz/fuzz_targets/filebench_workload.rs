//! Fuzz Filebench's workload language: any bytes, parsed and evaluated as a `.f` file (with
//! `--set` overrides after a NUL byte), must give a `LangError` naming the file and line, never
//! a panic, a hang or a huge allocation. Seeds: the real workload files, e.g.
//! `cargo +nightly fuzz run filebench_workload <corpus dir> /work/shared/filebench`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    pmo_filebench::fuzzing::parse_and_plan(data);
});
