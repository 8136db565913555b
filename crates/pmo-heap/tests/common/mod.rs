//! Helpers shared by the integration tests: scratch pools and a linked list in the heap.
#![allow(dead_code, unsafe_code)]

use pmo_heap::{HeapPtr, PmoHeap};
use pmo_store::{KdfParams, Pool, PoolOptions};
use std::path::PathBuf;

pub const KEY: &[u8] = b"pmo-heap-test-key";

/// A pool file removed on drop.
pub struct ScratchPool {
    pub pool: Pool,
    pub path: PathBuf,
}

impl ScratchPool {
    pub fn new(tag: &str, bytes: u64) -> ScratchPool {
        let path = std::env::temp_dir().join(format!(
            "pmo-heap-{tag}-{}-{}.pool",
            std::process::id(),
            rand::random::<u32>()
        ));
        let _ = std::fs::remove_file(&path);
        let opts = PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            ..Default::default()
        };
        let pool = Pool::create(&path, bytes, &opts).expect("create pool");
        ScratchPool { pool, path }
    }

    /// Close and reopen the pool (as another run of the program would).
    pub fn reopen(&mut self) {
        self.pool = Pool::open(&self.path).expect("reopen pool");
    }
}

impl Drop for ScratchPool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A list node: typed offset of the next node, a value, and `len` payload bytes after it.
#[repr(C)]
pub struct Node {
    pub next: HeapPtr<Node>,
    pub value: u64,
    pub len: u64,
}

pub const NODE_BYTES: usize = std::mem::size_of::<Node>();

pub fn payload_byte(value: u64, i: usize) -> u8 {
    (value.wrapping_mul(131).wrapping_add(i as u64 * 7) % 253) as u8
}

/// Allocate a node with `len` payload bytes in front of the list and make it the root. Every
/// helper that writes into a block declares it (a no-op unless the attachment uses declared
/// dirty tracking).
pub fn push(h: &PmoHeap, value: u64, len: usize) -> HeapPtr<Node> {
    let head = h.root_ptr::<Node>().expect("root");
    let p = h.alloc(NODE_BYTES + len, 8).expect("alloc node");
    // SAFETY: a fresh block of NODE_BYTES + len bytes, 8-aligned, known only to us.
    unsafe {
        p.cast::<Node>().as_ptr().write(Node {
            next: head,
            value,
            len: len as u64,
        });
        for i in 0..len {
            p.as_ptr().add(NODE_BYTES + i).write(payload_byte(value, i));
        }
    }
    h.declare(p.as_ptr(), NODE_BYTES + len).expect("declare");
    h.set_root(Some(p)).expect("link");
    h.to_heap_ptr(p.cast::<Node>()).expect("typed")
}

/// Unlink the first node and free it; its value, if any.
pub fn pop(h: &PmoHeap) -> Option<u64> {
    let head = h.root().expect("root")?;
    // SAFETY: the root is a live Node (checked by `root`).
    let node = unsafe { head.cast::<Node>().as_ptr().read() };
    let next = h.resolve(node.next).expect("next").map(|p| p.cast::<u8>());
    h.set_root(next).expect("unlink");
    h.free(head).expect("free popped node");
    Some(node.value)
}

/// The list's values from the root (see [`read_list_full`]).
pub fn read_list(h: &PmoHeap) -> Vec<u64> {
    read_list_full(h).into_iter().map(|(v, _)| v).collect()
}

/// The list as (value, payload length) from the root, verifying that every node is a live
/// block large enough for its payload and that the payload is intact.
pub fn read_list_full(h: &PmoHeap) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut cur = h.root_ptr::<Node>().expect("root");
    while let Some(p) = h.resolve(cur).expect("resolve") {
        let usable = h
            .usable_size(p.cast())
            .expect("a reachable node is a live block");
        // SAFETY: `p` is a live block holding a Node written by `push`.
        let node = unsafe { p.as_ptr().read() };
        assert!(
            NODE_BYTES + node.len as usize <= usable,
            "node overruns its block"
        );
        for i in 0..node.len as usize {
            // SAFETY: within the block (checked above).
            let b = unsafe { p.cast::<u8>().as_ptr().add(NODE_BYTES + i).read() };
            assert_eq!(
                b,
                payload_byte(node.value, i),
                "payload of {} torn",
                node.value
            );
        }
        out.push((node.value, node.len));
        cur = node.next;
        assert!(out.len() <= 1_000_000, "list cycles");
    }
    out
}

/// The typed pointer of the `i`-th node (0: the head).
pub fn nth(h: &PmoHeap, i: usize) -> HeapPtr<Node> {
    let mut cur = h.root_ptr::<Node>().expect("root");
    for _ in 0..i {
        let p = h.resolve(cur).expect("resolve").expect("list long enough");
        // SAFETY: a live node of the list.
        cur = unsafe { (*p.as_ptr()).next };
    }
    cur
}

/// Point the link that leads to node `i` (the root for 0, else node `i - 1`'s `next`) at `to`.
pub fn relink(h: &PmoHeap, i: usize, to: HeapPtr<Node>) {
    if i == 0 {
        let p = h.resolve(to.cast::<u8>()).expect("resolve");
        h.set_root(p).expect("set root");
    } else {
        let prev = h.resolve(nth(h, i - 1)).expect("resolve").expect("prev");
        // SAFETY: `prev` is a live node of the list; only this thread uses the list.
        unsafe { (*prev.as_ptr()).next = to };
        h.declare(prev.as_ptr().cast(), 8).expect("declare");
    }
}

/// Unlink node `i` and free it.
pub fn remove_at(h: &PmoHeap, i: usize) {
    let cur = h.resolve(nth(h, i)).expect("resolve").expect("node");
    // SAFETY: a live node of the list.
    let next = unsafe { (*cur.as_ptr()).next };
    relink(h, i, next);
    h.free(cur.cast()).expect("free removed node");
}

/// Grow node `i`'s payload to `new_len` bytes with `realloc` (which may move it) and relink it.
pub fn grow_at(h: &PmoHeap, i: usize, new_len: usize) {
    let cur = h.resolve(nth(h, i)).expect("resolve").expect("node");
    let p = h
        .realloc(cur.cast::<u8>(), NODE_BYTES + new_len, 8)
        .expect("realloc");
    // SAFETY: `p` is the live block of NODE_BYTES + new_len bytes holding the node.
    unsafe {
        let node = p.cast::<Node>().as_ptr();
        let (value, old_len) = ((*node).value, (*node).len as usize);
        for j in old_len..new_len {
            p.as_ptr().add(NODE_BYTES + j).write(payload_byte(value, j));
        }
        (*node).len = new_len as u64;
    }
    h.declare(p.as_ptr(), NODE_BYTES + new_len)
        .expect("declare");
    relink(h, i, h.to_heap_ptr(p.cast::<Node>()).expect("typed"));
}
