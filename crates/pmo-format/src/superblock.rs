//! The superblock (two identical copies at offsets 0 and 4096) and the pool configuration record
//! (two alternating slots), see `docs/format.md` §1-2.

use crate::codec::*;
use crate::{crc, FormatError, FORMAT_VERSION, PAGE_SIZE};
// The KDF parameters are their own module, below both the superblock (the pool's) and the
// namespace entries (each PMO's); named here too, where they have always been.
pub use crate::kdf::KdfParams;

/// Magic number at offset 0 of each superblock copy.
pub const SB_MAGIC: [u8; 8] = *b"PMOPOOL\0";
/// Bytes of a superblock covered by its CRC (the CRC sits right after them).
pub const SB_SIZE: usize = 256;
/// Offsets of the two superblock copies.
pub const SB_OFFSETS: [u64; 2] = [0, PAGE_SIZE];
/// Offset of the pool configuration page.
pub const CONFIG_OFFSET: u64 = 2 * PAGE_SIZE;
/// Offset of the namespace.
pub const NS_OFFSET: u64 = 3 * PAGE_SIZE;

// Superblock field offsets.
const SB_VERSION: usize = 8;
const SB_FLAGS: usize = 12;
const SB_UUID: usize = 16;
const SB_POOL_SIZE: usize = 32;
const SB_PAGE_SIZE: usize = 40;
const SB_ENTRY_SIZE: usize = 44;
const SB_NS_OFFSET: usize = 48;
const SB_NS_CAPACITY: usize = 56;
const SB_HEAP_OFFSET: usize = 64;
const SB_HEAP_LEN: usize = 72;
const SB_BASE_ADDR: usize = 80;
const SB_CREATED: usize = 88;
const SB_KDF: usize = 96; // 16 bytes
const SB_CONFIG_OFFSET: usize = 112;
const SB_NS_MIRROR: usize = 120;
const SB_CRC: usize = SB_SIZE - 4;

/// The pool's superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub version: u32,
    pub flags: u32,
    pub uuid: [u8; 16],
    /// Bytes of the medium the pool uses.
    pub pool_size: u64,
    pub ns_offset: u64,
    pub ns_capacity: u64,
    pub heap_offset: u64,
    pub heap_len: u64,
    /// Virtual address at which heap offset 0 is mapped: a PMO at extent offset `x` is attached at
    /// `base_addr + x` (its stable address).
    pub base_addr: u64,
    pub created_unix_s: u64,
    pub kdf: KdfParams,
    pub config_offset: u64,
    /// Offset of the namespace mirror (copy B of every slot; format version 3), or 0 (older
    /// pools: one copy).
    pub ns_mirror: u64,
}

impl Superblock {
    /// Bytes of one copy of the namespace, rounded up to whole pages.
    pub fn ns_bytes(&self) -> u64 {
        (self.ns_capacity * crate::ENTRY_SIZE as u64).next_multiple_of(PAGE_SIZE)
    }

    /// Encode into one superblock copy (`SB_SIZE` bytes, CRC last).
    pub fn encode(&self) -> [u8; SB_SIZE] {
        let mut b = [0u8; SB_SIZE];
        b[0..8].copy_from_slice(&SB_MAGIC);
        put_u32(&mut b, SB_VERSION, self.version);
        put_u32(&mut b, SB_FLAGS, self.flags);
        b[SB_UUID..SB_UUID + 16].copy_from_slice(&self.uuid);
        put_u64(&mut b, SB_POOL_SIZE, self.pool_size);
        put_u32(&mut b, SB_PAGE_SIZE, PAGE_SIZE as u32);
        put_u32(&mut b, SB_ENTRY_SIZE, crate::ENTRY_SIZE as u32);
        put_u64(&mut b, SB_NS_OFFSET, self.ns_offset);
        put_u64(&mut b, SB_NS_CAPACITY, self.ns_capacity);
        put_u64(&mut b, SB_HEAP_OFFSET, self.heap_offset);
        put_u64(&mut b, SB_HEAP_LEN, self.heap_len);
        put_u64(&mut b, SB_BASE_ADDR, self.base_addr);
        put_u64(&mut b, SB_CREATED, self.created_unix_s);
        self.kdf.encode(&mut b, SB_KDF);
        put_u64(&mut b, SB_CONFIG_OFFSET, self.config_offset);
        put_u64(&mut b, SB_NS_MIRROR, self.ns_mirror);
        let c = crc(&b[..SB_CRC]);
        put_u32(&mut b, SB_CRC, c);
        b
    }

    /// Decode and validate one copy. `medium_len` bounds every offset.
    pub fn decode(b: &[u8], medium_len: u64) -> Result<Superblock, FormatError> {
        if b.len() < SB_SIZE {
            return Err(FormatError::Foreign);
        }
        if b[0..8] != SB_MAGIC {
            return Err(FormatError::Foreign);
        }
        if get_u32(b, SB_CRC) != crc(&b[..SB_CRC]) {
            return Err(FormatError::Checksum { what: "superblock" });
        }
        let version = get_u32(b, SB_VERSION);
        if version > FORMAT_VERSION || version == 0 {
            return Err(FormatError::TooNew {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let sb = Superblock {
            version,
            flags: get_u32(b, SB_FLAGS),
            uuid: get_array(b, SB_UUID),
            pool_size: get_u64(b, SB_POOL_SIZE),
            ns_offset: get_u64(b, SB_NS_OFFSET),
            ns_capacity: get_u64(b, SB_NS_CAPACITY),
            heap_offset: get_u64(b, SB_HEAP_OFFSET),
            heap_len: get_u64(b, SB_HEAP_LEN),
            base_addr: get_u64(b, SB_BASE_ADDR),
            created_unix_s: get_u64(b, SB_CREATED),
            kdf: KdfParams::decode(b, SB_KDF),
            config_offset: get_u64(b, SB_CONFIG_OFFSET),
            ns_mirror: get_u64(b, SB_NS_MIRROR),
        };
        let invalid = |detail: String| FormatError::Invalid {
            what: "superblock",
            detail,
        };
        if get_u32(b, SB_PAGE_SIZE) as u64 != PAGE_SIZE
            || get_u32(b, SB_ENTRY_SIZE) as usize != crate::ENTRY_SIZE
        {
            return Err(invalid("unsupported page or entry size".into()));
        }
        if sb.pool_size > medium_len {
            return Err(invalid(format!(
                "pool size {} exceeds the medium's {} bytes (truncated?)",
                sb.pool_size, medium_len
            )));
        }
        let ns_end = sb
            .ns_capacity
            .checked_mul(crate::ENTRY_SIZE as u64)
            .and_then(|n| n.checked_add(sb.ns_offset));
        let heap_end = sb.heap_offset.checked_add(sb.heap_len);
        match (ns_end, heap_end) {
            (Some(ns_end), Some(heap_end))
                if sb.ns_offset == NS_OFFSET
                    && sb.config_offset == CONFIG_OFFSET
                    && ns_end <= sb.heap_offset
                    && heap_end <= sb.pool_size
                    && sb.heap_offset.is_multiple_of(PAGE_SIZE)
                    && sb.heap_len.is_multiple_of(PAGE_SIZE)
                    && sb.base_addr.is_multiple_of(PAGE_SIZE)
                    && sb
                        .base_addr
                        .checked_add(sb.heap_len)
                        .is_some_and(|e| e < (1 << 47)) => {}
            _ => return Err(invalid("inconsistent layout".into())),
        }
        // The mirror: absent before version 3; from version 3 page aligned, after namespace A,
        // inside the pool (between namespace A and the heap, or inside the heap).
        let mirror_ok = match version {
            v if v < crate::FORMAT_VERSION_MIRROR => sb.ns_mirror == 0,
            _ => {
                sb.ns_mirror.is_multiple_of(PAGE_SIZE)
                    && sb.ns_mirror >= sb.ns_offset + sb.ns_bytes()
                    && sb.ns_mirror.checked_add(sb.ns_bytes()).is_some_and(|e| {
                        e <= sb.heap_offset || (sb.ns_mirror >= sb.heap_offset && e <= sb.pool_size)
                    })
            }
        };
        if !mirror_ok {
            return Err(invalid(format!("namespace mirror at {}", sb.ns_mirror)));
        }
        sb.kdf.validate()?;
        Ok(sb)
    }
}

/// Magic number of a pool configuration record.
pub const CONFIG_MAGIC: u32 = u32::from_le_bytes(*b"PCFG");
/// Size of one configuration record slot.
pub const CONFIG_SIZE: usize = 64;
/// Offset (within the configuration page) of the namespace generation word (a hint for caches,
/// not crash-consistent state: odd means a namespace change is in progress).
pub const NS_GEN_OFFSET: u64 = 2 * CONFIG_SIZE as u64;

/// Pool-wide settings that can change after `init` (two alternating slots; the valid one with
/// the higher sequence number wins).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PoolConfig {
    pub seq: u64,
    /// Default protection scheme for new attaches (0 = none; codes defined by the store).
    pub scheme: u32,
    /// Where per-page schemes keep the plaintext (0 = DRAM, 1 = medium).
    pub shadow: u32,
}

impl PoolConfig {
    /// Encode into one slot.
    pub fn encode(&self) -> [u8; CONFIG_SIZE] {
        let mut b = [0u8; CONFIG_SIZE];
        put_u32(&mut b, 0, CONFIG_MAGIC);
        put_u64(&mut b, 8, self.seq);
        put_u32(&mut b, 16, self.scheme);
        put_u32(&mut b, 20, self.shadow);
        let c = crc(&b[..CONFIG_SIZE - 4]);
        put_u32(&mut b, CONFIG_SIZE - 4, c);
        b
    }
    /// Decode one slot; `None` if it is empty, torn or corrupted.
    pub fn decode(b: &[u8]) -> Option<PoolConfig> {
        if b.len() < CONFIG_SIZE
            || get_u32(b, 0) != CONFIG_MAGIC
            || get_u32(b, CONFIG_SIZE - 4) != crc(&b[..CONFIG_SIZE - 4])
        {
            return None;
        }
        Some(PoolConfig {
            seq: get_u64(b, 8),
            scheme: get_u32(b, 16),
            shadow: get_u32(b, 20),
        })
    }
    /// The slot a record with sequence number `seq` is written to.
    pub fn slot(seq: u64) -> u64 {
        seq % 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> Superblock {
        Superblock {
            version: FORMAT_VERSION,
            flags: 0,
            uuid: [7; 16],
            pool_size: 1 << 30,
            ns_offset: NS_OFFSET,
            ns_capacity: 1024,
            heap_offset: NS_OFFSET + 2 * 1024 * 512,
            heap_len: (1 << 30) - (NS_OFFSET + 2 * 1024 * 512),
            base_addr: 0x2000_0000_0000,
            created_unix_s: 1,
            kdf: KdfParams::DEFAULT,
            config_offset: CONFIG_OFFSET,
            ns_mirror: NS_OFFSET + 1024 * 512,
        }
    }

    #[test]
    fn round_trip() {
        let sb = sample();
        assert_eq!(Superblock::decode(&sb.encode(), 1 << 30).unwrap(), sb);
    }

    #[test]
    fn truncated_medium_is_reported() {
        let sb = sample();
        let err = Superblock::decode(&sb.encode(), 1 << 20).unwrap_err();
        assert!(matches!(err, FormatError::Invalid { .. }), "{err}");
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let enc = sample().encode();
        for bit in 0..SB_SIZE * 8 {
            let mut b = enc;
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(Superblock::decode(&b, 1 << 30).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn newer_version_is_refused() {
        let mut sb = sample();
        sb.version = FORMAT_VERSION + 1;
        assert_eq!(
            Superblock::decode(&sb.encode(), 1 << 30),
            Err(FormatError::TooNew {
                found: FORMAT_VERSION + 1,
                supported: FORMAT_VERSION
            })
        );
    }

    #[test]
    fn foreign_bytes() {
        assert_eq!(
            Superblock::decode(&[0u8; 256], 1 << 30),
            Err(FormatError::Foreign)
        );
        assert_eq!(
            Superblock::decode(b"short", 1 << 30),
            Err(FormatError::Foreign)
        );
    }

    #[test]
    fn config_round_trip_and_torn() {
        let c = PoolConfig {
            seq: 9,
            scheme: 3,
            shadow: 1,
        };
        let mut b = c.encode();
        assert_eq!(PoolConfig::decode(&b), Some(c));
        b[17] ^= 1;
        assert_eq!(PoolConfig::decode(&b), None);
    }
}
