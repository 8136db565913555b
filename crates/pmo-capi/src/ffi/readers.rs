//! The C entry points of readers beside a writer (`pmo.h`, `docs/readers.md`): refresh a
//! read-only attachment to the newest psync, and ask which psync it shows.

use std::ffi::{c_long, c_void};

use super::{entry, reg, trace};
use crate::error::CapiError;

fn as_long(v: u64) -> crate::registry::Result<c_long> {
    c_long::try_from(v).map_err(|_| CapiError::Internal("sequence number overflow".into()))
}

/// `long pmo_refresh(void *addr)`: see `pmo.h`. Only reads the registry: safe for any address.
#[no_mangle]
pub extern "C" fn pmo_refresh(addr: *mut c_void) -> c_long {
    let r = entry(-1, || reg().refresh(addr as usize).and_then(as_long));
    trace(|| format!("pmo_refresh({addr:p})"), r)
}

/// `long pmo_snapshot_seq(void *addr)`: see `pmo.h`.
#[no_mangle]
pub extern "C" fn pmo_snapshot_seq(addr: *mut c_void) -> c_long {
    let r = entry(-1, || reg().snapshot_seq(addr as usize).and_then(as_long));
    trace(|| format!("pmo_snapshot_seq({addr:p})"), r)
}
