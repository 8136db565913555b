//! PMO memory as a `&mut [f64]`: the kernels compute directly on the attached mapping.
//!
//! Owns [`with_f64s`], the only place the crate turns an attachment's raw pointer into a slice.
//! Unsafe code is allowed here (and only here) because the store hands out the mapping as a raw
//! pointer; everything else in the crate works on the safe slice this module lends.
//!
//! Invariant: the slice lives only inside the closure, during which the caller holds the
//! attachment borrowed and makes no other access to the mapping (no psync, read_at, write_at,
//! detach), so the slice is the only path to those bytes in this process. Page faults taken while
//! the kernels touch the slice are served by the store's fault handler, which fills the page
//! before the access completes.
#![allow(unsafe_code)]

use pmo_store::{Attachment, Perm};

use crate::error::{Result, WorkloadError};

/// Lend the first `len_f64` `f64`s of the attached PMO to `f` as a mutable slice.
///
/// Fails if the PMO is read-only, too small or not 8-byte aligned (a PMO starts on a page, so
/// this never happens with the store's attachments).
pub fn with_f64s<R>(
    att: &mut Attachment,
    len_f64: usize,
    f: impl FnOnce(&mut [f64]) -> R,
) -> Result<R> {
    let need_bytes = len_f64.saturating_mul(std::mem::size_of::<f64>());
    let addr = att.addr();
    if att.perm() != Perm::Write
        || need_bytes > att.len()
        || !(addr as usize).is_multiple_of(std::mem::align_of::<f64>())
        || addr.is_null()
    {
        return Err(WorkloadError::Mapping {
            name: att.name().to_string(),
            len_bytes: att.len(),
            addr: addr as usize,
            need_bytes,
        });
    }
    // SAFETY: `addr .. addr + need_bytes` lies inside the live, writable mapping (checked above)
    // and is 8-byte aligned; every bit pattern is a valid f64. The mapping outlives the slice
    // because `att` is mutably borrowed for the whole closure, so it cannot be detached, and
    // that exclusive borrow also rules out psync/read_at/write_at through it meanwhile: the
    // slice is the only reference to these bytes in this process. The attach lock keeps other
    // processes from attaching for writing.
    let slice = unsafe { std::slice::from_raw_parts_mut(addr as *mut f64, len_f64) };
    Ok(f(slice))
}

/// Read-only twin of [`with_f64s`] (verification attaches for reading).
pub fn with_f64s_ref<R>(
    att: &Attachment,
    len_f64: usize,
    f: impl FnOnce(&[f64]) -> R,
) -> Result<R> {
    let need_bytes = len_f64.saturating_mul(std::mem::size_of::<f64>());
    let addr = att.addr();
    if need_bytes > att.len()
        || !(addr as usize).is_multiple_of(std::mem::align_of::<f64>())
        || addr.is_null()
    {
        return Err(WorkloadError::Mapping {
            name: att.name().to_string(),
            len_bytes: att.len(),
            addr: addr as usize,
            need_bytes,
        });
    }
    // SAFETY: the range is inside the live mapping and aligned (checked above); `att` is
    // borrowed for the whole closure so the mapping stays mapped; the slice is only read, and
    // no writer can attach while this attachment holds the attach lock.
    let slice = unsafe { std::slice::from_raw_parts(addr as *const f64, len_f64) };
    Ok(f(slice))
}
