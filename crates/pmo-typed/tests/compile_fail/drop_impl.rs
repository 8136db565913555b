use pmo_typed::Persistent;

#[derive(Persistent)]
#[repr(C)]
struct S {
    x: u64,
}

impl Drop for S {
    fn drop(&mut self) {}
}

fn main() {}
