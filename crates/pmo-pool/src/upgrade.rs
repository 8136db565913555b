//! The upgrade of older pools on open (`docs/format.md`, Versioning), under the metadata lock:
//! - to version 3: the namespace mirror;
//! - to version 4: every page-map entry of every live PMO gets its wide check;
//! - to version 5: the superblock alone (entries gain a layout capacity field, 0 = the size).
//!
//! - to version 6: the superblock alone (PMOs created from then on may have a sub-page commit
//!   log, entry flag bit 1; existing entries have none and keep page-granular psync).
//! - to version 7: the superblock alone (PMOs created from then on may belong to a key family,
//!   entry flag bit 2; existing entries keep their own Argon2id salt).
//! - to version 8: the superblock alone (writers from then on check the readers word of the
//!   header page before each psync; every existing PMO has it zero).
//!
//! Each step ends with the new superblock (copy A, then copy B, each fenced); a crash before
//! copy A is durable leaves the older pool, which the next open upgrades again. Every write
//! goes through [`Medium`]. Called by `Pool::open` before recovery.

use std::sync::Arc;

use pmo_format::superblock::{SB_OFFSETS, SB_SIZE};
use pmo_format::{
    Superblock, ENTRY_SIZE, FORMAT_VERSION, FORMAT_VERSION_AEAD, FORMAT_VERSION_CAPACITY,
    FORMAT_VERSION_FAMILY, FORMAT_VERSION_MAP_CHECK, FORMAT_VERSION_MIRROR, FORMAT_VERSION_READERS,
    FORMAT_VERSION_SUBLOG,
};
use pmo_medium::Medium;
use pmo_os::lock::LockKind;

use pmo_engine::engine::PmoCore;
use pmo_meta::error::Result;
use pmo_meta::locks::{self, Locker};
use pmo_meta::namespace::Namespace;
use pmo_meta::redundancy::write_superblocks;

/// Upgrade a pool older than [`FORMAT_VERSION`] as far as it can go now. Postponed (said so)
/// while the namespace has a damaged slot (its PMO's extent is unknown), no space fits the
/// mirror, or (version 4) a PMO is attached by another process. Returns the superblock in
/// force and what to report.
pub fn upgrade(
    medium: &Arc<dyn Medium>,
    locker: &Locker,
    sb: Superblock,
) -> Result<(Superblock, Vec<String>)> {
    if sb.version >= FORMAT_VERSION {
        return Ok((sb, Vec::new()));
    }
    let m = &**medium;
    let _meta = locker.lock_blocking(locks::META, LockKind::Exclusive)?;
    // Another process may have upgraded it while we waited.
    let mut sb = sb;
    let mut b = [0u8; SB_SIZE];
    m.read(SB_OFFSETS[0], &mut b)?;
    if let Ok(now) = Superblock::decode(&b, m.len()) {
        if now.uuid == sb.uuid && now.version > sb.version {
            sb = now;
        }
    }
    let mut notes = Vec::new();
    if sb.version < FORMAT_VERSION_MIRROR {
        let (new, note) = mirror(m, sb)?;
        notes.push(note);
        if new.version < FORMAT_VERSION_MIRROR {
            return Ok((new, notes));
        }
        sb = new;
    }
    if sb.version < FORMAT_VERSION_MAP_CHECK {
        let (new, note) = map_checks(m, locker, sb)?;
        notes.push(note);
        if new.version < FORMAT_VERSION_MAP_CHECK {
            return Ok((new, notes));
        }
        sb = new;
    }
    // Steps that change nothing on the medium but the version, which keeps older builds away
    // from what the new version allows. A crash before copy A is durable leaves the older
    // pool, which the next open upgrades.
    let version_only: [(u32, &str); 5] = [
        // Every existing entry has capacity 0 (= its size); older builds ignore bytes
        // 468..476 of an entry and would lay the extent out by the size.
        (
            FORMAT_VERSION_CAPACITY,
            "PMOs may now have a layout capacity above their size",
        ),
        // No existing entry has the log flag; older builds would read flag bit 1 as a damaged
        // entry and would not fold live records.
        (
            FORMAT_VERSION_SUBLOG,
            "PMOs created from now on may have a sub-page commit log",
        ),
        // No existing entry has the family flag; older builds would read flag bit 2 as a
        // damaged entry and derive the wrong master.
        (
            FORMAT_VERSION_FAMILY,
            "PMOs created from now on may belong to a key family",
        ),
        // No reader has announced itself (header word 2256 is zero in every PMO); older
        // builds' writers would ignore the word and overwrite versions readers still read.
        (
            FORMAT_VERSION_READERS,
            "readers may now attach beside a writer",
        ),
        // Every existing scheme code has zero in bits 9-11 (AES-256-GCM), so every PMO keeps
        // its cipher; older builds would read a code naming AEGIS-256X4 as a damaged entry.
        (
            FORMAT_VERSION_AEAD,
            "PMOs created from now on may seal their pages with AEGIS-256X4 (secure:aegis)",
        ),
    ];
    for (version, what) in version_only {
        if sb.version < version {
            let new = Superblock { version, ..sb };
            write_superblocks(m, &new)?;
            notes.push(format!(
                "format version {} upgraded to {version}: {what}",
                sb.version
            ));
            sb = new;
        }
    }
    Ok((sb, notes))
}

/// To version 3: write the namespace mirror (after namespace A when the gap before the heap
/// holds it, else in free heap space), fence, then the new superblock.
fn mirror(m: &dyn Medium, sb: Superblock) -> Result<(Superblock, String)> {
    let mut ns = Namespace::default();
    ns.reload(m, &sb)?;
    if let Some(d) = ns.damage() {
        let note = format!(
            "format version {} not upgraded to {FORMAT_VERSION} (namespace mirror): {d}",
            sb.version
        );
        return Ok((sb, note));
    }
    let bytes = sb.ns_bytes();
    let after_a = sb.ns_offset + bytes;
    let at = if after_a + bytes <= sb.heap_offset {
        Some(after_a)
    } else {
        ns.free_extents(&sb)
            .into_iter()
            .find(|&(_, len)| len >= bytes)
            .map(|(off, _)| off)
    };
    let Some(at) = at else {
        let note = format!(
            "format version {} not upgraded to {FORMAT_VERSION} (namespace mirror): no free {bytes}-byte extent for the mirror; free space and reopen",
            sb.version
        );
        return Ok((sb, note));
    };
    let mut mirror = vec![0u8; bytes as usize];
    for (i, e) in ns.slots.iter().enumerate() {
        if let Some(e) = e {
            mirror[i * ENTRY_SIZE..(i + 1) * ENTRY_SIZE].copy_from_slice(&e.encode());
        }
    }
    let new = Superblock {
        version: FORMAT_VERSION_MIRROR,
        ns_mirror: at,
        ..sb
    };
    m.write(at, &mirror)?;
    m.flush(at, bytes)?;
    m.fence()?;
    write_superblocks(m, &new)?;
    let note = format!(
        "format version {} upgraded to {FORMAT_VERSION_MIRROR}: the namespace now has a mirror at offset {at:#x}",
        sb.version
    );
    Ok((new, note))
}

/// To version 4: under each live PMO's exclusive attach lock, recover it (a journal replay
/// writes checked entries), then give every page-map entry without the wide check its check,
/// in place (one aligned 8-byte store each: a crash leaves each entry old or new, both valid);
/// one fence; then the new superblock. An entry whose narrow check fails is left as it is:
/// it stays corruption, reported where it is read.
fn map_checks(m: &dyn Medium, locker: &Locker, sb: Superblock) -> Result<(Superblock, String)> {
    let mut ns = Namespace::default();
    ns.reload(m, &sb)?;
    let from = sb.version;
    let postponed = |why: String| {
        format!("format version {from} not upgraded to {FORMAT_VERSION} (page-map checks): {why}")
    };
    if let Some(d) = ns.damage() {
        return Ok((sb, postponed(d)));
    }
    let live: Vec<_> = ns.live().into_iter().map(|(_, e)| e.clone()).collect();
    let mut guards = Vec::with_capacity(live.len());
    for e in &live {
        match locker.lock(locks::attach_word(e.extent_off), LockKind::Exclusive, None)? {
            Some(g) => guards.push(g),
            None => {
                return Ok((
                    sb,
                    postponed(format!(
                        "PMO '{}' is attached; reopen when it is detached",
                        e.name
                    )),
                ))
            }
        }
    }
    let (mut sealed, mut pmos) = (0u64, 0usize);
    for e in &live {
        let Ok(core) = PmoCore::new(e) else {
            continue; // a damaged entry: its own open reports it
        };
        // A PMO whose metadata is damaged keeps its unchecked entries (they still read, and
        // its own open reports the damage); the others are replayed first.
        let _ = core.recover(m);
        let n = core.seal_map_entries(m)?;
        sealed += n;
        pmos += usize::from(n > 0);
    }
    m.fence()?;
    let new = Superblock {
        version: FORMAT_VERSION_MAP_CHECK,
        ..sb
    };
    write_superblocks(m, &new)?;
    drop(guards);
    Ok((
        new,
        format!(
            "format version {} upgraded to {FORMAT_VERSION_MAP_CHECK}: {sealed} page-map entries of {pmos} PMOs now carry a 16-bit check",
            sb.version
        ),
    ))
}
