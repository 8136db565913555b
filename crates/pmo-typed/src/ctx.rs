//! [`Ctx`] (the attached heap as the containers see it), [`TypedHeap`] (read-write attach) and
//! [`TypedReader`] (read-only attach), and the typed root.
//!
//! Owns: turning heap offsets into references, with every offset checked against the heap's
//! data area and alignment, and the rules that make those references sound:
//! - `&mut` into the PMO only from a read-write attach, and only through `&mut TypedHeap`
//!   ([`TypedHeap::root`]): while user code holds it, no psync or detach can run (both need
//!   `&mut self` / `self`), so the psync always sees a quiescent heap;
//! - a read-only attach hands out `&T` only; every mutation checks [`Ctx::writable`] first,
//!   so nothing ever writes a read-only mapping;
//! - a container is used only where it lives: each operation checks that the handle's own
//!   address lies inside this mapping and that its recorded heap id is this heap's
//!   (a handle moved into DRAM or into another attached PMO is refused, not misread);
//! - under declared dirty tracking every byte the containers write (and every `&mut` they hand
//!   out) is declared, so psync commits it.
//!
//! Why unsafe is allowed here: the mapping is raw memory; the accessors below turn checked
//! offsets into references. Their callers (the containers) guarantee exclusive ownership of
//! each block (unique, non-`Clone` handles), which is what makes the references non-aliasing.
#![allow(unsafe_code)]

use crate::error::{Result, TypedError};
use crate::persistent::Persistent;
use pmo_alloc::{CheckReport, Heap, HeapOptions, Protection};
use pmo_heap::{AttachOptions, CommitStats, DirtyTracking, OpenOptions, PmoHeap, PmoHeapError};
use pmo_store::{Attachment, Perm, Pool, StoreError};
use std::collections::HashSet;
use std::ptr::NonNull;

const ROOT_MAGIC: u64 = u64::from_le_bytes(*b"PMOTYPED");
/// Root block header: magic, layout hash, size, align (4 x u64); the value follows at
/// `root_data_offset::<T>()`.
const ROOT_HDR: usize = 32;

fn root_data_offset<T>() -> usize {
    ROOT_HDR.max(std::mem::align_of::<T>())
}

enum Backing {
    Write(PmoHeap),
    // Field order: the heap is dropped before the mapping.
    Read {
        heap: Heap,
        _attachment: Box<Attachment>,
    },
}

/// The attached heap as containers see it: pass it to every container method. Obtained with
/// the root from [`TypedHeap::root`] (read-write) or [`TypedReader::root`] (read-only).
pub struct Ctx {
    backing: Backing,
    base: usize,
    data_start: u64,
    data_end: u64,
    id: u64,
    declared: bool,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("base", &(self.base as *const u8))
            .field("heap_id", &self.id)
            .field("writable", &self.is_writable())
            .finish()
    }
}

impl Ctx {
    fn new(backing: Backing) -> Ctx {
        let (heap, declared) = match &backing {
            Backing::Write(h) => (h.heap(), h.dirty_tracking() == DirtyTracking::Declared),
            Backing::Read { heap, .. } => (heap, false),
        };
        let geo = heap.geometry();
        Ctx {
            base: heap.base().as_ptr() as usize,
            data_start: geo.data_offset,
            data_end: geo.data_offset + geo.data_bytes,
            id: geo.heap_id,
            declared,
            backing,
        }
    }

    fn heap(&self) -> &Heap {
        match &self.backing {
            Backing::Write(h) => h.heap(),
            Backing::Read { heap, .. } => heap,
        }
    }

    /// True for a read-write attach.
    pub fn is_writable(&self) -> bool {
        matches!(self.backing, Backing::Write(_))
    }

    /// The heap's id (recorded by every container that allocated in it).
    pub fn heap_id(&self) -> u64 {
        self.id
    }

    /// The heap, for a mutation: `ReadOnly` on a read-only attach.
    #[inline]
    pub(crate) fn writable(&self) -> Result<&PmoHeap> {
        match &self.backing {
            Backing::Write(h) => Ok(h),
            Backing::Read { .. } => Err(TypedError::ReadOnly),
        }
    }

    /// Check that the handle at `handle` (of `size` bytes) lives in this mapping, that
    /// `recorded` (its heap id, 0 while it never allocated) is this heap's, and that `home`
    /// (where it was bound, 0 while unbound) is where it is.
    #[inline]
    pub(crate) fn check_handle(
        &self,
        handle: *const u8,
        size: usize,
        recorded: u64,
        home: u64,
    ) -> Result<()> {
        let a = handle as usize;
        let lo = self.base + self.data_start as usize;
        let hi = self.base + self.data_end as usize;
        if a < lo || a.saturating_add(size) > hi {
            return Err(TypedError::NotInPmo);
        }
        if recorded != 0 && recorded != self.id {
            return Err(TypedError::ForeignHeap {
                expected: self.id,
                found: recorded,
            });
        }
        if home != 0 && home != (a - self.base) as u64 {
            return Err(TypedError::Moved);
        }
        Ok(())
    }

    /// Where the handle at `handle` lives (its offset in the PMO): what it records as its home
    /// when it binds (first allocation) or is moved by its container (`rebind`).
    #[inline]
    pub(crate) fn home_of<T>(&self, handle: &T) -> Result<u64> {
        let a = handle as *const T as usize;
        let lo = self.base + self.data_start as usize;
        let hi = self.base + self.data_end as usize;
        if a < lo || a.saturating_add(std::mem::size_of::<T>()) > hi {
            return Err(TypedError::NotInPmo);
        }
        Ok((a - self.base) as u64)
    }

    /// Rebind the `n` values at `p`, just moved there by the container that owns them.
    ///
    /// # Safety
    /// `p` points at `n` initialized values inside a block the caller's container owns, with
    /// no other live reference to them.
    pub(crate) unsafe fn rebind_moved<V: Persistent>(&self, p: *mut V, n: usize) -> Result<()> {
        if V::OWNS_BLOCKS {
            for j in 0..n {
                // SAFETY: the caller's contract: `j < n` values, owned, unaliased.
                unsafe { &mut *p.add(j) }.rebind(self)?;
            }
        }
        Ok(())
    }

    /// A container header's `rebind`: record `handle`'s new place if it is bound.
    pub(crate) fn rebind_handle<T>(
        &self,
        handle: &mut T,
        home: impl Fn(&mut T) -> &mut u64,
    ) -> Result<()> {
        if *home(handle) != 0 {
            let at = self.home_of(handle)?;
            *home(handle) = at;
            self.touch_val(handle)?;
        }
        Ok(())
    }

    /// A zeroed block of `size` bytes aligned to `align`: its offset.
    pub(crate) fn alloc(&self, size: usize, align: usize) -> Result<u64> {
        let h = self.writable()?;
        let p = h.alloc_zeroed(size.max(1), align.max(1))?;
        Ok(p.as_ptr() as u64 - self.base as u64)
    }

    /// Free the block at `off`.
    pub(crate) fn free(&self, off: u64) -> Result<()> {
        let h = self.writable()?;
        // In the data area (a header altered outside pmo may hold any offset).
        let p = NonNull::new(self.ptr::<u8>(off, 1)?)
            .ok_or_else(|| TypedError::Corrupt("null block"))?;
        Ok(h.free(p)?)
    }

    /// Resize the block at `off` (contents kept up to the smaller size): its new offset.
    pub(crate) fn realloc(&self, off: u64, size: usize, align: usize) -> Result<u64> {
        let h = self.writable()?;
        let p = NonNull::new(self.ptr::<u8>(off, 1)?)
            .ok_or_else(|| TypedError::Corrupt("null block"))?;
        let q = h.realloc(p, size, align)?;
        Ok(q.as_ptr() as u64 - self.base as u64)
    }

    /// The address of `n` values of `T` at `off`, checked to lie in the data area and to be
    /// aligned.
    #[inline]
    pub(crate) fn ptr<T>(&self, off: u64, n: usize) -> Result<*mut T> {
        let bytes = (n as u64)
            .checked_mul(std::mem::size_of::<T>() as u64)
            .ok_or_else(|| TypedError::Corrupt("size overflows"))?;
        let end = off
            .checked_add(bytes)
            .ok_or_else(|| TypedError::Corrupt("offset overflows"))?;
        if off < self.data_start || end > self.data_end {
            return Err(TypedError::Corrupt("offset outside the heap's data area"));
        }
        let p = self.base + off as usize;
        if !p.is_multiple_of(std::mem::align_of::<T>()) {
            return Err(TypedError::Corrupt("misaligned offset"));
        }
        Ok(p as *mut T)
    }

    /// Declare `len` bytes at `ptr` written (for declared dirty tracking; otherwise nothing).
    #[inline]
    pub(crate) fn touch(&self, ptr: *const u8, len: usize) -> Result<()> {
        if self.declared && len > 0 {
            self.writable()?.declare(ptr, len)?;
        }
        Ok(())
    }

    /// Declare several ranges `(ptr, len)` written, in one hold of the attachment's declared
    /// ranges (an operation's control byte, slot and header: one atomic, not three).
    #[inline]
    pub(crate) fn touch_many(&self, ranges: &[(*const u8, usize)]) -> Result<()> {
        if self.declared {
            self.writable()?.declare_many(ranges)?;
        }
        Ok(())
    }

    /// Declare the bytes of `v` written.
    #[inline]
    pub(crate) fn touch_val<T>(&self, v: &T) -> Result<()> {
        self.touch((v as *const T).cast(), std::mem::size_of::<T>())
    }

    /// # Safety
    /// The caller owns the `n` values at `off` (no other live reference to them) for `'a`.
    pub(crate) unsafe fn slice<T: Persistent>(&self, off: u64, n: usize) -> Result<&[T]> {
        if n == 0 {
            return Ok(&[]);
        }
        let p = self.ptr::<T>(off, n)?;
        // SAFETY: `p` is aligned and `n` values lie inside the mapping (checked by `ptr`);
        // every bit pattern is a valid `T` (`Persistent`); exclusivity is the caller's contract.
        Ok(unsafe { std::slice::from_raw_parts(p, n) })
    }

    /// # Safety
    /// As [`Ctx::slice`], and the attach is read-write (checked: `ReadOnly` otherwise).
    // The `&mut` comes from the mapping, not from `self`: exclusivity is the caller's contract.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice_mut<T: Persistent>(&self, off: u64, n: usize) -> Result<&mut [T]> {
        self.writable()?;
        if n == 0 {
            return Ok(&mut []);
        }
        let p = self.ptr::<T>(off, n)?;
        // SAFETY: as in `slice`; the mapping is writable (read-write attach).
        Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
    }

    /// Root block's header and value pointer, or `None` when the heap has no root.
    fn root_block<T: Persistent>(&self) -> Result<Option<(*mut u64, *mut T)>> {
        let Some(p) = self.heap().root()? else {
            return Ok(None);
        };
        let off = p.as_ptr() as u64 - self.base as u64;
        let usable = self.heap().usable_size(p)?;
        let hdr = self.ptr::<u64>(off, ROOT_HDR / 8)?;
        // SAFETY: `hdr` points at 4 aligned u64 inside the data area (checked by `ptr`).
        let words = unsafe { [*hdr, *hdr.add(1), *hdr.add(2), *hdr.add(3)] };
        let size = std::mem::size_of::<T>() as u64;
        let align = std::mem::align_of::<T>() as u64;
        if words[0] != ROOT_MAGIC
            || words[1] != T::LAYOUT
            || words[2] != size
            || words[3] != align
            || usable < root_data_offset::<T>() + size as usize
        {
            return Err(TypedError::RootMismatch {
                wanted: std::any::type_name::<T>(),
                expected: T::LAYOUT,
                expected_size: size,
                found: if words[0] == ROOT_MAGIC { words[1] } else { 0 },
                found_size: if words[0] == ROOT_MAGIC { words[2] } else { 0 },
            });
        }
        let val = self.ptr::<T>(off + root_data_offset::<T>() as u64, 1)?;
        Ok(Some((hdr, val)))
    }

    fn root_offset(&self) -> Result<Option<u64>> {
        Ok(self
            .heap()
            .root()?
            .map(|p| p.as_ptr() as u64 - self.base as u64))
    }
}

/// The dirty tracking of a read-write typed attach: the caller's choice, else `PMO_DIRTY`'s,
/// else [`DirtyTracking::Declared`]. The containers declare every byte they write and every
/// `&mut` they hand out, and the root is compared at psync, so a program using only this
/// crate's API declares nothing itself, and psync costs no write-protect fault per page.
fn typed_tracking(mut attach: AttachOptions) -> AttachOptions {
    if attach.tracking.is_none() {
        attach.tracking = Some(DirtyTracking::from_env().unwrap_or(DirtyTracking::Declared));
    }
    attach
}

/// A typed heap attached read-write: the root and every container in it are mutable.
///
/// Nothing is durable until [`TypedHeap::psync`], which commits every change since the last
/// psync atomically (shadow paging). [`TypedHeap::detach`], drop, a panic that unwinds past it,
/// or a crash discard the changes since the last psync.
pub struct TypedHeap {
    ctx: Ctx,
    /// Under declared tracking: the root value's bytes when [`TypedHeap::root`] first handed
    /// it out since the last psync (address, bytes). The root is declared at psync only if
    /// it changed, so a psync of container updates that leave the root's headers alone does
    /// not commit the root's page too.
    root_snap: Option<(usize, Vec<u8>)>,
}

/// Roots up to this size are compared at psync instead of declared when handed out.
const ROOT_SNAP_MAX: usize = 4096;

impl std::fmt::Debug for TypedHeap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypedHeap").field("ctx", &self.ctx).finish()
    }
}

/// The heap checker's report and the typed reachability walk of [`TypedHeap::check`].
#[derive(Debug, Clone)]
pub struct TypedCheck {
    /// The allocator's full check.
    pub heap: CheckReport,
    /// Blocks reachable from the root (the root block included).
    pub reachable: u64,
    /// Live blocks nothing reaches (leaked), as heap offsets.
    pub unreachable: Vec<u64>,
}

impl TypedHeap {
    /// Create PMO `name` of `size` bytes holding an empty typed heap (durable on return).
    pub fn create(pool: &Pool, name: &str, size: u64, key: &[u8]) -> Result<TypedHeap> {
        Self::create_with(pool, name, size, key, AttachOptions::default())
    }

    /// [`TypedHeap::create`] with attach options.
    pub fn create_with(
        pool: &Pool,
        name: &str,
        size: u64,
        key: &[u8],
        attach: AttachOptions,
    ) -> Result<TypedHeap> {
        let opts = HeapOptions {
            protection: Protection::Off,
            ..HeapOptions::default()
        };
        Self::from_heap(PmoHeap::create_with(
            pool,
            name,
            size,
            key,
            &opts,
            typed_tracking(attach),
        )?)
    }

    /// Attach PMO `name` read-write.
    pub fn open(pool: &Pool, name: &str, key: &[u8]) -> Result<TypedHeap> {
        Self::open_with(pool, name, key, AttachOptions::default())
    }

    /// [`TypedHeap::open`] with attach options.
    pub fn open_with(
        pool: &Pool,
        name: &str,
        key: &[u8],
        attach: AttachOptions,
    ) -> Result<TypedHeap> {
        let opts = OpenOptions {
            protection: Protection::Off,
            attach: typed_tracking(attach),
        };
        Self::from_heap(PmoHeap::open_with(pool, name, key, &opts)?)
    }

    /// Open PMO `name`, creating it (`size` bytes) if it does not exist.
    pub fn open_or_create(pool: &Pool, name: &str, size: u64, key: &[u8]) -> Result<TypedHeap> {
        if pool.exists(name)? {
            return Self::open(pool, name, key);
        }
        match Self::create(pool, name, size, key) {
            Err(TypedError::Heap(PmoHeapError::Store(StoreError::Exists(_)))) => {
                Self::open(pool, name, key)
            }
            r => r,
        }
    }

    /// Typed access to an opened [`PmoHeap`] (read-write by construction).
    pub fn from_heap(heap: PmoHeap) -> Result<TypedHeap> {
        // Every dirty tracking works: fault and scan find the containers' writes by themselves,
        // declared gets them through `Ctx::touch`.
        Ok(TypedHeap {
            ctx: Ctx::new(Backing::Write(heap)),
            root_snap: None,
        })
    }

    /// The root, created zeroed (every container empty) on first use, and the context every
    /// container method takes. A root of another type is refused (`RootMismatch`).
    pub fn root<T: Persistent>(&mut self) -> Result<(&mut T, &Ctx)> {
        #[allow(clippy::let_unit_value)]
        let () = T::LAYOUT_OK;
        let ctx = &self.ctx;
        let size = std::mem::size_of::<T>();
        let val = match ctx.root_block::<T>()? {
            Some((_, v)) => v,
            None => {
                let total = root_data_offset::<T>() + size;
                let off = ctx.alloc(total, root_data_offset::<T>().max(8))?;
                let hdr = ctx.ptr::<u64>(off, ROOT_HDR / 8)?;
                // SAFETY: a fresh block of `total` bytes, aligned, only we know of it.
                unsafe {
                    hdr.write(ROOT_MAGIC);
                    hdr.add(1).write(T::LAYOUT);
                    hdr.add(2).write(size as u64);
                    hdr.add(3).write(std::mem::align_of::<T>() as u64);
                }
                ctx.touch(hdr.cast(), ROOT_HDR)?;
                let h = ctx.writable()?;
                h.set_root(NonNull::new(hdr.cast::<u8>()))?;
                let v = ctx.ptr::<T>(off + root_data_offset::<T>() as u64, 1)?;
                ctx.touch(v.cast(), size)?;
                v
            }
        };
        if ctx.declared && size <= ROOT_SNAP_MAX {
            // The user may write the root through the `&mut T` below: keep its bytes as they
            // are now (unless a copy from an earlier hand-out since the last psync is kept
            // already) and declare it at psync if they differ (`declare_root`).
            if self.root_snap.as_ref().map(|s| s.0) != Some(val as usize) {
                self.declare_root()?;
                // SAFETY: `size` bytes of the live root value (checked by `root_block`), no
                // `&mut` into the PMO is live (`&mut self`); every byte is initialized
                // (`Persistent`: no padding).
                let now = unsafe { std::slice::from_raw_parts(val as *const u8, size) };
                self.root_snap = Some((val as usize, now.to_vec()));
            }
        } else {
            ctx.touch(val.cast(), size)?;
        }
        // SAFETY: `val` is the root value inside the live root block (checked); every bit
        // pattern is a valid `T`; `&mut self` is borrowed for the result's lifetime, so no
        // other reference into the PMO exists meanwhile; the attach is read-write.
        Ok((unsafe { &mut *val }, &self.ctx))
    }

    /// Declare the root value if it differs from the copy kept by [`TypedHeap::root`] (declared
    /// tracking), the bytes from the first to the last that differ.
    fn declare_root(&self) -> Result<()> {
        let Some((addr, old)) = &self.root_snap else {
            return Ok(());
        };
        // SAFETY: the root value handed out by `root` (the root block is never freed while
        // attached); no `&mut` into the PMO is live (every caller holds `&self` or `&mut self`
        // of the heap, which `root`'s result borrows).
        let now = unsafe { std::slice::from_raw_parts(*addr as *const u8, old.len()) };
        if let Some(first) = now.iter().zip(old).position(|(a, b)| a != b) {
            let last = now
                .iter()
                .zip(old)
                .rposition(|(a, b)| a != b)
                .unwrap_or(first);
            self.ctx.touch(now[first..].as_ptr(), last + 1 - first)?;
        }
        Ok(())
    }

    /// The root, read-only (`NoRoot` if it was never created).
    pub fn root_ref<T: Persistent>(&self) -> Result<(&T, &Ctx)> {
        root_ref(&self.ctx)
    }

    /// Commit every change since the last psync, atomically.
    pub fn psync(&mut self) -> Result<CommitStats> {
        self.declare_root()?;
        let st = self.ctx.writable()?.psync()?;
        self.root_snap = None;
        Ok(st)
    }

    /// Detach, discarding changes since the last psync.
    pub fn detach(self) -> Result<()> {
        match self.ctx.backing {
            Backing::Write(h) => Ok(h.detach()?),
            Backing::Read { .. } => Ok(()),
        }
    }

    /// The underlying heap (allocator statistics, checker). Changes made to the root so far
    /// are declared first, so a psync through it commits them too.
    pub fn heap(&self) -> &PmoHeap {
        // A failed declaration is reported by the next psync (`TypedHeap::psync` declares
        // again), so it can be ignored here.
        let _ = self.declare_root();
        match &self.ctx.backing {
            Backing::Write(h) => h,
            Backing::Read { .. } => unreachable!("a TypedHeap is always read-write"),
        }
    }

    /// Run the heap checker and walk everything the root of type `T` reaches: every live block
    /// must be reached exactly once (a block reached twice would be aliased: `Corrupt`).
    pub fn check<T: Persistent>(&self) -> Result<TypedCheck> {
        check::<T>(&self.ctx)
    }
}

/// A typed heap attached read-only: `&T` only. Other readers may attach at the same time;
/// a writer may not.
pub struct TypedReader {
    ctx: Ctx,
}

impl TypedReader {
    /// Attach PMO `name` read-only.
    pub fn open(pool: &Pool, name: &str, key: &[u8]) -> Result<TypedReader> {
        Self::open_with(pool, name, key, AttachOptions::default())
    }

    /// [`TypedReader::open`] with attach options.
    pub fn open_with(
        pool: &Pool,
        name: &str,
        key: &[u8],
        attach: AttachOptions,
    ) -> Result<TypedReader> {
        let a = pool.attach_with(name, Perm::Read, key, attach)?;
        // SAFETY: the attachment maps `len` bytes at `addr` read-only until it is dropped,
        // after the heap (field order of `Backing::Read`). With `Protection::Off`, opening and
        // every later call made through `Ctx` on a read-only backing (root, usable_size,
        // check, allocations) only read the region; mutations are refused by `Ctx::writable`
        // before they reach the heap.
        let heap = unsafe { Heap::open_with(a.addr(), a.len(), Protection::Off) }
            .map_err(PmoHeapError::from)?;
        Ok(TypedReader {
            ctx: Ctx::new(Backing::Read {
                heap,
                _attachment: Box::new(a),
            }),
        })
    }

    /// The root (`NoRoot` if it was never created) and the context for container reads.
    pub fn root<T: Persistent>(&self) -> Result<(&T, &Ctx)> {
        root_ref(&self.ctx)
    }

    /// As [`TypedHeap::check`].
    pub fn check<T: Persistent>(&self) -> Result<TypedCheck> {
        check::<T>(&self.ctx)
    }
}

fn root_ref<T: Persistent>(ctx: &Ctx) -> Result<(&T, &Ctx)> {
    #[allow(clippy::let_unit_value)]
    let () = T::LAYOUT_OK;
    let (_, val) = ctx.root_block::<T>()?.ok_or_else(|| TypedError::NoRoot)?;
    // SAFETY: the root value inside the live root block (checked), any bit pattern valid;
    // shared borrow of the owner for the result's lifetime (no `&mut` can coexist).
    Ok((unsafe { &*val }, ctx))
}

fn check<T: Persistent>(ctx: &Ctx) -> Result<TypedCheck> {
    let heap = ctx.heap().check()?;
    let mut reached = HashSet::new();
    let mut twice = false;
    if let Some(root) = ctx.root_offset()? {
        reached.insert(root);
        let (v, _) = root_ref::<T>(ctx)?;
        v.for_each_block(ctx, &mut |off| twice |= !reached.insert(off))?;
    }
    if twice {
        return Err(TypedError::Corrupt("a block is owned twice"));
    }
    let mut unreachable = Vec::new();
    let mut live = 0u64;
    ctx.heap().for_each_allocation(|a| {
        live += 1;
        let off = a.ptr.as_ptr() as u64 - ctx.base as u64;
        if !reached.remove(&off) {
            unreachable.push(off);
        }
    })?;
    if !reached.is_empty() {
        return Err(TypedError::Corrupt(
            "a container points at a block that is not live",
        ));
    }
    Ok(TypedCheck {
        heap,
        reachable: live - unreachable.len() as u64,
        unreachable,
    })
}
