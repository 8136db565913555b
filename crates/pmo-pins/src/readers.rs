//! Reader slots: which psync each reader's snapshot is, so the writer keeps what it needs.
//!
//! A reader holds one of [`SLOTS`] slots. On a table file it owns the slot by an OFD lock on
//! byte `SLOT_BYTE + i` of the file, which the kernel drops when the reader dies: a slot with
//! a pin whose lock is free is a dead reader's, and the writer ignores it from when it next looks
//! ([`PinTable::live_pins`]). Nobody has to notice a death for its pins to go.
//!
//! Pinning follows Dekker's pattern with the writer: the reader stores its pin and then reads
//! the newest commit record (a sequentially consistent store, then loads); the writer stores
//! a commit record and then, before its next psync writes any slot, reads the pins after a
//! full fence. Either the writer sees the pin, or the reader sees the newer record and pins
//! that one instead (`pmo_pool::reader`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use pmo_meta::error::{Result, StoreError};
use pmo_os::lock::{LockKind, RangeLock};

use crate::layout::*;
use crate::table::PinTable;

/// One reader's slot; released (its pin dropped) on drop.
pub struct ReaderSlot {
    table: Arc<PinTable>,
    index: usize,
    /// The slot's lock, on the description of `table`'s file. Released in `drop` **before**
    /// `table` goes: the last reader's table is then handed to the pool handle's kept tables
    /// (`at.rs`), and a reader taking it on that same description may claim this very slot
    /// (a description's own lock never conflicts with it). Released after, our unlock would
    /// release the new reader's lock, and a writer would think it dead and free the versions
    /// its snapshot needs (issue 27's flaky readers test: a reader saw pages of a newer psync).
    lock: Option<RangeLock>,
}

impl std::fmt::Debug for ReaderSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ReaderSlot({})", self.index)
    }
}

fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl PinTable {
    /// Take a free reader slot. `Busy` when [`SLOTS`] readers are attached.
    pub fn claim(self: &Arc<Self>, name: &str) -> Result<ReaderSlot> {
        let pid = u64::from(pmo_os::lock::pid());
        for i in 0..SLOTS {
            let base = self.layout.slot(i);
            // The claim word: the pid, and above it a count of claims of this slot.
            let before = self.w(base + S_PID).load(Ordering::Acquire);
            let claim = (((before >> 32) + 1) << 32) | pid;
            let lock = match self.file() {
                // On the description this user opened the table with (a duplicate descriptor,
                // no `open` by path): another user's, in any process, is another description.
                Some(file) => {
                    let file = file
                        .try_clone()
                        .map_err(|e| StoreError::Os(e.to_string()))?;
                    match RangeLock::try_acquire_file(
                        file,
                        SLOT_BYTE + i as u64,
                        1,
                        LockKind::Exclusive,
                    )
                    .map_err(|e| StoreError::Os(e.to_string()))?
                    {
                        Some(l) => Some(l),
                        None => continue,
                    }
                }
                None => {
                    // In process memory: a slot is taken by swapping its pid word from 0.
                    if before & 0xffff_ffff != 0
                        || self
                            .w(base + S_PID)
                            .compare_exchange(before, claim, Ordering::AcqRel, Ordering::Relaxed)
                            .is_err()
                    {
                        continue;
                    }
                    None
                }
            };
            // A dead reader's pins may still be there: the new claim word comes first (a writer
            // that remembered the death reads it after any pin of ours), then ours replace them.
            self.w(base + S_PID).store(claim, Ordering::SeqCst);
            self.w(base + S_PIN).store(0, Ordering::SeqCst);
            self.w(base + S_PIN_OLD).store(0, Ordering::SeqCst);
            self.w(base + S_SINCE).store(now_s(), Ordering::Relaxed);
            return Ok(ReaderSlot {
                table: self.clone(),
                index: i,
                lock,
            });
        }
        Err(StoreError::Busy {
            name: name.into(),
            how: "by as many readers as a PMO takes (64)",
        })
    }

    /// The psyncs pinned by live readers, ascending, without repeats. `check`: ask the
    /// kernel which pinned slots have lost their reader (one `fcntl` per pinned slot) and
    /// remember them in `dead`; otherwise the slots `dead` remembers are skipped. Nothing is
    /// written: a dead reader's slot keeps its words until a new reader claims it, which
    /// changes the slot's claim word before it pins, so a remembered death never hides a new
    /// reader's pin (the pin is stored after the claim word, and read before it here).
    pub fn live_pins(&self, dead: &mut Vec<(usize, u64)>, check: bool) -> Vec<u64> {
        let mut pins = Vec::new();
        if check {
            dead.clear();
        }
        for i in 0..SLOTS {
            let base = self.layout.slot(i);
            let p = [
                self.w(base + S_PIN).load(Ordering::SeqCst),
                self.w(base + S_PIN_OLD).load(Ordering::SeqCst),
            ];
            if p == [0, 0] {
                continue;
            }
            let claim = self.w(base + S_PID).load(Ordering::SeqCst);
            if check {
                if !self.slot_alive(i) {
                    dead.push((i, claim));
                    continue;
                }
            } else if dead.contains(&(i, claim)) {
                continue;
            }
            pins.extend(p.iter().filter(|&&x| x != 0).map(|x| x - 1));
        }
        pins.sort_unstable();
        pins.dedup();
        pins
    }

    /// Whether the reader of slot `i` is alive (always, in process memory).
    fn slot_alive(&self, i: usize) -> bool {
        match self.file() {
            Some(f) => !matches!(pmo_os::lock::query(f, SLOT_BYTE + i as u64, 1), Ok(None)),
            None => true,
        }
    }

    /// Readers attached now and the oldest psync they pin (`pmo info`): (readers, oldest).
    pub fn readers(&self) -> (usize, Option<u64>) {
        let mut dead = Vec::new();
        let pins = self.live_pins(&mut dead, true);
        let n = (0..SLOTS)
            .filter(|&i| {
                let claim = self.w(self.layout.slot(i) + S_PID).load(Ordering::Acquire);
                claim & 0xffff_ffff != 0 && !dead.iter().any(|&(d, _)| d == i)
            })
            .count();
        (n, pins.first().copied())
    }
}

impl ReaderSlot {
    /// Pin psync `seq`: from now on the writer keeps every page version it shows. A
    /// sequentially consistent store: the caller reads the newest commit after it.
    pub fn pin(&self, seq: u64) {
        let base = self.table.layout.slot(self.index);
        self.table.w(base + S_PIN).store(seq + 1, Ordering::SeqCst);
        self.table.w(H_PINS_GEN).fetch_add(1, Ordering::SeqCst);
    }

    /// A refresh begins: the current pin stays held (as the old one) until [`Self::end_move`],
    /// so pages the view still fills under the old snapshot keep their versions.
    pub fn begin_move(&self) {
        let base = self.table.layout.slot(self.index);
        let cur = self.table.w(base + S_PIN).load(Ordering::SeqCst);
        self.table.w(base + S_PIN_OLD).store(cur, Ordering::SeqCst);
    }

    /// The view reads only through the new pin now.
    pub fn end_move(&self) {
        let base = self.table.layout.slot(self.index);
        self.table.w(base + S_PIN_OLD).store(0, Ordering::SeqCst);
        self.table.w(H_PINS_GEN).fetch_add(1, Ordering::SeqCst);
    }

    /// The table this slot is in.
    pub fn table(&self) -> &Arc<PinTable> {
        &self.table
    }

    /// The slot's index.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Drop for ReaderSlot {
    fn drop(&mut self) {
        let base = self.table.layout.slot(self.index);
        self.table.w(base + S_PIN).store(0, Ordering::SeqCst);
        self.table.w(base + S_PIN_OLD).store(0, Ordering::SeqCst);
        let claim = self.table.w(base + S_PID).load(Ordering::Acquire);
        self.table
            .w(base + S_PID)
            .store(claim & !0xffff_ffff, Ordering::Release);
        self.table.w(H_PINS_GEN).fetch_add(1, Ordering::AcqRel);
        // Before `table` is dropped (the field's comment says why).
        drop(self.lock.take());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use pmo_medium::crash::CrashMedium;
    use pmo_meta::locks::Locker;

    use crate::at::KeptTables;
    use crate::table::tests::AFTER_KEEP;
    use crate::table::{PinTable, PinsAt};

    /// A reader leaving hands its table to the pool handle's kept tables; a reader of the same
    /// process taking it that instant claims the slot the first one held, on the same open file
    /// description. The leaving reader's unlock must not release the new reader's slot: a
    /// writer would find the slot's lock free, count the reader dead and drop its pin.
    #[test]
    fn a_reader_taking_a_kept_table_at_once_keeps_its_slot_alive() {
        let tag = format!("{}-slot", std::process::id());
        let pool = std::env::temp_dir().join(format!("pmo-pins-pool-{tag}"));
        std::fs::write(&pool, [0u8; 4096]).unwrap();
        let keep = Arc::new(KeptTables::new(4));
        let mut pmo_uuid = [0u8; 16];
        pmo_uuid[..4].copy_from_slice(&std::process::id().to_le_bytes());
        pmo_uuid[15] = 0x51;
        let at = PinsAt {
            name: "slot".into(),
            locker: Locker::ofd(pool.clone()),
            medium: Arc::new(CrashMedium::new(1 << 16)),
            pool_uuid: [0x5e; 16],
            pmo_uuid,
            extent_off: 4096,
            npages: 8,
            keep: Some(Arc::downgrade(&keep)),
        };
        let first = PinTable::join(&at, true)
            .unwrap()
            .unwrap()
            .claim("slot")
            .unwrap();
        first.pin(10);
        let index = first.index();
        // The instant the first reader's table is kept, a second reader takes it and pins.
        let second: Arc<Mutex<Option<super::ReaderSlot>>> = Arc::default();
        {
            let (at, second) = (at.clone(), second.clone());
            AFTER_KEEP.with(|h| {
                *h.borrow_mut() = Some(Box::new(move || {
                    let t = PinTable::join(&at, true).unwrap().unwrap();
                    let s = t.claim("slot").unwrap();
                    s.pin(20);
                    *second.lock().unwrap() = Some(s);
                }))
            });
        }
        drop(first);
        let second = second.lock().unwrap().take().expect("the hook ran");
        assert_eq!(
            second.index(),
            index,
            "the second reader took the freed slot"
        );
        // A writer, on its own description, asks the kernel which readers are alive.
        let writer = PinTable::join_writer(&at).unwrap().unwrap();
        let mut dead = Vec::new();
        assert_eq!(
            writer.live_pins(&mut dead, true),
            vec![20],
            "the second reader's pin counts (dead: {dead:?})"
        );
        drop(second);
        drop(writer);
        keep.clear();
        let _ = std::fs::remove_file(at.path());
        std::fs::remove_file(&pool).unwrap();
    }
}
