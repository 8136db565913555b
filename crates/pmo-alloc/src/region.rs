//! Owned mappings to put a heap on without the store: for tests, benchmarks and tools.
//!
//! Owns: [`MappedRegion`] (an anonymous or `/dev/shm`-style shared file mapping, unmapped on
//! drop) and [`MappedHeap`] (a heap together with the region it lives in, so the unsafe
//! obligations of [`Heap::format`]/[`Heap::open`] are met by construction).
//!
//! Why unsafe is allowed here: `MappedHeap` calls `Heap::format`/`Heap::open` and copies
//! snapshots into and out of the mapping.
#![allow(unsafe_code)]

use crate::error::Result;
use crate::heap::{Heap, HeapOptions};
use crate::protect::Protection;
use crate::sys;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

/// A read-write mapping owned by this value.
#[derive(Debug)]
pub struct MappedRegion {
    ptr: NonNull<u8>,
    len: usize,
    file: Option<PathBuf>,
}

// SAFETY: the mapping is plain memory owned by this value; it has no thread affinity.
unsafe impl Send for MappedRegion {}
// SAFETY: `&MappedRegion` only exposes the address and length.
unsafe impl Sync for MappedRegion {}

impl MappedRegion {
    /// `len` bytes of zeroed anonymous memory (page-aligned, lazily backed).
    pub fn anonymous(len: usize) -> io::Result<Self> {
        Ok(MappedRegion {
            ptr: sys::map_anonymous(len)?,
            len,
            file: None,
        })
    }

    /// A shared mapping of the file at `path`, created (or truncated) to `len` bytes; the file
    /// is removed when the region is dropped. On `/dev/shm` this is memory-backed.
    pub fn shared_file(path: &Path, len: usize) -> io::Result<Self> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        f.set_len(len as u64)?;
        let ptr = sys::map_file_shared(f.as_raw_fd(), len)?;
        Ok(MappedRegion {
            ptr,
            len,
            file: Some(path.to_path_buf()),
        })
    }

    /// Start of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length of the mapping.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Is the mapping empty?
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A copy of every byte (what a crash at this instant would preserve, given atomic psync).
    pub fn snapshot(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        // SAFETY: the mapping is readable for `len` bytes and `v` is a distinct allocation.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), v.as_mut_ptr(), self.len) };
        v
    }

    /// Overwrite the region with `bytes` (a snapshot); `&mut self` proves no heap is attached.
    pub fn restore(&mut self, bytes: &[u8]) {
        let n = bytes.len().min(self.len);
        // SAFETY: the mapping is writable for `len >= n` bytes, and exclusively borrowed.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr(), n) };
    }

    /// Mutable access to every byte (to corrupt it in tests); `&mut self`: no heap attached.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is valid for `len` bytes, exclusively borrowed for the result's life.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for MappedRegion {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `sys` with this length and nothing borrows it now.
        unsafe { sys::unmap(self.ptr, self.len) };
        if let Some(p) = &self.file {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A heap attached to a region it owns. Dereferences to [`Heap`].
#[derive(Debug)]
pub struct MappedHeap {
    // Field order matters: the heap detaches (restoring page protection) before the unmap.
    heap: Option<Heap>,
    region: MappedRegion,
}

impl MappedHeap {
    /// Format a new heap over `region`.
    pub fn format(region: MappedRegion, opts: &HeapOptions) -> Result<Self> {
        // SAFETY: the region is a live mapping owned by the returned value, which keeps it
        // mapped at this address until the heap is dropped; only the heap touches it.
        let heap = unsafe { Heap::format(region.as_ptr(), region.len(), opts)? };
        Ok(MappedHeap {
            heap: Some(heap),
            region,
        })
    }

    /// Attach the heap already in `region`.
    pub fn open(region: MappedRegion, protection: Protection) -> Result<Self> {
        // SAFETY: as in `format`; the region was never moved, so stored pointers stay valid.
        let heap = unsafe { Heap::open_with(region.as_ptr(), region.len(), protection)? };
        Ok(MappedHeap {
            heap: Some(heap),
            region,
        })
    }

    /// Format over a fresh anonymous mapping of `len` bytes.
    pub fn anonymous(len: usize, opts: &HeapOptions) -> Result<Self> {
        let region = MappedRegion::anonymous(len).map_err(crate::HeapError::Map)?;
        Self::format(region, opts)
    }

    /// A consistent copy of the region, taken with the heap quiesced.
    pub fn snapshot(&self) -> Vec<u8> {
        let _quiet = self.heap().quiesce();
        self.region.snapshot()
    }

    /// Detach the heap and hand back the region.
    pub fn into_region(mut self) -> MappedRegion {
        drop(self.heap.take());
        let MappedHeap { region, .. } = self;
        region
    }

    fn heap(&self) -> &Heap {
        match &self.heap {
            Some(h) => h,
            // `heap` is only `None` inside `into_region`, which consumes `self`.
            None => unreachable!("MappedHeap without a heap"),
        }
    }
}

impl std::ops::Deref for MappedHeap {
    type Target = Heap;
    fn deref(&self) -> &Heap {
        self.heap()
    }
}
