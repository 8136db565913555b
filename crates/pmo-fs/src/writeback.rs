//! Closed files kept attached until their write-back, as a kernel keeps a closed file's dirty
//! pages in its page cache (issue 29: the file store against ext4).
//!
//! A file's last close used to psync it and detach its PMOs. The close now leaves them
//! attached, the file *kept*, until the first of:
//! - [`WriteBack::after`] has passed since the close (a background thread of the store looks
//!   every quarter of it);
//! - the kept files exceed [`WriteBack::max_bytes`] or [`WriteBack::max_files`] (the oldest
//!   go first);
//! - the store is dropped, or [`crate::FileStore::sync_all`] is called (every kept file);
//! - another call needs the file detached (`unlink`; `check_data` writes every one back first).
//!
//! Written-back means: psynced if written (segments, then the first PMO), then detached, which
//! zeroes its plaintext (the security model's "nothing readable after detach" holds at the
//! write-back, not at the close). A next open of a kept file takes it as it is: no attach, no
//! decryption, no psync, as a kernel serves a cached file. A file without unsynced writes is
//! kept as well (its write-back is the detach alone): Filebench's webserver, which reads a
//! thousand files whole, ran 9x faster for it. Each kept file holds its attach lock, an OFD
//! lock on the pool file, and the kernel walks all of a file's locks at each lock operation;
//! attach locks span their PMO's extent (`pmo_meta::locks::attach_span`) so that those of
//! PMOs adjacent in the pool merge into one, which is what made keeping many files pay (before
//! it, kept clean files made varmail 10-20% slower). [`WriteBack::clean`] off keeps only files
//! with unsynced writes.
//!
//! What it changes for a user: **a close is no longer durable by itself**: `fsync` is, as in
//! POSIX. After a crash a file reads as of its last fsync or write-back, so at most `after`
//! (1 s by default) of closed, unsynced writes are lost, as ext4 loses up to its commit
//! interval. Another process opening a kept file waits for its write-back (its attach waits up
//! to [`crate::store::ATTACH_WAIT`]); a file this process opens again within `after` of each
//! close stays kept, and another process finds it busy, as it would an open file. A closed file's plaintext stays in DRAM for up to
//! `after`. [`WriteBack::AT_CLOSE`] keeps the old behaviour: every last close psyncs and
//! detaches.
//!
//! A write-back that fails (the medium failing under a psync) has no caller to tell: its error
//! is kept, and the next [`crate::FileStore::sync_all`] returns the oldest one kept.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::path::FsPath;

/// When a closed file is written back (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteBack {
    /// The longest a closed file stays kept (zero: written back at its close).
    pub after: Duration,
    /// The most bytes of PMOs kept attached after their files' last close.
    pub max_bytes: u64,
    /// The most files kept. Each holds its attach lock, an OFD lock on the pool file, and the
    /// kernel walks every lock of the file at each lock and unlock: a thousand kept files made
    /// every attach, pcreate and pdestroy slower than the re-attaches they saved.
    pub max_files: usize,
    /// Keep files closed without unsynced writes too (their next open takes them as they are;
    /// `PMO_FS_WRITE_BACK_CLEAN=0` turns it off).
    pub clean: bool,
}

impl WriteBack {
    /// Every last close psyncs and detaches (the file store before write-back).
    pub const AT_CLOSE: WriteBack = WriteBack {
        after: Duration::ZERO,
        max_bytes: 0,
        max_files: 0,
        clean: false,
    };

    /// The default: 1 s, 256 MiB, 1024 files, clean ones too.
    pub const DEFAULT: WriteBack = WriteBack {
        after: Duration::from_secs(1),
        max_bytes: 256 << 20,
        max_files: 1024,
        clean: true,
    };

    /// Whether closed files are kept at all.
    pub fn keeps(&self) -> bool {
        !self.after.is_zero() && self.max_bytes > 0 && self.max_files > 0
    }
}

impl WriteBack {
    /// `PMO_FS_WRITE_BACK_MS`: the delay in milliseconds (0: at close), with the default bytes;
    /// `None` when unset or not a number.
    pub fn from_env() -> Option<WriteBack> {
        let num = |k: &str| std::env::var(k).ok()?.trim().parse::<u64>().ok();
        let ms = num("PMO_FS_WRITE_BACK_MS");
        let files = num("PMO_FS_WRITE_BACK_FILES");
        let clean = num("PMO_FS_WRITE_BACK_CLEAN");
        if ms.is_none() && files.is_none() && clean.is_none() {
            return None;
        }
        let d = WriteBack::DEFAULT;
        Some(WriteBack {
            after: ms.map_or(d.after, Duration::from_millis),
            max_files: files.map_or(d.max_files, |f| f as usize),
            clean: clean.map_or(d.clean, |c| c != 0),
            ..d
        })
    }
}

/// [`WriteBack::from_env`], else [`WriteBack::DEFAULT`].
impl Default for WriteBack {
    fn default() -> Self {
        WriteBack::from_env().unwrap_or(WriteBack::DEFAULT)
    }
}

/// The kept files, oldest close first.
#[derive(Default)]
pub(crate) struct Closed {
    /// Close number -> (path, when closed, bytes attached).
    order: BTreeMap<u64, (FsPath, Instant, u64)>,
    bytes: u64,
    next: u64,
}

impl Closed {
    /// A file of `bytes` closed now: its number, to take it back with [`Closed::remove`].
    pub(crate) fn push(&mut self, path: FsPath, bytes: u64) -> u64 {
        self.next += 1;
        self.order.insert(self.next, (path, Instant::now(), bytes));
        self.bytes += bytes;
        self.next
    }

    /// The file closed as number `n` is open again (or gone).
    pub(crate) fn remove(&mut self, n: u64) {
        if let Some((_, _, b)) = self.order.remove(&n) {
            self.bytes -= b;
        }
    }

    /// Take the files due for write-back by `policy` at `now` (all of them if `all`), oldest
    /// first.
    pub(crate) fn due(&mut self, policy: &WriteBack, now: Instant, all: bool) -> Vec<FsPath> {
        let mut out = Vec::new();
        loop {
            let kept = self.order.len();
            let Some(entry) = self.order.first_entry() else {
                break;
            };
            let (_, at, _) = entry.get();
            let old = now.saturating_duration_since(*at) >= policy.after;
            let over = self.bytes > policy.max_bytes || kept > policy.max_files;
            if !(all || old || over) {
                break;
            }
            let (path, _, b) = entry.remove();
            self.bytes -= b;
            out.push(path);
        }
        out
    }

    /// Bytes kept now.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Files kept now.
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }
}

/// The store's write-back thread: stopped and joined on drop, before the store's last
/// reference goes (so the store's final write-back runs in the dropping thread).
pub(crate) struct Flusher {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    /// Run `pass` on `target` every `every` until dropped (or `target` is gone).
    pub(crate) fn start<T: Send + Sync + 'static>(
        target: Weak<T>,
        every: Duration,
        pass: fn(&T),
    ) -> std::io::Result<Flusher> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("pmo-fs-writeback".into())
            .spawn(move || loop {
                {
                    let (m, cv) = &*s;
                    let g = m.lock().unwrap_or_else(|e| e.into_inner());
                    let (g, _) = cv
                        .wait_timeout_while(g, every, |stopped| !*stopped)
                        .unwrap_or_else(|e| e.into_inner());
                    if *g {
                        return;
                    }
                }
                match target.upgrade() {
                    Some(t) => pass(&t),
                    None => return,
                }
            })?;
        Ok(Flusher {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        let (m, cv) = &*self.stop;
        *m.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> FsPath {
        FsPath::parse(s).unwrap()
    }

    #[test]
    fn the_oldest_go_first_by_age_or_bytes() {
        let policy = WriteBack {
            after: Duration::from_secs(60),
            max_bytes: 100,
            max_files: 10,
            clean: false,
        };
        let mut c = Closed::default();
        let a = c.push(p("/a"), 40);
        c.push(p("/b"), 40);
        let now = Instant::now();
        assert!(
            c.due(&policy, now, false).is_empty(),
            "80 of 100 bytes, young"
        );
        c.push(p("/c"), 40);
        assert_eq!(c.due(&policy, now, false), vec![p("/a")], "over the bytes");
        assert_eq!((c.len(), c.bytes()), (2, 80));
        c.remove(a); // already gone: nothing changes
        assert_eq!((c.len(), c.bytes()), (2, 80));
        let later = now + Duration::from_secs(61);
        assert_eq!(c.due(&policy, later, false), vec![p("/b"), p("/c")]);
        assert_eq!((c.len(), c.bytes()), (0, 0));
    }

    #[test]
    fn an_open_again_file_is_not_written_back_and_all_takes_the_rest() {
        let mut c = Closed::default();
        let a = c.push(p("/a"), 10);
        c.push(p("/b"), 10);
        c.remove(a);
        assert_eq!(c.bytes(), 10);
        assert_eq!(
            c.due(&WriteBack::DEFAULT, Instant::now(), true),
            vec![p("/b")]
        );
        assert!(!WriteBack::AT_CLOSE.keeps());
        assert!(WriteBack::DEFAULT.keeps());
    }

    #[test]
    fn past_the_file_bound_the_oldest_go() {
        let policy = WriteBack {
            after: Duration::from_secs(60),
            max_bytes: 1 << 30,
            max_files: 2,
            clean: false,
        };
        let mut c = Closed::default();
        for name in ["/a", "/b", "/c"] {
            c.push(p(name), 1);
        }
        assert_eq!(c.due(&policy, Instant::now(), false), vec![p("/a")]);
        assert_eq!(c.len(), 2);
    }
}
