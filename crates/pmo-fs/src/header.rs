//! A file's header: the first [`HEADER_BYTES`] bytes of its first PMO (`docs/format.md` §6).
//!
//! | offset | field |
//! |---|---|
//! | 0 | magic `PFIL` (u32 LE) |
//! | 4 | version 1 (u32) |
//! | 8 | file size in bytes (u64) |
//! | 16 | size of the first PMO in bytes (u64); segment `i >= 1` is that size `<< min(i, 16)` |
//! | 24 | CRC-32C of bytes 0..24 (u32) |
//! | 28..64 | zero |
//!
//! A file's data starts at [`HEADER_BYTES`] in the first PMO and continues in its segments.

use crate::error::{FsError, Result};

/// Bytes reserved for the header at the start of the first PMO.
pub const HEADER_BYTES: u64 = 64;
const MAGIC: u32 = u32::from_le_bytes(*b"PFIL");
const VERSION: u32 = 1;
/// Most segments of one file (first PMO included).
pub const MAX_SEGMENTS: u32 = 48;
const MAX_SHIFT: u32 = 16;

/// The decoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub size: u64,
    pub first_pmo_bytes: u64,
}

impl Header {
    /// Encode (the bytes 0..[`HEADER_BYTES`] of the first PMO).
    pub fn encode(&self) -> [u8; HEADER_BYTES as usize] {
        let mut b = [0u8; HEADER_BYTES as usize];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&VERSION.to_le_bytes());
        b[8..16].copy_from_slice(&self.size.to_le_bytes());
        b[16..24].copy_from_slice(&self.first_pmo_bytes.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..24]);
        b[24..28].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode and check; `what` names the file in errors, `pmo_bytes` is the size of the
    /// first PMO. An all-zero header is a file whose create did not reach its first psync
    /// (power was lost between the pcreate and it): an empty file.
    pub fn decode(b: &[u8], what: &str, pmo_bytes: u64) -> Result<Header> {
        let corrupt = |why: &str| Err(FsError::Corrupt(format!("file {what}: {why}")));
        if b.len() < HEADER_BYTES as usize {
            return corrupt("header too short");
        }
        if b.iter().all(|&x| x == 0) && pmo_bytes > HEADER_BYTES && pmo_bytes.is_multiple_of(4096) {
            return Ok(Header {
                size: 0,
                first_pmo_bytes: pmo_bytes,
            });
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        if u32_at(0) != MAGIC {
            return corrupt("bad header magic");
        }
        if u32_at(4) != VERSION {
            return corrupt(&format!("unknown header version {}", u32_at(4)));
        }
        if u32_at(24) != crc32c::crc32c(&b[0..24]) {
            return corrupt("header checksum mismatch");
        }
        let h = Header {
            size: u64_at(8),
            first_pmo_bytes: u64_at(16),
        };
        if h.first_pmo_bytes != pmo_bytes {
            return corrupt("bad first-PMO size");
        }
        if h.size > capacity(h.first_pmo_bytes, MAX_SEGMENTS) {
            return corrupt("size beyond the largest file");
        }
        Ok(h)
    }
}

/// PMO size of segment `i` of a file whose first PMO has `first` bytes.
pub fn segment_bytes(first: u64, i: u32) -> u64 {
    first << i.min(MAX_SHIFT)
}

/// File bytes held by segment `i`.
pub fn segment_data_bytes(first: u64, i: u32) -> u64 {
    if i == 0 {
        first - HEADER_BYTES
    } else {
        segment_bytes(first, i)
    }
}

/// File bytes held by the first `n` segments.
pub fn capacity(first: u64, n: u32) -> u64 {
    (0..n).map(|i| segment_data_bytes(first, i)).sum()
}

/// Segments needed to hold `size` bytes (at least 1).
pub fn segments_for(first: u64, size: u64) -> u32 {
    let mut n = 1;
    while capacity(first, n) < size && n < MAX_SEGMENTS + 1 {
        n += 1;
    }
    n
}

/// Where file offset `off` lives: (segment, offset inside that segment's PMO, bytes left in
/// the segment).
pub fn locate(first: u64, off: u64) -> (u32, u64, u64) {
    let mut base = 0;
    let mut i = 0;
    loop {
        let cap = segment_data_bytes(first, i);
        if off < base + cap {
            let within = off - base;
            let pmo_off = if i == 0 {
                HEADER_BYTES + within
            } else {
                within
            };
            return (i, pmo_off, cap - within);
        }
        base += cap;
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_rejects_damage() {
        let h = Header {
            size: 12345,
            first_pmo_bytes: 16384,
        };
        let b = h.encode();
        assert_eq!(Header::decode(&b, "f", 16384).unwrap(), h);
        for i in [0, 8, 16, 24] {
            let mut d = b;
            d[i] ^= 1;
            assert!(Header::decode(&d, "f", 16384).is_err(), "byte {i}");
        }
        assert_eq!(
            Header::decode(&[0; 64], "f", 8192).unwrap(),
            Header {
                size: 0,
                first_pmo_bytes: 8192
            }
        );
        assert!(Header::decode(&b, "f", 8192).is_err());
    }

    #[test]
    fn segments_tile_the_file() {
        let first = 8192;
        assert_eq!(segments_for(first, 0), 1);
        assert_eq!(segments_for(first, first - HEADER_BYTES), 1);
        assert_eq!(segments_for(first, first - HEADER_BYTES + 1), 2);
        let mut expect = (0u32, HEADER_BYTES);
        for off in 0..capacity(first, 4) {
            let (seg, pmo_off, left) = locate(first, off);
            assert_eq!((seg, pmo_off), expect, "offset {off}");
            assert!(left >= 1);
            expect = if left == 1 {
                (seg + 1, 0)
            } else {
                (seg, pmo_off + 1)
            };
        }
    }
}
