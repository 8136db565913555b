//! Protection schemes: the LOaPP design space as four orthogonal policy choices, and the names
//! users pick them by.
//!
//! | choice | values | field |
//! |---|---|---|
//! | what is protected and decrypted | the whole PMO at attach, or page by page on first touch | [`Granularity`] |
//! | how a page is protected at rest | nothing, AES-256-XTS, XTS + SHA-256 per page, AES-256-GCM | [`Cipher`] |
//! | when integrity metadata is updated | at every psync (`I_p`), at detach (`I_d`) | [`IntegrityAt`] |
//! | where the plaintext copy lives | DRAM (LPMO), the medium (LOaPP kernel) | [`Shadow`] |
//!
//! plus, for `wedi`, a whole-PMO SHA-256 checksum verified at attach and recomputed at every
//! psync (the paper's baseline). `bp` and `sp` (which medium copies a fault decrypts into:
//! both, or the shadow only) differ only when the plaintext lives on the medium.
//!
//! Named schemes (the paper's, plus our secure default):
//!
//! | name | granularity | cipher | integrity | note |
//! |---|---|---|---|---|
//! | `none` | page | none | none | no protection |
//! | `wed` | whole | XTS | none | decrypt all at attach |
//! | `wedi` | whole | XTS | whole-PMO SHA-256, at psync | the paper's baseline |
//! | `bp`, `sp` | page | XTS | none | decrypt on first touch |
//! | `bp-ip`, `sp-ip` | page | XTS + SHA-256 | at psync | the paper's best designs |
//! | `bp-id`, `sp-id` | page | XTS + SHA-256 | at detach | the crash handler repairs at the next attach |
//! | `secure` | page | AES-256-GCM + version-table MAC | at psync | the default: catches rollback, swap, transplant |
//!
//! Where the plaintext lives (`:dram`, the default, or `:medium`):
//! - DRAM (LPMO): the attached copy is process memory; the medium only ever holds ciphertext.
//! - The medium (the LOaPP kernel): the PMO's extent has a plaintext area, the application's
//!   view is that area mapped (the sigsegv mechanism over the pool file), a fault decrypts into
//!   it, psync encrypts the written pages from it into the shadow slots, and detach zeroes the
//!   pages it filled (in the background: the next attach waits for it). A plaintext word in the
//!   header page covers the area across crashes: recovery zeroes the whole area when it is set
//!   (at pool open, at attach, before pdestroy gives the space back). One user at a time,
//!   readers included. The application's own loads and stores go to the medium; the latency
//!   emulation does not see them (it covers the engine's accesses only).
//!
//! BP and SP differ only with the plaintext copy on the medium, as in the paper: `sp*:medium`
//! psync encrypts the written pages of the plaintext area into the shadow slots; `bp*:medium`
//! psync *copies* them there as plaintext (flagged in the page map; `bp-ip` with their
//! checksum), and detach encrypts every page committed so in one sealing commit, then zeroes
//! the plaintext slots (the paper's cheaper psync, costlier detach). The price, as in the
//! paper: between a psync and the detach, and after a crash until the next keyed attach, the
//! committed copy of those pages is plaintext on the medium (docs/security.md).
//!
//! On the medium a scheme is a `u32` code in the namespace entry (`docs/format.md` §3): bits 0-7
//! the named scheme (0 none, 1 wed, 2 wedi, 3 bp, 4 bp-ip, 5 bp-id, 6 sp, 7 sp-ip, 8 sp-id,
//! 9 secure), bit 8 set for `--shadow medium`; other bits zero.

use std::fmt;

use crate::error::{Result, StoreError};

/// What is decrypted at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Granularity {
    /// The whole PMO, at attach (`wed`, `wedi`).
    Whole,
    /// One page, when it is first touched.
    Page,
}

/// How one page is protected at rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cipher {
    /// Stored as plaintext.
    Plain,
    /// AES-256-XTS, tweak = page index (the reference kernel's cipher).
    Xts,
    /// AES-256-XTS plus an unkeyed SHA-256 of the plaintext per page (the paper's `I` designs).
    XtsSha256,
    /// AES-256-GCM bound to (pool, PMO, page, version), plus the keyed version-table MAC.
    Aead,
}

/// When integrity metadata is brought up to date.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntegrityAt {
    /// Nothing to update (no integrity).
    Never,
    /// At every psync (`I_p`).
    Psync,
    /// At detach (`I_d`).
    Detach,
}

/// Where the plaintext copy of an attached PMO lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shadow {
    /// In DRAM only: the medium never holds plaintext (LPMO).
    Dram,
    /// On the medium, zeroed at detach (the LOaPP kernel).
    Medium,
}

impl Shadow {
    /// Parse `dram` or `medium`.
    pub fn from_name(name: &str) -> Result<Shadow> {
        match name.trim() {
            "dram" => Ok(Shadow::Dram),
            "medium" => Ok(Shadow::Medium),
            other => Err(StoreError::Invalid(format!(
                "unknown shadow '{other}' (dram or medium)"
            ))),
        }
    }
}

/// A protection scheme: one value of each policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheme {
    /// The named scheme (`none`, `wed`, ..., `secure`).
    pub id: SchemeId,
    /// Where the plaintext copy lives.
    pub shadow: Shadow,
}

/// The named schemes, in code order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemeId {
    None,
    Wed,
    Wedi,
    Bp,
    BpIp,
    BpId,
    Sp,
    SpIp,
    SpId,
    Secure,
}

const IDS: [(SchemeId, &str); 10] = [
    (SchemeId::None, "none"),
    (SchemeId::Wed, "wed"),
    (SchemeId::Wedi, "wedi"),
    (SchemeId::Bp, "bp"),
    (SchemeId::BpIp, "bp-ip"),
    (SchemeId::BpId, "bp-id"),
    (SchemeId::Sp, "sp"),
    (SchemeId::SpIp, "sp-ip"),
    (SchemeId::SpId, "sp-id"),
    (SchemeId::Secure, "secure"),
];

/// Bit of a scheme code: the plaintext copy lives on the medium.
pub const SHADOW_MEDIUM_BIT: u32 = 1 << 8;

impl Scheme {
    /// No protection.
    pub const NONE: Scheme = Scheme {
        id: SchemeId::None,
        shadow: Shadow::Dram,
    };
    /// The secure default for protected PMOs.
    pub const SECURE: Scheme = Scheme {
        id: SchemeId::Secure,
        shadow: Shadow::Dram,
    };

    /// Every named scheme with the DRAM shadow.
    pub fn all() -> impl Iterator<Item = Scheme> {
        IDS.iter().map(|&(id, _)| Scheme {
            id,
            shadow: Shadow::Dram,
        })
    }

    /// Every named scheme with each plaintext placement (DRAM first), supported or not.
    pub fn all_placements() -> impl Iterator<Item = Scheme> {
        [Shadow::Dram, Shadow::Medium]
            .into_iter()
            .flat_map(|shadow| Scheme::all().map(move |s| Scheme { shadow, ..s }))
    }

    /// Parse `name` (`none`, `wed`, `wedi`, `bp`, `bp-ip`, `bp-id`, `sp`, `sp-ip`, `sp-id`,
    /// `secure`), optionally suffixed `:medium` or `:dram` for the shadow.
    pub fn from_name(name: &str) -> Result<Scheme> {
        let (base, shadow) = match name.trim().split_once(':') {
            Some((b, shadow)) => (b, Shadow::from_name(shadow)?),
            None => (name.trim(), Shadow::Dram),
        };
        let id = IDS
            .iter()
            .find(|(_, n)| *n == base)
            .map(|&(id, _)| id)
            .ok_or_else(|| {
                let names: Vec<&str> = IDS.iter().map(|(_, n)| *n).collect();
                StoreError::Invalid(format!(
                    "unknown scheme '{base}' (one of {})",
                    names.join(", ")
                ))
            })?;
        Ok(Scheme { id, shadow })
    }

    /// The scheme named by `PMO_SCHEME`, if set (an invalid value is an error).
    pub fn from_env() -> Result<Option<Scheme>> {
        match std::env::var("PMO_SCHEME") {
            Ok(v) if !v.trim().is_empty() => Scheme::from_name(&v).map(Some),
            _ => Ok(None),
        }
    }

    /// The name, with `:medium` when the plaintext lives on the medium.
    pub fn name(&self) -> String {
        let base = IDS
            .iter()
            .find(|(id, _)| *id == self.id)
            .map_or("?", |(_, n)| n);
        match self.shadow {
            Shadow::Dram => base.to_string(),
            Shadow::Medium => format!("{base}:medium"),
        }
    }

    /// The on-medium code.
    pub fn code(&self) -> u32 {
        let id = IDS.iter().position(|(id, _)| *id == self.id).unwrap_or(0) as u32;
        id | if self.shadow == Shadow::Medium {
            SHADOW_MEDIUM_BIT
        } else {
            0
        }
    }

    /// Decode an on-medium code.
    pub fn from_code(code: u32) -> Result<Scheme> {
        let id = (code & 0xff) as usize;
        if code & !(0xff | SHADOW_MEDIUM_BIT) != 0 || id >= IDS.len() {
            return Err(StoreError::Corrupt(format!(
                "unknown protection scheme code {code:#x}"
            )));
        }
        Ok(Scheme {
            id: IDS[id].0,
            shadow: if code & SHADOW_MEDIUM_BIT != 0 {
                Shadow::Medium
            } else {
                Shadow::Dram
            },
        })
    }

    /// What is decrypted at once.
    pub fn granularity(&self) -> Granularity {
        match self.id {
            SchemeId::Wed | SchemeId::Wedi => Granularity::Whole,
            _ => Granularity::Page,
        }
    }

    /// How a page is protected at rest.
    pub fn cipher(&self) -> Cipher {
        match self.id {
            SchemeId::None => Cipher::Plain,
            SchemeId::Wed | SchemeId::Wedi | SchemeId::Bp | SchemeId::Sp => Cipher::Xts,
            SchemeId::BpIp | SchemeId::BpId | SchemeId::SpIp | SchemeId::SpId => Cipher::XtsSha256,
            SchemeId::Secure => Cipher::Aead,
        }
    }

    /// When integrity metadata is updated.
    pub fn integrity_at(&self) -> IntegrityAt {
        match self.id {
            SchemeId::None | SchemeId::Wed | SchemeId::Bp | SchemeId::Sp => IntegrityAt::Never,
            SchemeId::BpId | SchemeId::SpId => IntegrityAt::Detach,
            SchemeId::Wedi | SchemeId::BpIp | SchemeId::SpIp | SchemeId::Secure => {
                IntegrityAt::Psync
            }
        }
    }

    /// Whether a whole-PMO checksum is kept (`wedi`).
    pub fn whole_checksum(&self) -> bool {
        self.id == SchemeId::Wedi
    }

    /// Whether the PMO is protected at all (per-page metadata and journal trailers exist).
    pub fn is_protected(&self) -> bool {
        self.id != SchemeId::None
    }

    /// Bytes of per-page protection metadata per slot on the medium.
    pub fn tag_bytes(&self) -> u32 {
        if self.is_protected() {
            pmo_crypt::PAGE_META_LEN as u32
        } else {
            0
        }
    }

    /// Whether `other` stores a PMO exactly as this scheme does (same cipher, same whole-PMO
    /// checksum, same plaintext placement), so that a PMO created under one can be attached
    /// under the other: the designs then differ only in what attach, fault, psync and detach
    /// do (granularity, integrity timing, BP or SP), as with the paper's run-time switch.
    pub fn same_at_rest(&self, other: &Scheme) -> bool {
        self.cipher() == other.cipher()
            && self.whole_checksum() == other.whole_checksum()
            && self.shadow == other.shadow
    }

    /// The schemes a PMO stored under this scheme can be attached as.
    pub fn attachable_as(&self) -> Vec<Scheme> {
        Scheme::all_placements()
            .filter(|s| self.same_at_rest(s))
            .collect()
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_codes_round_trip() {
        for s in Scheme::all() {
            assert_eq!(Scheme::from_name(&s.name()).unwrap(), s);
            assert_eq!(Scheme::from_code(s.code()).unwrap(), s);
            let m = Scheme {
                shadow: Shadow::Medium,
                ..s
            };
            assert_eq!(Scheme::from_name(&m.name()).unwrap(), m);
            assert_eq!(Scheme::from_code(m.code()).unwrap(), m);
        }
        assert_eq!(
            Scheme::NONE.code(),
            0,
            "code 0 is what format v1 entries hold"
        );
        assert!(Scheme::from_name("bogus").is_err());
        assert!(Scheme::from_name("sp:disk").is_err());
        assert!(Scheme::from_code(10).is_err());
        assert!(Scheme::from_code(1 << 9).is_err());
    }

    #[test]
    fn policies_match_the_paper_table() {
        let s = |n| Scheme::from_name(n).unwrap();
        assert_eq!(s("wedi").granularity(), Granularity::Whole);
        assert!(s("wedi").whole_checksum() && !s("wed").whole_checksum());
        assert_eq!(s("sp-ip").cipher(), Cipher::XtsSha256);
        assert_eq!(s("sp-id").integrity_at(), IntegrityAt::Detach);
        assert_eq!(s("secure").cipher(), Cipher::Aead);
        assert_eq!(s("none").tag_bytes(), 0);
        assert_eq!(s("bp").tag_bytes(), 32);
        let names = |n| {
            s(n).attachable_as()
                .iter()
                .map(|x| x.name())
                .collect::<Vec<_>>()
        };
        assert_eq!(names("sp-id"), ["bp-ip", "bp-id", "sp-ip", "sp-id"]);
        assert_eq!(names("wed"), ["wed", "bp", "sp"]);
        assert_eq!(names("sp:medium"), ["wed:medium", "bp:medium", "sp:medium"]);
        assert_eq!(names("wedi"), ["wedi"]);
        assert_eq!(names("secure"), ["secure"]);
        assert_eq!(names("none"), ["none"]);
    }
}
