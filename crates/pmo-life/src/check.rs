//! `Pool::check`: every checksum, the namespace and the space accounting of a pool.

use pmo_format::superblock::{SB_OFFSETS, SB_SIZE};
use pmo_format::{Entry, Superblock};
use pmo_os::lock::LockKind;

use pmo_engine::engine::PmoCore;
use pmo_meta::error::Result;
use pmo_meta::locks;
use pmo_pool::pool::Pool;

/// What `Pool::check` found.
#[derive(Clone, Debug, Default)]
pub struct CheckReport {
    /// Integrity problems (corruption): exit code 2.
    pub problems: Vec<String>,
    /// PMOs checked.
    pub pmos: usize,
    /// PMOs skipped because another user has them attached for writing.
    pub skipped: Vec<String>,
    /// Bytes used by PMO extents and free in the heap: `used + free == heap_len` when healthy.
    pub used_bytes: u64,
    pub free_bytes: u64,
    pub heap_len: u64,
}

/// Check every checksum, the namespace and the space accounting. PMOs attached for writing
/// by someone else are skipped (listed in the report).
pub fn check(pool: &Pool) -> Result<CheckReport> {
    let inner = &*pool.inner;
    let m = &*inner.medium;
    let mut report = CheckReport {
        heap_len: inner.sb.heap_len,
        ..Default::default()
    };
    for off in SB_OFFSETS {
        let mut b = [0u8; SB_SIZE];
        m.read(off, &mut b)?;
        if let Err(e) = Superblock::decode(&b, m.len()) {
            report
                .problems
                .push(format!("superblock copy at {off}: {e}"));
        }
    }
    let live: Vec<Entry> = {
        let mut ns = inner.ns();
        ns.reload(m, &inner.sb)?;
        for (slot, why) in &ns.corrupt {
            report
                .problems
                .push(format!("namespace slot {slot}: {why}"));
        }
        report.problems.extend(ns.extent_problems(&inner.sb));
        let free = ns.free_extents(&inner.sb);
        report.free_bytes = free.iter().map(|f| f.1).sum();
        let live: Vec<Entry> = ns.live().into_iter().map(|(_, e)| e.clone()).collect();
        report.used_bytes = live.iter().map(|e| e.extent_len).sum();
        if inner.sb.ns_mirror >= inner.sb.heap_offset {
            // An upgraded pool's namespace mirror in the heap.
            report.used_bytes += inner.sb.ns_bytes();
        }
        ns.invalidate();
        live
    };
    if report.used_bytes + report.free_bytes != report.heap_len && report.problems.is_empty() {
        report.problems.push(format!(
            "space accounting: used {} + free {} != heap {}",
            report.used_bytes, report.free_bytes, report.heap_len
        ));
    }
    for e in live {
        match PmoCore::new(&e) {
            Err(err) => report.problems.push(err.to_string()),
            Ok(core) => {
                if inner.locker.holder(locks::attach_word(e.extent_off))?
                    == Some(LockKind::Exclusive)
                {
                    report.skipped.push(e.name.clone());
                    continue;
                }
                report.problems.extend(core.check(m)?);
                if inner.sb.version >= pmo_format::FORMAT_VERSION_MAP_CHECK {
                    report.problems.extend(core.map_check_problems(m)?);
                }
                report.pmos += 1;
            }
        }
    }
    Ok(report)
}
