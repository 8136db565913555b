//! Guard mode: metadata pages are read-only outside allocator calls, so a stray store from
//! user code faults instead of corrupting the heap. The faulting write runs in a child process
//! (this test binary re-run with an environment variable) so the parent can see the SIGSEGV.

use pmo_alloc::{HeapOptions, MappedHeap, Protection};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

const CHILD_ENV: &str = "PMO_ALLOC_GUARD_CHILD";

#[test]
fn guard_child() {
    let Ok(target) = std::env::var(CHILD_ENV) else {
        return;
    };
    let h = MappedHeap::anonymous(
        4 << 20,
        &HeapOptions {
            subheaps: 1,
            protection: Protection::Guard,
        },
    )
    .unwrap();
    let p = h.alloc(64, 16).unwrap();
    h.free(p).unwrap();
    let offset = match target.as_str() {
        "header" => 0,
        "root" => 4096,
        _ => h.geometry().meta_offset as usize + 1024, // first unit entry
    };
    let meta = h.base().as_ptr().wrapping_add(offset);
    // SAFETY: deliberately a stray store into the heap's metadata; guard mode must make it
    // fault. If it does not fault we exit 0 and the parent reports the failure.
    unsafe { meta.write_volatile(0xEE) };
    std::process::exit(0);
}

fn run_child(target: &str) -> std::process::ExitStatus {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "guard_child", "--test-threads=1", "--nocapture"])
        .env(CHILD_ENV, target)
        .output()
        .unwrap()
        .status
}

#[test]
fn stray_writes_to_metadata_fault_in_guard_mode() {
    for target in ["unit-map", "root", "header"] {
        let status = run_child(target);
        assert_eq!(
            status.signal(),
            Some(libc_sigsegv()),
            "write to {target} did not fault: {status:?}"
        );
    }
}

fn libc_sigsegv() -> i32 {
    11
}

#[test]
fn detaching_restores_write_access() {
    let h = MappedHeap::anonymous(
        4 << 20,
        &HeapOptions {
            subheaps: 2,
            protection: Protection::Guard,
        },
    )
    .unwrap();
    assert_eq!(h.protection(), Protection::Guard);
    let p = h.alloc(100, 16).unwrap();
    h.set_root(Some(p)).unwrap();
    h.check().unwrap();
    let mut region = h.into_region();
    let meta_at = 8192 + 1024;
    let old = region.bytes_mut()[meta_at];
    region.bytes_mut()[meta_at] = old; // would fault if still protected
    let h = MappedHeap::open(region, Protection::Guard).unwrap();
    assert_eq!(h.root().unwrap(), Some(p));
    h.set_root(None).unwrap();
    h.free(p).unwrap();
    assert_eq!(h.check().unwrap().live_allocations, 0);
}
