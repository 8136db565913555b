//! Creating and opening a pool: format a medium (superblocks, configuration, namespace), open
//! one (choose the superblock in force, upgrade an older format, recover: repair damaged copies,
//! clear half-done namespace changes, recover every PMO nobody has attached), and the repairs of
//! damaged namespace slots `pmo check --repair` asks for.

use std::path::Path;
use std::sync::{Arc, Mutex};

use pmo_format::superblock::{
    PoolConfig, CONFIG_OFFSET, CONFIG_SIZE, NS_OFFSET, SB_OFFSETS, SB_SIZE,
};
use pmo_format::{align_up, Entry, Superblock, ENTRY_SIZE, FORMAT_VERSION, PAGE_SIZE};
use pmo_medium::{Medium, MediumKind};
use pmo_os::lock::LockKind;

use crate::upgrade::upgrade;
use pmo_engine::engine::PmoCore;
use pmo_meta::error::{Result, StoreError};
use pmo_meta::keys;
use pmo_meta::locks::{self, LocalLocks, Locker};
use pmo_meta::meta::{now_unix_s, PoolMeta};
use pmo_meta::namespace::{self, Namespace};
use pmo_meta::redundancy::{
    choose_superblock, clear_slot, repair_config, restore_header_copies, write_copy,
    write_superblocks, SuperblockChoice,
};

use crate::pool::{Pool, PoolOptions, BASE_ALIGN, BASE_HI, BASE_LO, POOL_SIZE_MIN};

fn locker_for(m: &Arc<dyn Medium>) -> Locker {
    match m.path() {
        Some(p) => Locker::ofd(p.to_path_buf()),
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
        let meta = std::fs::metadata(path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                StoreError::NoPool {
                    path: path.to_path_buf(),
                }
            } else {
                StoreError::Io {
                    op: format!("open {}", path.display()),
                    source,
                }
            }
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
        sweep_pin_tables_once();
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
            kept: Default::default(),
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
}

/// Once per process, at the first open of a pool file: remove the pin tables nobody uses
/// (`pmo_pins::table::sweep_orphans`: their users were SIGKILLed with nobody left to remove
/// them), so that such leftovers in `/dev/shm` do not outlive the next pmo program.
fn sweep_pin_tables_once() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        pmo_pins::table::sweep_orphans(&pmo_pins::table::dir());
    });
}
