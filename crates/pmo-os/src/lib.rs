//! Raw operating-system access for pmo, behind small safe types.
//!
//! This crate is the only place in pmo that calls `mmap`, `msync`, cache-line flush
//! instructions, `fcntl` locks, `userfaultfd` or installs signal handlers. Everything above it
//! (medium, store) is safe Rust.
//!
//! | module    | owns |
//! |-----------|------|
//! | [`map`]   | shared file mappings (`MAP_SHARED`, optionally `MAP_SYNC`) and `msync` |
//! | [`persist`] | CPU cache-line write-back (`clwb` / `clflushopt` / `clflush`) and `sfence`, chosen at run time |
//! | [`lock`]  | open-file-description (OFD) byte-range locks: released by the kernel when the holder dies |
//! | `view`    | fault-driven application views of a PMO: fill on first touch, dirty-page tracking |
//!
//! Glossary: an *OS page* is the kernel's 4 KiB page; pmo's pages are the same size.
#![deny(unsafe_code)]

pub mod lock;
pub mod map;
pub mod persist;
pub mod view;

/// The memory the kernel says is available to new allocations (`MemAvailable` of
/// `/proc/meminfo`), in bytes; `None` where it cannot tell. For refusing, with an error, a
/// request that would otherwise be granted by overcommit and end in the OOM killer.
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// errno of the last failed call, as a plain integer.
pub(crate) fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}
