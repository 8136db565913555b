//! Shared mappings of a pool's file or device.
//!
//! A [`FileMapping`] maps a whole regular file, DAX file or `/dev/daxX.Y` device `MAP_SHARED`
//! (with `MAP_SYNC` when asked, so that on a DAX medium flushed cache lines are durable without
//! `msync`). It hands out no references into the mapping: other processes may write the same
//! bytes, so every access is a raw copy in [`FileMapping::read_at`] / [`FileMapping::write_at`].
//! Bounds are checked on every call; an out-of-range access is an error, never UB.
#![allow(unsafe_code)] // mmap, munmap, msync and raw copies into the mapping.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;

use crate::last_errno;

/// Errors of the mapping layer.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    #[error("{op} failed: {source}")]
    Io {
        op: &'static str,
        source: std::io::Error,
    },
    #[error("{op} failed: {}", std::io::Error::from_raw_os_error(*errno))]
    Os { op: &'static str, errno: i32 },
    #[error("range {offset}+{len} is outside the mapping of {size} bytes")]
    OutOfRange { offset: u64, len: u64, size: u64 },
    #[error("the medium is empty or too large to map ({size} bytes)")]
    BadSize { size: u64 },
}

/// How to map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapMode {
    /// `MAP_SHARED`: durability needs `msync` (regular files) or cache-line flushes
    /// (memory-backed files such as `/dev/shm`).
    Shared,
    /// `MAP_SHARED_VALIDATE | MAP_SYNC`: fails unless the file is on a DAX medium.
    SharedSync,
}

/// A whole file or device mapped read-write and shared.
pub struct FileMapping {
    ptr: *mut u8,
    len: usize,
    file: File,
}

// SAFETY: the mapping is plain shared memory; all access goes through raw copies whose
// synchronisation is the caller's (the store serialises writers with locks).
unsafe impl Send for FileMapping {}
// SAFETY: as above: `&self` methods only copy bytes in and out.
unsafe impl Sync for FileMapping {}

/// Size in bytes of a regular file, or of a device DAX character device (from sysfs).
pub fn medium_size(file: &File) -> Result<u64, MapError> {
    let meta = file
        .metadata()
        .map_err(|source| MapError::Io { op: "stat", source })?;
    if meta.file_type().is_char_device() {
        use std::os::unix::fs::MetadataExt;
        let rdev = meta.rdev();
        let (major, minor) = (libc::major(rdev), libc::minor(rdev));
        let path = format!("/sys/dev/char/{major}:{minor}/size");
        let text = std::fs::read_to_string(&path).map_err(|source| MapError::Io {
            op: "read device size",
            source,
        })?;
        text.trim()
            .parse::<u64>()
            .map_err(|_| MapError::BadSize { size: 0 })
    } else {
        Ok(meta.len())
    }
}

impl FileMapping {
    /// Map all of `file`.
    pub fn new(file: File, mode: MapMode) -> Result<FileMapping, MapError> {
        let size = medium_size(&file)?;
        if size == 0 || size > isize::MAX as u64 {
            return Err(MapError::BadSize { size });
        }
        let len = size as usize;
        let flags = match mode {
            MapMode::Shared => libc::MAP_SHARED,
            MapMode::SharedSync => libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
        };
        // SAFETY: a fresh mapping chosen by the kernel (no fixed address), of a file we hold open;
        // the result is checked against MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(MapError::Os {
                op: "mmap",
                errno: last_errno(),
            });
        }
        Ok(FileMapping {
            ptr: ptr.cast(),
            len,
            file,
        })
    }

    /// Length of the mapping in bytes.
    pub fn len(&self) -> u64 {
        self.len as u64
    }

    /// Always false: an empty file cannot be mapped.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file behind the mapping.
    pub fn file(&self) -> &File {
        &self.file
    }

    fn check(&self, offset: u64, len: usize) -> Result<usize, MapError> {
        let end = offset.checked_add(len as u64);
        match end {
            Some(end) if end <= self.len as u64 => Ok(offset as usize),
            _ => Err(MapError::OutOfRange {
                offset,
                len: len as u64,
                size: self.len as u64,
            }),
        }
    }

    /// Copy `buf.len()` bytes from the mapping at `offset`.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MapError> {
        let start = self.check(offset, buf.len())?;
        // SAFETY: `start..start+len` is inside the mapping (checked); `buf` is a distinct
        // exclusive slice in our address space, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(start), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// The address of byte `offset` of the mapping, checked to have `len` bytes after it. Valid
    /// while the mapping lives; stores through it are like [`FileMapping::write_at`].
    pub fn ptr_at(&self, offset: u64, len: usize) -> Result<*mut u8, MapError> {
        let start = self.check(offset, len)?;
        Ok(self.ptr.wrapping_add(start))
    }

    /// Copy `data` into the mapping at `offset` (a store: not durable until flushed and fenced).
    pub fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MapError> {
        let start = self.check(offset, data.len())?;
        // SAFETY: the destination range is inside the writable mapping (checked); `data` is a
        // shared slice elsewhere in memory, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(start), data.len()) };
        Ok(())
    }

    /// Copy `data` into the mapping at `offset` with non-temporal stores, which need no flush
    /// (see [`crate::persist::stream_copy`]: durable after the next fence). Returns false, and
    /// copies nothing, when the range is not 16-byte aligned (the caller writes and flushes).
    pub fn write_stream_at(&self, offset: u64, data: &[u8]) -> Result<bool, MapError> {
        let start = self.check(offset, data.len())?;
        // SAFETY: the destination range is inside the writable mapping (checked); `data` is a
        // shared slice elsewhere in memory, so the ranges do not overlap.
        Ok(unsafe { crate::persist::stream_copy(self.ptr.add(start), data) })
    }

    /// Set `len` bytes at `offset` to `byte`.
    pub fn fill_at(&self, offset: u64, len: usize, byte: u8) -> Result<(), MapError> {
        let start = self.check(offset, len)?;
        // SAFETY: the destination range is inside the writable mapping (checked).
        unsafe { std::ptr::write_bytes(self.ptr.add(start), byte, len) };
        Ok(())
    }

    /// Write back the cache lines of a range with `clwb`/`clflushopt` (see [`crate::persist`]).
    /// Returns false when the CPU has none (use [`FileMapping::msync`]).
    pub fn flush_lines(&self, offset: u64, len: usize) -> Result<bool, MapError> {
        let start = self.check(offset, len)?;
        // SAFETY: the range is inside the mapping (checked). The slice is only used for its
        // address and length by `flush_range`, which does not read the bytes, so a concurrent
        // writer in another process cannot make this a data race in practice.
        let bytes = unsafe { std::slice::from_raw_parts(self.ptr.add(start), len) };
        Ok(crate::persist::flush_range(bytes))
    }

    /// `msync(MS_SYNC)` the OS pages covering a range: durable on a regular file.
    pub fn msync(&self, offset: u64, len: usize) -> Result<(), MapError> {
        let start = self.check(offset, len)?;
        let page = 4096usize;
        let first = start & !(page - 1);
        let end = (start + len).div_ceil(page) * page;
        let end = end.min(self.len.div_ceil(page) * page);
        // SAFETY: `first..end` is page-aligned and within the mapping's pages.
        let rc = unsafe { libc::msync(self.ptr.add(first).cast(), end - first, libc::MS_SYNC) };
        if rc != 0 {
            return Err(MapError::Os {
                op: "msync",
                errno: last_errno(),
            });
        }
        Ok(())
    }

    /// The mapping as 64-bit atomic words (its length rounded down to 8 bytes): the only way
    /// to share mutable state with other processes through a mapping without data races, as
    /// the readers' pin table does (`pmo-pins`). Every access is atomic; what the words mean
    /// and how they are ordered is the caller's.
    pub fn as_atomic_words(&self) -> &[std::sync::atomic::AtomicU64] {
        // SAFETY: the mapping is page aligned (so 8-byte aligned), readable and writable, and
        // lives as long as `&self`; `AtomicU64` has the size and alignment of `u64` and may
        // alias memory other processes change, because every access through it is atomic.
        unsafe {
            std::slice::from_raw_parts(
                self.ptr.cast::<std::sync::atomic::AtomicU64>(),
                self.len / 8,
            )
        }
    }

    /// Base address of the mapping, for code that must copy without bounds checks in a page-fault
    /// handler. Reading or writing through it is the caller's responsibility.
    pub fn base_ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for FileMapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping created in `new`, unmapped once here.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

const TMPFS_MAGIC: i64 = 0x0102_1994;

/// The file system `path` lives on, by name (`ext4`, `tmpfs`, `xfs`, `btrfs`, ...; the magic
/// number in hex for others), for records that compare file systems; `None` if `statfs` fails.
pub fn fs_name(path: &std::path::Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `c` is a valid NUL-terminated path and `st` is writable storage for one statfs.
    if unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)]
    let f_type = st.f_type as i64;
    Some(match f_type {
        TMPFS_MAGIC => "tmpfs".into(),
        0xEF53 => "ext4".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        0x0102_1997 => "v9fs".into(),
        0x794C_7630 => "overlay".into(),
        other => format!("fs-{other:#x}"),
    })
}

/// Whether `path` lives on a memory-backed file system (tmpfs, e.g. `/dev/shm`).
pub fn on_tmpfs(path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `c` is a valid NUL-terminated path and `st` is writable storage for one statfs.
    let rc = unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return false;
    }
    // SAFETY: statfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    // f_type's width differs between libc targets; the cast is a no-op on x86-64.
    #[allow(clippy::unnecessary_cast)]
    let f_type = st.f_type as i64;
    f_type == TMPFS_MAGIC
}

/// Allocate every block of `file` up to `len` bytes now (`posix_fallocate`), so that later
/// stores never wait for the file system to allocate (and, on tmpfs, to zero) a page.
pub fn preallocate(file: &File, len: u64) -> Result<(), MapError> {
    // SAFETY: plain system call on a descriptor we own; no memory is passed.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
    if rc != 0 {
        return Err(MapError::Os {
            op: "posix_fallocate",
            errno: rc,
        });
    }
    Ok(())
}

/// Whether `file` is a character device (device DAX).
pub fn is_char_device(file: &File) -> bool {
    file.metadata()
        .map(|m| m.file_type().is_char_device())
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_bounds() {
        let dir = std::env::temp_dir().join(format!("pmo-os-map-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&dir)
            .unwrap();
        f.set_len(8192).unwrap();
        let m = FileMapping::new(f, MapMode::Shared).unwrap();
        m.write_at(4000, b"hello world").unwrap();
        let mut out = [0u8; 11];
        m.read_at(4000, &mut out).unwrap();
        assert_eq!(&out, b"hello world");
        assert!(matches!(
            m.write_at(8190, b"abc"),
            Err(MapError::OutOfRange { .. })
        ));
        assert!(matches!(
            m.read_at(u64::MAX, &mut out),
            Err(MapError::OutOfRange { .. })
        ));
        m.msync(4000, 11).unwrap();
        drop(m);
        let bytes = std::fs::read(&dir).unwrap();
        assert_eq!(&bytes[4000..4011], b"hello world");
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn empty_file_is_an_error() {
        let p = std::env::temp_dir().join(format!("pmo-os-empty-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        assert!(matches!(
            FileMapping::new(f, MapMode::Shared),
            Err(MapError::BadSize { .. })
        ));
        std::fs::remove_file(&p).unwrap();
    }
}
