//! Secure-mode page sealing: the PMO's page AEAD (AES-256-GCM or AEGIS-256X4, [`crate::cipher`])
//! per page, nonce from the page's version, associated data binding (pool, PMO, page index,
//! version).
//!
//! Owns the nonce and associated-data encodings (both are format: changing them makes old PMOs
//! unreadable).
//!
//! ```text
//! nonce (12 B) = page_index as u32 LE | version as u64 LE   (AEGIS-256X4: then 20 zero bytes)
//! aad   (57 B) = "pmo-pg/v1" (9) | pool_uuid (16) | pmo_uuid (16)
//!                | page_index u64 LE (8) | version u64 LE (8)
//! ```
//!
//! Nonce argument: the key is unique to (master key, pool, PMO) (HKDF info). Under that key, the
//! store seals a page only with a version freshly drawn from the PMO's [`crate::VersionCounter`],
//! which never hands out a value twice, even across crashes, because it persists a reservation
//! before using it. So every (page_index, version) pair, hence every nonce, is used for at most
//! one plaintext. (Versions are unique per PMO, not just per page; the index in the nonce is
//! redundant defence.)
//!
//! Invariants: no allocation on any function here (they run in the fault handler); a failed open
//! zeroes its output.

use crate::error::CryptError;
use crate::ffi::{GCM_NONCE_LEN, GCM_TAG_LEN};
use crate::keys::{PmoKeys, Uuid};
use crate::Page;

/// Length of a page tag in bytes.
pub const TAG_LEN: usize = GCM_TAG_LEN;

/// Domain string at the head of the associated data (format version of the page encoding).
const AAD_DOMAIN: &[u8; 9] = b"pmo-pg/v1";
const AAD_LEN: usize = AAD_DOMAIN.len() + 16 + 16 + 8 + 8;

/// The 16-byte GCM tag of a sealed page; the store keeps it in the page's metadata.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Tag(pub [u8; TAG_LEN]);

/// Everything a page's ciphertext is bound to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PageCtx {
    /// The pool the PMO lives in.
    pub pool_uuid: Uuid,
    /// The PMO the page belongs to.
    pub pmo_uuid: Uuid,
    /// The page's index within the PMO (must fit 32 bits).
    pub page_index: u64,
    /// The page's version, as recorded in the authenticated version table.
    pub version: u64,
}

impl PageCtx {
    fn nonce(&self) -> Result<[u8; GCM_NONCE_LEN], CryptError> {
        let index =
            u32::try_from(self.page_index).map_err(|_| CryptError::PageIndexOutOfRange {
                page_index: self.page_index,
            })?;
        let mut nonce = [0u8; GCM_NONCE_LEN];
        nonce[..4].copy_from_slice(&index.to_le_bytes());
        nonce[4..].copy_from_slice(&self.version.to_le_bytes());
        Ok(nonce)
    }

    fn aad(&self) -> [u8; AAD_LEN] {
        let mut aad = [0u8; AAD_LEN];
        let mut at = 0;
        for part in [&AAD_DOMAIN[..], &self.pool_uuid, &self.pmo_uuid] {
            aad[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        aad[at..at + 8].copy_from_slice(&self.page_index.to_le_bytes());
        aad[at + 8..at + 16].copy_from_slice(&self.version.to_le_bytes());
        aad
    }

    fn check(&self, keys: &PmoKeys) -> Result<([u8; GCM_NONCE_LEN], [u8; AAD_LEN]), CryptError> {
        if self.pool_uuid != keys.pool_uuid || self.pmo_uuid != keys.pmo_uuid {
            return Err(CryptError::ContextMismatch);
        }
        Ok((self.nonce()?, self.aad()))
    }
}

/// Encrypt `plaintext` into `out` and return the tag binding it to `ctx`.
///
/// `ctx.version` must be fresh from the PMO's [`crate::VersionCounter`] (see the module's nonce
/// argument). Errors: [`CryptError::ContextMismatch`] if `ctx` names another pool/PMO than
/// `keys`, [`CryptError::PageIndexOutOfRange`] past 2^32 pages. Does not allocate.
pub fn seal_page(
    keys: &PmoKeys,
    ctx: &PageCtx,
    plaintext: &Page,
    out: &mut Page,
) -> Result<Tag, CryptError> {
    let (nonce, aad) = ctx.check(keys)?;
    let mut tag = Tag::default();
    keys.page_aead
        .seal(&nonce, &aad, plaintext, out, &mut tag.0)?;
    Ok(tag)
}

/// [`seal_page`] with the plaintext replaced by its ciphertext in place.
pub fn seal_page_in_place(
    keys: &PmoKeys,
    ctx: &PageCtx,
    page: &mut Page,
) -> Result<Tag, CryptError> {
    let (nonce, aad) = ctx.check(keys)?;
    let mut tag = Tag::default();
    keys.page_aead
        .seal_in_place(&nonce, &aad, page, &mut tag.0)?;
    Ok(tag)
}

/// Verify and decrypt `sealed` into `out`.
///
/// Returns [`CryptError::Integrity`] (and leaves `out` all zero) if the ciphertext or tag was
/// modified, or if it was sealed under any other (pool, PMO, page index, version) or key: this
/// is how a moved, transplanted or rolled-back page is caught. Does not allocate on success.
pub fn open_page(
    keys: &PmoKeys,
    ctx: &PageCtx,
    sealed: &Page,
    tag: &Tag,
    out: &mut Page,
) -> Result<(), CryptError> {
    let (nonce, aad) = ctx.check(keys)?;
    // A failed open zeroes `out` (the cipher layer's invariant).
    keys.page_aead.open(&nonce, &aad, sealed, out, &tag.0)
}

/// [`open_page`] in place: on success `page` holds the plaintext; on failure it is zeroed (the
/// ciphertext is lost, so call this on a private copy, not on the only copy on the medium).
pub fn open_page_in_place(
    keys: &PmoKeys,
    ctx: &PageCtx,
    page: &mut Page,
    tag: &Tag,
) -> Result<(), CryptError> {
    let (nonce, aad) = ctx.check(keys)?;
    keys.page_aead.open_in_place(&nonce, &aad, page, &tag.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MasterKey;
    use crate::PAGE_SIZE;

    fn keys() -> PmoKeys {
        PmoKeys::derive(&MasterKey::from_bytes([5; 32]), [1; 16], [2; 16]).unwrap()
    }

    fn ctx(page_index: u64, version: u64) -> PageCtx {
        PageCtx {
            pool_uuid: [1; 16],
            pmo_uuid: [2; 16],
            page_index,
            version,
        }
    }

    #[test]
    fn round_trip_out_of_place_and_in_place_agree() {
        let k = keys();
        let pt: Page = core::array::from_fn(|i| (i % 251) as u8);
        let mut ct = [0u8; PAGE_SIZE];
        let tag = seal_page(&k, &ctx(7, 9), &pt, &mut ct).unwrap();
        assert_ne!(ct, pt);
        let mut inplace = pt;
        let tag2 = seal_page_in_place(&k, &ctx(7, 9), &mut inplace).unwrap();
        assert_eq!(inplace, ct);
        assert_eq!(tag, tag2);
        let mut back = [0u8; PAGE_SIZE];
        open_page(&k, &ctx(7, 9), &ct, &tag, &mut back).unwrap();
        assert_eq!(back, pt);
        open_page_in_place(&k, &ctx(7, 9), &mut inplace, &tag).unwrap();
        assert_eq!(inplace, pt);
    }

    /// The raw AWS-LC path gives exactly what aws-lc-rs's safe AES-256-GCM gives for the same
    /// key, nonce and associated data (guards the FFI call: lengths, tag, out-of-place).
    #[test]
    fn matches_aws_lc_rs_safe_api() {
        use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
        let master = MasterKey::from_bytes([5; 32]);
        let k = PmoKeys::derive(&master, [1; 16], [2; 16]).unwrap();
        let mut key = [0u8; 32];
        master
            .expand(crate::keys::label::PAGE_AEAD, &[1; 16], &[2; 16], &mut key)
            .unwrap();
        let safe = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &key).unwrap());
        let c = ctx(0xBEEF, 0x1234_5678_9ABC);
        let pt: Page = core::array::from_fn(|i| (i * 3 % 256) as u8);
        let mut ours = [0u8; PAGE_SIZE];
        let tag = seal_page(&k, &c, &pt, &mut ours).unwrap();
        let mut theirs = pt;
        let t = safe
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(c.nonce().unwrap()),
                Aad::from(c.aad()),
                &mut theirs,
            )
            .unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(&tag.0[..], t.as_ref());
    }

    #[test]
    fn nonce_and_aad_encoding() {
        let c = ctx(0x0102_0304, 0x1122_3344_5566_7788);
        assert_eq!(
            c.nonce().unwrap(),
            [4, 3, 2, 1, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]
        );
        let aad = c.aad();
        assert_eq!(&aad[..9], AAD_DOMAIN);
        assert_eq!(&aad[9..25], &[1; 16]);
        assert_eq!(&aad[25..41], &[2; 16]);
        assert_eq!(&aad[41..49], &0x0102_0304u64.to_le_bytes());
        assert_eq!(&aad[49..57], &0x1122_3344_5566_7788u64.to_le_bytes());
    }

    #[test]
    fn index_past_32_bits_is_refused() {
        let k = keys();
        let pt = [0u8; PAGE_SIZE];
        let mut ct = [0u8; PAGE_SIZE];
        let err = seal_page(&k, &ctx(1 << 32, 1), &pt, &mut ct).unwrap_err();
        assert_eq!(
            err,
            CryptError::PageIndexOutOfRange {
                page_index: 1 << 32
            }
        );
    }

    #[test]
    fn context_for_other_pmo_is_refused() {
        let k = keys();
        let pt = [0u8; PAGE_SIZE];
        let mut ct = [0u8; PAGE_SIZE];
        let mut c = ctx(1, 1);
        c.pmo_uuid = [3; 16];
        assert_eq!(
            seal_page(&k, &c, &pt, &mut ct),
            Err(CryptError::ContextMismatch)
        );
    }

    #[test]
    fn failed_open_zeroes_output() {
        let k = keys();
        let pt = [0x5A_u8; PAGE_SIZE];
        let mut ct = [0u8; PAGE_SIZE];
        let tag = seal_page(&k, &ctx(1, 1), &pt, &mut ct).unwrap();
        ct[100] ^= 1;
        let mut out = [0xFF_u8; PAGE_SIZE];
        assert_eq!(
            open_page(&k, &ctx(1, 1), &ct, &tag, &mut out),
            Err(CryptError::Integrity)
        );
        assert!(out.iter().all(|&b| b == 0));
        assert_eq!(
            open_page_in_place(&k, &ctx(1, 1), &mut ct, &tag),
            Err(CryptError::Integrity)
        );
        assert!(ct.iter().all(|&b| b == 0));
    }
}
