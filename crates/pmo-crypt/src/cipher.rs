//! The page AEADs behind one interface: [`AeadCipher`] names them, [`PageAead`] holds one keyed
//! and seals and opens pages and sub-page log records with it, so `page`, `record` and every
//! caller above stay the same whichever cipher a PMO uses.
//!
//! | cipher | implementation | key | nonce | tag |
//! |---|---|---|---|---|
//! | [`AeadCipher::Aes256Gcm`] | AWS-LC (`ffi::AeadKey`) | 256 bit, HKDF label `page-aead` | 96 bit: the context's 12 bytes | 128 bit |
//! | [`AeadCipher::Aegis256X4`] | the `aegis` crate (libaegis) | 256 bit, HKDF label `page-aegis256x4` | 256 bit: the same 12 bytes, then 20 zero bytes | 128 bit |
//!
//! Both take the same 12-byte nonce from their caller (`page index u32 | version u64`, or the
//! record index and version) and the same associated data, so a page is bound to (pool, PMO,
//! index, version) identically under either; the keys differ (two HKDF labels), so no key ever
//! serves two ciphers. Neither cipher is implemented here: this module only calls them.
//!
//! Invariants: no allocation on any path (the fault handler calls these); a failed open zeroes
//! its output; key bytes live in zeroizing buffers (AES-GCM: the AWS-LC context, cleansed on
//! drop; AEGIS: a `Zeroizing` key, and the crate's per-call value holding a key copy is wiped
//! after each call, its streaming state wipes itself).

use crate::error::CryptError;
use crate::ffi::{wipe_aegis, AeadKey, Aegis256X4, GCM_NONCE_LEN, GCM_TAG_LEN};
use zeroize::{Zeroize, Zeroizing};

/// AEGIS-256 nonce length in bytes.
const AEGIS_NONCE_LEN: usize = 32;

/// The HKDF label of the AES-256-GCM page key (the key hierarchy's `page-aead`).
pub(crate) const LABEL_GCM: &[u8] = b"page-aead";
/// The HKDF label of the AEGIS-256X4 page key.
pub(crate) const LABEL_AEGIS256X4: &[u8] = b"page-aegis256x4";

/// The AEAD that seals a PMO's pages (the cipher of the `secure` scheme's at-rest format).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum AeadCipher {
    /// AES-256-GCM (AWS-LC): every PMO created before format version 9 (`secure:gcm`).
    Aes256Gcm,
    /// AEGIS-256X4 (the `aegis` crate): 256-bit key and nonce, 128-bit tag (format version 9);
    /// the default for new PMOs (`secure`), as it seals and opens pages 2-3x faster than
    /// AES-256-GCM on this project's machines (`docs/results.md`, issue 30).
    #[default]
    Aegis256X4,
}

impl AeadCipher {
    /// Every cipher, in code order.
    pub const ALL: [AeadCipher; 2] = [AeadCipher::Aes256Gcm, AeadCipher::Aegis256X4];

    /// The cipher's full name (`aes-256-gcm`, `aegis-256x4`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Aes256Gcm => "aes-256-gcm",
            Self::Aegis256X4 => "aegis-256x4",
        }
    }

    /// The HKDF label of the page key: one per cipher, so no key serves two ciphers.
    pub(crate) fn key_label(self) -> &'static [u8] {
        match self {
            Self::Aes256Gcm => LABEL_GCM,
            Self::Aegis256X4 => LABEL_AEGIS256X4,
        }
    }
}

/// The AEGIS-256X4 page key: its bytes, wiped on drop. The `aegis` crate takes the key per call.
pub(crate) struct AegisKey {
    key: Zeroizing<[u8; 32]>,
}

impl AegisKey {
    /// The 256-bit nonce: the caller's 12 bytes, then zeros.
    fn cipher(&self, nonce: &[u8; GCM_NONCE_LEN]) -> Aegis256X4 {
        let mut n = [0u8; AEGIS_NONCE_LEN];
        n[..GCM_NONCE_LEN].copy_from_slice(nonce);
        Aegis256X4::new(&self.key, &n)
    }
}

/// One keyed page AEAD.
pub(crate) enum PageAead {
    Gcm(AeadKey),
    Aegis(AegisKey),
}

fn same_len(input: &[u8], output: &[u8]) -> Result<(), CryptError> {
    if input.len() == output.len() {
        Ok(())
    } else {
        Err(CryptError::Backend("aead: input and output lengths differ"))
    }
}

impl PageAead {
    /// Key `cipher` with the 32 bytes of `key`.
    pub(crate) fn new(cipher: AeadCipher, key: &[u8; 32]) -> Result<Self, CryptError> {
        Ok(match cipher {
            AeadCipher::Aes256Gcm => Self::Gcm(AeadKey::new(key)?),
            AeadCipher::Aegis256X4 => Self::Aegis(AegisKey {
                key: Zeroizing::new(*key),
            }),
        })
    }

    /// Which cipher this is.
    pub(crate) fn cipher(&self) -> AeadCipher {
        match self {
            Self::Gcm(_) => AeadCipher::Aes256Gcm,
            Self::Aegis(_) => AeadCipher::Aegis256X4,
        }
    }

    /// Encrypt `input` into `output` (same length) and write the tag.
    pub(crate) fn seal(
        &self,
        nonce: &[u8; GCM_NONCE_LEN],
        aad: &[u8],
        input: &[u8],
        output: &mut [u8],
        tag: &mut [u8; GCM_TAG_LEN],
    ) -> Result<(), CryptError> {
        same_len(input, output)?;
        match self {
            Self::Gcm(k) => k.seal(
                nonce,
                aad,
                input.as_ptr(),
                output.as_mut_ptr(),
                input.len(),
                tag,
            ),
            Self::Aegis(k) => {
                let mut c = k.cipher(nonce);
                let mut enc = c.encryptor(aad);
                enc.update(input, output);
                *tag = enc.finalize();
                wipe_aegis(&mut c);
                Ok(())
            }
        }
    }

    /// [`Self::seal`] in place.
    pub(crate) fn seal_in_place(
        &self,
        nonce: &[u8; GCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &mut [u8; GCM_TAG_LEN],
    ) -> Result<(), CryptError> {
        match self {
            Self::Gcm(k) => {
                let ptr = buf.as_mut_ptr();
                k.seal(nonce, aad, ptr, ptr, buf.len(), tag)
            }
            Self::Aegis(k) => {
                let mut c = k.cipher(nonce);
                let mut enc = c.encryptor(aad);
                enc.update_in_place(buf);
                *tag = enc.finalize();
                wipe_aegis(&mut c);
                Ok(())
            }
        }
    }

    /// Verify and decrypt `input` into `output` (same length). On [`CryptError::Integrity`]
    /// `output` is zeroed.
    pub(crate) fn open(
        &self,
        nonce: &[u8; GCM_NONCE_LEN],
        aad: &[u8],
        input: &[u8],
        output: &mut [u8],
        tag: &[u8; GCM_TAG_LEN],
    ) -> Result<(), CryptError> {
        same_len(input, output)?;
        let result = match self {
            Self::Gcm(k) => k.open(
                nonce,
                aad,
                input.as_ptr(),
                output.as_mut_ptr(),
                input.len(),
                tag,
            ),
            Self::Aegis(k) => {
                let mut c = k.cipher(nonce);
                let mut dec = c.decryptor(aad, output);
                let result = match dec.update(input) {
                    Ok(()) => dec.finalize(tag).map(|_| ()),
                    Err(e) => Err(e),
                }
                .map_err(|_| CryptError::Integrity);
                wipe_aegis(&mut c);
                result
            }
        };
        if result.is_err() {
            output.zeroize();
        }
        result
    }

    /// [`Self::open`] in place. On [`CryptError::Integrity`] `buf` is zeroed.
    pub(crate) fn open_in_place(
        &self,
        nonce: &[u8; GCM_NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; GCM_TAG_LEN],
    ) -> Result<(), CryptError> {
        let result = match self {
            Self::Gcm(k) => {
                let ptr = buf.as_mut_ptr();
                k.open(nonce, aad, ptr, ptr, buf.len(), tag)
            }
            Self::Aegis(k) => {
                let mut c = k.cipher(nonce);
                let result = c
                    .decrypt_in_place(buf, tag, aad)
                    .map_err(|_| CryptError::Integrity);
                wipe_aegis(&mut c);
                result
            }
        };
        if result.is_err() {
            buf.zeroize();
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn both(key: &[u8; 32]) -> Vec<PageAead> {
        AeadCipher::ALL
            .iter()
            .map(|&c| PageAead::new(c, key).unwrap())
            .collect()
    }

    /// AEGIS-256X4 as this module calls it gives what the crate's one-shot API gives for the
    /// same key, zero-extended nonce and associated data (guards the nonce extension and the
    /// streaming calls), and its ciphertext is not GCM's.
    #[test]
    fn aegis_matches_the_crates_one_shot_api() {
        let key = [0x42u8; 32];
        let nonce: [u8; 12] = core::array::from_fn(|i| i as u8 + 1);
        let aad = b"pmo-pg/v1 and more";
        let pt: Vec<u8> = (0..4096).map(|i| (i * 7 % 256) as u8).collect();
        let a = PageAead::new(AeadCipher::Aegis256X4, &key).unwrap();
        let mut ours = vec![0u8; pt.len()];
        let mut tag = [0u8; 16];
        a.seal(&nonce, aad, &pt, &mut ours, &mut tag).unwrap();
        let mut n32 = [0u8; 32];
        n32[..12].copy_from_slice(&nonce);
        let (theirs, ttag) = Aegis256X4::new(&key, &n32).encrypt(&pt, aad);
        assert_eq!(ours, theirs);
        assert_eq!(tag, ttag);
        let g = PageAead::new(AeadCipher::Aes256Gcm, &key).unwrap();
        let mut gcm = vec![0u8; pt.len()];
        g.seal(&nonce, aad, &pt, &mut gcm, &mut tag).unwrap();
        assert_ne!(gcm, ours);
    }

    #[test]
    fn lengths_must_match() {
        for a in both(&[1; 32]) {
            let mut tag = [0u8; 16];
            let mut out = [0u8; 8];
            assert!(matches!(
                a.seal(&[0; 12], b"", &[0u8; 9], &mut out, &mut tag),
                Err(CryptError::Backend(_))
            ));
            assert!(matches!(
                a.open(&[0; 12], b"", &[0u8; 9], &mut out, &tag),
                Err(CryptError::Backend(_))
            ));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Under either cipher: out of place and in place agree, the message opens back, and a
        /// flipped bit anywhere (ciphertext, tag, nonce, associated data) fails and zeroes.
        #[test]
        fn every_cipher_round_trips_and_catches_any_flip(
            key in any::<[u8; 32]>(),
            nonce in any::<[u8; 12]>(),
            aad in proptest::collection::vec(any::<u8>(), 0..64),
            pt in proptest::collection::vec(any::<u8>(), 1..600),
            which in 0usize..4,
            bit in any::<u32>(),
        ) {
            for a in both(&key) {
                let mut ct = vec![0u8; pt.len()];
                let mut tag = [0u8; 16];
                a.seal(&nonce, &aad, &pt, &mut ct, &mut tag).unwrap();
                let mut inplace = pt.clone();
                let mut tag2 = [0u8; 16];
                a.seal_in_place(&nonce, &aad, &mut inplace, &mut tag2).unwrap();
                prop_assert_eq!(&inplace, &ct);
                prop_assert_eq!(tag, tag2);
                let mut back = vec![0u8; pt.len()];
                a.open(&nonce, &aad, &ct, &mut back, &tag).unwrap();
                prop_assert_eq!(&back, &pt);
                let (mut c2, mut t2, mut n2, mut a2) = (ct.clone(), tag, nonce, aad.clone());
                match which {
                    0 => {
                        let at = bit as usize % c2.len();
                        c2[at] ^= 1 << (bit % 8);
                    }
                    1 => t2[bit as usize % 16] ^= 1 << (bit % 8),
                    2 => n2[bit as usize % 12] ^= 1 << (bit % 8),
                    _ => a2.push(bit as u8),
                }
                let mut out = vec![0xFFu8; pt.len()];
                prop_assert_eq!(a.open(&n2, &a2, &c2, &mut out, &t2), Err(CryptError::Integrity));
                prop_assert!(out.iter().all(|&b| b == 0));
                prop_assert_eq!(
                    a.open_in_place(&n2, &a2, &mut c2, &t2),
                    Err(CryptError::Integrity)
                );
                prop_assert!(c2.iter().all(|&b| b == 0));
            }
        }
    }
}
