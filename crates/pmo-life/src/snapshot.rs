//! Live snapshot (`docs/lifecycle.md`): a consistent copy of a PMO's last psynced state while
//! its writer keeps working, to a new PMO or to an export file. Export and copy run on it too.
//!
//! Shadow paging already keeps the committed state: a psync writes each page to the slot its
//! map entry does *not* name, and only the second psync of a page after a point in time can
//! overwrite the slot that was current then. The snapshot takes no attach lock and never
//! stops the writer; it copies in passes, like a live migration's pre-copy:
//!
//! 1. read the committed map of the newest psync `s` (`PmoCore::committed_map`: the map on
//!    the medium with the journal of `s` applied, read again if a psync commits meanwhile)
//!    and verify it as an attach does (`secure`: the version-table MAC of the trailer);
//! 2. copy every page whose committed entry differs from the entry its copy was taken from
//!    (all pages in the first pass): read the slot the entry names, decrypt and verify it,
//!    then re-read the page's map entry on the medium. The writer changes that entry (step 4
//!    of a psync) before any later psync may start writing the slot, so an unchanged entry
//!    proves the bytes read were the committed ones; a changed one leaves the page for the
//!    next pass (a torn read that fails its tag is also only a changed entry);
//! 3. when a pass copied every page it needed, each page of the copy holds the contents its
//!    entry in the map of that pass's `s` names: the copy is exactly the PMO as of psync `s`.
//!    The psynced changes in the sub-page log over that commit (`docs/commit.md`) are then
//!    read (`sublog::read_live`: a prefix of the log, bracketed by an unchanged
//!    newest commit, else another pass) and overlaid on the pages they change, so the copy
//!    is the PMO as of the last record's psync.
//!    The whole-PMO checksum (`wedi`) is then checked on the copy, and the source entry must
//!    still exist with the same uuid (a PMO destroyed meanwhile fails the snapshot).
//!
//! A pass after the first copies only what the writer changed during the one before, so the
//! passes shrink unless the writer rewrites pages faster than they are copied (a writer that
//! psyncs the same pages in a tight loop). After [`FREE_PASSES`] passes that each found a
//! change, the snapshot closes the *gate*: it sets the gate word in the PMO's header page
//! (`GATE_OFF`) and takes the PMO's gate lock exclusively; a psync that finds the word set
//! passes the gate lock shared before it commits, so it waits while the snapshot holds it.
//! At most the psync already in flight when the word was set still commits, so the next
//! pass or the one after finds no change. The writer waits only for those last short
//! passes (the pages it changed since the pass before), and only its psyncs wait: its
//! loads and stores go on. The word and the lock go when the snapshot ends; a snapshot
//! killed with the word set leaves only the lock taking (released by the kernel), which
//! costs a psync a lock round trip until the next snapshot of the PMO clears the word.

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use pmo_crypt::{PageChecksum, WholePmoChecksum};
use pmo_format::layout::{PageLoc, PageMapEntry};
use pmo_format::PAGE_SIZE;

use pmo_engine::engine::{Page, PmoCore};
use pmo_meta::error::{Result, StoreError};

use pmo_engine::gate::Gate;
use pmo_engine::protect::Protection;
use pmo_meta::keys;
use pmo_meta::scheme::Scheme;
use pmo_pool::pool::{Pool, Progress};

/// Passes a snapshot makes beside the writer before it closes the gate.
pub const FREE_PASSES: u32 = 4;
/// Passes before a snapshot gives up (with the gate closed, passes that find a change wait
/// 200 µs each for the psync in flight to finish: about 10 s in all).
pub const MAX_PASSES: u32 = 50_000;

/// Where a snapshot's pages go.
pub trait Sink {
    /// Store page `p` (each pass hands pages in ascending order; a page may come again in a
    /// later pass, replacing the earlier copy).
    fn put(&mut self, p: u64, page: &Page) -> Result<()>;
    /// End of a pass: everything put so far is stored.
    fn end_pass(&mut self) -> Result<()>;
    /// Read back page `p` as stored (the final whole-PMO checksum check).
    fn get(&mut self, p: u64, page: &mut Page) -> Result<()>;
}

/// What a snapshot did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotReport {
    /// The newest page-map commit of the copy (with `log_records` records over it).
    pub seq: u64,
    /// Pages in the PMO.
    pub pages: u64,
    /// Passes made (1: the writer changed nothing the copy had taken).
    pub passes: u32,
    /// Pages copied in all (pages copied again because the writer changed them count again).
    pub pages_copied: u64,
    /// Whether the last passes closed the gate (the writer's psyncs waited for them).
    pub gated: bool,
    /// Sub-page log records (psyncs after `seq` that wrote no page) overlaid on the copy: it
    /// is exactly the PMO as of the last of them.
    pub log_records: u64,
}

/// The committed map of `core`, read while a writer may be psyncing.
fn committed(
    core: &PmoCore,
    m: &dyn pmo_medium::Medium,
) -> Result<pmo_engine::engine::CommittedMap> {
    for _ in 0..10_000 {
        if let Some(x) = core.committed_map(m)? {
            return Ok(x);
        }
        std::thread::yield_now();
    }
    Err(StoreError::Busy {
        name: core.name.clone(),
        how: "read-write (psyncing too fast for its map to be read)",
    })
}

/// Copy PMO `entry`'s committed state into `sink` while a writer may keep psyncing (module
/// docs). `key` is checked against the entry.
pub fn live_copy(
    pool: &Pool,
    name: &str,
    key: &[u8],
    sink: &mut dyn Sink,
    progress: Progress,
) -> Result<SnapshotReport> {
    let inner = &*pool.inner;
    inner.alive()?;
    let entry = pool.entry(name)?;
    keys::check_key(&entry, key)?;
    let scheme = Scheme::from_code(entry.scheme)?;
    let core = Arc::new(PmoCore::new(&entry)?);
    let m = &*inner.medium;
    // Pages past the size (up to the layout capacity) read as zeros: not copied.
    let n = core.size_pages();
    // Pages are under one key only outside a rotation.
    let _rotation = inner.locker.lock_blocking(
        pmo_meta::locks::rotate_word(core.extent_off),
        pmo_os::lock::LockKind::Shared,
    )?;
    if pmo_pool::rotation::read_record(m, &core)?.is_some() {
        return Err(StoreError::Invalid(format!(
            "PMO '{name}' has an unfinished rotation: `pmo rotate {name}` finishes it first"
        )));
    }
    // A rotation that ran before the lock was taken changed the data master.
    let now = pool.entry(name)?;
    if now.uuid != entry.uuid {
        return Err(StoreError::NotFound(name.into()));
    }
    let master = keys::check_key(&now, key)?;
    // The entry each page's copy was taken from (`None`: not copied yet).
    let mut copied: Vec<Option<u64>> = vec![None; n as usize];
    let mut report = SnapshotReport {
        pages: n,
        ..Default::default()
    };
    let mut page: Box<Page> = Box::new([0; PAGE_SIZE as usize]);
    let mut gate = None;
    for pass in 1..=MAX_PASSES {
        if pass > FREE_PASSES && gate.is_none() {
            gate = Some(Gate::close(&pool.inner.locker, &core, m)?);
            report.gated = true;
        }
        let (seq, table, trailer) = committed(&core, m)?;
        let prot = if scheme.is_protected() {
            Some(Protection::open_live(
                core.clone(),
                inner.medium.clone(),
                scheme,
                &master,
                inner.sb.uuid,
                table.clone(),
                trailer,
            )?)
        } else {
            for (p, &e) in table.iter().enumerate() {
                if PageMapEntry(e).loc().is_none() {
                    return Err(StoreError::Integrity {
                        name: name.into(),
                        page: p as u64,
                        reason: format!("invalid page-map entry {e:#x}"),
                    });
                }
            }
            None
        };
        let todo: Vec<u64> = (0..n)
            .filter(|&p| copied[p as usize] != Some(table[p as usize]))
            .collect();
        let mut changed = 0u64;
        for (i, &p) in todo.iter().enumerate() {
            let want = table[p as usize];
            let read = match &prot {
                Some(pr) => pr.fill(p, &mut page),
                None => read_raw(&core, m, p, PageMapEntry(want), &mut page),
            };
            fence(Ordering::SeqCst);
            if core.map_entry(m, p)?.0 != want {
                changed += 1;
                continue;
            }
            read.map_err(|reason| StoreError::Integrity {
                name: name.into(),
                page: p,
                reason: reason.into(),
            })?;
            sink.put(p, &page)?;
            copied[p as usize] = Some(want);
            report.pages_copied += 1;
            if pass == 1 {
                progress(i as u64 + 1, n);
            }
        }
        sink.end_pass()?;
        if changed > 0 {
            if gate.is_some() {
                // The psync in flight when the gate closed is still finishing (its
                // thread may be descheduled): give it time.
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            continue;
        }
        // Psynced changes in the sub-page log over this pass's commit, overlaid on the
        // pages copied from its slots; a commit meanwhile means another pass.
        let live = match pmo_engine::sublog::read_live(&core, m, prot.as_ref(), &inner.sb.uuid)? {
            Some(l) if l.seq == seq => l,
            _ => continue,
        };
        let overlaid = live.pages();
        for &p in &overlaid {
            sink.get(p, &mut page)?;
            live.apply(p, &mut page);
            sink.put(p, &page)?;
        }
        if !overlaid.is_empty() {
            sink.end_pass()?;
        }
        report.seq = seq;
        report.log_records = live.records;
        report.passes = pass;
        if let Some(expected) = prot.as_ref().and_then(|p| p.whole_expected()) {
            let mut h = WholePmoChecksum::new();
            for p in 0..n {
                sink.get(p, &mut page)?;
                h.update_page(&page);
            }
            h.verify(&PageChecksum(expected))
                .map_err(|_| StoreError::IntegrityPmo {
                    name: name.into(),
                    reason: "the whole-PMO checksum does not match the snapshot".into(),
                })?;
        }
        page.fill(0);
        drop(gate);
        if pool.entry(name).ok().map(|e| e.uuid) != Some(entry.uuid) {
            return Err(StoreError::NotFound(format!(
                "{name} (destroyed during the snapshot)"
            )));
        }
        return Ok(report);
    }
    Err(StoreError::Busy {
        name: name.into(),
        how: "read-write by a writer that rewrites pages faster than a snapshot copies them",
    })
}

/// Page `p` of an unprotected PMO from the slot `e` names (not the medium's current entry).
fn read_raw(
    core: &PmoCore,
    m: &dyn pmo_medium::Medium,
    p: u64,
    e: PageMapEntry,
    dst: &mut Page,
) -> std::result::Result<(), &'static str> {
    match e.loc() {
        Some(PageLoc::Zero) => {
            dst.fill(0);
            Ok(())
        }
        Some(PageLoc::Slot(s)) => m
            .read(core.abs(core.layout.page(s, p)), dst)
            .map_err(|_| "medium read failed"),
        None => Err("corrupted page-map entry"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmo_medium::crash::CrashMedium;
    use pmo_pool::handle::PmoHandle;
    use pmo_pool::pool::{Perm, PoolOptions};

    const KEY: &[u8] = b"snap";
    const PAGES: u64 = 8;

    fn stamp(k: u8, p: u64) -> Box<Page> {
        let mut b = Box::new([k; PAGE_SIZE as usize]);
        b[0] = p as u8;
        b
    }

    fn write(h: &PmoHandle, pages: &[u64], k: u8) {
        let bufs: Vec<Box<Page>> = pages.iter().map(|&p| stamp(k, p)).collect();
        let list: Vec<(u64, &Page)> = pages
            .iter()
            .copied()
            .zip(bufs.iter().map(|b| &**b))
            .collect();
        h.commit_pages(&list).unwrap();
    }

    /// A sink in memory that lets the writer psync twice while the first page is copied.
    struct Racing<'a> {
        pages: Vec<Box<Page>>,
        writer: &'a PmoHandle,
        raced: bool,
    }

    impl Sink for Racing<'_> {
        fn put(&mut self, p: u64, page: &Page) -> Result<()> {
            if !self.raced {
                self.raced = true;
                // Pages 1 and 2 change twice: the second psync overwrites the very slots the
                // map this pass copies from names.
                write(self.writer, &[1, 2], 2);
                write(self.writer, &[1, 2], 3);
            }
            self.pages[p as usize].copy_from_slice(page);
            Ok(())
        }
        fn end_pass(&mut self) -> Result<()> {
            Ok(())
        }
        fn get(&mut self, p: u64, page: &mut Page) -> Result<()> {
            page.copy_from_slice(&self.pages[p as usize][..]);
            Ok(())
        }
    }

    #[test]
    fn pages_a_writer_rewrites_during_a_pass_are_copied_again_as_of_one_psync() {
        for name in ["none", "secure", "wedi", "sp-ip", "sp-id", "bp-ip:medium"] {
            let scheme = Scheme::from_name(name).unwrap();
            let pool = Pool::create_on(
                Arc::new(CrashMedium::new(2 << 20)),
                &PoolOptions {
                    kdf: pmo_format::KdfParams::INSECURE_FAST,
                    ns_capacity: Some(8),
                    scheme,
                    ..Default::default()
                },
            )
            .unwrap();
            pool.pcreate("a", PAGES * PAGE_SIZE, KEY).unwrap();
            let w = pool.open_pmo("a", Perm::Write, KEY, None).unwrap();
            write(&w, &(0..PAGES).collect::<Vec<_>>(), 1);
            let mut sink = Racing {
                pages: (0..PAGES).map(|_| Box::new([0xEE; 4096])).collect(),
                writer: &w,
                raced: false,
            };
            let rep = live_copy(&pool, "a", KEY, &mut sink, &mut |_, _| {}).unwrap();
            assert_eq!(
                rep.passes, 2,
                "{name}: the changed pages take a second pass"
            );
            // Pages 1 and 2 were read once too early (their entries changed) and left.
            assert_eq!(rep.pages_copied, PAGES, "{name}");
            assert_eq!(rep.seq, w.seq(), "{name}: as of the newest psync");
            for p in 0..PAGES {
                let k = if p == 1 || p == 2 { 3 } else { 1 };
                assert!(sink.pages[p as usize] == stamp(k, p), "{name}: page {p}");
            }
        }
    }

    #[test]
    fn a_snapshot_of_a_destroyed_pmo_fails() {
        let pool = Pool::create_on(
            Arc::new(CrashMedium::new(2 << 20)),
            &PoolOptions {
                kdf: pmo_format::KdfParams::INSECURE_FAST,
                ns_capacity: Some(8),
                ..Default::default()
            },
        )
        .unwrap();
        pool.pcreate("a", PAGES * PAGE_SIZE, KEY).unwrap();
        struct Destroying<'a>(&'a Pool, bool);
        impl Sink for Destroying<'_> {
            fn put(&mut self, _: u64, _: &Page) -> Result<()> {
                if !self.1 {
                    self.1 = true;
                    self.0.pdestroy("a", KEY).unwrap();
                }
                Ok(())
            }
            fn end_pass(&mut self) -> Result<()> {
                Ok(())
            }
            fn get(&mut self, _: u64, _: &mut Page) -> Result<()> {
                Ok(())
            }
        }
        let r = live_copy(
            &pool,
            "a",
            KEY,
            &mut Destroying(&pool, false),
            &mut |_, _| {},
        );
        assert!(matches!(r, Err(StoreError::NotFound(_))), "{r:?}");
    }
}
