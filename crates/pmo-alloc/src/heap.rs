//! The public heap: attach (`format`/`open`), sub-heap selection and locking, metadata
//! protection around every call, the root object, typed pointers, iteration and statistics.
//!
//! Owns: the DRAM side of an attached heap (one lock per sub-heap, the root lock, the
//! protection mode). Nothing here needs to survive a re-attach: every byte that matters lives
//! in the region and is written by `subheap.rs` (metadata) or here (header and root page).
//!
//! Concurrency: a sub-heap's metadata is touched only under that sub-heap's lock. Allocation
//! starts at the sub-heap of the CPU the thread runs on (`sched_getcpu`), takes the first
//! uncontended one if that is busy, and only waits when all are busy or full. A free goes to
//! the sub-heap that owns the address. Lock order: sub-heaps by index, then the root lock.
//!
//! Why unsafe is allowed here: `format`/`open` receive a raw region, and this module turns the
//! region's metadata bytes into typed slices (`sub_view`) and copies user bytes in `realloc`.
#![allow(unsafe_code)]

use crate::check::{self, CheckReport};
use crate::error::{HeapError, Result};
use crate::layout::{
    class_for, hdr, root, Geometry, MAX_ALIGN_BYTES, MAX_SUBHEAPS, OS_PAGE_BYTES, ROOT_PAGE_OFFSET,
    SUBHEAP_HEADER_BYTES, UNIT_BYTES, UNIT_ENTRY_BYTES,
};
use crate::meta::{SlabDesc, SubHeapHeader, UnitEntry};
use crate::protect::{PageGuard, Protection, Protector};
use crate::ptr::HeapPtr;
use crate::subheap::SubMeta;
use crate::sys;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Options of [`Heap::format`].
#[derive(Debug, Clone, Copy, Default)]
pub struct HeapOptions {
    /// Number of sub-heaps; 0 means one per CPU (at most 256). Fixed at format.
    pub subheaps: u32,
    /// Metadata protection for this attach.
    pub protection: Protection,
}

/// One live block, as reported by [`Heap::allocations`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// Start of the block.
    pub ptr: NonNull<u8>,
    /// Bytes usable at `ptr`.
    pub usable_size: usize,
    /// Sub-heap that owns it.
    pub subheap: u32,
}

/// Counters kept in the metadata, summed over sub-heaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapStats {
    /// Number of sub-heaps.
    pub subheaps: u32,
    /// Bytes of the data area.
    pub capacity_bytes: u64,
    /// Live blocks.
    pub live_allocations: u64,
    /// Usable bytes of live blocks.
    pub live_bytes: u64,
    /// Bytes in free extents (free slab slots not included).
    pub free_extent_bytes: u64,
    /// Slabs in use.
    pub slabs: u64,
    /// Protection in force.
    pub protection: Protection,
}

/// A sub-heap's lock, on its own cache lines so sub-heaps do not false-share.
///
/// A test-and-test-and-set lock whose release is a plain store: the allocator's critical
/// sections are tens of nanoseconds, and `std::sync::Mutex` pays a second atomic
/// read-modify-write on unlock (to find sleepers), which profiling showed to be a large share
/// of an alloc+free pair here. Waiters spin briefly, then yield the CPU, so a preempted holder
/// (more threads than CPUs) is not starved.
#[repr(align(128))]
struct SubHeapLock {
    locked: AtomicBool,
}

/// Spins before a waiter starts yielding.
const LOCK_SPINS_BEFORE_YIELD: u32 = 64;

impl SubHeapLock {
    fn new() -> Self {
        SubHeapLock {
            locked: AtomicBool::new(false),
        }
    }

    #[inline]
    fn try_lock(&self) -> Option<SubHeapGuard<'_>> {
        if !self.locked.load(Ordering::Relaxed)
            && self
                .locked
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            Some(SubHeapGuard { lock: self })
        } else {
            None
        }
    }

    #[inline]
    fn lock(&self) -> SubHeapGuard<'_> {
        let mut spins = 0u32;
        loop {
            if let Some(g) = self.try_lock() {
                return g;
            }
            if spins < LOCK_SPINS_BEFORE_YIELD {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// Holds a [`SubHeapLock`]; releases it on drop.
struct SubHeapGuard<'a> {
    lock: &'a SubHeapLock,
}

impl Drop for SubHeapGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

/// A persistent heap attached to a mapped region.
pub struct Heap {
    base: NonNull<u8>,
    len: usize,
    geo: Geometry,
    locks: Box<[SubHeapLock]>,
    root_lock: Mutex<()>,
    protector: Protector,
    poisoned: AtomicBool,
    observer: Option<WriteObserver>,
}

/// Receives `(region offset, length)` of bytes the heap wrote (see
/// [`Heap::set_write_observer`]); returns `false` if it could not record them.
pub type WriteObserver = std::sync::Arc<dyn Fn(usize, usize) -> bool + Send + Sync>;

// SAFETY: the region behind `base` is shared memory owned by whoever attached it; every access
// the heap makes to metadata happens under the owning sub-heap's (or the root) lock, and the
// header is read-only after format. The raw pointer itself carries no thread affinity.
unsafe impl Send for Heap {}
// SAFETY: as above; `&Heap` methods synchronise through the locks.
unsafe impl Sync for Heap {}

/// Build the metadata view of sub-heap `i`.
///
/// # Safety
/// `base` is the start of a region laid out by `geo` and valid for reads and writes, and the
/// caller has exclusive access to sub-heap `i`'s metadata for `'a` (holds its lock, or is
/// formatting/opening the heap alone).
unsafe fn sub_view<'a>(
    base: NonNull<u8>,
    geo: &Geometry,
    i: usize,
    guard: Option<&'a mut PageGuard>,
) -> SubMeta<'a> {
    let units = geo.units_per_subheap as usize;
    let meta_off = geo.meta_offset as usize + i * geo.meta_stride as usize;
    // SAFETY: `geo` was validated against the region length (meta blocks lie before the data
    // area, inside the region); the meta block starts on an OS page, so the header (align 8),
    // entries (align 4, at +1024) and descriptors (align 8, at +1024 + 16 * units) are
    // aligned; all fields are integers, valid for any bytes; exclusivity is the caller's.
    unsafe {
        let meta = base.as_ptr().add(meta_off);
        let hdr = &mut *meta.cast::<SubHeapHeader>();
        let entries = std::slice::from_raw_parts_mut(
            meta.add(SUBHEAP_HEADER_BYTES).cast::<UnitEntry>(),
            units,
        );
        let descs = std::slice::from_raw_parts_mut(
            meta.add(SUBHEAP_HEADER_BYTES + units * UNIT_ENTRY_BYTES)
                .cast::<SlabDesc>(),
            units / crate::layout::SLAB_UNITS as usize,
        );
        SubMeta {
            index: i as u32,
            hdr,
            units: entries,
            descs,
            data_off: geo.data_offset as usize + i * geo.subheap_data_bytes() as usize,
            guard,
        }
    }
}

fn check_base(base: *mut u8) -> Result<NonNull<u8>> {
    let p = NonNull::new(base).ok_or(HeapError::Misaligned(0))?;
    if !(base as usize).is_multiple_of(OS_PAGE_BYTES) {
        return Err(HeapError::Misaligned(base as usize));
    }
    Ok(p)
}

fn lock_ignoring_poison(m: &Mutex<()>) -> MutexGuard<'_, ()> {
    // Allocator code does not panic while holding a lock on valid input; a poisoned lock means a
    // panic elsewhere in the same critical section, and the metadata checks catch damage.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Clone, Copy)]
enum Request {
    Small(usize),
    Large(u32),
}

impl Heap {
    /// Lay out a new, empty heap over `[base, base + len)`, erasing what was there.
    ///
    /// # Safety
    /// - `[base, base + len)` is mapped, readable and writable, and stays so (at this address)
    ///   until the returned `Heap` is dropped;
    /// - nothing else reads or writes the region meanwhile, except user code inside blocks it
    ///   allocated, and the store's snapshots (`psync`) taken while the heap is [`Heap::quiesce`]d.
    pub unsafe fn format(base: *mut u8, len: usize, opts: &HeapOptions) -> Result<Heap> {
        let base = check_base(base)?;
        let subheaps = match opts.subheaps {
            0 => std::thread::available_parallelism()
                .map_or(1, |n| n.get() as u32)
                .min(MAX_SUBHEAPS),
            n => n,
        };
        let geo = Geometry::plan(len as u64, subheaps, rand::random::<u64>() | 1)?;
        let mut header = [0u8; hdr::END];
        geo.encode(&mut header);
        // SAFETY: the caller guarantees the region is ours and at least `len` bytes;
        // `Geometry::plan` succeeded, so len >= 2 OS pages + metadata + data.
        unsafe {
            std::ptr::write_bytes(base.as_ptr(), 0, 2 * OS_PAGE_BYTES);
            std::ptr::copy_nonoverlapping(header.as_ptr(), base.as_ptr(), hdr::END);
            write_root_words(base, 0, geo.heap_id);
        }
        for i in 0..subheaps as usize {
            // SAFETY: region valid per the caller; we are the only user while formatting.
            let mut view = unsafe { sub_view(base, &geo, i, None) };
            view.format(geo.heap_id);
        }
        Self::attach(base, len, geo, opts.protection)
    }

    /// Attach an existing heap with no metadata protection. See [`Heap::open_with`].
    ///
    /// # Safety
    /// As for [`Heap::open_with`].
    pub unsafe fn open(base: *mut u8, len: usize) -> Result<Heap> {
        // SAFETY: forwarded to the caller.
        unsafe { Self::open_with(base, len, Protection::Off) }
    }

    /// Attach the heap found in `[base, base + len)`. Validates the header (magic, version,
    /// checksum, geometry), the root page and every sub-heap header; corrupted bytes give an
    /// error. [`Heap::check`] validates the rest of the metadata.
    ///
    /// # Safety
    /// Same obligations as [`Heap::format`]; in addition the region must be mapped at the
    /// address it had when the blocks were allocated, for pointers stored inside to be valid.
    pub unsafe fn open_with(base: *mut u8, len: usize, protection: Protection) -> Result<Heap> {
        let base = check_base(base)?;
        if len < 2 * OS_PAGE_BYTES {
            return Err(HeapError::RegionTooSmall {
                len: len as u64,
                min: Geometry::min_region_bytes(1),
            });
        }
        let mut header = [0u8; hdr::END];
        // SAFETY: the region is at least two OS pages (checked) and readable per the caller.
        unsafe { std::ptr::copy_nonoverlapping(base.as_ptr(), header.as_mut_ptr(), hdr::END) };
        let geo = Geometry::decode(&header, len as u64)?;
        // SAFETY: as above.
        let (root_off, root_check) = unsafe { read_root_words(base) };
        if root_check != root_off ^ geo.heap_id ^ root::ROOT_CHECK_SALT {
            return Err(HeapError::Corrupt {
                subheap: u32::MAX,
                reason: "root page check word",
            });
        }
        for i in 0..geo.subheap_count as usize {
            // SAFETY: the geometry fits the region (decode validated it); we are alone.
            let view = unsafe { sub_view(base, &geo, i, None) };
            view.validate_header(geo.heap_id)?;
        }
        Self::attach(base, len, geo, protection)
    }

    fn attach(
        base: NonNull<u8>,
        len: usize,
        geo: Geometry,
        protection: Protection,
    ) -> Result<Heap> {
        let protector = Protector::new(protection)?;
        let heap = Heap {
            base,
            len,
            geo,
            locks: (0..geo.subheap_count).map(|_| SubHeapLock::new()).collect(),
            root_lock: Mutex::new(()),
            protector,
            poisoned: AtomicBool::new(false),
            observer: None,
        };
        let ranges = heap.protected_ranges();
        if let Err(e) = heap.protector.arm(heap.header_range(), &ranges) {
            heap.protector.disarm(heap.header_range(), &ranges);
            return Err(e);
        }
        Ok(heap)
    }

    fn header_range(&self) -> (usize, usize) {
        (self.base.as_ptr() as usize, OS_PAGE_BYTES)
    }

    fn root_range(&self) -> (usize, usize) {
        (
            self.base.as_ptr() as usize + ROOT_PAGE_OFFSET,
            OS_PAGE_BYTES,
        )
    }

    fn meta_range(&self, i: usize) -> (usize, usize) {
        let stride = self.geo.meta_stride as usize;
        (
            self.base.as_ptr() as usize + self.geo.meta_offset as usize + i * stride,
            stride,
        )
    }

    fn protected_ranges(&self) -> Vec<(usize, usize)> {
        let mut v: Vec<_> = (0..self.locks.len()).map(|i| self.meta_range(i)).collect();
        v.push(self.root_range());
        v
    }

    fn check_poison(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Relaxed) {
            return Err(HeapError::Poisoned);
        }
        Ok(())
    }

    /// Run `f` on sub-heap `i`'s metadata made writable. `_held` proves the lock is held.
    fn run<R>(
        &self,
        i: usize,
        _held: &SubHeapGuard<'_>,
        f: impl FnOnce(&mut SubMeta<'_>) -> Result<R>,
    ) -> Result<R> {
        let (addr, len) = self.meta_range(i);
        let guard_mode = matches!(self.protector, Protector::Guard);
        if guard_mode || self.observer.is_some() {
            // Guard mode opens pages as they are first written (see `PageGuard`); with an
            // observer the same bookkeeping records which pages the call wrote.
            let mut pages = PageGuard::with_protection(addr, len, guard_mode);
            let mut header_before = [0u8; SUBHEAP_HEADER_BYTES];
            if guard_mode {
                pages.open(0, SUBHEAP_HEADER_BYTES);
            } else {
                self.protector.enter(addr, len)?;
                // Recording only: the header page is reported if its bytes changed (most small
                // allocs and frees do not write it), compared below.
                // SAFETY: the sub-heap header lies at `addr` inside the region (readable), and
                // the caller holds sub-heap i's lock, so nobody writes it meanwhile.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        addr as *const u8,
                        header_before.as_mut_ptr(),
                        SUBHEAP_HEADER_BYTES,
                    )
                };
            }
            // SAFETY: the caller holds sub-heap i's lock for the duration of the view.
            let r = f(&mut unsafe { sub_view(self.base, &self.geo, i, Some(&mut pages)) });
            if !guard_mode {
                // SAFETY: as above; the view's borrows ended with `f`.
                let header_now =
                    unsafe { std::slice::from_raw_parts(addr as *const u8, SUBHEAP_HEADER_BYTES) };
                if header_now != header_before {
                    pages.open(0, SUBHEAP_HEADER_BYTES);
                }
            }
            if let Some(observe) = &self.observer {
                let block_off = self.region_offset(addr as *const u8);
                let mut ok = true;
                pages.for_each_written(|off, n| ok &= observe(block_off + off, n));
                if !ok {
                    self.poisoned.store(true, Ordering::Relaxed);
                }
            }
            let closed = pages.close().map_err(HeapError::Protect);
            let exited = if guard_mode {
                Ok(())
            } else {
                self.protector.exit(addr, len)
            };
            if let Err(e) = closed.and(exited) {
                self.poisoned.store(true, Ordering::Relaxed);
                return Err(e);
            }
            if self.poisoned.load(Ordering::Relaxed) {
                return Err(HeapError::Poisoned);
            }
            return r;
        }
        self.protector.enter(addr, len)?;
        // SAFETY: the caller holds sub-heap i's lock for the duration of the view.
        let r = f(&mut unsafe { sub_view(self.base, &self.geo, i, None) });
        if let Err(e) = self.protector.exit(addr, len) {
            self.poisoned.store(true, Ordering::Relaxed);
            return Err(e);
        }
        r
    }

    /// Tell the observer (if any) that the heap wrote `[off, off + len)` of the region;
    /// poison the heap if it could not record it.
    fn observe(&self, off: usize, len: usize) -> Result<()> {
        if let Some(observe) = &self.observer {
            if !observe(off, len) {
                self.poisoned.store(true, Ordering::Relaxed);
                return Err(HeapError::Poisoned);
            }
        }
        Ok(())
    }

    /// Install (or remove) the write observer: from now on, after each allocator call, it is
    /// called with `(region offset, length)` for every OS page of metadata the call wrote, the
    /// root words, and user bytes the heap itself wrote (`realloc`'s copy, `alloc_zeroed`'s
    /// zeros). A store whose psync commits only declared pages (pmo's declared dirty tracking)
    /// declares them there. Called under the sub-heap's lock: keep it short. If it returns
    /// `false` the write may not become durable, so the heap is poisoned (every later call fails
    /// with [`HeapError::Poisoned`]).
    pub fn set_write_observer(&mut self, observer: Option<WriteObserver>) {
        self.observer = observer;
    }

    /// Lock sub-heap `i` and run `f` on its metadata.
    fn with_subheap<R>(
        &self,
        i: usize,
        f: impl FnOnce(&mut SubMeta<'_>) -> Result<R>,
    ) -> Result<R> {
        self.check_poison()?;
        let guard = self.locks[i].lock();
        self.run(i, &guard, f)
    }

    fn region_offset(&self, ptr: *const u8) -> usize {
        (ptr as usize).wrapping_sub(self.base.as_ptr() as usize)
    }

    fn ptr_at(&self, off: usize) -> NonNull<u8> {
        // `wrapping_add` keeps the base's provenance; `off` is inside the region.
        NonNull::new(self.base.as_ptr().wrapping_add(off)).unwrap_or(self.base)
    }

    /// The sub-heap owning region offset `off`, if `off` is in the data area.
    fn owner(&self, off: usize) -> Result<usize> {
        let start = self.geo.data_offset as usize;
        if off < start || off >= start + self.geo.data_bytes as usize {
            return Err(HeapError::NotInHeap);
        }
        Ok((off - start) / self.geo.subheap_data_bytes() as usize)
    }

    fn home_subheap(&self) -> usize {
        let n = self.locks.len();
        if n == 1 {
            return 0;
        }
        match sys::current_cpu() {
            Some(cpu) => cpu as usize % n,
            None => {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                std::thread::current().id().hash(&mut h);
                h.finish() as usize % n
            }
        }
    }

    /// Allocate `size` bytes aligned to `align` (a power of two, at most 4096). Size 0 gives
    /// the smallest block. Blocks are not zeroed.
    pub fn alloc(&self, size: usize, align: usize) -> Result<NonNull<u8>> {
        if !align.is_power_of_two() || align > MAX_ALIGN_BYTES {
            return Err(HeapError::BadAlignment(align));
        }
        self.check_poison()?;
        let request = match class_for(size, align) {
            Some(class) => Request::Small(class),
            None => {
                let units = size.div_ceil(UNIT_BYTES).max(1);
                if units > self.geo.units_per_subheap as usize {
                    return Err(HeapError::TooLarge {
                        size,
                        max: self.geo.subheap_data_bytes() as usize,
                    });
                }
                Request::Large(units as u32)
            }
        };
        let attempt = |m: &mut SubMeta<'_>| match request {
            Request::Small(class) => m.alloc_small(class),
            Request::Large(units) => m.alloc_large(units),
        };
        let n = self.locks.len();
        let home = self.home_subheap();
        let mut tried = [0u64; (MAX_SUBHEAPS as usize).div_ceil(64)];
        // Pass 1: the home sub-heap, or the first uncontended one after it.
        let mut i = home;
        for _ in 0..n {
            if let Some(guard) = self.locks[i].try_lock() {
                tried[i / 64] |= 1 << (i % 64);
                if let Some(off) = self.run(i, &guard, attempt)? {
                    return Ok(self.ptr_at(off));
                }
            }
            i = if i + 1 == n { 0 } else { i + 1 };
        }
        // Pass 2: wait for the busy ones.
        for _ in 0..n {
            if tried[i / 64] & (1 << (i % 64)) == 0 {
                let guard = self.locks[i].lock();
                if let Some(off) = self.run(i, &guard, attempt)? {
                    return Ok(self.ptr_at(off));
                }
            }
            i = if i + 1 == n { 0 } else { i + 1 };
        }
        Err(HeapError::OutOfSpace { size })
    }

    /// Allocate `size` zeroed bytes.
    pub fn alloc_zeroed(&self, size: usize, align: usize) -> Result<NonNull<u8>> {
        let p = self.alloc(size, align)?;
        // SAFETY: `p` is a fresh block of at least `size` bytes that only we know of.
        unsafe { std::ptr::write_bytes(p.as_ptr(), 0, size) };
        self.observe(self.region_offset(p.as_ptr()), size)?;
        Ok(p)
    }

    /// Free the block starting at `ptr`. An invalid, double or interior free returns its own
    /// error and changes nothing.
    pub fn free(&self, ptr: NonNull<u8>) -> Result<()> {
        let off = self.region_offset(ptr.as_ptr());
        let i = self.owner(off)?;
        self.with_subheap(i, |m| m.free(off)).map(|_| ())
    }

    /// Bytes usable at `ptr`, which must be the start of a live block.
    pub fn usable_size(&self, ptr: NonNull<u8>) -> Result<usize> {
        let off = self.region_offset(ptr.as_ptr());
        let i = self.owner(off)?;
        self.peek(i, |m| m.classify(off).map(|b| b.usable_bytes()))
    }

    /// Read-only access to sub-heap `i` under its lock (no protection change except in MPK
    /// mode, where other threads cannot even read the metadata without entering).
    fn peek<R>(&self, i: usize, f: impl FnOnce(&SubMeta<'_>) -> Result<R>) -> Result<R> {
        let guard = self.locks[i].lock();
        if matches!(self.protector, Protector::Mpk { .. }) {
            return self.run(i, &guard, |m| f(m));
        }
        // SAFETY: we hold sub-heap i's lock; `f` only reads.
        let view = unsafe { sub_view(self.base, &self.geo, i, None) };
        f(&view)
    }

    /// Resize the block at `ptr` to hold `new_size` bytes aligned to `align`, keeping its
    /// contents up to the smaller size. Returns the (possibly moved) block; on error the old
    /// block is untouched and still live.
    pub fn realloc(&self, ptr: NonNull<u8>, new_size: usize, align: usize) -> Result<NonNull<u8>> {
        let old_usable = self.usable_size(ptr)?;
        if !align.is_power_of_two() || align > MAX_ALIGN_BYTES {
            return Err(HeapError::BadAlignment(align));
        }
        let fits = new_size <= old_usable && (ptr.as_ptr() as usize).is_multiple_of(align);
        let not_wasteful =
            new_size > old_usable / 2 || old_usable <= crate::layout::MIN_CLASS_BYTES;
        if fits && not_wasteful {
            return Ok(ptr);
        }
        let new = self.alloc(new_size, align)?;
        // SAFETY: `ptr` is a live block of `old_usable` bytes (checked above) and `new` a fresh
        // block of at least `new_size` bytes; distinct live blocks never overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(ptr.as_ptr(), new.as_ptr(), old_usable.min(new_size))
        };
        if let Err(e) = self.observe(self.region_offset(new.as_ptr()), old_usable.min(new_size)) {
            let _ = self.free(new);
            return Err(e);
        }
        if let Err(e) = self.free(ptr) {
            // The old block vanished meanwhile (a racing free by the caller): undo.
            let _ = self.free(new);
            return Err(e);
        }
        Ok(new)
    }

    /// Make `ptr` (the start of a live block, or `None`) the heap's root object.
    pub fn set_root(&self, ptr: Option<NonNull<u8>>) -> Result<()> {
        self.check_poison()?;
        let off = match ptr {
            None => {
                let _root = lock_ignoring_poison(&self.root_lock);
                return self.write_root(0);
            }
            Some(p) => self.region_offset(p.as_ptr()),
        };
        let i = self.owner(off)?;
        // Hold the owner's lock while writing the root, so the block cannot be freed between
        // the check and the write. Order: sub-heap, then root.
        let guard = self.locks[i].lock();
        if matches!(self.protector, Protector::Mpk { .. }) {
            self.run(i, &guard, |m| m.classify(off).map(|_| ()))?;
        } else {
            // SAFETY: we hold sub-heap i's lock and only read.
            unsafe { sub_view(self.base, &self.geo, i, None) }.classify(off)?;
        }
        let _root = lock_ignoring_poison(&self.root_lock);
        self.write_root(off as u64)
    }

    fn write_root(&self, off: u64) -> Result<()> {
        let (addr, len) = self.root_range();
        self.protector.enter(addr, len)?;
        // SAFETY: the root page is inside the region; the root lock is held by the caller.
        unsafe { write_root_words(self.base, off, self.geo.heap_id) };
        if let Err(e) = self.protector.exit(addr, len) {
            self.poisoned.store(true, Ordering::Relaxed);
            return Err(e);
        }
        self.observe(ROOT_PAGE_OFFSET + root::ROOT_OFFSET, 16)
    }

    /// The root object, checked to be a live block (`None` when unset).
    pub fn root(&self) -> Result<Option<NonNull<u8>>> {
        let off = {
            let _root = lock_ignoring_poison(&self.root_lock);
            let (addr, len) = self.root_range();
            self.protector.enter(addr, len)?;
            // SAFETY: the root page is inside the region; the root lock is held.
            let (off, check) = unsafe { read_root_words(self.base) };
            self.protector.exit(addr, len)?;
            if check != off ^ self.geo.heap_id ^ root::ROOT_CHECK_SALT {
                return Err(HeapError::Corrupt {
                    subheap: u32::MAX,
                    reason: "root page check word",
                });
            }
            off
        };
        if off == 0 {
            return Ok(None);
        }
        let off = usize::try_from(off).map_err(|_| HeapError::BadHeapPtr(off))?;
        let i = self.owner(off).map_err(|_| HeapError::Corrupt {
            subheap: u32::MAX,
            reason: "root outside data",
        })?;
        self.peek(i, |m| m.classify(off))
            .map_err(|_| HeapError::Corrupt {
                subheap: i as u32,
                reason: "root is not a live block",
            })?;
        Ok(Some(self.ptr_at(off)))
    }

    /// The root as a typed pointer (null when unset).
    pub fn root_ptr<T>(&self) -> Result<HeapPtr<T>> {
        Ok(match self.root()? {
            Some(p) => HeapPtr::from_offset(self.region_offset(p.as_ptr()) as u64),
            None => HeapPtr::NULL,
        })
    }

    /// Allocate a block for one `T` (uninitialised) and return its typed pointer.
    pub fn alloc_typed<T>(&self) -> Result<HeapPtr<T>> {
        let p = self.alloc(std::mem::size_of::<T>(), std::mem::align_of::<T>())?;
        Ok(HeapPtr::from_offset(self.region_offset(p.as_ptr()) as u64))
    }

    /// The typed pointer of an address inside this heap's data area.
    pub fn to_heap_ptr<T>(&self, ptr: NonNull<T>) -> Result<HeapPtr<T>> {
        let off = self.region_offset(ptr.as_ptr().cast());
        self.owner(off)?;
        Ok(HeapPtr::from_offset(off as u64))
    }

    /// The address of a typed pointer: `None` for null; an error when it lies outside the data
    /// area, is misaligned for `T`, or `T` would run past the region. (It does not check that
    /// the pointer is a live block: interior pointers are legitimate.)
    pub fn resolve<T>(&self, p: HeapPtr<T>) -> Result<Option<NonNull<T>>> {
        if p.is_null() {
            return Ok(None);
        }
        let off = usize::try_from(p.offset()).map_err(|_| HeapError::BadHeapPtr(p.offset()))?;
        self.owner(off)
            .map_err(|_| HeapError::BadHeapPtr(p.offset()))?;
        let end = off
            .checked_add(std::mem::size_of::<T>())
            .ok_or(HeapError::BadHeapPtr(p.offset()))?;
        let ptr = self.ptr_at(off);
        if end > (self.geo.data_offset + self.geo.data_bytes) as usize
            || !(ptr.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
        {
            return Err(HeapError::BadHeapPtr(p.offset()));
        }
        Ok(Some(ptr.cast()))
    }

    /// Every live block, sub-heap by sub-heap in address order. Each sub-heap is locked while
    /// it is read; blocks allocated or freed meanwhile in other sub-heaps may or may not show.
    pub fn allocations(&self) -> Result<Vec<Allocation>> {
        let mut out = Vec::new();
        self.for_each_allocation(|a| out.push(a))?;
        Ok(out)
    }

    /// Call `f` for every live block (outside the locks: `f` may call the heap).
    pub fn for_each_allocation(&self, mut f: impl FnMut(Allocation)) -> Result<()> {
        let mut blocks = Vec::new();
        for i in 0..self.locks.len() {
            blocks.clear();
            self.peek(i, |m| check::live_blocks(m, &mut blocks))?;
            for &(off, usable_size) in &blocks {
                f(Allocation {
                    ptr: self.ptr_at(off),
                    usable_size,
                    subheap: i as u32,
                });
            }
        }
        Ok(())
    }

    /// Counters from the metadata.
    pub fn stats(&self) -> Result<HeapStats> {
        let mut s = HeapStats {
            subheaps: self.geo.subheap_count,
            capacity_bytes: self.geo.data_bytes,
            live_allocations: 0,
            live_bytes: 0,
            free_extent_bytes: 0,
            slabs: 0,
            protection: self.protector.mode(),
        };
        for i in 0..self.locks.len() {
            self.peek(i, |m| {
                s.live_allocations += m.hdr.live_count;
                s.live_bytes += m.hdr.live_bytes;
                // Slab slots are counted by their descriptors.
                let used = m.hdr.desc_high_water as usize;
                for desc in m.descs.iter().take(used).filter(|d| d.in_use != 0) {
                    let class_bytes = crate::layout::CLASS_BYTES
                        .get(desc.class as usize)
                        .copied()
                        .unwrap_or(0);
                    s.live_allocations += u64::from(desc.used_slots);
                    s.live_bytes += u64::from(desc.used_slots) * u64::from(class_bytes);
                }
                s.free_extent_bytes += m.hdr.free_units * UNIT_BYTES as u64;
                s.slabs += m.hdr.slab_count as u64;
                Ok(())
            })?;
        }
        Ok(s)
    }

    /// Check the whole heap: every sub-heap's metadata invariants, the accounting identity
    /// `allocated + free + slab tail waste == capacity`, the stored counters, that no two live
    /// blocks overlap, that every block found by walking is found again by the free-time lookup,
    /// and that the root is a live block. Holds each sub-heap's lock while checking it.
    pub fn check(&self) -> Result<CheckReport> {
        let mut report = CheckReport {
            subheaps: self.geo.subheap_count,
            ..CheckReport::default()
        };
        let mut blocks: Vec<(usize, usize)> = Vec::new();
        for i in 0..self.locks.len() {
            let start = blocks.len();
            self.peek(i, |m| {
                let sub = check::check_subheap(m)?;
                check::live_blocks(m, &mut blocks)?;
                for &(off, usable) in &blocks[start..] {
                    let b = m.classify(off).map_err(|_| HeapError::Corrupt {
                        subheap: i as u32,
                        reason: "walked block not found by the free-time lookup",
                    })?;
                    if b.usable_bytes() != usable {
                        return Err(HeapError::Corrupt {
                            subheap: i as u32,
                            reason: "lookup size differs from walk",
                        });
                    }
                }
                report.add(&sub);
                Ok(())
            })?;
        }
        blocks.sort_unstable();
        let data_end = (self.geo.data_offset + self.geo.data_bytes) as usize;
        for w in blocks.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                return Err(HeapError::Corrupt {
                    subheap: u32::MAX,
                    reason: "two live blocks overlap",
                });
            }
        }
        if blocks
            .first()
            .is_some_and(|b| b.0 < self.geo.data_offset as usize)
            || blocks.last().is_some_and(|b| b.0 + b.1 > data_end)
        {
            return Err(HeapError::Corrupt {
                subheap: u32::MAX,
                reason: "block outside the data area",
            });
        }
        if report.capacity_bytes != self.geo.data_bytes {
            return Err(HeapError::Corrupt {
                subheap: u32::MAX,
                reason: "sub-heap capacities do not add up",
            });
        }
        report.root_set = self.root()?.is_some();
        Ok(report)
    }

    /// Lock every sub-heap and the root: while the guard lives no allocator call changes the
    /// region, so the store can take a consistent snapshot (psync) of it.
    pub fn quiesce(&self) -> QuiesceGuard<'_> {
        let subheaps = self.locks.iter().map(|l| l.lock()).collect();
        let root = lock_ignoring_poison(&self.root_lock);
        QuiesceGuard {
            _subheaps: subheaps,
            _root: root,
        }
    }

    /// Start of the region.
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// Length of the region.
    pub fn region_len(&self) -> usize {
        self.len
    }

    /// The layout read from (or written to) the header.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// Largest block `alloc` can ever return (one sub-heap's data area).
    pub fn max_alloc_bytes(&self) -> usize {
        self.geo.subheap_data_bytes() as usize
    }

    /// Protection in force.
    pub fn protection(&self) -> Protection {
        self.protector.mode()
    }
}

impl Drop for Heap {
    fn drop(&mut self) {
        let ranges = self.protected_ranges();
        self.protector.disarm(self.header_range(), &ranges);
    }
}

impl std::fmt::Debug for Heap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heap")
            .field("base", &self.base)
            .field("geometry", &self.geo)
            .finish()
    }
}

/// Holds every lock of a heap (see [`Heap::quiesce`]).
pub struct QuiesceGuard<'a> {
    _subheaps: Vec<SubHeapGuard<'a>>,
    _root: MutexGuard<'a, ()>,
}

/// # Safety
/// `base` is a heap region of at least two OS pages, writable, and the root lock is held (or
/// the heap is being formatted).
unsafe fn write_root_words(base: NonNull<u8>, off: u64, heap_id: u64) {
    // SAFETY: per the function contract; the root page is OS-page aligned, so the u64s are aligned.
    unsafe {
        let page = base.as_ptr().add(ROOT_PAGE_OFFSET);
        page.add(root::ROOT_OFFSET).cast::<u64>().write(off.to_le());
        page.add(root::ROOT_CHECK)
            .cast::<u64>()
            .write((off ^ heap_id ^ root::ROOT_CHECK_SALT).to_le());
    }
}

/// # Safety
/// `base` is a readable region of at least two OS pages.
unsafe fn read_root_words(base: NonNull<u8>) -> (u64, u64) {
    // SAFETY: per the function contract; aligned as in `write_root_words`.
    unsafe {
        let page = base.as_ptr().add(ROOT_PAGE_OFFSET);
        (
            u64::from_le(page.add(root::ROOT_OFFSET).cast::<u64>().read()),
            u64::from_le(page.add(root::ROOT_CHECK).cast::<u64>().read()),
        )
    }
}
