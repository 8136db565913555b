//! The process-wide state behind the C API: the open pool and the live attachments.
//!
//! Owns:
//! - the pool: opened once per process, lazily on the first call that needs it, from `PMO_POOL`
//!   or else the default pool path; a missing pool file is created then (1 GiB sparse, Argon2id
//!   default parameters, or the insecure fast ones when `PMO_KDF=fast`: for tests only).
//!   `PMO_POOL` is read when the pool is opened, not on every call: changing it later has no
//!   effect until [`Registry::pool_close`]. [`Registry::pool_open`] names a pool explicitly.
//! - the attachments: address range -> [`Mapped`] (a plain [`Attachment`] or a [`PmoHeap`],
//!   which owns its attachment), so `detach`/`psync` accept any address inside an attached
//!   PMO, and `pmo_p_free` finds the heap of any block.
//! - the default heap of `pmo_p_malloc` and friends: which registered heap it is, opened (and
//!   created if missing) on first use, see [`crate::heap`].
//!
//! Fork: a child does not inherit attachments. The store's mappings are `MADV_DONTFORK` (the
//! range is empty in the child), but the child does inherit a copy of this table; the first
//! call in the child drops the parent's entries from it *without* running their destructors,
//! which would release the parent's attach locks (OFD locks are shared across fork) and rewrite
//! its holder word. So in the child every address of the parent's attachments is "not
//! attached", its attaches conflict with the parent's like any other process's, and it may
//! attach what the parent has not.
//!
//! Invariants:
//! - At most [`ATTACHMENTS_MAX`] attachments are registered.
//! - Registered ranges never overlap (each is a live mapping of its own).
//! - The registry lock is never held across a slow store operation (attach, which may wait
//!   for another user; psync; pool creation is the one exception, since nothing can proceed
//!   without the pool): an attachment is shared as an `Arc`, so a detach racing with a psync
//!   on another thread unmaps when the psync finishes.
//! - Lookups do not take the state lock: they read an immutable snapshot of the table in the
//!   calling thread's lookup slot (one of `LOOKUP_SLOTS` = 16, each its own lock on its own cache
//!   lines). Every change of the table publishes a fresh snapshot to all slots before the state
//!   lock is released, write-locking each slot in turn; so when `detach` returns, no lookup
//!   still uses the removed entry. One allocator call (`pmo_p_malloc`, `pmo_p_free`, ...) runs under
//!   the slot's read lock instead of cloning the heap's `Arc`, so the hot path touches no
//!   shared cache line; such a call never waits for registry work of another thread.
//! - Lock order: state, then slots. A lookup never takes the state lock while it holds a slot.
//! - The pool is not closed or switched while attachments exist or attaches are in flight.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use pmo_heap::{HeapOptions, PmoHeap};
use pmo_store::{
    AttachOptions, Attachment, CommitStats, KdfParams, Perm, Pool, PoolOptions, StoreError,
};

use crate::error::CapiError;

/// Bumped in every fork child (by [`note_fork_in_child`]), so the registry notices a fork
/// with one atomic load instead of a `getpid` per call.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
/// True once [`note_fork_in_child`] is registered as a `pthread_atfork` child handler.
static FORK_HOOK_INSTALLED: AtomicBool = AtomicBool::new(false);

/// To be called in every fork child before it runs anything else (a `pthread_atfork` child
/// handler; the FFI module installs it). Async-signal-safe: one atomic add.
pub fn note_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// Declare [`note_fork_in_child`] installed: from now on forks are detected by generation.
pub fn set_fork_hook_installed() {
    FORK_HOOK_INSTALLED.store(true, Ordering::Release);
}

/// Most live attachments one process may hold through the C API.
pub const ATTACHMENTS_MAX: usize = 1024;
/// How often, and how long apart, to retry opening a pool another process is creating.
const CREATE_RACE_RETRIES: u32 = 200;
const CREATE_RACE_SLEEP_MS: u64 = 10;

/// Environment variable choosing the KDF of a pool the C API creates (`fast` = insecure, tests only).
pub const KDF_ENV: &str = "PMO_KDF";

/// Result with [`CapiError`].
pub type Result<T, E = CapiError> = std::result::Result<T, E>;

struct State {
    pool: Option<Pool>,
    path: Option<PathBuf>,
    /// start address -> attachment.
    attachments: BTreeMap<usize, Registered>,
    /// Attaches that have released the lock and not yet registered.
    attaching: usize,
    /// The process this state belongs to (0: not yet known); see the module doc on fork.
    pid: u32,
    /// Start address of the default heap, if it is open.
    default_heap: Option<usize>,
    /// Ranges (start -> length) this process detached and has not mapped again: `detach` of an
    /// address in one of them is the reference's "already detached" case (returns 0). At most
    /// [`DETACHED_MAX`] entries, the lowest addresses forgotten first.
    detached: BTreeMap<usize, usize>,
}

/// How many detached ranges the registry remembers.
pub const DETACHED_MAX: usize = 4096;

/// What one registered range is.
#[derive(Clone)]
pub enum Mapped {
    /// `attach`/`pmo_attach_ex`.
    Plain(Arc<Attachment>),
    /// `pmo_heap_open` or the default heap.
    Heap(Arc<PmoHeap>),
}

impl Mapped {
    /// Bytes mapped.
    pub fn len(&self) -> usize {
        match self {
            Mapped::Plain(a) => a.len(),
            Mapped::Heap(h) => h.len(),
        }
    }

    /// Never true: a PMO has at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// First byte.
    pub fn addr(&self) -> usize {
        match self {
            Mapped::Plain(a) => a.addr() as usize,
            Mapped::Heap(h) => h.addr() as usize,
        }
    }

    /// The PMO's name.
    pub fn name(&self) -> &str {
        match self {
            Mapped::Plain(a) => a.name(),
            Mapped::Heap(h) => h.name(),
        }
    }

    /// psync without checksums where the scheme allows it (a heap's psync is a full one).
    pub fn psync_nochecksum(&self) -> Result<CommitStats> {
        Ok(match self {
            Mapped::Plain(a) => a.psync_nochecksum()?,
            Mapped::Heap(h) => h.psync()?,
        })
    }

    /// psync; a heap's runs with its allocator calls quiesced.
    pub fn psync(&self) -> Result<CommitStats> {
        Ok(match self {
            Mapped::Plain(a) => a.psync()?,
            Mapped::Heap(h) => h.psync()?,
        })
    }
}

/// One registered attachment.
struct Registered {
    mapped: Mapped,
    /// The process that attached it (`std::process::id`).
    owner_pid: u32,
}

/// Reserves one attachment slot (`State::attaching`) while an attach runs outside the lock;
/// gives it back on drop, so a failed or panicking attach cannot leak the reservation.
struct Reservation<'a> {
    registry: &'a Registry,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut st = self.registry.lock();
        debug_assert!(st.attaching > 0, "reservation without a count");
        st.attaching = st.attaching.saturating_sub(1);
    }
}

/// An immutable copy of the table for lookups: what [`Registry::publish`] hands to the slots.
struct Snapshot {
    /// start address -> mapping (clones of the state's entries).
    mapped: BTreeMap<usize, Mapped>,
    default_heap: Option<usize>,
}

impl Snapshot {
    fn find(&self, addr: usize) -> Option<(usize, &Mapped)> {
        match self.mapped.range(..=addr).next_back() {
            Some((&start, m)) if addr - start < m.len() => Some((start, m)),
            _ => None,
        }
    }
}

/// Number of lookup slots: threads spread over them, so lookups on different threads touch
/// different cache lines.
const LOOKUP_SLOTS: usize = 16;

/// One lookup slot: the current snapshot behind a lock of its own, alone on its cache lines.
#[repr(align(128))]
struct Slot(RwLock<Option<Arc<Snapshot>>>);

/// Next slot to hand to a thread.
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's slot (`usize::MAX`: not chosen yet).
    static MY_SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn my_slot() -> usize {
    MY_SLOT
        .try_with(|s| {
            if s.get() == usize::MAX {
                s.set(NEXT_SLOT.fetch_add(1, Ordering::Relaxed) % LOOKUP_SLOTS);
            }
            s.get()
        })
        .unwrap_or(0)
}

/// The C API's state. The library uses one, [`global`]; tests make their own.
pub struct Registry {
    /// The table and the pool. Changes take it exclusively; every change of the table is
    /// published to `slots` before the lock is released.
    state: RwLock<State>,
    /// Lookups (every `pmo_p_malloc`, `pmo_p_free`, `psync`): a thread read-locks its own slot and
    /// reads the snapshot there, touching no shared cache line. A publication write-locks
    /// every slot in turn, so once it returns no lookup still uses the previous snapshot.
    slots: [Slot; LOOKUP_SLOTS],
    /// The process the slots were last published for, and the fork generation then.
    seen_pid: AtomicU32,
    seen_generation: AtomicU64,
    /// Serialises opening the default heap (held across the slow open, never with `state`
    /// held on entry).
    default_heap_open: Mutex<()>,
}

static GLOBAL: Registry = Registry::new();

/// The process-wide registry used by the C entry points.
pub fn global() -> &'static Registry {
    &GLOBAL
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

/// `r`/`R` read-only, `w`/`W` read-write.
pub fn perm_from_char(c: u8) -> Result<Perm> {
    match c {
        b'r' | b'R' => Ok(Perm::Read),
        b'w' | b'W' => Ok(Perm::Write),
        other => Err(CapiError::Invalid(format!(
            "permission {:?} is not 'r' or 'w'",
            other as char
        ))),
    }
}

/// KDF parameters for a pool created by the C API, from `PMO_KDF`.
fn kdf_from_env() -> Result<KdfParams> {
    match std::env::var(KDF_ENV).as_deref() {
        Err(_) | Ok("") | Ok("default") => Ok(KdfParams::DEFAULT),
        Ok("fast") => Ok(KdfParams::INSECURE_FAST),
        Ok(other) => Err(CapiError::Invalid(format!(
            "{KDF_ENV}={other:?}: expected 'fast' or 'default'"
        ))),
    }
}

/// Open the pool at `path`; if the file is missing and `create_size` is given, create it.
/// Safe against another process creating the same pool at the same moment.
fn open_or_create(path: &Path, create_size: Option<u64>) -> Result<Pool> {
    match Pool::open(path) {
        Ok(p) => return Ok(p),
        Err(e @ StoreError::NoPool { .. }) => {
            if create_size.is_none() {
                return Err(e.into());
            }
        }
        Err(e) => return Err(e.into()),
    }
    let size = create_size.unwrap_or(pmo_store::DEFAULT_POOL_SIZE);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| CapiError::Io {
            op: format!("create directory {}", dir.display()),
            source,
        })?;
    }
    let opts = PoolOptions {
        kdf: kdf_from_env()?,
        ..PoolOptions::default()
    };
    match Pool::create(path, size, &opts) {
        Ok(p) => Ok(p),
        Err(StoreError::PoolExists(_)) => {
            // Another process created the file first: wait (bounded) until it is formatted.
            let mut last = None;
            for _ in 0..CREATE_RACE_RETRIES {
                match Pool::open(path) {
                    Ok(p) => return Ok(p),
                    Err(e @ StoreError::NotAPool(_)) => last = Some(e),
                    Err(e) => return Err(e.into()),
                }
                std::thread::sleep(Duration::from_millis(CREATE_RACE_SLEEP_MS));
            }
            Err(last
                .map(CapiError::from)
                .unwrap_or_else(|| CapiError::Internal("pool creation race".into())))
        }
        Err(e) => Err(e.into()),
    }
}

impl Registry {
    /// An empty registry (no pool open, no attachments).
    pub const fn new() -> Registry {
        Registry {
            state: RwLock::new(State {
                pool: None,
                path: None,
                attachments: BTreeMap::new(),
                attaching: 0,
                pid: 0,
                default_heap: None,
                detached: BTreeMap::new(),
            }),
            slots: [const { Slot(RwLock::new(None)) }; LOOKUP_SLOTS],
            seen_pid: AtomicU32::new(0),
            seen_generation: AtomicU64::new(0),
            default_heap_open: Mutex::new(()),
        }
    }

    /// The state, exclusively. A panic caught at the FFI boundary may have poisoned the lock;
    /// every update of the state is a single map or field operation, so the state itself is
    /// consistent and the poison is ignored.
    fn lock(&self) -> RwLockWriteGuard<'_, State> {
        let mut st = self.state.write().unwrap_or_else(|e| e.into_inner());
        if self.stale() {
            let generation = FORK_GENERATION.load(Ordering::Acquire);
            let pid = std::process::id();
            if Self::forget_inherited(&mut st, pid) {
                // The slots hold the parent's snapshot: forget it too (dropping it would only
                // lower reference counts, but nothing of the parent's is to run here).
                for slot in &self.slots {
                    let old = slot.0.write().unwrap_or_else(|e| e.into_inner()).take();
                    std::mem::forget(old);
                }
            }
            self.publish(&st);
            self.seen_pid.store(pid, Ordering::Release);
            self.seen_generation.store(generation, Ordering::Release);
        }
        st
    }

    /// The state, shared.
    fn read(&self) -> RwLockReadGuard<'_, State> {
        if self.stale() {
            drop(self.lock());
        }
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the slots may hold a parent process's entries (or were never published). With
    /// the fork hook installed this is two atomic loads; without it, a `getpid` system call.
    fn stale(&self) -> bool {
        let seen_pid = self.seen_pid.load(Ordering::Acquire);
        if FORK_HOOK_INSTALLED.load(Ordering::Acquire) {
            seen_pid == 0
                || FORK_GENERATION.load(Ordering::Acquire)
                    != self.seen_generation.load(Ordering::Acquire)
        } else {
            seen_pid != std::process::id()
        }
    }

    /// Copy the table to every slot. Called with the state locked exclusively, after every
    /// change of `attachments` or `default_heap`.
    fn publish(&self, st: &State) {
        let snapshot = Arc::new(Snapshot {
            mapped: st
                .attachments
                .iter()
                .map(|(&start, r)| (start, r.mapped.clone()))
                .collect(),
            default_heap: st.default_heap,
        });
        for slot in &self.slots {
            // The slot's lock is released at the end of this statement, before `old` drops.
            let old = slot
                .0
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .replace(snapshot.clone());
            drop(old);
        }
    }

    /// This thread's view of the table, for one lookup. Never hold it across anything that
    /// waits for another thread's registry work (a publication waits for it).
    fn snapshot(&self) -> RwLockReadGuard<'_, Option<Arc<Snapshot>>> {
        if self.stale() {
            drop(self.lock());
        }
        self.slots[my_slot()]
            .0
            .read()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// In a fork child: drop the parent's attachments from the table without dropping them
    /// (their mappings are not in this process; their locks and holder words are the
    /// parent's). Also forget attaches the parent had in flight: their threads are not here.
    /// Returns whether this was a fork child's first call (anything forgotten).
    fn forget_inherited(st: &mut State, pid: u32) -> bool {
        if st.pid == pid {
            return false;
        }
        let child = st.pid != 0;
        let inherited: Vec<usize> = st
            .attachments
            .iter()
            .filter(|(_, r)| r.owner_pid != pid)
            .map(|(&start, _)| start)
            .collect();
        for start in inherited {
            if let Some(r) = st.attachments.remove(&start) {
                std::mem::forget(r);
            }
        }
        st.default_heap = None;
        if child {
            st.attaching = 0;
            st.detached.clear();
        }
        st.pid = pid;
        child
    }

    /// The open pool, opening (and if missing creating) the default one on first use.
    pub fn pool(&self) -> Result<Pool> {
        let mut st = self.lock();
        Self::pool_locked(&mut st)
    }

    fn pool_locked(st: &mut State) -> Result<Pool> {
        if let Some(p) = &st.pool {
            return Ok(p.clone());
        }
        let path = pmo_store::default_pool_path();
        let pool = open_or_create(&path, Some(pmo_store::DEFAULT_POOL_SIZE))?;
        st.pool = Some(pool.clone());
        st.path = Some(path);
        Ok(pool)
    }

    /// Path of the open pool, if one is open.
    pub fn pool_path(&self) -> Option<PathBuf> {
        self.read().path.clone()
    }

    /// Open `path` (`None`: `PMO_POOL`, else the default path) as this process's pool, creating
    /// it with `create_size` bytes if it is missing and `create_size` is not 0. Replaces the
    /// open pool; fails with `PoolBusy` while attachments exist.
    pub fn pool_open(&self, path: Option<&Path>, create_size: u64) -> Result<()> {
        let mut st = self.lock();
        let busy = st.attachments.len() + st.attaching;
        if busy > 0 {
            return Err(CapiError::PoolBusy(busy));
        }
        let path = path
            .map(Path::to_path_buf)
            .unwrap_or_else(pmo_store::default_pool_path);
        let pool = open_or_create(&path, (create_size != 0).then_some(create_size))?;
        st.pool = Some(pool);
        st.path = Some(path);
        Ok(())
    }

    /// At normal exit: the pin tables the pool handle keeps for its next reader go (the
    /// registry's handle is never dropped), unless another thread holds the registry then.
    pub fn drop_kept_tables_at_exit(&self) {
        if let Ok(st) = self.state.try_read() {
            if let Some(p) = &st.pool {
                p.kept.clear();
            }
        }
    }

    /// Close the pool. The next call that needs a pool opens one again (reading `PMO_POOL`
    /// anew). Closing when no pool is open succeeds.
    pub fn pool_close(&self) -> Result<()> {
        let mut st = self.lock();
        let busy = st.attachments.len() + st.attaching;
        if busy > 0 {
            return Err(CapiError::PoolBusy(busy));
        }
        st.pool = None;
        st.path = None;
        Ok(())
    }

    /// Number of live attachments.
    pub fn attachment_count(&self) -> usize {
        self.read().attachments.len()
    }

    /// Reserve a slot and get the pool, for an attach that runs outside the lock.
    fn reserve(&self) -> Result<(Pool, Reservation<'_>)> {
        let mut st = self.lock();
        if st.attachments.len() + st.attaching >= ATTACHMENTS_MAX {
            return Err(CapiError::TooManyAttachments(ATTACHMENTS_MAX));
        }
        let pool = Self::pool_locked(&mut st)?;
        st.attaching += 1;
        Ok((pool, Reservation { registry: self }))
    }

    /// Register a fresh mapping in the slot `reservation` holds; returns its start address.
    fn register(&self, mapped: Mapped, reservation: Reservation<'_>) -> Result<usize> {
        let start = mapped.addr();
        // The slot passes from the reservation to the table under one lock.
        let mut st = self.lock();
        st.attaching = st.attaching.saturating_sub(1);
        std::mem::forget(reservation);
        debug_assert!(
            st.attachments.len() < ATTACHMENTS_MAX,
            "reserved by `attaching`"
        );
        if st.attachments.contains_key(&start) {
            // Two live mappings cannot start at one address.
            return Err(CapiError::Internal(format!(
                "attachment at {start:#x} registered twice"
            )));
        }
        let end = start + mapped.len();
        let overlapping: Vec<usize> = st
            .detached
            .range(..end)
            .filter(|(&s, &len)| s + len > start)
            .map(|(&s, _)| s)
            .collect();
        for s in overlapping {
            st.detached.remove(&s);
        }
        st.attachments.insert(
            start,
            Registered {
                mapped,
                owner_pid: std::process::id(),
            },
        );
        self.publish(&st);
        Ok(start)
    }

    /// Attach and register; returns the start address.
    pub fn attach(&self, name: &str, perm: Perm, key: &[u8], opts: AttachOptions) -> Result<usize> {
        let (pool, reservation) = self.reserve()?;
        // Outside the lock: the attach may wait for another user (opts.wait), and that user may
        // be a thread of this process that needs the registry to detach.
        let att = pool.attach_with(name, perm, key, opts)?;
        self.register(Mapped::Plain(Arc::new(att)), reservation)
    }

    /// The reference's attach: if this process has PMO `name` attached already (a plain
    /// attachment, not a heap), check `key` and return that mapping's start; otherwise attach
    /// as [`Registry::attach`]. A read-only attachment is not upgraded (`NotUpgraded` for `Write`).
    pub fn attach_or_reuse(
        &self,
        name: &str,
        perm: Perm,
        key: &[u8],
        opts: AttachOptions,
    ) -> Result<usize> {
        if let Some(start) = self.reuse(name, perm, key)? {
            return Ok(start);
        }
        match self.attach(name, perm, key, opts) {
            // Another thread attached it meanwhile: that mapping is ours too.
            Err(
                e @ CapiError::Store(StoreError::Busy { .. } | StoreError::AddressInUse { .. }),
            ) => self.reuse(name, perm, key)?.ok_or(e),
            r => r,
        }
    }

    /// The start of this process's plain attachment of `name`, after checking `key` and `perm`.
    fn reuse(&self, name: &str, perm: Perm, key: &[u8]) -> Result<Option<usize>> {
        let found = {
            let st = self.read();
            st.attachments
                .iter()
                .find_map(|(&start, r)| match &r.mapped {
                    Mapped::Plain(a) if a.name() == name => Some((start, a.clone())),
                    _ => None,
                })
        };
        let Some((start, att)) = found else {
            return Ok(None);
        };
        self.pool()?.check_key(name, key)?;
        if perm == Perm::Write && att.perm() != Perm::Write {
            return Err(CapiError::NotUpgraded(name.to_owned()));
        }
        Ok(Some(start))
    }

    /// Open the heap in PMO `name` (read-write) and register it; if the PMO is missing and
    /// `create_size` is not 0, create it with a fresh heap first. Returns the start address.
    pub fn heap_open(&self, name: &str, key: &[u8], create_size: u64) -> Result<usize> {
        if create_size != 0 {
            pmo_format::Entry::validate_name(name)
                .map_err(|e| CapiError::Invalid(e.to_string()))?;
        }
        let (pool, reservation) = self.reserve()?;
        let heap = if create_size == 0 {
            PmoHeap::open(&pool, name, key)?
        } else {
            PmoHeap::open_or_create(&pool, name, create_size, key, &HeapOptions::default())?
        };
        self.register(Mapped::Heap(Arc::new(heap)), reservation)
    }

    /// The default heap, opened (with `open`, which may create it) on first use.
    pub fn default_heap(
        &self,
        open: impl FnOnce(&Registry) -> Result<usize>,
    ) -> Result<Arc<PmoHeap>> {
        if let Some(h) = self.default_heap_if_open() {
            return Ok(h);
        }
        let _one_opener = self
            .default_heap_open
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(h) = self.default_heap_if_open() {
            return Ok(h);
        }
        let start = open(self)?;
        let mut st = self.lock();
        st.default_heap = Some(start);
        self.publish(&st);
        match st.attachments.get(&start).map(|r| &r.mapped) {
            Some(Mapped::Heap(h)) => Ok(h.clone()),
            // Detached by another thread already: the caller may retry.
            _ => Err(CapiError::NotAttached(start)),
        }
    }

    fn default_heap_if_open(&self) -> Option<Arc<PmoHeap>> {
        let snap = self.snapshot();
        let snap = snap.as_ref()?;
        match snap.mapped.get(&snap.default_heap?) {
            Some(Mapped::Heap(h)) => Some(h.clone()),
            _ => None,
        }
    }

    /// Run `f` on the default heap (opened with `open` on first use). On the fast path `f` runs
    /// under the shared registry lock, with no reference count touched: keep `f` to one
    /// allocator call, never a psync or anything that waits for another thread.
    pub fn with_default_heap<R>(
        &self,
        open: impl FnOnce(&Registry) -> Result<usize>,
        f: impl FnOnce(&PmoHeap) -> Result<R>,
    ) -> Result<R> {
        {
            let snap = self.snapshot();
            if let Some(Mapped::Heap(h)) =
                snap.as_ref().and_then(|s| s.mapped.get(&s.default_heap?))
            {
                return f(h);
            }
        }
        let heap = self.default_heap(open)?;
        f(&heap)
    }

    /// Run `f` on the heap holding `addr` (`NotABlock` if no heap does), under the shared
    /// registry lock: the same rules as [`Registry::with_default_heap`].
    pub fn with_heap_containing<R>(
        &self,
        addr: usize,
        f: impl FnOnce(&PmoHeap) -> Result<R>,
    ) -> Result<R> {
        let snap = self.snapshot();
        match snap.as_ref().and_then(|s| s.find(addr)) {
            Some((_, Mapped::Heap(h))) => f(h),
            _ => Err(CapiError::NotABlock(addr)),
        }
    }

    /// The mapping whose range contains `addr`.
    pub fn find(&self, addr: usize) -> Result<Mapped> {
        let snap = self.snapshot();
        match snap.as_ref().and_then(|s| s.find(addr)) {
            Some((_, m)) => Ok(m.clone()),
            // Built only here: `CapiError` has drop glue, and an eager `ok_or` would build and
            // drop one on every psync and every `pmo_free` from C.
            None => Err(CapiError::NotAttached(addr)),
        }
    }

    /// The heap that `addr` (a block, or any address in the heap's PMO) belongs to.
    pub fn heap_containing(&self, addr: usize) -> Result<Arc<PmoHeap>> {
        match self.find(addr) {
            Ok(Mapped::Heap(h)) => Ok(h),
            Ok(Mapped::Plain(_)) | Err(CapiError::NotAttached(_)) => {
                Err(CapiError::NotABlock(addr))
            }
            Err(e) => Err(e),
        }
    }

    /// The heap whose handle (start address) is `handle`.
    pub fn heap_at(&self, handle: usize) -> Result<Arc<PmoHeap>> {
        let snap = self.snapshot();
        match snap.as_ref().and_then(|s| s.mapped.get(&handle)) {
            Some(Mapped::Heap(h)) => Ok(h.clone()),
            Some(Mapped::Plain(_)) => Err(CapiError::Invalid(format!(
                "{handle:#x} is an attachment, not a heap handle"
            ))),
            None => Err(CapiError::NotAttached(handle)),
        }
    }

    fn find_locked(st: &State, addr: usize) -> Result<(usize, &Registered)> {
        match st.attachments.range(..=addr).next_back() {
            Some((&start, r)) if addr - start < r.mapped.len() => Ok((start, r)),
            _ => Err(CapiError::NotAttached(addr)),
        }
    }

    /// Unregister and unmap the attachment (or heap) containing `addr`. Changes not psynced
    /// are lost. If another thread is using it right now (a psync, an allocation), the unmap
    /// happens when that call ends.
    pub fn detach(&self, addr: usize) -> Result<()> {
        let registered = {
            let mut st = self.lock();
            let start = match Self::find_locked(&st, addr) {
                Ok((start, _)) => start,
                Err(e) => {
                    return match st.detached.range(..=addr).next_back() {
                        // The reference's detach(2): detaching a detached PMO does nothing.
                        Some((&s, &len)) if addr - s < len => Ok(()),
                        _ => Err(e),
                    };
                }
            };
            if st.default_heap == Some(start) {
                st.default_heap = None;
            }
            let removed = st.attachments.remove(&start);
            if let Some(r) = &removed {
                if st.detached.len() >= DETACHED_MAX {
                    st.detached.pop_first();
                }
                st.detached.insert(start, r.mapped.len());
            }
            // After this no lookup holds the entry: the snapshots only had clones.
            self.publish(&st);
            removed
        };
        // Unmapped here, outside the lock (or by the last call still holding it).
        drop(registered);
        Ok(())
    }

    /// psync the attachment containing `addr`.
    pub fn psync(&self, addr: usize) -> Result<CommitStats> {
        self.find(addr)?.psync()
    }

    /// psync the attachment containing `addr`, leaving integrity checksums to detach where the
    /// PMO's scheme allows it (`psync_nochecksum`).
    pub fn psync_nochecksum(&self, addr: usize) -> Result<CommitStats> {
        self.find(addr)?.psync_nochecksum()
    }

    /// Move the read-only attachment containing `addr` to the newest psync
    /// (`Attachment::refresh`): the psync it now shows.
    pub fn refresh(&self, addr: usize) -> Result<u64> {
        match self.find(addr)? {
            Mapped::Plain(a) => Ok(a.refresh()?),
            Mapped::Heap(_) => Err(CapiError::Invalid(
                "a heap is attached read-write: only a read-only attachment refreshes".into(),
            )),
        }
    }

    /// The psync the attachment containing `addr` shows (a writer's: its newest).
    pub fn snapshot_seq(&self, addr: usize) -> Result<u64> {
        match self.find(addr)? {
            Mapped::Plain(a) => Ok(a.snapshot_seq()),
            Mapped::Heap(_) => Err(CapiError::Invalid(
                "a heap's psync is not available through its address".into(),
            )),
        }
    }

    /// Name of the PMO attached at `addr`.
    pub fn name_of(&self, addr: usize) -> Result<String> {
        Ok(self.find(addr)?.name().to_owned())
    }

    /// The session statistics of the attachment containing `addr` (not a heap's).
    pub fn session_stats(&self, addr: usize) -> Result<pmo_store::SessionStats> {
        match self.find(addr)? {
            Mapped::Plain(a) => Ok(a.session_stats()),
            Mapped::Heap(_) => Err(CapiError::Invalid(
                "session statistics of a heap are not available through its address".into(),
            )),
        }
    }

    /// pcreate with a scheme name (`None`: the pool's default), laid out for `max_size` bytes
    /// (0: the size) in the open pool.
    pub fn create_max(
        &self,
        name: &str,
        size: u64,
        max_size: u64,
        key: &[u8],
        scheme: Option<&str>,
    ) -> Result<()> {
        pmo_format::Entry::validate_name(name).map_err(|e| CapiError::Invalid(e.to_string()))?;
        let scheme = scheme.map(pmo_store::Scheme::from_name).transpose()?;
        self.pool()?
            .pcreate_max(name, size, max_size, key, scheme)?;
        Ok(())
    }

    /// pcreate in the open pool.
    pub fn create(&self, name: &str, size: u64, key: &[u8]) -> Result<()> {
        // The store reports a bad name as a format error (errno EIO); the caller's mistake is
        // EINVAL, so check the name here first with the format's own rule.
        pmo_format::Entry::validate_name(name).map_err(|e| CapiError::Invalid(e.to_string()))?;
        self.pool()?.pcreate(name, size, key)?;
        Ok(())
    }

    /// pdestroy in the open pool.
    pub fn destroy(&self, name: &str, key: &[u8]) -> Result<()> {
        let pool = self.pool()?;
        pool.pdestroy(name, key)?;
        // LMDB's lock directory of an environment the PMO held goes with it, as with `pmo
        // destroy` (docs/lmdb.md); one some process still has open is left for `pmo lmdb
        // locks --clean`: the PMO is destroyed either way.
        let _ = pmo_lmdb_lockdir::remove_for(&pmo_lmdb_lockdir::lock_root(), &pool, name);
        Ok(())
    }

    /// Whether `name` exists in the open pool.
    pub fn exists(&self, name: &str) -> Result<bool> {
        Ok(self.pool()?.exists(name)?)
    }

    /// Size in bytes of PMO `name`.
    pub fn size_of(&self, name: &str) -> Result<u64> {
        Ok(self.pool()?.info(name)?.size)
    }

    /// `pmo_resize`: a grow of a PMO this process has attached read-write (`attach`,
    /// `pmo_attach_ex`), within the PMO's layout capacity, grows that attachment in place
    /// (`Attachment::grow`: address and unsynced changes kept); anything else is the store's
    /// resize (`Busy` while attached).
    pub fn resize(&self, name: &str, size: u64, force: bool, key: &[u8]) -> Result<()> {
        let held = {
            let st = self.lock();
            st.attachments.values().find_map(|r| match &r.mapped {
                Mapped::Plain(a) if a.name() == name && a.perm() == Perm::Write => Some(a.clone()),
                _ => None,
            })
        };
        if let Some(a) = held {
            if size >= a.len() as u64 && size <= a.mapped_len() as u64 {
                a.grow(size, key)?;
                return Ok(());
            }
        }
        let opts = pmo_store::ResizeOptions {
            force,
            progress: None,
        };
        self.pool()?.resize(name, size, key, opts)?;
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn plain(reg: &Registry, addr: usize) -> Arc<Attachment> {
        match reg.find(addr).unwrap() {
            Mapped::Plain(a) => a,
            Mapped::Heap(_) => panic!("a heap at {addr:#x}"),
        }
    }

    /// A fresh pool of 64 MiB under the temporary directory, for the tests of this crate.
    pub(crate) fn temp_pool(tag: &str) -> (PathBuf, Pool) {
        let dir = std::env::temp_dir().join(format!("pmo-capi-reg-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.pool");
        let opts = PoolOptions {
            kdf: KdfParams::INSECURE_FAST,
            ..PoolOptions::default()
        };
        let pool = Pool::create(&path, 64 << 20, &opts).unwrap();
        (path, pool)
    }

    #[test]
    fn perm_chars() {
        assert_eq!(perm_from_char(b'r').unwrap(), Perm::Read);
        assert_eq!(perm_from_char(b'R').unwrap(), Perm::Read);
        assert_eq!(perm_from_char(b'w').unwrap(), Perm::Write);
        assert_eq!(perm_from_char(b'W').unwrap(), Perm::Write);
        assert!(matches!(perm_from_char(b'x'), Err(CapiError::Invalid(_))));
        assert!(matches!(perm_from_char(0), Err(CapiError::Invalid(_))));
    }

    #[test]
    fn reference_attach_reuses_this_process_mapping() {
        let (path, _pool) = temp_pool("reuse");
        let reg = Registry::new();
        reg.pool_open(Some(&path), 0).unwrap();
        reg.create("r", 2 * 4096, b"k").unwrap();
        let o = AttachOptions::default;
        let a = reg.attach_or_reuse("r", Perm::Write, b"k", o()).unwrap();
        assert_eq!(reg.attach_or_reuse("r", Perm::Write, b"k", o()).unwrap(), a);
        assert_eq!(reg.attach_or_reuse("r", Perm::Read, b"k", o()).unwrap(), a);
        assert_eq!(reg.attachment_count(), 1);
        assert!(matches!(
            reg.attach_or_reuse("r", Perm::Write, b"wrong", o()),
            Err(CapiError::Store(StoreError::WrongKey(_)))
        ));
        // pmo_attach_ex's strict attach still refuses a second mapping.
        assert!(reg.attach("r", Perm::Read, b"k", o()).is_err());
        // One detach detaches it; a second is the reference's no-op.
        reg.detach(a).unwrap();
        assert_eq!(reg.attachment_count(), 0);
        reg.detach(a + 4096).unwrap();
        // Attached again, read-only: not upgraded to read-write, and a detached range that
        // is mapped again is an attachment, not a detached range.
        let r = reg.attach_or_reuse("r", Perm::Read, b"k", o()).unwrap();
        assert_eq!(r, a);
        let e = reg
            .attach_or_reuse("r", Perm::Write, b"k", o())
            .unwrap_err();
        assert_eq!(
            (e.code(), e.errno()),
            (crate::error::PMO_E_BUSY, libc::EBUSY)
        );
        assert_eq!(
            e.to_string(),
            "PMO 'r' is attached read-only by this process: an attachment is not upgraded to read-write (detach it first)"
        );
        assert!(reg.read().detached.is_empty());
        reg.detach(r).unwrap();
        {
            let st = reg.read();
            assert_eq!(st.detached.get(&a), Some(&(2 * 4096)));
        }
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn lookup_by_interior_address_detach_and_pool_busy() {
        let (path, _pool) = temp_pool("lookup");
        let reg = Registry::new();
        reg.pool_open(Some(&path), 0).unwrap();
        reg.create("a", 3 * 4096, b"k").unwrap();
        reg.create("b", 4096, b"k").unwrap();
        let a = reg
            .attach("a", Perm::Write, b"k", AttachOptions::default())
            .unwrap();
        let b = reg
            .attach("b", Perm::Write, b"k", AttachOptions::default())
            .unwrap();
        assert_eq!(reg.attachment_count(), 2);
        assert_eq!(reg.name_of(a).unwrap(), "a");
        assert_eq!(reg.name_of(a + 3 * 4096 - 1).unwrap(), "a");
        assert_eq!(reg.name_of(b + 17).unwrap(), "b");
        if a + 3 * 4096 != b {
            assert!(matches!(
                reg.name_of(a + 3 * 4096),
                Err(CapiError::NotAttached(_))
            ));
        }
        assert!(matches!(
            reg.name_of(a.wrapping_sub(1)),
            Err(CapiError::NotAttached(_))
        ));
        assert!(matches!(reg.pool_close(), Err(CapiError::PoolBusy(2))));
        assert!(matches!(
            reg.pool_open(Some(&path), 0),
            Err(CapiError::PoolBusy(2))
        ));
        plain(&reg, a + 5).write_at(5, b"hello").unwrap();
        assert_eq!(reg.psync(a + 100).unwrap().pages, 1);
        reg.detach(a + 4096).unwrap();
        // Detaching a detached PMO does nothing (the reference's detach(2)); an address no
        // PMO of this process ever had is not attached.
        reg.detach(a).unwrap();
        assert!(matches!(reg.detach(0x10), Err(CapiError::NotAttached(_))));
        assert!(matches!(reg.psync(a), Err(CapiError::NotAttached(_))));
        reg.detach(b).unwrap();
        assert_eq!(reg.attachment_count(), 0);
        // The psynced bytes are there on the next attach, at the same address.
        let a2 = reg
            .attach("a", Perm::Read, b"k", AttachOptions::default())
            .unwrap();
        assert_eq!(a2, a);
        let mut buf = [0u8; 5];
        plain(&reg, a2).read_at(5, &mut buf).unwrap();
        assert_eq!(&buf, b"hello");
        assert!(matches!(
            reg.psync(a2),
            Err(CapiError::Store(StoreError::ReadOnly(_)))
        ));
        reg.detach(a2).unwrap();
        reg.pool_close().unwrap();
        assert!(reg.pool_path().is_none());
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn pool_open_creates_only_when_asked() {
        let dir = std::env::temp_dir().join(format!("pmo-capi-reg-{}-create", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("sub").join("new.pool");
        let reg = Registry::new();
        let err = reg.pool_open(Some(&path), 0).unwrap_err();
        assert_eq!(
            (err.code(), err.errno()),
            (crate::error::PMO_E_NOT_FOUND, libc::ENOENT),
            "{err}"
        );
        // PMO_KDF is not set by these tests, so this pool gets the default KDF: only create.
        reg.pool_open(Some(&path), 8 << 20).unwrap();
        assert_eq!(reg.pool_path().as_deref(), Some(path.as_path()));
        assert!(!reg.exists("nothing").unwrap());
        assert!(matches!(
            reg.size_of("nothing"),
            Err(CapiError::Store(StoreError::NotFound(_)))
        ));
        reg.pool_close().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn conflicting_attach_is_busy_and_wait_times_out() {
        let (path, _pool) = temp_pool("busy");
        let reg = Registry::new();
        reg.pool_open(Some(&path), 0).unwrap();
        reg.create("x", 4096, b"k").unwrap();
        let w = reg
            .attach("x", Perm::Write, b"k", AttachOptions::default())
            .unwrap();
        let e = reg
            .attach("x", Perm::Read, b"k", AttachOptions::default())
            .unwrap_err();
        assert_eq!(e.errno(), libc::EBUSY, "{e}");
        let t0 = std::time::Instant::now();
        let opts = AttachOptions {
            wait: Some(Duration::from_millis(50)),
            ..AttachOptions::default()
        };
        let e = reg.attach("x", Perm::Write, b"k", opts).unwrap_err();
        assert_eq!(e.errno(), libc::EBUSY, "{e}");
        assert!(t0.elapsed() >= Duration::from_millis(40));
        assert!(matches!(
            reg.destroy("x", b"k"),
            Err(CapiError::Store(StoreError::Busy { .. }))
        ));
        reg.detach(w).unwrap();
        assert_eq!(
            reg.attach("x", Perm::Write, b"bad", AttachOptions::default())
                .unwrap_err()
                .errno(),
            libc::EACCES
        );
        reg.destroy("x", b"k").unwrap();
        assert!(!reg.exists("x").unwrap());
        reg.pool_close().unwrap();
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
