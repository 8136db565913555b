//! Protection schemes: the LOaPP design space as four orthogonal policy choices, and the names
//! users pick them by.
//!
//! | choice | values | field |
//! |---|---|---|
//! | what is protected and decrypted | the whole PMO at attach, or page by page on first touch | [`Granularity`] |
//! | how a page is protected at rest | nothing, AES-256-XTS, XTS + SHA-256 per page, an AEAD (AES-256-GCM or AEGIS-256X4) | [`Cipher`], and [`AeadCipher`] for the AEAD |
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
//! Which AEAD seals the pages of an AEAD scheme (`secure`) is a policy of its own, named by a
//! suffix: `secure` (AES-256-GCM, the default and every PMO before format version 9),
//! `secure:aegis` (AEGIS-256X4), with the placement in any order (`secure:medium:aegis`).
//!
//! On the medium a scheme is a `u32` code in the namespace entry (`docs/format.md` §3): bits 0-7
//! the named scheme (0 none, 1 wed, 2 wedi, 3 bp, 4 bp-ip, 5 bp-id, 6 sp, 7 sp-ip, 8 sp-id,
//! 9 secure), bit 8 set for `--shadow medium`, bits 9-11 the AEAD (0 AES-256-GCM, 1
//! AEGIS-256X4; format version 9; non-zero only with `secure`); other bits zero.

use std::fmt;

use crate::error::{Result, StoreError};
pub use pmo_crypt::AeadCipher;

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
    /// The AEAD that seals pages when [`Scheme::cipher`] is [`Cipher::Aead`] (`secure`);
    /// AES-256-GCM for every other scheme.
    pub aead: AeadCipher,
}

/// The suffix naming an AEAD in a scheme name (`secure:aegis`).
fn aead_suffix(c: AeadCipher) -> &'static str {
    match c {
        AeadCipher::Aes256Gcm => "gcm",
        AeadCipher::Aegis256X4 => "aegis",
    }
}

/// Parse an AEAD name: `gcm` / `aes-256-gcm`, or `aegis` / `aegis-256x4`.
pub fn aead_from_name(name: &str) -> Result<AeadCipher> {
    match name.trim() {
        "gcm" | "aes-256-gcm" => Ok(AeadCipher::Aes256Gcm),
        "aegis" | "aegis-256x4" => Ok(AeadCipher::Aegis256X4),
        other => Err(StoreError::Invalid(format!(
            "unknown cipher '{other}' (gcm or aegis)"
        ))),
    }
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
/// First bit of a scheme code's AEAD field (bits 9-11: 0 AES-256-GCM, 1 AEGIS-256X4).
pub const AEAD_SHIFT: u32 = 9;
/// The AEAD field of a scheme code.
pub const AEAD_MASK: u32 = 0b111 << AEAD_SHIFT;

impl Scheme {
    /// No protection.
    pub const NONE: Scheme = Scheme {
        id: SchemeId::None,
        shadow: Shadow::Dram,
        aead: AeadCipher::Aes256Gcm,
    };
    /// The secure default for protected PMOs: pages sealed with the default AEAD,
    /// AEGIS-256X4 (`secure`, the same as `secure:aegis`).
    pub const SECURE: Scheme = Scheme {
        id: SchemeId::Secure,
        shadow: Shadow::Dram,
        aead: AeadCipher::Aegis256X4,
    };
    /// `secure` with AEGIS-256X4 as its page AEAD, named explicitly: [`Scheme::SECURE`].
    pub const SECURE_AEGIS: Scheme = Scheme::SECURE;
    /// `secure` with AES-256-GCM as its page AEAD (`secure:gcm`): every `secure` PMO created
    /// before format version 9, and the default before AEGIS-256X4 became it.
    pub const SECURE_GCM: Scheme = Scheme {
        aead: AeadCipher::Aes256Gcm,
        ..Scheme::SECURE
    };

    /// The AEAD a scheme gets when its name names none: the default AEAD for `secure`, the
    /// placeholder AES-256-GCM (never used: no AEAD) for the others.
    fn default_aead(id: SchemeId) -> AeadCipher {
        if id == SchemeId::Secure {
            AeadCipher::default()
        } else {
            AeadCipher::Aes256Gcm
        }
    }

    /// Every named scheme with the DRAM shadow (and the default AEAD).
    pub fn all() -> impl Iterator<Item = Scheme> {
        IDS.iter().map(|&(id, _)| Scheme {
            id,
            shadow: Shadow::Dram,
            aead: Scheme::default_aead(id),
        })
    }

    /// Every named scheme with each plaintext placement (DRAM first), supported or not, and an
    /// AEAD scheme under each AEAD (`secure`, `secure:aegis`, ...).
    pub fn all_placements() -> impl Iterator<Item = Scheme> {
        [Shadow::Dram, Shadow::Medium]
            .into_iter()
            .flat_map(|shadow| Scheme::all().map(move |s| Scheme { shadow, ..s }))
            .flat_map(|s| {
                let ciphers: &[AeadCipher] = if s.cipher() == Cipher::Aead {
                    &AeadCipher::ALL
                } else {
                    &AeadCipher::ALL[..1]
                };
                ciphers.iter().map(move |&aead| Scheme { aead, ..s })
            })
    }

    /// `self` with `aead` as its page AEAD: refused unless the scheme seals with an AEAD
    /// (`secure`), since the others have no AEAD to choose.
    pub fn with_aead(self, aead: AeadCipher) -> Result<Scheme> {
        if aead != AeadCipher::Aes256Gcm && self.cipher() != Cipher::Aead {
            return Err(StoreError::Invalid(format!(
                "scheme '{}' has no AEAD to choose (a cipher is chosen for secure only)",
                self.name()
            )));
        }
        Ok(Scheme { aead, ..self })
    }

    /// Parse `name` (`none`, `wed`, `wedi`, `bp`, `bp-ip`, `bp-id`, `sp`, `sp-ip`, `sp-id`,
    /// `secure`), optionally followed by `:medium` or `:dram` for the shadow and, for
    /// `secure`, `:aegis` or `:gcm` for the AEAD (in either order).
    pub fn from_name(name: &str) -> Result<Scheme> {
        let mut parts = name.trim().split(':');
        let base = parts.next().unwrap_or("").trim();
        let (mut shadow, mut aead) = (None, None);
        for part in parts {
            if let Ok(s) = Shadow::from_name(part) {
                if shadow.replace(s).is_some() {
                    return Err(StoreError::Invalid(format!(
                        "scheme '{name}' names the plaintext placement twice"
                    )));
                }
            } else if let Ok(c) = aead_from_name(part) {
                if aead.replace(c).is_some() {
                    return Err(StoreError::Invalid(format!(
                        "scheme '{name}' names the cipher twice"
                    )));
                }
            } else {
                return Err(StoreError::Invalid(format!(
                    "unknown suffix '{part}' in scheme '{name}' (dram, medium, gcm or aegis)"
                )));
            }
        }
        let shadow = shadow.unwrap_or(Shadow::Dram);
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
        Scheme {
            id,
            shadow,
            aead: AeadCipher::Aes256Gcm,
        }
        .with_aead(aead.unwrap_or(Scheme::default_aead(id)))
    }

    /// The scheme named by `PMO_SCHEME`, if set (an invalid value is an error).
    pub fn from_env() -> Result<Option<Scheme>> {
        match std::env::var("PMO_SCHEME") {
            Ok(v) if !v.trim().is_empty() => Scheme::from_name(&v).map(Some),
            _ => Ok(None),
        }
    }

    /// The name, with `:medium` when the plaintext lives on the medium and `:gcm` when the
    /// pages are sealed with AES-256-GCM (AEGIS-256X4, the default, adds nothing).
    pub fn name(&self) -> String {
        let base = IDS
            .iter()
            .find(|(id, _)| *id == self.id)
            .map_or("?", |(_, n)| n);
        let mut name = base.to_string();
        if self.shadow == Shadow::Medium {
            name.push_str(":medium");
        }
        if self.cipher() == Cipher::Aead && self.aead != AeadCipher::default() {
            name.push(':');
            name.push_str(aead_suffix(self.aead));
        }
        name
    }

    /// The on-medium code.
    pub fn code(&self) -> u32 {
        let id = IDS.iter().position(|(id, _)| *id == self.id).unwrap_or(0) as u32;
        let aead = AeadCipher::ALL
            .iter()
            .position(|&c| c == self.aead)
            .unwrap_or(0) as u32;
        id | if self.shadow == Shadow::Medium {
            SHADOW_MEDIUM_BIT
        } else {
            0
        } | aead << AEAD_SHIFT
    }

    /// Decode an on-medium code. An AEAD field naming no cipher, or naming one for a scheme
    /// without an AEAD, is corruption.
    pub fn from_code(code: u32) -> Result<Scheme> {
        let id = (code & 0xff) as usize;
        let aead = ((code & AEAD_MASK) >> AEAD_SHIFT) as usize;
        let bad = || StoreError::Corrupt(format!("unknown protection scheme code {code:#x}"));
        if code & !(0xff | SHADOW_MEDIUM_BIT | AEAD_MASK) != 0
            || id >= IDS.len()
            || aead >= AeadCipher::ALL.len()
        {
            return Err(bad());
        }
        Scheme {
            id: IDS[id].0,
            shadow: if code & SHADOW_MEDIUM_BIT != 0 {
                Shadow::Medium
            } else {
                Shadow::Dram
            },
            aead: AeadCipher::Aes256Gcm,
        }
        .with_aead(AeadCipher::ALL[aead])
        .map_err(|_| bad())
    }

    /// The AEAD that seals this scheme's pages, for an AEAD scheme (`secure`).
    pub fn aead_cipher(&self) -> Option<AeadCipher> {
        (self.cipher() == Cipher::Aead).then_some(self.aead)
    }

    /// Whether this scheme needs format version 9 (a code an older build cannot read).
    pub fn needs_aead_field(&self) -> bool {
        self.aead != AeadCipher::Aes256Gcm
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

    /// Whether `other` stores a PMO exactly as this scheme does (same cipher and AEAD, same
    /// whole-PMO checksum, same plaintext placement), so that a PMO created under one can be attached
    /// under the other: the designs then differ only in what attach, fault, psync and detach
    /// do (granularity, integrity timing, BP or SP), as with the paper's run-time switch.
    pub fn same_at_rest(&self, other: &Scheme) -> bool {
        self.cipher() == other.cipher()
            && self.aead == other.aead
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
        assert!(Scheme::from_code(1 << 12).is_err());
    }

    #[test]
    fn the_aead_is_a_suffix_and_bits_9_to_11_of_secure_only() {
        for s in Scheme::all_placements() {
            assert_eq!(Scheme::from_name(&s.name()).unwrap(), s, "{s}");
            assert_eq!(Scheme::from_code(s.code()).unwrap(), s, "{s}");
        }
        let a = Scheme::from_name("secure:aegis").unwrap();
        assert_eq!(a, Scheme::SECURE_AEGIS);
        assert_eq!(
            a,
            Scheme::from_name("secure").unwrap(),
            "AEGIS-256X4 is the default"
        );
        assert_eq!(a, Scheme::SECURE);
        assert_eq!(a.name(), "secure");
        assert_eq!(a.code(), 9 | 1 << 9);
        assert_eq!(a.aead_cipher(), Some(AeadCipher::Aegis256X4));
        let g = Scheme::from_name("secure:gcm").unwrap();
        assert_eq!(g, Scheme::SECURE_GCM);
        assert_eq!(g.name(), "secure:gcm");
        assert_eq!(g.code(), 9, "GCM PMOs keep their pre-9 code");
        assert_eq!(g.aead_cipher(), Some(AeadCipher::Aes256Gcm));
        assert!(!g.needs_aead_field() && a.needs_aead_field());
        let m = Scheme::from_name("secure:aegis:medium").unwrap();
        assert_eq!(m, Scheme::from_name("secure:medium").unwrap());
        assert_eq!(m.name(), "secure:medium");
        assert_eq!(m.code(), 9 | SHADOW_MEDIUM_BIT | 1 << 9);
        let gm = Scheme::from_name("secure:gcm:medium").unwrap();
        assert_eq!(gm.name(), "secure:medium:gcm");
        assert_eq!(Scheme::from_name(&gm.name()).unwrap(), gm);
        // The schemes without an AEAD name none.
        assert_eq!(Scheme::from_name("sp-ip").unwrap().name(), "sp-ip");
        // Only `secure` has an AEAD; unknown ciphers and doubled suffixes are refused.
        for bad in [
            "sp-ip:aegis",
            "none:aegis",
            "secure:aegis:gcm",
            "secure:medium:dram",
            "secure:chacha",
        ] {
            assert!(Scheme::from_name(bad).is_err(), "{bad}");
        }
        assert!(Scheme::from_code(7 | 1 << 9).is_err(), "sp-ip with an AEAD");
        assert!(
            Scheme::from_code(9 | 2 << 9).is_err(),
            "AEAD 2 is no cipher"
        );
        assert!(Scheme::from_code(9 | 7 << 9).is_err());
        // The two ciphers are two at-rest formats: neither attaches as the other.
        assert!(!Scheme::SECURE_GCM.same_at_rest(&Scheme::SECURE_AEGIS));
        assert_eq!(
            Scheme::SECURE_AEGIS
                .attachable_as()
                .iter()
                .map(|x| x.name())
                .collect::<Vec<_>>(),
            ["secure"]
        );
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
