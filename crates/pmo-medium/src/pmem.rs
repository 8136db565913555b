//! Byte-addressable persistent memory: a DAX mapping (`MAP_SYNC`) or emulated persistent memory
//! (a file in `/dev/shm`). `flush` writes back cache lines, `fence` is `sfence`.

use std::path::{Path, PathBuf};

use pmo_os::map::{FileMapping, MapMode};
use pmo_os::persist;

use crate::{check_range, Medium, MediumError, MediumKind};

/// Persistent memory reached with loads, stores, cache-line flushes and fences.
pub struct PmemMedium {
    map: FileMapping,
    path: PathBuf,
    kind: MediumKind,
}

impl PmemMedium {
    /// Map `file` as persistent memory. `kind` is [`MediumKind::Dax`] (requires `MAP_SYNC` to
    /// succeed, or a device DAX character device) or [`MediumKind::EmulatedPmem`].
    pub fn new(
        file: std::fs::File,
        path: &Path,
        kind: MediumKind,
    ) -> Result<PmemMedium, MediumError> {
        if persist::flush_kind() == persist::FlushKind::None {
            return Err(MediumError::Unsupported(
                "this CPU has no cache-line flush instruction".into(),
            ));
        }
        let map = match kind {
            MediumKind::Dax if !pmo_os::map::is_char_device(&file) => {
                FileMapping::new(file, MapMode::SharedSync)?
            }
            _ => FileMapping::new(file, MapMode::Shared)?,
        };
        Ok(PmemMedium {
            map,
            path: path.to_path_buf(),
            kind,
        })
    }
}

impl Medium for PmemMedium {
    fn len(&self) -> u64 {
        self.map.len()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediumError> {
        Ok(self.map.read_at(offset, buf)?)
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), MediumError> {
        Ok(self.map.write_at(offset, data)?)
    }
    fn store_ptr(&self, offset: u64, len: u64) -> Option<*mut u8> {
        self.map.ptr_at(offset, usize::try_from(len).ok()?).ok()
    }
    fn flush(&self, offset: u64, len: u64) -> Result<(), MediumError> {
        check_range(offset, len, self.len())?;
        self.map.flush_lines(offset, len as usize)?;
        Ok(())
    }
    /// Whole cache lines, 256 bytes or more (pages): non-temporal stores, which skip reading
    /// the destination lines into the cache and need no write-back; the fence that follows
    /// makes them durable as it does flushed lines. Anything else: store, then flush.
    fn write_flush(&self, offset: u64, data: &[u8]) -> Result<(), MediumError> {
        let line = persist::CACHE_LINE as u64;
        if offset.is_multiple_of(line)
            && (data.len() as u64).is_multiple_of(line)
            && data.len() >= 256
            && self.map.write_stream_at(offset, data)?
        {
            return Ok(());
        }
        self.write(offset, data)?;
        self.flush(offset, data.len() as u64)
    }
    fn fence(&self) -> Result<(), MediumError> {
        persist::fence();
        Ok(())
    }
    fn kind(&self) -> MediumKind {
        self.kind
    }
    fn path(&self) -> Option<&Path> {
        Some(&self.path)
    }
    fn file(&self) -> Option<&std::fs::File> {
        Some(self.map.file())
    }
}
