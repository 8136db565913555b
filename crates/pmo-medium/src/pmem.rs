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
    /// Whole cache lines (pages, a psync's journal and commit record): non-temporal stores,
    /// which skip reading the destination lines into the cache and need no write-back; the
    /// fence that follows makes them durable as it does flushed lines. Anything else (a line
    /// written in part): store, then flush. Streaming began at 256 bytes (PMDK's default
    /// threshold) until one to three lines streamed measured faster here than store + `clwb`
    /// (`docs/commit.md`).
    fn write_flush(&self, offset: u64, data: &[u8]) -> Result<(), MediumError> {
        let line = persist::CACHE_LINE as u64;
        if offset.is_multiple_of(line)
            && (data.len() as u64).is_multiple_of(line)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `write_flush` stores exactly the bytes given, whether it streams them (whole
    /// lines) or stores and flushes them (anything else), and touches nothing around.
    #[test]
    fn write_flush_stores_exactly_the_bytes_streamed_or_not() {
        let dir = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let path = dir.join(format!("pmo-medium-wf-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        file.set_len(3 * 4096).unwrap();
        let m = PmemMedium::new(file, &path, MediumKind::EmulatedPmem).unwrap();
        let mut expect = vec![0u8; 3 * 4096];
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 31 + 7) as u8).collect();
        // (offset, length): a page, whole lines, an unaligned start, a short run, a tail that
        // is not a whole line.
        for (off, len) in [(4096, 4096), (0, 256), (300, 1000), (8192, 64), (8256, 200)] {
            m.write_flush(off as u64, &data[..len]).unwrap();
            expect[off..off + len].copy_from_slice(&data[..len]);
        }
        m.fence().unwrap();
        let mut got = vec![0u8; 3 * 4096];
        m.read(0, &mut got).unwrap();
        drop(m);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(got, expect);
    }
}
