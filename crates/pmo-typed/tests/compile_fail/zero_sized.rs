use pmo_typed::Persistent;

#[derive(Persistent)]
#[repr(C)]
struct Empty;

fn main() {}
