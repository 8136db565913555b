//! Pools: create, open (= recover), pcreate, pdestroy, list and info.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pmo_format::superblock::{PoolConfig, CONFIG_SIZE};
use pmo_format::{align_up, Entry, KdfParams, PmoLayout, Superblock, PAGE_SIZE};
use pmo_medium::{Medium, MediumKind};
use pmo_os::lock::LockKind;

use pmo_engine::engine::PmoCore;
use pmo_meta::error::{Result, StoreError};
use pmo_meta::keys;
use pmo_meta::locks::{self, LockGuard};
use pmo_meta::meta::{now_unix_s, PoolMeta};
use pmo_meta::namespace::{self, Namespace};
use pmo_meta::redundancy::{
    clear_slot, not_found, read_config, write_config_slot, write_entry, write_header_copy,
};
use pmo_meta::scheme::Scheme;

/// Smallest pool: superblocks, config, a small namespace and one small PMO.
pub const POOL_SIZE_MIN: u64 = 1 << 20;
/// Where stable base addresses are drawn from: [16 TiB, 64 TiB) of the user address space.
pub(crate) const BASE_LO: u64 = 0x1000_0000_0000;
pub(crate) const BASE_HI: u64 = 0x4000_0000_0000;
pub(crate) const BASE_ALIGN: u64 = 1 << 30;

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
    /// Readers attached beside any writer (`crate::reader`; readers of schemes whose readers
    /// exclude the writer are not counted: `state` says `Readers`).
    pub readers: u32,
    /// The oldest psync those readers pin (its page versions are kept for them).
    pub oldest_pin: Option<u64>,
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
    /// Pin tables kept after their last reader in this process, for the next reader
    /// (`pmo_pins::at`, kept tables); they go when the last clone of this handle is dropped.
    pub kept: Arc<pmo_pins::KeptTables>,
}

impl Pool {
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
        if scheme.needs_aead_field() && self.inner.sb.version < pmo_format::FORMAT_VERSION_AEAD {
            return Err(StoreError::Unsupported(format!(
                "this pool has format version {}, which predates the cipher choice of format version {}; reopen it with this build (it upgrades) for scheme '{scheme}'",
                self.inner.sb.version,
                pmo_format::FORMAT_VERSION_AEAD
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
        // One call to the OS's generator for both (a system call each was a twentieth of a
        // small pcreate + pdestroy).
        let fresh = keys::random_bytes::<48>();
        let (uuid, salt): ([u8; 16], [u8; 32]) = (
            fresh[..16].try_into().expect("16 of 48 bytes"),
            fresh[16..].try_into().expect("32 of 48 bytes"),
        );
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
        // Just created: nobody has it attached or pinned (a query of its attach lock and of
        // its pin table, which opened the pool file and looked for a table file, was a fifth
        // of a small pcreate: issue 29).
        Ok(self.info_with(&entry, AttachState::AtRest, 0, None))
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
        let _no_readers = self.lock_no_readers_as(&entry, true)?;
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

    fn state_of(&self, e: &Entry, readers: u32) -> AttachState {
        match self.inner.locker.holder(locks::attach_word(e.extent_off)) {
            Ok(Some(LockKind::Exclusive)) => AttachState::Writer,
            Ok(Some(LockKind::Shared)) => AttachState::Readers,
            _ if readers > 0 => AttachState::Readers,
            _ => AttachState::AtRest,
        }
    }

    pub fn info_of(&self, e: &Entry) -> PmoInfo {
        let (readers, oldest_pin) = PmoCore::new(e)
            .ok()
            .and_then(|core| self.readers_of(&core).ok())
            .unwrap_or((0, None));
        let readers = readers as u32;
        let state = self.state_of(e, readers);
        self.info_with(e, state, readers, oldest_pin)
    }

    /// [`Pool::info_of`] with the attach state and the readers already known.
    fn info_with(
        &self,
        e: &Entry,
        state: AttachState,
        readers: u32,
        oldest_pin: Option<u64>,
    ) -> PmoInfo {
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
            readers,
            oldest_pin,
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
