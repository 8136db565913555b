//! Errors of the C API and their two encodings: an errno for the source-compatible calls
//! (`attach`, `pmo_create`, ...) and a `PMO_E_*` code for the `pmo_*_ex` calls.
//!
//! Invariant: every `PMO_E_*` code lies in `[PMO_E_LAST, PMO_E_FIRST]`, a negative range no errno
//! can take (errnos are positive), so one `pmo_strerror` serves both. The values are part of the
//! ABI and mirrored in `include/pmo.h`; never renumber them.

use pmo_heap::{HeapError, PmoHeapError};
use pmo_store::StoreError;

/// Success.
pub const PMO_SUCCESS: i32 = 0;
/// Lowest-magnitude code of the pmo range.
pub const PMO_E_FIRST: i32 = -1001;
/// Wrong key (errno `EACCES`).
pub const PMO_E_WRONG_KEY: i32 = -1001;
/// No PMO of that name (errno `ENOENT`).
pub const PMO_E_NOT_FOUND: i32 = -1002;
/// A PMO of that name already exists (errno `EEXIST`).
pub const PMO_E_EXISTS: i32 = -1003;
/// The pool or its namespace is full (errno `ENOSPC`).
pub const PMO_E_NO_SPACE: i32 = -1004;
/// Attached in a conflicting mode by another user, or the pool still has attachments (errno `EBUSY`).
pub const PMO_E_BUSY: i32 = -1005;
/// The PMO's stable address range is already mapped in this process (errno `EBUSY`).
pub const PMO_E_ADDRESS_IN_USE: i32 = -1006;
/// Invalid argument (errno `EINVAL`).
pub const PMO_E_INVALID: i32 = -1007;
/// The PMO is attached read-only (errno `EACCES`).
pub const PMO_E_READ_ONLY: i32 = -1008;
/// The pool file is not a pmo pool (errno `EINVAL`).
pub const PMO_E_NOT_A_POOL: i32 = -1009;
/// The pool or a PMO failed an integrity check (errno `EIO`).
pub const PMO_E_CORRUPT: i32 = -1010;
/// The pool is unusable after an earlier persistence failure (errno `EIO`).
pub const PMO_E_POISONED: i32 = -1011;
/// I/O or operating-system failure (errno `EIO`, or the OS's own errno when known).
pub const PMO_E_IO: i32 = -1012;
/// The address is not inside any attachment of this process (errno `EINVAL`).
pub const PMO_E_NOT_ATTACHED: i32 = -1013;
/// Too many live attachments in this process (errno `EMFILE`).
pub const PMO_E_LIMIT: i32 = -1014;
/// Internal error: a bug in libpmo was caught at the API boundary (errno `EIO`).
pub const PMO_E_INTERNAL: i32 = -1015;
/// The PMO holds no heap (or one of an unknown format version) (errno `EINVAL`).
pub const PMO_E_NOT_A_HEAP: i32 = -1016;
/// `pmo_p_free`/`pmo_p_realloc`/`pmo_p_sizeof` of a pointer that is not a live block: invalid, double or
/// interior (errno `EINVAL`).
pub const PMO_E_BAD_FREE: i32 = -1017;
/// The heap has no free block of that size (errno `ENOMEM`).
pub const PMO_E_HEAP_FULL: i32 = -1018;
/// The scheme (or feature) is not implemented by this build, or the pool is too old for it
/// (errno `ENOTSUP`).
pub const PMO_E_UNSUPPORTED: i32 = -1019;
/// Highest-magnitude code of the pmo range.
pub const PMO_E_LAST: i32 = -1019;

/// Everything a C API call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CapiError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("address {0:#x} is not inside any attached PMO of this process")]
    NotAttached(usize),
    #[error("too many live attachments in this process (the limit is {0})")]
    TooManyAttachments(usize),
    #[error("the pool still has {0} live attachment(s) in this process; detach them first")]
    PoolBusy(usize),
    #[error("{op}: {source}")]
    Io { op: String, source: std::io::Error },
    #[error("internal error in libpmo: {0}")]
    Internal(String),
    #[error(transparent)]
    Heap(#[from] PmoHeapError),
    #[error("{0:#x} is not a block of any heap attached in this process")]
    NotABlock(usize),
    #[error("{what} overflows size_t")]
    Overflow { what: &'static str },
    #[error("PMO '{0}' is attached read-only by this process: an attachment is not upgraded to read-write (detach it first)")]
    NotUpgraded(String),
}

impl From<HeapError> for CapiError {
    fn from(e: HeapError) -> CapiError {
        CapiError::Heap(PmoHeapError::Heap(e))
    }
}

/// The code of an allocator error.
fn heap_code(e: &HeapError) -> i32 {
    match e {
        HeapError::BadMagic | HeapError::BadVersion(_) => PMO_E_NOT_A_HEAP,
        HeapError::BadChecksum | HeapError::BadGeometry(_) | HeapError::Corrupt { .. } => {
            PMO_E_CORRUPT
        }
        HeapError::OutOfSpace { .. } | HeapError::TooLarge { .. } => PMO_E_HEAP_FULL,
        HeapError::NotInHeap
        | HeapError::DoubleFree
        | HeapError::InteriorPointer
        | HeapError::NotAllocated => PMO_E_BAD_FREE,
        HeapError::BadAlignment(_)
        | HeapError::InvalidOptions(_)
        | HeapError::Misaligned(_)
        | HeapError::RegionTooSmall { .. }
        | HeapError::BadHeapPtr(_)
        | HeapError::ProtectionUnavailable(_) => PMO_E_INVALID,
        HeapError::Poisoned => PMO_E_POISONED,
        _ => PMO_E_IO,
    }
}

/// The errno of a `PMO_E_*` code that has one errno.
fn code_errno(code: i32) -> i32 {
    match code {
        PMO_E_NOT_A_HEAP | PMO_E_BAD_FREE | PMO_E_INVALID => libc::EINVAL,
        PMO_E_HEAP_FULL => libc::ENOMEM,
        PMO_E_UNSUPPORTED => libc::ENOTSUP,
        _ => libc::EIO,
    }
}

impl CapiError {
    fn store_code(e: &StoreError) -> i32 {
        match e {
            StoreError::WrongKey(_) => PMO_E_WRONG_KEY,
            StoreError::NotFound(_) | StoreError::NoPool { .. } => PMO_E_NOT_FOUND,
            StoreError::Exists(_) | StoreError::PoolExists(_) => PMO_E_EXISTS,
            StoreError::NoSpace(_) | StoreError::PinLimit { .. } => PMO_E_NO_SPACE,
            StoreError::Busy { .. } => PMO_E_BUSY,
            StoreError::AddressInUse { .. } => PMO_E_ADDRESS_IN_USE,
            StoreError::Invalid(_) => PMO_E_INVALID,
            StoreError::ReadOnly(_) => PMO_E_READ_ONLY,
            StoreError::NotAPool(_) => PMO_E_NOT_A_POOL,
            StoreError::Corrupt(_)
            | StoreError::Integrity { .. }
            | StoreError::IntegrityPmo { .. } => PMO_E_CORRUPT,
            StoreError::Unsupported(_) => PMO_E_UNSUPPORTED,
            StoreError::Poisoned => PMO_E_POISONED,
            _ => PMO_E_IO,
        }
    }

    fn store_errno(e: &StoreError) -> i32 {
        match e {
            StoreError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            e => e.errno(),
        }
    }

    /// The `PMO_E_*` code.
    pub fn code(&self) -> i32 {
        match self {
            CapiError::Store(e) => CapiError::store_code(e),
            CapiError::Invalid(_) => PMO_E_INVALID,
            CapiError::NotAttached(_) => PMO_E_NOT_ATTACHED,
            CapiError::TooManyAttachments(_) => PMO_E_LIMIT,
            CapiError::PoolBusy(_) | CapiError::NotUpgraded(_) => PMO_E_BUSY,
            CapiError::Io { .. } => PMO_E_IO,
            CapiError::Internal(_) => PMO_E_INTERNAL,
            CapiError::Heap(PmoHeapError::Store(e)) => CapiError::store_code(e),
            CapiError::Heap(PmoHeapError::Heap(e)) => heap_code(e),
            CapiError::Heap(_) => PMO_E_INVALID,
            CapiError::NotABlock(_) => PMO_E_BAD_FREE,
            CapiError::Overflow { .. } => PMO_E_HEAP_FULL,
        }
    }

    /// The errno the source-compatible calls set.
    pub fn errno(&self) -> i32 {
        match self {
            CapiError::Store(e) | CapiError::Heap(PmoHeapError::Store(e)) => {
                CapiError::store_errno(e)
            }
            CapiError::Heap(PmoHeapError::Heap(HeapError::Map(source)))
            | CapiError::Heap(PmoHeapError::Heap(HeapError::Protect(source))) => {
                source.raw_os_error().unwrap_or(libc::EIO)
            }
            CapiError::Heap(_) => code_errno(self.code()),
            CapiError::NotABlock(_) => libc::EINVAL,
            CapiError::Overflow { .. } => libc::ENOMEM,
            CapiError::Invalid(_) | CapiError::NotAttached(_) => libc::EINVAL,
            CapiError::TooManyAttachments(_) => libc::EMFILE,
            CapiError::PoolBusy(_) | CapiError::NotUpgraded(_) => libc::EBUSY,
            CapiError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            CapiError::Internal(_) => libc::EIO,
        }
    }
}

/// Static description of a code: a `PMO_E_*` code, 0, or `None` (the caller falls back to
/// `strerror` for errnos).
pub fn describe(code: i32) -> Option<&'static std::ffi::CStr> {
    Some(match code {
        PMO_SUCCESS => c"success",
        PMO_E_WRONG_KEY => c"wrong key",
        PMO_E_NOT_FOUND => c"no such PMO (or no such pool file)",
        PMO_E_EXISTS => c"a PMO of that name already exists",
        PMO_E_NO_SPACE => c"the pool or its namespace is full",
        PMO_E_BUSY => {
            c"attached in a conflicting mode by another user (or the pool has attachments)"
        }
        PMO_E_ADDRESS_IN_USE => c"the PMO's stable address range is already mapped in this process",
        PMO_E_INVALID => c"invalid argument",
        PMO_E_READ_ONLY => c"the PMO is attached read-only",
        PMO_E_NOT_A_POOL => c"not a pmo pool",
        PMO_E_CORRUPT => c"integrity check failed: the pool or PMO is corrupted",
        PMO_E_POISONED => c"the pool is unusable after an earlier persistence failure",
        PMO_E_IO => c"I/O or operating-system error",
        PMO_E_NOT_ATTACHED => c"the address is not inside any attached PMO",
        PMO_E_LIMIT => c"too many live attachments in this process",
        PMO_E_INTERNAL => c"internal error in libpmo",
        PMO_E_NOT_A_HEAP => c"the PMO holds no heap (or one of an unknown format version)",
        PMO_E_BAD_FREE => c"not a live heap block (an invalid, double or interior pointer)",
        PMO_E_HEAP_FULL => c"the heap has no free block of that size",
        PMO_E_UNSUPPORTED => {
            c"not supported by this build (scheme or feature), or the pool is too old for it"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_in_range_has_a_description() {
        for code in PMO_E_LAST..=PMO_E_FIRST {
            let d = describe(code).expect("described");
            assert!(!d.to_bytes().is_empty(), "code {code}");
        }
        assert!(describe(PMO_E_LAST - 1).is_none());
        assert!(describe(PMO_E_FIRST + 1).is_none());
        assert!(describe(libc::ENOENT).is_none());
    }

    #[test]
    fn store_errors_map_to_codes_and_errnos() {
        let cases: Vec<(StoreError, i32, i32)> = vec![
            (
                StoreError::WrongKey("a".into()),
                PMO_E_WRONG_KEY,
                libc::EACCES,
            ),
            (
                StoreError::NotFound("a".into()),
                PMO_E_NOT_FOUND,
                libc::ENOENT,
            ),
            (StoreError::Exists("a".into()), PMO_E_EXISTS, libc::EEXIST),
            (
                StoreError::NoSpace("a".into()),
                PMO_E_NO_SPACE,
                libc::ENOSPC,
            ),
            (
                StoreError::Busy {
                    name: "a".into(),
                    how: "read-write",
                },
                PMO_E_BUSY,
                libc::EBUSY,
            ),
            (
                StoreError::AddressInUse {
                    name: "a".into(),
                    addr: 0,
                    len: 0,
                },
                PMO_E_ADDRESS_IN_USE,
                libc::EBUSY,
            ),
            (StoreError::Invalid("a".into()), PMO_E_INVALID, libc::EINVAL),
            (
                StoreError::ReadOnly("a".into()),
                PMO_E_READ_ONLY,
                libc::EACCES,
            ),
            (StoreError::Poisoned, PMO_E_POISONED, libc::EIO),
        ];
        for (e, code, errno) in cases {
            let e = CapiError::from(e);
            assert_eq!((e.code(), e.errno()), (code, errno), "{e}");
        }
        let io = CapiError::Store(StoreError::Io {
            op: "open".into(),
            source: std::io::Error::from_raw_os_error(libc::ENOENT),
        });
        assert_eq!((io.code(), io.errno()), (PMO_E_IO, libc::ENOENT));
        assert_eq!(CapiError::NotAttached(1).errno(), libc::EINVAL);
        assert_eq!(CapiError::TooManyAttachments(1).code(), PMO_E_LIMIT);
    }
}
