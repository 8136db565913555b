//! Fuzz the import of an exported PMO: changes described by the input (bytes XORed, the file
//! cut, the entry's CRC recomputed) applied to a valid export, then imported into the pool it
//! came from: an unchanged file imports whole, a changed one is an integrity failure and the
//! pool keeps exactly its PMOs; never a panic. No seed needed (the body builds the export).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    pmo_store::fuzzing::import_tampered(data);
});
