use pmo_typed::Persistent;

#[derive(Persistent)]
#[repr(C)]
struct S {
    a: u8,
    b: u64,
}

fn main() {}
