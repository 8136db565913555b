//! The persistence interface: the only road from pmo to its medium.
//!
//! Every byte pmo stores goes through [`Medium::write`], becomes a candidate for durability with
//! [`Medium::flush`], and is durable once a later [`Medium::fence`] returns. Nothing else writes
//! the medium, so the crash-simulation backend sees every store and every persist point.
//!
//! Backends:
//! - [`file::FileMedium`]: a regular file mapped shared; `fence` is `msync` of the flushed ranges.
//! - [`pmem::PmemMedium`]: a DAX file or device mapped with `MAP_SYNC`, or a memory-backed file
//!   (`/dev/shm`) as emulated persistent memory; `flush` is `clwb`/`clflushopt`, `fence` `sfence`.
//! - [`crash::CrashMedium`]: memory only; remembers what was written but not yet fenced and, at
//!   any persist point, yields the images a power failure could leave.
//!
//! Contract for implementations:
//! - `write` is a store: visible to later `read`s at once, durable only after `flush` of its
//!   range and a later `fence`.
//! - A write that was not yet fenced may or may not survive a crash, line by line, in any
//!   order; stores to one 64-byte line made before one fence land together or not at all in the
//!   model (x86 guarantees only 8 bytes; `CrashMedium::torn_image` also models torn lines).
//! - After an error from `flush` or `fence` the medium's state is unknown: callers stop using it
//!   (the store poisons the pool).
#![deny(unsafe_code)]

pub mod crash;
pub mod file;
pub mod latency;
pub mod open;
pub mod pmem;

pub use crash::CrashMedium;
pub use file::FileMedium;
pub use latency::{LatencyMedium, LatencyProfile, LatencyStats};
pub use open::{open_medium, MediumKind};
pub use pmem::PmemMedium;

/// Errors of the persistence layer.
#[derive(Debug, thiserror::Error)]
pub enum MediumError {
    #[error("medium range {offset}+{len} is outside its {size} bytes")]
    OutOfRange { offset: u64, len: u64, size: u64 },
    #[error("I/O error during {op}: {source}")]
    Io {
        op: &'static str,
        source: std::io::Error,
    },
    #[error("mapping the medium failed: {0}")]
    Map(#[from] pmo_os::map::MapError),
    #[error("simulated power failure: the medium is gone until it is reopened from an image")]
    PowerLost,
    #[error("{0}")]
    Unsupported(String),
}

/// Bytes per cache line, the unit of flushing and of crash simulation.
pub const LINE: u64 = 64;

/// A persistent medium: a byte array with explicit write, flush and fence.
pub trait Medium: Send + Sync {
    /// Size in bytes.
    fn len(&self) -> u64;
    /// True if the medium has no bytes (never, for a usable pool).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copy bytes out. Sees every earlier `write`, fenced or not.
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediumError>;
    /// Store bytes (not yet durable).
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), MediumError>;
    /// Schedule the lines of a range for write-back.
    fn flush(&self, offset: u64, len: u64) -> Result<(), MediumError>;
    /// Wait until every flushed line is durable; orders them before later stores.
    fn fence(&self) -> Result<(), MediumError>;
    /// Which backend this is, for reports.
    fn kind(&self) -> MediumKind;
    /// Path of the file or device, if any (used for cross-process locks).
    fn path(&self) -> Option<&std::path::Path>;
    /// The open file behind the medium, for callers that map a range of it directly (a PMO's
    /// plaintext copy placed on the medium). Stores through such a mapping bypass this
    /// interface: only data that need not be crash-consistent may go that way, and anything
    /// that must be durable is written through [`Medium::write`]. `None` for media that cannot
    /// be mapped (the crash-simulation medium).
    fn file(&self) -> Option<&std::fs::File> {
        None
    }

    /// For media that are memory of this process (a mapping of persistent memory): the address
    /// of byte `offset`, checked to have `len` bytes after it, valid while the medium lives.
    /// Storing through it is a `write` of those bytes (not durable until flushed and fenced);
    /// the caller must not store into bytes others may be reading or writing. `None` (the
    /// default, and every medium that observes, delays or batches its writes): use `write`.
    fn store_ptr(&self, offset: u64, len: u64) -> Option<*mut u8> {
        let _ = (offset, len);
        None
    }
    /// `write` then `flush` of the same range: durable once a later `fence` returns. A medium
    /// may do both in one step (non-temporal stores on persistent memory).
    fn write_flush(&self, offset: u64, data: &[u8]) -> Result<(), MediumError> {
        self.write(offset, data)?;
        self.flush(offset, data.len() as u64)
    }
    /// `flush` then `fence`: the range is durable when this returns.
    fn persist(&self, offset: u64, len: u64) -> Result<(), MediumError> {
        self.flush(offset, len)?;
        self.fence()
    }
    /// Store `len` zero bytes (not yet durable).
    fn zero(&self, offset: u64, len: u64) -> Result<(), MediumError> {
        const CHUNK: [u8; 4096] = [0; 4096];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(CHUNK.len() as u64);
            self.write(offset + done, &CHUNK[..n as usize])?;
            done += n;
        }
        Ok(())
    }
}

pub(crate) fn check_range(offset: u64, len: u64, size: u64) -> Result<(), MediumError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(MediumError::OutOfRange { offset, len, size }),
    }
}
