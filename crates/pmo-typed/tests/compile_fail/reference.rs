use pmo_typed::Persistent;

#[derive(Persistent)]
#[repr(C)]
struct S {
    name: &'static str,
}

fn main() {}
