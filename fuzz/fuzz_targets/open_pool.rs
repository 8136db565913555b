//! Fuzz the pool parser and recovery: any bytes, opened as a pool and used, must give errors,
//! never a panic or undefined behaviour. Seed corpus: `cargo run -p pmo-store --example
//! fuzz_seed` writes a valid sample pool to `fuzz/corpus/open_pool/`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    pmo_store::fuzzing::open_and_exercise(data);
});
