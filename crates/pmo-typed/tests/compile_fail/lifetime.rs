use pmo_typed::Persistent;

#[derive(Persistent)]
#[repr(C)]
struct S<'a> {
    x: &'a u64,
}

fn main() {}
