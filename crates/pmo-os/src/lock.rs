//! Open-file-description (OFD) byte-range locks.
//!
//! pmo uses byte ranges of the pool file as lock words: one range per PMO for attach (shared =
//! readers, exclusive = the writer) and one for pool metadata and recovery. OFD locks belong to an
//! open file description, not to a process: two descriptions opened by two threads of one process
//! conflict like two processes do, and the kernel drops a lock when its description closes, so a
//! holder that dies (even by SIGKILL) never leaves a PMO locked. Ranges may lie beyond the end of
//! the file, so locking never touches data.
#![allow(unsafe_code)] // fcntl(F_OFD_*) with a raw `struct flock`.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::last_errno;

/// Shared (many holders) or exclusive (one holder).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    Shared,
    Exclusive,
}

/// Errors of the lock layer.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot open the pool for locking: {0}")]
    Open(std::io::Error),
    #[error("fcntl({op}) failed: {}", std::io::Error::from_raw_os_error(*errno))]
    Os { op: &'static str, errno: i32 },
}

/// A held lock on `[start, start + len)`; released on drop (and by the kernel if the process dies).
#[derive(Debug)]
pub struct RangeLock {
    file: File,
    start: u64,
    len: u64,
    kind: LockKind,
}

fn flock(kind: i16, start: u64, len: u64) -> libc::flock {
    // SAFETY: `libc::flock` is a plain C struct for which all-zero bytes are a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = start as libc::off_t;
    fl.l_len = len as libc::off_t;
    fl.l_pid = 0; // must be 0 for OFD locks
    fl
}

fn lock_type(kind: LockKind) -> i16 {
    match kind {
        LockKind::Shared => libc::F_RDLCK as i16,
        LockKind::Exclusive => libc::F_WRLCK as i16,
    }
}

fn open_for_lock(path: &Path) -> Result<File, LockError> {
    // Read access is enough for read locks but write locks need a writable description.
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(LockError::Open)
}

impl RangeLock {
    /// Try once to take a lock on a fresh open file description of `path`.
    /// `Ok(None)` when another description holds a conflicting lock.
    pub fn try_acquire(
        path: &Path,
        start: u64,
        len: u64,
        kind: LockKind,
    ) -> Result<Option<RangeLock>, LockError> {
        Self::try_acquire_file(open_for_lock(path)?, start, len, kind)
    }

    /// As [`RangeLock::try_acquire`], on an open file description the caller made (opened
    /// for writing for an exclusive lock): the lock is on that very file, whatever its path
    /// names meanwhile.
    pub fn try_acquire_file(
        file: File,
        start: u64,
        len: u64,
        kind: LockKind,
    ) -> Result<Option<RangeLock>, LockError> {
        let fl = flock(lock_type(kind), start, len);
        // SAFETY: F_OFD_SETLK reads a valid `struct flock` that lives for the call.
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
        if rc == 0 {
            return Ok(Some(RangeLock {
                file,
                start,
                len,
                kind,
            }));
        }
        match last_errno() {
            libc::EAGAIN | libc::EACCES => Ok(None),
            errno => Err(LockError::Os {
                op: "F_OFD_SETLK",
                errno,
            }),
        }
    }

    /// Take a lock, waiting up to `timeout` (polling with backoff; `None` = do not wait).
    pub fn acquire(
        path: &Path,
        start: u64,
        len: u64,
        kind: LockKind,
        timeout: Option<Duration>,
    ) -> Result<Option<RangeLock>, LockError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut backoff = Duration::from_micros(50);
        loop {
            if let Some(lock) = Self::try_acquire(path, start, len, kind)? {
                return Ok(Some(lock));
            }
            match deadline {
                Some(d) if Instant::now() < d => {
                    std::thread::sleep(backoff.min(d.saturating_duration_since(Instant::now())));
                    backoff = (backoff * 2).min(Duration::from_millis(20));
                }
                _ => return Ok(None),
            }
        }
    }

    /// Take a lock, blocking until it is free (`F_OFD_SETLKW`).
    pub fn acquire_blocking(
        path: &Path,
        start: u64,
        len: u64,
        kind: LockKind,
    ) -> Result<RangeLock, LockError> {
        Self::acquire_blocking_file(open_for_lock(path)?, start, len, kind)
    }

    /// As [`RangeLock::acquire_blocking`], on an open file description the caller made.
    pub fn acquire_blocking_file(
        file: File,
        start: u64,
        len: u64,
        kind: LockKind,
    ) -> Result<RangeLock, LockError> {
        let fl = flock(lock_type(kind), start, len);
        loop {
            // SAFETY: F_OFD_SETLKW reads a valid `struct flock` that lives for the call.
            let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLKW, &fl) };
            if rc == 0 {
                return Ok(RangeLock {
                    file,
                    start,
                    len,
                    kind,
                });
            }
            match last_errno() {
                libc::EINTR => continue,
                errno => {
                    return Err(LockError::Os {
                        op: "F_OFD_SETLKW",
                        errno,
                    })
                }
            }
        }
    }

    /// The file the lock is on.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The kind of lock held.
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// Exchange an exclusive lock for a shared one (never blocks).
    pub fn downgrade(&mut self) -> Result<(), LockError> {
        let fl = flock(libc::F_RDLCK as i16, self.start, self.len);
        // SAFETY: as in `try_acquire`.
        let rc = unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
        if rc != 0 {
            return Err(LockError::Os {
                op: "F_OFD_SETLK",
                errno: last_errno(),
            });
        }
        self.kind = LockKind::Shared;
        Ok(())
    }
}

impl Drop for RangeLock {
    fn drop(&mut self) {
        let fl = flock(libc::F_UNLCK as i16, self.start, self.len);
        // SAFETY: as in `try_acquire`. Closing the file would release the lock anyway.
        unsafe { libc::fcntl(self.file.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
    }
}

/// Try once to take a lock on `[start, start + len)` through `file`'s open file description,
/// which keeps it (no guard: the caller releases it with [`unlock_file`], or takes a shared
/// lock over its own exclusive one to downgrade). `Ok(false)` when another description holds
/// a conflicting lock. For a caller that arbitrates between its own holders itself (one
/// description per pool in a process: `pmo_meta::locks`).
pub fn lock_file(file: &File, start: u64, len: u64, kind: LockKind) -> Result<bool, LockError> {
    let fl = flock(lock_type(kind), start, len);
    // SAFETY: F_OFD_SETLK reads a valid `struct flock` that lives for the call.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
    if rc == 0 {
        return Ok(true);
    }
    match last_errno() {
        libc::EAGAIN | libc::EACCES => Ok(false),
        errno => Err(LockError::Os {
            op: "F_OFD_SETLK",
            errno,
        }),
    }
}

/// Release what `file`'s description holds on `[start, start + len)`.
pub fn unlock_file(file: &File, start: u64, len: u64) {
    let fl = flock(libc::F_UNLCK as i16, start, len);
    // SAFETY: as in `lock_file`.
    unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
}

/// Open `path` read-write for [`lock_file`].
pub fn open_lock_file(path: &Path) -> Result<File, LockError> {
    open_for_lock(path)
}

/// This process's id, without a system call after the first (a fork child learns its own
/// through `pthread_atfork`). Not for signal handlers (the first call registers the hook).
pub fn pid() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static PID: AtomicU32 = AtomicU32::new(0);
    static HOOK: std::sync::Once = std::sync::Once::new();
    extern "C" fn child() {
        PID.store(0, Ordering::SeqCst);
    }
    HOOK.call_once(|| {
        // SAFETY: registers a child hook that only stores an atomic. Without it (ENOMEM) the
        // cache is not used.
        if unsafe { libc::pthread_atfork(None, None, Some(child)) } != 0 {
            PID.store(u32::MAX, Ordering::SeqCst);
        }
    });
    match PID.load(Ordering::Acquire) {
        0 => {
            // SAFETY: plain system call without arguments.
            let p = unsafe { libc::getpid() } as u32;
            let _ = PID.compare_exchange(0, p, Ordering::AcqRel, Ordering::Acquire);
            p
        }
        // SAFETY: plain system call without arguments.
        u32::MAX => unsafe { libc::getpid() as u32 },
        p => p,
    }
}

/// Who holds `[start, start+len)` as seen from `file`'s description: `None` if free, else the
/// strongest conflicting kind (asking for an exclusive lock reveals both kinds).
pub fn query(file: &File, start: u64, len: u64) -> Result<Option<LockKind>, LockError> {
    let mut fl = flock(libc::F_WRLCK as i16, start, len);
    // SAFETY: F_OFD_GETLK reads and writes a valid `struct flock` that lives for the call.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut fl) };
    if rc != 0 {
        return Err(LockError::Os {
            op: "F_OFD_GETLK",
            errno: last_errno(),
        });
    }
    Ok(match fl.l_type as i32 {
        libc::F_UNLCK => None,
        libc::F_RDLCK => Some(LockKind::Shared),
        _ => Some(LockKind::Exclusive),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("pmo-lock-{name}-{}", std::process::id()));
        std::fs::write(&p, b"x").unwrap();
        p
    }

    #[test]
    fn readers_share_writer_excludes() {
        let p = tmp("rw");
        let r1 = RangeLock::try_acquire(&p, 1 << 40, 1, LockKind::Shared)
            .unwrap()
            .unwrap();
        let r2 = RangeLock::try_acquire(&p, 1 << 40, 1, LockKind::Shared).unwrap();
        assert!(r2.is_some());
        assert!(RangeLock::try_acquire(&p, 1 << 40, 1, LockKind::Exclusive)
            .unwrap()
            .is_none());
        let probe = File::open(&p).unwrap();
        assert_eq!(query(&probe, 1 << 40, 1).unwrap(), Some(LockKind::Shared));
        drop((r1, r2));
        let w = RangeLock::try_acquire(&p, 1 << 40, 1, LockKind::Exclusive)
            .unwrap()
            .unwrap();
        assert_eq!(
            query(&probe, 1 << 40, 1).unwrap(),
            Some(LockKind::Exclusive)
        );
        assert!(RangeLock::try_acquire(&p, 1 << 40, 1, LockKind::Shared)
            .unwrap()
            .is_none());
        // A different byte is a different lock.
        assert!(
            RangeLock::try_acquire(&p, (1 << 40) + 1, 1, LockKind::Exclusive)
                .unwrap()
                .is_some()
        );
        drop(w);
        assert_eq!(query(&probe, 1 << 40, 1).unwrap(), None);
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn waiting_times_out_then_succeeds_after_release() {
        let p = tmp("wait");
        let w = RangeLock::try_acquire(&p, 7, 1, LockKind::Exclusive)
            .unwrap()
            .unwrap();
        let t0 = Instant::now();
        assert!(RangeLock::acquire(
            &p,
            7,
            1,
            LockKind::Exclusive,
            Some(Duration::from_millis(30))
        )
        .unwrap()
        .is_none());
        assert!(t0.elapsed() >= Duration::from_millis(30));
        let p2 = p.clone();
        let h = std::thread::spawn(move || {
            RangeLock::acquire(&p2, 7, 1, LockKind::Exclusive, Some(Duration::from_secs(5)))
                .unwrap()
                .is_some()
        });
        std::thread::sleep(Duration::from_millis(20));
        drop(w);
        assert!(h.join().unwrap());
        std::fs::remove_file(&p).unwrap();
    }
}
