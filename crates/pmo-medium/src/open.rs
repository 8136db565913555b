//! Choosing a backend for a path.

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::Arc;

use crate::{FileMedium, Medium, MediumError, PmemMedium};

/// The kinds of medium.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MediumKind {
    /// Regular file, durable through `msync`.
    File,
    /// DAX file (`MAP_SYNC`) or `/dev/daxX.Y` device: real persistent or CXL memory.
    Dax,
    /// A memory-backed file (`/dev/shm`) treated as persistent memory (cache-line flushes).
    EmulatedPmem,
    /// The in-memory crash simulator of the tests.
    CrashSim,
}

impl MediumKind {
    /// Name used on the command line and in `PMO_MEDIUM`.
    pub fn name(self) -> &'static str {
        match self {
            MediumKind::File => "file",
            MediumKind::Dax => "dax",
            MediumKind::EmulatedPmem => "pmem-emul",
            MediumKind::CrashSim => "crash-sim",
        }
    }

    /// Parse a name as printed by [`MediumKind::name`].
    pub fn parse(name: &str) -> Option<MediumKind> {
        match name {
            "file" => Some(MediumKind::File),
            "dax" => Some(MediumKind::Dax),
            "pmem-emul" | "pmem" | "shm" => Some(MediumKind::EmulatedPmem),
            _ => None,
        }
    }
}

/// Open an existing pool file or device. `kind` forces a backend; otherwise `PMO_MEDIUM` does;
/// otherwise: a character device is DAX, a file on tmpfs is emulated persistent memory, a file
/// that accepts `MAP_SYNC` is DAX, and anything else is a regular file.
///
/// When `PMO_LATENCY` names a profile, the medium is wrapped in a [`crate::LatencyMedium`]; a
/// value that does not parse is an error.
pub fn open_medium(path: &Path, kind: Option<MediumKind>) -> Result<Arc<dyn Medium>, MediumError> {
    let latency = crate::LatencyProfile::from_env()?;
    Ok(crate::latency::wrap(open_backend(path, kind)?, latency))
}

fn open_backend(path: &Path, kind: Option<MediumKind>) -> Result<Arc<dyn Medium>, MediumError> {
    let env_kind = std::env::var("PMO_MEDIUM")
        .ok()
        .and_then(|s| MediumKind::parse(&s));
    let open = || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|source| MediumError::Io { op: "open", source })
    };
    let file = open()?;
    let kind = match kind.or(env_kind) {
        Some(k) => k,
        None if pmo_os::map::is_char_device(&file) => MediumKind::Dax,
        None if pmo_os::map::on_tmpfs(path) => MediumKind::EmulatedPmem,
        None => {
            // Probe MAP_SYNC: it succeeds only on a DAX file system.
            match PmemMedium::new(open()?, path, MediumKind::Dax) {
                Ok(m) => return Ok(Arc::new(m)),
                Err(_) => MediumKind::File,
            }
        }
    };
    Ok(match kind {
        MediumKind::File => Arc::new(FileMedium::new(file, path)?),
        MediumKind::Dax | MediumKind::EmulatedPmem => Arc::new(PmemMedium::new(file, path, kind)?),
        MediumKind::CrashSim => {
            return Err(MediumError::Unsupported(
                "the crash simulator has no path".into(),
            ))
        }
    })
}
