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

/// errno of the last failed call, as a plain integer.
pub(crate) fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}
