use pmo_typed::Persistent;

#[derive(Persistent)]
#[repr(u8)]
enum E {
    A,
    B,
}

fn main() {}
