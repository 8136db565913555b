//! Raw OS and CPU access of the allocator: page protection, protection keys (MPK) and the CPUID
//! bits that say whether they are usable, the current CPU, anonymous and file mappings, and
//! glibc `malloc` for the volatile baseline.
//!
//! Owns: every system call and every inline-assembly instruction of the crate, so the rest of
//! the crate stays safe code. Each `unsafe` block states what makes it sound.
//!
//! Why unsafe is needed here: the calls hand raw addresses to the kernel (`mprotect`,
//! `pkey_mprotect`, `mmap`, `munmap`), execute `RDPKRU`/`WRPKRU`/`CPUID`, and call C `malloc`.
#![allow(unsafe_code)]

use std::io;
use std::ptr::NonNull;

/// Page access for [`protect`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Loads only.
    ReadOnly,
    /// Loads and stores.
    ReadWrite,
}

impl Access {
    fn prot(self) -> libc::c_int {
        match self {
            Access::ReadOnly => libc::PROT_READ,
            Access::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        }
    }
}

/// Change the protection of the OS pages `[addr, addr + len)`.
///
/// `mprotect` on pages the caller does not own could break other code, so callers pass only
/// pages of the heap's metadata; the kernel rejects misaligned or unmapped ranges with an error.
pub fn protect(addr: usize, len: usize, access: Access) -> io::Result<()> {
    // SAFETY: mprotect only changes page permissions; it never reads or writes memory through
    // the pointer. An invalid range makes the kernel return an error, reported below.
    let rc = unsafe { libc::mprotect(addr as *mut libc::c_void, len, access.prot()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Allocate a protection key whose initial rights deny writes (`PKEY_DISABLE_WRITE`).
pub fn pkey_alloc_write_disabled() -> io::Result<u32> {
    const PKEY_DISABLE_WRITE: libc::c_ulong = 2;
    // SAFETY: pkey_alloc takes two integers and touches no user memory.
    let rc = unsafe { libc::syscall(libc::SYS_pkey_alloc, 0 as libc::c_ulong, PKEY_DISABLE_WRITE) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as u32)
    }
}

/// Release a protection key.
pub fn pkey_free(key: u32) -> io::Result<()> {
    // SAFETY: pkey_free takes an integer and touches no user memory.
    let rc = unsafe { libc::syscall(libc::SYS_pkey_free, key as libc::c_ulong) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Tag the OS pages `[addr, addr + len)` with protection key `key` and read-write page rights.
pub fn pkey_protect(addr: usize, len: usize, key: u32) -> io::Result<()> {
    // SAFETY: as for mprotect, the kernel only changes page attributes and validates the range.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pkey_mprotect,
            addr as libc::c_ulong,
            len as libc::c_ulong,
            (libc::PROT_READ | libc::PROT_WRITE) as libc::c_ulong,
            key as libc::c_ulong,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// PKU usable according to CPUID.(EAX=7,ECX=0):ECX: bit 3 (PKU) and bit 4 (OSPKE, the OS set CR4.PKE).
pub const fn pku_usable_from_cpuid_ecx(ecx: u32) -> bool {
    const PKU: u32 = 1 << 3;
    const OSPKE: u32 = 1 << 4;
    ecx & (PKU | OSPKE) == (PKU | OSPKE)
}

/// Does the CPU support protection keys and has the OS enabled them (CPUID.7.0:ECX bits 3, 4)?
#[cfg(target_arch = "x86_64")]
pub fn cpu_has_pku() -> bool {
    use std::arch::x86_64::__cpuid_count;
    // SAFETY: CPUID is available on every x86_64 CPU; leaf 0 reports the highest leaf.
    #[allow(unused_unsafe)]
    let max_leaf = unsafe { __cpuid_count(0, 0) }.eax;
    if max_leaf < 7 {
        return false;
    }
    // SAFETY: leaf 7 exists (checked above); CPUID has no side effects.
    #[allow(unused_unsafe)]
    let ecx = unsafe { __cpuid_count(7, 0) }.ecx;
    pku_usable_from_cpuid_ecx(ecx)
}

/// Protection keys are an x86_64 feature.
#[cfg(not(target_arch = "x86_64"))]
pub fn cpu_has_pku() -> bool {
    false
}

/// Read this thread's PKRU register.
///
/// # Safety
/// The CPU must support protection keys and the OS must have enabled them ([`cpu_has_pku`]);
/// otherwise `RDPKRU` raises #UD.
#[cfg(target_arch = "x86_64")]
pub unsafe fn rdpkru() -> u32 {
    let eax: u32;
    // SAFETY: the caller guarantees OSPKE; RDPKRU reads PKRU into EAX, needs ECX = 0, writes EDX.
    unsafe {
        std::arch::asm!(".byte 0x0f, 0x01, 0xee", in("ecx") 0u32, lateout("eax") eax, lateout("edx") _,
            options(nomem, nostack, preserves_flags));
    }
    eax
}

/// Write this thread's PKRU register.
///
/// # Safety
/// As for [`rdpkru`]. The value must keep key 0 accessible (bits 0-1 clear), or the thread
/// loses access to ordinary memory.
#[cfg(target_arch = "x86_64")]
pub unsafe fn wrpkru(value: u32) {
    // SAFETY: the caller guarantees OSPKE and a value that keeps key 0 accessible; WRPKRU
    // needs ECX = EDX = 0. It orders later memory accesses, hence no `nomem`.
    unsafe {
        std::arch::asm!(".byte 0x0f, 0x01, 0xef", in("eax") value, in("ecx") 0u32, in("edx") 0u32,
            options(nostack, preserves_flags));
    }
}

/// Protection keys do not exist off x86_64.
///
/// # Safety
/// Never call: [`cpu_has_pku`] is false here.
#[cfg(not(target_arch = "x86_64"))]
pub unsafe fn rdpkru() -> u32 {
    0
}

/// Protection keys do not exist off x86_64.
///
/// # Safety
/// Never call: [`cpu_has_pku`] is false here.
#[cfg(not(target_arch = "x86_64"))]
pub unsafe fn wrpkru(_value: u32) {}

/// The CPU this thread runs on, if the kernel says.
#[inline]
pub fn current_cpu() -> Option<u32> {
    // SAFETY: sched_getcpu takes no arguments and only returns a number.
    let cpu = unsafe { libc::sched_getcpu() };
    (cpu >= 0).then_some(cpu as u32)
}

/// Map `len` bytes of zeroed anonymous private memory.
pub fn map_anonymous(len: usize) -> io::Result<NonNull<u8>> {
    map(
        len,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
        -1,
    )
}

/// Map `len` bytes of the file `fd` shared.
pub fn map_file_shared(fd: libc::c_int, len: usize) -> io::Result<NonNull<u8>> {
    map(len, libc::MAP_SHARED, fd)
}

fn map(len: usize, flags: libc::c_int, fd: libc::c_int) -> io::Result<NonNull<u8>> {
    // SAFETY: a new mapping at an address the kernel chooses cannot alias existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))
}

/// Unmap a mapping made by [`map_anonymous`] or [`map_file_shared`].
///
/// # Safety
/// `[ptr, ptr + len)` must be exactly one mapping made by this module, and no reference into it
/// may be used afterwards.
pub unsafe fn unmap(ptr: NonNull<u8>, len: usize) {
    // SAFETY: the caller guarantees the range is ours and unused from now on.
    unsafe {
        libc::munmap(ptr.as_ptr().cast(), len);
    }
}

/// glibc `malloc` (the volatile baseline of the benchmarks).
pub fn libc_malloc(size: usize) -> Option<NonNull<u8>> {
    // SAFETY: malloc has no preconditions.
    NonNull::new(unsafe { libc::malloc(size) }.cast::<u8>())
}

/// glibc `free`.
///
/// # Safety
/// `ptr` must come from [`libc_malloc`] and not have been freed.
pub unsafe fn libc_free(ptr: NonNull<u8>) {
    // SAFETY: guaranteed by the caller.
    unsafe { libc::free(ptr.as_ptr().cast()) }
}

/// CPU time this thread has consumed, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuid_detection_needs_both_bits() {
        assert!(!pku_usable_from_cpuid_ecx(0));
        assert!(
            !pku_usable_from_cpuid_ecx(1 << 3),
            "PKU without OSPKE is not usable"
        );
        assert!(!pku_usable_from_cpuid_ecx(1 << 4));
        assert!(pku_usable_from_cpuid_ecx((1 << 3) | (1 << 4) | 0xFFFF_0000));
    }
}
