//! Namespace entries (`docs/format.md` §3): one fixed-size slot per PMO.
//!
//! A slot is free unless it decodes (magic and CRC). Entries are never updated in place: a changed
//! entry is written to a free slot with a higher generation and the old slot is cleared after;
//! recovery keeps the higher generation when it finds both.

use crate::codec::*;
use crate::kdf::KdfParams;
use crate::{crc, FormatError, PAGE_SIZE};

/// Bytes per namespace slot.
pub const ENTRY_SIZE: usize = 512;
/// Longest PMO name in bytes (UTF-8).
pub const NAME_MAX: usize = 255;
/// Magic number of a live entry.
pub const ENTRY_MAGIC: u32 = u32::from_le_bytes(*b"PENT");

const E_VERSION: usize = 4;
const E_GENERATION: usize = 8;
const E_UUID: usize = 16;
const E_SIZE: usize = 32;
const E_EXTENT_OFF: usize = 40;
const E_EXTENT_LEN: usize = 48;
const E_BASE_ADDR: usize = 56;
const E_SCHEME: usize = 64;
const E_FLAGS: usize = 68;
const E_KDF: usize = 72; // 16 bytes
const E_SALT: usize = 88; // 32 bytes
const E_VERIFIER: usize = 120; // 32 bytes
const E_NAME_LEN: usize = 152;
const E_NAME: usize = 160; // 256 bytes
const E_CREATED: usize = 416;
const E_TAG_BYTES: usize = 424;
const E_WRAPPED: usize = 428; // WRAPPED_LEN bytes
const E_CAPACITY: usize = 468;
const E_FAMILY: usize = 476; // 32 bytes
const E_CRC: usize = ENTRY_SIZE - 4;
const _: () = assert!(
    E_NAME + NAME_MAX < E_CREATED
        && E_WRAPPED + WRAPPED_LEN <= E_CAPACITY
        && E_CAPACITY + 8 <= E_FAMILY
        && E_FAMILY + 32 <= E_CRC
);

/// Entry flag: the PMO's data master key is wrapped (AES-KW) in [`Entry::wrapped`] under a
/// key-encryption key derived from the user key (set by a rekey).
pub const FLAG_WRAPPED: u32 = 1;
/// Entry flag (format version 6): the PMO's extent ends with a sub-page commit log area
/// ([`crate::sublog`]), laid out by [`crate::layout::PmoLayout::with_log`].
pub const FLAG_SUBLOG: u32 = 2;
/// Entry flag (format version 7): the PMO belongs to a key family ([`Entry::family`]): its
/// user-key master is HKDF-SHA256(salt = [`Entry::salt`], IKM = Argon2id(key, family), info =
/// "pmo/v1/family" ‖ uuid), so PMOs of one family under one key cost one Argon2id per process.
pub const FLAG_FAMILY: u32 = 4;
/// Every flag an entry may carry.
pub const FLAGS_KNOWN: u32 = FLAG_WRAPPED | FLAG_SUBLOG | FLAG_FAMILY;
/// Bytes of a wrapped data master key.
pub const WRAPPED_LEN: usize = 40;

/// One PMO's namespace entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub generation: u64,
    pub uuid: [u8; 16],
    /// User-visible size in bytes, a multiple of [`PAGE_SIZE`].
    pub size: u64,
    /// The PMO's extent, relative to the start of the pool.
    pub extent_off: u64,
    pub extent_len: u64,
    /// Stable virtual address at which attach maps the PMO.
    pub base_addr: u64,
    /// Protection scheme code (defined by the store; 0 = none).
    pub scheme: u32,
    pub flags: u32,
    pub kdf: KdfParams,
    pub salt: [u8; 32],
    /// Key verifier derived from the user key (the key itself is never stored).
    pub verifier: [u8; 32],
    pub name: String,
    pub created_unix_s: u64,
    /// Bytes of per-page protection metadata per slot (0 = none), see the PMO layout.
    pub tag_bytes: u32,
    /// The wrapped data master key when `flags` has [`FLAG_WRAPPED`] (zero otherwise).
    pub wrapped: [u8; WRAPPED_LEN],
    /// Layout capacity in bytes (format version 5): the extent is laid out for this many
    /// bytes, so the PMO grows to it and shrinks in place. 0 (every entry written before
    /// version 5): the capacity is the size.
    pub capacity: u64,
    /// The key family's Argon2id salt when `flags` has [`FLAG_FAMILY`] (format version 7),
    /// zero otherwise.
    pub family: [u8; 32],
}

impl Entry {
    /// Check a name: 1 to 255 bytes, no NUL, no '/'.
    pub fn validate_name(name: &str) -> Result<(), FormatError> {
        let bad = |detail: &str| {
            Err(FormatError::Invalid {
                what: "PMO name",
                detail: detail.into(),
            })
        };
        if name.is_empty() {
            return bad("empty");
        }
        if name.len() > NAME_MAX {
            return bad("longer than 255 bytes");
        }
        if name.bytes().any(|b| b == 0 || b == b'/') {
            return bad("contains NUL or '/'");
        }
        Ok(())
    }

    /// The layout capacity in bytes: [`Entry::capacity`], or the size when that is 0.
    pub fn capacity_bytes(&self) -> u64 {
        if self.capacity == 0 {
            self.size
        } else {
            self.capacity
        }
    }

    /// Encode into one slot.
    pub fn encode(&self) -> [u8; ENTRY_SIZE] {
        let mut b = [0u8; ENTRY_SIZE];
        put_u32(&mut b, 0, ENTRY_MAGIC);
        put_u32(&mut b, E_VERSION, 1);
        put_u64(&mut b, E_GENERATION, self.generation);
        b[E_UUID..E_UUID + 16].copy_from_slice(&self.uuid);
        put_u64(&mut b, E_SIZE, self.size);
        put_u64(&mut b, E_EXTENT_OFF, self.extent_off);
        put_u64(&mut b, E_EXTENT_LEN, self.extent_len);
        put_u64(&mut b, E_BASE_ADDR, self.base_addr);
        put_u32(&mut b, E_SCHEME, self.scheme);
        put_u32(&mut b, E_FLAGS, self.flags);
        put_u32(&mut b, E_KDF, self.kdf.alg);
        put_u32(&mut b, E_KDF + 4, self.kdf.m_kib);
        put_u32(&mut b, E_KDF + 8, self.kdf.t);
        put_u32(&mut b, E_KDF + 12, self.kdf.p);
        b[E_SALT..E_SALT + 32].copy_from_slice(&self.salt);
        b[E_VERIFIER..E_VERIFIER + 32].copy_from_slice(&self.verifier);
        let name = self.name.as_bytes();
        let n = name.len().min(NAME_MAX);
        put_u16(&mut b, E_NAME_LEN, n as u16);
        b[E_NAME..E_NAME + n].copy_from_slice(&name[..n]);
        put_u64(&mut b, E_CREATED, self.created_unix_s);
        put_u32(&mut b, E_TAG_BYTES, self.tag_bytes);
        b[E_WRAPPED..E_WRAPPED + WRAPPED_LEN].copy_from_slice(&self.wrapped);
        put_u64(&mut b, E_CAPACITY, self.capacity);
        b[E_FAMILY..E_FAMILY + 32].copy_from_slice(&self.family);
        let c = crc(&b[..E_CRC]);
        put_u32(&mut b, E_CRC, c);
        b
    }

    /// True if the slot holds something that looks like an entry (magic present), valid or not.
    pub fn has_magic(b: &[u8]) -> bool {
        b.len() >= 4 && get_u32(b, 0) == ENTRY_MAGIC
    }

    /// Decode one slot. `Ok(None)`: free (bytes 0..8, magic and version, all zero). `Err`: a
    /// damaged slot: the magic with a bad body, or a first word that is neither zero nor the
    /// magic (entries are written body first, then that word in one 8-byte store, and cleared
    /// by zeroing it: no crash leaves anything else).
    pub fn decode(b: &[u8]) -> Result<Option<Entry>, FormatError> {
        if b.len() < ENTRY_SIZE {
            return Ok(None);
        }
        if !Self::has_magic(b) {
            if b[..8].iter().all(|&x| x == 0) {
                return Ok(None);
            }
            return Err(FormatError::Magic {
                what: "namespace entry",
            });
        }
        if get_u32(b, E_CRC) != crc(&b[..E_CRC]) {
            return Err(FormatError::Checksum {
                what: "namespace entry",
            });
        }
        let invalid = |detail: String| FormatError::Invalid {
            what: "namespace entry",
            detail,
        };
        if get_u32(b, E_VERSION) != 1 {
            return Err(invalid(format!("entry version {}", get_u32(b, E_VERSION))));
        }
        let n = get_u16(b, E_NAME_LEN) as usize;
        if n == 0 || n > NAME_MAX {
            return Err(invalid(format!("name length {n}")));
        }
        let name = std::str::from_utf8(&b[E_NAME..E_NAME + n])
            .map_err(|_| invalid("name is not UTF-8".into()))?
            .to_string();
        Self::validate_name(&name)?;
        let e = Entry {
            generation: get_u64(b, E_GENERATION),
            uuid: get_array(b, E_UUID),
            size: get_u64(b, E_SIZE),
            extent_off: get_u64(b, E_EXTENT_OFF),
            extent_len: get_u64(b, E_EXTENT_LEN),
            base_addr: get_u64(b, E_BASE_ADDR),
            scheme: get_u32(b, E_SCHEME),
            flags: get_u32(b, E_FLAGS),
            kdf: KdfParams {
                alg: get_u32(b, E_KDF),
                m_kib: get_u32(b, E_KDF + 4),
                t: get_u32(b, E_KDF + 8),
                p: get_u32(b, E_KDF + 12),
            },
            salt: get_array(b, E_SALT),
            verifier: get_array(b, E_VERIFIER),
            name,
            created_unix_s: get_u64(b, E_CREATED),
            tag_bytes: get_u32(b, E_TAG_BYTES),
            wrapped: get_array(b, E_WRAPPED),
            capacity: get_u64(b, E_CAPACITY),
            family: get_array(b, E_FAMILY),
        };
        if e.flags & !FLAGS_KNOWN != 0 {
            return Err(invalid(format!("unknown flags {:#x}", e.flags)));
        }
        if e.flags & FLAG_FAMILY == 0 && e.family != [0; 32] {
            return Err(invalid("a key family salt without the family flag".into()));
        }
        if e.size == 0
            || !e.size.is_multiple_of(PAGE_SIZE)
            || !e.extent_off.is_multiple_of(PAGE_SIZE)
            || !e.base_addr.is_multiple_of(PAGE_SIZE)
        {
            return Err(invalid("unaligned size, extent or address".into()));
        }
        if e.capacity != 0 && (e.capacity < e.size || !e.capacity.is_multiple_of(PAGE_SIZE)) {
            return Err(invalid(format!(
                "capacity {} below the size {} or unaligned",
                e.capacity, e.size
            )));
        }
        if e.tag_bytes > 64 {
            return Err(invalid(format!("tag size {}", e.tag_bytes)));
        }
        e.kdf.validate()?;
        Ok(Some(e))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample() -> Entry {
        Entry {
            generation: 3,
            uuid: [1; 16],
            size: 16 * PAGE_SIZE,
            extent_off: 1 << 20,
            extent_len: 40 * PAGE_SIZE,
            base_addr: 0x2000_0010_0000,
            scheme: 0,
            flags: 0,
            kdf: KdfParams::INSECURE_FAST,
            salt: [2; 32],
            verifier: [3; 32],
            name: "matrix-α".into(),
            created_unix_s: 5,
            tag_bytes: 0,
            wrapped: [0; WRAPPED_LEN],
            capacity: 0,
            family: [0; 32],
        }
    }

    #[test]
    fn round_trip() {
        let e = sample();
        assert_eq!(Entry::decode(&e.encode()).unwrap(), Some(e.clone()));
        assert_eq!(e.capacity_bytes(), e.size);
        let grown = Entry {
            capacity: 64 * PAGE_SIZE,
            ..e.clone()
        };
        assert_eq!(Entry::decode(&grown.encode()).unwrap(), Some(grown.clone()));
        assert_eq!(grown.capacity_bytes(), 64 * PAGE_SIZE);
        for bad in [PAGE_SIZE, 64 * PAGE_SIZE + 1] {
            let b = Entry {
                capacity: bad,
                ..e.clone()
            }
            .encode();
            assert!(Entry::decode(&b).is_err(), "capacity {bad}");
        }
        assert_eq!(Entry::decode(&[0u8; ENTRY_SIZE]).unwrap(), None);
    }

    #[test]
    fn key_family_round_trips_and_needs_its_flag() {
        let fam = Entry {
            flags: FLAG_FAMILY,
            family: [9; 32],
            ..sample()
        };
        assert_eq!(Entry::decode(&fam.encode()).unwrap(), Some(fam.clone()));
        // Family bytes without the flag (or damage that re-checksummed them): refused.
        let stray = Entry {
            flags: 0,
            ..fam.clone()
        };
        assert!(Entry::decode(&stray.encode()).is_err());
        // Every flipped bit of a family entry is caught too.
        let enc = fam.encode();
        for bit in 0..ENTRY_SIZE * 8 {
            let mut b = enc;
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(
                !matches!(Entry::decode(&b), Ok(Some(_))),
                "bit {bit} decoded as an entry"
            );
        }
    }

    #[test]
    fn every_bit_flip_is_detected_or_frees_the_slot() {
        let enc = sample().encode();
        for bit in 0..ENTRY_SIZE * 8 {
            let mut b = enc;
            b[bit / 8] ^= 1 << (bit % 8);
            // Either an error, or (a flipped magic) a free slot: never a different valid entry.
            match Entry::decode(&b) {
                Err(_) | Ok(None) => {}
                Ok(Some(e)) => panic!("bit {bit} decoded as {e:?}"),
            }
        }
    }

    #[test]
    fn names() {
        assert!(Entry::validate_name("a").is_ok());
        assert!(Entry::validate_name("").is_err());
        assert!(Entry::validate_name("a/b").is_err());
        assert!(Entry::validate_name(&"x".repeat(256)).is_err());
    }
}
