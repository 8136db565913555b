//! The interpreter: set up a workload's filesets on a backend, run its threads' flowops until
//! the run time is up (or, as `set mode quit` says, a thread runs out of work: a
//! `finishoncount` reached, no file to pick), and count every flowop. `opslimit` and the event
//! generator: [`crate::events`].
//!
//! Filesets: entry `i` of fileset `name` at `path` is `path/name/D1/.../Dk/0000000(i+1)`, with
//! directory levels so that no directory holds more than `dirwidth` entries (Filebench's
//! layout); a `define file` is `path/name` itself. `prealloc` percent of the entries are
//! created (and written to their drawn size) before the timed run. A flowop that needs an
//! existing file picks one at random (preferring files no thread has open), one that creates
//! picks an absent entry; when none is available it counts as "no resource" and the thread
//! moves on, as Filebench does.
//!
//! Sync modes ([`SyncMode`]): `paper` psyncs (fsyncs) after every write flowop, with a barrier
//! across the writing threads before and after it (the seeds' port); `fsync` only where the
//! workload says `fsync`. The pmo file store also psyncs a written file at its last close.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::backend::{Backend, BackendError, BackendFile};
use crate::events::{EventGen, OpsLimit};
use crate::model::{Dist, Flowop, FlowopKind, QuitMode, Workload};
use crate::sync::SyncPoint;

/// When psync (fsync) happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// After every write flowop, with a barrier across the writing threads before and after.
    Paper,
    /// Only at the workload's own `fsync` flowops.
    Fsync,
}

impl SyncMode {
    pub fn name(self) -> &'static str {
        match self {
            SyncMode::Paper => "paper",
            SyncMode::Fsync => "fsync",
        }
    }
    pub fn from_name(s: &str) -> Option<SyncMode> {
        match s {
            "paper" => Some(SyncMode::Paper),
            "fsync" => Some(SyncMode::Fsync),
            _ => None,
        }
    }
}

/// How to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Cap on the run time whatever the workload's `run` line says.
    pub seconds_cap: Option<f64>,
    /// Run time when the workload has no `run N` and no cap is given.
    pub default_seconds: f64,
    pub sync: SyncMode,
    pub seed: u64,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            seconds_cap: None,
            default_seconds: 60.0,
            sync: SyncMode::Fsync,
            seed: 0x5eed,
        }
    }
}

/// What went wrong in a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("setting up fileset '{fileset}': {source}")]
    Setup {
        fileset: String,
        source: BackendError,
    },
    #[error("{at}: flowop {flowop} (thread {thread}): {source}")]
    Flowop {
        /// `FILE:LINE` of the flowop (just the label for a built-in personality).
        at: String,
        flowop: String,
        thread: usize,
        source: BackendError,
    },
    #[error("{0}")]
    Invalid(String),
}

/// Figures of one flowop (summed over the threads running it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FlowopStats {
    pub name: String,
    pub ops: u64,
    pub bytes: u64,
    /// Total time inside the flowop (nanoseconds), the paper-mode psync included.
    pub busy_ns: u64,
    /// Times no file was available.
    pub norsc: u64,
}

impl FlowopStats {
    /// Mean latency in microseconds.
    pub fn mean_us(&self) -> f64 {
        if self.ops == 0 {
            0.0
        } else {
            self.busy_ns as f64 / self.ops as f64 / 1e3
        }
    }
}

/// Figures of one run.
#[derive(Clone, Debug, Default)]
pub struct RunResult {
    pub seconds: f64,
    pub setup_seconds: f64,
    pub threads: usize,
    pub ops: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// fsyncs (psyncs on the pmo backend) the interpreter asked for.
    pub syncs: u64,
    pub flowops: Vec<FlowopStats>,
    /// The workload's notes ([`Workload::notes`]): what ran differently from Filebench.
    pub notes: Vec<String>,
}

impl RunResult {
    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.seconds.max(1e-9)
    }
    pub fn mb_per_s(&self) -> f64 {
        (self.read_bytes + self.write_bytes) as f64 / 1e6 / self.seconds.max(1e-9)
    }
}

/// A set of entry indices with O(1) insert, remove and random pick.
#[derive(Default)]
struct Bag {
    items: Vec<usize>,
    pos: Vec<usize>,
}

impl Bag {
    fn new(n: usize) -> Bag {
        Bag {
            items: Vec::new(),
            pos: vec![usize::MAX; n],
        }
    }
    fn insert(&mut self, i: usize) {
        if self.pos[i] == usize::MAX {
            self.pos[i] = self.items.len();
            self.items.push(i);
        }
    }
    fn remove(&mut self, i: usize) {
        let p = self.pos[i];
        if p == usize::MAX {
            return;
        }
        self.items.swap_remove(p);
        if let Some(&moved) = self.items.get(p) {
            self.pos[moved] = p;
        }
        self.pos[i] = usize::MAX;
    }
    fn random(&self, rng: &mut StdRng) -> Option<usize> {
        (!self.items.is_empty()).then(|| self.items[rng.gen_range(0..self.items.len())])
    }
}

struct SetState {
    sizes: Vec<u64>,
    opens: Vec<u32>,
    /// Exist and no create or delete is under way.
    present: Bag,
    /// Do not exist and no create is under way.
    absent: Bag,
}

struct Fileset {
    paths: Vec<String>,
    dirs: Vec<String>,
    state: Mutex<SetState>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Fileset {
    fn new(spec: &crate::model::FilesetSpec, rng: &mut StdRng) -> Fileset {
        let n = spec.entries as usize;
        let root = format!("{}/{}", spec.path.trim_end_matches('/'), spec.name);
        let mut dirs = vec![];
        let paths: Vec<String> = if spec.single_file {
            dirs.push(spec.path.clone());
            vec![root]
        } else {
            let w = spec.dirwidth.max(2) as usize;
            let leaves = n.div_ceil(w);
            let mut levels = 0;
            let mut cap = 1usize;
            while cap < leaves {
                cap = cap.saturating_mul(w);
                levels += 1;
            }
            let mut set = std::collections::BTreeSet::new();
            let paths = (0..n)
                .map(|i| {
                    let mut dir = root.clone();
                    let mut leaf = i / w;
                    let mut parts = vec![];
                    for _ in 0..levels {
                        parts.push(leaf % w);
                        leaf /= w;
                    }
                    for p in parts.iter().rev() {
                        dir.push_str(&format!("/{:08}", p + 1));
                    }
                    set.insert(dir.clone());
                    format!("{dir}/{:08}", i + 1)
                })
                .collect();
            dirs.extend(set);
            paths
        };
        let sizes = (0..n).map(|_| spec.size.sample(rng)).collect();
        Fileset {
            paths,
            dirs,
            state: Mutex::new(SetState {
                sizes,
                opens: vec![0; n],
                present: Bag::new(n),
                absent: Bag::new(n),
            }),
        }
    }

    /// An existing entry for reading, stat or delete (preferring unopened ones); `opens` is
    /// raised. `exclusive`: only an unopened entry, taken out of `present` (delete).
    fn pick_present(&self, rng: &mut StdRng, exclusive: bool) -> Option<usize> {
        let mut s = lock(&self.state);
        let mut found = None;
        for _ in 0..16 {
            let i = s.present.random(rng)?;
            if s.opens[i] == 0 {
                found = Some(i);
                break;
            }
        }
        if found.is_none() {
            found = s.present.items.iter().copied().find(|&i| s.opens[i] == 0);
        }
        if found.is_none() && !exclusive {
            found = s.present.random(rng);
        }
        let i = found?;
        if exclusive {
            s.present.remove(i);
        } else {
            s.opens[i] += 1;
        }
        Some(i)
    }

    /// Entry `index % entries` (`indexed=`): as [`Fileset::pick_present`] (`present`) or
    /// [`Fileset::pick_absent`] would take it, when it is in that state.
    fn pick_index(&self, index: u64, present: bool, exclusive: bool) -> Option<usize> {
        let mut s = lock(&self.state);
        let i = (index % self.paths.len() as u64) as usize;
        let bag = if present { &s.present } else { &s.absent };
        if bag.pos[i] == usize::MAX || (exclusive && s.opens[i] > 0) {
            return None;
        }
        if !present || exclusive {
            if present {
                s.present.remove(i);
            } else {
                s.absent.remove(i);
            }
        } else {
            s.opens[i] += 1;
        }
        Some(i)
    }

    fn pick_absent(&self, rng: &mut StdRng) -> Option<usize> {
        let mut s = lock(&self.state);
        let i = s.absent.random(rng)?;
        s.absent.remove(i);
        Some(i)
    }

    /// A create finished (`ok`: the file exists, opened once) or failed.
    fn created(&self, i: usize, ok: bool) {
        let mut s = lock(&self.state);
        if ok {
            s.opens[i] += 1;
            s.present.insert(i);
        } else {
            s.absent.insert(i);
        }
    }

    fn release(&self, i: usize) {
        let mut s = lock(&self.state);
        s.opens[i] = s.opens[i].saturating_sub(1);
    }

    fn deleted(&self, i: usize, ok: bool) {
        let mut s = lock(&self.state);
        if ok {
            s.absent.insert(i);
        } else {
            s.present.insert(i);
        }
    }

    fn size(&self, i: usize) -> u64 {
        lock(&self.state).sizes[i]
    }
}

/// `sizeof(struct dirent)` on Linux x86-64, what Filebench's `listdir` counts per entry.
const DIRENT_BYTES: u64 = 280;

/// Sleep until `until`, or until `stop` is set or `deadline` passes (`delay`).
fn sleep_until(until: Instant, stop: &AtomicBool, deadline: Instant) {
    let end = until.min(deadline);
    while !stop.load(Ordering::Relaxed) {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(Duration::from_millis(10)));
    }
}

/// `hog value=N`: N stores to one byte of the thread's memory, each kept by `black_box`
/// (Filebench's `*(threadflow->tf_mem) = 1` loop: CPU time, no I/O), cut short when the run
/// ends (`stop` or `deadline`), which it checks every 2^20 stores.
fn hog(mem: &mut u8, n: u64, stop: &AtomicBool, deadline: Instant) {
    const CHUNK: u64 = 1 << 20;
    let mut left = n;
    while left > 0 {
        for _ in 0..left.min(CHUNK) {
            *std::hint::black_box(&mut *mem) = 1;
        }
        left = left.saturating_sub(CHUNK);
        if left > 0 && (stop.load(Ordering::Relaxed) || Instant::now() >= deadline) {
            break;
        }
    }
}

/// A barrier whose party count shrinks as threads leave.
struct Phaser {
    m: Mutex<(usize, usize, u64)>,
    cv: Condvar,
}

impl Phaser {
    fn new(parties: usize) -> Phaser {
        Phaser {
            m: Mutex::new((parties, 0, 0)),
            cv: Condvar::new(),
        }
    }
    fn wait(&self, stop: &AtomicBool) {
        let mut g = lock(&self.m);
        g.1 += 1;
        if g.1 >= g.0 {
            g.1 = 0;
            g.2 += 1;
            self.cv.notify_all();
            return;
        }
        let gen = g.2;
        while g.2 == gen && !stop.load(Ordering::Relaxed) {
            g = self
                .cv
                .wait_timeout(g, Duration::from_millis(20))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
    fn leave(&self) {
        let mut g = lock(&self.m);
        g.0 = g.0.saturating_sub(1);
        if g.1 > 0 && g.1 >= g.0 {
            g.1 = 0;
            g.2 += 1;
            self.cv.notify_all();
        }
    }
}

struct Shared<'a> {
    w: &'a Workload,
    backend: &'a dyn Backend,
    sets: Vec<Fileset>,
    stop: AtomicBool,
    error: Mutex<Option<RunError>>,
    phaser: Phaser,
    sync: SyncMode,
    /// Operations of every I/O flowop so far (Filebench's `controlstats.fs_count`, what
    /// `opslimit` and `finishoncount` watch without a target).
    io_ops: AtomicU64,
    /// Bytes of every I/O flowop so far (`controlstats.fs_bytes`, for `finishonbytes`).
    io_bytes: AtomicU64,
    /// Read and write operations so far (`fs_rcount + fs_wcount`, what `iopslimit` watches
    /// without a target).
    rw_ops: AtomicU64,
    events: Option<EventGen>,
    /// `block` / `semblock` points: `points[thread][flowop]`, and by flowop name (what
    /// `wakeup` and `sempost` target).
    points: Vec<Vec<Option<Arc<SyncPoint>>>>,
    by_name: HashMap<String, Vec<Arc<SyncPoint>>>,
}

struct OpenFd {
    file: Box<dyn BackendFile>,
    set: usize,
    entry: usize,
    offset: u64,
}

#[derive(Default, Clone, Copy)]
struct Tally {
    ops: u64,
    bytes: u64,
    busy_ns: u64,
    norsc: u64,
}

enum Outcome {
    Done { read: u64, written: u64 },
    NoResource,
}

struct Worker<'a, 'b> {
    sh: &'b Shared<'a>,
    rng: StdRng,
    fds: HashMap<u32, OpenFd>,
    buf: Vec<u8>,
    syncs: u64,
    /// The byte `hog` stores to (Filebench's `tf_mem`).
    hog: u8,
    /// The descriptor slot the current flowop uses (its `fd`, or with `opennext` the
    /// rotor's).
    cur_fd: u32,
    /// `opennext`'s rotor (Filebench's `tf_fdrotor`, counting down from 128).
    fd_rotor: u32,
    /// The file last opened or created in each descriptor slot, kept after its close
    /// (Filebench's `tf_fse`: what `deletefile fd=N` deletes).
    fse: HashMap<u32, (usize, usize)>,
    /// The thread's `memsize`: the largest iosize its flowops may use (0: no bound).
    memsize: u64,
}

/// Filebench's `THREADFLOW_MAXFD`: the descriptor slots `opennext` rotates over.
const MAX_FD: u32 = 128;

impl Worker<'_, '_> {
    /// An existing entry of `set` (by `indexed`'s draw when given, else at random).
    fn pick_present(
        &mut self,
        set: usize,
        indexed: Option<&Dist>,
        exclusive: bool,
    ) -> Option<usize> {
        let fs = &self.sh.sets[set];
        match indexed {
            Some(d) => fs.pick_index(d.sample(&mut self.rng), true, exclusive),
            None => fs.pick_present(&mut self.rng, exclusive),
        }
    }

    fn open_from(&mut self, set: usize, f: &Flowop) -> Result<Option<OpenFd>, BackendError> {
        let indexed = f.indexed.as_ref();
        let Some(i) = self.pick_present(set, indexed, false) else {
            return Ok(None);
        };
        let fs = &self.sh.sets[set];
        let opened = if f.directio {
            self.sh.backend.open_direct(&fs.paths[i])
        } else {
            self.sh.backend.open(&fs.paths[i])
        };
        match opened {
            Ok(file) => Ok(Some(OpenFd {
                file,
                set,
                entry: i,
                offset: 0,
            })),
            Err(e) => {
                fs.release(i);
                Err(e)
            }
        }
    }

    fn put_fd(&mut self, fd: u32, o: OpenFd) {
        self.fse.insert(fd, (o.set, o.entry));
        self.fds.insert(fd, o);
    }

    fn close_fd(&mut self, fd: u32) -> Result<(), BackendError> {
        if let Some(o) = self.fds.remove(&fd) {
            let r = o.file.close();
            self.sh.sets[o.set].release(o.entry);
            r?;
        }
        Ok(())
    }

    /// The file behind `fd`, opened from the flowop's fileset if it is not open.
    fn fd_file(&mut self, f: &Flowop) -> Result<Option<&mut OpenFd>, BackendError> {
        if f.opennext && f.fd == 0 {
            if self.fd_rotor == 0 {
                self.fd_rotor = MAX_FD;
            }
            self.fd_rotor -= 1;
            self.cur_fd = self.fd_rotor;
        }
        let fd = self.cur_fd;
        if !self.fds.contains_key(&fd) {
            let Some(set) = f.fileset else {
                return Ok(None);
            };
            let Some(o) = self.open_from(set, f)? else {
                return Ok(None);
            };
            self.put_fd(fd, o);
        }
        Ok(self.fds.get_mut(&fd))
    }

    /// Grow the I/O buffer to `n` bytes. As Filebench (`flowoplib_iobufsetup`), an iosize
    /// larger than the thread's `memsize` is the flowop's error (a `memsize` of 0 means a
    /// private buffer of any size); so is one that no allocation can hold or that is more than
    /// the memory available (filling it would end in the OOM killer, not an error).
    fn fill_buf(&mut self, n: u64) -> Result<usize, BackendError> {
        if self.memsize != 0 && n > self.memsize {
            return Err(BackendError::IoSize {
                iosize: n,
                memsize: self.memsize,
            });
        }
        let n = usize::try_from(n).map_err(|_| BackendError::Buffer(n))?;
        if self.buf.len() < n {
            if pmo_os::mem_available().is_some_and(|a| (n - self.buf.len()) as u64 > a) {
                return Err(BackendError::Buffer(n as u64));
            }
            let start = self.buf.len();
            self.buf
                .try_reserve_exact(n - start)
                .map_err(|_| BackendError::Buffer(n as u64))?;
            self.buf
                .extend((start..n).map(|i| (i as u8).wrapping_mul(37).wrapping_add(11)));
        }
        Ok(n)
    }

    fn exec(&mut self, f: &Flowop) -> Result<Outcome, BackendError> {
        let none = Ok(Outcome::NoResource);
        let done = |read, written| Ok(Outcome::Done { read, written });
        self.cur_fd = f.fd;
        match f.kind {
            FlowopKind::CreateFile => {
                let set = f.fileset.unwrap_or(0);
                self.close_fd(f.fd)?;
                let picked = match &f.indexed {
                    Some(d) => {
                        let n = d.sample(&mut self.rng);
                        self.sh.sets[set].pick_index(n, false, false)
                    }
                    None => self.sh.sets[set].pick_absent(&mut self.rng),
                };
                let fs = &self.sh.sets[set];
                let Some(i) = picked else {
                    return none;
                };
                let created = if f.directio {
                    self.sh.backend.create_direct(&fs.paths[i], fs.size(i))
                } else {
                    self.sh.backend.create(&fs.paths[i], fs.size(i))
                };
                match created {
                    Ok(file) => {
                        fs.created(i, true);
                        self.put_fd(
                            f.fd,
                            OpenFd {
                                file,
                                set,
                                entry: i,
                                offset: 0,
                            },
                        );
                        done(0, 0)
                    }
                    Err(e) => {
                        fs.created(i, false);
                        Err(e)
                    }
                }
            }
            FlowopKind::OpenFile => {
                self.close_fd(f.fd)?;
                let Some(set) = f.fileset else { return none };
                match self.open_from(set, f)? {
                    Some(o) => {
                        self.put_fd(f.fd, o);
                        done(0, 0)
                    }
                    None => none,
                }
            }
            FlowopKind::CloseFile => {
                if !self.fds.contains_key(&f.fd) {
                    return none;
                }
                self.close_fd(f.fd)?;
                done(0, 0)
            }
            FlowopKind::ReadWholeFile => {
                let io = f.iosize.sample(&mut self.rng).max(1);
                let io = self.fill_buf(io)?;
                let mut buf = std::mem::take(&mut self.buf);
                let r: Result<Option<u64>, BackendError> = (|| {
                    let Some(o) = self.fd_file(f)? else {
                        return Ok(None);
                    };
                    let mut off = 0u64;
                    loop {
                        let n = o.file.pread(off, &mut buf[..io])?;
                        off += n as u64;
                        if n < io {
                            break;
                        }
                    }
                    Ok(Some(off))
                })();
                self.buf = buf;
                match r? {
                    Some(n) => done(n, 0),
                    None => none,
                }
            }
            FlowopKind::WriteWholeFile => {
                let io = f.iosize.sample(&mut self.rng).max(1);
                let size = match self.fds.get(&f.srcfd.unwrap_or(f.fd)) {
                    Some(s) => self.sh.sets[s.set].size(s.entry),
                    None => return none,
                };
                let io = self.fill_buf(io)?;
                let buf = std::mem::take(&mut self.buf);
                let r: Result<bool, BackendError> = (|| {
                    let Some(o) = self.fd_file(f)? else {
                        return Ok(false);
                    };
                    let mut off = 0u64;
                    while off < size {
                        let k = (size - off).min(io as u64) as usize;
                        o.file.pwrite(off, &buf[..k])?;
                        off += k as u64;
                    }
                    Ok(true)
                })();
                self.buf = buf;
                if r? {
                    done(0, size)
                } else {
                    none
                }
            }
            FlowopKind::AppendFile | FlowopKind::AppendFileRand => {
                let io = f.iosize.sample(&mut self.rng).max(1);
                // Filebench sets up a buffer of the whole iosize, then appends a random part.
                let io = self.fill_buf(io)?;
                let n = if f.kind == FlowopKind::AppendFileRand {
                    self.rng.gen_range(1..=io)
                } else {
                    io
                };
                let buf = std::mem::take(&mut self.buf);
                let r: Result<bool, BackendError> = (|| {
                    let Some(o) = self.fd_file(f)? else {
                        return Ok(false);
                    };
                    o.file.append(&buf[..n])?;
                    Ok(true)
                })();
                self.buf = buf;
                if r? {
                    done(0, n as u64)
                } else {
                    none
                }
            }
            FlowopKind::Read | FlowopKind::Write | FlowopKind::AioWrite => {
                let io = f.iosize.sample(&mut self.rng).max(1);
                self.fill_buf(io)?;
                let mut buf = std::mem::take(&mut self.buf);
                let mut rng = self.rng.clone();
                let r: Result<Option<u64>, BackendError> = (|| {
                    let Some(o) = self.fd_file(f)? else {
                        return Ok(None);
                    };
                    let size = o.file.size()?;
                    let span = if f.workingset > 0 { f.workingset } else { size };
                    let off = if f.random {
                        // Filebench's fb_random64(.., wss, iosize, ..): uniform in
                        // [0, span - iosize], rounded down to a multiple of iosize.
                        let max = span.saturating_sub(io);
                        rng.gen_range(0..=max) / io * io
                    } else {
                        if o.offset.saturating_add(io) > span.max(io) {
                            o.offset = 0;
                        }
                        o.offset
                    };
                    let n = if f.kind == FlowopKind::Read {
                        o.file.pread(off, &mut buf[..io as usize])? as u64
                    } else {
                        o.file.pwrite(off, &buf[..io as usize])?;
                        io
                    };
                    o.offset = off + n;
                    Ok(Some(n))
                })();
                self.rng = rng;
                self.buf = buf;
                match r? {
                    Some(n) if f.kind == FlowopKind::Read => done(n, 0),
                    Some(n) => done(0, n),
                    None => none,
                }
            }
            FlowopKind::DeleteFile | FlowopKind::RemoveDir => {
                // `deletefile fd=N`: the file slot N last held (if nobody has it open).
                let by_fd = match (f.kind, f.fd) {
                    (FlowopKind::DeleteFile, 1..) => self.fse.remove(&f.fd),
                    _ => None,
                };
                let (set, picked) = match by_fd {
                    Some((set, i)) => (set, self.sh.sets[set].pick_index(i as u64, true, true)),
                    None => {
                        let Some(set) = f.fileset else { return none };
                        (set, self.pick_present(set, f.indexed.as_ref(), true))
                    }
                };
                let Some(i) = picked else {
                    return none;
                };
                let fs = &self.sh.sets[set];
                let r = if f.kind == FlowopKind::RemoveDir {
                    self.sh.backend.rmdir(&fs.paths[i])
                } else {
                    self.sh.backend.unlink(&fs.paths[i])
                };
                fs.deleted(i, r.is_ok());
                r?;
                done(0, 0)
            }
            FlowopKind::StatFile => {
                let Some(set) = f.fileset else { return none };
                let Some(i) = self.pick_present(set, f.indexed.as_ref(), false) else {
                    return none;
                };
                let fs = &self.sh.sets[set];
                let r = self.sh.backend.stat(&fs.paths[i]);
                fs.release(i);
                r?;
                done(0, 0)
            }
            FlowopKind::MakeDir => {
                let Some(set) = f.fileset else { return none };
                let fs = &self.sh.sets[set];
                let Some(i) = fs.pick_absent(&mut self.rng) else {
                    return none;
                };
                let r = self.sh.backend.mkdir(&fs.paths[i]);
                fs.created(i, r.is_ok());
                fs.release(i);
                r?;
                done(0, 0)
            }
            FlowopKind::ListDir => {
                let Some(set) = f.fileset else { return none };
                let dirs = &self.sh.sets[set].dirs;
                if dirs.is_empty() {
                    return none;
                }
                let d = &dirs[self.rng.gen_range(0..dirs.len())];
                // Filebench counts each entry's name plus a `struct dirent` (280 bytes on
                // Linux x86-64) less its one-byte name field as bytes read.
                let bytes: u64 = self
                    .sh
                    .backend
                    .readdir(d)?
                    .iter()
                    .map(|n| n.len() as u64 + DIRENT_BYTES - 1)
                    .sum();
                done(bytes, 0)
            }
            FlowopKind::Fsync => match self.fds.get(&f.fd) {
                Some(o) => {
                    o.file.fsync()?;
                    self.syncs += 1;
                    done(0, 0)
                }
                None => none,
            },
            // The control flowops (`FlowopKind::is_control`) are run by `thread_main`, which
            // has the counts they watch.
            _ => done(0, 0),
        }
    }
}

fn thread_main(
    sh: &Shared<'_>,
    id: usize,
    seed: u64,
    deadline: Instant,
) -> (Vec<Tally>, u64, u64, u64) {
    let spec = &sh.w.threads[id];
    let writes = spec.flowops.iter().any(|f| f.kind.writes());
    let mut wk = Worker {
        sh,
        rng: StdRng::seed_from_u64(seed ^ (id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        fds: HashMap::new(),
        buf: Vec::new(),
        syncs: 0,
        hog: 0,
        cur_fd: 0,
        fd_rotor: 0,
        fse: HashMap::new(),
        memsize: spec.memsize,
    };
    let mut tallies = vec![Tally::default(); spec.flowops.len()];
    let mut limits = vec![OpsLimit::default(); spec.flowops.len()];
    let (mut read, mut written) = (0u64, 0u64);
    let fail = |f: &Flowop, e: BackendError, id: usize| {
        let mut g = lock(&sh.error);
        if g.is_none() {
            *g = Some(RunError::Flowop {
                at: if f.pos.line > 0 {
                    format!("{}:{}", sh.w.file, f.pos.line)
                } else {
                    sh.w.file.clone()
                },
                flowop: f.name.clone(),
                thread: id,
                source: e,
            });
        }
        sh.stop.store(true, Ordering::Relaxed);
    };
    'run: while !sh.stop.load(Ordering::Relaxed) {
        for (k, f) in spec.flowops.iter().enumerate() {
            for _ in 0..f.iters {
                if sh.stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
                    break 'run;
                }
                let t = Instant::now();
                let watched = || match f.target {
                    Some(i) => tallies[i].ops,
                    None => sh.io_ops.load(Ordering::Relaxed),
                };
                let watched_bytes = || match f.target {
                    Some(i) => tallies[i].bytes,
                    None => sh.io_bytes.load(Ordering::Relaxed),
                };
                let r = match f.kind {
                    FlowopKind::FinishOnCount if watched() >= f.value => Ok(Outcome::NoResource),
                    // Filebench: strictly more bytes than the value.
                    FlowopKind::FinishOnBytes if watched_bytes() > f.value => {
                        Ok(Outcome::NoResource)
                    }
                    FlowopKind::OpsLimit => {
                        let ops = watched();
                        limits[k].run(ops, sh.events.as_ref(), &sh.stop, deadline);
                        Ok(Outcome::Done {
                            read: 0,
                            written: 0,
                        })
                    }
                    FlowopKind::IopsLimit => {
                        let ops = match f.target {
                            Some(i) => tallies[i].ops,
                            None => sh.rw_ops.load(Ordering::Relaxed),
                        };
                        limits[k].run(ops, sh.events.as_ref(), &sh.stop, deadline);
                        Ok(Outcome::Done {
                            read: 0,
                            written: 0,
                        })
                    }
                    FlowopKind::BwLimit => {
                        let bytes = watched_bytes();
                        limits[k].run_in(bytes, 1 << 20, sh.events.as_ref(), &sh.stop, deadline);
                        Ok(Outcome::Done {
                            read: 0,
                            written: 0,
                        })
                    }
                    FlowopKind::EventLimit => {
                        if let Some(g) = sh.events.as_ref() {
                            g.take(1, &sh.stop, deadline);
                        }
                        Ok(Outcome::Done {
                            read: 0,
                            written: 0,
                        })
                    }
                    FlowopKind::Delay => {
                        // A delay the clock cannot add lasts the run (as every delay past it).
                        let until = Instant::now()
                            .checked_add(Duration::from_secs(f.value))
                            .unwrap_or(deadline);
                        sleep_until(until, &sh.stop, deadline);
                        Ok(Outcome::Done {
                            read: 0,
                            written: 0,
                        })
                    }
                    FlowopKind::Hog => {
                        hog(&mut wk.hog, f.value, &sh.stop, deadline);
                        Ok(Outcome::Done {
                            read: 0,
                            written: 0,
                        })
                    }
                    // A wait the run's end cut short is not an operation.
                    FlowopKind::Block | FlowopKind::SemBlock => {
                        if let Some(p) = &sh.points[id][k] {
                            let completed = if f.kind == FlowopKind::Block {
                                p.block(&sh.stop, deadline)
                            } else {
                                p.sem_block(f.value, &sh.stop, deadline)
                            };
                            if !completed {
                                break 'run;
                            }
                        }
                        Ok(Outcome::Done {
                            read: 0,
                            written: 0,
                        })
                    }
                    FlowopKind::Wakeup | FlowopKind::SemPost => {
                        let targets = f.target_name.as_ref().and_then(|n| sh.by_name.get(n));
                        for p in targets.into_iter().flatten() {
                            if f.kind == FlowopKind::Wakeup {
                                p.wake();
                            } else if !p.sem_post(f.value, f.blocking, &sh.stop, deadline) {
                                break 'run;
                            }
                        }
                        Ok(Outcome::Done {
                            read: 0,
                            written: 0,
                        })
                    }
                    _ => wk.exec(f),
                };
                let paper_sync = sh.sync == SyncMode::Paper && f.kind.writes();
                // `dsync`: the write is durable before the flowop returns.
                let r = match r {
                    Ok(Outcome::Done { written, .. }) if f.dsync && written > 0 && !paper_sync => {
                        match wk.fds.get(&wk.cur_fd).map(|o| o.file.fsync()) {
                            Some(Err(e)) => Err(e),
                            Some(Ok(())) => {
                                wk.syncs += 1;
                                r
                            }
                            None => r,
                        }
                    }
                    r => r,
                };
                if paper_sync {
                    sh.phaser.wait(&sh.stop);
                }
                let r = match r {
                    Ok(Outcome::Done {
                        read: rd,
                        written: wr,
                    }) if paper_sync => match wk.fds.get(&wk.cur_fd).map(|o| o.file.fsync()) {
                        Some(Err(e)) => Err(e),
                        Some(Ok(())) => {
                            wk.syncs += 1;
                            Ok(Outcome::Done {
                                read: rd,
                                written: wr,
                            })
                        }
                        None => Ok(Outcome::Done {
                            read: rd,
                            written: wr,
                        }),
                    },
                    r => r,
                };
                if paper_sync {
                    sh.phaser.wait(&sh.stop);
                }
                let ns = t.elapsed().as_nanos() as u64;
                let tl = &mut tallies[k];
                match r {
                    Ok(Outcome::Done {
                        read: rd,
                        written: wr,
                    }) => {
                        tl.ops += 1;
                        tl.bytes += rd + wr;
                        tl.busy_ns += ns;
                        read += rd;
                        written += wr;
                        if f.kind.is_io() {
                            sh.io_ops.fetch_add(1, Ordering::Relaxed);
                            sh.io_bytes.fetch_add(rd + wr, Ordering::Relaxed);
                        }
                        if f.kind.reads() || f.kind.writes() {
                            sh.rw_ops.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok(Outcome::NoResource) => {
                        tl.norsc += 1;
                        // The thread has no more work (Filebench's FILEBENCH_NORSC).
                        let finished = matches!(
                            f.kind,
                            FlowopKind::FinishOnCount | FlowopKind::FinishOnBytes
                        );
                        match sh.w.quit {
                            QuitMode::FirstDone => {
                                sh.stop.store(true, Ordering::Relaxed);
                                break 'run;
                            }
                            QuitMode::AllDone => break 'run,
                            QuitMode::TimeBased if finished => {
                                sh.stop.store(true, Ordering::Relaxed);
                                break 'run;
                            }
                            QuitMode::TimeBased => {}
                        }
                    }
                    Err(e) => {
                        fail(f, e, id);
                        break 'run;
                    }
                }
            }
        }
        if spec.flowops.is_empty() {
            break;
        }
    }
    if writes && sh.sync == SyncMode::Paper {
        sh.phaser.leave();
    }
    let fds: Vec<u32> = wk.fds.keys().copied().collect();
    for fd in fds {
        if let Err(e) = wk.close_fd(fd) {
            let f = &spec.flowops[0];
            fail(f, e, id);
        }
    }
    (tallies, read, written, wk.syncs)
}

/// Run workload `w` on `backend`.
pub fn run(w: &Workload, backend: &dyn Backend, opts: &RunOptions) -> Result<RunResult, RunError> {
    if w.threads.is_empty() {
        return Err(RunError::Invalid(format!(
            "workload {} defines no thread",
            w.name
        )));
    }
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let t_setup = Instant::now();
    let sets: Vec<Fileset> = w
        .filesets
        .iter()
        .map(|s| Fileset::new(s, &mut rng))
        .collect();
    for (spec, fs) in w.filesets.iter().zip(&sets) {
        let setup_err = |source| RunError::Setup {
            fileset: spec.name.clone(),
            source,
        };
        for d in &fs.dirs {
            backend.mkdir_all(d).map_err(setup_err)?;
        }
        let n = fs.paths.len();
        let pre = (n as u64 * spec.prealloc_pct).div_ceil(100) as usize;
        let mut order: Vec<usize> = (0..n).collect();
        for i in 0..n {
            let j = rng.gen_range(i..n);
            order.swap(i, j);
        }
        let chunk = vec![0x5au8; 1 << 20];
        let mut st = lock(&fs.state);
        for (k, &i) in order.iter().enumerate() {
            if k >= pre {
                st.absent.insert(i);
                continue;
            }
            if spec.leaf_dirs {
                backend.mkdir(&fs.paths[i]).map_err(setup_err)?;
                st.present.insert(i);
                continue;
            }
            let size = st.sizes[i];
            let f = backend.create(&fs.paths[i], size).map_err(setup_err)?;
            let mut off = 0;
            while off < size {
                let c = (size - off).min(chunk.len() as u64) as usize;
                f.pwrite(off, &chunk[..c]).map_err(setup_err)?;
                off += c as u64;
            }
            f.fsync().map_err(setup_err)?;
            f.close().map_err(setup_err)?;
            st.present.insert(i);
        }
    }
    let setup_seconds = t_setup.elapsed().as_secs_f64();
    let mut seconds = w.run_seconds.unwrap_or(opts.default_seconds);
    if let Some(cap) = opts.seconds_cap {
        seconds = seconds.min(cap);
    }
    let writers = w
        .threads
        .iter()
        .filter(|t| t.flowops.iter().any(|f| f.kind.writes()))
        .count();
    let mut points = vec![];
    let mut by_name: HashMap<String, Vec<Arc<SyncPoint>>> = HashMap::new();
    for t in &w.threads {
        points.push(
            t.flowops
                .iter()
                .map(|f| {
                    let p = match f.kind {
                        FlowopKind::Block => Arc::new(SyncPoint::new(0)),
                        FlowopKind::SemBlock => Arc::new(SyncPoint::new(f.highwater)),
                        _ => return None,
                    };
                    by_name.entry(f.name.clone()).or_default().push(p.clone());
                    Some(p)
                })
                .collect(),
        );
    }
    let sh = Shared {
        points,
        by_name,
        w,
        backend,
        sets,
        stop: AtomicBool::new(false),
        error: Mutex::new(None),
        phaser: Phaser::new(writers),
        sync: opts.sync,
        io_ops: AtomicU64::new(0),
        io_bytes: AtomicU64::new(0),
        rw_ops: AtomicU64::new(0),
        // The generator's queue starts empty as the threads start (Filebench's
        // eventgen_reset).
        events: EventGen::new(w.eventgen_rate),
    };
    let start = Instant::now();
    // A run longer than the clock can add (`run 1e30`) lasts a century: as good as forever.
    const FOREVER: f64 = 100.0 * 365.0 * 86400.0;
    let deadline =
        start + Duration::try_from_secs_f64(seconds.clamp(0.0, FOREVER)).unwrap_or_default();
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..w.threads.len())
            .map(|id| {
                let sh = &sh;
                std::thread::Builder::new()
                    .name(format!("fb-{id}"))
                    .spawn_scoped(s, move || thread_main(sh, id, opts.seed, deadline))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h
                    .join()
                    .map_err(|_| RunError::Invalid("a workload thread panicked".into())),
                Err(e) => Err(RunError::Invalid(format!("cannot start a thread: {e}"))),
            })
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    if let Some(e) = lock(&sh.error).take() {
        return Err(e);
    }
    let mut out = RunResult {
        seconds: elapsed,
        setup_seconds,
        threads: w.threads.len(),
        notes: w.notes.clone(),
        ..Default::default()
    };
    let mut by_name: Vec<FlowopStats> = vec![];
    for (id, r) in results.into_iter().enumerate() {
        let (tallies, rd, wr, syncs) = r?;
        out.read_bytes += rd;
        out.write_bytes += wr;
        out.syncs += syncs;
        for (f, t) in w.threads[id].flowops.iter().zip(tallies) {
            let e = match by_name.iter().position(|s| s.name == f.name) {
                Some(p) => &mut by_name[p],
                None => {
                    by_name.push(FlowopStats {
                        name: f.name.clone(),
                        ..Default::default()
                    });
                    by_name.last_mut().expect("just pushed")
                }
            };
            e.ops += t.ops;
            e.bytes += t.bytes;
            e.busy_ns += t.busy_ns;
            e.norsc += t.norsc;
            if f.kind.is_io() {
                out.ops += t.ops;
            }
        }
    }
    out.flowops = by_name;
    for n in backend.notes() {
        if !out.notes.contains(&n) {
            out.notes.push(n);
        }
    }
    Ok(out)
}
