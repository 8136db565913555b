use pmo_typed::Persistent;

#[derive(Persistent)]
struct S {
    x: u64,
}

fn main() {}
