//! Safe handles over the C shim in `csrc/peers.c` (PMDK, LMDB, glibc malloc).
//!
//! This is the only module allowed `unsafe`: it declares the C functions and wraps each raw
//! pointer in a type that owns it. The invariants that make the wrappers safe:
//! - a [`PmdkPool`] owns one open `PMEMobjpool*` and closes it (and removes its file) on drop;
//! - an [`OidSlots`] borrows its pool, so it cannot outlive it, and its array holds only
//!   `OID_NULL` or oids the C shim allocated from that pool (nobody else can write the array);
//! - a [`Permutation`] is only built by shuffling `0..n`, so freeing "in its order" frees each
//!   block exactly once;
//! - a [`MallocSlots`] owns the `malloc`ed blocks in its array (NULL or live) and frees them on
//!   drop;
//! - an [`LmdbEnv`] owns one `MDB_env*`, stays on the thread that opened it (it is neither
//!   `Send` nor `Sync`) and closes it on drop;
//! - a [`PmemRegion`] owns one `pmem_map_file` mapping of `len` bytes (neither `Send` nor `Sync`),
//!   the C side writes only inside it, and it is unmapped (and its file removed) on drop;
//! - a [`MallocBlock`] is only built by [`GlibcMalloc`]'s `alloc` and consumed by its `free`, so
//!   each block is freed at most once.
//!
//! Who calls it: `bench.rs` only, except [`PmdkPool`], [`GlibcMalloc`] and
//! [`ensure_pmem_force`], which are public for callers that want them directly.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Once;

use rand::seq::SliceRandom;
use rand::Rng;

use crate::allocator::BenchAllocator;
use crate::error::{BoxError, Error, Result};

/// Mirror of PMDK's `PMEMoid` (`{ uint64_t pool_uuid_lo; uint64_t off; }`); the C side asserts
/// that it is 16 bytes at compile time.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RawOid {
    pool_uuid_lo: u64,
    off: u64,
}

const _: () = assert!(std::mem::size_of::<RawOid>() == 16);

/// Opaque `PMEMobjpool`.
#[repr(C)]
pub(crate) struct RawPool {
    _opaque: [u8; 0],
}

/// Mirror of `struct peers_pmem_region` in csrc/peers.c.
#[repr(C)]
pub(crate) struct RawPmemRegion {
    addr: *mut c_void,
    len: usize,
    is_pmem: c_int,
}

/// Opaque `MDB_env`.
#[repr(C)]
pub(crate) struct RawMdbEnv {
    _opaque: [u8; 0],
}

extern "C" {
    fn peers_pmdk_errormsg() -> *const c_char;
    #[cfg(test)]
    fn peers_rand_next(state: *mut u64) -> u64;
    fn peers_pmdk_create(
        path: *const c_char,
        pool_size_bytes: u64,
        out: *mut *mut RawPool,
    ) -> c_int;
    fn peers_pmdk_close(pop: *mut RawPool);
    fn peers_pmdk_is_pmem(pop: *mut RawPool) -> c_int;
    fn peers_pmdk_alloc_free_round(
        pop: *mut RawPool,
        oids: *mut RawOid,
        order: *const u32,
        n: u32,
        size_bytes: u64,
    ) -> c_int;
    fn peers_glibc_alloc_free_round(
        blocks: *mut *mut c_void,
        order: *const u32,
        n: u32,
        size_bytes: u64,
    ) -> c_int;
    fn peers_pmdk_larson_fill(
        pop: *mut RawPool,
        slots: *mut RawOid,
        n: u32,
        min_bytes: u64,
        max_bytes: u64,
        rng: *mut u64,
    ) -> c_int;
    fn peers_pmdk_larson_run(
        pop: *mut RawPool,
        slots: *mut RawOid,
        n: u32,
        min_bytes: u64,
        max_bytes: u64,
        ops: u64,
        rng: *mut u64,
    ) -> c_int;
    fn peers_pmdk_free_all(slots: *mut RawOid, n: u32);
    fn peers_glibc_larson_fill(
        slots: *mut *mut c_void,
        n: u32,
        min_bytes: u64,
        max_bytes: u64,
        rng: *mut u64,
    ) -> c_int;
    fn peers_glibc_larson_run(
        slots: *mut *mut c_void,
        n: u32,
        min_bytes: u64,
        max_bytes: u64,
        ops: u64,
        rng: *mut u64,
    ) -> c_int;
    fn peers_glibc_free_all(slots: *mut *mut c_void, n: u32);
    fn peers_pmdk_tx_root(pop: *mut RawPool, object_size_bytes: u64) -> c_int;
    fn peers_pmdk_tx_update_run(
        pop: *mut RawPool,
        object_size_bytes: u64,
        len_bytes: u64,
        src: *const u8,
        ops: u64,
        rng: *mut u64,
    ) -> c_int;
    fn peers_pmdk_tx_alloc_link_run(pop: *mut RawPool, size_bytes: u64, ops: u64) -> c_int;
    fn peers_pmdk_tx_list_free(pop: *mut RawPool, freed: *mut u64) -> c_int;
    fn peers_pmem_map(path: *const c_char, len_bytes: u64, out: *mut RawPmemRegion) -> c_int;
    fn peers_pmem_unmap(region: *mut RawPmemRegion);
    fn peers_pmem_errormsg() -> *const c_char;
    fn peers_pmem_memcpy_persist_run(
        region: *const RawPmemRegion,
        src: *const u8,
        len_bytes: u64,
        ops: u64,
        rng: *mut u64,
    ) -> c_int;
    fn peers_lmdb_strerror(err: c_int) -> *const c_char;
    fn peers_lmdb_open(
        dir: *const c_char,
        map_size_bytes: u64,
        flags: c_uint,
        out: *mut *mut RawMdbEnv,
    ) -> c_int;
    fn peers_lmdb_close(env: *mut RawMdbEnv);
    fn peers_lmdb_prefill(
        env: *mut RawMdbEnv,
        value: *const u8,
        value_len: u64,
        count: u64,
        rng: *mut u64,
    ) -> c_int;
    fn peers_lmdb_put_commit_run(
        env: *mut RawMdbEnv,
        value: *const u8,
        value_len: u64,
        ops: u64,
        rng: *mut u64,
    ) -> c_int;
}

/// The C side's xorshift64* (for checking the Rust mirror).
#[cfg(test)]
pub(crate) fn c_rand_next(state: &mut u64) -> u64 {
    // SAFETY: state is a valid, exclusive u64.
    unsafe { peers_rand_next(state) }
}

/// CPU time this thread has used (`CLOCK_THREAD_CPUTIME_ID`), zero if the clock is missing.
pub(crate) fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; the call writes nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 || ts.tv_sec < 0 || ts.tv_nsec < 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// PMDK's smallest pool (`PMEMOBJ_MIN_POOL`, 8 MiB).
pub(crate) const PMDK_MIN_POOL_BYTES: u64 = 8 << 20;

/// The name of libpmem's switch that makes any memory count as persistent memory.
const PMEM_FORCE_VAR: &str = "PMEM_IS_PMEM_FORCE";

static PMEM_FORCE: Once = Once::new();

/// Makes libpmem treat `/dev/shm` as persistent memory (flush with `clwb` + `sfence`, no msync)
/// by setting `PMEM_IS_PMEM_FORCE=1` if the environment does not set it already.
///
/// libpmem reads the variable once, at its first "is this pmem?" decision, so this must run before
/// the first PMDK call of the process; every PMDK benchmark here calls it first, and
/// [`PmdkPool::create`] checks the result (`pmem_is_pmem` on the pool) so a late call is an error,
/// never a silently different figure. Setting the environment races with other threads reading
/// it: a program with threads of its own should export the variable before it starts instead.
pub fn ensure_pmem_force() {
    PMEM_FORCE.call_once(|| {
        if std::env::var_os(PMEM_FORCE_VAR).is_none() {
            std::env::set_var(PMEM_FORCE_VAR, "1");
        }
    });
}

fn path_to_cstring(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        Error::InvalidParameter(format!("path {} contains a NUL byte", path.display()))
    })
}

fn pmdk_error(operation: &'static str, errno: c_int) -> Error {
    // SAFETY: pmemobj_errormsg returns a pointer to a thread-local NUL-terminated buffer that
    // stays valid until the next PMDK call on this thread; we copy it out at once.
    let message = unsafe {
        let p = peers_pmdk_errormsg();
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    Error::Pmdk {
        operation,
        errno,
        message,
    }
}

fn lmdb_error(operation: &'static str, code: c_int) -> Error {
    // SAFETY: mdb_strerror returns a pointer to a static string (LMDB codes) or to strerror's
    // buffer (errno values); we copy it out at once.
    let message = unsafe {
        let p = peers_lmdb_strerror(code);
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    Error::Lmdb {
        operation,
        code,
        message,
    }
}

/// An open PMDK pool file, closed and removed on drop.
#[derive(Debug)]
pub struct PmdkPool {
    pop: NonNull<RawPool>,
    path: PathBuf,
}

// SAFETY: libpmemobj pools are made to be used from many threads at once: pmemobj_alloc, _free,
// _root and transactions take their own locks (per-thread arenas, per-thread tx state).
unsafe impl Send for PmdkPool {}
// SAFETY: as above; the handle itself is never mutated after creation.
unsafe impl Sync for PmdkPool {}

impl PmdkPool {
    /// Creates a new pool file of `size_bytes` at `path` (which must not exist) and checks that
    /// libpmem treats it as persistent memory when `require_pmem` is set.
    pub fn create(path: &Path, size_bytes: u64, require_pmem: bool) -> Result<Self> {
        if size_bytes < PMDK_MIN_POOL_BYTES {
            return Err(Error::InvalidParameter(format!(
                "a PMDK pool needs at least {PMDK_MIN_POOL_BYTES} bytes, asked {size_bytes}"
            )));
        }
        ensure_pmem_force();
        let c_path = path_to_cstring(path)?;
        let mut pop: *mut RawPool = std::ptr::null_mut();
        // SAFETY: c_path is a valid NUL-terminated string for the duration of the call and `pop`
        // is a valid out-pointer.
        let rc = unsafe { peers_pmdk_create(c_path.as_ptr(), size_bytes, &mut pop) };
        if rc != 0 {
            return Err(pmdk_error("pmemobj_create", rc));
        }
        let pop = NonNull::new(pop).ok_or_else(|| pmdk_error("pmemobj_create", 0))?;
        let pool = PmdkPool {
            pop,
            path: path.to_path_buf(),
        };
        if require_pmem && !pool.is_pmem() {
            return Err(Error::NotPersistentMemory {
                path: path.to_path_buf(),
            });
        }
        Ok(pool)
    }

    /// Whether libpmem treats this pool's memory as persistent memory (cache-line flushes)
    /// rather than a mapped file (msync).
    pub fn is_pmem(&self) -> bool {
        // SAFETY: self.pop is an open pool for as long as self lives.
        unsafe { peers_pmdk_is_pmem(self.pop.as_ptr()) == 1 }
    }

    /// The pool file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn raw(&self) -> *mut RawPool {
        self.pop.as_ptr()
    }

    /// Makes the root object at least `object_size_bytes` (zeroed when first allocated).
    pub(crate) fn tx_root(&self, object_size_bytes: u64) -> Result<()> {
        // SAFETY: the pool is open.
        let rc = unsafe { peers_pmdk_tx_root(self.raw(), object_size_bytes) };
        if rc != 0 {
            return Err(pmdk_error("pmemobj_root", rc));
        }
        Ok(())
    }

    /// `ops` transactions, each copying `src` to a random 64-byte-aligned offset of the root
    /// object, which is (made) at least `object_size_bytes` long.
    pub(crate) fn tx_update_run(
        &self,
        object_size_bytes: u64,
        src: &[u8],
        ops: u64,
        rng: &mut u64,
    ) -> Result<()> {
        if src.is_empty() || src.len() as u64 > object_size_bytes {
            return Err(Error::InvalidParameter(format!(
                "update of {} bytes into an object of {object_size_bytes}",
                src.len()
            )));
        }
        // SAFETY: src is valid for src.len() bytes; the C side writes only inside the root object,
        // which pmemobj_root makes at least object_size_bytes long; rng is a valid pointer.
        let rc = unsafe {
            peers_pmdk_tx_update_run(
                self.raw(),
                object_size_bytes,
                src.len() as u64,
                src.as_ptr(),
                ops,
                rng,
            )
        };
        if rc != 0 {
            return Err(pmdk_error("transaction (update)", rc));
        }
        Ok(())
    }

    /// `ops` transactions, each allocating a node of `size_bytes` and linking it at the head of
    /// the list in the root object.
    pub(crate) fn tx_alloc_link_run(&self, size_bytes: u64, ops: u64) -> Result<()> {
        // SAFETY: the pool is open; the C side checks size_bytes against its node header.
        let rc = unsafe { peers_pmdk_tx_alloc_link_run(self.raw(), size_bytes, ops) };
        if rc != 0 {
            return Err(pmdk_error("transaction (alloc + link)", rc));
        }
        Ok(())
    }

    /// Frees the whole list built by [`Self::tx_alloc_link_run`]; returns how many nodes it freed.
    pub(crate) fn tx_list_free(&self) -> Result<u64> {
        let mut freed = 0u64;
        // SAFETY: the pool is open and `freed` is a valid out-pointer.
        let rc = unsafe { peers_pmdk_tx_list_free(self.raw(), &mut freed) };
        if rc != 0 {
            return Err(pmdk_error("transaction (list free)", rc));
        }
        Ok(freed)
    }
}

impl Drop for PmdkPool {
    fn drop(&mut self) {
        // SAFETY: the pool is open and no OidSlots borrows it any more (they borrow &self).
        unsafe { peers_pmdk_close(self.pop.as_ptr()) };
        // The file is scratch; failing to remove it leaves a file in /dev/shm, nothing worse.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A new file mapped with libpmem (`pmem_map_file`), unmapped and removed on drop. Used by one
/// thread (not `Sync`).
pub(crate) struct PmemRegion {
    raw: RawPmemRegion,
    path: PathBuf,
}

impl PmemRegion {
    /// Creates and maps a new file of `len_bytes` at `path` (which must not exist).
    pub(crate) fn create(path: &Path, len_bytes: u64, require_pmem: bool) -> Result<Self> {
        ensure_pmem_force();
        let c_path = path_to_cstring(path)?;
        let mut raw = RawPmemRegion {
            addr: std::ptr::null_mut(),
            len: 0,
            is_pmem: 0,
        };
        // SAFETY: c_path is a valid C string for the call and raw a valid out-pointer.
        let rc = unsafe { peers_pmem_map(c_path.as_ptr(), len_bytes, &mut raw) };
        if rc != 0 {
            // SAFETY: pmem_errormsg returns a thread-local NUL-terminated buffer; copied at once.
            let message = unsafe {
                let p = peers_pmem_errormsg();
                if p.is_null() {
                    String::new()
                } else {
                    CStr::from_ptr(p).to_string_lossy().into_owned()
                }
            };
            return Err(Error::Pmdk {
                operation: "pmem_map_file",
                errno: rc,
                message,
            });
        }
        let region = PmemRegion {
            raw,
            path: path.to_path_buf(),
        };
        if require_pmem && region.raw.is_pmem == 0 {
            return Err(Error::NotPersistentMemory {
                path: path.to_path_buf(),
            });
        }
        Ok(region)
    }

    /// `ops` durable copies of `src` to random 64-byte-aligned offsets.
    pub(crate) fn memcpy_persist_run(&mut self, src: &[u8], ops: u64, rng: &mut u64) -> Result<()> {
        if src.is_empty() || src.len() > self.raw.len {
            return Err(Error::InvalidParameter(format!(
                "copy of {} bytes into a region of {}",
                src.len(),
                self.raw.len
            )));
        }
        // SAFETY: the region is mapped for raw.len bytes; the C side writes only inside it
        // (offset + len <= raw.len); src is valid for its length; rng is valid.
        let rc = unsafe {
            peers_pmem_memcpy_persist_run(&self.raw, src.as_ptr(), src.len() as u64, ops, rng)
        };
        if rc != 0 {
            return Err(Error::InvalidParameter(format!(
                "pmem_memcpy_persist run failed (errno {rc})"
            )));
        }
        Ok(())
    }
}

impl Drop for PmemRegion {
    fn drop(&mut self) {
        // SAFETY: the region is mapped and nothing else refers to it.
        unsafe { peers_pmem_unmap(&mut self.raw) };
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A random order of `0..n`, the order in which a round frees its blocks.
#[derive(Debug, Clone)]
pub(crate) struct Permutation(Vec<u32>);

impl Permutation {
    pub(crate) fn shuffled(n: u32, rng: &mut impl Rng) -> Self {
        let mut order: Vec<u32> = (0..n).collect();
        order.shuffle(rng);
        Permutation(order)
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn as_slice(&self) -> &[u32] {
        &self.0
    }
}

/// A bounded array of PMDK objects owned by one thread at a time, borrowed from its pool.
#[derive(Debug)]
pub(crate) struct OidSlots<'pool> {
    pool: &'pool PmdkPool,
    oids: Vec<RawOid>,
}

impl<'pool> OidSlots<'pool> {
    pub(crate) fn new(pool: &'pool PmdkPool, n: u32) -> Self {
        OidSlots {
            pool,
            oids: vec![RawOid::default(); n as usize],
        }
    }

    fn n(&self) -> u32 {
        // Fits: built from a u32.
        self.oids.len() as u32
    }

    /// One POSEIDON round: allocate every slot with `size_bytes`, free them in `order`.
    pub(crate) fn alloc_free_round(&mut self, order: &Permutation, size_bytes: u64) -> Result<()> {
        if order.len() != self.oids.len() {
            return Err(Error::InvalidParameter(format!(
                "order of {} for {} slots",
                order.len(),
                self.oids.len()
            )));
        }
        debug_assert!(self.oids.iter().all(|o| *o == RawOid::default()));
        // SAFETY: oids and order are both n long; order is a permutation of 0..n (Permutation's
        // invariant), so each block is freed once; the slots are all OID_NULL before and after.
        let rc = unsafe {
            peers_pmdk_alloc_free_round(
                self.pool.raw(),
                self.oids.as_mut_ptr(),
                order.0.as_ptr(),
                self.n(),
                size_bytes,
            )
        };
        if rc != 0 {
            return Err(pmdk_error("pmemobj_alloc", rc));
        }
        Ok(())
    }

    /// Allocates every empty slot with a size uniform in `[min_bytes, max_bytes]`.
    pub(crate) fn larson_fill(
        &mut self,
        min_bytes: u64,
        max_bytes: u64,
        rng: &mut u64,
    ) -> Result<()> {
        check_range(min_bytes, max_bytes)?;
        // SAFETY: oids is n long and holds OID_NULL or oids of this pool; rng is valid.
        let rc = unsafe {
            peers_pmdk_larson_fill(
                self.pool.raw(),
                self.oids.as_mut_ptr(),
                self.n(),
                min_bytes,
                max_bytes,
                rng,
            )
        };
        if rc != 0 {
            return Err(pmdk_error("pmemobj_alloc", rc));
        }
        Ok(())
    }

    /// `ops` Larson operations: free a random slot, allocate a random size into it.
    pub(crate) fn larson_run(
        &mut self,
        min_bytes: u64,
        max_bytes: u64,
        ops: u64,
        rng: &mut u64,
    ) -> Result<()> {
        check_range(min_bytes, max_bytes)?;
        if self.oids.is_empty() {
            return Err(Error::InvalidParameter(
                "Larson needs at least one slot".into(),
            ));
        }
        // SAFETY: as in larson_fill; the C side frees an oid before it reallocates the slot.
        let rc = unsafe {
            peers_pmdk_larson_run(
                self.pool.raw(),
                self.oids.as_mut_ptr(),
                self.n(),
                min_bytes,
                max_bytes,
                ops,
                rng,
            )
        };
        if rc != 0 {
            return Err(pmdk_error("pmemobj_alloc", rc));
        }
        Ok(())
    }
}

impl Drop for OidSlots<'_> {
    fn drop(&mut self) {
        // SAFETY: every slot is OID_NULL (a no-op) or an oid of the still-open pool.
        unsafe { peers_pmdk_free_all(self.oids.as_mut_ptr(), self.n()) };
    }
}

fn check_range(min_bytes: u64, max_bytes: u64) -> Result<()> {
    if min_bytes == 0 || min_bytes > max_bytes {
        return Err(Error::InvalidParameter(format!(
            "block sizes [{min_bytes}, {max_bytes}] (need 0 < min <= max)"
        )));
    }
    Ok(())
}

/// A bounded array of `malloc`ed blocks (or NULL), freed on drop.
#[derive(Debug)]
pub(crate) struct MallocSlots {
    blocks: Vec<*mut c_void>,
}

// SAFETY: the blocks are owned by this value alone; glibc lets any thread free a block that
// another thread allocated.
unsafe impl Send for MallocSlots {}

impl MallocSlots {
    pub(crate) fn new(n: u32) -> Self {
        MallocSlots {
            blocks: vec![std::ptr::null_mut(); n as usize],
        }
    }

    fn n(&self) -> u32 {
        self.blocks.len() as u32
    }

    pub(crate) fn alloc_free_round(&mut self, order: &Permutation, size_bytes: u64) -> Result<()> {
        if order.len() != self.blocks.len() {
            return Err(Error::InvalidParameter(format!(
                "order of {} for {} slots",
                order.len(),
                self.blocks.len()
            )));
        }
        // SAFETY: blocks and order are n long; order is a permutation (each block freed once);
        // the C side leaves every slot NULL.
        let rc = unsafe {
            peers_glibc_alloc_free_round(
                self.blocks.as_mut_ptr(),
                order.0.as_ptr(),
                self.n(),
                size_bytes,
            )
        };
        if rc != 0 {
            return Err(Error::OutOfMemory);
        }
        Ok(())
    }

    pub(crate) fn larson_fill(
        &mut self,
        min_bytes: u64,
        max_bytes: u64,
        rng: &mut u64,
    ) -> Result<()> {
        check_range(min_bytes, max_bytes)?;
        // SAFETY: blocks is n long and holds NULL or blocks this value owns.
        let rc = unsafe {
            peers_glibc_larson_fill(
                self.blocks.as_mut_ptr(),
                self.n(),
                min_bytes,
                max_bytes,
                rng,
            )
        };
        if rc != 0 {
            return Err(Error::OutOfMemory);
        }
        Ok(())
    }

    pub(crate) fn larson_run(
        &mut self,
        min_bytes: u64,
        max_bytes: u64,
        ops: u64,
        rng: &mut u64,
    ) -> Result<()> {
        check_range(min_bytes, max_bytes)?;
        if self.blocks.is_empty() {
            return Err(Error::InvalidParameter(
                "Larson needs at least one slot".into(),
            ));
        }
        // SAFETY: as in larson_fill; a slot is freed before it is reallocated.
        let rc = unsafe {
            peers_glibc_larson_run(
                self.blocks.as_mut_ptr(),
                self.n(),
                min_bytes,
                max_bytes,
                ops,
                rng,
            )
        };
        if rc != 0 {
            return Err(Error::OutOfMemory);
        }
        Ok(())
    }
}

impl Drop for MallocSlots {
    fn drop(&mut self) {
        // SAFETY: every slot is NULL or a live block owned by this value.
        unsafe { peers_glibc_free_all(self.blocks.as_mut_ptr(), self.n()) };
    }
}

/// glibc `malloc`/`free` as a [`BenchAllocator`]: the same harness as an allocator under test
/// pays, so its figure next to [`crate::glibc_alloc_free`] (a C loop) shows the harness's cost.
#[derive(Debug, Clone, Copy, Default)]
pub struct GlibcMalloc;

/// A block from [`GlibcMalloc`]; dropping it without [`BenchAllocator::free`] leaks it.
#[derive(Debug)]
pub struct MallocBlock(NonNull<c_void>);

// SAFETY: the block is owned by this value alone; glibc lets any thread free it.
unsafe impl Send for MallocBlock {}

impl BenchAllocator for GlibcMalloc {
    type Block = MallocBlock;

    fn alloc(&self, size_bytes: u64) -> std::result::Result<MallocBlock, BoxError> {
        let size = usize::try_from(size_bytes)?;
        // SAFETY: malloc has no precondition; a NULL result is handled below.
        let p = unsafe { libc::malloc(size) };
        let block = NonNull::new(p).ok_or("malloc returned NULL")?;
        if size > 0 {
            // Touching the block keeps the pair from being optimised away, as the C loop does.
            // SAFETY: the block has at least size >= 1 writable bytes.
            unsafe { block.as_ptr().cast::<u8>().write_volatile(1) };
        }
        Ok(MallocBlock(block))
    }

    fn free(&self, block: MallocBlock) -> std::result::Result<(), BoxError> {
        // SAFETY: the pointer came from malloc (MallocBlock is only built in alloc) and the
        // block is consumed here, so it is freed once.
        unsafe { libc::free(block.0.as_ptr()) };
        Ok(())
    }
}

/// An open LMDB environment (one directory), closed on drop. Used by one thread.
#[derive(Debug)]
pub(crate) struct LmdbEnv {
    env: NonNull<RawMdbEnv>,
}

impl LmdbEnv {
    /// Opens (creating) an environment in the existing directory `dir`; `flags` 0 means
    /// synchronous commits.
    pub(crate) fn open(dir: &Path, map_size_bytes: u64, flags: c_uint) -> Result<Self> {
        let c_dir = path_to_cstring(dir)?;
        let mut env: *mut RawMdbEnv = std::ptr::null_mut();
        // SAFETY: c_dir is a valid C string for the call; env is a valid out-pointer.
        let rc = unsafe { peers_lmdb_open(c_dir.as_ptr(), map_size_bytes, flags, &mut env) };
        if rc != 0 {
            return Err(lmdb_error("mdb_env_open", rc));
        }
        let env = NonNull::new(env).ok_or_else(|| lmdb_error("mdb_env_create", 0))?;
        Ok(LmdbEnv { env })
    }

    /// Puts `count` values under random keys in one transaction.
    pub(crate) fn prefill(&mut self, value: &[u8], count: u64, rng: &mut u64) -> Result<()> {
        // SAFETY: the env is open and used only through &mut self; value is valid for its length.
        let rc = unsafe {
            peers_lmdb_prefill(
                self.env.as_ptr(),
                value.as_ptr(),
                value.len() as u64,
                count,
                rng,
            )
        };
        if rc != 0 {
            return Err(lmdb_error("prefill", rc));
        }
        Ok(())
    }

    /// `ops` write transactions, each putting `value` under a random 8-byte key and committing.
    pub(crate) fn put_commit_run(&mut self, value: &[u8], ops: u64, rng: &mut u64) -> Result<()> {
        // SAFETY: the env is open and used only through &mut self; value is valid for its length.
        let rc = unsafe {
            peers_lmdb_put_commit_run(
                self.env.as_ptr(),
                value.as_ptr(),
                value.len() as u64,
                ops,
                rng,
            )
        };
        if rc != 0 {
            return Err(lmdb_error("put + commit", rc));
        }
        Ok(())
    }
}

impl Drop for LmdbEnv {
    fn drop(&mut self) {
        // SAFETY: the env is open and no transaction is left open by the C side.
        unsafe { peers_lmdb_close(self.env.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn permutation_is_a_permutation() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let p = Permutation::shuffled(100, &mut rng);
        let mut seen = p.0.clone();
        seen.sort_unstable();
        assert_eq!(seen, (0..100).collect::<Vec<u32>>());
    }

    #[test]
    fn malloc_round_leaves_slots_empty() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let order = Permutation::shuffled(10, &mut rng);
        let mut slots = MallocSlots::new(10);
        slots.alloc_free_round(&order, 64).unwrap();
        assert!(slots.blocks.iter().all(|b| b.is_null()));
        let wrong = Permutation::shuffled(9, &mut rng);
        assert!(slots.alloc_free_round(&wrong, 64).is_err());
    }

    #[test]
    fn malloc_larson_fills_every_slot() {
        let mut state = 0x1234_5678_9abc_def1u64;
        let mut slots = MallocSlots::new(32);
        slots.larson_fill(64, 1024, &mut state).unwrap();
        assert!(slots.blocks.iter().all(|b| !b.is_null()));
        slots.larson_run(64, 1024, 1000, &mut state).unwrap();
        assert!(slots.blocks.iter().all(|b| !b.is_null()));
        assert!(slots.larson_run(0, 10, 1, &mut state).is_err());
        assert!(slots.larson_run(20, 10, 1, &mut state).is_err());
    }
}
