//! Per attach-session instrumentation: where the time of an attach session goes, in the seven
//! categories of the LOaPP paper's Fig. 6, plus event counts.
//!
//! | category | what is timed |
//! |---|---|
//! | Attach stall | waiting for the attach lock (another user's session) |
//! | Attach other | the rest of attach: key check, recovery, page-map verification, mapping, whole-PMO decryption |
//! | PF overhead | the fault handler serving faults (read + decrypt + verify + install, write tracking); the kernel's signal delivery (~2-3 µs a fault, docs/faults.md) is not measurable from inside and lands in Compute |
//! | Psync Enc/Cpy | sealing dirty pages (encryption and any snapshot it needs; for `none`, only copies into a buffer: an attachment writes pages from its view, under Per+IV) |
//! | Psync Per+IV | collecting dirty pages, writing and flushing pages, metadata, journal and record, fences, integrity updates |
//! | Detach | unmapping and releasing |
//! | Compute | the session's wall time minus all of the above |
//!
//! Counters are relaxed atomics updated on the paths they time (a few ns each; the fault path
//! updates two). [`SessionStats`] is a snapshot. A writer's session is also recorded, when it
//! ends, in the PMO's header page (informational, like the holder word: written without a
//! fence, CRC-checked when read) so that `pmo info NAME` can show the last session.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters of one PMO engine instance (one attach session).
#[derive(Debug, Default)]
pub struct SessionCounters {
    pub attach_stall_ns: AtomicU64,
    pub attach_other_ns: AtomicU64,
    pub psync_crypt_ns: AtomicU64,
    pub psync_persist_ns: AtomicU64,
    pub psyncs: AtomicU64,
    pub pages_encrypted: AtomicU64,
    pub bytes_persisted: AtomicU64,
}

impl SessionCounters {
    pub fn add(c: &AtomicU64, v: u64) {
        c.fetch_add(v, Ordering::Relaxed);
    }
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
    /// Count one psync that took `elapsed_ns`, `crypt_ns` of it sealing (the rest is
    /// Per+IV), and persisted `bytes`: the page commit and the log record alike.
    pub fn count_psync(&self, elapsed_ns: u64, crypt_ns: u64, bytes: u64) {
        Self::add(&self.psyncs, 1);
        Self::add(&self.psync_crypt_ns, crypt_ns);
        Self::add(&self.psync_persist_ns, elapsed_ns.saturating_sub(crypt_ns));
        Self::add(&self.bytes_persisted, bytes);
    }
}

/// A snapshot of one attach session (nanoseconds and counts). `repr(C)`: the C API hands it
/// out as `pmo_session_stats` (`include/pmo.h`), field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// Wall time from the start of attach to now (or to the end of detach).
    pub wall_ns: u64,
    pub attach_stall_ns: u64,
    pub attach_other_ns: u64,
    pub pf_ns: u64,
    pub psync_crypt_ns: u64,
    pub psync_persist_ns: u64,
    pub detach_ns: u64,
    /// `wall_ns` minus every category above.
    pub compute_ns: u64,
    pub faults: u64,
    pub pages_decrypted: u64,
    pub pages_encrypted: u64,
    pub psyncs: u64,
    pub bytes_persisted: u64,
    /// Pages installed ahead of use by prediction (0 when prediction is off).
    pub predicted: u64,
}

/// Magic of the session record in the PMO header page.
const MAGIC: u32 = u32::from_le_bytes(*b"PSES");
/// Bytes of the session record.
pub const RECORD_BYTES: usize = 128;
/// Offset of the session record in the PMO header page.
pub const RECORD_OFF: u64 = 3072;

impl SessionStats {
    /// Fill in `compute_ns` from the other fields.
    pub fn with_compute(mut self) -> SessionStats {
        let spent = self.attach_stall_ns
            + self.attach_other_ns
            + self.pf_ns
            + self.psync_crypt_ns
            + self.psync_persist_ns
            + self.detach_ns;
        self.compute_ns = self.wall_ns.saturating_sub(spent);
        self
    }

    /// Add another session's figures (for totals over many sessions).
    pub fn accumulate(&mut self, o: &SessionStats) {
        let mut f = self.fields();
        for (a, b) in f.iter_mut().zip(o.fields()) {
            *a = a.saturating_add(b);
        }
        *self = SessionStats::from_fields(f);
    }

    fn from_fields(f: [u64; 14]) -> SessionStats {
        SessionStats {
            wall_ns: f[0],
            attach_stall_ns: f[1],
            attach_other_ns: f[2],
            pf_ns: f[3],
            psync_crypt_ns: f[4],
            psync_persist_ns: f[5],
            detach_ns: f[6],
            compute_ns: f[7],
            faults: f[8],
            pages_decrypted: f[9],
            pages_encrypted: f[10],
            psyncs: f[11],
            bytes_persisted: f[12],
            predicted: f[13],
        }
    }

    /// The Fig. 6 categories as (name, nanoseconds), in the paper's order.
    pub fn categories(&self) -> [(&'static str, u64); 7] {
        [
            ("Psync Per+IV", self.psync_persist_ns),
            ("Psync Enc/Cpy", self.psync_crypt_ns),
            ("Detach", self.detach_ns),
            ("PF overhead", self.pf_ns),
            ("Attach other", self.attach_other_ns),
            ("Attach stall", self.attach_stall_ns),
            ("Compute", self.compute_ns),
        ]
    }

    fn fields(&self) -> [u64; 14] {
        [
            self.wall_ns,
            self.attach_stall_ns,
            self.attach_other_ns,
            self.pf_ns,
            self.psync_crypt_ns,
            self.psync_persist_ns,
            self.detach_ns,
            self.compute_ns,
            self.faults,
            self.pages_decrypted,
            self.pages_encrypted,
            self.psyncs,
            self.bytes_persisted,
            self.predicted,
        ]
    }

    /// Encode as the header-page record: magic, version 1, 14 u64 fields, CRC-32C of the rest.
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&1u32.to_le_bytes());
        for (i, v) in self.fields().iter().enumerate() {
            b[8 + i * 8..16 + i * 8].copy_from_slice(&v.to_le_bytes());
        }
        let c = pmo_format::crc(&b[..RECORD_BYTES - 4]);
        b[RECORD_BYTES - 4..].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Decode a header-page record; `None` if absent or damaged.
    pub fn decode(b: &[u8]) -> Option<SessionStats> {
        if b.len() < RECORD_BYTES
            || b[0..4] != MAGIC.to_le_bytes()
            || b[4..8] != 1u32.to_le_bytes()
            || b[RECORD_BYTES - 4..RECORD_BYTES]
                != pmo_format::crc(&b[..RECORD_BYTES - 4]).to_le_bytes()
        {
            return None;
        }
        let mut f = [0u64; 14];
        for (i, v) in f.iter_mut().enumerate() {
            *v = u64::from_le_bytes(b[8 + i * 8..16 + i * 8].try_into().expect("8"));
        }
        Some(SessionStats::from_fields(f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_and_rejects_damage() {
        let s = SessionStats {
            wall_ns: 1000,
            attach_other_ns: 100,
            pf_ns: 50,
            psync_crypt_ns: 20,
            psync_persist_ns: 30,
            detach_ns: 10,
            faults: 3,
            psyncs: 2,
            ..Default::default()
        }
        .with_compute();
        assert_eq!(s.compute_ns, 790);
        let b = s.encode();
        assert_eq!(SessionStats::decode(&b), Some(s));
        for i in 0..RECORD_BYTES {
            let mut d = b;
            d[i] ^= 1;
            assert_eq!(SessionStats::decode(&d), None, "byte {i}");
        }
        assert_eq!(
            s.categories().iter().map(|c| c.1).sum::<u64>(),
            s.wall_ns,
            "the categories add up to the wall time"
        );
    }
}
