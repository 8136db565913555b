//! The sub-page commit log of one PMO (format version 6, `docs/format.md` §4, "Sub-page commit
//! log"): the encoding of its records and of its count word. No I/O, no cryptography (the
//! store seals record bodies with `pmo-crypt`).
//!
//! ```text
//! area +0     count word (u64): (base sequence mod 2^48) << 16 | records appended for it
//! area +64    record 1, record 2, ... each 64-byte aligned:
//!   +0  4   magic "PLOG"
//!   +4  4   body length L (> 0)
//!   +8  8   base sequence: the page-commit sequence number the record applies over
//!   +16 8   record sequence (1, 2, ... within the base)
//!   +24 8   version (the AES-GCM nonce's counter value; 0 for unprotected PMOs)
//!   +32 16  the previous record's tag (zero for record 1)
//!   +48 L   body: changes [page u32, offset u16, length u16, bytes]..., sealed for `secure`
//!   +48+L 16 tag: the AES-GCM tag (`secure`), or CRC-32C (LE) then 12 zero bytes (`none`)
//! ```

use crate::{align_up, FormatError};

/// Bytes of a PMO's log area (the count word's line, then records).
pub const LOG_AREA_BYTES: u64 = 16384;
/// Offset of the count word in the area.
pub const COUNT_WORD_OFF: u64 = 0;
/// Offset of the first record in the area.
pub const FIRST_RECORD_OFF: u64 = 64;
/// Records start on this alignment (one cache line).
pub const RECORD_ALIGN: u64 = 64;
/// Bytes of a record header.
pub const HEADER_LEN: usize = 48;
/// Bytes of a record tag.
pub const TAG_LEN: usize = 16;
/// Bytes before each change's data in a body.
pub const CHANGE_HEAD: usize = 8;
/// Magic of a record.
pub const MAGIC: [u8; 4] = *b"PLOG";
/// Domain string of the associated data of a sealed body and of an unprotected record's CRC.
pub const DOMAIN: &[u8; 9] = b"pmo-lg/v1";
/// Low bits of the count word holding the record count.
const COUNT_BITS: u32 = 16;
const BASE_MASK: u64 = (1 << (64 - COUNT_BITS)) - 1;

/// The fixed part of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    pub body_len: u32,
    pub base_seq: u64,
    pub rec_seq: u64,
    pub version: u64,
    pub prev_tag: [u8; TAG_LEN],
}

impl RecordHeader {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..8].copy_from_slice(&self.body_len.to_le_bytes());
        b[8..16].copy_from_slice(&self.base_seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.rec_seq.to_le_bytes());
        b[24..32].copy_from_slice(&self.version.to_le_bytes());
        b[32..48].copy_from_slice(&self.prev_tag);
        b
    }

    /// Decode a header; `None` without the magic or with a body that cannot fit the area.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Option<RecordHeader> {
        if b[0..4] != MAGIC {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let body_len = u32::from_le_bytes(b[4..8].try_into().expect("4 bytes"));
        if body_len == 0 || body_len as u64 > LOG_AREA_BYTES {
            return None;
        }
        Some(RecordHeader {
            body_len,
            base_seq: u64_at(8),
            rec_seq: u64_at(16),
            version: u64_at(24),
            prev_tag: b[32..48].try_into().expect("16 bytes"),
        })
    }
}

/// Bytes a record with a body of `body_len` bytes takes in the area (aligned).
pub fn record_len(body_len: usize) -> u64 {
    align_up((HEADER_LEN + body_len + TAG_LEN) as u64, RECORD_ALIGN).expect("small")
}

/// Whether a record with a `body_len`-byte body fits at area offset `at`.
pub fn fits(at: u64, body_len: usize) -> bool {
    body_len > 0 && at.saturating_add(record_len(body_len)) <= LOG_AREA_BYTES
}

/// The count word saying `records` records were appended over page-commit sequence `base`.
pub fn count_word(base: u64, records: u64) -> u64 {
    ((base & BASE_MASK) << COUNT_BITS) | records.min((1 << COUNT_BITS) - 1)
}

/// The records a count word claims over sequence `base` (0 if it names another base).
pub fn claimed(word: u64, base: u64) -> u64 {
    if word >> COUNT_BITS == base & BASE_MASK {
        word & ((1 << COUNT_BITS) - 1)
    } else {
        0
    }
}

/// Append one change (page `page`, `bytes` at `offset` in it) to a body.
pub fn push_change(body: &mut Vec<u8>, page: u32, offset: u16, bytes: &[u8]) {
    debug_assert!(offset as usize + bytes.len() <= crate::PAGE_SIZE as usize && !bytes.is_empty());
    body.extend_from_slice(&page.to_le_bytes());
    body.extend_from_slice(&offset.to_le_bytes());
    body.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    body.extend_from_slice(bytes);
}

/// One change of a decoded body: the page, the offset in it, and where its bytes lie in the
/// body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub page: u64,
    pub offset: usize,
    pub data: std::ops::Range<usize>,
}

/// Decode an opened body into its changes, each checked to lie inside one of `npages` pages.
pub fn decode_body(body: &[u8], npages: u64) -> Result<Vec<Change>, FormatError> {
    let bad = |detail: String| FormatError::Invalid {
        what: "sub-page log record",
        detail,
    };
    let mut out = Vec::new();
    let mut at = 0;
    while at < body.len() {
        let head = body
            .get(at..at + CHANGE_HEAD)
            .ok_or_else(|| bad(format!("change header cut at byte {at}")))?;
        let page = u32::from_le_bytes(head[0..4].try_into().expect("4")) as u64;
        let offset = u16::from_le_bytes(head[4..6].try_into().expect("2")) as usize;
        let len = u16::from_le_bytes(head[6..8].try_into().expect("2")) as usize;
        if page >= npages || len == 0 || offset + len > crate::PAGE_SIZE as usize {
            return Err(bad(format!(
                "change of {len} bytes at page {page} offset {offset} is outside the PMO's {npages} pages"
            )));
        }
        let start = at + CHANGE_HEAD;
        if start + len > body.len() {
            return Err(bad(format!("change at byte {at} runs past the body")));
        }
        out.push(Change {
            page,
            offset,
            data: start..start + len,
        });
        at = start + len;
    }
    Ok(out)
}

/// The tag of an unprotected PMO's record: CRC-32C of the domain, the pool and PMO uuids, the
/// header and the body (a torn or misplaced record fails it), then 12 zero bytes.
pub fn plain_tag(
    pool_uuid: &[u8; 16],
    pmo_uuid: &[u8; 16],
    header: &[u8; HEADER_LEN],
    body: &[u8],
) -> [u8; TAG_LEN] {
    let mut c = crc32c::crc32c(DOMAIN);
    for part in [&pool_uuid[..], &pmo_uuid[..], &header[..], body] {
        c = crc32c::crc32c_append(c, part);
    }
    let mut t = [0u8; TAG_LEN];
    t[..4].copy_from_slice(&c.to_le_bytes());
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_rejects_bad_magic_and_lengths() {
        let h = RecordHeader {
            body_len: 24,
            base_seq: 7,
            rec_seq: 3,
            version: 99,
            prev_tag: [5; 16],
        };
        let b = h.encode();
        assert_eq!(RecordHeader::decode(&b), Some(h));
        let mut bad = b;
        bad[0] ^= 1;
        assert_eq!(RecordHeader::decode(&bad), None);
        let mut zero_len = b;
        zero_len[4..8].fill(0);
        assert_eq!(RecordHeader::decode(&zero_len), None);
        let mut huge = b;
        huge[4..8].copy_from_slice(&(LOG_AREA_BYTES as u32 + 1).to_le_bytes());
        assert_eq!(RecordHeader::decode(&huge), None);
    }

    #[test]
    fn bodies_round_trip_and_out_of_range_changes_are_refused() {
        let mut body = Vec::new();
        push_change(&mut body, 0, 8, &[1, 2, 3]);
        push_change(&mut body, 3, 4088, &[9; 8]);
        let ch = decode_body(&body, 4).unwrap();
        assert_eq!(ch.len(), 2);
        assert_eq!((ch[0].page, ch[0].offset), (0, 8));
        assert_eq!(&body[ch[0].data.clone()], &[1, 2, 3]);
        assert_eq!((ch[1].page, ch[1].offset), (3, 4088));
        assert_eq!(&body[ch[1].data.clone()], &[9; 8]);
        // Page 3 is outside a 3-page PMO; a cut body is refused.
        assert!(decode_body(&body, 3).is_err());
        assert!(decode_body(&body[..body.len() - 1], 4).is_err());
        let mut over = Vec::new();
        push_change(&mut over, 0, 4090, &[0; 6]);
        over[4..6].copy_from_slice(&4091u16.to_le_bytes());
        assert!(decode_body(&over, 1).is_err());
    }

    #[test]
    fn count_words_name_their_base() {
        let w = count_word(41, 3);
        assert_eq!(claimed(w, 41), 3);
        assert_eq!(claimed(w, 42), 0);
        assert_eq!(claimed(0, 0), 0);
    }

    #[test]
    fn records_fit_only_inside_the_area() {
        assert_eq!(record_len(1), 128);
        assert_eq!(record_len(0), 64);
        assert!(fits(FIRST_RECORD_OFF, 100));
        assert!(!fits(FIRST_RECORD_OFF, 0));
        assert!(!fits(LOG_AREA_BYTES - 64, 1));
        assert!(fits(LOG_AREA_BYTES - 128, 1));
    }

    #[test]
    fn plain_tags_bind_uuids_and_bytes() {
        let h = RecordHeader {
            body_len: 9,
            base_seq: 1,
            rec_seq: 1,
            version: 0,
            prev_tag: [0; 16],
        }
        .encode();
        let t = plain_tag(&[1; 16], &[2; 16], &h, b"abcdefghi");
        assert_ne!(t, plain_tag(&[1; 16], &[3; 16], &h, b"abcdefghi"));
        assert_ne!(t, plain_tag(&[4; 16], &[2; 16], &h, b"abcdefghi"));
        assert_ne!(t, plain_tag(&[1; 16], &[2; 16], &h, b"abcdefghj"));
        assert_eq!(t[4..], [0; 12]);
    }
}
