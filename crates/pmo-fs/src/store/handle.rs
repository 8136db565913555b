//! An open file's calls ([`FileHandle`]): pread, pwrite, append, truncate, fsync, close, and
//! the growth of a file over new segments.

use super::kept::sync;
use super::*;

impl FileHandle {
    fn file(&self) -> &Arc<OpenFile> {
        // Only `close` takes the file, and it consumes the handle.
        self.file.as_ref().expect("an open handle has its file")
    }

    /// The file's path.
    pub fn path(&self) -> &FsPath {
        &self.file().path
    }

    /// Current size in bytes.
    pub fn size(&self) -> u64 {
        lock(&self.file().state).header.size
    }

    /// `pread`: read up to `buf.len()` bytes at `offset`; returns the bytes read (short at the
    /// end of the file).
    pub fn pread(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let st = lock(&self.file().state);
        let end = st.header.size.min(offset.saturating_add(buf.len() as u64));
        if offset >= end {
            return Ok(0);
        }
        let n = (end - offset) as usize;
        let mut done = 0usize;
        while done < n {
            let (seg, pmo_off, left) =
                header::locate(st.header.first_pmo_bytes, offset + done as u64);
            let k = (left as usize).min(n - done);
            st.segs[seg as usize]
                .att
                .read_at(pmo_off as usize, &mut buf[done..done + k])?;
            done += k;
        }
        Ok(n)
    }

    /// `pwrite`: write `data` at `offset` (a gap past the end reads as zeros). Not durable
    /// until fsync or the last close.
    pub fn pwrite(&self, offset: u64, data: &[u8]) -> Result<()> {
        let file = self.file().clone();
        let mut st = lock(&file.state);
        self.write_locked(&file, &mut st, offset, data)
    }

    fn write_locked(
        &self,
        file: &OpenFile,
        st: &mut FileState,
        offset: u64,
        data: &[u8],
    ) -> Result<()> {
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| FsError::TooLarge(format!("{}: offset overflow", file.path)))?;
        let first = st.header.first_pmo_bytes;
        let needed = header::segments_for(first, end);
        if needed > MAX_SEGMENTS {
            return Err(FsError::TooLarge(format!(
                "{}: {end} bytes is more than the {} a file whose first PMO has {first} bytes can hold",
                file.path,
                header::capacity(first, MAX_SEGMENTS)
            )));
        }
        // Grow first: a full pool fails here with nothing written.
        while (st.segs.len() as u32) < needed {
            let i = st.segs.len() as u32;
            let att = self.store.grow(&file.path, first, i)?;
            st.segs.push(Segment { att, dirty: false });
        }
        let old = st.header.size;
        if offset > old {
            // A gap reads as zeros whatever an earlier life of the bytes held.
            let zeros = vec![0u8; (offset - old).min(1 << 20) as usize];
            let mut at = old;
            while at < offset {
                let k = (offset - at).min(zeros.len() as u64) as usize;
                put(st, at, &zeros[..k])?;
                at += k as u64;
            }
        }
        put(st, offset, data)?;
        if end > old {
            st.header.size = end;
            let h = st.header.encode();
            st.segs[0].att.write_at(0, &h)?;
            st.segs[0].dirty = true;
        }
        st.dirty = true;
        Ok(())
    }

    /// Append `data`; returns the offset it landed at.
    pub fn append(&self, data: &[u8]) -> Result<u64> {
        let file = self.file().clone();
        let mut st = lock(&file.state);
        let at = st.header.size;
        self.write_locked(&file, &mut st, at, data)?;
        Ok(at)
    }

    /// Shrink (or zero-extend) the file to `len` bytes.
    pub fn truncate(&self, len: u64) -> Result<()> {
        let file = self.file().clone();
        let mut st = lock(&file.state);
        if len > st.header.size {
            let at = st.header.size;
            return self.write_locked(&file, &mut st, len, &[]).map(|_| {
                debug_assert!(at <= len);
            });
        }
        st.header.size = len;
        let h = st.header.encode();
        st.segs[0].att.write_at(0, &h)?;
        st.segs[0].dirty = true;
        st.dirty = true;
        Ok(())
    }

    /// `fsync`: make every write to this file durable (a psync of each written PMO).
    pub fn fsync(&self) -> Result<()> {
        let mut st = lock(&self.file().state);
        if st.dirty {
            sync(&mut st)?;
        }
        Ok(())
    }

    /// `close`. The last close of a written file psyncs it first, then detaches its PMOs.
    pub fn close(mut self) -> Result<()> {
        match self.file.take() {
            Some(f) => self.store.close_file(f),
            None => Ok(()),
        }
    }
}

impl Drop for FileHandle {
    fn drop(&mut self) {
        if let Some(f) = self.file.take() {
            let _ = self.store.close_file(f);
        }
    }
}

/// Copy `data` into the file's views at `offset` (segments already exist).
fn put(st: &mut FileState, offset: u64, data: &[u8]) -> Result<()> {
    let first = st.header.first_pmo_bytes;
    let mut done = 0usize;
    while done < data.len() {
        let (seg, pmo_off, left) = header::locate(first, offset + done as u64);
        let k = (left as usize).min(data.len() - done);
        let s = &mut st.segs[seg as usize];
        s.att.write_at(pmo_off as usize, &data[done..done + k])?;
        s.dirty = true;
        done += k;
    }
    Ok(())
}

impl FileStore {
    /// Create (or take over a leftover of) segment `i` of a file and attach it.
    fn grow(&self, path: &FsPath, first: u64, i: u32) -> Result<Attachment> {
        let name = path.pmo_name(Kind::Segment(i));
        let bytes = header::segment_bytes(first, i);
        match self.inner.pool.info(&name) {
            Ok(info) if info.size == bytes => {}
            Ok(_) => {
                self.inner.pool.pdestroy(&name, self.key())?;
                self.pcreate(&name, bytes)?;
            }
            Err(StoreError::NotFound(_)) => self.pcreate(&name, bytes)?,
            Err(e) => return Err(e.into()),
        }
        self.attach(&name)
    }
}
