//! Commit records and journal entries (`docs/format.md` §5), encoded to the sizes the extent
//! layout gives them (`layout::RECORD_SIZE`, `layout::TRAILER_SIZE`, re-exported here).
//!
//! psync number `seq` writes its journal to journal `seq % 2` and its record to record slot
//! `seq % 2`. The newest valid record's journal is always intact: the next psync writes the other
//! journal, and the one after that only starts once a newer record is durable.

use crate::codec::*;
use crate::crc;
use crate::layout::PageMapEntry;
// The sizes of a commit record and of a journal trailer are part of the extent layout (record
// slot `i` is at `i * RECORD_SIZE`, a protected journal has room for a trailer): `layout`
// defines them and this module encodes to them. Re-exported here, where they have always been
// named (`pmo_format::record::TRAILER_SIZE`).
pub use crate::layout::{RECORD_SIZE, TRAILER_SIZE};

/// Magic number of a commit record.
pub const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"PCMT");

/// One commit record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommitRecord {
    /// psync sequence number, from 1.
    pub seq: u64,
    /// Journal entries.
    pub count: u64,
    /// CRC-32C of the `count * 16` journal bytes.
    pub journal_crc: u32,
    /// First 8 bytes of the PMO's uuid: a record left by a destroyed PMO never matches.
    pub pmo_tag: u64,
}

impl CommitRecord {
    /// Encode.
    pub fn encode(&self) -> [u8; RECORD_SIZE] {
        let mut b = [0u8; RECORD_SIZE];
        put_u32(&mut b, 0, RECORD_MAGIC);
        put_u32(&mut b, 4, 1);
        put_u64(&mut b, 8, self.seq);
        put_u64(&mut b, 16, self.count);
        put_u32(&mut b, 24, self.journal_crc);
        put_u32(&mut b, 28, (self.seq % 2) as u32);
        put_u64(&mut b, 32, self.pmo_tag);
        let c = crc(&b[..RECORD_SIZE - 4]);
        put_u32(&mut b, RECORD_SIZE - 4, c);
        b
    }
    /// Decode; `None` if empty, torn, corrupted or another PMO's.
    pub fn decode(b: &[u8], pmo_tag: u64, npages: u64) -> Option<CommitRecord> {
        if b.len() < RECORD_SIZE
            || get_u32(b, 0) != RECORD_MAGIC
            || get_u32(b, RECORD_SIZE - 4) != crc(&b[..RECORD_SIZE - 4])
        {
            return None;
        }
        let r = CommitRecord {
            seq: get_u64(b, 8),
            count: get_u64(b, 16),
            journal_crc: get_u32(b, 24),
            pmo_tag: get_u64(b, 32),
        };
        let ok = get_u32(b, 4) == 1
            && r.pmo_tag == pmo_tag
            && r.seq > 0
            && r.count <= npages
            && get_u32(b, 28) as u64 == r.seq % 2;
        ok.then_some(r)
    }
}

/// One journal entry: the page-map entry a page gets when the psync is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalEntry {
    pub page: u64,
    pub entry: PageMapEntry,
}

impl JournalEntry {
    /// Encode into 16 bytes.
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        put_u64(&mut b, 0, self.page);
        put_u64(&mut b, 8, self.entry.0);
        b
    }
    /// Decode 16 bytes.
    pub fn decode(b: &[u8]) -> JournalEntry {
        JournalEntry {
            page: get_u64(b, 0),
            entry: PageMapEntry(get_u64(b, 8)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let r = CommitRecord {
            seq: 5,
            count: 3,
            journal_crc: 0xdead,
            pmo_tag: 42,
        };
        let b = r.encode();
        assert_eq!(CommitRecord::decode(&b, 42, 10), Some(r));
        assert_eq!(
            CommitRecord::decode(&b, 43, 10),
            None,
            "another PMO's record"
        );
        assert_eq!(
            CommitRecord::decode(&b, 42, 2),
            None,
            "more entries than pages"
        );
        for bit in 0..RECORD_SIZE * 8 {
            let mut t = b;
            t[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(CommitRecord::decode(&t, 42, 10), None, "bit {bit}");
        }
        let j = JournalEntry {
            page: 7,
            entry: PageMapEntry(0x1234),
        };
        assert_eq!(JournalEntry::decode(&j.encode()), j);
    }
}

/// The trailer a protected PMO's psync appends to its journal (after the `count` entries,
/// covered by the record's journal CRC): what the protection layer commits atomically with the
/// pages. Layout: epoch u64 | reservation u64 | version-table tag 16 B | tail 32 B.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Trailer {
    /// The version-table epoch this commit was tagged under.
    pub epoch: u64,
    /// The committed version reservation: no page version or epoch at or above it has been
    /// used (versions are only used below a committed reservation).
    pub reservation: u64,
    /// The version-table tag (zero: no table MAC).
    pub table_tag: [u8; 16],
    /// `secure`: HMAC-SHA256 over (epoch, reservation, table tag) under the PMO's metadata
    /// key; `wedi`: the whole-PMO SHA-256; otherwise zero.
    pub tail: [u8; 32],
}

impl Trailer {
    /// Encode.
    pub fn encode(&self) -> [u8; TRAILER_SIZE] {
        let mut b = [0u8; TRAILER_SIZE];
        put_u64(&mut b, 0, self.epoch);
        put_u64(&mut b, 8, self.reservation);
        b[16..32].copy_from_slice(&self.table_tag);
        b[32..64].copy_from_slice(&self.tail);
        b
    }
    /// Decode; `None` if too short.
    pub fn decode(b: &[u8]) -> Option<Trailer> {
        if b.len() < TRAILER_SIZE {
            return None;
        }
        let mut t = Trailer {
            epoch: get_u64(b, 0),
            reservation: get_u64(b, 8),
            ..Default::default()
        };
        t.table_tag.copy_from_slice(&b[16..32]);
        t.tail.copy_from_slice(&b[32..64]);
        Some(t)
    }
}
