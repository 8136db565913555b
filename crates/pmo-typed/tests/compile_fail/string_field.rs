use pmo_typed::Persistent;

#[derive(Persistent)]
#[repr(C)]
struct S {
    s: String,
}

fn main() {}
