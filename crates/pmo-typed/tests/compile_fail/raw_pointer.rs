use pmo_typed::Persistent;

#[derive(Persistent)]
#[repr(C)]
struct S {
    p: *mut u64,
}

fn main() {}
