//! A regular file mapped shared: `flush` records ranges, `fence` makes them durable with `msync`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pmo_os::map::{FileMapping, MapMode};

use crate::{check_range, Medium, MediumError, MediumKind};

/// Upper bound on remembered flush ranges before they are coalesced into one.
const MAX_PENDING_RANGES: usize = 1024;

/// A regular file, durable through `msync(MS_SYNC)`.
pub struct FileMedium {
    map: FileMapping,
    path: PathBuf,
    /// Byte ranges flushed since the last fence, to `msync` at the fence. Bounded.
    pending: Mutex<Vec<(u64, u64)>>,
}

impl FileMedium {
    /// Map an opened file.
    pub fn new(file: std::fs::File, path: &Path) -> Result<FileMedium, MediumError> {
        let map = FileMapping::new(file, MapMode::Shared)?;
        Ok(FileMedium {
            map,
            path: path.to_path_buf(),
            pending: Mutex::new(Vec::new()),
        })
    }
}

impl Medium for FileMedium {
    fn len(&self) -> u64 {
        self.map.len()
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediumError> {
        Ok(self.map.read_at(offset, buf)?)
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), MediumError> {
        Ok(self.map.write_at(offset, data)?)
    }
    fn flush(&self, offset: u64, len: u64) -> Result<(), MediumError> {
        check_range(offset, len, self.len())?;
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.len() >= MAX_PENDING_RANGES {
            let lo = pending
                .iter()
                .map(|r| r.0)
                .min()
                .unwrap_or(offset)
                .min(offset);
            let hi = pending
                .iter()
                .map(|r| r.0 + r.1)
                .max()
                .unwrap_or(offset + len)
                .max(offset + len);
            pending.clear();
            pending.push((lo, hi - lo));
        } else {
            pending.push((offset, len));
        }
        Ok(())
    }
    fn fence(&self) -> Result<(), MediumError> {
        let mut ranges =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()));
        ranges.sort_unstable();
        // Merge ranges that touch the same OS pages, then msync each.
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
        for (off, len) in ranges {
            let (lo, hi) = (off & !4095, (off + len).div_ceil(4096) * 4096);
            match merged.last_mut() {
                Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        for (lo, hi) in merged {
            let hi = hi.min(self.len());
            self.map.msync(lo, (hi - lo) as usize)?;
        }
        Ok(())
    }
    fn kind(&self) -> MediumKind {
        MediumKind::File
    }
    fn path(&self) -> Option<&Path> {
        Some(&self.path)
    }
    fn file(&self) -> Option<&std::fs::File> {
        Some(self.map.file())
    }
}
