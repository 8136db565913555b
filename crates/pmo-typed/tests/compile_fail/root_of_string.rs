

fn f(heap: &mut pmo_typed::TypedHeap) {
    let _ = heap.root::<String>();
}

fn main() {}
