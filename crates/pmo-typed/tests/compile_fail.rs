//! Compile-fail tests: every type that must not live in a PMO is refused at compile time
//! (references, lifetimes, Box, Vec, String, Rc, raw pointers, Drop types, bool, enums,
//! structs without a stable repr or with padding, containers of refused types, a root of a
//! refused type, unions, zero-sized structs). The expected compiler messages are in
//! `tests/compile_fail/*.stderr` (bless changes with `TRYBUILD=overwrite`: the compiler's list
//! of types implementing `Persistent` changes when one is added).
#![forbid(unsafe_code)]

#[test]
fn refused_types_do_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
}
