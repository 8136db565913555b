//! Where a workload's files live: the pmo file store ([`PmoBackend`]) or a plain directory
//! through POSIX calls ([`PosixBackend`], the peer a Filebench user knows).
//!
//! Contract: paths are absolute workload paths (`/tmp/bigfileset/00000001`); a backend maps
//! them to its own storage. Files are shared between threads by opening them again.

use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pmo_fs::{FileHandle, FileStore, FsError};

/// A backend failure, as one line.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("{0}")]
    Fs(#[from] FsError),
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("cannot allocate a {0}-byte I/O buffer (iosize too large for this machine's memory)")]
    Buffer(u64),
    #[error(
        "iosize {iosize} is larger than the thread's memsize {memsize} (Filebench refuses it \
         too: raise the thread's memsize=)"
    )]
    IoSize { iosize: u64, memsize: u64 },
}

impl BackendError {
    fn io(op: &'static str, path: &str, source: std::io::Error) -> BackendError {
        BackendError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}

pub type BResult<T> = Result<T, BackendError>;

/// An open file of a backend.
pub trait BackendFile: Send {
    fn pread(&self, offset: u64, buf: &mut [u8]) -> BResult<usize>;
    fn pwrite(&self, offset: u64, data: &[u8]) -> BResult<()>;
    fn append(&self, data: &[u8]) -> BResult<()>;
    fn size(&self) -> BResult<u64>;
    fn fsync(&self) -> BResult<()>;
    fn close(self: Box<Self>) -> BResult<()>;
}

/// A place to keep a workload's files.
pub trait Backend: Send + Sync {
    /// Short name for records (`pmo`, `posix`).
    fn kind(&self) -> &'static str;
    fn mkdir_all(&self, path: &str) -> BResult<()>;
    /// Create a new file (exclusive) and open it; `size_hint` is the size it is meant to reach.
    fn create(&self, path: &str, size_hint: u64) -> BResult<Box<dyn BackendFile>>;
    fn open(&self, path: &str) -> BResult<Box<dyn BackendFile>>;
    fn stat(&self, path: &str) -> BResult<u64>;
    fn unlink(&self, path: &str) -> BResult<()>;
    /// Create directory `path` (its parent exists).
    fn mkdir(&self, path: &str) -> BResult<()>;
    /// Remove the empty directory `path`.
    fn rmdir(&self, path: &str) -> BResult<()>;
    /// The names of directory `path`'s entries.
    fn readdir(&self, path: &str) -> BResult<Vec<String>>;
    /// `open` for a flowop with `directio` (bypassing the page cache where the backend has
    /// one; the pmo file store has none, so by default this is `open`).
    fn open_direct(&self, path: &str) -> BResult<Box<dyn BackendFile>> {
        self.open(path)
    }
    /// `create` for a flowop with `directio`.
    fn create_direct(&self, path: &str, size_hint: u64) -> BResult<Box<dyn BackendFile>> {
        self.create(path, size_hint)
    }
    /// What this backend did differently from what the workload asked (for the records).
    fn notes(&self) -> Vec<String> {
        vec![]
    }
}

/// The pmo file store.
pub struct PmoBackend {
    pub fs: FileStore,
}

struct PmoFile(FileHandle);

impl BackendFile for PmoFile {
    fn pread(&self, offset: u64, buf: &mut [u8]) -> BResult<usize> {
        Ok(self.0.pread(offset, buf)?)
    }
    fn pwrite(&self, offset: u64, data: &[u8]) -> BResult<()> {
        Ok(self.0.pwrite(offset, data)?)
    }
    fn append(&self, data: &[u8]) -> BResult<()> {
        self.0.append(data)?;
        Ok(())
    }
    fn size(&self) -> BResult<u64> {
        Ok(self.0.size())
    }
    fn fsync(&self) -> BResult<()> {
        Ok(self.0.fsync()?)
    }
    fn close(self: Box<Self>) -> BResult<()> {
        Ok(self.0.close()?)
    }
}

impl Backend for PmoBackend {
    fn kind(&self) -> &'static str {
        "pmo"
    }
    fn mkdir_all(&self, path: &str) -> BResult<()> {
        Ok(self.fs.mkdir_all(path)?)
    }
    fn create(&self, path: &str, size_hint: u64) -> BResult<Box<dyn BackendFile>> {
        Ok(Box::new(PmoFile(self.fs.create(path, size_hint)?)))
    }
    fn open(&self, path: &str) -> BResult<Box<dyn BackendFile>> {
        Ok(Box::new(PmoFile(self.fs.open_file(path)?)))
    }
    fn stat(&self, path: &str) -> BResult<u64> {
        Ok(self.fs.stat(path)?.size)
    }
    fn unlink(&self, path: &str) -> BResult<()> {
        Ok(self.fs.unlink(path)?)
    }
    fn mkdir(&self, path: &str) -> BResult<()> {
        Ok(self.fs.mkdir(path)?)
    }
    fn rmdir(&self, path: &str) -> BResult<()> {
        Ok(self.fs.rmdir(path)?)
    }
    fn readdir(&self, path: &str) -> BResult<Vec<String>> {
        Ok(self.fs.readdir(path)?.into_iter().map(|e| e.name).collect())
    }
}

/// A plain directory: the workload's paths live under `root`.
pub struct PosixBackend {
    pub root: PathBuf,
    direct: Arc<DirectStats>,
}

/// What `directio` got on a plain directory.
#[derive(Debug, Default)]
struct DirectStats {
    /// Files opened `O_DIRECT`.
    opened: AtomicU64,
    /// Opens the file system refused `O_DIRECT` (`EINVAL`): opened through the page cache.
    refused: AtomicU64,
    /// Operations on an `O_DIRECT` file not aligned to [`DIRECT_ALIGN`] (offset or length):
    /// done through the page cache (a second, ordinary descriptor).
    unaligned: AtomicU64,
    /// Aligned operations done `O_DIRECT`.
    direct_ops: AtomicU64,
}

/// The alignment `O_DIRECT` needs here (buffer, offset and length): the page size, which
/// covers every logical block size Linux file systems use.
const DIRECT_ALIGN: usize = 4096;

impl PosixBackend {
    pub fn new(root: PathBuf) -> PosixBackend {
        PosixBackend {
            root,
            direct: Arc::default(),
        }
    }

    /// The file at `path` opened read-write; `create`: a new one (an existing file is an error).
    fn open_rw(&self, path: &str, create: bool) -> BResult<std::fs::File> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(create)
            .open(self.at(path))
            .map_err(|e| BackendError::io(if create { "create" } else { "open" }, path, e))
    }
    fn at(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    /// `file` opened again `O_DIRECT`, or `None` (counted) if the file system refuses it.
    fn direct(&self, file: std::fs::File, path: &str) -> BResult<Box<dyn BackendFile>> {
        let direct = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(self.at(path))
        {
            Ok(d) => {
                self.direct.opened.fetch_add(1, Ordering::Relaxed);
                Some(d)
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                self.direct.refused.fetch_add(1, Ordering::Relaxed);
                None
            }
            Err(e) => return Err(BackendError::io("open O_DIRECT", path, e)),
        };
        Ok(Box::new(PosixFile {
            file,
            path: path.into(),
            direct: direct.map(|d| (d, self.direct.clone())),
        }))
    }
}

struct PosixFile {
    file: std::fs::File,
    path: String,
    /// The same file opened `O_DIRECT` (for `directio` flowops), and where to count.
    direct: Option<(std::fs::File, Arc<DirectStats>)>,
}

/// A `len`-byte slice of `v` starting at a [`DIRECT_ALIGN`]-aligned address.
fn aligned(v: &mut Vec<u8>, len: usize) -> &mut [u8] {
    v.resize(len + DIRECT_ALIGN, 0);
    let off = v.as_ptr().align_offset(DIRECT_ALIGN);
    &mut v[off..off + len]
}

impl PosixFile {
    /// The `O_DIRECT` descriptor when an operation at `offset` of `len` bytes may use it
    /// (counting which way it went).
    fn direct_for(&self, offset: u64, len: usize) -> Option<&std::fs::File> {
        let (d, st) = self.direct.as_ref()?;
        let a = DIRECT_ALIGN as u64;
        if offset.is_multiple_of(a) && (len as u64).is_multiple_of(a) && len > 0 {
            st.direct_ops.fetch_add(1, Ordering::Relaxed);
            Some(d)
        } else {
            st.unaligned.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

impl BackendFile for PosixFile {
    fn pread(&self, offset: u64, buf: &mut [u8]) -> BResult<usize> {
        if let Some(d) = self.direct_for(offset, buf.len()) {
            let mut v = Vec::new();
            let a = aligned(&mut v, buf.len());
            let mut done = 0;
            // Each step stays aligned: a short read ends the file.
            while done < a.len() {
                match d.read_at(&mut a[done..], offset + done as u64) {
                    Ok(0) => break,
                    Ok(n) if !n.is_multiple_of(DIRECT_ALIGN) => {
                        done += n;
                        break;
                    }
                    Ok(n) => done += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(BackendError::io("read O_DIRECT", &self.path, e)),
                }
            }
            buf[..done].copy_from_slice(&a[..done]);
            return Ok(done);
        }
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(BackendError::io("read", &self.path, e)),
            }
        }
        Ok(done)
    }
    fn pwrite(&self, offset: u64, data: &[u8]) -> BResult<()> {
        if let Some(d) = self.direct_for(offset, data.len()) {
            let mut v = Vec::new();
            let a = aligned(&mut v, data.len());
            a.copy_from_slice(data);
            return d
                .write_all_at(a, offset)
                .map_err(|e| BackendError::io("write O_DIRECT", &self.path, e));
        }
        self.file
            .write_all_at(data, offset)
            .map_err(|e| BackendError::io("write", &self.path, e))
    }
    fn append(&self, data: &[u8]) -> BResult<()> {
        // Not O_APPEND: Linux ignores pwrite's offset on such a descriptor. Threads sharing
        // a file may race for the same end; Filebench's own appends do the same.
        let end = self.size()?;
        self.pwrite(end, data)
    }
    fn size(&self) -> BResult<u64> {
        self.file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| BackendError::io("stat", &self.path, e))
    }
    fn fsync(&self) -> BResult<()> {
        self.file
            .sync_all()
            .map_err(|e| BackendError::io("fsync", &self.path, e))
    }
    fn close(self: Box<Self>) -> BResult<()> {
        Ok(())
    }
}

impl Backend for PosixBackend {
    fn kind(&self) -> &'static str {
        "posix"
    }
    fn mkdir_all(&self, path: &str) -> BResult<()> {
        std::fs::create_dir_all(self.at(path)).map_err(|e| BackendError::io("mkdir", path, e))
    }
    fn create(&self, path: &str, _size_hint: u64) -> BResult<Box<dyn BackendFile>> {
        let file = self.open_rw(path, true)?;
        Ok(Box::new(PosixFile {
            file,
            path: path.into(),
            direct: None,
        }))
    }
    fn open(&self, path: &str) -> BResult<Box<dyn BackendFile>> {
        let file = self.open_rw(path, false)?;
        Ok(Box::new(PosixFile {
            file,
            path: path.into(),
            direct: None,
        }))
    }
    fn stat(&self, path: &str) -> BResult<u64> {
        std::fs::metadata(self.at(path))
            .map(|m| m.len())
            .map_err(|e| BackendError::io("stat", path, e))
    }
    fn unlink(&self, path: &str) -> BResult<()> {
        std::fs::remove_file(self.at(path)).map_err(|e| BackendError::io("unlink", path, e))
    }
    fn mkdir(&self, path: &str) -> BResult<()> {
        std::fs::create_dir(self.at(path)).map_err(|e| BackendError::io("mkdir", path, e))
    }
    fn rmdir(&self, path: &str) -> BResult<()> {
        std::fs::remove_dir(self.at(path)).map_err(|e| BackendError::io("rmdir", path, e))
    }
    fn open_direct(&self, path: &str) -> BResult<Box<dyn BackendFile>> {
        let file = self.open_rw(path, false)?;
        self.direct(file, path)
    }
    fn create_direct(&self, path: &str, _size_hint: u64) -> BResult<Box<dyn BackendFile>> {
        let file = self.open_rw(path, true)?;
        self.direct(file, path)
    }
    fn notes(&self) -> Vec<String> {
        let d = &self.direct;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (opened, refused) = (get(&d.opened), get(&d.refused));
        let mut out = vec![];
        if opened > 0 {
            out.push(format!(
                "directio: the POSIX peer opened {opened} files O_DIRECT; {} operations ran O_DIRECT, {} not aligned to {DIRECT_ALIGN} bytes ran through the page cache",
                get(&d.direct_ops),
                get(&d.unaligned)
            ));
        }
        if refused > 0 {
            out.push(format!(
                "directio: {}'s file system refused O_DIRECT ({refused} opens): the POSIX peer ran those files through its page cache",
                self.root.display()
            ));
        }
        out
    }
    fn readdir(&self, path: &str) -> BResult<Vec<String>> {
        let err = |e| BackendError::io("readdir", path, e);
        std::fs::read_dir(self.at(path))
            .map_err(err)?
            .map(|d| {
                d.map(|d| d.file_name().to_string_lossy().into_owned())
                    .map_err(err)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `directio` on a plain directory: aligned operations go through the `O_DIRECT`
    /// descriptor (when the file system takes it), unaligned ones through the page cache, and
    /// both read back what was written; the notes count each way.
    #[test]
    fn direct_io_reads_back_what_it_wrote_and_is_counted() {
        let root = std::env::temp_dir().join(format!("pmo-fb-direct-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let b = PosixBackend::new(root.clone());
        b.mkdir_all("/d").unwrap();
        let f = b.create_direct("/d/f", 0).unwrap();
        let data: Vec<u8> = (0..3 * DIRECT_ALIGN).map(|i| (i * 7 + 3) as u8).collect();
        f.pwrite(0, &data[..2 * DIRECT_ALIGN]).unwrap(); // aligned
        f.append(&data[2 * DIRECT_ALIGN..2 * DIRECT_ALIGN + 100])
            .unwrap(); // unaligned
        assert_eq!(f.size().unwrap(), 2 * DIRECT_ALIGN as u64 + 100);
        let mut back = vec![0u8; 3 * DIRECT_ALIGN];
        // Aligned read past the end: short, and what was written.
        let n = f.pread(0, &mut back).unwrap();
        assert_eq!(n, 2 * DIRECT_ALIGN + 100);
        assert_eq!(back[..n], data[..n]);
        let mut odd = vec![0u8; 10];
        assert_eq!(f.pread(5, &mut odd).unwrap(), 10);
        assert_eq!(odd[..], data[5..15]);
        f.close().unwrap();
        let notes = b.notes().join("\n");
        let opened = b.direct.opened.load(Ordering::Relaxed);
        if opened == 1 {
            assert_eq!(b.direct.direct_ops.load(Ordering::Relaxed), 2, "{notes}");
            assert_eq!(b.direct.unaligned.load(Ordering::Relaxed), 2, "{notes}");
            assert!(notes.contains("opened 1 files O_DIRECT"), "{notes}");
        } else {
            assert_eq!(b.direct.refused.load(Ordering::Relaxed), 1, "{notes}");
            assert!(notes.contains("refused O_DIRECT"), "{notes}");
        }
        // Without directio nothing is counted or noted.
        let g = b.open("/d/f").unwrap();
        g.pread(0, &mut back).unwrap();
        assert_eq!(b.notes().join("\n"), notes);
        let _ = std::fs::remove_dir_all(&root);
    }
}
