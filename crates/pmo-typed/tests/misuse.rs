//! Requests no heap can serve and strings altered outside pmo: errors that leave the container
//! as it was.
#![forbid(unsafe_code)]

mod common;

use common::{ScratchPool, KEY};
use pmo_store::Perm;
use pmo_typed::{PString, PVec, Persistent, TypedError, TypedHeap};

#[derive(Persistent, Default)]
#[repr(C)]
struct Root {
    bytes: PVec<u8>,
    words: PVec<u64>,
    s: PString,
}

#[test]
fn huge_reservations_are_refused_and_change_nothing() {
    let sp = ScratchPool::new("huge", 16 << 20);
    let mut heap = TypedHeap::create(&sp.pool, "t", 1 << 20, KEY).unwrap();
    let (r, h) = heap.root::<Root>().unwrap();
    r.bytes.extend_from_slice(h, b"abc").unwrap();
    r.words.extend_from_slice(h, &[1, 2, 3]).unwrap();
    let (bc, wc) = (r.bytes.capacity(), r.words.capacity());
    for extra in [usize::MAX, usize::MAX - 2, usize::MAX / 8, 1 << 40, 2 << 20] {
        let e = r.bytes.reserve(h, extra).unwrap_err();
        assert!(
            matches!(e, TypedError::CapacityOverflow | TypedError::Alloc(_)),
            "bytes + {extra}: {e:?}"
        );
        let e = r.words.reserve(h, extra).unwrap_err();
        assert!(
            matches!(e, TypedError::CapacityOverflow | TypedError::Alloc(_)),
            "words + {extra}: {e:?}"
        );
        assert_eq!(r.bytes.as_slice(h).unwrap(), b"abc");
        assert_eq!(r.words.as_slice(h).unwrap(), &[1, 2, 3]);
        assert_eq!((r.bytes.capacity(), r.words.capacity()), (bc, wc));
    }
    // A string too long for the heap: refused, the old one kept.
    r.s.set(h, "kept").unwrap();
    let long = "x".repeat(4 << 20);
    assert!(r.s.set(h, &long).is_err());
    assert!(r.s.push_str(h, &long).is_err());
    assert_eq!(r.s.as_str(h).unwrap(), "kept");
    let c = heap.check::<Root>().unwrap();
    assert!(c.unreachable.is_empty(), "leak: {:?}", c.unreachable);
}

#[test]
fn a_string_altered_to_invalid_utf8_reads_as_an_error() {
    let sp = ScratchPool::new("utf8", 16 << 20);
    let mut heap = TypedHeap::create(&sp.pool, "t", 1 << 20, KEY).unwrap();
    {
        let (r, h) = heap.root::<Root>().unwrap();
        r.s.set(h, "pmo-typed-marker-é").unwrap();
    }
    heap.psync().unwrap();
    heap.detach().unwrap();
    let a = sp.pool.attach("t", Perm::Write, KEY).unwrap();
    let mut image = vec![0u8; a.len()];
    a.read_at(0, &mut image).unwrap();
    let at = image
        .windows(16)
        .position(|w| w == b"pmo-typed-marker")
        .expect("the string's bytes");
    // The 'é' (0xc3 0xa9) cut in half: a truncated sequence; and a lone continuation byte.
    a.write_at(at + 18, b"A").unwrap();
    a.write_at(at + 3, &[0x80]).unwrap();
    a.psync().unwrap();
    a.detach().unwrap();
    let mut heap = TypedHeap::open(&sp.pool, "t", KEY).unwrap();
    let (r, h) = heap.root::<Root>().unwrap();
    assert!(matches!(r.s.as_str(h), Err(TypedError::Utf8(_))));
    assert!(r.s.push_str(h, "more").is_ok());
    assert!(matches!(r.s.as_str(h), Err(TypedError::Utf8(_))));
    r.s.set(h, "fine").unwrap();
    assert_eq!(r.s.as_str(h).unwrap(), "fine");
}

/// A PKv insert whose value does not fit: refused, and the store is as it was (no key with an
/// empty value left behind, an old value kept), durable or not.
#[test]
fn pkv_a_value_too_large_leaves_the_store_as_it_was() {
    use pmo_typed::kv::PKv;
    let sp = ScratchPool::new("kvbig", 16 << 20);
    let heap = TypedHeap::create(&sp.pool, "kv", 1 << 20, KEY).unwrap();
    let mut kv = PKv::new(heap, 1).unwrap();
    kv.insert(b"old", b"kept").unwrap();
    let big = vec![7u8; 4 << 20];
    assert!(kv.insert(b"new", &big).is_err());
    assert!(kv.update(b"old", &big).is_err());
    let mut out = Vec::new();
    assert!(
        !kv.read(b"new", &mut out).unwrap(),
        "a failed insert left {out:?}"
    );
    assert!(kv.read(b"old", &mut out).unwrap());
    assert_eq!(out, b"kept");
    assert_eq!(kv.len().unwrap(), 1);
    assert_eq!(kv.scan(b"a", 10).unwrap(), 1);
    kv.close().unwrap();
    let heap = TypedHeap::open(&sp.pool, "kv", KEY).unwrap();
    let mut kv = PKv::new(heap, 1).unwrap();
    assert!(!kv.read(b"new", &mut out).unwrap());
    assert_eq!(kv.len().unwrap(), 1);
    let c = kv.heap().check::<pmo_typed::kv::KvRoot>().unwrap();
    assert!(c.unreachable.is_empty(), "leak: {:?}", c.unreachable);
}

/// A root type larger than the heap: an error at `root`, and the heap still serves a root that
/// fits.
#[test]
fn a_root_larger_than_the_heap_is_refused() {
    let sp = ScratchPool::new("bigroot", 16 << 20);
    let mut heap = TypedHeap::create(&sp.pool, "t", 1 << 20, KEY).unwrap();
    assert!(heap.root::<[u64; 1 << 18]>().is_err());
    assert!(heap.root_ref::<[u64; 1 << 18]>().is_err());
    let (r, h) = heap.root::<Root>().unwrap();
    r.s.set(h, "fits").unwrap();
    heap.psync().unwrap();
}
