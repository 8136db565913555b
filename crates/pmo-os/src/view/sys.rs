//! Raw system-call layer of the view module: the userfaultfd and `PAGEMAP_SCAN` ABI, and thin
//! wrappers around `mmap`, `mprotect`, `madvise`, `ioctl`, `memfd_create`, the monotonic clock and
//! `write(2)` to stderr.
//!
//! Owns: every `libc` call of the view module except installing the fault handler with
//! `sigaction` (which lives in [`super::registry`]); resetting a signal to its default action
//! and raising it (for the handler's chain and for [`super::fault::fatal`]) are here. The kernel
//! structures are copied from `<linux/userfaultfd.h>` and `<linux/fs.h>` (Linux 6.7+ for `PAGEMAP_SCAN` and `UFFD_FEATURE_WP_ASYNC`); their sizes are
//! checked at compile time against the ioctl numbers that encode them.
//!
//! Invariant: every function here that can be reached from a signal handler
//! (`uffd_copy`, `mprotect`, `now_ns`, `write_stderr`, `errno`, `reset_to_default`,
//! `raise_unblocked`) is async-signal-safe: a system
//! call and nothing else, no allocation, no lock.
#![allow(unsafe_code)] // system calls and ioctls on raw addresses are `unsafe` to call.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use libc::{c_int, c_void};

// ---- userfaultfd ABI (<linux/userfaultfd.h>) ----

/// `UFFD_API`: the only API version.
pub const UFFD_API: u64 = 0xAA;
/// `userfaultfd(2)` flag: handle only faults from user mode (allowed without privilege).
pub const UFFD_USER_MODE_ONLY: c_int = 1;
/// Deliver SIGBUS to the faulting thread instead of queueing a message.
pub const UFFD_FEATURE_SIGBUS: u64 = 1 << 7;
/// Write-protect markers on unpopulated PTEs (needed by `PAGEMAP_SCAN` on anonymous memory).
pub const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
/// The kernel resolves write-protect faults itself (no message), leaving the PTE "written".
pub const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
/// `UFFDIO_REGISTER` mode: missing-page faults.
pub const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;
/// `UFFDIO_REGISTER` mode: write-protect faults.
pub const UFFDIO_REGISTER_MODE_WP: u64 = 2;
/// `UFFDIO_COPY` mode: do not wake waiters (there are none with `UFFD_FEATURE_SIGBUS`).
pub const UFFDIO_COPY_MODE_DONTWAKE: u64 = 1;
/// `UFFDIO_COPY` mode: install the page write-protected.
pub const UFFDIO_COPY_MODE_WP: u64 = 2;

/// `struct uffdio_api`.
#[repr(C)]
#[derive(Default)]
pub struct UffdioApi {
    pub api: u64,
    pub features: u64,
    pub ioctls: u64,
}

/// `struct uffdio_range`.
#[repr(C)]
#[derive(Default)]
pub struct UffdioRange {
    pub start: u64,
    pub len: u64,
}

/// `struct uffdio_register`.
#[repr(C)]
#[derive(Default)]
pub struct UffdioRegister {
    pub range: UffdioRange,
    pub mode: u64,
    pub ioctls: u64,
}

/// `UFFDIO_WRITEPROTECT` mode: protect (without it: un-protect).
pub const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1;
/// `UFFDIO_WRITEPROTECT` mode: do not wake waiters (there are none with `UFFD_FEATURE_SIGBUS`).
pub const UFFDIO_WRITEPROTECT_MODE_DONTWAKE: u64 = 2;

/// `struct uffdio_writeprotect`.
#[repr(C)]
#[derive(Default)]
pub struct UffdioWriteprotect {
    pub range: UffdioRange,
    pub mode: u64,
}

/// `struct uffdio_copy`.
#[repr(C)]
#[derive(Default)]
pub struct UffdioCopy {
    pub dst: u64,
    pub src: u64,
    pub len: u64,
    pub mode: u64,
    pub copy: i64,
}

// ---- PAGEMAP_SCAN ABI (<linux/fs.h>) ----

/// Write-protect the pages that match (atomically with reporting them).
pub const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
/// Fail with EPERM unless every VMA of the range is registered for async write-protect.
pub const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;
/// Page category: written since it was last write-protected.
pub const PAGE_IS_WRITTEN: u64 = 1 << 1;
/// Page category: present in memory.
pub const PAGE_IS_PRESENT: u64 = 1 << 3;
/// Page category: swapped out.
pub const PAGE_IS_SWAPPED: u64 = 1 << 4;

/// `struct pm_scan_arg`.
#[repr(C)]
#[derive(Default)]
pub struct PmScanArg {
    pub size: u64,
    pub flags: u64,
    pub start: u64,
    pub end: u64,
    pub walk_end: u64,
    pub vec: u64,
    pub vec_len: u64,
    pub max_pages: u64,
    pub category_inverted: u64,
    pub category_mask: u64,
    pub category_anyof_mask: u64,
    pub return_mask: u64,
}

/// `struct page_region`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
pub struct PageRegion {
    pub start: u64,
    pub end: u64,
    pub categories: u64,
}

const fn iowr(kind: u8, nr: u8, size: usize) -> u64 {
    // _IOC(_IOC_READ|_IOC_WRITE, type, nr, size) on x86-64 / arm64 / riscv.
    (3u64 << 30) | ((size as u64) << 16) | ((kind as u64) << 8) | nr as u64
}

pub const UFFDIO_API: u64 = iowr(0xAA, 0x3F, std::mem::size_of::<UffdioApi>());
pub const UFFDIO_REGISTER: u64 = iowr(0xAA, 0x00, std::mem::size_of::<UffdioRegister>());
pub const UFFDIO_COPY: u64 = iowr(0xAA, 0x03, std::mem::size_of::<UffdioCopy>());
pub const UFFDIO_WRITEPROTECT: u64 = iowr(0xAA, 0x06, std::mem::size_of::<UffdioWriteprotect>());
pub const PAGEMAP_SCAN: u64 = iowr(b'f', 16, std::mem::size_of::<PmScanArg>());

const _: () = assert!(std::mem::size_of::<UffdioApi>() == 24);
const _: () = assert!(std::mem::size_of::<UffdioRegister>() == 32);
const _: () = assert!(std::mem::size_of::<UffdioCopy>() == 40);
const _: () = assert!(std::mem::size_of::<PmScanArg>() == 96);
const _: () = assert!(std::mem::size_of::<PageRegion>() == 24);
const _: () = assert!(UFFDIO_API == 0xc018_aa3f);
const _: () = assert!(UFFDIO_COPY == 0xc028_aa03);
const _: () = assert!(UFFDIO_WRITEPROTECT == 0xc018_aa06);
const _: () = assert!(PAGEMAP_SCAN == 0xc060_6610);

/// errno of the last failed call (async-signal-safe).
pub fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

/// Overwrite errno (used to restore it at the end of a signal handler).
pub fn set_errno(value: i32) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = value }
}

/// An `ioctl` whose argument is a kernel structure passed by pointer. Returns errno on failure.
///
/// # Safety
/// `arg` must be the structure `request` expects, and any addresses inside it must be valid for
/// what the kernel does with them.
pub unsafe fn ioctl<T>(fd: RawFd, request: u64, arg: &mut T) -> Result<(), i32> {
    // SAFETY: forwarded to the caller.
    let r = unsafe { libc::ioctl(fd, request as libc::Ioctl, arg as *mut T as *mut c_void) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// `PAGEMAP_SCAN` returns the number of regions written: an `ioctl` that keeps the return value.
pub fn pagemap_scan(
    fd: RawFd,
    arg: &mut PmScanArg,
    regions: &mut [PageRegion],
) -> Result<usize, i32> {
    arg.size = std::mem::size_of::<PmScanArg>() as u64;
    arg.vec = regions.as_mut_ptr() as u64;
    arg.vec_len = regions.len() as u64;
    // SAFETY: `arg` is a pm_scan_arg whose vec/vec_len describe `regions`, which we borrow
    // mutably for the call; the kernel writes at most vec_len regions there.
    let r = unsafe {
        libc::ioctl(
            fd,
            PAGEMAP_SCAN as libc::Ioctl,
            arg as *mut PmScanArg as *mut c_void,
        )
    };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r as usize)
    }
}

/// Open a userfaultfd with `flags` (plus O_CLOEXEC | O_NONBLOCK).
pub fn userfaultfd(extra_flags: c_int) -> Result<OwnedFd, i32> {
    // SAFETY: plain system call with integer arguments.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_userfaultfd,
            libc::O_CLOEXEC | libc::O_NONBLOCK | extra_flags,
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: the kernel returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Open `/dev/userfaultfd` and ask it for a userfaultfd (the path for unprivileged users that
/// were given access to the device).
pub fn userfaultfd_from_device() -> Result<OwnedFd, i32> {
    const USERFAULTFD_IOC_NEW: u64 = 0xAA00; // _IO(0xAA, 0x00)
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/userfaultfd")
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    // SAFETY: USERFAULTFD_IOC_NEW takes its flags by value and returns a new descriptor.
    let fd = unsafe {
        libc::ioctl(
            dev.as_raw_fd(),
            USERFAULTFD_IOC_NEW as libc::Ioctl,
            libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `memfd_create(name, MFD_CLOEXEC)`.
pub fn memfd(name: &std::ffi::CStr) -> Result<OwnedFd, i32> {
    // SAFETY: `name` is a valid NUL-terminated string.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `ftruncate`.
pub fn ftruncate(fd: RawFd, len: usize) -> Result<(), i32> {
    // SAFETY: plain system call on a descriptor we own.
    if unsafe { libc::ftruncate(fd, len as libc::off_t) } < 0 {
        return Err(errno());
    }
    Ok(())
}

/// Free and zero the byte range of a memfd (`fallocate(PUNCH_HOLE | KEEP_SIZE)`).
pub fn punch_hole(fd: RawFd, offset: usize, len: usize) -> Result<(), i32> {
    // SAFETY: plain system call; it changes file contents only, which only our own mappings see.
    let r = unsafe {
        libc::fallocate(
            fd,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset as libc::off_t,
            len as libc::off_t,
        )
    };
    if r < 0 {
        return Err(errno());
    }
    Ok(())
}

/// Outcome of a placement request.
pub enum MapError {
    /// The range (or part of it) is already mapped.
    AddressInUse,
    /// Any other failure, with errno.
    Os(i32),
}

/// `mmap` a new mapping. With `fixed`, the kernel must place it exactly at `hint`
/// (`MAP_FIXED_NOREPLACE`), and a taken range is `MapError::AddressInUse`.
pub fn map(
    hint: usize,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: RawFd,
    fixed: bool,
) -> Result<usize, MapError> {
    map_at(hint, len, prot, flags, fd, 0, fixed)
}

/// [`map`] of the file range starting at byte `offset` (page aligned).
pub fn map_at(
    hint: usize,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: RawFd,
    offset: u64,
    fixed: bool,
) -> Result<usize, MapError> {
    let offset = libc::off_t::try_from(offset).map_err(|_| MapError::Os(libc::EINVAL))?;
    let flags = if fixed {
        flags | libc::MAP_FIXED_NOREPLACE
    } else {
        flags
    };
    // SAFETY: creating a new mapping; with MAP_FIXED_NOREPLACE the kernel refuses to replace any
    // existing mapping, and without a fixed flag `hint` is only a hint, so no existing memory is
    // affected.
    let p = unsafe { libc::mmap(hint as *mut c_void, len, prot, flags, fd, offset) };
    if p == libc::MAP_FAILED {
        let e = errno();
        return Err(if e == libc::EEXIST {
            MapError::AddressInUse
        } else {
            MapError::Os(e)
        });
    }
    let addr = p as usize;
    if fixed && addr != hint {
        // Kernels before 4.17 ignore MAP_FIXED_NOREPLACE and treat it as a hint.
        // SAFETY: we just created this mapping and nobody else knows its address.
        unsafe { libc::munmap(p, len) };
        return Err(MapError::AddressInUse);
    }
    Ok(addr)
}

/// `munmap`.
///
/// # Safety
/// `[addr, addr + len)` must be a mapping owned by the caller that nothing references any more.
pub unsafe fn unmap(addr: usize, len: usize) {
    // SAFETY: forwarded to the caller. A failure would leave a mapping behind, which cannot harm
    // memory safety, so the result is ignored.
    unsafe { libc::munmap(addr as *mut c_void, len) };
}

/// Move the mapping `[from, from + len)`, its pages and their contents, to `to`, over the
/// caller's own mapping there (`mremap(MREMAP_MAYMOVE | MREMAP_FIXED)`): no page is allocated,
/// zeroed or faulted, and `from` is left unmapped. On failure nothing moved.
///
/// # Safety
/// Both ranges must be mappings owned by the caller that nothing references any more (the
/// mapping at `to` is replaced; `from` goes away).
pub unsafe fn move_mapping(from: usize, len: usize, to: usize) -> Result<(), i32> {
    // SAFETY: forwarded to the caller: both ranges are the caller's own, unreferenced.
    let p = unsafe {
        libc::mremap(
            from as *mut c_void,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            to as *mut c_void,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(errno());
    }
    if p as usize != to {
        // Not where asked (cannot happen with MREMAP_FIXED): give the mapping back.
        // SAFETY: the mapping just moved, ours alone.
        unsafe { libc::munmap(p, len) };
        return Err(libc::EINVAL);
    }
    Ok(())
}

/// `mprotect` (async-signal-safe).
///
/// # Safety
/// `[addr, addr + len)` must lie inside a view mapping owned by the caller; changing its
/// protection must not invalidate references the program holds (views are only accessed by raw
/// pointers).
pub unsafe fn mprotect(addr: usize, len: usize, prot: c_int) -> Result<(), i32> {
    // SAFETY: forwarded to the caller.
    if unsafe { libc::mprotect(addr as *mut c_void, len, prot) } < 0 {
        return Err(errno());
    }
    Ok(())
}

/// `madvise`.
///
/// # Safety
/// As for [`mprotect`]; `MADV_DONTNEED` discards contents, which the caller must intend.
pub unsafe fn madvise(addr: usize, len: usize, advice: c_int) -> Result<(), i32> {
    // SAFETY: forwarded to the caller.
    if unsafe { libc::madvise(addr as *mut c_void, len, advice) } < 0 {
        return Err(errno());
    }
    Ok(())
}

/// `mbind(MPOL_BIND)` of `[addr, addr + len)` to NUMA node `node`: pages allocated there from
/// now on come from that node.
///
/// # Safety
/// `[addr, addr + len)` must be a mapping owned by the caller. A policy changes no contents.
pub unsafe fn mbind_node(addr: usize, len: usize, node: u32) -> Result<(), i32> {
    const WORDS: usize = 16; // nodes 0..1024
    let bits = std::mem::size_of::<libc::c_ulong>() * 8;
    if node as usize >= WORDS * bits {
        return Err(libc::EINVAL);
    }
    let mut mask = [0 as libc::c_ulong; WORDS];
    mask[node as usize / bits] = 1 << (node as usize % bits);
    // SAFETY: forwarded to the caller; `mask` outlives the call and holds `WORDS * bits` bits.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr as *mut c_void,
            len,
            libc::MPOL_BIND,
            mask.as_ptr(),
            (WORDS * bits) as libc::c_ulong,
            0 as libc::c_uint,
        )
    };
    if r < 0 {
        return Err(errno());
    }
    Ok(())
}

/// `munlock`.
///
/// # Safety
/// `[addr, addr + len)` must be a mapping owned by the caller.
pub unsafe fn munlock(addr: usize, len: usize) -> Result<(), i32> {
    // SAFETY: forwarded to the caller; unlocking changes no contents.
    if unsafe { libc::munlock(addr as *const c_void, len) } < 0 {
        return Err(errno());
    }
    Ok(())
}

/// Monotonic clock in nanoseconds (async-signal-safe: vDSO `clock_gettime`).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Write all of `bytes` to stderr with `write(2)` only (async-signal-safe).
pub fn write_stderr(bytes: &[u8]) {
    let mut rest = bytes;
    let mut attempts = 0;
    while !rest.is_empty() && attempts < 64 {
        attempts += 1;
        // SAFETY: `rest` is a valid readable buffer of `rest.len()` bytes.
        let n = unsafe { libc::write(2, rest.as_ptr() as *const c_void, rest.len()) };
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return;
        }
        rest = &rest[n as usize..];
    }
}

/// `getpid` (async-signal-safe).
pub fn getpid() -> u32 {
    // SAFETY: plain system call without arguments.
    unsafe { libc::getpid() as u32 }
}

/// `sched_yield` (async-signal-safe), used while another thread finishes a page transition.
pub fn yield_cpu() {
    // SAFETY: plain system call without arguments.
    unsafe { libc::sched_yield() };
}

/// Reset `sig` to its default action (`SIG_DFL`, empty mask) (async-signal-safe).
pub fn reset_to_default(sig: c_int) {
    // SAFETY: zeroed sigaction = SIG_DFL with an empty mask; installing it is always valid.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &act, std::ptr::null_mut());
    }
}

/// Unblock `sig` for this thread and send it to this thread (async-signal-safe).
pub fn raise_unblocked(sig: c_int) {
    // SAFETY: sigset manipulation on a local set, then pthread_sigmask and raise, all
    // async-signal-safe.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
}

/// The running kernel's `(major, minor)` version from `uname(2)`, if it parses.
pub fn kernel_version() -> Option<(u32, u32)> {
    // SAFETY: `utsname` is plain data; uname fills it (NUL-terminated fields) or fails.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    // SAFETY: the kernel NUL-terminates `release` inside its array.
    let release = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }
        .to_str()
        .ok()?;
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}
