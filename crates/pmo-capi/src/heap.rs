//! The persistent-heap calls of the C API (`pmo_p_malloc` family and `pmo_heap_*`), over
//! `pmo_heap::PmoHeap` (a POSEIDON heap living in a PMO).
//!
//! Owns: the default heap's configuration (from the environment, read once, when the default
//! heap is first opened) and the pointer-level rules of the `p_*` calls:
//! - `pmo_p_malloc`, `pmo_p_calloc` allocate from the default heap, opened on first use and created if
//!   missing: PMO [`HEAP_NAME_ENV`] (default [`DEFAULT_HEAP_NAME`]) of [`HEAP_SIZE_ENV`] bytes
//!   (default [`DEFAULT_HEAP_SIZE`]) in the process's pool, key [`KEY_ENV`] (empty if unset).
//! - `pmo_p_free`, `pmo_p_realloc`, `pmo_p_sizeof` accept a block of *any* heap registered in this process:
//!   the registry finds the heap whose PMO contains the pointer; a pointer outside every heap
//!   is `NotABlock` (EINVAL), and the heap itself rejects double, interior and invalid frees
//!   (changing nothing).
//! - Blocks are aligned to [`BLOCK_ALIGN`] bytes, as `malloc`'s are on x86-64.
//!
//! Invariant: no call here holds the registry lock while it runs an allocator call; a heap is
//! shared as an `Arc`, so detaching it while another thread allocates unmaps it afterwards.

use std::ptr::NonNull;
use std::sync::Arc;

use pmo_heap::{CommitStats, PmoHeap};

use crate::error::CapiError;
use crate::registry::{Registry, Result};

/// Environment variable naming the default heap's PMO.
pub const HEAP_NAME_ENV: &str = "PMO_HEAP";
/// The default heap's PMO when `PMO_HEAP` is unset or empty.
pub const DEFAULT_HEAP_NAME: &str = "pmo.default-heap";
/// Environment variable giving the size of a default heap created on first use (bytes, or with
/// a `K`/`M`/`G` suffix, binary: `KiB`, `MiB`, `GiB` also accepted).
pub const HEAP_SIZE_ENV: &str = "PMO_HEAP_SIZE";
/// Size of a default heap created on first use when `PMO_HEAP_SIZE` is unset: 256 MiB.
pub const DEFAULT_HEAP_SIZE: u64 = 256 << 20;
/// Environment variable holding the key of the default heap (the CLI's `PMO_KEY`).
pub const KEY_ENV: &str = "PMO_KEY";
/// Alignment of every `p_*` block.
pub const BLOCK_ALIGN: usize = 16;

/// Where the default heap lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefaultHeapConfig {
    /// PMO name.
    pub name: String,
    /// Key bytes.
    pub key: Vec<u8>,
    /// Bytes, if the heap has to be created.
    pub size: u64,
}

impl DefaultHeapConfig {
    /// From `PMO_HEAP`, `PMO_HEAP_SIZE` and `PMO_KEY`.
    pub fn from_env() -> Result<DefaultHeapConfig> {
        let name = std::env::var(HEAP_NAME_ENV)
            .ok()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| DEFAULT_HEAP_NAME.to_owned());
        let size = match std::env::var(HEAP_SIZE_ENV) {
            Err(_) => DEFAULT_HEAP_SIZE,
            Ok(s) if s.is_empty() => DEFAULT_HEAP_SIZE,
            Ok(s) => parse_size(&s).filter(|&n| n > 0).ok_or_else(|| {
                CapiError::Invalid(format!("{HEAP_SIZE_ENV}={s:?} is not a size"))
            })?,
        };
        let key = std::env::var_os(KEY_ENV)
            .map(|k| {
                use std::os::unix::ffi::OsStringExt;
                k.into_vec()
            })
            .unwrap_or_default();
        Ok(DefaultHeapConfig { name, key, size })
    }
}

/// `"4096"`, `"64K"`, `"64KiB"`, `"256M"`, `"1G"`, ... (binary multiples) in bytes.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(digits_end);
    let n: u64 = num.parse().ok()?;
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "k" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        "T" | "TiB" => 40,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

/// Open the default heap from the environment (first use).
fn open_default(reg: &Registry) -> Result<usize> {
    let cfg = DefaultHeapConfig::from_env()?;
    reg.heap_open(&cfg.name, &cfg.key, cfg.size)
}

/// The default heap, opened (created if missing) on first use.
pub fn default_heap(reg: &Registry) -> Result<Arc<PmoHeap>> {
    reg.default_heap(open_default)
}

/// Run one allocator call on the default heap (see [`Registry::with_default_heap`]).
fn on_default<R>(reg: &Registry, f: impl FnOnce(&PmoHeap) -> Result<R>) -> Result<R> {
    reg.with_default_heap(open_default, f)
}

fn block(addr: usize) -> Result<NonNull<u8>> {
    // A `match`, not `ok_or`: `CapiError` has drop glue, and `ok_or` would build and drop the
    // error on every `pmo_free`.
    match NonNull::new(addr as *mut u8) {
        Some(p) => Ok(p),
        None => Err(CapiError::NotABlock(addr)),
    }
}

/// Allocate `size` bytes from `heap`, aligned to `align` (0: [`BLOCK_ALIGN`]).
pub fn alloc(heap: &PmoHeap, size: usize, align: usize) -> Result<usize> {
    let align = if align == 0 { BLOCK_ALIGN } else { align };
    Ok(heap.alloc(size, align)?.as_ptr() as usize)
}

/// `pmo_p_malloc`.
pub fn malloc(reg: &Registry, size: usize) -> Result<usize> {
    on_default(reg, |h| alloc(h, size, BLOCK_ALIGN))
}

/// `pmo_p_calloc`: `n * size` zeroed bytes; the product overflowing is `Overflow` (ENOMEM).
pub fn calloc(reg: &Registry, n: usize, size: usize) -> Result<usize> {
    let bytes = n.checked_mul(size).ok_or(CapiError::Overflow {
        what: "nmemb * size",
    })?;
    on_default(reg, |h| {
        Ok(h.alloc_zeroed(bytes, BLOCK_ALIGN)?.as_ptr() as usize)
    })
}

/// `pmo_p_realloc`: `addr` 0 allocates from the default heap; `size` 0 frees and returns 0;
/// otherwise resizes within the heap that holds `addr` (which may move it).
pub fn realloc(reg: &Registry, addr: usize, size: usize) -> Result<usize> {
    if addr == 0 {
        return malloc(reg, size);
    }
    reg.with_heap_containing(addr, |heap| realloc_in(heap, addr, size))
}

/// `pmo_p_free`: `addr` 0 is a no-op.
pub fn free(reg: &Registry, addr: usize) -> Result<()> {
    if addr == 0 {
        return Ok(());
    }
    reg.with_heap_containing(addr, |heap| free_in(heap, addr))
}

/// `pmo_p_sizeof`: usable bytes of the block at `addr`.
pub fn usable_size(reg: &Registry, addr: usize) -> Result<usize> {
    reg.with_heap_containing(addr, |heap| usable_size_in(heap, addr))
}

/// `pmo_p_persist`: psync the default heap.
pub fn persist(reg: &Registry) -> Result<CommitStats> {
    Ok(default_heap(reg)?.psync()?)
}

/// The root block of `heap` (0: none).
pub fn root(heap: &PmoHeap) -> Result<usize> {
    Ok(heap.root()?.map_or(0, |p| p.as_ptr() as usize))
}

/// Make the block at `addr` the root of `heap` (0 clears it).
pub fn set_root(heap: &PmoHeap, addr: usize) -> Result<()> {
    let ptr = if addr == 0 { None } else { Some(block(addr)?) };
    Ok(heap.set_root(ptr)?)
}

/// Free a block of `heap` specifically (not of another heap).
pub fn free_in(heap: &PmoHeap, addr: usize) -> Result<()> {
    if addr == 0 {
        return Ok(());
    }
    Ok(heap.free(block(addr)?)?)
}

/// Resize a block of `heap` (`addr` 0: allocate; `size` 0: free, returning 0).
pub fn realloc_in(heap: &PmoHeap, addr: usize, size: usize) -> Result<usize> {
    if addr == 0 {
        return alloc(heap, size, BLOCK_ALIGN);
    }
    if size == 0 {
        heap.free(block(addr)?)?;
        return Ok(0);
    }
    Ok(heap.realloc(block(addr)?, size, BLOCK_ALIGN)?.as_ptr() as usize)
}

/// Usable bytes of a block of `heap`.
pub fn usable_size_in(heap: &PmoHeap, addr: usize) -> Result<usize> {
    Ok(heap.usable_size(block(addr)?)?)
}

/// Live blocks of `heap` as (address, usable bytes), in address order. Bounded by the heap's
/// live-allocation count.
pub fn allocations(heap: &PmoHeap) -> Result<Vec<(usize, usize)>> {
    let mut v: Vec<(usize, usize)> = heap
        .allocations()?
        .into_iter()
        .map(|a| (a.ptr.as_ptr() as usize, a.usable_size))
        .collect();
    v.sort_unstable();
    Ok(v)
}

/// Run the heap checker; an inconsistency is `Corrupt` with the checker's report.
pub fn check(heap: &PmoHeap) -> Result<()> {
    heap.check()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::tests::temp_pool;
    use pmo_store::{AttachOptions, Perm};

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64K"), Some(64 << 10));
        assert_eq!(parse_size("64KiB"), Some(64 << 10));
        assert_eq!(parse_size(" 256M "), Some(256 << 20));
        assert_eq!(parse_size("1GiB"), Some(1 << 30));
        assert_eq!(parse_size("2T"), Some(2 << 40));
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("M"), None);
        assert_eq!(parse_size("12X"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999999999999"), None);
        assert_eq!(parse_size("17179869184G"), None); // overflows u64
    }

    #[test]
    fn heaps_are_found_by_handle_and_by_block() {
        let (path, _pool) = temp_pool("heap");
        let reg = Registry::new();
        reg.pool_open(Some(&path), 0).unwrap();
        let e = reg.heap_open("h", b"k", 0).unwrap_err();
        assert_eq!(
            (e.code(), e.errno()),
            (crate::error::PMO_E_NOT_FOUND, libc::ENOENT)
        );
        let h = reg.heap_open("h", b"k", 8 << 20).unwrap();
        let heap = reg.heap_at(h).unwrap();
        assert!(matches!(reg.heap_at(h + 1), Err(CapiError::NotAttached(_))));
        let block = alloc(&heap, 100, 0).unwrap();
        assert_eq!(block % BLOCK_ALIGN, 0);
        assert!(Arc::ptr_eq(&reg.heap_containing(block).unwrap(), &heap));
        assert_eq!(reg.name_of(block).unwrap(), "h");
        assert!(usable_size(&reg, block).unwrap() >= 100);
        // A plain attachment is neither a heap handle nor holds blocks.
        reg.create("plain", 4096, b"k").unwrap();
        let p = reg
            .attach("plain", Perm::Write, b"k", AttachOptions::default())
            .unwrap();
        assert!(matches!(reg.heap_at(p), Err(CapiError::Invalid(_))));
        let e = free(&reg, p).unwrap_err();
        assert_eq!(
            (e.code(), e.errno()),
            (crate::error::PMO_E_BAD_FREE, libc::EINVAL)
        );
        free(&reg, block).unwrap();
        let e = free(&reg, block).unwrap_err();
        assert_eq!(
            (e.code(), e.errno()),
            (crate::error::PMO_E_BAD_FREE, libc::EINVAL),
            "{e}"
        );
        assert!(reg.psync(h + 4096).unwrap().pages > 0);
        assert!(matches!(reg.pool_close(), Err(CapiError::PoolBusy(2))));
        drop(heap);
        reg.detach(block).unwrap(); // any address inside the heap's PMO
        reg.detach(p).unwrap();
        assert_eq!(reg.attachment_count(), 0);
        // Re-open: the heap was persisted empty.
        let h2 = reg.heap_open("h", b"k", 0).unwrap();
        assert_eq!(h2, h);
        assert!(allocations(&reg.heap_at(h2).unwrap()).unwrap().is_empty());
        reg.detach(h2).unwrap();
        reg.pool_close().unwrap();
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn allocations_run_while_the_table_changes() {
        let (path, _pool) = temp_pool("churn");
        let reg = Arc::new(Registry::new());
        reg.pool_open(Some(&path), 0).unwrap();
        let h = reg.heap_open("h", b"k", 8 << 20).unwrap();
        reg.create("plain", 4096, b"k").unwrap();
        let workers: Vec<_> = (0..2)
            .map(|t| {
                let reg = reg.clone();
                std::thread::spawn(move || {
                    for i in 0..2000usize {
                        let size = 1 + (i * 31 + t) % 700;
                        let b = reg
                            .with_heap_containing(h, |heap| alloc(heap, size, 0))
                            .unwrap();
                        assert!(usable_size(&reg, b).unwrap() >= size);
                        free(&reg, b).unwrap();
                    }
                })
            })
            .collect();
        // Meanwhile: publications (attach, detach) and psyncs of the heap.
        for _ in 0..50 {
            let p = reg
                .attach("plain", Perm::Read, b"k", AttachOptions::default())
                .unwrap();
            reg.psync(h).unwrap();
            reg.detach(p).unwrap();
        }
        for w in workers {
            w.join().unwrap();
        }
        let heap = reg.heap_at(h).unwrap();
        assert!(allocations(&heap).unwrap().is_empty());
        check(&heap).unwrap();
        drop(heap);
        reg.detach(h).unwrap();
        assert!(matches!(reg.heap_at(h), Err(CapiError::NotAttached(_))));
        reg.pool_close().unwrap();
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
