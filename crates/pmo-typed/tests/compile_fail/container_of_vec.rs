use pmo_typed::Persistent;

use pmo_typed::PVec;

#[derive(Persistent)]
#[repr(C)]
struct S {
    v: PVec<Vec<u8>>,
}

fn main() {}
