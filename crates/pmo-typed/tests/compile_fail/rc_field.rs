use pmo_typed::Persistent;

#[derive(Persistent)]
#[repr(C)]
struct S {
    r: std::rc::Rc<u64>,
}

fn main() {}
