//! Where a workload's files live: the pmo file store ([`PmoBackend`]) or a plain directory
//! through POSIX calls ([`PosixBackend`], the peer a Filebench user knows).
//!
//! Contract: paths are absolute workload paths (`/tmp/bigfileset/00000001`); a backend maps
//! them to its own storage. Files are shared between threads by opening them again.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;

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
}

impl PosixBackend {
    fn at(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }
}

struct PosixFile {
    file: std::fs::File,
    path: String,
}

impl BackendFile for PosixFile {
    fn pread(&self, offset: u64, buf: &mut [u8]) -> BResult<usize> {
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
        self.file
            .write_all_at(data, offset)
            .map_err(|e| BackendError::io("write", &self.path, e))
    }
    fn append(&self, data: &[u8]) -> BResult<()> {
        // Not O_APPEND: Linux ignores pwrite's offset on such a descriptor. Threads sharing
        // a file may race for the same end; Filebench's own appends do the same.
        let end = self.size()?;
        self.file
            .write_all_at(data, end)
            .map_err(|e| BackendError::io("append", &self.path, e))
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
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(self.at(path))
            .map_err(|e| BackendError::io("create", path, e))?;
        Ok(Box::new(PosixFile {
            file,
            path: path.into(),
        }))
    }
    fn open(&self, path: &str) -> BResult<Box<dyn BackendFile>> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.at(path))
            .map_err(|e| BackendError::io("open", path, e))?;
        Ok(Box::new(PosixFile {
            file,
            path: path.into(),
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
