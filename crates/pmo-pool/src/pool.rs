//! Pools: create, open (= recover), pcreate, pdestroy, list and info.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use pmo_format::superblock::{
    PoolConfig, CONFIG_OFFSET, CONFIG_SIZE, NS_OFFSET, SB_OFFSETS, SB_SIZE,
};
use pmo_format::{
    align_up, Entry, KdfParams, PmoLayout, Superblock, ENTRY_SIZE, FORMAT_VERSION, PAGE_SIZE,
};
use pmo_medium::{Medium, MediumKind};
use pmo_os::lock::LockKind;

use crate::upgrade::upgrade;
use pmo_engine::engine::PmoCore;
use pmo_meta::error::{Result, StoreError};
use pmo_meta::keys;
use pmo_meta::locks::{self, LocalLocks, LockGuard, Locker};
use pmo_meta::meta::{now_unix_s, PoolMeta};
use pmo_meta::namespace::{self, Namespace};
use pmo_meta::redundancy::{
    choose_superblock, clear_slot, not_found, read_config, repair_config, restore_header_copies,
    write_config_slot, write_copy, write_entry, write_header_copy, write_superblocks,
    SuperblockChoice,
};
use pmo_meta::scheme::Scheme;

/// Smallest pool: superblocks, config, a small namespace and one small PMO.
pub const POOL_SIZE_MIN: u64 = 1 << 20;
/// Where stable base addresses are drawn from: [16 TiB, 64 TiB) of the user address space.
const BASE_LO: u64 = 0x1000_0000_0000;
const BASE_HI: u64 = 0x4000_0000_0000;
const BASE_ALIGN: u64 = 1 << 30;

/// Options of `Pool::create`.
#[derive(Clone, Debug)]
pub struct PoolOptions {
    /// KDF parameters for PMOs created in this pool.
    pub kdf: KdfParams,
    /// Namespace slots (default: pool size / 256 KiB, between 16 and 4096).
    pub ns_capacity: Option<u64>,
    /// Virtual address of heap offset 0 (default: random in [16 TiB, 64 TiB), 1 GiB aligned).
    pub base_addr: Option<u64>,
    /// Force a backend (default: detect, or `PMO_MEDIUM`).
    pub medium: Option<MediumKind>,
    /// Allocate the whole pool file at creation (as PMDK does) instead of a sparse file, so
    /// that no store later waits for block allocation (or, on tmpfs, page zeroing).
    pub preallocate: bool,
    /// Default protection scheme of PMOs created in this pool (`pmo scheme set` changes it).
    pub scheme: Scheme,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            kdf: KdfParams::DEFAULT,
            ns_capacity: None,
            base_addr: None,
            medium: None,
            preallocate: false,
            scheme: Scheme::SECURE,
        }
    }
}

/// Read-only or read-write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Perm {
    Read,
    Write,
}

/// Who has a PMO attached right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachState {
    AtRest,
    Readers,
    Writer,
}

impl AttachState {
    /// Short name for listings.
    pub fn name(self) -> &'static str {
        match self {
            AttachState::AtRest => "at-rest",
            AttachState::Readers => "attached-ro",
            AttachState::Writer => "attached-rw",
        }
    }
}

/// What `list` and `info` report about a PMO.
#[derive(Clone, Debug)]
pub struct PmoInfo {
    pub name: String,
    pub size: u64,
    pub uuid: [u8; 16],
    pub base_addr: u64,
    pub extent_off: u64,
    pub extent_len: u64,
    /// Layout capacity in bytes (the size it grows to in place; at least `size`).
    pub capacity: u64,
    pub scheme: u32,
    pub state: AttachState,
    /// Pid of the read-write holder, when `state` is `Writer` (as it recorded at attach).
    pub holder_pid: Option<u32>,
    pub created_unix_s: u64,
}

/// What `Pool::info` reports about the pool.
#[derive(Clone, Debug)]
pub struct PoolInfo {
    pub path: Option<PathBuf>,
    pub medium: MediumKind,
    pub uuid: [u8; 16],
    pub format_version: u32,
    pub pool_size: u64,
    pub heap_len: u64,
    pub free_bytes: u64,
    pub largest_free: u64,
    pub ns_capacity: u64,
    pub pmos: usize,
    pub base_addr: u64,
    pub kdf: KdfParams,
    pub config: PoolConfig,
}

/// An open pool. Cheap to clone; shareable between threads.
#[derive(Clone)]
pub struct Pool {
    pub inner: Arc<PoolMeta>,
}

fn locker_for(m: &Arc<dyn Medium>) -> Locker {
    match m.path() {
        Some(p) => Locker::Ofd(p.to_path_buf()),
        None => Locker::Local(Arc::new(LocalLocks::default())),
    }
}

impl Pool {
    /// Create a pool file of `size` bytes at `path` (which must not exist), or format an existing
    /// device DAX character device (`size` 0 = the whole device).
    pub fn create(path: &Path, size: u64, opts: &PoolOptions) -> Result<Pool> {
        let is_dev = std::fs::metadata(path).map(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_char_device()
        });
        match is_dev {
            Ok(true) => {}
            Ok(false) => return Err(StoreError::PoolExists(path.display().to_string())),
            Err(_) => {
                if size < POOL_SIZE_MIN {
                    return Err(StoreError::Invalid(format!(
                        "pool size {size} is below the minimum of {POOL_SIZE_MIN} bytes"
                    )));
                }
                let f = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(path)
                    .map_err(|source| StoreError::Io {
                        op: format!("create {}", path.display()),
                        source,
                    })?;
                f.set_len(size).map_err(|source| StoreError::Io {
                    op: "size the pool file".into(),
                    source,
                })?;
                if opts.preallocate {
                    if let Err(e) = pmo_os::map::preallocate(&f, size) {
                        drop(f);
                        let _ = std::fs::remove_file(path);
                        // The filesystem is out of room, not the pool.
                        return Err(StoreError::Os(format!(
                            "the filesystem has no room for a {size}-byte pool: {e}"
                        )));
                    }
                }
            }
        }
        let medium = pmo_medium::open_medium(path, opts.medium)?;
        let size = if size == 0 {
            medium.len()
        } else {
            size.min(medium.len())
        };
        Self::format(medium, size, opts)
    }

    /// Format `medium` as a new pool of `size` bytes (the crash tests' entry point).
    pub fn create_on(medium: Arc<dyn Medium>, opts: &PoolOptions) -> Result<Pool> {
        let size = medium.len();
        Self::format(medium, size, opts)
    }

    /// Format `medium` as a pool of an older format `version` (no namespace mirror) and open it
    /// without upgrading: for the upgrade's tests only.
    #[doc(hidden)]
    pub fn create_legacy_on(
        medium: Arc<dyn Medium>,
        opts: &PoolOptions,
        version: u32,
    ) -> Result<Pool> {
        let size = medium.len();
        Self::format_version(medium, size, opts, version)
    }

    fn format(medium: Arc<dyn Medium>, size: u64, opts: &PoolOptions) -> Result<Pool> {
        Self::format_version(medium, size, opts, FORMAT_VERSION)
    }

    fn format_version(
        medium: Arc<dyn Medium>,
        size: u64,
        opts: &PoolOptions,
        version: u32,
    ) -> Result<Pool> {
        let mirrored = version >= pmo_format::FORMAT_VERSION_MIRROR;
        // The caller's parameters: a bad one is its mistake, not a corrupted pool.
        opts.kdf
            .validate()
            .map_err(|e| StoreError::Invalid(e.to_string()))?;
        let size = size & !(PAGE_SIZE - 1);
        if size < POOL_SIZE_MIN {
            return Err(StoreError::Invalid(format!(
                "pool size {size} is below the minimum of {POOL_SIZE_MIN} bytes"
            )));
        }
        let ns_capacity = opts
            .ns_capacity
            .unwrap_or((size / (256 << 10)).clamp(16, 4096));
        if ns_capacity == 0 || ns_capacity > 1 << 20 {
            return Err(StoreError::Invalid(format!(
                "namespace capacity {ns_capacity} out of range"
            )));
        }
        let ns_bytes = align_up(ns_capacity * ENTRY_SIZE as u64, PAGE_SIZE).expect("small");
        // Namespace copy A, then its mirror (copy B), then the heap.
        let copies = if mirrored { 2 } else { 1 };
        let heap_offset = align_up(NS_OFFSET + copies * ns_bytes, 64 << 10).expect("small");
        if heap_offset + 16 * PAGE_SIZE > size {
            return Err(StoreError::Invalid(
                "pool too small for its namespace".into(),
            ));
        }
        let heap_len = size - heap_offset;
        let base_addr = match opts.base_addr {
            Some(a)
                if a % PAGE_SIZE == 0 && a.checked_add(heap_len).is_some_and(|e| e < 1 << 47) =>
            {
                a
            }
            Some(a) => {
                return Err(StoreError::Invalid(format!(
                    "base address {a:#x} is unaligned or too high"
                )))
            }
            None => {
                let span = (BASE_HI - BASE_LO).saturating_sub(heap_len) / BASE_ALIGN;
                if span == 0 {
                    return Err(StoreError::Invalid(
                        "pool too large for a stable address range".into(),
                    ));
                }
                BASE_LO + (u64::from_le_bytes(keys::random_bytes::<8>()) % span) * BASE_ALIGN
            }
        };
        let sb = Superblock {
            version,
            flags: 0,
            uuid: keys::random_bytes(),
            pool_size: size,
            ns_offset: NS_OFFSET,
            ns_capacity,
            heap_offset,
            heap_len,
            base_addr,
            created_unix_s: now_unix_s(),
            kdf: opts.kdf,
            config_offset: CONFIG_OFFSET,
            ns_mirror: if mirrored { NS_OFFSET + ns_bytes } else { 0 },
        };
        let m = &*medium;
        // Namespace and configuration first, superblocks last: a crash before the superblocks are
        // durable leaves something that is not a pool yet, never a pool with garbage entries.
        m.zero(CONFIG_OFFSET, heap_offset - CONFIG_OFFSET)?;
        m.flush(CONFIG_OFFSET, heap_offset - CONFIG_OFFSET)?;
        let cfg = PoolConfig {
            seq: 1,
            scheme: opts.scheme.code(),
            ..Default::default()
        };
        for i in 0..if mirrored { 2 } else { 1 } {
            m.write(
                CONFIG_OFFSET + ((PoolConfig::slot(1) + i) % 2) * CONFIG_SIZE as u64,
                &cfg.encode(),
            )?;
        }
        m.flush(CONFIG_OFFSET, PAGE_SIZE)?;
        m.fence()?;
        write_superblocks(m, &sb)?;
        Self::open_inner(medium, version == FORMAT_VERSION)
    }

    /// Open the pool at `path` and recover it.
    pub fn open(path: &Path) -> Result<Pool> {
        Self::open_with(path, None)
    }

    /// Open with a forced backend.
    pub fn open_with(path: &Path, kind: Option<MediumKind>) -> Result<Pool> {
        let meta = std::fs::metadata(path).map_err(|source| StoreError::Io {
            op: format!("open {}", path.display()),
            source,
        })?;
        if meta.is_dir() {
            return Err(StoreError::NotAPool(format!(
                "{} is a directory",
                path.display()
            )));
        }
        if meta.len() == 0 && meta.is_file() {
            return Err(StoreError::NotAPool(format!("{} is empty", path.display())));
        }
        Self::open_on(pmo_medium::open_medium(path, kind)?)
    }

    /// Open a pool on `medium` and recover it: choose a valid superblock (repairing the other
    /// copy), drop stale namespace entries left by an interrupted update, and bring every PMO
    /// nobody has attached up to its newest committed psync. Safe to run concurrently with other
    /// processes opening the same pool (recovery holds the metadata lock) and to crash in.
    pub fn open_on(medium: Arc<dyn Medium>) -> Result<Pool> {
        Self::open_inner(medium, true)
    }

    /// Open a pool of an older format without upgrading it: for the upgrade's tests only.
    #[doc(hidden)]
    pub fn open_legacy_on(medium: Arc<dyn Medium>) -> Result<Pool> {
        Self::open_inner(medium, false)
    }

    fn open_inner(medium: Arc<dyn Medium>, upgrade_format: bool) -> Result<Pool> {
        let SuperblockChoice {
            sb,
            copies,
            mut repairs,
        } = choose_superblock(&*medium)?;
        let locker = locker_for(&medium);
        let (sb, note) = if upgrade_format {
            upgrade(&medium, &locker, sb)?
        } else {
            (sb, Vec::new())
        };
        repairs.extend(note);
        let pool = Pool {
            inner: Arc::new(PoolMeta {
                medium,
                sb,
                locker,
                ns: Mutex::new(Namespace::default()),
                health: Default::default(),
                repairs: Mutex::new(repairs),
            }),
        };
        let r = pool.recover(&copies);
        pool.inner.poison(r)?;
        Ok(pool)
    }

    /// Rebuild every namespace slot whose copies are all damaged from the copy of its entry in
    /// its PMO's header page (`pmo check --repair`). Returns the names rebuilt; slots left
    /// damaged stay in [`Pool::damaged_slots`].
    pub fn rebuild_damaged_slots(&self) -> Result<Vec<(usize, String)>> {
        self.inner.rebuild_damaged_slots()
    }

    /// Free every namespace slot whose copies are all damaged (`pmo check --repair
    /// --drop-damaged`): the PMO it held is given up, and the space it may cover becomes free.
    /// Returns the slots freed.
    pub fn drop_damaged_slots(&self) -> Result<Vec<usize>> {
        self.inner.drop_damaged_slots()
    }

    /// What opening the pool repaired (each damaged copy rewritten from the good one), or
    /// could not yet (an upgrade postponed). Reported by the opener, once.
    pub fn repairs(&self) -> Vec<String> {
        self.inner
            .repairs
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// Damaged namespace slots the mirror could not repair, with the reason. While any is
    /// listed nothing is allocated (its extent is unknown) and lookups report corruption.
    pub fn damaged_slots(&self) -> Result<Vec<(usize, String)>> {
        let inner = &*self.inner;
        let mut ns = inner.ns();
        ns.refresh(&*inner.medium, &inner.sb)?;
        Ok(ns.corrupt.clone())
    }

    fn recover(
        &self,
        copies: &[std::result::Result<Superblock, pmo_format::FormatError>],
    ) -> Result<()> {
        let inner = &*self.inner;
        let m = &*inner.medium;
        let _meta = inner
            .locker
            .lock_blocking(locks::META, LockKind::Exclusive)?;
        // Superblock copies.
        let enc = inner.sb.encode();
        for (i, off) in SB_OFFSETS.into_iter().enumerate() {
            if copies[i].as_ref().ok() != Some(&inner.sb) {
                m.write(off, &enc)?;
                m.flush(off, SB_SIZE as u64)?;
                m.fence()?;
            }
        }
        // Configuration: a slot that disagrees with the record in force is rewritten.
        let notes = repair_config(m, &inner.sb)?;
        if let Ok(mut r) = inner.repairs.lock() {
            r.extend(notes);
        }
        // Namespace: a copy that disagrees with the surviving one is rewritten (the mirror).
        let mut ns = inner.ns();
        ns.reload(m, &inner.sb)?;
        let fixes = std::mem::take(&mut ns.fixes);
        if !fixes.is_empty() {
            for f in &fixes {
                write_copy(m, &inner.sb, f.slot, f.mirror, f.entry.as_ref())?;
            }
            if let Ok(mut r) = inner.repairs.lock() {
                r.extend(fixes.iter().filter_map(|f| f.note.clone()));
            }
            ns.reload(m, &inner.sb)?;
        }
        // Older generations of a renamed/rewritten entry are cleared.
        let stale = ns.stale();
        if !stale.is_empty() {
            for &i in &stale {
                clear_slot(m, &inner.sb, i)?;
            }
            m.fence()?;
            for i in stale {
                pmo_meta::entries::shred_slot(m, &inner.sb, i)?;
            }
            m.fence()?;
            ns.reload(m, &inner.sb)?;
        }
        // Free slots whose body a crash kept (a destroy or rekey cut off before its shred).
        if pmo_meta::entries::shred_leftovers(m, &inner.sb, &ns)? {
            ns.reload(m, &inner.sb)?;
        }
        if namespace::read_gen(m, &inner.sb)? % 2 == 1 {
            namespace::bump_gen(m, &inner.sb)?;
        }
        // PMOs nobody has attached: replay their newest psync.
        let live: Vec<Entry> = ns.live().into_iter().map(|(_, e)| e.clone()).collect();
        drop(ns);
        restore_header_copies(m, &inner.sb, &live)?;
        for e in live {
            let Some(_guard) =
                inner
                    .locker
                    .lock(locks::attach_word(e.extent_off), LockKind::Exclusive, None)?
            else {
                continue;
            };
            // A PMO whose metadata is damaged does not keep the pool from opening: its own
            // open (which recovers again) reports it.
            match PmoCore::new(&e).and_then(|c| c.recover(m)) {
                Err(err) if err.is_integrity() => {}
                r => {
                    if let Some(note) = r?.note {
                        inner.note_repair(note);
                    }
                }
            }
        }
        Ok(())
    }

    /// The pool's superblock.
    pub fn superblock(&self) -> &Superblock {
        &self.inner.sb
    }

    /// The medium (for tools and tests).
    pub fn medium(&self) -> &Arc<dyn Medium> {
        &self.inner.medium
    }

    /// The pool configuration record in force.
    pub fn config(&self) -> Result<PoolConfig> {
        read_config(&*self.inner.medium, &self.inner.sb)
    }

    /// Store a new pool configuration (e.g. the default scheme).
    pub fn set_config(&self, scheme: u32, shadow: u32) -> Result<PoolConfig> {
        let inner = &*self.inner;
        inner.alive()?;
        let _meta = inner
            .locker
            .lock_blocking(locks::META, LockKind::Exclusive)?;
        let m = &*inner.medium;
        let cur = read_config(m, &inner.sb)?;
        let next = PoolConfig {
            seq: cur.seq + 1,
            scheme,
            shadow,
        };
        let first = PoolConfig::slot(next.seq);
        let r = (|| {
            if inner.sb.version >= pmo_format::FORMAT_VERSION_MIRROR {
                // Both slots, the new one's first: either one repairs the other.
                write_config_slot(m, &inner.sb, first, &next)?;
                write_config_slot(m, &inner.sb, 1 - first, &next)?;
            } else {
                let off = inner.sb.config_offset + first * CONFIG_SIZE as u64;
                m.write(off, &next.encode())?;
                m.persist(off, CONFIG_SIZE as u64)?;
            }
            Ok(next)
        })();
        inner.poison(r)
    }

    /// Create a PMO of `size` bytes (rounded up to whole pages) protected by `key`.
    pub fn pcreate(&self, name: &str, size: u64, key: &[u8]) -> Result<PmoInfo> {
        self.pcreate_with(name, size, key, None)
    }

    /// The last recorded writer session of PMO `name` (`None` if none was recorded).
    pub fn last_session(&self, name: &str) -> Result<Option<pmo_engine::stats::SessionStats>> {
        let e = self.entry(name)?;
        let mut b = [0u8; pmo_engine::stats::RECORD_BYTES];
        self.inner
            .medium
            .read(e.extent_off + pmo_engine::stats::RECORD_OFF, &mut b)?;
        Ok(pmo_engine::stats::SessionStats::decode(&b))
    }

    /// The scheme a PMO created now gets when none is named: `PMO_SCHEME` if set, else the
    /// pool's default (`pmo scheme set`).
    pub fn default_scheme(&self) -> Result<Scheme> {
        if let Some(s) = Scheme::from_env()? {
            return Ok(s);
        }
        Scheme::from_code(self.config()?.scheme)
    }

    /// Set the pool's default scheme for new PMOs.
    pub fn set_default_scheme(&self, scheme: Scheme) -> Result<()> {
        self.check_can_protect(scheme)?;
        self.set_config(scheme.code(), 0).map(|_| ())
    }

    fn check_can_protect(&self, scheme: Scheme) -> Result<()> {
        if scheme.is_protected() && self.inner.sb.version < pmo_format::FORMAT_VERSION_PROTECTION {
            return Err(StoreError::Unsupported(format!(
                "this pool has format version {}, which predates protected PMOs; create a new pool for scheme '{scheme}'",
                self.inner.sb.version
            )));
        }
        Ok(())
    }

    /// `pcreate` with an explicit protection scheme (`None`: [`Pool::default_scheme`]).
    pub fn pcreate_with(
        &self,
        name: &str,
        size: u64,
        key: &[u8],
        scheme: Option<Scheme>,
    ) -> Result<PmoInfo> {
        self.pcreate_in(name, size, 0, key, scheme, None)
    }

    /// [`Pool::pcreate_with`] giving the PMO a sub-page commit log area (where the pool's
    /// version and the scheme allow one) unless `PMO_LOG=0`: what `PmoHeap` creates for
    /// declared tracking (`pmo-typed`).
    pub fn pcreate_logged(
        &self,
        name: &str,
        size: u64,
        key: &[u8],
        scheme: Option<Scheme>,
    ) -> Result<PmoInfo> {
        pmo_engine::sublog::with_log_forced(|| self.pcreate_with(name, size, key, scheme))
    }

    /// `pcreate` of a PMO of `size` bytes laid out for `max_size` bytes (its *layout
    /// capacity*, `docs/lifecycle.md`): a later `Pool::resize` up to `max_size`, and any
    /// shrink, changes only metadata. `max_size` 0 or equal to the size: an ordinary PMO.
    /// The unwritten capacity costs extent space (the two data slots and the page map of
    /// `max_size`) but no memory on tmpfs or a sparse file until pages are written.
    pub fn pcreate_max(
        &self,
        name: &str,
        size: u64,
        max_size: u64,
        key: &[u8],
        scheme: Option<Scheme>,
    ) -> Result<PmoInfo> {
        self.pcreate_in(name, size, max_size, key, scheme, None)
    }

    /// `pcreate` of a PMO of the *key family* `family` (a salt; [`Pool::family_salt`] gives
    /// one per pool and label): its user-key master comes from one Argon2id of the family per
    /// process and key, then HKDF with the PMO's own random salt (`docs/security.md`, "Key
    /// families"). For many PMOs under one key (a file store's files): each create, open or
    /// check of another member costs microseconds instead of an Argon2id. A pool too old for
    /// families (its upgrade postponed) creates an ordinary PMO.
    pub fn pcreate_in_family(
        &self,
        name: &str,
        size: u64,
        key: &[u8],
        scheme: Option<Scheme>,
        family: &[u8; 32],
    ) -> Result<PmoInfo> {
        self.pcreate_in(name, size, 0, key, scheme, Some(*family))
    }

    /// The key family salt of this pool for `label` (`pmo_meta::keys::family_salt`): the same
    /// for every process that opens the pool, another for every other pool.
    pub fn family_salt(&self, label: &[u8]) -> [u8; 32] {
        keys::family_salt(&self.inner.sb.uuid, label)
    }

    /// `pcreate` laid out for `capacity` bytes (0: the size; checked by the caller,
    /// [`Pool::pcreate_max`]), of key family `family` when given (and the pool's version
    /// allows one).
    pub fn pcreate_in(
        &self,
        name: &str,
        size: u64,
        capacity: u64,
        key: &[u8],
        scheme: Option<Scheme>,
        family: Option<[u8; 32]>,
    ) -> Result<PmoInfo> {
        let inner = &*self.inner;
        inner.alive()?;
        Entry::validate_name(name).map_err(|e| StoreError::Invalid(e.to_string()))?;
        // New names are printable: a control character (newline, tab, escape) would break
        // every listing that shows the name. Existing names are left as they are.
        if let Some(c) = name.chars().find(|c| c.is_control()) {
            return Err(StoreError::Invalid(format!(
                "PMO name {name:?} contains the control character {c:?}: use printable characters"
            )));
        }
        if size == 0 {
            return Err(StoreError::Invalid("PMO size must be positive".into()));
        }
        let scheme = match scheme {
            Some(s) => s,
            None => self.default_scheme()?,
        };
        self.check_can_protect(scheme)?;
        let size = align_up(size, PAGE_SIZE)
            .ok_or_else(|| StoreError::Invalid("PMO size too large".into()))?;
        let capacity = checked_capacity(self, scheme, size, capacity)?;
        let log = pmo_engine::sublog::wanted(scheme, inner.sb.version);
        let layout = PmoLayout::with_plain(
            capacity.max(size) / PAGE_SIZE,
            scheme.tag_bytes() as u64,
            scheme.shadow == pmo_meta::scheme::Shadow::Medium,
        )
        .and_then(|l| l.with_log(log))
        .ok_or_else(|| StoreError::Invalid("PMO size too large".into()))?;
        let uuid = keys::random_bytes::<16>();
        let salt = keys::random_bytes::<32>();
        let family = family.filter(|_| inner.sb.version >= pmo_format::FORMAT_VERSION_FAMILY);
        let master = match &family {
            Some(f) => keys::derive_family_master(&uuid, &salt, &inner.sb.kdf, f, key)?,
            None => keys::derive_master(&uuid, &salt, &inner.sb.kdf, key)?,
        };

        let (_meta, mut ns) = self.begin_ns_change()?;
        let m = &*inner.medium;
        if ns.find(name).is_some() {
            return Err(StoreError::Exists(name.into()));
        }
        if let Some(damage) = ns.damage() {
            return Err(StoreError::Corrupt(format!(
                "cannot create '{name}': {damage}; the space it covers is unknown, so nothing is allocated until `pmo check --repair` repairs or drops it"
            )));
        }
        let slot = ns.free_slot().ok_or_else(|| {
            StoreError::NoSpace(format!(
                "the namespace is full ({} PMOs)",
                inner.sb.ns_capacity
            ))
        })?;
        let extent_off = ns.first_fit(&inner.sb, layout.extent_len).map_err(|largest| {
            StoreError::NoSpace(format!(
                "a {size}-byte PMO needs {} bytes of pool space; the largest free extent has {largest}",
                layout.extent_len
            ))
        })?;
        let mut entry = Entry {
            generation: 1,
            uuid,
            size,
            extent_off,
            extent_len: layout.extent_len,
            // With room to grow in place (`resize`).
            base_addr: pmo_meta::address::address_for(&ns, &inner.sb, size.max(capacity), None)?,
            scheme: scheme.code(),
            flags: pmo_engine::sublog::flags(log)
                | family.map_or(0, |_| pmo_format::entry::FLAG_FAMILY),
            kdf: inner.sb.kdf,
            salt,
            verifier: [0; 32],
            name: name.into(),
            created_unix_s: now_unix_s(),
            tag_bytes: scheme.tag_bytes(),
            wrapped: [0; pmo_format::entry::WRAPPED_LEN],
            capacity,
            family: family.unwrap_or([0; 32]),
        };
        entry.verifier = keys::verifier(&master, &uuid, &keys::binding(&entry));
        let r = (|| {
            namespace::bump_gen(m, &inner.sb)?;
            PmoCore::new(&entry)?.init_on_medium(m)?;
            if inner.sb.ns_mirror != 0 {
                write_header_copy(m, &entry, true)?;
            }
            m.fence()?;
            write_entry(m, &inner.sb, slot, &entry)?;
            namespace::bump_gen(m, &inner.sb)?;
            Ok(())
        })();
        ns.after_own_change(m, &inner.sb, r.is_ok(), slot, Some(entry.clone()));
        inner.poison(r)?;
        Ok(self.info_of(&entry))
    }

    /// Begin a namespace change: take the metadata lock, refuse if another process upgraded the
    /// format since this handle opened the pool, and bring the namespace copy up to date. The
    /// namespace guard is dropped before the lock (bind them as `let (_meta, mut ns) = ...`).
    pub fn begin_ns_change(&self) -> Result<(LockGuard, std::sync::MutexGuard<'_, Namespace>)> {
        let inner = &*self.inner;
        inner.alive()?;
        let meta = inner
            .locker
            .lock_blocking(locks::META, LockKind::Exclusive)?;
        self.inner.check_superblock_current()?;
        let mut ns = inner.ns();
        ns.refresh(&*inner.medium, &inner.sb)?;
        Ok((meta, ns))
    }

    /// Destroy a PMO. Fails with `Busy` while anyone has it attached.
    pub fn pdestroy(&self, name: &str, key: &[u8]) -> Result<()> {
        let inner = &*self.inner;
        let (_meta, mut ns) = self.begin_ns_change()?;
        let m = &*inner.medium;
        let (slot, entry) = ns
            .find(name)
            .map(|(i, e)| (i, e.clone()))
            .ok_or_else(|| not_found(&ns, name))?;
        keys::check_key(&entry, key)?;
        let Some(_attach) = self.lock_attach_exclusive(&entry, None)? else {
            return Err(self.busy(&entry));
        };
        let r = (|| {
            // A plaintext copy left by a crash goes before the space is given back.
            PmoCore::new(&entry)?.scrub_for_destroy(m)?;
            namespace::bump_gen(m, &inner.sb)?;
            // The header copy goes first: no destroyed PMO is ever rebuilt from it.
            write_header_copy(m, &entry, false)?;
            pmo_meta::entries::shred_header_copy(m, entry.extent_off)?;
            m.fence()?;
            clear_slot(m, &inner.sb, slot)?;
            m.fence()?;
            pmo_meta::entries::shred_slot(m, &inner.sb, slot)?;
            m.fence()?;
            namespace::bump_gen(m, &inner.sb)?;
            Ok(())
        })();
        ns.after_own_change(m, &inner.sb, r.is_ok(), slot, None);
        inner.poison(r)
    }

    fn state_of(&self, e: &Entry) -> AttachState {
        match self.inner.locker.holder(locks::attach_word(e.extent_off)) {
            Ok(Some(LockKind::Exclusive)) => AttachState::Writer,
            Ok(Some(LockKind::Shared)) => AttachState::Readers,
            _ => AttachState::AtRest,
        }
    }

    pub fn info_of(&self, e: &Entry) -> PmoInfo {
        let state = self.state_of(e);
        let holder_pid = (state == AttachState::Writer)
            .then(|| self.holder_word(e))
            .filter(|&p| p != 0);
        PmoInfo {
            holder_pid,
            name: e.name.clone(),
            size: e.size,
            uuid: e.uuid,
            base_addr: e.base_addr,
            extent_off: e.extent_off,
            extent_len: e.extent_len,
            capacity: e.capacity_bytes(),
            scheme: e.scheme,
            state,
            created_unix_s: e.created_unix_s,
        }
    }

    pub fn entry(&self, name: &str) -> Result<Entry> {
        let inner = &*self.inner;
        let mut ns = inner.ns();
        ns.refresh(&*inner.medium, &inner.sb)?;
        ns.find(name)
            .map(|(_, e)| e.clone())
            .ok_or_else(|| not_found(&ns, name))
    }

    /// Every PMO, in namespace order.
    pub fn list(&self) -> Result<Vec<PmoInfo>> {
        let inner = &*self.inner;
        inner.alive()?;
        let entries: Vec<Entry> = {
            let mut ns = inner.ns();
            ns.refresh(&*inner.medium, &inner.sb)?;
            ns.live().into_iter().map(|(_, e)| e.clone()).collect()
        };
        Ok(entries.iter().map(|e| self.info_of(e)).collect())
    }

    /// One PMO.
    pub fn info(&self, name: &str) -> Result<PmoInfo> {
        self.inner.alive()?;
        Ok(self.info_of(&self.entry(name)?))
    }

    /// Check `key` against PMO `name`'s verifier without attaching it: `WrongKey`, `NotFound`,
    /// or Ok. For a caller that already holds the PMO attached and is asked for it again.
    pub fn check_key(&self, name: &str, key: &[u8]) -> Result<()> {
        self.inner.alive()?;
        keys::check_key(&self.entry(name)?, key).map(|_| ())
    }

    /// Whether a PMO exists.
    pub fn exists(&self, name: &str) -> Result<bool> {
        match self.entry(name) {
            Ok(_) => Ok(true),
            Err(StoreError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Pool-wide figures.
    pub fn pool_info(&self) -> Result<PoolInfo> {
        let inner = &*self.inner;
        let (free, pmos) = {
            let mut ns = inner.ns();
            ns.refresh(&*inner.medium, &inner.sb)?;
            (ns.free_extents(&inner.sb), ns.live().len())
        };
        Ok(PoolInfo {
            path: inner.medium.path().map(Path::to_path_buf),
            medium: inner.medium.kind(),
            uuid: inner.sb.uuid,
            format_version: inner.sb.version,
            pool_size: inner.sb.pool_size,
            heap_len: inner.sb.heap_len,
            free_bytes: free.iter().map(|f| f.1).sum(),
            largest_free: free.iter().map(|f| f.1).max().unwrap_or(0),
            ns_capacity: inner.sb.ns_capacity,
            pmos,
            base_addr: inner.sb.base_addr,
            kdf: inner.sb.kdf,
            config: self.config()?,
        })
    }
}

/// Progress callback: (pages done, pages in all).
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// The layout capacity `pcreate` gives a PMO of `size` bytes asked for `capacity` bytes (0:
/// none, the layout follows the size): page aligned, at least the size, and refused where it
/// cannot work (a pool older than format version 5, `wedi`).
pub fn checked_capacity(pool: &Pool, scheme: Scheme, size: u64, capacity: u64) -> Result<u64> {
    if capacity == 0 {
        return Ok(0);
    }
    let capacity = align_up(capacity, PAGE_SIZE)
        .ok_or_else(|| StoreError::Invalid("PMO capacity too large".into()))?;
    if capacity < size {
        return Err(StoreError::Invalid(format!(
            "the maximum size ({capacity} bytes) is below the size ({size} bytes)"
        )));
    }
    if capacity == size {
        return Ok(0);
    }
    if pool.inner.sb.version < pmo_format::FORMAT_VERSION_CAPACITY {
        return Err(StoreError::Unsupported(format!(
            "this pool is format version {} (its upgrade was postponed): a maximum size needs version {}",
            pool.inner.sb.version,
            pmo_format::FORMAT_VERSION_CAPACITY
        )));
    }
    if scheme.whole_checksum() {
        return Err(StoreError::Unsupported(format!(
            "scheme {} keeps a checksum of the whole PMO, which covers its size: it has no \
             layout capacity (a resize moves it)",
            scheme.name()
        )));
    }
    Ok(capacity)
}
