use pmo_typed::Persistent;

#[derive(Persistent)]
#[repr(C)]
union U {
    a: u64,
    b: u32,
}

fn main() {}
