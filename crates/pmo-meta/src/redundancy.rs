//! Redundant metadata (issue 18, `docs/format.md` version 3): the two copies of every
//! namespace slot and of the configuration record, the copy of each entry in its PMO's header
//! page, and what rebuilds a slot from them (`pmo check --repair`). Every write goes through
//! [`Medium`] with its fences; the order of the writes is what lets one copy decide for the
//! other after a crash.

use pmo_format::superblock::{PoolConfig, CONFIG_OFFSET, CONFIG_SIZE, SB_OFFSETS, SB_SIZE};
use pmo_format::{Entry, PmoLayout, Superblock, ENTRY_SIZE, PAGE_SIZE};
use pmo_medium::Medium;
use pmo_os::lock::LockKind;

use crate::error::{Result, StoreError};
use crate::locks;
use crate::meta::PoolMeta;
use crate::namespace::{self, Namespace};

impl PoolMeta {
    /// Refuse a namespace change when another process upgraded the pool's format since this
    /// handle opened it (this handle would not keep the mirror). Under the metadata lock.
    pub fn check_superblock_current(&self) -> Result<()> {
        let inner = self;
        let mut b = [0u8; SB_SIZE];
        inner.medium.read(SB_OFFSETS[0], &mut b)?;
        if Superblock::decode(&b, u64::MAX).is_ok_and(|sb| sb.pool_size > inner.sb.pool_size) {
            return Err(StoreError::Invalid(
                "the pool was grown by another process since this one opened it; reopen the pool"
                    .into(),
            ));
        }
        match Superblock::decode(&b, inner.medium.len()) {
            Ok(sb) if sb.version != inner.sb.version || sb.ns_mirror != inner.sb.ns_mirror => {
                Err(StoreError::Invalid(
                    "the pool's format was upgraded by another process since this one opened it; reopen the pool".into(),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Run `f` on the damaged namespace slots (those whose copies are all damaged) under the
    /// metadata lock, as one namespace change; `f` gets the medium, the namespace and the slots.
    fn change_damaged_slots<T>(
        &self,
        f: impl FnOnce(&dyn Medium, &Namespace, Vec<usize>) -> Result<T>,
    ) -> Result<T> {
        let inner = self;
        inner.alive()?;
        let _meta = inner
            .locker
            .lock_blocking(locks::META, LockKind::Exclusive)?;
        self.check_superblock_current()?;
        let m = &*inner.medium;
        let mut ns = inner.ns();
        ns.reload(m, &inner.sb)?;
        let slots: Vec<usize> = ns.corrupt.iter().map(|c| c.0).collect();
        let r = (|| {
            namespace::bump_gen(m, &inner.sb)?;
            let out = f(m, &ns, slots)?;
            namespace::bump_gen(m, &inner.sb)?;
            Ok(out)
        })();
        ns.invalidate();
        inner.poison(r)
    }

    /// Rebuild every namespace slot whose copies are all damaged from the copy of its entry in
    /// its PMO's header page (`pmo check --repair`): found by scanning the space no live entry
    /// covers. Returns the names rebuilt; slots left damaged stay in `Pool::damaged_slots`.
    pub fn rebuild_damaged_slots(&self) -> Result<Vec<(usize, String)>> {
        let sb = &self.sb;
        self.change_damaged_slots(|m, ns, slots| {
            let mut rebuilt = Vec::new();
            if slots.is_empty() {
                return Ok(rebuilt);
            }
            let mut found = header_copies(m, sb, ns)?;
            for slot in slots {
                // Prefer the copy whose extent the damaged slot still names (either copy).
                let named = |mirror: bool| -> Result<u64> {
                    let mut b = [0u8; 8];
                    m.read(namespace::copy_offset(sb, slot, mirror) + 40, &mut b)?;
                    Ok(u64::from_le_bytes(b))
                };
                let hints = [
                    named(false)?,
                    if sb.ns_mirror != 0 { named(true)? } else { 0 },
                ];
                let pick = found
                    .iter()
                    .position(|e| hints.contains(&e.extent_off))
                    .or(if found.is_empty() { None } else { Some(0) });
                let Some(i) = pick else { break };
                let e = found.remove(i);
                write_entry(m, sb, slot, &e)?;
                rebuilt.push((slot, e.name));
            }
            Ok(rebuilt)
        })
    }

    /// Free every namespace slot whose copies are all damaged (`pmo check --repair
    /// --drop-damaged`): the PMO it held is given up, and the space it may cover becomes free.
    /// Returns the slots freed.
    pub fn drop_damaged_slots(&self) -> Result<Vec<usize>> {
        let sb = &self.sb;
        self.change_damaged_slots(|m, _, slots| {
            for &i in &slots {
                if sb.ns_mirror != 0 {
                    write_copy(m, sb, i, true, None)?;
                }
                write_copy(m, sb, i, false, None)?;
            }
            Ok(slots)
        })
    }
}

/// A configuration slot to rewrite with the record in force, and what to report.
pub type ConfigFix = (u64, Option<String>);

/// The configuration record in force, and the slots to rewrite with it (with what to report:
/// `None` for the leftover of an interrupted update or a version-2 pool's older record).
///
/// Since version 3 an update writes the new record into both slots, slot `seq % 2` first,
/// each body first and its magic last (fenced), so no crash leaves a slot that has the magic
/// and fails its CRC: such a slot is damage. The valid record with the highest sequence
/// number is in force; a damaged slot beside a valid one is rewritten from it; two damaged
/// slots are corruption.
pub fn config_state(m: &dyn Medium, sb: &Superblock) -> Result<(PoolConfig, Vec<ConfigFix>)> {
    let mut valid: [Option<PoolConfig>; 2] = [None, None];
    let mut damaged = [false; 2];
    for i in 0..2u64 {
        let mut b = [0u8; CONFIG_SIZE];
        m.read(sb.config_offset + i * CONFIG_SIZE as u64, &mut b)?;
        match PoolConfig::decode(&b) {
            Some(c)
                if sb.version >= pmo_format::FORMAT_VERSION_MIRROR
                    || PoolConfig::slot(c.seq) == i =>
            {
                valid[i as usize] = Some(c)
            }
            Some(_) => {}
            None => damaged[i as usize] = b[..4] != [0u8; 4],
        }
    }
    let best = valid.iter().flatten().max_by_key(|c| c.seq).copied();
    let Some(best) = best else {
        return Err(StoreError::Corrupt(
            "no valid pool configuration record (both slots damaged)".into(),
        ));
    };
    let mut fixes = Vec::new();
    if sb.version >= pmo_format::FORMAT_VERSION_MIRROR {
        for i in 0..2 {
            if valid[i] != Some(best) {
                let note = damaged[i].then(|| {
                    format!(
                        "configuration record slot {i} damaged: rewritten from slot {}",
                        1 - i
                    )
                });
                fixes.push((i as u64, note));
            }
        }
    }
    Ok((best, fixes))
}

pub fn read_config(m: &dyn Medium, sb: &Superblock) -> Result<PoolConfig> {
    config_state(m, sb).map(|c| c.0)
}

/// Write configuration record `c` into slot `i`: body first, magic last, each fenced.
pub fn write_config_slot(m: &dyn Medium, sb: &Superblock, i: u64, c: &PoolConfig) -> Result<()> {
    let off = sb.config_offset + i * CONFIG_SIZE as u64;
    let enc = c.encode();
    let mut body = enc;
    body[..4].fill(0);
    m.write(off, &body)?;
    m.persist(off, CONFIG_SIZE as u64)?;
    m.write(off, &enc[..4])?;
    m.persist(off, 4)?;
    Ok(())
}

/// "Not found" when the namespace is whole; corruption when a damaged slot may hold `name`.
pub fn not_found(ns: &Namespace, name: &str) -> StoreError {
    match ns.damage() {
        None => StoreError::NotFound(name.into()),
        Some(d) => StoreError::Corrupt(format!(
            "no intact namespace entry named '{name}', and {d}: it may be that PMO (`pmo check --repair` repairs what it can)"
        )),
    }
}

/// Write an entry so that a crash leaves either no entry or the whole entry: copy A, then the
/// mirror (copy B), each body first with the magic word zeroed, then the magic word in one
/// 8-byte store. Fenced.
pub fn write_entry(m: &dyn Medium, sb: &Superblock, slot: usize, e: &Entry) -> Result<()> {
    write_copy(m, sb, slot, false, Some(e))?;
    if sb.ns_mirror != 0 {
        write_copy(m, sb, slot, true, Some(e))?;
    }
    Ok(())
}

/// Write one copy of a slot: `e` (body, fence, magic word, fence), or free (the magic word
/// zeroed, fenced).
pub fn write_copy(
    m: &dyn Medium,
    sb: &Superblock,
    slot: usize,
    mirror: bool,
    e: Option<&Entry>,
) -> Result<()> {
    let off = namespace::copy_offset(sb, slot, mirror);
    match e {
        Some(e) => {
            let enc = e.encode();
            let mut body = enc;
            body[..8].fill(0);
            m.write(off, &body)?;
            m.flush(off, ENTRY_SIZE as u64)?;
            m.fence()?;
            m.write(off, &enc[..8])?;
        }
        None => m.write(off, &[0u8; 8])?,
    }
    m.flush(off, 8)?;
    m.fence()?;
    Ok(())
}

/// Free a slot by zeroing its first 8 bytes (one atomic store): the mirror first (fenced), then
/// copy A, flushed, not fenced.
pub fn clear_slot(m: &dyn Medium, sb: &Superblock, slot: usize) -> Result<()> {
    if sb.ns_mirror != 0 {
        write_copy(m, sb, slot, true, None)?;
    }
    let off = namespace::slot_offset(sb, slot);
    m.write(off, &[0u8; 8])?;
    m.flush(off, 8)?;
    Ok(())
}

/// Write (or, `live` false, clear the magic word of) the copy of `e` in its header page.
/// Flushed, not fenced.
pub fn write_header_copy(m: &dyn Medium, e: &Entry, live: bool) -> Result<()> {
    let off = e.extent_off + PmoLayout::ENTRY_COPY_OFF;
    if live {
        m.write(off, &e.encode())?;
        m.flush(off, ENTRY_SIZE as u64)?;
    } else {
        m.write(off, &[0u8; 8])?;
        m.flush(off, 8)?;
    }
    Ok(())
}

/// The header-page copies of PMOs in space no live entry covers: candidates to rebuild a
/// damaged slot from (a copy names its own extent, so only a header page matches).
pub fn header_copies(m: &dyn Medium, sb: &Superblock, ns: &Namespace) -> Result<Vec<Entry>> {
    let mut found: Vec<Entry> = Vec::new();
    for (start, len) in ns.free_extents(sb) {
        let mut off = start;
        while off + PAGE_SIZE <= start + len {
            let mut b = [0u8; ENTRY_SIZE];
            m.read(off + PmoLayout::ENTRY_COPY_OFF, &mut b[..8])?;
            if Entry::has_magic(&b) {
                m.read(off + PmoLayout::ENTRY_COPY_OFF, &mut b)?;
                if let Ok(Some(e)) = Entry::decode(&b) {
                    if e.extent_off == off
                        && e.extent_len <= start + len - off
                        && ns.find(&e.name).is_none()
                    {
                        off += e.extent_len.max(PAGE_SIZE);
                        found.push(e);
                        continue;
                    }
                }
            }
            off += PAGE_SIZE;
        }
    }
    Ok(found)
}

/// Write both superblock copies, A then B, each fenced.
pub fn write_superblocks(m: &dyn Medium, sb: &Superblock) -> Result<()> {
    let enc = sb.encode();
    for off in SB_OFFSETS {
        m.write(off, &enc)?;
        m.flush(off, SB_SIZE as u64)?;
        m.fence()?;
    }
    Ok(())
}

/// Rewrite each configuration slot that disagrees with the record in force (at open, under the
/// metadata lock); what to report.
pub fn repair_config(m: &dyn Medium, sb: &Superblock) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    if let Ok((cfg, fixes)) = config_state(m, sb) {
        for (i, note) in fixes {
            write_config_slot(m, sb, i, &cfg)?;
            notes.extend(note);
        }
    }
    Ok(notes)
}

/// Each live PMO's header page holds a copy of its entry: PMOs from before version 3, or cut
/// off by a pdestroy that did not finish, get it back here (at open, under the metadata lock).
pub fn restore_header_copies(m: &dyn Medium, sb: &Superblock, live: &[Entry]) -> Result<()> {
    if sb.ns_mirror == 0 {
        return Ok(());
    }
    let mut wrote = false;
    for e in live {
        let mut b = [0u8; ENTRY_SIZE];
        m.read(e.extent_off + PmoLayout::ENTRY_COPY_OFF, &mut b)?;
        if b != e.encode() {
            write_header_copy(m, e, true)?;
            wrote = true;
        }
    }
    if wrote {
        m.fence()?;
    }
    Ok(())
}

/// The superblock copies as read at open, the one in force, and what to report.
pub struct SuperblockChoice {
    pub sb: Superblock,
    pub copies: Vec<std::result::Result<Superblock, pmo_format::FormatError>>,
    pub repairs: Vec<String>,
}

/// Choose the superblock at open: copy A if valid, else copy B (the other is rewritten by
/// recovery, reported here). Both invalid: not a pool (both blank, or foreign bytes and no
/// configuration record), an interrupted `pmo init` (one copy blank), else corruption.
pub fn choose_superblock(m: &dyn Medium) -> Result<SuperblockChoice> {
    use pmo_format::FormatError::TooNew;
    let len = m.len();
    let mut copies = Vec::new();
    let mut blank = Vec::new();
    for off in SB_OFFSETS {
        let mut b = [0u8; SB_SIZE];
        // What is there of it (a truncated pool may end inside a copy).
        if off < len {
            let avail = (len - off).min(SB_SIZE as u64) as usize;
            m.read(off, &mut b[..avail])?;
        }
        blank.push(b.iter().all(|&x| x == 0));
        copies.push(Superblock::decode(&b, len));
    }
    // A copy from a newer build (checksum right, version above ours) is not damage: the pool
    // was written, or its upgrade begun, by a newer pmo. Refuse it whole, never "repair" that
    // copy back to our version under the newer build's feet.
    if let Some(e) = copies
        .iter()
        .find_map(|c| c.as_ref().err().filter(|e| matches!(e, TooNew { .. })))
    {
        return Err(StoreError::Unsupported(format!(
            "{e}: a newer pmo wrote it; open it with that one"
        )));
    }
    let mut repairs = Vec::new();
    let sb = match (&copies[0], &copies[1]) {
        (Ok(a), _) => a.clone(),
        (Err(_), Ok(b)) => b.clone(),
        (Err(a), Err(b)) => {
            use pmo_format::FormatError::Foreign;
            // `init` writes the configuration page first and the superblocks last: a pool
            // whose configuration page holds a record lost both superblocks to damage.
            let configured = {
                let mut c = [0u8; CONFIG_SIZE];
                (0..2u64).any(|i| {
                    m.read(CONFIG_OFFSET + i * CONFIG_SIZE as u64, &mut c)
                        .is_ok()
                        && c[..4] == pmo_format::superblock::CONFIG_MAGIC.to_le_bytes()
                })
            };
            return Err(match (a, b) {
                (Foreign, Foreign) if !configured || blank[0] && blank[1] => StoreError::NotAPool("no pmo superblock (a foreign or empty file)".into()),
                // A pmo superblock, and the medium ends before the other copy: the pool
                // was truncated (init sizes the file before it writes either copy).
                (Foreign, e) | (e, Foreign) if SB_OFFSETS.iter().any(|&o| o + SB_SIZE as u64 > len) => {
                    StoreError::Corrupt(format!("the pool is truncated to {len} bytes ({e})"))
                }
                // One copy never written: `init` was interrupted before the pool existed.
                (_, _) if blank[0] || blank[1] => StoreError::NotAPool(format!("no valid superblock ({}; the other copy was never written): an interrupted `pmo init`?", if blank[0] { b } else { a })),
                // The same fault in both copies (a truncated pool): said once.
                (e, f) if e.to_string() == f.to_string() => StoreError::Corrupt(format!("both superblock copies are damaged: {e}")),
                (e, f) => StoreError::Corrupt(format!("both superblock copies are damaged (A: {e}; B: {f})")),
            });
        }
    };
    for (i, c) in copies.iter().enumerate() {
        if let Err(e) = c {
            repairs.push(format!(
                "superblock copy {}: {e}: rewritten from copy {}",
                ["A", "B"][i],
                ["B", "A"][i]
            ));
        }
    }
    Ok(SuperblockChoice {
        sb,
        copies,
        repairs,
    })
}
