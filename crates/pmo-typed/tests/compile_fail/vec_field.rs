use pmo_typed::Persistent;

#[derive(Persistent)]
#[repr(C)]
struct S {
    v: Vec<u64>,
}

fn main() {}
