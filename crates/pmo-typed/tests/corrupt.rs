//! Typed heaps altered outside pmo (bytes of the PMO changed through a raw attach), huge
//! requests and invalid strings: every call returns a value or an error, never a panic.
#![forbid(unsafe_code)]

mod common;

use common::{Point, Root, ScratchPool, KEY};
use pmo_store::Perm;
use pmo_typed::{PBTreeMap, PHashMap, PString, PVec, Persistent, TypedError, TypedHeap};
use rand::{Rng, SeedableRng};

fn fill(heap: &mut TypedHeap) {
    let (r, h) = heap.root::<Root>().unwrap();
    r.counter = 7;
    r.name.set(h, "hello").unwrap();
    r.boxed.set(h, Point { x: 1, y: -2 }).unwrap();
    for i in 0..60u64 {
        r.list.push(h, i * i).unwrap();
        r.tree.insert(h, i * 3, i).unwrap();
    }
    for i in 0..12u64 {
        r.names.push(h, PString::default()).unwrap();
        let s = r.names.get_mut(h, i as usize).unwrap().unwrap();
        s.set(h, &format!("n{i}")).unwrap();
        r.hash.insert(h, i, PString::default()).unwrap();
        let s = r.hash.get_mut(h, &i).unwrap().unwrap();
        s.set(h, &"x".repeat(i as usize)).unwrap();
    }
}

/// Read everything, then change everything; any error ends the walk (it is the answer).
fn exercise(heap: &mut TypedHeap) -> Result<(), TypedError> {
    {
        let (r, h) = heap.root_ref::<Root>()?;
        let _ = r.name.as_str(h)?;
        let _ = r.boxed.get(h)?;
        let _ = r
            .list
            .as_slice(h)?
            .iter()
            .fold(0u64, |a, x| a.wrapping_add(*x));
        for s in r.names.iter(h)? {
            let _ = s.as_str(h)?;
        }
        for e in r.hash.iter(h)? {
            let (_, v) = e;
            let _ = v.as_str(h)?;
        }
        for e in r.tree.iter(h)? {
            e?;
        }
        for e in r.tree.range(h, 30..=60)? {
            e?;
        }
        for i in 0..12u64 {
            let _ = r.hash.get(h, &i)?;
            let _ = r.tree.get(h, &(i * 3))?;
        }
    }
    heap.check::<Root>()?;
    let (r, h) = heap.root::<Root>()?;
    r.name.push_str(h, " world")?;
    r.boxed.set(h, Point { x: 3, y: 4 })?;
    r.list.push(h, 1)?;
    r.list.insert(h, 0, 2)?;
    r.list.delete(h, 1)?;
    r.names.push(h, PString::default())?;
    r.names.delete(h, 0)?;
    for i in 0..12u64 {
        r.hash.insert(h, 100 + i, PString::default())?;
        r.hash.remove(h, &i)?;
        r.tree.insert(h, 1000 + i, i)?;
        r.tree.remove(h, &(i * 3))?;
    }
    r.list.clear(h)?;
    r.tree.insert(h, 5, 5)?;
    heap.check::<Root>()?;
    Ok(())
}

/// One 8-byte word of the PMO's image, changed.
fn damage(rng: &mut impl Rng, w: u64) -> u64 {
    match rng.gen_range(0..6) {
        0 => w ^ (1 << rng.gen_range(0..64)),
        1 => rng.gen(),
        2 => u64::MAX,
        3 => 0,
        4 => w.wrapping_add(rng.gen_range(1..64)),
        _ => w.wrapping_sub(rng.gen_range(1..64)),
    }
}

/// A pool with the filled heap `t`, and the PMO's image.
fn filled() -> (ScratchPool, Vec<u8>) {
    let sp = ScratchPool::new("corrupt", 16 << 20);
    let mut heap = TypedHeap::create(&sp.pool, "t", 1 << 20, KEY).unwrap();
    fill(&mut heap);
    let image = psync_and_read(&sp, heap);
    (sp, image)
}

/// Write `image` with the words `changes` (offset, new value) changed into the PMO, open it as a
/// typed heap and exercise it: Ok(true) if it all ran, Ok(false) if refused with an error,
/// Err if it panicked.
fn run_altered(sp: &ScratchPool, image: &[u8], changes: &[(usize, u64)]) -> Result<bool, ()> {
    let a = sp.pool.attach("t", Perm::Write, KEY).unwrap();
    a.write_at(0, image).unwrap();
    for &(i, v) in changes {
        a.write_at(i, &v.to_le_bytes()).unwrap();
    }
    a.psync().unwrap();
    a.detach().unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut heap = TypedHeap::open(&sp.pool, "t", KEY)?;
        let r = exercise(&mut heap);
        let _ = heap.detach();
        r
    }));
    match r {
        Err(_) => Err(()),
        Ok(r) => Ok(r.is_ok()),
    }
}

fn word(image: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(image[i..i + 8].try_into().unwrap())
}

#[test]
fn altered_heaps_give_errors_never_panics() {
    let (sp, image) = filled();
    // The words that hold something: the containers' headers, nodes, slots, allocator state.
    let words: Vec<usize> = (0..image.len() / 8)
        .filter(|&i| word(&image, i * 8) != 0)
        .collect();
    let iters: usize = std::env::var("PMO_TYPED_CORRUPT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    let seed = std::env::var("PMO_TYPED_CORRUPT_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0xc0ff);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (mut refused, mut fine) = (0, 0);
    for it in 0..iters {
        let changes: Vec<(usize, u64)> = (0..rng.gen_range(1..=3))
            .map(|_| {
                let i = words[rng.gen_range(0..words.len())] * 8;
                (i, damage(&mut rng, word(&image, i)))
            })
            .collect();
        match run_altered(&sp, &image, &changes) {
            Err(()) => panic!("iteration {it}: words (offset, now) {changes:x?}: a panic"),
            Ok(true) => fine += 1,
            Ok(false) => refused += 1,
        }
    }
    eprintln!("{iters} alterations: {refused} refused, {fine} ran through");
}

/// Every word that looks like a block offset (8-aligned, inside the PMO), made misaligned:
/// refused as corrupt, never dereferenced (a misaligned reference is undefined behaviour;
/// debug builds abort on it).
#[test]
fn misaligned_offsets_are_refused() {
    let (sp, image) = filled();
    let mut tried = 0;
    for i in (0..image.len()).step_by(8) {
        let w = word(&image, i);
        if w < 4096 || !w.is_multiple_of(8) || w >= image.len() as u64 {
            continue;
        }
        for d in [2u64, 4] {
            tried += 1;
            if run_altered(&sp, &image, &[(i, w + d)]).is_err() {
                panic!("word at {i:#x}: {w:#x} -> {:#x}: a panic", w + d);
            }
        }
    }
    assert!(tried > 20, "only {tried} offsets found");
}

#[derive(Persistent, Default)]
#[repr(C)]
struct Emptied {
    v: PVec<u64>,
    s: PString,
}

/// An emptied vector or string keeps its buffer (length 0, capacity > 0); its buffer offset
/// altered to one outside the heap (or past the end of the address space) is refused when the
/// buffer is freed or grown, never added to the mapping's address unchecked.
#[test]
fn an_emptied_buffer_offset_outside_the_heap_is_refused() {
    let sp = ScratchPool::new("emptied", 16 << 20);
    let mut heap = TypedHeap::create(&sp.pool, "t", 1 << 20, KEY).unwrap();
    {
        let (r, h) = heap.root::<Emptied>().unwrap();
        r.v.push(h, 1).unwrap();
        assert_eq!(r.v.pop(h).unwrap(), Some(1));
        r.s.set(h, "abc").unwrap();
        r.s.set(h, "").unwrap();
        assert!(r.v.is_empty() && r.v.capacity() > 0 && r.s.is_empty());
    }
    let image = psync_and_read(&sp, heap);
    // The two headers: (off, len 0, cap > 0, heap, home = the header's own offset).
    let headers: Vec<usize> = (0..image.len() - 40)
        .step_by(8)
        .filter(|&i| {
            word(&image, i + 32) == i as u64
                && word(&image, i + 8) == 0
                && word(&image, i + 16) != 0
                && word(&image, i) != 0
        })
        .collect();
    assert_eq!(headers.len(), 2, "headers at {headers:x?}");
    for &i in &headers {
        // Past the address space, past the PMO, in its metadata.
        for bad in [!7u64, 1 << 63, image.len() as u64 * 64, 8] {
            let a = sp.pool.attach("t", Perm::Write, KEY).unwrap();
            a.write_at(0, &image).unwrap();
            a.write_at(i, &bad.to_le_bytes()).unwrap();
            a.psync().unwrap();
            a.detach().unwrap();
            for op in 0..3 {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let mut heap = TypedHeap::open(&sp.pool, "t", KEY).unwrap();
                    let (r, h) = heap.root::<Emptied>().unwrap();
                    let res = match op {
                        0 => r.v.clear(h).and_then(|_| r.s.clear(h)),
                        1 => {
                            r.v.reserve(h, 100)
                                .and_then(|_| r.s.push_str(h, &"y".repeat(100)))
                        }
                        _ => r.v.push(h, 5).and_then(|_| r.s.set(h, "zz")),
                    };
                    heap.detach().unwrap();
                    res
                }));
                match r {
                    Err(_) => panic!("header {i:#x}, offset {bad:#x}, op {op}: a panic"),
                    Ok(Ok(())) => panic!("header {i:#x}, offset {bad:#x}, op {op}: accepted"),
                    Ok(Err(e)) => assert!(
                        matches!(e, TypedError::Corrupt(_) | TypedError::Alloc(_)),
                        "header {i:#x}, offset {bad:#x}, op {op}: {e:?}"
                    ),
                }
            }
        }
    }
}

#[derive(Persistent, Default)]
#[repr(C)]
struct Counted {
    tree: PBTreeMap<u64, u64>,
    hash: PHashMap<u64, u64>,
}

/// The counts in a map's header (entries, nodes, used slots) altered outside pmo: the checker
/// finds every one, and inserts and removals that would take a count past its range are
/// refused, never an overflow.
#[test]
fn altered_map_counts_are_refused_not_overflowed() {
    let sp = ScratchPool::new("counts", 16 << 20);
    let mut heap = TypedHeap::create(&sp.pool, "t", 1 << 20, KEY).unwrap();
    {
        let (r, h) = heap.root::<Counted>().unwrap();
        for i in 0..100u64 {
            r.tree.insert(h, i, i).unwrap();
            r.hash.insert(h, i, i).unwrap();
        }
    }
    let image = psync_and_read(&sp, heap);
    // The two headers (six words, the last its own offset): the tree's first.
    let headers: Vec<usize> = (0..image.len() - 48)
        .step_by(8)
        .filter(|&i| word(&image, i + 40) == i as u64 && word(&image, i + 8) == 100)
        .collect();
    assert_eq!(headers.len(), 2, "headers at {headers:x?}");
    let (tree, hash) = (headers[0], headers[1]);
    let cases: Vec<(&str, Vec<(usize, u64)>)> = vec![
        ("tree len max", vec![(tree + 8, u64::MAX)]),
        ("tree len 0", vec![(tree + 8, 0)]),
        ("tree nodes max", vec![(tree + 24, u64::MAX)]),
        ("tree nodes 1", vec![(tree + 24, 1)]),
        ("hash len 0", vec![(hash + 8, 0)]),
        ("hash len 0 used 0", vec![(hash + 8, 0), (hash + 24, 0)]),
    ];
    for (what, changes) in cases {
        let a = sp.pool.attach("t", Perm::Write, KEY).unwrap();
        a.write_at(0, &image).unwrap();
        for (i, v) in changes {
            a.write_at(i, &v.to_le_bytes()).unwrap();
        }
        a.psync().unwrap();
        a.detach().unwrap();
        // The checker counts what the walk finds against every header.
        {
            let heap = TypedHeap::open(&sp.pool, "t", KEY).unwrap();
            match heap.check::<Counted>() {
                Err(TypedError::Corrupt(_)) => {}
                other => panic!("{what}: check gave {other:?}, not Corrupt"),
            }
            heap.detach().unwrap();
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut heap = TypedHeap::open(&sp.pool, "t", KEY).unwrap();
            let (r, h) = heap.root::<Counted>().unwrap();
            let mut errors = 0;
            for i in 100..110u64 {
                errors += r.tree.insert(h, i, i).is_err() as u32;
                errors += r.hash.insert(h, i, i).is_err() as u32;
            }
            for i in 0..110u64 {
                errors += r.tree.remove(h, &i).is_err() as u32;
                errors += r.hash.remove(h, &i).is_err() as u32;
            }
            heap.detach().unwrap();
            errors
        }));
        match r {
            Err(_) => panic!("{what}: a panic"),
            Ok(errors) => eprintln!("{what}: {errors} calls refused"),
        }
    }
}

/// A PMO that was never a heap (zeros, random bytes, a heap's image cut short), opened as a
/// typed heap: an error.
#[test]
fn a_pmo_that_is_not_a_heap_is_refused() {
    let (sp, image) = filled();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut random = vec![0u8; 1 << 20];
    rng.fill(&mut random[..]);
    let half = image[..image.len() / 2].to_vec();
    for (name, bytes) in [
        ("zeros", vec![0u8; 1 << 20]),
        ("random", random),
        ("half", half),
    ] {
        sp.pool.pcreate(name, bytes.len() as u64, KEY).unwrap();
        let a = sp.pool.attach(name, Perm::Write, KEY).unwrap();
        a.write_at(0, &bytes).unwrap();
        a.psync().unwrap();
        a.detach().unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            TypedHeap::open(&sp.pool, name, KEY).map(|_| ())
        }));
        match r {
            Err(_) => panic!("{name}: a panic"),
            Ok(Ok(())) => panic!("{name}: opened as a typed heap"),
            Ok(Err(e)) => eprintln!("{name}: {e}"),
        }
    }
}

/// Psync and detach `heap` (PMO "t" of `sp`), then read the PMO's bytes through a raw attach.
fn psync_and_read(sp: &ScratchPool, mut heap: TypedHeap) -> Vec<u8> {
    heap.psync().unwrap();
    heap.detach().unwrap();
    let a = sp.pool.attach("t", Perm::Read, KEY).unwrap();
    let mut image = vec![0u8; a.len()];
    a.read_at(0, &mut image).unwrap();
    a.detach().unwrap();
    image
}
