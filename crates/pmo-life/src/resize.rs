//! Grow and shrink a PMO, and grow a pool file (`docs/lifecycle.md`, "Resize").
//!
//! A PMO's extent lays out its page map, journals, tags and both data slots by its page count
//! (`docs/format.md` §4), so a PMO of another size has another layout: a resize builds the PMO
//! anew in a free extent and switches the namespace entry to it in one crash-consistent change.
//!
//! 1. Under the metadata lock and the PMO's exclusive attach lock (the PMO recovered, its crash
//!    handlers run, so every committed page is sealed at rest), the new extent is initialised
//!    in free space: nothing refers to it yet.
//! 2. Every committed page that survives is copied **as stored** (ciphertext and its tag, same
//!    slot, same version) with its page-map entry; pages never written stay "zero". Nothing is
//!    decrypted or re-encrypted: the page keys derive from the PMO's uuid and data master, which
//!    a resize keeps. (`wedi` alone decrypts every page: its whole-PMO checksum covers the new
//!    page count.)
//! 3. One commit of no pages vouches for the new map: its trailer carries the version-table MAC
//!    of the new map (`secure`), tagged under a fresh epoch above the old reservation, and a
//!    reservation above every version used before (so no (page, version) nonce ever repeats).
//! 4. The header page's entry copy, then the old extent's copy shredded; fence.
//! 5. The new entry (same uuid, generation + 1, new size, extent, verifier) goes to a free slot:
//!    from the moment its magic is durable it supersedes the old one (the generation rule of
//!    [`crate::lifecycle`]); then the old slot is cleared and shredded.
//!
//! A crash before step 5's magic leaves the old PMO, whole; the new extent lay in free space.
//! After it, the new PMO, whole; open clears the superseded slot. Free space is derived from
//! the namespace, so neither case leaks. The cost is a copy of the committed pages (memory
//! speed, no cryptography) plus O(page count) metadata; see the module docs of the figures.
//!
//! The stable address: a resize keeps the PMO's base address whenever the grown range overlaps
//! no other PMO's range, and pcreate leaves each PMO [`ADDRESS_HEADROOM`] times its size of
//! address space (`address_for`): so a PMO grows at least that far without its address
//! moving, and pointers into a grown PMO stay valid after it is re-attached.

use std::path::Path;

use pmo_format::layout::{PageLoc, PageMapEntry};
use pmo_format::{align_up, Entry, PmoLayout, Superblock, PAGE_SIZE};
use pmo_medium::Medium;

use pmo_engine::engine::{Page, PmoCore};
use pmo_engine::protect::RESERVATION_CHUNK;
pub use pmo_meta::address::ADDRESS_HEADROOM;
use pmo_meta::address::{address_for, address_free};
use pmo_meta::error::{Result, StoreError};
use pmo_meta::keys;
use pmo_meta::namespace;
use pmo_meta::redundancy::{
    clear_slot, not_found, write_entry, write_header_copy, write_superblocks,
};
use pmo_meta::scheme::Scheme;
use pmo_pool::handle::PmoHandle;
use pmo_pool::pool::{Perm, PmoInfo, Pool, Progress};

/// Pages copied between progress reports.
const PROGRESS_PAGES: u64 = 1024;

/// What `Pool::resize` did.
#[derive(Clone, Debug)]
pub struct ResizeReport {
    /// The PMO as it is now.
    pub info: PmoInfo,
    /// Size before, in bytes.
    pub old_size: u64,
    /// Committed pages copied to the new extent.
    pub pages_copied: u64,
    /// Committed pages dropped by a forced shrink (0 without `force`).
    pub pages_dropped: u64,
    /// Whether the PMO kept its stable address.
    pub address_kept: bool,
    /// Whether the PMO stayed in its extent (within its layout capacity: only metadata
    /// changed) rather than moving to a new one.
    pub in_place: bool,
}

impl ResizeReport {
    /// The report of a resize that has not copied or dropped anything (yet) and kept the PMO in
    /// place at its address.
    pub fn in_place(info: PmoInfo, old_size: u64) -> Self {
        ResizeReport {
            info,
            old_size,
            pages_copied: 0,
            pages_dropped: 0,
            address_kept: true,
            in_place: true,
        }
    }
}

/// Options of `Pool::resize`.
#[derive(Default)]
pub struct ResizeOptions<'a> {
    /// Shrink even if pages past the new size hold data (they are dropped).
    pub force: bool,
    /// Called with (pages done, pages to copy) as the copy proceeds.
    pub progress: Option<Progress<'a>>,
}

/// A shrink to `new_size` would drop page `p`, which holds data.
pub fn shrink_over_data(name: &str, new_size: u64, p: u64) -> StoreError {
    StoreError::Invalid(format!(
        "cannot shrink PMO '{name}' to {new_size} bytes: page {p} (offset {}) holds data; \
         shrink with force (`--force`) to drop it",
        p * PAGE_SIZE
    ))
}

/// No free extent of `need` bytes for PMO `name` resized to `new_size`.
pub fn no_room(name: &str, new_size: u64, need: u64, largest: u64) -> StoreError {
    StoreError::NoSpace(format!(
        "resizing PMO '{name}' to {new_size} bytes needs a free extent of {need} bytes beside \
         its current one (a resize copies it); the largest free extent has {largest} \
         (`pmo pool grow` makes the pool larger)"
    ))
}

/// The verifier of `e` (edited: size, extent, address) for `key`: the key's own Argon2id master
/// binds the fields (for a rekeyed PMO that is the master that unwraps the data key; for a PMO
/// of a key family, its family master).
fn reverify(e: &mut Entry, key: &[u8]) -> Result<()> {
    let user = keys::master_for(e, key)?;
    e.verifier = keys::verifier(&user, &e.uuid, &keys::binding(e));
    Ok(())
}

/// Grow or shrink PMO `name` to `new_size` bytes (rounded up to whole pages). New pages
/// read as zeros. A shrink that would drop a page holding anything but zeros fails unless
/// `opts.force`. Needs the key; fails with `Busy` while the PMO is attached (detach,
/// resize, attach again: the stable address is kept when it can be, see the module docs)
/// and with `NoSpace` when no free extent holds the new size (the old extent is given back
/// only once the new one is live, so a resize needs room for both).
pub fn resize(
    pool: &Pool,
    name: &str,
    new_size: u64,
    key: &[u8],
    mut opts: ResizeOptions<'_>,
) -> Result<ResizeReport> {
    let inner = &*pool.inner;
    if new_size == 0 {
        return Err(StoreError::Invalid("a PMO's size must be positive".into()));
    }
    let new_size = align_up(new_size, PAGE_SIZE)
        .ok_or_else(|| StoreError::Invalid("PMO size too large".into()))?;
    let (_meta, ns) = pool.begin_ns_change()?;
    let m = &*inner.medium;
    let old = ns
        .find(name)
        .map(|(_, e)| e.clone())
        .ok_or_else(|| not_found(&ns, name))?;
    keys::check_key(&old, key)?;
    if let Some(damage) = ns.damage() {
        return Err(StoreError::Corrupt(format!(
            "cannot resize '{name}': {damage}; `pmo check --repair` repairs or drops it first"
        )));
    }
    drop(ns);
    if new_size != old.size && resize_entry_only(pool, &old, new_size, key)? {
        let info = pool.info(name)?;
        return Ok(ResizeReport {
            address_kept: info.base_addr == old.base_addr,
            info,
            old_size: old.size,
            pages_copied: 0,
            pages_dropped: 0,
            in_place: true,
        });
    }
    // The PMO recovered and at rest, and nobody else attached until the switch is done.
    let h = pool.open_pmo(name, Perm::Write, key, None)?;
    let _no_readers = pool.lock_no_readers(&old)?;
    let old_core = h.core.clone();
    let old_n = old_core.size_pages();
    let new_n = new_size / PAGE_SIZE;
    let mut report = ResizeReport::in_place(pool.info_of(&old), old.size);
    if new_n == old_n {
        return Ok(report);
    }
    // Pages past the new end: refuse to drop data unless forced.
    let mut buf: Box<Page> = Box::new([0u8; PAGE_SIZE as usize]);
    let mut dropped = Vec::new();
    for p in new_n..old_n {
        if old_core.map_entry(m, p)?.loc() == Some(PageLoc::Zero) {
            continue;
        }
        h.read_page(p, &mut buf)?;
        if buf.iter().any(|&b| b != 0) {
            if !opts.force {
                return Err(shrink_over_data(name, new_size, p));
            }
            dropped.push(p);
        }
    }
    report.pages_dropped = dropped.len() as u64;
    // Within the layout capacity (and not `wedi`, whose whole-PMO checksum covers the
    // size): only metadata changes.
    if new_n <= old_core.npages() && !h.protection().is_some_and(|p| p.keeps_whole_checksum()) {
        resize_in_place(pool, &h, &old, new_size, key, false)?;
        drop(h);
        report.info = pool.info(name)?;
        report.address_kept = report.info.base_addr == old.base_addr;
        return Ok(report);
    }
    report.in_place = false;
    let plain = old_core.layout.plain_off.is_some();
    let layout = PmoLayout::with_plain(new_n, old_core.layout.tag_bytes, plain)
        .and_then(|l| l.with_log(old_core.layout.log_off.is_some()))
        .ok_or_else(|| StoreError::Invalid("PMO size too large".into()))?;
    let mut ns = inner.ns();
    ns.refresh(m, &inner.sb)?;
    let (slot, cur) = ns
        .find(name)
        .map(|(i, e)| (i, e.clone()))
        .ok_or_else(|| not_found(&ns, name))?;
    if cur != old {
        return Err(StoreError::Invalid(format!(
            "PMO '{name}' changed while it was being resized; try again"
        )));
    }
    let new_slot = ns.free_slot().ok_or_else(|| {
        StoreError::NoSpace(format!(
            "the namespace is full ({} PMOs): a resized entry needs a free slot",
            inner.sb.ns_capacity
        ))
    })?;
    let extent_off = ns
        .first_fit(&inner.sb, layout.extent_len)
        .map_err(|largest| no_room(name, new_size, layout.extent_len, largest))?;
    let base_addr = if address_free(&ns, old.base_addr, new_size, old.uuid) {
        old.base_addr
    } else {
        address_for(&ns, &inner.sb, new_size, Some(old.uuid))?
    };
    report.address_kept = base_addr == old.base_addr;
    let mut entry = old.clone();
    entry.generation = old.generation + 1;
    entry.size = new_size;
    // The moved PMO is laid out for its new size.
    entry.capacity = 0;
    entry.extent_off = extent_off;
    entry.extent_len = layout.extent_len;
    entry.base_addr = base_addr;
    if !keys::binding(&entry).is_empty() {
        reverify(&mut entry, key)?;
    }
    let new_core = PmoCore::new(&entry)?;
    let keep = old_n.min(new_n);
    let r = (|| -> Result<()> {
        namespace::bump_gen(m, &inner.sb)?;
        // Zeroes the plaintext area too (the space under it may hold anything).
        new_core.init_on_medium(m)?;
        let table = committed_map(m, &h, keep)?;
        report.pages_copied = copy_pages(m, &old_core, &new_core, &table, &mut opts)?;
        seed_commit(m, &h, &old_core, &new_core)?;
        if inner.sb.ns_mirror != 0 {
            write_header_copy(m, &entry, true)?;
            // The old copy goes now: if the switch below is lost, open restores it.
            pmo_meta::entries::shred_header_copy(m, old.extent_off)?;
        }
        m.fence()?;
        write_entry(m, &inner.sb, new_slot, &entry)?;
        clear_slot(m, &inner.sb, slot)?;
        m.fence()?;
        pmo_meta::entries::shred_slot(m, &inner.sb, slot)?;
        // The pages a shrink dropped stay nowhere readable: their slots in the old
        // extent (now free space, which nothing can take while the metadata lock is held)
        // are zeroed with their tags. The other pages' old copies are what the new extent
        // holds.
        for p in new_n..old_n {
            zero_slot(m, &old_core, 0, p)?;
            zero_slot(m, &old_core, 1, p)?;
        }
        m.fence()?;
        namespace::bump_gen(m, &inner.sb)?;
        Ok(())
    })();
    ns.invalidate();
    drop(ns);
    inner.poison(r)?;
    // The handle's lock is on the old extent's word: released now, the waiters find the
    // entry moved and retry on the new one (`Pool::open_pmo_as`).
    drop(h);
    report.info = pool.info_of(&entry);
    Ok(report)
}

/// Grow the pool file at `path` to `new_size` bytes (rounded down to whole pages) and
/// reopen it. The file is extended first, then the superblock is rewritten with the new
/// size (copy A, fence, copy B, fence): a crash before copy A is durable leaves the old
/// pool in a longer file (growing again finishes it), after it the grown pool. A pool on a
/// device DAX character device grows only up to the device's size (a pool formatted smaller
/// than its device; the device's own size is fixed), and a pool never shrinks. Other
/// processes that have the pool open keep its old size until they reopen it (their
/// namespace changes are refused until then).
pub fn grow_pool(path: &Path, new_size: u64) -> Result<Pool> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::metadata(path).map_err(|source| StoreError::Io {
        op: format!("open {}", path.display()),
        source,
    })?;
    let pool = Pool::open(path)?;
    let (meta_lock, ns) = pool.begin_ns_change()?;
    drop(ns);
    let sb = grown_superblock(&pool, new_size)?;
    if meta.file_type().is_char_device() {
        // The device is mapped whole: nothing to extend, only the superblock to rewrite.
        device_room(path, pool.inner.medium.len(), sb.pool_size)?;
        let r = write_superblocks(&*pool.inner.medium, &sb);
        pool.inner.poison(r)?;
        drop(meta_lock);
        drop(pool);
        return Pool::open(path);
    }
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|source| StoreError::Io {
            op: format!("open {}", path.display()),
            source,
        })?;
    if meta.len() < sb.pool_size {
        f.set_len(sb.pool_size).map_err(|source| StoreError::Io {
            op: format!("extend {} to {} bytes", path.display(), sb.pool_size),
            source,
        })?;
        // A pool allocated whole at init (`pmo init` without --sparse) stays so.
        use std::os::unix::fs::MetadataExt;
        if meta.blocks() * 512 >= meta.len() {
            if let Err(e) = pmo_os::map::preallocate(&f, sb.pool_size) {
                // Nothing refers to the new bytes yet: give them back.
                let _ = f.set_len(meta.len());
                return Err(StoreError::Os(format!(
                    "the filesystem has no room to grow the pool to {} bytes: {e}",
                    sb.pool_size
                )));
            }
        }
    }
    f.sync_all().map_err(|source| StoreError::Io {
        op: format!("sync {}", path.display()),
        source,
    })?;
    let medium = pmo_medium::open_medium(path, Some(pool.inner.medium.kind()))?;
    write_superblocks(&*medium, &sb)?;
    drop(medium);
    drop(meta_lock);
    drop(pool);
    Pool::open(path)
}

/// Grow this pool to `new_size` bytes on a medium that already has them (the crash tests'
/// entry point: [`Pool::grow_pool`] extends the file, then does this).
#[doc(hidden)]
pub fn grow_on(pool: &Pool, new_size: u64) -> Result<()> {
    let inner = &*pool.inner;
    let (_meta, ns) = pool.begin_ns_change()?;
    drop(ns);
    let sb = grown_superblock(pool, new_size)?;
    if inner.medium.len() < sb.pool_size {
        return Err(StoreError::Invalid(format!(
            "the medium has {} bytes, fewer than {}",
            inner.medium.len(),
            sb.pool_size
        )));
    }
    let r = write_superblocks(&*inner.medium, &sb);
    inner.poison(r)
}

/// The superblock of this pool grown to `new_size` bytes, checked.
fn grown_superblock(pool: &Pool, new_size: u64) -> Result<Superblock> {
    let old = &pool.inner.sb;
    let size = new_size & !(PAGE_SIZE - 1);
    if size <= old.pool_size {
        return Err(StoreError::Invalid(format!(
            "the pool already has {} bytes: a pool only grows (asked for {new_size})",
            old.pool_size
        )));
    }
    let mut sb = old.clone();
    sb.pool_size = size;
    sb.heap_len = size - sb.heap_offset;
    Superblock::decode(&sb.encode(), size).map_err(|e| {
        StoreError::Invalid(format!("a pool of {size} bytes is not possible here: {e}"))
    })?;
    Ok(sb)
}

/// The page-map entries of the first `keep` pages of the PMO `h` has open: the verified copy
/// its protection keeps (the one the attach checked against the table MAC), else the medium's.
fn committed_map(m: &dyn Medium, h: &PmoHandle, keep: u64) -> Result<Vec<PageMapEntry>> {
    if let Some(p) = h.protection() {
        return Ok((0..keep).map(|i| p.entry(i)).collect());
    }
    let mut raw = vec![0u8; (keep * 8) as usize];
    m.read(h.core.abs(h.core.layout.map_off), &mut raw)?;
    Ok(raw
        .chunks_exact(8)
        .map(|c| PageMapEntry(u64::from_le_bytes(c.try_into().expect("8 bytes"))))
        .collect())
}

/// Copy the pages of `table` (the first pages of `old`) into `new` as stored (ciphertext, tag,
/// map entry); flushed, not fenced. Returns how many committed pages were copied.
fn copy_pages(
    m: &dyn Medium,
    old: &PmoCore,
    new: &PmoCore,
    table: &[PageMapEntry],
    opts: &mut ResizeOptions<'_>,
) -> Result<u64> {
    let tag_bytes = old.layout.tag_bytes as usize;
    let keep = table.len() as u64;
    let mut page: Box<Page> = Box::new([0u8; PAGE_SIZE as usize]);
    let mut tag = vec![0u8; tag_bytes];
    let mut copied = 0;
    for (p, &e) in table.iter().enumerate() {
        let p = p as u64;
        match e.loc() {
            Some(PageLoc::Zero) => {}
            Some(PageLoc::Slot(s)) => {
                m.read(old.abs(old.layout.page(s, p)), &mut page[..])?;
                let to = new.abs(new.layout.page(s, p));
                m.write(to, &page[..])?;
                m.flush(to, PAGE_SIZE)?;
                if tag_bytes > 0 {
                    m.read(old.abs(old.layout.tag(s, p)), &mut tag)?;
                    let to = new.abs(new.layout.tag(s, p));
                    m.write(to, &tag)?;
                    m.flush(to, tag_bytes as u64)?;
                }
                let to = new.abs(new.layout.map_entry(p));
                m.write(to, &e.0.to_le_bytes())?;
                m.flush(to, 8)?;
                copied += 1;
            }
            None => {
                return Err(StoreError::Corrupt(format!(
                    "PMO '{}' page {p}: invalid page-map entry {:#x}",
                    old.name, e.0
                )))
            }
        }
        if let Some(progress) = opts.progress.as_mut() {
            if (p + 1).is_multiple_of(PROGRESS_PAGES) || p + 1 == keep {
                progress(p + 1, keep);
            }
        }
    }
    Ok(copied)
}

/// Step 3 of the module docs: the commit that vouches for the new extent's page map (none
/// when the PMO never committed: its map is all "zero", as a fresh PMO's).
fn seed_commit(m: &dyn Medium, h: &PmoHandle, old: &PmoCore, new: &PmoCore) -> Result<()> {
    let seq = old.seq();
    if seq == 0 {
        return Ok(());
    }
    let mut raw = vec![0u8; (new.npages() * 8) as usize];
    m.read(new.abs(new.layout.map_off), &mut raw)?;
    let table: Vec<u64> = raw
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let journal = match h.protection() {
        // Without tags there is no trailer (and nothing it would carry).
        Some(p) if old.layout.tag_bytes > 0 => {
            let t = old.newest_trailer(m)?.ok_or_else(|| {
                StoreError::Corrupt(format!("PMO '{}': a commit without its trailer", old.name))
            })?;
            let max_used = table
                .iter()
                .map(|&e| PageMapEntry(e).version())
                .chain([t.epoch, t.reservation])
                .max()
                .unwrap_or(0);
            // A fresh epoch above every version and epoch used, and a reservation above it:
            // the next writer's versions start there.
            let (epoch, reservation) = if p.versions_are_nonces() {
                let until = max_used.saturating_add(RESERVATION_CHUNK);
                (until - 1, until)
            } else {
                (max_used.saturating_add(1), t.reservation)
            };
            let whole = if p.keeps_whole_checksum() {
                let mut sum = pmo_crypt::WholePmoChecksum::new();
                let mut page: Box<Page> = Box::new([0u8; PAGE_SIZE as usize]);
                for i in 0..new.npages() {
                    if i < old.size_pages() {
                        h.read_page(i, &mut page)?;
                    } else {
                        page.fill(0);
                    }
                    sum.update_page(&page);
                }
                Some(sum.finish().0)
            } else {
                None
            };
            p.seed_trailer(&table, epoch, reservation, whole)
                .encode()
                .to_vec()
        }
        _ => Vec::new(),
    };
    new.publish(m, seq + 1, &journal, 0)
}

/// The in-place resize of the module docs ("Within the layout capacity"): `h` holds the
/// PMO open for writing (its exclusive attach lock) under the metadata lock.
/// `keep_address`: refuse (before any change) rather than move the stable address when
/// the grown range is taken (an attached view cannot move).
pub fn resize_in_place(
    pool: &Pool,
    h: &PmoHandle,
    old: &Entry,
    new_size: u64,
    key: &[u8],
    keep_address: bool,
) -> Result<()> {
    let inner = &*pool.inner;
    let (old_n, new_n) = (old.size / PAGE_SIZE, new_size / PAGE_SIZE);
    // A grow first makes sure every page it adds reads as zero: a crash may have cut off
    // the clearing of an earlier shrink (step 2 below).
    if new_n > old_n {
        let r = clear_pages(h, old_n..new_n);
        inner.poison(r)?;
    }
    // 1. The new entry (the commit point: from here on the PMO has its new size).
    switch_size(pool, old, new_size, key, keep_address)?;
    // 2. A shrink clears the pages it dropped.
    if new_n < old_n {
        // The sub-page log's obsolete records may hold bytes of the dropped pages too.
        let r = clear_pages(h, new_n..old_n).and_then(|()| h.scrub_log());
        inner.poison(r)?;
    }
    Ok(())
}

/// A resize within the capacity that touches nothing but the entry, when every page it
/// adds or drops has never been written (its map entry "zero"): under the metadata lock
/// (held by the caller) and the PMO's exclusive attach lock, the journal replayed, no page
/// read and no key-derived state but the new verifier, so its cost does not follow the
/// PMO's size. `Ok(false)`: another path is needed (a page in the range was written, a
/// rotation is under way, `wedi`, past the capacity); nothing was changed.
fn resize_entry_only(pool: &Pool, old: &Entry, new_size: u64, key: &[u8]) -> Result<bool> {
    let inner = &*pool.inner;
    let m = &*inner.medium;
    let scheme = Scheme::from_code(old.scheme)?;
    let (old_n, new_n) = (old.size / PAGE_SIZE, new_size / PAGE_SIZE);
    if new_size > old.capacity_bytes() || scheme.whole_checksum() {
        return Ok(false);
    }
    let Some(_attach) = pool.lock_attach_exclusive(old, None)? else {
        return Err(pool.busy(old));
    };
    let _no_readers = pool.lock_no_readers(old)?;
    let core = PmoCore::new(old)?;
    pmo_meta::entries::check_in_medium(old, m)?;
    let r = core
        .recover(m)
        .map(|r| r.note.into_iter().for_each(|n| inner.note_repair(n)));
    inner.poison(r)?;
    if pmo_pool::rotation::read_record(m, &core)?.is_some() {
        return Ok(false);
    }
    // Psynced bytes a crash left in the sub-page log are not in the page map: the path
    // that opens the PMO folds them first.
    if pmo_engine::sublog::may_have_records(&core, m)? {
        return Ok(false);
    }
    for p in old_n.min(new_n)..old_n.max(new_n) {
        if core.map_entry(m, p)?.loc() != Some(PageLoc::Zero) {
            return Ok(false);
        }
    }
    switch_size(pool, old, new_size, key, false)?;
    Ok(true)
}

/// Step 1 of [`Pool::resize_in_place`]: replace `old` (unchanged since the caller read it)
/// by the entry of the same extent with size `new_size` and a verifier over it.
fn switch_size(
    pool: &Pool,
    old: &Entry,
    new_size: u64,
    key: &[u8],
    keep_address: bool,
) -> Result<()> {
    let inner = &*pool.inner;
    let m = &*inner.medium;
    let mut ns = inner.ns();
    ns.refresh(m, &inner.sb)?;
    let (slot, cur) = ns
        .find(&old.name)
        .map(|(i, e)| (i, e.clone()))
        .ok_or_else(|| not_found(&ns, &old.name))?;
    if cur != *old {
        return Err(StoreError::Invalid(format!(
            "PMO '{}' changed while it was being resized; try again",
            old.name
        )));
    }
    let new_slot = ns.free_slot().ok_or_else(|| {
        StoreError::NoSpace(format!(
            "the namespace is full ({} PMOs): a resized entry needs a free slot",
            inner.sb.ns_capacity
        ))
    })?;
    let mut entry = old.clone();
    entry.generation = old.generation + 1;
    entry.size = new_size;
    entry.capacity = old.capacity_bytes();
    if !address_free(&ns, old.base_addr, new_size, old.uuid) {
        if keep_address {
            return Err(StoreError::AddressInUse {
                name: old.name.clone(),
                addr: old.base_addr,
                len: new_size,
            });
        }
        entry.base_addr = address_for(&ns, &inner.sb, entry.capacity, Some(old.uuid))?;
    }
    if !keys::binding(&entry).is_empty() {
        reverify(&mut entry, key)?;
    }
    let r = pmo_meta::entries::switch_entry(m, &inner.sb, slot, new_slot, &entry);
    ns.invalidate();
    drop(ns);
    inner.poison(r)
}

/// Zero page `p`'s copy in data slot `s` of `core` and its tag; flushed, not fenced.
fn zero_slot(m: &dyn Medium, core: &PmoCore, s: u8, p: u64) -> Result<()> {
    let l = &core.layout;
    m.zero(core.abs(l.page(s, p)), PAGE_SIZE)?;
    m.flush(core.abs(l.page(s, p)), PAGE_SIZE)?;
    if l.tag_bytes > 0 {
        m.zero(core.abs(l.tag(s, p)), l.tag_bytes)?;
        m.flush(core.abs(l.tag(s, p)), l.tag_bytes)?;
    }
    Ok(())
}

/// Make every page of `pages` (at or past the PMO's size) read as zero and leave nothing of
/// what it held on the medium: the pages holding data get zeros in one psync, then the slot
/// each map entry does not name (and its tag) and the page's plaintext-area page are zeroed;
/// fenced. Costs a map read per page plus the pages that held something.
fn clear_pages(h: &PmoHandle, pages: std::ops::Range<u64>) -> Result<()> {
    let m = h.medium();
    let core = &h.core;
    let mut buf: Box<Page> = Box::new([0u8; PAGE_SIZE as usize]);
    let mut data = Vec::new();
    let mut stored = Vec::new();
    for p in pages {
        match core.map_entry(m, p)?.loc() {
            Some(PageLoc::Zero) => {}
            Some(PageLoc::Slot(_)) => {
                stored.push(p);
                h.read_page(p, &mut buf)?;
                if buf.iter().any(|&b| b != 0) {
                    data.push(p);
                }
            }
            None => {
                return Err(StoreError::Corrupt(format!(
                    "PMO '{}' page {p}: invalid page-map entry",
                    core.name
                )))
            }
        }
    }
    if !data.is_empty() {
        h.commit_with(&data, &mut |_, dst| {
            dst.fill(0);
            Ok(())
        })?;
    }
    let l = &core.layout;
    for &p in &stored {
        let Some(PageLoc::Slot(named)) = core.map_entry(m, p)?.loc() else {
            continue;
        };
        zero_slot(m, core, 1 - named, p)?;
        if let Some(off) = l.plain_off {
            let at = core.abs(off + p * PAGE_SIZE);
            m.zero(at, PAGE_SIZE)?;
            m.flush(at, PAGE_SIZE)?;
        }
    }
    m.fence()?;
    Ok(())
}

/// A pool on the DAX character device `path` of `device_len` bytes grows to `want` bytes
/// only inside the device (a pool formatted smaller than it): a device's size is fixed.
fn device_room(path: &Path, device_len: u64, want: u64) -> Result<()> {
    if want <= device_len {
        return Ok(());
    }
    Err(StoreError::Unsupported(format!(
        "{} is a DAX device of {device_len} bytes, and a device's size is fixed: the pool on \
         it grows to {device_len} bytes at most (asked for {want}); for more, make a larger \
         namespace (`ndctl create-namespace`) and move the PMOs with `pmo export` and \
         `pmo import`",
        path.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_on_a_dax_device_grows_only_inside_the_device() {
        let dev = Path::new("/dev/dax0.0");
        assert!(device_room(dev, 64 << 20, 32 << 20).is_ok());
        assert!(device_room(dev, 64 << 20, 64 << 20).is_ok());
        let e = device_room(dev, 64 << 20, (64 << 20) + 4096).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, StoreError::Unsupported(_)), "{msg}");
        assert!(
            msg.contains("/dev/dax0.0") && msg.contains("size is fixed"),
            "{msg}"
        );
        assert!(!e.is_integrity(), "{msg}");
    }
}
