use pmo_typed::Persistent;

#[derive(Persistent)]
#[repr(C)]
struct S {
    flag: bool,
}

fn main() {}
