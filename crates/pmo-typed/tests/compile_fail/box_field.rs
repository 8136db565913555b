use pmo_typed::Persistent;

#[derive(Persistent)]
#[repr(C)]
struct S {
    b: Box<u64>,
}

fn main() {}
