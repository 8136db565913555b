//! Cache-line write-back and store fences, chosen by CPU flags at run time.
//!
//! `flush_range` writes back every cache line overlapping a byte range; `fence` orders the
//! write-backs before later stores (`sfence`). On real persistent memory with ADR/eADR this is what
//! makes a store durable; on DRAM-emulated persistent memory (`/dev/shm`) it costs the same
//! instructions, which is the point of the emulation.
#![allow(unsafe_code)] // cache-line flush intrinsics are `unsafe` to call.

use std::sync::OnceLock;

/// Size of a CPU cache line on every x86-64 CPU pmo targets.
pub const CACHE_LINE: usize = 64;

/// Which instruction writes a line back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushKind {
    /// `clwb`: write back, keep the line cached (best).
    Clwb,
    /// `clflushopt`: write back and invalidate, weakly ordered.
    ClflushOpt,
    /// `clflush`: write back and invalidate, serialising (slowest).
    Clflush,
    /// Not x86-64: no user-space flush instruction; callers must use `msync`.
    None,
}

impl FlushKind {
    /// Human-readable name.
    pub fn name(self) -> &'static str {
        match self {
            FlushKind::Clwb => "clwb",
            FlushKind::ClflushOpt => "clflushopt",
            FlushKind::Clflush => "clflush",
            FlushKind::None => "none",
        }
    }
}

/// The best flush instruction of this CPU, detected once.
pub fn flush_kind() -> FlushKind {
    static KIND: OnceLock<FlushKind> = OnceLock::new();
    *KIND.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> FlushKind {
    // CPUID leaf 7, sub-leaf 0, EBX: bit 24 = CLWB, bit 23 = CLFLUSHOPT.
    #[allow(unused_unsafe)]
    // SAFETY: CPUID is available on every x86-64 CPU and only reads identification registers.
    let ebx = unsafe { std::arch::x86_64::__cpuid_count(7, 0) }.ebx;
    if ebx & (1 << 24) != 0 {
        FlushKind::Clwb
    } else if ebx & (1 << 23) != 0 {
        FlushKind::ClflushOpt
    } else {
        FlushKind::Clflush
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> FlushKind {
    FlushKind::None
}

/// Write back every cache line overlapping `[ptr, ptr + len)`.
///
/// Returns false when this CPU has no user-space flush instruction (the caller falls back to
/// `msync`). Flushing does not read or write the bytes, so any address range is sound to flush;
/// the range only has to be mapped, which the caller's slice guarantees.
pub fn flush_range(bytes: &[u8]) -> bool {
    let kind = flush_kind();
    if kind == FlushKind::None || bytes.is_empty() {
        return kind != FlushKind::None;
    }
    let start = bytes.as_ptr() as usize & !(CACHE_LINE - 1);
    let end = bytes.as_ptr() as usize + bytes.len();
    let mut line = start;
    while line < end {
        flush_line(kind, line as *const u8);
        line += CACHE_LINE;
    }
    true
}

#[cfg(target_arch = "x86_64")]
fn flush_line(kind: FlushKind, line: *const u8) {
    use std::arch::x86_64::_mm_clflush;
    match kind {
        // SAFETY: `line` lies within a mapped slice given to `flush_range` (rounded down to its
        // cache line, which is mapped too since mappings are page-granular); `clwb` was detected.
        FlushKind::Clwb => unsafe {
            std::arch::asm!("clwb [{0}]", in(reg) line, options(nostack, preserves_flags))
        },
        // SAFETY: as above; `clflushopt` was detected.
        FlushKind::ClflushOpt => unsafe {
            std::arch::asm!("clflushopt [{0}]", in(reg) line, options(nostack, preserves_flags))
        },
        // SAFETY: as above; `clflush` is in every x86-64 CPU.
        FlushKind::Clflush => unsafe { _mm_clflush(line) },
        FlushKind::None => {}
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn flush_line(_kind: FlushKind, _line: *const u8) {}

/// Copy `src` to `dst` with non-temporal (streaming) stores: the bytes go to memory without
/// being read into the cache first and leave no dirty line behind, so no flush is needed
/// (PMDK's `pmem_memcpy` does the same for large copies). Like a flush, the copy is durable
/// once a later [`fence`] (`sfence`) returns, which also orders it before later stores.
///
/// Returns false, and copies nothing, unless `dst` is 16-byte aligned, `src.len()` is a
/// multiple of 16 and the CPU is x86-64 (the caller then stores and flushes as usual).
///
/// # Safety
/// `dst` must be valid for writes of `src.len()` bytes that do not overlap `src`, and nothing
/// else may read or write them meanwhile.
pub unsafe fn stream_copy(dst: *mut u8, src: &[u8]) -> bool {
    if !(dst as usize).is_multiple_of(16) || !src.len().is_multiple_of(16) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let n = src.len() / 16;
        let (s, d) = (src.as_ptr().cast::<__m128i>(), dst.cast::<__m128i>());
        for i in 0..n {
            // SAFETY: SSE2 is baseline on x86-64; `s.add(i)` is inside `src` (unaligned load);
            // `d.add(i)` is inside the caller's range and 16-byte aligned (checked above).
            unsafe { _mm_stream_si128(d.add(i), _mm_loadu_si128(s.add(i))) };
        }
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Order all earlier flushes and stores before later stores (`sfence`).
pub fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no memory-safety preconditions; SSE is baseline on x86-64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_a_flush_instruction_on_x86() {
        #[cfg(target_arch = "x86_64")]
        assert_ne!(flush_kind(), FlushKind::None);
    }

    #[test]
    fn stream_copy_copies_aligned_ranges_and_refuses_others() {
        let src: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
        let mut dst = vec![0u8; 4096 + 64];
        let at = dst.as_ptr().align_offset(64);
        // SAFETY: `dst[at..at + 4096]` is a private buffer that does not overlap `src`.
        let done = unsafe { stream_copy(dst.as_mut_ptr().add(at), &src) };
        fence();
        if cfg!(target_arch = "x86_64") {
            assert!(done);
            assert_eq!(&dst[at..at + 4096], &src[..]);
        }
        // Unaligned destination or a length that is not a multiple of 16: nothing is copied.
        let before = dst.clone();
        // SAFETY: as above, inside `dst`.
        assert!(!unsafe { stream_copy(dst.as_mut_ptr().add(at + 1), &src[..64]) });
        // SAFETY: as above, inside `dst`.
        assert!(!unsafe { stream_copy(dst.as_mut_ptr().add(at), &src[..40]) });
        assert_eq!(dst, before);
    }

    #[test]
    fn flushing_keeps_the_bytes() {
        let mut buf = vec![0u8; 4096 + 17];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = i as u8;
        }
        assert!(flush_range(&buf[5..4100]) || flush_kind() == FlushKind::None);
        fence();
        assert!(buf.iter().enumerate().all(|(i, &b)| b == i as u8));
    }
}
